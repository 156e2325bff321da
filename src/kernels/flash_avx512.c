/* AVX-512 flash-attention tile kernels (contracts in flash_internal.h).
 *
 * gemm: register tile of 4 or 6 rows x 64 columns (16 or 24 zmm accumulators, chosen per
 * microarchitecture: see gemm_rows); A is broadcast element by element so it may have any
 * strides, B rows are read with unaligned (tail: masked) loads.
 * The online softmax and the backward's probabilities (exp2, the bf16 path's cheaper polynomial)
 * live in kernels/softmax_tile_avx512.h, shared with the bf16 kernels' fused versions.
 * Dropout: Philox-4x32-10 in 16 lanes (one counter block per lane; the 32 x 32 -> 64 products from
 * two vpmuludq on the even and odd lanes); when the stream indices of four consecutive keys share
 * a block (Nk and the tile start multiples of 4), one block serves four rows. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "flash_kernels.h"
#include "kernels/softmax_tile_avx512.h"
#include "kernels/vec_tail_avx512.h"

#define MR_MAX 6

/* One MR x (16 nv) tile; rows past mm re-read the last valid row and are not stored. */
static inline __attribute__((always_inline)) void ukr(const int MR, const int nv, int mm, int k, const float *a,
                                                      int64_t ars, int64_t acs, const float *b, int64_t ldb, float *c,
                                                      int64_t ldc, int accumulate, const float *rowscale, float *colmax,
                                                      __mmask16 last) {
    __m512 acc[MR_MAX][4];
    const float *ar[MR_MAX];
    for (int r = 0; r < MR; r++) ar[r] = a + (r < mm ? r : mm - 1) * ars;
    for (int r = 0; r < MR; r++) {
        const __m512 f = _mm512_set1_ps(rowscale && r < mm ? rowscale[r] : 1.0f);
        for (int q = 0; q < nv; q++) {
            const __mmask16 msk = q == nv - 1 ? last : (__mmask16)0xFFFF;
            acc[r][q] =
                accumulate && r < mm ? _mm512_mul_ps(attn_ld16(msk, c + r * ldc + 16 * q), f) : _mm512_setzero_ps();
        }
    }
    for (int p = 0; p < k; p++) {
        __m512 bv[4];
        const float *bp = b + p * ldb;
        for (int q = 0; q < nv; q++) bv[q] = q == nv - 1 ? attn_ld16(last, bp + 16 * q) : _mm512_loadu_ps(bp + 16 * q);
        for (int r = 0; r < MR; r++) {
            const __m512 av = _mm512_set1_ps(ar[r][p * acs]);
            for (int q = 0; q < nv; q++) acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);
        }
    }
    for (int r = 0; r < MR; r++) {
        if (r >= mm) break;
        for (int q = 0; q < nv; q++) {
            const __mmask16 msk = q == nv - 1 ? last : (__mmask16)0xFFFF;
            attn_st16(c + r * ldc + 16 * q, msk, acc[r][q]);
        }
    }
    if (colmax) /* rows past mm repeat row mm - 1, so they cannot change a maximum */
        for (int q = 0; q < nv; q++) {
            const __mmask16 msk = q == nv - 1 ? last : (__mmask16)0xFFFF;
            __m512 mx = attn_ld16(msk, colmax + 16 * q);
            for (int r = 0; r < MR; r++) mx = _mm512_max_ps(mx, acc[r][q]);
            attn_st16(colmax + 16 * q, msk, mx);
        }
}

/* One MR-row group of a panel of nv vectors (the last one masked by last). */
static inline __attribute__((always_inline)) void tile_cols(const int MR, int nv, __mmask16 last, int mm, int k,
                                                            const float *a, int64_t ars, int64_t acs, const float *b,
                                                            int64_t ldb, float *c, int64_t ldc, int accumulate,
                                                            const float *rowscale, float *colmax) {
    switch (nv) {
    case 4: /* a whole 64-column tile: the constant mask makes every load a plain one */
        if (last == (__mmask16)0xFFFF)
            ukr(MR, 4, mm, k, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, colmax, (__mmask16)0xFFFF);
        else
            ukr(MR, 4, mm, k, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, colmax, last);
        break;
    case 3: ukr(MR, 3, mm, k, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, colmax, last); break;
    case 2: ukr(MR, 2, mm, k, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, colmax, last); break;
    default: ukr(MR, 1, mm, k, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, colmax, last); break;
    }
}

