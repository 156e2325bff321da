/* Images in (attn/image.h): PPM / PGM parsed here, PNG through libpng's simplified API when the
 * build has it; bilinear resize and normalisation into [1, C, H, W] floats. Every size is checked
 * against the limits before anything is allocated. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "attn/image.h"
#include "core/internal.h"
#include "io/safe_file.h"

#if ATTN_HAVE_PNG
#include <png.h>
#endif

int attn_image_png_supported(void) { return ATTN_HAVE_PNG ? 1 : 0; }

void attn_image_free(attn_image *img) {
    if (!img) return;
    attn__free(img->pixels);
    memset(img, 0, sizeof *img);
}

static attn_status check_dims(const char *fn, const char *fmt, int64_t w, int64_t h) {
    if (w < 1 || h < 1 || w > ATTN_IMAGE_MAX_SIDE || h > ATTN_IMAGE_MAX_SIDE || w * h > ATTN_IMAGE_MAX_PIXELS)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: %s image of %lld x %lld pixels is outside the limits (sides 1..%d, at most %lld pixels)",
                          fn, fmt, (long long)w, (long long)h, ATTN_IMAGE_MAX_SIDE, (long long)ATTN_IMAGE_MAX_PIXELS);
    return ATTN_OK;
}

/* ---- PPM / PGM ---- */

typedef struct pnm_reader {
    const uint8_t *p;
    size_t len, pos;
} pnm_reader;

static int pnm_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Skip whitespace and comments ('#' to the end of the line). */
static void pnm_skip(pnm_reader *r) {
    while (r->pos < r->len) {
        if (pnm_space(r->p[r->pos]))
            r->pos++;
        else if (r->p[r->pos] == '#')
            while (r->pos < r->len && r->p[r->pos] != '\n' && r->p[r->pos] != '\r') r->pos++;
        else
            break;
    }
}

/* A decimal number below 2^31; -1 when absent or too long. */
static int64_t pnm_number(pnm_reader *r) {
    pnm_skip(r);
    int64_t v = 0;
    size_t start = r->pos;
    while (r->pos < r->len && r->p[r->pos] >= '0' && r->p[r->pos] <= '9') {
        v = v * 10 + (r->p[r->pos++] - '0');
        if (v > 0x7fffffff) return -1;
    }
    return r->pos == start ? -1 : v;
}

static attn_status decode_pnm(const char *fn, const uint8_t *p, size_t len, attn_image *out) {
    const int type = p[1] - '0'; /* 2, 3 ASCII; 5, 6 binary */
    const int ch = (type == 3 || type == 6) ? 3 : 1;
    const char *fmt = ch == 3 ? "PPM" : "PGM";
    pnm_reader r = {p, len, 2};
    const int64_t w = pnm_number(&r), h = pnm_number(&r), maxval = pnm_number(&r);
    if (w < 0 || h < 0 || maxval < 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: %s header truncated or malformed (need width, height, maxval)", fn, fmt);
    attn_status st = check_dims(fn, fmt, w, h);
    if (st) return st;
    if (maxval < 1) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s maxval 0", fn, fmt);
    if (maxval > 255)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: %s maxval %lld: only 8-bit images (maxval <= 255) are read", fn,
                          fmt, (long long)maxval);
    const size_t n = (size_t)(w * h * ch);
    if (type >= 5) {
        if (r.pos >= len || !pnm_space(p[r.pos]))
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s header not followed by one whitespace byte", fn, fmt);
        r.pos++;
        if (len - r.pos < n)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s data truncated: %zu bytes for %lld x %lld x %d", fn,
                              fmt, len - r.pos, (long long)w, (long long)h, ch);
    }
    uint8_t *px = attn__malloc(n);
    if (!px) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", fn, n);
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (type >= 5) {
            v = p[r.pos + i];
        } else if ((v = pnm_number(&r)) < 0) {
            attn__free(px);
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s data truncated or malformed at sample %zu of %zu", fn,
                              fmt, i, n);
        }
        if (v > maxval) {
            attn__free(px);
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s sample %zu is %lld, above maxval %lld", fn, fmt, i,
                              (long long)v, (long long)maxval);
        }
        px[i] = (uint8_t)(maxval == 255 ? v : (v * 255 + maxval / 2) / maxval);
    }
    out->width = w;
    out->height = h;
    out->channels = ch;
    out->pixels = px;
    return ATTN_OK;
}

/* ---- PNG ---- */

#if ATTN_HAVE_PNG
/* A palette image's indices, read as they are (libpng's colormap format keeps the file's palette
 * and passes every index through), all below the palette's size: libpng itself maps an index past
 * the palette to black without a word. im has been begun and is finished (or freed) here. */
