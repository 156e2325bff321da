/* Reading a tokenizer: tokenizer.json (Hugging Face tokenizers' serialization) and BERT's vocab.txt
 * with tokenizer_config.json. Every message names the file and the JSON key. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/internal.h"
#include "io/json.h"
#include "io/safe_file.h"
#include "text/tok_internal.h"
#include "text/unicode.h"

/* Largest number of ids a tokenizer may have (vocabulary and added tokens). */
#define TOK_MAX_IDS ((int64_t)1 << 24)

typedef struct jctx {
    attn_tokenizer *t;
    const char *file;
} jctx;

static attn_status jfail(const jctx *c, attn_status s, const char *key, const char *fmt, ...) ATTN_PRINTF(4, 5);
static attn_status jfail(const jctx *c, attn_status s, const char *key, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return attn_error(s, "%s: %s: %s", c->file, key, msg);
}

static attn_status type_fail(const jctx *c, const char *key, const char *want, const attn_json *v) {
    return jfail(c, ATTN_ERR_INVALID_ARGUMENT, key, "expected %s, got %s", want, attn_json_type_name(v->type));
}

/* An optional boolean member: absent or null keep *out. */
static attn_status get_bool(const jctx *c, const attn_json *obj, const char *name, const char *key, int *out) {
    const attn_json *v = attn_json_get(obj, name);
    if (!v || attn_json_is_null(v)) return ATTN_OK;
    if (!attn_json_as_bool(v, out)) return type_fail(c, key, "a boolean", v);
    return ATTN_OK;
}

/* An optional integer member in [0, max]: absent or null keep *out. */
static attn_status get_uint(const jctx *c, const attn_json *obj, const char *name, const char *key, uint64_t max,
                            int64_t *out) {
    const attn_json *v = attn_json_get(obj, name);
    uint64_t u;
    if (!v || attn_json_is_null(v)) return ATTN_OK;
    if (!attn_json_as_u64(v, &u)) {
        if (v->type == ATTN_JSON_NUMBER)
            return jfail(c, ATTN_ERR_INVALID_ARGUMENT, key, "%s is not an integer in [0, %llu]", v->str,
                         (unsigned long long)max);
        return type_fail(c, key, "an integer", v);
    }
    if (u > max)
        return jfail(c, ATTN_ERR_INVALID_ARGUMENT, key, "%llu is above %llu", (unsigned long long)u,
                     (unsigned long long)max);
    *out = (int64_t)u;
    return ATTN_OK;
}

/* An optional string member copied into *out (absent or null: a copy of def). */
static attn_status get_string(const jctx *c, const attn_json *obj, const char *name, const char *key, const char *def,
                              char **out) {
    const attn_json *v = attn_json_get(obj, name);
    const char *s = def;
    size_t len = strlen(def);
    if (v && !attn_json_is_null(v)) {
        if (v->type != ATTN_JSON_STRING) return type_fail(c, key, "a string", v);
        s = v->str, len = v->len;
        if (memchr(s, '\0', len)) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, key, "holds a NUL character");
    }
    char *p = attn__malloc(len + 1);
    if (!p) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file);
    memcpy(p, s, len + 1);
    attn__free(*out);
    *out = p;
    return ATTN_OK;
}

/* v's "type" string, or an error naming key. */
static attn_status get_type(const jctx *c, const attn_json *v, const char *key, const char **type) {
    if (v->type != ATTN_JSON_OBJECT) return type_fail(c, key, "an object", v);
    const attn_json *ty = attn_json_get(v, "type");
    char k[96];
    snprintf(k, sizeof k, "%s.type", key);
    if (!ty) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    if (ty->type != ATTN_JSON_STRING) return type_fail(c, k, "a string", ty);
    *type = ty->str;
    return ATTN_OK;
}

static attn_status unsupported(const jctx *c, const char *key, const char *type) {
    return attn_error(ATTN_ERR_UNSUPPORTED, "%s: unsupported: %s.type = %s", c->file, key, type);
}

static attn_status add_norm(const jctx *c, const char *key, tok_norm_op op) {
    attn_tokenizer *t = c->t;
    if (t->nnorm >= TOK_MAX_NORM_OPS)
        return jfail(c, ATTN_ERR_UNSUPPORTED, key, "more than %d normalizer steps", TOK_MAX_NORM_OPS);
    t->norm[t->nnorm++] = (tok_norm){.op = op};
    return ATTN_OK;
}

/* A string member as code points (a copy in *out, its length in *n); absent: an error naming key. */
static attn_status get_cps(const jctx *c, const attn_json *obj, const char *name, const char *key, uint32_t **out,
                           size_t *n) {
    const attn_json *v = attn_json_get(obj, name);
    if (!v) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, key, "missing");
    if (v->type != ATTN_JSON_STRING) return type_fail(c, key, "a string", v);
    uint32_t *p = attn__malloc((v->len + 1) * sizeof(uint32_t));
    if (!p) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file);
    size_t m = 0;
    for (size_t i = 0; i < v->len;) {
        size_t k = attn_u_decode((const unsigned char *)v->str + i, v->len - i, &p[m]);
        if (!k) {
            attn__free(p);
            return jfail(c, ATTN_ERR_INVALID_ARGUMENT, key, "invalid UTF-8");
        }
        i += k, m++;
    }
    attn__free(*out);
    *out = p, *n = m;
    return ATTN_OK;
}

/* A Replace's pattern: {"String": s} (a regex is refused, quoted); the code points in *out. */
static attn_status get_pattern_string(const jctx *c, const attn_json *v, const char *key, uint32_t **out, size_t *n) {
    char k[128];
    const attn_json *pat = attn_json_get(v, "pattern");
    snprintf(k, sizeof k, "%s.pattern", key);
    if (!pat) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    if (pat->type != ATTN_JSON_OBJECT) return type_fail(c, k, "an object", pat);
    const attn_json *re = attn_json_get(pat, "Regex");
    if (re && re->type == ATTN_JSON_STRING)
        return jfail(c, ATTN_ERR_UNSUPPORTED, k, "unsupported: the regex \"%.60s%s\"", re->str,
                     re->len > 60 ? "..." : "");
    snprintf(k, sizeof k, "%s.pattern.String", key);
    attn_status st = get_cps(c, pat, "String", k, out, n);
    if (!st && !*n) return jfail(c, ATTN_ERR_UNSUPPORTED, k, "unsupported: an empty pattern");
    return st;
}

