/* bf16 kernels on AVX512-BF16: vdpbf16ps for the pair products (semantics in bf16_internal.h),
 * vcvtneps2bf16 for the rounding. The only file compiled with -mavx512bf16. */
#include <immintrin.h>

#define BF16_FN(name) name##_bf16
#define BF16_DP(c, x, b) _mm512_dpbf16_ps(c, (__m512bh)(x), (__m512bh)(b))
#define BF16_CVT16(v) ((__m256i)_mm512_cvtneps_pbh(v))
#define BF16_CVT32(hi, lo) ((__m512i)_mm512_cvtne2ps_pbh(hi, lo))
#define BF16_EMULATED 0
#define BF16_ENTER()
#define BF16_LEAVE()
#include "bf16_avx512_body.h"

const attn_bf16_kernels *attn_bf16_kernels_avx512bf16(void) {
    static const attn_bf16_kernels k = {.name = "avx512bf16",
                                        .unit = ATTN_BF16_UNIT_DPBF16PS,
                                        .fused_softmax_tile = ATTN_SOFTMAX_TILE_AVX512,
                                        .gemm_pairs = gemm_pairs_bf16,
                                        .pair_rows_f32 = pair_rows_f32_bf16,
                                        .pair_tile_grads = pair_tile_grads_bf16,
                                        .pair_rows_bf16 = pair_rows_bf16_bf16,
                                        .round_row = round_row_bf16,
                                        .softmax_pairs = softmax_pairs_bf16,
                                        .probs_ds_pairs = probs_ds_pairs_bf16};
    return &k;
}

/* vdpbf16ps peak: 16 independent zmm chains, each instruction 16 lanes x 2 products (4 flops).
 * Zen 5 issues two per cycle at a latency of about 6 cycles: 12 chains measured 452-459 GFLOP/s
 * there (1.8x the FMA peak, latency-bound), 16 and 24 chains 496-504 (2.0x). */
#define DP(x) x = _mm512_dpbf16_ps(x, a, b)
float attn_dpbf16_loop_avx512bf16(int64_t iters, int *chains, int *lanes) {
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x38003800);
    __m512 x0 = _mm512_set1_ps(0), x1 = _mm512_set1_ps(1), x2 = _mm512_set1_ps(2), x3 = _mm512_set1_ps(3),
           x4 = _mm512_set1_ps(4), x5 = _mm512_set1_ps(5), x6 = _mm512_set1_ps(6), x7 = _mm512_set1_ps(7),
           x8 = _mm512_set1_ps(8), x9 = _mm512_set1_ps(9), x10 = _mm512_set1_ps(10), x11 = _mm512_set1_ps(11),
           x12 = _mm512_set1_ps(12), x13 = _mm512_set1_ps(13), x14 = _mm512_set1_ps(14), x15 = _mm512_set1_ps(15);
    for (int64_t i = 0; i < iters; i++) {
        DP(x0);
        DP(x1);
        DP(x2);
        DP(x3);
        DP(x4);
        DP(x5);
        DP(x6);
        DP(x7);
        DP(x8);
        DP(x9);
        DP(x10);
        DP(x11);
        DP(x12);
        DP(x13);
        DP(x14);
        DP(x15);
    }
    __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                             _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(x6, x7)));
    t = _mm512_add_ps(t, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x8, x9), _mm512_add_ps(x10, x11)),
                                       _mm512_add_ps(_mm512_add_ps(x12, x13), _mm512_add_ps(x14, x15))));
    *chains = 16;
    *lanes = 16;
    return _mm512_reduce_add_ps(t);
}
