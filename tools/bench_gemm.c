/* attn bench gemm: attn_sgemm against OpenBLAS's cblas_sgemm, measured side by side in the same
 * run. OpenBLAS is loaded here, at run time (dlopen), when the machine has it: no other command
 * links or loads it (its thread start-up costs every command memory and time otherwise). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"

#ifdef ATTN_OPENBLAS_RUNTIME
/* The CBLAS interface's values (cblas.h), so that no header is needed at build time. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                               float *, int);
typedef void (*openblas_threads_fn)(int);
static cblas_sgemm_fn openblas_sgemm;
static openblas_threads_fn openblas_threads;

/* 1 when OpenBLAS's cblas_sgemm could be loaded (once). */
static int openblas_load(void) {
    static int tried;
    if (!tried) {
        tried = 1;
        void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            *(void **)&openblas_sgemm = dlsym(h, "cblas_sgemm");
            *(void **)&openblas_threads = dlsym(h, "openblas_set_num_threads");
        }
    }
    return openblas_sgemm != NULL;
}
#endif

#define MAX_DIM 65536

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attn bench gemm [--m M,...] [--n N,...] [--k K,...] [--trans NN,NT,TN,TT]\n"
        "                       [--dtype f32,bf16] [--from-f32] [--packed-b] [--threads T,...]\n"
        "                       [--repeats R] [--json]\n\n"
        "C = A * B (alpha = 1, beta = 0, row-major, op(A) m x k, op(B) k x n) for every\n"
        "combination of the lists; flops = 2*m*n*k. Without --n (--k), n (k) equals m for\n"
        "each m (square shapes); m defaults to 1024. Each attn row is followed by OpenBLAS\n"
        "(cblas_sgemm, openblas_set_num_threads(T)) measured right after, when libopenblas.so.0\n"
        "can be loaded at run time; ratio = attn GFLOP/s / OpenBLAS GFLOP/s. Times are medians of R (>= %d) samples\n"
        "after a warmup.\n\n"
        "  --m, --n, --k    comma-separated sizes in 1..%d\n"
        "  --trans          transposes of A and B (N or T each), default NN\n"
        "  --dtype          f32 (attn_sgemm, default) and/or bf16 (attn_gemm_bf16: bf16 A and B,\n"
        "                   float C; its peak fraction is of `attn bench peak --dtype bf16`, its\n"
        "                   ratio is to the f32 row when both run; no OpenBLAS peer)\n"
        "  --from-f32       the bf16 row takes the float A and B and rounds them while packing\n"
        "                   (attn_gemm_bf16_from_f32, impl attn.bf16_from_f32): the cost of a\n"
        "                   mixed-precision layer's product, rounding included\n"
        "  --packed-b       the bf16 row's B is packed once before the timing\n"
        "                   (attn_gemm_bf16_pack_b, then attn_gemm_bf16_packed, impl\n"
        "                   attn.bf16_packed_b; with --from-f32 attn.bf16_from_f32_packed_b): a\n"
        "                   frozen weight's product, as attn's linear layers run it\n"
        "  --threads T,...  thread counts (default: attn's, ATTN_NUM_THREADS/OMP_NUM_THREADS)\n"
        "  --repeats R      timed samples per measurement (default 7)\n"
        "  --json           one JSON object per line\n"
        "OpenBLAS peer: %s\n",
        BENCH_MIN_REPEATS, MAX_DIM,
#ifdef ATTN_OPENBLAS_RUNTIME
        "libopenblas.so.0, loaded by this command when present (Debian's libopenblas0)"
#else
        "no (this build was configured with ATTN_WITH_OPENBLAS=OFF)"
#endif
    );
}

typedef struct gemm_ctx {
    attn_transpose ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    const float *a, *b;
    const attn_bf16 *ah, *bh;
    float *c;
    void *ws;
    size_t ws_bytes;
    int from_f32;
    const void *packed_b; /* B packed once (--packed-b), or NULL */
    attn_status st;
} gemm_ctx;

static void run_attn(void *p) {
    gemm_ctx *g = p;
    attn_status st = attn_sgemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, g->lda, g->b, g->ldb, 0.0f, g->c, g->ldc,
                                g->ws, g->ws_bytes);
    if (st != ATTN_OK) g->st = st;
}

