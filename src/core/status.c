#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "attn/safetensors.h" /* the ATTN_ERR_ST_* codes */
#include "internal.h"

static _Thread_local char last_error[512];

/* On the int value: the safetensors codes are attn_status values but not enumerators of core.h's
 * enum (gcc's -Wswitch would call their cases outside it). */
const char *attn_status_str(attn_status s) {
    switch ((int)s) {
    case ATTN_OK: return "ok";
    case ATTN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case ATTN_ERR_SHAPE: return "shape mismatch";
    case ATTN_ERR_OVERFLOW: return "size overflow";
    case ATTN_ERR_OUT_OF_MEMORY: return "out of memory";
    case ATTN_ERR_WORKSPACE: return "workspace too small";
    case ATTN_ERR_IO: return "I/O error";
    case ATTN_ERR_UNSUPPORTED: return "unsupported";
    case ATTN_ERR_NOT_FOUND: return "not found";
    case ATTN_ERR_NUMERIC: return "non-finite value";
    case ATTN_ERR_CANCELLED: return "cancelled";
    case ATTN_ERR_ST_HEADER_TOO_SMALL: return "safetensors: file too small for a header";
    case ATTN_ERR_ST_HEADER_TOO_LARGE: return "safetensors: header too large";
    case ATTN_ERR_ST_HEADER_TRUNCATED: return "safetensors: header runs past the end of the file";
    case ATTN_ERR_ST_INVALID_HEADER_START: return "safetensors: header does not start with '{'";
    case ATTN_ERR_ST_INVALID_JSON: return "safetensors: header is not valid JSON";
    case ATTN_ERR_ST_INVALID_UTF8: return "safetensors: header is not valid UTF-8";
    case ATTN_ERR_ST_UNKNOWN_DTYPE: return "safetensors: unknown dtype";
    case ATTN_ERR_ST_DUPLICATE_NAME: return "safetensors: duplicate tensor name";
    case ATTN_ERR_ST_INVALID_OFFSET: return "safetensors: offsets not contiguous";
    case ATTN_ERR_ST_OFFSET_OUT_OF_BOUNDS: return "safetensors: tensor data out of bounds";
    case ATTN_ERR_ST_INCOMPLETE_BUFFER: return "safetensors: tensors do not cover the data buffer";
    case ATTN_ERR_ST_TENSOR_INVALID_INFO: return "safetensors: byte length does not match shape and dtype";
    case ATTN_ERR_ST_SIZE_OVERFLOW: return "safetensors: tensor size overflows";
    case ATTN_ERR_ST_MISSING_FIELD: return "safetensors: tensor entry lacks a field";
    case ATTN_ERR_ST_INVALID_METADATA: return "safetensors: __metadata__ is not a string map";
    }
    return "unknown status";
}

/* A signal handler may store it only if the store cannot take a lock. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "attn_cancel_request must be async-signal-safe");
static atomic_int cancel_flag;

void attn_cancel_request(void) { atomic_store(&cancel_flag, 1); }

void attn_cancel_clear(void) { atomic_store(&cancel_flag, 0); }

int attn_cancel_requested(void) { return atomic_load_explicit(&cancel_flag, memory_order_relaxed); }

const char *attn_last_error(void) { return last_error; }

void attn_clear_error(void) { last_error[0] = '\0'; }

attn_status attn_error(attn_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

const char *attn_shape_str(const int64_t *shape, int rank, char *buf, size_t len) {
    size_t used = 0;
    if (len == 0) return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}
