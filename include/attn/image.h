/* attn image: small images in (and out) for vision models. PPM / PGM (binary P6 / P5 and ASCII P3 / P2,
 * maxval <= 255) always; PNG through libpng when the library was configured with it
 * (attn_image_png_supported). Decoded to 8-bit interleaved pixels, then resized and normalised into
 * the [1, C, H, W] floats a model takes.
 *
 * Hostile files are bounded: width and height at most ATTN_IMAGE_MAX_SIDE, width x height at most
 * ATTN_IMAGE_MAX_PIXELS, files at most ATTN_IMAGE_MAX_FILE bytes, checked before anything is
 * allocated; truncated, malformed or unsupported data is an error naming what is wrong
 * (ATTN_ERR_INVALID_ARGUMENT for malformed data, ATTN_ERR_UNSUPPORTED for a valid image this build
 * does not read, ATTN_ERR_IO for the file system), never a crash. */
#ifndef ATTN_IMAGE_H
#define ATTN_IMAGE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_IMAGE_MAX_SIDE 16384
#define ATTN_IMAGE_MAX_PIXELS ((int64_t)1 << 26)
#define ATTN_IMAGE_MAX_FILE ((size_t)1 << 28)

typedef struct attn_image {
    int64_t width, height;
    int channels;    /* 1 (gray) or 3 (RGB); PNG alpha is dropped, palettes expanded */
    uint8_t *pixels; /* [height, width, channels], row-major, owned (attn_image_free) */
} attn_image;

/* 1 when PNG files can be read (libpng found at configure time). */
ATTN_API int attn_image_png_supported(void);
/* Decode a PPM / PGM / PNG image from memory (the format is told by its first bytes). */
ATTN_API attn_status attn_image_decode(const void *data, size_t len, attn_image *out);
/* The same from a file (errors name the path). */
ATTN_API attn_status attn_image_load(const char *path, attn_image *out);
ATTN_API void attn_image_free(attn_image *img);

/* out [1, channels, height, width] = (resize(img) / 255 - mean[c]) / std[c]. The resize is
 * bilinear with half-pixel centres and edge clamping, without antialiasing: the same as
 * torch.nn.functional.interpolate(mode="bilinear", align_corners=False, antialias=False) on the
 * 8-bit values (an exact copy at the same size). channels 1 or 3: a gray image is replicated to
 * RGB; RGB becomes gray as 0.299 R + 0.587 G + 0.114 B (ITU-R 601, PIL's convert("L") without its
 * rounding). mean, std: channels floats each (std > 0), or NULL for 0 and 1. */
ATTN_API attn_status attn_image_to_tensor(const attn_image *img, int64_t height, int64_t width, int channels,
                                          const float *mean, const float *std, float *out);

/* img resized to height x width (the bilinear resize above, rounded to 8 bits), channels kept, into
 * *out (owned: attn_image_free). */
ATTN_API attn_status attn_image_resize(const attn_image *img, int64_t height, int64_t width, attn_image *out);

/* Write img to path: PNG (8-bit gray or RGB, through libpng) when path ends in ".png" (any case),
 * else binary PGM (1 channel) / PPM (3 channels). A ".png" path in a build without libpng is
 * ATTN_ERR_UNSUPPORTED (attn_image_png_supported tells beforehand); ATTN_ERR_IO names the path. */
ATTN_API attn_status attn_image_save(const char *path, const attn_image *img);

#ifdef __cplusplus
}
#endif
#endif
