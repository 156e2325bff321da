/* attn train vit: a small Vision Transformer (attn_vit) trained on square 8-bit gray images with
 * labels (by default the 1797 handwritten digits of data/digits), with a fixed held-out split,
 * AdamW, warmup + cosine learning rate, gradient clipping, random shifts, periodic checkpoints,
 * bitwise resume and a checkpoint on Ctrl-C, as `attn train gpt`. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_opts.h"
#include "safe_io.h"
#include "train_common.h"
#include "trainer.h"

static void usage_vit(FILE *f) {
    fprintf(f, "usage: attn train vit [--data DIR] [options]\n\n"
               "Trains a Vision Transformer (torchvision's VisionTransformer: patch embedding, class\n"
               "token, learned positions, pre-norm GELU layers, final norm, linear head) to classify\n"
               "the square 8-bit gray images of DIR/images.u8 (N x S x S bytes) by DIR/labels.u8 (N\n"
               "bytes, classes 0..K-1). Default DIR: data/digits (from the source tree's root), the 1797\n"
               "8x8 handwritten digits of scikit-learn (UCI), values 0..16. Pixels are scaled by the\n"
               "largest value to [0, 1] and normalised to [-1, 1]. Held out: every image i with\n"
               "i %% 6 == 5 (299 of the digits; none with fewer than 6 images, and then no accuracy),\n"
               "never trained on. Each step draws --batch training images at random (from --seed and\n"
               "the step, so a resumed run sees the same data), each shifted by up to --shift pixels\n"
               "(zero fill). AdamW (weight decay 0.05 on matrices),\n"
               "linear warmup then cosine decay to lr/10, gradient clipping at norm 1.\n\n"
               "options:\n"
               "  --data DIR         images.u8 and labels.u8 (default data/digits)\n"
               "  --patch P          patch side, divides S (default 2); at most 4097 tokens, (S/P)^2 + 1\n"
               "  --layers L         encoder layers (default 2)\n"
               "  --heads H          attention heads (default 4)\n"
               "  --hidden D         hidden size, a multiple of H (default 32)\n"
               "  --mlp M            MLP size (default 2 D)\n"
               "  --steps N          optimizer steps in total (default 5000)\n"
               "  --batch B          images per step (default 32)\n"
               "  --lr LR            peak learning rate (default 5e-3)\n"
               "  --warmup W         warmup steps (default N/20)\n"
               "  --shift S          random shift in pixels, 0 = none (default 1)\n"
               "  --seed S           initialisation and data order (default 1)\n"
               "  --precision P      fp32 (default) or bf16: mixed precision, the patch embedding's,\n"
               "                     the layers' and the head's products and flash attention's from\n"
               "                     bf16-rounded operands with float accumulation; weights,\n"
               "                     gradients, AdamW and the checkpoint stay fp32 (AMX tiles with\n"
               "                     AMX-BF16, vdpbf16ps with AVX512-BF16, a bit-exact emulation of it\n"
               "                     elsewhere, slower). Kept in the checkpoint: --resume continues in\n"
               "                     it unless given again; another\n"
               "                     precision is allowed (noted; the weights are fp32 either way),\n"
               "                     bitwise resume holds within one precision\n"
               "  --threads T        threads (default 1: a model this small gains nothing from more)\n"
               "  --checkpoint PATH  checkpoint file (default attn-vit.safetensors; the weights under\n"
               "                     attn_vit's names)\n"
               "  --every N          also write the checkpoint every N steps (default 1000; 0: only at\n"
               "                     the end)\n"
               "  --eval-interval N  held-out accuracy every N steps (default 0: at the end only; the\n"
               "                     name `attn train gpt` uses; --eval-every is the same option)\n"
               "  --resume           continue from the checkpoint: model shape, seed, weights,\n"
               "                     optimizer state, step and (unless given again) --steps, --batch,\n"
               "                     --lr, --warmup and --shift: bitwise as if never stopped\n"
               "  --stop-at K        stop after step K of the --steps schedule, writing the checkpoint\n"
               "  --force            start afresh over an existing checkpoint, or replace a file at\n"
               "                     --checkpoint that is not a checkpoint (refused without it)\n"
               "  --log-every N      print a line every N steps (default 500)\n\n"
               "Prints one line per --log-every steps (step, loss, learning rate, gradient norm,\n"
               "images/s), `final loss: X` and `held-out accuracy: P%% (k/n)` at the end. Ctrl-C or\n"
               "SIGTERM stops the current step (before its next layer, forward or backward), writes the\n"
               "checkpoint of the last whole step and exits with status 130. A run that would not fit\n"
               "in the machine's memory is refused at the start with the figures. The checkpoint keeps\n"
               "a hash of the data: --resume on other data is refused. One run per checkpoint: a\n"
               "second is refused while CHECKPOINT.lock is held.\n");
}

typedef struct vit_opts {
    const char *data, *checkpoint;
    int64_t patch, layers, heads, hidden, mlp, steps, batch, warmup, shift, every, eval_every, log_every, threads, seed,
        stop_at;
    double lr;
    int resume, force;
    char data_hash[17]; /* of the labels and images, kept in the checkpoint */
    int given[8];       /* patch, layers, heads, hidden, mlp, seed, and the schedule below */
    int given_steps, given_batch, given_lr, given_warmup, given_shift, given_precision;
    attn_precision precision;
} vit_opts;

