/* Local + global attention (Longformer) on the flash kernel; the contract is in attn/longformer.h.
 *
 * Per batch b the global positions are gathered, pos[b][0 .. g_b), and padded to G = max_b g_b.
 * Forward, for the rows of every query (local rows keep the result; global rows are redone):
 *   pass 1: flash over all keys, window w (and causality, key mask)        -> O1, l1
 *   pass 2: flash over the gathered global keys Kg [B, Hk, G, d], with the boolean mask
 *           M2[b, i, t] = t < g_b, key pos[t] real, causal-allowed and OUTSIDE query i's window
 *           (the keys inside it are pass 1's)                              -> O2, l2
 *   merge:  O = (e^l1 O1 + e^l2 O2) / (e^l1 + e^l2), lse = logaddexp(l1, l2)
 *   pass 3: the global rows Qg [B, H, G, d] over all keys (key mask; causality through the mask
 *           M3[b, t, j] = j <= pos[t]) -> their rows of O and lse, scattered.
 * Backward: with P_ij = exp(s_ij - lse_i) of the merged row and D_i = rowsum(dO_i * O_i), each
 * pass's flash backward (attn_flash_backward_part: out and lse given, never renormalised) yields
 * exactly its keys' share of dQ, dK, dV. Passes 1 and 2 see dO with the global rows zeroed (those
 * rows are pass 3's); pass 3 runs with the global rows' own out and lse. dQ = dQ1 + dQ2 on local
 * rows and dQ3 on global rows; dK = dK1 + dK3 + scatter(dKg), dV likewise.
 * Every buffer is O(N (d + G)); the work is O(N (w + G) d). All loops are split into tasks that
 * own their outputs, so results do not depend on the thread count. */
#include <math.h>
#include <string.h>

#include "attention_common.h"
#include "attn/longformer.h"
#include "core/internal.h"
#include "flash_internal.h"

typedef struct lg_plan {
    int64_t B, H, Hk, N, d, dv, G, w;
    int causal;
    const uint8_t *gm, *km; /* [B, N], strides gms / kms */
    int64_t gms[2], kms[2];
} lg_plan;

/* ---- validation ---- */

static attn_status check_mask2(const char *fn, const char *name, const attn_btensor *m, int64_t B, int64_t N,
                               const uint8_t **data, int64_t *st) {
    if (!m) return ATTN_OK;
    if (m->rank != 2 || m->shape[0] != B || m->shape[1] != N) {
        char s[96];
        return attn_error(ATTN_ERR_SHAPE, "%s: %s must be [B, N] = [%lld, %lld], got %s", fn, name, (long long)B,
                          (long long)N,
                          attn_shape_str(m->shape, m->rank < 0 || m->rank > 4 ? 0 : m->rank, s, sizeof s));
    }
    if (B * N > 0 && !m->data) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s->data is NULL", fn, name);
    *data = m->data;
    st[0] = m->stride[0];
    st[1] = m->stride[1];
    return ATTN_OK;
}

