/* Decoder-only language model (attn_gpt_*) against tests/parity/gen_nn_gpt.py (logits and every
 * parameter gradient; learned positions and RoPE, tied and untied heads, key padding), generation
 * with the cache equal to full recomputation, dropout / thread determinism and errors. */
#include "test_gpt_config.h"
#include "test_util.h"

#define OUT_TOL 1e-5
#define GRAD_TOL 1e-4

static double max_out_err, max_grad_err;

static void cmp(const char *ctx, const char *what, const float *got, const float *ref, size_t n, double tol,
                double *worst) {
    double e = rel_err_ff(got, ref, n);
    if (e > *worst) *worst = e;
    CHECK(e <= tol, "%s: %s rel err %.3g > %.1g", ctx, what, e, tol);
}

/* Prefill 3 tokens, then 1 at a time and one 2-token step: the logits of a full forward. */
static void check_generation(attn_gpt *g, const char *ctx, const int64_t *tokens, int64_t B, int64_t N, int64_t V,
                             const float *full) {
    size_t cb = attn_gpt_cache_size(g, B, N), wb = attn_gpt_step_workspace_size(g, B, 3, N);
    void *cbuf = xmalloc(cb), *ws = xmalloc(wb);
    attn_gpt_cache *c = NULL;
    CHECK_OK(attn_gpt_cache_init(g, cbuf, cb, B, N, &c));
    float *got = xmalloc(sizeof(float) * (size_t)(B * N * V)), *part = xmalloc(sizeof(float) * (size_t)(B * 3 * V));
    int64_t *tk = xmalloc(sizeof(int64_t) * (size_t)(B * 3));
    int64_t pos = 0;
    while (c && pos < N) {
        const int64_t n = pos == 0 ? (N < 3 ? N : 3) : (pos == 4 && N - pos >= 2 ? 2 : 1);
        for (int64_t b = 0; b < B; b++) memcpy(tk + b * n, tokens + b * N + pos, sizeof(int64_t) * (size_t)n);
        CHECK_OK(attn_gpt_forward_step(g, c, tk, n, part, ws, wb));
        for (int64_t b = 0; b < B; b++)
            memcpy(got + (b * N + pos) * V, part + b * n * V, sizeof(float) * (size_t)(n * V));
        pos += n;
    }
    CHECK(attn_gpt_cache_length(c) == N, "%s: cache length %lld", ctx, (long long)attn_gpt_cache_length(c));
    double e = rel_err_ff(got, full, (size_t)(B * N * V));
    CHECK(e <= 1e-6, "%s: cached generation differs from the full forward (rel %.3g)", ctx, e);
    printf("%s: generation with the cache vs full forward: rel err %.3g%s\n", ctx, e,
           memcmp(got, full, sizeof(float) * (size_t)(B * N * V)) ? "" : " (bitwise)");
    CHECK_STATUS(attn_gpt_forward_step(g, c, tk, 1, part, ws, wb), ATTN_ERR_SHAPE);
    free(cbuf);
    free(ws);
    free(got);
    free(part);
    free(tk);
}

static void parity_case(const attn_safetensors *st, int ci) {
    char key[300], ctx[64];
    snprintf(ctx, sizeof ctx, "gpt case %d", ci);
    snprintf(key, sizeof key, "case%d.config", ci);
    const char *js = attn_safetensors_metadata_find(st, key);
    attn_json_doc *doc = NULL;
    CHECK(js && attn_json_parse(js, strlen(js), NULL, &doc, NULL) == ATTN_JSON_OK, "%s: config", ctx);
    if (!doc) return;
    attn_gpt_config c = config_from_json(attn_json_root(doc));
    attn_json_free(doc);
    attn_gpt *g = NULL;
    CHECK_OK(attn_gpt_create(&c, &g));
    if (!g) return;
    snprintf(key, sizeof key, "case%d.p.", ci);
    CHECK_OK(attn_params_load(attn_gpt_params(g), st, key, 1));
    snprintf(key, sizeof key, "case%d.tokens", ci);
    const attn_safetensors_tensor *tt = attn_safetensors_find(st, key);
    const int64_t B = tt->shape[0], N = tt->shape[1], V = c.vocab_size;
    int64_t *tokens = xmalloc(tt->nbytes);
    memcpy(tokens, tt->data, tt->nbytes);
    snprintf(key, sizeof key, "case%d.key_padding_mask", ci);
    const attn_safetensors_tensor *kt = attn_safetensors_find(st, key);
    attn_gpt_args a = {B, N, tokens, kt ? (const uint8_t *)kt->data : NULL, 0, 0, 0, NULL, NULL};
    size_t sb = attn_gpt_saved_size(g, &a), wb = attn_gpt_workspace_size(g, &a), n;
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    snprintf(key, sizeof key, "case%d.logits", ci);
    float *ref = fx_floats(st, key, &n), *logits = xmalloc(sizeof(float) * n);
    snprintf(key, sizeof key, "case%d.dlogits", ci);
    float *dl = fx_floats(st, key, NULL);
    CHECK_OK(attn_gpt_forward(g, &a, logits, saved, sb, ws, wb));
    cmp(ctx, "logits", logits, ref, n, OUT_TOL, &max_out_err);
    CHECK_OK(attn_params_zero_grad(attn_gpt_params(g)));
    CHECK_OK(attn_gpt_backward(g, &a, dl, saved, sb, ws, wb));
    const attn_params *ps = attn_gpt_params(g);
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        snprintf(key, sizeof key, "case%d.g.%s", ci, p->name);
        float *rg = fx_floats(st, key, NULL);
        CHECK(rg != NULL, "%s: fixture lacks %s", ctx, key);
        if (rg) cmp(ctx, p->name, p->grad, rg, p->numel, GRAD_TOL, &max_grad_err);
        free(rg);
    }
    /* generation from the same model (without padding: a cache step has no key padding) */
    if (!kt) check_generation(g, ctx, tokens, B, N, V, logits);
    printf("%s: ok (%zu parameters)\n", ctx, attn_params_numel(ps));
    free(tokens);
    free(saved);
    free(ws);
    free(ref);
    free(logits);
    free(dl);
    attn_gpt_free(g);
}

