/* attn capture: the attention weights of chosen modules, heads and rows, recorded during an
 * ordinary forward pass of any module or model (below). */
#ifndef ATTN_CAPTURE_H
#define ATTN_CAPTURE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

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
typedef struct attn_capture attn_capture;

ATTN_API attn_status attn_capture_create(attn_capture **out);
ATTN_API void attn_capture_free(attn_capture *c);
/* Ask for heads [head0, head0 + heads) (heads 0 = to the last) and query rows [row0, row0 + rows)
 * (rows 0 = to the last) of every module matching pattern. A request reaching past a module's
 * heads or rows fails that forward with ATTN_ERR_SHAPE naming the module; a module whose kind
 * has no weights fails it with ATTN_ERR_UNSUPPORTED. */
ATTN_API attn_status attn_capture_add(attn_capture *c, const char *pattern, int64_t head0, int64_t heads, int64_t row0,
                                      int64_t rows);
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