typedef struct vit_data {
    uint8_t *images, *labels;
    int64_t n, side, classes;
    int maxval;
} vit_data;

/* The whole of a regular file of at most max bytes (NULL with the message in attn_last_error()). */
static uint8_t *read_all(const char *path, size_t max, size_t *len) {
    return (uint8_t *)safe_read(path, "data", (uint64_t)max, len);
}

/* 0, or 1 with the failure printed. */
static int load_data(const char *dir, vit_data *d) {
    char path[1200];
    size_t nl = 0, ni = 0;
    memset(d, 0, sizeof *d);
    snprintf(path, sizeof path, "%s/labels.u8", dir);
    if (!(d->labels = read_all(path, (size_t)1 << 20, &nl))) return cli_fail("train vit: %s", attn_last_error());
    if (nl < 2 || nl > ((size_t)1 << 20)) return cli_fail("train vit: '%s' has %zu labels (want 2 .. 2^20)", path, nl);
    snprintf(path, sizeof path, "%s/images.u8", dir);
    if (!(d->images = read_all(path, (size_t)1 << 28, &ni))) return cli_fail("train vit: %s", attn_last_error());
    const size_t per = ni / nl;
    int64_t side = 1;
    while ((size_t)(side * side) < per) side++;
    if (ni % nl || (size_t)(side * side) != per || side > 1024)
        return cli_fail("train vit: '%s' has %zu bytes, not %zu square images (one per label)", path, ni, nl);
    d->n = (int64_t)nl;
    d->side = side;
    for (size_t i = 0; i < ni; i++) d->maxval = d->images[i] > d->maxval ? d->images[i] : d->maxval;
    for (size_t i = 0; i < nl; i++) d->classes = d->labels[i] + 1 > d->classes ? d->labels[i] + 1 : d->classes;
    if (d->maxval == 0) return cli_fail("train vit: '%s' is all zeros", path);
    if (d->classes < 2) return cli_fail("train vit: the labels hold fewer than 2 classes");
    return 0;
}

static int held_out(int64_t i) { return i % 6 == 5; }

/* Image i shifted by (dy, dx) into x [side, side], normalised to [-1, 1] (zero fill). */
static void put_image(const vit_data *d, int64_t i, int64_t dy, int64_t dx, float *x) {
    const int64_t S = d->side;
    const uint8_t *src = d->images + i * S * S;
    for (int64_t y = 0; y < S; y++)
        for (int64_t c = 0; c < S; c++) {
            const int64_t sy = y - dy, sx = c - dx;
            const int v = sy >= 0 && sy < S && sx >= 0 && sx < S ? src[sy * S + sx] : 0;
            x[y * S + c] = (float)v / (float)d->maxval * 2.0f - 1.0f;
        }
}

