/* AdamW, the portable kernel: the oracle of optim_avx2.c and optim_avx512.c (the formula and its
 * order of operations in ops_internal.h, attn_adamw_coef). */
#include <math.h>

#include "ops_internal.h"

void attn_adamw_ref(float *p, const float *gr, float *m, float *v, float *vmax, int64_t n, const attn_adamw_coef *c) {
    for (int64_t e = 0; e < n; e++) {
        const double g = c->sign * (double)gr[e];
        const double pd = (double)p[e] * c->decay;
        const float mf = (float)(c->b1 * (double)m[e] + c->omb1 * g);
        const float vf = (float)(c->b2 * (double)v[e] + c->omb2 * g * g);
        m[e] = mf;
        v[e] = vf;
        float vd = vf;
        if (vmax) {
            vd = vmax[e] > vf ? vmax[e] : vf;
            vmax[e] = vd;
        }
        p[e] = (float)(pd - c->step_size * (double)mf / (sqrt((double)vd) / c->bc2_sqrt + c->eps));
    }
}
