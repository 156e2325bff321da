/* The reference context: the portable kernel of every family. Every ISA's context starts from
 * it (registry.c), so a family an ISA has no kernel for runs the portable one. */
#include "registry.h"

void attn_isa_init_ref(attn_kernel_ctx *c) {
    c->gemm_base = attn_gemm_arch_ref();
    c->ops = &attn_ops_ref;
    c->flash = attn_flash_kernels_ref();
    c->bf16 = attn_bf16_kernels_ref();
    c->decode = attn_decode_kernels_ref();
    c->linear_vec = &attn_linear_vec_ref;
    c->peak_fma = attn_fma_loop_ref;
    c->peak_dpbf16 = NULL;
    c->peak_amx = NULL;
    c->flash_note = NULL;
    c->bf16_note = NULL;
}
