/* attn train: losses with their gradients, optimizers, a learning-rate schedule, gradient clipping
 * and accumulation, and checkpoints — with PyTorch's semantics wherever PyTorch has the feature.
 *
 * ---- Memory --------------------------------------------------------------------------------
 * Losses write into buffers the caller owns and allocate nothing. An optimizer owns its state (the
 * moments), allocated once by its *_create and freed by attn_optimizer_free; it keeps a pointer
 * to the parameter list it was created over, which must outlive it. State size:
 *   AdamW: 2 floats per parameter element (exp_avg, exp_avg_sq), 3 with amsgrad (max_exp_avg_sq)
 *   SGD:   1 float per element (momentum_buffer) when momentum != 0, else none.
 *
 * ---- Precision and determinism ------------------------------------------------------------
 * Parameters, gradients and optimizer state are float32; every per-element update is evaluated in
 * double and rounded once when stored. Every reduction (loss sums, gradient norms) is accumulated
 * in double over a partition that depends only on the sizes, combined in a fixed order, so results
 * are bitwise identical for any thread count. Mixed precision (attn_gpt_config.precision = bf16,
 * precision.h) changes only the products inside a model's forward and backward: the parameters (the
 * master weights), their gradients, the optimizer state and checkpoints stay float32 as above.
 *
 * ---- A training step ------------------------------------------------------------------------
 *   attn_params_zero_grad(ps);
 *   for each of k micro-batches: forward; attn_cross_entropy_forward(..., &loss, dlogits);
 *                                backward (parameter gradients accumulate);
 *   attn_lr_warmup_cosine(&sched, step, &lr);
 *   st = attn_train_step(opt, lr, max_norm, k, &grad_norm);  // ATTN_ERR_NUMERIC: step skipped
 */
#ifndef ATTN_TRAIN_H
#define ATTN_TRAIN_H

#include "core.h"
#include "params.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- losses -------------------------------------------------------------------------------- */

/* How per-element losses are combined (PyTorch's reduction='mean' | 'sum' | 'none'). */
typedef enum attn_reduction { ATTN_REDUCTION_MEAN = 0, ATTN_REDUCTION_SUM = 1, ATTN_REDUCTION_NONE = 2 } attn_reduction;

/* torch.nn.functional.cross_entropy(logits [N, C], targets [N] int64, ignore_index,
 * label_smoothing = eps, reduction). Per row i with target t_i != ignore_index:
 *   lse_i  = log sum_j exp(x_ij)
 *   loss_i = (1 - eps) (lse_i - x_it) + eps / C * sum_j (lse_i - x_ij)
 *   dloss_i/dx_ij = softmax(x_i)_j - (1 - eps) [j == t_i] - eps / C
 * Rows whose target is ignore_index have loss 0 and gradient 0 (also when ignore_index is a valid
 * class, as in PyTorch). mean = sum_i loss_i / (number of rows not ignored): with every row
 * ignored, the loss is NaN (0/0) and the gradient 0, exactly as PyTorch. Any other target outside
 * [0, C) is an error naming the row and the value. Logits of any finite magnitude (1e4 and beyond)
 * are handled without overflow: max-subtracted exponentials summed in double. */
typedef struct attn_cross_entropy_config {
    int64_t ignore_index;     /* default -100 */
    double label_smoothing;   /* eps in [0, 1]; default 0 */
    attn_reduction reduction; /* default mean */
} attn_cross_entropy_config;

ATTN_API attn_cross_entropy_config attn_cross_entropy_config_default(void);

/* loss: 1 float (mean, sum) or N floats (none). dlogits [N, C] (nullable): also writes the
 * gradient of the loss for an upstream gradient of 1 (every loss_i weighted 1 for none) — the
 * fused form a training step uses, saving the backward's second pass. dlogits may be logits itself
 * (overwritten in place) but must not overlap it otherwise. cfg NULL = defaults. */
ATTN_API attn_status attn_cross_entropy_forward(const float *logits, const int64_t *targets, int64_t n, int64_t c,
                                                const attn_cross_entropy_config *cfg, float *loss, float *dlogits);
/* dlogits [N, C] = gradient for the upstream gradient dloss: 1 float (mean, sum) or N floats
 * (none); dloss NULL means 1. Recomputes the softmax from logits; dlogits == logits allowed. */
ATTN_API attn_status attn_cross_entropy_backward(const float *logits, const int64_t *targets, int64_t n, int64_t c,
                                                 const attn_cross_entropy_config *cfg, const float *dloss,
                                                 float *dlogits);

/* torch.nn.functional.mse_loss(input, target, reduction) over n elements:
 *   loss_i = (x_i - y_i)^2,   mean = sum_i loss_i / n   (NaN for n = 0, as PyTorch)
 *   dloss/dx_i = 2 (x_i - y_i) g_i,   dloss/dy_i = -dloss/dx_i
 * with g_i = dloss (sum), dloss / n (mean) or dloss[i] (none). loss: 1 float, or n for none. */
ATTN_API attn_status attn_mse_forward(const float *input, const float *target, int64_t n, attn_reduction reduction,
                                      float *loss);
