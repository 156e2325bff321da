/* Positional encodings: the sinusoidal table, learned embeddings (torch.nn.Embedding), rotary
 * embeddings (RoPE) in the NeoX and GPT-J layouts with linear / NTK scaling, ALiBi slopes.
 *
 *   sinusoidal  pe[p, 2i] = sin(p e^{-2i ln(10000)/d}),  pe[p, 2i+1] = cos(p e^{-2i ln(10000)/d})
 *   embedding   y[t] = W[idx[t]],  dW[idx[t]] += dy[t]
 *   RoPE        (x_a, x_b) <- (x_a cos(a) - x_b sin(a), x_b cos(a) + x_a sin(a)),
 *               a = (p / f) base'^(-2i / r); backward: the same with -a (a rotation's inverse is
 *               its transpose, so the gradient rotates back)
 *   ALiBi       slope_h = 2^(-8 (h+1) / n) for n a power of two, else the reference's interleave.
 * Angles and tables are computed in double and rounded once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nn_internal.h"

attn_status attn_sinusoidal_table(float *pe, int64_t n_positions, int64_t d_model) {
    static const char fn[] = "attn_sinusoidal_table";
    if (n_positions < 0 || d_model < 1 || n_positions > ((int64_t)1 << 40) / d_model)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: need n_positions >= 0 and d_model >= 1 (got %lld, %lld)", fn,
                          (long long)n_positions, (long long)d_model);
    if (n_positions > 0) ATTN_CHECK_NOT_NULL(fn, pe);
    const double k = -log(10000.0) / (double)d_model;
    for (int64_t p = 0; p < n_positions; p++)
        for (int64_t c = 0; c < d_model; c++) {
            const double a = (double)p * exp((double)(c & ~(int64_t)1) * k);
            pe[p * d_model + c] = (float)((c & 1) ? cos(a) : sin(a));
        }
    return ATTN_OK;
}

attn_status attn_posenc_add(float *x, const float *table, int64_t table_rows, int64_t batch, int64_t n, int64_t d,
                            int64_t pos0) {
    static const char fn[] = "attn_posenc_add";
    if (batch < 0 || n < 0 || d < 1 || pos0 < 0 || table_rows < 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: need batch, n, pos0, table_rows >= 0 and d >= 1 (batch %lld, n %lld, d %lld, pos0 %lld)",
                          fn, (long long)batch, (long long)n, (long long)d, (long long)pos0);
    if (pos0 > table_rows - n)
        return attn_error(ATTN_ERR_SHAPE, "%s: positions [%lld, %lld) exceed the table's %lld rows", fn,
                          (long long)pos0, (long long)(pos0 + n), (long long)table_rows);
    if (batch == 0 || n == 0) return ATTN_OK;
    ATTN_CHECK_NOT_NULL(fn, x);
    ATTN_CHECK_NOT_NULL(fn, table);
    for (int64_t b = 0; b < batch; b++) {
        attn_status st = attn_residual_add(x + b * n * d, table + pos0 * d, x + b * n * d, n * d);
        if (st) return attn_nn_wrap_error(st, fn);
    }
    return ATTN_OK;
}

/* ---- embedding ---- */

struct attn_embedding {
    int64_t num, dim, padding_idx;
    nn_store store;
    float *w, *gw;
};

attn_status attn_embedding_create(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx,
                                  attn_embedding **out) {
    static const char fn[] = "attn_embedding_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    if (num_embeddings < 1 || embedding_dim < 1 || num_embeddings > ((int64_t)1 << 40) / embedding_dim)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: need num_embeddings, embedding_dim >= 1 (got %lld, %lld)", fn,
                          (long long)num_embeddings, (long long)embedding_dim);
    if (padding_idx >= num_embeddings)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: padding_idx %lld outside [0, %lld)", fn,
                          (long long)padding_idx, (long long)num_embeddings);
    attn_embedding *e = attn__calloc(1, sizeof *e);
    if (!e) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    e->num = num_embeddings;
    e->dim = embedding_dim;
    e->padding_idx = padding_idx < 0 ? -1 : padding_idx;
    nn_pdesc d = {"weight", 2, {num_embeddings, embedding_dim, 0, 0}, NN_INIT_NORMAL, 1.0, e->padding_idx + 1};
    float *gw;
    attn_status st = attn_nn_store_create(&e->store, fn, &d, 1, &e->w, &gw);
    if (st) {
        attn__free(e);
        return st;
    }
    e->gw = gw;
    *out = e;
    return ATTN_OK;
}

void attn_embedding_free(attn_embedding *e) {
    if (!e) return;
    attn_nn_store_free(&e->store);
    attn__free(e);
}

const attn_params *attn_embedding_params(const attn_embedding *e) { return e ? e->store.list : NULL; }

static attn_status check_indices(const char *fn, const attn_embedding *e, const int64_t *idx, int64_t n) {
    ATTN_CHECK_NOT_NULL(fn, e);
    if (n < 0) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: n = %lld is negative", fn, (long long)n);
    if (n > 0) ATTN_CHECK_NOT_NULL(fn, idx);
    for (int64_t t = 0; t < n; t++)
        if (idx[t] < 0 || idx[t] >= e->num)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: indices[%lld] = %lld outside [0, %lld)", fn, (long long)t,
                              (long long)idx[t], (long long)e->num);
    return ATTN_OK;
}

