/* libFuzzer harness: a Hugging Face folder's config.json (src/models: hf_folder.c's key readers and
 * every family's, chosen by model_type), opened by attn_pretrained_open over tiny fixed weights.
 * The input is config.json; bytes after a first NUL (which JSON cannot hold) are the folder's
 * preprocessor_config.json (ViT's image processor). Once per process a scratch folder per weight
 * set is written with the library's safetensors writer: BERT, GPT-2, Llama (also Mistral's), Qwen2
 * (Llama's with q/k/v biases) and ViTForImageClassification, hidden 8, 2 heads, one layer, vocab
 * 16; the input goes to the one its model_type names (Llama's for any other). A folder that opens
 * runs one tiny forward (hidden states or logits of 5 ids, 3 greedy tokens, an attention capture;
 * an 8 x 8 image preprocessed and classified). Checked: a refusal sets a message and gives no
 * model; an opened model's sizes are those of the weights. Sizes the config claims beyond the
 * weights (a 2^40 vocabulary) must be refused before anything of that size is allocated
 * (libFuzzer's -malloc_limit_mb catches an allocation that is not). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn/pretrained.h"
#include "attn/safetensors.h"
#include "fuzz_util.h"
#include "io/json.h"

enum { F_BERT, F_GPT2, F_LLAMA, F_QWEN2, F_VIT, N_FOLDERS };
static const char *const FOLDER[N_FOLDERS] = {"bert", "gpt2", "llama", "qwen2", "vit"};

/* One tensor: name and shape (rank = dims given, the rest 0). */
typedef struct spec {
    const char *name;
    int64_t d[4];
} spec;

static const spec BERT[] = {
    {"embeddings.word_embeddings.weight", {16, 8}},
    {"embeddings.position_embeddings.weight", {16, 8}},
    {"embeddings.token_type_embeddings.weight", {2, 8}},
    {"embeddings.LayerNorm.weight", {8}},
    {"embeddings.LayerNorm.bias", {8}},
    {"encoder.layer.0.attention.self.query.weight", {8, 8}},
    {"encoder.layer.0.attention.self.query.bias", {8}},
    {"encoder.layer.0.attention.self.key.weight", {8, 8}},
    {"encoder.layer.0.attention.self.key.bias", {8}},
    {"encoder.layer.0.attention.self.value.weight", {8, 8}},
    {"encoder.layer.0.attention.self.value.bias", {8}},
    {"encoder.layer.0.attention.output.dense.weight", {8, 8}},
    {"encoder.layer.0.attention.output.dense.bias", {8}},
    {"encoder.layer.0.attention.output.LayerNorm.weight", {8}},
    {"encoder.layer.0.attention.output.LayerNorm.bias", {8}},
    {"encoder.layer.0.intermediate.dense.weight", {16, 8}},
    {"encoder.layer.0.intermediate.dense.bias", {16}},
    {"encoder.layer.0.output.dense.weight", {8, 16}},
    {"encoder.layer.0.output.dense.bias", {8}},
    {"encoder.layer.0.output.LayerNorm.weight", {8}},
    {"encoder.layer.0.output.LayerNorm.bias", {8}},
    {NULL, {0}},
};

static const spec GPT2[] = {
    {"transformer.wte.weight", {16, 8}},
    {"transformer.wpe.weight", {16, 8}},
    {"transformer.h.0.ln_1.weight", {8}},
    {"transformer.h.0.ln_1.bias", {8}},
    {"transformer.h.0.attn.c_attn.weight", {8, 24}},
    {"transformer.h.0.attn.c_attn.bias", {24}},
    {"transformer.h.0.attn.c_proj.weight", {8, 8}},
    {"transformer.h.0.attn.c_proj.bias", {8}},
    {"transformer.h.0.ln_2.weight", {8}},
    {"transformer.h.0.ln_2.bias", {8}},
    {"transformer.h.0.mlp.c_fc.weight", {8, 32}},
    {"transformer.h.0.mlp.c_fc.bias", {32}},
    {"transformer.h.0.mlp.c_proj.weight", {32, 8}},
    {"transformer.h.0.mlp.c_proj.bias", {8}},
    {"transformer.ln_f.weight", {8}},
    {"transformer.ln_f.bias", {8}},
    {NULL, {0}},
};