/* Prepend {prepend}, Replace {pattern, content}, Strip {strip_left, strip_right}. */
static attn_status text_normalizer(const jctx *c, const attn_json *v, const char *key, const char *type) {
    attn_tokenizer *t = c->t;
    char k[128];
    tok_norm_op op = !strcmp(type, "Prepend")   ? TOK_NORM_PREPEND
                     : !strcmp(type, "Replace") ? TOK_NORM_REPLACE
                                                : TOK_NORM_STRIP;
    attn_status st = add_norm(c, key, op);
    if (st) return st;
    tok_norm *n = &t->norm[t->nnorm - 1];
    if (op == TOK_NORM_PREPEND) {
        snprintf(k, sizeof k, "%s.prepend", key);
        return get_cps(c, v, "prepend", k, &n->str, &n->nstr);
    }
    if (op == TOK_NORM_REPLACE) {
        snprintf(k, sizeof k, "%s.content", key);
        if ((st = get_pattern_string(c, v, key, &n->str, &n->nstr))) return st;
        return get_cps(c, v, "content", k, &n->to, &n->nto);
    }
    n->left = n->right = 1;
    snprintf(k, sizeof k, "%s.strip_left", key);
    if ((st = get_bool(c, v, "strip_left", k, &n->left))) return st;
    snprintf(k, sizeof k, "%s.strip_right", key);
    return get_bool(c, v, "strip_right", k, &n->right);
}

static attn_status bert_normalizer(const jctx *c, const attn_json *v, const char *key) {
    int clean = 1, chinese = 1, lower = 1, strip = -1;
    char k[128];
    attn_status st;
    snprintf(k, sizeof k, "%s.clean_text", key);
    if ((st = get_bool(c, v, "clean_text", k, &clean))) return st;
    snprintf(k, sizeof k, "%s.handle_chinese_chars", key);
    if ((st = get_bool(c, v, "handle_chinese_chars", k, &chinese))) return st;
    snprintf(k, sizeof k, "%s.lowercase", key);
    if ((st = get_bool(c, v, "lowercase", k, &lower))) return st;
    snprintf(k, sizeof k, "%s.strip_accents", key);
    if ((st = get_bool(c, v, "strip_accents", k, &strip))) return st;
    if (strip < 0) strip = lower; /* null: follows lowercase */
    if (clean && (st = add_norm(c, key, TOK_NORM_CLEAN))) return st;
    if (chinese && (st = add_norm(c, key, TOK_NORM_CHINESE))) return st;
    if (strip && ((st = add_norm(c, key, TOK_NORM_NFD)) || (st = add_norm(c, key, TOK_NORM_STRIP_MN)))) return st;
    if (lower && (st = add_norm(c, key, TOK_NORM_LOWER))) return st;
    return ATTN_OK;
}

static attn_status read_normalizer(const jctx *c, const attn_json *v, const char *key, int depth) {
    const char *type;
    attn_status st;
    if (attn_json_is_null(v)) return ATTN_OK;
    if ((st = get_type(c, v, key, &type))) return st;
    if (!strcmp(type, "BertNormalizer")) return bert_normalizer(c, v, key);
    if (!strcmp(type, "NFD")) return add_norm(c, key, TOK_NORM_NFD);
    if (!strcmp(type, "Lowercase")) return add_norm(c, key, TOK_NORM_LOWER);
    if (!strcmp(type, "StripAccents")) return add_norm(c, key, TOK_NORM_STRIP_MARKS);
    if (!strcmp(type, "NFC")) return add_norm(c, key, TOK_NORM_NFC);
    if (!strcmp(type, "NFKC")) return add_norm(c, key, TOK_NORM_NFKC);
    if (!strcmp(type, "NFKD")) return add_norm(c, key, TOK_NORM_NFKD);
    if (!strcmp(type, "Prepend") || !strcmp(type, "Replace") || !strcmp(type, "Strip"))
        return text_normalizer(c, v, key, type);
    if (strcmp(type, "Sequence") || depth > 4) return unsupported(c, key, type);
    const attn_json *list = attn_json_get(v, "normalizers");
    char k[96];
    snprintf(k, sizeof k, "%s.normalizers", key);
    if (!list) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    if (list->type != ATTN_JSON_ARRAY) return type_fail(c, k, "an array", list);
    for (size_t i = 0; i < list->len; i++) {
        snprintf(k, sizeof k, "%s.normalizers[%zu]", key, i);
        if ((st = read_normalizer(c, &list->items[i], k, depth + 1))) return st;
    }
    return ATTN_OK;
}

static attn_status add_pre(const jctx *c, const char *key, tok_pre_op op, tok_pre **out) {
    attn_tokenizer *t = c->t;
    if (t->npre_ops >= TOK_MAX_PRE_OPS)
        return jfail(c, ATTN_ERR_UNSUPPORTED, key, "more than %d pre-tokenizer steps", TOK_MAX_PRE_OPS);
    *out = &t->pre[t->npre_ops++];
    **out = (tok_pre){.op = op};
    return ATTN_OK;
}

/* A behavior member (SplitDelimiterBehavior's names). */
static attn_status get_behavior(const jctx *c, const attn_json *v, const char *key, tok_behavior *out) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    char k[128];
    snprintf(k, sizeof k, "%s.behavior", key);
    const attn_json *b = attn_json_get(v, "behavior");
    if (!b) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    if (b->type != ATTN_JSON_STRING) return type_fail(c, k, "a string", b);
    for (int i = 0; i < 5; i++)
        if (!strcmp(b->str, names[i])) {
            *out = (tok_behavior)i;
            return ATTN_OK;
        }
    return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "unknown: %.40s", b->str);
}

