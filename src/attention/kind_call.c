/* Calling an attention kind directly (attn/attention.h): the row of the kind table, after the
 * checks attn_mha makes before it calls one. */
#include "attention/attention_kind.h"
#include "core/internal.h"

int64_t attn_attention_kind_stats_per_row(attn_attention_kind kind) {
    const attn_kind_ops *k = attn_kind_ops_get(kind);
    return k ? k->stats_per_row : 0;
}

/* ATTN_OK with the kind's row in *ops when the arguments are usable, else the error. */
static attn_status checked(const char *fn, const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, const attn_btensor *global_mask, const attn_kind_ops **ops,
                           attn_kind_extra *x) {
    ATTN_CHECK_NOT_NULL(fn, cfg);
    ATTN_CHECK_NOT_NULL(fn, q);
    ATTN_CHECK_NOT_NULL(fn, k);
    ATTN_CHECK_NOT_NULL(fn, v);
    if (!(*ops = attn_kind_ops_get(cfg->kind)))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: unknown attention kind %d (0 .. %d)", fn, (int)cfg->kind,
                          attn_attention_kind_count() - 1);
    attn_status st = (*ops)->check ? (*ops)->check(fn, cfg) : ATTN_OK;
    if (st) return st;
    if (global_mask && !(*ops)->takes_global_mask)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: the %s kind takes no global_mask (local_global does)", fn,
                          (*ops)->name);
    x->global_mask = global_mask;
    return ATTN_OK;
}

size_t attn_attention_workspace_size(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_params *params,
                                     const attn_btensor *global_mask) {
    attn_kind_extra x = {0};
    const attn_kind_ops *ops = NULL;
    if (checked("attn_attention_workspace_size", cfg, q, k, v, global_mask, &ops, &x)) return 0;
    const attn_sdpa_params p = params ? *params : attn_sdpa_params_default();
    return ops->workspace_size(cfg, q, k, v, &p, &x);
}

attn_status attn_attention_forward(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const attn_sdpa_params *params,
                                   const attn_btensor *global_mask, attn_tensor *out, float *stats, void *workspace,
                                   size_t workspace_bytes) {
    static const char fn[] = "attn_attention_forward";
    attn_kind_extra x = {0};
    const attn_kind_ops *ops = NULL;
    const attn_status st = checked(fn, cfg, q, k, v, global_mask, &ops, &x);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, out);
    if (workspace_bytes) ATTN_CHECK_NOT_NULL(fn, workspace);
    const attn_sdpa_params p = params ? *params : attn_sdpa_params_default();
    return ops->forward(cfg, q, k, v, &p, &x, out, stats, workspace, workspace_bytes);
}

attn_status attn_attention_backward(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                                    const attn_tensor *v, const attn_sdpa_params *params,
                                    const attn_btensor *global_mask, const attn_tensor *out, const attn_tensor *dout,
                                    const float *stats, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                    void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_attention_backward";
    attn_kind_extra x = {0};
    const attn_kind_ops *ops = NULL;
    const attn_status st = checked(fn, cfg, q, k, v, global_mask, &ops, &x);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, out);
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, dq);
    ATTN_CHECK_NOT_NULL(fn, dk);
    ATTN_CHECK_NOT_NULL(fn, dv);
    if (workspace_bytes) ATTN_CHECK_NOT_NULL(fn, workspace);
    if (ops->stats_per_row) ATTN_CHECK_NOT_NULL(fn, stats);
    const attn_sdpa_params p = params ? *params : attn_sdpa_params_default();
    return ops->backward(cfg, q, k, v, &p, &x, out, dout, stats, dq, dk, dv, workspace, workspace_bytes);
}
