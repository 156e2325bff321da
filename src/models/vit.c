/* The ViT family (transformers' ViTModel / ViTForImageClassification in eval), built from the
 * library's modules:
 *   patches = Conv2d(C, H, kernel = stride = patch)(pixels)   im2col of the gh x gw grid, one linear
 *   x = [cls_token, patches] + position_embeddings             no interpolation: config's image_size
 *   h = encoder(x)   num_hidden_layers pre-norm layers = nn.TransformerEncoderLayer(norm_first = True,
 *                    activation gelu / gelu's tanh form / relu, layer_norm_eps), then the final
 *                    layernorm (the stack's norm): ViTModel's last_hidden_state
 *   logits = classifier(h[:, 0])                               ViTForImageClassification
 * ViTLayer's weights go to the layer's parameters: q / k / v (q_proj or attention.query, ...) into
 * the three row blocks of self_attn.in_proj_weight / in_proj_bias (zero without qkv_bias), o_proj
 * (attention.output.dense) -> self_attn.out_proj, layernorm_before -> norm1, layernorm_after ->
 * norm2, mlp.fc1 (intermediate.dense) -> linear1, mlp.fc2 (output.dense) -> linear2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/layers.h"
#include "core/alloc.h"
#include "core/internal.h"
#include "models_internal.h"

typedef struct vit_config {
    int64_t hidden, layers, heads, inter, channels;
    int64_t image_h, image_w, patch_h, patch_w, gh, gw, tokens;
    int64_t labels; /* rows of the classifier (id2label's size), 0 without one */
    double eps;
    attn_activation act;
    int qkv_bias;
} vit_config;

typedef struct vit {
    vit_config c;
    float *cls, *pos, *proj_w, *proj_b, *head_w, *head_b;
    attn_encoder *enc; /* the layers and the final layernorm */
    char **labels;     /* [c.labels] */
    hf_image_prep prep;
    void *ws;
    size_t ws_bytes;
    hf_precision prec; /* of the products (attn_pretrained_set_precision) */
} vit;

/* image_size / patch_size: an integer, or [height, width]. */
static attn_status read_pair(const hf_folder *f, const char *key, int64_t def, int64_t hi, int64_t *h, int64_t *w) {
    const attn_json *v = attn_json_get(f->config, key);
    if (!v || v->type != ATTN_JSON_ARRAY) {
        attn_status st = attn_hf_config_int(f, key, 0, def, 1, hi, h);
        *w = *h;
        return st;
    }
    int64_t x[2];
    for (size_t i = 0; i < 2 && attn_json_count(v) == 2; i++)
        if (!attn_json_as_i64(attn_json_at(v, i), &x[i]) || x[i] < 1 || x[i] > hi) x[0] = -1;
    if (attn_json_count(v) != 2 || x[0] < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: key '%s' must be an integer or [height, width] of integers in [1, %lld]", f->config_path,
                          key, (long long)hi);
    *h = x[0], *w = x[1];
    return ATTN_OK;
}

/* id2label {"0": "cat", ...}: exactly the keys 0 .. n-1; absent: num_labels (default 2). */
static attn_status read_labels(const hf_folder *f, int64_t *n) {
    const attn_json *v = attn_json_get(f->config, "id2label");
    if (!v || attn_json_is_null(v)) return attn_hf_config_int(f, "num_labels", 0, 2, 0, INT32_MAX, n);
    if (v->type != ATTN_JSON_OBJECT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'id2label' must be an object (got %s)", f->config_path,
                          attn_json_type_name(v->type));
    const size_t count = attn_json_count(v);
    for (size_t i = 0; i < count; i++) {
        const char *k = attn_json_as_string(attn_json_member_key(v, i), NULL);
        char *end = NULL;
        long long id = k ? strtoll(k, &end, 10) : -1;
        if (!k || !*k || *end || id < 0 || (size_t)id >= count || !attn_json_get(v, k) ||
            !attn_json_as_string(attn_json_member_value(v, i), NULL))
            return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                              "%s: key 'id2label' must map \"0\" .. \"%zu\" to strings (entry %zu: \"%.40s\")",
                              f->config_path, count ? count - 1 : 0, i, k ? k : "?");
    }
    *n = (int64_t)count;
    return ATTN_OK;
}