/* The regexes matched by hand (tok_pretok.c), as tokenizer.json writes them. */
static const char *const known_regex[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    /* parenthesised: one literal on purpose, split only for the line length */
    ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+"),
    ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+")};

/* Split {pattern: {"String": s} or {"Regex": one of known_regex}, behavior, invert}. */
static attn_status split_pre(const jctx *c, const attn_json *v, const char *key) {
    tok_pre *p = NULL;
    char k[128];
    attn_status st = add_pre(c, key, TOK_PRE_SPLIT, &p);
    if (st || (st = get_behavior(c, v, key, &p->behavior))) return st;
    snprintf(k, sizeof k, "%s.invert", key);
    if ((st = get_bool(c, v, "invert", k, &p->invert))) return st;
    const attn_json *pat = attn_json_get(v, "pattern"), *re = pat ? attn_json_get(pat, "Regex") : NULL;
    snprintf(k, sizeof k, "%s.pattern.Regex", key);
    if (re && re->type != ATTN_JSON_STRING) return type_fail(c, k, "a string", re);
    if (!re) {
        p->pattern = TOK_PAT_STRING;
        return get_pattern_string(c, v, key, &p->str, &p->nstr);
    }
    for (int i = 0; i < 3; i++)
        if (!strcmp(re->str, known_regex[i]) && strlen(known_regex[i]) == re->len) {
            p->pattern = (tok_pattern)(TOK_PAT_GPT2 + i);
            return ATTN_OK;
        }
    return jfail(c, ATTN_ERR_UNSUPPORTED, k,
                 "unsupported: the regex \"%.60s%s\" (attn matches GPT-2's, Llama-3's and Qwen2's patterns only)",
                 re->str, re->len > 60 ? "..." : "");
}

/* Metaspace {replacement, prepend_scheme (or the older add_prefix_space), split}. */
static attn_status metaspace_pre(const jctx *c, const attn_json *v, const char *key) {
    tok_pre *p = NULL;
    char k[128];
    uint32_t *rep = NULL;
    size_t nrep = 0;
    attn_status st = add_pre(c, key, TOK_PRE_METASPACE, &p);
    snprintf(k, sizeof k, "%s.replacement", key);
    if (st || (st = get_cps(c, v, "replacement", k, &rep, &nrep))) return st;
    p->replacement = nrep ? rep[0] : 0;
    attn__free(rep);
    if (nrep != 1) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "not one char");
    p->flag = 1, p->prepend = 2;
    int add = 1;
    snprintf(k, sizeof k, "%s.split", key);
    if ((st = get_bool(c, v, "split", k, &p->flag))) return st;
    snprintf(k, sizeof k, "%s.add_prefix_space", key);
    if ((st = get_bool(c, v, "add_prefix_space", k, &add))) return st;
    p->prepend = add ? 2 : 0;
    const attn_json *ps = attn_json_get(v, "prepend_scheme");
    snprintf(k, sizeof k, "%s.prepend_scheme", key);
    if (!ps || attn_json_is_null(ps)) return ATTN_OK;
    if (ps->type != ATTN_JSON_STRING) return type_fail(c, k, "a string", ps);
    p->prepend = !strcmp(ps->str, "never") ? 0 : !strcmp(ps->str, "first") ? 1 : !strcmp(ps->str, "always") ? 2 : -1;
    if (p->prepend < 0) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "unknown: %.40s", ps->str);
    return ATTN_OK;
}

static attn_status simple_pre(const jctx *c, const attn_json *v, const char *key, const char *type) {
    tok_pre *p = NULL;
    char k[128];
    attn_status st;
    if (!strcmp(type, "BertPreTokenizer")) return add_pre(c, key, TOK_PRE_BERT, &p);
    if (!strcmp(type, "WhitespaceSplit")) return add_pre(c, key, TOK_PRE_WS_SPLIT, &p);
    if (!strcmp(type, "Whitespace")) return add_pre(c, key, TOK_PRE_WHITESPACE, &p);
    if (!strcmp(type, "Digits")) {
        snprintf(k, sizeof k, "%s.individual_digits", key);
        return (st = add_pre(c, key, TOK_PRE_DIGITS, &p)) ? st : get_bool(c, v, "individual_digits", k, &p->flag);
    }
    if (!strcmp(type, "Punctuation")) {
        if ((st = add_pre(c, key, TOK_PRE_PUNCT, &p))) return st;
        p->behavior = TOK_B_ISOLATED;
        return attn_json_get(v, "behavior") ? get_behavior(c, v, key, &p->behavior) : ATTN_OK;
    }
    if ((st = add_pre(c, key, TOK_PRE_BYTELEVEL, &p))) return st; /* ByteLevel */
    p->use_regex = 1;
    snprintf(k, sizeof k, "%s.add_prefix_space", key);
    if ((st = get_bool(c, v, "add_prefix_space", k, &p->flag))) return st;
    snprintf(k, sizeof k, "%s.use_regex", key);
    return get_bool(c, v, "use_regex", k, &p->use_regex);
}

static attn_status read_pre_tokenizer(const jctx *c, const attn_json *v, const char *key, int depth) {
    const char *type;
    attn_status st;
    if (attn_json_is_null(v)) return ATTN_OK;
    if ((st = get_type(c, v, key, &type))) return st;
    if (!strcmp(type, "BertPreTokenizer") || !strcmp(type, "WhitespaceSplit") || !strcmp(type, "Whitespace") ||
        !strcmp(type, "Digits") || !strcmp(type, "Punctuation") || !strcmp(type, "ByteLevel"))
        return simple_pre(c, v, key, type);
    if (!strcmp(type, "Split")) return split_pre(c, v, key);
    if (!strcmp(type, "Metaspace")) return metaspace_pre(c, v, key);
    if (strcmp(type, "Sequence") || depth > 4) return unsupported(c, key, type);
    const attn_json *list = attn_json_get(v, "pretokenizers");
    char k[96];
    snprintf(k, sizeof k, "%s.pretokenizers", key);
    if (!list) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    if (list->type != ATTN_JSON_ARRAY) return type_fail(c, k, "an array", list);
    for (size_t i = 0; i < list->len; i++) {
        snprintf(k, sizeof k, "%s.pretokenizers[%zu]", key, i);
        if ((st = read_pre_tokenizer(c, &list->items[i], k, depth + 1))) return st;
    }
    return ATTN_OK;
}

/* model.vocab into the hash and t->tokens (ids in [0, n), each once). */
static attn_status read_vocab(const jctx *c, const attn_json *vocab) {
    attn_tokenizer *t = c->t;
    attn_status st;
    for (size_t i = 0; i < vocab->len; i++) {
        const attn_json *key = &vocab->items[2 * i], *val = &vocab->items[2 * i + 1];
        uint64_t id;
        if (!attn_json_as_u64(val, &id) || id >= vocab->len)
            return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model.vocab",
                         "the id of token #%zu is %s, not an integer in [0, %zu)", i,
                         val->type == ATTN_JSON_NUMBER ? val->str : attn_json_type_name(val->type), vocab->len);
        if (t->tokens[id])
            return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model.vocab", "id %llu is given to two tokens",
                         (unsigned long long)id);
        if ((st = attn_tok_set_token(t, (int32_t)id, key->str, key->len))) return st;
        if ((st = attn_tok_vocab_add(t, key->str, key->len, (int32_t)id))) return st;
    }
    return ATTN_OK;
}

/* BPE's options: unk_token (null: none), fuse_unk, ignore_merges, byte_fallback,
 * continuing_subword_prefix, end_of_word_suffix; no dropout. The vocabulary and merges are read after the added tokens (read_merges). */
