/* The Performer kind (FAVOR+, Choromanski et al. 2021): softmax attention approximated with m
 * positive orthogonal random features, out_i = phi(q_i)^T S / phi(q_i)^T z (performer.c has the
 * math). Kinds are stateless rows, so the projection W [m, head_dim] is not stored: the forward,
 * the backward and every decoding step draw it into their workspace with
 * attn_orf_draw(W, m, head_dim, cfg->seed) (m = num_features, 256 when 0), the same W each time;
 * a redraw is a new seed. A caller that holds its own W (a PyTorch module's buffer) passes it as
 * cfg->projection [projection_heads (1 or the query heads), m, head_dim]: it is used as is and
 * nothing is drawn. Causality and a key mask only; no weights. Decoding is recurrent: the
 * cache holds S [m, dv], z [m], the running key maximum and a flag per (batch, head). */
#include <string.h>

#include "attention/attention_kind.h"
#include "attention/linear_internal.h"
#include "core/internal.h"

#define DEFAULT_FEATURES 256
#define MAX_FEATURES (1 << 16)

static int64_t features_of(const attn_attention_config *cfg) {
    return cfg->num_features ? cfg->num_features : DEFAULT_FEATURES;
}

static attn_status perf_check(const char *fn, const attn_attention_config *cfg) {
    if (cfg->num_features < 0 || cfg->num_features > MAX_FEATURES)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: attention 'performer' needs num_features in [0, %d] (0 = %d; got %lld)", fn,
                          MAX_FEATURES, DEFAULT_FEATURES, (long long)cfg->num_features);
    if (cfg->projection && cfg->projection_heads < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: attention 'performer': projection given with projection_heads = %lld (want 1 or the "
                          "number of query heads)",
                          fn, (long long)cfg->projection_heads);
    if (!cfg->projection && cfg->projection_heads)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: attention 'performer': projection_heads = %lld without a projection (NULL: drawn "
                          "from seed; projection_heads must then be 0)",
                          fn, (long long)cfg->projection_heads);
    return ATTN_OK;
}

/* The explicit projection's heads against the call's query heads. */
static attn_status check_heads(const attn_attention_config *cfg, int64_t heads, int64_t d) {
    if (cfg->projection_heads == 1 || cfg->projection_heads == heads) return ATTN_OK;
    return attn_error(ATTN_ERR_SHAPE,
                      "attention 'performer': the projection has %lld heads ([%lld, %lld, %lld]); want 1 or the %lld "
                      "query heads",
                      (long long)cfg->projection_heads, (long long)cfg->projection_heads, (long long)features_of(cfg),
                      (long long)d, (long long)heads);
}

/* A drawn W [1, m, d] at the start of the workspace; the rest is the op's. An explicit projection
 * takes no workspace. */
static size_t w_bytes(const attn_attention_config *cfg, int64_t m, int64_t d) {
    return cfg->projection ? 0 : ((size_t)(m * d) * sizeof(float) + 63) / 64 * 64 + 64;
}

/* The projection's view: the explicit one (data ignored) or a drawn one at data. */
static attn_tensor w_view(const attn_attention_config *cfg, float *data, int64_t m, int64_t d) {
    if (cfg->projection) return attn_tensor_3d((float *)(uintptr_t)cfg->projection, cfg->projection_heads, m, d);
    return attn_tensor_3d(data, 1, m, d);
}

/* W for a call with `heads` query heads of head_dim d: the explicit projection (its heads
 * checked), else drawn into the front of the workspace. */
static attn_status take_w(const attn_attention_config *cfg, int64_t heads, int64_t d, void **ws, size_t *ws_bytes,
                          attn_tensor *w) {
    const int64_t m = features_of(cfg);
    attn_status st = perf_check("attention 'performer'", cfg);
    if (st) return st;
    if (cfg->projection) {
        if ((st = check_heads(cfg, heads, d))) return st;
        *w = w_view(cfg, NULL, m, d);
        return ATTN_OK;
    }
    const size_t need = w_bytes(cfg, m, d);
    if (!*ws || *ws_bytes < need)
        return attn_error(ATTN_ERR_WORKSPACE,
                          "attention 'performer': workspace of %zu bytes, the projection alone needs %zu", *ws_bytes,
                          need);
    float *base = (float *)(((uintptr_t)*ws + 63) & ~(uintptr_t)63);
    *w = w_view(cfg, base, m, d);
    *ws = (unsigned char *)*ws + need;
    *ws_bytes -= need;
    return attn_orf_draw(base, m, d, cfg->seed);
}

