/* The token-level models of the seed (and of Vaswani et al.): token embeddings scaled by
 * sqrt(d_model) plus sinusoidal positions (with dropout), then either the encoder stack
 * (attn_token_encoder, the seed's TransformerEncoder) or nn.Transformer and the output projection
 * to the target vocabulary (attn_seq2seq, the seed's Transformer). Math in seq2seq.h; forward and
 * backward side by side. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nn_internal.h"

struct attn_seq2seq {
    attn_seq2seq_config cfg;
    attn_embedding *src_emb, *tgt_emb;
    attn_transformer *tr;
    nn_store proj; /* output_projection.weight, .bias */
    float *w, *b, *gw, *gb;
    float *pe; /* [max_len, d_model] */
    attn_params *list;
};

attn_seq2seq_config attn_seq2seq_config_default(int64_t src_vocab, int64_t tgt_vocab, int64_t d_model, int64_t nhead,
                                                int64_t num_layers) {
    attn_seq2seq_config c;
    memset(&c, 0, sizeof c);
    c.src_vocab = src_vocab;
    c.tgt_vocab = tgt_vocab;
    c.max_len = 5000; /* the seed's PositionalEncoding default */
    c.transformer = attn_transformer_config_default();
    c.transformer.layer = attn_layer_config_default(d_model, nhead);
    c.transformer.num_encoder_layers = c.transformer.num_decoder_layers = num_layers;
    return c;
}

attn_seq2seq_args attn_seq2seq_args_default(void) {
    attn_seq2seq_args a;
    memset(&a, 0, sizeof a);
    a.tgt_causal = 1;
    return a;
}

void attn_seq2seq_free(attn_seq2seq *m) {
    if (!m) return;
    attn_embedding_free(m->src_emb);
    attn_embedding_free(m->tgt_emb);
    attn_transformer_free(m->tr);
    attn_nn_store_free(&m->proj);
    attn_nn_params_free(m->list);
    attn__free(m->pe);
    attn__free(m);
}

attn_status attn_seq2seq_create(const attn_seq2seq_config *cfg, attn_seq2seq **out) {
    static const char fn[] = "attn_seq2seq_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, cfg);
    const int64_t d = cfg->transformer.layer.d_model;
    if (cfg->src_vocab < 1 || cfg->tgt_vocab < 1 || cfg->max_len < 1 || d < 1 || cfg->max_len > (1 << 24))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: src_vocab = %lld, tgt_vocab = %lld, max_len = %lld, d_model = %lld must be >= 1 "
                          "(max_len <= 2^24)",
                          fn, (long long)cfg->src_vocab, (long long)cfg->tgt_vocab, (long long)cfg->max_len,
                          (long long)d);
    attn_seq2seq *m = attn__calloc(1, sizeof *m);
    if (!m) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    m->cfg = *cfg;
    attn_status st;
    if ((st = attn_embedding_create(cfg->src_vocab, d, -1, &m->src_emb)) ||
        (st = attn_embedding_create(cfg->tgt_vocab, d, -1, &m->tgt_emb)) ||
        (st = attn_transformer_create(&cfg->transformer, &m->tr)))
        goto fail;
    const double bound = 1.0 / sqrt((double)d); /* nn.Linear: kaiming_uniform(a = sqrt 5) and its bias */
    const nn_pdesc pd[2] = {{"weight", 2, {cfg->tgt_vocab, d}, NN_INIT_UNIFORM, bound, 0},
                            {"bias", 1, {cfg->tgt_vocab}, NN_INIT_UNIFORM, bound, 0}};
    float *ptrs[2], *gptrs[2];
    if ((st = attn_nn_store_create(&m->proj, fn, pd, 2, ptrs, gptrs))) goto fail;
    m->w = ptrs[0];
    m->b = ptrs[1];
    m->gw = gptrs[0];
    m->gb = gptrs[1];
    if ((st = attn_params_reset(m->proj.list, 0x5e9u))) goto fail;
    m->pe = attn__malloc(sizeof(float) * (size_t)cfg->max_len * (size_t)d);
    m->list = attn_nn_params_new();
    if (!m->pe || !m->list) {
        st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto fail;
    }
    if ((st = attn_sinusoidal_table(m->pe, cfg->max_len, d)) ||
        (st = attn_nn_params_append(m->list, fn, attn_embedding_params(m->src_emb), "src_embedding.")) ||
        (st = attn_nn_params_append(m->list, fn, attn_embedding_params(m->tgt_emb), "tgt_embedding.")) ||
        (st = attn_nn_params_append(m->list, fn, attn_transformer_params(m->tr), "transformer.")) ||
        (st = attn_nn_params_append(m->list, fn, m->proj.list, "output_projection.")))
        goto fail;
    *out = m;
    return ATTN_OK;
