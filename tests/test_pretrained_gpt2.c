/* attn_pretrained's GPT-2 family on folders written here (config.json and safetensors made with
 * attn's writer; no Python): logits of a right-padded batch equal to each row's alone, greedy
 * generation equal to the argmax of the full forward's logits (the KV cache against the whole
 * sequence), seeded sampling reproducible, the calls GPT-2 lacks refused; and hostile folders and
 * arguments, each refused with a message naming the key; every allocation failed in turn. (The
 * numerical parity with transformers: tests/hf/gpt2_parity.py.) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attn/pretrained.h"
#include "attn/safetensors.h"
#include "core/alloc.h"
#include "test_util.h"

enum { V = 11, H = 8, NL = 2, P = 16, HOLD = 40 };

static char root[256];

typedef struct kv {
    const char *key, *value; /* value: raw JSON; NULL drops the key */
} kv;

static const kv BASE[] = {
    {"model_type", "\"gpt2\""},
    {"vocab_size", "11"},
    {"n_embd", "8"},
    {"n_layer", "2"},
    {"n_head", "2"},
    {"n_positions", "16"},
    {"n_inner", "null"},
    {"layer_norm_epsilon", "1e-5"},
    {"activation_function", "\"gelu_new\""},
    {"eos_token_id", "10"},
};
#define N_BASE (sizeof BASE / sizeof BASE[0])

