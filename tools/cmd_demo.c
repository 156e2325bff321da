/* attn demo: train an encoder-decoder Transformer to reverse digit sequences, in plain C.
 *
 * The task is generated on the fly: a source of L digits (L in [min-len, max-len]) and its
 * reversal as the target, framed by BOS / EOS. Every sequence belongs to the training or to the
 * held-out side by a hash of its contents (one in ten is held out), so the sequences the demo is
 * scored on were never seen in training, whatever the seed. The model is torch.nn.Transformer
 * (attn_transformer) with token embeddings scaled by sqrt(d_model), sinusoidal positions and an
 * output projection tied to the embedding; it is trained with teacher forcing (causal target
 * mask), cross-entropy, AdamW with linear warmup and cosine decay, and gradient clipping. Greedy
 * decoding over the decoder's KV cache on held-out sequences gives the exact-sequence accuracy;
 * the cross-attention of the last decoder layer for one example is written as SVG and HTML (the
 * reversal shows up as an anti-diagonal). Deterministic for a given seed and thread count. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_opts.h"

enum { TOK_PAD = 10, TOK_BOS = 11, TOK_EOS = 12, VOCAB = 13 };
#define HELD_OUT_MOD 10 /* one sequence in ten is held out */

typedef struct demo_opts {
    long steps, seed, min_len, max_len, threads, batch, eval_n, d_model, heads, layers, ff, warmup;
    long log_every;
    double lr, clip;
    int gate, quiet;
    const char *out;
} demo_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: attn demo [options]\n\n"
            "Trains an encoder-decoder Transformer (nn.Transformer: embeddings, sinusoidal\n"
            "positions, encoder and decoder stacks, output projection) to reverse digit sequences,\n"
            "with teacher forcing, cross-entropy, AdamW (warmup + cosine) and gradient clipping;\n"
            "then decodes held-out sequences (never seen in training) greedily, prints a few, and\n"
            "writes the cross-attention of one example as SVG and HTML heat maps (the reversal\n"
            "shows as an anti-diagonal). The last line is the held-out exact-sequence accuracy.\n"
            "Exit status: 0 when it is >= 99%%, 1 when it is not (see --no-accuracy-gate), 2 on\n"
            "bad arguments.\n\n"
            "options:\n"
            "  --steps N          training steps (default 1200)\n"
            "  --seed S           random seed: data, initialisation (default 1)\n"
            "  --min-len N        shortest sequence (1..32, default 4)\n"
            "  --max-len N        longest sequence (min-len..32, default 10)\n"
            "  --batch N          sequences per step (default 64)\n"
            "  --lr X             peak learning rate (default 2e-3)\n"
            "  --warmup N         warmup steps (default steps/10)\n"
            "  --clip X           gradient clipping max norm, 0 = off (default 1)\n"
            "  --d-model N        model width (default 64)\n"
            "  --heads N          attention heads (default 4)\n"
            "  --layers N         encoder and decoder layers each (default 2)\n"
            "  --ff N             feed-forward width (default 256)\n"
            "  --eval N           held-out sequences scored at the end (default 1000)\n"
            "  --threads N        threads (default: all, as OpenMP's default)\n"
            "  --out DIR          where the heat maps go (default ./attn-demo-output)\n"
            "  --log-every N      progress interval when stdout is not a terminal\n"
            "                     (default steps/20)\n"
            "  --no-accuracy-gate exit 0 whatever the accuracy (short runs, tests)\n"
            "  -h, --help         this help\n");
}

/* ---- small utilities ------------------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static long rand_below(uint64_t *s, long n) { return (long)(splitmix(s) % (uint64_t)n); }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Grow *buf to at least need bytes (contents not kept). */
static int ensure(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    free(*buf);
    *buf = malloc(need ? need : 1);
    *cap = *buf ? need : 0;
    return *buf != NULL;
}

/* ---- the task ---------------------------------------------------------------------------------
 * Held-out membership depends on the digits alone (not on the seed): a sequence is held out when
 * its hash is 0 mod HELD_OUT_MOD. Training draws reject held-out sequences and evaluation draws
 * reject training ones, so the two sides are disjoint by construction. */
static int is_held_out(const int64_t *digits, long n) {
    uint64_t h = 0x243F6A8885A308D3ull ^ (uint64_t)n;
    for (long i = 0; i < n; i++) {
        h ^= (uint64_t)digits[i] + 1;
        h = splitmix(&h);
    }
    return h % HELD_OUT_MOD == 0;
}
static void draw_sequence(uint64_t *rng, int64_t *digits, long n, int held_out) {
    do {
        for (long i = 0; i < n; i++) digits[i] = rand_below(rng, 10);
    } while (is_held_out(digits, n) != held_out);
}

/* ---- the model ---------------------------------------------------------------------------------- */
typedef struct model {
    attn_transformer *t;
    attn_embedding *emb; /* shared: source and target embeddings, and the output projection */
    const attn_param *w; /* emb's weight [VOCAB, d] */
    attn_transformer_config cfg;
    int64_t d, max_pos;
    float *pe; /* sinusoidal table [max_pos, d] */
    float scale;
} model;

/* Scratch shared by everything: grown on demand. */
typedef struct scratch {
    void *ws, *saved, *lin, *cache;
    size_t ws_cap, saved_cap, lin_cap, cache_cap;
} scratch;

