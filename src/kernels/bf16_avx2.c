/* bf16 kernels on AVX2 + FMA (CPUs without AVX-512: AMD Zen 2 and 3, Intel's client cores):
 * vdpbf16ps emulated bit for bit as bf16_avx512.c does it, in 8-lane registers, so that the bf16
 * paths run at about the fp32 FMA rate there instead of the portable scalar emulation's (0.8
 * GFLOP/s for a 512^3 product on Zen 5 with ATTN_ISA=avx2).
 *
 * vdpbf16ps step, per lane: c = ftz(daz(c) + xh yh) ; c = ftz(c + xl yl) (bf16_internal.h): a
 * bf16 widened to float is exact and so is the product of two, so each step is one FMA under
 * DAZ and FTZ (MXCSR set around the products only, restored exactly; C's scalings run outside,
 * in memory, as bf16_avx512.c's). Register tile: 4 rows x 16 columns, 8 accumulators, the two
 * B vectors' high and low halves and the broadcast word's two halves: 14 of the 16 registers.
 * Rounding (vcvtneps2bf16's: to nearest even on the bits, subnormals to signed 0, NaN quieted)
 * in integer lanes, the same bits as attn_bf16_rne_daz. */
#include <immintrin.h>
#include <string.h>

#include "bf16_internal.h"
#include "vec_tail_avx2.h"

/* The "memory" clobber orders the switch against the loads of C before the products and the
 * stores after them; every product reads operands loaded after it. */
#define BF16_ENTER()                                                                                                   \
    const unsigned csr_saved = _mm_getcsr(), csr_flush = csr_saved | 0x8040u; /* FTZ, DAZ */                           \
    __asm__ __volatile__("ldmxcsr %0" : : "m"(csr_flush) : "memory")
#define BF16_LEAVE() __asm__ __volatile__("ldmxcsr %0" : : "m"(csr_saved) : "memory")

/* C[r][j] *= (rs ? rs[r] : *f), r < rows, j < cols, under the caller's MXCSR. */
static void scale_rows(float *c, int64_t ldc, int rows, int cols, const float *rs, const float *f) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j += 8) {
            const __m256 s = _mm256_set1_ps(rs ? rs[r] : *f);
            attn_st8n(c + r * ldc + j, cols - j, _mm256_mul_ps(attn_ld8n(c + r * ldc + j, cols - j), s));
        }
}

static inline __m256 hi_half(__m256i w) {
    return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}
static inline __m256 lo_half(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }

/* The pair products run as an fp32 GEMM over operands widened once: each pair word becomes two
 * floats, its high bf16 first (k' = 2p: xh yh, then k' = 2p + 1: xl yl, the emulated step's
 * order), and a 6 x 16 register tile (12 accumulators, B's two vectors, one broadcast: 15 of the
 * 16 registers, as the fp32 flash tile) takes one FMA per k', under the same DAZ / FTZ: the
 * same chain per element, so the same bits. Widening the pair words in the loop (a 4 x 16 tile,
 * two chained FMAs per pair and accumulator: 8 chains of 2 at 2 FMAs a cycle, and 12 integer
 * ops per step) held the products at 0.8x the fp32 tile's rate on Zen 3. A is widened once per
 * k chunk for all its rows (IC), B once per panel of 16 columns and k chunk (KPC pairs). */
enum { UR = 6, KPC = 64, IC = 64 };

/* rows x 2 kc floats of A(i0 + r, p0 + q) widened: row-major (acs == 1: 8 words a load) at
 * au[r * 2 KPC + k'], else k'-major at au[k' * IC + r] (the A of P^T tiles, whose rows are
 * contiguous); *ars_u / *acs_u: the strides the tile then reads. */
static void widen_a(int rows, int kc, const uint32_t *a, int64_t ars, int64_t acs, float *au, int64_t *ars_u,
                    int64_t *acs_u) {
    if (acs == 1) {
        for (int r = 0; r < rows; r++) {
            const uint32_t *ar = a + r * ars;
            float *d = au + r * 2 * KPC;
            int q = 0;
            for (; q + 8 <= kc; q += 8) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)(ar + q));
                const __m256 h = hi_half(w), l = lo_half(w);
                const __m256 x0 = _mm256_unpacklo_ps(h, l), x1 = _mm256_unpackhi_ps(h, l);
                _mm256_storeu_ps(d + 2 * q, _mm256_permute2f128_ps(x0, x1, 0x20));
                _mm256_storeu_ps(d + 2 * q + 8, _mm256_permute2f128_ps(x0, x1, 0x31));
            }
            for (; q < kc; q++) {
                const uint32_t w = ar[q];
                const uint32_t hw = w & 0xffff0000u, lw = w << 16;
                memcpy(d + 2 * q, &hw, 4);
                memcpy(d + 2 * q + 1, &lw, 4);
            }
        }
        *ars_u = 2 * KPC, *acs_u = 1;
        return;
    }
    for (int q = 0; q < kc; q++) {
        const uint32_t *aq = a + q * acs;
        float *dh = au + 2 * q * IC, *dl = dh + IC;
        for (int r = 0; r < rows; r += 8) {
            __m256i w;
            if (ars == 1 && rows - r >= 8) {
                w = _mm256_loadu_si256((const __m256i *)(const void *)(aq + r));
            } else {
                uint32_t t[8] = {0};
                for (int e = 0; e < 8 && r + e < rows; e++) t[e] = aq[(r + e) * ars];
                w = _mm256_loadu_si256((const __m256i *)(void *)t);
            }
            _mm256_storeu_ps(dh + r, hi_half(w));
            _mm256_storeu_ps(dl + r, lo_half(w));
        }
    }
    *ars_u = 1, *acs_u = IC;
}

