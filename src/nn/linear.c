/* Linear layer, torch.nn.functional.linear, with PyTorch's weight layout W [out, in]:
 *   forward   y = x W^T + b                         x [rows, in], y [rows, out]
 *   backward  dx = dy W,  dW += dy^T x,  db += sum_rows dy
 * Three SGEMMs (attn_sgemm, deterministic for any thread count) and a column sum; in bf16
 * precision three bf16 GEMMs (attn_gemm_bf16_from_f32, also deterministic) that round x, W and dy
 * to bf16 while packing them. */
#include "nn_internal.h"

#include "core/alloc.h"
#include "kernels/bf16_internal.h"

static _Thread_local attn_precision precision;

attn_precision attn_nn_precision(void) { return precision; }

attn_precision attn_nn_precision_set(attn_precision p) {
    const attn_precision prev = precision;
    precision = p;
    return prev;
}

const char *attn_precision_name(attn_precision p) {
    switch (p) {
    case ATTN_PRECISION_FP32: return "fp32";
    case ATTN_PRECISION_BF16: return "bf16";
    }
    return NULL;
}

/* Chunks of the rounding: 128 KB of floats, enough to amortise a thread's start. */
#define ROUND_CHUNK ((size_t)1 << 15)

void attn_nn_round_bf16(const float *src, attn_bf16 *dst, size_t n) {
    const attn_bf16_kernels *k = attn_bf16_kernels_active();
    const int64_t chunks = (int64_t)((n + ROUND_CHUNK - 1) / ROUND_CHUNK);
#pragma omp parallel for schedule(static) num_threads(attn_threads_for(chunks)) if (chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        const size_t i0 = (size_t)c * ROUND_CHUNK, len = n - i0 < ROUND_CHUNK ? n - i0 : ROUND_CHUNK;
        k->round_row((int)len, src + i0, NULL, dst + i0);
    }
}

/* bf16 workspace: the largest of the three GEMMs' own (the operands are rounded while packed). */
static size_t bf16_ws(int64_t rows, int64_t in, int64_t out) {
    size_t g = attn_gemm_bf16_workspace_size(rows, out, in);
    g = nn_max(g, attn_gemm_bf16_workspace_size(rows, in, out));
    return nn_max(g, attn_gemm_bf16_workspace_size(out, in, rows));
}

size_t attn_nn_linear_ws(int64_t rows, int64_t in, int64_t out) {
    if (precision == ATTN_PRECISION_BF16) return bf16_ws(rows, in, out);
    size_t s = attn_sgemm_workspace_size(rows, out, in);
    s = nn_max(s, attn_sgemm_workspace_size(rows, in, out));
    return nn_max(s, attn_sgemm_workspace_size(out, in, rows));
}

static attn_status check_sizes(const char *fn, int64_t rows, int64_t in, int64_t out) {
    if (rows < 0 || in < 1 || out < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: need rows >= 0 and in_features, out_features >= 1 (rows %lld, in %lld, out %lld)", fn,
                          (long long)rows, (long long)in, (long long)out);
    size_t t;
    if (attn_mul_overflow((size_t)rows, (size_t)(in > out ? in : out), &t) || t > (size_t)INT64_MAX / 4)
        return attn_error(ATTN_ERR_OVERFLOW, "%s: rows x features overflows (rows %lld, in %lld, out %lld)", fn,
                          (long long)rows, (long long)in, (long long)out);
    return ATTN_OK;
}

/* ---- frozen weights' bf16 panels ---- */

typedef struct bf16_weight {
    const float *w;
    int64_t out, in;
    attn_bf16_packed_b pb;
} bf16_weight;

struct attn_nn_bf16_weights {
    bf16_weight *e;
    size_t n, cap;
};

static _Thread_local attn_nn_bf16_weights *weights_in_use;

attn_nn_bf16_weights *attn_nn_bf16_weights_create(void) { return attn__calloc(1, sizeof(attn_nn_bf16_weights)); }

void attn_nn_bf16_weights_free(attn_nn_bf16_weights *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) attn_bf16_packed_b_free(&c->e[i].pb);
    attn__free(c->e);
    attn__free(c);
}

size_t attn_nn_bf16_weights_count(const attn_nn_bf16_weights *c) { return c ? c->n : 0; }

attn_nn_bf16_weights *attn_nn_bf16_weights_use(attn_nn_bf16_weights *c) {
    attn_nn_bf16_weights *prev = weights_in_use;
    weights_in_use = c;
    return prev;
}

/* W [out, in]'s panels in c, packed at the first meeting; NULL where they cannot be had (out of
 * memory: the product then packs W itself, as without c). A model holds a few dozen weights, and
 * each lookup is beside a product of rows x in x out multiply-adds, so a linear search serves. */
