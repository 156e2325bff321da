/* Shared benchmark infrastructure (see bench_common.h). */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#ifdef _OPENMP
#include <omp.h>
#endif

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- timing ------------------------------------------------------------------------------ */

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : (a > b ? 1 : 0);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void *bench_alloc_lines(size_t bytes) {
    const size_t r = (bytes + 63) & ~(size_t)63;
    return r < bytes ? NULL : aligned_alloc(64, r ? r : 64);
}

bench_timing bench_measure(bench_fn fn, void *ctx, int repeats) {
    bench_timing t = {0};
    if (repeats < BENCH_MIN_REPEATS) repeats = BENCH_MIN_REPEATS;
    /* warmup: caches, page faults, thread pools, CPU clocks */
    int64_t calls = 0;
    double t0 = bench_now(), el;
    do {
        fn(ctx);
        calls++;
        el = bench_now() - t0;
    } while (el < BENCH_WARMUP_SECONDS);
    double per_call = el / (double)calls;
    int64_t iters = (int64_t)ceil(BENCH_SAMPLE_SECONDS / (per_call > 1e-9 ? per_call : 1e-9));
    if (iters < 1) iters = 1;
    double *ms = malloc((size_t)repeats * sizeof *ms);
    if (!ms) return t;
    for (int r = 0; r < repeats; r++) {
        double s = bench_now();
        for (int64_t i = 0; i < iters; i++) fn(ctx);
        ms[r] = (bench_now() - s) * 1e3 / (double)iters;
    }
    t.repeats = repeats;
    t.iters = iters;
    t.min_ms = t.max_ms = ms[0];
    for (int r = 1; r < repeats; r++) {
        if (ms[r] < t.min_ms) t.min_ms = ms[r];
        if (ms[r] > t.max_ms) t.max_ms = ms[r];
    }
    t.median_ms = bench_median(ms, repeats);
    free(ms);
    return t;
}

/* ---- options ----------------------------------------------------------------------------- */

void bench_opts_init(bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->threads[0] = attn_get_num_threads();
    o->nthreads = 1;
    o->repeats = 7;
    o->json = 0;
}

void bench_set_threads(int t) { attn_set_num_threads(t); }

/* ---- results ----------------------------------------------------------------------------- */

void bench_result_init(bench_result *r, const char *op, const char *impl, int threads) {
    memset(r, 0, sizeof *r);
    r->op = op;
    r->impl = impl;
    r->threads = threads;
    r->ratio = NAN;
}

void bench_result_dim(bench_result *r, const char *name, int64_t value) {
    if (r->ndims >= BENCH_MAX_DIMS) return;
    r->dim_names[r->ndims] = name;
    r->dims[r->ndims++] = value;
}

void bench_result_finish(bench_result *r, double flops, double ms) {
    r->ms = ms;
    r->gflops = ms > 0 ? flops / (ms * 1e6) : 0.0;
    const double peak = r->bf16 ? bench_peak_gflops_bf16_results(r->threads) : bench_peak_gflops(r->threads);
    r->peak_fraction = peak > 0 ? r->gflops / peak : 0.0;
}

void bench_result_ratio(bench_result *r, const bench_result *peer) {
    r->ratio = peer->gflops > 0 ? r->gflops / peer->gflops : NAN;
    r->peer = peer->impl;
}

static void shape_text(const bench_result *r, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < r->ndims && used < len; d++)
        used +=
            (size_t)snprintf(buf + used, len - used, "%s%s=%lld", d ? " " : "", r->dim_names[d], (long long)r->dims[d]);
}

