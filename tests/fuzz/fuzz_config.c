/* libFuzzer harness: model configurations from JSON (src/nn/config.c and the module table of
 * src/nn/run.c), the path of `attn run --config` and attn_model_create_json. The input is parsed as
 * `attn run` does (duplicate keys rejected); the root object and each of its object members go
 * through every config reader, which must accept or reject with a message and never read past the
 * tree; then attn_model_create_json builds the module (allocating and initialising its
 * parameters). Large dimensions are legitimate (nn.Transformer's defaults alone are 44M parameters,
 * seconds of initialisation here), so a module is only built when its own config reader, run as
 * attn_nn_model_create runs it, gives small sizes (widths <= 64, feed-forward <= 256, layers <= 2,
 * ...): each input then stays far inside the time and memory limits, zero, negative and
 * inconsistent values still reach the module's own validation, and large values still exercise
 * every reader. */
#include <string.h>

#include "attn/model.h"
#include "fuzz_util.h"
#include "nn/nn_config.h"

static void require_error_set(attn_status s) {
    if (s != ATTN_OK) REQUIRE(attn_last_error()[0] != '\0');
}

static void readers(const attn_json *obj) {
    static const char *const ignore[] = {"module", NULL};
    attn_mha_config mc;
    attn_local_global_config lg;
    attn_layer_config lc;
    attn_stack_config sc;
    attn_transformer_config tc;
    attn_vit_config vc;
    int causal = 0;
    attn_clear_error();
    require_error_set(attn_nn_json_mha_config(obj, ignore, &mc));
    require_error_set(attn_nn_json_seed_attention_config(obj, "sparse_attention", "window_size", ignore, &mc));
    require_error_set(attn_nn_json_seed_attention_config(obj, "seed", NULL, ignore, &mc));
    require_error_set(
        attn_nn_json_seed_kernel_config(obj, "linear_attention", ATTN_ATTENTION_LINEAR, ignore, &mc, &causal));
    require_error_set(
        attn_nn_json_seed_kernel_config(obj, "performer_attention", ATTN_ATTENTION_PERFORMER, ignore, &mc, &causal));
    require_error_set(attn_nn_json_local_global_config(obj, ignore, &lg));
    require_error_set(attn_nn_json_layer_config(obj, "layer", ignore, &lc));
    require_error_set(attn_nn_json_stack_config(obj, "encoder", "encoder_layer", ignore, &sc));
    require_error_set(attn_nn_json_stack_config(obj, "decoder", "decoder_layer", ignore, &sc));
    require_error_set(attn_nn_json_transformer_config(obj, ignore, &tc));
    require_error_set(attn_nn_json_vit_config(obj, ignore, &vc));
}

static int in(int64_t v, int64_t hi) { return v <= hi; } /* negative and zero: the module rejects them */

static int layer_small(const attn_layer_config *c) { return in(c->d_model, 64) && in(c->dim_feedforward, 256); }

/* The module named by "module" reads small sizes. A config its reader rejects is not built either:
 * the create would stop at the same reader (already run on it above), and a reader run with
 * another ignore list than the create's must not let a large module through. */
static int small_module(const attn_json *root) {
    static const char *const ignore[] = {"module",        "need_weights",  "average_attn_weights", "is_causal",
                                         "src_is_causal", "tgt_is_causal", "memory_is_causal",     NULL};
    const char *name = attn_json_as_string(attn_json_get(root, "module"), NULL);
    if (!name) return 1;
    attn_mha_config mc;
    attn_local_global_config lg;
    attn_layer_config lc;
    attn_stack_config sc;
    attn_transformer_config tc;
    attn_vit_config vc;
    int causal = 0;
    if (!strcmp(name, "multihead_attention"))
        return !attn_nn_json_mha_config(root, ignore, &mc) &&
               (in(mc.embed_dim, 64) && in(mc.kdim, 64) && in(mc.vdim, 64));
    if (!strcmp(name, "sparse_attention"))
        return !attn_nn_json_seed_attention_config(root, name, "window_size", ignore, &mc) && in(mc.embed_dim, 64);
    if (!strcmp(name, "linear_attention") || !strcmp(name, "performer_attention"))
        return !attn_nn_json_seed_kernel_config(root, name,
                                                name[0] == 'l' ? ATTN_ATTENTION_LINEAR : ATTN_ATTENTION_PERFORMER,
                                                ignore, &mc, &causal) &&
               (in(mc.embed_dim, 64) && in(mc.attention.num_features, 256));
    if (!strcmp(name, "local_global_attention"))
        return !attn_nn_json_local_global_config(root, ignore, &lg) && in(lg.d_model, 64);
    if (!strcmp(name, "transformer_encoder_layer") || !strcmp(name, "transformer_decoder_layer"))
        return !attn_nn_json_layer_config(root, name, ignore, &lc) && layer_small(&lc);
    if (!strcmp(name, "transformer_encoder") || !strcmp(name, "transformer_decoder"))
        return !attn_nn_json_stack_config(root, name, name[12] == 'e' ? "encoder_layer" : "decoder_layer", ignore,
                                          &sc) &&
               (layer_small(&sc.layer) && in(sc.num_layers, 2));
    if (!strcmp(name, "transformer"))
        return !attn_nn_json_transformer_config(root, ignore, &tc) &&
               (layer_small(&tc.layer) && in(tc.num_encoder_layers, 2) && in(tc.num_decoder_layers, 2));
    if (!strcmp(name, "vision_transformer"))
        return !attn_nn_json_vit_config(root, ignore, &vc) &&
               (in(vc.hidden_dim, 64) && in(vc.mlp_dim, 256) && in(vc.num_layers, 2) && in(vc.image_h, 32) &&
                in(vc.image_w, 32) && in(vc.patch_size, 8) && in(vc.in_channels, 4) && in(vc.num_classes, 1000));
    return 1; /* unknown: rejected by name */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_json_doc *doc = NULL;
    attn_json_error err;
    const attn_json_options jopt = {0, 1};
    if (attn_json_parse((const char *)data, size, &jopt, &doc, &err) != ATTN_JSON_OK) return 0;
    const attn_json *root = attn_json_root(doc);
    readers(root);
    for (size_t i = 0; i < attn_json_count(root) && root->type == ATTN_JSON_OBJECT; i++)
        if (attn_json_member_value(root, i)->type == ATTN_JSON_OBJECT) readers(attn_json_member_value(root, i));
    const int build = small_module(root);
    attn_json_free(doc);
    if (!build) return 0;

    attn_model *m = NULL;
    attn_clear_error();
    attn_status s = attn_model_create_json((const char *)data, size, &m);
    if (s != ATTN_OK) {
        REQUIRE(m == NULL);
        REQUIRE(attn_last_error()[0] != '\0');
        return 0;
    }
    REQUIRE(m != NULL && attn_model_name(m) != NULL);
    const attn_params *ps = attn_model_params(m);
    REQUIRE(ps != NULL);
    size_t total = 0;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        REQUIRE(p != NULL && p->name != NULL && attn_params_find(ps, p->name) == p);
        size_t numel = 1;
        for (int d = 0; d < p->rank; d++) {
            REQUIRE(p->shape[d] >= 0);
            numel *= (size_t)p->shape[d];
        }
        REQUIRE(numel == p->numel);
        if (numel) REQUIRE(p->data != NULL);
        total += numel;
    }
    REQUIRE(total == attn_params_numel(ps));
    attn_model_free(m);
    return 0;
}
