/* Losses and their gradients: cross-entropy over class logits (ignore_index, label smoothing) and
 * mean squared error, with PyTorch's reductions.
 *
 * Cross-entropy, row i with target t, C classes, smoothing eps, m = max_j x_j:
 *   s = sum_j exp(x_j - m)                           (double; every term <= 1, so no overflow;
 *                                                     log s taken as log1p(s - 1), s - 1 summed apart)
 *   loss = log s + (1 - eps)(m - x_t) + eps / C * sum_j (m - x_j)
 *        = (1 - eps)(lse - x_t) + eps / C * sum_j (lse - x_j),   lse = m + log s
 *   dloss/dx_j = exp(x_j - m) / s - (1 - eps)[j == t] - eps / C
 * Written with m - x_j >= 0 rather than lse - x_j so that logits of magnitude 1e4 lose nothing to
 * cancellation. Ignored rows: loss 0, gradient 0.
 * MSE: loss_i = (x_i - y_i)^2, dloss/dx_i = 2 (x_i - y_i), dloss/dy_i = -2 (x_i - y_i).
 *
 * Rows (elements for MSE) are split into TR_BLOCKS blocks fixed by the size; each block runs on one
 * thread and sums its losses in order, block sums are added in order: bitwise identical results
 * for any thread count. */
#include <math.h>
#include <string.h>

#include "train_internal.h"

attn_cross_entropy_config attn_cross_entropy_config_default(void) {
    attn_cross_entropy_config c;
    c.ignore_index = -100;
    c.label_smoothing = 0.0;
    c.reduction = ATTN_REDUCTION_MEAN;
    return c;
}

static attn_status check_reduction(const char *fn, attn_reduction r) {
    if (r != ATTN_REDUCTION_MEAN && r != ATTN_REDUCTION_SUM && r != ATTN_REDUCTION_NONE)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: reduction %d is not mean (0), sum (1) or none (2)", fn,
                          (int)r);
    return ATTN_OK;
}

/* Checks shared by forward and backward; *count receives the number of rows not ignored. */
static attn_status ce_check(const char *fn, const float *logits, const int64_t *targets, int64_t n, int64_t c,
                            const attn_cross_entropy_config *cfg, const float *out, const char *out_name,
                            int64_t *count) {
    if (n < 0 || c < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: logits shape [%lld, %lld]: need N >= 0 and C >= 1", fn,
                          (long long)n, (long long)c);
    size_t elems, bytes;
    if (attn_mul_overflow((size_t)n, (size_t)c, &elems) || attn_mul_overflow(elems, sizeof(float), &bytes) ||
        elems > (size_t)INT64_MAX)
        return attn_error(ATTN_ERR_OVERFLOW, "%s: logits shape [%lld, %lld] overflows", fn, (long long)n, (long long)c);
    attn_status st = check_reduction(fn, cfg->reduction);
    if (st) return st;
    const double eps = cfg->label_smoothing;
    if (!(eps >= 0.0 && eps <= 1.0))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: label_smoothing %g outside [0, 1]", fn, eps);
    if (n > 0) {
        ATTN_CHECK_NOT_NULL(fn, logits);
        ATTN_CHECK_NOT_NULL(fn, targets);
    }
    if (!out && (n > 0 || cfg->reduction != ATTN_REDUCTION_NONE))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, out_name);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = targets[i];
        if (t == cfg->ignore_index) continue;
        if (t < 0 || t >= c)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                              "%s: targets[%lld] = %lld is outside [0, %lld) (C = %lld classes) and is not "
                              "ignore_index %lld",
                              fn, (long long)i, (long long)t, (long long)c, (long long)c, (long long)cfg->ignore_index);
        k++;
    }
    *count = k;
    return ATTN_OK;
}

/* One row: returns its loss when want_loss, and writes its gradient times g into dx when dx is
 * not NULL. dx may be x itself: every x_j is read before dx_j is written. */
