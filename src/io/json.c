/* A small, strict JSON parser (RFC 8259): see json.h. */
#include "core/alloc.h"
#include "io/json.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ------------------------------------------------------------------------------ */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    max_align_t data[];
} arena_chunk;

struct attn_json_doc {
    arena_chunk *chunks;
    attn_json root;
};

#define ARENA_MIN_CHUNK ((size_t)16 * 1024)

static void *arena_alloc(attn_json_doc *doc, size_t n) {
    const size_t align = _Alignof(max_align_t);
    if (n == 0) n = 1;
    if (n > SIZE_MAX - align) return NULL;
    n = (n + align - 1) / align * align;
    arena_chunk *c = doc->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_MIN_CHUNK ? n : ARENA_MIN_CHUNK;
        /* grow chunk sizes geometrically so big documents need few mallocs */
        if (c && c->cap < (size_t)64 * 1024 * 1024 && c->cap * 2 > cap) cap = c->cap * 2;
        if (cap > SIZE_MAX - sizeof(arena_chunk)) return NULL;
        arena_chunk *nc = attn__malloc(sizeof(arena_chunk) + cap);
        if (!nc) return NULL;
        nc->next = c;
        nc->used = 0;
        nc->cap = cap;
        doc->chunks = nc;
        c = nc;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

void attn_json_free(attn_json_doc *doc) {
    if (!doc) return;
    arena_chunk *c = doc->chunks;
    while (c) {
        arena_chunk *next = c->next;
        attn__free(c);
        c = next;
    }
    attn__free(doc);
}

const attn_json *attn_json_root(const attn_json_doc *doc) { return doc ? &doc->root : NULL; }

/* ---- UTF-8 ------------------------------------------------------------------------------ */

int attn_json_utf8_valid(const char *str, size_t len, size_t *bad) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            n = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            if (c == 0xE0) lo = 0xA0; /* no overlong forms */
            if (c == 0xED) hi = 0x9F; /* no UTF-16 surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            if (c == 0xF0) lo = 0x90; /* no overlong forms */
            if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
        } else {
            if (bad) *bad = i;
            return 0;
        }
        if (len - i < n || s[i + 1] < lo || s[i + 1] > hi) {
            if (bad) *bad = i;
            return 0;
        }
        for (size_t k = 2; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                if (bad) *bad = i;
                return 0;
            }
        }
        i += n;
    }
    return 1;
}

/* ---- parser ----------------------------------------------------------------------------- */

typedef struct parser {
    const unsigned char *s;
    size_t len, pos;
    int max_depth;
    int reject_dup;
    attn_json_doc *doc;
    attn_json *stack; /* children of the open containers, popped into the arena on close */
    size_t sp, cap;
    attn_json_error *err;
} parser;

