/* The reference sketch's attention modules, corrected (tests/parity/gen_seed_modules.py): its
 * MultiHeadAttention (multihead_attention with separate_projections, the W_q / W_k / W_v / W_o
 * names through a name map), SparseAttention (sparse_attention), LocalGlobalAttention
 * (local_global_attention, attn_local_global), LinearAttention (linear_attention) and
 * PerformerAttention (performer_attention, with its buffer R), causal and not, each built from the
 * fixture's configuration through run.c's API: output, input and parameter gradients against
 * PyTorch's float64 autograd; the public attn_local_global API directly; configuration, weights
 * (buffer) and input errors.
 *
 * Also a helper of tests/cli_test.cmake (which runs `attn run` on a fixture case):
 *   test_seed_modules --split FIXTURE CASE DIR    writes DIR/model.json, DIR/w.safetensors (the
 *                                                 state_dict under the seed's names), DIR/in.safetensors
 *   test_seed_modules --compare OUT FIXTURE CASE  'output' of OUT against caseCASE.out (rel err <= 1e-5) */
#include "io/json.h"
#include "nn/nn_run.h"
#include "test_util.h"

#define OUT_TOL 1e-5
#define GRAD_TOL 1e-4

static double max_out_err, max_grad_err;

/* The seed's MultiHeadAttention names for an attn_mha with separate projections. */
static const attn_name_rule MHA_RULES[] = {
    {"q_proj.", "W_q."}, {"k_proj.", "W_k."}, {"v_proj.", "W_v."}, {"out_proj.", "W_o."}};
static const attn_name_map MHA_MAP = {MHA_RULES, 4};

static const attn_name_map *map_of(const nn_model *m) {
    const attn_name_map *map = attn_nn_model_name_map(m);
    return map ? map : &MHA_MAP;
}

static attn_json_doc *parse(const char *s) {
    attn_json_doc *doc = NULL;
    if (!s || attn_json_parse(s, strlen(s), NULL, &doc, NULL) != ATTN_JSON_OK) return NULL;
    return doc;
}

/* The members of a JSON object's text, without braces (empty for {}). */
static int members(const char *obj, const char **body) {
    const char *b = strchr(obj, '{') + 1, *e = strrchr(obj, '}');
    while (*b == ' ') b++;
    *body = b;
    return (int)(e - b);
}

/* {"module": M, <config>, <call>} of case ci into buf. */
static void case_json(const attn_safetensors *st, int ci, char *buf, size_t cap) {
    char key[64];
    const char *v[3];
    const char *what[3] = {"module", "config", "call"};
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "case%d.%s", ci, what[i]);
        v[i] = attn_safetensors_metadata_find(st, key);
    }
    const char *cb, *kb;
    const int cl = v[1] ? members(v[1], &cb) : 0, kl = v[2] ? members(v[2], &kb) : 0;
    int o = snprintf(buf, cap, "{\"module\": \"%s\"", v[0] ? v[0] : "?");
    if (cl > 0) o += snprintf(buf + o, cap - (size_t)o, ", %.*s", cl, cb);
    if (kl > 0) o += snprintf(buf + o, cap - (size_t)o, ", %.*s", kl, kb);
    snprintf(buf + o, cap - (size_t)o, "}\n");
}

static nn_model *model_of(const attn_safetensors *st, int ci) {
    char text[1024];
    case_json(st, ci, text, sizeof text);
    attn_json_doc *doc = parse(text);
    nn_model *m = NULL;
    CHECK(doc != NULL, "case %d: config JSON %s", ci, text);
    if (doc) CHECK_OK(attn_nn_model_create(attn_json_root(doc), &m));
    attn_json_free(doc);
    return m;
}

static void compare(const char *ctx, const char *name, const float *got, const float *ref, size_t n, double tol,
                    double *worst) {
    const double e = rel_err_ff(got, ref, n);
    if (e > *worst) *worst = e;
    CHECK(e <= tol, "%s: %s rel err %.3g > %.1g", ctx, name, e, tol);
}