static uint64_t draw(uint64_t seed, int64_t step, uint64_t i, uint64_t range) {
    const uint64_t hi = (uint64_t)(attn_philox_uniform(seed, (uint64_t)step, 2 * i) * 16777216.0f);
    const uint64_t lo = (uint64_t)(attn_philox_uniform(seed, (uint64_t)step, 2 * i + 1) * 16777216.0f);
    return ((hi << 24) | lo) % range;
}

static void draw_batch(const vit_data *d, const int64_t *train_idx, int64_t ntrain, int64_t B, int64_t shift,
                       uint64_t seed, int64_t step, float *x, int64_t *y) {
    const int64_t S = d->side;
    for (int64_t b = 0; b < B; b++) {
        const int64_t i = train_idx[draw(seed, step, (uint64_t)(3 * b), (uint64_t)ntrain)];
        const uint64_t span = (uint64_t)(2 * shift + 1);
        const int64_t dy = shift ? (int64_t)draw(seed, step, (uint64_t)(3 * b + 1), span) - shift : 0;
        const int64_t dx = shift ? (int64_t)draw(seed, step, (uint64_t)(3 * b + 2), span) - shift : 0;
        put_image(d, i, dy, dx, x + b * S * S);
        y[b] = d->labels[i];
    }
}

/* Held-out accuracy (eval mode, batches of up to 256): *correct of *total. */
static attn_status evaluate(attn_vit *v, const vit_data *d, int64_t *correct, int64_t *total) {
    const int64_t S = d->side, K = d->classes, CH = 256;
    float *x = malloc(sizeof(float) * (size_t)(CH * S * S)), *lg = malloc(sizeof(float) * (size_t)(CH * K));
    attn_vit_args a;
    memset(&a, 0, sizeof a);
    a.batch = CH;
    a.images = x;
    const size_t wb = attn_vit_workspace_size(v, &a);
    void *ws = malloc(wb ? wb : 1);
    int64_t idx[256], nb = 0;
    *correct = *total = 0;
    attn_status s = !x || !lg || !ws ? ATTN_ERR_OUT_OF_MEMORY : ATTN_OK;
    for (int64_t i = 0; s == ATTN_OK && i <= d->n; i++) {
        if (i < d->n && held_out(i)) {
            put_image(d, i, 0, 0, x + nb * S * S);
            idx[nb++] = i;
        }
        if (nb == CH || (i == d->n && nb > 0)) {
            a.batch = nb;
            if ((s = attn_vit_forward(v, &a, lg, NULL, 0, ws, wb)) != ATTN_OK) break;
            for (int64_t b = 0; b < nb; b++) {
                int64_t best = 0;
                for (int64_t k = 1; k < K; k++)
                    if (lg[b * K + k] > lg[b * K + best]) best = k;
                *correct += best == d->labels[idx[b]];
            }
            *total += nb;
            nb = 0;
        }
    }
    free(x), free(lg), free(ws);
    return s;
}

