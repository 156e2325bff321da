/* The dispatch context (dispatch.h): built once per ISA on first use, then read lock-free. */
#include "dispatch.h"

#include <stdatomic.h>

#define NISA (ATTN_ISA_AVX512 + 1)

static attn_kernel_ctx ctxs[NISA];
static atomic_int ready[NISA]; /* 0: not built, 1: being built, 2: ready */

const attn_kernel_ctx *attn_kernel_ctx_for(attn_isa isa) {
    const int i = (int)isa < 0 || (int)isa >= NISA ? 0 : (int)isa;
    if (atomic_load_explicit(&ready[i], memory_order_acquire) == 2) return &ctxs[i];
    int expect = 0;
    if (atomic_compare_exchange_strong(&ready[i], &expect, 1)) {
        attn_kernel_ctx c;
        c.isa = (attn_isa)i;
        c.features = attn_cpu_feature_bits();
        c.gemm = attn_gemm_arch_for(c.isa);
        c.ops = attn_ops_for(c.isa);
        c.flash = attn_flash_kernels_for(c.isa);
        c.bf16 = attn_bf16_kernels_for(c.isa);
        c.decode = attn_decode_kernels_for(c.isa);
        ctxs[i] = c;
        atomic_store_explicit(&ready[i], 2, memory_order_release);
    } else {
        while (atomic_load_explicit(&ready[i], memory_order_acquire) != 2) {
        }
    }
    return &ctxs[i];
}

const attn_kernel_ctx *attn_kernel_ctx_active(void) { return attn_kernel_ctx_for(attn_active_isa()); }
