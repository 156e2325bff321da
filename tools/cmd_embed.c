/* attn embed: one sentence embedding per line of text, as sentence-transformers' encode computes it
 * for a Hugging Face folder (attn/pretrained.h: the model, its pooling and normalisation;
 * attn/tokenizer.h: its tokenizer). Lines are tokenized with truncation to the model's maximum
 * length, sorted by length and run in batches of similar lengths (as encode sorts them), so a
 * batch pads little; each line's embedding goes back to its line's place. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"
#include "safe_io.h"

static void usage(FILE *f) {
    fprintf(f, "usage: attn embed --model DIR --input FILE --out OUT [--batch B] [--threads T] [--max-length L]\n"
               "                  [--precision fp32|bf16] [--force]\n\n"
               "One embedding per line of FILE ('-': standard input), as sentence-transformers'\n"
               "SentenceTransformer(DIR).encode(lines) computes it: the folder's tokenizer (tokenizer.json or\n"
               "vocab.txt), its model (config.json, model.safetensors or a sharded index), its pooling\n"
               "(1_Pooling/config.json: mean, CLS or max; mean for a plain model folder) and its Normalize module.\n"
               "  --model DIR       a Hugging Face or sentence-transformers folder (attn_pretrained_family_name\n"
               "                    lists the families: BERT)\n"
               "  --input FILE      the texts, one per line\n"
               "  --out OUT         .safetensors (tensor 'embeddings' [lines, dim], F32), .npy (float32\n"
               "                    [lines, dim]) or .jsonl (one JSON array per line)\n"
               "  --batch B         lines per batch (default 32), formed by length\n"
               "  --threads T       threads (default: all)\n"
               "  --max-length L    truncate to L tokens (default: the model's max_seq_length)\n"
               "  --precision P     fp32 (default) or bf16: the encoder's matrix products on bf16-rounded\n"
               "                    operands with float32 sums, as PyTorch's bf16 autocast (docs/performance.md:\n"
               "                    its accuracy and speed)\n"
               "  --force           replace an existing OUT of another kind\n"
               "Progress goes to standard error on inputs of more than 1000 lines.\n");
}

typedef struct embed_texts {
    int32_t *ids;    /* every line's ids, one after another */
    size_t *off, *n; /* line i: ids[off[i] .. off[i] + n[i]) */
    size_t lines, cap_lines, nids, cap_ids;
} embed_texts;

static void texts_free(embed_texts *t) {
    free(t->ids);
    free(t->off);
    free(t->n);
}

static int push_line(embed_texts *t, const attn_tokenizer *tok, const char *s, size_t len, int64_t max_length,
                     size_t no) {
    if (t->lines == t->cap_lines) {
        const size_t c = t->cap_lines ? 2 * t->cap_lines : 256;
        size_t *o = realloc(t->off, c * sizeof *o), *n = o ? realloc(t->n, c * sizeof *n) : NULL;
        if (o) t->off = o;
        if (!o || !n) return cli_fail("embed: out of memory at line %zu", no);
        t->n = n;
        t->cap_lines = c;
    }
    size_t got = 0;
    attn_status st =
        attn_tokenizer_encode(tok, s, len, 1, max_length, t->ids ? t->ids + t->nids : NULL, t->cap_ids - t->nids, &got);
    if (st == ATTN_ERR_WORKSPACE) {
        size_t c = t->cap_ids ? t->cap_ids : 4096;
        while (c - t->nids < got) c *= 2;
        int32_t *p = realloc(t->ids, c * sizeof *p);
        if (!p) return cli_fail("embed: out of memory at line %zu", no);
        t->ids = p;
        t->cap_ids = c;
        st = attn_tokenizer_encode(tok, s, len, 1, max_length, t->ids + t->nids, t->cap_ids - t->nids, &got);
    }
    if (st) return cli_fail("embed: line %zu: %s", no, attn_last_error());
    t->off[t->lines] = t->nids;
    t->n[t->lines++] = got;
    t->nids += got;
    return 0;
}

