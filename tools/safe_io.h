/* Safe input and output for the attn command-line tool.
 *
 * Every file the tool writes goes through here (and through the library's attn/io.h, which
 * does the work): an output is refused when it is the same file as one of the command's inputs
 * (writing there would destroy the input), when something other than a regular file sits at its
 * path (a device, a FIFO, a folder or a symbolic link is never replaced), and, unless --force is
 * given, when an existing file there is not of the kind being written (a checkpoint path holding
 * a text file, an SVG path holding a program). A file is written to a fresh temporary file next
 * to it and renamed over it only when complete, so a failure or a crash leaves the old file.
 *
 * Every file the tool reads is opened without blocking (a FIFO never hangs it), must be a regular
 * file, and may not exceed the cap of its kind (attn/io.h). */
#ifndef ATTN_TOOLS_SAFE_IO_H
#define ATTN_TOOLS_SAFE_IO_H

#include <stddef.h>
#include <stdio.h>

#include "attn/io.h"

/* What an output holds: an existing file at its path must be of the same kind (unless --force);
 * the library's attn_io_kind under the tool's names. */
typedef attn_io_kind safe_kind;
#define SAFE_KIND_SAFETENSORS ATTN_IO_KIND_SAFETENSORS /* any safetensors file */
#define SAFE_KIND_CHECKPOINT ATTN_IO_KIND_CHECKPOINT   /* a safetensors file with attn checkpoint metadata */
#define SAFE_KIND_SVG ATTN_IO_KIND_SVG
#define SAFE_KIND_HTML ATTN_IO_KIND_HTML
#define SAFE_KIND_CSV ATTN_IO_KIND_CSV
#define SAFE_KIND_IMAGE ATTN_IO_KIND_IMAGE /* PNG, or PPM / PGM */
#define SAFE_KIND_NPY ATTN_IO_KIND_NPY
#define SAFE_KIND_JSONL ATTN_IO_KIND_JSONL

/* 0 when `out` may be written; otherwise prints "attn: CMD: ..." and returns 1. inputs[0..n) are
 * the command's input paths (NULL entries skipped); `opt` names the output option in messages
 * ("--out", "--checkpoint"). Besides attn_io_check_output's checks, a temporary file is created
 * and removed next to out, so that a missing or unwritable folder fails before any work. */
int safe_out_check(const char *cmd, const char *opt, const char *out, const char *const *inputs, size_t n,
                   safe_kind kind, int force);

/* One output of a command, for safe_outs_check (path NULL: not asked for). */
typedef struct safe_out {
    const char *opt, *path;
    safe_kind kind;
} safe_out;

/* Every output of a command at once, before any work (so that nothing is written when one of them
 * would fail): each as safe_out_check, and no two the same file, under the same name or another
 * ("a/x" and "./a/../a/x"; an existing file under a link: by device and inode). 0, or 1 with the
 * message printed ("attn: CMD: --svg and --html name the same file 'X'"). */
int safe_outs_check(const char *cmd, const safe_out *outs, size_t n, const char *const *inputs, size_t nin, int force);

/* Outputs of a command that reads a model folder (`--model DIR`): an output that names an existing
 * file inside the folder, at any depth and under any spelling or link, is refused (writing it could
 * replace the model's weights, config or tokenizer, which --force does not allow); a new file there
 * is not one the model reads. 0, or 1 with the message printed ("attn: CMD: --out 'X' is a file of
 * the model folder 'DIR' (--model): ..."). A folder that cannot be resolved is left to the command
 * (it fails to open it). */
int safe_outs_outside(const char *cmd, const safe_out *outs, size_t n, const char *folder, const char *folder_opt);

/* The checks before training writes a checkpoint at `path` (0, or 1 with the message printed):
 * safe_out_check's, then an existing checkpoint is refused without --resume (unless --force, which
 * replaces it), then a temporary file is created and removed next to path, so that a missing or
 * unwritable folder fails before the first training step. */
int safe_checkpoint_check(const char *cmd, const char *path, const char *const *inputs, size_t n, int resume,
                          int force);

/* The command's inputs and --force, for the outputs that safe_fopen opens later (the command's
 * own option parsing knows them; the writers do not). The array must outlive those calls. */
void safe_set_inputs(const char *const *inputs, size_t n, int force);

/* An output written through stdio: safe_fopen checks path as safe_out_check does (against the
 * inputs set above) and gives a FILE on a fresh temporary file next to it (NULL with
 * attn_last_error() set on failure); safe_fclose flushes it and renames it over path (0), or
 * removes it (-1, attn_last_error() set) when anything failed, including a write error met
 * earlier. */
typedef struct safe_file {
    attn_io_out o;
} safe_file;
FILE *safe_fopen(safe_file *h, const char *path, safe_kind kind);
int safe_fclose(safe_file *h, FILE *f);

/* The whole of a regular file (NUL-terminated, malloc'ed) of at most cap bytes; NULL with
 * attn_last_error() ("cannot read 'PATH': ...") on failure. */
char *safe_read(const char *path, const char *what, uint64_t cap, size_t *len);

#endif
