/* attn vit: the Vision Transformer (torchvision's, and DeiT's distillation token), with name maps
 * to torchvision's and timm's checkpoints. Memory, dropout and determinism: the module contract at
 * the top of params.h. */
#ifndef ATTN_VIT_H
#define ATTN_VIT_H

#include "capture.h"
#include "core.h"
#include "params.h"
#include "precision.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    int64_t image_h, image_w; /* torchvision's image_size (square there) */
    int64_t patch_size;       /* square patches, divides image_h and image_w */
    int64_t in_channels;      /* default 3 */
    int64_t num_layers, num_heads, hidden_dim, mlp_dim, num_classes;
    float dropout;            /* default 0 */
    float layer_norm_eps;     /* every LayerNorm's (default 1e-6) */
    int distilled;            /* DeiT's dist_token and head_dist (default 0) */
    attn_precision precision; /* compute precision (default fp32; see attn_precision): in
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
    const float *images; /* [B, C, image_h, image_w] */
    int separate_heads;  /* distilled only: logits [2, B, classes] (class head, dist head) */
    int training;
    uint64_t seed, offset;
    attn_capture *capture; /* nullable: layers.N.self_attn */
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
                                       const void *saved, size_t saved_bytes, void *workspace, size_t workspace_bytes);

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

#ifdef __cplusplus
}
#endif
#endif
