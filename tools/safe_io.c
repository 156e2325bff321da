/* Safe input and output for the attn tool: see safe_io.h (the work is the library's attn/io.h). */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath */

#include "safe_io.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

int safe_out_check(const char *cmd, const char *opt, const char *out, const char *const *inputs, size_t n,
                   safe_kind kind, int force) {
    if (attn_io_check_output(opt, out, inputs, n, kind, force)) return cli_fail("%s: %s", cmd, attn_last_error());
    attn_io_out o; /* the folder takes a new file: what writing it will need */
    if (attn_io_out_begin(&o, out)) return cli_fail("%s: %s: %s", cmd, opt, attn_last_error());
    attn_io_out_abort(&o);
    return 0;
}

int safe_outs_outside(const char *cmd, const safe_out *outs, size_t n, const char *folder, const char *folder_opt) {
    char root[PATH_MAX], real[PATH_MAX];
    if (!folder || !realpath(folder, root)) return 0;
    const size_t len = strlen(root);
    for (size_t i = 0; i < n; i++) {
        /* realpath resolves an existing file only: a new name cannot be a file the model reads */
        if (!outs[i].path || !realpath(outs[i].path, real)) continue;
        if (!strncmp(real, root, len) && (real[len] == '/' || (len == 1 && root[0] == '/')))
            return cli_fail("%s: %s '%s' is a file of the model folder '%s' (%s): writing it could replace the "
                            "model's weights, config or tokenizer; write outside the folder",
                            cmd, outs[i].opt, outs[i].path, folder, folder_opt);
    }
    return 0;
}

/* path's folder resolved (realpath) joined with its last component into buf: one spelling per
 * file, existing or not; the path itself when its folder cannot be resolved. */
static void canonical(const char *path, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX], real[PATH_MAX];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    const char *base = slash ? slash + 1 : path;
    if (realpath(dir, real))
        snprintf(buf, cap, "%s/%s", real, base);
    else
        snprintf(buf, cap, "%s", path);
}

int safe_outs_check(const char *cmd, const safe_out *outs, size_t n, const char *const *inputs, size_t nin, int force) {
    for (size_t i = 0; i < n; i++) {
        if (!outs[i].path) continue;
        char a[2 * PATH_MAX + 2];
        canonical(outs[i].path, a, sizeof a);
        for (size_t j = 0; j < i; j++) {
            if (!outs[j].path) continue;
            char b[2 * PATH_MAX + 2];
            canonical(outs[j].path, b, sizeof b);
            if (!strcmp(a, b) || attn_io_same_file(outs[i].path, outs[j].path))
                return cli_fail("%s: %s and %s name the same file '%s': each output needs a path of its own", cmd,
                                outs[j].opt, outs[i].opt, outs[i].path);
        }
    }
    for (size_t i = 0; i < n; i++)
        if (outs[i].path && safe_out_check(cmd, outs[i].opt, outs[i].path, inputs, nin, outs[i].kind, force)) return 1;
    return 0;
}

static const char *const *reg_inputs;
static size_t reg_n;
static int reg_force;

void safe_set_inputs(const char *const *inputs, size_t n, int force) {
    reg_inputs = inputs;
    reg_n = n;
    reg_force = force;
}

int safe_checkpoint_check(const char *cmd, const char *path, const char *const *inputs, size_t n, int resume,
                          int force) {
    if (safe_out_check(cmd, "--checkpoint", path, inputs, n, SAFE_KIND_CHECKPOINT, force)) return 1;
    struct stat sb;
    if (!resume && !force && stat(path, &sb) == 0 && sb.st_size > 0) /* an empty file holds nothing to lose */
        return cli_fail("%s: --checkpoint '%s' already holds a checkpoint: continue it with --resume, or replace it "
                        "with --force",
                        cmd, path);
    attn_io_out o;
    if (attn_io_out_begin(&o, path)) return cli_fail("%s: --checkpoint: %s", cmd, attn_last_error());
    attn_io_out_abort(&o);
    return 0;
}

FILE *safe_fopen(safe_file *h, const char *path, safe_kind kind) {
    h->o.fd = -1;
    h->o.tmp = h->o.path = NULL;
    if (attn_io_check_output(NULL, path, reg_inputs, reg_n, kind, reg_force)) return NULL;
    return attn_io_out_fopen(&h->o, path);
}

int safe_fclose(safe_file *h, FILE *f) { return attn_io_out_fclose(&h->o, f) ? -1 : 0; }

char *safe_read(const char *path, const char *what, uint64_t cap, size_t *len) {
    char *buf = NULL;
    if (attn_io_read_input(path, what, cap, &buf, len)) return NULL;
    return buf;
}
