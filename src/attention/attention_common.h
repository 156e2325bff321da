/* Argument validation and mask/bias/dropout evaluation shared by every exact-attention path
 * (reference SDPA, flash). One place decides what (i, j) may attend, so all paths agree. */
#ifndef ATTN_ATTENTION_COMMON_H
#define ATTN_ATTENTION_COMMON_H

#include <math.h>

#include "attn/attention.h"
#include "attn/kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct attn_ctx {
    int64_t b, hq, hk, group, nq, nk, d, dv;
    double scale, softcap;
    attn_causal causal;
    int64_t off;        /* diagonal offset: Nk - Nq for bottom-right alignment, else 0 */
    int64_t wl, wr;     /* window sides, < 0 = unbounded */
    const float *alibi; /* [Hq] or NULL */
    const uint8_t *bm;  /* boolean mask, effective strides over [B, Hq, Nq, Nk] */
    int64_t bms[4];
    const float *am; /* additive mask */
    int64_t ams[4];
    const uint8_t *km; /* key mask [B, Nk] */
    int64_t kms[2];
    float p;           /* dropout probability */
    double keep_scale; /* 1 / (1 - p) */
    uint64_t seed, offset;
} attn_ctx;

/* Validate Q [B,Hq,Nq,d], K [B,Hk,Nk,d], V [B,Hk,Nk,dv], the params and `out` [B,Hq,Nq,dv]
 * (named out_name in messages) and fill the context. */
attn_status attn_ctx_init(attn_ctx *c, const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                          const attn_sdpa_params *params, const attn_tensor *out, const char *out_name);
/* The same with the element types allowed for q, k, v (which must share one) and for out (masks
 * of ATTN_TYPES(...)); attn_ctx_init allows f32 only. */
attn_status attn_ctx_init_typed(attn_ctx *c, const char *fn, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_sdpa_params *params, const attn_tensor *out,
                                const char *out_name, unsigned in_types, unsigned out_types);
/* Optional per-row outputs: with_nk ? [B, Hq, Nq, Nk] : [B, Hq, Nq]. NULL passes. */
attn_status attn_ctx_check_rows(const attn_ctx *c, const char *fn, const attn_tensor *t, const char *name, int with_nk);
/* Optional tensor with the same shape as ref. NULL passes. */
attn_status attn_ctx_check_like(const char *fn, const attn_tensor *t, const char *name, const attn_tensor *ref);
attn_status attn_ctx_check_like_typed(const char *fn, const attn_tensor *t, const char *name, const attn_tensor *ref,
                                      unsigned types);
/* Check the caller's workspace against `need` bytes and return it 64-byte aligned. */
attn_status attn_ctx_workspace(const char *fn, void *ws, size_t bytes, size_t need, void **aligned);

/* May query i of head h attend key j? (boolean mask, key mask, causality, window) */
static inline int attn_ctx_allowed(const attn_ctx *c, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t diag = i + c->off;
    if (c->causal != ATTN_CAUSAL_NONE && j > diag) return 0;
    if (c->wl >= 0 && j < diag - c->wl) return 0;
    if (c->wr >= 0 && j > diag + c->wr) return 0;
    if (c->km && !c->km[b * c->kms[0] + j * c->kms[1]]) return 0;
    if (c->bm && !c->bm[b * c->bms[0] + h * c->bms[1] + i * c->bms[2] + j * c->bms[3]]) return 0;
    return 1;
}

/* Additive terms of the logit: ALiBi and the float mask. */
static inline double attn_ctx_bias(const attn_ctx *c, int64_t b, int64_t h, int64_t i, int64_t j) {
    double s = 0;
    if (c->alibi) {
        const int64_t dist = i + c->off - j;
        s -= (double)c->alibi[h] * (double)(dist < 0 ? -dist : dist);
    }
    if (c->am) s += c->am[b * c->ams[0] + h * c->ams[1] + i * c->ams[2] + j * c->ams[3]];
    return s;
}

/* Dropout factor of (b, h, i, j): 0 when dropped, 1 / (1 - p) when kept, 1 without dropout. */
static inline double attn_ctx_keep(const attn_ctx *c, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (c->p <= 0) return 1.0;
    const uint64_t idx = (uint64_t)(((b * c->hq + h) * c->nq + i) * c->nk + j);
    return attn_philox_uniform(c->seed, c->offset, idx) >= c->p ? c->keep_scale : 0.0;
}

static inline int attn_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

#endif
