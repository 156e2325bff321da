/* Internals of attn dist shared with the CLI's benchmarks. */
#ifndef ATTN_DIST_INTERNAL_H
#define ATTN_DIST_INTERNAL_H

#include "attn/dist.h"

/* The canonical reduction of attn_dist_allreduce_grads over flat buffers: local holds n_local
 * vectors of p floats (this rank's micro-batches in order); out (p floats) receives their fold over
 * every rank, in rank then micro-batch order. local == NULL with n_local == 1 reads `out` itself
 * as this rank's vector. */
attn_status attn_dist_reduce_flat(attn_dist *d, const float *local, int64_t n_local, int64_t p, float *out);

#endif
