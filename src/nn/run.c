/* Models by name with inputs bound by PyTorch forward-argument names (see nn_run.h): maps a JSON
 * configuration and a safetensors file of inputs onto the modules' create / forward / backward.
 *
 * Every module is one row of MODULES (an nn_module_ops): its forward() arguments and options as
 * data, and a handful of small functions over the library's entry points. The code after the
 * table knows no module: adding one to `attn run` is its ops functions plus its row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attention_kind.h"
#include "core/alloc.h"
#include "nn_config.h"
#include "nn_internal.h"
#include "nn_run.h"

enum { IN_A, IN_B, IN_C, NIN };     /* float input slots, in the order of the arguments */
enum { SET_S, SET_T, SET_M, NSET }; /* mask sets: self / src, tgt, memory */
/* Forward flags: the causal flag of each mask set, then multihead_attention's weights options. */
enum { F_NEED_WEIGHTS = NSET, F_AVERAGE, NFLAG };

#define MAXA 8 /* forward tensor arguments per module */
#define MAXO 4 /* forward options per module */
#define MAXB 2 /* buffers per module */

/* A forward tensor argument: a float input (in = its slot) or a mask (in = -1) of a set, the
 * key_padding_mask of the set when kpm, else its attn_mask. */
typedef struct nn_arg {
    const char *name;
    int in, set, kpm, required;
} nn_arg;
#define NN_IN(name, slot, required)                                                                                    \
    { name, slot, 0, 0, required }
#define NN_MASK(name, set)                                                                                             \
    { name, -1, set, 0, 0 }
#define NN_KPM(name, set)                                                                                              \
    { name, -1, set, 1, 0 }

/* A forward option (a non-tensor argument, also accepted as a configuration key): the flag it
 * sets and PyTorch's default. */
typedef struct nn_opt {
    const char *name;
    int flag, dflt;
} nn_opt;

typedef struct nn_module_ops nn_module_ops;

struct nn_model {
    const nn_module_ops *ops;
    void *mod;          /* the module (attn_mha, attn_encoder_layer, ...) */
    int64_t d, heads;   /* d_model / embed_dim and the number of heads */
    int64_t width[NIN]; /* last dimension of each float input (0 at create: d) */
    int flag[NFLAG];
    /* bound inputs */
    float *in[NIN];
    int64_t in_shape[NIN][4];
    int in_rank[NIN];
    uint8_t *mb[NSET][2]; /* [set][kpm] boolean */
    float *mf[NSET][2];   /* [set][kpm] float */
    int m3d[NSET];
    int bound;
    /* results and buffers */
    float *out, *w, *grad[NIN];
    int64_t out_shape[4], w_shape[4];
    int out_rank, w_rank, kept;
    void *saved, *ws;
    size_t saved_bytes, ws_bytes;
    /* the module's buffers (state_dict tensors that are not parameters), in the layout it uses;
     * allocated by create, filled by ops->load_buffers */
    float *buffer;
    int buffers_loaded;
    union {
        attn_mha_args mha;
        attn_layer_args layer;
        attn_transformer_args tr;
        attn_local_global_args lg;
        attn_vit_args vit;
    } a; /* the call's arguments, built by ops->build */
};

/* The modules of `attn run`, each the index of its row in MODULES (and the order of
 * attn_nn_model_known / attn_model_known). A new module goes before NN_MODULE_COUNT. */
typedef enum nn_module_id {
    NN_MODULE_MULTIHEAD_ATTENTION,
    NN_MODULE_TRANSFORMER_ENCODER_LAYER,
    NN_MODULE_TRANSFORMER_DECODER_LAYER,
    NN_MODULE_TRANSFORMER_ENCODER,
    NN_MODULE_TRANSFORMER_DECODER,
    NN_MODULE_TRANSFORMER,
    NN_MODULE_SPARSE_ATTENTION,
    NN_MODULE_LOCAL_GLOBAL_ATTENTION,
    NN_MODULE_LINEAR_ATTENTION,
    NN_MODULE_PERFORMER_ATTENTION,
    NN_MODULE_VISION_TRANSFORMER,
    NN_MODULE_COUNT
} nn_module_id;

/* One module of `attn run`. */
struct nn_module_ops {
    const char *name;  /* the configuration's "module" */
    nn_arg args[MAXA]; /* forward() tensor arguments in PyTorch's order; the names of the
                              float ones also name their input gradients */
    nn_opt opts[MAXO]; /* forward() options */
    int dims[NSET][2]; /* mask set -> the slots whose lengths are its (Nq, Nk) */
    int out_slot;      /* the output is [batch, length of this slot, d] */
    /* The state_dict names of the PyTorch module, from the parameters' (NULL: the same). */
    const attn_name_map *names;
    /* Buffers: state_dict tensors that are no parameter (no gradient, not in params()), by their
     * state_dict names; load_buffers reads them (prefix + name) from the weights into the module,
     * each missing or mis-shaped one an error naming it and the expected shape. None: NULL. */
    const char *buffers[MAXB];
    attn_status (*load_buffers)(nn_model *m, const attn_safetensors *st, const char *prefix);
    /* Read the configuration (a key neither the constructor's nor in ignore is an error) and
     * create the module into m->mod, setting m->d, m->heads and the widths that are not d. */
    attn_status (*create)(nn_model *m, const attn_json *config, const char *const *ignore);
    void (*free)(void *mod);
    const attn_params *(*params)(const void *mod);
    /* Optional: checks after the float inputs are bound, before the masks; may fill in_shape of
     * an input that defaults to another. */
    attn_status (*bind_check)(nn_model *m);
    /* The call's arguments into m->a from the bound inputs, masks and flags. */
    void (*build)(nn_model *m, int training, uint64_t seed, uint64_t offset);
    void (*sizes)(const nn_model *m, size_t *saved, size_t *workspace);
    /* Forward on m->a into m->out (allocated) and, when the module has them, m->w / w_shape. */
    attn_status (*forward)(nn_model *m, void *saved, size_t saved_bytes);
    /* Backward of the kept forward; g[slot] receives the gradient of each bound float input
     * (NULL for the others). */
    attn_status (*backward)(nn_model *m, const float *dout, float *const *g);
    /* Optional, for inputs other than [batch, length, width]: whether float input t of a slot has
     * the right shape (rank <= 4, dim 0 the batch), the expected shape written into want. */
    int (*input_fits)(const nn_model *m, int slot, const attn_safetensors_tensor *t, char *want, size_t cap);
    /* Optional, for an output other than [batch, length of out_slot, d]: its shape; returns the rank. */
    int (*output_shape)(const nn_model *m, int64_t shape[4]);
};

/* ---- helpers of the modules' ops ---- */

static attn_status grow(void **p, size_t *have, size_t need) {
    if (need <= *have && *p) return ATTN_OK;
    void *q = attn__realloc(*p, need ? need : 1);
    if (!q) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes of buffers", need);
    *p = q;
    *have = need;
    return ATTN_OK;
}

