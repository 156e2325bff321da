/* The one-token decode driver (src/attention/decode.c), called by the flash forward; its kernels
 * and the method are described in kernels/decode_kernels.h. */
#ifndef ATTN_DECODE_INTERNAL_H
#define ATTN_DECODE_INTERNAL_H

#include <stdint.h>

#include "attention_common.h"
#include "kernels/decode_kernels.h"

/* The driver, called by attn_flash_forward (attn_ctx validated): does the decode path take these
 * arguments (one query row, no mask or transform beyond causality, window and key mask, no
 * dropout, K and V rows contiguous)? general: the flash path's needs_general_epilogue. */
int attn_flash_decode_applies(const attn_ctx *c, const attn_tensor *k, const attn_tensor *v, int general);
/* Workspace bytes of the decode path (independent of the thread count). */
size_t attn_flash_decode_workspace(int64_t b, int64_t hq, int64_t nk, int64_t d, int64_t dv);
/* out (and lse, nullable) of the one query row against keys [jlo, jhi) (causality and window
 * already applied by the caller; the key mask here). */
attn_status attn_flash_decode(const char *fn, const attn_ctx *c, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, attn_tensor *out, attn_tensor *lse, int64_t jlo, int64_t jhi,
                              void *workspace, size_t workspace_bytes);

#endif
