/* Images in (attn/image.h): PPM / PGM binary and ASCII, PNG (RGB, RGBA, gray; built here with
 * stored deflate blocks) when libpng is in the build, bilinear resize against PyTorch's formula,
 * normalisation, channel conversion; hostile input: every truncation of valid files, flipped
 * bytes, huge declared sizes, garbage, missing files: errors, never crashes. */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

#include "attn/image.h"
#include "attn/viz.h"
#include "test_util.h"

/* ---- a minimal PNG writer: stored (uncompressed) deflate, CRC-32, Adler-32 ---- */

static uint32_t crc32_of(const uint8_t *p, size_t n, uint32_t c) {
    c = ~c;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static size_t chunk(uint8_t *out, const char *type, const uint8_t *data, uint32_t n) {
    put32(out, n);
    memcpy(out + 4, type, 4);
    if (n) memcpy(out + 8, data, n);
    put32(out + 8 + n, crc32_of(out + 4, 4 + (size_t)n, 0));
    return 12 + (size_t)n;
}

/* color_type 0 gray, 2 RGB, 3 palette (plte: its entries, 3 bytes each), 6 RGBA; depth 8 or 16
 * (big-endian samples); pixels [h, w, ch] as stored. Returns the length in out. */
static size_t make_png_ex(uint8_t *out, int w, int h, int depth, int color_type, const uint8_t *pixels,
                          const uint8_t *plte, uint32_t plte_n) {
    const int ch = (color_type == 0 || color_type == 3 ? 1 : color_type == 2 ? 3 : 4) * depth / 8;
    const size_t raw_n = (size_t)h * (size_t)(1 + w * ch);
    uint8_t raw[4096], z[4200], ihdr[13];
    for (int y = 0; y < h; y++) {
        raw[(size_t)y * (size_t)(1 + w * ch)] = 0; /* filter: none */
        memcpy(raw + (size_t)y * (size_t)(1 + w * ch) + 1, pixels + (size_t)y * (size_t)(w * ch), (size_t)(w * ch));
    }
    size_t zn = 0;
    z[zn++] = 0x78, z[zn++] = 0x01;
    z[zn++] = 0x01; /* final stored block */
    z[zn++] = (uint8_t)raw_n, z[zn++] = (uint8_t)(raw_n >> 8);
    z[zn++] = (uint8_t)~raw_n, z[zn++] = (uint8_t)(~raw_n >> 8);
    memcpy(z + zn, raw, raw_n);
    zn += raw_n;
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < raw_n; i++) a = (a + raw[i]) % 65521, b = (b + a) % 65521;
    put32(z + zn, (b << 16) | a);
    zn += 4;
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t n = 0;
    memcpy(out, sig, 8);
    n = 8;
    put32(ihdr, (uint32_t)w);
    put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = (uint8_t)depth, ihdr[9] = (uint8_t)color_type, ihdr[10] = ihdr[11] = ihdr[12] = 0;
    n += chunk(out + n, "IHDR", ihdr, 13);
    if (plte) n += chunk(out + n, "PLTE", plte, plte_n * 3);
    n += chunk(out + n, "IDAT", z, (uint32_t)zn);
    n += chunk(out + n, "IEND", NULL, 0);
    return n;
}

static size_t make_png(uint8_t *out, int w, int h, int color_type, const uint8_t *pixels) {
    return make_png_ex(out, w, h, 8, color_type, pixels, NULL, 0);
}

/* 16-bit files without gAMA / sRGB read as their 8-bit twins (x / 257 rounded: 0x8080 is 128, not
 * the 186 of libpng's linear-light default), gray and RGB; a palette index past the palette is an
 * error naming the file, not a black pixel. */
