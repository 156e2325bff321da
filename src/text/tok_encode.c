/* Encoding, as Hugging Face tokenizers does it: added tokens matched in the raw text
 * (leftmost-longest), the rest normalized, pre-tokenized and split by WordPiece, then truncated
 * and wrapped by the post-processor's special tokens. */
#include <string.h>

#include "core/alloc.h"
#include "core/internal.h"
#include "io/json.h"
#include "text/tok_internal.h"
#include "text/unicode.h"

/* A growing array of code points. */
typedef struct cpbuf {
    uint32_t *p;
    size_t n, cap;
} cpbuf;

static int cp_reserve(cpbuf *b, size_t more) {
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + more) {
        if (cap > SIZE_MAX / 2 / sizeof(uint32_t)) return -1;
        cap *= 2;
    }
    uint32_t *p = attn__realloc(b->p, cap * sizeof(uint32_t));
    if (!p) return -1;
    b->p = p, b->cap = cap;
    return 0;
}

/* NFD of in into out: full decompositions, then canonical ordering of each run of marks. */
static int nfd(const cpbuf *in, cpbuf *out) {
    for (size_t i = 0; i < in->n; i++) {
        uint32_t d[4];
        int k = attn_u_decompose(in->p[i], d);
        if (cp_reserve(out, (size_t)k)) return -1;
        for (int j = 0; j < k; j++) out->p[out->n++] = d[j];
    }
    for (size_t i = 1; i < out->n; i++) { /* insertion sort by class within runs of nonzero classes (stable) */
        int ci = attn_u_ccc(out->p[i]);
        if (!ci) continue;
        size_t j = i;
        uint32_t c = out->p[i];
        while (j > 0) {
            int cj = attn_u_ccc(out->p[j - 1]);
            if (!cj || cj <= ci) break;
            out->p[j] = out->p[j - 1];
            j--;
        }
        out->p[j] = c;
    }
    return 0;
}

/* NFKD of in into out: compatibility decompositions where they differ, else canonical ones. */
static int nfkd(const cpbuf *in, cpbuf *out) {
    cpbuf d = {0};
    for (size_t i = 0; i < in->n; i++) {
        const uint32_t *k;
        size_t m = attn_u_compat(in->p[i], &k);
        if (!m) k = &in->p[i], m = 1;
        if (cp_reserve(&d, m)) {
            attn__free(d.p);
            return -1;
        }
        memcpy(d.p + d.n, k, m * sizeof(uint32_t));
        d.n += m;
    }
    int r = nfd(&d, out); /* canonical decomposition of the rest, and the ordering */
    attn__free(d.p);
    return r;
}

/* Prepend, Replace, Strip: the steps with strings or ends. */
static int norm_text_step(const tok_norm *op, const cpbuf *in, cpbuf *out) {
    size_t s = 0, e = in->n;
    if (op->op == TOK_NORM_PREPEND) {
        if (!in->n) return 0;
        if (cp_reserve(out, op->nstr)) return -1;
        if (op->nstr) memcpy(out->p, op->str, op->nstr * sizeof(uint32_t)); /* "" prepends nothing; str is NULL */
        out->n = op->nstr;
    } else if (op->op == TOK_NORM_STRIP) {
        while (op->left && s < e && (attn_u_props(in->p[s]) & ATTN_U_WS)) s++;
        while (op->right && e > s && (attn_u_props(in->p[e - 1]) & ATTN_U_WS)) e--;
    }
    for (size_t i = s; i < e;) {
        if (op->op == TOK_NORM_REPLACE && op->nstr && op->nstr <= e - i &&
            !memcmp(in->p + i, op->str, op->nstr * sizeof(uint32_t))) {
            if (cp_reserve(out, op->nto)) return -1;
            if (op->nto) memcpy(out->p + out->n, op->to, op->nto * sizeof(uint32_t));
            out->n += op->nto, i += op->nstr;
            continue;
        }
        if (cp_reserve(out, 1)) return -1;
        out->p[out->n++] = in->p[i++];
    }
    return 0;
}

