/* attn viz: a model's attention weights on one input as SVG heat maps, an HTML page and CSV.
 *
 * Input kinds (each runs one forward with an attention capture of every head and row of the
 * modules matching --attention, and gives token labels):
 *   - a checkpoint of `attn train gpt` on --text (bytes) or --tokens (ids);
 *   - an `attn run` model (--config, --weights) on --inputs (a safetensors of forward arguments).
 * A Vision Transformer (an image input, the rollout overlaid on it) would be one more kind and one
 * more writer (viz_out.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/viz.h"
#include "cli.h"
#include "cli_opts.h"
#include "io/json.h"
#include "nn/nn_internal.h"
#include "nn/nn_run.h"
#include "safe_io.h"
#include "train_common.h"
#include "viz_out.h"

#define VIZ_MAX_LIST 256

static void usage(FILE *f) {
    fprintf(f,
            "usage: attn viz MODEL INPUT [options] (--svg FILE | --html FILE | --csv FILE)...\n\n"
            "Runs one forward of a model on one input, records the attention weights of every head of\n"
            "its attention modules, and writes the chosen layers and heads as pictures and numbers.\n\n"
            "MODEL (one of):\n"
            "  --checkpoint FILE    a checkpoint of `attn train gpt`\n"
            "  --config M.json --weights W.safetensors   an `attn run` model (see attn run --help)\n"
            "INPUT:\n"
            "  --text TEXT          text for a GPT checkpoint (bytes; at most its context)\n"
            "  --tokens I,J,...     token ids for a GPT checkpoint\n"
            "  --inputs IN.safetensors  the forward arguments of an `attn run` model (as attn run)\n"
            "options:\n"
            "  --attention PATTERN  the attention modules to record ('*' wildcards; default '*'); layers\n"
            "                       are numbered in the order these modules run\n"
            "  --layer L[,L...]     layers to show (default: all)\n"
            "  --head H[,H...]|mean|all  heads to show: indices, their mean, or the mean and every head\n"
            "                       (default all)\n"
            "  --rollout            also the attention rollout through all recorded layers (Abnar &\n"
            "                       Zuidema 2020: heads averaged, identity added, rows renormalised,\n"
            "                       multiplied through the layers; square self-attentions only)\n"
            "  --batch-index B      the batch element to show (default 0)\n"
            "  --max-tokens M       longer sequences are shown as a window of M queries and M keys\n"
            "                       (default 64); the outputs say so\n"
            "  --start S            the window's first position (default 0)\n"
            "  --title TEXT         title of the maps and the page (default: from the model)\n"
            "  --svg FILE           one SVG heat map per layer and head (several: FILE-L0-h1.svg, ...)\n"
            "  --html FILE          one self-contained page: layer / head selector, heat map with hover\n"
            "                       values, head view (open it with #selftest to check it)\n"
            "  --csv FILE           map,module,layer,head,query,key,query_label,key_label,weight\n"
            "  --force              replace an existing output of another kind (never an input)\n"
            "  --threads N          threads (default: all)\n\n"
            "Bad input (unreadable files, a layer or head out of range, tokens outside the vocabulary,\n"
            "a model whose attention has no weights) is reported on one line and exits 1; usage errors\n"
            "exit 2.\n");
}

/* The whole file, NUL-terminated (safe_io.h: regular files only, at most 16 MB). */
static char *slurp(const char *path, size_t *len) { return safe_read(path, "config", ATTN_IO_CAP_CONFIG, len); }

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
    int64_t ntok;       /* token labels for sequences of this length (0: none) */
    char **tok_labels;  /* [ntok] */
    char model[512];    /* description */
    /* owned by the kind */
    attn_gpt *gpt;
    nn_model *nn;
} viz_run;

