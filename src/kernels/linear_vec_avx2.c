/* AVX2 feature-map kernels (see linear_vec.h). */
#include <math.h>

#include "linear_vec.h"
#include "kernels/vec_math.h"
#include "kernels/vec_tail_avx2.h"

static void elu1_avx2(const float *x, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 v = attn_ld8n(x + i, n - i);
        const __m256 pos = _mm256_cmp_ps(v, zero, _CMP_GT_OQ);
        attn_st8n(y + i, n - i, _mm256_blendv_ps(attn_exp256(v), _mm256_add_ps(v, one), pos));
    }
}

static void elu1_bwd_avx2(const float *x, const float *dy, float *g, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 v = attn_ld8n(x + i, n - i);
        const __m256 pos = _mm256_cmp_ps(v, zero, _CMP_GT_OQ);
        const __m256 s = _mm256_blendv_ps(attn_exp256(v), one, pos);
        attn_st8n(g + i, n - i, _mm256_mul_ps(attn_ld8n(dy + i, n - i), s));
    }
}

static void expsc_avx2(float *f, int64_t n, float sub, float scale) {
    const __m256 vs = _mm256_set1_ps(sub), sc = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 v = _mm256_sub_ps(attn_ld8n(f + i, n - i), vs);
        attn_st8n(f + i, n - i, _mm256_mul_ps(attn_exp256(v), sc));
    }
}

static float submax_avx2(float *f, int64_t n, float sub) {
    const __m256 vs = _mm256_set1_ps(sub), ninf = _mm256_set1_ps(-INFINITY);
    __m256 m = ninf;
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = attn_mask8(n - i);
        const __m256 v = _mm256_sub_ps(attn_ld8n(f + i, n - i), vs);
        attn_st8n(f + i, n - i, v);
        m = _mm256_max_ps(m, _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(k)));
    }
    float t[8], r = -INFINITY;
    _mm256_storeu_ps(t, m);
    for (int j = 0; j < 8; j++) r = t[j] > r ? t[j] : r;
    return r;
}

static void ydiv_avx2(const float *y, const float *den, float *t, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 dn = attn_ld8n(den + i, n - i);
        const __m256 nz = _mm256_cmp_ps(dn, zero, _CMP_NEQ_UQ);
        const __m256 q = _mm256_div_ps(attn_ld8n(y + i, n - i), _mm256_blendv_ps(one, dn, nz));
        attn_st8n(t + i, n - i, _mm256_blendv_ps(zero, q, nz));
    }
}

static float edot_avx2(const float *g, const float *y, float den, float *ep, int64_t n) {
    const __m256 dn = _mm256_set1_ps(den);
    __m256 s = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = attn_mask8(n - i);
        const __m256 q = _mm256_div_ps(attn_ld8n(g + i, n - i), dn);
        attn_st8n(ep + i, n - i, q);
        s = _mm256_fmadd_ps(_mm256_and_ps(q, _mm256_castsi256_ps(k)), attn_ld8n(y + i, n - i), s);
    }
    float t[8], r = 0.0f;
    _mm256_storeu_ps(t, s);
    for (int j = 0; j < 8; j++) r += t[j];
    return r;
}

/* x * 0 is NaN exactly where x is NaN or infinite */
static int all_finite_avx2(const float *x, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8)
        acc = _mm256_add_ps(acc, _mm256_mul_ps(attn_ld8n(x + i, n - i), _mm256_setzero_ps()));
    return _mm256_movemask_ps(_mm256_cmp_ps(acc, acc, _CMP_UNORD_Q)) == 0;
}

const attn_linear_vec_kernels attn_linear_vec_avx2 = {.elu1 = elu1_avx2,
                                                      .elu1_bwd = elu1_bwd_avx2,
                                                      .expsc = expsc_avx2,
                                                      .submax = submax_avx2,
                                                      .ydiv = ydiv_avx2,
                                                      .edot = edot_avx2,
                                                      .all_finite = all_finite_avx2};
