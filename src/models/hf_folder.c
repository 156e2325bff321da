/* A Hugging Face folder: config.json, the safetensors weights (model.safetensors, or the shards of
 * model.safetensors.index.json), and the check of the tensors against what a family needs. Every
 * file is hostile: errors name the file and the key, nothing is allocated from an unchecked size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/io.h"
#include "core/alloc.h"
#include "core/internal.h"
#include "models_internal.h"

attn_status attn_hf_read_json(const char *path, attn_json_type type, attn_json_doc **doc, const attn_json **root) {
    char *text = NULL;
    size_t len = 0;
    *doc = NULL;
    attn_status st = attn_io_read_input(path, "config", ATTN_IO_CAP_CONFIG, &text, &len);
    if (st) return st;
    attn_json_error jerr;
    const attn_json_options jopt = {0, 1}; /* a repeated key is an error */
    if (attn_json_parse(text, len, &jopt, doc, &jerr) != ATTN_JSON_OK) {
        attn__free(text);
        return attn_error(jerr.status == ATTN_JSON_ERR_NOMEM ? ATTN_ERR_OUT_OF_MEMORY : ATTN_ERR_INVALID_ARGUMENT,
                          "%s: not JSON: %s", path, jerr.message);
    }
    attn__free(text);
    *root = attn_json_root(*doc);
    if ((*root)->type != type) {
        attn_json_free(*doc);
        *doc = NULL;
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: the top level must be a JSON %s", path,
                          attn_json_type_name(type));
    }
    return ATTN_OK;
}

/* ---- config keys ---- */

attn_status attn_hf_json_int(const attn_json *obj, const char *path, const char *key, int required, int64_t def,
                             int64_t lo, int64_t hi, int64_t *out) {
    const attn_json *v = attn_json_get(obj, key);
    if (!v || attn_json_is_null(v)) {
        if (required) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: missing key '%s'", path, key);
        *out = def;
        return ATTN_OK;
    }
    int64_t x;
    if (!attn_json_as_i64(v, &x))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be an integer (got %s%s%s)", path, key,
                          attn_json_type_name(v->type), v->type == ATTN_JSON_NUMBER ? " " : "",
                          v->type == ATTN_JSON_NUMBER ? v->str : "");
    if (x < lo || x > hi)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' is %lld, outside [%lld, %lld]", path, key,
                          (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return ATTN_OK;
}

attn_status attn_hf_json_bool(const attn_json *obj, const char *path, const char *key, int def, int *out) {
    const attn_json *v = attn_json_get(obj, key);
    if (!v || attn_json_is_null(v)) {
        *out = def;
        return ATTN_OK;
    }
    if (!attn_json_as_bool(v, out))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be true or false (got %s)", path, key,
                          attn_json_type_name(v->type));
    return ATTN_OK;
}

attn_status attn_hf_config_int(const hf_folder *f, const char *key, int required, int64_t def, int64_t lo, int64_t hi,
                               int64_t *out) {
    return attn_hf_json_int(f->config, f->config_path, key, required, def, lo, hi, out);
}

attn_status attn_hf_config_bool(const hf_folder *f, const char *key, int def, int *out) {
    return attn_hf_json_bool(f->config, f->config_path, key, def, out);
}

attn_status attn_hf_config_number(const hf_folder *f, const char *key, double def, double *out) {
    const attn_json *v = attn_json_get(f->config, key);
    if (!v || attn_json_is_null(v)) {
        *out = def;
        return ATTN_OK;
    }
    if (!attn_json_as_double(v, out))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be a number (got %s)", f->config_path, key,
                          attn_json_type_name(v->type));
    return ATTN_OK;
}

attn_status attn_hf_config_string(const hf_folder *f, const char *key, const char *def, const char **out) {
    const attn_json *v = attn_json_get(f->config, key);
    if (!v || attn_json_is_null(v)) {
        if (!def) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: missing key '%s'", f->config_path, key);
        *out = def;
        return ATTN_OK;
    }
    size_t len = 0;
    const char *s = attn_json_as_string(v, &len);
    if (!s || strlen(s) != len)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be a string (got %s)", f->config_path, key,
                          attn_json_type_name(v->type));
    *out = s;
    return ATTN_OK;
}

