/* Safe file input and output, shared by the library (checkpoints, safetensors) and the CLI: the
 * public attn/io.h, which says what is guaranteed and why. */
#ifndef ATTN_IO_SAFE_FILE_H
#define ATTN_IO_SAFE_FILE_H

#include "attn/io.h"

/* dir + "/" + name in a new string (attn__malloc; NULL: out of memory). */
char *attn_io_path_join(const char *dir, const char *name);
/* 1 when path names an existing regular file (symbolic links followed), else 0. */
int attn_io_is_regular(const char *path);

#endif
