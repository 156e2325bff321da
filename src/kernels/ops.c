/* Row-wise and elementwise ops: argument checks, work splitting, OpenMP threading, dispatch.
 *
 * Work items depend only on the sizes (one row; one ATTN_OPS_CHUNK of elements; one block of
 * ATTN_OPS_COLS columns), never on the thread count, and every output element is written by
 * exactly one item with a fixed operation order, so results are bitwise identical for any
 * number of threads. Kernels come from the kernel context of attn_active_isa() (registry.h). */
#include <math.h>

#include "core/internal.h"
#include "kernels/registry.h"
#include "ops_internal.h"

#ifdef _OPENMP
#define OPS_PRAGMA(x) _Pragma(#x)
#define OPS_PARALLEL_FOR(nt) OPS_PRAGMA(omp parallel for schedule(static) num_threads(nt) if ((nt) > 1))
#else
#define OPS_PARALLEL_FOR(nt) (void)(nt);
#endif

/* Below this many floats a call stays on the calling thread (thread start-up costs more). */
#define OPS_MIN_PARALLEL 32768

const attn_ops_kernels *attn_ops_active(void) { return attn_kernel_ctx_active()->ops; }

/* Threads for `items` work items covering `total` floats. */
static int ops_threads(int64_t items, int64_t total) { return total < OPS_MIN_PARALLEL ? 1 : attn_threads_for(items); }

/* rows x n: non-negative, rows * n * sizeof(float) representable. */
static attn_status check_matrix(const char *fn, int64_t rows, int64_t n) {
    size_t total, bytes;
    if (rows < 0 || n < 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: negative size (rows = %lld, n = %lld)", fn, (long long)rows,
                          (long long)n);
    if (attn_mul_overflow((size_t)rows, (size_t)n, &total) || attn_mul_overflow(total, sizeof(float), &bytes) ||
        bytes > (size_t)INT64_MAX)
        return attn_error(ATTN_ERR_OVERFLOW, "%s: rows * n overflows (rows = %lld, n = %lld)", fn, (long long)rows,
                          (long long)n);
    return ATTN_OK;
}

static attn_status check_count(const char *fn, int64_t n) {
    if (n < 0) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: negative size (n = %lld)", fn, (long long)n);
    if ((uint64_t)n > (uint64_t)INT64_MAX / sizeof(float))
        return attn_error(ATTN_ERR_OVERFLOW, "%s: n = %lld floats overflows the address space", fn, (long long)n);
    return ATTN_OK;
}