fail:
    attn_seq2seq_free(m);
    return st;
}

const attn_params *attn_seq2seq_params(const attn_seq2seq *m) { return m ? m->list : NULL; }
attn_transformer *attn_seq2seq_transformer(attn_seq2seq *m) { return m ? m->tr : NULL; }
const attn_seq2seq_config *attn_seq2seq_get_config(const attn_seq2seq *m) { return m ? &m->cfg : NULL; }

static attn_status check_args(const char *fn, const attn_seq2seq *m, const attn_seq2seq_args *a) {
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, a);
    if (a->batch < 1 || a->n_src < 1 || a->n_tgt < 1 || a->n_src > m->cfg.max_len || a->n_tgt > m->cfg.max_len)
        return attn_error(ATTN_ERR_SHAPE,
                          "%s: batch = %lld, n_src = %lld, n_tgt = %lld must be >= 1 and <= max_len %lld", fn,
                          (long long)a->batch, (long long)a->n_src, (long long)a->n_tgt, (long long)m->cfg.max_len);
    ATTN_CHECK_NOT_NULL(fn, a->src);
    ATTN_CHECK_NOT_NULL(fn, a->tgt);
    return ATTN_OK;
}

static attn_transformer_args transformer_args(const attn_seq2seq_args *a, const float *xs, const float *xt) {
    attn_transformer_args t = attn_transformer_args_default();
    t.batch = a->batch;
    t.n_src = a->n_src;
    t.n_tgt = a->n_tgt;
    t.src = xs;
    t.tgt = xt;
    t.src_masks.key_padding_mask = a->src_key_padding_mask;
    t.memory_masks.key_padding_mask = a->src_key_padding_mask;
    t.tgt_masks.key_padding_mask = a->tgt_key_padding_mask;
    t.tgt_masks.is_causal = a->tgt_causal;
    NN_MODE_SET(&t, NN_MODE_OF(a));
    t.capture = a->capture;
    return t;
}

/* Offsets of the two positional-dropout sites: after every layer's. */
static uint64_t pe_offset(const attn_seq2seq *m, const attn_seq2seq_args *a, int which) {
    return nn_site_offset(a->offset, m->cfg.transformer.num_encoder_layers + m->cfg.transformer.num_decoder_layers,
                          which ? NN_SITE_POS_TGT : NN_SITE_POS_SRC);
}

/* saved: xs, xt, y, then the transformer's. */
size_t attn_seq2seq_saved_size(const attn_seq2seq *m, const attn_seq2seq_args *a) {
    if (!m || !a || a->batch < 1 || a->n_src < 1 || a->n_tgt < 1) return 0;
    const size_t d = (size_t)m->cfg.transformer.layer.d_model, B = (size_t)a->batch;
    attn_transformer_args t = transformer_args(a, NULL, NULL);
    size_t n = nn_fblock(nn_mul(nn_mul(B, (size_t)a->n_src), d));
    n = nn_add(n, nn_mul(2, nn_fblock(nn_mul(nn_mul(B, (size_t)a->n_tgt), d))));
    return nn_add(nn_add(n, attn_transformer_saved_size(m->tr, &t)), NN_SLACK);
}

