/* Safe file input and output, shared by the library (checkpoints, safetensors) and the CLI.
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
 * rename the old file is untouched; a failure removes the temporary file. The target itself must
 * be missing or a regular file: a device, a FIFO, a folder or a symbolic link there is refused. */
#ifndef ATTN_IO_SAFE_FILE_H
#define ATTN_IO_SAFE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "attn/core.h"

/* Size caps by kind of input. */
#define ATTN_IO_CAP_CONFIG ((uint64_t)16 << 20) /* JSON configurations: 16 MB */
#define ATTN_IO_CAP_DATA ((uint64_t)4 << 30)    /* training text and similar: 4 GB */

/* Open `path` for reading: non-blocking, regular files only, at most `cap` bytes (0: no cap).
 * `what` names the kind of file in the cap's message ("config", "data"); every message starts
 * "cannot read 'PATH': ". On success *fd is open (blocking mode restored) and *size holds the
 * file's size. */
attn_status attn_io_open_input(const char *path, const char *what, uint64_t cap, int *fd, uint64_t *size);

/* The whole file, NUL-terminated (malloc'ed) in *buf with its length in *len; as above. */
attn_status attn_io_read_input(const char *path, const char *what, uint64_t cap, char **buf, size_t *len);

/* 1 when a and b name the same existing file (device and inode), 0 otherwise. */
int attn_io_same_file(const char *a, const char *b);

/* ATTN_OK when `path` is missing or a regular file; an error naming what is there otherwise. */
attn_status attn_io_check_target(const char *path);

/* An output in progress: the temporary file behind the atomic rename. */
typedef struct attn_io_out {
    int fd;
    char *tmp;  /* temporary file's name */
    char *path; /* target */
} attn_io_out;

/* Check the target and create the temporary file (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0644 less the
 * umask) next to it. On failure nothing is left behind and o->fd is -1. */
attn_status attn_io_out_begin(attn_io_out *o, const char *path);
/* Write all of buf to the temporary file. */
attn_status attn_io_out_write(attn_io_out *o, const void *buf, size_t n);
/* fsync, close, check the target again, rename over it, fsync the folder. The temporary file is
 * removed on failure. Frees o's strings either way. */
attn_status attn_io_out_commit(attn_io_out *o);
/* Remove the temporary file and free o's strings (safe on a failed begin). */
void attn_io_out_abort(attn_io_out *o);

#endif