static void fill_meta(train_meta *m, const vit_opts *o, const attn_vit_config *c) {
    m->n = 0;
    m->keys[m->n] = "model";
    m->values[m->n++] = "vit";
    train_meta_add(m, "vit.image", "%lld", (long long)c->image_h);
    train_meta_add(m, "vit.patch", "%lld", (long long)c->patch_size);
    train_meta_add(m, "vit.layers", "%lld", (long long)c->num_layers);
    train_meta_add(m, "vit.heads", "%lld", (long long)c->num_heads);
    train_meta_add(m, "vit.hidden", "%lld", (long long)c->hidden_dim);
    train_meta_add(m, "vit.mlp", "%lld", (long long)c->mlp_dim);
    train_meta_add(m, "vit.classes", "%lld", (long long)c->num_classes);
    train_meta_add(m, "vit.channels", "%lld", (long long)c->in_channels);
    train_meta_add(m, "train.steps", "%lld", (long long)o->steps);
    train_meta_add(m, "train.batch", "%lld", (long long)o->batch);
    train_meta_add(m, "train.warmup", "%lld", (long long)o->warmup);
    train_meta_add(m, "train.lr", "%.17g", o->lr);
    train_meta_add(m, "train.shift", "%lld", (long long)o->shift);
    train_meta_add(m, "train.precision", "%s", attn_precision_name(o->precision));
    train_meta_add(m, TRAIN_DATA_HASH_KEY, "%s", o->data_hash);
}

