/* AVX-512 feature-map kernels (see linear_vec.h). */
#include <math.h>

#include "linear_vec.h"
#include "kernels/vec_math.h"
#include "kernels/vec_tail_avx512.h"

static void elu1_avx512(const float *x, float *y, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = attn_tail16(n - i);
        const __m512 v = attn_ld16(k, x + i);
        const __mmask16 pos = _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ);
        attn_st16(y + i, k, _mm512_mask_blend_ps(pos, attn_exp512(v), _mm512_add_ps(v, one)));
    }
}

static void elu1_bwd_avx512(const float *x, const float *dy, float *g, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = attn_tail16(n - i);
        const __m512 v = attn_ld16(k, x + i);
        const __mmask16 pos = _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ);
        const __m512 s = _mm512_mask_blend_ps(pos, attn_exp512(v), one);
        attn_st16(g + i, k, _mm512_mul_ps(attn_ld16(k, dy + i), s));
    }
}

static void expsc_avx512(float *f, int64_t n, float sub, float scale) {
    const __m512 vs = _mm512_set1_ps(sub), sc = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = attn_tail16(n - i);
        const __m512 v = _mm512_sub_ps(attn_ld16(k, f + i), vs);
        attn_st16(f + i, k, _mm512_mul_ps(attn_exp512(v), sc));
    }
}

static float submax_avx512(float *f, int64_t n, float sub) {
    const __m512 vs = _mm512_set1_ps(sub), ninf = _mm512_set1_ps(-INFINITY);
    __m512 m = ninf;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = attn_tail16(n - i);
        const __m512 v = _mm512_sub_ps(attn_ld16(k, f + i), vs);
        attn_st16(f + i, k, v);
        m = _mm512_mask_max_ps(m, k, m, v);
    }
    return _mm512_reduce_max_ps(m);
}

static void ydiv_avx512(const float *y, const float *den, float *t, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = attn_tail16(n - i);
        const __m512 dn = attn_ld16(k, den + i);
        const __mmask16 nz = _mm512_cmp_ps_mask(dn, _mm512_setzero_ps(), _CMP_NEQ_UQ) & k;
        attn_st16(t + i, k, _mm512_maskz_div_ps(nz, attn_ld16(k, y + i), dn));
    }
}

static float edot_avx512(const float *g, const float *y, float den, float *ep, int64_t n) {
    const __m512 dn = _mm512_set1_ps(den);
    __m512 s = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = attn_tail16(n - i);
        const __m512 q = _mm512_div_ps(attn_ld16(k, g + i), dn);
        attn_st16(ep + i, k, q);
        s = _mm512_fmadd_ps(q, attn_ld16(k, y + i), s);
    }
    return _mm512_reduce_add_ps(s);
}

static int all_finite_avx512(const float *x, int64_t n) {
    __mmask16 bad = 0; /* vfpclassps 0x99: QNaN, +Inf, -Inf, SNaN */
    for (int64_t i = 0; i < n; i += 16) bad |= _mm512_fpclass_ps_mask(attn_ld16(attn_tail16(n - i), x + i), 0x99);
    return !bad;
}

const attn_linear_vec_kernels attn_linear_vec_avx512 = {.elu1 = elu1_avx512,
                                                        .elu1_bwd = elu1_bwd_avx512,
                                                        .expsc = expsc_avx512,
                                                        .submax = submax_avx512,
                                                        .ydiv = ydiv_avx512,
                                                        .edot = edot_avx512,
                                                        .all_finite = all_finite_avx512};