attn_status attn_embedding_forward(const attn_embedding *e, const int64_t *indices, int64_t n, float *out) {
    static const char fn[] = "attn_embedding_forward";
    attn_status st = check_indices(fn, e, indices, n);
    if (st) return st;
    if (n > 0) ATTN_CHECK_NOT_NULL(fn, out);
    for (int64_t t = 0; t < n; t++)
        memcpy(out + t * e->dim, e->w + indices[t] * e->dim, sizeof(float) * (size_t)e->dim);
    return ATTN_OK;
}

attn_status attn_embedding_backward(attn_embedding *e, const int64_t *indices, int64_t n, const float *dout) {
    static const char fn[] = "attn_embedding_backward";
    attn_status st = check_indices(fn, e, indices, n);
    if (st) return st;
    if (n > 0) ATTN_CHECK_NOT_NULL(fn, dout);
    /* tokens in order: a row hit several times sums its gradients in a fixed order */
    for (int64_t t = 0; t < n; t++) {
        if (indices[t] == e->padding_idx) continue;
        float *g = e->gw + indices[t] * e->dim;
        const float *dy = dout + t * e->dim;
        for (int64_t c = 0; c < e->dim; c++) g[c] += dy[c];
    }
    return ATTN_OK;
}

attn_status attn_embedding_add_positions(const attn_embedding *e, float *x, int64_t batch, int64_t n, int64_t pos0) {
    ATTN_CHECK_NOT_NULL("attn_embedding_add_positions", e);
    attn_status st = attn_posenc_add(x, e->w, e->num, batch, n, e->dim, pos0);
    return st ? attn_nn_wrap_error(st, "attn_embedding_add_positions") : ATTN_OK;
}

attn_status attn_embedding_positions_backward(attn_embedding *e, const float *dy, int64_t batch, int64_t n,
                                              int64_t pos0) {
    static const char fn[] = "attn_embedding_positions_backward";
    ATTN_CHECK_NOT_NULL(fn, e);
    if (batch < 0 || n < 0 || pos0 < 0 || pos0 > e->num - n)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: positions [%lld, %lld) x batch %lld outside the %lld-row table", fn, (long long)pos0,
                          (long long)(pos0 + n), (long long)batch, (long long)e->num);
    if (batch > 0 && n > 0) ATTN_CHECK_NOT_NULL(fn, dy);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < n; t++) {
            if (pos0 + t == e->padding_idx) continue;
            float *g = e->gw + (pos0 + t) * e->dim;
            const float *s = dy + (b * n + t) * e->dim;
            for (int64_t c = 0; c < e->dim; c++) g[c] += s[c];
        }
    return ATTN_OK;
}

/* ---- RoPE ---- */

attn_rope_config attn_rope_config_default(int64_t head_dim) {
    attn_rope_config c;
    memset(&c, 0, sizeof c);
    c.head_dim = head_dim;
    c.base = 10000.0;
    c.layout = ATTN_ROPE_NEOX;
    c.scaling = ATTN_ROPE_SCALING_NONE;
    c.factor = 1.0;
    c.low_freq_factor = 1.0;
    c.high_freq_factor = 4.0;
    c.original_max_positions = 8192;
    return c;
}

/* theta_i of pair i, with Llama 3's frequency-dependent scaling (positions.h) when configured. */
static double rope_theta(const attn_rope_config *c, double base, int64_t i, int64_t rd) {
    const double theta = pow(base, -2.0 * (double)i / (double)rd);
    if (c->scaling != ATTN_ROPE_SCALING_LLAMA3) return theta;
    const double L = (double)c->original_max_positions, w = 2.0 * 3.14159265358979323846 / theta;
    if (w < L / c->high_freq_factor) return theta;
    if (w > L / c->low_freq_factor) return theta / c->factor;
    const double s = (L / w - c->low_freq_factor) / (c->high_freq_factor - c->low_freq_factor);
    return (1.0 - s) * theta / c->factor + s * theta;
}

