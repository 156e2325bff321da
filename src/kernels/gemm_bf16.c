/* GEMM with bf16 inputs, float accumulation and output: C = (accumulate ? C : 0) + op(A) op(B).
 * Both operands are packed into pair words (bf16_internal.h): A row by row (or read in place when
 * its bf16 rows already are rows of pair words on whole cache lines), B in the VNNI layout
 * in panels of NP columns ([n / NP][k / 2][NP], so the kernel's walk down k stays within a few
 * pages: with full-width rows every step of k was a new page at n >= 1024, and the TLB misses cost
 * 15-25% of the rate), or of 16 columns where the table takes panels (AMX: each B tile 1 KB
 * contiguous, 1.0-1.4x the 64-column panels' strided tile rows); each task computes a block of C
 * over the whole of k, so every element is one chain in increasing k and results are bitwise
 * identical for any thread count. */
#include <string.h>

#include "attn/kernels.h"
#include "flash_kernels.h"
#include "bf16_internal.h"
#include "kernels/registry.h"
#include "core/internal.h"
#include "core/tuning.h"
#include "core/alloc.h"
#include "gemm_internal.h"

#define MB 64
#define NB 256
#define PB 16  /* rows of A, columns of a transposed B, pair words of a row-major B per packing task */
#define GW 256 /* columns per task of the row-major B's pack */
#define NP 64  /* columns per B panel: the kernels' register tile width */

static size_t round_up(size_t x) { return (x + 15) & ~(size_t)15; }

/* B's panel width for a table: NP columns for the register-tile kernels; 16 where the table takes
 * panels (AMX: a panel's 16 pair rows of 16 words are one B tile, 1 KB contiguous) */
static int panel_cols(const attn_bf16_kernels *kr) { return kr->gemm_panels ? 16 : NP; }

/* Pair words of B (n x k) in panels of npc columns, the last one padded: ceil(n / npc) npc
 * ceil(k / 2), or SIZE_MAX past size_t. */
static size_t panel_words(int64_t n, int64_t k, int npc) {
    size_t w;
    if (attn_mul_overflow(((size_t)n + (size_t)npc - 1) / (size_t)npc * (size_t)npc, ((size_t)k + 1) / 2, &w))
        return SIZE_MAX;
    return w;
}

/* On a little-endian CPU a pair word is its two bf16 as they lie in memory (the even one is the
 * low half), so packing copies words. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PAIRS_IN_MEMORY 1
#else
#define PAIRS_IN_MEMORY 0
#endif

/* The pair word of x[0] and x[1]. */
static inline uint32_t pair_word(const attn_bf16 *x) {
    uint32_t w;
    if (!PAIRS_IN_MEMORY) return attn_pair(x[0], x[1]);
    memcpy(&w, x, sizeof w);
    return w;
}

size_t attn_gemm_bf16_workspace_size(int64_t m, int64_t n, int64_t k) {
    if (m < 0 || n < 0 || k < 0) return 0;
    const size_t kp = (size_t)(k + 1) / 2;
    size_t a, b, t;
    if (attn_mul_overflow((size_t)m, kp, &a) || (b = panel_words(n, k, NP)) == SIZE_MAX ||
        attn_add_overflow(round_up(a), round_up(b), &t) || attn_mul_overflow(t, 4, &t) || attn_add_overflow(t, 64, &t))
        return SIZE_MAX;
    return t;
}

/* Float operands are rounded to bf16 (round_row, pair_rows_f32: the table's rounding, the one
 * attn_nn_round_bf16 uses) on their way into the packed words, so the result is bit for bit that
 * of attn_gemm_bf16 on copies rounded by the same table, without the copies. The transposing
 * cases round a block into a small buffer in the natural order and copy its words across. */
#define PC 64 /* pair words per chunk of the transposing float packs */
#define TI 64 /* columns and */
#define TP 16 /* pair words per block of the transposing A pack */

void attn_bf16_words_across(int rows, int cols, const uint32_t *src, int64_t lds, uint32_t *dst, int64_t ldd) {
    attn_kernel_ctx_active()->flash->pack_transposed(rows, cols, (const float *)(const void *)src, lds, 1.0f,
                                                     (float *)(void *)dst, ldd);
}

/* dst[p] = pair(bf16(src[2p]), bf16(src[2p + 1])), p < ceil(n / 2), the missing half of an odd n 0. */
static void round_pairs(const attn_bf16_kernels *kr, int n, const float *src, uint32_t *dst) {
    if (PAIRS_IN_MEMORY) {
        kr->round_row(n, src, NULL, (uint16_t *)(void *)dst);
        if (n & 1) ((uint16_t *)(void *)dst)[n] = 0;
        return;
    }
    for (int p = 0; 2 * p < n; p++)
        dst[p] = attn_pair(attn_bf16_rne_daz(src[2 * p]), 2 * p + 1 < n ? attn_bf16_rne_daz(src[2 * p + 1]) : 0);
}

