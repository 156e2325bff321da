/* Parameter name maps: rule matching and capture substitution (both directions), bad rules, a
 * buffer too small, and an encoder saved and loaded under torchvision's ViT encoder names: round
 * trip bitwise, a file of attn's own names refused (naming the missing mapped names, nothing
 * modified), strict mode's unexpected names, shape errors and conversions under their names, and
 * two parameters mapped to one name. */
#define _POSIX_C_SOURCE 200809L

#include <unistd.h>

#include "test_util.h"

/* attn's encoder names to torchvision's ViT encoder (vision_transformer.py's Encoder). */
static const attn_name_rule vit_rules[] = {
    {"layers.*.self_attn.", "encoder.layers.encoder_layer_*.self_attention."},
    {"layers.*.norm1.", "encoder.layers.encoder_layer_*.ln_1."},
    {"layers.*.norm2.", "encoder.layers.encoder_layer_*.ln_2."},
    {"layers.*.linear1.", "encoder.layers.encoder_layer_*.mlp.0."},
    {"layers.*.linear2.", "encoder.layers.encoder_layer_*.mlp.3."},
    {"norm.", "encoder.ln."},
};
static const attn_name_map vit = {vit_rules, sizeof vit_rules / sizeof vit_rules[0]};

static void expect_apply(const attn_name_map *map, const char *ours, const char *theirs) {
    char buf[128];
    CHECK_OK(attn_name_map_apply(map, ours, buf, sizeof buf));
    CHECK(!strcmp(buf, theirs), "apply '%s': got '%s', want '%s'", ours, buf, theirs);
}

static void expect_unapply(const attn_name_map *map, const char *theirs, const char *ours) {
    char buf[128];
    CHECK_OK(attn_name_map_unapply(map, theirs, buf, sizeof buf));
    CHECK(!strcmp(buf, ours), "unapply '%s': got '%s', want '%s'", theirs, buf, ours);
}

static attn_encoder *make_encoder(uint64_t seed) {
    attn_stack_config c = attn_stack_config_default(8, 2, 2);
    c.layer.dim_feedforward = 16;
    attn_encoder *e = NULL;
    CHECK_OK(attn_encoder_create(&c, &e));
    if (e) CHECK_OK(attn_params_reset(attn_encoder_params(e), seed));
    return e;
}

/* Every parameter of a and b equal bitwise. */
static int params_equal(const attn_params *a, const attn_params *b) {
    if (attn_params_count(a) != attn_params_count(b)) return 0;
    for (size_t i = 0; i < attn_params_count(a); i++) {
        const attn_param *p = attn_params_get(a, i), *q = attn_params_get(b, i);
        if (p->numel != q->numel || memcmp(p->data, q->data, p->numel * sizeof(float))) return 0;
    }
    return 1;
}

