/* Reference scaled dot-product attention: the exact math, row by row, accumulated in double.
 * It is the oracle that every faster path (flash, sparse, ...) is tested against, so it favours
 * clarity and accuracy over speed.
 *
 * Forward, for query row i of head h (key/value head g = h / (Hq / Hk)) and key j:
 *   x_ij = scale * <q_i, k_j>
 *   s_ij = softcap * tanh(x_ij / softcap)      (softcap > 0; else s_ij = x_ij)
 *          - slope_h * |i + off - j|             (ALiBi)
 *          + add_mask[b, h, i, j]
 *          = -inf where the boolean mask, the key mask, causality or the window forbid (i, j)
 *   lse_i = log sum_j exp(s_ij),  P_ij = exp(s_ij - lse_i)
 *   P'_ij = P_ij * keep_ij / (1 - p)              (dropout, keep_ij from Philox)
 *   o_i   = sum_j P'_ij v_j
 * Backward, with dO:
 *   dP_ij = keep_ij / (1 - p) * <dO_i, v_j>,   D_i = sum_j P_ij dP_ij
 *   dS_ij = P_ij (dP_ij - D_i),  dX_ij = dS_ij * (1 - (s_ij / softcap)^2) when capped
 *   dq_i = scale * sum_j dX_ij k_j,  dk_j = scale * sum_{i, h in group} dX_ij q_i,
 *   dv_j = sum_{i, h in group} P'_ij dO_i
 * The backward runs two passes so that every output element is owned by one row and results do not
 * depend on the thread count: pass 1 over query rows (lse, D, dq), pass 2 over key rows (dk, dv). */
#include <math.h>
#include <string.h>

#include "attention_common.h"
#include "core/internal.h"

attn_sdpa_params attn_sdpa_params_default(void) {
    attn_sdpa_params p;
    memset(&p, 0, sizeof p);
    p.window_left = -1;
    p.window_right = -1;
    return p;
}

/* Logit s_ij, or -inf when (i, j) is masked. capped (nullable) receives the soft-capped scaled dot
 * product, before ALiBi and the additive mask: the backward needs it for the tanh derivative. */
static double logit(const attn_ctx *c, const attn_tensor *q, const attn_tensor *k, int64_t b, int64_t h, int64_t i,
                    int64_t j, double *capped) {
    if (!attn_ctx_allowed(c, b, h, i, j)) return -INFINITY;
    const float *qi = q->data + b * q->stride[0] + h * q->stride[1] + i * q->stride[2];
    const float *kj = k->data + b * k->stride[0] + (h / c->group) * k->stride[1] + j * k->stride[2];
    double dot = 0;
    for (int64_t t = 0; t < c->d; t++) dot += (double)qi[t * q->stride[3]] * kj[t * k->stride[3]];
    double s = c->scale * dot;
    if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
    if (capped) *capped = s;
    return s + attn_ctx_bias(c, b, h, i, j);
}

/* Log-sum-exp of a row of logits (-inf when every entry is -inf, NaN when one is NaN). */
static double row_lse(const double *s, int64_t n) {
    double m = -INFINITY, sum = 0;
    int nan = 0;
    for (int64_t j = 0; j < n; j++) {
        nan |= isnan(s[j]);
        if (s[j] > m) m = s[j];
    }
    if (nan) return NAN;
    if (m == -INFINITY) return -INFINITY;
    for (int64_t j = 0; j < n; j++) sum += exp(s[j] - m);
    return m + log(sum);
}

/* <dO_i, v_j> */
static double dot_dout_v(const attn_ctx *c, const attn_tensor *dout, const attn_tensor *v, int64_t b, int64_t h,
                         int64_t i, int64_t j) {
    const float *go = dout->data + b * dout->stride[0] + h * dout->stride[1] + i * dout->stride[2];
    const float *vj = v->data + b * v->stride[0] + (h / c->group) * v->stride[1] + j * v->stride[2];
    double acc = 0;
    for (int64_t t = 0; t < c->dv; t++) acc += (double)go[t * dout->stride[3]] * vj[t * v->stride[3]];
    return acc;
}

/* dX_ij from P_ij, the dropout-scaled dP_ij, D_i and the capped logit. */
static double grad_logit(const attn_ctx *c, double p, double dp, double dsum, double capped) {
    double dx = p * (dp - dsum);
    if (c->softcap > 0) {
        const double t = capped / c->softcap;
        dx *= 1.0 - t * t;
    }
    return dx;
}

/* Scratch: per thread max(3 Nk, d + dv) doubles; the backward adds lse and D per query row. */
static size_t row_scratch(const attn_ctx *c) {
    const int64_t a = 3 * c->nk, b = c->d + c->dv;
    return (size_t)(a > b ? a : b);
}

