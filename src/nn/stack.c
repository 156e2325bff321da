/* Stacks of transformer layers (torch.nn.TransformerEncoder / TransformerDecoder) and the full
 * encoder-decoder torch.nn.Transformer, forward and backward.
 *
 *   stack:        x_0 = x,  x_{l+1} = layer_l(x_l [, memory]),  y = LN(x_L) (or x_L without norm)
 *   backward:     g_L = LN'(x_L)^T dy,  g_l = layer_l'^T g_{l+1},  dx = g_0,
 *                 dmemory = sum_l (d layer_l / d memory)^T g_{l+1}   (decoder)
 *   Transformer:  memory = encoder(src),  y = decoder(tgt, memory);
 *                 backward: (dtgt, dmemory) from the decoder, dsrc = encoder'^T dmemory.
 * The layer outputs x_1 .. x_L are kept in `saved` for the backward; an inference forward only
 * ping-pongs two [B, N, d] buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nn_layer.h"

attn_stack_config attn_stack_config_default(int64_t d_model, int64_t nhead, int64_t num_layers) {
    attn_stack_config c;
    memset(&c, 0, sizeof c);
    c.layer = attn_layer_config_default(d_model, nhead);
    c.num_layers = num_layers;
    c.norm = 1;
    c.norm_eps = 1e-5f;
    return c;
}

void attn_nn_stack_destroy(nn_stack *S) {
    for (int64_t l = 0; S->layers && l < S->cfg.num_layers; l++) attn_nn_layer_destroy(&S->layers[l]);
    attn__free(S->layers);
    attn_nn_store_free(&S->norm);
    attn_nn_params_free(S->list);
    memset(S, 0, sizeof *S);
}

attn_status attn_nn_stack_init(nn_stack *S, const char *fn, const attn_stack_config *cfg, int decoder,
                               const attn_rope_config *rope) {
    memset(S, 0, sizeof *S);
    ATTN_CHECK_NOT_NULL(fn, cfg);
    if (cfg->num_layers < 1 || cfg->num_layers > 100000)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: num_layers = %lld must be in [1, 100000]", fn,
                          (long long)cfg->num_layers);
    if (cfg->norm && (!(cfg->norm_eps > 0) || cfg->norm_eps != cfg->norm_eps))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: norm_eps must be > 0 (got %g)", fn, (double)cfg->norm_eps);
    attn_status st = attn_nn_layer_check_config(fn, &cfg->layer);
    if (st) return st;
    S->cfg = *cfg;
    S->decoder = decoder;
    S->layers = attn__calloc((size_t)cfg->num_layers, sizeof *S->layers);
    S->list = attn_nn_params_new();
    if (!S->layers || !S->list) {
        attn_nn_stack_destroy(S);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    for (int64_t l = 0; l < cfg->num_layers; l++) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "layers.%lld.", (long long)l);
        if ((st = attn_nn_layer_init(&S->layers[l], fn, &cfg->layer, decoder, rope)) ||
            (st = attn_nn_params_append(S->list, fn, S->layers[l].list, prefix))) {
            attn_nn_stack_destroy(S);
            return st;
        }
    }
    if (cfg->norm) {
        const int64_t d = cfg->layer.d_model;
        nn_pdesc desc[2] = {{"norm.weight", 1, {d, 0, 0, 0}, NN_INIT_ONES, 0, 0},
                            {"norm.bias", 1, {d, 0, 0, 0}, NN_INIT_ZEROS, 0, 0}};
        float *p[2], *g[2];
        if ((st = attn_nn_store_create(&S->norm, fn, desc, 2, p, g)) ||
            (st = attn_nn_params_append(S->list, fn, S->norm.list, NULL))) {
            attn_nn_stack_destroy(S);
            return st;
        }
        S->nw = p[0], S->nb = p[1], S->gnw = g[0], S->gnb = g[1];
    }
    return ATTN_OK;
}

static size_t rows_d(const nn_stack *S, const attn_layer_args *a) {
    return nn_mul(attn_nn_layer_rows(a, 0), (size_t)S->cfg.layer.d_model);
}

/* saved: per layer its saved block and its output x_{l+1}; the final norm's mean and rstd. */
size_t attn_nn_stack_saved(const nn_stack *S, const attn_layer_args *a) {
    const size_t per = nn_add(nn_block(attn_nn_layer_saved_bytes(&S->layers[0], a)), nn_fblock(rows_d(S, a)));
    return nn_add(nn_add(NN_SLACK, nn_mul((size_t)S->cfg.num_layers, per)),
                  nn_mul(2, nn_fblock(attn_nn_layer_rows(a, 0))));
}