/* workspace: forward: xs, xt, y (inference) + the larger of the transformer's and the
 * projection's; backward: dy, dxs, dxt + the same. */
size_t attn_seq2seq_workspace_size(const attn_seq2seq *m, const attn_seq2seq_args *a) {
    if (!m || !a || a->batch < 1 || a->n_src < 1 || a->n_tgt < 1) return 0;
    const size_t d = (size_t)m->cfg.transformer.layer.d_model, B = (size_t)a->batch;
    attn_transformer_args t = transformer_args(a, NULL, NULL);
    size_t n = nn_fblock(nn_mul(nn_mul(B, (size_t)a->n_src), d));
    n = nn_add(n, nn_mul(2, nn_fblock(nn_mul(nn_mul(B, (size_t)a->n_tgt), d))));
    const size_t inner = nn_max(attn_transformer_workspace_size(m->tr, &t),
                                attn_nn_linear_ws(a->batch * a->n_tgt, (int64_t)d, m->cfg.tgt_vocab));
    return nn_add(nn_add(n, inner), NN_SLACK);
}

/* x [B, n, d] = emb[tokens] * sqrt(d) + pe[pos0 ..], then dropout; and its backward into the embedding */
static attn_status embed_at(const attn_embedding *e, const float *pe, int64_t max_len, int64_t d, float p,
                            const int64_t *tok, int64_t B, int64_t n, int64_t pos0, float *x, int training,
                            uint64_t seed, uint64_t offset) {
    attn_status st = attn_embedding_forward(e, tok, B * n, x);
    if (st) return st;
    const float sc = (float)sqrt((double)d);
    for (int64_t i = 0; i < B * n * d; i++) x[i] *= sc;
    if ((st = attn_posenc_add(x, pe, max_len, B, n, d, pos0))) return st;
    return nn_dropout_fwd(x, B * n * d, p, training, seed, offset);
}

static attn_status embed(const attn_embedding *e, const float *pe, int64_t max_len, int64_t d, float p,
                         const int64_t *tok, int64_t B, int64_t n, float *x, int training, uint64_t seed,
                         uint64_t offset) {
    return embed_at(e, pe, max_len, d, p, tok, B, n, 0, x, training, seed, offset);
}

static attn_status embed_backward(attn_embedding *e, int64_t d, float p, const int64_t *tok, int64_t B, int64_t n,
                                  float *dx, int training, uint64_t seed, uint64_t offset) {
    attn_status st = nn_dropout_bwd(dx, B * n * d, p, training, seed, offset);
    if (st) return st;
    const float sc = (float)sqrt((double)d);
    for (int64_t i = 0; i < B * n * d; i++) dx[i] *= sc;
    return attn_embedding_backward(e, tok, B * n, dx);
}

