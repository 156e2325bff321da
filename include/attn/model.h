/* attn model: the models of `attn run` as a public API. A model is chosen by name from a JSON
 * configuration ({"module": NAME, ...PyTorch constructor keyword arguments...}), its inputs are
 * bound by PyTorch's forward-argument names, and it runs forward and backward, owning its
 * activations and workspace (as a tool does, unlike the library's modules).
 *
 * Modules: attn_model_known(i) for i = 0, 1, ... until NULL names every one (the library's table;
 * `attn run --help` and Python's attn.known_modules() print the same list). PyTorch's modules
 * (NAME, PyTorch class, forward tensor arguments; options are the non-tensor arguments):
 *   multihead_attention        nn.MultiheadAttention        query, key, value, key_padding_mask,
 *                              attn_mask; options need_weights, average_attn_weights, is_causal
 *   transformer_encoder_layer  nn.TransformerEncoderLayer   src, src_mask, src_key_padding_mask;
 *                              option is_causal
 *   transformer_decoder_layer  nn.TransformerDecoderLayer   tgt, memory, tgt_mask, memory_mask,
 *                              tgt_key_padding_mask, memory_key_padding_mask; options
 *                              tgt_is_causal, memory_is_causal
 *   transformer_encoder        nn.TransformerEncoder        src, mask, src_key_padding_mask;
 *                              option is_causal
 *   transformer_decoder        nn.TransformerDecoder        as the decoder layer
 *   transformer                nn.Transformer               src, tgt, src_mask, tgt_mask, memory_mask,
 *                              src_key_padding_mask, tgt_key_padding_mask,
 *                              memory_key_padding_mask; options src_is_causal, tgt_is_causal,
 *                              memory_is_causal
 *   sparse_attention, local_global_attention, linear_attention, performer_attention
 *                              the reference sketch's modules: input x [batch, length, d_model],
 *                              their own state_dict names (`attn run --help` lists keys and names)
 *   vision_transformer         torchvision's VisionTransformer: x [B, C, H, W], output the logits
 *                              [B, num_classes]; its configuration through attn_model_vit
 * Float inputs are [batch, length, width] (batch-first). Masks follow PyTorch: a boolean mask
 * (BOOL / U8) is true where attending is NOT allowed, a float mask is added; attn_mask is
 * [Nq, Nk] or [batch * heads, Nq, Nk], a key_padding_mask [batch, Nk].
 *
 * Usage: create, load the weights (attn_model_load; or attn_params_load_file on attn_model_params
 * for the torch.nn modules, whose names are the parameters'), stage the
 * inputs (attn_model_input) and bind them (attn_model_bind), or bind a safetensors file of inputs
 * (attn_model_bind_safetensors); then attn_model_forward, attn_model_output, and for training
 * attn_model_backward (parameter gradients accumulate in the params' grad) and
 * attn_model_input_grad. Not for concurrent calls on one model. */
#ifndef ATTN_MODEL_H
#define ATTN_MODEL_H

#include "capture.h"
#include "core.h"
#include "params.h"
#include "safetensors.h"
#include "vit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_model attn_model;

/* The i-th module name (the order of the list above), NULL past the last: calling it for i = 0, 1,
 * ... until NULL enumerates every module attn_model_create_json accepts. */
ATTN_API const char *attn_model_known(size_t i);

/* Create the module (PyTorch's initialisation) from a JSON configuration object of len bytes
 * (need not be NUL-terminated). Errors name the JSON problem, or the module and offending key. */
ATTN_API attn_status attn_model_create_json(const char *json, size_t len, attn_model **out);
/* The same from the JSON file at path (a regular file of at most ATTN_IO_CAP_CONFIG bytes, read
 * as attn_io_read_input does). Errors name the file: "cannot read 'PATH': ...", "PATH: line 1
 * column 9: ..." (JSON), "PATH: <the module's message>" (unknown module or key, invalid value). */
