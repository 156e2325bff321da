/* Reference attention (attn_sdpa_forward / attn_sdpa_backward) against the float64 oracle in
 * sdpa_oracle.h, whose gradients are themselves checked by finite differences; thread-count
 * determinism; argument errors; parity with PyTorch fixtures (tests/parity/gen_sdpa.py). */
#include "sdpa_oracle.h"

typedef struct {
    const char *name;
    int B, Hq, Hk, Nq, Nk, d, dv;
    attn_causal causal;
    int64_t wl, wr;
    int bool_mask; /* 0 none, 1 [Nq, Nk], 2 [B, 1, Nq, Nk], 3 [B, Hq, Nq, Nk] */
    int add_mask;  /* same kinds */
    int key_mask;
    int alibi;
    float softcap, dropout, scale;
    double magnitude; /* scale of q and k entries; < 0: logits of about -magnitude, see make_inputs */
    int masked_rows;  /* make rows 0 and Nq-1 of every head fully masked via the bool mask */
    int bnhd;         /* store Q/K/V/O as [B, N, H, d] and pass permuted strides */
} sdpa_case;

static const sdpa_case cases[] = {
    {"plain", 2, 3, 3, 9, 9, 8, 8, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"cross Nq!=Nk", 1, 2, 2, 5, 13, 16, 7, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"causal top-left Nq<Nk", 1, 2, 2, 6, 11, 8, 8, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"causal top-left Nq>Nk", 1, 2, 2, 11, 6, 8, 8, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"causal bottom-right Nq<Nk", 1, 2, 2, 6, 11, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"causal bottom-right Nq>Nk", 1, 2, 2, 11, 6, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"bool mask 2d", 2, 2, 2, 7, 10, 8, 8, 0, -1, -1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"bool mask [B,1,Nq,Nk]", 2, 3, 3, 7, 10, 8, 8, 0, -1, -1, 2, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"bool mask full + masked rows", 2, 2, 2, 7, 10, 8, 8, 0, -1, -1, 3, 0, 0, 0, 0, 0, 0, 1, 1, 0},
    {"additive mask 2d", 1, 2, 2, 8, 8, 8, 8, 0, -1, -1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0},
    {"additive mask [B,H,Nq,Nk]", 2, 2, 2, 5, 9, 8, 8, 0, -1, -1, 0, 3, 0, 0, 0, 0, 0, 1, 0, 0},
    {"key mask", 3, 2, 2, 6, 9, 8, 8, 0, -1, -1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0},
    {"all masks + causal", 2, 2, 2, 9, 9, 8, 8, ATTN_CAUSAL_TOP_LEFT, -1, -1, 2, 1, 1, 0, 0, 0, 0, 1, 1, 0},
    {"GQA 6/2", 1, 6, 2, 7, 7, 8, 8, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"MQA 4/1", 2, 4, 1, 5, 8, 8, 4, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"window 2/1 bottom-right", 1, 2, 2, 9, 12, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT, 2, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"window 3/3 no causal", 1, 2, 2, 10, 10, 8, 8, 0, 3, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"alibi + softcap", 1, 3, 3, 8, 8, 8, 8, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 1, 2.0f, 0, 0, 2, 0, 0},
    {"custom scale", 1, 2, 2, 6, 6, 8, 8, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0.7f, 1, 0, 0},
    {"dropout 0.3", 2, 2, 2, 7, 9, 8, 8, 0, -1, -1, 0, 0, 0, 0, 0, 0.3f, 0, 1, 0, 0},
    {"dropout + causal + GQA", 1, 4, 2, 8, 8, 8, 8, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0.5f, 0, 1, 0, 0},
    {"logits ~1e4 (shifted)", 1, 2, 2, 8, 8, 4, 4, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, -1e4, 0, 0},
    {"[B,N,H,d] strides", 2, 4, 2, 7, 9, 8, 8, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1},
    {"d=1", 1, 1, 1, 4, 5, 1, 1, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"Nk = 0", 1, 1, 1, 3, 0, 4, 4, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
};

/* Mask shapes per kind, right-aligned against [B, Hq, Nq, Nk]. */
static int mask_shape(const sdpa_case *c, int kind, int64_t *shape) {
    switch (kind) {
    case 1:
        shape[0] = c->Nq;
        shape[1] = c->Nk;
        return 2;
    case 2:
        shape[0] = c->B;
        shape[1] = 1;
        shape[2] = c->Nq;
        shape[3] = c->Nk;
        return 4;
    default:
        shape[0] = c->B;
        shape[1] = c->Hq;
        shape[2] = c->Nq;
        shape[3] = c->Nk;
        return 4;
    }
}

static size_t mask_index(const sdpa_case *c, int kind, int b, int h, int i, int j) {
    switch (kind) {
    case 1: return (size_t)i * c->Nk + j;
    case 2: return ((size_t)b * c->Nq + i) * c->Nk + j;
    default: return OIDX4(b, h, i, j, c->Hq, c->Nq, c->Nk);
    }
}

typedef struct {
    float *q, *k, *v, *dout;          /* contiguous [B, H, N, d] values */
    float *qs, *ks, *vs, *os, *douts; /* storage passed to the library (maybe [B, N, H, d]) */
    uint8_t *bmask, *kmask;
    float *amask, *slopes;
    attn_btensor bm, km;
    attn_tensor am;
    attn_sdpa_params p;
} sdpa_inputs;

/* A view of contiguous-[B,H,N,d] data, or of [B,N,H,d] storage with permuted strides. */
static attn_tensor view(float *data, int B, int H, int N, int D, int bnhd) {
    attn_tensor t = attn_tensor_4d(data, B, H, N, D);
    if (bnhd) {
        t.stride[0] = (int64_t)N * H * D;
        t.stride[1] = D;
        t.stride[2] = (int64_t)H * D;
        t.stride[3] = 1;
    }
    return t;
}

static void to_storage(const float *src, float *dst, int B, int H, int N, int D, int bnhd) {
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int n = 0; n < N; n++)
                for (int t = 0; t < D; t++) {
                    size_t s = OIDX4(b, h, n, t, H, N, D);
                    size_t d = bnhd ? OIDX4(b, n, h, t, N, H, D) : s;
                    dst[d] = src[s];
                }
}
static void from_storage(const float *src, float *dst, int B, int H, int N, int D, int bnhd) {
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int n = 0; n < N; n++)
                for (int t = 0; t < D; t++) {
                    size_t d = OIDX4(b, h, n, t, H, N, D);
                    size_t s = bnhd ? OIDX4(b, n, h, t, N, H, D) : d;
                    dst[d] = src[s];
                }
}

