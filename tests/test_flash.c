/* Flash attention against the reference attention (itself checked against a float64 oracle,
 * finite differences and PyTorch in test_sdpa): every option, block edges, head dims, every ISA;
 * bitwise determinism across thread counts; the fast tile kernels (AVX2, AVX-512 4- and 6-row)
 * bitwise the portable one; attn_flash_weights; argument errors (ctest runs it with each tile:
 * test_flash_rows4/6). */
#include <malloc.h>
#include <string.h>

#include "attention/flash_internal.h"
#include "test_util.h"

typedef struct {
    const char *name;
    int B, Hq, Hk, Nq, Nk, d, dv;
    attn_causal causal;
    int64_t wl, wr;
    int bool_mask, add_mask, key_mask, alibi;
    float softcap, dropout, scale;
    double mag;
    int bnhd;
} fcase;

static const fcase cases[] = {
    {"plain 64", 1, 2, 2, 64, 64, 64, 64, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"tile-1", 1, 2, 2, 63, 63, 64, 64, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"tile+1", 1, 2, 2, 65, 65, 64, 64, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"causal tile+1", 2, 2, 2, 129, 129, 32, 32, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"causal TL Nq<Nk", 1, 2, 2, 70, 200, 32, 32, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"causal TL Nq>Nk", 1, 2, 2, 200, 70, 32, 32, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"causal BR Nq<Nk", 1, 2, 2, 70, 200, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"causal BR Nq>Nk", 1, 2, 2, 200, 70, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"window 20/0 causal", 1, 2, 2, 300, 300, 32, 32, ATTN_CAUSAL_TOP_LEFT, 20, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"window 70/5 BR", 1, 2, 2, 150, 230, 16, 16, ATTN_CAUSAL_BOTTOM_RIGHT, 70, 5, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"window 33/40 none", 1, 2, 2, 190, 190, 16, 16, 0, 33, 40, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"bool mask", 2, 2, 2, 70, 90, 16, 16, 0, -1, -1, 1, 0, 0, 0, 0, 0, 0, 1, 0},
    {"additive mask", 2, 2, 2, 70, 90, 16, 16, 0, -1, -1, 0, 1, 0, 0, 0, 0, 0, 1, 0},
    {"valid logits below -1e5", 2, 2, 2, 70, 90, 16, 16, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 2, 0, 0, 0, 0, 0, 1, 0},
    {"key mask", 3, 2, 2, 70, 90, 16, 16, 0, -1, -1, 0, 0, 1, 0, 0, 0, 0, 1, 0},
    {"key mask + causal", 2, 2, 2, 90, 90, 16, 16, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 1, 0, 0, 0, 0, 1, 0},
    {"masked rows", 1, 2, 2, 70, 70, 16, 16, 0, -1, -1, 2, 0, 0, 0, 0, 0, 0, 1, 0},
    {"alibi", 1, 4, 4, 100, 100, 16, 16, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 1, 0, 0, 0, 1, 0},
    {"softcap", 1, 2, 2, 100, 100, 16, 16, 0, -1, -1, 0, 0, 0, 0, 3.0f, 0, 0, 2, 0},
    {"GQA 8/2", 1, 8, 2, 80, 80, 32, 32, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"MQA 4/1 cross", 2, 4, 1, 50, 130, 32, 24, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"dropout 0.2", 1, 2, 2, 70, 90, 16, 16, 0, -1, -1, 0, 0, 0, 0, 0, 0.2f, 0, 1, 0},
    {"dropout, Nk % 4 == 0", 2, 2, 2, 70, 132, 16, 16, 0, -1, -1, 0, 0, 1, 0, 0, 0.3f, 0, 1, 0},
    {"dropout causal Nk % 4 == 0",
     1,
     4,
     2,
     129,
     128,
     32,
     32,
     ATTN_CAUSAL_BOTTOM_RIGHT,
     -1,
     -1,
     0,
     0,
     0,
     0,
     0,
     0.9f,
     0,
     1,
     0},
    {"dropout + causal + GQA", 1, 4, 2, 70, 70, 16, 16, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0.5f, 0, 1, 0},
    {"d=1", 1, 2, 2, 65, 65, 1, 1, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"d=7 dv=5", 1, 2, 2, 65, 66, 7, 5, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"d=80", 1, 2, 2, 70, 70, 80, 80, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"d=96", 1, 2, 2, 70, 70, 96, 96, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"d=128", 1, 2, 2, 130, 130, 128, 128, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"d=256", 1, 1, 1, 70, 70, 256, 256, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"logits 1e4 one-hot", 1, 2, 2, 64, 64, 16, 16, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, -1e4, 0},
    {"logits ~1e3 random", 1, 2, 2, 64, 64, 16, 16, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 12, 0},
    {"custom scale", 1, 2, 2, 64, 64, 16, 16, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0.05f, 1, 0},
    {"[B,N,H,d] strides", 2, 4, 2, 70, 80, 16, 16, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 1, 0, 0, 0, 0, 1, 1},
    {"Nk=0", 1, 1, 1, 10, 0, 16, 16, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"Nq=1 decode", 1, 2, 2, 1, 200, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
};

typedef struct {
    float *q, *k, *v, *go;
    uint8_t *bm, *km;
    float *am, *slopes;
    attn_btensor tbm, tkm;
    attn_tensor tam;
    attn_sdpa_params p;
    attn_tensor tq, tk, tv, tgo;
} finputs;

static attn_tensor view(float *x, int B, int H, int N, int D, int bnhd) {
    attn_tensor t = attn_tensor_4d(x, B, H, N, D);
    if (bnhd) {
        t.stride[0] = (int64_t)N * H * D;
        t.stride[1] = D;
        t.stride[2] = (int64_t)H * D;
    }
    return t;
}

static void make(const fcase *c, test_rng *r, finputs *in) {
    const size_t nq = (size_t)c->B * c->Hq * c->Nq, nk = (size_t)c->B * c->Hk * c->Nk, full = nq * (size_t)c->Nk;
    memset(in, 0, sizeof *in);
    in->q = xmalloc(sizeof(float) * nq * c->d);
    in->k = xmalloc(sizeof(float) * (nk * c->d + 1));
    in->v = xmalloc(sizeof(float) * (nk * c->dv + 1));
    in->go = xmalloc(sizeof(float) * nq * c->dv);
    fill_normal(r, in->q, nq * c->d, c->mag > 0 ? c->mag : 1);
    fill_normal(r, in->k, nk * c->d, c->mag > 0 ? c->mag : 1);
    if (c->mag < 0) { /* query i = a multiple of key (7 i) mod Nk: its logit is -mag, the rest far below */
        const int g = c->Hq / c->Hk;
        /* Keys of one norm and pairwise cosine < 0.9, so every other logit is at least 0.1 * mag
         * below the chosen one and the rows are one-hot in any precision. Random keys alone do not
         * guarantee it: a longer, nearly parallel key can tie with or beat the chosen one, and a
         * near tie at logits of 1e4 is ill-conditioned (float rounding of the score is ~1e-3). */
        for (int bh = 0; bh < c->B * c->Hk; bh++)
            for (int j = 0; j < c->Nk; j++) {
                float *kj = in->k + ((size_t)bh * c->Nk + j) * c->d;
                for (int ok = 0; !ok;) {
                    double nrm = 0;
                    for (int t = 0; t < c->d; t++) nrm += (double)kj[t] * kj[t];
                    for (int t = 0; t < c->d; t++) kj[t] = (float)(kj[t] * sqrt(c->d / nrm));
                    ok = 1;
                    for (int l = 0; l < j && ok; l++) {
                        const float *kl = in->k + ((size_t)bh * c->Nk + l) * c->d;
                        double dot = 0;
                        for (int t = 0; t < c->d; t++) dot += (double)kj[t] * kl[t];
                        ok = dot < 0.9 * c->d;
                    }
                    if (!ok) fill_normal(r, kj, (size_t)c->d, 1);
                }
            }
        for (int b = 0; b < c->B; b++)
            for (int h = 0; h < c->Hq; h++)
                for (int i = 0; i < c->Nq; i++) {
                    const float *kj = in->k + (((size_t)b * c->Hk + h / g) * c->Nk + (size_t)(7 * i) % c->Nk) * c->d;
                    float *qi = in->q + (((size_t)b * c->Hq + h) * c->Nq + i) * c->d;
                    double nrm = 0;
                    for (int t = 0; t < c->d; t++) nrm += (double)kj[t] * kj[t];
                    const double f = -c->mag * sqrt((double)c->d) / nrm;
                    for (int t = 0; t < c->d; t++) qi[t] = (float)(f * kj[t]);
                }
    }
    fill_normal(r, in->v, nk * c->dv, 1);
    fill_normal(r, in->go, nq * c->dv, 1);
    in->p = attn_sdpa_params_default();
    in->p.causal = c->causal;
    in->p.window_left = c->wl;
    in->p.window_right = c->wr;
    in->p.softcap = c->softcap;
    in->p.scale = c->scale;
    in->p.dropout_p = c->dropout;
    in->p.dropout_seed = rng_next(r);
    in->p.dropout_offset = rng_next(r) >> 24;
    if (c->bool_mask) {
        in->bm = xmalloc(full);
        for (size_t i = 0; i < full; i++) in->bm[i] = rng_uniform(r) < 0.8;
        if (c->bool_mask == 2) /* every 7th query row fully masked */
            for (size_t row = 0; row < nq; row += 7) memset(in->bm + row * c->Nk, 0, (size_t)c->Nk);
        in->tbm = attn_btensor_4d(in->bm, c->B, c->Hq, c->Nq, c->Nk);
        in->p.bool_mask = &in->tbm;
    }
    if (c->add_mask) {
        in->am = xmalloc(sizeof(float) * full);
        for (size_t i = 0; i < full; i++) in->am[i] = rng_uniform(r) < 0.1 ? -INFINITY : (float)rng_normal(r);
        if (c->add_mask == 2) /* every third query row sits near -1e5 (valid, not masked); elsewhere a
                                 few entries at -1e5 must get probability ~0 but not be treated as masked */
            for (size_t row = 0; row < nq; row++)
                for (int j = 0; j < c->Nk; j++) {
                    float *e = in->am + row * c->Nk + j;
                    if (row % 3 == 0)
                        *e = (float)(-1e5 - 30 * rng_uniform(r));
                    else if (rng_uniform(r) < 0.05)
                        *e = -1e5f;
                }
        in->tam = attn_tensor_4d(in->am, c->B, c->Hq, c->Nq, c->Nk);
        in->p.add_mask = &in->tam;
    }
    if (c->key_mask) {
        in->km = xmalloc((size_t)c->B * c->Nk);
        for (int i = 0; i < c->B * c->Nk; i++) in->km[i] = rng_uniform(r) < 0.7;
        in->tkm = attn_btensor_2d(in->km, c->B, c->Nk);
        in->p.key_mask = &in->tkm;
    }
    if (c->alibi) {
        in->slopes = xmalloc(sizeof(float) * c->Hq);
        for (int h = 0; h < c->Hq; h++) in->slopes[h] = powf(2.0f, -8.0f * (h + 1) / c->Hq);
        in->p.alibi_slopes = in->slopes;
    }
    /* [B, N, H, d] storage holds the same values in another order: only strides change */
    in->tq = view(in->q, c->B, c->Hq, c->Nq, c->d, c->bnhd);
    in->tk = view(in->k, c->B, c->Hk, c->Nk, c->d, c->bnhd);
    in->tv = view(in->v, c->B, c->Hk, c->Nk, c->dv, c->bnhd);
    in->tgo = view(in->go, c->B, c->Hq, c->Nq, c->dv, c->bnhd);
}

static void release(finputs *in) {
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->go);
    free(in->bm);
    free(in->km);
    free(in->am);
    free(in->slopes);
}

