/* Models by name with inputs bound by PyTorch forward-argument names (see nn_run.h): maps a JSON
 * configuration and a safetensors file of inputs onto the modules' create / forward / backward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_config.h"
#include "nn_internal.h"
#include "nn_run.h"

enum { K_MHA, K_ENC_LAYER, K_DEC_LAYER, K_ENC, K_DEC, K_TR, K_COUNT };
enum { IN_A, IN_B, IN_C, NIN };       /* float inputs */
enum { SET_S, SET_T, SET_M, NSET };   /* mask sets: self / src, tgt, memory */
enum { OPT_NEED_WEIGHTS = 10, OPT_AVERAGE = 11 }; /* other options: the causal flag of a set */

const char *const attn_nn_model_names[] = {"multihead_attention", "transformer_encoder_layer",
                                      "transformer_decoder_layer", "transformer_encoder",
                                      "transformer_decoder", "transformer", NULL};

/* A forward argument: a float input (in >= 0) or a mask (set, kpm). */
typedef struct arg_spec {
    const char *name;
    int in, set, kpm, required;
} arg_spec;

typedef struct opt_spec {
    const char *name;
    int which; /* a set index (its causal flag) or OPT_* */
} opt_spec;

#define MAXA 8
static const arg_spec ARGS[K_COUNT][MAXA] = {
    [K_MHA] = {{"query", IN_A, 0, 0, 1}, {"key", IN_B, 0, 0, 0}, {"value", IN_C, 0, 0, 0},
               {"key_padding_mask", -1, SET_S, 1, 0}, {"attn_mask", -1, SET_S, 0, 0}},
    [K_ENC_LAYER] = {{"src", IN_A, 0, 0, 1}, {"src_mask", -1, SET_S, 0, 0}, {"src_key_padding_mask", -1, SET_S, 1, 0}},
    [K_DEC_LAYER] = {{"tgt", IN_A, 0, 0, 1}, {"memory", IN_B, 0, 0, 1}, {"tgt_mask", -1, SET_T, 0, 0},
                     {"memory_mask", -1, SET_M, 0, 0}, {"tgt_key_padding_mask", -1, SET_T, 1, 0},
                     {"memory_key_padding_mask", -1, SET_M, 1, 0}},
    [K_ENC] = {{"src", IN_A, 0, 0, 1}, {"mask", -1, SET_S, 0, 0}, {"src_key_padding_mask", -1, SET_S, 1, 0}},
    [K_DEC] = {{"tgt", IN_A, 0, 0, 1}, {"memory", IN_B, 0, 0, 1}, {"tgt_mask", -1, SET_T, 0, 0},
               {"memory_mask", -1, SET_M, 0, 0}, {"tgt_key_padding_mask", -1, SET_T, 1, 0},
               {"memory_key_padding_mask", -1, SET_M, 1, 0}},
    [K_TR] = {{"src", IN_A, 0, 0, 1}, {"tgt", IN_B, 0, 0, 1}, {"src_mask", -1, SET_S, 0, 0},
              {"tgt_mask", -1, SET_T, 0, 0}, {"memory_mask", -1, SET_M, 0, 0},
              {"src_key_padding_mask", -1, SET_S, 1, 0}, {"tgt_key_padding_mask", -1, SET_T, 1, 0},
              {"memory_key_padding_mask", -1, SET_M, 1, 0}},
};

#define MAXO 4
static const opt_spec OPTS[K_COUNT][MAXO] = {
    [K_MHA] = {{"need_weights", OPT_NEED_WEIGHTS}, {"average_attn_weights", OPT_AVERAGE}, {"is_causal", SET_S}},
    [K_ENC_LAYER] = {{"is_causal", SET_S}},
    [K_DEC_LAYER] = {{"tgt_is_causal", SET_T}, {"memory_is_causal", SET_M}},
    [K_ENC] = {{"is_causal", SET_S}},
    [K_DEC] = {{"tgt_is_causal", SET_T}, {"memory_is_causal", SET_M}},
    [K_TR] = {{"src_is_causal", SET_S}, {"tgt_is_causal", SET_T}, {"memory_is_causal", SET_M}},
};