/* Shapes and params (the flash passes check the rest); G from the global mask when count_g. */
static attn_status plan_init(const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_longformer_params *p, int count_g, lg_plan *pl) {
    char a[96], b[96];
    memset(pl, 0, sizeof *pl);
    if (!q || !k || !v || !p)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: q, k, v and params are required (q %p, k %p, v %p, params %p)", fn, (const void *)q,
                          (const void *)k, (const void *)v, (const void *)p);
    if (q->rank != 4 || k->rank != 4 || v->rank != 4)
        return attn_error(ATTN_ERR_SHAPE, "%s: q, k and v must have rank 4 (got %d, %d, %d)", fn, q->rank, k->rank,
                          v->rank);
    if (k->shape[2] != q->shape[2] || k->shape[0] != q->shape[0])
        return attn_error(ATTN_ERR_SHAPE,
                          "%s: local + global attention is self-attention: k %s must have q's batch and N (q %s)", fn,
                          attn_shape_str(k->shape, 4, a, sizeof a), attn_shape_str(q->shape, 4, b, sizeof b));
    if (p->window < 0 || p->window > ((int64_t)1 << 40))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: window must be in [0, 2^40] (got %lld)", fn,
                          (long long)p->window);
    pl->B = q->shape[0];
    pl->H = q->shape[1];
    pl->N = q->shape[2];
    pl->d = q->shape[3];
    pl->Hk = k->shape[1];
    pl->dv = v->shape[3];
    pl->w = p->window;
    pl->causal = p->causal != 0;
    if (pl->B < 0 || pl->N < 0 || pl->H < 1 || pl->Hk < 1 || pl->d < 1 || pl->dv < 1)
        return attn_error(ATTN_ERR_SHAPE, "%s: invalid shapes q %s, v %s", fn, attn_shape_str(q->shape, 4, a, sizeof a),
                          attn_shape_str(v->shape, 4, b, sizeof b));
    attn_status st;
    if ((st = check_mask2(fn, "global_mask", p->global_mask, pl->B, pl->N, &pl->gm, pl->gms)) ||
        (st = check_mask2(fn, "key_mask", p->key_mask, pl->B, pl->N, &pl->km, pl->kms)))
        return st;
    if (pl->gm && count_g)
        for (int64_t bb = 0; bb < pl->B; bb++) {
            int64_t n = 0;
            for (int64_t i = 0; i < pl->N; i++) n += pl->gm[bb * pl->gms[0] + i * pl->gms[1]] != 0;
            if (n > pl->G) pl->G = n;
        }
    return ATTN_OK;
}

static int is_global(const lg_plan *pl, int64_t b, int64_t i) {
    return pl->gm && pl->gm[b * pl->gms[0] + i * pl->gms[1]];
}
static int key_real(const lg_plan *pl, int64_t b, int64_t j) {
    return !pl->km || pl->km[b * pl->kms[0] + j * pl->kms[1]];
}

/* ---- workspace ---- */

typedef struct lg_bufs {
    int64_t *pos, *cnt;           /* [B, G], [B] */
    float *kg, *vg;               /* [B, Hk, G, d | dv] */
    uint8_t *m2, *m3;             /* [B, N, G], [B, G, N] (m3 used only when causal) */
    float *qg, *og, *lg;          /* [B, H, G, d | dv], [B, H, G] */
    float *o2, *l1, *l2;          /* forward: [B, H, N, dv], [B, H, N] x 2 */
    float *dol, *dq2, *dog, *dqg; /* backward: [B, H, N, dv | d], [B, H, G, dv | d] */
    float *dkg, *dvg, *dk3, *dv3; /* backward: [B, Hk, G, d | dv], [B, Hk, N, d | dv] */
    void *flash;
    size_t flash_bytes;
} lg_bufs;

typedef struct lg_arena {
    char *base;
    size_t off;
    int overflow;
} lg_arena;

static void *take(lg_arena *a, int64_t n0, int64_t n1, int64_t n2, size_t elem) {
    size_t n = elem, o = (a->off + 63) & ~(size_t)63;
    if (attn_mul_overflow(n, (size_t)n0, &n) || attn_mul_overflow(n, (size_t)n1, &n) ||
        attn_mul_overflow(n, (size_t)n2, &n) || attn_add_overflow(o, n, &a->off))
        a->overflow = 1;
    return a->base && !a->overflow ? a->base + o : NULL;
}

/* Lays out the buffers (base NULL: only sizes) and returns the bytes used, SIZE_MAX on overflow.
 * The forward's and backward's buffers share the space after the common ones. */
