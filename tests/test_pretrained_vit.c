/* attn_pretrained's ViT family on folders written here (config.json, preprocessor_config.json and
 * safetensors made with attn's writer; no Python): a batch's logits equal to each image's alone,
 * the labels of id2label, attention records that are distributions, the preprocessing of an image
 * that needs no resize equal to (x - mean / factor) / (std / factor) in float32, the calls a ViT
 * lacks refused; and hostile config.json and preprocessor_config.json values (wrong types, absurd
 * sizes, a mean of the wrong length, options attn does not run), each refused with a message naming
 * the key. (The numerical parity with transformers: tests/hf/vit_parity.py.) */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attn/pretrained.h"
#include "attn/safetensors.h"
#include "test_util.h"

enum { H = 8, NL = 2, INTER = 12, IMG = 16, PATCH = 8, T = 1 + (IMG / PATCH) * (IMG / PATCH), LABELS = 3, HOLD = 64 };

static char root[256];

typedef struct kv {
    const char *key, *value; /* value: raw JSON; NULL drops the key */
} kv;

static const kv BASE[] = {
    {"model_type", "\"vit\""},   {"hidden_size", "8"},
    {"num_hidden_layers", "2"},  {"num_attention_heads", "2"},
    {"intermediate_size", "12"}, {"image_size", "16"},
    {"patch_size", "8"},         {"num_channels", "3"},
    {"layer_norm_eps", "1e-12"}, {"hidden_act", "\"gelu\""},
    {"qkv_bias", "true"},        {"id2label", "{\"0\": \"cat\", \"1\": \"dog\", \"2\": \"bird\"}"},
};
#define N_BASE (sizeof BASE / sizeof BASE[0])

static const char *const PREP =
    "{\"do_resize\": true, \"size\": {\"height\": 16, \"width\": 16}, \"resample\": 2, "
    "\"do_rescale\": true, \"rescale_factor\": 0.00392156862745098, \"do_normalize\": true, "
    "\"image_mean\": [0.485, 0.456, 0.406], \"image_std\": [0.229, 0.224, 0.225], "
    "\"do_convert_rgb\": true, \"image_processor_type\": \"ViTImageProcessor\"}";

static void write_text(const char *dir, const char *file, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

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
    write_text(dir, "config.json", text);
}

typedef struct weights {
    attn_safetensors_writer *w;
    float *data[HOLD];
    int n;
} weights;

static void add(weights *ws, const char *name, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    const int64_t shape[4] = {d0, d1, d2, d3};
    size_t count = 1;
    for (int i = 0; i < rank; i++) count *= (size_t)shape[i];
    float *x = xmalloc(count * sizeof(float));
    test_rng r = {0x9e3779b97f4a7c15ull ^ (uint64_t)(ws->n * 7919 + 1)};
    const int norm_w = strstr(name, "layernorm") && strstr(name, ".weight");
    for (size_t i = 0; i < count; i++) x[i] = (float)((norm_w ? 1 : 0) + 0.5 * rng_normal(&r));
    ws->data[ws->n++] = x;
    CHECK_OK(attn_safetensors_writer_add(ws->w, name, ATTN_DTYPE_F32, rank, shape, x));
}

