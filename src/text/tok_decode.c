/* Decoding, as Hugging Face tokenizers' Tokenizer.decode: ids to tokens (added tokens first; ids
 * without a token skipped; special tokens skipped when asked), then the decoder's steps, each a
 * list of tokens to a list of tokens (Decoder::decode_chain), joined at the end; without a
 * decoder, the tokens joined by spaces. WordPiece: a token starting with the prefix is glued to
 * the previous one with the prefix removed, others get a space; each token then cleaned up as
 * HF's `cleanup`. ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace: as tokenizers'. */
#include <string.h>

#include "core/alloc.h"
#include "core/internal.h"
#include "io/json.h"
#include "text/tok_internal.h"
#include "text/unicode.h"

static int is_special(const attn_tokenizer *t, const char *tok) {
    size_t len = strlen(tok);
    for (size_t i = 0; i < t->nadded; i++)
        if (t->added[i].special && t->added[i].len == len && memcmp(t->added[i].content, tok, len) == 0) return 1;
    return 0;
}

/* In place: every `from` in b replaced by `to` (no longer than from), left to right. */
static void replace_all(tok_buf *b, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to), o = 0;
    for (size_t i = 0; i < b->len;) {
        if (b->len - i >= fl && memcmp(b->p + i, from, fl) == 0) {
            memmove(b->p + o, to, tl);
            o += tl, i += fl;
        } else {
            b->p[o++] = b->p[i++];
        }
    }
    b->len = o;
    b->p[o] = '\0';
}