typedef struct {
    float *o, *lse, *dq, *dk, *dv;
} fresult;

static void run_flash(const fcase *c, finputs *in, fresult *res) {
    const size_t nq = (size_t)c->B * c->Hq * c->Nq, nk = (size_t)c->B * c->Hk * c->Nk;
    res->o = xmalloc(sizeof(float) * nq * c->dv);
    res->lse = xmalloc(sizeof(float) * nq);
    res->dq = xmalloc(sizeof(float) * nq * c->d);
    res->dk = xmalloc(sizeof(float) * (nk * c->d + 1));
    res->dv = xmalloc(sizeof(float) * (nk * c->dv + 1));
    attn_tensor to = view(res->o, c->B, c->Hq, c->Nq, c->dv, c->bnhd),
                tl = attn_tensor_3d(res->lse, c->B, c->Hq, c->Nq),
                tdq = view(res->dq, c->B, c->Hq, c->Nq, c->d, c->bnhd),
                tdk = view(res->dk, c->B, c->Hk, c->Nk, c->d, c->bnhd),
                tdv = view(res->dv, c->B, c->Hk, c->Nk, c->dv, c->bnhd);
    size_t wsb = attn_flash_workspace_size(&in->tq, &in->tk, &in->tv);
    void *ws = xmalloc(wsb);
    CHECK_OK(attn_flash_forward(&in->tq, &in->tk, &in->tv, &in->p, &to, &tl, ws, wsb));
    CHECK_OK(attn_flash_backward(&in->tq, &in->tk, &in->tv, &in->p, &to, &in->tgo, &tl, &tdq, &tdk, &tdv, ws, wsb));
    free(ws);
}

