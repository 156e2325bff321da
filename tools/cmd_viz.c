/* attn viz: a model's attention weights on one input as SVG heat maps, an HTML page and CSV.
 *
 * Input kinds (each runs one forward with an attention capture of every head and row of the
 * modules matching --attention, and gives token labels):
 *   - a checkpoint of `attn train gpt` on --text (bytes) or --tokens (ids);
 *   - an `attn run` model (--config, --weights) on --inputs (a safetensors of forward arguments);
 *   - a Vision Transformer (a checkpoint of `attn train vit`, or an `attn run` vision_transformer)
 *     on --image: tokens labelled "cls" ("dist") and "pROW,COL" by patch, the rollout shown as its
 *     CLS row, and --overlay: that row over the patch grid, upsampled and blended onto the image
 *     (attn_viz_overlay), as PNG (libpng) or PPM. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "attn/viz.h"
#include "cli.h"
#include "cli_opts.h"
#include "image_in.h"
#include "model_open.h"
#include "safe_io.h"
#include "train_common.h"
#include "viz_model.h"
#include "viz_out.h"

#define VIZ_MAX_LIST 256

static void usage(FILE *f) {
    fprintf(f, "usage: attn viz MODEL INPUT [options] (--svg FILE | --html FILE | --csv FILE)...\n\n"
               "Runs one forward of a model on one input, records the attention weights of every head of\n"
               "its attention modules, and writes the chosen layers and heads as pictures and numbers.\n\n"
               "MODEL (one of):\n"
               "  --checkpoint FILE    a checkpoint of `attn train gpt`\n"
               "  --checkpoint FILE    a checkpoint of `attn train vit` (a Vision Transformer)\n"
               "  --config M.json --weights W.safetensors   an `attn run` model (see attn run --help);\n"
               "  --model DIR          a Hugging Face folder (BERT, GPT-2: --text, tokenised by its tokenizer;\n"
               "                       ViT: --image, preprocessed as its preprocessor_config.json says)\n"
               "                       --weights-prefix P: its tensors named P + state_dict name\n"
               "INPUT:\n"
               "  --text TEXT          text for a GPT checkpoint (bytes; at most its context)\n"
               "  --tokens I,J,...     token ids for a GPT checkpoint\n"
               "  --inputs IN.safetensors  the forward arguments of an `attn run` model (as attn run)\n"
               "  --image FILE         an image for a Vision Transformer (PNG with libpng, PPM, PGM),\n"
               "                       resized to the model's image size and normalised (v / 255 - mean) /\n"
               "                       std; tokens are labelled cls (dist) and pROW,COL by patch\n"
               "  --mean M[,M,M] --std S[,S,S]  the normalisation (default: 0.5 and 0.5 for `attn train vit`\n"
               "                       checkpoints, as they were trained; 0 and 1 for --config models)\n"
               "options:\n"
               "  --attention PATTERN  the attention modules to record ('*' wildcards; default '*'); layers\n"
               "                       are numbered in the order these modules run\n"
               "  --layer L[,L...]     layers to show (default: all)\n"
               "  --head H[,H...]|mean|all  heads to show: indices, their mean, or the mean and every head\n"
               "                       (default all)\n"
               "  --rollout            also the attention rollout through all recorded layers (Abnar &\n"
               "                       Zuidema 2020: heads averaged, identity added, rows renormalised,\n"
               "                       multiplied through the layers; square self-attentions only); for a\n"
               "                       Vision Transformer its CLS row: the classification token's share\n"
               "                       of every token\n"
               "  --batch-index B      the batch element to show (default 0)\n"
               "  --max-tokens M       longer sequences are shown as a window of M queries and M keys\n"
               "                       (default 64); the outputs say so\n"
               "  --start S            the window's first position (default 0)\n"
               "  --title TEXT         title of the maps and the page (default: from the model)\n"
               "  --svg FILE           one SVG heat map per layer and head (several: FILE-L0-h1.svg, ...)\n"
               "  --html FILE          one self-contained page: layer / head selector, heat map with hover\n"
               "                       values, head view (open it with #selftest to check it)\n"
               "  --csv FILE           map,module,layer,head,query,key,query_label,key_label,weight\n"
               "  --overlay FILE       Vision Transformer: the rollout's CLS row over the patches (min-max\n"
               "                       scaled, upsampled bilinearly to the picture, inferno-like colours)\n"
               "                       blended onto the image; PNG when FILE ends in .png and the build\n"
               "                       has libpng (otherwise a PPM next to it, and a note says so), else PPM\n"
               "  --overlay-size N     the overlay's longer side in pixels (default: the image scaled up by\n"
               "                       a whole factor to at least 256)\n"
               "  --overlay-alpha A    the colours' weight in the blend (default 0.5)\n"
               "  --nearest            upsample the patch grid by nearest neighbour (blocks) instead\n"
               "  --force              replace an existing output of another kind (never an input)\n"
               "  --threads N          threads (default: all)\n\n"
               "Bad input (unreadable files, a layer or head out of range, tokens outside the vocabulary,\n"
               "a model whose attention has no weights) is reported on one line and exits 1; usage errors\n"
               "exit 2.\n");
}

static char *dup(const char *s) {
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

/* The label of byte b: printable ASCII as itself, blanks and others escaped. */
static void byte_label(int b, char *buf, size_t cap) {
    if (b == ' ')
        snprintf(buf, cap, "\xe2\x90\xa3"); /* U+2423 OPEN BOX */
    else if (b == '\n')
        snprintf(buf, cap, "\\n");
    else if (b == '\t')
        snprintf(buf, cap, "\\t");
    else if (b > 32 && b < 127)
        snprintf(buf, cap, "%c", b);
    else
        snprintf(buf, cap, "\\x%02x", b);
}

