/* Variable-length (packed) flash attention: FlashAttention's varlen API over attn_flash_*.
 *
 * Sequence s of the packed batch is the batch-1 problem on views of the packed tensors:
 *   Q_s = q[cu_q[s] .. cu_q[s + 1]) as [1, Hq, Nq_s, d] (the packed row stride becomes the
 *   sequence stride, the head stride stays), K_s, V_s likewise from cu_k, O_s from out, and
 *   lse_s [1, Hq, Nq_s] from lse [Hq, total_q].
 * Forward: every sequence's (head, query block) tasks go into one parallel loop
 * (attn_flash_forward_seqs), longest sequences first, each task run by the block function
 * attn_flash_forward's own loop runs; a one-token sequence that attn_flash_forward would send
 * down its decode path goes there, through attn_flash_forward itself. Backward: sequence by
 * sequence through attn_flash_backward, whose (key/value head, key run) tasks and ordered dQ
 * reduction keep every thread busy even on one head. Either way each sequence's results are its
 * batch-1 run's bit for bit by construction, and no tile of padding is formed. */
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "attention_common.h"
#include "core/internal.h"
#include "flash_internal.h"

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
                                const int64_t *cu_q, const int64_t *cu_k, int64_t batch, const attn_sdpa_params *params,
                                int params_too) {
    attn_status st;
    if ((st = check_packed(fn, "q", q, 3)) || (st = check_packed(fn, "k", k, 3)) || (st = check_packed(fn, "v", v, 3)))
        return st;
    if (batch < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch = %lld, need at least one sequence", fn,
                          (long long)batch);
    if (q->shape[1] < 1 || k->shape[1] < 1 || q->shape[2] < 1 || v->shape[2] < 1)
        return attn_error(ATTN_ERR_SHAPE,
                          "%s: heads and head dimensions must be >= 1 (q [%lld, %lld, %lld], v [%lld, %lld, %lld])", fn,
                          (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2],
                          (long long)v->shape[0], (long long)v->shape[1], (long long)v->shape[2]);
    if (v->shape[0] != k->shape[0])
        return attn_error(ATTN_ERR_SHAPE, "%s: v has %lld rows, k has %lld (both total_k)", fn, (long long)v->shape[0],
                          (long long)k->shape[0]);
    if ((st = check_cu(fn, "cu_seqlens_q", cu_q, batch, q->shape[0], "q")) ||
        (st = check_cu(fn, "cu_seqlens_k", cu_k, batch, k->shape[0], "k")))
        return st;
    return params_too ? check_params(fn, params) : ATTN_OK;
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

/* The largest workspace any one sequence's batch-1 call needs (what the backward and the
 * forward's decode sequences are given; it holds the forward loop's per-thread buffers too). */
static size_t per_seq_need(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, const int64_t *cu_q,
                           const int64_t *cu_k, int64_t batch) {
    size_t need = 0;
    for (int64_t s = 0; s < batch; s++) {
        const int64_t nq = cu_q[s + 1] - cu_q[s], nk = cu_k[s + 1] - cu_k[s];
        const attn_tensor qs = seq_view(q, cu_q[s], nq), ks = seq_view(k, cu_k[s], nk), vs = seq_view(v, cu_k[s], nk);
        const size_t n = attn_flash_workspace_size(&qs, &ks, &vs);
        if (n == SIZE_MAX) return SIZE_MAX;
        if (n > need) need = n;
    }
    return need;
}

/* Bytes: the per-sequence need, then (64-byte aligned) the forward's table of sequences. */
static size_t varlen_need(size_t per_seq, int64_t batch) {
    size_t table, total;
    if (per_seq == SIZE_MAX || attn_mul_overflow((size_t)batch, sizeof(attn_flash_seq), &table) ||
        attn_add_overflow(per_seq, table, &total) || attn_add_overflow(total, 128, &total))
        return SIZE_MAX;
    return total;
}

size_t attn_flash_varlen_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                        const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k, int64_t batch) {
    static const char *fn = "attn_flash_varlen_workspace_size";
    if (check_common(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, batch, NULL, 0)) return 0;
    return varlen_need(per_seq_need(q, k, v, cu_seqlens_q, cu_seqlens_k, batch), batch);
}