/* Input gradient names by kind and slot. */
static const char *const GRAD_NAMES[K_COUNT][NIN] = {
    [K_MHA] = {"query", "key", "value"}, [K_ENC_LAYER] = {"src"}, [K_DEC_LAYER] = {"tgt", "memory"},
    [K_ENC] = {"src"}, [K_DEC] = {"tgt", "memory"}, [K_TR] = {"src", "tgt"},
};

struct nn_model {
    int kind;
    attn_mha *mha;
    attn_encoder_layer *el;
    attn_decoder_layer *dl;
    attn_encoder *enc;
    attn_decoder *dec;
    attn_transformer *tr;
    int64_t d, kdim, vdim, heads, extra_keys;
    int need_weights, average, causal[NSET];
    /* bound inputs */
    float *in[NIN];
    int64_t in_shape[NIN][3];
    uint8_t *mb[NSET][2];   /* [set][kpm] boolean */
    float *mf[NSET][2];     /* [set][kpm] float */
    int m3d[NSET];
    int bound;
    /* results and buffers */
    float *out, *w, *grad[NIN];
    int64_t out_shape[3], w_shape[4];
    int w_rank, kept;
    void *saved, *ws;
    size_t saved_bytes, ws_bytes;
    attn_mha_args ma;
    attn_layer_args la;
    attn_transformer_args ta;
};

static void clear_inputs(nn_model *m) {
    for (int i = 0; i < NIN; i++) {
        free(m->in[i]);
        m->in[i] = NULL;
        free(m->grad[i]);
        m->grad[i] = NULL;
    }
    for (int s = 0; s < NSET; s++)
        for (int k = 0; k < 2; k++) {
            free(m->mb[s][k]);
            free(m->mf[s][k]);
            m->mb[s][k] = NULL;
            m->mf[s][k] = NULL;
        }
    m->bound = 0;
    m->kept = 0;
}

void attn_nn_model_free(nn_model *m) {
    if (!m) return;
    clear_inputs(m);
    attn_mha_free(m->mha);
    attn_encoder_layer_free(m->el);
    attn_decoder_layer_free(m->dl);
    attn_encoder_free(m->enc);
    attn_decoder_free(m->dec);
    attn_transformer_free(m->tr);
    free(m->out);
    free(m->w);
    free(m->saved);
    free(m->ws);
    free(m);
}

const char *attn_nn_model_name(const nn_model *m) { return m ? attn_nn_model_names[m->kind] : NULL; }

const attn_params *attn_nn_model_params(nn_model *m) {
    if (!m) return NULL;
    switch (m->kind) {
    case K_MHA: return attn_mha_params(m->mha);
    case K_ENC_LAYER: return attn_encoder_layer_params(m->el);
    case K_DEC_LAYER: return attn_decoder_layer_params(m->dl);
    case K_ENC: return attn_encoder_params(m->enc);
    case K_DEC: return attn_decoder_params(m->dec);
    default: return attn_transformer_params(m->tr);
    }
}

attn_status attn_nn_model_set_option(nn_model *m, const char *name, int value) {
    ATTN_CHECK_NOT_NULL("attn_nn_model_set_option", m);
    ATTN_CHECK_NOT_NULL("attn_nn_model_set_option", name);
    for (int i = 0; i < MAXO && OPTS[m->kind][i].name; i++) {
        if (strcmp(OPTS[m->kind][i].name, name)) continue;
        const int w = OPTS[m->kind][i].which;
        if (w == OPT_NEED_WEIGHTS) m->need_weights = value;
        else if (w == OPT_AVERAGE) m->average = value;
        else m->causal[w] = value;
        return ATTN_OK;
    }
    return attn_error(ATTN_ERR_NOT_FOUND, "%s: no option '%s'", attn_nn_model_names[m->kind], name);
}

