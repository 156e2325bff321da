/* attn_pretrained's Llama family (model_type llama, mistral, qwen2) on folders written here
 * (config.json and safetensors made with attn's writer; no Python): for each family, logits of a
 * right-padded batch equal to each row's alone (bitwise: the batch runs packed), greedy generation equal to the argmax of the full
 * forward's logits (the key/value cache, its chunks and the sliding window against the whole
 * sequence), bitwise the same logits on 1 and 3 threads; eos_token_id as a list (every id listed,
 * generation stopping at any); BF16 weights; hostile folders, each refused with a message naming the
 * key or tensor; every allocation of open, logits and generate failed in turn. (The numerical parity
 * with transformers: tests/hf/llama_parity.py.) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attn/pretrained.h"
#include "attn/safetensors.h"
#include "core/alloc.h"
#include "test_util.h"

/* vocab, hidden, layers, query heads, key/value heads, head_dim, intermediate, positions */
enum { V = 13, H = 8, NL = 2, HQ = 2, HKV = 1, HD = 4, I = 12, P = 96, HOLD = 64 };

static char root[256];

typedef struct kv {
    const char *key, *value; /* value: raw JSON; NULL drops the key */
} kv;

static const kv BASE[] = {
    {"model_type", "\"llama\""},
    {"vocab_size", "13"},
    {"hidden_size", "8"},
    {"num_hidden_layers", "2"},
    {"num_attention_heads", "2"},
    {"num_key_value_heads", "1"},
    {"intermediate_size", "12"},
    {"max_position_embeddings", "96"},
    {"rms_norm_eps", "1e-5"},
    {"hidden_act", "\"silu\""},
    {"tie_word_embeddings", "false"},
    {"rope_parameters", "{\"rope_type\": \"llama3\", \"rope_theta\": 10000.0, \"factor\": 4.0, \"low_freq_factor\": "
                        "1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16}"},
    {"eos_token_id", "[11, 12]"},
};
#define N_BASE (sizeof BASE / sizeof BASE[0])

/* BASE with up to three keys replaced, dropped (value NULL) or added. */
static void write_config(const char *dir, const kv *edits, int n_edits) {
    char text[4096] = "{";
    int used[3] = {0, 0, 0};
    for (size_t i = 0; i < N_BASE + (size_t)n_edits; i++) {
        const char *k, *v;
        if (i < N_BASE) {
            k = BASE[i].key;
            v = BASE[i].value;
            for (int e = 0; e < n_edits; e++)
                if (strcmp(edits[e].key, k) == 0) {
                    v = edits[e].value;
                    used[e] = 1;
                }
        } else {
            const int e = (int)(i - N_BASE);
            if (used[e]) continue;
            k = edits[e].key;
            v = edits[e].value;
        }
        if (!v) continue;
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len, "%s\"%s\": %s", len > 1 ? ", " : "", k, v);
    }
    strcat(text, "}");
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

typedef struct weights {
    attn_safetensors_writer *w;
    void *data[HOLD];
    int n;
    int bf16; /* write the projections as BF16 */
} weights;

static void add(weights *ws, const char *name, int rank, int64_t d0, int64_t d1) {
    const size_t count = (size_t)d0 * (size_t)(rank == 2 ? d1 : 1);
    float *x = xmalloc(count * sizeof(float));
    test_rng r = {0x9e3779b97f4a7c15ull ^ (uint64_t)(ws->n * 7919 + 1)};
    const int norm = strstr(name, "norm") != NULL;
    for (size_t i = 0; i < count; i++) x[i] = (float)((norm ? 1 : 0) + 0.5 * rng_normal(&r));
    const int64_t shape[2] = {d0, d1};
    if (ws->bf16 && rank == 2) { /* the upper halves of the floats: BF16 by truncation */
        uint16_t *b = xmalloc(count * sizeof *b);
        for (size_t i = 0; i < count; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            b[i] = (uint16_t)(u >> 16);
        }
        free(x);
        ws->data[ws->n++] = b;
        CHECK_OK(attn_safetensors_writer_add(ws->w, name, ATTN_DTYPE_BF16, rank, shape, b));
        return;
    }
    ws->data[ws->n++] = x;
    CHECK_OK(attn_safetensors_writer_add(ws->w, name, ATTN_DTYPE_F32, rank, shape, x));
}