static attn_status read_config(const hf_folder *f, vit_config *c) {
    const int64_t big = (int64_t)1 << 24;
    memset(c, 0, sizeof *c);
    attn_status st = attn_hf_config_int(f, "hidden_size", 1, 0, 1, big, &c->hidden);
    if (!st) st = attn_hf_config_int(f, "num_hidden_layers", 1, 0, 1, big, &c->layers);
    if (!st) st = attn_hf_config_int(f, "num_attention_heads", 1, 0, 1, c->hidden, &c->heads);
    if (!st) st = attn_hf_config_int(f, "intermediate_size", 1, 0, 1, big, &c->inter);
    if (!st) st = attn_hf_config_int(f, "num_channels", 0, 3, 1, 4096, &c->channels);
    if (!st) st = read_pair(f, "image_size", 224, ATTN_IMAGE_MAX_SIDE, &c->image_h, &c->image_w);
    if (!st) st = read_pair(f, "patch_size", 16, ATTN_IMAGE_MAX_SIDE, &c->patch_h, &c->patch_w);
    if (!st && (c->patch_h > c->image_h || c->patch_w > c->image_w))
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT,
                        "%s: key 'patch_size' (%lldx%lld) is larger than 'image_size' (%lldx%lld)", f->config_path,
                        (long long)c->patch_h, (long long)c->patch_w, (long long)c->image_h, (long long)c->image_w);
    if (!st) st = attn_hf_config_number(f, "layer_norm_eps", 1e-12, &c->eps);
    if (!st && !(c->eps > 0 && c->eps < 1))
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'layer_norm_eps' must be in (0, 1) (got %g)",
                        f->config_path, c->eps);
    if (!st && c->hidden % c->heads)
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT,
                        "%s: key 'hidden_size' (%lld) is not a multiple of 'num_attention_heads' (%lld)",
                        f->config_path, (long long)c->hidden, (long long)c->heads);
    if (!st) st = attn_hf_config_activation(f, &c->act);
    if (!st) st = attn_hf_config_bool(f, "qkv_bias", 1, &c->qkv_bias);
    if (!st) st = read_labels(f, &c->labels);
    /* the grid Conv2d covers (a remainder of pixels past it is not read, as in the convolution) */
    if (st) return st;
    c->gh = c->image_h / c->patch_h, c->gw = c->image_w / c->patch_w;
    c->tokens = 1 + c->gh * c->gw;
    return ATTN_OK;
}

/* Where the weights are: the "vit." prefix (ViTFor* checkpoints) and the layers' naming
 * (transformers 5's "layers.N." or 4.x's "encoder.layer.N."). */
typedef struct vit_names {
    const char *prefix, *stack;
    int legacy;
} vit_names;

static vit_names weights_names(const hf_folder *f) {
    vit_names v = {"", "layers.", 0};
    if (!attn_hf_tensor(f, "embeddings.cls_token", NULL) && attn_hf_tensor(f, "vit.embeddings.cls_token", NULL))
        v.prefix = "vit.";
    char name[64];
    snprintf(name, sizeof name, "%slayers.0.layernorm_before.weight", v.prefix);
    if (!attn_hf_tensor(f, name, NULL)) {
        snprintf(name, sizeof name, "%sencoder.layer.0.layernorm_before.weight", v.prefix);
        if (attn_hf_tensor(f, name, NULL)) v.stack = "encoder.layer.", v.legacy = 1;
    }
    return v;
}