static double ce_row(const float *x, int64_t c, int64_t t, double eps, int want_loss, float *dx, double g) {
    int64_t am = 0;
    for (int64_t j = 1; j < c; j++) am = x[j] > x[am] ? j : am;
    const double md = x[am];
    double gap = 0.0; /* sum_j (m - x_j), needed only for smoothing */
    if (want_loss && eps != 0.0)
        for (int64_t j = 0; j < c; j++) gap += md - (double)x[j];
    const double xt = x[t];
    double rest = 0.0; /* s - 1: the terms but the maximum's exp(0) = 1 */
    if (dx) {
        for (int64_t j = 0; j < c; j++) {
            const double e = exp((double)x[j] - md);
            if (j != am) rest += e;
            dx[j] = (float)e; /* kept for the second pass: rounding e costs 6e-8 relative */
        }
        const double s = 1.0 + rest, inv = g / s, off = g * eps / (double)c;
        for (int64_t j = 0; j < c; j++) dx[j] = (float)((double)dx[j] * inv - off);
        /* the target's p_t - (1 - eps) cancels when p_t is near 1, which needs x_t = m: then
         * p_t = 1 / s and p_t - 1 = -rest / s exactly; else p_t from the unrounded exp */
        dx[t] = (float)(xt == md ? g * (eps - rest / s) - off : exp(xt - md) * inv - off - g * (1.0 - eps));
    } else {
        for (int64_t j = 0; j < c; j++)
            if (j != am) rest += exp((double)x[j] - md);
    }
    if (!want_loss) return 0.0;
    /* log s as log1p(s - 1): a confident row's loss (~1e-13) keeps its relative precision */
    return log1p(rest) + (1.0 - eps) * (md - xt) + eps / (double)c * gap;
}

/* The shared driver: losses into loss (per row for none, else reduced), gradients with upstream
 * dloss (NULL = 1) into dx (nullable). */
static void ce_run(const float *logits, const int64_t *targets, int64_t n, int64_t c,
                   const attn_cross_entropy_config *cfg, int64_t count, float *loss, const float *dloss, float *dx) {
    const attn_reduction red = cfg->reduction;
    const double eps = cfg->label_smoothing;
    const int want_loss = loss != NULL;
    /* upstream gradient per row for mean / sum; with every row ignored no row uses it (PyTorch's
     * gradient is 0 there, not 0 * inf) */
    double g_all = dloss ? (double)dloss[0] : 1.0;
    if (red == ATTN_REDUCTION_MEAN) g_all = count > 0 ? g_all / (double)count : 0.0;
    double part[TR_BLOCKS];
    const int nt = tr_threads(n * c);
    TR_PARALLEL_FOR(nt)
    for (int b = 0; b < TR_BLOCKS; b++) {
        const int64_t lo = tr_block_lo(n, b), hi = tr_block_lo(n, b + 1);
        double acc = 0.0;
        for (int64_t i = lo; i < hi; i++) {
            const float *x = logits + i * c;
            float *d = dx ? dx + i * c : NULL;
            const int64_t t = targets[i];
            if (t == cfg->ignore_index) {
                if (d) memset(d, 0, (size_t)c * sizeof(float));
                if (want_loss && red == ATTN_REDUCTION_NONE) loss[i] = 0.0f;
                continue;
            }
            const double g = red == ATTN_REDUCTION_NONE ? (dloss ? (double)dloss[i] : 1.0) : g_all;
            const double li = ce_row(x, c, t, eps, want_loss, d, g);
            if (want_loss && red == ATTN_REDUCTION_NONE) loss[i] = (float)li;
            acc += li;
        }
        part[b] = acc;
    }
    if (!want_loss || red == ATTN_REDUCTION_NONE) return;
    double total = 0.0;
    for (int b = 0; b < TR_BLOCKS; b++) total += part[b];
    /* 0 / 0 = NaN with every row ignored, as PyTorch */
    loss[0] = (float)(red == ATTN_REDUCTION_MEAN ? total / (double)count : total);
}

/* dlogits must be logits or not overlap it at all (a partial overlap would be read after written). */
static attn_status ce_check_alias(const char *fn, const float *logits, const float *dlogits, int64_t n, int64_t c) {
    if (!dlogits || dlogits == logits || n == 0) return ATTN_OK;
    const size_t len = (size_t)n * (size_t)c;
    if (dlogits < logits + len && logits < dlogits + len)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: dlogits overlaps logits [%lld, %lld] without being the same buffer", fn, (long long)n,
                          (long long)c);
    return ATTN_OK;
}