/* The bound masks of a set with its causal flag. */
static attn_masks masks_of(const nn_model *m, int set) {
    attn_masks k;
    memset(&k, 0, sizeof k);
    k.attn_mask = m->mb[set][0];
    k.attn_mask_float = m->mf[set][0];
    k.attn_mask_3d = m->m3d[set];
    k.key_padding_mask = m->mb[set][1];
    k.key_padding_mask_float = m->mf[set][1];
    k.is_causal = m->flag[set];
    return k;
}

static int64_t batch_of(const nn_model *m) { return m->in_shape[IN_A][0]; }
static int64_t len_of(const nn_model *m, int slot) { return m->in_shape[slot][1]; }

/* The configuration's layer sizes into m. */
static void set_size(nn_model *m, const attn_layer_config *c) {
    m->d = c->d_model;
    m->heads = c->nhead;
}

/* Module ops that only forward to the library's entry points of prefix T on the argument member A
 * of m->a: NN_SIZE_OPS defines pre_free, pre_params and pre_sizes (T_saved_size and
 * T_workspace_size), NN_FORWARD_OP pre_forward (T_forward without attention weights). */
#define NN_SIZE_OPS(pre, T, A)                                                                                         \
    static void pre##_free(void *p) { T##_free(p); }                                                                   \
    static const attn_params *pre##_params(const void *p) { return T##_params(p); }                                    \
    static void pre##_sizes(const nn_model *m, size_t *sb, size_t *wb) {                                               \
        *sb = T##_saved_size(m->mod, &m->a.A);                                                                         \
        *wb = T##_workspace_size(m->mod, &m->a.A);                                                                     \
    }
#define NN_FORWARD_OP(pre, T, A)                                                                                       \
    static attn_status pre##_forward(nn_model *m, void *sv, size_t svb) {                                              \
        return T##_forward(m->mod, &m->a.A, m->out, sv, svb, m->ws, m->ws_bytes);                                      \
    }

/* ---- multihead_attention ---- */

static attn_status mha_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    attn_mha_config c;
    attn_mha *mod = NULL;
    attn_status st = attn_nn_json_mha_config(config, ignore, &c);
    if (!st) st = attn_mha_create(&c, &mod);
    if (st) return st;
    m->mod = mod;
    const attn_mha_config *cc = attn_mha_get_config(mod);
    m->d = cc->embed_dim;
    m->heads = cc->num_heads;
    m->width[IN_B] = cc->kdim;
    m->width[IN_C] = cc->vdim;
    return ATTN_OK;
}

/* key and value: both or neither (then both are query, and must have its width). */
static attn_status mha_bind_check(nn_model *m) {
    if (!m->in[IN_B] != !m->in[IN_C])
        return attn_error(ATTN_ERR_NOT_FOUND,
                          "multihead_attention: give both key and value, or neither (self-attention)");
    if (!m->in[IN_B]) {
        if (m->width[IN_B] != m->d || m->width[IN_C] != m->d)
            return attn_error(
                ATTN_ERR_NOT_FOUND,
                "multihead_attention: key and value are required when kdim or vdim differ from embed_dim");
        memcpy(m->in_shape[IN_B], m->in_shape[IN_A], sizeof m->in_shape[IN_A]);
        m->in_rank[IN_B] = m->in_rank[IN_A];
    } else if (m->in_shape[IN_C][1] != m->in_shape[IN_B][1]) {
        return attn_error(ATTN_ERR_SHAPE, "input 'value' has length %lld, 'key' has %lld",
                          (long long)m->in_shape[IN_C][1], (long long)m->in_shape[IN_B][1]);
    }
    return ATTN_OK;
}

static void mha_build(nn_model *m, int training, uint64_t seed, uint64_t offset) {
    attn_mha_args *a = &m->a.mha;
    const attn_masks k = masks_of(m, SET_S);
    *a = attn_mha_args_default();
    a->batch = batch_of(m);
    a->nq = len_of(m, IN_A);
    a->nk = len_of(m, IN_B);
    a->query = m->in[IN_A];
    a->key = m->in[IN_B] ? m->in[IN_B] : m->in[IN_A];
    a->value = m->in[IN_C] ? m->in[IN_C] : m->in[IN_A];
    a->attn_mask = k.attn_mask;
    a->attn_mask_float = k.attn_mask_float;
    a->attn_mask_3d = k.attn_mask_3d;
    a->key_padding_mask = k.key_padding_mask;
    a->key_padding_mask_float = k.key_padding_mask_float;
    a->is_causal = k.is_causal;
    a->need_weights = m->flag[F_NEED_WEIGHTS];
    a->average_attn_weights = m->flag[F_AVERAGE];
    a->training = training;
    a->seed = seed;
    a->offset = offset;
}

NN_SIZE_OPS(mha, attn_mha, mha)

static attn_status mha_forward(nn_model *m, void *sv, size_t svb) {
    const attn_mha_args *a = &m->a.mha;
    if (a->need_weights) {
        const attn_mha_config *cc = attn_mha_get_config(m->mod);
        const int64_t B = a->batch, nk2 = a->nk + (cc->add_bias_kv ? 1 : 0) + (cc->add_zero_attn ? 1 : 0);
        const int avg = a->average_attn_weights;
        int64_t *ws = m->w_shape;
        m->w_rank = avg ? 3 : 4;
        if (avg)
            ws[0] = B, ws[1] = a->nq, ws[2] = nk2;
        else
            ws[0] = B, ws[1] = m->heads, ws[2] = a->nq, ws[3] = nk2;
        size_t n = (size_t)(B * a->nq * nk2 * (avg ? 1 : m->heads)), cap = 0;
        attn_status st = grow((void **)&m->w, &cap, sizeof(float) * n);
        if (st) return st;
    }
    return attn_mha_forward(m->mod, a, m->out, m->w, sv, svb, m->ws, m->ws_bytes);
}

/* key / value that defaulted to query give their gradients to query's. */
static attn_status mha_backward(nn_model *m, const float *dout, float *const *g) {
    float *dk = g[IN_B] ? g[IN_B] : g[IN_A], *dv = g[IN_C] ? g[IN_C] : g[IN_A];
    return attn_mha_backward(m->mod, &m->a.mha, dout, g[IN_A], dk, dv, m->saved, m->saved_bytes, m->ws, m->ws_bytes);
}

/* ---- the seed's attention modules over one attn_mha (x = slot A = query = key = value) ----
 * A module whose `attn` is the seed's MultiHeadAttention (nn.Linear W_q, W_k, W_v, W_o) is an
 * attn_mha with separate projections and an attention kind, run with the multihead_attention ops
 * above: its row names the input x, maps q_proj -> attn.W_q (SEED_ATTN_NAMES) and supplies a small
 * create. */

