/* Flash attention on the CPU: FlashAttention-2's tiling and online softmax (Dao 2023).
 *
 * Forward, for a block of BR query rows against blocks of BC keys, with s in log2 units
 * (log2(e) is folded into the scale) and the tile kept transposed, S^T [keys x queries]:
 *   S^T = K_j Q_i^T ;  masks / transforms (exactly those of attn_sdpa_forward)
 *   m' = max(m, colmax S^T) ;  P^T = exp2(S^T - m') ;  l = l 2^(m - m') + colsum P^T
 *   O_i = O_i 2^(m - m') + P V_j      (P with dropout applied, l without)
 *   end: O_i /= l ; lse_i = (m + log2 l) ln 2
 * Backward, with D_i = rowsum(dO_i * O_i) and P recomputed from lse:
 *   dP^T = V_j dO_i^T (* keep) ;  dS^T = P^T (dP^T - D) scale (* softcap derivative)
 *   dV_j += (P * keep)^T dO_i ;  dK_j += dS^T Q_i ;  dQ_i += dS K_j
 * Work is split into tasks that each own their outputs — (batch, query head, query block) in the
 * forward and (batch, key/value head) in the backward, which walks the group's query heads and
 * query blocks in a fixed order — so results never depend on the thread count. Tiles that
 * causality or a window masks completely are never visited. */
#include <math.h>
#include <string.h>

#include "attention_common.h"
#include "core/internal.h"
#include "flash_internal.h"

#define BR ATTN_FLASH_BR
#define BC ATTN_FLASH_BC
#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453

static const attn_flash_kernels *flash_kernels(void) {
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    switch (attn_active_isa()) {
    case ATTN_ISA_AVX512: return attn_flash_kernels_avx512();
    case ATTN_ISA_AVX2: return attn_flash_kernels_avx2();
    default: break;
    }
#endif
    return attn_flash_kernels_ref();
}

/* Fast tiles need only index masks and the key mask; anything else goes element by element
 * through the shared mask/bias logic. */
static int needs_general_epilogue(const attn_ctx *c) {
    return c->softcap > 0 || c->alibi || c->am || c->bm;
}

/* Causality and the window as a band: key j admits queries i in [j - off - right, j - off + wl]
 * and query i admits keys j in [i + off - wl, i + off + right]. */
static int64_t band_right(const attn_ctx *c) {
    int64_t right = c->causal != ATTN_CAUSAL_NONE ? 0 : INT64_MAX / 4;
    return c->wr >= 0 && c->wr < right ? c->wr : right;
}

/* Key range [*j0, *j1) that query rows [i0, i1) may see under causality and the window. */
static void key_range(const attn_ctx *c, int64_t i0, int64_t i1, int64_t *j0, int64_t *j1) {
    const int64_t right = band_right(c);
    int64_t lo = c->wl >= 0 ? i0 + c->off - c->wl : 0;
    int64_t hi = right >= INT64_MAX / 4 ? c->nk : (i1 - 1) + c->off + right + 1;
    if (lo < 0) lo = 0;
    if (hi > c->nk) hi = c->nk;
    *j0 = lo;
    *j1 = hi > lo ? hi : lo;
}

/* Does every (i, j) of the tile pass causality and the window? */
static int tile_inside(const attn_ctx *c, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    if (c->causal != ATTN_CAUSAL_NONE && j1 - 1 > i0 + c->off) return 0;
    if (c->wr >= 0 && j1 - 1 > i0 + c->off + c->wr) return 0;
    if (c->wl >= 0 && j0 < (i1 - 1) + c->off - c->wl) return 0;
    return 1;
}

/* Query columns [*qa, *qb) of a tile that key rows [r0, r0 + rows) may see, widened to whole
 * 16-column vectors: on tiles the band crosses, S^T is only computed there (the epilogue then
 * fills the rest of each row with -inf). */
static void band_cols(const attn_ctx *c, int64_t i0, int bi, int64_t j0, int r0, int rows, int *qa, int *qb) {
    int64_t lo = j0 + r0 - c->off - band_right(c) - i0;
    int64_t hi = c->wl >= 0 ? j0 + r0 + rows - 1 - c->off + c->wl - i0 + 1 : bi;
    lo = lo < 0 ? 0 : lo > bi ? bi : lo;
    hi = hi < lo ? lo : hi > bi ? bi : hi;
    *qa = (int)(lo / 16 * 16);
    *qb = (int)((hi + 15) / 16 * 16 < bi ? (hi + 15) / 16 * 16 : bi);
    if (hi == lo) *qb = *qa;
}

