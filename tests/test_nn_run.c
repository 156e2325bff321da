/* `attn run` end to end: PyTorch fixtures (tests/parity/gen_nn_layers.py, gen_nn_mha.py) are split
 * into MODEL.json, W.safetensors (the state_dict) and IN.safetensors (forward arguments), the
 * built `attn` binary runs them, and OUT.safetensors is compared with PyTorch's output (and
 * attention weights). Then the documented failures: exit 1 with one "attn: " line for bad
 * configurations, weights and inputs; exit 2 for usage errors. The binary is found next to the
 * tests directory (build/attn); without it the test reports a failure. */
#define _POSIX_C_SOURCE 200809L
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static char attn_bin[1100], dir[256];

static int find_binary(void) {
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 0;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash) return 0;
    *slash = '\0';
    snprintf(attn_bin, sizeof attn_bin, "%s/../attn", self);
    return access(attn_bin, X_OK) == 0;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* Run attn with args (a shell fragment); returns the exit code, stderr in err. */
static int run_attn(const char *args, char *err, size_t err_len) {
    char cmd[4096], errf[512];
    snprintf(errf, sizeof errf, "%s/stderr.txt", dir);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >/dev/null 2>'%s'", dir, attn_bin, args, errf);
    int rc = system(cmd);
    err[0] = '\0';
    FILE *f = fopen(errf, "r");
    if (f) {
        size_t n = fread(err, 1, err_len - 1, f);
        err[n] = '\0';
        fclose(f);
    }
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int one_line(const char *err) {
    const char *nl = strchr(err, '\n');
    return !strncmp(err, "attn: ", 6) && nl && nl[1] == '\0';
}

static int is_reference(const char *rest) {
    static const char *refs[] = {"out", "dout", "weights", "dquery", "dkey", "dvalue", "dsrc", "dtgt", "dmemory"};
    if (!strncmp(rest, "p.", 2) || !strncmp(rest, "g.", 2)) return 1;
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        if (!strcmp(rest, refs[i])) return 1;
    return 0;
}

/* Split case ci of a fixture into the three files; returns 1 when written. */
static int split_case(const attn_safetensors *st, int ci, const char *module_default) {
    char key[128], path[512];
    snprintf(key, sizeof key, "case%d.module", ci);
    const char *module = attn_safetensors_metadata_find(st, key);
    if (!module) module = module_default;
    snprintf(key, sizeof key, "case%d.config", ci);
    const char *cfg = attn_safetensors_metadata_find(st, key);
    snprintf(key, sizeof key, "case%d.call", ci);
    const char *call = attn_safetensors_metadata_find(st, key);
    if (!cfg || !call) return 0;
    /* {"module": M, <config members>, <call members but self_attention>} */
    char json[2048];
    int o = snprintf(json, sizeof json, "{\"module\": \"%s\"", module);
    const char *body = strchr(cfg, '{') + 1;
    size_t bl = strlen(body) - 1; /* without the closing brace */
    while (bl > 0 && body[bl] != '}') bl--;
    if (strspn(body, " ") < bl) o += snprintf(json + o, sizeof json - (size_t)o, ", %.*s", (int)bl, body);
    const char *opts[] = {"is_causal", "tgt_is_causal", "need_weights", "average_attn_weights"};
    for (size_t i = 0; i < 4; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\": true", opts[i]);
        if (strstr(call, pat)) o += snprintf(json + o, sizeof json - (size_t)o, ", \"%s\": true", opts[i]);
        snprintf(pat, sizeof pat, "\"%s\": false", opts[i]);
        if (strstr(call, pat)) o += snprintf(json + o, sizeof json - (size_t)o, ", \"%s\": false", opts[i]);
    }
    snprintf(json + o, sizeof json - (size_t)o, "}\n");
    snprintf(path, sizeof path, "%s/model.json", dir);
    write_text(path, json);
    attn_safetensors_writer *w = NULL, *in = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    CHECK_OK(attn_safetensors_writer_create(&in));
    char pre[32];
    const int lp = snprintf(pre, sizeof pre, "case%d.", ci);
    for (size_t i = 0; i < attn_safetensors_count(st); i++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(st, i);
        if (strncmp(t->name, pre, (size_t)lp)) continue;
        const char *rest = t->name + lp;
        if (!strncmp(rest, "p.", 2))
            CHECK_OK(attn_safetensors_writer_add(w, rest + 2, t->dtype, t->rank, t->shape, t->data));
        else if (!is_reference(rest))
            CHECK_OK(attn_safetensors_writer_add(in, rest, t->dtype, t->rank, t->shape, t->data));
    }
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    CHECK_OK(attn_safetensors_writer_write_file(w, path));
    snprintf(path, sizeof path, "%s/in.safetensors", dir);
    CHECK_OK(attn_safetensors_writer_write_file(in, path));
    attn_safetensors_writer_free(w);
    attn_safetensors_writer_free(in);
    return 1;
}

