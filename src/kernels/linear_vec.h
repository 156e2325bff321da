/* Elementwise kernels of the linear-attention feature maps (elu + 1, FAVOR+'s exp), one table per
 * ISA (linear_vec_ref.c; linear_vec_avx2.c / linear_vec_avx512.c: vector exp of vec_math.h), in
 * the kernel context of attn_active_isa() (registry.h), read at each call. Every element goes through the
 * same instructions wherever it sits (masked tails), so results never depend on how rows are cut. */
#ifndef ATTN_LINEAR_VEC_H
#define ATTN_LINEAR_VEC_H

#include <stdint.h>

typedef struct attn_linear_vec_kernels {
    /* y = x > 0 ? x + 1 : exp(x) (x == y allowed) */
    void (*elu1)(const float *x, float *y, int64_t n);
    /* g = dy * (x > 0 ? 1 : exp(x)) (g == dy allowed) */
    void (*elu1_bwd)(const float *x, const float *dy, float *g, int64_t n);
    /* f = exp(f - sub) * scale */
    void (*expsc)(float *f, int64_t n, float sub, float scale);
    /* f -= sub; returns max f (-inf when n == 0) */
    float (*submax)(float *f, int64_t n, float sub);
    /* t = den != 0 ? y / den : +0 */
    void (*ydiv)(const float *y, const float *den, float *t, int64_t n);
    /* ep = g / den; returns sum ep * y in float (lanes then a fixed reduction) (ep == g allowed) */
    float (*edot)(const float *g, const float *y, float den, float *ep, int64_t n);
    /* no NaN or infinity among x[0 .. n) */
    int (*all_finite)(const float *x, int64_t n);
} attn_linear_vec_kernels;

extern const attn_linear_vec_kernels attn_linear_vec_ref;
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
extern const attn_linear_vec_kernels attn_linear_vec_avx2;
extern const attn_linear_vec_kernels attn_linear_vec_avx512;
#endif

#endif
