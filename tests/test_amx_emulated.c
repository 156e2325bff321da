/* The AMX kernel (bf16_amx.c's gemm_pairs_amx) run on the instruction-level emulation of the
 * AMX intrinsics (amx_emulate.h, which aborts on any tile shape or configuration the hardware
 * would fault on): against the float64 product of the same bf16 pairs, against the portable
 * vdpbf16ps emulation (bf16_ref.c), and exactly where every sum is exact, over the shapes and
 * operand layouts of its callers (attn_gemm_bf16's packed rows and 64-column panels, flash's
 * strided P^T), edges, accumulate / rowscale / outscale, NaN and Inf. The operands are
 * allocated to their exact extent so that ASan (make asan) catches a tile load past one.
 * This checks the kernel's logic, not AMX hardware: no machine here has AMX. */
#include <float.h>

#include "kernels/bf16_internal.h"
#include "test_util.h"

void attn_bf16_gemm_pairs_amx_emulated(int m, int n, int kp, const uint32_t *a, int64_t ars, int64_t acs,
                                       const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                                       const float *rowscale, float outscale);
void attn_bf16_gemm_panels_amx_emulated(int m, int n, int kp, const uint32_t *a, int64_t ars, const uint32_t *b,
                                        float *c, int64_t ldc, int accumulate);
void attn_amx_emulated_foreign_tiles(int how);

/* over all random cases: vs float64 relative to its norm and to the terms' (sum |products|)
 * norm, vs bf16_ref in float roundings at the terms' scale */
static double worst_norm, worst_terms, worst_ulps;

static uint16_t rand_bf16(test_rng *r, int integers) {
    return integers ? attn_f32_to_bf16((float)((int)(rng_next(r) % 17) - 8)) : attn_f32_to_bf16((float)rng_normal(r));
}

static double lo_f(uint32_t w) { return attn_bf16_to_f32((attn_bf16)(w & 0xffff)); }
static double hi_f(uint32_t w) { return attn_bf16_to_f32((attn_bf16)(w >> 16)); }

/* One product with the given layout. v picks accumulate, rowscale, outscale, the layouts of A,
 * B and C; integers: small integer operands, so that every float sum is exact. */
