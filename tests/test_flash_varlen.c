/* Variable-length flash attention (attn_flash_varlen_*): every packed sequence's output, lse and
 * gradients equal (memcmp) its batch-1 run through attn_flash_forward / attn_flash_backward, for
 * every option and both element types on every ISA row; the fp32 output against a float64 direct
 * evaluation, the gradients against finite differences of it; thread-count independence; hostile
 * cu_seqlens refused. */
#include "test_util.h"

#define HQ 4
#define HK 2
#define D 32
#define DV 24

typedef struct vcase {
    const char *name;
    attn_causal causal;
    int64_t wl, wr;
    int alibi;
    float softcap, p;
} vcase;

static const float slopes[HQ] = {0.5f, 0.25f, 0.125f, 0.0625f};

/* A packed batch: lengths, prefix sums, f32 data and its bf16 copies. */
typedef struct packed {
    int64_t batch, cq[16], ck[16];
    float *q, *k, *v, *g; /* g: the upstream gradient dout */
    uint16_t *qh, *kh, *vh, *gh;
} packed;

static uint16_t *to_bf16(const float *x, size_t n) {
    uint16_t *h = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = attn_f32_to_bf16(x[i]);
    return h;
}

static void make(packed *P, test_rng *r, int64_t batch, const int64_t *lq, const int64_t *lk) {
    P->batch = batch;
    P->cq[0] = P->ck[0] = 0;
    for (int64_t s = 0; s < batch; s++) {
        P->cq[s + 1] = P->cq[s] + lq[s];
        P->ck[s + 1] = P->ck[s] + lk[s];
    }
    const size_t tq = (size_t)P->cq[batch], tk = (size_t)P->ck[batch];
    P->q = malloc(sizeof(float) * (tq * HQ * D + 1));
    P->k = malloc(sizeof(float) * (tk * HK * D + 1));
    P->v = malloc(sizeof(float) * (tk * HK * DV + 1));
    P->g = malloc(sizeof(float) * (tq * HQ * DV + 1));
    fill_normal(r, P->q, tq * HQ * D, 1.0);
    fill_normal(r, P->k, tk * HK * D, 1.0);
    fill_normal(r, P->v, tk * HK * DV, 1.0);
    fill_normal(r, P->g, tq * HQ * DV, 1.0);
    P->qh = to_bf16(P->q, tq * HQ * D);
    P->kh = to_bf16(P->k, tk * HK * D);
    P->vh = to_bf16(P->v, tk * HK * DV);
    P->gh = to_bf16(P->g, tq * HQ * DV);
}

static void release(packed *P) {
    free(P->q), free(P->k), free(P->v), free(P->g);
    free(P->qh), free(P->kh), free(P->vh), free(P->gh);
}

static attn_tensor view3(void *data, attn_type t, int64_t n0, int64_t n1, int64_t n2) {
    attn_tensor x = attn_tensor_4d_typed(data, t, n0, n1, n2, 1);
    x.rank = 3;
    return x;
}

static attn_sdpa_params params_of(const vcase *c) {
    attn_sdpa_params p = attn_sdpa_params_default();
    p.causal = c->causal;
    p.window_left = c->wl;
    p.window_right = c->wr;
    p.alibi_slopes = c->alibi ? slopes : NULL;
    p.softcap = c->softcap;
    p.dropout_p = c->p;
    p.dropout_seed = 1234;
    p.dropout_offset = 77;
    return p;
}

/* Results in packed layout: out, dq [total_q, HQ, *], lse [HQ, total_q], dk, dv [total_k, HK, *]. */
typedef struct result {
    float *o, *lse, *dq, *dk, *dv;
} result;

static void alloc_result(result *R, size_t tq, size_t tk) {
    R->o = calloc(tq * HQ * DV + 1, sizeof(float));
    R->lse = calloc(tq * HQ + 1, sizeof(float));
    R->dq = calloc(tq * HQ * D + 1, sizeof(float));
    R->dk = calloc(tk * HK * D + 1, sizeof(float));
    R->dv = calloc(tk * HK * DV + 1, sizeof(float));
}
static void free_result(result *R) { free(R->o), free(R->lse), free(R->dq), free(R->dk), free(R->dv); }

