/* attn_pretrained on Hugging Face BERT folders written here (config.json and safetensors made with
 * attn's writer; no Python): a valid folder's sizes, padding that changes nothing of the real
 * tokens, bitwise equality across thread counts, mean pooling; BertFor*'s "bert." prefix and a
 * sharded folder; sentence-transformers' modules; and hostile folders, each refused with a message
 * naming the file and the key. (The numerical parity with transformers: tests/hf/bert_parity.py.) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn/pretrained.h"
#include "core/alloc.h"
#include "test_util.h"

enum { V = 10, H = 8, NH = 2, I = 16, P = 12, T = 2, L = 2 };

static char root[256];

/* ---- writing folders ---- */

typedef struct kv {
    const char *key, *value; /* value: raw JSON; NULL drops the key */
} kv;

static const kv BASE[] = {
    {"model_type", "\"bert\""},
    {"vocab_size", "10"},
    {"hidden_size", "8"},
    {"num_hidden_layers", "2"},
    {"num_attention_heads", "2"},
    {"intermediate_size", "16"},
    {"max_position_embeddings", "12"},
    {"type_vocab_size", "2"},
    {"hidden_act", "\"gelu\""},
    {"layer_norm_eps", "1e-12"},
    {"architectures", "[\"BertModel\"]"},
};
#define N_BASE (sizeof BASE / sizeof BASE[0])

static void write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* config.json: BASE with key `key` set to `value` (NULL value: removed; unknown key: added). */
static void write_config(const char *dir, const char *key, const char *value) {
    char text[2048] = "{";
    int added = 0;
    for (size_t i = 0; i <= N_BASE; i++) {
        const char *k = i < N_BASE ? BASE[i].key : key, *v = i < N_BASE ? BASE[i].value : value;
        if (i == N_BASE && (added || !key || !value)) break;
        if (key && k && strcmp(k, key) == 0) {
            v = value;
            added = 1;
        }
        if (!v) continue;
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len, "%s\"%s\": %s", len > 1 ? ", " : "", k, v);
    }
    strcat(text, "}");
    write_text(dir, "config.json", text);
}

/* The weights of a BertModel (names under prefix), deterministic random values. */
typedef struct weights {
    attn_safetensors_writer *w;
    float *data[64];
    int n;
} weights;

static void add(weights *ws, const char *prefix, const char *name, int rank, int64_t d0, int64_t d1) {
    char full[160];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    size_t count = (size_t)d0 * (size_t)(rank == 2 ? d1 : 1);
    float *x = xmalloc(count * sizeof(float));
    test_rng r = {0x9e3779b97f4a7c15ull ^ (uint64_t)(ws->n * 7919 + 1)};
    int norm_w = strstr(name, "LayerNorm.weight") != NULL;
    for (size_t i = 0; i < count; i++) x[i] = (float)(norm_w ? 1 + 0.3 * rng_normal(&r) : 0.3 * rng_normal(&r));
    ws->data[ws->n++] = x;
    int64_t shape[2] = {d0, d1};
    CHECK_OK(attn_safetensors_writer_add(ws->w, full, ATTN_DTYPE_F32, rank, shape, x));
}

/* skip: a tensor name (suffix) to leave out; extra: a tensor name to add. */
static void bert_weights(weights *ws, const char *prefix, const char *skip, int layers) {
    static const char *const emb[] = {"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
                                      "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
                                      "embeddings.LayerNorm.bias"};
    const int64_t rows[] = {V, P, T, H, H};
    for (int i = 0; i < 5; i++)
        if (!skip || strcmp(skip, emb[i]) != 0) add(ws, prefix, emb[i], i < 3 ? 2 : 1, rows[i], H);
    static const struct {
        const char *name;
        int64_t d0, d1;
    } lay[] = {
        {"attention.self.query.weight", H, H},
        {"attention.self.query.bias", H, 0},
        {"attention.self.key.weight", H, H},
        {"attention.self.key.bias", H, 0},
        {"attention.self.value.weight", H, H},
        {"attention.self.value.bias", H, 0},
        {"attention.output.dense.weight", H, H},
        {"attention.output.dense.bias", H, 0},
        {"attention.output.LayerNorm.weight", H, 0},
        {"attention.output.LayerNorm.bias", H, 0},
        {"intermediate.dense.weight", I, H},
        {"intermediate.dense.bias", I, 0},
        {"output.dense.weight", H, I},
        {"output.dense.bias", H, 0},
        {"output.LayerNorm.weight", H, 0},
        {"output.LayerNorm.bias", H, 0},
    };
    for (int l = 0; l < layers; l++)
        for (size_t k = 0; k < sizeof lay / sizeof lay[0]; k++) {
            char name[128];
            snprintf(name, sizeof name, "encoder.layer.%d.%s", l, lay[k].name);
            if (!skip || strcmp(skip, name) != 0) add(ws, prefix, name, lay[k].d1 ? 2 : 1, lay[k].d0, lay[k].d1);
        }
}

