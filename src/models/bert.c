/* The BERT family (transformers' BertModel), built from the library's modules:
 *   x = LayerNorm(word_embeddings[id] + position_embeddings[t] + token_type_embeddings[type])
 *   h = encoder(x)   num_hidden_layers post-norm layers = nn.TransformerEncoderLayer(norm_first =
 *                    False, activation gelu (erf) / gelu's tanh form / relu, layer_norm_eps), the
 *                    key padding mask hiding each row's padding; no final norm.
 * BertLayer's weights go to the layer's parameters: attention.self.{query,key,value} into the
 * three row blocks of self_attn.in_proj_weight / in_proj_bias, attention.output.dense ->
 * self_attn.out_proj, attention.output.LayerNorm -> norm1, intermediate.dense -> linear1,
 * output.dense -> linear2, output.LayerNorm -> norm2. Dropout is inactive (inference). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/kernels.h"
#include "attn/layers.h"
#include "core/alloc.h"
#include "core/internal.h"
#include "models_internal.h"

typedef struct bert_config {
    int64_t vocab, hidden, layers, heads, inter, positions, types;
    double eps;
    attn_activation act;
} bert_config;

typedef struct bert {
    bert_config c;
    float *word, *pos, *type, *ln_w, *ln_b; /* embeddings and their LayerNorm */
    attn_encoder *enc;
    void *ws; /* x [B, n, H], the key padding mask [B, n], the encoder's workspace */
    size_t ws_bytes;
    attn_capture *capture; /* attn_pretrained_capture's, for one hidden-states call */
    hf_precision prec;     /* of the encoder's products (attn_pretrained_set_precision) */
} bert;

/* Options attn does not run must hold their defaults. */
static attn_status check_options(const hf_folder *f) {
    const char *pe = NULL;
    attn_status st = attn_hf_config_string(f, "position_embedding_type", "absolute", &pe);
    if (st) return st;
    if (strcmp(pe, "absolute") != 0)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: key 'position_embedding_type' is \"%.60s\" (attn runs absolute)",
                          f->config_path, pe);
    static const char *const off[] = {"is_decoder", "add_cross_attention"};
    for (int i = 0; i < 2; i++) {
        int v = 0;
        st = attn_hf_config_bool(f, off[i], 0, &v);
        if (st) return st;
        if (v)
            return attn_error(ATTN_ERR_UNSUPPORTED, "%s: key '%s' is true (attn runs BERT as an encoder only)",
                              f->config_path, off[i]);
    }
    return ATTN_OK;
}

static attn_status read_config(const hf_folder *f, bert_config *c) {
    const int64_t big = (int64_t)1 << 24;
    attn_status st = attn_hf_config_int(f, "vocab_size", 1, 0, 1, INT32_MAX, &c->vocab);
    if (!st) st = attn_hf_config_int(f, "hidden_size", 1, 0, 1, big, &c->hidden);
    if (!st) st = attn_hf_config_int(f, "num_hidden_layers", 1, 0, 1, big, &c->layers);
    if (!st) st = attn_hf_config_int(f, "num_attention_heads", 1, 0, 1, c->hidden, &c->heads);
    if (!st) st = attn_hf_config_int(f, "intermediate_size", 1, 0, 1, big, &c->inter);
    if (!st) st = attn_hf_config_int(f, "max_position_embeddings", 1, 0, 1, big, &c->positions);
    if (!st) st = attn_hf_config_int(f, "type_vocab_size", 0, 2, 1, big, &c->types);
    if (!st) st = attn_hf_config_number(f, "layer_norm_eps", 1e-12, &c->eps);
    if (!st && !(c->eps > 0 && c->eps < 1))
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'layer_norm_eps' must be in (0, 1) (got %g)",
                        f->config_path, c->eps);
    if (!st && c->hidden % c->heads)
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT,
                        "%s: key 'hidden_size' (%lld) is not a multiple of 'num_attention_heads' (%lld)",
                        f->config_path, (long long)c->hidden, (long long)c->heads);
    if (!st) st = attn_hf_config_activation(f, &c->act);
    if (!st) st = check_options(f);
    return st;
}

