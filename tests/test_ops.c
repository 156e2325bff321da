/* Row-wise / elementwise ops against float64 references written here, for every ISA the CPU
 * runs: softmax, layernorm, GELU (erf, tanh), ReLU, bias add, residual add, forward and
 * backward. The float64 analytic gradients are themselves checked against central finite
 * differences of the float64 forwards, so the gradient formulas are verified, not just
 * self-consistent. Also: softmax edge cases (-inf, all -inf rows, +-1e4, +-FLT_MAX), in-place
 * calls, bitwise identical results for 1..4 threads, argument errors, and the PyTorch fixture
 * tests/parity/fixtures/ops.safetensors (tests/parity/gen_ops.py). The Llama family's row kernels
 * (RMSNorm, the SwiGLU gate; the ops table's, not public) against float64 the same way. */
#include <float.h>

#include "kernels/ops_internal.h"
#include "test_util.h"

#define PI_D 3.14159265358979323846
#define SQRT1_2_D 0.70710678118654752440

static const int64_t SIZES[] = {1, 7, 8, 15, 16, 17, 31, 33, 64, 100, 1000, 4097};
#define NSIZES ((int)(sizeof SIZES / sizeof SIZES[0]))
#define FD_MAX_N 100 /* finite differences (O(n^2) per row) up to this row length */

/* ---- error bookkeeping: worst relative error per op and ISA, printed at the end ----------- */
enum {
    OP_SOFTMAX_F,
    OP_SOFTMAX_B,
    OP_LN_F,
    OP_LN_STATS,
    OP_LN_B,
    OP_LN_PARAM,
    OP_GELU_ERF_F,
    OP_GELU_ERF_B,
    OP_GELU_TANH_F,
    OP_GELU_TANH_B,
    OP_GELU_ERF_ELEM,
    OP_GELU_TANH_ELEM,
    OP_RELU_F,
    OP_RELU_B,
    OP_BIAS_F,
    OP_BIAS_B,
    OP_RESID,
    OP_RMS_F,
    OP_SILU_GATE,
    OP_COUNT
};
static const char *op_names[OP_COUNT] = {"softmax fwd",
                                         "softmax bwd",
                                         "layernorm fwd",
                                         "layernorm mean/rstd",
                                         "layernorm bwd dx",
                                         "layernorm dgamma/dbeta",
                                         "gelu erf fwd",
                                         "gelu erf bwd",
                                         "gelu tanh fwd",
                                         "gelu tanh bwd",
                                         "gelu erf fwd (max elementwise)",
                                         "gelu tanh fwd (max elementwise)",
                                         "relu fwd",
                                         "relu bwd",
                                         "bias add",
                                         "bias bwd",
                                         "residual add",
                                         "rmsnorm fwd",
                                         "silu gate (max elementwise)"};
static double worst[OP_COUNT][3];
static double worst_fd[OP_COUNT];

static void record(int op, attn_isa isa, double e) {
    if (!(e <= worst[op][isa])) worst[op][isa] = e; /* NaN sticks */
}

#define CHECK_REL(op, isa, got, ref, n, tol, what, ncols)                                                              \
    do {                                                                                                               \
        double e_ = rel_err_fd(got, ref, (size_t)(n));                                                                 \
        record(op, isa, e_);                                                                                           \
        CHECK(e_ <= (tol), "%s: %s n=%lld: rel err %.3g > %.1g", attn_isa_name(isa), what, (long long)(ncols), e_,     \
              (double)(tol));                                                                                          \
    } while (0)

static void record_fd(int op, double e, const char *what, int64_t n) {
    if (!(e <= worst_fd[op])) worst_fd[op] = e;
    CHECK(e <= 1e-6, "%s n=%lld: float64 analytic gradient vs finite differences: %.3g", what, (long long)n, e);
}

static double *to_d(const float *x, size_t n) {
    double *d = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* central difference step for a coordinate of magnitude |v| */
static double fd_step(double v) { return 1e-5 * (fabs(v) > 1.0 ? fabs(v) : 1.0); }

/* ---- float64 references ------------------------------------------------------------------ */

static void softmax64(const double *x, double *y, int64_t n) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (mx == -INFINITY) {
        for (int64_t i = 0; i < n; i++) y[i] = 0;
        return;
    }
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (y[i] = exp(x[i] - mx));
    for (int64_t i = 0; i < n; i++) y[i] /= s;
}

/* gradient of L = sum(dy * softmax(x)) */
static void softmax_bwd64(const double *y, const double *dy, double *dx, int64_t n) {
    double dot = 0;
    for (int64_t i = 0; i < n; i++) dot += dy[i] * y[i];
    for (int64_t i = 0; i < n; i++) dx[i] = y[i] * (dy[i] - dot);
}

static void layernorm64(const double *x, const double *g, const double *b, double *y, int64_t n, double eps,
                        double *mean_out, double *rstd_out) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; i++) m += x[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    v /= (double)n; /* biased, as torch.nn.LayerNorm */
    double rs = 1.0 / sqrt(v + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * rs * (g ? g[i] : 1.0) + (b ? b[i] : 0.0);
    if (mean_out) *mean_out = m;
    if (rstd_out) *rstd_out = rs;
}

/* gradient of L = sum(dy * layernorm(x)) w.r.t. x (written), gamma, beta (accumulated) */
static void layernorm_bwd64(const double *x, const double *g, const double *dy, int64_t n, double eps, double *dx,
                            double *dg, double *db) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; i++) m += x[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    v /= (double)n;
    double rs = 1.0 / sqrt(v + eps), sg = 0, sgx = 0;
    for (int64_t i = 0; i < n; i++) {
        double gi = dy[i] * (g ? g[i] : 1.0), xh = (x[i] - m) * rs;
        sg += gi;
        sgx += gi * xh;
        if (dg) dg[i] += dy[i] * xh;
        if (db) db[i] += dy[i];
    }
    for (int64_t i = 0; i < n; i++) {
        double gi = dy[i] * (g ? g[i] : 1.0), xh = (x[i] - m) * rs;
        dx[i] = rs * (gi - sg / (double)n - xh * sgx / (double)n);
    }
}

/* PyTorch's formulas (approximate='none' / 'tanh') */
static double gelu64(double x, int tanh_form) {
    if (tanh_form) {
        double u = sqrt(2.0 / PI_D) * (x + 0.044715 * x * x * x);
        return 0.5 * x * (1.0 + tanh(u));
    }
    return 0.5 * x * (1.0 + erf(x * SQRT1_2_D));
}

static double gelu_grad64(double x, int tanh_form) {
    if (tanh_form) {
        const double k = sqrt(2.0 / PI_D), c = 0.044715;
        double t = tanh(k * (x + c * x * x * x));
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
    }
    double cdf = 0.5 * (1.0 + erf(x * SQRT1_2_D));
    double pdf = exp(-0.5 * x * x) / sqrt(2.0 * PI_D);
    return cdf + x * pdf;
}

/* The same functions without the 1 + erf / 1 + tanh cancellation, for elementwise checks in
 * the left tail: 1 + erf(z) = erfc(-z), 1 + tanh(u) = 2 / (1 + e^(-2u)). */
