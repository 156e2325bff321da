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
 * forward; in the backward (batch, key/value head, run of key blocks), which owns dK and dV of
 * its keys and walks the group's query heads and query blocks in a fixed order, while the dQ
 * shares of the key blocks are added to each dQ block in increasing key order (a counter per
 * query block orders them) — so results never depend on the thread count, and one key/value head
 * still keeps every thread busy. Tiles that causality or a window masks completely are never
 * visited. */
#define _DEFAULT_SOURCE /* syscall, sched_yield */
#include <float.h>
#include <math.h>
#include <sched.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attention_common.h"
#include "attn/introspect.h"
#include "core/internal.h"
#include "core/tuning.h"
#include "decode_internal.h"
#include "flash_internal.h"
#include "kernels/bf16_internal.h"
#include "kernels/registry.h"

#define BR ATTN_FLASH_BR
#define BC ATTN_FLASH_BC
/* the bf16 forward's softmax and P V step: two S^T tiles of keys (forward_block_bf16) */
#define BCV (2 * BC)
/* the bf16 backward's dQ product: dS of up to DQ_TILES key tiles at once (bf16_backward_group) */
#define DQ_TILES 4
/* the bf16 backward's dK and dV products: P and dS of up to BWD_QBLOCKS query blocks at once */
#define BWD_QBLOCKS 4
/* words per row of the bf16 backward's P and dS words: the query blocks side by side */
#define BWD_WROW (BWD_QBLOCKS * BR / 2)
#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453

static const attn_flash_kernels *flash_kernels(void) { return attn_kernel_ctx_active()->flash; }

/* May the bf16 table's fused softmax-and-pair steps stand in for this flash table's softmax? Only
 * where both compute the same exp2 bit for bit (a capability of the rows, not of the ISA). */
static int bf16_fuses(const attn_bf16_kernels *hk, const attn_flash_kernels *kr) {
    return kr->softmax_tile != ATTN_SOFTMAX_TILE_OWN && hk->fused_softmax_tile == (int)kr->softmax_tile;
}

/* Fast tiles need only index masks and the key mask; anything else goes element by element
 * through the shared mask/bias logic. */
static int needs_general_epilogue(const attn_ctx *c) { return c->softcap > 0 || c->alibi || c->am || c->bm; }

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
static void epilogue(const attn_ctx *c, int general, int64_t b, int64_t h, int64_t i0, int bi, int64_t j0, int bj,
                     const float *sh, float *s, float *capd) {
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
        /* clamped: a float mask near FLT_MAX would round the shift to inf and every logit to -inf */
        if (mx != -INFINITY) sh[r] = (float)fmin(mx * LOG2E, FLT_MAX);
    }
}

/* The S^T tile of keys [j0, j0 + bj) against the packed query block: on tiles the causal/window
 * band crosses only the band is computed (the epilogue masks the rest). tilemax (nullable) receives
 * the tile's column maxima when they come for free with the product; tilemax[0] is NaN otherwise. */
