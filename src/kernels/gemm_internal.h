/* SGEMM internals shared by the driver (gemm.c) and the per-ISA micro-kernels
 * (gemm_ref.c, gemm_avx2.c, gemm_avx512.c), plus the FMA-peak loops the benchmarks use.
 *
 * Data layout the micro-kernels see (MR, NR: the kernel's register tile):
 *   packed A micro-panel: kc x MR floats, k-major: a[p * MR + i] = op(A)(row0 + i, k0 + p),
 *                         rows past the matrix edge are zero;
 *   B micro-panel:        kc rows of NR floats, row p at b + p * ldb (ldb = NR when packed,
 *                         the user's ldb when the kernel reads op(B) = B in place); all NR floats
 *                         of every row are readable (edge panels are always packed, zero padded);
 *   C tile:               mr x nr (mr <= MR, nr <= NR) at c with row stride ldc.
 * The kernel computes acc(i, j) = sum_p a(i, p) * b(p, j) as ONE chain of fused multiply-adds
 * in increasing p, then
 *   C(i, j) = alpha * acc(i, j) + beta * C(i, j)   (computed as fma(acc, alpha, beta * C)),
 *   C(i, j) = alpha * acc(i, j)                     when beta == 0 (C is not read).
 * (The portable kernel rounds the product and the sum separately, in the same order.)
 * Every element of a tile, full or partial, goes through exactly these operations, so which
 * tile (or thread) an element lands in never changes its value. */
#ifndef ATTN_GEMM_INTERNAL_H
#define ATTN_GEMM_INTERNAL_H

#include <stdint.h>

#include "attn/kernels.h"
#include "core/tuning.h"

typedef void (*attn_gemm_ukr_fn)(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc,
                                 float alpha, float beta, int mr, int nr);

/* Packs rows [0, rows) x k-range [0, kc) of op(A) (a points at op(A)(row0, k0)) into
 * ceil(rows / MR) micro-panels of kc x MR floats, zero padded. NULL: the driver's generic one. */
typedef void (*attn_gemm_pack_a_fn)(int trans, const float *a, int64_t lda, int64_t rows, int64_t kc, float *dst);
/* Packs k-range [0, kc) x columns [0, cols) of op(B) (b points at op(B)(k0, col0)) into
 * ceil(cols / NR) micro-panels of kc x NR floats, zero padded. NULL: the driver's generic one. */
typedef void (*attn_gemm_pack_b_fn)(int trans, const float *b, int64_t ldb, int64_t kc, int64_t cols, float *dst);

/* Few-row kernel: rows mr <= rows_max of C (columns [0, n)) from the packed A~ micro-panel a
 * (a[p * MR + i]) and op(B) = B read in place, row by row (b[p * ldb + j]); every element gets
 * the same FMA chain and the same alpha / beta step as in the micro-kernel above. Wide rows of
 * accumulators read B contiguously and exactly once: the GEMV-like shapes (m = 1..4). */
typedef void (*attn_gemm_rows_fn)(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc,
                                  float alpha, float beta, int mr, int64_t n);
/* ukr_rows_t, the same for op(B) = B^T: B stored n x k, read in place (b[j * ldb + p], rows
 * contiguous along k), never packed; the same per-element operations. Linear layers with
 * PyTorch's [out, in] weights at decode (m = 1..4) take it. */

/* One ISA's kernel and blocking. In the kernels' tables kc, mc and nc are the values tuned on
 * the reference caches (ATTN_GEMM_REF_L2, ATTN_GEMM_REF_L3, an L1d of at least 32 KiB); the
 * dispatch context holds them derived for this CPU's caches (attn_gemm_arch_blocked). */
typedef struct attn_gemm_arch {
    const char *name;
    int mr, nr; /* register tile */
    int kc;     /* k block: MR x KC A micro-panel stays in L1 across the B panels */
    int mc;     /* rows of op(A) packed per block (multiple of mr) */
    int nc;     /* columns of op(B) packed per block (multiple of nr), KC x NC lives in L2 */
    attn_gemm_ukr_fn ukr;
    attn_gemm_pack_a_fn pack_a;
    attn_gemm_pack_b_fn pack_b;
    attn_gemm_rows_fn ukr_rows; /* NULL: none */
    int rows_max;
    attn_gemm_rows_fn ukr_rows_t; /* op(B) = B^T, m <= rows_max; NULL: none */
} attn_gemm_arch;

const attn_gemm_arch *attn_gemm_arch_ref(void);

#define ATTN_GEMM_REF_L2 ((int64_t)1 << 20)
#define ATTN_GEMM_REF_L3 ((int64_t)32 << 20)
/* base (a kernel's table) with its blocking derived from the caches cs:
 *   KC = min(base KC, the largest multiple of 16 with MR x KC floats <= 2/3 of L1d): the A
 *        micro-panel stays in L1 next to the streamed B panel (the tuned KC is the cap: larger
 *        KC measured no faster);
 *   NC = B~ (KC x NC floats) the same fraction of L2 as the tuned block is of ATTN_GEMM_REF_L2,
 *        rounded down to a multiple of NR;
 *   MC = A~ (MC x KC floats) the same fraction of min(L3, ATTN_GEMM_REF_L3) as the tuned block
 *        is of ATTN_GEMM_REF_L3, rounded down to a multiple of MR (never grown: one A~ block
 *        already covers most m).
 * On the reference caches the tuned values come out unchanged. KC sets where the k sum is cut,
 * so results are bitwise reproducible for one machine (and thread count), not across caches. */
attn_gemm_arch attn_gemm_arch_blocked(const attn_gemm_arch *base, const attn_cache_sizes *cs);
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
const attn_gemm_arch *attn_gemm_arch_avx2(void);
const attn_gemm_arch *attn_gemm_arch_avx512(void);
#endif

/* Workspace bytes for ONE thread's share of attn_sgemm(m, n, k) (any kernel this CPU can run):
 * a workspace of this size makes attn_sgemm run single-threaded, e.g. one call per OpenMP thread
 * inside a parallel region. Nondecreasing in m, n and k, so the size for the largest shape serves
 * every smaller one. */
size_t attn_sgemm_workspace_size_1(int64_t m, int64_t n, int64_t k);

/* The arch attn_sgemm uses now (follows attn_active_isa()). */
const attn_gemm_arch *attn_gemm_arch_active(void);

/* Argument checks shared by attn_sgemm and attn_sgemm_ref (fn names the caller in messages):
 * negative sizes, unknown transposes, NULL matrices with nonzero sizes, leading dimensions
 * too small for the shapes, size arithmetic overflow. */
attn_status attn_gemm_check_args(const char *fn, attn_transpose transa, attn_transpose transb, int64_t m, int64_t n,
                                 int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb, const float *c,
                                 int64_t ldc);

/* FMA throughput loops for `attn bench peak`: `iters` iterations of `chains` independent
 * vector FMA chains; return a value derived from the accumulators (so nothing is optimised
 * away). flops per call = iters * chains * lanes * 2; *lanes receives the vector width. */
float attn_fma_loop_ref(int64_t iters, int *chains, int *lanes);
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
float attn_fma_loop_avx2(int64_t iters, int *chains, int *lanes);
float attn_fma_loop_avx512(int64_t iters, int *chains, int *lanes);
#endif

#endif
