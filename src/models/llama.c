/* The Llama family of attn_pretrained: transformers' LlamaForCausalLM, MistralForCausalLM and
 * Qwen2ForCausalLM in eval, one code differing by config:
 *   x = embed_tokens[id]; per layer  h = x + o_proj(attn(rms_in(x)))
 *                                    x = h + down_proj(silu(gate_proj(n)) * up_proj(n)), n = rms_post(h)
 *   logits = lm_head(rms(x)),  rms(x) = x / sqrt(mean(x^2) + rms_norm_eps) * weight
 * The attention: q_proj [Hq hd, hidden], k_proj / v_proj [Hkv hd, hidden] (grouped-query: query
 * head h reads key/value head h / (Hq / Hkv)), RoPE in the NeoX (rotate_half) layout on q and k,
 * causal, optionally within a sliding window of the last `sliding_window` keys (Mistral; Qwen2's
 * sliding layers). q, k and v run as one GEMM over concatenated weights, as do gate and up; the
 * attention is attn_flash_forward on strided views of that GEMM's output (its decode path for one
 * query row); generation keeps per layer a key/value cache of Hkv heads, grown as tokens come.
 * A right-padded logits batch runs packed: only its real tokens, attention by attn_flash_varlen_forward.
 * attn_pretrained_capture records layer l's weights as "layers.l.self_attn", [1, Hq, N, N]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attention.h"
#include "attn/layers.h"
#include "attn/positions.h"
#include "core/alloc.h"
#include "core/internal.h"
#include "kernels/ops_internal.h"
#include "models_internal.h"
#include "nn/nn_internal.h"

enum { FAM_LLAMA = 0, FAM_MISTRAL = 1, FAM_QWEN2 = 2 };

typedef struct llama_config {
    int family;
    int64_t vocab, hidden, layers, heads, kv_heads, head_dim, inter, positions;
    double eps;
    int qkv_bias, o_bias, mlp_bias, tie;
    attn_rope_config rope;
    int64_t window; /* keys a sliding layer sees (0: no sliding layer) */
} llama_config;

typedef struct llama_layer {
    float *in_norm, *post_norm;
    float *wqkv, *bqkv; /* [(Hq + 2 Hkv) hd, hidden]: q_proj's rows, then k_proj's, then v_proj's */
    float *wo, *bo;     /* [hidden, Hq hd] */
    float *wgu, *bgu;   /* [2 inter, hidden]: gate_proj's rows, then up_proj's */
    float *wd, *bd;     /* [hidden, inter] */
    int64_t window;     /* sliding window of this layer, 0: full causal */
    float *kc, *vc;     /* generation cache [cap, Hkv hd], token-major (grown by realloc) */
} llama_layer;

typedef struct llama {
    llama_config c;
    float *w; /* every weight, one block */
    float *embed, *norm, *lm_head;
    llama_layer *l;
    void *ws; /* activations and the GEMM / flash workspaces */
    size_t ws_bytes;
    int64_t cache_len, cache_cap;
    attn_capture *capture; /* attn_pretrained_capture's, for one logits call */
    hf_precision prec;     /* of the products (attn_pretrained_set_precision) */
} llama;

#define LLAMA_CHUNK 64 /* prompt tokens per cached step */

/* ---- config.json ---- */

static attn_status obj_number(const attn_json *o, const char *path, const char *obj, const char *key, double def,
                              double *out) {
    const attn_json *v = attn_json_get(o, key);
    *out = def;
    if (!v || attn_json_is_null(v)) return ATTN_OK;
    if (!attn_json_as_double(v, out) || !isfinite(*out))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s.%s' must be a finite number (got %s)", path, obj, key,
                          attn_json_type_name(v->type));
    return ATTN_OK;
}

/* RoPE: transformers 5's rope_parameters {rope_type, rope_theta, factor, ...}, or the older
 * top-level rope_theta with rope_scaling {type | rope_type, factor, ...} (null: none). */
static attn_status read_rope(const hf_folder *f, llama_config *c) {
    const char *path = f->config_path, *obj = "rope_parameters";
    const attn_json *o = attn_json_get(f->config, obj);
    double top_theta = 10000;
    attn_status st = attn_hf_config_number(f, "rope_theta", 10000, &top_theta);
    if (st) return st;
    if (!o || attn_json_is_null(o)) {
        obj = "rope_scaling";
        o = attn_json_get(f->config, obj);
    }
    if (o && attn_json_is_null(o)) o = NULL;
    if (o && o->type != ATTN_JSON_OBJECT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be an object or null (got %s)", path, obj,
                          attn_json_type_name(o->type));
    c->rope = attn_rope_config_default(c->head_dim);
    c->rope.layout = ATTN_ROPE_NEOX;
    c->rope.base = top_theta;
    if (!o) return ATTN_OK;
    if ((st = obj_number(o, path, obj, "rope_theta", top_theta, &c->rope.base))) return st;
    if (!(c->rope.base > 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s.rope_theta' must be > 1 (got %g)", path, obj,
                          c->rope.base);
    const attn_json *t = attn_json_get(o, "rope_type");
    const char *tkey = "rope_type";
    if (!t || attn_json_is_null(t)) t = attn_json_get(o, tkey = "type");
    const char *type = t && !attn_json_is_null(t) ? attn_json_as_string(t, NULL) : "default";
    if (!type) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s.%s' must be a string", path, obj, tkey);
    double partial = 1;
    if ((st = obj_number(o, path, obj, "partial_rotary_factor", 1, &partial))) return st;
    if (partial != 1)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: key '%s.partial_rotary_factor' is %g (attn rotates all of head_dim)", path, obj,
                          partial);
    if (strcmp(type, "default") == 0) return ATTN_OK;
    if (strcmp(type, "linear") != 0 && strcmp(type, "llama3") != 0)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: key '%s.%s' is \"%.40s\" (attn runs default, linear and llama3 RoPE)", path, obj, tkey,
                          type);
    c->rope.scaling = type[1] == 'i' ? ATTN_ROPE_SCALING_LINEAR : ATTN_ROPE_SCALING_LLAMA3;
    if ((st = obj_number(o, path, obj, "factor", 0, &c->rope.factor))) return st;
    if (!(c->rope.factor > 0))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s.factor' must be > 0 (got %g)", path, obj,
                          c->rope.factor);
    if (c->rope.scaling == ATTN_ROPE_SCALING_LINEAR) return ATTN_OK;
    if ((st = obj_number(o, path, obj, "low_freq_factor", 1, &c->rope.low_freq_factor))) return st;
    if ((st = obj_number(o, path, obj, "high_freq_factor", 4, &c->rope.high_freq_factor))) return st;
    if (!(c->rope.low_freq_factor > 0 && c->rope.high_freq_factor > c->rope.low_freq_factor))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: keys '%s.low_freq_factor' (%g) and 'high_freq_factor' (%g) must be 0 < low < high", path,
                          obj, c->rope.low_freq_factor, c->rope.high_freq_factor);
    const char *okey = "original_max_position_embeddings";
    if (!attn_json_get(o, okey) || attn_json_is_null(attn_json_get(o, okey)))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: missing key '%s.%s' (rope_type llama3)", path, obj, okey);
    return attn_hf_json_int(o, path, okey, 1, 0, 1, (int64_t)1 << 30, &c->rope.original_max_positions);
}