/* Key rows [*ra, *rb) of a tile that query columns [q0, q0 + cols) may see: outside it P is
 * exactly 0, so P V skips those rows without changing a bit of the result. */
static void band_rows(const attn_ctx *c, int64_t i0, int q0, int cols, int64_t j0, int bj, int *ra, int *rb) {
    int64_t lo = c->wl >= 0 ? i0 + q0 + c->off - c->wl - j0 : 0;
    const int64_t right = band_right(c);
    int64_t hi = right >= INT64_MAX / 4 ? bj : i0 + q0 + cols - 1 + c->off + right - j0 + 1;
    lo = lo < 0 ? 0 : lo > bj ? bj : lo;
    hi = hi < lo ? lo : hi > bj ? bj : hi;
    *ra = (int)lo;
    *rb = (int)hi;
}

/* Turn a raw S^T tile (scaled q.k) into log2-unit logits with every mask applied. On the general
 * path each query row's logits are stored relative to the row's shift sh (see row_shifts), computed
 * in double, so biases of magnitude 1e5 (an additive mask, ALiBi over long distances) cost no
 * float precision. capd (general path with softcap) receives the soft-cap derivative 1 - tanh^2. */
static void epilogue(const attn_ctx *c, int general, int64_t b, int64_t h, int64_t i0, int bi,
                     int64_t j0, int bj, const float *sh, float *s, float *capd) {
    if (general) {
        for (int r = 0; r < bj; r++)
            for (int q = 0; q < bi; q++) {
                float *e = s + r * BR + q;
                const int64_t i = i0 + q, j = j0 + r;
                if (!attn_ctx_allowed(c, b, h, i, j)) {
                    *e = -INFINITY;
                    continue;
                }
                double x = *e;
                if (c->softcap > 0) {
                    const double t = tanh(x / c->softcap);
                    x = c->softcap * t;
                    if (capd) capd[r * BR + q] = (float)(1.0 - t * t);
                }
                *e = (float)((x + attn_ctx_bias(c, b, h, i, j)) * LOG2E - sh[q]);
            }
        return;
    }
    if (c->km)
        for (int r = 0; r < bj; r++)
            if (!c->km[b * c->kms[0] + (j0 + r) * c->kms[1]])
                for (int q = 0; q < bi; q++) s[r * BR + q] = -INFINITY;
    if (tile_inside(c, i0, i0 + bi, j0, j0 + bj)) return;
    /* key j admits the queries i in [j - off - right, j - off + wl]: fill -inf outside */
    const int64_t right = band_right(c);
    for (int r = 0; r < bj; r++) {
        const int64_t j = j0 + r;
        int64_t lo = j - c->off - right - i0, hi = c->wl >= 0 ? j - c->off + c->wl - i0 + 1 : bi;
        lo = lo < 0 ? 0 : lo > bi ? bi : lo;
        hi = hi < lo ? lo : hi > bi ? bi : hi;
        float *row = s + r * BR;
        for (int64_t q = 0; q < lo; q++) row[q] = -INFINITY;
        for (int64_t q = hi; q < bi; q++) row[q] = -INFINITY;
    }
}

/* Per query row of the block: the largest additive term (ALiBi + additive mask) over the keys it
 * may attend, in log2 units (0 on the fast path or when there is none). Softmax is shift
 * invariant; subtracting it keeps the float tile values near the row's maximum small, whatever
 * the biases (a row offset by -1e5 stays exact). It reads the masks once per row, as the epilogue
 * does; no dot products. */
static void row_shifts(const attn_ctx *c, int general, int64_t b, int64_t h, int64_t i0, int bi, float *sh) {
    for (int r = 0; r < bi; r++) {
        sh[r] = 0.0f;
        if (!general || (!c->am && !c->alibi)) continue;
        const int64_t i = i0 + r;
        int64_t jlo, jhi;
        key_range(c, i, i + 1, &jlo, &jhi);
        double mx = -INFINITY;
        for (int64_t j = jlo; j < jhi; j++) {
            if (!attn_ctx_allowed(c, b, h, i, j)) continue;
            const double v = attn_ctx_bias(c, b, h, i, j);
            if (v > mx) mx = v;
        }
        if (mx != -INFINITY) sh[r] = (float)(mx * LOG2E);
    }
}

/* The S^T tile of keys [j0, j0 + bj) against the packed query block: on tiles the causal/window
 * band crosses only the band is computed (the epilogue masks the rest). tilemax (nullable) receives
 * the tile's column maxima when they come for free with the product; tilemax[0] is NaN otherwise. */
