/* AVX-512 kernels for the row-wise / elementwise ops (compiled with -mavx512f/bw/dq/vl -mfma).
 * 16 floats per vector; tails use masked loads/stores (vec_tail_avx512.h: plain ones while every
 * lane is on), so every element goes through the same arithmetic wherever it sits. See
 * ops_internal.h for each kernel's contract. */
#include <math.h>

#include "ops_internal.h"
#include "vec_math.h"
#include "vec_tail_avx512.h"

#define OPS_FN(name) name##_avx512
#include "simd_avx512.h"
#include "ops_body.h"

/* ---- layernorm -------------------------------------------------------------------------- */

static void layernorm_fwd_avx512(const float *x, const float *gamma, const float *beta, float *y, float *mean_out,
                                 float *rstd_out, int64_t n, float eps) {
    if (n == 0) {
        *mean_out = 0.0f;
        *rstd_out = 1.0f / sqrtf(eps);
        return;
    }
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
    }
    for (; i < n; i += 16) s0 = _mm512_add_ps(s0, attn_ld16(attn_tail16(n - i), x + i));
    const float mean = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / (float)n;
    const __m512 vm = _mm512_set1_ps(mean);
    s0 = s1 = _mm512_setzero_ps();
    for (i = 0; i + 32 <= n; i += 32) {
        __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), vm);
        __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm);
        s0 = _mm512_fmadd_ps(d0, d0, s0);
        s1 = _mm512_fmadd_ps(d1, d1, s1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = attn_tail16(n - i);
        __m512 d = _mm512_maskz_sub_ps(k, attn_ld16(k, x + i), vm);
        s0 = _mm512_fmadd_ps(d, d, s0);
    }
    const float var = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / (float)n;
    const float rstd = 1.0f / sqrtf(var + eps);
    const __m512 vr = _mm512_set1_ps(rstd);
    for (i = 0; i < n; i += 16) {
        __mmask16 k = attn_tail16(n - i);
        __m512 h = _mm512_mul_ps(_mm512_sub_ps(attn_ld16(k, x + i), vm), vr);
        if (gamma) h = _mm512_mul_ps(h, attn_ld16(k, gamma + i));
        if (beta) h = _mm512_add_ps(h, attn_ld16(k, beta + i));
        attn_st16(y + i, k, h);
    }
    *mean_out = mean;
    *rstd_out = rstd;
}

static void layernorm_bwd_avx512(const float *x, const float *gamma, float mean, float rstd, const float *dy, float *dx,
                                 int64_t n) {
    const __m512 vm = _mm512_set1_ps(mean), vr = _mm512_set1_ps(rstd);
    __m512 sg = _mm512_setzero_ps(), sgx = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = attn_tail16(n - i);
        __m512 g = attn_ld16(k, dy + i);
        if (gamma) g = _mm512_mul_ps(g, attn_ld16(k, gamma + i));
        __m512 xh = _mm512_mul_ps(_mm512_sub_ps(attn_ld16(k, x + i), vm), vr);
        sg = _mm512_add_ps(sg, g);
        sgx = _mm512_fmadd_ps(g, xh, sgx);
    }
    const __m512 mg = _mm512_set1_ps(_mm512_reduce_add_ps(sg) / (float)n);
    const __m512 mgx = _mm512_set1_ps(_mm512_reduce_add_ps(sgx) / (float)n);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = attn_tail16(n - i);
        __m512 g = attn_ld16(k, dy + i);
        if (gamma) g = _mm512_mul_ps(g, attn_ld16(k, gamma + i));
        __m512 xh = _mm512_mul_ps(_mm512_sub_ps(attn_ld16(k, x + i), vm), vr);
        __m512 t = _mm512_fnmadd_ps(xh, mgx, _mm512_sub_ps(g, mg));
        attn_st16(dx + i, k, _mm512_mul_ps(t, vr));
    }
}

/* ---- column sums (fixed row order, each column owned by one call) ------------------------
 * Accumulated in double (two __m512d per 16 columns), then rounded once and added to the
 * output: a column sum over many rows keeps its accuracy even when it cancels. */

static inline __m512 pd2_to_ps(__m512d lo, __m512d hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))),
                                               _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
}

