#include <string.h>

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
attn_tensor attn_tensor_2d(float *d, int64_t n0, int64_t n1) { return make_tensor(d, 2, (int64_t[]){n0, n1}); }
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
attn_btensor attn_btensor_2d(const uint8_t *d, int64_t n0, int64_t n1) { return bview(d, 2, (int64_t[]){n0, n1}); }
attn_btensor attn_btensor_4d(const uint8_t *d, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    return bview(d, 4, (int64_t[]){n0, n1, n2, n3});
}

int attn_mul_overflow(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out); }
int attn_add_overflow(size_t a, size_t b, size_t *out) { return __builtin_add_overflow(a, b, out); }

attn_status attn_tensor_numel(const attn_tensor *t, size_t *numel) {
    ATTN_CHECK_NOT_NULL("attn_tensor_numel", t);
    ATTN_CHECK_NOT_NULL("attn_tensor_numel", numel);
    if (t->rank < 0 || t->rank > ATTN_MAX_RANK)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_tensor_numel: rank %d not in [0, %d]", t->rank,
                          ATTN_MAX_RANK);
    size_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] < 0)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_tensor_numel: dimension %d is negative (%lld)", i,
                              (long long)t->shape[i]);
        if (attn_mul_overflow(n, (size_t)t->shape[i], &n))
            return attn_error(ATTN_ERR_OVERFLOW, "attn_tensor_numel: element count overflows");
    }
    *numel = n;
    return ATTN_OK;
}

attn_tensor attn_tensor_2d_typed(void *d, attn_type dtype, int64_t n0, int64_t n1) {
    attn_tensor t = make_tensor(NULL, 2, (int64_t[]){n0, n1});
    t.ptr = d;
    t.dtype = dtype;
    return t;
}
attn_tensor attn_tensor_4d_typed(void *d, attn_type dtype, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    attn_tensor t = make_tensor(NULL, 4, (int64_t[]){n0, n1, n2, n3});
    t.ptr = d;
    t.dtype = dtype;
    return t;
}

const char *attn_type_name(attn_type dtype) {
    switch (dtype) {
    case ATTN_TYPE_F32: return "f32";
    case ATTN_TYPE_BF16: return "bf16";
    case ATTN_TYPE_F16: return "f16";
    }
    return NULL;
}

size_t attn_type_size(attn_type dtype) {
    switch (dtype) {
    case ATTN_TYPE_F32: return 4;
    case ATTN_TYPE_BF16:
    case ATTN_TYPE_F16: return 2;
    }
    return 0;
}

attn_status attn_tensor_check_type(const char *fn, const char *name, const attn_tensor *t, unsigned allowed) {
    if (!t) return ATTN_OK;
    const char *tn = attn_type_name(t->dtype);
    if (!tn)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s has dtype %d, not an attn_type", fn ? fn : "?",
                          name ? name : "tensor", (int)t->dtype);
    if (allowed & ATTN_TYPES(t->dtype)) return ATTN_OK;
    char list[64] = "";
    size_t at = 0;
    for (int d = 0; d < ATTN_TYPE_COUNT; d++)
        if (allowed & ATTN_TYPES(d)) {
            const char *dn = attn_type_name((attn_type)d);
            const size_t len = strlen(dn);
            if (at + len + 3 >= sizeof list) break;
            if (at) {
                memcpy(list + at, ", ", 2);
                at += 2;
            }
            memcpy(list + at, dn, len + 1);
            at += len;
        }
    return attn_error(ATTN_ERR_UNSUPPORTED, "%s: %s has dtype %s, which it has no kernel for (takes %s)", fn ? fn : "?",
                      name ? name : "tensor", tn, at ? list : "none");
}

/* Round to nearest even on the discarded half; NaN stays a quiet NaN of the same sign. */
attn_bf16 attn_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (attn_bf16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (attn_bf16)(u >> 16);
}

float attn_bf16_to_f32(attn_bf16 x) {
    const uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

attn_f16 attn_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, au = u & 0x7fffffffu;
    if (au > 0x7f800000u) return (attn_f16)(sign | 0x7e00u | ((au >> 13) & 0x3ffu)); /* NaN */
    if (au >= 0x477ff000u) return (attn_f16)(sign | 0x7c00u);                        /* rounds to >= 65536: inf */
    if (au < 0x38800000u) {                                                          /* below 2^-14: subnormal or 0 */
        if (au < 0x33000000u) return (attn_f16)sign; /* below half the smallest subnormal */
        const uint32_t e = au >> 23, m = (au & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e; /* value = m 2^(e - 150), half subnormal unit 2^-24 */
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (attn_f16)(sign | r);
    }
    uint32_t r = au - 0x38000000u; /* rebias 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (attn_f16)(sign | (r >> 13));
}

float attn_f16_to_f32(attn_f16 x) {
    const uint32_t sign = (uint32_t)(x & 0x8000u) << 16, e = (x >> 10) & 0x1fu, m = x & 0x3ffu;
    uint32_t u;
    if (e == 0x1f)
        u = sign | 0x7f800000u | (m << 13);
    else if (e)
        u = sign | ((e + 112) << 23) | (m << 13);
    else if (!m)
        u = sign;
    else { /* subnormal: m 2^-24 */
        float f = (float)m * 5.9604644775390625e-8f;
        memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

attn_status attn_convert(const void *src, attn_type st, void *dst, attn_type dt, size_t n) {
    if (!attn_type_name(st) || !attn_type_name(dt))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_convert: dtype %d -> %d outside the enum", (int)st, (int)dt);
    if (n && (!src || !dst)) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_convert: src or dst is NULL");
    for (size_t i = 0; i < n; i++) {
        float f;
        switch (st) {
        case ATTN_TYPE_F32: f = ((const float *)src)[i]; break;
        case ATTN_TYPE_BF16: f = attn_bf16_to_f32(((const uint16_t *)src)[i]); break;
        default: f = attn_f16_to_f32(((const uint16_t *)src)[i]); break;
        }
        switch (dt) {
        case ATTN_TYPE_F32: ((float *)dst)[i] = f; break;
        case ATTN_TYPE_BF16: ((uint16_t *)dst)[i] = attn_f32_to_bf16(f); break;
        default: ((uint16_t *)dst)[i] = attn_f32_to_f16(f); break;
        }
    }
    return ATTN_OK;
}
