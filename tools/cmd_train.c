/* attn train gpt: a character-level (byte-level) decoder-only Transformer trained on a text file,
 * with AdamW, warmup + cosine learning rate, gradient clipping, periodic checkpoints, bitwise
 * resume and a checkpoint on Ctrl-C. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"
#include "safe_io.h"
#include "train_common.h"
#include "trainer.h"

static void usage_train(FILE *f) {
    fprintf(f, "usage: attn train gpt --data FILE.txt [options]\n"
               "       attn train vit [--data DIR] [options]\n\n"
               "Trains a model; `attn train MODEL --help` for the options. Models: gpt (a byte-level\n"
               "language model), vit (a Vision Transformer on images, the handwritten digits by default).\n");
}

static void usage_gpt(FILE *f) {
    fprintf(f, "usage: attn train gpt --data FILE.txt [options]\n\n"
               "Trains a decoder-only (GPT-style) Transformer to predict the next character of FILE.\n"
               "The vocabulary is the 256 byte values: any file works, UTF-8 text is modelled byte by\n"
               "byte (a multi-byte character is several tokens). Pre-norm layers with GELU, learned\n"
               "positions; AdamW (betas 0.9, 0.95, weight decay 0.1 on matrices and embeddings),\n"
               "linear warmup then cosine decay to lr/10, gradient clipping at norm 1. Each step\n"
               "trains on --batch windows of --context bytes drawn at random positions (from --seed\n"
               "and the step number, so a resumed run sees the same data) from the start of FILE; the\n"
               "last --val-fraction of it is held out: never trained on, it gives the validation loss.\n\n"
               "options:\n"
               "  --data FILE        training text (required; at least context + 1 bytes)\n"
               "  --val-fraction F   hold out the last F of FILE for validation (default 0.1; 0: none;\n"
               "                     the held-out part must have at least context + 1 bytes; a resumed\n"
               "                     run keeps the checkpoint's)\n"
               "  --eval-interval N  validation loss every N steps (default 100; 0: at the end only)\n"
               "  --eval-batches K   validation over K batches of --batch windows at fixed, evenly\n"
               "                     spaced places of the held-out part, in eval mode (default 4)\n"
               "  --layers L         Transformer layers (default 2)\n"
               "  --heads H          attention heads (default 4)\n"
               "  --d-model D        model width, a multiple of H (default 128; feed-forward 4 D)\n"
               "  --context C        context length in bytes (default 64)\n"
               "  --steps N          optimizer steps in total (default 1000)\n"
               "  --batch B          windows per step (default 16)\n"
               "  --micro-batch M    windows per forward/backward pass (default: B, or B/N on N MPI\n"
               "                     ranks; a resumed run keeps the checkpoint's when it fits): the\n"
               "                     gradients of the B/M micro-batches are added in order, so a run\n"
               "                     is bitwise the same for any number of ranks with the same M\n"
               "  --lr LR            peak learning rate (default 3e-3)\n"
               "  --warmup W         warmup steps (default N/20)\n"
               "  --attention NAME   the self-attention, one of attn's attention kinds (default flash):\n");
    for (int k = 0; k < attn_attention_kind_count(); k++)
        fprintf(f, "                       %-8s %s\n", attn_attention_kind_name((attn_attention_kind)k),
                attn_attention_kind_help((attn_attention_kind)k));
    fprintf(f, "  --window W         keys on each side for window and local_global (required with them)\n"
               "  --features M       random features for performer (default 256)\n"
               "  --feature-seed S   seed of performer's projection (default 0)\n"
               "  --seed S           initialisation and data order (default 1)\n"
               "  --precision P      fp32 (default) or bf16: mixed precision, the linear layers' and\n"
               "                     flash attention's products from bf16-rounded operands with float\n"
               "                     accumulation; weights, gradients, AdamW and the checkpoint stay\n"
               "                     fp32 (AMX tiles with AMX-BF16, vdpbf16ps with AVX512-BF16, a\n"
               "                     bit-exact emulation of it elsewhere, slower). Kept in the\n"
               "                     checkpoint: --resume continues in it unless given again; another\n"
               "                     precision is allowed (noted; the weights are fp32 either way),\n"
               "                     bitwise resume holds within one precision\n"
               "  --threads T        threads (default: all)\n"
               "  --checkpoint PATH  checkpoint file (default attn-gpt.safetensors)\n"
               "  --every N          also write the checkpoint every N steps (default 100; 0: only at\n"
               "                     the end)\n"
               "  --resume           continue from the checkpoint: model shape, seed, weights,\n"
               "                     optimizer state, step, and (unless given again) --steps,\n"
               "                     --batch, --lr and --warmup come from it: bitwise as if the run\n"
               "                     had never stopped\n"
               "  --stop-at K        stop after step K of the --steps schedule, writing the checkpoint\n"
               "                     (continue later with --resume)\n"
               "  --force            start afresh over an existing checkpoint, or replace a file at\n"
               "                     --checkpoint that is not a checkpoint (refused without it)\n"
               "  --timeout S        under MPI, seconds a rank waits for the others in each collective\n"
               "                     before the job ends naming the silent ranks (default 0: none)\n"
               "  --log-every N      print a line every N steps (default 10)\n\n"
               "Prints one line per --log-every steps (step, loss, learning rate, gradient norm,\n"
               "tokens/s), `step N/S  val loss X` every --eval-interval steps, and `final loss: X`\n"
               "and `final val loss: X` (the mean cross-entropy over the held-out windows) at the end.\n"
               "The validation neither uses the training data nor changes the weights, the optimizer\n"
               "or the data order: a run is bitwise the same with any --eval-interval. Ctrl-C or\n"
               "SIGTERM stops the current step before its next layer (between micro-batches under\n"
               "attn dist), writes the checkpoint of the last whole step and exits with status 130 (a\n"
               "second signal stops at once; the last checkpoint stays intact). A run that would not\n"
               "fit in the machine's memory is refused at the start with the figures. `attn sample\n"
               "PATH` generates text from a checkpoint.\n\n"
               "Data-parallel: `mpirun -np N attn train gpt ...` (a build with MPI) gives each rank B/N\n"
               "windows of every step and adds the micro-batch gradients in one fixed order\n"
               "(include/attn/dist.h), so the weights are bitwise those of one process with the same\n"
               "--batch and --micro-batch; rank 0 alone prints and writes checkpoints. --resume may use\n"
               "another N. Ranks that disagree on the options, the data or the weights stop at the start\n"
               "with a message; a rank that fails or dies ends the whole job. --timeout S (default 0:\n"
               "none) bounds each wait for the other ranks: a rank stopped (SIGSTOP), hung or lost ends\n"
               "the job after S seconds with a message naming it; a waiting rank sleeps between polls\n"
               "instead of spinning. One run per checkpoint: a second is refused while CHECKPOINT.lock\n"
               "is held.\n");
}

typedef struct gpt_opts {
    const char *data, *checkpoint;
    train_gpt_shape shape;
    int given_layers, given_heads, given_d, given_context, given_seed, given_steps, given_batch, given_lr, given_warmup,
        given_micro;
    int64_t steps, batch, warmup, every, log_every, threads, seed, stop_at, micro;
    int given_attention, given_val, given_precision;
    int64_t eval_interval, eval_batches;
    double lr, val_fraction, timeout;
    attn_precision precision;
    int resume, force;
    char data_hash[17]; /* of the --data contents, kept in the checkpoint */
} gpt_opts;

