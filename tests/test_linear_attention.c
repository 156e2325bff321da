/* Linear attention and Performer FAVOR+ ops (include/attn/linear_attention.h) against a float64
 * direct evaluation of their formula (O(N^2), no prefix sums, no stabilisers), gradients against
 * central differences of that float64 reference (full gradients on small shapes, directional ones
 * on the larger), causal / bottom-right / key masks / GQA / strided views, recurrent steps against
 * the causal parallel form, the ORF draw, Performer against exact softmax as m grows, thread-count
 * determinism and argument errors. */
#include "test_util.h"

typedef struct {
    const char *name;
    int64_t B, Hq, Hk, Nq, Nk, d, dv;
    attn_causal causal;
    int key_mask; /* 1: random hidden keys (each batch keeps key 0) */
    int strided;  /* [B, N, H, d] storage */
    int w_heads;  /* performer: 1 shared W or Hq */
} tcase;

static const tcase cases[] = {
    {"plain", 2, 2, 2, 50, 50, 16, 16, ATTN_CAUSAL_NONE, 0, 0, 1},
    {"causal, several chunks", 1, 2, 2, 150, 150, 16, 16, ATTN_CAUSAL_TOP_LEFT, 0, 0, 1},
    {"causal TL Nq>Nk", 1, 2, 2, 140, 70, 8, 8, ATTN_CAUSAL_TOP_LEFT, 0, 0, 1},
    {"causal BR Nq<Nk", 1, 2, 2, 70, 150, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 1},
    {"causal BR Nq>Nk", 1, 2, 2, 150, 70, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 1},
    {"key mask cross", 2, 2, 2, 60, 90, 16, 16, ATTN_CAUSAL_NONE, 1, 0, 1},
    {"key mask + causal", 2, 2, 2, 100, 100, 8, 8, ATTN_CAUSAL_TOP_LEFT, 1, 0, 1},
    {"GQA 4/2, d 8, dv 12, W per head", 1, 4, 2, 70, 70, 8, 12, ATTN_CAUSAL_TOP_LEFT, 0, 0, 4},
    {"[B,N,H,d] strides + mask + causal", 2, 2, 2, 80, 80, 16, 16, ATTN_CAUSAL_TOP_LEFT, 1, 1, 1},
    {"Nq=1 decode row", 2, 2, 2, 1, 90, 16, 16, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 1},
};

enum { KIND_LINEAR = 0, KIND_PERFORMER = 1 };
#define M_FEAT 32

/* ---- tensors ---- */

typedef struct {
    float *q, *k, *v, *go, *w; /* storage */
    uint8_t *km;
    attn_tensor tq, tk, tv, tgo;
    attn_btensor tkm;
    int64_t m;
} inputs;

static attn_tensor view4(float *data, int64_t B, int64_t H, int64_t N, int64_t d, int strided) {
    attn_tensor t = attn_tensor_4d(data, B, H, N, d);
    if (strided) {
        t.stride[0] = N * H * d;
        t.stride[1] = d;
        t.stride[2] = H * d;
        t.stride[3] = 1;
    }
    return t;
}

static double at(const attn_tensor *t, int64_t b, int64_t h, int64_t i, int64_t c) {
    return t->data[b * t->stride[0] + h * t->stride[1] + i * t->stride[2] + c * t->stride[3]];
}
static float *ptr(const attn_tensor *t, int64_t b, int64_t h, int64_t i, int64_t c) {
    return t->data + b * t->stride[0] + h * t->stride[1] + i * t->stride[2] + c * t->stride[3];
}