/* The configuration's attention of that kind into m->mod (window_key: the configuration key of
 * its window, or NULL); causal forces PyTorch's is_causal (not an option). */
static attn_status seed_mha_create(nn_model *m, const attn_json *config, const char *const *ignore,
                                   const char *window_key, attn_attention_kind kind, int causal) {
    attn_mha_config c;
    attn_mha *mod = NULL;
    attn_status st = attn_nn_json_seed_attention_config(config, m->ops->name, window_key, ignore, &c);
    if (!st) {
        c.attention.kind = kind;
        st = attn_mha_create(&c, &mod);
    }
    if (st) return st;
    m->mod = mod;
    m->d = c.embed_dim;
    m->heads = c.num_heads;
    m->flag[SET_S] = causal;
    return ATTN_OK;
}

/* sparse_attention: the seed's SparseAttention, query i sees keys i - window_size .. i (the window
 * kind, causal). */
static attn_status sparse_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    return seed_mha_create(m, config, ignore, "window_size", ATTN_ATTENTION_WINDOW, 1);
}

static const attn_name_rule SEED_ATTN_RULES[] = {
    {"q_proj.", "attn.W_q."}, {"k_proj.", "attn.W_k."}, {"v_proj.", "attn.W_v."}, {"out_proj.", "attn.W_o."}};
static const attn_name_map SEED_ATTN_NAMES = {SEED_ATTN_RULES, sizeof SEED_ATTN_RULES / sizeof SEED_ATTN_RULES[0]};

/* ---- local_global_attention (attn_local_global; x = slot A) ---- */

static const attn_name_rule LOCAL_GLOBAL_RULES[] = {
    {"*.q_proj.", "*.W_q."}, {"*.k_proj.", "*.W_k."}, {"*.v_proj.", "*.W_v."}, {"*.out_proj.", "*.W_o."}};
static const attn_name_map LOCAL_GLOBAL_NAMES = {LOCAL_GLOBAL_RULES,
                                                 sizeof LOCAL_GLOBAL_RULES / sizeof LOCAL_GLOBAL_RULES[0]};

static attn_status lg_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    attn_local_global_config c;
    attn_local_global *mod = NULL;
    attn_status st = attn_nn_json_local_global_config(config, ignore, &c);
    if (!st) st = attn_local_global_create(&c, &mod);
    if (st) return st;
    m->mod = mod;
    m->d = c.d_model;
    m->heads = c.num_heads;
    return ATTN_OK;
}

static void lg_build(nn_model *m, int training, uint64_t seed, uint64_t offset) {
    attn_local_global_args *a = &m->a.lg;
    *a = attn_local_global_args_default();
    a->batch = batch_of(m);
    a->n = len_of(m, IN_A);
    a->x = m->in[IN_A];
    a->training = training;
    a->seed = seed;
    a->offset = offset;
}

NN_SIZE_OPS(lg, attn_local_global, lg)
NN_FORWARD_OP(lg, attn_local_global, lg)
static attn_status lg_backward(nn_model *m, const float *dout, float *const *g) {
    return attn_local_global_backward(m->mod, &m->a.lg, dout, g[IN_A], m->saved, m->saved_bytes, m->ws, m->ws_bytes);
}

/* ---- the seed's kernelised attentions over one attn_mha (x = slot A), multihead_attention's ops:
 * linear_attention (LinearAttention: query_projection ... output_projection, the linear kind) and
 * performer_attention (PerformerAttention: W_q ... W_o, the performer kind on its buffer R). */

static const attn_name_rule LINEAR_RULES[] = {{"q_proj.", "query_projection."},
                                              {"k_proj.", "key_projection."},
                                              {"v_proj.", "value_projection."},
                                              {"out_proj.", "output_projection."}};
static const attn_name_map LINEAR_NAMES = {LINEAR_RULES, sizeof LINEAR_RULES / sizeof LINEAR_RULES[0]};
static const attn_name_rule PERFORMER_RULES[] = {
    {"q_proj.", "W_q."}, {"k_proj.", "W_k."}, {"v_proj.", "W_v."}, {"out_proj.", "W_o."}};
static const attn_name_map PERFORMER_NAMES = {PERFORMER_RULES, sizeof PERFORMER_RULES / sizeof PERFORMER_RULES[0]};

/* The configuration's module of that kind; the performer's projection is m->buffer [H, m, d_k]
 * (zeros until load_buffers fills it from R), given to the kind as attention.projection. */
static attn_status kernel_create(nn_model *m, const attn_json *config, const char *const *ignore,
                                 attn_attention_kind kind) {
    attn_mha_config c;
    attn_mha *mod = NULL;
    int causal = 0;
    attn_status st = attn_nn_json_seed_kernel_config(config, m->ops->name, kind, ignore, &c, &causal);
    if (st) return st;
    if (attn_kind_ops_get(kind)->random_features) {
        m->buffer = attn__calloc((size_t)(c.embed_dim * c.attention.num_features), sizeof(float));
        if (!m->buffer) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for the buffer R", m->ops->name);
        c.attention.projection = m->buffer;
        c.attention.projection_heads = c.num_heads;
    }
    if ((st = attn_mha_create(&c, &mod))) return st;
    m->mod = mod;
    m->d = c.embed_dim;
    m->heads = c.num_heads;
    m->flag[SET_S] = causal;
    return ATTN_OK;
}

static attn_status linear_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    return kernel_create(m, config, ignore, ATTN_ATTENTION_LINEAR);
}

static attn_status performer_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    return kernel_create(m, config, ignore, ATTN_ATTENTION_PERFORMER);
}

static int is_float(attn_dtype t);

/* R [num_heads, d_k, num_features] (head h's features are the columns of R[h]) into the kind's
 * projection [num_heads, num_features, d_k]: each head's R transposed. */
static attn_status performer_load_buffers(nn_model *m, const attn_safetensors *st, const char *prefix) {
    const int64_t H = m->heads, dk = m->d / m->heads, F = attn_mha_get_config(m->mod)->attention.num_features;
    char name[300], want[96], got[200];
    snprintf(name, sizeof name, "%sR", prefix);
    snprintf(want, sizeof want, "[%lld, %lld, %lld] ([num_heads, d_k, num_features])", (long long)H, (long long)dk,
             (long long)F);
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    if (!t) return attn_error(ATTN_ERR_NOT_FOUND, "%s: missing buffer '%s' %s", m->ops->name, name, want);
    if (t->rank != 3 || t->shape[0] != H || t->shape[1] != dk || t->shape[2] != F)
        return attn_error(ATTN_ERR_SHAPE, "%s: buffer '%s' has shape %s, expected %s", m->ops->name, name,
                          attn_shape_str(t->shape, t->rank, got, sizeof got), want);
    if (!is_float(t->dtype))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: buffer '%s' must be floating point, got %s", m->ops->name,
                          name, attn_dtype_name(t->dtype));
    const size_t n = (size_t)(H * dk * F);
    float *r = attn__malloc(sizeof(float) * n);
    if (!r) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for the buffer '%s'", m->ops->name, name);
    attn_status s = attn_safetensors_read_f32(st, name, r, n);
    for (int64_t h = 0; !s && h < H; h++)
        for (int64_t i = 0; i < dk; i++)
            for (int64_t f = 0; f < F; f++) m->buffer[(h * F + f) * dk + i] = r[(h * dk + i) * F + f];
    attn__free(r);
    return s;
}

