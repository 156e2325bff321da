/* Local + global (Longformer) attention: attn_longformer_* against the float64 oracle with the
 * equivalent dense mask (forward, lse, weights, backward) over shapes, global sets, causality, key
 * masks, strides and GQA; finite differences; bitwise determinism across thread counts; the cost
 * (tiles visited) linear in N; the 'local_global' kind through attn_mha against the flash kind with
 * the equivalent attn_mask (forward, weights, capture, backward) and an encoder layer; argument
 * errors. */
#include "sdpa_oracle.h"

typedef struct {
    const char *name;
    int B, H, Hk, N, d, dv;
    int64_t w;
    int causal;
    int gpat;     /* 0 no mask (NULL); 1 mask of zeros; 2 one global (0); 3 several incl. both ends;
                   * 4 different per batch (none / last / several); 5 every 7th */
    int key_mask; /* drop some keys per batch */
    int strided;  /* [B, N, H, d] storage */
    float scale;
} lcase;

static const lcase cases[] = {
    {"pure window (no mask)", 1, 2, 2, 100, 16, 16, 5, 0, 0, 0, 0, 0},
    {"mask of zeros", 1, 2, 2, 100, 16, 16, 5, 1, 1, 0, 0, 0},
    {"one global, tile+2", 1, 2, 2, 130, 16, 16, 7, 0, 2, 0, 0, 0},
    {"several at the ends", 2, 2, 2, 200, 32, 32, 10, 0, 3, 0, 0, 0},
    {"several, causal", 2, 2, 2, 200, 32, 32, 10, 1, 3, 0, 0, 0},
    {"per batch + key mask", 3, 2, 2, 150, 16, 16, 4, 0, 4, 1, 0, 0},
    {"per batch + key mask, causal", 3, 2, 2, 97, 16, 16, 4, 1, 4, 1, 0, 0},
    {"GQA 4/2, strided", 2, 4, 2, 70, 16, 16, 3, 0, 3, 1, 1, 0},
    {"MQA 3/1, strided, causal", 2, 3, 1, 129, 16, 8, 6, 1, 4, 0, 1, 0},
    {"window > N", 1, 2, 2, 50, 16, 16, 100, 0, 3, 0, 0, 0},
    {"w = 0, every 7th, key mask (empty rows)", 2, 2, 2, 129, 7, 5, 0, 0, 5, 1, 0, 0},
    {"w = 0, every 7th, causal", 1, 2, 2, 129, 7, 5, 0, 1, 5, 0, 0, 0},
    {"many globals (G > tile)", 1, 2, 2, 300, 16, 16, 2, 0, 5, 0, 0, 0},
    {"custom scale", 1, 2, 2, 80, 16, 16, 9, 1, 3, 1, 0, 0.3f},
    {"large logits (|lse| ~ 100)", 2, 2, 2, 90, 16, 16, 6, 0, 4, 0, 0, 8.0f},
    {"large logits, causal", 2, 2, 2, 90, 16, 16, 6, 1, 3, 1, 0, 8.0f},
};

static int glob_at(int pat, int b, int N, int i) {
    switch (pat) {
    case 2: return i == 0;
    case 3: return i == 0 || i == N - 1 || i == N / 3 || i == N / 2 + 1;
    case 4: return b == 0 ? 0 : b == 1 ? i == N - 1 : (i == 0 || i == 5 || i == N / 2 || i == N - 1);
    case 5: return i % 7 == 3;
    default: return 0;
    }
}
static int key_at(const lcase *c, int b, int j) { return !c->key_mask || (j * 7 + b) % 5 != 0; }

/* The rule, written out independently of the library. */
static int sees_ref(const lcase *c, int b, int i, int j) {
    if (!key_at(c, b, j) || (c->causal && j > i)) return 0;
    const int gi = glob_at(c->gpat, b, c->N, i), gj = glob_at(c->gpat, b, c->N, j);
    return gi || gj || (j - i <= c->w && i - j <= c->w);
}

/* A [B, X, N, D] view over storage, contiguous or [B, N, X, D]. */
static attn_tensor view(float *p, int B, int X, int N, int D, int strided) {
    attn_tensor t = attn_tensor_4d(p, B, X, N, D);
    if (strided) {
        t.stride[0] = (int64_t)N * X * D;
        t.stride[1] = D;
        t.stride[2] = (int64_t)X * D;
        t.stride[3] = 1;
    }
    return t;
}
static void to_double(const attn_tensor *t, double *o) {
    size_t n = 0;
    for (int64_t a = 0; a < t->shape[0]; a++)
        for (int64_t b = 0; b < t->shape[1]; b++)
            for (int64_t c = 0; c < t->shape[2]; c++)
                for (int64_t d = 0; d < t->shape[3]; d++)
                    o[n++] = t->data[a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3]];
}
static void to_float(const attn_tensor *t, float *o) {
    size_t n = 0;
    for (int64_t a = 0; a < t->shape[0]; a++)
        for (int64_t b = 0; b < t->shape[1]; b++)
            for (int64_t c = 0; c < t->shape[2]; c++)
                for (int64_t d = 0; d < t->shape[3]; d++)
                    o[n++] = t->data[a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3]];
}

