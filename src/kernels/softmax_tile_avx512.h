/* The AVX-512 softmax of flash attention's score tiles, stated once for the two tables that run
 * it: the flash tile kernels (flash_avx512.c: softmax_update, probs_and_ds and their
 * bf16 entries; contracts in attention/flash_internal.h) and the bf16 kernels' fused entries
 * (bf16_avx512_body.h: the same arithmetic with P and dS rounded straight into pair words, no
 * float tile stored and read back), which must give the same bits as the unfused pair.
 * Include from a file compiled for AVX-512 F/BW/DQ/VL. Files that define ATTN_TILE_CVT32(hi, lo)
 * first (32 floats to 32 bf16, lo's then hi's, as vcvtne2ps2bf16) also get the fused bodies.
 *
 * exp2 on x <= 0: n = round(x), f = x - n in [-1/2, 1/2], 2^f by its degree-7 Taylor polynomial
 * (truncation error 5e-9 relative), 2^n applied with vscalefps; inputs below -126 give exactly 0
 * (those probabilities are < 1.2e-38 of the row's largest and would only produce subnormals).
 * The bf16 path's probabilities (lowp) take the degree-5 minimax polynomial of 2^f on
 * [-1/2, 1/2] instead: relative error 7.7e-8, 2e-7 with its float evaluation (the fp32 path:
 * 6.5e-8), so P still rounds to the bf16 an exact exp gives except within 2e-7 of a rounding
 * boundary, as the bf16 training test's emulation needs (degree 3, at 7.5e-5, moved one P in 50
 * and that test's agreement from 6e-8 to 3e-3); two FMAs fewer, on the pipes the pair products
 * need. The rescaling factors alpha keep the full polynomial. */
#ifndef ATTN_SOFTMAX_TILE_AVX512_H
#define ATTN_SOFTMAX_TILE_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "vec_tail_avx512.h"

/* lowp: the bf16 path's degree-5 polynomial (a compile-time constant in every caller) */
static inline __attribute__((always_inline)) __m512 attn_tile_exp2(const int lowp, __m512 x) {
    /* lanes below -126 (and -inf) give 0, a NaN stays; the masked subtraction keeps -inf - -inf
     * from raising the invalid exception (no clamp of x needed: one operation fewer) */
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_maskz_sub_ps(keep, x, n);
    __m512 p;
    if (lowp) {
        p = _mm512_set1_ps(1.3277938903551432e-03f);
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.675757640757681e-03f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550709598137876e-02f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022114337835154e-01f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931469682296739e-01f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000000733176135e+00f));
    } else {
        p = _mm512_set1_ps(1.525273380405984e-05f);
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381606e-04f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-03f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-03f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-02f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402265069591007e-01f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471805599453e-01f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    }
    /* masked rather than computed and cleared: vscalefps underflowing (n -127 to about -1000)
     * takes a microcode assist on Intel, about 180 cycles a vector; masked-off lanes take none */
    return _mm512_maskz_scalef_ps(keep, p, n);
}

/* Word t of 32 (t < 16: lo, else hi) takes bf16 t of x0 as its low half and bf16 t of x1 as its
 * high half: the vpermt2w indices that interleave two rows' rounded chunks into pair words. */
static inline __m512i attn_tile_pair_idx_lo(void) {
    return _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4,
                            35, 3, 34, 2, 33, 1, 32, 0);
}

/* The online softmax of columns [0, ncols) (ncols <= 64, nv = ceil(ncols / 16) a compile-time
 * constant, so the per-vector state stays in registers) of an S^T tile: all column vectors
 * advance together, row by row, so the max and sum chains of the vectors are independent. With
 * pw NULL, P goes back into s; else rows 2p and 2p + 1 of P go, rounded, into the pair words
 * pw[p * ldw + c] (an odd count's missing row reads 0) and s is left alone. */
