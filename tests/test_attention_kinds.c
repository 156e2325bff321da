/* The attention-kind table: listing and lookup, option checks, and the window kind against the
 * exact (flash) kind with the equivalent band mask — nn.MultiheadAttention forward, weights and
 * backward, an encoder layer, and a GPT's cached decode steps against its full forward. */
#include "test_util.h"
#include "attention/attention_kind.h"

static void test_table(void) {
    const int n = attn_attention_kind_count();
    CHECK(n >= 2, "%d kinds", n);
    /* every row present and complete (the table's length is the enum's at compile time) */
    CHECK(n == ATTN_ATTENTION_KIND_COUNT, "%d kinds, the enum has %d", n, (int)ATTN_ATTENTION_KIND_COUNT);
    CHECK_OK(attn_kind_table_check());
    /* the capabilities attn_mha asks of the rows */
    for (int i = 0; i < n; i++) {
        const attn_kind_ops *o = attn_kind_ops_get((attn_attention_kind)i);
        CHECK(o && o->supports_bf16 == (i == ATTN_ATTENTION_FLASH || i == ATTN_ATTENTION_WINDOW), "kind %d bf16", i);
        CHECK(o && o->takes_bias_kv == (i == ATTN_ATTENTION_FLASH), "kind %d add_bias_kv", i);
        CHECK(o && o->random_features == (i == ATTN_ATTENTION_PERFORMER), "kind %d random features", i);
        CHECK(o && o->takes_global_mask == (i == ATTN_ATTENTION_LOCAL_GLOBAL), "kind %d global mask", i);
    }
    for (int i = 0; i < n; i++) {
        const char *name = attn_attention_kind_name((attn_attention_kind)i);
        CHECK(name && *name && attn_attention_kind_help((attn_attention_kind)i), "kind %d has no name or help", i);
        attn_attention_kind k = (attn_attention_kind)-1;
        CHECK_OK(attn_attention_kind_from_name(name, &k));
        CHECK(k == (attn_attention_kind)i, "'%s' maps to %d, not %d", name, (int)k, i);
    }
    CHECK(!strcmp(attn_attention_kind_name(ATTN_ATTENTION_FLASH), "flash"), "kind 0 is not flash");
    CHECK(!strcmp(attn_attention_kind_name(ATTN_ATTENTION_WINDOW), "window"), "window kind misnamed");
    CHECK(!strcmp(attn_attention_kind_name(ATTN_ATTENTION_LINEAR), "linear"), "linear kind misnamed");
    CHECK(!strcmp(attn_attention_kind_name(ATTN_ATTENTION_PERFORMER), "performer"), "performer kind misnamed");
    CHECK(attn_attention_kind_name((attn_attention_kind)n) == NULL, "name past the table");
    CHECK(attn_attention_kind_name((attn_attention_kind)-1) == NULL, "name of a negative kind");
    CHECK(attn_attention_kind_has_weights(ATTN_ATTENTION_FLASH) &&
              attn_attention_kind_has_weights(ATTN_ATTENTION_WINDOW),
          "softmax kinds have weights");
    attn_attention_kind k;
    CHECK_STATUS(attn_attention_kind_from_name("nope", &k), ATTN_ERR_NOT_FOUND);
    CHECK(strstr(attn_last_error(), "flash") && strstr(attn_last_error(), "window") &&
              strstr(attn_last_error(), "linear") && strstr(attn_last_error(), "performer"),
          "message lists kinds: %s", attn_last_error());
    attn_attention_config c = attn_attention_config_default();
    CHECK(c.kind == ATTN_ATTENTION_FLASH, "default kind");
    CHECK_OK(attn_attention_config_check(&c));
    c.kind = (attn_attention_kind)n;
    CHECK_STATUS(attn_attention_config_check(&c), ATTN_ERR_INVALID_ARGUMENT);
    c.kind = ATTN_ATTENTION_WINDOW;
    c.window = -1;
    CHECK_STATUS(attn_attention_config_check(&c), ATTN_ERR_INVALID_ARGUMENT);
    attn_mha_config mc = attn_mha_config_default(8, 2);
    mc.attention = c;
    attn_mha *m = NULL;
    CHECK_STATUS(attn_mha_create(&mc, &m), ATTN_ERR_INVALID_ARGUMENT);
    mc.attention.window = 2;
    mc.add_bias_kv = 1;
    CHECK_STATUS(attn_mha_create(&mc, &m), ATTN_ERR_UNSUPPORTED);
    CHECK(m == NULL, "failed create left a module");
    /* a kind without global tokens refuses a global_attention_mask */
    CHECK_OK(attn_mha_create(&(attn_mha_config){.embed_dim = 8, .num_heads = 2, .bias = 1}, &m));
    if (m) {
        float x[2 * 3 * 8] = {0}, out[2 * 3 * 8];
        uint8_t g[6] = {1, 0, 0, 0, 0, 1};
        attn_mha_args a = attn_mha_args_default();
        a.batch = 2, a.nq = a.nk = 3, a.query = a.key = a.value = x, a.global_attention_mask = g;
        char ws[1 << 16];
        CHECK_STATUS(attn_mha_forward(m, &a, out, NULL, NULL, 0, ws, sizeof ws), ATTN_ERR_UNSUPPORTED);
        attn_mha_free(m);
    }
}