/* Sizes, heads and head_dim. */
static attn_status read_sizes(const hf_folder *f, llama_config *c) {
    const int64_t big = (int64_t)1 << 24;
    attn_status st = attn_hf_config_int(f, "vocab_size", 1, 0, 1, INT32_MAX, &c->vocab);
    if (!st) st = attn_hf_config_int(f, "hidden_size", 1, 0, 1, big, &c->hidden);
    if (!st) st = attn_hf_config_int(f, "num_hidden_layers", 1, 0, 1, big, &c->layers);
    if (!st) st = attn_hf_config_int(f, "num_attention_heads", 1, 0, 1, big, &c->heads);
    if (!st) st = attn_hf_config_int(f, "num_key_value_heads", 0, c->heads, 1, c->heads, &c->kv_heads);
    if (!st) st = attn_hf_config_int(f, "intermediate_size", 1, 0, 1, big, &c->inter);
    if (!st) st = attn_hf_config_int(f, "max_position_embeddings", 0, 2048, 1, big, &c->positions);
    if (!st) st = attn_hf_config_int(f, "head_dim", 0, 0, 2, 1 << 16, &c->head_dim);
    if (st) return st;
    if (c->heads % c->kv_heads)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: key 'num_attention_heads' (%lld) is not a multiple of 'num_key_value_heads' (%lld)",
                          f->config_path, (long long)c->heads, (long long)c->kv_heads);
    if (!c->head_dim && c->hidden % c->heads)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: key 'hidden_size' (%lld) is not a multiple of 'num_attention_heads' (%lld) and there "
                          "is no 'head_dim'",
                          f->config_path, (long long)c->hidden, (long long)c->heads);
    if (!c->head_dim) c->head_dim = c->hidden / c->heads;
    if (c->head_dim % 2 || c->heads * c->head_dim > big)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: key 'head_dim' (%lld) must be even (RoPE pairs) and num_attention_heads x head_dim "
                          "at most %lld",
                          f->config_path, (long long)c->head_dim, (long long)big);
    return ATTN_OK;
}

/* The sliding window: Mistral's sliding_window, Qwen2's when use_sliding_window; null is none,
 * and an absent key is 4096 (MistralConfig's and Qwen2Config's default). */
static attn_status read_window(const hf_folder *f, llama_config *c) {
    int use = c->family == FAM_MISTRAL;
    attn_status st = ATTN_OK;
    if (c->family == FAM_LLAMA) return ATTN_OK;
    if (c->family == FAM_QWEN2) st = attn_hf_config_bool(f, "use_sliding_window", 0, &use);
    const attn_json *v = attn_json_get(f->config, "sliding_window");
    if (!st && use && !(v && attn_json_is_null(v)))
        st = attn_hf_config_int(f, "sliding_window", 0, 4096, 1, INT64_MAX / 2, &c->window);
    return st;
}

/* Whether Qwen2's layer l slides: config.json's layer_types[l] when present, else l >=
 * max_window_layers (as Qwen2Config builds layer_types). */
static attn_status qwen2_sliding(const hf_folder *f, int64_t layers, int64_t l, int *out) {
    const attn_json *t = attn_json_get(f->config, "layer_types");
    if (!t || attn_json_is_null(t)) {
        int64_t mw = 0;
        attn_status st = attn_hf_config_int(f, "max_window_layers", 0, 28, 0, INT64_MAX, &mw);
        *out = l >= mw;
        return st;
    }
    if (t->type != ATTN_JSON_ARRAY || (int64_t)attn_json_count(t) != layers)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: key 'layer_types' must be a list of num_hidden_layers (%lld) strings", f->config_path,
                          (long long)layers);
    const char *s = attn_json_as_string(attn_json_at(t, (size_t)l), NULL);
    if (!s || (strcmp(s, "sliding_attention") != 0 && strcmp(s, "full_attention") != 0))
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: key 'layer_types' element %lld must be \"full_attention\" or \"sliding_attention\"",
                          f->config_path, (long long)l);
    *out = s[0] == 's';
    return ATTN_OK;
}

