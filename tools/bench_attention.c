/* attn bench attention: attention forward (and backward) for every combination of the shape
 * lists. flops: 4*B*H*Nq*Nk*d forward (half when causal; with a window, 4*B*H*d times the
 * number of (query, key) pairs the window admits), 2.5x that backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"

#define MAX_DIM 1048576
#define VARLEN_MAX 1024

static const char *impls[] = {"sdpa", "flash"};

static void usage(FILE *f) {
    fprintf(f,
            "usage: attn bench attention [--impl NAME[,NAME...]] [--b B] [--h H] [--n N,...]\n"
            "                            [--d D,...] [--causal] [--window W] [--backward] [--threads T,...]\n"
            "                            [--dtype f32,bf16] [--repeats R] [--json]\n"
            "       attn bench attention --varlen N1,N2,... [--h H] [--d D,...] [--causal] [--backward]\n"
            "                            [--threads T,...] [--repeats R] [--json]\n\n"
            "Self-attention Q, K, V [B, H, N, d] for every combination of the lists; medians of R\n"
            "(>= %d) samples after a warmup; GFLOP/s and the fraction of the FMA peak\n"
            "(`attn bench peak`). flops = 4*B*H*N*N*d forward (half when causal), 2.5x that for\n"
            "the backward.\n\n"
            "  --impl       flash (tiled, online softmax) and/or sdpa (the reference: exact N x N math\n"
            "               in double); default flash\n"
            "  --b, --h     batch and heads (default 1 and 8)\n"
            "  --n, --d     sequence lengths and head dimensions (default 1024 and 64)\n"
            "  --causal     causal (top-left) masking\n"
            "  --window W   sliding window: keys within W before (and, without --causal, after)\n"
            "               each query; flops count only the admitted pairs\n"
            "  --backward   also time the backward pass\n"
            "  --dtype      f32 (default) and/or bf16: flash with bf16 Q, K, V, dO and output, float\n"
            "               gradients (peak fraction of `attn bench peak --dtype bf16`, ratio to the\n"
            "               f32 flash row of the same shape and pass when both run)\n"
            "  --threads    thread counts (default: attn's)\n"
            "  --repeats R  timed samples per measurement (default 7)\n"
            "  --json       one JSON object per line\n"
            "  --varlen L   a ragged batch of self-attention sequences of lengths L (comma-separated,\n"
            "               0..%d each, at most %d): flash.varlen, the packed run\n"
            "               (attn_flash_varlen_*, no padding), and flash.padded, the same batch padded\n"
            "               to the longest with a key mask; flops count real tokens' pairs only for both,\n"
            "               so the varlen row's ratio to the padded one is the saving (f32)\n",
            BENCH_MIN_REPEATS, MAX_DIM, VARLEN_MAX);
}

typedef struct att_ctx {
    int flash;
    attn_tensor q, k, v, o, go, dq, dk, dv, lse;
    attn_sdpa_params p;
    void *ws;
    size_t ws_bytes;
    attn_status st;
} att_ctx;

static void run_forward(void *c_) {
    att_ctx *c = c_;
    attn_status st = c->flash ? attn_flash_forward(&c->q, &c->k, &c->v, &c->p, &c->o, &c->lse, c->ws, c->ws_bytes)
                              : attn_sdpa_forward(&c->q, &c->k, &c->v, &c->p, &c->o, NULL, NULL, c->ws, c->ws_bytes);
    if (st) c->st = st;
}
static void run_backward(void *c_) {
    att_ctx *c = c_;
    attn_status st =
        c->flash ? attn_flash_backward(&c->q, &c->k, &c->v, &c->p, &c->o, &c->go, &c->lse, &c->dq, &c->dk, &c->dv,
                                       c->ws, c->ws_bytes)
                 : attn_sdpa_backward(&c->q, &c->k, &c->v, &c->p, &c->go, &c->dq, &c->dk, &c->dv, c->ws, c->ws_bytes);
    if (st) c->st = st;
}

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 11) * 0x1.0p-53 * 2 - 1);
    }
}

/* --impl LIST into use[] (a flag per impls[] entry); 0 or cli_usage_error's code. */
static int parse_impls(const char *list, int *use) {
    memset(use, 0, sizeof(int) * (sizeof impls / sizeof impls[0]));
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    int any = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        size_t k = 0;
        while (k < sizeof impls / sizeof impls[0] && strcmp(tok, impls[k])) k++;
        if (k == sizeof impls / sizeof impls[0])
            return cli_usage_error("bench attention: unknown --impl '%s' (available: sdpa, flash)", tok);
        use[k] = any = 1;
    }
    if (!any) return cli_usage_error("bench attention: --impl needs a name");
    return 0;
}

