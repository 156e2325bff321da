/* attn classify: the top labels of images with a Hugging Face image classifier (a ViT folder), as
 * transformers' ViTImageProcessor + ViTForImageClassification compute them (attn/pretrained.h:
 * preprocessing from preprocessor_config.json, logits, id2label), probabilities by softmax. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"

static void usage(FILE *f) {
    fprintf(f, "usage: attn classify --model DIR (--image FILE)... [--input LIST] [--top K]\n"
               "                     [--precision fp32|bf16] [--threads T]\n\n"
               "The K most likely labels of each image with a Hugging Face image classifier folder\n"
               "(ViTForImageClassification: config.json, model.safetensors, preprocessor_config.json), as\n"
               "transformers' image processor and model compute them: the image decoded (PNG with libpng,\n"
               "PPM, PGM), resized and normalised as preprocessor_config.json says, the logits' softmax.\n"
               "  --model DIR      the folder\n"
               "  --image FILE     an image (the option may be repeated)\n"
               "  --input LIST     a file of image paths, one per line ('-': standard input)\n"
               "  --top K          labels shown per image (default 5; at most the model's labels)\n"
               "  --precision P    fp32 (default) or bf16: the matrix products on bf16-rounded operands\n"
               "                   with float sums, the weights rounded and packed once (AMX, AVX512-BF16)\n"
               "  --threads T      threads (default: all)\n"
               "Output, per image: its path, then K lines \"  PROBABILITY  ID  LABEL\", most likely first\n"
               "(ties by lower id). An unreadable image or folder is reported on one line and exits 1.\n");
}

typedef struct classify_list {
    char **paths;
    size_t n, cap;
} classify_list;

static int list_push(classify_list *l, const char *s, size_t len) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **p = realloc(l->paths, cap * sizeof *p);
        if (!p) return cli_fail("classify: out of memory");
        l->paths = p, l->cap = cap;
    }
    char *d = malloc(len + 1);
    if (!d) return cli_fail("classify: out of memory");
    memcpy(d, s, len);
    d[len] = '\0';
    l->paths[l->n++] = d;
    return 0;
}

/* Every --image of the command line, in order (cli_parse keeps only the last). */
static int images_of_argv(classify_list *l, int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--image") && i + 1 < argc) {
            if (list_push(l, argv[i + 1], strlen(argv[i + 1]))) return 1;
            i++;
        } else if (!strncmp(argv[i], "--image=", 8) && list_push(l, argv[i] + 8, strlen(argv[i] + 8)))
            return 1;
    }
    return 0;
}

