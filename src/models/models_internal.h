/* attn internal: Hugging Face model folders (src/models). hf_folder.c reads a folder's config.json
 * and its safetensors weights (one file or shards) and checks the tensors' names, dtypes and
 * shapes; families.c holds the table of model families; pretrained.c the public calls
 * (include/attn/pretrained.h) and sentence-transformers' modules; each family (bert.c) builds its
 * model from the library's modules. */
#ifndef ATTN_MODELS_INTERNAL_H
#define ATTN_MODELS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "attn/capture.h"
#include "attn/image.h"
#include "attn/layers.h"
#include "attn/pretrained.h"
#include "attn/safetensors.h"
#include "io/json.h"
#include "io/safe_file.h"

/* ---- a folder: its config.json and its weights ---- */
typedef struct hf_folder {
    char *dir;         /* the model's folder */
    char *config_path; /* dir/config.json */
    attn_json_doc *config_doc;
    const attn_json *config; /* the root object */
    attn_safetensors **shards;
    char **shard_paths;
    size_t n_shards;
} hf_folder;

/* Read and parse a JSON file whose root must be of that type (errors name the file). */
attn_status attn_hf_read_json(const char *path, attn_json_type type, attn_json_doc **doc, const attn_json **root);
/* Open config.json and the weights of dir. */
attn_status attn_hf_folder_open(const char *dir, hf_folder *f);
void attn_hf_folder_close(hf_folder *f);

/* config.json's keys; every error names the file and the key. A missing optional key takes def. */
attn_status attn_hf_config_int(const hf_folder *f, const char *key, int required, int64_t def, int64_t lo, int64_t hi,
                               int64_t *out);
attn_status attn_hf_config_number(const hf_folder *f, const char *key, double def, double *out);
attn_status attn_hf_config_string(const hf_folder *f, const char *key, const char *def, const char **out);
attn_status attn_hf_config_bool(const hf_folder *f, const char *key, int def, int *out);
/* The same for any JSON object read from the file `path`. */
attn_status attn_hf_json_int(const attn_json *obj, const char *path, const char *key, int required, int64_t def,
                             int64_t lo, int64_t hi, int64_t *out);
attn_status attn_hf_json_bool(const attn_json *obj, const char *path, const char *key, int def, int *out);

/* A tensor of the weights (NULL when absent); *shard (nullable) receives its shard's index. */
const attn_safetensors_tensor *attn_hf_tensor(const hf_folder *f, const char *name, size_t *shard);
size_t attn_hf_tensor_count(const hf_folder *f);
const attn_safetensors_tensor *attn_hf_tensor_at(const hf_folder *f, size_t i, size_t *shard);

/* One tensor a family needs: its name, the shape config.json implies (and the keys it comes
 * from, for messages), and where its float32 copy goes. */
typedef struct hf_need {
    char *name;
    int rank;
    int64_t shape[4]; /* rank <= 4 (a ViT's patch projection is [D, C, p, p]) */
    const char *keys; /* e.g. "vocab_size x hidden_size" */
    float *dst;
    int transpose; /* rank 2: dst gets the [shape[1], shape[0]] transpose (Conv1D's [in, out]) */
} hf_need;

/* Check the weights against the needs: every need present (else ATTN_ERR_NOT_FOUND listing the
 * missing ones and the tensors that are neither needed nor ignored, "unexpected"), of a float
 * dtype (ATTN_ERR_UNSUPPORTED) and of its shape (ATTN_ERR_SHAPE). ignore(name) nullable. */
attn_status attn_hf_check(const hf_folder *f, const hf_need *needs, size_t n,
                          int (*ignore)(const char *name, void *ctx), void *ctx);