static void scores_tile(const attn_flash_kernels *kr, const attn_ctx *c, int general, const float *kh,
                        const attn_tensor *k, int64_t b, int64_t h, int64_t i0, int bi, int64_t j0, int bj,
                        const float *qt, const float *sh, float *s, float *capd, float *tilemax, int *banded,
                        float *ktbuf, float *tmp) {
    *banded = !general && !tile_inside(c, i0, i0 + bi, j0, j0 + bj);
    if (!*banded && ktbuf && bi < 16 && k->stride[3] == 1) {
        /* Few query rows (decode): S = Q K^T with the keys along the vector lanes, then transposed
         * into S^T. Each element is the same chain of products in increasing t as K Q^T would
         * make (an FMA does not care which operand is broadcast), so the bits are the same. */
        kr->pack_transposed(bj, (int)c->d, kh + j0 * k->stride[2], k->stride[2], 1.0f, ktbuf, BR);
        kr->gemm(bi, bj, (int)c->d, qt, 1, BR, ktbuf, BR, tmp, BR, 0, NULL, NULL);
        for (int r = 0; r < bj; r++)
            for (int q = 0; q < bi; q++) s[r * BR + q] = tmp[q * BR + r];
        if (tilemax) tilemax[0] = NAN;
        epilogue(c, general, b, h, i0, bi, j0, bj, sh, s, capd);
        return;
    }
    if (*banded) {
        for (int r0 = 0; r0 < bj; r0 += 4) {
            const int rows = bj - r0 < 4 ? bj - r0 : 4;
            int qa, qb;
            band_cols(c, i0, bi, j0, r0, rows, &qa, &qb);
            if (qa < qb)
                kr->gemm(rows, qb - qa, (int)c->d, kh + (j0 + r0) * k->stride[2], k->stride[2], k->stride[3], qt + qa,
                         BR, s + r0 * BR + qa, BR, 0, NULL, NULL);
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
static void apply_dropout(const attn_flash_kernels *kr, const attn_ctx *c, int64_t b, int64_t h, int64_t i0, int bi,
                          int64_t j0, int bj, float *s, uint64_t *colbase) {
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
static void pack_transposed(const attn_flash_kernels *kr, const float *x, int64_t rs, int64_t cs, int bi, int64_t D,
                            float f, float *dst) {
    if (cs == 1) {
        kr->pack_transposed(bi, (int)D, x, rs, f, dst, BR);
        return;
    }
    for (int q = 0; q < bi; q++)
        for (int64_t t = 0; t < D; t++) dst[t * BR + q] = x[q * rs + t * cs] * f;
}
/* Rows into a contiguous [rows x D] buffer. */
static void pack_rows(const attn_flash_kernels *kr, const float *x, int64_t rs, int64_t cs, int rows, int64_t D,
                      float *dst) {
    if (cs == 1) {
        kr->scale_copy_rows(rows, (int)D, x, rs, NULL, dst, D);
        return;
    }
    for (int q = 0; q < rows; q++)
        for (int64_t t = 0; t < D; t++) dst[q * D + t] = x[q * rs + t * cs];
}
/* dst rows (any strides) = src [rows x D] * f[row] (f nullable). */
static void store_rows(const attn_flash_kernels *kr, const float *src, int rows, int64_t D, const float *f, float *dst,
                       int64_t rs, int64_t cs) {
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
    float *w1, *w2, *kv;                          /* bf16 backward: pair words of P, dS and K */
    float *m, *l, *alpha, *sh, *ll, *dsum, *tmax; /* per query row of the block */
    float *colbase_raw;                           /* 2 BR floats holding ... */
    uint64_t *colbase;                            /* ... the dropout stream index per query row */
} flash_bufs;

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Floats per thread; lays out the buffers when base is not NULL. */
static size_t layout(int64_t d, int64_t dv, float *base, flash_bufs *bb) {
    const int64_t dm = d > dv ? d : dv;
    const size_t sizes[22] = {(size_t)(BWD_QBLOCKS * (d + 1) / 2 * BR),  /* qt, dot, qp, dop: also the */
                              (size_t)(BWD_QBLOCKS * (dv + 1) / 2 * BR), /* bf16 backward's query blocks */
                              (size_t)(BWD_QBLOCKS * BR / 2 * d),
                              (size_t)(BWD_QBLOCKS * BR / 2 * dv),
                              (size_t)(BCV * BR), /* s: the bf16 forward's step of two S^T tiles */
                              (size_t)(BC * BR),
                              (size_t)(BWD_QBLOCKS * DQ_TILES * BC / 2 * BR), /* ds: also the bf16 dQ's dS words */
                              (size_t)(BC * BR),
                              (size_t)(BR * dm),
                              (size_t)(BC * d),
                              (size_t)(BC * dv),
                              BR,
                              BR,
                              BR,
                              BR,
                              BR,
                              BR,
                              BR,
                              2 * BR,
                              (size_t)(BWD_QBLOCKS * BC * BR / 2), /* w1, w2: P and dS words, the query */
                              (size_t)(BWD_QBLOCKS * BC * BR / 2), /* blocks side by side */
                              (size_t)(DQ_TILES * BC / 2 * d)};    /* kv: K's words for the bf16 dQ */
    float **ptrs[22] = {&bb->qt,   &bb->dot,  &bb->qp,          &bb->dop, &bb->s,  &bb->dp,    &bb->ds, &bb->capd,
                        &bb->acc,  &bb->kp,   &bb->vp,          &bb->m,   &bb->l,  &bb->alpha, &bb->sh, &bb->ll,
                        &bb->dsum, &bb->tmax, &bb->colbase_raw, &bb->w1,  &bb->w2, &bb->kv};
    size_t off = 0;
    for (int i = 0; i < 22; i++) {
        if (base) *ptrs[i] = base + off;
        off += round16(sizes[i]);
    }
    if (base) bb->colbase = (uint64_t *)(void *)bb->colbase_raw; /* 64-byte aligned, untyped workspace */
    return off;
}

/* After the per-thread buffers, the backward's per-query-row statistics (filled by its first
 * pass, read by every key block's task): the row's lse in log2 units relative to its shift, the
 * small remainder ll, D_i = rowsum(dO_i * O_i) and the shift itself; then one counter per
 * (batch, query head, query block): how many key blocks have added their dQ share so far. */
typedef struct flash_rows {
    float *m, *ll, *dsum, *sh;
    atomic_int *done;
} flash_rows;

/* Floats for the row statistics of rows query rows in nblk query blocks; lays them out when base
 * is not NULL. 0 (and SIZE_MAX on overflow) for no rows. */
static size_t rows_layout(int64_t rows, int64_t nblk, float *base, flash_rows *rr) {
    size_t r16, total, ints;
    if (rows <= 0) return 0;
    r16 = round16((size_t)rows);
    if (attn_mul_overflow(r16, 4, &total) || attn_mul_overflow((size_t)nblk, sizeof(atomic_int), &ints) ||
        attn_add_overflow(total, round16((ints + sizeof(float) - 1) / sizeof(float)), &total))
        return SIZE_MAX;
    if (base) {
        rr->m = base;
        rr->ll = base + r16;
        rr->dsum = base + 2 * r16;
        rr->sh = base + 3 * r16;
        rr->done = (atomic_int *)(void *)(base + 4 * r16); /* 64-byte aligned, untyped workspace */
    }
    return total;
}

/* Does the bf16 forward pair V's rows once per call (vpairs_base) rather than tile by tile? When
 * every key tile serves several query blocks of a head; not for a single block (one-token decode
 * with a GQA group would pay a copy of V for little). */
static int prepair_v(int bf16, int64_t nq) { return bf16 && nq > BR; }

/* Pair words of the bf16 forward's V paired once per call: B Hk ceil(Nk / BCV) (BCV / 2) dv (room
 * for either layout, rows or v_across's blocks) when prepair_v, else none. SIZE_MAX on overflow. */
static size_t vpair_words(int prepair, int64_t b, int64_t hk, int64_t nk, int64_t dv) {
    size_t w;
    if (!prepair || b <= 0 || hk <= 0 || nk <= 0 || dv <= 0) return 0;
    if (attn_mul_overflow((size_t)b, (size_t)hk, &w) ||
        attn_mul_overflow(w, (size_t)((nk + BCV - 1) / BCV * (BCV / 2)), &w) || attn_mul_overflow(w, (size_t)dv, &w))
        return SIZE_MAX;
    return w;
}

/* Bytes of workspace: per-thread tile buffers, then the backward's row statistics for
 * rows = B Hq Nq query rows in nblk = B Hq ceil(Nq / BR) blocks, then vpw pair words of V. */
static size_t workspace_bytes(int64_t d, int64_t dv, int64_t rows, int64_t nblk, size_t vpw) {
    flash_bufs unused;
    flash_rows unused_rows;
    size_t per = layout(d, dv, NULL, &unused), total, extra = rows_layout(rows, nblk, NULL, &unused_rows);
    if (extra == SIZE_MAX || vpw == SIZE_MAX || attn_mul_overflow(per, (size_t)attn_get_num_threads(), &total) ||
        attn_add_overflow(total, extra, &total) || attn_add_overflow(total, round16(vpw), &total) ||
        attn_mul_overflow(total, sizeof(float), &total) || attn_add_overflow(total, 64, &total))
        return SIZE_MAX;
    return total;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

size_t attn_flash_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v) {
    if (!q || !k || !v || q->rank != 4 || k->rank != 4 || v->rank != 4 || q->shape[3] < 1 || v->shape[3] < 1 ||
        q->shape[3] > (1 << 20) || v->shape[3] > (1 << 20))
        return 0;
    size_t rows, nblk;
    if (q->shape[0] < 0 || q->shape[1] < 0 || q->shape[2] < 0 ||
        attn_mul_overflow((size_t)q->shape[0], (size_t)q->shape[1], &nblk) ||
        attn_mul_overflow(nblk, (size_t)q->shape[2], &rows) ||
        attn_mul_overflow(nblk, (size_t)ceil_div(q->shape[2], BR), &nblk) || rows > (size_t)INT64_MAX / 64)
        return SIZE_MAX;
    size_t need = workspace_bytes(q->shape[3], v->shape[3], (int64_t)rows, (int64_t)nblk,
                                  vpair_words(prepair_v(q->dtype == ATTN_TYPE_BF16, q->shape[2]), k->shape[0],
                                              k->shape[1], k->shape[2], v->shape[3]));
    if (q->shape[2] == 1) { /* enough for either path: which one runs depends on the params */
        const size_t dec = attn_flash_decode_workspace(q->shape[0], q->shape[1], k->shape[2], q->shape[3], v->shape[3]);
        if (dec > need) need = dec;
    }
    return need;
}

static attn_status get_bufs(const char *fn, const attn_ctx *c, int bf16, void *ws, size_t bytes, float **base) {
    void *aligned;
    const int64_t nblk = c->b * c->hq * ceil_div(c->nq, BR);
    attn_status st = attn_ctx_workspace(fn, ws, bytes,
                                        workspace_bytes(c->d, c->dv, c->b * c->hq * c->nq, nblk,
                                                        vpair_words(prepair_v(bf16, c->nq), c->b, c->hk, c->nk, c->dv)),
                                        &aligned);
    *base = aligned;
    return st;
}

/* Past the per-thread buffers: the backward's row statistics (backward_rows), then V's pairs. */
static float *shared_base(const attn_ctx *c, float *base) {
    flash_bufs unused;
    return base + layout(c->d, c->dv, NULL, &unused) * (size_t)attn_get_num_threads();
}

static flash_rows backward_rows(const attn_ctx *c, float *base) {
    flash_rows rr = {NULL, NULL, NULL, NULL, NULL};
    rows_layout(c->b * c->hq * c->nq, c->b * c->hq * ceil_div(c->nq, BR), shared_base(c, base), &rr);
    return rr;
}

/* The bf16 forward's V pair words, after the row statistics: head (b, g) at
 * ((b Hk + g) ceil(Nk / 2)) dv, rows (2p, 2p + 1) at p dv. */
static uint32_t *vpairs_base(const attn_ctx *c, float *base) {
    flash_rows unused_rows;
    const size_t rows = rows_layout(c->b * c->hq * c->nq, c->b * c->hq * ceil_div(c->nq, BR), NULL, &unused_rows);
    return (uint32_t *)(void *)(shared_base(c, base) + rows);
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
    qq.dtype = kk.dtype = ATTN_TYPE_F32; /* any element type: only the shapes count */
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

/* ---- bf16 operand packing (pair words, kernels/bf16_internal.h) ---- */

/* Can the rows of a bf16 [.., N, D] view be read in place as pair words (A operands)? */
static int rows_are_words(const attn_tensor *x) {
    return x->stride[3] == 1 && x->shape[3] % 2 == 0 && x->stride[2] % 2 == 0 && x->stride[1] % 2 == 0 &&
           x->stride[0] % 2 == 0 && ((uintptr_t)x->ptr & 3) == 0;
}
/* dst[r * ceil(D / 2) + p] = (x[r][2p], x[r][2p + 1]): rows as A-operand words. */
static void words_rows(const uint16_t *x, int64_t rs, int64_t cs, int rows, int64_t D, uint32_t *dst) {
    const int64_t dp = (D + 1) / 2;
    for (int r = 0; r < rows; r++)
        for (int64_t p = 0; p < dp; p++)
            dst[r * dp + p] = attn_pair(x[r * rs + 2 * p * cs], 2 * p + 1 < D ? x[r * rs + (2 * p + 1) * cs] : 0);
}
/* dst[p * BR + r] = (x[r][2p], x[r][2p + 1]): a block's rows as the B operand of a product over D.
 * When the view's rows are pair words (words), this is a transpose of 32-bit words: the kernels'
 * vector transpose, which copies the patterns exactly. */
static void words_rows_t(const attn_flash_kernels *kr, int words, const uint16_t *x, int64_t rs, int64_t cs, int rows,
                         int64_t D, uint32_t *dst) {
    const int64_t dp = (D + 1) / 2;
    if (words) {
        kr->pack_transposed(rows, (int)dp, (const float *)(const void *)x, rs / 2, 1.0f, (float *)(void *)dst, BR);
        return;
    }
    for (int r = 0; r < rows; r++)
        for (int64_t p = 0; p < dp; p++)
            dst[p * BR + r] = attn_pair(x[r * rs + 2 * p * cs], 2 * p + 1 < D ? x[r * rs + (2 * p + 1) * cs] : 0);
}
/* dst[p * D + t] = (x[2p][t], x[2p + 1][t]): rows paired (VNNI), the B operand of a product over
 * the rows. */
static void words_vnni(const attn_bf16_kernels *hk, const uint16_t *x, int64_t rs, int64_t cs, int rows, int64_t D,
                       uint32_t *dst) {
    if (cs == 1) {
        hk->pair_rows_bf16(rows, (int)D, x, rs, dst, D);
        return;
    }
    for (int p = 0; p < (rows + 1) / 2; p++)
        for (int64_t t = 0; t < D; t++)
            dst[p * D + t] = attn_pair(x[2 * p * rs + t * cs], 2 * p + 1 < rows ? x[(2 * p + 1) * rs + t * cs] : 0);
}
/* ---- bf16 forward ----
 * Q, K, V in bf16; S^T = K Q^T and O += P V on pair products with float accumulation
 * (bf16_internal.h), the online softmax and its statistics in float, P rounded to bf16 for P V
 * (as FlashAttention does), the output float or bf16. The same tiles, masks and order as the
 * float path; tiles the band crosses are computed whole and masked by the epilogue. The
 * per-thread buffers of the float path are reused (pair words take at most as much room). */
/* Rows j0 .. j0 + bj of head (b, g) of a bf16 V paired: dst[p dv + x] = (v[j0 + 2p][x],
 * v[j0 + 2p + 1][x]), the high half 0 past the last row. */
static void pair_v_rows(const attn_bf16_kernels *hk, const attn_tensor *v, int64_t b, int64_t g, int64_t j0, int bj,
                        int64_t dv, uint32_t *dst) {
    const uint16_t *vj = v->data16 + b * v->stride[0] + g * v->stride[1] + j0 * v->stride[2];
    if (v->stride[3] == 1) {
        hk->pair_rows_bf16(bj, (int)dv, vj, v->stride[2], dst, dv);
        return;
    }
    for (int p = 0; p < (bj + 1) / 2; p++)
        for (int64_t x = 0; x < dv; x++)
            dst[p * dv + x] = attn_pair(vj[2 * p * v->stride[2] + x * v->stride[3]],
                                        2 * p + 1 < bj ? vj[(2 * p + 1) * v->stride[2] + x * v->stride[3]] : 0);
}

/* A query block's running state before its first key tile: max -inf, sum 0, output 0. */
static void block_start(const flash_bufs *w, int bi, int64_t dv) {
    for (int r = 0; r < bi; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    memset(w->acc, 0, sizeof(float) * (size_t)bi * (size_t)dv);
}

/* After the last tile: alpha = 1 / l (0 for a fully masked row; a NaN l gives a NaN row), and the
 * rows' log-sum-exp into lse (nullable) from the shift, the log2-unit max and the sum. */
static void block_finish(const flash_bufs *w, attn_tensor *lse, int64_t b, int64_t h, int64_t i0, int bi) {
    for (int r = 0; r < bi; r++) w->alpha[r] = w->l[r] != 0 ? 1.0f / w->l[r] : 0.0f;
    if (!lse) return;
    for (int r = 0; r < bi; r++)
        lse->data[b * lse->stride[0] + h * lse->stride[1] + (i0 + r) * lse->stride[2]] =
            w->l[r] != 0 ? (float)(((double)w->sh[r] + w->m[r] + log2((double)w->l[r])) * LN2) : -INFINITY;
}

/* Does the bf16 forward hold O transposed, with V^T paired across the keys? Where the pair
 * products run on AMX tiles: O^T += V^T P^T takes P's pair words as the softmax writes them (B
 * tiles) and V^T's rows straight (A tiles), where O += P V would transpose P for every tile. */
static int v_across(const attn_bf16_kernels *hk) { return hk->gemm_pairs_colscale != NULL; }

/* The bf16 forward's S^T of one key tile against a query block (Q^T's pair words in qp) into sb,
 * masked and shifted. */
typedef struct fwd_scores_args {
    const attn_bf16_kernels *hk;
    const attn_ctx *c;
    int general;
    const attn_tensor *k;
    const uint16_t *kh; /* head (b, g) of K */
    int k_words, dp;    /* K's rows read in place as pair words; pair words per row */
    uint32_t *kp;       /* else K's rows paired here */
    const uint32_t *qp;
    int64_t b, h, i0;
    int bi;
    int pad; /* whole 32 x 32 blocks: qp's columns zero up to npad, K's last rows padded */
    int npad;
    float qscale;
    const float *sh;
} fwd_scores_args;

/* Rows and columns rounded up to whole blocks of 32 (AMX's 2 x 2 tiles). */
static int round32(int n) { return (n + 31) & ~31; }

static void fwd_scores(const fwd_scores_args *a, int64_t j0, float *sb) {
    const attn_ctx *c = a->c;
    const attn_tensor *k = a->k;
    const int bj = (int)(c->nk - j0 < BC ? c->nk - j0 : BC), dp = a->dp;
    const uint16_t *kj = a->kh + j0 * k->stride[2];
    const uint32_t *ka = a->kp;
    int64_t ars = dp;
    int mr = bj;
    if (a->k_words && !(a->pad && bj % 32)) {
        ka = (const uint32_t *)(const void *)kj;
        ars = k->stride[2] / 2;
    } else {
        if (a->k_words) /* rows of pair words already: copied whole */
            for (int r = 0; r < bj; r++) memcpy(a->kp + r * dp, kj + r * k->stride[2], sizeof(uint32_t) * (size_t)dp);
        else
            words_rows(kj, k->stride[2], k->stride[3], bj, c->d, a->kp);
        if (a->pad) { /* zero keys past the last: rows of S^T the softmax never reads */
            mr = round32(bj);
            memset(a->kp + bj * dp, 0, sizeof(uint32_t) * (size_t)((mr - bj) * dp));
        }
    }
    a->hk->gemm_pairs(mr, a->npad, dp, ka, ars, 1, a->qp, BR, sb, BR, 0, NULL, a->qscale);
    epilogue(c, a->general, a->b, a->h, a->i0, a->bi, j0, bj, a->sh, sb, NULL);
}

/* One bf16 forward task: query block qb of head h of batch b (the f32 path's task, on pair words).
 * vpairs: V's pairs made once per call (vpairs_base), or NULL to pair each tile's rows here; the
 * words, and so the results, are the same either way. */
static void forward_block_bf16(const attn_flash_kernels *kr, const attn_bf16_kernels *hk, const attn_ctx *cp,
                               const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, attn_tensor *out,
                               attn_tensor *lse, const flash_bufs *wp, const uint32_t *vpairs, int64_t b, int64_t h,
                               int64_t qb) {
    const attn_ctx c = *cp;
    const flash_bufs w = *wp;
    const int general = needs_general_epilogue(&c);
    const float qscale = (float)(general ? c.scale : c.scale * LOG2E);
    const int dp = (int)((c.d + 1) / 2); /* pair words per q / k row */
    /* K rows are read in place as pair words when they are: unit stride, even length and row
     * stride, 4-byte aligned */
    const int k_words = rows_are_words(k), q_words = rows_are_words(q);
    /* softmax and P's rounding in one pass, where the bf16 kernels have it for these tile
     * kernels; dropout scales P between the two */
    const int fused = hk->softmax_pairs && bf16_fuses(hk, kr) && c.p == 0;
    const int64_t nkp = (c.nk + 1) / 2, g = h / c.group;
    /* AMX with V paired once per call: O^T = V^T P^T (v_across), so that P's pair words are the
     * B tiles as the softmax writes them and V^T's rows the A tiles, nothing transposed per tile;
     * O^T's columns (query rows) scaled by alpha before each product */
    const int ot = vpairs && v_across(hk);
    float *acct = w.acc;
    uint32_t *qp = (uint32_t *)(void *)w.qt, *kp = (uint32_t *)(void *)w.kp, *pw = (uint32_t *)(void *)w.dp;
    const int64_t i0 = qb * BR;
    const int bi = (int)(c.nq - i0 < BR ? c.nq - i0 : BR);
    const uint16_t *qi = q->data16 + b * q->stride[0] + h * q->stride[1] + i0 * q->stride[2];
    const uint16_t *kh = k->data16 + b * k->stride[0] + g * k->stride[1];
    /* On AMX a block short of whole 32 x 32 tiles went through block_edge's staging, element by
     * element, for every tile and chunk (at N 197 a third of the forward). Instead the products
     * run on whole blocks over zero words: queries past bi (Q^T's and P's columns zero, alpha 1,
     * O's extra rows or O^T's extra columns 0), keys past a step's last (K's rows copied and
     * zero-padded; P's and V's pair rows zero up to the next 16). The extra columns and rows of
     * S^T and O are never read, and each real element is the same chain of tile products over the
     * same zero-padded chunks as before: the same bits. */
    const int pad = v_across(hk), npad = pad ? round32(bi) : bi;
    int64_t jlo, jhi;
    key_range(&c, i0, i0 + bi, &jlo, &jhi);
    if (pad && npad > bi) memset(qp, 0, sizeof(uint32_t) * (size_t)dp * BR);
    words_rows_t(kr, q_words, qi, q->stride[2], q->stride[3], bi, c.d, qp); /* Q^T as pair words */
    row_shifts(&c, general, b, h, i0, bi, w.sh);
    block_start(&w, bi, c.dv);
    if (ot) memset(acct, 0, sizeof(float) * (size_t)(c.dv * BR));
    if (pad && npad > bi) {
        /* P's columns past bi in every pair row a step uses: at most the first step's keys */
        const int64_t span = jhi - jlo / BC * BC;
        const int prow = span <= 0 ? 0 : span >= BCV ? BCV / 2 : (int)round16((size_t)(span + 1) / 2);
        memset(pw, 0, sizeof(uint32_t) * (size_t)prow * BR);
        for (int j = bi; j < npad; j++) w.alpha[j] = 1.0f;
        if (!ot) memset(w.acc + bi * c.dv, 0, sizeof(float) * (size_t)((npad - bi) * c.dv));
    }
    const fwd_scores_args sa = {hk, &c, general, k, kh, k_words, dp, kp, qp, b, h, i0, bi, pad, npad, qscale, w.sh};
    /* Keys in steps of up to BCV, two S^T tiles: the softmax and P V run once a step, so the
     * accumulator (on AMX O^T, in memory) is rescaled, loaded and stored once for 128 keys, and
     * P V's reductions are 64 pair words long. Steps end on multiples of BCV (V^T's blocks), the
     * same for every path, packed or alone, so all of them give the same bits. */
    for (int64_t j0 = jlo / BC * BC; j0 < jhi;) {
        const int64_t blk = j0 / BCV, jend = (blk + 1) * BCV < jhi ? (blk + 1) * BCV : jhi;
        const int b1 = (int)(c.nk - j0 < BC ? c.nk - j0 : BC), two = j0 + BC < jend;
        const int bj = b1 + (two ? (int)(c.nk - j0 - BC < BC ? c.nk - j0 - BC : BC) : 0);
        fwd_scores(&sa, j0, w.s);
        if (two) fwd_scores(&sa, j0 + BC, w.s + BC * BR);
        if (fused) {
            hk->softmax_pairs(bj, bi, w.s, BR, w.m, w.l, w.alpha, pw, BR);
        } else {
            kr->softmax_update_bf16(bj, bi, w.s, BR, w.m, w.l, w.alpha, NULL);
            if (c.p > 0) {
                apply_dropout(kr, &c, b, h, i0, bi, j0, b1, w.s, w.colbase);
                if (two) apply_dropout(kr, &c, b, h, i0, bi, j0 + BC, bj - b1, w.s + BC * BR, w.colbase);
            }
            hk->pair_rows_f32(bj, bi, w.s, BR, pw, BR);
        }
        if (ot) {
            const int kw = (bj + 1) / 2, kpad = (int)round16((size_t)kw); /* P's pair rows, zero to the next 16 */
            memset(pw + kw * BR, 0, sizeof(uint32_t) * (size_t)((kpad - kw) * BR));
            hk->gemm_pairs_colscale((int)c.dv, npad, kpad,
                                    vpairs + ((b * c.hk + g) * ceil_div(c.nk, BCV) + blk) * (BCV / 2) * c.dv +
                                        (j0 - blk * BCV) / 2,
                                    BCV / 2, pw, BR, acct, BR, w.alpha);
        } else {
            const uint32_t *vp = (const uint32_t *)(void *)w.vp;
            if (vpairs)
                vp = vpairs + ((b * c.hk + g) * nkp + j0 / 2) * c.dv;
            else
                pair_v_rows(hk, v, b, g, j0, bj, c.dv, (uint32_t *)(void *)w.vp);
            /* padded (AMX, V paired per step here): query rows to npad, P's and V's pair rows
             * zero to the next 16 */
            const int kw = (bj + 1) / 2, kk = pad ? (int)round16((size_t)kw) : kw;
            memset(pw + kw * BR, 0, sizeof(uint32_t) * (size_t)((kk - kw) * BR));
            memset((uint32_t *)(void *)w.vp + kw * c.dv, 0, sizeof(uint32_t) * (size_t)((kk - kw) * c.dv));
            hk->gemm_pairs(npad, (int)c.dv, kk, pw, 1, BR, vp, c.dv, w.acc, c.dv, 1, w.alpha, 1.0f);
        }
        j0 = (blk + 1) * BCV;
    }
    block_finish(&w, lse, b, h, i0, bi);
    const float *acc = w.acc;
    if (ot) { /* O^T back to rows (32-bit words moved exactly) */
        attn_bf16_words_across((int)c.dv, bi, (const uint32_t *)(const void *)acct, BR, (uint32_t *)(void *)w.dot,
                               c.dv);
        acc = w.dot;
    }
    if (out->dtype == ATTN_TYPE_BF16) {
        uint16_t *oi = out->data16 + b * out->stride[0] + h * out->stride[1] + i0 * out->stride[2];
        for (int r = 0; r < bi; r++) {
            if (out->stride[3] == 1) {
                hk->round_row((int)c.dv, acc + r * c.dv, w.alpha + r, oi + r * out->stride[2]);
                continue;
            }
            for (int64_t x = 0; x < c.dv; x++)
                oi[r * out->stride[2] + x * out->stride[3]] = attn_bf16_rne_daz(acc[r * c.dv + x] * w.alpha[r]);
        }
    } else {
        float *oi = out->data + b * out->stride[0] + h * out->stride[1] + i0 * out->stride[2];
        store_rows(kr, acc, bi, c.dv, w.alpha, oi, out->stride[2], out->stride[3]);
    }
}

static attn_status flash_forward_bf16(const attn_ctx *cp, const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, attn_tensor *out, attn_tensor *lse, float *base) {
    const attn_ctx c = *cp;
    const attn_flash_kernels *kr = flash_kernels();
    const attn_bf16_kernels *hk = attn_bf16_kernels_active();
    const int64_t nqb = ceil_div(c.nq, BR), tasks = c.b * c.hq * nqb;
    /* V paired by rows (rows 2p and 2p + 1 of a head; tiles start at even keys, so a tile's pairs
     * are the head's): once per call when tiles serve several query blocks, else tile by tile */
    const int prepaired = prepair_v(1, c.nq);
    uint32_t *vpairs = prepaired ? vpairs_base(&c, base) : NULL;
    const int across = v_across(hk);
    const int64_t nkp = (c.nk + 1) / 2, vchunks = ceil_div(c.nk, BCV), vtasks = prepaired ? c.b * c.hk * vchunks : 0;
#pragma omp parallel for schedule(static) num_threads(attn_threads_for(vtasks))
    for (int64_t t = 0; t < vtasks; t++) {
        const int64_t bg = t / vchunks, j0 = t % vchunks * BCV, b = bg / c.hk, g = bg % c.hk;
        const int bj = (int)(c.nk - j0 < BCV ? c.nk - j0 : BCV);
        if (across) { /* head (b, g), key block j0 / BCV at ((b Hk + g) ceil(Nk / BCV) + j0 / BCV) (BCV / 2) dv,
                       * row x at x BCV / 2: a tile's 16 rows 256 bytes apart, not a head's length */
            uint32_t t[BCV / 2 * 128];
            const int64_t t0 = (bg * vchunks + j0 / BCV) * c.dv;
            for (int64_t x0 = 0; x0 < c.dv; x0 += 128) {
                const int nx = (int)(c.dv - x0 < 128 ? c.dv - x0 : 128);
                attn_tensor vx = *v;
                vx.data16 += x0 * v->stride[3];
                pair_v_rows(hk, &vx, b, g, j0, bj, nx, t);
                const int kw = (bj + 1) / 2, kpad = (int)round16((size_t)kw); /* words zero to the next 16 */
                uint32_t *vt = vpairs + (t0 + x0) * (BCV / 2);
                attn_bf16_words_across(kw, nx, t, nx, vt, BCV / 2);
                for (int x = 0; kpad > kw && x < nx; x++)
                    memset(vt + x * (BCV / 2) + kw, 0, sizeof(uint32_t) * (size_t)(kpad - kw));
            }
            continue;
        }
        pair_v_rows(hk, v, b, g, j0, bj, c.dv, vpairs + (bg * nkp + j0 / 2) * c.dv);
    }
#pragma omp parallel num_threads(attn_threads_for(tasks))
    {
        flash_bufs w = thread_bufs(&c, base);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t bh = t / nqb, qb = nqb - 1 - t % nqb;
            forward_block_bf16(kr, hk, &c, q, k, v, out, lse, &w, vpairs, bh / c.hq, bh % c.hq, qb);
        }
    }
    return ATTN_OK;
}

/* One fp32 forward task: query block qb of head h of batch b, the online softmax over the block's
 * key tiles, P V accumulated in registers' order. */
static void forward_block_f32(const attn_flash_kernels *kr, const attn_ctx *cp, const attn_tensor *q,
                              const attn_tensor *k, const attn_tensor *v, attn_tensor *out, attn_tensor *lse,
                              const flash_bufs *wp, int64_t b, int64_t h, int64_t qb) {
    const attn_ctx c = *cp;
    const flash_bufs w = *wp;
    const int general = needs_general_epilogue(&c);
    const float qscale = (float)(general ? c.scale : c.scale * LOG2E);
    const int v_inplace = v->stride[3] == 1;
    const int64_t g = h / c.group, i0 = qb * BR;
    const int bi = (int)(c.nq - i0 < BR ? c.nq - i0 : BR);
    const float *qi = q->data + b * q->stride[0] + h * q->stride[1] + i0 * q->stride[2];
    const float *kh = k->data + b * k->stride[0] + g * k->stride[1];
    const float *vh = v->data + b * v->stride[0] + g * v->stride[1];
    pack_transposed(kr, qi, q->stride[2], q->stride[3], bi, c.d, qscale, w.qt);
    row_shifts(&c, general, b, h, i0, bi, w.sh);
    block_start(&w, bi, c.dv);
    int64_t jlo, jhi;
    key_range(&c, i0, i0 + bi, &jlo, &jhi);
    for (int64_t j0 = jlo / BC * BC; j0 < jhi; j0 += BC) {
        const int bj = (int)(c.nk - j0 < BC ? c.nk - j0 : BC);
        int banded;
        scores_tile(kr, &c, general, kh, k, b, h, i0, bi, j0, bj, w.qt, w.sh, w.s, NULL, w.tmax, &banded, w.kp, w.dp);
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
                kr->gemm(cols, (int)c.dv, rb - ra, w.s + ra * BR + q0, 1, BR, vb + ra * ldv, ldv, w.acc + q0 * c.dv,
                         c.dv, 1, w.alpha + q0, NULL);
            }
        } else {
            kr->gemm(bi, (int)c.dv, bj, w.s, 1, BR, vb, ldv, w.acc, c.dv, 1, w.alpha, NULL);
        }
    }
    float *oi = out->data + b * out->stride[0] + h * out->stride[1] + i0 * out->stride[2];
    block_finish(&w, lse, b, h, i0, bi);
    store_rows(kr, w.acc, bi, c.dv, w.alpha, oi, out->stride[2], out->stride[3]);
}

/* The fp32 forward: one task per (batch, query head, query block). */
static attn_status flash_forward_f32(const attn_ctx *cp, const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, attn_tensor *out, attn_tensor *lse, float *base) {
    const attn_ctx c = *cp;
    const attn_flash_kernels *kr = flash_kernels();
    const int64_t nqb = (c.nq + BR - 1) / BR, tasks = c.b * c.hq * nqb;
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
            forward_block_f32(kr, &c, q, k, v, out, lse, &w, bh / c.hq, bh % c.hq, qb);
        }
    }
    return ATTN_OK;
}

int attn_flash_takes_decode(const attn_ctx *c, const attn_tensor *k, const attn_tensor *v) {
    return attn_flash_decode_applies(c, k, v, needs_general_epilogue(c));
}

int64_t attn_flash_seq_tasks(const attn_ctx *c) { return c->b * c->hq * ceil_div(c->nq, BR); }

/* One parallel loop over the tasks of every problem: task t belongs to the last problem whose
 * task0 <= t, and within it is the task attn_flash_forward's loop numbers t - task0, computed by
 * the same block function with V paired tile by tile (the same words as the once-per-call pairs). */
void attn_flash_forward_seqs(const attn_flash_seq *seqs, int64_t n, int64_t tasks, float *base) {
    if (n <= 0 || tasks <= 0) return;
    const attn_flash_kernels *kr = flash_kernels();
    const attn_bf16_kernels *hk = attn_bf16_kernels_active();
#pragma omp parallel num_threads(attn_threads_for(tasks))
    {
        const flash_bufs w = thread_bufs(&seqs[0].c, base);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t lo = 0, hi = n - 1;
            while (lo < hi) {
                const int64_t mid = (lo + hi + 1) / 2;
                if (seqs[mid].task0 <= t)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            const attn_flash_seq *e = &seqs[lo];
            const int64_t nqb = ceil_div(e->c.nq, BR), local = t - e->task0;
            const int64_t bh = local / nqb, qb = nqb - 1 - local % nqb, b = bh / e->c.hq, h = bh % e->c.hq;
            attn_tensor out = e->out, lse = e->lse;
            attn_tensor *lp = e->has_lse ? &lse : NULL;
            if (e->q.dtype == ATTN_TYPE_BF16)
                forward_block_bf16(kr, hk, &e->c, &e->q, &e->k, &e->v, &out, lp, &w, NULL, b, h, qb);
            else
                forward_block_f32(kr, &e->c, &e->q, &e->k, &e->v, &out, lp, &w, b, h, qb);
        }
    }
}

attn_status attn_flash_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_params *params, attn_tensor *out, attn_tensor *lse, void *workspace,
                               size_t workspace_bytes_) {
    static const char *fn = "attn_flash_forward";
    attn_ctx c;
    attn_status st;
    float *base;
    const unsigned in_types = ATTN_TYPES(ATTN_TYPE_F32) | ATTN_TYPES(ATTN_TYPE_BF16);
    const unsigned out_types = q && q->dtype == ATTN_TYPE_BF16 ? in_types : ATTN_TYPES(ATTN_TYPE_F32);
    if ((st = attn_ctx_init_typed(&c, fn, q, k, v, params, out, "out", in_types, out_types)) ||
        (st = attn_ctx_check_rows(&c, fn, lse, "lse", 0)))
        return st;
    if (attn_flash_decode_applies(&c, k, v, needs_general_epilogue(&c))) {
        int64_t jlo, jhi;
        key_range(&c, 0, 1, &jlo, &jhi);
        return attn_flash_decode(fn, &c, q, k, v, out, lse, jlo, jhi, workspace, workspace_bytes_);
    }
    if ((st = get_bufs(fn, &c, q->dtype == ATTN_TYPE_BF16, workspace, workspace_bytes_, &base))) return st;
    if (q->dtype == ATTN_TYPE_BF16) return flash_forward_bf16(&c, q, k, v, out, lse, base);
    return flash_forward_f32(&c, q, k, v, out, lse, base);
}

