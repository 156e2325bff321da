/* The strict JSON parser: valid and invalid documents, escapes, surrogates, depth, numbers,
 * UTF-8, lookups and escaping. */
#include <locale.h>

#include "io/json.h"
#include "test_util.h"

static attn_json_status parse_s(const char *s, attn_json_doc **doc, attn_json_error *err) {
    return attn_json_parse(s, strlen(s), NULL, doc, err);
}

/* Parse s and expect success. */
static void ok(const char *s) {
    attn_json_doc *doc = NULL;
    attn_json_error err;
    attn_json_status st = parse_s(s, &doc, &err);
    CHECK(st == ATTN_JSON_OK && doc, "expected valid: %s (got %d: %s)", s, (int)st, err.message);
    attn_json_free(doc);
}

/* Parse text[0..len) and expect the given error with a message. */
static void bad_n(const char *s, size_t len, attn_json_status want) {
    attn_json_doc *doc = (attn_json_doc *)&doc; /* must be reset to NULL */
    attn_json_error err;
    attn_json_status st = attn_json_parse(s, len, NULL, &doc, &err);
    CHECK(st == want && doc == NULL && err.status == want && err.message[0],
          "expected error %d for '%.*s', got %d (%s)", (int)want, (int)len, s, (int)st, err.message);
    if (st == ATTN_JSON_OK) attn_json_free(doc);
}
static void bad(const char *s, attn_json_status want) { bad_n(s, strlen(s), want); }

/* The single string in s, decoded, must equal want[0..wlen). */
static void str_is(const char *s, const char *want, size_t wlen) {
    attn_json_doc *doc = NULL;
    attn_json_error err;
    attn_json_status st = parse_s(s, &doc, &err);
    CHECK(st == ATTN_JSON_OK, "parse %s: %s", s, err.message);
    if (st != ATTN_JSON_OK) return;
    size_t len = 0;
    const char *v = attn_json_as_string(attn_json_root(doc), &len);
    CHECK(v && len == wlen && memcmp(v, want, wlen) == 0 && v[len] == '\0', "decode %s", s);
    attn_json_free(doc);
}

