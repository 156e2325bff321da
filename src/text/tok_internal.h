/* attn internal: the tokenizer's parts (include/attn/tokenizer.h says what is supported).
 * tokenizer.c: the vocabulary, open / free, lookups; tok_load.c: tokenizer.json and vocab.txt;
 * tok_encode.c: normalizers, WordPiece, added tokens, truncation, post-processor; tok_pretok.c: the
 * pre-tokenizers (Split's regexes matched by hand); tok_bpe.c: BPE; tok_decode.c: the decoders. */
#ifndef ATTN_TEXT_TOK_INTERNAL_H
#define ATTN_TEXT_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "attn/tokenizer.h"

/* Normalizer steps, applied in order (BertNormalizer is a sequence of these). */
/* STRIP_MN: BertNormalizer's strip_accents (after its NFD); STRIP_MARKS: the StripAccents normalizer. */
typedef enum tok_norm_op {
    TOK_NORM_CLEAN,
    TOK_NORM_CHINESE,
    TOK_NORM_NFD,
    TOK_NORM_STRIP_MN,
    TOK_NORM_STRIP_MARKS,
    TOK_NORM_LOWER,
    TOK_NORM_NFC,
    TOK_NORM_NFKD,
    TOK_NORM_NFKC,
    TOK_NORM_PREPEND, /* str before a non-empty text */
    TOK_NORM_REPLACE, /* every str replaced by to */
    TOK_NORM_STRIP    /* whitespace off the left / right ends */
} tok_norm_op;
#define TOK_MAX_NORM_OPS 32

typedef struct tok_norm {
    tok_norm_op op;
    uint32_t *str, *to; /* code points (PREPEND, REPLACE) */
    size_t nstr, nto;
    int left, right; /* STRIP */
} tok_norm;

/* Pre-tokenizer steps, applied in order to every piece of the text (a Sequence is flattened). */
typedef enum tok_pre_op {
    TOK_PRE_WS_SPLIT,  /* WhitespaceSplit: whitespace removed */
    TOK_PRE_BERT,      /* BertPreTokenizer: and each punctuation char isolated */
    TOK_PRE_BYTELEVEL, /* ByteLevel: prefix space, GPT-2 regex, bytes as chars */
    TOK_PRE_SPLIT,     /* Split: a pattern, a behavior, invert */
    TOK_PRE_METASPACE, /* Metaspace: spaces as the replacement char, prepend, split */
    TOK_PRE_DIGITS,    /* Digits: individual or contiguous */
    TOK_PRE_PUNCT,     /* Punctuation: a behavior */
    TOK_PRE_WHITESPACE /* Whitespace: \w+|[^\w\s]+ kept, the rest removed */
} tok_pre_op;

/* Split patterns: the regexes models ship (tok_pretok.c) and plain strings. */
typedef enum tok_pattern { TOK_PAT_STRING, TOK_PAT_GPT2, TOK_PAT_LLAMA3, TOK_PAT_QWEN2 } tok_pattern;
/* SplitDelimiterBehavior */
typedef enum tok_behavior {
    TOK_B_REMOVED,
    TOK_B_ISOLATED,
    TOK_B_MERGED_PREV,
    TOK_B_MERGED_NEXT,
    TOK_B_CONTIGUOUS
} tok_behavior;

typedef struct tok_pre {
    tok_pre_op op;
    int flag;      /* ByteLevel: add_prefix_space; Digits: individual_digits; Metaspace: split */
    int use_regex; /* ByteLevel */
    tok_pattern pattern;
    uint32_t *str; /* TOK_PAT_STRING's code points */
    size_t nstr;
    tok_behavior behavior;
    int invert;
    int prepend; /* Metaspace: 0 never, 1 first, 2 always */
    uint32_t replacement;
} tok_pre;
#define TOK_MAX_PRE_OPS 16

/* Decoder steps, applied in order to the list of tokens, then joined. */
typedef enum tok_dec_op {
    TOK_DEC_WORDPIECE,
    TOK_DEC_BYTELEVEL,
    TOK_DEC_BYTE_FALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
    TOK_DEC_REPLACE,
    TOK_DEC_METASPACE,
    TOK_DEC_BPE /* BPEDecoder: the suffix as a space, removed from the last token */
} tok_dec_op;

typedef struct tok_dec {
    tok_dec_op op;
    char *a, *b;         /* WordPiece: prefix; Replace: pattern, content; Metaspace: replacement; BPEDecoder: suffix */
    uint32_t content;    /* Strip's char */
    int64_t start, stop; /* Strip's counts */
    int flag;            /* WordPiece: cleanup; Metaspace: prepend_scheme is not never */
} tok_dec;
#define TOK_MAX_DEC_OPS 16

typedef struct tok_added {
    char *content;
    size_t len;
    int32_t id;
    int special, lstrip, rstrip;
    int single_word; /* not matched with a word char (ATTN_U_WORD) just before or after it */
    int normalized;  /* matched in the normalized text, as its own normalized form ncp[0..nncp) */
    uint32_t *ncp;
    size_t nncp;
} tok_added;

/* One entry of the model's vocabulary hash (open addressing). */
typedef struct tok_slot {
    const char *s; /* NULL: empty; else its own allocation */
    size_t len;
    int32_t id;
} tok_slot;

/* One BPE merge (open addressing on the pair of ids). */
typedef struct tok_merge {
    uint64_t key; /* (left id << 32) | right id; 0 with rank -1: empty */
    int32_t rank, id;
} tok_merge;