/* ViTModel's pooler and the mask token of ViTForMaskedImageModeling's body do not enter a plain
 * forward; the classifier is needed when present (needs list it), else nothing else is allowed. */
static int ignore_tensor(const char *name, void *ctx) {
    const char *prefix = ctx;
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) return 0;
    name += pl;
    return strncmp(name, "pooler.dense.", 13) == 0 || strcmp(name, "embeddings.mask_token") == 0;
}

/* One layer's tensors: (5.x suffix, 4.x suffix, attn parameter, row block of in_proj or -1,
 * rows, cols as 'H' / 'I' / '-' for rank 1, is a q/k/v bias). */
typedef struct layer_map {
    const char *hf, *legacy, *ours;
    int block;
    char rows, cols;
    int qkv_bias;
} layer_map;

static const layer_map LAYER[] = {
    {"attention.q_proj.weight", "attention.attention.query.weight", "self_attn.in_proj_weight", 0, 'H', 'H', 0},
    {"attention.q_proj.bias", "attention.attention.query.bias", "self_attn.in_proj_bias", 0, 'H', '-', 1},
    {"attention.k_proj.weight", "attention.attention.key.weight", "self_attn.in_proj_weight", 1, 'H', 'H', 0},
    {"attention.k_proj.bias", "attention.attention.key.bias", "self_attn.in_proj_bias", 1, 'H', '-', 1},
    {"attention.v_proj.weight", "attention.attention.value.weight", "self_attn.in_proj_weight", 2, 'H', 'H', 0},
    {"attention.v_proj.bias", "attention.attention.value.bias", "self_attn.in_proj_bias", 2, 'H', '-', 1},
    {"attention.o_proj.weight", "attention.output.dense.weight", "self_attn.out_proj.weight", -1, 'H', 'H', 0},
    {"attention.o_proj.bias", "attention.output.dense.bias", "self_attn.out_proj.bias", -1, 'H', '-', 0},
    {"layernorm_before.weight", "layernorm_before.weight", "norm1.weight", -1, 'H', '-', 0},
    {"layernorm_before.bias", "layernorm_before.bias", "norm1.bias", -1, 'H', '-', 0},
    {"layernorm_after.weight", "layernorm_after.weight", "norm2.weight", -1, 'H', '-', 0},
    {"layernorm_after.bias", "layernorm_after.bias", "norm2.bias", -1, 'H', '-', 0},
    {"mlp.fc1.weight", "intermediate.dense.weight", "linear1.weight", -1, 'I', 'H', 0},
    {"mlp.fc1.bias", "intermediate.dense.bias", "linear1.bias", -1, 'I', '-', 0},
    {"mlp.fc2.weight", "output.dense.weight", "linear2.weight", -1, 'H', 'I', 0},
    {"mlp.fc2.bias", "output.dense.bias", "linear2.bias", -1, 'H', '-', 0},
};
#define LAYER_TENSORS (sizeof LAYER / sizeof LAYER[0])
/* cls_token, position_embeddings, projection weight and bias; final layernorm; classifier */
#define EMB_TENSORS 4
#define TAIL_TENSORS 4

static int64_t dim_of(char d, const vit_config *c) { return d == 'H' ? c->hidden : c->inter; }

static attn_status need_name(hf_need *q, const char *a, const char *b, const char *c) {
    char name[200];
    snprintf(name, sizeof name, "%s%s%s", a, b, c);
    return (q->name = attn__strdup(name)) ? ATTN_OK
                                          : attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
}

static void set_shape(hf_need *q, int rank, int64_t a, int64_t b, int64_t c, int64_t d, const char *keys) {
    q->rank = rank;
    q->shape[0] = a, q->shape[1] = b, q->shape[2] = c, q->shape[3] = d;
    q->keys = keys;
}

