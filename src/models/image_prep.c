/* An image processor's preprocessor_config.json (ViTImageProcessor) and its math, as transformers
 * 5.25's default (torchvision) backend computes it on an 8-bit image:
 *   convert_rgb   gray replicated to RGB
 *   resize        torch's antialiased bilinear resize of uint8 images (what torchvision's resize
 *                 calls on the CPU: F.interpolate(uint8, mode="bilinear", antialias=True)), one
 *                 axis at a time, width first, each pass rounded to 8 bits: per axis
 *                   scale = in / out, support = max(scale, 1), taps [xmin, xmin + n) around
 *                   centre = scale (i + 0.5) with triangle weights max(0, 1 - |j + xmin - centre +
 *                   0.5| / max(scale, 1)) normalised to sum 1, then as int16 of `precision` bits
 *                   (the largest precision < 22 keeping 2 max_w 2^precision < 2^15) and summed in
 *                   integers with 2^(precision - 1) for rounding; an axis of the same size is
 *                   not touched (an exact copy)
 *   rescale and normalize  fused as the processor does: (x - mean / factor) / (std / factor),
 *                 mean / factor and std / factor rounded to float32, every step in float32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/internal.h"
#include "models_internal.h"

/* Keys that do not change the pixels (bookkeeping of transformers' classes and call options). */
static const char *const IGNORED[] = {"image_processor_type", "processor_class", "feature_extractor_type",
                                      "_processor_class",     "data_format",     "input_data_format",
                                      "return_tensors",       "device",          "disable_grouping",
                                      "default_to_square",    "crop_size",       "pad_size"};
/* Keys read below. */
static const char *const KNOWN[] = {"do_resize",      "size",           "resample",   "do_rescale",
                                    "rescale_factor", "do_normalize",   "image_mean", "image_std",
                                    "do_convert_rgb", "do_center_crop", "do_pad"};

static int in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, list[i]) == 0) return 1;
    return 0;
}

/* mean / std: a number (every channel) or a list of one per channel (or of one). */
static attn_status read_channels(const attn_json *root, const char *path, const char *key, int64_t channels, double def,
                                 int positive, double *out) {
    const attn_json *v = attn_json_get(root, key);
    for (int c = 0; c < 3; c++) out[c] = def;
    if (!v || attn_json_is_null(v)) return ATTN_OK;
    const size_t n = v->type == ATTN_JSON_ARRAY ? attn_json_count(v) : 1;
    int ok = n == 1 || n == (size_t)channels;
    for (size_t i = 0; ok && i < n; i++) {
        double x = 0;
        ok = attn_json_as_double(v->type == ATTN_JSON_ARRAY ? attn_json_at(v, i) : v, &x) && isfinite(x) &&
             (!positive || x > 0);
        for (int c = 0; ok && c < 3; c++)
            if (n == 1 || (size_t)c == i) out[c] = x;
    }
    if (!ok)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: key '%s' must be a %snumber or a list of %lld (one per channel; got %s of %zu)", path,
                          key, positive ? "positive " : "", (long long)channels, attn_json_type_name(v->type), n);
    return ATTN_OK;
}

/* size: {"height", "width"} (or one integer: a square). */
static attn_status read_size(const attn_json *root, const char *path, hf_image_prep *p) {
    const attn_json *v = attn_json_get(root, "size");
    if (!v || attn_json_is_null(v)) return ATTN_OK;
    if (v->type != ATTN_JSON_OBJECT) {
        attn_status st = attn_hf_json_int(root, path, "size", 1, 0, 1, ATTN_IMAGE_MAX_SIDE, &p->height);
        p->width = p->height;
        return st;
    }
    for (size_t i = 0; i < attn_json_count(v); i++) {
        const char *k = attn_json_as_string(attn_json_member_key(v, i), NULL);
        if (strcmp(k, "height") != 0 && strcmp(k, "width") != 0)
            return attn_error(ATTN_ERR_UNSUPPORTED,
                              "%s: key 'size.%.40s' is not supported (attn resizes to {height, width})", path, k);
    }
    attn_status st = attn_hf_json_int(v, path, "height", 1, 0, 1, ATTN_IMAGE_MAX_SIDE, &p->height);
    if (!st) st = attn_hf_json_int(v, path, "width", 1, 0, 1, ATTN_IMAGE_MAX_SIDE, &p->width);
    return st;
}

