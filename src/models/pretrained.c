/* attn_pretrained (include/attn/pretrained.h): a Hugging Face folder opened through the family
 * table, sentence-transformers' modules (modules.json, Pooling, Normalize, sentence_bert_config),
 * the checks every call shares, the pooling of attn_pretrained_embed, and a causal LM's logits and
 * generation (greedy, or sampled with temperature, top-k and top-p from Philox draws). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/kernels.h"
#include "core/alloc.h"
#include "core/internal.h"
#include "models_internal.h"
#include "nn/nn_internal.h"

/* sentence-transformers' modules: where the model is, how it pools, whether it normalises. */
typedef struct st_modules {
    char *model_dir; /* NULL: the folder itself */
    char *pooling_dir;
    int normalize;
} st_modules;

static void st_modules_free(st_modules *s) {
    attn__free(s->model_dir);
    attn__free(s->pooling_dir);
}

/* A module's path: relative, inside the folder (no "..", no leading '/'). */
static int safe_relative(const char *p) {
    if (p[0] == '/' || strcmp(p, "..") == 0 || strncmp(p, "../", 3) == 0 || strstr(p, "/../")) return 0;
    size_t n = strlen(p);
    return !(n >= 3 && strcmp(p + n - 3, "/..") == 0);
}

static int type_is(const char *type, const char *cls) {
    size_t t = strlen(type), c = strlen(cls);
    return t >= c && strcmp(type + t - c, cls) == 0 && (t == c || type[t - c - 1] == '.');
}

/* One entry of modules.json: {"idx", "name", "path", "type"}. */
static attn_status st_module(const char *dir, const char *path, const attn_json *mod, size_t i, int *stage,
                             st_modules *s) {
    const char *type = attn_json_as_string(attn_json_get(mod, "type"), NULL);
    const char *rel = attn_json_as_string(attn_json_get(mod, "path"), NULL);
    if (!type || !rel || !safe_relative(rel))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: module %zu needs a string 'type' and a relative 'path' inside the folder", path, i);
    int want = type_is(type, "Transformer") ? 0 : type_is(type, "Pooling") ? 1 : type_is(type, "Normalize") ? 2 : -1;
    if (want < 0)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: module %zu: type '%.120s' is not supported (attn runs "
                          "Transformer, Pooling and Normalize)",
                          path, i, type);
    if (want != *stage)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: module %zu: '%.120s' out of order (attn runs Transformer, Pooling, then Normalize)",
                          path, i, type);
    *stage = want + 1;
    if (want == 2) {
        s->normalize = 1;
        return ATTN_OK;
    }
    char *full = rel[0] ? attn_io_path_join(dir, rel) : attn__strdup(dir);
    if (!full) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    if (want == 0)
        s->model_dir = full;
    else
        s->pooling_dir = full;
    return ATTN_OK;
}

static attn_status read_modules(const char *dir, st_modules *s) {
    memset(s, 0, sizeof *s);
    char *path = attn_io_path_join(dir, "modules.json");
    if (!path) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    attn_status st = ATTN_OK;
    if (attn_io_is_regular(path)) {
        attn_json_doc *doc = NULL;
        const attn_json *root = NULL;
        st = attn_hf_read_json(path, ATTN_JSON_ARRAY, &doc, &root);
        int stage = 0;
        for (size_t i = 0; !st && i < attn_json_count(root); i++)
            st = st_module(dir, path, attn_json_at(root, i), i, &stage, s);
        if (!st && stage < 2)
            st = attn_error(ATTN_ERR_UNSUPPORTED, "%s: needs a Transformer and a Pooling module", path);
        attn_json_free(doc);
    }
    attn__free(path);
    if (st) st_modules_free(s);
    return st;
}

/* sentence-transformers >= 6: "pooling_mode": "mean" | "cls" | "max" (or a list of one). */
static attn_status pooling_mode(const attn_json *v, const char *path, int *which) {
    if (v->type == ATTN_JSON_ARRAY && attn_json_count(v) == 1) v = attn_json_at(v, 0);
    const char *s = attn_json_as_string(v, NULL);
    static const char *const names[] = {"mean", "cls", "max"};
    for (int i = 0; s && i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            *which = i;
            return ATTN_OK;
        }
    return attn_error(ATTN_ERR_UNSUPPORTED, "%s: key 'pooling_mode' must be \"mean\", \"cls\" or \"max\"%s%.60s%s",
                      path, s ? " (got \"" : " (got a ", s ? s : attn_json_type_name(v->type), s ? "\")" : ")");
}

