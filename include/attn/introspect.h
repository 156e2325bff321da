/* attn introspection: the ISA registry, which kernels the active ISA runs and how they are
 * blocked for this CPU, and the peak loops benchmarks measure against. For `attn info`, `attn
 * bench` and bug reports; nothing here changes what runs (ATTN_ISA / attn_force_isa do). */
#ifndef ATTN_INTROSPECT_H
#define ATTN_INTROSPECT_H

#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row of the ISA registry (attn_isa 0 .. ATTN_ISA_COUNT - 1, in order of preference). */
typedef struct attn_isa_desc {
    const char *name;  /* as ATTN_ISA spells it: "ref", "avx2", "avx512" */
    uint32_t required; /* the ATTN_CPU_* bits the ISA needs */
    int built;         /* this build has its kernels (0 for x86 ISAs off x86) */
    int runnable;      /* built and this CPU has the bits: attn_force_isa accepts it */
} attn_isa_desc;

/* ATTN_ERR_INVALID_ARGUMENT for an isa outside 0 .. ATTN_ISA_COUNT - 1 or a NULL out. */
ATTN_API attn_status attn_isa_describe(attn_isa isa, attn_isa_desc *out);

/* What runs a family's products, and so the peak its speed is a fraction of. */
typedef enum attn_compute_unit {
    ATTN_UNIT_FMA = 0,      /* vector FMAs (fp32; bf16 products emulated by them) */
    ATTN_UNIT_DPBF16PS = 1, /* AVX512-BF16's vdpbf16ps */
    ATTN_UNIT_AMX = 2       /* AMX tiles (TDPBF16PS) */
} attn_compute_unit;

/* The kernels of the active ISA and the blocking derived from this CPU. Strings are constant
 * (never freed); a note is NULL where nothing was chosen. */
typedef struct attn_kernel_info {
    attn_isa isa;
    const char *isa_name;
    /* fp32 GEMM: register tile, and the cache blocks for this CPU next to the tuned ones (which
     * the blocks are derived from: KC by the L1d, NC by the L2, MC by the L3) */
    const char *gemm_name;
    int gemm_mr, gemm_nr, gemm_kc, gemm_nc, gemm_mc;
    int gemm_tuned_kc, gemm_tuned_nc, gemm_tuned_mc;
    /* flash attention: the tile (query rows x keys), the tile kernel, its register tile rows
     * (0 where no choice is made) and why */
    const char *flash_name;
    int flash_br, flash_bc, flash_register_rows;
    const char *flash_note;
    /* bf16 pair products: the kernels, what runs them, and why they were chosen */
    const char *bf16_name;
    attn_compute_unit bf16_unit;
    const char *bf16_note;
    /* one-token decode: split-K chunk of keys, score block, most query heads per call */
    const char *decode_name;
    int decode_chunk, decode_block, decode_max_group;
    /* the machine: caches in bytes (L1d and L2 per core, L3 as one core sees it), where each size
     * came from, the cpuid vendor ("" off x86), family, model and recognised microarchitecture;
     * ATTN_CACHE's value (NULL when unset) and why it was ignored (NULL when applied) */
    int64_t l1d, l2, l3;
    const char *l1d_source, *l2_source, *l3_source;
    const char *vendor;
    int family, model;
    const char *uarch;
    const char *cache_env, *cache_env_problem;
} attn_kernel_info;

/* Fills *out for attn_active_isa(). ATTN_ERR_INVALID_ARGUMENT for a NULL out. */
ATTN_API attn_status attn_kernel_info_get(attn_kernel_info *out);

/* Key blocks (of attn_kernel_info's flash_bc keys) per task of the flash backward's key pass at
 * head dims d, dv for K and V of kv_type on this CPU: as many as keep a run's K and V within the
 * L2. A granularity only: results never depend on it. 0 for a bad argument (d or dv < 1, a type
 * outside the enum). */
ATTN_API int64_t attn_flash_backward_key_blocks(int64_t d, int64_t dv, attn_type kv_type);

/* A peak loop of the active ISA's context: iters rounds of *chains independent chains of *lanes
 * lanes (2 flops per lane per FMA, 4 per vdpbf16ps lane, 4 per AMX pair lane: a TDPBF16PS is
 * 16 x 16 x 16 of them), returning a value made from the accumulators (so the work is not
 * optimised away). *chains = *lanes = 0 where the context has no such unit (vdpbf16ps below
 * AVX-512 or without AVX512-BF16; AMX unless the bf16 kernels run on AMX tiles). */
ATTN_API float attn_peak_loop(attn_compute_unit unit, int64_t iters, int *chains, int *lanes);

#ifdef __cplusplus
}
#endif
#endif
