/* SGEMM driver: argument checks, workspace layout, cache blocking, packing, thread partition.
 *
 * Math. C = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k, op(B) is k x n.
 * With the k range cut into blocks K_0, K_1, ... of KC (the last one shorter), in increasing
 * order, every element is computed as
 *     acc_q     = sum_{p in K_q, increasing} op(A)(i, p) * op(B)(p, j)    (one FMA chain)
 *     C_0(i, j) = alpha * acc_0 + beta * C(i, j)       (alpha * acc_0 when beta == 0: C unread)
 *     C_q(i, j) = alpha * acc_q + C_{q-1}(i, j)        (q >= 1)
 * KC is a constant of the kernel in use and the CPU's caches (attn_gemm_arch_blocked; not of the
 * shape or the thread count) and each
 * element belongs to exactly one micro-kernel call per k block, which performs exactly these
 * operations for every element of its tile, full or partial (see gemm_internal.h). Threads
 * only split the m x n plane of C into disjoint rectangles (never k), so the result is bitwise
 * identical for any thread count. alpha == 0 or k == 0: C = beta * C (0 when beta == 0), A and B
 * are not read.
 *
 * Blocking (GotoBLAS / BLIS, here in the row-major "broadcast A, vector B" form). For each
 * thread's rectangle of C:
 *   for each k block (KC)                        C is updated once per k block, in order
 *     for each row block (MC rows of op(A))      pack op(A) into MR x KC micro-panels (A~)
 *       for each column block (NC of op(B))      pack op(B) into KC x NR micro-panels (B~, L2)
 *         for each A~ micro-panel (MR x KC)      stays in L1 across the next loop
 *           for each B~ micro-panel (KC x NR)    streamed from L2: micro-kernel, MR x NR of C
 * Packing makes every micro-kernel load contiguous and aligned and zero-pads the edges. Three
 * exceptions, all chosen from the shape alone:
 *  - m <= MR: B~ would serve one micro-kernel call per panel, so full panels are read in place
 *    (row stride ldb) and only a partial last panel is packed: B is read once instead of three
 *    times (read, write B~, read B~). With more rows a second pass over B in place would miss
 *    the caches (rows ldb apart map to few cache sets), so packing wins again.
 *  - m <= rows_max (4; GEMV-like decode shapes), op(B) = B: the few-row kernel keeps up to 4 rows
 *    x 96..256 columns of C in registers and streams B contiguously, row by row, once.
 *  - m <= rows_max, op(B) = B^T (linear layers with [out, in] weights at decode): the few-row
 *    kernel for B^T reads B's rows (contiguous along k) in place, once, and transposes blocks of
 *    them in registers; packing B~ (the whole weight matrix, every decode step) is skipped.
 * All perform exactly the per-element operations above; threads split n only (m <= MR).
 *
 * Workspace (attn_sgemm_workspace_size). Per thread, 64-byte aligned:
 *   A~: roundup(min(m, MC), MR) * min(k, KC) floats,   B~: min(k, KC) * roundup(min(n, NC), NR)
 * floats, plus 128 bytes of alignment slack; times the number of threads attn_sgemm would use
 * for this shape with attn_get_num_threads() at the time of the query; the maximum over the
 * kernels this CPU can run (tests switch kernels with attn_force_isa()). At call time attn_sgemm
 * uses at most as many threads as the workspace has room for, and needs room for at least one
 * (else ATTN_ERR_WORKSPACE); the thread count never changes the result. m, n or k == 0 needs no
 * workspace (size 0, NULL accepted). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/registry.h"
#include "gemm_internal.h"

#include "core/internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- dispatch ----------------------------------------------------------------------------- */

static int64_t floor_to(int64_t x, int64_t q, int64_t lo) {
    x = x / q * q;
    return x < lo ? lo : x;
}

