/* Row kernels written once over the vector names of simd_<isa>.h (ATTN_VL floats a vector) and
 * included by ops_avx2.c and ops_avx512.c, which name them with OPS_FN(name). The contracts are
 * ops_internal.h's; the reference is ops_ref.c. Each ISA keeps its own horizontal reductions (so
 * each keeps the bits it had): only the loop structure is shared. */
#ifndef ATTN_OPS_BODY_H
#define ATTN_OPS_BODY_H

#include <math.h>

/* lo += v's low half, hi += its high half, in double */
static inline void acc_pd(attn_vd *lo, attn_vd *hi, attn_vf v) {
    *lo = vd_add(*lo, v_lo_pd(v));
    *hi = vd_add(*hi, v_hi_pd(v));
}

static void OPS_FN(softmax_fwd)(const float *x, float *y, int64_t n) {
    const attn_vf ninf = v_set1(-INFINITY);
    attn_vf m0 = ninf, m1 = ninf;
    int64_t i = 0;
    for (; i + 2 * ATTN_VL <= n; i += 2 * ATTN_VL) {
        m0 = v_max(m0, v_load(x + i));
        m1 = v_max(m1, v_load(x + i + ATTN_VL));
    }
    for (; i < n; i += ATTN_VL) m0 = v_max(m0, v_load_n_or(ninf, x + i, n - i));
    const float mx = v_hmax(v_max(m0, m1));
    if (mx == -INFINITY) {
        /* the max drops a NaN: a row of -inf and NaN is NaN (torch.softmax), not a masked row */
        for (i = 0; i < n && !isnan(x[i]); i++) {}
        if (i < n) {
            for (i = 0; i < n; i++) y[i] = NAN;
            return;
        }
        for (i = 0; i < n; i += ATTN_VL) v_store_n(y + i, n - i, v_zero());
        return;
    }
    /* the sum in double, as the reference: a float sum of thousands of terms drifts by ~1e-6 */
    const attn_vf vm = v_set1(mx);
    attn_vd s0 = vd_zero(), s1 = vd_zero(), s2 = vd_zero(), s3 = vd_zero();
    for (i = 0; i + 2 * ATTN_VL <= n; i += 2 * ATTN_VL) {
        attn_vf e0 = v_exp(v_sub(v_load(x + i), vm));
        attn_vf e1 = v_exp(v_sub(v_load(x + i + ATTN_VL), vm));
        v_store(y + i, e0);
        v_store(y + i + ATTN_VL, e1);
        acc_pd(&s0, &s1, e0);
        acc_pd(&s2, &s3, e1);
    }
    for (; i < n; i += ATTN_VL) {
        attn_vf e = v_exp(v_sub(v_load_n_or(ninf, x + i, n - i), vm)); /* masked lanes: e^-inf = 0 */
        v_store_n(y + i, n - i, e);
        acc_pd(&s0, &s1, e);
    }
    const double sum = vd_hsum(vd_add(vd_add(s0, s1), vd_add(s2, s3)));
    const attn_vf inv = v_set1((float)(1.0 / sum));
    for (i = 0; i + ATTN_VL <= n; i += ATTN_VL) v_store(y + i, v_mul(v_load(y + i), inv));
    if (i < n) v_store_n(y + i, n - i, v_mul(v_load_n(y + i, n - i), inv));
}

/* dot(dy, y) is accumulated in double and kept as float hi + lo: in a peaked row the largest
 * dx_i = y_i (dy_i - dot) cancels, and (dy_i - hi) - lo keeps it accurate where a float dot
 * would lose the low bits. */
static void OPS_FN(softmax_bwd)(const float *y, const float *dy, float *dx, int64_t n) {
    attn_vd s0 = vd_zero(), s1 = vd_zero();
    for (int64_t i = 0; i < n; i += ATTN_VL) {
        const attn_vf a = v_load_n(dy + i, n - i), b = v_load_n(y + i, n - i);
        s0 = vd_fmadd(v_lo_pd(a), v_lo_pd(b), s0);
        s1 = vd_fmadd(v_hi_pd(a), v_hi_pd(b), s1);
    }
    const double dot = vd_hsum(vd_add(s0, s1));
    const float dhi = (float)dot, dlo = (float)(dot - (double)dhi);
    const attn_vf vhi = v_set1(dhi), vlo = v_set1(dlo);
    int64_t i = 0;
    for (; i + ATTN_VL <= n; i += ATTN_VL)
        v_store(dx + i, v_mul(v_load(y + i), v_sub(v_sub(v_load(dy + i), vhi), vlo)));
    if (i < n) v_store_n(dx + i, n - i, v_mul(v_load_n(y + i, n - i), v_sub(v_sub(v_load_n(dy + i, n - i), vhi), vlo)));
}

/* The sum of squares in double (each square exact there), as the reference; then
 * y = w * (x * inv) in float, inv = f32(1 / sqrt(ss / n + eps)). */
static void OPS_FN(rms_norm_fwd)(const float *x, const float *w, float *y, int64_t n, double eps) {
    attn_vd s0 = vd_zero(), s1 = vd_zero(), s2 = vd_zero(), s3 = vd_zero();
    int64_t i = 0;
    for (; i + 2 * ATTN_VL <= n; i += 2 * ATTN_VL) {
        const attn_vf a = v_load(x + i), b = v_load(x + i + ATTN_VL);
        s0 = vd_fmadd(v_lo_pd(a), v_lo_pd(a), s0);
        s1 = vd_fmadd(v_hi_pd(a), v_hi_pd(a), s1);
        s2 = vd_fmadd(v_lo_pd(b), v_lo_pd(b), s2);
        s3 = vd_fmadd(v_hi_pd(b), v_hi_pd(b), s3);
    }
    for (; i < n; i += ATTN_VL) {
        const attn_vf a = v_load_n(x + i, n - i);
        s0 = vd_fmadd(v_lo_pd(a), v_lo_pd(a), s0);
        s1 = vd_fmadd(v_hi_pd(a), v_hi_pd(a), s1);
    }
    const double ss = vd_hsum(vd_add(vd_add(s0, s1), vd_add(s2, s3)));
    const attn_vf inv = v_set1((float)(1.0 / sqrt(ss / (double)n + eps)));
    for (i = 0; i + ATTN_VL <= n; i += ATTN_VL) v_store(y + i, v_mul(v_load(w + i), v_mul(v_load(x + i), inv)));
    if (i < n) v_store_n(y + i, n - i, v_mul(v_load_n(w + i, n - i), v_mul(v_load_n(x + i, n - i), inv)));
}

/* y = g / (1 + e^-g) * u, in float, e^x the vector exp (vec_math.h) */
static inline attn_vf OPS_FN(silu_gate_v)(attn_vf g, attn_vf u) {
    const attn_vf e = v_exp(v_sub(v_zero(), g));
    return v_mul(v_div(g, v_add(v_set1(1.0f), e)), u);
}

static void OPS_FN(silu_gate)(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + ATTN_VL <= n; i += ATTN_VL) v_store(y + i, OPS_FN(silu_gate_v)(v_load(g + i), v_load(u + i)));
    if (i < n) v_store_n(y + i, n - i, OPS_FN(silu_gate_v)(v_load_n(g + i, n - i), v_load_n(u + i, n - i)));
}

#endif
