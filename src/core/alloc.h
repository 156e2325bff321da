/* The library's one allocator. Every heap allocation in src/ goes through these so that a test
 * can make the k-th one fail (attn__alloc_fail_after) and check that each out-of-memory path
 * returns a status and frees what it had: an error path nobody exercises is an error path that
 * leaks or crashes. They wrap the C library's functions: memory from them may be freed with
 * free() and the other way round. Internal (hidden, not in include/attn). */
#ifndef ATTN_CORE_ALLOC_H
#define ATTN_CORE_ALLOC_H

#include <stddef.h>

void *attn__malloc(size_t n);
void *attn__calloc(size_t count, size_t size);
void *attn__realloc(void *p, size_t n);
/* free()-able memory aligned to `align` (a power of two). */
void *attn__aligned_alloc(size_t align, size_t n);
char *attn__strdup(const char *s);
void attn__free(void *p);

/* Blocks of weights. A decode step reads each weight matrix once, row by row (the few-row GEMM
 * on W^T), from memory; the hardware prefetchers stop at 4 KiB pages, so a matrix whose rows
 * start on page boundaries (k = 1024 floats: one row a page) streams faster than one 16 bytes
 * past them, where a malloc'd block packed end to end puts every matrix (fp32 decode, Llama
 * shape: 1.17 / 1.14x on 1 / 2 threads; GPT-2, rows of 3 KiB, 1.02x). Such blocks are allocated
 * page-aligned, and each array of at least ATTN_WEIGHTS_PAGE_MIN floats starts on a page;
 * smaller ones (biases, norms) pack between them. */
#define ATTN_WEIGHTS_PAGE 4096
#define ATTN_WEIGHTS_PAGE_MIN 16384
/* The offset (floats from the block's start) of an array of n floats placed where off floats are
 * taken: at most off + ATTN_WEIGHTS_PAGE / 4 - 1 (SIZE_MAX where that overflows). */
size_t attn__weights_at(size_t off, size_t n);
/* A zeroed, page-aligned block of that many floats (free with attn__free). */
float *attn__weights_alloc(size_t floats);

/* Test hook. k > 0: the k-th allocation counted from this call fails (returns NULL), once; the
 * ones after it succeed again. k <= 0: no failure. Resets attn__alloc_injected(). */
void attn__alloc_fail_after(long k);
/* Whether the failure armed by attn__alloc_fail_after has happened. */
int attn__alloc_injected(void);
/* Allocations counted since the last attn__alloc_fail_after (successful or not). */
long attn__alloc_count(void);

#endif
