/* libFuzzer harness: the strict JSON parser (src/io/json.c). Every accepted document must be valid
 * UTF-8, have a tree whose nodes are consistent (offsets inside the input, string lengths, member
 * keys), and survive a round trip: written back with attn_json_escape and the numbers' lexemes,
 * it parses to an identical tree. Rejections must come with a status, a message and an offset
 * inside the input. Both the default options and (depth 8, duplicate keys rejected) are used. */
#include <string.h>

#include "fuzz_util.h"
#include "io/json.h"

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        b->p = realloc(b->p, cap);
        REQUIRE(b->p != NULL);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void put_string(buf *b, const char *s, size_t n) {
    size_t el = attn_json_escaped_len(s, n);
    REQUIRE(el != SIZE_MAX && el >= n);
    char *e = malloc(el ? el : 1);
    REQUIRE(e != NULL);
    REQUIRE(attn_json_escape(e, s, n) == el);
    put(b, "\"", 1);
    put(b, e, el);
    put(b, "\"", 1);
    free(e);
}

/* Check a node and write it back as JSON text. */
static void walk(const attn_json *v, size_t in_len, buf *out) {
    REQUIRE(v != NULL);
    REQUIRE(v->offset < in_len);
    switch (v->type) {
    case ATTN_JSON_NULL: put(out, "null", 4); break;
    case ATTN_JSON_BOOL:
        REQUIRE(v->boolean == 0 || v->boolean == 1);
        put(out, v->boolean ? "true" : "false", v->boolean ? 4 : 5);
        break;
    case ATTN_JSON_NUMBER:
        REQUIRE(v->str != NULL && v->len > 0 && strlen(v->str) == v->len);
        REQUIRE(v->number == v->number); /* never NaN: NaN is no JSON number */
        put(out, v->str, v->len);
        break;
    case ATTN_JSON_STRING: {
        size_t bad = 0;
        REQUIRE(v->str != NULL && v->str[v->len] == '\0');
        REQUIRE(attn_json_utf8_valid(v->str, v->len, &bad));
        put_string(out, v->str, v->len);
        break;
    }
    case ATTN_JSON_ARRAY:
        REQUIRE(attn_json_count(v) == v->len);
        put(out, "[", 1);
        for (size_t i = 0; i < v->len; i++) {
            if (i) put(out, ",", 1);
            walk(attn_json_at(v, i), in_len, out);
        }
        REQUIRE(attn_json_at(v, v->len) == NULL);
        put(out, "]", 1);
        break;
    case ATTN_JSON_OBJECT:
        REQUIRE(attn_json_count(v) == v->len);
        put(out, "{", 1);
        for (size_t i = 0; i < v->len; i++) {
            const attn_json *k = attn_json_member_key(v, i);
            REQUIRE(k != NULL && k->type == ATTN_JSON_STRING);
            if (i) put(out, ",", 1);
            walk(k, in_len, out);
            put(out, ":", 1);
            walk(attn_json_member_value(v, i), in_len, out);
            /* the first member of that key is found (keys with a NUL cannot be looked up by C string) */
            const attn_json *first = attn_json_getn(v, k->str, k->len);
            REQUIRE(first != NULL);
            if (first == attn_json_member_value(v, i))
                for (size_t j = 0; j < i; j++) {
                    const attn_json *kj = attn_json_member_key(v, j);
                    REQUIRE(kj->len != k->len || memcmp(kj->str, k->str, k->len) != 0);
                }
        }
        put(out, "}", 1);
        break;
    default: REQUIRE(0);
    }
}

/* Two trees are the same values (offsets aside). */
static int same(const attn_json *a, const attn_json *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case ATTN_JSON_NULL: return 1;
    case ATTN_JSON_BOOL: return a->boolean == b->boolean;
    case ATTN_JSON_NUMBER:
        return a->len == b->len && !memcmp(a->str, b->str, a->len) && !memcmp(&a->number, &b->number, sizeof a->number);
    case ATTN_JSON_STRING: return a->len == b->len && !memcmp(a->str, b->str, a->len);
    case ATTN_JSON_ARRAY:
        if (a->len != b->len) return 0;
        for (size_t i = 0; i < a->len; i++)
            if (!same(attn_json_at(a, i), attn_json_at(b, i))) return 0;
        return 1;
    case ATTN_JSON_OBJECT:
        if (a->len != b->len) return 0;
        for (size_t i = 0; i < a->len; i++)
            if (!same(attn_json_member_key(a, i), attn_json_member_key(b, i)) ||
                !same(attn_json_member_value(a, i), attn_json_member_value(b, i)))
                return 0;
        return 1;
    }
    return 0;
}

static void one(const uint8_t *data, size_t size, const attn_json_options *opt) {
    attn_json_doc *doc = NULL;
    attn_json_error err;
    memset(&err, 0x55, sizeof err);
    attn_json_status s = attn_json_parse((const char *)data, size, opt, &doc, &err);
    if (s != ATTN_JSON_OK) {
        REQUIRE(doc == NULL);
        REQUIRE(err.status == s);
        REQUIRE(memchr(err.message, '\0', sizeof err.message) != NULL && err.message[0] != '\0');
        REQUIRE(err.offset <= size && err.line >= 1 && err.column >= 1);
        return;
    }
    REQUIRE(doc != NULL && size > 0);
    size_t bad = 0;
    REQUIRE(attn_json_utf8_valid((const char *)data, size, &bad));
    buf out = {0};
    walk(attn_json_root(doc), size, &out);
    attn_json_doc *again = NULL;
    attn_json_error err2;
    /* the rewrite nests no deeper and repeats exactly the keys the input repeated */
    REQUIRE(attn_json_parse(out.p, out.len, opt, &again, &err2) == ATTN_JSON_OK);
    REQUIRE(same(attn_json_root(doc), attn_json_root(again)));
    attn_json_free(again);
    attn_json_free(doc);
    free(out.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one(data, size, NULL);
    const attn_json_options strict = {8, 1};
    one(data, size, &strict);
    return 0;
}