static attn_status read_config(const hf_folder *f, int family, llama_config *c) {
    memset(c, 0, sizeof *c);
    c->family = family;
    attn_status st = read_sizes(f, c);
    if (!st) st = attn_hf_config_number(f, "rms_norm_eps", 1e-6, &c->eps);
    if (!st && !(c->eps > 0 && c->eps < 1))
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'rms_norm_eps' must be in (0, 1) (got %g)", f->config_path,
                        c->eps);
    const char *act = NULL;
    if (!st) st = attn_hf_config_string(f, "hidden_act", "silu", &act);
    if (!st && strcmp(act, "silu") != 0)
        st =
            attn_error(ATTN_ERR_UNSUPPORTED, "%s: key 'hidden_act' is \"%.60s\" (attn runs silu)", f->config_path, act);
    if (!st) st = attn_hf_config_bool(f, "tie_word_embeddings", 0, &c->tie);
    if (!st && family == FAM_LLAMA) st = attn_hf_config_bool(f, "attention_bias", 0, &c->qkv_bias);
    if (!st && family == FAM_LLAMA) st = attn_hf_config_bool(f, "mlp_bias", 0, &c->mlp_bias);
    c->o_bias = c->qkv_bias;
    if (family == FAM_QWEN2) c->qkv_bias = 1; /* Qwen2: q, k, v biases always, o_proj none */
    if (!st) st = read_window(f, c);
    if (!st) st = read_rope(f, c);
    return st;
}

/* ---- the weights ---- */

/* Old checkpoints' rotary_emb.inv_freq buffers, and a tied model's stored lm_head.weight (the
 * embedding is used, as transformers ties it). */
static int ignore_tensor(const char *name, void *ctx) {
    const llama_config *c = ctx;
    const size_t n = strlen(name), s = strlen(".rotary_emb.inv_freq");
    if (n > s && strcmp(name + n - s, ".rotary_emb.inv_freq") == 0) return 1;
    return c->tie && strcmp(name, "lm_head.weight") == 0;
}

/* One layer's tensors: HF suffix, rows and columns ('H' hidden, 'Q' Hq hd, 'K' Hkv hd, 'I' inter,
 * '-' rank 1), which bias flag it needs (0 none, 1 qkv, 2 o, 3 mlp), its config keys. */
typedef struct layer_map {
    const char *hf;
    char rows, cols;
    int bias;
    const char *keys;
} layer_map;

static const layer_map LAYER[] = {
    {"input_layernorm.weight", 'H', '-', 0, "hidden_size"},
    {"self_attn.q_proj.weight", 'Q', 'H', 0, "num_attention_heads x head_dim, hidden_size"},
    {"self_attn.k_proj.weight", 'K', 'H', 0, "num_key_value_heads x head_dim, hidden_size"},
    {"self_attn.v_proj.weight", 'K', 'H', 0, "num_key_value_heads x head_dim, hidden_size"},
    {"self_attn.o_proj.weight", 'H', 'Q', 0, "hidden_size, num_attention_heads x head_dim"},
    {"post_attention_layernorm.weight", 'H', '-', 0, "hidden_size"},
    {"mlp.gate_proj.weight", 'I', 'H', 0, "intermediate_size, hidden_size"},
    {"mlp.up_proj.weight", 'I', 'H', 0, "intermediate_size, hidden_size"},
    {"mlp.down_proj.weight", 'H', 'I', 0, "hidden_size, intermediate_size"},
    {"self_attn.q_proj.bias", 'Q', '-', 1, "num_attention_heads x head_dim"},
    {"self_attn.k_proj.bias", 'K', '-', 1, "num_key_value_heads x head_dim"},
    {"self_attn.v_proj.bias", 'K', '-', 1, "num_key_value_heads x head_dim"},
    {"self_attn.o_proj.bias", 'H', '-', 2, "hidden_size"},
    {"mlp.gate_proj.bias", 'I', '-', 3, "intermediate_size"},
    {"mlp.up_proj.bias", 'I', '-', 3, "intermediate_size"},
    {"mlp.down_proj.bias", 'H', '-', 3, "hidden_size"},
};
#define LAYER_TENSORS (sizeof LAYER / sizeof LAYER[0])

static int64_t dim_of(char d, const llama_config *c) {
    return d == 'H' ? c->hidden : d == 'Q' ? c->heads * c->head_dim : d == 'K' ? c->kv_heads * c->head_dim : c->inter;
}

static int has_bias(const llama_config *c, int which) {
    return which == 0 || (which == 1 && c->qkv_bias) || (which == 2 && c->o_bias) || (which == 3 && c->mlp_bias);
}

static int64_t numel(const hf_need *q) { return q->shape[0] * (q->rank == 2 ? q->shape[1] : 1); }

static attn_status add_need(hf_need *q, const char *name, int rank, int64_t d0, int64_t d1, const char *keys) {
    q->rank = rank;
    q->shape[0] = d0;
    q->shape[1] = d1;
    q->keys = keys;
    if (!(q->name = attn__strdup(name)))
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    return ATTN_OK;
}

/* The needs in model order: embed_tokens, then each layer's (LAYER order, biases the config has),
 * model.norm, then lm_head when untied. Destinations are set by llama_alloc. */
static attn_status make_needs(const llama_config *c, hf_need **out, size_t *count) {
    size_t per = 0;
    for (size_t k = 0; k < LAYER_TENSORS; k++) per += (size_t)has_bias(c, LAYER[k].bias);
    const size_t n = 2 + (size_t)!c->tie + (size_t)c->layers * per;
    hf_need *needs = attn__calloc(n, sizeof *needs);
    if (!needs) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    size_t i = 0;
    attn_status st =
        add_need(&needs[i++], "model.embed_tokens.weight", 2, c->vocab, c->hidden, "vocab_size, hidden_size");
    char name[160];
    for (int64_t l = 0; !st && l < c->layers; l++)
        for (size_t k = 0; !st && k < LAYER_TENSORS; k++) {
            const layer_map *t = &LAYER[k];
            if (!has_bias(c, t->bias)) continue;
            snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, t->hf);
            st = add_need(&needs[i++], name, t->cols == '-' ? 1 : 2, dim_of(t->rows, c),
                          t->cols == '-' ? 0 : dim_of(t->cols, c), t->keys);
        }
    if (!st) st = add_need(&needs[i++], "model.norm.weight", 1, c->hidden, 0, "hidden_size");
    if (!st && !c->tie) st = add_need(&needs[i++], "lm_head.weight", 2, c->vocab, c->hidden, "vocab_size, hidden_size");
    if (st) {
        attn_hf_needs_free(needs, n);
        return st;
    }
    *out = needs;
    *count = n;
    return ATTN_OK;
}