/* The tile rows per register tile, MR, is the one kernel parameter chosen per microarchitecture
 * (attn_flash_avx512_rows): 4 rows x 64 columns (16 accumulators) as tuned on AMD (6 measured
 * no faster on Zen 5), or 6 rows (24 accumulators: B is streamed from L1 a third fewer times per
 * tile and each broadcast feeds as many FMAs) where measured faster, Intel Ice Lake-SP. Every
 * element of C is the same chain of FMAs in increasing p either way, so the choice never changes
 * a bit. */
static inline __attribute__((always_inline)) void gemm_rows(const int MR, int m, int n, int k, const float *a,
                                                            int64_t ars, int64_t acs, const float *b, int64_t ldb,
                                                            float *c, int64_t ldc, int accumulate,
                                                            const float *rowscale, float *colmax) {
    for (int j0 = 0; j0 < n; j0 += 64) {
        const int nn = n - j0 < 64 ? n - j0 : 64;
        const int nv = (nn + 15) / 16;
        const __mmask16 last = attn_tail16(nn - 16 * (nv - 1));
        for (int i0 = 0; i0 < m; i0 += MR) {
            const int mm = m - i0 < MR ? m - i0 : MR;
            const float *ai = a + i0 * ars;
            float *ci = c + i0 * ldc + j0;
            const float *rs = rowscale ? rowscale + i0 : NULL;
            float *cm = colmax ? colmax + j0 : NULL;
            /* a last group of at most 4 rows (64 = 10 x 6 + 4) runs the 4-row tile rather than
             * 6 rows of which 2 repeat a row: 3% fewer FMAs in a 64-row tile, the same chains */
            if (MR > 4 && mm <= 4)
                tile_cols(4, nv, last, mm, k, ai, ars, acs, b + j0, ldb, ci, ldc, accumulate, rs, cm);
            else
                tile_cols(MR, nv, last, mm, k, ai, ars, acs, b + j0, ldb, ci, ldc, accumulate, rs, cm);
        }
    }
}

/* A given down its columns of a score tile (ars 1, acs ATTN_FLASH_BR: P and dS in P V, dS K and
 * the like) is compiled with the strides as constants: the row group's broadcasts then come off
 * one pointer at fixed offsets instead of MR row pointers and a stride held in registers, which
 * spilled to the stack inside the k loop (the P V product ran at 0.78-0.89x the same product
 * with A by rows). */
static inline __attribute__((always_inline)) void gemm_layouts(const int MR, int m, int n, int k, const float *a,
                                                               int64_t ars, int64_t acs, const float *b, int64_t ldb,
                                                               float *c, int64_t ldc, int accumulate,
                                                               const float *rowscale, float *colmax) {
    if (ars == 1 && acs == ATTN_FLASH_BR)
        gemm_rows(MR, m, n, k, a, 1, ATTN_FLASH_BR, b, ldb, c, ldc, accumulate, rowscale, colmax);
    else
        gemm_rows(MR, m, n, k, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, colmax);
}

static void gemm_avx512_r4(int m, int n, int k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                           float *c, int64_t ldc, int accumulate, const float *rowscale, float *colmax) {
    gemm_layouts(4, m, n, k, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, colmax);
}

static void gemm_avx512_r6(int m, int n, int k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                           float *c, int64_t ldc, int accumulate, const float *rowscale, float *colmax) {
    gemm_layouts(6, m, n, k, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, colmax);
}

static void softmax_update_avx512(int rows, int cols, float *s, int64_t lds, float *mrun, float *l, float *alpha,
                                  const float *tilemax) {
    attn_tile_softmax(0, rows, cols, s, lds, mrun, l, alpha, tilemax, NULL, 0);
}

static void softmax_update_avx512_bf16(int rows, int cols, float *s, int64_t lds, float *mrun, float *l, float *alpha,
                                       const float *tilemax) {
    attn_tile_softmax(1, rows, cols, s, lds, mrun, l, alpha, tilemax, NULL, 0);
}

static void probs_and_ds_avx512(int rows, int cols, float *s, const float *dp, float *ds, int64_t ld, const float *m,
                                const float *ll, const float *dsum, float scale) {
    attn_tile_probs_ds(0, rows, cols, s, dp, ds, ld, m, ll, dsum, scale);
}