attn_status attn_seq2seq_forward(attn_seq2seq *m, const attn_seq2seq_args *a, float *logits, void *saved,
                                 size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_seq2seq_forward";
    attn_status st = check_args(fn, m, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, logits);
    const int64_t d = m->cfg.transformer.layer.d_model, B = a->batch;
    nn_arena ws, sv;
    if ((st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_seq2seq_workspace_size(m, a))))
        return st;
    if (saved && (st = attn_nn_arena_init(&sv, fn, "saved", saved, saved_bytes, attn_seq2seq_saved_size(m, a))))
        return st;
    nn_arena *keep = saved ? &sv : &ws; /* inference keeps the activations in the workspace */
    float *xs = nn_takef(keep, (size_t)(B * a->n_src * d)), *xt = nn_takef(keep, (size_t)(B * a->n_tgt * d)),
          *y = nn_takef(keep, (size_t)(B * a->n_tgt * d));
    const float p = m->cfg.transformer.layer.dropout;
    if ((st = embed(m->src_emb, m->pe, m->cfg.max_len, d, p, a->src, B, a->n_src, xs, a->training, a->seed,
                    pe_offset(m, a, 0))) ||
        (st = embed(m->tgt_emb, m->pe, m->cfg.max_len, d, p, a->tgt, B, a->n_tgt, xt, a->training, a->seed,
                    pe_offset(m, a, 1))))
        return attn_nn_wrap_error(st, fn);
    attn_transformer_args t = transformer_args(a, xs, xt);
    size_t rest_bytes, tsaved_bytes = 0;
    void *rest = nn_rest(&ws, &rest_bytes), *tsaved = saved ? nn_rest(&sv, &tsaved_bytes) : NULL;
    const size_t mark = attn_nn_capture_push(a->capture, "transformer.");
    st = attn_transformer_forward(m->tr, &t, y, tsaved, tsaved_bytes, rest, rest_bytes);
    attn_nn_capture_pop(a->capture, mark);
    if (st) return attn_nn_wrap_error(st, fn);
    if ((st = attn_nn_linear_fwd(fn, y, m->w, m->b, logits, B * a->n_tgt, d, m->cfg.tgt_vocab, rest, rest_bytes)))
        return st;
    return ATTN_OK;
}

attn_status attn_seq2seq_backward(attn_seq2seq *m, const attn_seq2seq_args *a, const float *dlogits, const void *saved,
                                  size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_seq2seq_backward";
    attn_status st = check_args(fn, m, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dlogits);
    ATTN_CHECK_NOT_NULL(fn, saved);
    const int64_t d = m->cfg.transformer.layer.d_model, B = a->batch;
    nn_arena ws, sv;
    if ((st =
             attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_seq2seq_workspace_size(m, a))) ||
        (st = attn_nn_arena_init(&sv, fn, "saved", (void *)saved, saved_bytes, attn_seq2seq_saved_size(m, a))))
        return st;
    const float *xs = nn_takef(&sv, (size_t)(B * a->n_src * d)), *xt = nn_takef(&sv, (size_t)(B * a->n_tgt * d)),
                *y = nn_takef(&sv, (size_t)(B * a->n_tgt * d));
    float *dy = nn_takef(&ws, (size_t)(B * a->n_tgt * d)), *dxs = nn_takef(&ws, (size_t)(B * a->n_src * d)),
          *dxt = nn_takef(&ws, (size_t)(B * a->n_tgt * d));
    size_t rest_bytes, tsaved_bytes;
    void *rest = nn_rest(&ws, &rest_bytes);
    const void *tsaved = nn_rest(&sv, &tsaved_bytes);
    if ((st = attn_nn_linear_bwd(fn, y, m->w, dlogits, dy, 0, m->gw, m->gb, B * a->n_tgt, d, m->cfg.tgt_vocab, rest,
                                 rest_bytes)))
        return st;
    attn_transformer_args t = transformer_args(a, xs, xt);
    if ((st = attn_transformer_backward(m->tr, &t, dy, dxs, dxt, tsaved, tsaved_bytes, rest, rest_bytes)))
        return attn_nn_wrap_error(st, fn);
    const float p = m->cfg.transformer.layer.dropout;
    if ((st = embed_backward(m->src_emb, d, p, a->src, B, a->n_src, dxs, a->training, a->seed, pe_offset(m, a, 0))) ||
        (st = embed_backward(m->tgt_emb, d, p, a->tgt, B, a->n_tgt, dxt, a->training, a->seed, pe_offset(m, a, 1))))
        return attn_nn_wrap_error(st, fn);
    return ATTN_OK;
}

/* ---- encode once, decode step by step ---------------------------------------------------------- */

/* workspace: xs, then the encoder's, with or without a key padding mask (the query has no mask
 * argument: it covers both). */
