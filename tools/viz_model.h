/* `attn viz --model DIR`: a Hugging Face folder (attn/pretrained.h, any family) on --text (its
 * tokenizer) or --image (a ViT: its preprocessing), one forward recording the attention
 * (attn_pretrained_capture), the tokens' labels for the maps. */
#ifndef ATTN_TOOLS_VIZ_MODEL_H
#define ATTN_TOOLS_VIZ_MODEL_H

#include <stddef.h>

#include "attn/attn.h"

typedef struct viz_model {
    attn_pretrained *m;
    attn_tokenizer *tok;
    attn_vit_config vit; /* a ViT's image and patch sizes: the rollout's CLS row, --overlay's grid */
    int32_t *ids;
    float *x;
} viz_model;

/* The exit code of the --model options that do not go together (0, or 2 printed): others[n] are
 * the options of the other models and inputs (non-NULL: given), names[n] their names. */
int viz_model_check(const char *const *others, const char *const *names, size_t n, const char *text, const char *image);

/* Open dir, run it on text or image recording the modules matching pattern into *cap (created),
 * the token labels into *labels[*ntok] (malloc'ed strings), a description into desc, the decoded
 * image into *img (for --overlay). 0, or 1 (printed). */
int viz_model_run(viz_model *vm, const char *dir, const char *text, const char *image, const char *pattern,
                  attn_capture **cap, int64_t *ntok, char ***labels, char *desc, size_t desc_cap, attn_image *img);
void viz_model_free(viz_model *vm);

#endif