/* x [b, n, d] = embedding[tok] * sqrt(d) + pe[pos0 .. pos0 + n) */
static attn_status embed(const model *m, const int64_t *tok, int64_t b, int64_t n, int64_t pos0, float *x) {
    attn_status st = attn_embedding_forward(m->emb, tok, b * n, x);
    if (st) return st;
    for (int64_t i = 0; i < b * n * m->d; i++) x[i] *= m->scale;
    return attn_posenc_add(x, m->pe, m->max_pos, b, n, m->d, pos0);
}

/* logits [rows, VOCAB] = h [rows, d] W^T */
static attn_status project(const model *m, scratch *s, const float *h, int64_t rows, float *logits) {
    if (!ensure(&s->lin, &s->lin_cap, attn_linear_workspace_size(rows, m->d, VOCAB)))
        return ATTN_ERR_OUT_OF_MEMORY;
    return attn_linear_forward(h, m->w->data, NULL, logits, rows, m->d, VOCAB, s->lin, s->lin_cap);
}

/* Buffers for a batch of B sequences of length up to Lmax. */
typedef struct batch_buf {
    int64_t *src, *tgt_in, *tgt_out, *pred, *ans;
    float *xs, *xt, *out, *logits, *dh, *dsrc, *dtgt, *mem, *last;
} batch_buf;

static void batch_free(batch_buf *b) {
    free(b->src); free(b->tgt_in); free(b->tgt_out); free(b->pred); free(b->ans);
    free(b->xs); free(b->xt); free(b->out); free(b->logits); free(b->dh);
    free(b->dsrc); free(b->dtgt); free(b->mem); free(b->last);
}
static int batch_alloc(batch_buf *b, int64_t B, int64_t lmax, int64_t d) {
    size_t nt = (size_t)(B * (lmax + 1));
    memset(b, 0, sizeof *b);
    b->src = malloc(sizeof(int64_t) * nt);
    b->tgt_in = malloc(sizeof(int64_t) * nt);
    b->tgt_out = malloc(sizeof(int64_t) * nt);
    b->pred = malloc(sizeof(int64_t) * nt);
    b->ans = malloc(sizeof(int64_t) * nt);
    b->xs = malloc(sizeof(float) * nt * d);
    b->xt = malloc(sizeof(float) * nt * d);
    b->out = malloc(sizeof(float) * nt * d);
    b->logits = malloc(sizeof(float) * nt * VOCAB);
    b->dh = malloc(sizeof(float) * nt * d);
    b->dsrc = malloc(sizeof(float) * nt * d);
    b->dtgt = malloc(sizeof(float) * nt * d);
    b->mem = malloc(sizeof(float) * nt * d);
    b->last = malloc(sizeof(float) * (size_t)B * d);
    return b->src && b->tgt_in && b->tgt_out && b->pred && b->ans && b->xs && b->xt && b->out && b->logits &&
           b->dh && b->dsrc && b->dtgt && b->mem && b->last;
}

/* Greedy decoding of B sources of length L (bb->src): bb->pred [B, L+1] receives the answers
 * (the last one should be EOS). The source is encoded once; the decoder then steps one token at a
 * time over its key/value cache, so step t costs O(t) instead of rerunning the prefix. */
static attn_status greedy(model *m, scratch *s, batch_buf *bb, int64_t B, int64_t L) {
    attn_encoder *enc = attn_transformer_encoder(m->t);
    attn_decoder *dec = attn_transformer_decoder(m->t);
    attn_status st = embed(m, bb->src, B, L, 0, bb->xs);
    if (st) return st;
    attn_layer_args ea = attn_layer_args_default();
    ea.batch = B;
    ea.n = L;
    ea.x = bb->xs;
    if (!ensure(&s->ws, &s->ws_cap, attn_encoder_workspace_size(enc, &ea))) return ATTN_ERR_OUT_OF_MEMORY;
    st = attn_encoder_forward(enc, &ea, bb->mem, NULL, 0, s->ws, s->ws_cap);
    if (st) return st;
    const int64_t n_tgt = L + 1;
    /* the step workspace for n = n_memory also covers the cache's initial fill */
    const size_t wsb = attn_decoder_step_workspace_size(dec, B, L > 1 ? L : 1, n_tgt, L);
    if (!ensure(&s->ws, &s->ws_cap, wsb) || !ensure(&s->cache, &s->cache_cap, attn_decoder_cache_size(dec, B, n_tgt, L)))
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_decoder_cache *cache;
    st = attn_decoder_cache_init(dec, s->cache, s->cache_cap, B, n_tgt, bb->mem, L, NULL, s->ws, s->ws_cap, &cache);
    if (st) return st;
    for (int64_t b = 0; b < B; b++) bb->pred[b] = TOK_BOS;
    for (int64_t t = 0; t < n_tgt; t++) {
        /* bb->pred [B] holds the token at position t of every sequence */
        if ((st = embed(m, bb->pred, B, 1, t, bb->xt)) ||
            (st = attn_decoder_forward_step(dec, cache, bb->xt, 1, bb->last, s->ws, s->ws_cap)) ||
            (st = project(m, s, bb->last, B, bb->logits)))
            return st;
        for (int64_t b = 0; b < B; b++) {
            const float *lg = bb->logits + b * VOCAB;
            int64_t best = 0;
            for (int64_t v = 1; v < VOCAB; v++)
                if (lg[v] > lg[best]) best = v;
            bb->ans[b * n_tgt + t] = best;
            bb->pred[b] = best;
        }
    }
    memcpy(bb->pred, bb->ans, sizeof(int64_t) * (size_t)(B * n_tgt));
    return ATTN_OK;
}

