/* Linear attention (Katharopoulos et al. 2020) and the engine it shares with Performer FAVOR+.
 *
 * Per (batch, head), F_q = phi(Q) [Nq, p], F_k = phi(K) [Nk, p] (rows of hidden keys 0),
 * V' = [V, 1] [Nk, dv + 1]. Query i sees keys j <= i + off (causal; off = 0 top-left,
 * Nk - Nq bottom-right) or every key:
 *   Y_i = sum_{j visible} (F_q,i . F_k,j) V'_j = F_q,i^T [S_i | z_i]        [dv + 1]
 *   den_i = Y_i[dv] + eps,  out_i = Y_i[:dv] / den_i   (0 when den_i == 0: the query sees no key)
 * phi(x) = elu(x) + 1 here (p = d, eps = 1e-6); performer.c supplies FAVOR+'s.
 * Backward, with g_i = dL/dout_i and E'_i = [g_i / den_i, -(g_i . out_i) / den_i] [dv + 1]:
 *   dF_q,i = sum_{j visible to i} (E'_i . V'_j) F_k,j
 *   dF_k,j = sum_{i seeing j} (E'_i . V'_j) F_q,i
 *   dV_j   = sum_{i seeing j} (F_q,i . F_k,j) E'_i[:dv]
 * then through phi: elu + 1 has phi'(x) = 1 (x > 0), exp(x) (x <= 0).
 * All four are one product, Y_o = sum_{(o, t) allowed} (A_o . B_t) C_t (prim below): non-causal as
 * two GEMMs (S = B^T C, Y = A S); causal chunk by chunk of CH outputs: Y = A_chunk S (the
 * prefix state) + mask(A_chunk B_block^T) C_block, then S += B_block^T C_block; the transposed
 * visibility (the key side of the backward) runs the chunks from the end. Never an N x N matrix.
 * A block whose C rows hold a NaN or an infinity takes its masked product row by row over the
 * inputs each row sees, so a later input's NaN never reaches earlier rows through the mask's 0.
 * Each (batch, head) runs on one thread with single-threaded GEMMs: bitwise identical for any
 * thread count. The recurrent step is the same product starting from the stored state. */
#include <math.h>
#include <string.h>

#include "attention/attention_common.h"
#include "attention/linear_internal.h"
#include "kernels/registry.h"
#include "core/internal.h"
#include "kernels/gemm_internal.h"

#define CH 64 /* chunk of rows of the causal product */

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static size_t fl(int64_t n) { return (size_t)((n + 15) / 16 * 16); } /* floats, 64-byte multiple */

static void gemm(attn_transpose ta, attn_transpose tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc, void *gws, size_t gwsb) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (beta == 0.0f)
            for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)n);
        return;
    }
    /* shapes and workspace are the engine's own: no error is possible */
    if (gws)
        (void)attn_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc, gws, gwsb);
    else
        (void)attn_sgemm_ref(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

enum { PRIM_ALL = 0, PRIM_FWD = 1, PRIM_REV = 2 };

/* y[i] += sum over the inputs t = a + j that output o0 + i sees of T[i][j] C[j] (C from input a):
 * the masked product of prim without its GEMM, for a block that holds a NaN or an infinity, so
 * that the mask's zeros never multiply it (0 * Inf would carry it to the rows before it). */
static __attribute__((noinline)) void masked_product_exact(int mode, int64_t off, int64_t o0, int64_t rows, int64_t a,
                                                           int64_t cols, int64_t r, const float *T, const float *C,
                                                           float *y) {
    for (int64_t i = 0; i < rows; i++) {
        const int64_t lim = mode == PRIM_FWD ? o0 + i + off - a : o0 + i - off - a;
        const int64_t j0 = mode == PRIM_FWD ? 0 : clamp64(lim, 0, cols);
        const int64_t j1 = mode == PRIM_FWD ? clamp64(lim + 1, 0, cols) : cols;
        for (int64_t j = j0; j < j1; j++)
            for (int64_t x = 0; x < r; x++) y[i * r + x] += T[i * CH + j] * C[j * r + x];
    }
}

/* Y [no, r] = sum over allowed (o, t) of (A_o . B_t) C_t; A [no, p], B [ni, p], C [ni, r]
 * contiguous. PRIM_FWD: t <= o + off; PRIM_REV: t >= o - off. St [p, r]: the state, zeroed first
 * unless keep_state; on return it holds B^T C over every input row the product reached (PRIM_FWD
 * and PRIM_ALL: rows [0, clamp(no + off, 0, ni)) resp. all). T: CH * CH floats. */
static void prim(int mode, int64_t off, int64_t no, int64_t ni, int64_t p, int64_t r, const float *A, const float *B,
                 const float *C, float *Y, float *St, int keep_state, float *T, void *gws, size_t gwsb) {
    if (!keep_state) memset(St, 0, sizeof(float) * (size_t)(p * r));
    if (mode == PRIM_ALL) {
        gemm(ATTN_TRANS, ATTN_NO_TRANS, p, r, ni, B, p, C, r, 1.0f, St, r, gws, gwsb);
        gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, no, r, p, A, p, St, r, 0.0f, Y, r, gws, gwsb);
        return;
    }
    const attn_linear_vec_kernels *vk = attn_kernel_ctx_active()->linear_vec;
    const int64_t nch = (no + CH - 1) / CH;
    int64_t done = mode == PRIM_FWD ? 0 : ni; /* the state holds inputs [0, done) resp. [done, ni) */
    for (int64_t ci = 0; ci < nch; ci++) {
        const int64_t c = mode == PRIM_FWD ? ci : nch - 1 - ci;
        const int64_t o0 = c * CH, o1 = o0 + CH < no ? o0 + CH : no, rows = o1 - o0;
        const int64_t a = clamp64(mode == PRIM_FWD ? o0 + off : o0 - off, 0, ni);
        const int64_t b = clamp64(mode == PRIM_FWD ? o1 + off : o1 - off, 0, ni);
        /* inputs every row of the chunk sees that the state lacks yet (the first chunk's, when
         * the diagonal starts inside the inputs) */
        const int64_t g0 = mode == PRIM_FWD ? done : b, g1 = mode == PRIM_FWD ? a : done;
        if (g1 > g0)
            gemm(ATTN_TRANS, ATTN_NO_TRANS, p, r, g1 - g0, B + g0 * p, p, C + g0 * r, r, 1.0f, St, r, gws, gwsb);
        done = mode == PRIM_FWD ? (b > a ? b : a) : (a < b ? a : b);
        float *y = Y + o0 * r;
        gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, rows, r, p, A + o0 * p, p, St, r, 0.0f, y, r, gws, gwsb);
        if (b <= a) continue;
        const int64_t cols = b - a;
        gemm(ATTN_NO_TRANS, ATTN_TRANS, rows, cols, p, A + o0 * p, p, B + a * p, p, 0.0f, T, CH, gws, gwsb);
        for (int64_t i = 0; i < rows; i++) {
            const int64_t o = o0 + i;
            for (int64_t j = 0; j < cols; j++) {
                const int64_t t = a + j;
                if (mode == PRIM_FWD ? t > o + off : t < o - off) T[i * CH + j] = 0.0f;
            }
        }
        if (vk->all_finite(C + a * r, cols * r)) /* vectorised: a scalar check cost 8% */
            gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, rows, r, cols, T, CH, C + a * r, r, 1.0f, y, r, gws, gwsb);
        else
            masked_product_exact(mode, off, o0, rows, a, cols, r, T, C + a * r, y);
        gemm(ATTN_TRANS, ATTN_NO_TRANS, p, r, cols, B + a * p, p, C + a * r, r, 1.0f, St, r, gws, gwsb);
    }
}