/* Rows i0 .. i1 - 1 of the packed A: ap[i kp + p] = A(i, 2p) | A(i, 2p + 1) << 16. */
static void pack_a(const attn_bf16_kernels *kr, int ta, int64_t i0, int64_t i1, int64_t k, const attn_bf16 *ah,
                   const float *af, int64_t lda, uint32_t *ap) {
    const int64_t kp = (k + 1) / 2, kf = k / 2; /* full pairs; an odd k ends with (x, 0) */
    if (!ta) {
        for (int64_t i = i0; i < i1; i++) {
            if (af) {
                round_pairs(kr, (int)k, af + i * lda, ap + i * kp);
                continue;
            }
            const attn_bf16 *row = ah + i * lda;
            if (PAIRS_IN_MEMORY)
                memcpy(ap + i * kp, row, sizeof(uint32_t) * (size_t)kf);
            else
                for (int64_t p = 0; p < kf; p++) ap[i * kp + p] = pair_word(row + 2 * p);
            if (kf < kp) ap[i * kp + kf] = attn_pair(row[2 * kf], 0);
        }
        return;
    }
    /* A(i, p) = a[p lda + i]: pair rows 2p, 2p + 1 of a block of TP pair words by i1 - i0 <= TI
     * columns (each row's TI floats are whole cache lines, which the prefetcher streams; a block of
     * 16 columns read down all of k was 1.6x slower), then copy the words across */
    uint32_t t[TP * TI];
    const int w = (int)(i1 - i0);
    for (int64_t p0 = 0; p0 < kp; p0 += TP) {
        const int rows = (int)(k - 2 * p0 < 2 * TP ? k - 2 * p0 : 2 * TP), np = (rows + 1) / 2;
        if (af)
            kr->pair_rows_f32(rows, w, af + 2 * p0 * lda + i0, lda, t, TI);
        else
            kr->pair_rows_bf16(rows, w, ah + 2 * p0 * lda + i0, lda, t, TI);
        attn_bf16_words_across(np, w, t, TI, ap + i0 * kp + p0, kp);
    }
}

/* Columns j0 .. j1 - 1 (within one panel of NPC columns) of the packed B, tb: B(p, j) = b[j ldb + p]:
 * bp[(j / NPC) kp NPC + p NPC + j % NPC] = B(2p, j) | B(2p + 1, j) << 16. */
static void pack_bt(const attn_bf16_kernels *kr, int NPC, int64_t j0, int64_t j1, int64_t k, const attn_bf16 *bh,
                    const float *bf, int64_t ldb, uint32_t *bp) {
    const int64_t kp = (k + 1) / 2, kf = k / 2;
    uint32_t *panel = bp + j0 / NPC * NPC * kp + j0 % NPC;
    if (bf) { /* each row rounded into PC words, then the words across */
        uint32_t t[PB * PC];
        for (int64_t p0 = 0; p0 < kp; p0 += PC) {
            const int len = (int)(k - 2 * p0 < 2 * PC ? k - 2 * p0 : 2 * PC), np = (len + 1) / 2;
            for (int64_t j = j0; j < j1; j++) round_pairs(kr, len, bf + j * ldb + 2 * p0, t + (j - j0) * PC);
            attn_bf16_words_across((int)(j1 - j0), np, t, PC, panel + p0 * NPC, NPC);
        }
        return;
    }
    if (PAIRS_IN_MEMORY && ldb % 2 == 0 && (uintptr_t)bh % 4 == 0) /* the rows are rows of pair words */
        attn_bf16_words_across((int)(j1 - j0), (int)kf, (const uint32_t *)(const void *)(bh + j0 * ldb), ldb / 2, panel,
                               NPC);
    else
        for (int64_t p = 0; p < kf; p++)
            for (int64_t j = j0; j < j1; j++) panel[p * NPC + (j - j0)] = pair_word(bh + j * ldb + 2 * p);
    if (kf < kp)
        for (int64_t j = j0; j < j1; j++) panel[kf * NPC + (j - j0)] = attn_pair(bh[j * ldb + 2 * kf], 0);
}

/* B (k x n, op(B) given by tb, bf16 bh or float bf) into NPC-column panels at bp: pair word
 * B(2p, j) | B(2p + 1, j) << 16 at bp[(j / NPC) kp NPC + p NPC + j % NPC], in pack_b_tasks
 * independent tasks. Row-major B: one call per panel and PB pair words (one per pair of rows cost
 * more in calls than in work: pair_rows_f32 5.6% of a bf16 training step, 3.1% so); a task takes
 * the panels of GW columns side by side, so each row's GW values (whole cache lines) are read once
 * for all of them: a task per 16-column panel read every line again from the L3 or memory for each
 * panel (the pack was 30% of 1024 x 4096 x 4096, AMX). Transposed B: PB columns a task. */
static int64_t pack_b_tasks(int tb, int64_t n, int64_t k) {
    return tb ? (n + PB - 1) / PB : (n + GW - 1) / GW * (((k + 1) / 2 + PB - 1) / PB);
}

