/* attn attention: the reference scaled dot-product attention (the exact N x N math).
 *
 *   S = scale * Q K^T (+ additive mask) (+ ALiBi bias) ; soft-capped if softcap > 0
 *   S[i, j] = -inf where any boolean mask, the key mask, causality or the window forbids (i, j)
 *   P = softmax(S) row-wise ; P' = dropout(P) ; O = P' V
 *
 * Layout: Q [B, Hq, Nq, d], K [B, Hk, Nk, d], V [B, Hk, Nk, dv], O [B, Hq, Nq, dv], with Hq a
 * multiple of Hk (query head h reads key/value head h / (Hq / Hk): MHA, GQA, MQA). Views may have
 * any strides, so [B, N, H, d] storage is passed by permuting strides.
 *
 * Fully masked rows: a query row whose every key is masked gets output 0, weights 0 and
 * gradients 0 (PyTorch's scaled_dot_product_attention agrees for boolean masks); no NaN comes out
 * of finite inputs. */
#ifndef ATTN_ATTENTION_H
#define ATTN_ATTENTION_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_causal {
    ATTN_CAUSAL_NONE = 0,
    /* key j allowed for query i when j <= i (PyTorch's is_causal, torch.tril) */
    ATTN_CAUSAL_TOP_LEFT = 1,
    /* j <= i + Nk - Nq: the last query sees the last key (FlashAttention >= 2.1) */
    ATTN_CAUSAL_BOTTOM_RIGHT = 2
} attn_causal;

typedef struct attn_sdpa_params {
    float scale;            /* 0 selects 1/sqrt(d) */
    attn_causal causal;
    /* Boolean mask broadcastable to [B, Hq, Nq, Nk]: true (nonzero) = may attend. NULL = none. */
    const attn_btensor *bool_mask;
    /* Additive float mask broadcastable to [B, Hq, Nq, Nk], added to the scaled logits. May hold
     * -inf. NULL = none. */
    const attn_tensor *add_mask;
    /* Key mask [B, Nk]: true (nonzero) = this key is real and may be attended (the complement of
     * PyTorch's key_padding_mask). NULL = none. */
    const attn_btensor *key_mask;
    /* Sliding window relative to the causal alignment's diagonal (FlashAttention's window_size):
     * key j allowed for query i when i + off - window_left <= j <= i + off + window_right, where
     * off = 0 (top-left / none) or Nk - Nq (bottom-right). Negative = unbounded on that side. */
    int64_t window_left, window_right;
    /* ALiBi: S[h, i, j] += -slope[h] * |i + off - j|, slopes [Hq]. NULL = none. */
    const float *alibi_slopes;
    /* Logit soft-capping: s -> softcap * tanh(s / softcap) before masks are added. 0 = off. */
    float softcap;
    /* Dropout on the weights (training): probability, and the Philox stream (seed, offset).
     * Element (b, h, i, j) uses index ((b * Hq + h) * Nq + i) * Nk + j of the stream. */
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
} attn_sdpa_params;

/* Defaults: scale 1/sqrt(d), no masks, no window, no dropout. */
attn_sdpa_params attn_sdpa_params_default(void);

/* Scratch bytes attn_sdpa_forward / attn_sdpa_backward need for these shapes and the current
 * thread count. */
size_t attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v);

/* O = attention(Q, K, V). weights (nullable) receives P' [B, Hq, Nq, Nk], the weights actually
 * applied to V (after dropout, as torch.nn.MultiheadAttention returns them).
 * lse (nullable) receives the per-row log-sum-exp of S [B, Hq, Nq] (-inf for a masked row). */
attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                              const attn_sdpa_params *params, attn_tensor *out,
                              attn_tensor *weights, attn_tensor *lse, void *workspace,
                              size_t workspace_bytes);

/* Gradients of the forward: dQ, dK, dV are overwritten (any may be NULL when not wanted).
 * Recomputes the weights from Q and K. */
attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_params *params, const attn_tensor *dout,
                               attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                               void *workspace, size_t workspace_bytes);

#ifdef __cplusplus
}
#endif
#endif
