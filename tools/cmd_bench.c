/* attn bench: dispatch to the benchmarks of the table below (its help and messages list them). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

const cli_sub cli_bench_kinds[] = {
    {"peak", "measure this machine's FP32 FMA peak (GFLOP/s per thread count)", bench_peak_cmd},
    {"gemm", "SGEMM, attn against OpenBLAS when it was found at configure time", bench_gemm_cmd},
    {"attention", "attention forward/backward (--impl sdpa|flash, --dtype f32|bf16)", bench_attention_cmd},
    {"decode",
     "one-token decode against a float32 KV cache: GB/s and the fraction of\n"
     "             the measured memory bandwidth, contexts 1k..32k",
     bench_decode_cmd},
    {"train",
     "training tokens/s of a GPT-2-small-shaped stack (bench/torch_train.py:\n"
     "             the same step in PyTorch)",
     bench_train_cmd},
    {"allreduce",
     "the data-parallel gradient all-reduce's time vs message size and its\n"
     "             alpha-beta fit (under mpirun; bench/dist_train.sh)",
     bench_allreduce_cmd},
    {"scaling",
     "time and extra memory of the attention variants (flash, window,\n"
     "             local+global, linear, Performer) as N grows; log-log SVG plot",
     bench_scaling_cmd},
    {"model",
     "tokens/s of a Hugging Face folder: embeddings, or prefill and decode\n"
     "             (bench/hf_model_bench.py: the same in PyTorch and ONNX Runtime)",
     bench_model_cmd},
    {NULL, NULL, NULL},
};

static void usage(FILE *f) {
    char names[256];
    fprintf(f, "usage: attn bench <%s> [options]\n\n", cli_sub_list(cli_bench_kinds, "|", "|", names, sizeof names));
    for (const cli_sub *k = cli_bench_kinds; k->name; k++) fprintf(f, "  %-10s %s\n", k->name, k->summary);
    fprintf(f, "\nEach prints a table (median of repeated runs, GFLOP/s, fraction of the FMA peak);\n"
               "--json prints one JSON object per line instead. `attn bench SUB --help` for options.\n");
}

int cmd_bench(int argc, char **argv) {
    char names[256];
    if (argc < 2)
        return cli_usage_error("bench: which benchmark? (%s)",
                               cli_sub_list(cli_bench_kinds, ", ", " or ", names, sizeof names));
    if (cli_is_help(argv[1])) {
        usage(stdout);
        return 0;
    }
    for (int i = 0; cli_bench_kinds[i].name; i++)
        if (!strcmp(argv[1], cli_bench_kinds[i].name)) return cli_bench_kinds[i].run(argc - 1, argv + 1);
    return cli_usage_error("bench: unknown benchmark '%s' (%s)", argv[1],
                           cli_sub_list(cli_bench_kinds, ", ", " or ", names, sizeof names));
}