static double *to_double(const float *x, size_t n) {
    double *y = xmalloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static void make_inputs(const sdpa_case *c, test_rng *r, sdpa_inputs *in) {
    const size_t nq = (size_t)c->B * c->Hq * c->Nq, nk = (size_t)c->B * c->Hk * c->Nk;
    in->q = xmalloc(sizeof(float) * nq * c->d);
    in->k = xmalloc(sizeof(float) * nk * c->d);
    in->v = xmalloc(sizeof(float) * nk * c->dv);
    in->dout = xmalloc(sizeof(float) * nq * c->dv);
    fill_normal(r, in->q, nq * c->d, c->magnitude > 0 ? c->magnitude : 1);
    fill_normal(r, in->k, nk * c->d, c->magnitude > 0 ? c->magnitude : 1);
    if (c->magnitude < 0) {
        /* logits of magnitude |magnitude| whose differences within a row stay O(1): component 0 of
         * every key is 1 and component 0 of each query carries the shift. (Random logits that large
         * make rows one-hot, where the gradient is ~0 and its relative error meaningless.) */
        for (size_t i = 0; i < nk; i++) in->k[i * c->d] = 1.0f;
        for (size_t i = 0; i < nq; i++)
            in->q[i * c->d] = (float)(-c->magnitude * sqrt((double)c->d) * (1 + 0.1 * rng_uniform(r)));
    }
    fill_normal(r, in->v, nk * c->dv, 1);
    fill_normal(r, in->dout, nq * c->dv, 1);
    in->qs = xmalloc(sizeof(float) * nq * c->d);
    in->ks = xmalloc(sizeof(float) * nk * c->d);
    in->vs = xmalloc(sizeof(float) * nk * c->dv);
    in->os = xmalloc(sizeof(float) * nq * c->dv);
    in->douts = xmalloc(sizeof(float) * nq * c->dv);
    to_storage(in->q, in->qs, c->B, c->Hq, c->Nq, c->d, c->bnhd);
    to_storage(in->k, in->ks, c->B, c->Hk, c->Nk, c->d, c->bnhd);
    to_storage(in->v, in->vs, c->B, c->Hk, c->Nk, c->dv, c->bnhd);
    to_storage(in->dout, in->douts, c->B, c->Hq, c->Nq, c->dv, c->bnhd);
    in->p = attn_sdpa_params_default();
    in->p.causal = c->causal;
    in->p.window_left = c->wl;
    in->p.window_right = c->wr;
    in->p.softcap = c->softcap;
    in->p.scale = c->scale;
    in->p.dropout_p = c->dropout;
    in->p.dropout_seed = rng_next(r);
    in->p.dropout_offset = rng_next(r) >> 20;
    const size_t full = (size_t)c->B * c->Hq * c->Nq * c->Nk;
    in->bmask = NULL;
    in->amask = NULL;
    in->kmask = NULL;
    in->slopes = NULL;
    if (c->bool_mask) {
        int64_t shape[4];
        int rank = mask_shape(c, c->bool_mask, shape);
        in->bmask = xmalloc(full);
        for (size_t i = 0; i < full; i++) in->bmask[i] = rng_uniform(r) < 0.75;
        if (c->masked_rows)
            for (int b = 0; b < c->B; b++)
                for (int h = 0; h < c->Hq; h++)
                    for (int j = 0; j < c->Nk; j++) {
                        in->bmask[mask_index(c, c->bool_mask, b, h, 0, j)] = 0;
                        in->bmask[mask_index(c, c->bool_mask, b, h, c->Nq - 1, j)] = 0;
                    }
        in->bm = rank == 2 ? attn_btensor_2d(in->bmask, shape[0], shape[1])
                           : attn_btensor_4d(in->bmask, shape[0], shape[1], shape[2], shape[3]);
        in->p.bool_mask = &in->bm;
    }
    if (c->add_mask) {
        int64_t shape[4];
        int rank = mask_shape(c, c->add_mask, shape);
        in->amask = xmalloc(sizeof(float) * full);
        for (size_t i = 0; i < full; i++) in->amask[i] = rng_uniform(r) < 0.1 ? -INFINITY : (float)rng_normal(r);
        in->am = rank == 2 ? attn_tensor_2d(in->amask, shape[0], shape[1])
                           : attn_tensor_4d(in->amask, shape[0], shape[1], shape[2], shape[3]);
        in->p.add_mask = &in->am;
    }
    if (c->key_mask) {
        in->kmask = xmalloc((size_t)c->B * c->Nk);
        for (int i = 0; i < c->B * c->Nk; i++) in->kmask[i] = rng_uniform(r) < 0.7;
        in->kmask[c->Nk - 1] = 0; /* batch 0 always pads its last key */
        in->km = attn_btensor_2d(in->kmask, c->B, c->Nk);
        in->p.key_mask = &in->km;
    }
    if (c->alibi) {
        in->slopes = xmalloc(sizeof(float) * c->Hq);
        for (int h = 0; h < c->Hq; h++) in->slopes[h] = powf(2.0f, -8.0f * (h + 1) / c->Hq);
        in->p.alibi_slopes = in->slopes;
    }
}

static void free_inputs(sdpa_inputs *in) {
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->dout);
    free(in->qs);
    free(in->ks);
    free(in->vs);
    free(in->os);
    free(in->douts);
    free(in->bmask);
    free(in->amask);
    free(in->kmask);
    free(in->slopes);
}