/* hidden_act of the encoder families (BERT, ViT), as transformers' ACT2FN names them. */
attn_status attn_hf_config_activation(const hf_folder *f, attn_activation *act) {
    const char *s = NULL;
    attn_status st = attn_hf_config_string(f, "hidden_act", "gelu", &s);
    if (st) return st;
    if (strcmp(s, "gelu") == 0)
        *act = ATTN_ACTIVATION_GELU;
    else if (strcmp(s, "gelu_new") == 0 || strcmp(s, "gelu_pytorch_tanh") == 0)
        *act = ATTN_ACTIVATION_GELU_TANH;
    else if (strcmp(s, "relu") == 0)
        *act = ATTN_ACTIVATION_RELU;
    else
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: key 'hidden_act' is \"%.60s\" (attn runs gelu, gelu_new, gelu_pytorch_tanh, relu)",
                          f->config_path, s);
    return ATTN_OK;
}

attn_status attn_hf_config_eos(const hf_folder *f, int32_t *ids, size_t cap, size_t *n) {
    const char *key = "eos_token_id";
    const attn_json *v = attn_json_get(f->config, key);
    *n = 0;
    if (v && v->type == ATTN_JSON_ARRAY) {
        if (attn_json_count(v) > cap)
            return attn_error(ATTN_ERR_UNSUPPORTED, "%s: key '%s' lists %zu ids (attn takes at most %zu)",
                              f->config_path, key, attn_json_count(v), cap);
        for (size_t i = 0; i < attn_json_count(v); i++) {
            int64_t x = -1;
            if (!attn_json_as_i64(attn_json_at(v, i), &x) || x < 0 || x > INT32_MAX)
                return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                                  "%s: key '%s' element %zu must be an integer in [0, 2147483647]", f->config_path, key,
                                  i);
            ids[(*n)++] = (int32_t)x;
        }
        return ATTN_OK;
    }
    int64_t x = -1;
    attn_status st = attn_hf_config_int(f, key, 0, -1, -1, INT32_MAX, &x);
    if (!st && x >= 0 && cap > 0) ids[(*n)++] = (int32_t)x;
    return st;
}

/* ---- weights ---- */

/* The index of the open shard named file, or n_shards. */
static size_t shard_index(const hf_folder *f, const char *file) {
    size_t fl = strlen(file), k = 0;
    for (; k < f->n_shards; k++) {
        const char *p = f->shard_paths[k];
        size_t pl = strlen(p);
        if (pl > fl && strcmp(p + pl - fl, file) == 0 && p[pl - fl - 1] == '/') break;
    }
    return k;
}

static attn_status add_shard(hf_folder *f, const char *file) {
    if (shard_index(f, file) < f->n_shards) return ATTN_OK;
    char *path = attn_io_path_join(f->dir, file);
    attn_safetensors **s = attn__realloc(f->shards, (f->n_shards + 1) * sizeof *s);
    if (s) f->shards = s;
    char **p = attn__realloc(f->shard_paths, (f->n_shards + 1) * sizeof *p);
    if (p) f->shard_paths = p;
    if (!path || !s || !p) {
        attn__free(path);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    }
    attn_safetensors *st = NULL;
    attn_status r = attn_safetensors_open_file(path, &st);
    if (r) {
        char why[400];
        snprintf(why, sizeof why, "%s", attn_last_error());
        if (!strstr(why, path)) attn_error(r, "%s: %s", path, why);
        attn__free(path);
        return r;
    }
    f->shards[f->n_shards] = st;
    f->shard_paths[f->n_shards++] = path;
    return ATTN_OK;
}

/* A shard's file name: a plain name in the folder (no '/', not "." or ".."). */
static int plain_name(const char *s, size_t len) {
    return len > 0 && strlen(s) == len && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static attn_status open_index(hf_folder *f, const char *index) {
    attn_json_doc *doc = NULL;
    const attn_json *root = NULL;
    attn_status st = attn_hf_read_json(index, ATTN_JSON_OBJECT, &doc, &root);
    if (st) return st;
    const attn_json *map = attn_json_get(root, "weight_map");
    if (!map || map->type != ATTN_JSON_OBJECT || attn_json_count(map) == 0)
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'weight_map' must be a non-empty object of file names",
                        index);
    for (size_t i = 0; !st && i < attn_json_count(map); i++) {
        size_t len = 0;
        const char *file = attn_json_as_string(attn_json_member_value(map, i), &len);
        const char *name = attn_json_as_string(attn_json_member_key(map, i), NULL);
        if (!file || !plain_name(file, len))
            st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: weight_map['%s'] must name a file in the folder", index,
                            name);
        if (!st) st = add_shard(f, file);
        if (!st && !attn_safetensors_find(f->shards[shard_index(f, file)], name))
            st = attn_error(ATTN_ERR_NOT_FOUND, "%s: weight_map['%s'] names '%s', which has no such tensor", index,
                            name, file);
    }
    attn_json_free(doc);
    return st;
}

