/* Losses: cross-entropy (ignore_index, label smoothing, mean / sum / none) and MSE, forward and
 * backward, against float64 references written here whose gradients are checked against central
 * finite differences, against PyTorch (tests/parity/fixtures/train_loss.safetensors from
 * tests/parity/gen_train_loss.py), on logits of magnitude 1e4 and 1e30, for bitwise identical
 * results with 1..4 threads, in place, and for every argument error. */
#include <float.h>

#include "test_util.h"
#include "attn/train.h"

static double worst_loss, worst_grad, worst_fd, worst_fx_loss, worst_fx_grad;

static void note(double *w, double e) {
    if (!(e <= *w)) *w = e; /* NaN sticks */
}

/* ---- float64 reference ------------------------------------------------------------------- */

/* loss of one row (target not ignored) and, when g != NULL, its gradient (dloss_i/dx_j). */
static double ce_row64(const double *x, int64_t c, int64_t t, double eps, double *g) {
    int64_t am = 0;
    for (int64_t j = 1; j < c; j++) am = x[j] > x[am] ? j : am;
    const double m = x[am];
    /* On a peaked row whose target is the maximum the loss and the target's gradient are tiny
     * differences from 0 and 1: lse - x[j] is taken as (m - x[j]) + log1p(the other terms) and
     * p_t - 1 as expm1, not m + log(s) - x[t] and exp(..) - 1, which round them to multiples of
     * m's ulp and of 1's (central differences then carry that rounding divided by the step). */
    double rest = 0;
    for (int64_t j = 0; j < c; j++)
        if (j != am) rest += exp(x[j] - m);
    const double ls = log1p(rest);
    double l = (1 - eps) * ((m - x[t]) + ls);
    for (int64_t j = 0; j < c; j++) l += eps / (double)c * ((m - x[j]) + ls);
    if (g) {
        for (int64_t j = 0; j < c; j++) {
            const double a = (x[j] - m) - ls; /* log p_j */
            g[j] = j == t ? expm1(a) + eps - eps / (double)c : exp(a) - eps / (double)c;
        }
    }
    return l;
}

/* Per-row losses (0 for ignored rows) and the count of rows not ignored. */
static int64_t ce_rows64(const double *x, const int64_t *t, int64_t n, int64_t c, int64_t ign, double eps, double *loss,
                         double *grad) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        if (t[i] == ign) {
            loss[i] = 0;
            if (grad) memset(grad + i * c, 0, (size_t)c * sizeof(double));
            continue;
        }
        count++;
        loss[i] = ce_row64(x + i * c, c, t[i], eps, grad ? grad + i * c : NULL);
    }
    return count;
}

/* The scalar objective L = sum_i w_i loss_i whose gradient the backward computes: w_i = dloss[i]
 * (none), dloss[0] (sum) or dloss[0] / count (mean). Returns L; grad (nullable) = dL/dx. */
static double ce_objective64(const double *x, const int64_t *t, int64_t n, int64_t c, int64_t ign, double eps,
                             attn_reduction red, const double *dloss, double *grad) {
    double *loss = xmalloc((size_t)n * sizeof(double));
    const int64_t count = ce_rows64(x, t, n, c, ign, eps, loss, grad);
    double L = 0;
    for (int64_t i = 0; i < n; i++) {
        const double w = red == ATTN_REDUCTION_NONE  ? dloss[i]
                         : red == ATTN_REDUCTION_SUM ? dloss[0]
                                                     : (count ? dloss[0] / (double)count : 0.0);
        L += w * loss[i];
        if (grad)
            for (int64_t j = 0; j < c; j++) grad[i * c + j] *= w;
    }
    free(loss);
    return L;
}

static double fd_step(double v) { return 1e-5 * (fabs(v) > 1.0 ? fabs(v) : 1.0); }

