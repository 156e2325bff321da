/* The ViT configs of the PyTorch fixture (gen_vit.py) as attn_vit_config: one reader for the
 * tests that build attn_vit from the fixture's JSON (test_vit, test_vit_bf16). */
#ifndef ATTN_TEST_VIT_CONFIG_H
#define ATTN_TEST_VIT_CONFIG_H

#include <string.h>

#include "attn/attn.h"
#include "io/json.h"
#include "test_util.h"

static inline double num(const attn_json *o, const char *k, double dflt) {
    double v = dflt;
    attn_json_as_double(attn_json_get(o, k), &v);
    return v;
}

static inline int config_of(const attn_safetensors *st, int ci, attn_vit_config *c, int64_t *batch) {
    char key[64];
    snprintf(key, sizeof key, "case%d.config", ci);
    const char *js = attn_safetensors_metadata_find(st, key);
    attn_json_doc *doc = NULL;
    CHECK(js && attn_json_parse(js, strlen(js), NULL, &doc, NULL) == ATTN_JSON_OK, "case %d: config", ci);
    if (!doc) return 0;
    const attn_json *o = attn_json_root(doc);
    *c = attn_vit_config_default(0, (int64_t)num(o, "patch_size", 0), (int64_t)num(o, "num_layers", 0),
                                 (int64_t)num(o, "num_heads", 0), (int64_t)num(o, "hidden_dim", 0),
                                 (int64_t)num(o, "mlp_dim", 0), (int64_t)num(o, "num_classes", 0));
    c->image_h = (int64_t)num(o, "image_h", 0);
    c->image_w = (int64_t)num(o, "image_w", 0);
    c->in_channels = (int64_t)num(o, "in_channels", 3);
    int dist = 0;
    attn_json_as_bool(attn_json_get(o, "distilled"), &dist);
    c->distilled = dist;
    *batch = (int64_t)num(o, "batch", 1);
    attn_json_free(doc);
    return 1;
}

#endif