static void position(const unsigned char *s, size_t len, size_t off, size_t *line, size_t *col) {
    size_t l = 1, c = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (s[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static attn_json_status
fail(parser *p, attn_json_status st, size_t off, const char *fmt, ...) {
    attn_json_error *e = p->err;
    if (e->status != ATTN_JSON_OK) return e->status; /* keep the first (innermost) error */
    e->status = st;
    e->offset = off;
    position(p->s, p->len, off, &e->line, &e->column);
    int n = snprintf(e->message, sizeof e->message, "line %zu column %zu: ", e->line, e->column);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof e->message) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->message + n, sizeof e->message - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return st;
}

static attn_json_status nomem(parser *p) { return fail(p, ATTN_JSON_ERR_NOMEM, p->pos, "out of memory"); }

/* A printable description of the byte at pos, for messages. */
static const char *describe(const parser *p, size_t pos, char *buf, size_t n) {
    if (pos >= p->len) return "end of input";
    unsigned c = p->s[pos];
    if (c >= 0x20 && c < 0x7F && c != '\'')
        snprintf(buf, n, "'%c'", (char)c);
    else
        snprintf(buf, n, "byte 0x%02X", c);
    return buf;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int push(parser *p, const attn_json *v) {
    if (p->sp == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(attn_json)) return 0;
        attn_json *ns = attn__realloc(p->stack, cap * sizeof(attn_json));
        if (!ns) return 0;
        p->stack = ns;
        p->cap = cap;
    }
    p->stack[p->sp++] = *v;
    return 1;
}

static int hexval(unsigned c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (int)(c - 'A' + 10);
    return -1;
}

/* Four hex digits at pos; -1 when they are not. */
static long hex4(const parser *p, size_t pos) {
    if (p->len - pos < 4) return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[pos + (size_t)i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static size_t put_utf8(char *d, unsigned long cp) {
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xC0 | (cp >> 6));
        d[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | (cp >> 12));
        d[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | (cp >> 18));
    d[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string starting at the '"' at p->pos. The input is already known to be valid UTF-8, and a
 * decoded string is never longer than its source, so one allocation of the source span holds
 * it. */
static attn_json_status parse_string(parser *p, attn_json *out) {
    size_t start = p->pos;
    size_t i = start + 1;
    /* find the closing quote */
    for (;;) {
        if (i >= p->len) return fail(p, ATTN_JSON_ERR_SYNTAX, start, "unterminated string");
        unsigned char c = p->s[i];
        if (c == '"') break;
        if (c == '\\') {
            i += 2;
            continue;
        }
        i++;
    }
    size_t end = i; /* index of the closing quote */
    char *d = arena_alloc(p->doc, end - start);
    if (!d) return nomem(p);
    size_t n = 0;
    for (i = start + 1; i < end;) {
        unsigned char c = p->s[i];
        if (c < 0x20)
            return fail(p, ATTN_JSON_ERR_SYNTAX, i, "control character 0x%02X in a string (must be escaped)", c);
        if (c != '\\') {
            d[n++] = (char)c;
            i++;
            continue;
        }
        unsigned char e = p->s[i + 1]; /* i + 1 < end: a backslash never ends the span */
        switch (e) {
        case '"':
            d[n++] = '"';
            i += 2;
            break;
        case '\\':
            d[n++] = '\\';
            i += 2;
            break;
        case '/':
            d[n++] = '/';
            i += 2;
            break;
        case 'b':
            d[n++] = '\b';
            i += 2;
            break;
        case 'f':
            d[n++] = '\f';
            i += 2;
            break;
        case 'n':
            d[n++] = '\n';
            i += 2;
            break;
        case 'r':
            d[n++] = '\r';
            i += 2;
            break;
        case 't':
            d[n++] = '\t';
            i += 2;
            break;
        case 'u': {
            long u = hex4(p, i + 2);
            if (u < 0 || i + 6 > end)
                return fail(p, ATTN_JSON_ERR_SYNTAX, i, "\\u must be followed by four hex digits");
            unsigned long cp = (unsigned long)u;
            size_t adv = 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(p, ATTN_JSON_ERR_SYNTAX, i, "lone low surrogate \\u%04lX in a string", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                long lo = -1;
                if (i + 12 <= end && p->s[i + 6] == '\\' && p->s[i + 7] == 'u') lo = hex4(p, i + 8);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail(p, ATTN_JSON_ERR_SYNTAX, i, "high surrogate \\u%04lX not followed by a low surrogate",
                                cp);
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned long)lo - 0xDC00);
                adv = 12;
            }
            n += put_utf8(d + n, cp);
            i += adv;
            break;
        }
        default: {
            char buf[16];
            return fail(p, ATTN_JSON_ERR_SYNTAX, i, "invalid escape \\%s", describe(p, i + 1, buf, sizeof buf));
        }
        }
    }
    d[n] = '\0';
    memset(out, 0, sizeof *out);
    out->type = ATTN_JSON_STRING;
    out->str = d;
    out->len = n;
    out->offset = start;
    p->pos = end + 1;
    return ATTN_JSON_OK;
}

static int is_digit(unsigned c) { return c >= '0' && c <= '9'; }

static attn_json_status parse_number(parser *p, attn_json *out) {
    size_t start = p->pos, i = start;
    char buf[16];
    if (i < p->len && p->s[i] == '-') i++;
    if (i >= p->len || !is_digit(p->s[i]))
        return fail(p, ATTN_JSON_ERR_SYNTAX, i, "expected a digit, found %s", describe(p, i, buf, sizeof buf));
    if (p->s[i] == '0') {
        i++;
        if (i < p->len && is_digit(p->s[i]))
            return fail(p, ATTN_JSON_ERR_SYNTAX, start, "leading zeros are not allowed");
    } else {
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    if (i < p->len && p->s[i] == '.') {
        i++;
        if (i >= p->len || !is_digit(p->s[i]))
            return fail(p, ATTN_JSON_ERR_SYNTAX, i, "expected a digit after '.', found %s",
                        describe(p, i, buf, sizeof buf));
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (i >= p->len || !is_digit(p->s[i]))
            return fail(p, ATTN_JSON_ERR_SYNTAX, i, "expected a digit in the exponent, found %s",
                        describe(p, i, buf, sizeof buf));
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    size_t n = i - start;
    char *lex = arena_alloc(p->doc, n + 1);
    if (!lex) return nomem(p);
    memcpy(lex, p->s + start, n);
    lex[n] = '\0';
    /* strtod follows LC_NUMERIC: give it the locale's decimal point */
    const char *dp = localeconv()->decimal_point;
    double v;
    errno = 0;
    if (dp && dp[0] && (dp[0] != '.' || dp[1]) && memchr(lex, '.', n)) {
        size_t dl = strlen(dp);
        char *tmp = attn__malloc(n + dl + 1);
        if (!tmp) return nomem(p);
        size_t k = 0;
        for (size_t j = 0; j < n; j++) {
            if (lex[j] == '.') {
                memcpy(tmp + k, dp, dl);
                k += dl;
            } else {
                tmp[k++] = lex[j];
            }
        }
        tmp[k] = '\0';
        v = strtod(tmp, NULL);
        attn__free(tmp);
    } else {
        v = strtod(lex, NULL);
    }
    if (isinf(v)) return fail(p, ATTN_JSON_ERR_SYNTAX, start, "number out of range: %.40s", lex);
    memset(out, 0, sizeof *out);
    out->type = ATTN_JSON_NUMBER;
    out->number = v;
    out->str = lex;
    out->len = n;
    out->offset = start;
    p->pos = i;
    return ATTN_JSON_OK;
}

static int key_cmp(const void *a, const void *b) {
    const attn_json *x = *(const attn_json *const *)a, *y = *(const attn_json *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->str, y->str, n);
    if (c) return c;
    return (x->len > y->len) - (x->len < y->len);
}

/* Move the children pushed since base into the arena as the container's items. */
static attn_json_status close_container(parser *p, size_t base, attn_json *out) {
    size_t n = p->sp - base;
    attn_json *items = NULL;
    if (n) {
        items = arena_alloc(p->doc, n * sizeof(attn_json)); /* n*size fits: the stack holds it */
        if (!items) return nomem(p);
        memcpy(items, p->stack + base, n * sizeof(attn_json));
    }
    p->sp = base;
    out->items = items;
    out->len = out->type == ATTN_JSON_OBJECT ? n / 2 : n;
    if (out->type == ATTN_JSON_OBJECT && p->reject_dup && out->len > 1) {
        const attn_json **keys = attn__malloc(out->len * sizeof *keys);
        if (!keys) return nomem(p);
        for (size_t k = 0; k < out->len; k++) keys[k] = &items[2 * k];
        qsort(keys, out->len, sizeof *keys, key_cmp);
        for (size_t k = 1; k < out->len; k++) {
            if (key_cmp(&keys[k - 1], &keys[k]) == 0) {
                size_t off = keys[k - 1]->offset > keys[k]->offset ? keys[k - 1]->offset : keys[k]->offset;
                attn_json_status st =
                    fail(p, ATTN_JSON_ERR_DUPLICATE_KEY, off, "duplicate key \"%.60s\"", keys[k]->str);
                attn__free(keys);
                return st;
            }
        }
        attn__free(keys);
    }
    return ATTN_JSON_OK;
}

static attn_json_status parse_value(parser *p, int depth, attn_json *out);

static attn_json_status parse_container(parser *p, int depth, attn_json *out) {
    unsigned char open = p->s[p->pos];
    int is_obj = open == '{';
    unsigned char close = is_obj ? '}' : ']';
    char buf[16];
    if (depth >= p->max_depth) return fail(p, ATTN_JSON_ERR_DEPTH, p->pos, "nesting deeper than %d", p->max_depth);
    memset(out, 0, sizeof *out);
    out->type = is_obj ? ATTN_JSON_OBJECT : ATTN_JSON_ARRAY;
    out->offset = p->pos;
    size_t base = p->sp;
    attn_json_status st;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return close_container(p, base, out);
    }
    for (;;) {
        attn_json v;
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return fail(p, ATTN_JSON_ERR_SYNTAX, p->pos, "expected a string key, found %s",
                            describe(p, p->pos, buf, sizeof buf));
            if ((st = parse_string(p, &v)) != ATTN_JSON_OK) return st;
            if (!push(p, &v)) return nomem(p);
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':')
                return fail(p, ATTN_JSON_ERR_SYNTAX, p->pos, "expected ':' after a key, found %s",
                            describe(p, p->pos, buf, sizeof buf));
            p->pos++;
            skip_ws(p);
        }
        if ((st = parse_value(p, depth + 1, &v)) != ATTN_JSON_OK) return st;
        if (!push(p, &v)) return nomem(p);
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == close)
                return fail(p, ATTN_JSON_ERR_SYNTAX, p->pos, "trailing comma before '%c'", close);
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return close_container(p, base, out);
        }
        return fail(p, ATTN_JSON_ERR_SYNTAX, p->pos, "expected ',' or '%c', found %s", close,
                    describe(p, p->pos, buf, sizeof buf));
    }
}