static void free_result(fresult *r) {
    free(r->o);
    free(r->lse);
    free(r->dq);
    free(r->dk);
    free(r->dv);
}

static void run_case(const fcase *c, test_rng *r) {
    finputs in;
    make(c, r, &in);
    const size_t nq = (size_t)c->B * c->Hq * c->Nq, nk = (size_t)c->B * c->Hk * c->Nk, full = nq * c->Nk;
    /* the reference */
    fresult ref = {xmalloc(sizeof(float) * nq * c->dv), xmalloc(sizeof(float) * nq), xmalloc(sizeof(float) * nq * c->d),
                   xmalloc(sizeof(float) * (nk * c->d + 1)), xmalloc(sizeof(float) * (nk * c->dv + 1))};
    float *wref = xmalloc(sizeof(float) * (full + 1));
    attn_tensor to = view(ref.o, c->B, c->Hq, c->Nq, c->dv, c->bnhd), tl = attn_tensor_3d(ref.lse, c->B, c->Hq, c->Nq),
                tw = attn_tensor_4d(wref, c->B, c->Hq, c->Nq, c->Nk),
                tdq = view(ref.dq, c->B, c->Hq, c->Nq, c->d, c->bnhd),
                tdk = view(ref.dk, c->B, c->Hk, c->Nk, c->d, c->bnhd),
                tdv = view(ref.dv, c->B, c->Hk, c->Nk, c->dv, c->bnhd);
    size_t wsb = attn_sdpa_workspace_size(&in.tq, &in.tk, &in.tv);
    void *ws = xmalloc(wsb);
    CHECK_OK(attn_sdpa_forward(&in.tq, &in.tk, &in.tv, &in.p, &to, &tw, &tl, ws, wsb));
    CHECK_OK(attn_sdpa_backward(&in.tq, &in.tk, &in.tv, &in.p, &in.tgo, &tdq, &tdk, &tdv, ws, wsb));
    free(ws);
    printf("  %-24s", c->name);
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        fresult f;
        run_flash(c, &in, &f);
        double eo = rel_err_ff(f.o, ref.o, nq * c->dv), eq = rel_err_ff(f.dq, ref.dq, nq * c->d),
               ek = rel_err_ff(f.dk, ref.dk, nk * c->d), ev = rel_err_ff(f.dv, ref.dv, nk * c->dv);
        int lse_ok = 1;
        for (size_t i = 0; i < nq; i++) {
            if (isinf(ref.lse[i]))
                lse_ok &= isinf(f.lse[i]) && f.lse[i] < 0;
            else
                lse_ok &= fabsf(f.lse[i] - ref.lse[i]) <= 1e-5f * (1 + fabsf(ref.lse[i]));
        }
        CHECK(eo <= 1e-5, "%s [%s]: forward rel err %.3g", c->name, attn_isa_name((attn_isa)isa), eo);
        if (c->mag < 0) {
            /* Exactly one-hot rows at logits of -mag: the true dq, dk are ~0 (e^-huge), so their
             * relative error is meaningless; they must stay finite. dv = P^T dO must be exact: the
             * backward recomputes the row statistics instead of trusting the float lse, whose
             * rounding at 1e4 (6e-4) would otherwise show in P. */
            CHECK(isfinite(eq) && isfinite(ek) && ev <= 1e-4, "%s [%s]: backward dq %.3g dk %.3g dv %.3g", c->name,
                  attn_isa_name((attn_isa)isa), eq, ek, ev);
        } else {
            CHECK(eq <= 1e-4 && ek <= 1e-4 && ev <= 1e-4, "%s [%s]: backward rel err dq %.3g dk %.3g dv %.3g", c->name,
                  attn_isa_name((attn_isa)isa), eq, ek, ev);
        }
        CHECK(lse_ok, "%s [%s]: lse differs from the reference", c->name, attn_isa_name((attn_isa)isa));
        /* exact weights of a few rows from the fused path */
        if (c->Nq > 0 && c->Nk > 0) {
            const int64_t b = c->B - 1, h = c->Hq - 1, row0 = c->Nq / 3, rows = c->Nq - row0 < 5 ? c->Nq - row0 : 5;
            float *w = xmalloc(sizeof(float) * rows * c->Nk);
            CHECK_OK(attn_flash_weights(&in.tq, &in.tk, &in.p, b, h, row0, rows, 1, w));
            double ew = rel_err_ff(w, wref + (((size_t)b * c->Hq + h) * c->Nq + row0) * c->Nk, (size_t)(rows * c->Nk));
            CHECK(ew <= 1e-5, "%s [%s]: attn_flash_weights rel err %.3g", c->name, attn_isa_name((attn_isa)isa), ew);
            free(w);
        }
        printf("  %s: fwd %.1e bwd %.1e/%.1e/%.1e", attn_isa_name((attn_isa)isa), eo, eq, ek, ev);
        free_result(&f);
    }
    printf("\n");
    attn_force_isa(attn_detected_isa());
    free_result(&ref);
    free(wref);
    release(&in);
}