size_t attn_seq2seq_encode_workspace_size(const attn_seq2seq *m, int64_t batch, int64_t n_src) {
    if (!m || batch < 1 || n_src < 1) return 0;
    static const uint8_t any_mask = 0; /* only its presence matters to the size query */
    attn_layer_args l = attn_layer_args_default();
    l.batch = batch;
    l.n = n_src;
    const attn_encoder *e = attn_transformer_encoder(m->tr);
    size_t enc = attn_encoder_workspace_size(e, &l);
    l.self_masks.key_padding_mask = &any_mask;
    enc = nn_max(enc, attn_encoder_workspace_size(e, &l));
    const size_t rows = nn_mul(nn_mul((size_t)batch, (size_t)n_src), (size_t)m->cfg.transformer.layer.d_model);
    return nn_add(nn_add(nn_fblock(rows), enc), NN_SLACK);
}

attn_status attn_seq2seq_encode(attn_seq2seq *m, const int64_t *src, int64_t batch, int64_t n_src,
                                const uint8_t *src_key_padding_mask, float *memory, void *workspace,
                                size_t workspace_bytes) {
    static const char fn[] = "attn_seq2seq_encode";
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, src);
    ATTN_CHECK_NOT_NULL(fn, memory);
    if (batch < 1 || n_src < 1 || n_src > m->cfg.max_len)
        return attn_error(ATTN_ERR_SHAPE, "%s: batch = %lld, n_src = %lld must be >= 1 and n_src <= max_len %lld", fn,
                          (long long)batch, (long long)n_src, (long long)m->cfg.max_len);
    const int64_t d = m->cfg.transformer.layer.d_model;
    nn_arena ws;
    attn_status st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                        attn_seq2seq_encode_workspace_size(m, batch, n_src));
    if (st) return st;
    float *xs = nn_takef(&ws, (size_t)(batch * n_src * d));
    if ((st = embed(m->src_emb, m->pe, m->cfg.max_len, d, 0.0f, src, batch, n_src, xs, 0, 0, 0)))
        return attn_nn_wrap_error(st, fn);
    attn_layer_args l = attn_layer_args_default();
    l.batch = batch;
    l.n = n_src;
    l.x = xs;
    l.self_masks.key_padding_mask = src_key_padding_mask;
    size_t rb;
    void *rest = nn_rest(&ws, &rb);
    if ((st = attn_encoder_forward(attn_transformer_encoder(m->tr), &l, memory, NULL, 0, rest, rb)))
        return attn_nn_wrap_error(st, fn);
    return ATTN_OK;
}

struct attn_seq2seq_cache {
    const attn_seq2seq *model;
    int64_t batch, capacity, n_src;
    attn_decoder_cache *dec;
};

size_t attn_seq2seq_cache_size(const attn_seq2seq *m, int64_t batch, int64_t capacity, int64_t n_src) {
    if (!m || batch < 1 || capacity < 1 || n_src < 1) return 0;
    return nn_add(nn_add(NN_SLACK, nn_block(sizeof(attn_seq2seq_cache))),
                  attn_decoder_cache_size(attn_transformer_decoder(m->tr), batch, capacity, n_src));
}

/* step workspace: x, h, then the larger of the decoder step's and the projection's (the decoder
 * step's covers filling the cross-attention caches at init). */
size_t attn_seq2seq_step_workspace_size(const attn_seq2seq *m, int64_t batch, int64_t n, int64_t capacity,
                                        int64_t n_src) {
    if (!m || batch < 1 || n < 1 || capacity < 1 || n_src < 1) return 0;
    const int64_t d = m->cfg.transformer.layer.d_model;
    const size_t rows = nn_fblock(nn_mul(nn_mul((size_t)batch, (size_t)n), (size_t)d));
    const size_t sub =
        nn_max(attn_decoder_step_workspace_size(attn_transformer_decoder(m->tr), batch, n, capacity, n_src),
               attn_nn_linear_ws(batch * n, d, m->cfg.tgt_vocab));
    return nn_add(nn_add(NN_SLACK, nn_mul(2, rows)), sub);
}

