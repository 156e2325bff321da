/* attn pretrained: a Hugging Face model folder opened as it is (config.json and safetensors
 * weights, optionally sharded; sentence-transformers' modules), computing what transformers /
 * sentence-transformers compute, in float32.
 *
 * Folder layout read by attn_pretrained_open(dir):
 *   config.json                      model_type chooses the family (table below); its options are
 *                                    checked: an unknown or unsupported one is an error naming it
 *   model.safetensors                the weights, or
 *   model.safetensors.index.json     {"weight_map": {tensor: shard file}} and the shard files
 *   modules.json                     sentence-transformers: Transformer (the model, in dir or in
 *                                    the module's path), Pooling (its path's config.json:
 *                                    "pooling_mode" "mean" / "cls" / "max" (version >= 6), or
 *                                    exactly one of pooling_mode_mean_tokens, _cls_token,
 *                                    _max_tokens true) and an optional Normalize, in that order;
 *                                    any other module or pooling mode is an error
 *   sentence_bert_config.json        max_seq_length, else tokenizer_config.json's model_max_length
 *                                    (where sentence-transformers >= 6 keeps it), capped by
 *                                    max_position_embeddings: attn_pretrained_max_length
 * Without modules.json, attn_pretrained_embed mean-pools the real tokens, without normalisation.
 *
 * Families (one row each of src/models/families.c; attn_pretrained_family_name(i) lists them):
 *   "bert"  model_type "bert": BertModel (weights named embeddings.*, encoder.layer.N.*, pooler.*,
 *           or the same under "bert." as BertFor* checkpoints save them; there, tensors outside
 *           "bert." belong to the task's head and are ignored, as is the pooler). hidden_act gelu
 *           (erf), gelu_new / gelu_pytorch_tanh (tanh approximation) or relu;
 *           position_embedding_type absolute; no decoder options.
 *   "gpt2"  model_type "gpt2": GPT2Model / GPT2LMHeadModel (weights named wte, wpe, h.N.*, ln_f, or
 *           the same under "transformer."; Conv1D weights [in, out] as transformers stores them;
 *           a stored lm_head.weight must equal wte, the LM head being tied; the attention's old
 *           non-persistent buffers h.N.attn.bias / masked_bias are ignored). activation_function
 *           gelu_new (or gelu_pytorch_tanh); n_inner null = 4 n_embd; tie_word_embeddings true;
 *           scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, add_cross_attention false.
 *           A causal LM: attn_pretrained_logits and attn_pretrained_generate; hidden_states and
 *           embed are ATTN_ERR_UNSUPPORTED (and generate is on "bert").
 *   "llama", "mistral", "qwen2"  model_type "llama" / "mistral" / "qwen2": LlamaForCausalLM,
 *           MistralForCausalLM, Qwen2ForCausalLM (src/models/llama.c, one code): weights under
 *           "model." (embed_tokens, layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
 *           post_attention_layernorm, mlp.{gate,up,down}_proj}, norm) and lm_head.weight, which
 *           tie_word_embeddings true (default false) replaces by embed_tokens (a stored one is then
 *           ignored, as are old rotary_emb.inv_freq buffers). Grouped-query attention
 *           (num_key_value_heads divides num_attention_heads; head_dim, else hidden_size / heads);
 *           RMSNorm (rms_norm_eps); hidden_act silu; RoPE (NeoX layout) from rope_parameters
 *           (transformers 5) or rope_theta + rope_scaling (older): rope_type default, linear
 *           (factor) or llama3 (factor, low_freq_factor, high_freq_factor,
 *           original_max_position_embeddings), any other ATTN_ERR_UNSUPPORTED naming it. Biases:
 *           llama's attention_bias (q, k, v, o) and mlp_bias; qwen2's q, k, v always; mistral none.
 *           Sliding window: mistral's sliding_window (null: none; absent: 4096), qwen2's when
 *           use_sliding_window, on the layers layer_types marks "sliding_attention" (else those
 *           >= max_window_layers): query i sees keys i - sliding_window + 1 .. i, in the full
 *           forward and in cached steps. A causal LM as "gpt2"; max_position_embeddings bounds
 *           prompt + new tokens; the key/value cache (Hkv heads per layer) grows as generation
 *           needs. eos_token_id may be a list (attn_pretrained_eos_ids).
 *   "vit"   model_type "vit": ViTModel / ViTForImageClassification (the image block below).
 * Weights: F32, F16, BF16 or F64 tensors, converted to float32; every tensor the model needs must
 * be present with the shape config.json implies, and every other tensor is an error ("missing" and
 * "unexpected" names listed in the message). Every file is read as hostile: sizes are checked
 * against the tensors and for overflow before anything is allocated; errors name the file and the
 * key (attn_last_error()).
 *
 * Calls: ids [batch, seq] (row-major), lengths [batch]: row b's real tokens are its first
 * lengths[b] positions (1 <= lengths[b] <= seq, <= max_position_embeddings), the rest padding whose
 * ids are not read. An id outside [0, vocab) or a token type outside [0, type_vocab_size) at a real
 * position is ATTN_ERR_INVALID_ARGUMENT naming the row and position. The model owns its workspace
 * (grown as calls need): calls on one model must not run concurrently. Work is split as in the
 * rest of the library: results are bitwise identical for any thread count. */