/* The expanded mask and bias, written from the documented semantics. */
static void expand(const sdpa_case *c, const sdpa_inputs *in, uint8_t *allowed, double *bias, double *keep) {
    const int64_t off = c->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? c->Nk - c->Nq : 0;
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->Hq; h++)
            for (int i = 0; i < c->Nq; i++)
                for (int j = 0; j < c->Nk; j++) {
                    size_t idx = OIDX4(b, h, i, j, c->Hq, c->Nq, c->Nk);
                    int ok = 1;
                    if (c->causal && j > i + off) ok = 0;
                    if (c->wl >= 0 && j < i + off - c->wl) ok = 0;
                    if (c->wr >= 0 && j > i + off + c->wr) ok = 0;
                    if (in->bmask && !in->bmask[mask_index(c, c->bool_mask, b, h, i, j)]) ok = 0;
                    if (in->kmask && !in->kmask[(size_t)b * c->Nk + j]) ok = 0;
                    double bs = 0;
                    if (in->amask) {
                        double a = in->amask[mask_index(c, c->add_mask, b, h, i, j)];
                        if (a == -INFINITY)
                            ok = 0;
                        else
                            bs += a;
                    }
                    if (in->slopes) bs -= in->slopes[h] * fabs((double)(i + off - j));
                    allowed[idx] = (uint8_t)ok;
                    bias[idx] = bs;
                    if (keep) {
                        double u = attn_philox_uniform(in->p.dropout_seed, in->p.dropout_offset, idx);
                        keep[idx] = u >= c->dropout ? 1.0 / (1.0 - c->dropout) : 0.0;
                    }
                }
}