/* Earlier versions: pooling_mode_mean_tokens, _cls_token, _max_tokens, exactly one true. */
static attn_status pooling_flags(const attn_json *root, const char *path, int *which) {
    static const char *const modes[] = {"pooling_mode_mean_tokens",         "pooling_mode_cls_token",
                                        "pooling_mode_max_tokens",          "pooling_mode_mean_sqrt_len_tokens",
                                        "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"};
    int on = 0;
    attn_status st = ATTN_OK;
    for (int i = 0; !st && i < 6; i++) {
        int v = 0;
        st = attn_hf_json_bool(root, path, modes[i], 0, &v);
        if (!st && v && i >= 3)
            st = attn_error(ATTN_ERR_UNSUPPORTED, "%s: key '%s' is true (attn pools by mean, CLS token or max)", path,
                            modes[i]);
        if (v) on++, *which = i;
    }
    if (!st && on != 1)
        st = attn_error(ATTN_ERR_UNSUPPORTED,
                        "%s: exactly one of pooling_mode_mean_tokens, _cls_token, _max_tokens must be true (%d are)",
                        path, on);
    return st;
}

/* The Pooling module's config.json: mean, CLS or max, over a width that must be the hidden size. */
static attn_status read_pooling(const char *pdir, attn_pretrained *m) {
    char *path = attn_io_path_join(pdir, "config.json");
    if (!path) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    attn_json_doc *doc = NULL;
    const attn_json *root = NULL;
    attn_status st = attn_hf_read_json(path, ATTN_JSON_OBJECT, &doc, &root);
    int which = 0, v6 = !st && attn_json_get(root, "pooling_mode");
    if (!st)
        st = v6 ? pooling_mode(attn_json_get(root, "pooling_mode"), path, &which) : pooling_flags(root, path, &which);
    int64_t width = 0;
    if (!st)
        st = attn_hf_json_int(root, path, v6 ? "embedding_dimension" : "word_embedding_dimension", 1, 0, m->hidden,
                              m->hidden, &width);
    if (!st) m->pooling = which;
    attn_json_free(doc);
    attn__free(path);
    return st;
}

/* An optional JSON file's integer key, clamped to [1, hi]; a value that is no integer of int64 (a
 * tokenizer's "no limit", 1e30) counts as hi. */
static attn_status optional_limit(const char *dir, const char *file, const char *key, int64_t hi, int64_t *out) {
    char *path = attn_io_path_join(dir, file);
    if (!path) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    attn_status st = ATTN_OK;
    if (attn_io_is_regular(path)) {
        attn_json_doc *doc = NULL;
        const attn_json *root = NULL;
        st = attn_hf_read_json(path, ATTN_JSON_OBJECT, &doc, &root);
        const attn_json *v = st ? NULL : attn_json_get(root, key);
        double x = 0;
        if (v && !attn_json_is_null(v) && !attn_json_as_double(v, &x))
            st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be a number (got %s)", path, key,
                            attn_json_type_name(v->type));
        else if (v && !attn_json_is_null(v) && x < 1)
            st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' must be >= 1 (got %s)", path, key, v->str);
        else if (v && !attn_json_is_null(v))
            *out = x < (double)hi ? (int64_t)x : hi;
        attn_json_free(doc);
    }
    attn__free(path);
    return st;
}

/* How many tokens the folder's sentence-transformers / tokenizer files let through:
 * sentence_bert_config.json's max_seq_length, else tokenizer_config.json's model_max_length
 * (sentence-transformers >= 6 keeps it there), never above max_position_embeddings. */
static attn_status read_max_length(const char *mdir, attn_pretrained *m) {
    int64_t st_len = 0, tok_len = 0;
    attn_status st = optional_limit(mdir, "sentence_bert_config.json", "max_seq_length", m->max_positions, &st_len);
    if (!st) st = optional_limit(mdir, "tokenizer_config.json", "model_max_length", m->max_positions, &tok_len);
    m->max_length = st_len ? st_len : tok_len ? tok_len : m->max_positions;
    return st;
}

