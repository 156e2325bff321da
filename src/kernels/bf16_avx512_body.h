/* The bf16 kernels' AVX-512 bodies (contracts in bf16_internal.h), included by one file per ISA
 * with the pair-product and rounding operations defined first:
 *   BF16_FN(name)       the function's name in that file
 *   BF16_DP(c, x, b)    one vdpbf16ps step on pair words x, b (__m512i) into c (__m512)
 *   BF16_CVT16(v)       16 floats rounded to bf16 (vcvtneps2bf16), __m256i
 *   BF16_CVT32(hi, lo)  32 floats, lo's then hi's, rounded to bf16 (vcvtne2ps2bf16), __m512i
 *   BF16_EMULATED       1 when BF16_DP needs subnormals flushed (BF16_ENTER / BF16_LEAVE around
 *                       the products; C's scalings stay outside them), else 0
 * bf16_avx512bf16.c: the AVX512-BF16 instructions; bf16_avx512.c: AVX-512F alone. */
#ifndef ATTN_BF16_AVX512_BODY_H
#define ATTN_BF16_AVX512_BODY_H

#include <immintrin.h>

#include "bf16_internal.h"
#define ATTN_TILE_CVT32(hi, lo) BF16_CVT32(hi, lo)
#include "softmax_tile_avx512.h"
#include "vec_tail_avx512.h"

/* C[r][j] *= (rs ? rs[r] : *f) for r < rows, j < min(cols, 64): the emulation's scalings, kept
 * outside its flush-to-zero region (BF16_ENTER .. BF16_LEAVE). */
static inline void scale_rows(float *c, int64_t ldc, int rows, int cols, const float *rs, const float *f) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < 64 && j < cols; j += 16) {
            const __mmask16 k = attn_tail16(cols - j);
            const __m512 x = attn_ld16(k, c + r * ldc + j);
            attn_st16(c + r * ldc + j, k, _mm512_mul_ps(x, _mm512_set1_ps(rs ? rs[r] : *f)));
        }
}

/* Register tile: 4 rows x 64 columns (16 accumulators); masked loads and stores at the edges
 * (masked-off lanes read 0, whose products add nothing). One panel of nj <= 64 columns per call
 * of the body; gemm_pairs passes whole panels as the constant 64, so their masks are constants
 * and every load and store a plain one (vec_tail_avx512.h; on Zen 5 2048^3 ran at 274-289
 * GFLOP/s with masked B loads, 349-370 with plain ones). */