static int literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return 0;
    p->pos += n;
    return 1;
}

static attn_json_status parse_value(parser *p, int depth, attn_json *out) {
    char buf[16];
    if (p->pos >= p->len) return fail(p, ATTN_JSON_ERR_SYNTAX, p->pos, "expected a value, found end of input");
    unsigned char c = p->s[p->pos];
    size_t start = p->pos;
    switch (c) {
    case '{':
    case '[': return parse_container(p, depth, out);
    case '"': return parse_string(p, out);
    case 't':
    case 'f':
    case 'n':
        memset(out, 0, sizeof *out);
        out->offset = start;
        if (literal(p, "true")) {
            out->type = ATTN_JSON_BOOL;
            out->boolean = 1;
        } else if (literal(p, "false")) {
            out->type = ATTN_JSON_BOOL;
        } else if (literal(p, "null")) {
            out->type = ATTN_JSON_NULL;
        } else {
            return fail(p, ATTN_JSON_ERR_SYNTAX, start, "invalid literal (expected true, false or null)");
        }
        return ATTN_JSON_OK;
    default:
        if (c == '-' || is_digit(c)) return parse_number(p, out);
        return fail(p, ATTN_JSON_ERR_SYNTAX, start, "expected a value, found %s", describe(p, start, buf, sizeof buf));
    }
}