static void run_case(const sdpa_case *c, test_rng *r) {
    sdpa_inputs in;
    make_inputs(c, r, &in);
    const size_t nq = (size_t)c->B * c->Hq * c->Nq, nk = (size_t)c->B * c->Hk * c->Nk;
    const size_t full = nq * (size_t)c->Nk;
    uint8_t *allowed = xmalloc(full ? full : 1);
    double *bias = xmalloc(sizeof(double) * (full ? full : 1));
    double *keep = c->dropout > 0 ? xmalloc(sizeof(double) * full) : NULL;
    expand(c, &in, allowed, bias, keep);
    oracle_shape os = {c->B,       c->Hq,   c->Hk, c->Nq, c->Nk, c->d, c->dv, c->scale ? c->scale : 1.0 / sqrt(c->d),
                       c->softcap, allowed, bias,  keep};
    double *q = to_double(in.q, nq * c->d), *k = to_double(in.k, nk * c->d), *v = to_double(in.v, nk * c->dv),
           *go = to_double(in.dout, nq * c->dv);
    double *o = xmalloc(sizeof(double) * nq * c->dv), *p = xmalloc(sizeof(double) * (full + 1)),
           *lse = xmalloc(sizeof(double) * nq);
    double *dq = xmalloc(sizeof(double) * nq * c->d), *dk = xmalloc(sizeof(double) * (nk * c->d + 1)),
           *dv = xmalloc(sizeof(double) * (nk * c->dv + 1));
    oracle_forward(&os, q, k, v, o, p, lse);
    oracle_backward(&os, q, k, v, go, dq, dk, dv);

    attn_tensor tq = view(in.qs, c->B, c->Hq, c->Nq, c->d, c->bnhd);
    attn_tensor tk = view(in.ks, c->B, c->Hk, c->Nk, c->d, c->bnhd);
    attn_tensor tv = view(in.vs, c->B, c->Hk, c->Nk, c->dv, c->bnhd);
    attn_tensor to = view(in.os, c->B, c->Hq, c->Nq, c->dv, c->bnhd);
    attn_tensor tgo = view(in.douts, c->B, c->Hq, c->Nq, c->dv, c->bnhd);
    float *w = xmalloc(sizeof(float) * (full + 1)), *l = xmalloc(sizeof(float) * nq);
    attn_tensor tw = attn_tensor_4d(w, c->B, c->Hq, c->Nq, c->Nk), tl = attn_tensor_3d(l, c->B, c->Hq, c->Nq);
    size_t wsb = attn_sdpa_workspace_size(&tq, &tk, &tv);
    void *ws = xmalloc(wsb);
    CHECK_OK(attn_sdpa_forward(&tq, &tk, &tv, &in.p, &to, &tw, &tl, ws, wsb));
    float *out = xmalloc(sizeof(float) * nq * c->dv);
    from_storage(in.os, out, c->B, c->Hq, c->Nq, c->dv, c->bnhd);
    double e_o = rel_err_fd(out, o, nq * c->dv), e_w = rel_err_fd(w, p, full);
    int lse_ok = 1;
    for (size_t i = 0; i < nq; i++)
        if (!(isinf(lse[i]) ? (isinf(l[i]) && l[i] < 0) : fabs(l[i] - lse[i]) <= 1e-5 * (1 + fabs(lse[i])))) lse_ok = 0;
    CHECK(e_o <= 1e-5, "%s: forward rel err %.3g", c->name, e_o);
    CHECK(e_w <= 1e-5, "%s: weights rel err %.3g", c->name, e_w);
    CHECK(lse_ok, "%s: lse differs from the oracle", c->name);

    float *gq = xmalloc(sizeof(float) * nq * c->d), *gk = xmalloc(sizeof(float) * (nk * c->d + 1)),
          *gv = xmalloc(sizeof(float) * (nk * c->dv + 1));
    float *gqs = xmalloc(sizeof(float) * nq * c->d), *gks = xmalloc(sizeof(float) * (nk * c->d + 1)),
          *gvs = xmalloc(sizeof(float) * (nk * c->dv + 1));
    attn_tensor tdq = view(gqs, c->B, c->Hq, c->Nq, c->d, c->bnhd);
    attn_tensor tdk = view(gks, c->B, c->Hk, c->Nk, c->d, c->bnhd);
    attn_tensor tdv = view(gvs, c->B, c->Hk, c->Nk, c->dv, c->bnhd);
    CHECK_OK(attn_sdpa_backward(&tq, &tk, &tv, &in.p, &tgo, &tdq, &tdk, &tdv, ws, wsb));
    from_storage(gqs, gq, c->B, c->Hq, c->Nq, c->d, c->bnhd);
    from_storage(gks, gk, c->B, c->Hk, c->Nk, c->d, c->bnhd);
    from_storage(gvs, gv, c->B, c->Hk, c->Nk, c->dv, c->bnhd);
    double e_q = rel_err_fd(gq, dq, nq * c->d), e_k = rel_err_fd(gk, dk, nk * c->d),
           e_v = rel_err_fd(gv, dv, nk * c->dv);
    CHECK(e_q <= 1e-4 && e_k <= 1e-4 && e_v <= 1e-4, "%s: backward rel err dq %.3g dk %.3g dv %.3g", c->name, e_q, e_k,
          e_v);
    if (c->masked_rows) { /* fully masked rows: output 0, weights 0, lse -inf, dq 0 */
        int zero = 1;
        for (int b = 0; b < c->B; b++)
            for (int h = 0; h < c->Hq; h++) {
                size_t row = OIDX4(0, b, h, 0, c->B, c->Hq, c->Nq);
                for (int t = 0; t < c->dv; t++) zero &= out[row * c->dv + t] == 0.0f;
                for (int t = 0; t < c->d; t++) zero &= gq[row * c->d + t] == 0.0f;
                for (int j = 0; j < c->Nk; j++) zero &= w[row * c->Nk + j] == 0.0f;
                zero &= isinf(l[row]) && l[row] < 0;
            }
        CHECK(zero, "%s: fully masked rows must give 0 output/weights/dq and lse -inf", c->name);
    }
    printf("  %-30s fwd %.2e  weights %.2e  dq %.2e  dk %.2e  dv %.2e\n", c->name, e_o, e_w, e_q, e_k, e_v);

    free(allowed);
    free(bias);
    free(keep);
    free(q);
    free(k);
    free(v);
    free(go);
    free(o);
    free(p);
    free(lse);
    free(dq);
    free(dk);
    free(dv);
    free(w);
    free(l);
    free(ws);
    free(out);
    free(gq);
    free(gk);
    free(gv);
    free(gqs);
    free(gks);
    free(gvs);
    free_inputs(&in);
}