size_t attn_nn_stack_ws(const nn_stack *S, const attn_layer_args *a) {
    return nn_add(nn_add(NN_SLACK, nn_mul(2, nn_fblock(rows_d(S, a)))),
                  nn_add(nn_mul(2, nn_fblock(attn_nn_layer_rows(a, 0))), attn_nn_layer_ws_bytes(&S->layers[0], a)));
}

/* Layer `index` of the model: input x, dropout streams from its slot (nn_mode_layer; a packed
 * call's slots are batch times wider, one stream per sequence, layers.h). */
static attn_layer_args layer_args(const attn_layer_args *a, const float *x, int64_t index) {
    attn_layer_args la = *a;
    la.x = x;
    NN_MODE_SET(&la, nn_mode_layer(NN_MODE_OF(a), index * (int64_t)attn_nn_layer_stream_unit(a)));
    return la;
}

/* attn_cancel_request's check before layer l of L: a stop takes at most one layer's time. */
static attn_status cancelled(const char *fn, const char *pass, int64_t l, int64_t L) {
    if (!attn_cancel_requested()) return ATTN_OK;
    return attn_error(ATTN_ERR_CANCELLED, "%s: cancelled (attn_cancel_request) before the %s of layer %lld of %lld", fn,
                      pass, (long long)l, (long long)L);
}

/* base: index of the first layer in the model (its dropout streams follow from it). */
attn_status attn_nn_stack_fwd(const char *fn, nn_stack *S, const attn_layer_args *a, int64_t base, float *out,
                              void *saved, size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    nn_arena sv, ws;
    attn_status st;
    if ((st = attn_nn_layer_check_args(fn, &S->layers[0], a))) return st;
    if ((saved && (st = attn_nn_arena_init(&sv, fn, "saved", saved, saved_bytes, attn_nn_stack_saved(S, a)))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_nn_stack_ws(S, a))))
        return st;
    const size_t R = attn_nn_layer_rows(a, 0), n = rows_d(S, a), lsb = attn_nn_layer_saved_bytes(&S->layers[0], a);
    float *pp[2] = {nn_takef(&ws, n), nn_takef(&ws, n)};
    float *mean = nn_takef(saved ? &sv : &ws, R), *rstd = nn_takef(saved ? &sv : &ws, R);
    size_t lwb;
    void *lws = nn_rest(&ws, &lwb);
    const float *x = a->x;
    for (int64_t l = 0; l < S->cfg.num_layers; l++) {
        if ((st = cancelled(fn, "forward", l, S->cfg.num_layers))) return st;
        void *ls = saved ? attn_nn_take(&sv, lsb) : NULL;
        float *y = saved ? nn_takef(&sv, n) : pp[l & 1];
        attn_layer_args la = layer_args(a, x, base + l);
        const size_t mark = attn_nn_capture_push(a->capture, "layers.%lld.", (long long)l);
        st = attn_nn_layer_fwd(fn, &S->layers[l], &la, y, ls, lsb, lws, lwb);
        attn_nn_capture_pop(a->capture, mark);
        if (st) return st;
        x = y;
    }
    if (!S->cfg.norm) {
        memcpy(out, x, sizeof(float) * n);
        return ATTN_OK;
    }
    st = attn_layernorm_forward(x, S->nw, S->nb, out, mean, rstd, (int64_t)R, S->cfg.layer.d_model, S->cfg.norm_eps);
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