static double gelu64_tail(double x, int tanh_form) {
    if (tanh_form) {
        double u = sqrt(2.0 / PI_D) * (x + 0.044715 * x * x * x);
        return x / (1.0 + exp(-2.0 * u));
    }
    return 0.5 * x * erfc(-x * SQRT1_2_D);
}

/* ---- softmax ----------------------------------------------------------------------------- */

static void test_softmax(attn_isa isa, test_rng *rng) {
    for (int s = 0; s < NSIZES; s++) {
        const int64_t n = SIZES[s], rows = 3, tot = rows * n;
        float *x = xmalloc(tot * sizeof(float)), *y = xmalloc(tot * sizeof(float));
        float *dy = xmalloc(tot * sizeof(float)), *dx = xmalloc(tot * sizeof(float));
        double *y64 = xmalloc(tot * sizeof(double)), *dx64 = xmalloc(tot * sizeof(double));
        fill_normal(rng, x, (size_t)tot, 3.0);
        fill_normal(rng, dy, (size_t)tot, 1.0);
        double *xd = to_d(x, (size_t)tot), *dyd = to_d(dy, (size_t)tot);
        for (int64_t r = 0; r < rows; r++) softmax64(xd + r * n, y64 + r * n, n);
        CHECK_OK(attn_softmax_forward(x, y, rows, n));
        CHECK_REL(OP_SOFTMAX_F, isa, y, y64, tot, 1e-6, "softmax forward", n);

        /* backward: the library gets y (its float forward) and dy; the reference is the float64
         * formula on the same y (the formula itself is checked against finite differences of
         * sum(dy * softmax64(x)) below) */
        double *yfd = to_d(y, (size_t)tot);
        for (int64_t r = 0; r < rows; r++) softmax_bwd64(yfd + r * n, dyd + r * n, dx64 + r * n, n);
        free(yfd);
        CHECK_OK(attn_softmax_backward(y, dy, dx, rows, n));
        CHECK_REL(OP_SOFTMAX_B, isa, dx, dx64, tot, 1e-5, "softmax backward", n);

        /* in place: y == x, dx == dy */
        float *t = xmalloc(tot * sizeof(float)), *t2 = xmalloc(tot * sizeof(float));
        memcpy(t, x, tot * sizeof(float));
        CHECK_OK(attn_softmax_forward(t, t, rows, n));
        CHECK(!memcmp(t, y, tot * sizeof(float)), "%s: in-place softmax differs n=%lld", attn_isa_name(isa),
              (long long)n);
        memcpy(t2, dy, tot * sizeof(float));
        CHECK_OK(attn_softmax_backward(y, t2, t2, rows, n));
        CHECK(!memcmp(t2, dx, tot * sizeof(float)), "%s: in-place softmax backward differs", attn_isa_name(isa));

        /* the float64 gradient formula against finite differences of L(x) = sum(dy *
         * softmax64(x)), at a less peaked x (unit scale) so that the gradient is not tiny */
        if (isa == ATTN_ISA_REF && n <= FD_MAX_N) {
            double *fd = xmalloc(n * sizeof(double)), *yy = xmalloc(n * sizeof(double));
            double *xx = xmalloc(n * sizeof(double)), *an = xmalloc(n * sizeof(double));
            for (int64_t i = 0; i < n; i++) xx[i] = rng_normal(rng);
            softmax64(xx, yy, n);
            softmax_bwd64(yy, dyd, an, n);
            for (int64_t i = 0; i < n; i++) {
                double h = fd_step(xx[i]), v = xx[i], lp = 0, lm = 0;
                xx[i] = v + h;
                softmax64(xx, yy, n);
                for (int64_t j = 0; j < n; j++) lp += dyd[j] * yy[j];
                xx[i] = v - h;
                softmax64(xx, yy, n);
                for (int64_t j = 0; j < n; j++) lm += dyd[j] * yy[j];
                xx[i] = v;
                fd[i] = (lp - lm) / (2 * h);
            }
            if (n > 1) record_fd(OP_SOFTMAX_B, rel_err_dd(an, fd, (size_t)n), "softmax", n);
            free(fd), free(yy), free(xx), free(an);
        }
        free(x), free(y), free(dy), free(dx), free(y64), free(dx64), free(xd), free(dyd);
        free(t), free(t2);
    }
}

static void test_softmax_edges(attn_isa isa, test_rng *rng) {
    for (int s = 0; s < NSIZES; s++) {
        const int64_t n = SIZES[s], rows = 6, tot = rows * n;
        float *x = xmalloc(tot * sizeof(float)), *y = xmalloc(tot * sizeof(float));
        double *y64 = xmalloc(tot * sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            double z = rng_normal(rng);
            x[0 * n + i] = i % 3 == 1 ? -INFINITY : (float)z;                  /* some -inf */
            x[1 * n + i] = -INFINITY;                                          /* all -inf */
            x[2 * n + i] = (float)((rng_uniform(rng) < 0.5 ? -1e4 : 1e4) + z); /* +-1e4 */
            x[3 * n + i] = (float)(1e4 * z);                                   /* scale 1e4 */
            x[4 * n + i] = i % 2 ? -FLT_MAX : FLT_MAX;                         /* +-FLT_MAX */
            x[5 * n + i] = 1e4f;                                               /* constant */
        }
        double *xd = to_d(x, (size_t)tot);
        for (int64_t r = 0; r < rows; r++) softmax64(xd + r * n, y64 + r * n, n);
        CHECK_OK(attn_softmax_forward(x, y, rows, n));
        int nan = 0, nonzero = 0;
        for (int64_t i = 0; i < tot; i++) nan += !isfinite(y[i]);
        for (int64_t i = 0; i < n; i++) nonzero += y[n + i] != 0.0f;
        CHECK(nan == 0, "%s: softmax edge rows n=%lld: %d non-finite outputs", attn_isa_name(isa), (long long)n, nan);
        CHECK(nonzero == 0, "%s: all -inf row n=%lld: %d nonzero outputs", attn_isa_name(isa), (long long)n, nonzero);
        for (int64_t r = 0; r < rows; r++) {
            char what[48];
            snprintf(what, sizeof what, "softmax edge row %lld", (long long)r);
            CHECK_REL(OP_SOFTMAX_F, isa, y + r * n, y64 + r * n, n, 1e-6, what, n);
        }
        /* -inf entries are exactly 0 */
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad += i % 3 == 1 && y[i] != 0.0f;
        CHECK(bad == 0, "%s: softmax of -inf entries not 0", attn_isa_name(isa));
        free(x), free(y), free(y64), free(xd);
    }
}

/* ---- layernorm --------------------------------------------------------------------------- */

