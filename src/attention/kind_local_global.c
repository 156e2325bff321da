/* The local_global kind: Longformer's local + global attention (attn/longformer.h).
 *   Without a global mask it is the window kind exactly (flash over the band |i - j| <= window,
 *   every option of the call honoured). With one (attn_kind_extra.global_mask, [B, N] self-attention)
 *   it is attn_longformer_*: global tokens see every key and are seen by every query, at
 *   O(N (window + g)); the call may then bring causality and the key mask, nothing else (an
 *   attn_mask, ALiBi, soft-capping or attention dropout are refused with ATTN_ERR_UNSUPPORTED).
 * Decoding keeps keys and values: a step is the window kind's step (flash of the new rows over the
 * cache, bottom-right causal, within the window). The step carries no global mask, so decoding
 * treats no token as global; a model that relies on global tokens must not be decoded step by step. */
#include "attention/attention_kind.h"
#include "attn/longformer.h"
#include "core/internal.h"

static const char kind_name[] = "local_global";

static attn_status check_lg(const char *fn, const attn_attention_config *cfg) {
    if (cfg->window < 0 || cfg->window > ((int64_t)1 << 40))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: attention '%s' needs window in [0, 2^40] (got %lld)", fn,
                          kind_name, (long long)cfg->window);
    return ATTN_OK;
}

/* The window kind's band, intersected with any window the call already asks for. */
static attn_sdpa_params with_window(const attn_attention_config *cfg, const attn_sdpa_params *p) {
    attn_sdpa_params w = *p;
    if (w.window_left < 0 || w.window_left > cfg->window) w.window_left = cfg->window;
    if (w.window_right < 0 || w.window_right > cfg->window) w.window_right = cfg->window;
    return w;
}

static int has_global(const attn_kind_extra *x) { return x && x->global_mask; }

/* The op's params from the call's, refusing what the global passes cannot honour. */
static attn_status lg_params(const attn_attention_config *cfg, const attn_sdpa_params *p, const attn_kind_extra *x,
                             attn_longformer_params *lp) {
    const char *what = p->bool_mask       ? "a boolean attn_mask"
                       : p->add_mask      ? "an additive mask (float attn_mask or key_padding_mask)"
                       : p->alibi_slopes  ? "ALiBi"
                       : p->softcap > 0   ? "logit soft-capping"
                       : p->dropout_p > 0 ? "attention dropout"
                       : p->window_left >= 0 || p->window_right >= 0 ? "a second window"
                                                                     : NULL;
    if (what)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "attention '%s' with global tokens takes causality and the key mask only, not %s", kind_name,
                          what);
    lp->window = cfg->window;
    lp->global_mask = x->global_mask;
    lp->causal = p->causal != ATTN_CAUSAL_NONE;
    lp->key_mask = p->key_mask;
    lp->scale = p->scale;
    return ATTN_OK;
}

static size_t lg_ws(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                    const attn_sdpa_params *p, const attn_kind_extra *x) {
    attn_longformer_params lp;
    if (!has_global(x)) return attn_flash_workspace_size(q, k, v);
    if (lg_params(cfg, p, x, &lp)) return 0; /* the call itself reports it */
    return attn_longformer_workspace_size(q, k, v, &lp);
}

static attn_tensor lse_view(const attn_tensor *q, float *stats) {
    return attn_tensor_3d(stats, q->shape[0], q->shape[1], q->shape[2]);
}

static attn_status lg_fwd(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                          const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x, attn_tensor *out,
                          float *stats, void *ws, size_t ws_bytes) {
    attn_tensor lse = lse_view(q, stats);
    if (!has_global(x)) {
        const attn_sdpa_params w = with_window(cfg, p);
        return attn_flash_forward(q, k, v, &w, out, stats ? &lse : NULL, ws, ws_bytes);
    }
    attn_longformer_params lp;
    attn_status st = lg_params(cfg, p, x, &lp);
    return st ? st : attn_longformer_forward(q, k, v, &lp, out, stats ? &lse : NULL, ws, ws_bytes);
}

static attn_status lg_bwd(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                          const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x,
                          const attn_tensor *out, const attn_tensor *dout, const float *stats, attn_tensor *dq,
                          attn_tensor *dk, attn_tensor *dv, void *ws, size_t ws_bytes) {
    attn_tensor lse = lse_view(q, (float *)stats);
    if (!has_global(x)) {
        const attn_sdpa_params w = with_window(cfg, p);
        return attn_flash_backward(q, k, v, &w, out, dout, &lse, dq, dk, dv, ws, ws_bytes);
    }
    attn_longformer_params lp;
    attn_status st = lg_params(cfg, p, x, &lp);
    return st ? st : attn_longformer_backward(q, k, v, &lp, out, dout, &lse, dq, dk, dv, ws, ws_bytes);
}

static attn_status lg_weights(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                              const attn_sdpa_params *p, const attn_kind_extra *x, int64_t b, int64_t h, int64_t row0,
                              int64_t rows, int apply_dropout, float *wts) {
    if (!has_global(x)) {
        const attn_sdpa_params w = with_window(cfg, p);
        return attn_flash_weights(q, k, &w, b, h, row0, rows, apply_dropout, wts);
    }
    attn_longformer_params lp;
    attn_status st = lg_params(cfg, p, x, &lp); /* refuses dropout, so apply_dropout has nothing to apply */
    return st ? st : attn_longformer_weights(q, k, &lp, b, h, row0, rows, wts);
}

static size_t lg_step_ws(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                         const attn_tensor *v) {
    (void)cfg;
    return attn_flash_workspace_size(q, k, v);
}

static attn_status lg_step(const attn_kind_step *s, void *ws, size_t ws_bytes) {
    attn_sdpa_params p = attn_sdpa_params_default();
    if (s->causal) p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    p.key_mask = s->key_mask;
    const attn_sdpa_params w = with_window(s->cfg, &p);
    return attn_flash_forward(s->q, s->k, s->v, &w, s->out, NULL, ws, ws_bytes);
}

const attn_kind_ops attn_kind_local_global = {
    .name = kind_name,
    .options = "window!",
    .help = "Longformer: sliding window of w keys each side plus global tokens (global_attention_mask), "
            "O(N (w + g))",
    .check = check_lg,
    .takes_global_mask = 1,
    .supports_bf16 = 0,
    .takes_bias_kv = 0,
    .random_features = 0,
    .stats_per_row = 1,
    .workspace_size = lg_ws,
    .forward = lg_fwd,
    .backward = lg_bwd,
    .weights = lg_weights,
    .state_floats = NULL,
    .step_workspace_size = lg_step_ws,
    .step = lg_step,
};
