/* attn bench model: a Hugging Face folder's speed through the public calls of attn/pretrained.h:
 * an encoder's embeddings (attn_pretrained_embed on batch x seq tokens), a causal LM's prefill
 * (attn_pretrained_logits on batch x seq) and decode (attn_pretrained_generate: the time between
 * the first and the last new token, per token). Each figure: tokens/s, GFLOP/s by
 * attn_pretrained_flops and its fraction of the measured FMA peak (bf16: of the peak of the bf16
 * kernels that run, as `attn bench peak --dtype bf16` reports). A model call lasts up to seconds,
 * so each configuration is run once to warm up, then the rounds alternate the configurations
 * of a precision (one call each per round; fp32's rounds, then bf16's): a shared machine's load
 * falls on all of them alike. Median, min
 * and max over the rounds. --lengths gives a mixed-length batch (right-padded ids, one length per
 * row) to embed and prefill; how it runs is the library's business, and only the real tokens (and
 * their flops) are counted, so a padded or a packed run of it are compared on the same work. An
 * image family's figure is images/s of the forward of B images (attn_pretrained_classify, or its
 * hidden states without a classifier). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"

#define MAX_ROUNDS 1000
#define MAX_CFGS (2 * BENCH_MAX_LIST)
#define MAX_LENGTHS 4096

static void usage(FILE *f) {
    fprintf(f, "usage: attn bench model --model DIR [--batch B] [--seq N | --lengths L,...] [--prompt P]\n"
               "                        [--new T] [--precision fp32,bf16] [--threads T,...] [--rounds R]\n"
               "                        [--json]\n\n"
               "Tokens/s of a Hugging Face folder (attn_pretrained_open): an encoder's embeddings of B x N\n"
               "tokens (attn_pretrained_embed, every row N real tokens); a causal LM's prefill (the logits\n"
               "of B x N tokens, attn_pretrained_logits) and decode (greedy generation after a P-token\n"
               "prompt: the time from the first new token to the T-th, per token, batch 1). Ids are\n"
               "drawn uniformly from the vocabulary (fixed seed). GFLOP/s counts the matrix products\n"
               "and attention (attn_pretrained_flops); 'peak' is its fraction of the FMA peak measured\n"
               "as `attn bench peak` does (bf16 rows: of the bf16 kernels' peak). One warm-up call per\n"
               "configuration, then R rounds, each running every configuration once in turn; median\n"
               "and [min, max] of the rounds. On a machine with more runnable threads than cores, run\n"
               "with OMP_WAIT_POLICY=passive: OpenMP's spinning waits otherwise take the cores from the\n"
               "threads that have work (docs/performance.md, Real models). An image model (ViT): images/s\n"
               "of the forward of B images of random pixels (attn_pretrained_classify, or the last\n"
               "hidden states without a classifier); --seq, --lengths, --prompt and --new do not apply.\n\n"
               "  --model DIR      the folder (required)\n"
               "  --batch B        rows (default 32)\n"
               "  --seq N          tokens per row (default 128)\n"
               "  --lengths L,...  a mixed-length batch for embed / prefill: row b has L_b real tokens\n"
               "                   (right-padded to the longest; the batch is the count, at most 4096);\n"
               "                   tokens/s and GFLOP/s count the real tokens only\n"
               "  --prompt P       decode: prompt tokens (default 128)\n"
               "  --new T          decode: new tokens (default 64, >= 2)\n"
               "  --precision L    fp32 and/or bf16 (default fp32; bf16 where the family runs it)\n"
               "  --threads T,...  thread counts (default: attn's)\n"
               "  --rounds R       timed rounds (default 5)\n"
               "  --json           one JSON object per line\n");
}

typedef enum { OP_EMBED, OP_PREFILL, OP_DECODE, OP_IMAGE } model_op;
static const char *const OP_NAMES[] = {"embed", "prefill", "decode", "image"};

typedef struct model_cfg {
    model_op op;
    int threads;
    attn_precision prec;
    double ms[MAX_ROUNDS]; /* per call (decode: per new token) */
} model_cfg;