static void test_layernorm(attn_isa isa, test_rng *rng) {
    const double eps = 1e-5;
    for (int s = 0; s < NSIZES; s++) {
        const int64_t n = SIZES[s], rows = 5, tot = rows * n;
        for (int affine = 0; affine < 3; affine++) { /* 0: none, 1: gamma+beta, 2: gamma only */
            float *x = xmalloc(tot * sizeof(float)), *y = xmalloc(tot * sizeof(float));
            float *dy = xmalloc(tot * sizeof(float)), *dx = xmalloc(tot * sizeof(float));
            float *g = xmalloc(n * sizeof(float)), *b = xmalloc(n * sizeof(float));
            float *dg = xmalloc(n * sizeof(float)), *db = xmalloc(n * sizeof(float));
            float *dg0 = xmalloc(n * sizeof(float)), *db0 = xmalloc(n * sizeof(float));
            float mean[5], rstd[5];
            fill_normal(rng, x, (size_t)tot, 2.0);
            for (int64_t i = 0; i < tot; i++) x[i] += 0.5f;
            fill_normal(rng, dy, (size_t)tot, 1.0);
            fill_normal(rng, g, (size_t)n, 0.5);
            for (int64_t i = 0; i < n; i++) g[i] += 1.0f;
            fill_normal(rng, b, (size_t)n, 0.5);
            fill_normal(rng, dg0, (size_t)n, 1.0); /* for the accumulation check */
            fill_normal(rng, db0, (size_t)n, 1.0);
            memset(dg, 0, n * sizeof(float));
            memset(db, 0, n * sizeof(float));
            const float *gp = affine ? g : NULL, *bp = affine == 1 ? b : NULL;

            double *xd = to_d(x, (size_t)tot), *dyd = to_d(dy, (size_t)tot);
            double *gd = to_d(g, (size_t)n), *bd = to_d(b, (size_t)n);
            double *y64 = xmalloc(tot * sizeof(double)), *dx64 = xmalloc(tot * sizeof(double));
            double *dg64 = calloc((size_t)n, sizeof(double)), *db64 = calloc((size_t)n, sizeof(double));
            double m64[5], r64[5];
            for (int64_t r = 0; r < rows; r++) {
                layernorm64(xd + r * n, affine ? gd : NULL, affine == 1 ? bd : NULL, y64 + r * n, n, eps, &m64[r],
                            &r64[r]);
                layernorm_bwd64(xd + r * n, affine ? gd : NULL, dyd + r * n, n, eps, dx64 + r * n, dg64, db64);
            }
            CHECK_OK(attn_layernorm_forward(x, gp, bp, y, mean, rstd, rows, n, (float)eps));
            char what[64];
            snprintf(what, sizeof what, "layernorm forward (affine %d)", affine);
            if (n == 1) {
                /* x - mean = 0: y is beta (or 0) exactly, the relative error is meaningless */
                int ok = 1;
                for (int64_t r = 0; r < rows; r++) ok &= y[r] == (bp ? bp[0] : 0.0f);
                CHECK(ok, "%s: n=1 layernorm is not beta", attn_isa_name(isa));
            } else {
                CHECK_REL(OP_LN_F, isa, y, y64, tot, 1e-6, what, n);
            }
            CHECK_REL(OP_LN_STATS, isa, mean, m64, rows, 1e-6, "layernorm mean", n);
            CHECK_REL(OP_LN_STATS, isa, rstd, r64, rows, 1e-6, "layernorm rstd", n);

            CHECK_OK(attn_layernorm_backward(x, gp, mean, rstd, dy, dx, dg, db, rows, n));
            snprintf(what, sizeof what, "layernorm backward dx (affine %d)", affine);
            if (n > 1) CHECK_REL(OP_LN_B, isa, dx, dx64, tot, 1e-5, what, n);
            if (n > 1) CHECK_REL(OP_LN_PARAM, isa, dg, dg64, n, 1e-5, "layernorm dgamma", n);
            CHECK_REL(OP_LN_PARAM, isa, db, db64, n, 1e-5, "layernorm dbeta", n);
            /* dgamma/dbeta accumulate: out = old + (the same sum) */
            float *dga = xmalloc(n * sizeof(float)), *dba = xmalloc(n * sizeof(float));
            memcpy(dga, dg0, n * sizeof(float));
            memcpy(dba, db0, n * sizeof(float));
            CHECK_OK(attn_layernorm_backward(x, gp, mean, rstd, dy, dx, dga, dba, rows, n));
            int acc_ok = 1;
            for (int64_t i = 0; i < n; i++) acc_ok &= dga[i] == dg0[i] + dg[i] && dba[i] == db0[i] + db[i];
            CHECK(acc_ok, "%s: layernorm dgamma/dbeta do not accumulate (n=%lld)", attn_isa_name(isa), (long long)n);
            /* only one of them */
            memset(dga, 0, n * sizeof(float));
            CHECK_OK(attn_layernorm_backward(x, gp, mean, rstd, dy, dx, NULL, dga, rows, n));
            CHECK(!memcmp(dga, db, n * sizeof(float)), "%s: dbeta alone differs", attn_isa_name(isa));
            memset(dga, 0, n * sizeof(float));
            CHECK_OK(attn_layernorm_backward(x, gp, mean, rstd, dy, dx, dga, NULL, rows, n));
            CHECK(!memcmp(dga, dg, n * sizeof(float)), "%s: dgamma alone differs", attn_isa_name(isa));
            free(dga), free(dba);

            /* in place forward (y == x) */
            float *t = xmalloc(tot * sizeof(float));
            memcpy(t, x, tot * sizeof(float));
            CHECK_OK(attn_layernorm_forward(t, gp, bp, t, NULL, NULL, rows, n, (float)eps));
            CHECK(!memcmp(t, y, tot * sizeof(float)), "%s: in-place layernorm differs n=%lld", attn_isa_name(isa),
                  (long long)n);
            free(t);

            /* float64 gradient formulas against finite differences (first row) */
            if (isa == ATTN_ISA_REF && n <= FD_MAX_N && n > 1) {
                double *xx = xmalloc(n * sizeof(double)), *gg = xmalloc(n * sizeof(double));
                double *bb = xmalloc(n * sizeof(double)), *yy = xmalloc(n * sizeof(double));
                double *fdx = xmalloc(n * sizeof(double)), *fdg = xmalloc(n * sizeof(double));
                double *fdb = xmalloc(n * sizeof(double)), *ax = xmalloc(n * sizeof(double));
                double *ag = calloc((size_t)n, sizeof(double)), *ab = calloc((size_t)n, sizeof(double));
                memcpy(xx, xd, n * sizeof(double));
                memcpy(gg, gd, n * sizeof(double));
                memcpy(bb, bd, n * sizeof(double));
                const double *G = affine ? gg : NULL, *B = affine == 1 ? bb : NULL;
                layernorm_bwd64(xx, G, dyd, n, eps, ax, ag, ab);
                double *targets[3] = {xx, gg, bb}, *fds[3] = {fdx, fdg, fdb};
                for (int w = 0; w < 3; w++) {
                    double *p = targets[w];
                    for (int64_t i = 0; i < n; i++) {
                        double h = fd_step(p[i]), v = p[i], lp = 0, lm = 0;
                        p[i] = v + h;
                        layernorm64(xx, G, B, yy, n, eps, NULL, NULL);
                        for (int64_t j = 0; j < n; j++) lp += dyd[j] * yy[j];
                        p[i] = v - h;
                        layernorm64(xx, G, B, yy, n, eps, NULL, NULL);
                        for (int64_t j = 0; j < n; j++) lm += dyd[j] * yy[j];
                        p[i] = v;
                        fds[w][i] = (lp - lm) / (2 * h);
                    }
                }
                record_fd(OP_LN_B, rel_err_dd(ax, fdx, (size_t)n), "layernorm dx", n);
                if (affine) record_fd(OP_LN_PARAM, rel_err_dd(ag, fdg, (size_t)n), "layernorm dgamma", n);
                if (affine == 1) record_fd(OP_LN_PARAM, rel_err_dd(ab, fdb, (size_t)n), "layernorm dbeta", n);
                free(xx), free(gg), free(bb), free(yy), free(fdx), free(fdg), free(fdb);
                free(ax), free(ag), free(ab);
            }
            free(x), free(y), free(dy), free(dx), free(g), free(b), free(dg), free(db);
            free(dg0), free(db0), free(xd), free(dyd), free(gd), free(bd), free(y64), free(dx64);
            free(dg64), free(db64);
        }
    }
}

