/* Portable bf16 kernels: a bit-exact emulation of vdpbf16ps (see bf16_internal.h), the oracle the
 * fast kernels are tested against. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "bf16_internal.h"
#include "kernels/registry.h"
#include "core/tuning.h"

static inline float ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

/* One vdpbf16ps lane step: the high pair's product first; subnormal bf16 inputs and a subnormal
 * accumulator read as 0, subnormal sums are flushed, products are not (measured on Zen 4: a
 * subnormal product added to a normal sum counts). Each step rounds once, the exact product plus
 * the accumulator (fmaf): a product below the normal range has more bits than a float subnormal
 * holds, and rounding it first gave a last-bit difference from vdpbf16ps in about 3% of CI's
 * random near-subnormal cases. The hardware's results past the float range (an infinite product
 * followed by an opposite one) are not emulated. */
static inline float dp_step(float c, uint32_t x, uint32_t y) {
    const float xh = ftz(attn_bf16_f((uint16_t)(x >> 16))), yh = ftz(attn_bf16_f((uint16_t)(y >> 16)));
    const float xl = ftz(attn_bf16_f((uint16_t)x)), yl = ftz(attn_bf16_f((uint16_t)y));
    c = ftz(fmaf(xh, yh, ftz(c)));
    return ftz(fmaf(xl, yl, c));
}

static void gemm_pairs_ref(int m, int n, int kp, const uint32_t *a, int64_t ars, int64_t acs, const uint32_t *b,
                           int64_t ldb, float *c, int64_t ldc, int accumulate, const float *rowscale, float outscale) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = accumulate ? c[i * ldc + j] * (rowscale ? rowscale[i] : 1.0f) : 0.0f;
            for (int p = 0; p < kp; p++) s = dp_step(s, a[i * ars + p * acs], b[p * ldb + j]);
            c[i * ldc + j] = s * outscale;
        }
}

static void pair_rows_f32_ref(int rows, int cols, const float *src, int64_t lds, uint32_t *dst, int64_t ldd) {
    for (int p = 0; p < (rows + 1) / 2; p++)
        for (int j = 0; j < cols; j++) {
            const uint16_t lo = attn_bf16_rne_daz(src[2 * p * lds + j]);
            const uint16_t hi = 2 * p + 1 < rows ? attn_bf16_rne_daz(src[(2 * p + 1) * lds + j]) : 0;
            dst[p * ldd + j] = attn_pair(lo, hi);
        }
}

static void pair_cols_f32_ref(int rows, int cols, const float *src, int64_t lds, uint32_t *dst, int64_t ldd) {
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < (cols + 1) / 2; p++)
            dst[r * ldd + p] = attn_pair(attn_bf16_rne_daz(src[r * lds + 2 * p]),
                                         2 * p + 1 < cols ? attn_bf16_rne_daz(src[r * lds + 2 * p + 1]) : 0);
}

static void pair_tile_grads_ref(int rows, int cols, const float *p, const float *ds, int64_t ld, uint32_t *pw,
                                uint32_t *dsw, int64_t ldw, uint32_t *dsv, int64_t ldv) {
    pair_cols_f32_ref(rows, cols, p, ld, pw, ldw);
    pair_cols_f32_ref(rows, cols, ds, ld, dsw, ldw);
    if (dsv) pair_rows_f32_ref(rows, cols, ds, ld, dsv, ldv);
}

static void pair_rows_bf16_ref(int rows, int cols, const uint16_t *src, int64_t lds, uint32_t *dst, int64_t ldd) {
    for (int p = 0; p < (rows + 1) / 2; p++)
        for (int j = 0; j < cols; j++)
            dst[p * ldd + j] = attn_pair(src[2 * p * lds + j], 2 * p + 1 < rows ? src[(2 * p + 1) * lds + j] : 0);
}

static void round_row_ref(int n, const float *src, const float *f, uint16_t *dst) {
    for (int i = 0; i < n; i++) dst[i] = attn_bf16_rne_daz(f ? src[i] * *f : src[i]);
}