static void run_varlen(const packed *P, const attn_sdpa_params *p, int bf, result *R) {
    const int64_t tq = P->cq[P->batch], tk = P->ck[P->batch];
    const attn_type t = bf ? ATTN_TYPE_BF16 : ATTN_TYPE_F32;
    alloc_result(R, (size_t)tq, (size_t)tk);
    attn_tensor q = view3(bf ? (void *)P->qh : P->q, t, tq, HQ, D), k = view3(bf ? (void *)P->kh : P->k, t, tk, HK, D);
    attn_tensor v = view3(bf ? (void *)P->vh : P->v, t, tk, HK, DV),
                g = view3(bf ? (void *)P->gh : P->g, t, tq, HQ, DV);
    attn_tensor o = view3(R->o, ATTN_TYPE_F32, tq, HQ, DV), lse = attn_tensor_2d(R->lse, HQ, tq);
    attn_tensor dq = view3(R->dq, ATTN_TYPE_F32, tq, HQ, D), dk = view3(R->dk, ATTN_TYPE_F32, tk, HK, D),
                dv = view3(R->dv, ATTN_TYPE_F32, tk, HK, DV);
    const size_t wsb = attn_flash_varlen_workspace_size(&q, &k, &v, P->cq, P->ck, P->batch);
    CHECK(wsb > 0 && wsb != SIZE_MAX, "varlen workspace size %zu: %s", wsb, attn_last_error());
    void *ws = malloc(wsb ? wsb : 1);
    CHECK_OK(attn_flash_varlen_forward(&q, &k, &v, P->cq, P->ck, P->batch, p, &o, &lse, ws, wsb));
    CHECK_OK(attn_flash_varlen_backward(&q, &k, &v, P->cq, P->ck, P->batch, p, &o, &g, &lse, &dq, &dk, &dv, ws, wsb));
    free(ws);
}

/* Rows [start, start + n) of packed x [total, H, W] into [H, n, W]. */
static void gather(const void *x, size_t esz, int64_t start, int64_t n, int64_t H, int64_t W, void *dst) {
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < n; i++)
            memcpy((char *)dst + ((h * n + i) * W) * (int64_t)esz,
                   (const char *)x + (((start + i) * H + h) * W) * (int64_t)esz, esz * (size_t)W);
}

static int same_rows(const float *packed_x, int64_t start, int64_t n, int64_t H, int64_t W, const float *alone) {
    float *tmp = malloc(sizeof(float) * (size_t)(H * n * W + 1));
    gather(packed_x, sizeof(float), start, n, H, W, tmp);
    const int same = !memcmp(tmp, alone, sizeof(float) * (size_t)(H * n * W));
    free(tmp);
    return same;
}

/* Sequence s alone (contiguous [1, H, n, *] copies, batch 1, Philox offset + s) against the packed
 * results, with memcmp. */