static attn_status check_palette(const char *fn, png_image *im) {
    const uint32_t entries = im->colormap_entries;
    const size_t n = (size_t)im->width * im->height;
    uint8_t *idx = attn__malloc(n), *cmap = attn__malloc(256 * 4); /* the largest colormap */
    if (!idx || !cmap) {
        attn__free(idx), attn__free(cmap);
        png_image_free(im);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", fn, n);
    }
    im->format = PNG_FORMAT_RGB_COLORMAP;
    attn_status st = ATTN_OK;
    if (!png_image_finish_read(im, NULL, idx, 0, cmap)) {
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: PNG: %s", fn, im->message);
        png_image_free(im);
    }
    for (size_t i = 0; !st && i < n; i++)
        if (idx[i] >= entries)
            st = attn_error(ATTN_ERR_INVALID_ARGUMENT,
                            "%s: PNG palette index %d at pixel (row %zu, column %zu) is past the palette's %u "
                            "entries",
                            fn, idx[i], i / im->width, i % im->width, (unsigned)entries);
    attn__free(idx), attn__free(cmap);
    return st;
}

static attn_status png_begin(const char *fn, const uint8_t *p, size_t len, png_image *im) {
    memset(im, 0, sizeof *im);
    im->version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(im, p, len))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: PNG: %s", fn, im->message);
    /* 16-bit samples without gAMA / sRGB are sRGB-encoded as 8-bit ones are (what every other
     * reader assumes), not the linear light libpng's simplified API takes by default: 0x8080 is
     * read as 128, the 8-bit twin's value, rather than 186 */
    im->flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
    attn_status st = check_dims(fn, "PNG", (int64_t)im->width, (int64_t)im->height);
    if (st) png_image_free(im);
    return st;
}
#endif

static attn_status decode_png(const char *fn, const uint8_t *p, size_t len, attn_image *out) {
#if ATTN_HAVE_PNG
    png_image im;
    attn_status st = png_begin(fn, p, len, &im);
    if (st) return st;
    if (im.format & PNG_FORMAT_FLAG_COLORMAP) { /* a palette file: check its indices, then read it afresh */
        if ((st = check_palette(fn, &im)) || (st = png_begin(fn, p, len, &im))) return st;
    }
    const int ch = (im.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
    im.format = ch == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    const size_t n = (size_t)im.width * im.height * (size_t)ch;
    uint8_t *px = attn__calloc(n, 1); /* transparent pixels are composited onto this black */
    if (!px) {
        png_image_free(&im);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", fn, n);
    }
    if (!png_image_finish_read(&im, NULL, px, 0, NULL)) {
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: PNG: %s", fn, im.message);
        png_image_free(&im);
        attn__free(px);
        return st;
    }
    out->width = (int64_t)im.width;
    out->height = (int64_t)im.height;
    out->channels = ch;
    out->pixels = px;
    return ATTN_OK;
#else
    (void)p;
    (void)len;
    (void)out;
    return attn_error(ATTN_ERR_UNSUPPORTED, "%s: PNG image, but this build has no libpng (PPM / PGM only)", fn);
#endif
}

static attn_status decode(const char *fn, const void *data, size_t len, attn_image *out) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const uint8_t *p = data;
    if (len > ATTN_IMAGE_MAX_FILE)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %zu bytes is above the image file limit %zu", fn, len,
                          ATTN_IMAGE_MAX_FILE);
    if (len >= 8 && !memcmp(p, png_sig, 8)) return decode_png(fn, p, len, out);
    if (len >= 2 && p[0] == 'P' && (p[1] == '2' || p[1] == '3' || p[1] == '5' || p[1] == '6'))
        return decode_pnm(fn, p, len, out);
    return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: not a PPM (P3 / P6), PGM (P2 / P5) or PNG image (%zu bytes)", fn,
                      len);
}

attn_status attn_image_decode(const void *data, size_t len, attn_image *out) {
    static const char fn[] = "attn_image_decode";
    ATTN_CHECK_NOT_NULL(fn, out);
    memset(out, 0, sizeof *out);
    if (!data && len) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: data is NULL", fn);
    return decode(fn, data ? data : "", len, out);
}

