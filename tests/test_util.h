/* Minimal test harness: checks count passes and failures, relative errors against float64
 * references (NaN never passes), a seeded generator for fresh random inputs. */
#ifndef ATTN_TEST_UTIL_H
#define ATTN_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"

static int test_passed, test_failed;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (cond) {                                                                                                    \
            test_passed++;                                                                                             \
        } else {                                                                                                       \
            test_failed++;                                                                                             \
            fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                                                      \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

/* Check a status: prints the library's message on failure. */
#define CHECK_OK(expr)                                                                                                 \
    do {                                                                                                               \
        attn_status st_ = (expr);                                                                                      \
        CHECK(st_ == ATTN_OK, "%s -> %s: %s", #expr, attn_status_str(st_), attn_last_error());                         \
    } while (0)

/* Expect a specific error status and a non-empty message. */
#define CHECK_STATUS(expr, want)                                                                                       \
    do {                                                                                                               \
        attn_clear_error();                                                                                            \
        attn_status st_ = (expr);                                                                                      \
        CHECK(st_ == (want) && attn_last_error()[0] != '\0', "%s -> %s (want %s), msg '%s'", #expr,                    \
              attn_status_str(st_), attn_status_str(want), attn_last_error());                                         \
    } while (0)

/* Does this CPU run the ISA registry's row isa? Kernel tests loop over those rows (FOR_EACH_ISA),
 * so a new ISA is tested against the reference wherever it runs, with no test edited. */
static inline int test_isa_runs(int isa) {
    attn_isa_desc d;
    return attn_isa_describe((attn_isa)isa, &d) == ATTN_OK && d.runnable;
}
#define FOR_EACH_ISA(isa)                                                                                              \
    for (int isa = 0; isa < ATTN_ISA_COUNT; isa++)                                                                     \
        if (test_isa_runs(isa))

static inline int test_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed ? 1 : 0;
}

/* ||got - ref|| / ||ref|| in double; INFINITY on any NaN/Inf in got. When ref is all zero the
 * absolute norm of got is returned. */
static inline double rel_err_fd(const float *got, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static inline double rel_err_ff(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(ref[i])) return INFINITY;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static inline double rel_err_dd(const double *got, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Directional derivative for a finite-difference check: returns sum_i dir_i g_i and adds
 * sum_i (dir_i g_i)^2 to *sumsq. sqrt(*sumsq) is the sum's typical size: a random direction can
 * make the sum cancel far below it, where float rounding of the objective over h dominates the
 * differences, so such checks measure their error against the larger of the two. */
static inline double dir_dot(const float *dir, const float *g, size_t n, double *sumsq) {
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        const double c = (double)dir[i] * g[i];
        s += c;
        *sumsq += c * c;
    }
    return s;
}

/* splitmix64-based generator: seeded per test so failures reproduce; the seed is printed. */
typedef struct {
    uint64_t s;
} test_rng;
static inline uint64_t rng_next(test_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double rng_uniform(test_rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }
static inline double rng_normal(test_rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
static inline void fill_normal(test_rng *r, float *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_normal(r) * scale);
}
/* Seed from ATTN_TEST_SEED when set (CI uses fresh seeds), else the given default. */
static inline test_rng rng_seeded(uint64_t dflt) {
    const char *e = getenv("ATTN_TEST_SEED");
    test_rng r = {e ? strtoull(e, NULL, 10) ^ dflt : dflt};
    return r;
}

/* Copy every parameter of src into dst's parameter of the same name and size (two modules of one
 * configuration, or of two attention kinds with the same parameters). */
static inline void copy_params(const attn_params *dst, const attn_params *src) {
    CHECK(attn_params_count(dst) == attn_params_count(src), "parameter counts differ");
    for (size_t i = 0; i < attn_params_count(src); i++) {
        const attn_param *s = attn_params_get(src, i), *d = attn_params_find(dst, s->name);
        CHECK(d && d->numel == s->numel, "parameter %s missing or mis-sized", s->name);
        if (d && d->numel == s->numel) memcpy(d->data, s->data, sizeof(float) * s->numel);
    }
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* n fresh normal floats (times scale), malloc'd. */
static inline float *normal_floats(test_rng *r, size_t n, double scale) {
    float *x = xmalloc(sizeof(float) * n);
    fill_normal(r, x, n, scale);
    return x;
}

/* Directory of the committed PyTorch fixtures; ATTN_FIXTURE_DIR in the environment overrides it
 * (CI regenerates them with fresh seeds). */
static inline const char *fixture_dir(void) {
    const char *e = getenv("ATTN_FIXTURE_DIR");
    return e && *e ? e : ATTN_FIXTURE_DIR;
}

/* A fixture tensor converted to float32 (from any stored dtype), NULL when absent; *count
 * (nullable) receives its element count. A tensor that is present but unreadable fails the test. */
static inline float *fx_floats(const attn_safetensors *st, const char *name, size_t *count) {
    if (count) *count = 0;
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    if (!t) return NULL;
    size_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= (size_t)t->shape[d];
    float *x = xmalloc(sizeof(float) * (n ? n : 1));
    attn_status st_ = attn_safetensors_read_f32(st, name, x, n);
    CHECK(st_ == ATTN_OK, "reading fixture tensor %s: %s", name, attn_last_error());
    if (st_ != ATTN_OK) {
        free(x);
        return NULL;
    }
    if (count) *count = n;
    return x;
}

#endif