/* JSON string (the names used here are plain identifiers, but stay correct for anything). */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, const char *fmt, double v) {
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

void bench_print_header(FILE *f, int json) {
    if (json) return;
    fprintf(f, "%-26s %-9s %-30s %7s %11s %10s %7s %7s\n", "op", "impl", "shape", "threads", "ms", "GFLOP/s", "peak",
            "ratio");
    fflush(f);
}

void bench_print(FILE *f, const bench_result *r, int json) {
    if (json) {
        fputs("{\"op\":", f);
        json_str(f, r->op);
        if (r->variant) {
            fputs(",\"variant\":", f);
            json_str(f, r->variant);
        }
        fputs(",\"impl\":", f);
        json_str(f, r->impl);
        fputs(",\"shape\":{", f);
        for (int d = 0; d < r->ndims; d++) {
            if (d) fputc(',', f);
            json_str(f, r->dim_names[d]);
            fprintf(f, ":%lld", (long long)r->dims[d]);
        }
        fprintf(f, "},\"threads\":%d,\"ms\":", r->threads);
        json_num(f, "%.6g", r->ms);
        fputs(",\"gflops\":", f);
        json_num(f, "%.6g", r->gflops);
        fputs(",\"peak_fraction\":", f);
        json_num(f, "%.4f", r->peak_fraction);
        if (isfinite(r->ratio)) {
            fputs(",\"ratio\":", f);
            json_num(f, "%.4f", r->ratio);
            if (r->peer) {
                fputs(",\"peer\":", f);
                json_str(f, r->peer);
            }
        }
        fputs("}\n", f);
    } else {
        char op[64], shape[160], ratio[32];
        if (r->variant)
            snprintf(op, sizeof op, "%s.%s", r->op, r->variant);
        else
            snprintf(op, sizeof op, "%s", r->op);
        shape_text(r, shape, sizeof shape);
        if (isfinite(r->ratio))
            snprintf(ratio, sizeof ratio, "%.3f", r->ratio);
        else
            snprintf(ratio, sizeof ratio, "-");
        fprintf(f, "%-26s %-9s %-30s %7d %11.5g %10.2f %6.1f%% %7s\n", op, r->impl, shape, r->threads, r->ms, r->gflops,
                100.0 * r->peak_fraction, ratio);
    }
    fflush(f);
}

/* ---- peak -------------------------------------------------------------------------------- */

#define PEAK_CACHE 1025
/* kinds: 0 the FMA loop, 1 vdpbf16ps, 2 AMX tiles */
enum { PEAK_FMA, PEAK_DPBF16, PEAK_AMX, PEAK_KINDS };
static double peak_cache[PEAK_KINDS][PEAK_CACHE], peak_ms[PEAK_KINDS][PEAK_CACHE];
static int peak_chains[PEAK_KINDS], peak_lanes[PEAK_KINDS];
static attn_isa peak_isa;
static volatile float peak_sink; /* keeps the loops' results alive */

/* The FMA loop of the ISA the kernels run (a forced ISA's fractions are of its own peak). */
static float peak_loop(int kind, int64_t iters, int *chains, int *lanes, attn_isa *isa) {
    static const attn_compute_unit units[PEAK_KINDS] = {ATTN_UNIT_FMA, ATTN_UNIT_DPBF16PS, ATTN_UNIT_AMX};
    *isa = attn_active_isa();
    return attn_peak_loop(units[kind], iters, chains, lanes);
}

/* Seconds for `threads` threads each running `iters` iterations at once. */
static double peak_run(int kind, int threads, int64_t iters) {
    double t0 = 0, el = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
#pragma omp master
        t0 = bench_now();
        int chains, lanes;
        attn_isa isa;
        float s = peak_loop(kind, iters, &chains, &lanes, &isa);
#pragma omp barrier
#pragma omp master
        {
            el = bench_now() - t0;
            peak_sink = s;
            peak_chains[kind] = chains;
            peak_lanes[kind] = lanes;
            if (kind == PEAK_FMA) peak_isa = isa;
        }
    }
#else
    (void)threads;
    attn_isa isa;
    t0 = bench_now();
    peak_sink = peak_loop(kind, iters, &peak_chains[kind], &peak_lanes[kind], &isa);
    el = bench_now() - t0;
    if (kind == PEAK_FMA) peak_isa = isa;
#endif
    return el;
}

static int peak_threads_granted(int threads) {
#ifdef _OPENMP
    int got = 1;
#pragma omp parallel num_threads(threads)
    {
#pragma omp master
        got = omp_get_num_threads();
    }
    return got;
#else
    (void)threads;
    return 1;
#endif
}