/* dloss: 1 float (mean, sum) or n (none), NULL means 1. dinput, dtarget [n] each nullable,
 * overwritten; either may be the same buffer as input or target. */
ATTN_API attn_status attn_mse_backward(const float *input, const float *target, int64_t n, attn_reduction reduction,
                                       const float *dloss, float *dinput, float *dtarget);

/* ---- optimizers -----------------------------------------------------------------------------
 * Over every parameter of an attn_params list, reading param->grad, updating param->data. The
 * learning rate is given to each step (see attn_lr_warmup_cosine); t counts steps from 1.
 *
 * AdamW (torch.optim.AdamW, maximize negates g):
 *   p <- p (1 - lr wd)                                  decoupled weight decay, applied first
 *   m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2
 *   vmax <- max(vmax, v) and v' = vmax with amsgrad, else v' = v
 *   p <- p - lr / (1 - b1^t) * m / (sqrt(v') / sqrt(1 - b2^t) + eps)     eps outside the sqrt
 * SGD (torch.optim.SGD):
 *   d <- g + wd p                                       (maximize: -g + wd p)
 *   with momentum mu: buf <- d at t = 1, else buf <- mu buf + (1 - dampening) d;
 *                     d <- d + mu buf (nesterov) or d <- buf
 *   p <- p - lr d
 * Everything per element in double from the float32 values, rounded once when stored. */
typedef struct attn_adamw_config {
    double beta1, beta2; /* default 0.9, 0.999; each in [0, 1) */
    double eps;          /* default 1e-8; >= 0 */
    double weight_decay; /* default 0.01 (PyTorch's AdamW default); >= 0 */
    int amsgrad;         /* default 0 */
    int maximize;        /* default 0 */
} attn_adamw_config;

typedef struct attn_sgd_config {
    double momentum;     /* default 0; >= 0 */
    double dampening;    /* default 0 */
    double weight_decay; /* default 0; >= 0 */
    int nesterov;        /* default 0; needs momentum > 0 and dampening 0 (as PyTorch) */
    int maximize;        /* default 0 */
} attn_sgd_config;

ATTN_API attn_adamw_config attn_adamw_config_default(void);
ATTN_API attn_sgd_config attn_sgd_config_default(void);

typedef enum attn_optimizer_kind { ATTN_OPTIMIZER_ADAMW = 0, ATTN_OPTIMIZER_SGD = 1 } attn_optimizer_kind;

typedef struct attn_optimizer attn_optimizer;

/* Allocate the optimizer and its zeroed state for the parameters of ps (cfg NULL = defaults).
 * ps must outlive the optimizer and keep its parameters (same count and sizes). */
ATTN_API attn_status attn_adamw_create(const attn_params *ps, const attn_adamw_config *cfg, attn_optimizer **out);
ATTN_API attn_status attn_sgd_create(const attn_params *ps, const attn_sgd_config *cfg, attn_optimizer **out);
ATTN_API void attn_optimizer_free(attn_optimizer *o);

/* One update of every parameter with learning rate lr (finite, >= 0). */
ATTN_API attn_status attn_optimizer_step(attn_optimizer *o, double lr);

ATTN_API attn_optimizer_kind attn_optimizer_get_kind(const attn_optimizer *o);
ATTN_API const attn_params *attn_optimizer_params(const attn_optimizer *o);
/* Steps taken so far (t of the last step; restored by attn_checkpoint_load). */
ATTN_API int64_t attn_optimizer_steps(const attn_optimizer *o);
/* A weight decay for parameter i alone (PyTorch's parameter groups, e.g. 0 for biases and norms);
 * every parameter starts with the config's. */
ATTN_API attn_status attn_optimizer_set_weight_decay(attn_optimizer *o, size_t param_index, double weight_decay);
/* The state tensor `name` of parameter i, with PyTorch's state keys: "exp_avg", "exp_avg_sq",
 * "max_exp_avg_sq" (AdamW with amsgrad), "momentum_buffer" (SGD with momentum); numel floats.
 * ATTN_ERR_NOT_FOUND when this optimizer has no such state. */
ATTN_API attn_status attn_optimizer_state(const attn_optimizer *o, size_t param_index, const char *name, float **data);

/* ---- learning-rate schedule: linear warmup, then cosine decay to min_lr ----------------------
 * For the 0-based index s of the step about to be taken, W = warmup_steps, T = total_steps:
 *   s < W:        lr = max_lr (s + 1) / W
 *   W <= s < T:   lr = min_lr + (max_lr - min_lr) (1 + cos(pi (s - W) / (T - W))) / 2
 *   s >= T:       lr = min_lr
 * i.e. PyTorch's LinearLR(start_factor = 1/W, total_iters = W - 1) for W steps, then
 * CosineAnnealingLR(T_max = T - W, eta_min = min_lr), held at min_lr from step T on. Needs
 * 0 <= W <= T, 0 <= min_lr <= max_lr (finite), s >= 0. */
typedef struct attn_lr_schedule {
    double max_lr, min_lr;
    int64_t warmup_steps, total_steps;
} attn_lr_schedule;

