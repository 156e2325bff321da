/* The flash attention driver's internals shared with local + global attention and the tests
 * (src/attention/flash.c); the tile kernels it runs are in kernels/flash_kernels.h. */
#ifndef ATTN_FLASH_INTERNAL_H
#define ATTN_FLASH_INTERNAL_H

#include <stdint.h>

#include "attention_common.h"
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

/* One problem of a packed batch (attn_flash_varlen_forward): its context (attn_ctx_init_typed)
 * and views, whether lse is wanted, and its first task in the common loop. */
typedef struct attn_flash_seq {
    attn_ctx c;
    attn_tensor q, k, v, out, lse;
    int has_lse;
    int64_t task0;
} attn_flash_seq;

/* Does attn_flash_forward take the one-token decode path for this (checked) problem? */
int attn_flash_takes_decode(const attn_ctx *c, const attn_tensor *k, const attn_tensor *v);
/* Tasks of the tile forward for this problem: B Hq ceil(Nq / BR). */
int64_t attn_flash_seq_tasks(const attn_ctx *c);
/* The tile forward of n checked problems sharing d, dv and the element types (none taking the
 * decode path, none without tasks), as one parallel loop over all their (problem, head, query
 * block) tasks: seqs[s].task0 increasing, `tasks` in all. Each task computes what
 * attn_flash_forward's task computes, bit for bit. base: 64-byte aligned room for the per-thread
 * tile buffers (any one problem's attn_flash_workspace_size holds them). */
void attn_flash_forward_seqs(const attn_flash_seq *seqs, int64_t n, int64_t tasks, float *base);

#endif