attn_status attn_pretrained_open(const char *dir, attn_pretrained **out) {
    const char *fn = "attn_pretrained_open";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, dir);
    st_modules mods;
    attn_status st = read_modules(dir, &mods);
    if (st) return st;
    const char *mdir = mods.model_dir ? mods.model_dir : dir;
    hf_folder f;
    st = attn_hf_folder_open(mdir, &f);
    const hf_family *fam = NULL;
    attn_pretrained *m = NULL;
    if (!st) st = attn_hf_family_find(&f, &fam);
    if (!st && !(m = attn__calloc(1, sizeof *m))) st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (!st) {
        m->family = fam->name;
        m->eos_id = -1;
        const int prev = attn_nn_random_init_off(1); /* every weight comes from the folder */
        st = fam->open(&f, m);
        attn_nn_random_init_off(prev);
    }
    if (!st && m->step) st = attn_hf_config_eos(&f, m->eos_ids, ATTN_HF_MAX_EOS, &m->n_eos);
    if (!st && m->n_eos) m->eos_id = m->eos_ids[0];
    if (!st && mods.pooling_dir) st = read_pooling(mods.pooling_dir, m);
    if (!st) st = read_max_length(mdir, m);
    if (!st) m->normalize = mods.normalize;
    attn_hf_folder_close(&f);
    st_modules_free(&mods);
    if (st) {
        attn_pretrained_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

void attn_pretrained_free(attn_pretrained *m) {
    if (!m) return;
    if (m->prec) attn_nn_bf16_weights_free(m->prec->wb);
    if (m->free_impl) m->free_impl(m->impl);
    attn__free(m->buf);
    attn__free(m);
}

const char *attn_pretrained_family(const attn_pretrained *m) { return m ? m->family : NULL; }
int64_t attn_pretrained_hidden_size(const attn_pretrained *m) { return m ? m->hidden : 0; }
int64_t attn_pretrained_embedding_size(const attn_pretrained *m) { return m ? m->hidden : 0; }
int64_t attn_pretrained_max_length(const attn_pretrained *m) { return m ? m->max_length : 0; }
int64_t attn_pretrained_vocab_size(const attn_pretrained *m) { return m ? m->vocab : 0; }
int attn_pretrained_pooling(const attn_pretrained *m) { return m ? m->pooling : 0; }
int attn_pretrained_normalize(const attn_pretrained *m) { return m ? m->normalize : 0; }

/* The checks every call shares: shapes, lengths, ids and token types at real positions. */
static attn_status check_call(const char *fn, const attn_pretrained *m, const int32_t *ids, const int32_t *types,
                              const int64_t *lengths, int64_t batch, int64_t seq, const float *out) {
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, ids);
    ATTN_CHECK_NOT_NULL(fn, lengths);
    ATTN_CHECK_NOT_NULL(fn, out);
    if (m->image)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: the \"%s\" family takes images (attn_pretrained_classify)", fn,
                          m->family);
    if (batch < 1 || seq < 1 || batch > INT64_MAX / seq ||
        batch * seq > (int64_t)(SIZE_MAX / sizeof(float)) / m->hidden)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch %lld x seq %lld must be >= 1 and not overflow", fn,
                          (long long)batch, (long long)seq);
    for (int64_t b = 0; b < batch; b++) {
        if (lengths[b] < 1 || lengths[b] > seq || lengths[b] > m->max_positions)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                              "%s: lengths[%lld] = %lld must be in [1, min(seq %lld, max_position_embeddings %lld)]",
                              fn, (long long)b, (long long)lengths[b], (long long)seq, (long long)m->max_positions);
        for (int64_t t = 0; t < lengths[b]; t++) {
            int32_t id = ids[b * seq + t];
            if (id < 0 || id >= m->vocab)
                return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: ids[%lld][%lld] = %d is outside [0, vocab_size %lld)",
                                  fn, (long long)b, (long long)t, (int)id, (long long)m->vocab);
            if (types && (types[b * seq + t] < 0 || types[b * seq + t] >= m->type_vocab))
                return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                                  "%s: token_type_ids[%lld][%lld] = %d is outside [0, type_vocab_size %lld)", fn,
                                  (long long)b, (long long)t, (int)types[b * seq + t], (long long)m->type_vocab);
        }
    }
    return ATTN_OK;
}