/* The S^T tile of keys [j0, j0 + bj) of head (b, g) against qw (Q^T as pair words), whole (the
 * epilogue masks the band), in log2 units (qscale). kbuf: room for the keys as words. */
static void scores_tile_bf16(const attn_bf16_kernels *hk, const attn_ctx *c, int general, const attn_tensor *k,
                             int64_t b, int64_t g, int64_t h, int64_t i0, int bi, int64_t j0, int bj,
                             const uint32_t *qw, const float *sh, float *s, float *capd, float qscale, uint32_t *kbuf) {
    const uint16_t *kj = k->data16 + b * k->stride[0] + g * k->stride[1] + j0 * k->stride[2];
    const int dp = (int)((c->d + 1) / 2);
    const uint32_t *ka = kbuf;
    int64_t ars = dp;
    if (rows_are_words(k)) {
        ka = (const uint32_t *)(const void *)kj;
        ars = k->stride[2] / 2;
    } else {
        words_rows(kj, k->stride[2], k->stride[3], bj, c->d, kbuf);
    }
    hk->gemm_pairs(bj, bi, dp, ka, ars, 1, qw, BR, s, BR, 0, NULL, qscale);
    epilogue(c, general, b, h, i0, bi, j0, bj, sh, s, capd);
}

/* Wait until *x == want (an earlier key block adds its dQ share first): a short spin, then sleep
 * on a futex (Linux; elsewhere yield), so a waiting thread leaves its core to the one it waits
 * for when the machine runs more threads than cores. *sleepers counts the threads asleep, so
 * the common case wakes nobody and makes no system call. */