static void llama_free(void *impl) {
    llama *m = impl;
    if (!m) return;
    for (int64_t l = 0; m->l && l < m->c.layers; l++) {
        attn__free(m->l[l].kc);
        attn__free(m->l[l].vc);
    }
    attn__free(m->l);
    attn__free(m->w);
    attn__free(m->ws);
    attn__free(m);
}

/* n floats of the block at *next or past it (matrices on pages: attn__weights_at) */
static float *take(const llama *m, float **next, size_t n) {
    float *at = m->w + attn__weights_at((size_t)(*next - m->w), n);
    *next = at + n;
    return at;
}

/* Where need i's floats go: q, k, v rows into wqkv (and their biases into bqkv), gate and up
 * into wgu (bgu); everything else its own span of the block. */
static float *place(llama *m, const hf_need *q, int64_t l, const char *hf, float **next) {
    llama_layer *L = &m->l[l];
    const int64_t H = m->c.hidden, Q = m->c.heads * m->c.head_dim, K = m->c.kv_heads * m->c.head_dim, I = m->c.inter;
    static const char *const parts[] = {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.", "mlp.gate_proj.",
                                        "mlp.up_proj."};
    for (int p = 0; p < 5; p++) {
        if (strncmp(hf, parts[p], strlen(parts[p])) != 0) continue;
        const int bias = q->rank == 1;
        float **base = p < 3 ? (bias ? &L->bqkv : &L->wqkv) : (bias ? &L->bgu : &L->wgu);
        const int64_t total = p < 3 ? Q + 2 * K : 2 * I;
        const int64_t off = p == 0 ? 0 : p == 1 ? Q : p == 2 ? Q + K : p == 3 ? 0 : I;
        if (!*base) *base = take(m, next, (size_t)(total * (bias ? 1 : H)));
        return *base + off * (bias ? 1 : H);
    }
    float *dst = take(m, next, (size_t)numel(q));
    if (strcmp(hf, "input_layernorm.weight") == 0) L->in_norm = dst;
    if (strcmp(hf, "post_attention_layernorm.weight") == 0) L->post_norm = dst;
    if (strcmp(hf, "self_attn.o_proj.weight") == 0) L->wo = dst;
    if (strcmp(hf, "self_attn.o_proj.bias") == 0) L->bo = dst;
    if (strcmp(hf, "mlp.down_proj.weight") == 0) L->wd = dst;
    if (strcmp(hf, "mlp.down_proj.bias") == 0) L->bd = dst;
    return dst;
}

/* Layer l's window (0: full causal). */
static attn_status layer_window(const hf_folder *f, const llama_config *c, int64_t l, int64_t *w) {
    int sliding = c->window > 0;
    attn_status st = ATTN_OK;
    if (sliding && c->family == FAM_QWEN2) st = qwen2_sliding(f, c->layers, l, &sliding);
    *w = sliding ? c->window : 0;
    return st;
}