/* prim for the parallel form: PRIM_ALL with an odd number r of output columns (dv + 1) runs
 * transposed, St' = C^T B [r, p] and Y^T = St' A^T [r, no], so the GEMMs' m (not n) is the
 * awkward size: a GEMM's register tile is much wider than tall. Every element is the same FMA
 * chain either way (same k order), so the values are bitwise those of prim. Returns 1 when Y
 * holds Y^T (element (o, c) at Y[c * no + o]), else 0 (at Y[o * r + c]). */
static int prim_run(int mode, int64_t off, int64_t no, int64_t ni, int64_t p, int64_t r, const float *A, const float *B,
                    const float *C, float *Y, float *St, float *T, void *gws, size_t gwsb) {
    if (mode == PRIM_ALL && r % 16 != 0 && no > 0) {
        gemm(ATTN_TRANS, ATTN_NO_TRANS, r, p, ni, C, r, B, p, 0.0f, St, p, gws, gwsb);
        gemm(ATTN_NO_TRANS, ATTN_TRANS, r, no, p, St, p, A, p, 0.0f, Y, no, gws, gwsb);
        return 1;
    }
    prim(mode, off, no, ni, p, r, A, B, C, Y, St, 0, T, gws, gwsb);
    return 0;
}

/* ---- feature maps ---- */

