/* The attn command-line tool: one file per command, dispatched from attn.c. */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

#include <stddef.h>

#include "attn/attn.h"

/* Commands: return the process exit code (0 ok, 1 failure, 2 usage error). */
int cmd_info(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_viz(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_classify(int argc, char **argv);
/* `attn train vit` (tools/train_vit.c), dispatched by cmd_train. */
int train_vit(int argc, char **argv);

/* `attn bench` subcommands. */
int bench_peak_cmd(int argc, char **argv);
int bench_gemm_cmd(int argc, char **argv);
int bench_attention_cmd(int argc, char **argv);
int bench_decode_cmd(int argc, char **argv);
int bench_train_cmd(int argc, char **argv);
int bench_allreduce_cmd(int argc, char **argv);
int bench_scaling_cmd(int argc, char **argv);
int bench_model_cmd(int argc, char **argv);

/* The tool's command table (attn.c) and the kinds under `attn bench` (cmd_bench.c) and `attn
 * train`: the dispatch and every list of names in the help come from these. */
typedef struct cli_sub {
    const char *name;
    const char *summary;               /* for the command's --help: one line, or lines indented by 13 spaces */
    int (*run)(int argc, char **argv); /* NULL: the command dispatches it itself (train) */
} cli_sub;

typedef struct cli_command {
    const char *name;
    const char *summary; /* one line for `attn --help` */
    const char *usage;   /* its synopsis ("attn run --config M.json ..."), for `attn --help` */
    int (*run)(int argc, char **argv);
    const cli_sub *kinds; /* bench, train: their kinds, up to a NULL name; else NULL */
} cli_command;

/* `attn bench`'s benchmarks and `attn train`'s models, each ended by an entry with a NULL name. */
extern const cli_sub cli_bench_kinds[];
extern const cli_sub cli_train_kinds[];

/* "a, b, c" + last_sep + "d" of kinds' names into buf (last_sep ", " or " or "). */
const char *cli_sub_list(const cli_sub *kinds, const char *sep, const char *last_sep, char *buf, size_t cap);

/* Print "attn: <message>" on stderr and return 2 (usage error). */
int cli_usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* Print "attn: <message>" on stderr and return 1 (runtime failure). */
int cli_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* True when argv[i] is -h or --help. */
int cli_is_help(const char *arg);

#endif
