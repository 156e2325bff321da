/* Safe input and output for the attn tool: see safe_io.h. */
#define _POSIX_C_SOURCE 200809L

#include "safe_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn/safetensors.h"
#include "cli.h"
#include "core/internal.h"

static const char *kind_name[] = {"a safetensors file", "an attn checkpoint", "an SVG file", "an HTML file", "a CSV file",
                                  "a PNG / PPM / PGM image"};

/* The first bytes of path (NUL-terminated); 0 bytes when unreadable. */
static size_t head_of(const char *path, char *buf, size_t cap) {
    int fd;
    uint64_t size;
    buf[0] = '\0';
    if (attn_io_open_input(path, "output", 0, &fd, &size)) return 0;
    ssize_t r = read(fd, buf, cap - 1);
    close(fd);
    if (r < 0) r = 0;
    buf[r] = '\0';
    return (size_t)r;
}

static int ci_prefix(const char *s, const char *p) {
    for (; *p; s++, p++)
        if ((*s | 0x20) != (*p | 0x20)) return 0;
    return 1;
}

/* 1 when the existing, non-empty regular file at path holds what `kind` writes. */
static int is_kind(const char *path, safe_kind kind) {
    if (kind == SAFE_KIND_SAFETENSORS || kind == SAFE_KIND_CHECKPOINT) {
        attn_safetensors *st = NULL;
        if (attn_safetensors_open_file(path, &st)) return 0;
        const int ok = kind == SAFE_KIND_SAFETENSORS || attn_safetensors_metadata_find(st, "attn.format") != NULL;
        attn_safetensors_close(st);
        return ok;
    }
    char head[1024];
    const size_t n = head_of(path, head, sizeof head);
    if (kind == SAFE_KIND_IMAGE) /* PNG's signature, or a netpbm magic P2 / P3 / P5 / P6 */
        return (n >= 8 && !memcmp(head, "\x89PNG\r\n\x1a\n", 8)) ||
               (n >= 2 && head[0] == 'P' && (head[1] == '2' || head[1] == '3' || head[1] == '5' || head[1] == '6'));
    if (memchr(head, '\0', n)) return 0; /* binary */
    const char *s = head;
    while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++;
    switch (kind) {
    case SAFE_KIND_SVG: return ci_prefix(s, "<?xml") || ci_prefix(s, "<svg");
    case SAFE_KIND_HTML: return ci_prefix(s, "<!doctype html") || ci_prefix(s, "<html");
    default: { /* CSV: a first line with a comma */
        const char *nl = strchr(s, '\n'), *comma = strchr(s, ',');
        return comma && (!nl || comma < nl);
    }
    }
}

/* ATTN_OK, or an error (message in attn_last_error(), without the command's name). */
static attn_status out_problem(const char *opt, const char *out, const char *const *inputs, size_t n, safe_kind kind,
                               int force) {
    const char *const name = opt ? opt : "output";
    for (size_t i = 0; i < n; i++)
        if (inputs[i] && attn_io_same_file(out, inputs[i]))
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s '%s' is the same file as the input '%s': refusing to "
                              "overwrite an input", name, out, inputs[i]);
    if (attn_io_check_target(out)) {
        if (!opt) return ATTN_ERR_IO; /* the message names the output already */
        char why[512];
        snprintf(why, sizeof why, "%s", attn_last_error());
        return attn_error(ATTN_ERR_IO, "%s: %s", opt, why);
    }
    struct stat sb;
    if (!force && stat(out, &sb) == 0 && sb.st_size > 0 && !is_kind(out, kind))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s '%s' exists and is not %s: refusing to replace it "
                          "(remove it, choose another path, or add --force)", name, out, kind_name[kind]);
    return ATTN_OK;
}

int safe_out_check(const char *cmd, const char *opt, const char *out, const char *const *inputs, size_t n,
                   safe_kind kind, int force) {
    if (out_problem(opt, out, inputs, n, kind, force)) return cli_fail("%s: %s", cmd, attn_last_error());
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
                        "with --force", cmd, path);
    attn_io_out o;
    if (attn_io_out_begin(&o, path)) return cli_fail("%s: --checkpoint: %s", cmd, attn_last_error());
    attn_io_out_abort(&o);
    return 0;
}

FILE *safe_fopen(safe_file *h, const char *path, safe_kind kind) {
    h->o.fd = -1;
    h->o.tmp = h->o.path = NULL;
    if (out_problem(NULL, path, reg_inputs, reg_n, kind, reg_force)) return NULL;
    if (attn_io_out_begin(&h->o, path)) return NULL;
    /* stdio gets its own descriptor, the output keeps one for the fsync and rename */
    const int fd = dup(h->o.fd);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!f) {
        const int e = errno;
        if (fd >= 0) close(fd);
        attn_io_out_abort(&h->o);
        attn_error(ATTN_ERR_IO, "cannot write '%s': %s", path, strerror(e));
        return NULL;
    }
    return f;
}

int safe_fclose(safe_file *h, FILE *f) {
    const int bad = fflush(f) != 0 || ferror(f);
    const int e = errno;
    const int cbad = fclose(f) != 0;
    if (bad || cbad) {
        attn_error(ATTN_ERR_IO, "cannot write '%s': %s", h->o.path, strerror(e ? e : EIO));
        attn_io_out_abort(&h->o);
        return -1;
    }
    return attn_io_out_commit(&h->o) ? -1 : 0;
}

char *safe_read(const char *path, const char *what, uint64_t cap, size_t *len) {
    char *buf = NULL;
    if (attn_io_read_input(path, what, cap, &buf, len)) return NULL;
    return buf;
}