static void wait_turn(atomic_int *x, int want, atomic_int *sleepers) {
    for (int spins = 0;; spins++) {
        const int cur = atomic_load(x);
        if (cur == want) return;
        if (spins < 256) continue;
#ifdef __linux__
        atomic_fetch_add(sleepers, 1);
        syscall(SYS_futex, (void *)x, FUTEX_WAIT_PRIVATE, cur, NULL, NULL, 0); /* returns at once if *x != cur */
        atomic_fetch_sub(sleepers, 1);
#else
        (void)sleepers;
        sched_yield();
#endif
    }
}

static void post_turn(atomic_int *x, int value, atomic_int *sleepers) {
    atomic_store(x, value);
#ifdef __linux__
    if (atomic_load(sleepers) > 0) syscall(SYS_futex, (void *)x, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
#else
    (void)sleepers;
#endif
}

/* Key blocks [*kb0, *kb1) that query block qb visits (exactly the forward's tiles). */
static void key_blocks(const attn_ctx *c, int64_t qb, int64_t *kb0, int64_t *kb1) {
    int64_t jlo, jhi;
    const int64_t i0 = qb * BR, i1 = i0 + BR < c->nq ? i0 + BR : c->nq;
    key_range(c, i0, i1, &jlo, &jhi);
    *kb0 = jlo / BC;
    *kb1 = jhi > jlo ? ceil_div(jhi, BC) : *kb0;
}

static _Atomic int64_t forced_key_run;
void attn__flash_key_run_force(int64_t blocks) { atomic_store(&forced_key_run, blocks); }

int64_t attn_flash_key_run_blocks(int64_t d, int64_t dv, int kv_bytes, int64_t l2) {
    const int64_t per = (int64_t)BC * (d + dv) * kv_bytes;
    return per > 0 && l2 / per > 1 ? l2 / per : 1;
}

int64_t attn_flash_backward_key_blocks(int64_t d, int64_t dv, attn_type kv_type) {
    const size_t bytes = attn_type_size(kv_type);
    if (d < 1 || dv < 1 || bytes == 0 || d > INT32_MAX || dv > INT32_MAX) return 0;
    return attn_flash_key_run_blocks(d, dv, (int)bytes, attn_cpu_caches()->l2);
}

/* One backward call's arguments and what is derived from them once, shared by its passes. */
typedef struct bwd_job {
    const attn_ctx *c;
    const attn_tensor *q, *k, *v, *out, *dout, *lse;
    attn_tensor *dq, *dk, *dv;
    const attn_flash_kernels *kr;
    const attn_bf16_kernels *hk;
    flash_rows rs;
    int bf, general, part, k_inplace, dpv;
    float qscale;
    int64_t nqb, nkb;
    atomic_int *sleepers;
} bwd_job;

/* Pass 1 for one (batch, query head, query block): the row statistics (shift, lse split into
 * m + ll, D_i), dQ zeroed, the block's dQ counter reset. */
static void backward_row_stats(const bwd_job *J, const flash_bufs *wp, int64_t t) {
    const attn_ctx *cp = J->c;
    const attn_tensor *q = J->q, *k = J->k, *out = J->out, *dout = J->dout, *lse = J->lse;
    const attn_flash_kernels *kr = J->kr;
    const flash_bufs w = *wp;
    const flash_rows rs = J->rs;
    const int bf = J->bf, general = J->general;
    const int64_t nqb = J->nqb;
    const int64_t bh = t / nqb, qb = t % nqb, h = bh % cp->hq, b = bh / cp->hq, g = h / cp->group;
    const int64_t i0 = qb * BR, row0 = bh * cp->nq + i0;
    const int bi = (int)(cp->nq - i0 < BR ? cp->nq - i0 : BR);
    const int64_t qoff = b * q->stride[0] + h * q->stride[1] + i0 * q->stride[2];
    const int64_t goff = b * dout->stride[0] + h * dout->stride[1] + i0 * dout->stride[2];
    const int64_t ooff = b * out->stride[0] + h * out->stride[1] + i0 * out->stride[2];
    float *m = rs.m + row0, *ll = rs.ll + row0, *sh = rs.sh + row0;
    if (bf) {
        for (int r = 0; r < bi; r++)
            for (int64_t x = 0; x < cp->dv; x++)
                w.dop[r * cp->dv + x] = attn_bf16_f(dout->data16[goff + r * dout->stride[2] + x * dout->stride[3]]);
    } else {
        pack_rows(kr, dout->data + goff, dout->stride[2], dout->stride[3], bi, cp->dv, w.dop);
    }
    row_shifts(cp, general, b, h, i0, bi, sh);
    int large = 0; /* a row whose |lse| float cannot carry to 1e-7 of its probabilities */
    for (int r = 0; r < bi; r++) {
        const double lv = lse->data[b * lse->stride[0] + h * lse->stride[1] + (i0 + r) * lse->stride[2]];
        /* P = exp2((s - m) - ll): m the row's log2-unit lse relative to its shift */
        m[r] = lv == -INFINITY ? -INFINITY : (float)(lv * LOG2E - sh[r]);
        ll[r] = 0.0f;
        large |= !J->part && lv != -INFINITY && fabs(lv) > 64.0;
        double dsum = 0;
        for (int64_t x = 0; x < cp->dv; x++) {
            const int64_t e = ooff + r * out->stride[2] + x * out->stride[3];
            dsum += (double)w.dop[r * cp->dv + x] *
                    (out->dtype == ATTN_TYPE_BF16 ? attn_bf16_f(out->data16[e]) : out->data[e]);
        }
        rs.dsum[row0 + r] = (float)dsum; /* D_i */
    }
    if (large) {
        /* Recompute the forward's running max and sum exactly (same tiles, same kernels, same
         * order), so P = exp2((s - max) - log2(sum)) keeps full accuracy where the float lse has
         * lost it (logits ~1e4). Costs one extra S^T pass, only for such blocks. */
        const float *kh = bf ? NULL : k->data + b * k->stride[0] + g * k->stride[1];
        int64_t jlo, jhi;
        key_range(cp, i0, i0 + bi, &jlo, &jhi);
        if (bf)
            words_rows_t(kr, rows_are_words(q), q->data16 + qoff, q->stride[2], q->stride[3], bi, cp->d,
                         (uint32_t *)(void *)w.qt);
        else
            pack_transposed(kr, q->data + qoff, q->stride[2], q->stride[3], bi, cp->d, J->qscale, w.qt);
        for (int r = 0; r < bi; r++) {
            m[r] = -INFINITY;
            w.l[r] = 0.0f;
        }
        for (int64_t j0 = jlo / BC * BC; j0 < jhi; j0 += BC) {
            const int bj = (int)(cp->nk - j0 < BC ? cp->nk - j0 : BC);
            int banded;
            if (bf)
                scores_tile_bf16(J->hk, cp, general, k, b, g, h, i0, bi, j0, bj, (const uint32_t *)(void *)w.qt, sh,
                                 w.s, NULL, J->qscale, (uint32_t *)(void *)w.kp);
            else
                scores_tile(kr, cp, general, kh, k, b, h, i0, bi, j0, bj, w.qt, sh, w.s, NULL, NULL, &banded, NULL,
                            NULL);
            (bf ? kr->softmax_update_bf16 : kr->softmax_update)(bj, bi, w.s, BR, m, w.l, w.alpha, NULL);
        }
        for (int r = 0; r < bi; r++) ll[r] = w.l[r] > 0 ? (float)log2((double)w.l[r]) : 0.0f;
    }
    if (J->dq) {
        attn_tensor *dq = J->dq;
        float *dqi = dq->data + b * dq->stride[0] + h * dq->stride[1] + i0 * dq->stride[2];
        for (int r = 0; r < bi; r++)
            for (int64_t x = 0; x < cp->d; x++) dqi[r * dq->stride[2] + x * dq->stride[3]] = 0.0f;
    }
    atomic_store_explicit(rs.done + bh * nqb + qb, 0, memory_order_relaxed);
}

/* One query block's rows as the fp32 tiles read them (qt/dot transposed and scaled; Q and dO rows
 * in place where they have unit stride, else packed), or as bf16 pair words. */
typedef struct bwd_rows {
    const float *q, *dout;
    int64_t ldq, lddo;
} bwd_rows;

/* Slot t's words in the bf16 backward's buffers: a block's D-long rows transposed into pair words
 * ((D + 1) / 2 rows of BR, qt and dot), or paired along the queries (BR / 2 rows of D, qp and
 * dop). */
static uint32_t *bwd_slot_t(float *buf, int t, int64_t D) { return (uint32_t *)(void *)buf + t * ((D + 1) / 2) * BR; }
static uint32_t *bwd_slot_pairs(float *buf, int t, int64_t D) { return (uint32_t *)(void *)buf + t * (BR / 2) * D; }

/* A query block's operands: fp32 (slot 0 only) Q^T, dO^T, and Q and dO rows; bf16 into slot t
 * (bwd_qslot): Q^T and dO^T as B words over d / dv, Q and dO rows paired. */
static bwd_rows backward_pack_block(const bwd_job *J, const flash_bufs *w, int t, int64_t qoff, int64_t goff, int bi) {
    const attn_tensor *q = J->q, *dout = J->dout;
    const attn_flash_kernels *kr = J->kr;
    const int64_t d = J->c->d, dv = J->c->dv;
    bwd_rows r = {w->qp, w->dop, d, dv};
    if (J->bf) {
        words_rows_t(kr, rows_are_words(q), q->data16 + qoff, q->stride[2], q->stride[3], bi, d,
                     bwd_slot_t(w->qt, t, d));
        words_rows_t(kr, rows_are_words(dout), dout->data16 + goff, dout->stride[2], dout->stride[3], bi, dv,
                     bwd_slot_t(w->dot, t, dv));
        words_vnni(J->hk, q->data16 + qoff, q->stride[2], q->stride[3], bi, d, bwd_slot_pairs(w->qp, t, d));
        words_vnni(J->hk, dout->data16 + goff, dout->stride[2], dout->stride[3], bi, dv, bwd_slot_pairs(w->dop, t, dv));
        return r;
    }
    const float *qi = q->data + qoff, *goi = dout->data + goff;
    pack_transposed(kr, qi, q->stride[2], q->stride[3], bi, d, J->qscale, w->qt);
    pack_transposed(kr, goi, dout->stride[2], dout->stride[3], bi, dv, 1.0f, w->dot);
    if (q->stride[3] == 1) {
        r.q = qi;
        r.ldq = q->stride[2];
    } else {
        pack_rows(kr, qi, q->stride[2], q->stride[3], bi, d, w->qp);
    }
    if (dout->stride[3] == 1) {
        r.dout = goi;
        r.lddo = dout->stride[2];
    } else {
        pack_rows(kr, goi, dout->stride[2], dout->stride[3], bi, dv, w->dop);
    }
    return r;
}

/* The fp32 backward of one tile (query rows i0 .. i0 + bi of head h, keys j0 .. j0 + bj of kv head
 * g): dV_j += P^T dO, dK_j += dS^T Q, and (acc not NULL) dQ_i += dS K_j. On tiles the band crosses,
 * every product runs over the band only: outside it P and dS are exactly 0 (probs_and_ds zeroes dS
 * wherever P is 0). */
static void backward_tile_f32(const bwd_job *J, const flash_bufs *wp, const bwd_rows *qr, int64_t b, int64_t g,
                              int64_t h, int64_t i0, int bi, int64_t j0, int bj, int64_t row0, float *dkj, float *dvj,
                              float *acc, int64_t lda) {
    const attn_ctx *cp = J->c;
    const attn_tensor *k = J->k, *v = J->v;
    const attn_flash_kernels *kr = J->kr;
    const flash_bufs w = *wp;
    const float *kh = k->data + b * k->stride[0] + g * k->stride[1];
    const float *kj = kh + j0 * k->stride[2];
    const float *vj = v->data + b * v->stride[0] + g * v->stride[1] + j0 * v->stride[2];
    const float *sh = J->rs.sh + row0;
    int banded;
    scores_tile(kr, cp, J->general, kh, k, b, h, i0, bi, j0, bj, w.qt, sh, w.s, w.capd, NULL, &banded, NULL, NULL);
    for (int r0 = 0; r0 < bj; r0 += banded ? 4 : bj) {
        const int rows = banded ? (bj - r0 < 4 ? bj - r0 : 4) : bj;
        int qa = 0, qe = bi;
        if (banded) band_cols(cp, i0, bi, j0, r0, rows, &qa, &qe);
        if (qa < qe)
            kr->gemm(rows, qe - qa, (int)cp->dv, vj + r0 * v->stride[2], v->stride[2], v->stride[3], w.dot + qa, BR,
                     w.dp + r0 * BR + qa, BR, 0, NULL, NULL);
    }
    if (cp->p > 0) apply_dropout(kr, cp, b, h, i0, bi, j0, bj, w.dp, w.colbase);
    kr->probs_and_ds(bj, bi, w.s, w.dp, w.ds, BR, J->rs.m + row0, J->rs.ll + row0, J->rs.dsum + row0, (float)cp->scale);
    if (J->general && cp->softcap > 0)
        for (int r = 0; r < bj; r++)
            for (int x = 0; x < bi; x++) /* capd is only written where allowed */
                if (w.ds[r * BR + x] != 0) w.ds[r * BR + x] *= w.capd[r * BR + x];
    if (cp->p > 0) apply_dropout(kr, cp, b, h, i0, bi, j0, bj, w.s, w.colbase);
    const int64_t lddk = J->dk->stride[2], lddv = J->dv->stride[2];
    for (int r0 = 0; r0 < bj; r0 += banded ? 4 : bj) {
        const int rows = banded ? (bj - r0 < 4 ? bj - r0 : 4) : bj;
        int qa = 0, qe = bi;
        if (banded) band_cols(cp, i0, bi, j0, r0, rows, &qa, &qe);
        if (qa >= qe) continue;
        kr->gemm(rows, (int)cp->dv, qe - qa, w.s + r0 * BR + qa, BR, 1, qr->dout + qa * qr->lddo, qr->lddo,
                 dvj + r0 * lddv, lddv, 1, NULL, NULL);
        kr->gemm(rows, (int)cp->d, qe - qa, w.ds + r0 * BR + qa, BR, 1, qr->q + qa * qr->ldq, qr->ldq, dkj + r0 * lddk,
                 lddk, 1, NULL, NULL);
    }
    if (!acc) return;
    const float *kbp = kj;
    int64_t ldk = k->stride[2];
    if (!J->k_inplace) {
        pack_rows(kr, kj, k->stride[2], k->stride[3], bj, cp->d, w.kp);
        kbp = w.kp;
        ldk = cp->d;
    }
    for (int q0 = 0; q0 < bi; q0 += banded ? 4 : bi) {
        const int cols = banded ? (bi - q0 < 4 ? bi - q0 : 4) : bi;
        int ra = 0, rb = bj;
        if (banded) band_rows(cp, i0, q0, cols, j0, bj, &ra, &rb);
        if (ra >= rb) continue;
        kr->gemm(cols, (int)cp->d, rb - ra, w.ds + ra * BR + q0, 1, BR, kbp + ra * ldk, ldk, acc + q0 * lda, lda, 1,
                 NULL, NULL);
    }
}

/* Does the bf16 backward form P and dS straight into pair words (probs_ds_pairs)? Else they go
 * through float tiles, dS's key pairs into dP's room. */
static int bf16_bwd_fused(const attn_bf16_kernels *hk, const attn_flash_kernels *kr, const attn_ctx *c, int general) {
    return hk->probs_ds_pairs && bf16_fuses(hk, kr) && c->p == 0 && !(general && c->softcap > 0);
}

/* One query block of the backward (the fp32 path's alone, or one of the bf16 path's group,
 * bf16_backward_group) in slot t of the packed buffers: Q^T and dO^T words at bwd_slot_t, Q and dO
 * paired at bwd_slot_pairs, P and dS words at column t BR / 2 of w1 / w2, dS's key pairs for dQ
 * at t DQ_TILES BC / 2 BR words of w->ds. */
typedef struct bwd_qslot {
    int64_t h, i0, row0, ka, ke, kb0;
    int bi, pend;     /* pend: first key position whose dS words wait for the dQ product, -1 none */
    float *acc, *dqi; /* dQ's rows (acc: dqi or w->acc's copy of them), NULL without dQ */
    int64_t lda;
    atomic_int *done;
} bwd_qslot;

/* One tile of the bf16 backward (keys [j0, j0 + bj) against slot t's query block): S^T and dP^T
 * from pair products, then P and dS rounded to bf16 into their words (w1, w2: rows over the
 * queries, row stride BR); with want_dq, dS's rows paired over the keys into dsv (fused path) or
 * dP's room. Returns where those went. Whole tiles: outside the band P and dS are exactly 0. */
static uint32_t *bf16_backward_tile(const bwd_job *J, const flash_bufs *w, int t, const bwd_qslot *sl, int64_t b,
                                    int64_t g, int64_t j0, int bj, int want_dq, uint32_t *dsv) {
    const attn_ctx *c = J->c;
    const attn_bf16_kernels *hk = J->hk;
    const attn_tensor *v = J->v;
    const flash_rows rs = J->rs;
    const int bi = sl->bi, general = J->general;
    const int64_t row0 = sl->row0;
    uint32_t *qw = bwd_slot_t(w->qt, t, c->d), *dow = bwd_slot_t(w->dot, t, c->dv),
             *w1 = (uint32_t *)(void *)w->w1 + t * (BR / 2), *w2 = (uint32_t *)(void *)w->w2 + t * (BR / 2),
             *vbuf = (uint32_t *)(void *)w->vp;
    scores_tile_bf16(hk, c, general, J->k, b, g, sl->h, sl->i0, bi, j0, bj, qw, rs.sh + row0, w->s, w->capd, J->qscale,
                     (uint32_t *)(void *)w->kp);
    const uint16_t *vj = v->data16 + b * v->stride[0] + g * v->stride[1] + j0 * v->stride[2];
    const uint32_t *va = vbuf;
    int64_t vars = J->dpv;
    if (rows_are_words(v)) {
        va = (const uint32_t *)(const void *)vj;
        vars = v->stride[2] / 2;
    } else {
        words_rows(vj, v->stride[2], v->stride[3], bj, c->dv, vbuf);
    }
    hk->gemm_pairs(bj, bi, J->dpv, va, vars, 1, dow, BR, w->dp, BR, 0, NULL, 1.0f);
    if (bf16_bwd_fused(hk, J->kr, c, general)) {
        /* P and dS straight into their words (never stored as floats here) */
        hk->probs_ds_pairs(bj, bi, w->s, w->dp, BR, rs.m + row0, rs.ll + row0, rs.dsum + row0, (float)c->scale, w1, w2,
                           BWD_WROW, want_dq ? dsv : NULL, BR);
        return want_dq ? dsv : NULL;
    }
    const attn_flash_kernels *kr = J->kr;
    if (c->p > 0) apply_dropout(kr, c, b, sl->h, sl->i0, bi, j0, bj, w->dp, w->colbase);
    kr->probs_and_ds_bf16(bj, bi, w->s, w->dp, w->ds, BR, rs.m + row0, rs.ll + row0, rs.dsum + row0, (float)c->scale);
    if (general && c->softcap > 0)
        for (int r = 0; r < bj; r++)
            for (int x = 0; x < bi; x++)
                if (w->ds[r * BR + x] != 0) w->ds[r * BR + x] *= w->capd[r * BR + x];
    if (c->p > 0) apply_dropout(kr, c, b, sl->h, sl->i0, bi, j0, bj, w->s, w->colbase);
    /* dS rows paired over the keys into dP's room: dP is dead once dS is formed */
    dsv = (uint32_t *)(void *)w->dp;
    hk->pair_tile_grads(bj, bi, w->s, w->ds, BR, w1, w2, BWD_WROW, want_dq ? dsv : NULL, BR);
    return want_dq ? dsv : NULL;
}

/* The bf16 backward of nq (1 to BWD_QBLOCKS) query blocks, packed side by side, against the key
 * blocks each of them sees (slot t: [ka, ke) of the task's run). Per key block, every slot that
 * sees it gets its tile, then one product adds all their queries to dV_j and dK_j (up to 128 pair
 * words where one block gave 32: dK_j and dV_j loaded and stored a quarter as often; the
 * reductions of 32 pair words were bound by those loads and stores). dQ_i += dS K_j: on the fused
 * path the dS words of up to DQ_TILES key blocks (aligned groups) wait in w->ds for one product
 * (dQ's rows loaded and stored once per 256 keys); otherwise tile by tile. Together 1.31x / 1.50x
 * the backward at d 64 / 128 on AMX (1 thr), 1.39-1.49x causal on 2. Each element of dK, dV and
 * dQ is the same chain, in increasing query blocks and keys, as one tile at a time would make,
 * so no bit moves. */
static void bf16_backward_group(const bwd_job *J, const flash_bufs *w, int64_t b, int64_t g, bwd_qslot *sl, int nq,
                                float *dkh, float *dvh) {
    const attn_ctx *cp = J->c;
    const attn_tensor *k = J->k;
    const int want_dq = J->dq != NULL, grouped = want_dq && bf16_bwd_fused(J->hk, J->kr, cp, J->general);
    uint32_t *kv = (uint32_t *)(void *)w->kv, *dsw = (uint32_t *)(void *)w->ds;
    int64_t lo = sl[0].ka, hi = sl[0].ke;
    for (int t = 1; t < nq; t++) {
        lo = sl[t].ka < lo ? sl[t].ka : lo;
        hi = sl[t].ke > hi ? sl[t].ke : hi;
    }
    for (int64_t kb = lo; kb < hi; kb++) {
        const int64_t j0 = kb * BC;
        const int bj = (int)(cp->nk - j0 < BC ? cp->nk - j0 : BC), pos = (int)(kb % DQ_TILES);
        uint32_t *kvp = kv + pos * (BC / 2) * cp->d;
        if (want_dq) {
            const uint16_t *kj = k->data16 + b * k->stride[0] + g * k->stride[1] + j0 * k->stride[2];
            words_vnni(J->hk, kj, k->stride[2], k->stride[3], bj, cp->d, kvp);
        }
        int seen[BWD_QBLOCKS] = {0}; /* the slots that see key block kb */
        for (int t = 0; t < nq; t++) {
            bwd_qslot *q = &sl[t];
            if (kb < q->ka || kb >= q->ke) continue;
            seen[t] = 1;
            uint32_t *own = dsw + (t * DQ_TILES + pos) * (BC / 2) * BR;
            uint32_t *d = bf16_backward_tile(J, w, t, q, b, g, j0, bj, want_dq, own);
            if (!want_dq) continue;
            if (!grouped) { /* dS's words in dP's room: added now, before the next tile */
                J->hk->gemm_pairs(q->bi, (int)cp->d, (bj + 1) / 2, d, 1, BR, kvp, cp->d, q->acc, q->lda, 1, NULL, 1.0f);
                continue;
            }
            if (q->pend < 0) q->pend = pos;
            if (pos == DQ_TILES - 1 || kb == q->ke - 1) {
                const int keys = (pos - q->pend) * BC + bj;
                J->hk->gemm_pairs(q->bi, (int)cp->d, (keys + 1) / 2, dsw + (t * DQ_TILES + q->pend) * (BC / 2) * BR, 1,
                                  BR, kv + q->pend * (BC / 2) * cp->d, cp->d, q->acc, q->lda, 1, NULL, 1.0f);
                q->pend = -1;
            }
        }
        /* dK_j and dV_j: one product per run of consecutive slots that saw kb, in slot order (all
         * but a group's last slot are whole blocks) */
        for (int t0 = 0, t1; t0 < nq; t0 = t1 + 1) {
            if (!seen[t0]) {
                t1 = t0;
                continue;
            }
            for (t1 = t0; t1 + 1 < nq && seen[t1 + 1];) t1++;
            const int kp = (t1 - t0) * (BR / 2) + (sl[t1].bi + 1) / 2;
            J->hk->gemm_pairs(bj, (int)cp->dv, kp, (uint32_t *)(void *)w->w1 + t0 * (BR / 2), BWD_WROW, 1,
                              bwd_slot_pairs(w->dop, t0, cp->dv), cp->dv, dvh + j0 * J->dv->stride[2], J->dv->stride[2],
                              1, NULL, 1.0f);
            J->hk->gemm_pairs(bj, (int)cp->d, kp, (uint32_t *)(void *)w->w2 + t0 * (BR / 2), BWD_WROW, 1,
                              bwd_slot_pairs(w->qp, t0, cp->d), cp->d, dkh + j0 * J->dk->stride[2], J->dk->stride[2], 1,
                              NULL, 1.0f);
        }
    }
}

/* Slot t for query block qb of head h, to run against key blocks [ka, ke) of the task's run: its
 * operands packed (returned for the fp32 tiles), and its turn for dQ waited for: this run's share
 * of the block's dQ is added after the runs of key blocks kb0 .. ka - 1 (the block's counter), so
 * dQ sums its key blocks in increasing order. */
static bwd_rows bwd_slot_open(const bwd_job *J, const flash_bufs *w, int t, int64_t b, int64_t h, int64_t qb,
                              int64_t kb0, int64_t ka, int64_t ke, bwd_qslot *sl) {
    const attn_ctx *cp = J->c;
    attn_tensor *dq = J->dq;
    const int64_t i0 = qb * BR, bh = b * cp->hq + h;
    sl->h = h;
    sl->i0 = i0;
    sl->row0 = bh * cp->nq + i0;
    sl->ka = ka;
    sl->ke = ke;
    sl->kb0 = kb0;
    sl->bi = (int)(cp->nq - i0 < BR ? cp->nq - i0 : BR);
    sl->pend = -1;
    const bwd_rows qr =
        backward_pack_block(J, w, t, b * J->q->stride[0] + h * J->q->stride[1] + i0 * J->q->stride[2],
                            b * J->dout->stride[0] + h * J->dout->stride[1] + i0 * J->dout->stride[2], sl->bi);
    sl->dqi = sl->acc = dq ? dq->data + b * dq->stride[0] + h * dq->stride[1] + i0 * dq->stride[2] : NULL;
    sl->lda = dq ? dq->stride[2] : 0;
    sl->done = J->rs.done + bh * J->nqb + qb;
    if (!dq) return qr;
    /* dQ_i += dS K_j, after the shares of key blocks kb0 .. ka - 1 */
    wait_turn(sl->done, (int)(ka - kb0), J->sleepers);
    if (dq->stride[3] != 1) { /* through a contiguous copy (slot 0 only): the same sums, bit for bit */
        for (int r = 0; r < sl->bi; r++)
            for (int64_t x = 0; x < cp->d; x++) w->acc[r * cp->d + x] = sl->dqi[r * dq->stride[2] + x * dq->stride[3]];
        sl->acc = w->acc;
        sl->lda = cp->d;
    }
    return qr;
}

/* dQ of slot sl back where it belongs, and the next key run's turn. */
static void bwd_slot_close(const bwd_job *J, const flash_bufs *w, const bwd_qslot *sl) {
    const attn_tensor *dq = J->dq;
    if (!dq) return;
    if (sl->acc != sl->dqi)
        for (int r = 0; r < sl->bi; r++)
            for (int64_t x = 0; x < J->c->d; x++)
                sl->dqi[r * dq->stride[2] + x * dq->stride[3]] = w->acc[r * J->c->d + x];
    post_turn(sl->done, (int)(sl->ke - sl->kb0), J->sleepers);
}

/* The group's products, then each slot's dQ back and the next run's turn. */
static void bf16_backward_flush(const bwd_job *J, const flash_bufs *w, int64_t b, int64_t g, bwd_qslot *sl, int nq,
                                float *dkh, float *dvh) {
    bf16_backward_group(J, w, b, g, sl, nq, dkh, dvh);
    for (int t = 0; t < nq; t++) bwd_slot_close(J, w, &sl[t]);
}

/* The fp32 backward of one query block against key blocks [ka, ke) of the task's run. */
static void backward_query_block(const bwd_job *J, const flash_bufs *w, int64_t b, int64_t g, int64_t h, int64_t qb,
                                 int64_t kb0, int64_t ka, int64_t ke, float *dkh, float *dvh) {
    bwd_qslot sl;
    const bwd_rows qr = bwd_slot_open(J, w, 0, b, h, qb, kb0, ka, ke, &sl);
    for (int64_t kb = ka; kb < ke; kb++) {
        const int64_t j0 = kb * BC;
        const int bj = (int)(J->c->nk - j0 < BC ? J->c->nk - j0 : BC);
        backward_tile_f32(J, w, &qr, b, g, h, sl.i0, sl.bi, j0, bj, sl.row0, dkh + j0 * J->dk->stride[2],
                          dvh + j0 * J->dv->stride[2], sl.acc, sl.lda);
    }
    bwd_slot_close(J, w, &sl);
}

/* Pass 2 for one task: kv head g of batch b, key blocks [kbs, kbe). The task owns dK and dV of its
 * keys and walks the group's query heads and the query blocks that see them in a fixed order. */
static void backward_kv_task(const bwd_job *J, const flash_bufs *w, int64_t b, int64_t g, int64_t kbs, int64_t kbe) {
    const attn_ctx *cp = J->c;
    float *dkh = J->dk->data + b * J->dk->stride[0] + g * J->dk->stride[1];
    float *dvh = J->dv->data + b * J->dv->stride[0] + g * J->dv->stride[1];
    for (int64_t j = kbs * BC; j < cp->nk && j < kbe * BC; j++) {
        memset(dkh + j * J->dk->stride[2], 0, sizeof(float) * (size_t)cp->d);
        memset(dvh + j * J->dv->stride[2], 0, sizeof(float) * (size_t)cp->dv);
    }
    /* bf16: up to BWD_QBLOCKS query blocks at once while each but the last is whole (and dQ, if
     * any, has unit stride: only slot 0 may go through w->acc's copy) */
    const int group = J->bf && (!J->dq || J->dq->stride[3] == 1);
    bwd_qslot sl[BWD_QBLOCKS];
    int nq = 0;
    for (int64_t h = g * cp->group; h < (g + 1) * cp->group; h++)
        for (int64_t qb = 0; qb < J->nqb; qb++) {
            int64_t kb0, kb1;
            key_blocks(cp, qb, &kb0, &kb1);
            const int64_t ka = kbs > kb0 ? kbs : kb0, ke = kbe < kb1 ? kbe : kb1;
            if (ka >= ke) continue;
            if (!J->bf) {
                backward_query_block(J, w, b, g, h, qb, kb0, ka, ke, dkh, dvh);
                continue;
            }
            bwd_slot_open(J, w, nq, b, h, qb, kb0, ka, ke, &sl[nq]);
            nq++;
            if (nq < BWD_QBLOCKS && group && sl[nq - 1].bi == BR) continue;
            bf16_backward_flush(J, w, b, g, sl, nq, dkh, dvh);
            nq = 0;
        }
    if (nq) bf16_backward_flush(J, w, b, g, sl, nq, dkh, dvh);
}

/* Key blocks per pass-2 task. kc sets only the granularity, never a bit of the results, so it
 * follows the machine: at most the run whose K and V fit the L2 (attn_flash_key_run_blocks), and
 * about 4 tasks per thread when the heads alone cannot give every thread two. */
static int64_t backward_key_run(const attn_ctx *c, int bf, int64_t nkb, int few_heads, int64_t bgs, int64_t nthreads) {
    int64_t kc = few_heads ? ceil_div(bgs * nkb, 4 * nthreads) : nkb;
    const int64_t kc_l2 = attn_flash_key_run_blocks(c->d, c->dv, bf ? 2 : 4, attn_cpu_caches()->l2);
    const int64_t kc_forced = atomic_load(&forced_key_run);
    kc = kc > kc_l2 ? kc_l2 : kc;
    kc = kc_forced > 0 ? kc_forced : kc;
    kc = kc > nkb ? nkb : kc;
    return kc < 1 ? 1 : kc;
}

/* The backward's own arguments beyond the forward's (attn_ctx_init_typed checked those). */
static attn_status backward_check(const char *fn, attn_ctx *c, const attn_tensor *q, const attn_tensor *k,
                                  const attn_tensor *v, const attn_sdpa_params *params, const attn_tensor *out,
                                  const attn_tensor *dout, const attn_tensor *lse, const attn_tensor *dq,
                                  const attn_tensor *dk, const attn_tensor *dv) {
    attn_status st;
    const int bf = q && q->dtype == ATTN_TYPE_BF16; /* bf16 q, k, v, dout; out f32 or bf16 */
    const unsigned f32t = ATTN_TYPES(ATTN_TYPE_F32), bft = ATTN_TYPES(ATTN_TYPE_BF16);
    if ((st = attn_ctx_init_typed(c, fn, q, k, v, params, dout, "dout", f32t | bft, bf ? bft : f32t)) ||
        (st = attn_ctx_check_like_typed(fn, out, "out", dout, bf ? f32t | bft : f32t)) ||
        (st = attn_ctx_check_like(fn, dq, "dq", q)) || (st = attn_ctx_check_like(fn, dk, "dk", k)) ||
        (st = attn_ctx_check_like(fn, dv, "dv", v)))
        return st;
    if (!out || !lse || !dk || !dv)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: out, lse, dk and dv are required (out %p, lse %p, dk %p, dv %p)", fn, (const void *)out,
                          (const void *)lse, (const void *)dk, (const void *)dv);
    if ((st = attn_ctx_check_rows(c, fn, lse, "lse", 0))) return st;
    if (dk->stride[3] != 1 || dv->stride[3] != 1)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: dk and dv need unit innermost stride (got %lld and %lld)", fn,
                          (long long)dk->stride[3], (long long)dv->stride[3]);
    return ATTN_OK;
}