static void run_bf16(void *p) {
    gemm_ctx *g = p;
    attn_status st;
    if (g->packed_b) {
        st = g->from_f32 ? attn_gemm_bf16_packed_from_f32(g->ta, g->m, g->n, g->k, g->a, g->lda, g->packed_b, 0, g->c,
                                                          g->ldc, g->ws, g->ws_bytes)
                         : attn_gemm_bf16_packed(g->ta, g->m, g->n, g->k, g->ah, g->lda, g->packed_b, 0, g->c, g->ldc,
                                                 g->ws, g->ws_bytes);
        if (st != ATTN_OK) g->st = st;
        return;
    }
    st = g->from_f32 ? attn_gemm_bf16_from_f32(g->ta, g->tb, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, 0, g->c,
                                               g->ldc, g->ws, g->ws_bytes)
                     : attn_gemm_bf16(g->ta, g->tb, g->m, g->n, g->k, g->ah, g->lda, g->bh, g->ldb, 0, g->c, g->ldc,
                                      g->ws, g->ws_bytes);
    if (st != ATTN_OK) g->st = st;
}

#ifdef ATTN_OPENBLAS_RUNTIME
static void run_openblas(void *p) {
    gemm_ctx *g = p;
    openblas_sgemm(CBLAS_ROW_MAJOR, g->ta == ATTN_TRANS ? CBLAS_TRANS : CBLAS_NO_TRANS,
                   g->tb == ATTN_TRANS ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)g->m, (int)g->n, (int)g->k, 1.0f, g->a,
                   (int)g->lda, g->b, (int)g->ldb, 0.0f, g->c, (int)g->ldc);
}
#endif

static float *alloc_random(int64_t count, unsigned seed) {
    float *x = bench_alloc_lines((size_t)count * sizeof(float));
    if (!x) return NULL;
    uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (int64_t i = 0; i < count; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1u << 24) - 0.5);
    }
    return x;
}

static int parse_trans(const char *v, int *codes, int max) {
    int n = 0;
    const char *p = v;
    for (;;) {
        if ((p[0] != 'N' && p[0] != 'T') || (p[1] != 'N' && p[1] != 'T') || n >= max) return -1;
        codes[n++] = (p[0] == 'T') * 2 + (p[1] == 'T');
        if (p[2] == '\0') return n;
        if (p[2] != ',') return -1;
        p += 3;
    }
}

/* The bf16 row's impl name and the call it times. */
static const char *bf16_impl(int from_f32, int packed, const char **call) {
    *call = packed ? (from_f32 ? "attn_gemm_bf16_packed_from_f32" : "attn_gemm_bf16_packed")
                   : (from_f32 ? "attn_gemm_bf16_from_f32" : "attn_gemm_bf16");
    return packed ? (from_f32 ? "attn.bf16_from_f32_packed_b" : "attn.bf16_packed_b")
                  : (from_f32 ? "attn.bf16_from_f32" : "attn.bf16");
}

/* --packed-b: B packed once into a buffer of its own (g->packed_b), before the timing. */
static int pack_once(gemm_ctx *g) {
    const size_t bytes = attn_gemm_bf16_packed_b_size(g->n, g->k);
    void *p = bytes != SIZE_MAX ? bench_alloc_lines(bytes) : NULL;
    if (!p) return cli_fail("bench gemm: out of memory for a %zu-byte packed B", bytes);
    attn_status st = g->from_f32 ? attn_gemm_bf16_pack_b_from_f32(g->tb, g->n, g->k, g->b, g->ldb, p, bytes)
                                 : attn_gemm_bf16_pack_b(g->tb, g->n, g->k, g->bh, g->ldb, p, bytes);
    if (st != ATTN_OK) {
        free(p);
        return cli_fail("bench gemm: packing B failed: %s", attn_last_error());
    }
    g->packed_b = p;
    return 0;
}