attn_gemm_arch attn_gemm_arch_blocked(const attn_gemm_arch *base, const attn_cache_sizes *cs) {
    attn_gemm_arch a = *base;
    const int64_t kc_l1 = floor_to(cs->l1d * 2 / 3 / (4 * (int64_t)base->mr), 16, 16);
    a.kc = (int)(kc_l1 < base->kc ? kc_l1 : base->kc);
    int64_t nc = (int64_t)base->nc * base->kc * (cs->l2 / 1024) / (ATTN_GEMM_REF_L2 / 1024 * a.kc);
    nc = floor_to(nc, base->nr, base->nr);
    a.nc = (int)(nc > (1 << 20) ? 1 << 20 : nc);
    const int64_t l3 = cs->l3 < ATTN_GEMM_REF_L3 ? cs->l3 : ATTN_GEMM_REF_L3;
    int64_t mc = (int64_t)base->mc * base->kc * (l3 / 1024) / (ATTN_GEMM_REF_L3 / 1024 * a.kc);
    mc = floor_to(mc, base->mr, base->mr);
    a.mc = (int)(mc > (1 << 20) ? 1 << 20 : mc);
    return a;
}

const attn_gemm_arch *attn_gemm_arch_active(void) { return attn_kernel_ctx_active()->gemm; }

/* ---- argument checks ---------------------------------------------------------------------- */

static const char *tr_name(attn_transpose t) { return t == ATTN_TRANS ? "T" : "N"; }

/* One stored matrix of rows x cols (op() undone) with row stride ld; name is "A", "B" or "C",
 * opr x opc the shape of op(X) (for messages). */
static attn_status check_matrix(const char *fn, char name, const float *p, int64_t rows, int64_t cols, int64_t ld,
                                attn_transpose t, int64_t opr, int64_t opc) {
    static const char *const dims[3] = {"m x k", "k x n", "m x n"};
    const char *d = dims[name - 'A'];
    char tr = name == 'C' ? 'c' : (char)(name - 'A' + 'a');
    if (rows == 0 || cols == 0) return ATTN_OK;
    if (p == NULL)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %c is NULL but op(%c) is %lld x %lld (%s)", fn, name, name,
                          (long long)opr, (long long)opc, d);
    if (ld < cols && name == 'C')
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: ldc = %lld is smaller than n = %lld (C is m x n = %lld x %lld)", fn, (long long)ld,
                          (long long)cols, (long long)rows, (long long)cols);
    if (ld < cols)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: ld%c = %lld is smaller than the row length %lld of %c (stored "
                          "%lld x %lld, trans%c = %s, op(%c) %lld x %lld = %s)",
                          fn, tr, (long long)ld, (long long)cols, name, (long long)rows, (long long)cols, tr,
                          tr_name(t), name, (long long)opr, (long long)opc, d);
    /* the last element is at (rows - 1) * ld + cols - 1: keep its byte offset representable */
    size_t span, bytes;
    if (attn_mul_overflow((size_t)(rows - 1), (size_t)ld, &span) || attn_add_overflow(span, (size_t)cols, &span) ||
        attn_mul_overflow(span, sizeof(float), &bytes) || bytes > (size_t)INT64_MAX)
        return attn_error(ATTN_ERR_OVERFLOW, "%s: %c spans (%lld - 1) * ld%c %lld + %lld floats, which overflows", fn,
                          name, (long long)rows, tr, (long long)ld, (long long)cols);
    return ATTN_OK;
}

attn_status attn_gemm_check_args(const char *fn, attn_transpose transa, attn_transpose transb, int64_t m, int64_t n,
                                 int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb, const float *c,
                                 int64_t ldc) {
    if (transa != ATTN_NO_TRANS && transa != ATTN_TRANS)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: transa = %d is not a transpose", fn, (int)transa);
    if (transb != ATTN_NO_TRANS && transb != ATTN_TRANS)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: transb = %d is not a transpose", fn, (int)transb);
    if (m < 0 || n < 0 || k < 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: negative size (m = %lld, n = %lld, k = %lld)", fn,
                          (long long)m, (long long)n, (long long)k);
    attn_status st;
    int ta = transa == ATTN_TRANS, tb = transb == ATTN_TRANS;
    st = check_matrix(fn, 'A', a, ta ? k : m, ta ? m : k, lda, transa, m, k);
    if (st != ATTN_OK) return st;
    st = check_matrix(fn, 'B', b, tb ? n : k, tb ? k : n, ldb, transb, k, n);
    if (st != ATTN_OK) return st;
    return check_matrix(fn, 'C', c, m, n, ldc, ATTN_NO_TRANS, m, n);
}