static void layernorm_param_grad_avx512(const float *x, const float *mean, const float *rstd, const float *dy,
                                        float *dgamma, float *dbeta, int64_t rows, int64_t n, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c += 64) {
        __mmask16 k[4];
        __m512d ag[8], ab[8];
        for (int v = 0; v < 4; v++) k[v] = attn_tail16(c1 - c - 16 * v); /* 0 past c1 */
        for (int v = 0; v < 8; v++) ag[v] = ab[v] = _mm512_setzero_pd();
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * n + c, *dr = dy + r * n + c;
            const __m512 vm = _mm512_set1_ps(mean[r]), vr = _mm512_set1_ps(rstd[r]);
            for (int v = 0; v < 4; v++) {
                __m512 d = attn_ld16(k[v], dr + 16 * v);
                __m512 xh = _mm512_mul_ps(_mm512_sub_ps(attn_ld16(k[v], xr + 16 * v), vm), vr);
                __m512 t = _mm512_mul_ps(d, xh);
                acc_pd(&ag[2 * v], &ag[2 * v + 1], t);
                acc_pd(&ab[2 * v], &ab[2 * v + 1], d);
            }
        }
        for (int v = 0; v < 4; v++) {
            float *g = dgamma + c + 16 * v, *b = dbeta + c + 16 * v;
            if (dgamma) attn_st16(g, k[v], _mm512_add_ps(attn_ld16(k[v], g), pd2_to_ps(ag[2 * v], ag[2 * v + 1])));
            if (dbeta) attn_st16(b, k[v], _mm512_add_ps(attn_ld16(k[v], b), pd2_to_ps(ab[2 * v], ab[2 * v + 1])));
        }
    }
}

static void col_sum_avx512(const float *m, float *out, int64_t rows, int64_t n, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c += 64) {
        __mmask16 k[4];
        __m512d a[8];
        for (int v = 0; v < 4; v++) k[v] = attn_tail16(c1 - c - 16 * v); /* 0 past c1 */
        for (int v = 0; v < 8; v++) a[v] = _mm512_setzero_pd();
        for (int64_t r = 0; r < rows; r++)
            for (int v = 0; v < 4; v++) {
                __m512 d = attn_ld16(k[v], m + r * n + c + 16 * v);
                acc_pd(&a[2 * v], &a[2 * v + 1], d);
            }
        for (int v = 0; v < 4; v++) {
            float *o = out + c + 16 * v;
            attn_st16(o, k[v], _mm512_add_ps(attn_ld16(k[v], o), pd2_to_ps(a[2 * v], a[2 * v + 1])));
        }
    }
}

/* ---- activations ------------------------------------------------------------------------- */

static void gelu_fwd_avx512(const float *x, float *y, int64_t n, attn_gelu_approx approx) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = attn_tail16(n - i);
        __m512 xv = attn_ld16(k, x + i), aux, s;
        s = approx == ATTN_GELU_TANH ? attn_gelu_tanh_sig512(xv, &aux) : attn_normcdf512(xv, &aux);
        attn_st16(y + i, k, _mm512_mul_ps(xv, s));
    }
}

