/* Decoder-only (GPT-style) language model: embeddings, a stack of pre-norm causal blocks, final
 * norm, language-model head (optionally tied to the token embeddings).
 *
 *   x_0 = E[t] (+ P[p])                     E = tok_emb.weight, P = pos_emb.weight (learned)
 *   h = norm(blocks(x_0))                   blocks: TransformerEncoderLayer(norm_first), causal
 *   logits = h W^T                          W = lm_head.weight or E (tied)
 * Backward:
 *   dW += dlogits^T h,  dh = dlogits W,  dx_0 = blocks'^T norm'^T dh,
 *   dE[t] += dx_0 (token order),  dP[p] += sum_b dx_0 (learned positions)
 * With RoPE the blocks' self-attention rotates Q and K instead of adding P. A packed batch
 * (cu_seqlens) runs the same on its real rows only: positions restart at each sequence, the
 * blocks run packed (attn_layer_args' cu_seqlens), P's gradient is added sequence by sequence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nn_layer.h"

struct attn_gpt {
    attn_gpt_config cfg;
    attn_embedding *tok, *pos;
    nn_stack S;
    nn_store head; /* lm_head.weight when untied */
    float *w_lm, *g_lm;
    attn_params *list;
};

attn_gpt_config attn_gpt_config_default(int64_t vocab_size, int64_t max_positions, int64_t d_model, int64_t nhead,
                                        int64_t num_layers) {
    attn_gpt_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = vocab_size;
    c.max_positions = max_positions;
    c.layer = attn_layer_config_default(d_model, nhead);
    c.layer.activation = ATTN_ACTIVATION_GELU;
    c.layer.norm_first = 1;
    c.num_layers = num_layers;
    c.norm_eps = 1e-5f;
    c.positions = ATTN_POSITIONS_LEARNED;
    c.rope = attn_rope_config_default(nhead > 0 ? d_model / nhead : 0);
    return c;
}

void attn_gpt_free(attn_gpt *g) {
    if (!g) return;
    attn_embedding_free(g->tok);
    attn_embedding_free(g->pos);
    attn_nn_stack_destroy(&g->S);
    attn_nn_store_free(&g->head);
    attn_nn_params_free(g->list);
    attn__free(g);
}

attn_status attn_gpt_create(const attn_gpt_config *cfg, attn_gpt **out) {
    static const char fn[] = "attn_gpt_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, cfg);
    if (cfg->vocab_size < 1 || cfg->max_positions < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: vocab_size (%lld) and max_positions (%lld) must be >= 1", fn,
                          (long long)cfg->vocab_size, (long long)cfg->max_positions);
    if (cfg->positions != ATTN_POSITIONS_LEARNED && cfg->positions != ATTN_POSITIONS_ROPE)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: positions = %d is neither learned nor rope", fn,
                          (int)cfg->positions);
    if (!attn_precision_name(cfg->precision))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: precision = %d is neither fp32 nor bf16", fn,
                          (int)cfg->precision);
    attn_status st = attn_nn_layer_check_config(fn, &cfg->layer);
    if (st) return st;
    attn_gpt *g = attn__calloc(1, sizeof *g);
    if (!g) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    g->cfg = *cfg;
    g->cfg.layer.norm_first = 1;
    const int64_t d = cfg->layer.d_model;
    attn_stack_config sc;
    memset(&sc, 0, sizeof sc);
    sc.layer = g->cfg.layer;
    sc.num_layers = cfg->num_layers;
    sc.norm = 1;
    sc.norm_eps = cfg->norm_eps;
    attn_rope_config rope = cfg->rope;
    rope.head_dim = d / cfg->layer.nhead;
    g->cfg.rope = rope;
    const int use_rope = cfg->positions == ATTN_POSITIONS_ROPE;
    if ((st = attn_embedding_create(cfg->vocab_size, d, -1, &g->tok)) ||
        (!use_rope && (st = attn_embedding_create(cfg->max_positions, d, -1, &g->pos))) ||
        (st = attn_nn_stack_init(&g->S, fn, &sc, 0, use_rope ? &rope : NULL))) {
        attn_gpt_free(g);
        return attn_nn_wrap_error(st, fn);
    }
    g->list = attn_nn_params_new();
    if (!g->list) st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (!st) st = attn_nn_params_append(g->list, fn, attn_embedding_params(g->tok), "tok_emb.");
    if (!st && g->pos) st = attn_nn_params_append(g->list, fn, attn_embedding_params(g->pos), "pos_emb.");
    if (!st) st = attn_nn_params_append(g->list, fn, g->S.list, NULL);
    if (!st && !cfg->tie_embeddings) {
        nn_pdesc dh = {"lm_head.weight", 2, {cfg->vocab_size, d, 0, 0}, NN_INIT_UNIFORM, 1.0 / sqrt((double)d), 0};
        if (!(st = attn_nn_store_create(&g->head, fn, &dh, 1, &g->w_lm, &g->g_lm)))
            st = attn_nn_params_append(g->list, fn, g->head.list, NULL);
    }
    if (st) {
        attn_gpt_free(g);
        return st;
    }
    if (cfg->tie_embeddings) {
        const attn_param *e = attn_params_get(attn_embedding_params(g->tok), 0);
        g->w_lm = e->data;
        g->g_lm = e->grad;
    }
    *out = g;
    return ATTN_OK;
}