attn_status attn_nn_model_create(const attn_json *config, nn_model **out) {
    static const char fn[] = "config";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    if (!config || config->type != ATTN_JSON_OBJECT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: expected a JSON object", fn);
    const char *name = attn_json_as_string(attn_json_get(config, "module"), NULL);
    if (!name) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: missing key 'module' (a string)", fn);
    int kind = 0;
    while (attn_nn_model_names[kind] && strcmp(attn_nn_model_names[kind], name)) kind++;
    if (!attn_nn_model_names[kind])
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: unknown module '%s' (known: multihead_attention, transformer_encoder_layer, "
                          "transformer_decoder_layer, transformer_encoder, transformer_decoder, transformer)",
                          fn, name);
    nn_model *m = calloc(1, sizeof *m);
    if (!m) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    m->kind = kind;
    m->average = 1;
    const char *ignore[MAXO + 2] = {"module"};
    for (int i = 0; i < MAXO && OPTS[kind][i].name; i++) ignore[i + 1] = OPTS[kind][i].name;
    attn_status st;
    switch (kind) {
    case K_MHA: {
        attn_mha_config c;
        if (!(st = attn_nn_json_mha_config(config, ignore, &c))) st = attn_mha_create(&c, &m->mha);
        if (!st) {
            const attn_mha_config *cc = attn_mha_get_config(m->mha);
            m->d = cc->embed_dim;
            m->kdim = cc->kdim;
            m->vdim = cc->vdim;
            m->heads = cc->num_heads;
            m->extra_keys = (cc->add_bias_kv ? 1 : 0) + (cc->add_zero_attn ? 1 : 0);
        }
        break;
    }
    case K_ENC_LAYER:
    case K_DEC_LAYER: {
        attn_layer_config c;
        st = attn_nn_json_layer_config(config, name, ignore, &c);
        if (!st) st = kind == K_ENC_LAYER ? attn_encoder_layer_create(&c, &m->el) : attn_decoder_layer_create(&c, &m->dl);
        m->d = c.d_model;
        m->heads = c.nhead;
        break;
    }
    case K_ENC:
    case K_DEC: {
        attn_stack_config c;
        st = attn_nn_json_stack_config(config, name, kind == K_ENC ? "encoder_layer" : "decoder_layer", ignore, &c);
        if (!st) st = kind == K_ENC ? attn_encoder_create(&c, &m->enc) : attn_decoder_create(&c, &m->dec);
        m->d = c.layer.d_model;
        m->heads = c.layer.nhead;
        break;
    }
    default: {
        attn_transformer_config c;
        st = attn_nn_json_transformer_config(config, ignore, &c);
        if (!st) st = attn_transformer_create(&c, &m->tr);
        m->d = c.layer.d_model;
        m->heads = c.layer.nhead;
        break;
    }
    }
    for (int i = 0; !st && i < MAXO && OPTS[kind][i].name; i++) {
        const attn_json *v = attn_json_get(config, OPTS[kind][i].name);
        int b;
        if (!v) continue;
        if (!attn_json_as_bool(v, &b))
            st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be true or false", name, OPTS[kind][i].name);
        else
            st = attn_nn_model_set_option(m, OPTS[kind][i].name, b);
    }
    if (st) {
        attn_nn_model_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
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

/* (Nq, Nk) of a mask set. */
static void set_dims(const nn_model *m, int set, int64_t *nq, int64_t *nk) {
    const int64_t na = m->in_shape[IN_A][1], nb = m->in_shape[IN_B][1];
    switch (m->kind) {
    case K_MHA: *nq = na, *nk = nb; break;
    case K_ENC_LAYER:
    case K_ENC: *nq = *nk = na; break;
    case K_DEC_LAYER:
    case K_DEC: *nq = na, *nk = set == SET_M ? nb : na; break;
    default: /* transformer: A = src, B = tgt */
        if (set == SET_S) *nq = *nk = na;
        else if (set == SET_T) *nq = *nk = nb;
        else *nq = nb, *nk = na;
    }
}

static attn_status shape_error(const char *what, const attn_safetensors_tensor *t, const char *want) {
    char s[200];
    return attn_error(ATTN_ERR_SHAPE, "input '%s' has shape %s, expected %s", what,
                      attn_shape_str(t->shape, t->rank, s, sizeof s), want);
}

attn_status attn_nn_model_bind(nn_model *m, const attn_safetensors *st, const char *prefix, int strict) {
    ATTN_CHECK_NOT_NULL("attn_nn_model_bind", m);
    ATTN_CHECK_NOT_NULL("attn_nn_model_bind", st);
    if (!prefix) prefix = "";
    clear_inputs(m);
    const size_t lp = strlen(prefix);
    const arg_spec *args = ARGS[m->kind];
    const attn_safetensors_tensor *found[MAXA] = {0};
    char name[256], want[160];
    attn_status s = ATTN_OK;
    for (int i = 0; i < MAXA && args[i].name; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, args[i].name);
        found[i] = attn_safetensors_find(st, name);
        if (!found[i] && args[i].required)
            return attn_error(ATTN_ERR_NOT_FOUND, "%s: missing input '%s'", attn_nn_model_names[m->kind], args[i].name);
    }
    if (strict) {
        for (size_t t = 0; t < attn_safetensors_count(st); t++) {
            const char *tn = attn_safetensors_get(st, t)->name;
            if (strncmp(tn, prefix, lp)) continue;
            int known = 0;
            for (int i = 0; i < MAXA && args[i].name && !known; i++) known = !strcmp(tn + lp, args[i].name);
            if (!known) {
                size_t o = 0;
                for (int i = 0; i < MAXA && args[i].name; i++)
                    o += (size_t)snprintf(want + o, o < sizeof want ? sizeof want - o : 0, "%s%s", i ? ", " : "",
                                          args[i].name);
                return attn_error(ATTN_ERR_NOT_FOUND, "%s: unknown input '%s' (inputs: %s)", attn_nn_model_names[m->kind],
                                  tn + lp, want);
            }
        }
    }
    /* float inputs first: they fix B and the sequence lengths */
    for (int i = 0; i < MAXA && args[i].name; i++) {
        const attn_safetensors_tensor *t = found[i];
        if (!t || args[i].in < 0) continue;
        const int slot = args[i].in;
        const int64_t width = m->kind == K_MHA ? (slot == IN_B ? m->kdim : slot == IN_C ? m->vdim : m->d) : m->d;
        snprintf(want, sizeof want, "[batch, length, %lld] (batch-first)", (long long)width);
        if (!is_float(t->dtype))
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "input '%s' must be floating point, got %s", args[i].name,
                              attn_dtype_name(t->dtype));
        if (t->rank != 3 || t->shape[2] != width || t->shape[0] < 1 || t->shape[1] < 1) return shape_error(args[i].name, t, want);
        m->in[slot] = malloc(sizeof(float) * numel_of(t));
        if (!m->in[slot]) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "input '%s': out of memory", args[i].name);
        snprintf(name, sizeof name, "%s%s", prefix, args[i].name);
        if ((s = attn_safetensors_read_f32(st, name, m->in[slot], numel_of(t)))) return s;
        for (int d = 0; d < 3; d++) m->in_shape[slot][d] = t->shape[d];
    }
    const int64_t B = m->in_shape[IN_A][0];
    for (int slot = 1; slot < NIN; slot++)
        if (m->in[slot] && m->in_shape[slot][0] != B)
            return attn_error(ATTN_ERR_SHAPE, "input '%s' has batch %lld, '%s' has %lld", GRAD_NAMES[m->kind][slot],
                              (long long)m->in_shape[slot][0], GRAD_NAMES[m->kind][0], (long long)B);
    if (m->kind == K_MHA) {
        if (!m->in[IN_B] != !m->in[IN_C])
            return attn_error(ATTN_ERR_NOT_FOUND, "multihead_attention: give both key and value, or neither (self-attention)");
        if (!m->in[IN_B]) {
            if (m->kdim != m->d || m->vdim != m->d)
                return attn_error(ATTN_ERR_NOT_FOUND, "multihead_attention: key and value are required when kdim or vdim differ from embed_dim");
            memcpy(m->in_shape[IN_B], m->in_shape[IN_A], sizeof m->in_shape[IN_A]);
        } else if (m->in_shape[IN_C][1] != m->in_shape[IN_B][1]) {
            return attn_error(ATTN_ERR_SHAPE, "input 'value' has length %lld, 'key' has %lld",
                              (long long)m->in_shape[IN_C][1], (long long)m->in_shape[IN_B][1]);
        }
    }
    for (int i = 0; i < MAXA && args[i].name; i++) {
        const attn_safetensors_tensor *t = found[i];
        if (!t || args[i].in >= 0) continue;
        const int set = args[i].set, kpm = args[i].kpm;
        int64_t nq, nk;
        set_dims(m, set, &nq, &nk);
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
        if (!ok) return shape_error(args[i].name, t, want);
        const size_t n = numel_of(t);
        snprintf(name, sizeof name, "%s%s", prefix, args[i].name);
        if (t->dtype == ATTN_DTYPE_BOOL || t->dtype == ATTN_DTYPE_U8) {
            m->mb[set][kpm] = malloc(n ? n : 1);
            if (!m->mb[set][kpm]) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "input '%s': out of memory", args[i].name);
            const uint8_t *src = t->data;
            for (size_t e = 0; e < n; e++) m->mb[set][kpm][e] = src[e] != 0;
        } else if (is_float(t->dtype)) {
            m->mf[set][kpm] = malloc(sizeof(float) * (n ? n : 1));
            if (!m->mf[set][kpm]) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "input '%s': out of memory", args[i].name);
            if ((s = attn_safetensors_read_f32(st, name, m->mf[set][kpm], n))) return s;
        } else {
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "input '%s' must be BOOL, U8 or floating point, got %s",
                              args[i].name, attn_dtype_name(t->dtype));
        }
    }
    m->bound = 1;
    return ATTN_OK;
}