attn_status attn_image_load(const char *path, attn_image *out) {
    static const char fn[] = "attn_image_load";
    ATTN_CHECK_NOT_NULL(fn, out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(fn, path);
    /* regular files only, opened without blocking (a FIFO must not hang): io/safe_file.h */
    int fd = -1;
    uint64_t fsz = 0;
    if (attn_io_open_input(path, "image", 0, &fd, &fsz)) {
        char why[400];
        snprintf(why, sizeof why, "%s", attn_last_error());
        return attn_error(ATTN_ERR_IO, "%s: %s", fn, why);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        const int e = errno;
        close(fd);
        return attn_error(ATTN_ERR_IO, "%s: %s: %s", fn, path, strerror(e));
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = attn__malloc(cap);
    attn_status st = ATTN_OK;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap > ATTN_IMAGE_MAX_FILE) {
            st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s: larger than the image file limit %zu bytes", fn, path,
                            ATTN_IMAGE_MAX_FILE);
            break;
        }
        uint8_t *nb = attn__realloc(buf, cap * 2);
        if (!nb) break;
        buf = nb;
        cap *= 2;
    }
    if (!st && buf && ferror(f)) st = attn_error(ATTN_ERR_IO, "%s: %s: read error", fn, path);
    fclose(f);
    if (!buf || (!st && n == cap)) {
        attn__free(buf);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: %s: out of memory", fn, path);
    }
    if (!st) {
        char where[300];
        snprintf(where, sizeof where, "%s: %s", fn, path);
        st = decode(where, buf, n, out);
    }
    attn__free(buf);
    return st;
}

/* ---- resize and normalise ---- */

/* Source taps of PyTorch's bilinear interpolation (align_corners=False): src = (o + 0.5) s - 0.5
 * clamped at 0, i0 = floor, i1 = min(i0 + 1, in - 1), weights 1 - t, t. */
static void linear_taps(int64_t in, int64_t out, int64_t *i0, int64_t *i1, float *t) {
    const double s = (double)in / (double)out;
    for (int64_t o = 0; o < out; o++) {
        double x = ((double)o + 0.5) * s - 0.5;
        if (x < 0) x = 0;
        int64_t a = (int64_t)x;
        if (a > in - 1) a = in - 1;
        i0[o] = a;
        i1[o] = a + 1 < in ? a + 1 : in - 1;
        t[o] = (float)(x - (double)a);
    }
}

attn_status attn_image_to_tensor(const attn_image *img, int64_t height, int64_t width, int channels, const float *mean,
                                 const float *std, float *out) {
    static const char fn[] = "attn_image_to_tensor";
    ATTN_CHECK_NOT_NULL(fn, img);
    ATTN_CHECK_NOT_NULL(fn, out);
    if (!img->pixels || (img->channels != 1 && img->channels != 3) || check_dims(fn, "source", img->width, img->height))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: not a decoded image (%lld x %lld, %d channels)", fn,
                          (long long)img->width, (long long)img->height, img->channels);
    if (channels != 1 && channels != 3)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: channels = %d must be 1 or 3", fn, channels);
    if (check_dims(fn, "output", width, height))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: output size %lld x %lld outside 1..%d per side", fn,
                          (long long)height, (long long)width, ATTN_IMAGE_MAX_SIDE);
    for (int c = 0; std && c < channels; c++)
        if (!(std[c] > 0) || !isfinite(std[c]))
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: std[%d] = %g must be > 0", fn, c, (double)std[c]);
    const int64_t H = img->height, W = img->width, ci = img->channels;
    int64_t *y0 = attn__malloc(sizeof(int64_t) * (size_t)height), *y1 = attn__malloc(sizeof(int64_t) * (size_t)height);
    int64_t *x0 = attn__malloc(sizeof(int64_t) * (size_t)width), *x1 = attn__malloc(sizeof(int64_t) * (size_t)width);
    float *ty = attn__malloc(sizeof(float) * (size_t)height), *tx = attn__malloc(sizeof(float) * (size_t)width);
    if (!y0 || !y1 || !x0 || !x1 || !ty || !tx) {
        attn__free(y0), attn__free(y1), attn__free(x0), attn__free(x1), attn__free(ty), attn__free(tx);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    linear_taps(H, height, y0, y1, ty);
    linear_taps(W, width, x0, x1, tx);
    for (int c = 0; c < channels; c++) {
        const float m = mean ? mean[c] : 0.0f, s = std ? std[c] : 1.0f;
        for (int64_t y = 0; y < height; y++)
            for (int64_t x = 0; x < width; x++) {
                const int64_t idx[4] = {(y0[y] * W + x0[x]) * ci, (y0[y] * W + x1[x]) * ci, (y1[y] * W + x0[x]) * ci,
                                        (y1[y] * W + x1[x]) * ci};
                float v[4];
                for (int k = 0; k < 4; k++) {
                    const uint8_t *p = img->pixels + idx[k];
                    if (ci == channels)
                        v[k] = p[c];
                    else if (ci == 1)
                        v[k] = p[0];
                    else
                        v[k] = 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];
                }
                const float top = v[0] + (v[1] - v[0]) * tx[x], bot = v[2] + (v[3] - v[2]) * tx[x];
                const float val = top + (bot - top) * ty[y];
                out[(c * height + y) * width + x] = (val / 255.0f - m) / s;
            }
    }
    attn__free(y0), attn__free(y1), attn__free(x0), attn__free(x1), attn__free(ty), attn__free(tx);
    return ATTN_OK;
}