static void check_case(test_rng *r, int m, int n, int kp, int v, int integers) {
    const int accumulate = v & 1, use_f = v >> 1 & 1, strided = v >> 3 & 1, padded_a = v >> 4 & 1;
    const float outscale = v >> 2 & 1 ? 0.75f : 1.0f;
    /* A: rows packed (ars = kp, or padded ars > kp) or flash's P^T (acs = 64 when m fits, ars = 1) */
    const int64_t acs = strided ? (m <= 64 ? 64 : m + 3) : 1, ars = strided ? 1 : kp + (padded_a ? 5 : 0);
    /* B: ldb = n, or a 64-column panel (gemm_bf16's, n <= 64), or padded for wider n */
    const int64_t ldb = v >> 5 & 1 ? (n <= 64 ? 64 : n + 7) : n;
    const int64_t ldc = v >> 6 & 1 ? n + 5 : n;
    const size_t na = strided ? (size_t)((kp - 1) * acs + m) : (size_t)((m - 1) * ars + kp);
    const size_t nb = (size_t)((kp - 1) * ldb + n), nc = (size_t)((m - 1) * ldc + n);
    uint32_t *a = malloc(4 * na), *b = malloc(4 * nb);
    float *c = malloc(4 * nc), *c0 = malloc(4 * nc), *cr = malloc(4 * nc), *f = malloc(4 * (size_t)m);
    double *want = malloc(8 * (size_t)m * n), *absum = malloc(8 * (size_t)m * n);
    for (size_t i = 0; i < na; i++) a[i] = attn_pair(rand_bf16(r, integers), rand_bf16(r, integers));
    for (size_t i = 0; i < nb; i++) b[i] = attn_pair(rand_bf16(r, integers), rand_bf16(r, integers));
    for (size_t i = 0; i < nc; i++) c0[i] = integers ? (float)((int)(rng_next(r) % 33) - 16) : (float)rng_normal(r);
    for (int i = 0; i < m; i++) f[i] = integers ? (float)(rng_next(r) % 8) * 0.25f : (float)rng_uniform(r);
    memcpy(c, c0, 4 * nc);
    memcpy(cr, c0, 4 * nc);
    const float *rs = use_f ? f : NULL;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            /* the kernel's own starting value (one float product), then exact pair products */
            double s = accumulate ? (double)(c0[i * ldc + j] * (rs ? rs[i] : 1.0f)) : 0.0, t = fabs(s);
            for (int p = 0; p < kp; p++) {
                const uint32_t x = a[i * ars + p * acs], y = b[p * ldb + j];
                const double lo = lo_f(x) * lo_f(y), hi = hi_f(x) * hi_f(y);
                s += lo + hi;
                t += fabs(lo) + fabs(hi);
            }
            want[i * n + j] = s * outscale;
            absum[i * n + j] = t * outscale;
        }
    attn_bf16_gemm_pairs_amx_emulated(m, n, kp, a, ars, acs, b, ldb, c, ldc, accumulate, rs, outscale);
    attn_bf16_kernels_ref()->gemm_pairs(m, n, kp, a, ars, acs, b, ldb, cr, ldc, accumulate, rs, outscale);
    double num = 0, den = 0, dent = 0, ulps = 0;
    int exact = 1, gaps = 1, bitwise = 1;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            const float g = c[i * ldc + j];
            const double d = (double)g - want[i * n + j];
            num += isfinite(g) ? d * d : INFINITY; /* NaN never passes */
            den += want[i * n + j] * want[i * n + j];
            dent += absum[i * n + j] * absum[i * n + j];
            exact &= (double)g == want[i * n + j];
            bitwise &= !memcmp(&g, &cr[i * ldc + j], 4);
            /* distance to the vdpbf16ps emulation in units of float rounding at the terms' scale */
            double u =
                fabs((double)g - cr[i * ldc + j]) / (FLT_EPSILON * (absum[i * n + j] > 0 ? absum[i * n + j] : FLT_MIN));
            if (!isfinite(g)) u = INFINITY;
            if (u > ulps) ulps = u;
        }
        if (i + 1 < m)
            for (int64_t j = n; j < ldc; j++) gaps &= !memcmp(&c[i * ldc + j], &c0[i * ldc + j], 4);
    }
    const double e = den > 0 ? sqrt(num / den) : sqrt(num), et = dent > 0 ? sqrt(num / dent) : sqrt(num);
    const char *fmt = "%dx%dx%d v=%d (acc %d, rowscale %d, outscale %g, ars %lld acs %lld ldb %lld ldc %lld)";
    char what[256];
    snprintf(what, sizeof what, fmt, m, n, kp, v, accumulate, use_f, outscale, (long long)ars, (long long)acs,
             (long long)ldb, (long long)ldc);
    CHECK(gaps, "%s: C written between rows (ldc > n)", what);
    if (integers) {
        CHECK(exact, "%s: integer operands, not the exact product", what);
    } else {
        /* relative to the terms' norm: a small C element from cancellation cannot fail it; bf16's
         * own rounding is 4e-3, a wrong or missing product far above either bound */
        CHECK(et < 1e-6, "%s: %.3g from float64 (relative to the terms)", what, et);
        CHECK(ulps <= 8.0, "%s: %.3g float roundings from bf16_ref", what, ulps);
        /* one pair, nothing to add to: both round the same exact pair sum once */
        if (kp == 1 && !accumulate) CHECK(bitwise, "%s: one pair not bitwise equal to bf16_ref", what);
        worst_norm = e > worst_norm ? e : worst_norm;
        worst_terms = et > worst_terms ? et : worst_terms;
        worst_ulps = ulps > worst_ulps ? ulps : worst_ulps;
    }
    free(a);
    free(b);
    free(c);
    free(c0);
    free(cr);
    free(f);
    free(want);
    free(absum);
}