/* The oracle's analytic gradient against central finite differences of the oracle's forward,
 * for loss = sum(O * dO): validates the gradient formulas themselves. */
static void check_oracle_gradients(test_rng *r) {
    static const sdpa_case fd_cases[] = {
        {"fd: masks + GQA + causal",
         1,
         4,
         2,
         5,
         6,
         3,
         2,
         ATTN_CAUSAL_BOTTOM_RIGHT,
         -1,
         -1,
         2,
         1,
         1,
         0,
         0,
         0,
         0,
         1,
         0,
         0},
        {"fd: alibi + softcap + window",
         1,
         2,
         1,
         5,
         5,
         3,
         3,
         ATTN_CAUSAL_NONE,
         2,
         1,
         0,
         0,
         0,
         1,
         1.5f,
         0,
         0,
         1.5,
         0,
         0},
        {"fd: dropout", 1, 2, 2, 4, 5, 3, 3, 0, -1, -1, 0, 0, 0, 0, 0, 0.4f, 0, 1, 0, 0},
    };
    for (size_t ci = 0; ci < sizeof fd_cases / sizeof fd_cases[0]; ci++) {
        const sdpa_case *c = &fd_cases[ci];
        sdpa_inputs in;
        make_inputs(c, r, &in);
        const size_t nq = (size_t)c->B * c->Hq * c->Nq, nk = (size_t)c->B * c->Hk * c->Nk, full = nq * c->Nk;
        uint8_t *allowed = xmalloc(full);
        double *bias = xmalloc(sizeof(double) * full);
        double *keep = c->dropout > 0 ? xmalloc(sizeof(double) * full) : NULL;
        expand(c, &in, allowed, bias, keep);
        oracle_shape os = {c->B,       c->Hq,   c->Hk, c->Nq, c->Nk, c->d, c->dv, 1.0 / sqrt(c->d),
                           c->softcap, allowed, bias,  keep};
        double *x[3] = {to_double(in.q, nq * c->d), to_double(in.k, nk * c->d), to_double(in.v, nk * c->dv)};
        size_t n[3] = {nq * c->d, nk * c->d, nk * c->dv};
        double *go = to_double(in.dout, nq * c->dv), *o = xmalloc(sizeof(double) * nq * c->dv);
        double *g[3] = {xmalloc(sizeof(double) * n[0]), xmalloc(sizeof(double) * n[1]), xmalloc(sizeof(double) * n[2])};
        oracle_backward(&os, x[0], x[1], x[2], go, g[0], g[1], g[2]);
        double worst = 0;
        for (int which = 0; which < 3; which++) {
            double *num = xmalloc(sizeof(double) * n[which]);
            for (size_t e = 0; e < n[which]; e++) {
                const double h = 1e-6, save = x[which][e];
                double lp = 0, lm = 0;
                x[which][e] = save + h;
                oracle_forward(&os, x[0], x[1], x[2], o, NULL, NULL);
                for (size_t t = 0; t < nq * c->dv; t++) lp += o[t] * go[t];
                x[which][e] = save - h;
                oracle_forward(&os, x[0], x[1], x[2], o, NULL, NULL);
                for (size_t t = 0; t < nq * c->dv; t++) lm += o[t] * go[t];
                x[which][e] = save;
                num[e] = (lp - lm) / (2 * h);
            }
            double err = rel_err_dd(g[which], num, n[which]);
            if (err > worst) worst = err;
            free(num);
        }
        CHECK(worst <= 1e-6, "%s: oracle gradient vs finite differences rel err %.3g", c->name, worst);
        printf("  %-30s oracle vs finite differences %.2e\n", c->name, worst);
        for (int i = 0; i < 3; i++) {
            free(x[i]);
            free(g[i]);
        }
        free(go);
        free(o);
        free(allowed);
        free(bias);
        free(keep);
        free_inputs(&in);
    }
}