static void weights_write(weights *ws, const char *dir, const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    CHECK_OK(attn_safetensors_writer_write_file(ws->w, path));
}

static void weights_free(weights *ws) {
    attn_safetensors_writer_free(ws->w);
    for (int i = 0; i < ws->n; i++) free(ws->data[i]);
    ws->n = 0;
}

static void weights_begin(weights *ws) {
    ws->n = 0;
    CHECK_OK(attn_safetensors_writer_create(&ws->w));
}

/* A fresh folder root/name holding a BertModel (config edit key = value; weights with skip left
 * out and an extra tensor when extra is not NULL). */
static const char *folder(const char *name, const char *key, const char *value, const char *skip, const char *extra) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    mkdir(dir, 0755);
    write_config(dir, key, value);
    weights ws;
    weights_begin(&ws);
    bert_weights(&ws, "", skip, L);
    if (extra) add(&ws, "", extra, 1, 3, 0);
    weights_write(&ws, dir, "model.safetensors");
    weights_free(&ws);
    return dir;
}

/* ---- the valid folder ---- */

static void run_hidden(attn_pretrained *m, const int32_t *ids, const int64_t *len, int64_t B, int64_t n, float *out) {
    CHECK_OK(attn_pretrained_hidden_states(m, ids, NULL, len, B, n, out));
}

static void test_valid(void) {
    const char *dir = folder("ok", NULL, NULL, NULL, NULL);
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(dir, &m));
    if (!m) return;
    CHECK(strcmp(attn_pretrained_family(m), "bert") == 0 && attn_pretrained_hidden_size(m) == H &&
              attn_pretrained_embedding_size(m) == H && attn_pretrained_max_length(m) == P &&
              attn_pretrained_vocab_size(m) == V && attn_pretrained_pooling(m) == 0 && !attn_pretrained_normalize(m),
          "sizes");
    enum { B = 3, N = 7 };
    int32_t ids[B * N];
    for (int i = 0; i < B * N; i++) ids[i] = (i * 7 + 3) % V;
    int64_t len[B] = {N, 2, 5};
    static float out[B * N * H], alone[N * H], out2[B * N * H];
    run_hidden(m, ids, len, B, N, out);
    /* each row alone, unpadded, gives its real tokens' outputs bit for bit (the padded batch runs
     * packed: its rows through the very kernels of the row alone) */
    for (int b = 0; b < B; b++) {
        run_hidden(m, ids + b * N, &len[b], 1, len[b], alone);
        CHECK(memcmp(out + b * N * H, alone, (size_t)(len[b] * H) * sizeof(float)) == 0 &&
                  rel_err_ff(out + b * N * H, alone, (size_t)(len[b] * H)) == 0,
              "row %d: padding changed the output", b);
        int zero = 1;
        for (int64_t i = len[b] * H; i < N * H; i++) zero &= out[b * N * H + i] == 0;
        CHECK(zero, "row %d: padded positions are not 0", b);
    }
    /* bitwise the same for any thread count */
    int threads = attn_get_num_threads();
    attn_set_num_threads(1);
    run_hidden(m, ids, len, B, N, out2);
    attn_set_num_threads(threads);
    CHECK(memcmp(out, out2, sizeof out) == 0, "1 thread vs %d threads differ", threads);
    /* bf16: near fp32 and not equal to it; its first call packs the weights' panels, the second
     * reuses them: the same bits; back to fp32 gives fp32's bits, and bf16 again the first bf16's */
    static float h1[B * N * H], h2[B * N * H];
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_BF16));
    run_hidden(m, ids, len, B, N, h1);
    run_hidden(m, ids, len, B, N, h2);
    CHECK(memcmp(h1, h2, sizeof h1) == 0, "bf16: the second call differs from the first");
    const double e16 = rel_err_ff(h1, out, (size_t)(B * N * H));
    CHECK(e16 > 0 && e16 < 3e-2, "bf16 against fp32: relative error %.3g", e16);
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_FP32));
    run_hidden(m, ids, len, B, N, h2);
    CHECK(memcmp(out, h2, sizeof out) == 0, "fp32 after bf16 differs from fp32 before");
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_BF16));
    run_hidden(m, ids, len, B, N, h2);
    CHECK(memcmp(h1, h2, sizeof h1) == 0, "bf16 after fp32 differs from the first bf16");
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_FP32));
    /* no sentence-transformers files: mean pooling, no normalisation */
    float emb[B * H];
    CHECK_OK(attn_pretrained_embed(m, ids, len, B, N, emb));
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++) {
            double s = 0;
            for (int t = 0; t < len[b]; t++) s += out[(b * N + t) * H + j];
            CHECK(fabs(s / (double)len[b] - emb[b * H + j]) < 1e-5, "mean pooling row %d col %d", b, j);
        }
    /* ids, token types and lengths at real positions are checked */
    ids[1 * N + 1] = V;
    CHECK_STATUS(attn_pretrained_hidden_states(m, ids, NULL, len, B, N, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "ids[1][1]") != NULL, "message: %s", attn_last_error());
    ids[1 * N + 1] = 0;
    ids[1 * N + 5] = -7; /* padding: not read */
    CHECK_OK(attn_pretrained_hidden_states(m, ids, NULL, len, B, N, out));
    int32_t types[B * N] = {0};
    types[2 * N + 4] = T;
    CHECK_STATUS(attn_pretrained_hidden_states(m, ids, types, len, B, N, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "token_type_ids[2][4]") != NULL, "message: %s", attn_last_error());
    int64_t bad[B] = {N, 0, 5};
    CHECK_STATUS(attn_pretrained_embed(m, ids, bad, B, N, emb), ATTN_ERR_INVALID_ARGUMENT);
    static int32_t long_ids[P + 1];
    int64_t long_len = P + 1;
    static float long_out[(P + 1) * H];
    CHECK_STATUS(attn_pretrained_hidden_states(m, long_ids, NULL, &long_len, 1, P + 1, long_out),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "max_position_embeddings") != NULL, "message: %s", attn_last_error());
    attn_pretrained_free(m);
}

