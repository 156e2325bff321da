/* The GPT-2 family (transformers' GPT2Model / GPT2LMHeadModel), built as an attn_gpt (gpt.h):
 *   x = wte[id] + wpe[t]
 *   x = x + attn(ln_1 x) (causal), x = x + mlp(ln_2 x)   n_layer pre-norm blocks, gelu_new
 *   logits = ln_f(x) wte^T                                the LM head tied to wte
 * GPT-2's Conv1D layers store their weight as [in, out], the transpose of nn.Linear's: c_attn
 * ([n_embd, 3 n_embd], q, k, v along out) is read transposed into self_attn.in_proj_weight, c_proj
 * into out_proj, mlp.c_fc into linear1 and mlp.c_proj into linear2; ln_1 -> norm1, ln_2 -> norm2,
 * ln_f -> norm, wte -> tok_emb, wpe -> pos_emb. Weights are named as GPT2Model saves them or under
 * "transformer." (GPT2LMHeadModel). A stored lm_head.weight must equal wte (checked after loading);
 * the attention's non-persistent buffers of old checkpoints (attn.bias, attn.masked_bias) are
 * ignored. Dropout is inactive (inference). A right-padded logits batch runs packed (attn_gpt's
 * cu_seqlens): its real tokens only, each row bitwise its row alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/gpt.h"
#include "core/alloc.h"
#include "core/internal.h"
#include "models_internal.h"
#include "nn/nn_internal.h"

typedef struct gpt2_config {
    int64_t vocab, hidden, layers, heads, inter, positions;
    double eps;
} gpt2_config;

typedef struct gpt2 {
    gpt2_config c;
    attn_gpt *g;
    void *ws; /* forward / step workspace */
    size_t ws_bytes;
    int64_t *tok; /* ids as int64 */
    size_t tok_cap;
    void *cache_buf; /* generation: one sequence of capacity n_positions */
    attn_gpt_cache *cache;
    float *chunk;          /* a prompt chunk's logits [GPT2_CHUNK, vocab] */
    attn_capture *capture; /* attn_pretrained_capture's, for one logits call */
    hf_precision prec;     /* of the products (attn_pretrained_set_precision) */
} gpt2;

#define GPT2_CHUNK 32 /* prompt tokens per cached step */

/* Options attn does not run must hold their defaults. */
static attn_status check_options(const hf_folder *f) {
    const char *act = NULL;
    attn_status st = attn_hf_config_string(f, "activation_function", "gelu_new", &act);
    if (st) return st;
    if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: key 'activation_function' is \"%.60s\" (attn runs gelu_new, gelu_pytorch_tanh)",
                          f->config_path, act);
    static const char *const off[] = {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                                      "add_cross_attention"};
    for (int i = 0; i < 3; i++) {
        int v = 0;
        if ((st = attn_hf_config_bool(f, off[i], 0, &v))) return st;
        if (v)
            return attn_error(ATTN_ERR_UNSUPPORTED, "%s: key '%s' is true (attn runs GPT-2 without it)", f->config_path,
                              off[i]);
    }
    int scale = 1, tie = 1;
    if ((st = attn_hf_config_bool(f, "scale_attn_weights", 1, &scale))) return st;
    if (!scale)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: key 'scale_attn_weights' is false (attn scales by 1/sqrt(d))",
                          f->config_path);
    if ((st = attn_hf_config_bool(f, "tie_word_embeddings", 1, &tie))) return st;
    if (!tie)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: key 'tie_word_embeddings' is false (attn runs GPT-2's LM head tied to wte)",
                          f->config_path);
    return ATTN_OK;
}

static attn_status read_config(const hf_folder *f, gpt2_config *c) {
    const int64_t big = (int64_t)1 << 24;
    attn_status st = attn_hf_config_int(f, "vocab_size", 1, 0, 1, INT32_MAX, &c->vocab);
    if (!st) st = attn_hf_config_int(f, "n_embd", 1, 0, 1, big, &c->hidden);
    if (!st) st = attn_hf_config_int(f, "n_layer", 1, 0, 1, big, &c->layers);
    if (!st) st = attn_hf_config_int(f, "n_head", 1, 0, 1, c->hidden, &c->heads);
    if (!st) st = attn_hf_config_int(f, "n_inner", 0, 4 * c->hidden, 1, big, &c->inter);
    if (!st) st = attn_hf_config_int(f, "n_positions", 1, 0, 1, big, &c->positions);
    if (!st) st = attn_hf_config_number(f, "layer_norm_epsilon", 1e-5, &c->eps);
    if (!st && !(c->eps > 0 && c->eps < 1))
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'layer_norm_epsilon' must be in (0, 1) (got %g)",
                        f->config_path, c->eps);
    if (!st && c->hidden % c->heads)
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'n_embd' (%lld) is not a multiple of 'n_head' (%lld)",
                        f->config_path, (long long)c->hidden, (long long)c->heads);
    if (!st) st = check_options(f);
    return st;
}