/* The embeddings', the final layernorm's and the classifier's needs (k: their first index). */
static attn_status outer_needs(const vit_config *c, const vit_names *nm, hf_need *needs, size_t k) {
    static const char *const emb[EMB_TENSORS] = {
        "cls_token", "position_embeddings", "patch_embeddings.projection.weight", "patch_embeddings.projection.bias"};
    attn_status st = ATTN_OK;
    for (int i = 0; !st && i < EMB_TENSORS; i++) st = need_name(&needs[i], nm->prefix, "embeddings.", emb[i]);
    if (st) return st;
    set_shape(&needs[0], 3, 1, 1, c->hidden, 0, "1 x 1 x hidden_size");
    set_shape(&needs[1], 3, 1, c->tokens, c->hidden, 0, "1 x (1 + (image_size / patch_size)^2) x hidden_size");
    set_shape(&needs[2], 4, c->hidden, c->channels, c->patch_h, c->patch_w,
              "hidden_size x num_channels x patch_size x patch_size");
    set_shape(&needs[3], 1, c->hidden, 0, 0, 0, "hidden_size");
    st = need_name(&needs[k], nm->prefix, "layernorm.", "weight");
    if (!st) st = need_name(&needs[k + 1], nm->prefix, "layernorm.", "bias");
    set_shape(&needs[k], 1, c->hidden, 0, 0, 0, "hidden_size");
    set_shape(&needs[k + 1], 1, c->hidden, 0, 0, 0, "hidden_size");
    if (st || !c->labels) return st;
    st = need_name(&needs[k + 2], "", "classifier.", "weight");
    if (!st) st = need_name(&needs[k + 3], "", "classifier.", "bias");
    set_shape(&needs[k + 2], 2, c->labels, c->hidden, 0, 0, "len(id2label) x hidden_size");
    set_shape(&needs[k + 3], 1, c->labels, 0, 0, 0, "len(id2label)");
    return st;
}

/* The needs' names and shapes in the order vit_alloc points them (destinations set there). */
static attn_status make_needs(const vit_config *c, const vit_names *nm, hf_need **out, size_t *count) {
    const size_t per = c->qkv_bias ? LAYER_TENSORS : LAYER_TENSORS - 3;
    const size_t n = EMB_TENSORS + (size_t)c->layers * per + 2 + (c->labels ? 2 : 0);
    hf_need *needs = attn__calloc(n, sizeof *needs);
    if (!needs) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    attn_status st = ATTN_OK;
    size_t i = EMB_TENSORS;
    for (int64_t l = 0; !st && l < c->layers; l++)
        for (size_t k = 0; !st && k < LAYER_TENSORS; k++) {
            const layer_map *t = &LAYER[k];
            if (t->qkv_bias && !c->qkv_bias) continue;
            char stack[96];
            snprintf(stack, sizeof stack, "%s%s%lld.", nm->prefix, nm->stack, (long long)l);
            hf_need *q = &needs[i++];
            st = need_name(q, stack, nm->legacy ? t->legacy : t->hf, "");
            set_shape(q, t->cols == '-' ? 1 : 2, dim_of(t->rows, c), t->cols == '-' ? 0 : dim_of(t->cols, c), 0, 0,
                      t->cols == '-'   ? (t->rows == 'H' ? "hidden_size" : "intermediate_size")
                      : t->rows == 'I' ? "intermediate_size x hidden_size"
                      : t->cols == 'I' ? "hidden_size x intermediate_size"
                                       : "hidden_size x hidden_size");
        }
    if (!st) st = outer_needs(c, nm, needs, i);
    if (st) {
        attn_hf_needs_free(needs, n);
        return st;
    }
    *out = needs;
    *count = n;
    return ATTN_OK;
}

static void vit_free(void *impl) {
    vit *v = impl;
    if (!v) return;
    attn__free(v->cls);
    attn__free(v->pos);
    attn__free(v->proj_w);
    attn__free(v->proj_b);
    attn__free(v->head_w);
    attn__free(v->head_b);
    attn_encoder_free(v->enc);
    for (int64_t i = 0; v->labels && i < v->c.labels; i++) attn__free(v->labels[i]);
    attn__free(v->labels);
    attn__free(v->ws);
    attn__free(v);
}

