/* attn bench: dispatch to the benchmark subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: attn bench <peak|gemm|attention|decode|train|scaling|allreduce> [options]\n\n"
            "  peak       measure this machine's FP32 FMA peak (GFLOP/s per thread count)\n"
            "  gemm       SGEMM, attn against OpenBLAS when it was found at configure time\n"
            "  attention  attention forward/backward (--impl sdpa|flash, --dtype f32|bf16)\n"
            "  decode     one-token decode against a float32 KV cache: GB/s and the fraction of\n"
            "             the measured memory bandwidth, contexts 1k..32k\n"
            "  train      training tokens/s of a GPT-2-small-shaped stack (bench/torch_train.py:\n"
            "             the same step in PyTorch)\n"
            "  allreduce  the data-parallel gradient all-reduce's time vs message size and its\n"
            "             alpha-beta fit (under mpirun; bench/dist_train.sh)\n"
            "  scaling    time and extra memory of the attention variants (flash, window,\n"
            "             local+global, linear, Performer) as N grows; log-log SVG plot\n\n"
            "Each prints a table (median of repeated runs, GFLOP/s, fraction of the FMA peak);\n"
            "--json prints one JSON object per line instead. `attn bench SUB --help` for options.\n");
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2) return cli_usage_error("bench: which benchmark? (peak, gemm, attention, decode, train or scaling)");
    if (cli_is_help(argv[1])) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "peak")) return bench_peak_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "gemm")) return bench_gemm_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "attention")) return bench_attention_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decode")) return bench_decode_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return bench_train_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "scaling")) return bench_scaling_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "allreduce")) return bench_allreduce_cmd(argc - 1, argv + 1);
    return cli_usage_error("bench: unknown benchmark '%s' (peak, gemm, attention, decode, train, scaling or allreduce)",
                           argv[1]);
}