typedef struct model_run {
    attn_pretrained *m;
    int64_t B, N, P, T;
    int32_t *ids, *prompt;
    int64_t *len;
    const int64_t *lengths; /* --lengths (B of them), or NULL: every row N */
    float *out;
    double t_first, t_last; /* decode: when the first and the last new token came */
    int64_t got;
    int causal;                           /* the family has logits (prefill, decode), else embeddings */
    int64_t image_tokens, labels, ih, iw; /* an image family (image_tokens > 0): B images ih x iw */
    float *pixels;
} model_run;

static int on_token(int32_t id, void *user) {
    model_run *r = user;
    (void)id;
    const double t = bench_now();
    if (r->got++ == 0) r->t_first = t;
    r->t_last = t;
    return 0;
}

/* One call of cfg; its time in ms (decode: per new token after the first), < 0 on error. */
static double run_once(model_run *r, const model_cfg *c) {
    bench_set_threads(c->threads);
    if (attn_pretrained_set_precision(r->m, c->prec)) return -1;
    attn_status st;
    const double t0 = bench_now();
    if (c->op == OP_IMAGE) {
        st = r->labels ? attn_pretrained_classify(r->m, r->pixels, r->B, r->ih, r->iw, r->out)
                       : attn_pretrained_image_hidden_states(r->m, r->pixels, r->B, r->ih, r->iw, r->out);
    } else if (c->op == OP_EMBED) {
        st = attn_pretrained_embed(r->m, r->ids, r->len, r->B, r->N, r->out);
    } else if (c->op == OP_PREFILL) {
        st = attn_pretrained_logits(r->m, r->ids, r->len, r->B, r->N, r->out);
    } else {
        attn_generate_options o = attn_generate_options_default();
        o.max_new_tokens = r->T;
        o.eos_id = -1;
        r->got = 0;
        st = attn_pretrained_generate(r->m, r->prompt, (size_t)r->P, &o, on_token, r, NULL);
        if (!st && r->got != r->T) return -1;
        return st ? -1 : (r->t_last - r->t_first) * 1e3 / (double)(r->T - 1);
    }
    return st ? -1 : (bench_now() - t0) * 1e3;
}

/* Tokens and flops of one timed unit (a call; decode: one new token at the middle context). */
static void unit_cost(const model_run *r, model_op op, double *tokens, double *flops) {
    if (op == OP_DECODE) {
        *tokens = 1;
        *flops = attn_pretrained_flops(r->m, 1, 1, r->P + r->T / 2);
    } else if (op == OP_IMAGE) { /* images, not tokens */
        *tokens = (double)r->B;
        *flops = attn_pretrained_flops(r->m, r->B, r->image_tokens, 0);
    } else if (!r->lengths) {
        *tokens = (double)(r->B * r->N);
        *flops = attn_pretrained_flops(r->m, r->B, r->N, 0);
    } else { /* the real tokens only: what each row would cost alone */
        *tokens = *flops = 0;
        for (int64_t b = 0; b < r->B; b++) {
            *tokens += (double)r->lengths[b];
            *flops += attn_pretrained_flops(r->m, 1, r->lengths[b], 0);
        }
    }
}