/* ---- GELU / ReLU ------------------------------------------------------------------------- */

static void test_activations(attn_isa isa, test_rng *rng) {
    for (int s = 0; s < NSIZES; s++) {
        const int64_t n = SIZES[s] * 3;
        float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
        float *dy = xmalloc(n * sizeof(float)), *dx = xmalloc(n * sizeof(float));
        float *t = xmalloc(n * sizeof(float));
        double *r = xmalloc(n * sizeof(double)), *rg = xmalloc(n * sizeof(double));
        double *fd = xmalloc(n * sizeof(double));
        fill_normal(rng, x, (size_t)n, 3.0);
        fill_normal(rng, dy, (size_t)n, 1.0);
        for (int tf = 0; tf < 2; tf++) {
            attn_gelu_approx ap = tf ? ATTN_GELU_TANH : ATTN_GELU_ERF;
            for (int64_t i = 0; i < n; i++) {
                r[i] = gelu64(x[i], tf);
                rg[i] = dy[i] * gelu_grad64(x[i], tf);
            }
            CHECK_OK(attn_gelu_forward(x, y, n, ap));
            CHECK_REL(tf ? OP_GELU_TANH_F : OP_GELU_ERF_F, isa, y, r, n, 1e-6,
                      tf ? "gelu tanh forward" : "gelu erf forward", n);
            CHECK_OK(attn_gelu_backward(x, dy, dx, n, ap));
            CHECK_REL(tf ? OP_GELU_TANH_B : OP_GELU_ERF_B, isa, dx, rg, n, 1e-5,
                      tf ? "gelu tanh backward" : "gelu erf backward", n);
            if (n > 3) { /* where an element sits (vector body or masked tail) never matters */
                CHECK_OK(attn_gelu_forward(x + 3, t, n - 3, ap));
                CHECK(!memcmp(t, y + 3, (n - 3) * sizeof(float)), "%s: gelu of a shifted range differs",
                      attn_isa_name(isa));
                CHECK_OK(attn_gelu_backward(x + 3, dy + 3, t, n - 3, ap));
                CHECK(!memcmp(t, dx + 3, (n - 3) * sizeof(float)), "%s: gelu backward of a shifted range differs",
                      attn_isa_name(isa));
            }
            memcpy(t, x, n * sizeof(float));
            CHECK_OK(attn_gelu_forward(t, t, n, ap));
            CHECK(!memcmp(t, y, n * sizeof(float)), "%s: in-place gelu differs", attn_isa_name(isa));
            memcpy(t, dy, n * sizeof(float));
            CHECK_OK(attn_gelu_backward(x, t, t, n, ap));
            CHECK(!memcmp(t, dx, n * sizeof(float)), "%s: in-place gelu backward differs", attn_isa_name(isa));
            if (isa == ATTN_ISA_REF) {
                for (int64_t i = 0; i < n; i++) {
                    double h = fd_step(x[i]);
                    fd[i] = dy[i] * (gelu64(x[i] + h, tf) - gelu64(x[i] - h, tf)) / (2 * h);
                }
                record_fd(tf ? OP_GELU_TANH_B : OP_GELU_ERF_B, rel_err_dd(rg, fd, (size_t)n),
                          tf ? "gelu tanh" : "gelu erf", n);
            }
        }
        /* ReLU, with exact zeros in x */
        for (int64_t i = 0; i < n; i += 5) x[i] = i % 2 ? 0.0f : -0.0f;
        for (int64_t i = 0; i < n; i++) {
            r[i] = x[i] > 0 ? x[i] : 0.0;
            rg[i] = x[i] > 0 ? dy[i] : 0.0;
        }
        CHECK_OK(attn_relu_forward(x, y, n));
        CHECK_REL(OP_RELU_F, isa, y, r, n, 0.0, "relu forward", n);
        CHECK_OK(attn_relu_backward(x, dy, dx, n));
        CHECK_REL(OP_RELU_B, isa, dx, rg, n, 0.0, "relu backward", n);
        int zero_grad = 1;
        for (int64_t i = 0; i < n; i += 5) zero_grad &= dx[i] == 0.0f;
        CHECK(zero_grad, "%s: relu gradient at x == 0 is not 0", attn_isa_name(isa));
        memcpy(t, x, n * sizeof(float));
        CHECK_OK(attn_relu_forward(t, t, n));
        CHECK(!memcmp(t, y, n * sizeof(float)), "%s: in-place relu differs", attn_isa_name(isa));
        if (isa == ATTN_ISA_REF) { /* finite differences away from the kink */
            int64_t m = 0;
            for (int64_t i = 0; i < n; i++) {
                if (fabs(x[i]) < 1e-3) continue;
                double h = 1e-4 * fabs(x[i]), xp = x[i] + h, xm = x[i] - h;
                fd[m] = dy[i] * ((xp > 0 ? xp : 0) - (xm > 0 ? xm : 0)) / (2 * h);
                r[m++] = x[i] > 0 ? dy[i] : 0.0;
            }
            record_fd(OP_RELU_B, rel_err_dd(r, fd, (size_t)m), "relu", n);
        }
        free(x), free(y), free(dy), free(dx), free(t), free(r), free(rg), free(fd);
    }
}

/* Elementwise accuracy of the GELU forward over a dense grid of [-10, 10] (relative error of
 * every element, against the cancellation-free float64 formulas). */
static void test_gelu_elementwise(attn_isa isa) {
    const int64_t n = 40001;
    float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-10.0 + 20.0 * (double)i / (double)(n - 1));
    for (int tf = 0; tf < 2; tf++) {
        CHECK_OK(attn_gelu_forward(x, y, n, tf ? ATTN_GELU_TANH : ATTN_GELU_ERF));
        double mx = 0;
        float at = 0;
        for (int64_t i = 0; i < n; i++) {
            double r = gelu64_tail(x[i], tf);
            if (r == 0) continue;
            double e = fabs(((double)y[i] - r) / r);
            if (!(e <= mx)) {
                mx = e;
                at = x[i];
            }
        }
        record(tf ? OP_GELU_TANH_ELEM : OP_GELU_ERF_ELEM, isa, mx);
        CHECK(mx <= 1e-6, "%s: gelu %s max elementwise relative error %.3g at x = %.7g", attn_isa_name(isa),
              tf ? "tanh" : "erf", mx, at);
    }
    free(x), free(y);
}