static void make_inputs(const tcase *tc, int kind, test_rng *rng, inputs *in) {
    const size_t nq = (size_t)(tc->B * tc->Hq * tc->Nq * tc->d), nk = (size_t)(tc->B * tc->Hk * tc->Nk * tc->d);
    const size_t nv = (size_t)(tc->B * tc->Hk * tc->Nk * tc->dv), no = (size_t)(tc->B * tc->Hq * tc->Nq * tc->dv);
    in->q = xmalloc(sizeof(float) * nq), in->k = xmalloc(sizeof(float) * (nk + 1));
    in->v = xmalloc(sizeof(float) * (nv + 1)), in->go = xmalloc(sizeof(float) * no);
    const double sc = kind == KIND_PERFORMER ? 0.5 : 1.0;
    fill_normal(rng, in->q, nq, sc), fill_normal(rng, in->k, nk, sc), fill_normal(rng, in->v, nv, 1.0);
    fill_normal(rng, in->go, no, 1.0);
    in->tq = view4(in->q, tc->B, tc->Hq, tc->Nq, tc->d, tc->strided);
    in->tk = view4(in->k, tc->B, tc->Hk, tc->Nk, tc->d, tc->strided);
    in->tv = view4(in->v, tc->B, tc->Hk, tc->Nk, tc->dv, tc->strided);
    in->tgo = view4(in->go, tc->B, tc->Hq, tc->Nq, tc->dv, tc->strided);
    in->km = xmalloc((size_t)(tc->B * tc->Nk + 1));
    for (int64_t i = 0; i < tc->B * tc->Nk; i++)
        in->km[i] = (uint8_t)(!tc->key_mask || i % tc->Nk == 0 || rng_uniform(rng) < 0.7);
    in->tkm = attn_btensor_2d(in->km, tc->B, tc->Nk);
    in->m = M_FEAT;
    in->w = xmalloc(sizeof(float) * (size_t)(tc->w_heads * M_FEAT * tc->d));
    for (int h = 0; h < tc->w_heads; h++) attn_orf_draw(in->w + h * M_FEAT * tc->d, M_FEAT, tc->d, rng_next(rng));
}

static void free_inputs(inputs *in) { free(in->q), free(in->k), free(in->v), free(in->go), free(in->km), free(in->w); }

/* ---- the float64 reference: the formula, directly ---- */

typedef struct {
    int kind;
    const tcase *tc;
    const float *w;
    int64_t m, w_heads;
} refctx;

/* phi(x) in double, no stabiliser (it cancels) */
static void phi_ref(const refctx *r, int64_t h, const double *x, double *f) {
    const int64_t d = r->tc->d;
    if (r->kind == KIND_LINEAR) {
        for (int64_t c = 0; c < d; c++) f[c] = x[c] > 0 ? x[c] + 1 : exp(x[c]);
        return;
    }
    const double s = pow((double)d, -0.25);
    double sq = 0;
    for (int64_t c = 0; c < d; c++) sq += x[c] * s * x[c] * s;
    const float *w = r->w + (r->w_heads > 1 ? h : 0) * r->m * d;
    for (int64_t j = 0; j < r->m; j++) {
        double dot = 0;
        for (int64_t c = 0; c < d; c++) dot += (double)w[j * d + c] * x[c] * s;
        f[j] = exp(dot - sq / 2) / sqrt((double)r->m);
    }
}

/* out [B, Hq, Nq, dv] (contiguous) from logical inputs q, k, v (contiguous double copies) */
static void ref_forward(const refctx *r, const double *q, const double *k, const double *v, const uint8_t *km,
                        double *out) {
    const tcase *tc = r->tc;
    const int64_t p = r->kind == KIND_LINEAR ? tc->d : r->m, g = tc->Hq / tc->Hk;
    const double eps = r->kind == KIND_LINEAR ? 1e-6 : 0.0;
    const int64_t off = tc->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? tc->Nk - tc->Nq : 0;
    double *fq = malloc(sizeof(double) * (size_t)p), *fk = malloc(sizeof(double) * (size_t)(tc->Nk * p));
    double *num = malloc(sizeof(double) * (size_t)tc->dv);
    for (int64_t b = 0; b < tc->B; b++)
        for (int64_t h = 0; h < tc->Hq; h++) {
            const int64_t hk = h / g;
            for (int64_t j = 0; j < tc->Nk; j++)
                phi_ref(r, h, k + ((b * tc->Hk + hk) * tc->Nk + j) * tc->d, fk + j * p);
            for (int64_t i = 0; i < tc->Nq; i++) {
                phi_ref(r, h, q + ((b * tc->Hq + h) * tc->Nq + i) * tc->d, fq);
                double den = 0;
                for (int64_t c = 0; c < tc->dv; c++) num[c] = 0;
                for (int64_t j = 0; j < tc->Nk; j++) {
                    if (tc->causal != ATTN_CAUSAL_NONE && j > i + off) continue;
                    if (km && !km[b * tc->Nk + j]) continue;
                    double a = 0;
                    for (int64_t c = 0; c < p; c++) a += fq[c] * fk[j * p + c];
                    den += a;
                    for (int64_t c = 0; c < tc->dv; c++) num[c] += a * v[((b * tc->Hk + hk) * tc->Nk + j) * tc->dv + c];
                }
                den += eps;
                for (int64_t c = 0; c < tc->dv; c++)
                    out[((b * tc->Hq + h) * tc->Nq + i) * tc->dv + c] = den != 0 ? num[c] / den : 0;
            }
        }
    free(fq), free(fk), free(num);
}

