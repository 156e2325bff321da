/* attn internal: a small, strict JSON parser (RFC 8259) and string escaping.
 *
 * The whole document is parsed into a tree of attn_json nodes allocated from one arena owned by
 * an attn_json_doc; attn_json_free() releases everything at once. Strictness:
 *   - exactly one value, surrounded only by JSON whitespace (space, tab, LF, CR); anything else
 *     after it ("trailing garbage") is an error; a byte-order mark is an error;
 *   - no trailing commas, no comments, no single quotes, no NaN/Infinity, no leading zeros,
 *     no '+' signs, no control characters inside strings;
 *   - the input must be valid UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF);
 *   - \uXXXX escapes are decoded to UTF-8; surrogate pairs are combined, a lone surrogate is an
 *     error; \u0000 is allowed and yields an embedded NUL (use the length, not strlen);
 *   - numbers whose magnitude overflows a double are an error (as serde_json does);
 *   - nesting deeper than max_depth containers is an error (no unbounded recursion).
 * Duplicate object keys are accepted by default (RFC 8259 allows it; attn_json_get returns the
 * first) unless the options ask to reject them.
 *
 * Not thread-safe per document, but documents are independent: no global state. */
#ifndef ATTN_IO_JSON_H
#define ATTN_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum attn_json_type {
    ATTN_JSON_NULL = 0,
    ATTN_JSON_BOOL,
    ATTN_JSON_NUMBER,
    ATTN_JSON_STRING,
    ATTN_JSON_ARRAY,
    ATTN_JSON_OBJECT
} attn_json_type;

/* One value. Read fields directly or through the accessors below. */
typedef struct attn_json attn_json;
struct attn_json {
    attn_json_type type;
    int boolean;      /* BOOL: 0 or 1 */
    double number;    /* NUMBER: the value, correctly rounded */
    const char *str;  /* STRING: the decoded value; NUMBER: the source lexeme; NUL-terminated */
    size_t len;       /* STRING/NUMBER: bytes of str; ARRAY: elements; OBJECT: members */
    attn_json *items; /* ARRAY: len values; OBJECT: 2*len nodes, each key (a STRING) then value */
    size_t offset;    /* byte offset of the value in the source text */
};

typedef enum attn_json_status {
    ATTN_JSON_OK = 0,
    ATTN_JSON_ERR_SYNTAX,        /* not JSON (includes lone surrogates, out-of-range numbers) */
    ATTN_JSON_ERR_UTF8,          /* invalid UTF-8 in the input */
    ATTN_JSON_ERR_DEPTH,         /* nested deeper than max_depth */
    ATTN_JSON_ERR_DUPLICATE_KEY, /* only with reject_duplicate_keys */
    ATTN_JSON_ERR_NOMEM,
    ATTN_JSON_ERR_ARGUMENT /* NULL out, or NULL text with len > 0 */
} attn_json_status;

typedef struct attn_json_error {
    attn_json_status status;
    size_t offset;       /* byte offset of the problem */
    size_t line, column; /* 1-based; column counts bytes */
    char message[160];   /* e.g. "line 1 column 9: expected ',' or '}' after an object member" */
} attn_json_error;

#define ATTN_JSON_DEFAULT_MAX_DEPTH 128
#define ATTN_JSON_MAX_MAX_DEPTH 4096

typedef struct attn_json_options {
    int max_depth;             /* containers nested at most this deep; <= 0: the default (128) */
    int reject_duplicate_keys; /* nonzero: an object with a repeated key is an error */
} attn_json_options;

typedef struct attn_json_doc attn_json_doc;

/* Parse text[0..len) (need not be NUL-terminated). opt and err may be NULL. On success *out is
 * the document; on failure *out is NULL and err (when given) says where and why. */
attn_json_status attn_json_parse(const char *text, size_t len, const attn_json_options *opt, attn_json_doc **out,
                                 attn_json_error *err);
const attn_json *attn_json_root(const attn_json_doc *doc);
void attn_json_free(attn_json_doc *doc);

const char *attn_json_type_name(attn_json_type t); /* "null", "boolean", "number", ... */

/* Containers. NULL-safe: a NULL or wrong-typed node has no elements / members. */
size_t attn_json_count(const attn_json *v);                            /* elements or members */
const attn_json *attn_json_at(const attn_json *arr, size_t i);         /* NULL out of range */
const attn_json *attn_json_member_key(const attn_json *obj, size_t i); /* a STRING node */
const attn_json *attn_json_member_value(const attn_json *obj, size_t i);
/* First member whose key equals key (NUL-terminated / key_len bytes); NULL when absent or when
 * obj is not an object. Linear in the number of members. */
const attn_json *attn_json_get(const attn_json *obj, const char *key);
const attn_json *attn_json_getn(const attn_json *obj, const char *key, size_t key_len);

/* Scalars: return 1 and store the value, or 0 when v is not of that kind. */
int attn_json_is_null(const attn_json *v);
int attn_json_as_bool(const attn_json *v, int *out);
int attn_json_as_double(const attn_json *v, double *out);
/* Integers are numbers written without fraction or exponent ("-0" is 0), that fit the type. */
int attn_json_as_u64(const attn_json *v, uint64_t *out);
int attn_json_as_i64(const attn_json *v, int64_t *out);
/* The decoded string (NUL-terminated; *len, when len is not NULL, counts embedded NULs). */
const char *attn_json_as_string(const attn_json *v, size_t *len);

/* Strict UTF-8 check: 1 when valid, else 0 with the offset of the first bad byte in *bad. */
int attn_json_utf8_valid(const char *s, size_t len, size_t *bad);

/* JSON string escaping as serde_json does it: '"' '\\' and control characters escaped (\b \f \n
 * \r \t, others \u00XX), everything else copied. attn_json_escaped_len returns the size of the
 * escaped text without quotes (SIZE_MAX on overflow); attn_json_escape writes it to dst (no
 * quotes, no NUL) and returns the bytes written. */
size_t attn_json_escaped_len(const char *s, size_t len);
size_t attn_json_escape(char *dst, const char *s, size_t len);

#endif
