/* Lookups over the generated tables (unicode_tables.c) and UTF-8 coding. */
#include "text/unicode.h"

unsigned attn_u_props(uint32_t c) {
    if (c < 128) return attn_text_ascii_props[c];
    size_t lo = 0, hi = attn_text_prop_nruns; /* the last run starting at or before c */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((attn_text_prop_runs[mid] >> 10) <= c)
            lo = mid;
        else
            hi = mid;
    }
    return attn_text_prop_runs[lo] & 0x3ffu;
}

int attn_u_is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Index of the row of table (rows of `width` uint32, sorted by their first) whose first is c, or -1. */
static long find_row(const uint32_t *table, size_t rows, size_t width, uint32_t c) {
    size_t lo = 0, hi = rows;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t v = table[mid * width];
        if (v == c) return (long)mid;
        if (v < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int attn_u_lower(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) {
        out[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
        return 1;
    }
    long r = find_row(&attn_text_lower[0][0], attn_text_nlower, 4, c);
    if (r < 0) {
        out[0] = c;
        return 1;
    }
    int n = 0;
    for (int i = 1; i < 4 && attn_text_lower[r][i]; i++) out[n++] = attn_text_lower[r][i];
    return n;
}

int attn_u_decompose(uint32_t c, uint32_t out[4]) {
    if (c >= 0xAC00 && c <= 0xD7A3) { /* Hangul syllables: L V (T) */
        uint32_t s = c - 0xAC00, t = s % 28;
        out[0] = 0x1100 + s / (21 * 28);
        out[1] = 0x1161 + (s % (21 * 28)) / 28;
        if (!t) return 2;
        out[2] = 0x11A7 + t;
        return 3;
    }
    long r = c < 0xC0 ? -1 : find_row(&attn_text_decomp[0][0], attn_text_ndecomp, 5, c);
    if (r < 0) {
        out[0] = c;
        return 1;
    }
    int n = 0;
    for (int i = 1; i < 5 && attn_text_decomp[r][i]; i++) out[n++] = attn_text_decomp[r][i];
    return n;
}

int attn_u_ccc(uint32_t c) {
    if (c < 0x300) return 0;
    size_t lo = 0, hi = attn_text_nccc;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c < attn_text_ccc[mid][0])
            hi = mid;
        else if (c > attn_text_ccc[mid][1])
            lo = mid + 1;
        else
            return (int)attn_text_ccc[mid][2];
    }
    return 0;
}

size_t attn_u_compat(uint32_t c, const uint32_t **out) {
    long r = c < 0xA0 ? -1 : find_row(&attn_text_compat[0][0], attn_text_ncompat, 2, c);
    if (r < 0) return 0;
    *out = attn_text_compat_chars + (attn_text_compat[r][1] >> 8);
    return attn_text_compat[r][1] & 0xffu;
}

uint32_t attn_u_compose(uint32_t a, uint32_t b) {
    if (a >= 0x1100 && a < 0x1100 + 19 && b >= 0x1161 && b < 0x1161 + 21) /* Hangul L V */
        return 0xAC00 + ((a - 0x1100) * 21 + (b - 0x1161)) * 28;
    if (a >= 0xAC00 && a <= 0xD7A3 && (a - 0xAC00) % 28 == 0 && b > 0x11A7 && b < 0x11A7 + 28) /* LV T */
        return a + (b - 0x11A7);
    size_t lo = 0, hi = attn_text_ncompose;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uint32_t *r = attn_text_compose[mid];
        if (r[0] == a && r[1] == b) return r[2];
        if (r[0] < a || (r[0] == a && r[1] < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

size_t attn_u_decode(const unsigned char *s, size_t len, uint32_t *c) {
    unsigned char b = s[0];
    if (b < 0x80) {
        *c = b;
        return 1;
    }
    size_t n;
    uint32_t v, min;
    if (b >= 0xC2 && b <= 0xDF) {
        n = 2, v = b & 0x1F, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 3, v = b & 0x0F, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4, v = b & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *c = v;
    return n;
}

size_t attn_u_encode(uint32_t c, char *out) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}