static void scores_tile(const attn_flash_kernels *kr, const attn_ctx *c, int general, const float *kh,
                        const attn_tensor *k, int64_t b, int64_t h, int64_t i0, int bi, int64_t j0, int bj,
                        const float *qt, const float *sh, float *s, float *capd, float *tilemax, int *banded) {
    *banded = !general && !tile_inside(c, i0, i0 + bi, j0, j0 + bj);
    if (*banded) {
        for (int r0 = 0; r0 < bj; r0 += 4) {
            const int rows = bj - r0 < 4 ? bj - r0 : 4;
            int qa, qb;
            band_cols(c, i0, bi, j0, r0, rows, &qa, &qb);
            if (qa < qb)
                kr->gemm(rows, qb - qa, (int)c->d, kh + (j0 + r0) * k->stride[2], k->stride[2], k->stride[3],
                         qt + qa, BR, s + r0 * BR + qa, BR, 0, NULL, NULL);
        }
    } else {
        /* the column maxima come with the product when nothing will mask the tile afterwards */
        const int fused = tilemax && !general && !c->km;
        if (fused)
            for (int q = 0; q < bi; q++) tilemax[q] = -INFINITY;
        kr->gemm(bj, bi, (int)c->d, kh + j0 * k->stride[2], k->stride[2], k->stride[3], qt, BR, s, BR, 0, NULL,
                 fused ? tilemax : NULL);
        if (fused) return;
    }
    if (tilemax) tilemax[0] = NAN; /* not computed: softmax_update scans the tile */
    epilogue(c, general, b, h, i0, bi, j0, bj, sh, s, capd);
}

/* Multiply the tile by the dropout factors keep(b, h, i, j). */
static void apply_dropout(const attn_flash_kernels *kr, const attn_ctx *c, int64_t b, int64_t h, int64_t i0,
                          int bi, int64_t j0, int bj, float *s, uint64_t *colbase) {
    if (kr->dropout_tile) {
        /* stream index of element (i, j): ((b Hq + h) Nq + i) Nk + j */
        for (int q = 0; q < bi; q++) colbase[q] = (uint64_t)(((b * c->hq + h) * c->nq + i0 + q) * c->nk + j0);
        kr->dropout_tile(bj, bi, s, BR, colbase, c->seed, c->offset, c->p);
        return;
    }
    for (int r = 0; r < bj; r++)
        for (int q = 0; q < bi; q++) s[r * BR + q] *= (float)attn_ctx_keep(c, b, h, i0 + q, j0 + r);
}

/* x^T of rows [i0, i0 + bi) of a [.., N, D] head into dst [D x BR], times f. */
static void pack_transposed(const attn_flash_kernels *kr, const float *x, int64_t rs, int64_t cs, int bi,
                            int64_t D, float f, float *dst) {
    if (cs == 1) {
        kr->pack_transposed(bi, (int)D, x, rs, f, dst, BR);
        return;
    }
    for (int q = 0; q < bi; q++)
        for (int64_t t = 0; t < D; t++) dst[t * BR + q] = x[q * rs + t * cs] * f;
}
/* Rows into a contiguous [rows x D] buffer. */
static void pack_rows(const attn_flash_kernels *kr, const float *x, int64_t rs, int64_t cs, int rows,
                      int64_t D, float *dst) {
    if (cs == 1) {
        kr->scale_copy_rows(rows, (int)D, x, rs, NULL, dst, D);
        return;
    }
    for (int q = 0; q < rows; q++)
        for (int64_t t = 0; t < D; t++) dst[q * D + t] = x[q * rs + t * cs];
}
/* dst rows (any strides) = src [rows x D] * f[row] (f nullable). */
static void store_rows(const attn_flash_kernels *kr, const float *src, int rows, int64_t D, const float *f,
                       float *dst, int64_t rs, int64_t cs) {
    if (cs == 1) {
        kr->scale_copy_rows(rows, (int)D, src, D, f, dst, rs);
        return;
    }
    for (int q = 0; q < rows; q++)
        for (int64_t t = 0; t < D; t++) dst[q * rs + t * cs] = src[q * D + t] * (f ? f[q] : 1.0f);
}

