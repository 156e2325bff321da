/* The 'linear' and 'performer' attention kinds through attn_mha (forward and backward against the
 * ops on the module's own projections; weights, capture and unsupported options refused), through
 * a GPT (cached decode steps against the full forward), thread-count determinism, option checks,
 * attn_mha_redraw_features and an explicit Performer projection (attention.projection). */
#include "test_util.h"

static const attn_param *param(const attn_params *ps, const char *name) {
    for (size_t i = 0; i < attn_params_count(ps); i++)
        if (!strcmp(attn_params_get(ps, i)->name, name)) return attn_params_get(ps, i);
    return NULL;
}

/* y [n, out] = x [n, in] w^T + b */
static void linear_ref(const float *x, const float *w, const float *b, float *y, int64_t n, int64_t in, int64_t out) {
    attn_sgemm_ref(ATTN_NO_TRANS, ATTN_TRANS, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < out; j++) y[i * out + j] += b ? b[j] : 0.0f;
}

static attn_tensor heads(float *buf, int64_t B, int64_t H, int64_t N, int64_t hd) {
    attn_tensor t = attn_tensor_4d(buf, B, H, N, hd);
    t.stride[0] = N * H * hd, t.stride[1] = hd, t.stride[2] = H * hd, t.stride[3] = 1;
    return t;
}

