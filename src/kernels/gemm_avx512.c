/* AVX-512 SGEMM: the 14 x 32 micro-kernel, packing with in-register transposes, the few-row
 * kernels (op(B) = B and op(B) = B^T), and the FMA-peak loop.
 *
 * Why 14 x 32: 28 zmm accumulators (2 per row of C) + 2 for the B row + 1 for the broadcast A
 * element = 31 of the 32 zmm registers. Per k step: 2 vector loads and 14 broadcasts feed 28
 * FMAs, so the two FMA pipes (latency 4, i.e. >= 8 independent chains needed) stay the limit,
 * not the load ports. The A micro-panel (14 x KC) stays in L1 while the B micro-panels stream
 * from the L2-resident B~ block (see gemm.c). Partial tiles run the same code: a row count
 * instantiated at compile time (1..14, so no wasted FMAs on missing rows) and masked C accesses
 * for missing columns (packed A~ / B~ are zero padded). 12 x 32 measured the same; prefetching
 * B or the next A panel in software measured no gain on Zen (the hardware prefetchers keep up). */
#include <immintrin.h>

#include "gemm_internal.h"
#include "vec_tail_avx512.h"

enum { MR = 14, NR = 32 };

static inline __attribute__((always_inline)) void ukr_body(const int R, int64_t kc, const float *a, const float *b,
                                                           int64_t ldb, float *c, int64_t ldc, float alpha, float beta,
                                                           int nr) {
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 16
    for (int i = 0; i < R; i++) {
        c0[i] = _mm512_setzero_ps();
        c1[i] = _mm512_setzero_ps();
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 16
        for (int i = 0; i < R; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
        a += MR;
        b += ldb;
    }
    __mmask16 m0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1u);
    __mmask16 m1 = nr >= 32 ? (__mmask16)0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1u) : (__mmask16)0;
    __m512 va = _mm512_set1_ps(alpha);
    if (beta == 0.0f) {
#pragma GCC unroll 16
        for (int i = 0; i < R; i++) {
            attn_st16(c + i * ldc, m0, _mm512_mul_ps(c0[i], va));
            attn_st16(c + i * ldc + 16, m1, _mm512_mul_ps(c1[i], va));
        }
    } else {
        __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
        for (int i = 0; i < R; i++) {
            __m512 o0 = attn_ld16(m0, c + i * ldc);
            __m512 o1 = attn_ld16(m1, c + i * ldc + 16);
            o0 = _mm512_fmadd_ps(c0[i], va, _mm512_mul_ps(o0, vb));
            o1 = _mm512_fmadd_ps(c1[i], va, _mm512_mul_ps(o1, vb));
            attn_st16(c + i * ldc, m0, o0);
            attn_st16(c + i * ldc + 16, m1, o1);
        }
    }
}

#define UKR(R)                                                                                                         \
    static void ukr_##R(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, float alpha,   \
                        float beta, int nr) {                                                                          \
        ukr_body(R, kc, a, b, ldb, c, ldc, alpha, beta, nr);                                                           \
    }
/* macro steps without semicolons: laid out by hand, one row of C per line */
/* clang-format off */
UKR(1) UKR(2) UKR(3) UKR(4) UKR(5) UKR(6) UKR(7) UKR(8) UKR(9) UKR(10) UKR(11) UKR(12) UKR(13)
    /* clang-format on */

    typedef void (*ukr_fixed_fn)(int64_t, const float *, const float *, int64_t, float *, int64_t, float, float, int);
static const ukr_fixed_fn ukr_fixed[MR + 1] = {0,     ukr_1, ukr_2,  ukr_3,  ukr_4,  ukr_5,  ukr_6, ukr_7,
                                               ukr_8, ukr_9, ukr_10, ukr_11, ukr_12, ukr_13, 0};

static void ukr_avx512(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, float alpha,
                       float beta, int mr, int nr) {
    if (mr == MR)
        ukr_body(MR, kc, a, b, ldb, c, ldc, alpha, beta, nr);
    else
        ukr_fixed[mr](kc, a, b, ldb, c, ldc, alpha, beta, nr);
}

/* ---- packing ------------------------------------------------------------------------------ */

