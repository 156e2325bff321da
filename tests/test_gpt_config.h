/* The GPT configs of the PyTorch fixtures (gen_nn_gpt.py, gen_train_bf16.py) as attn_gpt_config:
 * one reader for the tests that build attn_gpt from a fixture's JSON. */
#ifndef ATTN_TEST_GPT_CONFIG_H
#define ATTN_TEST_GPT_CONFIG_H

#include <string.h>

#include "attn/attn.h"
#include "io/json.h"

static inline double num(const attn_json *o, const char *k, double dflt) {
    double v = dflt;
    attn_json_as_double(attn_json_get(o, k), &v);
    return v;
}

static inline const char *str(const attn_json *o, const char *k) {
    const char *s = attn_json_as_string(attn_json_get(o, k), NULL);
    return s ? s : "";
}

static inline attn_gpt_config config_from_json(const attn_json *o) {
    attn_gpt_config c = attn_gpt_config_default((int64_t)num(o, "vocab_size", 0), (int64_t)num(o, "max_positions", 0),
                                                (int64_t)num(o, "d_model", 0), (int64_t)num(o, "nhead", 0),
                                                (int64_t)num(o, "num_layers", 0));
    c.layer.dim_feedforward = (int64_t)num(o, "dim_feedforward", 2048);
    c.layer.layer_norm_eps = (float)num(o, "layer_norm_eps", 1e-5);
    c.layer.activation = !strcmp(str(o, "activation"), "relu") ? ATTN_ACTIVATION_RELU : ATTN_ACTIVATION_GELU;
    int tie = 0;
    attn_json_as_bool(attn_json_get(o, "tie_embeddings"), &tie);
    c.tie_embeddings = tie;
    if (!strcmp(str(o, "positions"), "rope")) {
        const attn_json *r = attn_json_get(o, "rope");
        c.positions = ATTN_POSITIONS_ROPE;
        c.rope.layout = !strcmp(str(r, "layout"), "interleaved") ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_NEOX;
        c.rope.scaling = !strcmp(str(r, "scaling"), "ntk")      ? ATTN_ROPE_SCALING_NTK
                         : !strcmp(str(r, "scaling"), "linear") ? ATTN_ROPE_SCALING_LINEAR
                                                                : ATTN_ROPE_SCALING_NONE;
        c.rope.base = num(r, "base", 10000);
        c.rope.factor = num(r, "factor", 1);
        c.rope.rotary_dim = (int64_t)num(r, "rotary_dim", 0);
    }
    return c;
}

#endif