static void pack_b_task(const attn_bf16_kernels *kr, int NPC, int tb, int64_t n, int64_t k, const attn_bf16 *bh,
                        const float *bf, int64_t ldb, uint32_t *bp, int64_t t) {
    const int64_t kp = (k + 1) / 2;
    if (tb) {
        const int64_t j0 = t * PB;
        pack_bt(kr, NPC, j0, j0 + PB < n ? j0 + PB : n, k, bh, bf, ldb, bp);
        return;
    }
    const int64_t groups = (n + GW - 1) / GW;
    const int64_t p0 = t / groups * PB, g0 = t % groups * GW, g1 = g0 + GW < n ? g0 + GW : n;
    const int rows = (int)(k - 2 * p0 < 2 * PB ? k - 2 * p0 : 2 * PB);
    for (int64_t j0 = g0; j0 < g1; j0 += NPC) {
        const int w = (int)(n - j0 < NPC ? n - j0 : NPC);
        uint32_t *dst = bp + j0 * kp + p0 * NPC;
        if (bf)
            kr->pair_rows_f32(rows, w, bf + 2 * p0 * ldb + j0, ldb, dst, NPC);
        else
            kr->pair_rows_bf16(rows, w, bh + 2 * p0 * ldb + j0, ldb, dst, NPC);
    }
}

/* All of B's tasks in a worksharing loop: called inside a parallel region they split among its
 * threads, outside it one thread runs them all (the same words either way). */
static void pack_b(const attn_bf16_kernels *kr, int NPC, int tb, int64_t n, int64_t k, const attn_bf16 *bh,
                   const float *bf, int64_t ldb, uint32_t *bp) {
    const int64_t tasks = pack_b_tasks(tb, n, k);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; t++) pack_b_task(kr, NPC, tb, n, k, bh, bf, ldb, bp, t);
}

/* Task t of the product: a block of C of MB rows and nbt columns, the t-th in A-block order
 * (b_major 0: t / per = A block, t % per = B block) or in B-block order (b_major 1: the other way);
 * per is the count of the inner one. */
static void run_task(const attn_bf16_kernels *kr, int64_t t, int64_t per, int64_t m, int64_t n, int64_t kp, int b_major,
                     int nbt, const uint32_t *aw, int64_t ars, const uint32_t *bp, float *c, int64_t ldc,
                     int accumulate) {
    const int64_t i0 = (b_major ? t % per : t / per) * MB, j0 = (b_major ? t / per : t % per) * nbt;
    const int mb = (int)(m - i0 < MB ? m - i0 : MB), nb = (int)(n - j0 < nbt ? n - j0 : nbt);
    if (kr->gemm_panels) {
        kr->gemm_panels(mb, nb, (int)kp, aw + i0 * ars, ars, bp + j0 * kp, c + i0 * ldc + j0, ldc, accumulate);
        return;
    }
    for (int j = 0; j < nb; j += NP)
        kr->gemm_pairs(mb, nb - j < NP ? nb - j : NP, (int)kp, aw + i0 * ars, ars, 1, bp + (j0 + j) * kp, NP,
                       c + i0 * ldc + j0 + j, ldc, accumulate, NULL, 1.0f);
}

/* Part `part` of `parts` of the column split (AMX's 16-column panels): columns p0 .. p1 (multiples
 * of 32 but the last end) packed by the calling thread in blocks of at most wb columns, each into
 * the part's first words of bp (the lines the last block left in the L2, not new ones from the L3)
 * and met by every A block right after it is packed. */
static void run_split_part(const attn_bf16_kernels *kr, int part, int parts, int tb, int64_t m, int64_t n, int64_t k,
                           const attn_bf16 *bh, const float *bf, int64_t ldb, int64_t wb, const uint32_t *aw,
                           int64_t ars, uint32_t *bp, float *c, int64_t ldc, int accumulate) {
    const int64_t kp = (k + 1) / 2, c32 = (n + 31) / 32, tm = (m + MB - 1) / MB;
    const int64_t p0 = c32 * part / parts * 32, p1e = c32 * (part + 1) / parts * 32, p1 = p1e < n ? p1e : n;
    for (int64_t j0 = p0; j0 < p1; j0 += wb) {
        const int64_t j1 = j0 + wb < p1 ? j0 + wb : p1, off = tb ? j0 * ldb : j0, tasks = pack_b_tasks(tb, j1 - j0, k);
        for (int64_t t = 0; t < tasks; t++)
            pack_b_task(kr, 16, tb, j1 - j0, k, bh ? bh + off : NULL, bf ? bf + off : NULL, ldb, bp + p0 * kp, t);
        for (int64_t i = 0; i < tm; i++)
            run_task(kr, i, 1, m, j1 - j0, kp, 0, (int)(j1 - j0), aw, ars, bp + p0 * kp, c + j0, ldc, accumulate);
    }
}