/* ---- --varlen: the packed batch against the same batch padded ---- */
typedef struct vl_ctx {
    int64_t batch, cu[VARLEN_MAX + 1];
    attn_tensor q, k, v, o, go, dq, dk, dv, lse; /* packed [total, H, D], lse [H, total] */
    att_ctx pad;                                 /* [B, H, Nmax, D] with a key mask */
    attn_sdpa_params p;
    void *ws;
    size_t ws_bytes;
    attn_status st;
} vl_ctx;

static void run_varlen_forward(void *c_) {
    vl_ctx *c = c_;
    attn_status st = attn_flash_varlen_forward(&c->q, &c->k, &c->v, c->cu, c->cu, c->batch, &c->p, &c->o, &c->lse,
                                               c->ws, c->ws_bytes);
    if (st) c->st = st;
}
static void run_varlen_backward(void *c_) {
    vl_ctx *c = c_;
    attn_status st = attn_flash_varlen_backward(&c->q, &c->k, &c->v, c->cu, c->cu, c->batch, &c->p, &c->o, &c->go,
                                                &c->lse, &c->dq, &c->dk, &c->dv, c->ws, c->ws_bytes);
    if (st) c->st = st;
}

/* Lengths from "5,17,128": 0 or cli_usage_error's code. */
static int parse_lengths(const char *list, int64_t *len, int64_t *batch, int64_t *nmax, int64_t *total) {
    char buf[8192];
    if (strlen(list) >= sizeof buf) return cli_usage_error("bench attention: --varlen list too long");
    snprintf(buf, sizeof buf, "%s", list);
    *batch = *nmax = *total = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        const long long x = strtoll(tok, &end, 10);
        if (*end || end == tok || x < 0 || x > MAX_DIM || *batch == VARLEN_MAX)
            return cli_usage_error("bench attention: --varlen wants up to %d lengths in 0..%d, got '%s'", VARLEN_MAX,
                                   MAX_DIM, tok);
        len[(*batch)++] = x;
        *total += x;
        if (x > *nmax) *nmax = x;
    }
    if (*batch == 0 || *nmax == 0) return cli_usage_error("bench attention: --varlen needs a nonzero length");
    return 0;
}

/* Query/key pairs that attention over these lengths admits (4 H D flops each forward). */
static double varlen_pairs(const int64_t *len, int64_t batch, int causal) {
    double pairs = 0;
    for (int64_t s = 0; s < batch; s++)
        pairs += causal ? (double)len[s] * (double)(len[s] + 1) / 2 : (double)len[s] * (double)len[s];
    return pairs;
}

static bench_result vl_report(const bench_opts *o, const char *impl, int pass, int causal, int threads,
                              const int64_t *dims, double flops, double ms, const bench_result *peer) {
    static const char *names[5] = {"b", "h", "tokens", "nmax", "d"};
    static const char *variants[2][2] = {{"varlen forward", "varlen forward causal"},
                                         {"varlen backward", "varlen backward causal"}};
    bench_result r;
    bench_result_init(&r, "attention", impl, threads);
    r.variant = variants[pass][causal];
    for (int i = 0; i < 5; i++) bench_result_dim(&r, names[i], dims[i]);
    bench_result_finish(&r, pass ? 2.5 * flops : flops, ms);
    if (peer) bench_result_ratio(&r, peer);
    bench_print(stdout, &r, o->json);
    fflush(stdout);
    return r;
}

