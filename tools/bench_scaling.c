/* attn bench scaling: time and extra memory of each attention variant as the sequence grows, for
 * B x H heads of dimension d (self-attention), forward and optionally backward; a table, JSON
 * lines and a log-log SVG plot. Variants are rows of one table below, each an attention kind of
 * the library's table (src/attention/kinds.c) with its options: a kind this build lacks is
 * reported and skipped. The kinds are called directly (attn_attention_forward / _backward of
 * attn/attention.h), without attn_mha's projections.
 *
 * flops counted per variant (forward; backward 2.5x for softmax kinds, 2x for the others):
 *   softmax kinds   4 B H d x (the (query, key) pairs admitted)
 *   linear          4 B H N d dv                (phi(K)^T V and phi(Q) S)
 *   performer       4 B H N m d + 4 B H N m dv  (the two feature maps, then linear attention)
 * "extra" memory is what a variant needs beyond Q, K, V and O: the kind's workspace and the
 * per-row statistics a backward reads (and the global mask for local+global). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"
#include "safe_io.h"

#define MAX_N 1048576

/* How a variant's work is counted (see the top of the file). */
typedef enum cost_model {
    COST_PAIRS,   /* softmax: 4 B H d per admitted (query, key) pair; backward 2.5x */
    COST_LINEAR,  /* linear attention: 4 B H N d dv; backward 2x */
    COST_FEATURES /* Performer: 4 B H N m (d + dv); backward 2x */
} cost_model;

typedef struct variant {
    const char *name; /* --impl name */
    cost_model cost;
    const char *kind; /* attention kind of the library's table */
    int64_t window;   /* softmax kinds with a band */
    int64_t globals;  /* local_global: global tokens, spread evenly */
    int64_t features; /* performer */
} variant;

static const variant variants[] = {
    {"flash", COST_PAIRS, "flash", -1, 0, 0},
    {"window", COST_PAIRS, "window", 256, 0, 0},
    {"local_global", COST_PAIRS, "local_global", 256, 16, 0},
    {"linear", COST_LINEAR, "linear", -1, 0, 0},
    {"performer", COST_FEATURES, "performer", -1, 0, 256},
};
enum { NV = (int)(sizeof variants / sizeof variants[0]) };

static void usage(FILE *f) {
    fprintf(f, "usage: attn bench scaling [--impl NAME[,NAME...]] [--n N,...] [--b B] [--h H] [--d D]\n"
               "                          [--backward] [--budget S] [--threads T,...] [--repeats R]\n"
               "                          [--svg FILE [--force]] [--json]\n\n"
               "Time and extra memory of each attention variant for B x H heads of dimension d as N\n"
               "grows (self-attention, forward; --backward adds the backward): medians of R timed\n"
               "calls, GFLOP/s and the fraction of the FMA peak, then the N from which each variant\n"
               "beats exact flash attention. Variants (--impl, default all):\n"
               "  flash         exact softmax attention, tiled\n"
               "  window        sliding window, 256 keys each side\n"
               "  local_global  window 256 plus 16 global tokens (Longformer)\n"
               "  linear        linear attention, elu + 1 features (Katharopoulos 2020)\n"
               "  performer     FAVOR+ with 256 orthogonal random features (Choromanski 2021)\n\n"
               "  --n          sequence lengths (default 256,512,...,65536)\n"
               "  --b, --h, --d batch, heads, head dimension (default 1, 8, 64)\n"
               "  --budget S   skip a measurement predicted (from the previous N) to take more than S\n"
               "               seconds per call (default 20)\n"
               "  --svg FILE   also write the times as a log-log SVG plot (an existing FILE that is not an\n"
               "               SVG is replaced only with --force)\n"
               "  --threads    thread counts (default: attn's)\n"
               "  --repeats R  timed calls per measurement (default 7; calls over 20 ms: 3)\n"
               "  --json       one JSON object per line (impl, shape {b, h, n, d}, threads, ms,\n"
               "               extra_bytes, gflops, peak_fraction)\n");
}

typedef struct run_ctx {
    attn_attention_config cfg;
    attn_tensor q, k, v, o, go, dq, dk, dv;
    attn_sdpa_params p;
    const attn_btensor *global_mask; /* &gm or NULL */
    attn_btensor gm;
    float *stats;
    void *ws;
    size_t ws_bytes;
    attn_status st;
} run_ctx;

