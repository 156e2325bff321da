/* Packed (padding-free) batches through multi-head attention, the encoder and decoder stacks
 * (layers.h / mha.h cu_seqlens): each sequence of a packed call must give, bit for bit, the
 * output and input gradients of the same sequence run alone through the padded API with batch 1
 * (the same kernels on the same rows: row-wise GEMMs whose per-element sums do not depend on the
 * row count, varlen flash equal to its batch-1 call), and parameter gradients equal to the sum of
 * the per-sequence ones (to float rounding: the sums run in another order). Also: the padded
 * batch with a key padding mask, bf16 precision, the window kind, dropout (one sequence = the
 * padded call's draws; several: deterministic and the backward consistent with the forward by
 * finite differences) and every refusal. */
#include "nn/nn_internal.h"
#include "test_util.h"

enum { D = 32, NHEAD = 4, FF = 48, MAXSEQ = 8 };

typedef struct mod {
    int dec; /* 0 encoder stack, 1 decoder stack */
    attn_encoder *e;
    attn_decoder *d;
} mod;

static const attn_params *params_of(const mod *m) {
    return m->dec ? attn_decoder_params(m->d) : attn_encoder_params(m->e);
}
static size_t saved_size(const mod *m, const attn_layer_args *a) {
    return m->dec ? attn_decoder_saved_size(m->d, a) : attn_encoder_saved_size(m->e, a);
}
static size_t ws_size(const mod *m, const attn_layer_args *a) {
    return m->dec ? attn_decoder_workspace_size(m->d, a) : attn_encoder_workspace_size(m->e, a);
}
static attn_status fwd(mod *m, const attn_layer_args *a, float *out, void *sv, size_t sb, void *ws, size_t wb) {
    return m->dec ? attn_decoder_forward(m->d, a, out, sv, sb, ws, wb)
                  : attn_encoder_forward(m->e, a, out, sv, sb, ws, wb);
}
static attn_status bwd(mod *m, const attn_layer_args *a, const float *dout, float *dx, float *dmem, const void *sv,
                       size_t sb, void *ws, size_t wb) {
    return m->dec ? attn_decoder_backward(m->d, a, dout, dx, dmem, sv, sb, ws, wb)
                  : attn_encoder_backward(m->e, a, dout, dx, sv, sb, ws, wb);
}

/* One forward (and backward when dout) of the call a; grads zeroed first when zero. */
static attn_status run(mod *m, const attn_layer_args *a, const float *dout, float *out, float *dx, float *dmem,
                       int zero) {
    const size_t sb = saved_size(m, a), wb = ws_size(m, a);
    if (!sb || !wb) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "test: size query gave 0: %s", attn_last_error());
    void *sv = xmalloc(sb), *ws = xmalloc(wb);
    if (zero) attn_params_zero_grad(params_of(m));
    attn_status st = fwd(m, a, out, dout ? sv : NULL, sb, ws, wb);
    if (!st && dout) st = bwd(m, a, dout, dx, dmem, sv, sb, ws, wb);
    free(sv);
    free(ws);
    return st;
}

static double *grads_copy(const attn_params *ps, double *acc, int add) {
    size_t o = 0;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        for (size_t j = 0; j < p->numel; j++, o++) acc[o] = add ? acc[o] + p->grad[j] : p->grad[j];
    }
    return acc;
}

typedef struct batch {
    int64_t B, len[8], mlen[8], cu[9], cum[9], total, mtotal;
    float *x, *mem, *dout;
} batch;

static void make_batch(test_rng *r, batch *b, int64_t B, const int64_t *len, const int64_t *mlen) {
    b->B = B;
    b->cu[0] = b->cum[0] = 0;
    for (int64_t s = 0; s < B; s++) {
        b->len[s] = len[s];
        b->mlen[s] = mlen[s];
        b->cu[s + 1] = b->cu[s] + len[s];
        b->cum[s + 1] = b->cum[s] + mlen[s];
    }
    b->total = b->cu[B];
    b->mtotal = b->cum[B];
    b->x = xmalloc((size_t)(b->total * D + 1) * sizeof(float));
    b->mem = xmalloc((size_t)(b->mtotal * D + 1) * sizeof(float));
    b->dout = xmalloc((size_t)(b->total * D + 1) * sizeof(float));
    fill_normal(r, b->x, (size_t)(b->total * D), 1.0);
    fill_normal(r, b->mem, (size_t)(b->mtotal * D), 1.0);
    fill_normal(r, b->dout, (size_t)(b->total * D), 1.0);
}
static void free_batch(batch *b) {
    free(b->x);
    free(b->mem);
    free(b->dout);
}