static inline __attribute__((always_inline)) void attn_tile_softmax_block(const int lowp, const int nv, int rows,
                                                                          int ncols, float *s, int64_t lds, float *mrun,
                                                                          float *l, float *alpha, const float *tilemax,
                                                                          uint32_t *pw, int64_t ldw) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    __mmask16 msk[4], fin[4];
    __m512 m_old[4], mx[4], mxs[4], sum[4];
    for (int q = 0; q < nv; q++) {
        msk[q] = attn_tail16(ncols - 16 * q);
        m_old[q] = mx[q] = _mm512_mask_loadu_ps(ninf, msk[q], mrun + 16 * q);
        sum[q] = _mm512_setzero_ps();
    }
    if (tilemax)
        for (int q = 0; q < nv; q++) mx[q] = _mm512_max_ps(mx[q], _mm512_mask_loadu_ps(ninf, msk[q], tilemax + 16 * q));
    else
        for (int r = 0; r < rows; r++)
            for (int q = 0; q < nv; q++)
                mx[q] = _mm512_max_ps(mx[q], _mm512_mask_loadu_ps(ninf, msk[q], s + r * lds + 16 * q));
    for (int q = 0; q < nv; q++) {
        fin[q] = _mm512_cmp_ps_mask(mx[q], ninf, _CMP_NEQ_OQ);
        mxs[q] = _mm512_maskz_mov_ps(fin[q], mx[q]); /* an all -inf column subtracts 0 */
    }
#define ATTN_TILE_P(r, q)                                                                                              \
    attn_tile_exp2(lowp, _mm512_sub_ps(_mm512_mask_loadu_ps(ninf, msk[q], s + (r)*lds + 16 * (q)), mxs[q]))
    if (!pw) {
        for (int r = 0; r < rows; r++)
            for (int q = 0; q < nv; q++) {
                const __m512 p = ATTN_TILE_P(r, q);
                _mm512_mask_storeu_ps(s + r * lds + 16 * q, msk[q], p);
                sum[q] = _mm512_add_ps(sum[q], p);
            }
    } else {
#ifdef ATTN_TILE_CVT32
        /* word c = (bf16 P[r][c], bf16 P[r + 1][c]): elements c and 16 + c of the pair's rounding */
        const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                             21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        for (int r = 0; r < rows; r += 2)
            for (int q = 0; q < nv; q++) {
                const __m512 p0 = ATTN_TILE_P(r, q);
                sum[q] = _mm512_add_ps(sum[q], p0);
                __m512 p1 = _mm512_setzero_ps();
                if (r + 1 < rows) {
                    p1 = ATTN_TILE_P(r + 1, q);
                    sum[q] = _mm512_add_ps(sum[q], p1);
                }
                _mm512_mask_storeu_epi32(pw + (r / 2) * ldw + 16 * q, msk[q],
                                         _mm512_permutexvar_epi16(idx, ATTN_TILE_CVT32(p1, p0)));
            }
#else
        (void)ldw; /* only the fused bodies pair */
#endif
    }
#undef ATTN_TILE_P
    for (int q = 0; q < nv; q++) {
        const __m512 al = _mm512_mask_mov_ps(one, fin[q], attn_tile_exp2(0, _mm512_sub_ps(m_old[q], mxs[q])));
        const __m512 lv = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(msk[q], l + 16 * q), al, sum[q]);
        _mm512_mask_storeu_ps(alpha + 16 * q, msk[q], al);
        _mm512_mask_storeu_ps(l + 16 * q, msk[q], lv);
        _mm512_mask_storeu_ps(mrun + 16 * q, msk[q], mx[q]);
    }
}

/* softmax_update (pw NULL) or its fused bf16 form (pw: P's rows paired into pw, ldw) over any
 * number of columns, 64 at a time. */
