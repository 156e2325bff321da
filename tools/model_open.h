/* Opening the models of `attn run`, `attn viz` and `attn sample` (one sequence, one set of
 * messages, "CMD: FILE: what is wrong", for every command):
 *   - an `attn run` model: configuration JSON -> module (attn_model_create_file), weights by
 *     state_dict name (attn_model_load, strict, under an optional prefix), then the inputs: a
 *     safetensors file of forward arguments, or an image for a vision_transformer (image_in.h);
 *   - a checkpoint of `attn train gpt`: its shape from the metadata, then the model and its
 *     parameters. */
#ifndef ATTN_TOOLS_MODEL_OPEN_H
#define ATTN_TOOLS_MODEL_OPEN_H

#include "attn/model.h"
#include "image_in.h"
#include "train_common.h"

/* An `attn run` model and the files behind it. Zero it before model_open; model_close frees it. */
typedef struct model_in {
    attn_model *m;
    attn_safetensors *weights; /* the weights file, kept open (run --check-finite reads it) */
    attn_safetensors *inputs;  /* the --inputs file, NULL for an image */
    image_in img;              /* the --image input */
} model_in;

/* Create the model of `config` and load `weights` (tensors named prefix + state_dict name; prefix
 * may be NULL). 0, or 1 with "CMD: ..." printed. */
int model_open(model_in *mi, const char *cmd, const char *config, const char *weights, const char *prefix);

/* Bind the inputs: the safetensors file `inputs`, or, when image is given, that image resized and
 * normalised for the model's vision_transformer (mean_s / std_s: --mean / --std, NULL for 0 and
 * 1). A non-ViT model given an image is "CMD: --image is for IMAGE_IS_FOR; CONFIG is a NAME (give
 * --inputs)". 0, or the exit code with the message printed. */
int model_bind(model_in *mi, const char *cmd, const char *config, const char *inputs, const char *image,
               const char *mean_s, const char *std_s, const char *image_is_for);

/* The bound inputs as a safetensors file (the --inputs file or the image's "x"). */
const attn_safetensors *model_bound(const model_in *mi);

void model_close(model_in *mi);

/* The library's message for a failure on the file at path, without a "safetensors: PATH: "
 * prefix that repeats the file name. */
const char *model_msg_for(const char *path);

/* A checkpoint of `attn train gpt`: its shape from the metadata. 0, or 1 with "CMD: ..." printed. */
int gpt_open_shape(const char *cmd, const char *path, train_gpt_shape *shape);
/* The model of that shape with the checkpoint's parameters (*g freed by the caller with
 * attn_gpt_free, also on failure). 0, or 1 with "CMD: ..." printed. */
int gpt_open_model(const char *cmd, const char *path, const train_gpt_shape *shape, attn_gpt **g);

#endif
