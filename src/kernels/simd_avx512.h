/* The vector operations of simd_avx2.h mapped to AVX-512 (16 floats); tails through
 * vec_tail_avx512.h's masks (plain moves while every lane is on). */
#ifndef ATTN_SIMD_AVX512_H
#define ATTN_SIMD_AVX512_H

#include <immintrin.h>

#include "vec_math.h"
#include "vec_tail_avx512.h"

#define ATTN_VL 16
typedef __m512 attn_vf;
typedef __m512d attn_vd;

#define v_load(p) _mm512_loadu_ps(p)
#define v_store(p, v) _mm512_storeu_ps(p, v)
#define v_set1(x) _mm512_set1_ps(x)
#define v_zero() _mm512_setzero_ps()
#define v_add(a, b) _mm512_add_ps(a, b)
#define v_sub(a, b) _mm512_sub_ps(a, b)
#define v_mul(a, b) _mm512_mul_ps(a, b)
#define v_div(a, b) _mm512_div_ps(a, b)
#define v_max(a, b) _mm512_max_ps(a, b)
#define v_exp(x) attn_exp512(x)
#define v_load_n(p, r) attn_ld16(attn_tail16(r), p)
#define v_load_n_or(fill, p, r) attn_ld16_or(fill, attn_tail16(r), p)
#define v_store_n(p, r, v) attn_st16(p, attn_tail16(r), v)

#define vd_zero() _mm512_setzero_pd()
#define vd_add(a, b) _mm512_add_pd(a, b)
#define vd_fmadd(a, b, c) _mm512_fmadd_pd(a, b, c)
#define v_lo_pd(v) _mm512_cvtps_pd(_mm512_castps512_ps256(v))
#define v_hi_pd(v) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))

#define v_hmax(v) _mm512_reduce_max_ps(v)
#define vd_hsum(v) _mm512_reduce_add_pd(v)

#endif