void attn_lin_features(const lin_map *mp, int64_t h, int64_t d, const float *x, int64_t rs, int64_t cs, int64_t n,
                       int is_query, const uint8_t *keep, int64_t ks, float *kmax, float *F, float *xs, void *gws,
                       size_t gwsb) {
    const int64_t p = mp->p;
    const attn_linear_vec_kernels *vk = attn_kernel_ctx_active()->linear_vec;
    if (!mp->w) { /* elu(x) + 1 */
        for (int64_t i = 0; i < n; i++) {
            float *f = F + i * p;
            if (keep && !keep[i * ks]) {
                memset(f, 0, sizeof(float) * (size_t)d);
                continue;
            }
            if (cs == 1) {
                vk->elu1(x + i * rs, f, d);
            } else {
                for (int64_t c = 0; c < d; c++) f[c] = x[i * rs + c * cs];
                vk->elu1(f, f, d);
            }
        }
        return;
    }
    /* FAVOR+: H = x' W^T - |x'|^2 / 2, minus the stabiliser, exponentiated, / sqrt(m) */
    const float xsc = (float)pow((double)d, -0.25), inv = (float)(1.0 / sqrt((double)p));
    const float *w = mp->w + (mp->w_heads > 1 ? h : 0) * p * d;
    for (int64_t i = 0; i < n; i++) {
        float *o = xs + i * d;
        const float *xi = x + i * rs;
        if (cs == 1)
            for (int64_t c = 0; c < d; c++) o[c] = xi[c] * xsc;
        else
            for (int64_t c = 0; c < d; c++) o[c] = xi[c * cs] * xsc;
    }
    gemm(ATTN_NO_TRANS, ATTN_TRANS, n, p, d, xs, d, w, d, 0.0f, F, p, gws, gwsb);
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double sq = 0;
        for (int64_t c = 0; c < d; c++) sq += (double)xs[i * d + c] * xs[i * d + c];
        float *f = F + i * p;
        const float rm = vk->submax(f, p, (float)(0.5 * sq));
        if (is_query) {
            vk->expsc(f, p, rm, inv);
        } else if (!keep || keep[i * ks]) {
            m = rm > m ? rm : m;
        }
    }
    if (is_query) return;
    if (kmax) *kmax = m;
    /* A kept key whose logits hold no finite maximum (a NaN / Inf in it) keeps its non-finite
     * features (stabiliser 0: exp(NaN) = NaN, exp(-Inf) = 0) as it would beside finite keys, so
     * one such key alone in a step propagates as in the parallel form instead of vanishing. */
    const float stab = m > -INFINITY ? m : 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float *f = F + i * p;
        if (!keep || keep[i * ks])
            vk->expsc(f, p, stab, inv);
        else
            memset(f, 0, sizeof(float) * (size_t)p);
    }
}

/* dX (strided) from dF [n, p] (overwritten) through phi; F the features, xs / dxs n * d scratch.
 * acc: add into dx instead of writing. */
static void features_backward(const lin_map *mp, int64_t h, int64_t d, const float *x, int64_t rs, int64_t cs,
                              int64_t n, const uint8_t *keep, int64_t ks, const float *F, float *dF, float *xs,
                              float *dxs, float *dx, int64_t drs, int64_t dcs, int acc, void *gws, size_t gwsb) {
    const int64_t p = mp->p;
    (void)xs; /* x' is recomputed from x on the fly */
    if (!mp->w) {
        const attn_linear_vec_kernels *vk = attn_kernel_ctx_active()->linear_vec;
        for (int64_t i = 0; i < n; i++) {
            float *g = dF + i * p, *o = dx + i * drs;
            if (keep && !keep[i * ks]) {
                memset(g, 0, sizeof(float) * (size_t)d);
            } else if (cs == 1) {
                vk->elu1_bwd(x + i * rs, g, g, d);
            } else {
                float *xr = dxs + i * d;
                for (int64_t c = 0; c < d; c++) xr[c] = x[i * rs + c * cs];
                vk->elu1_bwd(xr, g, g, d);
            }
            if (dcs == 1) {
                if (acc)
                    for (int64_t c = 0; c < d; c++) o[c] += g[c];
                else
                    memcpy(o, g, sizeof(float) * (size_t)d);
            } else {
                for (int64_t c = 0; c < d; c++) o[c * dcs] = acc ? o[c * dcs] + g[c] : g[c];
            }
        }
        return;
    }
    const float xsc = (float)pow((double)d, -0.25);
    const float *w = mp->w + (mp->w_heads > 1 ? h : 0) * p * d;
    for (int64_t i = 0; i < n * p; i++) dF[i] *= F[i]; /* dH */
    gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, n, d, p, dF, p, w, d, 0.0f, dxs, d, gws, gwsb);
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int64_t r = 0; r < p; r++) s += dF[i * p + r];
        for (int64_t c = 0; c < d; c++) {
            const float g = xsc * (dxs[i * d + c] - (float)s * (x[i * rs + c * cs] * xsc));
            float *o = dx + i * drs + c * dcs;
            *o = acc ? *o + g : g;
        }
    }
}

/* ---- the parallel form ---- */

typedef struct lin_bufs {
    float *Fq, *Fk, *Vp, *Y, *St, *T, *X1, *X2, *Ep, *dFq, *dFk, *dVp, *dK, *dV;
    void *gws;
    size_t gwsb;
} lin_bufs;

static size_t gemm_dim_ws(const lin_map *mp, int64_t nq, int64_t nk, int64_t d, int64_t dv) {
    const int64_t D = max64(max64(max64(nq, nk), max64(mp->p, dv + 1)), max64(d, CH));
    return attn_sgemm_workspace_size_1(D, D, D);
}

/* Floats of one thread's buffers (bwd: with the backward's), laid out at base when non-NULL. */
static size_t layout(const lin_map *mp, int64_t nq, int64_t nk, int64_t d, int64_t dv, float *base, lin_bufs *bb) {
    const int64_t p = mp->p, e = dv + 1, n = max64(nq, nk);
    const size_t sz[14] = {fl(nq * p), fl(nk * p), fl(nk * e), fl(nq * e), fl(p * e),  fl(CH * CH), fl(n * d),
                           fl(n * d),  fl(nq * e), fl(nq * p), fl(nk * p), fl(nk * e), fl(nk * d),  fl(nk * dv)};
    float **dst[14] = {&bb->Fq, &bb->Fk, &bb->Vp,  &bb->Y,   &bb->St,  &bb->T,  &bb->X1,
                       &bb->X2, &bb->Ep, &bb->dFq, &bb->dFk, &bb->dVp, &bb->dK, &bb->dV};
    size_t off = 0;
    for (int i = 0; i < 14; i++) {
        if (base) *dst[i] = base + off;
        off += sz[i];
    }
    const size_t g = gemm_dim_ws(mp, nq, nk, d, dv);
    if (base) {
        bb->gws = base + off;
        bb->gwsb = g;
    }
    return off + (g + 63) / 64 * 16;
}

