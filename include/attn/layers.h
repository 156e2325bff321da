/* attn layers: linear layers, torch.nn.TransformerEncoderLayer / TransformerDecoderLayer, their
 * stacks TransformerEncoder / TransformerDecoder (with key/value caches for step-by-step
 * decoding) and torch.nn.Transformer. Memory, dropout and determinism: the module contract at the
 * top of params.h. */
#ifndef ATTN_LAYERS_H
#define ATTN_LAYERS_H

#include "attention.h"
#include "capture.h"
#include "core.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- linear: y = x W^T + b (torch.nn.functional.linear) --------------------------------------
 * x [rows, in], W [out, in] (PyTorch's layout), b [out] or NULL, y [rows, out]; all contiguous. */
ATTN_API size_t attn_linear_workspace_size(int64_t rows, int64_t in_features, int64_t out_features);
ATTN_API attn_status attn_linear_forward(const float *x, const float *weight, const float *bias, float *y, int64_t rows,
                                         int64_t in_features, int64_t out_features, void *workspace,
                                         size_t workspace_bytes);
/* dx = dy W (nullable; overwritten, or added to when accumulate_dx), dweight += dy^T x and
 * dbias += column sums of dy (each nullable). dx must not alias x, dy or weight. */
ATTN_API attn_status attn_linear_backward(const float *x, const float *weight, const float *dy, float *dx,
                                          int accumulate_dx, float *dweight, float *dbias, int64_t rows,
                                          int64_t in_features, int64_t out_features, void *workspace,
                                          size_t workspace_bytes);

/* ---- transformer layers, stacks and nn.Transformer -----------------------------------------
 * torch.nn.TransformerEncoderLayer / TransformerDecoderLayer (batch_first=True), their stacks
 * TransformerEncoder / TransformerDecoder and torch.nn.Transformer, forward and backward, with
 * PyTorch's state_dict names (self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1.*,
 * norm2.*, norm3.*; layers.N.* and norm.* for stacks; encoder.* and decoder.* for Transformer).
 *
 * Encoder layer, post-norm (norm_first = 0, PyTorch's default) and pre-norm:
 *   x = norm1(x + SA(x)),      x = norm2(x + FF(x))           post-norm
 *   x = x + SA(norm1(x)),      x = x + FF(norm2(x))           pre-norm
 * Decoder layer adds cross-attention CA over `memory` between the two (norm2; FF uses norm3):
 *   x = norm1(x + SA(x)),  x = norm2(x + CA(x, memory)),  x = norm3(x + FF(x))   (or pre-norm)
 * with SA(x) = dropout1(self_attn(x, x, x)), CA(x, m) = dropout2(multihead_attn(x, m, m)),
 * FF(x) = dropout(2|3)(linear2(dropout(activation(linear1(x))))).
 * Dropout sites of one layer call draw from (seed, offset + s): self-attention weights s = 0,
 * dropout1 1; decoder: cross-attention weights 2, dropout2 3, feed-forward dropout 4, dropout3 5;
 * encoder: feed-forward dropout 2, dropout2 3. Layer l of a stack uses offset + 8 l; in
 * nn.Transformer the decoder's layers follow the encoder's (offset + 8 (num_encoder_layers + l)).
 * Initialisation as PyTorch: nn.Linear / MultiheadAttention defaults inside layers and stacks;
 * nn.Transformer re-initialises every matrix with xavier_uniform (its _reset_parameters). */
/* GELU_TANH: GELU's tanh approximation (F.gelu(approximate="tanh"), Hugging Face's "gelu_new"). */
typedef enum attn_activation {
    ATTN_ACTIVATION_RELU = 0,
    ATTN_ACTIVATION_GELU = 1,
    ATTN_ACTIVATION_GELU_TANH = 2
} attn_activation;

typedef struct attn_layer_config {
    int64_t d_model, nhead;
    int64_t dim_feedforward;    /* default 2048 */
    float dropout;              /* default 0.1 (active only in training) */
    attn_activation activation; /* default relu; gelu is the exact (erf) form, as F.gelu */
    float layer_norm_eps;       /* default 1e-5 */
    int norm_first;             /* default 0 (post-norm) */
    /* The self-attention's kind (attention.h; default flash). Cross-attention is always exact. */
    attn_attention_config attention;
} attn_layer_config;

ATTN_API attn_layer_config attn_layer_config_default(int64_t d_model, int64_t nhead);

/* Masks of one attention in PyTorch's convention (see attn_mha_args, mha.h): boolean true = not
 * allowed, float added; attn_mask [Nq, Nk] or [B * nhead, Nq, Nk] (attn_mask_3d); key_padding_mask
 * [B, Nk]. */
typedef struct attn_masks {
    const uint8_t *attn_mask;
    const float *attn_mask_float;
    int attn_mask_3d;
    const uint8_t *key_padding_mask;
    const float *key_padding_mask_float;
    int is_causal;                        /* PyTorch's src_is_causal / tgt_is_causal (see attn_mha_args) */
    const uint8_t *global_attention_mask; /* [B, n] (see attn_mha_args), self-attention only */
} attn_masks;

/* One call of a layer or stack. Encoder: x = src, self_masks = src_mask / src_key_padding_mask.
 * Decoder: x = tgt, self_masks = tgt_*, memory [B, n_memory, d_model] with memory_masks =
 * memory_mask / memory_key_padding_mask. */
typedef struct attn_layer_args {
    int64_t batch, n;
    const float *x; /* [B, n, d_model] */
    attn_masks self_masks;
    int64_t n_memory;
    const float *memory;
    attn_masks memory_masks;
    int training;
    uint64_t seed, offset;
    attn_capture *capture; /* nullable: modules named self_attn, multihead_attn */
    /* Packed (padding-free) batches (attn_mha_args' cu_seqlens_q, mha.h): cu_seqlens int64
     * [batch + 1] (0 first, nondecreasing), NULL = the padded layout. When set, batch is the
     * number of sequences and n = cu_seqlens[batch] the TOTAL rows: x, out, dx [n, d_model];
     * every row-wise op (linear, norm, activation, residual) runs on the n real rows only and
     * self-attention is per sequence (self_masks.is_causal: causal within each sequence; the
     * other masks are refused, the packing is the key padding mask; so is capture). A decoder
     * needs cu_seqlens_memory [batch + 1] too (memory, dmemory [n_memory = its last entry,
     * d_model]): sequence s cross-attends to memory rows [cu_seqlens_memory[s],
     * cu_seqlens_memory[s + 1]). Dropout streams of a packed call: site k of the layer (the list
     * above) draws for sequence s from (seed, offset + batch k + s), the attention weights as the
     * varlen kernel's offset + s rule; layer l of a stack from offset + 8 batch l. So a packed
     * batch of one sequence draws exactly what the padded batch-1 call draws, and no two sites or
     * sequences share a stream. */
    const int64_t *cu_seqlens, *cu_seqlens_memory;
} attn_layer_args;

ATTN_API attn_layer_args attn_layer_args_default(void);

typedef struct attn_encoder_layer attn_encoder_layer;
typedef struct attn_decoder_layer attn_decoder_layer;

ATTN_API attn_status attn_encoder_layer_create(const attn_layer_config *cfg, attn_encoder_layer **out);
ATTN_API void attn_encoder_layer_free(attn_encoder_layer *l);
ATTN_API const attn_params *attn_encoder_layer_params(const attn_encoder_layer *l);
ATTN_API size_t attn_encoder_layer_saved_size(const attn_encoder_layer *l, const attn_layer_args *a);
ATTN_API size_t attn_encoder_layer_workspace_size(const attn_encoder_layer *l, const attn_layer_args *a);
/* out [B, n, d_model]; saved NULL for inference. */
ATTN_API attn_status attn_encoder_layer_forward(attn_encoder_layer *l, const attn_layer_args *a, float *out,
                                                void *saved, size_t saved_bytes, void *workspace,
                                                size_t workspace_bytes);
/* dx [B, n, d_model] overwritten (nullable); parameter gradients accumulated. */
ATTN_API attn_status attn_encoder_layer_backward(attn_encoder_layer *l, const attn_layer_args *a, const float *dout,
                                                 float *dx, const void *saved, size_t saved_bytes, void *workspace,
                                                 size_t workspace_bytes);

ATTN_API attn_status attn_decoder_layer_create(const attn_layer_config *cfg, attn_decoder_layer **out);
ATTN_API void attn_decoder_layer_free(attn_decoder_layer *l);
ATTN_API const attn_params *attn_decoder_layer_params(const attn_decoder_layer *l);
ATTN_API size_t attn_decoder_layer_saved_size(const attn_decoder_layer *l, const attn_layer_args *a);
ATTN_API size_t attn_decoder_layer_workspace_size(const attn_decoder_layer *l, const attn_layer_args *a);
ATTN_API attn_status attn_decoder_layer_forward(attn_decoder_layer *l, const attn_layer_args *a, float *out,
                                                void *saved, size_t saved_bytes, void *workspace,
                                                size_t workspace_bytes);
/* dx [B, n, d_model] and dmemory [B, n_memory, d_model] overwritten (each nullable). */
ATTN_API attn_status attn_decoder_layer_backward(attn_decoder_layer *l, const attn_layer_args *a, const float *dout,
                                                 float *dx, float *dmemory, const void *saved, size_t saved_bytes,
                                                 void *workspace, size_t workspace_bytes);

/* Stacks: num_layers independent copies of the layer (PyTorch deep-copies the layer it is given),
 * then LayerNorm(d_model, eps = norm_eps) when norm is set. */
typedef struct attn_stack_config {
    attn_layer_config layer;
    int64_t num_layers;
    int norm;       /* final LayerNorm "norm.*" (default 1) */
    float norm_eps; /* default 1e-5 (nn.LayerNorm's default) */
} attn_stack_config;

ATTN_API attn_stack_config attn_stack_config_default(int64_t d_model, int64_t nhead, int64_t num_layers);

typedef struct attn_encoder attn_encoder;
typedef struct attn_decoder attn_decoder;

ATTN_API attn_status attn_encoder_create(const attn_stack_config *cfg, attn_encoder **out);
ATTN_API void attn_encoder_free(attn_encoder *e);
ATTN_API const attn_params *attn_encoder_params(const attn_encoder *e);
ATTN_API size_t attn_encoder_saved_size(const attn_encoder *e, const attn_layer_args *a);
ATTN_API size_t attn_encoder_workspace_size(const attn_encoder *e, const attn_layer_args *a);
ATTN_API attn_status attn_encoder_forward(attn_encoder *e, const attn_layer_args *a, float *out, void *saved,
                                          size_t saved_bytes, void *workspace, size_t workspace_bytes);
ATTN_API attn_status attn_encoder_backward(attn_encoder *e, const attn_layer_args *a, const float *dout, float *dx,
                                           const void *saved, size_t saved_bytes, void *workspace,
                                           size_t workspace_bytes);

ATTN_API attn_status attn_decoder_create(const attn_stack_config *cfg, attn_decoder **out);
ATTN_API void attn_decoder_free(attn_decoder *d);
ATTN_API const attn_params *attn_decoder_params(const attn_decoder *d);
ATTN_API size_t attn_decoder_saved_size(const attn_decoder *d, const attn_layer_args *a);
ATTN_API size_t attn_decoder_workspace_size(const attn_decoder *d, const attn_layer_args *a);
ATTN_API attn_status attn_decoder_forward(attn_decoder *d, const attn_layer_args *a, float *out, void *saved,
                                          size_t saved_bytes, void *workspace, size_t workspace_bytes);
ATTN_API attn_status attn_decoder_backward(attn_decoder *d, const attn_layer_args *a, const float *dout, float *dx,
                                           float *dmemory, const void *saved, size_t saved_bytes, void *workspace,
                                           size_t workspace_bytes);

/* torch.nn.Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward,
 * dropout, activation, layer_norm_eps, batch_first=True, norm_first): an encoder stack and a
 * decoder stack, each with its final norm (eps = layer_norm_eps). */
typedef struct attn_transformer_config {
    attn_layer_config layer;                        /* d_model default 512, nhead 8 */
    int64_t num_encoder_layers, num_decoder_layers; /* default 6, 6 */
} attn_transformer_config;

ATTN_API attn_transformer_config attn_transformer_config_default(void);

/* src [B, n_src, d], tgt [B, n_tgt, d]; src_masks -> the encoder's self-attention (src_mask,
 * src_key_padding_mask), tgt_masks -> the decoder's self-attention (tgt_mask,
 * tgt_key_padding_mask), memory_masks -> its cross-attention (memory_mask,
 * memory_key_padding_mask). */
typedef struct attn_transformer_args {
    int64_t batch, n_src, n_tgt;
    const float *src, *tgt;
    attn_masks src_masks, tgt_masks, memory_masks;
    int training;
    uint64_t seed, offset;
    attn_capture *capture; /* nullable: encoder.layers.N.self_attn, decoder.layers.N.* */
} attn_transformer_args;

ATTN_API attn_transformer_args attn_transformer_args_default(void);

typedef struct attn_transformer attn_transformer;

ATTN_API attn_status attn_transformer_create(const attn_transformer_config *cfg, attn_transformer **out);
ATTN_API void attn_transformer_free(attn_transformer *t);
ATTN_API const attn_params *attn_transformer_params(const attn_transformer *t);
ATTN_API size_t attn_transformer_saved_size(const attn_transformer *t, const attn_transformer_args *a);
ATTN_API size_t attn_transformer_workspace_size(const attn_transformer *t, const attn_transformer_args *a);
/* out [B, n_tgt, d_model]. */
ATTN_API attn_status attn_transformer_forward(attn_transformer *t, const attn_transformer_args *a, float *out,
                                              void *saved, size_t saved_bytes, void *workspace, size_t workspace_bytes);
/* dsrc [B, n_src, d], dtgt [B, n_tgt, d] overwritten (each nullable). */
ATTN_API attn_status attn_transformer_backward(attn_transformer *t, const attn_transformer_args *a, const float *dout,
                                               float *dsrc, float *dtgt, const void *saved, size_t saved_bytes,
                                               void *workspace, size_t workspace_bytes);

/* ---- incremental decoding of decoder stacks (the key/value caches themselves: mha.h) -------- */
/* Decoder stacks: one self-attention cache per layer (capacity positions) and one cross-attention
 * cache per layer filled from memory at init. The cache object lives at the start of the caller's
 * buffer. Each step runs the n new target positions through every layer (causal self-attention
 * over the cache, cross-attention over memory) and the final norm: out equals the last n rows of
 * attn_decoder_forward over all positions with tgt_masks.is_causal (eval). */
typedef struct attn_decoder_cache attn_decoder_cache;

ATTN_API size_t attn_decoder_cache_size(const attn_decoder *d, int64_t batch, int64_t capacity, int64_t n_memory);
/* memory [B, n_memory, d_model]; memory_key_padding_mask [B, n_memory] (PyTorch's bool,
 * nullable) is kept by pointer and used by every step. workspace: attn_decoder_step_workspace_size
 * for n = n_memory suffices. */
ATTN_API attn_status attn_decoder_cache_init(attn_decoder *d, void *buffer, size_t bytes, int64_t batch,
                                             int64_t capacity, const float *memory, int64_t n_memory,
                                             const uint8_t *memory_key_padding_mask, void *workspace,
                                             size_t workspace_bytes, attn_decoder_cache **cache);
/* Positions decoded so far. */
ATTN_API int64_t attn_decoder_cache_length(const attn_decoder_cache *cache);
ATTN_API size_t attn_decoder_step_workspace_size(const attn_decoder *d, int64_t batch, int64_t n, int64_t capacity,
                                                 int64_t n_memory);
/* tgt [B, n, d_model] at positions length .. length + n - 1; out [B, n, d_model]. */
ATTN_API attn_status attn_decoder_forward_step(attn_decoder *d, attn_decoder_cache *cache, const float *tgt, int64_t n,
                                               float *out, void *workspace, size_t workspace_bytes);

/* The two stacks of a Transformer (for encode-once, decode-step-by-step generation: memory =
 * attn_encoder_forward(encoder), then attn_decoder_cache_init / attn_decoder_forward_step). */
ATTN_API attn_encoder *attn_transformer_encoder(attn_transformer *t);
ATTN_API attn_decoder *attn_transformer_decoder(attn_transformer *t);

#ifdef __cplusplus
}
#endif
#endif
