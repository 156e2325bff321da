/* attn dist: data-parallel training over MPI, with results bitwise independent of the number of
 * processes.
 *
 * Built only when CMake found MPI (attn_dist_available() says whether); in a build without MPI
 * every function that needs MPI returns ATTN_ERR_UNSUPPORTED with the message "this build has no
 * MPI". attn_dist_shard is plain arithmetic and works in every build.
 *
 * ---- The canonical gradient ----------------------------------------------------------------
 * A step's global batch of B examples is cut into M = B / m micro-batches of m consecutive
 * examples. Micro-batch k's gradient g_k is computed on its own (gradients zeroed, forward,
 * loss, backward), and the step's gradient is the left fold, in micro-batch order,
 *     G = (((g_0 + g_1) + g_2) + ... + g_{M-1})          (float32 additions, element by element)
 * Rank r of N holds micro-batches [r M/N, (r+1) M/N) (attn_dist_shard), computes their g_k and
 * calls attn_dist_allreduce_grads, which leaves G in every rank's gradients. Only m fixes the
 * arithmetic: for a fixed m, any N dividing M gives bitwise the same G — and the same G as one
 * process folding its M micro-batch gradients in order (as `attn train gpt --micro-batch m` does),
 * provided each g_k is computed bitwise alike everywhere (attn's kernels are thread-count
 * independent). The fold is exact in its order, never reassociated: the reduction is a
 * reduce-scatter (rank j owns the j-th of N contiguous slices of the flattened gradient and
 * receives every micro-batch's slice, which it adds in micro-batch order), then an all-gather.
 * Communication per rank and step, in units of the flattened gradient: (N-1)/N for each local
 * micro-batch (the reduce-scatter: every micro-batch's slices travel separately, since partial
 * sums would change the grouping), plus (N-1)/N for the all-gather; with one micro-batch per rank,
 * 2 (N-1)/N, as a ring all-reduce.
 *
 * ---- Errors --------------------------------------------------------------------------------
 * The context's communicator returns MPI errors (MPI_ERRORS_RETURN) instead of aborting: they
 * become ATTN_ERR_IO with MPI's message. Collectives must be called by every rank in the same
 * order; a rank that stops calling them makes the others wait, so a caller that fails alone calls
 * attn_dist_abort (or agrees with the others first through attn_dist_agree). OpenMPI's mpirun
 * ends the whole job when a rank exits without MPI_Finalize or dies. */
#ifndef ATTN_DIST_H
#define ATTN_DIST_H

#include "core.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_dist attn_dist;

/* 1 when this build has MPI, else 0. */
ATTN_API int attn_dist_available(void);

/* A context over a duplicate of MPI_COMM_WORLD, initialising MPI first when nobody has
 * (MPI_Init_thread, MPI_THREAD_FUNNELED; then attn_dist_free calls MPI_Finalize). */
ATTN_API attn_status attn_dist_init(attn_dist **out);
/* A context over a duplicate of the caller's communicator: comm points to an MPI_Comm (void * so
 * that this header needs no mpi.h). MPI must be initialised; the caller finalises it. */
ATTN_API attn_status attn_dist_init_comm(const void *comm, attn_dist **out);
/* Frees the duplicate communicator (and finalises MPI when attn_dist_init initialised it). */
ATTN_API void attn_dist_free(attn_dist *d);

ATTN_API int attn_dist_rank(const attn_dist *d);
ATTN_API int attn_dist_size(const attn_dist *d);

/* The data-sharding rule: of a global batch of `batch` examples cut into micro-batches of
 * micro_batch, rank `rank` of `size` takes examples [*first, *first + *count), with
 * count = batch / size. Needs size | batch and micro_batch | batch / size (else
 * ATTN_ERR_INVALID_ARGUMENT naming the numbers). Works without MPI. */
ATTN_API attn_status attn_dist_shard(int64_t batch, int64_t micro_batch, int rank, int size, int64_t *first,
                                     int64_t *count);

/* Every rank's parameter values become rank 0's. */
ATTN_API attn_status attn_dist_broadcast_params(attn_dist *d, const attn_params *ps);

/* The canonical gradient (above). local: n_local flattened gradients (attn_params_numel floats
 * each, parameters in list order), this rank's micro-batches in order; or NULL with n_local = 1:
 * the parameters' current gradients are this rank's one micro-batch. Every rank must pass the
 * same n_local. On return every rank's gradients hold G, bitwise equal across ranks. */
ATTN_API attn_status attn_dist_allreduce_grads(attn_dist *d, const attn_params *ps, const float *local,
                                               int64_t n_local);

/* The same canonical fold over plain float vectors of p elements, without parameters: local holds
 * n_local vectors (this rank's micro-batches in order), out (p floats) receives their fold over
 * every rank, in rank then micro-batch order, bitwise equal across ranks; local == NULL with
 * n_local == 1 reads out itself as this rank's one vector. attn_dist_allreduce_grads is this over
 * the flattened gradients; `attn bench allreduce` times it by message size. Every rank must pass
 * the same n_local and p. */
ATTN_API attn_status attn_dist_reduce_flat(attn_dist *d, const float *local, int64_t n_local, int64_t p, float *out);

/* all[r n + i] = rank r's mine[i]: every rank passes n floats and receives size * n. */
ATTN_API attn_status attn_dist_allgather_f32(attn_dist *d, const float *mine, int64_t n, float *all);

/* *all = the bitwise OR of every rank's flags (to agree on stopping: an error, an interrupt). */
ATTN_API attn_status attn_dist_agree(attn_dist *d, int flags, int *all);

/* Checks that every rank passed the same value (a hash of its configuration, of its weights):
 * ATTN_ERR_INVALID_ARGUMENT on every rank otherwise, with a message naming `what`, the ranks that
 * differ from rank 0 and the values. */
ATTN_API attn_status attn_dist_check_same(attn_dist *d, uint64_t value, const char *what);

/* Seconds spent in attn_dist_allreduce_grads since the context was made (its wall time). */
ATTN_API double attn_dist_reduce_seconds(const attn_dist *d);

/* A limit on how long each collective of d may wait for the other ranks (0, the default: none).
 * Waiting tests the collective and sleeps between tests (a little longer each time, up to 5 ms),
 * so a rank waiting for a slow or stopped one does not burn a core. After `seconds`, the call
 * pings the other ranks for up to 2 s and returns ATTN_ERR_IO naming those that did not answer
 * ("... no answer from rank(s) 1: stopped, hung or lost"); the collective is then still pending
 * on its buffers, so the caller must end the job (attn_dist_abort) rather than go on. */
ATTN_API attn_status attn_dist_set_timeout(attn_dist *d, double seconds);

/* MPI_Abort on the context's communicator: ends every rank of the job with exit status code. */
ATTN_API void attn_dist_abort(attn_dist *d, int code);

#ifdef __cplusplus
}
#endif
#endif