/* HF's wordpiece cleanup of one token (" do not" -> " don't" is the one that grows: room is made). */
static int cleanup(tok_buf *b) {
    static const char *const pairs[][2] = {{" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
                                           {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
                                           {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        if (strlen(pairs[k][1]) <= strlen(pairs[k][0])) {
            replace_all(b, pairs[k][0], pairs[k][1]);
            continue;
        }
        tok_buf out = {0};
        for (size_t i = 0; i < b->len;) { /* " do not" -> " don't" */
            size_t fl = strlen(pairs[k][0]);
            int hit = b->len - i >= fl && memcmp(b->p + i, pairs[k][0], fl) == 0;
            if (attn_tok_buf_put(&out, hit ? pairs[k][1] : b->p + i, hit ? strlen(pairs[k][1]) : 1)) {
                attn__free(out.p);
                return -1;
            }
            i += hit ? fl : 1;
        }
        if (attn_tok_buf_put(&out, "", 0)) return -1;
        attn__free(b->p);
        *b = out;
    }
    return 0;
}

/* The ByteLevel decoder: each token's chars back to bytes (a token holding a char outside the byte
 * alphabet gives its own UTF-8), then the bytes as Rust's String::from_utf8_lossy reads them (each
 * maximal invalid part one U+FFFD). */
static int byte_level_bytes(const char *tok, size_t len, tok_buf *bytes) {
    size_t start = bytes->len;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        size_t k = attn_u_decode((const unsigned char *)tok + i, len - i, &c);
        int b = k ? attn_tok_char_byte(c) : -1;
        if (b < 0) { /* the token as it is */
            bytes->len = start;
            return attn_tok_buf_put(bytes, tok, len);
        }
        unsigned char ub = (unsigned char)b;
        if (attn_tok_buf_put(bytes, &ub, 1)) return -1;
        i += k;
    }
    return 0;
}

/* Length of the maximal prefix of a valid UTF-8 sequence at s[0..n) (n >= 1): >= 1. */
static size_t invalid_len(const unsigned char *s, size_t n) {
    unsigned char b = s[0];
    size_t need = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (!need) return 1;
    size_t k = 1;
    for (; k < need && k < n; k++) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (k == 1 && b == 0xE0) lo = 0xA0;
        if (k == 1 && b == 0xED) hi = 0x9F;
        if (k == 1 && b == 0xF0) lo = 0x90;
        if (k == 1 && b == 0xF4) hi = 0x8F;
        if (s[k] < lo || s[k] > hi) break;
    }
    return k;
}

static int utf8_lossy(const tok_buf *in, tok_buf *out) {
    const unsigned char *s = (const unsigned char *)in->p;
    for (size_t i = 0; i < in->len;) {
        uint32_t c;
        size_t k = attn_u_decode(s + i, in->len - i, &c);
        if (k) {
            if (attn_tok_buf_put(out, s + i, k)) return -1;
            i += k;
        } else {
            if (attn_tok_buf_put(out, "\xef\xbf\xbd", 3)) return -1;
            i += invalid_len(s + i, in->len - i);
        }
    }
    return 0;
}

/* A list of tokens: token i is b.p[off[i] .. off[i + 1]). */
typedef struct tlist {
    tok_buf b;
    size_t *off;
    size_t n, cap;
} tlist;

static const char *tl_tok(const tlist *l, size_t i, size_t *len) {
    *len = l->off[i + 1] - l->off[i];
    return l->b.p + l->off[i];
}

/* Start a new token (empty). */
static int tl_new(tlist *l) {
    if (l->n + 2 > l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        size_t *p = attn__realloc(l->off, cap * sizeof(size_t));
        if (!p) return -1;
        l->off = p, l->cap = cap;
    }
    if (!l->n) l->off[0] = l->b.len;
    l->off[++l->n] = l->b.len;
    return attn_tok_buf_put(&l->b, "", 0);
}

/* Append bytes to the last token. */
static int tl_add(tlist *l, const void *s, size_t n) {
    if (attn_tok_buf_put(&l->b, s, n)) return -1;
    l->off[l->n] = l->b.len;
    return 0;
}

static int tl_push(tlist *l, const void *s, size_t n) { return tl_new(l) || tl_add(l, s, n); }

/* ByteFallback's <0xNN> (as Rust's u8::from_str_radix(.., 16) reads the two chars), or -1. */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (i == 3 && c == '+') continue;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The pending bytes of ByteFallback: one token when valid UTF-8, else one U+FFFD per byte. */
static int flush_bytes(tok_buf *bytes, tlist *out) {
    size_t bad;
    int r = 0;
    if (!bytes->len) return 0;
    if (attn_json_utf8_valid(bytes->p, bytes->len, &bad))
        r = tl_push(out, bytes->p, bytes->len);
    else
        for (size_t i = 0; !r && i < bytes->len; i++) r = tl_push(out, "\xef\xbf\xbd", 3);
    bytes->len = 0;
    return r;
}

/* Strip: up to start / stop copies of the char c off each end of the token. */
static int strip_token(const tok_dec *d, const char *s, size_t n, tlist *out) {
    char u[4];
    size_t cl = attn_u_encode(d->content, u), a = 0, e = n;
    for (int64_t k = 0; k < d->start && n - a >= cl && !memcmp(s + a, u, cl); k++) a += cl;
    for (int64_t k = 0; k < d->stop && e - a >= cl && e >= cl && !memcmp(s + e - cl, u, cl); k++) e -= cl;
    return tl_push(out, s + a, e > a ? e - a : 0);
}

/* One decoder step over in's tokens into out (empty on entry). */
static int dec_step(const tok_dec *d, const tlist *in, tlist *out, tok_buf *tmp) {
    size_t len, al = d->a ? strlen(d->a) : 0, bl = d->b ? strlen(d->b) : 0;
    tmp->len = 0;
    if (d->op == TOK_DEC_FUSE || d->op == TOK_DEC_BYTELEVEL) {
        for (size_t i = 0; i < in->n; i++) {
            const char *s = tl_tok(in, i, &len);
            if (d->op == TOK_DEC_FUSE ? attn_tok_buf_put(tmp, s, len) : byte_level_bytes(s, len, tmp)) return -1;
        }
        if (d->op == TOK_DEC_FUSE) return tl_push(out, tmp->p ? tmp->p : "", tmp->len);
        return tl_new(out) || attn_tok_buf_put(tmp, "", 0) || utf8_lossy(tmp, &out->b) ||
               (out->off[out->n] = out->b.len, 0);
    }
    for (size_t i = 0; i < in->n; i++) {
        const char *s = tl_tok(in, i, &len);
        int r = 0, bt;
        switch (d->op) {
        case TOK_DEC_BYTE_FALLBACK:
            if ((bt = byte_token(s, len)) >= 0) {
                unsigned char ub = (unsigned char)bt;
                r = attn_tok_buf_put(tmp, &ub, 1);
            } else {
                r = flush_bytes(tmp, out) || tl_push(out, s, len);
            }
            break;
        case TOK_DEC_STRIP: r = strip_token(d, s, len, out); break;
        case TOK_DEC_REPLACE:
            r = tl_new(out);
            for (size_t j = 0; !r && j < len;) {
                int hit = al && len - j >= al && !memcmp(s + j, d->a, al);
                r = tl_add(out, hit ? d->b : s + j, hit ? bl : 1);
                j += hit ? al : 1;
            }
            break;
        case TOK_DEC_BPE: /* the suffix as a space, or nothing in the last token */
            r = tl_new(out);
            for (size_t j = 0; !r && j < len;) {
                int hit = al && len - j >= al && !memcmp(s + j, d->a, al);
                r = tl_add(out, hit ? " " : s + j, hit ? (i + 1 < in->n) : 1);
                j += hit ? al : 1;
            }
            break;
        case TOK_DEC_METASPACE:
            r = tl_new(out);
            for (size_t j = 0; !r && j < len;) {
                int hit = al && len - j >= al && !memcmp(s + j, d->a, al);
                if (!hit || !(i == 0 && d->flag)) r = tl_add(out, hit ? " " : s + j, 1);
                j += hit ? al : 1;
            }
            break;
        default: { /* WordPiece */
            tok_buf piece = {0};
            if (i && al && len >= al && !memcmp(s, d->a, al))
                r = attn_tok_buf_put(&piece, s + al, len - al);
            else
                r = (i && attn_tok_buf_put(&piece, " ", 1)) || attn_tok_buf_put(&piece, s, len);
            r = r || (d->flag && cleanup(&piece)) || tl_push(out, piece.p, piece.len);
            attn__free(piece.p);
        }
        }
        if (r) return -1;
    }
    return d->op == TOK_DEC_BYTE_FALLBACK ? flush_bytes(tmp, out) : 0;
}

/* The kept tokens of ids through t's decoder steps, joined into text. */
static int decode_tokens(const attn_tokenizer *t, const int32_t *ids, size_t n, int skip, tok_buf *text) {
    tlist a = {0}, b = {0};
    tok_buf tmp = {0};
    int r = 0;
    for (size_t i = 0; !r && i < n; i++) {
        const char *tok = attn_tokenizer_id_to_token(t, ids[i]);
        if (!tok || (skip && is_special(t, tok))) continue;
        r = (!t->ndec && a.n && attn_tok_buf_put(text, " ", 1)) || attn_tok_buf_put(text, tok, strlen(tok)) ||
            tl_push(&a, tok, strlen(tok));
    }
    if (t->ndec) text->len = 0;
    for (int s = 0; !r && s < t->ndec; s++) {
        b.n = 0, b.b.len = 0;
        r = dec_step(&t->dec[s], &a, &b, &tmp);
        tlist x = a;
        a = b, b = x;
    }
    if (!r && t->ndec && a.n) r = attn_tok_buf_put(text, a.b.p + a.off[0], a.off[a.n] - a.off[0]);
    attn__free(a.b.p);
    attn__free(a.off);
    attn__free(b.b.p);
    attn__free(b.off);
    attn__free(tmp.p);
    return r;
}

attn_status attn_tokenizer_decode(const attn_tokenizer *t, const int32_t *ids, size_t n, int skip_special_tokens,
                                  char *buf, size_t cap, size_t *len) {
    static const char fn[] = "attn_tokenizer_decode";
    ATTN_CHECK_NOT_NULL(fn, t);
    ATTN_CHECK_NOT_NULL(fn, len);
    *len = 0;
    if (!ids && n) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: ids is NULL with n %zu", fn, n);
    tok_buf text = {0};
    attn_status st = ATTN_OK;
    if (decode_tokens(t, ids, n, skip_special_tokens, &text))
        st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (!st) {
        *len = text.len;
        if ((buf ? cap : 0) < text.len) {
            st = attn_error(ATTN_ERR_WORKSPACE, "%s: the text needs %zu bytes (%zu with its NUL), cap is %zu", fn,
                            text.len, text.len + 1, buf ? cap : 0);
        } else {
            if (text.len) memcpy(buf, text.p, text.len);
            if (buf && cap > text.len) buf[text.len] = '\0';
        }
    }
    attn__free(text.p);
    return st;
}