static attn_status open_weights(hf_folder *f) {
    char *index = attn_io_path_join(f->dir, "model.safetensors.index.json");
    char *single = attn_io_path_join(f->dir, "model.safetensors");
    char *bin = attn_io_path_join(f->dir, "pytorch_model.bin");
    attn_status st;
    if (!index || !single || !bin)
        st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    else if (attn_io_is_regular(single))
        st = add_shard(f, "model.safetensors");
    else if (attn_io_is_regular(index))
        st = open_index(f, index);
    else if (attn_io_is_regular(bin))
        st = attn_error(ATTN_ERR_UNSUPPORTED,
                        "%s: no model.safetensors (pytorch_model.bin is not read: convert it to safetensors)", f->dir);
    else
        st = attn_error(ATTN_ERR_NOT_FOUND, "%s: no model.safetensors nor model.safetensors.index.json", f->dir);
    attn__free(index);
    attn__free(single);
    attn__free(bin);
    return st;
}

attn_status attn_hf_folder_open(const char *dir, hf_folder *f) {
    memset(f, 0, sizeof *f);
    f->dir = attn__strdup(dir);
    f->config_path = attn_io_path_join(dir, "config.json");
    if (!f->dir || !f->config_path) {
        attn_hf_folder_close(f);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    }
    attn_status st = attn_hf_read_json(f->config_path, ATTN_JSON_OBJECT, &f->config_doc, &f->config);
    if (!st) st = open_weights(f);
    if (st) attn_hf_folder_close(f);
    return st;
}

void attn_hf_folder_close(hf_folder *f) {
    for (size_t i = 0; i < f->n_shards; i++) {
        attn_safetensors_close(f->shards[i]);
        attn__free(f->shard_paths[i]);
    }
    attn__free(f->shards);
    attn__free(f->shard_paths);
    attn_json_free(f->config_doc);
    attn__free(f->config_path);
    attn__free(f->dir);
    memset(f, 0, sizeof *f);
}

void attn_hf_needs_free(hf_need *needs, size_t n) {
    for (size_t i = 0; needs && i < n; i++) attn__free(needs[i].name);
    attn__free(needs);
}

attn_status attn_hf_check_layer_count(const hf_folder *f, const char *prefix, const char *stack, const char *last,
                                      const char *key, int64_t layers) {
    char name[160];
    snprintf(name, sizeof name, "%s%s%lld%s", prefix, stack, (long long)(layers - 1), last);
    if (attn_hf_tensor(f, name, NULL)) return ATTN_OK;
    int64_t have = 0;
    const size_t n = attn_hf_tensor_count(f), pl = strlen(prefix), sl = strlen(stack);
    for (size_t i = 0; i < n; i++) {
        const char *s = attn_hf_tensor_at(f, i, NULL)->name;
        if (strncmp(s, prefix, pl) != 0 || strncmp(s + pl, stack, sl) != 0) continue;
        long long l = strtoll(s + pl + sl, NULL, 10);
        if (l + 1 > have) have = l + 1;
    }
    if (have >= layers) return ATTN_OK; /* the name check lists what is missing */
    return attn_error(ATTN_ERR_SHAPE, "%s: key '%s' is %lld but the weights (%s) hold %lld layer%s", f->config_path,
                      key, (long long)layers, f->shard_paths[0], (long long)have, have == 1 ? "" : "s");
}

const attn_safetensors_tensor *attn_hf_tensor(const hf_folder *f, const char *name, size_t *shard) {
    for (size_t i = 0; i < f->n_shards; i++) {
        const attn_safetensors_tensor *t = attn_safetensors_find(f->shards[i], name);
        if (t) {
            if (shard) *shard = i;
            return t;
        }
    }
    return NULL;
}

size_t attn_hf_tensor_count(const hf_folder *f) {
    size_t n = 0;
    for (size_t i = 0; i < f->n_shards; i++) n += attn_safetensors_count(f->shards[i]);
    return n;
}

const attn_safetensors_tensor *attn_hf_tensor_at(const hf_folder *f, size_t i, size_t *shard) {
    for (size_t k = 0; k < f->n_shards; k++) {
        size_t c = attn_safetensors_count(f->shards[k]);
        if (i < c) {
            if (shard) *shard = k;
            return attn_safetensors_get(f->shards[k], i);
        }
        i -= c;
    }
    return NULL;
}

/* ---- checking the tensors against a family's needs ---- */

/* Append ", name" to msg (cap bytes), counting what no longer fits in *dropped. */
static void list_add(char *msg, size_t cap, const char *name, size_t *dropped) {
    size_t len = strlen(msg);
    if (len + strlen(name) + 3 >= cap - 24) {
        (*dropped)++;
        return;
    }
    snprintf(msg + len, cap - len, "%s%s", msg[len - 1] == ' ' ? "" : ", ", name);
}