/* In-register transpose of 16 rows of 16 floats: afterwards r[j] holds column j. */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 t[16];
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        t[i + 2] = _mm512_unpacklo_ps(r[i + 2], r[i + 3]);
        t[i + 3] = _mm512_unpackhi_ps(r[i + 2], r[i + 3]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

static inline __mmask16 first_lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n > 0 ? n : 0)) - 1u);
}

/* op(A) rows into MR x kc micro-panels: dst[p * MR + i]. */
static void pack_a_avx512(int trans, const float *a, int64_t lda, int64_t rows, int64_t kc, float *dst) {
    const __mmask16 mr_lanes = first_lanes(MR);
    for (int64_t i0 = 0; i0 < rows; i0 += MR, dst += MR * kc) {
        int r = rows - i0 < MR ? (int)(rows - i0) : MR;
        if (trans) {
            /* A stored k x m: row p of the panel is contiguous */
            const __mmask16 lm = first_lanes(r);
            const float *src = a + i0;
            for (int64_t p = 0; p < kc; p++) attn_st16(dst + p * MR, mr_lanes, attn_ld16(lm, src + p * lda));
            continue;
        }
        /* A stored m x k: 16 k values of each of the r rows, transposed in registers */
        for (int64_t p = 0; p < kc; p += 16) {
            const __mmask16 km = first_lanes(kc - p);
            __m512 v[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) v[i] = i < r ? attn_ld16(km, a + (i0 + i) * lda + p) : _mm512_setzero_ps();
            transpose16(v);
            int np = kc - p < 16 ? (int)(kc - p) : 16;
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                if (j < np) attn_st16(dst + (p + j) * MR, mr_lanes, v[j]);
        }
    }
}

/* op(B) columns into kc x NR micro-panels: dst[p * NR + j]. */
static void pack_b_avx512(int trans, const float *b, int64_t ldb, int64_t kc, int64_t cols, float *dst) {
    if (!trans) {
        /* B stored k x n: walk each row of the block once, contiguously (a panel-by-panel walk
         * would stride through B by ldb, which thrashes cache sets for power-of-two ldb) */
        int64_t full = cols / NR, rest = cols - full * NR;
        const __mmask16 m0 = first_lanes(rest), m1 = first_lanes(rest - 16);
        for (int64_t p = 0; p < kc; p++) {
            const float *src = b + p * ldb;
            float *d = dst + p * NR;
            for (int64_t q = 0; q < full; q++, src += NR, d += NR * kc) {
                _mm512_store_ps(d, _mm512_loadu_ps(src));
                _mm512_store_ps(d + 16, _mm512_loadu_ps(src + 16));
            }
            if (rest) {
                _mm512_store_ps(d, attn_ld16(m0, src));
                _mm512_store_ps(d + 16, attn_ld16(m1, src + 16));
            }
        }
        return;
    }
    for (int64_t j0 = 0; j0 < cols; j0 += NR, dst += NR * kc) {
        int w = cols - j0 < NR ? (int)(cols - j0) : NR;
        /* B stored n x k: 16 columns x 16 k values at a time, transposed in registers */
        for (int half = 0; half < 2; half++) {
            int jn = w - half * 16;
            for (int64_t p = 0; p < kc; p += 16) {
                const __mmask16 km = first_lanes(kc - p);
                __m512 v[16];
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++)
                    v[j] = j < jn ? attn_ld16(km, b + (j0 + half * 16 + j) * ldb + p) : _mm512_setzero_ps();
                transpose16(v);
                int np = kc - p < 16 ? (int)(kc - p) : 16;
#pragma GCC unroll 16
                for (int q = 0; q < 16; q++)
                    if (q < np) _mm512_store_ps(dst + (p + q) * NR + half * 16, v[q]);
            }
        }
    }
}

/* R (1..4) rows of C reading op(B) = B in place, row by row: NV = 16 / 12 / 8 / 6 vectors of 16
 * columns per row (16..24 accumulators), the same per-element FMA chain as ukr_body. a: packed
 * A~ micro-panel (a[p * MR + i]). */