/* kc pair rows of nj <= 16 columns of B widened: bu[k' * 16 + j], columns past nj 0. */
static void widen_b(int nj, int kc, const uint32_t *b, int64_t ldb, float *bu) {
    for (int q = 0; q < kc; q++) {
        const uint32_t *bq = b + q * ldb;
        const __m256i w0 = _mm256_castps_si256(attn_ld8n((const float *)(const void *)bq, nj));
        const __m256i w1 = _mm256_castps_si256(attn_ld8n((const float *)(const void *)(bq + 8), nj - 8));
        _mm256_store_ps(bu + 32 * q, hi_half(w0));
        _mm256_store_ps(bu + 32 * q + 8, hi_half(w1));
        _mm256_store_ps(bu + 32 * q + 16, lo_half(w0));
        _mm256_store_ps(bu + 32 * q + 24, lo_half(w1));
    }
}

/* C rows [0, mi) (mi <= UR) x nj columns (whole: 16, a constant) += the widened A rows times B
 * over kk = 2 kc values, the accumulators starting from C (init) or 0. */
static inline __attribute__((always_inline)) void tile(const int whole, int mi, int nj, int kk, const float *au,
                                                       int64_t ars, int64_t acs, const float *bu, float *c, int64_t ldc,
                                                       int init) {
    const int64_t l0 = whole ? 8 : nj, l1 = whole ? 8 : nj - 8;
    const float *ar[UR];
    for (int r = 0; r < UR; r++) ar[r] = au + (r < mi ? r : 0) * ars;
    __m256 acc[UR][2];
    for (int r = 0; r < UR; r++) {
        acc[r][0] = init && r < mi ? attn_ld8n(c + r * ldc, l0) : _mm256_setzero_ps();
        acc[r][1] = init && r < mi && l1 > 0 ? attn_ld8n(c + r * ldc + 8, l1) : _mm256_setzero_ps();
    }
    for (int k = 0; k < kk; k++) {
        const __m256 b0 = _mm256_load_ps(bu + 16 * k), b1 = _mm256_load_ps(bu + 16 * k + 8);
        for (int r = 0; r < UR; r++) {
            const __m256 x = _mm256_broadcast_ss(ar[r] + k * acs);
            acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < UR; r++)
        if (r < mi) {
            attn_st8n(c + r * ldc, l0, acc[r][0]);
            if (l1 > 0) attn_st8n(c + r * ldc + 8, l1, acc[r][1]);
        }
}

static void gemm_pairs_avx2(int m, int n, int kp, const uint32_t *a, int64_t ars, int64_t acs, const uint32_t *b,
                            int64_t ldb, float *c, int64_t ldc, int accumulate, const float *rowscale, float outscale) {
    float au[IC * 2 * KPC] __attribute__((aligned(32))), bu[2 * KPC * 16] __attribute__((aligned(32)));
    if (accumulate && rowscale) scale_rows(c, ldc, m, n, rowscale, NULL);
    BF16_ENTER();
    for (int p0 = 0; p0 < kp || p0 == 0; p0 += KPC) { /* kp = 0 once: C = rowscale C or 0 */
        const int kc = kp - p0 < KPC ? kp - p0 : KPC, init = accumulate || p0 > 0;
        for (int i0 = 0; i0 < m; i0 += IC) {
            const int mc = m - i0 < IC ? m - i0 : IC;
            int64_t ars_u, acs_u;
            widen_a(mc, kc, a + i0 * ars + p0 * acs, ars, acs, au, &ars_u, &acs_u);
            for (int j0 = 0; j0 < n; j0 += 16) {
                const int nj = n - j0 < 16 ? n - j0 : 16;
                widen_b(nj, kc, b + p0 * ldb + j0, ldb, bu);
                float *cj = c + i0 * ldc + j0;
                for (int r0 = 0; r0 < mc; r0 += UR) {
                    const int mi = mc - r0 < UR ? mc - r0 : UR;
                    if (nj == 16)
                        tile(1, mi, 16, 2 * kc, au + r0 * ars_u, ars_u, acs_u, bu, cj + r0 * ldc, ldc, init);
                    else
                        tile(0, mi, nj, 2 * kc, au + r0 * ars_u, ars_u, acs_u, bu, cj + r0 * ldc, ldc, init);
                }
            }
        }
    }
    BF16_LEAVE();
    if (outscale != 1.0f) scale_rows(c, ldc, m, n, NULL, &outscale);
}

/* bf16 of 8 floats, one per 32-bit lane (the high half 0) */
static inline __m256i rne8(__m256 v) {
    const __m256i u = _mm256_castps_si256(v), top = _mm256_srli_epi32(u, 16);
    const __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
    const __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(top, _mm256_set1_epi32(1)));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    r = _mm256_blendv_epi8(r, _mm256_and_si256(top, _mm256_set1_epi32(0x8000)), sub);
    return _mm256_blendv_epi8(r, _mm256_or_si256(top, _mm256_set1_epi32(0x40)), nan);
}

