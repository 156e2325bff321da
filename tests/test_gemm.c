/* attn_sgemm / attn_sgemm_ref: every kernel this CPU runs against a float64 product (all
 * transposes, alpha/beta, padded leading dimensions, sizes around every blocking edge), bitwise
 * identity across thread counts, and argument errors. */
#include <stdint.h>

#include "kernels/gemm_internal.h"
#include "test_util.h"

static test_rng rng;

/* op(X)(i, j) of a stored row-major matrix */
static double at(const float *x, int64_t ld, int trans, int64_t i, int64_t j) {
    return trans ? x[j * ld + i] : x[i * ld + j];
}

typedef struct gcase {
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    int nan_c; /* fill C with NaN (only with beta == 0) */
} gcase;

static int64_t pad_ld(int64_t cols) {
    static const int64_t pads[] = {0, 0, 1, 3, 16};
    return cols + pads[rng_next(&rng) % 5];
}

/* Runs one case through attn_sgemm (the active kernel) and checks it against float64. */
static void run_case(const gcase *g, const char *what) {
    int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
    int64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
    size_t asz = (size_t)(ar ? (ar - 1) * g->lda + ac : 0);
    size_t bsz = (size_t)(br ? (br - 1) * g->ldb + bc : 0);
    size_t csz = (size_t)(g->m ? (g->m - 1) * g->ldc + g->n : 0);
    float *a = xmalloc(asz * sizeof(float)), *b = xmalloc(bsz * sizeof(float));
    float *c = xmalloc(csz * sizeof(float));
    fill_normal(&rng, a, asz, 1.0);
    fill_normal(&rng, b, bsz, 1.0);
    fill_normal(&rng, c, csz, 1.0);
    if (g->nan_c)
        for (size_t i = 0; i < csz; i++) c[i] = NAN;
    double *ref = xmalloc((size_t)(g->m * g->n) * sizeof(double) + 1);
    double *bound = xmalloc((size_t)(g->m * g->n) * sizeof(double) + 1); /* |alpha| |A||B| + |beta| |C| */
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            double s = 0, sa = 0;
            for (int64_t p = 0; p < g->k; p++) {
                const double t = at(a, g->lda, g->ta, i, p) * at(b, g->ldb, g->tb, p, j);
                s += t;
                sa += fabs(t);
            }
            double r = g->alpha * s, ra = fabs(g->alpha) * sa;
            if (g->beta != 0.0f) {
                r += (double)g->beta * c[i * g->ldc + j];
                ra += fabs((double)g->beta * c[i * g->ldc + j]);
            }
            ref[i * g->n + j] = r;
            bound[i * g->n + j] = ra;
        }
    /* padding of C between rows must stay untouched */
    float *pad_before = xmalloc(csz * sizeof(float) + 1);
    memcpy(pad_before, c, csz * sizeof(float));

    size_t wsb = attn_sgemm_workspace_size(g->m, g->n, g->k);
    void *ws = wsb ? xmalloc(wsb) : NULL;
    attn_status st = attn_sgemm(g->ta ? ATTN_TRANS : ATTN_NO_TRANS, g->tb ? ATTN_TRANS : ATTN_NO_TRANS, g->m, g->n,
                                g->k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc, ws, wsb);
    CHECK(st == ATTN_OK, "%s: attn_sgemm -> %s: %s", what, attn_status_str(st), attn_last_error());
    float *out = xmalloc((size_t)(g->m * g->n) * sizeof(float) + 1);
    int pad_ok = 1;
    for (int64_t i = 0; i < g->m; i++) {
        memcpy(out + i * g->n, c + i * g->ldc, (size_t)g->n * sizeof(float));
        if (i + 1 < g->m)
            for (int64_t j = g->n; j < g->ldc; j++)
                if (memcmp(&c[i * g->ldc + j], &pad_before[i * g->ldc + j], sizeof(float))) pad_ok = 0;
    }
    /* Relative to the result; where the sum cancels (tiny m, n, k make that likely), float
     * rounding is bounded by |alpha||A||B| + |beta||C| instead, so the error is also measured
     * against that: a wrong result fails both. */
    double err = rel_err_fd(out, ref, (size_t)(g->m * g->n)), diff = 0, bn = 0;
    for (size_t i = 0; i < (size_t)(g->m * g->n); i++) {
        diff += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]);
        bn += bound[i] * bound[i];
    }
    const double err_bound = bn > 0 ? sqrt(diff / bn) : sqrt(diff);
    if (!(err <= 1e-5) && err_bound <= 1e-6) err = err_bound;
    CHECK(err <= 1e-5,
          "%s [%s]: m=%lld n=%lld k=%lld trans=%c%c ld=%lld,%lld,%lld alpha=%g beta=%g%s: "
          "rel err %.3g",
          what, attn_isa_name(attn_active_isa()), (long long)g->m, (long long)g->n, (long long)g->k, g->ta ? 'T' : 'N',
          g->tb ? 'T' : 'N', (long long)g->lda, (long long)g->ldb, (long long)g->ldc, g->alpha, g->beta,
          g->nan_c ? " (NaN C)" : "", err);
    free(bound);
    CHECK(pad_ok, "%s: C's padding between rows was written (m=%lld n=%lld ldc=%lld)", what, (long long)g->m,
          (long long)g->n, (long long)g->ldc);
    free(a);
    free(b);
    free(c);
    free(ref);
    free(out);
    free(ws);
    free(pad_before);
}