/* "bert." when the weights are a BertFor* checkpoint's, "" for BertModel's. */
static const char *weights_prefix(const hf_folder *f) {
    if (!attn_hf_tensor(f, "embeddings.word_embeddings.weight", NULL) &&
        attn_hf_tensor(f, "bert.embeddings.word_embeddings.weight", NULL))
        return "bert.";
    return "";
}

static int ignore_tensor(const char *name, void *ctx) {
    const char *prefix = ctx;
    size_t pl = strlen(prefix);
    if (pl && strncmp(name, prefix, pl) != 0) return 1; /* a BertFor* task head */
    name += pl;
    return strncmp(name, "pooler.dense.", 13) == 0 || strcmp(name, "embeddings.position_ids") == 0;
}

/* One layer's sixteen tensors: (HF suffix, attn parameter, row block of in_proj or -1, rows,
 * cols as multiples of H or I: 'H', 'I', '-' for rank 1). */
typedef struct layer_map {
    const char *hf, *ours;
    int block;
    char rows, cols;
    const char *keys;
} layer_map;

static const layer_map LAYER[] = {
    {"attention.self.query.weight", "self_attn.in_proj_weight", 0, 'H', 'H', "hidden_size x hidden_size"},
    {"attention.self.query.bias", "self_attn.in_proj_bias", 0, 'H', '-', "hidden_size"},
    {"attention.self.key.weight", "self_attn.in_proj_weight", 1, 'H', 'H', "hidden_size x hidden_size"},
    {"attention.self.key.bias", "self_attn.in_proj_bias", 1, 'H', '-', "hidden_size"},
    {"attention.self.value.weight", "self_attn.in_proj_weight", 2, 'H', 'H', "hidden_size x hidden_size"},
    {"attention.self.value.bias", "self_attn.in_proj_bias", 2, 'H', '-', "hidden_size"},
    {"attention.output.dense.weight", "self_attn.out_proj.weight", -1, 'H', 'H', "hidden_size x hidden_size"},
    {"attention.output.dense.bias", "self_attn.out_proj.bias", -1, 'H', '-', "hidden_size"},
    {"attention.output.LayerNorm.weight", "norm1.weight", -1, 'H', '-', "hidden_size"},
    {"attention.output.LayerNorm.bias", "norm1.bias", -1, 'H', '-', "hidden_size"},
    {"intermediate.dense.weight", "linear1.weight", -1, 'I', 'H', "intermediate_size x hidden_size"},
    {"intermediate.dense.bias", "linear1.bias", -1, 'I', '-', "intermediate_size"},
    {"output.dense.weight", "linear2.weight", -1, 'H', 'I', "hidden_size x intermediate_size"},
    {"output.dense.bias", "linear2.bias", -1, 'H', '-', "hidden_size"},
    {"output.LayerNorm.weight", "norm2.weight", -1, 'H', '-', "hidden_size"},
    {"output.LayerNorm.bias", "norm2.bias", -1, 'H', '-', "hidden_size"},
};
#define LAYER_TENSORS (sizeof LAYER / sizeof LAYER[0])
#define EMB_TENSORS 5

static int64_t dim_of(char d, const bert_config *c) { return d == 'H' ? c->hidden : c->inter; }

