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

/* Test hook. k > 0: the k-th allocation counted from this call fails (returns NULL), once; the
 * ones after it succeed again. k <= 0: no failure. Resets attn__alloc_injected(). */
void attn__alloc_fail_after(long k);
/* Whether the failure armed by attn__alloc_fail_after has happened. */
int attn__alloc_injected(void);
/* Allocations counted since the last attn__alloc_fail_after (successful or not). */
long attn__alloc_count(void);

#endif
