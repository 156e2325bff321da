/* Portable decode kernels (contract in decode_internal.h): the same blocks and online softmax as
 * the vector kernels, in plain C, one summation chain per dot product. */
#include <math.h>
#include <string.h>

#include "decode_kernels.h"
#include "kernels/bf16_internal.h"

#define BK ATTN_DECODE_BK

static inline float elem(const void *p, int64_t i, int bf16) {
    return bf16 ? attn_bf16_f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void chunk(const attn_decode_job *jb, int bf16) {
    const int g = jb->g;
    float s[ATTN_DECODE_MAXG][BK];
    attn_decode_rows_init(jb);
    for (int64_t j0 = 0; j0 < jb->n; j0 += BK) {
        const int nb = (int)(jb->n - j0 < BK ? jb->n - j0 : BK);
        for (int j = 0; j < nb; j++) {
            const int64_t kr = (j0 + j) * jb->ldk;
            const int masked = jb->km && !jb->km[(j0 + j) * jb->kms];
            for (int r = 0; r < g; r++) {
                float a = 0.0f;
                for (int64_t x = 0; x < jb->d; x++) a = fmaf(jb->q[r * jb->d + x], elem(jb->k, kr + x, bf16), a);
                s[r][j] = masked ? -INFINITY : a;
            }
        }
        for (int r = 0; r < g; r++) {
            float *o = jb->out + r * jb->ldo;
            float mx = o[jb->dv];
            for (int j = 0; j < nb; j++) mx = fmaxf(mx, s[r][j]);
            if (mx == -INFINITY) { /* nothing seen yet: every p of the block is 0, or NaN */
                o[jb->dv + 1] += attn_decode_block_unseen(s[r], nb);
                continue;
            }
            const float alpha = exp2f(o[jb->dv] - mx); /* 0 when m was -inf: acc and l are 0 then */
            float sum = 0.0f;
            for (int j = 0; j < nb; j++) {
                s[r][j] = exp2f(s[r][j] - mx);
                sum += s[r][j];
            }
            o[jb->dv] = mx;
            o[jb->dv + 1] = o[jb->dv + 1] * alpha + sum;
            for (int64_t x = 0; x < jb->dv; x++) o[x] *= alpha;
        }
        for (int r = 0; r < g; r++) {
            float *o = jb->out + r * jb->ldo;
            for (int64_t x = 0; x < jb->dv; x++) {
                float a = o[x];
                for (int j = 0; j < nb; j++) a = fmaf(s[r][j], elem(jb->v, (j0 + j) * jb->ldv + x, bf16), a);
                o[x] = a;
            }
        }
    }
}

static void chunk_f32_ref(const attn_decode_job *j) { chunk(j, 0); }
static void chunk_bf16_ref(const attn_decode_job *j) { chunk(j, 1); }

const attn_decode_kernels *attn_decode_kernels_ref(void) {
    static const attn_decode_kernels k = {.name = "ref", .chunk_f32 = chunk_f32_ref, .chunk_bf16 = chunk_bf16_ref};
    return &k;
}