/* ---- layers and stacks (attn_layer_args): x = slot A, memory = slot B ---- */

static attn_status layer_config(nn_model *m, const attn_json *config, const char *const *ignore, attn_layer_config *c) {
    attn_status st = attn_nn_json_layer_config(config, m->ops->name, ignore, c);
    if (!st) set_size(m, c);
    return st;
}

static attn_status stack_config(nn_model *m, const attn_json *config, const char *layer_key, const char *const *ignore,
                                attn_stack_config *c) {
    attn_status st = attn_nn_json_stack_config(config, m->ops->name, layer_key, ignore, c);
    if (!st) set_size(m, &c->layer);
    return st;
}

/* Self-attention masks of set self; with memory, the memory input and the memory set. */
static void layer_build(nn_model *m, int self, int memory, int training, uint64_t seed, uint64_t offset) {
    attn_layer_args *a = &m->a.layer;
    *a = attn_layer_args_default();
    a->batch = batch_of(m);
    a->n = len_of(m, IN_A);
    a->x = m->in[IN_A];
    a->self_masks = masks_of(m, self);
    if (memory) {
        a->memory = m->in[IN_B];
        a->n_memory = len_of(m, IN_B);
        a->memory_masks = masks_of(m, SET_M);
    }
    a->training = training;
    a->seed = seed;
    a->offset = offset;
}

static void enc_build(nn_model *m, int training, uint64_t seed, uint64_t offset) {
    layer_build(m, SET_S, 0, training, seed, offset);
}

static void dec_build(nn_model *m, int training, uint64_t seed, uint64_t offset) {
    layer_build(m, SET_T, 1, training, seed, offset);
}

/* transformer_encoder_layer */
static attn_status enc_layer_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    attn_layer_config c;
    attn_encoder_layer *mod = NULL;
    attn_status st = layer_config(m, config, ignore, &c);
    if (!st) st = attn_encoder_layer_create(&c, &mod);
    m->mod = mod;
    return st;
}
NN_SIZE_OPS(enc_layer, attn_encoder_layer, layer)
NN_FORWARD_OP(enc_layer, attn_encoder_layer, layer)
static attn_status enc_layer_backward(nn_model *m, const float *dout, float *const *g) {
    return attn_encoder_layer_backward(m->mod, &m->a.layer, dout, g[IN_A], m->saved, m->saved_bytes, m->ws,
                                       m->ws_bytes);
}

/* transformer_decoder_layer */
static attn_status dec_layer_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    attn_layer_config c;
    attn_decoder_layer *mod = NULL;
    attn_status st = layer_config(m, config, ignore, &c);
    if (!st) st = attn_decoder_layer_create(&c, &mod);
    m->mod = mod;
    return st;
}
NN_SIZE_OPS(dec_layer, attn_decoder_layer, layer)
NN_FORWARD_OP(dec_layer, attn_decoder_layer, layer)
static attn_status dec_layer_backward(nn_model *m, const float *dout, float *const *g) {
    return attn_decoder_layer_backward(m->mod, &m->a.layer, dout, g[IN_A], g[IN_B], m->saved, m->saved_bytes, m->ws,
                                       m->ws_bytes);
}

/* transformer_encoder */
static attn_status enc_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    attn_stack_config c;
    attn_encoder *mod = NULL;
    attn_status st = stack_config(m, config, "encoder_layer", ignore, &c);
    if (!st) st = attn_encoder_create(&c, &mod);
    m->mod = mod;
    return st;
}
NN_SIZE_OPS(enc, attn_encoder, layer)
NN_FORWARD_OP(enc, attn_encoder, layer)
static attn_status enc_backward(nn_model *m, const float *dout, float *const *g) {
    return attn_encoder_backward(m->mod, &m->a.layer, dout, g[IN_A], m->saved, m->saved_bytes, m->ws, m->ws_bytes);
}

/* transformer_decoder */
static attn_status dec_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    attn_stack_config c;
    attn_decoder *mod = NULL;
    attn_status st = stack_config(m, config, "decoder_layer", ignore, &c);
    if (!st) st = attn_decoder_create(&c, &mod);
    m->mod = mod;
    return st;
}
NN_SIZE_OPS(dec, attn_decoder, layer)
NN_FORWARD_OP(dec, attn_decoder, layer)
static attn_status dec_backward(nn_model *m, const float *dout, float *const *g) {
    return attn_decoder_backward(m->mod, &m->a.layer, dout, g[IN_A], g[IN_B], m->saved, m->saved_bytes, m->ws,
                                 m->ws_bytes);
}

/* ---- transformer: src = slot A, tgt = slot B ---- */

static attn_status tr_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    attn_transformer_config c;
    attn_transformer *mod = NULL;
    attn_status st = attn_nn_json_transformer_config(config, ignore, &c);
    if (!st) {
        set_size(m, &c.layer);
        st = attn_transformer_create(&c, &mod);
    }
    m->mod = mod;
    return st;
}

static void tr_build(nn_model *m, int training, uint64_t seed, uint64_t offset) {
    attn_transformer_args *a = &m->a.tr;
    *a = attn_transformer_args_default();
    a->batch = batch_of(m);
    a->n_src = len_of(m, IN_A);
    a->n_tgt = len_of(m, IN_B);
    a->src = m->in[IN_A];
    a->tgt = m->in[IN_B];
    a->src_masks = masks_of(m, SET_S);
    a->tgt_masks = masks_of(m, SET_T);
    a->memory_masks = masks_of(m, SET_M);
    a->training = training;
    a->seed = seed;
    a->offset = offset;
}

NN_SIZE_OPS(tr, attn_transformer, tr)
NN_FORWARD_OP(tr, attn_transformer, tr)
static attn_status tr_backward(nn_model *m, const float *dout, float *const *g) {
    return attn_transformer_backward(m->mod, &m->a.tr, dout, g[IN_A], g[IN_B], m->saved, m->saved_bytes, m->ws,
                                     m->ws_bytes);
}

/* ---- vision_transformer: x = slot A [B, C, H, W], output logits [B, num_classes] ---- */

static attn_status vit_create(nn_model *m, const attn_json *config, const char *const *ignore) {
    attn_vit_config c;
    attn_vit *mod = NULL;
    attn_status st = attn_nn_json_vit_config(config, ignore, &c);
    if (!st) st = attn_vit_create(&c, &mod);
    if (st) return st;
    m->mod = mod;
    m->d = c.hidden_dim;
    m->heads = c.num_heads;
    return ATTN_OK;
}

