/* One name per vector operation, mapped to AVX2 + FMA (8 floats): with simd_avx512.h, lets a body
 * written once (ops_body.h) serve both widths, as ggml's simd-mappings.h does. A body uses only
 * these names; each ISA file includes its mapping, then the body. Tails (r < ATTN_VL elements
 * left) go through vec_tail_avx2.h's count-tested masked moves. */
#ifndef ATTN_SIMD_AVX2_H
#define ATTN_SIMD_AVX2_H

#include <immintrin.h>

#include "vec_math.h"
#include "vec_tail_avx2.h"

#define ATTN_VL 8
typedef __m256 attn_vf;
typedef __m256d attn_vd; /* half a vf of doubles */

#define v_load(p) _mm256_loadu_ps(p)
#define v_store(p, v) _mm256_storeu_ps(p, v)
#define v_set1(x) _mm256_set1_ps(x)
#define v_zero() _mm256_setzero_ps()
#define v_add(a, b) _mm256_add_ps(a, b)
#define v_sub(a, b) _mm256_sub_ps(a, b)
#define v_mul(a, b) _mm256_mul_ps(a, b)
#define v_div(a, b) _mm256_div_ps(a, b)
#define v_max(a, b) _mm256_max_ps(a, b)
#define v_exp(x) attn_exp256(x)
/* p[0 .. min(r, VL)), other lanes 0 / fill; stores touch only those */
#define v_load_n(p, r) attn_ld8n(p, r)
#define v_load_n_or(fill, p, r) attn_ld8n_or(fill, p, r)
#define v_store_n(p, r, v) attn_st8n(p, r, v)

#define vd_zero() _mm256_setzero_pd()
#define vd_add(a, b) _mm256_add_pd(a, b)
#define vd_fmadd(a, b, c) _mm256_fmadd_pd(a, b, c)
/* the low and high halves of a vf, widened to doubles */
#define v_lo_pd(v) _mm256_cvtps_pd(_mm256_castps256_ps128(v))
#define v_hi_pd(v) _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))

static inline float v_hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the sum of 4 doubles, low pair first */
static inline double vd_hsum(__m256d v) {
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

#endif
