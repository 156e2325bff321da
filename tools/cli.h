/* The attn command-line tool: one file per command, dispatched from attn.c. */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

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