static int vit_input_fits(const nn_model *m, int slot, const attn_safetensors_tensor *t, char *want, size_t cap) {
    (void)slot;
    const attn_vit_config *c = attn_vit_get_config(m->mod);
    snprintf(want, cap, "[batch, %lld, %lld, %lld]", (long long)c->in_channels, (long long)c->image_h,
             (long long)c->image_w);
    return t->rank == 4 && t->shape[0] >= 1 && t->shape[1] == c->in_channels && t->shape[2] == c->image_h &&
           t->shape[3] == c->image_w;
}

static int vit_output_shape(const nn_model *m, int64_t shape[4]) {
    shape[0] = m->in_shape[IN_A][0];
    shape[1] = attn_vit_get_config(m->mod)->num_classes;
    return 2;
}

static void vit_build(nn_model *m, int training, uint64_t seed, uint64_t offset) {
    attn_vit_args *a = &m->a.vit;
    memset(a, 0, sizeof *a);
    a->batch = batch_of(m);
    a->images = m->in[IN_A];
    a->training = training;
    a->seed = seed;
    a->offset = offset;
}

NN_SIZE_OPS(vit, attn_vit, vit)
NN_FORWARD_OP(vit, attn_vit, vit)
static attn_status vit_backward(nn_model *m, const float *dout, float *const *g) {
    return attn_vit_backward(m->mod, &m->a.vit, dout, g[IN_A], m->saved, m->saved_bytes, m->ws, m->ws_bytes);
}

/* ---- the modules of `attn run` ---- */

#define NN_OPS(pre, bind_check_fn, build_fn)                                                                           \
    .create = pre##_create, .free = pre##_free, .params = pre##_params, .bind_check = bind_check_fn,                   \
    .build = build_fn, .sizes = pre##_sizes, .forward = pre##_forward, .backward = pre##_backward

/* A seed attention module over one attn_mha: its create, the multihead_attention ops. */
#define NN_SEED_MHA_OPS(create_fn)                                                                                     \
    .create = create_fn, .free = mha_free, .params = mha_params, .bind_check = mha_bind_check, .build = mha_build,     \
    .sizes = mha_sizes, .forward = mha_forward, .backward = mha_backward

/* Indexed by nn_module_id: a row's place is its module's value, whatever the order written here. */
static const nn_module_ops MODULES[] = {
    [NN_MODULE_MULTIHEAD_ATTENTION] = {.name = "multihead_attention",
                                       .args = {NN_IN("query", IN_A, 1), NN_IN("key", IN_B, 0), NN_IN("value", IN_C, 0),
                                                NN_KPM("key_padding_mask", SET_S), NN_MASK("attn_mask", SET_S)},
                                       .opts = {{"need_weights", F_NEED_WEIGHTS, 0},
                                                {"average_attn_weights", F_AVERAGE, 1},
                                                {"is_causal", SET_S, 0}},
                                       .dims = {[SET_S] = {IN_A, IN_B}},
                                       .out_slot = IN_A,
                                       NN_OPS(mha, mha_bind_check, mha_build)},
    [NN_MODULE_TRANSFORMER_ENCODER_LAYER] = {.name = "transformer_encoder_layer",
                                             .args = {NN_IN("src", IN_A, 1), NN_MASK("src_mask", SET_S),
                                                      NN_KPM("src_key_padding_mask", SET_S)},
                                             .opts = {{"is_causal", SET_S, 0}},
                                             .dims = {[SET_S] = {IN_A, IN_A}},
                                             .out_slot = IN_A,
                                             NN_OPS(enc_layer, NULL, enc_build)},
    [NN_MODULE_TRANSFORMER_DECODER_LAYER] = {.name = "transformer_decoder_layer",
                                             .args = {NN_IN("tgt", IN_A, 1), NN_IN("memory", IN_B, 1),
                                                      NN_MASK("tgt_mask", SET_T), NN_MASK("memory_mask", SET_M),
                                                      NN_KPM("tgt_key_padding_mask", SET_T),
                                                      NN_KPM("memory_key_padding_mask", SET_M)},
                                             .opts = {{"tgt_is_causal", SET_T, 0}, {"memory_is_causal", SET_M, 0}},
                                             .dims = {[SET_T] = {IN_A, IN_A}, [SET_M] = {IN_A, IN_B}},
                                             .out_slot = IN_A,
                                             NN_OPS(dec_layer, NULL, dec_build)},
    [NN_MODULE_TRANSFORMER_ENCODER] = {.name = "transformer_encoder",
                                       .args = {NN_IN("src", IN_A, 1), NN_MASK("mask", SET_S),
                                                NN_KPM("src_key_padding_mask", SET_S)},
                                       .opts = {{"is_causal", SET_S, 0}},
                                       .dims = {[SET_S] = {IN_A, IN_A}},
                                       .out_slot = IN_A,
                                       NN_OPS(enc, NULL, enc_build)},
    [NN_MODULE_TRANSFORMER_DECODER] = {.name = "transformer_decoder",
                                       .args = {NN_IN("tgt", IN_A, 1), NN_IN("memory", IN_B, 1),
                                                NN_MASK("tgt_mask", SET_T), NN_MASK("memory_mask", SET_M),
                                                NN_KPM("tgt_key_padding_mask", SET_T),
                                                NN_KPM("memory_key_padding_mask", SET_M)},
                                       .opts = {{"tgt_is_causal", SET_T, 0}, {"memory_is_causal", SET_M, 0}},
                                       .dims = {[SET_T] = {IN_A, IN_A}, [SET_M] = {IN_A, IN_B}},
                                       .out_slot = IN_A,
                                       NN_OPS(dec, NULL, dec_build)},
    [NN_MODULE_TRANSFORMER] =
        {.name = "transformer",
         .args = {NN_IN("src", IN_A, 1), NN_IN("tgt", IN_B, 1), NN_MASK("src_mask", SET_S), NN_MASK("tgt_mask", SET_T),
                  NN_MASK("memory_mask", SET_M), NN_KPM("src_key_padding_mask", SET_S),
                  NN_KPM("tgt_key_padding_mask", SET_T), NN_KPM("memory_key_padding_mask", SET_M)},
         .opts = {{"src_is_causal", SET_S, 0}, {"tgt_is_causal", SET_T, 0}, {"memory_is_causal", SET_M, 0}},
         .dims = {[SET_S] = {IN_A, IN_A}, [SET_T] = {IN_B, IN_B}, [SET_M] = {IN_B, IN_A}},
         .out_slot = IN_B,
         NN_OPS(tr, NULL, tr_build)},
    [NN_MODULE_SPARSE_ATTENTION] = {.name = "sparse_attention",
                                    .args = {NN_IN("x", IN_A, 1)},
                                    .dims = {[SET_S] = {IN_A, IN_A}},
                                    .out_slot = IN_A,
                                    .names = &SEED_ATTN_NAMES,
                                    NN_SEED_MHA_OPS(sparse_create)},
    [NN_MODULE_LOCAL_GLOBAL_ATTENTION] = {.name = "local_global_attention",
                                          .args = {NN_IN("x", IN_A, 1)},
                                          .out_slot = IN_A,
                                          .names = &LOCAL_GLOBAL_NAMES,
                                          NN_OPS(lg, NULL, lg_build)},
    [NN_MODULE_LINEAR_ATTENTION] = {.name = "linear_attention",
                                    .args = {NN_IN("x", IN_A, 1)},
                                    .dims = {[SET_S] = {IN_A, IN_A}},
                                    .out_slot = IN_A,
                                    .names = &LINEAR_NAMES,
                                    NN_SEED_MHA_OPS(linear_create)},
    [NN_MODULE_PERFORMER_ATTENTION] = {.name = "performer_attention",
                                       .args = {NN_IN("x", IN_A, 1)},
                                       .dims = {[SET_S] = {IN_A, IN_A}},
                                       .out_slot = IN_A,
                                       .names = &PERFORMER_NAMES,
                                       .buffers = {"R"},
                                       .load_buffers = performer_load_buffers,
                                       NN_SEED_MHA_OPS(performer_create)},
    [NN_MODULE_VISION_TRANSFORMER] = {.name = "vision_transformer",
                                      .args = {NN_IN("x", IN_A, 1)},
                                      .out_slot = IN_A,
                                      NN_OPS(vit, NULL, vit_build),
                                      .input_fits = vit_input_fits,
                                      .output_shape = vit_output_shape,
                                      .names = &attn_nn_vit_torchvision_map},
};
#define NMODULES (sizeof MODULES / sizeof MODULES[0])
/* A module added to nn_module_id without its row (or a row past the enum) fails the build; a row
 * left out before the last is caught by attn_nn_model_table_check. */
