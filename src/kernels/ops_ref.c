/* Portable reference kernels for the row-wise / elementwise ops: the oracle the vector kernels
 * are tested against, and the production path on CPUs without AVX2. Plain C; reductions and the
 * transcendental functions are evaluated in double, so the results are the float rounding of
 * (almost) exact values. See ops_internal.h for each kernel's contract. */
#include <math.h>

#include "ops_internal.h"

#define REF_SQRT1_2 0.70710678118654752440
#define REF_INV_SQRT_2PI 0.39894228040143267794
#define REF_SQRT_2_PI 0.79788456080286535588 /* sqrt(2 / pi) */
#define REF_GELU_C 0.044715

static void softmax_fwd_ref(const float *x, float *y, int64_t n) {
    float mx = -INFINITY;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        nan |= isnan(x[i]);
        if (x[i] > mx) mx = x[i];
    }
    if (mx == -INFINITY) { /* all -inf: a masked row, 0; with a NaN: NaN (torch.softmax) */
        for (int64_t i = 0; i < n; i++) y[i] = nan ? NAN : 0.0f;
        return;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float e = expf(x[i] - mx);
        y[i] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

static void softmax_bwd_ref(const float *y, const float *dy, float *dx, int64_t n) {
    double dot = 0.0;
    for (int64_t i = 0; i < n; i++) dot += (double)dy[i] * y[i];
    for (int64_t i = 0; i < n; i++) dx[i] = (float)((double)y[i] * ((double)dy[i] - dot));
}

static void layernorm_fwd_ref(const float *x, const float *gamma, const float *beta, float *y, float *mean_out,
                              float *rstd_out, int64_t n, float eps) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    double mean = n > 0 ? s / (double)n : 0.0;
    double v = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - mean;
        v += d * d;
    }
    double var = n > 0 ? v / (double)n : 0.0;
    float fmean = (float)mean;
    float frstd = (float)(1.0 / sqrt(var + (double)eps));
    for (int64_t i = 0; i < n; i++) {
        float h = (x[i] - fmean) * frstd;
        if (gamma) h *= gamma[i];
        if (beta) h += beta[i];
        y[i] = h;
    }
    *mean_out = fmean;
    *rstd_out = frstd;
}

static void rms_norm_fwd_ref(const float *x, const float *w, float *y, int64_t n, double eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = w[i] * (x[i] * inv);
}

static void layernorm_bwd_ref(const float *x, const float *gamma, float mean, float rstd, const float *dy, float *dx,
                              int64_t n) {
    double sg = 0.0, sgx = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = gamma ? (double)dy[i] * gamma[i] : (double)dy[i];
        double xh = ((double)x[i] - mean) * rstd;
        sg += g;
        sgx += g * xh;
    }
    float mg = (float)(sg / (double)n), mgx = (float)(sgx / (double)n);
    for (int64_t i = 0; i < n; i++) {
        float g = gamma ? dy[i] * gamma[i] : dy[i];
        float xh = (x[i] - mean) * rstd;
        dx[i] = rstd * (g - mg - xh * mgx);
    }
}

/* Column kernels: rows outer (contiguous reads), a block of <= ATTN_OPS_COLS double
 * accumulators inner; each column still sums its rows in increasing order. */
static void layernorm_param_grad_ref(const float *x, const float *mean, const float *rstd, const float *dy,
                                     float *dgamma, float *dbeta, int64_t rows, int64_t n, int64_t c0, int64_t c1) {
    for (int64_t cb = c0; cb < c1; cb += ATTN_OPS_COLS) {
        const int64_t w = c1 - cb < ATTN_OPS_COLS ? c1 - cb : ATTN_OPS_COLS;
        double sg[ATTN_OPS_COLS] = {0}, sb[ATTN_OPS_COLS] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * n + cb, *dr = dy + r * n + cb;
            const double m = mean[r], rs = rstd[r];
            for (int64_t j = 0; j < w; j++) {
                sg[j] += (double)dr[j] * (((double)xr[j] - m) * rs);
                sb[j] += dr[j];
            }
        }
        for (int64_t j = 0; j < w; j++) {
            if (dgamma) dgamma[cb + j] += (float)sg[j];
            if (dbeta) dbeta[cb + j] += (float)sb[j];
        }
    }
}