static void gelu_bwd_avx512(const float *x, const float *dy, float *dx, int64_t n, attn_gelu_approx approx) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = attn_tail16(n - i);
        __m512 xv = attn_ld16(k, x + i), g;
        if (approx == ATTN_GELU_TANH) {
            __m512 ds, s = attn_gelu_tanh_sig512(xv, &ds);
            __m512 xc = _mm512_min_ps(_mm512_set1_ps(ATTN_VM_GELU_X_MAX), _mm512_abs_ps(xv));
            /* d(2u)/dx = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
            __m512 du2 = _mm512_fmadd_ps(_mm512_mul_ps(xc, xc), _mm512_set1_ps(0.134145f), _mm512_set1_ps(1.0f));
            du2 = _mm512_mul_ps(du2, _mm512_set1_ps(1.59576912160573071f));
            g = _mm512_fmadd_ps(_mm512_mul_ps(xv, ds), du2, s);
        } else {
            __m512 pdf, cdf = attn_normcdf512(xv, &pdf);
            g = _mm512_fmadd_ps(xv, pdf, cdf);
        }
        attn_st16(dx + i, k, _mm512_mul_ps(attn_ld16(k, dy + i), g));
    }
}

static void relu_fwd_avx512(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = attn_tail16(n - i);
        __m512 xv = attn_ld16(k, x + i);
        __mmask16 le = _mm512_cmp_ps_mask(xv, _mm512_setzero_ps(), _CMP_LE_OQ);
        attn_st16(y + i, k, _mm512_mask_mov_ps(xv, le, _mm512_setzero_ps()));
    }
}

static void relu_bwd_avx512(const float *x, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = attn_tail16(n - i);
        __mmask16 gt = _mm512_cmp_ps_mask(attn_ld16(k, x + i), _mm512_setzero_ps(), _CMP_GT_OQ);
        attn_st16(dx + i, k, attn_ld16(gt & k, dy + i));
    }
}

static void add_avx512(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    if (i < n) {
        __mmask16 k = attn_tail16(n - i);
        attn_st16(y + i, k, _mm512_add_ps(attn_ld16(k, a + i), attn_ld16(k, b + i)));
    }
}

/* ---- Philox dropout ----------------------------------------------------------------------
 * Array-of-structures: a vector holds 4 counter blocks {c0, c1, c2, c3} back to back, i.e. the
 * words of 16 consecutive stream elements in order. One round is then one 32x32->64 multiply
 * of the even words (c0 * M0 lands in 64-bit lane 0, c2 * M1 in lane 1 of each block), a word
 * reversal [lo0, hi0, lo1, hi1] -> [hi1, lo1, hi0, lo0], and an xor of {c1, c3} and the round
 * key into the even words. */
static void dropout_avx512(const float *x, float *y, uint8_t *mask, int64_t n, uint64_t first, float p,
                           uint32_t threshold, float scale, uint64_t seed, uint64_t offset) {
    int64_t j = 0;
    /* head: elements before the first block boundary (results are exact: same as the vectors) */
    if (first % 4) {
        int64_t h = (int64_t)(4 - first % 4);
        if (h > n) h = n;
        attn_ops_ref.dropout(x, y, mask, h, first, p, threshold, scale, seed, offset);
        j = h;
    }
    if (j >= n) return;
    const uint64_t blk = (first + (uint64_t)j) / 4;
    __m512i ctr = _mm512_set_epi64((long long)offset, (long long)(blk + 3), (long long)offset, (long long)(blk + 2),
                                   (long long)offset, (long long)(blk + 1), (long long)offset, (long long)blk);
    const __m512i inc = _mm512_set_epi64(0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i mult = _mm512_set4_epi32(0, (int)ATTN_PHILOX_M1, 0, (int)ATTN_PHILOX_M0);
    __m512i key[10];
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        key[r] = _mm512_set4_epi32(0, (int)k1, 0, (int)k0);
        k0 += ATTN_PHILOX_W0;
        k1 += ATTN_PHILOX_W1;
    }
    const __m512i thr = _mm512_set1_epi32((int)threshold);
    const __m512 vs = _mm512_set1_ps(scale);
    for (; j < n; j += 16) {
        __m512i c = ctr;
        for (int r = 0; r < 10; r++) {
            __m512i prod = _mm512_mul_epu32(c, mult);
            __m512i sw = _mm512_shuffle_epi32(prod, (_MM_PERM_ENUM)0x1B); /* [3,2,1,0] */
            __m512i t = _mm512_shuffle_epi32(c, (_MM_PERM_ENUM)0x31);     /* [1,0,3,0] */
            c = _mm512_mask_ternarylogic_epi32(sw, 0x5555, t, key[r], 0x96);
        }
        ctr = _mm512_add_epi64(ctr, inc);
        __mmask16 keep = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(c, 8), thr);
        __mmask16 k = attn_tail16(n - j);
        __m512 yv = _mm512_maskz_mul_ps(keep, attn_ld16(k, x + j), vs);
        attn_st16(y + j, k, yv);
        if (mask) _mm_mask_storeu_epi8(mask + j, k, _mm_maskz_set1_epi8(keep, 1));
    }
}

const attn_ops_kernels attn_ops_avx512 = {
    .name = "avx512",
    .softmax_fwd = softmax_fwd_avx512,
    .softmax_bwd = softmax_bwd_avx512,
    .layernorm_fwd = layernorm_fwd_avx512,
    .layernorm_bwd = layernorm_bwd_avx512,
    .rms_norm_fwd = rms_norm_fwd_avx512,
    .layernorm_param_grad = layernorm_param_grad_avx512,
    .col_sum = col_sum_avx512,
    .gelu_fwd = gelu_fwd_avx512,
    .gelu_bwd = gelu_bwd_avx512,
    .relu_fwd = relu_fwd_avx512,
    .relu_bwd = relu_bwd_avx512,
    .add = add_avx512,
    .silu_gate = silu_gate_avx512,
    .dropout = dropout_avx512,
    .adamw = attn_adamw_avx512,
};