static attn_layer_args packed_args(const mod *m, const batch *b, int causal) {
    attn_layer_args a = attn_layer_args_default();
    a.batch = b->B;
    a.n = b->total;
    a.x = b->x;
    a.cu_seqlens = b->cu;
    a.self_masks.is_causal = causal;
    if (m->dec) {
        a.n_memory = b->mtotal;
        a.memory = b->mem;
        a.cu_seqlens_memory = b->cum;
    }
    return a;
}

/* The packed call against each sequence alone (bitwise) and the summed parameter gradients. */
static void check_alone(mod *m, const batch *b, int causal, const char *what) {
    const attn_params *ps = params_of(m);
    const size_t np = attn_params_numel(ps);
    float *out = xmalloc((size_t)(b->total * D + 1) * sizeof(float)), *dx = xmalloc((size_t)(b->total * D + 1) * 4);
    float *dmem = xmalloc((size_t)(b->mtotal * D + 1) * sizeof(float));
    double *gp = xmalloc(np * sizeof(double)), *gs = xmalloc(np * sizeof(double));
    const attn_layer_args a = packed_args(m, b, causal);
    CHECK_OK(run(m, &a, b->dout, out, dx, m->dec ? dmem : NULL, 1));
    grads_copy(ps, gp, 0);
    memset(gs, 0, np * sizeof(double));
    int out_bad = 0, dx_bad = 0, dm_bad = 0;
    for (int64_t s = 0; s < b->B; s++) {
        const int64_t n = b->len[s], nm = b->mlen[s];
        if (n == 0) continue;
        float *o1 = xmalloc((size_t)(n * D) * 4), *dx1 = xmalloc((size_t)(n * D) * 4),
              *dm1 = xmalloc((size_t)(nm * D + 1) * 4);
        attn_layer_args s1 = attn_layer_args_default();
        s1.batch = 1;
        s1.n = n;
        s1.x = b->x + b->cu[s] * D;
        s1.self_masks.is_causal = causal;
        if (m->dec) {
            s1.n_memory = nm;
            s1.memory = b->mem + b->cum[s] * D;
        }
        CHECK_OK(run(m, &s1, b->dout + b->cu[s] * D, o1, dx1, m->dec ? dm1 : NULL, 1));
        grads_copy(ps, gs, 1);
        out_bad += memcmp(o1, out + b->cu[s] * D, (size_t)(n * D) * 4) != 0;
        dx_bad += memcmp(dx1, dx + b->cu[s] * D, (size_t)(n * D) * 4) != 0;
        if (m->dec) dm_bad += memcmp(dm1, dmem + b->cum[s] * D, (size_t)(nm * D) * 4) != 0;
        free(o1);
        free(dx1);
        free(dm1);
    }
    CHECK(out_bad == 0, "%s: %d sequences' packed output differs from the sequence alone", what, out_bad);
    CHECK(dx_bad == 0, "%s: %d sequences' packed dx differs from the sequence alone", what, dx_bad);
    CHECK(dm_bad == 0, "%s: %d sequences' packed dmemory differs from the sequence alone", what, dm_bad);
    if (m->dec) /* a sequence with no queries gives its memory rows no gradient */
        for (int64_t s = 0; s < b->B; s++)
            for (int64_t i = b->cum[s] * D; b->len[s] == 0 && i < b->cum[s + 1] * D; i++)
                if (dmem[i] != 0.0f) {
                    CHECK(0, "%s: memory of an empty sequence got gradient %g", what, dmem[i]);
                    break;
                }
    const double e = rel_err_dd(gp, gs, np);
    CHECK(e < 1e-5, "%s: parameter gradients vs the sum over sequences alone: rel err %.3g", what, e);
    free(out);
    free(dx);
    free(dmem);
    free(gp);
    free(gs);
}

