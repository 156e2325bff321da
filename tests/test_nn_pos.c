/* Positional encodings against tests/parity/gen_nn_pos.py: the sinusoidal table (the seed's
 * formula), nn.Embedding forward/backward, learned positions, RoPE in both layouts with linear and
 * NTK scaling (forward and backward, through [B, N, H, d] strides), ALiBi slopes and attention
 * with them; plus RoPE properties (norm preserved, relative positions, thread determinism) and
 * argument errors. */
#include "io/json.h"
#include "test_util.h"

#define OUT_TOL 1e-5
#define GRAD_TOL 1e-4

static double max_out_err, max_grad_err;

/* fx_floats, and a missing tensor fails the test */
static float *fx_required(const attn_safetensors *st, const char *name, size_t *count) {
    CHECK(attn_safetensors_find(st, name) != NULL, "fixture lacks %s", name);
    return fx_floats(st, name, count);
}

static int64_t *fx_i64(const attn_safetensors *st, const char *name, size_t *count) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    if (!t || t->dtype != ATTN_DTYPE_I64) return NULL;
    int64_t *x = xmalloc(t->nbytes ? t->nbytes : 1);
    memcpy(x, t->data, t->nbytes);
    if (count) *count = t->nbytes / 8;
    return x;
}

static double json_num(const attn_json *o, const char *k) {
    double v = 0;
    attn_json_as_double(attn_json_get(o, k), &v);
    return v;
}

static void cmp(const char *what, const float *got, const float *ref, size_t n, double tol, double *worst) {
    double e = rel_err_ff(got, ref, n);
    if (e > *worst) *worst = e;
    CHECK(e <= tol, "%s: rel err %.3g > %.1g", what, e, tol);
}