static int check_alone(const packed *P, const attn_sdpa_params *p0, int bf, int64_t s, const result *R) {
    const int64_t a = P->cq[s], nq = P->cq[s + 1] - a, b = P->ck[s], nk = P->ck[s + 1] - b;
    const int64_t tq = P->cq[P->batch];
    const attn_type t = bf ? ATTN_TYPE_BF16 : ATTN_TYPE_F32;
    const size_t es = bf ? 2 : 4;
    void *qs = malloc(es * (size_t)(HQ * nq * D + 1)), *ks = malloc(es * (size_t)(HK * nk * D + 1));
    void *vs = malloc(es * (size_t)(HK * nk * DV + 1)), *gs = malloc(es * (size_t)(HQ * nq * DV + 1));
    gather(bf ? (void *)P->qh : P->q, es, a, nq, HQ, D, qs);
    gather(bf ? (void *)P->kh : P->k, es, b, nk, HK, D, ks);
    gather(bf ? (void *)P->vh : P->v, es, b, nk, HK, DV, vs);
    gather(bf ? (void *)P->gh : P->g, es, a, nq, HQ, DV, gs);
    float *o = calloc((size_t)(HQ * nq * DV + 1), 4), *lse = calloc((size_t)(HQ * nq + 1), 4);
    float *dq = calloc((size_t)(HQ * nq * D + 1), 4), *dk = calloc((size_t)(HK * nk * D + 1), 4);
    float *dv = calloc((size_t)(HK * nk * DV + 1), 4);
    attn_tensor q = attn_tensor_4d_typed(qs, t, 1, HQ, nq, D), k = attn_tensor_4d_typed(ks, t, 1, HK, nk, D);
    attn_tensor v = attn_tensor_4d_typed(vs, t, 1, HK, nk, DV), g = attn_tensor_4d_typed(gs, t, 1, HQ, nq, DV);
    attn_tensor to = attn_tensor_4d(o, 1, HQ, nq, DV), tl = attn_tensor_3d(lse, 1, HQ, nq);
    attn_tensor tdq = attn_tensor_4d(dq, 1, HQ, nq, D), tdk = attn_tensor_4d(dk, 1, HK, nk, D),
                tdv = attn_tensor_4d(dv, 1, HK, nk, DV);
    attn_sdpa_params p = *p0;
    p.dropout_offset += (uint64_t)s;
    const size_t wsb = attn_flash_workspace_size(&q, &k, &v);
    void *ws = malloc(wsb ? wsb : 1);
    CHECK_OK(attn_flash_forward(&q, &k, &v, &p, &to, &tl, ws, wsb));
    CHECK_OK(attn_flash_backward(&q, &k, &v, &p, &to, &g, &tl, &tdq, &tdk, &tdv, ws, wsb));
    free(ws);
    /* lse [HQ, total_q] columns a .. a + nq against [HQ, nq] */
    int lse_same = 1;
    for (int64_t h = 0; h < HQ; h++) lse_same &= !memcmp(R->lse + h * tq + a, lse + h * nq, sizeof(float) * (size_t)nq);
    const int same = same_rows(R->o, a, nq, HQ, DV, o) && lse_same && same_rows(R->dq, a, nq, HQ, D, dq) &&
                     same_rows(R->dk, b, nk, HK, D, dk) && same_rows(R->dv, b, nk, HK, DV, dv);
    free(qs), free(ks), free(vs), free(gs), free(o), free(lse), free(dq), free(dk), free(dv);
    return same;
}

/* float64 direct evaluation of sequence s's head h (no dropout): out rows and lse; the loss
 * sum(dout * out) when g is not NULL. q, k, v in double, packed layout. */
static double ref_seq(const packed *P, const vcase *c, const double *q, const double *k, const double *v, int64_t s,
                      double *out, double *lse) {
    const int64_t a = P->cq[s], nq = P->cq[s + 1] - a, b = P->ck[s], nk = P->ck[s + 1] - b;
    const int64_t off = c->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? nk - nq : 0;
    const double scale = 1.0 / sqrt((double)D);
    double loss = 0, *sc = malloc(sizeof(double) * (size_t)(nk + 1));
    for (int64_t h = 0; h < HQ; h++) {
        const int64_t gh = h / (HQ / HK);
        for (int64_t i = 0; i < nq; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < nk; j++) {
                const int64_t diag = i + off;
                int ok = !(c->causal != ATTN_CAUSAL_NONE && j > diag) && !(c->wl >= 0 && j < diag - c->wl) &&
                         !(c->wr >= 0 && j > diag + c->wr);
                double x = 0;
                for (int64_t e = 0; e < D; e++) x += q[((a + i) * HQ + h) * D + e] * k[((b + j) * HK + gh) * D + e];
                x *= scale;
                if (c->softcap > 0) x = c->softcap * tanh(x / c->softcap);
                if (c->alibi) x -= slopes[h] * (double)llabs(diag - j);
                sc[j] = ok ? x : -INFINITY;
                if (sc[j] > mx) mx = sc[j];
            }
            for (int64_t j = 0; j < nk; j++) sum += isinf(sc[j]) ? 0 : exp(sc[j] - mx);
            double *o = out + ((a + i) * HQ + h) * DV;
            for (int64_t x = 0; x < DV; x++) {
                double acc = 0;
                for (int64_t j = 0; j < nk && sum > 0; j++)
                    if (!isinf(sc[j])) acc += exp(sc[j] - mx) / sum * v[((b + j) * HK + gh) * DV + x];
                o[x] = acc;
                loss += acc * P->g[((a + i) * HQ + h) * DV + x];
            }
            if (lse) lse[h * P->cq[P->batch] + a + i] = sum > 0 ? mx + log(sum) : -INFINITY;
        }
    }
    free(sc);
    return loss;
}