/* Window starts for a step: counter-based (seed, step), so a resumed run draws the same ones.
 * Windows first .. first + count - 1 of the step's batch (a rank's shard) go to x, y. */
static void draw_batch(const unsigned char *text, size_t len, int64_t first, int64_t count, int64_t context,
                       uint64_t seed, int64_t step, int64_t *x0, int64_t *y0) {
    const uint64_t windows = (uint64_t)(len - (size_t)context); /* starts 0 .. len - context - 1 */
    int64_t *x = x0 - first * context, *y = y0 - first * context;
    for (int64_t b = first; b < first + count; b++) {
        const uint64_t hi = (uint64_t)(attn_philox_uniform(seed, (uint64_t)step, (uint64_t)(2 * b)) * 16777216.0f);
        const uint64_t lo = (uint64_t)(attn_philox_uniform(seed, (uint64_t)step, (uint64_t)(2 * b + 1)) * 16777216.0f);
        const size_t pos = (size_t)(((hi << 24) | lo) % windows);
        for (int64_t t = 0; t < context; t++) {
            x[b * context + t] = text[pos + (size_t)t];
            y[b * context + t] = text[pos + (size_t)t + 1];
        }
    }
}

/* The validation loss: mean cross-entropy over nwin windows of the held-out text val (vlen >= C + 1
 * bytes), m per forward (nwin a multiple of m), in eval mode (no dropout). The windows sit at
 * fixed, evenly spaced places, whatever the step or seed, so that the numbers compare across steps
 * and across a resume. Writes only the scratch buffers x, y, logits, saved and ws, which every
 * training step refills: gradients, weights and the optimizer are untouched. */
static attn_status val_loss(attn_gpt *g, const attn_gpt_args *train_args, const unsigned char *val, size_t vlen,
                            int64_t nwin, int64_t m, int64_t V, int64_t *x, int64_t *y, float *logits, void *saved,
                            size_t sb, void *ws, size_t wb, double *out) {
    const int64_t C = train_args->n;
    const uint64_t starts = (uint64_t)(vlen - (size_t)C); /* 0 .. vlen - C - 1 */
    attn_gpt_args a = *train_args;
    a.training = 0;
    a.tokens = x;
    attn_cross_entropy_config ce = attn_cross_entropy_config_default();
    double sum = 0;
    for (int64_t w0 = 0; w0 < nwin; w0 += m) {
        for (int64_t b = 0; b < m; b++) {
            const uint64_t i = (uint64_t)(w0 + b);
            const size_t pos = (size_t)(nwin > 1 ? i * (starts - 1) / (uint64_t)(nwin - 1) : 0);
            for (int64_t t = 0; t < C; t++) {
                x[b * C + t] = val[pos + (size_t)t];
                y[b * C + t] = val[pos + (size_t)t + 1];
            }
        }
        float loss = 0;
        attn_status s = attn_gpt_forward(g, &a, logits, saved, sb, ws, wb);
        if (s == ATTN_OK) s = attn_cross_entropy_forward(logits, y, m * C, V, &ce, &loss, NULL);
        if (s != ATTN_OK) return s;
        sum += loss;
    }
    *out = sum / (double)(nwin / m);
    return ATTN_OK;
}