/* Bitwise identical results for 1..4 threads and between runs. The backward splits each
 * (batch, key/value head) along key blocks, so one key/value head at B=1 (MQA over a long context)
 * runs on every thread: those cases check the fixed-order reduction of the dQ shares. */
static void check_determinism_case(const fcase *c, test_rng *r, int max_threads) {
    finputs in;
    make(c, r, &in);
    const size_t nq = (size_t)c->B * c->Hq * c->Nq, nk = (size_t)c->B * c->Hk * c->Nk;
    fresult first;
    memset(&first, 0, sizeof first);
    for (int t = 1; t <= max_threads; t++) {
        attn_set_num_threads(t);
        fresult f;
        run_flash(c, &in, &f);
        if (t == 1) {
            first = f;
            continue;
        }
        CHECK(!memcmp(f.o, first.o, sizeof(float) * nq * c->dv) && !memcmp(f.lse, first.lse, sizeof(float) * nq) &&
                  !memcmp(f.dq, first.dq, sizeof(float) * nq * c->d) &&
                  !memcmp(f.dk, first.dk, sizeof(float) * nk * c->d) &&
                  !memcmp(f.dv, first.dv, sizeof(float) * nk * c->dv),
              "%s: flash results differ bitwise between 1 and %d threads", c->name, t);
        free_result(&f);
    }
    /* and for any run length of the backward's key pass (derived from the L2 unless forced):
     * runs of 1, 2 and 3 key blocks, on 1 and 3 threads (both task orders) */
    for (int64_t run = 1; run <= 3; run++)
        for (int t = 1; t <= 3; t += 2) {
            attn_set_num_threads(t);
            attn__flash_key_run_force(run);
            fresult f;
            run_flash(c, &in, &f);
            attn__flash_key_run_force(0);
            CHECK(!memcmp(f.dq, first.dq, sizeof(float) * nq * c->d) &&
                      !memcmp(f.dk, first.dk, sizeof(float) * nk * c->d) &&
                      !memcmp(f.dv, first.dv, sizeof(float) * nk * c->dv),
                  "%s: flash backward differs bitwise with key runs of %lld blocks on %d threads", c->name,
                  (long long)run, t);
            free_result(&f);
        }
    attn_set_num_threads(0);
    /* and between repeated runs */
    fresult again;
    run_flash(c, &in, &again);
    CHECK(!memcmp(again.dk, first.dk, sizeof(float) * nk * c->d) &&
              !memcmp(again.dq, first.dq, sizeof(float) * nq * c->d),
          "%s: flash backward differs between runs", c->name);
    free_result(&again);
    free_result(&first);
    attn_set_num_threads(0);
    release(&in);
}