static attn_status no_call(const char *fn, const attn_pretrained *m, const char *what) {
    return attn_error(ATTN_ERR_UNSUPPORTED, "%s: the \"%s\" family has no %s (%s)", fn, m->family, what,
                      m->hidden_states ? "an encoder: hidden states and embeddings only"
                      : m->image       ? "an image model: attn_pretrained_classify and image_hidden_states"
                                       : "a causal language model: logits and generation only");
}

attn_status attn_pretrained_hidden_states(attn_pretrained *m, const int32_t *ids, const int32_t *token_type_ids,
                                          const int64_t *lengths, int64_t batch, int64_t seq, float *out) {
    const char *fn = "attn_pretrained_hidden_states";
    attn_status st = check_call(fn, m, ids, token_type_ids, lengths, batch, seq, out);
    if (!st && !m->hidden_states) st = no_call(fn, m, "hidden states");
    return st ? st : attn_hf_call_hidden(m, ids, token_type_ids, lengths, batch, seq, out);
}

/* One row's pooled vector over its n real tokens h [n, H] (accumulated in double), normalised. */
static void pool_row(const attn_pretrained *m, const float *h, int64_t n, float *out) {
    int64_t H = m->hidden;
    double norm = 0;
    for (int64_t j = 0; j < H; j++) {
        double v = h[j];
        if (m->pooling == 0) {
            for (int64_t t = 1; t < n; t++) v += h[t * H + j];
            v /= (double)n;
        } else if (m->pooling == 2) {
            for (int64_t t = 1; t < n; t++) v = h[t * H + j] > v ? h[t * H + j] : v;
        }
        out[j] = (float)v;
        norm += v * v;
    }
    if (!m->normalize) return;
    norm = sqrt(norm);
    if (norm < 1e-12) norm = 1e-12; /* F.normalize's eps */
    for (int64_t j = 0; j < H; j++) out[j] = (float)(out[j] / norm);
}

attn_status attn_pretrained_embed(attn_pretrained *m, const int32_t *ids, const int64_t *lengths, int64_t batch,
                                  int64_t seq, float *out) {
    const char *fn = "attn_pretrained_embed";
    attn_status st = check_call(fn, m, ids, NULL, lengths, batch, seq, out);
    if (!st && !m->hidden_states) st = no_call(fn, m, "sentence embeddings");
    if (st) return st;
    size_t need = (size_t)(batch * seq) * (size_t)m->hidden;
    if (need > m->buf_floats) {
        float *b = attn__realloc(m->buf, need * sizeof(float));
        if (!b) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory (%zu floats)", fn, need);
        m->buf = b;
        m->buf_floats = need;
    }
    st = attn_hf_call_hidden(m, ids, NULL, lengths, batch, seq, m->buf);
    if (st) return st;
    for (int64_t b = 0; b < batch; b++) pool_row(m, m->buf + b * seq * m->hidden, lengths[b], out + b * m->hidden);
    return ATTN_OK;
}

attn_status attn_pretrained_logits(attn_pretrained *m, const int32_t *ids, const int64_t *lengths, int64_t batch,
                                   int64_t seq, float *out) {
    const char *fn = "attn_pretrained_logits";
    attn_status st = check_call(fn, m, ids, NULL, lengths, batch, seq, out);
    if (!st && !m->logits) st = no_call(fn, m, "logits");
    if (!st && batch * seq > (int64_t)(SIZE_MAX / sizeof(float)) / m->vocab)
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch %lld x seq %lld x vocab %lld overflows", fn,
                        (long long)batch, (long long)seq, (long long)m->vocab);
    return st ? st : attn_hf_call_logits(m, ids, lengths, batch, seq, out);
}

int32_t attn_pretrained_eos_id(const attn_pretrained *m) { return m ? m->eos_id : -1; }

size_t attn_pretrained_eos_ids(const attn_pretrained *m, int32_t *ids, size_t cap) {
    if (!m) return 0;
    for (size_t i = 0; ids && i < m->n_eos && i < cap; i++) ids[i] = m->eos_ids[i];
    return m->n_eos;
}

/* Whether generation stops after id: o's eos id, or, when that is the model's own
 * (attn_pretrained_eos_id), any id of the model's eos list. */