/* Layer l's saved block and input, as the forward laid them out (layer after layer) from sv: found
 * by walking a copy of the arena rather than kept in an allocated array, so that the backward
 * allocates nothing and cannot fail half-way with some gradients already accumulated. */
static void layer_saved_at(nn_arena sv, int64_t l, size_t lsb, size_t n, void **ls, float **xs) {
    for (int64_t i = 0; i <= l; i++) {
        *ls = attn_nn_take(&sv, lsb);
        *xs = nn_takef(&sv, n);
    }
}

attn_status attn_nn_stack_bwd(const char *fn, nn_stack *S, const attn_layer_args *a, int64_t base, const float *dout,
                              float *dx, float *dmem, const void *saved, size_t saved_bytes, void *workspace,
                              size_t workspace_bytes) {
    nn_arena sv, ws;
    attn_status st;
    if ((st = attn_nn_layer_check_args(fn, &S->layers[0], a))) return st;
    if ((st = attn_nn_arena_init(&sv, fn, "saved", (void *)saved, saved_bytes, attn_nn_stack_saved(S, a))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_nn_stack_ws(S, a))))
        return st;
    const int64_t L = S->cfg.num_layers;
    const size_t R = attn_nn_layer_rows(a, 0), n = rows_d(S, a), lsb = attn_nn_layer_saved_bytes(&S->layers[0], a);
    float *pp[2] = {nn_takef(&ws, n), nn_takef(&ws, n)};
    const float *mean = nn_takef(&sv, R), *rstd = nn_takef(&sv, R);
    nn_takef(&ws, R);
    nn_takef(&ws, R);
    size_t lwb;
    void *lws = nn_rest(&ws, &lwb);
    void *ls = NULL;
    float *xs = NULL, *xprev = NULL;
    const float *g = dout;
    int cur = 0;
    if (S->cfg.norm) {
        layer_saved_at(sv, L - 1, lsb, n, &ls, &xs);
        st = attn_layernorm_backward(xs, S->nw, mean, rstd, dout, pp[0], S->gnw, S->gnb, (int64_t)R,
                                     S->cfg.layer.d_model);
        if (st) st = attn_nn_wrap_error(st, fn);
        g = pp[0];
        cur = 1;
    }
    for (int64_t l = L - 1; l >= 0 && !st; l--) {
        if ((st = cancelled(fn, "backward", l, L))) break;
        float *next = l == 0 && dx ? dx : pp[cur];
        if (l) layer_saved_at(sv, l - 1, lsb, n, &ls, &xprev);
        layer_saved_at(sv, l, lsb, n, &ls, &xs);
        attn_layer_args la = layer_args(a, l ? xprev : a->x, base + l);
        st = attn_nn_layer_bwd(fn, &S->layers[l], &la, g, next, dmem, l != L - 1, ls, lsb, lws, lwb);
        g = next;
        cur ^= 1;
    }
    return st;
}

/* ---- public stacks: thin shims over nn_stack (decoder 0 / 1) ---- */

struct attn_encoder {
    nn_stack S;
};
struct attn_decoder {
    nn_stack S;
};

/* A zeroed public stack of `size` bytes whose first member is its nn_stack, initialised. */
static void *stack_new(const char *fn, const attn_stack_config *cfg, int decoder, size_t size, attn_status *st) {
    nn_stack *S = attn__calloc(1, size);
    if (!S) {
        *st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        return NULL;
    }
    if ((*st = attn_nn_stack_init(S, fn, cfg, decoder, NULL))) {
        attn__free(S);
        return NULL;
    }
    return S;
}

static void stack_free(nn_stack *S) {
    attn_nn_stack_destroy(S);
    attn__free(S);
}

static int stack_args_ok(const attn_layer_args *a) { return a && a->batch > 0 && a->n > 0; }