enum { W_QKV_BIAS = 1, W_NO_HEAD = 2, W_BF16 = 4 };

/* A folder: config.json (BASE edited) and the weights of the family's modules; skip left out,
 * extra (nullable) an additional tensor. */
static const char *folder(const char *name, const kv *edits, int n_edits, int flags, const char *skip,
                          const char *extra) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    mkdir(dir, 0755);
    write_config(dir, edits, n_edits);
    weights ws = {0};
    ws.bf16 = (flags & W_BF16) != 0;
    CHECK_OK(attn_safetensors_writer_create(&ws.w));
    static const struct {
        const char *name;
        int64_t d0, d1;
        int bias;
    } t[] = {
        {"input_layernorm.weight", H, 0, 0},         {"self_attn.q_proj.weight", HQ * HD, H, 0},
        {"self_attn.k_proj.weight", HKV * HD, H, 0}, {"self_attn.v_proj.weight", HKV * HD, H, 0},
        {"self_attn.o_proj.weight", H, HQ * HD, 0},  {"post_attention_layernorm.weight", H, 0, 0},
        {"mlp.gate_proj.weight", I, H, 0},           {"mlp.up_proj.weight", I, H, 0},
        {"mlp.down_proj.weight", H, I, 0},           {"self_attn.q_proj.bias", HQ * HD, 0, 1},
        {"self_attn.k_proj.bias", HKV * HD, 0, 1},   {"self_attn.v_proj.bias", HKV * HD, 0, 1},
    };
    char full[160];
    add(&ws, "model.embed_tokens.weight", 2, V, H);
    for (int l = 0; l < NL; l++)
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
            if (t[k].bias && !(flags & W_QKV_BIAS)) continue;
            snprintf(full, sizeof full, "model.layers.%d.%s", l, t[k].name);
            if (!skip || strcmp(skip, full) != 0) add(&ws, full, t[k].d1 ? 2 : 1, t[k].d0, t[k].d1);
        }
    add(&ws, "model.norm.weight", 1, H, 0);
    if (!(flags & W_NO_HEAD)) add(&ws, "lm_head.weight", 2, V, H);
    if (extra) add(&ws, extra, 1, 3, 0);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(attn_safetensors_writer_write_file(ws.w, path));
    attn_safetensors_writer_free(ws.w);
    for (int i = 0; i < ws.n; i++) free(ws.data[i]);
    return dir;
}

static int32_t argmax(const float *x, int64_t n) {
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int32_t)i;
    return b;
}

typedef struct collected {
    int32_t ids[P];
    size_t n;
} collected;

static int collect(int32_t id, void *user) {
    collected *c = user;
    if (c->n < P) c->ids[c->n++] = id;
    return 0;
}

/* Greedy generation after a prompt of n ids = the argmax of the full forward at each step. */
static void check_greedy(const char *what, attn_pretrained *m, int64_t n, int64_t new_tokens) {
    int32_t seq[P];
    for (int64_t t = 0; t < n; t++) seq[t] = (int32_t)((t * 7 + 3) % V);
    attn_generate_options o = attn_generate_options_default();
    o.max_new_tokens = new_tokens;
    collected c = {0};
    size_t produced = 0;
    CHECK_OK(attn_pretrained_generate(m, seq, (size_t)n, &o, collect, &c, &produced));
    CHECK(produced == c.n && c.n == (size_t)new_tokens, "%s: produced %zu", what, produced);
    for (size_t i = 0; i < c.n; i++) seq[n + (int64_t)i] = c.ids[i];
    int64_t full = n + (int64_t)c.n - 1;
    float *all = xmalloc((size_t)full * V * sizeof(float));
    CHECK_OK(attn_pretrained_logits(m, seq, &full, 1, full, all));
    for (int64_t t = n - 1; t < full; t++)
        CHECK(argmax(all + t * V, V) == seq[t + 1], "%s: greedy token %lld differs from the full forward", what,
              (long long)t);
    free(all);
}

