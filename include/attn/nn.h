/* attn nn: modules with PyTorch semantics, forward and backward, parameters named as PyTorch's
 * state_dict and loaded from / saved to safetensors: linear layers, positional encodings
 * (sinusoidal, learned, RoPE, ALiBi slopes), nn.MultiheadAttention (packed or separate
 * projections), local + global attention, TransformerEncoderLayer /
 * TransformerDecoderLayer, their stacks and nn.Transformer; key/value caches for incremental
 * decoding; a decoder-only (GPT-style) language model; a Vision Transformer (torchvision's).
 *
 * ---- Memory contract (every module) -----------------------------------------------------------
 * A module owns its parameters and their gradients: both are allocated by *_create, parameters
 * initialised as PyTorch's reset_parameters() does (same distributions, Philox random numbers; see
 * attn_params_reset), gradients zeroed. Everything else belongs to the caller:
 *   - saved: the activations a forward keeps for the backward, attn_X_saved_size() bytes. Pass NULL
 *     to the forward for inference (no backward follows). The backward reads it; it must not change
 *     in between.
 *   - workspace: scratch used only during one call (forward or backward), attn_X_workspace_size()
 *     bytes. Its contents need not survive between calls; one buffer may serve every call.
 * Both sizes depend on the shapes, on which masks and options the call uses, and on
 * attn_get_num_threads() at the time of the query (raising the thread count afterwards may make a
 * workspace too small: ATTN_ERR_WORKSPACE, never an overrun). Neither grows as Nq x Nk per head:
 * the attention runs on attn_flash_forward / attn_flash_backward (weights asked for with
 * need_weights are computed row by row into the caller's output). Masks the caller passes in
 * PyTorch's form are converted into the workspace: a boolean mask is inverted at its own size
 * (padded by a column per key appended by add_bias_kv / add_zero_attn); a float attn_mask is
 * copied only when keys are appended; a float attn_mask together with a float key_padding_mask
 * is summed into [B, 1 or num_heads, Nq, Nk] floats. Buffers need no particular alignment.
 *
 * Backward takes the same arguments as the forward it follows (same inputs, masks and dropout
 * seed; parameters unchanged), writes the input gradients and ACCUMULATES (+=) the parameter
 * gradients, as PyTorch's autograd does; attn_params_zero_grad clears them.
 *
 * ---- Dropout --------------------------------------------------------------------------------
 * Active only when the call's `training` flag is set. Every dropout site draws from the Philox
 * stream (seed, offset + site) indexed by the element's position (see kernels.h), so masks depend
 * on (seed, offset) only — never on the thread count — and the backward recomputes them.
 *
 * ---- Determinism ------------------------------------------------------------------------------
 * Results are bitwise identical for any thread count. */
#ifndef ATTN_NN_H
#define ATTN_NN_H

#include "attention.h"
#include "core.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameters -----------------------------------------------------------------------------
 * A module's parameters, in PyTorch's state_dict order and names ("in_proj_weight",
 * "out_proj.weight", ...). The list belongs to the module and lives as long as it. */
typedef struct attn_param {
    const char *name;               /* state_dict name, e.g. "self_attn.in_proj_weight" */
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    size_t numel;
    float *data;                    /* numel floats, owned by the module */
    float *grad;                    /* numel floats, owned by the module; backward adds to it */
} attn_param;

typedef struct attn_params attn_params;

ATTN_API size_t attn_params_count(const attn_params *ps);
/* NULL when i >= count. */
ATTN_API const attn_param *attn_params_get(const attn_params *ps, size_t i);
/* NULL when absent. */
ATTN_API const attn_param *attn_params_find(const attn_params *ps, const char *name);
/* Total number of parameter elements. */
ATTN_API size_t attn_params_numel(const attn_params *ps);
/* Set every gradient to 0. */
ATTN_API attn_status attn_params_zero_grad(const attn_params *ps);
/* Re-initialise every parameter as PyTorch's reset_parameters() does (xavier_uniform for packed
 * projections, kaiming_uniform(a=sqrt(5)) for nn.Linear weights and U(+-1/sqrt(fan_in)) for their
 * biases, zeros / ones for LayerNorm, ...), with random numbers from Philox stream (seed, index of
 * the parameter). PyTorch's own random numbers are not reproduced: load its weights instead. */
ATTN_API attn_status attn_params_reset(const attn_params *ps, uint64_t seed);

/* A list naming the parameters of several lists, prefixes[i] + name (prefixes nullable, or an
 * entry NULL for none), without copying them: one optimizer, one clip norm and one checkpoint for
 * a model made of several modules. Names must stay unique (ATTN_ERR_INVALID_ARGUMENT naming the
 * duplicate otherwise). The joined list refers to the modules' memory: free it
 * (attn_params_join_free) before them. */
ATTN_API attn_status attn_params_join(const attn_params *const *lists, const char *const *prefixes, size_t n,
                             attn_params **out);
ATTN_API void attn_params_join_free(attn_params *joined);

/* Load every parameter from st, looking each up as prefix + name (prefix may be NULL or "").
 * F32, F16, BF16 and F64 tensors are converted. Missing names and mismatched shapes are errors
 * (ATTN_ERR_NOT_FOUND / ATTN_ERR_SHAPE) whose message lists them all (truncated at the message
 * size); with strict, so is a tensor of st whose name starts with prefix but is no parameter
 * (ATTN_ERR_NOT_FOUND, "unexpected"). Nothing is modified unless every check passes. */
ATTN_API attn_status attn_params_load(const attn_params *ps, const attn_safetensors *st, const char *prefix,
                             int strict);
