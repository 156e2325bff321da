/* Shared benchmark infrastructure for `attn bench ...`: a monotonic timer, warmup plus a median
 * of repeated timed samples, option parsing (integer lists, --threads, --repeats, --json), a
 * table printer and a JSON-lines printer, and this machine's measured FP32 FMA peak.
 *
 * Typical use in a benchmark command:
 *     bench_opts o;
 *     bench_opts_init(&o);
 *     for (int i = 1; i < argc; i++) {
 *         int r = bench_common_option(&o, "bench foo", argc, argv, &i);
 *         if (r < 0) return 2;            // message already printed
 *         if (r > 0) continue;            // --threads / --repeats / --json
 *         const char *v;
 *         if ((v = bench_opt_value("--n", argc, argv, &i))) { ... bench_parse_list(v, ...) ... }
 *         else return cli_usage_error("bench foo: unknown option '%s'", argv[i]);
 *     }
 *     bench_print_header(stdout, o.json);
 *     for each thread count T in o.threads: bench_set_threads(T); bench_measure(...);
 *         bench_result r; bench_result_init(&r, "foo", "attn", T); bench_result_dim(&r, "n", n);
 *         bench_result_finish(&r, flops, ms); bench_print(stdout, &r, o.json);
 */
#ifndef ATTN_BENCH_COMMON_H
#define ATTN_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>

/* Monotonic clock, seconds. */
double bench_now(void);

/* ---- timing ------------------------------------------------------------------------------ */
typedef void (*bench_fn)(void *ctx);

typedef struct bench_timing {
    double median_ms; /* per call: the median over the samples */
    double min_ms, max_ms;
    int repeats;      /* samples taken */
    int64_t iters;    /* calls per sample */
} bench_timing;

#define BENCH_MIN_REPEATS 5
/* Sample duration target: short calls are batched until a sample lasts at least this long. */
#define BENCH_SAMPLE_SECONDS 0.02
/* Warmup: at least one call and at least this long. */
#define BENCH_WARMUP_SECONDS 0.05

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

/* The value of option `name` at argv[*i], given as "--name VALUE" (advances *i) or
 * "--name=VALUE"; NULL when argv[*i] is not that option. A missing VALUE returns "" (so the
 * caller's list parser reports it). */
const char *bench_opt_value(const char *name, int argc, char **argv, int *i);

/* Handles the options every benchmark shares: --threads, --repeats, --json. Returns 1 when
 * argv[*i] was one (advancing *i past its value), 0 when it is not, -1 after printing a
 * one-line usage error (the command then returns 2). cmd prefixes messages ("bench gemm"). */
int bench_common_option(bench_opts *o, const char *cmd, int argc, char **argv, int *i);

/* "512,1024,2048" -> out[]; every value in [minv, maxv]. Returns the count (>= 1), or -1 on an
 * empty list, a non-number, a value out of range or more than max values. */
int bench_parse_list(const char *s, int64_t *out, int max, int64_t minv, int64_t maxv);

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
    double peak_fraction; /* gflops / bench_peak_gflops(threads) */
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

#endif