static void print_cfg(const model_run *r, model_cfg *c, int rounds, int json) {
    double tokens, flops;
    unit_cost(r, c->op, &tokens, &flops);
    double lo = c->ms[0], hi = c->ms[0];
    for (int i = 1; i < rounds; i++) {
        lo = c->ms[i] < lo ? c->ms[i] : lo;
        hi = c->ms[i] > hi ? c->ms[i] : hi;
    }
    const double ms = bench_median(c->ms, rounds), tps = tokens / (ms * 1e-3), gf = flops / (ms * 1e6);
    const int bf16 = c->prec == ATTN_PRECISION_BF16;
    const double peak = bf16 ? bench_peak_gflops_bf16_results(c->threads) : bench_peak_gflops(c->threads);
    const double frac = peak > 0 ? gf / peak : 0;
    char shape[96];
    if (c->op == OP_DECODE)
        snprintf(shape, sizeof shape, json ? "\"batch\":1,\"prompt\":%lld,\"new\":%lld" : "prompt=%lld new=%lld",
                 (long long)r->P, (long long)r->T);
    else if (c->op == OP_IMAGE)
        snprintf(shape, sizeof shape, json ? "\"batch\":%lld,\"height\":%lld,\"width\":%lld" : "images=%lld %lldx%lld",
                 (long long)r->B, (long long)r->ih, (long long)r->iw);
    else if (r->lengths && json)
        snprintf(shape, sizeof shape, "\"batch\":%lld,\"seq\":%lld,\"tokens\":%.0f", (long long)r->B, (long long)r->N,
                 tokens);
    else if (r->lengths)
        snprintf(shape, sizeof shape, "batch=%lld real=%.0f", (long long)r->B, tokens);
    else
        snprintf(shape, sizeof shape, json ? "\"batch\":%lld,\"seq\":%lld" : "batch=%lld seq=%lld", (long long)r->B,
                 (long long)r->N);
    if (json) {
        printf("{\"op\":\"model_%s\",\"impl\":\"attn\",\"family\":\"%s\",\"precision\":\"%s\",\"shape\":{%s},",
               OP_NAMES[c->op], attn_pretrained_family(r->m), attn_precision_name(c->prec), shape);
        /* the list itself, so that a driver can check that its peers ran the same batch */
        for (int64_t b = 0; r->lengths && c->op != OP_DECODE && b < r->B; b++)
            printf("%s%lld", b ? "," : "\"lengths\":[", (long long)r->lengths[b]);
        printf("%s\"threads\":%d,\"rounds\":%d,\"ms\":%.6g,\"ms_min\":%.6g,\"ms_max\":%.6g,\"%s_per_s\":%.6g,"
               "\"gflops\":%.6g,\"peak_fraction\":%.4f}\n",
               r->lengths && c->op != OP_DECODE ? "]," : "", c->threads, rounds, ms, lo, hi,
               c->op == OP_IMAGE ? "images" : "tokens", tps, gf, frac);
    } else
        printf("%-8s %-5s %-22s %7d %10.3f [%9.3f, %9.3f] %11.1f %9.1f %6.1f%%\n", OP_NAMES[c->op],
               attn_precision_name(c->prec), shape, c->threads, ms, lo, hi, tps, gf, 100 * frac);
    fflush(stdout);
}

/* B images of pixels uniform in [-1, 1) (fixed seed) and room for their logits or hidden states. */
static int setup_images(model_run *r) {
    int64_t ch = 0;
    attn_pretrained_image_size(r->m, &ch, &r->ih, &r->iw);
    r->labels = attn_pretrained_num_labels(r->m);
    const size_t n = (size_t)(r->B * ch * r->ih * r->iw),
                 out = (size_t)r->B *
                       (size_t)(r->labels ? r->labels : r->image_tokens * attn_pretrained_hidden_size(r->m));
    r->pixels = malloc(n * sizeof *r->pixels);
    r->out = malloc(out * sizeof *r->out);
    if (!r->pixels || !r->out) return cli_fail("bench model: out of memory for %lld images", (long long)r->B);
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        r->pixels[i] = (float)((double)(s >> 40) / (double)(1 << 23)) - 1.0f;
    }
    return 0;
}