size_t attn_lin_ws_bytes(const lin_map *mp, int64_t b, int64_t h, int64_t nq, int64_t nk, int64_t d, int64_t dv) {
    (void)b, (void)h;
    if (nq < 0 || nk < 0 || d < 1 || dv < 1 || nq > ((int64_t)1 << 32) || nk > ((int64_t)1 << 32) || d > (1 << 20) ||
        dv > (1 << 20) || mp->p < 1 || mp->p > (1 << 20))
        return SIZE_MAX;
    lin_bufs bb;
    const double est = (double)(nq + nk + CH) * (double)(mp->p + dv + d + 2) * 8.0 * attn_get_num_threads();
    if (est > 1e15) return SIZE_MAX;
    size_t per = layout(mp, nq, nk, d, dv, NULL, &bb), total;
    if (attn_mul_overflow(per, sizeof(float) * (size_t)attn_get_num_threads(), &total) ||
        attn_add_overflow(total, 64, &total))
        return SIZE_MAX;
    return total;
}

/* V' = [V, 1] of kv head g (contiguous [nk, dv + 1]). */
static void load_vp(const attn_tensor *v, int64_t b, int64_t g, int64_t nk, int64_t dv, float *Vp) {
    const float *vh = v->data + b * v->stride[0] + g * v->stride[1];
    for (int64_t j = 0; j < nk; j++) {
        for (int64_t c = 0; c < dv; c++) Vp[j * (dv + 1) + c] = vh[j * v->stride[2] + c * v->stride[3]];
        Vp[j * (dv + 1) + dv] = 1.0f;
    }
}

/* Y of query head h (all of Fq, Fk, Vp, Y of the bufs). */
static int head_forward(const lin_map *mp, const attn_ctx *c, const attn_tensor *q, const attn_tensor *k,
                        const attn_tensor *v, int64_t b, int64_t h, const lin_bufs *w) {
    const int64_t g = h / c->group, e = c->dv + 1;
    const uint8_t *keep = c->km ? c->km + b * c->kms[0] : NULL;
    attn_lin_features(mp, h, c->d, q->data + b * q->stride[0] + h * q->stride[1], q->stride[2], q->stride[3], c->nq, 1,
                      NULL, 0, NULL, w->Fq, w->X1, w->gws, w->gwsb);
    attn_lin_features(mp, h, c->d, k->data + b * k->stride[0] + g * k->stride[1], k->stride[2], k->stride[3], c->nk, 0,
                      keep, c->kms[1], NULL, w->Fk, w->X1, w->gws, w->gwsb);
    load_vp(v, b, g, c->nk, c->dv, w->Vp);
    return prim_run(c->causal == ATTN_CAUSAL_NONE ? PRIM_ALL : PRIM_FWD, c->off, c->nq, c->nk, mp->p, e, w->Fq, w->Fk,
                    w->Vp, w->Y, w->St, w->T, w->gws, w->gwsb);
}

