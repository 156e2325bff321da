/* Performer FAVOR+ (Choromanski et al. 2021, "Rethinking Attention with Performers").
 *
 * With x' = x d^(-1/4) and a projection W [m, d] (rows w_r):
 *   phi(x)_r = exp(w_r . x' - |x'|^2 / 2 - c) / sqrt(m)
 * (positive random features: E[phi(q)^T phi(k)] = exp(q . k / sqrt(d)) when c = 0 and the w_r are
 * standard Gaussian), then linear attention without epsilon (linear_attention.c's engine):
 *   out_i = phi(q_i)^T S / phi(q_i)^T z,  S = sum_j phi(k_j) v_j^T,  z = sum_j phi(k_j).
 * Stabiliser c: a per-row maximum of w_r . x' - |x'|^2 / 2 for queries, one maximum over every real
 * key of the (batch, head) for keys (a running maximum in the recurrent step). Each scales a
 * query's numerator and denominator alike, or every key alike, so it cancels exactly: the
 * backward treats it as a constant. Through phi:
 *   dH = dphi * phi,  dx = d^(-1/4) (dH W - (sum_r dH_r) x').
 * Orthogonal random features (attn_orf_draw): blocks of d rows of a Haar orthogonal matrix
 * (Gram-Schmidt of a Gaussian matrix, in double), rows scaled by chi(d) norms. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "attention/attention_common.h"
#include "attention/linear_internal.h"
#include "core/internal.h"

/* Four standard Gaussians (Box-Muller) for counter block i of stream (seed, offset). */
static void gauss4(uint64_t seed, uint64_t offset, uint64_t i, double g[4]) {
    const uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)offset, (uint32_t)(offset >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t r[4];
    attn_philox4x32_10(ctr, key, r);
    for (int k = 0; k < 2; k++) {
        const double u1 = ((double)r[2 * k] + 0.5) * 0x1.0p-32, u2 = (double)r[2 * k + 1] * 0x1.0p-32;
        const double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
        g[2 * k] = rad * cos(th);
        g[2 * k + 1] = rad * sin(th);
    }
}

/* n Gaussians of stream (seed, offset) into out. */
static void gaussians(uint64_t seed, uint64_t offset, double *out, int64_t n) {
    double g[4];
    for (int64_t i = 0; i < n; i += 4) {
        gauss4(seed, offset, (uint64_t)(i / 4), g);
        for (int64_t k = 0; k < 4 && i + k < n; k++) out[i + k] = g[k];
    }
}

attn_status attn_orf_draw(float *w, int64_t m, int64_t d, uint64_t seed) {
    static const char fn[] = "attn_orf_draw";
    ATTN_CHECK_NOT_NULL(fn, w);
    if (m < 1 || d < 1 || m > (1 << 20) || d > 4096)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: need m in [1, 2^20] and d in [1, 4096] (m = %lld, d = %lld)",
                          fn, (long long)m, (long long)d);
    /* one block at a time: d x d Gaussians for the rows, d x d more for the norms (on the stack up
     * to d = 64) */
    double stackbuf[2 * 64 * 64];
    double *buf = stackbuf;
    const size_t need = (size_t)(2 * d * d);
    if (need > sizeof stackbuf / sizeof stackbuf[0]) {
        buf = attn__malloc(need * sizeof(double));
        if (!buf) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory (d = %lld)", fn, (long long)d);
    }
    double *G = buf, *nv = buf + d * d;
    const int64_t blocks = (m + d - 1) / d;
    for (int64_t blk = 0; blk < blocks; blk++) {
        gaussians(seed, (uint64_t)(2 * blk), G, d * d);
        gaussians(seed, (uint64_t)(2 * blk + 1), nv, d * d);
        /* modified Gram-Schmidt over the rows, twice (re-orthogonalisation keeps 1e-15) */
        for (int64_t r = 0; r < d; r++) {
            double *v = G + r * d;
            for (int pass = 0; pass < 2; pass++)
                for (int64_t s = 0; s < r; s++) {
                    const double *u = G + s * d;
                    double dot = 0;
                    for (int64_t c = 0; c < d; c++) dot += v[c] * u[c];
                    for (int64_t c = 0; c < d; c++) v[c] -= dot * u[c];
                }
            double nn = 0;
            for (int64_t c = 0; c < d; c++) nn += v[c] * v[c];
            nn = sqrt(nn);
            for (int64_t c = 0; c < d; c++) v[c] = nn > 0 ? v[c] / nn : 0;
        }
        const int64_t rows = blk * d + d <= m ? d : m - blk * d;
        for (int64_t r = 0; r < rows; r++) {
            /* chi(d): the norm of a fresh Gaussian d-vector (stream offset 2 blk + 1, row r) */
            double chi = 0;
            for (int64_t c = 0; c < d; c++) chi += nv[r * d + c] * nv[r * d + c];
            chi = sqrt(chi);
            for (int64_t c = 0; c < d; c++) w[(blk * d + r) * d + c] = (float)(G[r * d + c] * chi);
        }
    }
    if (buf != stackbuf) attn__free(buf);
    return ATTN_OK;
}

