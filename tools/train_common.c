/* Shared by `attn train`, `attn sample` and `attn bench train` (see train_common.h). */
#define _POSIX_C_SOURCE 200809L
#include "train_common.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_opts.h"

static volatile sig_atomic_t g_interrupted, g_cancel_library;
static struct sigaction g_old_int, g_old_term;

static void on_signal(int sig) {
    (void)sig;
    g_interrupted = 1;                           /* the loop checks it between steps */
    if (g_cancel_library) attn_cancel_request(); /* an atomic store: async-signal-safe */
}

void train_signals_catch(int cancel_library) {
    attn_cancel_clear();
    g_cancel_library = cancel_library != 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    g_interrupted = 0;
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
}

int train_signals_caught(void) { return g_interrupted != 0; }

void train_signals_release(void) {
    sigaction(SIGINT, &g_old_int, NULL);
    sigaction(SIGTERM, &g_old_term, NULL);
    attn_cancel_clear();
}

int train_memory_check(const char *cmd, double params, double act, const char *batch_opt, int64_t batch,
                       const char *advice) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0; /* unknown: nothing to compare with */
    const double ram = (double)pages * (double)page, need = 16.0 * params + act;
    if (need <= ram) return 0;
    return cli_fail("%s: the run needs %.1f GB (%.1f GB for %.0f parameters with their gradients and AdamW state, "
                    "%.1f GB of activations and workspace for %s %lld), over this machine's %.1f GB of memory: %s",
                    cmd, need / 1e9, 16.0 * params / 1e9, params, act / 1e9, batch_opt, (long long)batch, ram / 1e9,
                    advice);
}

attn_gpt_config train_gpt_config(const train_gpt_shape *s) {
    attn_gpt_config c = attn_gpt_config_default(s->vocab, s->context, s->d_model, s->heads, s->layers);
    c.layer.dim_feedforward = s->ff;
    c.layer.dropout = 0.0f;
    c.layer.activation = ATTN_ACTIVATION_GELU;
    c.positions = ATTN_POSITIONS_LEARNED;
    c.tie_embeddings = 0;
    c.layer.attention = s->attention;
    return c;
}

/* The attention kinds' options (attn_attention_kind_options names them): option name, CLI flag,
 * checkpoint metadata key, bounds, and where the value lives in attn_attention_config. */
const train_kind_opt train_kind_opts[TRAIN_KIND_OPTS] = {
    {"window", "--window", "gpt.window", 0, (int64_t)1 << 30},
    {"num_features", "--features", "gpt.num_features", 1, 1 << 16},
    {"seed", "--feature-seed", "gpt.feature_seed", 0, INT64_MAX},
};

int64_t *train_kind_opt_value(attn_attention_config *c, int i) {
    switch (i) {
    case 0: return &c->window;
    case 1: return &c->num_features;
    default: return (int64_t *)(void *)&c->seed; /* uint64_t, set within 0..INT64_MAX */
    }
}

int train_kind_uses(attn_attention_kind kind, int i, int *required) {
    const char *opts = attn_attention_kind_options(kind), *name = train_kind_opts[i].name;
    const size_t n = strlen(name);
    for (const char *p = opts; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        const int req = len > 0 && p[len - 1] == '!';
        if (len - (size_t)req == n && !strncmp(p, name, n)) {
            if (required) *required = req;
            return 1;
        }
        p = end ? end + 1 : p + len;
    }
    return 0;
}

static const char *const meta_keys[TRAIN_META_COUNT] = {
    "model", "gpt.vocab_size", "gpt.layers", "gpt.heads", "gpt.d_model", "gpt.ff", "gpt.context", "gpt.tokenizer"};

void train_meta_fill(train_meta *m, const train_gpt_shape *s) {
    const int64_t v[TRAIN_META_COUNT] = {0, s->vocab, s->layers, s->heads, s->d_model, s->ff, s->context, 0};
    for (int i = 0; i < TRAIN_META_COUNT; i++) {
        m->keys[i] = meta_keys[i];
        snprintf(m->buf[i], sizeof m->buf[i], "%lld", (long long)v[i]);
        m->values[i] = m->buf[i];
    }
    m->values[0] = "gpt";
    m->values[TRAIN_META_COUNT - 1] = "bytes";
    m->n = TRAIN_META_COUNT;
    train_meta_add(m, "gpt.attention", "%s", attn_attention_kind_name(s->attention.kind));
    attn_attention_config c = s->attention;
    for (int i = 0; i < TRAIN_KIND_OPTS; i++)
        if (train_kind_uses(c.kind, i, NULL))
            train_meta_add(m, train_kind_opts[i].meta, "%lld", (long long)*train_kind_opt_value(&c, i));
}

