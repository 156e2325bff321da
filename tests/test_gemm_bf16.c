/* attn_gemm_bf16: the fast kernels bit for bit against the portable emulation (and that against
 * the float64 product of the bf16-rounded inputs), transposes, odd k, accumulate, edges, bitwise
 * determinism across thread counts. The fast kernels: vdpbf16ps where the CPU has AVX512-BF16,
 * its FMA emulation on any AVX-512 CPU and on any AVX2 one (all where all run). Without AVX2 the
 * fast comparisons are skipped with a notice. */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include <float.h>
#include <string.h>

#include "kernels/registry.h"
#include "core/tuning.h"
#include "kernels/bf16_internal.h"
#include "test_util.h"

/* The fast bf16 kernel tables this CPU runs (vdpbf16ps, its AVX-512F and AVX2 emulations). */
static const attn_bf16_kernels *fast[4];
static int nfast;

/* Floats that bf16 cannot hold (with a few subnormals and exact ties), and their roundings as
 * every bf16 table rounds (to nearest even, subnormals to zero). */
static void fill_f32_bf16(test_rng *r, float *xf, attn_bf16 *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = (float)rng_normal(r);
        if (i % 97 == 5) v = (float)(rng_normal(r) * 1e-39); /* subnormal */
        if (i % 89 == 7) {                                   /* halfway between two bf16: the even one wins */
            uint32_t u;
            memcpy(&u, &v, 4);
            u = (u & 0xffff0000u) | 0x8000u;
            memcpy(&v, &u, 4);
        }
        xf[i] = v;
        x[i] = attn_bf16_rne_daz(v);
    }
}

static void run(attn_transpose ta, attn_transpose tb, int64_t m, int64_t n, int64_t k, int acc, const attn_bf16 *a,
                const attn_bf16 *b, const float *c0, float *c) {
    const int64_t lda = ta ? m + 1 : k + 3, ldb = tb ? k + 2 : n + 1, ldc = n + 5;
    (void)lda;
    (void)ldb;
    size_t wsb = attn_gemm_bf16_workspace_size(m, n, k);
    void *ws = xmalloc(wsb);
    memcpy(c, c0, sizeof(float) * (size_t)(m * ldc));
    CHECK_OK(attn_gemm_bf16(ta, tb, m, n, k, a, ta ? m + 1 : k + 3, b, tb ? k + 2 : n + 1, acc, c, ldc, ws, wsb));
    free(ws);
}

/* The same from the float operands (attn_gemm_bf16_from_f32): must equal run() on their roundings. */
static void run_f32(attn_transpose ta, attn_transpose tb, int64_t m, int64_t n, int64_t k, int acc, const float *a,
                    const float *b, const float *c0, float *c) {
    const int64_t ldc = n + 5;
    size_t wsb = attn_gemm_bf16_workspace_size(m, n, k);
    void *ws = xmalloc(wsb);
    memcpy(c, c0, sizeof(float) * (size_t)(m * ldc));
    CHECK_OK(
        attn_gemm_bf16_from_f32(ta, tb, m, n, k, a, ta ? m + 1 : k + 3, b, tb ? k + 2 : n + 1, acc, c, ldc, ws, wsb));
    free(ws);
}

static void check_case(test_rng *r, attn_transpose ta, attn_transpose tb, int64_t m, int64_t n, int64_t k, int acc) {
    const int64_t lda = ta ? m + 1 : k + 3, ldb = tb ? k + 2 : n + 1, ldc = n + 5;
    const size_t na = (size_t)((ta ? k : m) * lda), nb = (size_t)((tb ? n : k) * ldb), nc = (size_t)(m * ldc);
    attn_bf16 *a = xmalloc(2 * na + 2), *b = xmalloc(2 * nb + 2);
    float *af = xmalloc(4 * na + 4), *bf = xmalloc(4 * nb + 4);
    float *c0 = xmalloc(4 * nc + 4), *cr = xmalloc(4 * nc + 4), *cf = xmalloc(4 * nc + 4);
    fill_f32_bf16(r, af, a, na);
    fill_f32_bf16(r, bf, b, nb);
    fill_normal(r, c0, nc, 1);
    attn_force_isa(ATTN_ISA_REF);
    run(ta, tb, m, n, k, acc, a, b, c0, cr);
    run_f32(ta, tb, m, n, k, acc, af, bf, c0, cf);
    CHECK(!memcmp(cf, cr, sizeof(float) * nc),
          "bf16 gemm from f32, ref, %lldx%lldx%lld ta%d tb%d acc%d differs from "
          "the product of the rounded copies",
          (long long)m, (long long)n, (long long)k, (int)ta, (int)tb, acc);
    attn_force_isa(attn_detected_isa());
    /* the emulation against float64 */
    double num = 0, den = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = acc ? c0[i * ldc + j] : 0, mag = fabs(s);
            for (int64_t p = 0; p < k; p++) {
                const double x = attn_bf16_to_f32(ta ? a[p * lda + i] : a[i * lda + p]);
                const double y = attn_bf16_to_f32(tb ? b[j * ldb + p] : b[p * ldb + j]);
                s += x * y;
                mag += fabs(x * y);
            }
            const double e = fabs(cr[i * ldc + j] - s);
            num = e / (mag + 1e-30) > num ? e / (mag + 1e-30) : num;
            den += 0;
        }
    CHECK(num < 1e-6 * (double)(k + 2), "bf16 gemm ref %lldx%lldx%lld: error %.3g of the magnitude", (long long)m,
          (long long)n, (long long)k, num);
    for (int f = 0; f < nfast; f++) {
        attn__bf16_force(fast[f]);
        run(ta, tb, m, n, k, acc, a, b, c0, cf);
        CHECK(!memcmp(cf, cr, sizeof(float) * nc), "bf16 gemm %s %lldx%lldx%lld ta%d tb%d acc%d differs from ref",
              fast[f]->name, (long long)m, (long long)n, (long long)k, (int)ta, (int)tb, acc);
        run_f32(ta, tb, m, n, k, acc, af, bf, c0, cf);
        CHECK(!memcmp(cf, cr, sizeof(float) * nc),
              "bf16 gemm from f32 %s %lldx%lldx%lld ta%d tb%d acc%d differs from ref", fast[f]->name, (long long)m,
              (long long)n, (long long)k, (int)ta, (int)tb, acc);
        for (int t = 1; t <= 3; t++) { /* any thread count: bit for bit */
            attn_set_num_threads(t);
            float *ct = xmalloc(4 * nc + 4);
            run(ta, tb, m, n, k, acc, a, b, c0, ct);
            CHECK(!memcmp(ct, cr, sizeof(float) * nc), "bf16 gemm %s differs with %d threads", fast[f]->name, t);
            run_f32(ta, tb, m, n, k, acc, af, bf, c0, ct);
            CHECK(!memcmp(ct, cr, sizeof(float) * nc), "bf16 gemm from f32 %s differs with %d threads", fast[f]->name,
                  t);
            free(ct);
        }
        attn_set_num_threads(0);
        attn__bf16_force(NULL);
    }
    free(a);
    free(b);
    free(af);
    free(bf);
    free(c0);
    free(cr);
    free(cf);
}