static void parity_case(const attn_safetensors *st, int ci) {
    char pre[32], key[300], ctx[96];
    snprintf(pre, sizeof pre, "case%d.", ci);
    nn_model *m = model_of(st, ci);
    if (!m) return;
    snprintf(ctx, sizeof ctx, "case %d (%s)", ci, attn_nn_model_name(m));
    /* softmax attentions: the k bias gradient is zero in exact arithmetic (below) */
    const int softmax =
        strcmp(attn_nn_model_name(m), "linear_attention") && strcmp(attn_nn_model_name(m), "performer_attention");
    const double out0 = max_out_err, grad0 = max_grad_err;
    max_out_err = max_grad_err = 0;
    const attn_params *ps = attn_nn_model_params(m);
    snprintf(key, sizeof key, "%sp.", pre);
    if (attn_nn_model_name_map(m))
        CHECK_OK(attn_nn_model_load(m, st, key, 1));
    else
        CHECK_OK(attn_params_load_mapped(ps, st, map_of(m), key, 1));
    CHECK_OK(attn_nn_model_bind(m, st, pre, 0));
    CHECK_OK(attn_params_zero_grad(ps));
    CHECK_OK(attn_nn_model_forward(m, 1, 0, 0, 0));
    int rank;
    int64_t shape[4];
    size_t n = 0;
    snprintf(key, sizeof key, "%sout", pre);
    float *ref = fx_floats(st, key, &n);
    const float *out = attn_nn_model_output(m, &rank, shape);
    CHECK(out && ref && rank == 3 && (size_t)(shape[0] * shape[1] * shape[2]) == n, "%s: output shape", ctx);
    if (out && ref && (size_t)(shape[0] * shape[1] * shape[2]) == n)
        compare(ctx, "output", out, ref, n, OUT_TOL, &max_out_err);
    free(ref);
    snprintf(key, sizeof key, "%sdout", pre);
    float *dout = fx_floats(st, key, NULL);
    CHECK(dout != NULL, "%s: no dout", ctx);
    if (dout) CHECK_OK(attn_nn_model_backward(m, dout));
    free(dout);
    const char *inputs[] = {"x", "query", "key", "value"};
    int ngrad = 0;
    for (int i = 0; i < 4; i++) {
        size_t gn = 0;
        const float *g = attn_nn_model_input_grad(m, inputs[i], &gn);
        char rk[32];
        snprintf(rk, sizeof rk, "d%s", inputs[i]);
        snprintf(key, sizeof key, "%s%s", pre, rk);
        size_t rn = 0;
        float *rg = fx_floats(st, key, &rn);
        CHECK(!rg == !g && (!g || gn == rn), "%s: gradient of %s present %d, reference %d", ctx, inputs[i], g != NULL,
              rg != NULL);
        if (g && rg && gn == rn) {
            compare(ctx, rk, g, rg, gn, GRAD_TOL, &max_grad_err);
            ngrad++;
        }
        free(rg);
    }
    CHECK(ngrad >= 1, "%s: no input gradient compared", ctx);
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        char theirs[200];
        CHECK_OK(attn_name_map_apply(map_of(m), p->name, theirs, sizeof theirs));
        snprintf(key, sizeof key, "%sg.%s", pre, theirs);
        size_t rn = 0;
        float *rg = fx_floats(st, key, &rn);
        CHECK(rg != NULL && rn == p->numel, "%s: fixture lacks %s", ctx, key);
        const size_t pl = strlen(p->name);
        if (softmax && rg && rn == p->numel && pl >= 11 && !strcmp(p->name + pl - 11, "k_proj.bias")) {
            /* Zero in exact arithmetic (softmax ignores the constant q . b_k added to a query's every
             * logit), so PyTorch's reference is rounding noise: the error is measured against the
             * size of the v_proj.bias gradient, a sum over the same rows at the same scale (the
             * q_proj.bias gradient vanishes too when each query sees one key). */
            char qname[300];
            snprintf(qname, sizeof qname, "%s", key);
            char *kp = strstr(qname, "W_k.bias");
            if (kp) kp[2] = 'v';
            float *qg = fx_floats(st, qname, NULL);
            CHECK(qg != NULL, "%s: fixture lacks %s", ctx, qname);
            double num = 0, den = 0;
            for (size_t e = 0; qg && e < rn; e++) {
                num += ((double)p->grad[e] - rg[e]) * ((double)p->grad[e] - rg[e]);
                den += (double)qg[e] * qg[e];
            }
            const double err = qg && den > 0 ? sqrt(num / den) : INFINITY;
            if (err > max_grad_err) max_grad_err = err;
            CHECK(err <= GRAD_TOL, "%s: %s error %.3g of the v bias gradient's size > %.1g", ctx, theirs, err,
                  GRAD_TOL);
            free(qg);
        } else if (rg && rn == p->numel) {
            compare(ctx, theirs, p->grad, rg, p->numel, GRAD_TOL, &max_grad_err);
        }
        free(rg);
    }
    printf("%s: output rel err %.3g, max gradient rel err %.3g\n", ctx, max_out_err, max_grad_err);
    max_out_err = max_out_err > out0 ? max_out_err : out0;
    max_grad_err = max_grad_err > grad0 ? max_grad_err : grad0;
    attn_nn_model_free(m);
}

