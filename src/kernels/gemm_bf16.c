/* GEMM with bf16 inputs, float accumulation and output: C = (accumulate ? C : 0) + op(A) op(B).
 * Both operands are packed into pair words (bf16_internal.h): A row by row, B in the VNNI layout
 * in panels of NP columns ([n / NP][k / 2][NP], so the kernel's walk down k stays within a few
 * pages: with full-width rows every step of k was a new page at n >= 1024, and the TLB misses cost
 * 15-25% of the rate); each task computes a block of C over the whole of k, so every element is
 * one chain in increasing k and results are bitwise identical for any thread count. */
#include <string.h>

#include "attn/kernels.h"
#include "bf16_internal.h"
#include "core/internal.h"
#include "gemm_internal.h"

#define MB 64
#define NB 256
#define PB 16 /* rows per packing block */
#define NP 64 /* columns per B panel: the kernels' register tile width */

static size_t round_up(size_t x) { return (x + 15) & ~(size_t)15; }

/* On a little-endian CPU a pair word is its two bf16 as they lie in memory (the even one is the
 * low half), so packing copies words. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PAIRS_IN_MEMORY 1
#else
#define PAIRS_IN_MEMORY 0
#endif

/* The pair word of x[0] and x[1]. */
static inline uint32_t pair_word(const attn_bf16 *x) {
    uint32_t w;
    if (!PAIRS_IN_MEMORY) return attn_pair(x[0], x[1]);
    memcpy(&w, x, sizeof w);
    return w;
}

size_t attn_gemm_bf16_workspace_size(int64_t m, int64_t n, int64_t k) {
    if (m < 0 || n < 0 || k < 0) return 0;
    const size_t kp = (size_t)(k + 1) / 2;
    size_t a, b, t;
    if (attn_mul_overflow((size_t)m, kp, &a) || attn_mul_overflow(((size_t)n + NP - 1) / NP * NP, kp, &b) ||
        attn_add_overflow(round_up(a), round_up(b), &t) || attn_mul_overflow(t, 4, &t) || attn_add_overflow(t, 64, &t))
        return SIZE_MAX;
    return t;
}

attn_status attn_gemm_bf16(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n, int64_t k,
                           const attn_bf16 *a, int64_t lda, const attn_bf16 *b, int64_t ldb, int accumulate,
                           float *c, int64_t ldc, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_gemm_bf16";
    attn_status st = attn_gemm_check_args(fn, transa, transb, m, n, k, (const float *)(const void *)a, lda,
                                          (const float *)(const void *)b, ldb, c, ldc);
    if (st) return st;
    if (m == 0 || n == 0) return ATTN_OK;
    const size_t need = attn_gemm_bf16_workspace_size(m, n, k);
    if (need == SIZE_MAX) return attn_error(ATTN_ERR_OVERFLOW, "%s: workspace size overflows", fn);
    if (!workspace || workspace_bytes < need)
        return attn_error(ATTN_ERR_WORKSPACE, "%s: workspace of %zu bytes at %p, need %zu (attn_gemm_bf16_workspace_size)",
                          fn, workspace_bytes, workspace, need);
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: sizes above 2^31 (m = %lld, n = %lld, k = %lld)", fn,
                          (long long)m, (long long)n, (long long)k);
    const attn_bf16_kernels *kr = attn_bf16_kernels_active();
    const int64_t kp = (k + 1) / 2;
    uint32_t *ap = (uint32_t *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    uint32_t *bp = ap + round_up((size_t)m * (size_t)kp);
    const int ta = transa == ATTN_TRANS, tb = transb == ATTN_TRANS;
    /* A(i, p) = a[i lda + p] (or a[p lda + i] transposed); B(p, j) likewise. Packing moves data
     * only (no rounding), so how it walks never changes a bit; it walks in blocks of PB rows so
     * that the transposing cases read and write whole cache lines. */
    const int64_t kf = k / 2; /* full pairs; an odd k ends with (x, 0) */
#pragma omp parallel num_threads(attn_threads_for((m + MB - 1) / MB))
    {
#pragma omp for schedule(static)
        for (int64_t i0 = 0; i0 < m; i0 += PB) {
            const int64_t i1 = i0 + PB < m ? i0 + PB : m;
            if (!ta) {
                for (int64_t i = i0; i < i1; i++) {
                    const attn_bf16 *row = a + i * lda;
                    if (PAIRS_IN_MEMORY) memcpy(ap + i * kp, row, sizeof(uint32_t) * (size_t)kf);
                    else
                        for (int64_t p = 0; p < kf; p++) ap[i * kp + p] = pair_word(row + 2 * p);
                    if (kf < kp) ap[i * kp + kf] = attn_pair(row[2 * kf], 0);
                }
                continue;
            }
            for (int64_t p = 0; p < kf; p++) {
                const attn_bf16 *r0 = a + 2 * p * lda, *r1 = r0 + lda;
                for (int64_t i = i0; i < i1; i++) ap[i * kp + p] = attn_pair(r0[i], r1[i]);
            }
            if (kf < kp)
                for (int64_t i = i0; i < i1; i++) ap[i * kp + kf] = attn_pair(a[2 * kf * lda + i], 0);
        }
        /* B(p, j) pair word at bp[(j / NP) kp NP + p NP + j % NP] */
        if (!tb) {
#pragma omp for schedule(static)
            for (int64_t p = 0; p < kp; p++)
                for (int64_t j0 = 0; j0 < n; j0 += NP)
                    kr->pair_rows_bf16(2 * p + 1 < k ? 2 : 1, (int)(n - j0 < NP ? n - j0 : NP), b + 2 * p * ldb + j0, ldb,
                                       bp + j0 * kp + p * NP, NP);
        } else {
#pragma omp for schedule(static)
            for (int64_t j0 = 0; j0 < n; j0 += PB) {
                const int64_t j1 = j0 + PB < n ? j0 + PB : n;
                uint32_t *panel = bp + j0 / NP * NP * kp + j0 % NP;
                for (int64_t p = 0; p < kf; p++)
                    for (int64_t j = j0; j < j1; j++) panel[p * NP + (j - j0)] = pair_word(b + j * ldb + 2 * p);
                if (kf < kp)
                    for (int64_t j = j0; j < j1; j++) panel[kf * NP + (j - j0)] = attn_pair(b[j * ldb + 2 * kf], 0);
            }
        }
    }
    const int64_t tm = (m + MB - 1) / MB, tn = (n + NB - 1) / NB, tasks = tm * tn;
#pragma omp parallel for schedule(dynamic, 1) num_threads(attn_threads_for(tasks))
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t i0 = t / tn * MB, j0 = t % tn * NB;
        const int mb = (int)(m - i0 < MB ? m - i0 : MB), nb = (int)(n - j0 < NB ? n - j0 : NB);
        for (int j = 0; j < nb; j += NP)
            kr->gemm_pairs(mb, nb - j < NP ? nb - j : NP, (int)kp, ap + i0 * kp, kp, 1, bp + (j0 + j) * kp, NP,
                           c + i0 * ldc + j0 + j, ldc, accumulate, NULL, 1.0f);
    }
    return ATTN_OK;
}