/* ---- workspace: per-thread buffers, each 64-byte aligned ---- */
typedef struct flash_bufs {
    float *qt, *dot, *qp, *dop, *s, *dp, *ds, *capd, *acc, *kp, *vp;
    float *m, *l, *alpha, *sh, *ll, *dsum, *tmax; /* per query row of the block */
    float *colbase_raw;                           /* 2 BR floats holding ... */
    uint64_t *colbase;                            /* ... the dropout stream index per query row */
} flash_bufs;

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Floats per thread; lays out the buffers when base is not NULL. */
static size_t layout(int64_t d, int64_t dv, float *base, flash_bufs *bb) {
    const int64_t dm = d > dv ? d : dv;
    const size_t sizes[19] = {(size_t)(d * BR),  (size_t)(dv * BR), (size_t)(BR * d), (size_t)(BR * dv),
                              (size_t)(BC * BR), (size_t)(BC * BR), (size_t)(BC * BR), (size_t)(BC * BR),
                              (size_t)(BR * dm), (size_t)(BC * d),  (size_t)(BC * dv), BR, BR, BR, BR, BR, BR, BR, 2 * BR};
    float **ptrs[19] = {&bb->qt, &bb->dot, &bb->qp, &bb->dop,   &bb->s,  &bb->dp, &bb->ds,   &bb->capd, &bb->acc,
                        &bb->kp, &bb->vp,  &bb->m,  &bb->l,     &bb->alpha, &bb->sh, &bb->ll, &bb->dsum, &bb->tmax,
                        &bb->colbase_raw};
    size_t off = 0;
    for (int i = 0; i < 19; i++) {
        if (base) *ptrs[i] = base + off;
        off += round16(sizes[i]);
    }
    if (base) bb->colbase = (uint64_t *)(void *)bb->colbase_raw; /* 64-byte aligned, untyped workspace */
    return off;
}

static size_t workspace_bytes(int64_t d, int64_t dv) {
    flash_bufs unused;
    size_t per = layout(d, dv, NULL, &unused), total;
    if (attn_mul_overflow(per, sizeof(float), &per) ||
        attn_mul_overflow(per, (size_t)attn_get_num_threads(), &total) ||
        attn_add_overflow(total, 64, &total))
        return SIZE_MAX;
    return total;
}

size_t attn_flash_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v) {
    if (!q || !k || !v || q->rank != 4 || k->rank != 4 || v->rank != 4 || q->shape[3] < 1 ||
        v->shape[3] < 1 || q->shape[3] > (1 << 20) || v->shape[3] > (1 << 20))
        return 0;
    return workspace_bytes(q->shape[3], v->shape[3]);
}

static attn_status get_bufs(const char *fn, const attn_ctx *c, void *ws, size_t bytes, float **base) {
    void *aligned;
    attn_status st = attn_ctx_workspace(fn, ws, bytes, workspace_bytes(c->d, c->dv), &aligned);
    *base = aligned;
    return st;
}

static flash_bufs thread_bufs(const attn_ctx *c, float *base) {
    flash_bufs bb;
    size_t per = layout(c->d, c->dv, NULL, &bb);
    layout(c->d, c->dv, base + per * (size_t)attn_thread_id(), &bb);
    return bb;
}

int64_t attn_flash_tile_count(const attn_tensor *q, const attn_tensor *k, const attn_sdpa_params *params,
                              int64_t *total) {
    attn_ctx c;
    if (total) *total = 0;
    if (!q || !k || q->rank != 4 || k->rank != 4) return 0;
    /* only shapes matter: views without data are fine, and K stands in for V and Q for the output */
    static float shape_only;
    attn_tensor qq = *q, kk = *k;
    if (!qq.data) qq.data = &shape_only;
    if (!kk.data) kk.data = &shape_only;
    attn_tensor out = qq;
    out.shape[3] = kk.shape[3];
    if (attn_ctx_init(&c, "attn_flash_tile_count", &qq, &kk, &kk, params, &out, "q") != ATTN_OK) return 0;
    const int64_t nqb = (c.nq + BR - 1) / BR, nkb = (c.nk + BC - 1) / BC;
    int64_t n = 0;
    for (int64_t qb = 0; qb < nqb; qb++) {
        int64_t jlo, jhi;
        const int64_t i0 = qb * BR, i1 = i0 + BR < c.nq ? i0 + BR : c.nq;
        key_range(&c, i0, i1, &jlo, &jhi);
        if (jhi > jlo) n += (jhi + BC - 1) / BC - jlo / BC;
    }
    if (total) *total = c.b * c.hq * nqb * nkb;
    return c.b * c.hq * n;
}