/* One normalizer step from in into out (out empty on entry). */
static int norm_step(const tok_norm *step, const cpbuf *in, cpbuf *out) {
    tok_norm_op op = step->op;
    if (op == TOK_NORM_NFD) return nfd(in, out);
    if (op == TOK_NORM_NFC || op == TOK_NORM_NFKC || op == TOK_NORM_NFKD) {
        if (op == TOK_NORM_NFC ? nfd(in, out) : nfkd(in, out)) return -1;
        if (op != TOK_NORM_NFKD) attn_tok_compose(out->p, &out->n);
        return 0;
    }
    if (op == TOK_NORM_PREPEND || op == TOK_NORM_REPLACE || op == TOK_NORM_STRIP) return norm_text_step(step, in, out);
    for (size_t i = 0; i < in->n; i++) {
        uint32_t c = in->p[i], l[3];
        if (cp_reserve(out, 3)) return -1;
        switch (op) {
        case TOK_NORM_CLEAN:
            if (!(attn_u_props(c) & ATTN_U_OTHER)) out->p[out->n++] = (attn_u_props(c) & ATTN_U_WS) ? ' ' : c;
            break;
        case TOK_NORM_CHINESE:
            if (attn_u_is_chinese(c)) {
                out->p[out->n++] = ' ';
                out->p[out->n++] = c;
                out->p[out->n++] = ' ';
            } else {
                out->p[out->n++] = c;
            }
            break;
        case TOK_NORM_STRIP_MN:
            if (!(attn_u_props(c) & ATTN_U_MN)) out->p[out->n++] = c;
            break;
        case TOK_NORM_STRIP_MARKS:
            if (!(attn_u_props(c) & ATTN_U_MARK)) out->p[out->n++] = c;
            break;
        default: { /* TOK_NORM_LOWER */
            int k = attn_u_lower(c, l);
            for (int j = 0; j < k; j++) out->p[out->n++] = l[j];
        }
        }
    }
    return 0;
}

/* The canonical composition algorithm (UAX #15): each char joins the last starter unless blocked
 * by a char between them of class 0 or of a class not below its own. */
void attn_tok_compose(uint32_t *p, size_t *n) {
    if (!*n) return;
    size_t starter = 0, o = 1;
    int last = attn_u_ccc(p[0]) ? 256 : 0, first_is_starter = !attn_u_ccc(p[0]);
    for (size_t i = 1; i < *n; i++) {
        uint32_t c = p[i];
        int k = attn_u_ccc(c);
        uint32_t comp = first_is_starter ? attn_u_compose(p[starter], c) : 0;
        if (comp && (last < k || last == 0)) {
            p[starter] = comp;
            continue;
        }
        if (!k) starter = o, first_is_starter = 1;
        last = k;
        p[o++] = c;
    }
    *n = o;
}

/* Scratch of one encode call. */
typedef struct enc {
    const attn_tokenizer *t;
    tok_buf ids; /* int32_t ids */
    cpbuf a, b;  /* normalized text */
    tok_buf word;
    size_t *offs, noffs; /* byte offset of each char of the word, then its length */
    uint32_t *pc;        /* pre-tokenized chars and pieces */
    size_t pccap, piececap;
    tok_piece *pieces;
} enc;