#define NEED_PTR_RN(fn, p, rows, n)                                                                                    \
    do {                                                                                                               \
        if ((p) == NULL)                                                                                               \
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL (rows = %lld, n = %lld)", fn, #p,             \
                              (long long)(rows), (long long)(n));                                                      \
    } while (0)

#define NEED_PTR_N(fn, p, n)                                                                                           \
    do {                                                                                                               \
        if ((p) == NULL)                                                                                               \
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL (n = %lld)", fn, #p, (long long)(n));         \
    } while (0)

/* ---- softmax ---------------------------------------------------------------------------- */

attn_status attn_softmax_forward(const float *x, float *y, int64_t rows, int64_t n) {
    static const char fn[] = "attn_softmax_forward";
    attn_status st = check_matrix(fn, rows, n);
    if (st) return st;
    if (rows == 0 || n == 0) return ATTN_OK;
    NEED_PTR_RN(fn, x, rows, n);
    NEED_PTR_RN(fn, y, rows, n);
    const attn_ops_kernels *k = attn_ops_active();
    const int nt = ops_threads(rows, rows * n);
    OPS_PARALLEL_FOR(nt)
    for (int64_t r = 0; r < rows; r++) k->softmax_fwd(x + r * n, y + r * n, n);
    return ATTN_OK;
}

attn_status attn_softmax_backward(const float *y, const float *dy, float *dx, int64_t rows, int64_t n) {
    static const char fn[] = "attn_softmax_backward";
    attn_status st = check_matrix(fn, rows, n);
    if (st) return st;
    if (rows == 0 || n == 0) return ATTN_OK;
    NEED_PTR_RN(fn, y, rows, n);
    NEED_PTR_RN(fn, dy, rows, n);
    NEED_PTR_RN(fn, dx, rows, n);
    const attn_ops_kernels *k = attn_ops_active();
    const int nt = ops_threads(rows, rows * n);
    OPS_PARALLEL_FOR(nt)
    for (int64_t r = 0; r < rows; r++) k->softmax_bwd(y + r * n, dy + r * n, dx + r * n, n);
    return ATTN_OK;
}

/* ---- layernorm -------------------------------------------------------------------------- */

attn_status attn_layernorm_forward(const float *x, const float *gamma, const float *beta, float *y, float *mean,
                                   float *rstd, int64_t rows, int64_t n, float eps) {
    static const char fn[] = "attn_layernorm_forward";
    attn_status st = check_matrix(fn, rows, n);
    if (st) return st;
    if (!(eps > 0.0f) || !isfinite(eps))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: eps = %g must be finite and > 0 (rows = %lld, n = %lld)", fn,
                          (double)eps, (long long)rows, (long long)n);
    if (rows == 0) return ATTN_OK;
    if (n == 0) { /* empty rows: variance 0 */
        for (int64_t r = 0; r < rows; r++) {
            if (mean) mean[r] = 0.0f;
            if (rstd) rstd[r] = 1.0f / sqrtf(eps);
        }
        return ATTN_OK;
    }
    NEED_PTR_RN(fn, x, rows, n);
    NEED_PTR_RN(fn, y, rows, n);
    const attn_ops_kernels *k = attn_ops_active();
    const int nt = ops_threads(rows, rows * n);
    OPS_PARALLEL_FOR(nt)
    for (int64_t r = 0; r < rows; r++) {
        float m, s;
        k->layernorm_fwd(x + r * n, gamma, beta, y + r * n, &m, &s, n, eps);
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
    return ATTN_OK;
}

attn_status attn_layernorm_backward(const float *x, const float *gamma, const float *mean, const float *rstd,
                                    const float *dy, float *dx, float *dgamma, float *dbeta, int64_t rows, int64_t n) {
    static const char fn[] = "attn_layernorm_backward";
    attn_status st = check_matrix(fn, rows, n);
    if (st) return st;
    if (rows == 0 || n == 0) return ATTN_OK;
    NEED_PTR_RN(fn, x, rows, n);
    NEED_PTR_RN(fn, mean, rows, n);
    NEED_PTR_RN(fn, rstd, rows, n);
    NEED_PTR_RN(fn, dy, rows, n);
    NEED_PTR_RN(fn, dx, rows, n);
    const attn_ops_kernels *k = attn_ops_active();
    const int nt = ops_threads(rows, rows * n);
    OPS_PARALLEL_FOR(nt)
    for (int64_t r = 0; r < rows; r++) k->layernorm_bwd(x + r * n, gamma, mean[r], rstd[r], dy + r * n, dx + r * n, n);
    if (dgamma || dbeta) {
        const int64_t blocks = (n + ATTN_OPS_COLS - 1) / ATTN_OPS_COLS;
        const int nb = ops_threads(blocks, rows * n);
        OPS_PARALLEL_FOR(nb)
        for (int64_t b = 0; b < blocks; b++) {
            int64_t c0 = b * ATTN_OPS_COLS, c1 = c0 + ATTN_OPS_COLS < n ? c0 + ATTN_OPS_COLS : n;
            k->layernorm_param_grad(x, mean, rstd, dy, dgamma, dbeta, rows, n, c0, c1);
        }
    }
    return ATTN_OK;
}

/* ---- activations ------------------------------------------------------------------------- */

static attn_status check_approx(const char *fn, attn_gelu_approx approx, int64_t n) {
    if (approx != ATTN_GELU_ERF && approx != ATTN_GELU_TANH)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: approx = %d is not ATTN_GELU_ERF or ATTN_GELU_TANH (n = %lld)", fn, (int)approx,
                          (long long)n);
    return ATTN_OK;
}

#define CHUNKS(n) (((n) + ATTN_OPS_CHUNK - 1) / ATTN_OPS_CHUNK)
#define CHUNK_LEN(c, n) ((c)*ATTN_OPS_CHUNK + ATTN_OPS_CHUNK < (n) ? ATTN_OPS_CHUNK : (n) - (c)*ATTN_OPS_CHUNK)

/* The chunked, threaded loop every elementwise op shares: chunk c covers elements
 * [c CHUNK, min((c + 1) CHUNK, n)), whatever the thread count. */
typedef enum ew_op { EW_GELU_FWD, EW_GELU_BWD, EW_RELU_FWD, EW_RELU_BWD, EW_ADD } ew_op;

static void run_elementwise(ew_op op, const float *a, const float *b, float *y, int64_t n, attn_gelu_approx approx) {
    const attn_ops_kernels *k = attn_ops_active();
    const int64_t chunks = CHUNKS(n);
    const int nt = ops_threads(chunks, n);
    OPS_PARALLEL_FOR(nt)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t o = c * ATTN_OPS_CHUNK, len = CHUNK_LEN(c, n);
        switch (op) {
        case EW_GELU_FWD: k->gelu_fwd(a + o, y + o, len, approx); break;
        case EW_GELU_BWD: k->gelu_bwd(a + o, b + o, y + o, len, approx); break;
        case EW_RELU_FWD: k->relu_fwd(a + o, y + o, len); break;
        case EW_RELU_BWD: k->relu_bwd(a + o, b + o, y + o, len); break;
        case EW_ADD: k->add(a + o, b + o, y + o, len); break;
        }
    }
}

