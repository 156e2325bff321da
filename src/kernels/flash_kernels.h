/* Tile kernels of flash attention, one implementation per ISA: flash_ref.c (portable, the oracle
 * for the others), flash_avx2.c, flash_avx512.c. Their driver is src/attention/flash.c; the ISA's
 * init (isa_<name>.c) puts its table in the kernel context (registry.h).
 *
 * The driver keeps score tiles transposed, S^T [keys x queries], so that the online softmax
 * reduces over rows with plain vector ops (no horizontal reductions) and K is read in place as
 * the broadcast operand of S^T = K Q^T. Scores are in log2 units (the driver folds log2(e) into
 * the scale), so probabilities are exp2(s - max). */
#ifndef ATTN_FLASH_KERNELS_H
#define ATTN_FLASH_KERNELS_H

#include <stdint.h>

#include "attn/core.h"

/* Query rows per tile (columns of S^T) and keys per tile (rows of S^T). Tiles of the reference
 * and every ISA are the same, so the tile grid (and which tiles are skipped) never depends on the
 * ISA; BR is a multiple of every kernel's column block. */
#define ATTN_FLASH_BR 64
#define ATTN_FLASH_BC 64

/* Which exp2 a table's softmax entries compute, bit for bit: the bf16 tables' fused steps
 * (bf16_internal.h) may replace a flash table's softmax only where the two name the same one. */
typedef enum attn_softmax_tile { ATTN_SOFTMAX_TILE_OWN = 0, ATTN_SOFTMAX_TILE_AVX512 = 1 } attn_softmax_tile;

typedef struct attn_flash_kernels {
    const char *name;
    attn_softmax_tile softmax_tile;
    int register_rows; /* rows of the gemm's register tile where a choice was made (0: none) */
    /* C[m x n] = (accumulate ? f_i C : 0) + A B with A(i, p) = a[i * ars + p * acs] (any
     * strides: A is only broadcast), B(p, j) = b[p * ldb + j], C(i, j) = c[i * ldc + j], and
     * f_i = rowscale[i] (1 when rowscale is NULL): the online softmax's rescaling of the output
     * rides on the accumulator load. The sum over p runs in increasing p, one chain per element.
     * colmax (nullable) receives colmax[j] = max(colmax[j], max_i C(i, j)): the score tile's column
     * maxima come out of the registers instead of another pass over the tile. */
    void (*gemm)(int m, int n, int k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb, float *c,
                 int64_t ldc, int accumulate, const float *rowscale, float *colmax);
    /* Online softmax over the rows of an S^T tile [rows x cols] (cols <= ATTN_FLASH_BR), per
     * column c: mx = max(mrun[c], max_r s[r][c]); s[r][c] <- exp2(s[r][c] - mx);
     * alpha[c] = exp2(mrun[c] - mx); l[c] = l[c] * alpha[c] + sum_r s[r][c]; mrun[c] = mx.
     * A column that is still all -inf keeps mrun = -inf and gets s = 0, alpha = 1. tilemax
     * (nullable) holds max_r s[r][c] already (from the gemm's colmax). */
    void (*softmax_update)(int rows, int cols, float *s, int64_t lds, float *mrun, float *l, float *alpha,
                           const float *tilemax);
    /* Backward: s[r][c] <- exp2((s[r][c] - m[c]) - ll[c]) (0 where m[c] is -inf), then
     * ds[r][c] <- s[r][c] * (dp[r][c] - dsum[c]) * scale, and exactly 0 wherever s[r][c] is 0
     * (masked entries: dp there may be left over from another tile). m and ll split the row's
     * log2-unit lse into a part close to the logits and a small remainder, so s - m is exact. */
    void (*probs_and_ds)(int rows, int cols, float *s, const float *dp, float *ds, int64_t ld, const float *m,
                         const float *ll, const float *dsum, float scale);
    /* The bf16 path's softmax_update and probs_and_ds: the same contracts with P to about float's
     * rounding (relative error within 3e-7 of the exact exp2 of the float differences) rather
     * than to the fp32 path's 1.5e-7, which the bf16 rounding of P makes moot; alpha as accurate
     * as softmax_update's. The forward, its backward's recomputation of the statistics and the
     * backward's P all use these, so they agree with one another. */
    void (*softmax_update_bf16)(int rows, int cols, float *s, int64_t lds, float *mrun, float *l, float *alpha,
                                const float *tilemax);
    void (*probs_and_ds_bf16)(int rows, int cols, float *s, const float *dp, float *ds, int64_t ld, const float *m,
                              const float *ll, const float *dsum, float scale);
    /* dst[t * ldd + q] = f * src[q * rs + t] for q < rows, t < cols (src has unit column stride):
     * the transposed, scaled query block that S^T = K Q^T reads. f == 1 copies the 32-bit patterns
     * exactly (no multiply, which would quiet a signalling NaN), so the bf16 path transposes its
     * pair words with it. */
    void (*pack_transposed)(int rows, int cols, const float *src, int64_t rs, float f, float *dst, int64_t ldd);
    /* Dropout on a tile: s[r][c] *= keep(colbase[c] + r), keep(i) = 1 / (1 - p) when Philox
     * element i of stream (seed, offset) is >= p, else 0 (exactly attn_philox_uniform's stream).
     * NULL: the driver's scalar loop. */
    void (*dropout_tile)(int rows, int cols, float *s, int64_t ld, const uint64_t *colbase, uint64_t seed,
                         uint64_t offset, float p);
    /* dst[i * ldd + j] = src[i * lds + j] * (f ? f[i] : 1) for i < m, j < n (both unit stride). */
    void (*scale_copy_rows)(int m, int n, const float *src, int64_t lds, const float *f, float *dst, int64_t ldd);
} attn_flash_kernels;

/* The portable versions of the two data movers (the AVX2 table uses them too). */
void attn_flash_pack_transposed_ref(int rows, int cols, const float *src, int64_t rs, float f, float *dst, int64_t ldd);
void attn_flash_scale_copy_rows_ref(int m, int n, const float *src, int64_t lds, const float *f, float *dst,
                                    int64_t ldd);

const attn_flash_kernels *attn_flash_kernels_ref(void);
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
const attn_flash_kernels *attn_flash_kernels_avx2(void);
const attn_flash_kernels *attn_flash_kernels_avx512(void);
/* The AVX-512 table with register tiles of `rows` (4 or 6) x 64 columns; NULL for other sizes.
 * The two give bitwise the same results (tests compare them). */
const attn_flash_kernels *attn_flash_kernels_avx512_rows(int rows);
#endif
/* The rows chosen for this CPU (ATTN_FLASH_ROWS=4|6 overrides; else 6 on Intel, 4 elsewhere)
 * and why, for `attn info`. */
int attn_flash_avx512_rows(const char **why);

#endif
