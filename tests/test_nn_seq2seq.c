/* attn_seq2seq (embeddings * sqrt(d) + sinusoidal positions + nn.Transformer + output projection)
 * and attn_token_encoder (embedding + positions + encoder stack + norm) against PyTorch
 * (tests/parity/gen_nn_seq2seq.py): outputs and every parameter gradient; dropout determinism;
 * argument errors. */
#include "test_util.h"

static int64_t meta_int(attn_safetensors *st, const char *key) {
    const char *v = attn_safetensors_metadata_find(st, key);
    CHECK(v != NULL, "fixture lacks metadata '%s'", key);
    return v ? atoll(v) : 1;
}

static void *read_raw(attn_safetensors *st, const char *name, size_t elem) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    CHECK(t != NULL, "fixture lacks %s", name);
    if (!t) return NULL;
    void *p = xmalloc(t->nbytes + elem);
    memcpy(p, t->data, t->nbytes);
    return p;
}

int main(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/nn_seq2seq.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (!st) return test_summary("test_nn_seq2seq");
    const int64_t B = meta_int(st, "B"), S = meta_int(st, "S"), T = meta_int(st, "T"), d = meta_int(st, "d_model"),
                  V = meta_int(st, "tgt_vocab");
    attn_seq2seq_config cfg =
        attn_seq2seq_config_default(meta_int(st, "src_vocab"), V, d, meta_int(st, "nhead"), meta_int(st, "layers"));
    cfg.max_len = meta_int(st, "max_len");
    cfg.transformer.layer.dim_feedforward = meta_int(st, "ff");
    cfg.transformer.layer.dropout = 0.1f; /* off in eval; exercised in training below */
    attn_seq2seq *m = NULL;
    CHECK_OK(attn_seq2seq_create(&cfg, &m));
    if (!m) return test_summary("test_nn_seq2seq");
    const attn_params *ps = attn_seq2seq_params(m);
    CHECK_OK(attn_params_load(ps, st, "w.", 1));

    int64_t *src = read_raw(st, "in.src", 8), *tgt = read_raw(st, "in.tgt", 8);
    uint8_t *skpm = read_raw(st, "in.src_kpm", 1), *tkpm = read_raw(st, "in.tgt_kpm", 1);
    float *ref = xmalloc(sizeof(float) * (size_t)(B * T * V)), *dl = xmalloc(sizeof(float) * (size_t)(B * T * V));
    CHECK_OK(attn_safetensors_read_f32(st, "out.logits", ref, (size_t)(B * T * V)));
    CHECK_OK(attn_safetensors_read_f32(st, "out.dlogits", dl, (size_t)(B * T * V)));

    attn_seq2seq_args a = attn_seq2seq_args_default();
    a.batch = B;
    a.n_src = S;
    a.n_tgt = T;
    a.src = src;
    a.tgt = tgt;
    a.src_key_padding_mask = skpm;
    a.tgt_key_padding_mask = tkpm;
    size_t sb = attn_seq2seq_saved_size(m, &a), wb = attn_seq2seq_workspace_size(m, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    float *logits = xmalloc(sizeof(float) * (size_t)(B * T * V));
    CHECK_OK(attn_seq2seq_forward(m, &a, logits, saved, sb, ws, wb));
    double e = rel_err_ff(logits, ref, (size_t)(B * T * V));
    CHECK(e <= 1e-5, "logits rel err %.3g", e);
    printf("  logits rel err %.2e\n", e);
    /* inference (no saved buffer) gives the same logits */
    float *inf = xmalloc(sizeof(float) * (size_t)(B * T * V));
    CHECK_OK(attn_seq2seq_forward(m, &a, inf, NULL, 0, ws, wb));
    CHECK(!memcmp(inf, logits, sizeof(float) * (size_t)(B * T * V)), "inference differs from the training forward");

    /* encode once, then decode step by step (a prompt, then one token at a time): the steps give
     * the rows of the full forward over the whole target (causal, no target padding mask) */
    {
        attn_seq2seq_args f = a;
        f.tgt_key_padding_mask = NULL;
        const size_t fw = attn_seq2seq_workspace_size(m, &f);
        void *fws = xmalloc(fw);
        float *full = xmalloc(sizeof(float) * (size_t)(B * T * V)), *got = xmalloc(sizeof(float) * (size_t)(B * T * V)),
              *step = xmalloc(sizeof(float) * (size_t)(B * T * V)), *mem = xmalloc(sizeof(float) * (size_t)(B * S * d));
        int64_t *tt = xmalloc(sizeof(int64_t) * (size_t)(B * T));
        CHECK_OK(attn_seq2seq_forward(m, &f, full, NULL, 0, fws, fw));
        const size_t ew = attn_seq2seq_encode_workspace_size(m, B, S), cb = attn_seq2seq_cache_size(m, B, T, S);
        size_t sw = 0;
        for (int64_t n = 1; n <= T; n++) {
            const size_t w = attn_seq2seq_step_workspace_size(m, B, n, T, S);
            if (w > sw) sw = w;
        }
        CHECK(ew > 0 && cb > 0 && sw > 0, "size queries gave 0");
        void *ews = xmalloc(ew), *cbuf = xmalloc(cb), *sws = xmalloc(sw);
        attn_seq2seq_cache *c = NULL;
        CHECK_OK(attn_seq2seq_encode(m, src, B, S, skpm, mem, ews, ew));
        CHECK_OK(attn_seq2seq_cache_init(m, cbuf, cb, B, T, mem, S, skpm, sws, sw, &c));
        const int64_t P = T > 2 ? T / 2 : 1; /* prompt length */
        for (int64_t len = 0, n = P; c && len < T; len += n, n = 1) {
            for (int64_t b = 0; b < B; b++) memcpy(tt + b * n, tgt + b * T + len, sizeof(int64_t) * (size_t)n);
            CHECK_OK(attn_seq2seq_forward_step(m, c, tt, n, step, sws, sw));
            CHECK(attn_seq2seq_cache_length(c) == len + n, "cache length %lld after %lld positions",
                  (long long)attn_seq2seq_cache_length(c), (long long)(len + n));
            for (int64_t b = 0; b < B; b++)
                memcpy(got + (b * T + len) * V, step + b * n * V, sizeof(float) * (size_t)(n * V));
        }
        double es = rel_err_ff(got, full, (size_t)(B * T * V));
        CHECK(es <= 1e-5, "cached steps vs full forward: rel err %.3g", es);
        printf("  cached decode (prompt %lld, then 1 at a time) vs full forward: rel err %.2e\n", (long long)P, es);

        /* argument errors, with messages naming the problem */
        if (c) {
            CHECK_STATUS(attn_seq2seq_forward_step(m, c, tt, 1, step, sws, sw), ATTN_ERR_SHAPE); /* cache full */
            CHECK(strstr(attn_last_error(), "capacity") != NULL, "message: %s", attn_last_error());
        }
        CHECK_OK(attn_seq2seq_cache_init(m, cbuf, cb, B, T, mem, S, skpm, sws, sw, &c));
        CHECK(c && attn_seq2seq_cache_length(c) == 0, "a new init does not reset the cache");
        CHECK_STATUS(attn_seq2seq_forward_step(m, c, tt, T + 1, step, sws, sw), ATTN_ERR_SHAPE);
        CHECK_STATUS(attn_seq2seq_forward_step(m, c, tt, 0, step, sws, sw), ATTN_ERR_SHAPE);
        CHECK_STATUS(attn_seq2seq_forward_step(m, c, tt, 1, step, sws, 16), ATTN_ERR_WORKSPACE);
        CHECK_STATUS(attn_seq2seq_forward_step(m, c, NULL, 1, step, sws, sw), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_seq2seq_forward_step(m, NULL, tt, 1, step, sws, sw), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_seq2seq_forward_step(m, c, tt, 1, NULL, sws, sw), ATTN_ERR_INVALID_ARGUMENT);
        int64_t badt[64];
        for (int i = 0; i < 64; i++) badt[i] = V;
        CHECK_STATUS(attn_seq2seq_forward_step(m, c, badt, 1, step, sws, sw), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(c && attn_seq2seq_cache_length(c) == 0, "a failed step changed the cache length");
        attn_seq2seq_cache *c2 = NULL;
        CHECK_STATUS(attn_seq2seq_cache_init(m, cbuf, cb, B, cfg.max_len + 1, mem, S, skpm, sws, sw, &c2),
                     ATTN_ERR_INVALID_ARGUMENT);
        CHECK(strstr(attn_last_error(), "max_len") != NULL, "message: %s", attn_last_error());
        CHECK(c2 == NULL, "a failed init left a cache");
        CHECK_STATUS(attn_seq2seq_cache_init(m, cbuf, 64, B, T, mem, S, skpm, sws, sw, &c2), ATTN_ERR_WORKSPACE);
        CHECK_STATUS(attn_seq2seq_cache_init(m, cbuf, cb, B, T, mem, S, skpm, sws, 16, &c2), ATTN_ERR_WORKSPACE);
        CHECK_STATUS(attn_seq2seq_cache_init(m, cbuf, cb, B, T, NULL, S, skpm, sws, sw, &c2),
                     ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_seq2seq_cache_init(m, cbuf, cb, 0, T, mem, S, skpm, sws, sw, &c2), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_seq2seq_encode(m, src, B, cfg.max_len + 1, NULL, mem, ews, ew), ATTN_ERR_SHAPE);
        CHECK(strstr(attn_last_error(), "n_src") != NULL, "message: %s", attn_last_error());
        CHECK_STATUS(attn_seq2seq_encode(m, NULL, B, S, NULL, mem, ews, ew), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_seq2seq_encode(m, src, B, S, NULL, mem, ews, 16), ATTN_ERR_WORKSPACE);
        CHECK(attn_seq2seq_cache_size(m, 0, T, S) == 0 && attn_seq2seq_step_workspace_size(NULL, B, 1, T, S) == 0 &&
                  attn_seq2seq_encode_workspace_size(m, B, 0) == 0 && attn_seq2seq_cache_length(NULL) == 0,
              "size queries of invalid shapes are not 0");
        free(fws);
        free(full);
        free(got);
        free(step);
        free(mem);
        free(tt);
        free(ews);
        free(cbuf);
        free(sws);
    }

    CHECK_OK(attn_params_zero_grad(ps));
    CHECK_OK(attn_seq2seq_backward(m, &a, dl, saved, sb, ws, wb));
    double worst = 0;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        char name[512];
        snprintf(name, sizeof name, "grad.%s", p->name);
        float *g = xmalloc(sizeof(float) * p->numel);
        if (attn_safetensors_read_f32(st, name, g, p->numel) != ATTN_OK) {
            CHECK(0, "fixture lacks %s", name);
            free(g);
            continue;
        }
        double eg = rel_err_ff(p->grad, g, p->numel);
        CHECK(eg <= 1e-4, "%s: gradient rel err %.3g", p->name, eg);
        if (eg > worst) worst = eg;
        free(g);
    }
    printf("  %zu parameter gradients, worst rel err %.2e\n", attn_params_count(ps), worst);

    /* training: dropout on, deterministic for a seed, different for another */
    a.training = 1;
    a.seed = 77;
    float *t1 = xmalloc(sizeof(float) * (size_t)(B * T * V)), *t2 = xmalloc(sizeof(float) * (size_t)(B * T * V));
    CHECK_OK(attn_seq2seq_forward(m, &a, t1, saved, sb, ws, wb));
    CHECK_OK(attn_seq2seq_forward(m, &a, t2, saved, sb, ws, wb));
    CHECK(!memcmp(t1, t2, sizeof(float) * (size_t)(B * T * V)), "training forward not deterministic for a seed");
    a.seed = 78;
    CHECK_OK(attn_seq2seq_forward(m, &a, t2, saved, sb, ws, wb));
    CHECK(memcmp(t1, t2, sizeof(float) * (size_t)(B * T * V)) != 0, "dropout ignores the seed");
    CHECK_OK(attn_seq2seq_backward(m, &a, dl, saved, sb, ws, wb));

    /* errors */
    attn_seq2seq_args bad = a;
    bad.n_tgt = cfg.max_len + 1;
    CHECK_STATUS(attn_seq2seq_forward(m, &bad, logits, saved, sb, ws, wb), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_seq2seq_forward(m, &a, logits, saved, sb, ws, 16), ATTN_ERR_WORKSPACE);
    int64_t badtok[64];
    for (int i = 0; i < 64; i++) badtok[i] = cfg.src_vocab + 3;
    bad = a;
    bad.src = badtok;
    CHECK_STATUS(attn_seq2seq_forward(m, &bad, logits, saved, sb, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    attn_seq2seq_config bc = cfg;
    bc.src_vocab = 0;
    attn_seq2seq *none = NULL;
    CHECK_STATUS(attn_seq2seq_create(&bc, &none), ATTN_ERR_INVALID_ARGUMENT);

    /* joining parameter lists: the model's twice clashes, with prefixes it does not */
    {
        const attn_params *two[2] = {ps, ps};
        const char *pre[2] = {"a.", "b."};
        attn_params *j = NULL;
        CHECK_STATUS(attn_params_join(two, NULL, 2, &j), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_OK(attn_params_join(two, pre, 2, &j));
        CHECK(j && attn_params_count(j) == 2 * attn_params_count(ps) &&
                  attn_params_find(j, "b.output_projection.bias") &&
                  attn_params_find(j, "b.output_projection.bias")->data ==
                      attn_params_find(ps, "output_projection.bias")->data,
              "joined list does not refer to the module's parameters");
        attn_params_join_free(j);
    }
    free(saved);
    free(ws);
    free(logits);
    free(inf);
    free(t1);
    free(t2);
    attn_seq2seq_free(m);

    /* the token encoder */
    attn_token_encoder_config ec = attn_token_encoder_config_default(cfg.src_vocab, d, cfg.transformer.layer.nhead,
                                                                     cfg.transformer.num_encoder_layers);
    ec.max_len = cfg.max_len;
    ec.stack.layer.dim_feedforward = cfg.transformer.layer.dim_feedforward;
    attn_token_encoder *te = NULL;
    CHECK_OK(attn_token_encoder_create(&ec, &te));
    if (te) {
        const attn_params *eps = attn_token_encoder_params(te);
        CHECK_OK(attn_params_load(eps, st, "encw.", 1));
        attn_token_encoder_args ea;
        memset(&ea, 0, sizeof ea);
        ea.batch = B;
        ea.n = S;
        ea.tokens = src;
        ea.key_padding_mask = skpm;
        size_t esb = attn_token_encoder_saved_size(te, &ea), ewb = attn_token_encoder_workspace_size(te, &ea);
        void *esaved = xmalloc(esb), *ews = xmalloc(ewb);
        float *eout = xmalloc(sizeof(float) * (size_t)(B * S * d)),
              *eref = xmalloc(sizeof(float) * (size_t)(B * S * d)), *edo = xmalloc(sizeof(float) * (size_t)(B * S * d));
        CHECK_OK(attn_safetensors_read_f32(st, "enc.out", eref, (size_t)(B * S * d)));
        CHECK_OK(attn_safetensors_read_f32(st, "enc.dout", edo, (size_t)(B * S * d)));
        CHECK_OK(attn_token_encoder_forward(te, &ea, eout, esaved, esb, ews, ewb));
        double ee = rel_err_ff(eout, eref, (size_t)(B * S * d));
        CHECK(ee <= 1e-5, "token encoder output rel err %.3g", ee);
        CHECK_OK(attn_token_encoder_backward(te, &ea, edo, esaved, esb, ews, ewb));
        double eworst = 0;
        for (size_t i = 0; i < attn_params_count(eps); i++) {
            const attn_param *p = attn_params_get(eps, i);
            char name[512];
            snprintf(name, sizeof name, "encgrad.%s", p->name);
            float *g = xmalloc(sizeof(float) * p->numel);
            if (attn_safetensors_read_f32(st, name, g, p->numel) == ATTN_OK) {
                double eg = rel_err_ff(p->grad, g, p->numel);
                CHECK(eg <= 1e-4, "token encoder %s: gradient rel err %.3g", p->name, eg);
                if (eg > eworst) eworst = eg;
            } else {
                CHECK(0, "fixture lacks %s", name);
            }
            free(g);
        }
        printf("  token encoder: output rel err %.2e, %zu gradients, worst %.2e\n", ee, attn_params_count(eps), eworst);
        free(esaved);
        free(ews);
        free(eout);
        free(eref);
        free(edo);
        attn_token_encoder_free(te);
    }
    free(src);
    free(tgt);
    free(skpm);
    free(tkpm);
    free(ref);
    free(dl);
    attn_safetensors_close(st);
    return test_summary("test_nn_seq2seq");
}