/* CLI_OK, CLI_HELP or 2 (usage error, printed). */
static int parse_gpt(int argc, char **argv, gpt_opts *o) {
    const char *attention = NULL, *precision = NULL;
    int64_t kopt[TRAIN_KIND_OPTS];
    for (int i = 0; i < TRAIN_KIND_OPTS; i++) kopt[i] = -1;
    cli_opt opts[] = {
        CLI_STRING_NONEMPTY("--data", &o->data),
        CLI_STRING_NONEMPTY("--checkpoint", &o->checkpoint),
        CLI_STRING("--attention", &attention),
        CLI_STRING("--precision", &precision),
        CLI_INT("--window", &kopt[0], 0, 1 << 30),
        CLI_INT("--features", &kopt[1], 1, 1 << 16),
        CLI_INT("--feature-seed", &kopt[2], 0, INT64_MAX),
        CLI_FLAG("--resume", &o->resume),
        CLI_FLAG("--force", &o->force),
        CLI_DOUBLE_ABOVE("--lr", &o->lr, 0.0, 10.0),
        CLI_DOUBLE("--val-fraction", &o->val_fraction, 0.0, 0.9),
        CLI_DOUBLE("--timeout", &o->timeout, 0.0, 1e9),
        CLI_INT("--eval-interval", &o->eval_interval, 0, 1 << 30),
        CLI_INT("--eval-batches", &o->eval_batches, 1, 1 << 20),
        CLI_INT("--layers", &o->shape.layers, 1, 256),
        CLI_INT("--heads", &o->shape.heads, 1, 1024),
        CLI_INT("--d-model", &o->shape.d_model, 1, 65536),
        CLI_INT("--context", &o->shape.context, 1, 1 << 20),
        CLI_INT("--steps", &o->steps, 1, 1 << 30),
        CLI_INT("--batch", &o->batch, 1, 1 << 20),
        CLI_INT("--micro-batch", &o->micro, 1, 1 << 20),
        CLI_INT("--warmup", &o->warmup, 0, 1 << 30),
        CLI_INT("--every", &o->every, 0, 1 << 30),
        CLI_INT("--log-every", &o->log_every, 1, 1 << 30),
        CLI_INT("--stop-at", &o->stop_at, 1, 1 << 30),
        CLI_INT("--threads", &o->threads, 1, 1024),
        CLI_INT("--seed", &o->seed, 0, INT64_MAX),
        CLI_END,
    };
    int parsed = cli_parse("train gpt", opts, argc, argv, NULL, 0);
    if (parsed) return parsed;
    o->given_attention = attention != NULL;
    o->given_precision = precision != NULL;
    if (precision && cli_parse_precision(precision, &o->precision))
        return cli_usage_error("train gpt: --precision '%s' is neither fp32 nor bf16", precision);
    if (attention && attn_attention_kind_from_name(attention, &o->shape.attention.kind) != ATTN_OK)
        return cli_usage_error("train gpt: --attention: %s", strchr(attn_last_error(), ' ') + 1);
    const char *kname = attn_attention_kind_name(o->shape.attention.kind);
    for (int i = 0; i < TRAIN_KIND_OPTS; i++) {
        int required = 0;
        const int uses = train_kind_uses(o->shape.attention.kind, i, &required);
        if (kopt[i] >= 0 && !uses)
            return cli_usage_error("train gpt: %s does not apply to --attention %s", train_kind_opts[i].flag, kname);
        if (kopt[i] < 0 && required)
            return cli_usage_error("train gpt: --attention %s needs %s", kname, train_kind_opts[i].flag);
        if (kopt[i] >= 0) *train_kind_opt_value(&o->shape.attention, i) = kopt[i];
    }
    o->given_layers = cli_seen(opts, "--layers");
    o->given_heads = cli_seen(opts, "--heads");
    o->given_d = cli_seen(opts, "--d-model");
    o->given_context = cli_seen(opts, "--context");
    o->given_seed = cli_seen(opts, "--seed");
    o->given_steps = cli_seen(opts, "--steps");
    o->given_batch = cli_seen(opts, "--batch");
    o->given_lr = cli_seen(opts, "--lr");
    o->given_warmup = cli_seen(opts, "--warmup");
    o->given_micro = cli_seen(opts, "--micro-batch");
    o->given_val = cli_seen(opts, "--val-fraction");
    if (!o->data) return cli_usage_error("train gpt: missing --data FILE (try 'attn train gpt --help')");
    if (o->shape.d_model % o->shape.heads != 0)
        return cli_usage_error("train gpt: --d-model %lld is not a multiple of --heads %lld",
                               (long long)o->shape.d_model, (long long)o->shape.heads);
    if (o->warmup > o->steps)
        return cli_usage_error("train gpt: --warmup %lld exceeds --steps %lld", (long long)o->warmup,
                               (long long)o->steps);
    return 0;
}

