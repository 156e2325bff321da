/* Byte-level BPE, as Hugging Face tokenizers does it for GPT-2: the ByteLevel pre-tokenizer's GPT-2
 * regex (contractions, letters, numbers, other chars, each optionally after one space, then
 * whitespace runs) and byte alphabet, and the BPE model's merges, lowest rank first (leftmost first
 * among equal ranks) through a heap, as tokenizers' Word::merge_all. */
#include <string.h>

#include "core/alloc.h"
#include "core/internal.h"
#include "text/tok_internal.h"
#include "text/unicode.h"

static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

attn_status attn_tok_merges_init(attn_tokenizer *t, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 16) {
        if (cap > SIZE_MAX / 4 / sizeof(tok_merge)) return attn_error(ATTN_ERR_OVERFLOW, "tokenizer: too many merges");
        cap *= 2;
    }
    t->merges = attn__malloc(cap * sizeof(tok_merge));
    if (!t->merges) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %zu merges", n);
    for (size_t i = 0; i < cap; i++) {
        t->merges[i].key = 0;
        t->merges[i].rank = t->merges[i].id = -1;
    }
    t->nmerge_slots = cap;
    return ATTN_OK;
}

void attn_tok_merge_add(attn_tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t id) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t mask = t->nmerge_slots - 1;
    for (size_t i = (size_t)mix(key) & mask;; i = (i + 1) & mask) {
        tok_merge *m = &t->merges[i];
        if (m->rank < 0 || m->key == key) {
            m->key = key, m->rank = rank, m->id = id;
            return;
        }
    }
}

int32_t attn_tok_merge_find(const attn_tokenizer *t, int32_t left, int32_t right, int32_t *id) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t mask = t->nmerge_slots - 1;
    for (size_t i = (size_t)mix(key) & mask;; i = (i + 1) & mask) {
        const tok_merge *m = &t->merges[i];
        if (m->rank < 0) return -1;
        if (m->key == key) {
            *id = m->id;
            return m->rank;
        }
    }
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the 68 others for
 * U+0100.. in order. */
uint32_t attn_tok_byte_char(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    if (b <= 0x20) return 256 + b;
    if (b >= 0x7F && b <= 0xA0) return 256 + 33 + (b - 0x7F);
    return 256 + 67; /* 0xAD */
}