static gcase random_case(int64_t m, int64_t n, int64_t k) {
    static const float alphas[] = {1.0f, -1.0f, 0.5f, 1.75f};
    static const float betas[] = {0.0f, 1.0f, -0.5f, 2.0f};
    gcase g;
    g.ta = (int)(rng_next(&rng) & 1);
    g.tb = (int)(rng_next(&rng) & 1);
    g.m = m, g.n = n, g.k = k;
    g.lda = pad_ld(g.ta ? m : k);
    g.ldb = pad_ld(g.tb ? k : n);
    g.ldc = pad_ld(n);
    g.alpha = alphas[rng_next(&rng) % 4];
    g.beta = betas[rng_next(&rng) % 4];
    g.nan_c = g.beta == 0.0f && (rng_next(&rng) & 1);
    return g;
}

static void test_isa(void) {
    const attn_gemm_arch *ar = attn_gemm_arch_active();
    /* 1. every small size combination, random transposes / alpha / beta / padding */
    static const int64_t small[] = {1, 2, 3, 4, 5, 7, 15, 16, 17, 31, 33};
    const int ns = (int)(sizeof small / sizeof small[0]);
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++)
            for (int l = 0; l < ns; l++) {
                gcase g = random_case(small[i], small[j], small[l]);
                run_case(&g, "small");
            }
    /* 2. each transpose pair, each beta kind, on a shape with partial tiles in m and n */
    for (int t = 0; t < 4; t++) {
        static const float betas[] = {0.0f, 1.0f, 0.25f};
        for (int bi = 0; bi < 3; bi++) {
            gcase g = random_case(ar->mr * 3 + 1, ar->nr * 2 + 3, 63);
            g.ta = t >> 1, g.tb = t & 1;
            g.lda = pad_ld(g.ta ? g.m : g.k), g.ldb = pad_ld(g.tb ? g.k : g.n);
            g.beta = betas[bi];
            g.nan_c = g.beta == 0.0f;
            run_case(&g, "transposes");
        }
    }
    /* 3. around the blocking edges of this kernel */
    const int64_t MR = ar->mr, NR = ar->nr, KC = ar->kc, MC = ar->mc, NC = ar->nc;
    const int64_t edges[][3] = {
        {MR - 1, NR - 1, 1},
        {MR, NR, KC},
        {MR + 1, NR + 1, KC + 1},
        {2 * MR, 3 * NR + 5, KC - 1},
        {MC - 1, 33, 17},
        {MC, 17, KC + 1},
        {MC + 1, 31, 65},
        {65, NC - 1, KC - 1},
        {33, NC, 33},
        {17, NC + 1, 2 * KC + 1},
        {63, 65, 127},
        {127, 255, 257},
        {255, 257, 63},
        {257, 63, 255},
        {300, 300, 300},
        {1, 3 * NR + 7, KC + 3},
        {2, 300, 2 * KC + 1},
        {MR + 3, 257, 300},
        {2 * MR, 65, 255},
        {2 * MR + 1, 64, 129},
        {3, 257, 2 * KC + 1},
        {4, 300, KC + 1},
        {2, 97, KC - 1},
        {4, 1000, 33},
    };
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
        if (edges[e][0] < 1 || edges[e][1] < 1 || edges[e][2] < 1) continue;
        gcase g = random_case(edges[e][0], edges[e][1], edges[e][2]);
        run_case(&g, "edges");
    }
    /* 4. skinny transformer-like shapes (few-row kernel and in-place B reads for NN) */
    for (int t = 0; t < 4; t++) {
        gcase g = random_case(t & 2 ? 7 : 1, 700, 515);
        g.ta = 0, g.tb = t & 1, g.lda = pad_ld(g.k), g.ldb = pad_ld(g.tb ? g.k : g.n);
        run_case(&g, "skinny");
    }
    /* 5. alpha == 0 and k == 0: C = beta * C */
    {
        gcase g = random_case(9, 40, 13);
        g.alpha = 0.0f;
        run_case(&g, "alpha=0");
        g = random_case(9, 40, 0);
        run_case(&g, "k=0");
    }
}

