#include <stdio.h>
#include <string.h>

#include "attention_common.h"
#include "core/internal.h"

static attn_status check_view_typed(const char *fn, const char *name, const attn_tensor *t, int rank, unsigned types) {
    char s[96];
    attn_status st;
    if (!t) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    if ((st = attn_tensor_check_type(fn, name, t, types))) return st;
    if (t->rank != rank)
        return attn_error(ATTN_ERR_SHAPE, "%s: %s must have rank %d, got rank %d %s", fn, name, rank, t->rank,
                          attn_shape_str(t->shape, t->rank < 0 || t->rank > 4 ? 0 : t->rank, s, sizeof s));
    size_t n;
    st = attn_tensor_numel(t, &n);
    if (st) return attn_error(st, "%s: %s has invalid shape %s", fn, name, attn_shape_str(t->shape, rank, s, sizeof s));
    if (n > 0 && !t->data) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s->data is NULL", fn, name);
    return ATTN_OK;
}

static attn_status check_view(const char *fn, const char *name, const attn_tensor *t, int rank) {
    return check_view_typed(fn, name, t, rank, ATTN_TYPES(ATTN_TYPE_F32));
}

static attn_status shape_eq(const char *fn, const char *name, const attn_tensor *t, const int64_t *want, int rank) {
    char a[96], b[96];
    for (int i = 0; i < rank; i++)
        if (t->shape[i] != want[i])
            return attn_error(ATTN_ERR_SHAPE, "%s: %s has shape %s, expected %s", fn, name,
                              attn_shape_str(t->shape, rank, a, sizeof a), attn_shape_str(want, rank, b, sizeof b));
    return ATTN_OK;
}

/* Effective strides of a mask broadcast (right-aligned) to `target` [B, Hq, Nq, Nk]. */
static attn_status broadcast(const char *fn, const char *name, int rank, const int64_t *shape, const int64_t *stride,
                             const int64_t *target, int64_t *es) {
    char a[96], b[96];
    if (rank < 0 || rank > 4) return attn_error(ATTN_ERR_SHAPE, "%s: %s has rank %d, expected 0..4", fn, name, rank);
    for (int t = 0; t < 4; t++) {
        const int src = t - (4 - rank);
        es[t] = 0;
        if (src < 0) continue;
        if (shape[src] == target[t])
            es[t] = target[t] == 1 ? 0 : stride[src];
        else if (shape[src] != 1)
            return attn_error(ATTN_ERR_SHAPE, "%s: %s of shape %s does not broadcast to %s", fn, name,
                              attn_shape_str(shape, rank, a, sizeof a), attn_shape_str(target, 4, b, sizeof b));
    }
    return ATTN_OK;
}

attn_status attn_ctx_init(attn_ctx *c, const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                          const attn_sdpa_params *params, const attn_tensor *out, const char *out_name) {
    return attn_ctx_init_typed(c, fn, q, k, v, params, out, out_name, ATTN_TYPES(ATTN_TYPE_F32),
                               ATTN_TYPES(ATTN_TYPE_F32));
}

