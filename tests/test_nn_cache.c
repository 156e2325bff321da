/* Incremental decoding with key/value caches: a step-by-step decode (prefill, single tokens, a
 * two-token step) must give the rows of a full causal forward — for multi-head self- and
 * cross-attention, decoder stacks (post- and pre-norm, with a memory key-padding mask) and the
 * decoder of nn.Transformer fed by its encoder — plus cache errors. The full forwards are the ones
 * checked against PyTorch in test_nn_mha / test_nn_layers. */
#include "test_util.h"

#define TOL 1e-6

static double worst;

static void close_enough(const char *what, const float *got, const float *ref, size_t n) {
    double e = rel_err_ff(got, ref, n);
    if (e > worst) worst = e;
    CHECK(e <= TOL, "%s: rel err %.3g", what, e);
}

static void randomize(const attn_params *ps, test_rng *g) {
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        fill_normal(g, p->data, p->numel, 0.3);
    }
}

/* Rows [r0, r0 + n) of every batch of x [B, N, d] into dst [B, n, d]. */
static void rows_of(const float *x, int64_t B, int64_t N, int64_t d, int64_t r0, int64_t n, float *dst) {
    for (int64_t b = 0; b < B; b++) memcpy(dst + b * n * d, x + (b * N + r0) * d, sizeof(float) * (size_t)(n * d));
}

static const int64_t steps[] = {3, 1, 1, 2, 1}; /* prefill 3, then 1, 1, 2, 1: 8 positions */
#define NSTEPS 5
#define T 8

