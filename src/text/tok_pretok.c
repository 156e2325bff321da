/* Pre-tokenizers, as Hugging Face tokenizers runs them: each step splits every piece of the text
 * (PreTokenizedString::split) by a pattern's matches and a SplitDelimiterBehavior, or rewrites it
 * (ByteLevel's bytes as chars, Metaspace's replacement char).
 *
 * Split's regexes: no regex engine is linked (attn depends on libc, libm and OpenMP only), so the
 * patterns models ship are matched by hand-written matchers, exact on those patterns (GPT-2's,
 * Llama-3's, Qwen2's, as Oniguruma runs them: leftmost alternative first, with backtracking); any
 * other regex is refused at load (ATTN_ERR_UNSUPPORTED, the pattern quoted). Plain string patterns
 * ({"String": ...}) are matched as they are. */
#include <string.h>

#include "core/alloc.h"
#include "core/internal.h"
#include "text/tok_internal.h"
#include "text/unicode.h"

static unsigned cls(uint32_t c) { return attn_u_props(c) & (ATTN_U_LETTER | ATTN_U_NUMBER | ATTN_U_SPACE); }
static int is_l(uint32_t c) { return (cls(c) & ATTN_U_LETTER) != 0; }
static int is_n(uint32_t c) { return (cls(c) & ATTN_U_NUMBER) != 0; }
static int is_s(uint32_t c) { return (cls(c) & ATTN_U_SPACE) != 0; }
static int is_nl(uint32_t c) { return c == '\r' || c == '\n'; }

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at p[i]: the end, or 0. Oniguruma's case folding also takes U+017F
 * (long s) for s. */
static size_t contraction_ci(const uint32_t *p, size_t n, size_t i) {
    if (p[i] != '\'' || i + 1 >= n) return 0;
    uint32_t a = p[i + 1] < 0x80 ? (p[i + 1] | 0x20) : p[i + 1], b = i + 2 < n && p[i + 2] < 0x80 ? p[i + 2] | 0x20 : 0;
    if (a == 's' || a == 0x17F || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
}

/* Llama-3's (maxdig 3) and Qwen2's (maxdig 1) pattern at p[i] (always matches; returns > i):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t llama3_match(const uint32_t *p, size_t n, size_t i, size_t maxdig) {
    size_t e = contraction_ci(p, n, i);
    if (e) return e;
    size_t j = i;
    if (!is_l(p[j]) && !is_n(p[j]) && !is_nl(p[j]) && j + 1 < n && is_l(p[j + 1])) j++;
    if (is_l(p[j])) {
        for (e = j + 1; e < n && is_l(p[e]);) e++;
        return e;
    }
    if (is_n(p[i])) {
        for (e = i + 1; e < n && e - i < maxdig && is_n(p[e]);) e++;
        return e;
    }
    j = i + (p[i] == ' ' && i + 1 < n && !is_s(p[i + 1]) && !is_l(p[i + 1]) && !is_n(p[i + 1]));
    if (!is_s(p[j])) { /* other chars (not \s, \p{L}, \p{N}; the letter and number cases are above) */
        for (e = j + 1; e < n && !cls(p[e]);) e++;
        while (e < n && is_nl(p[e])) e++;
        return e;
    }
    size_t run = i; /* p[i] is whitespace: its run, then \s*[\r\n]+ ending at the run's last \r or \n */
    while (run < n && is_s(p[run])) run++;
    for (size_t k = run; k > i; k--)
        if (is_nl(p[k - 1])) return k;
    return (run < n && run - i >= 2) ? run - 1 : run; /* \s+(?!\S), else \s+ */
}

/* A run of chars [s, e) of a piece: a match of the pattern or not (after apply_behavior: removed). */
typedef struct span {
    size_t s, e;
    int match;
} span;

static int char_match(const tok_pre *st, uint32_t c) {
    switch (st->op) {
    case TOK_PRE_WS_SPLIT:
    case TOK_PRE_BERT: return (attn_u_props(c) & ATTN_U_WS) != 0;
    case TOK_PRE_DIGITS: return is_n(c);
    default: return (attn_u_props(c) & ATTN_U_PUNCT) != 0; /* TOK_PRE_PUNCT */
    }
}

/* The end of the match starting exactly at p[i], or 0 when none starts there. */
static size_t match_at(const tok_pre *st, const uint32_t *p, size_t n, size_t i) {
    if (st->op == TOK_PRE_BYTELEVEL) return attn_tok_gpt2_match(p, n, i);
    if (st->op == TOK_PRE_WHITESPACE) { /* \w+|[^\w\s]+ */
        unsigned w = attn_u_props(p[i]) & ATTN_U_OWORD;
        if (!w && is_s(p[i])) return 0;
        size_t e = i + 1;
        while (e < n && (attn_u_props(p[e]) & ATTN_U_OWORD) == w && (w || !is_s(p[e]))) e++;
        return e;
    }
    if (st->op != TOK_PRE_SPLIT) return char_match(st, p[i]) ? i + 1 : 0;
    switch (st->pattern) {
    case TOK_PAT_GPT2: return attn_tok_gpt2_match(p, n, i);
    case TOK_PAT_LLAMA3: return llama3_match(p, n, i, 3);
    case TOK_PAT_QWEN2: return llama3_match(p, n, i, 1);
    default:
        return st->nstr && st->nstr <= n - i && !memcmp(p + i, st->str, st->nstr * sizeof(uint32_t)) ? i + st->nstr : 0;
    }
}

