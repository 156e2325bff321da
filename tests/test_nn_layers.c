/* Transformer layers, stacks and nn.Transformer against tests/parity/gen_nn_layers.py (outputs,
 * input and parameter gradients), driven through the by-name model runner of `attn run` (which is
 * thereby tested too; the MHA fixture runs through it as well); a directional finite-difference
 * check with dropout on; dropout determinism; bitwise determinism across thread counts; memory
 * that grows linearly in N; argument and configuration errors. */
#include "io/json.h"
#include "nn/nn_run.h"
#include "test_util.h"

#define OUT_TOL 1e-5
#define GRAD_TOL 1e-4

static double max_out_err, max_grad_err;

static attn_json_doc *parse(const char *s) {
    attn_json_doc *doc = NULL;
    if (!s || attn_json_parse(s, strlen(s), NULL, &doc, NULL) != ATTN_JSON_OK) return NULL;
    return doc;
}

/* {"module": NAME, ...config...} from the fixture's separate module name and config. */
static nn_model *model_from_fixture(const attn_safetensors *st, const char *pre, const char **module) {
    char key[128];
    snprintf(key, sizeof key, "%smodule", pre);
    const char *mod = attn_safetensors_metadata_find(st, key);
    snprintf(key, sizeof key, "%sconfig", pre);
    const char *cfg = attn_safetensors_metadata_find(st, key);
    if (!mod || !cfg) return NULL;
    *module = mod;
    const char *body = strchr(cfg, '{') + 1;
    while (*body == ' ') body++;
    size_t len = strlen(mod) + strlen(cfg) + 32;
    char *text = xmalloc(len);
    snprintf(text, len, "{\"module\": \"%s\"%s%s", mod, *body == '}' ? "" : ", ", body);
    attn_json_doc *doc = parse(text);
    nn_model *m = NULL;
    CHECK(doc != NULL, "config JSON: %s", text);
    if (doc) CHECK_OK(attn_nn_model_create(attn_json_root(doc), &m));
    attn_json_free(doc);
    free(text);
    return m;
}

static void compare(const char *ctx, const char *name, const float *got, const float *ref, size_t n, double tol,
                    double *worst) {
    double e = rel_err_ff(got, ref, n);
    if (e > *worst) *worst = e;
    CHECK(e <= tol, "%s: %s rel err %.3g > %.1g", ctx, name, e, tol);
}

