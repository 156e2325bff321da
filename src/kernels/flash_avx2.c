/* AVX2 + FMA flash-attention tile kernels (contracts in flash_internal.h).
 *
 * gemm: register tile of 6 rows x 16 columns (12 ymm accumulators, 15 of the 16 registers).
 * exp2 on x <= 0: n = round(x), f = x - n in [-1/2, 1/2], 2^f by its degree-7 Taylor polynomial,
 * 2^n built in the exponent field; inputs below -126 give exactly 0 (as the AVX-512 kernels). */
#include <immintrin.h>
#include <math.h>

#include "flash_kernels.h"
#include "kernels/transpose_avx2.h"
#include "kernels/vec_tail_avx2.h"

#define MR 6
/* the longest B strip gemm_tiles copies (floats of k): 16 KiB of stack */
#define STRIP_K_MAX 256

static inline __m256 exp2_neg(__m256 x) {
    const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_set1_ps(-126.0f), x); /* maxps returns its second operand for a NaN: NaN stays */
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(1.525273380405984e-05f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381606e-04f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618129107628477e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550410866482158e-02f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402265069591007e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931471805599453e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Register tile of MR rows by 8 nv columns, the last vector holding nlast <= 8 columns: a
 * constant 8 for whole tiles, so that every load and store of B and C is a plain one
 * (vec_tail_avx2.h). */
static inline __attribute__((always_inline)) void ukr(const int nv, int mm, int k, const float *a, int64_t ars,
                                                      int64_t acs, const float *b, int64_t ldb, float *c, int64_t ldc,
                                                      int accumulate, const float *rowscale, float *colmax, int nlast) {
    __m256 acc[MR][2];
    const float *ar[MR];
#define LEFT(q) ((q) == nv - 1 ? nlast : 8)
    for (int r = 0; r < MR; r++) ar[r] = a + (r < mm ? r : mm - 1) * ars;
    for (int r = 0; r < MR; r++)
        for (int q = 0; q < nv; q++)
            acc[r][q] = accumulate && r < mm ? attn_ld8n(c + r * ldc + 8 * q, LEFT(q)) : _mm256_setzero_ps();
    /* constant loop bounds with the row test inside: with r < mm in the bound GCC kept acc in
     * memory and stored all 12 accumulators on every step of p (half the FMA rate) */
    if (rowscale && accumulate)
        for (int r = 0; r < MR; r++)
            if (r < mm)
                for (int q = 0; q < nv; q++) acc[r][q] = _mm256_mul_ps(acc[r][q], _mm256_set1_ps(rowscale[r]));
    for (int p = 0; p < k; p++) {
        __m256 bv[2];
        const float *bp = b + p * ldb;
        for (int q = 0; q < nv; q++) bv[q] = attn_ld8n(bp + 8 * q, LEFT(q));
        for (int r = 0; r < MR; r++) {
            const __m256 av = _mm256_broadcast_ss(ar[r] + p * acs);
            for (int q = 0; q < nv; q++) acc[r][q] = _mm256_fmadd_ps(av, bv[q], acc[r][q]);
        }
    }
    for (int r = 0; r < MR; r++)
        if (r < mm)
            for (int q = 0; q < nv; q++) attn_st8n(c + r * ldc + 8 * q, LEFT(q), acc[r][q]);
    if (colmax) /* rows past mm repeat row mm - 1, so they cannot change a maximum */
        for (int q = 0; q < nv; q++) {
            __m256 mx = _mm256_max_ps(_mm256_max_ps(acc[0][q], acc[1][q]), _mm256_max_ps(acc[2][q], acc[3][q]));
            mx = _mm256_max_ps(mx, _mm256_max_ps(acc[4][q], acc[5][q]));
            attn_st8n(colmax + 8 * q, LEFT(q), _mm256_max_ps(mx, attn_ld8n(colmax + 8 * q, LEFT(q))));
        }
#undef LEFT
}

static inline __attribute__((always_inline)) void gemm_tiles(int m, int n, int k, const float *a, int64_t ars,
                                                             int64_t acs, const float *b, int64_t ldb, float *c,
                                                             int64_t ldc, int accumulate, const float *rowscale,
                                                             float *colmax) {
    /* B's rows a multiple of 512 bytes apart (V or K read in place at d = 128, or at H x d = 768
     * in a [B, N, H, d] layout) all fall in 8 of the 64 sets of a 32 KiB 8-way L1 (Zen 2 and 3):
     * a 16-column strip of 64 such rows fills those sets, and the A and C lines that map there
     * evict it between row groups. Such a strip is copied to a contiguous buffer first (k x 16
     * floats against the row groups' 6 k cycles of FMAs each). Zen 3, flash forward d = 128, N =
     * 2048: V read in place 77 GFLOP/s, through the copy 82. */
    float strip[STRIP_K_MAX * 16] __attribute__((aligned(32)));
    const int copy_b = ldb % 128 == 0 && k <= STRIP_K_MAX && m > MR;
    for (int j0 = 0; j0 < n; j0 += 16) {
        const int nn = n - j0 < 16 ? n - j0 : 16;
        const int nv = (nn + 7) / 8;
        const int nlast = nn - 8 * (nv - 1);
        const float *bj = b + j0;
        int64_t ldbj = ldb;
        if (copy_b) {
            for (int p = 0; p < k; p++) {
                _mm256_store_ps(strip + 16 * p, attn_ld8n(b + p * ldb + j0, nn));
                _mm256_store_ps(strip + 16 * p + 8, attn_ld8n(b + p * ldb + j0 + 8, nn - 8));
            }
            bj = strip;
            ldbj = 16;
        }
        for (int i0 = 0; i0 < m; i0 += MR) {
            const int mm = m - i0 < MR ? m - i0 : MR;
            const float *ai = a + i0 * ars, *rs = rowscale ? rowscale + i0 : NULL;
            float *ci = c + i0 * ldc + j0, *cm = colmax ? colmax + j0 : NULL;
            if (nn == 16)
                ukr(2, mm, k, ai, ars, acs, bj, ldbj, ci, ldc, accumulate, rs, cm, 8);
            else if (nv == 2)
                ukr(2, mm, k, ai, ars, acs, bj, ldbj, ci, ldc, accumulate, rs, cm, nlast);
            else
                ukr(1, mm, k, ai, ars, acs, bj, ldbj, ci, ldc, accumulate, rs, cm, nlast);
        }
    }
}

/* A down the columns of a score tile (P, dS) with its strides as constants, as flash_avx512.c
 * does: the broadcasts come off one pointer at fixed offsets. */
static void gemm_avx2(int m, int n, int k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                      float *c, int64_t ldc, int accumulate, const float *rowscale, float *colmax) {
    if (ars == 1 && acs == ATTN_FLASH_BR)
        gemm_tiles(m, n, k, a, 1, ATTN_FLASH_BR, b, ldb, c, ldc, accumulate, rowscale, colmax);
    else
        gemm_tiles(m, n, k, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, colmax);
}

static void softmax_update_avx2(int rows, int cols, float *s, int64_t lds, float *mrun, float *l, float *alpha,
                                const float *tilemax) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), one = _mm256_set1_ps(1.0f);
    for (int c0 = 0; c0 < cols; c0 += 8) {
        const int left = cols - c0;
        const __m256 m_old = attn_ld8n_or(ninf, mrun + c0, left);
        __m256 mx = m_old;
        if (tilemax)
            mx = _mm256_max_ps(mx, attn_ld8n_or(ninf, tilemax + c0, left));
        else
            for (int r = 0; r < rows; r++) mx = _mm256_max_ps(mx, attn_ld8n_or(ninf, s + r * lds + c0, left));
        const __m256 fin = _mm256_cmp_ps(mx, ninf, _CMP_NEQ_OQ);
        const __m256 mxs = _mm256_and_ps(fin, mx);
        __m256 sum = _mm256_setzero_ps();
        for (int r = 0; r < rows; r++) {
            const __m256 p = exp2_neg(_mm256_sub_ps(attn_ld8n_or(ninf, s + r * lds + c0, left), mxs));
            attn_st8n(s + r * lds + c0, left, p);
            sum = _mm256_add_ps(sum, p);
        }
        const __m256 al = _mm256_blendv_ps(one, exp2_neg(_mm256_sub_ps(m_old, mxs)), fin);
        const __m256 lv = _mm256_fmadd_ps(attn_ld8n(l + c0, left), al, sum);
        attn_st8n(alpha + c0, left, al);
        attn_st8n(l + c0, left, lv);
        attn_st8n(mrun + c0, left, mx);
    }
}

