/* attn tokenize: text to token ids (or ids to text) with a Hugging Face tokenizer. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: attn tokenize --model DIR|FILE (--text T | --input FILE) [--decode] [--max-length L]\n"
            "                     [--no-special] [--max-line-bytes B]\n\n"
            "Token ids of text, equal to Hugging Face tokenizers' (tokenizer(text, truncation=True)[\"input_ids\"]).\n"
            "  --model DIR|FILE  a tokenizer.json, a BERT vocab.txt, or a model folder (its tokenizer.json, else its\n"
            "                    vocab.txt with tokenizer_config.json)\n"
            "  --text T          one text: one line of ids\n"
            "  --input FILE      one line of output per line of FILE ('-': standard input)\n"
            "  --decode          the input lines are ids (space-separated): print their text\n"
            "  --max-length L    at most L ids, special tokens included (default: the tokenizer's truncation)\n"
            "  --no-special      no special tokens ([CLS], [SEP]); with --decode, skip them\n"
            "  --max-line-bytes B  the longest input line read (default 67108864, 64 MiB): a longer line is\n"
            "                    refused (exit 1) without reading it into memory\n"
            "Supported: WordPiece (BERT), byte-level BPE (GPT-2, Llama-3, Qwen2) and SentencePiece-style BPE\n"
            "(Llama-2, Mistral); a file asking for anything else is refused with a message naming its key.\n");
}

/* The default cap on one input line (--max-line-bytes): memory stays bounded on any input. */
#define TOK_MAX_LINE_BYTES ((long long)64 << 20)

typedef struct tok_run {
    attn_tokenizer *t;
    int decode, special;
    int64_t max_length;
    long long max_line;
    int32_t *ids;
    size_t cap;
    char *text;
    size_t text_cap;
} tok_run;

static int grow_ids(tok_run *r, size_t n) {
    if (n <= r->cap) return 0;
    int32_t *p = realloc(r->ids, n * sizeof(int32_t));
    if (!p) return -1;
    r->ids = p, r->cap = n;
    return 0;
}

static int encode_line(tok_run *r, const char *s, size_t len, size_t line) {
    size_t n = 0;
    attn_status st = attn_tokenizer_encode(r->t, s, len, r->special, r->max_length, r->ids, r->cap, &n);
    if (st == ATTN_ERR_WORKSPACE) {
        if (grow_ids(r, n)) return cli_fail("tokenize: out of memory");
        st = attn_tokenizer_encode(r->t, s, len, r->special, r->max_length, r->ids, r->cap, &n);
    }
    if (st) return cli_fail("tokenize: line %zu: %s", line, attn_last_error());
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)r->ids[i]);
    putchar('\n');
    return 0;
}

static int decode_line(tok_run *r, const char *s, size_t line) {
    size_t n = 0;
    for (const char *p = s;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ' ' && *end != '\t' && *end != '\r'))
            return cli_fail("tokenize: line %zu: '%.20s' is not an id", line, p);
        if (grow_ids(r, n + 1 < 64 ? 64 : 2 * (n + 1))) return cli_fail("tokenize: out of memory");
        r->ids[n++] = (int32_t)v;
        p = end;
    }
    size_t len = 0;
    attn_status st = attn_tokenizer_decode(r->t, r->ids, n, !r->special, r->text, r->text_cap, &len);
    if (st == ATTN_ERR_WORKSPACE) {
        char *p = realloc(r->text, len + 1);
        if (!p) return cli_fail("tokenize: out of memory");
        r->text = p, r->text_cap = len + 1;
        st = attn_tokenizer_decode(r->t, r->ids, n, !r->special, r->text, r->text_cap, &len);
    }
    if (st) return cli_fail("tokenize: line %zu: %s", line, attn_last_error());
    fwrite(r->text, 1, len, stdout);
    putchar('\n');
    return 0;
}

/* One line of f (its \n dropped, a NUL after it) into *line: 1 one read, 0 the end of the input,
 * -1 longer than max bytes (read no further), -2 out of memory. */
static int read_line(FILE *f, char **line, size_t *cap, size_t *len, size_t max) {
    int c = EOF;
    *len = 0;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (*len >= max) return -1;
        if (*len + 2 > *cap) {
            size_t n = *cap ? 2 * *cap : 256;
            if (n > max + 2) n = max + 2;
            char *p = realloc(*line, n);
            if (!p) return -2;
            *line = p, *cap = n;
        }
        (*line)[(*len)++] = (char)c;
    }
    if (c == EOF && !*len) return 0;
    if (!*line && !(*line = malloc(*cap = 1))) return -2;
    (*line)[*len] = '\0';
    return 1;
}

static int run_lines(tok_run *r, FILE *in, const char *name) {
    char *line = NULL;
    size_t lcap = 0, no = 0, len = 0;
    int got, rc = 0;
    while (!rc && (got = read_line(in, &line, &lcap, &len, (size_t)r->max_line)) != 0) {
        no++;
        if (got == -2) {
            rc = cli_fail("tokenize: out of memory");
            break;
        }
        if (got == -1) {
            rc = cli_fail("tokenize: %s: line %zu is longer than --max-line-bytes %lld", name, no, r->max_line);
            break;
        }
        if (r->decode && memchr(line, '\0', len)) rc = cli_fail("tokenize: %s: line %zu holds a NUL byte", name, no);
        if (!rc) rc = r->decode ? decode_line(r, line, no) : encode_line(r, line, len, no);
    }
    if (!rc && ferror(in)) rc = cli_fail("tokenize: cannot read '%s'", name);
    free(line);
    return rc;
}

static int run_input(tok_run *r, const char *input) {
    if (!strcmp(input, "-")) return run_lines(r, stdin, "standard input");
    int fd = -1;
    uint64_t size = 0;
    if (attn_io_open_input(input, "data", ATTN_IO_CAP_DATA, &fd, &size)) return cli_fail("%s", attn_last_error());
    FILE *f = fdopen(fd, "r");
    if (!f) return cli_fail("cannot read '%s'", input);
    int rc = run_lines(r, f, input);
    fclose(f);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *input = NULL;
    int decode = 0, no_special = 0;
    int64_t max_length = 0;
    long long max_line = TOK_MAX_LINE_BYTES;
    cli_opt opts[] = {
        CLI_STRING_NONEMPTY("--model", &model),
        CLI_STRING("--text", &text),
        CLI_STRING_NONEMPTY("--input", &input),
        CLI_FLAG("--decode", &decode),
        CLI_INT("--max-length", &max_length, 1, INT32_MAX),
        CLI_FLAG("--no-special", &no_special),
        CLI_INT("--max-line-bytes", &max_line, 1, (long long)1 << 40),
        CLI_END,
    };
    int parsed = cli_parse("tokenize", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (!model) return cli_usage_error("tokenize: missing --model (try 'attn tokenize --help')");
    if (!text == !input)
        return cli_usage_error("tokenize: give one of --text and --input (try 'attn tokenize --help')");
    tok_run r = {NULL, decode, !no_special, max_length, max_line, NULL, 0, NULL, 0};
    if (attn_tokenizer_open(model, &r.t)) return cli_fail("tokenize: %s", attn_last_error());
    int rc;
    if (text && decode)
        rc = decode_line(&r, text, 1);
    else if (text)
        rc = encode_line(&r, text, strlen(text), 1);
    else
        rc = run_input(&r, input);
    if (!rc && fflush(stdout)) rc = cli_fail("tokenize: cannot write the output");
    attn_tokenizer_free(r.t);
    free(r.ids);
    free(r.text);
    return rc;
}