/* part: out and lse belong to a softmax over a wider key set than this call's (one pass of a split
 * softmax), so P = exp(s - lse) is taken as given: rows of large |lse| are never renormalised over
 * this call's own keys.
 *
 * Pass 1, one task per (batch, query head, query block): row statistics. Pass 2, one task per
 * (batch, key/value head, run of kc key blocks): dK, dV and the shares of dQ; each query block is
 * packed once for its kc key blocks; its share of each dQ block is added after the earlier runs'
 * (a per-block counter of key blocks added), so every dQ element sums its key blocks in increasing
 * order whatever kc and the thread count. A task waits only on tasks taken before it, so the
 * earliest unfinished task always runs. Runs are taken run-major when there are heads enough
 * (threads on different heads seldom wait), else head-major. */
static attn_status flash_backward(const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                  const attn_sdpa_params *params, const attn_tensor *out, const attn_tensor *dout,
                                  const attn_tensor *lse, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                  void *workspace, size_t workspace_bytes_, int part) {
    attn_ctx c;
    attn_status st;
    float *base;
    if ((st = backward_check(fn, &c, q, k, v, params, out, dout, lse, dq, dk, dv))) return st;
    const int bf = q->dtype == ATTN_TYPE_BF16;
    if ((st = get_bufs(fn, &c, bf, workspace, workspace_bytes_, &base))) return st;
    atomic_int sleepers;
    atomic_init(&sleepers, 0);
    bwd_job J = {.c = &c,
                 .q = q,
                 .k = k,
                 .v = v,
                 .out = out,
                 .dout = dout,
                 .lse = lse,
                 .dq = dq,
                 .dk = dk,
                 .dv = dv,
                 .kr = flash_kernels(),
                 .hk = attn_bf16_kernels_active(),
                 .rs = backward_rows(&c, base),
                 .bf = bf,
                 .general = needs_general_epilogue(&c),
                 .part = part,
                 .k_inplace = k->stride[3] == 1,
                 .dpv = (int)((c.dv + 1) / 2),
                 .nqb = ceil_div(c.nq, BR),
                 .nkb = ceil_div(c.nk, BC),
                 .sleepers = &sleepers};
    J.qscale = (float)(J.general ? c.scale : c.scale * LOG2E);

    const int64_t rtasks = c.b * c.hq * J.nqb;
#pragma omp parallel num_threads(attn_threads_for(rtasks))
    {
        flash_bufs w = thread_bufs(&c, base);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < rtasks; t++) backward_row_stats(&J, &w, t);
    }

    const int64_t bgs = c.b * c.hk, nthreads = attn_threads_for(bgs * J.nkb);
    const int few_heads = nthreads > 1 && bgs < 2 * nthreads;
    const int64_t kc = backward_key_run(&c, bf, J.nkb, few_heads, bgs, nthreads);
    const int64_t nchunk = ceil_div(J.nkb, kc), tasks = bgs * nchunk;
    atomic_llong next;
    atomic_init(&next, 0);
