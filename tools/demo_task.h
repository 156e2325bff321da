/* attn demo's task: reversing digit sequences. A source of L digits (L in [min_len, max_len],
 * at most DEMO_MAX_LEN) and its reversal as the target, framed by BOS / EOS. Every sequence
 * belongs to the training or to the held-out side by a hash of its digits alone (one in
 * DEMO_HELD_OUT_MOD is held out), so the sequences the demo is scored on were never seen in
 * training, whatever the seed. Scoring: greedy decoding with attn_seq2seq's cached steps, exact
 * sequence match (the reversal, then EOS). */
#ifndef ATTN_DEMO_TASK_H
#define ATTN_DEMO_TASK_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"

enum { DEMO_PAD = 10, DEMO_BOS = 11, DEMO_EOS = 12, DEMO_VOCAB = 13, DEMO_MAX_LEN = 32 };
#define DEMO_HELD_OUT_MOD 10 /* one sequence in ten is held out */

/* splitmix64 step, and a draw in [0, n). */
uint64_t demo_splitmix(uint64_t *s);
long demo_rand_below(uint64_t *s, long n);

int demo_is_held_out(const int64_t *digits, long n);
/* n random digits on the held-out side (held_out = 1) or the training side (0). */
void demo_draw_sequence(uint64_t *rng, int64_t *digits, long n, int held_out);
/* A training batch of B sequences of length L: src [B, L], tgt_in [B, L+1] = BOS + reversal,
 * tgt_out [B, L+1] = reversal + EOS. */
void demo_make_batch(uint64_t *rng, int64_t B, int64_t L, int64_t *src, int64_t *tgt_in, int64_t *tgt_out);

/* pred [L+1] is the reversal of src [L] followed by EOS. */
int demo_answer_ok(const int64_t *src, const int64_t *pred, int64_t L);
/* The answer's length up to (not including) EOS, or n when there is no EOS. */
int64_t demo_answer_len(const int64_t *pred, int64_t n);
/* "0".."9", "PAD", "BOS", "EOS", or "?". */
const char *demo_tok_str(int64_t t);
/* Digits as a string; other tokens as " <NAME>". */
void demo_seq_str(char *buf, size_t cap, const int64_t *t, int64_t n);

/* Held-out sequences, the same number per length (the remainder to the shortest lengths). */
typedef struct demo_eval_set {
    long min_len, max_len;
    long count[DEMO_MAX_LEN + 1];
    int64_t *seq[DEMO_MAX_LEN + 1];
} demo_eval_set;

int demo_eval_make(demo_eval_set *e, long min_len, long max_len, long total, uint64_t stream);
void demo_eval_free(demo_eval_set *e);

/* Greedy decoding: scratch grown on demand, reused across calls. */
typedef struct demo_decoder {
    attn_seq2seq *model;
    int64_t d_model;
    void *ws, *cache;
    float *memory, *logits;
    int64_t *tok;
    size_t ws_cap, cache_cap, memory_cap, logits_cap, tok_cap;
} demo_decoder;

void demo_decoder_free(demo_decoder *g);
/* pred [B, L+1] = the greedy answers for src [B, L]: the source is encoded once, then the decoder
 * steps one token at a time over its cache (attn_seq2seq_forward_step). */
attn_status demo_greedy(demo_decoder *g, const int64_t *src, int64_t B, int64_t L, int64_t *pred);
/* Exact-sequence accuracy over the set, decoding chunks of at most chunk sequences. */
attn_status demo_evaluate(demo_decoder *g, const demo_eval_set *e, int64_t chunk, long *correct, long *total);

#endif