/* "transformer." when the weights are GPT2LMHeadModel's, "" for GPT2Model's. */
static const char *weights_prefix(const hf_folder *f) {
    if (!attn_hf_tensor(f, "wte.weight", NULL) && attn_hf_tensor(f, "transformer.wte.weight", NULL))
        return "transformer.";
    return "";
}

/* lm_head.weight (checked against wte after loading) and the attention's old buffers. */
static int ignore_tensor(const char *name, void *ctx) {
    const char *prefix = ctx;
    if (strcmp(name, "lm_head.weight") == 0) return 1;
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0 || strncmp(name + pl, "h.", 2) != 0) return 0;
    const char *dot = strchr(name + pl + 2, '.');
    return dot && (strcmp(dot, ".attn.bias") == 0 || strcmp(dot, ".attn.masked_bias") == 0);
}

/* One block's tensors: (HF suffix, attn parameter, stored shape as multiples: 'H' n_embd, '3'
 * 3 n_embd, 'I' n_inner, '-' rank 1; transposed on load). */
typedef struct layer_map {
    const char *hf, *ours;
    char rows, cols;
    int transpose;
    const char *keys;
} layer_map;

static const layer_map LAYER[] = {
    {"ln_1.weight", "norm1.weight", 'H', '-', 0, "n_embd"},
    {"ln_1.bias", "norm1.bias", 'H', '-', 0, "n_embd"},
    {"attn.c_attn.weight", "self_attn.in_proj_weight", 'H', '3', 1, "n_embd x 3 n_embd"},
    {"attn.c_attn.bias", "self_attn.in_proj_bias", '3', '-', 0, "3 n_embd"},
    {"attn.c_proj.weight", "self_attn.out_proj.weight", 'H', 'H', 1, "n_embd x n_embd"},
    {"attn.c_proj.bias", "self_attn.out_proj.bias", 'H', '-', 0, "n_embd"},
    {"ln_2.weight", "norm2.weight", 'H', '-', 0, "n_embd"},
    {"ln_2.bias", "norm2.bias", 'H', '-', 0, "n_embd"},
    {"mlp.c_fc.weight", "linear1.weight", 'H', 'I', 1, "n_embd x n_inner"},
    {"mlp.c_fc.bias", "linear1.bias", 'I', '-', 0, "n_inner"},
    {"mlp.c_proj.weight", "linear2.weight", 'I', 'H', 1, "n_inner x n_embd"},
    {"mlp.c_proj.bias", "linear2.bias", 'H', '-', 0, "n_embd"},
};
#define LAYER_TENSORS (sizeof LAYER / sizeof LAYER[0])
#define OUTER_TENSORS 4 /* wte, wpe, ln_f.weight, ln_f.bias */

static const char *const OUTER_HF[OUTER_TENSORS] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};
static const char *const OUTER_OURS[OUTER_TENSORS] = {"tok_emb.weight", "pos_emb.weight", "norm.weight", "norm.bias"};

static int64_t dim_of(char d, const gpt2_config *c) {
    return d == 'H' ? c->hidden : d == '3' ? 3 * c->hidden : c->inter;
}