attn_status attn_flash_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_params *params, attn_tensor *out, attn_tensor *lse,
                               void *workspace, size_t workspace_bytes_) {
    static const char *fn = "attn_flash_forward";
    attn_ctx c;
    attn_status st;
    float *base;
    if ((st = attn_ctx_init(&c, fn, q, k, v, params, out, "out")) ||
        (st = attn_ctx_check_rows(&c, fn, lse, "lse", 0)) ||
        (st = get_bufs(fn, &c, workspace, workspace_bytes_, &base)))
        return st;
    const attn_flash_kernels *kr = flash_kernels();
    const int general = needs_general_epilogue(&c);
    const float qscale = (float)(general ? c.scale : c.scale * LOG2E);
    const int64_t nqb = (c.nq + BR - 1) / BR, tasks = c.b * c.hq * nqb;
    const int v_inplace = v->stride[3] == 1;
#pragma omp parallel num_threads(attn_threads_for(tasks))
    {
        flash_bufs w = thread_bufs(&c, base);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            /* Head by head, so consecutive tasks stream the same K and V (all heads' K and V at
             * once outgrow the cache at long N); within a head the last query blocks first: under
             * causality they are the largest, so the small ones come last and even out the
             * threads' finish (longest processing time first). */
            const int64_t bh = t / nqb, qb = nqb - 1 - t % nqb;
            const int64_t h = bh % c.hq, b = bh / c.hq, g = h / c.group;
            const int64_t i0 = qb * BR;
            const int bi = (int)(c.nq - i0 < BR ? c.nq - i0 : BR);
            const float *qi = q->data + b * q->stride[0] + h * q->stride[1] + i0 * q->stride[2];
            const float *kh = k->data + b * k->stride[0] + g * k->stride[1];
            const float *vh = v->data + b * v->stride[0] + g * v->stride[1];
            pack_transposed(kr, qi, q->stride[2], q->stride[3], bi, c.d, qscale, w.qt);
            row_shifts(&c, general, b, h, i0, bi, w.sh);
            for (int r = 0; r < bi; r++) {
                w.m[r] = -INFINITY;
                w.l[r] = 0.0f;
            }
            memset(w.acc, 0, sizeof(float) * (size_t)bi * (size_t)c.dv);
            int64_t jlo, jhi;
            key_range(&c, i0, i0 + bi, &jlo, &jhi);
            for (int64_t j0 = jlo / BC * BC; j0 < jhi; j0 += BC) {
                const int bj = (int)(c.nk - j0 < BC ? c.nk - j0 : BC);
                int banded;
                scores_tile(kr, &c, general, kh, k, b, h, i0, bi, j0, bj, w.qt, w.sh, w.s, NULL, w.tmax, &banded);
                kr->softmax_update(bj, bi, w.s, BR, w.m, w.l, w.alpha, isnan(w.tmax[0]) ? NULL : w.tmax);
                if (c.p > 0) apply_dropout(kr, &c, b, h, i0, bi, j0, bj, w.s, w.colbase);
                const float *vb = vh + j0 * v->stride[2];
                int64_t ldv = v->stride[2];
                if (!v_inplace) {
                    pack_rows(kr, vb, v->stride[2], v->stride[3], bj, c.dv, w.vp);
                    vb = w.vp;
                    ldv = c.dv;
                }
                if (banded) {
                    for (int q0 = 0; q0 < bi; q0 += 4) {
                        const int cols = bi - q0 < 4 ? bi - q0 : 4;
                        int ra, rb;
                        band_rows(&c, i0, q0, cols, j0, bj, &ra, &rb);
                        kr->gemm(cols, (int)c.dv, rb - ra, w.s + ra * BR + q0, 1, BR, vb + ra * ldv, ldv,
                                 w.acc + q0 * c.dv, c.dv, 1, w.alpha + q0, NULL);
                    }
                } else {
                    kr->gemm(bi, (int)c.dv, bj, w.s, 1, BR, vb, ldv, w.acc, c.dv, 1, w.alpha, NULL);
                }
            }
            float *oi = out->data + b * out->stride[0] + h * out->stride[1] + i0 * out->stride[2];
            for (int r = 0; r < bi; r++) w.alpha[r] = w.l[r] > 0 ? 1.0f / w.l[r] : 0.0f;
            store_rows(kr, w.acc, bi, c.dv, w.alpha, oi, out->stride[2], out->stride[3]);
            for (int r = 0; r < bi; r++) {
                if (lse)
                    lse->data[b * lse->stride[0] + h * lse->stride[1] + (i0 + r) * lse->stride[2]] =
                        w.l[r] > 0 ? (float)(((double)w.sh[r] + w.m[r] + log2((double)w.l[r])) * LN2) : -INFINITY;
            }
        }
    }
    return ATTN_OK;
}

/* part: out and lse belong to a softmax over a wider key set than this call's (one pass of a split
 * softmax), so P = exp(s - lse) is taken as given: rows of large |lse| are never renormalised over
 * this call's own keys. */
