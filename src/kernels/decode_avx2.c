/* AVX2 + FMA decode kernels (contract in decode_internal.h): the AVX-512 kernels' blocks in
 * 8-lane registers; P V with a register tile of 8 ymm accumulators (1 row x 64 columns, 2 x 32
 * or 3-4 x 16), tails of d and dv (not multiples of 8) through a zero-padded copy. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "decode_kernels.h"
#include "kernels/bf16_internal.h"
#include "kernels/vec_math.h"

#define BK ATTN_DECODE_BK
#define PF 8 /* key rows prefetched ahead */

/* Elements [i, i + min(n, 8)) of a float or bf16 row, zero past n. */
static inline __attribute__((always_inline)) __m256 load_row(const void *p, int64_t i, int64_t n, const int bf16) {
    if (n >= 8) {
        if (bf16) {
            const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)p + i));
            return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
        return _mm256_loadu_ps((const float *)p + i);
    }
    float t[8] = {0};
    for (int64_t e = 0; e < n; e++) t[e] = bf16 ? attn_bf16_f(((const uint16_t *)p)[i + e]) : ((const float *)p)[i + e];
    return _mm256_loadu_ps(t);
}

static inline __m256 load_f(const float *p, int64_t n) { return load_row(p, 0, n, 0); }

static inline void store_f(float *p, int64_t n, __m256 x) {
    if (n >= 8) {
        _mm256_storeu_ps(p, x);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, x);
    memcpy(p, t, sizeof(float) * (size_t)(n > 0 ? n : 0));
}

