/* Internals shared by the nn modules: parameter-list building, workspace carving, helpers. */
#ifndef ATTN_NN_INTERNAL_H
#define ATTN_NN_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "attn/attention.h"
#include "attn/kernels.h"
#include "attn/nn.h"
#include "core/internal.h"

/* ---- parameter lists (params.c) ---- */

/* How attn_params_reset initialises a parameter (PyTorch's reset_parameters distributions). */
typedef enum nn_init {
    NN_INIT_ZEROS = 0,
    NN_INIT_ONES,
    NN_INIT_UNIFORM,        /* U(-a, a) */
    NN_INIT_XAVIER_UNIFORM, /* U(-b, b), b = sqrt(6 / (fan_in + fan_out)) */
    NN_INIT_XAVIER_NORMAL,  /* N(0, s^2), s = sqrt(2 / (fan_in + fan_out)) */
    NN_INIT_NORMAL          /* N(0, a^2) */
} nn_init;

/* One parameter a leaf module declares: name, shape, initialisation. */
typedef struct nn_pdesc {
    const char *name;
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    nn_init init;
    double a;               /* bound for NN_INIT_UNIFORM, deviation for NN_INIT_NORMAL */
    int64_t zero_row_plus1; /* k > 0: row k - 1 is zeroed after the draw (Embedding's padding_idx) */
} nn_pdesc;

/* Storage of a leaf module: one block of parameters and one of gradients. */
typedef struct nn_store {
    float *data, *grad;
    attn_params *list;
} nn_store;

/* Allocate and initialise (seed 0) the n described parameters; ptrs[i] / gptrs[i] (gptrs may be
 * NULL) receive each one's data / grad. */
attn_status attn_nn_store_create(nn_store *s, const char *fn, const nn_pdesc *d, int n, float **ptrs, float **gptrs);
void attn_nn_store_free(nn_store *s);

attn_params *attn_nn_params_new(void);
void attn_nn_params_free(attn_params *ps);
/* Append every parameter of src under prefix + its name (the data stays src's). */
attn_status attn_nn_params_append(attn_params *dst, const char *fn, const attn_params *src, const char *prefix);
/* Change the init of every parameter of rank >= 2 to xavier_uniform (nn.Transformer's reset). */
void attn_nn_params_xavier_matrices(attn_params *ps);

/* ---- workspace carving ----
 * A bump allocator over a caller buffer: every block starts 64-byte aligned. Size queries add
 * NN_BLOCK(bytes) per block plus NN_SLACK once for aligning the caller's pointer. */
#define NN_ALIGN 64
#define NN_SLACK 64

typedef struct nn_arena {
    char *base; /* aligned */
    size_t cap, off;
} nn_arena;