/* A ViTForImageClassification's tensors ("vit." and classifier.*), skip left out, extra added. */
static const char *folder(const char *name, const char *key, const char *value, const char *skip, const char *extra,
                          const char *prep) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    mkdir(dir, 0755);
    write_config(dir, key, value);
    if (prep) write_text(dir, "preprocessor_config.json", prep);
    weights ws = {0};
    CHECK_OK(attn_safetensors_writer_create(&ws.w));
    static const struct {
        const char *name;
        int64_t d0, d1;
    } t[] = {
        {"attention.q_proj.weight", H, H}, {"attention.q_proj.bias", H, 0},
        {"attention.k_proj.weight", H, H}, {"attention.k_proj.bias", H, 0},
        {"attention.v_proj.weight", H, H}, {"attention.v_proj.bias", H, 0},
        {"attention.o_proj.weight", H, H}, {"attention.o_proj.bias", H, 0},
        {"layernorm_before.weight", H, 0}, {"layernorm_before.bias", H, 0},
        {"layernorm_after.weight", H, 0},  {"layernorm_after.bias", H, 0},
        {"mlp.fc1.weight", INTER, H},      {"mlp.fc1.bias", INTER, 0},
        {"mlp.fc2.weight", H, INTER},      {"mlp.fc2.bias", H, 0},
    };
    add(&ws, "vit.embeddings.cls_token", 3, 1, 1, H, 0);
    add(&ws, "vit.embeddings.position_embeddings", 3, 1, T, H, 0);
    add(&ws, "vit.embeddings.patch_embeddings.projection.weight", 4, H, 3, PATCH, PATCH);
    add(&ws, "vit.embeddings.patch_embeddings.projection.bias", 1, H, 0, 0, 0);
    char full[160];
    for (int l = 0; l < NL; l++)
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
            snprintf(full, sizeof full, "vit.layers.%d.%s", l, t[k].name);
            if (!skip || strcmp(skip, full) != 0) add(&ws, full, t[k].d1 ? 2 : 1, t[k].d0, t[k].d1, 0, 0);
        }
    add(&ws, "vit.layernorm.weight", 1, H, 0, 0, 0);
    add(&ws, "vit.layernorm.bias", 1, H, 0, 0, 0);
    add(&ws, "classifier.weight", 2, LABELS, H, 0, 0);
    add(&ws, "classifier.bias", 1, LABELS, 0, 0, 0);
    if (extra) add(&ws, extra, 1, H, 0, 0, 0);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(attn_safetensors_writer_write_file(ws.w, path));
    attn_safetensors_writer_free(ws.w);
    for (int i = 0; i < ws.n; i++) free(ws.data[i]);
    return dir;
}

static void test_calls(attn_pretrained *m) {
    int64_t C = 0, h = 0, w = 0, gh = 0, gw = 0;
    attn_pretrained_image_size(m, &C, &h, &w);
    attn_pretrained_image_grid(m, &gh, &gw);
    CHECK(C == 3 && h == IMG && w == IMG && gh == 2 && gw == 2 && attn_pretrained_image_tokens(m) == T,
          "sizes %lld %lld %lld grid %lldx%lld", (long long)C, (long long)h, (long long)w, (long long)gh,
          (long long)gw);
    CHECK(attn_pretrained_num_labels(m) == LABELS && !strcmp(attn_pretrained_label(m, 1), "dog") &&
              attn_pretrained_label(m, 3) == NULL && attn_pretrained_label(m, -1) == NULL,
          "labels");
    CHECK(!strcmp(attn_pretrained_family(m), "vit"), "family %s", attn_pretrained_family(m));
    float x[2 * 3 * IMG * IMG], both[2 * LABELS], one[LABELS];
    test_rng r = {42};
    fill_normal(&r, x, sizeof x / sizeof x[0], 1.0);
    CHECK_OK(attn_pretrained_classify(m, x, 2, IMG, IMG, both));
    for (int b = 0; b < 2; b++) {
        CHECK_OK(attn_pretrained_classify(m, x + b * 3 * IMG * IMG, 1, IMG, IMG, one));
        CHECK(!memcmp(one, both + b * LABELS, sizeof one), "image %d: logits alone differ from the batch's", b);
    }
    for (int i = 0; i < 2 * LABELS; i++) CHECK(isfinite(both[i]), "logit %d is not finite", i);
    /* bf16: near fp32 (PyTorch's bf16 error against float64: tests/hf/vit_parity.py), each image
     * alone as in the batch, fp32 again after */
    float b16[2 * LABELS];
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_BF16));
    CHECK_OK(attn_pretrained_classify(m, x, 2, IMG, IMG, b16));
    CHECK_OK(attn_pretrained_classify(m, x + 3 * IMG * IMG, 1, IMG, IMG, one));
    CHECK(!memcmp(one, b16 + LABELS, sizeof one), "bf16: image 1 alone differs from the batch's");
    const double eb = rel_err_ff(b16, both, 2 * LABELS);
    CHECK(eb > 0 && eb < 5e-2, "bf16 logits against fp32's: rel err %.3g", eb);
    CHECK_OK(attn_pretrained_set_precision(m, ATTN_PRECISION_FP32));
    CHECK_OK(attn_pretrained_classify(m, x, 2, IMG, IMG, b16));
    CHECK(!memcmp(b16, both, sizeof b16), "fp32 after bf16 differs");
    CHECK_STATUS(attn_pretrained_classify(m, x, 1, 24, IMG, one), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "24x16") && strstr(attn_last_error(), "16x16"), "message: %s", attn_last_error());
    int32_t ids[2] = {0, 1};
    int64_t len = 2;
    float hid[2 * H];
    CHECK_STATUS(attn_pretrained_hidden_states(m, ids, NULL, &len, 1, 2, hid), ATTN_ERR_UNSUPPORTED);
    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_add(cap, "*", 0, 0, 0, 0));
    CHECK_OK(attn_pretrained_capture(m, NULL, 0, x, IMG, IMG, cap));
    CHECK(attn_capture_count(cap) == NL, "%zu records", attn_capture_count(cap));
    attn_capture_record rec;
    CHECK_OK(attn_capture_find(cap, "layers.1.self_attn", &rec));
    for (int64_t q = 0; q < rec.heads * rec.rows; q++) {
        double s = 0;
        for (int64_t k = 0; k < rec.nk; k++) s += rec.weights[q * rec.nk + k];
        CHECK(rec.nk == T && fabs(s - 1) < 1e-5, "row %lld sums to %g over %lld keys", (long long)q, s,
              (long long)rec.nk);
    }
    CHECK_STATUS(attn_pretrained_capture(m, ids, 2, NULL, 0, 0, cap), ATTN_ERR_INVALID_ARGUMENT);
    attn_capture_free(cap);
}