static void run_fwd(void *c_) {
    run_ctx *c = c_;
    attn_status st = attn_attention_forward(&c->cfg, &c->q, &c->k, &c->v, &c->p, c->global_mask, &c->o, c->stats, c->ws,
                                            c->ws_bytes);
    if (st) c->st = st;
}
static void run_bwd(void *c_) {
    run_ctx *c = c_;
    attn_status st = attn_attention_backward(&c->cfg, &c->q, &c->k, &c->v, &c->p, c->global_mask, &c->o, &c->go,
                                             c->stats, &c->dq, &c->dk, &c->dv, c->ws, c->ws_bytes);
    if (st) c->st = st;
}

/* Median per-call ms: bench_measure for short calls; for long ones one warmup call and R timed. */
static double time_call(bench_fn fn, void *ctx, int repeats, int explicit_repeats) {
    double t0 = bench_now();
    fn(ctx);
    const double first = bench_now() - t0;
    if (first < 0.02) return bench_measure(fn, ctx, repeats).median_ms;
    const int r = explicit_repeats ? repeats : 3;
    double ms[64];
    const int n = r < 64 ? r : 64;
    for (int i = 0; i < n; i++) {
        t0 = bench_now();
        fn(ctx);
        ms[i] = (bench_now() - t0) * 1e3;
    }
    return bench_median(ms, n);
}

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 11) * 0x1.0p-53 * 2 - 1);
    }
}

/* Forward flops of a variant (see the top of the file). */
static double variant_flops(const variant *v, const uint8_t *global, int64_t B, int64_t H, int64_t N, int64_t d) {
    if (v->cost == COST_LINEAR) return 4.0 * B * H * (double)N * d * d;
    if (v->cost == COST_FEATURES) return 4.0 * B * H * (double)N * v->features * (d + d);
    if (v->window < 0) return 4.0 * B * H * (double)N * N * d;
    double pairs = 0;
    int64_t g = 0;
    for (int64_t i = 0; i < N; i++) g += global ? global[i] : 0;
    for (int64_t i = 0; i < N; i++) {
        if (global && global[i]) {
            pairs += (double)N;
            continue;
        }
        const int64_t lo = i - v->window < 0 ? 0 : i - v->window, hi = i + v->window < N - 1 ? i + v->window : N - 1;
        int64_t band = hi - lo + 1, outside = g;
        for (int64_t j = lo; j <= hi && global; j++) outside -= global[j];
        pairs += (double)(band + outside);
    }
    return 4.0 * B * H * d * pairs;
}

typedef struct point {
    int vi, threads, pass;
    int64_t n;
    double ms;
} point;

