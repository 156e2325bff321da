/* The softmax attention kinds, on the flash kernel:
 *   flash:   O = softmax(scale Q K^T + masks) V, exactly (attn_flash_*)
 *   window:  the same with key j allowed for query i only when |i + off - j| <= window (and the
 *            mask and causality the call brings), off the causal alignment's diagonal offset;
 *            the flash kernel never visits tiles outside the band, so the cost is O(N window).
 * Both decode over a key/value cache: a step is the flash forward of the new rows over the cached
 * keys with bottom-right causality (new row i sits at position L - n + i). */
#include "attention/attention_kind.h"
#include "core/internal.h"

/* The window kind's band, intersected with any window the call already asks for. */
static attn_sdpa_params with_window(const attn_attention_config *cfg, const attn_sdpa_params *p) {
    attn_sdpa_params w = *p;
    if (cfg && cfg->kind == ATTN_ATTENTION_WINDOW) {
        if (w.window_left < 0 || w.window_left > cfg->window) w.window_left = cfg->window;
        if (w.window_right < 0 || w.window_right > cfg->window) w.window_right = cfg->window;
    }
    return w;
}

static attn_status check_window(const char *fn, const attn_attention_config *cfg) {
    if (cfg->window < 0 || cfg->window > ((int64_t)1 << 40))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: attention 'window' needs window in [0, 2^40] (got %lld)", fn,
                          (long long)cfg->window);
    return ATTN_OK;
}

static size_t softmax_ws(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                         const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x) {
    (void)cfg, (void)p, (void)x;
    return attn_flash_workspace_size(q, k, v);
}

static attn_tensor lse_view(const attn_tensor *q, float *stats) {
    return attn_tensor_3d(stats, q->shape[0], q->shape[1], q->shape[2]);
}

static attn_status softmax_fwd(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x,
                               attn_tensor *out, float *stats, void *ws, size_t ws_bytes) {
    (void)x;
    const attn_sdpa_params w = with_window(cfg, p);
    attn_tensor lse = lse_view(q, stats);
    return attn_flash_forward(q, k, v, &w, out, stats ? &lse : NULL, ws, ws_bytes);
}

static attn_status softmax_bwd(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x,
                               const attn_tensor *out, const attn_tensor *dout, const float *stats, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv, void *ws, size_t ws_bytes) {
    (void)x;
    const attn_sdpa_params w = with_window(cfg, p);
    attn_tensor lse = lse_view(q, (float *)stats);
    return attn_flash_backward(q, k, v, &w, out, dout, &lse, dq, dk, dv, ws, ws_bytes);
}

static attn_status softmax_weights(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                                   const attn_sdpa_params *p, const attn_kind_extra *x, int64_t b, int64_t h,
                                   int64_t row0, int64_t rows, int apply_dropout, float *wts) {
    (void)x;
    const attn_sdpa_params w = with_window(cfg, p);
    return attn_flash_weights(q, k, &w, b, h, row0, rows, apply_dropout, wts);
}

static size_t softmax_step_ws(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v) {
    (void)cfg;
    return attn_flash_workspace_size(q, k, v);
}

static attn_status softmax_step(const attn_kind_step *s, void *ws, size_t ws_bytes) {
    attn_sdpa_params p = attn_sdpa_params_default();
    if (s->causal) p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    p.key_mask = s->key_mask;
    const attn_sdpa_params w = with_window(s->cfg, &p);
    return attn_flash_forward(s->q, s->k, s->v, &w, s->out, NULL, ws, ws_bytes);
}

/* The two rows differ only in name, help, option check and whether add_bias_kv / add_zero_attn
 * combine with them. */
#define SOFTMAX_KIND(nm, hlp, opts, chk, bias_kv)                                                                      \
    {                                                                                                                  \
        .name = nm, .help = hlp, .options = opts, .check = chk, .takes_global_mask = 0, .supports_bf16 = 1,            \
        .takes_bias_kv = bias_kv, .random_features = 0, .stats_per_row = 1, .workspace_size = softmax_ws,              \
        .forward = softmax_fwd, .backward = softmax_bwd, .weights = softmax_weights, .state_floats = NULL,             \
        .step_workspace_size = softmax_step_ws, .step = softmax_step                                                   \
    }

const attn_kind_ops attn_kind_flash =
    SOFTMAX_KIND("flash", "exact softmax attention, tiled (FlashAttention-2)", "", NULL, 1);

const attn_kind_ops attn_kind_window =
    SOFTMAX_KIND("window", "softmax over a sliding window of w keys each side, O(N w)", "window!", check_window, 0);