/* ---- forward / backward ---- */

static attn_masks masks_of(const nn_model *m, int set) {
    attn_masks k;
    memset(&k, 0, sizeof k);
    k.attn_mask = m->mb[set][0];
    k.attn_mask_float = m->mf[set][0];
    k.attn_mask_3d = m->m3d[set];
    k.key_padding_mask = m->mb[set][1];
    k.key_padding_mask_float = m->mf[set][1];
    k.is_causal = m->causal[set];
    return k;
}

static void build_args(nn_model *m, int training, uint64_t seed, uint64_t offset) {
    const int64_t B = m->in_shape[IN_A][0];
    switch (m->kind) {
    case K_MHA: {
        attn_mha_args *a = &m->ma;
        const attn_masks k = masks_of(m, SET_S);
        *a = attn_mha_args_default();
        a->batch = B;
        a->nq = m->in_shape[IN_A][1];
        a->nk = m->in_shape[IN_B][1];
        a->query = m->in[IN_A];
        a->key = m->in[IN_B] ? m->in[IN_B] : m->in[IN_A];
        a->value = m->in[IN_C] ? m->in[IN_C] : m->in[IN_A];
        a->attn_mask = k.attn_mask;
        a->attn_mask_float = k.attn_mask_float;
        a->attn_mask_3d = k.attn_mask_3d;
        a->key_padding_mask = k.key_padding_mask;
        a->key_padding_mask_float = k.key_padding_mask_float;
        a->is_causal = k.is_causal;
        a->need_weights = m->need_weights;
        a->average_attn_weights = m->average;
        a->training = training;
        a->seed = seed;
        a->offset = offset;
        break;
    }
    case K_TR: {
        attn_transformer_args *a = &m->ta;
        *a = attn_transformer_args_default();
        a->batch = B;
        a->n_src = m->in_shape[IN_A][1];
        a->n_tgt = m->in_shape[IN_B][1];
        a->src = m->in[IN_A];
        a->tgt = m->in[IN_B];
        a->src_masks = masks_of(m, SET_S);
        a->tgt_masks = masks_of(m, SET_T);
        a->memory_masks = masks_of(m, SET_M);
        a->training = training;
        a->seed = seed;
        a->offset = offset;
        break;
    }
    default: {
        attn_layer_args *a = &m->la;
        const int dec = m->kind == K_DEC_LAYER || m->kind == K_DEC;
        *a = attn_layer_args_default();
        a->batch = B;
        a->n = m->in_shape[IN_A][1];
        a->x = m->in[IN_A];
        a->self_masks = masks_of(m, dec ? SET_T : SET_S);
        if (dec) {
            a->memory = m->in[IN_B];
            a->n_memory = m->in_shape[IN_B][1];
            a->memory_masks = masks_of(m, SET_M);
        }
        a->training = training;
        a->seed = seed;
        a->offset = offset;
    }
    }
}