/* op(B) = B^T with m = 1..5 rows: the few-row kernel for B^T (m <= rows_max) must give bitwise
 * what the packed path gives. The packed path is forced by embedding the m rows in a 16-row call
 * (16 > rows_max and > MR): per-row results never depend on m. Threads 1, 2, 3 bitwise equal too;
 * the float64 reference through run_case. */
static void rows_t_case(int64_t m, int64_t n, int64_t k, float alpha, float beta) {
    const int64_t M = 16;
    const int ta = (int)(rng_next(&rng) & 1);
    const int64_t lda = pad_ld(ta ? M : k), ldb = pad_ld(k), ldc = pad_ld(n);
    const size_t asz = (size_t)(ta ? (k - 1) * lda + M : (M - 1) * lda + k), bsz = (size_t)((n - 1) * ldb + k);
    const size_t csz = (size_t)((M - 1) * ldc + n);
    float *a = xmalloc(asz * sizeof(float)), *b = xmalloc(bsz * sizeof(float));
    float *c0 = xmalloc(csz * sizeof(float)), *big = xmalloc(csz * sizeof(float)), *c = xmalloc(csz * sizeof(float));
    fill_normal(&rng, a, asz, 1.0);
    fill_normal(&rng, b, bsz, 1.0);
    fill_normal(&rng, c0, csz, 1.0);
    const attn_transpose tra = ta ? ATTN_TRANS : ATTN_NO_TRANS;
    int saved = attn_get_num_threads();
    attn_set_num_threads(3);
    size_t wsb = attn_sgemm_workspace_size(M, n, k);
    void *ws = xmalloc(wsb);
    memcpy(big, c0, csz * sizeof(float));
    CHECK_OK(attn_sgemm(tra, ATTN_TRANS, M, n, k, alpha, a, lda, b, ldb, beta, big, ldc, ws, wsb));
    for (int t = 1; t <= 3; t++) {
        attn_set_num_threads(t);
        memcpy(c, c0, csz * sizeof(float));
        CHECK_OK(attn_sgemm(tra, ATTN_TRANS, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ws, wsb));
        int same = 1;
        for (int64_t i = 0; i < m; i++) same &= !memcmp(c + i * ldc, big + i * ldc, (size_t)n * sizeof(float));
        /* rows past m and the padding between rows untouched */
        same &= !memcmp(c + m * ldc, c0 + m * ldc, (csz - (size_t)(m * ldc)) * sizeof(float));
        for (int64_t i = 0; i + 1 < m; i++)
            same &= !memcmp(c + i * ldc + n, c0 + i * ldc + n, (size_t)(ldc - n) * sizeof(float));
        CHECK(same,
              "[%s] B^T few rows: m=%lld n=%lld k=%lld trans=%cT ld=%lld,%lld,%lld alpha=%g beta=%g, %d threads: "
              "not bitwise equal to the packed path",
              attn_isa_name(attn_active_isa()), (long long)m, (long long)n, (long long)k, ta ? 'T' : 'N',
              (long long)lda, (long long)ldb, (long long)ldc, alpha, beta, t);
    }
    attn_set_num_threads(saved);
    gcase g = {ta, 1, m, n, k, pad_ld(ta ? m : k), pad_ld(k), pad_ld(n), alpha, beta, beta == 0.0f};
    run_case(&g, "B^T few rows");
    free(a);
    free(b);
    free(c0);
    free(big);
    free(c);
    free(ws);
}