static inline __attribute__((always_inline)) void attn_tile_softmax(const int lowp, int rows, int cols, float *s,
                                                                    int64_t lds, float *mrun, float *l, float *alpha,
                                                                    const float *tilemax, uint32_t *pw, int64_t ldw) {
    for (int c0 = 0; c0 < cols; c0 += 64) {
        const int nc = cols - c0 < 64 ? cols - c0 : 64, nv = (nc + 15) / 16;
        float *sc = s + c0, *mc = mrun + c0, *lc = l + c0, *ac = alpha + c0;
        const float *tc = tilemax ? tilemax + c0 : NULL;
        uint32_t *pc = pw ? pw + c0 : NULL;
        switch (nv) {
        case 4: attn_tile_softmax_block(lowp, 4, rows, nc, sc, lds, mc, lc, ac, tc, pc, ldw); break;
        case 3: attn_tile_softmax_block(lowp, 3, rows, nc, sc, lds, mc, lc, ac, tc, pc, ldw); break;
        case 2: attn_tile_softmax_block(lowp, 2, rows, nc, sc, lds, mc, lc, ac, tc, pc, ldw); break;
        default: attn_tile_softmax_block(lowp, 1, rows, nc, sc, lds, mc, lc, ac, tc, pc, ldw); break;
        }
    }
}

/* The backward's per-column statistics for 16 columns at c0 (mask msk): fin (the row was not
 * fully masked; unordered, so that a NaN row statistic makes P and dS NaN, as the textbook
 * backward does, not a masked row's zeros), the shift ms, the remainder lv and D. */
typedef struct {
    __mmask16 msk, fin;
    __m512 ms, lv, dv;
} attn_tile_stats;

static inline __attribute__((always_inline)) attn_tile_stats attn_tile_stats_at(int cols, int c0, const float *m,
                                                                                const float *ll, const float *dsum) {
    attn_tile_stats t;
    t.msk = attn_tail16(cols - c0);
    const __m512 mv = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), t.msk, m + c0);
    t.fin = _mm512_cmp_ps_mask(mv, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    t.ms = _mm512_maskz_mov_ps(t.fin, mv);
    t.lv = _mm512_maskz_loadu_ps(t.msk, ll + c0);
    t.dv = _mm512_maskz_loadu_ps(t.msk, dsum + c0);
    return t;
}

/* P and dS of one 16-column vector of row r (probs_and_ds's arithmetic). */
static inline __attribute__((always_inline)) void attn_tile_p_ds(const int lowp, const attn_tile_stats *t,
                                                                 const float *srow, const float *dprow, __m512 sc,
                                                                 __m512 *p, __m512 *ds) {
    const __m512 x =
        _mm512_sub_ps(_mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), t->msk, srow), t->ms), t->lv);
    *p = _mm512_maskz_mov_ps(t->fin, attn_tile_exp2(lowp, x));
    const __m512 g = _mm512_sub_ps(_mm512_maskz_loadu_ps(t->msk, dprow), t->dv);
    const __mmask16 nz = _mm512_cmp_ps_mask(*p, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    *ds = _mm512_maskz_mul_ps(nz, _mm512_mul_ps(*p, g), sc);
}

static inline __attribute__((always_inline)) void attn_tile_probs_ds(const int lowp, int rows, int cols, float *s,
                                                                     const float *dp, float *ds, int64_t ld,
                                                                     const float *m, const float *ll, const float *dsum,
                                                                     float scale) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int c0 = 0; c0 < cols; c0 += 16) {
        const attn_tile_stats t = attn_tile_stats_at(cols, c0, m, ll, dsum);
        for (int r = 0; r < rows; r++) {
            __m512 p, d;
            attn_tile_p_ds(lowp, &t, s + r * ld + c0, dp + r * ld + c0, sc, &p, &d);
            _mm512_mask_storeu_ps(s + r * ld + c0, t.msk, p);
            _mm512_mask_storeu_ps(ds + r * ld + c0, t.msk, d);
        }
    }
}

#ifdef ATTN_TILE_CVT32
/* P and dS of 32 columns (two vectors) of row r at column j: computed from the logits s and dP
 * (fused), or read as computed tiles (s holds P, dp holds dS; masked-off columns read 0). */
