/* attn viz: attention weights as pictures. A heat map of a [rows, cols] weight matrix (e.g. one
 * attention's weights: rows = queries, cols = keys) with row and column labels, a colour bar and a
 * title, written as SVG to a FILE*, or as a self-contained HTML page embedding it (no scripts,
 * stylesheets or images from elsewhere). Labels and titles are plain text (UTF-8), escaped for
 * XML; one label per row / column. Colours run from white (vmin) to dark blue (vmax); values
 * outside are clamped, non-finite ones drawn grey. Every cell is a <rect class="cell"> with a
 * <title> tooltip "row label -> col label: value"; column labels are <text class="col">, row
 * labels <text class="row">. Also attention rollout (below), the input of `attn viz --rollout`. */
#ifndef ATTN_VIZ_H
#define ATTN_VIZ_H

#include <stdio.h>

#include "capture.h"
#include "core.h"
#include "image.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_viz_heatmap {
    int64_t rows, cols;              /* >= 1 */
    const float *weights;            /* [rows, cols], row-major */
    const char *const *row_labels;   /* rows strings, or NULL: "0", "1", ... */
    const char *const *col_labels;   /* cols strings, or NULL: "0", "1", ... */
    const char *title;               /* above the map; nullable */
    const char *row_axis, *col_axis; /* axis names, e.g. "query" / "key"; nullable */
    const char *caption;             /* a note under the map; nullable */
    double vmin, vmax;               /* colour scale, vmin < vmax, finite (default 0, 1) */
    int cell_px;                     /* cell size in pixels; 0 = automatic (default) */
    /* Column labels written upwards (rotated -90 degrees): 1 always, 0 only when they are wider
     * than a cell (default). */
    int rotate_col_labels;
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

/* text with &, <, >, " and ' escaped for XML / HTML (attn_viz_write_text's ATTN_VIZ_XML).
 * ATTN_ERR_IO when writing fails. */
ATTN_API attn_status attn_viz_write_escaped(FILE *f, const char *text);

/* Where a text goes: XML / HTML character data or an attribute value (&, <, >, ", ' as
 * entities); the body of a JSON / JavaScript string ("\"", "\\"; <, >, &, U+2028, U+2029 as \u
 * escapes, so it never ends a <script>); the body of a quoted CSV field (" doubled). */
typedef enum attn_viz_syntax { ATTN_VIZ_XML = 0, ATTN_VIZ_JSON = 1, ATTN_VIZ_CSV = 2 } attn_viz_syntax;

/* text (NULL: "") written to f as valid UTF-8 in that syntax: bytes that are not valid UTF-8
 * (stray or truncated, overlong, surrogate, past U+10FFFF) become U+FFFD, one per maximal subpart
 * (Unicode's practice, as Python's errors="replace"); C0 control characters and DEL become their
 * visible Control Pictures (U+2400 + c, U+2421), C1 controls and U+FFFE / U+FFFF become U+FFFD;
 * so a title, a file name or a label of any bytes keeps an SVG / HTML file well-formed and a CSV
 * row on one line. ATTN_ERR_INVALID_ARGUMENT for a NULL f or an unknown syntax, ATTN_ERR_IO when
 * writing fails. */
ATTN_API attn_status attn_viz_write_text(FILE *f, const char *text, attn_viz_syntax syntax);

/* ---- attention rollout (Abnar & Zuidema, "Quantifying Attention Flow in Transformers", 2020) --
 * How much each output position draws on each input token through a stack of self-attentions,
 * counting the residual connections: per layer l the heads' mean plus the identity, rows
 * renormalised to sum 1,
 *     A~_l = rownorm(mean_h A_l[h] + I),
 * multiplied through the layers, the first layer rightmost:
 *     R = A~_{L-1} ... A~_1 A~_0.
 * R[i, j] is position i's share of token j after the last layer; each row sums to 1. Causal
 * weights (GPT) give a lower-triangular R; a ViT's classification token is row 0 (R[0, 1:] over
 * the patches). Computed in double, written as float. */

/* weights[l] [batch, heads, n, n] (row-major, as attn_capture records them with every head and
 * row) for l = 0 .. layers-1 in the order the layers ran; out [batch, n, n]. ATTN_ERR_INVALID_ARGUMENT
 * for a NULL pointer; ATTN_ERR_SHAPE for layers, batch, heads or n < 1 (or an n too large to
 * allocate n x n doubles: ATTN_ERR_OUT_OF_MEMORY); a non-finite weight is ATTN_ERR_NUMERIC. */
ATTN_API attn_status attn_viz_rollout(const float *const *weights, int64_t layers, int64_t batch, int64_t heads,
                                      int64_t n, float *out);

/* The same from count capture records in layer order (e.g. attn_capture_get of a capture asked
 * for "layers.*.self_attn" with every head and row): each must hold every head (head0 0, heads =
 * num_heads) and every row (row0 0, rows = nq) of a square n x n self-attention, all with the same
 * batch and n (heads may differ per layer); otherwise ATTN_ERR_SHAPE naming the module. out
 * [batch, n, n]. */
ATTN_API attn_status attn_viz_rollout_records(const attn_capture_record *records, size_t count, float *out);

/* ---- a map over an image (e.g. a ViT's rollout CLS row over its patch grid) ----
 * out: an RGB image of out_h x out_w pixels: img resized to that size (attn_image_resize; gray
 * becomes RGB) blended with a colour-mapped map: out = (1 - alpha) image + alpha colour(v). map is
 * [grid_h, grid_w] (row-major, e.g. patch (i, j) at i * grid_w + j), scaled to [0, 1] by its minimum
 * and maximum (a constant map is all 0), then upsampled to out_h x out_w: bilinear with half-pixel
 * centres and edge clamping (as attn_image_to_tensor; a smooth picture) or, with nearest, each
 * output pixel takes the patch it falls in (patch borders kept). The colour map runs from
 * black through purple, red and orange to pale yellow (like matplotlib's "inferno"). alpha in
 * [0, 1]. ATTN_ERR_INVALID_ARGUMENT for a NULL pointer, a bad alpha or image, a non-finite map
 * value; ATTN_ERR_SHAPE for grid or output sizes outside 1..ATTN_IMAGE_MAX_SIDE. *out is owned
 * (attn_image_free); attn_image_save writes it as PNG or PPM. */
ATTN_API attn_status attn_viz_overlay(const attn_image *img, const float *map, int64_t grid_h, int64_t grid_w,
                                      int64_t out_h, int64_t out_w, double alpha, int nearest, attn_image *out);

/* The colour map of attn_viz_overlay at v in [0, 1] (clamped) into rgb[3]. */
ATTN_API void attn_viz_colormap(double v, uint8_t rgb[3]);

#ifdef __cplusplus
}
#endif
#endif
