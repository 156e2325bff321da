/* Module configurations from JSON (PyTorch constructor keyword arguments); see nn_config.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attention/attention_kind.h"
#include "core/internal.h"
#include "nn_config.h"

static int listed(const char *const *list, const char *name) {
    for (; list && *list; list++)
        if (!strcmp(*list, name)) return 1;
    return 0;
}

attn_status attn_nn_json_read(const char *what, const attn_json *obj, const nn_key *keys, int nkeys,
                              const char *const *ignore) {
    if (!obj || obj->type != ATTN_JSON_OBJECT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: expected a JSON object, got %s", what,
                          obj ? attn_json_type_name(obj->type) : "nothing");
    const size_t n = attn_json_count(obj);
    for (size_t i = 0; i < n; i++) {
        size_t nlen = 0;
        const char *name = attn_json_as_string(attn_json_member_key(obj, i), &nlen);
        if (strlen(name) != nlen)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' contains a NUL character", what, name);
        int k = 0;
        while (k < nkeys && strcmp(keys[k].name, name)) k++;
        if (k == nkeys) {
            if (listed(ignore, name)) continue;
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: unknown key '%s'", what, name);
        }
    }
    for (int k = 0; k < nkeys; k++) {
        const attn_json *v = attn_json_get(obj, keys[k].name);
        if (!v) {
            if (keys[k].required)
                return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: missing key '%s'", what, keys[k].name);
            continue;
        }
        int ok = 1;
        const char *want = "";
        switch (keys[k].type) {
        case NN_K_INT:
        case NN_K_INT_OR_NULL: {
            int64_t x = 0;
            want = keys[k].type == NN_K_INT ? "an integer" : "an integer or null";
            double d = 0;
            if (keys[k].type == NN_K_INT_OR_NULL && attn_json_is_null(v))
                x = 0;
            else if (!attn_json_as_i64(v, &x) && attn_json_as_double(v, &d) && d == floor(d)) {
                /* an integer written with an exponent (1e3) or beyond int64: the module checks the
                 * range of what fits; the rest is named out of range here, never "not an integer" */
                if (!(fabs(d) < 0x1p63))
                    return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                                      "%s: key '%s' (%.17g) is out of range: at most 2^63 - 1 in magnitude", what,
                                      keys[k].name, d);
                x = (int64_t)d;
            } else {
                ok = attn_json_as_i64(v, &x);
                if (!ok && attn_json_as_double(v, &d))
                    return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be %s, got %.17g", what,
                                      keys[k].name, want, d);
            }
            if (ok) *(int64_t *)keys[k].dst = x;
            break;
        }
        case NN_K_BOOL: {
            int x = 0;
            want = "true or false";
            ok = attn_json_as_bool(v, &x);
            if (ok) *(int *)keys[k].dst = x;
            break;
        }
        case NN_K_FLOAT: {
            double x = 0;
            want = "a number";
            ok = attn_json_as_double(v, &x) && isfinite((float)x);
            if (ok) *(float *)keys[k].dst = (float)x;
            break;
        }
        case NN_K_STRING: {
            size_t slen = 0;
            const char *s = attn_json_as_string(v, &slen);
            want = "a string";
            ok = s != NULL;
            if (ok && strlen(s) != slen)
                return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' contains a NUL character", what,
                                  keys[k].name);
            if (ok) *(const char **)keys[k].dst = s;
            break;
        }
        case NN_K_OBJECT:
            want = "an object";
            ok = v->type == ATTN_JSON_OBJECT;
            if (ok) *(const attn_json **)keys[k].dst = v;
            break;
        }
        if (!ok)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be %s, got %s", what, keys[k].name, want,
                              attn_json_type_name(v->type));
    }
    return ATTN_OK;
}

attn_status attn_nn_json_mha_config(const attn_json *obj, const char *const *ignore, attn_mha_config *cfg) {
    static const char what[] = "multihead_attention";
    *cfg = attn_mha_config_default(0, 0);
    int batch_first = 1;
    const nn_key keys[] = {
        {"embed_dim", NN_K_INT, &cfg->embed_dim, 1},
        {"num_heads", NN_K_INT, &cfg->num_heads, 1},
        {"dropout", NN_K_FLOAT, &cfg->dropout, 0},
        {"bias", NN_K_BOOL, &cfg->bias, 0},
        {"add_bias_kv", NN_K_BOOL, &cfg->add_bias_kv, 0},
        {"add_zero_attn", NN_K_BOOL, &cfg->add_zero_attn, 0},
        {"kdim", NN_K_INT_OR_NULL, &cfg->kdim, 0},
        {"vdim", NN_K_INT_OR_NULL, &cfg->vdim, 0},
        {"batch_first", NN_K_BOOL, &batch_first, 0},
        {"separate_projections", NN_K_BOOL, &cfg->separate_projections, 0},
    };
    attn_status st = attn_nn_json_read(what, obj, keys, (int)(sizeof keys / sizeof keys[0]), ignore);
    if (st) return st;
    if (!batch_first)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: batch_first must be true (attn is batch-first)", what);
    return ATTN_OK;
}

