#include "core/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Counters are atomics: allocations happen inside OpenMP regions (per-thread scratch). */
static long fail_at; /* 0: never; else the allocation number that fails */
static long counter; /* allocations since the last attn__alloc_fail_after */
static int injected;

/* Counts this allocation; 1 when it is the one to fail. */
static int should_fail(void) {
    long at = __atomic_load_n(&fail_at, __ATOMIC_RELAXED);
    long n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    if (at <= 0 || n != at) return 0;
    __atomic_store_n(&injected, 1, __ATOMIC_RELAXED);
    return 1;
}

void attn__alloc_fail_after(long k) {
    __atomic_store_n(&counter, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&injected, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fail_at, k > 0 ? k : 0, __ATOMIC_RELAXED);
}

int attn__alloc_injected(void) { return __atomic_load_n(&injected, __ATOMIC_RELAXED); }
long attn__alloc_count(void) { return __atomic_load_n(&counter, __ATOMIC_RELAXED); }

void *attn__malloc(size_t n) { return should_fail() ? NULL : malloc(n); }
void *attn__calloc(size_t count, size_t size) { return should_fail() ? NULL : calloc(count, size); }
void *attn__realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n); }

void *attn__aligned_alloc(size_t align, size_t n) {
    if (should_fail()) return NULL;
    /* C11 aligned_alloc wants the size a multiple of the alignment */
    size_t r = n ? (n + align - 1) / align * align : align;
    return r < n ? NULL : aligned_alloc(align, r);
}

char *attn__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = attn__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void attn__free(void *p) { free(p); }

size_t attn__weights_at(size_t off, size_t n) {
    const size_t page = ATTN_WEIGHTS_PAGE / sizeof(float);
    if (n < ATTN_WEIGHTS_PAGE_MIN) return off;
    return off > SIZE_MAX - page ? SIZE_MAX : (off + page - 1) / page * page;
}

float *attn__weights_alloc(size_t floats) {
    if (floats > SIZE_MAX / sizeof(float) - ATTN_WEIGHTS_PAGE) return NULL;
    const size_t bytes = (floats ? floats : 1) * sizeof(float);
    float *w = attn__aligned_alloc(ATTN_WEIGHTS_PAGE, bytes);
    if (w) memset(w, 0, bytes);
    return w;
}
