/* libFuzzer harness: the image reader (src/io/image.c: PPM / PGM, ASCII and binary, and PNG when
 * libpng was found). A decoded image must respect the documented limits and own exactly
 * width x height x channels bytes (ASan checks the reads); it is then resized and normalised to a
 * small tensor, which must be finite. A rejection must set a message and leave the image empty. */
#include <math.h>
#include <string.h>

#include "attn/image.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_image img;
    attn_clear_error();
    attn_status s = attn_image_decode(data, size, &img);
    if (s != ATTN_OK) {
        REQUIRE(attn_last_error()[0] != '\0');
        REQUIRE(img.pixels == NULL);
        return 0;
    }
    REQUIRE(img.width >= 1 && img.height >= 1 && img.width <= ATTN_IMAGE_MAX_SIDE && img.height <= ATTN_IMAGE_MAX_SIDE);
    REQUIRE(img.width * img.height <= ATTN_IMAGE_MAX_PIXELS);
    REQUIRE(img.channels == 1 || img.channels == 3);
    REQUIRE(img.pixels != NULL);
    const size_t n = (size_t)(img.width * img.height * img.channels);
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++) sum += img.pixels[i]; /* every byte readable and initialised */
    (void)sum;
    attn_image small;
    REQUIRE(attn_image_resize(&img, 3, 5, &small) == ATTN_OK);
    REQUIRE(small.width == 5 && small.height == 3 && small.channels == img.channels);
    const float mean[3] = {0.5f, 0.5f, 0.5f}, sd[3] = {0.25f, 0.25f, 0.25f};
    float t[3 * 4 * 4];
    REQUIRE(attn_image_to_tensor(&img, 4, 4, 3, mean, sd, t) == ATTN_OK);
    for (int i = 0; i < 3 * 4 * 4; i++) REQUIRE(isfinite(t[i]) && t[i] >= -2.0f && t[i] <= 2.0f);
    attn_image_free(&small);
    attn_image_free(&img);
    return 0;
}