/* Longest first (work Nq Nk), so the short sequences' tasks even out the threads' finish. */
static int by_work(const void *a_, const void *b_) {
    const attn_flash_seq *a = a_, *b = b_;
    const double wa = (double)a->c.nq * (double)(a->c.nk + 1), wb = (double)b->c.nq * (double)(b->c.nk + 1);
    return wa < wb ? 1 : wa > wb ? -1 : 0;
}

/* Sequence s's checked problem into *e (the checks of attn_flash_forward). */
static attn_status seq_problem(const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const int64_t *cq, const int64_t *ck, int64_t s, const attn_sdpa_params *ps,
                               attn_tensor *out, attn_tensor *lse, attn_flash_seq *e) {
    const int64_t nq = cq[s + 1] - cq[s], nk = ck[s + 1] - ck[s];
    const unsigned in_types = ATTN_TYPES(ATTN_TYPE_F32) | ATTN_TYPES(ATTN_TYPE_BF16);
    const unsigned out_types = q->dtype == ATTN_TYPE_BF16 ? in_types : ATTN_TYPES(ATTN_TYPE_F32);
    attn_status st;
    e->q = seq_view(q, cq[s], nq);
    e->k = seq_view(k, ck[s], nk);
    e->v = seq_view(v, ck[s], nk);
    e->out = seq_view(out, cq[s], nq);
    e->has_lse = lse != NULL;
    if (lse) e->lse = lse_view(lse, cq[s], nq);
    if ((st = attn_ctx_init_typed(&e->c, fn, &e->q, &e->k, &e->v, ps, &e->out, "out", in_types, out_types)) ||
        (st = attn_ctx_check_rows(&e->c, fn, lse ? &e->lse : NULL, "lse", 0)))
        return seq_error(fn, st, s, cq, ck);
    return ATTN_OK;
}

attn_status attn_flash_varlen_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                      const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k, int64_t batch,
                                      const attn_sdpa_params *params, attn_tensor *out, attn_tensor *lse,
                                      void *workspace, size_t workspace_bytes) {
    static const char *fn = "attn_flash_varlen_forward";
    attn_status st;
    const int64_t *cq = cu_seqlens_q, *ck = cu_seqlens_k;
    if ((st = check_common(fn, q, k, v, cq, ck, batch, params, 1)) ||
        (st = check_rows_of(fn, "out", out, q->shape[0], "q")) || (lse && (st = check_lse(fn, lse, q))))
        return st;
    const size_t per_seq = per_seq_need(q, k, v, cq, ck, batch);
    void *aligned;
    if ((st = attn_ctx_workspace(fn, workspace, workspace_bytes, varlen_need(per_seq, batch), &aligned))) return st;
    /* the table after the per-sequence part, which the decode sequences' calls may use */
    attn_flash_seq *table = (attn_flash_seq *)(void *)(((uintptr_t)aligned + per_seq + 63) & ~(uintptr_t)63);
    int64_t n = 0, tasks = 0, ndecode = 0;
    for (int64_t s = 0; s < batch; s++) {
        const attn_sdpa_params ps = seq_params(params, s);
        if ((st = seq_problem(fn, q, k, v, cq, ck, s, &ps, out, lse, &table[n]))) return st;
        if (table[n].c.nq == 0) continue;
        if (attn_flash_takes_decode(&table[n].c, &table[n].k, &table[n].v)) {
            ndecode++;
            continue;
        }
        n++;
    }
    qsort(table, (size_t)n, sizeof *table, by_work);
    for (int64_t i = 0; i < n; i++) {
        table[i].task0 = tasks;
        tasks += attn_flash_seq_tasks(&table[i].c);
    }
    attn_flash_forward_seqs(table, n, tasks, aligned);
    for (int64_t s = 0; s < batch && ndecode > 0; s++) {
        const attn_sdpa_params ps = seq_params(params, s);
        attn_flash_seq e;
        if ((st = seq_problem(fn, q, k, v, cq, ck, s, &ps, out, lse, &e))) return st;
        if (e.c.nq == 0 || !attn_flash_takes_decode(&e.c, &e.k, &e.v)) continue;
        if ((st = attn_flash_forward(&e.q, &e.k, &e.v, &ps, &e.out, lse ? &e.lse : NULL, workspace, workspace_bytes)))
            return seq_error(fn, st, s, cq, ck);
        ndecode--;
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
    if ((st = check_common(fn, q, k, v, cq, ck, batch, params, 1))) return st;
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
