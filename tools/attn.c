/* attn: command-line entry point. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/tuning.h"

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

/* A bad ATTN_ISA, ATTN_NUM_THREADS or ATTN_CACHE is not silently ignored: one line on stderr,
 * then the command runs with what the library does instead. */
static void env_warnings(void) {
    const char *problem, *cache = attn_cache_env(&problem);
    if (cache && problem)
        fprintf(stderr, "attn: warning: ATTN_CACHE='%.60s': %s: ignored (the detected cache sizes apply)\n", cache,
                problem);
    const char *isa = getenv("ATTN_ISA");
    if (isa && strcmp(isa, "ref") && strcmp(isa, "avx2") && strcmp(isa, "avx512"))
        fprintf(stderr, "attn: warning: ATTN_ISA='%.40s' is not ref, avx2 or avx512: ignored (kernels: %s)\n", isa,
                attn_isa_name(attn_active_isa()));
    else if (isa && strcmp(attn_isa_name(attn_active_isa()), isa))
        fprintf(stderr, "attn: warning: ATTN_ISA=%s: this CPU cannot run it (kernels: %s)\n", isa,
                attn_isa_name(attn_active_isa()));
    const char *nt = getenv("ATTN_NUM_THREADS");
    if (nt) {
        char *end = NULL;
        errno = 0;
        const long long n = strtoll(nt, &end, 10);
        if (end == nt || *end || n <= 0)
            fprintf(stderr, "attn: warning: ATTN_NUM_THREADS='%.40s' is not a positive integer: ignored\n", nt);
        else if (errno == ERANGE || n > ATTN_MAX_THREADS)
            fprintf(stderr, "attn: warning: ATTN_NUM_THREADS='%.40s' is above the bound of %d threads: using %d\n", nt,
                    ATTN_MAX_THREADS, ATTN_MAX_THREADS);
    }
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
        if (!strcmp(argv[1], commands[i].name)) {
            if (!(argc > 2 && cli_is_help(argv[2]))) env_warnings();
            return commands[i].fn(argc - 1, argv + 1);
        }
    return cli_usage_error("unknown command '%s' (see attn --help)", argv[1]);
}
