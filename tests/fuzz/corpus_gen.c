/* Writes the seed corpus of the fuzz harnesses: corpus_gen DIR fills DIR/<target>/ with small valid
 * files and slightly broken variants of them (truncated, a length or offset off, a byte flipped).
 * Run by `make fuzz-corpus`; the result is committed as tests/fuzz/corpus. Deterministic: the same
 * files every run, so regenerating shows no diff unless the formats change. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/image.h"
#include "attn/nn.h"
#include "attn/safetensors.h"
#include "attn/train.h"

static const char *root;

static void die(const char *what) {
    fprintf(stderr, "corpus_gen: %s: %s\n", what, attn_last_error());
    exit(1);
}

static void put(const char *target, const char *name, const void *data, size_t len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
        fprintf(stderr, "corpus_gen: cannot write %s\n", path);
        exit(1);
    }
}

static void put_str(const char *target, const char *name, const char *s) { put(target, name, s, strlen(s)); }
/* A string literal with its NULs. */
#define PUT_LIT(target, name, lit) put(target, name, lit, sizeof lit - 1)

/* A hand-written safetensors file: the length word, header, then data. */
static void put_st(const char *name, const char *header, const char *data) {
    const size_t hl = strlen(header), dl = strlen(data);
    unsigned char *b = malloc(8 + hl + dl);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    memcpy(b + 8 + hl, data, dl);
    put("safetensors", name, b, 8 + hl + dl);
    free(b);
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    unsigned char *b = malloc(1 << 20);
    *len = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* The file and its broken variants: cut to half and to 7 bytes, one byte flipped in the middle of
 * the header and in the data, the header length word one too large. */
static void put_variants(const char *target, const char *stem, const unsigned char *b, size_t len) {
    char name[200];
    unsigned char *c = malloc(len);
    snprintf(name, sizeof name, "%s.safetensors", stem);
    put(target, name, b, len);
    snprintf(name, sizeof name, "%s_half.bin", stem);
    put(target, name, b, len / 2);
    snprintf(name, sizeof name, "%s_7.bin", stem);
    put(target, name, b, len < 7 ? len : 7);
    memcpy(c, b, len);
    c[8 + (len - 8) / 4] ^= 0x20;
    snprintf(name, sizeof name, "%s_hdrflip.bin", stem);
    put(target, name, c, len);
    memcpy(c, b, len);
    c[len - 3] ^= 0x01;
    snprintf(name, sizeof name, "%s_dataflip.bin", stem);
    put(target, name, c, len);
    memcpy(c, b, len);
    c[0] = (unsigned char)(c[0] + 1);
    snprintf(name, sizeof name, "%s_hdrlen.bin", stem);
    put(target, name, c, len);
    free(c);
}

static void safetensors_corpus(void) {
    attn_safetensors_writer *w = NULL;
    static const float f[6] = {1, -2, 3.5f, 0, 1e-8f, -1e8f};
    static const uint16_t h[4] = {0x3c00, 0x8001, 0x7c00, 0x7e00}; /* 1, -tiny, inf, nan */
    static const int64_t i64 = -7;
    static const uint8_t u8[3] = {0, 128, 255};
    const int64_t s23[2] = {2, 3}, s4[1] = {4}, s3[1] = {3}, s0[1] = {0};
    if (attn_safetensors_writer_create(&w) || attn_safetensors_writer_add(w, "w", ATTN_DTYPE_F32, 2, s23, f) ||
        attn_safetensors_writer_add(w, "h", ATTN_DTYPE_F16, 1, s4, h) ||
        attn_safetensors_writer_add(w, "b", ATTN_DTYPE_BF16, 1, s4, h) ||
        attn_safetensors_writer_add(w, "step", ATTN_DTYPE_I64, 0, NULL, &i64) ||
        attn_safetensors_writer_add(w, "u", ATTN_DTYPE_U8, 1, s3, u8) ||
        attn_safetensors_writer_add(w, "empty", ATTN_DTYPE_F64, 1, s0, NULL) ||
        attn_safetensors_writer_add_metadata(w, "format", "pt") ||
        attn_safetensors_writer_add_metadata(w, "note", "caf\xc3\xa9 \"q\""))
        die("safetensors writer");
    void *buf = NULL;
    size_t len = 0;
    if (attn_safetensors_writer_write_memory(w, &buf, &len)) die("safetensors write");
    attn_safetensors_writer_free(w);
    put_variants("safetensors", "mixed", buf, len);
    free(buf);
    /* an empty header, and hand-written headers the writer would never produce */
    put_st("empty.safetensors", "{}", "");
    put_st("overlap.bin",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           "abcd");
    put_st("gap.bin",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[5,6]}}",
           "abcdef");
    put_st("overflow.bin", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}", "");
    put_st("meta_only.safetensors", "{\"__metadata__\":{\"k\":\"v\",\"k2\":\"\\u0000\"}}", "");
    put_st("bad_dtype.bin", "{\"a\":{\"dtype\":\"F33\",\"shape\":[],\"data_offsets\":[0,4]}}", "abcd");
}