static attn_status rope_apply(const char *fn, const attn_rope_config *c, attn_tensor *x, int64_t pos0,
                              const int64_t *positions, double sign) {
    ATTN_CHECK_NOT_NULL(fn, c);
    ATTN_CHECK_NOT_NULL(fn, x);
    attn_status tst = attn_tensor_check_type(fn, "x", x, ATTN_TYPES(ATTN_TYPE_F32));
    if (tst) return tst;
    const int64_t rd = c->rotary_dim ? c->rotary_dim : c->head_dim;
    if (c->head_dim < 2 || rd < 2 || rd % 2 || rd > c->head_dim)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: rotary_dim (%lld) must be even, >= 2 and <= head_dim (%lld)",
                          fn, (long long)rd, (long long)c->head_dim);
    if (!(c->base > 1) || !isfinite(c->base))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: base must be finite and > 1 (got %g)", fn, c->base);
    if ((int)c->layout < 0 || c->layout > ATTN_ROPE_INTERLEAVED || (int)c->scaling < 0 ||
        c->scaling > ATTN_ROPE_SCALING_LLAMA3)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: unknown layout %d or scaling %d", fn, (int)c->layout,
                          (int)c->scaling);
    if (c->scaling == ATTN_ROPE_SCALING_NTK && rd <= 2)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: NTK scaling needs rotary_dim > 2 (base * factor^(r / (r - 2)))", fn);
    if (c->scaling != ATTN_ROPE_SCALING_NONE && (!(c->factor > 0) || !isfinite(c->factor)))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: scaling factor must be finite and > 0 (got %g)", fn,
                          c->factor);
    if (c->scaling == ATTN_ROPE_SCALING_LLAMA3 &&
        (!(c->low_freq_factor > 0) || !(c->high_freq_factor > c->low_freq_factor) || !isfinite(c->high_freq_factor) ||
         c->original_max_positions < 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: Llama 3 scaling needs 0 < low_freq_factor (%g) < high_freq_factor (%g) and "
                          "original_max_positions (%lld) >= 1",
                          fn, c->low_freq_factor, c->high_freq_factor, (long long)c->original_max_positions);
    if (x->rank != 4 || x->shape[3] != c->head_dim)
        return attn_error(ATTN_ERR_SHAPE, "%s: x must be [B, H, N, head_dim = %lld], got rank %d, last dim %lld", fn,
                          (long long)c->head_dim, x->rank, x->rank >= 1 ? (long long)x->shape[x->rank - 1] : 0LL);
    size_t numel;
    attn_status st = attn_tensor_numel(x, &numel);
    if (st) return attn_nn_wrap_error(st, fn);
    if (numel == 0) return ATTN_OK;
    ATTN_CHECK_NOT_NULL(fn, x->data);
    if (!positions && pos0 < 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: pos0 = %lld is negative", fn, (long long)pos0);
    const int64_t B = x->shape[0], H = x->shape[1], N = x->shape[2], half = rd / 2;
    double base = c->base, scale = 1.0;
    if (c->scaling == ATTN_ROPE_SCALING_LINEAR) scale = 1.0 / c->factor;
    if (c->scaling == ATTN_ROPE_SCALING_NTK) base *= pow(c->factor, (double)rd / (double)(rd - 2));
        /* one (cos, sin) row per position, reused across batch and heads: tasks are rows of N */
#pragma omp parallel for schedule(static) num_threads(attn_threads_for(N)) if (B * H * N * rd > 65536)
    for (int64_t n = 0; n < N; n++) {
        const double p = (double)(positions ? positions[n] : pos0 + n) * scale;
        for (int64_t i = 0; i < half; i++) {
            const double a = p * rope_theta(c, base, i, rd);
            const float cs = (float)cos(a), sn = (float)(sign * sin(a));
            const int64_t ia = c->layout == ATTN_ROPE_NEOX ? i : 2 * i;
            const int64_t ib = c->layout == ATTN_ROPE_NEOX ? i + half : 2 * i + 1;
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < H; h++) {
                    float *r = x->data + b * x->stride[0] + h * x->stride[1] + n * x->stride[2];
                    const float xa = r[ia * x->stride[3]], xb = r[ib * x->stride[3]];
                    r[ia * x->stride[3]] = xa * cs - xb * sn;
                    r[ib * x->stride[3]] = xb * cs + xa * sn;
                }
        }
    }
    return ATTN_OK;
}

attn_status attn_rope_forward(const attn_rope_config *cfg, attn_tensor *x, int64_t pos0, const int64_t *positions) {
    return rope_apply("attn_rope_forward", cfg, x, pos0, positions, 1.0);
}

attn_status attn_rope_backward(const attn_rope_config *cfg, attn_tensor *dx, int64_t pos0, const int64_t *positions) {
    return rope_apply("attn_rope_backward", cfg, dx, pos0, positions, -1.0);
}

/* ---- ALiBi ---- */

attn_status attn_alibi_slopes(float *slopes, int64_t num_heads) {
    static const char fn[] = "attn_alibi_slopes";
    if (num_heads < 1 || num_heads > (1 << 20))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: num_heads = %lld must be in [1, 2^20]", fn,
                          (long long)num_heads);
    ATTN_CHECK_NOT_NULL(fn, slopes);
    int64_t m = 1;
    while (m * 2 <= num_heads) m *= 2;
    /* the closest power of two m: 2^(-8 (h+1) / m); then odd-numbered slopes of 2m:
     * 2^(-8 (2k+1) / (2m)), k = 0 .. n - m - 1 */
    for (int64_t h = 0; h < m; h++) slopes[h] = (float)pow(2.0, -8.0 * (double)(h + 1) / (double)m);
    for (int64_t k = 0; k < num_heads - m; k++)
        slopes[m + k] = (float)pow(2.0, -8.0 * (double)(2 * k + 1) / (double)(2 * m));
    return ATTN_OK;
}