static void write_config(const char *dir, const char *key, const char *value) {
    char text[2048] = "{";
    int added = 0;
    for (size_t i = 0; i <= N_BASE; i++) {
        const char *k = i < N_BASE ? BASE[i].key : key, *v = i < N_BASE ? BASE[i].value : value;
        if (i == N_BASE && (added || !key || !value)) break;
        if (key && strcmp(k, key) == 0) {
            v = value;
            added = 1;
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
    float *data[HOLD];
    int n;
} weights;

/* The tensor whose first value folder() makes NaN (NULL: none). */
static const char *nan_tensor;

/* Values from the stream `seed` (+ shift). */
static void add_seeded(weights *ws, const char *name, int rank, int64_t d0, int64_t d1, int seed, float shift) {
    size_t count = (size_t)d0 * (size_t)(rank == 2 ? d1 : 1);
    float *x = xmalloc(count * sizeof(float));
    test_rng r = {0x9e3779b97f4a7c15ull ^ (uint64_t)(seed * 7919 + 1)};
    int norm_w = strstr(name, "ln_") && strstr(name, ".weight");
    for (size_t i = 0; i < count; i++) x[i] = (float)((norm_w ? 1 : 0) + 0.5 * rng_normal(&r)) + shift;
    if (nan_tensor && !strcmp(name, nan_tensor)) x[0] = NAN;
    ws->data[ws->n++] = x;
    int64_t shape[2] = {d0, d1};
    CHECK_OK(attn_safetensors_writer_add(ws->w, name, ATTN_DTYPE_F32, rank, shape, x));
}

static void add(weights *ws, const char *name, int rank, int64_t d0, int64_t d1) {
    add_seeded(ws, name, rank, d0, d1, ws->n, 0);
}

/* A GPT2LMHeadModel's tensors (under "transformer."), skip left out; lm_head: 0 none, 1 = wte,
 * 2 differing from wte. */
static const char *folder(const char *name, const char *key, const char *value, const char *skip, int lm_head) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    mkdir(dir, 0755);
    write_config(dir, key, value);
    weights ws = {0};
    CHECK_OK(attn_safetensors_writer_create(&ws.w));
    static const struct {
        const char *name;
        int64_t d0, d1;
    } t[] = {
        {"ln_1.weight", H, 0},
        {"ln_1.bias", H, 0},
        {"attn.c_attn.weight", H, 3 * H},
        {"attn.c_attn.bias", 3 * H, 0},
        {"attn.c_proj.weight", H, H},
        {"attn.c_proj.bias", H, 0},
        {"ln_2.weight", H, 0},
        {"ln_2.bias", H, 0},
        {"mlp.c_fc.weight", H, 4 * H},
        {"mlp.c_fc.bias", 4 * H, 0},
        {"mlp.c_proj.weight", 4 * H, H},
        {"mlp.c_proj.bias", H, 0},
    };
    char full[160];
    for (int i = 0; i < 2; i++) {
        snprintf(full, sizeof full, "transformer.%s", i ? "wpe.weight" : "wte.weight");
        add(&ws, full, 2, i ? P : V, H);
    }
    add(&ws, "transformer.ln_f.weight", 1, H, 0);
    add(&ws, "transformer.ln_f.bias", 1, H, 0);
    for (int l = 0; l < NL; l++)
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
            snprintf(full, sizeof full, "transformer.h.%d.%s", l, t[k].name);
            if (!skip || strcmp(skip, full) != 0) add(&ws, full, t[k].d1 ? 2 : 1, t[k].d0, t[k].d1);
        }
    if (lm_head) add_seeded(&ws, "lm_head.weight", 2, V, H, 0, lm_head == 2 ? 0.5f : 0); /* wte's stream */
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

/* bf16 (attn_pretrained_set_precision): the packed batch's rows still bitwise each row alone,
 * near fp32's logits f32 [3 x 6 x V] (PyTorch's bf16 error against float64 is measured by
 * tests/hf/bf16_decoder_parity.py), generation through the bf16 steps, and back to fp32
 * bitwise. Under ASan: the bf16 workspaces' sizes. */
static void check_bf16(attn_pretrained *m, const int32_t *ids, const int64_t *len, const float *f32) {
    float out[3 * 6 * V], alone[6 * V];
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_BF16));
    CHECK(attn_pretrained_precision(m) == ATTN_PRECISION_BF16, "precision reads back bf16");
    CHECK_OK(attn_pretrained_logits(m, ids, len, 3, 6, out));
    for (int r = 0; r < 3; r++) {
        CHECK_OK(attn_pretrained_logits(m, ids + 6 * r, &len[r], 1, len[r], alone));
        CHECK(memcmp(out + 6 * r * V, alone, sizeof(float) * (size_t)(len[r] * V)) == 0,
              "bf16: padding changes row %d's logits", r);
    }
    const double e = rel_err_ff(out, f32, 3 * 6 * V);
    CHECK(e > 0 && e < 5e-2, "bf16 logits against fp32's: rel err %.3g", e);
    attn_generate_options o = attn_generate_options_default();
    o.max_new_tokens = 8;
    collected c = {0};
    CHECK_OK(attn_pretrained_generate(m, ids, 4, &o, collect, &c, NULL));
    CHECK(c.n == 8, "bf16 generation produced %zu", c.n);
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_FP32));
    CHECK_OK(attn_pretrained_logits(m, ids, len, 3, 6, out));
    CHECK(memcmp(out, f32, sizeof out) == 0, "fp32 after bf16 differs from fp32 before");
}