static attn_status llama_alloc(const hf_folder *f, const llama_config *c, hf_need *needs, size_t n, llama **out) {
    llama *m = attn__calloc(1, sizeof *m);
    size_t total = 0; /* with room for each need to start on a page */
    for (size_t i = 0; i < n; i++) total += (size_t)numel(&needs[i]) + ATTN_WEIGHTS_PAGE / sizeof(float);
    if (m) m->c = *c;
    if (m) m->l = attn__calloc((size_t)c->layers, sizeof *m->l);
    if (m && m->l) m->w = attn__weights_alloc(total);
    if (!m || !m->l || !m->w) {
        llama_free(m);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory (%zu weights)", total);
    }
    float *next = m->w;
    attn_status st = ATTN_OK;
    for (size_t i = 0; i < n; i++) {
        const char *name = needs[i].name;
        if (strncmp(name, "model.layers.", 13) == 0) {
            char *end = NULL;
            const int64_t l = strtoll(name + 13, &end, 10);
            needs[i].dst = place(m, &needs[i], l, end + 1, &next);
        } else {
            needs[i].dst = take(m, &next, (size_t)numel(&needs[i]));
            if (strcmp(name, "model.embed_tokens.weight") == 0) m->embed = needs[i].dst;
            if (strcmp(name, "model.norm.weight") == 0) m->norm = needs[i].dst;
            if (strcmp(name, "lm_head.weight") == 0) m->lm_head = needs[i].dst;
        }
    }
    if (c->tie) m->lm_head = m->embed;
    for (int64_t l = 0; !st && l < c->layers; l++) st = layer_window(f, c, l, &m->l[l].window);
    if (st) {
        llama_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

/* ---- the forward ---- */

/* y = rms(x) * w over rows of width H (the ops table's RMSNorm: the mean of squares in double,
 * rounded once). */
static void rms_norm(const float *x, const float *w, float *y, int64_t rows, int64_t H, double eps) {
    const attn_ops_kernels *k = attn_ops_active();
#pragma omp parallel for schedule(static) num_threads(attn_threads_for(rows)) if (rows * H > 32768)
    for (int64_t r = 0; r < rows; r++) k->rms_norm_fwd(x + r * H, w, y + r * H, H, eps);
}

/* act [rows, I] = silu(gu[:, :I]) * gu[:, I:] */
static void swiglu(const float *gu, float *act, int64_t rows, int64_t I) {
    const attn_ops_kernels *k = attn_ops_active();
#pragma omp parallel for schedule(static) num_threads(attn_threads_for(rows)) if (rows * I > 32768)
    for (int64_t r = 0; r < rows; r++) k->silu_gate(gu + r * 2 * I, gu + r * 2 * I + I, act + r * I, I);
}

static void add_into(float *x, const float *y, int64_t count) {
#pragma omp parallel for schedule(static) num_threads(attn_threads_for(count / 4096 + 1)) if (count > 65536)
    for (int64_t i = 0; i < count; i++) x[i] += y[i];
}

/* [B, heads, N, hd] over rows of width `ld` floats (heads' columns from col). */
static attn_tensor head_view(float *base, int64_t B, int64_t heads, int64_t N, int64_t hd, int64_t ld,
                             int64_t batch_stride) {
    attn_tensor t = attn_tensor_4d(base, B, heads, N, hd);
    t.stride[0] = batch_stride;
    t.stride[1] = hd;
    t.stride[2] = ld;
    t.stride[3] = 1;
    return t;
}

/* One call's buffers, carved from m->ws (64-byte aligned spans); qkv16, where the attention runs
 * in bf16 (else NULL), is qkv rounded to bf16, the same layout. */
typedef struct llama_bufs {
    float *x, *nrm, *qkv, *att, *gu, *act;
    void *gemm, *flash;
    size_t gemm_bytes, flash_bytes;
    attn_bf16 *qkv16;
} llama_bufs;

/* In bf16 precision the attention without a cache forms its products from bf16 q, k, v (as the
 * linear layers do from their operands): its calls reserve qkv16. Over the generation cache it
 * stays float, the cache's rows being float (llama_step reserves no qkv16). */
static int bf16_attention(void) { return attn_nn_precision() == ATTN_PRECISION_BF16; }

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

/* Room for T token rows (and flash's workspace for views q, k, v; their bf16 copy when b16),
 * carved into b. */
static attn_status reserve(llama *m, int64_t T, int64_t out_rows, size_t flash_bytes, int b16, llama_bufs *b) {
    const llama_config *c = &m->c;
    const int64_t H = c->hidden, Q = c->heads * c->head_dim, W = Q + 2 * c->kv_heads * c->head_dim, I = c->inter;
    const int64_t widest = 2 * H + W + Q + 3 * I; /* floats per token row over all the buffers */
    if (T > (int64_t)(SIZE_MAX / 4 / sizeof(float)) / widest)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_pretrained: %lld token rows of %lld floats overflow",
                          (long long)T, (long long)widest);
    size_t g = attn_linear_workspace_size(T, H, W);
    const size_t g2 = attn_linear_workspace_size(T, Q, H), g3 = attn_linear_workspace_size(T, H, 2 * I),
                 g4 = attn_linear_workspace_size(T, I, H), g5 = attn_linear_workspace_size(out_rows, H, c->vocab);
    g = g > g2 ? g : g2;
    g = g > g3 ? g : g3;
    g = g > g4 ? g : g4;
    g = g > g5 ? g : g5;
    const size_t f = sizeof(float), h = b16 ? sizeof(attn_bf16) : 0,
                 sizes[9] = {T * H * f, T * H * f, T * W * f,   T * Q * f, T * 2 * I * f,
                             T * I * f, g,         flash_bytes, T * W * h};
    size_t total = 0;
    for (int i = 0; i < 9; i++) total += align64(sizes[i]);
    if (total > m->ws_bytes) {
        attn__free(m->ws);
        m->ws_bytes = 0;
        if (!(m->ws = attn__aligned_alloc(64, total)))
            return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained: out of memory (%zu bytes of workspace)", total);
        m->ws_bytes = total;
    }
    char *p = m->ws;
    void *spans[9];
    for (int i = 0; i < 9; i++) {
        spans[i] = p;
        p += align64(sizes[i]);
    }
    attn_bf16 *qkv16 = b16 ? spans[8] : NULL;
    *b = (llama_bufs){spans[0], spans[1], spans[2], spans[3],    spans[4], spans[5],
                      spans[6], spans[7], g,        flash_bytes, qkv16};
    return ATTN_OK;
}

/* The capture of layer l: softmax(q k^T / sqrt(hd)) per query head (key head h / (Hq / Hkv)),
 * causal and within the layer's window, recomputed from the roped q, k only for the heads and rows
 * the capture asks (the flash path never forms the weights). */
static attn_status capture_weights(llama *m, int64_t l, int64_t window, const attn_tensor *q, const attn_tensor *k,
                                   int64_t B, int64_t N) {
    const llama_config *c = &m->c;
    const int64_t hd = c->head_dim, group = c->heads / c->kv_heads;
    const size_t mark = attn_nn_capture_push(m->capture, "layers.%lld.self_attn", (long long)l);
    nn_capture_slot cs;
    attn_status st = attn_nn_capture_begin(m->capture, "attn_pretrained_capture", B, c->heads, N, N, &cs);
    attn_nn_capture_pop(m->capture, mark);
    if (st || !cs.w) return st;
    const double scale = 1.0 / sqrt((double)hd);
    const int64_t tasks = cs.batch * cs.heads * cs.rows;
#pragma omp parallel for schedule(dynamic, 8) num_threads(attn_threads_for(tasks)) if (tasks * N * hd > 65536)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t i = cs.row0 + t % cs.rows, h = cs.head0 + (t / cs.rows) % cs.heads, r = t / (cs.rows * cs.heads);
        const float *qi = q->data;
        qi += r * q->stride[0] + h * q->stride[1] + i * q->stride[2];
        float *w = cs.w + t * cs.nk;
        const int64_t j0 = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < N; j++) {
            w[j] = 0;
            if (j < j0 || j > i) continue;
            const float *kj = k->data;
            kj += r * k->stride[0] + (h / group) * k->stride[1] + j * k->stride[2];
            double s = 0;
            for (int64_t d = 0; d < hd; d++) s += (double)qi[d] * kj[d];
            w[j] = (float)(s * scale);
            if (w[j] > mx) mx = w[j];
        }
        for (int64_t j = j0; j <= i; j++) sum += exp(w[j] - mx);
        for (int64_t j = j0; j <= i; j++) w[j] = (float)(exp(w[j] - mx) / sum);
    }
    return ATTN_OK;
}

/* The attention of one layer over B x N rows: q, k, v are views into b->qkv (RoPE applied here
 * from pos0), keys either the same rows (cache NULL) or the layer's cache holding pos0 + N rows.
 * Packed (cu non-NULL): B = 1 and N = total rows of `seqs` sequences, sequence s owning rows
 * [cu[s], cu[s + 1]) at positions pos[] (restarting at 0 per sequence). */