static void probs_and_ds_avx512_bf16(int rows, int cols, float *s, const float *dp, float *ds, int64_t ld,
                                     const float *m, const float *ll, const float *dsum, float scale) {
    attn_tile_probs_ds(1, rows, cols, s, dp, ds, ld, m, ll, dsum, scale);
}

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* hi and lo 32 bits of a[l] * m for 16 lanes */
static inline void mulhilo16(__m512i a, __m512i m, __m512i *hi, __m512i *lo) {
    const __m512i even = _mm512_mul_epu32(a, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

/* Philox-4x32-10 on 16 counters {c0, c1, c2, c3} with key {k0, k1} (the rounds of kernels/philox.c). */
static inline void philox16(__m512i c[4], uint32_t k0, uint32_t k1) {
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
    for (int r = 0; r < 10; r++) {
        __m512i hi0, lo0, hi1, lo1;
        mulhilo16(c[0], m0, &hi0, &lo0);
        mulhilo16(c[2], m1, &hi1, &lo1);
        const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c[1]), _mm512_set1_epi32((int)k0));
        const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c[3]), _mm512_set1_epi32((int)k1));
        c[1] = lo1;
        c[3] = lo0;
        c[0] = n0;
        c[2] = n2;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
}

/* lo and hi 32-bit halves of 16 64-bit values (two 8-lane vectors) */
static inline void split64(__m512i a, __m512i b, __m512i *lo, __m512i *hi) {
    *lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(a)), _mm512_cvtepi64_epi32(b), 1);
    *hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(_mm512_srli_epi64(a, 32))),
                             _mm512_cvtepi64_epi32(_mm512_srli_epi64(b, 32)), 1);
}

static void dropout_tile_avx512(int rows, int cols, float *s, int64_t ld, const uint64_t *colbase, uint64_t seed,
                                uint64_t offset, float p) {
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const __m512i off_lo = _mm512_set1_epi32((int)(uint32_t)offset),
                  off_hi = _mm512_set1_epi32((int)(uint32_t)(offset >> 32));
    /* keep iff (word >> 8) * 2^-24 >= p  <=>  (word >> 8) >= ceil(p 2^24), exactly */
    const __m512i thr = _mm512_set1_epi32((int)(uint32_t)ceil((double)p * 16777216.0));
    const __m512 scale = _mm512_set1_ps((float)(p < 1 ? 1.0 / (1.0 - (double)p) : 0.0));
    for (int c0 = 0; c0 < cols; c0 += 16) {
        const int nc = cols - c0 < 16 ? cols - c0 : 16;
        const __mmask16 msk = attn_tail16(nc);
        uint64_t base[16];
        int aligned = 1;
        for (int q = 0; q < 16; q++) {
            base[q] = colbase[c0 + (q < nc ? q : 0)];
            aligned &= (base[q] & 3u) == 0;
        }
        const __m512i b0 = _mm512_loadu_si512(base), b1 = _mm512_loadu_si512(base + 8);
        if (aligned) {
            for (int r0 = 0; r0 < rows; r0 += 4) {
                const __m512i add = _mm512_set1_epi64((long long)(r0 >> 2));
                __m512i c[4];
                split64(_mm512_add_epi64(_mm512_srli_epi64(b0, 2), add),
                        _mm512_add_epi64(_mm512_srli_epi64(b1, 2), add), &c[0], &c[1]);
                c[2] = off_lo;
                c[3] = off_hi;
                philox16(c, k0, k1);
                for (int t = 0; t < 4 && r0 + t < rows; t++) {
                    const __mmask16 keep = _mm512_cmp_epu32_mask(_mm512_srli_epi32(c[t], 8), thr, _MM_CMPINT_NLT);
                    float *sp = s + (r0 + t) * ld + c0;
                    attn_st16(sp, msk, _mm512_maskz_mul_ps(keep, attn_ld16(msk, sp), scale));
                }
            }
        } else {
            for (int r = 0; r < rows; r++) {
                const __m512i add = _mm512_set1_epi64(r);
                const __m512i i0 = _mm512_add_epi64(b0, add), i1 = _mm512_add_epi64(b1, add);
                __m512i c[4], sel, unused;
                split64(_mm512_srli_epi64(i0, 2), _mm512_srli_epi64(i1, 2), &c[0], &c[1]);
                split64(i0, i1, &sel, &unused);
                sel = _mm512_and_si512(sel, _mm512_set1_epi32(3));
                c[2] = off_lo;
                c[3] = off_hi;
                philox16(c, k0, k1);
                __m512i w = c[0];
                w = _mm512_mask_mov_epi32(w, _mm512_cmpeq_epi32_mask(sel, _mm512_set1_epi32(1)), c[1]);
                w = _mm512_mask_mov_epi32(w, _mm512_cmpeq_epi32_mask(sel, _mm512_set1_epi32(2)), c[2]);
                w = _mm512_mask_mov_epi32(w, _mm512_cmpeq_epi32_mask(sel, _mm512_set1_epi32(3)), c[3]);
                const __mmask16 keep = _mm512_cmp_epu32_mask(_mm512_srli_epi32(w, 8), thr, _MM_CMPINT_NLT);
                float *sp = s + r * ld + c0;
                attn_st16(sp, msk, _mm512_maskz_mul_ps(keep, attn_ld16(msk, sp), scale));
            }
        }
    }
}