static int answer_ok(const int64_t *src, const int64_t *pred, int64_t L) {
    for (int64_t i = 0; i < L; i++)
        if (pred[i] != src[L - 1 - i]) return 0;
    return pred[L] == TOK_EOS;
}

/* Held-out evaluation set: per length, count sequences. */
typedef struct eval_set {
    long min_len, max_len;
    long count[33];
    int64_t *seq[33];
} eval_set;

static void eval_free(eval_set *e) {
    for (int i = 0; i < 33; i++) free(e->seq[i]);
}
static int eval_make(eval_set *e, long min_len, long max_len, long total, uint64_t stream) {
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
        for (long i = 0; i < c; i++) draw_sequence(&rng, e->seq[L] + i * L, L, 1);
    }
    return 1;
}

/* Exact-sequence accuracy over the set, decoding in chunks of at most chunk sequences. */
static attn_status evaluate(model *m, scratch *s, batch_buf *bb, int64_t chunk, const eval_set *e,
                            long *correct, long *total) {
    *correct = *total = 0;
    for (long L = e->min_len; L <= e->max_len; L++)
        for (long i0 = 0; i0 < e->count[L]; i0 += chunk) {
            long B = e->count[L] - i0 < chunk ? e->count[L] - i0 : chunk;
            memcpy(bb->src, e->seq[L] + i0 * L, sizeof(int64_t) * (size_t)(B * L));
            attn_status st = greedy(m, s, bb, B, L);
            if (st) return st;
            for (long b = 0; b < B; b++)
                *correct += answer_ok(bb->src + b * L, bb->pred + b * (L + 1), L);
            *total += B;
        }
    return ATTN_OK;
}

/* ---- cross-attention of the last decoder layer --------------------------------------------------
 * nn.h gives no hook into a stack's layers, so the last decoder layer's cross-attention input is
 * recomputed from copies of the trained parameters: the first num_decoder_layers - 1 layers as a
 * stack without final norm, then the last layer's self-attention block, then its multihead_attn
 * with need_weights (averaged over heads). */
static attn_status copy_params(const attn_params *dst, const attn_params *src, const char *prefix) {
    char name[256];
    for (size_t i = 0; i < attn_params_count(dst); i++) {
        const attn_param *p = attn_params_get(dst, i);
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        const attn_param *q = attn_params_find(src, name);
        if (!q || q->numel != p->numel) return ATTN_ERR_NOT_FOUND;
        memcpy(p->data, q->data, sizeof(float) * p->numel);
    }
    return ATTN_OK;
}

