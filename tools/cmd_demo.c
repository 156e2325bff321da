/* attn demo: attention as content-based retrieval, shown as a heat map.
 *
 * Keys are random unit vectors; query i is a noisy copy of key N-1-i, so exact attention should
 * put its weight on the anti-diagonal. The demo runs the reference attention forward and backward,
 * draws the weights of one head, and reports how many queries retrieved their key. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: attn demo [--n N] [--d D] [--noise X] [--seed S]\n\n"
               "Attention as retrieval: query i is a noisy copy of key N-1-i; the reference\n"
               "attention's weights are drawn as a heat map (an anti-diagonal means every query\n"
               "found its key) and the retrieval accuracy is printed.\n"
               "  --n N       sequence length (2..64, default 16)\n"
               "  --d D       head dimension (1..512, default 32)\n"
               "  --noise X   query noise relative to the key (0..10, default 0.3)\n"
               "  --seed S    random seed (default 1)\n");
}

static double uniform(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) * 0x1.0p-53;
}
static double normal(uint64_t *s) {
    double u = uniform(s), v = uniform(s);
    return sqrt(-2 * log(u > 1e-300 ? u : 1e-300)) * cos(6.283185307179586 * v);
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int cmd_demo(int argc, char **argv) {
    long n = 16, d = 32, seed = 1;
    double noise = 0.3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) return cli_usage_error("demo: unknown or incomplete option '%s'", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--n")) {
            if (!parse_long(v, 2, 64, &n)) return cli_usage_error("demo: --n must be 2..64, got '%s'", v);
        } else if (!strcmp(a, "--d")) {
            if (!parse_long(v, 1, 512, &d)) return cli_usage_error("demo: --d must be 1..512, got '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            if (!parse_long(v, 0, 2147483647L, &seed)) return cli_usage_error("demo: --seed must be >= 0, got '%s'", v);
        } else if (!strcmp(a, "--noise")) {
            char *end;
            noise = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || !(noise >= 0 && noise <= 10))
                return cli_usage_error("demo: --noise must be 0..10, got '%s'", v);
        } else {
            return cli_usage_error("demo: unknown option '%s'", a);
        }
    }
    const int H = 2;
    const size_t nd = (size_t)n * (size_t)d;
    float *q = malloc(sizeof(float) * H * nd), *k = malloc(sizeof(float) * H * nd),
          *v = malloc(sizeof(float) * H * nd), *o = malloc(sizeof(float) * H * nd),
          *w = malloc(sizeof(float) * H * (size_t)n * (size_t)n);
    float *dq = malloc(sizeof(float) * H * nd), *dk = malloc(sizeof(float) * H * nd),
          *dv = malloc(sizeof(float) * H * nd), *go = malloc(sizeof(float) * H * nd);
    if (!q || !k || !v || !o || !w || !dq || !dk || !dv || !go) return cli_fail("demo: out of memory");
    uint64_t s = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
    for (int h = 0; h < H; h++)
        for (long j = 0; j < n; j++) {
            double norm = 0;
            float *kj = k + (size_t)h * nd + (size_t)j * d;
            for (long t = 0; t < d; t++) {
                kj[t] = (float)normal(&s);
                norm += (double)kj[t] * kj[t];
            }
            for (long t = 0; t < d; t++) kj[t] = (float)(kj[t] / sqrt(norm));
            for (long t = 0; t < d; t++) v[(size_t)h * nd + (size_t)j * d + t] = (float)normal(&s);
        }
    /* query i ~ key N-1-i, sharpened so the softmax can pick it out */
    const double sharpen = 4.0 * sqrt((double)d);
    for (int h = 0; h < H; h++)
        for (long i = 0; i < n; i++)
            for (long t = 0; t < d; t++)
                q[(size_t)h * nd + (size_t)i * d + t] =
                    (float)(sharpen * (k[(size_t)h * nd + (size_t)(n - 1 - i) * d + t] +
                                       noise * normal(&s) / sqrt((double)d)));

    attn_tensor tq = attn_tensor_4d(q, 1, H, n, d), tk = attn_tensor_4d(k, 1, H, n, d),
                tv = attn_tensor_4d(v, 1, H, n, d), to = attn_tensor_4d(o, 1, H, n, d),
                tw = attn_tensor_4d(w, 1, H, n, n), tdq = attn_tensor_4d(dq, 1, H, n, d),
                tdk = attn_tensor_4d(dk, 1, H, n, d), tdv = attn_tensor_4d(dv, 1, H, n, d);
    attn_sdpa_params p = attn_sdpa_params_default();
    size_t bytes = attn_sdpa_workspace_size(&tq, &tk, &tv);
    void *ws = malloc(bytes);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    attn_status st = ws ? attn_sdpa_forward(&tq, &tk, &tv, &p, &to, &tw, NULL, ws, bytes) : ATTN_ERR_OUT_OF_MEMORY;
    /* the gradient of L = sum(O) flows back through the same weights */
    for (size_t i = 0; i < H * nd; i++) go[i] = 1.0f;
    attn_tensor tgo = attn_tensor_4d(go, 1, H, n, d);
    if (st == ATTN_OK) st = attn_sdpa_backward(&tq, &tk, &tv, &p, &tgo, &tdq, &tdk, &tdv, ws, bytes);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(ws);
    if (st != ATTN_OK) return cli_fail("demo: %s: %s", attn_status_str(st), attn_last_error());

    printf("attn %s demo: attention as retrieval (N=%ld, d=%ld, heads=%d, noise=%.2f, kernels=%s)\n\n",
           ATTN_VERSION_STRING, n, d, H, noise, attn_isa_name(attn_active_isa()));
    printf("head 0 weights (rows: queries, columns: keys; ' .:-=+*#%%@' from 0 to 1)\n");
    static const char shades[] = " .:-=+*#%@";
    for (long i = 0; i < n; i++) {
        printf("  q%-3ld |", i);
        for (long j = 0; j < n; j++) {
            int level = (int)(w[(size_t)i * n + j] * 9.999f);
            putchar(shades[level < 0 ? 0 : level > 9 ? 9 : level]);
            putchar(shades[level < 0 ? 0 : level > 9 ? 9 : level]);
        }
        printf("|\n");
    }
    long hits = 0;
    double mass = 0, gnorm = 0;
    for (int h = 0; h < H; h++)
        for (long i = 0; i < n; i++) {
            const float *row = w + ((size_t)h * n + i) * n;
            long best = 0;
            for (long j = 1; j < n; j++)
                if (row[j] > row[best]) best = j;
            hits += best == n - 1 - i;
            mass += row[n - 1 - i];
        }
    for (size_t i = 0; i < H * nd; i++) gnorm += (double)dk[i] * dk[i];
    printf("\nmean weight on the matching key: %.3f; |dL/dK| for L = sum(O): %.3e\n", mass / (H * n), sqrt(gnorm));
    printf("forward + backward: %.3f ms\n", ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6));
    printf("retrieval accuracy: %.1f%% (%ld of %ld queries found their key)\n", 100.0 * hits / (H * n), hits,
           (long)H * n);
    free(q); free(k); free(v); free(o); free(w); free(dq); free(dk); free(dv); free(go);
    return 0;
}