typedef struct attn_call {
    int64_t B, N, pos0;
    int cached;
    const int64_t *cu, *pos;
    int64_t seqs;
} attn_call;

/* [total, heads, hd] over rows of width ld floats (varlen's packed layout). */
static attn_tensor packed_view(float *base, int64_t total, int64_t heads, int64_t hd, int64_t ld) {
    attn_tensor t = attn_tensor_3d(base, total, heads, hd);
    t.stride[0] = ld;
    t.stride[1] = hd;
    t.stride[2] = 1;
    return t;
}

/* A view into b->qkv moved onto its bf16 copy where there is one (else t as it is). */
static attn_tensor on_bf16(attn_tensor t, const llama_bufs *b) {
    if (!b->qkv16) return t;
    attn_tensor u = t;
    u.data16 = b->qkv16 + (t.data - b->qkv);
    u.dtype = ATTN_TYPE_BF16;
    return u;
}

/* The packed attention: each sequence causal on its own keys, as if run alone (varlen flash). */
static attn_status attention_packed(llama *m, llama_layer *L, const attn_call *a, llama_bufs *b) {
    const llama_config *c = &m->c;
    const int64_t hd = c->head_dim, Q = c->heads * hd, K = c->kv_heads * hd, W = Q + 2 * K, T = a->N;
    attn_tensor q = head_view(b->qkv, 1, c->heads, T, hd, W, T * W);
    attn_tensor k = head_view(b->qkv + Q, 1, c->kv_heads, T, hd, W, T * W);
    attn_status st = attn_rope_forward(&c->rope, &q, 0, a->pos);
    if (!st) st = attn_rope_forward(&c->rope, &k, 0, a->pos);
    if (st) return st;
    if (b->qkv16) attn_nn_round_bf16(b->qkv, b->qkv16, (size_t)(T * W));
    const attn_tensor pq = on_bf16(packed_view(b->qkv, T, c->heads, hd, W), b),
                      pk = on_bf16(packed_view(b->qkv + Q, T, c->kv_heads, hd, W), b),
                      pv = on_bf16(packed_view(b->qkv + Q + K, T, c->kv_heads, hd, W), b);
    attn_tensor o = packed_view(b->att, T, c->heads, hd, Q);
    attn_sdpa_params p = attn_sdpa_params_default();
    p.causal = ATTN_CAUSAL_TOP_LEFT;
    p.window_left = L->window > 0 ? L->window - 1 : -1;
    p.window_right = -1;
    return attn_flash_varlen_forward(&pq, &pk, &pv, a->cu, a->cu, a->seqs, &p, &o, NULL, b->flash, b->flash_bytes);
}

static attn_status attention(llama *m, llama_layer *L, const attn_call *a, llama_bufs *b) {
    if (a->cu) return attention_packed(m, L, a, b);
    const llama_config *c = &m->c;
    const int64_t hd = c->head_dim, Q = c->heads * hd, K = c->kv_heads * hd, W = Q + 2 * K;
    attn_tensor q = head_view(b->qkv, a->B, c->heads, a->N, hd, W, a->N * W);
    attn_tensor k = head_view(b->qkv + Q, a->B, c->kv_heads, a->N, hd, W, a->N * W);
    attn_tensor v = head_view(b->qkv + Q + K, a->B, c->kv_heads, a->N, hd, W, a->N * W);
    attn_status st = attn_rope_forward(&c->rope, &q, a->pos0, NULL);
    if (!st) st = attn_rope_forward(&c->rope, &k, a->pos0, NULL);
    if (st) return st;
    if (a->cached) { /* append this chunk's keys and values, then attend to the whole cache */
        for (int64_t t = 0; t < a->N; t++) {
            memcpy(L->kc + (a->pos0 + t) * K, b->qkv + t * W + Q, (size_t)K * sizeof(float));
            memcpy(L->vc + (a->pos0 + t) * K, b->qkv + t * W + Q + K, (size_t)K * sizeof(float));
        }
        const int64_t nk = a->pos0 + a->N;
        k = head_view(L->kc, 1, c->kv_heads, nk, hd, K, m->cache_cap * K);
        v = head_view(L->vc, 1, c->kv_heads, nk, hd, K, m->cache_cap * K);
    }
    if (m->capture && !a->cached) {
        st = capture_weights(m, (int64_t)(L - m->l), L->window, &q, &k, a->B, a->N);
        if (st) return st;
    }
    attn_tensor o = head_view(b->att, a->B, c->heads, a->N, hd, Q, a->N * Q);
    attn_sdpa_params p = attn_sdpa_params_default();
    p.causal = a->cached ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_TOP_LEFT;
    p.window_left = L->window > 0 ? L->window - 1 : -1; /* the query's own key and window - 1 before */
    p.window_right = -1;
    if (b->qkv16 && !a->cached) {
        attn_nn_round_bf16(b->qkv, b->qkv16, (size_t)(a->B * a->N * W));
        q = on_bf16(q, b), k = on_bf16(k, b), v = on_bf16(v, b);
    }
    return attn_flash_forward(&q, &k, &v, &p, &o, NULL, b->flash, b->flash_bytes);
}

/* The decoder layers over T = B N rows in b->x (tokens already embedded). */
static attn_status layers_forward(llama *m, const attn_call *a, llama_bufs *b) {
    const llama_config *c = &m->c;
    const int64_t T = a->B * a->N, H = c->hidden, Q = c->heads * c->head_dim, I = c->inter;
    const int64_t W = Q + 2 * c->kv_heads * c->head_dim;
    attn_status st = ATTN_OK;
    for (int64_t l = 0; !st && l < c->layers; l++) {
        llama_layer *L = &m->l[l];
        rms_norm(b->x, L->in_norm, b->nrm, T, H, c->eps);
        st = attn_linear_forward(b->nrm, L->wqkv, L->bqkv, b->qkv, T, H, W, b->gemm, b->gemm_bytes);
        if (!st) st = attention(m, L, a, b);
        if (!st) st = attn_linear_forward(b->att, L->wo, L->bo, b->nrm, T, Q, H, b->gemm, b->gemm_bytes);
        if (st) break;
        add_into(b->x, b->nrm, T * H);
        rms_norm(b->x, L->post_norm, b->nrm, T, H, c->eps);
        st = attn_linear_forward(b->nrm, L->wgu, L->bgu, b->gu, T, H, 2 * I, b->gemm, b->gemm_bytes);
        if (st) break;
        swiglu(b->gu, b->act, T, I);
        st = attn_linear_forward(b->act, L->wd, L->bd, b->nrm, T, I, H, b->gemm, b->gemm_bytes);
        if (!st) add_into(b->x, b->nrm, T * H);
    }
    return st;
}