static attn_status grow(void **p, size_t *have, size_t need) {
    if (need <= *have && *p) return ATTN_OK;
    void *q = realloc(*p, need ? need : 1);
    if (!q) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes of buffers", need);
    *p = q;
    *have = need;
    return ATTN_OK;
}

attn_status attn_nn_model_forward(nn_model *m, int keep_for_backward, int training, uint64_t seed, uint64_t offset) {
    ATTN_CHECK_NOT_NULL("attn_nn_model_forward", m);
    if (!m->bound) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_nn_model_forward: no inputs bound");
    build_args(m, training, seed, offset);
    size_t sb = 0, wb = 0;
    switch (m->kind) {
    case K_MHA: sb = attn_mha_saved_size(m->mha, &m->ma), wb = attn_mha_workspace_size(m->mha, &m->ma); break;
    case K_ENC_LAYER: sb = attn_encoder_layer_saved_size(m->el, &m->la), wb = attn_encoder_layer_workspace_size(m->el, &m->la); break;
    case K_DEC_LAYER: sb = attn_decoder_layer_saved_size(m->dl, &m->la), wb = attn_decoder_layer_workspace_size(m->dl, &m->la); break;
    case K_ENC: sb = attn_encoder_saved_size(m->enc, &m->la), wb = attn_encoder_workspace_size(m->enc, &m->la); break;
    case K_DEC: sb = attn_decoder_saved_size(m->dec, &m->la), wb = attn_decoder_workspace_size(m->dec, &m->la); break;
    default: sb = attn_transformer_saved_size(m->tr, &m->ta), wb = attn_transformer_workspace_size(m->tr, &m->ta);
    }
    if (sb == SIZE_MAX || wb == SIZE_MAX)
        return attn_error(ATTN_ERR_OVERFLOW, "%s: buffer sizes overflow for these inputs", attn_nn_model_names[m->kind]);
    attn_status st;
    size_t cap = 0;
    const int64_t B = m->in_shape[IN_A][0], N = m->kind == K_TR ? m->in_shape[IN_B][1] : m->in_shape[IN_A][1];
    free(m->out);
    m->out = NULL;
    if ((st = grow((void **)&m->out, &cap, sizeof(float) * (size_t)(B * N * m->d)))) return st;
    m->out_shape[0] = B, m->out_shape[1] = N, m->out_shape[2] = m->d;
    if ((keep_for_backward && (st = grow(&m->saved, &m->saved_bytes, sb))) || (st = grow(&m->ws, &m->ws_bytes, wb)))
        return st;
    free(m->w);
    m->w = NULL;
    m->w_rank = 0;
    void *sv = keep_for_backward ? m->saved : NULL;
    const size_t svb = keep_for_backward ? m->saved_bytes : 0;
    m->kept = 0;
    switch (m->kind) {
    case K_MHA: {
        if (m->need_weights) {
            const int64_t nk2 = m->ma.nk + m->extra_keys;
            m->w_rank = m->average ? 3 : 4;
            int64_t *ws = m->w_shape;
            if (m->average) ws[0] = B, ws[1] = m->ma.nq, ws[2] = nk2;
            else ws[0] = B, ws[1] = m->heads, ws[2] = m->ma.nq, ws[3] = nk2;
            size_t n = (size_t)(B * m->ma.nq * nk2 * (m->average ? 1 : m->heads)), c2 = 0;
            if ((st = grow((void **)&m->w, &c2, sizeof(float) * n))) return st;
        }
        st = attn_mha_forward(m->mha, &m->ma, m->out, m->w, sv, svb, m->ws, m->ws_bytes);
        break;
    }
    case K_ENC_LAYER: st = attn_encoder_layer_forward(m->el, &m->la, m->out, sv, svb, m->ws, m->ws_bytes); break;
    case K_DEC_LAYER: st = attn_decoder_layer_forward(m->dl, &m->la, m->out, sv, svb, m->ws, m->ws_bytes); break;
    case K_ENC: st = attn_encoder_forward(m->enc, &m->la, m->out, sv, svb, m->ws, m->ws_bytes); break;
    case K_DEC: st = attn_decoder_forward(m->dec, &m->la, m->out, sv, svb, m->ws, m->ws_bytes); break;
    default: st = attn_transformer_forward(m->tr, &m->ta, m->out, sv, svb, m->ws, m->ws_bytes);
    }
    m->kept = !st && keep_for_backward;
    return st;
}