static void test_rows_t(void) {
    const attn_gemm_arch *ar = attn_gemm_arch_active();
    const int64_t NR = ar->nr, KC = ar->kc;
    const int64_t shapes[][2] = {
        {1, 1},   {17, 33},       {NR * 3 + 5, KC + 7}, {300, 2 * KC + 5}, {64, 256},
        {97, 15}, {1000, KC - 1}, {33, 3 * KC},         {777, 768},        {5, 2 * KC},
    };
    static const float alphas[] = {1.0f, -1.0f, 0.5f, 1.75f};
    static const float betas[] = {0.0f, 1.0f, -0.5f, 2.0f};
    for (int64_t m = 1; m <= 5; m++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            rows_t_case(m, shapes[s][0], shapes[s][1], alphas[rng_next(&rng) % 4], betas[(m + (int64_t)s) % 4]);
}

/* Same inputs, threads 1..4: results must be bitwise identical. kdiv shrinks k for the slow
 * portable kernel (the sanitizer build runs it unoptimised). */
static void test_threads(int kdiv) {
    static const struct {
        int ta, tb;
        int64_t m, n, k;
    } shapes[] = {
        {0, 0, 300, 257, 700}, {0, 1, 130, 1000, 300}, {1, 0, 1000, 40, 500},
        {0, 0, 5, 900, 800},   {1, 1, 77, 333, 450},   {0, 0, 3, 1500, 700},
    };
    int saved = attn_get_num_threads();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t m = shapes[s].m, n = shapes[s].n, k = shapes[s].k / kdiv + 1;
        int ta = shapes[s].ta, tb = shapes[s].tb;
        float *a = xmalloc((size_t)(m * k) * sizeof(float));
        float *b = xmalloc((size_t)(k * n) * sizeof(float));
        float *c0 = xmalloc((size_t)(m * n) * sizeof(float));
        float *c = xmalloc((size_t)(m * n) * sizeof(float));
        float *first = xmalloc((size_t)(m * n) * sizeof(float));
        fill_normal(&rng, a, (size_t)(m * k), 1.0);
        fill_normal(&rng, b, (size_t)(k * n), 1.0);
        fill_normal(&rng, c0, (size_t)(m * n), 1.0);
        attn_set_num_threads(4);
        size_t wsb = attn_sgemm_workspace_size(m, n, k);
        void *ws = xmalloc(wsb);
        for (int t = 1; t <= 4; t++) {
            attn_set_num_threads(t);
            memcpy(c, c0, (size_t)(m * n) * sizeof(float));
            CHECK_OK(attn_sgemm(ta ? ATTN_TRANS : ATTN_NO_TRANS, tb ? ATTN_TRANS : ATTN_NO_TRANS, m, n, k, 0.75f, a,
                                ta ? m : k, b, tb ? k : n, 0.5f, c, n, ws, wsb));
            if (t == 1)
                memcpy(first, c, (size_t)(m * n) * sizeof(float));
            else
                CHECK(!memcmp(first, c, (size_t)(m * n) * sizeof(float)),
                      "[%s] m=%lld n=%lld k=%lld: %d threads differ from 1 thread", attn_isa_name(attn_active_isa()),
                      (long long)m, (long long)n, (long long)k, t);
        }
        /* a workspace sized for one thread also works (fewer threads, same bits) */
        attn_set_num_threads(1);
        size_t ws1 = attn_sgemm_workspace_size(m, n, k);
        attn_set_num_threads(4);
        memcpy(c, c0, (size_t)(m * n) * sizeof(float));
        CHECK_OK(attn_sgemm(ta ? ATTN_TRANS : ATTN_NO_TRANS, tb ? ATTN_TRANS : ATTN_NO_TRANS, m, n, k, 0.75f, a,
                            ta ? m : k, b, tb ? k : n, 0.5f, c, n, ws, ws1));
        CHECK(!memcmp(first, c, (size_t)(m * n) * sizeof(float)),
              "one-thread workspace with 4 threads set changes the result");
        free(a);
        free(b);
        free(c0);
        free(c);
        free(first);
        free(ws);
    }
    attn_set_num_threads(saved);
}