/* Both runs of one head dimension and thread count: padded first, then packed with its ratio. */
static int vl_measure(const bench_opts *o, vl_ctx *c, const int64_t *len, int causal, int backward, int threads,
                      const int64_t *dims) {
    const double flops = 4.0 * (double)dims[1] * (double)dims[4] * varlen_pairs(len, c->batch, causal);
    for (int pass = 0; pass < 1 + backward; pass++) {
        if (pass) { /* the backwards read the forwards' out and lse */
            run_forward(&c->pad);
            run_varlen_forward(c);
        }
        const bench_timing tp = bench_measure(pass ? run_backward : run_forward, &c->pad, o->repeats);
        const bench_timing tv = bench_measure(pass ? run_varlen_backward : run_varlen_forward, c, o->repeats);
        if (c->pad.st || c->st) return cli_fail("bench attention --varlen: %s", attn_last_error());
        const bench_result pr = vl_report(o, "flash.padded", pass, causal, threads, dims, flops, tp.median_ms, NULL);
        vl_report(o, "flash.varlen", pass, causal, threads, dims, flops, tv.median_ms, &pr);
    }
    return 0;
}

/* One buffer for the packed tensors (8 of total H D, lse H total), the padded ones (8 of
 * B H Nmax D, lse B H Nmax) and the padded batch's key mask; views laid over it. */
static float *vl_setup(vl_ctx *c, const int64_t *len, int64_t H, int64_t D, int64_t nmax, int64_t total, uint8_t **mask,
                       attn_btensor *km) {
    const size_t np = (size_t)total * H * D, nd = (size_t)c->batch * H * nmax * D;
    float *buf = malloc(sizeof(float) * (np * 8 + (size_t)(H * total) + nd * 8 + (size_t)(c->batch * H * nmax)));
    *mask = malloc((size_t)(c->batch * nmax));
    if (!buf || !*mask) {
        free(buf);
        free(*mask);
        return NULL;
    }
    fill(buf, np * 8 + (size_t)(H * total) + nd * 8, 42);
    attn_tensor *pv[8] = {&c->q, &c->k, &c->v, &c->o, &c->go, &c->dq, &c->dk, &c->dv};
    attn_tensor *dv[8] = {&c->pad.q, &c->pad.k, &c->pad.v, &c->pad.o, &c->pad.go, &c->pad.dq, &c->pad.dk, &c->pad.dv};
    for (int t = 0; t < 8; t++) {
        *pv[t] = attn_tensor_3d(buf + np * t, total, H, D);
        *dv[t] = attn_tensor_4d(buf + np * 8 + (size_t)(H * total) + nd * t, c->batch, H, nmax, D);
    }
    c->lse = attn_tensor_2d(buf + np * 8, H, total);
    c->pad.lse = attn_tensor_3d(buf + np * 8 + (size_t)(H * total) + nd * 8, c->batch, H, nmax);
    for (int64_t s = 0; s < c->batch; s++) {
        c->cu[s + 1] = c->cu[s] + len[s];
        for (int64_t j = 0; j < nmax; j++) (*mask)[s * nmax + j] = j < len[s];
    }
    *km = attn_btensor_2d(*mask, c->batch, nmax);
    return buf;
}

static int bench_varlen(const bench_opts *o, const char *list, int64_t H, const int64_t *ds, int nd, int causal,
                        int backward, int other) {
    static vl_ctx c; /* cu holds VARLEN_MAX + 1 offsets */
    if (other) return cli_usage_error("bench attention: --varlen runs f32 without --window");
    int64_t len[VARLEN_MAX], nmax = 0, total = 0;
    int st = parse_lengths(list, len, &c.batch, &nmax, &total);
    if (st) return st;
    bench_print_header(stdout, o->json);
    for (int id = 0; id < nd; id++)
        for (int it = 0; it < o->nthreads; it++) {
            const int64_t D = ds[id], dims[5] = {c.batch, H, total, nmax, D};
            uint8_t *mask;
            attn_btensor km;
            bench_set_threads(o->threads[it]);
            float *buf = vl_setup(&c, len, H, D, nmax, total, &mask, &km);
            if (!buf) return cli_fail("bench attention --varlen: out of memory");
            c.p = attn_sdpa_params_default();
            c.p.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
            c.pad.p = c.p;
            c.pad.p.key_mask = &km;
            c.pad.flash = 1;
            const size_t a = attn_flash_varlen_workspace_size(&c.q, &c.k, &c.v, c.cu, c.cu, c.batch),
                         b = attn_flash_workspace_size(&c.pad.q, &c.pad.k, &c.pad.v);
            c.ws_bytes = c.pad.ws_bytes = a > b ? a : b;
            c.ws = c.pad.ws = malloc(c.ws_bytes);
            c.st = c.pad.st = ATTN_OK;
            st = c.ws ? vl_measure(o, &c, len, causal, backward, o->threads[it], dims)
                      : cli_fail("bench attention --varlen: out of memory for the workspace");
            free(c.ws);
            free(buf);
            free(mask);
            if (st) return st;
        }
    return 0;
}