static size_t layout(const lg_plan *pl, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, char *base,
                     lg_bufs *bb) {
    const int64_t B = pl->B, H = pl->H, Hk = pl->Hk, N = pl->N, G = pl->G, d = pl->d, dv = pl->dv;
    lg_arena a = {base, 0, 0};
    memset(bb, 0, sizeof *bb);
    if (G > 0) {
        bb->pos = take(&a, B, G, 1, sizeof(int64_t));
        bb->cnt = take(&a, B, 1, 1, sizeof(int64_t));
        bb->kg = take(&a, B * Hk, G, d, sizeof(float));
        bb->vg = take(&a, B * Hk, G, dv, sizeof(float));
        bb->m2 = take(&a, B, N, G, 1);
        /* reserved whether or not the call is causal: the size does not depend on it */
        uint8_t *m3 = take(&a, B, G, N, 1);
        if (pl->causal) bb->m3 = m3;
        bb->qg = take(&a, B * H, G, d, sizeof(float));
        bb->og = take(&a, B * H, G, dv, sizeof(float));
        bb->lg = take(&a, B * H, G, 1, sizeof(float));
        const size_t common = a.off;
        bb->o2 = take(&a, B * H, N, dv, sizeof(float));
        bb->l1 = take(&a, B * H, N, 1, sizeof(float));
        bb->l2 = take(&a, B * H, N, 1, sizeof(float));
        const size_t fwd = a.off;
        a.off = common;
        bb->dol = take(&a, B * H, N, dv, sizeof(float));
        bb->dq2 = take(&a, B * H, N, d, sizeof(float));
        bb->dog = take(&a, B * H, G, dv, sizeof(float));
        bb->dqg = take(&a, B * H, G, d, sizeof(float));
        bb->dkg = take(&a, B * Hk, G, d, sizeof(float));
        bb->dvg = take(&a, B * Hk, G, dv, sizeof(float));
        bb->dk3 = take(&a, B * Hk, N, d, sizeof(float));
        bb->dv3 = take(&a, B * Hk, N, dv, sizeof(float));
        if (fwd > a.off) a.off = fwd;
    }
    bb->flash_bytes = attn_flash_workspace_size(q, k, v);
    if (bb->flash_bytes == SIZE_MAX) a.overflow = 1;
    bb->flash = take(&a, 1, 1, 1, bb->flash_bytes);
    size_t total;
    if (a.overflow || attn_add_overflow(a.off, 64, &total)) return SIZE_MAX;
    return total;
}

size_t attn_longformer_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                      const attn_longformer_params *params) {
    lg_plan pl;
    lg_bufs bb;
    attn_status st = plan_init("attn_longformer_workspace_size", q, k, v, params, 1, &pl);
    if (st) return 0;
    return layout(&pl, q, k, v, NULL, &bb);
}

static attn_status get_bufs(const char *fn, const lg_plan *pl, const attn_tensor *q, const attn_tensor *k,
                            const attn_tensor *v, void *ws, size_t bytes, lg_bufs *bb) {
    const size_t need = layout(pl, q, k, v, NULL, bb);
    void *aligned;
    attn_status st = attn_ctx_workspace(fn, ws, bytes, need, &aligned);
    if (st) return st;
    layout(pl, q, k, v, aligned, bb);
    return ATTN_OK;
}

/* ---- the passes' parameters and gathers ---- */

static attn_sdpa_params window_params(const lg_plan *pl, const attn_longformer_params *p, attn_btensor *km) {
    attn_sdpa_params s = attn_sdpa_params_default();
    s.scale = p->scale;
    s.causal = pl->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    s.window_left = s.window_right = pl->w;
    if (pl->km) {
        *km = *p->key_mask;
        s.key_mask = km;
    }
    return s;
}

/* The params of pass 2 (every query over the gathered global keys, minus those already in its
 * window: mask m2 [B, 1, N, G]) and pass 3 (the global rows over every key, mask m3 when there is
 * one), for the forward and the backward alike. */