static void test_mha(attn_attention_kind kind, int causal) {
    const char *kn = attn_attention_kind_name(kind);
    test_rng rng = rng_seeded(11 + (uint64_t)kind * 3 + (uint64_t)causal);
    const int64_t B = 2, N = 41, E = 32, H = 4, hd = E / H, m = 48;
    attn_mha_config mc = attn_mha_config_default(E, H);
    mc.attention.kind = kind;
    mc.attention.num_features = m;
    mc.attention.seed = 1234;
    attn_mha *mh = NULL;
    CHECK_OK(attn_mha_create(&mc, &mh));
    if (!mh) return;
    CHECK_OK(attn_params_reset(attn_mha_params(mh), 5));
    const attn_params *ps = attn_mha_params(mh);
    float *bias = (float *)param(ps, "in_proj_bias")->data, *obias = (float *)param(ps, "out_proj.bias")->data;
    fill_normal(&rng, bias, (size_t)(3 * E), 0.1), fill_normal(&rng, obias, (size_t)E, 0.1);
    const float *wi = param(ps, "in_proj_weight")->data, *wo = param(ps, "out_proj.weight")->data;
    const size_t nx = (size_t)(B * N * E);
    float *xq = xmalloc(sizeof(float) * nx), *xk = xmalloc(sizeof(float) * nx), *xv = xmalloc(sizeof(float) * nx);
    float *dout = xmalloc(sizeof(float) * nx);
    fill_normal(&rng, xq, nx, 1.0), fill_normal(&rng, xk, nx, 1.0), fill_normal(&rng, xv, nx, 1.0);
    fill_normal(&rng, dout, nx, 1.0);
    uint8_t *kpm = xmalloc((size_t)(B * N));
    for (int64_t i = 0; i < B * N; i++) kpm[i] = (uint8_t)(i >= N && i % 5 == 2); /* PyTorch: true = padding */
    attn_mha_args a = attn_mha_args_default();
    a.batch = B, a.nq = a.nk = N, a.query = xq, a.key = xk, a.value = xv, a.key_padding_mask = kpm;
    a.is_causal = causal;
    float *out = xmalloc(sizeof(float) * nx);
    const size_t sb = attn_mha_saved_size(mh, &a), wb = attn_mha_workspace_size(mh, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    CHECK_OK(attn_mha_forward(mh, &a, out, NULL, saved, sb, ws, wb));

    /* the same by hand: projections, the op over [B, N, H, hd] views, the output projection */
    float *Q = xmalloc(sizeof(float) * nx), *K = xmalloc(sizeof(float) * nx), *V = xmalloc(sizeof(float) * nx);
    float *O = xmalloc(sizeof(float) * nx), *ref = xmalloc(sizeof(float) * nx);
    linear_ref(xq, wi, bias, Q, B * N, E, E);
    linear_ref(xk, wi + E * E, bias + E, K, B * N, E, E);
    linear_ref(xv, wi + 2 * E * E, bias + 2 * E, V, B * N, E, E);
    attn_tensor tq = heads(Q, B, H, N, hd), tk = heads(K, B, H, N, hd), tv = heads(V, B, H, N, hd),
                to = heads(O, B, H, N, hd);
    uint8_t *keep = xmalloc((size_t)(B * N));
    for (int64_t i = 0; i < B * N; i++) keep[i] = (uint8_t)!kpm[i];
    attn_btensor km = attn_btensor_2d(keep, B, N);
    float *w = xmalloc(sizeof(float) * (size_t)(m * hd));
    attn_tensor tw = attn_tensor_3d(w, 1, m, hd);
    CHECK_OK(attn_orf_draw(w, m, hd, 1234));
    const attn_causal cz = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    size_t ob = kind == ATTN_ATTENTION_LINEAR ? attn_linear_attention_workspace_size(&tq, &tk, &tv)
                                              : attn_performer_workspace_size(&tq, &tk, &tv, &tw);
    void *ows = xmalloc(ob);
    CHECK_OK(kind == ATTN_ATTENTION_LINEAR ? attn_linear_attention_forward(&tq, &tk, &tv, cz, &km, &to, ows, ob)
                                           : attn_performer_forward(&tq, &tk, &tv, &tw, cz, &km, &to, ows, ob));
    linear_ref(O, wo, obias, ref, B * N, E, E);
    const double ef = rel_err_ff(out, ref, nx);
    CHECK(ef <= 1e-5, "%s (causal %d) mha forward vs the op: %.3g", kn, causal, ef);

    /* backward: input gradients against the op's backward pushed through the projections */
    float *gq = xmalloc(sizeof(float) * nx), *gk = xmalloc(sizeof(float) * nx), *gv = xmalloc(sizeof(float) * nx);
    CHECK_OK(attn_params_zero_grad(ps));
    CHECK_OK(attn_mha_backward(mh, &a, dout, gq, gk, gv, saved, sb, ws, wb));
    float *dO = xmalloc(sizeof(float) * nx), *dQ = xmalloc(sizeof(float) * nx), *dK = xmalloc(sizeof(float) * nx),
          *dV = xmalloc(sizeof(float) * nx), *r3 = xmalloc(sizeof(float) * nx);
    attn_sgemm_ref(ATTN_NO_TRANS, ATTN_NO_TRANS, B * N, E, E, 1.0f, dout, E, wo, E, 0.0f, dO, E);
    attn_tensor tdo = heads(dO, B, H, N, hd), tdq = heads(dQ, B, H, N, hd), tdk = heads(dK, B, H, N, hd),
                tdv = heads(dV, B, H, N, hd);
    CHECK_OK(kind == ATTN_ATTENTION_LINEAR
                 ? attn_linear_attention_backward(&tq, &tk, &tv, cz, &km, &tdo, &tdq, &tdk, &tdv, ows, ob)
                 : attn_performer_backward(&tq, &tk, &tv, &tw, cz, &km, &tdo, &tdq, &tdk, &tdv, ows, ob));
    const float *dsrc[3] = {dQ, dK, dV}, *got[3] = {gq, gk, gv};
    double eg = 0;
    for (int t = 0; t < 3; t++) {
        attn_sgemm_ref(ATTN_NO_TRANS, ATTN_NO_TRANS, B * N, E, E, 1.0f, dsrc[t], E, wi + t * E * E, E, 0.0f, r3, E);
        const double e = rel_err_ff(got[t], r3, nx);
        eg = e > eg ? e : eg;
    }
    CHECK(eg <= 1e-4, "%s (causal %d) mha input gradients vs the op: %.3g", kn, causal, eg);
    printf("  %-9s mha, causal %d: forward vs op %.2e, input gradients %.2e\n", kn, causal, ef, eg);

    /* thread-count determinism of the module */
    float *out1 = xmalloc(sizeof(float) * nx), *g1 = xmalloc(sizeof(float) * nx);
    attn_set_num_threads(1);
    CHECK_OK(attn_mha_forward(mh, &a, out1, NULL, saved, sb, ws, wb));
    CHECK_OK(attn_mha_backward(mh, &a, dout, g1, gk, gv, saved, sb, ws, wb));
    attn_set_num_threads(2);
    const size_t wb2 = attn_mha_workspace_size(mh, &a);
    void *ws2 = xmalloc(wb2);
    CHECK_OK(attn_mha_forward(mh, &a, out, NULL, saved, sb, ws2, wb2));
    CHECK_OK(attn_mha_backward(mh, &a, dout, gq, gk, gv, saved, sb, ws2, wb2));
    attn_set_num_threads(0);
    CHECK(!memcmp(out1, out, sizeof(float) * nx) && !memcmp(g1, gq, sizeof(float) * nx), "%s: 1 vs 2 threads differ",
          kn);

    /* refused: weights, float / boolean attn_mask, dropout */
    float *wts = xmalloc(sizeof(float) * (size_t)(B * N * N));
    attn_mha_args b = a;
    b.need_weights = 1;
    CHECK_STATUS(attn_mha_forward(mh, &b, out, wts, saved, sb, ws, wb), ATTN_ERR_UNSUPPORTED);
    uint8_t *am = xmalloc((size_t)(N * N));
    memset(am, 0, (size_t)(N * N));
    b = a;
    b.attn_mask = am;
    const size_t wb3 = attn_mha_workspace_size(mh, &b);
    void *ws3 = xmalloc(wb3);
    CHECK_STATUS(attn_mha_forward(mh, &b, out, NULL, saved, sb, ws3, wb3), ATTN_ERR_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "attn_mask") != NULL, "message names the mask: %s", attn_last_error());
    free(am), free(ws3), free(wts), free(ws2), free(out1), free(g1);
    attn_mha_config dc = mc;
    dc.dropout = 0.1f;
    attn_mha *dm = NULL;
    CHECK_OK(attn_mha_create(&dc, &dm));
    if (dm) {
        b = a;
        b.training = 1;
        const size_t s2 = attn_mha_saved_size(dm, &b), w2 = attn_mha_workspace_size(dm, &b);
        void *sv2 = xmalloc(s2), *wv2 = xmalloc(w2);
        CHECK_STATUS(attn_mha_forward(dm, &b, out, NULL, sv2, s2, wv2, w2), ATTN_ERR_UNSUPPORTED);
        CHECK(strstr(attn_last_error(), "dropout") != NULL, "message names dropout: %s", attn_last_error());
        b.training = 0; /* eval: no dropout, fine */
        CHECK_OK(attn_mha_forward(dm, &b, out, NULL, sv2, s2, wv2, w2));
        free(sv2), free(wv2);
        attn_mha_free(dm);
    }
    /* redraw: performer only; a new seed changes the output, the old one restores it */
    if (kind == ATTN_ATTENTION_PERFORMER) {
        CHECK_OK(attn_mha_redraw_features(mh, 99));
        CHECK_OK(attn_mha_forward(mh, &a, out1 = xmalloc(sizeof(float) * nx), NULL, saved, sb, ws, wb));
        CHECK(rel_err_ff(out1, ref, nx) > 1e-4, "a redraw did not change the output");
        CHECK_OK(attn_mha_redraw_features(mh, 1234));
        CHECK_OK(attn_mha_forward(mh, &a, out1, NULL, saved, sb, ws, wb));
        CHECK(rel_err_ff(out1, ref, nx) <= 1e-5, "the old seed does not give the old output back");
        free(out1);
    } else {
        CHECK_STATUS(attn_mha_redraw_features(mh, 99), ATTN_ERR_UNSUPPORTED);
    }
    free(xq), free(xk), free(xv), free(dout), free(kpm), free(out), free(saved), free(ws), free(Q), free(K), free(V);
    free(O), free(ref), free(keep), free(w), free(ows), free(gq), free(gk), free(gv), free(dO), free(dQ), free(dK);
    free(dV), free(r3);
    attn_mha_free(mh);
}

