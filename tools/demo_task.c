/* attn demo's task: digit-sequence reversal, its held-out rule and its greedy evaluation. */
#include "demo_task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t demo_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
long demo_rand_below(uint64_t *s, long n) { return (long)(demo_splitmix(s) % (uint64_t)n); }

/* Held-out membership depends on the digits alone (not on the seed): a sequence is held out when
 * its hash is 0 mod DEMO_HELD_OUT_MOD. Training draws reject held-out sequences and evaluation
 * draws reject training ones, so the two sides are disjoint by construction. */
int demo_is_held_out(const int64_t *digits, long n) {
    uint64_t h = 0x243F6A8885A308D3ull ^ (uint64_t)n;
    for (long i = 0; i < n; i++) {
        h ^= (uint64_t)digits[i] + 1;
        h = demo_splitmix(&h);
    }
    return h % DEMO_HELD_OUT_MOD == 0;
}

void demo_draw_sequence(uint64_t *rng, int64_t *digits, long n, int held_out) {
    do {
        for (long i = 0; i < n; i++) digits[i] = demo_rand_below(rng, 10);
    } while (demo_is_held_out(digits, n) != held_out);
}

void demo_make_batch(uint64_t *rng, int64_t B, int64_t L, int64_t *src, int64_t *tgt_in, int64_t *tgt_out) {
    const int64_t nt = L + 1;
    for (int64_t b = 0; b < B; b++) {
        int64_t *sq = src + b * L;
        demo_draw_sequence(rng, sq, (long)L, 0);
        tgt_in[b * nt] = DEMO_BOS;
        for (int64_t i = 0; i < L; i++) {
            tgt_in[b * nt + 1 + i] = sq[L - 1 - i];
            tgt_out[b * nt + i] = sq[L - 1 - i];
        }
        tgt_out[b * nt + L] = DEMO_EOS;
    }
}

int demo_answer_ok(const int64_t *src, const int64_t *pred, int64_t L) {
    for (int64_t i = 0; i < L; i++)
        if (pred[i] != src[L - 1 - i]) return 0;
    return pred[L] == DEMO_EOS;
}

int64_t demo_answer_len(const int64_t *pred, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (pred[i] == DEMO_EOS) return i;
    return n;
}

const char *demo_tok_str(int64_t t) {
    static const char *names[DEMO_VOCAB] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "PAD", "BOS", "EOS"};
    return t >= 0 && t < DEMO_VOCAB ? names[t] : "?";
}

void demo_seq_str(char *buf, size_t cap, const int64_t *t, int64_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int64_t i = 0; i < n && k + 5 < cap; i++) {
        if (t[i] >= 0 && t[i] <= 9)
            buf[k++] = (char)('0' + t[i]);
        else
            k += (size_t)snprintf(buf + k, cap - k, "%s<%s>", i ? " " : "", demo_tok_str(t[i]));
    }
    buf[k < cap ? k : cap - 1] = '\0';
}

void demo_eval_free(demo_eval_set *e) {
    for (int i = 0; i <= DEMO_MAX_LEN; i++) free(e->seq[i]);
}

int demo_eval_make(demo_eval_set *e, long min_len, long max_len, long total, uint64_t stream) {
    memset(e, 0, sizeof *e);
    e->min_len = min_len;
    e->max_len = max_len;
    long nl = max_len - min_len + 1;
    uint64_t rng = stream;
    for (long L = min_len; L <= max_len; L++) {
        long c = total / nl + ((L - min_len) < total % nl);
        e->count[L] = c;
        e->seq[L] = malloc(sizeof(int64_t) * (size_t)(c * L + 1));
        if (!e->seq[L]) return 0;
        for (long i = 0; i < c; i++) demo_draw_sequence(&rng, e->seq[L] + i * L, L, 1);
    }
    return 1;
}

/* Grow *buf to at least need bytes (contents not kept). */
static int grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    free(*buf);
    *buf = malloc(need ? need : 1);
    *cap = *buf ? need : 0;
    return *buf != NULL;
}

void demo_decoder_free(demo_decoder *g) {
    free(g->ws);
    free(g->cache);
    free(g->memory);
    free(g->logits);
    free(g->tok);
}

attn_status demo_greedy(demo_decoder *g, const int64_t *src, int64_t B, int64_t L, int64_t *pred) {
    attn_seq2seq *m = g->model;
    const int64_t nt = L + 1;
    const size_t ws = attn_seq2seq_encode_workspace_size(m, B, L),
                 sws = attn_seq2seq_step_workspace_size(m, B, 1, nt, L);
    if (!grow(&g->ws, &g->ws_cap, ws > sws ? ws : sws) ||
        !grow(&g->cache, &g->cache_cap, attn_seq2seq_cache_size(m, B, nt, L)) ||
        !grow((void **)&g->memory, &g->memory_cap, sizeof(float) * (size_t)(B * L * g->d_model)) ||
        !grow((void **)&g->logits, &g->logits_cap, sizeof(float) * (size_t)(B * DEMO_VOCAB)) ||
        !grow((void **)&g->tok, &g->tok_cap, sizeof(int64_t) * (size_t)B))
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_seq2seq_cache *cache;
    attn_status st;
    if ((st = attn_seq2seq_encode(m, src, B, L, NULL, g->memory, g->ws, g->ws_cap)) ||
        (st = attn_seq2seq_cache_init(m, g->cache, g->cache_cap, B, nt, g->memory, L, NULL, g->ws, g->ws_cap, &cache)))
        return st;
    for (int64_t b = 0; b < B; b++) g->tok[b] = DEMO_BOS;
    for (int64_t t = 0; t < nt; t++) {
        /* g->tok [B] holds the token at position t of every sequence */
        if ((st = attn_seq2seq_forward_step(m, cache, g->tok, 1, g->logits, g->ws, g->ws_cap))) return st;
        for (int64_t b = 0; b < B; b++) {
            const float *lg = g->logits + b * DEMO_VOCAB;
            int64_t best = 0;
            for (int64_t v = 1; v < DEMO_VOCAB; v++)
                if (lg[v] > lg[best]) best = v;
            pred[b * nt + t] = best;
            g->tok[b] = best;
        }
    }
    return ATTN_OK;
}

attn_status demo_evaluate(demo_decoder *g, const demo_eval_set *e, int64_t chunk, long *correct, long *total) {
    int64_t *pred = malloc(sizeof(int64_t) * (size_t)(chunk * (DEMO_MAX_LEN + 1)));
    if (!pred) return ATTN_ERR_OUT_OF_MEMORY;
    *correct = *total = 0;
    attn_status st = ATTN_OK;
    for (long L = e->min_len; L <= e->max_len && !st; L++)
        for (long i0 = 0; i0 < e->count[L] && !st; i0 += chunk) {
            const long B = e->count[L] - i0 < chunk ? e->count[L] - i0 : chunk;
            const int64_t *src = e->seq[L] + i0 * L;
            if ((st = demo_greedy(g, src, B, L, pred))) break;
            for (long b = 0; b < B; b++) *correct += demo_answer_ok(src + b * L, pred + b * (L + 1), L);
            *total += B;
        }
    free(pred);
    return st;
}
