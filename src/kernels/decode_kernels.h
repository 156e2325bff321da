/* One-token decode against a key/value cache (src/attention/decode.c): the flash forward's path
 * for a single query row per head. Decode reads every cached key and value once per token and
 * does two flops per byte, so it is bound by memory: the general tile kernel (64 x 64 tiles of
 * which one query column would be used) wastes most of its work and never reaches the bandwidth.
 *
 * Here the query heads that share one key/value head are processed together, so K and V are
 * streamed once per group; the keys are split into fixed chunks of ATTN_DECODE_CHUNK (split-K,
 * "flash decoding"), each chunk's unnormalised (acc, m, l) computed by one task with an online
 * softmax, and the chunks merged in increasing order afterwards. The chunking depends only on the
 * shapes, so the result is bitwise identical for any thread count.
 *
 * Kernels, one per ISA (decode_ref.c, decode_avx2.c, decode_avx512.c), and per cache type: float
 * or bf16 K and V (widened exactly to float, float accumulation). */
#ifndef ATTN_DECODE_KERNELS_H
#define ATTN_DECODE_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn/core.h"

/* Keys per split-K task: long enough that the per-chunk merge is noise, short enough that 1k
 * contexts still give both threads work. Fixed: it decides the summation order. */
#define ATTN_DECODE_CHUNK 256
/* Keys per score block inside a chunk (scores, softmax, then P V over the block): the block's V
 * rows (16 KiB at d 128 float) stay in L1 between the prefetch and their use. */
#define ATTN_DECODE_BK 32
/* Query rows of one group a kernel call takes at most (the driver splits larger groups). */
#define ATTN_DECODE_MAXG 8

typedef struct attn_decode_job {
    int g;             /* query rows, 1 .. ATTN_DECODE_MAXG */
    int64_t d, dv, n;  /* head dims; keys in this chunk (>= 1) */
    const float *q;    /* [g][d], already scaled by scale * log2(e): scores are in log2 units */
    const void *k, *v; /* first key / value row of the chunk: float or bf16 elements */
    int64_t ldk, ldv;  /* row strides in elements (unit column stride) */
    const uint8_t *km; /* key mask of the chunk's keys (0 = masked), km[j * kms]; NULL = none */
    int64_t kms;
    float *out; /* row r at out + r * ldo: acc [dv] (sum_j 2^(s_j - m) v_j), then m, l */
    int64_t ldo;
} attn_decode_job;

typedef struct attn_decode_kernels {
    const char *name;
    void (*chunk_f32)(const attn_decode_job *j);
    void (*chunk_bf16)(const attn_decode_job *j);
} attn_decode_kernels;

const attn_decode_kernels *attn_decode_kernels_ref(void);
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
const attn_decode_kernels *attn_decode_kernels_avx2(void);
const attn_decode_kernels *attn_decode_kernels_avx512(void);
#endif

/* Each row of a chunk starts empty: acc = 0, m = -inf, l = 0 (after the dv acc floats). */
static inline void attn_decode_rows_init(const attn_decode_job *jb) {
    for (int r = 0; r < jb->g; r++) {
        float *o = jb->out + r * jb->ldo;
        memset(o, 0, sizeof(float) * (size_t)jb->dv);
        o[jb->dv] = -INFINITY;
        o[jb->dv + 1] = 0.0f;
    }
}

/* The key mask on a block's scores: a masked key's logit is -inf for every row of the group. */
static inline void attn_decode_mask_block(const attn_decode_job *jb, int64_t j0, int nb, float (*s)[ATTN_DECODE_BK]) {
    if (!jb->km) return;
    for (int j = 0; j < nb; j++)
        if (!jb->km[(j0 + j) * jb->kms])
            for (int r = 0; r < jb->g; r++) s[r][j] = -INFINITY;
}

/* A block whose scores are all -inf or NaN, so that no maximum exists yet: p = 0, except NaN where
 * the score is NaN (a NaN query or key must reach the output, as in PyTorch). Returns the sum of
 * p, to add to the row's l (NaN when a score was NaN, 0 otherwise). */
static inline float attn_decode_block_unseen(float *s, int nb) {
    float sum = 0.0f;
    for (int j = 0; j < nb; j++) {
        s[j] = s[j] != s[j] ? s[j] : 0.0f;
        sum += s[j];
    }
    return sum;
}

#endif
