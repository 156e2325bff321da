/* attn: command-line entry point. The commands are the rows of one table (below): the dispatch
 * and `attn --help` both come from it, bench's and train's kinds from their own tables. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

const char *cli_sub_list(const cli_sub *kinds, const char *sep, const char *last_sep, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; kinds[i].name && used < cap; i++) {
        const char *s = i == 0 ? "" : kinds[i + 1].name ? sep : last_sep;
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", s, kinds[i].name);
    }
    return buf;
}

/* `attn train`'s models (dispatched by cmd_train). */
const cli_sub cli_train_kinds[] = {
    {"gpt", "a byte-level (GPT-style) language model on a text file", NULL},
    {"vit", "a Vision Transformer on images (the handwritten digits by default)", NULL},
    {NULL, NULL, NULL},
};

static const cli_command commands[] = {
    {"demo", "run the demonstration (the README's main job)", "attn demo [options]", cmd_demo, NULL},
    {"info", "version, CPU features, chosen kernels, threads", "attn info", cmd_info, NULL},
    {"inspect", "list the tensors of a .safetensors file", "attn inspect FILE.safetensors", cmd_inspect, NULL},
    {"bench", "benchmarks", "attn bench KIND [options]", cmd_bench, cli_bench_kinds},
    {"run", "run a PyTorch module's equivalent on safetensors inputs",
     "attn run --config M.json --weights W.safetensors (--inputs IN.safetensors | --image FILE) --out OUT", cmd_run,
     NULL},
    {"train", "train a model", "attn train KIND [options]", cmd_train, cli_train_kinds},
    {"sample", "generate text from a checkpoint of `attn train gpt`", "attn sample CHECKPOINT [options]", cmd_sample,
     NULL},
    {"viz", "attention weights of a model on an input: SVG, HTML page, CSV",
     "attn viz MODEL INPUT [options] (--svg FILE | --html FILE | --csv FILE | --overlay FILE)...", cmd_viz, NULL},
    {"tokenize", "token ids of text (or text of ids) with a Hugging Face tokenizer",
     "attn tokenize --model DIR|FILE (--text T | --input FILE) [--decode] [--max-length L] [--no-special]",
     cmd_tokenize, NULL},
    {"embed", "sentence embeddings of text lines with a Hugging Face / sentence-transformers folder",
     "attn embed --model DIR --input FILE --out OUT.(safetensors|npy|jsonl) [--batch B] [--threads T] [--precision "
     "fp32|bf16]",
     cmd_embed, NULL},
    {"generate",
     "continue a prompt with a Hugging Face causal language model (GPT-2, Llama, Mistral, Qwen2), streaming the text",
     "attn generate --model DIR --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] "
     "[--ids] [--precision fp32|bf16]",
     cmd_generate, NULL},
    {"classify", "the top labels of images with a Hugging Face image classifier (ViT)",
     "attn classify --model DIR (--image FILE)... [--input LIST] [--top K] [--precision fp32|bf16]", cmd_classify,
     NULL},
};
enum { NCOMMANDS = (int)(sizeof commands / sizeof commands[0]) };

static void usage(FILE *f) {
    fprintf(f, "usage: attn <command> [options]\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++) {
        const cli_command *c = &commands[i];
        char kinds[256];
        if (c->kinds)
            fprintf(f, "  %-8s %s: %s\n", c->name, c->summary, cli_sub_list(c->kinds, ", ", ", ", kinds, sizeof kinds));
        else
            fprintf(f, "  %-8s %s\n", c->name, c->summary);
        fprintf(f, "  %-8s   %s\n", "", c->usage);
    }
    fprintf(f, "\n`attn <command> --help` describes each command.\n");
}

/* Is name a row of the ISA registry (whether or not this CPU runs it)? */
static int isa_known(const char *name) {
    for (int i = 0; i < ATTN_ISA_COUNT; i++)
        if (!strcmp(name, attn_isa_name((attn_isa)i))) return 1;
    return 0;
}

/* A bad ATTN_ISA, ATTN_NUM_THREADS or ATTN_CACHE is not silently ignored: one line on stderr,
 * then the command runs with what the library does instead. */
static void env_warnings(void) {
    const char *problem, *cache = attn_cache_env(&problem);
    if (cache && problem)
        fprintf(stderr, "attn: warning: ATTN_CACHE='%.60s': %s: ignored (the detected cache sizes apply)\n", cache,
                problem);
    const char *isa = getenv("ATTN_ISA");
    if (isa && !isa_known(isa)) {
        char names[128] = "";
        for (int i = 0; i < ATTN_ISA_COUNT; i++) { /* the registry's rows, as "ref, avx2 or avx512" */
            const size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s",
                     i == 0                   ? ""
                     : i + 1 < ATTN_ISA_COUNT ? ", "
                                              : " or ",
                     attn_isa_name((attn_isa)i));
        }
        fprintf(stderr, "attn: warning: ATTN_ISA='%.40s' is not %s: ignored (kernels: %s)\n", isa, names,
                attn_isa_name(attn_active_isa()));
    } else if (isa && strcmp(attn_isa_name(attn_active_isa()), isa))
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
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            if (!(argc > 2 && cli_is_help(argv[2]))) env_warnings();
            return commands[i].run(argc - 1, argv + 1);
        }
    return cli_usage_error("unknown command '%s' (see attn --help)", argv[1]);
}