static int images_of_file(classify_list *l, const char *input) {
    FILE *f = stdin;
    if (strcmp(input, "-")) {
        int fd = -1;
        uint64_t size = 0;
        if (attn_io_open_input(input, "data", ATTN_IO_CAP_DATA, &fd, &size))
            return cli_fail("classify: %s", attn_last_error());
        if (!(f = fdopen(fd, "r"))) return cli_fail("classify: cannot read '%s'", input);
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    int rc = 0;
    while (!rc && (got = getline(&line, &lcap, f)) >= 0) {
        size_t len = (size_t)got;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len) rc = list_push(l, line, len);
    }
    if (!rc && ferror(f)) rc = cli_fail("classify: cannot read '%s'", input);
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

/* Ids by decreasing logit, ties by lower id. */
static const float *sort_logits;
static int by_logit(const void *a, const void *b) {
    const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    if (sort_logits[i] != sort_logits[j]) return sort_logits[i] > sort_logits[j] ? -1 : 1;
    return (i > j) - (i < j);
}

/* One image: decode, preprocess, classify, print the top k. 0, or 1 (printed). */
static int classify_one(attn_pretrained *m, const char *path, int64_t k, float *x, float *logits, int64_t *order) {
    int64_t C, H, W;
    attn_pretrained_image_size(m, &C, &H, &W);
    attn_image img;
    memset(&img, 0, sizeof img);
    if (attn_image_load(path, &img)) return cli_fail("classify: %s", attn_last_error());
    attn_status st = attn_pretrained_image_input(m, &img, x);
    attn_image_free(&img);
    if (!st) st = attn_pretrained_classify(m, x, 1, H, W, logits);
    if (st) return cli_fail("classify: %s: %s", path, attn_last_error());
    const int64_t L = attn_pretrained_num_labels(m);
    double max = logits[0], sum = 0;
    for (int64_t i = 0; i < L; i++) {
        if (!isfinite(logits[i])) return cli_fail("classify: %s: logit %lld is not finite", path, (long long)i);
        max = logits[i] > max ? logits[i] : max;
        order[i] = i;
    }
    for (int64_t i = 0; i < L; i++) sum += exp((double)logits[i] - max);
    sort_logits = logits;
    qsort(order, (size_t)L, sizeof *order, by_logit);
    printf("%s\n", path);
    for (int64_t i = 0; i < k && i < L; i++)
        printf("  %.8f  %lld  %s\n", exp((double)logits[order[i]] - max) / sum, (long long)order[i],
               attn_pretrained_label(m, order[i]));
    return 0;
}

static int classify_all(const char *model, const classify_list *l, int64_t top, attn_precision prec) {
    attn_pretrained *m = NULL;
    if (attn_pretrained_open(model, &m)) return cli_fail("classify: %s", attn_last_error());
    if (attn_pretrained_set_precision(m, prec)) {
        const int rc = cli_fail("classify: --precision %s: %s", attn_precision_name(prec), attn_last_error());
        attn_pretrained_free(m);
        return rc;
    }
    int64_t C, H, W;
    attn_pretrained_image_size(m, &C, &H, &W);
    const int64_t L = attn_pretrained_num_labels(m);
    int rc = 0;
    if (!C)
        rc = cli_fail("classify: %s is a \"%s\" model, not an image classifier", model, attn_pretrained_family(m));
    else if (!L)
        rc = cli_fail("classify: %s has no classifier (a ViTModel: no classifier.* weights)", model);
    float *x = rc ? NULL : malloc((size_t)(C * H * W) * sizeof(float));
    float *logits = rc ? NULL : malloc((size_t)L * sizeof(float));
    int64_t *order = rc ? NULL : malloc((size_t)L * sizeof(int64_t));
    if (!rc && (!x || !logits || !order)) rc = cli_fail("classify: out of memory");
    for (size_t i = 0; !rc && i < l->n; i++) rc = classify_one(m, l->paths[i], top, x, logits, order);
    free(x);
    free(logits);
    free(order);
    attn_pretrained_free(m);
    return rc;
}

int cmd_classify(int argc, char **argv) {
    const char *model = NULL, *image = NULL, *input = NULL, *precision = "fp32";
    int64_t top = 5, threads = 0;
    cli_opt opts[] = {
        CLI_STRING_NONEMPTY("--model", &model),
        CLI_STRING_NONEMPTY("--image", &image),
        CLI_STRING_NONEMPTY("--input", &input),
        CLI_INT("--top", &top, 1, INT32_MAX),
        CLI_STRING_NONEMPTY("--precision", &precision),
        CLI_INT("--threads", &threads, 1, ATTN_MAX_THREADS),
        CLI_END,
    };
    int parsed = cli_parse("classify", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (!model) return cli_usage_error("classify: --model is required (try 'attn classify --help')");
    if (!image && !input) return cli_usage_error("classify: give --image FILE (repeatable) or --input LIST");
    attn_precision prec;
    if (cli_parse_precision(precision, &prec))
        return cli_usage_error("classify: --precision '%s' is not fp32 or bf16", precision);
    if (threads) attn_set_num_threads((int)threads);
    classify_list l = {0};
    int rc = images_of_argv(&l, argc, argv);
    if (!rc && input) rc = images_of_file(&l, input);
    if (!rc && !l.n) rc = cli_fail("classify: %s lists no image", input);
    if (!rc) rc = classify_all(model, &l, top, prec);
    for (size_t i = 0; i < l.n; i++) free(l.paths[i]);
    free(l.paths);
    return rc;
}
