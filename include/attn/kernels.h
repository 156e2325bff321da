/* attn kernels: SGEMM, row softmax, layernorm, activations, bias/residual, Philox dropout.
 * Every kernel has a portable reference and AVX2 / AVX-512 variants behind a runtime dispatch
 * table (see attn_active_isa()). */
#ifndef ATTN_KERNELS_H
#define ATTN_KERNELS_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- SGEMM -------------------------------------------------------------------------------
 * C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T.
 * op(A) is m x k, op(B) is k x n, C is m x n; lda/ldb/ldc are row strides in elements.
 * beta == 0 means C is not read (NaN in C does not propagate), as in BLAS.
 * Packed, cache-blocked, register-blocked and threaded; bitwise identical for any thread count.
 * The packing buffers live in a caller-provided workspace of attn_sgemm_workspace_size() bytes
 * (it depends on the thread count at the time of the query). */
typedef enum attn_transpose { ATTN_NO_TRANS = 0, ATTN_TRANS = 1 } attn_transpose;

ATTN_API size_t attn_sgemm_workspace_size(int64_t m, int64_t n, int64_t k);
ATTN_API attn_status attn_sgemm(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n, int64_t k,
                                float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                                float *c, int64_t ldc, void *workspace, size_t workspace_bytes);
/* The portable reference (naive triple loop, float accumulation in k order): the oracle. */
ATTN_API attn_status attn_sgemm_ref(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n, int64_t k,
                                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                                    float *c, int64_t ldc);

/* ---- bf16 GEMM ----------------------------------------------------------------------------
 * C = (accumulate ? C : 0) + op(A) op(B) with bf16 A and B (attn_bf16, round-to-nearest-even
 * conversions in core.h) and float accumulation and output: the products of bf16 pairs are
 * exact and summed in float in increasing k, as AVX512-BF16's vdpbf16ps does (subnormals read
 * as 0). Runs on AMX tiles where the CPU has AMX-BF16 and Linux grants the tile state (unless
 * ATTN_AMX=0; TDPBF16PS rounds its float sums its own way, so the last bits may differ from
 * vdpbf16ps), on vdpbf16ps where the CPU has AVX512-BF16 and the active ISA is avx512, on a
 * bit-exact emulation of vdpbf16ps otherwise: by FMAs on other AVX-512 and AVX2 CPUs and on
 * Intel ones, which issue vdpbf16ps at half the FMA rate (about fp32's speed; ATTN_VDPBF16PS=1
 * or 0 runs or emulates it), scalar elsewhere. Bitwise identical for any thread count. The workspace
 * holds both operands repacked (4 (m + n) ceil(k / 2) bytes and a little). */
ATTN_API size_t attn_gemm_bf16_workspace_size(int64_t m, int64_t n, int64_t k);
ATTN_API attn_status attn_gemm_bf16(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n, int64_t k,
                                    const attn_bf16 *a, int64_t lda, const attn_bf16 *b, int64_t ldb, int accumulate,
                                    float *c, int64_t ldc, void *workspace, size_t workspace_bytes);
/* The same product of float A and B rounded to bf16 (to nearest even, subnormals to zero, as
 * vcvtneps2bf16) while they are packed: bit for bit attn_gemm_bf16 on bf16 copies of A and B,
 * without the copies (torch.autocast's matmul). Workspace: attn_gemm_bf16_workspace_size. */
ATTN_API attn_status attn_gemm_bf16_from_f32(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n,
                                             int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                                             int accumulate, float *c, int64_t ldc, void *workspace,
                                             size_t workspace_bytes);

/* B packed once for many products (a frozen layer's weight, as MKL's cblas_gemm_pack or
 * oneDNN's prepacked weights): attn_gemm_bf16 repacks B into pair-word panels on every call,
 * which costs as much as the product itself at few rows (m = 128, k = 768: a third of the
 * time). Pack B into a caller-owned buffer of attn_gemm_bf16_packed_b_size(n, k) bytes (bf16 B,
 * or float B rounded as attn_gemm_bf16_from_f32 rounds it), then multiply any number of A's by
 * it; the products are bit for bit those of attn_gemm_bf16 (or _from_f32) with B itself. The
 * buffer records n, k and the panel width of the bf16 kernels active when it was packed (16
 * columns on AMX, 64 elsewhere): a product for another shape, or after the active kernels changed
 * to another width (attn_set_isa, ATTN_AMX), is refused (ATTN_ERR_INVALID_ARGUMENT): pack again.
 * The buffer may be moved or copied as bytes to an address 4-byte aligned if the original was
 * (its panels keep their offset; a 64-byte-aligned buffer keeps their cache-line alignment).
 * Workspace: attn_gemm_bf16_workspace_size(m, n, k). */
ATTN_API size_t attn_gemm_bf16_packed_b_size(int64_t n, int64_t k);
ATTN_API attn_status attn_gemm_bf16_pack_b(attn_transpose transb, int64_t n, int64_t k, const attn_bf16 *b, int64_t ldb,
                                           void *packed, size_t packed_bytes);