/* An image of the model's size is not resized: the fused normalisation of its bytes exactly. */
static void test_prep(attn_pretrained *m) {
    static uint8_t px[IMG * IMG * 3];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 37 + 11);
    attn_image img = {IMG, IMG, 3, px};
    static float out[3 * IMG * IMG];
    CHECK_OK(attn_pretrained_image_input(m, &img, out));
    const double mean[3] = {0.485, 0.456, 0.406}, std[3] = {0.229, 0.224, 0.225};
    int bad = 0;
    for (int c = 0; c < 3; c++) {
        const float mm = (float)mean[c] * 255.0f, ss = (float)std[c] * 255.0f;
        for (int i = 0; i < IMG * IMG; i++) {
            float want = (float)px[i * 3 + c] - mm;
            want = want / ss;
            bad += out[c * IMG * IMG + i] != want;
        }
    }
    CHECK(bad == 0, "%d pixels differ from (x - mean / factor) / (std / factor)", bad);
    static uint8_t gray[9 * 7];
    memset(gray, 128, sizeof gray);
    attn_image g = {7, 9, 1, gray};
    CHECK_OK(attn_pretrained_image_input(m, &g, out)); /* resized 9x7 -> 16x16, gray replicated: constant */
    for (int i = 0; i < IMG * IMG; i++)
        CHECK(isfinite(out[i]) && out[i] == out[0], "constant gray at %d: %g", i, out[i]);
}