static void gemm_body(const attn_bf16_kernels *kr, int ta, int tb, int64_t m, int64_t n, int64_t k, const attn_bf16 *ah,
                      const float *af, int64_t lda, const attn_bf16 *bh, const float *bf, int64_t ldb,
                      const attn_bf16_packed_b *pb, int accumulate, float *c, int64_t ldc, void *workspace);

/* One operand given as bf16 (h) or as float (f, rounded while packing): exactly one is set. B's
 * panels are taken from pb when it was packed for this shape at the active table's panel width. */
static attn_status gemm_run(const char *fn, attn_transpose transa, attn_transpose transb, int64_t m, int64_t n,
                            int64_t k, const attn_bf16 *ah, const float *af, int64_t lda, const attn_bf16 *bh,
                            const float *bf, int64_t ldb, const attn_bf16_packed_b *pb, int accumulate, float *c,
                            int64_t ldc, void *workspace, size_t workspace_bytes) {
    /* without B itself (the public packed product), B's checks stand on the packed words */
    const void *bcheck = bf ? (const void *)bf : bh ? (const void *)bh : pb ? (const void *)pb->words : NULL;
    attn_status st = attn_gemm_check_args(fn, transa, transb, m, n, k, af ? af : (const float *)(const void *)ah, lda,
                                          (const float *)bcheck, ldb, c, ldc);
    if (st) return st;
    if (m == 0 || n == 0) return ATTN_OK;
    if (k == 0) { /* an empty sum: C, or zeros (the blocking below divides by k) */
        if (!accumulate)
            for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)n);
        return ATTN_OK;
    }
    const size_t need = attn_gemm_bf16_workspace_size(m, n, k);
    if (need == SIZE_MAX) return attn_error(ATTN_ERR_OVERFLOW, "%s: workspace size overflows", fn);
    if (!workspace || workspace_bytes < need)
        return attn_error(ATTN_ERR_WORKSPACE,
                          "%s: workspace of %zu bytes at %p, need %zu (attn_gemm_bf16_workspace_size)", fn,
                          workspace_bytes, workspace, need);
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: sizes above 2^31 (m = %lld, n = %lld, k = %lld)", fn, (long long)m,
                          (long long)n, (long long)k);
    const attn_bf16_kernels *kr = attn_bf16_kernels_active();
    const int ta = transa == ATTN_TRANS, tb = transb == ATTN_TRANS;
    const int NPC = panel_cols(kr);
    const int pre = pb && pb->words && pb->npc == NPC && pb->n == n && pb->k == k;
    if (!pre && !bh && !bf) /* the packed B's width was checked, but the active table changed since */
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: the active bf16 kernels changed during the call", fn);
    /* On AMX's panels, k past 2048 with at most 512 rows goes in pieces of 1024, each a product of
     * its own that adds to C: each piece's B block (the columns of half the L2) is wider, so A is
     * read again fewer times, and a row block's piece of A (64 KiB) comes closer to the L1. The
     * partial sums go through C as floats and are loaded back exactly, and the pieces start at
     * multiples of 32, so each element is the same chain of tile products. 3 alternated rounds:
     * m 128-512, n 768-4096, k 3072-4096 1.05-1.23x on one thread, 1.21-1.42x on two; at m 1024
     * 0.98-1.04x, and at m 4096 (k 3072) 0.87-0.92x: C's extra passes cost more there. Not for a
     * B packed once (its panels hold all of k). */
    if (kr->gemm_panels && !pre && k > 2048 && m <= 512) {
        for (int64_t k0 = 0; k0 < k; k0 += 1024) {
            const int64_t kc = k - k0 < 1024 ? k - k0 : 1024, ao = ta ? k0 * lda : k0, bo = tb ? k0 : k0 * ldb;
            gemm_body(kr, ta, tb, m, n, kc, ah ? ah + ao : NULL, af ? af + ao : NULL, lda, bh ? bh + bo : NULL,
                      bf ? bf + bo : NULL, ldb, NULL, k0 ? 1 : accumulate, c, ldc, workspace);
        }
    } else {
        gemm_body(kr, ta, tb, m, n, k, ah, af, lda, bh, bf, ldb, pre ? pb : NULL, accumulate, c, ldc, workspace);
    }
    return ATTN_OK;
}

/* gemm_run's product once its arguments are checked (pb: a B packed for this table and shape, or
 * NULL). */
