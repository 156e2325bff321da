/* bf16 kernels on AVX-512F without AVX512-BF16 (Skylake-SP, Cascade Lake, Ice Lake-SP): the same
 * bodies as bf16_avx512bf16.c (bf16_avx512_body.h) with each instruction emulated bit for bit.
 *
 * vdpbf16ps step, per lane: c = ftz(daz(c) + xh yh) ; c = ftz(c + xl yl) (bf16_internal.h). A bf16
 * widened to float is exact (its bits in the high half), and the product of two is exact in
 * float, so each step is one FMA, rounded once, when DAZ and FTZ are set in MXCSR: DAZ reads the
 * subnormal inputs and accumulator as 0, FTZ flushes a subnormal sum, and the product inside the
 * FMA is never flushed, as the instruction's. Two FMAs per pair: the fp32 kernels' rate at best.
 * MXCSR is set only around the products (C's row and output scalings run under the caller's,
 * as around vdpbf16ps) and restored exactly, flags included (vdpbf16ps raises none).
 * vcvtneps2bf16: round to nearest even on the bits, subnormals to signed 0, NaN quieted. */
#include <immintrin.h>

static inline __m512 dp_emulated(__m512 c, __m512i x, __m512i b) {
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    c = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(x, hi)), _mm512_castsi512_ps(_mm512_and_si512(b, hi)), c);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)),
                           c);
}

static inline __m256i cvt16_emulated(__m512 v) {
    const __m512i u = _mm512_castps_si512(v), top = _mm512_srli_epi32(u, 16);
    const __mmask16 sub = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(top, _mm512_set1_epi32(1)));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    r = _mm512_mask_mov_epi32(r, sub, _mm512_and_si512(top, _mm512_set1_epi32(0x8000)));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(top, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

static inline __m512i cvt32_emulated(__m512 hi, __m512 lo) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(cvt16_emulated(lo)), cvt16_emulated(hi), 1);
}

/* The "memory" clobber orders the switch against the loads of C before the products and the
 * stores after them; every product reads operands loaded after it. */
#define BF16_ENTER()                                                                                                   \
    const unsigned csr_saved = _mm_getcsr(), csr_flush = csr_saved | 0x8040u; /* FTZ, DAZ */                           \
    __asm__ __volatile__("ldmxcsr %0" : : "m"(csr_flush) : "memory")
#define BF16_LEAVE() __asm__ __volatile__("ldmxcsr %0" : : "m"(csr_saved) : "memory")

#define BF16_FN(name) name##_avx512
#define BF16_DP(c, x, b) dp_emulated(c, x, b)
#define BF16_CVT16(v) cvt16_emulated(v)
#define BF16_CVT32(hi, lo) cvt32_emulated(hi, lo)
#define BF16_EMULATED 1
#include "bf16_avx512_body.h"

const attn_bf16_kernels *attn_bf16_kernels_avx512(void) {
    static const attn_bf16_kernels k = {.name = "avx512 (vdpbf16ps emulated by FMAs)",
                                        .unit = ATTN_BF16_UNIT_FMA,
                                        .fused_softmax_tile = ATTN_SOFTMAX_TILE_AVX512,
                                        .gemm_pairs = gemm_pairs_avx512,
                                        .pair_rows_f32 = pair_rows_f32_avx512,
                                        .pair_tile_grads = pair_tile_grads_avx512,
                                        .pair_rows_bf16 = pair_rows_bf16_avx512,
                                        .round_row = round_row_avx512,
                                        .softmax_pairs = softmax_pairs_avx512,
                                        .probs_ds_pairs = probs_ds_pairs_avx512};
    return &k;
}
