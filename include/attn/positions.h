/* attn positions: positional encodings (sinusoidal, learned, RoPE, ALiBi slopes) and learned
 * embeddings (torch.nn.Embedding). Memory, dropout and determinism: the module contract at the
 * top of params.h. */
#ifndef ATTN_POSITIONS_H
#define ATTN_POSITIONS_H

#include "core.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- positional encodings ------------------------------------------------------------------
 * Sinusoidal (Vaswani et al.), as the seed's PositionalEncoding:
 *   div[i] = exp(2i * (-ln(10000) / d)),  pe[p, 2i] = sin(p div[i]),  pe[p, 2i+1] = cos(p div[i])
 * evaluated in double and rounded once (PyTorch's float32 evaluation of the same formula drifts
 * by up to ~p * 6e-8 radians). Odd d_model: the last column is a sine. pe [n_positions, d_model]. */
ATTN_API attn_status attn_sinusoidal_table(float *pe, int64_t n_positions, int64_t d_model);
/* x [B, N, d] += table[pos0 + n] for row n (any [positions, d] table: sinusoidal or learned). The
 * gradient of x is the identity; attn_embedding_positions_backward gives the table's. */
ATTN_API attn_status attn_posenc_add(float *x, const float *table, int64_t table_rows, int64_t batch, int64_t n,
                                     int64_t d, int64_t pos0);

/* Learned embeddings: torch.nn.Embedding(num_embeddings, embedding_dim, padding_idx), parameter
 * "weight" [num_embeddings, embedding_dim] initialised N(0, 1) with the padding row zeroed. Its
 * gradient is accumulated in token order (deterministic); the padding row gets none. */
typedef struct attn_embedding attn_embedding;
/* padding_idx < 0: none (PyTorch's None; a negative PyTorch index must be given as
 * num_embeddings + padding_idx). */
ATTN_API attn_status attn_embedding_create(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx,
                                           attn_embedding **out);
ATTN_API void attn_embedding_free(attn_embedding *e);
ATTN_API const attn_params *attn_embedding_params(const attn_embedding *e);
/* out [n, dim] = weight[indices[t]]; an index outside [0, num_embeddings) is an error naming it. */
ATTN_API attn_status attn_embedding_forward(const attn_embedding *e, const int64_t *indices, int64_t n, float *out);
/* weight.grad[indices[t]] += dout[t] (t in order). */
ATTN_API attn_status attn_embedding_backward(attn_embedding *e, const int64_t *indices, int64_t n, const float *dout);
/* Learned positions: x [B, N, dim] += weight[pos0 + n], and its backward weight.grad[pos0 + n] +=
 * sum_b dy[b, n] (batches in order). */
ATTN_API attn_status attn_embedding_add_positions(const attn_embedding *e, float *x, int64_t batch, int64_t n,
                                                  int64_t pos0);
ATTN_API attn_status attn_embedding_positions_backward(attn_embedding *e, const float *dy, int64_t batch, int64_t n,
                                                       int64_t pos0);

/* Rotary position embedding (RoPE, Su et al.) applied in place to Q or K viewed as
 * [B, H, N, head_dim] (any strides: [B, N, H, head_dim] storage by permuted strides). The first
 * rotary_dim features of each head are rotated, the rest left alone (GPT-J / GPT-NeoX partial
 * rotary); for row n at position p = positions ? positions[n] : pos0 + n and pair i < rotary_dim/2:
 *   theta_i = base'^(-2i / rotary_dim),  angle = (p / factor') theta_i   (in double)
 *   (x_a, x_b) -> (x_a cos - x_b sin,  x_b cos + x_a sin)
 * with pairs (i, i + rotary_dim/2) in the NeoX layout (rotate_half, Hugging Face's Llama/NeoX) or
 * (2i, 2i + 1) in the interleaved GPT-J layout. Scaling: none (base' = base, factor' = 1),
 * linear / position interpolation (factor' = factor), NTK-aware
 * (base' = base * factor^(rotary_dim / (rotary_dim - 2)), factor' = 1), or Llama 3's
 * frequency-dependent scaling (transformers' _compute_llama3_parameters; base' = base, factor' = 1,
 * theta_i replaced by theta'_i): with L = original_max_positions, wavelength w = 2 pi / theta_i,
 *   w < L / high_freq_factor:  theta'_i = theta_i                    (high frequencies kept)
 *   w > L / low_freq_factor:   theta'_i = theta_i / factor           (low frequencies interpolated)
 *   otherwise, s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor):
 *                              theta'_i = (1 - s) theta_i / factor + s theta_i
 * The backward is the inverse rotation of the gradient, also in place. */
typedef enum attn_rope_layout { ATTN_ROPE_NEOX = 0, ATTN_ROPE_INTERLEAVED = 1 } attn_rope_layout;
typedef enum attn_rope_scaling {
    ATTN_ROPE_SCALING_NONE = 0,
    ATTN_ROPE_SCALING_LINEAR = 1,
    ATTN_ROPE_SCALING_NTK = 2,
    ATTN_ROPE_SCALING_LLAMA3 = 3
} attn_rope_scaling;
typedef struct attn_rope_config {
    int64_t head_dim;
    int64_t rotary_dim; /* even, <= head_dim; 0 = head_dim */
    double base;        /* default 10000 */
    attn_rope_layout layout;
    attn_rope_scaling scaling;
    double factor; /* > 0 for linear / NTK / Llama 3 scaling (default 1) */
    /* Llama 3 scaling only: 0 < low_freq_factor < high_freq_factor (defaults 1 and 4), and
     * original_max_positions >= 1 (default 8192), the context length trained before scaling */
    double low_freq_factor, high_freq_factor;
    int64_t original_max_positions;
} attn_rope_config;
ATTN_API attn_rope_config attn_rope_config_default(int64_t head_dim);
/* positions (nullable) [N]: explicit positions, else pos0 + n. */
ATTN_API attn_status attn_rope_forward(const attn_rope_config *cfg, attn_tensor *x, int64_t pos0,
                                       const int64_t *positions);
ATTN_API attn_status attn_rope_backward(const attn_rope_config *cfg, attn_tensor *dx, int64_t pos0,
                                        const int64_t *positions);

/* ALiBi slopes for num_heads heads (Press et al., the reference code's get_slopes): for a power of
 * two n, slope_h = 2^(-8 (h + 1) / n); otherwise the slopes of the closest lower power of two m
 * followed by every other slope of 2m, taking the first n - m. For attn_sdpa_params.alibi_slopes. */
ATTN_API attn_status attn_alibi_slopes(float *slopes, int64_t num_heads);

#ifdef __cplusplus
}
#endif
#endif