static double ref_all(const packed *P, const vcase *c, const double *q, const double *k, const double *v, double *out,
                      double *lse) {
    double loss = 0;
    for (int64_t s = 0; s < P->batch; s++) loss += ref_seq(P, c, q, k, v, s, out, lse);
    return loss;
}

static double *to_double(const float *x, size_t n) {
    double *d = malloc(sizeof(double) * (n + 1));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* fp32 forward against float64: output and lse at the padded path's tolerance. */
static void check_reference(const packed *P, const vcase *c, const result *R, const char *isa) {
    const size_t tq = (size_t)P->cq[P->batch], tk = (size_t)P->ck[P->batch];
    double *q = to_double(P->q, tq * HQ * D), *k = to_double(P->k, tk * HK * D), *v = to_double(P->v, tk * HK * DV);
    double *out = calloc(tq * HQ * DV + 1, sizeof(double)), *lse = calloc(tq * HQ + 1, sizeof(double));
    ref_all(P, c, q, k, v, out, lse);
    const double eo = rel_err_fd(R->o, out, tq * HQ * DV);
    int lse_ok = 1;
    for (size_t i = 0; i < tq * HQ; i++)
        lse_ok &=
            isinf(lse[i]) ? (isinf(R->lse[i]) && R->lse[i] < 0) : fabs(R->lse[i] - lse[i]) <= 1e-5 * (1 + fabs(lse[i]));
    CHECK(eo <= 1e-5 && lse_ok, "%s [%s]: varlen forward rel err %.3g vs float64, lse %s", c->name, isa, eo,
          lse_ok ? "ok" : "off");
    free(q), free(k), free(v), free(out), free(lse);
}

/* Gradients of the float64 loss sum(dout * out) by central differences, against the packed
 * backward's (fp32) dq, dk, dv. */
static void check_fd(const packed *P, const vcase *c, const result *R) {
    const size_t tq = (size_t)P->cq[P->batch], tk = (size_t)P->ck[P->batch];
    const size_t n[3] = {tq * HQ * D, tk * HK * D, tk * HK * DV};
    double *x[3] = {to_double(P->q, n[0]), to_double(P->k, n[1]), to_double(P->v, n[2])};
    const float *got[3] = {R->dq, R->dk, R->dv};
    double *out = calloc(tq * HQ * DV + 1, sizeof(double));
    const char *names[3] = {"dq", "dk", "dv"};
    for (int w = 0; w < 3; w++) {
        double *fd = malloc(sizeof(double) * (n[w] + 1));
        for (size_t i = 0; i < n[w]; i++) {
            const double x0 = x[w][i], eps = 1e-5;
            x[w][i] = x0 + eps;
            const double lp = ref_all(P, c, x[0], x[1], x[2], out, NULL);
            x[w][i] = x0 - eps;
            const double lm = ref_all(P, c, x[0], x[1], x[2], out, NULL);
            x[w][i] = x0;
            fd[i] = (lp - lm) / (2 * eps);
        }
        const double e = rel_err_fd(got[w], fd, n[w]);
        CHECK(e <= 1e-4, "%s: varlen backward %s rel err %.3g vs finite differences", c->name, names[w], e);
        free(fd);
    }
    free(x[0]), free(x[1]), free(x[2]), free(out);
}

static const vcase cases[] = {
    {"none", ATTN_CAUSAL_NONE, -1, -1, 0, 0, 0},
    {"causal top-left", ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0},
    {"causal bottom-right", ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, 0, 0},
    {"window 7/3", ATTN_CAUSAL_NONE, 7, 3, 0, 0, 0},
    {"causal window 20", ATTN_CAUSAL_BOTTOM_RIGHT, 20, 0, 0, 0, 0},
    {"alibi causal", ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, 1, 0, 0},
    {"softcap", ATTN_CAUSAL_NONE, -1, -1, 0, 2.5f, 0},
    {"dropout causal", ATTN_CAUSAL_TOP_LEFT, -1, -1, 0, 0, 0.2f},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* Lengths: empty, one token, block boundaries (64), long, and Nq != Nk (incl. keys without
 * queries and queries without keys). */
static const int64_t self_len[] = {0, 1, 5, 64, 65, 130, 17, 200, 0, 63};
static const int64_t cross_q[] = {3, 0, 9, 64, 100, 1, 129, 2};
static const int64_t cross_k[] = {7, 4, 0, 64, 40, 130, 129, 1};

static void check_batch(const packed *P, const char *label) {
    for (int ci = 0; ci < NCASES; ci++) {
        const vcase *c = &cases[ci];
        const attn_sdpa_params p = params_of(c);
        FOR_EACH_ISA(isa) {
            CHECK_OK(attn_force_isa((attn_isa)isa));
            for (int bf = 0; bf <= 1; bf++) {
                result R;
                run_varlen(P, &p, bf, &R);
                int same = 1;
                for (int64_t s = 0; s < P->batch; s++) same &= check_alone(P, &p, bf, s, &R);
                CHECK(same, "%s %s [%s, %s]: a packed sequence differs bitwise from its batch-1 run", label, c->name,
                      attn_isa_name((attn_isa)isa), bf ? "bf16" : "f32");
                if (!bf && c->p == 0) check_reference(P, c, &R, attn_isa_name((attn_isa)isa));
                free_result(&R);
            }
        }
        attn_force_isa(attn_detected_isa());
    }
}

/* Bitwise identical for 1, 2, 3, 5 and 8 threads, f32 and bf16 (a vcase with dropout). */
static void check_threads(const packed *P, const vcase *c, int bf) {
    const attn_sdpa_params p = params_of(c);
    const size_t tq = (size_t)P->cq[P->batch], tk = (size_t)P->ck[P->batch];
    result first;
    memset(&first, 0, sizeof first);
    static const int counts[] = {1, 2, 3, 5, 8};
    for (int ti = 0; ti < 5; ti++) {
        const int t = counts[ti];
        attn_set_num_threads(t);
        result R;
        run_varlen(P, &p, bf, &R);
        if (t == 1) {
            first = R;
            continue;
        }
        CHECK(!memcmp(R.o, first.o, 4 * tq * HQ * DV) && !memcmp(R.lse, first.lse, 4 * tq * HQ) &&
                  !memcmp(R.dq, first.dq, 4 * tq * HQ * D) && !memcmp(R.dk, first.dk, 4 * tk * HK * D) &&
                  !memcmp(R.dv, first.dv, 4 * tk * HK * DV),
              "varlen %s [%s] differs bitwise between 1 and %d threads", c->name, bf ? "bf16" : "f32", t);
        free_result(&R);
    }
    free_result(&first);
    attn_set_num_threads(0);
}

static void check_errors(const packed *P) {
    const int64_t tq = P->cq[P->batch], tk = P->ck[P->batch];
    attn_tensor q = view3(P->q, ATTN_TYPE_F32, tq, HQ, D), k = view3(P->k, ATTN_TYPE_F32, tk, HK, D);
    attn_tensor v = view3(P->v, ATTN_TYPE_F32, tk, HK, DV);
    float *o = malloc(sizeof(float) * (size_t)(tq * HQ * DV));
    attn_tensor to = view3(o, ATTN_TYPE_F32, tq, HQ, DV);
    const attn_sdpa_params p = attn_sdpa_params_default();
    const size_t wsb = attn_flash_varlen_workspace_size(&q, &k, &v, P->cq, P->ck, P->batch);
    void *ws = malloc(wsb);
    int64_t bad[16];
    const int64_t n = P->batch;
#define BAD_Q(stmt)                                                                                                    \
    do {                                                                                                               \
        memcpy(bad, P->cq, sizeof(int64_t) * (size_t)(n + 1));                                                         \
        stmt;                                                                                                          \
        CHECK_STATUS(attn_flash_varlen_forward(&q, &k, &v, bad, P->ck, n, &p, &to, NULL, ws, wsb),                     \
                     ATTN_ERR_INVALID_ARGUMENT);                                                                       \
        CHECK(strstr(attn_last_error(), "cu_seqlens_q") != NULL, "message names cu_seqlens_q: %s", attn_last_error()); \
        CHECK(attn_flash_varlen_workspace_size(&q, &k, &v, bad, P->ck, n) == 0, "workspace size of bad cu_seqlens");   \
    } while (0)
    BAD_Q(bad[3] = bad[2] - 1); /* decreasing */
    BAD_Q(bad[n] = tq - 1);     /* last != total */
    BAD_Q(bad[0] = -1);         /* negative first */
    BAD_Q(bad[2] = -5);         /* negative inside */
    BAD_Q(bad[1] = tq + 100);   /* past the end */
#undef BAD_Q
    memcpy(bad, P->ck, sizeof(int64_t) * (size_t)(n + 1));
    bad[n] = tk + 1;
    CHECK_STATUS(attn_flash_varlen_forward(&q, &k, &v, P->cq, bad, n, &p, &to, NULL, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "cu_seqlens_k") != NULL, "message names cu_seqlens_k: %s", attn_last_error());
    CHECK_STATUS(attn_flash_varlen_forward(&q, &k, &v, P->cq, P->ck, 0, &p, &to, NULL, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT); /* batch 0 */
    CHECK_STATUS(attn_flash_varlen_forward(&q, &k, &v, NULL, P->ck, n, &p, &to, NULL, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_flash_varlen_forward(&q, &k, &v, P->cq, P->ck, n, NULL, &to, NULL, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_flash_varlen_forward(NULL, &k, &v, P->cq, P->ck, n, &p, &to, NULL, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_flash_varlen_forward(&q, &k, &v, P->cq, P->ck, n, &p, &to, NULL, ws, wsb - 64),
                 ATTN_ERR_WORKSPACE);
    attn_tensor wrong = view3(o, ATTN_TYPE_F32, tq, HQ, DV - 1);
    CHECK_STATUS(attn_flash_varlen_forward(&q, &k, &v, P->cq, P->ck, n, &p, &wrong, NULL, ws, wsb), ATTN_ERR_SHAPE);
    attn_tensor q0 = view3(P->q, ATTN_TYPE_F32, tq, HQ, 0);
    CHECK(attn_flash_varlen_workspace_size(&q0, &k, &v, P->cq, P->ck, n) == 0, "workspace size with head_dim 0");
    CHECK_STATUS(attn_flash_varlen_forward(&q0, &k, &v, P->cq, P->ck, n, &p, &to, NULL, ws, wsb), ATTN_ERR_SHAPE);
    attn_tensor q4 = attn_tensor_4d(P->q, 1, tq, HQ, D);
    CHECK_STATUS(attn_flash_varlen_forward(&q4, &k, &v, P->cq, P->ck, n, &p, &to, NULL, ws, wsb), ATTN_ERR_SHAPE);
    attn_sdpa_params pm = p;
    const uint8_t km[1] = {1};
    attn_btensor kmask = attn_btensor_2d(km, 1, 1);
    pm.key_mask = &kmask;
    CHECK_STATUS(attn_flash_varlen_forward(&q, &k, &v, P->cq, P->ck, n, &pm, &to, NULL, ws, wsb), ATTN_ERR_UNSUPPORTED);
    float l[1];
    attn_tensor badlse = attn_tensor_2d(l, HQ, tq - 1);
    CHECK_STATUS(attn_flash_varlen_forward(&q, &k, &v, P->cq, P->ck, n, &p, &to, &badlse, ws, wsb), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_flash_varlen_backward(&q, &k, &v, P->cq, P->ck, n, &p, &to, &to, NULL, NULL, &k, &v, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT); /* no lse */
    free(o), free(ws);
}

int main(void) {
    test_rng r = rng_seeded(27);
    packed self, cross, small;
    make(&self, &r, (int64_t)(sizeof self_len / sizeof self_len[0]), self_len, self_len);
    make(&cross, &r, (int64_t)(sizeof cross_q / sizeof cross_q[0]), cross_q, cross_k);
    check_batch(&self, "self");
    check_batch(&cross, "cross");
    for (int bf = 0; bf <= 1; bf++) {
        check_threads(&self, &cases[7], bf);
        check_threads(&cross, &cases[5], bf);
    }
    check_errors(&self);
    /* the backward by finite differences of the float64 reference, on a small batch */
    static const int64_t sq[] = {3, 0, 5, 1}, sk[] = {4, 2, 5, 1};
    make(&small, &r, 4, sq, sk);
    for (int ci = 0; ci < NCASES; ci++) {
        if (cases[ci].p > 0) continue;
        const attn_sdpa_params p = params_of(&cases[ci]);
        result R;
        run_varlen(&small, &p, 0, &R);
        check_fd(&small, &cases[ci], &R);
        free_result(&R);
    }
    release(&self), release(&cross), release(&small);
    return test_summary("test_flash_varlen");
}