static attn_status read_prep(const attn_json *root, const char *path, int64_t channels, hf_image_prep *p) {
    for (size_t i = 0; i < attn_json_count(root); i++) {
        const char *k = attn_json_as_string(attn_json_member_key(root, i), NULL);
        if (!in_list(k, IGNORED, sizeof IGNORED / sizeof *IGNORED) && !in_list(k, KNOWN, sizeof KNOWN / sizeof *KNOWN))
            return attn_error(ATTN_ERR_UNSUPPORTED, "%s: key '%.60s' is not supported by attn's ViT preprocessing",
                              path, k);
    }
    int crop = 0, pad = 0;
    int64_t resample = 2;
    attn_status st = attn_hf_json_bool(root, path, "do_resize", 1, &p->resize);
    if (!st) st = read_size(root, path, p);
    if (!st) st = attn_hf_json_int(root, path, "resample", 0, 2, 0, 5, &resample);
    if (!st && resample != 2)
        st = attn_error(ATTN_ERR_UNSUPPORTED, "%s: key 'resample' is %lld (attn resizes bilinearly: 2)", path,
                        (long long)resample);
    if (!st) st = attn_hf_json_bool(root, path, "do_rescale", 1, &p->rescale);
    const attn_json *rf = attn_json_get(root, "rescale_factor");
    if (!st && rf && !attn_json_is_null(rf) &&
        (!attn_json_as_double(rf, &p->factor) || !(p->factor > 0) || !isfinite(p->factor)))
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key 'rescale_factor' must be a positive number", path);
    if (!st) st = attn_hf_json_bool(root, path, "do_normalize", 1, &p->normalize);
    if (!st) st = read_channels(root, path, "image_mean", channels, 0.5, 0, p->mean);
    if (!st) st = read_channels(root, path, "image_std", channels, 0.5, 1, p->std);
    if (!st) st = attn_hf_json_bool(root, path, "do_convert_rgb", 0, &p->convert_rgb);
    if (!st) st = attn_hf_json_bool(root, path, "do_center_crop", 0, &crop);
    if (!st) st = attn_hf_json_bool(root, path, "do_pad", 0, &pad);
    if (!st && (crop || pad))
        st = attn_error(ATTN_ERR_UNSUPPORTED, "%s: key '%s' is true (attn's ViT preprocessing does not %s)", path,
                        crop ? "do_center_crop" : "do_pad", crop ? "crop" : "pad");
    return st;
}

attn_status attn_hf_image_prep_read(const char *dir, int64_t channels, int64_t def_h, int64_t def_w, hf_image_prep *p) {
    memset(p, 0, sizeof *p);
    p->resize = p->rescale = p->normalize = 1;
    p->height = def_h, p->width = def_w;
    p->factor = 1.0 / 255;
    for (int c = 0; c < 3; c++) p->mean[c] = p->std[c] = 0.5;
    char *path = attn_io_path_join(dir, "preprocessor_config.json");
    if (!path) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_open: out of memory");
    attn_status st = ATTN_OK;
    if (attn_io_is_regular(path)) {
        attn_json_doc *doc = NULL;
        const attn_json *root = NULL;
        st = attn_hf_read_json(path, ATTN_JSON_OBJECT, &doc, &root);
        if (!st) st = read_prep(root, path, channels, p);
        attn_json_free(doc);
    }
    attn__free(path);
    return st;
}

/* ---- torch's antialiased bilinear resize of uint8 images (see the top) ---- */

typedef struct axis_plan {
    int64_t *xmin, *xsize; /* [out] */
    int16_t *w;            /* [out, k] */
    int64_t k;
    int precision;
} axis_plan;

static void plan_free(axis_plan *a) {
    attn__free(a->xmin);
    attn__free(a->xsize);
    attn__free(a->w);
}

