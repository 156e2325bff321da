/* The dispatch context: feature bits detected once and consistent with attn_cpu_features();
 * one context per ISA whose tables all belong to that ISA, the same object on every call;
 * attn_force_isa (and ATTN_ISA) switch contexts. */
#include <stdlib.h>
#include <string.h>

#include "attention/flash_internal.h"
#include "core/dispatch.h"
#include "kernels/bf16_internal.h"
#include "kernels/gemm_internal.h"
#include "kernels/ops_internal.h"
#include "test_util.h"

int main(void) {
    const uint32_t f = attn_cpu_feature_bits();
    CHECK(f == attn_cpu_feature_bits(), "feature bits change between calls");
    const char *s = attn_cpu_features();
    CHECK(!!(f & ATTN_CPU_AVX2) == !!strstr(s, "avx2") && !!(f & ATTN_CPU_AVX512F) == !!strstr(s, "avx512f") &&
              !!(f & ATTN_CPU_AVX512BF16) == !!strstr(s, "avx512bf16") && !!(f & ATTN_CPU_AMX_BF16) == !!strstr(s, "amx-bf16"),
          "feature bits %#x disagree with '%s'", f, s);
    printf("  features %#x: %s; detected ISA %s\n", f, s, attn_isa_name(attn_detected_isa()));
    for (int isa = 0; isa <= (int)attn_detected_isa(); isa++) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        const attn_kernel_ctx *c = attn_kernel_ctx_active();
        CHECK(c == attn_kernel_ctx_active() && c == attn_kernel_ctx_for((attn_isa)isa), "%s: context not shared", attn_isa_name((attn_isa)isa));
        CHECK(c->isa == (attn_isa)isa && c->features == f, "%s: context isa/features", attn_isa_name((attn_isa)isa));
        CHECK(c->ops->isa == (attn_isa)isa && c->flash->isa == (attn_isa)isa && c->gemm == attn_gemm_arch_active(),
              "%s: a table of another ISA in the context", attn_isa_name((attn_isa)isa));
        /* AVX-512: vdpbf16ps (or AMX) with AVX512-BF16, its FMA emulation without; AVX2: the
         * emulation in AVX2 registers; else portable */
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
        const char *emulated = attn_bf16_kernels_avx512()->name, *emulated2 = attn_bf16_kernels_avx2()->name;
#else
        const char *emulated = "ref", *emulated2 = "ref"; /* no AVX2 or AVX-512 context off x86 */
#endif
        /* with AVX512-BF16: AMX tiles where granted, else vdpbf16ps or its emulation, as
         * attn_bf16_kernels_avx512_pairs chooses (by vendor, or ATTN_VDPBF16PS) */
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
        const char *pairs = attn_bf16_kernels_avx512_pairs(NULL)->name;
        if (isa == ATTN_ISA_AVX512 && (f & ATTN_CPU_AVX512BF16) && attn_bf16_kernels_try_amx() &&
            !(getenv("ATTN_AMX") && !strcmp(getenv("ATTN_AMX"), "0")))
            pairs = "amx";
#else
        const char *pairs = "ref";
#endif
        const char *want = isa == ATTN_ISA_AVX2 ? emulated2
                           : isa != ATTN_ISA_AVX512 ? "ref"
                           : (f & ATTN_CPU_AVX512BF16) ? pairs
                                                       : emulated;
        CHECK(!strcmp(c->bf16->name, want), "%s: bf16 kernels %s, want %s", attn_isa_name((attn_isa)isa), c->bf16->name,
              want);
        /* the unit the table says runs its products (what bench and train read) agrees with the table */
        const attn_bf16_unit unit = !strcmp(c->bf16->name, "amx")          ? ATTN_BF16_UNIT_AMX
                                    : !strcmp(c->bf16->name, "avx512bf16") ? ATTN_BF16_UNIT_DPBF16PS
                                                                           : ATTN_BF16_UNIT_FMA;
        CHECK(c->bf16->unit == unit, "%s: bf16 kernels %s say unit %d, want %d", attn_isa_name((attn_isa)isa),
              c->bf16->name, (int)c->bf16->unit, (int)unit);
        printf("  %s: bf16 kernels %s\n", attn_isa_name((attn_isa)isa), c->bf16->name);
    }
    attn_force_isa(attn_detected_isa());
    return test_summary("test_dispatch");
}