static attn_status flash_backward(const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                  const attn_sdpa_params *params, const attn_tensor *out,
                                  const attn_tensor *dout, const attn_tensor *lse, attn_tensor *dq,
                                  attn_tensor *dk, attn_tensor *dv, void *workspace,
                                  size_t workspace_bytes_, int part) {
    attn_ctx c;
    attn_status st;
    float *base;
    if ((st = attn_ctx_init(&c, fn, q, k, v, params, dout, "dout")) ||
        (st = attn_ctx_check_like(fn, out, "out", dout)) ||
        (st = attn_ctx_check_like(fn, dq, "dq", q)) || (st = attn_ctx_check_like(fn, dk, "dk", k)) ||
        (st = attn_ctx_check_like(fn, dv, "dv", v)))
        return st;
    if (!out || !lse || !dk || !dv)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: out, lse, dk and dv are required (out %p, lse %p, dk %p, dv %p)",
                          fn, (const void *)out, (const void *)lse, (void *)dk, (void *)dv);
    if ((st = attn_ctx_check_rows(&c, fn, lse, "lse", 0))) return st;
    if (dk->stride[3] != 1 || dv->stride[3] != 1)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: dk and dv need unit innermost stride (got %lld and %lld)", fn,
                          (long long)dk->stride[3], (long long)dv->stride[3]);
    if ((st = get_bufs(fn, &c, workspace, workspace_bytes_, &base))) return st;
    const attn_flash_kernels *kr = flash_kernels();
    const int general = needs_general_epilogue(&c);
    const float qscale = (float)(general ? c.scale : c.scale * LOG2E);
    const int64_t nqb = (c.nq + BR - 1) / BR, tasks = c.b * c.hk;
    const int k_inplace = k->stride[3] == 1;