static int read_texts(embed_texts *t, const attn_tokenizer *tok, const char *input, int64_t max_length) {
    FILE *f = stdin;
    const char *name = "standard input";
    if (strcmp(input, "-")) {
        int fd = -1;
        uint64_t size = 0;
        if (attn_io_open_input(input, "data", ATTN_IO_CAP_DATA, &fd, &size)) return cli_fail("%s", attn_last_error());
        if (!(f = fdopen(fd, "r"))) return cli_fail("embed: cannot read '%s'", input);
        name = input;
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    int rc = 0;
    while (!rc && (got = getline(&line, &lcap, f)) >= 0) {
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        if (len && line[len - 1] == '\r') line[--len] = '\0';
        rc = push_line(t, tok, line, len, max_length, t->lines + 1);
    }
    if (!rc && ferror(f)) rc = cli_fail("embed: cannot read '%s'", name);
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

/* Lines by decreasing length (ties in input order): consecutive batches pad little. */
static const size_t *sort_lengths;
static int by_length(const void *a, const void *b) {
    const size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (sort_lengths[i] != sort_lengths[j]) return sort_lengths[i] < sort_lengths[j] ? 1 : -1;
    return i < j ? -1 : i > j;
}

/* out [lines, dim]: each batch of `batch` lines in length order, padded to its longest line. */
static int embed_all(attn_pretrained *m, const embed_texts *t, int64_t batch, int32_t pad, float *out) {
    const int64_t dim = attn_pretrained_embedding_size(m);
    size_t *order = malloc((t->lines ? t->lines : 1) * sizeof *order);
    size_t maxn = 0;
    for (size_t i = 0; i < t->lines; i++) maxn = t->n[i] > maxn ? t->n[i] : maxn;
    int32_t *ids = malloc((size_t)batch * (maxn ? maxn : 1) * sizeof *ids);
    int64_t *len = malloc((size_t)batch * sizeof *len);
    float *emb = malloc((size_t)batch * (size_t)dim * sizeof *emb);
    int rc = 0;
    if (!order || !ids || !len || !emb) rc = cli_fail("embed: out of memory for a batch of %lld", (long long)batch);
    for (size_t i = 0; !rc && i < t->lines; i++) order[i] = i;
    sort_lengths = t->n;
    if (!rc) qsort(order, t->lines, sizeof *order, by_length);
    const int progress = t->lines > 1000;
    size_t next_report = t->lines / 10;
    for (size_t b0 = 0; !rc && b0 < t->lines; b0 += (size_t)batch) {
        const size_t nb = t->lines - b0 < (size_t)batch ? t->lines - b0 : (size_t)batch;
        const size_t seq = t->n[order[b0]] ? t->n[order[b0]] : 1;
        for (size_t r = 0; r < nb; r++) {
            const size_t i = order[b0 + r];
            memcpy(ids + r * seq, t->ids + t->off[i], t->n[i] * sizeof *ids);
            for (size_t c = t->n[i]; c < seq; c++) ids[r * seq + c] = pad;
            len[r] = (int64_t)t->n[i];
        }
        if (attn_pretrained_embed(m, ids, len, (int64_t)nb, (int64_t)seq, emb)) {
            rc = cli_fail("embed: lines %zu..%zu (by length): %s", b0 + 1, b0 + nb, attn_last_error());
            break;
        }
        for (size_t r = 0; r < nb; r++)
            memcpy(out + order[b0 + r] * (size_t)dim, emb + r * (size_t)dim, (size_t)dim * sizeof *out);
        if (progress && b0 + nb >= next_report) {
            fprintf(stderr, "embed: %zu / %zu lines\n", b0 + nb, t->lines);
            next_report += t->lines / 10;
        }
    }
    free(order);
    free(ids);
    free(len);
    free(emb);
    return rc;
}

typedef enum { OUT_SAFETENSORS, OUT_NPY, OUT_JSONL } out_format;

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* NumPy's format 1.0: magic, version, header length, a dict padded with spaces to a multiple of
 * 64 bytes ending in '\n', then the data in C order. */
static int write_npy(FILE *f, const float *e, size_t lines, int64_t dim) {
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %lld), }", lines,
                     (long long)dim);
    size_t total = 10 + (size_t)n + 1;
    const size_t padded = (total + 63) / 64 * 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    const size_t hlen = padded - 10;
    pre[8] = (unsigned char)(hlen & 0xff);
    pre[9] = (unsigned char)(hlen >> 8);
    fwrite(pre, 1, 10, f);
    fwrite(dict, 1, (size_t)n, f);
    for (size_t i = total; i < padded; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(e, sizeof *e, lines * (size_t)dim, f); /* little-endian x86 / ARM: '<f4' as stored */
    return ferror(f) ? -1 : 0;
}

static int write_jsonl(FILE *f, const float *e, size_t lines, int64_t dim) {
    for (size_t i = 0; i < lines; i++) {
        fputc('[', f);
        for (int64_t j = 0; j < dim; j++) fprintf(f, j ? ", %.9g" : "%.9g", (double)e[i * (size_t)dim + (size_t)j]);
        fputs("]\n", f);
    }
    return ferror(f) ? -1 : 0;
}