/* ---- FAVOR+ ---- */

/* w [Hw, m, d] against heads H and head dimension d; fills the map. */
static attn_status check_w(const char *fn, const attn_tensor *w, int64_t H, int64_t d, lin_map *mp) {
    char a[96];
    ATTN_CHECK_NOT_NULL(fn, w);
    if (w->rank != 3 || !w->data || w->shape[2] != d || w->shape[1] < 1 || w->shape[1] > (1 << 20) ||
        (w->shape[0] != 1 && w->shape[0] != H))
        return attn_error(ATTN_ERR_SHAPE, "%s: w has shape %s, need [1 or H = %lld, m, d = %lld] with data", fn,
                          attn_shape_str(w->shape, w->rank > 0 && w->rank <= 4 ? w->rank : 0, a, sizeof a),
                          (long long)H, (long long)d);
    if (w->stride[2] != 1 || w->stride[1] != d || (w->shape[0] > 1 && w->stride[0] != w->shape[1] * d))
        return attn_error(ATTN_ERR_SHAPE, "%s: w %s must be contiguous", fn, attn_shape_str(w->shape, 3, a, sizeof a));
    mp->p = w->shape[1];
    mp->eps = 0.0f;
    mp->w = w->data;
    mp->w_heads = w->shape[0];
    return ATTN_OK;
}

/* The map for workspace queries (shapes only). */
static int map_of(const attn_tensor *w, lin_map *mp) {
    if (!w || w->rank != 3 || w->shape[1] < 1) return 0;
    static const float dummy = 0;
    mp->p = w->shape[1];
    mp->eps = 0.0f;
    mp->w = &dummy;
    mp->w_heads = w->shape[0];
    return 1;
}

attn_status attn_performer_features(const attn_tensor *x, const attn_tensor *w, int is_query,
                                    const attn_btensor *key_mask, attn_tensor *phi) {
    static const char fn[] = "attn_performer_features";
    char a[96], b[96];
    ATTN_CHECK_NOT_NULL(fn, x);
    ATTN_CHECK_NOT_NULL(fn, phi);
    if (x->rank != 4 || !x->data)
        return attn_error(ATTN_ERR_SHAPE, "%s: x must be [B, H, N, d] with data (rank %d)", fn, x->rank);
    lin_map mp;
    attn_status st = check_w(fn, w, x->shape[1], x->shape[3], &mp);
    if (st) return st;
    const int64_t B = x->shape[0], H = x->shape[1], N = x->shape[2], d = x->shape[3], m = mp.p;
    if (phi->rank != 4 || !phi->data || phi->shape[0] != B || phi->shape[1] != H || phi->shape[2] != N ||
        phi->shape[3] != m)
        return attn_error(ATTN_ERR_SHAPE, "%s: phi has shape %s, need [B, H, N, m] for x %s and m = %lld", fn,
                          attn_shape_str(phi->shape, phi->rank >= 1 && phi->rank <= 4 ? phi->rank : 0, a, sizeof a),
                          attn_shape_str(x->shape, 4, b, sizeof b), (long long)m);
    if (key_mask &&
        (is_query || key_mask->rank != 2 || key_mask->shape[0] != B || key_mask->shape[1] != N || !key_mask->data))
        return attn_error(ATTN_ERR_SHAPE, "%s: key_mask is for keys and must be [B, N] = [%lld, %lld]", fn,
                          (long long)B, (long long)N);
    if (N == 0) return ATTN_OK;
    float *F = attn__malloc(sizeof(float) * (size_t)(N * (m + d)));
    if (!F)
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory (N = %lld, m = %lld)", fn, (long long)N,
                          (long long)m);
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t bb = bh / H, h = bh % H;
        attn_lin_features(&mp, h, d, x->data + bb * x->stride[0] + h * x->stride[1], x->stride[2], x->stride[3], N,
                          is_query, key_mask ? key_mask->data + bb * key_mask->stride[0] : NULL,
                          key_mask ? key_mask->stride[1] : 0, NULL, F, F + N * m, NULL, 0);
        float *o = phi->data + bb * phi->stride[0] + h * phi->stride[1];
        for (int64_t i = 0; i < N; i++)
            for (int64_t r = 0; r < m; r++) o[i * phi->stride[2] + r * phi->stride[3]] = F[i * m + r];
    }
    attn__free(F);
    return ATTN_OK;
}