/* 2 query heads, 1 key/value head, head_dim 4, intermediate 16, untied lm_head */
static const spec LLAMA[] = {
    {"model.embed_tokens.weight", {16, 8}},
    {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
    {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
    {"model.layers.0.self_attn.v_proj.weight", {4, 8}},
    {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
    {"model.layers.0.mlp.gate_proj.weight", {16, 8}},
    {"model.layers.0.mlp.up_proj.weight", {16, 8}},
    {"model.layers.0.mlp.down_proj.weight", {8, 16}},
    {"model.layers.0.input_layernorm.weight", {8}},
    {"model.layers.0.post_attention_layernorm.weight", {8}},
    {"model.norm.weight", {8}},
    {"lm_head.weight", {16, 8}},
    {NULL, {0}},
};

static const spec QWEN2_BIASES[] = {
    {"model.layers.0.self_attn.q_proj.bias", {8}},
    {"model.layers.0.self_attn.k_proj.bias", {4}},
    {"model.layers.0.self_attn.v_proj.bias", {4}},
    {NULL, {0}},
};

/* image 8 x 8, patch 4, 3 channels, 2 labels */
static const spec VIT[] = {
    {"vit.embeddings.cls_token", {1, 1, 8}},
    {"vit.embeddings.position_embeddings", {1, 5, 8}},
    {"vit.embeddings.patch_embeddings.projection.weight", {8, 3, 4, 4}},
    {"vit.embeddings.patch_embeddings.projection.bias", {8}},
    {"vit.layers.0.attention.q_proj.weight", {8, 8}},
    {"vit.layers.0.attention.q_proj.bias", {8}},
    {"vit.layers.0.attention.k_proj.weight", {8, 8}},
    {"vit.layers.0.attention.k_proj.bias", {8}},
    {"vit.layers.0.attention.v_proj.weight", {8, 8}},
    {"vit.layers.0.attention.v_proj.bias", {8}},
    {"vit.layers.0.attention.o_proj.weight", {8, 8}},
    {"vit.layers.0.attention.o_proj.bias", {8}},
    {"vit.layers.0.layernorm_before.weight", {8}},
    {"vit.layers.0.layernorm_before.bias", {8}},
    {"vit.layers.0.layernorm_after.weight", {8}},
    {"vit.layers.0.layernorm_after.bias", {8}},
    {"vit.layers.0.mlp.fc1.weight", {16, 8}},
    {"vit.layers.0.mlp.fc1.bias", {16}},
    {"vit.layers.0.mlp.fc2.weight", {8, 16}},
    {"vit.layers.0.mlp.fc2.bias", {8}},
    {"vit.layernorm.weight", {8}},
    {"vit.layernorm.bias", {8}},
    {"classifier.weight", {2, 8}},
    {"classifier.bias", {2}},
    {NULL, {0}},
};

static char root[256];
static float values[512]; /* every tensor's data (the largest has 384 elements) */

static void remove_all(void) {
    for (int i = 0; i < N_FOLDERS; i++) {
        static const char *const files[] = {"model.safetensors", "config.json", "preprocessor_config.json"};
        char p[512];
        for (int k = 0; k < 3; k++) {
            snprintf(p, sizeof p, "%s/%s/%s", root, FOLDER[i], files[k]);
            unlink(p);
        }
        snprintf(p, sizeof p, "%s/%s", root, FOLDER[i]);
        rmdir(p);
    }
    rmdir(root);
}

static void add_specs(attn_safetensors_writer *w, const spec *s) {
    for (; s->name; s++) {
        int rank = 0;
        while (rank < 4 && s->d[rank]) rank++;
        REQUIRE(attn_safetensors_writer_add(w, s->name, ATTN_DTYPE_F32, rank, s->d, values) == ATTN_OK);
    }
}

/* The scratch folders and their weights, once per process. */
static void setup(void) {
    if (root[0]) return;
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        x = x * 1664525u + 1013904223u;
        values[i] = (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/attn_fuzz_hf.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    REQUIRE(mkdtemp(root) != NULL);
    atexit(remove_all);
    const spec *const sets[N_FOLDERS][2] = {
        {BERT, NULL}, {GPT2, NULL}, {LLAMA, NULL}, {LLAMA, QWEN2_BIASES}, {VIT, NULL}};
    for (int i = 0; i < N_FOLDERS; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", root, FOLDER[i]);
        REQUIRE(mkdir(p, 0700) == 0);
        attn_safetensors_writer *w = NULL;
        REQUIRE(attn_safetensors_writer_create(&w) == ATTN_OK);
        for (int k = 0; k < 2; k++)
            if (sets[i][k]) add_specs(w, sets[i][k]);
        snprintf(p, sizeof p, "%s/%s/model.safetensors", root, FOLDER[i]);
        REQUIRE(attn_safetensors_writer_write_file(w, p) == ATTN_OK);
        attn_safetensors_writer_free(w);
    }
}

/* The folder config.json's model_type names (Llama's for anything else). */
static int pick(const char *cfg, size_t len) {
    attn_json_doc *doc = NULL;
    int f = F_LLAMA;
    if (attn_json_parse(cfg, len, NULL, &doc, NULL) != ATTN_JSON_OK) return f;
    const char *t = attn_json_as_string(attn_json_get(attn_json_root(doc), "model_type"), NULL);
    if (t && !strcmp(t, "bert")) f = F_BERT;
    if (t && !strcmp(t, "gpt2")) f = F_GPT2;
    if (t && !strcmp(t, "qwen2")) f = F_QWEN2;
    if (t && !strcmp(t, "vit")) f = F_VIT;
    attn_json_free(doc);
    return f;
}

static void put(const char *dir, const char *name, const void *data, size_t len) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (!data) {
        unlink(p);
        return;
    }
    FILE *f = fopen(p, "wb");
    REQUIRE(f != NULL);
    REQUIRE(fwrite(data, 1, len, f) == len || len == 0);
    REQUIRE(fclose(f) == 0);
}

static void ok_or_message(attn_status st) { REQUIRE(st == ATTN_OK || attn_last_error()[0] != '\0'); }

static void run_text(attn_pretrained *m) {
    const int64_t V = attn_pretrained_vocab_size(m), Hd = attn_pretrained_hidden_size(m);
    REQUIRE(V == 16 && Hd == 8);
    int32_t ids[5];
    for (int i = 0; i < 5; i++) ids[i] = (int32_t)((3 * i + 1) % V);
    const int64_t len = 5;
    float out[5 * 16];
    attn_status st = attn_pretrained_hidden_states(m, ids, NULL, &len, 1, 5, out);
    if (st == ATTN_ERR_UNSUPPORTED) st = attn_pretrained_logits(m, ids, &len, 1, 5, out);
    ok_or_message(st);
    attn_generate_options o = attn_generate_options_default();
    o.max_new_tokens = 3;
    size_t produced = 0;
    st = attn_pretrained_generate(m, ids, 5, &o, NULL, NULL, &produced);
    ok_or_message(st);
    REQUIRE(produced <= 3);
    attn_capture *cap = NULL;
    REQUIRE(attn_capture_create(&cap) == ATTN_OK && attn_capture_add(cap, "*", 0, 0, 0, 0) == ATTN_OK);
    ok_or_message(attn_pretrained_capture(m, ids, 5, NULL, 0, 0, cap));
    attn_capture_free(cap);
}

static void run_image(attn_pretrained *m) {
    int64_t C = 0, H = 0, W = 0;
    attn_pretrained_image_size(m, &C, &H, &W);
    /* the weights fix 3 channels, patch 4 x 4 and a 2 x 2 grid: an image of 8 to 11 pixels a side
     * (the convolution drops the remainder, as Conv2d does) */
    REQUIRE(C == 3 && H >= 8 && H <= 11 && W >= 8 && W <= 11 && attn_pretrained_image_tokens(m) == 5);
    uint8_t px[8 * 8 * 3];
    for (int i = 0; i < 8 * 8 * 3; i++) px[i] = (uint8_t)(i * 37);
    attn_image img = {8, 8, 3, px};
    float x[3 * 11 * 11], logits[2], hidden[5 * 8];
    attn_status st = attn_pretrained_image_input(m, &img, x);
    ok_or_message(st);
    if (st) return;
    ok_or_message(attn_pretrained_classify(m, x, 1, H, W, logits));
    ok_or_message(attn_pretrained_image_hidden_states(m, x, 1, H, W, hidden));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    const uint8_t *nul = memchr(data, 0, size);
    const size_t clen = nul ? (size_t)(nul - data) : size;
    const int f = pick((const char *)data, clen);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, FOLDER[f]);
    put(dir, "config.json", data, clen);
    put(dir, "preprocessor_config.json", nul ? nul + 1 : NULL, nul ? size - clen - 1 : 0);
    attn_pretrained *m = (attn_pretrained *)&m;
    attn_clear_error();
    attn_status st = attn_pretrained_open(dir, &m);
    if (st != ATTN_OK) {
        REQUIRE(attn_last_error()[0] != '\0');
        REQUIRE(m == NULL);
        return 0;
    }
    if (attn_pretrained_image_tokens(m))
        run_image(m);
    else
        run_text(m);
    attn_pretrained_free(m);
    return 0;
}