/* The model's shape (for `attn sample`) and the run's schedule (for --resume). */
static void fill_meta(train_meta *m, const gpt_opts *o) {
    train_meta_fill(m, &o->shape);
    train_meta_add(m, "train.steps", "%lld", (long long)o->steps);
    train_meta_add(m, "train.batch", "%lld", (long long)o->batch);
    train_meta_add(m, "train.micro_batch", "%lld", (long long)o->micro);
    train_meta_add(m, "train.warmup", "%lld", (long long)o->warmup);
    train_meta_add(m, "train.lr", "%.17g", o->lr);
    train_meta_add(m, TRAIN_DATA_HASH_KEY, "%s", o->data_hash);
    /* the split point: a resumed run must train on the same bytes */
    train_meta_add(m, "train.val_fraction", "%.17g", o->val_fraction);
    train_meta_add(m, "train.precision", "%s", attn_precision_name(o->precision));
}

/* Options hashed for the check that every rank runs the same configuration. */
static uint64_t config_hash(const gpt_opts *o, const unsigned char *text, size_t len) {
    const int64_t v[] = {(int64_t)o->precision,
                         o->shape.vocab,
                         o->shape.layers,
                         o->shape.heads,
                         o->shape.d_model,
                         o->shape.ff,
                         o->shape.context,
                         (int64_t)o->shape.attention.kind,
                         o->shape.attention.window,
                         o->shape.attention.num_features,
                         (int64_t)o->shape.attention.seed,
                         o->steps,
                         o->batch,
                         o->micro,
                         o->warmup,
                         o->every,
                         o->stop_at,
                         o->seed,
                         (int64_t)len};
    uint64_t h = train_hash(TRAIN_HASH_SEED, v, sizeof v);
    h = train_hash(h, &o->lr, sizeof o->lr);
    h = train_hash(h, &o->val_fraction, sizeof o->val_fraction);
    h = train_hash(h, o->checkpoint, strlen(o->checkpoint));
    return train_hash(h, text, len);
}

/* A run of `attn train gpt`: its options, data, model and scratch (the training loop's hooks'
 * context). */
typedef struct gpt_run {
    gpt_opts o;
    attn_dist *dist;
    int rank, nranks;
    unsigned char *text;
    size_t len, train_len, val_len; /* train on text[0, train_len), validate on the rest */
    int64_t ckpt_micro;             /* the checkpoint's micro-batch (--resume), else 0 */
    int64_t first, count;           /* this rank's windows of each step's batch */
    int64_t B, C, V, m, M, L;       /* B windows per step, M micro-batches of m, L of them on this rank */
    attn_gpt *g;
    attn_optimizer *opt;
    const attn_params *ps;
    attn_gpt_args a;
    uint64_t data_seed;
    int64_t *x, *y;
    float *logits, *grads, *losses;
    void *saved, *ws;
    size_t sb, wb, P;
    double val; /* the last validation loss, at step val_step */
    int64_t val_step;
} gpt_run;

/* The run's schedule and batch from the checkpoint's metadata, unless given again. */
static void resume_schedule(gpt_run *r, const attn_safetensors *st) {
    gpt_opts *o = &r->o;
    const char *mv;
    int64_t iv;
    double dv;
    if (!o->given_steps && (mv = attn_safetensors_metadata_find(st, "train.steps")) &&
        !cli_parse_i64(mv, 1, (int64_t)1 << 30, &iv))
        o->steps = iv;
    if (!o->given_batch && (mv = attn_safetensors_metadata_find(st, "train.batch")) &&
        !cli_parse_i64(mv, 1, 1 << 20, &iv))
        o->batch = iv;
    if (!o->given_warmup && (mv = attn_safetensors_metadata_find(st, "train.warmup")) &&
        !cli_parse_i64(mv, 0, (int64_t)1 << 30, &iv))
        o->warmup = iv;
    if (!o->given_lr && (mv = attn_safetensors_metadata_find(st, "train.lr")) &&
        !cli_parse_double(mv, 0.0, 10.0, &dv) && dv > 0)
        o->lr = dv;
    if (!o->given_micro && (mv = attn_safetensors_metadata_find(st, "train.micro_batch")) &&
        !cli_parse_i64(mv, 1, 1 << 20, &iv)) {
        r->ckpt_micro = iv;
        if (o->batch % r->nranks == 0 && (o->batch / r->nranks) % iv == 0) o->micro = iv; /* the run's accumulation */
    }
}

/* The checkpoint's shape against the one given again: 0, or 1 (message printed). */
static int resume_shape_check(const gpt_opts *o, const train_gpt_shape *s) {
    const struct {
        int given;
        int64_t mine, theirs;
        const char *name;
    } chk[] = {{o->given_layers, o->shape.layers, s->layers, "--layers"},
               {o->given_heads, o->shape.heads, s->heads, "--heads"},
               {o->given_d, o->shape.d_model, s->d_model, "--d-model"},
               {o->given_context, o->shape.context, s->context, "--context"}};
    for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++)
        if (chk[i].given && chk[i].mine != chk[i].theirs)
            return cli_fail("train gpt: --resume: %s %lld differs from the checkpoint's %lld", chk[i].name,
                            (long long)chk[i].mine, (long long)chk[i].theirs);
    const attn_attention_config *x = &o->shape.attention, *y = &s->attention;
    if (o->given_attention &&
        (x->kind != y->kind || x->window != y->window || x->num_features != y->num_features || x->seed != y->seed))
        return cli_fail("train gpt: --resume: --attention %s differs from the checkpoint's %s",
                        attn_attention_kind_name(o->shape.attention.kind), attn_attention_kind_name(s->attention.kind));
    return 0;
}