attn_status attn_image_resize(const attn_image *img, int64_t height, int64_t width, attn_image *out) {
    static const char fn[] = "attn_image_resize";
    ATTN_CHECK_NOT_NULL(fn, out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(fn, img);
    if (!img->pixels || (img->channels != 1 && img->channels != 3) || check_dims(fn, "source", img->width, img->height))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: not a decoded image (%lld x %lld, %d channels)", fn,
                          (long long)img->width, (long long)img->height, img->channels);
    if (check_dims(fn, "output", width, height))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: output size %lld x %lld outside the limits", fn,
                          (long long)height, (long long)width);
    const int64_t H = img->height, W = img->width, ch = img->channels;
    int64_t *y0 = attn__malloc(sizeof(int64_t) * (size_t)height), *y1 = attn__malloc(sizeof(int64_t) * (size_t)height);
    int64_t *x0 = attn__malloc(sizeof(int64_t) * (size_t)width), *x1 = attn__malloc(sizeof(int64_t) * (size_t)width);
    float *ty = attn__malloc(sizeof(float) * (size_t)height), *tx = attn__malloc(sizeof(float) * (size_t)width);
    uint8_t *px = attn__malloc((size_t)(height * width * ch));
    if (!y0 || !y1 || !x0 || !x1 || !ty || !tx || !px) {
        attn__free(y0), attn__free(y1), attn__free(x0), attn__free(x1), attn__free(ty), attn__free(tx), attn__free(px);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    linear_taps(H, height, y0, y1, ty);
    linear_taps(W, width, x0, x1, tx);
    for (int64_t y = 0; y < height; y++)
        for (int64_t x = 0; x < width; x++)
            for (int64_t c = 0; c < ch; c++) {
                const uint8_t *p = img->pixels;
                const float a = p[(y0[y] * W + x0[x]) * ch + c], b = p[(y0[y] * W + x1[x]) * ch + c];
                const float d = p[(y1[y] * W + x0[x]) * ch + c], e = p[(y1[y] * W + x1[x]) * ch + c];
                const float top = a + (b - a) * tx[x], bot = d + (e - d) * tx[x];
                const float v = top + (bot - top) * ty[y];
                px[(y * width + x) * ch + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5f);
            }
    attn__free(y0), attn__free(y1), attn__free(x0), attn__free(x1), attn__free(ty), attn__free(tx);
    out->width = width;
    out->height = height;
    out->channels = (int)ch;
    out->pixels = px;
    return ATTN_OK;
}

static int ends_with_png(const char *path) {
    const size_t n = strlen(path);
    if (n < 4) return 0;
    const char *e = path + n - 4;
    return e[0] == '.' && (e[1] == 'p' || e[1] == 'P') && (e[2] == 'n' || e[2] == 'N') && (e[3] == 'g' || e[3] == 'G');
}

attn_status attn_image_save(const char *path, const attn_image *img) {
    static const char fn[] = "attn_image_save";
    ATTN_CHECK_NOT_NULL(fn, path);
    ATTN_CHECK_NOT_NULL(fn, img);
    if (!img->pixels || (img->channels != 1 && img->channels != 3) || check_dims(fn, "source", img->width, img->height))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: not a decoded image (%lld x %lld, %d channels)", fn,
                          (long long)img->width, (long long)img->height, img->channels);
    if (ends_with_png(path)) {
#if ATTN_HAVE_PNG
        png_image im;
        memset(&im, 0, sizeof im);
        im.version = PNG_IMAGE_VERSION;
        im.width = (png_uint_32)img->width;
        im.height = (png_uint_32)img->height;
        im.format = img->channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
        errno = 0;
        if (!png_image_write_to_file(&im, path, 0, img->pixels, 0, NULL)) {
            attn_status st = attn_error(ATTN_ERR_IO, "%s: %s: PNG: %s%s%s", fn, path, im.message, errno ? ": " : "",
                                        errno ? strerror(errno) : "");
            png_image_free(&im);
            return st;
        }
        return ATTN_OK;
#else
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: %s: PNG output, but this build has no libpng (write .ppm / .pgm)",
                          fn, path);
#endif
    }
    FILE *f = fopen(path, "wb");
    if (!f) return attn_error(ATTN_ERR_IO, "%s: %s: %s", fn, path, strerror(errno));
    const size_t n = (size_t)(img->width * img->height * img->channels);
    int bad = fprintf(f, "P%d\n%lld %lld\n255\n", img->channels == 3 ? 6 : 5, (long long)img->width,
                      (long long)img->height) < 0;
    bad |= !bad && fwrite(img->pixels, 1, n, f) != n;
    bad |= fclose(f) != 0;
    if (bad) return attn_error(ATTN_ERR_IO, "%s: %s: write failed", fn, path);
    return ATTN_OK;
}
