/* attn mha: multi-head attention modules: torch.nn.MultiheadAttention (packed or separate
 * projections), local + global attention, and the key/value caches of incremental decoding.
 * Memory, dropout and determinism: the module contract at the top of params.h. */
#ifndef ATTN_MHA_H
#define ATTN_MHA_H

#include "attention.h"
#include "capture.h"
#include "core.h"
#include "params.h"
#include "positions.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- multi-head attention: torch.nn.MultiheadAttention(batch_first=True) -----------------
 *   Q = query Wq^T + bq,  K = key Wk^T + bk,  V = value Wv^T + bv          (in-projections)
 *   K, V += a row bias_k / bias_v per batch (add_bias_kv), then a zero row (add_zero_attn)
 *   per head h:  O_h = softmax(Q_h K_h^T / sqrt(head_dim) + mask) V_h      (dropout on weights)
 *   out = concat_h(O_h) Wo^T + bo
 * Wq, Wk, Wv are the three row blocks of in_proj_weight [3E, E] when kdim == vdim == embed_dim,
 * else q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]; in_proj_bias [3E],
 * bias_k, bias_v [1, 1, E], out_proj.weight [E, E], out_proj.bias [E]. With separate_projections
 * the same function is stored as four nn.Linear layers (the layout of most hand-written attention
 * modules, the seed's W_q / W_k / W_v / W_o among them): q_proj.weight [E, E], q_proj.bias [E],
 * k_proj.weight [E, kdim], k_proj.bias [E], v_proj.weight [E, vdim], v_proj.bias [E], (bias_k,
 * bias_v,) out_proj.weight [E, E], out_proj.bias [E], in that order, each initialised as
 * nn.Linear (kaiming_uniform(a=sqrt(5)) for weights, i.e. U(+-1/sqrt(fan_in)), and biases
 * U(+-1/sqrt(fan_in))). Another module's names are reached through a name map, e.g.
 * {"q_proj.", "W_q."}, {"k_proj.", "W_k."}, {"v_proj.", "W_v."}, {"out_proj.", "W_o."}
 * (attn_params_load_mapped). */
typedef struct attn_mha_config {
    int64_t embed_dim, num_heads;   /* embed_dim divisible by num_heads */
    int64_t kdim, vdim;             /* 0 = embed_dim */
    int bias;                       /* in_proj_bias and out_proj.bias (default 1) */
    int add_bias_kv, add_zero_attn; /* default 0 */
    /* Store Wq, Wk, Wv, Wo as four nn.Linear layers q_proj, k_proj, v_proj, out_proj (see above)
     * instead of PyTorch's packed in_proj_weight / in_proj_bias. Default 0. */
    int separate_projections;
    float dropout; /* on the attention weights, in training (default 0) */
    /* Rotary position embedding of Q and K after the in-projection (not part of PyTorch's
     * MultiheadAttention: GPT-NeoX / Llama-style self-attention). rope.head_dim must be
     * embed_dim / num_heads. Positions: queries 0 .. Nq-1 and keys 0 .. Nk-1 in a forward; the
     * cached positions in a step. Not with add_bias_kv / add_zero_attn. Default off. */
    int use_rope;
    attn_rope_config rope;
    /* The attention computed per head (attention.h: flash, the default, or another kind of the
     * table). Kinds other than flash do not combine with add_bias_kv / add_zero_attn. */
    attn_attention_config attention;
} attn_mha_config;

ATTN_API attn_mha_config attn_mha_config_default(int64_t embed_dim, int64_t num_heads);

typedef struct attn_mha attn_mha;

ATTN_API attn_status attn_mha_create(const attn_mha_config *cfg, attn_mha **out);
ATTN_API void attn_mha_free(attn_mha *m);
ATTN_API const attn_params *attn_mha_params(const attn_mha *m);
ATTN_API const attn_mha_config *attn_mha_get_config(const attn_mha *m);
/* Redraw a Performer attention's random features: its projection W is drawn from
 * cfg.attention.seed on every call, so this sets that seed (a recurrent cache built with the old
 * features no longer matches them: reset it). ATTN_ERR_UNSUPPORTED for other kinds and for an explicit
 * attention.projection (the caller owns it: change its floats instead). */
ATTN_API attn_status attn_mha_redraw_features(attn_mha *m, uint64_t seed);

/* One call's inputs, batch-first and contiguous. Masks follow nn.MultiheadAttention: a boolean
 * mask's true (nonzero) means NOT allowed (the opposite of attn_sdpa_params), a float mask is added
 * to the scaled logits (may hold -inf); a float key_padding_mask is added too, also next to an
 * attn_mask (PyTorch 2.x; 1.13 mishandles that pair). They are converted at this boundary. A query
 * row whose every key is masked gets attention output 0 (so out = out_proj.bias), where PyTorch's
 * MultiheadAttention gives NaN. */
typedef struct attn_mha_args {
    int64_t batch, nq, nk;
    const float *query; /* [B, Nq, embed_dim] */
    const float *key;   /* [B, Nk, kdim] */
    const float *value; /* [B, Nk, vdim] */
    /* key_padding_mask [B, Nk]: bool (true = ignore this key) or float (added); at most one */
    const uint8_t *key_padding_mask;
    const float *key_padding_mask_float;
    /* attn_mask: bool (true = not allowed) or float (added); at most one. Shape [Nq, Nk], or
     * [B * num_heads, Nq, Nk] when attn_mask_3d (PyTorch's 3-D form, batch-major). */
    const uint8_t *attn_mask;
    const float *attn_mask_float;
    int attn_mask_3d;
    /* Causal mask over the Nk keys (key j allowed for query i when j <= i, PyTorch's tril); the
     * keys appended by add_bias_kv / add_zero_attn stay visible, as when PyTorch pads the causal
     * attn_mask. Combined with attn_mask when both are given (PyTorch treats is_causal as a hint
     * that attn_mask is causal). */
    int is_causal;
    /* Weights: [B, Nq, Nk'] averaged over heads, or [B, num_heads, Nq, Nk'] per head, where
     * Nk' = Nk + add_bias_kv + add_zero_attn; those applied to V (after dropout), exactly as
     * PyTorch returns them. Computed from the fused path row by row, never as a per-head N x N
     * matrix beyond the output itself. */
    int need_weights, average_attn_weights;
    /* Longformer's global_attention_mask [B, Nq] (self-attention): true = a global token, which
     * attends to every key and which every query attends to. Only for attention kinds that take
     * one (ATTN_ERR_UNSUPPORTED otherwise). */
    const uint8_t *global_attention_mask;
    int training;          /* dropout on only when set */
    uint64_t seed, offset; /* dropout stream: (seed, offset) */
    /* Attention capture (see attn_capture): this module's weights are recorded when a request
     * matches its name (empty for a bare module; layers and models name theirs). NULL = none. */
    attn_capture *capture;
    /* Packed (padding-free) batches, FlashAttention's varlen layout (attention.h): int64
     * cu_seqlens_q [batch + 1] (0 first, nondecreasing), NULL = the padded layout above. When set,
     * batch is the number of sequences, nq = cu_seqlens_q[batch] and nk = cu_seqlens_k[batch] are
     * the TOTAL row counts (not the longest sequence), query is [nq, E], key [nk, kdim], value
     * [nk, vdim], out / dquery [nq, E], dkey / dvalue as key / value; sequence s owns query rows
     * [cu_seqlens_q[s], cu_seqlens_q[s + 1]) and attends only to key rows [cu_seqlens_k[s],
     * cu_seqlens_k[s + 1]) (empty sequences allowed: a query with no keys gets attention output 0).
     * cu_seqlens_k NULL = cu_seqlens_q (self-attention). The projections run on the total rows
     * only; attention is attn_flash_varlen_* (each sequence bitwise its batch-1 padded run), with
     * is_causal top-left per sequence and dropout for sequence s drawn from (seed, offset + s), as
     * the batch-1 call at offset + s draws: a caller making several packed calls with one seed
     * advances offset by at least batch between them. bf16 precision applies as in the padded
     * layout. RoPE (use_rope) rotates each row by its position within its sequence, from 0. Only
     * the flash and window kinds; refused (ATTN_ERR_UNSUPPORTED, naming the field): attn_mask*,
     * key_padding_mask*, global_attention_mask, need_weights, capture (also an ambient one),
     * add_bias_kv / add_zero_attn. */
    const int64_t *cu_seqlens_q, *cu_seqlens_k;
} attn_mha_args;

/* Zero masks, no causality, no weights, eval mode; the caller fills the rest. */
ATTN_API attn_mha_args attn_mha_args_default(void);

ATTN_API size_t attn_mha_saved_size(const attn_mha *m, const attn_mha_args *a);
ATTN_API size_t attn_mha_workspace_size(const attn_mha *m, const attn_mha_args *a);

/* out [B, Nq, embed_dim]; weights as described (required when need_weights, else ignored);
 * saved NULL for inference. */
ATTN_API attn_status attn_mha_forward(attn_mha *m, const attn_mha_args *a, float *out, float *weights, void *saved,
                                      size_t saved_bytes, void *workspace, size_t workspace_bytes);
/* dquery [B, Nq, E], dkey [B, Nk, kdim], dvalue [B, Nk, vdim], each nullable, are overwritten;
 * two or three of them may be the same buffer (self-attention), which then receives their sum.
 * Parameter gradients are accumulated. */
ATTN_API attn_status attn_mha_backward(attn_mha *m, const attn_mha_args *a, const float *dout, float *dquery,
                                       float *dkey, float *dvalue, const void *saved, size_t saved_bytes,
                                       void *workspace, size_t workspace_bytes);

/* ---- local + global attention (the seed's LocalGlobalAttention, its mask corrected) ----------
 * Self-attention over x [B, N, d_model] by two multi-head attentions whose outputs are summed,
 * then projected:
 *   out = projection(global_attn(x, x, x) + local_attn(x, x, x))
 * global_attn attends to every key; local_attn is the window kind (attention.h): query i attends
 * to key j when |i - j| <= local_window, at O(N local_window) cost. Both attentions use separate
 * projections (attn_mha_config.separate_projections). Parameters, in the seed's (PyTorch's)
 * order: local_attn.{q,k,v,out}_proj.{weight,bias}, global_attn.{q,k,v,out}_proj.{weight,bias},
 * projection.weight [d, d], projection.bias [d], initialised as nn.Linear; the seed's names
 * (local_attn.W_q.weight, ...) are reached with the name map {"*.q_proj.", "*.W_q."},
 * {"*.k_proj.", "*.W_k."}, {"*.v_proj.", "*.W_v."}, {"*.out_proj.", "*.W_o."}.
 * Dropout (training) on the attention weights: global_attn's from (seed, offset), local_attn's
 * from (seed, offset + 1). Attention capture names the two "global_attn" and "local_attn". */
typedef struct attn_local_global_config {
    int64_t d_model, num_heads; /* d_model divisible by num_heads */
    int64_t local_window;       /* keys on each side, >= 0 */
    float dropout;              /* on both attentions' weights (default 0.1, the seed's) */
} attn_local_global_config;

ATTN_API attn_local_global_config attn_local_global_config_default(int64_t d_model, int64_t num_heads,
                                                                   int64_t local_window);

typedef struct attn_local_global_args {
    int64_t batch, n;
    const float *x; /* [B, n, d_model] */
    int training;
    uint64_t seed, offset;
    attn_capture *capture; /* nullable: global_attn, local_attn */
} attn_local_global_args;

/* Eval mode, no capture; the caller fills batch, n and x. */
ATTN_API attn_local_global_args attn_local_global_args_default(void);

typedef struct attn_local_global attn_local_global;

ATTN_API attn_status attn_local_global_create(const attn_local_global_config *cfg, attn_local_global **out);
ATTN_API void attn_local_global_free(attn_local_global *m);
ATTN_API const attn_params *attn_local_global_params(const attn_local_global *m);
ATTN_API const attn_local_global_config *attn_local_global_get_config(const attn_local_global *m);
ATTN_API size_t attn_local_global_saved_size(const attn_local_global *m, const attn_local_global_args *a);
ATTN_API size_t attn_local_global_workspace_size(const attn_local_global *m, const attn_local_global_args *a);
/* out [B, n, d_model]; saved NULL for inference. */
ATTN_API attn_status attn_local_global_forward(attn_local_global *m, const attn_local_global_args *a, float *out,
                                               void *saved, size_t saved_bytes, void *workspace,
                                               size_t workspace_bytes);
/* dx [B, n, d_model] overwritten (nullable); parameter gradients accumulated. */
ATTN_API attn_status attn_local_global_backward(attn_local_global *m, const attn_local_global_args *a,
                                                const float *dout, float *dx, const void *saved, size_t saved_bytes,
                                                void *workspace, size_t workspace_bytes);

/* ---- incremental decoding: key/value caches -------------------------------------------------
 * A cache keeps the projected keys and values of the positions seen so far, [B, capacity, E]
 * each, in caller memory (attn_kv_cache_size bytes), so that decoding token t costs O(t): the new
 * query rows attend to the cached rows instead of recomputing the prefix. A step gives the same
 * rows a full causal forward over all positions gives (eval mode: no dropout). */
typedef struct attn_kv_cache {
    float *k, *v; /* [batch, capacity, dim], inside the caller's buffer */
    int64_t batch, capacity, dim;
    int64_t length; /* positions filled */
    /* A recurrent attention kind's decoding state instead of keys and values (k = v = NULL);
     * NULL for softmax kinds. Set up by attn_mha_cache_init. */
    float *state;
    size_t state_floats;
} attn_kv_cache;

ATTN_API size_t attn_kv_cache_size(int64_t batch, int64_t capacity, int64_t dim);
ATTN_API attn_status attn_kv_cache_init(attn_kv_cache *c, void *buffer, size_t bytes, int64_t batch, int64_t capacity,
                                        int64_t dim);
/* Forget every position (length 0; a recurrent state is zeroed). */
ATTN_API attn_status attn_kv_cache_reset(attn_kv_cache *c);

/* The cache a module's attention kind decodes with: keys and values (as above) for softmax kinds,
 * a recurrent state for kinds that have one. attn_mha_cache_size(m, ...) bytes of caller memory. */
ATTN_API size_t attn_mha_cache_size(const attn_mha *m, int64_t batch, int64_t capacity);
ATTN_API attn_status attn_mha_cache_init(const attn_mha *m, attn_kv_cache *c, void *buffer, size_t bytes, int64_t batch,
                                         int64_t capacity);

/* Cross-attention: fill the cache with the projections of key [B, nk, kdim] and value
 * [B, nk, vdim] (the encoder's memory), once; length = nk. */
ATTN_API size_t attn_mha_cache_fill_workspace_size(const attn_mha *m, int64_t batch, int64_t nk);
ATTN_API attn_status attn_mha_cache_fill(attn_mha *m, attn_kv_cache *c, const float *key, const float *value,
                                         int64_t nk, void *workspace, size_t workspace_bytes);

/* One step: n new query rows. With append (self-attention; needs kdim == vdim == embed_dim) the
 * query rows are also projected to keys and values and appended to the cache first. With causal,
 * new row i sees cache positions j <= length - n + i (length after the append), i.e. a causal
 * mask over all positions. key_padding_mask [B, length] (PyTorch's bool, true = ignore) is
 * optional. Not supported with add_bias_kv / add_zero_attn (ATTN_ERR_UNSUPPORTED). */
typedef struct attn_mha_step_args {
    int64_t batch, n;
    const float *query; /* [B, n, embed_dim] */
    int append, causal;
    const uint8_t *key_padding_mask;
} attn_mha_step_args;

ATTN_API size_t attn_mha_step_workspace_size(const attn_mha *m, int64_t batch, int64_t n, int64_t length);
/* out [B, n, embed_dim]. */
ATTN_API attn_status attn_mha_forward_step(attn_mha *m, attn_kv_cache *c, const attn_mha_step_args *a, float *out,
                                           void *workspace, size_t workspace_bytes);

#ifdef __cplusplus
}
#endif
#endif
