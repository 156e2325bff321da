/* Decoding, as Hugging Face tokenizers' Tokenizer.decode: ids to tokens (added tokens first; ids
 * without a token skipped; special tokens skipped when asked), then the decoder: WordPiece (a
 * token starting with the prefix is glued to the previous one with the prefix removed, others get
 * a space; each token then cleaned up as HF's `cleanup`) or, without a decoder, tokens joined by
 * spaces. */
#include <string.h>

#include "core/alloc.h"
#include "core/internal.h"
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

/* One token's text as the decoder gives it (i: its index among the tokens kept). */
static int decode_token(const attn_tokenizer *t, const char *tok, size_t i, tok_buf *piece) {
    piece->len = 0;
    if (attn_tok_buf_put(piece, "", 0)) return -1;
    if (!t->decoder) return (i ? attn_tok_buf_put(piece, " ", 1) : 0) || attn_tok_buf_put(piece, tok, strlen(tok));
    size_t pl = strlen(t->dec_prefix);
    if (i && strncmp(tok, t->dec_prefix, pl) == 0) {
        if (attn_tok_buf_put(piece, tok + pl, strlen(tok + pl))) return -1;
    } else if ((i && attn_tok_buf_put(piece, " ", 1)) || attn_tok_buf_put(piece, tok, strlen(tok))) {
        return -1;
    }
    return t->dec_cleanup ? cleanup(piece) : 0;
}

/* The ByteLevel decoder: each token's chars back to bytes (a token holding a char outside the byte
 * alphabet gives its own UTF-8), then the bytes as Rust's String::from_utf8_lossy reads them (each
 * maximal invalid part one U+FFFD). */
static int byte_level_bytes(const char *tok, tok_buf *bytes) {
    size_t len = strlen(tok), start = bytes->len;
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

attn_status attn_tokenizer_decode(const attn_tokenizer *t, const int32_t *ids, size_t n, int skip_special_tokens,
                                  char *buf, size_t cap, size_t *len) {
    static const char fn[] = "attn_tokenizer_decode";
    ATTN_CHECK_NOT_NULL(fn, t);
    ATTN_CHECK_NOT_NULL(fn, len);
    *len = 0;
    if (!ids && n) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: ids is NULL with n %zu", fn, n);
    tok_buf text = {0}, piece = {0};
    size_t kept = 0;
    attn_status st = ATTN_OK;
    for (size_t i = 0; i < n && !st; i++) {
        const char *tok = attn_tokenizer_id_to_token(t, ids[i]);
        if (!tok || (skip_special_tokens && is_special(t, tok))) continue;
        if (t->decoder == 2 ? byte_level_bytes(tok, &piece)
                            : decode_token(t, tok, kept++, &piece) || attn_tok_buf_put(&text, piece.p, piece.len))
            st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    if (!st && t->decoder == 2 && (attn_tok_buf_put(&piece, "", 0) || utf8_lossy(&piece, &text)))
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
    attn__free(piece.p);
    return st;
}
