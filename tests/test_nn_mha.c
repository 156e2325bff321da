/* Multi-head attention (attn_mha_*) and the linear helpers: parity with torch.nn.MultiheadAttention
 * (tests/parity/gen_nn_mha.py: outputs, weights, input and parameter gradients), a directional
 * finite-difference check of the backward with dropout on, dropout determinism, bitwise
 * determinism across thread counts, parameter load/save errors and argument errors. */
#include "io/json.h"
#include "nn/nn_config.h"
#include "test_util.h"

#define OUT_TOL 1e-5
#define GRAD_TOL 1e-4

static double max_out_err, max_grad_err;

/* ---- fixture helpers ---- */

static uint8_t *fx_bools(const attn_safetensors *st, const char *name) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    if (!t) return NULL;
    uint8_t *x = xmalloc(t->nbytes ? t->nbytes : 1);
    memcpy(x, t->data, t->nbytes);
    return x;
}

static attn_json_doc *fx_json(const attn_safetensors *st, const char *key) {
    const char *s = attn_safetensors_metadata_find(st, key);
    attn_json_doc *doc = NULL;
    if (!s || attn_json_parse(s, strlen(s), NULL, &doc, NULL) != ATTN_JSON_OK) return NULL;
    return doc;
}

static int json_flag(const attn_json *obj, const char *key) {
    int v = 0;
    attn_json_as_bool(attn_json_get(obj, key), &v);
    return v;
}

static void compare(const char *what, int ci, const char *name, const float *got, const float *ref, size_t n,
                    double tol, double *worst) {
    double e = rel_err_ff(got, ref, n);
    if (e > *worst) *worst = e;
    CHECK(e <= tol, "case %d (%s): %s rel err %.3g > %.1g", ci, what, name, e, tol);
}

typedef struct {
    void *saved, *ws;
    size_t saved_bytes, ws_bytes;
} bufs;

static void bufs_alloc(bufs *b, const attn_mha *m, const attn_mha_args *a) {
    b->saved_bytes = attn_mha_saved_size(m, a);
    b->ws_bytes = attn_mha_workspace_size(m, a);
    b->saved = xmalloc(b->saved_bytes);
    b->ws = xmalloc(b->ws_bytes);
}
static void bufs_free(bufs *b) {
    free(b->saved);
    free(b->ws);
}

/* ---- parity ---- */