/* On resume, the model's shape, the schedule, the hold-out and the precision come from the
 * checkpoint (checked against the options given again and the data): 0, or 1 (message printed). */
static int resume_meta(gpt_run *r) {
    gpt_opts *o = &r->o;
    attn_safetensors *st = NULL;
    if (attn_safetensors_open_file(o->checkpoint, &st) != ATTN_OK)
        return cli_fail("train gpt: --resume: %s", attn_last_error());
    train_gpt_shape s;
    char err[256];
    int bad = train_shape_from_meta(st, &s, err, sizeof err);
    resume_schedule(r, st);
    /* absent in checkpoints from before the hold-out: those trained on the whole file */
    const char *mv;
    double ckpt_val = 0;
    char bad_val[64] = "";
    if ((mv = attn_safetensors_metadata_find(st, "train.val_fraction")) && cli_parse_double(mv, 0.0, 0.9, &ckpt_val)) {
        snprintf(bad_val, sizeof bad_val, "%s", mv);
        ckpt_val = -1;
    }
    const int other_val = ckpt_val < 0 || (o->given_val && o->val_fraction != ckpt_val);
    if (!other_val) o->val_fraction = ckpt_val;
    if (train_resume_precision("train gpt", st, o->checkpoint, o->given_precision, &o->precision)) {
        attn_safetensors_close(st);
        return 1;
    }
    const int other_data = train_data_differs(st, o->data_hash);
    attn_safetensors_close(st);
    if (bad) return cli_fail("train gpt: --resume: %s: %s", o->checkpoint, err);
    if (other_val) {
        if (ckpt_val < 0)
            return cli_fail("train gpt: --resume: %s: train.val_fraction '%s' is not a fraction in [0, 0.9]",
                            o->checkpoint, bad_val);
        return cli_fail("train gpt: --resume: --val-fraction %g differs from the checkpoint's %g (the held-out part, "
                        "hence the training data, would change)",
                        o->val_fraction, ckpt_val);
    }
    if (other_data) return train_data_refuse("train gpt", o->data, o->checkpoint);
    if (resume_shape_check(o, &s)) return 1;
    o->shape = s;
    return 0;
}

/* The warmup, the micro-batches, this rank's shard and the hold-out: 0, or 1 (message printed). */
static int plan(gpt_run *r) {
    gpt_opts *o = &r->o;
    if (o->warmup < 0) o->warmup = o->steps / 20;
    if (o->warmup > o->steps)
        return cli_fail("train gpt: warmup %lld exceeds steps %lld", (long long)o->warmup, (long long)o->steps);
    if (!o->given_micro && o->micro == 0) {
        o->micro = o->batch % r->nranks == 0 ? o->batch / r->nranks : o->batch;
        if (r->ckpt_micro)
            printf("note: the checkpoint's micro-batch %lld does not divide the %lld windows of each of %d ranks: "
                   "micro-batch %lld from here on (the gradients are added in another grouping)\n",
                   (long long)r->ckpt_micro, (long long)o->micro, r->nranks, (long long)o->micro);
    }
    if (attn_dist_shard(o->batch, o->micro, r->rank, r->nranks, &r->first, &r->count) != ATTN_OK)
        return cli_fail("train gpt: --batch %lld, --micro-batch %lld on %d rank%s: %s", (long long)o->batch,
                        (long long)o->micro, r->nranks, r->nranks > 1 ? "s" : "", strchr(attn_last_error(), ' ') + 1);
    r->B = o->batch, r->C = o->shape.context, r->V = o->shape.vocab, r->m = o->micro;
    r->M = r->B / r->m, r->L = r->count / r->m;
    const int64_t C = r->C;
    const size_t len = r->len;
    if (len < (size_t)C + 1)
        return cli_fail("train gpt: '%s' has %zu bytes; --context %lld needs at least %lld", o->data, len, (long long)C,
                        (long long)C + 1);
    /* train on text[0, train_len), validate on the rest (nanoGPT's split: the first 1 - F) */
    r->train_len = (size_t)((1.0 - o->val_fraction) * (double)len), r->val_len = len - r->train_len;
    if (r->val_len > 0 && r->val_len < (size_t)C + 1)
        return cli_fail("train gpt: --val-fraction %g of the %zu bytes of '%s' holds out %zu; --context %lld needs at "
                        "least %lld (more data, a larger --val-fraction, or --val-fraction 0)",
                        o->val_fraction, len, o->data, r->val_len, (long long)C, (long long)C + 1);
    if (r->train_len < (size_t)C + 1)
        return cli_fail("train gpt: --val-fraction %g leaves %zu of the %zu bytes of '%s' to train on; --context %lld "
                        "needs at least %lld",
                        o->val_fraction, r->train_len, len, o->data, (long long)C, (long long)C + 1);
    return 0;
}

/* The parameters of the model before it is built (train_gpt_config's layout: learned positions,
 * an untied head without bias; for train_memory_check). */
static double gpt_param_estimate(const train_gpt_shape *s) {
    const double D = (double)s->d_model, F = (double)s->ff, V = (double)s->vocab, C = (double)s->context;
    const double layer = 4 * D * D + 4 * D + 2 * D * F + F + D + 4 * D;
    return V * D + C * D + (double)s->layers * layer + 2 * D + D * V;
}