/* The packed call against the padded batch with a key padding mask (eval), real rows. */
static void check_padded(mod *m, const batch *b, int causal, const char *what) {
    int64_t N = 1, NM = 1;
    for (int64_t s = 0; s < b->B; s++) {
        N = b->len[s] > N ? b->len[s] : N;
        NM = b->mlen[s] > NM ? b->mlen[s] : NM;
    }
    float *xp = calloc((size_t)(b->B * N * D), 4), *mp = calloc((size_t)(b->B * NM * D), 4);
    float *op = xmalloc((size_t)(b->B * N * D) * 4), *out = xmalloc((size_t)(b->total * D + 1) * 4);
    uint8_t *kpm = calloc((size_t)(b->B * N), 1), *mkpm = calloc((size_t)(b->B * NM), 1);
    for (int64_t s = 0; s < b->B; s++) {
        memcpy(xp + s * N * D, b->x + b->cu[s] * D, (size_t)(b->len[s] * D) * 4);
        memcpy(mp + s * NM * D, b->mem + b->cum[s] * D, (size_t)(b->mlen[s] * D) * 4);
        for (int64_t t = b->len[s]; t < N; t++) kpm[s * N + t] = 1;
        for (int64_t t = b->mlen[s]; t < NM; t++) mkpm[s * NM + t] = 1;
        kpm[s * N] = 0; /* an empty row keeps one key (its output is not compared) */
    }
    attn_layer_args a = attn_layer_args_default();
    a.batch = b->B;
    a.n = N;
    a.x = xp;
    a.self_masks.key_padding_mask = kpm;
    a.self_masks.is_causal = causal;
    if (m->dec) {
        a.n_memory = NM;
        a.memory = mp;
        a.memory_masks.key_padding_mask = mkpm;
    }
    CHECK_OK(run(m, &a, NULL, op, NULL, NULL, 0));
    const attn_layer_args pa = packed_args(m, b, causal);
    CHECK_OK(run(m, &pa, NULL, out, NULL, NULL, 0));
    double num = 0, den = 0;
    int nan = 0;
    for (int64_t s = 0; s < b->B; s++)
        for (int64_t i = 0; i < b->len[s] * D; i++) {
            const double r = op[s * N * D + i], g = out[b->cu[s] * D + i];
            nan |= isnan(g);
            num += (g - r) * (g - r);
            den += r * r;
        }
    const double e = sqrt(num / (den > 0 ? den : 1));
    CHECK(!nan && e < 1e-6, "%s: packed vs padded with key padding mask: rel err %.3g", what, e);
    free(xp);
    free(mp);
    free(op);
    free(out);
    free(kpm);
    free(mkpm);
}

/* Training with dropout: one sequence packed draws what the padded batch-1 call draws; several:
 * deterministic, and <dx, v> equal to the loss's directional difference quotient. */