static void parity_case(const attn_safetensors *st, int ci) {
    char key[300], pre[64];
    snprintf(key, sizeof key, "case%d.config", ci);
    attn_json_doc *cdoc = fx_json(st, key);
    snprintf(key, sizeof key, "case%d.call", ci);
    attn_json_doc *kdoc = fx_json(st, key);
    CHECK(cdoc && kdoc, "case %d: config/call metadata missing or not JSON", ci);
    if (!cdoc || !kdoc) return;
    attn_mha_config cfg;
    CHECK_OK(attn_nn_json_mha_config(attn_json_root(cdoc), NULL, &cfg));
    const attn_json *call = attn_json_root(kdoc);
    attn_mha *m = NULL;
    CHECK_OK(attn_mha_create(&cfg, &m));
    if (!m) return;
    snprintf(pre, sizeof pre, "case%d.p.", ci);
    CHECK_OK(attn_params_load(attn_mha_params(m), st, pre, 1));

#define T(n) (snprintf(key, sizeof key, "case%d.%s", ci, n), key)
    size_t nq_el = 0;
    float *query = fx_floats(st, T("query"), &nq_el);
    const attn_safetensors_tensor *qt = attn_safetensors_find(st, T("query"));
    const int self = json_flag(call, "self_attention");
    float *key_ = self ? query : fx_floats(st, T("key"), NULL);
    float *value = self ? query : fx_floats(st, T("value"), NULL);
    const attn_safetensors_tensor *kt = self ? qt : attn_safetensors_find(st, T("key"));
    attn_mha_args a = attn_mha_args_default();
    a.batch = qt->shape[0];
    a.nq = qt->shape[1];
    a.nk = kt->shape[1];
    a.query = query;
    a.key = key_;
    a.value = value;
    a.is_causal = json_flag(call, "is_causal");
    a.need_weights = json_flag(call, "need_weights");
    a.average_attn_weights = json_flag(call, "average_attn_weights");
    const attn_safetensors_tensor *amt = attn_safetensors_find(st, T("attn_mask"));
    float *amf = NULL, *kpf = NULL;
    uint8_t *amb = NULL, *kpb = NULL;
    if (amt) {
        a.attn_mask_3d = amt->rank == 3;
        if (amt->dtype == ATTN_DTYPE_BOOL)
            a.attn_mask = amb = fx_bools(st, T("attn_mask"));
        else
            a.attn_mask_float = amf = fx_floats(st, T("attn_mask"), NULL);
    }
    const attn_safetensors_tensor *kpt = attn_safetensors_find(st, T("key_padding_mask"));
    if (kpt) {
        if (kpt->dtype == ATTN_DTYPE_BOOL)
            a.key_padding_mask = kpb = fx_bools(st, T("key_padding_mask"));
        else
            a.key_padding_mask_float = kpf = fx_floats(st, T("key_padding_mask"), NULL);
    }
    size_t n_out = 0, n_w = 0;
    float *ref_out = fx_floats(st, T("out"), &n_out);
    float *ref_w = fx_floats(st, T("weights"), &n_w);
    float *dout = fx_floats(st, T("dout"), NULL);
    float *out = xmalloc(sizeof(float) * n_out);
    float *w = ref_w ? xmalloc(sizeof(float) * n_w) : NULL;
    bufs b;
    bufs_alloc(&b, m, &a);
    const char *what = attn_safetensors_metadata_find(st, T("config"));
    CHECK_OK(attn_mha_forward(m, &a, out, w, b.saved, b.saved_bytes, b.ws, b.ws_bytes));
    compare(what, ci, "out", out, ref_out, n_out, OUT_TOL, &max_out_err);
    if (ref_w) compare(what, ci, "weights", w, ref_w, n_w, OUT_TOL, &max_out_err);

    /* inference (no saved buffer) gives the same output */
    float *out2 = xmalloc(sizeof(float) * n_out);
    CHECK_OK(attn_mha_forward(m, &a, out2, w, NULL, 0, b.ws, b.ws_bytes));
    CHECK(!memcmp(out, out2, sizeof(float) * n_out), "case %d: inference output differs from training", ci);

    /* backward: self-attention passes one buffer for all three input gradients */
    size_t nk_el = (size_t)a.batch * a.nk * (size_t)cfg.kdim, nv_el = (size_t)a.batch * a.nk * (size_t)cfg.vdim;
    if (!cfg.kdim) nk_el = (size_t)a.batch * a.nk * (size_t)cfg.embed_dim;
    if (!cfg.vdim) nv_el = (size_t)a.batch * a.nk * (size_t)cfg.embed_dim;
    float *dq = xmalloc(sizeof(float) * nq_el);
    float *dk = self ? dq : xmalloc(sizeof(float) * nk_el), *dv = self ? dq : xmalloc(sizeof(float) * nv_el);
    CHECK_OK(attn_params_zero_grad(attn_mha_params(m)));
    CHECK_OK(attn_mha_backward(m, &a, dout, dq, dk, dv, b.saved, b.saved_bytes, b.ws, b.ws_bytes));
    float *ref = fx_floats(st, T("dquery"), NULL);
    compare(what, ci, "dquery", dq, ref, nq_el, GRAD_TOL, &max_grad_err);
    free(ref);
    if (!self) {
        ref = fx_floats(st, T("dkey"), NULL);
        compare(what, ci, "dkey", dk, ref, nk_el, GRAD_TOL, &max_grad_err);
        free(ref);
        ref = fx_floats(st, T("dvalue"), NULL);
        compare(what, ci, "dvalue", dv, ref, nv_el, GRAD_TOL, &max_grad_err);
        free(ref);
    }
    const attn_params *ps = attn_mha_params(m);
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        char gname[128];
        snprintf(gname, sizeof gname, "g.%s", p->name);
        ref = fx_floats(st, T(gname), NULL);
        CHECK(ref != NULL, "case %d: fixture lacks %s", ci, key);
        if (ref) compare(what, ci, p->name, p->grad, ref, p->numel, GRAD_TOL, &max_grad_err);
        free(ref);
    }
    /* a second backward accumulates the parameter gradients (PyTorch's .grad semantics) */
    const attn_param *p0 = attn_params_get(ps, 0);
    float *g1 = xmalloc(sizeof(float) * p0->numel);
    memcpy(g1, p0->grad, sizeof(float) * p0->numel);
    CHECK_OK(attn_mha_backward(m, &a, dout, NULL, NULL, NULL, b.saved, b.saved_bytes, b.ws, b.ws_bytes));
    int doubled = 1;
    for (size_t i = 0; i < p0->numel; i++)
        doubled &= fabsf(p0->grad[i] - 2.0f * g1[i]) <= 1e-5f * (fabsf(g1[i]) + 1e-3f);
    CHECK(doubled, "case %d: a second backward does not accumulate %s", ci, p0->name);
    free(g1);
    printf("case %d: %s %s\n", ci, what, attn_safetensors_metadata_find(st, T("call")));
#undef T
    bufs_free(&b);
    free(out);
    free(out2);
    free(w);
    free(ref_out);
    free(ref_w);
    free(dout);
    free(dq);
    if (!self) {
        free(dk);
        free(dv);
        free(key_);
        free(value);
    }
    free(query);
    free(amf);
    free(kpf);
    free(amb);
    free(kpb);
    attn_mha_free(m);
    attn_json_free(cdoc);
    attn_json_free(kdoc);
}

static void test_parity(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/nn_mha.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (!st) return;
    const char *nc = attn_safetensors_metadata_find(st, "cases");
    const int n = nc ? atoi(nc) : 0;
    CHECK(n >= 8, "fixture has %d cases", n);
    for (int ci = 0; ci < n; ci++) parity_case(st, ci);
    attn_safetensors_close(st);
    printf("parity: max output rel err %.3g, max gradient rel err %.3g\n", max_out_err, max_grad_err);
}

/* ---- a module with random inputs, for the tests below ---- */

typedef struct {
    attn_mha *m;
    attn_mha_args a;
    float *q, *k, *v, *dout;
    uint8_t *kpm, *am;
    size_t nq, nk, nv;
} rig;