static attn_status cross_attention(model *m, scratch *s, const int64_t *src, int64_t L,
                                   const int64_t *tgt_in, float *weights /* [L+1, L] */) {
    const int64_t d = m->d, nt = L + 1, nl = m->cfg.num_decoder_layers;
    const attn_params *tp = attn_transformer_params(m->t);
    attn_status st = ATTN_OK;
    attn_decoder *pre = NULL;
    attn_mha *sa = NULL, *ca = NULL;
    float *mem = malloc(sizeof(float) * (size_t)(L * d)), *x = malloc(sizeof(float) * (size_t)(nt * d)),
          *y = malloc(sizeof(float) * (size_t)(nt * d)), *h = malloc(sizeof(float) * (size_t)(nt * d)),
          *q = malloc(sizeof(float) * (size_t)(nt * d)), *xs = malloc(sizeof(float) * (size_t)(L * d));
    if (!mem || !x || !y || !h || !q || !xs) {
        st = ATTN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    /* memory */
    if ((st = embed(m, src, 1, L, 0, xs))) goto done;
    attn_layer_args ea = attn_layer_args_default();
    ea.batch = 1;
    ea.n = L;
    ea.x = xs;
    attn_encoder *enc = attn_transformer_encoder(m->t);
    if (!ensure(&s->ws, &s->ws_cap, attn_encoder_workspace_size(enc, &ea))) {
        st = ATTN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    if ((st = attn_encoder_forward(enc, &ea, mem, NULL, 0, s->ws, s->ws_cap))) goto done;
    /* input of the last decoder layer */
    if ((st = embed(m, tgt_in, 1, nt, 0, x))) goto done;
    if (nl > 1) {
        attn_stack_config sc = attn_stack_config_default(d, m->cfg.layer.nhead, nl - 1);
        sc.layer = m->cfg.layer;
        sc.norm = 0;
        if ((st = attn_decoder_create(&sc, &pre))) goto done;
        if ((st = copy_params(attn_decoder_params(pre), tp, "decoder."))) goto done;
        attn_layer_args da = attn_layer_args_default();
        da.batch = 1;
        da.n = nt;
        da.x = x;
        da.self_masks.is_causal = 1;
        da.n_memory = L;
        da.memory = mem;
        if (!ensure(&s->ws, &s->ws_cap, attn_decoder_workspace_size(pre, &da))) {
            st = ATTN_ERR_OUT_OF_MEMORY;
            goto done;
        }
        if ((st = attn_decoder_forward(pre, &da, y, NULL, 0, s->ws, s->ws_cap))) goto done;
        memcpy(x, y, sizeof(float) * (size_t)(nt * d));
    }
    char prefix[128];
    attn_mha_config mc = attn_mha_config_default(d, m->cfg.layer.nhead);
    if ((st = attn_mha_create(&mc, &sa)) || (st = attn_mha_create(&mc, &ca))) goto done;
    snprintf(prefix, sizeof prefix, "decoder.layers.%lld.self_attn.", (long long)(nl - 1));
    if ((st = copy_params(attn_mha_params(sa), tp, prefix))) goto done;
    snprintf(prefix, sizeof prefix, "decoder.layers.%lld.multihead_attn.", (long long)(nl - 1));
    if ((st = copy_params(attn_mha_params(ca), tp, prefix))) goto done;
    char n1w[128], n1b[128], n2w[128], n2b[128];
    snprintf(n1w, sizeof n1w, "decoder.layers.%lld.norm1.weight", (long long)(nl - 1));
    snprintf(n1b, sizeof n1b, "decoder.layers.%lld.norm1.bias", (long long)(nl - 1));
    snprintf(n2w, sizeof n2w, "decoder.layers.%lld.norm2.weight", (long long)(nl - 1));
    snprintf(n2b, sizeof n2b, "decoder.layers.%lld.norm2.bias", (long long)(nl - 1));
    const attn_param *g1 = attn_params_find(tp, n1w), *b1 = attn_params_find(tp, n1b),
                     *g2 = attn_params_find(tp, n2w), *b2 = attn_params_find(tp, n2b);
    if (!g1 || !b1 || !g2 || !b2) {
        st = ATTN_ERR_NOT_FOUND;
        goto done;
    }
    const float eps = m->cfg.layer.layer_norm_eps;
    /* self-attention block: post-norm h = norm1(x + SA(x)); pre-norm h = norm2(x + SA(norm1 x)) */
    const float *sa_in = x;
    if (m->cfg.layer.norm_first) {
        if ((st = attn_layernorm_forward(x, g1->data, b1->data, h, NULL, NULL, nt, d, eps))) goto done;
        sa_in = h;
    }
    attn_mha_args a = attn_mha_args_default();
    a.batch = 1;
    a.nq = a.nk = nt;
    a.query = a.key = a.value = sa_in;
    a.is_causal = 1;
    if (!ensure(&s->ws, &s->ws_cap, attn_mha_workspace_size(sa, &a))) {
        st = ATTN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    if ((st = attn_mha_forward(sa, &a, y, NULL, NULL, 0, s->ws, s->ws_cap))) goto done;
    for (int64_t i = 0; i < nt * d; i++) y[i] += x[i];
    if (m->cfg.layer.norm_first)
        st = attn_layernorm_forward(y, g2->data, b2->data, q, NULL, NULL, nt, d, eps);
    else
        st = attn_layernorm_forward(y, g1->data, b1->data, q, NULL, NULL, nt, d, eps);
    if (st) goto done;
    /* cross-attention weights, averaged over heads */
    a = attn_mha_args_default();
    a.batch = 1;
    a.nq = nt;
    a.nk = L;
    a.query = q;
    a.key = a.value = mem;
    a.need_weights = 1;
    a.average_attn_weights = 1;
    if (!ensure(&s->ws, &s->ws_cap, attn_mha_workspace_size(ca, &a))) {
        st = ATTN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    st = attn_mha_forward(ca, &a, y, weights, NULL, 0, s->ws, s->ws_cap);
done:
    attn_decoder_free(pre);
    attn_mha_free(sa);
    attn_mha_free(ca);
    free(mem); free(x); free(y); free(h); free(q); free(xs);
    return st;
}

/* ---- heat map: SVG and HTML --------------------------------------------------------------------- */
static const char *tok_str(int64_t t) {
    static const char *names[VOCAB] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
                                       "PAD", "BOS", "EOS"};
    return t >= 0 && t < VOCAB ? names[t] : "?";
}

static void write_svg(FILE *f, const int64_t *src, int64_t L, const int64_t *pred, const float *w) {
    const int cell = 34, left = 110, top = 96, nt = (int)L + 1;
    const int width = left + (int)L * cell + 110, height = top + nt * cell + 50;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"14\">\n",
            width, height, width, height);
    fprintf(f, "<title>attn demo: decoder cross-attention (last layer, mean over heads)</title>\n");
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f,
            "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">cross-attention: output "
            "token (row) attending to input token (column)</text>\n",
            10);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\">input</text>\n",
            left + (int)L * cell / 2, top - 40);
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\" "
            "transform=\"rotate(-90 %d %d)\">output</text>\n",
            30, top + nt * cell / 2, 30, top + nt * cell / 2);
    for (int j = 0; j < L; j++)
        fprintf(f, "<text class=\"col\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                left + j * cell + cell / 2, top - 10, tok_str(src[j]));
    for (int i = 0; i < nt; i++)
        fprintf(f, "<text class=\"row\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", left - 10,
                top + i * cell + cell / 2 + 5, tok_str(pred[i]));
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < L; j++) {
            double v = w[i * L + j];
            v = v < 0 ? 0 : v > 1 ? 1 : v;
            /* white -> dark blue */
            int r = (int)lround(255 + (8 - 255) * v), g = (int)lround(255 + (48 - 255) * v),
                b = (int)lround(255 + (107 - 255) * v);
            fprintf(f,
                    "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                    "fill=\"rgb(%d,%d,%d)\" stroke=\"#ddd\" stroke-width=\"0.5\"><title>%s -&gt; %s: "
                    "%.3f</title></rect>\n",
                    left + j * cell, top + i * cell, cell, cell, r, g, b, tok_str(pred[i]),
                    tok_str(src[j]), (double)w[i * L + j]);
        }
    /* colour bar: 20 bands from 1 (top) to 0 (bottom); no gradients, for simple renderers */
    const int bx = left + (int)L * cell + 40, bh = nt * cell;
    for (int k = 0; k < 20; k++) {
        double v = 1.0 - (k + 0.5) / 20.0;
        int r = (int)lround(255 + (8 - 255) * v), g = (int)lround(255 + (48 - 255) * v),
            b = (int)lround(255 + (107 - 255) * v);
        fprintf(f, "<rect x=\"%d\" y=\"%.2f\" width=\"16\" height=\"%.2f\" fill=\"rgb(%d,%d,%d)\" shape-rendering=\"crispEdges\"/>\n",
                bx, top + bh * k / 20.0, bh / 20.0 + 0.3, r, g, b);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n",
            bx, top, bh);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\">1</text>\n", bx + 22, top + 10);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\">0</text>\n", bx + 22, top + bh);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"#666\">weights averaged over heads; "
               "rows: decoder positions, labelled with the token they produced</text>\n",
            10, top + bh + 30);
    fprintf(f, "</svg>\n");
}