/* The float64 analytic gradient of the objective against central differences. */
static void fd_check_ce(const double *x0, const int64_t *t, int64_t n, int64_t c, int64_t ign, double eps,
                        attn_reduction red, const double *dloss) {
    const size_t len = (size_t)(n * c);
    double *x = xmalloc(len * sizeof(double)), *g = xmalloc(len * sizeof(double)), *fd = xmalloc(len * sizeof(double));
    memcpy(x, x0, len * sizeof(double));
    ce_objective64(x, t, n, c, ign, eps, red, dloss, g);
    for (size_t k = 0; k < len; k++) {
        const double h = fd_step(x0[k]);
        x[k] = x0[k] + h;
        const double lp = ce_objective64(x, t, n, c, ign, eps, red, dloss, NULL);
        x[k] = x0[k] - h;
        const double lm = ce_objective64(x, t, n, c, ign, eps, red, dloss, NULL);
        x[k] = x0[k];
        fd[k] = (lp - lm) / (2 * h);
    }
    const double e = rel_err_dd(g, fd, len);
    note(&worst_fd, e);
    CHECK(e <= 1e-6, "cross-entropy float64 gradient vs finite differences [%lld, %lld] eps %g red %d: %.3g",
          (long long)n, (long long)c, eps, (int)red, e);
    free(x);
    free(g);
    free(fd);
}

/* ---- the library against the reference ----------------------------------------------------- */

static void ce_case(test_rng *r, int64_t n, int64_t c, double scale, int64_t ign, double eps, attn_reduction red,
                    double frac_ignored, int fd) {
    const size_t len = (size_t)(n * c), nl = red == ATTN_REDUCTION_NONE ? (size_t)n : 1;
    float *x = xmalloc(len * sizeof(float)), *dx = xmalloc(len * sizeof(float)), *dx2 = xmalloc(len * sizeof(float));
    float *loss = xmalloc((size_t)n * sizeof(float)), *dl = xmalloc((size_t)n * sizeof(float));
    double *xd = xmalloc(len * sizeof(double)), *gd = xmalloc(len * sizeof(double));
    double *ld = xmalloc((size_t)n * sizeof(double)), *dld = xmalloc((size_t)n * sizeof(double));
    int64_t *t = xmalloc((size_t)n * sizeof(int64_t));
    fill_normal(r, x, len, scale);
    for (size_t k = 0; k < len; k++) xd[k] = x[k];
    for (int64_t i = 0; i < n; i++) {
        t[i] = (int64_t)(rng_next(r) % (uint64_t)c);
        if (rng_uniform(r) < frac_ignored) t[i] = ign;
        dl[i] = (float)(rng_normal(r) + 1.5);
        dld[i] = dl[i];
    }
    attn_cross_entropy_config cfg = attn_cross_entropy_config_default();
    cfg.ignore_index = ign;
    cfg.label_smoothing = eps;
    cfg.reduction = red;
    /* forward against the reference */
    CHECK_OK(attn_cross_entropy_forward(x, t, n, c, &cfg, loss, NULL));
    const int64_t count = ce_rows64(xd, t, n, c, ign, eps, ld, NULL);
    if (red != ATTN_REDUCTION_NONE) {
        double tot = 0;
        for (int64_t i = 0; i < n; i++) tot += ld[i];
        ld[0] = red == ATTN_REDUCTION_SUM ? tot : tot / (double)count;
    }
    if (red == ATTN_REDUCTION_MEAN && count == 0) {
        CHECK(isnan(loss[0]), "cross-entropy mean with every row ignored: %g, want NaN", (double)loss[0]);
    } else {
        const double e = rel_err_fd(loss, ld, nl);
        note(&worst_loss, e);
        CHECK(e <= 1e-5, "cross-entropy loss [%lld, %lld] scale %g eps %g red %d: rel err %.3g", (long long)n,
              (long long)c, scale, eps, (int)red, e);
    }
    /* backward with a random upstream gradient */
    CHECK_OK(attn_cross_entropy_backward(x, t, n, c, &cfg, dl, dx));
    ce_objective64(xd, t, n, c, ign, eps, red, dld, gd);
    const double e = rel_err_fd(dx, gd, len);
    note(&worst_grad, e);
    CHECK(e <= 1e-4, "cross-entropy gradient [%lld, %lld] scale %g eps %g red %d: rel err %.3g", (long long)n,
          (long long)c, scale, eps, (int)red, e);
    /* the fused forward gives the backward of dloss = 1, bitwise, also in place */
    CHECK_OK(attn_cross_entropy_forward(x, t, n, c, &cfg, loss, dx));
    CHECK_OK(attn_cross_entropy_backward(x, t, n, c, &cfg, NULL, dx2));
    CHECK(!memcmp(dx, dx2, len * sizeof(float)), "fused forward gradient differs from backward(dloss = 1)");
    float *l2 = xmalloc((size_t)n * sizeof(float));
    memcpy(dx2, x, len * sizeof(float));
    CHECK_OK(attn_cross_entropy_forward(dx2, t, n, c, &cfg, l2, dx2));
    CHECK(!memcmp(dx, dx2, len * sizeof(float)) && !memcmp(loss, l2, nl * sizeof(float)),
          "in-place fused forward differs");
    memcpy(dx2, x, len * sizeof(float));
    CHECK_OK(attn_cross_entropy_backward(dx2, t, n, c, &cfg, NULL, dx2));
    CHECK(!memcmp(dx, dx2, len * sizeof(float)), "in-place backward differs");
    free(l2);
    if (fd) fd_check_ce(xd, t, n, c, ign, eps, red, dld);
    free(x);
    free(dx);
    free(dx2);
    free(loss);
    free(dl);
    free(xd);
    free(gd);
    free(ld);
    free(dld);
    free(t);
}