static double *logical(const attn_tensor *t) {
    const int64_t *s = t->shape;
    double *o = malloc(sizeof(double) * (size_t)(s[0] * s[1] * s[2] * s[3] + 1));
    for (int64_t b = 0; b < s[0]; b++)
        for (int64_t h = 0; h < s[1]; h++)
            for (int64_t i = 0; i < s[2]; i++)
                for (int64_t c = 0; c < s[3]; c++) o[((b * s[1] + h) * s[2] + i) * s[3] + c] = at(t, b, h, i, c);
    return o;
}

/* L = sum go . out_ref */
static double ref_loss(const refctx *r, const double *q, const double *k, const double *v, const uint8_t *km,
                       const double *go, size_t no, double *scratch) {
    ref_forward(r, q, k, v, km, scratch);
    double s = 0;
    for (size_t i = 0; i < no; i++) s += go[i] * scratch[i];
    return s;
}

/* ---- calling the ops ---- */

static attn_status op_forward(int kind, const inputs *in, const tcase *tc, const attn_tensor *w, attn_tensor *out) {
    const attn_btensor *km = tc->key_mask ? &in->tkm : NULL;
    const size_t wsb = kind == KIND_LINEAR ? attn_linear_attention_workspace_size(&in->tq, &in->tk, &in->tv)
                                           : attn_performer_workspace_size(&in->tq, &in->tk, &in->tv, w);
    void *ws = xmalloc(wsb);
    attn_status st = kind == KIND_LINEAR
                         ? attn_linear_attention_forward(&in->tq, &in->tk, &in->tv, tc->causal, km, out, ws, wsb)
                         : attn_performer_forward(&in->tq, &in->tk, &in->tv, w, tc->causal, km, out, ws, wsb);
    free(ws);
    return st;
}

static attn_status op_backward(int kind, const inputs *in, const tcase *tc, const attn_tensor *w, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv) {
    const attn_btensor *km = tc->key_mask ? &in->tkm : NULL;
    const size_t wsb = kind == KIND_LINEAR ? attn_linear_attention_workspace_size(&in->tq, &in->tk, &in->tv)
                                           : attn_performer_workspace_size(&in->tq, &in->tk, &in->tv, w);
    void *ws = xmalloc(wsb);
    attn_status st =
        kind == KIND_LINEAR
            ? attn_linear_attention_backward(&in->tq, &in->tk, &in->tv, tc->causal, km, &in->tgo, dq, dk, dv, ws, wsb)
            : attn_performer_backward(&in->tq, &in->tk, &in->tv, w, tc->causal, km, &in->tgo, dq, dk, dv, ws, wsb);
    free(ws);
    return st;
}

static const char *kname(int kind) { return kind == KIND_LINEAR ? "linear" : "performer"; }

