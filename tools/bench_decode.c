/* attn bench decode: one-token decode against a KV cache (attn_flash_forward with one query row
 * per head, bottom-right causal, K and V views of the first ctx rows of a cache): the time, the
 * bytes of K and V read per token, GB/s and its fraction of this machine's measured memory read
 * bandwidth. Decode reads every cached key and value once per token: it is bound by memory, not
 * by the FMA peak. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_CTX (1 << 22)

static void usage(FILE *f) {
    fprintf(f,
            "usage: attn bench decode [--b B] [--h H] [--hk HK] [--d D] [--ctx N,...]\n"
            "                         [--threads T,...] [--repeats R] [--json]\n\n"
            "One decode step: Q [B, H, 1, d] against a float32 KV cache K, V [B, HK, ctx, d]\n"
            "(attn_flash_forward, bottom-right causal: the new token sees every cached one). Reports\n"
            "the median time per token, the cache bytes read (2 B HK ctx d 4), GB/s, and the fraction\n"
            "of the memory read bandwidth measured here (a streaming read of a 512 MiB buffer with the\n"
            "same thread count). Small caches fit in the last-level cache and can exceed it.\n\n"
            "  --b, --h, --hk  batch, query heads, key/value heads (default 1, 8, = h)\n"
            "  --d             head dimension (default 128)\n"
            "  --ctx           context lengths (default 1024,2048,4096,8192,16384,32768)\n"
            "  --threads       thread counts (default: attn's)\n"
            "  --repeats R     timed samples per measurement (default 7)\n"
            "  --json          one JSON object per line\n");
}

typedef struct dec_ctx {
    attn_tensor q, k, v, o;
    attn_sdpa_params p;
    void *ws;
    size_t ws_bytes;
    attn_status st;
} dec_ctx;

static void run_step(void *c_) {
    dec_ctx *c = c_;
    attn_status st = attn_flash_forward(&c->q, &c->k, &c->v, &c->p, &c->o, NULL, c->ws, c->ws_bytes);
    if (st) c->st = st;
}

/* Streaming read bandwidth, GB/s: every thread sums its share of a buffer far larger than the
 * caches; the best of 5 passes. */
static volatile uint64_t bw_sink;
static double read_bandwidth(int threads) {
    const size_t n = (size_t)64 << 20; /* 64 Mi words: 512 MiB */
    uint64_t *x = malloc(n * sizeof *x);
    if (!x) return 0;
    for (size_t i = 0; i < n; i++) x[i] = i;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        uint64_t total = 0;
        const double t0 = bench_now();
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
        for (size_t i = 0; i < n; i += 4) total += x[i] + x[i + 1] + x[i + 2] + x[i + 3];
        const double el = bench_now() - t0;
        bw_sink = total;
        const double gbs = (double)(n * sizeof *x) / el * 1e-9;
        if (gbs > best) best = gbs;
    }
    free(x);
    return best;
}

int bench_decode_cmd(int argc, char **argv) {
    bench_opts o;
    bench_opts_init(&o);
    int64_t ctxs[BENCH_MAX_LIST] = {1024, 2048, 4096, 8192, 16384, 32768};
    int nctx = 6;
    int64_t B = 1, H = 8, HK = 0, D = 128;
    cli_opt opts[] = {
        BENCH_COMMON_OPTS(&o),
        CLI_INT("--b", &B, 1, 1024),
        CLI_INT("--h", &H, 1, 1024),
        CLI_INT("--hk", &HK, 1, 1024),
        CLI_INT("--d", &D, 1, 512),
        CLI_LIST("--ctx", ctxs, &nctx, BENCH_MAX_LIST, 1, MAX_CTX),
        CLI_END,
    };
    int parsed = cli_parse("bench decode", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (!HK) HK = H;
    if (H % HK) return cli_usage_error("bench decode: --h (%lld) must be a multiple of --hk (%lld)", (long long)H, (long long)HK);
    if (!o.json)
        printf("%-8s %3s %4s %4s %5s %8s %10s %10s %9s %9s %8s\n", "op", "b", "h", "hk", "d", "ctx", "cache MB",
               "ms/token", "GB/s", "mem GB/s", "of mem");
    for (int it = 0; it < o.nthreads; it++) {
        const int T = o.threads[it];
        bench_set_threads(T);
        const double bw = read_bandwidth(T);
        for (int ic = 0; ic < nctx; ic++) {
            const int64_t N = ctxs[ic];
            const size_t nkv = (size_t)(B * HK * N * D), nq = (size_t)(B * H * D);
            float *buf = malloc(sizeof(float) * (2 * nkv + 2 * nq));
            if (!buf) return cli_fail("bench decode: out of memory for a %lld-token cache", (long long)N);
            for (size_t i = 0; i < 2 * nkv + 2 * nq; i++) buf[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
            dec_ctx c;
            memset(&c, 0, sizeof c);
            c.k = attn_tensor_4d(buf, B, HK, N, D);
            c.v = attn_tensor_4d(buf + nkv, B, HK, N, D);
            c.q = attn_tensor_4d(buf + 2 * nkv, B, H, 1, D);
            c.o = attn_tensor_4d(buf + 2 * nkv + nq, B, H, 1, D);
            c.p = attn_sdpa_params_default();
            c.p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            c.ws_bytes = attn_flash_workspace_size(&c.q, &c.k, &c.v);
            c.ws = malloc(c.ws_bytes);
            if (!c.ws) {
                free(buf);
                return cli_fail("bench decode: out of memory for the workspace");
            }
            bench_timing t = bench_measure(run_step, &c, o.repeats);
            free(c.ws);
            free(buf);
            if (c.st) return cli_fail("bench decode: %s", attn_last_error());
            const double bytes = 2.0 * (double)nkv * sizeof(float), gbs = bytes / (t.median_ms * 1e-3) * 1e-9;
            if (o.json)
                printf("{\"op\":\"decode\",\"impl\":\"flash\",\"threads\":%d,\"b\":%lld,\"h\":%lld,\"hk\":%lld,\"d\":%lld,"
                       "\"ctx\":%lld,\"cache_bytes\":%.0f,\"ms\":%.5f,\"gbs\":%.3f,\"mem_gbs\":%.3f,\"mem_fraction\":%.4f}\n",
                       T, (long long)B, (long long)H, (long long)HK, (long long)D, (long long)N, bytes, t.median_ms, gbs, bw,
                       bw > 0 ? gbs / bw : 0.0);
            else
                printf("%-8s %3lld %4lld %4lld %5lld %8lld %10.1f %10.4f %9.2f %9.2f %7.1f%%  (threads %d)\n", "decode",
                       (long long)B, (long long)H, (long long)HK, (long long)D, (long long)N, bytes / 1048576.0,
                       t.median_ms, gbs, bw, bw > 0 ? 100.0 * gbs / bw : 0.0, T);
            fflush(stdout);
        }
    }
    return 0;
}
