/* libFuzzer harness: model configurations from JSON (src/nn/config.c and the module table of
 * src/nn/run.c), the path of `attn run --config` and attn_model_create_json. The input is parsed as
 * `attn run` does (duplicate keys rejected); the root object and each of its object members go
 * through every config reader, which must accept or reject with a message and never read past the
 * tree; then attn_model_create_json builds the module (allocating its parameters). Dimensions are
 * legitimately allowed to be large, so a model is only built when every integer in the document
 * is at most 64 in magnitude: the allocation then stays far inside libFuzzer's memory limit, and a
 * large-value input still exercises every reader. */
#include <math.h>
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
    require_error_set(attn_nn_json_seed_kernel_config(obj, "linear_attention", ATTN_ATTENTION_LINEAR, ignore, &mc,
                                                      &causal));
    require_error_set(attn_nn_json_seed_kernel_config(obj, "performer_attention", ATTN_ATTENTION_PERFORMER, ignore,
                                                      &mc, &causal));
    require_error_set(attn_nn_json_local_global_config(obj, ignore, &lg));
    require_error_set(attn_nn_json_layer_config(obj, "layer", ignore, &lc));
    require_error_set(attn_nn_json_stack_config(obj, "encoder", "encoder_layer", ignore, &sc));
    require_error_set(attn_nn_json_stack_config(obj, "decoder", "decoder_layer", ignore, &sc));
    require_error_set(attn_nn_json_transformer_config(obj, ignore, &tc));
    require_error_set(attn_nn_json_vit_config(obj, ignore, &vc));
}

/* Every number in the tree is an integer of magnitude <= limit, or not an integer at all. */
static int small_ints(const attn_json *v, int64_t limit) {
    if (v->type == ATTN_JSON_NUMBER) {
        if (!isfinite(v->number)) return 0;
        return fabs(v->number) <= (double)limit;
    }
    if (v->type == ATTN_JSON_ARRAY)
        for (size_t i = 0; i < v->len; i++)
            if (!small_ints(attn_json_at(v, i), limit)) return 0;
    if (v->type == ATTN_JSON_OBJECT)
        for (size_t i = 0; i < v->len; i++)
            if (!small_ints(attn_json_member_value(v, i), limit)) return 0;
    return 1;
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
    const int build = small_ints(root, 64);
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