static inline float hsum(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline void prefetch_row(const void *p, int64_t bytes) {
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* The four lane sums of a0 .. a3 in one vector: two horizontal-add rounds and one cross-lane add
 * for four keys instead of a full reduction per key. */
static inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* s[r][j] = q_r . k_j for nr rows, four keys per pass (four independent FMA chains per row and
 * one reduce4 per four keys: a horizontal sum per key made this kernel compute-bound, 72 ns per
 * key at d = 128 where the AVX-512 one, built this way, takes 43). Each key row is read in
 * address order. */
static inline __attribute__((always_inline)) void scores(const int nr, const int bf16, const attn_decode_job *jb,
                                                         const float *q, int64_t j0, int nb, float (*s)[BK]) {
    const int64_t d = jb->d, esz = bf16 ? 2 : 4, ldk = jb->ldk;
    int j = 0;
    for (; j + 4 <= nb; j += 4) {
        const int64_t kr = (j0 + j) * ldk;
        for (int t = 0; t < 4; t++)
            if (j0 + j + t + PF < jb->n) prefetch_row((const char *)jb->k + (kr + (t + PF) * ldk) * esz, d * esz);
        __m256 a[4][4];
        for (int r = 0; r < nr; r++)
            for (int t = 0; t < 4; t++) a[r][t] = _mm256_setzero_ps();
        for (int t = 0; t < 4; t++)
            for (int64_t x = 0; x < d; x += 8) {
                const __m256 kv = load_row(jb->k, kr + t * ldk + x, d - x, bf16);
                for (int r = 0; r < nr; r++) a[r][t] = _mm256_fmadd_ps(load_f(q + r * d + x, d - x), kv, a[r][t]);
            }
        for (int r = 0; r < nr; r++) _mm_storeu_ps(s[r] + j, reduce4(a[r][0], a[r][1], a[r][2], a[r][3]));
    }
    for (; j < nb; j++) {
        const int64_t kr = (j0 + j) * ldk;
        if (j0 + j + PF < jb->n) prefetch_row((const char *)jb->k + (kr + PF * ldk) * esz, d * esz);
        __m256 a[4];
        for (int r = 0; r < nr; r++) a[r] = _mm256_setzero_ps();
        for (int64_t x = 0; x < d; x += 8) {
            const __m256 kv = load_row(jb->k, kr + x, d - x, bf16);
            for (int r = 0; r < nr; r++) a[r] = _mm256_fmadd_ps(load_f(q + r * d + x, d - x), kv, a[r]);
        }
        for (int r = 0; r < nr; r++) s[r][j] = hsum(a[r]);
    }
}

/* acc rows += P[nr x nb] V[nb x dv] for the column strip [x, x + 8 nc), rows scaled by alpha
 * first (nr nc = 8 accumulators): one row takes 64 columns at a time, two 32, more 16, so that
 * for one or two rows each value row is read in few passes (one 16-column pass per 64 bytes of
 * each row left the loads waiting on memory half the time). */
static inline __attribute__((always_inline)) void pv_body(const int nr, const int nc, const int bf16, const int whole,
                                                          const attn_decode_job *jb, int64_t j0, int nb, float (*s)[BK],
                                                          const float *alpha, float *out, int64_t x) {
    int64_t left[8]; /* a constant 8 in a whole strip: plain loads, and the loops unroll */
    for (int c = 0; c < nc; c++) left[c] = whole ? 8 : jb->dv - x - 8 * c;
    __m256 acc[4][8];
    for (int r = 0; r < nr; r++) {
        const __m256 al = _mm256_set1_ps(alpha[r]);
        for (int c = 0; c < nc; c++)
            acc[r][c] =
                left[c] > 0 ? _mm256_mul_ps(load_f(out + r * jb->ldo + x + 8 * c, left[c]), al) : _mm256_setzero_ps();
    }
    for (int j = 0; j < nb; j++) {
        const int64_t vr = (j0 + j) * jb->ldv + x;
        __m256 v[8];
        for (int c = 0; c < nc; c++)
            v[c] = left[c] > 0 ? load_row(jb->v, vr + 8 * c, left[c], bf16) : _mm256_setzero_ps();
        for (int r = 0; r < nr; r++) {
            const __m256 p = _mm256_set1_ps(s[r][j]);
            for (int c = 0; c < nc; c++) acc[r][c] = _mm256_fmadd_ps(p, v[c], acc[r][c]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++)
            if (left[c] > 0) store_f(out + r * jb->ldo + x + 8 * c, left[c], acc[r][c]);
}

static inline __attribute__((always_inline)) void pv_strip(const int nr, const int nc, const int bf16,
                                                           const attn_decode_job *jb, int64_t j0, int nb,
                                                           float (*s)[BK], const float *alpha, float *out, int64_t x) {
    if (jb->dv - x >= 8 * nc)
        pv_body(nr, nc, bf16, 1, jb, j0, nb, s, alpha, out, x);
    else
        pv_body(nr, nc, bf16, 0, jb, j0, nb, s, alpha, out, x);
}

static inline float softmax_row(float *s, int nb, float *o, int64_t dv) {
    float mb = -INFINITY;
    for (int j = 0; j < nb; j++) mb = s[j] > mb ? s[j] : mb;
    const float m_old = o[dv], m_new = mb > m_old ? mb : m_old;
    if (m_new == -INFINITY) { /* nothing seen yet: every p of the block is 0, or NaN */
        o[dv + 1] += attn_decode_block_unseen(s, nb);
        return 1.0f;
    }
    const __m256 mn = _mm256_set1_ps(m_new), ln2 = _mm256_set1_ps(0.6931471805599453f);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < nb; j += 8) {
        const int64_t n = nb - j;
        /* padding lanes read 0 - m_new; they are dropped below */
        __m256 p = attn_exp256(_mm256_mul_ps(_mm256_sub_ps(load_f(s + j, n), mn), ln2));
        if (n < 8) {
            float t[8];
            _mm256_storeu_ps(t, p);
            for (int64_t e = n; e < 8; e++) t[e] = 0.0f;
            p = _mm256_loadu_ps(t);
        }
        store_f(s + j, n, p);
        sum = _mm256_add_ps(sum, p);
    }
    const float alpha = m_old == -INFINITY
                            ? 0.0f
                            : _mm256_cvtss_f32(attn_exp256(_mm256_set1_ps((m_old - m_new) * 0.6931471805599453f)));
    o[dv] = m_new;
    o[dv + 1] = o[dv + 1] * alpha + hsum(sum);
    return alpha;
}

/* P V for nr rows over column strips of 8 accumulators: 64 columns for one row, 32 for two, 16
 * for three or four. */
static inline __attribute__((always_inline)) void pv_rows(const int nr, const int bf16, const attn_decode_job *jb,
                                                          int64_t j0, int nb, float (*s)[BK], const float *alpha,
                                                          float *o) {
    const int nc = nr == 1 ? 8 : nr == 2 ? 4 : 2;
    for (int64_t x = 0; x < jb->dv; x += 8 * nc) pv_strip(nr, nc, bf16, jb, j0, nb, s, alpha, o, x);
}

#include "decode_chunk_body.h"

static void chunk_f32_avx2(const attn_decode_job *j) { chunk(j, 0); }
static void chunk_bf16_avx2(const attn_decode_job *j) { chunk(j, 1); }

const attn_decode_kernels *attn_decode_kernels_avx2(void) {
    static const attn_decode_kernels k = {.name = "avx2", .chunk_f32 = chunk_f32_avx2, .chunk_bf16 = chunk_bf16_avx2};
    return &k;
}
