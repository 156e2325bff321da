#include <errno.h>
#include <stdlib.h>

#include "internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static int num_threads; /* 0 = default */

/* ATTN_NUM_THREADS: a positive integer, at most ATTN_MAX_THREADS (larger: the bound); anything
 * else is ignored. */
static int default_threads(void) {
    const char *env = getenv("ATTN_NUM_THREADS");
    if (env) {
        char *end = NULL;
        errno = 0;
        const long long n = strtoll(env, &end, 10);
        if (end != env && *end == '\0' && n > 0)
            return errno == ERANGE || n > ATTN_MAX_THREADS ? ATTN_MAX_THREADS : (int)n;
    }
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* A bound, not silently clamped: a caller passing 10^6 meant something else, and every later call
 * would size per-thread scratch for that many threads. */
attn_status attn_set_num_threads(int n) {
    if (n > ATTN_MAX_THREADS)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_set_num_threads: n = %d exceeds ATTN_MAX_THREADS (%d); the thread count is unchanged",
                          n, ATTN_MAX_THREADS);
    num_threads = n > 0 ? n : 0;
    return ATTN_OK;
}

int attn_get_num_threads(void) {
#ifdef _OPENMP
    return num_threads > 0 ? num_threads : default_threads();
#else
    (void)default_threads; /* one thread without OpenMP, whatever ATTN_NUM_THREADS says */
    return 1;
#endif
}

int attn_threads_for(int64_t work_items) {
    int t = attn_get_num_threads();
    if (work_items < t) t = work_items > 0 ? (int)work_items : 1;
    return t;
}
