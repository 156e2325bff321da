/* attn bench decode: one-token decode against a KV cache (attn_flash_forward with one query row
 * per head, bottom-right causal, K and V views of the first ctx rows of a cache; the decode path
 * of src/attention/decode.c): the time, the bytes of K and V read per token, GB/s and its
 * fraction of this machine's memory read bandwidth, measured the same way right before (a
 * streaming read, same thread count, same median over the same samples). Decode reads every
 * cached key and value once per token: it is bound by memory, not by the FMA peak. */
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
    fprintf(f, "usage: attn bench decode [--b B] [--h H] [--hk HK] [--d D] [--ctx N,...]\n"
               "                         [--dtype f32,bf16] [--threads T,...] [--repeats R] [--json]\n\n"
               "One decode step: Q [B, H, 1, d] against a KV cache K, V [B, HK, ctx, d]\n"
               "(attn_flash_forward, bottom-right causal: the new token sees every cached one). Reports\n"
               "the median time per token, the cache bytes read (2 B HK ctx d, times 4 or 2), GB/s, and\n"
               "the fraction of the memory read bandwidth measured just before with the same thread\n"
               "count and statistic: the median time of a streaming read of max(cache, 256 MiB) bytes,\n"
               "far beyond the last-level cache. Small caches fit in the last-level cache and can exceed\n"
               "it.\n\n"
               "  --b, --h, --hk  batch, query heads, key/value heads (default 1, 8, = h)\n"
               "  --d             head dimension (default 128)\n"
               "  --dtype         f32 and/or bf16 cache (and query, float output) (default f32,bf16)\n"
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

/* Streaming read: every thread sums its share of a buffer far larger than the caches. The sum is
 * what keeps the loads; 4 lanes of 64-bit adds vectorise, so the loop is bound by the loads. */
typedef struct bw_ctx {
    const uint64_t *x;
    size_t n;
    int threads;
} bw_ctx;
static volatile uint64_t bw_sink;
static void read_stream(void *c_) {
    const bw_ctx *c = c_;
    uint64_t total = 0;
#pragma omp parallel for num_threads(c->threads) reduction(+ : total) schedule(static)
    for (size_t i = 0; i < c->n; i += 4) total += c->x[i] + c->x[i + 1] + c->x[i + 2] + c->x[i + 3];
    bw_sink = total;
}

#define BW_MIN_BYTES ((size_t)256 << 20)

int bench_decode_cmd(int argc, char **argv) {
    bench_opts o;
    bench_opts_init(&o);
    int64_t ctxs[BENCH_MAX_LIST] = {1024, 2048, 4096, 8192, 16384, 32768};
    int nctx = 6;
    int64_t B = 1, H = 8, HK = 0, D = 128;
    const char *dtype_list = "f32,bf16";
    cli_opt opts[] = {
        BENCH_COMMON_OPTS(&o),
        CLI_INT("--b", &B, 1, 1024),
        CLI_INT("--h", &H, 1, 1024),
        CLI_INT("--hk", &HK, 1, 1024),
        CLI_INT("--d", &D, 1, 512),
        CLI_LIST("--ctx", ctxs, &nctx, BENCH_MAX_LIST, 1, MAX_CTX),
        CLI_STRING("--dtype", &dtype_list),
        CLI_END,
    };
    int parsed = cli_parse("bench decode", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (!HK) HK = H;
    if (H % HK)
        return cli_usage_error("bench decode: --h (%lld) must be a multiple of --hk (%lld)", (long long)H,
                               (long long)HK);
    int want[2];
    if ((parsed = bench_parse_dtypes("bench decode", dtype_list, &want[0], &want[1]))) return parsed;
    /* one bandwidth buffer for the whole run: as large as the largest cache read, and at least
     * 256 MiB (far beyond any last-level cache), touched once so its page faults are not timed */
    size_t bw_bytes = BW_MIN_BYTES;
    for (int ic = 0; ic < nctx; ic++) {
        const size_t cb = (size_t)(2 * B * HK * ctxs[ic] * D) * sizeof(float);
        if (cb > bw_bytes) bw_bytes = cb;
    }
    bw_ctx bwc = {NULL, bw_bytes / sizeof(uint64_t) / 4 * 4, 1};
    uint64_t *bwx = bench_alloc_lines(bwc.n * sizeof(uint64_t));
    if (!bwx) return cli_fail("bench decode: out of memory for the %zu-byte bandwidth buffer", bw_bytes);
    for (size_t i = 0; i < bwc.n; i++) bwx[i] = i;
    bwc.x = bwx;
    if (!o.json)
        printf("%-8s %4s %3s %4s %4s %5s %8s %10s %10s %9s %9s %8s\n", "op", "type", "b", "h", "hk", "d", "ctx",
               "cache MB", "ms/token", "GB/s", "mem GB/s", "of mem");
    int rc = 0;
    for (int it = 0; it < o.nthreads && !rc; it++) {
        const int T = o.threads[it];
        bench_set_threads(T);
        bwc.threads = T;
        for (int dt = 0; dt < 2 && !rc; dt++) {
            if (!want[dt]) continue;
            const size_t esz = dt ? 2 : 4;
            const attn_type ty = dt ? ATTN_TYPE_BF16 : ATTN_TYPE_F32;
            for (int ic = 0; ic < nctx && !rc; ic++) {
                const int64_t N = ctxs[ic];
                const size_t nkv = (size_t)(B * HK * N * D), nq = (size_t)(B * H * D);
                /* on lines, as a cache allocated for SIMD rows would be */
                const size_t buf_bytes = esz * (2 * nkv + nq) + sizeof(float) * nq;
                char *buf = bench_alloc_lines(buf_bytes);
                if (!buf) {
                    rc = cli_fail("bench decode: out of memory for a %lld-token cache", (long long)N);
                    break;
                }
                for (size_t i = 0; i < 2 * nkv + nq; i++) {
                    const float x = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
                    if (dt)
                        ((uint16_t *)(void *)buf)[i] = attn_f32_to_bf16(x);
                    else
                        ((float *)(void *)buf)[i] = x;
                }
                dec_ctx c;
                memset(&c, 0, sizeof c);
                c.k = attn_tensor_4d_typed(buf, ty, B, HK, N, D);
                c.v = attn_tensor_4d_typed(buf + esz * nkv, ty, B, HK, N, D);
                c.q = attn_tensor_4d_typed(buf + esz * 2 * nkv, ty, B, H, 1, D);
                c.o = attn_tensor_4d((float *)(void *)(buf + esz * (2 * nkv + nq)), B, H, 1, D);
                c.p = attn_sdpa_params_default();
                c.p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
                c.ws_bytes = attn_flash_workspace_size(&c.q, &c.k, &c.v);
                c.ws = malloc(c.ws_bytes);
                if (!c.ws) {
                    free(buf);
                    rc = cli_fail("bench decode: out of memory for the workspace");
                    break;
                }
                /* back to back: the machine's state (other load, frequency) alike for both */
                const bench_timing tb = bench_measure(read_stream, &bwc, o.repeats);
                const bench_timing t = bench_measure(run_step, &c, o.repeats);
                free(c.ws);
                free(buf);
                if (c.st) {
                    rc = cli_fail("bench decode: %s", attn_last_error());
                    break;
                }
                const double bw = (double)(bwc.n * sizeof(uint64_t)) / (tb.median_ms * 1e-3) * 1e-9;
                const double bytes = 2.0 * (double)nkv * (double)esz, gbs = bytes / (t.median_ms * 1e-3) * 1e-9;
                if (o.json)
                    printf(
                        "{\"op\":\"decode\",\"impl\":\"flash\",\"dtype\":\"%s\",\"threads\":%d,\"b\":%lld,\"h\":%lld,"
                        "\"hk\":%lld,\"d\":%lld,\"ctx\":%lld,\"cache_bytes\":%.0f,\"ms\":%.5f,\"gbs\":%.3f,\"mem_gbs\":"
                        "%.3f,"
                        "\"mem_fraction\":%.4f}\n",
                        dt ? "bf16" : "f32", T, (long long)B, (long long)H, (long long)HK, (long long)D, (long long)N,
                        bytes, t.median_ms, gbs, bw, bw > 0 ? gbs / bw : 0.0);
                else
                    printf("%-8s %4s %3lld %4lld %4lld %5lld %8lld %10.1f %10.4f %9.2f %9.2f %7.1f%%  (threads %d)\n",
                           "decode", dt ? "bf16" : "f32", (long long)B, (long long)H, (long long)HK, (long long)D,
                           (long long)N, bytes / 1048576.0, t.median_ms, gbs, bw, bw > 0 ? 100.0 * gbs / bw : 0.0, T);
                fflush(stdout);
            }
        }
    }
    free(bwx);
    return rc;
}
