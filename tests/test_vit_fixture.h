/* The PyTorch ViT fixture (gen_vit.py) for the tests that build attn_vit from it (test_vit,
 * test_vit_bf16): a case's config as attn_vit_config, and its tensors by name. */
#ifndef ATTN_TEST_VIT_FIXTURE_H
#define ATTN_TEST_VIT_FIXTURE_H

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

/* Tensor "case<ci>.<what>" (x, logits, dlogits, dx, logits_sep, ...), NULL when absent. */
static inline float *vit_case_tensor(const attn_safetensors *st, int ci, const char *what, size_t *n) {
    char key[300];
    snprintf(key, sizeof key, "case%d.%s", ci, what);
    return fx_floats(st, key, n);
}

/* PyTorch's gradient of the parameter attn calls `name` (through the name map), NULL when absent. */
static inline float *vit_case_grad(const attn_safetensors *st, const attn_name_map *map, int ci, const char *name,
                                   size_t *n) {
    char theirs[256], what[280];
    CHECK_OK(attn_name_map_apply(map, name, theirs, sizeof theirs));
    snprintf(what, sizeof what, "g.%s", theirs);
    return vit_case_tensor(st, ci, what, n);
}

#endif