static void probs_and_ds_avx2(int rows, int cols, float *s, const float *dp, float *ds, int64_t ld, const float *m,
                              const float *ll, const float *dsum, float scale) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), sc = _mm256_set1_ps(scale);
    for (int c0 = 0; c0 < cols; c0 += 8) {
        const int left = cols - c0;
        const __m256 mv = attn_ld8n_or(ninf, m + c0, left);
        /* unordered compares: a NaN row statistic (a NaN or an infinity in the row's logits) makes
         * P and dS NaN, as the textbook backward does, not a masked row's zeros */
        const __m256 fin = _mm256_cmp_ps(mv, ninf, _CMP_NEQ_UQ);
        const __m256 ms = _mm256_and_ps(fin, mv), lv = attn_ld8n(ll + c0, left);
        const __m256 dv = attn_ld8n(dsum + c0, left);
        for (int r = 0; r < rows; r++) {
            const __m256 x = _mm256_sub_ps(_mm256_sub_ps(attn_ld8n_or(ninf, s + r * ld + c0, left), ms), lv);
            const __m256 p = _mm256_and_ps(fin, exp2_neg(x));
            attn_st8n(s + r * ld + c0, left, p);
            const __m256 g = _mm256_sub_ps(attn_ld8n(dp + r * ld + c0, left), dv);
            const __m256 nz = _mm256_cmp_ps(p, _mm256_setzero_ps(), _CMP_NEQ_UQ);
            attn_st8n(ds + r * ld + c0, left, _mm256_and_ps(nz, _mm256_mul_ps(_mm256_mul_ps(p, g), sc)));
        }
    }
}

