/* attn_pretrained's image calls (include/attn/pretrained.h: labels, preprocessing, classification,
 * hidden states of "vit") and attention capture on any family. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/internal.h"
#include "models_internal.h"

int64_t attn_pretrained_num_labels(const attn_pretrained *m) { return m ? m->num_labels : 0; }

const char *attn_pretrained_label(const attn_pretrained *m, int64_t i) {
    return m && m->labels && i >= 0 && i < m->num_labels ? m->labels[i] : NULL;
}

void attn_pretrained_image_size(const attn_pretrained *m, int64_t *channels, int64_t *height, int64_t *width) {
    if (channels) *channels = m ? m->channels : 0;
    if (height) *height = m ? m->image_h : 0;
    if (width) *width = m ? m->image_w : 0;
}

int64_t attn_pretrained_image_tokens(const attn_pretrained *m) { return m ? m->image_tokens : 0; }

void attn_pretrained_image_grid(const attn_pretrained *m, int64_t *rows, int64_t *cols) {
    if (rows) *rows = m ? m->grid_h : 0;
    if (cols) *cols = m ? m->grid_w : 0;
}

static attn_status not_image(const char *fn, const attn_pretrained *m) {
    return attn_error(ATTN_ERR_UNSUPPORTED, "%s: the \"%s\" family takes text, not images", fn, m->family);
}

attn_status attn_pretrained_image_input(const attn_pretrained *m, const attn_image *img, float *out) {
    const char *fn = "attn_pretrained_image_input";
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, img);
    ATTN_CHECK_NOT_NULL(fn, out);
    if (!m->image) return not_image(fn, m);
    if (!img->pixels || img->width < 1 || img->height < 1 || (img->channels != 1 && img->channels != 3))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: img is not a decoded image (%lldx%lld, %d channels)", fn,
                          (long long)img->height, (long long)img->width, img->channels);
    return attn_hf_image_prep_apply(m->prep, m->channels, img, m->image_h, m->image_w, out);
}

/* The checks of an image call: the family, the sizes (the model's own, no interpolation). */
static attn_status check_image(const char *fn, const attn_pretrained *m, const float *pixels, int64_t batch,
                               int64_t height, int64_t width, const float *out) {
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, pixels);
    ATTN_CHECK_NOT_NULL(fn, out);
    if (!m->image) return not_image(fn, m);
    if (height != m->image_h || width != m->image_w)
        return attn_error(ATTN_ERR_SHAPE,
                          "%s: the image is %lldx%lld but the model takes %lldx%lld (config.json's image_size; attn "
                          "does not interpolate the position embeddings)",
                          fn, (long long)height, (long long)width, (long long)m->image_h, (long long)m->image_w);
    const int64_t per = m->image_tokens * m->hidden > m->channels * height * width ? m->image_tokens * m->hidden
                                                                                   : m->channels * height * width;
    if (batch < 1 || batch > (int64_t)(SIZE_MAX / sizeof(float) / 4) / per)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch %lld must be >= 1 and not overflow", fn,
                          (long long)batch);
    return ATTN_OK;
}

attn_status attn_pretrained_classify(attn_pretrained *m, const float *pixels, int64_t batch, int64_t height,
                                     int64_t width, float *logits) {
    const char *fn = "attn_pretrained_classify";
    attn_status st = check_image(fn, m, pixels, batch, height, width, logits);
    if (!st && !m->num_labels)
        st = attn_error(ATTN_ERR_UNSUPPORTED, "%s: the model has no classifier (a ViTModel: no classifier.* weights)",
                        fn);
    return st ? st : attn_hf_call_image(m, pixels, batch, NULL, logits, NULL);
}

attn_status attn_pretrained_image_hidden_states(attn_pretrained *m, const float *pixels, int64_t batch, int64_t height,
                                                int64_t width, float *out) {
    attn_status st = check_image("attn_pretrained_image_hidden_states", m, pixels, batch, height, width, out);
    return st ? st : attn_hf_call_image(m, pixels, batch, out, NULL, NULL);
}

/* The text families: their forward on ids[0..n) with the capture set in the family's slot. */
static attn_status capture_text(attn_pretrained *m, const int32_t *ids, int64_t n, attn_capture *cap) {
    const char *fn = "attn_pretrained_capture";
    if (!m->capture_slot)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: the \"%s\" family does not record attention", fn, m->family);
    if (n < 1 || n > m->max_positions)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: n = %lld tokens must be in [1, %lld] (the model's positions)",
                          fn, (long long)n, (long long)m->max_positions);
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= m->vocab)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: ids[%lld] = %d is outside [0, vocab_size %lld)", fn,
                              (long long)t, (int)ids[t], (long long)m->vocab);
    const size_t width = (size_t)(m->logits ? m->vocab : m->hidden);
    if ((size_t)n > SIZE_MAX / sizeof(float) / width)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: n = %lld tokens overflow", fn, (long long)n);
    float *out = attn__malloc((size_t)n * width * sizeof(float));
    if (!out) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    const int64_t len = n;
    *m->capture_slot = cap;
    attn_status st =
        m->logits ? attn_hf_call_logits(m, ids, &len, 1, n, out) : attn_hf_call_hidden(m, ids, NULL, &len, 1, n, out);
    *m->capture_slot = NULL;
    attn__free(out);
    return st;
}

attn_status attn_pretrained_capture(attn_pretrained *m, const int32_t *ids, int64_t n, const float *pixels,
                                    int64_t height, int64_t width, attn_capture *cap) {
    const char *fn = "attn_pretrained_capture";
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, cap);
    if (!m->image) {
        if (!ids)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: the \"%s\" family takes ids (ids is NULL)", fn,
                              m->family);
        return capture_text(m, ids, n, cap);
    }
    if (!pixels)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: the \"%s\" family takes pixels (pixels is NULL)", fn,
                          m->family);
    attn_status st = check_image(fn, m, pixels, 1, height, width, pixels);
    return st ? st : attn_hf_call_image(m, pixels, 1, NULL, NULL, cap);
}