#pragma omp parallel num_threads(attn_threads_for(tasks))
    {
        flash_bufs w = thread_bufs(&c, base);
        for (;;) {
            const int64_t t = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
            if (t >= tasks) break;
            const int64_t bg = few_heads ? t / nchunk : t % bgs;
            const int64_t kbs = (few_heads ? t % nchunk : t / bgs) * kc;
            backward_kv_task(&J, &w, bg / c.hk, bg % c.hk, kbs, kbs + kc < J.nkb ? kbs + kc : J.nkb);
        }
    }
    return ATTN_OK;
}

attn_status attn_flash_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const attn_sdpa_params *params, const attn_tensor *out, const attn_tensor *dout,
                                const attn_tensor *lse, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                void *workspace, size_t workspace_bytes_) {
    return flash_backward("attn_flash_backward", q, k, v, params, out, dout, lse, dq, dk, dv, workspace,
                          workspace_bytes_, 0);
}

attn_status attn_flash_backward_part(const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                     const attn_sdpa_params *params, const attn_tensor *out, const attn_tensor *dout,
                                     const attn_tensor *lse, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                     void *workspace, size_t workspace_bytes_) {
    return flash_backward(fn, q, k, v, params, out, dout, lse, dq, dk, dv, workspace, workspace_bytes_, 1);
}