const float *attn_nn_model_output(const nn_model *m, int *rank, int64_t shape[4]) {
    if (!m || !m->out) return NULL;
    if (rank) *rank = 3;
    if (shape) memcpy(shape, m->out_shape, sizeof m->out_shape);
    return m->out;
}

const float *attn_nn_model_weights(const nn_model *m, int *rank, int64_t shape[4]) {
    if (!m || !m->w) return NULL;
    if (rank) *rank = m->w_rank;
    if (shape) memcpy(shape, m->w_shape, sizeof m->w_shape);
    return m->w;
}

attn_status attn_nn_model_backward(nn_model *m, const float *dout) {
    ATTN_CHECK_NOT_NULL("attn_nn_model_backward", m);
    ATTN_CHECK_NOT_NULL("attn_nn_model_backward", dout);
    if (!m->kept) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_nn_model_backward: no forward kept for a backward");
    for (int i = 0; i < NIN; i++) {
        free(m->grad[i]);
        m->grad[i] = NULL;
        const int64_t *s = m->in_shape[i];
        if (!m->in[i]) continue;
        m->grad[i] = malloc(sizeof(float) * (size_t)(s[0] * s[1] * s[2]));
        if (!m->grad[i]) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_nn_model_backward: out of memory");
    }
    float **g = m->grad;
    switch (m->kind) {
    case K_MHA: {
        float *dk = g[IN_B] ? g[IN_B] : g[IN_A], *dv = g[IN_C] ? g[IN_C] : g[IN_A];
        return attn_mha_backward(m->mha, &m->ma, dout, g[IN_A], dk, dv, m->saved, m->saved_bytes, m->ws, m->ws_bytes);
    }
    case K_ENC_LAYER:
        return attn_encoder_layer_backward(m->el, &m->la, dout, g[IN_A], m->saved, m->saved_bytes, m->ws, m->ws_bytes);
    case K_DEC_LAYER:
        return attn_decoder_layer_backward(m->dl, &m->la, dout, g[IN_A], g[IN_B], m->saved, m->saved_bytes, m->ws,
                                           m->ws_bytes);
    case K_ENC: return attn_encoder_backward(m->enc, &m->la, dout, g[IN_A], m->saved, m->saved_bytes, m->ws, m->ws_bytes);
    case K_DEC:
        return attn_decoder_backward(m->dec, &m->la, dout, g[IN_A], g[IN_B], m->saved, m->saved_bytes, m->ws, m->ws_bytes);
    default:
        return attn_transformer_backward(m->tr, &m->ta, dout, g[IN_A], g[IN_B], m->saved, m->saved_bytes, m->ws,
                                         m->ws_bytes);
    }
}

const float *attn_nn_model_input_grad(const nn_model *m, const char *name, size_t *numel) {
    if (!m || !name) return NULL;
    for (int i = 0; i < NIN; i++) {
        const char *n = GRAD_NAMES[m->kind][i];
        if (!n || strcmp(n, name) || !m->grad[i]) continue;
        if (numel) *numel = (size_t)(m->in_shape[i][0] * m->in_shape[i][1] * m->in_shape[i][2]);
        return m->grad[i];
    }
    return NULL;
}
