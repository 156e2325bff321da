/* A model chosen by name from a JSON configuration, with inputs bound by PyTorch's forward-argument
 * names: the engine of `attn run` and of the parity tests. Internal (not a public header): unlike
 * the library's modules it allocates its own activations and workspace, as a tool does.
 *
 * Configuration: {"module": NAME, ...PyTorch constructor keyword arguments...} with NAME one of
 *   multihead_attention        nn.MultiheadAttention          inputs query, key, value,
 *                              key_padding_mask, attn_mask; options need_weights,
 *                              average_attn_weights, is_causal
 *   transformer_encoder_layer  nn.TransformerEncoderLayer     src, src_mask, src_key_padding_mask;
 *                              option is_causal
 *   transformer_decoder_layer  nn.TransformerDecoderLayer     tgt, memory, tgt_mask, memory_mask,
 *                              tgt_key_padding_mask, memory_key_padding_mask; options
 *                              tgt_is_causal, memory_is_causal
 *   transformer_encoder        nn.TransformerEncoder          src, mask, src_key_padding_mask;
 *                              option is_causal
 *   transformer_decoder        nn.TransformerDecoder          as the decoder layer
 *   transformer                nn.Transformer                 src, tgt, src_mask, tgt_mask,
 *                              memory_mask, src_key_padding_mask, tgt_key_padding_mask,
 *                              memory_key_padding_mask; options src_is_causal, tgt_is_causal,
 *                              memory_is_causal
 *   sparse_attention           the seed's SparseAttention     input x; keys d_model, num_heads,
 *                              window_size (128), dropout (0.1, eval: unused): causal sliding
 *                              window, query i sees keys i - window_size .. i (the window kind)
 *   local_global_attention     the seed's LocalGlobalAttention  input x; keys d_model, num_heads,
 *                              local_window (128), dropout: projection(global_attn(x) +
 *                              local_attn(x)), local_attn over |i - j| <= local_window
 *                              (attn_local_global)
 *   linear_attention           the seed's LinearAttention, corrected  input x; keys d_model,
 *                              num_heads, causal (false): Katharopoulos' linear attention, phi =
 *                              elu + 1 on queries and keys, eps 1e-6, no scale (the linear kind);
 *                              causal by prefix sums
 *   performer_attention        the seed's PerformerAttention, corrected  input x; keys d_model,
 *                              num_heads, num_features (256), dropout (0.1, unused: the sketch's
 *                              forward never applies it), causal
 *                              (false): FAVOR+ (the performer kind) on the module's buffer R
 *                              [num_heads, d_k, num_features], head h's random features the columns
 *                              of R[h] (passed to the kind transposed, as attention.projection)
 *   vision_transformer         torchvision's VisionTransformer  x [B, C, H, W]; output the logits
 *                              [B, num_classes] (configuration: nn_config.h)
 * The seed modules' state_dicts keep the seed's names (attn.W_q.weight .. attn.W_o.bias;
 * local_attn.W_*, global_attn.W_*, projection.weight / .bias; query_projection.* ..
 * output_projection.*; W_q.* .. W_o.* and R): the parameters are attn's (q_proj.weight, ...) and
 * attn_nn_model_name_map gives the map to the seed's names; their input x is [B, N, d_model]
 * (self-attention) and its gradient is "x". A buffer (R) is not a parameter: it is read by
 * attn_nn_model_load, gets no gradient and is not in attn_nn_model_params.
 * vision_transformer's weights are under torchvision's state_dict names (attn_vit_torchvision_names).
 * The options are forward() arguments that are not tensors; they may sit in the configuration
 * next to the constructor's arguments. For multihead_attention, key and value default to query
 * (self-attention). Boolean masks (BOOL / U8 tensors) mean true = not allowed, as in PyTorch;
 * floating-point masks are added. */
#ifndef ATTN_NN_RUN_H
#define ATTN_NN_RUN_H