/* gemm_panels (B in 16-column panels, the packing attn_gemm_bf16 does for a table that has it:
 * AMX's) stood in for by a table's own gemm_pairs, 16 columns at a time: each element the same
 * chain, so a table with it must give the bits of the table without (checked against ref in
 * check_case on every CPU, the panel packing of every operand layout included). */
static const attn_bf16_kernels *panels_base;
static attn_bf16_kernels panels_table;
static void panels_by_pairs(int m, int n, int kp, const uint32_t *a, int64_t ars, const uint32_t *b, float *c,
                            int64_t ldc, int accumulate) {
    for (int j0 = 0; j0 < n; j0 += 16)
        panels_base->gemm_pairs(m, n - j0 < 16 ? n - j0 : 16, kp, a, ars, 1, b + (int64_t)j0 * kp, 16, c + j0, ldc,
                                accumulate, NULL, 1.0f);
}

/* On AMX hardware: attn_gemm_bf16 through AMX's gemm_panels against AMX without it (64-column
 * panels and gemm_pairs), bit for bit. */
static void check_amx_panels(test_rng *r) {
    const attn_bf16_kernels *amx = attn_bf16_kernels_try_amx();
    if (!amx) return;
    attn_bf16_kernels rows = *amx;
    rows.gemm_panels = NULL;
    /* k 2500: B blocks narrower than 256 columns; 700 x 1000: wider ones on one thread, the column
     * split on several; k 2080 (1040 pair words, a multiple of 16 past 1024): panel_blocks' plain
     * B loads, the shorter multiples of 16 its hinted ones; 57 and 1 rows: edge_rows with two row
     * tiles and with one, over several slabs of k ending in a partial chunk */
    static const int64_t sz[][3] = {{1, 1, 1},       {32, 32, 32},    {67, 130, 31},   {130, 300, 128}, {64, 1536, 384},
                                    {3, 513, 77},    {200, 70, 260},  {96, 48, 1000},  {70, 100, 500},  {64, 96, 768},
                                    {40, 300, 2500}, {40, 700, 1000}, {48, 100, 2080}, {57, 100, 700},  {1, 200, 1100}};
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
        for (int t = 0; t < 4; t++) {
            const attn_transpose ta = (attn_transpose)(t & 1), tb = (attn_transpose)(t >> 1);
            const int64_t m = sz[i][0], n = sz[i][1], k = sz[i][2], ldc = n + 5;
            const int64_t lda = ta ? m + 1 : k + 3, ldb = tb ? k + 2 : n + 1;
            const size_t na = (size_t)((ta ? k : m) * lda), nb = (size_t)((tb ? n : k) * ldb), nc = (size_t)(m * ldc);
            attn_bf16 *a = xmalloc(2 * na + 2), *b = xmalloc(2 * nb + 2);
            float *af = xmalloc(4 * na + 4), *bf = xmalloc(4 * nb + 4), *c0 = xmalloc(4 * nc + 4),
                  *c1 = xmalloc(4 * nc + 4), *c2 = xmalloc(4 * nc + 4);
            fill_f32_bf16(r, af, a, na);
            fill_f32_bf16(r, bf, b, nb);
            fill_normal(r, c0, nc, 1);
            const int acc = (int)(i + (size_t)t) % 2;
            attn__bf16_force(amx);
            run(ta, tb, m, n, k, acc, a, b, c0, c1);
            attn__bf16_force(&rows);
            run(ta, tb, m, n, k, acc, a, b, c0, c2);
            attn__bf16_force(NULL);
            CHECK(!memcmp(c1, c2, sizeof(float) * nc),
                  "bf16 gemm on AMX %lldx%lldx%lld ta%d tb%d: 16-column panels differ from 64-column ones",
                  (long long)m, (long long)n, (long long)k, (int)ta, (int)tb);
            free(a);
            free(b);
            free(af);
            free(bf);
            free(c0);
            free(c1);
            free(c2);
        }
    printf("  AMX gemm_panels: bitwise the 64-column panels' products\n");
}

/* On AMX hardware: another library in the process (oneDNN inside PyTorch) releasing the thread's
 * tiles (TILERELEASE) or configuring other shapes between two products; the next product
 * reconfigures them (a thread-local "configured once" flag ran the tile instructions unconfigured:
 * SIGILL) and equals the first, bit for bit. One thread, so that the products run on the thread
 * whose tiles were changed. */
static void check_foreign_tiles(test_rng *r) {
#if defined(__x86_64__)
    const attn_bf16_kernels *amx = attn_bf16_kernels_try_amx();
    if (!amx) return;
    typedef struct {
        uint8_t palette_id, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } tile_config;
    static const tile_config other = {.palette_id = 1, .colsb = {32, 32, 32, 32}, .rows = {8, 8, 8, 8}};
    const int64_t m = 70, n = 100, k = 96, ldc = n + 5;
    const size_t na = (size_t)(m * (k + 3)), nb = (size_t)(k * (n + 1)), nc = (size_t)(m * ldc);
    attn_bf16 *a = xmalloc(2 * na), *b = xmalloc(2 * nb);
    float *af = xmalloc(4 * na), *bf = xmalloc(4 * nb), *c0 = xmalloc(4 * nc), *c[3];
    fill_f32_bf16(r, af, a, na);
    fill_f32_bf16(r, bf, b, nb);
    fill_normal(r, c0, nc, 1);
    const int prev = attn_get_num_threads();
    attn_set_num_threads(1);
    attn__bf16_force(amx);
    for (int i = 0; i < 3; i++) {
        c[i] = xmalloc(4 * nc);
        if (i == 1) __asm__ volatile("tilerelease");
        if (i == 2) __asm__ volatile("ldtilecfg %0" ::"m"(other));
        run(ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, k, 0, a, b, c0, c[i]);
    }
    attn__bf16_force(NULL);
    attn_set_num_threads(prev);
    CHECK(!memcmp(c[0], c[1], 4 * nc), "bf16 gemm on AMX after another library's TILERELEASE differs");
    CHECK(!memcmp(c[0], c[2], 4 * nc), "bf16 gemm on AMX after another library's tile configuration differs");
    printf("  AMX tiles released or configured by another library between products: reconfigured, bitwise\n");
    free(a);
    free(b);
    free(af);
    free(bf);
    free(c0);
    for (int i = 0; i < 3; i++) free(c[i]);
#else
    (void)r;
#endif
}