static void test_mha(void) {
    test_rng g = rng_seeded(31);
    enum { B = 2, E = 16, Nm = 6 };
    attn_mha *m = NULL;
    attn_mha_config cfg = attn_mha_config_default(E, 4);
    CHECK_OK(attn_mha_create(&cfg, &m));
    randomize(attn_mha_params(m), &g);
    float x[B * T * E], mem[B * Nm * E], full[B * T * E], part[B * T * E], got[B * T * E];
    uint8_t kpm[B * T] = {0}, mkpm[B * Nm] = {0};
    fill_normal(&g, x, sizeof x / sizeof x[0], 1);
    fill_normal(&g, mem, sizeof mem / sizeof mem[0], 1);
    kpm[T - 3] = 1; /* batch 0 ignores position 5 */
    mkpm[Nm + 2] = 1;
    /* self-attention: full causal forward */
    attn_mha_args a = attn_mha_args_default();
    a.batch = B;
    a.nq = a.nk = T;
    a.query = a.key = a.value = x;
    a.is_causal = 1;
    a.key_padding_mask = kpm;
    size_t wb = attn_mha_workspace_size(m, &a);
    void *ws = xmalloc(wb);
    CHECK_OK(attn_mha_forward(m, &a, full, NULL, NULL, 0, ws, wb));
    free(ws);
    attn_kv_cache c;
    size_t cb = attn_kv_cache_size(B, T, E);
    void *cbuf = xmalloc(cb);
    CHECK_OK(attn_kv_cache_init(&c, cbuf, cb, B, T, E));
    wb = attn_mha_step_workspace_size(m, B, 3, T);
    ws = xmalloc(wb);
    int64_t pos = 0;
    for (int s = 0; s < NSTEPS; s++) {
        const int64_t n = steps[s];
        float q[B * 3 * E];
        rows_of(x, B, T, E, pos, n, q);
        /* the key padding mask over the positions cached after this step: [B, pos + n] */
        uint8_t km[B * T];
        for (int64_t b = 0; b < B; b++) memcpy(km + b * (pos + n), kpm + b * T, (size_t)(pos + n));
        attn_mha_step_args sa = {B, n, q, 1, 1, km};
        CHECK_OK(attn_mha_forward_step(m, &c, &sa, part, ws, wb));
        for (int64_t b = 0; b < B; b++)
            memcpy(got + (b * T + pos) * E, part + b * n * E, sizeof(float) * (size_t)(n * E));
        pos += n;
    }
    CHECK(c.length == T, "cache length %lld", (long long)c.length);
    close_enough("mha self-attention step by step", got, full, sizeof full / sizeof full[0]);
    printf("mha self-attention steps: bitwise %s\n", memcmp(got, full, sizeof full) ? "no" : "yes");
    /* full cache: one more position is an error */
    attn_mha_step_args over = {B, 1, x, 1, 1, NULL};
    CHECK_STATUS(attn_mha_forward_step(m, &c, &over, part, ws, wb), ATTN_ERR_SHAPE);
    free(ws);

    /* cross-attention over a filled cache */
    a = attn_mha_args_default();
    a.batch = B;
    a.nq = T;
    a.nk = Nm;
    a.query = x;
    a.key = a.value = mem;
    a.key_padding_mask = mkpm;
    wb = attn_mha_workspace_size(m, &a);
    ws = xmalloc(wb);
    CHECK_OK(attn_mha_forward(m, &a, full, NULL, NULL, 0, ws, wb));
    free(ws);
    attn_kv_cache mc;
    size_t mcb = attn_kv_cache_size(B, Nm, E);
    void *mbuf = xmalloc(mcb);
    CHECK_OK(attn_kv_cache_init(&mc, mbuf, mcb, B, Nm, E));
    wb = attn_mha_cache_fill_workspace_size(m, B, Nm);
    size_t wb2 = attn_mha_step_workspace_size(m, B, T, Nm);
    ws = xmalloc(wb > wb2 ? wb : wb2);
    CHECK_OK(attn_mha_cache_fill(m, &mc, mem, mem, Nm, ws, wb));
    attn_mha_step_args ca = {B, T, x, 0, 0, mkpm};
    CHECK_OK(attn_mha_forward_step(m, &mc, &ca, got, ws, wb2));
    close_enough("mha cross-attention over a filled cache", got, full, sizeof full / sizeof full[0]);
    free(ws);
    attn_mha_free(m);

    /* unsupported and mismatched caches */
    cfg.add_bias_kv = 1;
    CHECK_OK(attn_mha_create(&cfg, &m));
    CHECK_OK(attn_kv_cache_reset(&c));
    wb = attn_mha_step_workspace_size(m, B, 1, T);
    ws = xmalloc(wb);
    attn_mha_step_args one = {B, 1, x, 1, 1, NULL};
    CHECK_STATUS(attn_mha_forward_step(m, &c, &one, part, ws, wb), ATTN_ERR_UNSUPPORTED);
    attn_mha_free(m);
    cfg = attn_mha_config_default(8, 2);
    CHECK_OK(attn_mha_create(&cfg, &m));
    CHECK_STATUS(attn_mha_forward_step(m, &c, &one, part, ws, wb), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_kv_cache_init(&c, cbuf, 16, B, T, E), ATTN_ERR_WORKSPACE);
    attn_mha_free(m);
    free(ws);
    free(cbuf);
    free(mbuf);
}

/* Decode T target positions step by step and compare with the full causal forward. */
static void check_decoder(attn_decoder *d, const char *what, const float *tgt, const float *memory, int64_t B,
                          int64_t Nm, const uint8_t *mkpm, const float *full) {
    const int64_t dm = 16;
    size_t cb = attn_decoder_cache_size(d, B, T, Nm), wb = attn_decoder_step_workspace_size(d, B, 3, T, Nm);
    void *cbuf = xmalloc(cb), *ws = xmalloc(wb);
    attn_decoder_cache *c = NULL;
    CHECK_OK(attn_decoder_cache_init(d, cbuf, cb, B, T, memory, Nm, mkpm, ws, wb, &c));
    if (!c) return;
    float got[2 * T * 16], part[2 * 3 * 16], in[2 * 3 * 16];
    int64_t pos = 0;
    for (int s = 0; s < NSTEPS; s++) {
        const int64_t n = steps[s];
        rows_of(tgt, B, T, dm, pos, n, in);
        CHECK_OK(attn_decoder_forward_step(d, c, in, n, part, ws, wb));
        for (int64_t b = 0; b < B; b++)
            memcpy(got + (b * T + pos) * dm, part + b * n * dm, sizeof(float) * (size_t)(n * dm));
        pos += n;
    }
    CHECK(attn_decoder_cache_length(c) == T, "%s: cache length %lld", what, (long long)attn_decoder_cache_length(c));
    close_enough(what, got, full, (size_t)(B * T * dm));
    CHECK_STATUS(attn_decoder_forward_step(d, c, in, 1, part, ws, wb), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_decoder_forward_step(d, c, in, 1, part, ws, 8), ATTN_ERR_SHAPE);
    free(cbuf);
    free(ws);
}

