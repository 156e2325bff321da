/* attn bench peak: this machine's FP32 FMA throughput per thread count, and with --dtype bf16
 * the AVX512-BF16 pair-product (vdpbf16ps) throughput and, where the bf16 kernels run on them,
 * AMX tiles' (TDPBF16PS). */
#include <math.h>
#include <stdio.h>

#include "bench_common.h"
#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: attn bench peak [--dtype f32,bf16] [--threads T[,T...]] [--json]\n\n"
            "Measures FP32 FMA throughput with independent FMA chains in the vector ISA the\n"
            "kernels run (the best of this CPU, or the one ATTN_ISA forces, so that a forced\n"
            "ISA's fractions are of its own peak; enough chains to cover the FMA latency), every\n"
            "thread running its own loop; the fastest of %d samples of ~50 ms. Other benchmarks\n"
            "report fractions of this peak. --dtype bf16 measures vdpbf16ps the same way (4 flops\n"
            "per lane: two products and their sums; absent without AVX512-BF16) and, where the\n"
            "bf16 kernels run on AMX tiles, TDPBF16PS into 4 accumulator tiles (16 x 16 results\n"
            "of 16 pairs each): the peak of bf16 results is AMX's where it runs, else vdpbf16ps's\n"
            "where the kernels run it, else (vdpbf16ps emulated by two FMAs, as on Intel CPUs\n"
            "that issue it at half the FMA rate; attn info) the FMA peak.\n\n"
            "  --dtype f32,bf16 which peaks (default f32)\n"
            "  --threads T,...  thread counts (default: 1 and attn's, ATTN_NUM_THREADS or\n"
            "                   OMP_NUM_THREADS)\n"
            "  --json           one JSON object per line\n",
            BENCH_MIN_REPEATS);
}

/* One peak row: units (chains or tiles) x lanes, its GFLOP/s and sample time; ratio to peer. */
static void print_peak(int json, const char *op, const char *impl, int threads, const char *units, int n, int lanes,
                       double gflops, double ms, int bf16, double ratio, const char *peer) {
    bench_result r;
    bench_result_init(&r, op, impl, threads);
    bench_result_dim(&r, units, n);
    bench_result_dim(&r, "lanes", lanes);
    r.gflops = gflops;
    r.ms = ms;
    r.peak_fraction = 1.0;
    r.bf16 = bf16;
    r.ratio = ratio;
    r.peer = peer;
    bench_print(stdout, &r, json);
}

int bench_peak_cmd(int argc, char **argv) {
    bench_opts o;
    bench_opts_init(&o);
    const char *dtypes = NULL;
    cli_opt opts[] = {BENCH_COMMON_OPTS(&o), CLI_STRING("--dtype", &dtypes), CLI_END};
    int parsed = cli_parse("bench peak", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    int f32, bf16;
    if ((parsed = bench_parse_dtypes("bench peak", dtypes, &f32, &bf16))) return parsed;
    /* default: one thread and attn's thread count, so the per-core figure is always there */
    if (!cli_seen(opts, "--threads") && o.threads[0] > 1) {
        o.threads[1] = o.threads[0];
        o.threads[0] = 1;
        o.nthreads = 2;
    }
    int chains, lanes;
    const char *isa = bench_peak_isa(&chains, &lanes);
    bench_print_header(stdout, o.json);
    for (int t = 0; t < o.nthreads; t++) {
        const int th = o.threads[t];
        int c, l;
        if (f32)
            print_peak(o.json, "fma_peak", isa, th, "chains", chains, lanes, bench_peak_gflops(th),
                       bench_peak_sample_ms(th), 0, NAN, NULL);
        if (bf16) {
            const double g = bench_peak_gflops_bf16(th);
            if (g <= 0) {
                fprintf(o.json ? stderr : stdout,
                        "bf16 peak: no vdpbf16ps in the kernels that run (no AVX512-BF16 on this CPU, or ATTN_ISA "
                        "below avx512): bf16 fractions are of the FMA peak\n");
                break;
            }
            bench_peak_bf16_shape(&c, &l);
            print_peak(o.json, "bf16_peak", "avx512bf16", th, "chains", c, l, g, bench_peak_sample_ms_bf16(th), 1,
                       f32 ? g / bench_peak_gflops(th) : NAN, f32 ? "fma_peak" : NULL);
            attn_kernel_info k;
            if (t == 0 && attn_kernel_info_get(&k) == ATTN_OK && k.bf16_unit == ATTN_UNIT_FMA)
                fprintf(o.json ? stderr : stdout,
                        "bf16 kernels: %s (attn info says why): bf16 fractions are of the FMA peak\n", k.bf16_name);
            const double ga = bench_peak_gflops_amx(th);
            if (ga > 0) {
                bench_peak_amx_shape(&c, &l);
                print_peak(o.json, "amx_peak", "amx", th, "tiles", c, l, ga, bench_peak_sample_ms_amx(th), 1, ga / g,
                           "bf16_peak");
            }
        }
    }
    return 0;
}