/* An mha's forward output and input gradients (query = key = value = x) into out / dx. */
static void mha_run(attn_mha *mh, const float *x, const float *dout, int64_t B, int64_t N, int causal, float *out,
                    float *dx) {
    attn_mha_args a = attn_mha_args_default();
    a.batch = B, a.nq = a.nk = N, a.query = a.key = a.value = x, a.is_causal = causal;
    const size_t sb = attn_mha_saved_size(mh, &a), wb = attn_mha_workspace_size(mh, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    CHECK_OK(attn_params_zero_grad(attn_mha_params(mh)));
    CHECK_OK(attn_mha_forward(mh, &a, out, NULL, saved, sb, ws, wb));
    memset(dx, 0, sizeof(float) * (size_t)(B * N * attn_mha_get_config(mh)->embed_dim));
    CHECK_OK(attn_mha_backward(mh, &a, dout, dx, dx, dx, saved, sb, ws, wb));
    free(saved), free(ws);
}

/* attention.projection: the explicit W equal to attn_orf_draw(seed) gives bitwise the drawn path's
 * outputs and gradients; a per-head W [H, m, d] matches the op on the module's projections
 * (forward and backward), GPT decoding steps with it match the full forward; shape errors. */
static void test_explicit_projection(int causal) {
    test_rng rng = rng_seeded(71 + (uint64_t)causal);
    const int64_t B = 2, N = 29, E = 24, H = 3, hd = E / H, m = 20;
    const size_t nx = (size_t)(B * N * E);
    float *x = xmalloc(sizeof(float) * nx), *dout = xmalloc(sizeof(float) * nx);
    fill_normal(&rng, x, nx, 1.0), fill_normal(&rng, dout, nx, 1.0);
    float *o1 = xmalloc(sizeof(float) * nx), *o2 = xmalloc(sizeof(float) * nx), *d1 = xmalloc(sizeof(float) * nx),
          *d2 = xmalloc(sizeof(float) * nx);
    float *w1 = xmalloc(sizeof(float) * (size_t)(m * hd)), *wh = xmalloc(sizeof(float) * (size_t)(H * m * hd));
    CHECK_OK(attn_orf_draw(w1, m, hd, 77));
    for (int64_t h = 0; h < H; h++) CHECK_OK(attn_orf_draw(wh + h * m * hd, m, hd, 500 + (uint64_t)h));

    attn_mha_config mc = attn_mha_config_default(E, H);
    mc.attention.kind = ATTN_ATTENTION_PERFORMER;
    mc.attention.num_features = m;
    mc.attention.seed = 77;
    attn_mha *drawn = NULL, *given = NULL, *per_head = NULL;
    CHECK_OK(attn_mha_create(&mc, &drawn));
    attn_mha_config gc = mc;
    gc.attention.seed = 5; /* ignored: the projection is given */
    gc.attention.projection = w1;
    gc.attention.projection_heads = 1;
    CHECK_OK(attn_mha_create(&gc, &given));
    gc.attention.projection = wh;
    gc.attention.projection_heads = H;
    CHECK_OK(attn_mha_create(&gc, &per_head));
    if (!drawn || !given || !per_head) goto done;
    CHECK_OK(attn_params_reset(attn_mha_params(drawn), 9));
    CHECK_OK(attn_params_reset(attn_mha_params(given), 9));
    CHECK_OK(attn_params_reset(attn_mha_params(per_head), 9));
    mha_run(drawn, x, dout, B, N, causal, o1, d1);
    mha_run(given, x, dout, B, N, causal, o2, d2);
    int same = !memcmp(o1, o2, sizeof(float) * nx) && !memcmp(d1, d2, sizeof(float) * nx);
    const attn_params *pd = attn_mha_params(drawn), *pg = attn_mha_params(given);
    for (size_t i = 0; i < attn_params_count(pd); i++)
        same &= !memcmp(attn_params_get(pd, i)->grad, attn_params_get(pg, i)->grad,
                        sizeof(float) * attn_params_get(pd, i)->numel);
    CHECK(same, "causal %d: projection = attn_orf_draw(seed) is not bitwise the drawn path", causal);

    /* per head: against the op with w [H, m, hd] on the module's own projections */
    mha_run(per_head, x, dout, B, N, causal, o2, d2);
    {
        const attn_params *ps = attn_mha_params(per_head);
        const float *wi = param(ps, "in_proj_weight")->data, *bi = param(ps, "in_proj_bias")->data;
        const float *wo = param(ps, "out_proj.weight")->data, *bo = param(ps, "out_proj.bias")->data;
        float *Q = xmalloc(sizeof(float) * nx), *K = xmalloc(sizeof(float) * nx), *V = xmalloc(sizeof(float) * nx);
        float *O = xmalloc(sizeof(float) * nx), *ref = xmalloc(sizeof(float) * nx), *dO = xmalloc(sizeof(float) * nx);
        float *dQ = xmalloc(sizeof(float) * nx), *dK = xmalloc(sizeof(float) * nx), *dV = xmalloc(sizeof(float) * nx);
        linear_ref(x, wi, bi, Q, B * N, E, E);
        linear_ref(x, wi + E * E, bi + E, K, B * N, E, E);
        linear_ref(x, wi + 2 * E * E, bi + 2 * E, V, B * N, E, E);
        attn_tensor tq = heads(Q, B, H, N, hd), tk = heads(K, B, H, N, hd), tv = heads(V, B, H, N, hd),
                    to = heads(O, B, H, N, hd), tw = attn_tensor_3d(wh, H, m, hd);
        const attn_causal cz = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
        const size_t ob = attn_performer_workspace_size(&tq, &tk, &tv, &tw);
        void *ows = xmalloc(ob);
        CHECK_OK(attn_performer_forward(&tq, &tk, &tv, &tw, cz, NULL, &to, ows, ob));
        linear_ref(O, wo, bo, ref, B * N, E, E);
        const double ef = rel_err_ff(o2, ref, nx);
        CHECK(ef <= 1e-5, "causal %d: per-head projection forward vs the op: %.3g", causal, ef);
        attn_sgemm_ref(ATTN_NO_TRANS, ATTN_NO_TRANS, B * N, E, E, 1.0f, dout, E, wo, E, 0.0f, dO, E);
        attn_tensor tdo = heads(dO, B, H, N, hd), tdq = heads(dQ, B, H, N, hd), tdk = heads(dK, B, H, N, hd),
                    tdv = heads(dV, B, H, N, hd);
        CHECK_OK(attn_performer_backward(&tq, &tk, &tv, &tw, cz, NULL, &tdo, &tdq, &tdk, &tdv, ows, ob));
        /* dx = dQ Wq + dK Wk + dV Wv */
        attn_sgemm_ref(ATTN_NO_TRANS, ATTN_NO_TRANS, B * N, E, E, 1.0f, dQ, E, wi, E, 0.0f, ref, E);
        attn_sgemm_ref(ATTN_NO_TRANS, ATTN_NO_TRANS, B * N, E, E, 1.0f, dK, E, wi + E * E, E, 1.0f, ref, E);
        attn_sgemm_ref(ATTN_NO_TRANS, ATTN_NO_TRANS, B * N, E, E, 1.0f, dV, E, wi + 2 * E * E, E, 1.0f, ref, E);
        const double eg = rel_err_ff(d2, ref, nx);
        CHECK(eg <= 1e-4, "causal %d: per-head projection input gradient vs the op: %.3g", causal, eg);
        CHECK(rel_err_ff(o2, o1, nx) > 1e-3, "causal %d: a per-head projection did not change the output", causal);
        printf("  explicit projection, causal %d: = drawn bitwise; per head vs op: forward %.2e, dx %.2e\n", causal, ef,
               eg);
        free(Q), free(K), free(V), free(O), free(ref), free(dO), free(dQ), free(dK), free(dV), free(ows);
    }
    CHECK_STATUS(attn_mha_redraw_features(given, 3), ATTN_ERR_UNSUPPORTED);

    /* errors: heads neither 1 nor H, heads without a projection, a projection without heads */
    gc.attention.projection_heads = 2;
    attn_mha *bad = NULL;
    CHECK_STATUS(attn_mha_create(&gc, &bad), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "projection_heads") != NULL, "message: %s", attn_last_error());
    gc.attention.projection_heads = 0;
    CHECK_STATUS(attn_attention_config_check(&gc.attention), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "projection_heads") != NULL, "message: %s", attn_last_error());
    gc.attention.projection = NULL;
    gc.attention.projection_heads = 1;
    CHECK_STATUS(attn_attention_config_check(&gc.attention), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "without a projection") != NULL, "message: %s", attn_last_error());