/* Every table this CPU runs: the portable one, the fast ones, AMX where granted. */
static int all_tables(const attn_bf16_kernels *tables[8]) {
    int nt = 0;
    tables[nt++] = attn_bf16_kernels_ref();
    for (int f = 0; f < nfast; f++) tables[nt++] = fast[f];
    if (attn_bf16_kernels_try_amx()) tables[nt++] = attn_bf16_kernels_try_amx();
    return nt;
}

/* A given as bf16 rows of whole pairs on 64-byte lines (lda a multiple of 32, k even) is read in
 * place instead of packed: against the same A at a stride that packs it, bit for bit, on every
 * table (the portable one, the fast ones, AMX where granted), one and two threads. */
static void check_a_in_place(test_rng *r) {
    static const int64_t sz[][3] = {{5, 17, 32}, {33, 90, 64}, {64, 96, 768}, {70, 100, 500}, {96, 130, 384}};
    const attn_bf16_kernels *tables[8];
    const int nt = all_tables(tables);
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
        for (int w = 0; w < 3; w++) {
            const int64_t m = sz[i][0], n = sz[i][1], k = sz[i][2], ldc = n + 3, ldb = n + 1;
            const int64_t lda = (k + 31) / 32 * 32 + 32 * (w == 1), ldp = k + 3; /* in place; packed */
            /* w 2: A 16 bytes past a cache line, as a large malloc returns it (read in place, or on AMX
             * copied past k = 384: the same bits either way) */
            attn_bf16 *abuf = aligned_alloc(64, (2 * (size_t)(m * lda) + 127) / 64 * 64), *a = abuf + (w == 2 ? 8 : 0),
                      *ap = xmalloc(2 * (size_t)(m * ldp));
            attn_bf16 *b = xmalloc(2 * (size_t)(k * ldb));
            float *af = xmalloc(4 * (size_t)(m * lda)), *bf = xmalloc(4 * (size_t)(k * ldb));
            float *c0 = xmalloc(4 * (size_t)(m * ldc)), *c1 = xmalloc(4 * (size_t)(m * ldc)),
                  *c2 = xmalloc(4 * (size_t)(m * ldc));
            fill_f32_bf16(r, af, a, (size_t)(m * lda));
            fill_f32_bf16(r, bf, b, (size_t)(k * ldb));
            fill_normal(r, c0, (size_t)(m * ldc), 1);
            for (int64_t x = 0; x < m; x++) memcpy(ap + x * ldp, a + x * lda, 2 * (size_t)k);
            const size_t wsb = attn_gemm_bf16_workspace_size(m, n, k);
            void *ws = xmalloc(wsb);
            for (int t = 0; t < nt; t++)
                for (int th = 1; th <= 2; th++) {
                    const int acc = (int)(i + (size_t)w + (size_t)th) % 2;
                    attn__bf16_force(tables[t]);
                    attn_set_num_threads(th);
                    memcpy(c1, c0, 4 * (size_t)(m * ldc));
                    memcpy(c2, c0, 4 * (size_t)(m * ldc));
                    CHECK_OK(
                        attn_gemm_bf16(ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, k, a, lda, b, ldb, acc, c1, ldc, ws, wsb));
                    CHECK_OK(
                        attn_gemm_bf16(ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, k, ap, ldp, b, ldb, acc, c2, ldc, ws, wsb));
                    CHECK(!memcmp(c1, c2, 4 * (size_t)(m * ldc)),
                          "bf16 gemm %s %lldx%lldx%lld, A in place (lda %lld) differs from A packed (lda %lld), "
                          "%d threads",
                          tables[t]->name, (long long)m, (long long)n, (long long)k, (long long)lda, (long long)ldp,
                          th);
                }
            attn__bf16_force(NULL);
            attn_set_num_threads(0);
            free(ws);
            free(abuf);
            free(ap);
            free(b);
            free(af);
            free(bf);
            free(c0);
            free(c1);
            free(c2);
        }
    printf("  A read in place: bitwise A packed, %d tables\n", nt);
}

/* B rounded and packed once (attn_bf16_pack_b) and reused: bit for bit attn_gemm_bf16_from_f32,
 * on every table, NN and NT, 1-2 threads; packed under one table and used under another of a
 * different panel width, or for another shape, it is not used (b is packed again): the same bits. */