typedef struct {
    size_t nq, nk, nv, no, nl;
    float *q, *k, *v, *o, *lse, *go, *dq, *dk, *dv;
    uint8_t *gm, *km;
    attn_btensor gmv, kmv;
    attn_tensor tq, tk, tv, to, tl, tgo, tdq, tdk, tdv;
    attn_longformer_params p;
    void *ws;
    size_t wsb;
} lrun;

static void lrun_init(lrun *r, const lcase *c, test_rng *rng) {
    memset(r, 0, sizeof *r);
    r->nq = (size_t)c->B * c->H * c->N * c->d;
    r->nk = (size_t)c->B * c->Hk * c->N * c->d;
    r->nv = (size_t)c->B * c->Hk * c->N * c->dv;
    r->no = (size_t)c->B * c->H * c->N * c->dv;
    r->nl = (size_t)c->B * c->H * c->N;
    r->q = xmalloc(sizeof(float) * r->nq), r->dq = xmalloc(sizeof(float) * r->nq);
    r->k = xmalloc(sizeof(float) * r->nk), r->dk = xmalloc(sizeof(float) * r->nk);
    r->v = xmalloc(sizeof(float) * r->nv), r->dv = xmalloc(sizeof(float) * r->nv);
    r->o = xmalloc(sizeof(float) * r->no), r->go = xmalloc(sizeof(float) * r->no);
    r->lse = xmalloc(sizeof(float) * r->nl);
    fill_normal(rng, r->q, r->nq, 1.0);
    fill_normal(rng, r->k, r->nk, 1.0);
    fill_normal(rng, r->v, r->nv, 1.0);
    fill_normal(rng, r->go, r->no, 1.0);
    r->gm = xmalloc((size_t)c->B * c->N);
    r->km = xmalloc((size_t)c->B * c->N);
    for (int b = 0; b < c->B; b++)
        for (int i = 0; i < c->N; i++) {
            r->gm[b * c->N + i] = (uint8_t)glob_at(c->gpat, b, c->N, i);
            r->km[b * c->N + i] = (uint8_t)key_at(c, b, i);
        }
    r->gmv = attn_btensor_2d(r->gm, c->B, c->N);
    r->kmv = attn_btensor_2d(r->km, c->B, c->N);
    r->tq = view(r->q, c->B, c->H, c->N, c->d, c->strided);
    r->tk = view(r->k, c->B, c->Hk, c->N, c->d, c->strided);
    r->tv = view(r->v, c->B, c->Hk, c->N, c->dv, c->strided);
    r->to = view(r->o, c->B, c->H, c->N, c->dv, c->strided);
    r->tgo = view(r->go, c->B, c->H, c->N, c->dv, c->strided);
    r->tdq = view(r->dq, c->B, c->H, c->N, c->d, c->strided);
    r->tdk = view(r->dk, c->B, c->Hk, c->N, c->d, c->strided);
    r->tdv = view(r->dv, c->B, c->Hk, c->N, c->dv, c->strided);
    r->tl = attn_tensor_3d(r->lse, c->B, c->H, c->N);
    r->p.window = c->w;
    r->p.global_mask = c->gpat ? &r->gmv : NULL;
    r->p.causal = c->causal;
    r->p.key_mask = c->key_mask ? &r->kmv : NULL;
    r->p.scale = c->scale;
    r->wsb = attn_longformer_workspace_size(&r->tq, &r->tk, &r->tv, &r->p);
    CHECK(r->wsb > 0, "%s: workspace size 0: %s", c->name, attn_last_error());
    r->ws = xmalloc(r->wsb);
}
static void lrun_free(lrun *r) {
    free(r->q), free(r->k), free(r->v), free(r->o), free(r->lse), free(r->go), free(r->dq), free(r->dk), free(r->dv);
    free(r->gm), free(r->km), free(r->ws);
}
static attn_status lrun_fwd(lrun *r) {
    return attn_longformer_forward(&r->tq, &r->tk, &r->tv, &r->p, &r->to, &r->tl, r->ws, r->wsb);
}
static attn_status lrun_bwd(lrun *r) {
    return attn_longformer_backward(&r->tq, &r->tk, &r->tv, &r->p, &r->to, &r->tgo, &r->tl, &r->tdq, &r->tdk, &r->tdv,
                                    r->ws, r->wsb);
}

