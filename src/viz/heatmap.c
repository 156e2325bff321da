/* Heat maps of weight matrices as SVG and as a self-contained HTML page (see attn/viz.h). Plain
 * SVG 1.1: rectangles and text, no gradients or scripts, so simple renderers show it too. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn/viz.h"
#include "core/internal.h"

attn_viz_heatmap attn_viz_heatmap_default(void) {
    attn_viz_heatmap h;
    memset(&h, 0, sizeof h);
    h.vmax = 1.0;
    return h;
}

/* Characters of a UTF-8 string (continuation bytes not counted): a width estimate. */
static int64_t text_len(const char *s) {
    int64_t n = 0;
    for (; s && *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Label i: the caller's, or its index. */
static const char *label(const char *const *labels, int64_t i, char *buf, size_t cap) {
    if (labels && labels[i]) return labels[i];
    snprintf(buf, cap, "%lld", (long long)i);
    return buf;
}

/* Non-finite weights in a colour of their own, outside the white-to-blue ramp, so that a NaN cell
 * never reads as a zero: NaN red, +-Inf orange. */
static const int nan_rgb[3] = {214, 39, 40}, inf_rgb[3] = {255, 127, 14};

static void colour(double v, double vmin, double vmax, int rgb[3]) {
    if (!isfinite(v)) {
        memcpy(rgb, isnan(v) ? nan_rgb : inf_rgb, sizeof nan_rgb);
        return;
    }
    double t = (v - vmin) / (vmax - vmin);
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    /* white -> dark blue */
    rgb[0] = (int)lround(255 + (8 - 255) * t);
    rgb[1] = (int)lround(255 + (48 - 255) * t);
    rgb[2] = (int)lround(255 + (107 - 255) * t);
}

static attn_status check(const char *fn, FILE *f, const attn_viz_heatmap *h) {
    ATTN_CHECK_NOT_NULL(fn, f);
    ATTN_CHECK_NOT_NULL(fn, h);
    ATTN_CHECK_NOT_NULL(fn, h->weights);
    if (h->rows < 1 || h->cols < 1 || h->rows > (1 << 20) || h->cols > (1 << 20))
        return attn_error(ATTN_ERR_SHAPE, "%s: rows = %lld, cols = %lld must be in [1, 2^20]", fn, (long long)h->rows,
                          (long long)h->cols);
    if (!isfinite(h->vmin) || !isfinite(h->vmax) || !(h->vmin < h->vmax))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: the colour scale vmin = %g, vmax = %g needs finite vmin < vmax", fn, h->vmin, h->vmax);
    if (h->cell_px < 0 || h->cell_px > 1000)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: cell_px = %d must be in [0, 1000]", fn, h->cell_px);
    return ATTN_OK;
}

static attn_status write_svg(const char *fn, FILE *f, const attn_viz_heatmap *h) {
    const int64_t R = h->rows, C = h->cols, big = R > C ? R : C;
    const int cell = h->cell_px > 0 ? h->cell_px : big <= 24 ? 34 : big >= 136 ? 6 : (int)(816 / big);
    const int font = cell >= 24 ? 14 : cell >= 10 ? cell / 2 + 2 : 6;
    const double cw = 0.6 * font; /* width of a character, roughly */
    char buf[32];
    int64_t max_row = 0, max_col = 0;
    for (int64_t i = 0; i < R; i++) {
        int64_t n = text_len(label(h->row_labels, i, buf, sizeof buf));
        if (n > max_row) max_row = n;
    }
    for (int64_t j = 0; j < C; j++) {
        int64_t n = text_len(label(h->col_labels, j, buf, sizeof buf));
        if (n > max_col) max_col = n;
    }
    const int rotate_cols = h->rotate_col_labels || max_col * cw > cell - 4; /* column labels written upwards */
    const int64_t left = (int64_t)fmax(110, 60 + max_row * cw);
    const int64_t top = 96 + (rotate_cols ? (int64_t)(max_col * cw) : 0);
    const int64_t mw = C * cell, mh = R * cell, bx = left + mw + 40;
    char vmin_s[32], vmax_s[32];
    snprintf(vmin_s, sizeof vmin_s, "%g", h->vmin);
    snprintf(vmax_s, sizeof vmax_s, "%g", h->vmax);
    int64_t width = left + mw + 110, height = top + mh + (h->caption ? 50 : 30);
    const int64_t bar_end =
        bx + 22 + (int64_t)(7.2 * (double)(strlen(vmin_s) > strlen(vmax_s) ? strlen(vmin_s) : strlen(vmax_s))) + 10;
    int has_nan = 0, has_inf = 0;
    for (int64_t k = 0; k < R * C; k++) {
        has_nan |= isnan(h->weights[k]) != 0;
        has_inf |= isinf(h->weights[k]) != 0;
    }
    if (bar_end > width) width = bar_end;
    if (has_inf && bx + 44 + 40 > width) width = bx + 44 + 40; /* room for the Inf legend entry */
    if (h->title && 20 + (int64_t)(8.5 * (double)text_len(h->title)) > width)
        width = 20 + (int64_t)(8.5 * (double)text_len(h->title));
    if (h->caption && 20 + (int64_t)(7.0 * (double)text_len(h->caption)) > width)
        width = 20 + (int64_t)(7.0 * (double)text_len(h->caption));
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%lld\" height=\"%lld\" viewBox=\"0 0 %lld %lld\" "
            "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"14\">\n",
            (long long)width, (long long)height, (long long)width, (long long)height);
    if (h->title) {
        fputs("<title>", f);
        attn_viz_write_escaped(f, h->title);
        fputs("</title>\n", f);
    }
    fputs("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", f);
    if (h->title) {
        fputs("<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", f);
        attn_viz_write_escaped(f, h->title);
        fputs("</text>\n", f);
    }
    if (h->col_axis) {
        fprintf(f, "<text x=\"%lld\" y=\"56\" text-anchor=\"middle\" fill=\"#444\">", (long long)(left + mw / 2));
        attn_viz_write_escaped(f, h->col_axis);
        fputs("</text>\n", f);
    }
    if (h->row_axis) {
        const long long y = (long long)(top + mh / 2);
        fprintf(f, "<text x=\"30\" y=\"%lld\" text-anchor=\"middle\" fill=\"#444\" transform=\"rotate(-90 30 %lld)\">",
                y, y);
        attn_viz_write_escaped(f, h->row_axis);
        fputs("</text>\n", f);
    }
    for (int64_t j = 0; j < C; j++) {
        const long long x = (long long)(left + j * cell + cell / 2), y = (long long)(top - 10);
        if (rotate_cols)
            fprintf(f,
                    "<text class=\"col\" x=\"%lld\" y=\"%lld\" font-size=\"%d\" text-anchor=\"start\" "
                    "dominant-baseline=\"middle\" transform=\"rotate(-90 %lld %lld)\">",
                    x, y, font, x, y);
        else
            fprintf(f, "<text class=\"col\" x=\"%lld\" y=\"%lld\" font-size=\"%d\" text-anchor=\"middle\">", x, y,
                    font);
        attn_viz_write_escaped(f, label(h->col_labels, j, buf, sizeof buf));
        fputs("</text>\n", f);
    }
    for (int64_t i = 0; i < R; i++) {
        fprintf(f, "<text class=\"row\" x=\"%lld\" y=\"%lld\" font-size=\"%d\" text-anchor=\"end\">",
                (long long)(left - 10), (long long)(top + i * cell + cell / 2 + font / 3), font);
        attn_viz_write_escaped(f, label(h->row_labels, i, buf, sizeof buf));
        fputs("</text>\n", f);
    }
    char rb[32], cb[32];
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            const double v = h->weights[i * C + j];
            int rgb[3];
            colour(v, h->vmin, h->vmax, rgb);
            fprintf(f,
                    "<rect class=\"cell\" x=\"%lld\" y=\"%lld\" width=\"%d\" height=\"%d\" fill=\"rgb(%d,%d,%d)\" "
                    "stroke=\"#ddd\" stroke-width=\"0.5\"><title>",
                    (long long)(left + j * cell), (long long)(top + i * cell), cell, cell, rgb[0], rgb[1], rgb[2]);
            attn_viz_write_escaped(f, label(h->row_labels, i, rb, sizeof rb));
            fputs(" -&gt; ", f);
            attn_viz_write_escaped(f, label(h->col_labels, j, cb, sizeof cb));
            if (isfinite(v))
                fprintf(f, ": %.3f</title></rect>\n", v);
            else
                fprintf(f, ": %s</title></rect>\n", isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf");
        }
    /* colour bar: 20 bands from vmax (top) to vmin (bottom); no gradients, for simple renderers */
    for (int k = 0; k < 20; k++) {
        int rgb[3];
        colour(h->vmax - (h->vmax - h->vmin) * (k + 0.5) / 20.0, h->vmin, h->vmax, rgb);
        fprintf(f,
                "<rect x=\"%lld\" y=\"%.2f\" width=\"16\" height=\"%.2f\" fill=\"rgb(%d,%d,%d)\" "
                "shape-rendering=\"crispEdges\"/>\n",
                (long long)bx, (double)top + (double)mh * k / 20.0, (double)mh / 20.0 + 0.3, rgb[0], rgb[1], rgb[2]);
    }
    fprintf(f, "<rect x=\"%lld\" y=\"%lld\" width=\"16\" height=\"%lld\" fill=\"none\" stroke=\"#999\"/>\n",
            (long long)bx, (long long)top, (long long)mh);
    fprintf(f, "<text x=\"%lld\" y=\"%lld\" font-size=\"12\">%s</text>\n", (long long)(bx + 22), (long long)(top + 10),
            vmax_s);
    fprintf(f, "<text x=\"%lld\" y=\"%lld\" font-size=\"12\">%s</text>\n", (long long)(bx + 22), (long long)(top + mh),
            vmin_s);
    for (int k = 0; k < 2; k++) /* a legend entry for each non-finite colour the map uses */
        if (k ? has_inf : has_nan)
            fprintf(f,
                    "<rect x=\"%lld\" y=\"%lld\" width=\"16\" height=\"10\" fill=\"rgb(%d,%d,%d)\"/><text x=\"%lld\" "
                    "y=\"%lld\" font-size=\"11\">%s</text>\n",
                    (long long)(bx + 44 * k), (long long)(top + mh + 6), k ? inf_rgb[0] : nan_rgb[0],
                    k ? inf_rgb[1] : nan_rgb[1], k ? inf_rgb[2] : nan_rgb[2], (long long)(bx + 44 * k + 19),
                    (long long)(top + mh + 15), k ? "Inf" : "NaN");
    if (h->caption) {
        fprintf(f, "<text x=\"10\" y=\"%lld\" font-size=\"12\" fill=\"#666\">", (long long)(top + mh + 30));
        attn_viz_write_escaped(f, h->caption);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? attn_error(ATTN_ERR_IO, "%s: write failed", fn) : ATTN_OK;
}

attn_status attn_viz_write_svg(FILE *f, const attn_viz_heatmap *h) {
    static const char fn[] = "attn_viz_write_svg";
    attn_status st = check(fn, f, h);
    return st ? st : write_svg(fn, f, h);
}

attn_status attn_viz_write_html(FILE *f, const attn_viz_heatmap *h, const char *page_title, const char *before_html,
                                const char *after_html) {
    static const char fn[] = "attn_viz_write_html";
    attn_status st = check(fn, f, h);
    if (st) return st;
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
    attn_viz_write_escaped(f, page_title ? page_title : h->title ? h->title : "attention heat map");
    fputs("</title>\n<style>\n"
          "body { font-family: Helvetica, Arial, sans-serif; margin: 2em; color: #222; max-width: 60em; }\n"
          "code { background: #f3f3f3; padding: 0 0.3em; }\n"
          "td { padding: 0.2em 1em 0.2em 0; }\n"
          ".mono { font-family: monospace; font-size: 1.1em; }\n"
          "svg { max-width: 100%; height: auto; }\n"
          "</style>\n</head>\n<body>\n",
          f);
    if (before_html) fputs(before_html, f);
    if ((st = write_svg(fn, f, h))) return st;
    if (after_html) fputs(after_html, f);
    fputs("</body>\n</html>\n", f);
    return ferror(f) ? attn_error(ATTN_ERR_IO, "%s: write failed", fn) : ATTN_OK;
}
