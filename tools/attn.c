/* attn: command-line entry point. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("attn: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("attn: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} commands[] = {
    {"demo", cmd_demo, "run the demonstration (the README's main job)"},
    {"info", cmd_info, "version, CPU features, chosen kernels, threads"},
    {"inspect", cmd_inspect, "list the tensors of a .safetensors file"},
    {"bench", cmd_bench, "benchmarks: peak, gemm, attention"},
    {"run", cmd_run, "run a PyTorch module's equivalent on safetensors inputs"},
    {"train", cmd_train, "train a model: gpt (character-level) on a text file"},
    {"sample", cmd_sample, "generate text from a checkpoint of `attn train gpt`"},
    {"viz", cmd_viz, "attention weights of a model on an input: SVG, HTML page, CSV"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: attn <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`attn <command> --help` describes each command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (cli_is_help(argv[1])) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("attn %s\n", ATTN_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    return cli_usage_error("unknown command '%s' (see attn --help)", argv[1]);
}
