/* The AVX2 + FMA context (compiled with the AVX2 flags, run only where the CPU has them). bf16
 * products are emulated by FMAs in AVX2 registers. */
#include "registry.h"

void attn_isa_init_avx2(attn_kernel_ctx *c) {
    c->gemm_base = attn_gemm_arch_avx2();
    c->ops = &attn_ops_avx2;
    c->flash = attn_flash_kernels_avx2();
    c->bf16 = attn_bf16_kernels_avx2();
    c->decode = attn_decode_kernels_avx2();
    c->linear_vec = &attn_linear_vec_avx2;
    c->peak_fma = attn_fma_loop_avx2;
}