static const attn_bf16_packed_b *bf16_weight_panels(attn_nn_bf16_weights *c, const float *w, int64_t out, int64_t in) {
    for (size_t i = 0; i < c->n; i++)
        if (c->e[i].w == w && c->e[i].out == out && c->e[i].in == in) return &c->e[i].pb;
    if (c->n == c->cap) {
        const size_t cap = c->cap ? 2 * c->cap : 16;
        bf16_weight *e = attn__realloc(c->e, cap * sizeof *e);
        if (!e) return NULL;
        c->e = e, c->cap = cap;
    }
    bf16_weight *e = &c->e[c->n];
    if (attn_bf16_pack_b(ATTN_TRANS, out, in, w, in, &e->pb)) return NULL;
    e->w = w, e->out = out, e->in = in;
    return &c->e[c->n++].pb;
}

attn_status attn_nn_linear_fwd(const char *fn, const float *x, const float *w, const float *b, float *y, int64_t rows,
                               int64_t in, int64_t out, void *ws, size_t bytes) {
    if (rows == 0) return ATTN_OK;
    attn_status st;
    if (precision == ATTN_PRECISION_BF16) {
        const attn_bf16_packed_b *pb = weights_in_use ? bf16_weight_panels(weights_in_use, w, out, in) : NULL;
        st = attn_gemm_bf16_from_f32_packed(ATTN_NO_TRANS, ATTN_TRANS, rows, out, in, x, in, w, in, pb, 0, y, out, ws,
                                            bytes);
    } else {
        st = attn_sgemm(ATTN_NO_TRANS, ATTN_TRANS, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out, ws, bytes);
    }
    if (!st && b) st = attn_bias_add(y, b, y, rows, out);
    if (st) return attn_nn_wrap_error(st, fn);
    return ATTN_OK;
}

attn_status attn_nn_linear_bwd(const char *fn, const float *x, const float *w, const float *dy, float *dx, int acc_dx,
                               float *dw, float *db, int64_t rows, int64_t in, int64_t out, void *ws, size_t bytes) {
    attn_status st = ATTN_OK;
    if (rows == 0) return ATTN_OK;
    if (precision == ATTN_PRECISION_BF16) {
        if (dx)
            st = attn_gemm_bf16_from_f32(ATTN_NO_TRANS, ATTN_NO_TRANS, rows, in, out, dy, out, w, in, acc_dx, dx, in,
                                         ws, bytes);
        /* dW accumulates in float onto the float gradient */
        if (!st && dw)
            st =
                attn_gemm_bf16_from_f32(ATTN_TRANS, ATTN_NO_TRANS, out, in, rows, dy, out, x, in, 1, dw, in, ws, bytes);
    } else if (dx) {
        st = attn_sgemm(ATTN_NO_TRANS, ATTN_NO_TRANS, rows, in, out, 1.0f, dy, out, w, in, acc_dx ? 1.0f : 0.0f, dx, in,
                        ws, bytes);
    }
    if (!st && dw && precision != ATTN_PRECISION_BF16)
        st = attn_sgemm(ATTN_TRANS, ATTN_NO_TRANS, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in, ws, bytes);
    if (!st && db) st = attn_bias_backward(dy, db, rows, out);
    if (st) return attn_nn_wrap_error(st, fn);
    return ATTN_OK;
}

size_t attn_linear_workspace_size(int64_t rows, int64_t in_features, int64_t out_features) {
    if (rows < 0 || in_features < 1 || out_features < 1) return 0;
    return attn_nn_linear_ws(rows, in_features, out_features);
}

attn_status attn_linear_forward(const float *x, const float *weight, const float *bias, float *y, int64_t rows,
                                int64_t in_features, int64_t out_features, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_linear_forward";
    attn_status st = check_sizes(fn, rows, in_features, out_features);
    if (st) return st;
    if (rows > 0) {
        ATTN_CHECK_NOT_NULL(fn, x);
        ATTN_CHECK_NOT_NULL(fn, weight);
        ATTN_CHECK_NOT_NULL(fn, y);
    }
    return attn_nn_linear_fwd(fn, x, weight, bias, y, rows, in_features, out_features, workspace, workspace_bytes);
}

attn_status attn_linear_backward(const float *x, const float *weight, const float *dy, float *dx, int accumulate_dx,
                                 float *dweight, float *dbias, int64_t rows, int64_t in_features, int64_t out_features,
                                 void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_linear_backward";
    attn_status st = check_sizes(fn, rows, in_features, out_features);
    if (st) return st;
    if (rows > 0) {
        ATTN_CHECK_NOT_NULL(fn, dy);
        if (dx) ATTN_CHECK_NOT_NULL(fn, weight);
        if (dweight) ATTN_CHECK_NOT_NULL(fn, x);
    }
    if (dx && (dx == x || dx == dy || dx == weight))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: dx must not alias x, dy or weight", fn);
    return attn_nn_linear_bwd(fn, x, weight, dy, dx, accumulate_dx, dweight, dbias, rows, in_features, out_features,
                              workspace, workspace_bytes);
}