/* The hash of the data (train_data_differs): the count, the labels and the images. */
static void hash_data(const vit_data *d, char out[17]) {
    uint64_t h = train_hash(TRAIN_HASH_SEED, &d->n, sizeof d->n);
    h = train_hash(h, d->labels, (size_t)d->n);
    h = train_hash(h, d->images, (size_t)(d->n * d->side * d->side));
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* The checkpoint's model shape and schedule into o (a shape given again must agree); 0 or 1. */
static int resume_meta(vit_opts *o) {
    attn_safetensors *st = NULL;
    if (attn_safetensors_open_file(o->checkpoint, &st) != ATTN_OK)
        return cli_fail("train vit: --resume: %s", attn_last_error());
    const char *model = attn_safetensors_metadata_find(st, "model");
    if (!model || strcmp(model, "vit")) {
        attn_safetensors_close(st);
        return cli_fail("train vit: --resume: %s is not a checkpoint of `attn train vit` (model '%s')", o->checkpoint,
                        model ? model : "missing");
    }
    static const char *keys[] = {"vit.patch", "vit.layers", "vit.heads", "vit.hidden", "vit.mlp"};
    static const char *flags[] = {"--patch", "--layers", "--heads", "--hidden", "--mlp"};
    int64_t *dst[] = {&o->patch, &o->layers, &o->heads, &o->hidden, &o->mlp};
    for (int i = 0; i < 5; i++) {
        const char *v = attn_safetensors_metadata_find(st, keys[i]);
        int64_t x;
        if (!v || cli_parse_i64(v, 1, 1 << 20, &x)) {
            attn_safetensors_close(st);
            return cli_fail("train vit: --resume: %s: metadata '%s' is %s", o->checkpoint, keys[i],
                            v ? "not a positive integer" : "missing");
        }
        if (o->given[i] && *dst[i] != x) {
            attn_safetensors_close(st);
            return cli_fail("train vit: --resume: %s %lld differs from the checkpoint's %lld", flags[i],
                            (long long)*dst[i], (long long)x);
        }
        *dst[i] = x;
    }
    const struct {
        int given;
        const char *key;
        int64_t *dst;
        int64_t lo, hi;
    } sch[] = {{o->given_steps, "train.steps", &o->steps, 1, (int64_t)1 << 30},
               {o->given_batch, "train.batch", &o->batch, 1, 1 << 16},
               {o->given_warmup, "train.warmup", &o->warmup, 0, (int64_t)1 << 30},
               {o->given_shift, "train.shift", &o->shift, 0, 8}};
    for (size_t i = 0; i < sizeof sch / sizeof sch[0]; i++) {
        const char *v = attn_safetensors_metadata_find(st, sch[i].key);
        int64_t x;
        if (!sch[i].given && v && !cli_parse_i64(v, sch[i].lo, sch[i].hi, &x)) *sch[i].dst = x;
    }
    const char *v = attn_safetensors_metadata_find(st, "train.lr");
    double dv;
    if (!o->given_lr && v && !cli_parse_double(v, 0.0, 10.0, &dv) && dv > 0) o->lr = dv;
    /* absent in older checkpoints: fp32 */
    const int bad = train_resume_precision("train vit", st, o->checkpoint, o->given_precision, &o->precision);
    const int other_data = !bad && train_data_differs(st, o->data_hash);
    attn_safetensors_close(st);
    return bad ? bad : other_data ? train_data_refuse("train vit", o->data, o->checkpoint) : 0;
}

/* The options' defaults, then the command line: 0, or the exit status (CLI_HELP: the usage,
 * printed). */
static int vit_options(int argc, char **argv, vit_opts *o) {
    memset(o, 0, sizeof *o);
    o->data = "data/digits";
    o->checkpoint = "attn-vit.safetensors";
    o->patch = 2, o->layers = 2, o->heads = 4, o->hidden = 32, o->mlp = 0;
    o->steps = 5000, o->batch = 32, o->warmup = -1, o->shift = 1, o->every = 1000, o->log_every = 500, o->seed = 1;
    o->threads = 1;
    o->lr = 5e-3;
    const char *precision = NULL;
    cli_opt opts[] = {
        CLI_STRING_NONEMPTY("--data", &o->data),
        CLI_STRING_NONEMPTY("--checkpoint", &o->checkpoint),
        CLI_STRING("--precision", &precision),
        CLI_FLAG("--resume", &o->resume),
        CLI_FLAG("--force", &o->force),
        CLI_DOUBLE_ABOVE("--lr", &o->lr, 0.0, 10.0),
        CLI_INT("--patch", &o->patch, 1, 1024),
        CLI_INT("--layers", &o->layers, 1, 64),
        CLI_INT("--heads", &o->heads, 1, 256),
        CLI_INT("--hidden", &o->hidden, 1, 4096),
        CLI_INT("--mlp", &o->mlp, 1, 16384),
        CLI_INT("--steps", &o->steps, 1, 1 << 30),
        CLI_INT("--batch", &o->batch, 1, 1 << 16),
        CLI_INT("--warmup", &o->warmup, 0, 1 << 30),
        CLI_INT("--shift", &o->shift, 0, 8),
        CLI_INT("--every", &o->every, 0, 1 << 30),
        CLI_INT("--eval-interval", &o->eval_every, 0, 1 << 30),
        CLI_INT("--eval-every", &o->eval_every, 0, 1 << 30),
        CLI_INT("--log-every", &o->log_every, 1, 1 << 30),
        CLI_INT("--stop-at", &o->stop_at, 1, 1 << 30),
        CLI_INT("--threads", &o->threads, 1, 1024),
        CLI_INT("--seed", &o->seed, 0, INT64_MAX),
        CLI_END,
    };
    int parsed = cli_parse("train vit", opts, argc, argv, NULL, 0);
    if (parsed) return parsed;
    static const char *shape_flags[] = {"--patch", "--layers", "--heads", "--hidden", "--mlp", "--seed"};
    for (int i = 0; i < 6; i++) o->given[i] = cli_seen(opts, shape_flags[i]);
    o->given_steps = cli_seen(opts, "--steps");
    o->given_batch = cli_seen(opts, "--batch");
    o->given_lr = cli_seen(opts, "--lr");
    o->given_warmup = cli_seen(opts, "--warmup");
    o->given_shift = cli_seen(opts, "--shift");
    o->given_precision = precision != NULL;
    if (precision && cli_parse_precision(precision, &o->precision))
        return cli_usage_error("train vit: --precision '%s' is neither fp32 nor bf16", precision);
    if (!o->resume && o->hidden % o->heads)
        return cli_usage_error("train vit: --hidden %lld is not a multiple of --heads %lld", (long long)o->hidden,
                               (long long)o->heads);
    return 0;
}

/* A run of `attn train vit`: its options, data, model and scratch (the training loop's hooks'
 * context). */
typedef struct vit_run {
    vit_opts o;
    vit_data d;
    attn_vit_config cfg;
    attn_vit *v;
    attn_optimizer *opt;
    const attn_params *ps;
    attn_vit_args a;
    uint64_t data_seed;
    int64_t *train_idx, ntrain;
    float *x, *logits;
    int64_t *y;
    void *saved, *ws;
    size_t sb, wb;
} vit_run;

/* The bound on tokens per image, (S / P)^2 + 1: attention's cost grows with their square, so a
 * step of more could not end (nor be stopped) in reasonable time: 64 x 64 patches. */
#define VIT_MAX_TOKENS 4097

/* 0, or 1 with "too many tokens" printed, naming the options. */
static int vit_tokens_check(const vit_opts *o, int64_t side) {
    const int64_t g = side / o->patch, tokens = g * g + 1;
    if (tokens <= VIT_MAX_TOKENS) return 0;
    int64_t p = o->patch;
    while (p < side && (side % p || (side / p) * (side / p) + 1 > VIT_MAX_TOKENS)) p++;
    return cli_fail("train vit: %lldx%lld images at --patch %lld make %lld tokens per image, over the bound of %d "
                    "(64 x 64 patches; attention's cost grows with their square): use --patch %lld or more, or "
                    "smaller images in --data",
                    (long long)side, (long long)side, (long long)o->patch, (long long)tokens, VIT_MAX_TOKENS,
                    (long long)p);
}

/* train_memory_check for train vit's options. */
static int vit_memory_check(const vit_opts *o, double params, double act) {
    return train_memory_check("train vit", params, act, "--batch", o->batch,
                              "use a smaller --batch, --hidden, --mlp or --layers, or a larger --patch");
}

/* The parameters of the model before it is built (torchvision's layout; for vit_memory_check). */
static double vit_param_estimate(const vit_opts *o, int64_t side, int64_t classes) {
    const double D = (double)o->hidden, M = (double)(o->mlp ? o->mlp : 2 * o->hidden), g = (double)(side / o->patch);
    const double layer = 4 * D * D + 4 * D + 2 * D * M + M + D + 4 * D;
    return D * (double)(o->patch * o->patch) + D + D + (g * g + 1) * D + (double)o->layers * layer + 2 * D +
           (double)classes * (D + 1);
}

/* The data, the checkpoint's place, the model and its AdamW (no weight decay on biases, norms,
 * positions and the class token): 0, or 1 (message printed). */
static int vit_prepare(vit_run *r) {
    const vit_opts *o = &r->o;
    char lpath[1200], ipath[1200];
    snprintf(lpath, sizeof lpath, "%s/labels.u8", o->data);
    snprintf(ipath, sizeof ipath, "%s/images.u8", o->data);
    const char *const ins[2] = {lpath, ipath};
    if (safe_checkpoint_check("train vit", o->checkpoint, ins, 2, o->resume, o->force)) return 1;
    if (r->d.side % o->patch)
        return cli_fail("train vit: --patch %lld does not divide the %lld x %lld images", (long long)o->patch,
                        (long long)r->d.side, (long long)r->d.side);
    if (vit_tokens_check(o, r->d.side) || vit_memory_check(o, vit_param_estimate(o, r->d.side, r->d.classes), 0))
        return 1; /* before the weights are allocated */
    r->cfg = attn_vit_config_default(r->d.side, o->patch, o->layers, o->heads, o->hidden, o->mlp, r->d.classes);
    r->cfg.in_channels = 1;
    r->cfg.precision = o->precision;
    if (attn_vit_create(&r->cfg, &r->v) != ATTN_OK) return cli_fail("train vit: %s", attn_last_error());
    static float no_images; /* the sizes read the batch only */
    attn_vit_args a;
    memset(&a, 0, sizeof a);
    a.batch = o->batch, a.training = 1, a.images = &no_images;
    const double act = (double)attn_vit_saved_size(r->v, &a) + (double)attn_vit_workspace_size(r->v, &a) +
                       (double)sizeof(float) * (double)(o->batch * (r->d.side * r->d.side + r->d.classes));
    if (vit_memory_check(o, (double)attn_params_numel(attn_vit_params(r->v)), act)) return 1;
    const attn_params *ps = r->ps = attn_vit_params(r->v);
    attn_adamw_config ac = attn_adamw_config_default();
    ac.weight_decay = 0.05;
    if (attn_params_reset(ps, (uint64_t)o->seed) != ATTN_OK || attn_adamw_create(ps, &ac, &r->opt) != ATTN_OK)
        return cli_fail("train vit: %s", attn_last_error());
    for (size_t i = 0; i < attn_params_count(ps); i++)
        if (attn_params_get(ps, i)->rank < 2 || !strcmp(attn_params_get(ps, i)->name, "pos_embedding") ||
            !strcmp(attn_params_get(ps, i)->name, "class_token"))
            attn_optimizer_set_weight_decay(r->opt, i, 0.0);
    return 0;
}

/* trainer hook: after the checkpoint's state is loaded, before the first step: the training
 * images, the batch and activations, the header. */
static int vit_start(void *ctx, const attn_train_state *state) {
    vit_run *r = ctx;
    const vit_opts *o = &r->o;
    const vit_data *d = &r->d;
    r->data_seed = state->rng_seed ^ 0x5DEECE66Dull;
    const int64_t B = o->batch, S = d->side, K = d->classes;
    r->train_idx = malloc(sizeof(int64_t) * (size_t)d->n);
    for (int64_t i = 0; r->train_idx && i < d->n; i++)
        if (!held_out(i)) r->train_idx[r->ntrain++] = i;
    memset(&r->a, 0, sizeof r->a);
    r->a.batch = B;
    r->a.training = 1;
    r->a.seed = state->rng_seed;
    r->x = malloc(sizeof(float) * (size_t)(B * S * S));
    r->a.images = r->x;
    r->y = malloc(sizeof(int64_t) * (size_t)B);
    r->logits = malloc(sizeof(float) * (size_t)(B * K));
    r->sb = attn_vit_saved_size(r->v, &r->a), r->wb = attn_vit_workspace_size(r->v, &r->a);
    r->saved = malloc(r->sb ? r->sb : 1);
    r->ws = malloc(r->wb ? r->wb : 1);
    if (!r->train_idx || !r->x || !r->y || !r->logits || !r->saved || !r->ws)
        return cli_fail("train vit: out of memory (%zu MB of activations)", (r->sb + r->wb) >> 20);
    printf("vit: %lldx%lld images, patch %lld (%lld tokens), %lld layers, %lld heads, hidden %lld, mlp %lld, %lld "
           "classes, %zu parameters; %lld training / %lld held-out images from '%s'; batch %lld, %lld steps, lr %g, "
           "%s, %d threads\n",
           (long long)S, (long long)S, (long long)o->patch, (long long)attn_vit_tokens(r->v), (long long)o->layers,
           (long long)o->heads, (long long)o->hidden, (long long)o->mlp, (long long)K, attn_params_numel(r->ps),
           (long long)r->ntrain, (long long)(d->n - r->ntrain), o->data, (long long)B, (long long)o->steps, o->lr,
           attn_precision_name(o->precision), attn_get_num_threads());
    train_precision_note(o->precision);
    fflush(stdout);
    return 0;
}

/* trainer hook: step `step`'s gradient and loss. */
static attn_status vit_step(void *ctx, int64_t step, float *loss, double *units) {
    vit_run *r = ctx;
    const int64_t B = r->o.batch;
    draw_batch(&r->d, r->train_idx, r->ntrain, B, r->o.shift, r->data_seed, step, r->x, r->y);
    r->a.offset = (uint64_t)step;
    attn_cross_entropy_config ce = attn_cross_entropy_config_default();
    attn_status s;
    if ((s = attn_params_zero_grad(r->ps)) != ATTN_OK ||
        (s = attn_vit_forward(r->v, &r->a, r->logits, r->saved, r->sb, r->ws, r->wb)) != ATTN_OK ||
        (s = attn_cross_entropy_forward(r->logits, r->y, B, r->d.classes, &ce, loss, r->logits)) != ATTN_OK)
        return s;
    if (trainer_stop_requested()) return TRAINER_STOPPED; /* between the forward and backward passes */
    if ((s = attn_vit_backward(r->v, &r->a, r->logits, NULL, r->saved, r->sb, r->ws, r->wb)) != ATTN_OK) return s;
    *units = (double)B;
    return ATTN_OK;
}

/* trainer hook: the held-out accuracy, every --eval-interval steps and at the end. */
static attn_status vit_evaluate(void *ctx, int64_t step, int final) {
    vit_run *r = ctx;
    int64_t n = 0, c = 0;
    attn_status s = evaluate(r->v, &r->d, &c, &n);
    if (s != ATTN_OK) return s;
    if (n == 0 && final) /* under 6 images: training still means something, an accuracy would not */
        printf("held-out accuracy: none (no held-out images: %lld images, and i %% 6 == 5 is held out)\n",
               (long long)r->d.n);
    else if (n == 0)
        printf("step %6lld  held-out accuracy: none (no held-out images)\n", (long long)step);
    else if (final)
        printf("held-out accuracy: %.2f%% (%lld/%lld)\n", 100.0 * (double)c / (double)n, (long long)c, (long long)n);
    else
        printf("step %6lld  held-out accuracy %.2f%% (%lld/%lld)\n", (long long)step, 100.0 * (double)c / (double)n,
               (long long)c, (long long)n);
    return ATTN_OK;
}

/* trainer hook: the checkpoint's metadata. */
static void vit_metadata(void *ctx, train_meta *m) {
    const vit_run *r = ctx;
    fill_meta(m, &r->o, &r->cfg);
}

int train_vit(int argc, char **argv) {
    vit_run r;
    memset(&r, 0, sizeof r);
    int rc = vit_options(argc, argv, &r.o);
    if (rc == CLI_HELP) {
        usage_vit(stdout);
        return 0;
    }
    if (rc) return rc;
    vit_opts *o = &r.o;
    attn_set_num_threads((int)o->threads);
    if (load_data(o->data, &r.d)) {
        free(r.d.images), free(r.d.labels);
        return 1;
    }
    hash_data(&r.d, o->data_hash);
    if (o->resume && resume_meta(o)) {
        free(r.d.images), free(r.d.labels);
        return 1;
    }
    if (!o->mlp) o->mlp = 2 * o->hidden;
    if (o->warmup < 0) o->warmup = o->steps / 20;
    rc = o->warmup > o->steps ? cli_usage_error("train vit: --warmup %lld exceeds --steps %lld", (long long)o->warmup,
                                                (long long)o->steps)
                              : vit_prepare(&r);
    if (!rc) {
        trainer_config c = trainer_config_default("train vit");
        c.ps = r.ps, c.opt = r.opt;
        c.sched = (attn_lr_schedule){o->lr, o->lr / 10, o->warmup, o->steps};
        c.batch = o->batch, c.steps = o->steps, c.stop_at = o->stop_at;
        c.seed = (uint64_t)o->seed, c.given_seed = o->given[5], c.resume = o->resume;
        c.checkpoint = o->checkpoint, c.every = o->every;
        c.log_every = o->log_every, c.rate_unit = "img/s", c.rate_width = 8;
        c.eval_every = o->eval_every, c.eval_at_stop = 0, c.eval_name = "evaluation";
        const trainer_hooks h = {&r, vit_start, vit_step, vit_evaluate, vit_metadata, NULL, NULL};
        rc = trainer_run(&c, &h, NULL);
    }
    fflush(stdout);
    free(r.d.images), free(r.d.labels), free(r.x), free(r.y), free(r.logits), free(r.saved), free(r.ws);
    free(r.train_idx);
    attn_optimizer_free(r.opt);
    attn_vit_free(r.v);
    return rc;
}
