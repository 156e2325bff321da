/* Tokenizers (attn/tokenizer.h) on a small hand-written tokenizer.json and vocab.txt: exact ids for
 * hand-checked cases (accents, CJK, punctuation, control chars, whitespace, long words, unk,
 * special tokens typed in the text, lowercase expanding, truncation), the size queries, decoding,
 * the folder forms, and hostile files, each named, answered by a status and a message naming the
 * file and the key, never a crash. Ids equal Hugging Face tokenizers' (tests/hf/tokenizer_parity.py
 * checks that on thousands of generated lines). */
#define _POSIX_C_SOURCE 200809L
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "core/alloc.h"

static char dir[] = "/tmp/attn_test_tokenizer.XXXXXX";
static char path[512];

static const char *write_file(const char *name, const char *text, size_t len) {
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return path;
    fwrite(text, 1, len, f);
    fclose(f);
    return path;
}

static const char *write_text(const char *name, const char *text) { return write_file(name, text, strlen(text)); }

/* The vocabulary, one token a line (ids 0 .. 22). */
static const char *const VOCAB[] = {"[PAD]",
                                    "[UNK]",
                                    "[CLS]",
                                    "[SEP]",
                                    "[MASK]",
                                    "hello",
                                    "world",
                                    "!",
                                    ",",
                                    ".",
                                    "un",
                                    "##aff",
                                    "##able",
                                    "cafe",
                                    "\xe4\xb8\xad", /* 中 */
                                    "\xe5\x9b\xbd", /* 国 */
                                    "##s",
                                    "a",
                                    "##b",
                                    "naive",
                                    "i",
                                    "\xcf\x83" /* σ */,
                                    "x"};
enum { NVOCAB = (int)(sizeof VOCAB / sizeof VOCAB[0]) };

/* A tokenizer.json as tokenizers writes BERT's; NORM, TRUNC, ADDED, POST, MODEL_TYPE replaced. */
static const char BASE[] =
    "{\"version\":\"1.0\",\"truncation\":TRUNC,\"padding\":null,\"added_tokens\":ADDED,"
    "\"normalizer\":NORM,\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"post_processor\":POST,"
    "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
    "\"model\":{\"type\":MODEL_TYPE,\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\","
    "\"max_input_chars_per_word\":100,\"vocab\":VOCAB}}";
static const char NORM[] = "{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,"
                           "\"strip_accents\":null,\"lowercase\":true}";
static const char ADDED[] = "[{\"id\":0,\"content\":\"[PAD]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                            "\"normalized\":false,\"special\":true},"
                            "{\"id\":1,\"content\":\"[UNK]\",\"special\":true,\"normalized\":false},"
                            "{\"id\":2,\"content\":\"[CLS]\",\"special\":true,\"normalized\":false},"
                            "{\"id\":3,\"content\":\"[SEP]\",\"special\":true,\"normalized\":false},"
                            "{\"id\":4,\"content\":\"[MASK]\",\"special\":true,\"normalized\":false}]";
static const char POST[] =
    "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"[CLS]\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}}],"
    "\"pair\":[],\"special_tokens\":{\"[CLS]\":{\"id\":\"[CLS]\",\"ids\":[2],\"tokens\":[\"[CLS]\"]},"
    "\"[SEP]\":{\"id\":\"[SEP]\",\"ids\":[3],\"tokens\":[\"[SEP]\"]}}}";
static const char TRUNC[] = "{\"direction\":\"Right\",\"max_length\":6,\"strategy\":\"LongestFirst\",\"stride\":0}";

static char vocab_json[2048];

/* s with the first occurrence of `from` replaced by `to`, into a static buffer. */
static const char *replace(const char *s, const char *from, const char *to) {
    static char out[2][8192];
    static int k;
    char *o = out[k ^= 1];
    const char *p = strstr(s, from);
    if (!p) {
        snprintf(o, sizeof out[0], "%s", s);
        return o;
    }
    snprintf(o, sizeof out[0], "%.*s%s%s", (int)(p - s), s, to, p + strlen(from));
    return o;
}

/* BASE with the given parts (NULL: the defaults above). */
static const char *json_with(const char *norm, const char *trunc, const char *added, const char *post, const char *type,
                             const char *vocab) {
    const char *s = replace(BASE, "TRUNC", trunc ? trunc : TRUNC);
    s = replace(s, "ADDED", added ? added : ADDED);
    s = replace(s, "NORM", norm ? norm : NORM);
    s = replace(s, "POST", post ? post : POST);
    s = replace(s, "MODEL_TYPE", type ? type : "\"WordPiece\"");
    return replace(s, "VOCAB", vocab ? vocab : vocab_json);
}

static attn_tokenizer *open_json(const char *json) {
    attn_tokenizer *t = NULL;
    CHECK_OK(attn_tokenizer_open(write_text("tokenizer.json", json), &t));
    return t;
}

