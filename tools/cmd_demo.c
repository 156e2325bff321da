/* attn demo: train an encoder-decoder Transformer to reverse digit sequences, in plain C.
 *
 * The task (tools/demo_task.c) is generated on the fly: a source of L digits and its reversal as
 * the target, framed by BOS / EOS; one sequence in ten, by a hash of its digits, is held out, so
 * the sequences the demo is scored on were never seen in training, whatever the seed. The model is
 * attn_seq2seq (token embeddings scaled by sqrt(d_model), sinusoidal positions, nn.Transformer,
 * output projection); it is trained with teacher forcing (causal target mask), cross-entropy,
 * AdamW with linear warmup and cosine decay, and gradient clipping (attn_train_step). Greedy
 * decoding with the model's cached decode steps on held-out sequences gives the exact-sequence
 * accuracy; the cross-attention of the last decoder layer for one example is written as SVG and
 * HTML with attn_viz (the reversal shows up as an anti-diagonal). Deterministic for a given seed
 * and thread count. */
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
#include "safe_io.h"
#include "demo_task.h"
#include "trainer.h"

typedef struct demo_opts {
    long steps, seed, min_len, max_len, threads, batch, eval_n, d_model, heads, layers, ff, warmup;
    long log_every;
    double lr, clip;
    int gate, quiet, force;
    const char *out, *svg; /* svg: NULL = OUT/cross_attention.svg */
} demo_opts;

static void usage(FILE *f) {
    fprintf(f, "usage: attn demo [options]\n\n"
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
               "  --svg FILE         the heat map's SVG there instead of DIR/cross_attention.svg\n"
               "  --force            replace an existing SVG / HTML output that is not of its kind\n"
               "  --log-every N      progress interval when stdout is not a terminal\n"
               "                     (default steps/20)\n"
               "  --no-accuracy-gate exit 0 whatever the accuracy (short runs, tests)\n"
               "  -h, --help         this help\n");
}

/* ---- small utilities ------------------------------------------------------------------------ */

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

/* ---- cross-attention of the last decoder layer --------------------------------------------------
 * One teacher-forced forward of the model on (src, [BOS, pred[0 .. L))) with an attention capture
 * asking for the last decoder layer's multihead_attn: eval mode and a causal target, so these are
 * the weights greedy decoding applied when it produced pred. Averaged over heads, as
 * nn.MultiheadAttention's default average_attn_weights. */
static attn_status demo_cross_attention(attn_seq2seq *m, const int64_t *src, int64_t L, const int64_t *pred,
                                        float *weights /* [L+1, L] */) {
    const attn_seq2seq_config *cfg = attn_seq2seq_get_config(m);
    const int64_t nt = L + 1, nl = cfg->transformer.num_decoder_layers, V = cfg->tgt_vocab;
    char name[128];
    snprintf(name, sizeof name, "transformer.decoder.layers.%lld.multihead_attn", (long long)(nl - 1));
    int64_t tgt[DEMO_MAX_LEN + 1];
    tgt[0] = DEMO_BOS;
    memcpy(tgt + 1, pred, sizeof(int64_t) * (size_t)L);
    attn_capture *cap = NULL;
    attn_status st = attn_capture_create(&cap);
    if (st) return st;
    attn_seq2seq_args a = attn_seq2seq_args_default();
    a.batch = 1;
    a.n_src = L;
    a.n_tgt = nt;
    a.src = src;
    a.tgt = tgt;
    a.capture = cap;
    const size_t wb = attn_seq2seq_workspace_size(m, &a);
    void *ws = malloc(wb ? wb : 1);
    float *logits = malloc(sizeof(float) * (size_t)(nt * V));
    attn_capture_record r;
    if (!ws || !logits) st = ATTN_ERR_OUT_OF_MEMORY;
    if (!st) st = attn_capture_add(cap, name, 0, 0, 0, 0);
    if (!st) st = attn_seq2seq_forward(m, &a, logits, NULL, 0, ws, wb);
    if (!st) st = attn_capture_find(cap, name, &r);
    if (!st) { /* r.weights [1, heads, nt, L] */
        for (int64_t i = 0; i < nt * L; i++) weights[i] = 0.0f;
        for (int64_t h = 0; h < r.heads; h++)
            for (int64_t i = 0; i < nt * L; i++) weights[i] += r.weights[h * nt * L + i] / (float)r.heads;
    }
    attn_capture_free(cap);
    free(ws);
    free(logits);
    return st;
}