static void gemm_body(const attn_bf16_kernels *kr, int ta, int tb, int64_t m, int64_t n, int64_t k, const attn_bf16 *ah,
                      const float *af, int64_t lda, const attn_bf16 *bh, const float *bf, int64_t ldb,
                      const attn_bf16_packed_b *pb, int accumulate, float *c, int64_t ldc, void *workspace) {
    const int64_t kp = (k + 1) / 2;
    const int NPC = panel_cols(kr);
    uint32_t *ap = (uint32_t *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    const int pre = pb != NULL;
    uint32_t *bp = pre ? pb->words : ap + round_up((size_t)m * (size_t)kp);
    /* A given as bf16 rows of whole pairs, a multiple of 64 bytes apart, is already the packed
     * layout (a pair word is two bf16 as they lie in memory): the kernels read it in place, row
     * stride lda / 2 words, instead of copying it (the copy was 15-20% of 4096 x 384 x 384 on AMX).
     * On AMX a start off a cache line (a large malloc returns 16 bytes past one) puts every tile
     * row across two lines: that is cheaper than the copy only while a 32-row block of A stays in
     * the L1 (k <= 384: 4096 x 384 x 384 1.13x the copy); with longer rows it streams from the
     * L2 at twice the lines, and the copy measured 1.12-1.27x (k 768-4096, m 128-2048, one
     * thread). Other tables read A's rows in place wherever it starts. */
    const int a_lines = !kr->gemm_panels || (uintptr_t)ah % 64 == 0 || kp <= 192;
    const int a_in_place =
        PAIRS_IN_MEMORY && ah && !ta && k % 2 == 0 && lda % 32 == 0 && (uintptr_t)ah % 4 == 0 && a_lines;
    const uint32_t *aw = a_in_place ? (const uint32_t *)(const void *)ah : ap;
    const int64_t ars = a_in_place ? lda / 2 : kp;
    /* Consecutive tasks share a B block (nbt columns, all of k) while it fits in half the L2, so
     * that B stays there and the 4x smaller A blocks stream; else they share an A block. B
     * streamed from the L3 for every task held AMX to 0.82-0.91x (1024 x 3072 x 768 and 2048^3, one
     * and two threads, Sapphire Rapids); vdpbf16ps there 1.03-1.08x. With AMX's panels the block
     * narrows (by 32 columns, to 32) until it fits: at k = 3072 the 256-column block of 1.5 MiB
     * did not, so every task read B again from the L3 and memory (A-block order). Where B is
     * larger than the 5/8 of the L2 that a_runs (below) keeps whole, its blocks widen instead to
     * the most columns that fit half the L2, in equal blocks (multiples of 32 columns), so every
     * A block is read once per block from the L3: 256 columns at k = 384 and 768 (196 / 393 KiB)
     * read all of A 12-16 times for n = 3072 and 4096: 0.50-0.92x the widened blocks (4096 rows). */
    const size_t l2 = attn_cpu_caches()->l2;
    /* the most columns of B (multiples of 32) whose k fit half the L2 */
    const int64_t half_l2_cols = (int64_t)(l2 / 2 / ((size_t)kp * 4)) / 32 * 32;
    const int a_runs = kr->gemm_panels && (size_t)((n + 15) / 16 * 16) * (size_t)kp * 4 <= l2 / 8 * 5;
    int nbt = NB;
    if (kr->gemm_panels)
        while (nbt > 32 && (size_t)nbt * (size_t)kp * 4 > l2 / 2) nbt -= 32;
    if (kr->gemm_panels && !a_runs && half_l2_cols > nbt) {
        const int64_t blocks = (n + half_l2_cols - 1) / half_l2_cols;
        nbt = (int)(((n + blocks - 1) / blocks + 31) / 32 * 32);
    }
    /* a B that a_runs keeps whole in the L2 is one block where there are A blocks for every
     * thread: a task's kernel call then runs each 32-row block across all of B (panel_blocks'
     * stores overlap from one column block to the next) rather than stopping every 256 columns:
     * 4096 x 1536 x 384 1.11 / 1.06x (1 / 2 threads), n 384-768 1.01x */
    if (a_runs && (m + MB - 1) / MB >= attn_get_num_threads()) nbt = (int)n;
    const int64_t tm = (m + MB - 1) / MB, tn = (n + nbt - 1) / nbt, tasks = tm * tn;
    int b_major = (size_t)nbt * (size_t)kp * 4 <= l2 / 2;
    /* With B's 16-column panels (AMX), a B whole within 5/8 of the L2 stays there while each A
     * block (64 rows, in the L1) meets all of it: 1.05-1.10x over B blocks at 4096 x 384 x
     * 384-1536 and 4096 x 1536 x 384 on one thread; larger B (1536 x 768, 3072 x 384-1536) keep
     * the B blocks (A first measured 0.84-0.96x there). Several threads then take contiguous runs
     * of A blocks (a static schedule: each its own share of A's rows past the B in its own L2):
     * 1.01-1.35x the B blocks at 2 threads, where A first under the dynamic schedule, threads
     * taking turns at A blocks, measured 0.77-1.03x. Which thread computes a block moves no bit. */
    const int threads = attn_threads_for(tasks);
    (void)threads; /* read only by the OpenMP pragmas */
    /* Several threads, B packed by this call and wider than A is tall (n > m): each thread packs
     * its own share of B's columns and meets all of A with them (run_split_part), so none reads
     * B's words as another core wrote them (the lines move between the cores' caches) and none
     * waits at a barrier for the pack; a share past 5/8 of the L2 goes in blocks that fit half of
     * it, each packed just before its use, where A fits half the L2 (A is read once per block). 3
     * alternated rounds, 2 threads: NN m 64-1024, n 768-1536 > m, k 384-768 1.07-2.24x, and m
     * 64-512, n 3072-4096, k 768-1536 (blocks) 1.10-1.78x; the linear layers' product packing per
     * call (from_f32 NT, m 64-512, n 384-3072) 1.07-2.26x. Not for a B packed once (the layers'
     * frozen weights): with a float A packed by this call every thread then reads A's words as
     * the other wrote them, 0.75-0.99x at n < 8 m (320 x 384-1536 x 384-1536); at n >= 8 m it ran
     * 0.98-1.39x alone, but MiniLM's embeddings around it 0.92x (2 threads, 4 x 40 tokens): the
     * row-wise steps after a layer then read each row's two halves from two cores' caches. On one
     * thread, for at most 128 rows where B is past 5/8 of the L2, the same blocks: B's pack
     * otherwise wrote all of B out to the L3 and read it back (33% of 128 x 3072 x 768), where the
     * blocks, each packed into the same words, stay in the L2: 1.11-1.17x at m 128, n 2304-3072,
     * k 768 (NN and from_f32 NT), 0.94-1.09x at m 256-512, so not there. Which thread computes a
     * column moves no bit. */
    const int64_t share = ((n + 31) / 32 + threads - 1) / threads * 32; /* columns a thread takes at most */
    const int share_fits = (size_t)share * (size_t)kp * 4 <= l2 / 8 * 5;
    const int a_fits = (size_t)m * (size_t)kp * 4 <= l2 / 2;
    const int n_split = !pre && kr->gemm_panels && n > m && n >= 64 * (int64_t)threads &&
                        (threads > 1 ? share_fits || a_fits : !share_fits && a_fits && m <= 128);
    /* A(i, p) = a[i lda + p] (or a[p lda + i] transposed); B(p, j) likewise. Packing moves data
     * and rounds each element on its own, so how it walks never changes a bit; it walks in
     * blocks (PB rows, TI columns of a transposed A) so that the transposing cases read and
     * write whole cache lines. */
#pragma omp parallel num_threads(attn_threads_for((m + MB - 1) / MB)) if (!a_in_place || (!pre && !n_split))
    {
        const int64_t ib = ta ? TI : PB;
#pragma omp for schedule(static)
        for (int64_t i0 = 0; i0 < (a_in_place ? 0 : m); i0 += ib)
            pack_a(kr, ta, i0, i0 + ib < m ? i0 + ib : m, k, ah, af, lda, ap);
        if (!pre && !n_split) pack_b(kr, NPC, tb, n, k, bh, bf, ldb, bp);
    }
    if (n_split) {
        const int64_t wb = share_fits ? share : half_l2_cols > 32 ? half_l2_cols : 32;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int part = 0; part < threads; part++)
            run_split_part(kr, part, threads, tb, m, n, k, bh, bf, ldb, wb, aw, ars, bp, c, ldc, accumulate);
    } else if (a_runs) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t t = 0; t < tasks; t++) run_task(kr, t, tn, m, n, kp, 0, nbt, aw, ars, bp, c, ldc, accumulate);
    } else {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int64_t t = 0; t < tasks; t++)
            run_task(kr, t, b_major ? tm : tn, m, n, kp, b_major, nbt, aw, ars, bp, c, ldc, accumulate);
    }
}

