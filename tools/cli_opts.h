/* One table-driven option parser for every `attn` command.
 *
 * A command lists its options in a table ended by CLI_END, then calls cli_parse:
 *     int64_t steps = 100;
 *     double lr = 1e-3;
 *     const char *file = NULL, *out = "x";
 *     int json = 0;
 *     cli_opt opts[] = {
 *         CLI_INT("--steps", &steps, 1, 1000000),
 *         CLI_DOUBLE("--lr", &lr, 0.0, 1.0),
 *         CLI_STRING("--out", &out),
 *         CLI_FLAG("--json", &json),
 *         CLI_END,
 *     };
 *     int r = cli_parse("foo", opts, argc, argv, &file, 1);
 *     if (r == CLI_HELP) { usage(stdout); return 0; }
 *     if (r) return r;                    // 2: the message is printed
 *
 * Values come as "--name VALUE" (the next argument, whatever it looks like: "--window -3") or
 * "--name=VALUE". -h / --help anywhere before "--" asks for help. Arguments not starting with
 * '-' (and "-" itself, and everything after "--") are positional. Every error is one line,
 * "attn: CMD: ...", naming the option (or argument) and, for numbers, the value and the bounds;
 * the exit code is 2. A repeated option keeps its last value. */
#ifndef ATTN_CLI_OPTS_H
#define ATTN_CLI_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "attn/precision.h"

typedef enum cli_kind {
    CLI_KIND_END = 0,
    CLI_KIND_FLAG,   /* no value: *(int *)dst = 1 */
    CLI_KIND_INT,    /* one integer in [min, max] */
    CLI_KIND_DOUBLE, /* one finite number in [dmin, dmax] ((dmin, dmax] with CLI_MIN_EXCLUSIVE) */
    CLI_KIND_STRING, /* *(const char **)dst = the value (argv's storage) */
    CLI_KIND_LIST    /* "1,2,3": 1..cap integers (digits only) in [min, max]; *count = how many */
} cli_kind;

/* The C type an integer destination points to (from CLI_INT_TYPE). */
enum { CLI_INT_INT = 1, CLI_INT_LONG, CLI_INT_LLONG };
#define CLI_INT_TYPE(p) _Generic((p), int * : CLI_INT_INT, long * : CLI_INT_LONG, long long * : CLI_INT_LLONG)

/* flags */
#define CLI_MIN_EXCLUSIVE 1 /* DOUBLE: the value must be above dmin */
#define CLI_NONEMPTY 2      /* STRING: an empty value is an error */

typedef struct cli_opt {
    const char *name; /* "--steps" (NULL ends the table) */
    cli_kind kind;
    int itype; /* INT, LIST: CLI_INT_INT / LONG / LLONG */
    void *dst;
    int64_t min, max;  /* INT, LIST */
    double dmin, dmax; /* DOUBLE */
    int flags;
    int *count; /* LIST: values stored */
    int cap;    /* LIST: capacity of dst */
    int seen;   /* set by cli_parse: times the option was given */
} cli_opt;

/* dst: int *, long * or long long * (int64_t is one of the last two). */
#define CLI_INT(n, d, lo, hi)                                                                                          \
    { .name = (n), .kind = CLI_KIND_INT, .itype = CLI_INT_TYPE(d), .dst = (d), .min = (lo), .max = (hi) }
/* The destination's type is checked at compile time (_Generic has no other association). */
#define CLI_DOUBLE(n, d, lo, hi)                                                                                       \
    { .name = (n), .kind = CLI_KIND_DOUBLE, .dst = _Generic((d), double * : (d)), .dmin = (lo), .dmax = (hi) }
/* lo < value <= hi */
#define CLI_DOUBLE_ABOVE(n, d, lo, hi)                                                                                 \
    {                                                                                                                  \
        .name = (n), .kind = CLI_KIND_DOUBLE, .dst = _Generic((d), double *: (d)), .dmin = (lo), .dmax = (hi), \
     .flags = CLI_MIN_EXCLUSIVE       \
    }
#define CLI_STRING(n, d)                                                                                               \
    { .name = (n), .kind = CLI_KIND_STRING, .dst = _Generic((d), const char ** : (d)) }
#define CLI_STRING_NONEMPTY(n, d)                                                                                      \
    { .name = (n), .kind = CLI_KIND_STRING, .dst = _Generic((d), const char ** : (d)), .flags = CLI_NONEMPTY }
#define CLI_FLAG(n, d)                                                                                                 \
    { .name = (n), .kind = CLI_KIND_FLAG, .dst = _Generic((d), int * : (d)) }
/* arr: an array of int, long or long long with room for capacity values. */
#define CLI_LIST(n, arr, cnt, capacity, lo, hi)                                                                        \
    {                                                                                                                  \
        .name = (n), .kind = CLI_KIND_LIST, .itype = CLI_INT_TYPE(&(arr)[0]), .dst = &(arr)[0], .min = (lo),           \
        .max = (hi), .count = (cnt), .cap = (capacity)                                                                 \
    }
#define CLI_END                                                                                                        \
    { .name = NULL }

/* cli_parse's results besides 2 (a usage error, already printed). */
#define CLI_OK 0
#define CLI_HELP (-1)

/* Parse argv[1..argc-1] (argv[0] is the command's own name) against opts. cmd prefixes the
 * messages ("bench gemm"). Positional arguments go to pos[0..npos-1] in order (entries not
 * given are left as they are); one more is an "unexpected argument" error. Returns CLI_OK,
 * CLI_HELP (nothing printed, nothing stored), or 2 after printing a one-line usage error. */
int cli_parse(const char *cmd, cli_opt *opts, int argc, char **argv, const char **pos, int npos);

/* How many times cli_parse saw option `name` of opts (0 for a name not in the table). */
int cli_seen(const cli_opt *opts, const char *name);

/* Strict numbers: the whole string (no blanks, no "+"), within [minv, maxv]. 0 on success,
 * -1 otherwise (*out untouched). */
int cli_parse_i64(const char *s, int64_t minv, int64_t maxv, int64_t *out);
int cli_parse_double(const char *s, double minv, double maxv, double *out);
/* A precision's name ("fp32", "bf16": attn_precision_name's) into *p: 0, or -1 for another name
 * or NULL. */
int cli_parse_precision(const char *s, attn_precision *p);

#endif
