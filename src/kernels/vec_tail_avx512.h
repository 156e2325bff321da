/* Tail-masked loads and stores for AVX-512 loops: the plain instruction when every lane is on,
 * the masked one only at a row's end.
 *
 * Why: on AMD Zen 5 a masked load costs more than a plain one even with an all-ones mask
 * (a streaming y += x loop: 1.5x the time with its data in L1, 2.3x from the L3; masked stores
 * cost 3-5%), so loops that mask every vector "to treat each element the same" paid for it on
 * every element. The branch is on the mask alone, which is all-ones until the last vector, so it
 * predicts; masked-off lanes still read 0 (or the given fill) and are never touched in memory.
 * Intel's cores run both forms at one rate, so this changes nothing there. */
#ifndef ATTN_VEC_TAIL_AVX512_H
#define ATTN_VEC_TAIL_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* lanes [0, r) of 16 (all of them for r >= 16) */
static inline __mmask16 attn_tail16(int64_t r) {
    return r >= 16 ? (__mmask16)0xFFFF : r <= 0 ? (__mmask16)0 : (__mmask16)((1u << r) - 1u);
}

static inline __mmask8 attn_tail8(int64_t r) {
    return r >= 8 ? (__mmask8)0xFF : r <= 0 ? (__mmask8)0 : (__mmask8)((1u << r) - 1u);
}

static inline __m512 attn_ld16(__mmask16 k, const float *p) {
    return k == (__mmask16)0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}

/* masked-off lanes take fill's */
static inline __m512 attn_ld16_or(__m512 fill, __mmask16 k, const float *p) {
    return k == (__mmask16)0xFFFF ? _mm512_loadu_ps(p) : _mm512_mask_loadu_ps(fill, k, p);
}

static inline void attn_st16(float *p, __mmask16 k, __m512 v) {
    if (k == (__mmask16)0xFFFF)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, k, v);
}

static inline __m512i attn_ld16_epi32(__mmask16 k, const void *p) {
    return k == (__mmask16)0xFFFF ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(k, p);
}

static inline void attn_st16_epi32(void *p, __mmask16 k, __m512i v) {
    if (k == (__mmask16)0xFFFF)
        _mm512_storeu_si512(p, v);
    else
        _mm512_mask_storeu_epi32(p, k, v);
}

/* 8 floats (AVX-512VL) */
static inline __m256 attn_ld8(__mmask8 k, const float *p) {
    return k == (__mmask8)0xFF ? _mm256_loadu_ps(p) : _mm256_maskz_loadu_ps(k, p);
}

static inline void attn_st8(float *p, __mmask8 k, __m256 v) {
    if (k == (__mmask8)0xFF)
        _mm256_storeu_ps(p, v);
    else
        _mm256_mask_storeu_ps(p, k, v);
}

/* 16 bf16 words (AVX-512BW + VL) */
static inline __m256i attn_ld16_epi16(__mmask16 k, const void *p) {
    return k == (__mmask16)0xFFFF ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p);
}

static inline void attn_st16_epi16(void *p, __mmask16 k, __m256i v) {
    if (k == (__mmask16)0xFFFF)
        _mm256_storeu_si256((__m256i *)p, v);
    else
        _mm256_mask_storeu_epi16(p, k, v);
}

#endif