_Static_assert(sizeof MODULES / sizeof MODULES[0] == NN_MODULE_COUNT,
               "MODULES[] needs exactly one row per nn_module_id");

/* ---- the model: everything below works from the module's row ---- */

#define FOR_ARGS(o, i) for (int i = 0; i < MAXA && (o)->args[i].name; i++)
#define FOR_OPTS(o, i) for (int i = 0; i < MAXO && (o)->opts[i].name; i++)

const char *attn_nn_model_known(size_t i) { return i < NMODULES ? MODULES[i].name : NULL; }

size_t attn_nn_model_count(void) { return NMODULES; }

attn_status attn_nn_model_table_check(void) {
    static const char fn[] = "attn_nn_model_table_check";
    for (size_t i = 0; i < NMODULES; i++) {
        const nn_module_ops *o = &MODULES[i];
        const char *missing = !o->name || !*o->name               ? "name"
                              : !o->args[0].name                  ? "forward argument"
                              : !o->create                        ? "create"
                              : !o->free                          ? "free"
                              : !o->params                        ? "params"
                              : !o->build                         ? "build"
                              : !o->sizes                         ? "sizes"
                              : !o->forward                       ? "forward"
                              : !o->backward                      ? "backward"
                              : o->buffers[0] && !o->load_buffers ? "load_buffers"
                                                                  : NULL;
        if (missing) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: module row %zu has no %s", fn, i, missing);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(MODULES[j].name, o->name))
                return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: module '%s' has two rows", fn, o->name);
    }
    return ATTN_OK;
}

/* The argument name of a float input slot (also its gradient's name). */
static const char *slot_name(const nn_module_ops *o, int slot) {
    FOR_ARGS(o, i) {
        if (o->args[i].in == slot) return o->args[i].name;
    }
    return NULL;
}

static void clear_inputs(nn_model *m) {
    for (int i = 0; i < NIN; i++) {
        attn__free(m->in[i]);
        m->in[i] = NULL;
        attn__free(m->grad[i]);
        m->grad[i] = NULL;
    }
    for (int s = 0; s < NSET; s++)
        for (int k = 0; k < 2; k++) {
            attn__free(m->mb[s][k]);
            attn__free(m->mf[s][k]);
            m->mb[s][k] = NULL;
            m->mf[s][k] = NULL;
        }
    m->bound = 0;
    m->kept = 0;
}

void attn_nn_model_free(nn_model *m) {
    if (!m) return;
    clear_inputs(m);
    if (m->mod) m->ops->free(m->mod);
    attn__free(m->buffer);
    attn__free(m->out);
    attn__free(m->w);
    attn__free(m->saved);
    attn__free(m->ws);
    attn__free(m);
}

const char *attn_nn_model_name(const nn_model *m) { return m ? m->ops->name : NULL; }
attn_vit *attn_nn_model_vit(const nn_model *m) {
    return m && m->ops == &MODULES[NN_MODULE_VISION_TRANSFORMER] ? (attn_vit *)m->mod : NULL;
}

const attn_params *attn_nn_model_params(nn_model *m) { return m ? m->ops->params(m->mod) : NULL; }

const attn_name_map *attn_nn_model_name_map(const nn_model *m) { return m ? m->ops->names : NULL; }

attn_status attn_nn_model_set_option(nn_model *m, const char *name, int value) {
    ATTN_CHECK_NOT_NULL("attn_nn_model_set_option", m);
    ATTN_CHECK_NOT_NULL("attn_nn_model_set_option", name);
    FOR_OPTS(m->ops, i) {
        if (strcmp(m->ops->opts[i].name, name)) continue;
        m->flag[m->ops->opts[i].flag] = value;
        return ATTN_OK;
    }
    return attn_error(ATTN_ERR_NOT_FOUND, "%s: no option '%s'", m->ops->name, name);
}

