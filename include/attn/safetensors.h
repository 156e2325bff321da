/* attn safetensors: a validating reader (a file, read into memory, or a memory buffer) and a writer.
 *
 * Format: u64 little-endian header length N, N bytes of JSON header
 *   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the data buffer; offsets are relative to the buffer start. The reader treats the file as
 * hostile: every size and offset is checked and each violation has its own status code. */
#ifndef ATTN_SAFETENSORS_H
#define ATTN_SAFETENSORS_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes of safetensors validation, one per problem (mirroring the reference
 * implementation's errors): attn_status values in the range core.h reserves for them
 * (ATTN_STATUS_SAFETENSORS_FIRST .. _LAST), returned as attn_status and described by
 * attn_status_str. Values never change once released. They are not enumerators of attn_status:
 * a switch that names them switches on (int)status (-Wswitch flags their cases otherwise). */
#define ATTN_ERR_ST_HEADER_TOO_SMALL ((attn_status)20)     /* file shorter than the 8-byte length prefix */
#define ATTN_ERR_ST_HEADER_TOO_LARGE ((attn_status)21)     /* declared header length above the limit (100 MB) */
#define ATTN_ERR_ST_HEADER_TRUNCATED ((attn_status)22)     /* declared header length beyond the end of the file */
#define ATTN_ERR_ST_INVALID_HEADER_START ((attn_status)23) /* header does not start with '{' */
#define ATTN_ERR_ST_INVALID_JSON ((attn_status)24)         /* header is not the expected JSON object */
#define ATTN_ERR_ST_INVALID_UTF8 ((attn_status)25)         /* header is not valid UTF-8 */
#define ATTN_ERR_ST_UNKNOWN_DTYPE ((attn_status)26)
#define ATTN_ERR_ST_DUPLICATE_NAME ((attn_status)27)
#define ATTN_ERR_ST_INVALID_OFFSET ((attn_status)28)       /* offsets not contiguous, begin > end */
#define ATTN_ERR_ST_OFFSET_OUT_OF_BOUNDS ((attn_status)29) /* a tensor reaches past the data buffer */
#define ATTN_ERR_ST_INCOMPLETE_BUFFER ((attn_status)30)    /* the tensors do not cover the data buffer exactly */
#define ATTN_ERR_ST_TENSOR_INVALID_INFO ((attn_status)31)  /* byte length != product(shape) * dtype size */
#define ATTN_ERR_ST_SIZE_OVERFLOW ((attn_status)32)        /* product(shape) * dtype size overflows */
#define ATTN_ERR_ST_MISSING_FIELD ((attn_status)33)        /* a tensor entry lacks dtype, shape or data_offsets */
#define ATTN_ERR_ST_INVALID_METADATA ((attn_status)34)     /* __metadata__ is not an object of strings */

#define ATTN_SAFETENSORS_MAX_RANK 8
#define ATTN_SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u) /* as the reference implementation */

typedef enum attn_dtype {
    ATTN_DTYPE_BOOL = 0,
    ATTN_DTYPE_U8,
    ATTN_DTYPE_I8,
    ATTN_DTYPE_I16,
    ATTN_DTYPE_U16,
    ATTN_DTYPE_F16,
    ATTN_DTYPE_BF16,
    ATTN_DTYPE_I32,
    ATTN_DTYPE_U32,
    ATTN_DTYPE_F32,
    ATTN_DTYPE_I64,
    ATTN_DTYPE_U64,
    ATTN_DTYPE_F64,
    ATTN_DTYPE_F8_E4M3,
    ATTN_DTYPE_F8_E5M2,
    ATTN_DTYPE_COUNT
} attn_dtype;

ATTN_API const char *attn_dtype_name(attn_dtype dt); /* "F32", ... */
ATTN_API size_t attn_dtype_size(attn_dtype dt);      /* bytes per element */

typedef struct attn_safetensors_tensor {
    const char *name; /* NUL-terminated, owned by the file object */
    attn_dtype dtype;
    int rank;
    int64_t shape[ATTN_SAFETENSORS_MAX_RANK];
    const void *data; /* not necessarily aligned */
    size_t nbytes;
} attn_safetensors_tensor;

typedef struct attn_safetensors attn_safetensors;

/* Open and validate. On failure *out is NULL and attn_last_error() names the problem. The file is
 * read into memory (not mapped), so another process truncating or rewriting it meanwhile gives an
 * ATTN_ERR_IO ("file was truncated while being read") or a validation error, never a crash. */
ATTN_API attn_status attn_safetensors_open_file(const char *path, attn_safetensors **out);
/* The buffer is not copied: it must outlive the returned object. */
ATTN_API attn_status attn_safetensors_open_memory(const void *buf, size_t len, attn_safetensors **out);
ATTN_API void attn_safetensors_close(attn_safetensors *st);

ATTN_API size_t attn_safetensors_count(const attn_safetensors *st);
/* Tensors in data-offset order. NULL when i is out of range. */
ATTN_API const attn_safetensors_tensor *attn_safetensors_get(const attn_safetensors *st, size_t i);
/* NULL when absent. */
ATTN_API const attn_safetensors_tensor *attn_safetensors_find(const attn_safetensors *st, const char *name);
ATTN_API size_t attn_safetensors_metadata_count(const attn_safetensors *st);
ATTN_API attn_status attn_safetensors_metadata_get(const attn_safetensors *st, size_t i, const char **key,
                                                   const char **value);
/* NULL when absent. */
ATTN_API const char *attn_safetensors_metadata_find(const attn_safetensors *st, const char *key);

/* Copy a tensor to float32, converting from F32, F16, BF16 or F64 (and integer/bool types by
 * value). count must equal the tensor's element count (ATTN_ERR_SHAPE otherwise). */
ATTN_API attn_status attn_safetensors_read_f32(const attn_safetensors *st, const char *name, float *dst, size_t count);
/* The same, also checking the shape: rank and every dimension must match. */
ATTN_API attn_status attn_safetensors_read_f32_shape(const attn_safetensors *st, const char *name, float *dst, int rank,
                                                     const int64_t *shape);

/* ---- writer ------------------------------------------------------------------------------
 * Tensors are referenced, not copied, until write: the data must stay valid until then.
 * Written in insertion order, with contiguous offsets and the header padded with spaces to a
 * multiple of 8 bytes (as the reference implementation does). */
typedef struct attn_safetensors_writer attn_safetensors_writer;

ATTN_API attn_status attn_safetensors_writer_create(attn_safetensors_writer **out);
ATTN_API void attn_safetensors_writer_free(attn_safetensors_writer *w);
ATTN_API attn_status attn_safetensors_writer_add(attn_safetensors_writer *w, const char *name, attn_dtype dtype,
                                                 int rank, const int64_t *shape, const void *data);
ATTN_API attn_status attn_safetensors_writer_add_metadata(attn_safetensors_writer *w, const char *key,
                                                          const char *value);
/* Written to a new temporary file of an unpredictable name next to path (created exclusively),
 * fsynced, then renamed over path (a crash leaves the old file intact). path must be missing or a
 * regular file: a device, FIFO, folder or symbolic link there is refused with ATTN_ERR_IO. */
ATTN_API attn_status attn_safetensors_writer_write_file(attn_safetensors_writer *w, const char *path);
/* Serialized into a malloc'ed buffer that the caller frees with free(). */
ATTN_API attn_status attn_safetensors_writer_write_memory(attn_safetensors_writer *w, void **buf, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
