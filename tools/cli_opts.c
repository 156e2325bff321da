/* The option parser shared by the attn commands (see cli_opts.h). */
#include "cli_opts.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_parse_i64(const char *s, int64_t minv, int64_t maxv, int64_t *out) {
    if (!s || (*s != '-' && !isdigit((unsigned char)*s))) return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE || *end != '\0' || v < minv || v > maxv) return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double minv, double maxv, double *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno == ERANGE || *end != '\0' || !isfinite(v) || v < minv || v > maxv) return -1;
    *out = v;
    return 0;
}

int cli_parse_precision(const char *s, attn_precision *p) {
    for (int i = ATTN_PRECISION_FP32; i <= ATTN_PRECISION_BF16; i++)
        if (s && strcmp(s, attn_precision_name((attn_precision)i)) == 0) {
            *p = (attn_precision)i;
            return 0;
        }
    return -1;
}

static void store_int(const cli_opt *o, int index, int64_t v) {
    switch (o->itype) {
    case CLI_INT_INT: ((int *)o->dst)[index] = (int)v; break;
    case CLI_INT_LONG: ((long *)o->dst)[index] = (long)v; break;
    default: ((long long *)o->dst)[index] = (long long)v; break;
    }
}

/* "an integer in 1..64" / "an integer >= 0" */
static const char *int_range(const cli_opt *o, char *buf, size_t len) {
    if (o->max == INT64_MAX)
        snprintf(buf, len, ">= %lld", (long long)o->min);
    else
        snprintf(buf, len, "in %lld..%lld", (long long)o->min, (long long)o->max);
    return buf;
}

/* "1,2,3" into o->dst; the count, or -1 (not a list of digits) or -2 (more than cap values). */
static int parse_list(const cli_opt *o, const char *s) {
    int n = 0;
    for (const char *p = s;;) {
        if (!isdigit((unsigned char)*p)) return -1; /* no sign, no blanks, no empty item */
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (errno == ERANGE || v < o->min || v > o->max) return -1;
        if (n >= o->cap) return -2;
        store_int(o, n++, v);
        if (*end == '\0') return n;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

/* Why an integer option's value was refused: an integer (digits, or a number like 1e12 that is
 * one) outside the range, or not an integer at all. */
static const char *int_why(const char *s) {
    if (!s || !*s || isspace((unsigned char)*s)) return "not an integer";
    char *end;
    const double v = strtod(s, &end);
    return *end == '\0' && (isinf(v) || v == floor(v)) ? "out of range" : "not an integer";
}

/* Store value v of option o; 0, or 2 after printing the error. */
static int set_value(const char *cmd, cli_opt *o, const char *v) {
    char range[64];
    switch (o->kind) {
    case CLI_KIND_INT: {
        int64_t x;
        if (cli_parse_i64(v, o->min, o->max, &x))
            return cli_usage_error("%s: %s wants an integer %s, got '%s' (%s)", cmd, o->name,
                                   int_range(o, range, sizeof range), v, int_why(v));
        store_int(o, 0, x);
        return 0;
    }
    case CLI_KIND_DOUBLE: {
        double x;
        const int open = (o->flags & CLI_MIN_EXCLUSIVE) != 0;
        if (cli_parse_double(v, o->dmin, o->dmax, &x) || (open && !(x > o->dmin)))
            return cli_usage_error("%s: %s wants a number in %c%g, %g], got '%s'%s", cmd, o->name, open ? '(' : '[',
                                   o->dmin, o->dmax, v,
                                   cli_parse_double(v, -HUGE_VAL, HUGE_VAL, &x) ? "" : " (out of range)");
        *(double *)o->dst = x;
        return 0;
    }
    case CLI_KIND_STRING:
        if ((o->flags & CLI_NONEMPTY) && !*v) return cli_usage_error("%s: %s needs a non-empty value", cmd, o->name);
        *(const char **)o->dst = v;
        return 0;
    case CLI_KIND_LIST: {
        int n = parse_list(o, v);
        if (n == -2) return cli_usage_error("%s: %s takes at most %d values, got '%s'", cmd, o->name, o->cap, v);
        if (n < 0)
            return cli_usage_error("%s: %s wants a comma-separated list of integers in %lld..%lld, got '%s'", cmd,
                                   o->name, (long long)o->min, (long long)o->max, v);
        *o->count = n;
        return 0;
    }
    default: return 0;
    }
}

int cli_parse(const char *cmd, cli_opt *opts, int argc, char **argv, const char **pos, int npos) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (cli_is_help(argv[i])) return CLI_HELP;
    int npos_seen = 0, options = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (options && !strcmp(a, "--")) {
            options = 0;
            continue;
        }
        if (!options || a[0] != '-' || a[1] == '\0') {
            if (npos_seen >= npos)
                return cli_usage_error("%s: unexpected argument '%s' (try 'attn %s --help')", cmd, a, cmd);
            pos[npos_seen++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        cli_opt *o = opts;
        while (o->name && !(strlen(o->name) == len && !strncmp(o->name, a, len))) o++;
        if (!o->name) {
            /* name only: "--bogus=1" is reported as '--bogus' */
            return cli_usage_error("%s: unknown option '%.*s' (try 'attn %s --help')", cmd, (int)len, a, cmd);
        }
        o->seen++;
        if (o->kind == CLI_KIND_FLAG) {
            if (eq) return cli_usage_error("%s: %s takes no value, got '%s'", cmd, o->name, a);
            *(int *)o->dst = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) return cli_usage_error("%s: %s needs a value (try 'attn %s --help')", cmd, o->name, cmd);
            v = argv[++i];
        }
        int rc = set_value(cmd, o, v);
        if (rc) return rc;
    }
    return CLI_OK;
}

int cli_seen(const cli_opt *opts, const char *name) {
    for (; opts->name; opts++)
        if (!strcmp(opts->name, name)) return opts->seen;
    return 0;
}
