/* Attention rollout (Abnar & Zuidema 2020; see attn/viz.h): per layer the heads' mean plus the
 * identity, rows renormalised, multiplied through the layers. Double accumulation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "attn/viz.h"
#include "core/internal.h"

/* Layer l's weights [batch, heads[l], n, n]. */
static attn_status rollout(const char *fn, const float *const *w, const int64_t *heads, const char *const *names,
                           int64_t layers, int64_t batch, int64_t n, float *out) {
    if ((uint64_t)n > ((uint64_t)1 << 15))
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: n = %lld is too large for an n x n rollout", fn, (long long)n);
    const size_t nn = (size_t)n * (size_t)n;
    double *r = attn__malloc(sizeof(double) * nn), *a = attn__malloc(sizeof(double) * nn),
           *t = attn__malloc(sizeof(double) * nn);
    attn_status st = ATTN_OK;
    if (!r || !a || !t) {
        st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: no memory for 3 x %lld x %lld doubles", fn, (long long)n,
                        (long long)n);
        goto done;
    }
    for (int64_t b = 0; b < batch && !st; b++) {
        for (int64_t l = 0; l < layers; l++) {
            const int64_t H = heads[l];
            const float *wl = w[l] + (size_t)b * (size_t)H * nn;
            /* a = rownorm(mean_h w + I) */
            memset(a, 0, sizeof(double) * nn);
            for (int64_t h = 0; h < H; h++)
                for (size_t k = 0; k < nn; k++) a[k] += wl[(size_t)h * nn + k];
            for (int64_t i = 0; i < n; i++) {
                double *row = a + (size_t)i * (size_t)n, sum = 0;
                for (int64_t j = 0; j < n; j++) {
                    if (!isfinite(row[j])) {
                        st = attn_error(ATTN_ERR_NUMERIC,
                                        "%s: %s: a non-finite weight at batch %lld, query %lld, key %lld", fn,
                                        names ? names[l] : "", (long long)b, (long long)i, (long long)j);
                        goto done;
                    }
                    row[j] = row[j] / (double)H + (i == j);
                    sum += row[j];
                }
                for (int64_t j = 0; j < n; j++) row[j] /= sum; /* sum >= 1: weights are not negative */
            }
            if (l == 0) {
                memcpy(r, a, sizeof(double) * nn);
                continue;
            }
            /* r = a r */
            memset(t, 0, sizeof(double) * nn);
            for (int64_t i = 0; i < n; i++) {
                double *ti = t + (size_t)i * (size_t)n;
                for (int64_t k = 0; k < n; k++) {
                    const double aik = a[(size_t)i * (size_t)n + (size_t)k];
                    if (aik == 0) continue;
                    const double *rk = r + (size_t)k * (size_t)n;
                    for (int64_t j = 0; j < n; j++) ti[j] += aik * rk[j];
                }
            }
            double *s = r;
            r = t;
            t = s;
        }
        float *ob = out + (size_t)b * nn;
        for (size_t k = 0; k < nn; k++) ob[k] = (float)r[k];
    }
done:
    attn__free(r);
    attn__free(a);
    attn__free(t);
    return st;
}

attn_status attn_viz_rollout(const float *const *weights, int64_t layers, int64_t batch, int64_t heads, int64_t n,
                             float *out) {
    static const char fn[] = "attn_viz_rollout";
    ATTN_CHECK_NOT_NULL(fn, weights);
    ATTN_CHECK_NOT_NULL(fn, out);
    if (layers < 1 || batch < 1 || heads < 1 || n < 1)
        return attn_error(ATTN_ERR_SHAPE, "%s: layers = %lld, batch = %lld, heads = %lld, n = %lld must be >= 1", fn,
                          (long long)layers, (long long)batch, (long long)heads, (long long)n);
    for (int64_t l = 0; l < layers; l++)
        if (!weights[l]) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: weights[%lld] is NULL", fn, (long long)l);
    int64_t *h = attn__malloc(sizeof(int64_t) * (size_t)layers);
    if (!h) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t l = 0; l < layers; l++) h[l] = heads;
    attn_status st = rollout(fn, weights, h, NULL, layers, batch, n, out);
    attn__free(h);
    return st;
}

attn_status attn_viz_rollout_records(const attn_capture_record *records, size_t count, float *out) {
    static const char fn[] = "attn_viz_rollout_records";
    ATTN_CHECK_NOT_NULL(fn, records);
    ATTN_CHECK_NOT_NULL(fn, out);
    if (count < 1 || count > ((size_t)1 << 20))
        return attn_error(ATTN_ERR_SHAPE, "%s: count = %zu must be in [1, 2^20]", fn, count);
    const int64_t batch = records[0].batch, n = records[0].nk;
    for (size_t l = 0; l < count; l++) {
        const attn_capture_record *r = &records[l];
        const char *name = r->module ? r->module : "";
        if (!r->weights) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s: no weights", fn, name);
        if (r->head0 != 0 || r->heads != r->num_heads || r->heads < 1)
            return attn_error(ATTN_ERR_SHAPE, "%s: %s: holds heads %lld..%lld of %lld; rollout needs every head", fn,
                              name, (long long)r->head0, (long long)(r->head0 + r->heads - 1), (long long)r->num_heads);
        if (r->row0 != 0 || r->rows != r->nq)
            return attn_error(ATTN_ERR_SHAPE, "%s: %s: holds query rows %lld..%lld of %lld; rollout needs every row",
                              fn, name, (long long)r->row0, (long long)(r->row0 + r->rows - 1), (long long)r->nq);
        if (r->nq != r->nk)
            return attn_error(ATTN_ERR_SHAPE, "%s: %s: weights %lld x %lld are not a self-attention's (square)", fn,
                              name, (long long)r->nq, (long long)r->nk);
        if (r->batch != batch || r->nk != n || batch < 1 || n < 1)
            return attn_error(ATTN_ERR_SHAPE, "%s: %s: batch %lld, n %lld differ from %s's batch %lld, n %lld", fn,
                              name, (long long)r->batch, (long long)r->nk, records[0].module ? records[0].module : "",
                              (long long)batch, (long long)n);
    }
    const float **w = attn__malloc(sizeof(*w) * count);
    int64_t *h = attn__malloc(sizeof(int64_t) * count);
    const char **names = attn__malloc(sizeof(*names) * count);
    attn_status st;
    if (!w || !h || !names) {
        st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    } else {
        for (size_t l = 0; l < count; l++) {
            w[l] = records[l].weights;
            h[l] = records[l].heads;
            names[l] = records[l].module ? records[l].module : "";
        }
        st = rollout(fn, w, h, names, (int64_t)count, batch, n, out);
    }
    attn__free(w);
    attn__free(h);
    attn__free(names);
    return st;
}