attn_status attn_gemm_bf16(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n, int64_t k,
                           const attn_bf16 *a, int64_t lda, const attn_bf16 *b, int64_t ldb, int accumulate, float *c,
                           int64_t ldc, void *workspace, size_t workspace_bytes) {
    return gemm_run("attn_gemm_bf16", transa, transb, m, n, k, a, NULL, lda, b, NULL, ldb, NULL, accumulate, c, ldc,
                    workspace, workspace_bytes);
}

attn_status attn_gemm_bf16_from_f32(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n, int64_t k,
                                    const float *a, int64_t lda, const float *b, int64_t ldb, int accumulate, float *c,
                                    int64_t ldc, void *workspace, size_t workspace_bytes) {
    return gemm_run("attn_gemm_bf16_from_f32", transa, transb, m, n, k, NULL, a, lda, NULL, b, ldb, NULL, accumulate, c,
                    ldc, workspace, workspace_bytes);
}

attn_status attn_gemm_bf16_from_f32_packed(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n,
                                           int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                                           const attn_bf16_packed_b *pb, int accumulate, float *c, int64_t ldc,
                                           void *workspace, size_t workspace_bytes) {
    return gemm_run("attn_gemm_bf16_from_f32", transa, transb, m, n, k, NULL, a, lda, NULL, b, ldb, pb, accumulate, c,
                    ldc, workspace, workspace_bytes);
}

/* The argument checks of packing a B (bf16 or float: b is either) for products of n x k: those of
 * a 1 x n x k product with this B, and the kernels' int sizes. */
