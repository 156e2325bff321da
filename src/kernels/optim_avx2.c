/* AdamW with AVX2: four elements per step in double lanes, the reference's operations in its order
 * (ops_internal.h, attn_adamw_coef); plain loads and stores but at the tail (vec_tail_avx2.h). */
#include <immintrin.h>

#include "ops_internal.h"
#include "vec_tail_avx2.h"

void attn_adamw_avx2(float *p, const float *gr, float *m, float *v, float *vmax, int64_t n, const attn_adamw_coef *c) {
    const __m256d sign = _mm256_set1_pd(c->sign), decay = _mm256_set1_pd(c->decay), b1 = _mm256_set1_pd(c->b1),
                  omb1 = _mm256_set1_pd(c->omb1), b2 = _mm256_set1_pd(c->b2), omb2 = _mm256_set1_pd(c->omb2),
                  step = _mm256_set1_pd(c->step_size), bc2 = _mm256_set1_pd(c->bc2_sqrt), eps = _mm256_set1_pd(c->eps);
    for (int64_t e = 0; e < n; e += 4) {
        const int64_t r = n - e;
        const __m256d g = _mm256_mul_pd(sign, _mm256_cvtps_pd(attn_ld4n(gr + e, r)));
        const __m256d pd = _mm256_mul_pd(_mm256_cvtps_pd(attn_ld4n(p + e, r)), decay);
        const __m128 mf = _mm256_cvtpd_ps(
            _mm256_add_pd(_mm256_mul_pd(b1, _mm256_cvtps_pd(attn_ld4n(m + e, r))), _mm256_mul_pd(omb1, g)));
        const __m128 vf = _mm256_cvtpd_ps(_mm256_add_pd(_mm256_mul_pd(b2, _mm256_cvtps_pd(attn_ld4n(v + e, r))),
                                                        _mm256_mul_pd(_mm256_mul_pd(omb2, g), g)));
        attn_st4n(m + e, r, mf);
        attn_st4n(v + e, r, vf);
        __m128 vd = vf;
        if (vmax) {
            vd = _mm_max_ps(attn_ld4n(vmax + e, r), vf); /* vmax > v ? vmax : v */
            attn_st4n(vmax + e, r, vd);
        }
        const __m256d den = _mm256_add_pd(_mm256_div_pd(_mm256_sqrt_pd(_mm256_cvtps_pd(vd)), bc2), eps);
        const __m256d upd = _mm256_div_pd(_mm256_mul_pd(step, _mm256_cvtps_pd(mf)), den);
        attn_st4n(p + e, r, _mm256_cvtpd_ps(_mm256_sub_pd(pd, upd)));
    }
}