static void test_png_16bit_palette(void) {
    uint8_t file[1024];
    attn_image im;
    const uint8_t g16[4 * 2] = {0x80, 0x80, 0x00, 0x00, 0xff, 0xff, 0x12, 0x34};
    size_t n = make_png_ex(file, 2, 2, 16, 0, g16, NULL, 0);
    CHECK_OK(attn_image_decode(file, n, &im));
    for (int i = 0; i < 4 && im.pixels; i++) {
        const int v = g16[2 * i] << 8 | g16[2 * i + 1], want = (v + 128) / 257;
        CHECK(im.channels == 1 && im.pixels[i] == want, "16-bit gray 0x%04x read as %d, want %d", v, im.pixels[i],
              want);
    }
    attn_image_free(&im);
    const uint8_t rgb16[6 * 2] = {0x80, 0x80, 0x40, 0x40, 0xc0, 0xc0, 0x00, 0x00, 0xff, 0xff, 0x7f, 0xff};
    n = make_png_ex(file, 2, 1, 16, 2, rgb16, NULL, 0);
    CHECK_OK(attn_image_decode(file, n, &im));
    for (int i = 0; i < 6 && im.pixels; i++) {
        const int v = rgb16[2 * i] << 8 | rgb16[2 * i + 1], want = (v + 128) / 257;
        CHECK(im.channels == 3 && im.pixels[i] == want, "16-bit RGB sample %d 0x%04x read as %d, want %d", i, v,
              im.pixels[i], want);
    }
    attn_image_free(&im);
    const uint8_t plte[2 * 3] = {10, 20, 30, 40, 50, 60};
    const uint8_t ok_idx[2] = {1, 0}, bad_idx[2] = {0, 5};
    n = make_png_ex(file, 2, 1, 8, 3, ok_idx, plte, 2);
    CHECK_OK(attn_image_decode(file, n, &im));
    CHECK(im.channels == 3 && im.pixels && !memcmp(im.pixels, plte + 3, 3) && !memcmp(im.pixels + 3, plte, 3),
          "palette PNG");
    attn_image_free(&im);
    n = make_png_ex(file, 2, 1, 8, 3, bad_idx, plte, 2);
    CHECK_STATUS(attn_image_decode(file, n, &im), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_image_decode") && strstr(attn_last_error(), "palette index 5"),
          "palette error names the call and the index: %s", attn_last_error());
    CHECK(!im.pixels, "no pixels after a failed decode");
    char path[64];
    snprintf(path, sizeof path, "test_image_pal_%d.png", (int)getpid());
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "write %s", path);
    if (f) {
        fwrite(file, 1, n, f);
        fclose(f);
        CHECK_STATUS(attn_image_load(path, &im), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(strstr(attn_last_error(), path) != NULL, "palette error names the file: %s", attn_last_error());
        printf("  rejected: %s\n", attn_last_error());
        remove(path);
    }
}

/* Every strict prefix of a valid file fails cleanly; so may flipped bytes (any status, no crash). */
static void hostile(const char *what, const uint8_t *file, size_t len) {
    int fails = 0;
    for (size_t n = 0; n < len; n++) {
        attn_image im;
        attn_status st = attn_image_decode(file, n, &im);
        if (st != ATTN_OK) fails++;
        CHECK(st != ATTN_OK || im.pixels, "%s: prefix %zu", what, n);
        attn_image_free(&im);
    }
    printf("%s: %d of %zu truncations rejected\n", what, fails, len);
    uint8_t *copy = xmalloc(len);
    test_rng r = rng_seeded(99);
    for (int it = 0; it < 300; it++) {
        memcpy(copy, file, len);
        for (int k = 0; k < 3; k++) copy[rng_next(&r) % len] ^= (uint8_t)(1u + rng_next(&r) % 255u);
        attn_image im;
        (void)attn_image_decode(copy, len, &im);
        attn_image_free(&im);
    }
    free(copy);
}