static attn_status read_bpe(const jctx *c, const attn_json *m) {
    attn_tokenizer *t = c->t;
    attn_status st;
    t->model = 1;
    const attn_json *unk = attn_json_get(m, "unk_token");
    if (unk && !attn_json_is_null(unk) && (st = get_string(c, m, "unk_token", "model.unk_token", "", &t->unk)))
        return st;
    if ((st = get_bool(c, m, "fuse_unk", "model.fuse_unk", &t->fuse_unk)) ||
        (st = get_bool(c, m, "ignore_merges", "model.ignore_merges", &t->ignore_merges)))
        return st;
    const char *names[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    char **dst[] = {&t->prefix, &t->suffix};
    for (int i = 0; i < 2; i++) { /* null or "": none */
        const attn_json *v = attn_json_get(m, names[i]);
        char k[64];
        snprintf(k, sizeof k, "model.%s", names[i]);
        if (!v || attn_json_is_null(v) || (v->type == ATTN_JSON_STRING && v->len == 0)) continue;
        if ((st = get_string(c, m, names[i], k, "", dst[i]))) return st;
        if (v->len > 64) return jfail(c, ATTN_ERR_UNSUPPORTED, k, "unsupported: longer than 64 bytes");
    }
    const attn_json *drop = attn_json_get(m, "dropout");
    double d;
    if (drop && !attn_json_is_null(drop) && !(attn_json_as_double(drop, &d) && d == 0))
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: model.dropout: unsupported: BPE dropout", c->file);
    return get_bool(c, m, "byte_fallback", "model.byte_fallback", &t->byte_fallback);
}

/* One merge "a b" or ["a", "b"]: both tokens and their concatenation in the vocabulary. */
static attn_status read_merge(const jctx *c, const attn_json *v, size_t i, tok_buf *cat) {
    attn_tokenizer *t = c->t;
    const char *a, *b;
    size_t al, bl;
    const char *sp = v->type == ATTN_JSON_STRING ? memchr(v->str, ' ', v->len) : NULL;
    if (sp) {
        a = v->str, al = (size_t)(sp - v->str), b = sp + 1, bl = v->len - al - 1;
    } else if (v->type == ATTN_JSON_ARRAY && v->len == 2 && v->items[0].type == ATTN_JSON_STRING &&
               v->items[1].type == ATTN_JSON_STRING) {
        a = v->items[0].str, al = v->items[0].len, b = v->items[1].str, bl = v->items[1].len;
    } else {
        return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model.merges", "[%zu] is neither \"A B\" nor [\"A\", \"B\"]", i);
    }
    size_t pl = t->prefix ? strlen(t->prefix) : 0; /* the merge drops b's first pl bytes, as tokenizers */
    if (bl < pl || (bl > pl && ((unsigned char)b[pl] & 0xC0) == 0x80))
        return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model.merges",
                     "[%zu]: '%.40s' is shorter than the continuing_subword_prefix or cut inside a char", i, b);
    cat->len = 0;
    if (attn_tok_buf_put(cat, a, al) || attn_tok_buf_put(cat, b + pl, bl - pl))
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file);
    int32_t l = attn_tok_vocab_find(t, a, al), r = attn_tok_vocab_find(t, b, bl),
            id = attn_tok_vocab_find(t, cat->p, cat->len);
    if (l < 0 || r < 0 || id < 0)
        return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model.merges", "[%zu]: '%.40s' is not in the vocabulary", i,
                     l < 0   ? a
                     : r < 0 ? b
                             : cat->p);
    attn_tok_merge_add(t, l, r, (int32_t)i, id);
    return ATTN_OK;
}

static attn_status read_merges(const jctx *c, const attn_json *m) {
    const attn_json *merges = attn_json_get(m, "merges");
    if (!merges) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model.merges", "missing");
    if (merges->type != ATTN_JSON_ARRAY) return type_fail(c, "model.merges", "an array", merges);
    if (merges->len > (size_t)TOK_MAX_IDS)
        return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model.merges", "more than %lld merges", (long long)TOK_MAX_IDS);
    attn_status st = attn_tok_merges_init(c->t, merges->len);
    tok_buf cat = {0};
    for (size_t i = 0; !st && i < merges->len; i++) st = read_merge(c, &merges->items[i], i, &cat);
    attn__free(cat.p);
    return st;
}

static attn_status read_model(const jctx *c, const attn_json *m) {
    attn_tokenizer *t = c->t;
    const char *type;
    attn_status st;
    if (!m) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model", "missing");
    if ((st = get_type(c, m, "model", &type))) return st;
    if (!strcmp(type, "BPE")) return read_bpe(c, m);
    if (strcmp(type, "WordPiece")) return unsupported(c, "model", type);
    t->max_chars = 100;
    if ((st = get_string(c, m, "unk_token", "model.unk_token", "[UNK]", &t->unk)) ||
        (st = get_string(c, m, "continuing_subword_prefix", "model.continuing_subword_prefix", "##", &t->prefix)) ||
        (st = get_uint(c, m, "max_input_chars_per_word", "model.max_input_chars_per_word", INT64_MAX, &t->max_chars)))
        return st;
    return ATTN_OK;
}

/* One added token: {id, content, special, lstrip, rstrip, single_word, normalized}. */
static attn_status read_added_token(const jctx *c, const attn_json *a, size_t i, tok_added *out) {
    char k[96];
    attn_status st;
    int64_t id = -1;
    snprintf(k, sizeof k, "added_tokens[%zu]", i);
    if (a->type != ATTN_JSON_OBJECT) return type_fail(c, k, "an object", a);
    snprintf(k, sizeof k, "added_tokens[%zu].id", i);
    if ((st = get_uint(c, a, "id", k, TOK_MAX_IDS - 1, &id))) return st;
    if (id < 0) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    out->id = (int32_t)id;
    snprintf(k, sizeof k, "added_tokens[%zu].content", i);
    const attn_json *content = attn_json_get(a, "content");
    if (!content) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    if (content->type != ATTN_JSON_STRING) return type_fail(c, k, "a string", content);
    if (!content->len) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "empty");
    if ((st = get_string(c, a, "content", k, "", &out->content))) return st;
    out->len = content->len;
    const char *names[] = {"special", "lstrip", "rstrip", "single_word", "normalized"};
    int *dst[] = {&out->special, &out->lstrip, &out->rstrip, &out->single_word, &out->normalized};
    for (int f = 0; f < 5; f++) {
        snprintf(k, sizeof k, "added_tokens[%zu].%s", i, names[f]);
        if ((st = get_bool(c, a, names[f], k, dst[f]))) return st;
    }
    return ATTN_OK;
}

static attn_status read_added_tokens(const jctx *c, const attn_json *list) {
    attn_tokenizer *t = c->t;
    if (!list || attn_json_is_null(list)) return ATTN_OK;
    if (list->type != ATTN_JSON_ARRAY) return type_fail(c, "added_tokens", "an array", list);
    t->added = attn__calloc(list->len ? list->len : 1, sizeof(tok_added));
    if (!t->added) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file);
    for (size_t i = 0; i < list->len; i++) {
        attn_status st = read_added_token(c, &list->items[i], i, &t->added[i]);
        t->nadded = i + 1;
        if (st) return st;
    }
    return ATTN_OK;
}