static void round_row_avx2(int n, const float *src, const float *f, uint16_t *dst) {
    const __m256 s = _mm256_set1_ps(f ? *f : 1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(src + i);
        if (f) x = _mm256_mul_ps(x, s);
        const __m256i r = rne8(x);
        /* packus keeps each 128-bit lane's four words; the permute brings lanes 0 and 2 together */
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_castsi256_si128(p));
    }
    for (; i < n; i++) dst[i] = attn_bf16_rne_daz(f ? src[i] * *f : src[i]);
}

static void pair_rows_f32_avx2(int rows, int cols, const float *src, int64_t lds, uint32_t *dst, int64_t ldd) {
    for (int p = 0; p < (rows + 1) / 2; p++) {
        const float *r0 = src + 2 * p * lds, *r1 = r0 + lds;
        const int has1 = 2 * p + 1 < rows;
        for (int j = 0; j < cols; j += 8) {
            const __m256i lo = rne8(attn_ld8n(r0 + j, cols - j));
            const __m256i hi = has1 ? rne8(attn_ld8n(r1 + j, cols - j)) : _mm256_setzero_si256();
            attn_st8n((float *)(void *)(dst + p * ldd + j), cols - j,
                      _mm256_castsi256_ps(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 16))));
        }
    }
}

/* Rows of a tile as A-operand words: w[r * ldw + q] = pair(bf16(x[r][2q]), bf16(x[r][2q + 1])),
 * the missing column of an odd count 0: on a little-endian CPU a row's bf16 in order. */
static void pair_cols_f32(int rows, int cols, const float *x, int64_t ld, uint32_t *w, int64_t ldw) {
    for (int r = 0; r < rows; r++) {
        uint16_t *h = (uint16_t *)(void *)(w + r * ldw);
        round_row_avx2(cols, x + r * ld, NULL, h);
        if (cols & 1) h[cols] = 0;
    }
}

static void pair_tile_grads_avx2(int rows, int cols, const float *p, const float *ds, int64_t ld, uint32_t *pw,
                                 uint32_t *dsw, int64_t ldw, uint32_t *dsv, int64_t ldv) {
    pair_cols_f32(rows, cols, p, ld, pw, ldw);
    pair_cols_f32(rows, cols, ds, ld, dsw, ldw);
    if (dsv) pair_rows_f32_avx2(rows, cols, ds, ld, dsv, ldv);
}

static void pair_rows_bf16_avx2(int rows, int cols, const uint16_t *src, int64_t lds, uint32_t *dst, int64_t ldd) {
    for (int p = 0; p < (rows + 1) / 2; p++) {
        const uint16_t *r0 = src + 2 * p * lds, *r1 = r0 + lds;
        const int has1 = 2 * p + 1 < rows;
        int j = 0;
        for (; j + 8 <= cols; j += 8) {
            const __m256i lo = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(r0 + j)));
            const __m256i hi = has1 ? _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(r1 + j)))
                                    : _mm256_setzero_si256();
            _mm256_storeu_si256((__m256i *)(void *)(dst + p * ldd + j), _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16)));
        }
        for (; j < cols; j++) dst[p * ldd + j] = attn_pair(r0[j], has1 ? r1[j] : 0);
    }
}

const attn_bf16_kernels *attn_bf16_kernels_avx2(void) {
    /* no fused flash steps: the driver runs the AVX2 flash kernels' softmax, then these roundings */
    static const attn_bf16_kernels k = {.name = "avx2 (vdpbf16ps emulated by FMAs)",
                                        .unit = ATTN_BF16_UNIT_FMA,
                                        .fused_softmax_tile = ATTN_SOFTMAX_TILE_OWN,
                                        .gemm_pairs = gemm_pairs_avx2,
                                        .pair_rows_f32 = pair_rows_f32_avx2,
                                        .pair_tile_grads = pair_tile_grads_avx2,
                                        .pair_rows_bf16 = pair_rows_bf16_avx2,
                                        .round_row = round_row_avx2,
                                        .softmax_pairs = NULL,
                                        .probs_ds_pairs = NULL};
    return &k;
}