/* out rows from Y [n, dv + 1] (yt: Y^T [dv + 1, n]) */
static void write_out(const float *Y, int yt, int64_t n, int64_t dv, float eps, float *o, int64_t rs, int64_t cs) {
    if (yt) {
        /* 64 rows at a time: contiguous vector divisions into t, then scattered into the rows */
        const attn_linear_vec_kernels *vk = attn_kernel_ctx_active()->linear_vec;
        const float *dn = Y + dv * n;
        float dd[64], t[64];
        for (int64_t i0 = 0; i0 < n; i0 += 64) {
            const int64_t nb = i0 + 64 < n ? 64 : n - i0;
            for (int64_t i = 0; i < nb; i++) dd[i] = dn[i0 + i] + eps;
            for (int64_t c = 0; c < dv; c++) {
                vk->ydiv(Y + c * n + i0, dd, t, nb);
                float *oc = o + i0 * rs + c * cs;
                for (int64_t i = 0; i < nb; i++) oc[i * rs] = t[i];
            }
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const float den = Y[i * (dv + 1) + dv] + eps;
        for (int64_t c = 0; c < dv; c++) o[i * rs + c * cs] = den != 0.0f ? Y[i * (dv + 1) + c] / den : 0.0f;
    }
}

static void head_backward(const lin_map *mp, const attn_ctx *c, const attn_tensor *q, const attn_tensor *k,
                          const attn_tensor *v, const attn_tensor *dout, attn_tensor *dq, int64_t b, int64_t h,
                          int first, const lin_bufs *w) {
    const int64_t g = h / c->group, e = c->dv + 1, dv = c->dv, p = mp->p, d = c->d;
    const int mode = c->causal == ATTN_CAUSAL_NONE ? PRIM_ALL : PRIM_REV;
    const uint8_t *keep = c->km ? c->km + b * c->kms[0] : NULL;
    const int yt = head_forward(mp, c, q, k, v, b, h, w);
    /* E': row by row through a vector kernel; with Y^T, blocks of rows are first transposed into
     * T (contiguous reads) so that each row is contiguous */
    const float *go = dout->data + b * dout->stride[0] + h * dout->stride[1];
    const int64_t grs = dout->stride[2], gcs = dout->stride[3];
    const attn_linear_vec_kernels *vk = attn_kernel_ctx_active()->linear_vec;
    const int64_t R = yt ? max64(1, (CH * CH) / e) : 1;
    for (int64_t i0 = 0; i0 < c->nq; i0 += R) {
        const int64_t nb = i0 + R < c->nq ? R : c->nq - i0;
        if (yt)
            for (int64_t cc = 0; cc < e; cc++) {
                const float *ys = w->Y + cc * c->nq + i0;
                for (int64_t r = 0; r < nb; r++) w->T[r * e + cc] = ys[r];
            }
        for (int64_t r = 0; r < nb; r++) {
            const int64_t i = i0 + r;
            const float *yr = yt ? w->T + r * e : w->Y + i * e;
            const float den = yr[dv] + mp->eps;
            float *ep = w->Ep + i * e;
            if (den == 0.0f) {
                memset(ep, 0, sizeof(float) * (size_t)e);
                continue;
            }
            const float *gr = go + i * grs;
            if (gcs != 1) {
                for (int64_t cc = 0; cc < dv; cc++) ep[cc] = gr[cc * gcs];
                gr = ep;
            }
            ep[dv] = -vk->edot(gr, yr, den, ep, dv) / den;
        }
    }
    /* dF_q = prim_fwd(E', V', F_k). Non-causal: its state V'^T F_k [e, p] is the forward's state
     * transposed, which head_forward left in St ([e, p] when yt, else [p, e]): reused. */
    if (dq) {
        if (mode == PRIM_ALL) {
            if (yt)
                gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, c->nq, p, e, w->Ep, e, w->St, p, 0.0f, w->dFq, p, w->gws, w->gwsb);
            else
                gemm(ATTN_NO_TRANS, ATTN_TRANS, c->nq, p, e, w->Ep, e, w->St, e, 0.0f, w->dFq, p, w->gws, w->gwsb);
        } else {
            prim(PRIM_FWD, c->off, c->nq, c->nk, e, p, w->Ep, w->Vp, w->Fk, w->dFq, w->St, 0, w->T, w->gws, w->gwsb);
        }
        features_backward(mp, h, d, q->data + b * q->stride[0] + h * q->stride[1], q->stride[2], q->stride[3], c->nq,
                          NULL, 0, w->Fq, w->dFq, w->X1, w->X2, dq->data + b * dq->stride[0] + h * dq->stride[1],
                          dq->stride[2], dq->stride[3], 0, w->gws, w->gwsb);
    }
    /* dF_k = prim_rev(V', E', F_q) ; dV' = prim_rev(F_k, F_q, E'), summed over the group's heads */
    int vt;
    if (mode == PRIM_ALL) {
        /* one state for both: E'^T F_q [e, p] (dF_k = V' St; dV' = F_k St^T, written transposed
         * when e is not a multiple of 16, as prim_run would) */
        gemm(ATTN_TRANS, ATTN_NO_TRANS, e, p, c->nq, w->Ep, e, w->Fq, p, 0.0f, w->St, p, w->gws, w->gwsb);
        gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, c->nk, p, e, w->Vp, e, w->St, p, 0.0f, w->dFk, p, w->gws, w->gwsb);
        vt = e % 16 != 0 && c->nk > 0;
        if (vt)
            gemm(ATTN_NO_TRANS, ATTN_TRANS, e, c->nk, p, w->St, p, w->Fk, p, 0.0f, w->dVp, c->nk, w->gws, w->gwsb);
        else
            gemm(ATTN_NO_TRANS, ATTN_TRANS, c->nk, e, p, w->Fk, p, w->St, p, 0.0f, w->dVp, e, w->gws, w->gwsb);
    } else {
        prim(mode, c->off, c->nk, c->nq, e, p, w->Vp, w->Ep, w->Fq, w->dFk, w->St, 0, w->T, w->gws, w->gwsb);
        vt = prim_run(mode, c->off, c->nk, c->nq, p, e, w->Fk, w->Fq, w->Ep, w->dVp, w->St, w->T, w->gws, w->gwsb);
    }
    features_backward(mp, h, d, k->data + b * k->stride[0] + g * k->stride[1], k->stride[2], k->stride[3], c->nk, keep,
                      c->kms[1], w->Fk, w->dFk, w->X1, w->X2, w->dK, d, 1, !first, w->gws, w->gwsb);
    if (vt) {
        for (int64_t j0 = 0; j0 < c->nk; j0 += 64) {
            const int64_t j1 = j0 + 64 < c->nk ? j0 + 64 : c->nk;
            for (int64_t cc = 0; cc < dv; cc++) {
                const float *s = w->dVp + cc * c->nk;
                for (int64_t j = j0; j < j1; j++) w->dV[j * dv + cc] = first ? s[j] : w->dV[j * dv + cc] + s[j];
            }
        }
        return;
    }
    for (int64_t j = 0; j < c->nk; j++)
        for (int64_t cc = 0; cc < dv; cc++)
            w->dV[j * dv + cc] = first ? w->dVp[j * e + cc] : w->dV[j * dv + cc] + w->dVp[j * e + cc];
}