attn_status attn_ctx_init_typed(attn_ctx *c, const char *fn, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_sdpa_params *params, const attn_tensor *out,
                                const char *out_name, unsigned in_types, unsigned out_types) {
    attn_status st;
    char a[96], b[96];
    if ((st = check_view_typed(fn, "q", q, 4, in_types)) || (st = check_view_typed(fn, "k", k, 4, in_types)) ||
        (st = check_view_typed(fn, "v", v, 4, in_types)) || (st = check_view_typed(fn, out_name, out, 4, out_types)))
        return st;
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: q, k and v must share one type (got %s, %s, %s)", fn,
                          attn_type_name(q->dtype), attn_type_name(k->dtype), attn_type_name(v->dtype));
    if (!params) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    memset(c, 0, sizeof *c);
    c->b = q->shape[0];
    c->hq = q->shape[1];
    c->nq = q->shape[2];
    c->d = q->shape[3];
    c->hk = k->shape[1];
    c->nk = k->shape[2];
    c->dv = v->shape[3];
    if (k->shape[0] != c->b || k->shape[3] != c->d)
        return attn_error(ATTN_ERR_SHAPE, "%s: k has shape %s, incompatible with q %s (need [B, Hk, Nk, d])", fn,
                          attn_shape_str(k->shape, 4, a, sizeof a), attn_shape_str(q->shape, 4, b, sizeof b));
    if (v->shape[0] != c->b || v->shape[1] != c->hk || v->shape[2] != c->nk)
        return attn_error(ATTN_ERR_SHAPE, "%s: v has shape %s, incompatible with k %s (need [B, Hk, Nk, dv])", fn,
                          attn_shape_str(v->shape, 4, a, sizeof a), attn_shape_str(k->shape, 4, b, sizeof b));
    if (c->d < 1 || c->dv < 1)
        return attn_error(ATTN_ERR_SHAPE, "%s: head dimensions must be >= 1 (d = %lld, dv = %lld)", fn, (long long)c->d,
                          (long long)c->dv);
    if (c->hk < 1 || c->hq % c->hk != 0)
        return attn_error(ATTN_ERR_SHAPE, "%s: query heads (%lld) must be a multiple of key/value heads (%lld)", fn,
                          (long long)c->hq, (long long)c->hk);
    c->group = c->hq / c->hk;
    const int64_t want_out[4] = {c->b, c->hq, c->nq, c->dv};
    if ((st = shape_eq(fn, out_name, out, want_out, 4))) return st;

    if (!(params->scale == params->scale) || isinf(params->scale))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: scale must be finite", fn);
    c->scale = params->scale != 0 ? params->scale : 1.0 / sqrt((double)c->d);
    if ((int)params->causal < 0 || params->causal > ATTN_CAUSAL_BOTTOM_RIGHT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: causal = %d is not an attn_causal value", fn,
                          (int)params->causal);
    c->causal = params->causal;
    c->off = c->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? c->nk - c->nq : 0;
    c->wl = params->window_left;
    c->wr = params->window_right;
    if (!(params->softcap >= 0) || isinf(params->softcap))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: softcap must be finite and >= 0 (got %g)", fn,
                          (double)params->softcap);
    c->softcap = params->softcap;
    c->alibi = params->alibi_slopes;
    if (!(params->dropout_p >= 0 && params->dropout_p <= 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: dropout_p must be in [0, 1] (got %g)", fn,
                          (double)params->dropout_p);
    c->p = params->dropout_p;
    c->keep_scale = c->p < 1 ? 1.0 / (1.0 - (double)c->p) : 0.0;
    c->seed = params->dropout_seed;
    c->offset = params->dropout_offset;

    const int64_t target[4] = {c->b, c->hq, c->nq, c->nk};
    if (params->bool_mask) {
        const attn_btensor *m = params->bool_mask;
        if ((st = broadcast(fn, "bool_mask", m->rank, m->shape, m->stride, target, c->bms))) return st;
        if (!m->data) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: bool_mask->data is NULL", fn);
        c->bm = m->data;
    }
    if (params->add_mask) {
        const attn_tensor *m = params->add_mask;
        if ((st = attn_tensor_check_type(fn, "add_mask", m, ATTN_TYPES(ATTN_TYPE_F32)))) return st;
        if ((st = broadcast(fn, "add_mask", m->rank, m->shape, m->stride, target, c->ams))) return st;
        if (!m->data) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: add_mask->data is NULL", fn);
        c->am = m->data;
    }
    if (params->key_mask) {
        const attn_btensor *m = params->key_mask;
        const int64_t kt[4] = {1, 1, c->b, c->nk};
        int64_t es[4];
        if (m->rank != 2)
            return attn_error(ATTN_ERR_SHAPE, "%s: key_mask must be [B, Nk] = [%lld, %lld], got rank %d", fn,
                              (long long)c->b, (long long)c->nk, m->rank);
        if ((st = broadcast(fn, "key_mask", m->rank, m->shape, m->stride, kt, es))) return st;
        if (!m->data) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key_mask->data is NULL", fn);
        c->km = m->data;
        c->kms[0] = es[2];
        c->kms[1] = es[3];
    }
    return ATTN_OK;
}

attn_status attn_ctx_check_rows(const attn_ctx *c, const char *fn, const attn_tensor *t, const char *name,
                                int with_nk) {
    if (!t) return ATTN_OK;
    attn_status st = check_view(fn, name, t, with_nk ? 4 : 3);
    if (st) return st;
    const int64_t want[4] = {c->b, c->hq, c->nq, c->nk};
    return shape_eq(fn, name, t, want, with_nk ? 4 : 3);
}

attn_status attn_ctx_check_like(const char *fn, const attn_tensor *t, const char *name, const attn_tensor *ref) {
    return attn_ctx_check_like_typed(fn, t, name, ref, ATTN_TYPES(ATTN_TYPE_F32));
}

attn_status attn_ctx_check_like_typed(const char *fn, const attn_tensor *t, const char *name, const attn_tensor *ref,
                                      unsigned types) {
    if (!t) return ATTN_OK;
    attn_status st = check_view_typed(fn, name, t, 4, types);
    if (st) return st;
    return shape_eq(fn, name, t, ref->shape, 4);
}

attn_status attn_ctx_workspace(const char *fn, void *ws, size_t bytes, size_t need, void **aligned) {
    if (need == SIZE_MAX) return attn_error(ATTN_ERR_OVERFLOW, "%s: workspace size overflows for these shapes", fn);
    if (bytes < need || (need > 0 && !ws))
        return attn_error(ATTN_ERR_WORKSPACE,
                          "%s: workspace of %zu bytes at %p, need %zu (see the *_workspace_size query; "
                          "it depends on the thread count)",
                          fn, bytes, ws, need);
    uintptr_t p = (uintptr_t)ws;
    *aligned = (void *)((p + 63) & ~(uintptr_t)63);
    return ATTN_OK;
}