/* BertFor*'s "bert." prefix (the head's tensors ignored), and the same weights in two shards. */
static void test_prefix_and_shards(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/prefixed", root);
    mkdir(dir, 0755);
    write_config(dir, "architectures", "[\"BertForMaskedLM\"]");
    weights ws;
    weights_begin(&ws);
    bert_weights(&ws, "bert.", NULL, L);
    add(&ws, "", "cls.predictions.bias", 1, V, 0);
    add(&ws, "bert.", "pooler.dense.bias", 1, H, 0);
    weights_write(&ws, dir, "model.safetensors");
    weights_free(&ws);
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(dir, &m));
    attn_pretrained_free(m);

    snprintf(dir, sizeof dir, "%s/sharded", root);
    mkdir(dir, 0755);
    write_config(dir, NULL, NULL);
    weights_begin(&ws);
    bert_weights(&ws, "", "encoder.layer.1.output.LayerNorm.bias", L);
    weights_write(&ws, dir, "a.safetensors");
    weights_free(&ws);
    weights_begin(&ws);
    add(&ws, "", "encoder.layer.1.output.LayerNorm.bias", 1, H, 0);
    weights_write(&ws, dir, "b.safetensors");
    weights_free(&ws);
    write_text(dir, "model.safetensors.index.json",
               "{\"metadata\": {}, \"weight_map\": {\"embeddings.word_embeddings.weight\": \"a.safetensors\", "
               "\"encoder.layer.1.output.LayerNorm.bias\": \"b.safetensors\"}}");
    CHECK_OK(attn_pretrained_open(dir, &m));
    attn_pretrained_free(m);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"x\": \"../ok/model.safetensors\"}}");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "weight_map") != NULL, "message: %s", attn_last_error());
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"x\": \"a.safetensors\"}}");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_NOT_FOUND);
    CHECK(strstr(attn_last_error(), "weight_map['x']") != NULL, "message: %s", attn_last_error());
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"x\": \"c.safetensors\"}}");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "c.safetensors") != NULL, "message: %s", attn_last_error());
    write_text(dir, "model.safetensors.index.json",
               "{\"metadata\": {}, \"weight_map\": {\"embeddings.word_embeddings.weight\": \"a.safetensors\", "
               "\"encoder.layer.1.output.LayerNorm.bias\": \"b.safetensors\"}}");
}

