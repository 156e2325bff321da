/* attn io: safe file input and output, as the library does it for checkpoints and safetensors
 * files, for programs built on attn (the attn tool writes every file through these).
 *
 * Reading: a path is opened without blocking (a FIFO or a terminal named as an input must not
 * hang the program), checked to be a regular file, and refused when larger than the cap given
 * for that kind of file (a configuration is small; weights and training data may be large), so
 * that /dev/zero or a runaway file fails at once with a message naming the cap.
 *
 * Writing: a file is never written in place. The bytes go to a new temporary file in the same
 * folder as the target, created under an unpredictable name that must not exist yet (so two
 * writers never share it and a planted link is never followed), flushed to disk, then renamed
 * over the target, and the folder is flushed so that the rename survives a crash. Until the
 * rename the old file is untouched; a failure removes the temporary file. The temporary's name is
 * PATH.tmp-PID-RANDOM: the next output to PATH removes those whose process no longer exists (a
 * writer killed before its rename), and nothing else. The target itself must
 * be missing or a regular file: a device, a FIFO, a folder or a symbolic link there is refused.
 * attn_io_check_output adds the checks of a program's outputs: never one of its inputs, and an
 * existing file of another kind is not replaced unless asked.
 *
 * Every function returning attn_status sets attn_last_error() on failure (NULL pointer arguments
 * included: ATTN_ERR_INVALID_ARGUMENT). POSIX only. */
#ifndef ATTN_IO_H
#define ATTN_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Size caps by kind of input. */
#define ATTN_IO_CAP_CONFIG ((uint64_t)16 << 20) /* JSON configurations: 16 MB */
#define ATTN_IO_CAP_DATA ((uint64_t)4 << 30)    /* training text and similar: 4 GB */

/* Open `path` for reading: non-blocking, regular files only, at most `cap` bytes (0: no cap).
 * `what` names the kind of file in the cap's message ("config", "data"; NULL: "file"); every
 * message starts "cannot read 'PATH': ". On success *fd is open (blocking mode restored) and
 * *size holds the file's size; on failure *fd is -1. */
ATTN_API attn_status attn_io_open_input(const char *path, const char *what, uint64_t cap, int *fd, uint64_t *size);

/* The whole file, NUL-terminated, in *buf (free() it) with its length in *len; as above. */
ATTN_API attn_status attn_io_read_input(const char *path, const char *what, uint64_t cap, char **buf, size_t *len);

/* 1 when a and b name the same existing file (device and inode), 0 otherwise (NULL included). */
ATTN_API int attn_io_same_file(const char *a, const char *b);

/* ATTN_OK when `path` is missing or a regular file; an error naming what is there otherwise. */
ATTN_API attn_status attn_io_check_target(const char *path);

/* What an output holds, for attn_io_check_output: an existing file at its path must be of the
 * same kind unless the caller forces the replacement. */
typedef enum attn_io_kind {
    ATTN_IO_KIND_SAFETENSORS = 0, /* any safetensors file */
    ATTN_IO_KIND_CHECKPOINT = 1,  /* a safetensors file with attn checkpoint metadata (attn.format) */
    ATTN_IO_KIND_SVG = 2,         /* starts with <?xml or <svg */
    ATTN_IO_KIND_HTML = 3,        /* starts with <!doctype html or <html */
    ATTN_IO_KIND_CSV = 4,         /* text whose first line has a comma */
    ATTN_IO_KIND_IMAGE = 5,       /* PNG, or PPM / PGM */
    ATTN_IO_KIND_NPY = 6,         /* a NumPy .npy file (starts with \x93NUMPY) */
    ATTN_IO_KIND_JSONL = 7        /* text whose first line is a JSON array or object */
} attn_io_kind;
#define ATTN_IO_KIND_COUNT 8

/* ATTN_OK when `path` may be written as an output of that kind: it is none of inputs[0..n) (the
 * same file under any name; NULL entries skipped), attn_io_check_target accepts it, and, unless
 * force, an existing non-empty file there holds that kind. `what` names the output in messages
 * ("--out"; NULL: "output"): "WHAT 'PATH' is the same file as the input 'IN': refusing to
 * overwrite an input", "WHAT: <attn_io_check_target's message>" (NULL: that message alone),
 * "WHAT 'PATH' exists and is not an SVG file: refusing to replace it (remove it, choose another
 * path, or add --force)". inputs may be NULL when n is 0. */
ATTN_API attn_status attn_io_check_output(const char *what, const char *path, const char *const *inputs, size_t n,
                                          attn_io_kind kind, int force);

/* An output in progress: the temporary file behind the atomic rename. */
typedef struct attn_io_out {
    int fd;
    char *tmp;  /* temporary file's name */
    char *path; /* target */
} attn_io_out;

/* Check the target and create the temporary file (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0644 less the
 * umask) next to it. On failure nothing is left behind and o->fd is -1. */
ATTN_API attn_status attn_io_out_begin(attn_io_out *o, const char *path);
/* Write all of buf to the temporary file. */
ATTN_API attn_status attn_io_out_write(attn_io_out *o, const void *buf, size_t n);
/* fsync, close, check the target again, rename over it, fsync the folder. The temporary file is
 * removed on failure. Frees o's strings either way. */
ATTN_API attn_status attn_io_out_commit(attn_io_out *o);
/* Remove the temporary file and free o's strings (safe on a failed begin; NULL: nothing). */
ATTN_API void attn_io_out_abort(attn_io_out *o);

/* The same through stdio: attn_io_out_fopen begins o at path (attn_io_out_begin) and returns a
 * FILE writing its temporary file (NULL on failure, nothing left behind, attn_last_error() set).
 * attn_io_out_fclose flushes and closes f and commits o, or, when a write to f failed (now or
 * earlier), removes the temporary file and reports "cannot write 'PATH': ..."; f is closed
 * either way. */
ATTN_API FILE *attn_io_out_fopen(attn_io_out *o, const char *path);
ATTN_API attn_status attn_io_out_fclose(attn_io_out *o, FILE *f);

/* An advisory lock on a file, held by one process at a time: flock on the sibling file PATH.lock
 * (PATH itself is replaced by every atomic write, so a lock on it would not last). The lock file
 * holds the holder's pid (for the message) and is removed on release; the lock ends with the
 * process too (exit, crash, SIGKILL), so it is never stale. Advisory: it keeps out only programs
 * that ask for it (every `attn train` does, for its checkpoint). attn_io_lock_acquire does not
 * wait: when another process holds it, ATTN_ERR_IO "'PATH' is in use: another process (pid N)
 * holds its lock 'PATH.lock'; ...". On failure l->fd is -1 and nothing is held. */
typedef struct attn_io_lock {
    int fd;
    char *path; /* PATH.lock */
} attn_io_lock;
ATTN_API attn_status attn_io_lock_acquire(attn_io_lock *l, const char *path);
/* Release and remove the lock file (safe on a failed acquire; NULL: nothing). */
ATTN_API void attn_io_lock_release(attn_io_lock *l);

#ifdef __cplusplus
}
#endif
#endif