#include "attn/nn.h"
#include "io/json.h"

typedef struct nn_model nn_model;

/* The i-th module name above (the order of the list), NULL past the last. */
const char *attn_nn_model_known(size_t i);
/* The number of modules (attn_nn_model_known is non-NULL below it). */
size_t attn_nn_model_count(void);
/* ATTN_OK when every row of the module table is complete (a name, a forward argument, the create,
 * free, params, build, sizes, forward and backward functions, load_buffers when it has buffers)
 * and no name repeats; else ATTN_ERR_INVALID_ARGUMENT naming the row. The table's length is
 * checked against its enum at compile time; this checks that no row is empty (test_nn_run). */
attn_status attn_nn_model_table_check(void);

/* Create the module (PyTorch's initialisation) from the configuration object. Errors name the
 * module and the offending key (unknown module, unknown key, wrong type, invalid value). */
attn_status attn_nn_model_create(const attn_json *config, nn_model **out);
void attn_nn_model_free(nn_model *m);
const char *attn_nn_model_name(const nn_model *m);
const attn_params *attn_nn_model_params(nn_model *m);
/* The map from the parameters' names to the PyTorch module's state_dict names, for
 * attn_params_load_mapped / attn_params_write_mapped (torchvision's for vision_transformer); NULL
 * (the identity) for the torch.nn modules. */
const attn_name_map *attn_nn_model_name_map(const nn_model *m);
/* The model of a vision_transformer (its configuration: image size and channels for an image
 * input), NULL for the other modules. */
attn_vit *attn_nn_model_vit(const nn_model *m);

/* The module's weights from st: its parameters under their state_dict names (the name map, each
 * looked up as prefix + name; prefix may be NULL) and its buffers (performer_attention's R). With
 * strict, a tensor under prefix that is neither is an error; so are missing and mis-shaped ones,
 * named with the expected shape. For a module without buffers this is attn_params_load_mapped. A
 * module with buffers refuses to run forward until a load has succeeded. */
attn_status attn_nn_model_load(nn_model *m, const attn_safetensors *st, const char *prefix, int strict);

/* Set a forward option by name (need_weights, average_attn_weights, is_causal, src_is_causal,
 * tgt_is_causal, memory_is_causal); ATTN_ERR_NOT_FOUND when the module has no such option. */
attn_status attn_nn_model_set_option(nn_model *m, const char *name, int value);

/* Bind the inputs from st, each looked up as prefix + argument name (prefix may be NULL). Missing
 * required inputs, mis-shaped ones and, with strict, tensors under prefix that are no argument of
 * this module are errors naming them. */
attn_status attn_nn_model_bind(nn_model *m, const attn_safetensors *st, const char *prefix, int strict);

/* Forward on the bound inputs; keep_for_backward keeps the activations. The training flag with
 * seed / offset turns dropout on. */
attn_status attn_nn_model_forward(nn_model *m, int keep_for_backward, int training, uint64_t seed, uint64_t offset);
/* The output [B, N, d] ("output"; [B, num_classes] for vision_transformer) and, for
 * multihead_attention with need_weights, the weights
 * ("attn_output_weights"); shape receives rank and dims. NULL before a forward. */
const float *attn_nn_model_output(const nn_model *m, int *rank, int64_t shape[4]);
const float *attn_nn_model_weights(const nn_model *m, int *rank, int64_t shape[4]);

/* Backward of the last forward (kept) for the upstream gradient dout (shape of the output):
 * parameter gradients accumulate; input gradients are then available by argument name ("query",
 * "key", "value", "src", "tgt", "memory", "x"; NULL when the module has no such input, and for key /
 * value when they defaulted to query, whose gradient then includes theirs). */
attn_status attn_nn_model_backward(nn_model *m, const float *dout);
const float *attn_nn_model_input_grad(const nn_model *m, const char *name, size_t *numel);

#endif