/* What an input kind leaves: the forward's capture, and labels of the token positions. */
typedef struct viz_run {
    attn_capture *cap;
    int64_t ntok;      /* token labels for sequences of this length (0: none) */
    char **tok_labels; /* [ntok] */
    char model[512];   /* description */
    /* owned by the kind */
    attn_gpt *gpt;
    model_in run; /* an `attn run` model */
    /* a Vision Transformer on an image */
    attn_vit *vit_own;          /* from a checkpoint (else the --config model's) */
    const attn_vit_config *vit; /* NULL for the other models */
    int64_t vit_t;              /* class (and distillation) tokens before the patches */
    image_in img;               /* a checkpoint's input (a --config model's is run.img) */
    viz_model pre;              /* --model: a Hugging Face folder (viz_model.c) */
} viz_run;

/* Labels cls (dist), pROW,COL; returns the predicted class of the logits, or -1 (printed). */
static int vit_labels(viz_run *r, const attn_vit *v, const float *logits) {
    const attn_vit_config *c = attn_vit_get_config(v);
    const int64_t gh = c->image_h / c->patch_size, gw = c->image_w / c->patch_size, n = attn_vit_tokens(v);
    r->vit = c;
    r->vit_t = n - gh * gw;
    if (!(r->tok_labels = calloc((size_t)n, sizeof(char *)))) {
        cli_fail("viz: out of memory");
        return -1;
    }
    r->ntok = n;
    for (int64_t i = 0; i < n; i++) {
        char b[48];
        if (i < r->vit_t)
            snprintf(b, sizeof b, "%s", i == 0 ? "cls" : "dist");
        else
            snprintf(b, sizeof b, "p%lld,%lld", (long long)((i - r->vit_t) / gw), (long long)((i - r->vit_t) % gw));
        if (!(r->tok_labels[i] = dup(b))) {
            cli_fail("viz: out of memory");
            return -1;
        }
    }
    int64_t best = 0;
    for (int64_t k = 1; k < c->num_classes; k++)
        if (logits[k] > logits[best]) best = k;
    return (int)best;
}