attn_status attn_nn_json_seed_attention_config(const attn_json *obj, const char *what, const char *window_key,
                                               const char *const *ignore, attn_mha_config *cfg) {
    int64_t d = 0, h = 0, window = 128;
    float dropout = 0.1f;
    nn_key keys[4] = {
        {"d_model", NN_K_INT, &d, 1},
        {"num_heads", NN_K_INT, &h, 1},
        {"dropout", NN_K_FLOAT, &dropout, 0},
        {window_key, NN_K_INT, &window, 0},
    };
    attn_status st = attn_nn_json_read(what, obj, keys, window_key ? 4 : 3, ignore);
    if (st) return st;
    if (window_key && window < 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be >= 0 (got %lld)", what, window_key,
                          (long long)window);
    *cfg = attn_mha_config_default(d, h);
    cfg->dropout = dropout;
    cfg->separate_projections = 1;
    if (window_key) cfg->attention.window = window;
    return ATTN_OK;
}

attn_status attn_nn_json_seed_kernel_config(const attn_json *obj, const char *what, attn_attention_kind kind,
                                            const char *const *ignore, attn_mha_config *cfg, int *causal) {
    const attn_kind_ops *ops = attn_kind_ops_get(kind);
    /* a kind on random features (PerformerAttention) also takes num_features and dropout */
    const int features_kind = ops && ops->random_features;
    int64_t d = 0, h = 0, features = 256;
    float dropout = 0.1f;
    *causal = 0;
    const nn_key keys[] = {
        {"d_model", NN_K_INT, &d, 1},         {"num_heads", NN_K_INT, &h, 1},
        {"causal", NN_K_BOOL, causal, 0},     {"num_features", NN_K_INT, &features, 0},
        {"dropout", NN_K_FLOAT, &dropout, 0},
    };
    attn_status st = attn_nn_json_read(what, obj, keys, features_kind ? 5 : 3, ignore);
    if (st) return st;
    if (d < 1 || h < 1 || d > (1 << 24) || d % h != 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: d_model (%lld) must be a multiple of num_heads (%lld) in [1, 2^24]", what, (long long)d,
                          (long long)h);
    if (features_kind && (features < 1 || features > (1 << 16)))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'num_features' must be in [1, 65536] (got %lld)", what,
                          (long long)features);
    *cfg = attn_mha_config_default(d, h);
    cfg->dropout = 0; /* PerformerAttention's forward never applies its nn.Dropout */
    cfg->separate_projections = 1;
    cfg->attention.kind = kind;
    if (features_kind) cfg->attention.num_features = features;
    return ATTN_OK;
}

attn_status attn_nn_json_local_global_config(const attn_json *obj, const char *const *ignore,
                                             attn_local_global_config *cfg) {
    static const char what[] = "local_global_attention";
    attn_mha_config c;
    attn_status st = attn_nn_json_seed_attention_config(obj, what, "local_window", ignore, &c);
    if (st) return st;
    *cfg = attn_local_global_config_default(c.embed_dim, c.num_heads, c.attention.window);
    cfg->dropout = c.dropout;
    return ATTN_OK;
}

/* The keys every layer configuration shares; activation read as a string. */
static attn_status layer_keys(const char *what, const attn_json *obj, const char *const *ignore, attn_layer_config *cfg,
                              const nn_key *extra, int nextra) {
    nn_key keys[16];
    int batch_first = 1, bias = 1;
    const char *act = NULL;
    const nn_key base[] = {
        {"d_model", NN_K_INT, &cfg->d_model, 0},
        {"nhead", NN_K_INT, &cfg->nhead, 0},
        {"dim_feedforward", NN_K_INT, &cfg->dim_feedforward, 0},
        {"dropout", NN_K_FLOAT, &cfg->dropout, 0},
        {"activation", NN_K_STRING, &act, 0},
        {"layer_norm_eps", NN_K_FLOAT, &cfg->layer_norm_eps, 0},
        {"batch_first", NN_K_BOOL, &batch_first, 0},
        {"norm_first", NN_K_BOOL, &cfg->norm_first, 0},
        {"bias", NN_K_BOOL, &bias, 0},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) keys[n++] = base[i];
    for (int i = 0; i < nextra; i++) keys[n++] = extra[i];
    attn_status st = attn_nn_json_read(what, obj, keys, n, ignore);
    if (st) return st;
    if (!batch_first)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: batch_first must be true (attn is batch-first)", what);
    if (!bias) return attn_error(ATTN_ERR_UNSUPPORTED, "%s: bias = false is not supported", what);
    if (act) {
        if (!strcmp(act, "relu"))
            cfg->activation = ATTN_ACTIVATION_RELU;
        else if (!strcmp(act, "gelu"))
            cfg->activation = ATTN_ACTIVATION_GELU;
        else
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: activation '%s' is neither \"relu\" nor \"gelu\"", what,
                              act);
    }
    return ATTN_OK;
}