/* ---- the Llama family's RMSNorm and SwiGLU gate (the ops table's) ------------------------- */

static void test_llama_rows(attn_isa isa, test_rng *rng) {
    const attn_ops_kernels *k = attn_ops_active();
    for (int si = 0; si < NSIZES; si++) {
        const int64_t n = SIZES[si];
        float *x = normal_floats(rng, (size_t)n, 3.0), *w = normal_floats(rng, (size_t)n, 1.0),
              *y = xmalloc(n * sizeof(float));
        double *r = xmalloc(n * sizeof(double)), ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
        for (int64_t i = 0; i < n; i++) r[i] = (double)w[i] * x[i] / sqrt(ss / (double)n + 1e-6);
        k->rms_norm_fwd(x, w, y, n, 1e-6);
        CHECK_REL(OP_RMS_F, isa, y, r, n, 1e-6, "rmsnorm forward", n);
        k->rms_norm_fwd(x, w, x, n, 1e-6);
        CHECK(!memcmp(x, y, n * sizeof(float)), "%s: in-place rmsnorm differs (n=%lld)", attn_isa_name(isa),
              (long long)n);
        free(x), free(w), free(y), free(r);
    }
    /* the gate elementwise over [-20, 20] (both tails of the sigmoid), u random */
    const int64_t n = 40001;
    float *g = xmalloc(n * sizeof(float)), *u = normal_floats(rng, (size_t)n, 2.0), *y = xmalloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) g[i] = (float)(-20.0 + 40.0 * (double)i / (double)(n - 1));
    k->silu_gate(g, u, y, n);
    double mx = 0;
    float at = 0;
    for (int64_t i = 0; i < n; i++) {
        const double r = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        const double e = r == 0 ? fabs((double)y[i]) : fabs(((double)y[i] - r) / r);
        if (!(e <= mx)) mx = e, at = g[i];
    }
    record(OP_SILU_GATE, isa, mx);
    CHECK(mx <= 1e-6, "%s: silu gate max elementwise relative error %.3g at g = %.7g", attn_isa_name(isa), mx, at);
    k->silu_gate(g + 3, u + 3, g + 3, n - 3); /* in place and shifted: the same bits */
    CHECK(!memcmp(g + 3, y + 3, (n - 3) * sizeof(float)), "%s: silu gate in place / shifted differs",
          attn_isa_name(isa));
    /* torch.nn.functional.silu's specials: silu(-inf) = NaN (-inf * 0), silu(inf) = inf, the tails
     * -0 and g itself, NaN kept */
    const float sg[6] = {-INFINITY, INFINITY, NAN, -100.0f, 100.0f, 0.0f}, one[6] = {1, 1, 1, 1, 1, 1};
    float sy[6];
    k->silu_gate(sg, one, sy, 6);
    CHECK(isnan(sy[0]) && sy[1] == INFINITY && isnan(sy[2]) && sy[3] == 0.0f && signbit(sy[3]) && sy[4] == 100.0f &&
              sy[5] == 0.0f,
          "%s: silu gate specials: %g %g %g %g %g %g", attn_isa_name(isa), sy[0], sy[1], sy[2], sy[3], sy[4], sy[5]);
    free(g), free(u), free(y);
}

/* ---- bias / residual --------------------------------------------------------------------- */

static void test_bias_residual(attn_isa isa, test_rng *rng) {
    for (int s = 0; s < NSIZES; s++) {
        const int64_t n = SIZES[s], rows = 3, tot = rows * n;
        float *x = xmalloc(tot * sizeof(float)), *y = xmalloc(tot * sizeof(float));
        float *b = xmalloc(n * sizeof(float)), *db = xmalloc(n * sizeof(float));
        float *db0 = xmalloc(n * sizeof(float)), *dba = xmalloc(n * sizeof(float));
        double *r = xmalloc(tot * sizeof(double)), *rb = calloc((size_t)n, sizeof(double));
        fill_normal(rng, x, (size_t)tot, 1.0);
        fill_normal(rng, b, (size_t)n, 1.0);
        fill_normal(rng, db0, (size_t)n, 1.0);
        for (int64_t i = 0; i < tot; i++) r[i] = (double)x[i] + b[i % n];
        CHECK_OK(attn_bias_add(x, b, y, rows, n));
        CHECK_REL(OP_BIAS_F, isa, y, r, tot, 1e-6, "bias add", n);
        /* dy = x here; dbias accumulates the column sums */
        memset(db, 0, n * sizeof(float));
        for (int64_t i = 0; i < tot; i++) rb[i % n] += x[i];
        CHECK_OK(attn_bias_backward(x, db, rows, n));
        CHECK_REL(OP_BIAS_B, isa, db, rb, n, 1e-5, "bias backward", n);
        memcpy(dba, db0, n * sizeof(float)); /* accumulates: old + the same sum */
        CHECK_OK(attn_bias_backward(x, dba, rows, n));
        int acc_ok = 1;
        for (int64_t i = 0; i < n; i++) acc_ok &= dba[i] == db0[i] + db[i];
        CHECK(acc_ok, "%s: bias backward does not accumulate (n=%lld)", attn_isa_name(isa), (long long)n);
        if (isa == ATTN_ISA_REF) { /* d/dbias of sum(dy * (x + bias)) by finite differences */
            double *fd = xmalloc(n * sizeof(double));
            for (int64_t c = 0; c < n; c++) {
                double h = fd_step(b[c]), lp = 0, lm = 0;
                for (int64_t rr = 0; rr < rows; rr++) {
                    double d = x[rr * n + c]; /* dy */
                    lp += d * ((double)x[rr * n + c] + b[c] + h);
                    lm += d * ((double)x[rr * n + c] + b[c] - h);
                }
                fd[c] = (lp - lm) / (2 * h);
            }
            record_fd(OP_BIAS_B, rel_err_dd(rb, fd, (size_t)n), "bias", n);
            free(fd);
        }
        /* residual add, in place too */
        float *a2 = xmalloc(tot * sizeof(float));
        fill_normal(rng, a2, (size_t)tot, 1.0);
        for (int64_t i = 0; i < tot; i++) r[i] = (double)x[i] + a2[i];
        CHECK_OK(attn_residual_add(x, a2, y, tot));
        CHECK_REL(OP_RESID, isa, y, r, tot, 1e-6, "residual add", tot);
        CHECK_OK(attn_residual_add(x, a2, a2, tot));
        CHECK(!memcmp(a2, y, tot * sizeof(float)), "%s: in-place residual add differs", attn_isa_name(isa));
        free(x), free(y), free(b), free(db), free(db0), free(dba), free(r), free(rb), free(a2);
    }
}

/* ---- thread-count independence ----------------------------------------------------------- */