/* Saturating size arithmetic for size queries (SIZE_MAX = overflow). */
static inline size_t nn_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }
static inline size_t nn_mul(size_t a, size_t b) {
    size_t r;
    return attn_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
static inline size_t nn_max(size_t a, size_t b) { return a > b ? a : b; }
static inline size_t nn_block(size_t bytes) {
    return bytes > SIZE_MAX - (NN_ALIGN - 1) ? SIZE_MAX : (bytes + NN_ALIGN - 1) & ~(size_t)(NN_ALIGN - 1);
}
static inline size_t nn_fblock(size_t floats) { return nn_block(nn_mul(floats, sizeof(float))); }

/* Wrap a caller buffer; ATTN_ERR_WORKSPACE when it is smaller than need (NULL allowed for 0). */
attn_status attn_nn_arena_init(nn_arena *a, const char *fn, const char *what, void *buf, size_t bytes, size_t need);
/* A block of bytes; never fails once attn_nn_arena_init accepted `need` covering every block. Returns
 * NULL for 0 bytes. */
void *attn_nn_take(nn_arena *a, size_t bytes);
static inline float *nn_takef(nn_arena *a, size_t floats) { return (float *)attn_nn_take(a, floats * sizeof(float)); }
/* The rest of the arena as a raw workspace for a kernel (sgemm, flash). */
static inline void *nn_rest(const nn_arena *a, size_t *bytes) {
    *bytes = a->cap > a->off ? a->cap - a->off : 0;
    return a->base ? a->base + a->off : NULL;
}

/* Prefix the current error message with "fn: " (a kernel's message seen from a module). */
attn_status attn_nn_wrap_error(attn_status st, const char *fn);

/* ---- compute precision (linear.c) ----
 * The precision (attn_precision) of the model call in progress on the calling thread: a model's
 * entry points set it for the call's duration (size queries included, since bf16 needs more
 * workspace) and restore the previous one, so the many linear and attention call sites inside
 * layers and stacks need no extra argument. Every linear / attention call of a model runs on the
 * calling thread (kernels parallelise inside), so a thread-local value reaches all of them.
 * Default fp32. */
attn_precision attn_nn_precision(void);
attn_precision attn_nn_precision_set(attn_precision p); /* returns the previous one */
/* dst[i] = bf16(src[i]), i < n: round to nearest even, subnormal inputs to 0 (the bf16 kernels'
 * vcvtneps2bf16, which the products read as 0 anyway), vectorised and threaded. */
void attn_nn_round_bf16(const float *src, attn_bf16 *dst, size_t n);

/* Frozen weights' bf16 panels: a model whose weights never change after loading (attn_pretrained:
 * its parameters are not reachable from outside) keeps, per linear weight it meets (the weight's
 * address and shape), the weight rounded to bf16 and packed once (attn_bf16_pack_b), instead of
 * rounding and packing it in every bf16 forward product (as much time as the product itself at a
 * few hundred tokens). Installed on the calling thread for a call's duration, as the precision
 * is; the products are bit for bit those without it. Only the forward reads it. */
typedef struct attn_nn_bf16_weights attn_nn_bf16_weights;
attn_nn_bf16_weights *attn_nn_bf16_weights_create(void); /* NULL when out of memory */
void attn_nn_bf16_weights_free(attn_nn_bf16_weights *c);
size_t attn_nn_bf16_weights_count(const attn_nn_bf16_weights *c); /* weights packed so far */
/* c (nullable) for the calling thread's linear forwards from now; returns the previous one */
attn_nn_bf16_weights *attn_nn_bf16_weights_use(attn_nn_bf16_weights *c);

/* ---- linear (linear.c) ----
 * In bf16 precision the three products take bf16-rounded x, W and dy (attn_gemm_bf16_from_f32, float
 * accumulation into the float y, dx, dW); the bias and its gradient stay float. */
size_t attn_nn_linear_ws(int64_t rows, int64_t in, int64_t out);
/* y [rows, out] (row stride out) = x W^T + b; ws: raw workspace of >= attn_nn_linear_ws bytes. */
attn_status attn_nn_linear_fwd(const char *fn, const float *x, const float *w, const float *b, float *y, int64_t rows,
                               int64_t in, int64_t out, void *ws, size_t bytes);
attn_status attn_nn_linear_bwd(const char *fn, const float *x, const float *w, const float *dy, float *dx, int acc_dx,
                               float *dw, float *db, int64_t rows, int64_t in, int64_t out, void *ws, size_t bytes);

/* ---- initialisation (params.c) ----
 * With off set on the calling thread, attn_params_reset (and so every model's creation) gives the
 * randomly initialised parameters zeros instead: a model about to be loaded from a folder would
 * otherwise spend seconds drawing weights it overwrites (GPT-2 small: 124 M normal draws, half its
 * opening time). Returns the previous setting. */
int attn_nn_random_init_off(int off);

/* ---- GPT (gpt.c) ----
 * The compute precision of an existing model's forward (attn_pretrained's GPT-2 switches it; a
 * model being trained keeps its config's). */
void attn_nn_gpt_set_precision(attn_gpt *g, attn_precision p);

/* ---- Vision Transformer (vit.c) ---- */
/* attn_vit's parameter names to torchvision's VisionTransformer state_dict names (the map
 * attn_vit_torchvision_names returns; a constant for attn run's table). */
extern const attn_name_map attn_nn_vit_torchvision_map;

/* ---- multi-head attention (mha.c) ---- */
/* attn_mha_backward with accumulation: dq is added to when acc_q, dk / dv when acc_kv (aliases
 * among dq, dk, dv are summed as in the public function). */
attn_status attn_nn_mha_backward(attn_mha *m, const attn_mha_args *a, const float *dout, float *dq, float *dk,
                                 float *dv, int acc_q, int acc_kv, const void *saved, size_t saved_bytes, void *ws,
                                 size_t ws_bytes);

/* ---- attention capture (capture.c) ----
 * Layers and models push the name parts of what they run ("layers.3.", "self_attn") and pop them
 * back to the mark push returned; an attention module asks whether its full name is wanted. All
 * no-ops on a NULL capture. */
size_t attn_nn_capture_push(attn_capture *c, const char *fmt, ...) ATTN_PRINTF(2, 3);
void attn_nn_capture_pop(attn_capture *c, size_t mark);
/* The ambient capture of the calling thread: push, pop and begin given a NULL capture use it, and an
 * attention module whose args carry no capture records into it (attn_nn_capture_of). It lets a
 * caller that cannot reach the args (attn_model over the internal `attn run` engine) capture a
 * forward: set it around the call, then restore the previous one (returned). NULL = none. */
attn_capture *attn_nn_capture_set_ambient(attn_capture *c);
/* c when non-NULL, else the ambient capture (NULL when none). */
attn_capture *attn_nn_capture_of(attn_capture *c);
/* Where a module writes its weights: w[((b * heads + h - head0) * rows + i - row0) * nk + j]; w NULL
 * when no request matches the current name. */
typedef struct nn_capture_slot {
    float *w;
    int64_t batch, head0, heads, row0, rows, nk;
} nn_capture_slot;
attn_status attn_nn_capture_begin(attn_capture *c, const char *fn, int64_t B, int64_t H, int64_t nq, int64_t nk,
                                  nn_capture_slot *slot);

/* ---- training mode and dropout sites ----
 * A call's training mode: dropout on only when `training`, drawing from the Philox streams
 * (seed, offset + site). Every public args struct carries it as three loose fields; inside the
 * library it travels as one nn_mode. */
typedef struct nn_mode {
    int training;
    uint64_t seed, offset;
} nn_mode;

/* The mode of any args struct with training / seed / offset fields, and the reverse. */
#define NN_MODE_OF(args) ((nn_mode){(args)->training, (args)->seed, (args)->offset})
#define NN_MODE_SET(args, mode)                                                                                        \
    do {                                                                                                               \
        const nn_mode nn_mode_set_ = (mode);                                                                           \
        (args)->training = nn_mode_set_.training;                                                                      \
        (args)->seed = nn_mode_set_.seed;                                                                              \
        (args)->offset = nn_mode_set_.offset;                                                                          \
    } while (0)

/* Dropout sites of one transformer layer call (layers.h, "Dropout sites"): layer l of a model draws
 * from offset + NN_SITES_PER_LAYER * l + site. Sublayer j of a layer (its norm j + 1) owns two
 * sites: an inner one (the attention weights, the feed-forward's hidden dropout) and its output
 * dropout (dropout1 / dropout2 / dropout3). */
typedef enum nn_site {
    NN_SITE_SELF_ATTN_WEIGHTS = 0,  /* self_attn's attention weights */
    NN_SITE_DROPOUT1 = 1,           /* dropout1: the self-attention's output */
    NN_SITE_ENC_FF_DROPOUT = 2,     /* encoder: the feed-forward's hidden dropout */
    NN_SITE_ENC_DROPOUT2 = 3,       /* encoder: dropout2, the feed-forward's output */
    NN_SITE_CROSS_ATTN_WEIGHTS = 2, /* decoder: multihead_attn's attention weights */
    NN_SITE_DEC_DROPOUT2 = 3,       /* decoder: dropout2, the cross-attention's output */
    NN_SITE_DEC_FF_DROPOUT = 4,     /* decoder: the feed-forward's hidden dropout */
    NN_SITE_DEC_DROPOUT3 = 5,       /* decoder: dropout3, the feed-forward's output */
    NN_SITES_PER_LAYER = 8,
    /* The token models' positional dropouts sit in the slot after every layer's (layer index =
     * the model's layer count): source (or the token encoder's input), target. */
    NN_SITE_POS_SRC = 0,
    NN_SITE_POS_TGT = 1
} nn_site;

/* The stream offset of `site` of layer `layer` in a call at `offset`. */
static inline uint64_t nn_site_offset(uint64_t offset, int64_t layer, unsigned site) {
    return offset + (uint64_t)NN_SITES_PER_LAYER * (uint64_t)layer + site;
}
/* The mode of layer `layer` of a model called with mode m (its sites count from the result). */
static inline nn_mode nn_mode_layer(nn_mode m, int64_t layer) {
    m.offset = nn_site_offset(m.offset, layer, 0);
    return m;
}

/* ---- dropout on a branch: site `site` of a call with (seed, offset) ---- */
static inline attn_status nn_dropout_fwd(float *x, int64_t n, float p, int training, uint64_t seed, uint64_t offset) {
    if (!training || p <= 0) return ATTN_OK;
    return attn_dropout_forward(x, x, NULL, n, p, seed, offset);
}
static inline attn_status nn_dropout_bwd(float *dx, int64_t n, float p, int training, uint64_t seed, uint64_t offset) {
    if (!training || p <= 0) return ATTN_OK;
    return attn_dropout_backward(dx, dx, n, p, seed, offset);
}
/* The same at `site` of a call in mode m. */
static inline attn_status nn_site_dropout_fwd(float *x, int64_t n, float p, nn_mode m, unsigned site) {
    return nn_dropout_fwd(x, n, p, m.training, m.seed, m.offset + site);
}
static inline attn_status nn_site_dropout_bwd(float *dx, int64_t n, float p, nn_mode m, unsigned site) {
    return nn_dropout_bwd(dx, n, p, m.training, m.seed, m.offset + site);
}

/* ---- an attention's masks and mode into multi-head attention arguments ---- */
static inline void nn_mha_set_masks(attn_mha_args *m, const attn_masks *k) {
    m->attn_mask = k->attn_mask;
    m->attn_mask_float = k->attn_mask_float;
    m->attn_mask_3d = k->attn_mask_3d;
    m->key_padding_mask = k->key_padding_mask;
    m->key_padding_mask_float = k->key_padding_mask_float;
    m->is_causal = k->is_causal;
    m->global_attention_mask = k->global_attention_mask;
}
/* The attention weights' dropout at `site` of a call in mode md. */
static inline void nn_mha_set_mode(attn_mha_args *m, nn_mode md, unsigned site) {
    md.offset += site;
    NN_MODE_SET(m, md);
}

#endif