static void test_rules(void) {
    expect_apply(&vit, "layers.0.self_attn.in_proj_weight",
                 "encoder.layers.encoder_layer_0.self_attention.in_proj_weight");
    expect_apply(&vit, "layers.11.self_attn.out_proj.bias",
                 "encoder.layers.encoder_layer_11.self_attention.out_proj.bias");
    expect_apply(&vit, "layers.3.linear1.weight", "encoder.layers.encoder_layer_3.mlp.0.weight");
    expect_apply(&vit, "layers.3.norm2.bias", "encoder.layers.encoder_layer_3.ln_2.bias");
    expect_apply(&vit, "norm.weight", "encoder.ln.weight");
    expect_apply(&vit, "head.weight", "head.weight");                   /* no rule: kept */
    expect_apply(&vit, "x.norm.weight", "x.norm.weight");               /* rules match a prefix only */
    expect_apply(&vit, "layers..norm1.weight", "layers..norm1.weight"); /* '*' is never empty */
    expect_apply(&vit, "layers.0.1.norm1.w", "layers.0.1.norm1.w");     /* nor holds a '.' */
    expect_unapply(&vit, "encoder.layers.encoder_layer_7.mlp.3.weight", "layers.7.linear2.weight");
    expect_unapply(&vit, "encoder.ln.bias", "norm.bias");
    expect_unapply(&vit, "class_token", "class_token");
    expect_apply(NULL, "layers.0.norm1.weight", "layers.0.norm1.weight");
    const attn_name_map none = {NULL, 0};
    expect_apply(&none, "norm.bias", "norm.bias");

    /* several captures, in order; a '*' inside a segment (longest run that lets the rest match);
     * a trailing '*' takes the whole segment; the first matching rule wins */
    const attn_name_rule r[] = {
        {"a.*.b.*.", "x_*_*."},  {"*_weight", "W_*"}, {"blocks.*", "layers.*"},
        {"blocks.0.", "never."}, {"p*q.", "P*Q."},
    };
    const attn_name_map m = {r, 5};
    expect_apply(&m, "a.1.b.22.w", "x_1_22.w");
    expect_unapply(&m, "x_1_22.w", "a.1.b.22.w");
    expect_apply(&m, "in_proj_weight", "W_in_proj");
    expect_apply(&m, "in_proj_weight.x", "W_in_proj.x");
    expect_apply(&m, "a_weight_weight", "W_a_weight");
    expect_apply(&m, "blocks.12.mlp", "layers.12.mlp");
    expect_apply(&m, "blocks.0.mlp", "layers.0.mlp");
    expect_apply(&m, "pxqyq.z", "PxqyQ.z");
    expect_apply(&m, "pq.z", "pq.z");

    /* every encoder name goes there and back */
    attn_encoder *e = make_encoder(1);
    if (!e) return;
    const attn_params *ps = attn_encoder_params(e);
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const char *name = attn_params_get(ps, i)->name;
        char theirs[128], back[128];
        CHECK_OK(attn_name_map_apply(&vit, name, theirs, sizeof theirs));
        CHECK(!strncmp(theirs, "encoder.", 8), "'%s' mapped to '%s'", name, theirs);
        CHECK_OK(attn_name_map_unapply(&vit, theirs, back, sizeof back));
        CHECK(!strcmp(back, name), "'%s' -> '%s' -> '%s'", name, theirs, back);
    }
    attn_encoder_free(e);
}

static void expect_bad_map(const attn_name_map *map, const char *needle) {
    char buf[64];
    CHECK_STATUS(attn_name_map_apply(map, "norm.weight", buf, sizeof buf), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), needle) != NULL, "bad map message '%s' lacks '%s'", attn_last_error(), needle);
}