static size_t perf_ws(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                      const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x) {
    (void)p, (void)x;
    if (!q || q->rank != 4) return 0;
    const int64_t m = features_of(cfg), d = q->shape[3];
    const attn_tensor w = w_view(cfg, NULL, m, d);
    const size_t s = attn_performer_workspace_size(q, k, v, &w);
    return s ? s + w_bytes(cfg, m, d) : 0;
}

static attn_status perf_fwd(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                            const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x, attn_tensor *out,
                            float *stats, void *ws, size_t ws_bytes) {
    (void)x, (void)stats;
    attn_tensor w;
    attn_status st = attn_lin_kind_params("performer", p);
    if (st || (st = take_w(cfg, q->shape[1], q->shape[3], &ws, &ws_bytes, &w))) return st;
    return attn_performer_forward(q, k, v, &w, p->causal, p->key_mask, out, ws, ws_bytes);
}

static attn_status perf_bwd(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                            const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x,
                            const attn_tensor *out, const attn_tensor *dout, const float *stats, attn_tensor *dq,
                            attn_tensor *dk, attn_tensor *dv, void *ws, size_t ws_bytes) {
    (void)x, (void)out, (void)stats;
    attn_tensor w;
    attn_status st = attn_lin_kind_params("performer", p);
    if (st || (st = take_w(cfg, q->shape[1], q->shape[3], &ws, &ws_bytes, &w))) return st;
    return attn_performer_backward(q, k, v, &w, p->causal, p->key_mask, dout, dq, dk, dv, ws, ws_bytes);
}

static size_t perf_state(const attn_attention_config *cfg, int64_t batch, int64_t heads, int64_t d, int64_t dv) {
    (void)d;
    return (size_t)(batch * heads) * attn_performer_state_floats(features_of(cfg), dv);
}

static size_t perf_step_ws(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v) {
    const attn_tensor *r = q ? q : k;
    if (!r || r->rank != 4) return 0;
    const int64_t m = features_of(cfg), d = r->shape[3];
    const attn_tensor w = w_view(cfg, NULL, m, d);
    const size_t s = attn_performer_step_workspace_size(q, k, v, &w);
    return s ? s + w_bytes(cfg, m, d) : 0;
}

static attn_status perf_step(const attn_kind_step *s, void *ws, size_t ws_bytes) {
    attn_btensor view;
    const attn_btensor *km;
    attn_tensor w;
    const attn_tensor *r = s->q ? s->q : s->k;
    attn_status st = attn_lin_step_mask("performer", s, &view, &km);
    if (st) return st;
    if (!r) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attention 'performer' step: no queries and no keys");
    if ((st = take_w(s->cfg, r->shape[1], r->shape[3], &ws, &ws_bytes, &w))) return st;
    return attn_performer_step(s->q, s->k, s->v, &w, s->causal, km, s->state, s->out, ws, ws_bytes);
}

const attn_kind_ops attn_kind_performer = {
    .name = "performer",
    .options = "num_features,seed",
    .help = "Performer FAVOR+: softmax via m orthogonal random features (num_features, seed), O(N m)",
    .check = perf_check,
    .takes_global_mask = 0,
    .supports_bf16 = 0,
    .takes_bias_kv = 0,
    .random_features = 1,
    .stats_per_row = 0,
    .workspace_size = perf_ws,
    .forward = perf_fwd,
    .backward = perf_bwd,
    .weights = NULL,
    .state_floats = perf_state,
    .step_workspace_size = perf_step_ws,
    .step = perf_step,
};