static const char *const json_docs[][2] = {
    {"object", "{\"a\": [1, -0, 2.5e-3, true, false, null], \"b\": {\"c\": \"d\\u00e9\\ud83d\\ude00\\n\"}}"},
    {"numbers", "[0, -1, 1e308, -1.7976931348623157e308, 5e-324, 123456789012345678901234567890, 0.1]"},
    {"escapes", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000\\u001f\""},
    {"dupkeys", "{\"k\": 1, \"k\": 2}"},
    {"deep", "[[[[[[[[[[{\"x\":[[[[]]]]}]]]]]]]]]]"},
    {"utf8", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""},
    {"bad_trailing_comma", "[1, 2,]"},
    {"bad_leading_zero", "[01]"},
    {"bad_lone_surrogate", "\"\\ud800\""},
    {"bad_overlong", "\"\xc0\xaf\""},
    {"bad_garbage", "{} x"},
    {"bad_overflow", "1e400"},
    {"bad_unterminated", "{\"a\": \"b"},
    {"bad_control", "\"a\tb\""},
};

static const char *const configs[][2] = {
    {"mha", "{\"module\": \"multihead_attention\", \"embed_dim\": 8, \"num_heads\": 2, \"bias\": true, "
            "\"add_bias_kv\": true, \"add_zero_attn\": true, \"kdim\": 4, \"vdim\": null, \"dropout\": 0.0, "
            "\"need_weights\": true}"},
    {"enc_layer", "{\"module\": \"transformer_encoder_layer\", \"d_model\": 8, \"nhead\": 2, \"dim_feedforward\": 16, "
                  "\"dropout\": 0.1, \"activation\": \"gelu\", \"layer_norm_eps\": 1e-5, \"norm_first\": true}"},
    {"dec_layer", "{\"module\": \"transformer_decoder_layer\", \"d_model\": 8, \"nhead\": 2, \"dim_feedforward\": 16}"},
    {"encoder", "{\"module\": \"transformer_encoder\", \"num_layers\": 2, \"norm\": true, \"enable_nested_tensor\": "
                "false, \"encoder_layer\": {\"d_model\": 8, \"nhead\": 2, \"dim_feedforward\": 8}}"},
    {"decoder", "{\"module\": \"transformer_decoder\", \"num_layers\": 1, \"decoder_layer\": {\"d_model\": 4, "
                "\"nhead\": 1, \"dim_feedforward\": 8}}"},
    {"transformer", "{\"module\": \"transformer\", \"d_model\": 8, \"nhead\": 2, \"num_encoder_layers\": 1, "
                    "\"num_decoder_layers\": 1, \"dim_feedforward\": 16, \"activation\": \"relu\"}"},
    {"sparse", "{\"module\": \"sparse_attention\", \"d_model\": 8, \"num_heads\": 2, \"window_size\": 3}"},
    {"local_global", "{\"module\": \"local_global_attention\", \"d_model\": 8, \"num_heads\": 2, \"local_window\": 2}"},
    {"linear", "{\"module\": \"linear_attention\", \"d_model\": 8, \"num_heads\": 2, \"causal\": true}"},
    {"performer", "{\"module\": \"performer_attention\", \"d_model\": 8, \"num_heads\": 2, \"num_features\": 16}"},
    {"vit", "{\"module\": \"vision_transformer\", \"image_size\": 8, \"patch_size\": 4, \"num_layers\": 1, "
            "\"num_heads\": 2, \"hidden_dim\": 8, \"mlp_dim\": 16, \"num_classes\": 3, \"in_channels\": 1, "
            "\"distilled\": true}"},
    {"bad_heads", "{\"module\": \"transformer\", \"d_model\": 8, \"nhead\": 3}"},
    {"bad_key", "{\"module\": \"multihead_attention\", \"embed_dim\": 8, \"num_heads\": 2, \"colour\": 1}"},
    {"bad_type", "{\"module\": \"transformer_encoder_layer\", \"d_model\": \"8\", \"nhead\": 2}"},
    {"bad_huge", "{\"module\": \"multihead_attention\", \"embed_dim\": 9223372036854775807, \"num_heads\": 1}"},
    {"bad_negative", "{\"module\": \"vision_transformer\", \"image_size\": -8, \"patch_size\": 4, \"num_layers\": 1, "
                     "\"num_heads\": 2, \"hidden_dim\": 8, \"mlp_dim\": 16}"},
    {"bad_module", "{\"module\": \"lstm\"}"},
};