/* modules.json (Transformer, Pooling, Normalize) and CLS pooling. */
static void st_files(const char *dir, const char *sub) {
    write_text(dir, "modules.json",
               "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
               " {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": "
               "\"sentence_transformers.models.Pooling\"}, {\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", "
               "\"type\": \"sentence_transformers.models.Normalize\"}]");
    write_text(sub, "config.json", "{\"word_embedding_dimension\": 8, \"pooling_mode_cls_token\": true}");
}

/* sentence-transformers' files around the valid folder. */
static void test_sentence_transformers(void) {
    const char *dir = folder("st", NULL, NULL, NULL, NULL);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/1_Pooling", dir);
    mkdir(sub, 0755);
    st_files(dir, sub);
    write_text(dir, "sentence_bert_config.json", "{\"max_seq_length\": 9}");
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(dir, &m));
    if (m) {
        CHECK(attn_pretrained_pooling(m) == 1 && attn_pretrained_normalize(m) && attn_pretrained_max_length(m) == 9,
              "pooling %d normalize %d max_length %lld", attn_pretrained_pooling(m), attn_pretrained_normalize(m),
              (long long)attn_pretrained_max_length(m));
        int32_t ids[4] = {1, 2, 3, 4};
        int64_t len[1] = {4};
        float emb[H], hs[4 * H];
        CHECK_OK(attn_pretrained_embed(m, ids, len, 1, 4, emb));
        CHECK_OK(attn_pretrained_hidden_states(m, ids, NULL, len, 1, 4, hs));
        double n2 = 0;
        for (int j = 0; j < H; j++) n2 += (double)hs[j] * hs[j];
        double err = 0;
        for (int j = 0; j < H; j++) err = fmax(err, fabs(hs[j] / sqrt(n2) - emb[j]));
        CHECK(err < 1e-6, "CLS + Normalize: max error %g", err);
        attn_pretrained_free(m);
    }
    write_text(sub, "config.json", "{\"embedding_dimension\": 8, \"pooling_mode\": \"max\"}");
    CHECK_OK(attn_pretrained_open(dir, &m));
    CHECK(m && attn_pretrained_pooling(m) == 2, "pooling_mode max");
    attn_pretrained_free(m);
    write_text(sub, "config.json", "{\"embedding_dimension\": 8, \"pooling_mode\": \"weightedmean\"}");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "pooling_mode") != NULL, "message: %s", attn_last_error());
    write_text(
        sub, "config.json",
        "{\"word_embedding_dimension\": 8, \"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": true}");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_UNSUPPORTED);
    write_text(sub, "config.json", "{\"word_embedding_dimension\": 16, \"pooling_mode_mean_tokens\": true}");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "word_embedding_dimension") != NULL, "message: %s", attn_last_error());
    write_text(dir, "modules.json",
               "[{\"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"}, {\"path\": \"1_Pooling\", "
               "\"type\": \"sentence_transformers.models.Pooling\"}, {\"path\": \"2_Dense\", \"type\": "
               "\"sentence_transformers.models.Dense\"}]");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "Dense") != NULL && strstr(attn_last_error(), "modules.json") != NULL,
          "message: %s", attn_last_error());
    write_text(dir, "modules.json", "[{\"path\": \"../x\", \"type\": \"sentence_transformers.models.Transformer\"}]");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_INVALID_ARGUMENT);
    st_files(dir, sub); /* valid again, for test_alloc_fail */
}

/* ---- hostile folders ---- */

typedef struct hostile {
    const char *name, *key, *value, *skip, *extra;
    attn_status want;
    const char *words[2]; /* the message must name both (NULL: nothing more) */
} hostile;