/* Strict load of a whole file (PyTorch's torch.save(module.state_dict()) through safetensors). */
ATTN_API attn_status attn_params_load_file(const attn_params *ps, const char *path);
/* Add every parameter to a writer as F32 under prefix + name (data referenced, not copied). */
ATTN_API attn_status attn_params_write(const attn_params *ps, attn_safetensors_writer *w, const char *prefix);
ATTN_API attn_status attn_params_save_file(const attn_params *ps, const char *path);

/* Name maps: load and save under another naming scheme (torchvision's, timm's, ...). A rule pairs
 * a pattern on our side with one on theirs; '*' matches one non-empty run of characters without
 * '.' (longest first), and the runs it captures are substituted, in order, for the other side's
 * '*'s. A rule matches a PREFIX of the name and the rest is kept; the first matching rule wins; a
 * name no rule matches keeps its name. E.g. attn's encoder names to torchvision's ViT encoder:
 *   {"layers.*.self_attn.", "encoder.layers.encoder_layer_*.self_attention."},
 *   {"layers.*.norm1.",     "encoder.layers.encoder_layer_*.ln_1."},
 *   {"layers.*.linear1.",   "encoder.layers.encoder_layer_*.mlp.0."},
 *   {"norm.",               "encoder.ln."}
 * maps "layers.3.linear1.weight" to "encoder.layers.encoder_layer_3.mlp.0.weight". Both patterns
 * of a rule must be non-empty, hold the same number of '*' (at most ATTN_NAME_MAP_MAX_STARS) and
 * no "**": every function taking a map checks it (ATTN_ERR_INVALID_ARGUMENT naming the rule).
 * A NULL map, or one of no rules, is the identity. */
#define ATTN_NAME_MAP_MAX_STARS 8
typedef struct attn_name_rule {
    const char *ours;               /* pattern on attn's side, e.g. "layers.*.linear1." */
    const char *theirs;             /* pattern on the other side, e.g. "blocks.*.mlp.fc1." */
} attn_name_rule;
typedef struct attn_name_map {
    const attn_name_rule *rules;    /* count rules, tried in order */
    size_t count;
} attn_name_map;

/* Our name to theirs into buf (cap bytes, NUL-terminated); ATTN_ERR_INVALID_ARGUMENT naming the
 * name and the size needed when it does not fit (buf then holds a truncated name, when cap > 0). */
ATTN_API attn_status attn_name_map_apply(const attn_name_map *map, const char *ours, char *buf, size_t cap);
/* Their name to ours: the same rules read from theirs to ours (the first whose theirs pattern
 * matches wins). The inverse of attn_name_map_apply when the rules' two sides are equally
 * unambiguous. */
ATTN_API attn_status attn_name_map_unapply(const attn_name_map *map, const char *theirs, char *buf, size_t cap);
/* attn_params_load with each parameter looked up as prefix + its name mapped through map: the
 * same conversions, all-or-nothing load and errors, every name in messages being theirs; with
 * strict, a tensor whose name starts with prefix but that no mapped parameter name produces is
 * unexpected. Two parameters mapped to one name: ATTN_ERR_INVALID_ARGUMENT naming both. */
ATTN_API attn_status attn_params_load_mapped(const attn_params *ps, const attn_safetensors *st,
                                             const attn_name_map *map, const char *prefix, int strict);
/* Strict load of a whole file through map. */
ATTN_API attn_status attn_params_load_file_mapped(const attn_params *ps, const char *path, const attn_name_map *map);
/* attn_params_write under prefix + mapped names (two parameters mapped to one name: an error, as above). */
ATTN_API attn_status attn_params_write_mapped(const attn_params *ps, attn_safetensors_writer *w,
                                              const attn_name_map *map, const char *prefix);
ATTN_API attn_status attn_params_save_file_mapped(const attn_params *ps, const char *path, const attn_name_map *map);

/* ---- linear: y = x W^T + b (torch.nn.functional.linear) --------------------------------------
 * x [rows, in], W [out, in] (PyTorch's layout), b [out] or NULL, y [rows, out]; all contiguous. */
ATTN_API size_t attn_linear_workspace_size(int64_t rows, int64_t in_features, int64_t out_features);
ATTN_API attn_status attn_linear_forward(const float *x, const float *weight, const float *bias, float *y,
                                int64_t rows, int64_t in_features, int64_t out_features,
                                void *workspace, size_t workspace_bytes);
/* dx = dy W (nullable; overwritten, or added to when accumulate_dx), dweight += dy^T x and
 * dbias += column sums of dy (each nullable). dx must not alias x, dy or weight. */
ATTN_API attn_status attn_linear_backward(const float *x, const float *weight, const float *dy, float *dx,
                                 int accumulate_dx, float *dweight, float *dbias, int64_t rows,
                                 int64_t in_features, int64_t out_features, void *workspace,
                                 size_t workspace_bytes);

/* ---- positional encodings ------------------------------------------------------------------
 * Sinusoidal (Vaswani et al.), as the seed's PositionalEncoding:
 *   div[i] = exp(2i * (-ln(10000) / d)),  pe[p, 2i] = sin(p div[i]),  pe[p, 2i+1] = cos(p div[i])
 * evaluated in double and rounded once (PyTorch's float32 evaluation of the same formula drifts
 * by up to ~p * 6e-8 radians). Odd d_model: the last column is a sine. pe [n_positions, d_model]. */
ATTN_API attn_status attn_sinusoidal_table(float *pe, int64_t n_positions, int64_t d_model);
/* x [B, N, d] += table[pos0 + n] for row n (any [positions, d] table: sinusoidal or learned). The
 * gradient of x is the identity; attn_embedding_positions_backward gives the table's. */