static inline __attribute__((always_inline)) void rows_body(const int R, const int NV, int64_t kc, const float *a,
                                                            const float *b, int64_t ldb, float *c, int64_t ldc,
                                                            float alpha, float beta, int64_t n) {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int64_t j0 = 0; j0 < n; j0 += 16 * NV) {
        int64_t w = n - j0 < 16 * NV ? n - j0 : 16 * NV;
        __mmask16 mk[16];
        __m512 acc[4][16];
#pragma GCC unroll 16
        for (int q = 0; q < NV; q++) {
            int64_t v = w - 16 * q;
            mk[q] = v >= 16 ? (__mmask16)0xFFFF : (__mmask16)(v > 0 ? (1u << v) - 1u : 0u);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) acc[i][q] = _mm512_setzero_ps();
        }
        const float *bp = b + j0;
        const float *ap = a;
        if (w == 16 * NV) {
            for (int64_t p = 0; p < kc; p++, bp += ldb, ap += MR) {
#pragma GCC unroll 16
                for (int q = 0; q < NV; q++) {
                    __m512 bv = _mm512_loadu_ps(bp + 16 * q);
#pragma GCC unroll 4
                    for (int i = 0; i < R; i++) acc[i][q] = _mm512_fmadd_ps(_mm512_set1_ps(ap[i]), bv, acc[i][q]);
                }
            }
        } else {
            for (int64_t p = 0; p < kc; p++, bp += ldb, ap += MR) {
#pragma GCC unroll 16
                for (int q = 0; q < NV; q++) {
                    __m512 bv = attn_ld16(mk[q], bp + 16 * q);
#pragma GCC unroll 4
                    for (int i = 0; i < R; i++) acc[i][q] = _mm512_fmadd_ps(_mm512_set1_ps(ap[i]), bv, acc[i][q]);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
#pragma GCC unroll 16
            for (int q = 0; q < NV; q++) {
                float *cq = c + i * ldc + j0 + 16 * q;
                __m512 o = _mm512_mul_ps(acc[i][q], va);
                if (beta != 0.0f) o = _mm512_fmadd_ps(acc[i][q], va, _mm512_mul_ps(attn_ld16(mk[q], cq), vb));
                attn_st16(cq, mk[q], o);
            }
        }
    }
}

