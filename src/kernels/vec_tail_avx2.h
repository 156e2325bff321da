/* Tail-masked loads and stores for AVX2 loops, by the count of elements left: the plain
 * instruction while a whole vector is left, vmaskmovps only at a row's end.
 *
 * Why: vmaskmovps costs far more than a plain move on AMD cores even with every lane on (Zen 5,
 * a streaming y += x of 8-float vectors: masked loads and stores 2.9x the time in L1, 3.8x from
 * the L3; Zen 2 and 3 run the masked store as a microcoded sequence), so loops that masked every
 * vector paid for it on every element. The test is on the count, not on the mask (a vptest of
 * the mask made the L1 case slower than the masked moves themselves), and it predicts: the count
 * stays >= 8 until the last vector. Masked-off lanes still read 0 (or the given fill) and are
 * never touched in memory, so results are the same bits. */
#ifndef ATTN_VEC_TAIL_AVX2_H
#define ATTN_VEC_TAIL_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* lanes [0, r) of 8 set (all of them for r >= 8) */
static inline __m256i attn_mask8(int64_t r) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r >= 8 ? 8 : r <= 0 ? 0 : (int)r), idx);
}

/* lanes [0, r) of 4 */
static inline __m128i attn_mask4(int64_t r) {
    return _mm_cmpgt_epi32(_mm_set1_epi32(r >= 4 ? 4 : r <= 0 ? 0 : (int)r), _mm_setr_epi32(0, 1, 2, 3));
}

/* p[0 .. min(r, 8)), the other lanes 0 */
static inline __m256 attn_ld8n(const float *p, int64_t r) {
    return r >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, attn_mask8(r));
}

/* the same, the other lanes fill's */
static inline __m256 attn_ld8n_or(__m256 fill, const float *p, int64_t r) {
    if (r >= 8) return _mm256_loadu_ps(p);
    const __m256i k = attn_mask8(r);
    return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, k), _mm256_castsi256_ps(k));
}

static inline void attn_st8n(float *p, int64_t r, __m256 v) {
    if (r >= 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, attn_mask8(r), v);
}

static inline __m128 attn_ld4n(const float *p, int64_t r) {
    return r >= 4 ? _mm_loadu_ps(p) : _mm_maskload_ps(p, attn_mask4(r));
}

static inline void attn_st4n(float *p, int64_t r, __m128 v) {
    if (r >= 4)
        _mm_storeu_ps(p, v);
    else
        _mm_maskstore_ps(p, attn_mask4(r), v);
}

#endif