/* Runs every op once with the current thread count into bufs. */
static void run_all(const float *x, const float *x2, const float *g, const float *b, const float *dy, int64_t rows,
                    int64_t n, int64_t big, float **o) {
    /* o[0] softmax y, o[1] softmax dx, o[2] ln y, o[3] ln mean|rstd, o[4] ln dx, o[5] dgamma|dbeta,
     * o[6] gelu erf y, o[7] gelu tanh dx, o[8] relu y, o[9] bias y, o[10] dbias, o[11] residual,
     * o[12] relu dx, o[13] gelu tanh y, o[14] gelu erf dx */
    const int64_t tot = rows * n;
    CHECK_OK(attn_softmax_forward(x, o[0], rows, n));
    CHECK_OK(attn_softmax_backward(o[0], dy, o[1], rows, n));
    CHECK_OK(attn_layernorm_forward(x, g, b, o[2], o[3], o[3] + rows, rows, n, 1e-5f));
    memset(o[5], 0, 2 * n * sizeof(float));
    CHECK_OK(attn_layernorm_backward(x, g, o[3], o[3] + rows, dy, o[4], o[5], o[5] + n, rows, n));
    CHECK_OK(attn_gelu_forward(x2, o[6], big, ATTN_GELU_ERF));
    CHECK_OK(attn_gelu_forward(x2, o[13], big, ATTN_GELU_TANH));
    CHECK_OK(attn_gelu_backward(x2, x, o[7], big, ATTN_GELU_TANH));
    CHECK_OK(attn_gelu_backward(x2, x, o[14], big, ATTN_GELU_ERF));
    CHECK_OK(attn_relu_forward(x2, o[8], big));
    CHECK_OK(attn_relu_backward(x2, x, o[12], big));
    CHECK_OK(attn_bias_add(x, g, o[9], rows, n));
    memset(o[10], 0, n * sizeof(float));
    CHECK_OK(attn_bias_backward(dy, o[10], rows, n));
    CHECK_OK(attn_residual_add(x2, x, o[11], big));
    (void)tot;
}

static void test_threads(attn_isa isa, test_rng *rng) {
    const int64_t rows = 96, n = 1000, tot = rows * n, big = tot; /* several chunks/blocks */
    float *x = xmalloc(tot * sizeof(float)), *x2 = xmalloc(tot * sizeof(float));
    float *dy = xmalloc(tot * sizeof(float)), *g = xmalloc(n * sizeof(float));
    float *b = xmalloc(n * sizeof(float));
    fill_normal(rng, x, (size_t)tot, 2.0);
    fill_normal(rng, x2, (size_t)tot, 3.0);
    fill_normal(rng, dy, (size_t)tot, 1.0);
    fill_normal(rng, g, (size_t)n, 1.0);
    fill_normal(rng, b, (size_t)n, 1.0);
    const size_t sizes[15] = {tot, tot, tot, 2 * rows, tot, 2 * n, big, big, big, tot, n, big, big, big, big};
    float *base[15], *cur[15];
    for (int k = 0; k < 15; k++) {
        base[k] = xmalloc(sizes[k] * sizeof(float));
        cur[k] = xmalloc(sizes[k] * sizeof(float));
    }
    attn_set_num_threads(1);
    run_all(x, x2, g, b, dy, rows, n, big, base);
    for (int th = 2; th <= 4; th++) {
        attn_set_num_threads(th);
        run_all(x, x2, g, b, dy, rows, n, big, cur);
        for (int k = 0; k < 15; k++)
            CHECK(!memcmp(base[k], cur[k], sizes[k] * sizeof(float)), "%s: output %d differs between 1 and %d threads",
                  attn_isa_name(isa), k, th);
    }
    attn_set_num_threads(0);
    for (int k = 0; k < 15; k++) free(base[k]), free(cur[k]);
    free(x), free(x2), free(dy), free(g), free(b);
}

/* ---- argument errors --------------------------------------------------------------------- */

#define CHECK_MSG(...)                                                                                                 \
    do {                                                                                                               \
        const char *subs_[] = {__VA_ARGS__};                                                                           \
        int ok_ = 1;                                                                                                   \
        for (size_t i_ = 0; i_ < sizeof subs_ / sizeof subs_[0]; i_++)                                                 \
            ok_ &= strstr(attn_last_error(), subs_[i_]) != NULL;                                                       \
        CHECK(ok_, "message '%s' lacks an expected part", attn_last_error());                                          \
    } while (0)