static void pass_params(const lg_plan *pl, const lg_bufs *bb, const attn_sdpa_params *p1, attn_btensor *m2,
                        attn_btensor *m3, attn_sdpa_params *p2, attn_sdpa_params *p3) {
    *p2 = attn_sdpa_params_default();
    *p3 = attn_sdpa_params_default();
    p2->scale = p3->scale = p1->scale;
    *m2 = attn_btensor_4d(bb->m2, pl->B, 1, pl->N, pl->G);
    p2->bool_mask = m2;
    p3->key_mask = p1->key_mask;
    if (bb->m3) {
        *m3 = attn_btensor_4d(bb->m3, pl->B, 1, pl->G, pl->N);
        p3->bool_mask = m3;
    }
}

/* pos / cnt, and the masks of passes 2 and 3. */
static void build_index(const lg_plan *pl, lg_bufs *bb) {
    const int64_t B = pl->B, N = pl->N, G = pl->G, w = pl->w;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = 0;
        for (int64_t i = 0; i < N; i++)
            if (is_global(pl, b, i)) bb->pos[b * G + n++] = i;
        bb->cnt[b] = n;
        for (; n < G; n++) bb->pos[b * G + n] = -1;
    }
    const int nt = attn_threads_for(B * N);
    (void)nt; /* only the OpenMP pragma reads it */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t r = 0; r < B * N; r++) {
        const int64_t b = r / N, i = r % N;
        uint8_t *m = bb->m2 + r * G;
        for (int64_t t = 0; t < G; t++) {
            const int64_t j = bb->pos[b * G + t];
            const int outside = pl->causal ? j < i - w : (j < i - w || j > i + w);
            m[t] = (uint8_t)(t < bb->cnt[b] && key_real(pl, b, j) && (!pl->causal || j <= i) && outside);
        }
    }
    if (bb->m3) {
        const int nt3 = attn_threads_for(B * G);
        (void)nt3; /* only the OpenMP pragma reads it */
#pragma omp parallel for schedule(static) num_threads(nt3) if (nt3 > 1)
        for (int64_t r = 0; r < B * G; r++) {
            const int64_t b = r / G, t = r % G, p = bb->pos[r];
            uint8_t *m = bb->m3 + r * N;
            for (int64_t j = 0; j < N; j++) m[j] = (uint8_t)(t < bb->cnt[b] && j <= p);
        }
    }
}

/* dst [B, Hx, G, D] (contiguous) = rows pos[b][t] of src [B, Hx, N, D] (any strides); padded rows
 * get `fill`. */
static void gather_rows(const lg_plan *pl, const lg_bufs *bb, const float *src, const int64_t *s, int64_t Hx, int64_t D,
                        float fill, float *dst) {
    const int64_t G = pl->G;
    const int nt = attn_threads_for(pl->B * Hx);
    (void)nt; /* only the OpenMP pragma reads it */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t bh = 0; bh < pl->B * Hx; bh++) {
        const int64_t b = bh / Hx, h = bh % Hx;
        for (int64_t t = 0; t < G; t++) {
            float *o = dst + (bh * G + t) * D;
            if (t >= bb->cnt[b]) {
                for (int64_t x = 0; x < D; x++) o[x] = fill;
                continue;
            }
            const float *r = src + b * s[0] + h * s[1] + bb->pos[b * G + t] * s[2];
            for (int64_t x = 0; x < D; x++) o[x] = r[x * s[3]];
        }
    }
}

static attn_tensor contiguous(float *data, int64_t B, int64_t H, int64_t N, int64_t D) {
    return attn_tensor_4d(data, B, H, N, D);
}

/* ---- forward ---- */