static void test_ce_reference(void) {
    test_rng r = rng_seeded(11);
    const attn_reduction reds[3] = {ATTN_REDUCTION_MEAN, ATTN_REDUCTION_SUM, ATTN_REDUCTION_NONE};
    const double epss[3] = {0.0, 0.1, 1.0};
    for (int ri = 0; ri < 3; ri++)
        for (int ei = 0; ei < 3; ei++) {
            ce_case(&r, 5, 7, 2.0, -100, epss[ei], reds[ri], 0.3, 1);
            ce_case(&r, 4, 1, 2.0, -100, epss[ei], reds[ri], 0.0, 1);     /* one class */
            ce_case(&r, 6, 9, 2.0, 3, epss[ei], reds[ri], 0.3, 1);        /* ignore a valid class */
            ce_case(&r, 3, 5, 30.0, -100, epss[ei], reds[ri], 0.0, 1);    /* peaked rows */
            ce_case(&r, 300, 131, 3.0, -100, epss[ei], reds[ri], 0.1, 0); /* threaded path */
        }
    /* every row ignored; no rows at all */
    ce_case(&r, 5, 4, 1.0, -100, 0.1, ATTN_REDUCTION_MEAN, 1.0, 1);
    ce_case(&r, 5, 4, 1.0, -100, 0.1, ATTN_REDUCTION_SUM, 1.0, 1);
    float loss = 0;
    CHECK_OK(attn_cross_entropy_forward(NULL, NULL, 0, 3, NULL, &loss, NULL));
    CHECK(isnan(loss), "mean over no rows: %g, want NaN", (double)loss);
    attn_cross_entropy_config sum = attn_cross_entropy_config_default();
    sum.reduction = ATTN_REDUCTION_SUM;
    CHECK_OK(attn_cross_entropy_forward(NULL, NULL, 0, 3, &sum, &loss, NULL));
    CHECK(loss == 0.0f, "sum over no rows: %g", (double)loss);
}

