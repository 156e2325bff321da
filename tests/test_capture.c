/* Attention capture against PyTorch (tests/parity/gen_capture.py): layer 0 head 1 and rows of
 * layer 1 of a 2-layer encoder, and every decoder layer's self- and cross-attention of the seed's
 * encoder-decoder, compared with what nn.MultiheadAttention returns for the same weights and
 * inputs; capture equals need_weights for a bare module (also under dropout); names, wildcards,
 * replacement of records, and errors. */
#include "test_util.h"

static int64_t meta_int(attn_safetensors *st, const char *key) {
    const char *v = attn_safetensors_metadata_find(st, key);
    CHECK(v != NULL, "fixture lacks metadata '%s'", key);
    return v ? atoll(v) : 1;
}

static void *read_raw(attn_safetensors *st, const char *name) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    CHECK(t != NULL, "fixture lacks %s", name);
    if (!t) return xmalloc(8);
    void *p = xmalloc(t->nbytes + 8);
    memcpy(p, t->data, t->nbytes);
    return p;
}

/* ref [B, H, Nq, Nk] (PyTorch) against a record holding heads [h0, h0 + heads) and rows
 * [r0, r0 + rows). */
static double record_err(const attn_capture_record *r, const float *ref, int64_t H, int64_t Nq) {
    const size_t n = (size_t)(r->batch * r->heads * r->rows * r->nk);
    float *sub = xmalloc(sizeof(float) * n);
    for (int64_t b = 0; b < r->batch; b++)
        for (int64_t h = 0; h < r->heads; h++)
            for (int64_t i = 0; i < r->rows; i++)
                memcpy(sub + ((b * r->heads + h) * r->rows + i) * r->nk,
                       ref + ((b * H + r->head0 + h) * Nq + r->row0 + i) * r->nk, sizeof(float) * (size_t)r->nk);
    double e = rel_err_ff(r->weights, sub, n);
    free(sub);
    return e;
}

static void test_encoder(attn_safetensors *st) {
    const int64_t B = meta_int(st, "enc.B"), N = meta_int(st, "enc.N"), d = meta_int(st, "enc.d_model"),
                  H = meta_int(st, "enc.nhead");
    attn_stack_config sc = attn_stack_config_default(d, H, meta_int(st, "enc.layers"));
    sc.layer.dim_feedforward = meta_int(st, "enc.ff");
    sc.layer.dropout = 0.0f;
    sc.norm = 0;
    attn_encoder *e = NULL;
    CHECK_OK(attn_encoder_create(&sc, &e));
    if (!e) return;
    CHECK_OK(attn_params_load(attn_encoder_params(e), st, "enc.w.", 1));
    float *src = read_raw(st, "enc.src");
    uint8_t *kpm = read_raw(st, "enc.kpm");
    float *ref0 = read_raw(st, "enc.layers.0"), *ref1 = read_raw(st, "enc.layers.1");
    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_add(cap, "layers.0.self_attn", 1, 1, 0, 0)); /* layer 0, head 1 */
    CHECK_OK(attn_capture_add(cap, "layers.1.*", 0, 0, 2, 3));         /* layer 1, rows 2..4 */
    attn_layer_args a = attn_layer_args_default();
    a.batch = B;
    a.n = N;
    a.x = src;
    a.self_masks.key_padding_mask = kpm;
    a.capture = cap;
    const size_t sb = attn_encoder_saved_size(e, &a), wb = attn_encoder_workspace_size(e, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    float *out = xmalloc(sizeof(float) * (size_t)(B * N * d));
    for (int pass = 0; pass < 2; pass++) { /* inference, then a forward that keeps activations */
        CHECK_OK(attn_encoder_forward(e, &a, out, pass ? saved : NULL, pass ? sb : 0, ws, wb));
        CHECK(attn_capture_count(cap) == 2, "%zu records (want 2)", attn_capture_count(cap));
        attn_capture_record r;
        CHECK_OK(attn_capture_find(cap, "layers.0.self_attn", &r));
        CHECK(r.batch == B && r.heads == 1 && r.head0 == 1 && r.rows == N && r.nk == N && r.num_heads == H,
              "layer 0 record [%lld, %lld, %lld, %lld]", (long long)r.batch, (long long)r.heads, (long long)r.rows,
              (long long)r.nk);
        double e0 = record_err(&r, ref0, H, N);
        CHECK(e0 <= 1e-5, "encoder layer 0 head 1: rel err %.3g", e0);
        CHECK_OK(attn_capture_find(cap, "layers.1.self_attn", &r));
        CHECK(r.heads == H && r.row0 == 2 && r.rows == 3, "layer 1 record heads %lld rows %lld+%lld",
              (long long)r.heads, (long long)r.row0, (long long)r.rows);
        double e1 = record_err(&r, ref1, H, N);
        CHECK(e1 <= 1e-5, "encoder layer 1 rows 2..4: rel err %.3g", e1);
        if (!pass) printf("  encoder: layer 0 head 1 rel err %.2e, layer 1 rows 2..4 %.2e\n", e0, e1);
    }
    /* names are listed when one is missing; clear drops the records */
    attn_capture_record r;
    CHECK_STATUS(attn_capture_find(cap, "layers.2.self_attn", &r), ATTN_ERR_NOT_FOUND);
    CHECK(strstr(attn_last_error(), "layers.0.self_attn") != NULL, "message lists the records: %s", attn_last_error());
    attn_capture_clear(cap);
    CHECK(attn_capture_count(cap) == 0, "clear left %zu records", attn_capture_count(cap));
    /* a request past the module's heads fails the forward, naming the module */
    attn_capture *bad = NULL;
    CHECK_OK(attn_capture_create(&bad));
    CHECK_OK(attn_capture_add(bad, "layers.1.self_attn", H - 1, 2, 0, 0));
    a.capture = bad;
    CHECK_STATUS(attn_encoder_forward(e, &a, out, NULL, 0, ws, wb), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "layers.1.self_attn") != NULL, "message names the module: %s", attn_last_error());
    attn_capture_free(bad);
    attn_capture_free(cap);
    free(src), free(kpm), free(ref0), free(ref1), free(saved), free(ws), free(out);
    attn_encoder_free(e);
}