const attn_bf16_kernels *attn_bf16_kernels_ref(void) {
    /* no fused flash steps: the driver runs the flash kernels' softmax, then these roundings */
    static const attn_bf16_kernels k = {.name = "ref",
                                        .unit = ATTN_BF16_UNIT_FMA,
                                        .fused_softmax_tile = ATTN_SOFTMAX_TILE_OWN,
                                        .gemm_pairs = gemm_pairs_ref,
                                        .pair_rows_f32 = pair_rows_f32_ref,
                                        .pair_tile_grads = pair_tile_grads_ref,
                                        .pair_rows_bf16 = pair_rows_bf16_ref,
                                        .round_row = round_row_ref,
                                        .softmax_pairs = NULL,
                                        .probs_ds_pairs = NULL};
    return &k;
}

int attn_cpu_has_avx512bf16(void) { return (attn_cpu_feature_bits() & ATTN_CPU_AVX512BF16) != 0; }

#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
const attn_bf16_kernels *attn_bf16_kernels_avx512_pairs(const char **why) {
    const char *w;
    const attn_bf16_kernels *k;
    const char *e = getenv("ATTN_VDPBF16PS");
    const int intel = !strcmp(attn_cpu_uarch()->vendor, "GenuineIntel");
    if (!attn_cpu_has_avx512bf16()) {
        w = "no AVX512-BF16: vdpbf16ps emulated";
        k = attn_bf16_kernels_avx512();
    } else if (e && (!strcmp(e, "0") || !strcmp(e, "1"))) {
        w = e[0] == '1' ? "ATTN_VDPBF16PS=1" : "ATTN_VDPBF16PS=0";
        k = e[0] == '1' ? attn_bf16_kernels_avx512bf16() : attn_bf16_kernels_avx512();
    } else if (intel) {
        /* Sapphire and Emerald Rapids issue vdpbf16ps at half the FMA rate (bench peak: 79 / 153
         * and 81 / 174 GFLOP/s), where two FMAs per instruction run at the FMA rate: the emulation
         * measured 1.2-1.3x vdpbf16ps there (bf16 GEMM and flash, docs/performance-log.md section 13) */
        w = e ? "ATTN_VDPBF16PS is not 0 or 1, ignored; Intel: vdpbf16ps at half the FMA rate, emulated by FMAs"
              : "Intel: vdpbf16ps at half the FMA rate, emulated by FMAs (ATTN_VDPBF16PS=1 runs it)";
        k = attn_bf16_kernels_avx512();
    } else {
        /* Zen 4 and Zen 5 run vdpbf16ps at twice the FMA rate (docs/performance-log.md sections 0b, 9) */
        w = e ? "ATTN_VDPBF16PS is not 0 or 1, ignored; vdpbf16ps at twice the FMA rate on AMD Zen 4 / Zen 5"
              : "vdpbf16ps: twice the FMA rate on AMD Zen 4 / Zen 5 (ATTN_VDPBF16PS=0 emulates it)";
        k = attn_bf16_kernels_avx512bf16();
    }
    if (why) *why = w;
    return k;
}
#else
const attn_bf16_kernels *attn_bf16_kernels_avx512_pairs(const char **why) {
    if (why) *why = "no AVX-512 kernels in this build";
    return attn_bf16_kernels_ref();
}
#endif

static _Atomic(const attn_bf16_kernels *) forced;
void attn__bf16_force(const attn_bf16_kernels *k) { atomic_store(&forced, k); }

const attn_bf16_kernels *attn_bf16_kernels_active(void) {
    const attn_bf16_kernels *k = atomic_load_explicit(&forced, memory_order_relaxed);
    return k ? k : attn_kernel_ctx_active()->bf16;
}

const attn_bf16_kernels *attn_bf16_kernels_try_amx(void) {
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    return attn_cpu_has_avx512bf16() ? attn_bf16_kernels_amx() : NULL;
#else
    return NULL;
#endif
}