/* Logits of magnitude 1e4 (and 1e30): finite, and exact against the reference. */
static void test_ce_large(void) {
    test_rng r = rng_seeded(12);
    for (int k = 0; k < 3; k++) {
        ce_case(&r, 8, 6, 1e4, -100, 0.0, ATTN_REDUCTION_MEAN, 0.0, 0);
        ce_case(&r, 8, 6, 1e4, -100, 0.1, ATTN_REDUCTION_NONE, 0.0, 0);
    }
    /* a row of equal huge logits and a row spanning +-1e30 */
    float x[8] = {1e4f, 1e4f, 1e4f, 1e4f, -1e30f, 1e30f, 0.0f, 3e29f}, l[2], d[8];
    int64_t t[2] = {2, 0};
    attn_cross_entropy_config cfg = attn_cross_entropy_config_default();
    cfg.reduction = ATTN_REDUCTION_NONE;
    cfg.label_smoothing = 0.2;
    CHECK_OK(attn_cross_entropy_forward(x, t, 2, 4, &cfg, l, d));
    int finite = 1;
    for (int k = 0; k < 8; k++) finite &= isfinite(d[k]);
    CHECK(finite && isfinite(l[0]) && isfinite(l[1]), "huge logits: non-finite loss or gradient");
    CHECK(fabs(l[0] - log(4.0)) <= 1e-6 * log(4.0), "equal logits 1e4: loss %.9g, want log 4", (double)l[0]);
    /* row 2: lse = 1e30, loss = 0.8 (1e30 + 1e30) + 0.05 (2e30 + 0 + 1e30 + 7e29) */
    const double want = 0.8 * 2e30 + 0.05 * (2e30 + 1e30 + (1e30 - (double)3e29f));
    CHECK(fabs(l[1] - want) <= 1e-6 * want, "logits +-1e30: loss %.9g, want %.9g", (double)l[1], want);
}

/* ---- MSE ---- */

static void test_mse_reference(void) {
    test_rng r = rng_seeded(13);
    const attn_reduction reds[3] = {ATTN_REDUCTION_MEAN, ATTN_REDUCTION_SUM, ATTN_REDUCTION_NONE};
    const int64_t sizes[3] = {1, 37, 50000};
    for (int ri = 0; ri < 3; ri++)
        for (int si = 0; si < 3; si++) {
            const int64_t n = sizes[si];
            const attn_reduction red = reds[ri];
            const size_t nl = red == ATTN_REDUCTION_NONE ? (size_t)n : 1;
            float *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4), *dl = xmalloc((size_t)n * 4);
            float *l = xmalloc((size_t)n * 4), *da = xmalloc((size_t)n * 4), *db = xmalloc((size_t)n * 4);
            double *ld = xmalloc((size_t)n * 8), *dad = xmalloc((size_t)n * 8), *dbd = xmalloc((size_t)n * 8);
            fill_normal(&r, a, (size_t)n, 1.0);
            fill_normal(&r, b, (size_t)n, 1.0);
            fill_normal(&r, dl, (size_t)n, 1.0);
            CHECK_OK(attn_mse_forward(a, b, n, red, l));
            double tot = 0;
            for (int64_t i = 0; i < n; i++) {
                const double d = (double)a[i] - b[i];
                ld[i] = d * d;
                tot += d * d;
                const double g = red == ATTN_REDUCTION_NONE  ? dl[i]
                                 : red == ATTN_REDUCTION_SUM ? dl[0]
                                                             : dl[0] / (double)n;
                dad[i] = 2 * d * g;
                dbd[i] = -2 * d * g;
            }
            if (red != ATTN_REDUCTION_NONE) ld[0] = red == ATTN_REDUCTION_SUM ? tot : tot / (double)n;
            double e = rel_err_fd(l, ld, nl);
            note(&worst_loss, e);
            CHECK(e <= 1e-5, "mse loss n=%lld red %d: %.3g", (long long)n, (int)red, e);
            CHECK_OK(attn_mse_backward(a, b, n, red, dl, da, db));
            e = fmax(rel_err_fd(da, dad, (size_t)n), rel_err_fd(db, dbd, (size_t)n));
            note(&worst_grad, e);
            CHECK(e <= 1e-4, "mse gradient n=%lld red %d: %.3g", (long long)n, (int)red, e);
            /* finite differences of the float64 objective sum_i w_i (a_i - b_i)^2 (small n) */
            if (n <= 37) {
                double maxe = 0;
                for (int64_t i = 0; i < n; i++) {
                    const double g = red == ATTN_REDUCTION_NONE  ? dl[i]
                                     : red == ATTN_REDUCTION_SUM ? dl[0]
                                                                 : dl[0] / (double)n;
                    const double h = fd_step(a[i]), d = (double)a[i] - b[i];
                    const double fa = g * (((d + h) * (d + h)) - ((d - h) * (d - h))) / (2 * h);
                    const double fb = g * (((d - h) * (d - h)) - ((d + h) * (d + h))) / (2 * h);
                    maxe = fmax(maxe, fabs(fa - dad[i]) / fmax(fabs(dad[i]), 1e-12));
                    maxe = fmax(maxe, fabs(fb - dbd[i]) / fmax(fabs(dbd[i]), 1e-12));
                }
                note(&worst_fd, maxe);
                CHECK(maxe <= 1e-6, "mse float64 gradient vs finite differences: %.3g", maxe);
            }
            /* in place: dinput == input, dtarget == target */
            float *a2 = xmalloc((size_t)n * 4), *b2 = xmalloc((size_t)n * 4);
            memcpy(a2, a, (size_t)n * 4);
            memcpy(b2, b, (size_t)n * 4);
            CHECK_OK(attn_mse_backward(a2, b2, n, red, dl, a2, b2));
            CHECK(!memcmp(a2, da, (size_t)n * 4) && !memcmp(b2, db, (size_t)n * 4), "mse in-place backward differs");
            free(a2);
            free(b2);
            free(a);
            free(b);
            free(dl);
            free(l);
            free(da);
            free(db);
            free(ld);
            free(dad);
            free(dbd);
        }
    float l = 0;
    CHECK_OK(attn_mse_forward(NULL, NULL, 0, ATTN_REDUCTION_MEAN, &l));
    CHECK(isnan(l), "mse mean of nothing: %g, want NaN", (double)l);
}