/* Window kind against flash with the band as a PyTorch boolean attn_mask (true = not allowed). */
static void test_mha_window(int causal) {
    test_rng rng = rng_seeded(101 + (uint64_t)causal);
    const int64_t B = 2, N = 37, E = 16, H = 4, w = 5;
    attn_mha_config fc = attn_mha_config_default(E, H), wc = fc;
    wc.attention.kind = ATTN_ATTENTION_WINDOW;
    wc.attention.window = w;
    attn_mha *fm = NULL, *wm = NULL;
    CHECK_OK(attn_mha_create(&fc, &fm));
    CHECK_OK(attn_mha_create(&wc, &wm));
    if (!fm || !wm) return;
    CHECK_OK(attn_params_reset(attn_mha_params(fm), 3));
    copy_params(attn_mha_params(wm), attn_mha_params(fm));
    const size_t nx = (size_t)(B * N * E);
    float *x = xmalloc(sizeof(float) * nx), *dout = xmalloc(sizeof(float) * nx);
    fill_normal(&rng, x, nx, 1.0);
    fill_normal(&rng, dout, nx, 1.0);
    uint8_t *band = xmalloc((size_t)(N * N)), *kpm = xmalloc((size_t)(B * N));
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++) band[i * N + j] = (uint8_t)(j < i - w || j > i + w || (causal && j > i));
    for (int64_t i = 0; i < B * N; i++) kpm[i] = (uint8_t)(i % N == 3 && i >= N); /* batch 1 drops key 3 */
    attn_mha_args fa = attn_mha_args_default(), wa;
    fa.batch = B;
    fa.nq = fa.nk = N;
    fa.query = fa.key = fa.value = x;
    fa.key_padding_mask = kpm;
    fa.need_weights = 1;
    fa.average_attn_weights = 0;
    wa = fa;
    fa.attn_mask = band;
    wa.is_causal = causal;
    float *fo = xmalloc(sizeof(float) * nx), *wo = xmalloc(sizeof(float) * nx);
    float *fw = xmalloc(sizeof(float) * (size_t)(B * H * N * N)),
          *ww = xmalloc(sizeof(float) * (size_t)(B * H * N * N));
    const size_t fsb = attn_mha_saved_size(fm, &fa), fwb = attn_mha_workspace_size(fm, &fa);
    const size_t wsb = attn_mha_saved_size(wm, &wa), wwb = attn_mha_workspace_size(wm, &wa);
    void *fs = xmalloc(fsb), *fws = xmalloc(fwb), *ws = xmalloc(wsb), *wws = xmalloc(wwb);
    CHECK_OK(attn_mha_forward(fm, &fa, fo, fw, fs, fsb, fws, fwb));
    CHECK_OK(attn_mha_forward(wm, &wa, wo, ww, ws, wsb, wws, wwb));
    const double eo = rel_err_ff(wo, fo, nx), ew = rel_err_ff(ww, fw, (size_t)(B * H * N * N));
    CHECK(eo <= 1e-6, "window (causal %d) output vs band-masked flash: %.3g", causal, eo);
    CHECK(ew <= 1e-6, "window (causal %d) weights vs band-masked flash: %.3g", causal, ew);
    float *fdx = xmalloc(sizeof(float) * nx), *wdx = xmalloc(sizeof(float) * nx);
    CHECK_OK(attn_params_zero_grad(attn_mha_params(fm)));
    CHECK_OK(attn_params_zero_grad(attn_mha_params(wm)));
    CHECK_OK(attn_mha_backward(fm, &fa, dout, fdx, fdx, fdx, fs, fsb, fws, fwb));
    CHECK_OK(attn_mha_backward(wm, &wa, dout, wdx, wdx, wdx, ws, wsb, wws, wwb));
    double eg = rel_err_ff(wdx, fdx, nx);
    for (size_t i = 0; i < attn_params_count(attn_mha_params(fm)); i++) {
        const attn_param *pf = attn_params_get(attn_mha_params(fm), i), *pw = attn_params_get(attn_mha_params(wm), i);
        const double e = rel_err_ff(pw->grad, pf->grad, pf->numel);
        eg = e > eg ? e : eg;
    }
    CHECK(eg <= 1e-5, "window (causal %d) gradients vs band-masked flash: %.3g", causal, eg);
    printf("  window %lld, causal %d: output %.2e, weights %.2e, gradients %.2e\n", (long long)w, causal, eo, ew, eg);
    free(x), free(dout), free(band), free(kpm), free(fo), free(wo), free(fw), free(ww);
    free(fs), free(fws), free(ws), free(wws), free(fdx), free(wdx);
    attn_mha_free(fm);
    attn_mha_free(wm);
}