static void test_valid(void) {
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(folder("valid", NULL, NULL, NULL, "vit.embeddings.mask_token", PREP), &m));
    if (!m) return;
    test_calls(m);
    test_prep(m);
    attn_pretrained_free(m);
    /* no preprocessor_config.json: ViTImageProcessor's defaults (mean = std = 0.5) */
    CHECK_OK(attn_pretrained_open(folder("noprep", NULL, NULL, NULL, NULL, NULL), &m));
    if (!m) return;
    static uint8_t px[IMG * IMG * 3];
    memset(px, 255, sizeof px);
    attn_image img = {IMG, IMG, 3, px};
    static float out[3 * IMG * IMG];
    CHECK_OK(attn_pretrained_image_input(m, &img, out));
    CHECK(out[0] == 1.0f && out[3 * IMG * IMG - 1] == 1.0f, "white = %g with mean = std = 0.5", out[0]);
    attn_image gray = {IMG, IMG, 1, px};
    CHECK_STATUS(attn_pretrained_image_input(m, &gray, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "do_convert_rgb") != NULL, "message: %s", attn_last_error());
    attn_pretrained_free(m);
}

typedef struct hostile {
    const char *name, *key, *value, *skip, *extra, *prep;
    attn_status want;
    const char *word;
} hostile;

static const hostile HOSTILE[] = {
    {"act", "hidden_act", "\"swish\"", NULL, NULL, NULL, ATTN_ERR_UNSUPPORTED, "hidden_act"},
    {"layers", "num_hidden_layers", "100000", NULL, NULL, NULL, ATTN_ERR_SHAPE, "num_hidden_layers"},
    {"layers_type", "num_hidden_layers", "\"2\"", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "num_hidden_layers"},
    {"heads", "num_attention_heads", "3", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "num_attention_heads"},
    {"image_str", "image_size", "\"big\"", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "image_size"},
    {"image_list", "image_size", "[16]", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "image_size"},
    {"image_huge", "image_size", "1000000000000", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "image_size"},
    {"image_other", "image_size", "[16, 24]", NULL, NULL, NULL, ATTN_ERR_SHAPE, "position_embeddings"},
    {"patch", "patch_size", "32", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "patch_size"},
    {"channels", "num_channels", "0", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "num_channels"},
    {"eps", "layer_norm_eps", "0", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "layer_norm_eps"},
    {"qkv", "qkv_bias", "\"yes\"", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "qkv_bias"},
    {"qkv_false", "qkv_bias", "false", NULL, NULL, NULL, ATTN_ERR_NOT_FOUND, "q_proj.bias"},
    {"labels_type", "id2label", "{\"0\": 5, \"1\": \"dog\", \"2\": \"bird\"}", NULL, NULL, NULL,
     ATTN_ERR_INVALID_ARGUMENT, "id2label"},
    {"labels_gap", "id2label", "{\"0\": \"cat\", \"5\": \"dog\", \"2\": \"bird\"}", NULL, NULL, NULL,
     ATTN_ERR_INVALID_ARGUMENT, "id2label"},
    {"labels_count", "id2label", "{\"0\": \"cat\", \"1\": \"dog\"}", NULL, NULL, NULL, ATTN_ERR_SHAPE,
     "classifier.weight"},
    {"labels_array", "id2label", "[\"cat\"]", NULL, NULL, NULL, ATTN_ERR_INVALID_ARGUMENT, "id2label"},
    {"missing", NULL, NULL, "vit.layers.1.mlp.fc1.bias", NULL, NULL, ATTN_ERR_NOT_FOUND, "vit.layers.1.mlp.fc1.bias"},
    {"unexpected", NULL, NULL, NULL, "decoder.bias", NULL, ATTN_ERR_NOT_FOUND, "decoder.bias"},
    /* preprocessor_config.json */
    {"p_json", NULL, NULL, NULL, NULL, "{\"do_resize\": tru", ATTN_ERR_INVALID_ARGUMENT, "preprocessor_config.json"},
    {"p_root", NULL, NULL, NULL, NULL, "[1, 2]", ATTN_ERR_INVALID_ARGUMENT, "preprocessor_config.json"},
    {"p_mean_len", NULL, NULL, NULL, NULL, "{\"image_mean\": [0.5, 0.5]}", ATTN_ERR_INVALID_ARGUMENT, "image_mean"},
    {"p_mean_type", NULL, NULL, NULL, NULL, "{\"image_mean\": \"gray\"}", ATTN_ERR_INVALID_ARGUMENT, "image_mean"},
    {"p_std_zero", NULL, NULL, NULL, NULL, "{\"image_std\": [0.5, 0, 0.5]}", ATTN_ERR_INVALID_ARGUMENT, "image_std"},
    {"p_short", NULL, NULL, NULL, NULL, "{\"size\": {\"shortest_edge\": 224}}", ATTN_ERR_UNSUPPORTED,
     "size.shortest_edge"},
    {"p_huge", NULL, NULL, NULL, NULL, "{\"size\": {\"height\": 1000000000000, \"width\": 16}}",
     ATTN_ERR_INVALID_ARGUMENT, "height"},
    {"p_neg", NULL, NULL, NULL, NULL, "{\"size\": {\"height\": -3, \"width\": 16}}", ATTN_ERR_INVALID_ARGUMENT,
     "height"},
    {"p_resample", NULL, NULL, NULL, NULL, "{\"resample\": 3}", ATTN_ERR_UNSUPPORTED, "resample"},
    {"p_crop", NULL, NULL, NULL, NULL, "{\"do_center_crop\": true}", ATTN_ERR_UNSUPPORTED, "do_center_crop"},
    {"p_pad", NULL, NULL, NULL, NULL, "{\"do_pad\": true}", ATTN_ERR_UNSUPPORTED, "do_pad"},
    {"p_unknown", NULL, NULL, NULL, NULL, "{\"do_magic\": true}", ATTN_ERR_UNSUPPORTED, "do_magic"},
    {"p_bool", NULL, NULL, NULL, NULL, "{\"do_resize\": \"yes\"}", ATTN_ERR_INVALID_ARGUMENT, "do_resize"},
    {"p_factor", NULL, NULL, NULL, NULL, "{\"rescale_factor\": -1}", ATTN_ERR_INVALID_ARGUMENT, "rescale_factor"},
};