static attn_safetensors *open_fixture(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/seed_modules.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    return st;
}

static void test_parity(void) {
    attn_safetensors *st = open_fixture();
    if (!st) return;
    const char *nc = attn_safetensors_metadata_find(st, "cases");
    const int n = nc ? atoi(nc) : 0;
    CHECK(n >= 10, "fixture has %d cases", n);
    int seen_sparse = 0, seen_lg = 0, seen_lin = 0, seen_perf = 0;
    for (int ci = 0; ci < n; ci++) {
        char key[64];
        snprintf(key, sizeof key, "case%d.module", ci);
        const char *mod = attn_safetensors_metadata_find(st, key);
        seen_sparse += mod && !strcmp(mod, "sparse_attention");
        seen_lg += mod && !strcmp(mod, "local_global_attention");
        seen_lin += mod && !strcmp(mod, "linear_attention");
        seen_perf += mod && !strcmp(mod, "performer_attention");
        parity_case(st, ci);
    }
    CHECK(seen_sparse && seen_lg && seen_lin >= 2 && seen_perf >= 2,
          "fixture lacks a module (sparse %d, local_global %d, linear %d, performer %d)", seen_sparse, seen_lg,
          seen_lin, seen_perf);
    attn_safetensors_close(st);
    printf("parity: max output rel err %.3g, max gradient rel err %.3g\n", max_out_err, max_grad_err);
}

/* ---- attn_local_global directly: the public API's buffers, dx NULL, capture, errors ---- */