static void compare_out(const attn_safetensors *st, int ci, const char *ref_name, const char *out_name,
                        const char *ctx) {
    char key[128], path[512];
    snprintf(key, sizeof key, "case%d.%s", ci, ref_name);
    const attn_safetensors_tensor *rt = attn_safetensors_find(st, key);
    if (!rt) return;
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    attn_safetensors *out = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &out));
    if (!out) return;
    const attn_safetensors_tensor *ot = attn_safetensors_find(out, out_name);
    CHECK(ot && ot->rank == rt->rank && !memcmp(ot->shape, rt->shape, sizeof(int64_t) * (size_t)rt->rank),
          "%s: '%s' missing or mis-shaped", ctx, out_name);
    if (ot && ot->rank == rt->rank) {
        size_t n = 1;
        for (int d = 0; d < rt->rank; d++) n *= (size_t)rt->shape[d];
        float *a = xmalloc(sizeof(float) * n), *b = xmalloc(sizeof(float) * n);
        CHECK_OK(attn_safetensors_read_f32(out, out_name, a, n));
        CHECK_OK(attn_safetensors_read_f32(st, key, b, n));
        double e = rel_err_ff(a, b, n);
        CHECK(e <= 1e-5, "%s: %s rel err %.3g", ctx, out_name, e);
        printf("%s: %s rel err %.3g\n", ctx, out_name, e);
        free(a);
        free(b);
    }
    attn_safetensors_close(out);
}

static void run_fixture(const char *file, const char *module_default) {
    char path[1024], err[4096], ctx[128];
    snprintf(path, sizeof path, "%s/%s", fixture_dir(), file);
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (!st) return;
    const char *nc = attn_safetensors_metadata_find(st, "cases");
    const int n = nc ? atoi(nc) : 0;
    for (int ci = 0; ci < n; ci++) {
        if (!split_case(st, ci, module_default)) continue;
        snprintf(ctx, sizeof ctx, "%s case %d", file, ci);
        int rc = run_attn("run --config model.json --weights w.safetensors --inputs in.safetensors "
                          "--out out.safetensors --threads 2",
                          err, sizeof err);
        CHECK(rc == 0, "%s: attn run exit %d: %s", ctx, rc, err);
        if (rc) continue;
        compare_out(st, ci, "out", "output", ctx);
        compare_out(st, ci, "weights", "attn_output_weights", ctx);
    }
    attn_safetensors_close(st);
}

static void expect(int want_rc, const char *args, const char *needle) {
    char err[4096];
    int rc = run_attn(args, err, sizeof err);
    CHECK(rc == want_rc && (want_rc == 0 || one_line(err)) && (!needle || strstr(err, needle)),
          "attn %s: exit %d (want %d), stderr '%s' (want one 'attn: ' line with '%s')", args, rc, want_rc, err,
          needle ? needle : "");
}

/* attn run --help lists every module of the library's table, each followed by ',' or ';'. */
static void test_help_modules(void) {
    char cmd[2048], path[512], text[16384];
    snprintf(path, sizeof path, "%s/help.txt", dir);
    snprintf(cmd, sizeof cmd, "'%s' run --help >'%s'", attn_bin, path);
    CHECK(system(cmd) == 0, "attn run --help failed");
    FILE *f = fopen(path, "r");
    const size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    size_t i = 0;
    for (; attn_model_known(i); i++) {
        char comma[80], semi[80];
        snprintf(comma, sizeof comma, "%s,", attn_model_known(i));
        snprintf(semi, sizeof semi, "%s;", attn_model_known(i));
        CHECK(strstr(text, comma) || strstr(text, semi), "attn run --help does not list %s", attn_model_known(i));
    }
    CHECK(i >= 11, "%zu modules known", i);
}

