/* A map over an image (attn/viz.h: attn_viz_overlay): min-max scaling, bilinear or nearest
 * upsampling to the picture's size, an inferno-like colour map, alpha blending. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "attn/viz.h"
#include "core/internal.h"

/* Stops of the colour map (approximately matplotlib's inferno at 0, 1/4, 1/2, 3/4, 1). */
static const double stops[5][3] = {
    {0, 0, 4}, {87, 16, 110}, {188, 55, 84}, {249, 142, 9}, {252, 255, 164},
};

void attn_viz_colormap(double v, uint8_t rgb[3]) {
    if (!(v > 0)) v = 0; /* NaN too */
    if (v > 1) v = 1;
    const double x = v * 4;
    int i = (int)x;
    if (i > 3) i = 3;
    const double t = x - i;
    for (int c = 0; c < 3; c++) rgb[c] = (uint8_t)(stops[i][c] + (stops[i + 1][c] - stops[i][c]) * t + 0.5);
}

/* Source coordinate of output o under bilinear, half-pixel centres (as the image resize). */
static void tap(int64_t in, int64_t out, int64_t o, int64_t *a, int64_t *b, double *t) {
    double x = ((double)o + 0.5) * (double)in / (double)out - 0.5;
    if (x < 0) x = 0;
    int64_t i = (int64_t)x;
    if (i > in - 1) i = in - 1;
    *a = i;
    *b = i + 1 < in ? i + 1 : in - 1;
    *t = x - (double)i;
}

attn_status attn_viz_overlay(const attn_image *img, const float *map, int64_t grid_h, int64_t grid_w, int64_t out_h,
                             int64_t out_w, double alpha, int nearest, attn_image *out) {
    static const char fn[] = "attn_viz_overlay";
    ATTN_CHECK_NOT_NULL(fn, out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(fn, img);
    ATTN_CHECK_NOT_NULL(fn, map);
    if (!(alpha >= 0 && alpha <= 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: alpha = %g must be in [0, 1]", fn, alpha);
    if (grid_h < 1 || grid_w < 1 || grid_h > ATTN_IMAGE_MAX_SIDE || grid_w > ATTN_IMAGE_MAX_SIDE ||
        grid_h * grid_w > ATTN_IMAGE_MAX_PIXELS)
        return attn_error(ATTN_ERR_SHAPE, "%s: map grid %lld x %lld outside 1..%d per side", fn, (long long)grid_h,
                          (long long)grid_w, ATTN_IMAGE_MAX_SIDE);
    if (out_h < 1 || out_w < 1 || out_h > ATTN_IMAGE_MAX_SIDE || out_w > ATTN_IMAGE_MAX_SIDE ||
        out_h * out_w > ATTN_IMAGE_MAX_PIXELS)
        return attn_error(ATTN_ERR_SHAPE, "%s: output size %lld x %lld outside the image limits", fn, (long long)out_h,
                          (long long)out_w);
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t k = 0; k < grid_h * grid_w; k++) {
        if (!isfinite(map[k]))
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: map[%lld] is not finite", fn, (long long)k);
        lo = map[k] < lo ? map[k] : lo;
        hi = map[k] > hi ? map[k] : hi;
    }
    const double span = hi > lo ? hi - lo : 1;
    attn_image base;
    attn_status st = attn_image_resize(img, out_h, out_w, &base);
    if (st) return st;
    uint8_t *px = attn__malloc((size_t)(out_h * out_w * 3));
    if (!px) {
        attn_image_free(&base);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    for (int64_t y = 0; y < out_h; y++) {
        int64_t ya, yb;
        double ty;
        tap(grid_h, out_h, y, &ya, &yb, &ty);
        if (nearest) ya = yb = y * grid_h / out_h, ty = 0;
        for (int64_t x = 0; x < out_w; x++) {
            int64_t xa, xb;
            double tx;
            tap(grid_w, out_w, x, &xa, &xb, &tx);
            if (nearest) xa = xb = x * grid_w / out_w, tx = 0;
            const double a = map[ya * grid_w + xa], b = map[ya * grid_w + xb];
            const double c = map[yb * grid_w + xa], d = map[yb * grid_w + xb];
            const double top = a + (b - a) * tx, bot = c + (d - c) * tx;
            const double v = (top + (bot - top) * ty - lo) / span;
            uint8_t rgb[3];
            attn_viz_colormap(v, rgb);
            const uint8_t *s = base.pixels + (y * out_w + x) * base.channels;
            for (int k = 0; k < 3; k++) {
                const double g = base.channels == 3 ? s[k] : s[0];
                const double o = (1 - alpha) * g + alpha * rgb[k];
                px[(y * out_w + x) * 3 + k] = (uint8_t)(o < 0 ? 0 : o > 255 ? 255 : o + 0.5);
            }
        }
    }
    attn_image_free(&base);
    out->width = out_w;
    out->height = out_h;
    out->channels = 3;
    out->pixels = px;
    return ATTN_OK;
}