#pragma omp parallel num_threads(attn_threads_for(tasks))
    {
        flash_bufs w = thread_bufs(&c, base);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t g = t % c.hk, b = t / c.hk;
            const float *kh = k->data + b * k->stride[0] + g * k->stride[1];
            const float *vh = v->data + b * v->stride[0] + g * v->stride[1];
            float *dkh = dk->data + b * dk->stride[0] + g * dk->stride[1];
            float *dvh = dv->data + b * dv->stride[0] + g * dv->stride[1];
            for (int64_t j = 0; j < c.nk; j++) {
                memset(dkh + j * dk->stride[2], 0, sizeof(float) * (size_t)c.d);
                memset(dvh + j * dv->stride[2], 0, sizeof(float) * (size_t)c.dv);
            }
            for (int64_t h = g * c.group; h < (g + 1) * c.group; h++)
                for (int64_t qb = 0; qb < nqb; qb++) {
                    const int64_t i0 = qb * BR;
                    const int bi = (int)(c.nq - i0 < BR ? c.nq - i0 : BR);
                    const float *qi = q->data + b * q->stride[0] + h * q->stride[1] + i0 * q->stride[2];
                    const float *goi = dout->data + b * dout->stride[0] + h * dout->stride[1] + i0 * dout->stride[2];
                    const float *oi = out->data + b * out->stride[0] + h * out->stride[1] + i0 * out->stride[2];
                    pack_transposed(kr, qi, q->stride[2], q->stride[3], bi, c.d, qscale, w.qt);
                    pack_transposed(kr, goi, dout->stride[2], dout->stride[3], bi, c.dv, 1.0f, w.dot);
                    pack_rows(kr, qi, q->stride[2], q->stride[3], bi, c.d, w.qp);
                    pack_rows(kr, goi, dout->stride[2], dout->stride[3], bi, c.dv, w.dop);
                    row_shifts(&c, general, b, h, i0, bi, w.sh);
                    int large = 0; /* a row whose |lse| float cannot carry to 1e-7 of its probabilities */
                    for (int r = 0; r < bi; r++) {
                        const double lv = lse->data[b * lse->stride[0] + h * lse->stride[1] + (i0 + r) * lse->stride[2]];
                        /* P = exp2((s - m) - ll): m the row's log2-unit lse relative to its shift */
                        w.m[r] = lv == -INFINITY ? -INFINITY : (float)(lv * LOG2E - w.sh[r]);
                        w.ll[r] = 0.0f;
                        large |= !part && lv != -INFINITY && fabs(lv) > 64.0;
                        double dsum = 0;
                        for (int64_t x = 0; x < c.dv; x++)
                            dsum += (double)w.dop[r * c.dv + x] * oi[r * out->stride[2] + x * out->stride[3]];
                        w.dsum[r] = (float)dsum; /* D_i */
                    }
                    int64_t jlo, jhi;
                    key_range(&c, i0, i0 + bi, &jlo, &jhi);
                    if (large) {
                        /* Recompute the forward's running max and sum exactly (same tiles, same
                         * kernels, same order), so P = exp2((s - max) - log2(sum)) keeps full accuracy
                         * where the float lse has lost it (logits ~1e4). Costs one extra S^T pass, only
                         * for such blocks. */
                        for (int r = 0; r < bi; r++) {
                            w.m[r] = -INFINITY;
                            w.l[r] = 0.0f;
                        }
                        for (int64_t j0 = jlo / BC * BC; j0 < jhi; j0 += BC) {
                            const int bj = (int)(c.nk - j0 < BC ? c.nk - j0 : BC);
                            int banded;
                            scores_tile(kr, &c, general, kh, k, b, h, i0, bi, j0, bj, w.qt, w.sh, w.s, NULL, NULL, &banded);
                            kr->softmax_update(bj, bi, w.s, BR, w.m, w.l, w.alpha, NULL);
                        }
                        for (int r = 0; r < bi; r++) w.ll[r] = w.l[r] > 0 ? (float)log2((double)w.l[r]) : 0.0f;
                    }
                    memset(w.acc, 0, sizeof(float) * (size_t)bi * (size_t)c.d);
                    for (int64_t j0 = jlo / BC * BC; j0 < jhi; j0 += BC) {
                        const int bj = (int)(c.nk - j0 < BC ? c.nk - j0 : BC);
                        const float *kj = kh + j0 * k->stride[2];
                        const float *vj = vh + j0 * v->stride[2];
                        /* on tiles the band crosses, every product runs over the band only: outside
                         * it P and dS are exactly 0 (probs_and_ds zeroes dS wherever P is 0) */
                        int banded;
                        scores_tile(kr, &c, general, kh, k, b, h, i0, bi, j0, bj, w.qt, w.sh, w.s, w.capd, NULL, &banded);
                        for (int r0 = 0; r0 < bj; r0 += banded ? 4 : bj) {
                            const int rows = banded ? (bj - r0 < 4 ? bj - r0 : 4) : bj;
                            int qa = 0, qb = bi;
                            if (banded) band_cols(&c, i0, bi, j0, r0, rows, &qa, &qb);
                            if (qa < qb)
                                kr->gemm(rows, qb - qa, (int)c.dv, vj + r0 * v->stride[2], v->stride[2], v->stride[3],
                                         w.dot + qa, BR, w.dp + r0 * BR + qa, BR, 0, NULL, NULL);
                        }
                        if (c.p > 0) apply_dropout(kr, &c, b, h, i0, bi, j0, bj, w.dp, w.colbase);
                        kr->probs_and_ds(bj, bi, w.s, w.dp, w.ds, BR, w.m, w.ll, w.dsum, (float)c.scale);
                        if (general && c.softcap > 0)
                            for (int r = 0; r < bj; r++)
                                for (int x = 0; x < bi; x++) /* capd is only written where allowed */
                                    if (w.ds[r * BR + x] != 0) w.ds[r * BR + x] *= w.capd[r * BR + x];
                        if (c.p > 0) apply_dropout(kr, &c, b, h, i0, bi, j0, bj, w.s, w.colbase);
                        for (int r0 = 0; r0 < bj; r0 += banded ? 4 : bj) {
                            const int rows = banded ? (bj - r0 < 4 ? bj - r0 : 4) : bj;
                            int qa = 0, qb = bi;
                            if (banded) band_cols(&c, i0, bi, j0, r0, rows, &qa, &qb);
                            if (qa >= qb) continue;
                            kr->gemm(rows, (int)c.dv, qb - qa, w.s + r0 * BR + qa, BR, 1, w.dop + qa * c.dv, c.dv,
                                     dvh + (j0 + r0) * dv->stride[2], dv->stride[2], 1, NULL, NULL);
                            kr->gemm(rows, (int)c.d, qb - qa, w.ds + r0 * BR + qa, BR, 1, w.qp + qa * c.d, c.d,
                                     dkh + (j0 + r0) * dk->stride[2], dk->stride[2], 1, NULL, NULL);
                        }
                        const float *kb = kj;
                        int64_t ldk = k->stride[2];
                        if (!k_inplace) {
                            pack_rows(kr, kj, k->stride[2], k->stride[3], bj, c.d, w.kp);
                            kb = w.kp;
                            ldk = c.d;
                        }
                        for (int q0 = 0; q0 < bi; q0 += banded ? 4 : bi) {
                            const int cols = banded ? (bi - q0 < 4 ? bi - q0 : 4) : bi;
                            int ra = 0, rb = bj;
                            if (banded) band_rows(&c, i0, q0, cols, j0, bj, &ra, &rb);
                            if (ra >= rb) continue;
                            kr->gemm(cols, (int)c.d, rb - ra, w.ds + ra * BR + q0, 1, BR, kb + ra * ldk, ldk,
                                     w.acc + q0 * c.d, c.d, 1, NULL, NULL);
                        }
                    }
                    if (dq)
                        store_rows(kr, w.acc, bi, c.d, NULL,
                                   dq->data + b * dq->stride[0] + h * dq->stride[1] + i0 * dq->stride[2],
                                   dq->stride[2], dq->stride[3]);
                }
        }
    }
    return ATTN_OK;
}