static void test_seq2seq(attn_safetensors *st) {
    const int64_t B = meta_int(st, "s2s.B"), S = meta_int(st, "s2s.S"), T = meta_int(st, "s2s.T"),
                  H = meta_int(st, "s2s.nhead"), L = meta_int(st, "s2s.layers"), V = meta_int(st, "s2s.tgt_vocab");
    attn_seq2seq_config cfg =
        attn_seq2seq_config_default(meta_int(st, "s2s.src_vocab"), V, meta_int(st, "s2s.d_model"), H, L);
    cfg.max_len = meta_int(st, "s2s.max_len");
    cfg.transformer.layer.dim_feedforward = meta_int(st, "s2s.ff");
    cfg.transformer.layer.dropout = 0.0f;
    attn_seq2seq *m = NULL;
    CHECK_OK(attn_seq2seq_create(&cfg, &m));
    if (!m) return;
    CHECK_OK(attn_params_load(attn_seq2seq_params(m), st, "s2s.w.", 1));
    int64_t *src = read_raw(st, "s2s.src"), *tgt = read_raw(st, "s2s.tgt");
    uint8_t *skpm = read_raw(st, "s2s.src_kpm"), *tkpm = read_raw(st, "s2s.tgt_kpm");
    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_add(cap, "transformer.decoder.layers.*", 0, 0, 0, 0));
    attn_seq2seq_args a = attn_seq2seq_args_default();
    a.batch = B;
    a.n_src = S;
    a.n_tgt = T;
    a.src = src;
    a.tgt = tgt;
    a.src_key_padding_mask = skpm;
    a.tgt_key_padding_mask = tkpm;
    a.capture = cap;
    const size_t wb = attn_seq2seq_workspace_size(m, &a);
    void *ws = xmalloc(wb);
    float *logits = xmalloc(sizeof(float) * (size_t)(B * T * V));
    CHECK_OK(attn_seq2seq_forward(m, &a, logits, NULL, 0, ws, wb));
    CHECK(attn_capture_count(cap) == (size_t)(2 * L), "%zu records (want %lld)", attn_capture_count(cap),
          (long long)(2 * L));
    /* records come in the order the modules ran */
    attn_capture_record first;
    CHECK_OK(attn_capture_get(cap, 0, &first));
    CHECK(!strcmp(first.module, "transformer.decoder.layers.0.self_attn"), "first record '%s'", first.module);
    double worst = 0;
    for (int64_t l = 0; l < L; l++) {
        char name[128], key[64];
        for (int cross = 0; cross < 2; cross++) {
            snprintf(name, sizeof name, "transformer.decoder.layers.%lld.%s", (long long)l,
                     cross ? "multihead_attn" : "self_attn");
            snprintf(key, sizeof key, "s2s.%s.%lld", cross ? "cross" : "self", (long long)l);
            attn_capture_record r;
            CHECK_OK(attn_capture_find(cap, name, &r));
            if (attn_capture_find(cap, name, &r) != ATTN_OK) continue;
            CHECK(r.nk == (cross ? S : T) && r.rows == T && r.heads == H, "%s: record nk %lld rows %lld", name,
                  (long long)r.nk, (long long)r.rows);
            float *ref = read_raw(st, key);
            double e = record_err(&r, ref, H, T);
            CHECK(e <= 1e-5, "%s: rel err %.3g", name, e);
            worst = e > worst ? e : worst;
            free(ref);
        }
    }
    printf("  seq2seq decoder self- and cross-attention: worst rel err %.2e\n", worst);
    attn_capture_free(cap);
    free(src), free(tgt), free(skpm), free(tkpm), free(ws), free(logits);
    attn_seq2seq_free(m);
}

