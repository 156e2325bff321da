/* The ISA registry (registry.h): the rows, detection, ATTN_ISA / attn_force_isa, and the kernel
 * contexts, built once per ISA on first use and then read lock-free. */
#include "registry.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/tuning.h"

#define AVX2_BITS (ATTN_CPU_AVX2 | ATTN_CPU_FMA)
#define AVX512_BITS (ATTN_CPU_AVX512F | ATTN_CPU_AVX512BW | ATTN_CPU_AVX512DQ | ATTN_CPU_AVX512VL | ATTN_CPU_FMA)

/* In order of preference: detection takes the last row the CPU can run. */
static const attn_isa_row rows[] = {
    [ATTN_ISA_REF] = {ATTN_ISA_REF, "ref", 0, attn_isa_init_ref},
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    [ATTN_ISA_AVX2] = {ATTN_ISA_AVX2, "avx2", AVX2_BITS, attn_isa_init_avx2},
    [ATTN_ISA_AVX512] = {ATTN_ISA_AVX512, "avx512", AVX512_BITS, attn_isa_init_avx512},
#else
    [ATTN_ISA_AVX2] = {ATTN_ISA_AVX2, "avx2", AVX2_BITS, NULL},
    [ATTN_ISA_AVX512] = {ATTN_ISA_AVX512, "avx512", AVX512_BITS, NULL},
#endif
};
_Static_assert(sizeof rows / sizeof rows[0] == ATTN_ISA_COUNT, "one registry row per attn_isa");

const attn_isa_row *attn_isa_registry_row(attn_isa isa) {
    if ((int)isa < 0 || (int)isa >= ATTN_ISA_COUNT || rows[isa].init == NULL) return NULL;
    return &rows[isa];
}

static int runnable(const attn_isa_row *r) { return r && (attn_cpu_feature_bits() & r->required) == r->required; }

attn_isa attn_detected_isa(void) {
    attn_isa best = ATTN_ISA_REF;
    for (int i = 0; i < ATTN_ISA_COUNT; i++)
        if (runnable(attn_isa_registry_row((attn_isa)i))) best = (attn_isa)i;
    return best;
}

const char *attn_isa_name(attn_isa isa) {
    return (int)isa >= 0 && (int)isa < ATTN_ISA_COUNT ? rows[isa].name : "unknown";
}

static int isa_forced = -1;
static int isa_env = -2; /* -2: not read yet, -1: none */

static int env_isa(void) {
    if (isa_env == -2) {
        const char *e = getenv("ATTN_ISA");
        isa_env = -1;
        for (int i = 0; e && i < ATTN_ISA_COUNT; i++)
            if (!strcmp(e, rows[i].name)) isa_env = i;
    }
    return isa_env;
}

/* A forced or requested ISA the CPU cannot run falls back to the detected one. */
attn_isa attn_active_isa(void) {
    const int want = isa_forced >= 0 ? isa_forced : env_isa();
    if (want >= 0 && runnable(attn_isa_registry_row((attn_isa)want))) return (attn_isa)want;
    return attn_detected_isa();
}

attn_status attn_force_isa(attn_isa isa) {
    if ((int)isa < 0 || (int)isa >= ATTN_ISA_COUNT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_force_isa: isa %d unknown", (int)isa);
    if (!runnable(attn_isa_registry_row(isa)))
        return attn_error(ATTN_ERR_UNSUPPORTED, "attn_force_isa: this CPU cannot run %s (best: %s)", attn_isa_name(isa),
                          attn_isa_name(attn_detected_isa()));
    isa_forced = (int)isa;
    return ATTN_OK;
}

static attn_kernel_ctx ctxs[ATTN_ISA_COUNT];
static atomic_int ready[ATTN_ISA_COUNT]; /* 0: not built, 1: being built, 2: ready */

static void build(attn_kernel_ctx *out, const attn_isa_row *r) {
    attn_kernel_ctx c;
    memset(&c, 0, sizeof c);
    c.isa = r->isa;
    c.name = r->name;
    c.features = attn_cpu_feature_bits();
    attn_isa_init_ref(&c);
    if (r->init != attn_isa_init_ref) r->init(&c);
    *out = c;
    out->gemm_tuned = attn_gemm_arch_blocked(c.gemm_base, attn_cpu_caches());
    out->gemm = &out->gemm_tuned;
}

const attn_kernel_ctx *attn_kernel_ctx_for(attn_isa isa) {
    const attn_isa_row *r = attn_isa_registry_row(isa);
    if (!runnable(r)) r = &rows[ATTN_ISA_REF];
    const int i = (int)r->isa;
    if (atomic_load_explicit(&ready[i], memory_order_acquire) == 2) return &ctxs[i];
    int expect = 0;
    if (atomic_compare_exchange_strong(&ready[i], &expect, 1)) {
        build(&ctxs[i], r);
        atomic_store_explicit(&ready[i], 2, memory_order_release);
    } else {
        while (atomic_load_explicit(&ready[i], memory_order_acquire) != 2) {}
    }
    return &ctxs[i];
}

const attn_kernel_ctx *attn_kernel_ctx_active(void) { return attn_kernel_ctx_for(attn_active_isa()); }
