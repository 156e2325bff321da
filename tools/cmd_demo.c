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

typedef struct demo_opts {
    long steps, seed, min_len, max_len, threads, batch, eval_n, d_model, heads, layers, ff, warmup;
    long log_every;
    double lr, clip;
    int gate, quiet, force;
    const char *out, *svg; /* svg: NULL = OUT/cross_attention.svg */
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
static int write_figure(const char *svg_path, const char *html_path, const int64_t *src, int64_t L,
                        const int64_t *pred, const float *w) {
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
          "<table>\n<tr><td>input</td><td class=\"mono\">", b);
    attn_viz_write_escaped(b, in);
    fputs("</td></tr>\n<tr><td>expected</td><td class=\"mono\">", b);
    attn_viz_write_escaped(b, exp);
    fputs("</td></tr>\n<tr><td>model</td><td class=\"mono\">", b);
    attn_viz_write_escaped(b, got);
    fprintf(b, " (%s)</td></tr>\n</table>\n<h2>Cross-attention of the last decoder layer</h2>\n"
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
    /* the outputs are checked before training, so a path that would be refused costs no run */
    char svg_path[4200], html_path[4200];
    snprintf(svg_path, sizeof svg_path, "%s/cross_attention.svg", o.out);
    snprintf(html_path, sizeof html_path, "%s/cross_attention.html", o.out);
    if (o.svg) snprintf(svg_path, sizeof svg_path, "%s", o.svg);
    safe_set_inputs(NULL, 0, o.force);
    if (safe_out_check("demo", "--svg", svg_path, NULL, 0, SAFE_KIND_SVG, o.force) ||
        safe_out_check("demo", "--out", html_path, NULL, 0, SAFE_KIND_HTML, o.force))
        return 1;

    int rc = 1;
    attn_seq2seq *m = NULL;
    attn_optimizer *opt = NULL;
    demo_decoder dec;
    memset(&dec, 0, sizeof dec);
    demo_eval_set dev, test;
    memset(&dev, 0, sizeof dev);
    memset(&test, 0, sizeof test);
    void *saved = NULL, *ws = NULL;
    size_t saved_cap = 0, ws_cap = 0;
    const int64_t d = o.d_model, B = o.batch, lmax = o.max_len, eval_chunk = 128;
    const size_t nt_max = (size_t)(B * (lmax + 1));
    int64_t *src = malloc(sizeof(int64_t) * nt_max), *tgt_in = malloc(sizeof(int64_t) * nt_max),
            *tgt_out = malloc(sizeof(int64_t) * nt_max);
    float *logits = malloc(sizeof(float) * nt_max * DEMO_VOCAB);
    int tty = isatty(fileno(stdout));
    if (!src || !tgt_in || !tgt_out || !logits) {
        rc = cli_fail("demo: out of memory");
        goto done;
    }

    /* model */
    attn_seq2seq_config cfg = attn_seq2seq_config_default(DEMO_VOCAB, DEMO_VOCAB, d, o.heads, o.layers);
    cfg.max_len = lmax + 1;
    cfg.transformer.layer.dim_feedforward = o.ff;
    cfg.transformer.layer.dropout = 0.0f;
    CHECK(attn_seq2seq_create(&cfg, &m));
    const attn_params *ps = attn_seq2seq_params(m);
    CHECK(attn_params_reset(ps, (uint64_t)o.seed * 2 + 1));
    /* embeddings N(0, 1/d): times sqrt(d) they have unit scale, as the positions (Vaswani et al.) */
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        if (strstr(p->name, "_embedding.weight"))
            for (size_t k = 0; k < p->numel; k++) p->data[k] /= (float)sqrt((double)d);
    }
    attn_adamw_config ac = attn_adamw_config_default();
    ac.beta2 = 0.98;
    ac.eps = 1e-9;
    CHECK(attn_adamw_create(ps, &ac, &opt));
    /* no weight decay on biases and norms */
    for (size_t i = 0; i < attn_params_count(ps); i++)
        if (attn_params_get(ps, i)->rank < 2) CHECK(attn_optimizer_set_weight_decay(opt, i, 0.0));
    dec.model = m;
    dec.d_model = d;

    /* data */
    if (!demo_eval_make(&dev, o.min_len, o.max_len, 8 * (o.max_len - o.min_len + 1), (uint64_t)o.seed * 7919 + 3) ||
        !demo_eval_make(&test, o.min_len, o.max_len, o.eval_n, (uint64_t)o.seed * 7919 + 5)) {
        rc = cli_fail("demo: out of memory");
        goto done;
    }
    uint64_t rng = (uint64_t)o.seed * 0x2545F4914F6CDD1Dull + 11;

    printf("attn %s demo: teaching a Transformer to reverse digit sequences\n", ATTN_VERSION_STRING);
    printf("model: nn.Transformer d_model %lld, %lld heads, %ld+%ld layers, feed-forward %lld, "
           "%zu parameters; kernels %s, %d threads\n",
           (long long)d, (long long)o.heads, o.layers, o.layers, (long long)o.ff, attn_params_numel(ps),
           attn_isa_name(attn_active_isa()), attn_get_num_threads());
    printf("task: lengths %ld..%ld, digits 0-9, 1 in %d sequences held out; %ld steps of %lld "
           "sequences, AdamW lr %g (warmup %ld, cosine), clip %g, seed %ld\n",
           o.min_len, o.max_len, DEMO_HELD_OUT_MOD, o.steps, (long long)B, o.lr, o.warmup, o.clip, o.seed);
    fflush(stdout);

    attn_lr_schedule sched = {.max_lr = o.lr, .min_lr = o.lr * 0.02, .warmup_steps = o.warmup,
                              .total_steps = o.steps};
    attn_cross_entropy_config cec = attn_cross_entropy_config_default();
    const double t0 = now_s();
    double tokens = 0, loss_avg = -1, acc = -1, last_draw = -1;
    long skipped = 0;
    for (long step = 0; step < o.steps; step++) {
        const int64_t L = o.min_len + demo_rand_below(&rng, o.max_len - o.min_len + 1), nt = L + 1;
        demo_make_batch(&rng, B, L, src, tgt_in, tgt_out);
        attn_seq2seq_args a = attn_seq2seq_args_default();
        a.batch = B;
        a.n_src = L;
        a.n_tgt = nt;
        a.src = src;
        a.tgt = tgt_in;
        a.training = 1;
        a.seed = (uint64_t)o.seed;
        a.offset = (uint64_t)step * 64;
        if (!ensure(&saved, &saved_cap, attn_seq2seq_saved_size(m, &a)) ||
            !ensure(&ws, &ws_cap, attn_seq2seq_workspace_size(m, &a))) {
            rc = cli_fail("demo: out of memory");
            goto done;
        }
        float loss;
        CHECK(attn_seq2seq_forward(m, &a, logits, saved, saved_cap, ws, ws_cap));
        CHECK(attn_cross_entropy_forward(logits, tgt_out, B * nt, DEMO_VOCAB, &cec, &loss, logits));
        CHECK(attn_params_zero_grad(ps));
        CHECK(attn_seq2seq_backward(m, &a, logits, saved, saved_cap, ws, ws_cap));
        /* clip to one global norm, then AdamW; a non-finite gradient skips the step */
        double lr;
        CHECK(attn_lr_warmup_cosine(&sched, step, &lr));
        attn_status st = isfinite(loss) ? attn_train_step(opt, lr, o.clip, 1, NULL) : ATTN_ERR_NUMERIC;
        if (st == ATTN_ERR_NUMERIC) {
            skipped++;
            attn_clear_error();
        } else {
            CHECK(st);
        }
        tokens += (double)(B * (L + nt));
        loss_avg = loss_avg < 0 ? loss : 0.9 * loss_avg + 0.1 * loss;
        const long done_steps = step + 1;
        const int log_now = done_steps % o.log_every == 0 || done_steps == o.steps;
        if (log_now) {
            long c, n;
            CHECK(demo_evaluate(&dec, &dev, eval_chunk, &c, &n));
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
    CHECK(demo_evaluate(&dec, &test, eval_chunk, &correct, &total));
    const double eval_s = now_s() - e0;

    /* a few held-out examples, one per length spread over the range */
    printf("\nheld-out examples (never seen in training):\n");
    printf("  %-14s %-14s %-18s\n", "input", "expected", "model");
    int64_t ex_src[DEMO_MAX_LEN], ex_pred[DEMO_MAX_LEN + 1], pred[DEMO_MAX_LEN + 1];
    int64_t ex_L = 0;
    const long show = 5;
    for (long k = 0; k < show; k++) {
        long L = o.min_len + (o.max_len - o.min_len) * k / (show > 1 ? show - 1 : 1);
        if (test.count[L] == 0) continue;
        const int64_t *s = test.seq[L] + ((k * 37) % test.count[L]) * L;
        CHECK(demo_greedy(&dec, s, 1, L, pred));
        char in[64], exp[64], got[80];
        int64_t rev[DEMO_MAX_LEN];
        for (long i = 0; i < L; i++) rev[i] = s[L - 1 - i];
        demo_seq_str(in, sizeof in, s, L);
        demo_seq_str(exp, sizeof exp, rev, L);
        demo_seq_str(got, sizeof got, pred, demo_answer_len(pred, L + 1));
        printf("  %-14s %-14s %-18s %s\n", in, exp, got, demo_answer_ok(s, pred, L) ? "ok" : "WRONG");
        if (L >= ex_L) { /* the longest one is drawn */
            ex_L = L;
            memcpy(ex_src, s, sizeof(int64_t) * (size_t)L);
            memcpy(ex_pred, pred, sizeof(int64_t) * (size_t)(L + 1));
        }
    }

    /* cross-attention heat map of the drawn example */
    if (ex_L > 0) {
        float w[(DEMO_MAX_LEN + 1) * DEMO_MAX_LEN];
        CHECK(demo_cross_attention(m, ex_src, ex_L, ex_pred, w));
        double diag = 0;
        for (int64_t i = 0; i < ex_L; i++) diag += w[i * ex_L + (ex_L - 1 - i)];
        if (!make_dirs(o.out)) {
            rc = cli_fail("demo: cannot create directory '%s': %s", o.out, strerror(errno));
            goto done;
        }
        if (write_figure(svg_path, html_path, ex_src, ex_L, ex_pred, w)) goto done;
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
    attn_optimizer_free(opt);
    attn_seq2seq_free(m);
    demo_decoder_free(&dec);
    demo_eval_free(&dev);
    demo_eval_free(&test);
    free(saved);
    free(ws);
    free(src);
    free(tgt_in);
    free(tgt_out);
    free(logits);
    return rc;
}