static void rig_make(rig *r, test_rng *g, const attn_mha_config *cfg, int64_t B, int64_t Nq, int64_t Nk) {
    memset(r, 0, sizeof *r);
    CHECK_OK(attn_mha_create(cfg, &r->m));
    const attn_params *ps = attn_mha_params(r->m);
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        fill_normal(g, p->data, p->numel, 0.3);
    }
    const int64_t kd = cfg->kdim ? cfg->kdim : cfg->embed_dim, vd = cfg->vdim ? cfg->vdim : cfg->embed_dim;
    r->nq = (size_t)(B * Nq * cfg->embed_dim);
    r->nk = (size_t)(B * Nk * kd);
    r->nv = (size_t)(B * Nk * vd);
    r->q = xmalloc(sizeof(float) * r->nq);
    r->k = xmalloc(sizeof(float) * r->nk);
    r->v = xmalloc(sizeof(float) * r->nv);
    r->dout = xmalloc(sizeof(float) * r->nq);
    fill_normal(g, r->q, r->nq, 1);
    fill_normal(g, r->k, r->nk, 1);
    fill_normal(g, r->v, r->nv, 1);
    fill_normal(g, r->dout, r->nq, 1);
    r->kpm = xmalloc((size_t)(B * Nk));
    for (int64_t i = 0; i < B * Nk; i++) r->kpm[i] = (i % Nk) != 0 && rng_uniform(g) < 0.3;
    r->am = xmalloc((size_t)(Nq * Nk));
    for (int64_t i = 0; i < Nq * Nk; i++) r->am[i] = (i % Nk) != 0 && rng_uniform(g) < 0.3;
    r->a = attn_mha_args_default();
    r->a.batch = B;
    r->a.nq = Nq;
    r->a.nk = Nk;
    r->a.query = r->q;
    r->a.key = r->k;
    r->a.value = r->v;
    r->a.key_padding_mask = r->kpm;
    r->a.attn_mask = r->am;
}

static void rig_free(rig *r) {
    attn_mha_free(r->m);
    free(r->q);
    free(r->k);
    free(r->v);
    free(r->dout);
    free(r->kpm);
    free(r->am);
}

/* Everything one forward + backward produces, for bitwise comparisons. */
typedef struct {
    float *out, *w, *dq, *dk, *dv, *grads;
    size_t nw, ng;
} result;

static void run_all(rig *r, result *res) {
    const attn_mha_config *cfg = attn_mha_get_config(r->m);
    res->nw = (size_t)(r->a.batch * cfg->num_heads * r->a.nq * (r->a.nk + 2));
    res->out = xmalloc(sizeof(float) * r->nq);
    res->w = xmalloc(sizeof(float) * res->nw);
    res->dq = xmalloc(sizeof(float) * r->nq);
    res->dk = xmalloc(sizeof(float) * r->nk);
    res->dv = xmalloc(sizeof(float) * r->nv);
    memset(res->w, 0, sizeof(float) * res->nw);
    bufs b;
    bufs_alloc(&b, r->m, &r->a);
    const attn_params *ps = attn_mha_params(r->m);
    attn_params_zero_grad(ps);
    CHECK_OK(attn_mha_forward(r->m, &r->a, res->out, res->w, b.saved, b.saved_bytes, b.ws, b.ws_bytes));
    CHECK_OK(
        attn_mha_backward(r->m, &r->a, r->dout, res->dq, res->dk, res->dv, b.saved, b.saved_bytes, b.ws, b.ws_bytes));
    res->ng = attn_params_numel(ps);
    res->grads = xmalloc(sizeof(float) * res->ng);
    size_t o = 0;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        memcpy(res->grads + o, p->grad, sizeof(float) * p->numel);
        o += p->numel;
    }
    bufs_free(&b);
}

static int same_result(const rig *r, const result *x, const result *y) {
    return !memcmp(x->out, y->out, sizeof(float) * r->nq) && !memcmp(x->w, y->w, sizeof(float) * x->nw) &&
           !memcmp(x->dq, y->dq, sizeof(float) * r->nq) && !memcmp(x->dk, y->dk, sizeof(float) * r->nk) &&
           !memcmp(x->dv, y->dv, sizeof(float) * r->nv) && !memcmp(x->grads, y->grads, sizeof(float) * x->ng);
}

static void result_free(result *r) {
    free(r->out);
    free(r->w);
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->grads);
}

/* Dropout: deterministic for a seed, different for another seed and from eval; bitwise identical
 * for 1 and 2 threads (with weights, masks, extra keys). */