static void test_valid(void) {
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(folder("ok", NULL, NULL, NULL, 1), &m));
    if (!m) return;
    CHECK(strcmp(attn_pretrained_family(m), "gpt2") == 0 && attn_pretrained_vocab_size(m) == V &&
              attn_pretrained_eos_id(m) == 10,
          "sizes");
    /* a right-padded batch (run packed: attn_gpt's cu_seqlens): each row bitwise itself alone,
     * the padding's logits 0 */
    int32_t ids[3 * 6] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0, 4, 0, 0, 0, 0, 0};
    int64_t len[3] = {6, 3, 1};
    float out[3 * 6 * V], alone[6 * V];
    CHECK_OK(attn_pretrained_logits(m, ids, len, 3, 6, out));
    for (int r = 0; r < 3; r++) {
        CHECK_OK(attn_pretrained_logits(m, ids + 6 * r, &len[r], 1, len[r], alone));
        CHECK(memcmp(out + 6 * r * V, alone, sizeof(float) * (size_t)(len[r] * V)) == 0,
              "padding changes row %d's logits (length %lld)", r, (long long)len[r]);
        int zero = 1;
        for (int64_t i = (6 * r + len[r]) * V; i < (6 * r + 6) * V; i++) zero &= out[i] == 0;
        CHECK(zero, "row %d's padded logits are 0", r);
    }
    /* greedy = the argmax of the full forward, token by token */
    attn_generate_options o = attn_generate_options_default();
    o.max_new_tokens = 8;
    collected c = {0};
    size_t produced = 0;
    CHECK_OK(attn_pretrained_generate(m, ids, 4, &o, collect, &c, &produced));
    CHECK(produced == c.n && c.n == 8, "produced %zu", produced);
    int32_t seq[P];
    memcpy(seq, ids, 4 * sizeof *seq);
    for (size_t i = 0; i < c.n; i++) seq[4 + i] = c.ids[i];
    int64_t full = 4 + (int64_t)c.n - 1;
    float *all = xmalloc((size_t)full * V * sizeof(float));
    CHECK_OK(attn_pretrained_logits(m, seq, &full, 1, full, all));
    for (int64_t t = 3; t < full; t++)
        CHECK(argmax(all + t * V, V) == seq[t + 1], "greedy token %lld differs from the full forward", (long long)t);
    free(all);
    /* sampling: the same seed twice, top_k 1 = greedy */
    o.temperature = 1.3;
    o.top_p = 0.9;
    o.seed = 5;
    collected a = {0}, b = {0}, g = {0};
    CHECK_OK(attn_pretrained_generate(m, ids, 4, &o, collect, &a, NULL));
    CHECK_OK(attn_pretrained_generate(m, ids, 4, &o, collect, &b, NULL));
    CHECK(a.n == b.n && memcmp(a.ids, b.ids, a.n * sizeof(int32_t)) == 0, "a seed gives different tokens");
    o.top_k = 1;
    CHECK_OK(attn_pretrained_generate(m, ids, 4, &o, collect, &g, NULL));
    CHECK(g.n == c.n && memcmp(g.ids, c.ids, c.n * sizeof(int32_t)) == 0, "top_k 1 is not greedy");
    /* arguments */
    o = attn_generate_options_default();
    o.max_new_tokens = P - 3;
    CHECK_STATUS(attn_pretrained_generate(m, ids, 4, &o, NULL, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "n_positions") != NULL, "message: %s", attn_last_error());
    o.max_new_tokens = 2;
    o.top_p = 0;
    CHECK_STATUS(attn_pretrained_generate(m, ids, 4, &o, NULL, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "top_p") != NULL, "message: %s", attn_last_error());
    float emb[H];
    CHECK_STATUS(attn_pretrained_embed(m, ids, &len[1], 1, 3, emb), ATTN_ERR_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "gpt2") != NULL, "message: %s", attn_last_error());
    check_bf16(m, ids, len, out);
    attn_pretrained_free(m);
}

typedef struct hostile {
    const char *name, *key, *value, *skip;
    int lm_head;
    attn_status want;
    const char *word;
} hostile;

static const hostile HOSTILE[] = {
    {"act", "activation_function", "\"relu\"", NULL, 0, ATTN_ERR_UNSUPPORTED, "activation_function"},
    {"layers", "n_layer", "100000", NULL, 0, ATTN_ERR_SHAPE, "n_layer"},
    {"inverse", "scale_attn_by_inverse_layer_idx", "true", NULL, 0, ATTN_ERR_UNSUPPORTED,
     "scale_attn_by_inverse_layer_idx"},
    {"upcast", "reorder_and_upcast_attn", "true", NULL, 0, ATTN_ERR_UNSUPPORTED, "reorder_and_upcast_attn"},
    {"cross", "add_cross_attention", "true", NULL, 0, ATTN_ERR_UNSUPPORTED, "add_cross_attention"},
    {"untied", "tie_word_embeddings", "false", NULL, 0, ATTN_ERR_UNSUPPORTED, "tie_word_embeddings"},
    {"heads", "n_head", "3", NULL, 0, ATTN_ERR_INVALID_ARGUMENT, "n_head"},
    {"inner", "n_inner", "12", NULL, 0, ATTN_ERR_SHAPE, "n_inner"},
    {"eps", "layer_norm_epsilon", "0", NULL, 0, ATTN_ERR_INVALID_ARGUMENT, "layer_norm_epsilon"},
    {"missing", NULL, NULL, "transformer.h.1.attn.c_proj.bias", 0, ATTN_ERR_NOT_FOUND,
     "transformer.h.1.attn.c_proj.bias"},
    {"head", NULL, NULL, NULL, 2, ATTN_ERR_UNSUPPORTED, "lm_head.weight"},
};