ATTN_API attn_status attn_model_create_file(const char *path, attn_model **out);
ATTN_API void attn_model_free(attn_model *m);
/* The configuration's "module". */
ATTN_API const char *attn_model_name(const attn_model *m);
/* The module's parameters in PyTorch's state_dict order and names (owned by the model). */
ATTN_API const attn_params *attn_model_params(attn_model *m);

/* The module's weights from st: its parameters under the PyTorch module's state_dict names (the
 * reference sketch's names for sparse_attention .. performer_attention, torchvision's for
 * vision_transformer), each looked up as prefix + name (prefix may be NULL), and its buffers
 * (performer_attention's R), which attn_params_load_file on attn_model_params would not read.
 * With strict, a tensor under prefix that is neither is an error; so are missing and mis-shaped
 * ones, named with the expected shape. A module with buffers refuses to run forward until a load
 * has succeeded. */
ATTN_API attn_status attn_model_load(attn_model *m, const attn_safetensors *st, const char *prefix, int strict);
/* The Vision Transformer of a vision_transformer model (its configuration: image size, channels,
 * classes; input x [B, C, H, W], output the logits [B, num_classes]); NULL for the other modules
 * and for NULL. Owned by the model. */
ATTN_API const attn_vit *attn_model_vit(const attn_model *m);

/* Set a forward option by name (need_weights, average_attn_weights, is_causal, src_is_causal,
 * tgt_is_causal, memory_is_causal); ATTN_ERR_NOT_FOUND when the module has no such option. */
ATTN_API attn_status attn_model_set_option(attn_model *m, const char *name, int value);

/* Bind the inputs from st, each looked up as prefix + argument name (prefix may be NULL). Missing
 * required inputs, mis-shaped ones and, with strict, tensors under prefix that are no argument of
 * the module are errors naming them. Replaces every earlier binding. */
ATTN_API attn_status attn_model_bind_safetensors(attn_model *m, const attn_safetensors *st, const char *prefix,
                                                 int strict);

/* Stage one input by argument name: a C-contiguous tensor of dtype F32, F64, F16, BF16 (float
 * inputs and float masks) or BOOL / U8 (boolean masks), rank <= 8. The data is referenced, not
 * copied: it must stay valid until attn_model_bind. Staging a name twice is an error
 * (ATTN_ERR_ST_DUPLICATE_NAME). */
ATTN_API attn_status attn_model_input(attn_model *m, const char *name, attn_dtype dtype, int rank, const int64_t *shape,
                                      const void *data);
/* Bind the staged inputs (strictly: an unknown name is an error), as attn_model_bind_safetensors
 * would from a file holding them, and drop them from the stage (also on failure). */
ATTN_API attn_status attn_model_bind(attn_model *m);

/* Forward on the bound inputs. keep_for_backward keeps the activations for attn_model_backward;
 * training with (seed, offset) turns dropout on. capture (nullable) records the attention weights
 * its requests ask for, named as in attn_capture ("self_attn", "layers.0.self_attn",
 * "encoder.layers.1.self_attn", "" for multihead_attention); its records are replaced. */
ATTN_API attn_status attn_model_forward(attn_model *m, int keep_for_backward, int training, uint64_t seed,
                                        uint64_t offset, attn_capture *capture);
/* The output [B, N, d] and, for multihead_attention with need_weights, the weights; rank and shape
 * (nullable) receive its dimensions. NULL before a forward. Valid until the next forward. */
ATTN_API const float *attn_model_output(const attn_model *m, int *rank, int64_t shape[4]);
ATTN_API const float *attn_model_weights(const attn_model *m, int *rank, int64_t shape[4]);

/* Backward of the last forward (kept) for the upstream gradient dout (the output's shape):
 * parameter gradients accumulate; the input gradients are then available by argument name
 * ("query", "key", "value", "src", "tgt", "memory"; NULL when the module has no such input, and for
 * key / value when they defaulted to query, whose gradient then includes theirs); numel
 * (nullable) receives the element count. */
ATTN_API attn_status attn_model_backward(attn_model *m, const float *dout);
ATTN_API const float *attn_model_input_grad(const attn_model *m, const char *name, size_t *numel);

#ifdef __cplusplus
}
#endif
#endif
