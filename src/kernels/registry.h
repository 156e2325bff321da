/* The ISA registry and the kernel context, in the manner of BLIS's per-configuration contexts.
 *
 * One registry row per ISA (registry.c): {the attn_isa, its name, the CPU feature bits it needs,
 * its init function}. The rows serve detection (the last row whose bits the CPU has, rows being
 * in order of preference), ATTN_ISA and attn_force_isa (any row whose bits the CPU has), `attn
 * info` and the tests. A context is built once per ISA on first use: the reference init fills
 * every family slot with the portable kernels, then the ISA's init (isa_<name>.c) overrides what
 * it has faster, so a slot is never empty. Capabilities that decide a code path are fields of the
 * tables (flash's softmax_tile, bf16's fused_softmax_tile), never tests of which ISA runs.
 *
 * Adding an ISA: its kernel files, its isa_<name>.c with attn_isa_init_<name>, a row in
 * registry.c (and the attn_isa value in attn/core.h that names it in the public API). */
#ifndef ATTN_KERNELS_REGISTRY_H
#define ATTN_KERNELS_REGISTRY_H

#include <stdint.h>

#include "attn/core.h"
#include "bf16_internal.h"
#include "decode_kernels.h"
#include "flash_kernels.h"
#include "gemm_internal.h"
#include "linear_vec.h"
#include "ops_internal.h"

/* The peak loops `attn bench peak` times: iters rounds of *chains independent chains of *lanes
 * lanes; NULL where the context has no such unit. */
typedef float (*attn_peak_loop_fn)(int64_t iters, int *chains, int *lanes);

typedef struct attn_kernel_ctx {
    attn_isa isa;                    /* the registry row these tables were built for */
    const char *name;                /* the row's name ("avx512") */
    uint32_t features;               /* attn_cpu_feature_bits() */
    const attn_gemm_arch *gemm;      /* gemm_base blocked for this CPU's caches (points at gemm_tuned) */
    const attn_gemm_arch *gemm_base; /* the kernel's table, blocking as tuned */
    const attn_ops_kernels *ops;
    const attn_flash_kernels *flash;
    const attn_bf16_kernels *bf16;             /* AMX, vdpbf16ps or the emulation (bf16_internal.h) */
    const attn_decode_kernels *decode;         /* one-token decode */
    const attn_linear_vec_kernels *linear_vec; /* linear attention's feature maps */
    attn_peak_loop_fn peak_fma, peak_dpbf16, peak_amx;
    const char *flash_note; /* why the flash table's register tile was chosen (NULL: no choice) */
    const char *bf16_note;  /* why the bf16 pair kernels were chosen (NULL: no choice) */
    attn_gemm_arch gemm_tuned;
} attn_kernel_ctx;

/* An ISA's init: sets the slots it has kernels for (the reference init ran before). */
typedef void (*attn_isa_init_fn)(attn_kernel_ctx *c);

typedef struct attn_isa_row {
    attn_isa isa;
    const char *name;
    uint32_t required; /* ATTN_CPU_* bits the CPU must have */
    attn_isa_init_fn init;
} attn_isa_row;

/* The rows (ATTN_ISA_COUNT of them, row i for attn_isa i); NULL for an ISA this build lacks. */
const attn_isa_row *attn_isa_registry_row(attn_isa isa);

void attn_isa_init_ref(attn_kernel_ctx *c);
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
void attn_isa_init_avx2(attn_kernel_ctx *c);
void attn_isa_init_avx512(attn_kernel_ctx *c);
#endif

/* The context of attn_active_isa(); of a given ISA (which the CPU must support). */
const attn_kernel_ctx *attn_kernel_ctx_active(void);
const attn_kernel_ctx *attn_kernel_ctx_for(attn_isa isa);

#endif