static int stops(const attn_pretrained *m, const attn_generate_options *o, int32_t id) {
    if (o->eos_id < 0) return 0;
    if (id == o->eos_id) return 1;
    for (size_t i = 0; o->eos_id == m->eos_id && i < m->n_eos; i++)
        if (id == m->eos_ids[i]) return 1;
    return 0;
}

attn_generate_options attn_generate_options_default(void) {
    attn_generate_options o;
    memset(&o, 0, sizeof o);
    o.max_new_tokens = 32;
    o.top_p = 1;
    o.eos_id = -1;
    return o;
}

/* ---- sampling ---- */
typedef struct cand {
    float logit;
    int32_t id;
} cand;

/* Larger logit first, ties by lower id. */
static int by_logit(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The next id from logits [V]: greedy, or drawn with u in [0, 1) from softmax(logits / T) over the
 * top_k largest, then the fewest whose probabilities sum to >= top_p. c [V], p [V] scratch. -1 - v
 * when logits[v] is the first NaN / Inf: no distribution to draw from (torch.multinomial raises),
 * and greedy's maximum would be whichever id a comparison with NaN happens to leave. */
static int32_t pick(const float *logits, int64_t V, const attn_generate_options *o, float u, cand *c, double *p) {
    for (int64_t v = 0; v < V; v++)
        if (!isfinite(logits[v])) return (int32_t)(-1 - v);
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (o->temperature <= 0) return (int32_t)best;
    for (int64_t v = 0; v < V; v++) c[v] = (cand){logits[v], (int32_t)v};
    qsort(c, (size_t)V, sizeof *c, by_logit);
    int64_t k = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    double sum = 0;
    for (int64_t j = 0; j < k; j++) {
        p[j] = exp(((double)c[j].logit - c[0].logit) / o->temperature);
        sum += p[j];
    }
    if (o->top_p < 1) {
        double acc = 0;
        int64_t keep = 0;
        while (keep < k && acc < o->top_p * sum) acc += p[keep++];
        k = keep > 0 ? keep : 1;
        sum = acc > 0 ? acc : p[0];
    }
    double r = (double)u * sum, acc = 0;
    for (int64_t j = 0; j < k; j++) {
        acc += p[j];
        if (r < acc) return c[j].id;
    }
    return c[k - 1].id;
}

static attn_status check_generate(const char *fn, const attn_pretrained *m, const int32_t *prompt, size_t n,
                                  const attn_generate_options *o) {
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, prompt);
    ATTN_CHECK_NOT_NULL(fn, o);
    if (!m->step) return no_call(fn, m, "generation");
    if (n < 1 || o->max_new_tokens < 0 || (int64_t)n > m->max_positions - o->max_new_tokens)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: prompt %zu + max_new_tokens %lld tokens must be in [1, n_positions %lld]", fn, n,
                          (long long)o->max_new_tokens, (long long)m->max_positions);
    if (!(o->temperature >= 0 && o->temperature <= 1e6) || o->top_k < 0 || !(o->top_p > 0 && o->top_p <= 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: temperature %g must be in [0, 1e6], top_k %lld >= 0, top_p %g in (0, 1]", fn,
                          o->temperature, (long long)o->top_k, o->top_p);
    for (size_t t = 0; t < n; t++)
        if (prompt[t] < 0 || prompt[t] >= m->vocab)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: prompt[%zu] = %d is outside [0, vocab_size %lld)", fn, t,
                              (int)prompt[t], (long long)m->vocab);
    return ATTN_OK;
}

attn_status attn_pretrained_generate(attn_pretrained *m, const int32_t *prompt, size_t n,
                                     const attn_generate_options *o, attn_generate_callback on_token, void *user,
                                     size_t *produced) {
    const char *fn = "attn_pretrained_generate";
    if (produced) *produced = 0;
    attn_status st = check_generate(fn, m, prompt, n, o);
    if (st || o->max_new_tokens == 0) return st;
    const size_t V = (size_t)m->vocab;
    float *last = attn__malloc(V * sizeof *last);
    cand *c = attn__malloc(V * sizeof *c);
    double *p = attn__malloc(V * sizeof *p);
    if (!last || !c || !p) st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory (vocab %zu)", fn, V);
    if (!st) st = attn_hf_call_step(m, 1, prompt, (int64_t)n, last);
    for (int64_t i = 0; !st && i < o->max_new_tokens; i++) {
        const int32_t id = pick(last, (int64_t)V, o, attn_philox_uniform(o->seed, 0, (uint64_t)i), c, p);
        if (id < 0) {
            st = attn_error(ATTN_ERR_NUMERIC,
                            "%s: the logits of new token %lld are not finite (logit %d is %g): the weights or the "
                            "activations hold NaN / Inf; nothing to sample from",
                            fn, (long long)i, (int)(-1 - id), (double)last[-1 - id]);
            break;
        }
        if (produced) (*produced)++;
        if ((on_token && on_token(id, user)) || stops(m, o, id) || i + 1 == o->max_new_tokens) break;
        st = attn_hf_call_step(m, 0, &id, 1, last);
    }
    attn__free(last);
    attn__free(c);
    attn__free(p);
    return st;
}

