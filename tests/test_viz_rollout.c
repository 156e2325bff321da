/* Attention rollout (attn_viz_rollout, attn_viz_rollout_records) against PyTorch
 * (tests/parity/gen_viz_rollout.py): on the weights a PyTorch encoder stack, a causal (GPT-like)
 * stack and a ViT-like stack returned, and on the weights attn's own encoder captures for the same
 * parameters and inputs; against a float64 C product of the paper's formula associated the other
 * way round on random weights; rows sum to 1, causal stays lower-triangular; errors. */
#include "attn/viz.h"
#include "test_util.h"

static int64_t meta_int(attn_safetensors *st, const char *key) {
    const char *v = attn_safetensors_metadata_find(st, key);
    CHECK(v != NULL, "fixture lacks metadata '%s'", key);
    return v ? atoll(v) : 1;
}

static void test_case(attn_safetensors *st, const char *name) {
    char key[96];
#define META(k) (snprintf(key, sizeof key, "%s." k, name), meta_int(st, key))
    const int64_t B = META("B"), N = META("N"), d = META("d_model"), H = META("nhead"), L = META("layers"),
                  ff = META("ff"), norm_first = META("norm_first"), causal = META("causal");
#undef META
    float *ws[8] = {0};
    CHECK(L <= 8, "%s: %lld layers", name, (long long)L);
    for (int64_t l = 0; l < L && l < 8; l++) {
        snprintf(key, sizeof key, "%s.attn.%lld", name, (long long)l);
        ws[l] = fx_floats(st, key, NULL);
    }
    snprintf(key, sizeof key, "%s.rollout", name);
    float *ref = fx_floats(st, key, NULL);
    snprintf(key, sizeof key, "%s.rollout32", name);
    float *ref32 = fx_floats(st, key, NULL);
    const size_t nout = (size_t)(B * N * N);
    float *out = xmalloc(sizeof(float) * nout);
    if (!ref || !ref32) goto done;
    for (int64_t l = 0; l < L; l++)
        if (!ws[l]) goto done;

    /* 1. PyTorch's weights in, PyTorch's rollout out */
    CHECK_OK(attn_viz_rollout((const float *const *)ws, L, B, H, N, out));
    double e = rel_err_ff(out, ref32, nout);
    CHECK(e <= 1e-6, "%s: rollout of PyTorch's weights: rel err %.3g", name, e);
    printf("  %s: rollout of PyTorch's weights vs torch: rel err %.2e\n", name, e);
    double worst = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < N; i++) {
            double s = 0;
            for (int64_t j = 0; j < N; j++) {
                const float v = out[(b * N + i) * N + j];
                s += v;
                if (causal && j > i && v != 0) worst = INFINITY;
            }
            if (fabs(s - 1) > worst) worst = fabs(s - 1);
        }
    CHECK(worst <= 1e-5, "%s: rows sum to 1 (and causal is lower-triangular): worst %.3g", name, worst);

    /* 2. attn's encoder on the same parameters and input, weights captured, rollout from records */
    {
        attn_stack_config sc = attn_stack_config_default(d, H, L);
        sc.layer.dim_feedforward = ff;
        sc.layer.dropout = 0.0f;
        sc.layer.norm_first = (int)norm_first;
        sc.norm = 0;
        attn_encoder *enc = NULL;
        CHECK_OK(attn_encoder_create(&sc, &enc));
        if (!enc) goto done;
        snprintf(key, sizeof key, "%s.w.", name);
        CHECK_OK(attn_params_load(attn_encoder_params(enc), st, key, 1));
        snprintf(key, sizeof key, "%s.src", name);
        float *src = fx_floats(st, key, NULL);
        snprintf(key, sizeof key, "%s.kpm", name);
        const attn_safetensors_tensor *kt = attn_safetensors_find(st, key);
        CHECK(kt != NULL, "fixture lacks %s", key);
        attn_capture *cap = NULL;
        CHECK_OK(attn_capture_create(&cap));
        CHECK_OK(attn_capture_add(cap, "layers.*.self_attn", 0, 0, 0, 0));
        attn_layer_args a = attn_layer_args_default();
        a.batch = B;
        a.n = N;
        a.x = src;
        a.self_masks.key_padding_mask = kt ? (const uint8_t *)kt->data : NULL;
        a.self_masks.is_causal = (int)causal;
        a.capture = cap;
        const size_t wb = attn_encoder_workspace_size(enc, &a);
        void *wsp = xmalloc(wb ? wb : 1);
        float *y = xmalloc(sizeof(float) * (size_t)(B * N * d));
        CHECK_OK(attn_encoder_forward(enc, &a, y, NULL, 0, wsp, wb));
        const size_t count = attn_capture_count(cap);
        CHECK(count == (size_t)L, "%s: %zu records (want %lld)", name, count, (long long)L);
        attn_capture_record recs[8];
        for (size_t l = 0; l < count && l < 8; l++) CHECK_OK(attn_capture_get(cap, l, &recs[l]));
        if (count == (size_t)L) {
            CHECK_OK(attn_viz_rollout_records(recs, count, out));
            e = rel_err_ff(out, ref, nout);
            CHECK(e <= 1e-4, "%s: rollout of attn's captured weights vs torch: rel err %.3g", name, e);
            printf("  %s: rollout of attn's captured weights vs torch (float64 model): rel err %.2e\n", name, e);
            if (!strcmp(name, "vit")) { /* the CLS row over the patches: what the overlay shows */
                double num = 0, den = 0;
                for (int64_t j = 1; j < N; j++) {
                    num += pow(out[j] - ref[j], 2);
                    den += pow(ref[j], 2);
                }
                CHECK(sqrt(num / den) <= 1e-4, "vit: CLS row rel err %.3g", sqrt(num / den));
            }
            /* a record with only some heads or rows is refused, naming the module */
            attn_capture_record partial = recs[count - 1];
            partial.heads = 1;
            attn_capture_record saved = recs[count - 1];
            recs[count - 1] = partial;
            CHECK_STATUS(attn_viz_rollout_records(recs, count, out), ATTN_ERR_SHAPE);
            CHECK(strstr(attn_last_error(), saved.module) != NULL, "message names the module: %s", attn_last_error());
            partial = saved;
            partial.rows = 1;
            recs[count - 1] = partial;
            CHECK_STATUS(attn_viz_rollout_records(recs, count, out), ATTN_ERR_SHAPE);
            recs[count - 1] = saved;
        }
        attn_capture_free(cap);
        attn_encoder_free(enc);
        free(src), free(wsp), free(y);
    }