/* The harness's objects (fuzz_checkpoint.c): MHA 4 / 2 heads, AdamW with amsgrad; SGD. */
static void checkpoint_corpus(void) {
    char dir[] = "/tmp/attn_corpus_gen.XXXXXX", path[300];
    if (!mkdtemp(dir)) die("mkdtemp");
    snprintf(path, sizeof path, "%s/c.safetensors", dir);
    attn_mha *mha = NULL;
    attn_mha_config mc = attn_mha_config_default(4, 2);
    if (attn_mha_create(&mc, &mha) || attn_params_reset(attn_mha_params(mha), 3)) die("mha");
    attn_adamw_config ac = attn_adamw_config_default();
    ac.amsgrad = 1;
    attn_optimizer *adamw = NULL, *sgd = NULL;
    attn_sgd_config sc = attn_sgd_config_default();
    sc.momentum = 0.9;
    if (attn_adamw_create(attn_mha_params(mha), &ac, &adamw) || attn_sgd_create(attn_mha_params(mha), &sc, &sgd))
        die("optimizer");
    const attn_train_state ts = {12, 1, 345, 0x5eed, 1000};
    const char *const mk[] = {"run"}, *const mv[] = {"fuzz seed"};
    struct {
        const char *stem;
        attn_optimizer *o;
        const attn_train_state *s;
    } cases[] = {{"adamw", adamw, &ts}, {"sgd", sgd, &ts}, {"model_only", NULL, NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (attn_checkpoint_save(path, attn_mha_params(mha), cases[i].o, cases[i].s, mk, mv, 1)) die("save");
        size_t len = 0;
        unsigned char *b = slurp(path, &len);
        put_variants("checkpoint", cases[i].stem, b, len);
        free(b);
    }
    unlink(path);
    rmdir(dir);
    attn_optimizer_free(adamw);
    attn_optimizer_free(sgd);
    attn_mha_free(mha);
}

static void image_corpus(void) {
    PUT_LIT("image", "p6.ppm", "P6\n# comment\n2 2\n255\n\xff\x00\x00\x00\xff\x00\x00\x00\xff\x80\x80\x80");
    put_str("image", "p5.pgm", "P5 3 1 255 \x01\x80\xfe");
    put_str("image", "p3.ppm", "P3\n2 1\n15\n15 0 0  0 15 7\n");
    put_str("image", "p2.pgm", "P2\n2 2\n65535\n0 65535\n300 4\n");
    PUT_LIT("image", "p6_16bit.ppm", "P6 1 1 65535\n\x12\x34\x56\x78\x9a\xbc");
    put_str("image", "bad_p6_short.ppm", "P6\n4 4\n255\n\x01\x02");
    put_str("image", "bad_p2_big.pgm", "P2\n99999 99999\n255\n0\n");
    put_str("image", "bad_p5_maxval.pgm", "P5 1 1 0 \x01");
    char dir[] = "/tmp/attn_corpus_gen.XXXXXX", path[300];
    if (!mkdtemp(dir)) die("mkdtemp");
    if (attn_image_png_supported()) {
        static uint8_t px[4 * 3 * 3];
        for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 37);
        const int ch[2] = {1, 3};
        for (int k = 0; k < 2; k++) {
            attn_image img = {4, 3, ch[k], px};
            snprintf(path, sizeof path, "%s/i.png", dir);
            if (attn_image_save(path, &img)) die("png");
            size_t len = 0;
            unsigned char *b = slurp(path, &len);
            char name[64];
            snprintf(name, sizeof name, "%s.png", k ? "rgb" : "gray");
            put("image", name, b, len);
            snprintf(name, sizeof name, "bad_%s_cut.png", k ? "rgb" : "gray");
            put("image", name, b, len - 12);
            free(b);
            unlink(path);
        }
    }
    rmdir(dir);
}