/* A padded batch: row 1 (length 5) as itself alone; padded rows 0; 1 and 3 threads alike. */
static void check_batch(const char *what, attn_pretrained *m) {
    int32_t ids[2 * 9] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 4, 12, 3, 0, 0, 0, 0};
    int64_t len[2] = {9, 5}, one = 5;
    float out[2 * 9 * V], alone[5 * V], again[2 * 9 * V];
    CHECK_OK(attn_pretrained_logits(m, ids, len, 2, 9, out));
    CHECK_OK(attn_pretrained_logits(m, ids + 9, &one, 1, 5, alone));
    CHECK(rel_err_ff(out + 9 * V, alone, 5 * V) < 1e-6, "%s: padding changes a row's logits", what);
    int zero = 1;
    for (int i = 14 * V; i < 18 * V; i++) zero &= out[i] == 0;
    CHECK(zero, "%s: padded logits are 0", what);
    attn_set_num_threads(1);
    CHECK_OK(attn_pretrained_logits(m, ids, len, 2, 9, out));
    attn_set_num_threads(3);
    CHECK_OK(attn_pretrained_logits(m, ids, len, 2, 9, again));
    attn_set_num_threads(0);
    CHECK(memcmp(out, again, sizeof out) == 0, "%s: logits differ between 1 and 3 threads", what);
}

/* A right-padded batch runs packed (only real tokens through the layers): each row's logits are
 * bitwise those of the row alone, for lengths 1, about the flash block (64) and the maximum (P), and
 * random ones (ATTN_TEST_SEED); padded positions 0 (out starts as NaN: every value is written). */
static void check_packed(const char *what, attn_pretrained *m) {
    enum { B = 9, N = P };
    test_rng r = rng_seeded(0x5eed11a3ull);
    int64_t len[B] = {1, 63, 64, 65, P, 0, 0, 0, 0};
    for (int b = 5; b < B; b++) len[b] = 1 + (int64_t)(rng_next(&r) % P);
    for (int b = B - 1; b > 0; b--) { /* a seeded order of the rows */
        const int j = (int)(rng_next(&r) % (uint64_t)(b + 1));
        const int64_t t = len[b];
        len[b] = len[j];
        len[j] = t;
    }
    int32_t *ids = xmalloc(B * N * sizeof(int32_t));
    for (int i = 0; i < B * N; i++) ids[i] = (int32_t)(rng_next(&r) % V);
    for (int b = 0; b < B; b++)
        for (int64_t t = len[b]; t < N; t++) ids[b * N + t] = -1; /* padding: never read */
    float *out = xmalloc((size_t)B * N * V * sizeof(float)), *alone = xmalloc((size_t)N * V * sizeof(float));
    for (size_t i = 0; i < (size_t)B * N * V; i++) out[i] = NAN;
    CHECK_OK(attn_pretrained_logits(m, ids, len, B, N, out));
    for (int b = 0; b < B; b++) {
        CHECK_OK(attn_pretrained_logits(m, ids + b * N, &len[b], 1, len[b], alone));
        const float *row = out + (size_t)b * N * V;
        CHECK(memcmp(row, alone, (size_t)len[b] * V * sizeof(float)) == 0 && rel_err_ff(row, alone, len[b] * V) == 0,
              "%s: packed row %d (length %lld) differs from the row alone", what, b, (long long)len[b]);
        int zero = 1;
        for (int64_t i = len[b] * V; i < N * V; i++) zero &= row[i] == 0;
        CHECK(zero, "%s: row %d's padded logits are 0", what, b);
    }
    free(ids);
    free(out);
    free(alone);
}

/* bf16 (attn_pretrained_set_precision): a padded batch's rows and the packed rows still bitwise
 * each row alone (bf16 varlen attention, the GEMMs' per-element chains), near fp32's logits
 * (PyTorch's bf16 error against float64: tests/hf/bf16_decoder_parity.py), generation through the
 * bf16 steps after two prompt chunks. Under ASan: the bf16 copies' and workspaces' sizes. */