static void test_ref(void) {
    /* the oracle itself, against float64 */
    for (int t = 0; t < 4; t++) {
        int64_t m = 13, n = 21, k = 37;
        gcase g = random_case(m, n, k);
        g.ta = t >> 1, g.tb = t & 1;
        g.lda = g.ta ? m : k, g.ldb = g.tb ? k : n, g.ldc = n;
        float *a = xmalloc((size_t)(m * k) * 4), *b = xmalloc((size_t)(k * n) * 4);
        float *c = xmalloc((size_t)(m * n) * 4);
        double *ref = xmalloc((size_t)(m * n) * 8);
        fill_normal(&rng, a, (size_t)(m * k), 1.0);
        fill_normal(&rng, b, (size_t)(k * n), 1.0);
        for (int64_t i = 0; i < m * n; i++) c[i] = g.beta == 0.0f ? NAN : 1.0f;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++) s += at(a, g.lda, g.ta, i, p) * at(b, g.ldb, g.tb, p, j);
                ref[i * n + j] = g.alpha * s + (g.beta != 0.0f ? g.beta : 0.0);
            }
        CHECK_OK(attn_sgemm_ref(g.ta ? ATTN_TRANS : ATTN_NO_TRANS, g.tb ? ATTN_TRANS : ATTN_NO_TRANS, m, n, k, g.alpha,
                                a, g.lda, b, g.ldb, g.beta, c, g.ldc));
        double err = rel_err_fd(c, ref, (size_t)(m * n));
        CHECK(err <= 1e-5, "attn_sgemm_ref trans=%d%d: rel err %.3g", g.ta, g.tb, err);
        free(a);
        free(b);
        free(c);
        free(ref);
    }
}