static void test_case(int kind, const tcase *tc, int full_grad) {
    test_rng rng = rng_seeded(1000 + (uint64_t)(tc - cases) * 7 + (uint64_t)kind);
    inputs in;
    make_inputs(tc, kind, &rng, &in);
    attn_tensor w = attn_tensor_3d(in.w, tc->w_heads, M_FEAT, tc->d);
    refctx r = {kind, tc, in.w, M_FEAT, tc->w_heads};
    const size_t no = (size_t)(tc->B * tc->Hq * tc->Nq * tc->dv);
    float *o = xmalloc(sizeof(float) * no);
    attn_tensor to = view4(o, tc->B, tc->Hq, tc->Nq, tc->dv, tc->strided);
    for (size_t i = 0; i < no; i++) o[i] = NAN;
    CHECK_OK(op_forward(kind, &in, tc, &w, &to));
    double *q = logical(&in.tq), *k = logical(&in.tk), *v = logical(&in.tv), *go = logical(&in.tgo);
    double *ref = malloc(sizeof(double) * no), *scr = malloc(sizeof(double) * no);
    const uint8_t *km = tc->key_mask ? in.km : NULL;
    ref_forward(&r, q, k, v, km, ref);
    float *ol = xmalloc(sizeof(float) * no);
    {
        double *tmp = logical(&to);
        for (size_t i = 0; i < no; i++) ol[i] = (float)tmp[i];
        free(tmp);
    }
    const double ef = rel_err_fd(ol, ref, no);
    CHECK(ef <= 1e-5, "%s '%s': forward vs float64 reference %.3g", kname(kind), tc->name, ef);

    /* gradients */
    const size_t nq = (size_t)(tc->B * tc->Hq * tc->Nq * tc->d), nk = (size_t)(tc->B * tc->Hk * tc->Nk * tc->d);
    const size_t nv = (size_t)(tc->B * tc->Hk * tc->Nk * tc->dv);
    float *gq = xmalloc(sizeof(float) * nq), *gk = xmalloc(sizeof(float) * (nk + 1)),
          *gv = xmalloc(sizeof(float) * (nv + 1));
    attn_tensor tgq = view4(gq, tc->B, tc->Hq, tc->Nq, tc->d, tc->strided);
    attn_tensor tgk = view4(gk, tc->B, tc->Hk, tc->Nk, tc->d, tc->strided);
    attn_tensor tgv = view4(gv, tc->B, tc->Hk, tc->Nk, tc->dv, tc->strided);
    for (size_t i = 0; i < nq; i++) gq[i] = NAN;
    for (size_t i = 0; i < nk; i++) gk[i] = NAN;
    for (size_t i = 0; i < nv; i++) gv[i] = NAN;
    CHECK_OK(op_backward(kind, &in, tc, &w, &tgq, &tgk, &tgv));
    double *lg[3] = {logical(&tgq), logical(&tgk), logical(&tgv)};
    double *xs[3] = {q, k, v};
    const size_t ns[3] = {nq, nk, nv};
    const char *nm[3] = {"dq", "dk", "dv"};
    double worst = 0;
    for (int t = 0; t < 3; t++) {
        if (!ns[t]) continue;
        if (full_grad) { /* every component by central differences of the float64 reference */
            double *fd = malloc(sizeof(double) * ns[t]);
            for (size_t i = 0; i < ns[t]; i++) {
                const double x0 = xs[t][i], hh = 1e-5;
                xs[t][i] = x0 + hh;
                const double lp = ref_loss(&r, q, k, v, km, go, no, scr);
                xs[t][i] = x0 - hh;
                const double lm = ref_loss(&r, q, k, v, km, go, no, scr);
                xs[t][i] = x0;
                fd[i] = (lp - lm) / (2 * hh);
            }
            float *gf = xmalloc(sizeof(float) * ns[t]);
            for (size_t i = 0; i < ns[t]; i++) gf[i] = (float)lg[t][i];
            const double e = rel_err_fd(gf, fd, ns[t]);
            CHECK(e <= 1e-4, "%s '%s': %s vs float64 central differences %.3g", kname(kind), tc->name, nm[t], e);
            worst = e > worst ? e : worst;
            free(fd), free(gf);
        }
        for (int rep = 0; rep < 2; rep++) { /* directional */
            double *dir = malloc(sizeof(double) * ns[t]), *xp = malloc(sizeof(double) * ns[t]);
            double an = 0, sumsq = 0;
            for (size_t i = 0; i < ns[t]; i++) {
                dir[i] = rng_normal(&rng);
                const double c = dir[i] * lg[t][i];
                an += c, sumsq += c * c;
            }
            const double hh = 1e-4;
            double *save = xs[t];
            for (size_t i = 0; i < ns[t]; i++) xp[i] = save[i] + hh * dir[i];
            xs[t] = xp;
            const double lp = ref_loss(&r, xs[0], xs[1], xs[2], km, go, no, scr);
            for (size_t i = 0; i < ns[t]; i++) xp[i] = save[i] - hh * dir[i];
            const double lm = ref_loss(&r, xs[0], xs[1], xs[2], km, go, no, scr);
            xs[t] = save;
            const double fd = (lp - lm) / (2 * hh), scale = fmax(fabs(fd), sqrt(sumsq));
            const double e = fabs(fd - an) / scale;
            CHECK(e <= 1e-4 && isfinite(an), "%s '%s': directional %s: analytic %.8g, differences %.8g (rel %.3g)",
                  kname(kind), tc->name, nm[t], an, fd, e);
            worst = e > worst ? e : worst;
            free(dir), free(xp);
        }
    }
    /* hidden keys get no gradient */
    if (tc->key_mask)
        for (int64_t b = 0; b < tc->B; b++)
            for (int64_t j = 0; j < tc->Nk; j++)
                if (!in.km[b * tc->Nk + j])
                    CHECK(at(&tgk, b, 0, j, 0) == 0 && at(&tgv, b, 0, j, 0) == 0, "hidden key %lld has a gradient",
                          (long long)j);
    printf("  %-9s %-36s forward %.2e, gradients %.2e%s\n", kname(kind), tc->name, ef, worst,
           full_grad ? " (full)" : "");
    for (int t = 0; t < 3; t++) free(lg[t]);
    free(q), free(k), free(v), free(go), free(ref), free(scr), free(o), free(ol), free(gq), free(gk), free(gv);
    free_inputs(&in);
}

