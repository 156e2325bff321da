/* Reference feature-map kernels (see linear_vec.h). */
#include <math.h>

#include "linear_vec.h"
#include "attn/core.h"

static void elu1_ref(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] + 1.0f : expf(x[i]);
}
static void elu1_bwd_ref(const float *x, const float *dy, float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = dy[i] * (x[i] > 0.0f ? 1.0f : expf(x[i]));
}
static void expsc_ref(float *f, int64_t n, float sub, float scale) {
    for (int64_t i = 0; i < n; i++) f[i] = expf(f[i] - sub) * scale;
}
static float submax_ref(float *f, int64_t n, float sub) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        f[i] -= sub;
        m = f[i] > m ? f[i] : m;
    }
    return m;
}

static void ydiv_ref(const float *y, const float *den, float *t, int64_t n) {
    for (int64_t i = 0; i < n; i++) t[i] = den[i] != 0.0f ? y[i] / den[i] : 0.0f;
}

static float edot_ref(const float *g, const float *y, float den, float *ep, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        ep[i] = g[i] / den;
        s += ep[i] * y[i];
    }
    return s;
}

static int all_finite_ref(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

const attn_linear_vec_kernels attn_linear_vec_ref = {.elu1 = elu1_ref,
                                                     .elu1_bwd = elu1_bwd_ref,
                                                     .expsc = expsc_ref,
                                                     .submax = submax_ref,
                                                     .ydiv = ydiv_ref,
                                                     .edot = edot_ref,
                                                     .all_finite = all_finite_ref};