static void test_pnm(void) {
    attn_image im;
    const uint8_t p6[] = "P6\n# a comment\n2 1\n255\n\x01\x02\x03\xfa\xfb\xfc";
    CHECK_OK(attn_image_decode(p6, sizeof p6 - 1, &im));
    CHECK(im.width == 2 && im.height == 1 && im.channels == 3 && im.pixels && im.pixels[0] == 1 && im.pixels[5] == 0xfc,
          "P6 decoded");
    attn_image_free(&im);
    CHECK(im.pixels == NULL, "free clears");
    const char p3[] = "P3 2 2 15 # maxval 15\n0 0 0  15 15 15\n 1 2 3 4 5 6\n";
    CHECK_OK(attn_image_decode(p3, strlen(p3), &im));
    CHECK(im.channels == 3 && im.pixels && im.pixels[3] == 255 && im.pixels[6] == 17 && im.pixels[11] == 102,
          "P3 scaled from maxval 15");
    attn_image_free(&im);
    const char p2[] = "P2 3 1 255 0 128 255";
    CHECK_OK(attn_image_decode(p2, strlen(p2), &im));
    CHECK(im.channels == 1 && im.width == 3 && im.pixels && im.pixels[1] == 128, "P2");
    attn_image_free(&im);
    const uint8_t p5[] = "P5 2 2 255\n\x00\x40\x80\xff";
    CHECK_OK(attn_image_decode(p5, sizeof p5 - 1, &im));
    CHECK(im.channels == 1 && im.pixels && im.pixels[3] == 255, "P5");
    attn_image_free(&im);
    hostile("P6", p6, sizeof p6 - 1);
    hostile("P3", (const uint8_t *)p3, strlen(p3));
    /* errors */
    const char *bad[] = {"P6 2 2 255\n\x01\x02",
                         "P6 100000 100000 255\n",
                         "P6 16384 16384 255\n",
                         "P6 2 2 65535\n",
                         "P3 1 1 255 256",
                         "P6 0 5 255\n",
                         "P6 -1 5 255\n",
                         "hello world",
                         "",
                         "P6 99999999999999999999 1 255",
                         "P3 2 1 255 1 2 3 4 5",
                         "P6 1 1 0\n\x00\x00\x00"};
    const attn_status want[] = {ATTN_ERR_INVALID_ARGUMENT, ATTN_ERR_INVALID_ARGUMENT, ATTN_ERR_INVALID_ARGUMENT,
                                ATTN_ERR_UNSUPPORTED,      ATTN_ERR_INVALID_ARGUMENT, ATTN_ERR_INVALID_ARGUMENT,
                                ATTN_ERR_INVALID_ARGUMENT, ATTN_ERR_INVALID_ARGUMENT, ATTN_ERR_INVALID_ARGUMENT,
                                ATTN_ERR_INVALID_ARGUMENT, ATTN_ERR_INVALID_ARGUMENT, ATTN_ERR_INVALID_ARGUMENT};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(attn_image_decode(bad[i], strlen(bad[i]), &im), want[i]);
        CHECK(im.pixels == NULL, "no pixels after an error");
        printf("  rejected: %s\n", attn_last_error());
    }
    CHECK_STATUS(attn_image_decode("P6 2 2 255\n\x01\x02", 12, &im), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "truncated") != NULL, "truncation named: %s", attn_last_error());
    CHECK_STATUS(attn_image_decode("P6 100000 100000 255\n", 21, &im), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "100000 x 100000") != NULL, "dimensions named: %s", attn_last_error());
    CHECK_STATUS(attn_image_decode(NULL, 5, &im), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_image_decode(p6, 5, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_png(void) {
    uint8_t file[8192];
    const uint8_t rgb[2 * 3 * 3] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180};
    size_t n = make_png(file, 3, 2, 2, rgb);
    attn_image im;
    if (!attn_image_png_supported()) {
        CHECK_STATUS(attn_image_decode(file, n, &im), ATTN_ERR_UNSUPPORTED);
        printf("PNG: not in this build (%s)\n", attn_last_error());
        return;
    }
    CHECK_OK(attn_image_decode(file, n, &im));
    CHECK(im.width == 3 && im.height == 2 && im.channels == 3 && im.pixels && !memcmp(im.pixels, rgb, sizeof rgb),
          "PNG RGB round trip");
    attn_image_free(&im);
    const uint8_t rgba[2 * 4] = {200, 100, 50, 255, 200, 100, 50, 0};
    n = make_png(file, 2, 1, 6, rgba);
    CHECK_OK(attn_image_decode(file, n, &im));
    CHECK(im.channels == 3 && im.pixels && im.pixels[0] == 200 && im.pixels[2] == 50 && im.pixels[3] == 0 &&
              im.pixels[5] == 0,
          "PNG RGBA: alpha dropped, transparent onto black");
    attn_image_free(&im);
    const uint8_t gray[4] = {0, 85, 170, 255};
    n = make_png(file, 2, 2, 0, gray);
    CHECK_OK(attn_image_decode(file, n, &im));
    CHECK(im.channels == 1 && im.pixels && !memcmp(im.pixels, gray, 4), "PNG gray");
    attn_image_free(&im);
    hostile("PNG", file, n);
    /* a declared 100000 x 100000 image: refused from the header, nothing allocated */
    uint8_t big[1024];
    n = make_png(big, 2, 2, 0, gray);
    put32(big + 16, 100000);
    put32(big + 20, 100000);
    put32(big + 29, crc32_of(big + 12, 17, 0));
    CHECK_STATUS(attn_image_decode(big, n, &im), ATTN_ERR_INVALID_ARGUMENT);
    printf("  rejected: %s\n", attn_last_error());
    /* from a file */
    char path[64];
    snprintf(path, sizeof path, "test_image_%d.png", (int)getpid());
    n = make_png(file, 3, 2, 2, rgb);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "write %s", path);
    if (f) {
        fwrite(file, 1, n, f);
        fclose(f);
        CHECK_OK(attn_image_load(path, &im));
        CHECK(im.pixels && !memcmp(im.pixels, rgb, sizeof rgb), "PNG from a file");
        attn_image_free(&im);
        remove(path);
    }
}