attn_json_status attn_json_parse(const char *text, size_t len, const attn_json_options *opt, attn_json_doc **out,
                                 attn_json_error *err) {
    attn_json_error local;
    if (!err) err = &local;
    memset(err, 0, sizeof *err);
    if (out) *out = NULL;
    if (!out || (!text && len)) {
        err->status = ATTN_JSON_ERR_ARGUMENT;
        snprintf(err->message, sizeof err->message, "attn_json_parse: %s is NULL", out ? "text" : "out");
        return ATTN_JSON_ERR_ARGUMENT;
    }
    parser p;
    memset(&p, 0, sizeof p);
    p.s = (const unsigned char *)(text ? text : "");
    p.len = len;
    p.err = err;
    p.max_depth = opt && opt->max_depth > 0 ? opt->max_depth : ATTN_JSON_DEFAULT_MAX_DEPTH;
    if (p.max_depth > ATTN_JSON_MAX_MAX_DEPTH) p.max_depth = ATTN_JSON_MAX_MAX_DEPTH;
    p.reject_dup = opt ? opt->reject_duplicate_keys : 0;

    size_t bad = 0;
    if (!attn_json_utf8_valid((const char *)p.s, len, &bad))
        return fail(&p, ATTN_JSON_ERR_UTF8, bad, "invalid UTF-8 (byte 0x%02X)", p.s[bad]);

    p.doc = attn__calloc(1, sizeof *p.doc);
    if (!p.doc) return nomem(&p);
    attn_json_status st;
    skip_ws(&p);
    if (p.pos + 3 <= p.len && p.s[p.pos] == 0xEF && p.s[p.pos + 1] == 0xBB && p.s[p.pos + 2] == 0xBF) {
        st = fail(&p, ATTN_JSON_ERR_SYNTAX, p.pos, "byte-order mark is not allowed");
    } else {
        st = parse_value(&p, 0, &p.doc->root);
    }
    if (st == ATTN_JSON_OK) {
        skip_ws(&p);
        if (p.pos < p.len) {
            char buf[16];
            st = fail(&p, ATTN_JSON_ERR_SYNTAX, p.pos, "trailing characters after the value: %s",
                      describe(&p, p.pos, buf, sizeof buf));
        }
    }
    attn__free(p.stack);
    if (st != ATTN_JSON_OK) {
        attn_json_free(p.doc);
        return st;
    }
    *out = p.doc;
    return ATTN_JSON_OK;
}

/* ---- accessors -------------------------------------------------------------------------- */

const char *attn_json_type_name(attn_json_type t) {
    switch (t) {
    case ATTN_JSON_NULL: return "null";
    case ATTN_JSON_BOOL: return "boolean";
    case ATTN_JSON_NUMBER: return "number";
    case ATTN_JSON_STRING: return "string";
    case ATTN_JSON_ARRAY: return "array";
    case ATTN_JSON_OBJECT: return "object";
    }
    return "unknown";
}

size_t attn_json_count(const attn_json *v) {
    return v && (v->type == ATTN_JSON_ARRAY || v->type == ATTN_JSON_OBJECT) ? v->len : 0;
}

