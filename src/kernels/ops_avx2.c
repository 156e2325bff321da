/* AVX2 + FMA kernels for the row-wise / elementwise ops (compiled with -mavx2 -mfma).
 * 8 floats per vector; tails use masked loads/stores (vmaskmovps, only where less than a vector
 * is left: vec_tail_avx2.h), so every element goes through the same arithmetic wherever it sits.
 * See ops_internal.h for each kernel's contract. */
#include <math.h>
#include <string.h>

#include "ops_internal.h"
#include "vec_math.h"
#include "vec_tail_avx2.h"

#define OPS_FN(name) name##_avx2
#include "simd_avx2.h"
#include "ops_body.h"

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- layernorm -------------------------------------------------------------------------- */

static void layernorm_fwd_avx2(const float *x, const float *gamma, const float *beta, float *y, float *mean_out,
                               float *rstd_out, int64_t n, float eps) {
    if (n == 0) {
        *mean_out = 0.0f;
        *rstd_out = 1.0f / sqrtf(eps);
        return;
    }
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
    }
    for (; i < n; i += 8) s0 = _mm256_add_ps(s0, attn_ld8n(x + i, n - i));
    const float mean = hsum8(_mm256_add_ps(s0, s1)) / (float)n;
    const __m256 vm = _mm256_set1_ps(mean);
    s0 = s1 = _mm256_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm);
        s0 = _mm256_fmadd_ps(d0, d0, s0);
        s1 = _mm256_fmadd_ps(d1, d1, s1);
    }
    for (; i < n; i += 8) {
        const __m256i k = attn_mask8(n - i);
        __m256 d = _mm256_and_ps(_mm256_sub_ps(attn_ld8n(x + i, n - i), vm), _mm256_castsi256_ps(k));
        s0 = _mm256_fmadd_ps(d, d, s0);
    }
    const float var = hsum8(_mm256_add_ps(s0, s1)) / (float)n;
    const float rstd = 1.0f / sqrtf(var + eps);
    const __m256 vr = _mm256_set1_ps(rstd);
    for (i = 0; i < n; i += 8) {
        __m256 h = _mm256_mul_ps(_mm256_sub_ps(attn_ld8n(x + i, n - i), vm), vr);
        if (gamma) h = _mm256_mul_ps(h, attn_ld8n(gamma + i, n - i));
        if (beta) h = _mm256_add_ps(h, attn_ld8n(beta + i, n - i));
        attn_st8n(y + i, n - i, h);
    }
    *mean_out = mean;
    *rstd_out = rstd;
}

static void layernorm_bwd_avx2(const float *x, const float *gamma, float mean, float rstd, const float *dy, float *dx,
                               int64_t n) {
    const __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd);
    __m256 sg = _mm256_setzero_ps(), sgx = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        __m256 g = attn_ld8n(dy + i, n - i);
        if (gamma) g = _mm256_mul_ps(g, attn_ld8n(gamma + i, n - i));
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(attn_ld8n(x + i, n - i), vm), vr);
        sg = _mm256_add_ps(sg, g);
        sgx = _mm256_fmadd_ps(g, xh, sgx); /* g is 0 in masked lanes */
    }
    const __m256 mg = _mm256_set1_ps(hsum8(sg) / (float)n);
    const __m256 mgx = _mm256_set1_ps(hsum8(sgx) / (float)n);
    for (int64_t i = 0; i < n; i += 8) {
        __m256 g = attn_ld8n(dy + i, n - i);
        if (gamma) g = _mm256_mul_ps(g, attn_ld8n(gamma + i, n - i));
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(attn_ld8n(x + i, n - i), vm), vr);
        __m256 t = _mm256_fnmadd_ps(xh, mgx, _mm256_sub_ps(g, mg));
        attn_st8n(dx + i, n - i, _mm256_mul_ps(t, vr));
    }
}

/* ---- column sums (fixed row order, each column owned by one call) ------------------------
 * Accumulated in double (two __m256d per 8 columns), rounded once, added to the output. */