/* A bare module is named "": capture equals need_weights per head, in eval and under dropout. */
static void test_bare_mha(void) {
    test_rng rng = rng_seeded(77);
    const int64_t B = 2, N = 11, E = 12, H = 3;
    attn_mha_config mc = attn_mha_config_default(E, H);
    mc.dropout = 0.25f;
    attn_mha *m = NULL;
    CHECK_OK(attn_mha_create(&mc, &m));
    if (!m) return;
    CHECK_OK(attn_params_reset(attn_mha_params(m), 5));
    float *x = xmalloc(sizeof(float) * (size_t)(B * N * E));
    fill_normal(&rng, x, (size_t)(B * N * E), 1.0);
    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_add(cap, "*", 0, 0, 0, 0));
    for (int training = 0; training < 2; training++) {
        attn_mha_args a = attn_mha_args_default();
        a.batch = B;
        a.nq = a.nk = N;
        a.query = a.key = a.value = x;
        a.is_causal = 1;
        a.need_weights = 1;
        a.average_attn_weights = 0;
        a.training = training;
        a.seed = 9;
        a.capture = cap;
        const size_t wb = attn_mha_workspace_size(m, &a);
        void *ws = xmalloc(wb);
        float *out = xmalloc(sizeof(float) * (size_t)(B * N * E)),
              *w = xmalloc(sizeof(float) * (size_t)(B * H * N * N));
        CHECK_OK(attn_mha_forward(m, &a, out, w, NULL, 0, ws, wb));
        attn_capture_record r;
        CHECK_OK(attn_capture_find(cap, "", &r));
        CHECK(r.batch == B && r.heads == H && r.rows == N && r.nk == N, "bare record shape");
        CHECK(!memcmp(r.weights, w, sizeof(float) * (size_t)(B * H * N * N)),
              "capture differs from need_weights (training %d)", training);
        CHECK(attn_capture_count(cap) == 1, "a second forward added a record instead of replacing it");
        free(ws), free(out), free(w);
    }
    CHECK_STATUS(attn_capture_add(cap, "x", -1, 0, 0, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_capture_add(NULL, "x", 0, 0, 0, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_capture_add(cap, NULL, 0, 0, 0, 0), ATTN_ERR_INVALID_ARGUMENT);
    attn_capture_record r;
    CHECK_STATUS(attn_capture_get(cap, 5, &r), ATTN_ERR_INVALID_ARGUMENT);
    attn_capture_free(cap);
    attn_capture_free(NULL);
    free(x);
    attn_mha_free(m);
}

/* A NaN (or +Inf) in one query row: every logit of that row is NaN, so softmax's row is NaN in
 * PyTorch (README: non-finite values propagate), for every head and under a key padding mask too;
 * the other rows stay finite and sum to 1. Before the fix the capture gave that row zeros. */
static void test_nonfinite_row(void) {
    test_rng rng = rng_seeded(78);
    const int64_t B = 2, N = 7, E = 8, H = 2, bad_b = 1, bad_i = 3;
    attn_mha_config mc = attn_mha_config_default(E, H);
    mc.dropout = 0.0f;
    attn_mha *m = NULL;
    CHECK_OK(attn_mha_create(&mc, &m));
    if (!m) return;
    CHECK_OK(attn_params_reset(attn_mha_params(m), 6));
    float *q = xmalloc(sizeof(float) * (size_t)(B * N * E)), *kv = xmalloc(sizeof(float) * (size_t)(B * N * E));
    fill_normal(&rng, q, (size_t)(B * N * E), 1.0);
    fill_normal(&rng, kv, (size_t)(B * N * E), 1.0);
    uint8_t kpm[2 * 7] = {0};
    kpm[bad_b * N + 5] = 1; /* a padded key in the poisoned row's batch element */
    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_add(cap, "*", 0, 0, 0, 0));
    const float poison[2] = {NAN, INFINITY};
    for (int pk = 0; pk < 2; pk++) {
        q[(bad_b * N + bad_i) * E + 2] = poison[pk];
        attn_mha_args a = attn_mha_args_default();
        a.batch = B;
        a.nq = a.nk = N;
        a.query = q;
        a.key = a.value = kv;
        a.key_padding_mask = kpm;
        a.need_weights = 1;
        a.average_attn_weights = 0;
        a.capture = cap;
        const size_t wb = attn_mha_workspace_size(m, &a);
        void *ws = xmalloc(wb);
        float *out = xmalloc(sizeof(float) * (size_t)(B * N * E)),
              *w = xmalloc(sizeof(float) * (size_t)(B * H * N * N));
        CHECK_OK(attn_mha_forward(m, &a, out, w, NULL, 0, ws, wb));
        attn_capture_record r;
        CHECK_OK(attn_capture_find(cap, "", &r));
        size_t nan_bad = 0, nonfinite_other = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < N; i++) {
                    const float *row = r.weights + ((b * H + h) * N + i) * N;
                    double sum = 0;
                    for (int64_t j = 0; j < N; j++) {
                        if (b == bad_b && i == bad_i)
                            nan_bad += isnan(row[j]) != 0;
                        else
                            nonfinite_other += !isfinite(row[j]);
                        sum += row[j];
                    }
                    if (!(b == bad_b && i == bad_i))
                        CHECK(fabs(sum - 1) < 1e-5, "row (%lld, %lld, %lld) sums to %g", (long long)b, (long long)h,
                              (long long)i, sum);
                }
        CHECK(nan_bad == (size_t)(H * N), "%s query row: %zu of %lld captured weights NaN (want all)",
              pk ? "+Inf" : "NaN", nan_bad, (long long)(H * N));
        CHECK(nonfinite_other == 0, "%zu weights of the other rows are not finite", nonfinite_other);
        size_t nan_w = 0;
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < N; j++) nan_w += isnan(w[((bad_b * H + h) * N + bad_i) * N + j]) != 0;
        CHECK(nan_w == (size_t)(H * N), "need_weights: %zu of %lld weights of the poisoned row NaN", nan_w,
              (long long)(H * N));
        free(ws), free(out), free(w);
    }
    attn_capture_free(cap);
    free(q), free(kv);
    attn_mha_free(m);
}

int main(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/capture.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (st) {
        test_encoder(st);
        test_seq2seq(st);
        attn_safetensors_close(st);
    }
    test_bare_mha();
    test_nonfinite_row();
    return test_summary("test_capture");
}