static void check_bf16(const char *name, attn_pretrained *m) {
    enum { N = 70 };
    int32_t ids[N];
    for (int t = 0; t < N; t++) ids[t] = (int32_t)((t * 7 + 3) % V);
    int64_t n = N;
    float *f32 = xmalloc((size_t)N * V * sizeof(float)), *b16 = xmalloc((size_t)N * V * sizeof(float));
    CHECK_OK(attn_pretrained_logits(m, ids, &n, 1, N, f32));
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_BF16));
    char what[64];
    snprintf(what, sizeof what, "%s bf16", name);
    CHECK_OK(attn_pretrained_logits(m, ids, &n, 1, N, b16));
    const double e = rel_err_ff(b16, f32, N * V);
    CHECK(e > 0 && e < 5e-2, "%s: logits against fp32's: rel err %.3g", what, e);
    check_batch(what, m);
    check_packed(what, m);
    attn_generate_options o = attn_generate_options_default();
    o.max_new_tokens = 5;
    collected c = {0};
    CHECK_OK(attn_pretrained_generate(m, ids, N, &o, collect, &c, NULL));
    CHECK(c.n == 5, "%s: generation produced %zu", what, c.n);
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_FP32));
    CHECK_OK(attn_pretrained_logits(m, ids, &n, 1, N, b16));
    CHECK(memcmp(b16, f32, (size_t)N * V * sizeof(float)) == 0, "%s: fp32 after bf16 differs", name);
    free(f32);
    free(b16);
}

static void test_families(void) {
    static const kv mistral[] = {{"model_type", "\"mistral\""}, {"sliding_window", "3"}};
    static const kv qwen2[] = {{"model_type", "\"qwen2\""},
                               {"use_sliding_window", "true"},
                               {"layer_types", "[\"full_attention\", \"sliding_attention\"]"}};
    static const kv tied[] = {{"tie_word_embeddings", "true"}, {"rope_parameters", "null"}, {"eos_token_id", "12"}};
    static const struct {
        const char *name, *family;
        const kv *edits;
        int n_edits, flags;
    } cases[] = {
        {"llama", "llama", NULL, 0, 0},           {"mistral", "mistral", mistral, 2, 0},
        {"qwen2", "qwen2", qwen2, 3, W_QKV_BIAS}, {"tied", "llama", tied, 3, W_NO_HEAD},
        {"bf16", "llama", NULL, 0, W_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_pretrained *m = NULL;
        const char *d = folder(cases[i].name, cases[i].edits, cases[i].n_edits, cases[i].flags, NULL, NULL);
        CHECK_OK(attn_pretrained_open(d, &m));
        if (!m) continue;
        CHECK(strcmp(attn_pretrained_family(m), cases[i].family) == 0 && attn_pretrained_vocab_size(m) == V &&
                  attn_pretrained_hidden_size(m) == H,
              "%s: family %s", cases[i].name, attn_pretrained_family(m));
        check_batch(cases[i].name, m);
        check_packed(cases[i].name, m);
        check_greedy(cases[i].name, m, 6, 10);
        check_greedy(cases[i].name, m, 70, 20); /* two prompt chunks, then single steps */
        check_bf16(cases[i].name, m);
        attn_pretrained_free(m);
    }
}

/* eos_token_id [11, 12]: both listed, the first is attn_pretrained_eos_id; a list naming a token
 * greedy generation produces stops generation there. */
static void test_eos_list(void) {
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(folder("eos", NULL, 0, 0, NULL, NULL), &m));
    if (!m) return;
    int32_t ids[4] = {0, 0, 0, 0};
    CHECK(attn_pretrained_eos_ids(m, ids, 4) == 2 && ids[0] == 11 && ids[1] == 12 && attn_pretrained_eos_id(m) == 11,
          "eos ids %d %d", ids[0], ids[1]);
    int32_t prompt[3] = {1, 2, 3};
    attn_generate_options o = attn_generate_options_default();
    o.max_new_tokens = 12;
    collected free_run = {0};
    CHECK_OK(attn_pretrained_generate(m, prompt, 3, &o, collect, &free_run, NULL));
    attn_pretrained_free(m);
    m = NULL;
    /* a first id never produced, then the fourth token produced */
    int32_t first = 0;
    for (int32_t v = 0; v < V; v++) {
        int seen = 0;
        for (size_t i = 0; i < free_run.n; i++) seen |= free_run.ids[i] == v;
        if (!seen) first = v;
    }
    const int32_t stop = free_run.ids[3];
    size_t cut = 0;
    while (free_run.ids[cut] != stop) cut++;
    char list[64];
    snprintf(list, sizeof list, "[%d, %d]", (int)first, (int)stop);
    const kv edit[] = {{"eos_token_id", list}};
    CHECK_OK(attn_pretrained_open(folder("eos2", edit, 1, 0, NULL, NULL), &m));
    if (!m) return;
    o.eos_id = attn_pretrained_eos_id(m);
    collected c = {0};
    CHECK_OK(attn_pretrained_generate(m, prompt, 3, &o, collect, &c, NULL));
    CHECK(o.eos_id == first && c.n == cut + 1 && memcmp(c.ids, free_run.ids, c.n * sizeof(int32_t)) == 0,
          "eos list [%d, %d]: %zu tokens, want %zu", (int)first, (int)stop, c.n, cut + 1);
    o.eos_id = -1; /* no eos: all 12 */
    c.n = 0;
    CHECK_OK(attn_pretrained_generate(m, prompt, 3, &o, collect, &c, NULL));
    CHECK(c.n == 12, "eos_id -1 stops (%zu tokens)", c.n);
    attn_pretrained_free(m);
}