/* GPT checkpoint on text or tokens. Returns 0 or an exit code (the message printed). */
static int run_gpt(viz_run *r, const char *path, const char *text, const char *tokens_s, const char *pattern) {
    attn_safetensors *st = NULL;
    if (attn_safetensors_open_file(path, &st) != ATTN_OK) return cli_fail("viz: %s", attn_last_error());
    train_gpt_shape shape;
    char err[256];
    int bad = train_shape_from_meta(st, &shape, err, sizeof err);
    attn_safetensors_close(st);
    if (bad) return cli_fail("viz: %s: %s", path, err);
    int64_t n = 0, *tok = NULL;
    if (text) {
        n = (int64_t)strlen(text);
        if (n < 1) return cli_fail("viz: --text is empty");
        if (n > shape.context)
            return cli_fail("viz: --text has %lld bytes, more than the model's context of %lld", (long long)n,
                            (long long)shape.context);
        tok = malloc(sizeof(int64_t) * (size_t)n);
        if (!tok) return cli_fail("viz: out of memory");
        for (int64_t i = 0; i < n; i++) tok[i] = (unsigned char)text[i];
    } else {
        size_t len = strlen(tokens_s);
        tok = malloc(sizeof(int64_t) * (len / 2 + 1));
        if (!tok) return cli_fail("viz: out of memory");
        const char *p = tokens_s;
        char item[32];
        while (1) {
            const char *e = strchr(p, ',');
            size_t il = e ? (size_t)(e - p) : strlen(p);
            if (il >= sizeof item) il = sizeof item - 1;
            memcpy(item, p, il);
            item[il] = '\0';
            if (cli_parse_i64(item, 0, INT64_MAX, &tok[n])) {
                free(tok);
                return cli_fail("viz: --tokens: '%s' is not a token id", item);
            }
            if (tok[n] >= shape.vocab) {
                const long long bad_id = (long long)tok[n];
                free(tok);
                return cli_fail("viz: --tokens: token %lld at position %lld is outside the vocabulary [0, %lld)",
                                bad_id, (long long)n, (long long)shape.vocab);
            }
            n++;
            if (!e) break;
            p = e + 1;
        }
        if (n > shape.context) {
            free(tok);
            return cli_fail("viz: --tokens has %lld ids, more than the model's context of %lld", (long long)n,
                            (long long)shape.context);
        }
    }
    attn_gpt_config cfg = train_gpt_config(&shape);
    int rc = 0;
    float *logits = NULL;
    void *ws = NULL;
    if (attn_gpt_create(&cfg, &r->gpt) != ATTN_OK ||
        attn_checkpoint_load(path, attn_gpt_params(r->gpt), NULL, NULL, NULL) != ATTN_OK ||
        attn_capture_create(&r->cap) != ATTN_OK || attn_capture_add(r->cap, pattern, 0, 0, 0, 0) != ATTN_OK) {
        rc = cli_fail("viz: %s", attn_last_error());
        goto done;
    }
    attn_gpt_args a = {.batch = 1, .n = n, .tokens = tok, .capture = r->cap};
    const size_t wb = attn_gpt_workspace_size(r->gpt, &a);
    logits = malloc(sizeof(float) * (size_t)(n * shape.vocab));
    ws = malloc(wb ? wb : 1);
    r->tok_labels = calloc((size_t)n, sizeof(char *));
    if (!logits || !ws || !r->tok_labels) {
        rc = cli_fail("viz: out of memory");
        goto done;
    }
    r->ntok = n;
    for (int64_t i = 0; i < n; i++) {
        char b[16];
        if (shape.vocab == TRAIN_BYTE_VOCAB)
            byte_label((int)tok[i], b, sizeof b);
        else
            snprintf(b, sizeof b, "%lld", (long long)tok[i]);
        if (!(r->tok_labels[i] = dup(b))) {
            rc = cli_fail("viz: out of memory");
            goto done;
        }
    }
    if (attn_gpt_forward(r->gpt, &a, logits, NULL, 0, ws, wb) != ATTN_OK) {
        rc = cli_fail("viz: %s: %s", path, attn_last_error());
        goto done;
    }
    snprintf(r->model, sizeof r->model, "GPT %s (%lld layers, %lld heads, d_model %lld, %s attention) on %lld %s",
             path, (long long)shape.layers, (long long)shape.heads, (long long)shape.d_model,
             attn_attention_kind_name(shape.attention.kind), (long long)n, text ? "bytes of text" : "tokens");
done:
    free(tok);
    free(logits);
    free(ws);
    return rc;
}

/* The library's message, without a "safetensors: PATH: " prefix that repeats the file name. */
static const char *msg_for(const char *path) {
    const char *msg = attn_last_error();
    const size_t pl = strlen(path);
    if (!strncmp(msg, "safetensors: ", 13) && !strncmp(msg + 13, path, pl) && !strncmp(msg + 13 + pl, ": ", 2))
        msg += 13 + pl + 2;
    return msg;
}