static void test_dropout_and_threads(void) {
    test_rng g = rng_seeded(77);
    attn_mha_config cfg = attn_mha_config_default(32, 4);
    cfg.kdim = 24;
    cfg.vdim = 20;
    cfg.add_bias_kv = 1;
    cfg.add_zero_attn = 1;
    cfg.dropout = 0.25f;
    rig r;
    rig_make(&r, &g, &cfg, 2, 33, 70);
    r.a.need_weights = 1;
    r.a.average_attn_weights = 0;
    r.a.training = 1;
    r.a.seed = 1234;
    r.a.offset = 5;
    result a1, a2, b1, ev, t2;
    run_all(&r, &a1);
    run_all(&r, &a2);
    CHECK(same_result(&r, &a1, &a2), "dropout: same seed gives different results");
    r.a.seed = 1235;
    run_all(&r, &b1);
    CHECK(memcmp(a1.out, b1.out, sizeof(float) * r.nq) != 0, "dropout: another seed gives the same output");
    r.a.training = 0;
    run_all(&r, &ev);
    CHECK(memcmp(a1.out, ev.out, sizeof(float) * r.nq) != 0, "dropout: training output equals eval output");
    /* the weights returned in training are the dropped ones: zeros appear, rows no longer sum to 1 */
    size_t zeros = 0;
    for (size_t i = 0; i < a1.nw / (size_t)(r.a.nk + 2) * (size_t)(r.a.nk + 2); i++) zeros += a1.w[i] == 0.0f;
    CHECK(zeros > 0, "dropout: no weight was dropped");
    r.a.training = 1;
    r.a.seed = 1234;
    attn_set_num_threads(1);
    run_all(&r, &t2);
    CHECK(same_result(&r, &a1, &t2), "threads: 1 thread differs from the default");
    result_free(&t2);
    attn_set_num_threads(2);
    run_all(&r, &t2);
    CHECK(same_result(&r, &a1, &t2), "threads: 2 threads differ from the default");
    result_free(&t2);
    /* averaged weights with masks and causality, 1 vs 2 threads */
    r.a.average_attn_weights = 1;
    r.a.is_causal = 1;
    attn_set_num_threads(1);
    run_all(&r, &t2);
    attn_set_num_threads(2);
    result t3;
    run_all(&r, &t3);
    CHECK(same_result(&r, &t2, &t3), "threads: averaged weights differ between 1 and 2 threads");
    attn_set_num_threads(0);
    result_free(&t2);
    result_free(&t3);
    result_free(&a1);
    result_free(&a2);
    result_free(&b1);
    result_free(&ev);
    rig_free(&r);
}

/* <dout, out(x)> along a random direction of every input and parameter, by central differences,
 * against the backward — in training mode with dropout (which PyTorch cannot reproduce). */
static double objective(rig *r, float *out, bufs *b) {
    attn_mha_forward(r->m, &r->a, out, NULL, NULL, 0, b->ws, b->ws_bytes);
    double s = 0;
    for (size_t i = 0; i < r->nq; i++) s += (double)out[i] * r->dout[i];
    return s;
}

static void test_fd_dropout(void) {
    test_rng g = rng_seeded(99);
    attn_mha_config cfg = attn_mha_config_default(12, 3);
    cfg.kdim = 10;
    cfg.add_bias_kv = 1;
    cfg.dropout = 0.3f;
    rig r;
    rig_make(&r, &g, &cfg, 2, 5, 6);
    r.a.training = 1;
    r.a.seed = 42;
    r.a.is_causal = 1;
    bufs b;
    bufs_alloc(&b, r.m, &r.a);
    result res;
    run_all(&r, &res);
    /* direction over q, k, v and every parameter */
    const attn_params *ps = attn_mha_params(r.m);
    const size_t np = attn_params_numel(ps), nall = r.nq + r.nk + r.nv + np;
    float *dir = xmalloc(sizeof(float) * nall);
    fill_normal(&g, dir, nall, 1);
    /* errors against max(|analytic|, spread): see dir_dot */
    double analytic = 0, spread = 0;
    size_t o = 0;
    const float *gs[4] = {res.dq, res.dk, res.dv, res.grads};
    const size_t gn[4] = {r.nq, r.nk, r.nv, np};
    for (int t = 0; t < 4; t++) {
        analytic += dir_dot(dir + o, gs[t], gn[t], &spread);
        o += gn[t];
    }
    spread = sqrt(spread);
    float *out = xmalloc(sizeof(float) * r.nq);
    /* central differences at h and h/2, Richardson-extrapolated (the O(h^2) term cancels) */
    double f[4];
    for (int s = 0; s < 4; s++) {
        const float sg = (s & 1 ? -1.0f : 1.0f) * (s < 2 ? 1e-2f : 5e-3f);
        o = 0;
        float *xs[3] = {r.q, r.k, r.v};
        size_t ns[3] = {r.nq, r.nk, r.nv};
        float **bk = xmalloc(sizeof(float *) * (3 + attn_params_count(ps)));
        for (int t = 0; t < 3; t++) {
            bk[t] = xmalloc(sizeof(float) * ns[t]);
            memcpy(bk[t], xs[t], sizeof(float) * ns[t]);
            for (size_t i = 0; i < ns[t]; i++) xs[t][i] += sg * dir[o++];
        }
        for (size_t pi = 0; pi < attn_params_count(ps); pi++) {
            const attn_param *p = attn_params_get(ps, pi);
            bk[3 + pi] = xmalloc(sizeof(float) * p->numel);
            memcpy(bk[3 + pi], p->data, sizeof(float) * p->numel);
            for (size_t i = 0; i < p->numel; i++) p->data[i] += sg * dir[o++];
        }
        f[s] = objective(&r, out, &b);
        for (int t = 0; t < 3; t++) {
            memcpy(xs[t], bk[t], sizeof(float) * ns[t]);
            free(bk[t]);
        }
        for (size_t pi = 0; pi < attn_params_count(ps); pi++) {
            const attn_param *p = attn_params_get(ps, pi);
            memcpy(p->data, bk[3 + pi], sizeof(float) * p->numel);
            free(bk[3 + pi]);
        }
        free(bk);
    }
    const double d1 = (f[0] - f[1]) / (2.0 * 1e-2f), d2 = (f[2] - f[3]) / (2.0 * 5e-3f);
    const double numeric = (4.0 * d2 - d1) / 3.0;
    const double e = fabs(numeric - analytic) / fmax(fabs(analytic), spread);
    CHECK(e < 5e-4, "finite differences with dropout: analytic %.8g, numeric %.8g (spread %.3g, rel %.3g)", analytic,
          numeric, spread, e);
    printf("finite differences with dropout: rel err %.3g\n", e);
    free(out);
    free(dir);
    result_free(&res);
    bufs_free(&b);
    rig_free(&r);
}

