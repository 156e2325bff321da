/* safetensors reader (validating, file read into memory or caller's memory) and writer: see include/attn/safetensors.h.
 *
 * The reader mirrors the checks of the reference implementation (the Hugging Face `safetensors`
 * crate), each with its own status code, in the reference's order:
 *   file < 8 bytes                                    ATTN_ERR_ST_HEADER_TOO_SMALL
 *   header length > ATTN_SAFETENSORS_MAX_HEADER         ATTN_ERR_ST_HEADER_TOO_LARGE
 *   header length beyond the end of the file           ATTN_ERR_ST_HEADER_TRUNCATED
 *   header not UTF-8                                   ATTN_ERR_ST_INVALID_UTF8
 *   header not starting with '{'                       ATTN_ERR_ST_INVALID_HEADER_START
 *   header not JSON, an entry of the wrong JSON type, a name with a NUL
 *                                                      ATTN_ERR_ST_INVALID_JSON
 *   __metadata__ not an object of strings (null is accepted as "none", as serde does)
 *                                                      ATTN_ERR_ST_INVALID_METADATA
 *   an entry without dtype, shape or data_offsets       ATTN_ERR_ST_MISSING_FIELD
 *   a dtype outside the known set                       ATTN_ERR_ST_UNKNOWN_DTYPE
 *   more than ATTN_SAFETENSORS_MAX_RANK dimensions      ATTN_ERR_UNSUPPORTED (valid for the format,
 *                                                      not representable here)
 *   a name twice (also __metadata__ twice)              ATTN_ERR_ST_DUPLICATE_NAME
 * then, tensors sorted by (begin, end, name):
 *   begin != previous end (first: 0), or end < begin    ATTN_ERR_ST_INVALID_OFFSET
 *   product(shape) * dtype size overflows (or a dimension > INT64_MAX)
 *                                                      ATTN_ERR_ST_SIZE_OVERFLOW
 *   end - begin != product(shape) * dtype size          ATTN_ERR_ST_TENSOR_INVALID_INFO
 *   end > data buffer size                              ATTN_ERR_ST_OFFSET_OUT_OF_BOUNDS
 *   last end != data buffer size                        ATTN_ERR_ST_INCOMPLETE_BUFFER
 * Every message starts with "safetensors: " (then "PATH: " when opened from a file). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "attn/safetensors.h"
#include "core/internal.h"
#include "io/json.h"
#include "io/safe_file.h"
#include "io/st_internal.h"

/* ---- dtypes ----------------------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ATTN_DTYPE_BOOL] = {"BOOL", 1}, [ATTN_DTYPE_U8] = {"U8", 1},           [ATTN_DTYPE_I8] = {"I8", 1},
    [ATTN_DTYPE_I16] = {"I16", 2},   [ATTN_DTYPE_U16] = {"U16", 2},         [ATTN_DTYPE_F16] = {"F16", 2},
    [ATTN_DTYPE_BF16] = {"BF16", 2}, [ATTN_DTYPE_I32] = {"I32", 4},         [ATTN_DTYPE_U32] = {"U32", 4},
    [ATTN_DTYPE_F32] = {"F32", 4},   [ATTN_DTYPE_I64] = {"I64", 8},         [ATTN_DTYPE_U64] = {"U64", 8},
    [ATTN_DTYPE_F64] = {"F64", 8},   [ATTN_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [ATTN_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};
_Static_assert(sizeof dtypes / sizeof dtypes[0] == ATTN_DTYPE_COUNT, "dtypes[] needs one row per attn_dtype");

const char *attn_dtype_name(attn_dtype dt) { return (unsigned)dt < ATTN_DTYPE_COUNT ? dtypes[dt].name : "unknown"; }

size_t attn_dtype_size(attn_dtype dt) { return (unsigned)dt < ATTN_DTYPE_COUNT ? dtypes[dt].size : 0; }

static int dtype_from_name(const char *s, size_t len, attn_dtype *out) {
    for (int i = 0; i < ATTN_DTYPE_COUNT; i++) {
        if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, s, len) == 0) {
            *out = (attn_dtype)i;
            return 1;
        }
    }
    return 0;
}

/* ---- messages ------------------------------------------------------------------------------ */

/* A name for messages: at most ~60 bytes, non-printable bytes as \xNN. */
static const char *show(const char *s, size_t len, char *buf, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 8 >= n || i >= 60) {
            snprintf(buf + o, n - o, "...");
            return buf;
        }
        if (c < 0x20 || c == 0x7F || c == '\'' || c == '\\')
            o += (size_t)snprintf(buf + o, n - o, "\\x%02X", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = '\0';
    return buf;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static attn_status
st_fail(const char *path, attn_status s, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path) return attn_error(s, "safetensors: %s: %s", path, msg);
    return attn_error(s, "safetensors: %s", msg);
}

static const char *errstr(int e, char *buf, size_t n) {
    if (strerror_r(e, buf, n) != 0) snprintf(buf, n, "error %d", e);
    return buf;
}

/* ---- the file object ---------------------------------------------------------------------- */

void (*attn_st_read_hook)(int fd) = NULL;

struct attn_safetensors {
    attn_safetensors_tensor *tensors; /* data-offset order */
    size_t count;
    size_t *by_name;                       /* indices into tensors, sorted by name */
    const char **meta_keys, **meta_values; /* file order */
    size_t meta_count;
    size_t *meta_by_key; /* indices sorted by key */
    char *strings;       /* names, keys and values */
    void *file;          /* the file's bytes read into memory (open_file), or NULL */
};

/* What the header says about one tensor, before validation of its offsets. */
typedef struct entry {
    const char *name;
    size_t name_len;
    attn_dtype dtype;
    int rank;
    int64_t shape[ATTN_SAFETENSORS_MAX_RANK];
    uint64_t begin, end;
} entry;

static int entry_name_cmp(const void *a, const void *b) {
    const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
    return strcmp(x->name, y->name); /* names hold no NUL (checked) */
}

