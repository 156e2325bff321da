/* attn precision: the compute precision of a model (fp32, or bf16 mixed precision): the
 * attn_gpt_config (gpt.h) and attn_vit_config (vit.h) field `precision`. */
#ifndef ATTN_PRECISION_H
#define ATTN_PRECISION_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compute precision of a model's forward and backward (mixed precision, as PyTorch's autocast with
 * float32 master weights):
 *   fp32: everything in float32.
 *   bf16: the matrix products take operands rounded to bfloat16 (round to nearest even; a
 *         subnormal float32 operand becomes 0, as vcvtneps2bf16 does) and
 *         accumulate and return float32: every linear layer (forward x W^T; backward dY W and
 *         dY^T x, i.e. dY rounded too) and, with the flash and window attention kinds, attention
 *         (Q, K, V and dO rounded; attn_flash_*'s bf16 path: P and dS rounded, statistics float).
 *         The other attention kinds keep float32 attention. Layernorm, softmax statistics, GELU,
 *         residual adds, embeddings, the loss and the optimizer stay float32; parameters and their
 *         gradients stay float32 (gradients accumulate in float32) — they are the master weights,
 *         and what checkpoints store. The products run on the bf16 kernels of attn_gemm_bf16 /
 *         attn_flash_*: AMX tiles where the CPU has AMX-BF16, else AVX512-BF16 (vdpbf16ps)
 *         where it has that (emulated on Intel, where the emulation is faster), a bit-exact
 *         emulation of vdpbf16ps elsewhere (by FMAs on other AVX-512 and on AVX2 CPUs, below fp32's speed; scalar
 *         without AVX2, far slower; the same roundings: products bit for bit, attention up to its
 *         float exp) — bf16 mode works on every CPU.
 * Results are bitwise identical for any thread count in either precision. attn_gpt_forward,
 * attn_gpt_backward and attn_gpt_workspace_size follow attn_gpt_config.precision (a bf16 call needs
 * a larger workspace: ask that model); generation steps (attn_gpt_forward_step) run float32.
 * attn_vit_forward, attn_vit_backward and attn_vit_workspace_size follow attn_vit_config.precision
 * the same way (the patch embedding is a linear layer; the ViT's attention is flash). */
typedef enum attn_precision { ATTN_PRECISION_FP32 = 0, ATTN_PRECISION_BF16 = 1 } attn_precision;

/* "fp32", "bf16"; NULL for a value outside the enum. */
ATTN_API const char *attn_precision_name(attn_precision p);

#ifdef __cplusplus
}
#endif
#endif
