/* Safe input and output for the attn tool: see safe_io.h (the work is the library's attn/io.h). */
#define _POSIX_C_SOURCE 200809L

#include "safe_io.h"

#include <sys/stat.h>

#include "cli.h"

int safe_out_check(const char *cmd, const char *opt, const char *out, const char *const *inputs, size_t n,
                   safe_kind kind, int force) {
    if (attn_io_check_output(opt, out, inputs, n, kind, force)) return cli_fail("%s: %s", cmd, attn_last_error());
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