static void test_case(const lcase *c, int ci) {
    test_rng rng = rng_seeded(1000 + (uint64_t)ci);
    lrun r;
    lrun_init(&r, c, &rng);
    const size_t nall = (size_t)c->B * c->H * c->N * c->N;
    uint8_t *allowed = xmalloc(nall);
    double *bias = xmalloc(sizeof(double) * nall);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->N; i++)
                for (int j = 0; j < c->N; j++) {
                    const size_t x = OIDX4(b, h, i, j, c->H, c->N, c->N);
                    allowed[x] = (uint8_t)sees_ref(c, b, i, j);
                    bias[x] = 0;
                }
    oracle_shape os = {c->B, c->H,    c->Hk, c->N, c->N, c->d, c->dv, c->scale > 0 ? c->scale : 1.0 / sqrt(c->d),
                       0,    allowed, bias,  NULL};
    double *q = xmalloc(sizeof(double) * r.nq), *k = xmalloc(sizeof(double) * r.nk),
           *v = xmalloc(sizeof(double) * r.nv), *go = xmalloc(sizeof(double) * r.no),
           *o = xmalloc(sizeof(double) * r.no), *p = xmalloc(sizeof(double) * nall),
           *lse = xmalloc(sizeof(double) * r.nl), *dq = xmalloc(sizeof(double) * r.nq),
           *dk = xmalloc(sizeof(double) * r.nk), *dv = xmalloc(sizeof(double) * r.nv);
    to_double(&r.tq, q), to_double(&r.tk, k), to_double(&r.tv, v), to_double(&r.tgo, go);
    oracle_forward(&os, q, k, v, o, p, lse);
    oracle_backward(&os, q, k, v, go, dq, dk, dv);

    float *f = xmalloc(sizeof(float) * (r.nq > r.no ? r.nq : r.no));
    CHECK_OK(lrun_fwd(&r));
    to_float(&r.to, f);
    const double eo = rel_err_fd(f, o, r.no);
    CHECK(eo <= 1e-5, "%s: forward rel err %.3g", c->name, eo);
    /* lse: -inf exactly where the row sees nothing, else within 1e-5 */
    double el = 0;
    int empty = 0, inf_ok = 1;
    for (size_t i = 0; i < r.nl; i++) {
        if (lse[i] == -INFINITY) {
            empty++;
            inf_ok &= r.lse[i] == -INFINITY;
            continue;
        }
        const double e = fabs(r.lse[i] - lse[i]) / (fabs(lse[i]) > 1 ? fabs(lse[i]) : 1);
        el = e > el ? e : el;
    }
    CHECK(el <= 1e-5 && inf_ok, "%s: lse err %.3g (-inf rows right: %d)", c->name, el, inf_ok);
    /* weights of every row, all at once per (b, h) and a few rows one by one */
    double ew = 0;
    float *w = xmalloc(sizeof(float) * (size_t)c->N * c->N);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++) {
            CHECK_OK(attn_longformer_weights(&r.tq, &r.tk, &r.p, b, h, 0, c->N, w));
            const double e = rel_err_fd(w, p + OIDX4(b, h, 0, 0, c->H, c->N, c->N), (size_t)c->N * c->N);
            ew = e > ew ? e : ew;
        }
    CHECK(ew <= 1e-5, "%s: weights rel err %.3g", c->name, ew);
    CHECK_OK(attn_longformer_weights(&r.tq, &r.tk, &r.p, c->B - 1, c->H - 1, c->N - 2, 2, w));
    const double ew2 = rel_err_fd(w, p + OIDX4(c->B - 1, c->H - 1, c->N - 2, 0, c->H, c->N, c->N), 2 * (size_t)c->N);
    CHECK(ew2 <= 1e-5, "%s: weights of the last 2 rows %.3g", c->name, ew2);
    free(w);

    CHECK_OK(lrun_bwd(&r));
    to_float(&r.tdq, f);
    const double eq = rel_err_fd(f, dq, r.nq);
    to_float(&r.tdk, f);
    const double ek = rel_err_fd(f, dk, r.nk);
    to_float(&r.tdv, f);
    const double ev = rel_err_fd(f, dv, r.nv);
    CHECK(eq <= 1e-4 && ek <= 1e-4 && ev <= 1e-4, "%s: backward rel err dq %.3g dk %.3g dv %.3g", c->name, eq, ek, ev);
    /* dq NULL leaves dk, dv as they were */
    float *dk1 = xmalloc(sizeof(float) * r.nk);
    memcpy(dk1, r.dk, sizeof(float) * r.nk);
    CHECK_OK(
        attn_longformer_backward(&r.tq, &r.tk, &r.tv, &r.p, &r.to, &r.tgo, &r.tl, NULL, &r.tdk, &r.tdv, r.ws, r.wsb));
    CHECK(!memcmp(dk1, r.dk, sizeof(float) * r.nk), "%s: dk differs without dq", c->name);
    free(dk1);
    printf("  %-42s fwd %.1e lse %.1e wts %.1e | dq %.1e dk %.1e dv %.1e (%d empty rows)\n", c->name, eo, el, ew, eq,
           ek, ev, empty);
    free(allowed), free(bias), free(q), free(k), free(v), free(go), free(o), free(p), free(lse), free(dq), free(dk),
        free(dv), free(f);
    lrun_free(&r);
}