/* tokenizer.json seeds: one per family of pipeline (BERT, GPT-2, Llama-3, Llama-2 with Prepend +
 * Replace, Mistral with Metaspace, NFKC with Digits / Punctuation / Split), small vocabularies. */
#define TOK_WP_MODEL                                                                                                   \
    "{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\","                            \
    "\"max_input_chars_per_word\":100,\"vocab\":{\"[UNK]\":0,\"[CLS]\":1,\"[SEP]\":2,\"hello\":3,\"##s\":4,"           \
    "\"world\":5,\"!\":6,\"1\":7,\"caf\":8,\"##e\":9}}"
#define TOK_BL_MODEL                                                                                                   \
    "{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,\"byte_fallback\":false,"                \
    "\"ignore_merges\":true,\"vocab\":{\"h\":0,\"e\":1,\"l\":2,\"o\":3,\"\\u0120\":4,\"w\":5,\"he\":6,\"ll\":7,"       \
    "\"hell\":8,\"hello\":9,\"\\u0120w\":10,\"<|begin_of_text|>\":11,\"'\":12,\"s\":13,\"1\":14,\"2\":15},"            \
    "\"merges\":[\"h e\",\"l l\",\"he ll\",\"hell o\",\"\\u0120 w\"]}"
#define TOK_SP_MODEL                                                                                                   \
    "{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,"       \
    "\"<s>\":1,\"\\u2581\":2,\"h\":3,\"e\":4,\"l\":5,\"o\":6,\"he\":7,\"ll\":8,\"\\u2581he\":9,\"<0x41>\":10,"         \
    "\"<0xC3>\":11,\"<0xA9>\":12,\"<0x0A>\":13,\"1\":14},\"merges\":[[\"h\",\"e\"],[\"l\",\"l\"],[\"\\u2581\",\"he\"]" \
    "]}"
#define TOK_LLAMA3_RE                                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"   \
    "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define TOK_SP_DECODER                                                                                                 \
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":"     \
    "\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,"        \
    "\"stop\":0}]}"
#define TOK_SP_POST                                                                                                    \
    "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":"    \
    "{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],"              \
    "\"tokens\":[\"<s>\"]}}}"