static inline __m256 pd2_to_ps(__m256d lo, __m256d hi) {
    return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
}

/* One block of 16 columns c .. c + 16 (left: the columns left from c, whole: left >= 16, a
 * constant at each call so that a whole block's loads are plain ones). */
static inline __attribute__((always_inline)) void param_grad_block(const int whole, const float *x, const float *mean,
                                                                   const float *rstd, const float *dy, float *dgamma,
                                                                   float *dbeta, int64_t rows, int64_t n, int64_t c,
                                                                   int64_t left) {
    int64_t k[2]; /* columns left in each vector */
    __m256d ag[4], ab[4];
    for (int v = 0; v < 2; v++) k[v] = whole ? 8 : left - 8 * v;
    for (int v = 0; v < 4; v++) ag[v] = ab[v] = _mm256_setzero_pd();
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n + c, *dr = dy + r * n + c;
        const __m256 vm = _mm256_set1_ps(mean[r]), vr = _mm256_set1_ps(rstd[r]);
        for (int v = 0; v < 2; v++) {
            __m256 d = attn_ld8n(dr + 8 * v, k[v]);
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(attn_ld8n(xr + 8 * v, k[v]), vm), vr);
            __m256 t = _mm256_mul_ps(d, xh);
            acc_pd(&ag[2 * v], &ag[2 * v + 1], t);
            acc_pd(&ab[2 * v], &ab[2 * v + 1], d);
        }
    }
    for (int v = 0; v < 2; v++) {
        float *g = dgamma + c + 8 * v, *b = dbeta + c + 8 * v;
        if (dgamma) attn_st8n(g, k[v], _mm256_add_ps(attn_ld8n(g, k[v]), pd2_to_ps(ag[2 * v], ag[2 * v + 1])));
        if (dbeta) attn_st8n(b, k[v], _mm256_add_ps(attn_ld8n(b, k[v]), pd2_to_ps(ab[2 * v], ab[2 * v + 1])));
    }
}

static void layernorm_param_grad_avx2(const float *x, const float *mean, const float *rstd, const float *dy,
                                      float *dgamma, float *dbeta, int64_t rows, int64_t n, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c += 16) { /* 8 double accumulators: 16 ymm registers in all */
        if (c1 - c >= 16)
            param_grad_block(1, x, mean, rstd, dy, dgamma, dbeta, rows, n, c, c1 - c);
        else
            param_grad_block(0, x, mean, rstd, dy, dgamma, dbeta, rows, n, c, c1 - c);
    }
}

/* One block of 32 columns, as param_grad_block. */
static inline __attribute__((always_inline)) void col_sum_block(const int whole, const float *m, float *out,
                                                                int64_t rows, int64_t n, int64_t c, int64_t left) {
    int64_t k[4]; /* columns left in each vector */
    __m256d a[8];
    for (int v = 0; v < 4; v++) k[v] = whole ? 8 : left - 8 * v;
    for (int v = 0; v < 8; v++) a[v] = _mm256_setzero_pd();
    for (int64_t r = 0; r < rows; r++)
        for (int v = 0; v < 4; v++) {
            const float *p = m + r * n + c + 8 * v;
            if (whole) { /* two 4-float loads into the conversions: no lane extract */
                a[2 * v] = _mm256_add_pd(a[2 * v], _mm256_cvtps_pd(_mm_loadu_ps(p)));
                a[2 * v + 1] = _mm256_add_pd(a[2 * v + 1], _mm256_cvtps_pd(_mm_loadu_ps(p + 4)));
            } else {
                acc_pd(&a[2 * v], &a[2 * v + 1], attn_ld8n(p, k[v]));
            }
        }
    for (int v = 0; v < 4; v++) {
        float *o = out + c + 8 * v;
        attn_st8n(o, k[v], _mm256_add_ps(attn_ld8n(o, k[v]), pd2_to_ps(a[2 * v], a[2 * v + 1])));
    }
}