/* Central differences of L = sum(O * R) along random directions of q, k and v. */
static void test_finite_differences(int causal) {
    const lcase c = {"fd", 1, 2, 2, 40, 8, 8, 3, causal, 3, 1, 0, 0};
    test_rng rng = rng_seeded(77 + (uint64_t)causal);
    lrun r;
    lrun_init(&r, &c, &rng);
    CHECK_OK(lrun_fwd(&r));
    CHECK_OK(lrun_bwd(&r));
    float *xs[3] = {r.q, r.k, r.v}, *gs[3] = {r.dq, r.dk, r.dv};
    const size_t ns[3] = {r.nq, r.nk, r.nv};
    const char *names[3] = {"q", "k", "v"};
    float *dir = xmalloc(sizeof(float) * r.nq), *save = xmalloc(sizeof(float) * r.nq);
    const double h = 1e-2;
    for (int t = 0; t < 3; t++) {
        fill_normal(&rng, dir, ns[t], 1.0);
        double sumsq = 0;
        const double an = dir_dot(dir, gs[t], ns[t], &sumsq);
        memcpy(save, xs[t], sizeof(float) * ns[t]);
        double l[2];
        for (int s = 0; s < 2; s++) {
            for (size_t i = 0; i < ns[t]; i++) xs[t][i] = (float)(save[i] + (s ? -h : h) * dir[i]);
            CHECK_OK(lrun_fwd(&r));
            l[s] = 0;
            for (size_t i = 0; i < r.no; i++) l[s] += (double)r.o[i] * r.go[i];
        }
        memcpy(xs[t], save, sizeof(float) * ns[t]);
        const double fd = (l[0] - l[1]) / (2 * h), scale = fmax(fabs(an), sqrt(sumsq));
        CHECK(fabs(fd - an) <= 2e-3 * scale, "finite differences (causal %d) d%s: fd %.6g vs analytic %.6g", causal,
              names[t], fd, an);
        printf("  finite differences (causal %d) d%s: fd %.6g analytic %.6g (rel %.1e)\n", causal, names[t], fd, an,
               fabs(fd - an) / scale);
    }
    free(dir), free(save);
    lrun_free(&r);
}

/* 1 vs 2 threads: every output bitwise equal. */
static void test_determinism(void) {
    const lcase c = {"det", 2, 4, 2, 333, 32, 32, 20, 0, 4, 1, 0, 0};
    for (int causal = 0; causal < 2; causal++) {
        lcase cc = c;
        cc.causal = causal;
        float *keep[5];
        int same = 1;
        for (int threads = 1; threads <= 2; threads++) {
            test_rng rng = rng_seeded(5);
            lrun r;
            attn_set_num_threads(threads);
            lrun_init(&r, &cc, &rng);
            CHECK_OK(lrun_fwd(&r));
            CHECK_OK(lrun_bwd(&r));
            float *outs[5] = {r.o, r.lse, r.dq, r.dk, r.dv};
            const size_t ns[5] = {r.no, r.nl, r.nq, r.nk, r.nv};
            for (int i = 0; i < 5; i++) {
                if (threads == 1) {
                    keep[i] = xmalloc(sizeof(float) * ns[i]);
                    memcpy(keep[i], outs[i], sizeof(float) * ns[i]);
                } else {
                    same &= !memcmp(keep[i], outs[i], sizeof(float) * ns[i]);
                    free(keep[i]);
                }
            }
            lrun_free(&r);
        }
        attn_set_num_threads(0);
        CHECK(same, "causal %d: 1 and 2 threads differ", causal);
    }
}

/* The kernel's work grows linearly in N (tiles visited), while a dense pass grows as N^2. */
static void test_linear_cost(void) {
    const int64_t B = 1, H = 2, d = 64, w = 128;
    int64_t prev = 0;
    for (int64_t N = 4096; N <= 65536; N *= 2) {
        uint8_t *g = xmalloc((size_t)N);
        for (int64_t i = 0; i < N; i++) g[i] = (uint8_t)(i < 4 || i % 4096 == 100); /* 4 + N / 4096 globals */
        int64_t G = 0;
        for (int64_t i = 0; i < N; i++) G += g[i];
        attn_btensor gm = attn_btensor_2d(g, B, N);
        attn_tensor q = attn_tensor_4d(NULL, B, H, N, d);
        attn_longformer_params p = {w, &gm, 0, NULL, 0};
        int64_t total = 0;
        const int64_t n = attn_longformer_tile_count(&q, &q, &p, &total);
        /* per 64-row query block: (64 + 2w) / 64 + 1 window tiles, one global-key tile per 64
         * globals; plus the global rows' pass: a query block per 64 globals over N / 64 key tiles */
        const int64_t blocks = N / 64, gb = (G + 63) / 64;
        const int64_t bound = B * H * (blocks * ((64 + 2 * w) / 64 + 1 + gb) + gb * blocks);
        CHECK(n > 0 && n <= bound, "N %lld: %lld tiles, bound %lld", (long long)N, (long long)n, (long long)bound);
        if (prev)
            CHECK(n <= 2 * prev + 2 * B * H * blocks, "N %lld: %lld tiles after %lld", (long long)N, (long long)n,
                  (long long)prev);
        printf("  N %6lld, w %lld, g %lld: %lld tiles (dense %lld, %.2f%%)\n", (long long)N, (long long)w, (long long)G,
               (long long)n, (long long)total, 100.0 * (double)n / (double)total);
        prev = n;
        free(g);
    }
}