attn_status attn_longformer_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                    const attn_longformer_params *params, attn_tensor *out, attn_tensor *lse,
                                    void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_longformer_forward";
    lg_plan pl;
    lg_bufs bb;
    attn_ctx c;
    attn_btensor kmv;
    attn_status st;
    if ((st = plan_init(fn, q, k, v, params, 1, &pl))) return st;
    const attn_sdpa_params p1 = window_params(&pl, params, &kmv);
    if ((st = attn_ctx_init(&c, fn, q, k, v, &p1, out, "out")) || (st = attn_ctx_check_rows(&c, fn, lse, "lse", 0)) ||
        (st = get_bufs(fn, &pl, q, k, v, workspace, workspace_bytes, &bb)))
        return st;
    if (pl.G == 0) return attn_flash_forward(q, k, v, &p1, out, lse, bb.flash, bb.flash_bytes);

    const int64_t B = pl.B, H = pl.H, Hk = pl.Hk, N = pl.N, G = pl.G, dv = pl.dv;
    build_index(&pl, &bb);
    gather_rows(&pl, &bb, k->data, k->stride, Hk, pl.d, 0.0f, bb.kg);
    gather_rows(&pl, &bb, v->data, v->stride, Hk, dv, 0.0f, bb.vg);
    gather_rows(&pl, &bb, q->data, q->stride, H, pl.d, 0.0f, bb.qg);
    attn_tensor kg = contiguous(bb.kg, B, Hk, G, pl.d), vg = contiguous(bb.vg, B, Hk, G, dv),
                qg = contiguous(bb.qg, B, H, G, pl.d), og = contiguous(bb.og, B, H, G, dv),
                o2 = contiguous(bb.o2, B, H, N, dv);
    attn_tensor l1 = attn_tensor_3d(bb.l1, B, H, N), l2 = attn_tensor_3d(bb.l2, B, H, N),
                lgv = attn_tensor_3d(bb.lg, B, H, G);
    attn_btensor m2, m3;
    attn_sdpa_params p2, p3;
    pass_params(&pl, &bb, &p1, &m2, &m3, &p2, &p3);
    if ((st = attn_flash_forward(q, k, v, &p1, out, &l1, bb.flash, bb.flash_bytes)) ||
        (st = attn_flash_forward(q, &kg, &vg, &p2, &o2, &l2, bb.flash, bb.flash_bytes)) ||
        (st = attn_flash_forward(&qg, k, v, &p3, &og, &lgv, bb.flash, bb.flash_bytes)))
        return st;

    /* merge the two partial softmaxes, then the global rows; tasks (b, h) own their rows */
    const int nt = attn_threads_for(B * H);
    (void)nt; /* only the OpenMP pragma reads it */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, h = bh % H;
        float *ob = out->data + b * out->stride[0] + h * out->stride[1];
        for (int64_t i = 0; i < N; i++) {
            const double a = bb.l1[bh * N + i], c2 = bb.l2[bh * N + i];
            float *o = ob + i * out->stride[2];
            const float *x2 = bb.o2 + (bh * N + i) * dv;
            double l;
            if (c2 == -INFINITY) {
                l = a;
            } else if (a == -INFINITY) {
                l = c2;
                for (int64_t x = 0; x < dv; x++) o[x * out->stride[3]] = x2[x];
            } else {
                const double m = a > c2 ? a : c2, e1 = exp(a - m), e2 = exp(c2 - m), s = e1 + e2;
                const double f1 = e1 / s, f2 = e2 / s;
                for (int64_t x = 0; x < dv; x++)
                    o[x * out->stride[3]] = (float)(f1 * o[x * out->stride[3]] + f2 * x2[x]);
                l = m + log(s);
            }
            if (lse) lse->data[b * lse->stride[0] + h * lse->stride[1] + i * lse->stride[2]] = (float)l;
        }
        for (int64_t t = 0; t < bb.cnt[b]; t++) {
            const int64_t i = bb.pos[b * G + t];
            float *o = ob + i * out->stride[2];
            for (int64_t x = 0; x < dv; x++) o[x * out->stride[3]] = bb.og[(bh * G + t) * dv + x];
            if (lse) lse->data[b * lse->stride[0] + h * lse->stride[1] + i * lse->stride[2]] = bb.lg[bh * G + t];
        }
    }
    return ATTN_OK;
}

/* ---- backward ---- */