#ifndef ATTN_PRETRAINED_H
#define ATTN_PRETRAINED_H

#include "capture.h"
#include "core.h"
#include "image.h"
#include "precision.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_pretrained attn_pretrained;

/* The families' names in table order, NULL past the last ("bert", "gpt2", ...). */
ATTN_API const char *attn_pretrained_family_name(size_t i);

ATTN_API attn_status attn_pretrained_open(const char *dir, attn_pretrained **out);
ATTN_API void attn_pretrained_free(attn_pretrained *m);

ATTN_API const char *attn_pretrained_family(const attn_pretrained *m); /* "bert", "gpt2", "llama", ... */
ATTN_API int64_t attn_pretrained_hidden_size(const attn_pretrained *m);
/* Width of attn_pretrained_embed's rows. */
ATTN_API int64_t attn_pretrained_embedding_size(const attn_pretrained *m);
/* The longest input the folder's files allow (see the layout above); attn reads the ids it is given
 * up to max_position_embeddings: truncating to max_length is the tokenizer's job, as in
 * sentence-transformers. */
ATTN_API int64_t attn_pretrained_max_length(const attn_pretrained *m);
ATTN_API int64_t attn_pretrained_vocab_size(const attn_pretrained *m);
/* Whether embed pools: 0 mean, 1 CLS (first token), 2 max; and whether it L2-normalises. */
ATTN_API int attn_pretrained_pooling(const attn_pretrained *m);
ATTN_API int attn_pretrained_normalize(const attn_pretrained *m);

/* The model's last hidden state (BertModel's last_hidden_state with attention_mask = position <
 * lengths[b]): out [batch, seq, hidden]. token_type_ids [batch, seq] may be NULL (zeros). Padded
 * positions of out are set to 0. */
ATTN_API attn_status attn_pretrained_hidden_states(attn_pretrained *m, const int32_t *ids,
                                                   const int32_t *token_type_ids, const int64_t *lengths, int64_t batch,
                                                   int64_t seq, float *out);

/* sentence-transformers' encode of these ids: the hidden states pooled over each row's real tokens,
 * then L2-normalised when the folder has a Normalize module; out [batch, embedding_size]. Token
 * types are zeros (as sentence-transformers' BERT tokenizers give for one sentence). */
ATTN_API attn_status attn_pretrained_embed(attn_pretrained *m, const int32_t *ids, const int64_t *lengths,
                                           int64_t batch, int64_t seq, float *out);

/* ---- causal language models ("gpt2", "llama", "mistral", "qwen2") ---- */

/* A causal LM's next-token logits, as GPT2LMHeadModel(ids).logits (LlamaForCausalLM's, ...) in
 * eval: out [batch, seq, vocab].
 * Row b's real tokens are its first lengths[b] (right padding: the causal mask keeps it from the
 * real positions); padded positions of out are set to 0. */
ATTN_API attn_status attn_pretrained_logits(attn_pretrained *m, const int32_t *ids, const int64_t *lengths,
                                            int64_t batch, int64_t seq, float *out);

/* config.json's eos_token_id (-1 when it has none; an id >= vocab_size is never produced); when
 * it is a list (Llama 3: [128001, 128008, 128009]), the first of the list. */
ATTN_API int32_t attn_pretrained_eos_id(const attn_pretrained *m);
/* All of config.json's eos ids (an int or a list, at most 16): the first min(count, cap) are
 * written to ids (nullable); returns the count (0 when none). */