/* The matches of st's pattern in p[0..n) and the runs between them, covering p in order
 * (tokenizers' Pattern::find_matches; an empty p is one empty run): their count (sp has room for
 * 2 n + 1). */
static size_t find_matches(const tok_pre *st, const uint32_t *p, size_t n, span *sp) {
    size_t k = 0, prev = 0;
    for (size_t i = 0; i < n;) {
        size_t e = match_at(st, p, n, i);
        if (!e) {
            i++;
            continue;
        }
        if (prev != i) sp[k++] = (span){prev, i, 0};
        sp[k++] = (span){i, e, 1};
        prev = i = e;
    }
    if (prev != n || !n) sp[k++] = (span){prev, n, 0};
    return k;
}

/* tokenizers' NormalizedString::split: the spans merged as the behavior says, in place; each
 * span's match field then says whether it is removed (Removed only). Returns their count. */
static size_t apply_behavior(tok_behavior b, int invert, span *sp, size_t k) {
    size_t o = 0;
    int prev = 0;
    if (invert)
        for (size_t i = 0; i < k; i++) sp[i].match = !sp[i].match;
    if (b == TOK_B_MERGED_NEXT) { /* right to left */
        for (size_t r = k; r-- > 0;) {
            span s = sp[r];
            if (s.match && !prev && o)
                sp[k - o].s = s.s; /* the last pushed (stored from the top) grows leftwards */
            else
                sp[k - ++o] = (span){s.s, s.e, 0};
            prev = s.match;
        }
        memmove(sp, sp + k - o, o * sizeof(span));
        return o;
    }
    for (size_t i = 0; i < k; i++) {
        span s = sp[i];
        int merge = b == TOK_B_CONTIGUOUS    ? (s.match == prev && o)
                    : b == TOK_B_MERGED_PREV ? (s.match && !prev && o)
                                             : 0;
        if (merge)
            sp[o - 1].e = s.e;
        else
            sp[o++] = (span){s.s, s.e, b == TOK_B_REMOVED ? s.match : 0};
        prev = s.match;
    }
    return o;
}

/* Growing outputs of one step. */
typedef struct pout {
    uint32_t *c;
    size_t nc, ccap;
    tok_piece *pc;
    size_t np, pcap;
} pout;

static int reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 4 / elem) return -1;
        c *= 2;
    }
    void *q = attn__realloc(*p, c * elem);
    if (!q) return -1;
    *p = q, *cap = c;
    return 0;
}

/* Append chars p[0..n) as one piece (none when empty). */
static int put_piece(pout *o, const uint32_t *p, size_t n, int at0) {
    if (!n) return 0;
    if (reserve((void **)&o->c, &o->ccap, o->nc + n, sizeof(uint32_t)) ||
        reserve((void **)&o->pc, &o->pcap, o->np + 1, sizeof(tok_piece)))
        return -1;
    memcpy(o->c + o->nc, p, n * sizeof(uint32_t));
    o->pc[o->np++] = (tok_piece){o->nc, o->nc + n, at0};
    o->nc += n;
    return 0;
}

/* Split piece p[0..n) by st's matches and behavior (scratch: sp, room for 2 n + 1). */
static int split_piece(const tok_pre *st, const uint32_t *p, size_t n, int at0, span *sp, pout *o) {
    tok_behavior b = st->op == TOK_PRE_SPLIT || st->op == TOK_PRE_PUNCT ? st->behavior
                     : st->op == TOK_PRE_DIGITS                         ? (st->flag ? TOK_B_ISOLATED : TOK_B_CONTIGUOUS)
                     : st->op == TOK_PRE_BYTELEVEL                      ? TOK_B_ISOLATED
                                                                        : TOK_B_REMOVED;
    int invert = (st->op == TOK_PRE_SPLIT && st->invert) || st->op == TOK_PRE_WHITESPACE; /* keep the matches */
    size_t k = apply_behavior(b, invert, sp, find_matches(st, p, n, sp));
    for (size_t i = 0; i < k; i++)
        if (!sp[i].match && put_piece(o, p + sp[i].s, sp[i].e - sp[i].s, at0 && sp[i].s == 0)) return -1;
    return 0;
}