done:
    for (int64_t l = 0; l < L && l < 8; l++) free(ws[l]);
    free(ref), free(ref32), free(out);
}

/* The paper's formula in float64, associated left to right: P = A~_{L-1}; P = P A~_l down to l = 0. */
static void reference(const float *const *w, int64_t L, int64_t B, int64_t H, int64_t N, double *out) {
    double *a = xmalloc(sizeof(double) * (size_t)(N * N)), *t = xmalloc(sizeof(double) * (size_t)(N * N));
    for (int64_t b = 0; b < B; b++) {
        double *p = out + b * N * N;
        for (int64_t l = L - 1; l >= 0; l--) {
            for (int64_t i = 0; i < N; i++) {
                double s = 0;
                for (int64_t j = 0; j < N; j++) {
                    double m = 0;
                    for (int64_t h = 0; h < H; h++) m += w[l][((b * H + h) * N + i) * N + j];
                    a[i * N + j] = m / (double)H + (i == j ? 1.0 : 0.0);
                    s += a[i * N + j];
                }
                for (int64_t j = 0; j < N; j++) a[i * N + j] /= s;
            }
            if (l == L - 1) {
                memcpy(p, a, sizeof(double) * (size_t)(N * N));
                continue;
            }
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = 0; j < N; j++) {
                    double s = 0;
                    for (int64_t k = 0; k < N; k++) s += p[i * N + k] * a[k * N + j];
                    t[i * N + j] = s;
                }
            memcpy(p, t, sizeof(double) * (size_t)(N * N));
        }
    }
    free(a), free(t);
}

static void test_random(void) {
    test_rng rng = rng_seeded(77);
    const int64_t L = 4, B = 2, H = 3, N = 13;
    float *w[4];
    for (int64_t l = 0; l < L; l++) {
        w[l] = xmalloc(sizeof(float) * (size_t)(B * H * N * N));
        for (int64_t r = 0; r < B * H * N; r++) { /* softmax rows of random logits */
            float *row = w[l] + r * N;
            double s = 0;
            for (int64_t j = 0; j < N; j++) s += row[j] = (float)exp(2 * rng_normal(&rng));
            for (int64_t j = 0; j < N; j++) row[j] = (float)(row[j] / s);
        }
    }
    float *out = xmalloc(sizeof(float) * (size_t)(B * N * N));
    double *ref = xmalloc(sizeof(double) * (size_t)(B * N * N));
    CHECK_OK(attn_viz_rollout((const float *const *)w, L, B, H, N, out));
    reference((const float *const *)w, L, B, H, N, ref);
    const double e = rel_err_fd(out, ref, (size_t)(B * N * N));
    CHECK(e <= 1e-6, "random: rel err %.3g against the float64 formula", e);
    printf("  random %lld layers: rel err %.2e against the float64 formula\n", (long long)L, e);
    /* one layer: rownorm(mean + I) itself */
    CHECK_OK(attn_viz_rollout((const float *const *)w, 1, B, H, N, out));
    reference((const float *const *)w, 1, B, H, N, ref);
    CHECK(rel_err_fd(out, ref, (size_t)(B * N * N)) <= 1e-6, "one layer");

    /* errors */
    CHECK_STATUS(attn_viz_rollout(NULL, L, B, H, N, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_viz_rollout((const float *const *)w, L, B, H, N, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_viz_rollout((const float *const *)w, 0, B, H, N, out), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_viz_rollout((const float *const *)w, L, B, H, 0, out), ATTN_ERR_SHAPE);
    const float *with_null[2] = {w[0], NULL};
    CHECK_STATUS(attn_viz_rollout(with_null, 2, B, H, N, out), ATTN_ERR_INVALID_ARGUMENT);
    w[1][5] = NAN;
    CHECK_STATUS(attn_viz_rollout((const float *const *)w, L, B, H, N, out), ATTN_ERR_NUMERIC);
    attn_capture_record r = {.module = "layers.0.self_attn",
                             .batch = 1,
                             .heads = 1,
                             .rows = 2,
                             .nk = 3,
                             .num_heads = 1,
                             .nq = 2,
                             .weights = w[0]};
    CHECK_STATUS(attn_viz_rollout_records(&r, 1, out), ATTN_ERR_SHAPE); /* not square */
    CHECK(strstr(attn_last_error(), "layers.0.self_attn") != NULL, "names the module: %s", attn_last_error());
    CHECK_STATUS(attn_viz_rollout_records(&r, 0, out), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_viz_rollout_records(NULL, 1, out), ATTN_ERR_INVALID_ARGUMENT);
    for (int64_t l = 0; l < L; l++) free(w[l]);
    free(out), free(ref);
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/viz_rollout.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (st) {
        test_case(st, "enc");
        test_case(st, "causal");
        test_case(st, "vit");
        attn_safetensors_close(st);
    }
    test_random();
    return test_summary("test_viz_rollout");
}
