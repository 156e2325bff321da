/* The tokenizer object: open (by kind of path), free, the vocabulary and its lookups. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/internal.h"
#include "io/safe_file.h"
#include "text/tok_internal.h"
#include "text/unicode.h"

int attn_tok_buf_put(tok_buf *b, const void *s, size_t n) {
    if (n > SIZE_MAX / 2 - b->len) return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = attn__realloc(b->p, cap);
        if (!p) return -1;
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

attn_status attn_tok_vocab_init(attn_tokenizer *t, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 16) {
        if (cap > SIZE_MAX / 4 / sizeof(tok_slot))
            return attn_error(ATTN_ERR_OVERFLOW, "tokenizer: vocabulary too large");
        cap *= 2;
    }
    t->slots = attn__calloc(cap, sizeof(tok_slot));
    if (!t->slots) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %zu vocabulary entries", n);
    t->nslots = cap;
    return ATTN_OK;
}

attn_status attn_tok_vocab_add(attn_tokenizer *t, const char *s, size_t len, int32_t id) {
    size_t mask = t->nslots - 1;
    for (size_t i = (size_t)hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        tok_slot *e = &t->slots[i];
        if (e->s && e->len == len && memcmp(e->s, s, len) == 0) {
            e->id = id;
            return ATTN_OK;
        }
        if (!e->s) {
            char *c = attn__malloc(len + 1);
            if (!c) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
            memcpy(c, s, len);
            c[len] = '\0';
            e->s = c, e->len = len, e->id = id;
            return ATTN_OK;
        }
    }
}

int32_t attn_tok_vocab_find(const attn_tokenizer *t, const char *s, size_t len) {
    if (!t->nslots) return -1;
    size_t mask = t->nslots - 1;
    for (size_t i = (size_t)hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        const tok_slot *e = &t->slots[i];
        if (!e->s) return -1;
        if (e->len == len && memcmp(e->s, s, len) == 0) return e->id;
    }
}

int32_t attn_tok_lookup(const attn_tokenizer *t, const char *s, size_t len) {
    for (size_t i = 0; i < t->nadded; i++)
        if (t->added[i].len == len && memcmp(t->added[i].content, s, len) == 0) return t->added[i].id;
    return attn_tok_vocab_find(t, s, len);
}

attn_status attn_tok_set_token(attn_tokenizer *t, int32_t id, const char *s, size_t len) {
    char *c = attn__malloc(len + 1);
    if (!c) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    memcpy(c, s, len);
    c[len] = '\0';
    attn__free(t->tokens[id]);
    t->tokens[id] = c;
    return ATTN_OK;
}

void attn_tok_free_steps(attn_tokenizer *t) {
    for (int i = 0; i < t->nnorm; i++) {
        attn__free(t->norm[i].str);
        attn__free(t->norm[i].to);
    }
    for (int i = 0; i < t->npre_ops; i++) attn__free(t->pre[i].str);
    for (int i = 0; i < t->ndec; i++) {
        attn__free(t->dec[i].a);
        attn__free(t->dec[i].b);
    }
}

void attn_tokenizer_free(attn_tokenizer *t) {
    if (!t) return;
    for (int64_t i = 0; t->tokens && i < t->ntokens; i++) attn__free(t->tokens[i]);
    attn__free(t->tokens);
    for (size_t i = 0; i < t->nslots; i++) attn__free((void *)t->slots[i].s);
    attn__free(t->slots);
    attn__free(t->merges);
    for (size_t i = 0; t->added && i < t->nadded; i++) {
        attn__free(t->added[i].content);
        attn__free(t->added[i].ncp);
    }
    attn__free(t->added);
    attn__free(t->prefix);
    attn__free(t->suffix);
    attn__free(t->unk);
    attn__free(t->pre_ids);
    attn__free(t->post_ids);
    attn_tok_free_steps(t);
    attn__free(t);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static attn_status open_folder(attn_tokenizer *t, const char *dir) {
    char *json = attn_io_path_join(dir, "tokenizer.json"), *vocab = attn_io_path_join(dir, "vocab.txt");
    char *config = attn_io_path_join(dir, "tokenizer_config.json");
    attn_status st;
    if (!json || !vocab || !config) {
        st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_open: out of memory");
    } else if (attn_io_is_regular(json)) {
        st = attn_tok_load_json(t, json, "tokenizer.json");
        if (st == ATTN_OK && attn_io_is_regular(config)) st = attn_tok_load_config_max_length(t, config);
    } else if (attn_io_is_regular(vocab)) {
        st = attn_tok_load_vocab_txt(t, vocab, "vocab.txt", attn_io_is_regular(config) ? config : NULL);
        if (st == ATTN_OK && attn_io_is_regular(config)) st = attn_tok_load_config_max_length(t, config);
    } else {
        st =
            attn_error(ATTN_ERR_NOT_FOUND, "attn_tokenizer_open: '%s' holds neither tokenizer.json nor vocab.txt", dir);
    }
    attn__free(json);
    attn__free(vocab);
    attn__free(config);
    return st;
}

/* After a load: the longest token, and t in *out (or freed on an error st). */
static attn_status finish_open(attn_tokenizer *t, attn_status st, attn_tokenizer **out) {
    for (size_t i = 0; i < t->nslots; i++)
        if (t->slots[i].s && t->slots[i].len > t->max_token) t->max_token = t->slots[i].len;
    for (size_t i = 0; st == ATTN_OK && i < t->nadded; i++) /* the match's first-byte filter */
        if (!t->added[i].normalized) t->added_first[(unsigned char)t->added[i].content[0]] = 1;
    if (st != ATTN_OK) {
        attn_tokenizer_free(t);
        return st;
    }
    *out = t;
    return ATTN_OK;
}