attn_status attn_seq2seq_cache_init(attn_seq2seq *m, void *buffer, size_t bytes, int64_t batch, int64_t capacity,
                                    const float *memory, int64_t n_src, const uint8_t *src_key_padding_mask,
                                    void *workspace, size_t workspace_bytes, attn_seq2seq_cache **cache) {
    static const char fn[] = "attn_seq2seq_cache_init";
    ATTN_CHECK_NOT_NULL(fn, cache);
    *cache = NULL;
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, memory);
    if (batch < 1 || capacity < 1 || n_src < 1 || capacity > m->cfg.max_len || n_src > m->cfg.max_len)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: batch = %lld, capacity = %lld, n_src = %lld must be >= 1 and capacity, n_src <= "
                          "max_len %lld",
                          fn, (long long)batch, (long long)capacity, (long long)n_src, (long long)m->cfg.max_len);
    nn_arena ar, ws;
    attn_status st;
    if ((st = attn_nn_arena_init(&ar, fn, "cache buffer", buffer, bytes,
                                 attn_seq2seq_cache_size(m, batch, capacity, n_src))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                 attn_seq2seq_step_workspace_size(m, batch, 1, capacity, n_src))))
        return st;
    attn_seq2seq_cache *c = attn_nn_take(&ar, sizeof *c);
    c->model = m;
    c->batch = batch;
    c->capacity = capacity;
    c->n_src = n_src;
    size_t db, wb;
    void *dbuf = nn_rest(&ar, &db), *rest = nn_rest(&ws, &wb);
    if ((st = attn_decoder_cache_init(attn_transformer_decoder(m->tr), dbuf, db, batch, capacity, memory, n_src,
                                      src_key_padding_mask, rest, wb, &c->dec)))
        return attn_nn_wrap_error(st, fn);
    *cache = c;
    return ATTN_OK;
}

int64_t attn_seq2seq_cache_length(const attn_seq2seq_cache *cache) {
    return cache ? attn_decoder_cache_length(cache->dec) : 0;
}

attn_status attn_seq2seq_forward_step(attn_seq2seq *m, attn_seq2seq_cache *cache, const int64_t *tgt, int64_t n,
                                      float *logits, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_seq2seq_forward_step";
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, cache);
    ATTN_CHECK_NOT_NULL(fn, tgt);
    ATTN_CHECK_NOT_NULL(fn, logits);
    if (cache->model != m)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: the cache was initialised for another model", fn);
    const int64_t len = attn_decoder_cache_length(cache->dec), B = cache->batch, d = m->cfg.transformer.layer.d_model;
    if (n < 1 || len + n > cache->capacity)
        return attn_error(ATTN_ERR_SHAPE, "%s: n = %lld new positions after %lld do not fit the capacity %lld", fn,
                          (long long)n, (long long)len, (long long)cache->capacity);
    nn_arena ws;
    attn_status st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                        attn_seq2seq_step_workspace_size(m, B, n, cache->capacity, cache->n_src));
    if (st) return st;
    float *x = nn_takef(&ws, (size_t)(B * n * d)), *h = nn_takef(&ws, (size_t)(B * n * d));
    size_t rb;
    void *rest = nn_rest(&ws, &rb);
    if ((st = embed_at(m->tgt_emb, m->pe, m->cfg.max_len, d, 0.0f, tgt, B, n, len, x, 0, 0, 0)) ||
        (st = attn_decoder_forward_step(attn_transformer_decoder(m->tr), cache->dec, x, n, h, rest, rb)))
        return attn_nn_wrap_error(st, fn);
    return attn_nn_linear_fwd(fn, h, m->w, m->b, logits, B * n, d, m->cfg.tgt_vocab, rest, rb);
}

/* ---- attn_token_encoder ---------------------------------------------------------------------- */