static void test_hostile(void) {
    for (size_t i = 0; i < sizeof HOSTILE / sizeof HOSTILE[0]; i++) {
        const hostile *h = &HOSTILE[i];
        attn_pretrained *m = NULL;
        CHECK_STATUS(attn_pretrained_open(folder(h->name, h->key, h->value, h->skip, h->extra, h->prep), &m), h->want);
        CHECK(m == NULL, "%s: a model came back", h->name);
        attn_pretrained_free(m);
        CHECK(strstr(attn_last_error(), h->word) != NULL, "%s: message lacks '%s': %s", h->name, h->word,
              attn_last_error());
    }
    /* a size the model does not take, and no resize: refused when preprocessing, naming both */
    attn_pretrained *m = NULL;
    CHECK_OK(attn_pretrained_open(
        folder("p_size", NULL, NULL, NULL, NULL, "{\"size\": {\"height\": 24, \"width\": 16}}"), &m));
    static uint8_t px[IMG * IMG * 3];
    attn_image img = {IMG, IMG, 3, px};
    static float out[3 * IMG * IMG];
    CHECK_STATUS(attn_pretrained_image_input(m, &img, out), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "24x16") && strstr(attn_last_error(), "16x16"), "message: %s", attn_last_error());
    attn_pretrained_free(m);
    CHECK_OK(attn_pretrained_open(folder("p_noresize", NULL, NULL, NULL, NULL, "{\"do_resize\": false}"), &m));
    attn_image small = {8, 8, 3, px};
    CHECK_STATUS(attn_pretrained_image_input(m, &small, out), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "do_resize") != NULL, "message: %s", attn_last_error());
    attn_pretrained_free(m);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/attn_test_pretrained_vit.XXXXXX");
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    size_t row = 0;
    while (attn_pretrained_family_name(row) && strcmp(attn_pretrained_family_name(row), "vit")) row++;
    CHECK(attn_pretrained_family_name(row) != NULL, "\"vit\" is not in the family table (%zu rows)", row);
    test_valid();
    test_hostile();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (test_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return test_summary("test_pretrained_vit");
}