/* Encode text (len bytes) and compare with want[0..nwant). */
static void expect_ids(const attn_tokenizer *t, const char *what, const char *text, size_t len, int special,
                       int64_t max_length, const int32_t *want, size_t nwant) {
    int32_t ids[256];
    size_t n = 0;
    attn_status st = attn_tokenizer_encode(t, text, len, special, max_length, ids, 256, &n);
    int same = st == ATTN_OK && n == nwant;
    for (size_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    CHECK(same, "%s: status %s (%s), %zu ids (want %zu)", what, attn_status_str(st), attn_last_error(), n, nwant);
}
#define EXPECT(t, what, text, ...)                                                                                     \
    do {                                                                                                               \
        const int32_t w_[] = {__VA_ARGS__};                                                                            \
        expect_ids(t, what, text, sizeof(text) - 1, 1, 0, w_, sizeof w_ / sizeof w_[0]);                               \
    } while (0)

static void expect_text(const attn_tokenizer *t, const char *what, const int32_t *ids, size_t n, int skip,
                        const char *want) {
    char buf[256];
    size_t len = 0;
    attn_status st = attn_tokenizer_decode(t, ids, n, skip, buf, sizeof buf, &len);
    CHECK(st == ATTN_OK && len == strlen(want) && !strcmp(buf, want), "%s: '%s' (want '%s'): %s", what,
          st == ATTN_OK ? buf : "", want, attn_last_error());
}

static void test_bert_json(void) {
    attn_tokenizer *t = open_json(json_with(NULL, "null", NULL, NULL, NULL, NULL));
    if (!t) return;
    CHECK(attn_tokenizer_vocab_size(t) == NVOCAB, "vocab size %lld", (long long)attn_tokenizer_vocab_size(t));
    CHECK(attn_tokenizer_token_to_id(t, "hello") == 5 && attn_tokenizer_token_to_id(t, "nope") == -1, "token_to_id");
    CHECK(!strcmp(attn_tokenizer_id_to_token(t, 11), "##aff") && !attn_tokenizer_id_to_token(t, NVOCAB) &&
              !attn_tokenizer_id_to_token(t, -1),
          "id_to_token");
    CHECK(attn_tokenizer_pad_id(t) == 0, "pad id %d", attn_tokenizer_pad_id(t));
    EXPECT(t, "punctuation", "Hello, World!", 2, 5, 8, 6, 7, 3);
    EXPECT(t, "subwords", "unaffable", 2, 10, 11, 12, 3);
    EXPECT(t, "accent (composed)", "Caf\xc3\xa9", 2, 13, 3);
    EXPECT(t, "accent (decomposed, stacked marks)", "CAFE\xcc\x81\xcc\xa3", 2, 13, 3);
    EXPECT(t, "accents everywhere", "n\xc3\xa4\xc3\xafv\xc3\xa9", 2, 19, 3);
    EXPECT(t, "CJK chars are words", "\xe4\xb8\xad\xe5\x9b\xbds", 2, 14, 15, 1, 3);
    EXPECT(t, "control chars dropped, joining words", "hello\x01world", 2, 1, 3);
    EXPECT(t, "U+FFFD dropped", "hel\xef\xbf\xbdlo", 2, 5, 3);
    EXPECT(t, "whitespace: tab, ideographic space, no-break space", "hello\tworld\xe3\x80\x80!\xc2\xa0.", 2, 5, 6, 7, 9,
           3);
    EXPECT(t, "unknown word", "xyz hello", 2, 1, 5, 3);
    EXPECT(t, "special tokens in the raw text", "hello[SEP]world [MASK]", 2, 5, 3, 6, 4, 3);
    EXPECT(t, "a special token's lowercase is text", "[sep]", 2, 1, 1, 1, 3);
    EXPECT(t, "U+0130 lowercases to i + U+0307, stripped", "\xc4\xb0", 2, 20, 3);
    EXPECT(t, "final sigma lowercases to sigma char by char", "\xce\xa3", 2, 21, 3);
    EXPECT(t, "empty text", "", 2, 3);
    EXPECT(t, "only whitespace and controls", " \t\x01 ", 2, 3);
    /* a word of 100 chars is split; 101 chars is [UNK] */
    char word[128] = "a";
    int32_t want[128] = {2, 17};
    for (int i = 1; i < 100; i++) word[i] = 'b', want[i + 1] = 18;
    want[101] = 3;
    expect_ids(t, "a word of 100 chars", word, 100, 1, 0, want, 102);
    word[100] = 'b';
    const int32_t unk[] = {2, 1, 3};
    expect_ids(t, "a word of 101 chars", word, 101, 1, 0, unk, 3);
    const int32_t nospec[] = {5, 6};
    expect_ids(t, "no special tokens", "hello world", 11, 0, 0, nospec, 2);
    const int32_t trunc3[] = {2, 5, 3};
    expect_ids(t, "max_length 3", "hello world", 11, 1, 3, trunc3, 3);
    /* size queries and errors */
    size_t n = 99;
    int32_t small[2] = {-7, -7};
    CHECK_STATUS(attn_tokenizer_encode(t, "hello world", 11, 1, 0, NULL, 0, &n), ATTN_ERR_WORKSPACE);
    CHECK(n == 4, "size query: %zu", n);
    CHECK_STATUS(attn_tokenizer_encode(t, "hello world", 11, 1, 0, small, 1, &n), ATTN_ERR_WORKSPACE);
    CHECK(n == 4 && small[1] == -7, "nothing past cap");
    CHECK_STATUS(attn_tokenizer_encode(t, "hello world", 11, 1, 1, small, 2, &n), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_tokenizer_encode(t, "bad \xc3\x28", 6, 1, 0, small, 2, &n), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_tokenizer_encode(t, "\xed\xa0\x80", 3, 1, 0, small, 2, &n), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_tokenizer_encode(t, "x", 1, 1, -1, small, 2, &n), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_tokenizer_encode(NULL, "x", 1, 1, 0, small, 2, &n), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_tokenizer_encode(t, NULL, 1, 1, 0, small, 2, &n), ATTN_ERR_INVALID_ARGUMENT);
    /* decoding */
    const int32_t ids[] = {2, 5, 8, 6, 7, 3};
    expect_text(t, "decode", ids, 6, 0, "[CLS] hello, world! [SEP]");
    expect_text(t, "decode skipping special tokens", ids, 6, 1, "hello, world!");
    const int32_t sub[] = {10, 11, 12, 9, 999, -3, 16};
    expect_text(t, "decode subwords, unknown ids skipped", sub, 7, 1, "unaffable.s");
    const int32_t lead[] = {16, 17};
    expect_text(t, "a leading ## stays", lead, 2, 1, "##s a");
    char buf[8] = "zzzzzzz";
    size_t len = 0;
    CHECK_STATUS(attn_tokenizer_decode(t, ids, 6, 0, NULL, 0, &len), ATTN_ERR_WORKSPACE);
    CHECK(len == 25, "decode size query: %zu", len);
    CHECK_STATUS(attn_tokenizer_decode(t, ids, 6, 0, buf, 4, &len), ATTN_ERR_WORKSPACE);
    CHECK(buf[4] == 'z', "decode writes nothing past cap");
    attn_tokenizer_free(t);
}

static void test_variants(void) {
    /* the tokenizer.json's truncation: 6 ids with [CLS] and [SEP] */
    attn_tokenizer *t = open_json(json_with(NULL, NULL, NULL, NULL, NULL, NULL));
    if (t) {
        CHECK(attn_tokenizer_max_length(t) == 6, "max length");
        EXPECT(t, "truncation", "hello world hello world hello", 2, 5, 6, 5, 6, 3);
        const int32_t w[] = {5, 6, 5, 6, 5, 6};
        expect_ids(t, "truncation without special tokens", "hello world hello world hello world x", 37, 0, 0, w, 6);
        attn_tokenizer_free(t);
    }
    t = open_json(json_with(NULL, replace(TRUNC, "Right", "Left"), NULL, NULL, NULL, NULL));
    if (t) {
        EXPECT(t, "left truncation", "x hello world hello world", 2, 5, 6, 5, 6, 3);
        attn_tokenizer_free(t);
    }
    /* cased, accents kept, no Chinese handling, no cleaning; U+0130 stays i + U+0307 when lowercased */
    t = open_json(json_with("{\"type\":\"BertNormalizer\",\"clean_text\":false,\"handle_chinese_chars\":false,"
                            "\"strip_accents\":false,\"lowercase\":true}",
                            "null", NULL, NULL, NULL, NULL));
    if (t) {
        EXPECT(t, "U+0130 unstripped", "\xc4\xb0", 2, 1, 3);
        EXPECT(t, "accent kept", "caf\xc3\xa9", 2, 1, 3);
        EXPECT(t, "CJK glued", "\xe4\xb8\xad\xe5\x9b\xbd", 2, 1, 3);
        EXPECT(t, "controls kept in the word", "hel\x01lo", 2, 1, 3);
        attn_tokenizer_free(t);
    }
    t = open_json(json_with("{\"type\":\"BertNormalizer\",\"lowercase\":false}", "null", NULL,
                            "{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",3],\"cls\":[\"[CLS]\",2]}", NULL, NULL));
    if (t) {
        EXPECT(t, "cased", "Hello hello", 2, 1, 5, 3);
        attn_tokenizer_free(t);
    }
    /* lstrip / rstrip added tokens, and a new (non-vocabulary) added token */
    t = open_json(json_with(NULL, "null",
                            "[{\"id\":4,\"content\":\"[MASK]\",\"special\":true,\"lstrip\":true,\"rstrip\":true},"
                            "{\"id\":23,\"content\":\"<x>\",\"special\":false},{\"id\":3,\"content\":\"[SEP]\","
                            "\"special\":true}]",
                            "null", NULL, NULL));
    if (t) {
        EXPECT(t, "added tokens, lstrip / rstrip", "hello  [MASK]  world<x>", 5, 4, 6, 23);
        const int32_t ids[] = {5, 4, 23, 3};
        expect_text(t, "decode added tokens", ids, 4, 0, "hello [MASK] <x> [SEP]");
        expect_text(t, "decode added tokens, skipping special ones", ids, 4, 1, "hello <x>");
        CHECK(attn_tokenizer_vocab_size(t) == 24 && attn_tokenizer_token_to_id(t, "<x>") == 23, "added token id");
        attn_tokenizer_free(t);
    }
    /* a normalized added token: matched in the lowercased, accent-stripped text, as its own normalized form */
    t = open_json(json_with(NULL, "null",
                            "[{\"id\":3,\"content\":\"[SEP]\",\"special\":true},{\"id\":23,\"content\":\"[NEW]\","
                            "\"special\":false,\"normalized\":true,\"lstrip\":true}]",
                            "null", NULL, NULL));
    if (t) {
        EXPECT(t, "normalized added token", "a [new] [NEW]x[SEP] [N\xc3\xa9W]", 17, 23, 23, 22, 3, 23);
        attn_tokenizer_free(t);
    }
}