attn_status attn_longformer_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                     const attn_longformer_params *params, const attn_tensor *out,
                                     const attn_tensor *dout, const attn_tensor *lse, attn_tensor *dq, attn_tensor *dk,
                                     attn_tensor *dv, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_longformer_backward";
    lg_plan pl;
    lg_bufs bb;
    attn_ctx c;
    attn_btensor kmv;
    attn_status st;
    if ((st = plan_init(fn, q, k, v, params, 1, &pl))) return st;
    const attn_sdpa_params p1 = window_params(&pl, params, &kmv);
    if ((st = attn_ctx_init(&c, fn, q, k, v, &p1, dout, "dout")) || (st = attn_ctx_check_like(fn, out, "out", dout)) ||
        (st = attn_ctx_check_like(fn, dq, "dq", q)) || (st = attn_ctx_check_like(fn, dk, "dk", k)) ||
        (st = attn_ctx_check_like(fn, dv, "dv", v)))
        return st;
    if (!out || !lse || !dk || !dv)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: out, lse, dk and dv are required (out %p, lse %p, dk %p, dv %p)", fn, (const void *)out,
                          (const void *)lse, (void *)dk, (void *)dv);
    if ((st = attn_ctx_check_rows(&c, fn, lse, "lse", 0))) return st;
    if (dk->stride[3] != 1 || dv->stride[3] != 1)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: dk and dv need unit innermost stride (got %lld and %lld)", fn,
                          (long long)dk->stride[3], (long long)dv->stride[3]);
    if ((st = get_bufs(fn, &pl, q, k, v, workspace, workspace_bytes, &bb))) return st;
    if (pl.G == 0) return attn_flash_backward(q, k, v, &p1, out, dout, lse, dq, dk, dv, bb.flash, bb.flash_bytes);

    const int64_t B = pl.B, H = pl.H, Hk = pl.Hk, N = pl.N, G = pl.G, d = pl.d, dvd = pl.dv;
    build_index(&pl, &bb);
    gather_rows(&pl, &bb, k->data, k->stride, Hk, d, 0.0f, bb.kg);
    gather_rows(&pl, &bb, v->data, v->stride, Hk, dvd, 0.0f, bb.vg);
    gather_rows(&pl, &bb, q->data, q->stride, H, d, 0.0f, bb.qg);
    gather_rows(&pl, &bb, out->data, out->stride, H, dvd, 0.0f, bb.og);
    gather_rows(&pl, &bb, dout->data, dout->stride, H, dvd, 0.0f, bb.dog);
    {
        const int64_t ls[4] = {lse->stride[0], lse->stride[1], lse->stride[2], 1};
        gather_rows(&pl, &bb, lse->data, ls, H, 1, -INFINITY, bb.lg);
    }
    /* dO with the global rows zeroed: passes 1 and 2 own the local rows only */
    const int nt = attn_threads_for(B * H);
    (void)nt; /* only the OpenMP pragma reads it */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, h = bh % H;
        for (int64_t i = 0; i < N; i++) {
            float *o = bb.dol + (bh * N + i) * dvd;
            const float *g = dout->data + b * dout->stride[0] + h * dout->stride[1] + i * dout->stride[2];
            if (is_global(&pl, b, i))
                memset(o, 0, sizeof(float) * (size_t)dvd);
            else
                for (int64_t x = 0; x < dvd; x++) o[x] = g[x * dout->stride[3]];
        }
    }
    attn_tensor kg = contiguous(bb.kg, B, Hk, G, d), vg = contiguous(bb.vg, B, Hk, G, dvd),
                qg = contiguous(bb.qg, B, H, G, d), og = contiguous(bb.og, B, H, G, dvd),
                dog = contiguous(bb.dog, B, H, G, dvd), dqg = contiguous(bb.dqg, B, H, G, d),
                dol = contiguous(bb.dol, B, H, N, dvd), dq2 = contiguous(bb.dq2, B, H, N, d),
                dkg = contiguous(bb.dkg, B, Hk, G, d), dvg = contiguous(bb.dvg, B, Hk, G, dvd),
                dk3 = contiguous(bb.dk3, B, Hk, N, d), dv3 = contiguous(bb.dv3, B, Hk, N, dvd);
    attn_tensor lgv = attn_tensor_3d(bb.lg, B, H, G);
    attn_btensor m2, m3;
    attn_sdpa_params p2, p3;
    pass_params(&pl, &bb, &p1, &m2, &m3, &p2, &p3);
    if ((st = attn_flash_backward_part(fn, q, k, v, &p1, out, &dol, lse, dq, dk, dv, bb.flash, bb.flash_bytes)) ||
        (st = attn_flash_backward_part(fn, q, &kg, &vg, &p2, out, &dol, lse, dq ? &dq2 : NULL, &dkg, &dvg, bb.flash,
                                       bb.flash_bytes)) ||
        (st = attn_flash_backward(&qg, k, v, &p3, &og, &dog, &lgv, dq ? &dqg : NULL, &dk3, &dv3, bb.flash,
                                  bb.flash_bytes)))
        return st;

    if (dq) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (int64_t bh = 0; bh < B * H; bh++) {
            const int64_t b = bh / H, h = bh % H;
            float *qb = dq->data + b * dq->stride[0] + h * dq->stride[1];
            for (int64_t i = 0; i < N; i++) {
                float *o = qb + i * dq->stride[2];
                const float *x2 = bb.dq2 + (bh * N + i) * d;
                for (int64_t x = 0; x < d; x++) o[x * dq->stride[3]] += x2[x];
            }
            for (int64_t t = 0; t < bb.cnt[b]; t++) {
                float *o = qb + bb.pos[b * G + t] * dq->stride[2];
                for (int64_t x = 0; x < d; x++) o[x * dq->stride[3]] = bb.dqg[(bh * G + t) * d + x];
            }
        }
    }
    const int ntk = attn_threads_for(B * Hk);
    (void)ntk; /* only the OpenMP pragma reads it */