ATTN_API size_t attn_pretrained_eos_ids(const attn_pretrained *m, int32_t *ids, size_t cap);

typedef struct attn_generate_options {
    int64_t max_new_tokens; /* >= 0; prompt + max_new_tokens <= the model's n_positions
                               (Llama & co: max_position_embeddings) */
    double temperature;     /* 0: greedy (the first maximum of the logits, as argmax); else logits / T */
    int64_t top_k;          /* > 0: sample among the top_k largest logits (ties by lower id); 0: all */
    double top_p;           /* in (0, 1]: then the fewest most likely tokens whose probability sums
                               to >= top_p (nucleus sampling); 1: all */
    uint64_t seed;          /* token i is drawn with attn_philox_uniform(seed, 0, i): deterministic */
    int32_t eos_id;         /* generation stops after producing it; -1: none. When it is the model's
                               attn_pretrained_eos_id, any id of attn_pretrained_eos_ids stops */
} attn_generate_options;

/* max_new_tokens 32, temperature 0 (greedy), top_k 0, top_p 1, seed 0, eos_id -1. */
ATTN_API attn_generate_options attn_generate_options_default(void);

/* Called with each new id as it is produced (the eos id included); a nonzero return stops. */
typedef int (*attn_generate_callback)(int32_t id, void *user);

/* Continue prompt[0..n) (n >= 1): the prompt fills the model's key/value cache in one pass, then
 * each new token costs one cached step. Sampling is over softmax(logits / temperature) restricted by
 * top_k then top_p, with Philox draws (so a seed gives the same tokens on every machine and thread
 * count). *produced (nullable) gets how many ids were passed to on_token (nullable). Logits holding
 * a NaN or an infinity stop it with ATTN_ERR_NUMERIC naming the step and the logit. */
ATTN_API attn_status attn_pretrained_generate(attn_pretrained *m, const int32_t *prompt, size_t n,
                                              const attn_generate_options *o, attn_generate_callback on_token,
                                              void *user, size_t *produced);

/* ---- image classification ("vit") ----
 * "vit"   model_type "vit": ViTModel / ViTForImageClassification as transformers 5.25 computes them
 *         in eval: patch embedding (Conv2d, kernel = stride = patch_size), the CLS token, learned
 *         position embeddings (the image must be config's image_size: no interpolation), pre-norm
 *         layers (layernorm_before / layernorm_after, layer_norm_eps), the final layernorm, and
 *         ViTForImageClassification's classifier on the CLS token (num_labels rows = id2label's
 *         size). Weights named as transformers 5 saves them (layers.N.attention.{q,k,v,o}_proj,
 *         layers.N.mlp.fc1 / fc2) or as 4.x did (encoder.layer.N.attention.attention.{query,key,value},
 *         attention.output.dense, intermediate.dense, output.dense), with or without the "vit."
 *         prefix; classifier.* outside it. Ignored as transformers ignores them in a plain forward:
 *         ViTModel's pooler (pooler.dense.*) and the mask token (embeddings.mask_token). hidden_act
 *         gelu (erf), gelu_new / gelu_pytorch_tanh (tanh form) or relu; qkv_bias true or false;
 *         image_size and patch_size an integer or [height, width]; num_channels any.
 *         attn_pretrained_hidden_states / logits / embed / generate are ATTN_ERR_UNSUPPORTED; the
 *         image calls below are ATTN_ERR_UNSUPPORTED on the text families.
 * Preprocessing (attn_pretrained_image_input) follows the folder's preprocessor_config.json as
 * transformers 5.25's default ViTImageProcessor (its torchvision backend) computes it:
 *   do_convert_rgb   a gray image is replicated to RGB (a gray image without it is an error when the
 *                    model takes 3 channels; PNG alpha is dropped by attn_image_load, not blended)
 *   do_resize, size {"height", "width"}, resample 2 (bilinear): torch's antialiased bilinear resize
 *                    of the 8-bit image (F.interpolate(uint8, antialias=True), the integer-weight
 *                    path torchvision takes on the CPU), bit for bit; a copy at the same size
 *   do_rescale, rescale_factor; do_normalize, image_mean, image_std (a number or one per channel):
 *                    (x - mean / factor) / (std / factor) in float32, as the processor fuses them
 * Without the file: ViTImageProcessor's defaults (resize to image_size, 1/255, mean = std = 0.5).
 * Keys that would change the result and that attn does not apply (do_center_crop, do_pad true,
 * size "shortest_edge", resample other than 2, unknown keys) are errors naming the key. */