/* Sizes the id tables: the vocabulary's n ids and the added tokens' (dense: below n + added). */
static attn_status alloc_ids(const jctx *c, size_t nvocab) {
    attn_tokenizer *t = c->t;
    int64_t n = (int64_t)nvocab;
    if (n > TOK_MAX_IDS)
        return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model.vocab", "more than %lld tokens", (long long)TOK_MAX_IDS);
    for (size_t i = 0; i < t->nadded; i++) {
        if (t->added[i].id >= (int64_t)(nvocab + t->nadded))
            return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "added_tokens",
                         "[%zu].id %d is beyond the %zu ids of the vocabulary and the added tokens", i, t->added[i].id,
                         nvocab + t->nadded);
        if (t->added[i].id >= n) n = t->added[i].id + 1;
    }
    t->ntokens = n;
    t->tokens = attn__calloc((size_t)n ? (size_t)n : 1, sizeof(char *));
    if (!t->tokens) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file);
    return attn_tok_vocab_init(t, nvocab);
}

/* The added tokens take their ids (over the vocabulary's token of that id, as HF answers). */
static attn_status place_added(const jctx *c) {
    attn_tokenizer *t = c->t;
    for (size_t i = 0; i < t->nadded; i++) {
        const tok_added *a = &t->added[i];
        attn_status st = attn_tok_set_token(t, a->id, a->content, a->len);
        if (st) return st;
    }
    return ATTN_OK;
}

/* Append ids to the post-processor's list before (seen_seq 0) or after the sequence. */
static attn_status push_ids(const jctx *c, int after, const int32_t *ids, size_t n) {
    attn_tokenizer *t = c->t;
    int32_t **list = after ? &t->post_ids : &t->pre_ids;
    size_t *len = after ? &t->npost : &t->npre;
    if (*len + n > 4096) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "post_processor", "more than 4096 special ids");
    int32_t *p = attn__realloc(*list, (*len + n + 1) * sizeof(int32_t));
    if (!p) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file);
    if (n) memcpy(p + *len, ids, n * sizeof(int32_t));
    *list = p;
    *len += n;
    return ATTN_OK;
}

/* One "SpecialToken" of TemplateProcessing's single template: its ids from special_tokens. */
static attn_status template_special(const jctx *c, const attn_json *sp, const attn_json *specials, size_t i,
                                    int after) {
    char k[128];
    snprintf(k, sizeof k, "post_processor.single[%zu].SpecialToken.id", i);
    const attn_json *name = attn_json_get(sp, "id");
    if (!name || name->type != ATTN_JSON_STRING) return type_fail(c, k, "a string", name ? name : sp);
    const attn_json *def = attn_json_getn(specials, name->str, name->len);
    snprintf(k, sizeof k, "post_processor.special_tokens[\"%.40s\"].ids", name->str);
    if (!def) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    const attn_json *ids = attn_json_get(def, "ids");
    if (!ids || ids->type != ATTN_JSON_ARRAY) return type_fail(c, k, "an array", ids ? ids : def);
    for (size_t j = 0; j < ids->len; j++) {
        uint64_t u;
        if (!attn_json_as_u64(&ids->items[j], &u) || u >= (uint64_t)c->t->ntokens)
            return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "[%zu] is not an id of the vocabulary (%lld ids)", j,
                         (long long)c->t->ntokens);
        int32_t id = (int32_t)u;
        attn_status st = push_ids(c, after, &id, 1);
        if (st) return st;
    }
    return ATTN_OK;
}

static attn_status template_processing(const jctx *c, const attn_json *v) {
    const attn_json *single = attn_json_get(v, "single"), *specials = attn_json_get(v, "special_tokens");
    if (!single || single->type != ATTN_JSON_ARRAY)
        return single ? type_fail(c, "post_processor.single", "an array", single)
                      : jfail(c, ATTN_ERR_INVALID_ARGUMENT, "post_processor.single", "missing");
    if (specials && specials->type != ATTN_JSON_OBJECT)
        return type_fail(c, "post_processor.special_tokens", "an object", specials);
    int seen = 0;
    char k[96];
    for (size_t i = 0; i < single->len; i++) {
        const attn_json *it = &single->items[i], *sp = attn_json_get(it, "SpecialToken"),
                        *seq = attn_json_get(it, "Sequence");
        snprintf(k, sizeof k, "post_processor.single[%zu]", i);
        if (sp && sp->type == ATTN_JSON_OBJECT) {
            attn_status st = template_special(c, sp, specials, i, seen);
            if (st) return st;
        } else if (seq && seq->type == ATTN_JSON_OBJECT) {
            const attn_json *id = attn_json_get(seq, "id");
            if (!id || id->type != ATTN_JSON_STRING || strcmp(id->str, "A") || seen)
                return jfail(c, ATTN_ERR_UNSUPPORTED, k, "unsupported: a single template's sequence other than one $A");
            seen = 1;
        } else {
            return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        }
    }
    if (!seen) return jfail(c, ATTN_ERR_UNSUPPORTED, "post_processor.single", "unsupported: no $A");
    return ATTN_OK;
}

/* BertProcessing: {"cls": ["[CLS]", id], "sep": ["[SEP]", id]}. */
static attn_status bert_processing(const jctx *c, const attn_json *v) {
    const char *names[] = {"cls", "sep"};
    for (int i = 0; i < 2; i++) {
        char k[64];
        snprintf(k, sizeof k, "post_processor.%s", names[i]);
        const attn_json *p = attn_json_get(v, names[i]);
        uint64_t u;
        if (!p || p->type != ATTN_JSON_ARRAY || p->len != 2 || !attn_json_as_u64(&p->items[1], &u) ||
            u >= (uint64_t)c->t->ntokens)
            return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "expected [token, id] with an id of the vocabulary");
        int32_t id = (int32_t)u;
        attn_status st = push_ids(c, i, &id, 1);
        if (st) return st;
    }
    return ATTN_OK;
}