const attn_params *attn_gpt_params(const attn_gpt *g) { return g ? g->list : NULL; }

/* ---- forward / backward ---- */

static attn_layer_args layer_args(const attn_gpt_args *a, const float *x) {
    attn_layer_args la = attn_layer_args_default();
    la.batch = a->batch;
    la.n = a->n;
    la.x = x;
    la.self_masks.is_causal = 1;
    la.self_masks.key_padding_mask = a->key_padding_mask;
    NN_MODE_SET(&la, NN_MODE_OF(a));
    la.capture = a->capture;
    la.cu_seqlens = a->cu_seqlens;
    return la;
}

static int args_ok(const attn_gpt *g, const attn_gpt_args *a) {
    return g && a && a->batch > 0 && a->n > 0 && a->batch <= ((int64_t)1 << 30) && a->n <= ((int64_t)1 << 30);
}

/* Rows of x and logits: B n, or n (the total) for a packed batch. */
static int64_t rows_of(const attn_gpt_args *a) { return a->cu_seqlens ? a->n : a->batch * a->n; }

static size_t rows_bytes(const attn_gpt *g, const attn_gpt_args *a) {
    return nn_fblock(nn_mul((size_t)rows_of(a), (size_t)g->cfg.layer.d_model));
}

size_t attn_gpt_saved_size(const attn_gpt *g, const attn_gpt_args *a) {
    if (!args_ok(g, a)) return 0;
    attn_layer_args la = layer_args(a, NULL);
    return nn_add(nn_add(NN_SLACK, nn_mul(2, rows_bytes(g, a))), nn_block(attn_nn_stack_saved(&g->S, &la)));
}

/* The size in the model's precision: bf16 products need room for their rounded operands. */
static size_t workspace_size(const attn_gpt *g, const attn_gpt_args *a) {
    if (!args_ok(g, a)) return 0;
    attn_layer_args la = layer_args(a, NULL);
    const size_t lin = attn_nn_linear_ws(rows_of(a), g->cfg.layer.d_model, g->cfg.vocab_size);
    return nn_add(nn_add(NN_SLACK, nn_mul(2, rows_bytes(g, a))), nn_max(attn_nn_stack_ws(&g->S, &la), lin));
}

size_t attn_gpt_workspace_size(const attn_gpt *g, const attn_gpt_args *a) {
    if (!args_ok(g, a)) return 0;
    const attn_precision prev = attn_nn_precision_set(g->cfg.precision);
    const size_t s = workspace_size(g, a);
    attn_nn_precision_set(prev);
    return s;
}