/* train_memory_check for train gpt's options (act: bytes besides the weights' 16 a parameter). */
static int gpt_memory_check(const gpt_run *r, double params, double act) {
    return train_memory_check("train gpt", params, act, "--micro-batch", r->m,
                              "use a smaller --micro-batch (or --batch), --context, --d-model or --layers");
}

/* The model and its AdamW (no weight decay on biases and norms): 0, or 1 (message printed). */
static int build(gpt_run *r) {
    attn_gpt_config cfg = train_gpt_config(&r->o.shape);
    cfg.precision = r->o.precision;
    if (attn_gpt_create(&cfg, &r->g) != ATTN_OK) return cli_fail("train gpt: %s", attn_last_error());
    r->ps = attn_gpt_params(r->g);
    attn_adamw_config ac = attn_adamw_config_default();
    ac.beta2 = 0.95;
    ac.weight_decay = 0.1;
    if (attn_params_reset(r->ps, (uint64_t)r->o.seed) != ATTN_OK || attn_adamw_create(r->ps, &ac, &r->opt) != ATTN_OK)
        return cli_fail("train gpt: %s", attn_last_error());
    for (size_t i = 0; i < attn_params_count(r->ps); i++)
        if (attn_params_get(r->ps, i)->rank < 2) attn_optimizer_set_weight_decay(r->opt, i, 0.0); /* biases, norms */
    return 0;
}

/* Every rank: the same options, data, weights and optimizer state. 0, or 1 (message printed). */
static int dist_check(gpt_run *r, const attn_train_state *state) {
    if (!r->o.resume && attn_dist_broadcast_params(r->dist, r->ps) != ATTN_OK)
        return cli_fail("train gpt: %s", attn_last_error());
    uint64_t wh = train_hash(TRAIN_HASH_SEED, state, sizeof *state);
    for (size_t i = 0; i < attn_params_count(r->ps); i++) {
        const attn_param *q = attn_params_get(r->ps, i);
        float *st2 = NULL;
        wh = train_hash(wh, q->data, sizeof(float) * q->numel);
        if (attn_optimizer_state(r->opt, i, "exp_avg", &st2) == ATTN_OK)
            wh = train_hash(wh, st2, sizeof(float) * q->numel);
        if (attn_optimizer_state(r->opt, i, "exp_avg_sq", &st2) == ATTN_OK)
            wh = train_hash(wh, st2, sizeof(float) * q->numel);
    }
    if (attn_dist_check_same(r->dist, config_hash(&r->o, r->text, r->len), "the options and the --data contents") !=
            ATTN_OK ||
        attn_dist_check_same(r->dist, wh, "the starting weights and optimizer state") != ATTN_OK)
        return cli_fail("train gpt: rank %d: %s", r->rank, attn_last_error());
    return 0;
}

/* The batches, activations and gradients of a step: 0, or 1 (message printed). */
static int alloc_scratch(gpt_run *r, const attn_train_state *state) {
    const int64_t C = r->C, m = r->m, M = r->M, L = r->L;
    r->a = (attn_gpt_args){m, C, NULL, NULL, 1, state->rng_seed, 0, NULL, NULL};
    r->x = malloc(sizeof(int64_t) * (size_t)(r->count * C));
    r->y = malloc(sizeof(int64_t) * (size_t)(r->count * C));
    r->a.tokens = r->x;
    r->sb = attn_gpt_saved_size(r->g, &r->a), r->wb = attn_gpt_workspace_size(r->g, &r->a);
    r->P = attn_params_numel(r->ps);
    /* the micro-batch gradients: this rank's L for the reduction (N > 1), or the running fold (N = 1) */
    const size_t ngrads = M == 1 ? 0 : r->dist && r->nranks > 1 ? (L > 1 ? (size_t)L * r->P : 0) : r->P;
    const double act = (double)r->sb + (double)r->wb + 4.0 * (double)(m * C * r->V) + 4.0 * (double)ngrads +
                       16.0 * (double)(r->count * C) + 4.0 * (double)(M + L);
    if (gpt_memory_check(r, (double)r->P, act)) return 1; /* before the activations are allocated */
    r->saved = malloc(r->sb ? r->sb : 1);
    r->ws = malloc(r->wb ? r->wb : 1);
    r->logits = malloc(sizeof(float) * (size_t)(m * C * r->V));
    r->losses = malloc(sizeof(float) * (size_t)(M + L));
    if (ngrads) r->grads = malloc(sizeof(float) * ngrads);
    if (!r->x || !r->y || !r->saved || !r->ws || !r->logits || !r->losses || (ngrads && !r->grads))
        return cli_fail("train gpt: out of memory (%zu MB of activations)", (r->sb + r->wb) >> 20);
    return 0;
}