static attn_status read_post_processor(const jctx *c, const attn_json *v, int depth) {
    const char *type;
    attn_status st;
    if (!v || attn_json_is_null(v)) return ATTN_OK;
    if ((st = get_type(c, v, "post_processor", &type))) return st;
    if (!strcmp(type, "TemplateProcessing") || !strcmp(type, "BertProcessing")) {
        if (c->t->npre || c->t->npost)
            return jfail(c, ATTN_ERR_UNSUPPORTED, "post_processor", "unsupported: two processors adding tokens");
        return !strcmp(type, "BertProcessing") ? bert_processing(c, v) : template_processing(c, v);
    }
    if (!strcmp(type, "ByteLevel")) return ATTN_OK; /* offsets only: no ids */
    if (strcmp(type, "Sequence") || depth) return unsupported(c, "post_processor", type);
    const attn_json *list = attn_json_get(v, "processors");
    if (!list) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "post_processor.processors", "missing");
    if (list->type != ATTN_JSON_ARRAY) return type_fail(c, "post_processor.processors", "an array", list);
    for (size_t i = 0; i < list->len; i++)
        if ((st = read_post_processor(c, &list->items[i], depth + 1))) return st;
    return ATTN_OK;
}

static attn_status read_truncation(const jctx *c, const attn_json *v) {
    attn_tokenizer *t = c->t;
    attn_status st;
    if (!v || attn_json_is_null(v)) return ATTN_OK;
    if (v->type != ATTN_JSON_OBJECT) return type_fail(c, "truncation", "an object", v);
    int64_t max = 0;
    if ((st = get_uint(c, v, "max_length", "truncation.max_length", INT32_MAX, &max))) return st;
    if (max < 1) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "truncation.max_length", "missing or 0");
    const attn_json *s = attn_json_get(v, "strategy"), *d = attn_json_get(v, "direction");
    if (s && !(s->type == ATTN_JSON_STRING && (!strcmp(s->str, "LongestFirst") || !strcmp(s->str, "OnlyFirst"))))
        return jfail(c, ATTN_ERR_UNSUPPORTED, "truncation.strategy", "unsupported: %s (LongestFirst, OnlyFirst)",
                     s->type == ATTN_JSON_STRING ? s->str : attn_json_type_name(s->type));
    if (d && !(d->type == ATTN_JSON_STRING && (!strcmp(d->str, "Right") || !strcmp(d->str, "Left"))))
        return jfail(c, ATTN_ERR_UNSUPPORTED, "truncation.direction", "unsupported: %s (Right, Left)",
                     d->type == ATTN_JSON_STRING ? d->str : attn_json_type_name(d->type));
    t->trunc_max = max;
    t->trunc_left = d && !strcmp(d->str, "Left");
    return ATTN_OK;
}

static attn_status add_dec(const jctx *c, const char *key, tok_dec_op op, tok_dec **out) {
    attn_tokenizer *t = c->t;
    if (t->ndec >= TOK_MAX_DEC_OPS)
        return jfail(c, ATTN_ERR_UNSUPPORTED, key, "more than %d decoder steps", TOK_MAX_DEC_OPS);
    *out = &t->dec[t->ndec++];
    **out = (tok_dec){.op = op};
    return ATTN_OK;
}

/* A string member as UTF-8 (get_string) with the key built from key and name. */
static attn_status dec_string(const jctx *c, const attn_json *v, const char *key, const char *name, const char *def,
                              char **out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", key, name);
    if (!def && !attn_json_get(v, name)) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    return get_string(c, v, name, k, def ? def : "", out);
}

/* Strip {content (one char), start, stop}. */
static attn_status strip_dec(const jctx *c, const attn_json *v, const char *key, tok_dec *d) {
    char k[128];
    uint32_t *cp = NULL;
    size_t n = 0;
    snprintf(k, sizeof k, "%s.content", key);
    attn_status st = get_cps(c, v, "content", k, &cp, &n);
    if (st) return st;
    d->content = n ? cp[0] : 0;
    attn__free(cp);
    if (n != 1) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "not one char");
    snprintf(k, sizeof k, "%s.start", key);
    if ((st = get_uint(c, v, "start", k, INT32_MAX, &d->start))) return st;
    snprintf(k, sizeof k, "%s.stop", key);
    return get_uint(c, v, "stop", k, INT32_MAX, &d->stop);
}

static attn_status decoder_step(const jctx *c, const attn_json *v, const char *key, const char *type) {
    static const char *const names[] = {"WordPiece", "ByteLevel", "ByteFallback", "Fuse",
                                        "Strip",     "Replace",   "Metaspace",    "BPEDecoder"};
    tok_dec *d = NULL;
    attn_status st;
    int op = -1;
    for (int i = 0; i < 8; i++)
        if (!strcmp(type, names[i])) op = i;
    if (op < 0) return unsupported(c, key, type);
    if ((st = add_dec(c, key, (tok_dec_op)op, &d))) return st;
    char k[128];
    switch (d->op) {
    case TOK_DEC_WORDPIECE:
        d->flag = 1;
        snprintf(k, sizeof k, "%s.cleanup", key);
        return (st = dec_string(c, v, key, "prefix", "##", &d->a)) ? st : get_bool(c, v, "cleanup", k, &d->flag);
    case TOK_DEC_STRIP: return strip_dec(c, v, key, d);
    case TOK_DEC_BPE: return dec_string(c, v, key, "suffix", "</w>", &d->a);
    case TOK_DEC_REPLACE: {
        uint32_t *cp = NULL;
        size_t n = 0;
        st = get_pattern_string(c, v, key, &cp, &n);
        tok_buf b = {0};
        for (size_t i = 0; !st && i < n; i++) {
            char u[4];
            if (attn_tok_buf_put(&b, u, attn_u_encode(cp[i], u)))
                st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file);
        }
        attn__free(cp);
        d->a = b.p;
        return st ? st : dec_string(c, v, key, "content", NULL, &d->b);
    }
    case TOK_DEC_METASPACE: {
        const attn_json *ps = attn_json_get(v, "prepend_scheme");
        int add = 1;
        snprintf(k, sizeof k, "%s.add_prefix_space", key);
        if ((st = get_bool(c, v, "add_prefix_space", k, &add))) return st;
        d->flag = ps && ps->type == ATTN_JSON_STRING ? strcmp(ps->str, "never") != 0 : add;
        return dec_string(c, v, key, "replacement", "\xe2\x96\x81", &d->a);
    }
    default: return ATTN_OK;
    }
}

static attn_status read_decoder(const jctx *c, const attn_json *v, const char *key, int depth) {
    const char *type;
    attn_status st;
    if (!v || attn_json_is_null(v)) return ATTN_OK;
    if ((st = get_type(c, v, key, &type))) return st;
    if (strcmp(type, "Sequence")) return decoder_step(c, v, key, type);
    if (depth > 4) return unsupported(c, key, type);
    const attn_json *list = attn_json_get(v, "decoders");
    char k[96];
    snprintf(k, sizeof k, "%s.decoders", key);
    if (!list) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, k, "missing");
    if (list->type != ATTN_JSON_ARRAY) return type_fail(c, k, "an array", list);
    for (size_t i = 0; i < list->len; i++) {
        snprintf(k, sizeof k, "%s.decoders[%zu]", key, i);
        if ((st = read_decoder(c, &list->items[i], k, depth + 1))) return st;
    }
    return ATTN_OK;
}

