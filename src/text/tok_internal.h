/* attn internal: the tokenizer's parts (include/attn/tokenizer.h says what is supported).
 * tokenizer.c: the vocabulary, open / free, lookups; tok_load.c: tokenizer.json and vocab.txt;
 * tok_encode.c: normalizer, pre-tokenizer, WordPiece, added tokens, truncation, post-processor;
 * tok_decode.c: the decoders. */
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
    TOK_NORM_LOWER
} tok_norm_op;
#define TOK_MAX_NORM_OPS 32

typedef struct tok_added {
    char *content;
    size_t len;
    int32_t id;
    int special, lstrip, rstrip;
    int normalized; /* matched in the normalized text, as its own normalized form ncp[0..nncp) */
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
    int any_normalized; /* some added token is matched in the normalized text */
    tok_norm_op norm[TOK_MAX_NORM_OPS];
    int nnorm;
    int pretok;                      /* 0: none; 1: whitespace; 2: and punctuation (BertPreTokenizer); 3: ByteLevel */
    int add_prefix_space, use_regex; /* ByteLevel's */
    int model;                       /* 0: WordPiece; 1: BPE */
    char *prefix;                    /* WordPiece's continuing_subword_prefix */
    char *unk;                       /* the model's unk_token (BPE: NULL when none) */
    tok_merge *merges;               /* BPE */
    size_t nmerge_slots;
    int fuse_unk, ignore_merges;
    int64_t max_chars;
    int32_t *pre_ids, *post_ids; /* post-processor: ids before and after the sequence */
    size_t npre, npost;
    int64_t trunc_max; /* 0: no truncation */
    int trunc_left;
    int decoder;      /* 0: tokens joined by spaces; 1: WordPiece; 2: ByteLevel */
    char *dec_prefix; /* WordPiece decoder's prefix */
    int dec_cleanup;
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

/* Run t's normalizer over s[0..len) (valid UTF-8): the code points in *out (free it), *n of them. */
attn_status attn_tok_normalize(const attn_tokenizer *t, const char *s, size_t len, uint32_t **out, size_t *n);

/* Readers: fill t (allocated, zeroed, pad_id -1) from a file; messages name `name`. */
attn_status attn_tok_load_json(attn_tokenizer *t, const char *path, const char *name);
attn_status attn_tok_load_vocab_txt(attn_tokenizer *t, const char *path, const char *name, const char *config_path);
/* tokenizer_config.json's model_max_length as t's truncation (when t has none; absent file: nothing). */
attn_status attn_tok_load_config_max_length(attn_tokenizer *t, const char *config_path);

#endif