size_t attn_performer_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                     const attn_tensor *w) {
    lin_map mp;
    if (!q || !k || !v || q->rank != 4 || k->rank != 4 || v->rank != 4 || !map_of(w, &mp)) return 0;
    const size_t s =
        attn_lin_ws_bytes(&mp, q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3], v->shape[3]);
    return s == SIZE_MAX ? 0 : s;
}

attn_status attn_performer_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                   const attn_tensor *w, attn_causal causal, const attn_btensor *key_mask,
                                   attn_tensor *out, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_performer_forward";
    ATTN_CHECK_NOT_NULL(fn, q);
    lin_map mp;
    attn_status st = check_w(fn, w, q->shape[1], q->shape[3], &mp);
    if (st) return st;
    return attn_lin_run(fn, &mp, q, k, v, causal, key_mask, out, NULL, NULL, NULL, NULL, workspace, workspace_bytes);
}

attn_status attn_performer_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                    const attn_tensor *w, attn_causal causal, const attn_btensor *key_mask,
                                    const attn_tensor *dout, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                    void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_performer_backward";
    ATTN_CHECK_NOT_NULL(fn, q);
    ATTN_CHECK_NOT_NULL(fn, dout);
    lin_map mp;
    attn_status st = check_w(fn, w, q->shape[1], q->shape[3], &mp);
    if (st) return st;
    return attn_lin_run(fn, &mp, q, k, v, causal, key_mask, NULL, dout, dq, dk, dv, workspace, workspace_bytes);
}

size_t attn_performer_state_floats(int64_t m, int64_t dv) {
    if (m < 1 || dv < 1) return 0;
    static const float dummy = 0;
    const lin_map mp = {m, 0.0f, &dummy, 1};
    return attn_lin_state_floats(&mp, dv);
}

size_t attn_performer_step_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                          const attn_tensor *w) {
    lin_map mp;
    if (!map_of(w, &mp)) return 0;
    const size_t s = attn_lin_step_ws_bytes(&mp, q, k, v);
    return s == SIZE_MAX ? 0 : s;
}

attn_status attn_performer_step(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, const attn_tensor *w,
                                int causal, const attn_btensor *key_mask, float *state, attn_tensor *out,
                                void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_performer_step";
    const attn_tensor *r = q ? q : k;
    if (!r) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: q and k are both NULL: nothing to do", fn);
    if (r->rank != 4) return attn_error(ATTN_ERR_SHAPE, "%s: q / k must be rank 4 (got %d)", fn, r->rank);
    lin_map mp;
    attn_status st = check_w(fn, w, r->shape[1], r->shape[3], &mp);
    if (st) return st;
    return attn_lin_step(fn, &mp, q, k, v, causal, key_mask, state, out, workspace, workspace_bytes);
}