struct attn_tokenizer {
    /* id -> token, NUL-terminated strings each owned by its own allocation (NULL: no token) */
    char **tokens;
    int64_t ntokens;
    tok_slot *slots;  /* the model's vocabulary */
    size_t nslots;    /* a power of two */
    size_t max_token; /* the longest token of the vocabulary, in bytes */
    tok_added *added;
    size_t nadded;
    int any_normalized;             /* some added token is matched in the normalized text */
    unsigned char added_first[256]; /* 1: a raw-matched added token starts with this byte */
    tok_norm norm[TOK_MAX_NORM_OPS];
    int nnorm;
    tok_pre pre[TOK_MAX_PRE_OPS];
    int npre_ops;
    int model;         /* 0: WordPiece; 1: BPE */
    char *prefix;      /* WordPiece's continuing_subword_prefix; BPE's (NULL: none) */
    char *suffix;      /* BPE's end_of_word_suffix (NULL: none) */
    char *unk;         /* the model's unk_token (BPE: NULL when none) */
    tok_merge *merges; /* BPE */
    size_t nmerge_slots;
    int fuse_unk, ignore_merges, byte_fallback;
    int32_t byte_ids[256]; /* byte_fallback: the ids of <0x00>..<0xFF> (-1: absent) */
    int64_t max_chars;
    int32_t *pre_ids, *post_ids; /* post-processor: ids before and after the sequence */
    size_t npre, npost;
    int64_t trunc_max; /* 0: no truncation */
    int trunc_left;
    tok_dec dec[TOK_MAX_DEC_OPS]; /* none: tokens joined by spaces */
    int ndec;
    int32_t pad_id;
};

/* A growing byte / id buffer over the library's allocator. */
typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf;
int attn_tok_buf_put(tok_buf *b, const void *s, size_t n); /* 0 ok, -1 out of memory */

/* The model vocabulary: add a copy of s (a repeated token takes the new id), look up (-1 when absent). */
attn_status attn_tok_vocab_init(attn_tokenizer *t, size_t n);
attn_status attn_tok_vocab_add(attn_tokenizer *t, const char *s, size_t len, int32_t id);
int32_t attn_tok_vocab_find(const attn_tokenizer *t, const char *s, size_t len);
/* Added tokens first, then the model's vocabulary. */
int32_t attn_tok_lookup(const attn_tokenizer *t, const char *s, size_t len);
/* Give id the token s (a copy); out of memory is an error. */
attn_status attn_tok_set_token(attn_tokenizer *t, int32_t id, const char *s, size_t len);

/* BPE: the merges table (n merges), a merge (a repeated pair takes the later rank), a lookup (-1: none). */
attn_status attn_tok_merges_init(attn_tokenizer *t, size_t n);
void attn_tok_merge_add(attn_tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t id);
int32_t attn_tok_merge_find(const attn_tokenizer *t, int32_t left, int32_t right, int32_t *id);
/* ByteLevel: the char standing for byte b, and the byte of char c (-1: none). */
uint32_t attn_tok_byte_char(unsigned b);
int attn_tok_char_byte(uint32_t c);
/* BPE over one word (UTF-8 s[0..len), already in the byte-level alphabet): its ids appended to ids
 * (int32_t values). */
attn_status attn_tok_bpe_word(const attn_tokenizer *t, const char *s, size_t len, tok_buf *ids);
/* The end of the GPT-2 regex's match at p[i] (p[0..n) code points; returns > i). */
size_t attn_tok_gpt2_match(const uint32_t *p, size_t n, size_t i);

/* A piece of pre-tokenized text: chars [s, e) of a buffer; at0: it starts at the text's start. */
typedef struct tok_piece {
    size_t s, e;
    int at0;
} tok_piece;
/* Pre-tokenize chars p[0..n) (at0: the text starts the input) with t's steps: the pieces in
 * *pieces (npieces of them) over the chars in *out (both growing buffers, reused across calls). */
attn_status attn_tok_pretokenize(const attn_tokenizer *t, const uint32_t *p, size_t n, int at0, uint32_t **out,
                                 size_t *ncap, tok_piece **pieces, size_t *pcap, size_t *npieces);
/* Canonical composition (NFC's second half) of p[0..*n) in place. */
void attn_tok_compose(uint32_t *p, size_t *n);
/* Free what t's normalizer, pre-tokenizer and decoder steps own. */
void attn_tok_free_steps(attn_tokenizer *t);

/* Run t's normalizer over s[0..len) (valid UTF-8): the code points in *out (free it), *n of them. */
attn_status attn_tok_normalize(const attn_tokenizer *t, const char *s, size_t len, uint32_t **out, size_t *n);

/* Readers: fill t (allocated, zeroed, pad_id -1) from a file; messages name `name`. */
attn_status attn_tok_load_json(attn_tokenizer *t, const char *path, const char *name);
attn_status attn_tok_load_json_text(attn_tokenizer *t, const char *text, size_t len, const char *name);
/* A tokenizer from tokenizer.json's bytes (the fuzz harness's entry point: attn_tokenizer_open's
 * parse without the file). */
attn_status attn_tok_open_memory(const char *text, size_t len, const char *name, attn_tokenizer **out);
attn_status attn_tok_load_vocab_txt(attn_tokenizer *t, const char *path, const char *name, const char *config_path);
/* tokenizer_config.json's model_max_length as t's truncation (when t has none; absent file: nothing). */
attn_status attn_tok_load_config_max_length(attn_tokenizer *t, const char *config_path);

#endif
