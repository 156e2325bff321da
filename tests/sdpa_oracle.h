/* A float64 attention oracle written independently of src/attention: it materialises the full
 * [Nq, Nk] matrices per head from contiguous double copies and a fully expanded mask, and
 * differentiates with the textbook matrix formulas. Used by the attention tests. */
#ifndef ATTN_SDPA_ORACLE_H
#define ATTN_SDPA_ORACLE_H

#include "test_util.h"

typedef struct {
    int B, Hq, Hk, Nq, Nk, d, dv;
    double scale, softcap;
    const uint8_t *allowed; /* [B, Hq, Nq, Nk] expanded, 1 = may attend */
    const double *bias;     /* [B, Hq, Nq, Nk] ALiBi + additive mask (finite where allowed) */
    const double *keep;     /* [B, Hq, Nq, Nk] dropout factors (0 or 1/(1-p)); NULL = none */
} oracle_shape;

#define OIDX4(a, b, c, d, B_, C_, D_) ((((size_t)(a) * (B_) + (b)) * (C_) + (c)) * (D_) + (d))

/* q [B,Hq,Nq,d], k [B,Hk,Nk,d], v [B,Hk,Nk,dv] -> o [B,Hq,Nq,dv], p [B,Hq,Nq,Nk] (after dropout),
 * lse [B,Hq,Nq] */
static void oracle_forward(const oracle_shape *s, const double *q, const double *k, const double *v, double *o,
                           double *p, double *lse) {
    const int g = s->Hq / s->Hk;
    double *S = xmalloc(sizeof(double) * (size_t)s->Nk);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->Hq; h++)
            for (int i = 0; i < s->Nq; i++) {
                double m = -INFINITY;
                for (int j = 0; j < s->Nk; j++) {
                    size_t idx = OIDX4(b, h, i, j, s->Hq, s->Nq, s->Nk);
                    if (!s->allowed[idx]) {
                        S[j] = -INFINITY;
                        continue;
                    }
                    double x = 0;
                    for (int t = 0; t < s->d; t++)
                        x += q[OIDX4(b, h, i, t, s->Hq, s->Nq, s->d)] * k[OIDX4(b, h / g, j, t, s->Hk, s->Nk, s->d)];
                    x *= s->scale;
                    if (s->softcap > 0) x = s->softcap * tanh(x / s->softcap);
                    S[j] = x + s->bias[idx];
                    if (S[j] > m) m = S[j];
                }
                double sum = 0;
                for (int j = 0; j < s->Nk; j++) sum += m == -INFINITY ? 0 : exp(S[j] - m);
                double l = m == -INFINITY ? -INFINITY : m + log(sum);
                if (lse) lse[OIDX4(0, b, h, i, s->B, s->Hq, s->Nq)] = l;
                for (int t = 0; t < s->dv; t++) o[OIDX4(b, h, i, t, s->Hq, s->Nq, s->dv)] = 0;
                for (int j = 0; j < s->Nk; j++) {
                    size_t idx = OIDX4(b, h, i, j, s->Hq, s->Nq, s->Nk);
                    double pj = m == -INFINITY ? 0 : exp(S[j] - l);
                    if (s->keep) pj *= s->keep[idx];
                    if (p) p[idx] = pj;
                    for (int t = 0; t < s->dv; t++)
                        o[OIDX4(b, h, i, t, s->Hq, s->Nq, s->dv)] += pj * v[OIDX4(b, h / g, j, t, s->Hk, s->Nk, s->dv)];
                }
            }
    free(S);
}

/* Matrix-form backward: with P (before dropout), P~ = P*keep: dV = P~^T dO, dP~ = dO V^T,
 * dP = dP~ * keep, dS = P * (dP - rowsum(P * dP)), dX = dS * capderiv, dQ = scale dX K,
 * dK = scale dX^T Q. dq/dk/dv are overwritten. */
static void oracle_backward(const oracle_shape *s, const double *q, const double *k, const double *v,
                            const double *dout, double *dq, double *dk, double *dv) {
    const int g = s->Hq / s->Hk;
    const size_t nk = (size_t)s->Nk;
    double *P = xmalloc(sizeof(double) * nk), *X = xmalloc(sizeof(double) * nk), *dP = xmalloc(sizeof(double) * nk);
    memset(dq, 0, sizeof(double) * (size_t)s->B * s->Hq * s->Nq * s->d);
    memset(dk, 0, sizeof(double) * (size_t)s->B * s->Hk * s->Nk * s->d);
    memset(dv, 0, sizeof(double) * (size_t)s->B * s->Hk * s->Nk * s->dv);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->Hq; h++)
            for (int i = 0; i < s->Nq; i++) {
                double m = -INFINITY;
                for (int j = 0; j < s->Nk; j++) {
                    size_t idx = OIDX4(b, h, i, j, s->Hq, s->Nq, s->Nk);
                    X[j] = 0;
                    if (!s->allowed[idx]) {
                        P[j] = -INFINITY;
                        continue;
                    }
                    double x = 0;
                    for (int t = 0; t < s->d; t++)
                        x += q[OIDX4(b, h, i, t, s->Hq, s->Nq, s->d)] * k[OIDX4(b, h / g, j, t, s->Hk, s->Nk, s->d)];
                    x *= s->scale;
                    if (s->softcap > 0) x = s->softcap * tanh(x / s->softcap);
                    X[j] = x;
                    P[j] = x + s->bias[idx];
                    if (P[j] > m) m = P[j];
                }
                if (m == -INFINITY) continue;
                double sum = 0;
                for (int j = 0; j < s->Nk; j++) sum += exp(P[j] - m);
                for (int j = 0; j < s->Nk; j++) P[j] = exp(P[j] - m) / sum;
                double D = 0;
                for (int j = 0; j < s->Nk; j++) {
                    size_t idx = OIDX4(b, h, i, j, s->Hq, s->Nq, s->Nk);
                    double kp = s->keep ? s->keep[idx] : 1.0;
                    double acc = 0;
                    for (int t = 0; t < s->dv; t++) {
                        double go = dout[OIDX4(b, h, i, t, s->Hq, s->Nq, s->dv)];
                        acc += go * v[OIDX4(b, h / g, j, t, s->Hk, s->Nk, s->dv)];
                        dv[OIDX4(b, h / g, j, t, s->Hk, s->Nk, s->dv)] += P[j] * kp * go;
                    }
                    dP[j] = acc * kp;
                    D += P[j] * dP[j];
                }
                for (int j = 0; j < s->Nk; j++) {
                    double dx = P[j] * (dP[j] - D);
                    if (s->softcap > 0) dx *= 1 - (X[j] / s->softcap) * (X[j] / s->softcap);
                    dx *= s->scale;
                    for (int t = 0; t < s->d; t++) {
                        dq[OIDX4(b, h, i, t, s->Hq, s->Nq, s->d)] += dx * k[OIDX4(b, h / g, j, t, s->Hk, s->Nk, s->d)];
                        dk[OIDX4(b, h / g, j, t, s->Hk, s->Nk, s->d)] += dx * q[OIDX4(b, h, i, t, s->Hq, s->Nq, s->d)];
                    }
                }
            }
    free(P);
    free(X);
    free(dP);
}

#endif