static void test_errors(void) {
    float a[64] = {0}, b[64] = {0}, c[64] = {0};
    size_t wsb = attn_sgemm_workspace_size(4, 4, 4);
    void *ws = xmalloc(wsb);
    const attn_transpose N = ATTN_NO_TRANS, T = ATTN_TRANS;
    CHECK(wsb > 0, "workspace size for 4x4x4 is 0");
    CHECK(attn_sgemm_workspace_size(0, 4, 4) == 0, "workspace for m = 0 not 0");
    CHECK(attn_sgemm_workspace_size(-1, 4, 4) == 0, "workspace for m = -1 not 0");
    CHECK_OK(attn_sgemm(N, N, 4, 4, 4, 1, a, 4, b, 4, 0, c, 4, ws, wsb));

    CHECK_STATUS(attn_sgemm(N, N, -1, 4, 4, 1, a, 4, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(N, N, 4, -2, 4, 1, a, 4, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(N, N, 4, 4, -3, 1, a, 4, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm((attn_transpose)7, N, 4, 4, 4, 1, a, 4, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(N, (attn_transpose)-1, 4, 4, 4, 1, a, 4, b, 4, 0, c, 4, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(N, N, 4, 4, 4, 1, NULL, 4, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(N, N, 4, 4, 4, 1, a, 4, NULL, 4, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(N, N, 4, 4, 4, 1, a, 4, b, 4, 0, NULL, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    /* leading dimensions: NoTrans A is m x k (lda >= k), Trans A is k x m (lda >= m) */
    CHECK_STATUS(attn_sgemm(N, N, 4, 4, 5, 1, a, 4, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(T, N, 5, 4, 4, 1, a, 4, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(N, N, 4, 5, 4, 1, a, 4, b, 4, 0, c, 5, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(N, T, 4, 4, 5, 1, a, 5, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm(N, N, 4, 5, 4, 1, a, 4, b, 5, 0, c, 4, ws, wsb), ATTN_ERR_INVALID_ARGUMENT);
    /* workspace */
    CHECK_STATUS(attn_sgemm(N, N, 4, 4, 4, 1, a, 4, b, 4, 0, c, 4, NULL, wsb), ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_sgemm(N, N, 4, 4, 4, 1, a, 4, b, 4, 0, c, 4, ws, 16), ATTN_ERR_WORKSPACE);
    /* size arithmetic that cannot be represented */
    CHECK_STATUS(attn_sgemm(N, N, INT64_MAX / 2, 4, 4, 1, a, 4, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_OVERFLOW);
    CHECK_STATUS(attn_sgemm(N, N, 4, 4, 4, 1, a, INT64_MAX / 2, b, 4, 0, c, 4, ws, wsb), ATTN_ERR_OVERFLOW);
    /* the oracle validates the same way */
    CHECK_STATUS(attn_sgemm_ref(N, N, 4, 4, 5, 1, a, 4, b, 4, 0, c, 4), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_sgemm_ref(N, N, 4, 4, 4, 1, a, 4, NULL, 4, 0, c, 4), ATTN_ERR_INVALID_ARGUMENT);
    /* empty products are valid and need no workspace; NULLs are fine when nothing is read */
    CHECK_OK(attn_sgemm(N, N, 0, 4, 4, 1, NULL, 4, b, 4, 0, NULL, 4, NULL, 0));
    CHECK_OK(attn_sgemm(N, N, 4, 0, 4, 1, a, 4, NULL, 0, 0, NULL, 0, NULL, 0));
    for (int i = 0; i < 16; i++) c[i] = 2.0f;
    CHECK_OK(attn_sgemm(N, N, 4, 4, 0, 1, NULL, 0, NULL, 4, 0.5f, c, 4, NULL, 0));
    CHECK(c[0] == 1.0f && c[15] == 1.0f, "k = 0: C = beta * C, got %g", c[0]);
    free(ws);
}

int main(void) {
    rng = rng_seeded(20240611);
    printf("test_gemm: seed %llu\n", (unsigned long long)rng.s);
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        const attn_gemm_arch *ar = attn_gemm_arch_active();
        CHECK(!strcmp(ar->name, attn_isa_name((attn_isa)isa)), "gemm dispatch: active arch %s for forced %s", ar->name,
              attn_isa_name((attn_isa)isa));
        printf("test_gemm: %s kernel %dx%d, KC %d, MC %d, NC %d\n", attn_isa_name((attn_isa)isa), ar->mr, ar->nr,
               ar->kc, ar->mc, ar->nc);
        test_isa();
        test_threads(isa == ATTN_ISA_REF ? 4 : 1);
        test_rows_t();
    }
    CHECK_OK(attn_force_isa(attn_detected_isa()));
    test_ref();
    test_errors();
    return test_summary("test_gemm");
}