attn_status attn_nn_json_layer_config(const attn_json *obj, const char *what, const char *const *ignore,
                                      attn_layer_config *cfg) {
    *cfg = attn_layer_config_default(0, 0);
    attn_status st = layer_keys(what, obj, ignore, cfg, NULL, 0);
    if (st) return st;
    if (!attn_json_get(obj, "d_model") || !attn_json_get(obj, "nhead"))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: missing key '%s'", what,
                          attn_json_get(obj, "d_model") ? "nhead" : "d_model");
    return ATTN_OK;
}

attn_status attn_nn_json_stack_config(const attn_json *obj, const char *what, const char *layer_key,
                                      const char *const *ignore, attn_stack_config *cfg) {
    *cfg = attn_stack_config_default(0, 0, 0);
    const attn_json *layer = NULL;
    int nested = 1, mask_check = 1;
    const nn_key keys[] = {
        {layer_key, NN_K_OBJECT, &layer, 1},       {"num_layers", NN_K_INT, &cfg->num_layers, 1},
        {"norm", NN_K_BOOL, &cfg->norm, 0},        {"enable_nested_tensor", NN_K_BOOL, &nested, 0},
        {"mask_check", NN_K_BOOL, &mask_check, 0},
    };
    cfg->norm = 0; /* PyTorch's default: norm=None */
    attn_status st = attn_nn_json_read(what, obj, keys, (int)(sizeof keys / sizeof keys[0]), ignore);
    if (st) return st;
    char sub[96];
    snprintf(sub, sizeof sub, "%s: %s", what, layer_key);
    return attn_nn_json_layer_config(layer, sub, NULL, &cfg->layer);
}

attn_status attn_nn_json_transformer_config(const attn_json *obj, const char *const *ignore,
                                            attn_transformer_config *cfg) {
    *cfg = attn_transformer_config_default();
    const nn_key extra[] = {
        {"num_encoder_layers", NN_K_INT, &cfg->num_encoder_layers, 0},
        {"num_decoder_layers", NN_K_INT, &cfg->num_decoder_layers, 0},
    };
    return layer_keys("transformer", obj, ignore, &cfg->layer, extra, 2);
}

attn_status attn_nn_json_vit_config(const attn_json *obj, const char *const *ignore, attn_vit_config *cfg) {
    static const char what[] = "vision_transformer";
    *cfg = attn_vit_config_default(0, 0, 0, 0, 0, 0, 1000);
    int64_t image_size = 0, representation_size = 0;
    float attention_dropout = 0.0f;
    const nn_key keys[] = {
        {"image_size", NN_K_INT, &image_size, 1},
        {"patch_size", NN_K_INT, &cfg->patch_size, 1},
        {"num_layers", NN_K_INT, &cfg->num_layers, 1},
        {"num_heads", NN_K_INT, &cfg->num_heads, 1},
        {"hidden_dim", NN_K_INT, &cfg->hidden_dim, 1},
        {"mlp_dim", NN_K_INT, &cfg->mlp_dim, 1},
        {"dropout", NN_K_FLOAT, &cfg->dropout, 0},
        {"attention_dropout", NN_K_FLOAT, &attention_dropout, 0},
        {"num_classes", NN_K_INT, &cfg->num_classes, 0},
        {"representation_size", NN_K_INT_OR_NULL, &representation_size, 0},
        {"in_channels", NN_K_INT, &cfg->in_channels, 0},
        {"layer_norm_eps", NN_K_FLOAT, &cfg->layer_norm_eps, 0},
        {"distilled", NN_K_BOOL, &cfg->distilled, 0},
    };
    attn_status st = attn_nn_json_read(what, obj, keys, (int)(sizeof keys / sizeof keys[0]), ignore);
    if (st) return st;
    cfg->image_h = cfg->image_w = image_size;
    if (attention_dropout != cfg->dropout)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: attention_dropout (%g) must equal dropout (%g)", what,
                          (double)attention_dropout, (double)cfg->dropout);
    if (representation_size)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: representation_size must be null (no pre-logits layer)", what);
    return ATTN_OK;
}
