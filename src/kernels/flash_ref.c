/* Portable flash-attention tile kernels (see flash_internal.h for the contracts). */
#include <math.h>
#include <string.h>

#include "flash_kernels.h"

static void gemm_ref(int m, int n, int k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                     float *c, int64_t ldc, int accumulate, const float *rowscale, float *colmax) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float acc = accumulate ? c[i * ldc + j] * (rowscale ? rowscale[i] : 1.0f) : 0.0f;
            for (int p = 0; p < k; p++) acc = fmaf(a[i * ars + p * acs], b[p * ldb + j], acc);
            c[i * ldc + j] = acc;
            if (colmax) colmax[j] = fmaxf(colmax[j], acc);
        }
}

static void softmax_update_ref(int rows, int cols, float *s, int64_t lds, float *mrun, float *l, float *alpha,
                               const float *tilemax) {
    for (int c = 0; c < cols; c++) {
        /* fmaxf drops a NaN: a column whose only non -inf logit is NaN would pass for fully masked */
        float mx = mrun[c];
        if (tilemax)
            mx = fmaxf(mx, tilemax[c]);
        else
            for (int r = 0; r < rows; r++) mx = fmaxf(mx, s[r * lds + c]);
        int nan = isnan(mrun[c]);
        for (int r = 0; mx == -INFINITY && r < rows; r++) nan |= isnan(s[r * lds + c]);
        if (mx == -INFINITY && !nan) {
            for (int r = 0; r < rows; r++) s[r * lds + c] = 0.0f;
            alpha[c] = 1.0f;
            continue;
        }
        float sum = 0.0f;
        for (int r = 0; r < rows; r++) {
            const float p = exp2f(s[r * lds + c] - mx);
            s[r * lds + c] = p;
            sum += p;
        }
        alpha[c] = exp2f(mrun[c] - mx);
        l[c] = l[c] * alpha[c] + sum;
        mrun[c] = mx;
    }
}

static void probs_and_ds_ref(int rows, int cols, float *s, const float *dp, float *ds, int64_t ld, const float *m,
                             const float *ll, const float *dsum, float scale) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const float p = m[c] == -INFINITY ? 0.0f : exp2f((s[r * ld + c] - m[c]) - ll[c]);
            s[r * ld + c] = p;
            ds[r * ld + c] = p == 0.0f ? 0.0f : p * (dp[r * ld + c] - dsum[c]) * scale;
        }
}

void attn_flash_pack_transposed_ref(int rows, int cols, const float *src, int64_t rs, float f, float *dst,
                                    int64_t ldd) {
    for (int q = 0; q < rows; q++)
        for (int t = 0; t < cols; t++) {
            if (f == 1.0f)
                memcpy(dst + t * ldd + q, src + q * rs + t, sizeof(float)); /* the bits, exactly */
            else
                dst[t * ldd + q] = src[q * rs + t] * f;
        }
}

void attn_flash_scale_copy_rows_ref(int m, int n, const float *src, int64_t lds, const float *f, float *dst,
                                    int64_t ldd) {
    for (int i = 0; i < m; i++) {
        const float fi = f ? f[i] : 1.0f;
        for (int j = 0; j < n; j++) dst[i * ldd + j] = src[i * lds + j] * fi;
    }
}

const attn_flash_kernels *attn_flash_kernels_ref(void) {
    static const attn_flash_kernels k = {.name = "ref",
                                         .softmax_tile = ATTN_SOFTMAX_TILE_OWN,
                                         .register_rows = 0,
                                         .gemm = gemm_ref,
                                         .softmax_update = softmax_update_ref,
                                         .probs_and_ds = probs_and_ds_ref,
                                         .softmax_update_bf16 = softmax_update_ref,
                                         .probs_and_ds_bf16 = probs_and_ds_ref,
                                         .pack_transposed = attn_flash_pack_transposed_ref,
                                         .dropout_tile = NULL,
                                         .scale_copy_rows = attn_flash_scale_copy_rows_ref};
    return &k;
}