static int make_dirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++)
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return 0;
            buf[i] = c;
        }
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void seq_str(char *buf, size_t cap, const int64_t *t, int64_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int64_t i = 0; i < n && k + 5 < cap; i++) {
        if (t[i] >= 0 && t[i] <= 9)
            buf[k++] = (char)('0' + t[i]);
        else
            k += (size_t)snprintf(buf + k, cap - k, "%s<%s>", i ? " " : "", tok_str(t[i]));
    }
    buf[k < cap ? k : cap - 1] = '\0';
}

/* The model's answer up to (not including) EOS, or everything when there is no EOS. */
static int64_t answer_len(const int64_t *pred, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (pred[i] == TOK_EOS) return i;
    return n;
}

static int write_html(const char *path, const char *svg_path, const int64_t *src, int64_t L,
                      const int64_t *pred, const float *w) {
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    char in[64], exp[64], got[80];
    int64_t rev[32];
    for (int64_t i = 0; i < L; i++) rev[i] = src[L - 1 - i];
    seq_str(in, sizeof in, src, L);
    seq_str(exp, sizeof exp, rev, L);
    seq_str(got, sizeof got, pred, answer_len(pred, L + 1));
    fprintf(f,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<title>attn demo: cross-attention</title>\n<style>\n"
            "body { font-family: Helvetica, Arial, sans-serif; margin: 2em; color: #222; max-width: 60em; }\n"
            "code { background: #f3f3f3; padding: 0 0.3em; }\n"
            "table.ex td { padding: 0.2em 1em 0.2em 0; font-family: monospace; font-size: 1.1em; }\n"
            "</style>\n</head>\n<body>\n<h1>attn demo: learning to reverse digit sequences</h1>\n"
            "<p>An encoder-decoder Transformer trained by <code>attn demo</code> (plain C, no Python) "
            "on generated digit sequences. The example below is held out: it was never seen in "
            "training.</p>\n<table class=\"ex\">\n<tr><td>input</td><td>%s</td></tr>\n"
            "<tr><td>expected</td><td>%s</td></tr>\n<tr><td>model</td><td>%s (%s)</td></tr>\n"
            "</table>\n<h2>Cross-attention of the last decoder layer</h2>\n"
            "<p>Each row is a decoder position, labelled with the token it produced; each column an "
            "input token. Weights are averaged over heads. To write the i-th output digit the model "
            "looks at the i-th input digit from the end: an anti-diagonal.</p>\n",
            in, exp, got, answer_ok(src, pred, L) ? "correct" : "wrong");
    write_svg(f, src, L, pred, w);
    fprintf(f, "<p>The same picture as a standalone file: <code>%s</code></p>\n</body>\n</html>\n",
            svg_path);
    return fclose(f) == 0;
}