attn_status attn_cross_entropy_forward(const float *logits, const int64_t *targets, int64_t n, int64_t c,
                                       const attn_cross_entropy_config *cfg, float *loss, float *dlogits) {
    static const char fn[] = "attn_cross_entropy_forward";
    const attn_cross_entropy_config dflt = attn_cross_entropy_config_default();
    if (!cfg) cfg = &dflt;
    int64_t count = 0;
    attn_status st = ce_check(fn, logits, targets, n, c, cfg, loss, "loss", &count);
    if (st) return st;
    st = ce_check_alias(fn, logits, dlogits, n, c);
    if (st) return st;
    ce_run(logits, targets, n, c, cfg, count, loss, NULL, dlogits);
    return ATTN_OK;
}

attn_status attn_cross_entropy_backward(const float *logits, const int64_t *targets, int64_t n, int64_t c,
                                        const attn_cross_entropy_config *cfg, const float *dloss, float *dlogits) {
    static const char fn[] = "attn_cross_entropy_backward";
    const attn_cross_entropy_config dflt = attn_cross_entropy_config_default();
    if (!cfg) cfg = &dflt;
    int64_t count = 0;
    attn_status st = ce_check(fn, logits, targets, n, c, cfg, dlogits, "dlogits", &count);
    if (st) return st;
    st = ce_check_alias(fn, logits, dlogits, n, c);
    if (st) return st;
    ce_run(logits, targets, n, c, cfg, count, NULL, dloss, dlogits);
    return ATTN_OK;
}

/* ---- MSE ---- */

static attn_status mse_check(const char *fn, const float *input, const float *target, int64_t n, attn_reduction red) {
    if (n < 0) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: n = %lld is negative", fn, (long long)n);
    size_t bytes;
    if (attn_mul_overflow((size_t)n, sizeof(float), &bytes))
        return attn_error(ATTN_ERR_OVERFLOW, "%s: n = %lld overflows", fn, (long long)n);
    attn_status st = check_reduction(fn, red);
    if (st) return st;
    if (n > 0) {
        ATTN_CHECK_NOT_NULL(fn, input);
        ATTN_CHECK_NOT_NULL(fn, target);
    }
    return ATTN_OK;
}

attn_status attn_mse_forward(const float *input, const float *target, int64_t n, attn_reduction reduction,
                             float *loss) {
    static const char fn[] = "attn_mse_forward";
    attn_status st = mse_check(fn, input, target, n, reduction);
    if (st) return st;
    if (n > 0 || reduction != ATTN_REDUCTION_NONE) ATTN_CHECK_NOT_NULL(fn, loss);
    double part[TR_BLOCKS];
    const int nt = tr_threads(n);
    TR_PARALLEL_FOR(nt)
    for (int b = 0; b < TR_BLOCKS; b++) {
        const int64_t lo = tr_block_lo(n, b), hi = tr_block_lo(n, b + 1);
        double acc = 0.0;
        for (int64_t i = lo; i < hi; i++) {
            const double d = (double)input[i] - (double)target[i], l = d * d;
            if (reduction == ATTN_REDUCTION_NONE) loss[i] = (float)l;
            acc += l;
        }
        part[b] = acc;
    }
    if (reduction == ATTN_REDUCTION_NONE) return ATTN_OK;
    double total = 0.0;
    for (int b = 0; b < TR_BLOCKS; b++) total += part[b];
    loss[0] = (float)(reduction == ATTN_REDUCTION_MEAN ? total / (double)n : total); /* n = 0: NaN */
    return ATTN_OK;
}

attn_status attn_mse_backward(const float *input, const float *target, int64_t n, attn_reduction reduction,
                              const float *dloss, float *dinput, float *dtarget) {
    static const char fn[] = "attn_mse_backward";
    attn_status st = mse_check(fn, input, target, n, reduction);
    if (st) return st;
    double g_all = dloss ? (double)dloss[0] : 1.0;
    if (reduction == ATTN_REDUCTION_MEAN && n > 0) g_all /= (double)n;
    const int nt = tr_threads(n);
    TR_PARALLEL_FOR(nt)
    for (int b = 0; b < TR_BLOCKS; b++) {
        const int64_t lo = tr_block_lo(n, b), hi = tr_block_lo(n, b + 1);
        for (int64_t i = lo; i < hi; i++) {
            const double g = reduction == ATTN_REDUCTION_NONE ? (dloss ? (double)dloss[i] : 1.0) : g_all;
            const double d = 2.0 * ((double)input[i] - (double)target[i]) * g; /* both read first */
            if (dinput) dinput[i] = (float)d;
            if (dtarget) dtarget[i] = (float)-d;
        }
    }
    return ATTN_OK;
}