#pragma omp parallel for schedule(static) num_threads(ntk) if (ntk > 1)
    for (int64_t bg = 0; bg < B * Hk; bg++) {
        const int64_t b = bg / Hk, g = bg % Hk;
        float *kb = dk->data + b * dk->stride[0] + g * dk->stride[1];
        float *vb = dv->data + b * dv->stride[0] + g * dv->stride[1];
        for (int64_t j = 0; j < N; j++) {
            float *ok = kb + j * dk->stride[2], *ov = vb + j * dv->stride[2];
            const float *k3 = bb.dk3 + (bg * N + j) * d, *v3 = bb.dv3 + (bg * N + j) * dvd;
            for (int64_t x = 0; x < d; x++) ok[x] += k3[x];
            for (int64_t x = 0; x < dvd; x++) ov[x] += v3[x];
        }
        for (int64_t t = 0; t < bb.cnt[b]; t++) {
            const int64_t j = bb.pos[b * G + t];
            float *ok = kb + j * dk->stride[2], *ov = vb + j * dv->stride[2];
            const float *kgr = bb.dkg + (bg * G + t) * d, *vgr = bb.dvg + (bg * G + t) * dvd;
            for (int64_t x = 0; x < d; x++) ok[x] += kgr[x];
            for (int64_t x = 0; x < dvd; x++) ov[x] += vgr[x];
        }
    }
    return ATTN_OK;
}

/* ---- exact weights ---- */

/* Does query i see key j? */
static int sees(const lg_plan *pl, int64_t b, int64_t i, int64_t j) {
    if (!key_real(pl, b, j) || (pl->causal && j > i)) return 0;
    return (j >= i - pl->w && j <= i + pl->w) || is_global(pl, b, i) || is_global(pl, b, j);
}

static double exact_logit(const lg_plan *pl, double scale, const float *qi, int64_t qs, const float *kj, int64_t ks) {
    double s = 0;
    for (int64_t t = 0; t < pl->d; t++) s += (double)qi[t * qs] * kj[t * ks];
    return s * scale;
}

