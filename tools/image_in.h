/* An image file as the input of a Vision Transformer, for `attn run --image` and `attn viz
 * --image`: decoded (attn_image_load), resized to the model's image size and normalised into
 * x [1, C, H, W] (attn_image_to_tensor), also as an in-memory safetensors holding "x" for
 * attn_model_bind_safetensors. */
#ifndef ATTN_TOOLS_IMAGE_IN_H
#define ATTN_TOOLS_IMAGE_IN_H

#include "attn/image.h"
#include "attn/nn.h"
#include "attn/safetensors.h"

typedef struct image_in {
    attn_image img;       /* the file as decoded */
    int64_t c, h, w;      /* the model's input */
    float *x;             /* [1, c, h, w] */
    void *st_buf;         /* the safetensors bytes behind st */
    attn_safetensors *st; /* "x" */
} image_in;

/* --mean / --std: one number (every channel) or one per channel into out[channels]. 0, or the
 * usage error's exit code (printed). */
int image_in_parse(const char *cmd, const char *flag, const char *s, int channels, float *out);

/* Load path for model c with mean / std (channels floats each, or NULL: 0 and 1). 0, or 1 with
 * one line printed ("CMD: PATH: what is wrong"). */
int image_in_load(const char *cmd, const char *path, const attn_vit_config *c, const float *mean, const float *std,
                  image_in *in);
void image_in_free(image_in *in);

#endif
