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
    float scale; /* 0 selects 1/sqrt(d) */
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
ATTN_API attn_sdpa_params attn_sdpa_params_default(void);

/* Scratch bytes attn_sdpa_forward / attn_sdpa_backward need for these shapes and the current
 * thread count. */
ATTN_API size_t attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v);

/* O = attention(Q, K, V). weights (nullable) receives P' [B, Hq, Nq, Nk], the weights actually
 * applied to V (after dropout, as torch.nn.MultiheadAttention returns them).
 * lse (nullable) receives the per-row log-sum-exp of S [B, Hq, Nq] (-inf for a masked row). */
ATTN_API attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                       const attn_sdpa_params *params, attn_tensor *out, attn_tensor *weights,
                                       attn_tensor *lse, void *workspace, size_t workspace_bytes);

/* Gradients of the forward: dQ, dK, dV are overwritten (any may be NULL when not wanted).
 * Recomputes the weights from Q and K. */
ATTN_API attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                        const attn_sdpa_params *params, const attn_tensor *dout, attn_tensor *dq,
                                        attn_tensor *dk, attn_tensor *dv, void *workspace, size_t workspace_bytes);

/* ---- flash attention ----------------------------------------------------------------------
 * The same function as attn_sdpa_* (every option of attn_sdpa_params), computed tile by tile with
 * the online softmax of FlashAttention-2: no Nq x Nk matrix is formed, tiles that causality or a
 * window mask entirely are skipped (a window of w costs O(N w)), and the extra memory is a few
 * tiles per thread plus 16 bytes per query row for the backward, and for bf16 views a copy of V
 * with its rows paired (attn_flash_workspace_size: ask it with views of the dtype that will run).
 * Bitwise identical for any thread count; the backward runs on every thread even for one
 * (batch, key/value head) pair.
 * dk and dv must have unit innermost stride (stride[3] == 1): they are accumulated in place;
 * every other tensor may have any strides. */
ATTN_API size_t attn_flash_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v);

/* The number of (query block, key block) tiles attn_flash_forward computes for these shapes and
 * params, and in *total (nullable) the number a dense pass would: tiles that causality or the
 * window masks completely are never visited, so a window of w costs O(N w). Benchmarks use it to
 * count the flops actually done. Returns 0 for invalid arguments. */
ATTN_API int64_t attn_flash_tile_count(const attn_tensor *q, const attn_tensor *k, const attn_sdpa_params *params,
                                       int64_t *total);

/* O = attention(Q, K, V); lse [B, Hq, Nq] (nullable unless a backward follows) receives the
 * natural-log log-sum-exp of each row's logits (-inf for a fully masked row, whose output is 0).
 * Element types: q, k, v all f32 (out f32), or all bf16 (out f32 or bf16; lse f32): the bf16
 * path forms Q K^T and P V from bf16 pairs with float accumulation (AMX tiles where the CPU has
 * AMX-BF16 and ATTN_AMX is not 0, AVX512-BF16's vdpbf16ps where it has that, a bit-exact
 * emulation of vdpbf16ps elsewhere and on Intel, where it is faster), keeps the softmax statistics in float
 * and rounds P to bf16 for P V; every mask and option of attn_sdpa_params applies. Other types
 * answer ATTN_ERR_UNSUPPORTED. attn_flash_weights takes f32 only. */
ATTN_API attn_status attn_flash_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                        const attn_sdpa_params *params, attn_tensor *out, attn_tensor *lse,
                                        void *workspace, size_t workspace_bytes);

/* dQ, dK, dV (overwritten; dq may be NULL) from the forward's out and lse. With bf16 q, k, v the
 * dout must be bf16 too and out may be f32 or bf16; the gradients are f32. The bf16 path forms
 * S, dP, dV, dK and dQ from bf16 pair products with float accumulation (P and dS rounded to
 * bf16, as FlashAttention does); the statistics stay float. */
ATTN_API attn_status attn_flash_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                         const attn_sdpa_params *params, const attn_tensor *out,
                                         const attn_tensor *dout, const attn_tensor *lse, attn_tensor *dq,
                                         attn_tensor *dk, attn_tensor *dv, void *workspace, size_t workspace_bytes);

/* The exact attention weights of query rows [row0, row0 + rows) of batch b, head h, recomputed
 * from Q and K one row at a time, without the N x N reference: weights[r * Nk + j] = P(row0 + r, j),
 * the probabilities before dropout (with apply_dropout, the weights applied to V). Each row's
 * normaliser is recomputed in double from its own logits rather than read from the forward's
 * float lse, which at logits of magnitude 1e4 would cost 1e-4 relative accuracy. */
ATTN_API attn_status attn_flash_weights(const attn_tensor *q, const attn_tensor *k, const attn_sdpa_params *params,
                                        int64_t b, int64_t h, int64_t row0, int64_t rows, int apply_dropout,
                                        float *weights);