attn_status attn_longformer_weights(const attn_tensor *q, const attn_tensor *k, const attn_longformer_params *params,
                                    int64_t b, int64_t h, int64_t row0, int64_t rows, float *weights) {
    static const char fn[] = "attn_longformer_weights";
    lg_plan pl;
    attn_ctx c;
    attn_btensor kmv;
    attn_status st;
    /* K stands in for V and Q for the output: only their shapes are checked; G is not needed (a row
     * at a time must not cost a scan of the whole mask) */
    if ((st = plan_init(fn, q, k, k, params, 0, &pl))) return st;
    const attn_sdpa_params p1 = window_params(&pl, params, &kmv);
    if ((st = attn_ctx_init(&c, fn, q, k, k, &p1, q, "q"))) return st;
    if (b < 0 || b >= pl.B || h < 0 || h >= pl.H || row0 < 0 || rows < 0 || row0 > pl.N || rows > pl.N - row0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: batch %lld, head %lld, rows [%lld, %lld) outside [B=%lld, H=%lld, N=%lld]", fn,
                          (long long)b, (long long)h, (long long)row0, (long long)(row0 + rows), (long long)pl.B,
                          (long long)pl.H, (long long)pl.N);
    if (rows > 0 && pl.N > 0 && !weights) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: weights is NULL", fn);
    const float *kh = k->data + b * k->stride[0] + (h / c.group) * k->stride[1];
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = row0 + r;
        const float *qi = q->data + b * q->stride[0] + h * q->stride[1] + i * q->stride[2];
        float *wr = weights + r * pl.N;
        /* the row's log-sum-exp over the keys it sees, online, then the probabilities (logits
         * computed twice rather than kept, so no row buffer is needed) */
        double mx = -INFINITY, sum = 0;
        int poisoned = 0;
        for (int64_t j = 0; j < pl.N; j++) {
            if (!sees(&pl, b, i, j)) continue;
            const double s = exact_logit(&pl, c.scale, qi, q->stride[3], kh + j * k->stride[2], k->stride[3]);
            poisoned |= isnan(s) || s == INFINITY; /* the softmax over the keys seen is NaN (torch.softmax) */
            if (s > mx) {
                sum = sum * exp(mx - s) + 1.0;
                mx = s;
            } else {
                sum += exp(s - mx);
            }
        }
        const double l = mx == -INFINITY ? -INFINITY : mx + log(sum);
        for (int64_t j = 0; j < pl.N; j++)
            wr[j] =
                !sees(&pl, b, i, j) ? 0.0f /* outside the band: no logit at all */
                : poisoned          ? NAN
                : l != -INFINITY
                    ? (float)exp(exact_logit(&pl, c.scale, qi, q->stride[3], kh + j * k->stride[2], k->stride[3]) - l)
                    : 0.0f;
    }
    return ATTN_OK;
}

/* ---- cost ---- */

int64_t attn_longformer_tile_count(const attn_tensor *q, const attn_tensor *k, const attn_longformer_params *params,
                                   int64_t *total) {
    lg_plan pl;
    attn_btensor kmv;
    if (total) *total = 0;
    if (plan_init("attn_longformer_tile_count", q, k, k, params, 1, &pl)) return 0;
    attn_sdpa_params p1 = window_params(&pl, params, &kmv);
    p1.key_mask = NULL; /* masks do not change which tiles are visited */
    int64_t n = attn_flash_tile_count(q, k, &p1, total);
    if (pl.G > 0) {
        const attn_sdpa_params p = attn_sdpa_params_default();
        attn_tensor kg = attn_tensor_4d(NULL, pl.B, pl.Hk, pl.G, pl.d),
                    qg = attn_tensor_4d(NULL, pl.B, pl.H, pl.G, pl.d);
        n += attn_flash_tile_count(q, &kg, &p, NULL) + attn_flash_tile_count(&qg, k, &p, NULL);
    }
    return n;
}