static double peak_gflops(int kind, int threads) {
    if (threads < 1) threads = 1;
    if (threads < PEAK_CACHE && peak_cache[kind][threads] > 0) return peak_cache[kind][threads];
    if (kind != PEAK_FMA) {
        int c, l;
        attn_isa isa;
        peak_loop(kind, 1, &c, &l, &isa);
        if (!c) return 0.0; /* no vdpbf16ps (or AMX tiles) in the kernels that run */
    }
    int granted = peak_threads_granted(threads);
    /* calibrate: a sample of about 50 ms */
    int64_t iters = 1 << 12;
    double el;
    while ((el = peak_run(kind, threads, iters)) < 0.01) iters *= 4;
    iters = (int64_t)((double)iters * 0.05 / el) + 1;
    double s[BENCH_MIN_REPEATS];
    for (int r = 0; r < BENCH_MIN_REPEATS; r++) s[r] = peak_run(kind, threads, iters);
    /* a peak is a capability: the fastest sample (anything else on the machine only slows) */
    double sec = s[0];
    for (int r = 1; r < BENCH_MIN_REPEATS; r++)
        if (s[r] < sec) sec = s[r];
    /* an FMA is 2 flops per lane, a pair product 4 (two products and their sums) */
    double flops =
        (double)granted * (double)iters * peak_chains[kind] * peak_lanes[kind] * (kind == PEAK_FMA ? 2.0 : 4.0);
    double g = flops / sec * 1e-9;
    if (threads < PEAK_CACHE) {
        peak_cache[kind][threads] = g;
        peak_ms[kind][threads] = sec * 1e3;
    }
    return g;
}

double bench_peak_gflops(int threads) { return peak_gflops(PEAK_FMA, threads); }
double bench_peak_gflops_bf16(int threads) { return peak_gflops(PEAK_DPBF16, threads); }
double bench_peak_gflops_amx(int threads) { return peak_gflops(PEAK_AMX, threads); }

static double sample_ms(int kind, int threads) {
    if (threads < 1 || threads >= PEAK_CACHE) return NAN;
    if (peak_cache[kind][threads] <= 0) peak_gflops(kind, threads);
    return peak_ms[kind][threads];
}
double bench_peak_sample_ms(int threads) { return sample_ms(PEAK_FMA, threads); }
double bench_peak_sample_ms_bf16(int threads) { return sample_ms(PEAK_DPBF16, threads); }
double bench_peak_sample_ms_amx(int threads) { return sample_ms(PEAK_AMX, threads); }

const char *bench_peak_isa(int *chains, int *lanes) {
    if (peak_chains[PEAK_FMA] == 0) bench_peak_gflops(1);
    if (chains) *chains = peak_chains[PEAK_FMA];
    if (lanes) *lanes = peak_lanes[PEAK_FMA];
    return attn_isa_name(peak_isa);
}

static void peak_shape(int kind, int *chains, int *lanes) {
    if (peak_chains[kind] == 0) peak_gflops(kind, 1); /* the shape the measurement recorded */
    *chains = peak_chains[kind];
    *lanes = peak_lanes[kind];
}
void bench_peak_bf16_shape(int *chains, int *lanes) { peak_shape(PEAK_DPBF16, chains, lanes); }
void bench_peak_amx_shape(int *tiles, int *lanes) { peak_shape(PEAK_AMX, tiles, lanes); }

double bench_peak_gflops_bf16_results(int threads) {
    /* the ceiling of the bf16 kernels that run: AMX tiles, else vdpbf16ps, else (the products
     * emulated as two FMAs per pair, counted as bf16 flops) the FMA peak */
    double peak = bench_peak_gflops_amx(threads);
    attn_kernel_info k;
    if (!(peak > 0) && attn_kernel_info_get(&k) == ATTN_OK && k.bf16_unit == ATTN_UNIT_DPBF16PS)
        peak = bench_peak_gflops_bf16(threads);
    if (!(peak > 0)) peak = bench_peak_gflops(threads);
    return peak;
}

int bench_parse_dtypes(const char *cmd, const char *list, int *f32, int *bf16) {
    *f32 = !list;
    *bf16 = 0;
    if (!list) return 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "f32"))
            *f32 = 1;
        else if (!strcmp(tok, "bf16"))
            *bf16 = 1;
        else {
            return cli_usage_error("%s: unknown --dtype '%s' (available: f32, bf16)", cmd, tok);
        }
    }
    if (!*f32 && !*bf16) {
        return cli_usage_error("%s: --dtype needs f32 and/or bf16", cmd);
    }
    return 0;
}