static attn_status read_padding(const jctx *c, const attn_json *v) {
    if (!v || attn_json_is_null(v)) return ATTN_OK;
    if (v->type != ATTN_JSON_OBJECT) return type_fail(c, "padding", "an object", v);
    int64_t id = -1;
    attn_status st = get_uint(c, v, "pad_id", "padding.pad_id", INT32_MAX, &id);
    if (!st && id >= 0) c->t->pad_id = (int32_t)id;
    return st;
}

/* A normalized added token matches its normalized form, and that is also the token its id gives
 * back (tokenizers' id_to_token and decode; token_to_id takes the content as written). */
static attn_status normalized_added(const jctx *c, tok_added *a) {
    attn_tokenizer *t = c->t;
    attn_status st = attn_tok_normalize(t, a->content, a->len, &a->ncp, &a->nncp);
    t->any_normalized = 1;
    tok_buf s = {0};
    for (size_t k = 0; !st && k < a->nncp; k++) {
        char u[4];
        if (attn_tok_buf_put(&s, u, attn_u_encode(a->ncp[k], u)))
            st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file);
    }
    if (!st) st = attn_tok_set_token(t, a->id, s.p ? s.p : "", s.len);
    attn__free(s.p);
    return st;
}

static attn_status read_tokenizer_json(const jctx *c, const attn_json *root) {
    attn_tokenizer *t = c->t;
    attn_status st;
    if (root->type != ATTN_JSON_OBJECT) return type_fail(c, "(root)", "an object", root);
    const attn_json *model = attn_json_get(root, "model");
    if ((st = read_model(c, model))) return st;
    const attn_json *vocab = attn_json_get(model, "vocab");
    if (!vocab) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, "model.vocab", "missing");
    if (vocab->type != ATTN_JSON_OBJECT) return type_fail(c, "model.vocab", "an object", vocab);
    if ((st = read_added_tokens(c, attn_json_get(root, "added_tokens"))) || (st = alloc_ids(c, vocab->len)) ||
        (st = read_vocab(c, vocab)) || (t->model == 1 && (st = read_merges(c, model))) || (st = place_added(c)))
        return st;
    const attn_json *norm = attn_json_get(root, "normalizer"), *pre = attn_json_get(root, "pre_tokenizer");
    if ((norm && (st = read_normalizer(c, norm, "normalizer", 0))) ||
        (pre && (st = read_pre_tokenizer(c, pre, "pre_tokenizer", 0))) ||
        (st = read_post_processor(c, attn_json_get(root, "post_processor"), 0)) ||
        (st = read_truncation(c, attn_json_get(root, "truncation"))) ||
        (st = read_decoder(c, attn_json_get(root, "decoder"), "decoder", 0)) ||
        (st = read_padding(c, attn_json_get(root, "padding"))))
        return st;
    if (t->pad_id < 0) t->pad_id = attn_tok_lookup(t, "[PAD]", 5);
    for (size_t i = 0; i < t->nadded; i++) /* normalized tokens: their own normalized form */
        if (t->added[i].normalized && (st = normalized_added(c, &t->added[i]))) return st;
    for (int b = 0; b < 256; b++) { /* byte_fallback's tokens */
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_ids[b] = attn_tok_vocab_find(t, name, 6);
    }
    return ATTN_OK;
}

/* text[0..len) parsed (duplicate keys refused); messages name `name`. */
static attn_status parse_text(const char *text, size_t len, const char *name, attn_json_doc **doc) {
    attn_json_error jerr;
    const attn_json_options jopt = {0, 1};
    attn_json_status js = attn_json_parse(text, len, &jopt, doc, &jerr);
    if (js != ATTN_JSON_OK)
        return attn_error(js == ATTN_JSON_ERR_NOMEM ? ATTN_ERR_OUT_OF_MEMORY : ATTN_ERR_INVALID_ARGUMENT, "%s: %s",
                          name, jerr.message);
    return ATTN_OK;
}

/* The file at path, parsed (duplicate keys refused); messages name `name`. */
static attn_status parse_file(const char *path, const char *name, attn_json_doc **doc) {
    char *text = NULL;
    size_t len = 0;
    attn_status st = attn_io_read_input(path, "tokenizer", ATTN_TOKENIZER_FILE_CAP, &text, &len);
    if (st) return st;
    st = parse_text(text, len, name, doc);
    attn__free(text);
    return st;
}

attn_status attn_tok_load_json_text(attn_tokenizer *t, const char *text, size_t len, const char *name) {
    attn_json_doc *doc = NULL;
    if (len > ATTN_TOKENIZER_FILE_CAP)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %zu bytes, above the cap of %llu", name, len,
                          (unsigned long long)ATTN_TOKENIZER_FILE_CAP);
    attn_status st = parse_text(text, len, name, &doc);
    if (st) return st;
    jctx c = {t, name};
    st = read_tokenizer_json(&c, attn_json_root(doc));
    attn_json_free(doc);
    return st;
}

attn_status attn_tok_load_json(attn_tokenizer *t, const char *path, const char *name) {
    attn_json_doc *doc = NULL;
    attn_status st = parse_file(path, name, &doc);
    if (st) return st;
    jctx c = {t, name};
    st = read_tokenizer_json(&c, attn_json_root(doc));
    attn_json_free(doc);
    return st;
}

/* BertTokenizerFast's settings from tokenizer_config.json (absent: the defaults). */
typedef struct bert_config {
    int lower, chinese, strip;
    char *names[5]; /* unk, sep, pad, cls, mask */
} bert_config;