static int entry_offset_cmp(const void *a, const void *b) {
    const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* qsort comparators over index arrays need the base: kept in a file-scope pointer would not be
 * thread-safe, so sort pointers instead and convert. */
typedef struct named {
    const char *name;
    size_t index;
} named;

static int named_cmp(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A JSON integer dimension or offset: 1 ok, 0 not a non-negative integer that fits u64. */
static int json_u64(const attn_json *v, uint64_t *out) { return attn_json_as_u64(v, out); }

static const char *json_what(const attn_json *v, char *buf, size_t n) {
    if (v->type == ATTN_JSON_NUMBER) {
        snprintf(buf, n, "%.30s", v->str);
        return buf;
    }
    snprintf(buf, n, "a %s", attn_json_type_name(v->type));
    return buf;
}

static attn_status parse_entry(const char *path, const attn_json *key, const attn_json *val, entry *e) {
    char nb[80], wb[48];
    const char *nm = show(key->str, key->len, nb, sizeof nb);
    memset(e, 0, sizeof *e);
    e->name = key->str;
    e->name_len = key->len;
    if (strlen(key->str) != key->len)
        return st_fail(path, ATTN_ERR_ST_INVALID_JSON, "tensor name '%s' contains a NUL character", nm);
    if (val->type != ATTN_JSON_OBJECT)
        return st_fail(path, ATTN_ERR_ST_INVALID_JSON, "tensor '%s': entry is %s, not an object", nm,
                       json_what(val, wb, sizeof wb));
    const attn_json *dt = attn_json_get(val, "dtype");
    const attn_json *shape = attn_json_get(val, "shape");
    const attn_json *offs = attn_json_get(val, "data_offsets");
    if (!dt || !shape || !offs)
        return st_fail(path, ATTN_ERR_ST_MISSING_FIELD, "tensor '%s': entry has no \"%s\"", nm,
                       !dt      ? "dtype"
                       : !shape ? "shape"
                                : "data_offsets");
    if (dt->type != ATTN_JSON_STRING)
        return st_fail(path, ATTN_ERR_ST_INVALID_JSON, "tensor '%s': dtype is %s, not a string", nm,
                       json_what(dt, wb, sizeof wb));
    if (!dtype_from_name(dt->str, dt->len, &e->dtype)) {
        char db[80];
        return st_fail(path, ATTN_ERR_ST_UNKNOWN_DTYPE, "tensor '%s': unknown dtype '%s'", nm,
                       show(dt->str, dt->len, db, sizeof db));
    }
    if (shape->type != ATTN_JSON_ARRAY)
        return st_fail(path, ATTN_ERR_ST_INVALID_JSON, "tensor '%s': shape is %s, not an array", nm,
                       json_what(shape, wb, sizeof wb));
    for (size_t i = 0; i < shape->len; i++) {
        uint64_t d;
        if (!json_u64(&shape->items[i], &d))
            return st_fail(path, ATTN_ERR_ST_INVALID_JSON, "tensor '%s': shape[%zu] is %s, not a non-negative integer",
                           nm, i, json_what(&shape->items[i], wb, sizeof wb));
        if (d > (uint64_t)INT64_MAX)
            return st_fail(path, ATTN_ERR_ST_SIZE_OVERFLOW, "tensor '%s': shape[%zu] = %llu does not fit in int64", nm,
                           i, (unsigned long long)d);
        if (i < ATTN_SAFETENSORS_MAX_RANK) e->shape[i] = (int64_t)d;
    }
    if (shape->len > ATTN_SAFETENSORS_MAX_RANK)
        return st_fail(path, ATTN_ERR_UNSUPPORTED, "tensor '%s': rank %zu, at most %d supported", nm, shape->len,
                       ATTN_SAFETENSORS_MAX_RANK);
    e->rank = (int)shape->len;
    if (offs->type != ATTN_JSON_ARRAY || offs->len != 2)
        return st_fail(path, ATTN_ERR_ST_INVALID_JSON, "tensor '%s': data_offsets must be an array of two integers",
                       nm);
    for (size_t i = 0; i < 2; i++) {
        if (!json_u64(&offs->items[i], i ? &e->end : &e->begin))
            return st_fail(path, ATTN_ERR_ST_INVALID_JSON,
                           "tensor '%s': data_offsets[%zu] is %s, not a non-negative integer", nm, i,
                           json_what(&offs->items[i], wb, sizeof wb));
    }
    return ATTN_OK;
}

/* The 8-byte length prefix and the header's framing: *hdr, *n the header JSON. */
static attn_status check_prefix(const unsigned char *buf, size_t len, const char *path, const char **hdr, size_t *n) {
    if (len < 8)
        return st_fail(path, ATTN_ERR_ST_HEADER_TOO_SMALL, "file is %zu bytes, shorter than the 8-byte header length",
                       len);
    uint64_t n64 = load_le64(buf);
    if (n64 > ATTN_SAFETENSORS_MAX_HEADER)
        return st_fail(path, ATTN_ERR_ST_HEADER_TOO_LARGE, "header length %llu exceeds the limit of %u bytes",
                       (unsigned long long)n64, ATTN_SAFETENSORS_MAX_HEADER);
    *n = (size_t)n64;
    if (*n > len - 8)
        return st_fail(path, ATTN_ERR_ST_HEADER_TRUNCATED,
                       "header length %zu but only %zu bytes follow the length prefix", *n, len - 8);
    *hdr = (const char *)buf + 8;
    size_t bad = 0;
    if (!attn_json_utf8_valid(*hdr, *n, &bad))
        return st_fail(path, ATTN_ERR_ST_INVALID_UTF8, "header is not valid UTF-8 (byte %zu: 0x%02X)", bad,
                       (unsigned char)(*hdr)[bad]);
    if (*n == 0 || (*hdr)[0] != '{')
        return st_fail(path, ATTN_ERR_ST_INVALID_HEADER_START, "header does not start with '{'%s",
                       *n == 0 ? " (it is empty)" : "");
    return ATTN_OK;
}

/* The root object's members: tensor entries into entries / order (*ne of them), __metadata__
 * into *meta (NULL when absent or null). */
static attn_status collect_entries(const char *path, const attn_json *root, entry *entries, entry **order, size_t *ne,
                                   const attn_json **meta) {
    char sb[200];
    int seen_meta = 0;
    for (size_t i = 0; i < root->len; i++) {
        const attn_json *k = attn_json_member_key(root, i), *v = attn_json_member_value(root, i);
        if (k->len == 12 && memcmp(k->str, "__metadata__", 12) == 0) {
            if (seen_meta++) return st_fail(path, ATTN_ERR_ST_DUPLICATE_NAME, "__metadata__ appears twice");
            if (v->type == ATTN_JSON_NULL) continue; /* serde reads null as no metadata */
            if (v->type != ATTN_JSON_OBJECT)
                return st_fail(path, ATTN_ERR_ST_INVALID_METADATA, "__metadata__ is %s, not an object",
                               json_what(v, sb, sizeof sb));
            *meta = v;
            continue;
        }
        attn_status status = parse_entry(path, k, v, &entries[*ne]);
        if (status != ATTN_OK) return status;
        order[*ne] = &entries[*ne];
        (*ne)++;
    }
    return ATTN_OK;
}

/* Metadata: strings only, no NUL, no repeated key; *sorted (nm entries, caller frees) by key. */
static attn_status check_metadata(const char *path, const attn_json *meta, named **sorted) {
    char nb[80], sb[200];
    const size_t nm = meta ? meta->len : 0;
    if (!nm) return ATTN_OK;
    named *ms = attn__malloc(nm * sizeof *ms);
    if (!ms) return st_fail(path, ATTN_ERR_OUT_OF_MEMORY, "out of memory");
    *sorted = ms;
    for (size_t i = 0; i < nm; i++) {
        const attn_json *k = attn_json_member_key(meta, i), *v = attn_json_member_value(meta, i);
        const char *kn = show(k->str, k->len, nb, sizeof nb);
        if (v->type != ATTN_JSON_STRING)
            return st_fail(path, ATTN_ERR_ST_INVALID_METADATA, "__metadata__ '%s' is %s, not a string", kn,
                           json_what(v, sb, sizeof sb));
        if (strlen(k->str) != k->len || strlen(v->str) != v->len)
            return st_fail(path, ATTN_ERR_ST_INVALID_METADATA, "__metadata__ '%s' contains a NUL character", kn);
        ms[i].name = k->str;
        ms[i].index = i;
    }
    qsort(ms, nm, sizeof *ms, named_cmp);
    for (size_t i = 1; i < nm; i++)
        if (strcmp(ms[i - 1].name, ms[i].name) == 0)
            return st_fail(path, ATTN_ERR_ST_INVALID_METADATA, "__metadata__ key '%s' appears twice",
                           show(ms[i].name, strlen(ms[i].name), nb, sizeof nb));
    return ATTN_OK;
}

/* Names unique; then, in offset order, each tensor's bytes contiguous from 0, its size its shape's,
 * within the data buffer, and the tensors covering it exactly. order is left in offset order. */
static attn_status check_layout(const char *path, entry **order, size_t ne, size_t data_len) {
    char nb[80], sb[200];
    if (ne > 1) {
        qsort(order, ne, sizeof *order, entry_name_cmp);
        for (size_t i = 1; i < ne; i++)
            if (strcmp(order[i - 1]->name, order[i]->name) == 0)
                return st_fail(path, ATTN_ERR_ST_DUPLICATE_NAME, "tensor '%s' appears twice",
                               show(order[i]->name, order[i]->name_len, nb, sizeof nb));
    }
    qsort(order, ne, sizeof *order, entry_offset_cmp);
    uint64_t expect = 0;
    for (size_t i = 0; i < ne; i++) {
        const entry *e = order[i];
        const char *en = show(e->name, e->name_len, nb, sizeof nb);
        const unsigned long long b = e->begin, en_ = e->end;
        if (e->end < e->begin)
            return st_fail(path, ATTN_ERR_ST_INVALID_OFFSET,
                           "tensor '%s': data_offsets [%llu, %llu] end before they begin", en, b, en_);
        if (e->begin != expect) {
            if (i == 0)
                return st_fail(path, ATTN_ERR_ST_INVALID_OFFSET,
                               "tensor '%s': data_offsets [%llu, %llu] but the first tensor must begin at 0", en, b,
                               en_);
            return st_fail(path, ATTN_ERR_ST_INVALID_OFFSET,
                           "tensor '%s': data_offsets [%llu, %llu] but the previous tensor ends at %llu", en, b, en_,
                           (unsigned long long)expect);
        }
        size_t numel = 1, nbytes;
        int of = 0;
        for (int d = 0; d < e->rank && !of; d++) of = attn_mul_overflow(numel, (size_t)e->shape[d], &numel);
        if (of || attn_mul_overflow(numel, dtypes[e->dtype].size, &nbytes))
            return st_fail(path, ATTN_ERR_ST_SIZE_OVERFLOW, "tensor '%s': shape %s x %s overflows", en,
                           attn_shape_str(e->shape, e->rank, sb, sizeof sb), dtypes[e->dtype].name);
        if (e->end - e->begin != (uint64_t)nbytes)
            return st_fail(path, ATTN_ERR_ST_TENSOR_INVALID_INFO,
                           "tensor '%s': shape %s x %s = %zu bytes but data_offsets give %llu", en,
                           attn_shape_str(e->shape, e->rank, sb, sizeof sb), dtypes[e->dtype].name, nbytes,
                           (unsigned long long)(e->end - e->begin));
        if (e->end > (uint64_t)data_len)
            return st_fail(path, ATTN_ERR_ST_OFFSET_OUT_OF_BOUNDS,
                           "tensor '%s': data_offsets [%llu, %llu] reach past the data buffer of %zu bytes", en, b, en_,
                           data_len);
        expect = e->end;
    }
    if (expect != (uint64_t)data_len)
        return st_fail(path, ATTN_ERR_ST_INCOMPLETE_BUFFER,
                       "tensors cover %llu bytes but the data buffer has %zu bytes", (unsigned long long)expect,
                       data_len);
    return ATTN_OK;
}

/* The object, from validated parts: one string pool, tensors in offset order, sorted indices. */
static attn_status build_object(const char *path, entry *const *order, size_t ne, const attn_json *meta,
                                const named *meta_sorted, const unsigned char *data, attn_safetensors *st) {
    const size_t nm = meta ? meta->len : 0;
    size_t pool = 0;
    for (size_t i = 0; i < ne; i++) pool += order[i]->name_len + 1; /* <= header size */
    for (size_t i = 0; i < nm; i++)
        pool += attn_json_member_key(meta, i)->len + attn_json_member_value(meta, i)->len + 2;
    st->strings = attn__malloc(pool ? pool : 1);
    st->tensors = attn__calloc(ne ? ne : 1, sizeof *st->tensors);
    st->by_name = attn__malloc((ne ? ne : 1) * sizeof *st->by_name);
    st->meta_keys = attn__malloc((nm ? nm : 1) * sizeof *st->meta_keys);
    st->meta_values = attn__malloc((nm ? nm : 1) * sizeof *st->meta_values);
    st->meta_by_key = attn__malloc((nm ? nm : 1) * sizeof *st->meta_by_key);
    named *names = attn__malloc((ne ? ne : 1) * sizeof *names);
    if (!st->strings || !st->tensors || !st->by_name || !st->meta_keys || !st->meta_values || !st->meta_by_key ||
        !names) {
        attn__free(names);
        return st_fail(path, ATTN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    char *sp = st->strings;
    for (size_t i = 0; i < ne; i++) {
        const entry *e = order[i];
        attn_safetensors_tensor *t = &st->tensors[i];
        memcpy(sp, e->name, e->name_len + 1);
        t->name = sp;
        sp += e->name_len + 1;
        t->dtype = e->dtype;
        t->rank = e->rank;
        memcpy(t->shape, e->shape, sizeof t->shape);
        t->data = data + e->begin;
        t->nbytes = (size_t)(e->end - e->begin);
        names[i].name = t->name;
        names[i].index = i;
    }
    qsort(names, ne, sizeof *names, named_cmp);
    for (size_t i = 0; i < ne; i++) st->by_name[i] = names[i].index;
    attn__free(names);
    for (size_t i = 0; i < nm; i++) {
        const attn_json *k = attn_json_member_key(meta, i), *v = attn_json_member_value(meta, i);
        memcpy(sp, k->str, k->len + 1);
        st->meta_keys[i] = sp;
        sp += k->len + 1;
        memcpy(sp, v->str, v->len + 1);
        st->meta_values[i] = sp;
        sp += v->len + 1;
        st->meta_by_key[i] = meta_sorted[i].index; /* same order: strcmp on equal strings */
    }
    st->count = ne;
    st->meta_count = nm;
    return ATTN_OK;
}

/* Validate buf[0..len) and fill st. The JSON document is freed before returning. */
static attn_status parse_file(const unsigned char *buf, size_t len, const char *path, attn_safetensors *st) {
    const char *hdr = NULL;
    size_t n = 0;
    attn_status status = check_prefix(buf, len, path, &hdr, &n);
    if (status != ATTN_OK) return status;
    const unsigned char *data = buf + 8 + n;
    const size_t data_len = len - 8 - n;
    attn_json_doc *doc = NULL;
    attn_json_error jerr;
    attn_json_status js = attn_json_parse(hdr, n, NULL, &doc, &jerr);
    if (js == ATTN_JSON_ERR_NOMEM) return st_fail(path, ATTN_ERR_OUT_OF_MEMORY, "header JSON: out of memory");
    if (js == ATTN_JSON_ERR_UTF8) return st_fail(path, ATTN_ERR_ST_INVALID_UTF8, "header JSON: %s", jerr.message);
    if (js != ATTN_JSON_OK) return st_fail(path, ATTN_ERR_ST_INVALID_JSON, "header JSON: %s", jerr.message);
    const attn_json *root = attn_json_root(doc);
    entry *entries = NULL;
    entry **order = NULL;
    named *meta_sorted = NULL;
    const attn_json *meta = NULL;
    size_t ne = 0;
    if (root->type != ATTN_JSON_OBJECT) {
        status = st_fail(path, ATTN_ERR_ST_INVALID_JSON, "header is not a JSON object");
        goto done;
    }
    entries = attn__calloc(root->len ? root->len : 1, sizeof *entries);
    order = attn__calloc(root->len ? root->len : 1, sizeof *order);
    if (!entries || !order) {
        status = st_fail(path, ATTN_ERR_OUT_OF_MEMORY, "out of memory for %zu entries", root->len);
        goto done;
    }
    if ((status = collect_entries(path, root, entries, order, &ne, &meta)) ||
        (status = check_metadata(path, meta, &meta_sorted)) || (status = check_layout(path, order, ne, data_len)))
        goto done;
    status = build_object(path, order, ne, meta, meta_sorted, data, st);
done:
    attn__free(meta_sorted);
    attn__free(order);
    attn__free(entries);
    attn_json_free(doc);
    return status;
}

void attn_safetensors_close(attn_safetensors *st) {
    if (!st) return;
    attn__free(st->file);
    attn__free(st->tensors);
    attn__free(st->by_name);
    attn__free(st->meta_keys);
    attn__free(st->meta_values);
    attn__free(st->meta_by_key);
    attn__free(st->strings);
    attn__free(st);
}

attn_status attn_safetensors_open_memory(const void *buf, size_t len, attn_safetensors **out) {
    ATTN_CHECK_NOT_NULL("attn_safetensors_open_memory", out);
    *out = NULL;
    if (!buf && len) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_open_memory: buf is NULL");
    attn_safetensors *st = attn__calloc(1, sizeof *st);
    if (!st) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_safetensors_open_memory: out of memory");
    attn_status s = parse_file(buf ? buf : (const void *)"", len, NULL, st);
    if (s != ATTN_OK) {
        attn_safetensors_close(st);
        return s;
    }
    *out = st;
    return ATTN_OK;
}

attn_status attn_safetensors_open_file(const char *path, attn_safetensors **out) {
    ATTN_CHECK_NOT_NULL("attn_safetensors_open_file", out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL("attn_safetensors_open_file", path);
    char eb[128];
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block: refused below */
    if (fd < 0) return st_fail(path, ATTN_ERR_IO, "cannot open: %s", errstr(errno, eb, sizeof eb));
    struct stat sbuf;
    if (fstat(fd, &sbuf) != 0) {
        int e = errno;
        close(fd);
        return st_fail(path, ATTN_ERR_IO, "cannot stat: %s", errstr(e, eb, sizeof eb));
    }
    if (!S_ISREG(sbuf.st_mode)) {
        close(fd);
        return st_fail(path, ATTN_ERR_IO, "not a regular file");
    }
    if (sbuf.st_size < 0 || (uintmax_t)sbuf.st_size > (uintmax_t)SIZE_MAX) {
        close(fd);
        return st_fail(path, ATTN_ERR_IO, "file too large for memory");
    }
    size_t len = (size_t)sbuf.st_size;
    attn_safetensors *st = attn__calloc(1, sizeof *st);
    if (!st) {
        close(fd);
        return st_fail(path, ATTN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    /* Read, not mmap: a mapping of a file that another process truncates raises SIGBUS on the first
     * access past the new end, killing the program; a read just comes back short. The weights are
     * copied into the model anyway, so the copy costs the file's size only while loading. */
    const void *buf = "";
    if (len > 0) {
        st->file = attn__malloc(len);
        if (!st->file) {
            close(fd);
            attn__free(st);
            return st_fail(path, ATTN_ERR_OUT_OF_MEMORY, "out of memory reading %zu bytes", len);
        }
        if (attn_st_read_hook) attn_st_read_hook(fd);
        size_t n = 0;
        while (n < len) { /* a file that grows meanwhile is read up to its size at open */
            const ssize_t r = pread(fd, (char *)st->file + n, len - n, (off_t)n);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                int e = errno;
                close(fd);
                attn_safetensors_close(st);
                if (r == 0)
                    return st_fail(path, ATTN_ERR_IO, "file was truncated while being read (%zu of %zu bytes)", n, len);
                return st_fail(path, ATTN_ERR_IO, "cannot read: %s", errstr(e, eb, sizeof eb));
            }
            n += (size_t)r;
        }
        buf = st->file;
    }
    close(fd);
    attn_status s = parse_file(buf, len, path, st);
    if (s != ATTN_OK) {
        attn_safetensors_close(st);
        return s;
    }
    *out = st;
    return ATTN_OK;
}

/* ---- queries ------------------------------------------------------------------------------ */

size_t attn_safetensors_count(const attn_safetensors *st) { return st ? st->count : 0; }

const attn_safetensors_tensor *attn_safetensors_get(const attn_safetensors *st, size_t i) {
    return st && i < st->count ? &st->tensors[i] : NULL;
}

const attn_safetensors_tensor *attn_safetensors_find(const attn_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    size_t lo = 0, hi = st->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const attn_safetensors_tensor *t = &st->tensors[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t attn_safetensors_metadata_count(const attn_safetensors *st) { return st ? st->meta_count : 0; }

attn_status attn_safetensors_metadata_get(const attn_safetensors *st, size_t i, const char **key, const char **value) {
    ATTN_CHECK_NOT_NULL("attn_safetensors_metadata_get", st);
    if (i >= st->meta_count)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_safetensors_metadata_get: index %zu out of range (%zu entries)", i, st->meta_count);
    if (key) *key = st->meta_keys[i];
    if (value) *value = st->meta_values[i];
    return ATTN_OK;
}

const char *attn_safetensors_metadata_find(const attn_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    size_t lo = 0, hi = st->meta_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        size_t j = st->meta_by_key[mid];
        int c = strcmp(key, st->meta_keys[j]);
        if (c == 0) return st->meta_values[j];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* ---- conversion to float32 ---------------------------------------------------------------- */

static uint16_t ld16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t ld32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld64(const unsigned char *p) { return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32); }

static float bits_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* IEEE half to float, exact (subnormals normalized, inf and nan kept with their payload). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        uint32_t e = 113; /* 127 - 14: the exponent of 2^-14 */
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        return bits_f32(sign | (e << 23) | ((man & 0x3FFu) << 13));
    }
    if (exp == 31) return bits_f32(sign | 0x7F800000u | (man << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* float8 e4m3 "fn" (no infinities; S.1111.111 is NaN), bias 7. */
static float f8e4m3_to_f32(unsigned char v) {
    uint32_t sign = (uint32_t)(v & 0x80u) << 24;
    uint32_t exp = (v >> 3) & 0xFu, man = v & 0x7u;
    if (exp == 15 && man == 7) return bits_f32(sign | 0x7FC00000u);
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        uint32_t e = 121; /* 127 - 6 */
        while (!(man & 0x8u)) {
            man <<= 1;
            e--;
        }
        return bits_f32(sign | (e << 23) | ((man & 0x7u) << 20));
    }
    return bits_f32(sign | ((exp + 120u) << 23) | (man << 20));
}

/* double to float with round-to-nearest-even, defined for every input. */
static float f64_to_f32(double d) {
    if (d != d) {
        uint64_t b;
        memcpy(&b, &d, sizeof b);
        /* keep sign and the top of the payload, quiet */
        return bits_f32((uint32_t)((b >> 32) & 0x80000000u) | 0x7FC00000u | (uint32_t)((b >> 29) & 0x3FFFFFu));
    }
    if (d > FLT_MAX) return d >= 0x1.ffffffp+127 ? (float)INFINITY : FLT_MAX;
    if (d < -FLT_MAX) return d <= -0x1.ffffffp+127 ? -(float)INFINITY : -FLT_MAX;
    return (float)d;
}

static void convert(const attn_safetensors_tensor *t, float *dst, size_t n) {
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case ATTN_DTYPE_F32:
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (n) memcpy(dst, p, n * 4);
#else
        for (size_t i = 0; i < n; i++) dst[i] = bits_f32(ld32(p + 4 * i));
#endif
        break;
    case ATTN_DTYPE_F16:
        for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(ld16(p + 2 * i));
        break;
    case ATTN_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = bits_f32((uint32_t)ld16(p + 2 * i) << 16);
        break;
    case ATTN_DTYPE_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t b = ld64(p + 8 * i);
            double d;
            memcpy(&d, &b, sizeof d);
            dst[i] = f64_to_f32(d);
        }
        break;
    case ATTN_DTYPE_F8_E4M3:
        for (size_t i = 0; i < n; i++) dst[i] = f8e4m3_to_f32(p[i]);
        break;
    case ATTN_DTYPE_F8_E5M2:
        for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32((uint16_t)(p[i] << 8));
        break;
    case ATTN_DTYPE_BOOL:
        for (size_t i = 0; i < n; i++) dst[i] = p[i] ? 1.0f : 0.0f;
        break;
    case ATTN_DTYPE_U8:
        for (size_t i = 0; i < n; i++) dst[i] = (float)p[i];
        break;
    case ATTN_DTYPE_I8:
        for (size_t i = 0; i < n; i++) dst[i] = (float)(int8_t)p[i];
        break;
    case ATTN_DTYPE_I16:
        for (size_t i = 0; i < n; i++) dst[i] = (float)(int16_t)ld16(p + 2 * i);
        break;
    case ATTN_DTYPE_U16:
        for (size_t i = 0; i < n; i++) dst[i] = (float)ld16(p + 2 * i);
        break;
    case ATTN_DTYPE_I32:
        for (size_t i = 0; i < n; i++) dst[i] = (float)(int32_t)ld32(p + 4 * i);
        break;
    case ATTN_DTYPE_U32:
        for (size_t i = 0; i < n; i++) dst[i] = (float)ld32(p + 4 * i);
        break;
    case ATTN_DTYPE_I64:
        for (size_t i = 0; i < n; i++) dst[i] = (float)(int64_t)ld64(p + 8 * i);
        break;
    case ATTN_DTYPE_U64:
        for (size_t i = 0; i < n; i++) dst[i] = (float)ld64(p + 8 * i);
        break;
    case ATTN_DTYPE_COUNT: break;
    }
}

static size_t tensor_numel(const attn_safetensors_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= (size_t)t->shape[d]; /* validated not to overflow */
    return n;
}

static attn_status lookup(const char *fn, const attn_safetensors *st, const char *name,
                          const attn_safetensors_tensor **t) {
    ATTN_CHECK_NOT_NULL(fn, st);
    ATTN_CHECK_NOT_NULL(fn, name);
    *t = attn_safetensors_find(st, name);
    if (!*t) {
        char nb[80];
        return attn_error(ATTN_ERR_NOT_FOUND, "%s: no tensor named '%s'", fn, show(name, strlen(name), nb, sizeof nb));
    }
    return ATTN_OK;
}

attn_status attn_safetensors_read_f32(const attn_safetensors *st, const char *name, float *dst, size_t count) {
    const attn_safetensors_tensor *t;
    attn_status s = lookup("attn_safetensors_read_f32", st, name, &t);
    if (s != ATTN_OK) return s;
    size_t n = tensor_numel(t);
    if (count != n) {
        char nb[80], sb[200];
        return attn_error(
            ATTN_ERR_SHAPE, "attn_safetensors_read_f32: tensor '%s' has shape %s (%zu elements), count is %zu",
            show(name, strlen(name), nb, sizeof nb), attn_shape_str(t->shape, t->rank, sb, sizeof sb), n, count);
    }
    if (n && !dst) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_read_f32: dst is NULL");
    convert(t, dst, n);
    return ATTN_OK;
}

attn_status attn_safetensors_read_f32_shape(const attn_safetensors *st, const char *name, float *dst, int rank,
                                            const int64_t *shape) {
    const char *fn = "attn_safetensors_read_f32_shape";
    const attn_safetensors_tensor *t;
    attn_status s = lookup(fn, st, name, &t);
    if (s != ATTN_OK) return s;
    if (rank < 0 || (rank > 0 && !shape))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: rank %d with shape %s", fn, rank, shape ? "given" : "NULL");
    int same = rank == t->rank;
    for (int d = 0; same && d < rank; d++) same = shape[d] == t->shape[d];
    if (!same) {
        char nb[80], sb[200], wb[200];
        int r = rank > ATTN_SAFETENSORS_MAX_RANK ? ATTN_SAFETENSORS_MAX_RANK : rank;
        return attn_error(ATTN_ERR_SHAPE, "%s: tensor '%s' has shape %s, expected %s%s", fn,
                          show(name, strlen(name), nb, sizeof nb), attn_shape_str(t->shape, t->rank, sb, sizeof sb),
                          attn_shape_str(shape, r, wb, sizeof wb), rank > r ? " (rank too large)" : "");
    }
    return attn_safetensors_read_f32(st, name, dst, tensor_numel(t));
}

/* ---- writer ------------------------------------------------------------------------------- */

typedef struct w_tensor {
    char *name;
    size_t name_len;
    attn_dtype dtype;
    int rank;
    int64_t shape[ATTN_SAFETENSORS_MAX_RANK];
    const void *data;
    size_t nbytes;
} w_tensor;

struct attn_safetensors_writer {
    w_tensor *t;
    size_t n, cap;
    char **mkeys, **mvals;
    size_t mn, mcap;
    size_t total;  /* data bytes */
    size_t *slots; /* open-addressing set of tensor indices + 1 (0 = empty), by name */
    size_t nslots; /* a power of two, kept at least twice n */
};

static size_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* Index of the tensor named name, or SIZE_MAX. */
static size_t writer_lookup(const attn_safetensors_writer *w, const char *name) {
    if (!w->nslots) return SIZE_MAX;
    for (size_t i = name_hash(name) & (w->nslots - 1);; i = (i + 1) & (w->nslots - 1)) {
        if (!w->slots[i]) return SIZE_MAX;
        if (!strcmp(w->t[w->slots[i] - 1].name, name)) return w->slots[i] - 1;
    }
}

/* Room for one more name; 0 on allocation failure. */
static int writer_reserve(attn_safetensors_writer *w) {
    if (w->nslots && w->n + 1 <= w->nslots / 2) return 1;
    size_t ns = w->nslots ? w->nslots * 2 : 64;
    if (ns > SIZE_MAX / sizeof(size_t)) return 0;
    size_t *slots = attn__calloc(ns, sizeof *slots);
    if (!slots) return 0;
    for (size_t k = 0; k < w->n; k++) {
        size_t i = name_hash(w->t[k].name) & (ns - 1);
        while (slots[i]) i = (i + 1) & (ns - 1);
        slots[i] = k + 1;
    }
    attn__free(w->slots);
    w->slots = slots;
    w->nslots = ns;
    return 1;
}

attn_status attn_safetensors_writer_create(attn_safetensors_writer **out) {
    ATTN_CHECK_NOT_NULL("attn_safetensors_writer_create", out);
    *out = attn__calloc(1, sizeof **out);
    if (!*out) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_safetensors_writer_create: out of memory");
    return ATTN_OK;
}

void attn_safetensors_writer_free(attn_safetensors_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) attn__free(w->t[i].name);
    for (size_t i = 0; i < w->mn; i++) {
        attn__free(w->mkeys[i]);
        attn__free(w->mvals[i]);
    }
    attn__free(w->t);
    attn__free(w->slots);
    attn__free(w->mkeys);
    attn__free(w->mvals);
    attn__free(w);
}

static char *dup_str(const char *s, size_t n) {
    char *d = attn__malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

attn_status attn_safetensors_writer_add(attn_safetensors_writer *w, const char *name, attn_dtype dtype, int rank,
                                        const int64_t *shape, const void *data) {
    const char *fn = "attn_safetensors_writer_add";
    char nb[80], sb[200];
    ATTN_CHECK_NOT_NULL(fn, w);
    ATTN_CHECK_NOT_NULL(fn, name);
    size_t len = strlen(name);
    const char *nm = show(name, len, nb, sizeof nb);
    if (!attn_json_utf8_valid(name, len, NULL))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: name '%s' is not valid UTF-8", fn, nm);
    if (strcmp(name, "__metadata__") == 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: '__metadata__' is reserved", fn);
    if ((unsigned)dtype >= ATTN_DTYPE_COUNT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: tensor '%s': invalid dtype %d", fn, nm, (int)dtype);
    if (rank < 0 || rank > ATTN_SAFETENSORS_MAX_RANK)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: tensor '%s': rank %d outside [0, %d]", fn, nm, rank,
                          ATTN_SAFETENSORS_MAX_RANK);
    if (rank > 0 && !shape) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: tensor '%s': shape is NULL", fn, nm);
    size_t numel = 1, nbytes, total;
    int of = 0;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: tensor '%s': negative dimension in shape %s", fn, nm,
                              attn_shape_str(shape, rank, sb, sizeof sb));
    }
    for (int d = 0; d < rank && !of; d++) of = attn_mul_overflow(numel, (size_t)shape[d], &numel);
    if (of || attn_mul_overflow(numel, dtypes[dtype].size, &nbytes))
        return attn_error(ATTN_ERR_ST_SIZE_OVERFLOW, "%s: tensor '%s': shape %s x %s overflows", fn, nm,
                          attn_shape_str(shape, rank, sb, sizeof sb), dtypes[dtype].name);
    if (attn_add_overflow(w->total, nbytes, &total))
        return attn_error(ATTN_ERR_OVERFLOW, "%s: tensor '%s': total data size overflows", fn, nm);
    if (nbytes && !data) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: tensor '%s': data is NULL", fn, nm);
    if (writer_lookup(w, name) != SIZE_MAX)
        return attn_error(ATTN_ERR_ST_DUPLICATE_NAME, "%s: tensor '%s' added twice", fn, nm);
    if (!writer_reserve(w)) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        w_tensor *nt = attn__realloc(w->t, cap * sizeof *nt);
        if (!nt) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        w->t = nt;
        w->cap = cap;
    }
    w_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = dup_str(name, len);
    if (!t->name) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    t->name_len = len;
    t->dtype = dtype;
    t->rank = rank;
    for (int d = 0; d < rank; d++) t->shape[d] = shape[d];
    t->data = data;
    t->nbytes = nbytes;
    w->total = total;
    size_t h = name_hash(t->name) & (w->nslots - 1);
    while (w->slots[h]) h = (h + 1) & (w->nslots - 1);
    w->slots[h] = w->n + 1;
    w->n++;
    return ATTN_OK;
}

attn_status attn_safetensors_writer_add_metadata(attn_safetensors_writer *w, const char *key, const char *value) {
    const char *fn = "attn_safetensors_writer_add_metadata";
    char nb[80];
    ATTN_CHECK_NOT_NULL(fn, w);
    ATTN_CHECK_NOT_NULL(fn, key);
    ATTN_CHECK_NOT_NULL(fn, value);
    size_t kl = strlen(key), vl = strlen(value);
    const char *kn = show(key, kl, nb, sizeof nb);
    if (!attn_json_utf8_valid(key, kl, NULL) || !attn_json_utf8_valid(value, vl, NULL))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' or its value is not valid UTF-8", fn, kn);
    for (size_t i = 0; i < w->mn; i++)
        if (strcmp(w->mkeys[i], key) == 0)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key '%s' added twice", fn, kn);
    if (w->mn == w->mcap) {
        size_t cap = w->mcap ? w->mcap * 2 : 8;
        char **nk = attn__realloc(w->mkeys, cap * sizeof *nk);
        if (!nk) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        w->mkeys = nk;
        char **nv = attn__realloc(w->mvals, cap * sizeof *nv);
        if (!nv) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        w->mvals = nv;
        w->mcap = cap;
    }
    char *k = dup_str(key, kl), *v = dup_str(value, vl);
    if (!k || !v) {
        attn__free(k);
        attn__free(v);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    w->mkeys[w->mn] = k;
    w->mvals[w->mn] = v;
    w->mn++;
    return ATTN_OK;
}

/* Growable byte buffer; err set on overflow or allocation failure. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int err;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->err) return;
    if (b->cap - b->n < n) {
        size_t need;
        if (attn_add_overflow(b->n, n, &need)) {
            b->err = 1;
            return;
        }
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) {
            if (cap > SIZE_MAX / 2) {
                cap = need;
                break;
            }
            cap *= 2;
        }
        char *np = attn__realloc(b->p, cap);
        if (!np) {
            b->err = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_json_string(sbuf *b, const char *s, size_t n) {
    size_t e = attn_json_escaped_len(s, n);
    if (e == SIZE_MAX) {
        b->err = 1;
        return;
    }
    sb_put(b, "\"", 1);
    char tmp[256];
    for (size_t i = 0; i < n && !b->err;) { /* escape in pieces: each byte expands to <= 6 */
        size_t k = n - i < 40 ? n - i : 40;
        size_t m = attn_json_escape(tmp, s + i, k);
        sb_put(b, tmp, m);
        i += k;
    }
    sb_put(b, "\"", 1);
}

static void sb_u64(sbuf *b, unsigned long long v) {
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, "%llu", v);
    sb_put(b, tmp, (size_t)k);
}

/* The 8-byte length and the padded header. */
static attn_status build_header(const attn_safetensors_writer *w, const char *fn, sbuf *b) {
    memset(b, 0, sizeof *b);
    sb_put(b, "\0\0\0\0\0\0\0\0", 8);
    sb_put(b, "{", 1);
    int first = 1;
    if (w->mn) {
        sb_str(b, "\"__metadata__\":{");
        for (size_t i = 0; i < w->mn; i++) {
            if (i) sb_put(b, ",", 1);
            sb_json_string(b, w->mkeys[i], strlen(w->mkeys[i]));
            sb_put(b, ":", 1);
            sb_json_string(b, w->mvals[i], strlen(w->mvals[i]));
        }
        sb_put(b, "}", 1);
        first = 0;
    }
    size_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const w_tensor *t = &w->t[i];
        if (!first) sb_put(b, ",", 1);
        first = 0;
        sb_json_string(b, t->name, t->name_len);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, dtypes[t->dtype].name);
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < t->rank; d++) {
            if (d) sb_put(b, ",", 1);
            sb_u64(b, (unsigned long long)t->shape[d]);
        }
        sb_str(b, "],\"data_offsets\":[");
        sb_u64(b, (unsigned long long)off);
        sb_put(b, ",", 1);
        off += t->nbytes; /* the total was checked in add */
        sb_u64(b, (unsigned long long)off);
        sb_str(b, "]}");
    }
    sb_put(b, "}", 1);
    while (!b->err && (b->n - 8) % 8) sb_put(b, " ", 1);
    if (b->err) {
        attn__free(b->p);
        b->p = NULL;
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for the header", fn);
    }
    size_t hl = b->n - 8;
    if (hl > ATTN_SAFETENSORS_MAX_HEADER) {
        attn__free(b->p);
        b->p = NULL;
        return attn_error(ATTN_ERR_ST_HEADER_TOO_LARGE, "%s: header of %zu bytes exceeds the limit of %u", fn, hl,
                          ATTN_SAFETENSORS_MAX_HEADER);
    }
    for (int i = 0; i < 8; i++) b->p[i] = (char)(((uint64_t)hl >> (8 * i)) & 0xFF);
    return ATTN_OK;
}