/* Linear helpers against a double loop. */
static void test_linear(void) {
    test_rng g = rng_seeded(5);
    const int64_t R = 37, I = 19, O = 23;
    float *x = xmalloc(sizeof(float) * R * I), *w = xmalloc(sizeof(float) * O * I), *b = xmalloc(sizeof(float) * O);
    float *y = xmalloc(sizeof(float) * R * O), *dy = xmalloc(sizeof(float) * R * O),
          *dx = xmalloc(sizeof(float) * R * I);
    float *dw = calloc((size_t)(O * I), sizeof(float)), *db = calloc((size_t)O, sizeof(float));
    double *ry = xmalloc(sizeof(double) * R * O), *rdx = xmalloc(sizeof(double) * R * I);
    double *rdw = xmalloc(sizeof(double) * O * I), *rdb = xmalloc(sizeof(double) * O);
    fill_normal(&g, x, (size_t)(R * I), 1);
    fill_normal(&g, w, (size_t)(O * I), 1);
    fill_normal(&g, b, (size_t)O, 1);
    fill_normal(&g, dy, (size_t)(R * O), 1);
    size_t wsb = attn_linear_workspace_size(R, I, O);
    void *ws = xmalloc(wsb);
    CHECK_OK(attn_linear_forward(x, w, b, y, R, I, O, ws, wsb));
    for (int64_t i = 0; i < R * I; i++) dx[i] = 1.0f;
    CHECK_OK(attn_linear_backward(x, w, dy, dx, 1, dw, db, R, I, O, ws, wsb));
    for (int64_t r = 0; r < R; r++)
        for (int64_t o = 0; o < O; o++) {
            double s = b[o];
            for (int64_t i = 0; i < I; i++) s += (double)x[r * I + i] * w[o * I + i];
            ry[r * O + o] = s;
        }
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < I; i++) {
            double s = 1.0;
            for (int64_t o = 0; o < O; o++) s += (double)dy[r * O + o] * w[o * I + i];
            rdx[r * I + i] = s;
        }
    for (int64_t o = 0; o < O; o++) {
        double sb = 0;
        for (int64_t i = 0; i < I; i++) {
            double s = 0;
            for (int64_t r = 0; r < R; r++) s += (double)dy[r * O + o] * x[r * I + i];
            rdw[o * I + i] = s;
        }
        for (int64_t r = 0; r < R; r++) sb += dy[r * O + o];
        rdb[o] = sb;
    }
    CHECK(rel_err_fd(y, ry, (size_t)(R * O)) < 1e-6, "linear forward");
    CHECK(rel_err_fd(dx, rdx, (size_t)(R * I)) < 1e-6, "linear backward dx (accumulated)");
    CHECK(rel_err_fd(dw, rdw, (size_t)(O * I)) < 1e-6, "linear backward dW");
    CHECK(rel_err_fd(db, rdb, (size_t)O) < 1e-6, "linear backward db");
    CHECK_STATUS(attn_linear_forward(x, w, b, y, R, 0, O, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_linear_forward(NULL, w, b, y, R, I, O, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_linear_forward(x, w, b, y, R, I, O, ws, 0), ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_linear_backward(x, w, dy, dy, 0, dw, db, R, I, O, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    free(x);
    free(w);
    free(b);
    free(y);
    free(dy);
    free(dx);
    free(dw);
    free(db);
    free(ry);
    free(rdx);
    free(rdw);
    free(rdb);
    free(ws);
}

/* Names, shapes, load/save round trip and the errors listing bad names. */
static void test_params(void) {
    attn_mha_config cfg = attn_mha_config_default(8, 2);
    cfg.add_bias_kv = 1;
    attn_mha *m = NULL, *m2 = NULL;
    CHECK_OK(attn_mha_create(&cfg, &m));
    const attn_params *ps = attn_mha_params(m);
    const char *want[] = {"in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj.weight", "out_proj.bias"};
    CHECK(attn_params_count(ps) == 6, "mha has %zu parameters", attn_params_count(ps));
    for (size_t i = 0; i < 6 && i < attn_params_count(ps); i++)
        CHECK(!strcmp(attn_params_get(ps, i)->name, want[i]), "param %zu is %s, want %s", i,
              attn_params_get(ps, i)->name, want[i]);
    const attn_param *ipw = attn_params_find(ps, "in_proj_weight");
    CHECK(ipw && ipw->rank == 2 && ipw->shape[0] == 24 && ipw->shape[1] == 8, "in_proj_weight shape");
    CHECK(attn_params_numel(ps) == 24 * 8 + 24 + 8 + 8 + 64 + 8, "numel %zu", attn_params_numel(ps));
    /* PyTorch's init: in_proj_bias zero, in_proj_weight within the xavier bound, not all zero */
    int okb = 1, okw = 1, nz = 0;
    const attn_param *ipb = attn_params_find(ps, "in_proj_bias");
    for (size_t i = 0; i < ipb->numel; i++) okb &= ipb->data[i] == 0.0f;
    for (size_t i = 0; i < ipw->numel; i++) {
        okw &= fabsf(ipw->data[i]) <= sqrtf(6.0f / 32.0f);
        nz += ipw->data[i] != 0.0f;
    }
    CHECK(okb && okw && nz > 0, "initialisation (bias zero %d, weight in bound %d, nonzero %d)", okb, okw, nz);

    /* round trip through memory */
    attn_safetensors_writer *w = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    CHECK_OK(attn_params_write(ps, w, "self_attn."));
    void *buf = NULL;
    size_t len = 0;
    CHECK_OK(attn_safetensors_writer_write_memory(w, &buf, &len));
    attn_safetensors_writer_free(w);
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_memory(buf, len, &st));
    CHECK_OK(attn_mha_create(&cfg, &m2));
    CHECK_OK(attn_params_reset(attn_mha_params(m2), 99));
    CHECK_OK(attn_params_load(attn_mha_params(m2), st, "self_attn.", 1));
    CHECK(!memcmp(attn_params_find(attn_mha_params(m2), "out_proj.weight")->data,
                  attn_params_find(ps, "out_proj.weight")->data, 64 * sizeof(float)),
          "round trip changed out_proj.weight");
    /* a different configuration: missing and unexpected names, listed */
    attn_mha_config c2 = cfg;
    c2.add_bias_kv = 0;
    c2.kdim = 6;
    attn_mha *m3 = NULL;
    CHECK_OK(attn_mha_create(&c2, &m3));
    CHECK_STATUS(attn_params_load(attn_mha_params(m3), st, "self_attn.", 1), ATTN_ERR_NOT_FOUND);
    const char *msg = attn_last_error();
    CHECK(strstr(msg, "missing (3): self_attn.q_proj_weight, self_attn.k_proj_weight, self_attn.v_proj_weight") &&
              strstr(msg, "unexpected (3): self_attn.in_proj_weight, self_attn.bias_k, self_attn.bias_v"),
          "load error does not list the names: %s", msg);
    /* non-strict: extras are fine, missing ones are not */
    attn_mha_config c3 = cfg;
    c3.add_bias_kv = 0;
    attn_mha *m4 = NULL;
    CHECK_OK(attn_mha_create(&c3, &m4));
    CHECK_OK(attn_params_load(attn_mha_params(m4), st, "self_attn.", 0));
    CHECK_STATUS(attn_params_load(attn_mha_params(m4), st, "self_attn.", 1), ATTN_ERR_NOT_FOUND);
    /* wrong shape: embed_dim 8 weights into a 16-wide module */
    attn_mha_config c4 = attn_mha_config_default(16, 2);
    c4.add_bias_kv = 1;
    attn_mha *m5 = NULL;
    CHECK_OK(attn_mha_create(&c4, &m5));
    CHECK_STATUS(attn_params_load(attn_mha_params(m5), st, "self_attn.", 1), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "wrong shape (6): self_attn.in_proj_weight [24, 8] (expected [48, 16])") != NULL,
          "shape error message: %s", attn_last_error());
    CHECK_STATUS(attn_params_load(attn_mha_params(m5), st, "nothing.", 1), ATTN_ERR_NOT_FOUND);
    CHECK_STATUS(attn_params_load_file(attn_mha_params(m5), "/nonexistent/x.safetensors"), ATTN_ERR_IO);
    attn_safetensors_close(st);
    free(buf);
    attn_mha_free(m);
    attn_mha_free(m2);
    attn_mha_free(m3);
    attn_mha_free(m4);
    attn_mha_free(m5);
}

/* ---- separate projections (q_proj, k_proj, v_proj, out_proj as nn.Linear layers) ---- */

/* The data (grad = 0) or gradient (grad = 1) of separate-layout parameter `name` as stored in the
 * packed (or PyTorch's unpacked q_proj_weight) module: a pointer into the matching block. */
static const float *packed_block(const attn_mha *m, const char *name, int grad) {
    const attn_params *ps = attn_mha_params(m);
    const int64_t E = attn_mha_get_config(m)->embed_dim;
    const char *which = strchr("qkv", name[0]);
    const attn_param *p = NULL;
    size_t off = 0;
    if (which && !strcmp(name + 1, "_proj.weight")) {
        p = attn_params_find(ps, "in_proj_weight");
        if (p)
            off = (size_t)((which - "qkv") * E * E);
        else {
            char alt[32];
            snprintf(alt, sizeof alt, "%c_proj_weight", name[0]);
            p = attn_params_find(ps, alt);
        }
    } else if (which && !strcmp(name + 1, "_proj.bias")) {
        p = attn_params_find(ps, "in_proj_bias");
        off = (size_t)((which - "qkv") * E);
    } else {
        p = attn_params_find(ps, name);
    }
    return p ? (grad ? p->grad : p->data) + off : NULL;
}

static void test_separate_projections(void) {
    /* names, shapes and nn.Linear's initialisation */
    attn_mha_config cfg = attn_mha_config_default(8, 2);
    cfg.kdim = 5;
    cfg.vdim = 6;
    cfg.add_bias_kv = 1;
    cfg.separate_projections = 1;
    attn_mha *m = NULL;
    CHECK_OK(attn_mha_create(&cfg, &m));
    const attn_params *ps = attn_mha_params(m);
    const struct {
        const char *name;
        int64_t s0, s1;
        double bound;
    } want[] = {
        {"q_proj.weight", 8, 8, 1 / sqrt(8.0)},
        {"q_proj.bias", 8, 0, 1 / sqrt(8.0)},
        {"k_proj.weight", 8, 5, 1 / sqrt(5.0)},
        {"k_proj.bias", 8, 0, 1 / sqrt(5.0)},
        {"v_proj.weight", 8, 6, 1 / sqrt(6.0)},
        {"v_proj.bias", 8, 0, 1 / sqrt(6.0)},
        {"bias_k", 1, 1, 0},
        {"bias_v", 1, 1, 0},
        {"out_proj.weight", 8, 8, 1 / sqrt(8.0)},
        {"out_proj.bias", 8, 0, 1 / sqrt(8.0)},
    };
    CHECK(attn_params_count(ps) == 10, "separate layout has %zu parameters", attn_params_count(ps));
    for (size_t i = 0; i < 10 && i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        CHECK(!strcmp(p->name, want[i].name), "param %zu is %s, want %s", i, p->name, want[i].name);
        CHECK(p->shape[0] == want[i].s0 && (want[i].s1 == 0 ? p->rank == 1 : p->shape[1] == want[i].s1),
              "%s: shape [%lld, %lld]", p->name, (long long)p->shape[0], (long long)p->shape[1]);
        if (want[i].bound == 0) continue;
        int in = 1, nz = 0;
        for (size_t e = 0; e < p->numel; e++) {
            in &= fabs(p->data[e]) <= want[i].bound;
            nz += p->data[e] != 0.0f;
        }
        CHECK(in && nz > (int)p->numel / 2, "%s: initialisation (within 1/sqrt(fan_in) %d, nonzero %d)", p->name, in,
              nz);
    }
    cfg.bias = 0;
    cfg.add_bias_kv = 0;
    attn_mha *nb = NULL;
    CHECK_OK(attn_mha_create(&cfg, &nb));
    CHECK(attn_params_count(attn_mha_params(nb)) == 4 && attn_params_find(attn_mha_params(nb), "q_proj.bias") == NULL,
          "bias = 0: %zu parameters", attn_params_count(attn_mha_params(nb)));
    attn_mha_free(nb);

    /* round trip under the seed's names through a name map */
    static const attn_name_rule rules[] = {
        {"q_proj.", "W_q."}, {"k_proj.", "W_k."}, {"v_proj.", "W_v."}, {"out_proj.", "W_o."}};
    const attn_name_map map = {rules, 4};
    attn_safetensors_writer *w = NULL;
    void *buf = NULL;
    size_t len = 0;
    CHECK_OK(attn_safetensors_writer_create(&w));
    CHECK_OK(attn_params_write_mapped(ps, w, &map, "attn."));
    CHECK_OK(attn_safetensors_writer_write_memory(w, &buf, &len));
    attn_safetensors_writer_free(w);
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_memory(buf, len, &st));
    const char *seed_names[] = {"attn.W_q.weight", "attn.W_q.bias", "attn.W_k.weight", "attn.W_k.bias",
                                "attn.W_v.weight", "attn.W_v.bias", "attn.bias_k",     "attn.bias_v",
                                "attn.W_o.weight", "attn.W_o.bias"};
    for (size_t i = 0; i < 10; i++)
        CHECK(st && attn_safetensors_find(st, seed_names[i]) != NULL, "saved file lacks %s", seed_names[i]);
    cfg.bias = 1;
    cfg.add_bias_kv = 1;
    attn_mha *m2 = NULL;
    CHECK_OK(attn_mha_create(&cfg, &m2));
    CHECK_OK(attn_params_reset(attn_mha_params(m2), 7));
    CHECK_OK(attn_params_load_mapped(attn_mha_params(m2), st, &map, "attn.", 1));
    int same = 1;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *a = attn_params_get(ps, i), *b = attn_params_get(attn_mha_params(m2), i);
        same &= !memcmp(a->data, b->data, sizeof(float) * a->numel);
    }
    CHECK(same, "mapped round trip changed a parameter");
    CHECK_STATUS(attn_params_load(attn_mha_params(m2), st, "attn.", 1), ATTN_ERR_NOT_FOUND);
    attn_safetensors_close(st);
    free(buf);
    attn_mha_free(m);
    attn_mha_free(m2);

    /* the same function as the packed layout, weights copied: outputs, weights, input and parameter
     * gradients (the same arithmetic, so bitwise) */
    test_rng g = rng_seeded(41);
    attn_mha_config cases[4];
    cases[0] = attn_mha_config_default(12, 3);
    cases[1] = attn_mha_config_default(8, 2);
    cases[1].kdim = 5;
    cases[1].vdim = 7;
    cases[2] = attn_mha_config_default(8, 4);
    cases[2].add_bias_kv = 1;
    cases[2].add_zero_attn = 1;
    cases[3] = attn_mha_config_default(8, 2);
    cases[3].attention.kind = ATTN_ATTENTION_WINDOW;
    cases[3].attention.window = 2;
    cases[3].bias = 0;
    for (int ci = 0; ci < 4; ci++) {
        rig r;
        rig_make(&r, &g, &cases[ci], 2, 6, 6);
        if (ci == 3) r.a.attn_mask = NULL;
        r.a.is_causal = ci == 1 || ci == 3;
        r.a.need_weights = 1;
        r.a.average_attn_weights = 0;
        result packed, sep;
        run_all(&r, &packed);
        attn_mha_config sc = cases[ci];
        sc.separate_projections = 1;
        attn_mha *s = NULL;
        CHECK_OK(attn_mha_create(&sc, &s));
        if (!s) {
            result_free(&packed);
            rig_free(&r);
            continue;
        }
        const attn_params *sp = attn_mha_params(s);
        for (size_t i = 0; i < attn_params_count(sp); i++) {
            const attn_param *p = attn_params_get(sp, i);
            const float *src = packed_block(r.m, p->name, 0);
            CHECK(src != NULL, "case %d: no packed counterpart of %s", ci, p->name);
            if (src) memcpy(p->data, src, sizeof(float) * p->numel);
        }
        attn_mha *pm = r.m;
        r.m = s;
        run_all(&r, &sep);
        CHECK(!memcmp(packed.out, sep.out, sizeof(float) * r.nq) && !memcmp(packed.w, sep.w, sizeof(float) * packed.nw),
              "case %d: separate projections change the output or weights", ci);
        CHECK(!memcmp(packed.dq, sep.dq, sizeof(float) * r.nq) && !memcmp(packed.dk, sep.dk, sizeof(float) * r.nk) &&
                  !memcmp(packed.dv, sep.dv, sizeof(float) * r.nv),
              "case %d: separate projections change the input gradients", ci);
        for (size_t i = 0; i < attn_params_count(sp); i++) {
            const attn_param *p = attn_params_get(sp, i);
            const float *gp = packed_block(pm, p->name, 1);
            CHECK(gp && !memcmp(gp, p->grad, sizeof(float) * p->numel), "case %d: gradient of %s differs", ci, p->name);
        }
        r.m = pm;
        attn_mha_free(s);
        result_free(&packed);
        result_free(&sep);
        rig_free(&r);
    }
}