/* The header: the model, the data, the schedule. */
static void print_header(const gpt_run *r) {
    const gpt_opts *o = &r->o;
    char att[160];
    int used = snprintf(att, sizeof att, "%s attention", attn_attention_kind_name(o->shape.attention.kind));
    attn_attention_config ac = o->shape.attention;
    for (int i = 0, k = 0; i < TRAIN_KIND_OPTS && used > 0 && (size_t)used < sizeof att; i++)
        if (train_kind_uses(ac.kind, i, NULL))
            used += snprintf(att + used, sizeof att - (size_t)used, "%s%s %lld", k++ ? ", " : " (",
                             train_kind_opts[i].name, (long long)*train_kind_opt_value(&ac, i));
    if (used > 0 && (size_t)used + 1 < sizeof att && strchr(att, '(')) strcat(att, ")");
    char held[64] = "";
    if (r->val_len) snprintf(held, sizeof held, " (%zu held out for validation)", r->val_len);
    printf("gpt: %lld layers, %lld heads, d_model %lld, context %lld, %s, %zu parameters; %zu bytes of "
           "'%s'%s; batch %lld, %lld steps, lr %g, %s, %d threads\n",
           (long long)o->shape.layers, (long long)o->shape.heads, (long long)o->shape.d_model, (long long)r->C, att,
           attn_params_numel(r->ps), r->len, o->data, held, (long long)r->B, (long long)o->steps, o->lr,
           attn_precision_name(o->precision), attn_get_num_threads());
    train_precision_note(o->precision);
    if (r->M > 1 || r->nranks > 1)
        printf(
            "data-parallel: %d rank%s, %lld windows each, micro-batch %lld (%lld gradients added in order per step)\n",
            r->nranks, r->nranks > 1 ? "s" : "", (long long)r->count, (long long)r->m, (long long)r->M);
    fflush(stdout);
}

/* trainer hook: after the checkpoint's state is loaded, before the first step. */
static int gpt_start(void *ctx, const attn_train_state *state) {
    gpt_run *r = ctx;
    r->data_seed = state->rng_seed ^ 0x5DEECE66Dull;
    if (r->dist && dist_check(r, state)) return 1;
    if (alloc_scratch(r, state)) return 1;
    print_header(r);
    return 0;
}

/* The canonical gradient of this rank's micro-batches: computed one by one, added in order (into
 * r->grads when there are several). */
static attn_status micro_grads(gpt_run *r) {
    const int64_t m = r->m, C = r->C, V = r->V, M = r->M;
    const int split = r->dist && r->nranks > 1;
    attn_cross_entropy_config ce = attn_cross_entropy_config_default();
    attn_status s;
    for (int64_t k = 0; k < r->L; k++) {
        /* a long step stops between its micro-batches (under attn dist the ranks agree between steps) */
        if (k > 0 && !r->dist && trainer_stop_requested()) return TRAINER_STOPPED;
        r->a.tokens = r->x + k * m * C;
        if ((s = attn_params_zero_grad(r->ps)) != ATTN_OK ||
            (s = attn_gpt_forward(r->g, &r->a, r->logits, r->saved, r->sb, r->ws, r->wb)) != ATTN_OK ||
            (s = attn_cross_entropy_forward(r->logits, r->y + k * m * C, m * C, V, &ce, &r->losses[M + k],
                                            r->logits)) != ATTN_OK ||
            (s = attn_gpt_backward(r->g, &r->a, r->logits, r->saved, r->sb, r->ws, r->wb)) != ATTN_OK)
            return s;
        if (!r->grads) continue;
        float *dst = r->grads + (split ? (size_t)k * r->P : 0);
        for (size_t i = 0, off = 0; i < attn_params_count(r->ps); off += attn_params_get(r->ps, i)->numel, i++) {
            const attn_param *q = attn_params_get(r->ps, i);
            if (k == 0 || split)
                memcpy(dst + off, q->grad, sizeof(float) * q->numel);
            else
                for (size_t e = 0; e < q->numel; e++) dst[off + e] += q->grad[e];
        }
    }
    return ATTN_OK;
}

/* trainer hook: step `step`'s gradient (the sum of M micro-batches') and loss. */
static attn_status gpt_step(void *ctx, int64_t step, float *loss, double *units) {
    gpt_run *r = ctx;
    const int64_t M = r->M;
    draw_batch(r->text, r->train_len, r->first, r->count, r->C, r->data_seed, step, r->x, r->y);
    r->a.offset = (uint64_t)step;
    attn_status s = micro_grads(r);
    if (s != ATTN_OK) return s;
    if (r->dist && r->nranks > 1) {
        if ((s = attn_dist_allgather_f32(r->dist, r->losses + M, r->L, r->losses)) != ATTN_OK ||
            (s = attn_dist_allreduce_grads(r->dist, r->ps, r->grads, r->L)) != ATTN_OK)
            return s;
    } else {
        memcpy(r->losses, r->losses + M, sizeof(float) * (size_t)M);
        for (size_t i = 0, off = 0; r->grads && i < attn_params_count(r->ps);
             off += attn_params_get(r->ps, i)->numel, i++)
            memcpy(attn_params_get(r->ps, i)->grad, r->grads + off, sizeof(float) * attn_params_get(r->ps, i)->numel);
    }
    double lsum = 0;
    for (int64_t k = 0; k < M; k++) lsum += r->losses[k];
    *loss = (float)(lsum / (double)M);
    *units = (double)(r->B * r->C);
    return ATTN_OK;
}

/* trainer hook: the validation loss, every --eval-interval steps and at the end (when the last
 * step's is not known yet). */