/* One fixture case through the runner: forward, inference forward, backward, every gradient. */
static void parity_case(const attn_safetensors *st, const char *file, int ci, int is_mha) {
    char pre[32], key[300], ctx[160];
    snprintf(pre, sizeof pre, "case%d.", ci);
    const char *module = "multihead_attention";
    nn_model *m = NULL;
    if (is_mha) {
        snprintf(key, sizeof key, "%sconfig", pre);
        const char *cfg = attn_safetensors_metadata_find(st, key);
        char text[512];
        snprintf(text, sizeof text, "{\"module\": \"multihead_attention\", %s", strchr(cfg, '{') + 1);
        attn_json_doc *doc = parse(text);
        if (doc) CHECK_OK(attn_nn_model_create(attn_json_root(doc), &m));
        attn_json_free(doc);
    } else {
        m = model_from_fixture(st, pre, &module);
    }
    CHECK(m != NULL, "%s case %d: no model", file, ci);
    if (!m) return;
    snprintf(ctx, sizeof ctx, "%s case %d (%s)", file, ci, module);
    snprintf(key, sizeof key, "%scall", pre);
    attn_json_doc *call = parse(attn_safetensors_metadata_find(st, key));
    const attn_json *c = call ? attn_json_root(call) : NULL;
    for (size_t i = 0; i < attn_json_count(c); i++) {
        const char *name = attn_json_as_string(attn_json_member_key(c, i), NULL);
        int v = 0;
        attn_json_as_bool(attn_json_member_value(c, i), &v);
        if (!strcmp(name, "self_attention")) continue;
        CHECK_OK(attn_nn_model_set_option(m, name, v));
    }
    attn_json_free(call);
    snprintf(key, sizeof key, "%sp.", pre);
    CHECK_OK(attn_params_load(attn_nn_model_params(m), st, key, 1));
    CHECK_OK(attn_nn_model_bind(m, st, pre, 0));
    CHECK_OK(attn_params_zero_grad(attn_nn_model_params(m)));
    CHECK_OK(attn_nn_model_forward(m, 1, 0, 0, 0));
    size_t n;
    int rank;
    int64_t shape[4];
    snprintf(key, sizeof key, "%sout", pre);
    float *ref = fx_floats(st, key, &n);
    const float *out = attn_nn_model_output(m, &rank, shape);
    CHECK(out && ref && (size_t)(shape[0] * shape[1] * shape[2]) == n, "%s: output shape", ctx);
    if (!out || !ref) {
        free(ref);
        attn_nn_model_free(m);
        return;
    }
    compare(ctx, "output", out, ref, n, OUT_TOL, &max_out_err);
    float *kept = xmalloc(sizeof(float) * n);
    memcpy(kept, out, sizeof(float) * n);
    snprintf(key, sizeof key, "%sweights", pre);
    float *refw = fx_floats(st, key, NULL);
    if (refw) {
        int64_t ws[4];
        const float *w = attn_nn_model_weights(m, &rank, ws);
        size_t nw = 1;
        for (int d = 0; d < rank; d++) nw *= (size_t)ws[d];
        CHECK(w != NULL, "%s: no weights", ctx);
        if (w) compare(ctx, "attn_output_weights", w, refw, nw, OUT_TOL, &max_out_err);
        free(refw);
    }
    snprintf(key, sizeof key, "%sdout", pre);
    float *dout = fx_floats(st, key, NULL);
    CHECK_OK(attn_nn_model_backward(m, dout));
    const char *inputs[] = {"query", "key", "value", "src", "tgt", "memory"};
    int ngrad = 0;
    for (int i = 0; i < 6; i++) {
        size_t gn = 0;
        const float *g = attn_nn_model_input_grad(m, inputs[i], &gn);
        char rk[64];
        snprintf(rk, sizeof rk, "d%s", inputs[i]);
        snprintf(key, sizeof key, "%s%s", pre, rk);
        float *rg = fx_floats(st, key, NULL);
        if (g && rg) {
            compare(ctx, rk, g, rg, gn, GRAD_TOL, &max_grad_err);
            ngrad++;
        }
        free(rg);
    }
    CHECK(ngrad >= 1, "%s: no input gradient compared", ctx);
    const attn_params *ps = attn_nn_model_params(m);
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        snprintf(key, sizeof key, "%sg.%s", pre, p->name);
        float *rg = fx_floats(st, key, NULL);
        CHECK(rg != NULL, "%s: fixture lacks %s", ctx, key);
        if (rg) compare(ctx, p->name, p->grad, rg, p->numel, GRAD_TOL, &max_grad_err);
        free(rg);
    }
    /* inference (nothing kept) gives the same output bitwise */
    CHECK_OK(attn_nn_model_forward(m, 0, 0, 0, 0));
    out = attn_nn_model_output(m, NULL, NULL);
    CHECK(out && !memcmp(out, kept, sizeof(float) * n), "%s: inference output differs", ctx);
    printf("%s: ok (%zu parameters)\n", ctx, attn_params_numel(ps));
    free(kept);
    free(ref);
    free(dout);
    attn_nn_model_free(m);
}

static void test_parity(const char *file, int is_mha) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fixture_dir(), file);
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (!st) return;
    const char *nc = attn_safetensors_metadata_find(st, "cases");
    const int n = nc ? atoi(nc) : 0;
    CHECK(n >= 8, "%s has %d cases", file, n);
    for (int ci = 0; ci < n; ci++) parity_case(st, file, ci, is_mha);
    attn_safetensors_close(st);
}