/* attn_mha with the local_global kind and a global_attention_mask against the flash kind with the
 * equivalent 3-D boolean attn_mask (true = not allowed): output, per-head weights, capture, input
 * and parameter gradients. */
static void test_mha(int causal) {
    test_rng rng = rng_seeded(300 + (uint64_t)causal);
    const int64_t B = 3, N = 75, E = 16, H = 2, w = 4;
    attn_mha_config fc = attn_mha_config_default(E, H), lc = fc;
    lc.attention.kind = ATTN_ATTENTION_LOCAL_GLOBAL;
    lc.attention.window = w;
    attn_mha *fm = NULL, *lm = NULL;
    CHECK_OK(attn_mha_create(&fc, &fm));
    CHECK_OK(attn_mha_create(&lc, &lm));
    if (!fm || !lm) return;
    CHECK_OK(attn_params_reset(attn_mha_params(fm), 4));
    copy_params(attn_mha_params(lm), attn_mha_params(fm));
    const lcase c = {"mha", (int)B, (int)H, (int)H, (int)N, 8, 8, w, causal, 4, 1, 0, 0};
    const size_t nx = (size_t)(B * N * E), nw = (size_t)(B * H * N * N);
    float *x = xmalloc(sizeof(float) * nx), *dout = xmalloc(sizeof(float) * nx);
    fill_normal(&rng, x, nx, 1.0);
    fill_normal(&rng, dout, nx, 1.0);
    uint8_t *gm = xmalloc((size_t)(B * N)), *kpm = xmalloc((size_t)(B * N)), *am = xmalloc(nw);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < N; i++) {
            gm[b * N + i] = (uint8_t)glob_at(c.gpat, b, (int)N, i);
            kpm[b * N + i] = (uint8_t)!key_at(&c, b, i);
        }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) {
                    /* the window and the global set only: causality and key padding come as flags */
                    lcase open = c;
                    open.causal = 0, open.key_mask = 0;
                    am[((b * H + h) * N + i) * N + j] = (uint8_t)!sees_ref(&open, b, i, j);
                }
    attn_mha_args fa = attn_mha_args_default(), la;
    fa.batch = B;
    fa.nq = fa.nk = N;
    fa.query = fa.key = fa.value = x;
    fa.key_padding_mask = kpm;
    fa.is_causal = causal;
    fa.need_weights = 1;
    fa.average_attn_weights = 0;
    la = fa;
    fa.attn_mask = am;
    fa.attn_mask_3d = 1;
    la.global_attention_mask = gm;
    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_add(cap, "", 1, 1, 3, 40));
    la.capture = cap;
    float *fo = xmalloc(sizeof(float) * nx), *lo = xmalloc(sizeof(float) * nx);
    float *fw = xmalloc(sizeof(float) * nw), *lw = xmalloc(sizeof(float) * nw);
    const size_t fsb = attn_mha_saved_size(fm, &fa), fwb = attn_mha_workspace_size(fm, &fa);
    const size_t lsb = attn_mha_saved_size(lm, &la), lwb = attn_mha_workspace_size(lm, &la);
    void *fs = xmalloc(fsb), *fws = xmalloc(fwb), *ls = xmalloc(lsb), *lws = xmalloc(lwb);
    CHECK_OK(attn_mha_forward(fm, &fa, fo, fw, fs, fsb, fws, fwb));
    CHECK_OK(attn_mha_forward(lm, &la, lo, lw, ls, lsb, lws, lwb));
    const double eo = rel_err_ff(lo, fo, nx), ew = rel_err_ff(lw, fw, nw);
    CHECK(eo <= 1e-5, "mha (causal %d) output vs masked flash: %.3g", causal, eo);
    CHECK(ew <= 1e-5, "mha (causal %d) weights vs masked flash: %.3g", causal, ew);
    attn_capture_record rec;
    double ec = INFINITY;
    if (attn_capture_find(cap, "", &rec) == ATTN_OK && rec.heads == 1 && rec.rows == 40 && rec.nk == N) {
        ec = 0;
        for (int b = 0; b < B; b++) {
            const double e =
                rel_err_ff(rec.weights + (size_t)b * 40 * N, fw + ((b * H + 1) * N + 3) * N, (size_t)(40 * N));
            ec = e > ec ? e : ec;
        }
    }
    CHECK(ec <= 1e-5, "mha (causal %d) capture vs masked flash weights: %.3g", causal, ec);
    float *fdx = xmalloc(sizeof(float) * nx), *ldx = xmalloc(sizeof(float) * nx);
    CHECK_OK(attn_params_zero_grad(attn_mha_params(fm)));
    CHECK_OK(attn_params_zero_grad(attn_mha_params(lm)));
    CHECK_OK(attn_mha_backward(fm, &fa, dout, fdx, fdx, fdx, fs, fsb, fws, fwb));
    CHECK_OK(attn_mha_backward(lm, &la, dout, ldx, ldx, ldx, ls, lsb, lws, lwb));
    double eg = rel_err_ff(ldx, fdx, nx);
    for (size_t i = 0; i < attn_params_count(attn_mha_params(fm)); i++) {
        const attn_param *pf = attn_params_get(attn_mha_params(fm), i), *pl = attn_params_get(attn_mha_params(lm), i);
        const double e = rel_err_ff(pl->grad, pf->grad, pf->numel);
        eg = e > eg ? e : eg;
    }
    CHECK(eg <= 1e-4, "mha (causal %d) gradients vs masked flash: %.3g", causal, eg);
    printf("  attn_mha local_global (causal %d): output %.2e, weights %.2e, capture %.2e, gradients %.2e\n", causal, eo,
           ew, ec, eg);

    /* what the kind refuses with global tokens, and where the mask does not apply */
    attn_mha_args bad = la;
    bad.capture = NULL;
    bad.need_weights = 0;
    bad.attn_mask = am;
    bad.attn_mask_3d = 1;
    char *ws = xmalloc(attn_mha_workspace_size(lm, &bad));
    CHECK_STATUS(attn_mha_forward(lm, &bad, lo, NULL, NULL, 0, ws, attn_mha_workspace_size(lm, &bad)),
                 ATTN_ERR_UNSUPPORTED);
    free(ws);
    bad = la;
    bad.capture = NULL;
    bad.nk = N - 1; /* cross-attention */
    CHECK_STATUS(attn_mha_forward(lm, &bad, lo, lw, NULL, 0, lws, lwb), ATTN_ERR_SHAPE);
    free(x), free(dout), free(gm), free(kpm), free(am), free(fo), free(lo), free(fw), free(lw);
    free(fs), free(fws), free(ls), free(lws), free(fdx), free(ldx);
    attn_capture_free(cap);
    attn_mha_free(fm);
    attn_mha_free(lm);
}