/* Full-gradient checks on small shapes. */
static void test_small_full(void) {
    static const tcase small[] = {
        {"small", 1, 2, 2, 9, 11, 4, 3, ATTN_CAUSAL_NONE, 0, 0, 1},
        {"small causal + mask", 2, 2, 1, 10, 10, 4, 5, ATTN_CAUSAL_TOP_LEFT, 1, 1, 2},
    };
    for (int kind = 0; kind < 2; kind++)
        for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) test_case(kind, &small[i], 1);
}

/* ---- recurrent steps ---- */

static attn_status do_step(int kind, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                           const attn_tensor *w, int causal, const attn_btensor *km, float *state, attn_tensor *out) {
    const size_t wsb = kind == KIND_LINEAR ? attn_linear_attention_step_workspace_size(q, k, v)
                                           : attn_performer_step_workspace_size(q, k, v, w);
    void *ws = xmalloc(wsb ? wsb : 1);
    attn_status st = kind == KIND_LINEAR ? attn_linear_attention_step(q, k, v, causal, km, state, out, ws, wsb)
                                         : attn_performer_step(q, k, v, w, causal, km, state, out, ws, wsb);
    free(ws);
    return st;
}

static attn_tensor rows(const attn_tensor *t, int64_t i0, int64_t n) {
    attn_tensor r = *t;
    r.data += i0 * t->stride[2];
    r.shape[2] = n;
    return r;
}

