/* AVX2 + FMA SGEMM micro-kernel: 6 x 16 register tile (12 ymm accumulators, 2 for B, 1 for the
 * broadcast A element: 15 of the 16 ymm registers), the few-row kernels (op(B) = B and B^T),
 * plus the AVX2 FMA-peak loop. */
#include <immintrin.h>

#include "gemm_internal.h"
#include "transpose_avx2.h"
#include "vec_tail_avx2.h"

enum { MR = 6, NR = 16 };

static inline __m256i lane_mask(int valid) {
    /* lanes j < valid set (valid clamped to 0..8) */
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int v = valid < 0 ? 0 : (valid > 8 ? 8 : valid);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(v), idx);
}

static inline __attribute__((always_inline)) void ukr_body(const int R, int64_t kc, const float *a, const float *b,
                                                           int64_t ldb, float *c, int64_t ldc, float alpha_in,
                                                           float beta_in, int nr) {
    /* alpha and beta wait in memory during the loop (the empty asm below makes the compiler
     * reload them): held in registers they left 14 of the 16 for the loop's 15 (12 accumulators,
     * B's two vectors, the broadcast), so one accumulator lived on the stack and its chain went
     * through a store and a load on every step of p */
    float ab[2] = {alpha_in, beta_in};
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        c0[i] = _mm256_setzero_ps();
        c1[i] = _mm256_setzero_ps();
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 15), _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m256 ai = _mm256_broadcast_ss(a + i);
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
        }
        a += MR;
        b += ldb;
    }
    __asm__("" : "+m"(ab));
    const float alpha = ab[0], beta = ab[1];
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    if (nr == NR) {
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            float *ci = c + i * ldc;
            __m256 o0 = _mm256_mul_ps(c0[i], va), o1 = _mm256_mul_ps(c1[i], va);
            if (beta != 0.0f) {
                o0 = _mm256_fmadd_ps(c0[i], va, _mm256_mul_ps(_mm256_loadu_ps(ci), vb));
                o1 = _mm256_fmadd_ps(c1[i], va, _mm256_mul_ps(_mm256_loadu_ps(ci + 8), vb));
            }
            _mm256_storeu_ps(ci, o0);
            _mm256_storeu_ps(ci + 8, o1);
        }
    } else {
        __m256i m0 = lane_mask(nr), m1 = lane_mask(nr - 8);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            float *ci = c + i * ldc;
            __m256 o0 = _mm256_mul_ps(c0[i], va), o1 = _mm256_mul_ps(c1[i], va);
            if (beta != 0.0f) {
                o0 = _mm256_fmadd_ps(c0[i], va, _mm256_mul_ps(_mm256_maskload_ps(ci, m0), vb));
                o1 = _mm256_fmadd_ps(c1[i], va, _mm256_mul_ps(_mm256_maskload_ps(ci + 8, m1), vb));
            }
            _mm256_maskstore_ps(ci, m0, o0);
            _mm256_maskstore_ps(ci + 8, m1, o1);
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
UKR(1) UKR(2) UKR(3) UKR(4) UKR(5)
    /* clang-format on */

    static void ukr_avx2(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, float alpha,
                         float beta, int mr, int nr) {
    switch (mr) {
    case 1: ukr_1(kc, a, b, ldb, c, ldc, alpha, beta, nr); break;
    case 2: ukr_2(kc, a, b, ldb, c, ldc, alpha, beta, nr); break;
    case 3: ukr_3(kc, a, b, ldb, c, ldc, alpha, beta, nr); break;
    case 4: ukr_4(kc, a, b, ldb, c, ldc, alpha, beta, nr); break;
    case 5: ukr_5(kc, a, b, ldb, c, ldc, alpha, beta, nr); break;
    default: ukr_body(MR, kc, a, b, ldb, c, ldc, alpha, beta, nr); break;
    }
}

/* R (1..4) rows of C reading op(B) = B in place, row by row: NV = 12 / 6 / 4 / 3 vectors of 8
 * columns per row (12 accumulators), the same per-element FMA chain as ukr_body. a: packed A~
 * micro-panel (a[p * MR + i]). */
static inline __attribute__((always_inline)) void rows_body(const int R, const int NV, int64_t kc, const float *a,
                                                            const float *b, int64_t ldb, float *c, int64_t ldc,
                                                            float alpha, float beta, int64_t n) {
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int64_t j0 = 0; j0 < n; j0 += 8 * NV) {
        int64_t w = n - j0 < 8 * NV ? n - j0 : 8 * NV;
        __m256i mk[12];
        __m256 acc[4][12];
#pragma GCC unroll 12
        for (int q = 0; q < NV; q++) {
            mk[q] = lane_mask((int)(w - 8 * q < 8 ? w - 8 * q : 8));
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) acc[i][q] = _mm256_setzero_ps();
        }
        const float *bp = b + j0;
        const float *ap = a;
        if (w == 8 * NV) {
            for (int64_t p = 0; p < kc; p++, bp += ldb, ap += MR) {
#pragma GCC unroll 12
                for (int q = 0; q < NV; q++) {
                    __m256 bv = _mm256_loadu_ps(bp + 8 * q);
#pragma GCC unroll 4
                    for (int i = 0; i < R; i++) acc[i][q] = _mm256_fmadd_ps(_mm256_broadcast_ss(ap + i), bv, acc[i][q]);
                }
            }
        } else {
            for (int64_t p = 0; p < kc; p++, bp += ldb, ap += MR) {
#pragma GCC unroll 12
                for (int q = 0; q < NV; q++) {
                    __m256 bv = _mm256_maskload_ps(bp + 8 * q, mk[q]);
#pragma GCC unroll 4
                    for (int i = 0; i < R; i++) acc[i][q] = _mm256_fmadd_ps(_mm256_broadcast_ss(ap + i), bv, acc[i][q]);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
#pragma GCC unroll 12
            for (int q = 0; q < NV; q++) {
                float *cq = c + i * ldc + j0 + 8 * q;
                __m256 o = _mm256_mul_ps(acc[i][q], va);
                if (beta != 0.0f) o = _mm256_fmadd_ps(acc[i][q], va, _mm256_mul_ps(_mm256_maskload_ps(cq, mk[q]), vb));
                _mm256_maskstore_ps(cq, mk[q], o);
            }
        }
    }
}

static void ukr_rows_avx2(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, float alpha,
                          float beta, int mr, int64_t n) {
    switch (mr) {
    case 1: rows_body(1, 12, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    case 2: rows_body(2, 6, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    case 3: rows_body(3, 4, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    default: rows_body(4, 3, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    }
}

/* R (1..4) rows of C from op(B) = B^T read in place (B stored n x k, b[j * ldb + p]), once,
 * without packing: NG groups of 8 columns; each 8 columns x 8 k block of B is loaded row by row
 * (contiguous along k) and transposed in registers into 8 vectors of 8 columns, which feed the
 * same per-element FMA chain, in increasing p, as ukr_body, then the same alpha / beta step.
 * R * NG independent chains hide the FMA latency. Columns past n load as zero, never stored. */
static inline __attribute__((always_inline)) void rows_t_body(const int R, const int NG, int64_t kc, const float *a,
                                                              const float *b, int64_t ldb, float *c, int64_t ldc,
                                                              float alpha, float beta, int64_t n) {
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int64_t j0 = 0; j0 < n; j0 += 8 * NG) {
        const int64_t w = n - j0 < 8 * NG ? n - j0 : 8 * NG;
        __m256 acc[4][4];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) acc[i][g] = _mm256_setzero_ps();
        for (int64_t p = 0; p < kc; p += 8) {
            const int np = kc - p < 8 ? (int)(kc - p) : 8;
            const __m256i km = lane_mask(np);
            const float *ap = a + p * MR;
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                const int64_t jn = w - 8 * g;
                if (jn <= 0) break;
                const float *bg = b + (j0 + 8 * g) * ldb + p;
                __m256 v[8];
                if (jn >= 8 && np == 8) {
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++) v[j] = _mm256_loadu_ps(bg + j * ldb);
                } else {
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++)
                        v[j] = j < jn ? _mm256_maskload_ps(bg + j * ldb, km) : _mm256_setzero_ps();
                }
                attn_transpose8x8(v);
#pragma GCC unroll 8
                for (int q = 0; q < 8; q++) {
                    if (q >= np) break;
#pragma GCC unroll 4
                    for (int i = 0; i < R; i++)
                        acc[i][g] = _mm256_fmadd_ps(_mm256_broadcast_ss(ap + q * MR + i), v[q], acc[i][g]);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                const __m256i mk = lane_mask((int)(w - 8 * g < 8 ? w - 8 * g : 8));
                float *cg = c + i * ldc + j0 + 8 * g;
                __m256 o = _mm256_mul_ps(acc[i][g], va);
                if (beta != 0.0f) o = _mm256_fmadd_ps(acc[i][g], va, _mm256_mul_ps(_mm256_maskload_ps(cg, mk), vb));
                _mm256_maskstore_ps(cg, mk, o);
            }
        }
    }
}

static void ukr_rows_t_avx2(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, float alpha,
                            float beta, int mr, int64_t n) {
    switch (mr) {
    case 1: rows_t_body(1, 2, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    case 2: rows_t_body(2, 2, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    case 3: rows_t_body(3, 2, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    default: rows_t_body(4, 2, kc, a, b, ldb, c, ldc, alpha, beta, n); break;
    }
}

/* op(A) rows into MR x kc micro-panels: dst[p * MR + i], rows past `rows` zero. The portable
 * packing moved one float at a time (gathering A's rows lda apart for every p): 8% of a MiniLM
 * embedding on Zen 3, where the micro-kernel itself is 67%. */
static void pack_a_avx2(int trans, const float *a, int64_t lda, int64_t rows, int64_t kc, float *dst) {
    for (int64_t i0 = 0; i0 < rows; i0 += MR, dst += MR * kc) {
        const int r = rows - i0 < MR ? (int)(rows - i0) : MR;
        if (trans) {
            /* A stored k x m: row p of the panel is MR contiguous floats (4 + 2) */
            const float *src = a + i0;
            if (r == MR) {
                for (int64_t p = 0; p < kc; p++, src += lda) {
                    _mm_storeu_ps(dst + p * MR, _mm_loadu_ps(src));
                    _mm_storeu_si64(dst + p * MR + 4, _mm_loadu_si64(src + 4));
                }
            } else {
                for (int64_t p = 0; p < kc; p++, src += lda)
                    for (int i = 0; i < MR; i++) dst[p * MR + i] = i < r ? src[i] : 0.0f;
            }
            continue;
        }
        /* A stored m x k: 8 k values of each row (rows r..7 zero), transposed in registers; each
         * column's first MR lanes stored as 4 + 2 */
        for (int64_t p = 0; p < kc; p += 8) {
            const int64_t left = kc - p;
            __m256 v[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) v[i] = i < r ? attn_ld8n(a + (i0 + i) * lda + p, left) : _mm256_setzero_ps();
            attn_transpose8x8(v);
            const int np = left < 8 ? (int)left : 8;
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) {
                if (q >= np) break;
                float *d = dst + (p + q) * MR;
                _mm_storeu_ps(d, _mm256_castps256_ps128(v[q]));
                _mm_storeu_si64(d + 4, _mm_castps_si128(_mm256_extractf128_ps(v[q], 1)));
            }
        }
    }
}

/* op(B) columns into kc x NR micro-panels: dst[p * NR + j], columns past `cols` zero. */
static void pack_b_avx2(int trans, const float *b, int64_t ldb, int64_t kc, int64_t cols, float *dst) {
    if (!trans) {
        /* B stored k x n: each row of the block walked once, contiguously */
        const int64_t full = cols / NR, rest = cols - full * NR;
        for (int64_t p = 0; p < kc; p++) {
            const float *src = b + p * ldb;
            float *d = dst + p * NR;
            for (int64_t q = 0; q < full; q++, src += NR, d += NR * kc) {
                _mm256_storeu_ps(d, _mm256_loadu_ps(src));
                _mm256_storeu_ps(d + 8, _mm256_loadu_ps(src + 8));
            }
            if (rest) {
                _mm256_storeu_ps(d, attn_ld8n(src, rest));
                _mm256_storeu_ps(d + 8, attn_ld8n(src + 8, rest - 8));
            }
        }
        return;
    }
    /* B stored n x k: 8 columns x 8 k values at a time (columns past `cols` zero), transposed */
    for (int64_t j0 = 0; j0 < cols; j0 += NR, dst += NR * kc) {
        for (int half = 0; half < 2; half++) {
            const int64_t jn = cols - j0 - half * 8;
            for (int64_t p = 0; p < kc; p += 8) {
                const int64_t left = kc - p;
                __m256 v[8];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    v[j] = j < jn ? attn_ld8n(b + (j0 + half * 8 + j) * ldb + p, left) : _mm256_setzero_ps();
                attn_transpose8x8(v);
                const int np = left < 8 ? (int)left : 8;
#pragma GCC unroll 8
                for (int q = 0; q < 8; q++)
                    if (q < np) _mm256_storeu_ps(dst + (p + q) * NR + half * 8, v[q]);
            }
        }
    }
}

static const attn_gemm_arch arch_avx2 = {
    .name = "avx2",
    .mr = MR,
    .nr = NR,
    .kc = 256,
    .mc = MR * 128,
    .nc = 256,
    .ukr = ukr_avx2,
    .pack_a = pack_a_avx2,
    .pack_b = pack_b_avx2,
    .ukr_rows = ukr_rows_avx2,
    .ukr_rows_t = ukr_rows_t_avx2,
    .rows_max = 4,
};

const attn_gemm_arch *attn_gemm_arch_avx2(void) { return &arch_avx2; }

/* FMA peak: 10 independent ymm chains (covers 2 pipes x 4-5 cycles of latency). */
#define F(x) x = _mm256_fmadd_ps(x, m, s)
float attn_fma_loop_avx2(int64_t iters, int *chains, int *lanes) {
    __m256 m = _mm256_set1_ps(0.999f), s = _mm256_set1_ps(1e-4f);
    __m256 x0 = _mm256_set1_ps(0), x1 = _mm256_set1_ps(1), x2 = _mm256_set1_ps(2), x3 = _mm256_set1_ps(3),
           x4 = _mm256_set1_ps(4), x5 = _mm256_set1_ps(5), x6 = _mm256_set1_ps(6), x7 = _mm256_set1_ps(7),
           x8 = _mm256_set1_ps(8), x9 = _mm256_set1_ps(9);
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
    }
    __m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                             _mm256_add_ps(_mm256_add_ps(x4, x5), _mm256_add_ps(x6, x7)));
    t = _mm256_add_ps(t, _mm256_add_ps(x8, x9));
    float out[8];
    _mm256_storeu_ps(out, t);
    *chains = 10;
    *lanes = 8;
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