static void embed(const llama *m, const int32_t *ids, const int64_t *lengths, int64_t B, int64_t N, float *x) {
    const int64_t H = m->c.hidden;
    for (int64_t r = 0; r < B; r++)
        for (int64_t t = 0; t < N; t++) {
            const int64_t id = !lengths || t < lengths[r] ? ids[r * N + t] : 0; /* padding is not read */
            memcpy(x + (r * N + t) * H, m->embed + id * H, (size_t)H * sizeof(float));
        }
}

/* flash's workspace for B x N queries against nk keys (bf16 ones where b16). */
static size_t flash_bytes(const llama *m, int64_t B, int64_t N, int64_t nk, int b16) {
    const llama_config *c = &m->c;
    attn_tensor q = attn_tensor_4d(NULL, B, c->heads, N, c->head_dim);
    attn_tensor k = attn_tensor_4d(NULL, B, c->kv_heads, nk, c->head_dim);
    q.dtype = k.dtype = b16 ? ATTN_TYPE_BF16 : ATTN_TYPE_F32;
    return attn_flash_workspace_size(&q, &k, &k);
}

/* Logits of every position of an unpadded batch (or one whose attention is captured, [B, Hq, N,
 * N]); right padding (ids not read) cannot reach a real position through the causal mask, and its
 * rows of out are set to 0. */
static attn_status logits_padded(llama *m, const int32_t *ids, const int64_t *lengths, int64_t B, int64_t N,
                                 float *out) {
    const int64_t T = B * N, H = m->c.hidden, V = m->c.vocab;
    llama_bufs b;
    const int b16 = bf16_attention();
    attn_status st = reserve(m, T, T, flash_bytes(m, B, N, N, b16), b16, &b);
    if (st) return st;
    embed(m, ids, lengths, B, N, b.x);
    const attn_call a = {B, N, 0, 0, NULL, NULL, 0};
    st = layers_forward(m, &a, &b);
    if (st) return st;
    rms_norm(b.x, m->norm, b.nrm, T, H, m->c.eps);
    st = attn_linear_forward(b.nrm, m->lm_head, NULL, out, T, H, V, b.gemm, b.gemm_bytes);
    for (int64_t r = 0; !st && r < B; r++)
        memset(out + (r * N + lengths[r]) * V, 0, (size_t)((N - lengths[r]) * V) * sizeof(float));
    return st;
}

/* A right-padded batch packed: only the `total` real tokens are embedded and run through every
 * layer (attention by varlen flash, each sequence alone), so each row's logits are bitwise those
 * of the row run alone (the GEMM's per-element sums do not depend on its row count). cu [B + 1]
 * and pos [total] are idx's; the logits are computed packed into out's first total rows, then
 * moved to their padded places, last sequence first (a destination never precedes its source). */
static attn_status logits_packed(llama *m, const int32_t *ids, const int64_t *lengths, int64_t B, int64_t N,
                                 int64_t total, int64_t *idx, float *out) {
    const int64_t H = m->c.hidden, V = m->c.vocab, hd = m->c.head_dim, Q = m->c.heads * hd, K = m->c.kv_heads * hd,
                  W = Q + 2 * K;
    int64_t *cu = idx, *pos = idx + B + 1;
    cu[0] = 0;
    for (int64_t r = 0; r < B; r++) {
        cu[r + 1] = cu[r] + lengths[r];
        for (int64_t t = 0; t < lengths[r]; t++) pos[cu[r] + t] = t;
    }
    llama_bufs b;
    const int b16 = bf16_attention();
    attn_status st = reserve(m, total, total, 0, b16, &b); /* the views below need the activations' place */
    if (st) return st;
    const attn_tensor q = on_bf16(packed_view(b.qkv, total, m->c.heads, hd, W), &b),
                      k = on_bf16(packed_view(b.qkv + Q, total, m->c.kv_heads, hd, W), &b),
                      v = on_bf16(packed_view(b.qkv + Q + K, total, m->c.kv_heads, hd, W), &b);
    const size_t fb = attn_flash_varlen_workspace_size(&q, &k, &v, cu, cu, B);
    if (fb == 0 || fb == SIZE_MAX) { /* 0: attn_last_error() says why */
        char why[512];
        snprintf(why, sizeof why, "%s", fb ? "its size overflows" : attn_last_error());
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_pretrained_logits: packed attention's workspace: %s", why);
    }
    if ((st = reserve(m, total, total, fb, b16, &b))) return st;
    for (int64_t r = 0; r < B; r++)
        for (int64_t t = 0; t < lengths[r]; t++)
            memcpy(b.x + (cu[r] + t) * H, m->embed + (int64_t)ids[r * N + t] * H, (size_t)H * sizeof(float));
    const attn_call a = {1, total, 0, 0, cu, pos, B};
    if ((st = layers_forward(m, &a, &b))) return st;
    rms_norm(b.x, m->norm, b.nrm, total, H, m->c.eps);
    if ((st = attn_linear_forward(b.nrm, m->lm_head, NULL, out, total, H, V, b.gemm, b.gemm_bytes))) return st;
    for (int64_t r = B - 1; r >= 0; r--) {
        memmove(out + r * N * V, out + cu[r] * V, (size_t)(lengths[r] * V) * sizeof(float));
        memset(out + (r * N + lengths[r]) * V, 0, (size_t)((N - lengths[r]) * V) * sizeof(float));
    }
    return ATTN_OK;
}