static void test_steps(int kind, int masked) {
    const tcase tc = {"steps", 2, 2, 2, 70, 70, 16, 12, ATTN_CAUSAL_TOP_LEFT, masked, 1, 2};
    test_rng rng = rng_seeded(3000 + (uint64_t)kind * 2 + (uint64_t)masked);
    inputs in;
    make_inputs(&tc, kind, &rng, &in);
    attn_tensor w = attn_tensor_3d(in.w, tc.w_heads, M_FEAT, tc.d);
    const size_t no = (size_t)(tc.B * tc.Hq * tc.Nq * tc.dv);
    float *full = xmalloc(sizeof(float) * no), *st = xmalloc(sizeof(float) * no);
    attn_tensor tf = view4(full, tc.B, tc.Hq, tc.Nq, tc.dv, 1), ts = view4(st, tc.B, tc.Hq, tc.Nq, tc.dv, 1);
    CHECK_OK(op_forward(kind, &in, &tc, &w, &tf));
    const size_t sf = kind == KIND_LINEAR ? attn_linear_attention_state_floats(tc.d, tc.dv)
                                          : attn_performer_state_floats(M_FEAT, tc.dv);
    CHECK(sf == (size_t)(kind == KIND_LINEAR ? tc.d * tc.dv + tc.d : M_FEAT * tc.dv + M_FEAT + 2), "state floats %zu",
          sf);
    float *state = xmalloc(sizeof(float) * sf * (size_t)(tc.B * tc.Hq));
    const int64_t chunks[2] = {1, 16};
    for (int c = 0; c < 2; c++) {
        memset(state, 0, sizeof(float) * sf * (size_t)(tc.B * tc.Hq));
        for (size_t i = 0; i < no; i++) st[i] = NAN;
        for (int64_t i0 = 0; i0 < tc.Nq; i0 += chunks[c]) {
            const int64_t n = i0 + chunks[c] <= tc.Nq ? chunks[c] : tc.Nq - i0;
            attn_tensor q = rows(&in.tq, i0, n), k = rows(&in.tk, i0, n), v = rows(&in.tv, i0, n), o = rows(&ts, i0, n);
            attn_btensor km = in.tkm;
            km.data += i0 * km.stride[1];
            km.shape[1] = n;
            CHECK_OK(do_step(kind, &q, &k, &v, &w, 1, masked ? &km : NULL, state, &o));
        }
        const double e = rel_err_ff(st, full, no);
        CHECK(e <= 1e-5, "%s steps of %lld (mask %d) vs causal parallel form: %.3g", kname(kind), (long long)chunks[c],
              masked, e);
        printf("  %-9s steps of %2lld%s vs causal parallel: %.2e\n", kname(kind), (long long)chunks[c],
               masked ? " + key mask" : "", e);
    }
    /* a cross-attention memory: absorb k / v, then non-causal queries = the non-causal forward */
    memset(state, 0, sizeof(float) * sf * (size_t)(tc.B * tc.Hq));
    CHECK_OK(do_step(kind, NULL, &in.tk, &in.tv, &w, 0, masked ? &in.tkm : NULL, state, NULL));
    for (size_t i = 0; i < no; i++) st[i] = NAN;
    CHECK_OK(do_step(kind, &in.tq, NULL, NULL, &w, 0, NULL, state, &ts));
    tcase nc = tc;
    nc.causal = ATTN_CAUSAL_NONE;
    CHECK_OK(op_forward(kind, &in, &nc, &w, &tf));
    const double e = rel_err_ff(st, full, no);
    CHECK(e <= 1e-5, "%s memory fill + queries vs non-causal forward: %.3g", kname(kind), e);
    /* errors */
    CHECK_STATUS(do_step(kind, NULL, NULL, NULL, &w, 0, NULL, state, NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_tensor q1 = rows(&in.tq, 0, 1);
    CHECK_STATUS(do_step(kind, &q1, &in.tk, &in.tv, &w, 0, NULL, state, NULL), ATTN_ERR_INVALID_ARGUMENT);
    free(full), free(st), free(state);
    free_inputs(&in);
}

/* ---- ORF ---- */

static void test_orf(void) {
    const int64_t d = 16, m = 3 * d + 5;
    float *w = xmalloc(sizeof(float) * (size_t)(m * d)), *w2 = xmalloc(sizeof(float) * (size_t)(m * d));
    test_rng rng = rng_seeded(77);
    const uint64_t seed = rng_next(&rng);
    CHECK_OK(attn_orf_draw(w, m, d, seed));
    CHECK_OK(attn_orf_draw(w2, m, d, seed));
    CHECK(!memcmp(w, w2, sizeof(float) * (size_t)(m * d)), "same seed, different W");
    CHECK_OK(attn_orf_draw(w2, m, d, seed + 1));
    CHECK(memcmp(w, w2, sizeof(float) * (size_t)(m * d)) != 0, "a new seed redraws nothing");
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = i + 1; j < m && j / d == i / d; j++) {
            double dot = 0, ni = 0, nj = 0;
            for (int64_t c = 0; c < d; c++)
                dot += (double)w[i * d + c] * w[j * d + c], ni += (double)w[i * d + c] * w[i * d + c],
                    nj += (double)w[j * d + c] * w[j * d + c];
            const double cs = fabs(dot) / sqrt(ni * nj);
            worst = cs > worst ? cs : worst;
        }
    CHECK(worst <= 1e-5, "rows of a block not orthogonal: |cos| %.3g", worst);
    /* norms: chi(d), mean sqrt(2) Gamma((d + 1) / 2) / Gamma(d / 2), E[norm^2] = d */
    const int draws = 200;
    double s1 = 0, s2 = 0;
    int64_t cnt = 0;
    for (int t = 0; t < draws; t++) {
        CHECK_OK(attn_orf_draw(w2, d, d, rng_next(&rng)));
        for (int64_t i = 0; i < d; i++) {
            double nn = 0;
            for (int64_t c = 0; c < d; c++) nn += (double)w2[i * d + c] * w2[i * d + c];
            s1 += sqrt(nn), s2 += nn, cnt++;
        }
    }
    const double mean = s1 / (double)cnt, msq = s2 / (double)cnt;
    const double want = sqrt(2.0) * exp(lgamma((d + 1) / 2.0) - lgamma(d / 2.0));
    const double sd = sqrt(d - want * want) / sqrt((double)cnt);
    CHECK(fabs(mean - want) <= 5 * sd, "mean ORF row norm %.4f, chi(%lld) mean %.4f (sd of mean %.4f)", mean,
          (long long)d, want, sd);
    CHECK(fabs(msq - d) <= 0.05 * d, "mean squared norm %.3f, want %lld", msq, (long long)d);
    printf("  ORF d=%lld: block |cos| <= %.1e, mean norm %.4f (chi mean %.4f), mean norm^2 %.3f\n", (long long)d, worst,
           mean, want, msq);
    CHECK_STATUS(attn_orf_draw(w, 0, d, 1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_orf_draw(NULL, m, d, 1), ATTN_ERR_INVALID_ARGUMENT);
    free(w), free(w2);
}

/* ---- Performer vs exact softmax ---- */

static void test_performer_vs_softmax(void) {
    const int64_t B = 1, H = 2, N = 64, d = 16, ms[3] = {64, 256, 1024};
    test_rng rng = rng_seeded(555);
    const size_t n = (size_t)(B * H * N * d);
    float *q = xmalloc(sizeof(float) * n), *k = xmalloc(sizeof(float) * n), *v = xmalloc(sizeof(float) * n);
    float *ex = xmalloc(sizeof(float) * n), *ap = xmalloc(sizeof(float) * n);
    fill_normal(&rng, q, n, 0.5), fill_normal(&rng, k, n, 0.5), fill_normal(&rng, v, n, 1.0);
    attn_tensor tq = attn_tensor_4d(q, B, H, N, d), tk = attn_tensor_4d(k, B, H, N, d),
                tv = attn_tensor_4d(v, B, H, N, d);
    attn_tensor te = attn_tensor_4d(ex, B, H, N, d), ta = attn_tensor_4d(ap, B, H, N, d);
    const attn_sdpa_params p = attn_sdpa_params_default(); /* scale 1 / sqrt(d) */
    const size_t sw = attn_sdpa_workspace_size(&tq, &tk, &tv);
    void *sws = xmalloc(sw);
    CHECK_OK(attn_sdpa_forward(&tq, &tk, &tv, &p, &te, NULL, NULL, sws, sw));
    double err[3];
    const int draws = 6;
    for (int mi = 0; mi < 3; mi++) {
        float *w = xmalloc(sizeof(float) * (size_t)(ms[mi] * d));
        attn_tensor tw = attn_tensor_3d(w, 1, ms[mi], d);
        const size_t wsb = attn_performer_workspace_size(&tq, &tk, &tv, &tw);
        void *ws = xmalloc(wsb);
        err[mi] = 0;
        for (int t = 0; t < draws; t++) {
            CHECK_OK(attn_orf_draw(w, ms[mi], d, 1000 + (uint64_t)t));
            CHECK_OK(attn_performer_forward(&tq, &tk, &tv, &tw, ATTN_CAUSAL_NONE, NULL, &ta, ws, wsb));
            err[mi] += rel_err_ff(ap, ex, n) / draws;
        }
        free(w), free(ws);
    }
    CHECK(err[1] < err[0] && err[2] < err[1], "Performer error vs softmax does not fall with m: %.3g %.3g %.3g", err[0],
          err[1], err[2]);
    CHECK(err[2] < 0.7 * err[0], "m = 1024: error %.3g, m = 64: %.3g", err[2], err[0]);
    printf("  performer vs exact softmax (rel err, mean of %d draws): m=64 %.3f, m=256 %.3f, m=1024 %.3f\n", draws,
           err[0], err[1], err[2]);
    free(q), free(k), free(v), free(ex), free(ap), free(sws);
}

/* ---- determinism over thread counts, argument errors ---- */

static void test_threads_and_errors(void) {
    const tcase tc0 = {"threads", 2, 3, 3, 130, 130, 16, 16, ATTN_CAUSAL_TOP_LEFT, 1, 0, 1};
    for (int kc = 0; kc < 4; kc++) { /* both kinds, causal then not (the non-causal backward reuses states) */
        const int kind = kc % 2;
        tcase tc = tc0;
        if (kc >= 2) tc.causal = ATTN_CAUSAL_NONE;
        test_rng rng = rng_seeded(4242 + (uint64_t)kind);
        inputs in;
        make_inputs(&tc, kind, &rng, &in);
        attn_tensor w = attn_tensor_3d(in.w, 1, M_FEAT, tc.d);
        const size_t no = (size_t)(tc.B * tc.Hq * tc.Nq * tc.dv), nq = no;
        float *o[2], *g[2];
        for (int t = 0; t < 2; t++) {
            attn_set_num_threads(t + 1);
            o[t] = xmalloc(sizeof(float) * no), g[t] = xmalloc(sizeof(float) * 3 * nq);
            attn_tensor to = view4(o[t], tc.B, tc.Hq, tc.Nq, tc.dv, 0);
            attn_tensor gq = view4(g[t], tc.B, tc.Hq, tc.Nq, tc.d, 0),
                        gk = view4(g[t] + nq, tc.B, tc.Hq, tc.Nq, tc.d, 0),
                        gv = view4(g[t] + 2 * nq, tc.B, tc.Hq, tc.Nq, tc.dv, 0);
            CHECK_OK(op_forward(kind, &in, &tc, &w, &to));
            CHECK_OK(op_backward(kind, &in, &tc, &w, &gq, &gk, &gv));
        }
        attn_set_num_threads(0);
        CHECK(!memcmp(o[0], o[1], sizeof(float) * no) && !memcmp(g[0], g[1], sizeof(float) * 3 * nq),
              "%s: 1 and 2 threads differ", kname(kind));
        /* errors name the argument */
        attn_tensor to = view4(o[0], tc.B, tc.Hq, tc.Nq, tc.dv, 0), bad = to;
        bad.shape[2] = tc.Nq - 1;
        const size_t wsb = attn_performer_workspace_size(&in.tq, &in.tk, &in.tv, &w);
        void *ws = xmalloc(wsb);
        CHECK_STATUS(attn_performer_forward(&in.tq, &in.tk, &in.tv, &w, 0, NULL, &bad, ws, wsb), ATTN_ERR_SHAPE);
        CHECK(strstr(attn_last_error(), "out") != NULL, "message names out: %s", attn_last_error());
        CHECK_STATUS(attn_linear_attention_forward(&in.tq, &in.tk, &in.tv, 0, NULL, &bad, ws, wsb), ATTN_ERR_SHAPE);
        attn_tensor bw = attn_tensor_3d(in.w, 1, M_FEAT, tc.d - 1);
        CHECK_STATUS(attn_performer_forward(&in.tq, &in.tk, &in.tv, &bw, 0, NULL, &to, ws, wsb), ATTN_ERR_SHAPE);
        CHECK(strstr(attn_last_error(), "w has shape") != NULL, "message names w: %s", attn_last_error());
        attn_btensor bk = attn_btensor_2d(in.km, tc.B, tc.Nk - 1);
        CHECK_STATUS(attn_performer_forward(&in.tq, &in.tk, &in.tv, &w, 0, &bk, &to, ws, wsb), ATTN_ERR_SHAPE);
        CHECK(strstr(attn_last_error(), "key_mask") != NULL, "message names key_mask: %s", attn_last_error());
        CHECK_STATUS(attn_performer_forward(&in.tq, &in.tk, &in.tv, &w, 0, NULL, &to, ws, 16), ATTN_ERR_WORKSPACE);
        CHECK_STATUS(attn_linear_attention_forward(&in.tq, &in.tk, &in.tv, (attn_causal)7, NULL, &to, ws, wsb),
                     ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_performer_forward(&in.tq, &in.tk, &in.tv, NULL, 0, NULL, &to, ws, wsb),
                     ATTN_ERR_INVALID_ARGUMENT);
        free(ws);
        for (int t = 0; t < 2; t++) free(o[t]), free(g[t]);
        free_inputs(&in);
    }
}

/* attn_performer_features matches the reference features up to the stabiliser (a per-row /
 * per-(b, h) constant factor). */
static void test_features(void) {
    const tcase tc = {"features", 2, 2, 2, 20, 20, 8, 8, ATTN_CAUSAL_NONE, 1, 1, 2};
    test_rng rng = rng_seeded(9);
    inputs in;
    make_inputs(&tc, KIND_PERFORMER, &rng, &in);
    attn_tensor w = attn_tensor_3d(in.w, 2, M_FEAT, tc.d);
    const size_t n = (size_t)(tc.B * tc.Hq * tc.Nq * M_FEAT);
    float *f = xmalloc(sizeof(float) * n);
    attn_tensor tf = attn_tensor_4d(f, tc.B, tc.Hq, tc.Nq, M_FEAT);
    refctx r = {KIND_PERFORMER, &tc, in.w, M_FEAT, 2};
    for (int isq = 0; isq < 2; isq++) {
        CHECK_OK(attn_performer_features(isq ? &in.tq : &in.tk, &w, isq, isq ? NULL : &in.tkm, &tf));
        double worst = 0;
        double x[8], fr[M_FEAT];
        for (int64_t b = 0; b < tc.B; b++)
            for (int64_t h = 0; h < tc.Hq; h++) {
                double ratio = 0; /* keys: one factor per (b, h) */
                for (int64_t i = 0; i < tc.Nq; i++) {
                    for (int64_t c = 0; c < tc.d; c++) x[c] = at(isq ? &in.tq : &in.tk, b, h, i, c);
                    phi_ref(&r, h, x, fr);
                    const int hidden = !isq && !in.km[b * tc.Nk + i];
                    if (isq) ratio = 0;
                    for (int64_t j = 0; j < M_FEAT; j++) {
                        const double got = *ptr(&tf, b, h, i, j);
                        if (hidden) {
                            worst = fmax(worst, fabs(got));
                            continue;
                        }
                        if (ratio == 0) ratio = got / fr[j];
                        worst = fmax(worst, fabs(got - ratio * fr[j]) / (ratio * fr[j]));
                    }
                }
            }
        CHECK(worst <= 1e-5, "performer features (%s) vs reference up to the stabiliser: %.3g",
              isq ? "queries" : "keys", worst);
    }
    free(f);
    free_inputs(&in);
}

int main(void) {
    for (int kind = 0; kind < 2; kind++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(kind, &cases[i], 0);
    test_small_full();
    for (int kind = 0; kind < 2; kind++)
        for (int masked = 0; masked < 2; masked++) test_steps(kind, masked);
    test_orf();
    test_performer_vs_softmax();
    test_threads_and_errors();
    test_features();
    return test_summary("test_linear_attention");
}