/* NaN and Inf in A and B: the same NaN / Inf positions (and Inf signs) as the reference. */
static void check_nonfinite(test_rng *r) {
    const int m = 33, n = 40, kp = 20;
    uint32_t *a = malloc(4 * (size_t)m * kp), *b = malloc(4 * (size_t)kp * n);
    float *c = malloc(4 * (size_t)m * n), *cr = malloc(4 * (size_t)m * n);
    for (int i = 0; i < m * kp; i++) a[i] = attn_pair(rand_bf16(r, 0), rand_bf16(r, 0));
    for (int i = 0; i < kp * n; i++) b[i] = attn_pair(rand_bf16(r, 0), rand_bf16(r, 0));
    a[3 * kp + 17] = attn_pair(0x7fc0, rand_bf16(r, 0)); /* NaN: row 3 of C */
    b[5 * n + 30] = attn_pair(rand_bf16(r, 0), 0x7f80);  /* +Inf: column 30 */
    a[20 * kp + 2] = attn_pair(0xff80, rand_bf16(r, 0)); /* -Inf: row 20 */
    for (int i = 0; i < m * n; i++) c[i] = cr[i] = (float)rng_normal(r);
    attn_bf16_gemm_pairs_amx_emulated(m, n, kp, a, kp, 1, b, n, c, n, 1, NULL, 0.5f);
    attn_bf16_kernels_ref()->gemm_pairs(m, n, kp, a, kp, 1, b, n, cr, n, 1, NULL, 0.5f);
    int same = 1, nans = 0;
    for (int i = 0; i < m * n; i++) {
        same &= isnan(c[i]) == isnan(cr[i]) && (isnan(c[i]) || !isinf(cr[i]) || c[i] == cr[i]);
        nans += isnan(c[i]) != 0;
    }
    CHECK(same, "NaN / Inf positions differ from bf16_ref");
    CHECK(nans >= n, "a NaN in A reached only %d elements", nans);
    free(a);
    free(b);
    free(c);
    free(cr);
}

/* gemm_panels (B in 16-column panels, b[(j / 16) kp 16 + p 16 + j % 16]: attn_gemm_bf16's
 * packing for AMX) against gemm_pairs on the same B laid out by rows: bit for bit, whole 32 x 32
 * blocks and every edge (rows, columns, a part chunk of k), accumulating or not. */
/* gemm_panels on one shape against gemm_pairs (A's row stride kp + apad, C's n + cpad): bitwise. */
static void panels_case(test_rng *r, int m, int n, int kp, int apad, int cpad, int acc) {
    const int64_t ars = kp + apad, ldc = n + cpad, np = (n + 15) / 16 * 16;
    uint32_t *a = xmalloc(4 * (size_t)((m - 1) * ars + kp)), *b = xmalloc(4 * (size_t)kp * n),
             *bp = xmalloc(4 * (size_t)(np * kp));
    float *c0 = xmalloc(4 * (size_t)((m - 1) * ldc + n)), *c1 = xmalloc(4 * (size_t)((m - 1) * ldc + n)),
          *c2 = xmalloc(4 * (size_t)((m - 1) * ldc + n));
    for (int64_t t = 0; t < (m - 1) * ars + kp; t++) a[t] = attn_pair(rand_bf16(r, 0), rand_bf16(r, 0));
    for (int t = 0; t < kp * n; t++) b[t] = attn_pair(rand_bf16(r, 0), rand_bf16(r, 0));
    memset(bp, 0, 4 * (size_t)(np * kp));
    for (int p = 0; p < kp; p++)
        for (int x = 0; x < n; x++) bp[(int64_t)(x / 16) * kp * 16 + p * 16 + x % 16] = b[p * n + x];
    for (int64_t t = 0; t < (m - 1) * ldc + n; t++) c0[t] = (float)rng_normal(r);
    memcpy(c1, c0, 4 * (size_t)((m - 1) * ldc + n));
    memcpy(c2, c0, 4 * (size_t)((m - 1) * ldc + n));
    attn_bf16_gemm_pairs_amx_emulated(m, n, kp, a, ars, 1, b, n, c1, ldc, acc, NULL, 1.0f);
    attn_bf16_gemm_panels_amx_emulated(m, n, kp, a, ars, bp, c2, ldc, acc);
    CHECK(!memcmp(c1, c2, 4 * (size_t)((m - 1) * ldc + n)),
          "gemm_panels %dx%dx%d (ars %lld, ldc %lld, accumulate %d) differs from gemm_pairs", m, n, kp, (long long)ars,
          (long long)ldc, acc);
    free(a);
    free(b);
    free(bp);
    free(c0);
    free(c1);
    free(c2);
}