attn_status attn_lin_run(const char *fn, const lin_map *mp, const attn_tensor *q, const attn_tensor *k,
                         const attn_tensor *v, attn_causal causal, const attn_btensor *key_mask, attn_tensor *out,
                         const attn_tensor *dout, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, void *ws,
                         size_t ws_bytes) {
    attn_sdpa_params p = attn_sdpa_params_default();
    p.causal = causal;
    p.key_mask = key_mask;
    attn_ctx c;
    attn_status st;
    const int bwd = dout != NULL;
    if ((st = attn_ctx_init(&c, fn, q, k, v, &p, bwd ? dout : out, bwd ? "dout" : "out"))) return st;
    if (bwd && ((st = attn_ctx_check_like(fn, dq, "dq", q)) || (st = attn_ctx_check_like(fn, dk, "dk", k)) ||
                (st = attn_ctx_check_like(fn, dv, "dv", v))))
        return st;
    void *aligned;
    if ((st = attn_ctx_workspace(fn, ws, ws_bytes, attn_lin_ws_bytes(mp, c.b, c.hq, c.nq, c.nk, c.d, c.dv), &aligned)))
        return st;
    float *base = aligned;
    lin_bufs b0;
    const size_t per = layout(mp, c.nq, c.nk, c.d, c.dv, NULL, &b0);
    const int64_t tasks = bwd ? c.b * c.hk : c.b * c.hq;
#pragma omp parallel num_threads(attn_threads_for(tasks))
    {
        lin_bufs w;
        layout(mp, c.nq, c.nk, c.d, c.dv, base + per * (size_t)attn_thread_id(), &w);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            if (!bwd) {
                const int64_t b = t / c.hq, h = t % c.hq;
                const int yt = head_forward(mp, &c, q, k, v, b, h, &w);
                write_out(w.Y, yt, c.nq, c.dv, mp->eps, out->data + b * out->stride[0] + h * out->stride[1],
                          out->stride[2], out->stride[3]);
                continue;
            }
            const int64_t b = t / c.hk, g = t % c.hk;
            for (int64_t r = 0; r < c.group; r++)
                head_backward(mp, &c, q, k, v, dout, dq, b, g * c.group + r, r == 0, &w);
            if (dk) {
                float *o = dk->data + b * dk->stride[0] + g * dk->stride[1];
                for (int64_t j = 0; j < c.nk; j++)
                    for (int64_t cc = 0; cc < c.d; cc++) o[j * dk->stride[2] + cc * dk->stride[3]] = w.dK[j * c.d + cc];
            }
            if (dv) {
                float *o = dv->data + b * dv->stride[0] + g * dv->stride[1];
                for (int64_t j = 0; j < c.nk; j++)
                    for (int64_t cc = 0; cc < c.dv; cc++)
                        o[j * dv->stride[2] + cc * dv->stride[3]] = w.dV[j * c.dv + cc];
            }
        }
    }
    return ATTN_OK;
}

/* ---- the recurrent step ---- */

size_t attn_lin_state_floats(const lin_map *mp, int64_t dv) { return (size_t)(mp->p * (dv + 1) + (mp->w ? 2 : 0)); }

/* shapes of a step: q, k, v nullable (k and v together) */
static attn_status step_dims(const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_btensor *key_mask, const attn_tensor *out, int64_t *dims) {
    char a[96], b2[96];
    if (!q && !k) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: q and k are both NULL: nothing to do", fn);
    if (!k != !v)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: give k and v together (k %p, v %p)", fn, (const void *)k,
                          (const void *)v);
    const attn_tensor *ts[4] = {q, k, v, out};
    const char *nm[4] = {"q", "k", "v", "out"};
    for (int i = 0; i < 4; i++) {
        if (!ts[i]) continue;
        if (ts[i]->rank != 4 || !ts[i]->data)
            return attn_error(ATTN_ERR_SHAPE, "%s: %s must be a rank-4 view with data (rank %d)", fn, nm[i],
                              ts[i]->rank);
        for (int j = 0; j < 4; j++)
            if (ts[i]->shape[j] < 0) return attn_error(ATTN_ERR_SHAPE, "%s: %s has a negative dimension", fn, nm[i]);
    }
    const attn_tensor *r = q ? q : k;
    const int64_t B = r->shape[0], H = r->shape[1], d = r->shape[3], nq = q ? q->shape[2] : 0, nk = k ? k->shape[2] : 0;
    if (k && (k->shape[0] != B || k->shape[1] != H || k->shape[3] != d))
        return attn_error(ATTN_ERR_SHAPE,
                          "%s: k %s does not match q %s (a step needs [B, H, n, d] with the same heads)", fn,
                          attn_shape_str(k->shape, 4, a, sizeof a), attn_shape_str(q->shape, 4, b2, sizeof b2));
    if (k && (v->shape[0] != B || v->shape[1] != H || v->shape[2] != nk))
        return attn_error(ATTN_ERR_SHAPE, "%s: v %s does not match k %s (need [B, H, n, dv])", fn,
                          attn_shape_str(v->shape, 4, a, sizeof a), attn_shape_str(k->shape, 4, b2, sizeof b2));
    if (q && !out) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    if (q && (out->shape[0] != B || out->shape[1] != H || out->shape[2] != nq || (k && out->shape[3] != v->shape[3])))
        return attn_error(ATTN_ERR_SHAPE, "%s: out %s does not match q %s (need [B, H, n, dv])", fn,
                          attn_shape_str(out->shape, 4, a, sizeof a), attn_shape_str(q->shape, 4, b2, sizeof b2));
    if (d < 1) return attn_error(ATTN_ERR_SHAPE, "%s: head dimension must be >= 1", fn);
    if (key_mask &&
        (!k || key_mask->rank != 2 || key_mask->shape[0] != B || key_mask->shape[1] != nk || !key_mask->data))
        return attn_error(ATTN_ERR_SHAPE, "%s: key_mask must be [B, n new keys] = [%lld, %lld] over the new keys", fn,
                          (long long)B, (long long)nk);
    dims[0] = B, dims[1] = H, dims[2] = nq, dims[3] = nk, dims[4] = d, dims[5] = k ? v->shape[3] : out->shape[3];
    return ATTN_OK;
}