/* PyTorch's bilinear (align_corners=False) in double, for one channel. */
static double bilinear_ref(const double *src, int64_t H, int64_t W, int64_t oh, int64_t ow, int64_t y, int64_t x) {
    double sy = ((double)y + 0.5) * (double)H / (double)oh - 0.5, sx = ((double)x + 0.5) * (double)W / (double)ow - 0.5;
    if (sy < 0) sy = 0;
    if (sx < 0) sx = 0;
    int64_t y0 = (int64_t)sy, x0 = (int64_t)sx;
    int64_t y1 = y0 + 1 < H ? y0 + 1 : H - 1, x1 = x0 + 1 < W ? x0 + 1 : W - 1;
    const double ly = sy - (double)y0, lx = sx - (double)x0;
    return (1 - ly) * ((1 - lx) * src[y0 * W + x0] + lx * src[y0 * W + x1]) +
           ly * ((1 - lx) * src[y1 * W + x0] + lx * src[y1 * W + x1]);
}

static void test_tensor(void) {
    attn_image im;
    memset(&im, 0, sizeof im);
    im.width = 5, im.height = 3, im.channels = 3;
    uint8_t px[45];
    test_rng r = rng_seeded(5);
    for (int i = 0; i < 45; i++) px[i] = (uint8_t)(rng_next(&r) & 255);
    im.pixels = px;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    /* same size: exact normalisation */
    float same[45];
    CHECK_OK(attn_image_to_tensor(&im, 3, 5, 3, mean, sd, same));
    double worst = 0;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 15; i++) {
            const double want = ((double)px[i * 3 + c] / 255.0 - mean[c]) / sd[c];
            worst = fmax(worst, fabs(same[c * 15 + i] - want));
        }
    CHECK(worst < 1e-5, "same-size normalisation error %.3g", worst);
    /* resizes up, down and mixed against PyTorch's formula */
    const int64_t sizes[3][2] = {{7, 11}, {2, 3}, {4, 2}};
    for (int s = 0; s < 3; s++) {
        const int64_t oh = sizes[s][0], ow = sizes[s][1];
        float *o = xmalloc(sizeof(float) * (size_t)(3 * oh * ow));
        CHECK_OK(attn_image_to_tensor(&im, oh, ow, 3, NULL, NULL, o));
        double e = 0, src[15];
        for (int c = 0; c < 3; c++) {
            for (int i = 0; i < 15; i++) src[i] = px[i * 3 + c];
            for (int64_t y = 0; y < oh; y++)
                for (int64_t x = 0; x < ow; x++)
                    e = fmax(e, fabs(o[(c * oh + y) * ow + x] - bilinear_ref(src, 3, 5, oh, ow, y, x) / 255.0));
        }
        CHECK(e < 1e-6, "bilinear 3x5 -> %lldx%lld: max error %.3g", (long long)oh, (long long)ow, e);
        printf("bilinear 3x5 -> %lldx%lld vs PyTorch's formula: max abs error %.3g\n", (long long)oh, (long long)ow, e);
        free(o);
    }
    /* channel conversions */
    float g[15], rgb[45];
    CHECK_OK(attn_image_to_tensor(&im, 3, 5, 1, NULL, NULL, g));
    CHECK(fabs(g[0] - (0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2]) / 255.0) < 1e-5, "RGB to gray");
    attn_image gray = {5, 3, 1, px};
    CHECK_OK(attn_image_to_tensor(&gray, 3, 5, 3, NULL, NULL, rgb));
    CHECK(rgb[0] == rgb[15] && rgb[15] == rgb[30] && fabs(rgb[0] - px[0] / 255.0) < 1e-7, "gray to RGB");
    /* errors */
    const float zero[3] = {1, 0, 1};
    CHECK_STATUS(attn_image_to_tensor(&im, 3, 5, 3, mean, zero, same), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "std[1]") != NULL, "std named: %s", attn_last_error());
    CHECK_STATUS(attn_image_to_tensor(&im, 3, 5, 2, NULL, NULL, same), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_image_to_tensor(&im, 0, 5, 3, NULL, NULL, same), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_image_to_tensor(&im, 3, 100000, 3, NULL, NULL, same), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_image_to_tensor(NULL, 3, 5, 3, NULL, NULL, same), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_image_to_tensor(&im, 3, 5, 3, NULL, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_image empty;
    memset(&empty, 0, sizeof empty);
    CHECK_STATUS(attn_image_to_tensor(&empty, 3, 5, 3, NULL, NULL, same), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_image_load("/nonexistent/x.ppm", &im), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "/nonexistent/x.ppm") != NULL, "path named: %s", attn_last_error());
    CHECK_STATUS(attn_image_load(NULL, &im), ATTN_ERR_INVALID_ARGUMENT);
    attn_image_free(NULL);
}