static const char *const special_keys[5] = {"unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};
static const char *const special_defaults[5] = {"[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"};

static attn_status read_bert_config(const jctx *c, const attn_json *root, bert_config *cfg) {
    attn_status st;
    if (root->type != ATTN_JSON_OBJECT) return type_fail(c, "(root)", "an object", root);
    if ((st = get_bool(c, root, "do_lower_case", "do_lower_case", &cfg->lower)) ||
        (st = get_bool(c, root, "tokenize_chinese_chars", "tokenize_chinese_chars", &cfg->chinese)) ||
        (st = get_bool(c, root, "strip_accents", "strip_accents", &cfg->strip)))
        return st;
    for (int i = 0; i < 5; i++) {
        const attn_json *v = attn_json_get(root, special_keys[i]);
        if (v && v->type == ATTN_JSON_OBJECT) { /* an AddedToken: {"content": ...} */
            char k[64];
            snprintf(k, sizeof k, "%s.content", special_keys[i]);
            if ((st = get_string(c, v, "content", k, special_defaults[i], &cfg->names[i]))) return st;
        } else if ((st = get_string(c, root, special_keys[i], special_keys[i], special_defaults[i], &cfg->names[i]))) {
            return st;
        }
        if (!cfg->names[i][0]) return jfail(c, ATTN_ERR_INVALID_ARGUMENT, special_keys[i], "empty");
    }
    return ATTN_OK;
}

/* The lines of vocab.txt (Python's universal newlines: \n, \r\n, \r) as the vocabulary. */
static attn_status read_vocab_lines(const jctx *c, const char *text, size_t len) {
    attn_tokenizer *t = c->t;
    size_t lines = 0, bad;
    if (!attn_json_utf8_valid(text, len, &bad)) {
        for (size_t i = 0; i < bad; i++) lines += text[i] == '\n';
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: line %zu: invalid UTF-8", c->file, lines + 1);
    }
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n' || (text[i] == '\r' && (i + 1 == len || text[i + 1] != '\n'));
    if (len && text[len - 1] != '\n' && text[len - 1] != '\r') lines++;
    if (lines > (size_t)TOK_MAX_IDS - 5)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: more than %lld lines", c->file, (long long)TOK_MAX_IDS - 5);
    t->tokens = attn__calloc(lines + 5, sizeof(char *));
    attn_status st = !t->tokens ? attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file)
                                : attn_tok_vocab_init(t, lines + 5);
    for (size_t pos = 0, id = 0; !st && id < lines; id++) {
        size_t end = pos;
        while (end < len && text[end] != '\n' && text[end] != '\r') end++;
        if (memchr(text + pos, '\0', end - pos))
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: line %zu: holds a NUL character", c->file, id + 1);
        int32_t old = attn_tok_vocab_find(t, text + pos, end - pos);
        if (!(st = attn_tok_set_token(t, (int32_t)id, text + pos, end - pos)))
            st = attn_tok_vocab_add(t, text + pos, end - pos, (int32_t)id);
        if (!st && old >= 0) { /* a repeated token: the last line wins, the earlier id has none (as Python's dict) */
            attn__free(t->tokens[old]);
            t->tokens[old] = NULL;
        }
        t->ntokens = (int64_t)id + 1;
        pos = end + (end < len && text[end] == '\r' && end + 1 < len && text[end + 1] == '\n' ? 2 : 1);
    }
    return st;
}

/* BertTokenizerFast over the vocabulary: its special tokens (appended when missing), normalizer,
 * pre-tokenizer, [CLS] A [SEP], WordPiece decoder. */
static attn_status bert_from_vocab(const jctx *c, bert_config *cfg) {
    attn_tokenizer *t = c->t;
    attn_status st;
    t->added = attn__calloc(5, sizeof(tok_added));
    if (!t->added) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->file);
    int32_t ids[5];
    for (int i = 0; i < 5; i++) {
        size_t len = strlen(cfg->names[i]);
        ids[i] = attn_tok_lookup(t, cfg->names[i], len);
        if (ids[i] < 0) {
            ids[i] = (int32_t)t->ntokens++;
            if ((st = attn_tok_set_token(t, ids[i], cfg->names[i], len))) return st;
        }
        tok_added *a = &t->added[t->nadded++];
        a->content = cfg->names[i], a->len = len, a->id = ids[i], a->special = 1;
        cfg->names[i] = NULL;
    }
    if (cfg->strip < 0) cfg->strip = cfg->lower;
    if ((st = add_norm(c, "", TOK_NORM_CLEAN)) || (cfg->chinese && (st = add_norm(c, "", TOK_NORM_CHINESE))) ||
        (cfg->strip && ((st = add_norm(c, "", TOK_NORM_NFD)) || (st = add_norm(c, "", TOK_NORM_STRIP_MN)))) ||
        (cfg->lower && (st = add_norm(c, "", TOK_NORM_LOWER))))
        return st;
    t->pre[t->npre_ops++] = (tok_pre){.op = TOK_PRE_BERT};
    t->max_chars = 100;
    t->dec[t->ndec++] = (tok_dec){.op = TOK_DEC_WORDPIECE, .flag = 1};
    if ((st = get_string(c, NULL, "", "", "##", &t->prefix)) ||
        (st = get_string(c, NULL, "", "", "##", &t->dec[0].a)) ||
        (st = get_string(c, NULL, "", "", t->tokens[ids[0]], &t->unk)) || (st = push_ids(c, 0, &ids[3], 1)) ||
        (st = push_ids(c, 1, &ids[1], 1)))
        return st;
    t->pad_id = ids[2];
    return ATTN_OK;
}

attn_status attn_tok_load_vocab_txt(attn_tokenizer *t, const char *path, const char *name, const char *config_path) {
    bert_config cfg = {1, 1, -1, {NULL, NULL, NULL, NULL, NULL}};
    attn_status st = ATTN_OK;
    if (config_path) {
        attn_json_doc *doc = NULL;
        jctx cc = {t, "tokenizer_config.json"};
        if (!(st = parse_file(config_path, cc.file, &doc))) st = read_bert_config(&cc, attn_json_root(doc), &cfg);
        attn_json_free(doc);
    }
    jctx c = {t, name};
    for (int i = 0; i < 5 && !st; i++)
        if (!cfg.names[i]) st = get_string(&c, NULL, "", "", special_defaults[i], &cfg.names[i]);
    char *text = NULL;
    size_t len = 0;
    if (!st) st = attn_io_read_input(path, "tokenizer", ATTN_TOKENIZER_FILE_CAP, &text, &len);
    if (!st) st = read_vocab_lines(&c, text, len);
    if (!st) st = bert_from_vocab(&c, &cfg);
    attn__free(text);
    for (int i = 0; i < 5; i++) attn__free(cfg.names[i]);
    return st;
}

attn_status attn_tok_load_config_max_length(attn_tokenizer *t, const char *config_path) {
    attn_json_doc *doc = NULL;
    attn_status st = parse_file(config_path, "tokenizer_config.json", &doc);
    if (st) return st;
    const attn_json *v = attn_json_get(attn_json_root(doc), "model_max_length");
    double d;
    if (v && !attn_json_is_null(v) && !attn_json_as_double(v, &d))
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "tokenizer_config.json: model_max_length: expected a number, got %s",
                        attn_json_type_name(v->type));
    else if (v && !t->trunc_max && attn_json_as_double(v, &d) && d >= 1 && d < 1e9)
        t->trunc_max = (int64_t)d;
    attn_json_free(doc);
    return st;
}