typedef struct hostile {
    const char *name;
    kv edit[2];
    int n_edits, flags;
    const char *skip, *extra;
    attn_status want;
    const char *word;
} hostile;

#define E1(k, v) {{k, v}, {NULL, NULL}}, 1
static const hostile HOSTILE[] = {
    {"vocab", E1("vocab_size", "1099511627776"), 0, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "vocab_size"},
    {"layers", E1("num_hidden_layers", "100000"), 0, NULL, NULL, ATTN_ERR_SHAPE, "num_hidden_layers"},
    {"heads", E1("num_attention_heads", "3"), 0, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "num_attention_heads"},
    {"kvheads", E1("num_key_value_heads", "3"), 0, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "num_key_value_heads"},
    {"gqa",
     {{"num_attention_heads", "4"}, {"num_key_value_heads", "3"}},
     2,
     0,
     NULL,
     NULL,
     ATTN_ERR_INVALID_ARGUMENT,
     "'num_key_value_heads' (3)"},
    {"type", E1("hidden_size", "\"8\""), 0, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "hidden_size"},
    {"act", E1("hidden_act", "\"gelu\""), 0, NULL, NULL, ATTN_ERR_UNSUPPORTED, "hidden_act"},
    {"eps", E1("rms_norm_eps", "0"), 0, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "rms_norm_eps"},
    {"headdim", E1("head_dim", "3"), 0, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "head_dim"},
    {"dynamic",
     {{"rope_parameters", NULL}, {"rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2.0}"}},
     2,
     0,
     NULL,
     NULL,
     ATTN_ERR_UNSUPPORTED,
     "rope_scaling.type' is \"dynamic\""},
    {"yarn", E1("rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 2.0}"), 0, NULL, NULL, ATTN_ERR_UNSUPPORTED,
     "rope_parameters.rope_type' is \"yarn\""},
    {"llama3", E1("rope_parameters", "{\"rope_type\": \"llama3\", \"factor\": 8.0}"), 0, NULL, NULL,
     ATTN_ERR_INVALID_ARGUMENT, "original_max_position_embeddings"},
    {"factor", E1("rope_parameters", "{\"rope_type\": \"linear\", \"factor\": \"2\"}"), 0, NULL, NULL,
     ATTN_ERR_INVALID_ARGUMENT, "rope_parameters.factor"},
    {"ropeobj", E1("rope_parameters", "[1]"), 0, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "rope_parameters"},
    {"partial", E1("rope_parameters", "{\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}"), 0, NULL, NULL,
     ATTN_ERR_UNSUPPORTED, "partial_rotary_factor"},
    {"eostype", E1("eos_token_id", "[1, \"a\"]"), 0, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "eos_token_id"},
    {"eoslong", E1("eos_token_id", "[1,2,3,4,5,6,7,8,9,10,11,12,1,2,3,4,5]"), 0, NULL, NULL, ATTN_ERR_UNSUPPORTED,
     "eos_token_id"},
    {"inter", E1("intermediate_size", "13"), 0, NULL, NULL, ATTN_ERR_SHAPE, "intermediate_size"},
    {"window",
     {{"model_type", "\"mistral\""}, {"sliding_window", "-1"}},
     2,
     0,
     NULL,
     NULL,
     ATTN_ERR_INVALID_ARGUMENT,
     "sliding_window"},
    {"missing",
     {{NULL, NULL}, {NULL, NULL}},
     0,
     0,
     "model.layers.1.mlp.up_proj.weight",
     NULL,
     ATTN_ERR_NOT_FOUND,
     "missing: model.layers.1.mlp.up_proj.weight"},
    {"unexpected",
     {{NULL, NULL}, {NULL, NULL}},
     0,
     0,
     NULL,
     "model.layers.0.self_attn.o_proj.bias",
     ATTN_ERR_NOT_FOUND,
     "unexpected: model.layers.0.self_attn.o_proj.bias"},
    {"nohead", {{NULL, NULL}, {NULL, NULL}}, 0, W_NO_HEAD, NULL, NULL, ATTN_ERR_NOT_FOUND, "missing: lm_head.weight"},
    {"qwenbias", E1("model_type", "\"qwen2\""), 0, NULL, NULL, ATTN_ERR_NOT_FOUND, "self_attn.q_proj.bias"},
};