/* ---- a transformer with random inputs, for dropout / determinism / finite differences ---- */

typedef struct {
    attn_transformer *t;
    attn_transformer_args a;
    float *src, *tgt, *dout;
    uint8_t *kpm;
    size_t ns, nt;
    void *saved, *ws;
    size_t sb, wb;
} rig;

static void rig_make(rig *r, test_rng *g, int norm_first, attn_activation act) {
    memset(r, 0, sizeof *r);
    attn_transformer_config c = attn_transformer_config_default();
    c.layer = attn_layer_config_default(16, 4);
    c.layer.dim_feedforward = 24;
    c.layer.dropout = 0.2f;
    c.layer.norm_first = norm_first;
    c.layer.activation = act;
    c.num_encoder_layers = 2;
    c.num_decoder_layers = 2;
    CHECK_OK(attn_transformer_create(&c, &r->t));
    const attn_params *ps = attn_transformer_params(r->t);
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        fill_normal(g, p->data, p->numel, 0.3);
    }
    const int64_t B = 2, Ns = 7, Nt = 5;
    r->ns = (size_t)(B * Ns * 16);
    r->nt = (size_t)(B * Nt * 16);
    r->src = xmalloc(sizeof(float) * r->ns);
    r->tgt = xmalloc(sizeof(float) * r->nt);
    r->dout = xmalloc(sizeof(float) * r->nt);
    fill_normal(g, r->src, r->ns, 1);
    fill_normal(g, r->tgt, r->nt, 1);
    fill_normal(g, r->dout, r->nt, 1);
    r->kpm = xmalloc((size_t)(B * Ns));
    for (int64_t i = 0; i < B * Ns; i++) r->kpm[i] = (i % Ns) != 0 && rng_uniform(g) < 0.3;
    r->a = attn_transformer_args_default();
    r->a.batch = B;
    r->a.n_src = Ns;
    r->a.n_tgt = Nt;
    r->a.src = r->src;
    r->a.tgt = r->tgt;
    r->a.src_masks.key_padding_mask = r->kpm;
    r->a.memory_masks.key_padding_mask = r->kpm;
    r->a.tgt_masks.is_causal = 1;
    r->a.training = 1;
    r->a.seed = 2024;
    r->a.offset = 3;
    r->sb = attn_transformer_saved_size(r->t, &r->a);
    r->wb = attn_transformer_workspace_size(r->t, &r->a);
    r->saved = xmalloc(r->sb);
    r->ws = xmalloc(r->wb);
}

static void rig_free(rig *r) {
    attn_transformer_free(r->t);
    free(r->src);
    free(r->tgt);
    free(r->dout);
    free(r->kpm);
    free(r->saved);
    free(r->ws);
}

/* Output, input gradients and parameter gradients, concatenated. */
static float *run_all(rig *r, size_t *n) {
    const attn_params *ps = attn_transformer_params(r->t);
    const size_t np = attn_params_numel(ps);
    *n = r->nt + r->ns + r->nt + np;
    float *v = xmalloc(sizeof(float) * *n);
    attn_params_zero_grad(ps);
    CHECK_OK(attn_transformer_forward(r->t, &r->a, v, r->saved, r->sb, r->ws, r->wb));
    CHECK_OK(
        attn_transformer_backward(r->t, &r->a, r->dout, v + r->nt, v + r->nt + r->ns, r->saved, r->sb, r->ws, r->wb));
    size_t o = 2 * r->nt + r->ns;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        memcpy(v + o, p->grad, sizeof(float) * p->numel);
        o += p->numel;
    }
    return v;
}