attn_status attn_encoder_create(const attn_stack_config *cfg, attn_encoder **out) {
    static const char fn[] = "attn_encoder_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    attn_status st;
    *out = stack_new(fn, cfg, 0, sizeof **out, &st);
    return st;
}

void attn_encoder_free(attn_encoder *e) {
    if (e) stack_free(&e->S);
}

const attn_params *attn_encoder_params(const attn_encoder *e) { return e ? e->S.list : NULL; }

size_t attn_encoder_saved_size(const attn_encoder *e, const attn_layer_args *a) {
    return e && stack_args_ok(a) ? attn_nn_stack_saved(&e->S, a) : 0;
}
size_t attn_encoder_workspace_size(const attn_encoder *e, const attn_layer_args *a) {
    return e && stack_args_ok(a) ? attn_nn_stack_ws(&e->S, a) : 0;
}

attn_status attn_encoder_forward(attn_encoder *e, const attn_layer_args *a, float *out, void *saved, size_t saved_bytes,
                                 void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_encoder_forward";
    ATTN_CHECK_NOT_NULL(fn, e);
    ATTN_CHECK_NOT_NULL(fn, out);
    return attn_nn_stack_fwd(fn, &e->S, a, 0, out, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_encoder_backward(attn_encoder *e, const attn_layer_args *a, const float *dout, float *dx,
                                  const void *saved, size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_encoder_backward";
    ATTN_CHECK_NOT_NULL(fn, e);
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, saved);
    return attn_nn_stack_bwd(fn, &e->S, a, 0, dout, dx, NULL, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_decoder_create(const attn_stack_config *cfg, attn_decoder **out) {
    static const char fn[] = "attn_decoder_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    attn_status st;
    *out = stack_new(fn, cfg, 1, sizeof **out, &st);
    return st;
}

void attn_decoder_free(attn_decoder *d) {
    if (d) stack_free(&d->S);
}

const attn_params *attn_decoder_params(const attn_decoder *d) { return d ? d->S.list : NULL; }

size_t attn_decoder_saved_size(const attn_decoder *d, const attn_layer_args *a) {
    return d && stack_args_ok(a) ? attn_nn_stack_saved(&d->S, a) : 0;
}
size_t attn_decoder_workspace_size(const attn_decoder *d, const attn_layer_args *a) {
    return d && stack_args_ok(a) ? attn_nn_stack_ws(&d->S, a) : 0;
}

attn_status attn_decoder_forward(attn_decoder *d, const attn_layer_args *a, float *out, void *saved, size_t saved_bytes,
                                 void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_decoder_forward";
    ATTN_CHECK_NOT_NULL(fn, d);
    ATTN_CHECK_NOT_NULL(fn, out);
    return attn_nn_stack_fwd(fn, &d->S, a, 0, out, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_decoder_backward(attn_decoder *d, const attn_layer_args *a, const float *dout, float *dx,
                                  float *dmemory, const void *saved, size_t saved_bytes, void *workspace,
                                  size_t workspace_bytes) {
    static const char fn[] = "attn_decoder_backward";
    ATTN_CHECK_NOT_NULL(fn, d);
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, saved);
    return attn_nn_stack_bwd(fn, &d->S, a, 0, dout, dx, dmemory, saved, saved_bytes, workspace, workspace_bytes);
}

/* ---- incremental decoding with a decoder stack ----
 * The cache object, its per-layer attn_kv_cache structs and their data all live in the caller's
 * buffer: [attn_decoder_cache][self caches][cross caches][per layer: self data, cross data]. */

struct attn_decoder_cache {
    int64_t layers, batch, capacity, n_memory;
    const uint8_t *memory_kpm;
    attn_kv_cache *self, *cross;
};

size_t attn_decoder_cache_size(const attn_decoder *d, int64_t batch, int64_t capacity, int64_t n_memory) {
    if (!d || batch < 1 || capacity < 1 || n_memory < 1) return 0;
    const int64_t L = d->S.cfg.num_layers;
    size_t s = nn_add(NN_SLACK, nn_block(sizeof(attn_decoder_cache)));
    s = nn_add(s, nn_block(nn_mul(2 * (size_t)L, sizeof(attn_kv_cache))));
    /* every layer has the same kinds of attention: layer 0's caches size them all */
    const nn_layer *l0 = &d->S.layers[0];
    const size_t per =
        nn_add(attn_mha_cache_size(l0->sa, batch, capacity), attn_mha_cache_size(l0->ca, batch, n_memory));
    return nn_add(s, nn_mul((size_t)L, per));
}

size_t attn_nn_stack_step_ws(const nn_stack *S, int64_t batch, int64_t n, int64_t capacity, int64_t n_memory) {
    const size_t rows = nn_mul(nn_mul((size_t)batch, (size_t)n), (size_t)S->cfg.layer.d_model);
    size_t s = nn_add(NN_SLACK, nn_mul(2, nn_fblock(rows)));
    return nn_add(s, attn_nn_layer_step_ws(&S->layers[0], batch, n, capacity, n_memory));
}

attn_status attn_nn_stack_step(const char *fn, nn_stack *S, attn_kv_cache *self, attn_kv_cache *cross,
                               const uint8_t *memory_kpm, const float *x, int64_t B, int64_t n, float *out,
                               void *workspace, size_t workspace_bytes) {
    nn_arena ws;
    attn_status st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                        attn_nn_stack_step_ws(S, B, n, self[0].capacity, cross ? cross[0].length : 1));
    if (st) return st;
    const int64_t dm = S->cfg.layer.d_model;
    const size_t rows = (size_t)(B * n * dm);
    float *pp[2] = {nn_takef(&ws, rows), nn_takef(&ws, rows)};
    size_t lwb;
    void *lws = nn_rest(&ws, &lwb);
    for (int64_t l = 0; l < S->cfg.num_layers; l++) {
        float *y = pp[l & 1];
        if ((st = attn_nn_layer_step(fn, &S->layers[l], &self[l], cross ? &cross[l] : NULL, memory_kpm, x, B, n, y, lws,
                                     lwb)))
            return st;
        x = y;
    }
    if (!S->cfg.norm) {
        memcpy(out, x, sizeof(float) * rows);
        return ATTN_OK;
    }
    st = attn_layernorm_forward(x, S->nw, S->nb, out, NULL, NULL, B * n, dm, S->cfg.norm_eps);
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

size_t attn_decoder_step_workspace_size(const attn_decoder *d, int64_t batch, int64_t n, int64_t capacity,
                                        int64_t n_memory) {
    if (!d || batch < 1 || n < 1 || capacity < 1 || n_memory < 1) return 0;
    const size_t s = nn_add(NN_SLACK, attn_nn_stack_step_ws(&d->S, batch, n, capacity, n_memory));
    /* the cross caches are filled through the same workspace */
    return nn_max(s, attn_mha_cache_fill_workspace_size(d->S.layers[0].ca, batch, n_memory));
}

attn_status attn_decoder_cache_init(attn_decoder *d, void *buffer, size_t bytes, int64_t batch, int64_t capacity,
                                    const float *memory, int64_t n_memory, const uint8_t *memory_key_padding_mask,
                                    void *workspace, size_t workspace_bytes, attn_decoder_cache **cache) {
    static const char fn[] = "attn_decoder_cache_init";
    ATTN_CHECK_NOT_NULL(fn, cache);
    *cache = NULL;
    ATTN_CHECK_NOT_NULL(fn, d);
    ATTN_CHECK_NOT_NULL(fn, memory);
    if (batch < 1 || capacity < 1 || n_memory < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch (%lld), capacity (%lld), n_memory (%lld) must be >= 1",
                          fn, (long long)batch, (long long)capacity, (long long)n_memory);
    nn_arena ar;
    attn_status st = attn_nn_arena_init(&ar, fn, "cache buffer", buffer, bytes,
                                        attn_decoder_cache_size(d, batch, capacity, n_memory));
    if (st) return st;
    const int64_t L = d->S.cfg.num_layers;
    attn_decoder_cache *c = attn_nn_take(&ar, sizeof *c);
    c->layers = L;
    c->batch = batch;
    c->capacity = capacity;
    c->n_memory = n_memory;
    c->memory_kpm = memory_key_padding_mask;
    c->self = attn_nn_take(&ar, 2 * (size_t)L * sizeof(attn_kv_cache));
    c->cross = c->self + L;
    for (int64_t l = 0; l < L; l++) {
        const nn_layer *ly = &d->S.layers[l];
        const size_t ss = attn_mha_cache_size(ly->sa, batch, capacity),
                     cs = attn_mha_cache_size(ly->ca, batch, n_memory);
        if ((st = attn_mha_cache_init(ly->sa, &c->self[l], attn_nn_take(&ar, ss), ss, batch, capacity)) ||
            (st = attn_mha_cache_init(ly->ca, &c->cross[l], attn_nn_take(&ar, cs), cs, batch, n_memory)) ||
            (st = attn_mha_cache_fill(d->S.layers[l].ca, &c->cross[l], memory, memory, n_memory, workspace,
                                      workspace_bytes)))
            return attn_nn_wrap_error(st, fn);
    }
    *cache = c;
    return ATTN_OK;
}

int64_t attn_decoder_cache_length(const attn_decoder_cache *cache) { return cache ? cache->self[0].length : 0; }

attn_status attn_decoder_forward_step(attn_decoder *d, attn_decoder_cache *cache, const float *tgt, int64_t n,
                                      float *out, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_decoder_forward_step";
    ATTN_CHECK_NOT_NULL(fn, d);
    ATTN_CHECK_NOT_NULL(fn, cache);
    ATTN_CHECK_NOT_NULL(fn, tgt);
    ATTN_CHECK_NOT_NULL(fn, out);
    const nn_stack *S = &d->S;
    if (cache->layers != S->cfg.num_layers)
        return attn_error(ATTN_ERR_SHAPE, "%s: the cache has %lld layers, the decoder %lld", fn,
                          (long long)cache->layers, (long long)S->cfg.num_layers);
    if (n < 1 || cache->self[0].length + n > cache->capacity)
        return attn_error(ATTN_ERR_SHAPE, "%s: %lld new positions after %lld do not fit the capacity %lld", fn,
                          (long long)n, (long long)cache->self[0].length, (long long)cache->capacity);
    nn_arena ws;
    attn_status st =
        attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                           attn_decoder_step_workspace_size(d, cache->batch, n, cache->capacity, cache->n_memory));
    if (st) return st;
    size_t rb;
    void *rest = nn_rest(&ws, &rb);
    return attn_nn_stack_step(fn, &d->S, cache->self, cache->cross, cache->memory_kpm, tgt, cache->batch, n, out, rest,
                              rb);
}

/* ---- nn.Transformer ---- */

struct attn_transformer {
    attn_transformer_config cfg;
    attn_encoder enc;
    attn_decoder dec;
    attn_params *list;
};

attn_transformer_config attn_transformer_config_default(void) {
    attn_transformer_config c;
    memset(&c, 0, sizeof c);
    c.layer = attn_layer_config_default(512, 8);
    c.num_encoder_layers = 6;
    c.num_decoder_layers = 6;
    return c;
}

attn_transformer_args attn_transformer_args_default(void) {
    attn_transformer_args a;
    memset(&a, 0, sizeof a);
    return a;
}

attn_status attn_transformer_create(const attn_transformer_config *cfg, attn_transformer **out) {
    static const char fn[] = "attn_transformer_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, cfg);
    attn_transformer *t = attn__calloc(1, sizeof *t);
    if (!t) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    t->cfg = *cfg;
    attn_stack_config sc;
    memset(&sc, 0, sizeof sc);
    sc.layer = cfg->layer;
    sc.norm = 1;
    sc.norm_eps = cfg->layer.layer_norm_eps; /* nn.Transformer: LayerNorm(d_model, eps=layer_norm_eps) */
    attn_status st;
    sc.num_layers = cfg->num_encoder_layers;
    if ((st = attn_nn_stack_init(&t->enc.S, fn, &sc, 0, NULL))) {
        attn__free(t);
        return st;
    }
    sc.num_layers = cfg->num_decoder_layers;
    if ((st = attn_nn_stack_init(&t->dec.S, fn, &sc, 1, NULL))) {
        attn_nn_stack_destroy(&t->enc.S);
        attn__free(t);
        return st;
    }
    t->list = attn_nn_params_new();
    if (!t->list) st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (!st) st = attn_nn_params_append(t->list, fn, t->enc.S.list, "encoder.");
    if (!st) st = attn_nn_params_append(t->list, fn, t->dec.S.list, "decoder.");
    if (!st) {
        attn_nn_params_xavier_matrices(t->list); /* nn.Transformer._reset_parameters */
        st = attn_params_reset(t->list, 0);
    }
    if (st) {
        attn_transformer_free(t);
        return st;
    }
    *out = t;
    return ATTN_OK;
}

void attn_transformer_free(attn_transformer *t) {
    if (!t) return;
    attn_nn_stack_destroy(&t->enc.S);
    attn_nn_stack_destroy(&t->dec.S);
    attn_nn_params_free(t->list);
    attn__free(t);
}

const attn_params *attn_transformer_params(const attn_transformer *t) { return t ? t->list : NULL; }

/* The encoder's and the decoder's arguments of one call (masks and mode shared as given). */
static void split_args(const attn_transformer_args *a, const float *memory, attn_layer_args *ea, attn_layer_args *da) {
    *ea = attn_layer_args_default();
    ea->batch = a->batch;
    ea->n = a->n_src;
    ea->x = a->src;
    ea->self_masks = a->src_masks;
    NN_MODE_SET(ea, NN_MODE_OF(a));
    ea->capture = a->capture;
    *da = *ea;
    da->n = a->n_tgt;
    da->x = a->tgt;
    da->self_masks = a->tgt_masks;
    da->memory = memory;
    da->n_memory = a->n_src;
    da->memory_masks = a->memory_masks;
}

static int targs_ok(const attn_transformer *t, const attn_transformer_args *a) {
    return t && a && a->batch > 0 && a->n_src > 0 && a->n_tgt > 0;
}

static size_t memory_bytes(const attn_transformer *t, const attn_transformer_args *a) {
    return nn_fblock(nn_mul(nn_mul((size_t)a->batch, (size_t)a->n_src), (size_t)t->cfg.layer.d_model));
}

size_t attn_transformer_saved_size(const attn_transformer *t, const attn_transformer_args *a) {
    if (!targs_ok(t, a)) return 0;
    attn_layer_args ea, da;
    split_args(a, NULL, &ea, &da);
    return nn_add(nn_add(NN_SLACK, memory_bytes(t, a)),
                  nn_add(nn_block(attn_nn_stack_saved(&t->enc.S, &ea)), nn_block(attn_nn_stack_saved(&t->dec.S, &da))));
}

size_t attn_transformer_workspace_size(const attn_transformer *t, const attn_transformer_args *a) {
    if (!targs_ok(t, a)) return 0;
    attn_layer_args ea, da;
    split_args(a, NULL, &ea, &da);
    return nn_add(nn_add(NN_SLACK, memory_bytes(t, a)),
                  nn_max(attn_nn_stack_ws(&t->enc.S, &ea), attn_nn_stack_ws(&t->dec.S, &da)));
}

static attn_status check_targs(const char *fn, const attn_transformer *t, const attn_transformer_args *a) {
    ATTN_CHECK_NOT_NULL(fn, t);
    ATTN_CHECK_NOT_NULL(fn, a);
    if (!targs_ok(t, a))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch (%lld), n_src (%lld) and n_tgt (%lld) must be >= 1", fn,
                          (long long)a->batch, (long long)a->n_src, (long long)a->n_tgt);
    if (!a->src || !a->tgt)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: src and tgt are required (src %p, tgt %p)", fn,
                          (const void *)a->src, (const void *)a->tgt);
    return ATTN_OK;
}

attn_status attn_transformer_forward(attn_transformer *t, const attn_transformer_args *a, float *out, void *saved,
                                     size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_transformer_forward";
    attn_status st = check_targs(fn, t, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, out);
    nn_arena sv, ws;
    if ((saved && (st = attn_nn_arena_init(&sv, fn, "saved", saved, saved_bytes, attn_transformer_saved_size(t, a)))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                 attn_transformer_workspace_size(t, a))))
        return st;
    attn_layer_args ea, da;
    split_args(a, NULL, &ea, &da);
    const size_t mb = memory_bytes(t, a), es = attn_nn_stack_saved(&t->enc.S, &ea),
                 ds = attn_nn_stack_saved(&t->dec.S, &da);
    float *memory = attn_nn_take(saved ? &sv : &ws, mb);
    void *esv = saved ? attn_nn_take(&sv, es) : NULL, *dsv = saved ? attn_nn_take(&sv, ds) : NULL;
    size_t rb;
    void *rest = nn_rest(&ws, &rb);
    da.memory = memory;
    size_t mark = attn_nn_capture_push(a->capture, "encoder.");
    st = attn_nn_stack_fwd(fn, &t->enc.S, &ea, 0, memory, esv, es, rest, rb);
    attn_nn_capture_pop(a->capture, mark);
    if (st) return st;
    mark = attn_nn_capture_push(a->capture, "decoder.");
    st = attn_nn_stack_fwd(fn, &t->dec.S, &da, t->cfg.num_encoder_layers, out, dsv, ds, rest, rb);
    attn_nn_capture_pop(a->capture, mark);
    return st;
}