/* Append chars p[0..n) as one piece of their UTF-8 bytes, each byte as the byte alphabet's char. */
static int put_bytes(pout *o, const uint32_t *p, size_t n, int at0) {
    if (reserve((void **)&o->c, &o->ccap, o->nc + 4 * n, sizeof(uint32_t)) ||
        reserve((void **)&o->pc, &o->pcap, o->np + 1, sizeof(tok_piece)))
        return -1;
    size_t s = o->nc;
    for (size_t i = 0; i < n; i++) {
        char u[4];
        size_t nb = attn_u_encode(p[i], u);
        for (size_t b = 0; b < nb; b++) o->c[o->nc++] = attn_tok_byte_char((unsigned char)u[b]);
    }
    if (o->nc > s) o->pc[o->np++] = (tok_piece){s, o->nc, at0};
    return 0;
}

/* ByteLevel: a space before the piece (add_prefix_space), the GPT-2 regex (use_regex, into the
 * scratch w), then each piece's UTF-8 bytes as the byte alphabet's chars. */
static int byte_level(const tok_pre *st, const uint32_t *p, size_t n, int at0, span *sp, uint32_t *tmp, pout *w,
                      pout *o) {
    const uint32_t *q = p;
    if (st->flag && p[0] != ' ') {
        tmp[0] = ' ';
        memcpy(tmp + 1, p, n * sizeof(uint32_t));
        q = tmp, n++;
    }
    if (!st->use_regex) return put_bytes(o, q, n, at0);
    w->nc = w->np = 0;
    if (split_piece(st, q, n, at0, sp, w)) return -1;
    for (size_t k = 0; k < w->np; k++)
        if (put_bytes(o, w->c + w->pc[k].s, w->pc[k].e - w->pc[k].s, w->pc[k].at0)) return -1;
    return 0;
}

/* Metaspace: spaces as the replacement, the replacement prepended (always, or first: only to the
 * piece at the input's start) unless there, then split before each replacement (split). */
static int metaspace(const tok_pre *st, const uint32_t *p, size_t n, int at0, span *sp, uint32_t *tmp, pout *o) {
    size_t m = 0;
    if (st->prepend == 2 || (st->prepend == 1 && at0))
        if (p[0] != st->replacement && p[0] != ' ') tmp[m++] = st->replacement;
    for (size_t i = 0; i < n; i++) tmp[m++] = p[i] == ' ' ? st->replacement : p[i];
    if (!st->flag) return put_piece(o, tmp, m, at0);
    tok_pre s = *st;
    s.op = TOK_PRE_SPLIT, s.pattern = TOK_PAT_STRING, s.str = &s.replacement, s.nstr = 1;
    s.behavior = TOK_B_MERGED_NEXT, s.invert = 0;
    return split_piece(&s, tmp, m, at0, sp, o);
}

attn_status attn_tok_pretokenize(const attn_tokenizer *t, const uint32_t *p, size_t n, int at0, uint32_t **out,
                                 size_t *ncap, tok_piece **pieces, size_t *pcap, size_t *npieces) {
    pout a = {*out, 0, *ncap, *pieces, 0, *pcap}, b = {0}, w = {0};
    span *sp = NULL;
    uint32_t *tmp = NULL;
    size_t spcap = 0, tmpcap = 0;
    int bad = put_piece(&a, p, n, at0);
    for (int s = 0; !bad && s < t->npre_ops; s++) {
        const tok_pre *st = &t->pre[s];
        b.nc = b.np = 0;
        for (size_t k = 0; !bad && k < a.np; k++) {
            const uint32_t *q = a.c + a.pc[k].s;
            size_t m = a.pc[k].e - a.pc[k].s;
            if (reserve((void **)&sp, &spcap, 2 * m + 4, sizeof(span)) || /* 2 n + 1 spans of n <= m + 1 chars */
                reserve((void **)&tmp, &tmpcap, m + 2, sizeof(uint32_t))) {
                bad = 1;
                break;
            }
            if (st->op == TOK_PRE_BYTELEVEL)
                bad = byte_level(st, q, m, a.pc[k].at0, sp, tmp, &w, &b);
            else if (st->op == TOK_PRE_METASPACE)
                bad = metaspace(st, q, m, a.pc[k].at0, sp, tmp, &b);
            else if (st->op == TOK_PRE_BERT) { /* whitespace removed, then punctuation isolated */
                tok_pre punct = {.op = TOK_PRE_PUNCT, .behavior = TOK_B_ISOLATED};
                w.nc = w.np = 0;
                bad = split_piece(st, q, m, a.pc[k].at0, sp, &w);
                for (size_t j = 0; !bad && j < w.np; j++)
                    bad = split_piece(&punct, w.c + w.pc[j].s, w.pc[j].e - w.pc[j].s, w.pc[j].at0, sp, &b);
            } else
                bad = split_piece(st, q, m, a.pc[k].at0, sp, &b);
        }
        pout x = a;
        a = b, b = x;
    }
    attn__free(sp);
    attn__free(tmp);
    attn__free(b.c);
    attn__free(b.pc);
    attn__free(w.c);
    attn__free(w.pc);
    *out = a.c, *ncap = a.ccap, *pieces = a.pc, *pcap = a.pcap, *npieces = a.np;
    return bad ? attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_encode: out of memory") : ATTN_OK;
}