/* ---- determinism across thread counts ---- */

static void test_threads(void) {
    test_rng r = rng_seeded(14);
    const int64_t n = 700, c = 97;
    const size_t len = (size_t)(n * c);
    float *x = xmalloc(len * 4), *d1 = xmalloc(len * 4), *dk = xmalloc(len * 4);
    int64_t *t = xmalloc((size_t)n * 8);
    fill_normal(&r, x, len, 3.0);
    for (int64_t i = 0; i < n; i++) t[i] = i % 11 == 0 ? -100 : (int64_t)(rng_next(&r) % (uint64_t)c);
    attn_cross_entropy_config cfg = attn_cross_entropy_config_default();
    cfg.label_smoothing = 0.1;
    float l1 = 0, lk = 0, m1 = 0, mk = 0;
    attn_set_num_threads(1);
    CHECK_OK(attn_cross_entropy_forward(x, t, n, c, &cfg, &l1, d1));
    CHECK_OK(attn_mse_forward(x, d1, (int64_t)len, ATTN_REDUCTION_SUM, &m1));
    for (int th = 2; th <= 4; th++) {
        attn_set_num_threads(th);
        CHECK_OK(attn_cross_entropy_forward(x, t, n, c, &cfg, &lk, dk));
        CHECK_OK(attn_mse_forward(x, d1, (int64_t)len, ATTN_REDUCTION_SUM, &mk));
        CHECK(!memcmp(&l1, &lk, 4) && !memcmp(d1, dk, len * 4) && !memcmp(&m1, &mk, 4),
              "%d threads: results differ from 1 thread", th);
    }
    attn_set_num_threads(0);
    free(x);
    free(d1);
    free(dk);
    free(t);
}

/* ---- errors ---- */