static void test_sinusoidal(const attn_safetensors *st) {
    const int64_t shapes[2][2] = {{64, 16}, {300, 10}};
    const char *names[2] = {"sin.d16", "sin.d10"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        float *ref = fx_required(st, names[i], &n);
        float *pe = xmalloc(sizeof(float) * n);
        CHECK_OK(attn_sinusoidal_table(pe, shapes[i][0], shapes[i][1]));
        if (ref) cmp(names[i], pe, ref, n, OUT_TOL, &max_out_err);
        free(pe);
        free(ref);
    }
    /* posenc_add adds rows pos0.. of the table to every batch */
    float pe[8 * 4], x[2 * 3 * 4] = {0};
    CHECK_OK(attn_sinusoidal_table(pe, 8, 4));
    CHECK_OK(attn_posenc_add(x, pe, 8, 2, 3, 4, 5));
    CHECK(x[0] == pe[20] && x[12 + 11] == pe[7 * 4 + 3], "posenc_add rows");
    CHECK_STATUS(attn_posenc_add(x, pe, 8, 2, 3, 4, 6), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_sinusoidal_table(pe, 8, 0), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_embedding(const attn_safetensors *st) {
    attn_embedding *e = NULL;
    CHECK_OK(attn_embedding_create(20, 8, 3, &e));
    if (!e) return;
    const attn_param *w = attn_params_find(attn_embedding_params(e), "weight");
    CHECK(w && w->shape[0] == 20 && w->shape[1] == 8, "embedding weight shape");
    int pad_zero = 1;
    for (int c = 0; c < 8; c++) pad_zero &= w->data[3 * 8 + c] == 0.0f;
    CHECK(pad_zero, "padding row not zero after init");
    CHECK_OK(attn_params_load(attn_embedding_params(e), st, "emb.", 0));
    size_t n;
    int64_t *idx = fx_i64(st, "emb.indices", &n);
    CHECK(idx != NULL, "emb.indices");
    if (!idx) return;
    float *ref = fx_required(st, "emb.out", NULL), *dout = fx_required(st, "emb.dout", NULL);
    float *ref_dw = fx_required(st, "emb.dweight", NULL);
    float *out = xmalloc(sizeof(float) * n * 8);
    CHECK_OK(attn_embedding_forward(e, idx, (int64_t)n, out));
    cmp("embedding forward", out, ref, n * 8, OUT_TOL, &max_out_err);
    CHECK_OK(attn_embedding_backward(e, idx, (int64_t)n, dout));
    cmp("embedding weight grad", w->grad, ref_dw, 160, GRAD_TOL, &max_grad_err);
    int64_t bad[2] = {1, 20};
    CHECK_STATUS(attn_embedding_forward(e, bad, 2, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "indices[1] = 20") != NULL, "message: %s", attn_last_error());
    attn_embedding *bad_e = NULL;
    CHECK_STATUS(attn_embedding_create(4, 2, 4, &bad_e), ATTN_ERR_INVALID_ARGUMENT);
    attn_embedding_free(e);
    free(idx);
    free(ref);
    free(dout);
    free(ref_dw);
    free(out);

    /* learned positions */
    attn_embedding *p = NULL;
    CHECK_OK(attn_embedding_create(16, 8, -1, &p));
    CHECK_OK(attn_params_load(attn_embedding_params(p), st, "lpos.", 0));
    size_t nx;
    float *x = fx_required(st, "lpos.x", &nx), *y = fx_required(st, "lpos.y", NULL),
          *dy = fx_required(st, "lpos.dy", NULL);
    float *dw = fx_required(st, "lpos.dweight", NULL);
    CHECK_OK(attn_embedding_add_positions(p, x, 3, 5, 4));
    cmp("learned positions forward", x, y, nx, OUT_TOL, &max_out_err);
    CHECK_OK(attn_embedding_positions_backward(p, dy, 3, 5, 4));
    cmp("learned positions table grad", attn_params_get(attn_embedding_params(p), 0)->grad, dw, 128, GRAD_TOL,
        &max_grad_err);
    CHECK_STATUS(attn_embedding_add_positions(p, x, 3, 5, 12), ATTN_ERR_SHAPE);
    attn_embedding_free(p);
    free(x);
    free(y);
    free(dy);
    free(dw);
}

/* [B, N, H, d] storage as the [B, H, N, d] view RoPE takes. */
static attn_tensor bnhd(float *x, int64_t B, int64_t N, int64_t H, int64_t d) {
    attn_tensor t = attn_tensor_4d(x, B, H, N, d);
    t.stride[0] = N * H * d;
    t.stride[1] = d;
    t.stride[2] = H * d;
    t.stride[3] = 1;
    return t;
}

static void test_rope(const attn_safetensors *st) {
    const char *ns = attn_safetensors_metadata_find(st, "ropes");
    const int nr = ns ? atoi(ns) : 0;
    CHECK(nr >= 4, "fixture has %d RoPE cases", nr);
    for (int ri = 0; ri < nr; ri++) {
        char key[64];
        snprintf(key, sizeof key, "rope%d", ri);
        const char *js = attn_safetensors_metadata_find(st, key);
        attn_json_doc *doc = NULL;
        CHECK(js && attn_json_parse(js, strlen(js), NULL, &doc, NULL) == ATTN_JSON_OK, "rope%d metadata", ri);
        if (!doc) continue;
        const attn_json *o = attn_json_root(doc);
        attn_rope_config c = attn_rope_config_default((int64_t)json_num(o, "hd"));
        c.rotary_dim = (int64_t)json_num(o, "rd");
        c.base = json_num(o, "base");
        c.factor = json_num(o, "factor");
        const char *layout = attn_json_as_string(attn_json_get(o, "layout"), NULL);
        const char *scaling = attn_json_as_string(attn_json_get(o, "scaling"), NULL);
        c.layout = !strcmp(layout, "neox") ? ATTN_ROPE_NEOX : ATTN_ROPE_INTERLEAVED;
        c.scaling = !strcmp(scaling, "linear") ? ATTN_ROPE_SCALING_LINEAR
                    : !strcmp(scaling, "ntk")  ? ATTN_ROPE_SCALING_NTK
                                               : ATTN_ROPE_SCALING_NONE;
        snprintf(key, sizeof key, "rope%d.x", ri);
        const attn_safetensors_tensor *xt = attn_safetensors_find(st, key);
        size_t n;
        float *x = fx_required(st, key, &n);
        snprintf(key, sizeof key, "rope%d.y", ri);
        float *y = fx_required(st, key, NULL);
        snprintf(key, sizeof key, "rope%d.dy", ri);
        float *dy = fx_required(st, key, NULL);
        snprintf(key, sizeof key, "rope%d.dx", ri);
        float *dx = fx_required(st, key, NULL);
        snprintf(key, sizeof key, "rope%d.positions", ri);
        int64_t *pos = fx_i64(st, key, NULL);
        const int64_t B = xt->shape[0], N = xt->shape[1], H = xt->shape[2], d = xt->shape[3];
        attn_tensor xv = bnhd(x, B, N, H, d), dv = bnhd(dy, B, N, H, d);
        const int64_t pos0 = (int64_t)json_num(o, "pos0");
        CHECK_OK(attn_rope_forward(&c, &xv, pos0, pos));
        snprintf(key, sizeof key, "rope%d forward (%s, %s)", ri, layout, scaling);
        cmp(key, x, y, n, OUT_TOL, &max_out_err);
        CHECK_OK(attn_rope_backward(&c, &dv, pos0, pos));
        snprintf(key, sizeof key, "rope%d backward (%s, %s)", ri, layout, scaling);
        cmp(key, dy, dx, n, GRAD_TOL, &max_grad_err);
        free(x);
        free(y);
        free(dy);
        free(dx);
        free(pos);
        attn_json_free(doc);
    }

    /* properties: q.k after RoPE depends only on the position difference; bitwise thread
     * determinism on a larger tensor; errors */
    test_rng g = rng_seeded(11);
    attn_rope_config c = attn_rope_config_default(8);
    float q[8], k[8], q2[8], k2[8];
    fill_normal(&g, q, 8, 1);
    fill_normal(&g, k, 8, 1);
    memcpy(q2, q, sizeof q);
    memcpy(k2, k, sizeof k);
    attn_tensor qa = attn_tensor_4d(q, 1, 1, 1, 8), ka = attn_tensor_4d(k, 1, 1, 1, 8);
    attn_tensor qb = attn_tensor_4d(q2, 1, 1, 1, 8), kb = attn_tensor_4d(k2, 1, 1, 1, 8);
    CHECK_OK(attn_rope_forward(&c, &qa, 10, NULL));
    CHECK_OK(attn_rope_forward(&c, &ka, 7, NULL));
    CHECK_OK(attn_rope_forward(&c, &qb, 503, NULL));
    CHECK_OK(attn_rope_forward(&c, &kb, 500, NULL));
    double d1 = 0, d2 = 0;
    for (int i = 0; i < 8; i++) {
        d1 += (double)q[i] * k[i];
        d2 += (double)q2[i] * k2[i];
    }
    CHECK(fabs(d1 - d2) < 1e-5 * (fabs(d1) + 1), "RoPE relative position: %g vs %g", d1, d2);
    const int64_t B = 2, N = 300, H = 4, D = 64;
    const size_t tot = (size_t)(B * N * H * D);
    float *x1 = xmalloc(sizeof(float) * tot), *x2 = xmalloc(sizeof(float) * tot);
    fill_normal(&g, x1, tot, 1);
    memcpy(x2, x1, sizeof(float) * tot);
    attn_tensor v1 = bnhd(x1, B, N, H, D), v2 = bnhd(x2, B, N, H, D);
    attn_rope_config cl = attn_rope_config_default(D);
    cl.layout = ATTN_ROPE_INTERLEAVED;
    attn_set_num_threads(1);
    CHECK_OK(attn_rope_forward(&cl, &v1, 0, NULL));
    attn_set_num_threads(2);
    CHECK_OK(attn_rope_forward(&cl, &v2, 0, NULL));
    attn_set_num_threads(0);
    CHECK(!memcmp(x1, x2, sizeof(float) * tot), "RoPE differs between 1 and 2 threads");
    cl.rotary_dim = 7;
    CHECK_STATUS(attn_rope_forward(&cl, &v1, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    cl = attn_rope_config_default(32);
    CHECK_STATUS(attn_rope_forward(&cl, &v1, 0, NULL), ATTN_ERR_SHAPE);
    cl = attn_rope_config_default(D);
    cl.scaling = ATTN_ROPE_SCALING_LINEAR;
    cl.factor = 0;
    CHECK_STATUS(attn_rope_forward(&cl, &v1, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    free(x1);
    free(x2);
}

/* Llama 3 scaling against transformers' _compute_llama3_parameters written out in float64 (the
 * three bands as torch.where selects them: low frequencies / factor, high kept, the medium band
 * smoothed), rotating [B, N, H, d] rows at positions 0..N-1 in the NeoX layout; every band must
 * hold some pair, so the test exercises each formula. */
static void test_rope_llama3(void) {
    enum { B = 1, N = 40, H = 2, D = 64 };
    const double base = 500000.0, factor = 8.0, lo = 1.0, hi = 4.0, L = 64.0, pi = 3.14159265358979323846;
    double inv[D / 2];
    int bands[3] = {0, 0, 0};
    for (int i = 0; i < D / 2; i++) {
        const double f = 1.0 / pow(base, (double)(2 * i) / D), w = 2.0 * pi / f;
        const double scaled = w > L / lo ? f / factor : f;
        const double smooth = (L / w - lo) / (hi - lo);
        const int medium = !(w < L / hi) && !(w > L / lo);
        inv[i] = medium ? (1.0 - smooth) * scaled / factor + smooth * scaled : scaled;
        bands[w < L / hi ? 0 : w > L / lo ? 2 : 1]++;
    }
    CHECK(bands[0] && bands[1] && bands[2], "llama3 bands %d %d %d: one is empty", bands[0], bands[1], bands[2]);
    test_rng g = rng_seeded(23);
    float x[B * N * H * D], ref[B * N * H * D];
    fill_normal(&g, x, B * N * H * D, 1);
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < D / 2; i++) {
                const float *r = x + (n * H + h) * D;
                const double a = n * inv[i], xa = r[i], xb = r[i + D / 2];
                ref[(n * H + h) * D + i] = (float)(xa * cos(a) - xb * sin(a));
                ref[(n * H + h) * D + i + D / 2] = (float)(xb * cos(a) + xa * sin(a));
            }
    attn_rope_config c = attn_rope_config_default(D);
    c.base = base;
    c.scaling = ATTN_ROPE_SCALING_LLAMA3;
    c.factor = factor;
    c.low_freq_factor = lo;
    c.high_freq_factor = hi;
    c.original_max_positions = (int64_t)L;
    attn_tensor xv = bnhd(x, B, N, H, D);
    CHECK_OK(attn_rope_forward(&c, &xv, 0, NULL));
    cmp("rope llama3 forward (neox)", x, ref, (size_t)(B * N * H * D), OUT_TOL, &max_out_err);
    c.high_freq_factor = c.low_freq_factor;
    CHECK_STATUS(attn_rope_forward(&c, &xv, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "high_freq_factor") != NULL, "message: %s", attn_last_error());
}

static void test_alibi(const attn_safetensors *st) {
    const char *hs = attn_safetensors_metadata_find(st, "alibi.heads");
    attn_json_doc *doc = NULL;
    CHECK(hs && attn_json_parse(hs, strlen(hs), NULL, &doc, NULL) == ATTN_JSON_OK, "alibi.heads");
    if (!doc) return;
    const attn_json *arr = attn_json_root(doc);
    for (size_t i = 0; i < attn_json_count(arr); i++) {
        int64_t h = 0;
        attn_json_as_i64(attn_json_at(arr, i), &h);
        char key[64];
        snprintf(key, sizeof key, "alibi.slopes%lld", (long long)h);
        float *ref = fx_required(st, key, NULL), *s = xmalloc(sizeof(float) * (size_t)h);
        CHECK_OK(attn_alibi_slopes(s, h));
        if (ref) cmp(key, s, ref, (size_t)h, 1e-7, &max_out_err);
        free(ref);
        free(s);
    }
    attn_json_free(doc);
    /* attention with the slopes through the flash kernel */
    const attn_safetensors_tensor *qt = attn_safetensors_find(st, "alibi.q");
    if (!qt) return;
    const int64_t B = qt->shape[0], H = qt->shape[1], N = qt->shape[2], D = qt->shape[3];
    size_t n;
    float *q = fx_required(st, "alibi.q", &n), *k = fx_required(st, "alibi.k", NULL),
          *v = fx_required(st, "alibi.v", NULL);
    float *ref = fx_required(st, "alibi.out", NULL), *o = xmalloc(sizeof(float) * n),
          *slopes = xmalloc(sizeof(float) * (size_t)H);
    CHECK_OK(attn_alibi_slopes(slopes, H));
    attn_tensor qv = attn_tensor_4d(q, B, H, N, D), kv = attn_tensor_4d(k, B, H, N, D),
                vv = attn_tensor_4d(v, B, H, N, D), ov = attn_tensor_4d(o, B, H, N, D);
    attn_sdpa_params p = attn_sdpa_params_default();
    p.alibi_slopes = slopes;
    p.causal = ATTN_CAUSAL_TOP_LEFT;
    size_t wsb = attn_flash_workspace_size(&qv, &kv, &vv);
    void *ws = xmalloc(wsb);
    CHECK_OK(attn_flash_forward(&qv, &kv, &vv, &p, &ov, NULL, ws, wsb));
    cmp("attention with ALiBi slopes (6 heads)", o, ref, n, OUT_TOL, &max_out_err);
    CHECK_STATUS(attn_alibi_slopes(slopes, 0), ATTN_ERR_INVALID_ARGUMENT);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(o);
    free(slopes);
    free(ws);
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/nn_pos.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (st) {
        test_sinusoidal(st);
        test_embedding(st);
        test_rope(st);
        test_rope_llama3();
        test_alibi(st);
        attn_safetensors_close(st);
    }
    printf("positional encodings: max output rel err %.3g, max gradient rel err %.3g\n", max_out_err, max_grad_err);
    return test_summary("test_nn_pos");
}