static void ukr_rows_avx512(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, float alpha,
                            float beta, int mr, int64_t n) {
    switch (mr) {
    case 1: rows_body(1, 16, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    case 2: rows_body(2, 12, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    case 3: rows_body(3, 8, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    default: rows_body(4, 6, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    }
}

/* R (1..4) rows of C from op(B) = B^T read in place (B stored n x k, b[j * ldb + p]), once,
 * without packing: NG groups of 16 columns; each 16 columns x 16 k block of B is loaded row by
 * row (contiguous along k) and transposed in registers into 16 vectors of 16 columns, which feed
 * the same per-element FMA chain, in increasing p, as ukr_body, then the same alpha / beta step.
 * NG = 2 groups side by side give 2 R independent chains (one chain alone waits on the FMA
 * latency; NG = 4 measured slower: the transposes' 32 registers spill). Columns past n load as
 * zero and are never stored. */
static inline __attribute__((always_inline)) void rows_t_body(const int R, const int NG, int64_t kc, const float *a,
                                                              const float *b, int64_t ldb, float *c, int64_t ldc,
                                                              float alpha, float beta, int64_t n) {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int64_t j0 = 0; j0 < n; j0 += 16 * NG) {
        const int64_t w = n - j0 < 16 * NG ? n - j0 : 16 * NG;
        __m512 acc[4][4];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) acc[i][g] = _mm512_setzero_ps();
        for (int64_t p = 0; p < kc; p += 16) {
            const __mmask16 km = first_lanes(kc - p);
            const int np = kc - p < 16 ? (int)(kc - p) : 16;
            const float *ap = a + p * MR;
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                const int64_t jn = w - 16 * g;
                if (jn <= 0) break;
                const float *bg = b + (j0 + 16 * g) * ldb + p;
                __m512 v[16];
                /* 16 rows 4 * ldb bytes apart are too many streams for the hardware prefetchers:
                 * fetching 512 bytes ahead measured up to 1.3x faster on n = 50257 (Zen 5, when
                 * gemm.c swept all of W's rows per k block); with 256 rows at a time through all
                 * of k, 256 bytes ahead measured 1.13x 512 on a decode step (GPT-2, Llama shape,
                 * AMX Xeon; 128 bytes 0.78-0.83x, 384 0.81-0.86x, none 0.86-0.88x) */
                if (p + 64 < kc) {
#pragma GCC unroll 16
                    for (int j = 0; j < 16; j++)
                        if (j < jn) _mm_prefetch((const char *)(bg + j * ldb + 64), _MM_HINT_T0);
                }
                if (jn >= 16 && np == 16) {
#pragma GCC unroll 16
                    for (int j = 0; j < 16; j++) v[j] = _mm512_loadu_ps(bg + j * ldb);
                } else {
#pragma GCC unroll 16
                    for (int j = 0; j < 16; j++) v[j] = j < jn ? attn_ld16(km, bg + j * ldb) : _mm512_setzero_ps();
                }
                transpose16(v);
#pragma GCC unroll 16
                for (int q = 0; q < 16; q++) {
                    if (q >= np) break;
#pragma GCC unroll 4
                    for (int i = 0; i < R; i++)
                        acc[i][g] = _mm512_fmadd_ps(_mm512_set1_ps(ap[q * MR + i]), v[q], acc[i][g]);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                const __mmask16 mk = first_lanes(w - 16 * g);
                float *cg = c + i * ldc + j0 + 16 * g;
                __m512 o = _mm512_mul_ps(acc[i][g], va);
                if (beta != 0.0f) o = _mm512_fmadd_ps(acc[i][g], va, _mm512_mul_ps(attn_ld16(mk, cg), vb));
                attn_st16(cg, mk, o);
            }
        }
    }
}

static void ukr_rows_t_avx512(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc,
                              float alpha, float beta, int mr, int64_t n) {
    switch (mr) {
    case 1: rows_t_body(1, 2, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    case 2: rows_t_body(2, 2, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    case 3: rows_t_body(3, 2, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    default: rows_t_body(4, 2, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    }
}

static const attn_gemm_arch arch_avx512 = {
    .name = "avx512",
    .mr = MR,
    .nr = NR,
    .kc = 384,      /* A micro-panel 14 x 384 floats = 21 KiB of the 48 KiB L1 */
    .mc = MR * 192, /* 2688 rows: one A~ block for most m, so B~ is packed once per k block */
    .nc = 512,      /* B~ 384 x 512 floats = 768 KiB of the 1 MiB L2 */
    .ukr = ukr_avx512,
    .pack_a = pack_a_avx512,
    .pack_b = pack_b_avx512,
    .ukr_rows = ukr_rows_avx512,
    .ukr_rows_t = ukr_rows_t_avx512,
    .rows_max = 4,
};

const attn_gemm_arch *attn_gemm_arch_avx512(void) { return &arch_avx512; }

/* FMA peak: 12 independent zmm chains (latency 4 x 2 pipes needs >= 8). */
#define F(x) x = _mm512_fmadd_ps(x, m, s)
float attn_fma_loop_avx512(int64_t iters, int *chains, int *lanes) {
    __m512 m = _mm512_set1_ps(0.999f), s = _mm512_set1_ps(1e-4f);
    __m512 x0 = _mm512_set1_ps(0), x1 = _mm512_set1_ps(1), x2 = _mm512_set1_ps(2), x3 = _mm512_set1_ps(3),
           x4 = _mm512_set1_ps(4), x5 = _mm512_set1_ps(5), x6 = _mm512_set1_ps(6), x7 = _mm512_set1_ps(7),
           x8 = _mm512_set1_ps(8), x9 = _mm512_set1_ps(9), x10 = _mm512_set1_ps(10), x11 = _mm512_set1_ps(11);
    for (int64_t i = 0; i < iters; i++) {
        F(x0);
        F(x1);
        F(x2);
        F(x3);
        F(x4);
        F(x5);
        F(x6);
        F(x7);
        F(x8);
        F(x9);
        F(x10);
        F(x11);
    }
    __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                             _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(x6, x7)));
    t = _mm512_add_ps(t, _mm512_add_ps(_mm512_add_ps(x8, x9), _mm512_add_ps(x10, x11)));
    *chains = 12;
    *lanes = 16;
    return _mm512_reduce_add_ps(t);
}