static void check_dropout(mod *m, test_rng *r) {
    const int64_t one[1] = {7}, mone[1] = {5}, len[3] = {6, 1, 8}, mlen[3] = {3, 4, 2};
    batch b;
    make_batch(r, &b, 1, one, mone);
    attn_layer_args a = packed_args(m, &b, m->dec);
    a.training = 1;
    a.seed = 99;
    a.offset = 5;
    float *o1 = xmalloc(7 * D * 4), *o2 = xmalloc(7 * D * 4), *d1 = xmalloc(7 * D * 4), *d2 = xmalloc(7 * D * 4);
    float *m1 = xmalloc(5 * D * 4), *m2 = xmalloc(5 * D * 4);
    CHECK_OK(run(m, &a, b.dout, o1, d1, m->dec ? m1 : NULL, 1));
    attn_layer_args p = a;
    p.cu_seqlens = p.cu_seqlens_memory = NULL;
    CHECK_OK(run(m, &p, b.dout, o2, d2, m->dec ? m2 : NULL, 1));
    CHECK(!memcmp(o1, o2, 7 * D * 4) && !memcmp(d1, d2, 7 * D * 4) && (!m->dec || !memcmp(m1, m2, 5 * D * 4)),
          "dropout: a packed batch of one sequence differs from the padded batch-1 call");
    free_batch(&b);
    free(o1), free(o2), free(d1), free(d2), free(m1), free(m2);

    make_batch(r, &b, 3, len, mlen);
    a = packed_args(m, &b, m->dec);
    a.training = 1;
    a.seed = 3;
    const size_t n = (size_t)(b.total * D);
    float *out = xmalloc(n * 4), *out2 = xmalloc(n * 4), *dx = xmalloc(n * 4), *ev = xmalloc(n * 4);
    CHECK_OK(run(m, &a, b.dout, out, dx, NULL, 1));
    CHECK_OK(run(m, &a, b.dout, out2, NULL, NULL, 1));
    CHECK(!memcmp(out, out2, n * 4), "dropout: two packed calls with one seed differ");
    attn_layer_args e = a;
    e.training = 0;
    CHECK_OK(run(m, &e, NULL, ev, NULL, NULL, 1));
    CHECK(memcmp(out, ev, n * 4) != 0, "dropout: training output equals eval output");
    /* directional difference quotient of L = <out, dout> along v, in double over float calls */
    float *v = xmalloc(n * 4), *xs = xmalloc(n * 4);
    fill_normal(r, v, n, 1.0);
    const double h = 1e-2;
    double L[2];
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++) xs[i] = b.x[i] + (float)((k ? -h : h) * v[i]);
        attn_layer_args ak = a;
        ak.x = xs;
        CHECK_OK(run(m, &ak, NULL, out2, NULL, NULL, 1));
        L[k] = 0;
        for (size_t i = 0; i < n; i++) L[k] += (double)out2[i] * b.dout[i];
    }
    double ss;
    const double an = dir_dot(v, dx, n, &ss), fd = (L[0] - L[1]) / (2 * h);
    CHECK(fabs(an - fd) <= 2e-2 * fabs(an) + 1e-3, "dropout: <dx, v> %.6g vs difference quotient %.6g", an, fd);
    free(out), free(out2), free(dx), free(ev), free(v), free(xs);
    free_batch(&b);
    /* two equal sequences: their own streams, so different draws */
    const int64_t two[2] = {6, 6}, mtwo[2] = {4, 4};
    make_batch(r, &b, 2, two, mtwo);
    memcpy(b.x + 6 * D, b.x, 6 * D * sizeof(float));
    memcpy(b.mem + 4 * D, b.mem, 4 * D * sizeof(float));
    a = packed_args(m, &b, m->dec);
    a.training = 1;
    a.seed = 11;
    out = xmalloc(12 * D * 4);
    CHECK_OK(run(m, &a, NULL, out, NULL, NULL, 1));
    CHECK(memcmp(out, out + 6 * D, 6 * D * 4) != 0, "dropout: two equal sequences drew the same masks");
    free(out);
    free_batch(&b);
}

static void check_refusals(mod *enc, mod *dec, test_rng *r) {
    const int64_t len[3] = {3, 0, 4}, mlen[3] = {2, 2, 3};
    batch b;
    make_batch(r, &b, 3, len, mlen);
    float *out = xmalloc((size_t)(b.total * D) * 4);
    static uint8_t ws[1 << 20];
    attn_layer_args a = packed_args(enc, &b, 0);
    uint8_t kpm[8] = {0};
    a.self_masks.key_padding_mask = kpm;
    CHECK_STATUS(attn_encoder_forward(enc->e, &a, out, NULL, 0, ws, sizeof ws), ATTN_ERR_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "key_padding_mask") != NULL, "refusal names key_padding_mask: %s",
          attn_last_error());
    a = packed_args(enc, &b, 0);
    int64_t bad[4] = {0, 3, 2, 7};
    a.cu_seqlens = bad;
    CHECK_STATUS(attn_encoder_forward(enc->e, &a, out, NULL, 0, ws, sizeof ws), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "cu_seqlens[2]") != NULL, "names the decreasing entry: %s", attn_last_error());
    int64_t short_total[4] = {0, 3, 3, 6};
    a.cu_seqlens = short_total;
    CHECK_STATUS(attn_encoder_forward(enc->e, &a, out, NULL, 0, ws, sizeof ws), ATTN_ERR_SHAPE);
    attn_capture *cap = NULL;
    if (attn_capture_create(&cap) == ATTN_OK) {
        a = packed_args(enc, &b, 0);
        a.capture = cap;
        CHECK_STATUS(attn_encoder_forward(enc->e, &a, out, NULL, 0, ws, sizeof ws), ATTN_ERR_UNSUPPORTED);
        attn_capture_free(cap);
    }
    a = packed_args(dec, &b, 1);
    a.cu_seqlens_memory = NULL;
    CHECK_STATUS(attn_decoder_forward(dec->d, &a, out, NULL, 0, ws, sizeof ws), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "cu_seqlens_memory") != NULL, "names cu_seqlens_memory: %s", attn_last_error());
    a = packed_args(enc, &b, 0);
    a.cu_seqlens = NULL;
    a.cu_seqlens_memory = b.cum;
    CHECK_STATUS(attn_encoder_forward(enc->e, &a, out, NULL, 0, ws, sizeof ws), ATTN_ERR_INVALID_ARGUMENT);
    /* kinds without a varlen path, and what only the padded layout has */
    attn_stack_config c = attn_stack_config_default(D, NHEAD, 1);
    c.layer.attention.kind = ATTN_ATTENTION_LINEAR;
    attn_encoder *lin = NULL;
    CHECK_OK(attn_encoder_create(&c, &lin));
    a = packed_args(enc, &b, 0);
    CHECK_STATUS(attn_encoder_forward(lin, &a, out, NULL, 0, ws, sizeof ws), ATTN_ERR_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "attention.kind") != NULL, "names the kind: %s", attn_last_error());
    attn_encoder_free(lin);
    attn_mha_config mc = attn_mha_config_default(D, NHEAD);
    attn_mha *mha = NULL;
    CHECK_OK(attn_mha_create(&mc, &mha));
    attn_mha_args ma = attn_mha_args_default();
    ma.batch = 3;
    ma.nq = ma.nk = b.total;
    ma.query = ma.key = ma.value = b.x;
    ma.cu_seqlens_q = b.cu;
    ma.need_weights = 1;
    float w[1024];
    CHECK_STATUS(attn_mha_forward(mha, &ma, out, w, NULL, 0, ws, sizeof ws), ATTN_ERR_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "need_weights") != NULL, "names need_weights: %s", attn_last_error());
    ma.need_weights = 0;
    ma.cu_seqlens_q = NULL;
    ma.cu_seqlens_k = b.cu;
    CHECK_STATUS(attn_mha_forward(mha, &ma, out, NULL, NULL, 0, ws, sizeof ws), ATTN_ERR_UNSUPPORTED);
    attn_mha_free(mha);
    free(out);
    free_batch(&b);
}