static void test_bad_rules_and_buffers(void) {
    const attn_name_rule stars[] = {{"norm.", "ln."}, {"layers.*.norm1.", "blocks.ln1."}};
    const attn_name_map m1 = {stars, 2};
    expect_bad_map(&m1, "rule 1 (\"layers.*.norm1.\" -> \"blocks.ln1.\"): 1 '*' in ours, 0 in theirs");
    const attn_name_rule empty[] = {{"", "ln."}};
    const attn_name_map m2 = {empty, 1};
    expect_bad_map(&m2, "rule 0 (\"\" -> \"ln.\"): empty pattern");
    const attn_name_rule null[] = {{"norm.", NULL}};
    const attn_name_map m3 = {null, 1};
    expect_bad_map(&m3, "rule 0 (\"norm.\" -> \"(NULL)\"): empty pattern");
    const attn_name_rule dbl[] = {{"a.**.", "b.**."}};
    const attn_name_map m4 = {dbl, 1};
    expect_bad_map(&m4, "\"**\"");
    const attn_name_rule many[] = {{"*.*.*.*.*.*.*.*.*.", "*.*.*.*.*.*.*.*.*."}};
    const attn_name_map m5 = {many, 1};
    expect_bad_map(&m5, "ATTN_NAME_MAP_MAX_STARS");
    const attn_name_map m6 = {NULL, 3};
    expect_bad_map(&m6, "rules NULL");
    char buf[64];
    CHECK_STATUS(attn_name_map_unapply(&m1, "ln.weight", buf, sizeof buf), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_name_map_unapply") != NULL, "message: %s", attn_last_error());

    /* buffers: exactly the length does not fit (the NUL), one more does */
    const char *theirs = "encoder.layers.encoder_layer_5.ln_1.weight";
    const size_t len = strlen(theirs);
    CHECK_STATUS(attn_name_map_apply(&vit, "layers.5.norm1.weight", buf, len), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "layers.5.norm1.weight") && strstr(attn_last_error(), "too small") &&
              strstr(attn_last_error(), "need 43 bytes"),
          "message: %s", attn_last_error());
    CHECK(strlen(buf) == len - 1 && !strncmp(buf, theirs, len - 1), "truncated: '%s'", buf);
    CHECK_OK(attn_name_map_apply(&vit, "layers.5.norm1.weight", buf, len + 1));
    CHECK(!strcmp(buf, theirs), "got '%s'", buf);
    CHECK_STATUS(attn_name_map_apply(&vit, "norm.weight", NULL, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_name_map_apply(&vit, "norm.weight", NULL, 8), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_name_map_apply(&vit, NULL, buf, sizeof buf), ATTN_ERR_INVALID_ARGUMENT);

    /* a bad map fails a load before anything is read */
    attn_encoder *e = make_encoder(1), *e2 = make_encoder(2);
    if (!e || !e2) {
        attn_encoder_free(e);
        attn_encoder_free(e2);
        return;
    }
    attn_safetensors_writer *w = NULL;
    void *mem = NULL;
    size_t bytes = 0;
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    CHECK_OK(attn_params_write(attn_encoder_params(e), w, NULL));
    CHECK_OK(attn_safetensors_writer_write_memory(w, &mem, &bytes));
    CHECK_OK(attn_safetensors_open_memory(mem, bytes, &st));
    CHECK_STATUS(attn_params_load_mapped(attn_encoder_params(e2), st, &m1, NULL, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_params_load_mapped: name map rule 1") != NULL, "message: %s",
          attn_last_error());
    CHECK_STATUS(attn_params_write_mapped(attn_encoder_params(e2), w, &m2, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(!params_equal(attn_encoder_params(e), attn_encoder_params(e2)), "loaded through a bad map");
    /* the identity map loads what attn_params_write wrote */
    const attn_name_map id = {NULL, 0};
    CHECK_OK(attn_params_load_mapped(attn_encoder_params(e2), st, &id, NULL, 1));
    CHECK(params_equal(attn_encoder_params(e), attn_encoder_params(e2)), "identity map load");
    attn_safetensors_close(st);
    free(mem);
    attn_safetensors_writer_free(w);
    attn_encoder_free(e);
    attn_encoder_free(e2);
}

static void test_files(const char *dir) {
    attn_encoder *e = make_encoder(1), *e2 = make_encoder(2), *e3 = make_encoder(2);
    if (!e || !e2 || !e3) goto done;
    const attn_params *ps = attn_encoder_params(e), *ps2 = attn_encoder_params(e2), *ps3 = attn_encoder_params(e3);
    const size_t n = attn_params_count(ps);
    CHECK(!params_equal(ps, ps2), "seeds 1 and 2 give the same parameters");

    /* round trip under the mapped names, bitwise */
    char path[512], plain[512];
    snprintf(path, sizeof path, "%s/vit.safetensors", dir);
    snprintf(plain, sizeof plain, "%s/attn.safetensors", dir);
    CHECK_OK(attn_params_save_file_mapped(ps, path, &vit));
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (st) {
        CHECK(attn_safetensors_count(st) == n, "%zu tensors for %zu parameters", attn_safetensors_count(st), n);
        CHECK(attn_safetensors_find(st, "encoder.layers.encoder_layer_1.mlp.3.bias") &&
                  attn_safetensors_find(st, "encoder.layers.encoder_layer_0.self_attention.out_proj.weight") &&
                  attn_safetensors_find(st, "encoder.ln.weight") && !attn_safetensors_find(st, "norm.weight"),
              "torchvision names in the file");
        attn_safetensors_close(st);
        st = NULL;
    }
    CHECK_OK(attn_params_load_file_mapped(ps2, path, &vit));
    CHECK(params_equal(ps, ps2), "save_file_mapped -> load_file_mapped not bitwise");

    /* a file of attn's own names, under the map: every mapped name missing, every tensor
     * unexpected, nothing modified */
    CHECK_OK(attn_params_save_file(ps, plain));
    CHECK_STATUS(attn_params_load_file_mapped(ps3, plain, &vit), ATTN_ERR_NOT_FOUND);
    const char *msg = attn_last_error();
    char want[160];
    snprintf(want, sizeof want,
             "%zu problems with the weights: missing (%zu): "
             "encoder.layers.encoder_layer_0.self_attention.in_proj_weight, ",
             2 * n, n);
    CHECK(strstr(msg, "attn_params_load_file_mapped: ") && strstr(msg, want) && strstr(msg, "unexpected (") &&
              strstr(msg, "layers.0.self_attn.in_proj_weight"),
          "message: %s", msg);
    CHECK(!params_equal(ps, ps3), "a failed load modified the parameters");
    CHECK_OK(attn_safetensors_open_file(plain, &st));
    if (st) {
        CHECK_STATUS(attn_params_load_mapped(ps3, st, &vit, NULL, 0), ATTN_ERR_NOT_FOUND);
        CHECK(strstr(attn_last_error(), "missing (") && !strstr(attn_last_error(), "unexpected"),
              "non-strict message: %s", attn_last_error());
        attn_safetensors_close(st);
        st = NULL;
    }
    /* and the other way: the mapped file without the map */
    CHECK_STATUS(attn_params_load_file(ps3, path), ATTN_ERR_NOT_FOUND);
    CHECK(strstr(attn_last_error(), "attn_params_load_file: ") && strstr(attn_last_error(), "missing (") &&
              strstr(attn_last_error(), "layers.0.self_attn.in_proj_weight"),
          "message: %s", attn_last_error());
    CHECK(!params_equal(ps, ps3), "a failed load modified the parameters");
    unlink(path);
    unlink(plain);
done:
    attn_encoder_free(e);
    attn_encoder_free(e2);
    attn_encoder_free(e3);
}

/* One writer: the encoder's parameters under prefix + mapped names, plus extra tensors. */
static attn_safetensors *open_written(attn_safetensors_writer *w, void **mem) {
    size_t bytes = 0;
    attn_safetensors *st = NULL;
    *mem = NULL;
    CHECK_OK(attn_safetensors_writer_write_memory(w, mem, &bytes));
    CHECK_OK(attn_safetensors_open_memory(*mem, bytes, &st));
    attn_safetensors_writer_free(w);
    return st;
}

static void test_strict_and_errors(void) {
    attn_encoder *e = make_encoder(1), *e2 = make_encoder(2);
    if (!e || !e2) goto done;
    const attn_params *ps = attn_encoder_params(e), *ps2 = attn_encoder_params(e2);
    const int64_t s3[1] = {3}, s8[1] = {8};
    const float extra[3] = {1, 2, 3};
    void *mem = NULL;

    /* under a prefix, with a tensor outside it (ignored) and one inside no parameter gives */
    attn_safetensors_writer *w = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    CHECK_OK(attn_params_write_mapped(ps, w, &vit, "model."));
    CHECK_OK(attn_safetensors_writer_add(w, "other.x", ATTN_DTYPE_F32, 1, s3, extra));
    CHECK_OK(attn_safetensors_writer_add(w, "model.class_token", ATTN_DTYPE_F32, 1, s3, extra));
    attn_safetensors *st = open_written(w, &mem);
    if (st) {
        CHECK(attn_safetensors_find(st, "model.encoder.ln.bias") != NULL, "prefixed mapped name");
        CHECK_STATUS(attn_params_load_mapped(ps2, st, &vit, "model.", 1), ATTN_ERR_NOT_FOUND);
        CHECK(strstr(attn_last_error(), "1 problem with the weights under prefix model.: unexpected (1): "
                                        "model.class_token") != NULL,
              "message: %s", attn_last_error());
        CHECK(!params_equal(ps, ps2), "a failed load modified the parameters");
        CHECK_OK(attn_params_load_mapped(ps2, st, &vit, "model.", 0));
        CHECK(params_equal(ps, ps2), "prefixed mapped load");
        /* under the identity map, the names are missing */
        CHECK_STATUS(attn_params_load_mapped(ps2, st, NULL, "model.", 0), ATTN_ERR_NOT_FOUND);
        CHECK(strstr(attn_last_error(), "model.layers.0.self_attn.in_proj_weight") != NULL, "message: %s",
              attn_last_error());
        attn_safetensors_close(st);
    }
    free(mem);

    /* shapes, dtypes and conversions, all under their names */
    CHECK_OK(attn_params_reset(ps2, 2));
    CHECK_OK(attn_safetensors_writer_create(&w));
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        char theirs[128];
        CHECK_OK(attn_name_map_apply(&vit, p->name, theirs, sizeof theirs));
        if (!strcmp(p->name, "layers.1.norm2.bias"))
            CHECK_OK(attn_safetensors_writer_add(w, theirs, ATTN_DTYPE_F32, 1, s3, extra));
        else if (!strcmp(p->name, "layers.0.norm1.bias"))
            CHECK_OK(attn_safetensors_writer_add(w, theirs, ATTN_DTYPE_I32, 1, s3, extra));
        else if (strcmp(p->name, "norm.weight"))
            CHECK_OK(attn_safetensors_writer_add(w, theirs, ATTN_DTYPE_F32, p->rank, p->shape, p->data));
    }
    double ln[8];
    for (int i = 0; i < 8; i++) ln[i] = 0.25 * (i + 1);
    CHECK_OK(attn_safetensors_writer_add(w, "encoder.ln.weight", ATTN_DTYPE_F64, 1, s8, ln));
    st = open_written(w, &mem);
    if (st) {
        CHECK_STATUS(attn_params_load_mapped(ps2, st, &vit, NULL, 1), ATTN_ERR_SHAPE);
        const char *msg = attn_last_error();
        CHECK(strstr(msg, "wrong shape (2): encoder.layers.encoder_layer_0.ln_1.bias [3] (expected [8]), "
                          "encoder.layers.encoder_layer_1.ln_2.bias [3] (expected [8])") &&
                  strstr(msg, "not floating point (1): encoder.layers.encoder_layer_0.ln_1.bias (I32)"),
              "message: %s", msg);
        attn_safetensors_close(st);
    }
    free(mem);
    CHECK_OK(attn_safetensors_writer_create(&w));
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        char theirs[128];
        CHECK_OK(attn_name_map_apply(&vit, p->name, theirs, sizeof theirs));
        if (strcmp(p->name, "norm.weight"))
            CHECK_OK(attn_safetensors_writer_add(w, theirs, ATTN_DTYPE_F32, p->rank, p->shape, p->data));
    }
    CHECK_OK(attn_safetensors_writer_add(w, "encoder.ln.weight", ATTN_DTYPE_F64, 1, s8, ln));
    st = open_written(w, &mem);
    if (st) {
        CHECK_OK(attn_params_load_mapped(ps2, st, &vit, NULL, 1));
        const attn_param *nw = attn_params_find(ps2, "norm.weight");
        int ok = nw != NULL;
        for (int i = 0; ok && i < 8; i++) ok = nw->data[i] == (float)ln[i];
        CHECK(ok, "F64 tensor converted under its mapped name");
        attn_safetensors_close(st);
    }
    free(mem);

    /* two parameters mapped to one name */
    const attn_name_rule dup[] = {{"layers.*.norm1.", "blocks.*.norm."}, {"layers.*.norm2.", "blocks.*.norm."}};
    const attn_name_map md = {dup, 2};
    CHECK_OK(attn_safetensors_writer_create(&w));
    CHECK_STATUS(attn_params_write_mapped(ps, w, &md, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "parameters 'layers.0.norm1.bias' and 'layers.0.norm2.bias' both map to "
                                    "'blocks.0.norm.bias'") != NULL,
          "message: %s", attn_last_error());
    CHECK_OK(attn_params_write(ps, w, NULL));
    st = open_written(w, &mem);
    if (st) {
        CHECK_STATUS(attn_params_load_mapped(ps2, st, &md, NULL, 0), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(strstr(attn_last_error(), "both map to") != NULL, "message: %s", attn_last_error());
        attn_safetensors_close(st);
    }
    free(mem);
    /* a rule's target colliding with a name no rule matches, under a prefix */
    const attn_name_rule col[] = {{"layers.0.norm1.", "norm."}};
    const attn_name_map mc = {col, 1};
    CHECK_OK(attn_safetensors_writer_create(&w));
    CHECK_STATUS(attn_params_write_mapped(ps, w, &mc, "m."), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "'layers.0.norm1.bias' and 'norm.bias' both map to 'm.norm.bias'") != NULL,
          "message: %s", attn_last_error());
    attn_safetensors_writer_free(w);
    CHECK_STATUS(attn_params_load_file_mapped(ps2, "/nonexistent/x.safetensors", NULL), ATTN_ERR_IO);
    CHECK_STATUS(attn_params_save_file_mapped(ps, "/nonexistent/x.safetensors", &mc), ATTN_ERR_INVALID_ARGUMENT);
done:
    attn_encoder_free(e);
    attn_encoder_free(e2);
}

int main(void) {
    char dir[] = "/tmp/attn_test_names.XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_rules();
    test_bad_rules_and_buffers();
    test_files(dir);
    test_strict_and_errors();
    rmdir(dir);
    return test_summary("test_nn_names");
}