void train_meta_add(train_meta *m, const char *key, const char *fmt, ...) {
    if (m->n >= TRAIN_META_MAX) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->buf[m->n], sizeof m->buf[m->n], fmt, ap);
    va_end(ap);
    m->keys[m->n] = key;
    m->values[m->n] = m->buf[m->n];
    m->n++;
}

int train_shape_from_meta(const attn_safetensors *st, train_gpt_shape *s, char *err, size_t errsz) {
    const char *model = attn_safetensors_metadata_find(st, "model");
    if (!model || strcmp(model, "gpt") != 0) {
        snprintf(err, errsz, "not a checkpoint of `attn train gpt` (metadata 'model' is %s%s%s)", model ? "'" : "",
                 model ? model : "missing", model ? "'" : "");
        return -1;
    }
    const char *tok = attn_safetensors_metadata_find(st, "gpt.tokenizer");
    if (!tok || strcmp(tok, "bytes") != 0) {
        snprintf(err, errsz, "unsupported tokenizer '%s' (want 'bytes')", tok ? tok : "missing");
        return -1;
    }
    int64_t *dst[6] = {&s->vocab, &s->layers, &s->heads, &s->d_model, &s->ff, &s->context};
    for (int i = 0; i < 6; i++) {
        const char *v = attn_safetensors_metadata_find(st, meta_keys[i + 1]);
        if (!v || cli_parse_i64(v, 1, (int64_t)1 << 30, dst[i]) != 0) {
            snprintf(err, errsz, "metadata '%s' is %s", meta_keys[i + 1], v ? "not a positive integer" : "missing");
            return -1;
        }
    }
    s->attention = attn_attention_config_default();
    const char *kind = attn_safetensors_metadata_find(st, "gpt.attention");
    if (kind && attn_attention_kind_from_name(kind, &s->attention.kind) != ATTN_OK) {
        snprintf(err, errsz, "metadata 'gpt.attention' is '%s', not an attention kind of this build", kind);
        return -1;
    }
    for (int i = 0; i < TRAIN_KIND_OPTS; i++) {
        const train_kind_opt *ko = &train_kind_opts[i];
        int required = 0;
        if (!train_kind_uses(s->attention.kind, i, &required)) continue;
        const char *v = attn_safetensors_metadata_find(st, ko->meta);
        if ((!v && required) || (v && cli_parse_i64(v, ko->min, ko->max, train_kind_opt_value(&s->attention, i)))) {
            snprintf(err, errsz, "metadata '%s' is %s", ko->meta, v ? "out of range" : "missing");
            return -1;
        }
    }
    if (s->vocab != TRAIN_BYTE_VOCAB) {
        snprintf(err, errsz, "vocabulary of %lld (want %d bytes)", (long long)s->vocab, TRAIN_BYTE_VOCAB);
        return -1;
    }
    /* the shape against the tensors present, before anything is allocated for it: a damaged or
     * hostile header claiming 100000 layers must not build a model of that size */
    if (s->d_model % s->heads) {
        snprintf(err, errsz, "metadata 'gpt.d_model' %lld is not a multiple of 'gpt.heads' %lld", (long long)s->d_model,
                 (long long)s->heads);
        return -1;
    }
    char name[96];
    const struct {
        const char *fmt;
        int64_t d0, d1;
    } want[] = {
        {"tok_emb.weight", s->vocab, s->d_model},
        {"pos_emb.weight", s->context, s->d_model},
        {"layers.%lld.linear1.weight", s->ff, s->d_model},
        {"layers.%lld.linear2.weight", s->d_model, s->ff},
    };
    for (int64_t l = 0; l < s->layers; l++)
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
            if (l > 0 && !strchr(want[k].fmt, '%')) continue;
            snprintf(name, sizeof name, want[k].fmt, (long long)l);
            const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
            if (!t || t->rank != 2 || t->shape[0] != want[k].d0 || t->shape[1] != want[k].d1) {
                snprintf(err, errsz,
                         "metadata (layers %lld, d_model %lld, ff %lld, context %lld) does not match the "
                         "tensors: '%s' is %s",
                         (long long)s->layers, (long long)s->d_model, (long long)s->ff, (long long)s->context, name,
                         t ? "of another shape" : "missing");
                return -1;
            }
        }
    snprintf(name, sizeof name, "layers.%lld.linear1.weight", (long long)s->layers);
    if (attn_safetensors_find(st, name)) {
        snprintf(err, errsz, "metadata 'gpt.layers' is %lld but the checkpoint holds more layers",
                 (long long)s->layers);
        return -1;
    }
    return 0;
}