/* A checkpoint of `attn train vit` (metadata model = vit) on an image. */
static int run_vit(viz_run *r, const char *path, const attn_safetensors *meta, const char *image, const char *mean_s,
                   const char *std_s, const char *pattern) {
    static const char *keys[] = {"vit.image",  "vit.patch", "vit.layers",  "vit.heads",
                                 "vit.hidden", "vit.mlp",   "vit.classes", "vit.channels"};
    int64_t v[8];
    for (int i = 0; i < 8; i++) {
        const char *s = attn_safetensors_metadata_find(meta, keys[i]);
        if (!s || cli_parse_i64(s, 1, 1 << 20, &v[i]))
            return cli_fail("viz: %s: metadata '%s' is %s", path, keys[i], s ? "not a positive number" : "missing");
    }
    attn_vit_config c = attn_vit_config_default(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
    c.in_channels = v[7];
    float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
    int rc;
    if (attn_vit_create(&c, &r->vit_own) != ATTN_OK ||
        attn_checkpoint_load(path, attn_vit_params(r->vit_own), NULL, NULL, NULL) != ATTN_OK)
        return cli_fail("viz: %s: %s", path, attn_last_error());
    const attn_vit_config *vc = attn_vit_get_config(r->vit_own);
    if ((mean_s && (rc = image_in_parse("viz", "--mean", mean_s, (int)vc->in_channels, mean))) ||
        (std_s && (rc = image_in_parse("viz", "--std", std_s, (int)vc->in_channels, std))) ||
        (rc = image_in_load("viz", image, vc, mean, std, &r->img)))
        return rc;
    if (attn_capture_create(&r->cap) != ATTN_OK || attn_capture_add(r->cap, pattern, 0, 0, 0, 0) != ATTN_OK)
        return cli_fail("viz: %s", attn_last_error());
    attn_vit_args a;
    memset(&a, 0, sizeof a);
    a.batch = 1;
    a.images = r->img.x;
    a.capture = r->cap;
    const size_t wb = attn_vit_workspace_size(r->vit_own, &a);
    float *logits = malloc(sizeof(float) * (size_t)vc->num_classes);
    void *ws = malloc(wb ? wb : 1);
    if (!logits || !ws)
        rc = cli_fail("viz: out of memory");
    else if (attn_vit_forward(r->vit_own, &a, logits, NULL, 0, ws, wb) != ATTN_OK)
        rc = cli_fail("viz: %s: %s", path, attn_last_error());
    else if ((rc = vit_labels(r, r->vit_own, logits)) >= 0) {
        snprintf(r->model, sizeof r->model,
                 "ViT %s (%lld layers, %lld heads, hidden %lld, %lldx%lld patches of %lld px) on %s (predicted "
                 "class %d)",
                 path, (long long)vc->num_layers, (long long)vc->num_heads, (long long)vc->hidden_dim,
                 (long long)(vc->image_h / vc->patch_size), (long long)(vc->image_w / vc->patch_size),
                 (long long)vc->patch_size, image, rc);
        rc = 0;
    } else
        rc = 1;
    free(logits);
    free(ws);
    return rc;
}

/* --text (bytes) or --tokens (ids) for a GPT of that shape into *tok[*n] (malloc'ed). 0, or 1. */
static int gpt_input(const char *text, const char *tokens_s, const train_gpt_shape *shape, int64_t **tok, int64_t *n) {
    if (text) {
        *n = (int64_t)strlen(text);
        if (*n < 1) return cli_fail("viz: --text is empty");
        if (*n > shape->context)
            return cli_fail("viz: --text has %lld bytes, more than the model's context of %lld", (long long)*n,
                            (long long)shape->context);
        if (!(*tok = malloc(sizeof(int64_t) * (size_t)*n))) return cli_fail("viz: out of memory");
        for (int64_t i = 0; i < *n; i++) (*tok)[i] = (unsigned char)text[i];
        return 0;
    }
    int64_t *t = *tok = malloc(sizeof(int64_t) * (strlen(tokens_s) / 2 + 1));
    if (!t) return cli_fail("viz: out of memory");
    const char *p = tokens_s;
    char item[32];
    while (1) {
        const char *e = strchr(p, ',');
        size_t il = e ? (size_t)(e - p) : strlen(p);
        if (il >= sizeof item) il = sizeof item - 1;
        memcpy(item, p, il);
        item[il] = '\0';
        if (cli_parse_i64(item, 0, INT64_MAX, &t[*n])) return cli_fail("viz: --tokens: '%s' is not a token id", item);
        if (t[*n] >= shape->vocab)
            return cli_fail("viz: --tokens: token %lld at position %lld is outside the vocabulary [0, %lld)",
                            (long long)t[*n], (long long)*n, (long long)shape->vocab);
        ++*n;
        if (!e) break;
        p = e + 1;
    }
    if (*n > shape->context)
        return cli_fail("viz: --tokens has %lld ids, more than the model's context of %lld", (long long)*n,
                        (long long)shape->context);
    return 0;
}

/* The labels of tok[n]: bytes for a byte-level model, else the ids. 0, or 1. */
static int gpt_labels(viz_run *r, const int64_t *tok, int64_t n, int64_t vocab) {
    if (!(r->tok_labels = calloc((size_t)n, sizeof(char *)))) return cli_fail("viz: out of memory");
    r->ntok = n;
    for (int64_t i = 0; i < n; i++) {
        char b[16];
        if (vocab == TRAIN_BYTE_VOCAB)
            byte_label((int)tok[i], b, sizeof b);
        else
            snprintf(b, sizeof b, "%lld", (long long)tok[i]);
        if (!(r->tok_labels[i] = dup(b))) return cli_fail("viz: out of memory");
    }
    return 0;
}

/* GPT checkpoint on text or tokens. Returns 0 or an exit code (the message printed). */
static int run_gpt(viz_run *r, const char *path, const char *text, const char *tokens_s, const char *pattern) {
    train_gpt_shape shape;
    if (gpt_open_shape("viz", path, &shape)) return 1;
    int64_t n = 0, *tok = NULL;
    float *logits = NULL;
    void *ws = NULL;
    int rc = gpt_input(text, tokens_s, &shape, &tok, &n);
    if (!rc) rc = gpt_open_model("viz", path, &shape, &r->gpt);
    if (!rc && (attn_capture_create(&r->cap) != ATTN_OK || attn_capture_add(r->cap, pattern, 0, 0, 0, 0) != ATTN_OK))
        rc = cli_fail("viz: %s", attn_last_error());
    if (rc) goto done;
    attn_gpt_args a = {.batch = 1, .n = n, .tokens = tok, .capture = r->cap};
    const size_t wb = attn_gpt_workspace_size(r->gpt, &a);
    logits = malloc(sizeof(float) * (size_t)(n * shape.vocab));
    ws = malloc(wb ? wb : 1);
    if (!logits || !ws) {
        rc = cli_fail("viz: out of memory");
        goto done;
    }
    if ((rc = gpt_labels(r, tok, n, shape.vocab))) goto done;
    if (attn_gpt_forward(r->gpt, &a, logits, NULL, 0, ws, wb) != ATTN_OK) {
        rc = cli_fail("viz: %s: %s", path, attn_last_error());
        goto done;
    }
    snprintf(r->model, sizeof r->model, "GPT %s (%lld layers, %lld heads, d_model %lld, %s attention) on %lld %s", path,
             (long long)shape.layers, (long long)shape.heads, (long long)shape.d_model,
             attn_attention_kind_name(shape.attention.kind), (long long)n, text ? "bytes of text" : "tokens");
done:
    free(tok);
    free(logits);
    free(ws);
    return rc;
}

/* An `attn run` model on a safetensors of inputs, or a vision_transformer on an image. */
static int run_model(viz_run *r, const char *config, const char *weights, const char *wprefix, const char *inputs,
                     const char *image, const char *mean_s, const char *std_s, const char *pattern) {
    model_in *mi = &r->run;
    int rc = model_open(mi, "viz", config, weights, wprefix);
    if (!rc) rc = model_bind(mi, "viz", config, inputs, image, mean_s, std_s, "Vision Transformers");
    if (rc) return rc;
    if (attn_capture_create(&r->cap) || attn_capture_add(r->cap, pattern, 0, 0, 0, 0))
        return cli_fail("viz: %s", attn_last_error());
    if (attn_model_forward(mi->m, 0, 0, 0, 0, r->cap)) return cli_fail("viz: %s: %s", config, attn_last_error());
    const attn_vit *vit = attn_model_vit(mi->m);
    int pred = -1;
    if (vit && (pred = vit_labels(r, vit, attn_model_output(mi->m, NULL, NULL))) < 0) return 1;
    int mn = snprintf(r->model, sizeof r->model, "%s (%s, weights %s) on %s", config, attn_model_name(mi->m), weights,
                      image ? image : inputs);
    if (image && pred >= 0 && mn > 0 && (size_t)mn < sizeof r->model)
        snprintf(r->model + mn, sizeof r->model - (size_t)mn, " (predicted class %d)", pred);
    return 0;
}

/* Numeric labels "0" .. "n-1", shared by every map of that length. */
typedef struct label_cache {
    int64_t n[16];
    char **labels[16];
    int count;
} label_cache;

static const char *const *numeric_labels(label_cache *lc, int64_t n) {
    for (int i = 0; i < lc->count; i++)
        if (lc->n[i] == n) return (const char *const *)lc->labels[i];
    if (lc->count == 16) return NULL;
    char **l = calloc((size_t)n, sizeof(char *));
    if (!l) return NULL;
    lc->n[lc->count] = n;
    lc->labels[lc->count++] = l;
    for (int64_t i = 0; i < n; i++) {
        char b[24];
        snprintf(b, sizeof b, "%lld", (long long)i);
        if (!(l[i] = dup(b))) return NULL;
    }
    return (const char *const *)l;
}

/* Window [p0, p0 + len) of n positions starting near start. */
static void window(int64_t n, int64_t start, int64_t max, int64_t *p0, int64_t *len) {
    int64_t s = start;
    if (s > n - max) s = n - max;
    if (s < 0) s = 0;
    *p0 = s;
    *len = n - s < max ? n - s : max;
}

/* The rollout's CLS row (roll: [n, n] of one batch element) over the image, to path (.png: PNG
 * when the build reads PNG, else a .ppm next to it). 0, or 1 (printed). */
static int write_overlay(const viz_run *r, const float *roll, const char *path, int64_t size, double alpha,
                         int nearest) {
    const attn_vit_config *c = r->vit;
    const int64_t gh = c->image_h / c->patch_size, gw = c->image_w / c->patch_size;
    const attn_image *pic = r->run.m ? &r->run.img.img : &r->img.img; /* a --config model's, or a checkpoint's */
    const int64_t iw = pic->width, ih = pic->height, side = iw > ih ? iw : ih;
    int64_t ow, oh;
    if (size) {
        ow = iw * size / side, oh = ih * size / side;
        ow = ow < 1 ? 1 : ow, oh = oh < 1 ? 1 : oh;
    } else {
        const int64_t k = side >= 256 ? 1 : (256 + side - 1) / side;
        ow = iw * k, oh = ih * k;
    }
    attn_image out;
    /* row 0 (the class token), columns T .. T + gh gw - 1: the patches in row-major grid order */
    if (attn_viz_overlay(pic, roll + r->vit_t, gh, gw, oh, ow, alpha, nearest, &out))
        return cli_fail("viz: --overlay: %s", attn_last_error());
    char file[4096];
    const size_t pl = strlen(path);
    int fallback = 0;
    if (pl >= 4 && !strcasecmp(path + pl - 4, ".png") && !attn_image_png_supported()) {
        snprintf(file, sizeof file, "%.*s.ppm", (int)(pl - 4), path);
        fallback = 1;
    } else
        snprintf(file, sizeof file, "%s", path);
    const attn_status st = attn_image_save(file, &out);
    attn_image_free(&out);
    if (st) {
        const char *msg = attn_last_error();
        if (!strncmp(msg, "attn_image_save: ", 17)) msg += 17;
        return cli_fail("viz: --overlay: %s", msg);
    }
    printf("wrote %s (%lld x %lld%s)\n", file, (long long)ow, (long long)oh,
           fallback ? "; PPM: this build has no libpng for PNG" : "");
    return 0;
}

/* The command line. */
typedef struct viz_opts {
    const char *checkpoint, *config, *weights, *text, *tokens, *inputs;
    const char *pattern, *head_s, *title, *svg, *html, *csv;
    const char *image, *mean_s, *std_s, *overlay, *wprefix;
    const char *model; /* --model DIR (viz_model.c) */
    int64_t layers_sel[VIZ_MAX_LIST], overlay_size;
    int nlayers_sel, rollout, nearest, force;
    double overlay_alpha;
    int64_t batch_index, max_tokens, start, threads;
    /* --head */
    int heads_sel[VIZ_MAX_LIST], nheads_sel, want_mean, want_all;
} viz_opts;

/* The combinations of options that do not go together. 0, or 2 (printed). */
static int check_opts(const viz_opts *o, int alpha_seen) {
    const char *const others[] = {o->checkpoint, o->config, o->weights, o->wprefix,
                                  o->tokens,     o->inputs, o->mean_s,  o->std_s};
    static const char *const names[] = {"--checkpoint", "--config", "--weights", "--weights-prefix",
                                        "--tokens",     "--inputs", "--mean",    "--std"};
    int mrc = o->model ? viz_model_check(others, names, 8, o->text, o->image) : 0;
    if (mrc) return mrc;
    if (!o->model && !o->checkpoint && !o->config)
        return cli_usage_error(
            "viz: missing the model: --checkpoint, or --config and --weights (try 'attn viz --help')");
    if (o->checkpoint && (o->config || o->weights))
        return cli_usage_error("viz: --checkpoint does not go with --config / --weights");
    if (o->config && !o->weights) return cli_usage_error("viz: --config needs --weights");
    if (!o->config && o->weights) return cli_usage_error("viz: --weights needs --config");
    if (o->wprefix && !o->config) return cli_usage_error("viz: --weights-prefix goes with --config / --weights");
    if ((o->mean_s || o->std_s) && !o->image) return cli_usage_error("viz: --mean / --std go with --image");
    if ((o->overlay_size || o->nearest || alpha_seen) && !o->overlay)
        return cli_usage_error("viz: --overlay-size / --overlay-alpha / --nearest go with --overlay");
    if (o->overlay && !o->image) return cli_usage_error("viz: --overlay needs --image (a Vision Transformer's input)");
    if (o->image && (o->text || o->tokens || o->inputs))
        return cli_usage_error("viz: --image does not go with --text / --tokens / --inputs");
    if (o->checkpoint && !o->image) {
        if (o->inputs)
            return cli_usage_error("viz: --inputs is for --config models; a GPT checkpoint takes --text or --tokens");
        if (!o->text == !o->tokens)
            return cli_usage_error(
                "viz: a GPT checkpoint needs one of --text and --tokens (a ViT checkpoint: --image)");
    } else if (!o->checkpoint && !o->model) {
        if (o->text || o->tokens)
            return cli_usage_error("viz: --text / --tokens are for GPT checkpoints; a --config model takes --inputs");
        if (!o->inputs && !o->image)
            return cli_usage_error("viz: missing --inputs (or --image) for the --config model");
    }
    if (!o->svg && !o->html && !o->csv && !o->overlay)
        return cli_usage_error("viz: nothing to write: give --svg, --html, --csv and/or --overlay");
    return 0;
}

/* --head: indices, mean, all. 0, or 2 (printed). */
static int parse_heads(viz_opts *o) {
    if (!strcmp(o->head_s, "mean")) {
        o->want_mean = 1;
        return 0;
    }
    if (!strcmp(o->head_s, "all")) {
        o->want_all = o->want_mean = 1;
        return 0;
    }
    const char *p = o->head_s;
    while (1) {
        const char *e = strchr(p, ',');
        char item[32];
        size_t il = e ? (size_t)(e - p) : strlen(p);
        if (il >= sizeof item) il = sizeof item - 1;
        memcpy(item, p, il);
        item[il] = '\0';
        int64_t v;
        if (!strcmp(item, "mean"))
            o->want_mean = 1;
        else if (cli_parse_i64(item, 0, 1 << 20, &v) || o->nheads_sel == VIZ_MAX_LIST)
            return cli_usage_error("viz: --head: '%s' is not a head index, 'mean' or 'all'", item);
        else
            o->heads_sel[o->nheads_sel++] = (int)v;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* Parse and check the command line into o: 0, CLI_HELP, or the usage error's exit code. */
static int parse_opts(viz_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->pattern = "*", o->head_s = "all", o->overlay_alpha = 0.5, o->max_tokens = 64;
    cli_opt opts[] = {
        CLI_STRING_NONEMPTY("--checkpoint", &o->checkpoint),
        CLI_STRING_NONEMPTY("--model", &o->model),
        CLI_STRING_NONEMPTY("--config", &o->config),
        CLI_STRING_NONEMPTY("--weights", &o->weights),
        CLI_STRING("--text", &o->text),
        CLI_STRING_NONEMPTY("--tokens", &o->tokens),
        CLI_STRING_NONEMPTY("--inputs", &o->inputs),
        CLI_STRING_NONEMPTY("--weights-prefix", &o->wprefix),
        CLI_STRING_NONEMPTY("--image", &o->image),
        CLI_STRING_NONEMPTY("--mean", &o->mean_s),
        CLI_STRING_NONEMPTY("--std", &o->std_s),
        CLI_STRING_NONEMPTY("--overlay", &o->overlay),
        CLI_INT("--overlay-size", &o->overlay_size, 1, 4096),
        CLI_DOUBLE("--overlay-alpha", &o->overlay_alpha, 0, 1),
        CLI_FLAG("--nearest", &o->nearest),
        CLI_STRING_NONEMPTY("--attention", &o->pattern),
        CLI_LIST("--layer", o->layers_sel, &o->nlayers_sel, VIZ_MAX_LIST, 0, 1 << 20),
        CLI_STRING_NONEMPTY("--head", &o->head_s),
        CLI_FLAG("--rollout", &o->rollout),
        CLI_FLAG("--force", &o->force),
        CLI_INT("--batch-index", &o->batch_index, 0, 1 << 30),
        CLI_INT("--max-tokens", &o->max_tokens, 2, 4096),
        CLI_INT("--start", &o->start, 0, 1 << 30),
        CLI_STRING("--title", &o->title),
        CLI_STRING_NONEMPTY("--svg", &o->svg),
        CLI_STRING_NONEMPTY("--html", &o->html),
        CLI_STRING_NONEMPTY("--csv", &o->csv),
        CLI_INT("--threads", &o->threads, 1, 4096),
        CLI_END,
    };
    int rc = cli_parse("viz", opts, argc, argv, NULL, 0);
    if (!rc) rc = check_opts(o, cli_seen(opts, "--overlay-alpha"));
    if (!rc) rc = parse_heads(o);
    return rc;
}

/* Run the model of the command line on its input into r. 0, or 1 (printed). */
static int open_and_run(viz_run *r, const viz_opts *o) {
    if (o->model) {
        const int mrc = viz_model_run(&r->pre, o->model, o->text, o->image, o->pattern, &r->cap, &r->ntok,
                                      &r->tok_labels, r->model, sizeof r->model, &r->img.img);
        if (!mrc && o->image) r->vit = &r->pre.vit, r->vit_t = 1;
        return mrc;
    }
    if (!o->checkpoint)
        return run_model(r, o->config, o->weights, o->wprefix, o->inputs, o->image, o->mean_s, o->std_s, o->pattern);
    /* a ViT checkpoint says so in its metadata (model = vit); anything else is read as a GPT's */
    attn_safetensors *meta = NULL;
    if (attn_safetensors_open_file(o->checkpoint, &meta) != ATTN_OK) return cli_fail("viz: %s", attn_last_error());
    const char *kind = attn_safetensors_metadata_find(meta, "model");
    const int is_vit = kind && !strcmp(kind, "vit");
    int rc;
    if (is_vit && !o->image)
        rc = cli_fail("viz: %s is a Vision Transformer checkpoint (`attn train vit`): give --image", o->checkpoint);
    else if (!is_vit && o->image)
        rc = cli_fail("viz: --image is for Vision Transformers; %s is not a checkpoint of `attn train vit`",
                      o->checkpoint);
    else
        rc = is_vit ? run_vit(r, o->checkpoint, meta, o->image, o->mean_s, o->std_s, o->pattern)
                    : run_gpt(r, o->checkpoint, o->text, o->tokens, o->pattern);
    attn_safetensors_close(meta);
    return rc;
}

/* The capture's records (*recs, *count), the layers to show (all when none was chosen) and the
 * rollout (*roll, when asked for or needed by the overlay), checked against the options. 0, or 1
 * (printed). */
static int take_records(const viz_run *r, viz_opts *o, attn_capture_record **recs, size_t *count, float **roll) {
    const size_t n = *count = attn_capture_count(r->cap);
    if (n == 0)
        return cli_fail("viz: the model recorded no attention weights (no attention module matches '%s')", o->pattern);
    attn_capture_record *rs = *recs = calloc(n, sizeof *rs);
    if (!rs) return cli_fail("viz: out of memory");
    for (size_t i = 0; i < n; i++) attn_capture_get(r->cap, i, &rs[i]);
    if (o->batch_index >= rs[0].batch)
        return cli_fail("viz: --batch-index %lld is out of range: the input's batch is %lld", (long long)o->batch_index,
                        (long long)rs[0].batch);
    if (!o->nlayers_sel)
        for (size_t i = 0; i < n && o->nlayers_sel < VIZ_MAX_LIST; i++) o->layers_sel[o->nlayers_sel++] = (int64_t)i;
    for (int i = 0; i < o->nlayers_sel; i++)
        if (o->layers_sel[i] >= (int64_t)n)
            return cli_fail("viz: --layer %lld is out of range: the model has %zu attention layers (0..%zu: %s%s)",
                            (long long)o->layers_sel[i], n, n - 1, rs[0].module, n > 1 ? ", ..." : "");
    for (int i = 0; i < o->nlayers_sel; i++)
        for (int j = 0; j < o->nheads_sel; j++)
            if (o->heads_sel[j] >= rs[o->layers_sel[i]].num_heads)
                return cli_fail("viz: --head %d is out of range: %s has %lld heads", o->heads_sel[j],
                                rs[o->layers_sel[i]].module, (long long)rs[o->layers_sel[i]].num_heads);
    if (!o->rollout && !o->overlay) return 0;
    if (!(*roll = malloc(sizeof(float) * (size_t)(rs[0].batch * rs[0].nk * rs[0].nk))))
        return cli_fail("viz: out of memory");
    if (attn_viz_rollout_records(rs, n, *roll)) return cli_fail("viz: --rollout: %s", attn_last_error());
    return 0;
}

/* Map m's weights: its window of the head, the heads' mean, or the rollout (base: the batch
 * element's weights [H, nq, nk], or the rollout's rows). */
static void fill_map(viz_map *m, const float *base, int is_roll, int64_t H, int64_t nq, int64_t nk) {
    for (int64_t i = 0; i < m->rows; i++)
        for (int64_t j = 0; j < m->cols; j++) {
            const size_t at = (size_t)((m->r0 + i) * nk + m->c0 + j);
            double v;
            if (is_roll)
                v = base[at];
            else if (m->head == VIZ_HEAD_MEAN) {
                v = 0;
                for (int64_t h = 0; h < H; h++) v += base[(size_t)(h * nq * nk) + at];
                v /= (double)H;
            } else
                v = base[(size_t)(m->head * nq * nk) + at];
            m->w[i * m->cols + j] = (float)v;
        }
}

/* The maps of layer li of the selection (li == nlayers_sel: the rollout) into set. 0, or 1. */
static int layer_maps(viz_set *set, label_cache *lc, const viz_run *r, const viz_opts *o,
                      const attn_capture_record *recs, const float *roll, int li) {
    const int is_roll = li == o->nlayers_sel;
    const attn_capture_record *rec = is_roll ? &recs[0] : &recs[o->layers_sel[li]];
    /* a ViT's rollout: only the classification token's row */
    const int64_t nq = is_roll && r->vit ? 1 : rec->nq, nk = rec->nk, H = rec->heads;
    const char *const *ql =
        nq == r->ntok || (is_roll && r->vit) ? (const char *const *)r->tok_labels : numeric_labels(lc, nq);
    const char *const *kl = nk == r->ntok ? (const char *const *)r->tok_labels : numeric_labels(lc, nk);
    if (!ql || !kl) return cli_fail("viz: out of memory");
    int64_t r0, rows, c0, cols;
    window(nq, o->start, o->max_tokens, &r0, &rows);
    window(nk, o->start, o->max_tokens, &c0, &cols);
    const int want_mean = o->want_mean, nh = is_roll ? 1 : want_mean + (o->want_all ? (int)H : o->nheads_sel);
    for (int k = 0; k < nh; k++) {
        viz_map *m = &set->maps[set->count++];
        m->layer = is_roll ? -1 : (int)o->layers_sel[li];
        m->module = is_roll ? "rollout" : rec->module;
        m->head = is_roll                 ? VIZ_HEAD_ROLLOUT
                  : (want_mean && k == 0) ? VIZ_HEAD_MEAN
                  : o->want_all           ? k - want_mean
                                          : o->heads_sel[k - want_mean];
        m->num_heads = (int)H;
        m->nq = nq, m->nk = nk, m->r0 = r0, m->c0 = c0, m->rows = rows, m->cols = cols;
        m->qlabels = ql, m->klabels = kl;
        if (!(m->w = malloc(sizeof(float) * (size_t)(rows * cols)))) return cli_fail("viz: out of memory");
        const float *base = is_roll ? roll + (size_t)o->batch_index * (size_t)(rec->nq * nk)
                                    : rec->weights + (size_t)o->batch_index * (size_t)(H * nq * nk);
        fill_map(m, base, is_roll, H, nq, nk);
        if (rows < nq || cols < nk) {
            set->windowed = 1;
            snprintf(set->notice, sizeof set->notice,
                     "Long sequence: showing queries %lld..%lld of %lld and keys %lld..%lld of %lld (a window of "
                     "--max-tokens %lld from --start %lld; move it with --start).",
                     (long long)r0, (long long)(r0 + rows - 1), (long long)nq, (long long)c0,
                     (long long)(c0 + cols - 1), (long long)nk, (long long)o->max_tokens, (long long)o->start);
        }
    }
    return 0;
}

/* Every map of the selection into set (title and model description included). 0, or 1. */
static int build_maps(viz_set *set, label_cache *lc, const viz_run *r, const viz_opts *o,
                      const attn_capture_record *recs, const float *roll, char *deftitle, size_t deftitle_cap) {
    int cap_maps = o->rollout;
    for (int i = 0; i < o->nlayers_sel; i++)
        cap_maps += o->want_mean + (o->want_all ? (int)recs[o->layers_sel[i]].num_heads : o->nheads_sel);
    set->maps = calloc((size_t)cap_maps, sizeof(viz_map));
    if (!set->maps) return cli_fail("viz: out of memory");
    set->title = o->title;
    if (!set->title) {
        const char *base = o->checkpoint ? o->checkpoint
                           : o->config   ? o->config
                                         : o->model,
                   *slash = strrchr(base, '/');
        snprintf(deftitle, deftitle_cap, "attention of %s", slash ? slash + 1 : base);
        set->title = deftitle;
    }
    set->model = r->model;
    for (int li = 0; li < o->nlayers_sel + o->rollout; li++) {
        const int rc = layer_maps(set, lc, r, o, recs, roll, li);
        if (rc) return rc;
    }
    return 0;
}

/* Every output, checked before any work and again, with the files the SVG maps really go to, before
 * the first is written (safe_outs_check: never an input, no two the same, folders writable).
 * set NULL: the paths as given. 0, or 1 (printed). */
static int check_outputs(const viz_set *set, const viz_opts *o) {
    const char *const ins[5] = {o->checkpoint, o->config, o->weights, o->inputs, o->image};
    const int nsvg = set && o->svg ? set->count : o->svg ? 1 : 0;
    safe_out *outs = calloc((size_t)nsvg + 3, sizeof *outs);
    char(*files)[4096] = calloc((size_t)nsvg + 1, sizeof *files);
    if (!outs || !files) {
        free(outs), free(files);
        return cli_fail("viz: out of memory");
    }
    outs[0] = (safe_out){"--html", o->html, SAFE_KIND_HTML};
    outs[1] = (safe_out){"--csv", o->csv, SAFE_KIND_CSV};
    outs[2] = (safe_out){"--overlay", o->overlay, SAFE_KIND_IMAGE};
    for (int i = 0; i < nsvg; i++)
        outs[3 + i] =
            (safe_out){"--svg", set ? viz_svg_file(set, i, o->svg, files[i], sizeof files[i]) : o->svg, SAFE_KIND_SVG};
    const int rc = safe_outs_check("viz", outs, (size_t)nsvg + 3, ins, 5, o->force) ||
                   safe_outs_outside("viz", outs, (size_t)nsvg + 3, o->model, "--model");
    free(outs), free(files);
    return rc;
}

/* The chosen outputs (never over an input). 0, or 1 (printed). */
static int write_all(const viz_set *set, const viz_run *r, const viz_opts *o, const attn_capture_record *recs,
                     const float *roll) {
    const char *const ins[5] = {o->checkpoint, o->config, o->weights, o->inputs, o->image};
    safe_set_inputs(ins, 5, o->force);
    if (check_outputs(set, o)) return 1;
    char err[4200];
    if ((o->svg && viz_write_svgs(set, o->svg, stdout, err, sizeof err)) ||
        (o->html && viz_write_html(set, o->html, err, sizeof err)) ||
        (o->csv && viz_write_csv(set, o->csv, err, sizeof err)))
        return cli_fail("viz: %s", err);
    if (o->html) printf("wrote %s\n", o->html);
    if (o->csv) printf("wrote %s\n", o->csv);
    int rc;
    if (o->overlay && (rc = write_overlay(r, roll + (size_t)o->batch_index * (size_t)(recs[0].nk * recs[0].nk),
                                          o->overlay, o->overlay_size, o->overlay_alpha, o->nearest)))
        return rc;
    if (set->windowed) printf("note: %s\n", set->notice);
    return 0;
}

static void viz_run_free(viz_run *r) {
    for (int64_t i = 0; i < r->ntok; i++) free(r->tok_labels[i]);
    free(r->tok_labels);
    attn_capture_free(r->cap);
    attn_gpt_free(r->gpt);
    model_close(&r->run);
    attn_vit_free(r->vit_own);
    image_in_free(&r->img);
    viz_model_free(&r->pre);
}

int cmd_viz(int argc, char **argv) {
    viz_opts o;
    const int parsed = parse_opts(&o, argc, argv);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (o.threads > 0) attn_set_num_threads((int)o.threads);

    viz_run r;
    memset(&r, 0, sizeof r);
    label_cache lc;
    memset(&lc, 0, sizeof lc);
    viz_set set;
    memset(&set, 0, sizeof set);
    float *roll = NULL;
    attn_capture_record *recs = NULL;
    size_t count = 0;
    char deftitle[256];
    int rc = check_outputs(NULL, &o);
    if (!rc) rc = open_and_run(&r, &o);
    if (!rc && o.overlay && !r.vit) rc = cli_fail("viz: --overlay is for Vision Transformers");
    if (!rc) rc = take_records(&r, &o, &recs, &count, &roll);
    if (!rc) rc = build_maps(&set, &lc, &r, &o, recs, roll, deftitle, sizeof deftitle);
    if (!rc) rc = write_all(&set, &r, &o, recs, roll);
    for (int i = 0; i < set.count; i++) free(set.maps[i].w);
    free(set.maps);
    free(recs);
    free(roll);
    for (int i = 0; i < lc.count; i++) {
        for (int64_t j = 0; j < lc.n[i]; j++) free(lc.labels[i][j]);
        free(lc.labels[i]);
    }
    viz_run_free(&r);
    return rc;
}