/* The needs' names and shapes (destinations are set once the model is allocated). */
static attn_status make_needs(const bert_config *c, const char *prefix, hf_need **out, size_t *count) {
    size_t n = EMB_TENSORS + (size_t)c->layers * LAYER_TENSORS;
    hf_need *needs = attn__calloc(n, sizeof *needs);
    if (!needs) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    static const char *const emb[EMB_TENSORS] = {"word_embeddings.weight", "position_embeddings.weight",
                                                 "token_type_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias"};
    const int64_t rows[EMB_TENSORS] = {c->vocab, c->positions, c->types, c->hidden, c->hidden};
    static const char *const keys[EMB_TENSORS] = {"vocab_size x hidden_size", "max_position_embeddings x hidden_size",
                                                  "type_vocab_size x hidden_size", "hidden_size", "hidden_size"};
    char name[160];
    for (size_t i = 0; i < n; i++) {
        hf_need *q = &needs[i];
        if (i < EMB_TENSORS) {
            snprintf(name, sizeof name, "%sembeddings.%s", prefix, emb[i]);
            q->rank = i < 3 ? 2 : 1;
            q->shape[0] = rows[i];
            q->shape[1] = c->hidden;
            q->keys = keys[i];
        } else {
            size_t l = (i - EMB_TENSORS) / LAYER_TENSORS;
            const layer_map *t = &LAYER[(i - EMB_TENSORS) % LAYER_TENSORS];
            snprintf(name, sizeof name, "%sencoder.layer.%zu.%s", prefix, l, t->hf);
            q->rank = t->cols == '-' ? 1 : 2;
            q->shape[0] = dim_of(t->rows, c);
            q->shape[1] = t->cols == '-' ? 0 : dim_of(t->cols, c);
            q->keys = t->keys;
        }
        if (!(q->name = attn__strdup(name))) {
            attn_hf_needs_free(needs, n);
            return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
        }
    }
    *out = needs;
    *count = n;
    return ATTN_OK;
}

static void bert_free(void *impl) {
    bert *b = impl;
    if (!b) return;
    attn__free(b->word);
    attn__free(b->pos);
    attn__free(b->type);
    attn__free(b->ln_w);
    attn__free(b->ln_b);
    attn_encoder_free(b->enc);
    attn__free(b->ws);
    attn__free(b);
}

/* Allocate the model and point every need at its destination. */
static attn_status bert_alloc(const bert_config *c, hf_need *needs, bert **out) {
    bert *b = attn__calloc(1, sizeof *b);
    if (!b) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    b->c = *c;
    size_t H = (size_t)c->hidden;
    b->word = attn__malloc((size_t)c->vocab * H * sizeof(float));
    b->pos = attn__malloc((size_t)c->positions * H * sizeof(float));
    b->type = attn__malloc((size_t)c->types * H * sizeof(float));
    b->ln_w = attn__malloc(H * sizeof(float));
    b->ln_b = attn__malloc(H * sizeof(float));
    attn_stack_config sc = attn_stack_config_default(c->hidden, c->heads, c->layers);
    sc.norm = 0;
    sc.layer.dim_feedforward = c->inter;
    sc.layer.dropout = 0;
    sc.layer.activation = c->act;
    sc.layer.layer_norm_eps = (float)c->eps;
    attn_status st = b->word && b->pos && b->type && b->ln_w && b->ln_b
                         ? attn_encoder_create(&sc, &b->enc)
                         : attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    float *emb[EMB_TENSORS] = {b->word, b->pos, b->type, b->ln_w, b->ln_b};
    for (int i = 0; !st && i < EMB_TENSORS; i++) needs[i].dst = emb[i];
    const attn_params *ps = st ? NULL : attn_encoder_params(b->enc);
    for (int64_t l = 0; !st && l < c->layers; l++)
        for (size_t k = 0; !st && k < LAYER_TENSORS; k++) {
            char name[96];
            snprintf(name, sizeof name, "layers.%lld.%s", (long long)l, LAYER[k].ours);
            const attn_param *p = attn_params_find(ps, name);
            if (!p)
                st = attn_error(ATTN_ERR_NOT_FOUND, "attn_pretrained_open: the encoder has no parameter '%s'", name);
            else
                needs[EMB_TENSORS + (size_t)l * LAYER_TENSORS + k].dst =
                    p->data + (LAYER[k].block < 0 ? 0
                                                  : (size_t)LAYER[k].block * (size_t)c->hidden *
                                                        (LAYER[k].cols == '-' ? 1 : (size_t)c->hidden));
        }
    if (st) {
        bert_free(b);
        return st;
    }
    *out = b;
    return ATTN_OK;
}