static const hostile HOSTILE[] = {
    {"no_hidden", "hidden_size", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, {"config.json", "'hidden_size'"}},
    {"heads_string",
     "num_attention_heads",
     "\"two\"",
     NULL,
     NULL,
     ATTN_ERR_INVALID_ARGUMENT,
     {"config.json", "'num_attention_heads'"}},
    {"eps_string", "layer_norm_eps", "[1]", NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, {"layer_norm_eps", "array"}},
    {"layers_float", "num_hidden_layers", "2.5", NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, {"num_hidden_layers", "2.5"}},
    {"layers_100000", "num_hidden_layers", "100000", NULL, NULL, ATTN_ERR_SHAPE, {"config.json", "num_hidden_layers"}},
    {"layers_huge",
     "num_hidden_layers",
     "1000000000000",
     NULL,
     NULL,
     ATTN_ERR_INVALID_ARGUMENT,
     {"num_hidden_layers", NULL}},
    {"vocab_2_40", "vocab_size", "1099511627776", NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, {"config.json", "vocab_size"}},
    {"vocab_11", "vocab_size", "11", NULL, NULL, ATTN_ERR_SHAPE, {"word_embeddings", "vocab_size"}},
    {"hidden_9", "num_attention_heads", "3", NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, {"num_attention_heads", NULL}},
    {"negative", "intermediate_size", "-16", NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, {"intermediate_size", NULL}},
    {"model_type", "model_type", "\"t5\"", NULL, NULL, ATTN_ERR_UNSUPPORTED, {"model_type", "t5"}},
    {"no_model_type", "model_type", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, {"config.json", "model_type"}},
    {"act", "hidden_act", "\"swish\"", NULL, NULL, ATTN_ERR_UNSUPPORTED, {"hidden_act", "swish"}},
    {"relative",
     "position_embedding_type",
     "\"relative_key_query\"",
     NULL,
     NULL,
     ATTN_ERR_UNSUPPORTED,
     {"position_embedding_type", NULL}},
    {"decoder", "is_decoder", "true", NULL, NULL, ATTN_ERR_UNSUPPORTED, {"is_decoder", NULL}},
    {"decoder_type", "is_decoder", "\"no\"", NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, {"is_decoder", NULL}},
    {"missing",
     NULL,
     NULL,
     "encoder.layer.1.attention.self.key.bias",
     NULL,
     ATTN_ERR_NOT_FOUND,
     {"missing", "encoder.layer.1.attention.self.key.bias"}},
    {"extra",
     NULL,
     NULL,
     NULL,
     "encoder.layer.0.attention.self.rotary",
     ATTN_ERR_NOT_FOUND,
     {"unexpected", "encoder.layer.0.attention.self.rotary"}},
    {"fewer_layers", "num_hidden_layers", "1", NULL, NULL, ATTN_ERR_NOT_FOUND, {"unexpected", "encoder.layer.1."}},
    {"inter_shape", "intermediate_size", "12", NULL, NULL, ATTN_ERR_SHAPE, {"model.safetensors", "intermediate_size"}},
};

static void test_hostile(void) {
    for (size_t i = 0; i < sizeof HOSTILE / sizeof HOSTILE[0]; i++) {
        const hostile *h = &HOSTILE[i];
        const char *dir = folder(h->name, h->key, h->value, h->skip, h->extra);
        attn_pretrained *m = NULL;
        CHECK_STATUS(attn_pretrained_open(dir, &m), h->want);
        CHECK(m == NULL, "%s: a model came back", h->name);
        attn_pretrained_free(m);
        for (int k = 0; k < 2; k++)
            CHECK(!h->words[k] || strstr(attn_last_error(), h->words[k]), "%s: message lacks '%s': %s", h->name,
                  h->words[k], attn_last_error());
    }
    /* files */
    attn_pretrained *m = NULL;
    const char *dir = folder("files", NULL, NULL, NULL, NULL);
    char path[600];
    write_text(dir, "config.json", "{\"model_type\": \"bert\",}");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "config.json") != NULL, "message: %s", attn_last_error());
    write_text(dir, "config.json", "[1, 2]");
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_INVALID_ARGUMENT);
    write_text(dir, "model.safetensors", "not a safetensors file");
    write_config(dir, NULL, NULL);
    CHECK(attn_pretrained_open(dir, &m) != ATTN_OK && strstr(attn_last_error(), "model.safetensors"), "message: %s",
          attn_last_error());
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_NOT_FOUND);
    CHECK(strstr(attn_last_error(), "model.safetensors") != NULL, "message: %s", attn_last_error());
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    CHECK_STATUS(attn_pretrained_open(dir, &m), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "config.json") != NULL, "message: %s", attn_last_error());
    CHECK_STATUS(attn_pretrained_open(NULL, &m), ATTN_ERR_INVALID_ARGUMENT);
    /* an integer tensor */
    snprintf(path, sizeof path, "%s/int", root);
    mkdir(path, 0755);
    write_config(path, NULL, NULL);
    weights ws;
    weights_begin(&ws);
    bert_weights(&ws, "", "embeddings.LayerNorm.bias", L);
    int32_t ib[H] = {0};
    int64_t shape[1] = {H};
    CHECK_OK(attn_safetensors_writer_add(ws.w, "embeddings.LayerNorm.bias", ATTN_DTYPE_I32, 1, shape, ib));
    weights_write(&ws, path, "model.safetensors");
    weights_free(&ws);
    CHECK_STATUS(attn_pretrained_open(path, &m), ATTN_ERR_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "embeddings.LayerNorm.bias") && strstr(attn_last_error(), "I32"), "message: %s",
          attn_last_error());
}