/* Point the layers' needs at the encoder's parameters (in_proj_bias zeroed for qkv_bias false). */
static attn_status point_layers(vit *v, hf_need *needs) {
    const vit_config *c = &v->c;
    const attn_params *ps = attn_encoder_params(v->enc);
    size_t i = EMB_TENSORS;
    for (int64_t l = 0; l < c->layers; l++)
        for (size_t k = 0; k < LAYER_TENSORS; k++) {
            char name[96];
            snprintf(name, sizeof name, "layers.%lld.%s", (long long)l, LAYER[k].ours);
            const attn_param *p = attn_params_find(ps, name);
            if (!p)
                return attn_error(ATTN_ERR_NOT_FOUND, "attn_pretrained_open: the encoder has no parameter '%s'", name);
            if (LAYER[k].qkv_bias && !c->qkv_bias) {
                memset(p->data, 0, 3 * (size_t)c->hidden * sizeof(float));
                continue;
            }
            const size_t block = LAYER[k].cols == '-' ? (size_t)c->hidden : (size_t)(c->hidden * c->hidden);
            needs[i++].dst = p->data + (LAYER[k].block < 0 ? 0 : (size_t)LAYER[k].block * block);
        }
    const attn_param *nw = attn_params_find(ps, "norm.weight"), *nb = attn_params_find(ps, "norm.bias");
    if (!nw || !nb) return attn_error(ATTN_ERR_NOT_FOUND, "attn_pretrained_open: the encoder has no final norm");
    needs[i].dst = nw->data;
    needs[i + 1].dst = nb->data;
    if (c->labels) needs[i + 2].dst = v->head_w, needs[i + 3].dst = v->head_b;
    return ATTN_OK;
}

/* Allocate the model and point every need at its destination. */
static attn_status vit_alloc(const vit_config *c, hf_need *needs, vit **out) {
    vit *v = attn__calloc(1, sizeof *v);
    if (!v) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    v->c = *c;
    const size_t H = (size_t)c->hidden, L = (size_t)c->labels;
    v->cls = attn__malloc(H * sizeof(float));
    v->pos = attn__malloc((size_t)c->tokens * H * sizeof(float));
    v->proj_w = attn__malloc(H * (size_t)(c->channels * c->patch_h * c->patch_w) * sizeof(float));
    v->proj_b = attn__malloc(H * sizeof(float));
    v->head_w = attn__malloc((L ? L : 1) * H * sizeof(float));
    v->head_b = attn__malloc((L ? L : 1) * sizeof(float));
    v->labels = attn__calloc(L ? L : 1, sizeof(char *));
    attn_stack_config sc = attn_stack_config_default(c->hidden, c->heads, c->layers);
    sc.norm = 1;
    sc.norm_eps = (float)c->eps;
    sc.layer.dim_feedforward = c->inter;
    sc.layer.dropout = 0;
    sc.layer.activation = c->act;
    sc.layer.layer_norm_eps = (float)c->eps;
    sc.layer.norm_first = 1;
    attn_status st = v->cls && v->pos && v->proj_w && v->proj_b && v->head_w && v->head_b && v->labels
                         ? attn_encoder_create(&sc, &v->enc)
                         : attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    float *emb[EMB_TENSORS] = {v->cls, v->pos, v->proj_w, v->proj_b};
    for (int i = 0; !st && i < EMB_TENSORS; i++) needs[i].dst = emb[i];
    if (!st) st = point_layers(v, needs);
    if (st) {
        vit_free(v);
        return st;
    }
    *out = v;
    return ATTN_OK;
}

