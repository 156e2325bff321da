/* attn core: status codes, per-thread error messages, tensor views, threads, CPU dispatch. */
#ifndef ATTN_CORE_H
#define ATTN_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 1
#define ATTN_VERSION_PATCH 0
#define ATTN_VERSION_STRING "0.1.0"
/* ATTN_API marks what libattn.so exports: the library is compiled with -fvisibility=hidden, so a
 * function is public exactly when a header in include/attn/ declares it with ATTN_API. */
#if defined(__GNUC__) || defined(__clang__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

/* Stable numeric status codes: values never change once released. */
typedef enum attn_status {
    ATTN_OK = 0,
    ATTN_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, a negative size, an unknown enum value */
    ATTN_ERR_SHAPE = 2,            /* shapes that do not agree */
    ATTN_ERR_OVERFLOW = 3,         /* size arithmetic would overflow */
    ATTN_ERR_OUT_OF_MEMORY = 4,
    ATTN_ERR_WORKSPACE = 5,   /* the workspace passed is smaller than *_workspace_size() said */
    ATTN_ERR_IO = 6,          /* open/read/write/mmap failed */
    ATTN_ERR_UNSUPPORTED = 7, /* a valid request this build cannot serve */
    ATTN_ERR_NOT_FOUND = 8,   /* a named item is absent */
    ATTN_ERR_NUMERIC = 9,     /* a non-finite value where a finite one is required */
    ATTN_ERR_CANCELLED = 10,  /* attn_cancel_request() stopped the call (attn_cancel_clear) */

    /* 20 .. 39: the safetensors codes, one per problem a file can have (ATTN_ERR_ST_*, 20 .. 34 so
     * far), declared in safetensors.h as attn_status values; attn_status_str describes them too.
     * These two bound the range (no function returns them) and keep it inside the enum's values. */
    ATTN_STATUS_SAFETENSORS_FIRST = 20,
    ATTN_STATUS_SAFETENSORS_LAST = 39
} attn_status;

/* A short constant description of a status code ("invalid argument", ...). */
ATTN_API const char *attn_status_str(attn_status s);

/* The message of the last error raised on the calling thread: it names the function, the
 * argument and the shapes involved. Empty string when no error happened on this thread. */
ATTN_API const char *attn_last_error(void);
ATTN_API void attn_clear_error(void);

/* ---- cancellation ------------------------------------------------------------------------
 * One process-wide flag that asks the library's long calls to stop: the forward and backward of
 * the encoder / decoder stacks and of every model built on them (Transformer, GPT, ViT, seq2seq)
 * check it before each layer and answer ATTN_ERR_CANCELLED (the message names the function and
 * the layer). The flag stays set, so every later checked call stops too, until attn_cancel_clear.
 * A cancelled call's outputs (and a backward's gradients, partly accumulated) are undefined: use
 * none of them. attn_cancel_request is async-signal-safe (a lock-free atomic store): a SIGINT /
 * SIGTERM handler or another thread may call it. A call that checks no flag is never cut short,
 * so a single layer (or an optimizer step) always completes. */
ATTN_API void attn_cancel_request(void);
ATTN_API void attn_cancel_clear(void);
/* Nonzero while a cancellation is requested. */
ATTN_API int attn_cancel_requested(void);

/* ---- tensor views ----------------------------------------------------------------------
 * A view does not own memory. Shapes and strides are in elements; a stride of 0 broadcasts.
 *
 * Element types (attn_type; safetensors.h's attn_dtype is the file format's, a different list):
 * f32 is the zero value, so every view built without naming a type (including
 * `attn_tensor t = {0}` and positional initialisers) is f32. bf16 (bfloat16: the top half of an
 * IEEE float) and f16 (IEEE half, for storage) elements are 16-bit words reached through the
 * same pointer (the `data16` / `ptr` members of the union). Every entry point that takes views
 * checks their types and answers ATTN_ERR_UNSUPPORTED, naming the argument and the type, where
 * it has no kernel for it. */
#define ATTN_MAX_RANK 4

typedef enum attn_type { ATTN_TYPE_F32 = 0, ATTN_TYPE_BF16 = 1, ATTN_TYPE_F16 = 2 } attn_type;
#define ATTN_TYPE_COUNT 3

/* Storage of one bf16 / f16 element. */
typedef uint16_t attn_bf16;
typedef uint16_t attn_f16;

typedef struct attn_tensor {
    union {
        float *data;      /* f32 */
        uint16_t *data16; /* bf16, f16 */
        void *ptr;
    };
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    int64_t stride[ATTN_MAX_RANK];
    attn_type dtype; /* ATTN_TYPE_F32 (0) unless set */
} attn_tensor;

/* "f32", "bf16", "f16"; NULL for a value outside the enum. */
ATTN_API const char *attn_type_name(attn_type dtype);
/* Bytes per element (4 or 2); 0 for a value outside the enum. */
ATTN_API size_t attn_type_size(attn_type dtype);

/* Conversions. f32 -> bf16 / f16 round to nearest, ties to even (NaN stays NaN, quiet;
 * overflow goes to infinity); the widening ones are exact. attn_convert copies n elements between
 * any two types (src and dst may not overlap). */
ATTN_API attn_bf16 attn_f32_to_bf16(float x);
ATTN_API float attn_bf16_to_f32(attn_bf16 x);
ATTN_API attn_f16 attn_f32_to_f16(float x);
ATTN_API float attn_f16_to_f32(attn_f16 x);
ATTN_API attn_status attn_convert(const void *src, attn_type src_type, void *dst, attn_type dst_type, size_t n);

