/* AVX-512 decode kernels (contract in decode_internal.h).
 *
 * Per block of BK keys: scores of up to 4 query rows per pass over a key row (16-lane FMAs along
 * d, masked tail, then a horizontal sum), the online softmax vectorised over the block's keys,
 * then P V with a register tile of 4 rows x 64 columns (16 zmm accumulators) over the block's V
 * rows. bf16 rows are widened exactly (zero-extend, shift by 16). While the scores of a block are
 * formed, the key rows PF ahead and the block's value rows are prefetched, so both streams are in
 * flight at once. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "decode_internal.h"
#include "kernels/vec_math.h"

#define BK ATTN_DECODE_BK
#define PF 8 /* key rows prefetched ahead */

static inline __mmask16 tail(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

static inline __attribute__((always_inline)) __m512 load_row(const void *p, int64_t i, __mmask16 m, const int bf16) {
    if (bf16) {
        const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

static inline void prefetch_row(const void *p, int64_t bytes) {
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* s[r][j] = q_r . k_j for nr rows (nr a constant: the accumulators stay in registers). */
static inline __attribute__((always_inline)) void scores(const int nr, const int bf16, const attn_decode_job *jb,
                                                        const float *q, int64_t j0, int nb, float (*s)[BK]) {
    const int64_t d = jb->d, esz = bf16 ? 2 : 4;
    for (int j = 0; j < nb; j++) {
        const int64_t kr = (j0 + j) * jb->ldk;
        if (j0 + j + PF < jb->n) prefetch_row((const char *)jb->k + (kr + PF * jb->ldk) * esz, d * esz);
        __m512 a[4];
        for (int r = 0; r < nr; r++) a[r] = _mm512_setzero_ps();
        for (int64_t x = 0; x < d; x += 16) {
            const __mmask16 m = tail(d - x);
            const __m512 kv = load_row(jb->k, kr + x, m, bf16);
            for (int r = 0; r < nr; r++) a[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + r * d + x), kv, a[r]);
        }
        for (int r = 0; r < nr; r++) s[r][j] = _mm512_reduce_add_ps(a[r]);
    }
}

/* acc rows += P[nr x nb] V[nb x dv] for column strip [x, x + 64), rows scaled by alpha first. */
static inline __attribute__((always_inline)) void pv_strip(const int nr, const int bf16, const attn_decode_job *jb,
                                                          int64_t j0, int nb, float (*s)[BK], const float *alpha,
                                                          float *out, int64_t x) {
    const int64_t dv = jb->dv;
    __mmask16 m[4];
    for (int c = 0; c < 4; c++) m[c] = x + 16 * c < dv ? tail(dv - x - 16 * c) : 0;
    __m512 acc[4][4];
    for (int r = 0; r < nr; r++) {
        const __m512 al = _mm512_set1_ps(alpha[r]);
        for (int c = 0; c < 4; c++)
            acc[r][c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[c], out + r * jb->ldo + x + 16 * c), al);
    }
    for (int j = 0; j < nb; j++) {
        const int64_t vr = (j0 + j) * jb->ldv + x;
        __m512 v[4];
        for (int c = 0; c < 4; c++) v[c] = load_row(jb->v, vr + 16 * c, m[c], bf16);
        for (int r = 0; r < nr; r++) {
            const __m512 p = _mm512_set1_ps(s[r][j]);
            for (int c = 0; c < 4; c++) acc[r][c] = _mm512_fmadd_ps(p, v[c], acc[r][c]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(out + r * jb->ldo + x + 16 * c, m[c], acc[r][c]);
}

/* The online softmax of one row over a block: s <- 2^(s - m'), returns alpha = 2^(m - m'). */
static inline float softmax_row(float *s, int nb, float *o, int64_t dv) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    for (int j = 0; j < nb; j += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, tail(nb - j), s + j));
    const float m_old = o[dv], mb = _mm512_reduce_max_ps(mx), m_new = mb > m_old ? mb : m_old;
    if (m_new == -INFINITY) { /* nothing seen yet: every p of the block is 0 */
        memset(s, 0, sizeof(float) * (size_t)nb);
        return 1.0f;
    }
    const __m512 mn = _mm512_set1_ps(m_new), ln2 = _mm512_set1_ps(0.6931471805599453f);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < nb; j += 16) {
        const __mmask16 m = tail(nb - j);
        const __m512 p = _mm512_maskz_mov_ps(
            m, attn_exp512(_mm512_mul_ps(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, m, s + j), mn), ln2)));
        _mm512_mask_storeu_ps(s + j, m, p);
        sum = _mm512_add_ps(sum, p);
    }
    /* m_old = -inf: acc and l are still 0, any finite alpha keeps them so */
    const float alpha = m_old == -INFINITY ? 0.0f
                                           : _mm512_cvtss_f32(attn_exp512(_mm512_set1_ps((m_old - m_new) * 0.6931471805599453f)));
    o[dv] = m_new;
    o[dv + 1] = o[dv + 1] * alpha + _mm512_reduce_add_ps(sum);
    return alpha;
}