/* Log-log plot of ms against N, one polyline per (variant, thread count, pass). */
static int write_svg(const char *path, const point *pts, int np, int64_t B, int64_t H, int64_t d, int backward) {
    safe_file sf;
    FILE *f = safe_fopen(&sf, path, SAFE_KIND_SVG);
    if (!f) return -1;
    double nmin = INFINITY, nmax = 0, tmin = INFINITY, tmax = 0;
    for (int i = 0; i < np; i++) {
        nmin = fmin(nmin, (double)pts[i].n), nmax = fmax(nmax, (double)pts[i].n);
        tmin = fmin(tmin, pts[i].ms), tmax = fmax(tmax, pts[i].ms);
    }
    const double W = 780, Hh = 460, L = 80, R = 230, T = 50, Bm = 60;
    const double lx0 = floor(log10(nmin)), lx1 = ceil(log10(nmax)), ly0 = floor(log10(tmin)), ly1 = ceil(log10(tmax));
    const double sx = (W - L - R) / (lx1 > lx0 ? lx1 - lx0 : 1), sy = (Hh - T - Bm) / (ly1 > ly0 ? ly1 - ly0 : 1);
    static const char *colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"};
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
            "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">attention %s time vs sequence length "
            "(B=%lld, H=%lld, d=%lld)</text>\n",
            W, Hh, (W - R + L) / 2, backward ? "forward + backward" : "forward", (long long)B, (long long)H,
            (long long)d);
    (void)backward;
    for (double e = lx0; e <= lx1 + 1e-9; e++) { /* decades on x */
        const double x = L + (e - lx0) * sx;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#ddd\"/>\n", x, T, x, Hh - Bm);
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.0f</text>\n", x, Hh - Bm + 16, pow(10, e));
    }
    for (double e = ly0; e <= ly1 + 1e-9; e++) {
        const double y = Hh - Bm - (e - ly0) * sy;
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y, W - R, y);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6, y + 4, pow(10, e));
    }
    fprintf(f,
            "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n"
            "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">sequence length N (log scale)</text>\n"
            "<text transform=\"translate(18 %.0f) rotate(-90)\" text-anchor=\"middle\">ms per call (log scale)"
            "</text>\n",
            L, T, W - L - R, Hh - T - Bm, (W - R + L) / 2, Hh - 18, (Hh - Bm + T) / 2);
    int series = 0;
    for (int i = 0; i < np; i++) {
        int first = 1;
        for (int j = 0; j < i; j++)
            if (pts[j].vi == pts[i].vi && pts[j].threads == pts[i].threads && pts[j].pass == pts[i].pass) first = 0;
        if (!first) continue;
        const char *col = colours[(pts[i].vi + NV * (pts[i].threads > 1)) % 7]; /* backward: dashed */
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col,
                pts[i].pass ? " stroke-dasharray=\"6 4\"" : "");
        for (int j = i; j < np; j++)
            if (pts[j].vi == pts[i].vi && pts[j].threads == pts[i].threads && pts[j].pass == pts[i].pass)
                fprintf(f, "%.1f,%.1f ", L + (log10((double)pts[j].n) - lx0) * sx,
                        Hh - Bm - (log10(pts[j].ms) - ly0) * sy);
        fprintf(f, "\"/>\n");
        for (int j = i; j < np; j++)
            if (pts[j].vi == pts[i].vi && pts[j].threads == pts[i].threads && pts[j].pass == pts[i].pass)
                fprintf(f,
                        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s N=%lld: %.3g ms</title>"
                        "</circle>\n",
                        L + (log10((double)pts[j].n) - lx0) * sx, Hh - Bm - (log10(pts[j].ms) - ly0) * sy, col,
                        variants[pts[j].vi].name, (long long)pts[j].n, pts[j].ms);
        const double ly = T + 10 + 18 * series;
        fprintf(f,
                "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                "<text x=\"%.0f\" y=\"%.0f\">%s%s, %d thread%s</text>\n",
                W - R + 10, ly, W - R + 34, ly, col, pts[i].pass ? " stroke-dasharray=\"6 4\"" : "", W - R + 40, ly + 4,
                variants[pts[i].vi].name, pts[i].pass ? " bwd" : "", pts[i].threads, pts[i].threads == 1 ? "" : "s");
        series++;
    }
    fprintf(f, "</svg>\n");
    return safe_fclose(&sf, f);
}

/* The measurements' settings, and what they have found so far. */
typedef struct scaling_ctx {
    bench_opts o;
    int64_t B, H, D;
    int backward, explicit_repeats;
    double budget;
    point *pts;
    int np;
} scaling_ctx;

/* One pass (0 forward, 1 backward) of variant vi at N on the prepared c: skipped when the previous
 * N predicts it over the budget, else timed, printed and recorded. 0, or 1 (printed). */
static int measure_pass(scaling_ctx *s, run_ctx *c, int vi, int it, int64_t N, int pass, double flops, double extra,
                        double *last_ms, int64_t last_n) {
    const variant *va = &variants[vi];
    const int threads = s->o.threads[it];
    if (last_n && last_ms[pass] > 0) { /* predicted from the previous N: quadratic for flash */
        const double r = (double)N / (double)last_n, grow = va->cost == COST_PAIRS && va->window < 0 ? r * r : r;
        if (last_ms[pass] * grow > s->budget * 1e3) {
            if (!s->o.json)
                printf("%-13s %-9s %7d %8lld %12s  (predicted %.0f s > --budget %g s)\n", va->name,
                       pass ? "backward" : "forward", threads, (long long)N, "skipped", last_ms[pass] * grow / 1e3,
                       s->budget);
            return 0;
        }
    }
    if (pass) run_fwd(c);
    const double ms = time_call(pass ? run_bwd : run_fwd, c, s->o.repeats, s->explicit_repeats);
    if (c->st) return cli_fail("bench scaling: %s N=%lld: %s", va->name, (long long)N, attn_last_error());
    last_ms[pass] = ms;
    const double fl = pass ? (va->cost == COST_PAIRS ? 2.5 : 2.0) * flops : flops;
    bench_result r;
    bench_result_init(&r, "scaling", va->name, threads);
    r.variant = pass ? "backward" : "forward";
    bench_result_dim(&r, "b", s->B);
    bench_result_dim(&r, "h", s->H);
    bench_result_dim(&r, "n", N);
    bench_result_dim(&r, "d", s->D);
    bench_result_finish(&r, fl, ms);
    if (s->o.json) {
        printf("{\"op\": \"scaling\", \"variant\": \"%s\", \"impl\": \"%s\", \"shape\": {\"b\": %lld, "
               "\"h\": %lld, \"n\": %lld, \"d\": %lld}, \"threads\": %d, \"ms\": %.6g, "
               "\"extra_bytes\": %.0f, \"gflops\": %.6g, \"peak_fraction\": %.4f}\n",
               r.variant, va->name, (long long)s->B, (long long)s->H, (long long)N, (long long)s->D, threads, ms, extra,
               r.gflops, r.peak_fraction);
    } else {
        printf("%-13s %-9s %7d %8lld %12.3f %12.2f %10.1f %5.0f%%\n", va->name, r.variant, threads, (long long)N, ms,
               extra / (1 << 20), r.gflops, 100 * r.peak_fraction);
    }
    fflush(stdout);
    s->pts[s->np++] = (point){vi, threads, pass, N, ms};
    return 0;
}

