/* The linear attention kind (Katharopoulos et al. 2020): out_i = phi(q_i)^T S / (phi(q_i)^T z + 1e-6),
 * phi = elu + 1, S and z summed over the keys query i sees (linear_attention.c has the math).
 * Causality and a key mask only; no weights (there is no softmax). Decoding is recurrent: the cache
 * holds S [d, dv] and z [d] per (batch, head), B * H * (d * dv + d) floats. */
#include "attention/attention_kind.h"
#include "attention/linear_internal.h"
#include "core/internal.h"

static size_t lin_ws(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                     const attn_sdpa_params *p, const attn_kind_extra *x) {
    (void)cfg, (void)p, (void)x;
    return attn_linear_attention_workspace_size(q, k, v);
}

static attn_status lin_fwd(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x, attn_tensor *out,
                           float *stats, void *ws, size_t ws_bytes) {
    (void)cfg, (void)x, (void)stats;
    attn_status st = attn_lin_kind_params("linear", p);
    if (st) return st;
    return attn_linear_attention_forward(q, k, v, p->causal, p->key_mask, out, ws, ws_bytes);
}

static attn_status lin_bwd(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x,
                           const attn_tensor *out, const attn_tensor *dout, const float *stats, attn_tensor *dq,
                           attn_tensor *dk, attn_tensor *dv, void *ws, size_t ws_bytes) {
    (void)cfg, (void)x, (void)out, (void)stats;
    attn_status st = attn_lin_kind_params("linear", p);
    if (st) return st;
    return attn_linear_attention_backward(q, k, v, p->causal, p->key_mask, dout, dq, dk, dv, ws, ws_bytes);
}

static size_t lin_state(const attn_attention_config *cfg, int64_t batch, int64_t heads, int64_t d, int64_t dv) {
    (void)cfg;
    return (size_t)(batch * heads) * attn_linear_attention_state_floats(d, dv);
}

static size_t lin_step_ws(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                          const attn_tensor *v) {
    (void)cfg;
    return attn_linear_attention_step_workspace_size(q, k, v);
}

static attn_status lin_step(const attn_kind_step *s, void *ws, size_t ws_bytes) {
    attn_btensor view;
    const attn_btensor *km;
    attn_status st = attn_lin_step_mask("linear", s, &view, &km);
    if (st) return st;
    return attn_linear_attention_step(s->q, s->k, s->v, s->causal, km, s->state, s->out, ws, ws_bytes);
}

const attn_kind_ops attn_kind_linear = {
    .name = "linear",
    .options = "",
    .help = "linear attention, phi = elu + 1 (Katharopoulos 2020), O(N), recurrent decoding",
    .check = NULL,
    .takes_global_mask = 0,
    .supports_bf16 = 0,
    .takes_bias_kv = 0,
    .random_features = 0,
    .stats_per_row = 0,
    .workspace_size = lin_ws,
    .forward = lin_fwd,
    .backward = lin_bwd,
    .weights = NULL,
    .state_floats = lin_state,
    .step_workspace_size = lin_step_ws,
    .step = lin_step,
};