attn_status attn_gelu_forward(const float *x, float *y, int64_t n, attn_gelu_approx approx) {
    static const char fn[] = "attn_gelu_forward";
    attn_status st = check_count(fn, n);
    if (st) return st;
    if ((st = check_approx(fn, approx, n))) return st;
    if (n == 0) return ATTN_OK;
    NEED_PTR_N(fn, x, n);
    NEED_PTR_N(fn, y, n);
    run_elementwise(EW_GELU_FWD, x, NULL, y, n, approx);
    return ATTN_OK;
}

attn_status attn_gelu_backward(const float *x, const float *dy, float *dx, int64_t n, attn_gelu_approx approx) {
    static const char fn[] = "attn_gelu_backward";
    attn_status st = check_count(fn, n);
    if (st) return st;
    if ((st = check_approx(fn, approx, n))) return st;
    if (n == 0) return ATTN_OK;
    NEED_PTR_N(fn, x, n);
    NEED_PTR_N(fn, dy, n);
    NEED_PTR_N(fn, dx, n);
    run_elementwise(EW_GELU_BWD, x, dy, dx, n, approx);
    return ATTN_OK;
}

attn_status attn_relu_forward(const float *x, float *y, int64_t n) {
    static const char fn[] = "attn_relu_forward";
    attn_status st = check_count(fn, n);
    if (st) return st;
    if (n == 0) return ATTN_OK;
    NEED_PTR_N(fn, x, n);
    NEED_PTR_N(fn, y, n);
    run_elementwise(EW_RELU_FWD, x, NULL, y, n, ATTN_GELU_ERF);
    return ATTN_OK;
}

attn_status attn_relu_backward(const float *x, const float *dy, float *dx, int64_t n) {
    static const char fn[] = "attn_relu_backward";
    attn_status st = check_count(fn, n);
    if (st) return st;
    if (n == 0) return ATTN_OK;
    NEED_PTR_N(fn, x, n);
    NEED_PTR_N(fn, dy, n);
    NEED_PTR_N(fn, dx, n);
    run_elementwise(EW_RELU_BWD, x, dy, dx, n, ATTN_GELU_ERF);
    return ATTN_OK;
}

/* ---- bias / residual -------------------------------------------------------------------- */

attn_status attn_bias_add(const float *x, const float *bias, float *y, int64_t rows, int64_t n) {
    static const char fn[] = "attn_bias_add";
    attn_status st = check_matrix(fn, rows, n);
    if (st) return st;
    if (rows == 0 || n == 0) return ATTN_OK;
    NEED_PTR_RN(fn, x, rows, n);
    NEED_PTR_RN(fn, bias, rows, n);
    NEED_PTR_RN(fn, y, rows, n);
    const attn_ops_kernels *k = attn_ops_active();
    /* items: (row, column chunk), so one long row is split too */
    const int64_t per_row = CHUNKS(n), items = rows * per_row;
    const int nt = ops_threads(items, rows * n);
    OPS_PARALLEL_FOR(nt)
    for (int64_t t = 0; t < items; t++) {
        const int64_t r = t / per_row, c = t % per_row, o = r * n + c * ATTN_OPS_CHUNK;
        k->add(x + o, bias + c * ATTN_OPS_CHUNK, y + o, CHUNK_LEN(c, n));
    }
    return ATTN_OK;
}

attn_status attn_bias_backward(const float *dy, float *dbias, int64_t rows, int64_t n) {
    static const char fn[] = "attn_bias_backward";
    attn_status st = check_matrix(fn, rows, n);
    if (st) return st;
    if (rows == 0 || n == 0) return ATTN_OK;
    NEED_PTR_RN(fn, dy, rows, n);
    NEED_PTR_RN(fn, dbias, rows, n);
    const attn_ops_kernels *k = attn_ops_active();
    const int64_t blocks = (n + ATTN_OPS_COLS - 1) / ATTN_OPS_COLS;
    const int nt = ops_threads(blocks, rows * n);
    OPS_PARALLEL_FOR(nt)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t c0 = b * ATTN_OPS_COLS, c1 = c0 + ATTN_OPS_COLS < n ? c0 + ATTN_OPS_COLS : n;
        k->col_sum(dy, dbias, rows, n, c0, c1);
    }
    return ATTN_OK;
}

attn_status attn_residual_add(const float *a, const float *b, float *y, int64_t n) {
    static const char fn[] = "attn_residual_add";
    attn_status st = check_count(fn, n);
    if (st) return st;
    if (n == 0) return ATTN_OK;
    NEED_PTR_N(fn, a, n);
    NEED_PTR_N(fn, b, n);
    NEED_PTR_N(fn, y, n);
    run_elementwise(EW_ADD, a, b, y, n, ATTN_GELU_ERF);
    return ATTN_OK;
}
