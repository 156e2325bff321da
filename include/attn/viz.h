/* attn viz: attention weights as pictures. A heat map of a [rows, cols] weight matrix (e.g. one
 * attention's weights: rows = queries, cols = keys) with row and column labels, a colour bar and a
 * title, written as SVG to a FILE*, or as a self-contained HTML page embedding it (no scripts,
 * stylesheets or images from elsewhere). Labels and titles are plain text (UTF-8), escaped for
 * XML; one label per row / column. Colours run from white (vmin) to dark blue (vmax); values
 * outside are clamped, non-finite ones drawn grey. Every cell is a <rect class="cell"> with a
 * <title> tooltip "row label -> col label: value"; column labels are <text class="col">, row
 * labels <text class="row">. */
#ifndef ATTN_VIZ_H
#define ATTN_VIZ_H

#include <stdio.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_viz_heatmap {
    int64_t rows, cols;                /* >= 1 */
    const float *weights;              /* [rows, cols], row-major */
    const char *const *row_labels;     /* rows strings, or NULL: "0", "1", ... */
    const char *const *col_labels;     /* cols strings, or NULL: "0", "1", ... */
    const char *title;                 /* above the map; nullable */
    const char *row_axis, *col_axis;   /* axis names, e.g. "query" / "key"; nullable */
    const char *caption;               /* a note under the map; nullable */
    double vmin, vmax;                 /* colour scale, vmin < vmax, finite (default 0, 1) */
    int cell_px;                       /* cell size in pixels; 0 = automatic (default) */
} attn_viz_heatmap;

/* Everything zero / NULL except vmax = 1. */
ATTN_API attn_viz_heatmap attn_viz_heatmap_default(void);

/* The <svg> element (no XML declaration: write "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
 * first for a standalone .svg file). ATTN_ERR_INVALID_ARGUMENT for a NULL f, h or weights, or a
 * bad scale; ATTN_ERR_SHAPE for rows or cols < 1; ATTN_ERR_IO when writing fails. */
ATTN_API attn_status attn_viz_write_svg(FILE *f, const attn_viz_heatmap *h);

/* A whole HTML page: <title> page_title (escaped; nullable: the map's title), then before_html,
 * the SVG, then after_html. before_html / after_html are HTML fragments copied verbatim (the
 * caller escapes their text: attn_viz_write_escaped), nullable. */
ATTN_API attn_status attn_viz_write_html(FILE *f, const attn_viz_heatmap *h, const char *page_title,
                                         const char *before_html, const char *after_html);

/* text with &, <, >, " and ' escaped for XML / HTML. ATTN_ERR_IO when writing fails. */
ATTN_API attn_status attn_viz_write_escaped(FILE *f, const char *text);

#ifdef __cplusplus
}
#endif
#endif