static void test_valid(void) {
    const char *docs[] = {
        "null",
        "true",
        "false",
        "0",
        "-0",
        "1",
        "-1",
        "12345",
        "1.5",
        "-0.0",
        "1e10",
        "1E+10",
        "1e-10",
        "123.456e-7",
        "\"\"",
        "\"abc\"",
        "[]",
        "{}",
        "[1,2,3]",
        " \t\r\n[ 1 , 2 ]\n ",
        "{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":\"e\"}}",
        "[[[[]]]]",
        "{\"\":0}",
        "\"\\u00e9\\u20ac\\ud83d\\ude00\"",
        "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
        "{\"a\":1,\"a\":2}", /* duplicates allowed by default */
        "1.7976931348623157e308",
        "4.9e-324",
        "1e-400", /* underflow to 0 is fine */
        "123456789012345678901234567890",
        "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) ok(docs[i]);
}

static void test_invalid(void) {
    const attn_json_status S = ATTN_JSON_ERR_SYNTAX, U = ATTN_JSON_ERR_UTF8;
    const char *syntax[] = {
        "",
        " ",
        "[",
        "]",
        "{",
        "}",
        "[1,]",
        "[1,,2]",
        "[,1]",
        "{\"a\":1,}",
        "{,}",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\" 1}",
        "{a:1}",
        "{'a':1}",
        "['a']",
        "[1 2]",
        "{\"a\":1 \"b\":2}",
        "01",
        "-01",
        "00",
        "+1",
        ".5",
        "1.",
        "1.e5",
        "1e",
        "1e+",
        "-",
        "--1",
        "0x10",
        "1_000",
        "NaN",
        "Infinity",
        "-Infinity",
        "nul",
        "tru",
        "falsey",
        "True",
        "NULL",
        "[1]x",
        "1 2",
        "{} {}",
        "[]]",
        "\"abc",
        "\"abc\\\"",
        "\"\\x41\"",
        "\"\\u12\"",
        "\"\\u12G4\"",
        "\"\\uD800\"",
        "\"\\uDC00\"",
        "\"\\uD800\\u0041\"",
        "\"\\uD800x\"",
        "\"\\uDBFF\\uDBFF\"",
        "\"a\tb\"",
        "\"a\nb\"",
        "\"\x01\"",
        "[1] // c",
        "/* c */ 1",
        "1e400",
        "-1e400",
        "\xef\xbb\xbf{}",
        "[\"a\" \"b\"]",
        "{\"a\":1}}",
        "\\u0041",
        "'x'",
    };
    for (size_t i = 0; i < sizeof syntax / sizeof syntax[0]; i++) bad(syntax[i], S);
    /* the NUL byte is not whitespace: trailing garbage */
    bad_n("{}\0", 3, S);
    bad_n("\"a\0b\"", 5, S); /* raw control character */
    const char *utf8[] = {
        "\"\x80\"",             /* lone continuation byte */
        "\"\xc0\xaf\"",         /* overlong '/' */
        "\"\xc1\xbf\"",         /* overlong */
        "\"\xe0\x80\xaf\"",     /* overlong 3-byte */
        "\"\xf0\x80\x80\xaf\"", /* overlong 4-byte */
        "\"\xed\xa0\x80\"",     /* encoded surrogate U+D800 */
        "\"\xed\xbf\xbf\"",     /* encoded surrogate U+DFFF */
        "\"\xf4\x90\x80\x80\"", /* U+110000 */
        "\"\xf5\x80\x80\x80\"", /* invalid lead */
        "\"\xff\"",
        "\"\xfe\"",         /* never valid */
        "\"\xc3\"",         /* truncated 2-byte */
        "\"\xe2\x82\"",     /* truncated 3-byte */
        "\"\xf0\x9f\x98\"", /* truncated 4-byte */
        "\"\xc3\x28\"",     /* bad continuation */
        "[1]\xff",          /* invalid UTF-8 outside a string */
    };
    for (size_t i = 0; i < sizeof utf8 / sizeof utf8[0]; i++) bad(utf8[i], U);
    /* truncation inside a multibyte character at the very end of the input */
    bad_n("\"\xe2\x82\xac\"", 3, U);
    /* arguments */
    attn_json_doc *doc = NULL;
    CHECK(attn_json_parse(NULL, 1, NULL, &doc, NULL) == ATTN_JSON_ERR_ARGUMENT, "NULL text");
    CHECK(attn_json_parse("1", 1, NULL, NULL, NULL) == ATTN_JSON_ERR_ARGUMENT, "NULL out");
    CHECK(attn_json_parse(NULL, 0, NULL, &doc, NULL) == ATTN_JSON_ERR_SYNTAX, "empty input");
}

static void test_strings(void) {
    str_is("\"abc\"", "abc", 3);
    str_is("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8);
    str_is("\"\\u0041\\u00e9\"", "A\xc3\xa9", 3);
    str_is("\"\\u20AC\"", "\xe2\x82\xac", 3);
    str_is("\"\\uD83D\\uDE00\"", "\xf0\x9f\x98\x80", 4); /* U+1F600 */
    str_is("\"\\ud800\\udc00\"", "\xf0\x90\x80\x80", 4); /* U+10000, lowest pair */
    str_is("\"\\uDBFF\\uDFFF\"", "\xf4\x8f\xbf\xbf", 4); /* U+10FFFF, highest pair */
    str_is("\"a\\u0000b\"", "a\0b", 3);                  /* embedded NUL kept, length says so */
    str_is("\"\\uFFFF\"", "\xef\xbf\xbf", 3);
    str_is("\"\xf4\x8f\xbf\xbf\"", "\xf4\x8f\xbf\xbf", 4);
    str_is("\"\x7f\"", "\x7f", 1); /* DEL needs no escape */
}

static void test_numbers(void) {
    struct {
        const char *s;
        double v;
    } cases[] = {
        {"0", 0.0},
        {"-0", -0.0},
        {"1.5", 1.5},
        {"-2.25e2", -225.0},
        {"1E3", 1000.0},
        {"0.1", 0.1},
        {"1e-400", 0.0},
        {"2.2250738585072014e-308", 2.2250738585072014e-308},
        {"9007199254740993", 9007199254740992.0}, /* rounds to even */
        {"1.7976931348623157e308", 1.7976931348623157e308},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_json_doc *doc = NULL;
        CHECK(parse_s(cases[i].s, &doc, NULL) == ATTN_JSON_OK, "parse %s", cases[i].s);
        double d = -1;
        CHECK(attn_json_as_double(attn_json_root(doc), &d) && d == cases[i].v && signbit(d) == signbit(cases[i].v),
              "%s -> %.17g", cases[i].s, d);
        attn_json_free(doc);
    }
    /* integers: exact u64/i64, no fraction or exponent */
    struct {
        const char *s;
        int u_ok;
        uint64_t u;
        int i_ok;
        int64_t i;
    } ints[] = {
        {"0", 1, 0, 1, 0},
        {"-0", 1, 0, 1, 0},
        {"42", 1, 42, 1, 42},
        {"-42", 0, 0, 1, -42},
        {"18446744073709551615", 1, UINT64_MAX, 0, 0},
        {"18446744073709551616", 0, 0, 0, 0},
        {"9223372036854775807", 1, 9223372036854775807ull, 1, INT64_MAX},
        {"-9223372036854775808", 0, 0, 1, INT64_MIN},
        {"-9223372036854775809", 0, 0, 0, 0},
        {"1.0", 0, 0, 0, 0},
        {"1e2", 0, 0, 0, 0},
        {"100000000000000000000000", 0, 0, 0, 0},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        attn_json_doc *doc = NULL;
        CHECK(parse_s(ints[k].s, &doc, NULL) == ATTN_JSON_OK, "parse %s", ints[k].s);
        uint64_t u = 7;
        int64_t i = 7;
        int uo = attn_json_as_u64(attn_json_root(doc), &u);
        int io = attn_json_as_i64(attn_json_root(doc), &i);
        CHECK(uo == ints[k].u_ok && (!uo || u == ints[k].u), "as_u64(%s)", ints[k].s);
        CHECK(io == ints[k].i_ok && (!io || i == ints[k].i), "as_i64(%s)", ints[k].s);
        attn_json_free(doc);
    }
}

static void test_depth(void) {
    /* exactly the default depth passes, one more fails; a huge depth fails without crashing */
    size_t n = 200000;
    char *s = xmalloc(2 * n + 1);
    for (size_t d = 127; d <= 129; d++) {
        memset(s, '[', d);
        memset(s + d, ']', d);
        attn_json_doc *doc = NULL;
        attn_json_status st = attn_json_parse(s, 2 * d, NULL, &doc, NULL);
        CHECK(st == (d <= 128 ? ATTN_JSON_OK : ATTN_JSON_ERR_DEPTH), "depth %zu -> %d", d, (int)st);
        attn_json_free(doc);
    }
    memset(s, '[', n);
    memset(s + n, ']', n);
    attn_json_doc *doc = NULL;
    CHECK(attn_json_parse(s, 2 * n, NULL, &doc, NULL) == ATTN_JSON_ERR_DEPTH, "depth %zu", n);
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = '{';
        s[2 * i + 1] = '"';
    }
    CHECK(attn_json_parse(s, 2 * n, NULL, &doc, NULL) != ATTN_JSON_OK, "object nesting");
    /* the largest limit allowed (requests above it are clamped) recurses safely */
    attn_json_options deep = {1000000, 0};
    for (size_t d = ATTN_JSON_MAX_MAX_DEPTH; d <= ATTN_JSON_MAX_MAX_DEPTH + 1; d++) {
        memset(s, '[', d);
        memset(s + d, ']', d);
        attn_json_status st = attn_json_parse(s, 2 * d, &deep, &doc, NULL);
        CHECK(st == (d <= ATTN_JSON_MAX_MAX_DEPTH ? ATTN_JSON_OK : ATTN_JSON_ERR_DEPTH), "depth %zu -> %d", d, (int)st);
        if (st == ATTN_JSON_OK) attn_json_free(doc);
    }
    /* options: a custom limit, and duplicates rejected on request */
    attn_json_options opt = {4, 0};
    CHECK(attn_json_parse("[[[[1]]]]", 9, &opt, &doc, NULL) == ATTN_JSON_OK, "depth 4 of 4");
    attn_json_free(doc);
    CHECK(attn_json_parse("[[[[[1]]]]]", 11, &opt, &doc, NULL) == ATTN_JSON_ERR_DEPTH, "depth 5 of 4");
    CHECK(attn_json_parse("{\"a\":{\"b\":{\"c\":{\"d\":1}}}}", 25, &opt, &doc, NULL) == ATTN_JSON_OK,
          "object depth 4 of 4");
    attn_json_free(doc);
    attn_json_options dup = {0, 1};
    attn_json_error err;
    const char *d1 = "{\"a\":1,\"b\":2,\"a\":3}";
    CHECK(attn_json_parse(d1, strlen(d1), &dup, &doc, &err) == ATTN_JSON_ERR_DUPLICATE_KEY &&
              strstr(err.message, "\"a\""),
          "duplicate key: %s", err.message);
    const char *d2 = "{\"a\":{\"x\":1},\"b\":{\"x\":2}}";
    CHECK(attn_json_parse(d2, strlen(d2), &dup, &doc, NULL) == ATTN_JSON_OK, "same key, other objects");
    attn_json_free(doc);
    free(s);
}

static void test_tree(void) {
    const char *s = "{\"name\": \"attn\", \"layers\": [1, 2.5, -3], \"nested\": {\"ok\": true, "
                    "\"none\": null}, \"name\": \"second\", \"k\\u00e9y\": 7}";
    attn_json_doc *doc = NULL;
    attn_json_error err;
    CHECK(parse_s(s, &doc, &err) == ATTN_JSON_OK, "parse tree: %s", err.message);
    if (!doc) return;
    const attn_json *r = attn_json_root(doc);
    CHECK(r->type == ATTN_JSON_OBJECT && attn_json_count(r) == 5, "root object of 5 members");
    CHECK(!strcmp(attn_json_as_string(attn_json_get(r, "name"), NULL), "attn"), "first duplicate wins");
    CHECK(!strcmp(attn_json_member_key(r, 3)->str, "name") && !strcmp(attn_json_member_value(r, 3)->str, "second"),
          "members in document order");
    const attn_json *layers = attn_json_get(r, "layers");
    CHECK(attn_json_count(layers) == 3, "array count");
    int64_t i64 = 0;
    double d = 0;
    CHECK(attn_json_as_i64(attn_json_at(layers, 0), &i64) && i64 == 1, "layers[0]");
    CHECK(!attn_json_as_i64(attn_json_at(layers, 1), &i64), "2.5 is not an integer");
    CHECK(attn_json_as_double(attn_json_at(layers, 1), &d) && d == 2.5, "layers[1]");
    CHECK(attn_json_as_i64(attn_json_at(layers, 2), &i64) && i64 == -3, "layers[2]");
    CHECK(attn_json_at(layers, 3) == NULL, "out of range");
    const attn_json *nested = attn_json_get(r, "nested");
    int b = 0;
    CHECK(attn_json_as_bool(attn_json_get(nested, "ok"), &b) && b == 1, "nested.ok");
    CHECK(attn_json_is_null(attn_json_get(nested, "none")), "nested.none");
    CHECK(attn_json_get(nested, "missing") == NULL, "absent key");
    CHECK(attn_json_get(layers, "x") == NULL && attn_json_at(nested, 0) == NULL, "wrong container kind");
    CHECK(attn_json_get(r, "k\xc3\xa9y") != NULL, "escaped key decoded");
    CHECK(attn_json_getn(r, "namex", 4) != NULL, "getn with a length");
    CHECK(attn_json_as_string(nested, NULL) == NULL && !attn_json_as_bool(r, &b) && !attn_json_as_double(nested, &d) &&
              !attn_json_is_null(r),
          "wrong-type accessors fail");
    CHECK(attn_json_count(NULL) == 0 && attn_json_get(NULL, "a") == NULL && attn_json_root(NULL) == NULL,
          "NULL-safe accessors");
    CHECK(attn_json_get(r, "layers")->offset == (size_t)(strstr(s, "[1,") - s), "value offset");
    CHECK(!strcmp(attn_json_type_name(ATTN_JSON_OBJECT), "object"), "type name");
    attn_json_free(doc);
    attn_json_free(NULL);

    /* error position */
    const char *e = "{\n  \"a\": [1, 2,]\n}";
    CHECK(parse_s(e, &doc, &err) == ATTN_JSON_ERR_SYNTAX && err.line == 2 && err.column == 14 &&
              strstr(err.message, "line 2 column 14"),
          "error position: %s (line %zu col %zu)", err.message, err.line, err.column);
}

static void test_escape(void) {
    const char in[] = "a\"b\\c\n\x01\x1f\x7f\xc3\xa9/";
    size_t n = sizeof in - 1;
    size_t len = attn_json_escaped_len(in, n);
    char out[128];
    size_t w = attn_json_escape(out, in, n);
    const char want[] = "a\\\"b\\\\c\\n\\u0001\\u001f\x7f\xc3\xa9/";
    CHECK(len == w && w == sizeof want - 1 && memcmp(out, want, w) == 0, "escape: %.*s", (int)w, out);
    /* round trip of every byte value that is valid UTF-8 on its own */
    char src[128], quoted[1024];
    for (int c = 0; c < 128; c++) src[c] = (char)c;
    quoted[0] = '"';
    size_t q = 1 + attn_json_escape(quoted + 1, src, 128);
    quoted[q++] = '"';
    attn_json_doc *doc = NULL;
    CHECK(attn_json_parse(quoted, q, NULL, &doc, NULL) == ATTN_JSON_OK, "escaped ASCII parses");
    size_t sl = 0;
    const char *v = attn_json_as_string(attn_json_root(doc), &sl);
    CHECK(v && sl == 128 && memcmp(v, src, 128) == 0, "escaped ASCII round trip");
    attn_json_free(doc);
}

static void test_utf8(void) {
    size_t bad = 99;
    CHECK(attn_json_utf8_valid("", 0, &bad), "empty");
    CHECK(attn_json_utf8_valid("\xf0\x9f\x98\x80 ok \xe2\x82\xac", 11, &bad), "valid");
    CHECK(!attn_json_utf8_valid("ab\xe2\x82", 4, &bad) && bad == 2, "truncated at 2");
    CHECK(!attn_json_utf8_valid("abc\x80", 4, &bad) && bad == 3, "continuation at 3");
}

/* Random inputs must never crash and errors always carry a message. */
static void test_random(void) {
    test_rng r = rng_seeded(0x15011);
    static const char *tokens[] = {"{",    "}",    "[", "]",     ",",  ":",  "\"k\"",    "1",    "-0.5e3",
                                   "true", "null", " ", "\"\\u", "\\", "\"", "\xc3\xa9", "\xff", "0"};
    char buf[64];
    for (int it = 0; it < 20000; it++) {
        size_t n = 0;
        int k = (int)(rng_next(&r) % 12);
        for (int t = 0; t < k; t++) {
            const char *tok = tokens[rng_next(&r) % (sizeof tokens / sizeof tokens[0])];
            size_t tl = strlen(tok);
            if (n + tl > sizeof buf) break;
            memcpy(buf + n, tok, tl);
            n += tl;
        }
        attn_json_doc *doc = NULL;
        attn_json_error err;
        attn_json_status st = attn_json_parse(buf, n, NULL, &doc, &err);
        if (st == ATTN_JSON_OK) {
            if (!doc) CHECK(0, "OK without a document");
            attn_json_free(doc);
        } else if (!err.message[0] || doc) {
            CHECK(0, "error %d without a message for '%.*s'", (int)st, (int)n, buf);
        }
    }
    CHECK(1, "random documents");
}

/* Numbers do not depend on LC_NUMERIC (strtod does): tried with a comma locale when one is
 * installed. */
static void test_locale(void) {
    const char *names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "ru_RU.UTF-8", "de_DE"};
    const char *used = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !used; i++)
        if (setlocale(LC_NUMERIC, names[i])) used = names[i];
    if (!used) {
        printf("test_json: no comma-decimal locale installed, locale check skipped\n");
        return;
    }
    attn_json_doc *doc = NULL;
    CHECK(attn_json_parse("[1.5, -2.5e1, 3]", 16, NULL, &doc, NULL) == ATTN_JSON_OK, "parse under %s", used);
    double a = 0, b = 0, c = 0;
    const attn_json *r = attn_json_root(doc);
    CHECK(attn_json_as_double(attn_json_at(r, 0), &a) && attn_json_as_double(attn_json_at(r, 1), &b) &&
              attn_json_as_double(attn_json_at(r, 2), &c) && a == 1.5 && b == -25.0 && c == 3.0,
          "numbers under %s: %g %g %g", used, a, b, c);
    attn_json_free(doc);
    setlocale(LC_NUMERIC, "C");
}

int main(void) {
    test_valid();
    test_invalid();
    test_strings();
    test_numbers();
    test_depth();
    test_tree();
    test_escape();
    test_utf8();
    test_random();
    test_locale();
    return test_summary("test_json");
}