/* ---- generic packing (kernels may bring faster ones) -------------------------------------- */

/* Both walk the source in its storage order (row by row), so reads are contiguous streams and
 * writes stay within the (cache-resident) packed block. */
static void pack_a_generic(int mr, int trans, const float *a, int64_t lda, int64_t rows, int64_t kc, float *dst) {
    for (int64_t i0 = 0; i0 < rows; i0 += mr) {
        int r = rows - i0 < mr ? (int)(rows - i0) : mr;
        for (int64_t p = 0; p < kc; p++) {
            float *d = dst + p * mr;
            if (trans) {
                const float *src = a + p * lda + i0;
                for (int i = 0; i < r; i++) d[i] = src[i];
            } else {
                const float *src = a + i0 * lda + p;
                for (int i = 0; i < r; i++) d[i] = src[i * lda];
            }
            for (int i = r; i < mr; i++) d[i] = 0.0f;
        }
        dst += (int64_t)mr * kc;
    }
}

static void pack_b_generic(int nr, int trans, const float *b, int64_t ldb, int64_t kc, int64_t cols, float *dst) {
    if (!trans) {
        for (int64_t p = 0; p < kc; p++) {
            const float *src = b + p * ldb;
            float *d = dst + p * nr;
            for (int64_t j0 = 0; j0 < cols; j0 += nr, d += (int64_t)nr * kc) {
                int w = cols - j0 < nr ? (int)(cols - j0) : nr;
                for (int j = 0; j < w; j++) d[j] = src[j0 + j];
                for (int j = w; j < nr; j++) d[j] = 0.0f;
            }
        }
        return;
    }
    for (int64_t j0 = 0; j0 < cols; j0 += nr, dst += (int64_t)nr * kc) {
        int w = cols - j0 < nr ? (int)(cols - j0) : nr;
        for (int64_t p = 0; p < kc; p++) {
            const float *src = b + j0 * ldb + p;
            float *d = dst + p * nr;
            for (int j = 0; j < w; j++) d[j] = src[j * ldb];
            for (int j = w; j < nr; j++) d[j] = 0.0f;
        }
    }
}

/* ---- blocking, workspace, thread partition ------------------------------------------------ */

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
static int64_t cdiv(int64_t x, int64_t y) { return (x + y - 1) / y; }
static int64_t roundup(int64_t x, int64_t y) { return cdiv(x, y) * y; }

/* Bytes of one thread's share of the workspace (A~ and B~, each 64-byte aligned). */
static size_t thread_bytes(const attn_gemm_arch *ar, int64_t m, int64_t n, int64_t k) {
    int64_t kc = min64(k, ar->kc);
    int64_t a_fl = roundup(min64(m, ar->mc), ar->mr) * kc;
    int64_t b_fl = kc * roundup(min64(n, ar->nc), ar->nr);
    return (size_t)(a_fl + b_fl) * sizeof(float) + 128;
}

/* Below about this much work per thread (flops, plus 32 per element of A and B read: the
 * skinny shapes are bound by reading B, not by FMAs), another thread costs more (OpenMP fork
 * and join, a few microseconds) than it saves. */
#define GEMM_WORK_PER_THREAD (1 << 23)

/* Threads worth using for this shape (before the workspace limit): never more than the tiles. */
static int threads_wanted(const attn_gemm_arch *ar, int64_t m, int64_t n, int64_t k) {
    int t = attn_get_num_threads();
    double work = 2.0 * (double)m * (double)n * (double)k + 32.0 * (double)k * (double)(m + n);
    double by_work = 1.0 + work / GEMM_WORK_PER_THREAD;
    if (by_work < t) t = (int)by_work;
    int64_t tiles = cdiv(m, ar->mr) * cdiv(n, ar->nr);
    if (tiles < t) t = (int)tiles;
    return t < 1 ? 1 : t;
}