ATTN_API attn_status attn_posenc_add(float *x, const float *table, int64_t table_rows, int64_t batch,
                            int64_t n, int64_t d, int64_t pos0);

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
ATTN_API attn_status attn_embedding_positions_backward(attn_embedding *e, const float *dy, int64_t batch,
                                              int64_t n, int64_t pos0);

/* Rotary position embedding (RoPE, Su et al.) applied in place to Q or K viewed as
 * [B, H, N, head_dim] (any strides: [B, N, H, head_dim] storage by permuted strides). The first
 * rotary_dim features of each head are rotated, the rest left alone (GPT-J / GPT-NeoX partial
 * rotary); for row n at position p = positions ? positions[n] : pos0 + n and pair i < rotary_dim/2:
 *   theta_i = base'^(-2i / rotary_dim),  angle = (p / factor') theta_i   (in double)
 *   (x_a, x_b) -> (x_a cos - x_b sin,  x_b cos + x_a sin)
 * with pairs (i, i + rotary_dim/2) in the NeoX layout (rotate_half, Hugging Face's Llama/NeoX) or
 * (2i, 2i + 1) in the interleaved GPT-J layout. Scaling: none (base' = base, factor' = 1),
 * linear / position interpolation (factor' = factor), or NTK-aware
 * (base' = base * factor^(rotary_dim / (rotary_dim - 2)), factor' = 1). The backward is the
 * inverse rotation of the gradient, also in place. */
typedef enum attn_rope_layout { ATTN_ROPE_NEOX = 0, ATTN_ROPE_INTERLEAVED = 1 } attn_rope_layout;
typedef enum attn_rope_scaling {
    ATTN_ROPE_SCALING_NONE = 0,
    ATTN_ROPE_SCALING_LINEAR = 1,
    ATTN_ROPE_SCALING_NTK = 2
} attn_rope_scaling;
typedef struct attn_rope_config {
    int64_t head_dim;
    int64_t rotary_dim;     /* even, <= head_dim; 0 = head_dim */
    double base;            /* default 10000 */
    attn_rope_layout layout;
    attn_rope_scaling scaling;
    double factor;          /* > 0 for linear / NTK scaling (default 1) */
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
/* Attention capture (declared below): records chosen modules' weights during a forward. */
typedef struct attn_capture attn_capture;

typedef struct attn_mha_config {
    int64_t embed_dim, num_heads;   /* embed_dim divisible by num_heads */
    int64_t kdim, vdim;             /* 0 = embed_dim */
    int bias;                       /* in_proj_bias and out_proj.bias (default 1) */
    int add_bias_kv, add_zero_attn; /* default 0 */
    /* Store Wq, Wk, Wv, Wo as four nn.Linear layers q_proj, k_proj, v_proj, out_proj (see above)
     * instead of PyTorch's packed in_proj_weight / in_proj_bias. Default 0. */
    int separate_projections;
    float dropout;                  /* on the attention weights, in training (default 0) */
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
    const float *query;                  /* [B, Nq, embed_dim] */
    const float *key;                    /* [B, Nk, kdim] */
    const float *value;                  /* [B, Nk, vdim] */
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
    int training;                        /* dropout on only when set */
    uint64_t seed, offset;               /* dropout stream: (seed, offset) */
    /* Attention capture (see attn_capture): this module's weights are recorded when a request
     * matches its name (empty for a bare module; layers and models name theirs). NULL = none. */
    attn_capture *capture;
} attn_mha_args;

/* Zero masks, no causality, no weights, eval mode; the caller fills the rest. */
ATTN_API attn_mha_args attn_mha_args_default(void);

ATTN_API size_t attn_mha_saved_size(const attn_mha *m, const attn_mha_args *a);
ATTN_API size_t attn_mha_workspace_size(const attn_mha *m, const attn_mha_args *a);

/* out [B, Nq, embed_dim]; weights as described (required when need_weights, else ignored);
 * saved NULL for inference. */
ATTN_API attn_status attn_mha_forward(attn_mha *m, const attn_mha_args *a, float *out, float *weights,
                             void *saved, size_t saved_bytes, void *workspace,
                             size_t workspace_bytes);
/* dquery [B, Nq, E], dkey [B, Nk, kdim], dvalue [B, Nk, vdim], each nullable, are overwritten;
 * two or three of them may be the same buffer (self-attention), which then receives their sum.
 * Parameter gradients are accumulated. */
ATTN_API attn_status attn_mha_backward(attn_mha *m, const attn_mha_args *a, const float *dout,
                              float *dquery, float *dkey, float *dvalue, const void *saved,
                              size_t saved_bytes, void *workspace, size_t workspace_bytes);

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
    int64_t d_model, num_heads;     /* d_model divisible by num_heads */
    int64_t local_window;           /* keys on each side, >= 0 */
    float dropout;                  /* on both attentions' weights (default 0.1, the seed's) */
} attn_local_global_config;

ATTN_API attn_local_global_config attn_local_global_config_default(int64_t d_model, int64_t num_heads,
                                                                   int64_t local_window);

typedef struct attn_local_global_args {
    int64_t batch, n;
    const float *x;                 /* [B, n, d_model] */
    int training;
    uint64_t seed, offset;
    attn_capture *capture;          /* nullable: global_attn, local_attn */
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
                                                const float *dout, float *dx, const void *saved,
                                                size_t saved_bytes, void *workspace, size_t workspace_bytes);

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
typedef enum attn_activation { ATTN_ACTIVATION_RELU = 0, ATTN_ACTIVATION_GELU = 1 } attn_activation;

typedef struct attn_layer_config {
    int64_t d_model, nhead;
    int64_t dim_feedforward;        /* default 2048 */
    float dropout;                  /* default 0.1 (active only in training) */
    attn_activation activation;     /* default relu; gelu is the exact (erf) form, as F.gelu */
    float layer_norm_eps;           /* default 1e-5 */
    int norm_first;                 /* default 0 (post-norm) */
    /* The self-attention's kind (attention.h; default flash). Cross-attention is always exact. */
    attn_attention_config attention;
} attn_layer_config;