static void check_panels(test_rng *r) {
    static const int sz[] = {1, 15, 16, 17, 31, 32, 33, 48, 64, 100};
    const int ns = (int)(sizeof sz / sizeof sz[0]);
    int cases = 0;
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++)
            for (int q = 0; q < ns; q += 3) {
                panels_case(r, sz[i], sz[j], sz[(q + i) % ns], q & 1 ? 3 : 0, j & 1 ? 5 : 0, (i + j + q) & 1);
                cases++;
            }
    /* k of 193-384 pair words, not a multiple of 16, runs in two halves, the partial sums through C;
     * 384 runs panel_blocks on all of k: the same chains */
    static const int kps[] = {193, 200, 250, 301, 384, 385};
    for (int q = 0; q < (int)(sizeof kps / sizeof kps[0]); q++)
        for (int i = 0; i < 3; i++) {
            panels_case(r, (int[]){33, 64, 17}[i], (int[]){64, 48, 33}[i], kps[q], i == 1 ? 3 : 0, i == 2 ? 5 : 0,
                        (q + i) & 1);
            cases++;
        }
    printf("  gemm_panels: %d cases bitwise gemm_pairs\n", cases);
}

/* The kernels configure the tiles at every call, not once per thread: after another library in
 * the process released the thread's tiles or configured other shapes, the next call runs as the
 * first did (the emulation aborts on an unconfigured or mis-shaped tile), bit for bit. */
static void check_foreign_tiles(test_rng *r) {
    const int m = 40, n = 48, kp = 40;
    uint32_t *a = xmalloc(4 * (size_t)(m * kp)), *bp = xmalloc(4 * (size_t)(n * kp));
    float *c[3];
    for (int t = 0; t < m * kp; t++) a[t] = attn_pair(rand_bf16(r, 0), rand_bf16(r, 0));
    for (int t = 0; t < n * kp; t++) bp[t] = attn_pair(rand_bf16(r, 0), rand_bf16(r, 0));
    for (int i = 0; i < 3; i++) {
        c[i] = xmalloc(4 * (size_t)(m * n));
        if (i) attn_amx_emulated_foreign_tiles(i - 1);
        attn_bf16_gemm_panels_amx_emulated(m, n, kp, a, kp, bp, c[i], n, 0);
    }
    CHECK(!memcmp(c[0], c[1], 4 * (size_t)(m * n)), "gemm_panels after another library's TILERELEASE differs");
    CHECK(!memcmp(c[0], c[2], 4 * (size_t)(m * n)), "gemm_panels after another library's tile configuration differs");
    printf("  tiles released or configured by another library between calls: reconfigured, bitwise\n");
    free(a);
    free(bp);
    for (int i = 0; i < 3; i++) free(c[i]);
}

int main(void) {
    test_rng r = rng_seeded(0xa3c5);
    static const int sz[] = {1, 15, 16, 17, 31, 32, 33, 64, 100};
    const int ns = (int)(sizeof sz / sizeof sz[0]);
    int v = 0, cases = 0;
    /* every shape, the 128 variants spread over them (each variant on many shapes) */
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < ns; j++)
            for (int k = 0; k < ns; k++, v = (v + 37) % 128) {
                check_case(&r, sz[i], sz[j], sz[k], v, 0);
                cases++;
            }
    /* every variant on edge-heavy shapes; integer operands (exact sums) on the same */
    static const int edge[][3] = {{17, 33, 31}, {32, 64, 64}, {100, 15, 17}, {1, 64, 100}};
    for (int s = 0; s < 4; s++)
        for (int w = 0; w < 128; w++) {
            check_case(&r, edge[s][0], edge[s][1], edge[s][2], w, 0);
            check_case(&r, edge[s][0], edge[s][1], edge[s][2], w, 1);
            cases += 2;
        }
    check_nonfinite(&r);
    check_panels(&r);
    check_foreign_tiles(&r);
    printf("  %d cases: worst %.3g from float64 relative to the terms' norm (%.3g relative to C's norm), worst %.3g "
           "float roundings at the terms' scale from bf16_ref\n",
           cases, worst_terms, worst_norm, worst_ulps);
    return test_summary("test_amx_emulated");
}