static inline __attribute__((always_inline)) void BF16_FN(pairs_panel)(int m, int nj, int kp, const uint32_t *a,
                                                                       int64_t ars, int64_t acs, const uint32_t *b,
                                                                       int64_t ldb, float *c, int64_t ldc,
                                                                       int accumulate, const float *rowscale,
                                                                       float outscale) {
    const __m512 os = _mm512_set1_ps(outscale);
    /* multiplies by 1 skipped: they would take vdpbf16ps's FP pipes (x * 1 is x, bit for bit) */
    const int scale_out = outscale != 1.0f;
    const __mmask16 k0 = attn_tail16(nj), k1 = attn_tail16(nj - 16), k2 = attn_tail16(nj - 32),
                    k3 = attn_tail16(nj - 48);
    for (int i0 = 0; i0 < m; i0 += 4) {
        const int mi = m - i0 < 4 ? m - i0 : 4;
        __m512 c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33;
        c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = _mm512_setzero_ps();
        c20 = c21 = c22 = c23 = c30 = c31 = c32 = c33 = _mm512_setzero_ps();
        /* the emulation scales C in place before it flushes subnormals, as vdpbf16ps's callers
         * scale under the caller's MXCSR */
        if (BF16_EMULATED && accumulate && rowscale)
            scale_rows(c + (int64_t)i0 * ldc, ldc, mi, nj, rowscale + i0, NULL);
        BF16_ENTER();
#define LOADC(r, v, kk, dst)                                                                                           \
    if (accumulate && (r) < mi) {                                                                                      \
        dst = attn_ld16(kk, c + (int64_t)(i0 + (r)) * ldc + 16 * (v));                                                 \
        if (!BF16_EMULATED && rowscale) dst = _mm512_mul_ps(dst, _mm512_set1_ps(rowscale[i0 + (r)]));                  \
    }
        /* macro steps without semicolons: laid out by hand, one row of C per line */
        /* clang-format off */
        LOADC(0, 0, k0, c00) LOADC(0, 1, k1, c01) LOADC(0, 2, k2, c02) LOADC(0, 3, k3, c03)
        LOADC(1, 0, k0, c10) LOADC(1, 1, k1, c11) LOADC(1, 2, k2, c12) LOADC(1, 3, k3, c13)
        LOADC(2, 0, k0, c20) LOADC(2, 1, k1, c21) LOADC(2, 2, k2, c22) LOADC(2, 3, k3, c23)
        LOADC(3, 0, k0, c30) LOADC(3, 1, k1, c31) LOADC(3, 2, k2, c32) LOADC(3, 3, k3, c33)
        /* clang-format on */
#undef LOADC
                    const uint32_t *a0 = a + (int64_t)i0 * ars,
                                   *a1 = a + (int64_t)(i0 + (mi > 1)) * ars,
                                   *a2 = a + (int64_t)(i0 + (mi > 2 ? 2 : 0)) * ars,
                                   *a3 = a + (int64_t)(i0 + (mi > 3 ? 3 : 0)) * ars;
        const uint32_t *bp = b;
        for (int p = 0; p < kp; p++, bp += ldb) {
            const __m512i b0 = attn_ld16_epi32(k0, bp);
            const __m512i b1 = attn_ld16_epi32(k1, bp + 16);
            const __m512i b2 = attn_ld16_epi32(k2, bp + 32);
            const __m512i b3 = attn_ld16_epi32(k3, bp + 48);
            const int64_t o = (int64_t)p * acs;
            __m512i x = _mm512_set1_epi32((int)a0[o]);
            c00 = BF16_DP(c00, x, b0);
            c01 = BF16_DP(c01, x, b1);
            c02 = BF16_DP(c02, x, b2);
            c03 = BF16_DP(c03, x, b3);
            x = _mm512_set1_epi32((int)a1[o]);
            c10 = BF16_DP(c10, x, b0);
            c11 = BF16_DP(c11, x, b1);
            c12 = BF16_DP(c12, x, b2);
            c13 = BF16_DP(c13, x, b3);
            x = _mm512_set1_epi32((int)a2[o]);
            c20 = BF16_DP(c20, x, b0);
            c21 = BF16_DP(c21, x, b1);
            c22 = BF16_DP(c22, x, b2);
            c23 = BF16_DP(c23, x, b3);
            x = _mm512_set1_epi32((int)a3[o]);
            c30 = BF16_DP(c30, x, b0);
            c31 = BF16_DP(c31, x, b1);
            c32 = BF16_DP(c32, x, b2);
            c33 = BF16_DP(c33, x, b3);
        }
#define STOREC(r, v, kk, src)                                                                                          \
    if ((r) < mi)                                                                                                      \
        attn_st16(c + (int64_t)(i0 + (r)) * ldc + 16 * (v), kk,                                                        \
                  !BF16_EMULATED && scale_out ? _mm512_mul_ps(src, os) : src);
        /* macro steps without semicolons: laid out by hand, one row of C per line */
        /* clang-format off */
        STOREC(0, 0, k0, c00) STOREC(0, 1, k1, c01) STOREC(0, 2, k2, c02) STOREC(0, 3, k3, c03)
        STOREC(1, 0, k0, c10) STOREC(1, 1, k1, c11) STOREC(1, 2, k2, c12) STOREC(1, 3, k3, c13)
        STOREC(2, 0, k0, c20) STOREC(2, 1, k1, c21) STOREC(2, 2, k2, c22) STOREC(2, 3, k3, c23)
        STOREC(3, 0, k0, c30) STOREC(3, 1, k1, c31) STOREC(3, 2, k2, c32) STOREC(3, 3, k3, c33)
        /* clang-format on */
#undef STOREC
                        BF16_LEAVE();
        if (BF16_EMULATED && scale_out) scale_rows(c + (int64_t)i0 * ldc, ldc, mi, nj, NULL, &outscale);
    }
}

static void BF16_FN(gemm_pairs)(int m, int n, int kp, const uint32_t *a, int64_t ars, int64_t acs, const uint32_t *b,
                                int64_t ldb, float *c, int64_t ldc, int accumulate, const float *rowscale,
                                float outscale) {
    for (int j0 = 0; j0 < n; j0 += 64) {
        if (n - j0 >= 64)
            BF16_FN(pairs_panel)(m, 64, kp, a, ars, acs, b + j0, ldb, c + j0, ldc, accumulate, rowscale, outscale);
        else
            BF16_FN(pairs_panel)(m, n - j0, kp, a, ars, acs, b + j0, ldb, c + j0, ldc, accumulate, rowscale, outscale);
    }
}