/* An encoder layer takes the global mask through attn_masks.global_attention_mask. */
static void test_layer(void) {
    test_rng rng = rng_seeded(404);
    const int64_t B = 2, N = 33, d = 16, H = 2, w = 2;
    attn_layer_config fc = attn_layer_config_default(d, H), lc;
    fc.dim_feedforward = 24;
    fc.dropout = 0;
    lc = fc;
    lc.attention.kind = ATTN_ATTENTION_LOCAL_GLOBAL;
    lc.attention.window = w;
    attn_encoder_layer *fl = NULL, *ll = NULL;
    CHECK_OK(attn_encoder_layer_create(&fc, &fl));
    CHECK_OK(attn_encoder_layer_create(&lc, &ll));
    if (!fl || !ll) return;
    CHECK_OK(attn_params_reset(attn_encoder_layer_params(fl), 8));
    copy_params(attn_encoder_layer_params(ll), attn_encoder_layer_params(fl));
    float *x = xmalloc(sizeof(float) * (size_t)(B * N * d));
    fill_normal(&rng, x, (size_t)(B * N * d), 1.0);
    uint8_t *gm = xmalloc((size_t)(B * N)), *am = xmalloc((size_t)(B * H * N * N));
    const lcase c = {"layer", (int)B, (int)H, (int)H, (int)N, 8, 8, w, 0, 4, 0, 0, 0};
    for (int b = 0; b < B; b++)
        for (int i = 0; i < N; i++) gm[b * N + i] = (uint8_t)glob_at(c.gpat, b + 1, (int)N, i);
    lcase shifted = c; /* batch b uses pattern row b + 1 */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++)
                    am[((b * H + h) * N + i) * N + j] = (uint8_t)!sees_ref(&shifted, b + 1, i, j);
    attn_layer_args fa = attn_layer_args_default(), la;
    fa.batch = B;
    fa.n = N;
    fa.x = x;
    la = fa;
    fa.self_masks.attn_mask = am;
    fa.self_masks.attn_mask_3d = 1;
    la.self_masks.global_attention_mask = gm;
    float *fo = xmalloc(sizeof(float) * (size_t)(B * N * d)), *lo = xmalloc(sizeof(float) * (size_t)(B * N * d));
    const size_t fwb = attn_encoder_layer_workspace_size(fl, &fa), lwb = attn_encoder_layer_workspace_size(ll, &la);
    void *fws = xmalloc(fwb), *lws = xmalloc(lwb);
    CHECK_OK(attn_encoder_layer_forward(fl, &fa, fo, NULL, 0, fws, fwb));
    CHECK_OK(attn_encoder_layer_forward(ll, &la, lo, NULL, 0, lws, lwb));
    const double e = rel_err_ff(lo, fo, (size_t)(B * N * d));
    CHECK(e <= 1e-5, "encoder layer, local_global vs masked flash: %.3g", e);
    printf("  encoder layer local_global vs masked flash: %.2e\n", e);
    free(x), free(gm), free(am), free(fo), free(lo), free(fws), free(lws);
    attn_encoder_layer_free(fl);
    attn_encoder_layer_free(ll);
}

