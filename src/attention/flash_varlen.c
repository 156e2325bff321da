/* Variable-length (packed) flash attention: FlashAttention's varlen API over attn_flash_*.
 *
 * Sequence s of the packed batch is the batch-1 problem on views of the packed tensors:
 *   Q_s = q[cu_q[s] .. cu_q[s + 1]) as [1, Hq, Nq_s, d] (the packed row stride becomes the
 *   sequence stride, the head stride stays), K_s, V_s likewise from cu_k, O_s from out, and
 *   lse_s [1, Hq, Nq_s] from lse [Hq, total_q].
 * Each sequence runs through attn_flash_forward / attn_flash_backward itself, so its results are
 * those of running it alone bit for bit by construction (the same tile kernels, block order,
 * decode path for a one-token query and dropout rule), every thread works on the sequence's
 * (head, query block) tasks (forward) or (key/value head, key run) tasks (backward), and no tile
 * of padding is ever formed. */
#include <stdio.h>
#include <string.h>

#include "attention_common.h"
#include "core/internal.h"

/* The per-sequence option set: the padded batch's masks have no meaning for a packed batch. */
static attn_status check_params(const char *fn, const attn_sdpa_params *params) {
    if (!params) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    if (params->bool_mask || params->add_mask || params->key_mask)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: bool_mask, add_mask and key_mask are padded-batch masks [B, ..]; a packed batch takes "
                          "causal, window, alibi_slopes, softcap and dropout only",
                          fn);
    return ATTN_OK;
}

/* A packed view: non-NULL, rank 3 [total, H, D]. */
static attn_status check_packed(const char *fn, const char *name, const attn_tensor *t, int rank) {
    if (!t) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    if (t->rank != rank)
        return attn_error(ATTN_ERR_SHAPE, "%s: %s must have rank %d (%s), got rank %d", fn, name, rank,
                          rank == 3 ? "[total, heads, head_dim]" : "[Hq, total_q]", t->rank);
    for (int i = 0; i < rank; i++)
        if (t->shape[i] < 0)
            return attn_error(ATTN_ERR_SHAPE, "%s: %s has a negative extent (shape[%d] = %lld)", fn, name, i,
                              (long long)t->shape[i]);
    return ATTN_OK;
}

/* cu [batch + 1]: 0 first, nondecreasing, total last. */
static attn_status check_cu(const char *fn, const char *name, const int64_t *cu, int64_t batch, int64_t total,
                            const char *total_of) {
    if (!cu) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    if (cu[0] != 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s[0] = %lld, must be 0", fn, name, (long long)cu[0]);
    for (int64_t s = 0; s < batch; s++)
        if (cu[s + 1] < cu[s] || cu[s + 1] > total)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                              "%s: %s[%lld] = %lld after %s[%lld] = %lld: must be nondecreasing and at most %lld "
                              "(%s rows)",
                              fn, name, (long long)(s + 1), (long long)cu[s + 1], name, (long long)s, (long long)cu[s],
                              (long long)total, total_of);
    if (cu[batch] != total)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s[%lld] = %lld, must equal %s's %lld rows", fn, name,
                          (long long)batch, (long long)cu[batch], total_of, (long long)total);
    return ATTN_OK;
}

/* Everything the calls share: params, the packed views' ranks and the lengths. */
static attn_status check_common(const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const int64_t *cu_q, const int64_t *cu_k, int64_t batch,
                                const attn_sdpa_params *params) {
    attn_status st;
    if ((st = check_packed(fn, "q", q, 3)) || (st = check_packed(fn, "k", k, 3)) || (st = check_packed(fn, "v", v, 3)))
        return st;
    if (batch < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch = %lld, need at least one sequence", fn,
                          (long long)batch);
    if (v->shape[0] != k->shape[0])
        return attn_error(ATTN_ERR_SHAPE, "%s: v has %lld rows, k has %lld (both total_k)", fn, (long long)v->shape[0],
                          (long long)k->shape[0]);
    if ((st = check_cu(fn, "cu_seqlens_q", cu_q, batch, q->shape[0], "q")) ||
        (st = check_cu(fn, "cu_seqlens_k", cu_k, batch, k->shape[0], "k")))
        return st;
    return params ? check_params(fn, params) : ATTN_OK;
}