/* MHA alone, cross-attention with its own key offsets: each sequence as its batch-1 call. */
static void check_mha(test_rng *r) {
    attn_mha_config mc = attn_mha_config_default(D, NHEAD);
    attn_mha *m = NULL;
    CHECK_OK(attn_mha_create(&mc, &m));
    const int64_t len[4] = {5, 1, 0, 9}, klen[4] = {3, 6, 2, 9};
    batch b;
    make_batch(r, &b, 4, len, klen);
    attn_mha_args a = attn_mha_args_default();
    a.batch = 4;
    a.nq = b.total;
    a.nk = b.mtotal;
    a.query = b.x;
    a.key = a.value = b.mem;
    a.cu_seqlens_q = b.cu;
    a.cu_seqlens_k = b.cum;
    const size_t wb = attn_mha_workspace_size(m, &a);
    CHECK(wb > 0, "mha packed workspace size: %s", attn_last_error());
    void *ws = xmalloc(wb ? wb : 1);
    float *out = xmalloc((size_t)(b.total * D) * 4);
    CHECK_OK(attn_mha_forward(m, &a, out, NULL, NULL, 0, ws, wb));
    int bad = 0;
    for (int64_t s = 0; s < 4; s++) {
        if (!len[s]) continue;
        attn_mha_args s1 = attn_mha_args_default();
        s1.batch = 1;
        s1.nq = len[s];
        s1.nk = klen[s];
        s1.query = b.x + b.cu[s] * D;
        s1.key = s1.value = b.mem + b.cum[s] * D;
        const size_t w1 = attn_mha_workspace_size(m, &s1);
        void *ws1 = xmalloc(w1);
        float *o1 = xmalloc((size_t)(len[s] * D) * 4);
        CHECK_OK(attn_mha_forward(m, &s1, o1, NULL, NULL, 0, ws1, w1));
        bad += memcmp(o1, out + b.cu[s] * D, (size_t)(len[s] * D) * 4) != 0;
        free(ws1);
        free(o1);
    }
    CHECK(bad == 0, "mha cross-attention packed: %d sequences differ from their batch-1 call", bad);
    free(ws);
    free(out);
    free_batch(&b);
    attn_mha_free(m);
}

/* attn_gpt with cu_seqlens: each sequence's logits bitwise its batch-1 run's (learned positions
 * or RoPE from 0 per sequence), parameter gradients (positions' included) the per-sequence ones
 * summed; in fp32 and bf16; and its refusals. */
