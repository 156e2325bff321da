/* Frozen weights' bf16 panels (attn_nn_bf16_weights, nn_internal.h): with a store installed, every
 * bf16 linear forward packs its weight once, at the first product that meets it, and reuses the
 * panels after. The outputs must be bit for bit those without the store (an encoder stack in bf16
 * precision, through its attention projections, which slice one in_proj weight into three, and its
 * feed-forward), the store must hold one entry per weight and shape, the fp32 precision must not
 * touch it, and a pretrained-style second call must reuse the entries rather than add to them. */
#include "nn/nn_internal.h"
#include "test_util.h"

enum { D = 48, NHEAD = 4, FF = 80, LAYERS = 2, B = 3, N = 37 };

static void forward(attn_encoder *e, const float *x, float *out) {
    attn_layer_args a = attn_layer_args_default();
    a.batch = B;
    a.n = N;
    a.x = x;
    const size_t wb = attn_encoder_workspace_size(e, &a);
    void *ws = xmalloc(wb);
    CHECK_OK(attn_encoder_forward(e, &a, out, NULL, 0, ws, wb));
    free(ws);
}

/* The linear forward alone: the same W at two shapes (a slice of it) makes two entries, and a
 * different x reuses them; every product bitwise the one without the store. */
static void check_linear(test_rng *r) {
    enum { ROWS = 19, IN = 40, OUT = 24 };
    float *x = normal_floats(r, ROWS * IN, 1), *w = normal_floats(r, OUT * IN, 1), *b = normal_floats(r, OUT, 1);
    float y0[ROWS * OUT], y1[ROWS * OUT];
    const size_t wb = attn_nn_linear_ws(ROWS, IN, OUT);
    void *ws = xmalloc(wb);
    attn_nn_bf16_weights *c = attn_nn_bf16_weights_create();
    CHECK(c != NULL, "create");
    const attn_precision prev = attn_nn_precision_set(ATTN_PRECISION_BF16);
    for (int rep = 0; rep < 2; rep++)
        for (int half = 0; half < 2; half++) {
            const int64_t out = half ? OUT / 2 : OUT;
            CHECK_OK(attn_nn_linear_fwd("test", x, w, b, y0, ROWS, IN, out, ws, wb));
            attn_nn_bf16_weights *was = attn_nn_bf16_weights_use(c);
            CHECK(was == NULL, "a store was installed before");
            CHECK_OK(attn_nn_linear_fwd("test", x, w, b, y1, ROWS, IN, out, ws, wb));
            attn_nn_bf16_weights_use(was);
            CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)(ROWS * out)),
                  "linear %d x %d -> %lld with the store differs (pass %d)", ROWS, IN, (long long)out, rep);
            CHECK(attn_nn_bf16_weights_count(c) == (size_t)(rep ? 2 : 1 + half), "entries %zu after shape %d",
                  attn_nn_bf16_weights_count(c), half);
            x[rep * 7 + half] += 0.5f; /* x may change between calls; W may not */
        }
    /* fp32 products neither read nor grow the store */
    attn_nn_precision_set(ATTN_PRECISION_FP32);
    attn_nn_bf16_weights_use(c);
    CHECK_OK(attn_nn_linear_fwd("test", x, w + IN, b, y1, ROWS, IN, OUT - 1, ws, wb));
    attn_nn_bf16_weights_use(NULL);
    CHECK(attn_nn_bf16_weights_count(c) == 2, "an fp32 product added an entry");
    attn_nn_precision_set(prev);
    attn_nn_bf16_weights_free(c);
    attn_nn_bf16_weights_free(NULL);
    CHECK(attn_nn_bf16_weights_count(NULL) == 0, "count of NULL");
    free(ws);
    free(x);
    free(w);
    free(b);
}

int main(void) {
    test_rng r = rng_seeded(4242);
    check_linear(&r);
    attn_stack_config c = attn_stack_config_default(D, NHEAD, LAYERS);
    c.layer.dim_feedforward = FF;
    c.layer.activation = ATTN_ACTIVATION_GELU;
    attn_encoder *e = NULL;
    CHECK_OK(attn_encoder_create(&c, &e));
    if (!e) return test_summary("test_bf16_weights");
    float *x = normal_floats(&r, B * N * D, 1), *ref = xmalloc(sizeof(float) * B * N * D),
          *got = xmalloc(sizeof(float) * B * N * D), *f32 = xmalloc(sizeof(float) * B * N * D);
    forward(e, x, f32);
    const attn_precision prev = attn_nn_precision_set(ATTN_PRECISION_BF16);
    forward(e, x, ref);
    attn_nn_bf16_weights *wc = attn_nn_bf16_weights_create();
    attn_nn_bf16_weights_use(wc);
    for (int call = 0; call < 2; call++) { /* the first call packs, the second reuses */
        forward(e, x, got);
        CHECK(!memcmp(ref, got, sizeof(float) * B * N * D), "encoder bf16 with the store differs (call %d)", call);
        /* per layer: the q, k, v slices of in_proj, out_proj, linear1, linear2 */
        CHECK(attn_nn_bf16_weights_count(wc) == 6 * LAYERS, "call %d: %zu entries, want %d", call,
              attn_nn_bf16_weights_count(wc), 6 * LAYERS);
    }
    for (int t = 1; t <= 2; t++) { /* any thread count, the panels packed at another */
        attn_set_num_threads(t);
        forward(e, x, got);
        CHECK(!memcmp(ref, got, sizeof(float) * B * N * D), "encoder bf16 with the store, %d threads, differs", t);
    }
    attn_set_num_threads(0);
    attn_nn_bf16_weights_use(NULL);
    attn_nn_precision_set(prev);
    /* bf16 took effect: near the fp32 output, not equal to it */
    const double err = rel_err_ff(ref, f32, (size_t)(B * N * D));
    CHECK(err > 0 && err < 3e-2, "bf16 against fp32: relative error %.3g", err);
    attn_nn_bf16_weights_free(wc);
    attn_encoder_free(e);
    free(x);
    free(ref);
    free(got);
    free(f32);
    return test_summary("test_bf16_weights");
}