static void test_hostile(void) {
    for (size_t i = 0; i < sizeof HOSTILE / sizeof HOSTILE[0]; i++) {
        const hostile *h = &HOSTILE[i];
        attn_pretrained *m = NULL;
        CHECK_STATUS(attn_pretrained_open(folder(h->name, h->key, h->value, h->skip, h->lm_head), &m), h->want);
        CHECK(m == NULL, "%s: a model came back", h->name);
        attn_pretrained_free(m);
        CHECK(strstr(attn_last_error(), h->word) != NULL, "%s: message lacks '%s': %s", h->name, h->word,
              attn_last_error());
    }
}

/* Every allocation of open, logits and generate failed in turn: ATTN_ERR_OUT_OF_MEMORY each time,
 * nothing leaked (make asan), then the undisturbed results. */
static void run_all(attn_pretrained *m, float *logits, collected *c) {
    int32_t ids[4] = {1, 2, 3, 4};
    int64_t len = 4;
    attn_generate_options o = attn_generate_options_default();
    o.max_new_tokens = 3;
    o.temperature = 0.9;
    memset(c, 0, sizeof *c);
    attn_status st = attn_pretrained_logits(m, ids, &len, 1, 4, logits);
    if (!st) st = attn_pretrained_generate(m, ids, 4, &o, collect, c, NULL);
    CHECK_OK(st);
}

static void test_alloc_fail(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ok", root);
    float want[4 * V], got[4 * V];
    collected cw, cg;
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(dir, &m));
    if (m) run_all(m, want, &cw);
    attn_pretrained_free(m);
    int32_t ids[4] = {1, 2, 3, 4};
    int64_t len = 4;
    long k = 1;
    for (; k < 100000; k++) {
        m = NULL;
        attn__alloc_fail_after(k);
        attn_generate_options o = attn_generate_options_default();
        o.max_new_tokens = 3;
        o.temperature = 0.9;
        memset(&cg, 0, sizeof cg);
        attn_status st = attn_pretrained_open(dir, &m);
        if (!st) st = attn_pretrained_logits(m, ids, &len, 1, 4, got);
        if (!st) st = attn_pretrained_generate(m, ids, 4, &o, collect, &cg, NULL);
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

/* A NaN in ln_f's bias makes every logit NaN: generation stops with ATTN_ERR_NUMERIC before the
 * first token, greedy or sampled (torch.multinomial raises on such probabilities; an argmax over
 * NaN would pick an arbitrary id), and no token reaches the callback. */
static void test_nonfinite_logits(void) {
    nan_tensor = "transformer.ln_f.bias";
    const char *dir = folder("nan", NULL, NULL, NULL, 1);
    nan_tensor = NULL;
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(dir, &m));
    if (!m) return;
    const int32_t ids[4] = {1, 2, 3, 4};
    for (int sampled = 0; sampled < 2; sampled++) {
        attn_generate_options o = attn_generate_options_default();
        o.max_new_tokens = 4;
        o.temperature = sampled ? 0.8 : 0;
        collected c;
        c.n = 0;
        size_t produced = 7;
        CHECK_STATUS(attn_pretrained_generate(m, ids, 4, &o, collect, &c, &produced), ATTN_ERR_NUMERIC);
        CHECK(strstr(attn_last_error(), "not finite") != NULL, "message: %s", attn_last_error());
        CHECK(produced == 0 && c.n == 0, "%zu tokens produced from NaN logits", produced);
    }
    attn_pretrained_free(m);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/attn_test_pretrained_gpt2.XXXXXX");
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    test_valid();
    test_hostile();
    test_alloc_fail();
    test_nonfinite_logits();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (test_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_summary("test_pretrained_gpt2");
}