/* Read every need into its dst (float32), transposed where the need says so. */
attn_status attn_hf_load(const hf_folder *f, const hf_need *needs, size_t n);
/* Free n needs' names and the array (NULL accepted). */
void attn_hf_needs_free(hf_need *needs, size_t n);
/* Before anything of `layers` layers is allocated: the weights must hold that many, seen as
 * tensors named prefix + stack + "<index>." ...; the last layer's prefix + stack + "<layers - 1>" +
 * last is looked up first. Else ATTN_ERR_SHAPE naming config.json's `key` and the count found
 * (fewer layers in the weights than the key says). Extra layers show later as unexpected names. */
attn_status attn_hf_check_layer_count(const hf_folder *f, const char *prefix, const char *stack, const char *last,
                                      const char *key, int64_t layers);

/* config.json's hidden_act: "gelu" (the default; erf), "gelu_new" / "gelu_pytorch_tanh" (tanh
 * form) or "relu"; another value is ATTN_ERR_UNSUPPORTED naming the key (BERT, ViT). */
attn_status attn_hf_config_activation(const hf_folder *f, attn_activation *act);
/* config.json's eos_token_id: null / absent / -1 (none), an integer, or a list of at most cap
 * integers (Llama 3); *n gets how many ids went to ids. Errors name the file and the key. */
attn_status attn_hf_config_eos(const hf_folder *f, int32_t *ids, size_t cap, size_t *n);

/* ---- the model behind attn_pretrained ---- */
#define ATTN_HF_MAX_EOS 16
typedef attn_status (*hf_hidden_fn)(void *impl, const int32_t *ids, const int32_t *token_type_ids,
                                    const int64_t *lengths, int64_t batch, int64_t seq, float *out);

/* A causal LM's logits: out [batch, seq, vocab] (lengths as for hidden states). */
typedef attn_status (*hf_logits_fn)(void *impl, const int32_t *ids, const int64_t *lengths, int64_t batch, int64_t seq,
                                    float *out);
/* Generation on the model's own cache: reset empties it (capacity max_positions), then ids[0..n)
 * are appended and the logits of the last one written to last [vocab]. */
typedef attn_status (*hf_step_fn)(void *impl, int reset, const int32_t *ids, int64_t n, float *last);

/* An image model's forward: pixels [batch, channels, image_h, image_w] -> hidden [batch, tokens,
 * hidden] (nullable) and logits [batch, num_labels] (nullable), recording into cap (nullable). */
typedef attn_status (*hf_image_fn)(void *impl, const float *pixels, int64_t batch, float *hidden, float *logits,
                                   attn_capture *cap);

/* ---- a family's compute precision (pretrained.c) ----
 * A family that runs bf16 points attn_pretrained's prec at its hf_precision: the precision and the
 * store of its linear weights rounded and packed once (nn_internal.h's attn_nn_bf16_weights: the
 * weights never change after the folder is read). pretrained.c runs each of the family's calls
 * (hidden_states, logits, step, image: attn_hf_call_*) with both installed on the calling thread (the
 * workspace queries inside included: bf16 products need room for their rounded operands), and
 * frees the store with the model. */
typedef struct attn_nn_bf16_weights attn_nn_bf16_weights;
typedef struct hf_precision {
    attn_precision p;
    attn_nn_bf16_weights *wb; /* bf16 only: created empty by attn_pretrained_set_precision */
} hf_precision;