static size_t workspace_bytes_for(const attn_ctx *c, int backward) {
    size_t per, total, rows;
    if (attn_mul_overflow(row_scratch(c), sizeof(double), &per) ||
        attn_mul_overflow(per, (size_t)attn_get_num_threads(), &total))
        return SIZE_MAX;
    if (backward) {
        if (attn_mul_overflow((size_t)c->b * (size_t)c->hq, (size_t)c->nq, &rows) ||
            attn_mul_overflow(rows, 2 * sizeof(double), &rows) || attn_add_overflow(total, rows, &total))
            return SIZE_MAX;
    }
    return attn_add_overflow(total, 64, &total) ? SIZE_MAX : total;
}

size_t attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v) {
    attn_ctx c;
    attn_sdpa_params p = attn_sdpa_params_default();
    if (!q || !k || !v || q->rank != 4 || k->rank != 4 || v->rank != 4) return 0;
    attn_tensor out = *q;
    out.shape[3] = v->shape[3];
    if (attn_ctx_init(&c, "attn_sdpa_workspace_size", q, k, v, &p, &out, "out") != ATTN_OK) return 0;
    attn_clear_error();
    return workspace_bytes_for(&c, 1);
}

attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                              const attn_sdpa_params *params, attn_tensor *out, attn_tensor *weights, attn_tensor *lse,
                              void *workspace, size_t workspace_bytes) {
    static const char *fn = "attn_sdpa_forward";
    attn_ctx c;
    attn_status st;
    void *wsp;
    if ((st = attn_ctx_init(&c, fn, q, k, v, params, out, "out")) ||
        (st = attn_ctx_check_rows(&c, fn, weights, "weights", 1)) ||
        (st = attn_ctx_check_rows(&c, fn, lse, "lse", 0)) ||
        (st = attn_ctx_workspace(fn, workspace, workspace_bytes, workspace_bytes_for(&c, 0), &wsp)))
        return st;
    double *ws = wsp;
    const size_t scratch = row_scratch(&c);
    const int64_t rows = c.b * c.hq * c.nq;
#pragma omp parallel num_threads(attn_threads_for(rows))
    {
        double *s = ws + (size_t)attn_thread_id() * scratch;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t i = r % c.nq, h = (r / c.nq) % c.hq, b = r / (c.nq * c.hq);
            for (int64_t j = 0; j < c.nk; j++) s[j] = logit(&c, q, k, b, h, i, j, NULL);
            const double l = row_lse(s, c.nk);
            if (lse) lse->data[b * lse->stride[0] + h * lse->stride[1] + i * lse->stride[2]] = (float)l;
            float *w = weights
                           ? weights->data + b * weights->stride[0] + h * weights->stride[1] + i * weights->stride[2]
                           : NULL;
            for (int64_t j = 0; j < c.nk; j++) { /* s[j] <- P'_ij */
                s[j] = l == -INFINITY ? 0.0 : exp(s[j] - l) * attn_ctx_keep(&c, b, h, i, j);
                if (w) w[j * weights->stride[3]] = (float)s[j];
            }
            const float *vb = v->data + b * v->stride[0] + (h / c.group) * v->stride[1];
            float *o = out->data + b * out->stride[0] + h * out->stride[1] + i * out->stride[2];
            for (int64_t t = 0; t < c.dv; t++) {
                double acc = 0;
                for (int64_t j = 0; j < c.nk; j++)
                    if (s[j] != 0) acc += s[j] * vb[j * v->stride[2] + t * v->stride[3]];
                o[t * out->stride[3]] = (float)acc;
            }
        }
    }
    return ATTN_OK;
}

attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_params *params, const attn_tensor *dout, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv, void *workspace, size_t workspace_bytes) {
    static const char *fn = "attn_sdpa_backward";
    attn_ctx c;
    attn_status st;
    void *wsp;
    if ((st = attn_ctx_init(&c, fn, q, k, v, params, dout, "dout")) || (st = attn_ctx_check_like(fn, dq, "dq", q)) ||
        (st = attn_ctx_check_like(fn, dk, "dk", k)) || (st = attn_ctx_check_like(fn, dv, "dv", v)) ||
        (st = attn_ctx_workspace(fn, workspace, workspace_bytes, workspace_bytes_for(&c, 1), &wsp)))
        return st;
    double *ws = wsp;
    const size_t scratch = row_scratch(&c);
    const int64_t rows = c.b * c.hq * c.nq;
    double *lse_all = ws + scratch * (size_t)attn_get_num_threads();
    double *d_all = lse_all + rows;

    /* pass 1, over query rows: lse_i, D_i and dq_i */
#pragma omp parallel num_threads(attn_threads_for(rows))
    {
        double *s = ws + (size_t)attn_thread_id() * scratch;
        double *capped = s + c.nk, *dp = capped + c.nk;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t i = r % c.nq, h = (r / c.nq) % c.hq, b = r / (c.nq * c.hq);
            /* capped[j] stays NaN for a masked key (logit() writes it only for visible ones): dq
             * below skips those, and only those, where dS is 0 */
            for (int64_t j = 0; j < c.nk; j++) {
                capped[j] = NAN;
                s[j] = logit(&c, q, k, b, h, i, j, &capped[j]);
            }
            const double l = row_lse(s, c.nk);
            double dsum = 0;
            for (int64_t j = 0; j < c.nk; j++) {
                s[j] = l == -INFINITY ? 0.0 : exp(s[j] - l); /* P_ij */
                const double keep = s[j] != 0 ? attn_ctx_keep(&c, b, h, i, j) : 0.0;
                dp[j] = keep != 0 ? keep * dot_dout_v(&c, dout, v, b, h, i, j) : 0.0;
                dsum += s[j] * dp[j];
            }
            lse_all[r] = l;
            d_all[r] = dsum;
            if (!dq) continue;
            for (int64_t j = 0; j < c.nk; j++) dp[j] = s[j] != 0 ? grad_logit(&c, s[j], dp[j], dsum, capped[j]) : 0.0;
            const float *kb = k->data + b * k->stride[0] + (h / c.group) * k->stride[1];
            float *gq = dq->data + b * dq->stride[0] + h * dq->stride[1] + i * dq->stride[2];
            /* a visible key with dS = 0 still multiplies its K row (0 * Inf is NaN, as in
             * PyTorch's dS @ K); a masked one is not read, nor is any key of a row whose logits
             * are all -inf (masked or not: such a row is a masked row, output 0, no gradient) */
            for (int64_t t = 0; t < c.d; t++) {
                double acc = 0;
                for (int64_t j = 0; j < c.nk; j++)
                    if (dp[j] != 0 || (l != -INFINITY && !isnan(capped[j])))
                        acc += dp[j] * kb[j * k->stride[2] + t * k->stride[3]];
                gq[t * dq->stride[3]] = (float)(c.scale * acc);
            }
        }
    }
    if (!dk && !dv) return ATTN_OK;

    /* pass 2, over the key rows of each kv head: dk_j, dv_j summed over the group's query heads and
     * rows in a fixed order */
    const int64_t krows = c.b * c.hk * c.nk;
#pragma omp parallel num_threads(attn_threads_for(krows))
    {
        double *kacc = ws + (size_t)attn_thread_id() * scratch, *vacc = kacc + c.d;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < krows; r++) {
            const int64_t j = r % c.nk, g = (r / c.nk) % c.hk, b = r / (c.nk * c.hk);
            memset(kacc, 0, sizeof(double) * (size_t)(c.d + c.dv));
            for (int64_t h = g * c.group; h < (g + 1) * c.group; h++) {
                for (int64_t i = 0; i < c.nq; i++) {
                    const int64_t qr = (b * c.hq + h) * c.nq + i;
                    /* a masked key is not read, nor any key of a fully masked row; a logit that is
                     * -inf by arithmetic (an infinite q or k) still meets its row's statistic, so a
                     * NaN row (NaN or infinite logits) gives NaN here as in pass 1 */
                    if (lse_all[qr] == -INFINITY || !attn_ctx_allowed(&c, b, h, i, j)) continue;
                    double capped = 0;
                    const double s = logit(&c, q, k, b, h, i, j, &capped);
                    const double p = exp(s - lse_all[qr]);
                    const double keep = attn_ctx_keep(&c, b, h, i, j);
                    const float *go = dout->data + b * dout->stride[0] + h * dout->stride[1] + i * dout->stride[2];
                    if (keep != 0)
                        for (int64_t t = 0; t < c.dv; t++) vacc[t] += p * keep * go[t * dout->stride[3]];
                    const double dp = keep != 0 ? keep * dot_dout_v(&c, dout, v, b, h, i, j) : 0.0;
                    const double dx = grad_logit(&c, p, dp, d_all[qr], capped);
                    const float *qi = q->data + b * q->stride[0] + h * q->stride[1] + i * q->stride[2];
                    for (int64_t t = 0; t < c.d; t++) kacc[t] += dx * qi[t * q->stride[3]];
                }
            }
            if (dk) {
                float *gk = dk->data + b * dk->stride[0] + g * dk->stride[1] + j * dk->stride[2];
                for (int64_t t = 0; t < c.d; t++) gk[t * dk->stride[3]] = (float)(c.scale * kacc[t]);
            }
            if (dv) {
                float *gv = dv->data + b * dv->stride[0] + g * dv->stride[1] + j * dv->stride[2];
                for (int64_t t = 0; t < c.dv; t++) gv[t * dv->stride[3]] = (float)vacc[t];
            }
        }
    }
    return ATTN_OK;
}