static void test_determinism_and_errors(void) {
    test_rng r = rng_seeded(61);
    attn_gpt_config c = attn_gpt_config_default(40, 32, 32, 4, 2);
    c.layer.dim_feedforward = 48;
    c.layer.dropout = 0.2f;
    c.positions = ATTN_POSITIONS_ROPE;
    c.tie_embeddings = 1;
    attn_gpt *g = NULL;
    CHECK_OK(attn_gpt_create(&c, &g));
    CHECK(attn_params_find(attn_gpt_params(g), "lm_head.weight") == NULL &&
              attn_params_find(attn_gpt_params(g), "pos_emb.weight") == NULL &&
              attn_params_find(attn_gpt_params(g), "layers.1.norm2.bias") != NULL,
          "parameter names of a tied RoPE model");
    enum { B = 2, N = 20, V = 40 };
    int64_t tokens[B * N];
    for (int i = 0; i < B * N; i++) tokens[i] = (int64_t)(rng_next(&r) % V);
    attn_gpt_args a = {B, N, tokens, NULL, 1, 7, 0, NULL, NULL};
    size_t sb = attn_gpt_saved_size(g, &a), wb = attn_gpt_workspace_size(g, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    static float l1[B * N * V], l2[B * N * V], dl[B * N * V];
    fill_normal(&r, dl, sizeof dl / sizeof dl[0], 1);
    const attn_params *ps = attn_gpt_params(g);
    const size_t np = attn_params_numel(ps);
    float *g1 = xmalloc(sizeof(float) * np), *g2 = xmalloc(sizeof(float) * np);
    for (int t = 1; t <= 2; t++) {
        attn_set_num_threads(t);
        attn_params_zero_grad(ps);
        CHECK_OK(attn_gpt_forward(g, &a, t == 1 ? l1 : l2, saved, sb, ws, wb));
        CHECK_OK(attn_gpt_backward(g, &a, dl, saved, sb, ws, wb));
        size_t o = 0;
        for (size_t i = 0; i < attn_params_count(ps); i++) {
            const attn_param *p = attn_params_get(ps, i);
            memcpy((t == 1 ? g1 : g2) + o, p->grad, sizeof(float) * p->numel);
            o += p->numel;
        }
    }
    attn_set_num_threads(0);
    CHECK(!memcmp(l1, l2, sizeof l1) && !memcmp(g1, g2, sizeof(float) * np),
          "gpt with dropout: 1 and 2 threads differ");
    a.seed = 8;
    CHECK_OK(attn_gpt_forward(g, &a, l2, NULL, 0, ws, wb));
    CHECK(memcmp(l1, l2, sizeof l1) != 0, "gpt: another dropout seed gives the same logits");
    tokens[5] = V;
    a.seed = 7;
    CHECK_STATUS(attn_gpt_forward(g, &a, l2, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "indices[5] = 40") != NULL, "message: %s", attn_last_error());
    attn_gpt_free(g);
    c.positions = ATTN_POSITIONS_LEARNED;
    c.max_positions = 8;
    CHECK_OK(attn_gpt_create(&c, &g));
    tokens[5] = 1;
    CHECK_STATUS(attn_gpt_forward(g, &a, l2, NULL, 0, ws, wb), ATTN_ERR_SHAPE);
    attn_gpt_cache *cache = NULL;
    CHECK_STATUS(attn_gpt_cache_init(g, ws, wb, B, 9, &cache), ATTN_ERR_INVALID_ARGUMENT);
    attn_gpt_free(g);
    c = attn_gpt_config_default(10, 8, 12, 5, 1);
    CHECK_STATUS(attn_gpt_create(&c, &g), ATTN_ERR_INVALID_ARGUMENT);
    free(saved);
    free(ws);
    free(g1);
    free(g2);
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/nn_gpt.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (st) {
        const char *nc = attn_safetensors_metadata_find(st, "cases");
        const int n = nc ? atoi(nc) : 0;
        CHECK(n >= 4, "fixture has %d cases", n);
        for (int ci = 0; ci < n; ci++) parity_case(st, ci);
        attn_safetensors_close(st);
    }
    printf("gpt parity: max logits rel err %.3g, max gradient rel err %.3g\n", max_out_err, max_grad_err);
    test_determinism_and_errors();
    return test_summary("test_nn_gpt");
}