attn_status attn_nn_model_create(const attn_json *config, nn_model **out) {
    static const char fn[] = "config";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    if (!config || config->type != ATTN_JSON_OBJECT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: expected a JSON object", fn);
    size_t name_len = 0;
    const char *name = attn_json_as_string(attn_json_get(config, "module"), &name_len);
    if (!name) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: missing key 'module' (a string)", fn);
    if (strlen(name) != name_len)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'module' contains a NUL character", fn);
    const nn_module_ops *ops = MODULES;
    while (ops < MODULES + NMODULES && strcmp(ops->name, name)) ops++;
    if (ops == MODULES + NMODULES) {
        char known[512];
        size_t o = 0;
        for (size_t k = 0; k < NMODULES; k++)
            o += (size_t)snprintf(known + o, o < sizeof known ? sizeof known - o : 0, "%s%s", k ? ", " : "",
                                  MODULES[k].name);
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: unknown module '%s' (known: %s)", fn, name, known);
    }
    nn_model *m = attn__calloc(1, sizeof *m);
    if (!m) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    m->ops = ops;
    const char *ignore[MAXO + 2] = {"module"};
    FOR_OPTS(ops, i) {
        ignore[i + 1] = ops->opts[i].name;
        m->flag[ops->opts[i].flag] = ops->opts[i].dflt;
    }
    attn_status st = ops->create(m, config, ignore);
    for (int i = 0; i < NIN; i++)
        if (!m->width[i]) m->width[i] = m->d;
    FOR_OPTS(ops, i) {
        const attn_json *v = attn_json_get(config, ops->opts[i].name);
        int b;
        if (st) break;
        if (!v) continue;
        if (!attn_json_as_bool(v, &b))
            st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be true or false", name, ops->opts[i].name);
        else
            st = attn_nn_model_set_option(m, ops->opts[i].name, b);
    }
    if (st) {
        attn_nn_model_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

/* ---- weights ---- */

#define FOR_BUFFERS(o, i) for (int i = 0; i < MAXB && (o)->buffers[i]; i++)

/* Whether a tensor name (prefix removed) is a mapped parameter name or a buffer of the module. */
static int weight_known(const nn_model *m, const attn_params *ps, const char *rest) {
    FOR_BUFFERS(m->ops, i) {
        if (!strcmp(rest, m->ops->buffers[i])) return 1;
    }
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        char theirs[300];
        if (!attn_name_map_apply(m->ops->names, attn_params_get(ps, i)->name, theirs, sizeof theirs) &&
            !strcmp(rest, theirs))
            return 1;
    }
    return 0;
}

attn_status attn_nn_model_load(nn_model *m, const attn_safetensors *st, const char *prefix, int strict) {
    static const char fn[] = "attn_nn_model_load";
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, st);
    if (!prefix) prefix = "";
    const attn_params *ps = m->ops->params(m->mod);
    if (!m->ops->load_buffers) return attn_params_load_mapped(ps, st, m->ops->names, prefix, strict);
    /* parameters and buffers: the strict check here (the parameters' loader would call the
     * buffers unexpected), then each loader's own checks */
    const size_t lp = strlen(prefix);
    char list[400] = "";
    size_t o = 0;
    int unexpected = 0;
    for (size_t t = 0; strict && t < attn_safetensors_count(st); t++) {
        const char *tn = attn_safetensors_get(st, t)->name;
        if (strncmp(tn, prefix, lp) || weight_known(m, ps, tn + lp)) continue;
        if (o < sizeof list) o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", unexpected ? ", " : "", tn);
        unexpected++;
    }
    if (unexpected)
        return attn_error(ATTN_ERR_NOT_FOUND,
                          "%s: %s: unexpected (%d): %s (neither a parameter nor a buffer of the module)", fn,
                          m->ops->name, unexpected, list);
    m->buffers_loaded = 0;
    attn_status s = attn_params_load_mapped(ps, st, m->ops->names, prefix, 0);
    if (!s) s = m->ops->load_buffers(m, st, prefix);
    m->buffers_loaded = !s;
    return s;
}

/* ---- binding ---- */

static int is_float(attn_dtype t) {
    return t == ATTN_DTYPE_F32 || t == ATTN_DTYPE_F16 || t == ATTN_DTYPE_BF16 || t == ATTN_DTYPE_F64;
}

static size_t numel_of(const attn_safetensors_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= (size_t)t->shape[d];
    return n;
}

static attn_status shape_error(const char *what, const attn_safetensors_tensor *t, const char *want) {
    char s[200];
    return attn_error(ATTN_ERR_SHAPE, "input '%s' has shape %s, expected %s", what,
                      attn_shape_str(t->shape, t->rank, s, sizeof s), want);
}

/* With strict: a tensor under prefix that is no argument of the module is an error. */
static attn_status check_known(const nn_module_ops *o, const attn_safetensors *st, const char *prefix) {
    const size_t lp = strlen(prefix);
    for (size_t t = 0; t < attn_safetensors_count(st); t++) {
        const char *tn = attn_safetensors_get(st, t)->name;
        if (strncmp(tn, prefix, lp)) continue;
        int known = 0;
        FOR_ARGS(o, i) { known = known || !strcmp(tn + lp, o->args[i].name); }
        if (known) continue;
        char want[160] = "";
        size_t n = 0;
        FOR_ARGS(o, i) {
            n += (size_t)snprintf(want + n, n < sizeof want ? sizeof want - n : 0, "%s%s", i ? ", " : "",
                                  o->args[i].name);
        }
        return attn_error(ATTN_ERR_NOT_FOUND, "%s: unknown input '%s' (inputs: %s)", o->name, tn + lp, want);
    }
    return ATTN_OK;
}

/* A float input [batch, length, width] into its slot. */
static attn_status bind_input(nn_model *m, const nn_arg *arg, const attn_safetensors *st,
                              const attn_safetensors_tensor *t, const char *name) {
    const int slot = arg->in;
    char want[160];
    snprintf(want, sizeof want, "[batch, length, %lld] (batch-first)", (long long)m->width[slot]);
    if (!is_float(t->dtype))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "input '%s' must be floating point, got %s", arg->name,
                          attn_dtype_name(t->dtype));
    if (m->ops->input_fits ? !m->ops->input_fits(m, slot, t, want, sizeof want)
                           : (t->rank != 3 || t->shape[2] != m->width[slot] || t->shape[0] < 1 || t->shape[1] < 1))
        return shape_error(arg->name, t, want);
    m->in[slot] = attn__malloc(sizeof(float) * numel_of(t));
    if (!m->in[slot]) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "input '%s': out of memory", arg->name);
    attn_status s = attn_safetensors_read_f32(st, name, m->in[slot], numel_of(t));
    if (s) return s;
    for (int d = 0; d < t->rank && d < 4; d++) m->in_shape[slot][d] = t->shape[d];
    m->in_rank[slot] = t->rank;
    return ATTN_OK;
}

/* A mask: key_padding_mask [B, Nk], attn_mask [Nq, Nk] or [B * heads, Nq, Nk] of its set. */
static attn_status bind_mask(nn_model *m, const nn_arg *arg, const attn_safetensors *st,
                             const attn_safetensors_tensor *t, const char *name) {
    const int set = arg->set, kpm = arg->kpm;
    const int64_t B = batch_of(m), nq = len_of(m, m->ops->dims[set][0]), nk = len_of(m, m->ops->dims[set][1]);
    char want[160];
    int ok;
    if (kpm) {
        ok = t->rank == 2 && t->shape[0] == B && t->shape[1] == nk;
        snprintf(want, sizeof want, "[%lld, %lld]", (long long)B, (long long)nk);
    } else {
        ok = (t->rank == 2 && t->shape[0] == nq && t->shape[1] == nk) ||
             (t->rank == 3 && t->shape[0] == B * m->heads && t->shape[1] == nq && t->shape[2] == nk);
        snprintf(want, sizeof want, "[%lld, %lld] or [%lld, %lld, %lld]", (long long)nq, (long long)nk,
                 (long long)(B * m->heads), (long long)nq, (long long)nk);
        m->m3d[set] = t->rank == 3;
    }
    if (!ok) return shape_error(arg->name, t, want);
    const size_t n = numel_of(t);
    if (t->dtype == ATTN_DTYPE_BOOL || t->dtype == ATTN_DTYPE_U8) {
        m->mb[set][kpm] = attn__malloc(n ? n : 1);
        if (!m->mb[set][kpm]) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "input '%s': out of memory", arg->name);
        const uint8_t *src = t->data;
        for (size_t e = 0; e < n; e++) m->mb[set][kpm][e] = src[e] != 0;
        return ATTN_OK;
    }
    if (is_float(t->dtype)) {
        m->mf[set][kpm] = attn__malloc(sizeof(float) * (n ? n : 1));
        if (!m->mf[set][kpm]) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "input '%s': out of memory", arg->name);
        return attn_safetensors_read_f32(st, name, m->mf[set][kpm], n);
    }
    return attn_error(ATTN_ERR_INVALID_ARGUMENT, "input '%s' must be BOOL, U8 or floating point, got %s", arg->name,
                      attn_dtype_name(t->dtype));
}