struct attn_pretrained {
    const char *family;
    void *impl;
    hf_hidden_fn hidden_states;       /* NULL: the family has no hidden states / embeddings call */
    hf_logits_fn logits;              /* NULL: not a causal LM */
    hf_step_fn step;                  /* NULL: no generation */
    int32_t eos_id;                   /* config.json's eos_token_id (the first of a list), -1 when none */
    int32_t eos_ids[ATTN_HF_MAX_EOS]; /* all of config.json's eos_token_id (an int or a list) */
    size_t n_eos;
    void (*free_impl)(void *impl);
    int64_t hidden, vocab, max_positions, type_vocab;
    int64_t max_length;
    int pooling; /* 0 mean, 1 cls, 2 max */
    int normalize;
    float *buf; /* embed's hidden states */
    size_t buf_floats;
    /* attn_pretrained_capture: where the family's forward reads its capture (NULL: none) */
    attn_capture **capture_slot;
    /* image models ("vit"); NULL / 0 for the text families */
    hf_image_fn image;
    int64_t channels, image_h, image_w, image_tokens, grid_h, grid_w, num_labels;
    char *const *labels;              /* [num_labels], owned by impl */
    const struct hf_image_prep *prep; /* owned by impl */
    /* prec: the family's precision (NULL: fp32 only); precision_changed: told of a new one after
     * attn_pretrained_set_precision set it (NULL: nothing to do); flops: attn_pretrained_flops's
     * count (NULL: 0). */
    hf_precision *prec;
    void (*precision_changed)(void *impl, attn_precision p);
    double (*flops)(const void *impl, int64_t batch, int64_t seq, int64_t past);
};

/* The family's calls in its precision (pretrained.c). */
attn_status attn_hf_call_hidden(attn_pretrained *m, const int32_t *ids, const int32_t *types, const int64_t *lengths,
                                int64_t B, int64_t n, float *out);
attn_status attn_hf_call_logits(attn_pretrained *m, const int32_t *ids, const int64_t *lengths, int64_t B, int64_t n,
                                float *out);
attn_status attn_hf_call_step(attn_pretrained *m, int reset, const int32_t *ids, int64_t n, float *last);
attn_status attn_hf_call_image(attn_pretrained *m, const float *pixels, int64_t batch, float *hidden, float *logits,
                               attn_capture *cap);

/* ---- the family table (families.c) ---- */
typedef struct hf_family {
    const char *model_type; /* config.json's model_type */
    const char *name;       /* attn_pretrained_family */
    /* Build the model from an open folder: fill m's impl, its calls (hidden_states or logits and
     * step), free_impl and sizes. */
    attn_status (*open)(const hf_folder *f, attn_pretrained *m);
} hf_family;

/* The row whose model_type is config.json's (ATTN_ERR_UNSUPPORTED naming it, and the known ones). */
attn_status attn_hf_family_find(const hf_folder *f, const hf_family **out);

attn_status attn_hf_bert_open(const hf_folder *f, attn_pretrained *m);
attn_status attn_hf_gpt2_open(const hf_folder *f, attn_pretrained *m);
/* llama.c: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (one code, three configs) */
attn_status attn_hf_llama_open(const hf_folder *f, attn_pretrained *m);
attn_status attn_hf_mistral_open(const hf_folder *f, attn_pretrained *m);
attn_status attn_hf_qwen2_open(const hf_folder *f, attn_pretrained *m);

attn_status attn_hf_vit_open(const hf_folder *f, attn_pretrained *m);

/* ---- an image processor's preprocessor_config.json (image_prep.c) ---- */
typedef struct hf_image_prep {
    int resize;            /* do_resize: to height x width, torch's antialiased bilinear on 8 bits */
    int64_t height, width; /* size */
    int rescale;           /* do_rescale: x rescale_factor */
    double factor;
    int normalize; /* do_normalize: (x - mean) / std per channel */
    double mean[3], std[3];
    int convert_rgb; /* do_convert_rgb: gray replicated to RGB */
} hf_image_prep;

/* dir/preprocessor_config.json for a model of `channels` channels (1 or 3 for images); absent:
 * ViTImageProcessor's defaults with size def_h x def_w. Errors name the file and the key. */
attn_status attn_hf_image_prep_read(const char *dir, int64_t channels, int64_t def_h, int64_t def_w, hf_image_prep *p);
/* img into out [channels, p->height, p->width] (or the image's size without resize: h, w). */
attn_status attn_hf_image_prep_apply(const hf_image_prep *p, int64_t channels, const attn_image *img, int64_t h,
                                     int64_t w, float *out);

#endif