static attn_status pack_b_check(const char *fn, attn_transpose transb, int64_t n, int64_t k, const void *b,
                                int64_t ldb) {
    const float a1 = 0.0f;
    float c1 = 0.0f;
    attn_status st = attn_gemm_check_args(fn, ATTN_NO_TRANS, transb, n ? 1 : 0, n, k, &a1, k > 0 ? k : 1,
                                          (const float *)b, ldb, &c1, n > 0 ? n : 1);
    if (st) return st;
    if (n > INT32_MAX || k > INT32_MAX)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: sizes above 2^31 (n = %lld, k = %lld)", fn, (long long)n,
                          (long long)k);
    return ATTN_OK;
}

attn_status attn_bf16_pack_b(attn_transpose transb, int64_t n, int64_t k, const float *b, int64_t ldb,
                             attn_bf16_packed_b *out) {
    const char *fn = "attn_bf16_pack_b";
    if (!out) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    memset(out, 0, sizeof *out);
    attn_status st = pack_b_check(fn, transb, n, k, b, ldb);
    if (st) return st;
    const attn_bf16_kernels *kr = attn_bf16_kernels_active();
    const int NPC = panel_cols(kr);
    const size_t words = panel_words(n, k, NPC);
    if (words == SIZE_MAX || words > SIZE_MAX / 4 - 64)
        return attn_error(ATTN_ERR_OVERFLOW, "%s: n = %lld, k = %lld overflows", fn, (long long)n, (long long)k);
    uint32_t *w = attn__aligned_alloc(64, (words ? words : 1) * 4);
    if (!w) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: no memory for %zu bytes", fn, words * 4);
#pragma omp parallel num_threads(attn_threads_for((n + NPC - 1) / NPC))
    pack_b(kr, NPC, transb == ATTN_TRANS, n, k, NULL, b, ldb, w);
    out->n = n, out->k = k, out->npc = NPC, out->words = w;
    return ATTN_OK;
}

void attn_bf16_packed_b_free(attn_bf16_packed_b *p) {
    if (!p) return;
    attn__free(p->words);
    memset(p, 0, sizeof *p);
}

/* ---- the public B packed once (attn/kernels.h) -------------------------------------------------
 * The caller's buffer: a header (read and written with memcpy: the buffer may sit anywhere), then
 * the panels' words from `offset` bytes on, 64-byte aligned where packed. The header's own check
 * word refuses a buffer that was never packed, or was overwritten. */
#define PACKED_B_MAGIC "attnPKB1"
#define PACKED_B_HEADER 64

typedef struct packed_b_header {
    char magic[8];
    int64_t n, k;
    int32_t npc, pad;
    uint64_t offset, words, check;
} packed_b_header;

static uint64_t packed_b_check(const packed_b_header *h) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    const uint64_t f[5] = {(uint64_t)h->n, (uint64_t)h->k, (uint64_t)(uint32_t)h->npc, h->offset, h->words};
    for (int i = 0; i < 5; i++) x = (x ^ f[i]) * 0x100000001B3ull + (x >> 29);
    return x;
}

size_t attn_gemm_bf16_packed_b_size(int64_t n, int64_t k) {
    if (n < 0 || k < 0) return 0;
    /* the widest panels (64 columns; AMX's 16 divide them), so any table's fit */
    const size_t w = panel_words(n, k, NP);
    if (w == SIZE_MAX || w > (SIZE_MAX - PACKED_B_HEADER - 64) / 4) return SIZE_MAX;
    return PACKED_B_HEADER + 63 + w * 4;
}

static attn_status pack_b_public(const char *fn, attn_transpose transb, int64_t n, int64_t k, const attn_bf16 *bh,
                                 const float *bf, int64_t ldb, void *packed, size_t packed_bytes) {
    attn_status st = pack_b_check(fn, transb, n, k, bf ? (const void *)bf : (const void *)bh, ldb);
    if (st) return st;
    const size_t need = attn_gemm_bf16_packed_b_size(n, k);
    if (need == SIZE_MAX)
        return attn_error(ATTN_ERR_OVERFLOW, "%s: n = %lld, k = %lld overflows", fn, (long long)n, (long long)k);
    if (!packed || packed_bytes < need)
        return attn_error(ATTN_ERR_WORKSPACE,
                          "%s: packed buffer of %zu bytes at %p, need %zu for n = %lld, k = %lld "
                          "(attn_gemm_bf16_packed_b_size)",
                          fn, packed_bytes, packed, need, (long long)n, (long long)k);
    const attn_bf16_kernels *kr = attn_bf16_kernels_active();
    const int NPC = panel_cols(kr);
    const uintptr_t start = (uintptr_t)packed, words_at = (start + PACKED_B_HEADER + 63) & ~(uintptr_t)63;
    packed_b_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, PACKED_B_MAGIC, 8);
    h.n = n, h.k = k, h.npc = NPC;
    h.offset = (uint64_t)(words_at - start);
    h.words = (uint64_t)panel_words(n, k, NPC); /* within need: NPC divides NP */
    h.check = packed_b_check(&h);
    memcpy(packed, &h, sizeof h);
    uint32_t *w = (uint32_t *)(void *)((unsigned char *)packed + h.offset);
    /* the last panel's columns past n are zero, as attn_bf16_pack_b's are never read: defined bytes */
    memset(w, 0, (size_t)h.words * 4);