attn_status attn_nn_model_bind(nn_model *m, const attn_safetensors *st, const char *prefix, int strict) {
    ATTN_CHECK_NOT_NULL("attn_nn_model_bind", m);
    ATTN_CHECK_NOT_NULL("attn_nn_model_bind", st);
    if (!prefix) prefix = "";
    clear_inputs(m);
    const nn_module_ops *o = m->ops;
    const attn_safetensors_tensor *found[MAXA] = {0};
    char name[MAXA][256];
    attn_status s = ATTN_OK;
    FOR_ARGS(o, i) {
        snprintf(name[i], sizeof name[i], "%s%s", prefix, o->args[i].name);
        found[i] = attn_safetensors_find(st, name[i]);
        if (!found[i] && o->args[i].required)
            return attn_error(ATTN_ERR_NOT_FOUND, "%s: missing input '%s'", o->name, o->args[i].name);
    }
    if (strict && (s = check_known(o, st, prefix))) return s;
    /* float inputs first: they fix B and the sequence lengths */
    FOR_ARGS(o, i) {
        if (found[i] && o->args[i].in >= 0 && (s = bind_input(m, &o->args[i], st, found[i], name[i]))) return s;
    }
    const int64_t B = batch_of(m);
    for (int slot = 1; slot < NIN; slot++)
        if (m->in[slot] && m->in_shape[slot][0] != B)
            return attn_error(ATTN_ERR_SHAPE, "input '%s' has batch %lld, '%s' has %lld", slot_name(o, slot),
                              (long long)m->in_shape[slot][0], slot_name(o, IN_A), (long long)B);
    if (o->bind_check && (s = o->bind_check(m))) return s;
    FOR_ARGS(o, i) {
        if (found[i] && o->args[i].in < 0 && (s = bind_mask(m, &o->args[i], st, found[i], name[i]))) return s;
    }
    m->bound = 1;
    return ATTN_OK;
}

/* ---- forward / backward ---- */

attn_status attn_nn_model_forward(nn_model *m, int keep_for_backward, int training, uint64_t seed, uint64_t offset) {
    ATTN_CHECK_NOT_NULL("attn_nn_model_forward", m);
    if (!m->bound) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_nn_model_forward: no inputs bound");
    if (m->ops->load_buffers && !m->buffers_loaded)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_nn_model_forward: %s: its buffer %s is not loaded (attn_nn_model_load)", m->ops->name,
                          m->ops->buffers[0]);
    m->ops->build(m, training, seed, offset);
    size_t sb = 0, wb = 0;
    m->ops->sizes(m, &sb, &wb);
    if (sb == SIZE_MAX || wb == SIZE_MAX)
        return attn_error(ATTN_ERR_OVERFLOW, "%s: buffer sizes overflow for these inputs", m->ops->name);
    attn_status st;
    size_t cap = 0;
    const int64_t B = batch_of(m), N = len_of(m, m->ops->out_slot);
    attn__free(m->out);
    m->out = NULL;
    m->out_shape[0] = B, m->out_shape[1] = N, m->out_shape[2] = m->d;
    m->out_rank = m->ops->output_shape ? m->ops->output_shape(m, m->out_shape) : 3;
    size_t n_out = 1;
    for (int d = 0; d < m->out_rank; d++) n_out *= (size_t)m->out_shape[d];
    if ((st = grow((void **)&m->out, &cap, sizeof(float) * n_out))) return st;
    if ((keep_for_backward && (st = grow(&m->saved, &m->saved_bytes, sb))) || (st = grow(&m->ws, &m->ws_bytes, wb)))
        return st;
    attn__free(m->w);
    m->w = NULL;
    m->w_rank = 0;
    m->kept = 0;
    st = m->ops->forward(m, keep_for_backward ? m->saved : NULL, keep_for_backward ? m->saved_bytes : 0);
    m->kept = !st && keep_for_backward;
    return st;
}

const float *attn_nn_model_output(const nn_model *m, int *rank, int64_t shape[4]) {
    if (!m || !m->out) return NULL;
    if (rank) *rank = m->out_rank;
    if (shape) memcpy(shape, m->out_shape, sizeof m->out_shape);
    return m->out;
}

const float *attn_nn_model_weights(const nn_model *m, int *rank, int64_t shape[4]) {
    if (!m || !m->w) return NULL;
    if (rank) *rank = m->w_rank;
    if (shape) memcpy(shape, m->w_shape, sizeof m->w_shape);
    return m->w;
}

static size_t input_numel(const nn_model *m, int slot) {
    size_t n = 1;
    for (int d = 0; d < m->in_rank[slot]; d++) n *= (size_t)m->in_shape[slot][d];
    return n;
}

attn_status attn_nn_model_backward(nn_model *m, const float *dout) {
    ATTN_CHECK_NOT_NULL("attn_nn_model_backward", m);
    ATTN_CHECK_NOT_NULL("attn_nn_model_backward", dout);
    if (!m->kept)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_nn_model_backward: no forward kept for a backward");
    for (int i = 0; i < NIN; i++) {
        attn__free(m->grad[i]);
        m->grad[i] = NULL;
        if (!m->in[i]) continue;
        m->grad[i] = attn__malloc(sizeof(float) * input_numel(m, i));
        if (!m->grad[i]) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_nn_model_backward: out of memory");
    }
    return m->ops->backward(m, dout, m->grad);
}

const float *attn_nn_model_input_grad(const nn_model *m, const char *name, size_t *numel) {
    if (!m || !name) return NULL;
    for (int i = 0; i < NIN; i++) {
        const char *n = slot_name(m->ops, i);
        if (!n || strcmp(n, name) || !m->grad[i]) continue;
        if (numel) *numel = input_numel(m, i);
        return m->grad[i];
    }
    return NULL;
}