static attn_status oom(void) { return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_encode: out of memory"); }

static attn_status push_id(enc *e, int32_t id) { return attn_tok_buf_put(&e->ids, &id, sizeof id) ? oom() : ATTN_OK; }

/* WordPiece over one pre-tokenized word (chars w[0..n)): greedy longest-match-first. */
static attn_status wordpiece(enc *e, const uint32_t *w, size_t n) {
    const attn_tokenizer *t = e->t;
    if (n == 0) return ATTN_OK;
    size_t start_ids = e->ids.len, plen = strlen(t->prefix);
    if ((int64_t)n <= t->max_chars) {
        e->word.len = 0;
        if (n + 1 > e->noffs) {
            size_t *p = attn__realloc(e->offs, (n + 1) * sizeof(size_t));
            if (!p) return oom();
            e->offs = p, e->noffs = n + 1;
        }
        for (size_t i = 0; i < n; i++) {
            char u[4];
            e->offs[i] = e->word.len;
            if (attn_tok_buf_put(&e->word, u, attn_u_encode(w[i], u))) return oom();
        }
        e->offs[n] = e->word.len;
        tok_buf cand = {0};
        size_t start = 0; /* in chars */
        int bad = 0;
        while (start < n && !bad) {
            size_t end = n;
            size_t extra = start ? plen : 0;
            while (end > start && e->offs[end] - e->offs[start] + extra > t->max_token) end--;
            int32_t id = -1;
            for (; end > start; end--) {
                cand.len = 0;
                if (attn_tok_buf_put(&cand, t->prefix, extra) ||
                    attn_tok_buf_put(&cand, e->word.p + e->offs[start], e->offs[end] - e->offs[start])) {
                    attn__free(cand.p);
                    return oom();
                }
                if ((id = attn_tok_vocab_find(t, cand.p, cand.len)) >= 0) break;
            }
            if (id < 0) {
                bad = 1;
            } else if (push_id(e, id)) {
                attn__free(cand.p);
                return ATTN_ERR_OUT_OF_MEMORY; /* push_id set the message */
            }
            start = end;
        }
        attn__free(cand.p);
        if (!bad) return ATTN_OK;
        e->ids.len = start_ids;
    }
    int32_t unk = attn_tok_vocab_find(t, t->unk, strlen(t->unk));
    if (unk < 0)
        return attn_error(ATTN_ERR_NOT_FOUND,
                          "attn_tokenizer_encode: WordPiece's unk_token '%s' is not in the vocabulary", t->unk);
    return push_id(e, unk);
}

/* text[0..len) decoded and normalized by t's steps into a (b: scratch). 0, -1: out of memory, -2:
 * invalid UTF-8. */
static int normalize(const attn_tokenizer *t, const char *text, size_t len, cpbuf *a, cpbuf *b) {
    a->n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        size_t k = attn_u_decode((const unsigned char *)text + i, len - i, &c);
        if (!k) return -2;
        if (cp_reserve(a, 1)) return -1;
        a->p[a->n++] = c;
        i += k;
    }
    for (int s = 0; s < t->nnorm; s++) {
        b->n = 0;
        if (norm_step(&t->norm[s], a, b)) return -1;
        cpbuf tmp = *a;
        *a = *b, *b = tmp;
    }
    return 0;
}