/* 16 x 16 transpose in registers: unpack pairs of rows, shuffle quads, then move 128-bit lanes
 * (column 4L + c ends up assembled from lane L of the four quad groups). */
static inline void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {
        u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        const __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        const __m512 y0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        const __m512 x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
        const __m512 y1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_f32x4(x0, y0, 0x88);      /* columns 0..3 */
        r[8 + c] = _mm512_shuffle_f32x4(x0, y0, 0xDD);  /* columns 8..11 */
        r[4 + c] = _mm512_shuffle_f32x4(x1, y1, 0x88);  /* columns 4..7 */
        r[12 + c] = _mm512_shuffle_f32x4(x1, y1, 0xDD); /* columns 12..15 */
    }
}

static void pack_transposed_avx512(int rows, int cols, const float *src, int64_t rs, float f, float *dst, int64_t ldd) {
    const __m512 fv = _mm512_set1_ps(f);
    for (int q0 = 0; q0 < rows; q0 += 16) {
        const int nq = rows - q0 < 16 ? rows - q0 : 16;
        const __mmask16 qm = attn_tail16(nq);
        for (int t0 = 0; t0 < cols; t0 += 16) {
            const int nt = cols - t0 < 16 ? cols - t0 : 16;
            const __mmask16 tm = attn_tail16(nt);
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                r[i] = i < nq ? attn_ld16(tm, src + (q0 + i) * rs + t0) : _mm512_setzero_ps();
                if (f != 1.0f) r[i] = _mm512_mul_ps(r[i], fv);
            }
            transpose16(r);
            for (int j = 0; j < nt; j++) attn_st16(dst + (t0 + j) * ldd + q0, qm, r[j]);
        }
    }
}

static void scale_copy_rows_avx512(int m, int n, const float *src, int64_t lds, const float *f, float *dst,
                                   int64_t ldd) {
    for (int i = 0; i < m; i++) {
        const __m512 fv = _mm512_set1_ps(f ? f[i] : 1.0f);
        for (int j = 0; j < n; j += 16) {
            const __mmask16 msk = attn_tail16(n - j);
            attn_st16(dst + i * ldd + j, msk, _mm512_mul_ps(attn_ld16(msk, src + i * lds + j), fv));
        }
    }
}

/* The two tables differ only in the gemm's register rows. */
#define FLASH_AVX512_TABLE(R)                                                                                          \
    {                                                                                                                  \
        .name = "avx512 (" #R " x 64 register tiles)", .softmax_tile = ATTN_SOFTMAX_TILE_AVX512, .register_rows = R,   \
        .gemm = gemm_avx512_r##R, .softmax_update = softmax_update_avx512, .probs_and_ds = probs_and_ds_avx512,        \
        .softmax_update_bf16 = softmax_update_avx512_bf16, .probs_and_ds_bf16 = probs_and_ds_avx512_bf16,              \
        .pack_transposed = pack_transposed_avx512, .dropout_tile = dropout_tile_avx512,                                \
        .scale_copy_rows = scale_copy_rows_avx512                                                                      \
    }

const attn_flash_kernels *attn_flash_kernels_avx512_rows(int rows) {
    static const attn_flash_kernels k4 = FLASH_AVX512_TABLE(4), k6 = FLASH_AVX512_TABLE(6);
    return rows == 6 ? &k6 : rows == 4 ? &k4 : NULL;
}

const attn_flash_kernels *attn_flash_kernels_avx512(void) {
    return attn_flash_kernels_avx512_rows(attn_flash_avx512_rows(NULL));
}