/* An `attn run` model on a safetensors of inputs. */
static int run_model(viz_run *r, const char *config, const char *weights, const char *inputs, const char *pattern) {
    int rc = 0;
    size_t len = 0;
    char *text = NULL;
    attn_json_doc *doc = NULL;
    attn_safetensors *wst = NULL, *ist = NULL;
    attn_json_error jerr;
    const attn_json_options jopt = {0, 1}; /* a repeated key is an error */
    if (!(text = slurp(config, &len))) {
        rc = cli_fail("viz: %s", attn_last_error());
        goto done;
    }
    if (attn_json_parse(text, len, &jopt, &doc, &jerr) != ATTN_JSON_OK) {
        rc = cli_fail("viz: %s: %s", config, jerr.message);
        goto done;
    }
    if (attn_nn_model_create(attn_json_root(doc), &r->nn)) {
        rc = cli_fail("viz: %s: %s", config, attn_last_error());
        goto done;
    }
    if (attn_safetensors_open_file(weights, &wst) ||
        attn_params_load_mapped(attn_nn_model_params(r->nn), wst, attn_nn_model_name_map(r->nn), NULL, 1)) {
        rc = cli_fail("viz: %s: %s", weights, msg_for(weights));
        goto done;
    }
    if (attn_safetensors_open_file(inputs, &ist) || attn_nn_model_bind(r->nn, ist, NULL, 1)) {
        rc = cli_fail("viz: %s: %s", inputs, msg_for(inputs));
        goto done;
    }
    if (attn_capture_create(&r->cap) || attn_capture_add(r->cap, pattern, 0, 0, 0, 0)) {
        rc = cli_fail("viz: %s", attn_last_error());
        goto done;
    }
    attn_capture *prev = attn_nn_capture_set_ambient(r->cap);
    attn_status st = attn_nn_model_forward(r->nn, 0, 0, 0, 0);
    attn_nn_capture_set_ambient(prev);
    if (st) {
        rc = cli_fail("viz: %s: %s", config, attn_last_error());
        goto done;
    }
    snprintf(r->model, sizeof r->model, "%s (%s, weights %s) on %s", config, attn_nn_model_name(r->nn), weights,
             inputs);
done:
    attn_safetensors_close(wst);
    attn_safetensors_close(ist);
    attn_json_free(doc);
    free(text);
    return rc;
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

int cmd_viz(int argc, char **argv) {
    const char *checkpoint = NULL, *config = NULL, *weights = NULL, *text = NULL, *tokens = NULL, *inputs = NULL;
    const char *pattern = "*", *head_s = "all", *title = NULL, *svg = NULL, *html = NULL, *csv = NULL;
    int64_t layers_sel[VIZ_MAX_LIST];
    int nlayers_sel = 0, rollout = 0, force = 0;
    int64_t batch_index = 0, max_tokens = 64, start = 0, threads = 0;
    cli_opt opts[] = {
        CLI_STRING_NONEMPTY("--checkpoint", &checkpoint),
        CLI_STRING_NONEMPTY("--config", &config),
        CLI_STRING_NONEMPTY("--weights", &weights),
        CLI_STRING("--text", &text),
        CLI_STRING_NONEMPTY("--tokens", &tokens),
        CLI_STRING_NONEMPTY("--inputs", &inputs),
        CLI_STRING_NONEMPTY("--attention", &pattern),
        CLI_LIST("--layer", layers_sel, &nlayers_sel, VIZ_MAX_LIST, 0, 1 << 20),
        CLI_STRING_NONEMPTY("--head", &head_s),
        CLI_FLAG("--rollout", &rollout),
        CLI_FLAG("--force", &force),
        CLI_INT("--batch-index", &batch_index, 0, 1 << 30),
        CLI_INT("--max-tokens", &max_tokens, 2, 4096),
        CLI_INT("--start", &start, 0, 1 << 30),
        CLI_STRING("--title", &title),
        CLI_STRING_NONEMPTY("--svg", &svg),
        CLI_STRING_NONEMPTY("--html", &html),
        CLI_STRING_NONEMPTY("--csv", &csv),
        CLI_INT("--threads", &threads, 1, 4096),
        CLI_END,
    };
    int parsed = cli_parse("viz", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (!checkpoint && !config) return cli_usage_error("viz: missing the model: --checkpoint, or --config and --weights (try 'attn viz --help')");
    if (checkpoint && (config || weights)) return cli_usage_error("viz: --checkpoint does not go with --config / --weights");
    if (config && !weights) return cli_usage_error("viz: --config needs --weights");
    if (!config && weights) return cli_usage_error("viz: --weights needs --config");
    if (checkpoint) {
        if (inputs) return cli_usage_error("viz: --inputs is for --config models; a GPT checkpoint takes --text or --tokens");
        if (!text == !tokens) return cli_usage_error("viz: a GPT checkpoint needs one of --text and --tokens");
    } else {
        if (text || tokens) return cli_usage_error("viz: --text / --tokens are for GPT checkpoints; a --config model takes --inputs");
        if (!inputs) return cli_usage_error("viz: missing --inputs for the --config model");
    }
    if (!svg && !html && !csv) return cli_usage_error("viz: nothing to write: give --svg, --html and/or --csv");
    /* --head */
    int heads_sel[VIZ_MAX_LIST], nheads_sel = 0, want_mean = 0, want_all = 0;
    if (!strcmp(head_s, "mean"))
        want_mean = 1;
    else if (!strcmp(head_s, "all"))
        want_all = want_mean = 1;
    else {
        const char *p = head_s;
        while (1) {
            const char *e = strchr(p, ',');
            char item[32];
            size_t il = e ? (size_t)(e - p) : strlen(p);
            if (il >= sizeof item) il = sizeof item - 1;
            memcpy(item, p, il);
            item[il] = '\0';
            int64_t v;
            if (!strcmp(item, "mean"))
                want_mean = 1;
            else if (cli_parse_i64(item, 0, 1 << 20, &v) || nheads_sel == VIZ_MAX_LIST)
                return cli_usage_error("viz: --head: '%s' is not a head index, 'mean' or 'all'", item);
            else
                heads_sel[nheads_sel++] = (int)v;
            if (!e) break;
            p = e + 1;
        }
    }
    if (threads > 0) attn_set_num_threads((int)threads);

    viz_run r;
    memset(&r, 0, sizeof r);
    label_cache lc;
    memset(&lc, 0, sizeof lc);
    viz_set set;
    memset(&set, 0, sizeof set);
    float *roll = NULL;
    attn_capture_record *recs = NULL;
    int rc = checkpoint ? run_gpt(&r, checkpoint, text, tokens, pattern) : run_model(&r, config, weights, inputs, pattern);
    if (rc) goto done;
    const size_t count = attn_capture_count(r.cap);
    if (count == 0) {
        rc = cli_fail("viz: the model recorded no attention weights (no attention module matches '%s')", pattern);
        goto done;
    }
    recs = calloc(count, sizeof *recs);
    if (!recs) {
        rc = cli_fail("viz: out of memory");
        goto done;
    }
    for (size_t i = 0; i < count; i++) attn_capture_get(r.cap, i, &recs[i]);
    if (batch_index >= recs[0].batch) {
        rc = cli_fail("viz: --batch-index %lld is out of range: the input's batch is %lld", (long long)batch_index,
                      (long long)recs[0].batch);
        goto done;
    }
    if (!nlayers_sel)
        for (size_t i = 0; i < count && nlayers_sel < VIZ_MAX_LIST; i++) layers_sel[nlayers_sel++] = (int64_t)i;
    for (int i = 0; i < nlayers_sel; i++)
        if (layers_sel[i] >= (int64_t)count) {
            rc = cli_fail("viz: --layer %lld is out of range: the model has %zu attention layers (0..%zu: %s%s)",
                          (long long)layers_sel[i], count, count - 1, recs[0].module,
                          count > 1 ? ", ..." : "");
            goto done;
        }
    for (int i = 0; i < nlayers_sel; i++)
        for (int j = 0; j < nheads_sel; j++)
            if (heads_sel[j] >= recs[layers_sel[i]].num_heads) {
                rc = cli_fail("viz: --head %d is out of range: %s has %lld heads", heads_sel[j],
                              recs[layers_sel[i]].module, (long long)recs[layers_sel[i]].num_heads);
                goto done;
            }
    if (rollout) {
        roll = malloc(sizeof(float) * (size_t)(recs[0].batch * recs[0].nk * recs[0].nk));
        if (!roll) {
            rc = cli_fail("viz: out of memory");
            goto done;
        }
        if (attn_viz_rollout_records(recs, count, roll)) {
            rc = cli_fail("viz: --rollout: %s", attn_last_error());
            goto done;
        }
    }

    /* the maps */
    int cap_maps = rollout;
    for (int i = 0; i < nlayers_sel; i++)
        cap_maps += want_mean + (want_all ? (int)recs[layers_sel[i]].num_heads : nheads_sel);
    set.maps = calloc((size_t)cap_maps, sizeof(viz_map));
    if (!set.maps) {
        rc = cli_fail("viz: out of memory");
        goto done;
    }
    char deftitle[256];
    if (!title) {
        const char *base = checkpoint ? checkpoint : config, *slash = strrchr(base, '/');
        snprintf(deftitle, sizeof deftitle, "attention of %s", slash ? slash + 1 : base);
        title = deftitle;
    }
    set.title = title;
    set.model = r.model;
    for (int li = 0; li <= nlayers_sel; li++) {
        const int is_roll = li == nlayers_sel;
        if (is_roll && !rollout) break;
        const attn_capture_record *rec = is_roll ? &recs[0] : &recs[layers_sel[li]];
        const int64_t nq = rec->nq, nk = rec->nk, H = rec->heads;
        const char *const *ql = nq == r.ntok ? (const char *const *)r.tok_labels : numeric_labels(&lc, nq);
        const char *const *kl = nk == r.ntok ? (const char *const *)r.tok_labels : numeric_labels(&lc, nk);
        if (!ql || !kl) {
            rc = cli_fail("viz: out of memory");
            goto done;
        }
        int64_t r0, rows, c0, cols;
        window(nq, start, max_tokens, &r0, &rows);
        window(nk, start, max_tokens, &c0, &cols);
        const int nh = is_roll ? 1 : want_mean + (want_all ? (int)H : nheads_sel);
        for (int k = 0; k < nh; k++) {
            viz_map *m = &set.maps[set.count++];
            m->layer = is_roll ? -1 : (int)layers_sel[li];
            m->module = is_roll ? "rollout" : rec->module;
            m->head = is_roll ? VIZ_HEAD_ROLLOUT : (want_mean && k == 0) ? VIZ_HEAD_MEAN : want_all ? k - want_mean
                                                                                                  : heads_sel[k - want_mean];
            m->num_heads = (int)H;
            m->nq = nq, m->nk = nk, m->r0 = r0, m->c0 = c0, m->rows = rows, m->cols = cols;
            m->qlabels = ql, m->klabels = kl;
            if (!(m->w = malloc(sizeof(float) * (size_t)(rows * cols)))) {
                rc = cli_fail("viz: out of memory");
                goto done;
            }
            const float *base = is_roll ? roll + (size_t)batch_index * (size_t)(nq * nk)
                                        : rec->weights + (size_t)batch_index * (size_t)(H * nq * nk);
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++) {
                    const size_t at = (size_t)((r0 + i) * nk + c0 + j);
                    double v;
                    if (is_roll)
                        v = base[at];
                    else if (m->head == VIZ_HEAD_MEAN) {
                        v = 0;
                        for (int64_t h = 0; h < H; h++) v += base[(size_t)(h * nq * nk) + at];
                        v /= (double)H;
                    } else
                        v = base[(size_t)(m->head * nq * nk) + at];
                    m->w[i * cols + j] = (float)v;
                }
            if (rows < nq || cols < nk) {
                set.windowed = 1;
                snprintf(set.notice, sizeof set.notice,
                         "Long sequence: showing queries %lld..%lld of %lld and keys %lld..%lld of %lld (a window of "
                         "--max-tokens %lld from --start %lld; move it with --start).",
                         (long long)r0, (long long)(r0 + rows - 1), (long long)nq, (long long)c0,
                         (long long)(c0 + cols - 1), (long long)nk, (long long)max_tokens, (long long)start);
            }
        }
    }
    const char *const ins[4] = {checkpoint, config, weights, inputs}; /* never overwritten by an output */
    safe_set_inputs(ins, 4, force);
    char err[4200];
    if ((svg && viz_write_svgs(&set, svg, stdout, err, sizeof err)) || (html && viz_write_html(&set, html, err, sizeof err)) ||
        (csv && viz_write_csv(&set, csv, err, sizeof err))) {
        rc = cli_fail("viz: %s", err);
        goto done;
    }
    if (html) printf("wrote %s\n", html);
    if (csv) printf("wrote %s\n", csv);
    if (set.windowed) printf("note: %s\n", set.notice);
done:
    for (int i = 0; i < set.count; i++) free(set.maps[i].w);
    free(set.maps);
    free(recs);
    free(roll);
    for (int i = 0; i < lc.count; i++) {
        for (int64_t j = 0; j < lc.n[i]; j++) free(lc.labels[i][j]);
        free(lc.labels[i]);
    }
    for (int64_t i = 0; i < r.ntok; i++) free(r.tok_labels[i]);
    free(r.tok_labels);
    attn_capture_free(r.cap);
    attn_gpt_free(r.gpt);
    attn_nn_model_free(r.nn);
    return rc;
}