size_t attn_sgemm_workspace_size(int64_t m, int64_t n, int64_t k) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    size_t best = 0;
    for (int isa = ATTN_ISA_REF; isa <= (int)attn_detected_isa(); isa++) {
        const attn_gemm_arch *ar = attn_kernel_ctx_for((attn_isa)isa)->gemm;
        size_t s = thread_bytes(ar, m, n, k) * (size_t)threads_wanted(ar, m, n, k);
        if (s > best) best = s;
    }
    return best;
}

/* Split the grid of mp x np micro-tiles into tm x tn rectangles (tm * tn <= threads) so that
 * the slowest thread's estimated time, compute plus packing, is smallest. */
static void choose_grid(int threads, int64_t mp, int64_t np, const attn_gemm_arch *ar, int *tm, int *tn) {
    double best = -1;
    *tm = *tn = 1;
    for (int a = 1; a <= threads; a++) {
        for (int bb = 1; a * bb <= threads; bb++) {
            if (a > mp || bb > np) continue;
            double rows = (double)cdiv(mp, a) * ar->mr, cols = (double)cdiv(np, bb) * ar->nr;
            /* per unit of k: rows * cols FMA lanes (~32 per cycle), packing the rows of A
             * (a transpose, ~1 cycle per element) and the columns of B once per row block (a
             * copy, ~0.5 cycle); measured: splitting rows wins over columns at equal compute */
            double cost = rows * cols / 32.0 + rows + 0.5 * cols * (double)cdiv((int64_t)rows, ar->mc);
            if (best < 0 || cost < best * 0.999) {
                best = cost;
                *tm = a;
                *tn = bb;
            }
        }
    }
}

typedef struct gemm_job {
    const attn_gemm_arch *ar;
    int transa, transb;
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    int64_t lda, ldb, ldc;
    float *c;
    int direct_b;  /* read full op(B) panels in place */
    int rows_path; /* a few-row kernel (m <= rows_max): ukr_rows (op(B) = B) or ukr_rows_t (B^T) */
} gemm_job;

static const float *op_a(const gemm_job *g, int64_t i, int64_t p) {
    return g->transa ? g->a + p * g->lda + i : g->a + i * g->lda + p;
}
static const float *op_b(const gemm_job *g, int64_t p, int64_t j) {
    return g->transb ? g->b + j * g->ldb + p : g->b + p * g->ldb + j;
}

static void pack_a(const gemm_job *g, int64_t i0, int64_t p0, int64_t rows, int64_t kc, float *dst) {
    const attn_gemm_arch *ar = g->ar;
    if (ar->pack_a)
        ar->pack_a(g->transa, op_a(g, i0, p0), g->lda, rows, kc, dst);
    else
        pack_a_generic(ar->mr, g->transa, op_a(g, i0, p0), g->lda, rows, kc, dst);
}
static void pack_b(const gemm_job *g, int64_t p0, int64_t j0, int64_t kc, int64_t cols, float *dst) {
    const attn_gemm_arch *ar = g->ar;
    if (ar->pack_b)
        ar->pack_b(g->transb, op_b(g, p0, j0), g->ldb, kc, cols, dst);
    else
        pack_b_generic(ar->nr, g->transb, op_b(g, p0, j0), g->ldb, kc, cols, dst);
}