/* Logits and generation run in the model's precision, installed on the calling thread by
 * attn_hf_call_logits / _step (the linear layers; the attention without a cache). */
static attn_status llama_logits(void *impl, const int32_t *ids, const int64_t *lengths, int64_t B, int64_t N,
                                float *out) {
    llama *m = impl;
    int64_t total = 0;
    for (int64_t r = 0; r < B; r++) total += lengths[r];
    if (total == B * N || m->capture) return logits_padded(m, ids, lengths, B, N, out);
    int64_t *idx = attn__malloc((size_t)(B + 1 + total) * sizeof(int64_t));
    if (!idx)
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_logits: out of memory (%lld sequence offsets)",
                          (long long)(B + 1 + total));
    const attn_status st = logits_packed(m, ids, lengths, B, N, total, idx, out);
    attn__free(idx);
    return st;
}

/* The cache holds at least `need` positions (doubling, at most max_position_embeddings). */
static attn_status grow_cache(llama *m, int64_t need) {
    if (need <= m->cache_cap) return ATTN_OK;
    int64_t cap = m->cache_cap ? m->cache_cap : 256;
    while (cap < need) cap *= 2;
    if (cap > m->c.positions) cap = m->c.positions > need ? m->c.positions : need;
    const size_t bytes = (size_t)(cap * m->c.kv_heads * m->c.head_dim) * sizeof(float);
    for (int64_t l = 0; l < m->c.layers; l++) {
        float *k = attn__realloc(m->l[l].kc, bytes);
        if (k) m->l[l].kc = k;
        float *v = k ? attn__realloc(m->l[l].vc, bytes) : NULL;
        if (v) m->l[l].vc = v;
        if (!k || !v)
            return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_generate: out of memory (cache, %zu bytes)",
                              bytes);
    }
    m->cache_cap = cap;
    return ATTN_OK;
}

/* Generation: ids appended to the cache in chunks of LLAMA_CHUNK; last [vocab] gets the logits
 * of the last one (lm_head on that row only). */
static attn_status llama_step(void *impl, int reset, const int32_t *ids, int64_t n, float *last) {
    llama *m = impl;
    if (reset) m->cache_len = 0;
    attn_status st = grow_cache(m, m->cache_len + n);
    for (int64_t i = 0; !st && i < n; i += LLAMA_CHUNK) {
        const int64_t k = n - i < LLAMA_CHUNK ? n - i : LLAMA_CHUNK, H = m->c.hidden;
        llama_bufs b;
        st = reserve(m, k, 1, flash_bytes(m, 1, k, m->cache_len + k, 0), 0, &b);
        if (st) break;
        embed(m, ids + i, NULL, 1, k, b.x);
        const attn_call a = {1, k, m->cache_len, 1, NULL, NULL, 0};
        st = layers_forward(m, &a, &b);
        if (st) break;
        m->cache_len += k;
        if (i + k < n) continue;
        rms_norm(b.x + (k - 1) * H, m->norm, b.nrm, 1, H, m->c.eps);
        st = attn_linear_forward(b.nrm, m->lm_head, NULL, last, 1, H, m->c.vocab, b.gemm, b.gemm_bytes);
    }
    return st;
}

/* ---- open ---- */

/* attn_pretrained_flops: per layer and new token the q, k, v, o projections and the gate, up and
 * down matrices, then 2 (QK^T and PV) x the keys a query sees x Hq hd, the sliding window's cap
 * applied per layer; the LM head once per token. */
static double llama_flops(const void *impl, int64_t B, int64_t n, int64_t past) {
    const llama *g = impl;
    const llama_config *c = &g->c;
    const double H = (double)c->hidden, q = (double)(c->heads * c->head_dim), kv = (double)(c->kv_heads * c->head_dim);
    const double proj = 2 * H * q + 2 * H * kv + 3 * H * (double)c->inter;
    double total = (double)n * (double)c->vocab * H;
    for (int64_t l = 0; l < c->layers; l++) {
        double keys = 0; /* summed over the new tokens at positions past .. past + n - 1 */
        for (int64_t t = past; t < past + n; t++) {
            const int64_t w = g->l[l].window;
            keys += (double)(w > 0 && t + 1 > w ? w : t + 1);
        }
        total += (double)n * proj + 2 * keys * q;
    }
    return 2.0 * (double)B * total;
}

static attn_status llama_open(const hf_folder *f, attn_pretrained *m, int family) {
    llama_config c;
    attn_status st = read_config(f, family, &c);
    if (!st)
        st = attn_hf_check_layer_count(f, "model.", "layers.", ".mlp.down_proj.weight", "num_hidden_layers", c.layers);
    hf_need *needs = NULL;
    size_t n = 0;
    if (!st) st = make_needs(&c, &needs, &n);
    if (st) return st;
    llama *g = NULL;
    st = attn_hf_check(f, needs, n, ignore_tensor, &c);
    if (!st) st = llama_alloc(f, &c, needs, n, &g);
    if (!st) st = attn_hf_load(f, needs, n);
    attn_hf_needs_free(needs, n);
    if (st) {
        llama_free(g);
        return st;
    }
    m->impl = g;
    m->logits = llama_logits;
    m->step = llama_step;
    m->flops = llama_flops;
    m->prec = &g->prec;
    m->free_impl = llama_free;
    m->capture_slot = &g->capture;
    m->hidden = c.hidden;
    m->vocab = c.vocab;
    m->max_positions = c.positions;
    m->type_vocab = 1;
    return ATTN_OK;
}

attn_status attn_hf_llama_open(const hf_folder *f, attn_pretrained *m) { return llama_open(f, m, FAM_LLAMA); }
attn_status attn_hf_mistral_open(const hf_folder *f, attn_pretrained *m) { return llama_open(f, m, FAM_MISTRAL); }
attn_status attn_hf_qwen2_open(const hf_folder *f, attn_pretrained *m) { return llama_open(f, m, FAM_QWEN2); }