/* x = LayerNorm(word + position + token type) for real tokens, 0 for padding; mask 1 = padding. */
static attn_status embed(const bert *b, const int32_t *ids, const int32_t *types, const int64_t *lengths, int64_t B,
                         int64_t n, float *x, uint8_t *mask) {
    int64_t H = b->c.hidden;
    for (int64_t r = 0; r < B; r++)
        for (int64_t t = 0; t < n; t++) {
            float *y = x + (r * n + t) * H;
            mask[r * n + t] = t >= lengths[r];
            if (t >= lengths[r]) {
                memset(y, 0, (size_t)H * sizeof(float));
                continue;
            }
            const float *w = b->word + (int64_t)ids[r * n + t] * H, *p = b->pos + t * H;
            const float *ty = b->type + (types ? (int64_t)types[r * n + t] : 0) * H;
            for (int64_t j = 0; j < H; j++) y[j] = w[j] + ty[j] + p[j];
        }
    return attn_layernorm_forward(x, b->ln_w, b->ln_b, x, NULL, NULL, B * n, H, (float)b->c.eps);
}

/* A right-padded batch packed (layers.h cu_seqlens): only its `total` real tokens are embedded
 * (positions restarting at 0 per row) and run through the encoder, whose rows are each bitwise the
 * row run alone; out's first total rows take them, then each row moves to its padded place, last
 * first (a destination never precedes its source), padding zeroed. */
static attn_status bert_hidden_packed(bert *b, const int32_t *ids, const int32_t *types, const int64_t *lengths,
                                      int64_t B, int64_t n, int64_t total, float *out) {
    const int64_t H = b->c.hidden;
    int64_t *cu = attn__malloc((size_t)(B + 1) * sizeof(int64_t));
    if (!cu) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_hidden_states: out of memory");
    cu[0] = 0;
    for (int64_t r = 0; r < B; r++) cu[r + 1] = cu[r] + lengths[r];
    attn_layer_args a = attn_layer_args_default();
    a.batch = B;
    a.n = total;
    a.cu_seqlens = cu;
    const size_t xs = (size_t)total * (size_t)H * sizeof(float), wsz = attn_encoder_workspace_size(b->enc, &a);
    attn_status st = ATTN_OK;
    if (!wsz)
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_pretrained_hidden_states: the packed encoder: %s",
                        attn_last_error());
    if (!st && xs + wsz > b->ws_bytes) {
        void *w = attn__realloc(b->ws, xs + wsz);
        if (!w)
            st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_hidden_states: out of memory");
        else
            b->ws = w, b->ws_bytes = xs + wsz;
    }
    float *x = b->ws;
    for (int64_t r = 0; !st && r < B; r++)
        for (int64_t t = 0; t < lengths[r]; t++) {
            const float *w = b->word + (int64_t)ids[r * n + t] * H, *p = b->pos + t * H;
            const float *ty = b->type + (types ? (int64_t)types[r * n + t] : 0) * H;
            float *y = x + (cu[r] + t) * H;
            for (int64_t j = 0; j < H; j++) y[j] = w[j] + ty[j] + p[j];
        }
    if (!st) st = attn_layernorm_forward(x, b->ln_w, b->ln_b, x, NULL, NULL, total, H, (float)b->c.eps);
    a.x = x;
    if (!st) st = attn_encoder_forward(b->enc, &a, out, NULL, 0, (char *)b->ws + xs, b->ws_bytes - xs);
    for (int64_t r = B - 1; !st && r >= 0; r--) {
        memmove(out + r * n * H, out + cu[r] * H, (size_t)(lengths[r] * H) * sizeof(float));
        memset(out + (r * n + lengths[r]) * H, 0, (size_t)((n - lengths[r]) * H) * sizeof(float));
    }
    attn__free(cu);
    return st;
}

