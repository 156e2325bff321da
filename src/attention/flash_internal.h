/* The flash attention driver's internals shared with local + global attention and the tests
 * (src/attention/flash.c); the tile kernels it runs are in kernels/flash_kernels.h. */
#ifndef ATTN_FLASH_INTERNAL_H
#define ATTN_FLASH_INTERNAL_H

#include <stdint.h>

#include "attn/attention.h"
#include "kernels/flash_kernels.h"

/* attn_flash_backward for one pass of a softmax split over several key sets (local + global
 * attention, src/attention/local_global.c): out and lse are the whole row's, so each pass's
 * P = exp(s - lse) and D = rowsum(dO * out) are exactly its share of the gradient. Unlike
 * attn_flash_backward it never renormalises a row of large |lse| over this pass's own keys (that
 * would give this pass's softmax, not its part of the whole). fn names the caller in messages. */
attn_status attn_flash_backward_part(const char *fn, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                     const attn_sdpa_params *params, const attn_tensor *out, const attn_tensor *dout,
                                     const attn_tensor *lse, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                     void *workspace, size_t workspace_bytes);

/* Key blocks per task of the backward's key pass on a machine whose L2 holds l2 bytes: as many
 * as keep the run's K and V rows (kv_bytes per element: 4 fp32, 2 bf16) within the L2, at least
 * one, so each query block meets keys and values held near the core instead of the whole head's
 * streaming from the L3 (Zen 4, d = 128, N = 4096, one thread: 63-66% of the FMA peak with
 * whole-head runs, 80-84% with 12-16 blocks; half that, 8, measured 77-81%). The runs set only
 * the granularity of the work, never a bit of the results. */
int64_t attn_flash_key_run_blocks(int64_t d, int64_t dv, int kv_bytes, int64_t l2);
/* Tests: a run length to use instead of the derived one (0: derived). */
void attn__flash_key_run_force(int64_t blocks);

#endif