attn_status attn_safetensors_writer_write_memory(attn_safetensors_writer *w, void **buf, size_t *len) {
    const char *fn = "attn_safetensors_writer_write_memory";
    ATTN_CHECK_NOT_NULL(fn, w);
    ATTN_CHECK_NOT_NULL(fn, buf);
    ATTN_CHECK_NOT_NULL(fn, len);
    *buf = NULL;
    *len = 0;
    sbuf b;
    attn_status s = build_header(w, fn, &b);
    if (s != ATTN_OK) return s;
    size_t total;
    if (attn_add_overflow(b.n, w->total, &total)) {
        attn__free(b.p);
        return attn_error(ATTN_ERR_OVERFLOW, "%s: file size overflows", fn);
    }
    char *out = attn__realloc(b.p, total ? total : 1);
    if (!out) {
        attn__free(b.p);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", fn, total);
    }
    size_t o = b.n;
    for (size_t i = 0; i < w->n; i++) {
        if (w->t[i].nbytes) memcpy(out + o, w->t[i].data, w->t[i].nbytes);
        o += w->t[i].nbytes;
    }
    *buf = out;
    *len = total;
    return ATTN_OK;
}

attn_status attn_safetensors_writer_write_file(attn_safetensors_writer *w, const char *path) {
    const char *fn = "attn_safetensors_writer_write_file";
    ATTN_CHECK_NOT_NULL(fn, w);
    ATTN_CHECK_NOT_NULL(fn, path);
    if (!*path) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: path is empty", fn);
    sbuf b;
    attn_status s = build_header(w, fn, &b);
    if (s != ATTN_OK) return s;
    /* a fresh temporary file next to PATH, renamed over it: see io/safe_file.h */
    attn_io_out o;
    s = attn_io_out_begin(&o, path);
    if (s == ATTN_OK) s = attn_io_out_write(&o, b.p, b.n);
    for (size_t i = 0; s == ATTN_OK && i < w->n; i++) s = attn_io_out_write(&o, w->t[i].data, w->t[i].nbytes);
    attn__free(b.p);
    if (s != ATTN_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", attn_last_error());
        attn_io_out_abort(&o);
        return attn_error(s, "%s: %s", fn, why);
    }
    s = attn_io_out_commit(&o);
    if (s != ATTN_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", attn_last_error());
        return attn_error(s, "%s: %s", fn, why);
    }
    return ATTN_OK;
}
