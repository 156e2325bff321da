/* The training loop of `attn train gpt`, `attn train vit` and `attn demo`: the commands read their
 * options, build their model and data, and hand the loop a configuration and hooks; the loop owns
 * what they have in common:
 *   --resume       the checkpoint's weights, optimizer state and step (attn_checkpoint_load), the
 *                  --seed and --steps checks, "resuming from PATH at step N"
 *   each step      the step hook's gradient and loss, the learning rate (warmup + cosine), clipping
 *                  and the optimizer (attn_train_step; a non-finite gradient skips the step), the
 *                  attn_train_state that makes a resume bitwise
 *   progress       "step N/S  loss X  lr X  |g| X  R tok/s" every log_every steps (or the progress
 *                  hook), timing
 *   evaluation     every eval_every steps and at the end (the evaluate hook prints its lines)
 *   checkpoints    every `every` steps and at the end, rank 0 only (with attn dist)
 *   Ctrl-C         SIGINT / SIGTERM stop between steps, or inside a long one (TRAINER_STOPPED;
 *                  inside a forward / backward, before its next layer: attn_cancel_request,
 *                  ATTN_ERR_CANCELLED; train_signals_*; with attn dist, the ranks agree on
 *                  stopping between steps), the checkpoint
 *                  is written, exit status 130
 *   lock           the checkpoint's advisory lock (attn_io_lock, rank 0) for the whole run: a
 *                  second run on it is refused
 *   messages       "CMD: step N: ...", "CMD: cannot write checkpoint: ...", "final loss: X",
 *                  "checkpoint: PATH (step N)", "step N stopped: <where the pass stopped>",
 *                  "interrupted after step N of S: ..."
 * Where the commands' words differ (the rate's unit, the evaluation's lines, the demo's progress
 * bar and messages) the configuration and the hooks supply them. */
#ifndef ATTN_TRAINER_H
#define ATTN_TRAINER_H

#include <stdint.h>

#include "attn/attn.h"
#include "train_common.h"

/* What the progress hook sees after every step. */
typedef struct trainer_progress {
    int64_t step;          /* steps done, this one included (state.step) */
    int64_t steps;         /* the schedule's total */
    float loss;            /* this step's loss */
    double lr, grad_norm;  /* its learning rate and gradient norm (before clipping) */
    double t_start, units; /* bench_now() when the first step began, and the units trained on since */
} trainer_progress;

/* Where the loop failed, for the fail hook. */
typedef enum trainer_failure {
    TRAINER_FAIL_STEP,     /* a step (the step, progress or periodic evaluate hook, the optimizer) */
    TRAINER_FAIL_SAVE,     /* writing the checkpoint */
    TRAINER_FAIL_EVALUATE, /* the final evaluation */
} trainer_failure;

typedef struct trainer_hooks {
    void *ctx; /* passed to every hook */
    /* After the checkpoint is loaded (--resume), before the first step: the setup that depends on
     * the state (its rng_seed), and the command's header lines. 0, or an exit status with the
     * message printed. Nullable. */
    int (*start)(void *ctx, const attn_train_state *state);
    /* Step `step` (0-based): the parameters' gradients for attn_train_step (the sum over
     * config.accum micro-batches), the step's loss in *loss and its size in *units (tokens,
     * images: the rate of the progress line). Required. */
    attn_status (*step)(void *ctx, int64_t step, float *loss, double *units);
    /* Evaluation after step `step` (final 0: every eval_every steps; 1: at the end, when the run
     * was not interrupted); prints its own line. Called on rank 0 only. Nullable. */
    attn_status (*evaluate)(void *ctx, int64_t step, int final);
    /* The checkpoint's metadata pairs. Required with a checkpoint. */
    void (*metadata)(void *ctx, train_meta *m);
    /* Progress after every step, instead of the line every log_every steps. Nullable. */
    attn_status (*progress)(void *ctx, const trainer_progress *p);
    /* A failure's message (s: the failing status), instead of "CMD: step N: <attn_last_error()>",
     * "CMD: cannot write checkpoint: ..." and "CMD: <eval_name>: ...". Nullable. */
    void (*fail)(void *ctx, trainer_failure where, attn_status s);
} trainer_hooks;

typedef struct trainer_config {
    const char *cmd;         /* "train gpt": the messages' prefix */
    const attn_params *ps;   /* the model's parameters */
    attn_optimizer *opt;     /* their optimizer */
    attn_lr_schedule sched;  /* learning rate of each step */
    double clip;             /* gradient clipping norm (0: none) */
    int64_t accum;           /* micro-batches summed in a step's gradient (attn_train_step) */
    int64_t steps, stop_at;  /* the schedule's steps; stop after step stop_at (0: steps) */
    int64_t batch;           /* examples per step (attn_train_state.data_position = step x batch) */
    uint64_t seed;           /* the run's seed: attn_train_state.rng_seed of a fresh run */
    int given_seed;          /* --seed given: on resume it must be the checkpoint's */
    int resume;              /* continue from `checkpoint` */
    int check_steps;         /* on resume, steps below the checkpoint's step is an error */
    const char *checkpoint;  /* NULL: no checkpoint, no closing lines (the caller reports) */
    int64_t every;           /* checkpoint every N steps (0: at the end only) */
    int64_t log_every;       /* the progress line every N steps, and at the first and last */
    const char *rate_unit;   /* its rate: "tok/s", "img/s" */
    int rate_width;          /* and the rate's width */
    int64_t eval_every;      /* evaluate every N steps (0: at the end only) */
    int eval_at_stop;        /* the periodic evaluation also at the last step */
    const char *eval_name;   /* "validation": "CMD: validation: ..." when the final one fails */
    int catch_signals;       /* stop on SIGINT / SIGTERM (train_signals_catch) */
    int skip_nonfinite_loss; /* a non-finite loss skips the step without attn_train_step */
    int quiet_skips;         /* no "step N: non-finite gradient norm, step skipped" line */
    attn_dist *dist;         /* data-parallel (nullable) */
} trainer_config;

/* The run, for the caller's own report. */
typedef struct trainer_result {
    attn_train_state state;  /* at the end */
    int64_t first_step;      /* the step the run started from */
    int64_t skipped;         /* steps skipped (non-finite gradient or loss) */
    float last_loss;         /* the last step's loss (NaN without steps) */
    double t_start, seconds; /* bench_now() when the first step began; seconds of the steps */
    double units;            /* units trained on */
    int interrupted;         /* stopped by a signal */
} trainer_result;

/* What a step hook returns when it stopped halfway because trainer_stop_requested() said so (a
 * long step checks between its micro-batches or phases): the step is not counted, the optimizer
 * does not run, and the loop ends as on a signal between steps (the checkpoint of the last whole
 * step, exit status 130). Not under attn dist, where the ranks agree on stopping between steps. */
#define TRAINER_STOPPED ((attn_status)1000)
/* Whether SIGINT / SIGTERM asked the running loop to stop. */
int trainer_stop_requested(void);

/* The configuration's defaults: clip 1, accum 1, "tok/s" of width 9, eval_name "evaluation",
 * signals caught, log every 10 steps; the rest zero. */
trainer_config trainer_config_default(const char *cmd);

/* Runs the loop; returns the exit status: 0, 1 (the message printed), or 130 when interrupted
 * (the checkpoint written). result (nullable) receives the run's figures. */
int trainer_run(const trainer_config *c, const trainer_hooks *h, trainer_result *result);

#endif
