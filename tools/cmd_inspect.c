/* attn inspect: list the tensors of a .safetensors file, its metadata and the totals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"

static void usage(FILE *f) {
    fprintf(f, "usage: attn inspect FILE.safetensors\n\n"
               "Validates FILE and lists its tensors in data order, one line each (name, dtype,\n"
               "shape), then its metadata and a total line: tensors, parameters (the sum of the\n"
               "element counts) and bytes of tensor data. A file that fails validation is reported\n"
               "on stderr and the exit code is 1.\n");
}

/* s with bytes < 0x20, 0x7F and backslash written as \xNN (names and metadata come from the
 * file: never send raw control characters to a terminal). *width: displayed characters. */
static char *sanitize(const char *s, size_t *width) {
    size_t n = strlen(s);
    char *out = malloc(4 * n + 1);
    if (!out) return NULL;
    size_t o = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F || c == '\\') {
            o += (size_t)snprintf(out + o, 5, "\\x%02X", c);
            w += 4;
        } else {
            out[o++] = (char)c;
            if ((c & 0xC0) != 0x80) w++; /* count UTF-8 lead bytes only */
        }
    }
    out[o] = '\0';
    if (width) *width = w;
    return out;
}

static void pad(size_t have, size_t want) {
    for (; have < want; have++) putchar(' ');
}

static const char *plural(size_t n) { return n == 1 ? "" : "s"; }

int cmd_inspect(int argc, char **argv) {
    const char *file = NULL;
    cli_opt opts[] = {CLI_END};
    int parsed = cli_parse("inspect", opts, argc, argv, &file, 1);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (!file) return cli_usage_error("inspect: missing FILE.safetensors (try 'attn inspect --help')");

    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_open_file(file, &st);
    if (s != ATTN_OK) {
        /* the library says "safetensors: FILE: problem"; print "attn: inspect: FILE: problem" */
        const char *msg = attn_last_error();
        size_t fl = strlen(file);
        if (!strncmp(msg, "safetensors: ", 13) && !strncmp(msg + 13, file, fl) && !strncmp(msg + 13 + fl, ": ", 2))
            msg += 13 + fl + 2;
        if (!msg[0]) msg = attn_status_str(s);
        return cli_fail("inspect: %s: %s", file, msg);
    }

    size_t n = attn_safetensors_count(st), nm = attn_safetensors_metadata_count(st);
    char **names = calloc(n ? n : 1, sizeof *names);
    char(*shapes)[200] = calloc(n ? n : 1, sizeof *shapes);
    size_t *widths = calloc(n ? n : 1, sizeof *widths);
    int rc = 0;
    if (!names || !shapes || !widths) {
        rc = cli_fail("inspect: %s: out of memory", file);
        goto out;
    }
    size_t wname = strlen("tensor"), wdtype = strlen("dtype");
    size_t params = 0, bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(st, i);
        names[i] = sanitize(t->name, &widths[i]);
        if (!names[i]) {
            rc = cli_fail("inspect: %s: out of memory", file);
            goto out;
        }
        if (widths[i] > wname) wname = widths[i];
        size_t dl = strlen(attn_dtype_name(t->dtype));
        if (dl > wdtype) wdtype = dl;
        size_t numel = 1;
        for (int d = 0; d < t->rank; d++) numel *= (size_t)t->shape[d]; /* validated */
        if (attn_add_overflow(params, numel, &params)) params = SIZE_MAX;
        bytes += t->nbytes; /* the sum is the data buffer's size */
        /* shape as "[2, 3]" (rank <= 8: always fits in 200 bytes) */
        size_t o = (size_t)snprintf(shapes[i], sizeof shapes[i], "[");
        for (int d = 0; d < t->rank; d++)
            o += (size_t)snprintf(shapes[i] + o, sizeof shapes[i] - o, d ? ", %lld" : "%lld", (long long)t->shape[d]);
        snprintf(shapes[i] + o, sizeof shapes[i] - o, "]");
    }
    if (wname > 60) wname = 60; /* longer names push their line's columns right */

    if (n) {
        printf("tensor");
        pad(strlen("tensor"), wname + 2);
        printf("dtype");
        pad(strlen("dtype"), wdtype + 2);
        printf("shape\n");
        for (size_t i = 0; i < n; i++) {
            const attn_safetensors_tensor *t = attn_safetensors_get(st, i);
            printf("%s", names[i]);
            pad(widths[i], wname + 2);
            printf("%s", attn_dtype_name(t->dtype));
            pad(strlen(attn_dtype_name(t->dtype)), wdtype + 2);
            printf("%s\n", shapes[i]);
        }
    } else {
        printf("(no tensors)\n");
    }
    if (nm) {
        printf("metadata (%zu):\n", nm);
        for (size_t i = 0; i < nm; i++) {
            const char *k = NULL, *v = NULL;
            attn_safetensors_metadata_get(st, i, &k, &v);
            char *ks = sanitize(k, NULL), *vs = sanitize(v, NULL);
            if (!ks || !vs) {
                free(ks);
                free(vs);
                rc = cli_fail("inspect: %s: out of memory", file);
                goto out;
            }
            printf("  %s: %s\n", ks, vs);
            free(ks);
            free(vs);
        }
    } else {
        printf("metadata: none\n");
    }
    printf("%zu tensor%s, %zu parameter%s, %zu byte%s\n", n, plural(n), params, plural(params), bytes, plural(bytes));
    if (fflush(stdout) != 0 || ferror(stdout)) rc = cli_fail("inspect: error writing the listing");

out:
    if (names)
        for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(shapes);
    free(widths);
    attn_safetensors_close(st);
    return rc;
}