static attn_status check_args(const char *fn, const attn_gpt *g, const attn_gpt_args *a) {
    ATTN_CHECK_NOT_NULL(fn, g);
    ATTN_CHECK_NOT_NULL(fn, a);
    if (!args_ok(g, a) || !a->tokens)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: need batch >= 1, n >= 1 and tokens (batch %lld, n %lld)", fn,
                          (long long)a->batch, (long long)a->n);
    int64_t longest = a->n;
    if (a->cu_seqlens) { /* checked here too: the embeddings read it before the layers would */
        const int64_t *cu = a->cu_seqlens;
        longest = 0;
        for (int64_t s = 0; s <= a->batch; s++) {
            const int64_t prev = s ? cu[s - 1] : 0;
            if ((s == 0 && cu[0] != 0) || cu[s] < prev || cu[s] > a->n || (s == a->batch && cu[s] != a->n))
                return attn_error(ATTN_ERR_SHAPE,
                                  "%s: cu_seqlens[%lld] = %lld (previous %lld): want cu_seqlens[0] = 0, nondecreasing, "
                                  "and cu_seqlens[batch = %lld] = n = %lld",
                                  fn, (long long)s, (long long)cu[s], (long long)prev, (long long)a->batch,
                                  (long long)a->n);
            if (s && cu[s] - prev > longest) longest = cu[s] - prev;
        }
    }
    if (g->pos && longest > g->cfg.max_positions)
        return attn_error(ATTN_ERR_SHAPE, "%s: %s = %lld exceeds max_positions = %lld", fn,
                          a->cu_seqlens ? "the longest sequence" : "n", (long long)longest,
                          (long long)g->cfg.max_positions);
    return ATTN_OK;
}