size_t attn_lin_step_ws_bytes(const lin_map *mp, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v) {
    const attn_tensor *r = q ? q : k;
    if (!r || r->rank != 4 || (k && (!v || v->rank != 4)) || (!k && !v && !q)) return 0;
    const int64_t dv = k ? v->shape[3] : (v ? v->shape[3] : q->shape[3]);
    return attn_lin_ws_bytes(mp, r->shape[0], r->shape[1], q ? q->shape[2] : 0, k ? k->shape[2] : 0, r->shape[3], dv);
}

attn_status attn_lin_step(const char *fn, const lin_map *mp, const attn_tensor *q, const attn_tensor *k,
                          const attn_tensor *v, int causal, const attn_btensor *key_mask, float *state,
                          attn_tensor *out, void *ws, size_t ws_bytes) {
    int64_t dm[6] = {0, 0, 0, 0, 0, 0};
    attn_status st = step_dims(fn, q, k, v, key_mask, out, dm);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, state);
    const int64_t B = dm[0], H = dm[1], nq = dm[2], nk = dm[3], d = dm[4], dv = dm[5], p = mp->p, e = dv + 1;
    void *aligned;
    if ((st = attn_ctx_workspace(fn, ws, ws_bytes, attn_lin_ws_bytes(mp, B, H, nq, nk, d, dv), &aligned))) return st;
    float *base = aligned;
    lin_bufs b0;
    const size_t per = layout(mp, nq, nk, d, dv, NULL, &b0), sf = attn_lin_state_floats(mp, dv);
    const int64_t tasks = B * H;
#pragma omp parallel num_threads(attn_threads_for(tasks))
    {
        lin_bufs w;
        layout(mp, nq, nk, d, dv, base + per * (size_t)attn_thread_id(), &w);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t b = t / H, h = t % H;
            float *S = state + (size_t)t * sf;
            if (k) {
                const uint8_t *keep = key_mask ? key_mask->data + b * key_mask->stride[0] : NULL;
                float kmax = 0;
                attn_lin_features(mp, h, d, k->data + b * k->stride[0] + h * k->stride[1], k->stride[2], k->stride[3],
                                  nk, 0, keep, key_mask ? key_mask->stride[1] : 0, &kmax, w.Fk, w.X1, w.gws, w.gwsb);
                load_vp(v, b, h, nk, dv, w.Vp);
                if (mp->w && kmax > -INFINITY) { /* running key maximum: rescale the side below it */
                    float *M = S + p * e, *has = M + 1;
                    const float mt = *has != 0.0f && *M > kmax ? *M : kmax;
                    if (*has != 0.0f && *M < mt) {
                        const float s = expf(*M - mt);
                        for (int64_t i = 0; i < p * e; i++) S[i] *= s;
                    }
                    if (kmax < mt) {
                        const float s = expf(kmax - mt);
                        for (int64_t i = 0; i < nk * p; i++) w.Fk[i] *= s;
                    }
                    *M = mt;
                    *has = 1.0f;
                }
            }
            if (!q) {
                gemm(ATTN_TRANS, ATTN_NO_TRANS, p, e, nk, w.Fk, p, w.Vp, e, 1.0f, S, e, w.gws, w.gwsb);
                continue;
            }
            attn_lin_features(mp, h, d, q->data + b * q->stride[0] + h * q->stride[1], q->stride[2], q->stride[3], nq,
                              1, NULL, 0, NULL, w.Fq, w.X1, w.gws, w.gwsb);
            prim(causal ? PRIM_FWD : PRIM_ALL, nk - nq, nq, nk, p, e, w.Fq, w.Fk, w.Vp, w.Y, S, 1, w.T, w.gws, w.gwsb);
            write_out(w.Y, 0, nq, dv, mp->eps, out->data + b * out->stride[0] + h * out->stride[1], out->stride[2],
                      out->stride[3]);
        }
    }
    return ATTN_OK;
}