/* dst[t * ldd + q] = src[q * rs + t] * f (f == 1: the bits, exactly), by 8 x 8 blocks transposed
 * in registers; the portable loop moved one float at a time (2.4% of a MiniLM embedding on Zen 3). */
static void pack_transposed_avx2(int rows, int cols, const float *src, int64_t rs, float f, float *dst, int64_t ldd) {
    const __m256 fv = _mm256_set1_ps(f);
    for (int q0 = 0; q0 < rows; q0 += 8) {
        const int nq = rows - q0 < 8 ? rows - q0 : 8;
        for (int t0 = 0; t0 < cols; t0 += 8) {
            const int nt = cols - t0 < 8 ? cols - t0 : 8;
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                r[i] = i < nq ? attn_ld8n(src + (int64_t)(q0 + i) * rs + t0, nt) : _mm256_setzero_ps();
                if (f != 1.0f) r[i] = _mm256_mul_ps(r[i], fv);
            }
            attn_transpose8x8(r);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                if (j < nt) attn_st8n(dst + (int64_t)(t0 + j) * ldd + q0, nq, r[j]);
        }
    }
}

static void scale_copy_rows_avx2(int m, int n, const float *src, int64_t lds, const float *f, float *dst, int64_t ldd) {
    for (int i = 0; i < m; i++) {
        const __m256 fv = _mm256_set1_ps(f ? f[i] : 1.0f);
        for (int j = 0; j < n; j += 8)
            attn_st8n(dst + (int64_t)i * ldd + j, n - j,
                      _mm256_mul_ps(attn_ld8n(src + (int64_t)i * lds + j, n - j), fv));
    }
}

const attn_flash_kernels *attn_flash_kernels_avx2(void) {
    /* the bf16 path here runs the AVX2 emulation of the pair products (bf16_avx2.c) after this
     * softmax: the bf16 entries are the fp32 ones (one exp2) */
    static const attn_flash_kernels k = {.name = "avx2",
                                         .softmax_tile = ATTN_SOFTMAX_TILE_OWN,
                                         .register_rows = 0,
                                         .gemm = gemm_avx2,
                                         .softmax_update = softmax_update_avx2,
                                         .probs_and_ds = probs_and_ds_avx2,
                                         .softmax_update_bf16 = softmax_update_avx2,
                                         .probs_and_ds_bf16 = probs_and_ds_avx2,
                                         .pack_transposed = pack_transposed_avx2,
                                         .dropout_tile = NULL,
                                         .scale_copy_rows = scale_copy_rows_avx2};
    return &k;
}