/* x [B, n, d] = E[tokens] (+ P[pos0 ..]). */
static attn_status embed(const char *fn, const attn_gpt *g, const int64_t *tokens, int64_t B, int64_t n, int64_t pos0,
                         float *x) {
    attn_status st = attn_embedding_forward(g->tok, tokens, B * n, x);
    if (!st && g->pos) st = attn_embedding_add_positions(g->pos, x, B, n, pos0);
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

/* A packed batch's x [n, d] = E[tokens] (+ P[0 .. len_s) for each sequence s). */
static attn_status embed_packed(const char *fn, const attn_gpt *g, const attn_gpt_args *a, float *x) {
    const int64_t d = g->cfg.layer.d_model, *cu = a->cu_seqlens;
    attn_status st = attn_embedding_forward(g->tok, a->tokens, a->n, x);
    for (int64_t s = 0; s < a->batch && !st && g->pos; s++)
        if (cu[s + 1] > cu[s]) st = attn_embedding_add_positions(g->pos, x + cu[s] * d, 1, cu[s + 1] - cu[s], 0);
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

static attn_status gpt_forward(const char *fn, attn_gpt *g, const attn_gpt_args *a, float *logits, void *saved,
                               size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    attn_status st = check_args(fn, g, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, logits);
    nn_arena sv, ws;
    if ((saved && (st = attn_nn_arena_init(&sv, fn, "saved", saved, saved_bytes, attn_gpt_saved_size(g, a)))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, workspace_size(g, a))))
        return st;
    const int64_t R = rows_of(a), d = g->cfg.layer.d_model;
    attn_layer_args la = layer_args(a, NULL);
    const size_t ssb = attn_nn_stack_saved(&g->S, &la);
    nn_arena *keep = saved ? &sv : &ws;
    float *x0 = nn_takef(keep, (size_t)(R * d)), *h = nn_takef(keep, (size_t)(R * d));
    void *ss = saved ? attn_nn_take(&sv, ssb) : NULL;
    size_t wb;
    void *rest = nn_rest(&ws, &wb);
    if ((st = a->cu_seqlens ? embed_packed(fn, g, a, x0) : embed(fn, g, a->tokens, a->batch, a->n, 0, x0))) return st;
    la.x = x0;
    if ((st = attn_nn_stack_fwd(fn, &g->S, &la, 0, h, ss, ssb, rest, wb))) return st;
    return attn_nn_linear_fwd(fn, h, g->w_lm, NULL, logits, R, d, g->cfg.vocab_size, rest, wb);
}

static attn_status gpt_backward(const char *fn, attn_gpt *g, const attn_gpt_args *a, const float *dlogits,
                                const void *saved, size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    attn_status st = check_args(fn, g, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dlogits);
    ATTN_CHECK_NOT_NULL(fn, saved);
    nn_arena sv, ws;
    if ((st = attn_nn_arena_init(&sv, fn, "saved", (void *)saved, saved_bytes, attn_gpt_saved_size(g, a))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, workspace_size(g, a))))
        return st;
    const int64_t R = rows_of(a), d = g->cfg.layer.d_model;
    attn_layer_args la = layer_args(a, NULL);
    const size_t ssb = attn_nn_stack_saved(&g->S, &la);
    float *x0 = nn_takef(&sv, (size_t)(R * d)), *h = nn_takef(&sv, (size_t)(R * d));
    void *ss = attn_nn_take(&sv, ssb);
    float *dh = nn_takef(&ws, (size_t)(R * d)), *dx0 = nn_takef(&ws, (size_t)(R * d));
    size_t wb;
    void *rest = nn_rest(&ws, &wb);
    if ((st = attn_nn_linear_bwd(fn, h, g->w_lm, dlogits, dh, 0, g->g_lm, NULL, R, d, g->cfg.vocab_size, rest, wb)))
        return st;
    la.x = x0;
    if ((st = attn_nn_stack_bwd(fn, &g->S, &la, 0, dh, dx0, NULL, ss, ssb, rest, wb))) return st;
    st = attn_embedding_backward(g->tok, a->tokens, R, dx0);
    if (!st && g->pos && !a->cu_seqlens) st = attn_embedding_positions_backward(g->pos, dx0, a->batch, a->n, 0);
    for (int64_t s = 0; s < a->batch && !st && g->pos && a->cu_seqlens; s++) {
        const int64_t *cu = a->cu_seqlens;
        if (cu[s + 1] > cu[s]) st = attn_embedding_positions_backward(g->pos, dx0 + cu[s] * d, 1, cu[s + 1] - cu[s], 0);
    }
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

void attn_nn_gpt_set_precision(attn_gpt *g, attn_precision p) { g->cfg.precision = p; }

/* The forward and backward run in the model's precision (attn_nn_precision, restored after). */
attn_status attn_gpt_forward(attn_gpt *g, const attn_gpt_args *a, float *logits, void *saved, size_t saved_bytes,
                             void *workspace, size_t workspace_bytes) {
    const attn_precision prev = attn_nn_precision_set(g ? g->cfg.precision : ATTN_PRECISION_FP32);
    const attn_status st =
        gpt_forward("attn_gpt_forward", g, a, logits, saved, saved_bytes, workspace, workspace_bytes);
    attn_nn_precision_set(prev);
    return st;
}

attn_status attn_gpt_backward(attn_gpt *g, const attn_gpt_args *a, const float *dlogits, const void *saved,
                              size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    const attn_precision prev = attn_nn_precision_set(g ? g->cfg.precision : ATTN_PRECISION_FP32);
    const attn_status st =
        gpt_backward("attn_gpt_backward", g, a, dlogits, saved, saved_bytes, workspace, workspace_bytes);
    attn_nn_precision_set(prev);
    return st;
}

/* ---- generation with a cache ---- */

struct attn_gpt_cache {
    int64_t layers, batch, capacity;
    attn_kv_cache *self;
};

size_t attn_gpt_cache_size(const attn_gpt *g, int64_t batch, int64_t capacity) {
    if (!g || batch < 1 || capacity < 1) return 0;
    const int64_t L = g->cfg.num_layers;
    size_t s = nn_add(NN_SLACK, nn_block(sizeof(attn_gpt_cache)));
    s = nn_add(s, nn_block(nn_mul((size_t)L, sizeof(attn_kv_cache))));
    return nn_add(s, nn_mul((size_t)L, attn_mha_cache_size(g->S.layers[0].sa, batch, capacity)));
}

attn_status attn_gpt_cache_init(attn_gpt *g, void *buffer, size_t bytes, int64_t batch, int64_t capacity,
                                attn_gpt_cache **cache) {
    static const char fn[] = "attn_gpt_cache_init";
    ATTN_CHECK_NOT_NULL(fn, cache);
    *cache = NULL;
    ATTN_CHECK_NOT_NULL(fn, g);
    if (batch < 1 || capacity < 1 || (g->pos && capacity > g->cfg.max_positions))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: need batch >= 1 and capacity in [1, %lld] (got %lld, %lld)",
                          fn, (long long)(g->pos ? g->cfg.max_positions : INT64_MAX), (long long)batch,
                          (long long)capacity);
    nn_arena ar;
    attn_status st =
        attn_nn_arena_init(&ar, fn, "cache buffer", buffer, bytes, attn_gpt_cache_size(g, batch, capacity));
    if (st) return st;
    const int64_t L = g->cfg.num_layers;
    attn_gpt_cache *c = attn_nn_take(&ar, sizeof *c);
    c->layers = L;
    c->batch = batch;
    c->capacity = capacity;
    c->self = attn_nn_take(&ar, (size_t)L * sizeof(attn_kv_cache));
    for (int64_t l = 0; l < L; l++) {
        const attn_mha *sa = g->S.layers[l].sa;
        const size_t kb = attn_mha_cache_size(sa, batch, capacity);
        if ((st = attn_mha_cache_init(sa, &c->self[l], attn_nn_take(&ar, kb), kb, batch, capacity)))
            return attn_nn_wrap_error(st, fn);
    }
    *cache = c;
    return ATTN_OK;
}

