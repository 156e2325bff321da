/* libFuzzer harness: tokenizer.json (src/text: the reader, then every normalizer, pre-tokenizer,
 * model, post-processor and decoder it accepts), from memory (attn_tok_open_memory, the parse of
 * attn_tokenizer_open). An accepted file encodes a few fixed texts (ASCII, accents, CJK, emoji,
 * whitespace runs, digits, contractions, a special token typed in) and decodes the ids back with
 * and without the special tokens. Checked: a rejection sets a message and gives no tokenizer; an
 * encode's size query and its fill agree; every id is below the vocabulary size; truncation holds;
 * decoded text is valid UTF-8 of the size the query gave. */
#include <string.h>

#include "attn/tokenizer.h"
#include "fuzz_util.h"
#include "io/json.h"
#include "text/tok_internal.h"

static const char *const TEXTS[] = {
    "Hello, world! It's 2024: 12345 caf\xc3\xa9 \xe4\xb8\xad\xe5\x9b\xbd",
    "  tabs\tand\r\nnewlines\n\n  x  ",
    /* parenthesised: one literal on purpose, split only for the line length */
    ("\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb e\xcc\x81 \xef\xac\x81 \xe2\x91\xa0 HE'LL we'RE "
     "<s>[CLS]<|endoftext|>"),
    "",
};

static void roundtrip(const attn_tokenizer *t, const char *text) {
    size_t n = 0, len = strlen(text);
    attn_status st = attn_tokenizer_encode(t, text, len, 1, 0, NULL, 0, &n);
    if (st != ATTN_ERR_WORKSPACE && st != ATTN_OK) {
        REQUIRE(attn_last_error()[0] != '\0');
        return;
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof(int32_t));
    REQUIRE(ids != NULL);
    size_t n2 = 0;
    REQUIRE(attn_tokenizer_encode(t, text, len, 1, 0, ids, n, &n2) == ATTN_OK && n2 == n);
    int64_t max = attn_tokenizer_max_length(t), vocab = attn_tokenizer_vocab_size(t);
    REQUIRE(!max || (int64_t)n <= max);
    for (size_t i = 0; i < n; i++) REQUIRE(ids[i] >= 0 && ids[i] < vocab);
    for (int skip = 0; skip < 2; skip++) {
        size_t tl = 0, tl2 = 0;
        st = attn_tokenizer_decode(t, ids, n, skip, NULL, 0, &tl);
        REQUIRE(st == ATTN_OK || st == ATTN_ERR_WORKSPACE);
        char *buf = malloc(tl + 1);
        REQUIRE(buf != NULL);
        REQUIRE(attn_tokenizer_decode(t, ids, n, skip, buf, tl + 1, &tl2) == ATTN_OK && tl2 == tl);
        size_t bad;
        REQUIRE(buf[tl] == '\0' && attn_json_utf8_valid(buf, tl, &bad));
        free(buf);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_tokenizer *t = (attn_tokenizer *)&t;
    attn_clear_error();
    attn_status st = attn_tok_open_memory((const char *)data, size, "tokenizer.json", &t);
    if (st != ATTN_OK) {
        REQUIRE(attn_last_error()[0] != '\0');
        REQUIRE(t == NULL);
        return 0;
    }
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++) roundtrip(t, TEXTS[i]);
    attn_tokenizer_free(t);
    return 0;
}