static int one_shape(const bench_opts *o, int trans, int64_t m, int64_t n, int64_t k, int f32, int bf16, int from_f32,
                     int packed) {
    static const char *names[4] = {"NN", "NT", "TN", "TT"};
    gemm_ctx g = {0};
    g.ta = trans & 2 ? ATTN_TRANS : ATTN_NO_TRANS;
    g.tb = trans & 1 ? ATTN_TRANS : ATTN_NO_TRANS;
    g.m = m, g.n = n, g.k = k;
    g.from_f32 = from_f32;
    g.lda = g.ta == ATTN_TRANS ? m : k;
    g.ldb = g.tb == ATTN_TRANS ? k : n;
    g.ldc = n;
    float *a = alloc_random(m * k, 1), *b = alloc_random(k * n, 2),
          *c = bench_alloc_lines(sizeof(float) * (size_t)(m * n));
    float *c2 = bench_alloc_lines(sizeof(float) * (size_t)(m * n));
    attn_bf16 *ah = bench_alloc_lines(sizeof(attn_bf16) * (size_t)(m * k)),
              *bh = bench_alloc_lines(sizeof(attn_bf16) * (size_t)(k * n));
    int rc = 0;
    if (!a || !b || !c || !c2 || !ah || !bh) {
        rc = cli_fail("bench gemm: out of memory for m = %lld, n = %lld, k = %lld", (long long)m, (long long)n,
                      (long long)k);
        goto done;
    }
    memset(c, 0, sizeof(float) * (size_t)(m * n));
    memset(c2, 0, sizeof(float) * (size_t)(m * n));
    g.a = a, g.b = b, g.c = c;
    attn_convert(a, ATTN_TYPE_F32, ah, ATTN_TYPE_BF16, (size_t)(m * k));
    attn_convert(b, ATTN_TYPE_F32, bh, ATTN_TYPE_BF16, (size_t)(k * n));
    g.ah = ah, g.bh = bh;
    for (int t = 0; t < o->nthreads; t++) {
        int T = o->threads[t];
        bench_set_threads(T);
        bench_result rh;
        if (bf16) {
            g.ws_bytes = attn_gemm_bf16_workspace_size(m, n, k);
            g.ws = bench_alloc_lines(g.ws_bytes);
            if (!g.ws) {
                rc = cli_fail("bench gemm: out of memory for a %zu-byte workspace", g.ws_bytes);
                goto done;
            }
            if (packed && (rc = pack_once(&g))) {
                free(g.ws);
                goto done;
            }
            g.st = ATTN_OK;
            g.c = c2;
            bench_timing th = bench_measure(run_bf16, &g, o->repeats);
            free(g.ws);
            free((void *)g.packed_b);
            g.packed_b = NULL;
            const char *call, *impl = bf16_impl(from_f32, packed, &call);
            if (g.st != ATTN_OK) {
                rc = cli_fail("bench gemm: %s failed: %s", call, attn_last_error());
                goto done;
            }
            bench_result_init(&rh, "gemm", impl, T);
            rh.variant = names[trans];
            rh.bf16 = 1;
            bench_result_dim(&rh, "m", m);
            bench_result_dim(&rh, "n", n);
            bench_result_dim(&rh, "k", k);
            bench_result_finish(&rh, 2.0 * (double)m * (double)n * (double)k, th.median_ms);
            if (!f32) {
                bench_print(stdout, &rh, o->json);
                continue;
            }
        }
        g.ws_bytes = attn_sgemm_workspace_size(m, n, k);
        g.ws = bench_alloc_lines(g.ws_bytes);
        if (!g.ws) {
            rc = cli_fail("bench gemm: out of memory for a %zu-byte workspace", g.ws_bytes);
            goto done;
        }
        g.st = ATTN_OK;
        g.c = c;
        bench_timing ta = bench_measure(run_attn, &g, o->repeats);
        if (g.st != ATTN_OK) {
            free(g.ws);
            rc = cli_fail("bench gemm: attn_sgemm failed: %s", attn_last_error());
            goto done;
        }
        bench_result ra;
        bench_result_init(&ra, "gemm", "attn", T);
        ra.variant = names[trans];
        bench_result_dim(&ra, "m", m);
        bench_result_dim(&ra, "n", n);
        bench_result_dim(&ra, "k", k);
        double flops = 2.0 * (double)m * (double)n * (double)k;
        bench_result_finish(&ra, flops, ta.median_ms);
        if (bf16) {
            bench_result_ratio(&rh, &ra);
            bench_print(stdout, &rh, o->json);
        }
#ifdef ATTN_OPENBLAS_RUNTIME
        if (!openblas_load()) {
            bench_print(stdout, &ra, o->json);
            free(g.ws);
            continue;
        }
        if (openblas_threads) openblas_threads(T);
        g.c = c2;
        bench_timing tb = bench_measure(run_openblas, &g, o->repeats);
        bench_result rb = ra;
        rb.impl = "openblas";
        rb.ratio = NAN;
        bench_result_finish(&rb, flops, tb.median_ms);
        bench_result_ratio(&ra, &rb);
        /* both computed the same product: a large difference means a broken kernel */
        double num = 0, den = 0;
        for (int64_t i = 0; i < m * n; i++) {
            double d = (double)c[i] - c2[i];
            num += d * d;
            den += (double)c2[i] * c2[i];
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        bench_print(stdout, &ra, o->json);
        bench_print(stdout, &rb, o->json);
        if (!(rel <= 1e-4)) {
            free(g.ws);
            rc = cli_fail("bench gemm: attn and OpenBLAS disagree (relative difference %.3g)", rel);
            goto done;
        }
#else
        bench_print(stdout, &ra, o->json);
#endif
        free(g.ws);
    }
done:
    free(a);
    free(b);
    free(c);
    free(c2);
    free(ah);
    free(bh);
    return rc;
}

int bench_gemm_cmd(int argc, char **argv) {
    bench_opts o;
    bench_opts_init(&o);
    int64_t ms[BENCH_MAX_LIST], ns[BENCH_MAX_LIST], ks[BENCH_MAX_LIST];
    int nm = 0, nn = 0, nk = 0, ntr = 1, from_f32 = 0, packed = 0;
    int trans[4] = {0};
    const char *trans_list = NULL, *dtype_list = NULL;
    cli_opt opts[] = {
        BENCH_COMMON_OPTS(&o),
        CLI_LIST("--m", ms, &nm, BENCH_MAX_LIST, 1, MAX_DIM),
        CLI_LIST("--n", ns, &nn, BENCH_MAX_LIST, 1, MAX_DIM),
        CLI_LIST("--k", ks, &nk, BENCH_MAX_LIST, 1, MAX_DIM),
        CLI_STRING("--trans", &trans_list),
        CLI_STRING("--dtype", &dtype_list),
        CLI_FLAG("--from-f32", &from_f32),
        CLI_FLAG("--packed-b", &packed),
        CLI_END,
    };
    int parsed = cli_parse("bench gemm", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (trans_list && (ntr = parse_trans(trans_list, trans, 4)) < 0)
        return cli_usage_error("bench gemm: --trans wants a list of NN, NT, TN or TT, got '%s'", trans_list);
    int f32, bf16;
    if ((parsed = bench_parse_dtypes("bench gemm", dtype_list, &f32, &bf16))) return parsed;
    if ((from_f32 || packed) && !bf16)
        return cli_usage_error("bench gemm: %s applies to the bf16 row: add --dtype bf16",
                               from_f32 ? "--from-f32" : "--packed-b");
    if (nm == 0) ms[0] = 1024, nm = 1;
    /* an absent --n / --k follows m (square shapes); given lists combine with every m */
    int n_tied = nn == 0, k_tied = nk == 0;
    if (n_tied) nn = 1;
    if (k_tied) nk = 1;

    bench_print_header(stdout, o.json);
    for (int t = 0; t < ntr; t++)
        for (int im = 0; im < nm; im++)
            for (int in = 0; in < nn; in++)
                for (int ik = 0; ik < nk; ik++) {
                    int64_t m = ms[im], n = n_tied ? m : ns[in], k = k_tied ? m : ks[ik];
                    int rc = one_shape(&o, trans[t], m, n, k, f32, bf16, from_f32, packed);
                    if (rc) return rc;
                }
    return 0;
}
