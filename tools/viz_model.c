/* `attn viz --model DIR` (viz_model.h): any Hugging Face folder attn_pretrained opens, on text
 * tokenised by the folder's tokenizer (labels: each id decoded alone) or on an image preprocessed
 * as its preprocessor_config.json says (labels cls and pROW,COL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "viz_model.h"

int viz_model_check(const char *const *others, const char *const *names, size_t n, const char *text,
                    const char *image) {
    for (size_t i = 0; i < n; i++)
        if (others[i]) return cli_usage_error("viz: %s does not go with --model", names[i]);
    if (!text == !image) return cli_usage_error("viz: --model needs one of --text and --image");
    return 0;
}

static char *dup_str(const char *s) {
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

/* Label i of a text: the id decoded alone (its token when that is empty). */
static char *token_label(const attn_tokenizer *tok, int32_t id) {
    char buf[256];
    size_t len = 0;
    if (attn_tokenizer_decode(tok, &id, 1, 0, buf, sizeof buf, &len) == ATTN_OK && len > 0 && len < sizeof buf)
        return dup_str(buf);
    const char *t = attn_tokenizer_id_to_token(tok, id);
    snprintf(buf, sizeof buf, "%s", t ? t : "?");
    return dup_str(buf);
}

static int run_text(viz_model *vm, const char *dir, const char *text, attn_capture *cap, int64_t *ntok,
                    char ***labels) {
    if (attn_pretrained_image_tokens(vm->m))
        return cli_fail("viz: --text: %s is a \"%s\" model (images: give --image)", dir, attn_pretrained_family(vm->m));
    if (attn_tokenizer_open(dir, &vm->tok)) return cli_fail("viz: %s", attn_last_error());
    const int64_t max = attn_pretrained_max_length(vm->m);
    size_t n = 0;
    attn_status st = attn_tokenizer_encode(vm->tok, text, strlen(text), 1, max, NULL, 0, &n);
    if (st != ATTN_OK && st != ATTN_ERR_WORKSPACE) return cli_fail("viz: --text: %s", attn_last_error());
    if (n == 0) return cli_fail("viz: --text gives no tokens");
    if (!(vm->ids = malloc(n * sizeof *vm->ids)) || !(*labels = calloc(n, sizeof **labels)))
        return cli_fail("viz: out of memory");
    if (attn_tokenizer_encode(vm->tok, text, strlen(text), 1, max, vm->ids, n, &n))
        return cli_fail("viz: --text: %s", attn_last_error());
    *ntok = (int64_t)n;
    for (size_t i = 0; i < n; i++)
        if (!((*labels)[i] = token_label(vm->tok, vm->ids[i]))) return cli_fail("viz: out of memory");
    if (attn_pretrained_capture(vm->m, vm->ids, (int64_t)n, NULL, 0, 0, cap))
        return cli_fail("viz: %s: %s", dir, attn_last_error());
    return 0;
}

static int run_image(viz_model *vm, const char *dir, const char *image, attn_capture *cap, int64_t *ntok,
                     char ***labels, attn_image *img) {
    int64_t C, H, W;
    attn_pretrained_image_size(vm->m, &C, &H, &W);
    const int64_t n = attn_pretrained_image_tokens(vm->m);
    if (!C)
        return cli_fail("viz: --image: %s is a \"%s\" model (text: give --text)", dir, attn_pretrained_family(vm->m));
    if (attn_image_load(image, img)) return cli_fail("viz: %s", attn_last_error());
    if (!(vm->x = malloc((size_t)(C * H * W) * sizeof(float))) || !(*labels = calloc((size_t)n, sizeof **labels)))
        return cli_fail("viz: out of memory");
    if (attn_pretrained_image_input(vm->m, img, vm->x) || attn_pretrained_capture(vm->m, NULL, 0, vm->x, H, W, cap))
        return cli_fail("viz: %s: %s", image, attn_last_error());
    /* the grid as cmd_viz reads it (image / patch): gh x gw "pixels" of patch 1 */
    int64_t gh, gw;
    attn_pretrained_image_grid(vm->m, &gh, &gw);
    vm->vit = attn_vit_config_default(gh, 1, 1, 1, 1, 1, 1);
    vm->vit.image_w = gw;
    *ntok = n;
    for (int64_t i = 0; i < n; i++) {
        char b[48];
        if (i == 0)
            snprintf(b, sizeof b, "cls");
        else
            snprintf(b, sizeof b, "p%lld,%lld", (long long)((i - 1) / gw), (long long)((i - 1) % gw));
        if (!((*labels)[i] = dup_str(b))) return cli_fail("viz: out of memory");
    }
    return 0;
}

int viz_model_run(viz_model *vm, const char *dir, const char *text, const char *image, const char *pattern,
                  attn_capture **cap, int64_t *ntok, char ***labels, char *desc, size_t desc_cap, attn_image *img) {
    memset(vm, 0, sizeof *vm);
    if (attn_pretrained_open(dir, &vm->m)) return cli_fail("viz: %s", attn_last_error());
    if (attn_capture_create(cap) || attn_capture_add(*cap, pattern, 0, 0, 0, 0))
        return cli_fail("viz: %s", attn_last_error());
    const int rc =
        text ? run_text(vm, dir, text, *cap, ntok, labels) : run_image(vm, dir, image, *cap, ntok, labels, img);
    if (rc) return rc;
    snprintf(desc, desc_cap, "%s (Hugging Face \"%s\", hidden %lld) on %lld %s", dir, attn_pretrained_family(vm->m),
             (long long)attn_pretrained_hidden_size(vm->m), (long long)*ntok,
             text ? "tokens of text" : "tokens of an image");
    return 0;
}

void viz_model_free(viz_model *vm) {
    attn_pretrained_free(vm->m);
    attn_tokenizer_free(vm->tok);
    free(vm->ids);
    free(vm->x);
    memset(vm, 0, sizeof *vm);
}