static void test_errors(void) {
    float a[8] = {0}, b[8] = {0}, c[8] = {0}, m[2] = {0}, r[2] = {1, 1};
    const attn_status INV = ATTN_ERR_INVALID_ARGUMENT;
    CHECK_STATUS(attn_softmax_forward(NULL, a, 2, 4), INV);
    CHECK_MSG("attn_softmax_forward", "x", "rows = 2", "n = 4");
    CHECK_STATUS(attn_softmax_forward(a, NULL, 2, 4), INV);
    CHECK_STATUS(attn_softmax_forward(a, b, -1, 4), INV);
    CHECK_MSG("attn_softmax_forward", "rows = -1");
    CHECK_STATUS(attn_softmax_forward(a, b, 2, -4), INV);
    CHECK_STATUS(attn_softmax_forward(a, b, INT64_MAX, INT64_MAX), ATTN_ERR_OVERFLOW);
    CHECK_OK(attn_softmax_forward(NULL, NULL, 0, 4));
    CHECK_OK(attn_softmax_forward(NULL, NULL, 3, 0));
    CHECK_STATUS(attn_softmax_backward(a, NULL, c, 2, 4), INV);
    CHECK_MSG("attn_softmax_backward", "dy");
    CHECK_STATUS(attn_softmax_backward(a, b, NULL, 2, 4), INV);
    CHECK_STATUS(attn_softmax_backward(NULL, b, c, 2, 4), INV);
    CHECK_STATUS(attn_softmax_backward(a, b, c, 2, -1), INV);

    CHECK_STATUS(attn_layernorm_forward(a, NULL, NULL, b, m, r, 2, 4, 0.0f), INV);
    CHECK_MSG("attn_layernorm_forward", "eps", "rows = 2", "n = 4");
    CHECK_STATUS(attn_layernorm_forward(a, NULL, NULL, b, m, r, 2, 4, -1e-5f), INV);
    CHECK_STATUS(attn_layernorm_forward(a, NULL, NULL, b, m, r, 2, 4, INFINITY), INV);
    CHECK_STATUS(attn_layernorm_forward(a, NULL, NULL, b, m, r, 2, 4, NAN), INV);
    CHECK_STATUS(attn_layernorm_forward(NULL, NULL, NULL, b, m, r, 2, 4, 1e-5f), INV);
    CHECK_MSG("attn_layernorm_forward", "x");
    CHECK_STATUS(attn_layernorm_forward(a, NULL, NULL, NULL, m, r, 2, 4, 1e-5f), INV);
    CHECK_STATUS(attn_layernorm_forward(a, NULL, NULL, b, m, r, -2, 4, 1e-5f), INV);
    CHECK_OK(attn_layernorm_forward(a, NULL, NULL, b, NULL, NULL, 2, 4, 1e-5f));
    CHECK_OK(attn_layernorm_forward(NULL, NULL, NULL, NULL, m, r, 2, 0, 1e-5f));
    CHECK(m[0] == 0.0f && r[0] == 1.0f / sqrtf(1e-5f), "n = 0 layernorm stats: %g %g", m[0], r[0]);
    r[0] = r[1] = 1;
    CHECK_STATUS(attn_layernorm_backward(a, NULL, NULL, r, b, c, NULL, NULL, 2, 4), INV);
    CHECK_MSG("attn_layernorm_backward", "mean");
    CHECK_STATUS(attn_layernorm_backward(a, NULL, m, NULL, b, c, NULL, NULL, 2, 4), INV);
    CHECK_STATUS(attn_layernorm_backward(NULL, NULL, m, r, b, c, NULL, NULL, 2, 4), INV);
    CHECK_STATUS(attn_layernorm_backward(a, NULL, m, r, NULL, c, NULL, NULL, 2, 4), INV);
    CHECK_STATUS(attn_layernorm_backward(a, NULL, m, r, b, NULL, NULL, NULL, 2, 4), INV);
    CHECK_STATUS(attn_layernorm_backward(a, NULL, m, r, b, c, NULL, NULL, 2, -4), INV);

    CHECK_STATUS(attn_gelu_forward(a, b, 8, (attn_gelu_approx)7), INV);
    CHECK_MSG("attn_gelu_forward", "approx", "7", "n = 8");
    CHECK_STATUS(attn_gelu_forward(a, b, 8, (attn_gelu_approx)-1), INV);
    CHECK_STATUS(attn_gelu_forward(NULL, b, 8, ATTN_GELU_ERF), INV);
    CHECK_MSG("attn_gelu_forward", "x", "n = 8");
    CHECK_STATUS(attn_gelu_forward(a, NULL, 8, ATTN_GELU_TANH), INV);
    CHECK_STATUS(attn_gelu_forward(a, b, -8, ATTN_GELU_TANH), INV);
    CHECK_STATUS(attn_gelu_backward(a, b, c, 8, (attn_gelu_approx)2), INV);
    CHECK_MSG("attn_gelu_backward", "approx");
    CHECK_STATUS(attn_gelu_backward(a, NULL, c, 8, ATTN_GELU_ERF), INV);
    CHECK_STATUS(attn_gelu_backward(a, b, NULL, 8, ATTN_GELU_ERF), INV);
    CHECK_STATUS(attn_gelu_backward(NULL, b, c, 8, ATTN_GELU_ERF), INV);
    CHECK_OK(attn_gelu_forward(NULL, NULL, 0, ATTN_GELU_ERF));
    CHECK_STATUS(attn_relu_forward(NULL, b, 8), INV);
    CHECK_MSG("attn_relu_forward", "x");
    CHECK_STATUS(attn_relu_forward(a, b, -1), INV);
    CHECK_STATUS(attn_relu_backward(a, NULL, c, 8), INV);
    CHECK_MSG("attn_relu_backward", "dy");
    CHECK_STATUS(attn_relu_backward(a, b, c, -3), INV);
    CHECK_STATUS(attn_bias_add(a, NULL, c, 2, 4), INV);
    CHECK_MSG("attn_bias_add", "bias", "rows = 2", "n = 4");
    CHECK_STATUS(attn_bias_add(a, b, c, 2, -4), INV);
    CHECK_STATUS(attn_bias_backward(NULL, c, 2, 4), INV);
    CHECK_MSG("attn_bias_backward", "dy");
    CHECK_STATUS(attn_bias_backward(a, NULL, 2, 4), INV);
    CHECK_STATUS(attn_bias_backward(a, c, -2, 4), INV);
    CHECK_STATUS(attn_residual_add(a, NULL, c, 8), INV);
    CHECK_MSG("attn_residual_add", "b", "n = 8");
    CHECK_STATUS(attn_residual_add(a, b, c, -8), INV);
    CHECK_STATUS(attn_residual_add(a, b, c, INT64_MAX), ATTN_ERR_OVERFLOW);
}

/* ---- PyTorch fixture ---------------------------------------------------------------------- */

static float *read_tensor(attn_safetensors *st, const char *name, int64_t *rows, int64_t *cols) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    CHECK(t != NULL, "fixture: tensor %s missing", name);
    if (!t) return NULL;
    int64_t r = t->rank == 2 ? t->shape[0] : 1, c = t->rank >= 1 ? t->shape[t->rank - 1] : 1;
    float *buf = xmalloc((size_t)(r * c) * sizeof(float));
    attn_status s = attn_safetensors_read_f32(st, name, buf, (size_t)(r * c));
    CHECK(s == ATTN_OK, "fixture: reading %s: %s", name, attn_last_error());
    if (rows) *rows = r;
    if (cols) *cols = c;
    return buf;
}

static void check_fixture(float *got, float *want, int64_t n, double tol, const char *what, attn_isa isa,
                          double *worst_seen) {
    double e = rel_err_ff(got, want, (size_t)n);
    if (!(e <= *worst_seen)) *worst_seen = e;
    CHECK(e <= tol, "%s: fixture %s: rel err %.3g > %.0e", attn_isa_name(isa), what, e, tol);
}

