/* Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the
 * Random123 constants) and inverted dropout on top of it.
 *
 * Stream element i of (seed, offset) uses counter block {lo(i/4), hi(i/4), lo(offset),
 * hi(offset)}, key {lo(seed), hi(seed)}, and takes word i % 4; uniform = (word >> 8) * 2^-24.
 * Dropout splits [0, n) into fixed chunks (multiples of 4 elements) run in parallel; since each
 * element's value depends only on (seed, offset, i), the thread count never matters. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "ops_internal.h"

#ifdef _OPENMP
#define PHILOX_PRAGMA(x) _Pragma(#x)
#define PHILOX_PARALLEL_FOR(nt) PHILOX_PRAGMA(omp parallel for schedule(static) num_threads(nt) if ((nt) > 1))
#else
#define PHILOX_PARALLEL_FOR(nt) (void)(nt);
#endif

#define DROPOUT_MIN_PARALLEL 16384

void attn_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    const uint64_t block = (uint64_t)counter[0] | (uint64_t)counter[1] << 32;
    const uint64_t offset = (uint64_t)counter[2] | (uint64_t)counter[3] << 32;
    attn_philox_block(block, (uint64_t)key[0] | (uint64_t)key[1] << 32, offset, out);
}

float attn_philox_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
    uint32_t w[4];
    attn_philox_block(i / 4, seed, offset, w);
    return (float)(w[i % 4] >> 8) * 0x1p-24f;
}

static attn_status dropout_check(const char *fn, const void *in, const void *out, int64_t n, float p,
                                 const char *in_name, const char *out_name) {
    if (n < 0) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: negative size (n = %lld)", fn, (long long)n);
    if ((uint64_t)n > (uint64_t)INT64_MAX / sizeof(float))
        return attn_error(ATTN_ERR_OVERFLOW, "%s: n = %lld floats overflows the address space", fn, (long long)n);
    if (!(p >= 0.0f && p <= 1.0f))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: p = %g is not in [0, 1] (n = %lld)", fn, (double)p,
                          (long long)n);
    if (n > 0 && in == NULL)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL (n = %lld)", fn, in_name, (long long)n);
    if (n > 0 && out == NULL)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL (n = %lld)", fn, out_name, (long long)n);
    return ATTN_OK;
}

/* y = keep ? x / (1 - p) : 0 over [0, n), mask optional; p already validated, n > 0. */
static void dropout_run(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed, uint64_t offset) {
    if (p == 0.0f) {
        if (y != x) memmove(y, x, (size_t)n * sizeof(float));
        if (mask) memset(mask, 1, (size_t)n);
        return;
    }
    if (p == 1.0f) {
        memset(y, 0, (size_t)n * sizeof(float)); /* all-bits-zero is +0.0f */
        if (mask) memset(mask, 0, (size_t)n);
        return;
    }
    /* uniform u = w * 2^-24 (w < 2^24 an integer) and u >= p  <=>  w >= p * 2^24 (exact scaling)
     * <=>  w >= ceil(p * 2^24) */
    const uint32_t threshold = (uint32_t)ceilf(p * 0x1p24f);
    const float scale = 1.0f / (1.0f - p);
    const attn_ops_kernels *k = attn_ops_active();
    const int64_t chunks = (n + ATTN_OPS_CHUNK - 1) / ATTN_OPS_CHUNK;
    const int nt = n < DROPOUT_MIN_PARALLEL ? 1 : attn_threads_for(chunks);
    PHILOX_PARALLEL_FOR(nt)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t o = c * ATTN_OPS_CHUNK;
        const int64_t len = o + ATTN_OPS_CHUNK < n ? ATTN_OPS_CHUNK : n - o;
        k->dropout(x + o, y + o, mask ? mask + o : NULL, len, (uint64_t)o, p, threshold, scale, seed, offset);
    }
}

attn_status attn_dropout_forward(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed,
                                 uint64_t offset) {
    attn_status st = dropout_check("attn_dropout_forward", x, y, n, p, "x", "y");
    if (st || n == 0) return st;
    dropout_run(x, y, mask, n, p, seed, offset);
    return ATTN_OK;
}

attn_status attn_dropout_backward(const float *dy, float *dx, int64_t n, float p, uint64_t seed, uint64_t offset) {
    attn_status st = dropout_check("attn_dropout_backward", dy, dx, n, p, "dy", "dx");
    if (st || n == 0) return st;
    dropout_run(dy, dx, NULL, n, p, seed, offset);
    return ATTN_OK;
}