static int setup(model_run *r) {
    if ((r->image_tokens = attn_pretrained_image_tokens(r->m)) > 0) return setup_images(r);
    const int64_t V = attn_pretrained_vocab_size(r->m), n = r->B * r->N;
    r->ids = malloc((size_t)n * sizeof *r->ids);
    r->prompt = malloc((size_t)r->P * sizeof *r->prompt);
    r->len = malloc((size_t)r->B * sizeof *r->len);
    /* a family without logits answers ATTN_ERR_UNSUPPORTED: an encoder, whose rows are hidden-size
     * wide (the probe's one row of logits is vocab-size) */
    const int64_t one = 1, H = attn_pretrained_hidden_size(r->m);
    const int32_t id0 = 0;
    r->out = malloc((size_t)(V > H ? V : H) * sizeof *r->out);
    r->causal = r->out && attn_pretrained_logits(r->m, &id0, &one, 1, 1, r->out) != ATTN_ERR_UNSUPPORTED;
    float *o = r->out ? realloc(r->out, (size_t)n * (size_t)(r->causal ? V : H) * sizeof *r->out) : NULL;
    if (o) r->out = o;
    if (!r->ids || !r->prompt || !r->len || !o)
        return cli_fail("bench model: out of memory for %lld x %lld tokens", (long long)r->B, (long long)r->N);
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        r->ids[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
    for (int64_t i = 0; i < r->P; i++) r->prompt[i] = r->ids[i % n];
    for (int64_t b = 0; b < r->B; b++) {
        r->len[b] = r->lengths ? r->lengths[b] : r->N;
        for (int64_t i = r->len[b]; i < r->N; i++) r->ids[b * r->N + i] = 0; /* padding: not read */
    }
    return 0;
}

static void use_lengths(model_run *r, const int64_t *lengths, int n) {
    r->lengths = lengths;
    r->B = n;
    r->N = 1;
    for (int b = 0; b < n; b++) r->N = lengths[b] > r->N ? lengths[b] : r->N;
}

/* Before allocating: the library would refuse the call, but the tool can name the row. */
static int check_lengths(const model_run *r) {
    const int64_t max = attn_pretrained_max_length(r->m);
    for (int64_t b = 0; r->lengths && b < r->B; b++)
        if (r->lengths[b] > max)
            return cli_usage_error("bench model: --lengths: row %lld has %lld tokens, above the model's %lld",
                                   (long long)b, (long long)r->lengths[b], (long long)max);
    return 0;
}

static void print_lengths(const model_run *r) {
    if (!r->lengths) return;
    int64_t sum = 0;
    for (int64_t b = 0; b < r->B; b++) sum += r->lengths[b];
    printf("lengths (%lld rows, %lld real tokens of %lld padded, mean %.1f):", (long long)r->B, (long long)sum,
           (long long)(r->B * r->N), (double)sum / (double)r->B);
    for (int64_t b = 0; b < r->B; b++) printf("%s%lld", b ? "," : " ", (long long)r->lengths[b]);
    printf("\n");
}

static void teardown(model_run *r) {
    free(r->ids);
    free(r->prompt);
    free(r->len);
    free(r->out);
    free(r->pixels);
    attn_pretrained_free(r->m);
}

/* An image model's forward reads none of the text options: refused rather than ignored. (An
 * encoder ignores --prompt and --new, which drivers pass to every family.) */
static int check_options(const model_run *r, const cli_opt *opts, const char *dir) {
    static const char *const names[] = {"--seq", "--lengths", "--prompt", "--new"};
    for (int i = 0; r->image_tokens && i < 4; i++)
        if (cli_seen(opts, names[i]))
            return cli_usage_error("bench model: %s is an image model (%s): %s does not apply (--batch: images)", dir,
                                   attn_pretrained_family(r->m), names[i]);
    return 0;
}

/* The configurations: per thread count, per precision, the ops the family has. */
static int make_cfgs(const model_run *r, const int *threads, int nthreads, int prec[2], model_cfg **out) {
    const int causal = r->causal;
    if (prec[1] && attn_pretrained_set_precision(r->m, ATTN_PRECISION_BF16)) {
        fprintf(stderr, "bench model: no bf16 rows: %s\n", attn_last_error());
        prec[1] = 0;
    }
    model_cfg *c = calloc(MAX_CFGS * 2, sizeof *c);
    if (!c) return -1;
    int n = 0;
    for (int t = 0; t < nthreads; t++)
        for (int p = 0; p < 2; p++) {
            if (!prec[p]) continue;
            const model_op ops[2] = {r->image_tokens ? OP_IMAGE : causal ? OP_PREFILL : OP_EMBED, OP_DECODE};
            for (int k = 0; k < (causal ? 2 : 1); k++) {
                c[n].op = ops[k];
                c[n].threads = threads[t];
                c[n++].prec = p ? ATTN_PRECISION_BF16 : ATTN_PRECISION_FP32;
            }
        }
    *out = c;
    return n;
}

static int parse_precisions(const char *list, int prec[2]) {
    int f32 = 0, bf16 = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "fp32") || !strcmp(t, "f32"))
            f32 = 1;
        else if (!strcmp(t, "bf16"))
            bf16 = 1;
        else
            return cli_usage_error("bench model: --precision '%s' is not fp32 or bf16", t);
    }
    if (!f32 && !bf16) return cli_usage_error("bench model: --precision names none of fp32, bf16");
    prec[0] = f32;
    prec[1] = bf16;
    return 0;
}