static void test_fixture(attn_isa isa) {
    char path[1024];
    snprintf(path, sizeof path, "%s/ops.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_open_file(path, &st);
    CHECK(s == ATTN_OK, "fixture %s: %s", path, attn_last_error());
    if (s != ATTN_OK) return;
    const char *eps_s = attn_safetensors_metadata_find(st, "eps");
    const float eps = eps_s ? strtof(eps_s, NULL) : 1e-5f;
    double wf = 0, wb = 0;
    int cases = 0;
    for (int c = 0;; c++) {
        char nm[64], pre[16];
        snprintf(pre, sizeof pre, "case%d.", c);
        snprintf(nm, sizeof nm, "%ssoftmax.x", pre);
        if (!attn_safetensors_find(st, nm)) break;
        cases++;
#define T(name, r, cc) (snprintf(nm, sizeof nm, "%s%s", pre, name), read_tensor(st, nm, r, cc))
        int64_t rows = 0, n = 0;
        float *x = T("softmax.x", &rows, &n), *want = T("softmax.y", NULL, NULL);
        float *dy = T("softmax.dy", NULL, NULL), *wdx = T("softmax.dx", NULL, NULL);
        float *out = xmalloc((size_t)(rows * n) * sizeof(float));
        float *out2 = xmalloc((size_t)(rows * n) * sizeof(float));
        if (x && want && dy && wdx) {
            CHECK_OK(attn_softmax_forward(x, out, rows, n));
            check_fixture(out, want, rows * n, 1e-5, "softmax", isa, &wf);
            CHECK_OK(attn_softmax_backward(out, dy, out2, rows, n));
            check_fixture(out2, wdx, rows * n, 1e-4, "softmax grad", isa, &wb);
        }
        free(x), free(want), free(dy), free(wdx);

        x = T("layernorm.x", &rows, &n);
        float *w = T("layernorm.weight", NULL, NULL), *b = T("layernorm.bias", NULL, NULL);
        want = T("layernorm.y", NULL, NULL);
        dy = T("layernorm.dy", NULL, NULL);
        wdx = T("layernorm.dx", NULL, NULL);
        float *wdw = T("layernorm.dweight", NULL, NULL), *wdb = T("layernorm.dbias", NULL, NULL);
        if (x && w && b && want && dy && wdx && wdw && wdb) {
            float *mean = xmalloc((size_t)rows * sizeof(float)), *rstd = xmalloc((size_t)rows * sizeof(float));
            float *dw = calloc((size_t)n, sizeof(float)), *db = calloc((size_t)n, sizeof(float));
            CHECK_OK(attn_layernorm_forward(x, w, b, out, mean, rstd, rows, n, eps));
            check_fixture(out, want, rows * n, 1e-5, "layernorm", isa, &wf);
            CHECK_OK(attn_layernorm_backward(x, w, mean, rstd, dy, out2, dw, db, rows, n));
            check_fixture(out2, wdx, rows * n, 1e-4, "layernorm dx", isa, &wb);
            check_fixture(dw, wdw, n, 1e-4, "layernorm dweight", isa, &wb);
            check_fixture(db, wdb, n, 1e-4, "layernorm dbias", isa, &wb);
            free(mean), free(rstd), free(dw), free(db);
        }
        free(x), free(w), free(b), free(want), free(dy), free(wdx), free(wdw), free(wdb);

        x = T("gelu.x", &rows, &n);
        dy = T("gelu.dy", NULL, NULL);
        for (int tf = 0; tf < 2; tf++) {
            want = T(tf ? "gelu_tanh.y" : "gelu_none.y", NULL, NULL);
            wdx = T(tf ? "gelu_tanh.dx" : "gelu_none.dx", NULL, NULL);
            attn_gelu_approx ap = tf ? ATTN_GELU_TANH : ATTN_GELU_ERF;
            if (x && dy && want && wdx) {
                CHECK_OK(attn_gelu_forward(x, out, rows * n, ap));
                check_fixture(out, want, rows * n, 1e-5, tf ? "gelu tanh" : "gelu none", isa, &wf);
                CHECK_OK(attn_gelu_backward(x, dy, out2, rows * n, ap));
                check_fixture(out2, wdx, rows * n, 1e-4, tf ? "gelu tanh grad" : "gelu none grad", isa, &wb);
            }
            free(want), free(wdx);
        }
        free(x), free(dy);

        x = T("relu.x", &rows, &n);
        dy = T("relu.dy", NULL, NULL);
        want = T("relu.y", NULL, NULL);
        wdx = T("relu.dx", NULL, NULL);
        if (x && dy && want && wdx) {
            CHECK_OK(attn_relu_forward(x, out, rows * n));
            check_fixture(out, want, rows * n, 1e-5, "relu", isa, &wf);
            CHECK_OK(attn_relu_backward(x, dy, out2, rows * n));
            check_fixture(out2, wdx, rows * n, 1e-4, "relu grad", isa, &wb);
        }
        free(x), free(dy), free(want), free(wdx), free(out), free(out2);
#undef T
    }
    CHECK(cases > 0, "fixture %s has no cases", path);
    printf("  fixture (%s, %d cases): worst forward %.2e, worst gradient %.2e\n", attn_isa_name(isa), cases, wf, wb);
    attn_safetensors_close(st);
}

/* The vector exps are one algorithm: the AVX2 and AVX-512 GELUs (erf form: e^(-x^2/2) down to
 * subnormal results; tanh form: the reduced exp of its sigmoid) and their backward give the same
 * bits on a grid over [-16, 16] and the special values (the AVX-512 exp's vscalefps against the
 * AVX2 one's two power-of-two factors). */
static void test_exp_across_isas(void) {
    if (attn_detected_isa() < ATTN_ISA_AVX512) {
        printf("  exp across ISAs: SKIP (no AVX-512 on this CPU)\n");
        return;
    }
    const int64_t n = 64011;
    float *x = xmalloc(n * sizeof(float)), *dy = xmalloc(n * sizeof(float)), *y[2], *dx[2];
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(-16.0 + 32.0 * (double)i / (double)(n - 12));
        dy[i] = 1.0f - (float)(i % 3);
    }
    const float special[11] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-40f, -1e-40f, 88.7f, -88.7f, 1e30f, -1e30f};
    memcpy(x + n - 11, special, sizeof special);
    for (int tf = 0; tf < 2; tf++) {
        for (int k = 0; k < 2; k++) {
            y[k] = xmalloc(n * sizeof(float));
            dx[k] = xmalloc(n * sizeof(float));
            CHECK_OK(attn_force_isa(k ? ATTN_ISA_AVX512 : ATTN_ISA_AVX2));
            CHECK_OK(attn_gelu_forward(x, y[k], n, tf ? ATTN_GELU_TANH : ATTN_GELU_ERF));
            CHECK_OK(attn_gelu_backward(x, dy, dx[k], n, tf ? ATTN_GELU_TANH : ATTN_GELU_ERF));
        }
        CHECK(!memcmp(y[0], y[1], n * sizeof(float)) && !memcmp(dx[0], dx[1], n * sizeof(float)),
              "gelu %s: avx2 and avx512 differ", tf ? "tanh" : "erf");
        for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]);
    }
    for (int k = 0; k < 2; k++) {
        y[k] = xmalloc(n * sizeof(float));
        CHECK_OK(attn_force_isa(k ? ATTN_ISA_AVX512 : ATTN_ISA_AVX2));
        attn_ops_active()->silu_gate(x, dy, y[k], n);
    }
    CHECK(!memcmp(y[0], y[1], n * sizeof(float)), "silu gate: avx2 and avx512 differ");
    for (int k = 0; k < 2; k++) free(y[k]);
    free(x), free(dy);
}

int main(void) {
    test_rng rng = rng_seeded(77001);
    const attn_isa best = attn_detected_isa();
    printf("test_ops: seed %llu, ISAs ref..%s, features %s\n", (unsigned long long)rng.s, attn_isa_name(best),
           attn_cpu_features());
    test_errors();
    FOR_EACH_ISA(i) {
        attn_isa isa = (attn_isa)i;
        CHECK_OK(attn_force_isa(isa));
        test_softmax(isa, &rng);
        test_softmax_edges(isa, &rng);
        test_layernorm(isa, &rng);
        test_activations(isa, &rng);
        test_gelu_elementwise(isa);
        test_llama_rows(isa, &rng);
        test_bias_residual(isa, &rng);
        test_threads(isa, &rng);
        test_fixture(isa);
    }
    test_exp_across_isas();
    attn_force_isa(best);

    printf("  %-32s", "max relative error");
    for (int i = ATTN_ISA_REF; i <= (int)best; i++) printf(" %10s", attn_isa_name((attn_isa)i));
    printf(" %12s\n", "f64 vs FD");
    for (int op = 0; op < OP_COUNT; op++) {
        printf("  %-32s", op_names[op]);
        for (int i = ATTN_ISA_REF; i <= (int)best; i++) printf(" %10.2e", worst[op][i]);
        if (worst_fd[op] > 0) printf(" %12.2e", worst_fd[op]);
        printf("\n");
    }
    return test_summary("test_ops");
}