int64_t attn_gpt_cache_length(const attn_gpt_cache *cache) { return cache ? cache->self[0].length : 0; }

size_t attn_gpt_step_workspace_size(const attn_gpt *g, int64_t batch, int64_t n, int64_t capacity) {
    if (!g || batch < 1 || n < 1 || capacity < 1) return 0;
    const size_t rows = nn_fblock(nn_mul(nn_mul((size_t)batch, (size_t)n), (size_t)g->cfg.layer.d_model));
    const size_t sub = nn_max(attn_nn_stack_step_ws(&g->S, batch, n, capacity, 1),
                              attn_nn_linear_ws(batch * n, g->cfg.layer.d_model, g->cfg.vocab_size));
    return nn_add(nn_add(NN_SLACK, nn_mul(2, rows)), sub);
}

attn_status attn_gpt_forward_step(attn_gpt *g, attn_gpt_cache *cache, const int64_t *tokens, int64_t n, float *logits,
                                  void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_gpt_forward_step";
    ATTN_CHECK_NOT_NULL(fn, g);
    ATTN_CHECK_NOT_NULL(fn, cache);
    ATTN_CHECK_NOT_NULL(fn, tokens);
    ATTN_CHECK_NOT_NULL(fn, logits);
    if (cache->layers != g->cfg.num_layers)
        return attn_error(ATTN_ERR_SHAPE, "%s: the cache has %lld layers, the model %lld", fn, (long long)cache->layers,
                          (long long)g->cfg.num_layers);
    const int64_t len = cache->self[0].length, B = cache->batch, d = g->cfg.layer.d_model;
    if (n < 1 || len + n > cache->capacity)
        return attn_error(ATTN_ERR_SHAPE, "%s: %lld new positions after %lld do not fit the capacity %lld", fn,
                          (long long)n, (long long)len, (long long)cache->capacity);
    nn_arena ws;
    attn_status st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                        attn_gpt_step_workspace_size(g, B, n, cache->capacity));
    if (st) return st;
    float *x = nn_takef(&ws, (size_t)(B * n * d)), *h = nn_takef(&ws, (size_t)(B * n * d));
    size_t wb;
    void *rest = nn_rest(&ws, &wb);
    if ((st = embed(fn, g, tokens, B, n, len, x)) ||
        (st = attn_nn_stack_step(fn, &g->S, cache->self, NULL, NULL, x, B, n, h, rest, wb)))
        return st;
    return attn_nn_linear_fwd(fn, h, g->w_lm, NULL, logits, B * n, d, g->cfg.vocab_size, rest, wb);
}