static int write_out(const char *out, out_format fmt, const float *e, size_t lines, int64_t dim) {
    if (fmt == OUT_SAFETENSORS) {
        attn_safetensors_writer *w = NULL;
        const int64_t shape[2] = {(int64_t)lines, dim};
        attn_status st = attn_safetensors_writer_create(&w);
        if (!st) st = attn_safetensors_writer_add(w, "embeddings", ATTN_DTYPE_F32, 2, shape, e);
        if (!st) st = attn_safetensors_writer_write_file(w, out);
        attn_safetensors_writer_free(w);
        return st ? cli_fail("embed: %s", attn_last_error()) : 0;
    }
    safe_file h;
    FILE *f = safe_fopen(&h, out, fmt == OUT_NPY ? SAFE_KIND_NPY : SAFE_KIND_JSONL);
    if (!f) return cli_fail("embed: %s", attn_last_error());
    const int bad = fmt == OUT_NPY ? write_npy(f, e, lines, dim) : write_jsonl(f, e, lines, dim);
    if (safe_fclose(&h, f) || bad) return cli_fail("embed: cannot write '%s': %s", out, attn_last_error());
    return 0;
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL, *input = NULL, *out = NULL, *precision = "fp32";
    int64_t batch = 32, threads = 0, max_length = 0;
    int force = 0;
    cli_opt opts[] = {
        CLI_STRING_NONEMPTY("--model", &model),
        CLI_STRING_NONEMPTY("--input", &input),
        CLI_STRING_NONEMPTY("--out", &out),
        CLI_INT("--batch", &batch, 1, 65536),
        CLI_INT("--threads", &threads, 1, ATTN_MAX_THREADS),
        CLI_INT("--max-length", &max_length, 1, INT32_MAX),
        CLI_FLAG("--force", &force),
        CLI_STRING_NONEMPTY("--precision", &precision),
        CLI_END,
    };
    int parsed = cli_parse("embed", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (!model || !input || !out)
        return cli_usage_error("embed: --model, --input and --out are required (try 'attn embed --help')");
    const out_format fmt = ends_with(out, ".safetensors") ? OUT_SAFETENSORS
                           : ends_with(out, ".npy")       ? OUT_NPY
                           : ends_with(out, ".jsonl")     ? OUT_JSONL
                                                          : (out_format)-1;
    attn_precision prec;
    if (cli_parse_precision(precision, &prec))
        return cli_usage_error("embed: --precision '%s' is not fp32 or bf16", precision);
    if ((int)fmt < 0) return cli_usage_error("embed: --out '%s' is not .safetensors, .npy or .jsonl", out);
    const char *ins[] = {input};
    static const safe_kind kinds[] = {SAFE_KIND_SAFETENSORS, SAFE_KIND_NPY, SAFE_KIND_JSONL};
    const safe_out outs[1] = {{"--out", out, kinds[fmt]}};
    if (safe_out_check("embed", "--out", out, ins, 1, kinds[fmt], force) ||
        safe_outs_outside("embed", outs, 1, model, "--model"))
        return 1;
    safe_set_inputs(ins, 1, force);
    if (threads) attn_set_num_threads((int)threads);
    attn_pretrained *m = NULL;
    attn_tokenizer *tok = NULL;
    embed_texts t = {0};
    float *e = NULL;
    int rc = 0;
    if (attn_pretrained_open(model, &m) || attn_tokenizer_open(model, &tok))
        rc = cli_fail("embed: %s", attn_last_error());
    if (!rc && attn_pretrained_set_precision(m, prec))
        rc = cli_fail("embed: --precision %s: %s", precision, attn_last_error());
    const int64_t limit = max_length ? max_length : rc ? 0 : attn_pretrained_max_length(m);
    if (!rc) rc = read_texts(&t, tok, input, limit);
    const int64_t dim = rc ? 0 : attn_pretrained_embedding_size(m);
    if (!rc && !(e = malloc((t.lines ? t.lines : 1) * (size_t)dim * sizeof *e)))
        rc = cli_fail("embed: out of memory for %zu embeddings of %lld", t.lines, (long long)dim);
    if (!rc) {
        const int32_t pad = attn_tokenizer_pad_id(tok);
        rc = embed_all(m, &t, batch, pad >= 0 ? pad : 0, e);
    }
    if (!rc) rc = write_out(out, fmt, e, t.lines, dim);
    if (!rc) fprintf(stderr, "embed: %zu lines, %lld dimensions -> %s\n", t.lines, (long long)dim, out);
    free(e);
    texts_free(&t);
    attn_tokenizer_free(tok);
    attn_pretrained_free(m);
    return rc;
}