int attn_tok_char_byte(uint32_t c) {
    if ((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) return (int)c;
    if (c < 256 || c >= 256 + 68) return -1;
    c -= 256;
    return c < 33 ? (int)c : c < 67 ? (int)(0x7F + c - 33) : 0xAD;
}

static unsigned cls(uint32_t c) { return attn_u_props(c) & (ATTN_U_LETTER | ATTN_U_NUMBER | ATTN_U_SPACE); }

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ at p[i]. */
size_t attn_tok_gpt2_match(const uint32_t *p, size_t n, size_t i) {
    if (p[i] == '\'' && i + 1 < n) {
        uint32_t a = p[i + 1], b = i + 2 < n ? p[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    size_t j = i + (p[i] == ' ' && i + 1 < n);
    unsigned k = cls(p[j]);
    if (!(k & ATTN_U_SPACE)) { /* a run of letters, of numbers, or of other chars */
        size_t e = j + 1;
        while (e < n && cls(p[e]) == k) e++;
        return e;
    }
    size_t e = i + 1; /* whitespace: the run, less its last char when a non-space follows */
    while (e < n && (cls(p[e]) & ATTN_U_SPACE)) e++;
    return (e < n && e - i >= 2) ? e - 1 : e;
}

/* The merge queue: lowest rank first, then leftmost. */
typedef struct qitem {
    int32_t rank, id;
    size_t pos;
} qitem;

static int before(const qitem *a, const qitem *b) { return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos; }

static void q_push(qitem *q, size_t *n, qitem it) {
    size_t i = (*n)++;
    while (i > 0 && before(&it, &q[(i - 1) / 2])) {
        q[i] = q[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q[i] = it;
}

static qitem q_pop(qitem *q, size_t *n) {
    qitem top = q[0], last = q[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && before(&q[c + 1], &q[c])) c++;
        if (!before(&q[c], &last)) break;
        q[i] = q[c];
        i = c;
    }
    if (*n) q[i] = last;
    return top;
}

/* Symbols of a word: ids and links (removed ones have gone = 1). */
typedef struct sym {
    int32_t id;
    long prev, next;
    int gone;
} sym;

static void push_pair(const attn_tokenizer *t, const sym *s, long a, qitem *q, size_t *nq) {
    if (a < 0 || s[a].next < 0) return;
    int32_t id, rank = attn_tok_merge_find(t, s[a].id, s[s[a].next].id, &id);
    if (rank >= 0) q_push(q, nq, (qitem){rank, id, (size_t)a});
}

static void add_sym(sym *out, size_t *n, int32_t id) {
    out[*n] = (sym){id, (long)*n - 1, (long)*n + 1, 0};
    (*n)++;
}

/* The id of one char (s[0..k)) of a word: continuing_subword_prefix before it unless first,
 * end_of_word_suffix after it when last (each at most 64 bytes, checked at load); -1: none. */
static int32_t char_id(const attn_tokenizer *t, const char *s, size_t k, int first, int last) {
    if (!t->prefix && !t->suffix) return attn_tok_vocab_find(t, s, k);
    char key[4 + 64 + 64];
    size_t n = 0, pl = t->prefix && !first ? strlen(t->prefix) : 0, sl = t->suffix && last ? strlen(t->suffix) : 0;
    if (pl) memcpy(key, t->prefix, pl), n += pl;
    memcpy(key + n, s, k), n += k;
    if (sl) memcpy(key + n, t->suffix, sl), n += sl;
    return attn_tok_vocab_find(t, key, n);
}

/* The initial symbols, as tokenizers' BPE::merge_word: one per char in the vocabulary; a char
 * outside it as its bytes' <0xNN> tokens (byte_fallback, when all are there), else the unk token
 * (one per run of unknown chars when fuse_unk; pending until the next known char, as tokenizers
 * adds it) or nothing (no unk_token). out has room for len symbols (one a byte at most). */
static attn_status bpe_symbols(const attn_tokenizer *t, const char *s, size_t len, sym *out, size_t *n) {
    int32_t unk = t->unk ? attn_tok_vocab_find(t, t->unk, strlen(t->unk)) : -1;
    int pending = 0;
    *n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        size_t k = attn_u_decode((const unsigned char *)s + i, len - i, &c);
        if (!k) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_encode: invalid UTF-8");
        size_t at = i;
        i += k;
        int32_t id = char_id(t, s + at, k, at == 0, i == len);
        if (id >= 0) {
            if (pending) add_sym(out, n, unk), pending = 0;
            add_sym(out, n, id);
            continue;
        }
        if (t->byte_fallback) {
            size_t b = 0;
            while (b < k && t->byte_ids[(unsigned char)s[at + b]] >= 0) b++;
            if (b == k) {
                for (b = 0; b < k; b++) add_sym(out, n, t->byte_ids[(unsigned char)s[at + b]]);
                continue;
            }
        }
        if (!t->unk) continue;
        if (unk < 0)
            return attn_error(ATTN_ERR_NOT_FOUND,
                              "attn_tokenizer_encode: BPE's unk_token '%s' is not in the vocabulary", t->unk);
        if (pending && !t->fuse_unk) add_sym(out, n, unk);
        pending = 1;
    }
    if (pending) add_sym(out, n, unk);
    if (*n) out[*n - 1].next = -1;
    return ATTN_OK;
}

attn_status attn_tok_bpe_word(const attn_tokenizer *t, const char *s, size_t len, tok_buf *ids) {
    int32_t whole = t->ignore_merges ? attn_tok_vocab_find(t, s, len) : -1;
    if (whole >= 0)
        return attn_tok_buf_put(ids, &whole, sizeof whole)
                   ? attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_encode: out of memory")
                   : ATTN_OK;
    sym *sy = attn__malloc((len + 1) * sizeof(sym));        /* one per byte at most (byte_fallback) */
    qitem *q = attn__malloc((3 * len + 1) * sizeof(qitem)); /* n - 1 pairs, then 2 per merge */
    size_t n = 0, nq = 0;
    attn_status st = (!sy || !q) ? attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_encode: out of memory")
                                 : bpe_symbols(t, s, len, sy, &n);
    for (size_t i = 0; !st && i + 1 < n; i++) push_pair(t, sy, (long)i, q, &nq);
    while (!st && nq) {
        qitem top = q_pop(q, &nq);
        sym *a = &sy[top.pos];
        if (a->gone || a->next < 0) continue;
        int32_t id;
        if (attn_tok_merge_find(t, a->id, sy[a->next].id, &id) < 0 || id != top.id) continue;
        sym *b = &sy[a->next];
        a->id = top.id;
        a->next = b->next;
        b->gone = 1;
        if (a->next >= 0) sy[a->next].prev = (long)top.pos;
        push_pair(t, sy, a->prev, q, &nq);
        push_pair(t, sy, (long)top.pos, q, &nq);
    }
    for (long i = n ? 0 : -1; !st && i >= 0; i = sy[i].next)
        if (attn_tok_buf_put(ids, &sy[i].id, sizeof(int32_t)))
            st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_encode: out of memory");
    attn__free(sy);
    attn__free(q);
    return st;
}