static attn_status gpt_run(attn_gpt *g, const attn_gpt_args *a, const float *dlogits, float *logits) {
    const size_t sb = attn_gpt_saved_size(g, a), wb = attn_gpt_workspace_size(g, a);
    if (!sb || !wb) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "test: gpt size query gave 0");
    void *sv = xmalloc(sb), *ws = xmalloc(wb);
    attn_params_zero_grad(attn_gpt_params(g));
    attn_status st = attn_gpt_forward(g, a, logits, sv, sb, ws, wb);
    if (!st && dlogits) st = attn_gpt_backward(g, a, dlogits, sv, sb, ws, wb);
    free(sv);
    free(ws);
    return st;
}

static void check_gpt_model(test_rng *r, attn_precision precision, int tied, int rope) {
    enum { V = 37, B = 6 };
    attn_gpt_config gc = attn_gpt_config_default(V, 80, D, NHEAD, 2);
    if (rope) gc.positions = ATTN_POSITIONS_ROPE;
    gc.layer.dim_feedforward = FF;
    gc.layer.dropout = 0; /* training on: the backward's path; dropout streams are test_packed's dropout check's */
    gc.precision = precision;
    gc.tie_embeddings = tied;
    attn_gpt *g = NULL;
    CHECK_OK(attn_gpt_create(&gc, &g));
    const attn_params *ps = attn_gpt_params(g);
    const size_t np = attn_params_numel(ps);
    const int64_t lens[B] = {5, 0, 1, 64, 65, 1 + (int64_t)(rng_next(r) % 40)};
    int64_t cu[B + 1] = {0};
    for (int s = 0; s < B; s++) cu[s + 1] = cu[s] + lens[s];
    const int64_t T = cu[B];
    int64_t *tok = xmalloc((size_t)T * sizeof(int64_t));
    for (int64_t i = 0; i < T; i++) tok[i] = (int64_t)(rng_next(r) % V);
    float *dl = xmalloc((size_t)(T * V) * 4), *lp = xmalloc((size_t)(T * V) * 4);
    fill_normal(r, dl, (size_t)(T * V), 1);
    double *gp = xmalloc(np * sizeof(double)), *gs = xmalloc(np * sizeof(double));
    attn_gpt_args a = {0};
    a.batch = B;
    a.n = T;
    a.tokens = tok;
    a.training = 1;
    a.cu_seqlens = cu;
    CHECK_OK(gpt_run(g, &a, dl, lp));
    grads_copy(ps, gp, 0);
    memset(gs, 0, np * sizeof(double));
    int bad = 0;
    for (int s = 0; s < B; s++) {
        if (!lens[s]) continue;
        float *l1 = xmalloc((size_t)(lens[s] * V) * 4);
        attn_gpt_args a1 = {0};
        a1.batch = 1;
        a1.n = lens[s];
        a1.tokens = tok + cu[s];
        a1.training = 1;
        CHECK_OK(gpt_run(g, &a1, dl + cu[s] * V, l1));
        grads_copy(ps, gs, 1);
        bad += memcmp(l1, lp + cu[s] * V, (size_t)(lens[s] * V) * 4) != 0;
        free(l1);
    }
    char what[64];
    snprintf(what, sizeof what, "gpt%s%s%s", precision == ATTN_PRECISION_BF16 ? " bf16" : "", tied ? " tied" : "",
             rope ? " rope" : "");
    CHECK(bad == 0, "%s: %d sequences' packed logits differ from the sequence alone", what, bad);
    const double e = rel_err_dd(gp, gs, np);
    CHECK(e < 1e-5, "%s: parameter gradients vs the sum over sequences alone: rel err %.3g", what, e);
    /* refusals: a padding mask, a wrong total, a sequence past max_positions */
    uint8_t kpm[200] = {0};
    attn_gpt_args bad_a = a;
    bad_a.key_padding_mask = kpm;
    float *lb = xmalloc((size_t)(200 * V) * 4);
    CHECK(gpt_run(g, &bad_a, NULL, lp) == ATTN_ERR_UNSUPPORTED, "%s: packed with key_padding_mask: %s", what,
          attn_last_error());
    int64_t cu2[B + 1];
    memcpy(cu2, cu, sizeof cu2);
    cu2[B] = T - 1;
    bad_a = a;
    bad_a.cu_seqlens = cu2;
    CHECK(gpt_run(g, &bad_a, NULL, lp) == ATTN_ERR_SHAPE && strstr(attn_last_error(), "cu_seqlens[6]"),
          "%s: cu_seqlens[batch] != n: %s", what, attn_last_error());
    int64_t cu3[3] = {0, 81, 81}; /* past max_positions (learned positions only) */
    int64_t *tok3 = xmalloc(81 * sizeof(int64_t));
    memset(tok3, 0, 81 * sizeof(int64_t));
    attn_gpt_args a3 = {0};
    a3.batch = 2;
    a3.n = 81;
    a3.tokens = tok3;
    a3.cu_seqlens = cu3;
    float *l3 = xmalloc((size_t)(81 * V) * 4);
    if (!rope)
        CHECK(gpt_run(g, &a3, NULL, l3) == ATTN_ERR_SHAPE && strstr(attn_last_error(), "longest sequence = 81"),
              "%s: a sequence past max_positions: %s", what, attn_last_error());
    free(l3);
    free(tok3);
    free(lb);
    free(tok);
    free(dl);
    free(lp);
    free(gp);
    free(gs);
    attn_gpt_free(g);
}