static void test_local_global_api(void) {
    attn_local_global_config cfg = attn_local_global_config_default(8, 2, 1);
    CHECK(cfg.dropout == 0.1f, "default dropout %g", (double)cfg.dropout);
    cfg.dropout = 0;
    attn_local_global *m = NULL;
    CHECK_OK(attn_local_global_create(&cfg, &m));
    if (!m) return;
    const attn_params *ps = attn_local_global_params(m);
    const char *want[] = {"local_attn.q_proj.weight",   "local_attn.q_proj.bias",    "local_attn.k_proj.weight",
                          "local_attn.k_proj.bias",     "local_attn.v_proj.weight",  "local_attn.v_proj.bias",
                          "local_attn.out_proj.weight", "local_attn.out_proj.bias",  "global_attn.q_proj.weight",
                          "global_attn.q_proj.bias",    "global_attn.k_proj.weight", "global_attn.k_proj.bias",
                          "global_attn.v_proj.weight",  "global_attn.v_proj.bias",   "global_attn.out_proj.weight",
                          "global_attn.out_proj.bias",  "projection.weight",         "projection.bias"};
    CHECK(attn_params_count(ps) == 18, "%zu parameters", attn_params_count(ps));
    for (size_t i = 0; i < 18 && i < attn_params_count(ps); i++)
        CHECK(!strcmp(attn_params_get(ps, i)->name, want[i]), "param %zu is %s, want %s", i,
              attn_params_get(ps, i)->name, want[i]);
    const attn_param *pw = attn_params_find(ps, "projection.weight");
    int in = 1;
    for (size_t e = 0; pw && e < pw->numel; e++) in &= fabsf(pw->data[e]) <= 1 / sqrtf(8.0f);
    CHECK(pw && pw->rank == 2 && pw->shape[0] == 8 && pw->shape[1] == 8 && in, "projection.weight shape / init");

    test_rng g = rng_seeded(5);
    const int64_t B = 2, N = 6, E = 8;
    const size_t n = (size_t)(B * N * E);
    float *x = xmalloc(sizeof(float) * n), *out = xmalloc(sizeof(float) * n), *out2 = xmalloc(sizeof(float) * n);
    float *dout = xmalloc(sizeof(float) * n), *dx = xmalloc(sizeof(float) * n);
    fill_normal(&g, x, n, 1);
    fill_normal(&g, dout, n, 1);
    attn_local_global_args a = attn_local_global_args_default();
    a.batch = B;
    a.n = N;
    a.x = x;
    const size_t sb = attn_local_global_saved_size(m, &a), wb = attn_local_global_workspace_size(m, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    CHECK_OK(attn_local_global_forward(m, &a, out, NULL, 0, ws, wb));
    CHECK_OK(attn_local_global_forward(m, &a, out2, saved, sb, ws, wb));
    CHECK(!memcmp(out, out2, sizeof(float) * n), "inference and training-kept forwards differ");
    CHECK_OK(attn_params_zero_grad(ps));
    CHECK_OK(attn_local_global_backward(m, &a, dout, dx, saved, sb, ws, wb));
    /* dx NULL: the same parameter gradients */
    float *g1 = xmalloc(sizeof(float) * attn_params_numel(ps));
    size_t o = 0;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        memcpy(g1 + o, p->grad, sizeof(float) * p->numel);
        o += p->numel;
    }
    CHECK_OK(attn_params_zero_grad(ps));
    CHECK_OK(attn_local_global_backward(m, &a, dout, NULL, saved, sb, ws, wb));
    int same = 1;
    o = 0;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        same &= !memcmp(g1 + o, p->grad, sizeof(float) * p->numel);
        o += p->numel;
    }
    CHECK(same, "backward without dx changes the parameter gradients");
    /* capture: both attentions record under their names */
    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_add(cap, "*", 0, 0, 0, 0));
    a.capture = cap;
    CHECK_OK(attn_local_global_forward(m, &a, out2, NULL, 0, ws, wb));
    attn_capture_record rec;
    CHECK_OK(attn_capture_find(cap, "global_attn", &rec));
    CHECK_OK(attn_capture_find(cap, "local_attn", &rec));
    /* the local attention's weights vanish outside the window */
    int band = 1;
    for (int64_t b = 0; b < rec.batch; b++)
        for (int64_t h = 0; h < rec.heads; h++)
            for (int64_t i = 0; i < rec.rows; i++)
                for (int64_t j = 0; j < rec.nk; j++)
                    if (i - j > 1 || j - i > 1)
                        band &= rec.weights[((b * rec.heads + h) * rec.rows + i) * rec.nk + j] == 0;
    CHECK(band, "local_attn attends outside |i - j| <= 1");
    attn_capture_free(cap);
    a.capture = NULL;
    /* errors */
    CHECK_STATUS(attn_local_global_forward(m, &a, out, NULL, 0, ws, wb - 64), ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_local_global_backward(m, &a, dout, dx, saved, sb / 2, ws, wb), ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_local_global_backward(m, &a, dout, dx, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    a.x = NULL;
    CHECK_STATUS(attn_local_global_forward(m, &a, out, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    attn_local_global *bad = NULL;
    attn_local_global_config bc = attn_local_global_config_default(10, 3, 1);
    CHECK_STATUS(attn_local_global_create(&bc, &bad), ATTN_ERR_INVALID_ARGUMENT);
    bc = attn_local_global_config_default(8, 2, -1);
    CHECK_STATUS(attn_local_global_create(&bc, &bad), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "local_window") != NULL, "message: %s", attn_last_error());
    free(g1);
    free(saved);
    free(ws);
    free(x);
    free(out);
    free(out2);
    free(dout);
    free(dx);
    attn_local_global_free(m);
}

/* ---- configuration and input errors through run.c ---- */

static void expect_create_error(const char *json, const char *needle) {
    attn_json_doc *doc = parse(json);
    nn_model *m = NULL;
    CHECK(doc != NULL, "json %s", json);
    if (!doc) return;
    CHECK_STATUS(attn_nn_model_create(attn_json_root(doc), &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", json, attn_last_error(), needle);
    attn_nn_model_free(m);
    attn_json_free(doc);
}

/* A safetensors in memory of up to 3 named F32 tensors (shape rank 1 .. 3), opened into *st. */
static void *tensors(attn_safetensors **st, int n, const char *const *names, const int *ranks,
                     const int64_t (*shapes)[3], const float *data) {
    attn_safetensors_writer *w = NULL;
    void *mem = NULL;
    size_t len = 0;
    CHECK_OK(attn_safetensors_writer_create(&w));
    for (int i = 0; i < n; i++)
        CHECK_OK(attn_safetensors_writer_add(w, names[i], ATTN_DTYPE_F32, ranks[i], shapes[i], data));
    CHECK_OK(attn_safetensors_writer_write_memory(w, &mem, &len));
    attn_safetensors_writer_free(w);
    CHECK_OK(attn_safetensors_open_memory(mem, len, st));
    return mem;
}

/* performer_attention's buffer R through attn_nn_model_load: missing, mis-shaped, no forward
 * before a load, strict loading accepts it and rejects an unknown name, the projection is R
 * transposed (R = W^T of attn_orf_draw gives the performer kind's drawn result), no gradient. */
static void test_buffer_errors(void) {
    attn_json_doc *doc = parse("{\"module\": \"performer_attention\", \"d_model\": 8, \"num_heads\": 2, "
                               "\"num_features\": 6, \"causal\": true}");
    nn_model *m = NULL;
    CHECK_OK(attn_nn_model_create(attn_json_root(doc), &m));
    attn_json_free(doc);
    if (!m) return;
    const attn_params *ps = attn_nn_model_params(m);
    CHECK(attn_params_count(ps) == 8, "performer_attention has %zu parameters, want 8 (R is a buffer)",
          attn_params_count(ps));
    static float data[2 * 6 * 8];
    const char *names[10];
    int ranks[10];
    int64_t shapes[10][3];
    char theirs[10][64];
    int n = 0;
    for (size_t i = 0; i < attn_params_count(ps) && n < 8; i++, n++) {
        const attn_param *p = attn_params_get(ps, i);
        CHECK_OK(attn_name_map_apply(attn_nn_model_name_map(m), p->name, theirs[n], sizeof theirs[n]));
        names[n] = theirs[n];
        ranks[n] = p->rank;
        for (int d = 0; d < p->rank; d++) shapes[n][d] = p->shape[d];
    }
    const int64_t r_good[3] = {2, 4, 6}, r_bad[3] = {2, 6, 4};
    attn_safetensors *st = NULL;
    /* no R */
    void *mem = tensors(&st, n, names, ranks, (const int64_t(*)[3])shapes, data);
    CHECK_STATUS(attn_nn_model_load(m, st, NULL, 1), ATTN_ERR_NOT_FOUND);
    CHECK(strstr(attn_last_error(), "'R'") && strstr(attn_last_error(), "[2, 4, 6]"), "missing R: %s",
          attn_last_error());
    attn_safetensors_close(st), free(mem);
    /* R transposed */
    names[n] = "R", ranks[n] = 3, memcpy(shapes[n], r_bad, sizeof r_bad);
    mem = tensors(&st, n + 1, names, ranks, (const int64_t(*)[3])shapes, data);
    CHECK_STATUS(attn_nn_model_load(m, st, NULL, 1), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "'R'") && strstr(attn_last_error(), "[2, 6, 4]") &&
              strstr(attn_last_error(), "expected [2, 4, 6]"),
          "mis-shaped R: %s", attn_last_error());
    attn_safetensors_close(st), free(mem);
    /* an unknown name next to a good R: strict refuses it, loose loads */
    memcpy(shapes[n], r_good, sizeof r_good);
    names[n + 1] = "attn.W_q.weight", ranks[n + 1] = 2, shapes[n + 1][0] = shapes[n + 1][1] = 8;
    mem = tensors(&st, n + 2, names, ranks, (const int64_t(*)[3])shapes, data);
    CHECK_STATUS(attn_nn_model_load(m, st, NULL, 1), ATTN_ERR_NOT_FOUND);
    CHECK(strstr(attn_last_error(), "unexpected (1): attn.W_q.weight") != NULL, "unknown: %s", attn_last_error());
    /* inputs bound, but nothing loaded yet */
    attn_safetensors *xs = NULL;
    const char *xn[1] = {"x"};
    const int xr[1] = {3};
    const int64_t xsh[1][3] = {{1, 5, 8}};
    float x[40], dout[40];
    for (int i = 0; i < 40; i++) x[i] = (float)sin(i * 0.7), dout[i] = (float)cos(i * 0.3);
    void *xmem = tensors(&xs, 1, xn, xr, xsh, x);
    CHECK_OK(attn_nn_model_bind(m, xs, NULL, 1));
    CHECK_STATUS(attn_nn_model_forward(m, 1, 0, 0, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "'R'") || strstr(attn_last_error(), "buffer R"), "forward before load: %s",
          attn_last_error());
    CHECK_OK(attn_nn_model_load(m, st, NULL, 0));
    attn_safetensors_close(st), free(mem);
    /* R = the kind's drawn W (seed 7) transposed per head gives bitwise a performer mha drawing W
     * (the same parameters): output and x's gradient */
    float w[6 * 4], r[2 * 4 * 6];
    CHECK_OK(attn_orf_draw(w, 6, 4, 7));
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++)
            for (int f = 0; f < 6; f++) r[(h * 4 + i) * 6 + f] = w[f * 4 + i];
    attn_mha_config mc = attn_mha_config_default(8, 2);
    mc.separate_projections = 1;
    mc.attention.kind = ATTN_ATTENTION_PERFORMER;
    mc.attention.num_features = 6;
    mc.attention.seed = 7;
    attn_mha *ref = NULL;
    CHECK_OK(attn_mha_create(&mc, &ref));
    attn_safetensors_writer *wr = NULL;
    CHECK_OK(attn_safetensors_writer_create(&wr));
    for (size_t i = 0; ref && i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i), *q = attn_params_get(attn_mha_params(ref), i);
        for (size_t e = 0; e < p->numel; e++) q->data[e] = (float)sin((double)(e * 13 + i * 7)) * 0.4f;
        CHECK_OK(attn_safetensors_writer_add(wr, names[i], ATTN_DTYPE_F32, p->rank, p->shape, q->data));
    }
    CHECK_OK(attn_safetensors_writer_add(wr, "R", ATTN_DTYPE_F32, 3, r_good, r));
    size_t len = 0;
    CHECK_OK(attn_safetensors_writer_write_memory(wr, &mem, &len));
    attn_safetensors_writer_free(wr);
    CHECK_OK(attn_safetensors_open_memory(mem, len, &st));
    CHECK_OK(attn_nn_model_load(m, st, NULL, 1));
    CHECK_OK(attn_params_zero_grad(ps));
    CHECK_OK(attn_nn_model_forward(m, 1, 0, 0, 0));
    CHECK_OK(attn_nn_model_backward(m, dout));
    if (ref) {
        attn_mha_args a = attn_mha_args_default();
        a.batch = 1, a.nq = a.nk = 5, a.query = a.key = a.value = x, a.is_causal = 1;
        float out[40], dx[40] = {0};
        const size_t sb = attn_mha_saved_size(ref, &a), wb = attn_mha_workspace_size(ref, &a);
        void *sv = xmalloc(sb), *ws = xmalloc(wb);
        CHECK_OK(attn_mha_forward(ref, &a, out, NULL, sv, sb, ws, wb));
        CHECK_OK(attn_mha_backward(ref, &a, dout, dx, dx, dx, sv, sb, ws, wb));
        const float *got = attn_nn_model_output(m, NULL, NULL), *gdx = attn_nn_model_input_grad(m, "x", NULL);
        CHECK(got && gdx && !memcmp(got, out, sizeof out) && !memcmp(gdx, dx, sizeof dx),
              "R = drawn W^T: not bitwise the drawn performer");
        /* the sketch's forward never applies its dropout: training changes nothing */
        CHECK_OK(attn_nn_model_forward(m, 0, 1, 3, 0));
        got = attn_nn_model_output(m, NULL, NULL);
        CHECK(got && !memcmp(got, out, sizeof out), "performer_attention: training changed the output");
        free(sv), free(ws);
        attn_mha_free(ref);
    }
    attn_safetensors_close(st), free(mem);
    attn_safetensors_close(xs), free(xmem);
    attn_nn_model_free(m);
}

static void test_errors(void) {
    expect_create_error("{\"module\": \"sparse_attention\", \"num_heads\": 2}", "d_model");
    expect_create_error("{\"module\": \"sparse_attention\", \"d_model\": 8, \"num_heads\": 2, \"window\": 3}",
                        "unknown key 'window'");
    expect_create_error("{\"module\": \"sparse_attention\", \"d_model\": 8, \"num_heads\": 2, \"window_size\": -1}",
                        "window_size");
    expect_create_error(
        "{\"module\": \"local_global_attention\", \"d_model\": 8, \"num_heads\": 2, \"local_window\": 1.5}",
        "local_window");
    expect_create_error(
        "{\"module\": \"local_global_attention\", \"d_model\": 8, \"num_heads\": 2, \"is_causal\": true}", "is_causal");
    expect_create_error("{\"module\": \"local_global_attention\", \"d_model\": 10, \"num_heads\": 3}", "num_heads");
    expect_create_error("{\"module\": \"linear_attention\", \"d_model\": 8, \"num_heads\": 2, \"dropout\": 0.1}",
                        "unknown key 'dropout'");
    expect_create_error("{\"module\": \"linear_attention\", \"d_model\": 8, \"num_heads\": 3}", "num_heads");
    expect_create_error("{\"module\": \"linear_attention\", \"d_model\": 8, \"num_heads\": 2, \"causal\": 1}",
                        "causal");
    expect_create_error("{\"module\": \"performer_attention\", \"d_model\": 8, \"num_heads\": 2, \"num_features\": 0}",
                        "num_features");
    expect_create_error("{\"module\": \"performer_attention\", \"d_model\": 8, \"num_heads\": 2, \"window_size\": 2}",
                        "unknown key 'window_size'");
    test_buffer_errors();
    /* inputs: x missing, mis-shaped, an unknown input under strict binding */
    const char *cfgs[] = {"{\"module\": \"sparse_attention\", \"d_model\": 8, \"num_heads\": 2, \"window_size\": 2}",
                          "{\"module\": \"local_global_attention\", \"d_model\": 8, \"num_heads\": 2}"};
    for (int k = 0; k < 2; k++) {
        attn_json_doc *doc = parse(cfgs[k]);
        nn_model *m = NULL;
        CHECK_OK(attn_nn_model_create(attn_json_root(doc), &m));
        attn_json_free(doc);
        if (!m) continue;
        CHECK(attn_nn_model_name_map(m) != NULL, "%s: no name map", attn_nn_model_name(m));
        float buf[2 * 3 * 8] = {0};
        const int64_t good[3] = {2, 3, 8}, wrong[3] = {2, 3, 7};
        attn_safetensors_writer *w = NULL;
        void *mem = NULL;
        size_t len = 0;
        attn_safetensors *st = NULL;
        /* missing */
        CHECK_OK(attn_safetensors_writer_create(&w));
        CHECK_OK(attn_safetensors_writer_add(w, "query", ATTN_DTYPE_F32, 3, good, buf));
        CHECK_OK(attn_safetensors_writer_write_memory(w, &mem, &len));
        attn_safetensors_writer_free(w);
        CHECK_OK(attn_safetensors_open_memory(mem, len, &st));
        CHECK_STATUS(attn_nn_model_bind(m, st, NULL, 0), ATTN_ERR_NOT_FOUND);
        CHECK(strstr(attn_last_error(), "'x'") != NULL, "missing x: %s", attn_last_error());
        attn_safetensors_close(st);
        free(mem);
        /* mis-shaped */
        CHECK_OK(attn_safetensors_writer_create(&w));
        CHECK_OK(attn_safetensors_writer_add(w, "x", ATTN_DTYPE_F32, 3, wrong, buf));
        CHECK_OK(attn_safetensors_writer_write_memory(w, &mem, &len));
        attn_safetensors_writer_free(w);
        CHECK_OK(attn_safetensors_open_memory(mem, len, &st));
        CHECK_STATUS(attn_nn_model_bind(m, st, NULL, 0), ATTN_ERR_SHAPE);
        CHECK(strstr(attn_last_error(), "'x'") != NULL, "mis-shaped x: %s", attn_last_error());
        attn_safetensors_close(st);
        free(mem);
        /* strict: x with an extra tensor */
        CHECK_OK(attn_safetensors_writer_create(&w));
        CHECK_OK(attn_safetensors_writer_add(w, "x", ATTN_DTYPE_F32, 3, good, buf));
        CHECK_OK(attn_safetensors_writer_add(w, "mask", ATTN_DTYPE_F32, 3, good, buf));
        CHECK_OK(attn_safetensors_writer_write_memory(w, &mem, &len));
        attn_safetensors_writer_free(w);
        CHECK_OK(attn_safetensors_open_memory(mem, len, &st));
        CHECK_STATUS(attn_nn_model_bind(m, st, NULL, 1), ATTN_ERR_NOT_FOUND);
        CHECK(strstr(attn_last_error(), "'mask'") != NULL, "unknown input: %s", attn_last_error());
        CHECK_OK(attn_nn_model_bind(m, st, NULL, 0));
        CHECK_OK(attn_nn_model_forward(m, 0, 0, 0, 0));
        attn_safetensors_close(st);
        free(mem);
        attn_nn_model_free(m);
    }
}

/* ---- helper modes for tests/cli_test.cmake ---- */

static int is_reference(const char *rest) {
    static const char *refs[] = {"out", "dout", "dx", "dquery", "dkey", "dvalue"};
    if (!strncmp(rest, "p.", 2) || !strncmp(rest, "g.", 2)) return 1;
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        if (!strcmp(rest, refs[i])) return 1;
    return 0;
}

static int split(const char *fixture, int ci, const char *dir) {
    attn_safetensors *st = NULL;
    if (attn_safetensors_open_file(fixture, &st)) {
        fprintf(stderr, "split: %s\n", attn_last_error());
        return 1;
    }
    char json[1024], path[1024], pre[32];
    case_json(st, ci, json, sizeof json);
    snprintf(path, sizeof path, "%s/model.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "split: cannot write %s\n", path);
        attn_safetensors_close(st);
        return 1;
    }
    fputs(json, f);
    fclose(f);
    attn_safetensors_writer *w = NULL, *in = NULL;
    int bad = attn_safetensors_writer_create(&w) || attn_safetensors_writer_create(&in);
    const int lp = snprintf(pre, sizeof pre, "case%d.", ci);
    for (size_t i = 0; !bad && i < attn_safetensors_count(st); i++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(st, i);
        if (strncmp(t->name, pre, (size_t)lp)) continue;
        const char *rest = t->name + lp;
        if (!strncmp(rest, "p.", 2))
            bad = attn_safetensors_writer_add(w, rest + 2, t->dtype, t->rank, t->shape, t->data);
        else if (!is_reference(rest))
            bad = attn_safetensors_writer_add(in, rest, t->dtype, t->rank, t->shape, t->data);
    }
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    bad = bad || attn_safetensors_writer_write_file(w, path);
    snprintf(path, sizeof path, "%s/in.safetensors", dir);
    bad = bad || attn_safetensors_writer_write_file(in, path);
    if (bad) fprintf(stderr, "split: %s\n", attn_last_error());
    attn_safetensors_writer_free(w);
    attn_safetensors_writer_free(in);
    attn_safetensors_close(st);
    return bad ? 1 : 0;
}

static int compare_files(const char *out_path, const char *fixture, int ci) {
    attn_safetensors *out = NULL, *st = NULL;
    int rc = 1;
    char key[64];
    snprintf(key, sizeof key, "case%d.out", ci);
    if (attn_safetensors_open_file(out_path, &out) || attn_safetensors_open_file(fixture, &st)) {
        fprintf(stderr, "compare: %s\n", attn_last_error());
    } else {
        const attn_safetensors_tensor *a = attn_safetensors_find(out, "output"), *b = attn_safetensors_find(st, key);
        if (!a || !b || a->rank != b->rank || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank)) {
            fprintf(stderr, "compare: 'output' missing or not shaped as %s\n", key);
        } else {
            size_t n = 1;
            for (int d = 0; d < a->rank; d++) n *= (size_t)a->shape[d];
            float *x = xmalloc(sizeof(float) * n), *y = xmalloc(sizeof(float) * n);
            if (!attn_safetensors_read_f32(out, "output", x, n) && !attn_safetensors_read_f32(st, key, y, n)) {
                const double e = rel_err_ff(x, y, n);
                printf("output vs %s: rel err %.3g\n", key, e);
                rc = e <= OUT_TOL ? 0 : 1;
            }
            free(x);
            free(y);
        }
    }
    attn_safetensors_close(out);
    attn_safetensors_close(st);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--split")) return split(argv[2], atoi(argv[3]), argv[4]);
    if (argc == 5 && !strcmp(argv[1], "--compare")) return compare_files(argv[2], argv[3], atoi(argv[4]));
    if (argc != 1) {
        fprintf(stderr, "usage: test_seed_modules [--split FIXTURE CASE DIR | --compare OUT FIXTURE CASE]\n");
        return 2;
    }
    test_parity();
    test_local_global_api();
    test_errors();
    return test_summary("test_seed_modules");
}
