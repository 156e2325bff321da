/* attn linear attention: kernelised attention in O(N) time, never an N x N matrix.
 *
 * Per batch and head, with q_i, k_j in R^d, v_j in R^dv and a feature map phi: R^d -> R^p,
 *   out_i = phi(q_i)^T S_i / (phi(q_i)^T z_i + eps),  S_i = sum_j phi(k_j) v_j^T,  z_i = sum_j phi(k_j)
 * over the keys j query i may see: all of them (causal NONE), j <= i (ATTN_CAUSAL_TOP_LEFT) or
 * j <= i + Nk - Nq (ATTN_CAUSAL_BOTTOM_RIGHT), minus the keys a key mask hides. No 1/sqrt(d) scale.
 *
 *   linear attention (Katharopoulos et al. 2020): phi(x) = elu(x) + 1 (p = d), eps = 1e-6.
 *   Performer FAVOR+ (Choromanski et al. 2021): x' = x d^(-1/4), a projection W [m, d] with rows w_r,
 *     phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m)  (p = m), eps = 0. Stabilised by subtracting a
 *     per-row maximum for queries and one maximum over all (real) keys of the batch and head: both
 *     cancel exactly in the ratio, so they are constants to the gradient. W is an input (no
 *     gradient flows to it); attn_orf_draw draws the paper's orthogonal random features.
 *
 * Layout as attn_flash_*: Q [B, Hq, Nq, d], K [B, Hk, Nk, d], V [B, Hk, Nk, dv], O [B, Hq, Nq, dv],
 * Hq a multiple of Hk, any strides (dq, dk, dv too). key_mask [B, Nk] (nullable): true = a real key.
 * A query that sees no key gets output 0 and sends no gradient. Causal forms run chunk by chunk
 * over prefix sums (GEMM-shaped), each (batch, head) on one thread: results are bitwise identical
 * for any thread count. Workspaces are the caller's (query the *_workspace_size function first; it
 * depends on the thread count). */
#ifndef ATTN_LINEAR_ATTENTION_H
#define ATTN_LINEAR_ATTENTION_H

#include "attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The denominator's epsilon of linear attention. */
#define ATTN_LINEAR_ATTENTION_EPS 1e-6f

/* ---- linear attention (phi = elu + 1) ---------------------------------------------------- */
/* Bytes of workspace for the forward or the backward with these shapes; 0 for invalid views. */
ATTN_API size_t attn_linear_attention_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v);
ATTN_API attn_status attn_linear_attention_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                                   attn_causal causal, const attn_btensor *key_mask, attn_tensor *out,
                                                   void *workspace, size_t workspace_bytes);
/* dq, dk, dv (each nullable) overwritten; the forward is recomputed (nothing is saved). */
ATTN_API attn_status attn_linear_attention_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                                    attn_causal causal, const attn_btensor *key_mask,
                                                    const attn_tensor *dout, attn_tensor *dq, attn_tensor *dk,
                                                    attn_tensor *dv, void *workspace, size_t workspace_bytes);

/* ---- Performer FAVOR+ -------------------------------------------------------------------
 * w: the projection [Hw, m, d] with Hw = 1 (shared by every head) or Hq (one per query head). */

/* Orthogonal random features (the paper's ORF): w [m, d] row-major gets ceil(m / d) blocks of d
 * rows (the last block truncated), each block the rows of a Haar-random orthogonal matrix
 * (Gram-Schmidt, twice, in double, of a Gaussian d x d matrix), every row rescaled by an
 * independent chi(d) norm (the norm of a fresh Gaussian d-vector). Gaussians come from Box-Muller
 * over Philox-4x32-10 (seed); the same (m, d, seed) always gives the same matrix, and a new seed
 * is a redraw. */
ATTN_API attn_status attn_orf_draw(float *w, int64_t m, int64_t d, uint64_t seed);

/* The feature map alone: phi [B, H, N, m] (any strides) of x [B, H, N, d]: queries (is_query:
 * per-row stabiliser) or keys (one maximum over the real keys of each (b, h); rows key_mask hides
 * get 0). w [Hw, m, d], Hw = 1 or H. */
ATTN_API attn_status attn_performer_features(const attn_tensor *x, const attn_tensor *w, int is_query,
                                             const attn_btensor *key_mask, attn_tensor *phi);

ATTN_API size_t attn_performer_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                              const attn_tensor *w);
ATTN_API attn_status attn_performer_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                            const attn_tensor *w, attn_causal causal, const attn_btensor *key_mask,
                                            attn_tensor *out, void *workspace, size_t workspace_bytes);
/* dq, dk, dv (each nullable) overwritten; gradients flow to q, k, v through phi, none to w. */
ATTN_API attn_status attn_performer_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                             const attn_tensor *w, attn_causal causal, const attn_btensor *key_mask,
                                             const attn_tensor *dout, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                             void *workspace, size_t workspace_bytes);

/* ---- recurrent steps (token-by-token decoding) -----------------------------------------
 * The causal form as a recurrence: a state per (batch, head) holds S and z of the keys seen
 * so far, as a [p, dv + 1] row-major matrix (column dv is z); the Performer's also holds the
 * running key maximum the features are scaled by and a flag "not empty" (2 floats after the
 * matrix): when new keys raise the maximum, S and z are rescaled, which keeps the ratio exact.
 * state: [B, H, state_floats] floats, zeroed to start. A step takes as many query heads as
 * key / value heads (H; w [1 or H, m, d]).
 * A step takes n new queries q [B, H, n, d] (nullable: absorb keys only, e.g. a cross-attention
 * memory) and n' new keys / values k [B, H, n', d], v [B, H, n', dv] (both nullable: nothing
 * appended): query i sees the state plus the new keys j <= i + n' - n (causal) or all new keys,
 * then every new key is absorbed. key_mask [B, n'] (nullable) covers the new keys only. Feeding
 * a sequence one token (or chunk) at a time equals the causal parallel form. */
ATTN_API size_t attn_linear_attention_state_floats(int64_t d, int64_t dv);
ATTN_API size_t attn_linear_attention_step_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                                          const attn_tensor *v);
ATTN_API attn_status attn_linear_attention_step(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                                int causal, const attn_btensor *key_mask, float *state,
                                                attn_tensor *out, void *workspace, size_t workspace_bytes);
ATTN_API size_t attn_performer_state_floats(int64_t m, int64_t dv);
ATTN_API size_t attn_performer_step_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                                   const attn_tensor *w);
ATTN_API attn_status attn_performer_step(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                         const attn_tensor *w, int causal, const attn_btensor *key_mask, float *state,
                                         attn_tensor *out, void *workspace, size_t workspace_bytes);

#ifdef __cplusplus
}
#endif
#endif