#pragma omp parallel num_threads(attn_threads_for((n + NPC - 1) / NPC))
    pack_b(kr, NPC, transb == ATTN_TRANS, n, k, bh, bf, ldb, w);
    return ATTN_OK;
}

attn_status attn_gemm_bf16_pack_b(attn_transpose transb, int64_t n, int64_t k, const attn_bf16 *b, int64_t ldb,
                                  void *packed, size_t packed_bytes) {
    return pack_b_public("attn_gemm_bf16_pack_b", transb, n, k, b, NULL, ldb, packed, packed_bytes);
}

attn_status attn_gemm_bf16_pack_b_from_f32(attn_transpose transb, int64_t n, int64_t k, const float *b, int64_t ldb,
                                           void *packed, size_t packed_bytes) {
    return pack_b_public("attn_gemm_bf16_pack_b_from_f32", transb, n, k, NULL, b, ldb, packed, packed_bytes);
}

/* The packed B of a call, checked against the product's n and k and the active table. */
static attn_status packed_b_open(const char *fn, int64_t n, int64_t k, const void *packed, attn_bf16_packed_b *out) {
    if (!packed) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: packed_b is NULL", fn);
    packed_b_header h;
    memcpy(&h, packed, sizeof h);
    if (memcmp(h.magic, PACKED_B_MAGIC, 8) != 0 || h.check != packed_b_check(&h) || h.n < 0 || h.k < 0 ||
        h.n > INT32_MAX || h.k > INT32_MAX || (h.npc != 16 && h.npc != NP) || h.offset < PACKED_B_HEADER ||
        h.offset >= PACKED_B_HEADER + 64)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: packed_b at %p does not hold a packed B (not written by attn_gemm_bf16_pack_b, or "
                          "overwritten since)",
                          fn, packed);
    if (h.n != n || h.k != k)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: packed_b holds a B of k x n = %lld x %lld, the product wants %lld x %lld", fn,
                          (long long)h.k, (long long)h.n, (long long)k, (long long)n);
    const attn_bf16_kernels *kr = attn_bf16_kernels_active();
    if (h.npc != panel_cols(kr))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: packed_b was packed in panels of %d columns, the active bf16 kernels (%s) take %d: "
                          "the active kernels changed since (attn_set_isa, ATTN_AMX); pack B again",
                          fn, (int)h.npc, kr->name, panel_cols(kr));
    const unsigned char *words = (const unsigned char *)packed + h.offset;
    if ((uintptr_t)words % 4 != 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: packed_b's words at %p are not 4-byte aligned (the buffer was moved to an address "
                          "off by %d bytes)",
                          fn, (const void *)words, (int)((uintptr_t)words % 4));
    out->n = n, out->k = k, out->npc = (int)h.npc;
    out->words = (uint32_t *)(uintptr_t)words; /* read only: the product never writes B's words */
    return ATTN_OK;
}

static attn_status gemm_packed(const char *fn, attn_transpose transa, int64_t m, int64_t n, int64_t k,
                               const attn_bf16 *ah, const float *af, int64_t lda, const void *packed_b, int accumulate,
                               float *c, int64_t ldc, void *workspace, size_t workspace_bytes) {
    attn_bf16_packed_b pb;
    attn_status st = packed_b_open(fn, n, k, packed_b, &pb);
    if (st) return st;
    /* B's argument checks stand on the words (k x n, row length n): the packing checked B itself */
    return gemm_run(fn, transa, ATTN_NO_TRANS, m, n, k, ah, af, lda, NULL, NULL, n > 0 ? n : 1, &pb, accumulate, c, ldc,
                    workspace, workspace_bytes);
}

attn_status attn_gemm_bf16_packed(attn_transpose transa, int64_t m, int64_t n, int64_t k, const attn_bf16 *a,
                                  int64_t lda, const void *packed_b, int accumulate, float *c, int64_t ldc,
                                  void *workspace, size_t workspace_bytes) {
    return gemm_packed("attn_gemm_bf16_packed", transa, m, n, k, a, NULL, lda, packed_b, accumulate, c, ldc, workspace,
                       workspace_bytes);
}

attn_status attn_gemm_bf16_packed_from_f32(attn_transpose transa, int64_t m, int64_t n, int64_t k, const float *a,
                                           int64_t lda, const void *packed_b, int accumulate, float *c, int64_t ldc,
                                           void *workspace, size_t workspace_bytes) {
    return gemm_packed("attn_gemm_bf16_packed_from_f32", transa, m, n, k, NULL, a, lda, packed_b, accumulate, c, ldc,
                       workspace, workspace_bytes);
}