/* id2label's strings (or LABEL_i, as transformers names them without id2label). */
static attn_status copy_labels(const hf_folder *f, vit *v) {
    const attn_json *map = attn_json_get(f->config, "id2label");
    for (int64_t i = 0; i < v->c.labels; i++) {
        char key[24], def[32];
        snprintf(key, sizeof key, "%lld", (long long)i);
        snprintf(def, sizeof def, "LABEL_%lld", (long long)i);
        const char *s =
            map && map->type == ATTN_JSON_OBJECT ? attn_json_as_string(attn_json_get(map, key), NULL) : NULL;
        if (!(v->labels[i] = attn__strdup(s ? s : def)))
            return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory (labels)");
    }
    return ATTN_OK;
}

/* The workspace: im2col [B Np, C ph pw], patches [B Np, H], x [B T, H], h [B T, H], CLS rows
 * [B, H], then the larger of the linears' and the encoder's scratch. */
static attn_status reserve(vit *v, int64_t B, size_t *parts, const attn_layer_args *a) {
    const vit_config *c = &v->c;
    const size_t np = (size_t)(B * c->gh * c->gw), bt = (size_t)(B * c->tokens), H = (size_t)c->hidden;
    const size_t kk = (size_t)(c->channels * c->patch_h * c->patch_w);
    size_t sizes[5] = {np * kk, np * H, bt * H, bt * H, (size_t)B * H}, off = 0;
    for (int i = 0; i < 5; i++) {
        parts[i] = off;
        off += (sizes[i] * sizeof(float) + 63) & ~(size_t)63;
    }
    size_t scratch = attn_linear_workspace_size((int64_t)np, (int64_t)kk, c->hidden);
    const size_t hs = attn_linear_workspace_size(B, c->hidden, c->labels ? c->labels : 1);
    const size_t es = attn_encoder_workspace_size(v->enc, a);
    scratch = scratch > hs ? scratch : hs;
    scratch = scratch > es ? scratch : es;
    parts[5] = off;
    const size_t need = off + scratch;
    if (need > v->ws_bytes) {
        void *w = attn__realloc(v->ws, need);
        if (!w) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained: out of memory (%zu bytes)", need);
        v->ws = w;
        v->ws_bytes = need;
    }
    parts[6] = need - off;
    return ATTN_OK;
}

/* x [B, T, H] = [cls, patch embeddings] + position embeddings. */
static attn_status embed(vit *v, const float *pixels, int64_t B, const size_t *parts) {
    const vit_config *c = &v->c;
    char *ws = v->ws;
    float *col = (float *)(ws + parts[0]), *pe = (float *)(ws + parts[1]), *x = (float *)(ws + parts[2]);
    const int64_t C = c->channels, ph = c->patch_h, pw = c->patch_w, np = c->gh * c->gw, kk = C * ph * pw;
    for (int64_t b = 0; b < B; b++)
        for (int64_t gy = 0; gy < c->gh; gy++)
            for (int64_t gx = 0; gx < c->gw; gx++) {
                float *row = col + ((b * np) + gy * c->gw + gx) * kk;
                for (int64_t ch = 0; ch < C; ch++)
                    for (int64_t ky = 0; ky < ph; ky++)
                        memcpy(row + (ch * ph + ky) * pw,
                               pixels + ((b * C + ch) * c->image_h + gy * ph + ky) * c->image_w + gx * pw,
                               (size_t)pw * sizeof(float));
            }
    attn_status st = attn_linear_forward(col, v->proj_w, v->proj_b, pe, B * np, kk, c->hidden, ws + parts[5], parts[6]);
    if (st) return st;
    const int64_t H = c->hidden, T = c->tokens;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *src = t ? pe + (b * np + t - 1) * H : v->cls, *p = v->pos + t * H;
            float *y = x + (b * T + t) * H;
            for (int64_t j = 0; j < H; j++) y[j] = src[j] + p[j];
        }
    return ATTN_OK;
}