static void check_determinism(test_rng *r) {
    static const fcase dc[] = {
        {"threads", 2, 4, 2, 150, 170, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 1, 0, 0, 0.1f, 0, 1, 0},
        {"B=1 Hk=1 causal", 1, 1, 1, 600, 600, 64, 64, ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
        {"B=1 Hk=1 MQA 3/1 dense", 1, 3, 1, 330, 410, 32, 32, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
        {"B=1 Hk=1 window + dropout",
         1,
         2,
         1,
         500,
         500,
         16,
         16,
         ATTN_CAUSAL_BOTTOM_RIGHT,
         130,
         0,
         0,
         0,
         1,
         0,
         0,
         0.2f,
         0,
         1,
         0},
        {"B=1 Hk=1 alibi [B,N,H,d]",
         1,
         2,
         1,
         260,
         260,
         16,
         16,
         ATTN_CAUSAL_TOP_LEFT,
         -1,
         -1,
         0,
         0,
         0,
         1,
         0,
         0,
         0,
         1,
         1},
    };
    for (size_t i = 0; i < sizeof dc / sizeof dc[0]; i++) check_determinism_case(&dc[i], r, i == 0 ? 4 : 3);
}

static void check_errors(void) {
    static float buf[8192];
    static char ws[1 << 20];
    attn_sdpa_params p = attn_sdpa_params_default();
    attn_tensor q = attn_tensor_4d(buf, 1, 2, 8, 8), k = attn_tensor_4d(buf, 1, 2, 8, 8),
                v = attn_tensor_4d(buf, 1, 2, 8, 8), o = attn_tensor_4d(buf + 4096, 1, 2, 8, 8),
                l = attn_tensor_3d(buf + 6000, 1, 2, 8);
    size_t need = attn_flash_workspace_size(&q, &k, &v);
    CHECK(need > 0 && need <= sizeof ws, "workspace size %zu", need);
    CHECK_OK(attn_flash_forward(&q, &k, &v, &p, &o, &l, ws, need));
    CHECK_STATUS(attn_flash_forward(&q, &k, &v, &p, &o, &l, ws, need - 1), ATTN_ERR_WORKSPACE);
    attn_tensor bad = attn_tensor_4d(buf, 1, 3, 8, 8);
    CHECK_STATUS(attn_flash_forward(&bad, &k, &v, &p, &o, &l, ws, need), ATTN_ERR_SHAPE);
    attn_tensor badl = attn_tensor_3d(buf, 1, 2, 9);
    CHECK_STATUS(attn_flash_forward(&q, &k, &v, &p, &o, &badl, ws, need), ATTN_ERR_SHAPE);
    attn_tensor dq = attn_tensor_4d(buf + 1000, 1, 2, 8, 8), dk = attn_tensor_4d(buf + 2000, 1, 2, 8, 8),
                dv = attn_tensor_4d(buf + 3000, 1, 2, 8, 8);
    CHECK_STATUS(attn_flash_backward(&q, &k, &v, &p, &o, &o, NULL, &dq, &dk, &dv, ws, need), ATTN_ERR_INVALID_ARGUMENT);
    attn_tensor dks = dk;
    dks.stride[3] = 2;
    dks.stride[2] = 16;
    CHECK_STATUS(attn_flash_backward(&q, &k, &v, &p, &o, &o, &l, &dq, &dks, &dv, ws, need), ATTN_ERR_UNSUPPORTED);
    float w[64];
    CHECK_STATUS(attn_flash_weights(&q, &k, &p, 0, 2, 0, 1, 0, w), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_flash_weights(&q, &k, &p, 0, 0, 7, 2, 0, w), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_flash_weights(&q, &k, &p, 0, 1, 7, 1, 0, w));
}

/* Work proportional to the unmasked area, and O(threads x tile) memory: a sliding window over
 * N = 65536 visits O(N w) tiles, causal about half of them, and the forward and backward of
 * B=1, H=8, N=65536, d=64 need far less than 64 MiB of workspace (a few tiles per thread and
 * 16 bytes per query row). The window run is executed
 * (H=1) and must not allocate from the heap. */
static void check_work_and_memory(test_rng *r) {
    const int64_t N = 65536, D = 64;
    attn_tensor q8 = attn_tensor_4d(NULL, 1, 8, N, D), k8 = attn_tensor_4d(NULL, 1, 8, N, D);
    attn_sdpa_params p = attn_sdpa_params_default();
    int64_t total = 0, dense = attn_flash_tile_count(&q8, &k8, &p, &total);
    CHECK(dense == total && total == 8 * (N / 64) * (N / 64), "dense tiles %lld of %lld", (long long)dense,
          (long long)total);
    p.causal = ATTN_CAUSAL_TOP_LEFT;
    int64_t causal = attn_flash_tile_count(&q8, &k8, &p, NULL);
    CHECK(causal == 8 * (N / 64) * (N / 64 + 1) / 2, "causal tiles %lld", (long long)causal);
    p.window_left = 256;
    int64_t window = attn_flash_tile_count(&q8, &k8, &p, NULL);
    CHECK(window <= 8 * (N / 64) * (256 / 64 + 2), "window 256 tiles %lld: not O(N w)", (long long)window);
    printf("  tiles for N=65536: dense %lld, causal %lld, causal window 256: %lld\n", (long long)dense,
           (long long)causal, (long long)window);
    /* tiles per thread, plus the backward's statistics: 16 bytes per query row (a quarter of a
     * float per element of dQ) and a counter per query block */
    const size_t rows_bytes = (size_t)8 * N * 16 + (size_t)8 * (N / 64) * 4;
    for (int t = 1; t <= 4; t++) {
        attn_set_num_threads(t);
        size_t ws = attn_flash_workspace_size(&q8, &k8, &k8);
        CHECK(ws > rows_bytes && ws - rows_bytes < (size_t)4 << 20,
              "workspace %zu bytes with %d threads (limit 4 MiB + %zu for the rows)", ws, t, rows_bytes);
    }
    attn_set_num_threads(0);

    /* run it: H=1, window 64 both sides, forward + backward, no heap growth inside the calls */
    const size_t n = (size_t)N * D;
    float *buf = xmalloc(sizeof(float) * (n * 8 + (size_t)N));
    fill_normal(r, buf, n * 4, 1);
    attn_tensor q = attn_tensor_4d(buf, 1, 1, N, D), k = attn_tensor_4d(buf + n, 1, 1, N, D),
                v = attn_tensor_4d(buf + 2 * n, 1, 1, N, D), go = attn_tensor_4d(buf + 3 * n, 1, 1, N, D),
                o = attn_tensor_4d(buf + 4 * n, 1, 1, N, D), dq = attn_tensor_4d(buf + 5 * n, 1, 1, N, D),
                dk = attn_tensor_4d(buf + 6 * n, 1, 1, N, D), dv = attn_tensor_4d(buf + 7 * n, 1, 1, N, D),
                l = attn_tensor_3d(buf + 8 * n, 1, 1, N);
    attn_sdpa_params pw = attn_sdpa_params_default();
    pw.window_left = pw.window_right = 64;
    size_t wsb = attn_flash_workspace_size(&q, &k, &v);
    void *ws = xmalloc(wsb);
    struct mallinfo2 before = mallinfo2();
    CHECK_OK(attn_flash_forward(&q, &k, &v, &pw, &o, &l, ws, wsb));
    CHECK_OK(attn_flash_backward(&q, &k, &v, &pw, &o, &go, &l, &dq, &dk, &dv, ws, wsb));
    struct mallinfo2 after = mallinfo2();
    CHECK(after.uordblks <= before.uordblks + ((size_t)1 << 20), "heap grew by %zu bytes during flash",
          after.uordblks - before.uordblks);
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(o.data[i]) && isfinite(dq.data[i]) && isfinite(dk.data[i]);
    CHECK(finite, "window run produced non-finite values");
    free(ws);
    free(buf);
}

/* The fast tile kernels (AVX2; AVX-512 with its 4- and 6-row register tiles, chosen per
 * microarchitecture) give bitwise the portable kernel's products, column maxima, accumulation and
 * row scaling, at every edge and for each layout of A (rows; down the columns of a score tile, which
 * they compile with constant strides; any other strides): each element is the same chain of FMAs. */
static void check_tile_kernels(test_rng *r) {
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    const attn_flash_kernels *ref = attn_flash_kernels_ref(), *fast[3] = {NULL, NULL, NULL};
    const char *names[3] = {"avx2", "avx512 4-row", "avx512 6-row"};
    if (attn_detected_isa() >= ATTN_ISA_AVX2)
        fast[0] = attn_flash_kernels_avx2();
    else
        printf("  (no AVX2 on this CPU: its tile kernel was not compared)\n");
    if (attn_detected_isa() >= ATTN_ISA_AVX512) {
        fast[1] = attn_flash_kernels_avx512_rows(4);
        fast[2] = attn_flash_kernels_avx512_rows(6);
        CHECK(fast[1] && fast[2] && !attn_flash_kernels_avx512_rows(5), "avx512 row tables");
    } else {
        printf("  (no AVX-512 on this CPU: its 4- and 6-row tile kernels were not compared)\n");
    }
    const int ms[] = {1, 3, 4, 5, 6, 7, 12, 13, 64}, ns[] = {1, 15, 16, 17, 40, 64, 65, 130}, ks[] = {1, 7, 64, 129};
    const size_t asz = 64 * 160 + 160 * 65; /* room for A down its columns with stride 65 */
    float *a = xmalloc(sizeof(float) * asz), *b = xmalloc(sizeof(float) * 160 * 140),
          *c0 = xmalloc(sizeof(float) * 64 * 140), *cr = xmalloc(sizeof(float) * 64 * 140),
          *c = xmalloc(sizeof(float) * 64 * 140), *rs = xmalloc(sizeof(float) * 64), *mr = xmalloc(sizeof(float) * 140),
          *mx = xmalloc(sizeof(float) * 140);
    int checked[3] = {0, 0, 0}, same[3] = {1, 1, 1};
    for (size_t im = 0; im < sizeof ms / sizeof ms[0]; im++)
        for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++)
            for (size_t ik = 0; ik < sizeof ks / sizeof ks[0]; ik++)
                for (int mode = 0; mode < 4; mode++) {
                    const int m = ms[im], n = ns[in], k = ks[ik];
                    /* mode 0: A rows contiguous, column maxima; 1: A down the columns of a score tile
                     * (P in P V: ars 1, acs ATTN_FLASH_BR), accumulate with row scales; 2: accumulate
                     * without scales; 3: A with other strides (ars 1, acs 65), row scales */
                    const int64_t ars = mode == 1 || mode == 3 ? 1 : 160, acs = mode == 1   ? ATTN_FLASH_BR
                                                                                : mode == 3 ? 65
                                                                                            : 1;
                    fill_normal(r, a, asz, 1.0);
                    fill_normal(r, b, 160 * 140, 1.0);
                    fill_normal(r, c0, 64 * 140, 1.0);
                    fill_normal(r, rs, 64, 1.0);
                    const float *rsp = mode == 1 || mode == 3 ? rs : NULL;
                    memcpy(cr, c0, sizeof(float) * 64 * 140);
                    for (int j = 0; j < 140; j++) mr[j] = -1.0f;
                    ref->gemm(m, n, k, a, ars, acs, b, 140, cr, 140, mode > 0, rsp, mode == 0 ? mr : NULL);
                    for (int t = 0; t < 3; t++) {
                        if (!fast[t]) continue;
                        memcpy(c, c0, sizeof(float) * 64 * 140);
                        for (int j = 0; j < 140; j++) mx[j] = -1.0f;
                        fast[t]->gemm(m, n, k, a, ars, acs, b, 140, c, 140, mode > 0, rsp, mode == 0 ? mx : NULL);
                        const int ok = !memcmp(c, cr, sizeof(float) * 64 * 140) && !memcmp(mx, mr, sizeof(float) * 140);
                        CHECK(ok, "%s tile kernel differs from the portable one at m %d n %d k %d mode %d", names[t], m,
                              n, k, mode);
                        same[t] &= ok;
                        checked[t]++;
                    }
                }
    for (int t = 0; t < 3; t++)
        if (fast[t] && same[t])
            printf("  %s tile kernel: bitwise the portable one on %d shapes\n", names[t], checked[t]);
    free(a), free(b), free(c0), free(cr), free(c), free(rs), free(mr), free(mx);
#else
    (void)r;
#endif
}

int main(void) {
    test_rng r = rng_seeded(7771);
    printf("flash attention against the reference (rel err fwd / dq / dk / dv per ISA):\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], &r);
    check_determinism(&r);
    check_tile_kernels(&r);
    check_work_and_memory(&r);
    check_errors();
    return test_summary("test_flash");
}