/* Decoding: the step carries no global mask, so a GPT of the local_global kind decodes as the
 * window kind; its cached steps give its full forward's rows, which equal the window kind's. */
static void test_gpt_steps(void) {
    const int64_t V = 23, P = 32, d = 16, H = 2, L = 2, n = 14, w = 4;
    attn_gpt_config gc = attn_gpt_config_default(V, P, d, H, L);
    gc.layer.dim_feedforward = 32;
    gc.layer.dropout = 0;
    gc.layer.attention.kind = ATTN_ATTENTION_LOCAL_GLOBAL;
    gc.layer.attention.window = w;
    attn_gpt_config wc = gc;
    wc.layer.attention.kind = ATTN_ATTENTION_WINDOW;
    attn_gpt *g = NULL, *wg = NULL;
    CHECK_OK(attn_gpt_create(&gc, &g));
    CHECK_OK(attn_gpt_create(&wc, &wg));
    if (!g || !wg) return;
    CHECK_OK(attn_params_reset(attn_gpt_params(g), 4));
    copy_params(attn_gpt_params(wg), attn_gpt_params(g));
    int64_t tok[14];
    for (int64_t i = 0; i < n; i++) tok[i] = (i * 7 + 3) % V;
    attn_gpt_args a = {1, n, tok, NULL, 0, 0, 0, NULL, NULL};
    const size_t wb = attn_gpt_workspace_size(g, &a);
    void *ws = xmalloc(wb);
    float *full = xmalloc(sizeof(float) * (size_t)(n * V)), *win = xmalloc(sizeof(float) * (size_t)(n * V)),
          *step = xmalloc(sizeof(float) * (size_t)(n * V));
    CHECK_OK(attn_gpt_forward(g, &a, full, NULL, 0, ws, wb));
    CHECK_OK(attn_gpt_forward(wg, &a, win, NULL, 0, ws, wb));
    const size_t cb = attn_gpt_cache_size(g, 1, n), sw = attn_gpt_step_workspace_size(g, 1, 5, n);
    void *cbuf = xmalloc(cb), *sws = xmalloc(sw);
    attn_gpt_cache *c = NULL;
    CHECK_OK(attn_gpt_cache_init(g, cbuf, cb, 1, n, &c));
    CHECK_OK(attn_gpt_forward_step(g, c, tok, 5, step, sws, sw)); /* a prompt of 5 */
    for (int64_t t = 5; t < n; t++) CHECK_OK(attn_gpt_forward_step(g, c, tok + t, 1, step + t * V, sws, sw));
    const double e = rel_err_ff(step, full, (size_t)(n * V)), ew = rel_err_ff(full, win, (size_t)(n * V));
    CHECK(e <= 1e-5, "GPT local_global steps vs forward: %.3g", e);
    CHECK(ew == 0, "GPT local_global without globals vs window kind: %.3g", ew);
    printf("  GPT local_global (no globals), window %lld: steps vs forward %.2e, vs window kind %.2e\n", (long long)w,
           e, ew);
    free(ws), free(full), free(win), free(step), free(cbuf), free(sws);
    attn_gpt_free(g);
    attn_gpt_free(wg);
}

