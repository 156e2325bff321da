/* A program's outputs (attn/io.h): the checks before one is written (never an input, never a
 * file of another kind unless forced) and atomic writing through stdio. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn/safetensors.h"
#include "core/internal.h"
#include "io/safe_file.h"

static const char *const kind_name[] = {
    "a safetensors file", "an attn checkpoint",      "an SVG file",       "an HTML file",
    "a CSV file",         "a PNG / PPM / PGM image", "a NumPy .npy file", "a JSON Lines (.jsonl) file"};
_Static_assert(sizeof kind_name / sizeof kind_name[0] == ATTN_IO_KIND_COUNT, "one name per attn_io_kind");

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
static int is_kind(const char *path, attn_io_kind kind) {
    if (kind == ATTN_IO_KIND_SAFETENSORS || kind == ATTN_IO_KIND_CHECKPOINT) {
        attn_safetensors *st = NULL;
        if (attn_safetensors_open_file(path, &st)) return 0;
        const int ok = kind == ATTN_IO_KIND_SAFETENSORS || attn_safetensors_metadata_find(st, "attn.format") != NULL;
        attn_safetensors_close(st);
        return ok;
    }
    char head[1024];
    const size_t n = head_of(path, head, sizeof head);
    if (kind == ATTN_IO_KIND_IMAGE) /* PNG's signature, or a netpbm magic P2 / P3 / P5 / P6 */
        return (n >= 8 && !memcmp(head, "\x89PNG\r\n\x1a\n", 8)) ||
               (n >= 2 && head[0] == 'P' && (head[1] == '2' || head[1] == '3' || head[1] == '5' || head[1] == '6'));
    if (kind == ATTN_IO_KIND_NPY) return n >= 6 && !memcmp(head, "\x93NUMPY", 6);
    if (memchr(head, '\0', n)) return 0; /* binary */
    const char *s = head;
    while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++;
    switch (kind) {
    case ATTN_IO_KIND_SVG: return ci_prefix(s, "<?xml") || ci_prefix(s, "<svg");
    case ATTN_IO_KIND_HTML: return ci_prefix(s, "<!doctype html") || ci_prefix(s, "<html");
    case ATTN_IO_KIND_JSONL: return *s == '[' || *s == '{';
    default: { /* CSV: a first line with a comma */
        const char *nl = strchr(s, '\n'), *comma = strchr(s, ',');
        return comma && (!nl || comma < nl);
    }
    }
}

attn_status attn_io_check_output(const char *what, const char *path, const char *const *inputs, size_t n,
                                 attn_io_kind kind, int force) {
    static const char fn[] = "attn_io_check_output";
    ATTN_CHECK_NOT_NULL(fn, path);
    if (n) ATTN_CHECK_NOT_NULL(fn, inputs);
    if ((int)kind < 0 || (int)kind >= ATTN_IO_KIND_COUNT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: kind %d is not an attn_io_kind", fn, (int)kind);
    const char *const name = what ? what : "output";
    for (size_t i = 0; i < n; i++)
        if (inputs[i] && attn_io_same_file(path, inputs[i]))
            return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                              "%s '%s' is the same file as the input '%s': refusing to "
                              "overwrite an input",
                              name, path, inputs[i]);
    if (attn_io_check_target(path)) {
        if (!what) return ATTN_ERR_IO; /* the message names the output already */
        char why[512];
        snprintf(why, sizeof why, "%s", attn_last_error());
        return attn_error(ATTN_ERR_IO, "%s: %s", what, why);
    }
    struct stat sb;
    if (!force && stat(path, &sb) == 0 && sb.st_size > 0 && !is_kind(path, kind))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s '%s' exists and is not %s: refusing to replace it "
                          "(remove it, choose another path, or add --force)",
                          name, path, kind_name[kind]);
    return ATTN_OK;
}

FILE *attn_io_out_fopen(attn_io_out *o, const char *path) {
    static const char fn[] = "attn_io_out_fopen";
    if (!o || !path) {
        attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !o ? "o" : "path");
        if (o) o->fd = -1, o->tmp = o->path = NULL;
        return NULL;
    }
    if (attn_io_out_begin(o, path)) return NULL;
    /* stdio gets its own descriptor, the output keeps one for the fsync and rename */
    const int fd = dup(o->fd);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!f) {
        const int e = errno;
        if (fd >= 0) close(fd);
        attn_io_out_abort(o);
        attn_error(ATTN_ERR_IO, "cannot write '%s': %s", path, strerror(e));
        return NULL;
    }
    return f;
}

attn_status attn_io_out_fclose(attn_io_out *o, FILE *f) {
    static const char fn[] = "attn_io_out_fclose";
    if (!f) {
        attn_io_out_abort(o);
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: f is NULL", fn);
    }
    if (!o) {
        fclose(f);
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: o is NULL", fn);
    }
    const int bad = fflush(f) != 0 || ferror(f);
    const int e = errno;
    const int cbad = fclose(f) != 0;
    if (bad || cbad) {
        attn_status s =
            attn_error(ATTN_ERR_IO, "cannot write '%s': %s", o->path ? o->path : "(output)", strerror(e ? e : EIO));
        attn_io_out_abort(o);
        return s;
    }
    return attn_io_out_commit(o);
}
