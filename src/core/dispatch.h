/* The dispatch context: one kernel table per family for one architecture, built once per ISA
 * and shared by every call (attn_active_isa() picks which; ATTN_ISA and attn_force_isa still
 * force one). The families supply their per-ISA choosers; core only holds opaque pointers, so
 * it depends on no kernel header. */
#ifndef ATTN_DISPATCH_H
#define ATTN_DISPATCH_H

#include <stdint.h>

#include "attn/core.h"

struct attn_gemm_arch;
struct attn_ops_kernels;
struct attn_flash_kernels;
struct attn_bf16_kernels;
struct attn_decode_kernels;

typedef struct attn_kernel_ctx {
    attn_isa isa;      /* the architecture of these tables */
    uint32_t features; /* attn_cpu_feature_bits() */
    const struct attn_gemm_arch *gemm;
    const struct attn_ops_kernels *ops;
    const struct attn_flash_kernels *flash;
    const struct attn_bf16_kernels *bf16; /* AMX, vdpbf16ps or the emulation (see bf16_internal.h) */
    const struct attn_decode_kernels *decode; /* one-token decode (attention/decode_internal.h) */
} attn_kernel_ctx;

/* The context of attn_active_isa(); of a given ISA (which the CPU must support). */
const attn_kernel_ctx *attn_kernel_ctx_active(void);
const attn_kernel_ctx *attn_kernel_ctx_for(attn_isa isa);

/* Per-family choosers, defined with each family. */
const struct attn_gemm_arch *attn_gemm_arch_for(attn_isa isa);
const struct attn_ops_kernels *attn_ops_for(attn_isa isa);
const struct attn_flash_kernels *attn_flash_kernels_for(attn_isa isa);
const struct attn_bf16_kernels *attn_bf16_kernels_for(attn_isa isa);
const struct attn_decode_kernels *attn_decode_kernels_for(attn_isa isa);

#endif