/* Boolean view: one byte per element, nonzero = true. */
typedef struct attn_btensor {
    const uint8_t *data;
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    int64_t stride[ATTN_MAX_RANK];
} attn_btensor;

/* Contiguous row-major views. */
ATTN_API attn_tensor attn_tensor_1d(float *data, int64_t n0);
ATTN_API attn_tensor attn_tensor_2d(float *data, int64_t n0, int64_t n1);
ATTN_API attn_tensor attn_tensor_3d(float *data, int64_t n0, int64_t n1, int64_t n2);
ATTN_API attn_tensor attn_tensor_4d(float *data, int64_t n0, int64_t n1, int64_t n2, int64_t n3);
/* Contiguous row-major views of any element type (data points at elements of that type). */
ATTN_API attn_tensor attn_tensor_2d_typed(void *data, attn_type dtype, int64_t n0, int64_t n1);
ATTN_API attn_tensor attn_tensor_4d_typed(void *data, attn_type dtype, int64_t n0, int64_t n1, int64_t n2, int64_t n3);
ATTN_API attn_btensor attn_btensor_2d(const uint8_t *data, int64_t n0, int64_t n1);
ATTN_API attn_btensor attn_btensor_4d(const uint8_t *data, int64_t n0, int64_t n1, int64_t n2, int64_t n3);

/* ATTN_OK when t (non-NULL) has one of the types in `allowed` (a mask of 1u << ATTN_TYPE_*);
 * ATTN_ERR_INVALID_ARGUMENT for a value outside the enum; ATTN_ERR_UNSUPPORTED otherwise, the
 * message naming fn, the argument and its type. */
#define ATTN_TYPES(x) (1u << (x))
ATTN_API attn_status attn_tensor_check_type(const char *fn, const char *name, const attn_tensor *t, unsigned allowed);

/* Number of elements, with overflow checks (ATTN_ERR_OVERFLOW on a hostile shape). */
ATTN_API attn_status attn_tensor_numel(const attn_tensor *t, size_t *numel);

/* Checked size arithmetic: return 0 and store the result, or return 1 on overflow. */
ATTN_API int attn_mul_overflow(size_t a, size_t b, size_t *out);
ATTN_API int attn_add_overflow(size_t a, size_t b, size_t *out);

/* ---- threads ------------------------------------------------------------------------------
 * Work is partitioned independently of the thread count, so results are bitwise identical for
 * any number of threads. n <= 0 restores the default (OpenMP's, or ATTN_NUM_THREADS).
 * ATTN_NUM_THREADS is read as a positive integer, at most ATTN_MAX_THREADS (a larger value gives
 * the bound); another value is ignored. attn_set_num_threads refuses n > ATTN_MAX_THREADS
 * (ATTN_ERR_INVALID_ARGUMENT naming the bound; the count is left as it was). */
#define ATTN_MAX_THREADS 4096
ATTN_API attn_status attn_set_num_threads(int n);
ATTN_API int attn_get_num_threads(void);

/* ---- CPU dispatch --------------------------------------------------------------------------
 * Kernels are chosen once at first use from cpuid; ATTN_ISA=ref|avx2|avx512 forces one (an ISA
 * the CPU lacks falls back to the best supported one). Each value is a row of the ISA registry
 * (attn/introspect.h describes the rows and the kernels that run). */
typedef enum attn_isa { ATTN_ISA_REF = 0, ATTN_ISA_AVX2 = 1, ATTN_ISA_AVX512 = 2 } attn_isa;
#define ATTN_ISA_COUNT 3

ATTN_API attn_isa attn_active_isa(void);
ATTN_API const char *attn_isa_name(attn_isa isa);
/* Best ISA the CPU supports (ignores ATTN_ISA). */
ATTN_API attn_isa attn_detected_isa(void);
/* Force an ISA at run time (tests use this to compare kernels); returns ATTN_ERR_UNSUPPORTED when
 * the CPU cannot run it. */
ATTN_API attn_status attn_force_isa(attn_isa isa);
/* The ATTN_CACHE environment value the library read (cache sizes for the kernels' blocking,
 * "l1=48K,l2=1M,l3=32M"; NULL when unset) and, when it was not usable and so ignored, why in
 * *problem (else NULL; problem may be NULL). Read once per process, with the CPU detection. */
ATTN_API const char *attn_cache_env(const char **problem);
/* Comma-separated CPU features attn looked for and found, e.g. "avx2,fma,avx512f,avx512bf16". */
ATTN_API const char *attn_cpu_features(void);
/* The same as bits, detected once per process (cpuid, and the OS's support of the wider
 * register state). Every kernel family's choice derives from them: one kernel context per
 * ISA, built once from the ISA registry's row. */
#define ATTN_CPU_SSE42 (1u << 0)
#define ATTN_CPU_AVX (1u << 1)
#define ATTN_CPU_AVX2 (1u << 2)
#define ATTN_CPU_FMA (1u << 3)
#define ATTN_CPU_AVX512F (1u << 4)
#define ATTN_CPU_AVX512BW (1u << 5)
#define ATTN_CPU_AVX512DQ (1u << 6)
#define ATTN_CPU_AVX512VL (1u << 7)
#define ATTN_CPU_AVX512BF16 (1u << 8)
#define ATTN_CPU_AMX_TILE (1u << 9)
#define ATTN_CPU_AMX_BF16 (1u << 10)
ATTN_API uint32_t attn_cpu_feature_bits(void);

#ifdef __cplusplus
}
#endif
#endif