/* Logit (i, j) in double, -inf when masked. */
static double exact_logit(const attn_ctx *c, const attn_tensor *q, const attn_tensor *k, int64_t b, int64_t h,
                          int64_t i, int64_t j) {
    if (!attn_ctx_allowed(c, b, h, i, j)) return -INFINITY;
    const float *qi = q->data + b * q->stride[0] + h * q->stride[1] + i * q->stride[2];
    const float *kj = k->data + b * k->stride[0] + (h / c->group) * k->stride[1] + j * k->stride[2];
    double x = 0;
    for (int64_t t = 0; t < c->d; t++) x += (double)qi[t * q->stride[3]] * kj[t * k->stride[3]];
    x *= c->scale;
    if (c->softcap > 0) x = c->softcap * tanh(x / c->softcap);
    return x + attn_ctx_bias(c, b, h, i, j);
}

attn_status attn_flash_weights(const attn_tensor *q, const attn_tensor *k, const attn_sdpa_params *params, int64_t b,
                               int64_t h, int64_t row0, int64_t rows, int apply_dropout_, float *weights) {
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
        int poisoned = 0;
        for (int64_t j = 0; j < c.nk; j++) {
            const double s = exact_logit(&c, q, k, b, h, i, j);
            if (s == -INFINITY) continue;
            /* as torch.softmax: a NaN or +Inf logit makes the whole row NaN (exp(inf - inf)), which a
             * row of NaN logits would otherwise skip as if masked, giving zeros */
            poisoned |= isnan(s) || s == INFINITY;
            if (s > mx) {
                sum = sum * exp(mx - s) + 1.0;
                mx = s;
            } else {
                sum += exp(s - mx);
            }
        }
        const double lse = mx == -INFINITY ? -INFINITY : mx + log(sum);
        for (int64_t j = 0; j < c.nk; j++) {
            if (poisoned) {
                weights[r * c.nk + j] = NAN;
                continue;
            }
            const double s = lse == -INFINITY ? -INFINITY : exact_logit(&c, q, k, b, h, i, j);
            double p = s == -INFINITY ? 0.0 : exp(s - lse);
            if (apply_dropout_ && p != 0) p *= attn_ctx_keep(&c, b, h, i, j);
            weights[r * c.nk + j] = (float)p;
        }
    }
    return ATTN_OK;
}