static const char *const tok_seeds[][6] = {
    /* name, added_tokens, normalizer, pre_tokenizer, post_processor, decoder; the model follows */
    {"bert", "[{\"id\":1,\"content\":\"[CLS]\",\"special\":true},{\"id\":2,\"content\":\"[SEP]\",\"special\":true}]",
     "{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,\"strip_accents\":null,"
     "\"lowercase\":true}",
     "{\"type\":\"BertPreTokenizer\"}", "{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",2],\"cls\":[\"[CLS]\",1]}",
     "{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true}"},
    {"gpt2", "[]", "null", "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}",
     "{\"type\":\"ByteLevel\",\"trim_offsets\":true}", "{\"type\":\"ByteLevel\"}"},
    {"llama3", "[{\"id\":11,\"content\":\"<|begin_of_text|>\",\"special\":true}]", "null",
     "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" TOK_LLAMA3_RE "\"},"
     "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
     "\"use_regex\":false}]}",
     "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},{\"type\":\"TemplateProcessing\",\"single\":"
     "[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
     "\"special_tokens\":{\"<|begin_of_text|>\":{\"id\":\"<|begin_of_text|>\",\"ids\":[11]}}}]}",
     "{\"type\":\"ByteLevel\"}"},
    {"llama2", "[{\"id\":1,\"content\":\"<s>\",\"special\":true}]",
     "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},{\"type\":\"Replace\","
     "\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]}",
     "null", TOK_SP_POST, TOK_SP_DECODER},
    {"mistral", "[{\"id\":1,\"content\":\"<s>\",\"special\":true,\"lstrip\":true,\"rstrip\":true}]", "null",
     "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":true}", TOK_SP_POST,
     "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},{\"type\":\"Metaspace\",\"replacement\":"
     "\"\\u2581\",\"prepend_scheme\":\"first\"}]}"},
    {"nfkc", "[]",
     "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Strip\",\"strip_left\":true,"
     "\"strip_right\":true},{\"type\":\"Lowercase\"},{\"type\":\"NFKD\"},{\"type\":\"NFC\"}]}",
     "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":\"Digits\","
     "\"individual_digits\":true},{\"type\":\"Punctuation\",\"behavior\":\"Contiguous\"},{\"type\":\"Split\","
     "\"pattern\":{\"String\":\"e\"},\"behavior\":\"MergedWithNext\",\"invert\":true}]}",
     "null", TOK_SP_DECODER},
};

static void tokenizer_corpus(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizer", root);
    mkdir(dir, 0755);
    for (size_t i = 0; i < sizeof tok_seeds / sizeof tok_seeds[0]; i++) {
        const char *const *p = tok_seeds[i];
        const char *model = !strcmp(p[0], "bert")                              ? TOK_WP_MODEL
                            : !strcmp(p[0], "gpt2") || !strcmp(p[0], "llama3") ? TOK_BL_MODEL
                                                                               : TOK_SP_MODEL;
        char json[8192], name[80];
        int n =
            snprintf(json, sizeof json,
                     "{\"version\":\"1.0\",\"truncation\":%s,\"padding\":null,\"added_tokens\":%s,\"normalizer\":%s,"
                     "\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":%s,\"model\":%s}",
                     i == 1 ? "{\"max_length\":6,\"strategy\":\"LongestFirst\",\"direction\":\"Left\"}" : "null", p[1],
                     p[2], p[3], p[4], p[5], model);
        snprintf(name, sizeof name, "%s.json", p[0]);
        put("tokenizer", name, json, (size_t)n);
        snprintf(name, sizeof name, "%s_half.json", p[0]); /* cut: the reader's errors */
        put("tokenizer", name, json, (size_t)n / 2);
    }
}

/* hf_config seeds (fuzz_hf_config.c): one config.json per family matching the harness's fixed
 * weights (hidden 8, 2 heads, one layer, vocab 16), a few variants (RoPE scaling, Qwen2's sliding
 * layers, a 2^40 vocabulary), and ViT's with its preprocessor_config.json after a NUL. */
