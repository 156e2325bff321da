/* Internal helpers shared by every layer: error raising, argument checks, threading. */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include "attn/core.h"

#if defined(__GNUC__)
#define ATTN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ATTN_PRINTF(a, b)
#endif

/* Record a message for attn_last_error() and return the status (for `return attn_error(...)`). */
attn_status attn_error(attn_status s, const char *fmt, ...) ATTN_PRINTF(2, 3);

/* "[2, 3, 4]" into buf (for messages). */
const char *attn_shape_str(const int64_t *shape, int rank, char *buf, size_t len);

/* Threads for an OpenMP region: never more than the number of independent work items. */
int attn_threads_for(int64_t work_items);

#define ATTN_CHECK_NOT_NULL(fn, p)                                                                                     \
    do {                                                                                                               \
        if ((p) == NULL) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, #p);                       \
    } while (0)

#endif
