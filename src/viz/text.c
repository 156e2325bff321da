/* Text written into SVG, HTML, JSON-in-HTML and CSV files (attn/viz.h): one routine for all of
 * them, so that a title, a file name or a token label is made valid UTF-8 without control
 * characters the same way everywhere, and only the final quoting differs by syntax. */
#include <stdio.h>
#include <string.h>

#include "attn/viz.h"
#include "core/internal.h"

/* The length of the valid UTF-8 sequence at p (1..4) with its code point in *cp; or, when the bytes
 * there are not one (a stray continuation byte, a truncated sequence, an overlong form, a
 * surrogate, a value past U+10FFFF), minus the length of its maximal subpart: the bytes that
 * could still have begun a valid sequence, which become one U+FFFD together (Unicode's
 * recommended practice, what Python's errors="replace" and the WHATWG decoder do). */
static int utf8_seq(const unsigned char *p, unsigned *cp) {
    const unsigned c = p[0];
    int n;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4;
    else
        return -1;
    /* the second byte's range excludes overlong forms (E0, F0), surrogates (ED) and > U+10FFFF (F4) */
    const unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    unsigned v = c & (0x7F >> n);
    for (int k = 1; k < n; k++) {
        const unsigned b = p[k]; /* the terminating NUL fails here too */
        if (k == 1 ? b < lo || b > hi : (b & 0xC0) != 0x80) return -k;
        v = v << 6 | (b & 0x3F);
    }
    *cp = v;
    return n;
}

static void put_utf8(FILE *f, unsigned cp) {
    if (cp < 0x80) {
        fputc((int)cp, f);
    } else if (cp < 0x800) {
        fputc((int)(0xC0 | cp >> 6), f);
        fputc((int)(0x80 | (cp & 0x3F)), f);
    } else if (cp < 0x10000) {
        fputc((int)(0xE0 | cp >> 12), f);
        fputc((int)(0x80 | ((cp >> 6) & 0x3F)), f);
        fputc((int)(0x80 | (cp & 0x3F)), f);
    } else {
        fputc((int)(0xF0 | cp >> 18), f);
        fputc((int)(0x80 | ((cp >> 12) & 0x3F)), f);
        fputc((int)(0x80 | ((cp >> 6) & 0x3F)), f);
        fputc((int)(0x80 | (cp & 0x3F)), f);
    }
}

/* The character cp as the file gets it: C0 controls and DEL as their visible Control Pictures
 * (U+2400 + c, U+2421; XML 1.0 forbids most of them and a raw newline would break a CSV row or a
 * one-line title), C1 controls and the noncharacters U+FFFE / U+FFFF as U+FFFD. */
static unsigned visible(unsigned cp) {
    if (cp < 0x20) return 0x2400 + cp;
    if (cp == 0x7F) return 0x2421;
    if ((cp >= 0x80 && cp <= 0x9F) || cp == 0xFFFE || cp == 0xFFFF) return 0xFFFD;
    return cp;
}

attn_status attn_viz_write_text(FILE *f, const char *text, attn_viz_syntax syntax) {
    static const char fn[] = "attn_viz_write_text";
    ATTN_CHECK_NOT_NULL(fn, f);
    if ((int)syntax < 0 || (int)syntax > ATTN_VIZ_CSV)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: syntax %d is not an attn_viz_syntax", fn, (int)syntax);
    const unsigned char *p = (const unsigned char *)(text ? text : "");
    while (*p) {
        unsigned cp = 0;
        const int n = utf8_seq(p, &cp);
        p += n > 0 ? n : -n;
        cp = n > 0 ? visible(cp) : 0xFFFD;
        if (syntax == ATTN_VIZ_XML && (cp == '&' || cp == '<' || cp == '>' || cp == '"' || cp == '\''))
            fputs(cp == '&' ? "&amp;" : cp == '<' ? "&lt;" : cp == '>' ? "&gt;" : cp == '"' ? "&quot;" : "&#39;", f);
        else if (syntax == ATTN_VIZ_JSON && (cp == '"' || cp == '\\'))
            fprintf(f, "\\%c", (int)cp);
        else if (syntax == ATTN_VIZ_JSON && (cp == '<' || cp == '>' || cp == '&')) /* never closes a <script> */
            fprintf(f, "\\u%04x", cp);
        else if (syntax == ATTN_VIZ_JSON && (cp == 0x2028 || cp == 0x2029)) /* line breaks to older JavaScript */
            fprintf(f, "\\u%04x", cp);
        else if (syntax == ATTN_VIZ_CSV && cp == '"')
            fputs("\"\"", f);
        else
            put_utf8(f, cp);
    }
    return ferror(f) ? attn_error(ATTN_ERR_IO, "%s: write failed", fn) : ATTN_OK;
}

attn_status attn_viz_write_escaped(FILE *f, const char *text) {
    if (!f) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_viz_write_escaped: f is NULL");
    return attn_viz_write_text(f, text, ATTN_VIZ_XML);
}