static const char *const hf_seeds[][2] = {
    {"bert", "{\"model_type\":\"bert\",\"vocab_size\":16,\"hidden_size\":8,\"num_hidden_layers\":1,"
             "\"num_attention_heads\":2,\"intermediate_size\":16,\"max_position_embeddings\":16,"
             "\"type_vocab_size\":2,\"hidden_act\":\"gelu\",\"layer_norm_eps\":1e-12,\"pad_token_id\":0}"},
    {"gpt2", "{\"model_type\":\"gpt2\",\"vocab_size\":16,\"n_embd\":8,\"n_layer\":1,\"n_head\":2,\"n_positions\":16,"
             "\"n_inner\":null,\"activation_function\":\"gelu_new\",\"layer_norm_epsilon\":1e-05,"
             "\"eos_token_id\":3,\"tie_word_embeddings\":true}"},
    {"llama", "{\"model_type\":\"llama\",\"vocab_size\":16,\"hidden_size\":8,\"intermediate_size\":16,"
              "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,"
              "\"max_position_embeddings\":16,\"rms_norm_eps\":1e-06,\"hidden_act\":\"silu\","
              "\"tie_word_embeddings\":false,\"eos_token_id\":[2,5],"
              "\"rope_parameters\":{\"rope_theta\":10000.0,\"rope_type\":\"default\"}}"},
    {"llama3_rope", "{\"model_type\":\"llama\",\"vocab_size\":16,\"hidden_size\":8,\"intermediate_size\":16,"
                    "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
                    "\"max_position_embeddings\":64,\"rope_theta\":500000.0,\"rope_scaling\":{\"rope_type\":"
                    "\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                    "\"original_max_position_embeddings\":8}}"},
    {"mistral", "{\"model_type\":\"mistral\",\"vocab_size\":16,\"hidden_size\":8,\"intermediate_size\":16,"
                "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,"
                "\"max_position_embeddings\":32,\"sliding_window\":3,\"rope_theta\":10000.0}"},
    {"qwen2", "{\"model_type\":\"qwen2\",\"vocab_size\":16,\"hidden_size\":8,\"intermediate_size\":16,"
              "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
              "\"max_position_embeddings\":32,\"use_sliding_window\":true,\"sliding_window\":2,"
              "\"max_window_layers\":0,\"layer_types\":[\"sliding_attention\"],\"tie_word_embeddings\":false}"},
    {"huge_vocab", "{\"model_type\":\"llama\",\"vocab_size\":1099511627776,\"hidden_size\":8,"
                   "\"intermediate_size\":16,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
                   "\"num_key_value_heads\":1}"},
    {"big_vocab", "{\"model_type\":\"mistral\",\"vocab_size\":2147483647,\"hidden_size\":8,"
                  "\"intermediate_size\":16,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
                  "\"num_key_value_heads\":1}"},
    {"huge_layers", "{\"model_type\":\"bert\",\"vocab_size\":16,\"hidden_size\":8,\"num_hidden_layers\":16777216,"
                    "\"num_attention_heads\":2,\"intermediate_size\":16,\"max_position_embeddings\":16}"},
    {"vit", "{\"model_type\":\"vit\",\"image_size\":8,\"patch_size\":4,\"num_channels\":3,\"hidden_size\":8,"
            "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"intermediate_size\":16,\"hidden_act\":\"gelu\","
            "\"layer_norm_eps\":1e-12,\"qkv_bias\":true,\"id2label\":{\"0\":\"cat\",\"1\":\"dog\"}}"},
};

#define HF_VIT (sizeof hf_seeds / sizeof hf_seeds[0] - 1) /* the last row */

static void hf_config_corpus(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/hf_config", root);
    mkdir(dir, 0755);
    static const char prep[] = "{\"do_resize\":true,\"size\":{\"height\":8,\"width\":8},\"resample\":2,"
                               "\"do_rescale\":true,\"rescale_factor\":0.00392156862745098,\"do_normalize\":true,"
                               "\"image_mean\":[0.5,0.5,0.5],\"image_std\":0.25,\"do_convert_rgb\":true}";
    for (size_t i = 0; i < sizeof hf_seeds / sizeof hf_seeds[0]; i++) {
        char name[80];
        snprintf(name, sizeof name, "%s.json", hf_seeds[i][0]);
        put_str("hf_config", name, hf_seeds[i][1]);
    }
    char buf[2048]; /* ViT's config.json, a NUL, its preprocessor_config.json */
    const size_t a = strlen(hf_seeds[HF_VIT][1]), b = sizeof prep - 1;
    memcpy(buf, hf_seeds[HF_VIT][1], a);
    buf[a] = 0;
    memcpy(buf + a + 1, prep, b);
    put("hf_config", "vit_preprocessor.bin", buf, a + 1 + b);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr,
                "usage: corpus_gen DIR (writes DIR/{safetensors,json,config,checkpoint,image,tokenizer,hf_config}/)\n");
        return 2;
    }
    root = argv[1];
    safetensors_corpus();
    for (size_t i = 0; i < sizeof json_docs / sizeof json_docs[0]; i++) {
        char name[80];
        snprintf(name, sizeof name, "%s.json", json_docs[i][0]);
        put_str("json", name, json_docs[i][1]);
    }
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        char name[80];
        snprintf(name, sizeof name, "%s.json", configs[i][0]);
        put_str("config", name, configs[i][1]);
    }
    checkpoint_corpus();
    image_corpus();
    tokenizer_corpus();
    hf_config_corpus();
    return 0;
}
