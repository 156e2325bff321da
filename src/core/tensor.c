#include "internal.h"

static attn_tensor make_tensor(float *data, int rank, const int64_t *shape) {
    attn_tensor t = {0};
    t.data = data;
    t.rank = rank;
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = s;
        /* a hostile shape saturates instead of overflowing; attn_tensor_numel rejects it */
        if (__builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s)) s = INT64_MAX;
    }
    return t;
}

attn_tensor attn_tensor_1d(float *d, int64_t n0) { return make_tensor(d, 1, (int64_t[]){n0}); }
attn_tensor attn_tensor_2d(float *d, int64_t n0, int64_t n1) {
    return make_tensor(d, 2, (int64_t[]){n0, n1});
}
attn_tensor attn_tensor_3d(float *d, int64_t n0, int64_t n1, int64_t n2) {
    return make_tensor(d, 3, (int64_t[]){n0, n1, n2});
}
attn_tensor attn_tensor_4d(float *d, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    return make_tensor(d, 4, (int64_t[]){n0, n1, n2, n3});
}

static attn_btensor bview(const uint8_t *d, int rank, const int64_t *shape) {
    attn_tensor t = make_tensor(NULL, rank, shape);
    attn_btensor b = {0};
    b.data = d;
    b.rank = rank;
    for (int i = 0; i < rank; i++) {
        b.shape[i] = t.shape[i];
        b.stride[i] = t.stride[i];
    }
    return b;
}
attn_btensor attn_btensor_2d(const uint8_t *d, int64_t n0, int64_t n1) {
    return bview(d, 2, (int64_t[]){n0, n1});
}
attn_btensor attn_btensor_4d(const uint8_t *d, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    return bview(d, 4, (int64_t[]){n0, n1, n2, n3});
}

int attn_mul_overflow(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out); }
int attn_add_overflow(size_t a, size_t b, size_t *out) { return __builtin_add_overflow(a, b, out); }

attn_status attn_tensor_numel(const attn_tensor *t, size_t *numel) {
    ATTN_CHECK_NOT_NULL("attn_tensor_numel", t);
    ATTN_CHECK_NOT_NULL("attn_tensor_numel", numel);
    if (t->rank < 0 || t->rank > ATTN_MAX_RANK)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_tensor_numel: rank %d not in [0, %d]",
                          t->rank, ATTN_MAX_RANK);
    size_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] < 0)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                              "attn_tensor_numel: dimension %d is negative (%lld)", i,
                              (long long)t->shape[i]);
        if (attn_mul_overflow(n, (size_t)t->shape[i], &n))
            return attn_error(ATTN_ERR_OVERFLOW, "attn_tensor_numel: element count overflows");
    }
    *numel = n;
    return ATTN_OK;
}