static attn_status plan_axis(int64_t in, int64_t out, axis_plan *a) {
    const double scale = (double)in / (double)out, support = scale >= 1.0 ? scale : 1.0;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    a->k = (int64_t)ceil(support) * 2 + 1;
    a->xmin = attn__malloc((size_t)out * sizeof(int64_t));
    a->xsize = attn__malloc((size_t)out * sizeof(int64_t));
    a->w = attn__malloc((size_t)(out * a->k) * sizeof(int16_t));
    double *wf = attn__calloc((size_t)(out * a->k), sizeof(double));
    if (!a->xmin || !a->xsize || !a->w || !wf) {
        attn__free(wf);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_image_input: out of memory (resize)");
    }
    double wt_max = 0;
    for (int64_t i = 0; i < out; i++) {
        const double center = scale * ((double)i + 0.5);
        int64_t xmin = (int64_t)(center - support + 0.5), xmax = (int64_t)(center + support + 0.5);
        xmin = xmin < 0 ? 0 : xmin;
        int64_t n = (xmax < in ? xmax : in) - xmin;
        n = n < 0 ? 0 : n > a->k ? a->k : n;
        double *w = wf + i * a->k, total = 0;
        for (int64_t j = 0; j < n; j++) {
            double x = fabs(((double)(j + xmin) - center + 0.5) * invscale);
            w[j] = x < 1.0 ? 1.0 - x : 0.0;
            total += w[j];
        }
        for (int64_t j = 0; total != 0.0 && j < n; j++) {
            w[j] /= total;
            wt_max = w[j] > wt_max ? w[j] : wt_max;
        }
        a->xmin[i] = xmin, a->xsize[i] = n;
    }
    for (a->precision = 0; a->precision < 22; a->precision++)
        if ((int)(0.5 + wt_max * (double)(1 << (a->precision + 1))) >= (1 << 15)) break;
    for (int64_t i = 0; i < out * a->k; i++) {
        const double v = wf[i] * (double)(1 << a->precision);
        a->w[i] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    attn__free(wf);
    return ATTN_OK;
}

/* One pass along an axis: dst[o] over `lines` lines of `count` samples, samples `step` apart and
 * lines `lstep` apart (src and dst alike, in their own sizes), channels interleaved (C). */
static void resample(const uint8_t *src, uint8_t *dst, const axis_plan *a, int64_t out, int64_t lines, int64_t src_step,
                     int64_t src_lstep, int64_t dst_step, int64_t dst_lstep, int C) {
    for (int64_t l = 0; l < lines; l++)
        for (int64_t o = 0; o < out; o++)
            for (int c = 0; c < C; c++) {
                int32_t acc = a->precision ? (int32_t)1 << (a->precision - 1) : 0;
                const int16_t *w = a->w + o * a->k;
                const uint8_t *s = src + l * src_lstep + a->xmin[o] * src_step + c;
                for (int64_t j = 0; j < a->xsize[o]; j++) acc += (int32_t)s[j * src_step] * (int32_t)w[j];
                acc >>= a->precision;
                dst[l * dst_lstep + o * dst_step + c] = (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
            }
}

/* img [h0, w0, C] -> out [h, w, C] (owned by the caller, freed with attn__free). */
static attn_status resize_u8(const uint8_t *img, int64_t h0, int64_t w0, int C, int64_t h, int64_t w, uint8_t **out) {
    axis_plan ax = {0}, ay = {0};
    uint8_t *mid = NULL, *dst = attn__malloc((size_t)(h * w * C));
    attn_status st = dst ? ATTN_OK : attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_image_input: out of memory");
    const uint8_t *cur = img;
    if (!st && w != w0) {
        mid = attn__malloc((size_t)(h0 * w * C));
        st = mid ? plan_axis(w0, w, &ax)
                 : attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_pretrained_image_input: out of memory");
        if (!st) resample(img, mid, &ax, w, h0, C, w0 * C, C, w * C, C);
        cur = mid;
    }
    if (!st && h != h0) {
        st = plan_axis(h0, h, &ay);
        if (!st) resample(cur, dst, &ay, h, w, w * C, C, w * C, C, C);
    } else if (!st)
        memcpy(dst, cur, (size_t)(h * w * C));
    plan_free(&ax);
    plan_free(&ay);
    attn__free(mid);
    if (st) {
        attn__free(dst);
        return st;
    }
    *out = dst;
    return ATTN_OK;
}

attn_status attn_hf_image_prep_apply(const hf_image_prep *p, int64_t channels, const attn_image *img, int64_t h,
                                     int64_t w, float *out) {
    const char *fn = "attn_pretrained_image_input";
    int C = img->channels;
    if (channels != 1 && channels != 3)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: the model takes %lld channels (attn's images have 1 or 3)", fn,
                          (long long)channels);
    if (C == 1 && channels == 3 && !p->convert_rgb)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: a gray image for a model of 3 channels, and preprocessor_config.json's do_convert_rgb "
                          "is not true",
                          fn);
    if (C == 3 && channels == 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: an RGB image for a model of 1 channel", fn);
    const int64_t th = p->resize ? p->height : img->height, tw = p->resize ? p->width : img->width;
    if (th != h || tw != w)
        return attn_error(ATTN_ERR_SHAPE, "%s: the preprocessed image is %lldx%lld but the model takes %lldx%lld%s", fn,
                          (long long)th, (long long)tw, (long long)h, (long long)w,
                          p->resize ? " (preprocessor_config.json's size)" : " (do_resize is false)");
    uint8_t *px = NULL;
    attn_status st = resize_u8(img->pixels, img->height, img->width, C, h, w, &px);
    if (st) return st;
    /* the processor's fused constants, rounded to float32 as torch holds them */
    const float inv = (float)(1.0 / p->factor), factor = (float)p->factor;
    for (int64_t c = 0; c < channels; c++) {
        const float m = p->rescale ? (float)p->mean[c] * inv : (float)p->mean[c];
        const float s = p->rescale ? (float)p->std[c] * inv : (float)p->std[c];
        for (int64_t i = 0; i < h * w; i++) {
            const float x = (float)px[i * C + (C == 1 ? 0 : c)];
            float y = x;
            if (p->normalize) {
                y = x - m;
                y = y / s;
            } else if (p->rescale)
                y = x * factor;
            out[c * h * w + i] = y;
        }
    }
    attn__free(px);
    return ATTN_OK;
}