/* ---- variable-length (packed) flash attention ---------------------------------------------
 * FlashAttention's varlen API: a batch of sequences of different lengths packed without padding.
 *   Q [total_q, Hq, d], K [total_k, Hk, d], V [total_k, Hk, dv], O [total_q, Hq, dv], any strides
 *   (dk, dv of the backward with unit innermost stride); Hq a multiple of Hk as above.
 *   cu_seqlens_q / cu_seqlens_k: int64 [batch + 1], 0 first, nondecreasing, total_q / total_k last;
 *   sequence s owns query rows [cu_q[s], cu_q[s + 1]) and key rows [cu_k[s], cu_k[s + 1]).
 *   O_s = attention(Q_s, K_s, V_s): sequence s attends only to its own keys, with Nq = Nk = 0
 *   allowed (a sequence with no keys gets output 0 and lse -inf, as a fully masked row).
 *   lse [Hq, total_q] (FlashAttention's layout), natural log.
 * Each sequence is exactly attn_flash_forward / attn_flash_backward run on it alone with batch 1
 * (bit for bit: output, lse, dq, dk, dv), so every per-sequence option of attn_sdpa_params means
 * what it means there, with that sequence's Nq and Nk: scale, causal (ATTN_CAUSAL_BOTTOM_RIGHT is
 * FlashAttention >= 2.1's varlen causality, aligned per sequence; ATTN_CAUSAL_TOP_LEFT is
 * PyTorch's is_causal), window_left / window_right, alibi_slopes [Hq], softcap. Dropout: sequence
 * s draws exactly what its batch-1 run with Philox offset dropout_offset + s draws (element
 * (h, i, j) at stream index (h Nq_s + i) Nk_s + j), so sequences never share draws; a caller
 * making several calls with one seed advances the offset by at least batch between them. The
 * draws differ from those of the padded batch (index ((b Hq + h) Nq + i) Nk + j at offset
 * dropout_offset), with the same distribution. bool_mask, add_mask and key_mask are padded-batch
 * shapes and are refused (ATTN_ERR_UNSUPPORTED): the packing itself is the key mask.
 * Element types as attn_flash_*: all f32, or bf16 q, k, v (and dout) with f32 or bf16 out.
 * No work is spent on padding: the forward runs every sequence's (head, query block) tiles in one
 * parallel loop, longest sequences first; the backward runs sequence by sequence, each on every
 * thread. Results are identical for any thread count. */

/* Workspace bytes of the varlen forward and backward for these views and lengths (the largest
 * any one sequence needs, plus the forward's table of sequences, about 1 KB each); 0 for invalid
 * arguments (attn_last_error() says which), SIZE_MAX on overflow. */
ATTN_API size_t attn_flash_varlen_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                                 const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k,
                                                 int64_t batch);

/* O = varlen attention; lse [Hq, total_q] nullable unless a backward follows. */
ATTN_API attn_status attn_flash_varlen_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                               const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k, int64_t batch,
                                               const attn_sdpa_params *params, attn_tensor *out, attn_tensor *lse,
                                               void *workspace, size_t workspace_bytes);

/* dQ (nullable), dK, dV [packed as q, k, v] from the forward's out and lse. */
ATTN_API attn_status attn_flash_varlen_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                                const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k, int64_t batch,
                                                const attn_sdpa_params *params, const attn_tensor *out,
                                                const attn_tensor *dout, const attn_tensor *lse, attn_tensor *dq,
                                                attn_tensor *dk, attn_tensor *dv, void *workspace,
                                                size_t workspace_bytes);

/* ---- attention kinds ---------------------------------------------------------------------
 * The attention an attn_mha computes (and so every layer, stack and model that holds one) is an
 * entry of one table: each kind supplies its forward, backward, exact weights (where it has them)
 * and incremental-decoding step. attn_attention_kind_count / _name / _help list the table (the
 * CLI's --attention takes these names). */
typedef enum attn_attention_kind {
    /* exact softmax attention, tiled (attn_flash_*): every mask, dropout, weights */
    ATTN_ATTENTION_FLASH = 0,
    /* softmax attention within a sliding window of `window` keys on each side that causality
     * leaves (query i sees keys i - window .. i when causal, |i - j| <= window otherwise), on the
     * flash kernel's window support: time and memory O(N window) */
    ATTN_ATTENTION_WINDOW = 1,
    /* Longformer (attn/longformer.h): the window kind plus global tokens, given per call as a
     * global_attention_mask [B, N]; a global token sees every key and every query sees it.
     * O(N (window + g)). Without a mask it is the window kind; decoding treats no token as global */
    ATTN_ATTENTION_LOCAL_GLOBAL = 2,
    /* linear attention (Katharopoulos 2020), phi = elu + 1, O(N): linear_attention.h */
    ATTN_ATTENTION_LINEAR = 3,
    /* Performer FAVOR+ (Choromanski 2021): softmax approximated by num_features positive
     * orthogonal random features drawn from seed, O(N m): linear_attention.h */
    ATTN_ATTENTION_PERFORMER = 4,
    /* the number of kinds (not a kind; = attn_attention_kind_count()) */
    ATTN_ATTENTION_KIND_COUNT
} attn_attention_kind;