static void test_errors(void) {
    const lcase c = {"err", 2, 2, 2, 20, 8, 8, 3, 0, 3, 0, 0, 0};
    test_rng rng = rng_seeded(9);
    lrun r;
    lrun_init(&r, &c, &rng);
    attn_longformer_params p = r.p;
    p.window = -1;
    CHECK_STATUS(attn_longformer_forward(&r.tq, &r.tk, &r.tv, &p, &r.to, &r.tl, r.ws, r.wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "window"), "message names the window: %s", attn_last_error());
    CHECK(attn_longformer_workspace_size(&r.tq, &r.tk, &r.tv, &p) == 0, "workspace size for window -1");
    /* global mask of the wrong shape */
    attn_btensor g2 = attn_btensor_2d(r.gm, 2, 19);
    p = r.p;
    p.global_mask = &g2;
    CHECK_STATUS(attn_longformer_forward(&r.tq, &r.tk, &r.tv, &p, &r.to, &r.tl, r.ws, r.wsb), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "global_mask") && strstr(attn_last_error(), "[2, 19]"), "message: %s",
          attn_last_error());
    /* cross-attention shapes */
    attn_tensor k2 = r.tk, v2 = r.tv;
    k2.shape[2] = v2.shape[2] = 19;
    CHECK_STATUS(attn_longformer_forward(&r.tq, &k2, &v2, &r.p, &r.to, &r.tl, r.ws, r.wsb), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "self-attention"), "message: %s", attn_last_error());
    /* heads not a multiple, workspace too small, dk strides, weights rows */
    attn_tensor k3 = r.tk, v3 = r.tv;
    k3.shape[1] = v3.shape[1] = 3;
    CHECK_STATUS(attn_longformer_forward(&r.tq, &k3, &v3, &r.p, &r.to, &r.tl, r.ws, r.wsb), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_longformer_forward(&r.tq, &r.tk, &r.tv, &r.p, &r.to, &r.tl, r.ws, r.wsb / 2), ATTN_ERR_WORKSPACE);
    CHECK_OK(lrun_fwd(&r));
    attn_tensor dk2 = r.tdk;
    dk2.stride[3] = 2;
    dk2.stride[2] *= 2;
    dk2.stride[1] *= 2;
    dk2.stride[0] *= 2;
    CHECK_STATUS(
        attn_longformer_backward(&r.tq, &r.tk, &r.tv, &r.p, &r.to, &r.tgo, &r.tl, &r.tdq, &dk2, &r.tdv, r.ws, r.wsb),
        ATTN_ERR_UNSUPPORTED);
    CHECK_STATUS(
        attn_longformer_backward(&r.tq, &r.tk, &r.tv, &r.p, &r.to, &r.tgo, NULL, &r.tdq, &r.tdk, &r.tdv, r.ws, r.wsb),
        ATTN_ERR_INVALID_ARGUMENT);
    float wrow[20];
    CHECK_STATUS(attn_longformer_weights(&r.tq, &r.tk, &r.p, 0, 0, 19, 2, wrow), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_longformer_forward(&r.tq, &r.tk, &r.tv, NULL, &r.to, &r.tl, r.ws, r.wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    lrun_free(&r);
    /* the kind's option */
    attn_attention_config ac = attn_attention_config_default();
    ac.kind = ATTN_ATTENTION_LOCAL_GLOBAL;
    ac.window = -1;
    CHECK_STATUS(attn_attention_config_check(&ac), ATTN_ERR_INVALID_ARGUMENT);
    attn_mha_config mc = attn_mha_config_default(8, 2);
    mc.attention = ac;
    attn_mha *m = NULL;
    CHECK_STATUS(attn_mha_create(&mc, &m), ATTN_ERR_INVALID_ARGUMENT);
    /* dropout in training with global tokens is refused; without global tokens it is the window kind */
    mc.attention.window = 1;
    mc.dropout = 0.1f;
    CHECK_OK(attn_mha_create(&mc, &m));
    if (m) {
        float x[2 * 3 * 8] = {0}, out[2 * 3 * 8];
        uint8_t g[6] = {1, 0, 0, 0, 0, 1};
        attn_mha_args a = attn_mha_args_default();
        a.batch = 2, a.nq = a.nk = 3, a.query = a.key = a.value = x, a.global_attention_mask = g, a.training = 1;
        const size_t wsb = attn_mha_workspace_size(m, &a);
        void *ws = xmalloc(wsb);
        CHECK_STATUS(attn_mha_forward(m, &a, out, NULL, NULL, 0, ws, wsb), ATTN_ERR_UNSUPPORTED);
        CHECK(strstr(attn_last_error(), "dropout"), "message: %s", attn_last_error());
        a.global_attention_mask = NULL;
        CHECK_OK(attn_mha_forward(m, &a, out, NULL, NULL, 0, ws, wsb));
        free(ws);
        attn_mha_free(m);
    }
    attn_attention_kind k;
    CHECK_OK(attn_attention_kind_from_name("local_global", &k));
    CHECK(k == ATTN_ATTENTION_LOCAL_GLOBAL && attn_attention_kind_has_weights(k), "kind lookup");
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i], (int)i);
    test_finite_differences(0);
    test_finite_differences(1);
    test_determinism();
    test_linear_cost();
    test_mha(0);
    test_mha(1);
    test_layer();
    test_gpt_steps();
    test_errors();
    return test_summary("test_local_global");
}