static void test_errors(void) {
    attn_mha *m = NULL;
    attn_mha_config cfg = attn_mha_config_default(10, 3);
    CHECK_STATUS(attn_mha_create(&cfg, &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_mha_create") && strstr(attn_last_error(), "num_heads"), "message: %s",
          attn_last_error());
    cfg = attn_mha_config_default(8, 2);
    cfg.dropout = 1.5f;
    CHECK_STATUS(attn_mha_create(&cfg, &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_mha_create(NULL, &m), ATTN_ERR_INVALID_ARGUMENT);
    test_rng g = rng_seeded(3);
    cfg = attn_mha_config_default(8, 2);
    cfg.kdim = 5;
    rig r;
    rig_make(&r, &g, &cfg, 2, 3, 4);
    bufs b;
    bufs_alloc(&b, r.m, &r.a);
    float out[2 * 3 * 8], dq[2 * 3 * 8];
    attn_mha_args a = r.a;
    a.nk = 0;
    CHECK_STATUS(attn_mha_forward(r.m, &a, out, NULL, NULL, 0, b.ws, b.ws_bytes), ATTN_ERR_INVALID_ARGUMENT);
    a = r.a;
    a.key = NULL;
    CHECK_STATUS(attn_mha_forward(r.m, &a, out, NULL, NULL, 0, b.ws, b.ws_bytes), ATTN_ERR_INVALID_ARGUMENT);
    a = r.a;
    a.need_weights = 1;
    CHECK_STATUS(attn_mha_forward(r.m, &a, out, NULL, NULL, 0, b.ws, b.ws_bytes), ATTN_ERR_INVALID_ARGUMENT);
    a = r.a;
    float fm[3 * 4] = {0};
    a.attn_mask_float = fm;
    CHECK_STATUS(attn_mha_forward(r.m, &a, out, NULL, NULL, 0, b.ws, b.ws_bytes), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_mha_forward(r.m, &r.a, out, NULL, NULL, 0, b.ws, b.ws_bytes - 100), ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_mha_forward(r.m, &r.a, out, NULL, b.saved, 16, b.ws, b.ws_bytes), ATTN_ERR_WORKSPACE);
    CHECK_OK(attn_mha_forward(r.m, &r.a, out, NULL, b.saved, b.saved_bytes, b.ws, b.ws_bytes));
    CHECK_STATUS(attn_mha_backward(r.m, &r.a, r.dout, dq, dq, NULL, b.saved, b.saved_bytes, b.ws, b.ws_bytes),
                 ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_mha_backward(r.m, &r.a, r.dout, dq, NULL, NULL, NULL, 0, b.ws, b.ws_bytes),
                 ATTN_ERR_INVALID_ARGUMENT);
    /* config parsing names the key */
    attn_json_doc *doc = NULL;
    const char *bad = "{\"embed_dim\": 8, \"num_heads\": 2, \"bogus\": 1}";
    CHECK(attn_json_parse(bad, strlen(bad), NULL, &doc, NULL) == ATTN_JSON_OK, "json");
    CHECK_STATUS(attn_nn_json_mha_config(attn_json_root(doc), NULL, &cfg), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "bogus") != NULL, "message: %s", attn_last_error());
    attn_json_free(doc);
    bufs_free(&b);
    rig_free(&r);
}

int main(void) {
    test_linear();
    test_params();
    test_separate_projections();
    test_errors();
    test_parity();
    test_fd_dropout();
    test_dropout_and_threads();
    return test_summary("test_nn_mha");
}
