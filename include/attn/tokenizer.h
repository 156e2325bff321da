/* attn tokenizer: text to token ids and back, with the ids Hugging Face `tokenizers` gives, bit for
 * bit, for the tokenizers a Hugging Face model folder holds: WordPiece (the BERT family), byte-level
 * BPE (GPT-2, Llama-3, Qwen2) and SentencePiece-style BPE with byte fallback (Llama-2, Mistral).
 *
 * Supported (anything else in a tokenizer.json is refused, ATTN_ERR_UNSUPPORTED, naming the key):
 *   normalizer      BertNormalizer {clean_text, handle_chinese_chars, strip_accents (null: follows
 *                   lowercase), lowercase}, NFD, NFC, NFKD, NFKC, Lowercase, StripAccents, Strip
 *                   {strip_left, strip_right}, Prepend {prepend}, Replace {pattern {"String"},
 *                   content}, a Sequence of these, null;
 *   pre_tokenizer   BertPreTokenizer, WhitespaceSplit, Whitespace, ByteLevel {add_prefix_space, use_regex}
 *                   (GPT-2's regex and byte alphabet), Split {pattern, behavior (Removed, Isolated,
 *                   MergedWithPrevious, MergedWithNext, Contiguous), invert} with a {"String"}
 *                   pattern or one of the regexes models ship (GPT-2's, Llama-3's, Qwen2's: matched
 *                   by hand, no regex engine; another regex is refused, quoted), Metaspace
 *                   {replacement, prepend_scheme always / first / never (or add_prefix_space),
 *                   split}, Digits {individual_digits}, Punctuation {behavior}, a Sequence of
 *                   these, null;
 *   model           WordPiece {vocab, unk_token, continuing_subword_prefix, max_input_chars_per_word};
 *                   BPE {vocab, merges ("a b" or ["a", "b"]), unk_token, fuse_unk, ignore_merges
 *                   (a pre-token in the vocabulary is taken whole), byte_fallback (<0xNN> tokens),
 *                   continuing_subword_prefix, end_of_word_suffix (at most 64 bytes); no dropout};
 *   post_processor  TemplateProcessing (single: special tokens around $A), BertProcessing,
 *                   ByteLevel (offsets only: no ids), a Sequence of these (one adding tokens), null;
 *   decoder         WordPiece {prefix, cleanup}, ByteLevel (bytes back, invalid UTF-8 as U+FFFD
 *                   the way Rust's from_utf8_lossy does), ByteFallback, Fuse, Strip {content, start,
 *                   stop}, Replace {pattern {"String"}, content}, Metaspace, BPEDecoder {suffix}, a
 *                   Sequence of these, null (tokens joined by spaces);
 *   added_tokens    leftmost-longest, in the raw text before normalization (normalized false) or
 *                   in the normalized text as their own normalized form (normalized true; their
 *                   id then gives back that form, as tokenizers does); lstrip / rstrip honoured;
 *                   single_word (not next to a word char, the regex crate's \w);
 *   truncation      {max_length, strategy LongestFirst / OnlyFirst, direction Right / Left}.
 * The Unicode properties are those of the `tokenizers` release named by
 * attn_tokenizer_unicode_source() (src/text/unicode_tables.c, scripts/gen_unicode_tables.py).
 *
 * attn_tokenizer_open takes a tokenizer.json, a BERT vocab.txt (one token per line, the line's
 * index its id, with BertTokenizerFast's defaults: lowercase, [UNK] [SEP] [PAD] [CLS] [MASK],
 * [CLS] A [SEP]), or a model folder: its tokenizer.json when present, else its vocab.txt with the
 * folder's tokenizer_config.json (do_lower_case, tokenize_chinese_chars, strip_accents, the
 * *_token names). In a folder, tokenizer_config.json's model_max_length (when below 10^9) is the
 * default truncation of a tokenizer.json that has none, as `tokenizer(text, truncation=True)`.
 *
 * Errors set attn_last_error() with the file and the key ("tokenizer.json: model.vocab: ...").
 * A tokenizer is read-only after open: any number of threads may encode / decode with it. */
#ifndef ATTN_TOKENIZER_H
#define ATTN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_tokenizer attn_tokenizer;

/* Largest tokenizer file read (tokenizer.json, vocab.txt): 64 MB. */
#define ATTN_TOKENIZER_FILE_CAP ((uint64_t)64 << 20)

ATTN_API attn_status attn_tokenizer_open(const char *path, attn_tokenizer **out);
ATTN_API void attn_tokenizer_free(attn_tokenizer *t);

/* text[0..len) (UTF-8, NULs allowed) to ids, as tokenizer(text, add_special_tokens=...,
 * truncation=True, max_length=...)["input_ids"]. max_length 0: the tokenizer's own truncation
 * (none when it has none); > 0: at most that many ids, the special tokens included (an error when
 * they alone are more). *n gets the number of ids; when cap < *n (ids NULL counts as cap 0)
 * nothing is written past cap and the call returns ATTN_ERR_WORKSPACE (a size query). Invalid
 * UTF-8 is an error. */
ATTN_API attn_status attn_tokenizer_encode(const attn_tokenizer *t, const char *text, size_t len,
                                           int add_special_tokens, int64_t max_length, int32_t *ids, size_t cap,
                                           size_t *n);

/* ids to text, as tokenizer.decode(ids, skip_special_tokens=...): ids outside the vocabulary are
 * skipped. *len gets the text's length in bytes; when cap < *len (buf NULL counts as cap 0) the
 * call returns ATTN_ERR_WORKSPACE (nothing written past cap); a NUL follows the text when
 * cap > *len. */
ATTN_API attn_status attn_tokenizer_decode(const attn_tokenizer *t, const int32_t *ids, size_t n,
                                           int skip_special_tokens, char *buf, size_t cap, size_t *len);

/* One more than the largest id (model vocabulary and added tokens). */
ATTN_API int64_t attn_tokenizer_vocab_size(const attn_tokenizer *t);
/* The id of a token (added tokens first, then the model's vocabulary), -1 when absent. */
ATTN_API int32_t attn_tokenizer_token_to_id(const attn_tokenizer *t, const char *token);
/* The token of an id (NUL-terminated, owned by t), NULL when out of range. */
ATTN_API const char *attn_tokenizer_id_to_token(const attn_tokenizer *t, int32_t id);
/* The padding id: tokenizer.json's padding.pad_id, else the id of the pad token ("[PAD]", or
 * tokenizer_config.json's pad_token), -1 when none. */
ATTN_API int32_t attn_tokenizer_pad_id(const attn_tokenizer *t);
/* The truncation length that max_length 0 applies (0: none). */
ATTN_API int64_t attn_tokenizer_max_length(const attn_tokenizer *t);
/* Where the Unicode tables come from ("tokenizers 0.23.3, unicodedata 14.0.0"). */
ATTN_API const char *attn_tokenizer_unicode_source(void);

#ifdef __cplusplus
}
#endif
#endif