static inline __attribute__((always_inline)) void attn_tile_p_ds2(const int lowp, const int fused,
                                                                  const attn_tile_stats *t0, const attn_tile_stats *t1,
                                                                  const float *s, const float *dp, int64_t off,
                                                                  __m512 sc, __m512 *p, __m512 *d) {
    if (fused) {
        attn_tile_p_ds(lowp, t0, s + off, dp + off, sc, &p[0], &d[0]);
        attn_tile_p_ds(lowp, t1, s + off + 16, dp + off + 16, sc, &p[1], &d[1]);
        return;
    }
    p[0] = _mm512_maskz_loadu_ps(t0->msk, s + off);
    p[1] = _mm512_maskz_loadu_ps(t1->msk, s + off + 16);
    d[0] = _mm512_maskz_loadu_ps(t0->msk, dp + off);
    d[1] = _mm512_maskz_loadu_ps(t1->msk, dp + off + 16);
}

/* pair_tile_grads (bf16_internal.h) of the P tile s and the dS tile dp (fused 0), or probs_and_ds
 * then pair_tile_grads in one pass (fused 1: s the logits, dp dP; P and dS stay in registers, no
 * float tile written). Two rows by 32 columns at a time: 32 floats round to 32 consecutive bf16,
 * which are 16 pair words in order (x86 is little-endian: the even element is the low half;
 * masked-off columns give 0, so an odd count's missing high half is 0), stored as row words; the
 * two dS rows' bf16 are interleaved 16 bits at a time into dsv's words. */
static inline __attribute__((always_inline)) void attn_tile_probs_ds_pairs(const int lowp, const int fused, int rows,
                                                                           int cols, const float *s, const float *dp,
                                                                           int64_t ld, const float *m, const float *ll,
                                                                           const float *dsum, float scale, uint32_t *pw,
                                                                           uint32_t *dsw, int64_t ldw, uint32_t *dsv,
                                                                           int64_t ldv) {
    const __m512 sc = _mm512_set1_ps(scale);
    const __m512i lo_idx = attn_tile_pair_idx_lo(), hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    attn_tile_stats t0, t1;
    for (int j = 0; j < cols; j += 32) {
        if (fused) {
            t0 = attn_tile_stats_at(cols, j, m, ll, dsum);
            t1 = attn_tile_stats_at(cols, j + 16, m, ll, dsum);
        } else {
            t0.msk = attn_tail16(cols - j);
            t1.msk = attn_tail16(cols - j - 16);
        }
        const __mmask16 kw = attn_tail16((cols - j + 1) / 2);
        for (int r = 0; r < rows; r += 2) {
            const int has1 = r + 1 < rows;
            __m512 p[2], d[2];
            attn_tile_p_ds2(lowp, fused, &t0, &t1, s, dp, r * ld + j, sc, p, d);
            const __m512i x0 = ATTN_TILE_CVT32(d[1], d[0]);
            __m512i x1 = _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(dsw + r * ldw + j / 2, kw, x0);
            _mm512_mask_storeu_epi32(pw + r * ldw + j / 2, kw, ATTN_TILE_CVT32(p[1], p[0]));
            if (has1) {
                attn_tile_p_ds2(lowp, fused, &t0, &t1, s, dp, (r + 1) * ld + j, sc, p, d);
                x1 = ATTN_TILE_CVT32(d[1], d[0]);
                _mm512_mask_storeu_epi32(dsw + (r + 1) * ldw + j / 2, kw, x1);
                _mm512_mask_storeu_epi32(pw + (r + 1) * ldw + j / 2, kw, ATTN_TILE_CVT32(p[1], p[0]));
            }
            if (!dsv) continue;
            uint32_t *v = dsv + r / 2 * ldv + j;
            _mm512_mask_storeu_epi32(v, t0.msk, _mm512_permutex2var_epi16(x0, lo_idx, x1));
            _mm512_mask_storeu_epi32(v + 16, t1.msk, _mm512_permutex2var_epi16(x0, hi_idx, x1));
        }
    }
}
#endif

#endif