const attn_json *attn_json_at(const attn_json *arr, size_t i) {
    return arr && arr->type == ATTN_JSON_ARRAY && i < arr->len ? &arr->items[i] : NULL;
}

const attn_json *attn_json_member_key(const attn_json *obj, size_t i) {
    return obj && obj->type == ATTN_JSON_OBJECT && i < obj->len ? &obj->items[2 * i] : NULL;
}

const attn_json *attn_json_member_value(const attn_json *obj, size_t i) {
    return obj && obj->type == ATTN_JSON_OBJECT && i < obj->len ? &obj->items[2 * i + 1] : NULL;
}

const attn_json *attn_json_getn(const attn_json *obj, const char *key, size_t key_len) {
    if (!obj || obj->type != ATTN_JSON_OBJECT || (!key && key_len)) return NULL;
    for (size_t i = 0; i < obj->len; i++) {
        const attn_json *k = &obj->items[2 * i];
        if (k->len == key_len && (key_len == 0 || memcmp(k->str, key, key_len) == 0)) return &obj->items[2 * i + 1];
    }
    return NULL;
}

const attn_json *attn_json_get(const attn_json *obj, const char *key) {
    if (!key) return NULL;
    return attn_json_getn(obj, key, strlen(key));
}

int attn_json_is_null(const attn_json *v) { return v && v->type == ATTN_JSON_NULL; }

int attn_json_as_bool(const attn_json *v, int *out) {
    if (!v || v->type != ATTN_JSON_BOOL) return 0;
    if (out) *out = v->boolean;
    return 1;
}

int attn_json_as_double(const attn_json *v, double *out) {
    if (!v || v->type != ATTN_JSON_NUMBER) return 0;
    if (out) *out = v->number;
    return 1;
}

/* Magnitude of an integer lexeme into *mag; 0 when it is not an integer or exceeds u64. */
static int integer_lexeme(const attn_json *v, int *neg, uint64_t *mag) {
    if (!v || v->type != ATTN_JSON_NUMBER) return 0;
    const char *s = v->str;
    size_t i = 0;
    *neg = 0;
    if (s[0] == '-') {
        *neg = 1;
        i = 1;
    }
    uint64_t m = 0;
    if (i >= v->len) return 0;
    for (; i < v->len; i++) {
        if (!is_digit((unsigned char)s[i])) return 0; /* fraction or exponent */
        unsigned d = (unsigned)(s[i] - '0');
        if (m > (UINT64_MAX - d) / 10) return 0;
        m = m * 10 + d;
    }
    *mag = m;
    return 1;
}

int attn_json_as_u64(const attn_json *v, uint64_t *out) {
    int neg;
    uint64_t m;
    if (!integer_lexeme(v, &neg, &m)) return 0;
    if (neg && m != 0) return 0;
    if (out) *out = m;
    return 1;
}

int attn_json_as_i64(const attn_json *v, int64_t *out) {
    int neg;
    uint64_t m;
    if (!integer_lexeme(v, &neg, &m)) return 0;
    if (neg) {
        if (m > (uint64_t)INT64_MAX + 1) return 0;
        if (out) *out = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
    } else {
        if (m > (uint64_t)INT64_MAX) return 0;
        if (out) *out = (int64_t)m;
    }
    return 1;
}

const char *attn_json_as_string(const attn_json *v, size_t *len) {
    if (!v || v->type != ATTN_JSON_STRING) return NULL;
    if (len) *len = v->len;
    return v->str;
}

/* ---- escaping --------------------------------------------------------------------------- */

static size_t escape_one(unsigned char c, char *d) {
    static const char hex[] = "0123456789abcdef";
    const char *e = NULL;
    switch (c) {
    case '"': e = "\\\""; break;
    case '\\': e = "\\\\"; break;
    case '\b': e = "\\b"; break;
    case '\f': e = "\\f"; break;
    case '\n': e = "\\n"; break;
    case '\r': e = "\\r"; break;
    case '\t': e = "\\t"; break;
    default: break;
    }
    if (e) {
        if (d) memcpy(d, e, 2);
        return 2;
    }
    if (c < 0x20) {
        if (d) {
            memcpy(d, "\\u00", 4);
            d[4] = hex[c >> 4];
            d[5] = hex[c & 15];
        }
        return 6;
    }
    if (d) d[0] = (char)c;
    return 1;
}

size_t attn_json_escaped_len(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        size_t k = escape_one((unsigned char)s[i], NULL);
        if (n > SIZE_MAX - k) return SIZE_MAX;
        n += k;
    }
    return n;
}

size_t attn_json_escape(char *dst, const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += escape_one((unsigned char)s[i], dst + n);
    return n;
}