/* The encoder's hidden states, in the model's precision (pretrained.c installs it and the packed
 * bf16 weights for the call: attn_hf_call_hidden). */
static attn_status bert_hidden(void *impl, const int32_t *ids, const int32_t *types, const int64_t *lengths, int64_t B,
                               int64_t n, float *out) {
    bert *b = impl;
    int64_t total = 0;
    for (int64_t r = 0; r < B; r++) total += lengths[r];
    /* Padding costs nothing packed; a capture records [B, H, n, n] maps, so it runs padded. */
    if (total < B * n && !b->capture) return bert_hidden_packed(b, ids, types, lengths, B, n, total, out);
    size_t xs = (size_t)(B * n) * (size_t)b->c.hidden * sizeof(float), ms = ((size_t)(B * n) + 63) & ~(size_t)63;
    attn_layer_args a = attn_layer_args_default();
    a.batch = B;
    a.n = n;
    /* Rows without padding need no mask: attention then skips the mask's reads and tests. */
    const int padded = total < B * n;
    static const uint8_t some_mask = 0;
    a.self_masks.key_padding_mask = padded ? &some_mask : NULL; /* the size query sees whether a mask is used */
    size_t need = xs + ms + attn_encoder_workspace_size(b->enc, &a);
    if (need > b->ws_bytes) {
        void *w = attn__realloc(b->ws, need);
        if (!w) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_hidden_states: out of memory");
        b->ws = w;
        b->ws_bytes = need;
    }
    float *x = b->ws;
    uint8_t *mask = (uint8_t *)b->ws + xs;
    attn_status st = embed(b, ids, types, lengths, B, n, x, mask);
    if (st) return st;
    a.x = x;
    if (padded) a.self_masks.key_padding_mask = mask;
    a.capture = b->capture;
    st = attn_encoder_forward(b->enc, &a, out, NULL, 0, (char *)b->ws + xs + ms, need - xs - ms);
    if (st) return st;
    for (int64_t r = 0; r < B; r++)
        memset(out + (r * n + lengths[r]) * b->c.hidden, 0, (size_t)((n - lengths[r]) * b->c.hidden) * sizeof(float));
    return ATTN_OK;
}

/* Per layer and token: Q, K, V and the output projection (4 H^2 multiply-adds), the feed-forward
 * (2 H I), and attention's scores and weighted sum over the row's n keys (2 n H). */
static double bert_flops(const void *impl, int64_t B, int64_t n, int64_t past) {
    const bert_config *c = &((const bert *)impl)->c;
    const double H = (double)c->hidden, I = (double)c->inter, keys = (double)(n + past);
    return 2.0 * (double)c->layers * (double)B * (double)n * (4 * H * H + 2 * H * I + 2 * keys * H);
}

attn_status attn_hf_bert_open(const hf_folder *f, attn_pretrained *m) {
    bert_config c;
    attn_status st = read_config(f, &c);
    if (st) return st;
    const char *prefix = weights_prefix(f);
    st = attn_hf_check_layer_count(f, prefix, "encoder.layer.", ".output.dense.weight", "num_hidden_layers", c.layers);
    if (st) return st;
    hf_need *needs = NULL;
    size_t n = 0;
    st = make_needs(&c, prefix, &needs, &n);
    if (st) return st;
    bert *b = NULL;
    st = attn_hf_check(f, needs, n, ignore_tensor, (void *)prefix);
    if (!st) st = bert_alloc(&c, needs, &b);
    if (!st) st = attn_hf_load(f, needs, n);
    attn_hf_needs_free(needs, n);
    if (st) {
        bert_free(b);
        return st;
    }
    m->impl = b;
    m->hidden_states = bert_hidden;
    m->capture_slot = &b->capture;
    m->free_impl = bert_free;
    m->prec = &b->prec;
    m->flops = bert_flops;
    m->hidden = c.hidden;
    m->vocab = c.vocab;
    m->max_positions = c.positions;
    m->type_vocab = c.types;
    return ATTN_OK;
}