static void test_errors(void) {
    float x[12] = {0}, l[3], d[12];
    int64_t t[3] = {0, 7, 1};
    attn_cross_entropy_config cfg = attn_cross_entropy_config_default();
    CHECK_STATUS(attn_cross_entropy_forward(x, t, 3, 4, &cfg, l, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "targets[1] = 7") != NULL &&
              strstr(attn_last_error(), "attn_cross_entropy_forward"),
          "message should name the function and targets[1] = 7: '%s'", attn_last_error());
    t[1] = -3;
    CHECK_STATUS(attn_cross_entropy_backward(x, t, 3, 4, &cfg, NULL, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "targets[1] = -3") != NULL, "message: '%s'", attn_last_error());
    t[1] = -100;
    CHECK_OK(attn_cross_entropy_forward(x, t, 3, 4, &cfg, l, NULL));
    CHECK_STATUS(attn_cross_entropy_forward(NULL, t, 3, 4, &cfg, l, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_cross_entropy_forward(x, NULL, 3, 4, &cfg, l, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_cross_entropy_forward(x, t, 3, 4, &cfg, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_cross_entropy_backward(x, t, 3, 4, &cfg, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_cross_entropy_forward(x, t, -1, 4, &cfg, l, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_cross_entropy_forward(x, t, 3, 0, &cfg, l, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_cross_entropy_forward(x, t, INT64_MAX / 2, 4, &cfg, l, NULL), ATTN_ERR_OVERFLOW);
    CHECK_STATUS(attn_cross_entropy_forward(x, t, 3, 4, &cfg, l, x + 1), ATTN_ERR_INVALID_ARGUMENT);
    cfg.label_smoothing = 1.5;
    CHECK_STATUS(attn_cross_entropy_forward(x, t, 3, 4, &cfg, l, NULL), ATTN_ERR_INVALID_ARGUMENT);
    cfg.label_smoothing = NAN;
    CHECK_STATUS(attn_cross_entropy_forward(x, t, 3, 4, &cfg, l, NULL), ATTN_ERR_INVALID_ARGUMENT);
    cfg.label_smoothing = 0;
    cfg.reduction = (attn_reduction)7;
    CHECK_STATUS(attn_cross_entropy_forward(x, t, 3, 4, &cfg, l, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_mse_forward(x, x, -1, ATTN_REDUCTION_MEAN, l), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_mse_forward(NULL, x, 3, ATTN_REDUCTION_MEAN, l), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_mse_forward(x, x, 3, ATTN_REDUCTION_MEAN, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_mse_forward(x, x, 3, (attn_reduction)-1, l), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_mse_backward(x, NULL, 3, ATTN_REDUCTION_MEAN, NULL, d, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

/* ---- PyTorch fixture ---------------------------------------------------------------------- */

static const attn_safetensors_tensor *fx_find(const attn_safetensors *st, const char *name, attn_dtype dt) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    CHECK(t != NULL && t->dtype == dt, "fixture: tensor %s missing or not %s", name, attn_dtype_name(dt));
    return t && t->dtype == dt ? t : NULL;
}

/* A tensor copied out (float32 as float, float64 as double, int64 as int64); NULL when absent. */
static void *fx_copy(const attn_safetensors *st, const char *name, attn_dtype dt, size_t *count) {
    const attn_safetensors_tensor *t = fx_find(st, name, dt);
    if (!t) return NULL;
    void *p = xmalloc(t->nbytes);
    memcpy(p, t->data, t->nbytes);
    *count = t->nbytes / attn_dtype_size(dt);
    return p;
}

static const char *fx_meta(const attn_safetensors *st, const char *key) {
    const char *v = attn_safetensors_metadata_find(st, key);
    CHECK(v != NULL, "fixture: metadata %s missing", key);
    return v ? v : "0";
}

static attn_reduction parse_red(const char *s) {
    return !strcmp(s, "sum") ? ATTN_REDUCTION_SUM : !strcmp(s, "none") ? ATTN_REDUCTION_NONE : ATTN_REDUCTION_MEAN;
}

static void test_fixture(void) {
    char path[1024], key[64];
    snprintf(path, sizeof path, "%s/train_loss.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_open_file(path, &st);
    CHECK(s == ATTN_OK, "fixture %s: %s", path, attn_last_error());
    if (s) return;
    const int nce = atoi(fx_meta(st, "ce_cases")), nmse = atoi(fx_meta(st, "mse_cases"));
    CHECK(nce > 0 && nmse > 0, "fixture has no cases");
    for (int i = 0; i < nce; i++) {
        size_t nx = 0, nt = 0, nd = 0, nl = 0, ng = 0;
#define K(field) (snprintf(key, sizeof key, "ce%d.%s", i, field), key)
        float *x = fx_copy(st, K("logits"), ATTN_DTYPE_F32, &nx);
        int64_t *t = fx_copy(st, K("targets"), ATTN_DTYPE_I64, &nt);
        float *dl = fx_copy(st, K("dloss"), ATTN_DTYPE_F32, &nd);
        double *wl = fx_copy(st, K("loss"), ATTN_DTYPE_F64, &nl);
        double *wg = fx_copy(st, K("grad"), ATTN_DTYPE_F64, &ng);
        attn_cross_entropy_config cfg = attn_cross_entropy_config_default();
        cfg.reduction = parse_red(fx_meta(st, K("reduction")));
        cfg.label_smoothing = strtod(fx_meta(st, K("label_smoothing")), NULL);
        cfg.ignore_index = strtoll(fx_meta(st, K("ignore_index")), NULL, 10);
#undef K
        if (x && t && dl && wl && wg && nt > 0) {
            const int64_t n = (int64_t)nt, c = (int64_t)(nx / nt);
            float *loss = xmalloc((size_t)n * 4), *g = xmalloc(nx * 4);
            CHECK_OK(attn_cross_entropy_forward(x, t, n, c, &cfg, loss, NULL));
            if (isnan(wl[0])) {
                CHECK(isnan(loss[0]), "fixture ce%d: loss %g, PyTorch NaN", i, (double)loss[0]);
            } else {
                const double e = rel_err_fd(loss, wl, nl);
                note(&worst_fx_loss, e);
                CHECK(e <= 1e-5, "fixture ce%d: loss rel err %.3g", i, e);
            }
            CHECK_OK(attn_cross_entropy_backward(x, t, n, c, &cfg, dl, g));
            const double e = rel_err_fd(g, wg, ng);
            note(&worst_fx_grad, e);
            CHECK(e <= 1e-4, "fixture ce%d: gradient rel err %.3g", i, e);
            free(loss);
            free(g);
        }
        free(x);
        free(t);
        free(dl);
        free(wl);
        free(wg);
    }
    for (int i = 0; i < nmse; i++) {
        size_t na = 0, nb = 0, nd = 0, nl = 0, n1 = 0, n2 = 0;
#define K(field) (snprintf(key, sizeof key, "mse%d.%s", i, field), key)
        float *a = fx_copy(st, K("input"), ATTN_DTYPE_F32, &na);
        float *b = fx_copy(st, K("target"), ATTN_DTYPE_F32, &nb);
        float *dl = fx_copy(st, K("dloss"), ATTN_DTYPE_F32, &nd);
        double *wl = fx_copy(st, K("loss"), ATTN_DTYPE_F64, &nl);
        double *wa = fx_copy(st, K("dinput"), ATTN_DTYPE_F64, &n1);
        double *wb = fx_copy(st, K("dtarget"), ATTN_DTYPE_F64, &n2);
        const attn_reduction red = parse_red(fx_meta(st, K("reduction")));
#undef K
        if (a && b && dl && wl && wa && wb) {
            float *l = xmalloc(na * 4), *ga = xmalloc(na * 4), *gb = xmalloc(na * 4);
            CHECK_OK(attn_mse_forward(a, b, (int64_t)na, red, l));
            double e = rel_err_fd(l, wl, nl);
            note(&worst_fx_loss, e);
            CHECK(e <= 1e-5, "fixture mse%d: loss rel err %.3g", i, e);
            CHECK_OK(attn_mse_backward(a, b, (int64_t)na, red, dl, ga, gb));
            e = fmax(rel_err_fd(ga, wa, n1), rel_err_fd(gb, wb, n2));
            note(&worst_fx_grad, e);
            CHECK(e <= 1e-4, "fixture mse%d: gradient rel err %.3g", i, e);
            free(l);
            free(ga);
            free(gb);
        }
        free(a);
        free(b);
        free(dl);
        free(wl);
        free(wa);
        free(wb);
    }
    printf("  fixture (%d cross-entropy, %d MSE cases): worst loss %.2e, worst gradient %.2e\n", nce, nmse,
           worst_fx_loss, worst_fx_grad);
    attn_safetensors_close(st);
}

int main(void) {
    test_ce_reference();
    test_ce_large();
    test_mse_reference();
    test_threads();
    test_errors();
    test_fixture();
    printf("  vs float64 reference: worst loss %.2e, worst gradient %.2e; reference vs finite differences %.2e\n",
           worst_loss, worst_grad, worst_fd);
    return test_summary("test_train_loss");
}
