/* attn internal: the safetensors reader's test hook. */
#ifndef ATTN_IO_ST_INTERNAL_H
#define ATTN_IO_ST_INTERNAL_H

/* When set, attn_safetensors_open_file calls it with the open descriptor after sizing the file and
 * before reading it: a test truncates the file there to reproduce a concurrent truncation
 * deterministically. NULL (the default) in normal use; not thread-safe to change while loading. */
extern void (*attn_st_read_hook)(int fd);

#endif