static void test_vocab_txt(void) {
    char text[1024] = "";
    for (int i = 0; i < NVOCAB; i++) {
        if (i == 4) continue; /* no [MASK]: it is appended, id 22 */
        strcat(text, VOCAB[i]);
        strcat(text, i == 10 ? "\r\n" : "\n");
    }
    attn_tokenizer *t = NULL;
    CHECK_OK(attn_tokenizer_open(write_text("vocab.txt", text), &t));
    if (t) {
        EXPECT(t, "vocab.txt", "Hello, Caf\xc3\xa9 un##aff", 2, 4, 7, 12, 9, 1, 1, 1, 3);
        CHECK(attn_tokenizer_token_to_id(t, "[MASK]") == NVOCAB - 1 && attn_tokenizer_pad_id(t) == 0, "[MASK] %d",
              attn_tokenizer_token_to_id(t, "[MASK]"));
        attn_tokenizer_free(t);
    }
    /* the folder: vocab.txt with tokenizer_config.json (cased, model_max_length 4) */
    unlink(write_text("tokenizer.json", ""));
    write_text("tokenizer_config.json", "{\"do_lower_case\": false, \"model_max_length\": 4, "
                                        "\"unk_token\": {\"content\": \"x\", \"__type\": \"AddedToken\"}}");
    CHECK_OK(attn_tokenizer_open(dir, &t));
    if (t) {
        EXPECT(t, "folder, cased, unk x, truncated", "Hello hello world", 2, 21, 4, 3);
        attn_tokenizer_free(t);
    }
    /* the folder prefers tokenizer.json; model_max_length applies when it has no truncation */
    write_text("tokenizer.json", json_with(NULL, "null", NULL, NULL, NULL, NULL));
    CHECK_OK(attn_tokenizer_open(dir, &t));
    if (t) {
        EXPECT(t, "folder with tokenizer.json", "Hello hello world", 2, 5, 5, 3);
        attn_tokenizer_free(t);
    }
    unlink(write_text("tokenizer_config.json", ""));
    unlink(write_text("tokenizer.json", ""));
}