attn_status attn_pretrained_set_precision(attn_pretrained *m, attn_precision p) {
    const char *fn = "attn_pretrained_set_precision";
    ATTN_CHECK_NOT_NULL(fn, m);
    if (!attn_precision_name(p))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: precision = %d is neither fp32 nor bf16", fn, (int)p);
    if (p != ATTN_PRECISION_FP32 && !m->prec)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: the \"%s\" family runs only fp32", fn, m->family);
    if (!m->prec) return ATTN_OK;
    /* bf16 keeps a store of packed weights (filled by the first products), fp32 frees it */
    if (p == ATTN_PRECISION_BF16 && !m->prec->wb && !(m->prec->wb = attn_nn_bf16_weights_create()))
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: no memory for the bf16 weights", fn);
    if (p != ATTN_PRECISION_BF16) {
        attn_nn_bf16_weights_free(m->prec->wb);
        m->prec->wb = NULL;
    }
    m->prec->p = p;
    if (m->precision_changed) m->precision_changed(m->impl, p);
    return ATTN_OK;
}

attn_precision attn_pretrained_precision(const attn_pretrained *m) {
    return m && m->prec ? m->prec->p : ATTN_PRECISION_FP32;
}

/* The family's precision and packed weights installed on the calling thread for one call. */
typedef struct precision_scope {
    attn_precision prev;
    attn_nn_bf16_weights *prev_wb;
} precision_scope;

static precision_scope enter(const attn_pretrained *m) {
    precision_scope s = {ATTN_PRECISION_FP32, NULL};
    if (!m->prec) return s;
    s.prev = attn_nn_precision_set(m->prec->p);
    s.prev_wb = attn_nn_bf16_weights_use(m->prec->p == ATTN_PRECISION_BF16 ? m->prec->wb : NULL);
    return s;
}

static void leave(const attn_pretrained *m, precision_scope s) {
    if (!m->prec) return;
    attn_nn_bf16_weights_use(s.prev_wb);
    attn_nn_precision_set(s.prev);
}

attn_status attn_hf_call_hidden(attn_pretrained *m, const int32_t *ids, const int32_t *types, const int64_t *lengths,
                                int64_t B, int64_t n, float *out) {
    const precision_scope s = enter(m);
    const attn_status st = m->hidden_states(m->impl, ids, types, lengths, B, n, out);
    leave(m, s);
    return st;
}

attn_status attn_hf_call_logits(attn_pretrained *m, const int32_t *ids, const int64_t *lengths, int64_t B, int64_t n,
                                float *out) {
    const precision_scope s = enter(m);
    const attn_status st = m->logits(m->impl, ids, lengths, B, n, out);
    leave(m, s);
    return st;
}

attn_status attn_hf_call_step(attn_pretrained *m, int reset, const int32_t *ids, int64_t n, float *last) {
    const precision_scope s = enter(m);
    const attn_status st = m->step(m->impl, reset, ids, n, last);
    leave(m, s);
    return st;
}

attn_status attn_hf_call_image(attn_pretrained *m, const float *pixels, int64_t batch, float *hidden, float *logits,
                               attn_capture *cap) {
    const precision_scope s = enter(m);
    const attn_status st = m->image(m->impl, pixels, batch, hidden, logits, cap);
    leave(m, s);
    return st;
}

double attn_pretrained_flops(const attn_pretrained *m, int64_t batch, int64_t seq, int64_t past) {
    if (!m || !m->flops || batch < 0 || seq < 0 || past < 0) return 0;
    return m->flops(m->impl, batch, seq, past);
}
