/* Row-wise / elementwise kernel internals shared by the driver (ops.c) and the per-ISA kernels
 * (ops_ref.c, ops_avx2.c, ops_avx512.c).
 *
 * The driver checks arguments, handles the trivial cases (empty sizes, dropout p == 0 / p == 1)
 * and splits the work into items whose boundaries depend only on the sizes, never on the thread
 * count; it then calls one of these kernels per item through the table of attn_active_isa():
 *   - row kernels (softmax, layernorm) see one row of n floats;
 *   - elementwise kernels see a chunk of ATTN_OPS_CHUNK floats (the last one shorter);
 *   - column kernels (bias / layernorm parameter gradients) see a block of columns [c0, c1) of
 *     ATTN_OPS_COLS columns and sum it over every row in increasing row order, so each output
 *     element is owned by exactly one item and its summation order is fixed.
 * The vector kernels compute every element with the same instruction sequence whatever its
 * position (tails use masked loads/stores, never a scalar fallback), so where the driver cuts a
 * range never changes a result: results are bitwise identical for any thread count.
 *
 * Kernels trust their arguments (the driver validated them) and n >= 1 unless stated. */
#ifndef ATTN_OPS_INTERNAL_H
#define ATTN_OPS_INTERNAL_H

#include <stdint.h>

#include "attn/kernels.h"

#define ATTN_OPS_CHUNK 16384 /* floats per elementwise work item (a multiple of 64) */
#define ATTN_OPS_COLS 64     /* columns per column-sum work item */

/* Philox-4x32-10 constants (Random123). */
#define ATTN_PHILOX_M0 0xD2511F53u
#define ATTN_PHILOX_M1 0xCD9E8D57u
#define ATTN_PHILOX_W0 0x9E3779B9u
#define ATTN_PHILOX_W1 0xBB67AE85u

/* AdamW's per-step constants, in double: sign (-1 with maximize), decay = 1 - lr wd, b1 and
 * omb1 = 1 - b1, b2 and omb2 = 1 - b2, step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t),
 * eps. Per element, from the float32 p, g, m, v (vmax nullable: amsgrad), every operation an
 * IEEE double operation in this order, each stored value rounded once to float32:
 *   g' = sign g;  pd = p decay;  m <- f32(b1 m + omb1 g');  v <- f32(b2 v + (omb2 g') g');
 *   vd = vmax ? (vmax <- (vmax > v ? vmax : v)) : v;
 *   p <- f32(pd - (step_size m) / (sqrt(vd) / bc2_sqrt + eps))
 * The vector kernels evaluate exactly these operations lane by lane, never fused (optim_*.c are
 * compiled with -ffp-contract=off), so every ISA gives the reference's bits. */
typedef struct attn_adamw_coef {
    double sign, decay, b1, omb1, b2, omb2, step_size, bc2_sqrt, eps;
} attn_adamw_coef;