struct attn_token_encoder {
    attn_token_encoder_config cfg;
    attn_embedding *emb;
    attn_encoder *enc;
    float *pe;
    attn_params *list;
};

attn_token_encoder_config attn_token_encoder_config_default(int64_t vocab, int64_t d_model, int64_t nhead,
                                                            int64_t num_layers) {
    attn_token_encoder_config c;
    memset(&c, 0, sizeof c);
    c.vocab = vocab;
    c.max_len = 5000;
    c.stack = attn_stack_config_default(d_model, nhead, num_layers);
    return c;
}

void attn_token_encoder_free(attn_token_encoder *m) {
    if (!m) return;
    attn_embedding_free(m->emb);
    attn_encoder_free(m->enc);
    attn_nn_params_free(m->list);
    attn__free(m->pe);
    attn__free(m);
}

attn_status attn_token_encoder_create(const attn_token_encoder_config *cfg, attn_token_encoder **out) {
    static const char fn[] = "attn_token_encoder_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, cfg);
    const int64_t d = cfg->stack.layer.d_model;
    if (cfg->vocab < 1 || cfg->max_len < 1 || d < 1 || cfg->max_len > (1 << 24))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: vocab = %lld, max_len = %lld, d_model = %lld must be >= 1 "
                          "(max_len <= 2^24)",
                          fn, (long long)cfg->vocab, (long long)cfg->max_len, (long long)d);
    attn_token_encoder *m = attn__calloc(1, sizeof *m);
    if (!m) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    m->cfg = *cfg;
    attn_status st;
    if ((st = attn_embedding_create(cfg->vocab, d, -1, &m->emb)) || (st = attn_encoder_create(&cfg->stack, &m->enc)))
        goto fail;
    m->pe = attn__malloc(sizeof(float) * (size_t)cfg->max_len * (size_t)d);
    m->list = attn_nn_params_new();
    if (!m->pe || !m->list) {
        st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto fail;
    }
    if ((st = attn_sinusoidal_table(m->pe, cfg->max_len, d)) ||
        (st = attn_nn_params_append(m->list, fn, attn_embedding_params(m->emb), "embedding.")) ||
        (st = attn_nn_params_append(m->list, fn, attn_encoder_params(m->enc), "")))
        goto fail;
    *out = m;
    return ATTN_OK;
fail:
    attn_token_encoder_free(m);
    return st;
}

const attn_params *attn_token_encoder_params(const attn_token_encoder *m) { return m ? m->list : NULL; }

static attn_status check_enc_args(const char *fn, const attn_token_encoder *m, const attn_token_encoder_args *a) {
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, a);
    if (a->batch < 1 || a->n < 1 || a->n > m->cfg.max_len)
        return attn_error(ATTN_ERR_SHAPE, "%s: batch = %lld, n = %lld must be >= 1 and n <= max_len %lld", fn,
                          (long long)a->batch, (long long)a->n, (long long)m->cfg.max_len);
    ATTN_CHECK_NOT_NULL(fn, a->tokens);
    return ATTN_OK;
}

static attn_layer_args enc_args(const attn_token_encoder_args *a, const float *x) {
    attn_layer_args l = attn_layer_args_default();
    l.batch = a->batch;
    l.n = a->n;
    l.x = x;
    l.self_masks.key_padding_mask = a->key_padding_mask;
    l.self_masks.is_causal = a->is_causal;
    NN_MODE_SET(&l, NN_MODE_OF(a));
    l.capture = a->capture;
    return l;
}

static uint64_t enc_pe_offset(const attn_token_encoder *m, const attn_token_encoder_args *a) {
    return nn_site_offset(a->offset, m->cfg.stack.num_layers, NN_SITE_POS_SRC);
}