/* Every allocation of open + embed failed in turn (the sentence-transformers folder, then the
 * sharded one): ATTN_ERR_OUT_OF_MEMORY, nothing leaked (under ASan), and once no failure is left
 * to inject, the undisturbed embedding. */
/* Every allocation of opening and one embed call made to fail in turn: the status says so and
 * nothing leaks (the ASan run). In bf16 (set before the call) an allocation of the weights' packed
 * panels may fail too: that product then packs the weight itself, so the call either fails with
 * ATTN_ERR_OUT_OF_MEMORY or succeeds with the very bits of the run without failures. */
static void test_alloc_fail(const char *name, attn_precision p) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    int32_t ids[6] = {1, 2, 3, 4, 5, 6};
    int64_t len[2] = {3, 2};
    float want[2 * H], got[2 * H];
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(dir, &m));
    CHECK_OK(attn_pretrained_set_precision(m, p));
    CHECK_OK(attn_pretrained_embed(m, ids, len, 2, 3, want));
    attn_pretrained_free(m);
    long k = 1, recovered = 0;
    for (; k < 100000; k++) {
        m = NULL;
        attn__alloc_fail_after(k);
        attn_status st = attn_pretrained_open(dir, &m);
        if (!st) st = attn_pretrained_set_precision(m, p);
        if (!st) st = attn_pretrained_embed(m, ids, len, 2, 3, got);
        int injected = attn__alloc_injected();
        attn__alloc_fail_after(0);
        attn_pretrained_free(m);
        if (!injected) {
            CHECK(st == ATTN_OK && memcmp(got, want, sizeof want) == 0, "%s: after %ld failures: %s", name, k - 1,
                  attn_last_error());
            break;
        }
        if (p == ATTN_PRECISION_BF16 && st == ATTN_OK) { /* a weight's panels not had: packed per call */
            CHECK(memcmp(got, want, sizeof want) == 0,
                  "%s bf16: allocation %ld failed, the call succeeded with other bits", name, k);
            recovered++;
            continue;
        }
        CHECK(st == ATTN_ERR_OUT_OF_MEMORY, "%s: allocation %ld failed: status %s: %s", name, k, attn_status_str(st),
              attn_last_error());
    }
    CHECK(p != ATTN_PRECISION_BF16 || recovered > 0, "%s bf16: no allocation of the packed weights was failed", name);
    CHECK(k > 10 && k < 100000, "%s: %ld allocations swept", name, k);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/attn_test_pretrained.XXXXXX");
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    CHECK(strcmp(attn_pretrained_family_name(0), "bert") == 0, "family table row 0");
    CHECK(strcmp(attn_pretrained_family_name(1), "gpt2") == 0, "family table row 1");
    for (size_t i = 2; i < 5; i++) /* the Llama family's rows */
        CHECK(attn_pretrained_family_name(i) &&
                  strcmp(attn_pretrained_family_name(i), (const char *[]){"llama", "mistral", "qwen2"}[i - 2]) == 0,
              "family table row %zu", i);
    test_valid();
    test_prefix_and_shards();
    test_sentence_transformers();
    test_hostile();
    test_alloc_fail("st", ATTN_PRECISION_FP32);
    test_alloc_fail("sharded", ATTN_PRECISION_FP32);
    test_alloc_fail("st", ATTN_PRECISION_BF16);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (test_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_summary("test_pretrained");
}
