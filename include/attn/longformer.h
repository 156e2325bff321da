/* attn longformer: local + global softmax attention (Longformer, Beltagy et al. 2020).
 *
 * Self-attention over N positions with a symmetric window w and a set of global tokens:
 *   a query i that is not global sees the keys j with |i - j| <= w, plus every global key;
 *   a global query sees every key;
 * each subject to causality (j <= i when causal) and the key mask, then exact softmax attention
 *   O_i = sum_j softmax_j(scale q_i . k_j) v_j   over the keys i sees.
 * Time and memory are O(N (w + g)) for g global tokens: no N x N matrix or mask is ever formed.
 *
 * Construction (on the flash kernel): a window pass over all keys, a pass of every query over the
 * gathered global keys outside its window, merged by their log-sum-exps, then the global queries'
 * rows recomputed by one full pass of those rows. The backward runs the flash backward of each pass
 * with the merged output and log-sum-exp, which gives each pass's exact share of dQ, dK and dV.
 *
 * Layout as attn_flash_*: Q [B, Hq, N, d], K [B, Hk, N, d], V [B, Hk, N, dv], O [B, Hq, N, dv],
 * Hq a multiple of Hk (GQA / MQA), any strides, except dk and dv (unit innermost stride). Results
 * are bitwise identical for any thread count. A query that sees no key gets output 0, lse -inf
 * and gradient 0. Accuracy: the two partial softmaxes are merged through their float log-sum-exps,
 * so rows whose logits reach magnitude L carry a relative error of about L * 6e-8 (as the flash
 * kernel's own lse). */
#ifndef ATTN_LONGFORMER_H
#define ATTN_LONGFORMER_H

#include "attention.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_longformer_params {
    int64_t window; /* keys on each side, >= 0 (0: a non-global query sees itself) */
    /* [B, N] true (nonzero) = a global token; NULL = none (plain sliding-window attention) */
    const attn_btensor *global_mask;
    int causal;                   /* key j allowed for query i only when j <= i */
    const attn_btensor *key_mask; /* [B, N] true = a real key; NULL = all real */
    float scale;                  /* 0 selects 1 / sqrt(d) */
} attn_longformer_params;

/* Scratch bytes the forward / backward need (the larger of the two). It depends on the shapes, the
 * thread count and the global mask's contents (the most global tokens any batch holds), not on the
 * window, causality, key mask or scale: query it with the mask the calls will use. 0 for invalid
 * arguments; SIZE_MAX on overflow. */
ATTN_API size_t attn_longformer_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                               const attn_longformer_params *params);

/* O = local + global attention(Q, K, V); lse [B, Hq, N] (nullable unless a backward follows)
 * receives each row's natural-log log-sum-exp (-inf for a row that sees no key). */
ATTN_API attn_status attn_longformer_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                             const attn_longformer_params *params, attn_tensor *out, attn_tensor *lse,
                                             void *workspace, size_t workspace_bytes);

/* dQ, dK, dV (overwritten; dq may be NULL) from the forward's out and lse. */
ATTN_API attn_status attn_longformer_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                              const attn_longformer_params *params, const attn_tensor *out,
                                              const attn_tensor *dout, const attn_tensor *lse, attn_tensor *dq,
                                              attn_tensor *dk, attn_tensor *dv, void *workspace,
                                              size_t workspace_bytes);

/* The exact weights of query rows [row0, row0 + rows) of batch b, head h, as attn_flash_weights:
 * weights[r * N + j] = P(row0 + r, j) (0 for the keys the row does not see), each row normalised in
 * double over the keys it sees; O(N + (w + g) d) per row. */
ATTN_API attn_status attn_longformer_weights(const attn_tensor *q, const attn_tensor *k,
                                             const attn_longformer_params *params, int64_t b, int64_t h, int64_t row0,
                                             int64_t rows, float *weights);

/* The (query block, key block) tiles of the flash kernel the forward visits, summed over its passes
 * (window, global keys, global queries), and in *total (nullable) the tiles of one dense N x N pass:
 * the cost is O(N (w + g)), against O(N^2). 0 for invalid arguments. */
ATTN_API int64_t attn_longformer_tile_count(const attn_tensor *q, const attn_tensor *k,
                                            const attn_longformer_params *params, int64_t *total);

#ifdef __cplusplus
}
#endif
#endif