/* saved: x, then the stack's; workspace: x (inference) or dx (backward), then the stack's. */
size_t attn_token_encoder_saved_size(const attn_token_encoder *m, const attn_token_encoder_args *a) {
    if (!m || !a || a->batch < 1 || a->n < 1) return 0;
    attn_layer_args l = enc_args(a, NULL);
    return nn_add(nn_add(nn_fblock(nn_mul(nn_mul((size_t)a->batch, (size_t)a->n), (size_t)m->cfg.stack.layer.d_model)),
                         attn_encoder_saved_size(m->enc, &l)),
                  NN_SLACK);
}

size_t attn_token_encoder_workspace_size(const attn_token_encoder *m, const attn_token_encoder_args *a) {
    if (!m || !a || a->batch < 1 || a->n < 1) return 0;
    attn_layer_args l = enc_args(a, NULL);
    return nn_add(nn_add(nn_fblock(nn_mul(nn_mul((size_t)a->batch, (size_t)a->n), (size_t)m->cfg.stack.layer.d_model)),
                         attn_encoder_workspace_size(m->enc, &l)),
                  NN_SLACK);
}

attn_status attn_token_encoder_forward(attn_token_encoder *m, const attn_token_encoder_args *a, float *out, void *saved,
                                       size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_token_encoder_forward";
    attn_status st = check_enc_args(fn, m, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, out);
    const int64_t d = m->cfg.stack.layer.d_model;
    nn_arena ws, sv;
    if ((st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                 attn_token_encoder_workspace_size(m, a))))
        return st;
    if (saved && (st = attn_nn_arena_init(&sv, fn, "saved", saved, saved_bytes, attn_token_encoder_saved_size(m, a))))
        return st;
    float *x = nn_takef(saved ? &sv : &ws, (size_t)(a->batch * a->n * d));
    if ((st = embed(m->emb, m->pe, m->cfg.max_len, d, m->cfg.stack.layer.dropout, a->tokens, a->batch, a->n, x,
                    a->training, a->seed, enc_pe_offset(m, a))))
        return attn_nn_wrap_error(st, fn);
    attn_layer_args l = enc_args(a, x);
    size_t rest_bytes, ssaved_bytes = 0;
    void *rest = nn_rest(&ws, &rest_bytes), *ssaved = saved ? nn_rest(&sv, &ssaved_bytes) : NULL;
    if ((st = attn_encoder_forward(m->enc, &l, out, ssaved, ssaved_bytes, rest, rest_bytes)))
        return attn_nn_wrap_error(st, fn);
    return ATTN_OK;
}

attn_status attn_token_encoder_backward(attn_token_encoder *m, const attn_token_encoder_args *a, const float *dout,
                                        const void *saved, size_t saved_bytes, void *workspace,
                                        size_t workspace_bytes) {
    static const char fn[] = "attn_token_encoder_backward";
    attn_status st = check_enc_args(fn, m, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, saved);
    const int64_t d = m->cfg.stack.layer.d_model;
    nn_arena ws, sv;
    if ((st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                 attn_token_encoder_workspace_size(m, a))) ||
        (st = attn_nn_arena_init(&sv, fn, "saved", (void *)saved, saved_bytes, attn_token_encoder_saved_size(m, a))))
        return st;
    const float *x = nn_takef(&sv, (size_t)(a->batch * a->n * d));
    float *dx = nn_takef(&ws, (size_t)(a->batch * a->n * d));
    attn_layer_args l = enc_args(a, x);
    size_t rest_bytes, ssaved_bytes;
    void *rest = nn_rest(&ws, &rest_bytes);
    const void *ssaved = nn_rest(&sv, &ssaved_bytes);
    if ((st = attn_encoder_backward(m->enc, &l, dout, dx, ssaved, ssaved_bytes, rest, rest_bytes)) ||
        (st = embed_backward(m->emb, d, m->cfg.stack.layer.dropout, a->tokens, a->batch, a->n, dx, a->training, a->seed,
                             enc_pe_offset(m, a))))
        return attn_nn_wrap_error(st, fn);
    return ATTN_OK;
}