static attn_status check_names(const hf_folder *f, const hf_need *needs, size_t n,
                               int (*ignore)(const char *name, void *ctx), void *ctx) {
    char msg[480] = "missing: ";
    size_t missing = 0, unexpected = 0, dropped = 0;
    for (size_t i = 0; i < n; i++)
        if (!attn_hf_tensor(f, needs[i].name, NULL)) {
            list_add(msg, sizeof msg, needs[i].name, &dropped);
            missing++;
        }
    if (!missing) msg[0] = '\0';
    size_t total = attn_hf_tensor_count(f);
    for (size_t i = 0; i < total; i++) {
        const char *name = attn_hf_tensor_at(f, i, NULL)->name;
        size_t k = 0;
        while (k < n && strcmp(needs[k].name, name) != 0) k++;
        if (k < n || (ignore && ignore(name, ctx))) continue;
        if (!unexpected) {
            size_t len = strlen(msg);
            snprintf(msg + len, sizeof msg - len, "%sunexpected: ", missing ? "; " : "");
        }
        list_add(msg, sizeof msg, name, &dropped);
        unexpected++;
    }
    if (!missing && !unexpected) return ATTN_OK;
    return attn_error(ATTN_ERR_NOT_FOUND, "%s%s: the weights do not match %s (%zu missing, %zu unexpected): %s%s",
                      f->n_shards > 1 ? f->dir : f->shard_paths[0], f->n_shards > 1 ? " (shards)" : "", f->config_path,
                      missing, unexpected, msg, dropped ? " ..." : "");
}

attn_status attn_hf_check(const hf_folder *f, const hf_need *needs, size_t n,
                          int (*ignore)(const char *name, void *ctx), void *ctx) {
    attn_status st = check_names(f, needs, n, ignore, ctx);
    for (size_t i = 0; !st && i < n; i++) {
        size_t k = 0;
        const attn_safetensors_tensor *t = attn_hf_tensor(f, needs[i].name, &k);
        if (t->dtype != ATTN_DTYPE_F32 && t->dtype != ATTN_DTYPE_F16 && t->dtype != ATTN_DTYPE_BF16 &&
            t->dtype != ATTN_DTYPE_F64)
            return attn_error(ATTN_ERR_UNSUPPORTED, "%s: tensor '%s' is %s (attn reads F32, F16, BF16 and F64)",
                              f->shard_paths[k], t->name, attn_dtype_name(t->dtype));
        int same = t->rank == needs[i].rank;
        for (int d = 0; same && d < t->rank; d++) same = t->shape[d] == needs[i].shape[d];
        if (!same) {
            char got[200], want[200];
            attn_shape_str(t->shape, t->rank, got, sizeof got);
            attn_shape_str(needs[i].shape, needs[i].rank, want, sizeof want);
            return attn_error(ATTN_ERR_SHAPE, "%s: tensor '%s' has shape %s but %s says %s (%s)", f->shard_paths[k],
                              t->name, got, f->config_path, want, needs[i].keys);
        }
    }
    return st;
}

attn_status attn_hf_load(const hf_folder *f, const hf_need *needs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        if (!attn_hf_tensor(f, needs[i].name, &k))
            return attn_error(ATTN_ERR_NOT_FOUND, "attn_pretrained_open: tensor '%s' is missing", needs[i].name);
        const hf_need *q = &needs[i];
        const size_t rows = (size_t)q->shape[0], cols = q->rank == 2 ? (size_t)q->shape[1] : 1;
        float *tmp = q->transpose ? attn__malloc(rows * cols * sizeof(float)) : q->dst;
        if (!tmp) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory ('%s')", q->name);
        attn_status st = attn_safetensors_read_f32_shape(f->shards[k], q->name, tmp, q->rank, q->shape);
        if (q->transpose) {
            /* in 32 x 32 blocks: element by element, every write of a row went to another line
             * (a third of GPT-2 small's opening time) */
            for (size_t r0 = 0; !st && r0 < rows; r0 += 32)
                for (size_t c0 = 0; c0 < cols; c0 += 32)
                    for (size_t c = c0; c < cols && c < c0 + 32; c++)
                        for (size_t r = r0; r < rows && r < r0 + 32; r++) q->dst[c * rows + r] = tmp[r * cols + c];
            attn__free(tmp);
        }
        if (st) {
            char why[400];
            snprintf(why, sizeof why, "%s", attn_last_error());
            return attn_error(st, "%s: %s", f->shard_paths[k], why);
        }
    }
    return ATTN_OK;
}