int bench_attention_cmd(int argc, char **argv) {
    bench_opts o;
    bench_opts_init(&o);
    int64_t bs[BENCH_MAX_LIST] = {1}, hs[BENCH_MAX_LIST] = {8}, ns[BENCH_MAX_LIST] = {1024}, ds[BENCH_MAX_LIST] = {64};
    int nb = 1, nh = 1, nn = 1, nd = 1, causal = 0, backward = 0;
    int64_t window = -1;
    int use[sizeof impls / sizeof impls[0]] = {0, 1};
    const char *impl_list = NULL, *dtype_list = NULL, *varlen_list = NULL;
    cli_opt opts[] = {
        BENCH_COMMON_OPTS(&o),
        CLI_STRING("--impl", &impl_list),
        CLI_LIST("--b", bs, &nb, BENCH_MAX_LIST, 1, 4096),
        CLI_LIST("--h", hs, &nh, BENCH_MAX_LIST, 1, 4096),
        CLI_LIST("--n", ns, &nn, BENCH_MAX_LIST, 1, MAX_DIM),
        CLI_LIST("--d", ds, &nd, BENCH_MAX_LIST, 1, 512),
        CLI_FLAG("--causal", &causal),
        CLI_INT("--window", &window, 0, MAX_DIM),
        CLI_FLAG("--backward", &backward),
        CLI_STRING("--dtype", &dtype_list),
        CLI_STRING("--varlen", &varlen_list),
        CLI_END,
    };
    int parsed = cli_parse("bench attention", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (impl_list && (parsed = parse_impls(impl_list, use))) return parsed;
    int want_f32, want_bf16;
    if ((parsed = bench_parse_dtypes("bench attention", dtype_list, &want_f32, &want_bf16))) return parsed;
    if (varlen_list) return bench_varlen(&o, varlen_list, hs[0], ds, nd, causal, backward, want_bf16 || window >= 0);
    bench_print_header(stdout, o.json);
    for (int ib = 0; ib < nb; ib++)
        for (int ih = 0; ih < nh; ih++)
            for (int in = 0; in < nn; in++)
                for (int id = 0; id < nd; id++)
                    for (int it = 0; it < o.nthreads; it++)
                        for (size_t im = 0; im < sizeof impls / sizeof impls[0]; im++) {
                            if (!use[im]) continue;
                            const int64_t B = bs[ib], H = hs[ih], N = ns[in], D = ds[id];
                            const size_t n = (size_t)B * H * N * D;
                            bench_set_threads(o.threads[it]);
                            float *buf = malloc(sizeof(float) * (n * 8 + (size_t)(B * H * N)));
                            if (!buf)
                                return cli_fail("bench attention: out of memory for B=%lld H=%lld N=%lld d=%lld",
                                                (long long)B, (long long)H, (long long)N, (long long)D);
                            fill(buf, n * 8, 42);
                            att_ctx c;
                            memset(&c, 0, sizeof c);
                            attn_tensor *views[8] = {&c.q, &c.k, &c.v, &c.o, &c.go, &c.dq, &c.dk, &c.dv};
                            for (int t = 0; t < 8; t++) *views[t] = attn_tensor_4d(buf + n * t, B, H, N, D);
                            c.lse = attn_tensor_3d(buf + n * 8, B, H, N);
                            c.flash = !strcmp(impls[im], "flash");
                            c.p = attn_sdpa_params_default();
                            c.p.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
                            if (window >= 0) {
                                c.p.window_left = window;
                                c.p.window_right = causal ? 0 : window;
                            }
                            c.ws_bytes = c.flash ? attn_flash_workspace_size(&c.q, &c.k, &c.v)
                                                 : attn_sdpa_workspace_size(&c.q, &c.k, &c.v);
                            if (c.flash && want_bf16) { /* the bf16 views' need (V's pairs) may be larger */
                                const attn_tensor hv = attn_tensor_4d_typed(NULL, ATTN_TYPE_BF16, B, H, N, D);
                                const size_t hb = attn_flash_workspace_size(&hv, &hv, &hv);
                                c.ws_bytes = hb > c.ws_bytes ? hb : c.ws_bytes;
                            }
                            c.ws = malloc(c.ws_bytes);
                            if (!c.ws) {
                                free(buf);
                                return cli_fail("bench attention: out of memory for the workspace");
                            }
                            double flops = 4.0 * B * H * (double)N * N * D * (causal ? 0.5 : 1.0);
                            if (window >= 0) { /* the pairs the window admits */
                                double pairs = 0;
                                for (int64_t i = 0; i < N; i++) {
                                    const int64_t lo = i - window < 0 ? 0 : i - window;
                                    const int64_t hi = causal ? i : (i + window < N - 1 ? i + window : N - 1);
                                    pairs += (double)(hi - lo + 1);
                                }
                                flops = 4.0 * B * H * D * pairs;
                            }
                            bench_result f32_res[2];
                            int have_f32 = 0;
                            for (int dt = 0; dt < 2; dt++) {
                                if (dt == 0 ? !want_f32 : !want_bf16 || !c.flash) continue;
                                att_ctx cc = c;
                                uint16_t *h = NULL;
                                if (dt) { /* bf16 Q, K, V and output; lse stays float */
                                    h = malloc(sizeof(uint16_t) * n * 5);
                                    if (!h) {
                                        free(c.ws);
                                        free(buf);
                                        return cli_fail("bench attention: out of memory for bf16 copies");
                                    }
                                    attn_convert(buf, ATTN_TYPE_F32, h, ATTN_TYPE_BF16, n * 5);
                                    attn_tensor *tv[5] = {&cc.q, &cc.k, &cc.v, &cc.o, &cc.go};
                                    for (int t = 0; t < 5; t++)
                                        *tv[t] = attn_tensor_4d_typed(h + n * t, ATTN_TYPE_BF16, B, H, N, D);
                                }
                                for (int pass = 0; pass < 1 + backward; pass++) {
                                    if (pass) run_forward(&cc); /* the backward reads the forward's out and lse */
                                    bench_timing t = bench_measure(pass ? run_backward : run_forward, &cc, o.repeats);
                                    if (cc.st != ATTN_OK) {
                                        free(h);
                                        free(c.ws);
                                        free(buf);
                                        return cli_fail("bench attention: %s", attn_last_error());
                                    }
                                    bench_result r;
                                    bench_result_init(&r, "attention", dt ? "flash.bf16" : impls[im], o.threads[it]);
                                    r.bf16 = dt;
                                    static const char *variants[2][2][2] = {
                                        {{"forward", "forward causal"}, {"forward window", "forward causal window"}},
                                        {{"backward", "backward causal"},
                                         {"backward window", "backward causal window"}}};
                                    r.variant = variants[pass][window >= 0][causal];
                                    bench_result_dim(&r, "b", B);
                                    bench_result_dim(&r, "h", H);
                                    bench_result_dim(&r, "n", N);
                                    bench_result_dim(&r, "d", D);
                                    if (window >= 0) bench_result_dim(&r, "window", window);
                                    bench_result_finish(&r, pass ? 2.5 * flops : flops, t.median_ms);
                                    if (!dt && c.flash) {
                                        f32_res[pass] = r;
                                        have_f32 = 1;
                                    }
                                    if (dt && have_f32) bench_result_ratio(&r, &f32_res[pass]);
                                    bench_print(stdout, &r, o.json);
                                    fflush(stdout);
                                }
                                free(h);
                            }
                            free(c.ws);
                            free(buf);
                        }
    return 0;
}