attn_status attn_flash_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const attn_sdpa_params *params, const attn_tensor *out,
                                const attn_tensor *dout, const attn_tensor *lse, attn_tensor *dq,
                                attn_tensor *dk, attn_tensor *dv, void *workspace,
                                size_t workspace_bytes_) {
    return flash_backward("attn_flash_backward", q, k, v, params, out, dout, lse, dq, dk, dv, workspace,
                          workspace_bytes_, 0);
}

attn_status attn_flash_backward_part(const char *fn, const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_params *params,
                                     const attn_tensor *out, const attn_tensor *dout, const attn_tensor *lse,
                                     attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, void *workspace,
                                     size_t workspace_bytes_) {
    return flash_backward(fn, q, k, v, params, out, dout, lse, dq, dk, dv, workspace, workspace_bytes_, 1);
}

/* Logit (i, j) in double, -inf when masked. */
static double exact_logit(const attn_ctx *c, const attn_tensor *q, const attn_tensor *k, int64_t b,
                          int64_t h, int64_t i, int64_t j) {
    if (!attn_ctx_allowed(c, b, h, i, j)) return -INFINITY;
    const float *qi = q->data + b * q->stride[0] + h * q->stride[1] + i * q->stride[2];
    const float *kj = k->data + b * k->stride[0] + (h / c->group) * k->stride[1] + j * k->stride[2];
    double x = 0;
    for (int64_t t = 0; t < c->d; t++) x += (double)qi[t * q->stride[3]] * kj[t * k->stride[3]];
    x *= c->scale;
    if (c->softcap > 0) x = c->softcap * tanh(x / c->softcap);
    return x + attn_ctx_bias(c, b, h, i, j);
}

attn_status attn_flash_weights(const attn_tensor *q, const attn_tensor *k,
                               const attn_sdpa_params *params, int64_t b, int64_t h, int64_t row0,
                               int64_t rows, int apply_dropout_, float *weights) {
    static const char *fn = "attn_flash_weights";
    attn_ctx c;
    attn_status st;
    /* v and out only carry shapes here: K stands in for V, Q for the output */
    if (!q || !k) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: q and k are required", fn);
    if ((st = attn_ctx_init(&c, fn, q, k, k, params, q, "q"))) return st;
    if (b < 0 || b >= c.b || h < 0 || h >= c.hq || row0 < 0 || rows < 0 || row0 > c.nq || rows > c.nq - row0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: batch %lld, head %lld, rows [%lld, %lld) outside [B=%lld, Hq=%lld, Nq=%lld]", fn,
                          (long long)b, (long long)h, (long long)row0, (long long)(row0 + rows), (long long)c.b,
                          (long long)c.hq, (long long)c.nq);
    if (rows > 0 && c.nk > 0 && !weights) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: weights is NULL", fn);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = row0 + r;
        /* the row's own log-sum-exp, online, then the probabilities (logits computed twice rather
         * than kept, so no row buffer is needed) */
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < c.nk; j++) {
            const double s = exact_logit(&c, q, k, b, h, i, j);
            if (s == -INFINITY) continue;
            if (s > mx) {
                sum = sum * exp(mx - s) + 1.0;
                mx = s;
            } else {
                sum += exp(s - mx);
            }
        }
        const double lse = mx == -INFINITY ? -INFINITY : mx + log(sum);
        for (int64_t j = 0; j < c.nk; j++) {
            const double s = lse == -INFINITY ? -INFINITY : exact_logit(&c, q, k, b, h, i, j);
            double p = s == -INFINITY ? 0.0 : exp(s - lse);
            if (apply_dropout_ && p != 0) p *= attn_ctx_keep(&c, b, h, i, j);
            weights[r * c.nk + j] = (float)p;
        }
    }
    return ATTN_OK;
}