static void check_gpt(test_rng *r) {
    check_gpt_model(r, ATTN_PRECISION_FP32, 0, 0);
    check_gpt_model(r, ATTN_PRECISION_FP32, 1, 0);
    check_gpt_model(r, ATTN_PRECISION_BF16, 0, 0);
    /* RoPE: each row rotated by its position within its sequence (MHA's packed positions) */
    check_gpt_model(r, ATTN_PRECISION_FP32, 0, 1);
    check_gpt_model(r, ATTN_PRECISION_BF16, 1, 1);
}

int main(void) {
    test_rng r = rng_seeded(2027);
    attn_stack_config c = attn_stack_config_default(D, NHEAD, 2);
    c.layer.dim_feedforward = FF;
    c.layer.activation = ATTN_ACTIVATION_GELU;
    mod enc = {0, NULL, NULL}, dec = {1, NULL, NULL}, win = {0, NULL, NULL}, pre = {1, NULL, NULL};
    CHECK_OK(attn_encoder_create(&c, &enc.e));
    CHECK_OK(attn_decoder_create(&c, &dec.d));
    attn_stack_config cw = c;
    cw.layer.attention.kind = ATTN_ATTENTION_WINDOW;
    cw.layer.attention.window = 2;
    CHECK_OK(attn_encoder_create(&cw, &win.e));
    attn_stack_config cp = c;
    cp.layer.norm_first = 1;
    CHECK_OK(attn_decoder_create(&cp, &pre.d));
    /* lengths: empty, one token, a flash block's edges, and random */
    const int64_t lens[6] = {5, 0, 1, 64, 65, 1 + (int64_t)(rng_next(&r) % 40)};
    const int64_t mlens[6] = {3, 2, 7, 1 + (int64_t)(rng_next(&r) % 70), 66, 4};
    batch b;
    make_batch(&r, &b, 6, lens, mlens);
    for (int causal = 0; causal < 2; causal++) {
        check_alone(&enc, &b, causal, causal ? "encoder causal" : "encoder");
        check_alone(&dec, &b, causal, causal ? "decoder causal" : "decoder");
        check_padded(&enc, &b, causal, causal ? "encoder causal" : "encoder");
        check_padded(&dec, &b, causal, causal ? "decoder causal" : "decoder");
    }
    check_alone(&win, &b, 0, "encoder, window kind");
    check_alone(&pre, &b, 1, "decoder, norm_first");
    const attn_precision prev = attn_nn_precision_set(ATTN_PRECISION_BF16);
    check_alone(&enc, &b, 0, "encoder bf16");
    check_alone(&dec, &b, 1, "decoder bf16");
    attn_nn_precision_set(prev);
    free_batch(&b);
    attn_stack_config cd = c;
    cd.layer.dropout = 0.2f;
    mod denc = {0, NULL, NULL}, ddec = {1, NULL, NULL};
    CHECK_OK(attn_encoder_create(&cd, &denc.e));
    CHECK_OK(attn_decoder_create(&cd, &ddec.d));
    check_dropout(&denc, &r);
    check_dropout(&ddec, &r);
    check_mha(&r);
    check_gpt(&r);
    check_refusals(&enc, &dec, &r);
    attn_encoder_free(enc.e);
    attn_decoder_free(dec.d);
    attn_encoder_free(win.e);
    attn_decoder_free(pre.d);
    attn_encoder_free(denc.e);
    attn_decoder_free(ddec.d);
    return test_summary("test_packed");
}
