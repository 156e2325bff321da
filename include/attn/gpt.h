/* attn gpt: a decoder-only (GPT-style) language model, with key/value caches for generation.
 * Memory, dropout and determinism: the module contract at the top of params.h. */
#ifndef ATTN_GPT_H
#define ATTN_GPT_H

#include "capture.h"
#include "core.h"
#include "layers.h"
#include "params.h"
#include "positions.h"
#include "precision.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- decoder-only (GPT-style) language model -----------------------------------------------
 *   x = tok_emb[tokens] (+ pos_emb[position])    learned positions, or RoPE inside self-attention
 *   x = layer_l(x), l < num_layers                pre-norm blocks (TransformerEncoderLayer with
 *                                                 norm_first): x + SA(norm1 x) causal, x + FF(norm2 x)
 *   logits = norm(x) W^T                          W = lm_head.weight [vocab, d], or tok_emb.weight
 *                                                 when the embeddings are tied
 * Parameters: tok_emb.weight, pos_emb.weight (learned positions), layers.N.self_attn.*,
 * layers.N.linear1.*, layers.N.linear2.*, layers.N.norm1.*, layers.N.norm2.*, norm.*, and
 * lm_head.weight unless tied (a tied model has no lm_head.weight entry: PyTorch's state_dict lists
 * the shared tensor under both names, load it non-strict or drop that key). Initialised as the
 * PyTorch modules (nn.Embedding N(0, 1), nn.Linear, LayerNorm). Positions start at 0 in a forward
 * and continue from the cache's length in a step. Dropout (training) inside the layers only. */
typedef enum attn_positions { ATTN_POSITIONS_LEARNED = 0, ATTN_POSITIONS_ROPE = 1 } attn_positions;

typedef struct attn_gpt_config {
    int64_t vocab_size, max_positions; /* learned positions: a forward or cache holds at most this */
    attn_layer_config layer;           /* norm_first is always on; default activation gelu */
    int64_t num_layers;
    float norm_eps; /* the final norm's (default 1e-5) */
    attn_positions positions;
    attn_rope_config rope; /* with ATTN_POSITIONS_ROPE (head_dim is filled in) */
    int tie_embeddings;
    attn_precision precision; /* compute precision (default fp32; see attn_precision) */
} attn_gpt_config;

ATTN_API attn_gpt_config attn_gpt_config_default(int64_t vocab_size, int64_t max_positions, int64_t d_model,
                                                 int64_t nhead, int64_t num_layers);

typedef struct attn_gpt_args {
    int64_t batch, n;
    const int64_t *tokens;           /* [B, n], each in [0, vocab_size) */
    const uint8_t *key_padding_mask; /* [B, n] PyTorch bool (true = padding), nullable */
    int training;
    uint64_t seed, offset;
    attn_capture *capture; /* nullable: layers.N.self_attn */
    /* Packed (padding-free) batches, as attn_layer_args' (layers.h): cu_seqlens int64 [batch + 1]
     * (0 first, nondecreasing), batch sequences of n = cu_seqlens[batch] tokens in all: tokens
     * [n], logits and dlogits [n, vocab_size]; sequence s is rows [cu_seqlens[s], cu_seqlens[s + 1])
     * with its positions (learned or RoPE) from 0, each row bitwise its batch-1 run's (parameter
     * gradients: the per-sequence ones summed in sequence order). Not with key_padding_mask or
     * capture (ATTN_ERR_UNSUPPORTED); NULL = the [B, n] layout. */
    const int64_t *cu_seqlens;
} attn_gpt_args;

typedef struct attn_gpt attn_gpt;

ATTN_API attn_status attn_gpt_create(const attn_gpt_config *cfg, attn_gpt **out);
ATTN_API void attn_gpt_free(attn_gpt *g);
ATTN_API const attn_params *attn_gpt_params(const attn_gpt *g);
ATTN_API size_t attn_gpt_saved_size(const attn_gpt *g, const attn_gpt_args *a);
ATTN_API size_t attn_gpt_workspace_size(const attn_gpt *g, const attn_gpt_args *a);
/* logits [B, n, vocab_size]. */
ATTN_API attn_status attn_gpt_forward(attn_gpt *g, const attn_gpt_args *a, float *logits, void *saved,
                                      size_t saved_bytes, void *workspace, size_t workspace_bytes);
/* Parameter gradients (accumulated) from dlogits [B, n, vocab_size]. */
ATTN_API attn_status attn_gpt_backward(attn_gpt *g, const attn_gpt_args *a, const float *dlogits, const void *saved,
                                       size_t saved_bytes, void *workspace, size_t workspace_bytes);

/* Generation: one self-attention cache per layer, in the caller's buffer. A step of n new tokens
 * (a prompt, then one at a time) gives the logits of those positions, equal to the last n rows of
 * attn_gpt_forward over the whole sequence (eval). */
typedef struct attn_gpt_cache attn_gpt_cache;
ATTN_API size_t attn_gpt_cache_size(const attn_gpt *g, int64_t batch, int64_t capacity);
ATTN_API attn_status attn_gpt_cache_init(attn_gpt *g, void *buffer, size_t bytes, int64_t batch, int64_t capacity,
                                         attn_gpt_cache **cache);
ATTN_API int64_t attn_gpt_cache_length(const attn_gpt_cache *cache);
ATTN_API size_t attn_gpt_step_workspace_size(const attn_gpt *g, int64_t batch, int64_t n, int64_t capacity);
/* tokens [B, n]; logits [B, n, vocab_size]. */
ATTN_API attn_status attn_gpt_forward_step(attn_gpt *g, attn_gpt_cache *cache, const int64_t *tokens, int64_t n,
                                           float *logits, void *workspace, size_t workspace_bytes);

#ifdef __cplusplus
}
#endif
#endif