/* ---- the figure: SVG and HTML heat maps ----------------------------------------------------------- */
/* 0, or the exit code after the message. */
static int write_figure(const char *svg_path, const char *html_path, const int64_t *src, int64_t L, const int64_t *pred,
                        const float *w) {
    const char *cols[DEMO_MAX_LEN], *rows[DEMO_MAX_LEN + 1];
    for (int64_t j = 0; j < L; j++) cols[j] = demo_tok_str(src[j]);
    for (int64_t i = 0; i <= L; i++) rows[i] = demo_tok_str(pred[i]);
    attn_viz_heatmap hm = attn_viz_heatmap_default();
    hm.rows = L + 1;
    hm.cols = L;
    hm.weights = w;
    hm.row_labels = rows;
    hm.col_labels = cols;
    hm.title = "cross-attention: output token (row) attending to input token (column)";
    hm.row_axis = "output";
    hm.col_axis = "input";
    hm.caption = "weights averaged over heads; rows: decoder positions, labelled with the token they produced";
    safe_file sf;
    FILE *f = safe_fopen(&sf, svg_path, SAFE_KIND_SVG);
    if (!f) return cli_fail("demo: cannot write '%s': %s", svg_path, attn_last_error());
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    attn_status st = attn_viz_write_svg(f, &hm);
    if (st) {
        cli_fail("demo: cannot write '%s': %s", svg_path, attn_last_error());
        fclose(f);
        attn_io_out_abort(&sf.o);
        return 1;
    }
    if (safe_fclose(&sf, f)) return cli_fail("demo: cannot write '%s': %s", svg_path, attn_last_error());

    /* the page: the example, the picture, where the standalone file is */
    char in[64], exp[64], got[80], *before = NULL;
    size_t before_len = 0;
    int64_t rev[DEMO_MAX_LEN];
    for (int64_t i = 0; i < L; i++) rev[i] = src[L - 1 - i];
    demo_seq_str(in, sizeof in, src, L);
    demo_seq_str(exp, sizeof exp, rev, L);
    demo_seq_str(got, sizeof got, pred, demo_answer_len(pred, L + 1));
    FILE *b = open_memstream(&before, &before_len);
    if (!b) return cli_fail("demo: out of memory");
    fputs("<h1>attn demo: learning to reverse digit sequences</h1>\n"
          "<p>An encoder-decoder Transformer trained by <code>attn demo</code> (plain C, no Python) on "
          "generated digit sequences. The example below is held out: it was never seen in training.</p>\n"
          "<table>\n<tr><td>input</td><td class=\"mono\">",
          b);
    attn_viz_write_escaped(b, in);
    fputs("</td></tr>\n<tr><td>expected</td><td class=\"mono\">", b);
    attn_viz_write_escaped(b, exp);
    fputs("</td></tr>\n<tr><td>model</td><td class=\"mono\">", b);
    attn_viz_write_escaped(b, got);
    fprintf(b,
            " (%s)</td></tr>\n</table>\n<h2>Cross-attention of the last decoder layer</h2>\n"
            "<p>Each row is a decoder position, labelled with the token it produced; each column an input "
            "token. Weights are averaged over heads. To write the i-th output digit the model looks at the "
            "i-th input digit from the end: an anti-diagonal.</p>\n",
            demo_answer_ok(src, pred, L) ? "correct" : "wrong");
    fclose(b);
    /* a --svg elsewhere is not named: the page would have to escape an arbitrary path */
    const size_t sl = strlen(svg_path);
    const char *after = sl >= 20 && !strcmp(svg_path + sl - 20, "/cross_attention.svg")
                            ? "<p>The same picture as a standalone file: <code>cross_attention.svg</code></p>\n"
                            : "<p>The same picture is written as a standalone SVG file (--svg).</p>\n";
    f = safe_fopen(&sf, html_path, SAFE_KIND_HTML);
    if (!f) {
        free(before);
        return cli_fail("demo: cannot write '%s': %s", html_path, attn_last_error());
    }
    st = attn_viz_write_html(f, &hm, "attn demo: cross-attention", before, after);
    free(before);
    if (st) {
        cli_fail("demo: cannot write '%s': %s", html_path, attn_last_error());
        fclose(f);
        attn_io_out_abort(&sf.o);
        return 1;
    }
    if (safe_fclose(&sf, f)) return cli_fail("demo: cannot write '%s': %s", html_path, attn_last_error());
    return 0;
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

/* ---- progress ------------------------------------------------------------------------------------ */
static void fmt_time(char *buf, size_t cap, double s) {
    long t = s < 0 ? 0 : (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static void progress(int tty, long step, long steps, double loss, double acc, double tok_s, double elapsed) {
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
        printf("\r[%s] %ld/%ld loss %.4f acc %s %.0f tok/s ETA %s\033[K", bar, step, steps, loss, accs, tok_s, eta);
    } else {
        printf("step %ld/%ld  loss %.4f  acc %s  %.0f tok/s  elapsed %s  ETA %s\n", step, steps, loss, accs, tok_s, el,
               eta);
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
        CLI_STRING_NONEMPTY("--svg", &o->svg),
        CLI_FLAG("--force", &o->force),
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

/* A run of the demo: options, model, data and scratch (the training loop's hooks' context). */
typedef struct demo_run {
    demo_opts o;
    attn_seq2seq *m;
    attn_optimizer *opt;
    const attn_params *ps;
    demo_decoder dec;
    demo_eval_set dev, test;
    void *saved, *ws;
    size_t saved_cap, ws_cap;
    int64_t *src, *tgt_in, *tgt_out;
    float *logits;
    uint64_t rng;
    int tty, oom; /* oom: a failure that is "demo: out of memory" */
    double t0, loss_avg, acc, last_draw;
    char svg_path[4200], html_path[4200];
} demo_run;

enum { DEMO_EVAL_CHUNK = 128 };

/* The model (embeddings N(0, 1/d)), its AdamW, the evaluation sets and the batch: 0, or 1
 * (message printed). */
static int demo_setup(demo_run *r) {
    const demo_opts *o = &r->o;
    const int64_t d = o->d_model;
    const size_t nt_max = (size_t)(o->batch * (o->max_len + 1));
    r->src = malloc(sizeof(int64_t) * nt_max), r->tgt_in = malloc(sizeof(int64_t) * nt_max);
    r->tgt_out = malloc(sizeof(int64_t) * nt_max);
    r->logits = malloc(sizeof(float) * nt_max * DEMO_VOCAB);
    r->tty = isatty(fileno(stdout));
    if (!r->src || !r->tgt_in || !r->tgt_out || !r->logits) return cli_fail("demo: out of memory");
    attn_seq2seq_config cfg = attn_seq2seq_config_default(DEMO_VOCAB, DEMO_VOCAB, d, o->heads, o->layers);
    cfg.max_len = o->max_len + 1;
    cfg.transformer.layer.dim_feedforward = o->ff;
    cfg.transformer.layer.dropout = 0.0f;
    attn_status st;
    if ((st = attn_seq2seq_create(&cfg, &r->m)) != ATTN_OK) goto fail;
    r->ps = attn_seq2seq_params(r->m);
    if ((st = attn_params_reset(r->ps, (uint64_t)o->seed * 2 + 1)) != ATTN_OK) goto fail;
    /* embeddings N(0, 1/d): times sqrt(d) they have unit scale, as the positions (Vaswani et al.) */
    for (size_t i = 0; i < attn_params_count(r->ps); i++) {
        const attn_param *p = attn_params_get(r->ps, i);
        if (strstr(p->name, "_embedding.weight"))
            for (size_t k = 0; k < p->numel; k++) p->data[k] /= (float)sqrt((double)d);
    }
    attn_adamw_config ac = attn_adamw_config_default();
    ac.beta2 = 0.98;
    ac.eps = 1e-9;
    if ((st = attn_adamw_create(r->ps, &ac, &r->opt)) != ATTN_OK) goto fail;
    /* no weight decay on biases and norms */
    for (size_t i = 0; i < attn_params_count(r->ps); i++)
        if (attn_params_get(r->ps, i)->rank < 2 && (st = attn_optimizer_set_weight_decay(r->opt, i, 0.0)) != ATTN_OK)
            goto fail;
    r->dec.model = r->m;
    r->dec.d_model = d;
    if (!demo_eval_make(&r->dev, o->min_len, o->max_len, 8 * (o->max_len - o->min_len + 1),
                        (uint64_t)o->seed * 7919 + 3) ||
        !demo_eval_make(&r->test, o->min_len, o->max_len, o->eval_n, (uint64_t)o->seed * 7919 + 5))
        return cli_fail("demo: out of memory");
    r->rng = (uint64_t)o->seed * 0x2545F4914F6CDD1Dull + 11;
    return 0;
fail:
    return cli_fail("demo: %s: %s", attn_status_str(st), attn_last_error());
}

/* trainer hook: a batch of one random length, teacher-forced: forward, cross-entropy, backward. */
static attn_status demo_step(void *ctx, int64_t step, float *loss, double *units) {
    demo_run *r = ctx;
    const demo_opts *o = &r->o;
    const int64_t B = o->batch, L = o->min_len + demo_rand_below(&r->rng, o->max_len - o->min_len + 1), nt = L + 1;
    demo_make_batch(&r->rng, B, L, r->src, r->tgt_in, r->tgt_out);
    attn_seq2seq_args a = attn_seq2seq_args_default();
    a.batch = B;
    a.n_src = L;
    a.n_tgt = nt;
    a.src = r->src;
    a.tgt = r->tgt_in;
    a.training = 1;
    a.seed = (uint64_t)o->seed;
    a.offset = (uint64_t)step * 64;
    if (!ensure(&r->saved, &r->saved_cap, attn_seq2seq_saved_size(r->m, &a)) ||
        !ensure(&r->ws, &r->ws_cap, attn_seq2seq_workspace_size(r->m, &a))) {
        r->oom = 1;
        return ATTN_ERR_OUT_OF_MEMORY;
    }
    attn_status st;
    attn_cross_entropy_config cec = attn_cross_entropy_config_default();
    if ((st = attn_seq2seq_forward(r->m, &a, r->logits, r->saved, r->saved_cap, r->ws, r->ws_cap)) ||
        (st = attn_cross_entropy_forward(r->logits, r->tgt_out, B * nt, DEMO_VOCAB, &cec, loss, r->logits)) ||
        (st = attn_params_zero_grad(r->ps)) ||
        (st = attn_seq2seq_backward(r->m, &a, r->logits, r->saved, r->saved_cap, r->ws, r->ws_cap)))
        return st;
    *units = (double)(B * (L + nt));
    return ATTN_OK;
}

/* trainer hook: the smoothed loss, the accuracy on the dev set every --log-every steps, the
 * progress bar (a terminal) or line. */
static attn_status demo_step_done(void *ctx, const trainer_progress *p) {
    demo_run *r = ctx;
    r->loss_avg = r->loss_avg < 0 ? p->loss : 0.9 * r->loss_avg + 0.1 * p->loss;
    const long done_steps = (long)p->step;
    const int log_now = done_steps % r->o.log_every == 0 || done_steps == r->o.steps;
    if (log_now) {
        long c, n;
        attn_status st = demo_evaluate(&r->dec, &r->dev, DEMO_EVAL_CHUNK, &c, &n);
        if (st) return st;
        r->acc = (double)c / (double)n;
    }
    double el = now_s() - r->t0;
    if (log_now || (r->tty && el - r->last_draw >= 0.1)) {
        progress(r->tty, done_steps, r->o.steps, r->loss_avg, r->acc, p->units / el, el);
        r->last_draw = el;
    }
    return ATTN_OK;
}

/* trainer hook: the message of a failure. */
static void demo_fail(void *ctx, trainer_failure where, attn_status s) {
    (void)where;
    if (((demo_run *)ctx)->oom)
        cli_fail("demo: out of memory");
    else
        cli_fail("demo: %s: %s", attn_status_str(s), attn_last_error());
}

/* The training: exit status 0, or 1 (message printed). */
static int demo_train(demo_run *r) {
    const demo_opts *o = &r->o;
    trainer_config c = trainer_config_default("demo");
    c.ps = r->ps, c.opt = r->opt;
    c.sched =
        (attn_lr_schedule){.max_lr = o->lr, .min_lr = o->lr * 0.02, .warmup_steps = o->warmup, .total_steps = o->steps};
    c.clip = o->clip, c.batch = o->batch, c.steps = o->steps, c.seed = (uint64_t)o->seed;
    c.catch_signals = 0;       /* Ctrl-C ends the demo at once: there is no checkpoint to write */
    c.skip_nonfinite_loss = 1; /* a non-finite loss or gradient skips the step, counted */
    c.quiet_skips = 1;
    const trainer_hooks h = {r, NULL, demo_step, NULL, NULL, demo_step_done, demo_fail};
    trainer_result res;
    r->t0 = now_s();
    r->loss_avg = -1, r->acc = -1, r->last_draw = -1;
    if (trainer_run(&c, &h, &res)) return 1;
    const double train_s = now_s() - r->t0;
    if (r->tty) printf("\n");
    printf("trained %ld steps in %.1f s (%.0f tokens/s)%s\n", o->steps, train_s, res.units / train_s,
           res.skipped ? " (some steps skipped: non-finite gradients)" : "");
    return 0;
}

/* A few held-out examples, one per length spread over the range; the longest one into ex_src,
 * ex_pred (*ex_L 0 when none). */
static attn_status demo_examples(demo_run *r, int64_t *ex_src, int64_t *ex_pred, int64_t *ex_L) {
    const demo_opts *o = &r->o;
    printf("\nheld-out examples (never seen in training):\n");
    printf("  %-14s %-14s %-18s\n", "input", "expected", "model");
    int64_t pred[DEMO_MAX_LEN + 1];
    *ex_L = 0;
    const long show = 5;
    for (long k = 0; k < show; k++) {
        long L = o->min_len + (o->max_len - o->min_len) * k / (show > 1 ? show - 1 : 1);
        if (r->test.count[L] == 0) continue;
        const int64_t *s = r->test.seq[L] + ((k * 37) % r->test.count[L]) * L;
        attn_status st = demo_greedy(&r->dec, s, 1, L, pred);
        if (st) return st;
        char in[64], exp[64], got[80];
        int64_t rev[DEMO_MAX_LEN];
        for (long i = 0; i < L; i++) rev[i] = s[L - 1 - i];
        demo_seq_str(in, sizeof in, s, L);
        demo_seq_str(exp, sizeof exp, rev, L);
        demo_seq_str(got, sizeof got, pred, demo_answer_len(pred, L + 1));
        printf("  %-14s %-14s %-18s %s\n", in, exp, got, demo_answer_ok(s, pred, L) ? "ok" : "WRONG");
        if (L >= *ex_L) { /* the longest one is drawn */
            *ex_L = L;
            memcpy(ex_src, s, sizeof(int64_t) * (size_t)L);
            memcpy(ex_pred, pred, sizeof(int64_t) * (size_t)(L + 1));
        }
    }
    return ATTN_OK;
}

/* The held-out score, the examples, the heat map and the closing lines: the exit status. */
static int demo_report(demo_run *r) {
    long correct, total;
    const double e0 = now_s();
    attn_status st = demo_evaluate(&r->dec, &r->test, DEMO_EVAL_CHUNK, &correct, &total);
    const double eval_s = now_s() - e0;
    int64_t ex_src[DEMO_MAX_LEN], ex_pred[DEMO_MAX_LEN + 1], ex_L = 0;
    if (!st) st = demo_examples(r, ex_src, ex_pred, &ex_L);
    /* cross-attention heat map of the drawn example */
    if (!st && ex_L > 0) {
        float w[(DEMO_MAX_LEN + 1) * DEMO_MAX_LEN];
        if ((st = demo_cross_attention(r->m, ex_src, ex_L, ex_pred, w)) != ATTN_OK) goto fail;
        double diag = 0;
        for (int64_t i = 0; i < ex_L; i++) diag += w[i * ex_L + (ex_L - 1 - i)];
        if (!make_dirs(r->o.out)) return cli_fail("demo: cannot create directory '%s': %s", r->o.out, strerror(errno));
        if (write_figure(r->svg_path, r->html_path, ex_src, ex_L, ex_pred, w)) return 1;
        printf("\ncross-attention of the last decoder layer (mean weight on the anti-diagonal: %.2f)\n"
               "written to %s and %s\n",
               diag / (double)ex_L, r->svg_path, r->html_path);
    }
    if (st) goto fail;
    const double pct = 100.0 * (double)correct / (double)total;
    printf("\nscored %ld held-out sequences in %.1f s; total time %.1f s\n", total, eval_s, now_s() - r->t0);
    printf("held-out exact-sequence accuracy: %.1f%%\n", pct);
    return (!r->o.gate || correct * 100 >= total * 99) ? 0 : 1;
fail:
    return cli_fail("demo: %s: %s", attn_status_str(st), attn_last_error());
}

static void demo_free(demo_run *r) {
    attn_optimizer_free(r->opt);
    attn_seq2seq_free(r->m);
    demo_decoder_free(&r->dec);
    demo_eval_free(&r->dev);
    demo_eval_free(&r->test);
    free(r->saved);
    free(r->ws);
    free(r->src);
    free(r->tgt_in);
    free(r->tgt_out);
    free(r->logits);
}

int cmd_demo(int argc, char **argv) {
    demo_run r;
    memset(&r, 0, sizeof r);
    r.o = (demo_opts){.steps = 1200,
                      .seed = 1,
                      .min_len = 4,
                      .max_len = 10,
                      .threads = 0,
                      .batch = 64,
                      .eval_n = 1000,
                      .d_model = 64,
                      .heads = 4,
                      .layers = 2,
                      .ff = 256,
                      .warmup = -1,
                      .log_every = 0,
                      .lr = 2e-3,
                      .clip = 1.0,
                      .gate = 1,
                      .out = "attn-demo-output"};
    demo_opts *o = &r.o;
    int help = 0;
    int prc = parse_args(argc, argv, o, &help);
    if (help) {
        usage(stdout);
        return 0;
    }
    if (prc) return prc;
    if (o->warmup < 0) o->warmup = o->steps / 10;
    if (o->log_every <= 0) o->log_every = o->steps >= 20 ? o->steps / 20 : 1;
    if (o->threads > 0) attn_set_num_threads((int)o->threads);
    /* the outputs are checked before training, so a path that would be refused costs no run */
    snprintf(r.svg_path, sizeof r.svg_path, "%s/cross_attention.svg", o->out);
    snprintf(r.html_path, sizeof r.html_path, "%s/cross_attention.html", o->out);
    if (o->svg) snprintf(r.svg_path, sizeof r.svg_path, "%s", o->svg);
    safe_set_inputs(NULL, 0, o->force);
    /* the folder first, so that the check finds it writable (or fails now, not after training) */
    if (!make_dirs(o->out)) return cli_fail("demo: cannot create directory '%s': %s", o->out, strerror(errno));
    const safe_out outs[2] = {{"--svg", r.svg_path, SAFE_KIND_SVG}, {"--out", r.html_path, SAFE_KIND_HTML}};
    if (safe_outs_check("demo", outs, 2, NULL, 0, o->force)) return 1;
    int rc = demo_setup(&r);
    if (!rc) {
        printf("attn %s demo: teaching a Transformer to reverse digit sequences\n", ATTN_VERSION_STRING);
        printf("model: nn.Transformer d_model %lld, %lld heads, %ld+%ld layers, feed-forward %lld, "
               "%zu parameters; kernels %s, %d threads\n",
               (long long)o->d_model, (long long)o->heads, o->layers, o->layers, (long long)o->ff,
               attn_params_numel(r.ps), attn_isa_name(attn_active_isa()), attn_get_num_threads());
        printf("task: lengths %ld..%ld, digits 0-9, 1 in %d sequences held out; %ld steps of %lld "
               "sequences, AdamW lr %g (warmup %ld, cosine), clip %g, seed %ld\n",
               o->min_len, o->max_len, DEMO_HELD_OUT_MOD, o->steps, (long long)o->batch, o->lr, o->warmup, o->clip,
               o->seed);
        fflush(stdout);
        rc = demo_train(&r);
    }
    if (!rc) rc = demo_report(&r);
    fflush(stdout);
    demo_free(&r);
    return rc;
}