/* Rows [start, start + n) of packed x [total, H, D] as the batch-1 view [1, H, n, D]. */
static attn_tensor seq_view(const attn_tensor *x, int64_t start, int64_t n) {
    attn_tensor t;
    memset(&t, 0, sizeof t);
    t.rank = 4;
    t.dtype = x->dtype;
    t.shape[0] = 1;
    t.shape[1] = x->shape[1];
    t.shape[2] = n;
    t.shape[3] = x->shape[2];
    t.stride[0] = 0; /* one batch entry */
    t.stride[1] = x->stride[1];
    t.stride[2] = x->stride[0];
    t.stride[3] = x->stride[2];
    t.ptr = x->ptr;
    if (start) t.ptr = (char *)x->ptr + start * x->stride[0] * (int64_t)attn_type_size(x->dtype);
    return t;
}

/* Columns [start, start + n) of lse [Hq, total_q] as [1, Hq, n]. */
static attn_tensor lse_view(const attn_tensor *x, int64_t start, int64_t n) {
    attn_tensor t;
    memset(&t, 0, sizeof t);
    t.rank = 3;
    t.dtype = x->dtype;
    t.shape[0] = 1;
    t.shape[1] = x->shape[0];
    t.shape[2] = n;
    t.stride[1] = x->stride[0];
    t.stride[2] = x->stride[1];
    t.data = x->data;
    if (start) t.data = x->data + start * x->stride[1];
    return t;
}

/* The packed out / dq / dk / dv: rank 3 with the rows of its partner (the batch-1 call checks the
 * rest of the shape and the type). */
static attn_status check_rows_of(const char *fn, const char *name, const attn_tensor *t, int64_t total,
                                 const char *of) {
    attn_status st = check_packed(fn, name, t, 3);
    if (st) return st;
    if (t->shape[0] != total)
        return attn_error(ATTN_ERR_SHAPE, "%s: %s has %lld rows, %s has %lld", fn, name, (long long)t->shape[0], of,
                          (long long)total);
    return ATTN_OK;
}

static attn_status check_lse(const char *fn, const attn_tensor *lse, const attn_tensor *q) {
    attn_status st = check_packed(fn, "lse", lse, 2);
    if (st) return st;
    if (lse->shape[0] != q->shape[1] || lse->shape[1] != q->shape[0])
        return attn_error(ATTN_ERR_SHAPE, "%s: lse has shape [%lld, %lld], expected [Hq, total_q] = [%lld, %lld]", fn,
                          (long long)lse->shape[0], (long long)lse->shape[1], (long long)q->shape[1],
                          (long long)q->shape[0]);
    return ATTN_OK;
}

/* A batch-1 call's error, restated with the sequence it was about. */
static attn_status seq_error(const char *fn, attn_status st, int64_t s, const int64_t *cu_q, const int64_t *cu_k) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", attn_last_error());
    return attn_error(st, "%s: sequence %lld (q rows [%lld, %lld), k rows [%lld, %lld)): %s", fn, (long long)s,
                      (long long)cu_q[s], (long long)cu_q[s + 1], (long long)cu_k[s], (long long)cu_k[s + 1], msg);
}

/* Sequence s's Philox offset (see attention.h). */
static attn_sdpa_params seq_params(const attn_sdpa_params *params, int64_t s) {
    attn_sdpa_params p = *params;
    p.dropout_offset += (uint64_t)s;
    return p;
}

size_t attn_flash_varlen_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                        const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k, int64_t batch) {
    static const char *fn = "attn_flash_varlen_workspace_size";
    if (check_common(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, batch, NULL)) return 0;
    size_t need = 0;
    for (int64_t s = 0; s < batch; s++) {
        const int64_t nq = cu_seqlens_q[s + 1] - cu_seqlens_q[s], nk = cu_seqlens_k[s + 1] - cu_seqlens_k[s];
        const attn_tensor qs = seq_view(q, cu_seqlens_q[s], nq), ks = seq_view(k, cu_seqlens_k[s], nk),
                          vs = seq_view(v, cu_seqlens_k[s], nk);
        const size_t n = attn_flash_workspace_size(&qs, &ks, &vs);
        if (n == SIZE_MAX) return SIZE_MAX;
        if (n > need) need = n;
    }
    return need;
}