/* The rounds alternate the configurations of one precision, one precision after the other: going
 * back to fp32 frees the packed bf16 weights, which the next bf16 call would pack again (a third
 * of GPT-2's bf16 prefill at 128 tokens, had it been timed). */
static int run_rounds(model_run *r, model_cfg *c, int n, int rounds) {
    for (int p = 0; p < 2; p++)
        for (int round = -1; round < rounds; round++) /* round -1: the warm-up */
            for (int i = 0; i < n; i++) {
                if ((c[i].prec == ATTN_PRECISION_BF16) != p) continue;
                const double ms = run_once(r, &c[i]);
                if (ms < 0)
                    return cli_fail("bench model: %s %s, %d threads: %s", OP_NAMES[c[i].op],
                                    attn_precision_name(c[i].prec), c[i].threads, attn_last_error());
                if (round >= 0) c[i].ms[round] = ms;
            }
    return 0;
}

int bench_model_cmd(int argc, char **argv) {
    bench_opts o;
    bench_opts_init(&o);
    const char *dir = NULL, *precisions = "fp32";
    model_run r = {0};
    int64_t lengths[MAX_LENGTHS];
    int nlengths = 0;
    r.B = 32;
    r.N = 128;
    r.P = 128;
    r.T = 64;
    int rounds = 5;
    cli_opt opts[] = {
        CLI_LIST("--threads", o.threads, &o.nthreads, BENCH_MAX_LIST, 1, 1024),
        CLI_FLAG("--json", &o.json),
        CLI_STRING_NONEMPTY("--model", &dir),
        CLI_INT("--batch", &r.B, 1, 65536),
        CLI_INT("--seq", &r.N, 1, 1 << 20),
        CLI_LIST("--lengths", lengths, &nlengths, MAX_LENGTHS, 1, 1 << 20),
        CLI_INT("--prompt", &r.P, 1, 1 << 20),
        CLI_INT("--new", &r.T, 2, 1 << 20),
        CLI_STRING_NONEMPTY("--precision", &precisions),
        CLI_INT("--rounds", &rounds, 1, MAX_ROUNDS),
        CLI_END,
    };
    int parsed = cli_parse("bench model", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (!dir) return cli_usage_error("bench model: --model DIR is required (try 'attn bench model --help')");
    int prec[2];
    if ((parsed = parse_precisions(precisions, prec))) return parsed;
    if (nlengths && (cli_seen(opts, "--batch") || cli_seen(opts, "--seq")))
        return cli_usage_error("bench model: --lengths sets the batch (their count) and the padded width (the "
                               "longest); drop --batch / --seq");
    if (nlengths) use_lengths(&r, lengths, nlengths);
    if (attn_pretrained_open(dir, &r.m)) return cli_fail("bench model: %s", attn_last_error());
    model_cfg *cfgs = NULL;
    int rc = check_lengths(&r), n = 0;
    if (!rc) rc = setup(&r);
    if (!rc) rc = check_options(&r, opts, dir);
    if (!rc && (n = make_cfgs(&r, o.threads, o.nthreads, prec, &cfgs)) < 0) rc = cli_fail("bench model: out of memory");
    if (!rc && n == 0) rc = cli_fail("bench model: nothing to run (the precisions asked for are not the family's)");
    if (!rc) rc = run_rounds(&r, cfgs, n, rounds);
    if (!rc && !o.json) print_lengths(&r);
    if (!rc && !o.json && r.image_tokens)
        printf("model %s (%s), %lld images of %lld x %lld, rounds %d\n", dir, attn_pretrained_family(r.m),
               (long long)r.B, (long long)r.ih, (long long)r.iw, rounds);
    else if (!rc && !o.json)
        printf("model %s (%s), %lld x %lld tokens%s, rounds %d\n", dir, attn_pretrained_family(r.m), (long long)r.B,
               (long long)r.N, r.lengths ? " padded" : "", rounds);
    if (!rc && !o.json)
        printf("%-8s %-5s %-22s %7s %10s %23s %11s %9s %7s\n", "op", "prec", "shape", "threads", "ms", "[min, max]",
               r.image_tokens ? "images/s" : "tokens/s", "GFLOP/s", "peak");
    for (int i = 0; !rc && i < n; i++) print_cfg(&r, &cfgs[i], rounds, o.json);
    free(cfgs);
    teardown(&r);
    return rc;
}