/* Variant vi at sequence length N with thread count it: buffers, workspace, the passes. 0, or 1. */
static int measure_n(scaling_ctx *s, int vi, int it, int64_t N, double *last_ms, int64_t last_n) {
    const variant *va = &variants[vi];
    const int64_t B = s->B, H = s->H, D = s->D;
    int rc = 0;
    bench_set_threads(s->o.threads[it]);
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = attn_attention_config_default();
    attn_attention_kind_from_name(va->kind, &c.cfg.kind);
    if (va->window >= 0) c.cfg.window = va->window;
    /* performer: the kind's default of 256 features (va->features) */
    c.p = attn_sdpa_params_default();
    const size_t n = (size_t)B * H * N * D;
    float *buf = malloc(sizeof(float) * n * 8);
    uint8_t *global = va->globals ? calloc((size_t)(B * N), 1) : NULL;
    if (!buf || (va->globals && !global)) {
        free(buf);
        free(global);
        return cli_fail("bench scaling: out of memory for B=%lld H=%lld N=%lld d=%lld", (long long)B, (long long)H,
                        (long long)N, (long long)D);
    }
    fill(buf, n * 8, 42);
    attn_tensor *views[8] = {&c.q, &c.k, &c.v, &c.o, &c.go, &c.dq, &c.dk, &c.dv};
    for (int t = 0; t < 8; t++) *views[t] = attn_tensor_4d(buf + n * (size_t)t, B, H, N, D);
    for (int64_t b = 0; b < B && global; b++)
        for (int64_t g = 0; g < va->globals && g < N; g++) global[b * N + g * N / va->globals] = 1;
    if (global) {
        c.gm = attn_btensor_2d(global, B, N);
        c.global_mask = &c.gm;
    }
    const size_t stats = (size_t)(B * H * N * attn_attention_kind_stats_per_row(c.cfg.kind));
    c.ws_bytes = attn_attention_workspace_size(&c.cfg, &c.q, &c.k, &c.v, &c.p, c.global_mask);
    c.stats = stats ? malloc(stats * sizeof(float)) : NULL;
    c.ws = malloc(c.ws_bytes ? c.ws_bytes : 1);
    const double extra = (double)c.ws_bytes + (double)stats * sizeof(float) + (global ? (double)(B * N) : 0);
    const double flops = variant_flops(va, global, B, H, N, D);
    for (int pass = 0; pass < 1 + s->backward && !rc && (c.ws && (!stats || c.stats)); pass++)
        rc = measure_pass(s, &c, vi, it, N, pass, flops, extra, last_ms, last_n);
    if (!c.ws || (stats && !c.stats)) rc = cli_fail("bench scaling: out of memory for the workspace");
    free(c.ws);
    free(c.stats);
    free(buf);
    free(global);
    return rc;
}

/* The smallest N from which each variant's forward beats flash's, per thread count. */
static void print_crossovers(const scaling_ctx *s, const int *use, const int *have) {
    const point *pts = s->pts;
    const int np = s->np;
    for (int vi = 1; vi < NV; vi++) {
        if (!use[vi] || !have[vi]) continue;
        for (int it = 0; it < s->o.nthreads; it++) {
            int64_t cross = -1;
            for (int i = np - 1; i >= 0; i--) {
                if (pts[i].vi != vi || pts[i].threads != s->o.threads[it] || pts[i].pass) continue;
                double flash_ms = -1;
                for (int j = 0; j < np; j++)
                    if (pts[j].vi == 0 && pts[j].threads == pts[i].threads && pts[j].n == pts[i].n && !pts[j].pass)
                        flash_ms = pts[j].ms;
                if (flash_ms < 0) continue;
                if (pts[i].ms < flash_ms)
                    cross = pts[i].n;
                else
                    break;
            }
            if (cross > 0)
                printf("%s beats flash from N = %lld on (%d thread%s)\n", variants[vi].name, (long long)cross,
                       s->o.threads[it], s->o.threads[it] == 1 ? "" : "s");
            else
                printf("%s does not beat flash at the N measured (%d thread%s)\n", variants[vi].name, s->o.threads[it],
                       s->o.threads[it] == 1 ? "" : "s");
        }
    }
}