static void test_errors(void) {
    char path[512];
    /* a valid encoder-layer set from the first layers fixture case remains in dir */
    expect(0, "run --help", NULL);
    expect(2, "run", "missing --config");
    expect(2, "run --config model.json --weights w.safetensors --inputs in.safetensors", "missing --out");
    expect(2, "run --config model.json --weights w.safetensors --inputs in.safetensors --out o.st --threads 0",
           "--threads");
    expect(2, "run --config model.json --bogus 1", "unknown option '--bogus'");
    expect(2, "run --config", "needs a value");
    expect(1, "run --config nothere.json --weights w.safetensors --inputs in.safetensors --out o.st", "nothere.json");
    snprintf(path, sizeof path, "%s/bad1.json", dir);
    write_text(path, "{\"module\": \"rnn\"}");
    expect(1, "run --config bad1.json --weights w.safetensors --inputs in.safetensors --out o.st",
           "unknown module 'rnn'");
    snprintf(path, sizeof path, "%s/bad2.json", dir);
    write_text(path, "{\"module\": \"transformer_encoder_layer\", \"d_model\": 16, \"nhead\": 4, \"dim_feedfwd\": 8}");
    expect(1, "run --config bad2.json --weights w.safetensors --inputs in.safetensors --out o.st",
           "unknown key 'dim_feedfwd'");
    snprintf(path, sizeof path, "%s/bad3.json", dir);
    write_text(path, "{\"module\": \"transformer_encoder_layer\", \"d_model\": 16,}");
    expect(1, "run --config bad3.json --weights w.safetensors --inputs in.safetensors --out o.st", "bad3.json");
    /* weights of another shape: dim_feedforward 64 instead of the fixture's */
    snprintf(path, sizeof path, "%s/bad4.json", dir);
    write_text(path,
               "{\"module\": \"transformer_encoder_layer\", \"d_model\": 16, \"nhead\": 4, \"dim_feedforward\": 64}");
    expect(1, "run --config bad4.json --weights w.safetensors --inputs in.safetensors --out o.st",
           "wrong shape (3): linear1.weight [32, 16] (expected [64, 16])");
    /* weights file given as inputs and the other way round */
    expect(1, "run --config model.json --weights in.safetensors --inputs in.safetensors --out o.st", "missing (");
    expect(1, "run --config model.json --weights w.safetensors --inputs w.safetensors --out o.st",
           "missing input 'src'");
    expect(1, "run --config model.json --weights w.safetensors --inputs nothere.safetensors --out o.st",
           "nothere.safetensors");
    /* an input of the wrong width */
    float x[2 * 3 * 5] = {0};
    const int64_t shape[3] = {2, 3, 5};
    attn_safetensors_writer *w = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    CHECK_OK(attn_safetensors_writer_add(w, "src", ATTN_DTYPE_F32, 3, shape, x));
    snprintf(path, sizeof path, "%s/badin.safetensors", dir);
    CHECK_OK(attn_safetensors_writer_write_file(w, path));
    attn_safetensors_writer_free(w);
    expect(1, "run --config model.json --weights w.safetensors --inputs badin.safetensors --out o.st",
           "input 'src' has shape [2, 3, 5], expected [batch, length, 16]");
    expect(1, "run --config model.json --weights w.safetensors --inputs in.safetensors --out /nonexistent/o.st",
           "/nonexistent/o.st");
}

/* vision_transformer: torchvision's weights (tests/parity/gen_vit.py case 0) under its own names,
 * x [B, 3, 16, 16]; the logits against torchvision's. */