static attn_status vit_forward(void *impl, const float *pixels, int64_t B, float *hidden, float *logits,
                               attn_capture *cap) {
    vit *v = impl;
    const vit_config *c = &v->c;
    attn_layer_args a = attn_layer_args_default();
    a.batch = B;
    a.n = c->tokens;
    a.capture = cap; /* the workspace query sees the capture */
    size_t parts[7];
    attn_status st = reserve(v, B, parts, &a);
    if (!st) st = embed(v, pixels, B, parts);
    if (st) return st;
    char *ws = v->ws;
    float *h = hidden ? hidden : (float *)(ws + parts[3]), *rows = (float *)(ws + parts[4]);
    a.x = (const float *)(ws + parts[2]);
    st = attn_encoder_forward(v->enc, &a, h, NULL, 0, ws + parts[5], parts[6]);
    if (st || !logits) return st;
    const int64_t H = c->hidden;
    for (int64_t b = 0; b < B; b++) memcpy(rows + b * H, h + b * c->tokens * H, (size_t)H * sizeof(float));
    return attn_linear_forward(rows, v->head_w, v->head_b, logits, B, H, c->labels, ws + parts[5], parts[6]);
}

/* attn_pretrained_flops: seq tokens a row (an image's: 1 + the patches) through the layers, as
 * bert_flops counts them, plus the patch embedding (a product of C ph pw inputs per patch and
 * hidden unit) and the classifier on the class token. */
static double vit_flops(const void *impl, int64_t B, int64_t n, int64_t past) {
    const vit_config *c = &((const vit *)impl)->c;
    const double H = (double)c->hidden, I = (double)c->inter, keys = (double)(n + past);
    const double patches = n > 0 ? (double)(n - 1) : 0, pix = (double)(c->channels * c->patch_h * c->patch_w);
    return 2.0 * (double)B *
           ((double)c->layers * (double)n * (4 * H * H + 2 * H * I + 2 * keys * H) + patches * H * pix +
            H * (double)c->labels);
}

attn_status attn_hf_vit_open(const hf_folder *f, attn_pretrained *m) {
    vit_config c;
    attn_status st = read_config(f, &c);
    if (st) return st;
    const vit_names nm = weights_names(f);
    if (!attn_hf_tensor(f, "classifier.weight", NULL) && !attn_hf_tensor(f, "classifier.bias", NULL))
        c.labels = 0; /* ViTModel: no classifier */
    st = attn_hf_check_layer_count(f, nm.prefix, nm.stack, nm.legacy ? ".output.dense.weight" : ".mlp.fc2.weight",
                                   "num_hidden_layers", c.layers);
    if (st) return st;
    hf_need *needs = NULL;
    size_t n = 0;
    if ((st = make_needs(&c, &nm, &needs, &n))) return st;
    vit *v = NULL;
    st = attn_hf_check(f, needs, n, ignore_tensor, (void *)nm.prefix);
    if (!st) st = vit_alloc(&c, needs, &v);
    if (!st) st = attn_hf_load(f, needs, n);
    attn_hf_needs_free(needs, n);
    if (!st) st = copy_labels(f, v);
    if (!st) st = attn_hf_image_prep_read(f->dir, c.channels, c.image_h, c.image_w, &v->prep);
    if (st) {
        vit_free(v);
        return st;
    }
    m->impl = v;
    m->free_impl = vit_free;
    m->image = vit_forward;
    m->prec = &v->prec;
    m->flops = vit_flops;
    m->hidden = c.hidden;
    m->channels = c.channels;
    m->image_h = c.image_h;
    m->image_w = c.image_w;
    m->image_tokens = c.tokens;
    m->grid_h = c.gh;
    m->grid_w = c.gw;
    m->num_labels = c.labels;
    m->labels = v->labels;
    m->prep = &v->prep;
    m->max_positions = c.tokens;
    return ATTN_OK;
}