/* An encoder layer whose self-attention is the window kind equals the layer with the band mask. */
static void test_layer_window(void) {
    test_rng rng = rng_seeded(202);
    const int64_t B = 2, N = 19, d = 16, w = 3;
    attn_layer_config lc = attn_layer_config_default(d, 2), wc;
    lc.dim_feedforward = 24;
    lc.dropout = 0;
    wc = lc;
    wc.attention.kind = ATTN_ATTENTION_WINDOW;
    wc.attention.window = w;
    attn_encoder_layer *fl = NULL, *wl = NULL;
    CHECK_OK(attn_encoder_layer_create(&lc, &fl));
    CHECK_OK(attn_encoder_layer_create(&wc, &wl));
    if (!fl || !wl) return;
    CHECK_OK(attn_params_reset(attn_encoder_layer_params(fl), 8));
    copy_params(attn_encoder_layer_params(wl), attn_encoder_layer_params(fl));
    float *x = xmalloc(sizeof(float) * (size_t)(B * N * d));
    fill_normal(&rng, x, (size_t)(B * N * d), 1.0);
    uint8_t *band = xmalloc((size_t)(N * N));
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++) band[i * N + j] = (uint8_t)(j < i - w || j > i + w);
    attn_layer_args fa = attn_layer_args_default(), wa;
    fa.batch = B;
    fa.n = N;
    fa.x = x;
    wa = fa;
    fa.self_masks.attn_mask = band;
    float *fo = xmalloc(sizeof(float) * (size_t)(B * N * d)), *wo = xmalloc(sizeof(float) * (size_t)(B * N * d));
    const size_t fwb = attn_encoder_layer_workspace_size(fl, &fa), wwb = attn_encoder_layer_workspace_size(wl, &wa);
    void *fws = xmalloc(fwb), *wws = xmalloc(wwb);
    CHECK_OK(attn_encoder_layer_forward(fl, &fa, fo, NULL, 0, fws, fwb));
    CHECK_OK(attn_encoder_layer_forward(wl, &wa, wo, NULL, 0, wws, wwb));
    const double e = rel_err_ff(wo, fo, (size_t)(B * N * d));
    CHECK(e <= 1e-6, "encoder layer, window vs band mask: %.3g", e);
    free(x), free(band), free(fo), free(wo), free(fws), free(wws);
    attn_encoder_layer_free(fl);
    attn_encoder_layer_free(wl);
}

