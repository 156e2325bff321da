/* The engine shared by linear attention and Performer FAVOR+ (linear_attention.c, performer.c):
 * a feature map, the causal / non-causal kernelised product, forward, backward and recurrent step.
 * See include/attn/linear_attention.h for the math. */
#ifndef ATTN_LINEAR_INTERNAL_H
#define ATTN_LINEAR_INTERNAL_H

#include "attention/attention_kind.h"
#include "attn/linear_attention.h"

/* A feature map: elu + 1 (w == NULL, p == d) or FAVOR+ (w [Hw, p, d] contiguous). */
typedef struct lin_map {
    int64_t p;       /* features per row */
    float eps;       /* denominator epsilon */
    const float *w;  /* FAVOR+ projection, NULL for elu + 1 */
    int64_t w_heads; /* 1 (shared) or Hq */
} lin_map;

/* Bytes of workspace for a call of lin_run / lin_step with these shapes (SIZE_MAX on overflow). */
size_t attn_lin_ws_bytes(const lin_map *mp, int64_t b, int64_t h, int64_t nq, int64_t nk, int64_t d, int64_t dv);

/* Forward (out) or backward (dout given: dq, dk, dv, each nullable) of the parallel form. */
attn_status attn_lin_run(const char *fn, const lin_map *mp, const attn_tensor *q, const attn_tensor *k,
                         const attn_tensor *v, attn_causal causal, const attn_btensor *key_mask, attn_tensor *out,
                         const attn_tensor *dout, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, void *ws,
                         size_t ws_bytes);

/* Floats of one (batch, head) state. */
size_t attn_lin_state_floats(const lin_map *mp, int64_t dv);

/* Recurrent step (see attn_linear_attention_step). */
attn_status attn_lin_step(const char *fn, const lin_map *mp, const attn_tensor *q, const attn_tensor *k,
                          const attn_tensor *v, int causal, const attn_btensor *key_mask, float *state,
                          attn_tensor *out, void *ws, size_t ws_bytes);
/* Workspace of a step (q, k nullable). */
size_t attn_lin_step_ws_bytes(const lin_map *mp, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v);

/* Features of n rows x (x + i * rs + c * cs, c < d) of head h into F [n, p]; keep (nullable,
 * stride ks) hides rows. FAVOR+ keys: *kmax (nullable for queries) receives the maximum
 * subtracted (-INFINITY when no row is kept: F is then 0). xs: n * d floats of scratch. gws NULL
 * uses the reference GEMM. */
void attn_lin_features(const lin_map *mp, int64_t h, int64_t d, const float *x, int64_t rs, int64_t cs, int64_t n,
                       int is_query, const uint8_t *keep, int64_t ks, float *kmax, float *F, float *xs, void *gws,
                       size_t gwsb);

/* The kinds' refusal of every attn_sdpa_params option but causality and the key mask
 * (ATTN_ERR_UNSUPPORTED naming the option). */
attn_status attn_lin_kind_params(const char *kind, const attn_sdpa_params *p);

/* The step's key mask [B, L] as a view over its new keys (the last n' columns); ATTN_ERR_UNSUPPORTED
 * when it hides a key the state already absorbed. *mask NULL when there is none. */
attn_status attn_lin_step_mask(const char *kind, const attn_kind_step *s, attn_btensor *view,
                               const attn_btensor **mask);

#endif