/* Forward and backward bitwise identical for 1, 2, 3 and 4 threads. */
static void check_determinism(test_rng *r) {
    const sdpa_case c = {"threads", 2, 4, 2,    19, 23, 16, 8, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0,
                         1,         0, 0, 0.2f, 0,  1,  0,  0};
    sdpa_inputs in;
    make_inputs(&c, r, &in);
    const size_t nq = (size_t)c.B * c.Hq * c.Nq, nk = (size_t)c.B * c.Hk * c.Nk;
    float *ref[4] = {0}, *cur[4];
    size_t n[4] = {nq * c.dv, nq * c.d, nk * c.d, nk * c.dv};
    for (int threads = 1; threads <= 4; threads++) {
        attn_set_num_threads(threads);
        for (int i = 0; i < 4; i++) cur[i] = xmalloc(sizeof(float) * n[i]);
        attn_tensor tq = view(in.qs, c.B, c.Hq, c.Nq, c.d, 0), tk = view(in.ks, c.B, c.Hk, c.Nk, c.d, 0),
                    tv = view(in.vs, c.B, c.Hk, c.Nk, c.dv, 0), to = view(cur[0], c.B, c.Hq, c.Nq, c.dv, 0),
                    tgo = view(in.douts, c.B, c.Hq, c.Nq, c.dv, 0), tdq = view(cur[1], c.B, c.Hq, c.Nq, c.d, 0),
                    tdk = view(cur[2], c.B, c.Hk, c.Nk, c.d, 0), tdv = view(cur[3], c.B, c.Hk, c.Nk, c.dv, 0);
        size_t wsb = attn_sdpa_workspace_size(&tq, &tk, &tv);
        void *ws = xmalloc(wsb);
        CHECK_OK(attn_sdpa_forward(&tq, &tk, &tv, &in.p, &to, NULL, NULL, ws, wsb));
        CHECK_OK(attn_sdpa_backward(&tq, &tk, &tv, &in.p, &tgo, &tdq, &tdk, &tdv, ws, wsb));
        free(ws);
        if (threads == 1) {
            for (int i = 0; i < 4; i++) ref[i] = cur[i];
        } else {
            for (int i = 0; i < 4; i++) {
                CHECK(memcmp(ref[i], cur[i], sizeof(float) * n[i]) == 0,
                      "result %d differs bitwise between 1 and %d threads", i, threads);
                free(cur[i]);
            }
        }
    }
    attn_set_num_threads(0);
    for (int i = 0; i < 4; i++) free(ref[i]);
    free_inputs(&in);
}