attn_status attn_tok_normalize(const attn_tokenizer *t, const char *s, size_t len, uint32_t **out, size_t *n) {
    cpbuf a = {0}, b = {0};
    int r = normalize(t, s, len, &a, &b);
    attn__free(b.p);
    if (r) {
        attn__free(a.p);
        return r == -1 ? attn_error(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: out of memory")
                       : attn_error(ATTN_ERR_INVALID_ARGUMENT, "tokenizer: invalid UTF-8");
    }
    *out = a.p, *n = a.n;
    return ATTN_OK;
}

/* Pre-tokenize and run the model over normalized chars p[0..n) (at0: they start the input). */
static attn_status encode_normalized(enc *e, const uint32_t *p, size_t n, int at0) {
    const attn_tokenizer *t = e->t;
    if (!n) return ATTN_OK;
    size_t np = 0;
    attn_status st = attn_tok_pretokenize(t, p, n, at0, &e->pc, &e->pccap, &e->pieces, &e->piececap, &np);
    for (size_t k = 0; !st && k < np; k++) {
        const uint32_t *q = e->pc + e->pieces[k].s;
        size_t m = e->pieces[k].e - e->pieces[k].s;
        if (t->model == 0) {
            st = wordpiece(e, q, m);
            continue;
        }
        e->word.len = 0;
        for (size_t i = 0; i < m; i++) {
            char u[4];
            if (attn_tok_buf_put(&e->word, u, attn_u_encode(q[i], u))) return oom();
        }
        st = attn_tok_bpe_word(t, e->word.p, e->word.len, &e->ids);
    }
    return st;
}

static int is_word(uint32_t c) { return (attn_u_props(c) & ATTN_U_WORD) != 0; }

/* Whether s[i..e) stands alone: no word char just before or after it (single_word). */
static int single_word_at(const char *s, size_t len, size_t i, size_t e) {
    uint32_t c;
    if (i) {
        size_t b = i - 1;
        while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
        if (attn_u_decode((const unsigned char *)s + b, i - b, &c) && is_word(c)) return 0;
    }
    return !(e < len && attn_u_decode((const unsigned char *)s + e, len - e, &c) && is_word(c));
}

/* The leftmost-longest normalized added token in p[from..n) (code points): its span with lstrip /
 * rstrip whitespace (never before from) in *ms, *me; returns its index or -1. */
static long find_normalized(const attn_tokenizer *t, const uint32_t *p, size_t n, size_t from, size_t *ms, size_t *me) {
    for (size_t i = from; i < n; i++) {
        long best = -1;
        for (size_t k = 0; k < t->nadded; k++) {
            const tok_added *a = &t->added[k];
            if (a->normalized && a->nncp && a->nncp <= n - i && (best < 0 || a->nncp > t->added[best].nncp) &&
                memcmp(p + i, a->ncp, a->nncp * sizeof(uint32_t)) == 0)
                best = (long)k;
        }
        if (best < 0) continue;
        const tok_added *a = &t->added[best];
        if (a->single_word && ((i && is_word(p[i - 1])) || (i + a->nncp < n && is_word(p[i + a->nncp])))) {
            i += a->nncp - 1; /* discarded, its text not searched again (tokenizers' non-overlapping matches) */
            continue;
        }
        size_t start = i, stop = i + a->nncp;
        while (a->lstrip && start > from && (attn_u_props(p[start - 1]) & ATTN_U_WS)) start--;
        while (a->rstrip && stop < n && (attn_u_props(p[stop]) & ATTN_U_WS)) stop++;
        *ms = start, *me = stop;
        return best;
    }
    return -1;
}

/* Normalize text[0..len) (valid UTF-8, no raw-matched added token in it), split it on the
 * normalized added tokens, pre-tokenize and run the model over the rest. */
static attn_status encode_text(enc *e, const char *text, size_t len, int at0) {
    const attn_tokenizer *t = e->t;
    int r = normalize(t, text, len, &e->a, &e->b);
    if (r) return r == -1 ? oom() : attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_encode: invalid UTF-8");
    const uint32_t *p = e->a.p;
    size_t n = e->a.n;
    if (!t->any_normalized) return encode_normalized(e, p, n, at0);
    for (size_t pos = 0; pos < n;) {
        size_t ms = n, me = n;
        long k = find_normalized(t, p, n, pos, &ms, &me);
        attn_status st = ms > pos ? encode_normalized(e, p + pos, ms - pos, at0 && pos == 0) : ATTN_OK;
        if (!st && k >= 0) st = push_id(e, t->added[k].id);
        if (st) return st;
        pos = me;
    }
    return ATTN_OK;
}

/* The leftmost-longest added token in s[from..len): its span (with lstrip / rstrip whitespace,
 * never reaching before `floor`) in *ms, *me; returns its index or -1. */
static long find_added(const attn_tokenizer *t, const char *s, size_t len, size_t from, size_t floor, size_t *ms,
                       size_t *me) {
    for (size_t i = from; i < len; i++) {
        long best = -1;
        if (!t->added_first[(unsigned char)s[i]]) continue;
        for (size_t k = 0; k < t->nadded; k++) {
            const tok_added *a = &t->added[k];
            if (!a->normalized && a->len <= len - i && (best < 0 || a->len > t->added[best].len) &&
                s[i] == a->content[0] && memcmp(s + i, a->content, a->len) == 0)
                best = (long)k;
        }
        if (best < 0) continue;
        const tok_added *a = &t->added[best];
        if (a->single_word && !single_word_at(s, len, i, i + a->len)) {
            i += a->len - 1; /* discarded, its text not searched again (tokenizers' non-overlapping matches) */
            continue;
        }
        size_t start = i, stop = i + a->len;
        if (a->lstrip) {
            while (start > floor) {
                size_t b = start - 1;
                while (b > floor && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
                uint32_t c;
                if (!attn_u_decode((const unsigned char *)s + b, start - b, &c) || !(attn_u_props(c) & ATTN_U_WS))
                    break;
                start = b;
            }
        }
        if (a->rstrip) {
            uint32_t c;
            size_t k;
            while (stop < len && (k = attn_u_decode((const unsigned char *)s + stop, len - stop, &c)) &&
                   (attn_u_props(c) & ATTN_U_WS))
                stop += k;
        }
        *ms = start, *me = stop;
        return best;
    }
    return -1;
}

static attn_status encode_body(enc *e, const char *text, size_t len) {
    const attn_tokenizer *t = e->t;
    size_t pos = 0;
    while (pos < len) {
        size_t ms = len, me = len;
        long k = t->nadded ? find_added(t, text, len, pos, pos, &ms, &me) : -1;
        attn_status st = encode_text(e, text + pos, (k < 0 ? len : ms) - pos, pos == 0);
        if (st) return st;
        if (k < 0) break;
        if ((st = push_id(e, t->added[k].id))) return st;
        pos = me;
    }
    return ATTN_OK;
}

attn_status attn_tokenizer_encode(const attn_tokenizer *t, const char *text, size_t len, int add_special_tokens,
                                  int64_t max_length, int32_t *ids, size_t cap, size_t *n) {
    static const char fn[] = "attn_tokenizer_encode";
    ATTN_CHECK_NOT_NULL(fn, t);
    ATTN_CHECK_NOT_NULL(fn, n);
    *n = 0;
    if (!text && len) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: text is NULL with len %zu", fn, len);
    if (max_length < 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: max_length %lld < 0", fn, (long long)max_length);
    size_t bad;
    if (len && !attn_json_utf8_valid(text, len, &bad))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: the text is not valid UTF-8 (byte %zu)", fn, bad);
    size_t nspec = add_special_tokens ? t->npre + t->npost : 0;
    int64_t limit = max_length ? max_length : t->trunc_max;
    if (limit && (uint64_t)limit < nspec)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: max_length %lld is below the %zu special tokens", fn,
                          (long long)limit, nspec);
    enc e = {0};
    e.t = t;
    attn_status st = len ? encode_body(&e, text, len) : ATTN_OK;
    if (!st) {
        const int32_t *body = (const int32_t *)(void *)e.ids.p;
        size_t nbody = e.ids.len / sizeof(int32_t), keep = nbody;
        if (limit && keep > (uint64_t)limit - nspec) keep = (size_t)limit - nspec;
        size_t from = t->trunc_left ? nbody - keep : 0;
        *n = nspec + keep;
        if ((ids ? cap : 0) < *n) {
            st = attn_error(ATTN_ERR_WORKSPACE, "%s: %zu ids need room for %zu, cap is %zu", fn, *n, *n, ids ? cap : 0);
        } else {
            size_t o = 0;
            if (add_special_tokens)
                for (size_t i = 0; i < t->npre; i++) ids[o++] = t->pre_ids[i];
            for (size_t i = 0; i < keep; i++) ids[o++] = body[from + i];
            if (add_special_tokens)
                for (size_t i = 0; i < t->npost; i++) ids[o++] = t->post_ids[i];
        }
    }
    attn__free(e.ids.p);
    attn__free(e.a.p);
    attn__free(e.b.p);
    attn__free(e.word.p);
    attn__free(e.offs);
    attn__free(e.pc);
    attn__free(e.pieces);
    return st;
}
