/* The dispatch context: feature bits detected once and consistent with attn_cpu_features();
 * one context per ISA whose tables all belong to that ISA, the same object on every call;
 * attn_force_isa (and ATTN_ISA) switch contexts. */
#include <stdlib.h>
#include <string.h>

#include "attn/introspect.h"
#include "kernels/registry.h"
#include "kernels/bf16_internal.h"
#include "kernels/gemm_internal.h"
#include "kernels/ops_internal.h"
#include "test_util.h"

/* Every slot an init function must fill: an ISA's init that forgets one would silently run the
 * portable kernel there (the registry starts each context from the reference), so each init is
 * run alone on an empty context here. Peak loops other than the FMA one are optional. */
static void check_init_fills_every_slot(void) {
    for (int isa = 0; isa < ATTN_ISA_COUNT; isa++) {
        const attn_isa_row *r = attn_isa_registry_row((attn_isa)isa);
        if (!r) {
            printf("  notice: %s is not built here (not x86): its init is not checked\n", attn_isa_name((attn_isa)isa));
            continue;
        }
        CHECK(r->isa == (attn_isa)isa && !strcmp(r->name, attn_isa_name((attn_isa)isa)), "registry row %d: %s", isa,
              r->name);
        if ((attn_cpu_feature_bits() & r->required) != r->required) {
            /* an init may probe the CPU (AMX's tile state, cpuid): run it only where it can run */
            printf("  notice: this CPU lacks %s: its init is not run\n", r->name);
            continue;
        }
        attn_kernel_ctx c;
        memset(&c, 0, sizeof c);
        r->init(&c);
        const void *slots[] = {c.gemm_base, c.ops, c.flash, c.bf16, c.decode, c.linear_vec};
        static const char *const names[] = {"gemm", "ops", "flash", "bf16", "decode", "linear_vec"};
        for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
            CHECK(slots[i] != NULL, "%s: its init leaves the %s slot empty", r->name, names[i]);
        CHECK(c.peak_fma != NULL, "%s: its init leaves the peak_fma slot empty", r->name);
        /* and every entry of the tables the ISA chose */
        CHECK(c.flash && c.flash->gemm && c.flash->softmax_update && c.flash->probs_and_ds &&
                  c.flash->softmax_update_bf16 && c.flash->probs_and_ds_bf16 && c.flash->pack_transposed &&
                  c.flash->scale_copy_rows,
              "%s: flash table with an empty entry", r->name);
        CHECK(c.bf16 && c.bf16->gemm_pairs && c.bf16->pair_rows_f32 && c.bf16->pair_tile_grads &&
                  c.bf16->pair_rows_bf16 && c.bf16->round_row && !!c.bf16->softmax_pairs == !!c.bf16->probs_ds_pairs &&
                  (!c.bf16->softmax_pairs || c.bf16->fused_softmax_tile != ATTN_SOFTMAX_TILE_OWN),
              "%s: bf16 table with an empty entry", r->name);
        CHECK(c.decode && c.decode->chunk_f32 && c.decode->chunk_bf16, "%s: decode table with an empty entry", r->name);
        CHECK(c.linear_vec && c.linear_vec->elu1 && c.linear_vec->elu1_bwd && c.linear_vec->expsc &&
                  c.linear_vec->submax && c.linear_vec->ydiv && c.linear_vec->edot && c.linear_vec->all_finite,
              "%s: linear_vec table with an empty entry", r->name);
        /* (pack_a / pack_b NULL: the generic packing) */
        CHECK(c.gemm_base && c.gemm_base->ukr && c.gemm_base->mr > 0 && c.gemm_base->kc > 0 && c.gemm_base->nr > 0,
              "%s: gemm table with an empty entry", r->name);
        printf("  %s: init fills every slot (flash %s, bf16 %s)\n", r->name, c.flash->name, c.bf16->name);
    }
    /* the public view of the same rows */
    for (int isa = 0; isa < ATTN_ISA_COUNT; isa++) {
        attn_isa_desc d;
        CHECK_OK(attn_isa_describe((attn_isa)isa, &d));
        const attn_isa_row *r = attn_isa_registry_row((attn_isa)isa);
        CHECK(!strcmp(d.name, attn_isa_name((attn_isa)isa)) && d.built == (r != NULL) &&
                  d.runnable == (r && (attn_cpu_feature_bits() & r->required) == r->required) &&
                  (!d.runnable || isa <= (int)attn_detected_isa()),
              "attn_isa_describe(%d) disagrees with the registry", isa);
    }
    attn_isa_desc d;
    CHECK(attn_isa_describe((attn_isa)ATTN_ISA_COUNT, &d) == ATTN_ERR_INVALID_ARGUMENT,
          "an ISA past the registry accepted");
    CHECK(attn_isa_describe(ATTN_ISA_REF, NULL) == ATTN_ERR_INVALID_ARGUMENT, "a NULL out accepted");
}

int main(void) {
    check_init_fills_every_slot();
    const uint32_t f = attn_cpu_feature_bits();
    CHECK(f == attn_cpu_feature_bits(), "feature bits change between calls");
    const char *s = attn_cpu_features();
    CHECK(!!(f & ATTN_CPU_AVX2) == !!strstr(s, "avx2") && !!(f & ATTN_CPU_AVX512F) == !!strstr(s, "avx512f") &&
              !!(f & ATTN_CPU_AVX512BF16) == !!strstr(s, "avx512bf16") &&
              !!(f & ATTN_CPU_AMX_BF16) == !!strstr(s, "amx-bf16"),
          "feature bits %#x disagree with '%s'", f, s);
    printf("  features %#x: %s; detected ISA %s\n", f, s, attn_isa_name(attn_detected_isa()));
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        const attn_kernel_ctx *c = attn_kernel_ctx_active();
        CHECK(c == attn_kernel_ctx_active() && c == attn_kernel_ctx_for((attn_isa)isa), "%s: context not shared",
              attn_isa_name((attn_isa)isa));
        CHECK(c->isa == (attn_isa)isa && c->features == f && !strcmp(c->name, attn_isa_name((attn_isa)isa)),
              "%s: context isa/features", attn_isa_name((attn_isa)isa));
        CHECK(!strcmp(c->ops->name, c->name) && !strncmp(c->flash->name, c->name, strlen(c->name)) &&
                  !strcmp(c->decode->name, c->name) && !strcmp(c->gemm_base->name, c->name) &&
                  c->gemm == attn_gemm_arch_active() && c->gemm == &c->gemm_tuned,
              "%s: a table of another ISA in the context (ops %s, flash %s, decode %s, gemm %s)",
              attn_isa_name((attn_isa)isa), c->ops->name, c->flash->name, c->decode->name, c->gemm_base->name);
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
        const char *want = isa == ATTN_ISA_AVX2        ? emulated2
                           : isa != ATTN_ISA_AVX512    ? "ref"
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