attn_status attn_tokenizer_open(const char *path, attn_tokenizer **out) {
    ATTN_CHECK_NOT_NULL("attn_tokenizer_open", out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL("attn_tokenizer_open", path);
    attn_tokenizer *t = attn__calloc(1, sizeof *t);
    if (!t) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_open: out of memory");
    t->pad_id = -1;
    struct stat sb;
    attn_status st;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        st = open_folder(t, path);
    } else if (ends_with(path, ".json")) {
        const char *slash = strrchr(path, '/');
        st = attn_tok_load_json(t, path, slash ? slash + 1 : path);
    } else {
        const char *slash = strrchr(path, '/');
        st = attn_tok_load_vocab_txt(t, path, slash ? slash + 1 : path, NULL);
    }
    return finish_open(t, st, out);
}

attn_status attn_tok_open_memory(const char *text, size_t len, const char *name, attn_tokenizer **out) {
    ATTN_CHECK_NOT_NULL("attn_tok_open_memory", out);
    *out = NULL;
    if (!text && len) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_tok_open_memory: text is NULL");
    attn_tokenizer *t = attn__calloc(1, sizeof *t);
    if (!t) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_tok_open_memory: out of memory");
    t->pad_id = -1;
    return finish_open(t, attn_tok_load_json_text(t, text ? text : "", len, name), out);
}

int64_t attn_tokenizer_vocab_size(const attn_tokenizer *t) { return t ? t->ntokens : 0; }

int32_t attn_tokenizer_token_to_id(const attn_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    return attn_tok_lookup(t, token, strlen(token));
}

const char *attn_tokenizer_id_to_token(const attn_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->ntokens) return NULL;
    return t->tokens[id];
}

int32_t attn_tokenizer_pad_id(const attn_tokenizer *t) { return t ? t->pad_id : -1; }

int64_t attn_tokenizer_max_length(const attn_tokenizer *t) { return t ? t->trunc_max : 0; }

const char *attn_tokenizer_unicode_source(void) { return attn_text_unicode_source; }
