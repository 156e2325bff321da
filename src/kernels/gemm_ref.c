/* Portable SGEMM pieces: the naive oracle attn_sgemm_ref(), the portable 4 x 8 micro-kernel
 * (any CPU; the compiler may vectorise it with baseline SSE2) and the portable FMA-peak loop. */
#include "gemm_internal.h"

#include "attn/kernels.h"
#include "core/internal.h"

/* ---- the oracle ------------------------------------------------------------------------ */

attn_status attn_sgemm_ref(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n, int64_t k, float alpha,
                           const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                           int64_t ldc) {
    attn_status st = attn_gemm_check_args("attn_sgemm_ref", transa, transb, m, n, k, a, lda, b, ldb, c, ldc);
    if (st != ATTN_OK) return st;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                float x = transa == ATTN_TRANS ? a[p * lda + i] : a[i * lda + p];
                float y = transb == ATTN_TRANS ? b[j * ldb + p] : b[p * ldb + j];
                acc += x * y;
            }
            float *cij = &c[i * ldc + j];
            *cij = beta == 0.0f ? alpha * acc : alpha * acc + beta * *cij;
        }
    }
    return ATTN_OK;
}

/* ---- portable micro-kernel ----------------------------------------------------------------
 * 4 x 8: 32 scalar accumulators, small enough for 16 SSE registers (8 xmm accumulators when
 * vectorised) without spilling. Multiply then add (no FMA in baseline x86-64). */
enum { REF_MR = 4, REF_NR = 8 };

static void ukr_ref(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, float alpha,
                    float beta, int mr, int nr) {
    float acc[REF_MR][REF_NR] = {{0}};
    for (int64_t p = 0; p < kc; p++) {
        const float *ap = a + p * REF_MR, *bp = b + p * ldb;
        for (int i = 0; i < REF_MR; i++)
            for (int j = 0; j < REF_NR; j++) acc[i][j] += ap[i] * bp[j];
    }
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        if (beta == 0.0f)
            for (int j = 0; j < nr; j++) ci[j] = acc[i][j] * alpha;
        else
            for (int j = 0; j < nr; j++) ci[j] = acc[i][j] * alpha + beta * ci[j];
    }
}

static const attn_gemm_arch arch_ref = {
    .name = "ref",
    .mr = REF_MR,
    .nr = REF_NR,
    .kc = 256,
    .mc = 256,
    .nc = 512,
    .ukr = ukr_ref,
    .pack_a = 0,
    .pack_b = 0,
};

const attn_gemm_arch *attn_gemm_arch_ref(void) { return &arch_ref; }

/* ---- portable FMA-peak loop: 8 independent chains of 4-wide multiply-adds ----------------- */
float attn_fma_loop_ref(int64_t iters, int *chains, int *lanes) {
    float acc[8][4];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = (float)(i + j);
    const float x = 0.999f, y = 1e-4f;
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 4; j++) acc[i][j] = acc[i][j] * x + y;
    float s = 0;
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) s += acc[i][j];
    *chains = 8;
    *lanes = 4;
    return s;
}