/* Rows [r0, r1) x columns [c0, c1) of C, all of k; abuf / bbuf: this thread's A~ and B~. */
static void gemm_rect(const gemm_job *g, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float *abuf, float *bbuf) {
    const attn_gemm_arch *ar = g->ar;
    const int64_t MR = ar->mr, NR = ar->nr;
    /* even blocks, multiples of the register tile, no larger than MC / NC */
    int64_t mb = roundup(cdiv(r1 - r0, cdiv(r1 - r0, ar->mc)), MR);
    int64_t nb = roundup(cdiv(c1 - c0, cdiv(c1 - c0, ar->nc)), NR);
    /* The few-row kernels (m <= rows_max) read op(B) in place. On W^T (a decode step's linear
     * layers: W [n, k]) they take 256 of W's rows through all of k before the next 256, not all n
     * rows per k block: each row is then read front to back while the lines the prefetchers
     * fetched past a k block are still in the L2 (256 rows x a 1.5 KiB block). m = 1, k = 768, 1
     * thread: n 2304 1.17-1.29x, n 50257 (GPT-2's LM head) 1.27-1.35x; 1024 rows 1.04-1.08x. C goes
     * through memory between k blocks as before: the same chains, bitwise. */
    if (g->rows_path) {
        const int64_t cw = g->transb ? 256 : c1 - c0;
        for (int64_t j0 = c0; j0 < c1; j0 += cw) {
            const int64_t j1 = min64(j0 + cw, c1);
            for (int64_t p0 = 0; p0 < g->k; p0 += ar->kc) {
                int64_t kc = min64(ar->kc, g->k - p0);
                float beta = p0 == 0 ? g->beta : 1.0f;
                pack_a(g, r0, p0, r1 - r0, kc, abuf);
                (g->transb ? ar->ukr_rows_t : ar->ukr_rows)(kc, abuf, op_b(g, p0, j0), g->ldb, g->c + r0 * g->ldc + j0,
                                                            g->ldc, g->alpha, beta, (int)(r1 - r0), j1 - j0);
            }
        }
        return;
    }
    for (int64_t p0 = 0; p0 < g->k; p0 += ar->kc) {
        int64_t kc = min64(ar->kc, g->k - p0);
        float beta = p0 == 0 ? g->beta : 1.0f;
        for (int64_t i0 = r0; i0 < r1; i0 += mb) {
            int64_t rows = min64(mb, r1 - i0);
            pack_a(g, i0, p0, rows, kc, abuf);
            for (int64_t j0 = c0; j0 < c1; j0 += nb) {
                int64_t cols = min64(nb, c1 - j0);
                if (!g->direct_b) pack_b(g, p0, j0, kc, cols, bbuf);
                for (int64_t ir = 0; ir < rows; ir += MR) {
                    int mr = (int)min64(MR, rows - ir);
                    const float *ap = abuf + ir * kc;
                    float *cp = g->c + (i0 + ir) * g->ldc + j0;
                    for (int64_t jr = 0; jr < cols; jr += NR) {
                        int nr = (int)min64(NR, cols - jr);
                        const float *bp;
                        int64_t ldbp = NR;
                        if (!g->direct_b) {
                            bp = bbuf + jr * kc;
                        } else if (j0 + jr + NR <= g->n) {
                            bp = op_b(g, p0, j0 + jr);
                            ldbp = g->ldb;
                        } else {
                            /* the partial last panel: pack it (once per A~ block row) */
                            if (ir == 0) pack_b(g, p0, j0 + jr, kc, nr, bbuf);
                            bp = bbuf;
                        }
                        ar->ukr(kc, ap, bp, ldbp, cp + jr, g->ldc, g->alpha, beta, mr, nr);
                    }
                }
            }
        }
    }
}

/* The rectangle of C that part t of a tm x tn grid covers (edges on micro-tile boundaries). */
static void grid_rect(const gemm_job *g, int tm, int tn, int t, int64_t *r0, int64_t *r1, int64_t *c0, int64_t *c1) {
    const attn_gemm_arch *ar = g->ar;
    int64_t mp = cdiv(g->m, ar->mr), np = cdiv(g->n, ar->nr);
    int ti = t / tn, tj = t % tn;
    *r0 = min64(g->m, (mp * ti / tm) * ar->mr);
    *r1 = min64(g->m, (mp * (ti + 1) / tm) * ar->mr);
    *c0 = min64(g->n, (np * tj / tn) * ar->nr);
    *c1 = min64(g->n, (np * (tj + 1) / tn) * ar->nr);
}

