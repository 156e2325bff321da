/* Module configurations from JSON objects holding the keyword arguments of the matching PyTorch
 * constructor (same names, same defaults): the format of `attn run`'s MODEL.json and of the
 * parity fixtures' metadata. Internal: used by tools/cmd_run.c and the tests. */
#ifndef ATTN_NN_CONFIG_H
#define ATTN_NN_CONFIG_H

#include "attn/nn.h"
#include "io/json.h"

/* Key kinds of attn_nn_json_read. */
typedef enum nn_ktype {
    NN_K_INT,         /* int64_t */
    NN_K_INT_OR_NULL, /* int64_t, null -> 0 */
    NN_K_BOOL,        /* int (JSON true / false) */
    NN_K_FLOAT,       /* float */
    NN_K_STRING,      /* const char * into the document */
    NN_K_OBJECT       /* const attn_json * */
} nn_ktype;

typedef struct nn_key {
    const char *name;
    nn_ktype type;
    void *dst;
    int required;
} nn_key;

/* Read obj's members into the keys' destinations (absent keys keep their values). A member that is
 * neither a key nor listed in ignore (NULL-terminated, may be NULL) is an error, and so are a
 * wrong type and a missing required key: ATTN_ERR_INVALID_ARGUMENT with a one-line message
 * "WHAT: ..." naming the key. */
attn_status attn_nn_json_read(const char *what, const attn_json *obj, const nn_key *keys, int nkeys,
                              const char *const *ignore);

/* nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
 * add_zero_attn=False, kdim=None, vdim=None, batch_first=True (only True is accepted)), and attn's
 * separate_projections (default false; see attn_mha_config). */
attn_status attn_nn_json_mha_config(const attn_json *obj, const char *const *ignore, attn_mha_config *cfg);

/* The seed's attention modules over one MultiHeadAttention with nn.Linear projections W_q, W_k,
 * W_v, W_o: keys d_model, num_heads (required), dropout (default 0.1) and, when window_key is not
 * NULL, that key (default 128, >= 0) into attention.window. Gives the attn_mha_config with
 * separate_projections; the caller chooses attention.kind (the seed's SparseAttention: window_key
 * "window_size", the window kind). */
attn_status attn_nn_json_seed_attention_config(const attn_json *obj, const char *what, const char *window_key,
                                               const char *const *ignore, attn_mha_config *cfg);
/* The seed's kernelised attentions over one attention with nn.Linear projections, corrected:
 * LinearAttention(d_model, num_heads) (kind ATTN_ATTENTION_LINEAR) and
 * PerformerAttention(d_model, num_heads, num_features=256 (1 .. 65536), dropout=0.1) (kind
 * ATTN_ATTENTION_PERFORMER: attention.num_features set, no projection yet; dropout is read and
 * unused: the sketch's forward never applies it); both also take
 * "causal" (default false) into *causal. Keys d_model and num_heads are required (d_model a
 * multiple of num_heads). Gives the attn_mha_config with separate_projections and the kind. */
attn_status attn_nn_json_seed_kernel_config(const attn_json *obj, const char *what, attn_attention_kind kind,
                                            const char *const *ignore, attn_mha_config *cfg, int *causal);
/* The seed's LocalGlobalAttention(d_model, num_heads, local_window=128, dropout=0.1). */
attn_status attn_nn_json_local_global_config(const attn_json *obj, const char *const *ignore,
                                             attn_local_global_config *cfg);

/* nn.TransformerEncoderLayer / TransformerDecoderLayer(d_model, nhead, dim_feedforward=2048,
 * dropout=0.1, activation="relu" | "gelu", layer_norm_eps=1e-5, batch_first=True, norm_first=False,
 * bias=True (only True)). what names the object in messages. */
attn_status attn_nn_json_layer_config(const attn_json *obj, const char *what, const char *const *ignore,
                                      attn_layer_config *cfg);
/* nn.TransformerEncoder / TransformerDecoder: {"num_layers": N, "norm": true|false, layer_key:
 * {layer arguments}} (layer_key "encoder_layer" or "decoder_layer"); enable_nested_tensor and
 * mask_check are accepted and ignored (they change no result). */
attn_status attn_nn_json_stack_config(const attn_json *obj, const char *what, const char *layer_key,
                                      const char *const *ignore, attn_stack_config *cfg);
/* nn.Transformer(d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
 * dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5, batch_first=True,
 * norm_first=False). */
attn_status attn_nn_json_transformer_config(const attn_json *obj, const char *const *ignore,
                                            attn_transformer_config *cfg);

/* torchvision.models.VisionTransformer(image_size, patch_size, num_layers, num_heads, hidden_dim,
 * mlp_dim, dropout=0.0, attention_dropout=0.0 (must equal dropout), num_classes=1000,
 * representation_size=None (only None)), and attn's additions in_channels=3, layer_norm_eps=1e-6,
 * distilled=false (DeiT's distillation token). */
attn_status attn_nn_json_vit_config(const attn_json *obj, const char *const *ignore, attn_vit_config *cfg);

#endif