/* A GPT with causal window attention: cached steps give the full forward's rows. */
static void test_gpt_window_steps(void) {
    const int64_t V = 23, P = 32, d = 16, H = 2, L = 2, n = 14, w = 4;
    attn_gpt_config gc = attn_gpt_config_default(V, P, d, H, L);
    gc.layer.dim_feedforward = 32;
    gc.layer.dropout = 0;
    gc.layer.attention.kind = ATTN_ATTENTION_WINDOW;
    gc.layer.attention.window = w;
    attn_gpt *g = NULL;
    CHECK_OK(attn_gpt_create(&gc, &g));
    if (!g) return;
    CHECK_OK(attn_params_reset(attn_gpt_params(g), 4));
    int64_t tok[14];
    for (int64_t i = 0; i < n; i++) tok[i] = (i * 7 + 3) % V;
    attn_gpt_args a = {1, n, tok, NULL, 0, 0, 0, NULL, NULL};
    const size_t wb = attn_gpt_workspace_size(g, &a);
    void *ws = xmalloc(wb);
    float *full = xmalloc(sizeof(float) * (size_t)(n * V)), *step = xmalloc(sizeof(float) * (size_t)(n * V));
    CHECK_OK(attn_gpt_forward(g, &a, full, NULL, 0, ws, wb));
    const size_t cb = attn_gpt_cache_size(g, 1, n), sw = attn_gpt_step_workspace_size(g, 1, 5, n);
    void *cbuf = xmalloc(cb), *sws = xmalloc(sw);
    attn_gpt_cache *c = NULL;
    CHECK_OK(attn_gpt_cache_init(g, cbuf, cb, 1, n, &c));
    CHECK_OK(attn_gpt_forward_step(g, c, tok, 5, step, sws, sw)); /* a prompt of 5 */
    for (int64_t t = 5; t < n; t++) CHECK_OK(attn_gpt_forward_step(g, c, tok + t, 1, step + t * V, sws, sw));
    const double e = rel_err_ff(step, full, (size_t)(n * V));
    CHECK(e <= 1e-5, "GPT window steps vs forward: %.3g", e);
    printf("  GPT, causal window %lld: cached steps vs forward %.2e\n", (long long)w, e);
    /* the window is in force: the exact model with the same weights differs past the window */
    attn_gpt_config fc = gc;
    fc.layer.attention = attn_attention_config_default();
    attn_gpt *fg = NULL;
    CHECK_OK(attn_gpt_create(&fc, &fg));
    if (fg) {
        copy_params(attn_gpt_params(fg), attn_gpt_params(g));
        float *exact = xmalloc(sizeof(float) * (size_t)(n * V));
        CHECK_OK(attn_gpt_forward(fg, &a, exact, NULL, 0, ws, wb));
        CHECK(rel_err_ff(exact, full, (size_t)((w + 1) * V)) <= 1e-6, "rows within the window differ");
        CHECK(rel_err_ff(exact + (w + 1) * V, full + (w + 1) * V, (size_t)((n - w - 1) * V)) > 1e-3,
              "rows past the window equal the exact model's");
        free(exact);
        attn_gpt_free(fg);
    }
    free(ws), free(full), free(step), free(cbuf), free(sws);
    attn_gpt_free(g);
}

int main(void) {
    test_table();
    test_mha_window(0);
    test_mha_window(1);
    test_layer_window();
    test_gpt_window_steps();
    return test_summary("test_attention_kinds");
}
