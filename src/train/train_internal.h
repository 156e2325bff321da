/* Internals shared by the training files: the optimizer object (the checkpoint code reads and
 * restores its state), the fixed partition every reduction uses, and threading helpers. */
#ifndef ATTN_TRAIN_INTERNAL_H
#define ATTN_TRAIN_INTERNAL_H

#include <stdint.h>

#include "attn/train.h"
#include "core/internal.h"

#ifdef _OPENMP
#define TR_PRAGMA(x) _Pragma(#x)
#define TR_PARALLEL_FOR(nt) TR_PRAGMA(omp parallel for schedule(static) num_threads(nt) if ((nt) > 1))
#else
#define TR_PARALLEL_FOR(nt) (void)(nt);
/* attn_checkpoint_load from memory (label names it in messages), for the fuzz harness: every check
 * but, when verify_checksum is 0, the checksum comparison (so that mutated files reach the
 * shape, dtype and metadata checks behind it). */
attn_status attn_tr_checkpoint_load_memory(const void *buf, size_t len, const char *label, const attn_params *ps,
                                           attn_optimizer *opt, attn_train_state *state, int verify_checksum);

#endif

/* Reductions split their n items into TR_BLOCKS contiguous blocks fixed by n alone: each block is
 * summed in order on one thread and the block sums are added in block order, so the result never
 * depends on the thread count. */
#define TR_BLOCKS 64
/* Below this many floats of work a call stays on the calling thread. */
#define TR_MIN_PARALLEL 32768

/* First item of block b of n items split into TR_BLOCKS balanced blocks. */
static inline int64_t tr_block_lo(int64_t n, int b) {
    const int64_t q = n / TR_BLOCKS, r = n % TR_BLOCKS;
    return q * b + (b < r ? b : r);
}

static inline int tr_threads(int64_t work_floats) {
    return work_floats < TR_MIN_PARALLEL ? 1 : attn_threads_for(TR_BLOCKS);
}

/* State tensors per parameter: AdamW exp_avg, exp_avg_sq (+ max_exp_avg_sq); SGD momentum_buffer. */
#define TR_MAX_SLOTS 3

struct attn_optimizer {
    attn_optimizer_kind kind;
    const attn_params *ps;
    size_t n;      /* parameter count at creation */
    size_t *numel; /* [n] sizes at creation (checked at every step) */
    double *wd;    /* [n] weight decay per parameter */
    attn_adamw_config adamw;
    attn_sgd_config sgd;
    int nslots;
    const char *slot_name[TR_MAX_SLOTS];
    float *state; /* nslots x total floats, one allocation */
    float **slot; /* [nslots * n]: slot s of parameter i at slot[s * n + i] */
    int64_t steps;
};

/* ATTN_ERR_SHAPE unless the optimizer's parameter list still has the sizes it was created for. */
attn_status attn_tr_opt_check_params(const char *fn, const attn_optimizer *o);

/* XXH64 with seed 0 (the published algorithm), used by the checkpoint checksum. */
uint64_t attn_tr_xxh64(const void *data, size_t len);

/* "adamw" / "sgd". */
const char *attn_tr_optimizer_kind_name(attn_optimizer_kind k);
/* Its hyper-parameters as "key=value ..." (informational metadata). */
void attn_tr_optimizer_config_str(const attn_optimizer *o, char *buf, size_t len);

/* Sum of squares of every gradient of ps in double (fixed order); ATTN_ERR_INVALID_ARGUMENT when a
 * parameter has no gradient buffer. */
attn_status attn_tr_grad_sumsq(const char *fn, const attn_params *ps, double *sumsq);
/* g <- (float)(g * factor) for every gradient. */
void attn_tr_grad_scale(const attn_params *ps, double factor);

/* attn_checkpoint_load from memory (label names it in messages), for the fuzz harness: every check
 * but, when verify_checksum is 0, the checksum comparison (so that mutated files reach the
 * shape, dtype and metadata checks behind it). */
attn_status attn_tr_checkpoint_load_memory(const void *buf, size_t len, const char *label, const attn_params *ps,
                                           attn_optimizer *opt, attn_train_state *state, int verify_checksum);

#endif