int train_dist_start(const char *cmd, attn_dist **d) {
    *d = NULL;
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    if (!n && !getenv("PMIX_RANK")) return 0; /* not launched by MPI: one process, as always */
    const long size = n ? strtol(n, NULL, 10) : 1;
    if (!attn_dist_available()) {
        if (size <= 1) return 0;
        fprintf(stderr,
                "attn: %s: launched as %ld MPI processes, but this build has no MPI (each would train alone); "
                "rebuild with MPI installed (libopenmpi-dev)\n",
                cmd, size);
        return 1;
    }
    if (attn_dist_init(d) != ATTN_OK) {
        fprintf(stderr, "attn: %s: %s\n", cmd, attn_last_error());
        return 1;
    }
    if (attn_dist_rank(*d) != 0) {
        fflush(stdout);
        if (!freopen("/dev/null", "w", stdout)) { /* stdout stays: the output is doubled, no harm */
        }
    }
    return 0;
}

int train_dist_end(attn_dist *d, int exit_code) {
    if (!d) return exit_code;
    fflush(stdout);
    if (exit_code != 0 && exit_code != 130 && attn_dist_size(d) > 1) {
        fprintf(stderr, "attn: rank %d of %d stops the job (exit status %d)\n", attn_dist_rank(d), attn_dist_size(d),
                exit_code);
        attn_dist_abort(d, exit_code);
    }
    attn_dist_free(d);
    return exit_code;
}

int train_data_differs(const attn_safetensors *st, const char *hash) {
    const char *dh = attn_safetensors_metadata_find(st, TRAIN_DATA_HASH_KEY);
    return dh && strcmp(dh, hash) != 0;
}

int train_data_refuse(const char *cmd, const char *data, const char *checkpoint) {
    return cli_fail("%s: --resume: --data '%s' is not the data %s was trained on (its contents differ); "
                    "resume with the same data, or start afresh with --force",
                    cmd, data, checkpoint);
}

uint64_t train_hash(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

void train_precision_note(attn_precision p) {
    if (p != ATTN_PRECISION_BF16) return;
    if (!(attn_cpu_feature_bits() & ATTN_CPU_AVX512BF16)) {
        printf("note: this CPU has no AVX512-BF16: the bf16 products are emulated (two fp32 FMAs each on AVX-512 or "
               "AVX2, scalar code without them), so bf16 trains slower here than fp32\n");
        return;
    }
    /* AVX512-BF16 without AMX tiles in use, where vdpbf16ps runs at half the FMA rate (Intel):
     * its FMA emulation serves, at best at fp32's rate */
    attn_kernel_info k;
    if (attn_kernel_info_get(&k) != ATTN_OK || k.bf16_unit != ATTN_UNIT_FMA) return;
    printf("note: the bf16 products run on %s here (%s), at best at fp32's rate, so bf16 trains slower here "
           "than fp32\n",
           k.bf16_name, k.bf16_note ? k.bf16_note : "ATTN_ISA below avx512");
}

int train_resume_precision(const char *cmd, const attn_safetensors *st, const char *path, int given,
                           attn_precision *p) {
    attn_precision ckpt = ATTN_PRECISION_FP32;
    const char *v = attn_safetensors_metadata_find(st, "train.precision");
    if (v && cli_parse_precision(v, &ckpt))
        return cli_fail("%s: --resume: %s: train.precision '%s' is neither fp32 nor bf16", cmd, path, v);
    if (!given)
        *p = ckpt;
    else if (*p != ckpt)
        printf("note: --precision %s, the checkpoint was trained in %s (its weights are fp32 either way): "
               "continuing in %s\n",
               attn_precision_name(*p), attn_precision_name(ckpt), attn_precision_name(*p));
    return 0;
}