static void test_dropout_threads(void) {
    test_rng g = rng_seeded(404);
    rig r;
    rig_make(&r, &g, 0, ATTN_ACTIVATION_GELU);
    size_t n;
    float *a = run_all(&r, &n), *b = run_all(&r, &n);
    CHECK(!memcmp(a, b, sizeof(float) * n), "transformer: same seed, different results");
    attn_set_num_threads(1);
    float *t1 = run_all(&r, &n);
    attn_set_num_threads(2);
    float *t2 = run_all(&r, &n);
    attn_set_num_threads(0);
    CHECK(!memcmp(a, t1, sizeof(float) * n) && !memcmp(a, t2, sizeof(float) * n),
          "transformer: results differ across 1 / 2 / default threads");
    r.a.seed = 2025;
    float *c = run_all(&r, &n);
    CHECK(memcmp(a, c, sizeof(float) * r.nt) != 0, "transformer: another seed gives the same output");
    r.a.training = 0;
    float *e = run_all(&r, &n);
    r.a.training = 1;
    CHECK(memcmp(a, e, sizeof(float) * r.nt) != 0, "transformer: dropout changed nothing");
    /* eval mode ignores the seed */
    r.a.training = 0;
    r.a.seed = 1;
    float *e2 = run_all(&r, &n);
    CHECK(!memcmp(e, e2, sizeof(float) * n), "transformer: eval depends on the seed");
    free(a), free(b), free(t1), free(t2), free(c), free(e), free(e2);
    rig_free(&r);
}

/* <dout, out> along a random direction of src, tgt and every parameter, central differences at h
 * and h/2 extrapolated, against the backward; dropout on. */
static double objective(rig *r, float *out) {
    attn_transformer_forward(r->t, &r->a, out, NULL, 0, r->ws, r->wb);
    double s = 0;
    for (size_t i = 0; i < r->nt; i++) s += (double)out[i] * r->dout[i];
    return s;
}

static void fd_check(int norm_first, attn_activation act) {
    test_rng g = rng_seeded(505 + (uint64_t)norm_first);
    rig r;
    rig_make(&r, &g, norm_first, act);
    size_t n;
    float *grads = run_all(&r, &n);
    const attn_params *ps = attn_transformer_params(r.t);
    const size_t np = attn_params_numel(ps), nall = r.ns + r.nt + np;
    float *dir = xmalloc(sizeof(float) * nall);
    fill_normal(&g, dir, nall, 1);
    /* grads layout: out, dsrc, dtgt, params; the direction: src, tgt, params */
    /* errors against max(|analytic|, spread): see dir_dot */
    double spread = 0;
    const double analytic = dir_dot(dir, grads + r.nt, nall, &spread); /* grads: out, then as dir */
    spread = sqrt(spread);
    float *out = xmalloc(sizeof(float) * r.nt);
    float *base = xmalloc(sizeof(float) * nall);
    memcpy(base, r.src, sizeof(float) * r.ns);
    memcpy(base + r.ns, r.tgt, sizeof(float) * r.nt);
    size_t o = r.ns + r.nt;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        memcpy(base + o, p->data, sizeof(float) * p->numel);
        o += p->numel;
    }
    double f[4];
    for (int s = 0; s < 4; s++) {
        const float h = (s & 1 ? -1.0f : 1.0f) * (s < 2 ? 4e-3f : 2e-3f);
        for (size_t i = 0; i < r.ns; i++) r.src[i] = base[i] + h * dir[i];
        for (size_t i = 0; i < r.nt; i++) r.tgt[i] = base[r.ns + i] + h * dir[r.ns + i];
        o = r.ns + r.nt;
        for (size_t i = 0; i < attn_params_count(ps); i++) {
            const attn_param *p = attn_params_get(ps, i);
            for (size_t e = 0; e < p->numel; e++) p->data[e] = base[o + e] + h * dir[o + e];
            o += p->numel;
        }
        f[s] = objective(&r, out);
    }
    const double d1 = (f[0] - f[1]) / (2.0 * 4e-3f), d2 = (f[2] - f[3]) / (2.0 * 2e-3f);
    const double numeric = (4.0 * d2 - d1) / 3.0, e = fabs(numeric - analytic) / fmax(fabs(analytic), spread);
    CHECK(e < 1e-3, "transformer (norm_first %d) finite differences: analytic %.8g numeric %.8g (spread %.3g) rel %.3g",
          norm_first, analytic, numeric, spread, e);
    printf("transformer (norm_first %d, dropout on) finite differences: rel err %.3g\n", norm_first, e);
    free(grads);
    free(dir);
    free(out);
    free(base);
    rig_free(&r);
}