static void col_sum_avx2(const float *m, float *out, int64_t rows, int64_t n, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c += 32) {
        if (c1 - c >= 32)
            col_sum_block(1, m, out, rows, n, c, c1 - c);
        else
            col_sum_block(0, m, out, rows, n, c, c1 - c);
    }
}

/* ---- activations ------------------------------------------------------------------------- */

static inline __m256 gelu_fwd8(__m256 xv, attn_gelu_approx approx) {
    __m256 aux;
    __m256 s = approx == ATTN_GELU_TANH ? attn_gelu_tanh_sig256(xv, &aux) : attn_normcdf256(xv, &aux);
    return _mm256_mul_ps(xv, s);
}

static inline __m256 gelu_grad8(__m256 xv, attn_gelu_approx approx) {
    if (approx == ATTN_GELU_TANH) {
        __m256 ds, s = attn_gelu_tanh_sig256(xv, &ds);
        __m256 xc = _mm256_min_ps(_mm256_set1_ps(ATTN_VM_GELU_X_MAX), attn_abs256(xv));
        /* d(2u)/dx = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
        __m256 du2 = _mm256_fmadd_ps(_mm256_mul_ps(xc, xc), _mm256_set1_ps(0.134145f), _mm256_set1_ps(1.0f));
        du2 = _mm256_mul_ps(du2, _mm256_set1_ps(1.59576912160573071f));
        return _mm256_fmadd_ps(_mm256_mul_ps(xv, ds), du2, s);
    }
    __m256 pdf, cdf = attn_normcdf256(xv, &pdf);
    return _mm256_fmadd_ps(xv, pdf, cdf);
}

static void gelu_fwd_avx2(const float *x, float *y, int64_t n, attn_gelu_approx approx) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu_fwd8(_mm256_loadu_ps(x + i), approx));
    if (i < n) {
        attn_st8n(y + i, n - i, gelu_fwd8(attn_ld8n(x + i, n - i), approx));
    }
}

static void gelu_bwd_avx2(const float *x, const float *dy, float *dx, int64_t n, attn_gelu_approx approx) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), gelu_grad8(_mm256_loadu_ps(x + i), approx)));
    if (i < n) {
        attn_st8n(dx + i, n - i, _mm256_mul_ps(attn_ld8n(dy + i, n - i), gelu_grad8(attn_ld8n(x + i, n - i), approx)));
    }
}

static inline __m256 relu8(__m256 xv) {
    __m256 le = _mm256_cmp_ps(xv, _mm256_setzero_ps(), _CMP_LE_OQ);
    return _mm256_andnot_ps(le, xv); /* NaN: not <= 0, propagates */
}

static void relu_fwd_avx2(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, relu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        attn_st8n(y + i, n - i, relu8(attn_ld8n(x + i, n - i)));
    }
}

static inline __m256 relu_grad8(__m256 xv, __m256 dyv) {
    return _mm256_and_ps(_mm256_cmp_ps(xv, _mm256_setzero_ps(), _CMP_GT_OQ), dyv);
}

static void relu_bwd_avx2(const float *x, const float *dy, float *dx, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dx + i, relu_grad8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(dy + i)));
    if (i < n) {
        attn_st8n(dx + i, n - i, relu_grad8(attn_ld8n(x + i, n - i), attn_ld8n(dy + i, n - i)));
    }
}

static void add_avx2(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    if (i < n) {
        attn_st8n(y + i, n - i, _mm256_add_ps(attn_ld8n(a + i, n - i), attn_ld8n(b + i, n - i)));
    }
}

/* ---- Philox dropout ----------------------------------------------------------------------
 * Array-of-structures, as in ops_avx512.c: a vector holds 2 counter blocks {c0, c1, c2, c3},
 * i.e. the words of 8 consecutive stream elements in order. */