/* The needs' names and stored shapes (destinations are set once the model is allocated). */
static attn_status make_needs(const gpt2_config *c, const char *prefix, hf_need **out, size_t *count) {
    size_t n = OUTER_TENSORS + (size_t)c->layers * LAYER_TENSORS;
    hf_need *needs = attn__calloc(n, sizeof *needs);
    if (!needs) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    const int64_t rows[OUTER_TENSORS] = {c->vocab, c->positions, c->hidden, c->hidden};
    static const char *const keys[OUTER_TENSORS] = {"vocab_size x n_embd", "n_positions x n_embd", "n_embd", "n_embd"};
    char name[160];
    for (size_t i = 0; i < n; i++) {
        hf_need *q = &needs[i];
        if (i < OUTER_TENSORS) {
            snprintf(name, sizeof name, "%s%s", prefix, OUTER_HF[i]);
            q->rank = i < 2 ? 2 : 1;
            q->shape[0] = rows[i];
            q->shape[1] = i < 2 ? c->hidden : 0;
            q->keys = keys[i];
        } else {
            size_t l = (i - OUTER_TENSORS) / LAYER_TENSORS;
            const layer_map *t = &LAYER[(i - OUTER_TENSORS) % LAYER_TENSORS];
            snprintf(name, sizeof name, "%sh.%zu.%s", prefix, l, t->hf);
            q->rank = t->cols == '-' ? 1 : 2;
            q->shape[0] = dim_of(t->rows, c);
            q->shape[1] = t->cols == '-' ? 0 : dim_of(t->cols, c);
            q->transpose = t->transpose;
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

static void gpt2_free(void *impl) {
    gpt2 *m = impl;
    if (!m) return;
    attn_gpt_free(m->g);
    attn__free(m->ws);
    attn__free(m->tok);
    attn__free(m->cache_buf);
    attn__free(m->chunk);
    attn__free(m);
}

static attn_status find_param(const attn_params *ps, const char *name, float **dst) {
    const attn_param *p = attn_params_find(ps, name);
    if (!p) return attn_error(ATTN_ERR_NOT_FOUND, "attn_pretrained_open: the GPT has no parameter '%s'", name);
    *dst = p->data;
    return ATTN_OK;
}

/* Allocate the model and point every need at its destination. */
static attn_status gpt2_alloc(const gpt2_config *c, hf_need *needs, gpt2 **out) {
    gpt2 *m = attn__calloc(1, sizeof *m);
    if (!m) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    m->c = *c;
    attn_gpt_config gc = attn_gpt_config_default(c->vocab, c->positions, c->hidden, c->heads, c->layers);
    gc.layer.dim_feedforward = c->inter;
    gc.layer.dropout = 0;
    gc.layer.activation = ATTN_ACTIVATION_GELU_TANH;
    gc.layer.layer_norm_eps = (float)c->eps;
    gc.norm_eps = (float)c->eps;
    gc.tie_embeddings = 1;
    attn_status st = attn_gpt_create(&gc, &m->g);
    const attn_params *ps = st ? NULL : attn_gpt_params(m->g);
    for (int i = 0; !st && i < OUTER_TENSORS; i++) st = find_param(ps, OUTER_OURS[i], &needs[i].dst);
    for (int64_t l = 0; !st && l < c->layers; l++)
        for (size_t k = 0; !st && k < LAYER_TENSORS; k++) {
            char name[96];
            snprintf(name, sizeof name, "layers.%lld.%s", (long long)l, LAYER[k].ours);
            st = find_param(ps, name, &needs[OUTER_TENSORS + (size_t)l * LAYER_TENSORS + k].dst);
        }
    if (st) {
        gpt2_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

/* A stored lm_head.weight must be the tied wte (as transformers ties it on load). */
static attn_status check_lm_head(const hf_folder *f, const gpt2 *m, const float *wte) {
    size_t k = 0;
    const attn_safetensors_tensor *t = attn_hf_tensor(f, "lm_head.weight", &k);
    if (!t) return ATTN_OK;
    const int64_t shape[2] = {m->c.vocab, m->c.hidden};
    const size_t count = (size_t)(m->c.vocab * m->c.hidden);
    float *w = attn__malloc(count * sizeof(float));
    if (!w) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory (lm_head.weight)");
    attn_status st = attn_safetensors_read_f32_shape(f->shards[k], "lm_head.weight", w, 2, shape);
    if (st) {
        char why[400];
        snprintf(why, sizeof why, "%s", attn_last_error());
        st = attn_error(st, "%s: %s", f->shard_paths[k], why);
    } else if (memcmp(w, wte, count * sizeof(float)) != 0) {
        st = attn_error(ATTN_ERR_UNSUPPORTED,
                        "%s: tensor 'lm_head.weight' differs from wte.weight (attn runs GPT-2's LM head tied to wte, "
                        "key 'tie_word_embeddings')",
                        f->shard_paths[k]);
    }
    attn__free(w);
    return st;
}

/* Room for the workspace and the ids of a call. */
static attn_status reserve(gpt2 *m, size_t ws_bytes, size_t ids) {
    if (ws_bytes > m->ws_bytes) {
        void *w = attn__realloc(m->ws, ws_bytes);
        if (!w) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained: out of memory (%zu bytes)", ws_bytes);
        m->ws = w;
        m->ws_bytes = ws_bytes;
    }
    if (ids > m->tok_cap) {
        int64_t *t = attn__realloc(m->tok, ids * sizeof *t);
        if (!t) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained: out of memory (%zu ids)", ids);
        m->tok = t;
        m->tok_cap = ids;
    }
    return ATTN_OK;
}

/* Logits of every position; right padding (ids not read, as 0) cannot reach a real position
 * through the causal mask, and its rows of out are set to 0. */
static attn_status logits_padded(gpt2 *m, const int32_t *ids, const int64_t *lengths, int64_t B, int64_t n,
                                 float *out) {
    attn_gpt_args a = {0};
    a.batch = B;
    a.n = n;
    attn_status st = reserve(m, attn_gpt_workspace_size(m->g, &a), (size_t)(B * n));
    if (st) return st;
    for (int64_t r = 0; r < B; r++)
        for (int64_t t = 0; t < n; t++) m->tok[r * n + t] = t < lengths[r] ? ids[r * n + t] : 0;
    a.tokens = m->tok;
    a.capture = m->capture;
    st = attn_gpt_forward(m->g, &a, out, NULL, 0, m->ws, m->ws_bytes);
    if (st) return st;
    const int64_t V = m->c.vocab;
    for (int64_t r = 0; r < B; r++)
        memset(out + (r * n + lengths[r]) * V, 0, (size_t)((n - lengths[r]) * V) * sizeof(float));
    return ATTN_OK;
}

/* A right-padded batch packed (attn_gpt_args' cu_seqlens in cu [B + 1]): only the total real
 * tokens run, each row bitwise its row alone; the logits are computed into out's first total
 * rows, then moved to their padded places last sequence first (a destination never precedes its
 * source) and the padding rows zeroed. */
static attn_status logits_packed(gpt2 *m, const int32_t *ids, const int64_t *lengths, int64_t B, int64_t n,
                                 int64_t total, int64_t *cu, float *out) {
    cu[0] = 0;
    for (int64_t r = 0; r < B; r++) cu[r + 1] = cu[r] + lengths[r];
    attn_gpt_args a = {0};
    a.batch = B;
    a.n = total;
    a.cu_seqlens = cu;
    attn_status st = reserve(m, attn_gpt_workspace_size(m->g, &a), (size_t)total);
    if (st) return st;
    for (int64_t r = 0; r < B; r++)
        for (int64_t t = 0; t < lengths[r]; t++) m->tok[cu[r] + t] = ids[r * n + t];
    a.tokens = m->tok;
    if ((st = attn_gpt_forward(m->g, &a, out, NULL, 0, m->ws, m->ws_bytes))) return st;
    const int64_t V = m->c.vocab;
    for (int64_t r = B - 1; r >= 0; r--) {
        memmove(out + r * n * V, out + cu[r] * V, (size_t)(lengths[r] * V) * sizeof(float));
        memset(out + (r * n + lengths[r]) * V, 0, (size_t)((n - lengths[r]) * V) * sizeof(float));
    }
    return ATTN_OK;
}

/* Logits in the model's precision: attn_gpt_forward takes it from the model's config (set by
 * gpt2_precision_changed). */
static attn_status gpt2_logits(void *impl, const int32_t *ids, const int64_t *lengths, int64_t B, int64_t n,
                               float *out) {
    gpt2 *m = impl;
    int64_t total = 0;
    for (int64_t r = 0; r < B; r++) total += lengths[r];
    if (total == B * n || total == 0 || m->capture) return logits_padded(m, ids, lengths, B, n, out);
    int64_t *cu = attn__malloc((size_t)(B + 1) * sizeof(int64_t));
    if (!cu)
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_logits: out of memory (%lld sequence offsets)",
                          (long long)(B + 1));
    const attn_status st = logits_packed(m, ids, lengths, B, n, total, cu, out);
    attn__free(cu);
    return st;
}

/* Generation: a cache of n_positions; prompts go through in chunks of GPT2_CHUNK tokens. In bf16
 * (the calling thread's precision, installed by attn_hf_call_step) the linear layers' products are
 * bf16 and the attention over the cache stays float (the cache's keys and values are float rows,
 * as attn_gpt_forward_step keeps them). */
static attn_status gpt2_step(void *impl, int reset, const int32_t *ids, int64_t n, float *last) {
    gpt2 *m = impl;
    const int64_t cap = m->c.positions, V = m->c.vocab;
    const size_t cb = attn_gpt_cache_size(m->g, 1, cap);
    if (!m->cache_buf && !(m->cache_buf = attn__malloc(cb)))
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_generate: out of memory (cache, %zu bytes)", cb);
    if (!m->chunk && !(m->chunk = attn__malloc((size_t)(GPT2_CHUNK * V) * sizeof(float))))
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_generate: out of memory (logits)");
    attn_status st = reserve(m, attn_gpt_step_workspace_size(m->g, 1, GPT2_CHUNK, cap), GPT2_CHUNK);
    if (!st && reset) st = attn_gpt_cache_init(m->g, m->cache_buf, cb, 1, cap, &m->cache);
    for (int64_t i = 0; !st && i < n; i += GPT2_CHUNK) {
        const int64_t k = n - i < GPT2_CHUNK ? n - i : GPT2_CHUNK;
        for (int64_t t = 0; t < k; t++) m->tok[t] = ids[i + t];
        st = attn_gpt_forward_step(m->g, m->cache, m->tok, k, m->chunk, m->ws, m->ws_bytes);
        if (!st && i + k == n) memcpy(last, m->chunk + (k - 1) * V, (size_t)V * sizeof(float));
    }
    return st;
}

static void gpt2_precision_changed(void *impl, attn_precision p) { attn_nn_gpt_set_precision(((gpt2 *)impl)->g, p); }

/* Per layer and token: Q, K, V and the output projection (4 H^2 multiply-adds), the MLP (2 H I),
 * attention over the keys the causal mask lets through (token t of the new ones sees past + t + 1:
 * 2 H multiply-adds each); then the tied LM head (V H) for every position, as logits computes. */
static double gpt2_flops(const void *impl, int64_t B, int64_t n, int64_t past) {
    const gpt2_config *c = &((const gpt2 *)impl)->c;
    const double H = (double)c->hidden, I = (double)c->inter, N = (double)n;
    const double keys = N * (double)past + N * (N + 1) / 2; /* summed over the n new tokens */
    const double layer = N * (4 * H * H + 2 * H * I) + 2 * keys * H;
    return 2.0 * (double)B * ((double)c->layers * layer + N * (double)c->vocab * H);
}

attn_status attn_hf_gpt2_open(const hf_folder *f, attn_pretrained *m) {
    gpt2_config c;
    attn_status st = read_config(f, &c);
    if (st) return st;
    const char *prefix = weights_prefix(f);
    if ((st = attn_hf_check_layer_count(f, prefix, "h.", ".mlp.c_proj.weight", "n_layer", c.layers))) return st;
    hf_need *needs = NULL;
    size_t n = 0;
    if ((st = make_needs(&c, prefix, &needs, &n))) return st;
    gpt2 *g = NULL;
    st = attn_hf_check(f, needs, n, ignore_tensor, (void *)prefix);
    if (!st) st = gpt2_alloc(&c, needs, &g);
    if (!st) st = attn_hf_load(f, needs, n);
    if (!st) st = check_lm_head(f, g, needs[0].dst);
    attn_hf_needs_free(needs, n);
    if (st) {
        gpt2_free(g);
        return st;
    }
    m->impl = g;
    m->logits = gpt2_logits;
    m->step = gpt2_step;
    m->capture_slot = &g->capture;
    m->free_impl = gpt2_free;
    m->flops = gpt2_flops;
    m->prec = &g->prec;
    m->precision_changed = gpt2_precision_changed;
    m->hidden = c.hidden;
    m->vocab = c.vocab;
    m->max_positions = c.positions;
    m->type_vocab = 1;
    return ATTN_OK;
}