/* A hostile tokenizer.json: status want and a message holding `key`. */
static void expect_bad_json(const char *what, const char *json, attn_status want, const char *key) {
    attn_tokenizer *t = (attn_tokenizer *)&t;
    attn_clear_error();
    attn_status st = attn_tokenizer_open(write_text("bad.json", json), &t);
    CHECK(st == want && !t && strstr(attn_last_error(), key), "%s: %s (want %s), '%s' (want '%s')", what,
          attn_status_str(st), attn_status_str(want), attn_last_error(), key);
    if (st == ATTN_OK) attn_tokenizer_free(t);
}

/* BASE with its pre-tokenizer, normalizer or decoder replaced: status want, a message holding key. */
static void expect_bad_step(const char *what, const char *pre, const char *norm, const char *dec, attn_status want,
                            const char *key) {
    const char *s = json_with(norm, NULL, NULL, NULL, NULL, NULL);
    if (pre) s = replace(s, "{\"type\":\"BertPreTokenizer\"}", pre);
    if (dec) s = replace(s, "{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true}", dec);
    expect_bad_json(what, s, want, key);
}

/* The pre-tokenizers, normalizers, decoders and post-processors of Llama / Mistral / Qwen files,
 * given wrong values: each an error naming the key. */
static void test_hostile_steps(void) {
    const attn_status INV = ATTN_ERR_INVALID_ARGUMENT, UNS = ATTN_ERR_UNSUPPORTED;
    expect_bad_step("Split with another regex",
                    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+|[^\\\\w\\\\s]+\"},\"behavior\":\"Isolated\","
                    "\"invert\":false}",
                    NULL, NULL, UNS,
                    "bad.json: pre_tokenizer.pattern.Regex: unsupported: the regex \"\\w+|[^\\w\\s]+\"");
    expect_bad_step("Split's regex a number",
                    "{\"type\":\"Split\",\"pattern\":{\"Regex\":7},\"behavior\":\"Isolated\",\"invert\":false}", NULL,
                    NULL, INV, "pre_tokenizer.pattern.Regex: expected a string, got number");
    expect_bad_step("Split's pattern a number", "{\"type\":\"Split\",\"pattern\":7,\"behavior\":\"Isolated\"}", NULL,
                    NULL, INV, "pre_tokenizer.pattern: expected an object");
    expect_bad_step("Split's behavior unknown",
                    "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Sideways\"}", NULL, NULL, INV,
                    "pre_tokenizer.behavior: unknown: Sideways");
    expect_bad_step("Split without behavior", "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"}}", NULL, NULL, INV,
                    "pre_tokenizer.behavior: missing");
    expect_bad_step("Split's empty string",
                    "{\"type\":\"Split\",\"pattern\":{\"String\":\"\"},\"behavior\":\"Removed\"}", NULL, NULL, UNS,
                    "pre_tokenizer.pattern.String: unsupported: an empty pattern");
    expect_bad_step("Metaspace's replacement two chars",
                    "{\"type\":\"Metaspace\",\"replacement\":\"ab\",\"prepend_scheme\":\"always\",\"split\":true}",
                    NULL, NULL, INV, "pre_tokenizer.replacement: not one char");
    expect_bad_step("Metaspace's prepend_scheme unknown",
                    "{\"type\":\"Metaspace\",\"replacement\":\"_\",\"prepend_scheme\":\"sometimes\"}", NULL, NULL, INV,
                    "pre_tokenizer.prepend_scheme: unknown: sometimes");
    expect_bad_step("Digits' flag a string",
                    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":\"y\"}]}",
                    NULL, NULL, INV, "pre_tokenizer.pretokenizers[0].individual_digits: expected a boolean");
    expect_bad_step("Replace with a regex", NULL,
                    "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\" \"}", NULL, UNS,
                    "normalizer.pattern: unsupported: the regex \" {2,}\"");
    expect_bad_step("Replace without content", NULL, "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"}}", NULL, INV,
                    "normalizer.content: missing");
    expect_bad_step("Prepend a number", NULL, "{\"type\":\"Prepend\",\"prepend\":1}", NULL, INV,
                    "normalizer.prepend: expected a string");
    expect_bad_step("Strip's flag a number", NULL, "{\"type\":\"Strip\",\"strip_left\":1}", NULL, INV,
                    "normalizer.strip_left: expected a boolean");
    expect_bad_step("Strip decoder's content two chars", NULL, NULL,
                    "{\"type\":\"Strip\",\"content\":\"ab\",\"start\":1,\"stop\":0}", INV,
                    "decoder.content: not one char");
    expect_bad_step("Strip decoder's start negative", NULL, NULL,
                    "{\"type\":\"Strip\",\"content\":\" \",\"start\":-1,\"stop\":0}", INV, "decoder.start");
    expect_bad_step("decoders not an array", NULL, NULL, "{\"type\":\"Sequence\",\"decoders\":\"x\"}", INV,
                    "decoder.decoders: expected an array");
    expect_bad_step("unknown decoder in a sequence", NULL, NULL,
                    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"CTC\"}]}", UNS,
                    "decoder.decoders[1].type = CTC");
    char post[2048];
    snprintf(post, sizeof post, "{\"type\":\"Sequence\",\"processors\":[%s,%s]}", POST, POST);
    expect_bad_json("two templates", json_with(NULL, NULL, NULL, post, NULL, NULL), UNS,
                    "post_processor: unsupported: two processors adding tokens");
    expect_bad_json("processors an object",
                    json_with(NULL, NULL, NULL, "{\"type\":\"Sequence\",\"processors\":{}}", NULL, NULL), INV,
                    "post_processor.processors: expected an array");
}