static void check_packed_b(test_rng *r) {
    static const int64_t sz[][3] = {{1, 1, 1}, {5, 17, 3}, {67, 130, 31}, {130, 300, 128}, {64, 96, 768}};
    const attn_bf16_kernels *tables[8];
    const int nt = all_tables(tables);
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
        for (int tb = 0; tb < 2; tb++) {
            const int64_t m = sz[i][0], n = sz[i][1], k = sz[i][2], lda = k + 1, ldb = tb ? k + 2 : n + 3, ldc = n + 1;
            const size_t na = (size_t)(m * lda), nb = (size_t)((tb ? n : k) * ldb), nc = (size_t)(m * ldc);
            float *a = xmalloc(4 * na), *b = xmalloc(4 * nb), *c0 = xmalloc(4 * nc), *c1 = xmalloc(4 * nc),
                  *c2 = xmalloc(4 * nc);
            attn_bf16 *scratch = xmalloc(2 * (na > nb ? na : nb));
            fill_f32_bf16(r, a, scratch, na);
            fill_f32_bf16(r, b, scratch, nb);
            fill_normal(r, c0, nc, 1);
            const size_t wsb = attn_gemm_bf16_workspace_size(m, n, k);
            void *ws = xmalloc(wsb);
            for (int pk = 0; pk < nt; pk++) {
                attn__bf16_force(tables[pk]);
                attn_bf16_packed_b pb;
                CHECK_OK(attn_bf16_pack_b((attn_transpose)tb, n, k, b, ldb, &pb));
                for (int run = 0; run < nt; run++)
                    for (int th = 1; th <= 2; th++) {
                        const int acc = (int)(i + (size_t)run + (size_t)th) % 2;
                        attn__bf16_force(tables[run]);
                        attn_set_num_threads(th);
                        memcpy(c1, c0, 4 * nc);
                        memcpy(c2, c0, 4 * nc);
                        CHECK_OK(attn_gemm_bf16_from_f32(ATTN_NO_TRANS, (attn_transpose)tb, m, n, k, a, lda, b, ldb,
                                                         acc, c1, ldc, ws, wsb));
                        CHECK_OK(attn_gemm_bf16_from_f32_packed(ATTN_NO_TRANS, (attn_transpose)tb, m, n, k, a, lda, b,
                                                                ldb, &pb, acc, c2, ldc, ws, wsb));
                        CHECK(!memcmp(c1, c2, 4 * nc),
                              "bf16 gemm %lldx%lldx%lld tb%d, B packed under %s, run under %s, %d threads: differs "
                              "from B packed per call",
                              (long long)m, (long long)n, (long long)k, tb, tables[pk]->name, tables[run]->name, th);
                    }
                /* another shape's panels are not taken: a product of n - 1 columns */
                if (n > 1) {
                    attn__bf16_force(tables[pk]);
                    memcpy(c1, c0, 4 * nc);
                    memcpy(c2, c0, 4 * nc);
                    CHECK_OK(attn_gemm_bf16_from_f32(ATTN_NO_TRANS, (attn_transpose)tb, m, n - 1, k, a, lda, b, ldb, 0,
                                                     c1, ldc, ws, wsb));
                    CHECK_OK(attn_gemm_bf16_from_f32_packed(ATTN_NO_TRANS, (attn_transpose)tb, m, n - 1, k, a, lda, b,
                                                            ldb, &pb, 0, c2, ldc, ws, wsb));
                    CHECK(!memcmp(c1, c2, 4 * nc), "bf16 gemm with the panels of another shape differs");
                }
                attn_bf16_packed_b_free(&pb);
                CHECK(pb.words == NULL, "attn_bf16_packed_b_free left its words");
            }
            attn__bf16_force(NULL);
            attn_set_num_threads(0);
            free(ws);
            free(a);
            free(b);
            free(c0);
            free(c1);
            free(c2);
            free(scratch);
        }
    attn_bf16_packed_b pb;
    float w[6] = {0};
    CHECK_STATUS(attn_bf16_pack_b(ATTN_NO_TRANS, 3, 2, w, 2, &pb), ATTN_ERR_INVALID_ARGUMENT); /* ldb 2 < n 3 */
    CHECK_STATUS(attn_bf16_pack_b(ATTN_TRANS, 3, 2, NULL, 2, &pb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_bf16_pack_b(ATTN_TRANS, 3, 2, w, 2, NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_bf16_packed_b_free(NULL);
    printf("  B packed once: bitwise B packed per call, %d tables\n", nt);
}

/* The public B packed once (attn_gemm_bf16_pack_b, _from_f32) into a caller's buffer: its
 * products bit for bit attn_gemm_bf16 / _from_f32 with B itself, on every table, every transpose
 * of A and B, 1-2 threads, the buffer at an offset off a cache line and after being copied to
 * another address; packed under a table of another panel width, for another shape, or a buffer
 * never packed or overwritten: refused, C untouched. */
static void check_public_packed_b(test_rng *r) {
    static const int64_t sz[][3] = {{1, 1, 1}, {5, 17, 3}, {67, 130, 31}, {33, 64, 0}, {130, 300, 128}, {40, 96, 768}};
    const attn_bf16_kernels *tables[8];
    const int nt = all_tables(tables);
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
        for (int tab = 0; tab < 4; tab++) {
            const int ta = tab >> 1, tb = tab & 1;
            const int64_t m = sz[i][0], n = sz[i][1], k = sz[i][2];
            const int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 1;
            const size_t na = (size_t)((ta ? k : m) * lda) + 1, nb = (size_t)((tb ? n : k) * ldb) + 1,
                         nc = (size_t)(m * ldc);
            float *af = xmalloc(4 * na), *bf = xmalloc(4 * nb), *c0 = xmalloc(4 * nc), *c1 = xmalloc(4 * nc),
                  *c2 = xmalloc(4 * nc);
            attn_bf16 *ah = xmalloc(2 * na), *bh = xmalloc(2 * nb);
            fill_f32_bf16(r, af, ah, na);
            fill_f32_bf16(r, bf, bh, nb);
            fill_normal(r, c0, nc, 1);
            const size_t wsb = attn_gemm_bf16_workspace_size(m, n, k), pbytes = attn_gemm_bf16_packed_b_size(n, k);
            CHECK(pbytes > 0 && pbytes != SIZE_MAX, "attn_gemm_bf16_packed_b_size(%lld, %lld) = %zu", (long long)n,
                  (long long)k, pbytes);
            void *ws = xmalloc(wsb);
            unsigned char *buf = xmalloc(pbytes + 64), *moved = xmalloc(pbytes + 64);
            for (int pk = 0; pk < nt; pk++)
                for (int from = 0; from < 2; from++) {
                    attn__bf16_force(tables[pk]);
                    unsigned char *pb = buf + 16 + 4 * (size_t)pk; /* off a line, and a different offset per table */
                    if (from)
                        CHECK_OK(attn_gemm_bf16_pack_b_from_f32((attn_transpose)tb, n, k, bf, ldb, pb, pbytes));
                    else
                        CHECK_OK(attn_gemm_bf16_pack_b((attn_transpose)tb, n, k, bh, ldb, pb, pbytes));
                    memcpy(moved + 4 * (size_t)(pk % 3), pb, pbytes); /* the bytes elsewhere, aligned otherwise */
                    for (int run = 0; run < nt; run++)
                        for (int th = 1; th <= 2; th++) {
                            const int acc = (int)(i + (size_t)run + (size_t)th) % 2;
                            attn__bf16_force(tables[run]);
                            attn_set_num_threads(th);
                            memcpy(c1, c0, 4 * nc);
                            if (from)
                                CHECK_OK(attn_gemm_bf16_from_f32((attn_transpose)ta, (attn_transpose)tb, m, n, k, af,
                                                                 lda, bf, ldb, acc, c1, ldc, ws, wsb));
                            else
                                CHECK_OK(attn_gemm_bf16((attn_transpose)ta, (attn_transpose)tb, m, n, k, ah, lda, bh,
                                                        ldb, acc, c1, ldc, ws, wsb));
                            if (k == 0) /* an empty sum (it divided by zero once) */
                                for (int64_t e = 0; e < m * n; e++)
                                    CHECK(c1[e / n * ldc + e % n] == (acc ? c0[e / n * ldc + e % n] : 0.0f),
                                          "bf16 gemm with k = 0, accumulate %d: C[%lld] = %g", acc, (long long)e,
                                          (double)c1[e / n * ldc + e % n]);
                            const int same_width = !!tables[run]->gemm_panels == !!tables[pk]->gemm_panels;
                            for (int copy = 0; copy < 2; copy++) {
                                const void *src = copy ? (const void *)(moved + 4 * (size_t)(pk % 3)) : pb;
                                memcpy(c2, c0, 4 * nc);
                                const attn_status st =
                                    from ? attn_gemm_bf16_packed_from_f32((attn_transpose)ta, m, n, k, af, lda, src,
                                                                          acc, c2, ldc, ws, wsb)
                                         : attn_gemm_bf16_packed((attn_transpose)ta, m, n, k, ah, lda, src, acc, c2,
                                                                 ldc, ws, wsb);
                                if (same_width || m == 0 || n == 0) {
                                    CHECK(st == ATTN_OK, "packed product: %s", attn_last_error());
                                    CHECK(!memcmp(c1, c2, 4 * nc),
                                          "public packed B %lldx%lldx%lld ta%d tb%d from_f32 %d, packed under %s, run "
                                          "under %s, %d threads, copy %d: differs from B itself",
                                          (long long)m, (long long)n, (long long)k, ta, tb, from, tables[pk]->name,
                                          tables[run]->name, th, copy);
                                } else {
                                    CHECK(st == ATTN_ERR_INVALID_ARGUMENT && strstr(attn_last_error(), "panels of"),
                                          "B packed under %s used under %s: status %d (%s)", tables[pk]->name,
                                          tables[run]->name, (int)st, attn_last_error());
                                    CHECK(!memcmp(c0, c2, 4 * nc), "a refused packed product wrote C");
                                }
                            }
                        }
                    attn__bf16_force(tables[pk]);
                    attn_set_num_threads(0);
                    /* another shape, and a header overwritten: refused, C untouched */
                    memcpy(c2, c0, 4 * nc);
                    CHECK_STATUS(attn_gemm_bf16_packed((attn_transpose)ta, m, n + 1, k, ah, lda, pb, 0, c2, ldc + 1, ws,
                                                       attn_gemm_bf16_workspace_size(m, n + 1, k) + wsb),
                                 ATTN_ERR_INVALID_ARGUMENT);
                    CHECK(strstr(attn_last_error(), "the product wants") != NULL, "another shape's message: %s",
                          attn_last_error());
                    pb[9] ^= 1; /* n's low byte */
                    CHECK_STATUS(attn_gemm_bf16_packed((attn_transpose)ta, m, n, k, ah, lda, pb, 0, c2, ldc, ws, wsb),
                                 ATTN_ERR_INVALID_ARGUMENT);
                    CHECK(strstr(attn_last_error(), "does not hold a packed B") != NULL, "overwritten: %s",
                          attn_last_error());
                    CHECK(!memcmp(c0, c2, 4 * nc), "a refused packed product wrote C");
                }
            attn__bf16_force(NULL);
            free(ws);
            free(buf);
            free(moved);
            free(af);
            free(bf);
            free(ah);
            free(bh);
            free(c0);
            free(c1);
            free(c2);
        }
    /* arguments */
    unsigned char zeros[256] = {0};
    float w[6] = {0}, c[4] = {0};
    attn_bf16 x[6] = {0};
    const size_t need = attn_gemm_bf16_packed_b_size(3, 2);
    unsigned char *pb = xmalloc(need);
    CHECK(attn_gemm_bf16_packed_b_size(-1, 2) == 0, "negative n's size");
    CHECK(attn_gemm_bf16_packed_b_size(INT64_MAX, INT64_MAX) == SIZE_MAX, "an overflowing size is not SIZE_MAX");
    CHECK_STATUS(attn_gemm_bf16_pack_b(ATTN_NO_TRANS, 3, 2, x, 2, pb, need), ATTN_ERR_INVALID_ARGUMENT); /* ldb < n */
    CHECK_STATUS(attn_gemm_bf16_pack_b_from_f32(ATTN_TRANS, 3, 2, NULL, 2, pb, need), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_gemm_bf16_pack_b(ATTN_NO_TRANS, 3, 2, x, 3, pb, need - 1), ATTN_ERR_WORKSPACE);
    CHECK(strstr(attn_last_error(), "attn_gemm_bf16_packed_b_size") != NULL, "small buffer's message: %s",
          attn_last_error());
    CHECK_STATUS(attn_gemm_bf16_pack_b(ATTN_NO_TRANS, 3, 2, x, 3, NULL, need), ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_gemm_bf16_pack_b((attn_transpose)7, 3, 2, x, 3, pb, need), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_gemm_bf16_pack_b_from_f32(ATTN_NO_TRANS, 3, 2, w, 3, pb, need));
    const size_t wsb = attn_gemm_bf16_workspace_size(2, 3, 2);
    void *ws = xmalloc(wsb);
    CHECK_STATUS(attn_gemm_bf16_packed(ATTN_NO_TRANS, 1, 3, 2, x, 2, NULL, 0, c, 3, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_gemm_bf16_packed(ATTN_NO_TRANS, 1, 3, 2, x, 2, zeros, 0, c, 3, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_gemm_bf16_packed(ATTN_NO_TRANS, 1, 3, 2, x, 2, pb, 0, c, 3, NULL, 0), ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_gemm_bf16_packed(ATTN_NO_TRANS, 1, 3, 2, NULL, 2, pb, 0, c, 3, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_gemm_bf16_packed_from_f32(ATTN_NO_TRANS, 1, 3, 2, w, 2, pb, 0, c, 2, ws, wsb),
                 ATTN_ERR_INVALID_ARGUMENT); /* ldc 2 < n 3 */
    CHECK_OK(attn_gemm_bf16_packed_from_f32(ATTN_NO_TRANS, 1, 3, 2, w, 2, pb, 0, c, 3, ws, wsb));
    free(ws);
    free(pb);
    printf("  public B packed once: bitwise B itself, %d tables; refusals\n", nt);
}

/* Equal pair words, or halves that are both NaN where they differ (the payloads may). */
static int same_words(uint32_t x, uint32_t y) {
    for (int h = 0; h < 32; h += 16) {
        const uint32_t a = x >> h & 0xffff, b = y >> h & 0xffff;
        if (a != b && !((a & 0x7fff) > 0x7f80 && (b & 0x7fff) > 0x7f80)) return 0;
    }
    return 1;
}

/* f's gemm_pairs bit for bit the portable one on each way A may be laid out (rows of words,
 * columns of words as flash's P^T / dS^T, any strides), row counts on and off the register
 * tiles and past 64, columns on and off the 64-column panels, pair steps from none to 65, with
 * and without accumulation, row and output scales. */
static void check_pairs_layouts(test_rng *r, const attn_bf16_kernels *f) {
    const attn_bf16_kernels *g = attn_bf16_kernels_ref();
    static const int shapes[][3] = {{1, 1, 0},    {3, 17, 1},    {4, 64, 32}, {5, 70, 33},
                                    {64, 64, 64}, {70, 130, 65}, {130, 40, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int m = shapes[s][0], n = shapes[s][1], kp = shapes[s][2];
        const int64_t ldb = n + 3, ldc = n + 5;
        const size_t na = (size_t)(m + 3) * (size_t)(2 * kp + 2) + 1;
        uint32_t *a = xmalloc(4 * na), *b = xmalloc(4 * ((size_t)kp * (size_t)ldb + 1));
        float *c0 = xmalloc(4 * (size_t)m * (size_t)ldc), *cf = xmalloc(4 * (size_t)m * (size_t)ldc),
              *cg = xmalloc(4 * (size_t)m * (size_t)ldc), *rs = xmalloc(4 * (size_t)m);
        for (size_t i = 0; i < na; i++)
            a[i] = attn_pair(attn_bf16_rne_daz((float)rng_normal(r)),
                             attn_bf16_rne_daz((float)(rng_normal(r) * (i % 41 == 3 ? 1e-39 : 1))));
        for (size_t i = 0; i < (size_t)kp * (size_t)ldb; i++)
            b[i] = attn_pair(attn_bf16_rne_daz((float)rng_normal(r)), attn_bf16_rne_daz((float)rng_normal(r)));
        fill_normal(r, c0, (size_t)m * (size_t)ldc, 1);
        for (int i = 0; i < m; i++) rs[i] = (float)rng_uniform(r);
        /* (ars, acs): rows of words, columns of words, both strided */
        const int64_t lay[3][2] = {{kp + 1, 1}, {1, m + 3}, {2 * kp + 2, 2}};
        for (int l = 0; l < 3; l++)
            for (int v = 0; v < 3; v++) {
                const int acc = v > 0;
                const float *rsv = v == 2 ? rs : NULL;
                const float os = v == 2 ? 0.5f : 1.0f;
                memcpy(cf, c0, 4 * (size_t)m * (size_t)ldc);
                memcpy(cg, c0, 4 * (size_t)m * (size_t)ldc);
                f->gemm_pairs(m, n, kp, a, lay[l][0], lay[l][1], b, ldb, cf, ldc, acc, rsv, os);
                g->gemm_pairs(m, n, kp, a, lay[l][0], lay[l][1], b, ldb, cg, ldc, acc, rsv, os);
                CHECK(!memcmp(cf, cg, 4 * (size_t)m * (size_t)ldc),
                      "%s: gemm_pairs %dx%dx%d, A strides (%lld, %lld), accumulate %d, scales %d differs from the "
                      "portable kernel",
                      f->name, m, n, kp, (long long)lay[l][0], (long long)lay[l][1], acc, v == 2);
            }
        free(a), free(b), free(c0), free(cf), free(cg), free(rs);
    }
}

/* f's rounding (vcvtneps2bf16 or its emulation) and the scalar one agree (subnormals flushed),
 * and its pair products agree with the portable emulation on values near the subnormal range,
 * with row and output scalings. */
static void check_kernels(test_rng *r, const attn_bf16_kernels *f) {
    const attn_bf16_kernels *g = attn_bf16_kernels_ref();
    float src[2 * 67];
    for (int i = 0; i < 2 * 67; i++) {
        const double e = rng_uniform(r) * 300 - 150;
        src[i] = (float)(rng_normal(r) * pow(2, e));
    }
    src[0] = 1e-40f;
    src[1] = -1e-41f;
    src[2] = NAN;
    src[3] = INFINITY;
    src[4] = 3.4e38f;
    /* rows paired: odd and even row counts, column counts on and off the 16 / 32-column steps,
     * words past each count left alone */
    const int pr[4] = {2, 1, 2, 1}, pc[4] = {67, 33, 32, 16};
    for (int t = 0; t < 4; t++) {
        uint32_t df[70], dg[70];
        memset(df, 0xa5, sizeof df);
        memset(dg, 0xa5, sizeof dg);
        f->pair_rows_f32(pr[t], pc[t], src, 67, df, 70);
        g->pair_rows_f32(pr[t], pc[t], src, 67, dg, 70);
        int same = 1;
        for (int j = 0; j < 70; j++)
            same &= df[j] == dg[j] || (j == 2 && ((df[j] & 0x7fff) > 0x7f80) == ((dg[j] & 0x7fff) > 0x7f80));
        CHECK(same, "%s: vcvtneps2bf16 and the scalar rounding disagree (%d rows, %d columns)", f->name, pr[t], pc[t]);
    }
    /* the backward's tile roundings (P and dS rows as words, dS rows paired): odd and even row
     * and column counts, a row stride past the columns, words past each count left alone */
    const int tr[3] = {3, 4, 2}, tc[3] = {33, 32, 65};
    for (int t = 0; t < 3; t++) {
        const int rows = tr[t], cols = tc[t], ld = cols + 1, ldw = (cols + 1) / 2 + 3, ldv = cols + 2;
        uint32_t pf[4 * 40], pg[4 * 40], sf[4 * 40], sg[4 * 40], vf[2 * 70], vg[2 * 70];
        memset(pf, 0xa5, sizeof pf);
        memset(pg, 0xa5, sizeof pg);
        memset(sf, 0xa5, sizeof sf);
        memset(sg, 0xa5, sizeof sg);
        memset(vf, 0xa5, sizeof vf);
        memset(vg, 0xa5, sizeof vg);
        const float *ds = src + 134 - rows * ld; /* overlaps p: any floats do */
        f->pair_tile_grads(rows, cols, src, ds, ld, pf, sf, ldw, vf, ldv);
        g->pair_tile_grads(rows, cols, src, ds, ld, pg, sg, ldw, vg, ldv);
        int ok = 1;
        for (int i = 0; i < 4 * 40; i++) ok &= same_words(pf[i], pg[i]) && same_words(sf[i], sg[i]);
        for (int i = 0; i < 2 * 70; i++) ok &= same_words(vf[i], vg[i]);
        CHECK(ok, "%s: pair_tile_grads (%d rows, %d columns) and the scalar rounding disagree", f->name, rows, cols);
    }
    uint16_t rf[67], rg[67];
    const float two = 2.0f;
    f->round_row(67, src + 5, &two, rf);
    g->round_row(67, src + 5, &two, rg);
    CHECK(!memcmp(rf, rg, sizeof rf), "%s: round_row differs", f->name);
    /* tiny magnitudes through the pair products (subnormal products and sums; overflow is not
     * emulated) */
    for (int i = 0; i < 2 * 67; i++) src[i] = (float)(rng_normal(r) * pow(2, rng_uniform(r) * 120 - 130));
    uint32_t a[4 * 9], b[9 * 70];
    for (int i = 0; i < 4 * 9; i++)
        a[i] = attn_pair(attn_f32_to_bf16(src[i % 134]), attn_f32_to_bf16(src[(i * 7 + 1) % 134]));
    for (int i = 0; i < 9 * 70; i++)
        b[i] = attn_pair(attn_f32_to_bf16(src[(i * 3 + 2) % 134]), attn_f32_to_bf16(src[(i * 5) % 134]));
    a[0] = b[0] = attn_pair(attn_f32_to_bf16(1.0f), 0);
    float cf[4 * 70], cg[4 * 70];
    for (int i = 0; i < 4 * 70; i++) cf[i] = cg[i] = (float)rng_normal(r) * 1e-38f;
    /* row scales that make C subnormal before the products, an output scale that makes the
     * sums subnormal after them (1e-30: these sums are mostly 1e-20..1e-8; 1e-5 left nearly every
     * seed without a subnormal result): both under the caller's rounding, as around vdpbf16ps */
    const float rs[4] = {1e-3f, 0.5f, 1e-6f, 3.0f};
    for (int v = 0; v < 3; v++) {
        int sub_in = 0;
        for (int i = 0; i < 4 * 70; i++) {
            cf[i] = cg[i] = (float)rng_normal(r) * 1e-38f;
            sub_in += v && fabsf(cf[i] * rs[i / 70]) < FLT_MIN && cf[i] * rs[i / 70] != 0;
        }
        const float os = v == 2 ? 1e-30f : 0.5f;
        f->gemm_pairs(4, 70, 9, a, 9, 1, b, 70, cf, 70, 1, v ? rs : NULL, os);
        g->gemm_pairs(4, 70, 9, a, 9, 1, b, 70, cg, 70, 1, v ? rs : NULL, os);
        int eq = 1, sub = 0;
        for (int i = 0; i < 4 * 70; i++) {
            eq &= cf[i] == cg[i] || (isnan(cf[i]) && isnan(cg[i]));
            sub += cf[i] != 0 && fabsf(cf[i]) < FLT_MIN;
        }
        CHECK(eq, "%s: vdpbf16ps and the emulation disagree near the subnormal range (%s)", f->name,
              v == 0   ? "no row scales"
              : v == 1 ? "row scales"
                       : "row scales, small output scale");
        CHECK((v == 0 || sub_in > 0) && (v < 2 || sub > 0),
              "%s: no subnormal scaled C (%d) or result (%d): case %d tests nothing", f->name, sub_in, sub, v);
    }
}

/* The AVX-512 bf16 kernels are AMX's on an AMX-BF16 CPU whose tile state Linux grants unless
 * ATTN_AMX=0 declines them, else vdpbf16ps (or its FMA emulation without AVX512-BF16); the same
 * for the context the process started with (ctest runs this test with and without ATTN_AMX=0). */
static void check_amx_policy(void) {
    const char *e = getenv("ATTN_AMX");
    const int asked = !(e && !strcmp(e, "0"));
    const char *fallback = "ref";
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    if (attn_detected_isa() == ATTN_ISA_AVX512) fallback = attn_bf16_kernels_avx512_pairs(NULL)->name;
#endif
    const int amx = attn_bf16_kernels_try_amx() != NULL;
    if (attn_active_isa() == ATTN_ISA_AVX512) {
        const char *active = attn_bf16_kernels_active()->name;
        CHECK(!strcmp(active, asked && amx ? "amx" : fallback), "ATTN_AMX=%s: active bf16 kernels %s",
              e ? e : "(unset)", active);
        if (!amx) printf("  notice: no AMX-BF16 here (or the tile state was refused): the %s kernels serve\n", active);
    }
    static const char *const values[] = {NULL, "0", "1", "yes"};
    for (int i = 0; i < 4; i++) {
        if (values[i])
            setenv("ATTN_AMX", values[i], 1);
        else
            unsetenv("ATTN_AMX");
        const char *want = !(values[i] && !strcmp(values[i], "0")) && amx ? "amx" : fallback;
        /* the AVX-512 init's choice now, as a fresh context would make it (contexts are built once) */
        const char *got = fallback;
        if (attn_detected_isa() == ATTN_ISA_AVX512) {
            attn_kernel_ctx t = {0};
            attn_isa_registry_row(ATTN_ISA_AVX512)->init(&t);
            got = t.bf16->name;
        }
        CHECK(!strcmp(got, want), "ATTN_AMX=%s: AVX-512 bf16 kernels %s, want %s", values[i] ? values[i] : "(unset)",
              got, want);
    }
    if (e)
        setenv("ATTN_AMX", e, 1);
    else
        unsetenv("ATTN_AMX");
}

/* Without AMX tiles, the AVX-512 pair kernels are vdpbf16ps on AMD and its FMA emulation on
 * Intel (vdpbf16ps at half the FMA rate there) or without AVX512-BF16; ATTN_VDPBF16PS=1 / 0
 * runs / emulates it on an AVX512-BF16 CPU, any other value is ignored. */
static void check_vdpbf16ps_policy(void) {
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    if (attn_detected_isa() != ATTN_ISA_AVX512) return;
    const char *e = getenv("ATTN_VDPBF16PS");
    const char *emulated = attn_bf16_kernels_avx512()->name, *native = "avx512bf16";
    const int has = attn_cpu_has_avx512bf16(), intel = !strcmp(attn_cpu_uarch()->vendor, "GenuineIntel");
    static const char *const values[] = {NULL, "0", "1", "yes"};
    for (int i = 0; i < 4; i++) {
        if (values[i])
            setenv("ATTN_VDPBF16PS", values[i], 1);
        else
            unsetenv("ATTN_VDPBF16PS");
        const char *why = NULL;
        const char *got = attn_bf16_kernels_avx512_pairs(&why)->name;
        const char *want = !has                                   ? emulated
                           : values[i] && !strcmp(values[i], "0") ? emulated
                           : values[i] && !strcmp(values[i], "1") ? native
                           : intel                                ? emulated
                                                                  : native;
        CHECK(!strcmp(got, want) && why && *why, "ATTN_VDPBF16PS=%s: pair kernels %s, want %s",
              values[i] ? values[i] : "(unset)", got, want);
    }
    if (e)
        setenv("ATTN_VDPBF16PS", e, 1);
    else
        unsetenv("ATTN_VDPBF16PS");
#endif
}

/* AMX tiles against the emulation: the same pair products, TDPBF16PS's own rounding of the sums,
 * so close rather than bitwise; skipped with a notice where the CPU has no AMX-BF16 or Linux
 * refuses the tile state (test_amx_emulated runs the kernel on emulated tiles everywhere). */
static void check_amx(test_rng *r) {
    const attn_bf16_kernels *amx = attn_bf16_kernels_try_amx(), *ref = attn_bf16_kernels_ref();
    if (!amx) {
        printf("  notice: no AMX-BF16 on this CPU (or the tile state was refused): AMX kernels compiled, not tested\n");
        return;
    }
    static const int sz[][3] = {{1, 1, 1}, {16, 16, 16}, {33, 70, 9}, {64, 64, 32}, {64, 128, 64}, {5, 300, 40}};
    for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++) {
        const int m = sz[s][0], n = sz[s][1], kp = sz[s][2];
        uint32_t *a = xmalloc(4 * (size_t)m * kp), *b = xmalloc(4 * (size_t)kp * n);
        float *c0 = xmalloc(4 * (size_t)m * n), *c1 = xmalloc(4 * (size_t)m * n), *f = xmalloc(4 * (size_t)m);
        for (int i = 0; i < m * kp; i++)
            a[i] = attn_pair(attn_f32_to_bf16((float)rng_normal(r)), attn_f32_to_bf16((float)rng_normal(r)));
        for (int i = 0; i < kp * n; i++)
            b[i] = attn_pair(attn_f32_to_bf16((float)rng_normal(r)), attn_f32_to_bf16((float)rng_normal(r)));
        float *c2 = xmalloc(4 * (size_t)m * n), *cm = xmalloc(4 * (size_t)m * n);
        uint32_t *at = xmalloc(4 * (size_t)m * kp), *aa = xmalloc(4 * (size_t)m * kp),
                 *ba = xmalloc(4 * (size_t)kp * n);
        for (int i = 0; i < m * n; i++) c0[i] = c1[i] = c2[i] = (float)rng_normal(r);
        for (int i = 0; i < m; i++) f[i] = (float)rng_uniform(r);
        /* the magnitudes: the same sums of |terms| (sign bits cleared), the scale of the rounding
         * differences (a single element can cancel to near 0) */
        for (int i = 0; i < m * kp; i++) aa[i] = a[i] & 0x7fff7fffu;
        for (int i = 0; i < kp * n; i++) ba[i] = b[i] & 0x7fff7fffu;
        for (int i = 0; i < m * n; i++) cm[i] = fabsf(c0[i]);
        ref->gemm_pairs(m, n, kp, aa, kp, 1, ba, n, cm, n, 1, f, 0.5f);
        amx->gemm_pairs(m, n, kp, a, kp, 1, b, n, c0, n, 1, f, 0.5f);
        ref->gemm_pairs(m, n, kp, a, kp, 1, b, n, c1, n, 1, f, 0.5f);
        double d2 = 0, m2 = 0;
        for (int i = 0; i < m * n; i++)
            d2 += ((double)c0[i] - c1[i]) * ((double)c0[i] - c1[i]), m2 += (double)cm[i] * cm[i];
        const double e = m2 > 0 ? sqrt(d2 / m2) : sqrt(d2);
        CHECK(e < 1e-6, "AMX gemm_pairs %dx%dx%d: %.3g of the terms' magnitude from the emulation", m, n, kp, e);
        /* A given down its columns (ars 1, the flash kernels' P words): the same tiles, the same bits */
        for (int i = 0; i < m; i++)
            for (int q = 0; q < kp; q++) at[q * m + i] = a[i * kp + q];
        amx->gemm_pairs(m, n, kp, at, 1, m, b, n, c2, n, 1, f, 0.5f);
        CHECK(!memcmp(c2, c0, 4 * (size_t)m * n), "AMX gemm_pairs %dx%dx%d: A by columns differs from A by rows", m, n,
              kp);
        printf("  AMX %dx%dx%d: %s the emulation (%.2g of the terms' magnitude)\n", m, n, kp,
               memcmp(c0, c1, 4 * (size_t)m * n) ? "close to" : "bitwise equal to", e);
        free(a);
        free(b);
        free(c0);
        free(c1);
        free(c2);
        free(cm);
        free(at);
        free(aa);
        free(ba);
        free(f);
    }
}

int main(void) {
    test_rng r = rng_seeded(31337);
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    if (attn_detected_isa() == ATTN_ISA_AVX512) {
        if (attn_cpu_has_avx512bf16())
            fast[nfast++] = attn_bf16_kernels_avx512bf16();
        else
            printf("  notice: no AVX512-BF16 on this CPU: vdpbf16ps itself is not tested, its emulation is\n");
        fast[nfast++] = attn_bf16_kernels_avx512();
    }
    if (attn_detected_isa() >= ATTN_ISA_AVX2)
        fast[nfast++] = attn_bf16_kernels_avx2();
    else
        printf("  notice: no AVX2 on this CPU: its bf16 emulation is compiled, not tested\n");
#endif
    if (!nfast) printf("  notice: no AVX2 or AVX-512 on this CPU: only the portable bf16 kernels are tested\n");
    /* the 16-column panel packing on every CPU: a table with a gemm_panels made of its gemm_pairs */
    panels_base = nfast ? fast[0] : attn_bf16_kernels_ref();
    panels_table = *panels_base;
    panels_table.name = "panels";
    panels_table.gemm_panels = panels_by_pairs;
    fast[nfast++] = &panels_table;
    for (int f = 0; f < nfast; f++) printf("  fast bf16 kernels tested against the portable ones: %s\n", fast[f]->name);
    check_amx_policy();
    check_vdpbf16ps_policy();
    check_amx(&r);
    check_amx_panels(&r);
    check_foreign_tiles(&r);
    check_a_in_place(&r);
    check_packed_b(&r);
    check_public_packed_b(&r);
    /* k 2500: B blocks narrower than 256 columns; 700 x 1000: a B past 5/8 of a 1-2 MiB L2 in
     * two blocks wider than 256 columns (panels); 8 x 4500 x 300: on 2 threads each thread's
     * columns past 5/8 of the L2, packed and used in blocks */
    static const int64_t sz[][3] = {{1, 1, 1},     {4, 64, 2},      {5, 17, 3},      {64, 64, 64},
                                    {67, 130, 31}, {130, 300, 128}, {3, 513, 77},    {200, 70, 260},
                                    {33, 90, 301}, {40, 300, 2500}, {40, 700, 1000}, {8, 4500, 300}};
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                check_case(&r, (attn_transpose)ta, (attn_transpose)tb, sz[i][0], sz[i][1], sz[i][2],
                           (int)((i + ta) % 2));
    for (int f = 0; f < nfast; f++) {
        check_kernels(&r, fast[f]);
        check_pairs_layouts(&r, fast[f]);
    }
    /* errors */
    float c[4];
    attn_bf16 x[4] = {0};
    CHECK_STATUS(attn_gemm_bf16(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 2, x, 2, x, 2, 0, c, 2, NULL, 0),
                 ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_gemm_bf16(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 2, NULL, 2, x, 2, 0, c, 2, c, 1000),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_gemm_bf16_from_f32(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 2, c, 2, c, 2, 0, c, 2, NULL, 0),
                 ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_gemm_bf16_from_f32(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 2, c, 2, NULL, 2, 0, c, 2, c, 1000),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_gemm_bf16_from_f32(ATTN_TRANS, ATTN_NO_TRANS, 3, 2, 2, c, 2, c, 2, 0, c, 2, c, 1000),
                 ATTN_ERR_INVALID_ARGUMENT); /* lda 2 < m 3 */
    return test_summary("test_gemm_bf16");
}