static void check_errors(void) {
    float buf[4096];
    for (int i = 0; i < 4096; i++) buf[i] = (float)i * 1e-3f;
    char ws[16384];
    attn_sdpa_params p = attn_sdpa_params_default();
    attn_tensor q = attn_tensor_4d(buf, 1, 4, 8, 8), k = attn_tensor_4d(buf, 1, 2, 8, 8),
                v = attn_tensor_4d(buf, 1, 2, 8, 8), o = attn_tensor_4d(buf + 2048, 1, 4, 8, 8);
    CHECK_OK(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws));
    attn_tensor k3 = attn_tensor_4d(buf, 1, 3, 8, 8), v3 = attn_tensor_4d(buf, 1, 3, 8, 8);
    CHECK_STATUS(attn_sdpa_forward(&q, &k3, &v3, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_SHAPE);
    attn_tensor kd = attn_tensor_4d(buf, 1, 2, 8, 7);
    CHECK_STATUS(attn_sdpa_forward(&q, &kd, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_SHAPE);
    attn_tensor vn = attn_tensor_4d(buf, 1, 2, 9, 8);
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &vn, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_SHAPE);
    attn_tensor ob = attn_tensor_4d(buf, 1, 4, 8, 7);
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &ob, NULL, NULL, ws, sizeof ws), ATTN_ERR_SHAPE);
    attn_tensor q3 = attn_tensor_3d(buf, 4, 8, 8);
    CHECK_STATUS(attn_sdpa_forward(&q3, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_sdpa_forward(NULL, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, NULL, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, NULL, ws, 8), ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, NULL, NULL, 0), ATTN_ERR_WORKSPACE);
    attn_tensor qneg = q;
    qneg.shape[2] = -1;
    CHECK_STATUS(attn_sdpa_forward(&qneg, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_INVALID_ARGUMENT);
    uint8_t m[64] = {0};
    attn_btensor bad = attn_btensor_2d(m, 8, 7);
    p.bool_mask = &bad;
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_SHAPE);
    p = attn_sdpa_params_default();
    attn_btensor km = attn_btensor_2d(m, 2, 8);
    p.key_mask = &km;
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_SHAPE);
    p = attn_sdpa_params_default();
    p.dropout_p = 1.5f;
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_INVALID_ARGUMENT);
    p.dropout_p = NAN;
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_INVALID_ARGUMENT);
    p = attn_sdpa_params_default();
    p.scale = INFINITY;
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_INVALID_ARGUMENT);
    p = attn_sdpa_params_default();
    p.causal = (attn_causal)7;
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, NULL, ws, sizeof ws), ATTN_ERR_INVALID_ARGUMENT);
    p = attn_sdpa_params_default();
    attn_tensor wbad = attn_tensor_4d(buf, 1, 4, 8, 9);
    CHECK_STATUS(attn_sdpa_forward(&q, &k, &v, &p, &o, &wbad, NULL, ws, sizeof ws), ATTN_ERR_SHAPE);
    attn_tensor dqbad = attn_tensor_4d(buf, 1, 4, 8, 9);
    CHECK_STATUS(attn_sdpa_backward(&q, &k, &v, &p, &o, &dqbad, NULL, NULL, ws, sizeof ws), ATTN_ERR_SHAPE);
    /* hostile shapes do not overflow into a small workspace */
    attn_tensor huge = attn_tensor_4d(buf, INT64_MAX / 4, 2, 8, 8);
    CHECK(attn_sdpa_workspace_size(&huge, &k, &v) == 0, "hostile shape gives a workspace size");
}