typedef struct attn_ops_kernels {
    const char *name;

    /* ---- one row of n floats ---- */
    /* y = softmax(x); x == y allowed. A row whose maximum is -inf gives zeros. */
    void (*softmax_fwd)(const float *x, float *y, int64_t n);
    /* dx = y * (dy - dot(dy, y)); dx == dy allowed. */
    void (*softmax_bwd)(const float *y, const float *dy, float *dx, int64_t n);
    /* y = (x - mean) * rstd * gamma + beta; gamma / beta may be NULL; *mean, *rstd written.
     * x == y allowed. n == 0 gives mean 0, rstd 1 / sqrt(eps). */
    void (*layernorm_fwd)(const float *x, const float *gamma, const float *beta, float *y, float *mean, float *rstd,
                          int64_t n, float eps);
    /* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma (dy when gamma is
     * NULL), xhat = (x - mean) * rstd. dx == dy allowed. */
    void (*layernorm_bwd)(const float *x, const float *gamma, float mean, float rstd, const float *dy, float *dx,
                          int64_t n);
    /* y = w * (x * inv), inv = f32(1 / sqrt(sum(x^2) / n + eps)), the sum in double (RMSNorm as
     * Llama has it). x == y allowed. No public entry: src/models/llama.c calls it row by row. */
    void (*rms_norm_fwd)(const float *x, const float *w, float *y, int64_t n, double eps);

    /* ---- columns [c0, c1) of a [rows, n] matrix, summed over rows 0..rows-1 in order ---- */
    /* dgamma[c] += sum_r dy[r, c] * (x[r, c] - mean[r]) * rstd[r]; dbeta[c] += sum_r dy[r, c].
     * Either output may be NULL. */
    void (*layernorm_param_grad)(const float *x, const float *mean, const float *rstd, const float *dy, float *dgamma,
                                 float *dbeta, int64_t rows, int64_t n, int64_t c0, int64_t c1);
    /* out[c] += sum_r m[r, c]. */
    void (*col_sum)(const float *m, float *out, int64_t rows, int64_t n, int64_t c0, int64_t c1);

    /* ---- n contiguous floats (y == x / dx == dy allowed) ---- */
    void (*gelu_fwd)(const float *x, float *y, int64_t n, attn_gelu_approx approx);
    void (*gelu_bwd)(const float *x, const float *dy, float *dx, int64_t n, attn_gelu_approx approx);
    void (*relu_fwd)(const float *x, float *y, int64_t n);
    void (*relu_bwd)(const float *x, const float *dy, float *dx, int64_t n);
    /* y = a + b (residual add; bias add row by row). */
    void (*add)(const float *a, const float *b, float *y, int64_t n);
    /* y = silu(g) * u = g / (1 + e^-g) * u (SwiGLU's gate), in float; y may be g or u. No public
     * entry: src/models/llama.c calls it row by row. */
    void (*silu_gate)(const float *g, const float *u, float *y, int64_t n);
    /* Dropout of stream elements [first, first + n) (x, y, mask point at element `first`),
     * 0 < p < 1: keep element i when uniform(i) = (word >> 8) * 2^-24 >= p, which is exactly
     * (word >> 8) >= threshold with threshold = ceil(p * 2^24) (the vector kernels use that
     * form, the reference the definition); y = kept ? x * scale : 0; mask (nullable) = kept.
     * x == y allowed. */
    void (*dropout)(const float *x, float *y, uint8_t *mask, int64_t n, uint64_t first, float p, uint32_t threshold,
                    float scale, uint64_t seed, uint64_t offset);
    /* One AdamW update of n elements (optim_*.c; the formula in src/train/optim.c). */
    void (*adamw)(float *p, const float *g, float *m, float *v, float *vmax, int64_t n, const attn_adamw_coef *c);
} attn_ops_kernels;

void attn_adamw_ref(float *p, const float *g, float *m, float *v, float *vmax, int64_t n, const attn_adamw_coef *c);
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
void attn_adamw_avx2(float *p, const float *g, float *m, float *v, float *vmax, int64_t n, const attn_adamw_coef *c);
void attn_adamw_avx512(float *p, const float *g, float *m, float *v, float *vmax, int64_t n, const attn_adamw_coef *c);
#endif

extern const attn_ops_kernels attn_ops_ref;
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
extern const attn_ops_kernels attn_ops_avx2;
extern const attn_ops_kernels attn_ops_avx512;
#endif

/* The table for attn_active_isa() (read at each call: attn_force_isa() switches it). */
const attn_ops_kernels *attn_ops_active(void);

/* One Philox-4x32-10 block for stream element block `block` (elements 4*block .. 4*block+3). */
static inline void attn_philox_block(uint64_t block, uint64_t seed, uint64_t offset, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32);
    uint32_t c2 = (uint32_t)offset, c3 = (uint32_t)(offset >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)ATTN_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)ATTN_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += ATTN_PHILOX_W0;
        k1 += ATTN_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

#endif
