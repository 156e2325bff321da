/* attn params: the parameter list of every module and model (PyTorch's state_dict: names, shapes,
 * data and gradients), loaded from and saved to safetensors, also under another naming scheme
 * through name maps; and the contract every module of positions.h, mha.h, layers.h, gpt.h,
 * seq2seq.h and vit.h follows.
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
#ifndef ATTN_PARAMS_H
#define ATTN_PARAMS_H

#include "core.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameters -----------------------------------------------------------------------------
 * A module's parameters, in PyTorch's state_dict order and names ("in_proj_weight",
 * "out_proj.weight", ...). The list belongs to the module and lives as long as it. */
typedef struct attn_param {
    const char *name; /* state_dict name, e.g. "self_attn.in_proj_weight" */
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    size_t numel;
    float *data; /* numel floats, owned by the module */
    float *grad; /* numel floats, owned by the module; backward adds to it */
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
    const char *ours;   /* pattern on attn's side, e.g. "layers.*.linear1." */
    const char *theirs; /* pattern on the other side, e.g. "blocks.*.mlp.fc1." */
} attn_name_rule;
typedef struct attn_name_map {
    const attn_name_rule *rules; /* count rules, tried in order */
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

#ifdef __cplusplus
}
#endif
#endif
