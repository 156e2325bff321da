/* The machine the kernels are tuned for: cache sizes (cpuid, else sysfs, else the recognised
 * microarchitecture's, else a default; ATTN_CACHE overrides) and the microarchitecture, detected
 * once per process. The kernel families derive their blocking from them when their dispatch
 * context is built (gemm.c: attn_gemm_blocking); `attn info` prints both. */
#ifndef ATTN_TUNING_H
#define ATTN_TUNING_H

#include <stdint.h>

#include "attn/core.h" /* attn_cache_env is public */

typedef struct attn_cache_sizes {
    int64_t l1d, l2, l3;                   /* bytes, per core (L1d, L2) and per L3 slice the core sees */
    const char *l1d_src, *l2_src, *l3_src; /* where each came from */
} attn_cache_sizes;

typedef struct attn_uarch {
    char vendor[13];   /* cpuid vendor string, "" when not x86 */
    int family, model; /* cpuid display family and model */
    const char *name;  /* "Zen 4", "Sapphire Rapids", ... or "unrecognised" */
} attn_uarch;

/* The sizes the kernels use (ATTN_CACHE applied), detected on first call. */
const attn_cache_sizes *attn_cpu_caches(void);
/* The microarchitecture, detected on first call. */
const attn_uarch *attn_cpu_uarch(void);
/* attn_cache_env (the ATTN_CACHE value and why it was ignored): attn/core.h. */

/* Parse an ATTN_CACHE value, "l1=48K,l2=1M,l3=32M" (any subset, sizes in bytes with an optional
 * K, M or G binary suffix), into the fields it names; returns 0 when it cannot be used (nothing
 * of *c changed), with *problem saying why. */
int attn_cache_parse(const char *s, attn_cache_sizes *c, const char **problem);

#endif