/* Parity with PyTorch: fixtures written by tests/parity/gen_sdpa.py (float64 autograd). */
static void check_torch_parity(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/sdpa.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_open_file(path, &st);
    CHECK(s == ATTN_OK, "open %s: %s", path, attn_last_error());
    if (s != ATTN_OK) return;
    const char *ncases = attn_safetensors_metadata_find(st, "cases");
    CHECK(ncases != NULL, "fixture lacks the 'cases' metadata");
    int n = ncases ? atoi(ncases) : 0;
    CHECK(n >= 8, "fixture has %d cases", n);
    for (int ci = 0; ci < n; ci++) {
        char key[64], name[128];
        snprintf(key, sizeof key, "case%d", ci);
        const char *desc = attn_safetensors_metadata_find(st, key);
        CHECK(desc != NULL, "missing metadata %s", key);
        if (!desc) continue;
        int causal = 0, wl = -1, wr = -1, has_bm = 0, has_am = 0, has_km = 0, alibi = 0;
        float softcap = 0, scale = 0;
        if (sscanf(desc, "causal=%d wl=%d wr=%d softcap=%f scale=%f bool=%d add=%d key=%d alibi=%d", &causal, &wl, &wr,
                   &softcap, &scale, &has_bm, &has_am, &has_km, &alibi) != 9) {
            CHECK(0, "bad case description '%s'", desc);
            continue;
        }
#define T(field) (snprintf(name, sizeof name, "case%d.%s", ci, field), fx_floats(st, name, NULL))
        const attn_safetensors_tensor *qi =
            (snprintf(name, sizeof name, "case%d.q", ci), attn_safetensors_find(st, name));
        const attn_safetensors_tensor *ki =
            (snprintf(name, sizeof name, "case%d.k", ci), attn_safetensors_find(st, name));
        const attn_safetensors_tensor *vi =
            (snprintf(name, sizeof name, "case%d.v", ci), attn_safetensors_find(st, name));
        CHECK(qi && ki && vi && qi->rank == 4 && ki->rank == 4 && vi->rank == 4, "case %d: q/k/v missing", ci);
        if (!(qi && ki && vi && qi->rank == 4 && ki->rank == 4 && vi->rank == 4)) continue;
        const int64_t *qs = qi->shape, *ks = ki->shape, *vs = vi->shape;
        float *q = T("q"), *k = T("k"), *v = T("v"), *go = T("dout"), *o_ref = T("out"), *dq_ref = T("dq"),
              *dk_ref = T("dk"), *dv_ref = T("dv");
        float *am = has_am ? T("add_mask") : NULL, *slopes = alibi ? T("alibi") : NULL;
        uint8_t *bm = NULL, *km = NULL;
        attn_btensor tbm, tkm;
        attn_tensor tam;
        attn_sdpa_params p = attn_sdpa_params_default();
        p.causal = (attn_causal)causal;
        p.window_left = wl;
        p.window_right = wr;
        p.softcap = softcap;
        p.scale = scale;
        p.alibi_slopes = slopes;
        const size_t full = (size_t)qs[0] * qs[1] * qs[2] * ks[2];
        if (has_bm) {
            float *f = T("bool_mask");
            bm = xmalloc(full);
            for (size_t i = 0; i < full; i++) bm[i] = f && f[i] != 0;
            free(f);
            tbm = attn_btensor_4d(bm, qs[0], qs[1], qs[2], ks[2]);
            p.bool_mask = &tbm;
        }
        if (am) {
            tam = attn_tensor_4d(am, qs[0], qs[1], qs[2], ks[2]);
            p.add_mask = &tam;
        }
        if (has_km) {
            float *f = T("key_mask");
            km = xmalloc((size_t)qs[0] * ks[2]);
            for (int64_t i = 0; i < qs[0] * ks[2]; i++) km[i] = f && f[i] != 0;
            free(f);
            tkm = attn_btensor_2d(km, qs[0], ks[2]);
            p.key_mask = &tkm;
        }
        const size_t no = (size_t)qs[0] * qs[1] * qs[2] * vs[3];
        float *o = xmalloc(sizeof(float) * no), *dq = xmalloc(sizeof(float) * qs[0] * qs[1] * qs[2] * qs[3]),
              *dk = xmalloc(sizeof(float) * ks[0] * ks[1] * ks[2] * ks[3]),
              *dv = xmalloc(sizeof(float) * vs[0] * vs[1] * vs[2] * vs[3]);
        attn_tensor tq = attn_tensor_4d(q, qs[0], qs[1], qs[2], qs[3]),
                    tk = attn_tensor_4d(k, ks[0], ks[1], ks[2], ks[3]),
                    tv = attn_tensor_4d(v, vs[0], vs[1], vs[2], vs[3]),
                    to = attn_tensor_4d(o, qs[0], qs[1], qs[2], vs[3]),
                    tgo = attn_tensor_4d(go, qs[0], qs[1], qs[2], vs[3]),
                    tdq = attn_tensor_4d(dq, qs[0], qs[1], qs[2], qs[3]),
                    tdk = attn_tensor_4d(dk, ks[0], ks[1], ks[2], ks[3]),
                    tdv = attn_tensor_4d(dv, vs[0], vs[1], vs[2], vs[3]);
        size_t wsb = attn_sdpa_workspace_size(&tq, &tk, &tv);
        void *ws = xmalloc(wsb);
        CHECK_OK(attn_sdpa_forward(&tq, &tk, &tv, &p, &to, NULL, NULL, ws, wsb));
        CHECK_OK(attn_sdpa_backward(&tq, &tk, &tv, &p, &tgo, &tdq, &tdk, &tdv, ws, wsb));
        double eo = rel_err_ff(o, o_ref, no), eq = rel_err_ff(dq, dq_ref, (size_t)(qs[0] * qs[1] * qs[2] * qs[3])),
               ek = rel_err_ff(dk, dk_ref, (size_t)(ks[0] * ks[1] * ks[2] * ks[3])),
               ev = rel_err_ff(dv, dv_ref, (size_t)(vs[0] * vs[1] * vs[2] * vs[3]));
        const char *label = attn_safetensors_metadata_find(st, (snprintf(name, sizeof name, "case%d.name", ci), name));
        CHECK(eo <= 1e-5, "torch case %d (%s): forward rel err %.3g", ci, label ? label : "", eo);
        CHECK(eq <= 1e-4 && ek <= 1e-4 && ev <= 1e-4, "torch case %d (%s): grads rel err %.3g %.3g %.3g", ci,
              label ? label : "", eq, ek, ev);
        printf("  torch %-24s fwd %.2e  dq %.2e  dk %.2e  dv %.2e\n", label ? label : "", eo, eq, ek, ev);
#undef T
        free(q);
        free(k);
        free(v);
        free(go);
        free(o_ref);
        free(dq_ref);
        free(dk_ref);
        free(dv_ref);
        free(am);
        free(slopes);
        free(bm);
        free(km);
        free(o);
        free(dq);
        free(dk);
        free(dv);
        free(ws);
    }
    attn_safetensors_close(st);
}

int main(void) {
    test_rng r = rng_seeded(20261129);
    printf("reference attention against the float64 oracle:\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], &r);
    check_oracle_gradients(&r);
    check_determinism(&r);
    check_errors();
    check_torch_parity();
    return test_summary("test_sdpa");
}