/* --impl into use[NV] (all when NULL). 0, or 2 (printed). */
static int parse_impl(const char *impl_list, int *use) {
    for (int i = 0; i < NV; i++) use[i] = impl_list == NULL;
    if (!impl_list) return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", impl_list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int k = 0;
        while (k < NV && strcmp(tok, variants[k].name)) k++;
        if (k == NV)
            return cli_usage_error("bench scaling: unknown --impl '%s' (flash, window, local_global, linear, "
                                   "performer)",
                                   tok);
        use[k] = 1;
    }
    return 0;
}

int bench_scaling_cmd(int argc, char **argv) {
    scaling_ctx s;
    memset(&s, 0, sizeof s);
    bench_opts_init(&s.o);
    int64_t ns[BENCH_MAX_LIST];
    int nn = 0, force = 0;
    s.B = 1, s.H = 8, s.D = 64, s.budget = 20;
    for (int64_t n = 256; n <= 65536; n *= 2) ns[nn++] = n;
    const char *impl_list = NULL, *svg = NULL;
    cli_opt opts[] = {
        BENCH_COMMON_OPTS(&s.o),
        CLI_STRING("--impl", &impl_list),
        CLI_LIST("--n", ns, &nn, BENCH_MAX_LIST, 16, MAX_N),
        CLI_INT("--b", &s.B, 1, 4096),
        CLI_INT("--h", &s.H, 1, 4096),
        CLI_INT("--d", &s.D, 1, 512),
        CLI_FLAG("--backward", &s.backward),
        CLI_DOUBLE("--budget", &s.budget, 0.001, 1e6),
        CLI_STRING_NONEMPTY("--svg", &svg),
        CLI_FLAG("--force", &force),
        CLI_END,
    };
    int parsed = cli_parse("bench scaling", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    /* checked before the (long) measurements, and again when written (safe_fopen) */
    safe_set_inputs(NULL, 0, force);
    if (svg && safe_out_check("bench scaling", "--svg", svg, NULL, 0, SAFE_KIND_SVG, force)) return 1;
    s.explicit_repeats = cli_seen(opts, "--repeats");
    int use[NV], have[NV];
    if ((parsed = parse_impl(impl_list, use))) return parsed;
    /* kinds this build has */
    for (int i = 0; i < NV; i++) {
        attn_attention_kind kind;
        have[i] = attn_attention_kind_from_name(variants[i].kind, &kind) == ATTN_OK;
        if (use[i] && !have[i] && !s.o.json)
            printf("%s: attention kind '%s' is not in this build, skipped\n", variants[i].name, variants[i].kind);
    }
    s.pts = calloc((size_t)(NV * nn * s.o.nthreads * 2 + 1), sizeof *s.pts);
    if (!s.pts) return cli_fail("bench scaling: out of memory");
    int rc = 0;
    if (!s.o.json)
        printf("%-13s %-9s %7s %8s %12s %12s %10s %6s\n", "impl", "pass", "threads", "N", "ms", "extra MB", "GFLOP/s",
               "peak");
    for (int it = 0; it < s.o.nthreads && !rc; it++)
        for (int vi = 0; vi < NV && !rc; vi++) {
            if (!use[vi] || !have[vi]) continue;
            double last_ms[2] = {0, 0};
            int64_t last_n = 0;
            for (int in = 0; in < nn && !rc; in++) {
                rc = measure_n(&s, vi, it, ns[in], last_ms, last_n);
                last_n = ns[in];
            }
        }
    if (!rc && !s.o.json && use[0] && have[0]) print_crossovers(&s, use, have);
    if (!rc && svg && s.np) {
        if (write_svg(svg, s.pts, s.np, s.B, s.H, s.D, s.backward))
            rc = cli_fail("bench scaling: cannot write '%s': %s", svg, attn_last_error());
        else if (!s.o.json)
            printf("plot written to %s\n", svg);
    }
    free(s.pts);
    return rc;
}
