/* AVX-512 decode kernels (contract in decode_internal.h).
 *
 * Per block of BK keys: scores of up to 4 query rows, four keys at a time (16-lane FMAs along d,
 * masked tail, four independent chains per row, then one transposing reduction for the four
 * keys), the online softmax vectorised over the block's keys, then P V with a register tile of
 * 1-2 rows x 128 columns or 3-4 rows x 64 columns (up to 16 zmm accumulators) over the block's V
 * rows, so that for one or two rows each value row is read once, in order. bf16 rows are widened
 * exactly (zero-extend, shift by 16). While the scores of a block are formed, the key rows PF
 * ahead and the block's value rows are prefetched, so both streams are in flight at once. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "decode_kernels.h"
#include "kernels/vec_math.h"
#include "kernels/vec_tail_avx512.h"

#define BK ATTN_DECODE_BK
#define PF 8 /* key rows prefetched ahead */

static inline __attribute__((always_inline)) __m512 load_row(const void *p, int64_t i, __mmask16 m, const int bf16) {
    if (bf16) {
        const __m256i h = attn_ld16_epi16(m, (const uint16_t *)p + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return attn_ld16(m, (const float *)p + i);
}

static inline void prefetch_row(const void *p, int64_t bytes) {
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* One 16-lane step of the score FMAs of nr rows and the key row at k + kr (elements), into the
 * accumulators a[r][t]. */
static inline __attribute__((always_inline)) void score_step(const int nr, const int bf16, const void *k, int64_t kr,
                                                             const float *q, int64_t d, int64_t x, __mmask16 m,
                                                             __m512 (*a)[4], int t) {
    const __m512 kv = load_row(k, kr + x, m, bf16);
    for (int r = 0; r < nr; r++) {
        const __m512 qv = attn_ld16(m, q + r * d + x);
        a[r][t] = _mm512_fmadd_ps(qv, kv, a[r][t]);
    }
}

/* The four lane sums of a0 .. a3, in lanes 0 .. 3: a transposing add tree, ten shuffles and adds
 * for four keys instead of a full horizontal reduction per key. */
static inline __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 x01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    const __m512 x23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    const __m512 y = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x01), _mm512_castps_pd(x23))),
                                   _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x01), _mm512_castps_pd(x23))));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(y), _mm512_extractf32x8_ps(y, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* s[r][j] = q_r . k_j for nr rows (nr a constant: the accumulators stay in registers). Four keys
 * per pass: four independent FMA chains per row, and one reduce4 per four keys instead of a
 * horizontal sum per key (the per-key sum made the f32 kernel compute-bound at about 20 ns per
 * key even from cache). */
static inline __attribute__((always_inline)) void scores(const int nr, const int bf16, const attn_decode_job *jb,
                                                         const float *q, int64_t j0, int nb, float (*s)[BK]) {
    const int64_t d = jb->d, esz = bf16 ? 2 : 4, ldk = jb->ldk, dfull = d & ~(int64_t)15;
    int j = 0;
    for (; j + 4 <= nb; j += 4) {
        const int64_t kr = (j0 + j) * ldk;
        for (int t = 0; t < 4; t++)
            if (j0 + j + t + PF < jb->n) prefetch_row((const char *)jb->k + (kr + (t + PF) * ldk) * esz, d * esz);
        __m512 a[4][4];
        for (int r = 0; r < nr; r++)
            for (int t = 0; t < 4; t++) a[r][t] = _mm512_setzero_ps();
        /* key by key: the rows are read in address order (interleaving the four rows along d
         * measured a third slower from memory: it breaks the hardware prefetcher's stream) */
        for (int t = 0; t < 4; t++) {
            for (int64_t x = 0; x < dfull; x += 16) score_step(nr, bf16, jb->k, kr + t * ldk, q, d, x, 0xFFFF, a, t);
            if (dfull < d) score_step(nr, bf16, jb->k, kr + t * ldk, q, d, dfull, attn_tail16(d - dfull), a, t);
        }
        for (int r = 0; r < nr; r++) _mm_storeu_ps(s[r] + j, reduce4(a[r][0], a[r][1], a[r][2], a[r][3]));
    }
    for (; j < nb; j++) {
        const int64_t kr = (j0 + j) * ldk;
        if (j0 + j + PF < jb->n) prefetch_row((const char *)jb->k + (kr + PF * ldk) * esz, d * esz);
        __m512 a[4][4];
        for (int r = 0; r < nr; r++) a[r][0] = _mm512_setzero_ps();
        for (int64_t x = 0; x < dfull; x += 16) score_step(nr, bf16, jb->k, kr, q, d, x, 0xFFFF, a, 0);
        if (dfull < d) score_step(nr, bf16, jb->k, kr, q, d, dfull, attn_tail16(d - dfull), a, 0);
        for (int r = 0; r < nr; r++) s[r][j] = _mm512_reduce_add_ps(a[r][0]);
    }
}

/* acc rows += P[nr x nb] V[nb x dv] for column strip [x, x + 16 nc), rows scaled by alpha first
 * (nr nc <= 16 accumulators; whole-vector loads and stores where the strip is full). */
static inline __attribute__((always_inline)) void pv_strip(const int nr, const int nc, const int bf16,
                                                           const attn_decode_job *jb, int64_t j0, int nb,
                                                           float (*s)[BK], const float *alpha, float *out, int64_t x) {
    const int64_t dv = jb->dv;
    const int full = x + 16 * nc <= dv;
    __mmask16 m[8];
    for (int c = 0; c < nc; c++) m[c] = attn_tail16(dv - x - 16 * c); /* 0 past dv */
    __m512 acc[4][8];
    for (int r = 0; r < nr; r++) {
        const __m512 al = _mm512_set1_ps(alpha[r]);
        for (int c = 0; c < nc; c++) acc[r][c] = _mm512_mul_ps(attn_ld16(m[c], out + r * jb->ldo + x + 16 * c), al);
    }
    for (int j = 0; j < nb; j++) {
        const int64_t vr = (j0 + j) * jb->ldv + x;
        __m512 v[8];
        for (int c = 0; c < nc; c++) v[c] = load_row(jb->v, vr + 16 * c, full ? (__mmask16)0xFFFF : m[c], bf16);
        for (int r = 0; r < nr; r++) {
            const __m512 p = _mm512_set1_ps(s[r][j]);
            for (int c = 0; c < nc; c++) acc[r][c] = _mm512_fmadd_ps(p, v[c], acc[r][c]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) attn_st16(out + r * jb->ldo + x + 16 * c, m[c], acc[r][c]);
}

/* The online softmax of one row over a block: s <- 2^(s - m'), returns alpha = 2^(m - m'). */
static inline float softmax_row(float *s, int nb, float *o, int64_t dv) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    for (int j = 0; j < nb; j += 16) mx = _mm512_max_ps(mx, attn_ld16_or(ninf, attn_tail16(nb - j), s + j));
    const float m_old = o[dv], mb = _mm512_reduce_max_ps(mx), m_new = mb > m_old ? mb : m_old;
    if (m_new == -INFINITY) { /* nothing seen yet: every p of the block is 0, or NaN */
        o[dv + 1] += attn_decode_block_unseen(s, nb);
        return 1.0f;
    }
    const __m512 mn = _mm512_set1_ps(m_new), ln2 = _mm512_set1_ps(0.6931471805599453f);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < nb; j += 16) {
        const __mmask16 m = attn_tail16(nb - j);
        const __m512 p =
            _mm512_maskz_mov_ps(m, attn_exp512(_mm512_mul_ps(_mm512_sub_ps(attn_ld16_or(ninf, m, s + j), mn), ln2)));
        attn_st16(s + j, m, p);
        sum = _mm512_add_ps(sum, p);
    }
    /* m_old = -inf: acc and l are still 0, any finite alpha keeps them so */
    const float alpha = m_old == -INFINITY
                            ? 0.0f
                            : _mm512_cvtss_f32(attn_exp512(_mm512_set1_ps((m_old - m_new) * 0.6931471805599453f)));
    o[dv] = m_new;
    o[dv + 1] = o[dv + 1] * alpha + _mm512_reduce_add_ps(sum);
    return alpha;
}

/* P V for nr rows: 128-column strips for one or two rows (one pass over each value row, 8 or 16
 * chains), 64 for three or four. */
static inline __attribute__((always_inline)) void pv_rows(const int nr, const int bf16, const attn_decode_job *jb,
                                                          int64_t j0, int nb, float (*s)[BK], const float *alpha,
                                                          float *o) {
    const int64_t step = nr <= 2 ? 128 : 64;
    for (int64_t x = 0; x < jb->dv; x += step) pv_strip(nr, nr <= 2 ? 8 : 4, bf16, jb, j0, nb, s, alpha, o, x);
}

#include "decode_chunk_body.h"

static void chunk_f32_avx512(const attn_decode_job *j) { chunk(j, 0); }
static void chunk_bf16_avx512(const attn_decode_job *j) { chunk(j, 1); }

const attn_decode_kernels *attn_decode_kernels_avx512(void) {
    static const attn_decode_kernels k = {
        .name = "avx512", .chunk_f32 = chunk_f32_avx512, .chunk_bf16 = chunk_bf16_avx512};
    return &k;
}