static void test_decoder(int norm_first, attn_activation act, int norm) {
    test_rng g = rng_seeded(41 + (uint64_t)norm_first);
    enum { B = 2, Nm = 5, dm = 16 };
    attn_stack_config sc = attn_stack_config_default(dm, 4, 2);
    sc.layer.dim_feedforward = 24;
    sc.layer.norm_first = norm_first;
    sc.layer.activation = act;
    sc.norm = norm;
    attn_decoder *d = NULL;
    CHECK_OK(attn_decoder_create(&sc, &d));
    randomize(attn_decoder_params(d), &g);
    float tgt[B * T * dm], mem[B * Nm * dm], full[B * T * dm];
    uint8_t mkpm[B * Nm] = {0};
    mkpm[Nm - 1] = 1;
    fill_normal(&g, tgt, sizeof tgt / sizeof tgt[0], 1);
    fill_normal(&g, mem, sizeof mem / sizeof mem[0], 1);
    attn_layer_args a = attn_layer_args_default();
    a.batch = B;
    a.n = T;
    a.x = tgt;
    a.self_masks.is_causal = 1;
    a.memory = mem;
    a.n_memory = Nm;
    a.memory_masks.key_padding_mask = mkpm;
    size_t wb = attn_decoder_workspace_size(d, &a);
    void *ws = xmalloc(wb);
    CHECK_OK(attn_decoder_forward(d, &a, full, NULL, 0, ws, wb));
    free(ws);
    char what[96];
    snprintf(what, sizeof what, "decoder stack (norm_first %d, final norm %d) step by step", norm_first, norm);
    check_decoder(d, what, tgt, mem, B, Nm, mkpm, full);
    attn_decoder_free(d);
}

static void test_transformer(void) {
    test_rng g = rng_seeded(51);
    enum { B = 2, Ns = 6, dm = 16 };
    attn_transformer_config tc = attn_transformer_config_default();
    tc.layer = attn_layer_config_default(dm, 4);
    tc.layer.dim_feedforward = 24;
    tc.num_encoder_layers = 2;
    tc.num_decoder_layers = 2;
    attn_transformer *t = NULL;
    CHECK_OK(attn_transformer_create(&tc, &t));
    randomize(attn_transformer_params(t), &g);
    float src[B * Ns * dm], tgt[B * T * dm], full[B * T * dm], mem[B * Ns * dm];
    fill_normal(&g, src, sizeof src / sizeof src[0], 1);
    fill_normal(&g, tgt, sizeof tgt / sizeof tgt[0], 1);
    attn_transformer_args a = attn_transformer_args_default();
    a.batch = B;
    a.n_src = Ns;
    a.n_tgt = T;
    a.src = src;
    a.tgt = tgt;
    a.tgt_masks.is_causal = 1;
    size_t wb = attn_transformer_workspace_size(t, &a);
    void *ws = xmalloc(wb);
    CHECK_OK(attn_transformer_forward(t, &a, full, NULL, 0, ws, wb));
    free(ws);
    /* encode once, then decode step by step */
    attn_layer_args ea = attn_layer_args_default();
    ea.batch = B;
    ea.n = Ns;
    ea.x = src;
    attn_encoder *enc = attn_transformer_encoder(t);
    wb = attn_encoder_workspace_size(enc, &ea);
    ws = xmalloc(wb);
    CHECK_OK(attn_encoder_forward(enc, &ea, mem, NULL, 0, ws, wb));
    free(ws);
    check_decoder(attn_transformer_decoder(t), "nn.Transformer: encode once, decode step by step", tgt, mem, B, Ns,
                  NULL, full);
    attn_transformer_free(t);
}

int main(void) {
    test_mha();
    test_decoder(0, ATTN_ACTIVATION_RELU, 1);
    test_decoder(1, ATTN_ACTIVATION_GELU, 0);
    test_transformer();
    printf("incremental decoding: max rel err vs full recomputation %.3g\n", worst);
    return test_summary("test_nn_cache");
}