static attn_status gpt_evaluate(void *ctx, int64_t step, int final) {
    gpt_run *r = ctx;
    if (!r->val_len) return ATTN_OK;
    if (!final || r->val_step != step) {
        attn_status s = val_loss(r->g, &r->a, r->text + r->train_len, r->val_len, r->o.eval_batches * r->B, r->m, r->V,
                                 r->x, r->y, r->logits, r->saved, r->sb, r->ws, r->wb, &r->val);
        if (s != ATTN_OK) return s;
        r->val_step = step;
    }
    if (final) {
        printf("final val loss: %.9g\n", r->val);
    } else {
        printf("step %6lld/%lld  val loss %.4f\n", (long long)step, (long long)r->o.steps, r->val);
        fflush(stdout);
    }
    return ATTN_OK;
}

/* trainer hook: the checkpoint's metadata. */
static void gpt_metadata(void *ctx, train_meta *m) { fill_meta(m, &((gpt_run *)ctx)->o); }

static void gpt_free(gpt_run *r) {
    free(r->text);
    free(r->x);
    free(r->y);
    free(r->logits);
    free(r->grads);
    free(r->losses);
    free(r->saved);
    free(r->ws);
    attn_optimizer_free(r->opt);
    attn_gpt_free(r->g);
}

/* The options' defaults, then the command line: CLI_OK, CLI_HELP or 2. */
static int gpt_options(int argc, char **argv, gpt_opts *o) {
    memset(o, 0, sizeof *o);
    o->shape = (train_gpt_shape){TRAIN_BYTE_VOCAB, 2, 4, 128, 512, 64, attn_attention_config_default()};
    o->steps = 1000;
    o->batch = 16;
    o->warmup = -1;
    o->every = 100;
    o->log_every = 10;
    o->seed = 1;
    o->lr = 3e-3;
    o->val_fraction = 0.1;
    o->eval_interval = 100;
    o->eval_batches = 4;
    o->checkpoint = "attn-gpt.safetensors";
    return parse_gpt(argc, argv, o);
}

/* The data (and its hash), the checkpoint's place, and on resume what the checkpoint fixes:
 * 0, or 1 (message printed). */
static int gpt_prepare(gpt_run *r) {
    gpt_opts *o = &r->o;
    r->text = (unsigned char *)safe_read(o->data, "data", ATTN_IO_CAP_DATA, &r->len);
    if (!r->text) return cli_fail("train gpt: %s", attn_last_error());
    snprintf(o->data_hash, sizeof o->data_hash, "%016llx",
             (unsigned long long)train_hash(TRAIN_HASH_SEED, r->text, r->len));
    const char *const ins[1] = {o->data};
    if (r->rank == 0 && safe_checkpoint_check("train gpt", o->checkpoint, ins, 1, o->resume, o->force)) return 1;
    if (o->resume) {
        if (resume_meta(r)) return 1;
    } else {
        o->shape.ff = 4 * o->shape.d_model;
    }
    /* the weights' estimate before they are allocated; the activations' once the model sizes them */
    return plan(r) || gpt_memory_check(r, gpt_param_estimate(&o->shape), 0) || build(r);
}

static int train_gpt_run(int argc, char **argv, attn_dist **distp) {
    gpt_run r;
    memset(&r, 0, sizeof r);
    int rc = gpt_options(argc, argv, &r.o);
    if (rc == CLI_HELP) {
        usage_gpt(stdout);
        return 0;
    }
    if (rc) return rc;
    const gpt_opts *o = &r.o;
    if (o->threads > 0) attn_set_num_threads((int)o->threads);
    if (train_dist_start("train gpt", distp)) return 1;
    r.dist = *distp;
    r.rank = attn_dist_rank(r.dist), r.nranks = attn_dist_size(r.dist);
    if (r.dist && attn_dist_set_timeout(r.dist, o->timeout) != ATTN_OK)
        return cli_fail("train gpt: --timeout: %s", attn_last_error());
    r.val = NAN;
    r.val_step = -1;
    rc = gpt_prepare(&r);
    if (!rc) {
        trainer_config c = trainer_config_default("train gpt");
        c.ps = r.ps, c.opt = r.opt, c.dist = r.dist;
        c.sched = (attn_lr_schedule){o->lr, o->lr / 10, o->warmup, o->steps};
        c.accum = r.M, c.batch = r.B;
        c.steps = o->steps, c.stop_at = o->stop_at;
        c.seed = (uint64_t)o->seed, c.given_seed = o->given_seed;
        c.resume = o->resume, c.check_steps = 1;
        c.checkpoint = o->checkpoint, c.every = o->every, c.log_every = o->log_every;
        c.eval_every = o->eval_interval, c.eval_at_stop = 1, c.eval_name = "validation";
        const trainer_hooks h = {&r, gpt_start, gpt_step, gpt_evaluate, gpt_metadata, NULL, NULL};
        rc = trainer_run(&c, &h, NULL);
    }
    fflush(stdout);
    gpt_free(&r);
    return rc;
}

static int train_gpt(int argc, char **argv) {
    attn_dist *dist = NULL;
    const int rc = train_gpt_run(argc, argv, &dist); /* sets dist: read it after the call */
    return train_dist_end(dist, rc);
}

int cmd_train(int argc, char **argv) {
    if (argc < 2) return cli_usage_error("train: which model? (gpt, vit; try 'attn train --help')");
    if (cli_is_help(argv[1])) {
        usage_train(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "gpt")) return train_gpt(argc - 1, argv + 1);
    if (!strcmp(argv[1], "vit")) return train_vit(argc - 1, argv + 1);
    return cli_usage_error("train: unknown model '%s' (available: gpt, vit)", argv[1]);
}