/* ---- progress ------------------------------------------------------------------------------------ */
static void fmt_time(char *buf, size_t cap, double s) {
    long t = s < 0 ? 0 : (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static void progress(int tty, long step, long steps, double loss, double acc, double tok_s,
                     double elapsed) {
    char eta[32], el[32];
    fmt_time(eta, sizeof eta, step > 0 ? elapsed / step * (steps - step) : 0);
    fmt_time(el, sizeof el, elapsed);
    char accs[16];
    if (acc < 0)
        snprintf(accs, sizeof accs, "  -  ");
    else
        snprintf(accs, sizeof accs, "%5.1f%%", 100 * acc);
    if (tty) {
        /* one line, redrawn in place; short enough for an 80-column terminal */
        const int width = 20;
        int fill = (int)((double)width * step / steps);
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        printf("\r[%s] %ld/%ld loss %.4f acc %s %.0f tok/s ETA %s\033[K", bar, step, steps, loss,
               accs, tok_s, eta);
    } else {
        printf("step %ld/%ld  loss %.4f  acc %s  %.0f tok/s  elapsed %s  ETA %s\n", step, steps,
               loss, accs, tok_s, el, eta);
    }
    fflush(stdout);
}

/* ---- the command -------------------------------------------------------------------------------- */
static int parse_args(int argc, char **argv, demo_opts *o, int *help) {
    int no_gate = 0;
    cli_opt opts[] = {
        CLI_INT("--steps", &o->steps, 1, 10000000),
        CLI_INT("--seed", &o->seed, 0, 2147483647L),
        CLI_INT("--min-len", &o->min_len, 1, 32),
        CLI_INT("--max-len", &o->max_len, 1, 32),
        CLI_INT("--threads", &o->threads, 1, 1024),
        CLI_INT("--batch", &o->batch, 1, 4096),
        CLI_INT("--eval", &o->eval_n, 1, 1000000),
        CLI_INT("--d-model", &o->d_model, 2, 4096),
        CLI_INT("--heads", &o->heads, 1, 256),
        CLI_INT("--layers", &o->layers, 1, 64),
        CLI_INT("--ff", &o->ff, 1, 65536),
        CLI_INT("--warmup", &o->warmup, 0, 10000000),
        CLI_INT("--log-every", &o->log_every, 1, 10000000),
        CLI_DOUBLE("--lr", &o->lr, 1e-7, 1.0),
        CLI_DOUBLE("--clip", &o->clip, 0.0, 1e6),
        CLI_STRING_NONEMPTY("--out", &o->out),
        CLI_FLAG("--no-accuracy-gate", &no_gate),
        CLI_END,
    };
    int parsed = cli_parse("demo", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        *help = 1;
        return 0;
    }
    if (parsed) return parsed;
    if (no_gate) o->gate = 0;
    if (o->min_len > o->max_len)
        return cli_usage_error("demo: --min-len %ld is above --max-len %ld", o->min_len, o->max_len);
    if (o->d_model % o->heads)
        return cli_usage_error("demo: --d-model %ld is not divisible by --heads %ld", o->d_model, o->heads);
    if (o->warmup > o->steps) return cli_usage_error("demo: --warmup %ld is above --steps %ld", o->warmup, o->steps);
    return 0;
}

#define CHECK(expr)                                                                              \
    do {                                                                                         \
        attn_status st_ = (expr);                                                                \
        if (st_ != ATTN_OK) {                                                                    \
            rc = cli_fail("demo: %s: %s", attn_status_str(st_), attn_last_error());              \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

int cmd_demo(int argc, char **argv) {
    demo_opts o = {.steps = 1200, .seed = 1, .min_len = 4, .max_len = 10, .threads = 0,
                   .batch = 64, .eval_n = 1000, .d_model = 64, .heads = 4, .layers = 2,
                   .ff = 256, .warmup = -1, .log_every = 0, .lr = 2e-3, .clip = 1.0, .gate = 1,
                   .out = "attn-demo-output"};
    int help = 0;
    int prc = parse_args(argc, argv, &o, &help);
    if (help) {
        usage(stdout);
        return 0;
    }
    if (prc) return prc;
    if (o.warmup < 0) o.warmup = o.steps / 10;
    if (o.log_every <= 0) o.log_every = o.steps >= 20 ? o.steps / 20 : 1;
    if (o.threads > 0) attn_set_num_threads((int)o.threads);

    int rc = 1;
    model m;
    memset(&m, 0, sizeof m);
    scratch s;
    memset(&s, 0, sizeof s);
    batch_buf bb;
    eval_set dev, test;
    memset(&dev, 0, sizeof dev);
    memset(&test, 0, sizeof test);
    attn_optimizer *opt_t = NULL, *opt_e = NULL;
    const int64_t d = o.d_model, B = o.batch, lmax = o.max_len;
    const int64_t eval_chunk = 128;
    const int64_t bmax = B > eval_chunk ? B : eval_chunk;
    int tty = isatty(fileno(stdout));
    if (!batch_alloc(&bb, bmax, lmax, d)) {
        rc = cli_fail("demo: out of memory");
        goto done;
    }

    /* model */
    m.cfg = attn_transformer_config_default();
    m.cfg.layer = attn_layer_config_default(d, o.heads);
    m.cfg.layer.dim_feedforward = o.ff;
    m.cfg.layer.dropout = 0.0f;
    m.cfg.num_encoder_layers = o.layers;
    m.cfg.num_decoder_layers = o.layers;
    m.d = d;
    m.max_pos = lmax + 1;
    m.scale = (float)sqrt((double)d);
    m.pe = malloc(sizeof(float) * (size_t)(m.max_pos * d));
    if (!m.pe) {
        rc = cli_fail("demo: out of memory");
        goto done;
    }
    CHECK(attn_sinusoidal_table(m.pe, m.max_pos, d));
    CHECK(attn_transformer_create(&m.cfg, &m.t));
    CHECK(attn_embedding_create(VOCAB, d, TOK_PAD, &m.emb));
    const attn_params *tp = attn_transformer_params(m.t), *ep = attn_embedding_params(m.emb);
    CHECK(attn_params_reset(tp, (uint64_t)o.seed * 2 + 1));
    CHECK(attn_params_reset(ep, (uint64_t)o.seed * 2 + 2));
    m.w = attn_params_find(ep, "weight");
    if (!m.w) {
        rc = cli_fail("demo: embedding has no 'weight' parameter");
        goto done;
    }
    /* N(0, 1/d): embeddings times sqrt(d) have unit scale, logits start near 0 (Vaswani et al.) */
    for (size_t i = 0; i < m.w->numel; i++) m.w->data[i] /= m.scale;
    attn_adamw_config ac = attn_adamw_config_default();
    ac.beta2 = 0.98;
    ac.eps = 1e-9;
    CHECK(attn_adamw_create(tp, &ac, &opt_t));
    CHECK(attn_adamw_create(ep, &ac, &opt_e));
    /* no weight decay on biases and norms */
    for (size_t i = 0; i < attn_params_count(tp); i++)
        if (attn_params_get(tp, i)->rank < 2) CHECK(attn_optimizer_set_weight_decay(opt_t, i, 0.0));

    /* data */
    if (!eval_make(&dev, o.min_len, o.max_len, 8 * (o.max_len - o.min_len + 1), (uint64_t)o.seed * 7919 + 3) ||
        !eval_make(&test, o.min_len, o.max_len, o.eval_n, (uint64_t)o.seed * 7919 + 5)) {
        rc = cli_fail("demo: out of memory");
        goto done;
    }
    uint64_t rng = (uint64_t)o.seed * 0x2545F4914F6CDD1Dull + 11;

    size_t nparams = attn_params_numel(tp) + attn_params_numel(ep);
    printf("attn %s demo: teaching a Transformer to reverse digit sequences\n", ATTN_VERSION_STRING);
    printf("model: nn.Transformer d_model %lld, %lld heads, %ld+%ld layers, feed-forward %lld, "
           "%zu parameters; kernels %s, %d threads\n",
           (long long)d, (long long)o.heads, o.layers, o.layers, (long long)o.ff, nparams,
           attn_isa_name(attn_active_isa()), attn_get_num_threads());
    printf("task: lengths %ld..%ld, digits 0-9, 1 in %d sequences held out; %ld steps of %lld "
           "sequences, AdamW lr %g (warmup %ld, cosine), clip %g, seed %ld\n",
           o.min_len, o.max_len, HELD_OUT_MOD, o.steps, (long long)B, o.lr, o.warmup, o.clip, o.seed);
    fflush(stdout);

    attn_lr_schedule sched = {.max_lr = o.lr, .min_lr = o.lr * 0.02, .warmup_steps = o.warmup,
                              .total_steps = o.steps};
    attn_cross_entropy_config cec = attn_cross_entropy_config_default();
    const double t0 = now_s();
    double tokens = 0, loss_avg = -1, acc = -1, last_draw = -1;
    long skipped = 0;
    for (long step = 0; step < o.steps; step++) {
        const int64_t L = o.min_len + rand_below(&rng, o.max_len - o.min_len + 1), nt = L + 1;
        for (int64_t b = 0; b < B; b++) {
            int64_t *sq = bb.src + b * L;
            draw_sequence(&rng, sq, L, 0);
            bb.tgt_in[b * nt] = TOK_BOS;
            for (int64_t i = 0; i < L; i++) {
                bb.tgt_in[b * nt + 1 + i] = sq[L - 1 - i];
                bb.tgt_out[b * nt + i] = sq[L - 1 - i];
            }
            bb.tgt_out[b * nt + L] = TOK_EOS;
        }
        CHECK(embed(&m, bb.src, B, L, 0, bb.xs));
        CHECK(embed(&m, bb.tgt_in, B, nt, 0, bb.xt));
        attn_transformer_args ta = attn_transformer_args_default();
        ta.batch = B;
        ta.n_src = L;
        ta.n_tgt = nt;
        ta.src = bb.xs;
        ta.tgt = bb.xt;
        ta.tgt_masks.is_causal = 1;
        ta.training = 1;
        ta.seed = (uint64_t)o.seed;
        ta.offset = (uint64_t)step * 64;
        size_t need_saved = attn_transformer_saved_size(m.t, &ta),
               need_ws = attn_transformer_workspace_size(m.t, &ta);
        if (!ensure(&s.saved, &s.saved_cap, need_saved) || !ensure(&s.ws, &s.ws_cap, need_ws)) {
            rc = cli_fail("demo: out of memory");
            goto done;
        }
        CHECK(attn_transformer_forward(m.t, &ta, bb.out, s.saved, s.saved_cap, s.ws, s.ws_cap));
        CHECK(project(&m, &s, bb.out, B * nt, bb.logits));
        float loss;
        CHECK(attn_cross_entropy_forward(bb.logits, bb.tgt_out, B * nt, VOCAB, &cec, &loss, bb.logits));
        CHECK(attn_params_zero_grad(tp));
        CHECK(attn_params_zero_grad(ep));
        CHECK(attn_linear_backward(bb.out, m.w->data, bb.logits, bb.dh, 0, m.w->grad, NULL, B * nt, d,
                                   VOCAB, s.lin, s.lin_cap));
        CHECK(attn_transformer_backward(m.t, &ta, bb.dh, bb.dsrc, bb.dtgt, s.saved, s.saved_cap, s.ws,
                                        s.ws_cap));
        for (int64_t i = 0; i < B * L * d; i++) bb.dsrc[i] *= m.scale;
        for (int64_t i = 0; i < B * nt * d; i++) bb.dtgt[i] *= m.scale;
        CHECK(attn_embedding_backward(m.emb, bb.src, B * L, bb.dsrc));
        CHECK(attn_embedding_backward(m.emb, bb.tgt_in, B * nt, bb.dtgt));
        /* one global norm over both parameter lists (torch.nn.utils.clip_grad_norm_) */
        double n1, n2, lr;
        CHECK(attn_grad_norm(tp, &n1));
        CHECK(attn_grad_norm(ep, &n2));
        double gn = sqrt(n1 * n1 + n2 * n2);
        if (!isfinite(gn) || !isfinite(loss)) {
            skipped++;
        } else {
            if (o.clip > 0 && o.clip / (gn + 1e-6) < 1) {
                CHECK(attn_grad_scale(tp, o.clip / (gn + 1e-6)));
                CHECK(attn_grad_scale(ep, o.clip / (gn + 1e-6)));
            }
            CHECK(attn_lr_warmup_cosine(&sched, step, &lr));
            CHECK(attn_optimizer_step(opt_t, lr));
            CHECK(attn_optimizer_step(opt_e, lr));
        }
        tokens += (double)(B * (L + nt));
        loss_avg = loss_avg < 0 ? loss : 0.9 * loss_avg + 0.1 * loss;
        const long done_steps = step + 1;
        const int log_now = done_steps % o.log_every == 0 || done_steps == o.steps;
        if (log_now) {
            long c, n;
            CHECK(evaluate(&m, &s, &bb, eval_chunk, &dev, &c, &n));
            acc = (double)c / (double)n;
        }
        double el = now_s() - t0;
        if (log_now || (tty && el - last_draw >= 0.1)) {
            progress(tty, done_steps, o.steps, loss_avg, acc, tokens / el, el);
            last_draw = el;
        }
    }
    const double train_s = now_s() - t0;
    if (tty) printf("\n");
    printf("trained %ld steps in %.1f s (%.0f tokens/s)%s\n", o.steps, train_s, tokens / train_s,
           skipped ? " (some steps skipped: non-finite gradients)" : "");

    /* held-out evaluation */
    long correct, total;
    const double e0 = now_s();
    CHECK(evaluate(&m, &s, &bb, eval_chunk, &test, &correct, &total));
    const double eval_s = now_s() - e0;

    /* a few held-out examples, one per length spread over the range */
    printf("\nheld-out examples (never seen in training):\n");
    printf("  %-14s %-14s %-18s\n", "input", "expected", "model");
    int64_t ex_src[32], ex_pred[33];
    int64_t ex_L = 0;
    const long show = 5;
    for (long k = 0; k < show; k++) {
        long L = o.min_len + (o.max_len - o.min_len) * k / (show > 1 ? show - 1 : 1);
        if (test.count[L] == 0) continue;
        long idx = (k * 37) % test.count[L];
        memcpy(bb.src, test.seq[L] + idx * L, sizeof(int64_t) * (size_t)L);
        CHECK(greedy(&m, &s, &bb, 1, L));
        char in[64], exp[64], got[80];
        int64_t rev[32];
        for (long i = 0; i < L; i++) rev[i] = bb.src[L - 1 - i];
        seq_str(in, sizeof in, bb.src, L);
        seq_str(exp, sizeof exp, rev, L);
        seq_str(got, sizeof got, bb.pred, answer_len(bb.pred, L + 1));
        printf("  %-14s %-14s %-18s %s\n", in, exp, got, answer_ok(bb.src, bb.pred, L) ? "ok" : "WRONG");
        if (L >= ex_L) { /* the longest one is drawn */
            ex_L = L;
            memcpy(ex_src, bb.src, sizeof(int64_t) * (size_t)L);
            memcpy(ex_pred, bb.pred, sizeof(int64_t) * (size_t)(L + 1));
        }
    }

    /* cross-attention heat map of the drawn example */
    if (ex_L > 0) {
        float w[33 * 32];
        int64_t tgt_in[33];
        tgt_in[0] = TOK_BOS;
        for (int64_t i = 0; i < ex_L; i++) tgt_in[i + 1] = ex_pred[i];
        CHECK(cross_attention(&m, &s, ex_src, ex_L, tgt_in, w));
        double diag = 0;
        for (int64_t i = 0; i < ex_L; i++) diag += w[i * ex_L + (ex_L - 1 - i)];
        if (!make_dirs(o.out)) {
            rc = cli_fail("demo: cannot create directory '%s': %s", o.out, strerror(errno));
            goto done;
        }
        char svg_path[4200], html_path[4200];
        snprintf(svg_path, sizeof svg_path, "%s/cross_attention.svg", o.out);
        snprintf(html_path, sizeof html_path, "%s/cross_attention.html", o.out);
        FILE *f = fopen(svg_path, "w");
        if (!f) {
            rc = cli_fail("demo: cannot write '%s': %s", svg_path, strerror(errno));
            goto done;
        }
        fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        write_svg(f, ex_src, ex_L, ex_pred, w);
        if (fclose(f) != 0 || !write_html(html_path, "cross_attention.svg", ex_src, ex_L, ex_pred, w)) {
            rc = cli_fail("demo: cannot write '%s': %s", html_path, strerror(errno));
            goto done;
        }
        printf("\ncross-attention of the last decoder layer (mean weight on the anti-diagonal: %.2f)\n"
               "written to %s and %s\n",
               diag / (double)ex_L, svg_path, html_path);
    }
    const double pct = 100.0 * (double)correct / (double)total;
    printf("\nscored %ld held-out sequences in %.1f s; total time %.1f s\n", total, eval_s, now_s() - t0);
    printf("held-out exact-sequence accuracy: %.1f%%\n", pct);
    rc = (!o.gate || correct * 100 >= total * 99) ? 0 : 1;
done:
    fflush(stdout);
    attn_optimizer_free(opt_t);
    attn_optimizer_free(opt_e);
    attn_transformer_free(m.t);
    attn_embedding_free(m.emb);
    free(m.pe);
    free(s.ws);
    free(s.saved);
    free(s.lin);
    free(s.cache);
    batch_free(&bb);
    eval_free(&dev);
    eval_free(&test);
    return rc;
}