static void test_hostile(void) {
    for (size_t i = 0; i < sizeof HOSTILE / sizeof HOSTILE[0]; i++) {
        const hostile *h = &HOSTILE[i];
        attn_pretrained *m = NULL;
        attn_status st = attn_pretrained_open(folder(h->name, h->edit, h->n_edits, h->flags, h->skip, h->extra), &m);
        CHECK(st == h->want, "%s: status %s, want %s: %s", h->name, attn_status_str(st), attn_status_str(h->want),
              attn_last_error());
        CHECK(m == NULL, "%s: a model came back", h->name);
        attn_pretrained_free(m);
        CHECK(strstr(attn_last_error(), h->word) != NULL && strstr(attn_last_error(), h->name) != NULL,
              "%s: message lacks '%s' or the folder: %s", h->name, h->word, attn_last_error());
    }
    /* Qwen2's layer_types must list every layer */
    const kv bad[] = {{"model_type", "\"qwen2\""}, {"use_sliding_window", "true"}, {"layer_types", "[\"x\"]"}};
    attn_pretrained *m = NULL;
    CHECK_STATUS(attn_pretrained_open(folder("qwenlt", bad, 3, W_QKV_BIAS, NULL, NULL), &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "layer_types") != NULL, "message: %s", attn_last_error());
    attn_pretrained_free(m);
}

/* Every allocation of open, logits and generate failed in turn: ATTN_ERR_OUT_OF_MEMORY each time,
 * nothing leaked (the ASan build), then the undisturbed results. */
static attn_status run_all(const char *dir, attn_pretrained **m, float *logits, collected *c) {
    int32_t ids[4] = {1, 2, 3, 4};
    int64_t len = 4;
    attn_generate_options o = attn_generate_options_default();
    o.max_new_tokens = 3;
    memset(c, 0, sizeof *c);
    attn_status st = attn_pretrained_open(dir, m);
    if (!st) st = attn_pretrained_logits(*m, ids, &len, 1, 4, logits);
    int64_t lens[2] = {4, 2}; /* a padded batch: the packed path */
    int32_t pids[8] = {1, 2, 3, 4, 5, 6, 0, 0};
    if (!st) st = attn_pretrained_logits(*m, pids, lens, 2, 4, logits + 4 * V);
    if (!st) st = attn_pretrained_generate(*m, ids, 4, &o, collect, c, NULL);
    return st;
}

static void test_alloc_fail(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/qwen2", root);
    float want[12 * V], got[12 * V];
    collected cw, cg;
    attn_pretrained *m = NULL;
    CHECK_OK(run_all(dir, &m, want, &cw));
    attn_pretrained_free(m);
    long k = 1;
    for (; k < 100000; k++) {
        m = NULL;
        attn__alloc_fail_after(k);
        attn_status st = run_all(dir, &m, got, &cg);
        int injected = attn__alloc_injected();
        attn__alloc_fail_after(0);
        attn_pretrained_free(m);
        if (!injected) {
            CHECK(st == ATTN_OK && memcmp(got, want, sizeof want) == 0 && cg.n == cw.n &&
                      memcmp(cg.ids, cw.ids, cw.n * sizeof(int32_t)) == 0,
                  "after %ld failures: %s", k - 1, attn_last_error());
            break;
        }
        CHECK(st == ATTN_ERR_OUT_OF_MEMORY, "allocation %ld failed: status %s: %s", k, attn_status_str(st),
              attn_last_error());
    }
    CHECK(k > 10 && k < 100000, "%ld allocations swept", k);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/attn_test_pretrained_llama.XXXXXX");
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    test_families();
    test_eos_list();
    test_hostile();
    test_alloc_fail();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (test_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_summary("test_pretrained_llama");
}