attn_status attn_flash_varlen_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                      const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k, int64_t batch,
                                      const attn_sdpa_params *params, attn_tensor *out, attn_tensor *lse,
                                      void *workspace, size_t workspace_bytes) {
    static const char *fn = "attn_flash_varlen_forward";
    attn_status st;
    const int64_t *cq = cu_seqlens_q, *ck = cu_seqlens_k;
    if ((st = check_common(fn, q, k, v, cq, ck, batch, params)) ||
        (st = check_rows_of(fn, "out", out, q->shape[0], "q")) || (lse && (st = check_lse(fn, lse, q))))
        return st;
    for (int64_t s = 0; s < batch; s++) {
        const int64_t nq = cq[s + 1] - cq[s], nk = ck[s + 1] - ck[s];
        const attn_tensor qs = seq_view(q, cq[s], nq), ks = seq_view(k, ck[s], nk), vs = seq_view(v, ck[s], nk);
        attn_tensor os = seq_view(out, cq[s], nq), ls;
        if (lse) ls = lse_view(lse, cq[s], nq);
        const attn_sdpa_params ps = seq_params(params, s);
        if ((st = attn_flash_forward(&qs, &ks, &vs, &ps, &os, lse ? &ls : NULL, workspace, workspace_bytes)))
            return seq_error(fn, st, s, cq, ck);
    }
    return ATTN_OK;
}

attn_status attn_flash_varlen_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                       const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k, int64_t batch,
                                       const attn_sdpa_params *params, const attn_tensor *out, const attn_tensor *dout,
                                       const attn_tensor *lse, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                       void *workspace, size_t workspace_bytes) {
    static const char *fn = "attn_flash_varlen_backward";
    attn_status st;
    const int64_t *cq = cu_seqlens_q, *ck = cu_seqlens_k;
    if ((st = check_common(fn, q, k, v, cq, ck, batch, params))) return st;
    if (!out || !dout || !lse || !dk || !dv)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: out, dout, lse, dk and dv are required (out %p, dout %p, lse %p, dk %p, dv %p)", fn,
                          (const void *)out, (const void *)dout, (const void *)lse, (const void *)dk, (const void *)dv);
    if ((st = check_rows_of(fn, "out", out, q->shape[0], "q")) ||
        (st = check_rows_of(fn, "dout", dout, q->shape[0], "q")) || (st = check_lse(fn, lse, q)) ||
        (dq && (st = check_rows_of(fn, "dq", dq, q->shape[0], "q"))) ||
        (st = check_rows_of(fn, "dk", dk, k->shape[0], "k")) || (st = check_rows_of(fn, "dv", dv, k->shape[0], "k")))
        return st;
    for (int64_t s = 0; s < batch; s++) {
        const int64_t nq = cq[s + 1] - cq[s], nk = ck[s + 1] - ck[s];
        const attn_tensor qs = seq_view(q, cq[s], nq), ks = seq_view(k, ck[s], nk), vs = seq_view(v, ck[s], nk);
        const attn_tensor os = seq_view(out, cq[s], nq), gs = seq_view(dout, cq[s], nq), ls = lse_view(lse, cq[s], nq);
        attn_tensor dqs, dks = seq_view(dk, ck[s], nk), dvs = seq_view(dv, ck[s], nk);
        if (dq) dqs = seq_view(dq, cq[s], nq);
        const attn_sdpa_params ps = seq_params(params, s);
        if ((st = attn_flash_backward(&qs, &ks, &vs, &ps, &os, &gs, &ls, dq ? &dqs : NULL, &dks, &dvs, workspace,
                                      workspace_bytes)))
            return seq_error(fn, st, s, cq, ck);
    }
    return ATTN_OK;
}