static void run_vit(void) {
    char path[1024], err[4096];
    snprintf(path, sizeof path, "%s/vit.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (!st) return;
    attn_safetensors_writer *w = NULL, *in = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    CHECK_OK(attn_safetensors_writer_create(&in));
    for (size_t i = 0; w && i < attn_safetensors_count(st); i++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(st, i);
        if (!strncmp(t->name, "case0.p.", 8))
            CHECK_OK(attn_safetensors_writer_add(w, t->name + 8, t->dtype, t->rank, t->shape, t->data));
        if (!strcmp(t->name, "case0.x"))
            CHECK_OK(attn_safetensors_writer_add(in, "x", t->dtype, t->rank, t->shape, t->data));
    }
    snprintf(path, sizeof path, "%s/vit_w.safetensors", dir);
    CHECK_OK(attn_safetensors_writer_write_file(w, path));
    snprintf(path, sizeof path, "%s/vit_in.safetensors", dir);
    CHECK_OK(attn_safetensors_writer_write_file(in, path));
    attn_safetensors_writer_free(w);
    attn_safetensors_writer_free(in);
    snprintf(path, sizeof path, "%s/vit.json", dir);
    write_text(path, "{\"module\": \"vision_transformer\", \"image_size\": 16, \"patch_size\": 4, "
                     "\"num_layers\": 2, \"num_heads\": 2, \"hidden_dim\": 16, \"mlp_dim\": 32, "
                     "\"num_classes\": 10}");
    int rc = run_attn("run --config vit.json --weights vit_w.safetensors --inputs vit_in.safetensors "
                      "--out out.safetensors --threads 2",
                      err, sizeof err);
    CHECK(rc == 0, "vision_transformer: attn run exit %d: %s", rc, err);
    if (!rc) compare_out(st, 0, "logits", "output", "vision_transformer");
    attn_safetensors_close(st);
    /* errors: the input's shape, the weights' names and torchvision's arguments */
    expect(1, "run --config vit.json --weights vit_w.safetensors --inputs w.safetensors --out o.st",
           "missing input 'x'");
    expect(1, "run --config vit.json --weights w.safetensors --inputs vit_in.safetensors --out o.st",
           "encoder.layers.encoder_layer_0.self_attention.in_proj_weight");
    snprintf(path, sizeof path, "%s/vit2.json", dir);
    write_text(path, "{\"module\": \"vision_transformer\", \"image_size\": 8, \"patch_size\": 4, "
                     "\"num_layers\": 2, \"num_heads\": 2, \"hidden_dim\": 16, \"mlp_dim\": 32, "
                     "\"num_classes\": 10}");
    expect(1, "run --config vit2.json --weights vit_w.safetensors --inputs vit_in.safetensors --out o.st",
           "encoder.pos_embedding");
    snprintf(path, sizeof path, "%s/vit3.json", dir);
    write_text(path, "{\"module\": \"vision_transformer\", \"image_size\": 16, \"patch_size\": 4, "
                     "\"num_layers\": 2, \"num_heads\": 2, \"hidden_dim\": 16, \"mlp_dim\": 32}");
    expect(1, "run --config vit3.json --weights vit_w.safetensors --inputs vit_in.safetensors --out o.st",
           "heads.head.weight");
    snprintf(path, sizeof path, "%s/vit4.json", dir);
    write_text(path, "{\"module\": \"vision_transformer\", \"patch_size\": 4, \"num_layers\": 2, "
                     "\"num_heads\": 2, \"hidden_dim\": 16, \"mlp_dim\": 32}");
    expect(1, "run --config vit4.json --weights vit_w.safetensors --inputs vit_in.safetensors --out o.st",
           "image_size");
    snprintf(path, sizeof path, "%s/vit5.json", dir);
    write_text(path, "{\"module\": \"vision_transformer\", \"image_size\": 16, \"patch_size\": 4, "
                     "\"num_layers\": 2, \"num_heads\": 2, \"hidden_dim\": 16, \"mlp_dim\": 32, "
                     "\"num_classes\": 10, \"in_channels\": 1}");
    expect(1, "run --config vit5.json --weights vit_w.safetensors --inputs vit_in.safetensors --out o.st",
           "conv_proj.weight");
    /* an image of the wrong size */
    float x[3 * 8 * 8] = {0};
    const int64_t shape[4] = {1, 3, 8, 8};
    attn_safetensors_writer *bw = NULL;
    CHECK_OK(attn_safetensors_writer_create(&bw));
    CHECK_OK(attn_safetensors_writer_add(bw, "x", ATTN_DTYPE_F32, 4, shape, x));
    snprintf(path, sizeof path, "%s/vit_bad.safetensors", dir);
    CHECK_OK(attn_safetensors_writer_write_file(bw, path));
    attn_safetensors_writer_free(bw);
    expect(1, "run --config vit.json --weights vit_w.safetensors --inputs vit_bad.safetensors --out o.st",
           "input 'x' has shape [1, 3, 8, 8], expected [batch, 3, 16, 16]");
}

int main(void) {
    if (!find_binary()) {
        CHECK(0, "the attn binary is not at %s", attn_bin);
        return test_summary("test_nn_run");
    }
    snprintf(dir, sizeof dir, "/tmp/attn_test_nn_run.XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    run_fixture("nn_mha.safetensors", "multihead_attention");
    run_fixture("nn_layers.safetensors", NULL);
    /* leave case 0 of the layers fixture (an encoder layer) in dir for the error tests */
    char path[1024];
    snprintf(path, sizeof path, "%s/nn_layers.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (st) {
        split_case(st, 0, NULL);
        attn_safetensors_close(st);
    }
    test_errors();
    test_help_modules();
    run_vit();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_nn_run");
}