static void dropout_avx2(const float *x, float *y, uint8_t *mask, int64_t n, uint64_t first, float p,
                         uint32_t threshold, float scale, uint64_t seed, uint64_t offset) {
    int64_t j = 0;
    if (first % 4) { /* head up to the first block boundary (exact results: same as vectors) */
        int64_t h = (int64_t)(4 - first % 4);
        if (h > n) h = n;
        attn_ops_ref.dropout(x, y, mask, h, first, p, threshold, scale, seed, offset);
        j = h;
    }
    if (j >= n) return;
    const uint64_t blk = (first + (uint64_t)j) / 4;
    __m256i ctr = _mm256_set_epi64x((long long)offset, (long long)(blk + 1), (long long)offset, (long long)blk);
    const __m256i inc = _mm256_set_epi64x(0, 2, 0, 2);
    const __m256i mult = _mm256_setr_epi32((int)ATTN_PHILOX_M0, 0, (int)ATTN_PHILOX_M1, 0, (int)ATTN_PHILOX_M0, 0,
                                           (int)ATTN_PHILOX_M1, 0);
    __m256i key[10];
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        key[r] = _mm256_setr_epi32((int)k0, 0, (int)k1, 0, (int)k0, 0, (int)k1, 0);
        k0 += ATTN_PHILOX_W0;
        k1 += ATTN_PHILOX_W1;
    }
    const __m256i thr1 = _mm256_set1_epi32((int)threshold - 1); /* words >> 8 are < 2^24 */
    const __m256 vs = _mm256_set1_ps(scale);
    const __m256i zero = _mm256_setzero_si256();
    for (; j < n; j += 8) {
        __m256i c = ctr;
        for (int r = 0; r < 10; r++) {
            __m256i prod = _mm256_mul_epu32(c, mult);
            __m256i sw = _mm256_shuffle_epi32(prod, 0x1B);                             /* [3,2,1,0] */
            __m256i t = _mm256_blend_epi32(zero, _mm256_shuffle_epi32(c, 0x31), 0x55); /* [1,_,3,_] */
            c = _mm256_xor_si256(sw, _mm256_xor_si256(t, key[r]));
        }
        ctr = _mm256_add_epi64(ctr, inc);
        __m256i keep = _mm256_cmpgt_epi32(_mm256_srli_epi32(c, 8), thr1);
        __m128i bytes = _mm_packs_epi16(
            _mm_packs_epi32(_mm256_castsi256_si128(keep), _mm256_extracti128_si256(keep, 1)), _mm_setzero_si128());
        bytes = _mm_and_si128(bytes, _mm_set1_epi8(1));
        if (j + 8 <= n) {
            __m256 yv = _mm256_and_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), vs), _mm256_castsi256_ps(keep));
            _mm256_storeu_ps(y + j, yv);
            if (mask) _mm_storel_epi64((__m128i *)(void *)(mask + j), bytes);
        } else {
            __m256 yv = _mm256_and_ps(_mm256_mul_ps(attn_ld8n(x + j, n - j), vs), _mm256_castsi256_ps(keep));
            attn_st8n(y + j, n - j, yv);
            if (mask) {
                uint8_t tmp[16];
                _mm_storeu_si128((__m128i *)(void *)tmp, bytes);
                memcpy(mask + j, tmp, (size_t)(n - j));
            }
        }
    }
}

const attn_ops_kernels attn_ops_avx2 = {
    .name = "avx2",
    .softmax_fwd = softmax_fwd_avx2,
    .softmax_bwd = softmax_bwd_avx2,
    .layernorm_fwd = layernorm_fwd_avx2,
    .layernorm_bwd = layernorm_bwd_avx2,
    .rms_norm_fwd = rms_norm_fwd_avx2,
    .layernorm_param_grad = layernorm_param_grad_avx2,
    .col_sum = col_sum_avx2,
    .gelu_fwd = gelu_fwd_avx2,
    .gelu_bwd = gelu_bwd_avx2,
    .relu_fwd = relu_fwd_avx2,
    .relu_bwd = relu_bwd_avx2,
    .add = add_avx2,
    .silu_gate = silu_gate_avx2,
    .dropout = dropout_avx2,
    .adamw = attn_adamw_avx2,
};
