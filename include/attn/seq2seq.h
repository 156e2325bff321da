/* attn seq2seq: the encoder-decoder model (the seed's Transformer: token embeddings, sinusoidal
 * positions, nn.Transformer, output projection) with step-by-step generation, and the seed's
 * TransformerEncoder over tokens (attn_token_encoder). Memory, dropout and determinism: the module
 * contract at the top of params.h. */
#ifndef ATTN_SEQ2SEQ_H
#define ATTN_SEQ2SEQ_H

#include "capture.h"
#include "core.h"
#include "layers.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the encoder-decoder model: embeddings, positions, nn.Transformer, output projection ------
 * The seed's Transformer, built on nn.Transformer:
 *   xs = src_embedding[src] * sqrt(d_model) + pe[0 .. n_src)      (dropout in training)
 *   xt = tgt_embedding[tgt] * sqrt(d_model) + pe[0 .. n_tgt)
 *   y  = transformer(xs, xt; src key padding also masks the memory, causal target)
 *   logits = y output_projection.weight^T + output_projection.bias
 * with pe the sinusoidal table (attn_sinusoidal_table, positions.h). Parameters:
 * src_embedding.weight, tgt_embedding.weight (N(0, 1), nn.Embedding), transformer.encoder.*,
 * transformer.decoder.* (nn.Transformer's names and initialisation), output_projection.weight /
 * .bias (nn.Linear).
 * The two positional-dropout sites draw from (seed, offset + 8 (enc + dec layers) + 0 / 1). */
typedef struct attn_seq2seq_config {
    int64_t src_vocab, tgt_vocab;
    int64_t max_len; /* positions in the table: n_src, n_tgt <= max_len */
    attn_transformer_config transformer;
} attn_seq2seq_config;

ATTN_API attn_seq2seq_config attn_seq2seq_config_default(int64_t src_vocab, int64_t tgt_vocab, int64_t d_model,
                                                         int64_t nhead, int64_t num_layers);

typedef struct attn_seq2seq_args {
    int64_t batch, n_src, n_tgt;
    const int64_t *src, *tgt;            /* token ids [B, n_src], [B, n_tgt] */
    const uint8_t *src_key_padding_mask; /* [B, n_src] PyTorch bool (true = padding), nullable */
    const uint8_t *tgt_key_padding_mask; /* [B, n_tgt], nullable */
    int tgt_causal;                      /* default 1 */
    int training;
    uint64_t seed, offset;
    attn_capture *capture; /* nullable: transformer.encoder.layers.N.self_attn, ... */
} attn_seq2seq_args;

ATTN_API attn_seq2seq_args attn_seq2seq_args_default(void);

typedef struct attn_seq2seq attn_seq2seq;

ATTN_API attn_status attn_seq2seq_create(const attn_seq2seq_config *cfg, attn_seq2seq **out);
ATTN_API void attn_seq2seq_free(attn_seq2seq *m);
ATTN_API const attn_params *attn_seq2seq_params(const attn_seq2seq *m);
ATTN_API attn_transformer *attn_seq2seq_transformer(attn_seq2seq *m);
/* The configuration the model was created with (NULL for NULL). */
ATTN_API const attn_seq2seq_config *attn_seq2seq_get_config(const attn_seq2seq *m);
ATTN_API size_t attn_seq2seq_saved_size(const attn_seq2seq *m, const attn_seq2seq_args *a);
ATTN_API size_t attn_seq2seq_workspace_size(const attn_seq2seq *m, const attn_seq2seq_args *a);
/* logits [B, n_tgt, tgt_vocab]; saved NULL for inference. */
ATTN_API attn_status attn_seq2seq_forward(attn_seq2seq *m, const attn_seq2seq_args *a, float *logits, void *saved,
                                          size_t saved_bytes, void *workspace, size_t workspace_bytes);
/* Parameter gradients (accumulated) from dlogits [B, n_tgt, tgt_vocab]. */
ATTN_API attn_status attn_seq2seq_backward(attn_seq2seq *m, const attn_seq2seq_args *a, const float *dlogits,
                                           const void *saved, size_t saved_bytes, void *workspace,
                                           size_t workspace_bytes);

/* Generation: encode the source once, then decode step by step over the decoder's key/value caches
 * (attn_decoder_cache: one self-attention cache per decoder layer, capacity target positions, and
 * one cross-attention cache per layer filled from the memory at init). Eval mode: no dropout.
 *   memory = attn_seq2seq_encode(src)            [B, n_src, d_model], the encoder stack's output
 *   attn_seq2seq_cache_init(memory)              the cache object lives at the start of the buffer
 *   attn_seq2seq_forward_step(tgt [B, n])        positions length .. length + n - 1
 * A step gives logits [B, n, tgt_vocab] equal to the last n rows of attn_seq2seq_forward over the
 * whole target so far (tgt_causal, no tgt_key_padding_mask, the same src_key_padding_mask): a
 * prompt of several tokens, then one at a time. src_key_padding_mask [B, n_src] (PyTorch's bool,
 * nullable) masks the encoder's self-attention in encode and the cross-attention in every step;
 * cache_init keeps it by pointer, so it must outlive the cache's use. */
ATTN_API size_t attn_seq2seq_encode_workspace_size(const attn_seq2seq *m, int64_t batch, int64_t n_src);
/* src [B, n_src] token ids; memory [B, n_src, d_model]. */
ATTN_API attn_status attn_seq2seq_encode(attn_seq2seq *m, const int64_t *src, int64_t batch, int64_t n_src,
                                         const uint8_t *src_key_padding_mask, float *memory, void *workspace,
                                         size_t workspace_bytes);

typedef struct attn_seq2seq_cache attn_seq2seq_cache;

/* capacity: target positions the cache holds (<= max_len); n_src: the memory's length. */
ATTN_API size_t attn_seq2seq_cache_size(const attn_seq2seq *m, int64_t batch, int64_t capacity, int64_t n_src);
/* workspace: attn_seq2seq_step_workspace_size(m, batch, n, capacity, n_src) for any n >= 1. The
 * cache refers to the model (a step with another model is an error) and is reset by a new init. */
ATTN_API attn_status attn_seq2seq_cache_init(attn_seq2seq *m, void *buffer, size_t bytes, int64_t batch,
                                             int64_t capacity, const float *memory, int64_t n_src,
                                             const uint8_t *src_key_padding_mask, void *workspace,
                                             size_t workspace_bytes, attn_seq2seq_cache **cache);
/* Target positions decoded so far. */
ATTN_API int64_t attn_seq2seq_cache_length(const attn_seq2seq_cache *cache);
ATTN_API size_t attn_seq2seq_step_workspace_size(const attn_seq2seq *m, int64_t batch, int64_t n, int64_t capacity,
                                                 int64_t n_src);
/* tgt [B, n] token ids at positions length .. length + n - 1 (length + n <= capacity);
 * logits [B, n, tgt_vocab]. */
ATTN_API attn_status attn_seq2seq_forward_step(attn_seq2seq *m, attn_seq2seq_cache *cache, const int64_t *tgt,
                                               int64_t n, float *logits, void *workspace, size_t workspace_bytes);

/* The seed's TransformerEncoder over tokens: x = embedding[tokens] * sqrt(d_model) + pe (dropout in
 * training), then the encoder stack with its final norm. Parameters: embedding.weight,
 * layers.N.*, norm.* (PyTorch's TransformerEncoderLayer names inside). The positional dropout
 * draws from (seed, offset + 8 num_layers). */
typedef struct attn_token_encoder_config {
    int64_t vocab, max_len;
    attn_stack_config stack; /* stack.norm selects the final norm (default on) */
} attn_token_encoder_config;

ATTN_API attn_token_encoder_config attn_token_encoder_config_default(int64_t vocab, int64_t d_model, int64_t nhead,
                                                                     int64_t num_layers);

typedef struct attn_token_encoder_args {
    int64_t batch, n;
    const int64_t *tokens;           /* [B, n] */
    const uint8_t *key_padding_mask; /* [B, n] PyTorch bool (true = padding), nullable */
    int is_causal;
    int training;
    uint64_t seed, offset;
    attn_capture *capture; /* nullable: layers.N.self_attn */
} attn_token_encoder_args;

typedef struct attn_token_encoder attn_token_encoder;

ATTN_API attn_status attn_token_encoder_create(const attn_token_encoder_config *cfg, attn_token_encoder **out);
ATTN_API void attn_token_encoder_free(attn_token_encoder *m);
ATTN_API const attn_params *attn_token_encoder_params(const attn_token_encoder *m);
ATTN_API size_t attn_token_encoder_saved_size(const attn_token_encoder *m, const attn_token_encoder_args *a);
ATTN_API size_t attn_token_encoder_workspace_size(const attn_token_encoder *m, const attn_token_encoder_args *a);
/* out [B, n, d_model]; saved NULL for inference. */
ATTN_API attn_status attn_token_encoder_forward(attn_token_encoder *m, const attn_token_encoder_args *a, float *out,
                                                void *saved, size_t saved_bytes, void *workspace,
                                                size_t workspace_bytes);
/* Parameter gradients (accumulated) from dout [B, n, d_model]. */
ATTN_API attn_status attn_token_encoder_backward(attn_token_encoder *m, const attn_token_encoder_args *a,
                                                 const float *dout, const void *saved, size_t saved_bytes,
                                                 void *workspace, size_t workspace_bytes);

#ifdef __cplusplus
}
#endif
#endif
