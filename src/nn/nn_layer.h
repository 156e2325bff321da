/* Internals of the transformer layers shared by the stacks (layer.c, stack.c). */
#ifndef ATTN_NN_LAYER_H
#define ATTN_NN_LAYER_H

#include "nn_internal.h"

/* One encoder (decoder = 0) or decoder layer. Norm k: 0 = norm1, 1 = norm2, 2 = norm3. */
typedef struct nn_layer {
    attn_layer_config cfg;
    int decoder;
    attn_mha *sa, *ca; /* self_attn, multihead_attn (decoder) */
    nn_store store;    /* linear1, linear2, norms */
    float *w1, *b1, *w2, *b2, *ng[3], *nb[3];
    float *gw1, *gb1, *gw2, *gb2, *gng[3], *gnb[3];
    attn_params *list; /* every parameter under its state_dict name */
} nn_layer;

attn_status attn_nn_layer_check_config(const char *fn, const attn_layer_config *c);
/* rope (nullable): rotary embeddings in the self-attention. */
attn_status attn_nn_layer_init(nn_layer *L, const char *fn, const attn_layer_config *cfg, int decoder,
                               const attn_rope_config *rope);
void attn_nn_layer_destroy(nn_layer *L);
attn_status attn_nn_layer_check_args(const char *fn, const nn_layer *L, const attn_layer_args *a);
/* Rows of x (memory: of memory): batch * n, or n itself for a packed call (cu_seqlens set). */
size_t attn_nn_layer_rows(const attn_layer_args *a, int memory);
/* Streams per dropout site: 1, or batch for a packed call (one per sequence, layers.h). */
uint64_t attn_nn_layer_stream_unit(const attn_layer_args *a);
size_t attn_nn_layer_saved_bytes(const nn_layer *L, const attn_layer_args *a);
size_t attn_nn_layer_ws_bytes(const nn_layer *L, const attn_layer_args *a);
/* saved NULL: inference (the layout goes into the workspace). */
attn_status attn_nn_layer_fwd(const char *fn, nn_layer *L, const attn_layer_args *a, float *out, void *saved,
                              size_t saved_bytes, void *workspace, size_t workspace_bytes);
/* dx written (nullable); dmem written, or added to with acc_mem (nullable). */
attn_status attn_nn_layer_bwd(const char *fn, nn_layer *L, const attn_layer_args *a, const float *dout, float *dx,
                              float *dmem, int acc_mem, const void *saved, size_t saved_bytes, void *workspace,
                              size_t workspace_bytes);

/* One incremental-decoding step of n new rows per batch (eval): self-attention over `self` (the
 * rows are appended, causal), cross-attention over `cross` (decoder). */
size_t attn_nn_layer_step_ws(const nn_layer *L, int64_t B, int64_t n, int64_t length, int64_t n_memory);
attn_status attn_nn_layer_step(const char *fn, nn_layer *L, attn_kv_cache *self, attn_kv_cache *cross,
                               const uint8_t *memory_kpm, const float *x, int64_t B, int64_t n, float *out,
                               void *workspace, size_t workspace_bytes);

/* A stack of layers with an optional final LayerNorm (stack.c). */
typedef struct nn_stack {
    attn_stack_config cfg;
    int decoder;
    nn_layer *layers;
    nn_store norm;
    float *nw, *nb, *gnw, *gnb; /* NULL without the final norm */
    attn_params *list;          /* layers.N.*, norm.* */
} nn_stack;

attn_status attn_nn_stack_init(nn_stack *S, const char *fn, const attn_stack_config *cfg, int decoder,
                               const attn_rope_config *rope);
void attn_nn_stack_destroy(nn_stack *S);
size_t attn_nn_stack_saved(const nn_stack *S, const attn_layer_args *a);
size_t attn_nn_stack_ws(const nn_stack *S, const attn_layer_args *a);
/* base: index of the first layer in the model (layer l's dropout streams: nn_mode_layer(mode, base + l),
 * i.e. offset + NN_SITES_PER_LAYER (base + l) + site). */
attn_status attn_nn_stack_fwd(const char *fn, nn_stack *S, const attn_layer_args *a, int64_t base, float *out,
                              void *saved, size_t saved_bytes, void *workspace, size_t workspace_bytes);
attn_status attn_nn_stack_bwd(const char *fn, nn_stack *S, const attn_layer_args *a, int64_t base, const float *dout,
                              float *dx, float *dmem, const void *saved, size_t saved_bytes, void *workspace,
                              size_t workspace_bytes);
/* Incremental step through every layer (self caches, cross caches or NULL) and the final norm. */
size_t attn_nn_stack_step_ws(const nn_stack *S, int64_t batch, int64_t n, int64_t capacity, int64_t n_memory);
attn_status attn_nn_stack_step(const char *fn, nn_stack *S, attn_kv_cache *self, attn_kv_cache *cross,
                               const uint8_t *memory_kpm, const float *x, int64_t B, int64_t n, float *out,
                               void *workspace, size_t workspace_bytes);

#endif