ATTN_API attn_status attn_gemm_bf16_pack_b_from_f32(attn_transpose transb, int64_t n, int64_t k, const float *b,
                                                    int64_t ldb, void *packed, size_t packed_bytes);
/* C = (accumulate ? C : 0) + op(A) B with B from attn_gemm_bf16_pack_b (op(B) as packed). */
ATTN_API attn_status attn_gemm_bf16_packed(attn_transpose transa, int64_t m, int64_t n, int64_t k, const attn_bf16 *a,
                                           int64_t lda, const void *packed_b, int accumulate, float *c, int64_t ldc,
                                           void *workspace, size_t workspace_bytes);
/* The same with a float A rounded while it is packed (as attn_gemm_bf16_from_f32). */
ATTN_API attn_status attn_gemm_bf16_packed_from_f32(attn_transpose transa, int64_t m, int64_t n, int64_t k,
                                                    const float *a, int64_t lda, const void *packed_b, int accumulate,
                                                    float *c, int64_t ldc, void *workspace, size_t workspace_bytes);

/* ---- row-wise ops on [rows, n] contiguous matrices ---------------------------------------- */

/* y = softmax(x) along each row (max-subtracted). Rows that are all -inf give 0; a NaN or +inf
 * makes its row NaN (as torch.softmax). x == y allowed. */
ATTN_API attn_status attn_softmax_forward(const float *x, float *y, int64_t rows, int64_t n);
/* dx = y * (dy - sum(dy * y)) per row. */
ATTN_API attn_status attn_softmax_backward(const float *y, const float *dy, float *dx, int64_t rows, int64_t n);

/* y = (x - mean) / sqrt(var + eps) * gamma + beta (biased variance, as torch.nn.LayerNorm).
 * gamma / beta may be NULL (no affine). mean and rstd [rows] are written for the backward
 * (may be NULL when not needed). */
ATTN_API attn_status attn_layernorm_forward(const float *x, const float *gamma, const float *beta, float *y,
                                            float *mean, float *rstd, int64_t rows, int64_t n, float eps);
/* dx = gradient w.r.t. x (written); dgamma, dbeta [n] are accumulated (+=) when not NULL.
 * Uses mean/rstd saved by the forward. */
ATTN_API attn_status attn_layernorm_backward(const float *x, const float *gamma, const float *mean, const float *rstd,
                                             const float *dy, float *dx, float *dgamma, float *dbeta, int64_t rows,
                                             int64_t n);

/* ---- elementwise ops on n contiguous floats (in-place allowed: y == x) ------------------- */
typedef enum attn_gelu_approx { ATTN_GELU_ERF = 0, ATTN_GELU_TANH = 1 } attn_gelu_approx;

ATTN_API attn_status attn_gelu_forward(const float *x, float *y, int64_t n, attn_gelu_approx approx);
/* dx = dy * gelu'(x); dx == dy allowed. */
ATTN_API attn_status attn_gelu_backward(const float *x, const float *dy, float *dx, int64_t n, attn_gelu_approx approx);
ATTN_API attn_status attn_relu_forward(const float *x, float *y, int64_t n);
/* dx = dy where x > 0, else 0 (PyTorch's convention at 0). */
ATTN_API attn_status attn_relu_backward(const float *x, const float *dy, float *dx, int64_t n);

/* y[r, :] = x[r, :] + bias[:] for r < rows. */
ATTN_API attn_status attn_bias_add(const float *x, const float *bias, float *y, int64_t rows, int64_t n);
/* dbias[:] += sum over rows of dy[r, :] (fixed summation order). */
ATTN_API attn_status attn_bias_backward(const float *dy, float *dbias, int64_t rows, int64_t n);
/* y = a + b elementwise. */
ATTN_API attn_status attn_residual_add(const float *a, const float *b, float *y, int64_t n);

/* ---- Philox-4x32-10 and dropout ----------------------------------------------------------
 * Counter-based: the random number for element i depends only on (seed, offset, i), never on
 * the thread count or call order. Element i of a stream uses counter block
 * {lo(i/4), hi(i/4), lo(offset), hi(offset)} with key {lo(seed), hi(seed)} and takes word i%4. */
ATTN_API void attn_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);
/* Uniform float in [0, 1) with 24 random bits for element index i of stream (seed, offset). */
ATTN_API float attn_philox_uniform(uint64_t seed, uint64_t offset, uint64_t i);

/* Inverted dropout: keep element i when attn_philox_uniform(seed, offset, i) >= p, scaling kept
 * values by 1 / (1 - p); p == 1 drops everything. mask (nullable) receives 1 for kept elements. */
ATTN_API attn_status attn_dropout_forward(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed,
                                          uint64_t offset);
/* dx = dy * keep(i) / (1 - p), recomputing the mask from (seed, offset). */
ATTN_API attn_status attn_dropout_backward(const float *dy, float *dx, int64_t n, float p, uint64_t seed,
                                           uint64_t offset);

#ifdef __cplusplus
}
#endif
#endif