/* The 6-layer d_model 512 encoder of the issue: memory linear in N (no N x N per head). */
static void test_memory_scaling(void) {
    attn_stack_config c = attn_stack_config_default(512, 8, 6);
    attn_encoder *e = NULL;
    CHECK_OK(attn_encoder_create(&c, &e));
    if (!e) return;
    attn_layer_args a = attn_layer_args_default();
    a.batch = 1;
    size_t s[2], w[2];
    for (int i = 0; i < 2; i++) {
        a.n = i ? 8192 : 4096;
        s[i] = attn_encoder_saved_size(e, &a);
        w[i] = attn_encoder_workspace_size(e, &a);
    }
    const double nn_head = 8192.0 * 8192.0 * 4.0; /* one head's N x N floats */
    printf("encoder 6 x d512, N=8192: saved %.1f MB, workspace %.1f MB (N x N of one head: %.1f MB)\n", s[1] / 1e6,
           w[1] / 1e6, nn_head / 1e6);
    CHECK((double)s[1] < 2.05 * (double)s[0] && (double)w[1] < 2.05 * (double)w[0],
          "memory grows faster than N: saved %zu -> %zu, workspace %zu -> %zu", s[0], s[1], w[0], w[1]);
    CHECK((double)w[1] < 8 * nn_head, "workspace %zu reaches N x N x heads", w[1]);
    attn_encoder_free(e);
}

static void expect_model_error(const char *json, attn_status want, const char *needle) {
    attn_json_doc *doc = parse(json);
    CHECK(doc != NULL, "bad test JSON %s", json);
    if (!doc) return;
    nn_model *m = NULL;
    CHECK_STATUS(attn_nn_model_create(attn_json_root(doc), &m), want);
    CHECK(strstr(attn_last_error(), needle) != NULL, "message for %s: '%s' lacks '%s'", json, attn_last_error(),
          needle);
    attn_nn_model_free(m);
    attn_json_free(doc);
}