static inline __attribute__((always_inline)) void chunk(const attn_decode_job *jb, const int bf16) {
    float s[ATTN_DECODE_MAXG][BK], alpha[ATTN_DECODE_MAXG];
    const int g = jb->g;
    const int64_t esz = bf16 ? 2 : 4;
    for (int r = 0; r < g; r++) {
        float *o = jb->out + r * jb->ldo;
        memset(o, 0, sizeof(float) * (size_t)jb->dv);
        o[jb->dv] = -INFINITY;
        o[jb->dv + 1] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < jb->n; j0 += BK) {
        const int nb = (int)(jb->n - j0 < BK ? jb->n - j0 : BK);
        for (int j = 0; j < nb; j++) prefetch_row((const char *)jb->v + (j0 + j) * jb->ldv * esz, jb->dv * esz);
        for (int r0 = 0; r0 < g; r0 += 4) {
            const float *q = jb->q + r0 * jb->d;
            switch (g - r0 < 4 ? g - r0 : 4) {
            case 1: scores(1, bf16, jb, q, j0, nb, s + r0); break;
            case 2: scores(2, bf16, jb, q, j0, nb, s + r0); break;
            case 3: scores(3, bf16, jb, q, j0, nb, s + r0); break;
            default: scores(4, bf16, jb, q, j0, nb, s + r0); break;
            }
        }
        if (jb->km)
            for (int j = 0; j < nb; j++)
                if (!jb->km[(j0 + j) * jb->kms])
                    for (int r = 0; r < g; r++) s[r][j] = -INFINITY;
        for (int r = 0; r < g; r++) alpha[r] = softmax_row(s[r], nb, jb->out + r * jb->ldo, jb->dv);
        for (int r0 = 0; r0 < g; r0 += 4) {
            float *o = jb->out + r0 * jb->ldo;
            for (int64_t x = 0; x < jb->dv; x += 64) switch (g - r0 < 4 ? g - r0 : 4) {
                case 1: pv_strip(1, bf16, jb, j0, nb, s + r0, alpha + r0, o, x); break;
                case 2: pv_strip(2, bf16, jb, j0, nb, s + r0, alpha + r0, o, x); break;
                case 3: pv_strip(3, bf16, jb, j0, nb, s + r0, alpha + r0, o, x); break;
                default: pv_strip(4, bf16, jb, j0, nb, s + r0, alpha + r0, o, x); break;
                }
        }
    }
}

static void chunk_f32_avx512(const attn_decode_job *j) { chunk(j, 0); }
static void chunk_bf16_avx512(const attn_decode_job *j) { chunk(j, 1); }

const attn_decode_kernels *attn_decode_kernels_avx512(void) {
    static const attn_decode_kernels k = {ATTN_ISA_AVX512, chunk_f32_avx512, chunk_bf16_avx512};
    return &k;
}