/* ---- linear attention's public ops ---- */

static lin_map elu_map(int64_t d) {
    lin_map m = {d, ATTN_LINEAR_ATTENTION_EPS, NULL, 1};
    return m;
}

size_t attn_linear_attention_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v) {
    if (!q || !k || !v || q->rank != 4 || k->rank != 4 || v->rank != 4) return 0;
    const lin_map m = elu_map(q->shape[3]);
    const size_t s =
        attn_lin_ws_bytes(&m, q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3], v->shape[3]);
    return s == SIZE_MAX ? 0 : s;
}

attn_status attn_linear_attention_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                          attn_causal causal, const attn_btensor *key_mask, attn_tensor *out,
                                          void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_linear_attention_forward";
    ATTN_CHECK_NOT_NULL(fn, q);
    const lin_map m = elu_map(q->shape[3]);
    return attn_lin_run(fn, &m, q, k, v, causal, key_mask, out, NULL, NULL, NULL, NULL, workspace, workspace_bytes);
}

attn_status attn_linear_attention_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                           attn_causal causal, const attn_btensor *key_mask, const attn_tensor *dout,
                                           attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, void *workspace,
                                           size_t workspace_bytes) {
    static const char fn[] = "attn_linear_attention_backward";
    ATTN_CHECK_NOT_NULL(fn, q);
    ATTN_CHECK_NOT_NULL(fn, dout);
    const lin_map m = elu_map(q->shape[3]);
    return attn_lin_run(fn, &m, q, k, v, causal, key_mask, NULL, dout, dq, dk, dv, workspace, workspace_bytes);
}

size_t attn_linear_attention_state_floats(int64_t d, int64_t dv) {
    if (d < 1 || dv < 1) return 0;
    const lin_map m = elu_map(d);
    return attn_lin_state_floats(&m, dv);
}

size_t attn_linear_attention_step_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v) {
    const attn_tensor *r = q ? q : k;
    if (!r || r->rank != 4) return 0;
    const lin_map m = elu_map(r->shape[3]);
    const size_t s = attn_lin_step_ws_bytes(&m, q, k, v);
    return s == SIZE_MAX ? 0 : s;
}

attn_status attn_linear_attention_step(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, int causal,
                                       const attn_btensor *key_mask, float *state, attn_tensor *out, void *workspace,
                                       size_t workspace_bytes) {
    static const char fn[] = "attn_linear_attention_step";
    const attn_tensor *r = q ? q : k;
    if (!r) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: q and k are both NULL: nothing to do", fn);
    if (r->rank != 4) return attn_error(ATTN_ERR_SHAPE, "%s: q / k must be rank 4 (got %d)", fn, r->rank);
    const lin_map m = elu_map(r->shape[3]);
    return attn_lin_step(fn, &m, q, k, v, causal, key_mask, state, out, workspace, workspace_bytes);
}

/* ---- what the kinds refuse ---- */

attn_status attn_lin_kind_params(const char *kind, const attn_sdpa_params *p) {
    const char *what = NULL;
    if (p->bool_mask)
        what = "a boolean attn_mask";
    else if (p->add_mask)
        what = "a float attn_mask / key_padding_mask (additive mask)";
    else if (p->alibi_slopes)
        what = "ALiBi slopes";
    else if (p->softcap != 0.0f)
        what = "softcap";
    else if (p->window_left >= 0 || p->window_right >= 0)
        what = "a sliding window";
    else if (p->dropout_p > 0.0f)
        what = "attention dropout (dropout > 0)";
    if (what)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "attention '%s' does not support %s (only causality and a boolean key mask)", kind, what);
    return ATTN_OK;
}

attn_status attn_lin_step_mask(const char *kind, const attn_kind_step *s, attn_btensor *view,
                               const attn_btensor **mask) {
    *mask = NULL;
    const attn_btensor *km = s->key_mask;
    if (!km) return ATTN_OK;
    const int64_t n = s->k ? s->k->shape[2] : 0;
    if (km->rank != 2 || km->shape[1] < n || !km->data)
        return attn_error(ATTN_ERR_SHAPE, "attention '%s' step: key_mask must be [B, L] with L >= %lld new keys", kind,
                          (long long)n);
    /* columns before the new keys belong to keys already absorbed into the state: they cannot be
     * hidden any more */
    for (int64_t b = 0; b < km->shape[0]; b++)
        for (int64_t j = 0; j < km->shape[1] - n; j++)
            if (!km->data[b * km->stride[0] + j * km->stride[1]])
                return attn_error(ATTN_ERR_UNSUPPORTED,
                                  "attention '%s' step: the key mask hides key %lld of batch %lld, which the recurrent "
                                  "state has already absorbed (mask keys when they are appended)",
                                  kind, (long long)j, (long long)b);
    if (!n) return ATTN_OK;
    *view = *km;
    view->data = km->data + (km->shape[1] - n) * km->stride[1];
    view->shape[1] = n;
    *mask = view;
    return ATTN_OK;
}