static void test_errors(void) {
    attn_layer_config c = attn_layer_config_default(10, 4);
    attn_encoder_layer *l = NULL;
    CHECK_STATUS(attn_encoder_layer_create(&c, &l), ATTN_ERR_INVALID_ARGUMENT);
    c = attn_layer_config_default(8, 2);
    c.layer_norm_eps = 0;
    CHECK_STATUS(attn_encoder_layer_create(&c, &l), ATTN_ERR_INVALID_ARGUMENT);
    c = attn_layer_config_default(8, 2);
    c.dim_feedforward = 16;
    attn_decoder_layer *dl = NULL;
    CHECK_OK(attn_decoder_layer_create(&c, &dl));
    const char *names[] = {"self_attn.in_proj_weight", "multihead_attn.out_proj.bias", "linear1.weight", "linear2.bias",
                           "norm3.weight"};
    for (int i = 0; i < 5; i++)
        CHECK(attn_params_find(attn_decoder_layer_params(dl), names[i]) != NULL, "decoder layer lacks %s", names[i]);
    float x[2 * 3 * 8] = {0}, out[2 * 3 * 8];
    attn_layer_args a = attn_layer_args_default();
    a.batch = 2;
    a.n = 3;
    a.x = x;
    size_t wb = attn_decoder_layer_workspace_size(dl, &a);
    void *ws = xmalloc(wb);
    CHECK_STATUS(attn_decoder_layer_forward(dl, &a, out, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "memory") != NULL, "message: %s", attn_last_error());
    a.memory = x;
    a.n_memory = 3;
    free(ws);
    wb = attn_decoder_layer_workspace_size(dl, &a);
    ws = xmalloc(wb);
    CHECK_STATUS(attn_decoder_layer_forward(dl, &a, out, NULL, 0, ws, 10), ATTN_ERR_WORKSPACE);
    CHECK_OK(attn_decoder_layer_forward(dl, &a, out, NULL, 0, ws, wb));
    CHECK_STATUS(attn_decoder_layer_backward(dl, &a, out, x, NULL, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    free(ws);
    attn_decoder_layer_free(dl);
    attn_stack_config sc = attn_stack_config_default(8, 2, 0);
    attn_encoder *e = NULL;
    CHECK_STATUS(attn_encoder_create(&sc, &e), ATTN_ERR_INVALID_ARGUMENT);
    /* the stack names its parameters as PyTorch */
    sc.num_layers = 2;
    CHECK_OK(attn_encoder_create(&sc, &e));
    CHECK(attn_params_find(attn_encoder_params(e), "layers.1.self_attn.out_proj.weight") &&
              attn_params_find(attn_encoder_params(e), "norm.bias"),
          "encoder stack names");
    attn_encoder_free(e);
    attn_transformer_config tc = attn_transformer_config_default();
    tc.layer = attn_layer_config_default(8, 2);
    tc.layer.dim_feedforward = 8;
    tc.num_encoder_layers = 1;
    tc.num_decoder_layers = 1;
    attn_transformer *t = NULL;
    CHECK_OK(attn_transformer_create(&tc, &t));
    CHECK(attn_params_find(attn_transformer_params(t), "encoder.layers.0.linear1.weight") &&
              attn_params_find(attn_transformer_params(t), "decoder.norm.weight"),
          "transformer names");
    attn_transformer_free(t);

    expect_model_error("{\"module\": \"lstm\"}", ATTN_ERR_INVALID_ARGUMENT, "unknown module 'lstm'");
    expect_model_error("{\"d_model\": 8}", ATTN_ERR_INVALID_ARGUMENT, "module");
    expect_model_error("{\"module\": \"transformer_encoder_layer\", \"d_model\": 8, \"nhead\": 2, \"nheads\": 2}",
                       ATTN_ERR_INVALID_ARGUMENT, "unknown key 'nheads'");
    expect_model_error("{\"module\": \"transformer_encoder_layer\", \"d_model\": 8}", ATTN_ERR_INVALID_ARGUMENT,
                       "missing key 'nhead'");
    expect_model_error(
        "{\"module\": \"transformer_encoder_layer\", \"d_model\": 8, \"nhead\": 2, \"activation\": \"tanh\"}",
        ATTN_ERR_INVALID_ARGUMENT, "tanh");
    expect_model_error("{\"module\": \"transformer_encoder\", \"num_layers\": 2}", ATTN_ERR_INVALID_ARGUMENT,
                       "missing key 'encoder_layer'");
    expect_model_error("{\"module\": \"transformer_decoder\", \"num_layers\": 1, \"decoder_layer\": {\"d_model\": 8, "
                       "\"nhead\": 2, \"x\": 1}}",
                       ATTN_ERR_INVALID_ARGUMENT, "decoder_layer: unknown key 'x'");
    expect_model_error("{\"module\": \"transformer\", \"d_model\": 8, \"nhead\": 3}", ATTN_ERR_INVALID_ARGUMENT,
                       "nhead");
    expect_model_error("{\"module\": \"multihead_attention\", \"embed_dim\": 8, \"num_heads\": 2, \"need_weights\": 1}",
                       ATTN_ERR_INVALID_ARGUMENT, "need_weights");
    expect_model_error(
        "{\"module\": \"multihead_attention\", \"embed_dim\": 8, \"num_heads\": 2, \"batch_first\": false}",
        ATTN_ERR_UNSUPPORTED, "batch_first");

    /* binding: missing, unknown and mis-shaped inputs */
    attn_json_doc *doc = parse("{\"module\": \"transformer_decoder_layer\", \"d_model\": 8, \"nhead\": 2, "
                               "\"dim_feedforward\": 8, \"tgt_is_causal\": true}");
    nn_model *m = NULL;
    CHECK_OK(attn_nn_model_create(attn_json_root(doc), &m));
    attn_json_free(doc);
    attn_safetensors_writer *w = NULL;
    float tgt[2 * 3 * 8] = {0}, mem[2 * 4 * 8] = {0}, bad[2 * 4 * 7] = {0};
    uint8_t mk[4 * 4] = {0};
    const int64_t st[3] = {2, 3, 8}, sm[3] = {2, 4, 8}, sb[3] = {2, 4, 7}, smk[2] = {3, 3}, smk2[2] = {3, 4};
    for (int v = 0; v < 4; v++) {
        CHECK_OK(attn_safetensors_writer_create(&w));
        CHECK_OK(attn_safetensors_writer_add(w, "tgt", ATTN_DTYPE_F32, 3, st, tgt));
        if (v == 1) CHECK_OK(attn_safetensors_writer_add(w, "memory", ATTN_DTYPE_F32, 3, sb, bad));
        if (v >= 2) CHECK_OK(attn_safetensors_writer_add(w, "memory", ATTN_DTYPE_F32, 3, sm, mem));
        if (v == 2) CHECK_OK(attn_safetensors_writer_add(w, "tgt_mask", ATTN_DTYPE_BOOL, 2, smk2, mk));
        if (v == 3) {
            CHECK_OK(attn_safetensors_writer_add(w, "tgt_mask", ATTN_DTYPE_BOOL, 2, smk, mk));
            CHECK_OK(attn_safetensors_writer_add(w, "src_mask", ATTN_DTYPE_BOOL, 2, smk, mk));
        }
        void *buf = NULL;
        size_t len = 0;
        CHECK_OK(attn_safetensors_writer_write_memory(w, &buf, &len));
        attn_safetensors_writer_free(w);
        attn_safetensors *s = NULL;
        CHECK_OK(attn_safetensors_open_memory(buf, len, &s));
        const attn_status want[4] = {ATTN_ERR_NOT_FOUND, ATTN_ERR_SHAPE, ATTN_ERR_SHAPE, ATTN_ERR_NOT_FOUND};
        const char *needle[4] = {"missing input 'memory'", "input 'memory' has shape [2, 4, 7]",
                                 "input 'tgt_mask' has shape [3, 4], expected [3, 3] or [4, 3, 3]",
                                 "unknown input 'src_mask'"};
        CHECK_STATUS(attn_nn_model_bind(m, s, NULL, 1), want[v]);
        CHECK(strstr(attn_last_error(), needle[v]) != NULL, "bind message: %s", attn_last_error());
        if (v == 3) {
            CHECK_OK(attn_nn_model_bind(m, s, NULL, 0));
            CHECK_OK(attn_nn_model_forward(m, 0, 0, 0, 0));
        }
        attn_safetensors_close(s);
        free(buf);
    }
    CHECK_STATUS(attn_nn_model_set_option(m, "need_weights", 1), ATTN_ERR_NOT_FOUND);
    attn_nn_model_free(m);
}

int main(void) {
    test_parity("nn_layers.safetensors", 0);
    test_parity("nn_mha.safetensors", 1);
    printf("parity: max output rel err %.3g, max gradient rel err %.3g\n", max_out_err, max_grad_err);
    test_dropout_threads();
    fd_check(0, ATTN_ACTIVATION_GELU);
    fd_check(1, ATTN_ACTIVATION_GELU);
    fd_check(0, ATTN_ACTIVATION_GELU_TANH); /* gelu_new: the tanh form's backward */
    test_memory_scaling();
    test_errors();
    return test_summary("test_nn_layers");
}
