/* The model families attn_pretrained_open knows, one row each: config.json's model_type, the
 * family's name, and the function that builds it from an open folder. A new family is one file
 * (src/models/<family>.c, its open function declared in models_internal.h) and one row here. */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "models_internal.h"

static const hf_family FAMILIES[] = {
    {"bert", "bert", attn_hf_bert_open},    {"gpt2", "gpt2", attn_hf_gpt2_open},
    {"llama", "llama", attn_hf_llama_open}, {"mistral", "mistral", attn_hf_mistral_open},
    {"qwen2", "qwen2", attn_hf_qwen2_open}, {"vit", "vit", attn_hf_vit_open},
};

#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

const char *attn_pretrained_family_name(size_t i) { return i < N_FAMILIES ? FAMILIES[i].name : NULL; }

attn_status attn_hf_family_find(const hf_folder *f, const hf_family **out) {
    const char *type = NULL;
    attn_status st = attn_hf_config_string(f, "model_type", NULL, &type);
    if (st) return st;
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strcmp(FAMILIES[i].model_type, type) == 0) {
            *out = &FAMILIES[i];
            return ATTN_OK;
        }
    char known[200] = "";
    for (size_t i = 0; i < N_FAMILIES; i++) {
        size_t len = strlen(known);
        snprintf(known + len, sizeof known - len, "%s\"%s\"", i ? ", " : "", FAMILIES[i].model_type);
    }
    return attn_error(ATTN_ERR_UNSUPPORTED, "%s: model_type \"%.100s\" is not supported (attn knows %s)",
                      f->config_path, type, known);
}