/* 16 words: the low halves from lo, the high halves from hi. */
static inline __m512i interleave16(__m256i lo, __m256i hi) {
    return _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

/* Two rows' 32-column chunks, each rounded with one vcvtne2ps2bf16, then interleaved 16 bits at a
 * time by two vpermt2w (masked-off columns load 0, as does the missing row of an odd count). */
static void BF16_FN(pair_rows_f32)(int rows, int cols, const float *src, int64_t lds, uint32_t *dst, int64_t ldd) {
    const __m512i lo_idx = attn_tile_pair_idx_lo(), hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    for (int p = 0; p < (rows + 1) / 2; p++) {
        const float *r0 = src + 2 * p * lds, *r1 = r0 + lds;
        const int has1 = 2 * p + 1 < rows;
        for (int j = 0; j < cols; j += 32) {
            const __mmask16 klo = attn_tail16(cols - j), khi = attn_tail16(cols - j - 16);
            const __m512i x0 = BF16_CVT32(attn_ld16(khi, r0 + j + 16), attn_ld16(klo, r0 + j));
            const __m512i x1 =
                has1 ? BF16_CVT32(attn_ld16(khi, r1 + j + 16), attn_ld16(klo, r1 + j)) : _mm512_setzero_si512();
            attn_st16_epi32(dst + p * ldd + j, klo, _mm512_permutex2var_epi16(x0, lo_idx, x1));
            if (khi) attn_st16_epi32(dst + p * ldd + j + 16, khi, _mm512_permutex2var_epi16(x0, hi_idx, x1));
        }
    }
}

static void BF16_FN(pair_tile_grads)(int rows, int cols, const float *p, const float *ds, int64_t ld, uint32_t *pw,
                                     uint32_t *dsw, int64_t ldw, uint32_t *dsv, int64_t ldv) {
    attn_tile_probs_ds_pairs(0, 0, rows, cols, p, ds, ld, NULL, NULL, NULL, 1.0f, pw, dsw, ldw, dsv, ldv);
}

static void BF16_FN(pair_rows_bf16)(int rows, int cols, const uint16_t *src, int64_t lds, uint32_t *dst, int64_t ldd) {
    for (int p = 0; p < (rows + 1) / 2; p++) {
        const uint16_t *r0 = src + 2 * p * lds, *r1 = r0 + lds;
        const int has1 = 2 * p + 1 < rows;
        for (int j = 0; j < cols; j += 16) {
            const __mmask16 k = attn_tail16(cols - j);
            const __m256i lo = attn_ld16_epi16(k, r0 + j);
            const __m256i hi = has1 ? attn_ld16_epi16(k, r1 + j) : _mm256_setzero_si256();
            attn_st16_epi32(dst + p * ldd + j, k, interleave16(lo, hi));
        }
    }
}

static void BF16_FN(round_row)(int n, const float *src, const float *f, uint16_t *dst) {
    const __m512 s = _mm512_set1_ps(f ? *f : 1.0f);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = attn_tail16(n - i);
        __m512 x = attn_ld16(k, src + i);
        if (f) x = _mm512_mul_ps(x, s);
        attn_st16_epi16(dst + i, k, BF16_CVT16(x));
    }
}

/* The fused flash steps (bf16_internal.h): the flash tile kernels' arithmetic
 * (softmax_tile_avx512.h) with this file's rounding. */
static void BF16_FN(softmax_pairs)(int rows, int cols, float *s, int64_t lds, float *mrun, float *l, float *alpha,
                                   uint32_t *pw, int64_t ldw) {
    attn_tile_softmax(1, rows, cols, s, lds, mrun, l, alpha, NULL, pw, ldw);
}

static void BF16_FN(probs_ds_pairs)(int rows, int cols, const float *s, const float *dp, int64_t ld, const float *m,
                                    const float *ll, const float *dsum, float scale, uint32_t *pw, uint32_t *dsw,
                                    int64_t ldw, uint32_t *dsv, int64_t ldv) {
    attn_tile_probs_ds_pairs(1, 1, rows, cols, s, dp, ld, m, ll, dsum, scale, pw, dsw, ldw, dsv, ldv);
}

#endif