/* attn_image_resize, attn_image_save (PPM / PGM, PNG when supported) read back, attn_viz_overlay. */
static void test_out(void) {
    const uint8_t rgb[2 * 3 * 3] = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 250, 251, 252};
    attn_image src = {3, 2, 3, (uint8_t *)rgb}, im, back;
    CHECK_OK(attn_image_resize(&src, 2, 3, &im));
    CHECK(im.pixels && im.channels == 3 && !memcmp(im.pixels, rgb, sizeof rgb), "resize to the same size copies");
    attn_image_free(&im);
    CHECK_OK(attn_image_resize(&src, 4, 6, &im));
    CHECK(im.width == 6 && im.height == 4 && im.pixels && im.pixels[0] == 0 && im.pixels[(4 * 6 - 1) * 3 + 2] == 252,
          "upscale keeps the corners");
    attn_image_free(&im);
    const char *exts[3] = {".ppm", ".pgm", ".png"};
    for (int k = 0; k < 3; k++) {
        char path[64];
        snprintf(path, sizeof path, "test_image_out_%d%s", (int)getpid(), exts[k]);
        attn_image gray = {3, 2, 1, (uint8_t *)rgb};
        const attn_image *w = k == 1 ? &gray : &src;
        const attn_status st = attn_image_save(path, w);
        if (k == 2 && !attn_image_png_supported()) {
            CHECK_STATUS(st, ATTN_ERR_UNSUPPORTED);
            continue;
        }
        CHECK_OK(st);
        CHECK_OK(attn_image_load(path, &back));
        CHECK(back.width == 3 && back.height == 2 && back.channels == w->channels && back.pixels &&
                  !memcmp(back.pixels, rgb, (size_t)(6 * w->channels)),
              "%s written and read back", exts[k]);
        attn_image_free(&back);
        remove(path);
    }
    CHECK_STATUS(attn_image_save("/nonexistent/dir/x.ppm", &src), ATTN_ERR_IO);
    /* overlay: a 1 x 2 map [0, 1] on a black 4 x 2 image, alpha 1, nearest: the colour map's ends */
    const uint8_t black[8] = {0};
    attn_image dark = {4, 2, 1, (uint8_t *)black};
    const float map[2] = {0.25f, 0.75f};
    CHECK_OK(attn_viz_overlay(&dark, map, 1, 2, 2, 4, 1.0, 1, &im));
    uint8_t lo[3], hi[3];
    attn_viz_colormap(0, lo);
    attn_viz_colormap(1, hi);
    CHECK(im.channels == 3 && im.width == 4 && im.height == 2 && im.pixels && !memcmp(im.pixels, lo, 3) &&
              !memcmp(im.pixels + 3, lo, 3) && !memcmp(im.pixels + 6, hi, 3) && !memcmp(im.pixels + 21, hi, 3),
          "nearest overlay: min and max colours");
    attn_image_free(&im);
    /* alpha 0: the image (gray to RGB); bilinear: between the ends */
    CHECK_OK(attn_viz_overlay(&src, map, 1, 2, 2, 3, 0.0, 0, &im));
    CHECK(im.pixels && !memcmp(im.pixels, rgb, sizeof rgb), "alpha 0 is the image");
    attn_image_free(&im);
    CHECK_OK(attn_viz_overlay(&dark, map, 1, 2, 1, 8, 1.0, 0, &im));
    CHECK(im.pixels && !memcmp(im.pixels, lo, 3) && !memcmp(im.pixels + 21, hi, 3) && im.pixels[9] > lo[0] &&
              im.pixels[9] < hi[0],
          "bilinear overlay: ends and a blend between");
    attn_image_free(&im);
    const float bad[2] = {0, NAN};
    CHECK_STATUS(attn_viz_overlay(&dark, bad, 1, 2, 2, 4, 0.5, 0, &im), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_viz_overlay(&dark, map, 1, 2, 2, 4, 1.5, 0, &im), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_viz_overlay(&dark, map, 0, 2, 2, 4, 0.5, 0, &im), ATTN_ERR_SHAPE);
    CHECK(im.pixels == NULL, "no pixels after an error");
}

int main(void) {
    test_pnm();
    test_png();
    if (attn_image_png_supported()) test_png_16bit_palette();
    test_tensor();
    test_out();
    return test_summary("test_image");
}