/* The classifier's rows (0 for a model without one, and for the text families). */
ATTN_API int64_t attn_pretrained_num_labels(const attn_pretrained *m);
/* config.json's id2label[i] ("LABEL_i" when it has none); NULL outside [0, num_labels). */
ATTN_API const char *attn_pretrained_label(const attn_pretrained *m, int64_t i);
/* The model's input image: channels, height, width (0s for the text families). */
ATTN_API void attn_pretrained_image_size(const attn_pretrained *m, int64_t *channels, int64_t *height, int64_t *width);
/* Tokens of a ViT's sequence: 1 + the patches (0 for the text families). */
ATTN_API int64_t attn_pretrained_image_tokens(const attn_pretrained *m);
/* The patch grid: rows x cols patches (token 1 + r cols + c is patch (r, c); 0s for text). */
ATTN_API void attn_pretrained_image_grid(const attn_pretrained *m, int64_t *rows, int64_t *cols);

/* img preprocessed as above into out [channels, height, width] (attn_pretrained_image_size). */
ATTN_API attn_status attn_pretrained_image_input(const attn_pretrained *m, const attn_image *img, float *out);

/* ViTForImageClassification(pixels).logits: pixels [batch, channels, height, width] (preprocessed),
 * logits [batch, num_labels]. height x width other than the model's is ATTN_ERR_SHAPE naming both;
 * a model without a classifier is ATTN_ERR_UNSUPPORTED. */
ATTN_API attn_status attn_pretrained_classify(attn_pretrained *m, const float *pixels, int64_t batch, int64_t height,
                                              int64_t width, float *logits);
/* ViTModel(pixels).last_hidden_state: out [batch, image_tokens, hidden] (the final layernorm applied). */
ATTN_API attn_status attn_pretrained_image_hidden_states(attn_pretrained *m, const float *pixels, int64_t batch,
                                                         int64_t height, int64_t width, float *out);

/* ---- attention capture, any family ----
 * One forward of the model on one input with cap (capture.h) recording the attention modules it
 * asks for: ids[0..n) (the whole sequence real; bert: token types 0) for the text families, pixels
 * [1, channels, height, width] for "vit" (the other argument NULL). Every family names its layers'
 * attention "layers.N.self_attn"; a record holds what transformers returns for that layer with
 * output_attentions=True (softmax weights [1, heads, n, n]). */
ATTN_API attn_status attn_pretrained_capture(attn_pretrained *m, const int32_t *ids, int64_t n, const float *pixels,
                                             int64_t height, int64_t width, attn_capture *cap);
/* ---- precision and cost ---- */

/* The compute precision of the model's calls (precision.h; default ATTN_PRECISION_FP32). bf16: the
 * matrix products of every linear layer and of attention take bf16-rounded operands and accumulate
 * in float32 (as PyTorch's CPU autocast to bfloat16); embeddings, layer norms, softmax statistics,
 * activations, residuals and pooling stay float32, as do the weights. The linear layers' weights
 * are rounded and packed for the bf16 products once, at the first call after the precision is set
 * (half their float bytes again; freed when it goes back to fp32), not at every call. Families:
 * all of them: "bert" (its hidden states and embeddings), "gpt2", "llama", "mistral" and "qwen2"
 * (logits and generation; the attention of a generation's cached steps stays float32 over the
 * float cache), "vit" (logits, hidden states, capture; the image preprocessing stays float32). */
ATTN_API attn_status attn_pretrained_set_precision(attn_pretrained *m, attn_precision p);
ATTN_API attn_precision attn_pretrained_precision(const attn_pretrained *m);

/* The floating-point operations (2 per multiply-add) of the matrix products and attention of one
 * forward over `seq` new tokens in each of `batch` rows, after `past` cached tokens (0 but for a
 * causal LM's cached steps): hidden_states / embed for an encoder, logits (its LM head included)
 * for a causal LM, whose attention counts only the keys the causal mask lets through; for "vit",
 * seq is the image's tokens (attn_pretrained_image_tokens) and the patch embedding and the
 * classifier count too (attn_pretrained_classify). Layer norms, activations and softmax are not
 * counted. 0 when the family does not say or an argument is < 0. */
ATTN_API double attn_pretrained_flops(const attn_pretrained *m, int64_t batch, int64_t seq, int64_t past);

#ifdef __cplusplus
}
#endif
#endif