typedef struct attn_attention_config {
    attn_attention_kind kind; /* default ATTN_ATTENTION_FLASH */
    int64_t window;           /* ATTN_ATTENTION_WINDOW, _LOCAL_GLOBAL: keys on each side, >= 0 */
    /* ATTN_ATTENTION_PERFORMER: random features m (0 = 256; at most 2^16) and the seed of their
     * projection W [m, head_dim] (attn_orf_draw(W, m, head_dim, seed), one W shared by every head
     * and layer that holds this config). W is a buffer, not a parameter: the forward, backward
     * and decoding steps redraw it from (seed, m, head_dim), so a redraw is a new seed
     * (attn_mha_redraw_features). */
    int64_t num_features;
    uint64_t seed;
    /* ATTN_ATTENTION_PERFORMER: an explicit projection used instead of the drawn one (NULL: drawn
     * from seed, as above): projection_heads x m x head_dim floats, row-major, W [Hw, m, d] of
     * linear_attention.h with m = num_features (256 when 0) and projection_heads (Hw) 1 (one W
     * shared by every head) or the number of query heads (one per head). Borrowed: it must stay
     * valid while a module holding this config runs (attn_mha copies the pointer, not the
     * floats). Like a drawn W it is a buffer: no gradient flows to it. projection_heads must be 0
     * when projection is NULL. Shapes are checked against the heads and head_dim of each call. */
    const float *projection;
    int64_t projection_heads;
} attn_attention_config;

/* kind ATTN_ATTENTION_FLASH, every option 0. */
ATTN_API attn_attention_config attn_attention_config_default(void);
/* ATTN_OK, or ATTN_ERR_INVALID_ARGUMENT naming the kind and the option out of range. */
ATTN_API attn_status attn_attention_config_check(const attn_attention_config *cfg);
/* The number of kinds; kinds are 0 .. count - 1. */
ATTN_API int attn_attention_kind_count(void);
/* Short name ("flash", "window") and a one-line description; NULL for an unknown kind. */
ATTN_API const char *attn_attention_kind_name(attn_attention_kind kind);
ATTN_API const char *attn_attention_kind_help(attn_attention_kind kind);
/* The kind of that name; ATTN_ERR_NOT_FOUND listing the names otherwise. */
ATTN_API attn_status attn_attention_kind_from_name(const char *name, attn_attention_kind *kind);
/* The attn_attention_config fields the kind reads, comma-separated ("window!", "num_features,seed",
 * "" for none); '!' marks one the caller must set. NULL for an unknown kind. */
ATTN_API const char *attn_attention_kind_options(attn_attention_kind kind);
/* Whether the kind can return exact attention weights (need_weights, attention capture). */
ATTN_API int attn_attention_kind_has_weights(attn_attention_kind kind);

/* ---- calling a kind directly ---------------------------------------------------------------
 * What attn_mha does once it has projected the heads, for benchmarks and for callers with their
 * own projections. Per-head views as attn_flash_*: Q [B, H, Nq, d], K [B, Hk, Nk, d],
 * V [B, Hk, Nk, dv], O [B, H, Nq, dv] (any strides; dk and dv of the backward with unit innermost
 * stride), the masks, causality, scale and dropout of params (NULL: attn_sdpa_params_default()).
 * global_mask [B, Nq] (true = a global token: it attends to every key and every query attends to
 * it; self-attention) only for ATTN_ATTENTION_LOCAL_GLOBAL, NULL otherwise. cfg is checked as
 * attn_attention_config_check does; a kind that cannot honour an option of params says so
 * (ATTN_ERR_UNSUPPORTED). */

/* Floats per (batch, head, query row) the forward keeps in stats for the backward (the softmax
 * kinds' log-sum-exp: 1; 0 for the others and for an unknown kind). */
ATTN_API int64_t attn_attention_kind_stats_per_row(attn_attention_kind kind);
/* Workspace bytes of attn_attention_forward / _backward on these views (the larger of the two);
 * 0 when an argument is invalid (attn_last_error() says which). */
ATTN_API size_t attn_attention_workspace_size(const attn_attention_config *cfg, const attn_tensor *q,
                                              const attn_tensor *k, const attn_tensor *v,
                                              const attn_sdpa_params *params, const attn_btensor *global_mask);
/* out = attention of the kind; stats [B * H * Nq * attn_attention_kind_stats_per_row] for a
 * backward (NULL when none follows). */
ATTN_API attn_status attn_attention_forward(const attn_attention_config *cfg, const attn_tensor *q,
                                            const attn_tensor *k, const attn_tensor *v, const attn_sdpa_params *params,
                                            const attn_btensor *global_mask, attn_tensor *out, float *stats,
                                            void *workspace, size_t workspace_bytes);
/* dq, dk, dv (overwritten) for the upstream gradient dout, from the forward's out and stats. */
ATTN_API attn_status attn_attention_backward(const attn_attention_config *cfg, const attn_tensor *q,
                                             const attn_tensor *k, const attn_tensor *v, const attn_sdpa_params *params,
                                             const attn_btensor *global_mask, const attn_tensor *out,
                                             const attn_tensor *dout, const float *stats, attn_tensor *dq,
                                             attn_tensor *dk, attn_tensor *dv, void *workspace, size_t workspace_bytes);

#ifdef __cplusplus
}
#endif
#endif