attn_status attn_transformer_backward(attn_transformer *t, const attn_transformer_args *a, const float *dout,
                                      float *dsrc, float *dtgt, const void *saved, size_t saved_bytes, void *workspace,
                                      size_t workspace_bytes) {
    static const char fn[] = "attn_transformer_backward";
    attn_status st = check_targs(fn, t, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, saved);
    nn_arena sv, ws;
    if ((st = attn_nn_arena_init(&sv, fn, "saved", (void *)saved, saved_bytes, attn_transformer_saved_size(t, a))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                 attn_transformer_workspace_size(t, a))))
        return st;
    attn_layer_args ea, da;
    split_args(a, NULL, &ea, &da);
    const size_t mb = memory_bytes(t, a), es = attn_nn_stack_saved(&t->enc.S, &ea),
                 ds = attn_nn_stack_saved(&t->dec.S, &da);
    const float *memory = attn_nn_take(&sv, mb);
    void *esv = attn_nn_take(&sv, es), *dsv = attn_nn_take(&sv, ds);
    float *dmem = attn_nn_take(&ws, mb);
    size_t rb;
    void *rest = nn_rest(&ws, &rb);
    da.memory = memory;
    if ((st = attn_nn_stack_bwd(fn, &t->dec.S, &da, t->cfg.num_encoder_layers, dout, dtgt, dmem, dsv, ds, rest, rb)))
        return st;
    return attn_nn_stack_bwd(fn, &t->enc.S, &ea, 0, dmem, dsrc, NULL, esv, es, rest, rb);
}

attn_encoder *attn_transformer_encoder(attn_transformer *t) { return t ? &t->enc : NULL; }
attn_decoder *attn_transformer_decoder(attn_transformer *t) { return t ? &t->dec : NULL; }