static void *align64(void *p) {
    uintptr_t u = (uintptr_t)p;
    return (void *)((u + 63) & ~(uintptr_t)63);
}

static void run_part(const gemm_job *g, int tm, int tn, int t, unsigned char *ws, size_t per_thread) {
    int64_t r0, r1, c0, c1;
    grid_rect(g, tm, tn, t, &r0, &r1, &c0, &c1);
    if (r0 >= r1 || c0 >= c1) return;
    const attn_gemm_arch *ar = g->ar;
    int64_t kc = min64(g->k, ar->kc);
    float *abuf = align64(ws + (size_t)t * per_thread);
    float *bbuf = align64(abuf + roundup(min64(g->m, ar->mc), ar->mr) * kc);
    gemm_rect(g, r0, r1, c0, c1, abuf, bbuf);
}

/* C = beta * C (alpha == 0 or k == 0). */
static void scale_c(float *c, int64_t m, int64_t n, int64_t ldc, float beta) {
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        if (beta == 0.0f)
            memset(ci, 0, (size_t)n * sizeof(float));
        else if (beta != 1.0f)
            for (int64_t j = 0; j < n; j++) ci[j] *= beta;
    }
}

size_t attn_sgemm_workspace_size_1(int64_t m, int64_t n, int64_t k) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    size_t best = 0;
    for (int isa = ATTN_ISA_REF; isa <= (int)attn_detected_isa(); isa++) {
        const size_t s = thread_bytes(attn_kernel_ctx_for((attn_isa)isa)->gemm, m, n, k);
        if (s > best) best = s;
    }
    return best;
}

attn_status attn_sgemm(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                       void *workspace, size_t workspace_bytes) {
    attn_status st = attn_gemm_check_args("attn_sgemm", transa, transb, m, n, k, a, lda, b, ldb, c, ldc);
    if (st != ATTN_OK) return st;
    if (m == 0 || n == 0) return ATTN_OK;
    const attn_gemm_arch *ar = attn_gemm_arch_active();
    size_t per_thread = k > 0 ? thread_bytes(ar, m, n, k) : 0;
    if (k > 0 && (workspace == NULL || workspace_bytes < per_thread))
        return attn_error(ATTN_ERR_WORKSPACE,
                          "attn_sgemm: workspace %s%zu bytes; m = %lld, n = %lld, k = %lld needs "
                          "at least %zu (attn_sgemm_workspace_size() = %zu)",
                          workspace == NULL ? "is NULL, " : "has ", workspace_bytes, (long long)m, (long long)n,
                          (long long)k, per_thread, attn_sgemm_workspace_size(m, n, k));
    if (k == 0 || alpha == 0.0f) {
        scale_c(c, m, n, ldc, beta);
        return ATTN_OK;
    }
    gemm_job g = {ar, transa == ATTN_TRANS, transb == ATTN_TRANS, m, n, k, alpha, beta, a, b, lda, ldb, ldc, c, 0, 0};
    g.direct_b = !g.transb && m <= ar->mr;
    g.rows_path = (g.transb ? ar->ukr_rows_t != NULL : ar->ukr_rows != NULL) && m <= ar->rows_max;

    int threads = threads_wanted(ar, m, n, k);
    size_t fit = workspace_bytes / per_thread;
    if ((size_t)threads > fit) threads = (int)fit;
    int tm, tn;
    choose_grid(threads, cdiv(m, ar->mr), cdiv(n, ar->nr), ar, &tm, &tn);
    int parts = tm * tn;
    unsigned char *ws = workspace;
    if (parts == 1) {
        run_part(&g, 1, 1, 0, ws, per_thread);
        return ATTN_OK;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(parts)
    {
        /* the runtime may grant fewer threads than asked: each takes every nth part */
        int nt = omp_get_num_threads();
        for (int t = omp_get_thread_num(); t < parts; t += nt) run_part(&g, tm, tn, t, ws, per_thread);
    }
#else
    for (int t = 0; t < parts; t++) run_part(&g, tm, tn, t, ws, per_thread);
#endif
    return ATTN_OK;
}