ATTN_API attn_status attn_lr_warmup_cosine(const attn_lr_schedule *s, int64_t step, double *lr);

/* ---- gradients ------------------------------------------------------------------------------
 * The global L2 norm of every gradient of ps, as if concatenated: sqrt(sum of g^2) in double, in
 * parameter order. */
ATTN_API attn_status attn_grad_norm(const attn_params *ps, double *norm);
/* torch.nn.utils.clip_grad_norm_(max_norm, norm_type=2): with n = the global norm,
 *   c = max_norm / (n + 1e-6);  every g <- g c  when c < 1
 * (PyTorch multiplies by min(c, 1); multiplying by 1 changes nothing). *norm (nullable) receives n,
 * the norm before clipping, as PyTorch returns it. A non-finite n is ATTN_ERR_NUMERIC (PyTorch's
 * error_if_nonfinite=True) with every gradient left bitwise unchanged; *norm still receives it. */
ATTN_API attn_status attn_grad_clip_norm(const attn_params *ps, double max_norm, double *norm);
/* g <- g factor for every gradient (gradient accumulation: factor = 1/k after k micro-batches
 * whose losses were not divided by k). */
ATTN_API attn_status attn_grad_scale(const attn_params *ps, double factor);

/* The step of a training loop over the optimizer's parameters, whose gradients are the SUM over
 * accum_steps >= 1 micro-batches (losses not divided by accum_steps):
 *   n = ||g||_2 / accum_steps                   the norm of the averaged gradient
 *   s = 1 / accum_steps, times max_norm / (n + 1e-6) when max_norm > 0 and that is < 1
 *   g <- g s (one rounding), then attn_optimizer_step(o, lr)
 * *grad_norm (nullable) receives n. When ||g|| is not finite the step is skipped: ATTN_ERR_NUMERIC,
 * parameters, gradients and optimizer state (its step count included) bitwise unchanged; the caller
 * zeroes the gradients and goes on. Gradients are left scaled after a step (zero them before the
 * next accumulation). */
ATTN_API attn_status attn_train_step(attn_optimizer *o, double lr, double max_norm, int64_t accum_steps,
                                     double *grad_norm);

/* ---- checkpoints ----------------------------------------------------------------------------
 * A safetensors file holding:
 *   <name>                              F32, every parameter of ps under its state_dict name
 *   optimizer.<state>.<name>            F32, the optimizer's state (see attn_optimizer_state)
 *   optimizer.step                      I64 [] steps taken
 *   train.step, train.epoch, train.data_position   I64 []     (the attn_train_state fields)
 *   train.rng_seed, train.rng_offset    U64 []
 * and metadata: "attn.format" = "attn-checkpoint-1", "attn.optimizer" = "adamw" | "sgd" | "none",
 * "attn.optimizer.config" (the hyper-parameters, informational), "attn.checksum" (below), and the
 * caller's string pairs, whose keys must not start with "attn.".
 * Writes are atomic: a fresh temporary file next to PATH is written, fsynced and renamed over PATH,
 * then the folder is fsynced
 * (attn_safetensors_writer_write_file); a crash at any point leaves the previous PATH loadable.
 * attn.checksum is 16 hex digits of XXH64 (seed 0) over a canonical stream: for each tensor in
 * file order its name and a NUL, its attn_dtype value (1 byte), rank (1 byte), each dimension as 8
 * bytes little-endian, and its data; then every metadata pair but attn.checksum, sorted by key
 * (strcmp), as key NUL value NUL. A changed byte in any name, shape, value or metadata string fails
 * the load, as a damaged structure or a truncation fails the safetensors validation. */
typedef struct attn_train_state {
    int64_t step; /* training-loop iterations done (skipped steps included) */
    int64_t epoch;
    int64_t data_position;         /* where the data stream resumes */
    uint64_t rng_seed, rng_offset; /* Philox stream of the run (dropout, sampling) */
} attn_train_state;

/* ps required; opt (nullable) has its state saved under the names of its own parameters (normally
 * those of ps); state nullable (not saved). meta_keys / meta_values: n_meta user strings (UTF-8).
 * Errors leave PATH as it was. */
ATTN_API attn_status attn_checkpoint_save(const char *path, const attn_params *ps, const attn_optimizer *opt,
                                          const attn_train_state *state, const char *const *meta_keys,
                                          const char *const *meta_values, size_t n_meta);
/* Validate, then restore ps, opt (nullable: model only) and state (nullable). Every expected
 * tensor must be present with its shape and a float dtype (integers for the scalars), the
 * checksum must match and the optimizer kind must be the checkpoint's; otherwise an error lists
 * the problems (missing / wrong shape / wrong dtype names) and NOTHING is modified. Tensors the
 * objects do not need are ignored. file (nullable) receives the opened checkpoint, for the
 * caller's metadata (attn_safetensors_metadata_find); the caller closes it. */
ATTN_API attn_status attn_checkpoint_load(const char *path, const attn_params *ps, attn_optimizer *opt,
                                          attn_train_state *state, attn_safetensors **file);

#ifdef __cplusplus
}
#endif
#endif