done:
    attn_mha_free(drawn), attn_mha_free(given), attn_mha_free(per_head);
    free(x), free(dout), free(o1), free(o2), free(d1), free(d2), free(w1), free(wh);
}

/* A GPT with the kind: cached (recurrent) steps give the full forward's rows; capture refused. */
static void test_gpt_steps(attn_attention_kind kind, const float *projection) {
    const char *kn = projection ? "performer (per-head projection)" : attn_attention_kind_name(kind);
    const int64_t V = 23, P = 40, d = 16, H = 2, L = 2, n = 30;
    attn_gpt_config gc = attn_gpt_config_default(V, P, d, H, L);
    gc.layer.dim_feedforward = 32;
    gc.layer.dropout = 0;
    gc.layer.attention.kind = kind;
    gc.layer.attention.num_features = 64;
    gc.layer.attention.projection = projection; /* [H, 64, d / H] */
    gc.layer.attention.projection_heads = projection ? H : 0;
    attn_gpt *g = NULL;
    CHECK_OK(attn_gpt_create(&gc, &g));
    if (!g) return;
    CHECK_OK(attn_params_reset(attn_gpt_params(g), 4));
    int64_t tok[30];
    for (int64_t i = 0; i < n; i++) tok[i] = (i * 7 + 3) % V;
    attn_gpt_args a = {1, n, tok, NULL, 0, 0, 0, NULL, NULL};
    const size_t wb = attn_gpt_workspace_size(g, &a);
    void *ws = xmalloc(wb);
    float *full = xmalloc(sizeof(float) * (size_t)(n * V)), *step = xmalloc(sizeof(float) * (size_t)(n * V));
    CHECK_OK(attn_gpt_forward(g, &a, full, NULL, 0, ws, wb));
    const size_t cb = attn_gpt_cache_size(g, 1, n), sw = attn_gpt_step_workspace_size(g, 1, 7, n);
    void *cbuf = xmalloc(cb), *sws = xmalloc(sw);
    attn_gpt_cache *c = NULL;
    CHECK_OK(attn_gpt_cache_init(g, cbuf, cb, 1, n, &c));
    CHECK_OK(attn_gpt_forward_step(g, c, tok, 7, step, sws, sw)); /* a prompt of 7 */
    for (int64_t t = 7; t < n; t++) CHECK_OK(attn_gpt_forward_step(g, c, tok + t, 1, step + t * V, sws, sw));
    const double e = rel_err_ff(step, full, (size_t)(n * V));
    CHECK(e <= 1e-5, "GPT %s steps vs forward: %.3g", kn, e);
    printf("  %-9s GPT: recurrent cached steps vs full forward %.2e (cache %zu bytes for %lld positions)\n", kn, e, cb,
           (long long)n);
    /* capture: there are no weights to record */
    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    if (cap) {
        CHECK_OK(attn_capture_add(cap, "layers.0.self_attn", 0, 0, 0, 0));
        a.capture = cap;
        const size_t wb2 = attn_gpt_workspace_size(g, &a);
        void *ws2 = xmalloc(wb2);
        CHECK_STATUS(attn_gpt_forward(g, &a, full, NULL, 0, ws2, wb2), ATTN_ERR_UNSUPPORTED);
        free(ws2);
        attn_capture_free(cap);
    }
    free(ws), free(full), free(step), free(cbuf), free(sws);
    attn_gpt_free(g);
}