/* A SentencePiece-style BPE (Llama-2 / Mistral): "\u2581" for spaces, byte_fallback over <0xNN>
 * tokens, <s> before the text; NORMALIZER / PRETOK replaced by the variant under test. */
static const char SP[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\","
    "\"special\":true},{\"id\":1,\"content\":\"<s>\",\"special\":true}],\"normalizer\":NORMALIZER,"
    "\"pre_tokenizer\":PRETOK,\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
    "{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":"
    "{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},\"decoder\":{\"type\":\"Sequence\",\"decoders\":"
    "[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},"
    "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},\"model\":{\"type\":\"BPE\","
    "\"dropout\":null,\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,\"ignore_merges\":false,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"<0xC3>\":2,\"<0xA9>\":3,\"<0x0A>\":4,\"\\u2581\":5,\"h\":6,\"e\":7,\"l\":8,"
    "\"o\":9,\"he\":10,\"ll\":11,\"llo\":12,\"hello\":13,\"\\u2581hello\":14,\"w\":15,\"\\u2581w\":16,\"x\":17},"
    "\"merges\":[\"h e\",\"l l\",\"ll o\",\"he llo\",\"\\u2581 hello\",\"\\u2581 w\"]}}";
static const char SP_NORM[] = "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]}";

static void test_sentencepiece(void) {
    for (int v = 0; v < 3; v++) { /* Prepend + Replace; Metaspace first; Metaspace always */
        const char *s = replace(SP, "NORMALIZER", v ? "null" : SP_NORM);
        s = replace(s, "PRETOK",
                    !v       ? "null"
                    : v == 1 ? "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\","
                               "\"split\":true}"
                             : "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\","
                               "\"split\":false}");
        attn_tokenizer *t = open_json(s);
        if (!t) continue;
        EXPECT(t, "merges over the \u2581 words", "hello wx", 1, 14, 16, 17);
        EXPECT(t, "byte fallback for a char outside the vocabulary", "h\xc3\xa9", 1, 5, 6, 2, 3);
        EXPECT(t, "unknown chars without byte tokens: one fused <unk>", "qz", 1, 5, 0);
        if (v == 1) /* prepend_scheme first: not after the <s> typed at the start */
            EXPECT(t, "Metaspace first after an added token", "<s>hello", 1, 1, 13);
        else /* every segment gets its \u2581 (Prepend; Metaspace always) */
            EXPECT(t, "prepended after an added token", "<s>hello", 1, 1, 14);
        const int32_t a[] = {1, 14, 16, 17}, b[] = {5, 6, 2, 3}, c[] = {2, 6}, d[] = {1, 13, 4};
        expect_text(t, "decode: \u2581 to spaces, the first stripped", a, 4, 1, "hello wx");
        expect_text(t, "decode: bytes joined into UTF-8", b, 4, 1, "h\xc3\xa9");
        expect_text(t, "decode: a lone byte is U+FFFD", c, 2, 1, "\xef\xbf\xbdh");
        expect_text(t, "decode: special kept", d, 3, 0, "<s>hello\n");
        attn_tokenizer_free(t);
    }
}

/* Llama-3's pre-tokenizer (Split with its regex, then ByteLevel without regex) over the GPT-2 BPE
 * below: contractions in any case, digits by threes, whitespace runs before letters and newlines. */
static void test_llama3_split(void);

/* BPE with from replaced by to: status want, a message holding key. */
static void expect_bad_json_bpe(const char *what, const char *from, const char *to, attn_status want, const char *key);

static void test_hostile(void) {
    const attn_status INV = ATTN_ERR_INVALID_ARGUMENT, UNS = ATTN_ERR_UNSUPPORTED;
    expect_bad_json("not JSON", "{\"model\": ", INV, "bad.json: line 1");
    expect_bad_json("root not an object", "[1, 2]", INV, "bad.json: (root): expected an object");
    expect_bad_json("no model", "{\"version\": \"1.0\"}", INV, "bad.json: model: missing");
    expect_bad_json("Unigram model", json_with(NULL, NULL, NULL, NULL, "\"Unigram\"", NULL), UNS,
                    "unsupported: model.type = Unigram");
    expect_bad_json("model.type a number", json_with(NULL, NULL, NULL, NULL, "7", NULL), INV,
                    "model.type: expected a string");
    expect_bad_json("vocab an array", json_with(NULL, NULL, NULL, NULL, NULL, "[]"), INV,
                    "model.vocab: expected an object");
    expect_bad_json("vocab id a string", json_with(NULL, NULL, "[]", "null", NULL, "{\"a\":\"0\"}"), INV,
                    "model.vocab: the id of token #0");
    expect_bad_json("vocab id negative", json_with(NULL, NULL, "[]", "null", NULL, "{\"a\":-1}"), INV, "model.vocab");
    expect_bad_json("vocab id huge", json_with(NULL, NULL, "[]", "null", NULL, "{\"a\":1e300}"), INV, "model.vocab");
    expect_bad_json("vocab id out of range", json_with(NULL, NULL, "[]", "null", NULL, "{\"a\":0,\"b\":2}"), INV,
                    "model.vocab");
    expect_bad_json("vocab ids repeated", json_with(NULL, NULL, "[]", "null", NULL, "{\"a\":0,\"b\":0}"), INV,
                    "id 0 is given to two tokens");
    expect_bad_json("duplicate key", json_with(NULL, NULL, "[]", "null", NULL, "{\"a\":0,\"a\":1}"), INV, "bad.json");
    expect_bad_json("unsupported normalizer", json_with("{\"type\":\"Precompiled\"}", NULL, NULL, NULL, NULL, NULL),
                    UNS, "unsupported: normalizer.type = Precompiled");
    expect_bad_json(
        "unsupported in a sequence",
        json_with("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Nmt\"}]}", NULL, NULL, NULL, NULL, NULL), UNS,
        "normalizer.normalizers[0].type = Nmt");
    expect_bad_json("lowercase a string",
                    json_with("{\"type\":\"BertNormalizer\",\"lowercase\":\"yes\"}", NULL, NULL, NULL, NULL, NULL), INV,
                    "normalizer.lowercase: expected a boolean");
    expect_bad_json("unsupported pre-tokenizer",
                    replace(json_with(NULL, NULL, NULL, NULL, NULL, NULL), "BertPreTokenizer", "UnicodeScripts"), UNS,
                    "pre_tokenizer.type = UnicodeScripts");
    expect_bad_json("Metaspace without its replacement",
                    replace(json_with(NULL, NULL, NULL, NULL, NULL, NULL), "BertPreTokenizer", "Metaspace"), INV,
                    "bad.json: pre_tokenizer.replacement: missing");
    test_hostile_steps();
    expect_bad_json("added_tokens an object", json_with(NULL, NULL, "{}", NULL, NULL, NULL), INV,
                    "added_tokens: expected an array");
    expect_bad_json("added token id huge",
                    json_with(NULL, NULL, "[{\"id\":1000000000000,\"content\":\"q\"}]", NULL, NULL, NULL), INV,
                    "added_tokens[0].id");
    expect_bad_json("added token id past the vocabulary",
                    json_with(NULL, NULL, "[{\"id\":5000,\"content\":\"q\"}]", NULL, NULL, NULL), INV, "added_tokens");
    expect_bad_json("added token content a number",
                    json_with(NULL, NULL, "[{\"id\":1,\"content\":5}]", NULL, NULL, NULL), INV,
                    "added_tokens[0].content: expected a string");
    expect_bad_json("added token empty", json_with(NULL, NULL, "[{\"id\":1,\"content\":\"\"}]", NULL, NULL, NULL), INV,
                    "added_tokens[0].content: empty");
    expect_bad_json("truncation max_length a string", json_with(NULL, "{\"max_length\":\"x\"}", NULL, NULL, NULL, NULL),
                    INV, "truncation.max_length: expected an integer");
    expect_bad_json("truncation OnlySecond",
                    json_with(NULL, replace(TRUNC, "LongestFirst", "OnlySecond"), NULL, NULL, NULL, NULL), UNS,
                    "truncation.strategy: unsupported: OnlySecond");
    char post[1024];
    snprintf(post, sizeof post, "%s", replace(POST, "\"[CLS]\":{", "\"[C]\":{"));
    expect_bad_json("template's special token missing", json_with(NULL, NULL, NULL, post, NULL, NULL), INV,
                    "post_processor.special_tokens[\"[CLS]\"].ids: missing");
    snprintf(post, sizeof post, "%s", replace(POST, "[2]", "[99999]"));
    expect_bad_json("template's id out of range", json_with(NULL, NULL, NULL, post, NULL, NULL), INV,
                    "is not an id of the vocabulary");
    expect_bad_json("RobertaProcessing", json_with(NULL, NULL, NULL, "{\"type\":\"RobertaProcessing\"}", NULL, NULL),
                    UNS, "post_processor.type = RobertaProcessing");
    expect_bad_json(
        "Metaspace decoder",
        replace(json_with(NULL, NULL, NULL, NULL, NULL, NULL), "\"WordPiece\",\"prefix\"", "\"CTC\",\"prefix\""), UNS,
        "decoder.type = CTC");
    expect_bad_json("invalid UTF-8", "{\"model\": \"\xc3\x28\"}", INV, "bad.json");
    char deep[3000];
    memset(deep, '[', 2999);
    deep[2999] = '\0';
    expect_bad_json("deeply nested", deep, INV, "bad.json");
    /* missing unk: an error when needed, not at open */
    attn_tokenizer *t = open_json(json_with(NULL, "null", "[]", "null", NULL, "{\"a\":0}"));
    if (t) {
        int32_t ids[4];
        size_t n;
        CHECK_STATUS(attn_tokenizer_encode(t, "b", 1, 1, 0, ids, 4, &n), ATTN_ERR_NOT_FOUND);
        CHECK_OK(attn_tokenizer_encode(t, "a", 1, 1, 0, ids, 4, &n));
        CHECK(attn_tokenizer_pad_id(t) == -1, "no pad id");
        attn_tokenizer_free(t);
    }
    /* files and folders */
    attn_tokenizer *u = NULL;
    CHECK_STATUS(attn_tokenizer_open("/nonexistent/tokenizer.json", &u), ATTN_ERR_IO);
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    mkdir(empty, 0700);
    CHECK_STATUS(attn_tokenizer_open(empty, &u), ATTN_ERR_NOT_FOUND);
    rmdir(empty);
    CHECK_STATUS(attn_tokenizer_open(write_text("v.txt", "a\n\xff\n"), &u), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "v.txt: line 2: invalid UTF-8") != NULL, "%s", attn_last_error());
    CHECK_STATUS(attn_tokenizer_open(write_file("v.txt", "a\nb\0c\n", 6), &u), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "line 2: holds a NUL") != NULL, "%s", attn_last_error());
    unlink(write_text("tokenizer.json", ""));
    write_text("vocab.txt", "a\n");
    write_text("tokenizer_config.json", "{\"do_lower_case\": \"yes\"}");
    CHECK_STATUS(attn_tokenizer_open(dir, &u), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "tokenizer_config.json: do_lower_case") != NULL, "%s", attn_last_error());
    CHECK_STATUS(attn_tokenizer_open(NULL, &u), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_tokenizer_open(dir, NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_tokenizer_free(NULL);
    const char *names[] = {"bad.json", "v.txt", "vocab.txt", "tokenizer_config.json"};
    for (int i = 0; i < 4; i++) unlink(write_text(names[i], ""));
}

/* A byte-level BPE tokenizer.json as tokenizers writes GPT-2's: "\u0120" is the space's char, "\u00c3"
 * and "\u00a9" the bytes of U+00E9, "\u010a" the newline's. */
static const char BPE[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":0,\"content\":\""
    "<|endoftext|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"speci"
    "al\":true}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false"
    ",\"trim_offsets\":true,\"use_regex\":true},\"post_processor\":{\"type\":\"ByteLevel\",\"add_prefix_s"
    "pace\":true,\"trim_offsets\":false,\"use_regex\":true},\"decoder\":{\"type\":\"ByteLevel\",\"add_pre"
    "fix_space\":true,\"trim_offsets\":true,\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"dropout\":n"
    "ull,\"unk_token\":null,\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\",\"fuse_unk\":f"
    "alse,\"byte_fallback\":false,\"ignore_merges\":false,\"vocab\":{\"<|endoftext|>\":0,\"h\":1,\"e\":2,"
    "\"l\":3,\"o\":4,\"\\u0120\":5,\"w\":6,\"r\":7,\"d\":8,\"'\":9,\"s\":10,\"he\":11,\"ll\":12,\"llo\":1"
    "3,\"hello\":14,\"\\u0120w\":15,\"'s\":16,\"\\u00c3\":17,\"\\u00a9\":18,\"\\u00c3\\u00a9\":19,\"!\":2"
    "0,\"\\u010a\":21,\"x\":22,\"\\u0120\\u0120\":23},\"merges\":[[\"h\",\"e\"],[\"l\",\"l\"],[\"ll\",\"o"
    "\"],[\"he\",\"llo\"],[\"\\u0120\",\"w\"],[\"'\",\"s\"],[\"\\u00c3\",\"\\u00a9\"],[\"\\u0120\",\"\\u0"
    "120\"]]}}";

static void test_bpe(void) {
    attn_tokenizer *t = open_json(BPE);
    if (!t) return;
    EXPECT(t, "merges in rank order", "hello", 14);
    EXPECT(t, "a space joins the next word", "hello world!", 14, 15, 4, 7, 3, 8, 20);
    EXPECT(t, "contraction", "he's", 11, 16);
    EXPECT(t, "UTF-8 bytes merged", "x\xc3\xa9", 22, 19);
    EXPECT(t, "whitespace run less its last space", "  hello", 5, 5, 14);
    EXPECT(t, "special token", "<|endoftext|>hello", 0, 14);
    EXPECT(t, "chars outside the vocabulary dropped", "a   b", 23, 5);
    size_t n = 7;
    CHECK_OK(attn_tokenizer_encode(t, "z", 1, 1, 0, NULL, 0, &n));
    CHECK(n == 0, "no ids: %zu", n);
    const int32_t ids[] = {14, 15, 4, 7, 3, 8, 20};
    expect_text(t, "byte-level decode", ids, 7, 0, "hello world!");
    const int32_t half[] = {17, 17, 18};
    expect_text(t, "invalid UTF-8 decodes to U+FFFD", half, 3, 0, "\xef\xbf\xbd\xc3\xa9");
    const int32_t eot[] = {0, 14, 21, 5};
    expect_text(t, "special token kept", eot, 4, 0, "<|endoftext|>hello\n ");
    expect_text(t, "special token skipped", eot, 2, 1, "hello");
    attn_tokenizer_free(t);
    /* hostile BPE files */
    expect_bad_json_bpe("merges missing", "\"merges\":[", "\"merge\":[", ATTN_ERR_INVALID_ARGUMENT,
                        "model.merges: missing");
    expect_bad_json_bpe("merge of unknown tokens", "[\"h\",\"e\"]", "[\"h\",\"q\"]", ATTN_ERR_INVALID_ARGUMENT,
                        "model.merges: [0]: 'q' is not in the vocabulary");
    expect_bad_json_bpe("merge a number", "[\"h\",\"e\"]", "7", ATTN_ERR_INVALID_ARGUMENT,
                        "model.merges: [0] is neither");
    expect_bad_json_bpe("dropout", "\"dropout\":null", "\"dropout\":0.1", ATTN_ERR_UNSUPPORTED,
                        "model.dropout: unsupported");
    expect_bad_json_bpe(
        "suffix past 64 bytes", "\"end_of_word_suffix\":\"\"",
        "\"end_of_word_suffix\":\"<---------------------------------------------------------------------->\"",
        ATTN_ERR_UNSUPPORTED, "model.end_of_word_suffix: unsupported: longer than 64 bytes");
    expect_bad_json_bpe("merge's right part shorter than the prefix", "\"continuing_subword_prefix\":\"\"",
                        "\"continuing_subword_prefix\":\"##\"", ATTN_ERR_INVALID_ARGUMENT,
                        "model.merges: [0]: 'e' is shorter than the continuing_subword_prefix");
    expect_bad_json_bpe("Strip decoder's start absurd", "\"decoder\":{\"type\":\"ByteLevel\",",
                        "\"decoder\":{\"type\":\"Strip\",\"content\":\" \",\"start\":99999999999,\"stop\":0,",
                        ATTN_ERR_INVALID_ARGUMENT, "decoder.start: 99999999999 is above 2147483647");
    char seq[1024] = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Sequence\",\"pretokenizers\":[";
    for (int i = 0; i < 17; i++) strcat(seq, i ? ",{\"type\":\"Digits\"}" : "{\"type\":\"Digits\"}");
    strcat(seq, "]}]}");
    expect_bad_json_bpe("more than 16 pre-tokenizer steps",
                        "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}",
                        seq, ATTN_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].pretokenizers[16]: more than 16");
    /* a merge of a token with the empty token gives the token itself, repeated merges: no loop, the
     * merges that make sense still apply */
    attn_tokenizer *u = open_json(replace(replace(BPE, "\"x\":22,", "\"x\":22,\"\":24,"), "\"merges\":[",
                                          "\"merges\":[\"h \",[\"h\",\"\"],[\"he\",\"llo\"],"));
    if (u) {
        EXPECT(u, "self-merges are inert", "hello", 14);
        attn_tokenizer_free(u);
    }
    expect_bad_json_bpe("byte_fallback a string", "\"byte_fallback\":false", "\"byte_fallback\":\"yes\"",
                        ATTN_ERR_INVALID_ARGUMENT, "model.byte_fallback: expected a boolean");
    expect_bad_json_bpe("merge of a token and an unknown concatenation", "[\"h\",\"e\"]", "[\"e\",\"h\"]",
                        ATTN_ERR_INVALID_ARGUMENT, "model.merges: [0]: 'eh' is not in the vocabulary");
}

static void expect_bad_json_bpe(const char *what, const char *from, const char *to, attn_status want, const char *key) {
    expect_bad_json(what, replace(BPE, from, to), want, key);
}

static void test_llama3_split(void) {
    static const char pre[] =
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|"
        "'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*["
        "\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
        "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}";
    char json[sizeof BPE + sizeof pre + 64];
    const char *s = replace(BPE,
                            "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                            "\"use_regex\":true}",
                            pre);
    s = replace(s, "\"x\":22,", "\"x\":22,\"'x\":24,\"S\":25,\"'S\":26,"); /* merges of ' with letters */
    snprintf(json, sizeof json, "%s", replace(s, "\"merges\":[", "\"merges\":[[\"'\",\"x\"],[\"'\",\"S\"],"));
    attn_tokenizer *t = open_json(json);
    if (!t) return;
    EXPECT(t, "Llama-3: words, a space joins the next", "hello world!", 14, 15, 4, 7, 3, 8, 20);
    EXPECT(t, "Llama-3: 's a contraction", "he's", 11, 16);
    EXPECT(t, "Llama-3: 'S too (case-insensitive; GPT-2's regex gives ' S: 11 9 25)", "he'S", 11, 26);
    EXPECT(t, "Llama-3: ' joins the letters after it (GPT-2's regex: 9 22)", "'x", 24);
    EXPECT(t, "Llama-3: a space run less its last space", "  hello", 5, 5, 14);
    EXPECT(t, "Llama-3: a newline run ends at its last newline", " \n hello", 5, 21, 5, 14);
    attn_tokenizer_free(t);
}

/* Every allocation of open, encode and decode failing in turn (src/core/alloc.c's hook): each call
 * answers ATTN_ERR_OUT_OF_MEMORY or succeeds, and nothing leaks (LeakSanitizer under make asan). */
static void alloc_sweep(const char *what, const char *json_text, const char *text) {
    const char *json = write_text("tokenizer.json", json_text);
    int bad = 0, runs = 0;
    for (long k = 1; k < 100000; k++) {
        attn_tokenizer *t = NULL;
        attn__alloc_fail_after(k);
        attn_status st = attn_tokenizer_open(json, &t);
        int32_t ids[64];
        size_t n = 0, len = 0;
        char buf[256];
        if (st == ATTN_OK) st = attn_tokenizer_encode(t, text, strlen(text), 1, 0, ids, 64, &n);
        if (st == ATTN_OK) st = attn_tokenizer_decode(t, ids, n, 0, buf, sizeof buf, &len);
        int injected = attn__alloc_injected();
        attn__alloc_fail_after(0);
        bad += injected ? st != ATTN_ERR_OUT_OF_MEMORY || !attn_last_error()[0] : st != ATTN_OK;
        attn_tokenizer_free(t);
        runs++;
        if (!injected) break;
    }
    CHECK(bad == 0 && runs > 10, "%s: allocation failures: %d of %d runs went wrong", what, bad, runs);
}

static void test_alloc_fail(void) {
    alloc_sweep("WordPiece", json_with(NULL, NULL, NULL, NULL, NULL, NULL),
                "Hello, Caf\xc3\xa9 \xe4\xb8\xad [SEP] unaffable \xc4\xb0");
    alloc_sweep(
        "normalized added token",
        json_with(NULL, "null", "[{\"id\":23,\"content\":\"[N\xc3\x89W]\",\"normalized\":true}]", "null", NULL, NULL),
        "a [NEW] b");
    alloc_sweep("BPE", BPE, "hello world! he's  x\xc3\xa9<|endoftext|>");
    const char *sp = replace(replace(SP, "NORMALIZER", SP_NORM), "PRETOK", "null");
    alloc_sweep("SentencePiece, Prepend + Replace", sp, "hello wx h\xc3\xa9 qz<s>hello");
    sp = replace(
        replace(SP, "NORMALIZER", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Strip\"}]}"),
        "PRETOK",
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\"},{\"type\":\"Metaspace\","
        "\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\"},{\"type\":\"Split\",\"pattern\":"
        "{\"String\":\"l\"},\"behavior\":\"MergedWithNext\"}]}");
    alloc_sweep("SentencePiece, NFKC, Digits, Metaspace, Split", sp, " hello w12x \xef\xac\x81 h\xc3\xa9 <s>hello ");
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    size_t o = (size_t)snprintf(vocab_json, sizeof vocab_json, "{");
    for (int i = 0; i < NVOCAB; i++)
        o += (size_t)snprintf(vocab_json + o, sizeof vocab_json - o, "%s\"%s\":%d", i ? "," : "", VOCAB[i], i);
    snprintf(vocab_json + o, sizeof vocab_json - o, "}");
    test_bert_json();
    test_variants();
    test_vocab_txt();
    test_hostile();
    test_bpe();
    test_sentencepiece();
    test_llama3_split();
    test_alloc_fail();
    /* every file the tests wrote, so that the directory goes too */
    unlink(write_text("tokenizer.json", ""));
    unlink(write_text("bad.json", ""));
    if (rmdir(dir)) perror(dir);
    return test_summary("test_tokenizer");
}
