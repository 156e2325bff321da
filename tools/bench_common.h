/* Shared benchmark infrastructure for `attn bench ...`: a monotonic timer, warmup plus a median
 * of repeated timed samples, the options every benchmark takes (--threads, --repeats, --json, as
 * cli_opts.h table entries), a table printer and a JSON-lines printer, and this machine's
 * measured FP32 FMA peak.
 *
 * Typical use in a benchmark command:
 *     bench_opts o;
 *     bench_opts_init(&o);
 *     int64_t ns[BENCH_MAX_LIST] = {1024};
 *     int nn = 1;
 *     cli_opt opts[] = {BENCH_COMMON_OPTS(&o), CLI_LIST("--n", ns, &nn, BENCH_MAX_LIST, 1, 4096), CLI_END};
 *     int r = cli_parse("bench foo", opts, argc, argv, NULL, 0);
 *     if (r == CLI_HELP) { usage(stdout); return 0; }
 *     if (r) return r;
 *     bench_print_header(stdout, o.json);
 *     for each thread count T in o.threads: bench_set_threads(T); bench_measure(...);
 *         bench_result r; bench_result_init(&r, "foo", "attn", T); bench_result_dim(&r, "n", n);
 *         bench_result_finish(&r, flops, ms); bench_print(stdout, &r, o.json);
 */
#ifndef ATTN_BENCH_COMMON_H
#define ATTN_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "cli_opts.h"

/* Monotonic clock, seconds. */
double bench_now(void);

/* ---- timing ------------------------------------------------------------------------------ */
typedef void (*bench_fn)(void *ctx);

typedef struct bench_timing {
    double median_ms; /* per call: the median over the samples */
    double min_ms, max_ms;
    int repeats;   /* samples taken */
    int64_t iters; /* calls per sample */
} bench_timing;

#define BENCH_MIN_REPEATS 5
/* Sample duration target: short calls are batched until a sample lasts at least this long. */
#define BENCH_SAMPLE_SECONDS 0.02
/* Warmup: at least one call and at least this long. */
#define BENCH_WARMUP_SECONDS 0.05

/* The median of v[0 .. n) (n >= 1), sorting v in place. */
double bench_median(double *v, int n);
/* free()-able memory of at least `bytes` on 64-byte lines, as attn's and PyTorch's tensors lie:
 * malloc's 16-byte offset makes every 64-byte row load or store straddle two cache lines (the
 * AMX bf16 GEMM measured 10-20% slower on such a C, decode's rows likewise). NULL when out of
 * memory. */
void *bench_alloc_lines(size_t bytes);

/* Warm up fn(ctx), then take max(repeats, BENCH_MIN_REPEATS) samples of `iters` calls each
 * (iters chosen from the warmup so a sample lasts >= BENCH_SAMPLE_SECONDS); per-call times. */
bench_timing bench_measure(bench_fn fn, void *ctx, int repeats);

/* ---- options ----------------------------------------------------------------------------- */
#define BENCH_MAX_LIST 64

typedef struct bench_opts {
    int threads[BENCH_MAX_LIST]; /* --threads T[,T...]; default: attn_get_num_threads() */
    int nthreads;
    int repeats; /* --repeats R (>= BENCH_MIN_REPEATS), default 7 */
    int json;    /* --json: JSON lines instead of a table */
} bench_opts;

void bench_opts_init(bench_opts *o);

/* The table entries (cli_opts.h) of the options every benchmark takes: --threads T[,T...] in
 * 1..1024, --repeats R in BENCH_MIN_REPEATS..100000, --json. */
#define BENCH_COMMON_OPTS(o)                                                                                           \
    CLI_LIST("--threads", (o)->threads, &(o)->nthreads, BENCH_MAX_LIST, 1, 1024),                                      \
        CLI_INT("--repeats", &(o)->repeats, BENCH_MIN_REPEATS, 100000), CLI_FLAG("--json", &(o)->json)

/* attn_set_num_threads(t) (benchmarks call it before each thread count). */
void bench_set_threads(int t);

/* ---- results ----------------------------------------------------------------------------- */
#define BENCH_MAX_DIMS 8

typedef struct bench_result {
    const char *op;      /* "gemm", "attention", ... */
    const char *variant; /* optional (NULL): "NT", "causal", ... (JSON key "variant") */
    const char *impl;    /* "attn", "openblas", ... */
    int ndims;
    const char *dim_names[BENCH_MAX_DIMS];
    int64_t dims[BENCH_MAX_DIMS];
    int threads;
    double ms;            /* median per call */
    double gflops;        /* flops / time */
    double peak_fraction; /* gflops / bench_peak_gflops(threads), or the bf16 peak when bf16 */
    int bf16;             /* a bf16 computation: its peak is bench_peak_gflops_bf16_results */
    double ratio;         /* to the peer (NAN: none) */
    const char *peer;     /* the peer's impl name when ratio is set */
} bench_result;

void bench_result_init(bench_result *r, const char *op, const char *impl, int threads);
/* Append a named dimension to the shape (in order). */
void bench_result_dim(bench_result *r, const char *name, int64_t value);
/* Sets ms, gflops (flops / ms) and peak_fraction (measures the peak on first use). */
void bench_result_finish(bench_result *r, double flops, double ms);
/* ratio = r->gflops / peer->gflops. */
void bench_result_ratio(bench_result *r, const bench_result *peer);

/* Table header (nothing in JSON mode), then one line per result: a table row or one JSON
 * object with keys op, [variant], impl, shape {dims}, threads, ms, gflops, peak_fraction,
 * [ratio, peer]. */
void bench_print_header(FILE *f, int json);
void bench_print(FILE *f, const bench_result *r, int json);

/* ---- peak -------------------------------------------------------------------------------- */
/* This machine's FP32 FMA peak in GFLOP/s with `threads` threads, measured with independent FMA
 * chains in the best ISA (the fastest of BENCH_MIN_REPEATS samples of ~50 ms: a peak is what
 * the machine can do, other load only lowers it); cached per thread count. */
double bench_peak_gflops(int threads);
/* Duration of one timed sample of that measurement (ms), for the report. */
double bench_peak_sample_ms(int threads);
/* The ISA name and the loop shape the peak measurement used ("avx512", 12 chains, 16 lanes). */
const char *bench_peak_isa(int *chains, int *lanes);
/* The bf16 peak loop's independent chains and lanes (chains 0: no AVX512-BF16). */
void bench_peak_bf16_shape(int *chains, int *lanes);
/* The same for bf16 pair products (vdpbf16ps, 4 flops per lane); 0 without AVX512-BF16. */
double bench_peak_gflops_bf16(int threads);
double bench_peak_sample_ms_bf16(int threads);
/* The same for AMX tiles (TDPBF16PS, 4 flops per pair lane); 0 unless the bf16 kernels that
 * run are AMX's. */
double bench_peak_gflops_amx(int threads);
double bench_peak_sample_ms_amx(int threads);
void bench_peak_amx_shape(int *tiles, int *lanes);
/* The peak of the bf16 kernels that run, which bf16 rows' fractions are of: AMX's, else
 * vdpbf16ps's, else the FMA peak (the products emulated as FMAs). */
double bench_peak_gflops_bf16_results(int threads);

/* --dtype LIST (f32, bf16, comma-separated; NULL: f32) into flags; 0, or cli_usage_error's
 * code when bad. */
int bench_parse_dtypes(const char *cmd, const char *list, int *f32, int *bf16);

#endif