static void test_options(void) {
    attn_attention_config c = attn_attention_config_default();
    c.kind = ATTN_ATTENTION_PERFORMER;
    CHECK_OK(attn_attention_config_check(&c)); /* num_features 0 = default */
    c.num_features = -1;
    CHECK_STATUS(attn_attention_config_check(&c), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "num_features") != NULL, "message names num_features: %s", attn_last_error());
    c.num_features = (1 << 16) + 1;
    CHECK_STATUS(attn_attention_config_check(&c), ATTN_ERR_INVALID_ARGUMENT);
    attn_mha_config mc = attn_mha_config_default(16, 2);
    mc.attention = c;
    attn_mha *m = NULL;
    CHECK_STATUS(attn_mha_create(&mc, &m), ATTN_ERR_INVALID_ARGUMENT);
    /* default m = 256: the recurrent cache holds B * H * (256 * dv + 256 + 2) floats */
    mc.attention.num_features = 0;
    CHECK_OK(attn_mha_create(&mc, &m));
    if (m) {
        const size_t cs = attn_mha_cache_size(m, 3, 100);
        CHECK(cs >= sizeof(float) * 3 * 2 * (256 * 8 + 256 + 2) &&
                  cs < sizeof(float) * 3 * 2 * (256 * 8 + 256 + 2) + 4096,
              "performer cache size %zu", cs);
        attn_mha_free(m);
    }
    mc.attention.kind = ATTN_ATTENTION_LINEAR;
    CHECK_OK(attn_mha_create(&mc, &m));
    if (m) {
        const size_t cs = attn_mha_cache_size(m, 3, 100);
        CHECK(cs >= sizeof(float) * 3 * 2 * (8 * 8 + 8) && cs < sizeof(float) * 3 * 2 * (8 * 8 + 8) + 4096,
              "linear cache size %zu", cs);
        attn_mha_free(m);
    }
    CHECK(!attn_attention_kind_has_weights(ATTN_ATTENTION_LINEAR) &&
              !attn_attention_kind_has_weights(ATTN_ATTENTION_PERFORMER),
          "linear kinds have no weights");
}

int main(void) {
    test_options();
    for (int causal = 0; causal < 2; causal++) {
        test_mha(ATTN_ATTENTION_LINEAR, causal);
        test_mha(ATTN_ATTENTION_PERFORMER, causal);
    }
    test_explicit_projection(0);
    test_explicit_projection(1);
    test_gpt_steps(ATTN_ATTENTION_LINEAR, NULL);
    test_gpt_steps(ATTN_ATTENTION_PERFORMER, NULL);
    float *w = xmalloc(sizeof(float) * 2 * 64 * 8);
    CHECK_OK(attn_orf_draw(w, 64, 8, 3));
    CHECK_OK(attn_orf_draw(w + 64 * 8, 64, 8, 4));
    test_gpt_steps(ATTN_ATTENTION_PERFORMER, w);
    free(w);
    return test_summary("test_linear_kinds");
}