ATTN_API attn_layer_config attn_layer_config_default(int64_t d_model, int64_t nhead);

/* Masks of one attention in PyTorch's convention (see attn_mha_args): boolean true = not allowed,
 * float added; attn_mask [Nq, Nk] or [B * nhead, Nq, Nk] (attn_mask_3d); key_padding_mask [B, Nk]. */
typedef struct attn_masks {
    const uint8_t *attn_mask;
    const float *attn_mask_float;
    int attn_mask_3d;
    const uint8_t *key_padding_mask;
    const float *key_padding_mask_float;
    int is_causal;                  /* PyTorch's src_is_causal / tgt_is_causal (see attn_mha_args) */
    const uint8_t *global_attention_mask; /* [B, n] (see attn_mha_args), self-attention only */
} attn_masks;

/* One call of a layer or stack. Encoder: x = src, self_masks = src_mask / src_key_padding_mask.
 * Decoder: x = tgt, self_masks = tgt_*, memory [B, n_memory, d_model] with memory_masks =
 * memory_mask / memory_key_padding_mask. */
typedef struct attn_layer_args {
    int64_t batch, n;
    const float *x;                 /* [B, n, d_model] */
    attn_masks self_masks;
    int64_t n_memory;
    const float *memory;
    attn_masks memory_masks;
    int training;
    uint64_t seed, offset;
    attn_capture *capture;          /* nullable: modules named self_attn, multihead_attn */
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
ATTN_API attn_status attn_encoder_layer_backward(attn_encoder_layer *l, const attn_layer_args *a,
                                        const float *dout, float *dx, const void *saved,
                                        size_t saved_bytes, void *workspace,
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
ATTN_API attn_status attn_decoder_layer_backward(attn_decoder_layer *l, const attn_layer_args *a,
                                        const float *dout, float *dx, float *dmemory,
                                        const void *saved, size_t saved_bytes, void *workspace,
                                        size_t workspace_bytes);

/* Stacks: num_layers independent copies of the layer (PyTorch deep-copies the layer it is given),
 * then LayerNorm(d_model, eps = norm_eps) when norm is set. */
typedef struct attn_stack_config {
    attn_layer_config layer;
    int64_t num_layers;
    int norm;                       /* final LayerNorm "norm.*" (default 1) */
    float norm_eps;                 /* default 1e-5 (nn.LayerNorm's default) */
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
ATTN_API attn_status attn_encoder_backward(attn_encoder *e, const attn_layer_args *a, const float *dout,
                                  float *dx, const void *saved, size_t saved_bytes,
                                  void *workspace, size_t workspace_bytes);

ATTN_API attn_status attn_decoder_create(const attn_stack_config *cfg, attn_decoder **out);
ATTN_API void attn_decoder_free(attn_decoder *d);
ATTN_API const attn_params *attn_decoder_params(const attn_decoder *d);
ATTN_API size_t attn_decoder_saved_size(const attn_decoder *d, const attn_layer_args *a);
ATTN_API size_t attn_decoder_workspace_size(const attn_decoder *d, const attn_layer_args *a);
ATTN_API attn_status attn_decoder_forward(attn_decoder *d, const attn_layer_args *a, float *out, void *saved,
                                 size_t saved_bytes, void *workspace, size_t workspace_bytes);
ATTN_API attn_status attn_decoder_backward(attn_decoder *d, const attn_layer_args *a, const float *dout,
                                  float *dx, float *dmemory, const void *saved, size_t saved_bytes,
                                  void *workspace, size_t workspace_bytes);

/* torch.nn.Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward,
 * dropout, activation, layer_norm_eps, batch_first=True, norm_first): an encoder stack and a
 * decoder stack, each with its final norm (eps = layer_norm_eps). */
typedef struct attn_transformer_config {
    attn_layer_config layer;        /* d_model default 512, nhead 8 */
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
    attn_capture *capture;          /* nullable: encoder.layers.N.self_attn, decoder.layers.N.* */
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
                                     void *saved, size_t saved_bytes, void *workspace,
                                     size_t workspace_bytes);
/* dsrc [B, n_src, d], dtgt [B, n_tgt, d] overwritten (each nullable). */
ATTN_API attn_status attn_transformer_backward(attn_transformer *t, const attn_transformer_args *a,
                                      const float *dout, float *dsrc, float *dtgt,
                                      const void *saved, size_t saved_bytes, void *workspace,
                                      size_t workspace_bytes);

/* ---- incremental decoding: key/value caches -------------------------------------------------
 * A cache keeps the projected keys and values of the positions seen so far, [B, capacity, E]
 * each, in caller memory (attn_kv_cache_size bytes), so that decoding token t costs O(t): the new
 * query rows attend to the cached rows instead of recomputing the prefix. A step gives the same
 * rows a full causal forward over all positions gives (eval mode: no dropout). */
typedef struct attn_kv_cache {
    float *k, *v;                   /* [batch, capacity, dim], inside the caller's buffer */
    int64_t batch, capacity, dim;
    int64_t length;                 /* positions filled */
    /* A recurrent attention kind's decoding state instead of keys and values (k = v = NULL);
     * NULL for softmax kinds. Set up by attn_mha_cache_init. */
    float *state;
    size_t state_floats;
} attn_kv_cache;

ATTN_API size_t attn_kv_cache_size(int64_t batch, int64_t capacity, int64_t dim);
ATTN_API attn_status attn_kv_cache_init(attn_kv_cache *c, void *buffer, size_t bytes, int64_t batch,
                               int64_t capacity, int64_t dim);
/* Forget every position (length 0; a recurrent state is zeroed). */
ATTN_API attn_status attn_kv_cache_reset(attn_kv_cache *c);

/* The cache a module's attention kind decodes with: keys and values (as above) for softmax kinds,
 * a recurrent state for kinds that have one. attn_mha_cache_size(m, ...) bytes of caller memory. */
ATTN_API size_t attn_mha_cache_size(const attn_mha *m, int64_t batch, int64_t capacity);
ATTN_API attn_status attn_mha_cache_init(const attn_mha *m, attn_kv_cache *c, void *buffer, size_t bytes,
                                         int64_t batch, int64_t capacity);

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
    const float *query;             /* [B, n, embed_dim] */
    int append, causal;
    const uint8_t *key_padding_mask;
} attn_mha_step_args;

ATTN_API size_t attn_mha_step_workspace_size(const attn_mha *m, int64_t batch, int64_t n, int64_t length);
/* out [B, n, embed_dim]. */
ATTN_API attn_status attn_mha_forward_step(attn_mha *m, attn_kv_cache *c, const attn_mha_step_args *a,
                                  float *out, void *workspace, size_t workspace_bytes);

/* Decoder stacks: one self-attention cache per layer (capacity positions) and one cross-attention
 * cache per layer filled from memory at init. The cache object lives at the start of the caller's
 * buffer. Each step runs the n new target positions through every layer (causal self-attention
 * over the cache, cross-attention over memory) and the final norm: out equals the last n rows of
 * attn_decoder_forward over all positions with tgt_masks.is_causal (eval). */
typedef struct attn_decoder_cache attn_decoder_cache;

ATTN_API size_t attn_decoder_cache_size(const attn_decoder *d, int64_t batch, int64_t capacity,
                               int64_t n_memory);
/* memory [B, n_memory, d_model]; memory_key_padding_mask [B, n_memory] (PyTorch's bool,
 * nullable) is kept by pointer and used by every step. workspace: attn_decoder_step_workspace_size
 * for n = n_memory suffices. */
ATTN_API attn_status attn_decoder_cache_init(attn_decoder *d, void *buffer, size_t bytes, int64_t batch,
                                    int64_t capacity, const float *memory, int64_t n_memory,
                                    const uint8_t *memory_key_padding_mask, void *workspace,
                                    size_t workspace_bytes, attn_decoder_cache **cache);
/* Positions decoded so far. */
ATTN_API int64_t attn_decoder_cache_length(const attn_decoder_cache *cache);
ATTN_API size_t attn_decoder_step_workspace_size(const attn_decoder *d, int64_t batch, int64_t n,
                                        int64_t capacity, int64_t n_memory);
/* tgt [B, n, d_model] at positions length .. length + n - 1; out [B, n, d_model]. */
ATTN_API attn_status attn_decoder_forward_step(attn_decoder *d, attn_decoder_cache *cache, const float *tgt,
                                      int64_t n, float *out, void *workspace,
                                      size_t workspace_bytes);

/* The two stacks of a Transformer (for encode-once, decode-step-by-step generation: memory =
 * attn_encoder_forward(encoder), then attn_decoder_cache_init / attn_decoder_forward_step). */
ATTN_API attn_encoder *attn_transformer_encoder(attn_transformer *t);
ATTN_API attn_decoder *attn_transformer_decoder(attn_transformer *t);

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

/* Compute precision of a model's forward and backward (mixed precision, as PyTorch's autocast with
 * float32 master weights):
 *   fp32: everything in float32.
 *   bf16: the matrix products take operands rounded to bfloat16 (round to nearest even; a
 *         subnormal float32 operand becomes 0, as vcvtneps2bf16 does) and
 *         accumulate and return float32: every linear layer (forward x W^T; backward dY W and
 *         dY^T x, i.e. dY rounded too) and, with the flash and window attention kinds, attention
 *         (Q, K, V and dO rounded; attn_flash_*'s bf16 path: P and dS rounded, statistics float).
 *         The other attention kinds keep float32 attention. Layernorm, softmax statistics, GELU,
 *         residual adds, embeddings, the loss and the optimizer stay float32; parameters and their
 *         gradients stay float32 (gradients accumulate in float32) — they are the master weights,
 *         and what checkpoints store. The products run on the bf16 kernels of attn_gemm_bf16 /
 *         attn_flash_*: AMX tiles where the CPU has AMX-BF16, else AVX512-BF16 (vdpbf16ps)
 *         where it has that (emulated on Intel, where the emulation is faster), a bit-exact
 *         emulation of vdpbf16ps elsewhere (by FMAs on other AVX-512 and on AVX2 CPUs, below fp32's speed; scalar
 *         without AVX2, far slower; the same roundings: products bit for bit, attention up to its
 *         float exp) — bf16 mode works on every CPU.
 * Results are bitwise identical for any thread count in either precision. attn_gpt_forward,
 * attn_gpt_backward and attn_gpt_workspace_size follow attn_gpt_config.precision (a bf16 call needs
 * a larger workspace: ask that model); generation steps (attn_gpt_forward_step) run float32.
 * attn_vit_forward, attn_vit_backward and attn_vit_workspace_size follow attn_vit_config.precision
 * the same way (the patch embedding is a linear layer; the ViT's attention is flash). */
typedef enum attn_precision { ATTN_PRECISION_FP32 = 0, ATTN_PRECISION_BF16 = 1 } attn_precision;

/* "fp32", "bf16"; NULL for a value outside the enum. */
ATTN_API const char *attn_precision_name(attn_precision p);

typedef struct attn_gpt_config {
    int64_t vocab_size, max_positions; /* learned positions: a forward or cache holds at most this */
    attn_layer_config layer;           /* norm_first is always on; default activation gelu */
    int64_t num_layers;
    float norm_eps;                    /* the final norm's (default 1e-5) */
    attn_positions positions;
    attn_rope_config rope;             /* with ATTN_POSITIONS_ROPE (head_dim is filled in) */
    int tie_embeddings;
    attn_precision precision;          /* compute precision (default fp32; see attn_precision) */
} attn_gpt_config;

ATTN_API attn_gpt_config attn_gpt_config_default(int64_t vocab_size, int64_t max_positions, int64_t d_model,
                                        int64_t nhead, int64_t num_layers);

typedef struct attn_gpt_args {
    int64_t batch, n;
    const int64_t *tokens;             /* [B, n], each in [0, vocab_size) */
    const uint8_t *key_padding_mask;   /* [B, n] PyTorch bool (true = padding), nullable */
    int training;
    uint64_t seed, offset;
    attn_capture *capture;             /* nullable: layers.N.self_attn */
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
ATTN_API attn_status attn_gpt_backward(attn_gpt *g, const attn_gpt_args *a, const float *dlogits,
                              const void *saved, size_t saved_bytes, void *workspace,
                              size_t workspace_bytes);

/* Generation: one self-attention cache per layer, in the caller's buffer. A step of n new tokens
 * (a prompt, then one at a time) gives the logits of those positions, equal to the last n rows of
 * attn_gpt_forward over the whole sequence (eval). */
typedef struct attn_gpt_cache attn_gpt_cache;
ATTN_API size_t attn_gpt_cache_size(const attn_gpt *g, int64_t batch, int64_t capacity);
ATTN_API attn_status attn_gpt_cache_init(attn_gpt *g, void *buffer, size_t bytes, int64_t batch,
                                int64_t capacity, attn_gpt_cache **cache);
ATTN_API int64_t attn_gpt_cache_length(const attn_gpt_cache *cache);
ATTN_API size_t attn_gpt_step_workspace_size(const attn_gpt *g, int64_t batch, int64_t n, int64_t capacity);
/* tokens [B, n]; logits [B, n, vocab_size]. */
ATTN_API attn_status attn_gpt_forward_step(attn_gpt *g, attn_gpt_cache *cache, const int64_t *tokens,
                                  int64_t n, float *logits, void *workspace,
                                  size_t workspace_bytes);

/* ---- the encoder-decoder model: embeddings, positions, nn.Transformer, output projection ------
 * The seed's Transformer, built on nn.Transformer:
 *   xs = src_embedding[src] * sqrt(d_model) + pe[0 .. n_src)      (dropout in training)
 *   xt = tgt_embedding[tgt] * sqrt(d_model) + pe[0 .. n_tgt)
 *   y  = transformer(xs, xt; src key padding also masks the memory, causal target)
 *   logits = y output_projection.weight^T + output_projection.bias
 * with pe the sinusoidal table (attn_sinusoidal_table). Parameters: src_embedding.weight,
 * tgt_embedding.weight (N(0, 1), nn.Embedding), transformer.encoder.*, transformer.decoder.*
 * (nn.Transformer's names and initialisation), output_projection.weight / .bias (nn.Linear).
 * The two positional-dropout sites draw from (seed, offset + 8 (enc + dec layers) + 0 / 1). */
typedef struct attn_seq2seq_config {
    int64_t src_vocab, tgt_vocab;
    int64_t max_len;                   /* positions in the table: n_src, n_tgt <= max_len */
    attn_transformer_config transformer;
} attn_seq2seq_config;

ATTN_API attn_seq2seq_config attn_seq2seq_config_default(int64_t src_vocab, int64_t tgt_vocab, int64_t d_model,
                                                int64_t nhead, int64_t num_layers);

typedef struct attn_seq2seq_args {
    int64_t batch, n_src, n_tgt;
    const int64_t *src, *tgt;          /* token ids [B, n_src], [B, n_tgt] */
    const uint8_t *src_key_padding_mask; /* [B, n_src] PyTorch bool (true = padding), nullable */
    const uint8_t *tgt_key_padding_mask; /* [B, n_tgt], nullable */
    int tgt_causal;                    /* default 1 */
    int training;
    uint64_t seed, offset;
    attn_capture *capture;             /* nullable: transformer.encoder.layers.N.self_attn, ... */
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
ATTN_API size_t attn_seq2seq_step_workspace_size(const attn_seq2seq *m, int64_t batch, int64_t n,
                                                 int64_t capacity, int64_t n_src);
/* tgt [B, n] token ids at positions length .. length + n - 1 (length + n <= capacity);
 * logits [B, n, tgt_vocab]. */
ATTN_API attn_status attn_seq2seq_forward_step(attn_seq2seq *m, attn_seq2seq_cache *cache, const int64_t *tgt,
                                               int64_t n, float *logits, void *workspace,
                                               size_t workspace_bytes);

/* The seed's TransformerEncoder over tokens: x = embedding[tokens] * sqrt(d_model) + pe (dropout in
 * training), then the encoder stack with its final norm. Parameters: embedding.weight,
 * layers.N.*, norm.* (PyTorch's TransformerEncoderLayer names inside). The positional dropout
 * draws from (seed, offset + 8 num_layers). */
typedef struct attn_token_encoder_config {
    int64_t vocab, max_len;
    attn_stack_config stack;          /* stack.norm selects the final norm (default on) */
} attn_token_encoder_config;

ATTN_API attn_token_encoder_config attn_token_encoder_config_default(int64_t vocab, int64_t d_model, int64_t nhead,
                                                            int64_t num_layers);

typedef struct attn_token_encoder_args {
    int64_t batch, n;
    const int64_t *tokens;             /* [B, n] */
    const uint8_t *key_padding_mask;   /* [B, n] PyTorch bool (true = padding), nullable */
    int is_causal;
    int training;
    uint64_t seed, offset;
    attn_capture *capture;             /* nullable: layers.N.self_attn */
} attn_token_encoder_args;

typedef struct attn_token_encoder attn_token_encoder;

ATTN_API attn_status attn_token_encoder_create(const attn_token_encoder_config *cfg, attn_token_encoder **out);
ATTN_API void attn_token_encoder_free(attn_token_encoder *m);
ATTN_API const attn_params *attn_token_encoder_params(const attn_token_encoder *m);
ATTN_API size_t attn_token_encoder_saved_size(const attn_token_encoder *m, const attn_token_encoder_args *a);
ATTN_API size_t attn_token_encoder_workspace_size(const attn_token_encoder *m, const attn_token_encoder_args *a);
/* out [B, n, d_model]; saved NULL for inference. */
ATTN_API attn_status attn_token_encoder_forward(attn_token_encoder *m, const attn_token_encoder_args *a, float *out,
                                       void *saved, size_t saved_bytes, void *workspace, size_t workspace_bytes);
/* Parameter gradients (accumulated) from dout [B, n, d_model]. */
ATTN_API attn_status attn_token_encoder_backward(attn_token_encoder *m, const attn_token_encoder_args *a, const float *dout,
                                        const void *saved, size_t saved_bytes, void *workspace,
                                        size_t workspace_bytes);

/* ---- Vision Transformer: torchvision.models.VisionTransformer (and DeiT's distillation token) --
 *   patches = conv_proj(images)      a Conv2d(C, D, kernel = stride = patch_size) computed as im2col
 *                                    of the non-overlapping patches and one GEMM: [B*Np, C*p*p] x W^T
 *   x_0 = [class_token (, dist_token), patches (row-major over the gh x gw grid)] + pos_embedding
 *                                    (dropout in training, stream (seed, offset + 8 num_layers))
 *   h = norm(layers(x_0))            pre-norm GELU blocks: x + SA(norm1 x), x + MLP(norm2 x)
 *   logits = head(h[:, 0])           distilled: (head(h[:, 0]) + head_dist(h[:, 1])) / 2, DeiT's
 *                                    eval output; with separate_heads both, [2, B, classes]
 * Np = (H / p) (W / p); H and W must be multiples of p (as torchvision asserts); H != W allowed.
 * Parameters (attn's names; attn_vit_torchvision_names / attn_vit_timm_names map them):
 *   conv_proj.weight [D, C, p, p], conv_proj.bias [D], class_token [1, 1, D], dist_token [1, 1, D]
 *   (distilled), pos_embedding [1, T + Np, D] (T = 1, or 2 distilled), layers.N.self_attn.* /
 *   linear1.* / linear2.* / norm1.* / norm2.* (TransformerEncoderLayer's names), norm.* (final
 *   LayerNorm), head.weight [classes, D], head.bias, head_dist.* (distilled).
 * Initialisation as torchvision: conv_proj.weight N(0, 1 / fan_in) (torchvision's trunc_normal_
 * cuts at +-2; not here), conv_proj.bias 0, class_token / dist_token 0, pos_embedding N(0, 0.02^2),
 * head 0; the layers keep nn.Linear / MultiheadAttention defaults (torchvision uses xavier for the
 * MLP: load its weights to match).
 * torchvision's dropout and attention_dropout are one value here (layer dropout). LayerNorm eps
 * 1e-6 by default, as torchvision's and timm's ViTs.
 * Capture names: "layers.N.self_attn" (torchvision's "encoder.layers.encoder_layer_N.self_attention",
 * timm's "blocks.N.attn"). */
typedef struct attn_vit_config {
    int64_t image_h, image_w;          /* torchvision's image_size (square there) */
    int64_t patch_size;                /* square patches, divides image_h and image_w */
    int64_t in_channels;               /* default 3 */
    int64_t num_layers, num_heads, hidden_dim, mlp_dim, num_classes;
    float dropout;                     /* default 0 */
    float layer_norm_eps;              /* every LayerNorm's (default 1e-6) */
    int distilled;                     /* DeiT's dist_token and head_dist (default 0) */
    attn_precision precision;          /* compute precision (default fp32; see attn_precision): in
                                        * bf16 the patch embedding, the layers' linears and flash
                                        * attention, and the heads */
} attn_vit_config;

/* torchvision's VisionTransformer(image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim,
 * num_classes = 1000): 3 channels, no dropout, eps 1e-6, not distilled. */
ATTN_API attn_vit_config attn_vit_config_default(int64_t image_size, int64_t patch_size, int64_t num_layers,
                                                 int64_t num_heads, int64_t hidden_dim, int64_t mlp_dim,
                                                 int64_t num_classes);

typedef struct attn_vit_args {
    int64_t batch;
    const float *images;               /* [B, C, image_h, image_w] */
    int separate_heads;                /* distilled only: logits [2, B, classes] (class head, dist head) */
    int training;
    uint64_t seed, offset;
    attn_capture *capture;             /* nullable: layers.N.self_attn */
} attn_vit_args;

typedef struct attn_vit attn_vit;

ATTN_API attn_status attn_vit_create(const attn_vit_config *cfg, attn_vit **out);
ATTN_API void attn_vit_free(attn_vit *v);
ATTN_API const attn_params *attn_vit_params(const attn_vit *v);
/* The configuration the model was created with (NULL for NULL). */
ATTN_API const attn_vit_config *attn_vit_get_config(const attn_vit *v);
/* Tokens per image: T + Np. */
ATTN_API int64_t attn_vit_tokens(const attn_vit *v);
ATTN_API size_t attn_vit_saved_size(const attn_vit *v, const attn_vit_args *a);
ATTN_API size_t attn_vit_workspace_size(const attn_vit *v, const attn_vit_args *a);
/* logits [B, num_classes] ([2, B, num_classes] with separate_heads); saved NULL for inference. */
ATTN_API attn_status attn_vit_forward(attn_vit *v, const attn_vit_args *a, float *logits, void *saved,
                                      size_t saved_bytes, void *workspace, size_t workspace_bytes);
/* From dlogits (the forward's logits' shape): dimages [B, C, H, W] overwritten (nullable),
 * parameter gradients accumulated. */
ATTN_API attn_status attn_vit_backward(attn_vit *v, const attn_vit_args *a, const float *dlogits, float *dimages,
                                       const void *saved, size_t saved_bytes, void *workspace,
                                       size_t workspace_bytes);

/* Our names to torchvision's VisionTransformer state_dict names (conv_proj.*, class_token,
 * encoder.pos_embedding, encoder.layers.encoder_layer_N.{ln_1, self_attention, ln_2, mlp.0, mlp.3},
 * encoder.ln, heads.head; torchvision >= 0.14 saves the MLP as mlp.0 / mlp.3, older checkpoints'
 * mlp.linear_1 / linear_2 must be renamed first) and to timm's (patch_embed.proj, cls_token,
 * dist_token, pos_embed, blocks.N.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}, norm,
 * head, head_dist; timm 0.9.16's VisionTransformerDistilled loads them strictly and gives the same
 * logits: tests/parity/check_vit_timm.py, optional). For attn_params_load_file_mapped /
 * attn_params_save_file_mapped. */
ATTN_API const attn_name_map *attn_vit_torchvision_names(void);
ATTN_API const attn_name_map *attn_vit_timm_names(void);

/* Resample a position embedding to another patch grid, as timm's resample_abs_pos_embed (and
 * torchvision's interpolate_embeddings with align_corners): src [prefix + src_h src_w, dim] ->
 * dst [prefix + dst_h dst_w, dim]; the first `prefix` rows (class / distillation tokens) are copied,
 * the grid is resized per feature by F.interpolate(mode="bicubic", align_corners) (A = -0.75,
 * edge-clamped taps; timm's align_corners=False, torchvision's True). timm antialiases when it
 * shrinks a grid; this does not (identical when growing). */
ATTN_API attn_status attn_vit_resample_pos_embed(const float *src, int64_t prefix, int64_t src_h, int64_t src_w,
                                                 float *dst, int64_t dst_h, int64_t dst_w, int64_t dim,
                                                 int align_corners);

/* ---- attention capture ----------------------------------------------------------------------
 * The attention weights of chosen modules, layers, heads and rows, recorded during an ordinary
 * forward pass (what PyTorch users get from forward hooks on MultiheadAttention). Pass a capture
 * in the forward's args (`capture` of attn_mha_args, attn_layer_args, attn_transformer_args,
 * attn_gpt_args, attn_seq2seq_args, attn_token_encoder_args, attn_vit_args); every attention
 * module whose name matches a request records the weights it applied, [B, heads, rows, Nk'] (after dropout in
 * training, exactly as MultiheadAttention(need_weights=True, average_attn_weights=False) returns
 * them). They are recomputed row by row from the fused path for the modules, heads and rows
 * asked for only, never as a full N x N pass of the others.
 *
 * Names are the module's state_dict prefix without the final dot: "layers.0.self_attn" in an
 * encoder stack or GPT, "self_attn" / "multihead_attn" in a layer, "encoder.layers.1.self_attn" /
 * "decoder.layers.0.multihead_attn" in nn.Transformer, "transformer.decoder.layers.0.multihead_attn"
 * in attn_seq2seq, "layers.N.self_attn" in attn_vit, and "" for a bare attn_mha. A request's
 * pattern may use '*' for any run of characters ("layers.*.self_attn", "*"). A capture owns the
 * memory of its records; a module called again replaces its record. Not for concurrent forwards. */
ATTN_API attn_status attn_capture_create(attn_capture **out);
ATTN_API void attn_capture_free(attn_capture *c);
/* Ask for heads [head0, head0 + heads) (heads 0 = to the last) and query rows [row0, row0 + rows)
 * (rows 0 = to the last) of every module matching pattern. A request reaching past a module's
 * heads or rows fails that forward with ATTN_ERR_SHAPE naming the module; a module whose kind
 * has no weights fails it with ATTN_ERR_UNSUPPORTED. */
ATTN_API attn_status attn_capture_add(attn_capture *c, const char *pattern, int64_t head0, int64_t heads,
                                      int64_t row0, int64_t rows);
/* Drop the records (requests stay). */
ATTN_API void attn_capture_clear(attn_capture *c);

typedef struct attn_capture_record {
    const char *module;             /* the module's name */
    int64_t batch, heads, rows, nk; /* weights [batch, heads, rows, nk] */
    int64_t head0, row0;            /* the first head and query row recorded */
    int64_t num_heads, nq;          /* the module's heads and query rows */
    const float *weights;           /* owned by the capture, valid until the next forward, clear or free */
} attn_capture_record;

/* Records in the order the modules ran. */
ATTN_API size_t attn_capture_count(const attn_capture *c);
ATTN_API attn_status attn_capture_get(const attn_capture *c, size_t i, attn_capture_record *rec);
/* The record of the module of that exact name; ATTN_ERR_NOT_FOUND listing the recorded ones. */
ATTN_API attn_status attn_capture_find(const attn_capture *c, const char *module, attn_capture_record *rec);

#ifdef __cplusplus
}
#endif
#endif