static void col_sum_ref(const float *m, float *out, int64_t rows, int64_t n, int64_t c0, int64_t c1) {
    for (int64_t cb = c0; cb < c1; cb += ATTN_OPS_COLS) {
        const int64_t w = c1 - cb < ATTN_OPS_COLS ? c1 - cb : ATTN_OPS_COLS;
        double s[ATTN_OPS_COLS] = {0};
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < w; j++) s[j] += m[r * n + cb + j];
        for (int64_t j = 0; j < w; j++) out[cb + j] += (float)s[j];
    }
}

/* Phi(x), the standard normal CDF, without the 1 + erf cancellation for x < 0. */
static double normcdf(double x) { return 0.5 * erfc(-x * REF_SQRT1_2); }

/* sigmoid(2u) = (1 + tanh(u)) / 2 and its derivative factor s (1 - s), without cancellation */
static double gelu_tanh_sig(double x, double *ds) {
    double u2 = 2.0 * REF_SQRT_2_PI * (x + REF_GELU_C * x * x * x);
    double v = exp(-fabs(u2));
    double inv = 1.0 / (1.0 + v);
    *ds = v * inv * inv;
    return u2 >= 0 ? inv : v * inv;
}

static void gelu_fwd_ref(const float *x, float *y, int64_t n, attn_gelu_approx approx) {
    if (approx == ATTN_GELU_TANH) {
        for (int64_t i = 0; i < n; i++) {
            double ds, xd = x[i];
            if (fabs(xd) > 100.0) { /* s is 0 or 1 there; keeps x^3 finite */
                y[i] = xd > 0 ? x[i] : (float)(xd * 0.0);
                continue;
            }
            y[i] = (float)(xd * gelu_tanh_sig(xd, &ds));
        }
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] * normcdf(x[i]));
    }
}

static void gelu_bwd_ref(const float *x, const float *dy, float *dx, int64_t n, attn_gelu_approx approx) {
    if (approx == ATTN_GELU_TANH) {
        for (int64_t i = 0; i < n; i++) {
            double ds, xd = x[i];
            if (fabs(xd) > 100.0) {
                dx[i] = xd > 0 ? dy[i] : (float)((double)dy[i] * 0.0);
                continue;
            }
            double s = gelu_tanh_sig(xd, &ds);
            double du2 = 2.0 * REF_SQRT_2_PI * (1.0 + 3.0 * REF_GELU_C * xd * xd);
            dx[i] = (float)((double)dy[i] * (s + xd * ds * du2));
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            double xd = x[i];
            double pdf = exp(-0.5 * xd * xd) * REF_INV_SQRT_2PI;
            dx[i] = (float)((double)dy[i] * (normcdf(xd) + xd * pdf));
        }
    }
}

static void relu_fwd_ref(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] <= 0.0f ? 0.0f : x[i]; /* NaN propagates */
}

static void relu_bwd_ref(const float *x, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

static void add_ref(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void silu_gate_ref(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void dropout_ref(const float *x, float *y, uint8_t *mask, int64_t n, uint64_t first, float p, uint32_t threshold,
                        float scale, uint64_t seed, uint64_t offset) {
    (void)threshold; /* the oracle uses the definition: keep when uniform >= p */
    uint32_t w[4];
    for (int64_t j = 0; j < n; j++) {
        uint64_t i = first + (uint64_t)j;
        if (j == 0 || i % 4 == 0) attn_philox_block(i / 4, seed, offset, w);
        float u = (float)(w[i % 4] >> 8) * 0x1p-24f;
        int keep = u >= p;
        y[j] = keep ? x[j] * scale : 0.0f;
        if (mask) mask[j] = (uint8_t)keep;
    }
}

const attn_ops_kernels attn_ops_ref = {
    .name = "ref",
    .softmax_fwd = softmax_fwd_ref,
    .softmax_bwd = softmax_bwd_ref,
    .layernorm_fwd = layernorm_fwd_ref,
    .layernorm_bwd = layernorm_bwd_ref,
    .rms_norm_fwd = rms_norm_fwd_ref,
    .layernorm_param_grad = layernorm_param_grad_ref,
    .col_sum = col_sum_ref,
    .gelu_fwd = gelu_fwd_ref,
    .gelu_bwd = gelu_bwd_ref,
    .relu_fwd = relu_fwd_ref,
    .relu_bwd = relu_bwd_ref,
    .add = add_ref,
    .silu_gate = silu_gate_ref,
    .dropout = dropout_ref,
    .adamw = attn_adamw_ref,
};
