/* Philox-4x32-10 and dropout: Random123 known-answer vectors, the stream layout, uniformity,
 * keep fraction, per-element definition of the mask for every ISA, prefix consistency, thread
 * count independence, backward = forward mask, edge cases and argument errors. */
#include "test_util.h"

#include "kernels/ops_internal.h"
#include "kernels/registry.h"

static void test_kat(void) {
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t t = 0; t < sizeof kat / sizeof kat[0]; t++) {
        uint32_t out[4];
        attn_philox4x32_10(kat[t].ctr, kat[t].key, out);
        CHECK(!memcmp(out, kat[t].want, sizeof out), "KAT %zu: got %08x %08x %08x %08x want %08x %08x %08x %08x", t,
              out[0], out[1], out[2], out[3], kat[t].want[0], kat[t].want[1], kat[t].want[2], kat[t].want[3]);
    }
}

/* attn_philox_uniform follows the documented counter layout, including the high words. */
static void test_stream_layout(void) {
    const uint64_t seeds[] = {0, 42, 0x0123456789abcdefull};
    const uint64_t offsets[] = {0, 7, 0xfedcba9876543210ull};
    const uint64_t idx[] = {0, 1, 2, 3, 4, 5, 1000003, (1ull << 34) + 6, UINT64_MAX};
    for (int s = 0; s < 3; s++)
        for (int o = 0; o < 3; o++)
            for (int k = 0; k < 9; k++) {
                uint64_t i = idx[k], blk = i / 4;
                uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)offsets[o],
                                   (uint32_t)(offsets[o] >> 32)};
                uint32_t key[2] = {(uint32_t)seeds[s], (uint32_t)(seeds[s] >> 32)};
                uint32_t w[4];
                attn_philox4x32_10(ctr, key, w);
                float want = (float)(w[i % 4] >> 8) * 0x1p-24f;
                float got = attn_philox_uniform(seeds[s], offsets[o], i);
                CHECK(got == want, "uniform(seed %d, offset %d, i %llu) = %.9g want %.9g", s, o, (unsigned long long)i,
                      got, want);
            }
}

static void test_uniformity(void) {
    const int n = 1000000;
    double sum = 0, sum2 = 0;
    int bins[16] = {0}, out_of_range = 0;
    for (int i = 0; i < n; i++) {
        float u = attn_philox_uniform(1234, 5, (uint64_t)i);
        if (!(u >= 0.0f && u < 1.0f)) out_of_range++;
        sum += u;
        sum2 += (double)u * u;
        bins[(int)(u * 16.0f) & 15]++;
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    /* sd of the mean: sqrt(1/12/n); of the variance: sqrt((1/80 - 1/144)/n) */
    double sd_mean = sqrt(1.0 / 12.0 / n), sd_var = sqrt((1.0 / 80.0 - 1.0 / 144.0) / n);
    CHECK(out_of_range == 0, "%d uniforms outside [0, 1)", out_of_range);
    CHECK(fabs(mean - 0.5) < 5 * sd_mean, "mean %.6f (want 0.5 +- %.2g)", mean, 5 * sd_mean);
    CHECK(fabs(var - 1.0 / 12.0) < 5 * sd_var, "variance %.6f (want %.6f +- %.2g)", var, 1.0 / 12.0, 5 * sd_var);
    double chi2 = 0, e = n / 16.0;
    for (int b = 0; b < 16; b++) chi2 += (bins[b] - e) * (bins[b] - e) / e;
    CHECK(chi2 < 50.0, "16-bin chi^2 = %.1f (15 dof; > 50 has p < 1e-5)", chi2);
    printf("  uniforms: mean %.6f, var %.6f (1/12 = %.6f), chi2(15) %.1f\n", mean, var, 1.0 / 12.0, chi2);
}

/* y, mask from one call must follow the per-element definition exactly. */
static int check_definition(const float *x, const float *y, const uint8_t *mask, int64_t n, float p, uint64_t seed,
                            uint64_t offset, int64_t *kept) {
    const float scale = 1.0f / (1.0f - p);
    int64_t bad = 0, k = 0;
    for (int64_t i = 0; i < n; i++) {
        int keep = attn_philox_uniform(seed, offset, (uint64_t)i) >= p;
        float want = keep ? x[i] * scale : 0.0f;
        if (mask && mask[i] != keep) bad++;
        if (memcmp(&y[i], &want, sizeof want)) bad++;
        k += keep;
    }
    if (kept) *kept = k;
    return bad == 0;
}

static void test_dropout_isa(attn_isa isa, test_rng *rng) {
    const int64_t n = 1000000;
    float *x = xmalloc((size_t)n * sizeof(float)), *y = xmalloc((size_t)n * sizeof(float));
    float *y2 = xmalloc((size_t)n * sizeof(float)), *dx = xmalloc((size_t)n * sizeof(float));
    uint8_t *m = xmalloc((size_t)n), *m2 = xmalloc((size_t)n);
    fill_normal(rng, x, (size_t)n, 1.0);
    const float ps[] = {0.1f, 0.5f, 0.9f, 1e-7f, 0.999f};
    for (int t = 0; t < 5; t++) {
        float p = ps[t];
        uint64_t seed = rng_next(rng), offset = rng_next(rng) >> (t * 8);
        attn_set_num_threads(1);
        CHECK_OK(attn_dropout_forward(x, y, m, n, p, seed, offset));
        int64_t kept = 0;
        CHECK(check_definition(x, y, m, n, p, seed, offset, &kept),
              "%s: dropout p=%g differs from the per-element definition", attn_isa_name(isa), p);
        /* within 5 sigma of the binomial; plus 4 elements of slack, for the Poisson regime of
         * tiny p (n p = 0.1 for p = 1e-7: P(>= 5 drops) ~ 1e-7) */
        double q = 1.0 - p, sd = sqrt(q * p / n);
        double frac = (double)kept / n;
        CHECK(fabs(frac - q) <= 5 * sd + 4.0 / n, "%s: p=%g keep fraction %.7f, want %.7f +- %.2g", attn_isa_name(isa),
              p, frac, q, 5 * sd + 4.0 / n);
        /* thread counts */
        for (int th = 2; th <= 4; th++) {
            attn_set_num_threads(th);
            CHECK_OK(attn_dropout_forward(x, y2, m2, n, p, seed, offset));
            CHECK(!memcmp(y, y2, (size_t)n * sizeof(float)) && !memcmp(m, m2, (size_t)n),
                  "%s: dropout p=%g differs with %d threads", attn_isa_name(isa), p, th);
        }
        /* backward recomputes the same mask */
        CHECK_OK(attn_dropout_backward(x, dx, n, p, seed, offset));
        CHECK(!memcmp(y, dx, (size_t)n * sizeof(float)), "%s: dropout backward p=%g does not reuse the forward mask",
              attn_isa_name(isa), p);
        attn_set_num_threads(0);
    }
    /* prefix consistency: a shorter call (any tail length) is the prefix of a longer one, the
     * mask is optional, and in place works */
    {
        const float p = 0.3f;
        const uint64_t seed = 99, offset = 3;
        CHECK_OK(attn_dropout_forward(x, y, m, 4096, p, seed, offset));
        int ok = 1;
        for (int64_t len = 1; len <= 70; len++) {
            memset(y2, 0xff, 80 * sizeof(float));
            memset(m2, 0xee, 80);
            CHECK_OK(attn_dropout_forward(x, y2, len % 2 ? m2 : NULL, len, p, seed, offset));
            if (memcmp(y, y2, (size_t)len * sizeof(float))) ok = 0;
            if (len % 2 && memcmp(m, m2, (size_t)len)) ok = 0;
            if (m2[len] != 0xee && len % 2) ok = 0; /* nothing written past n */
            uint32_t sentinel;
            memcpy(&sentinel, &y2[len], 4);
            if (sentinel != 0xffffffffu) ok = 0;
        }
        CHECK(ok, "%s: short dropout calls are not prefixes of a long one", attn_isa_name(isa));
        memcpy(y2, x, 4096 * sizeof(float));
        CHECK_OK(attn_dropout_forward(y2, y2, NULL, 4096, p, seed, offset));
        CHECK(!memcmp(y, y2, 4096 * sizeof(float)), "%s: in-place dropout differs", attn_isa_name(isa));
        /* a different offset (or seed) is a different, independent mask */
        CHECK_OK(attn_dropout_forward(x, y2, m2, 4096, p, seed, offset + 1));
        int same = 0;
        for (int i = 0; i < 4096; i++) same += m[i] == m2[i];
        double want = p * p + (1 - p) * (1 - p); /* agreement rate of independent masks */
        CHECK(fabs(same / 4096.0 - want) < 5 * sqrt(want * (1 - want) / 4096),
              "%s: masks of offsets %llu and %llu agree on %d of 4096", attn_isa_name(isa), (unsigned long long)offset,
              (unsigned long long)offset + 1, same);
    }
    free(x);
    free(y);
    free(y2);
    free(dx);
    free(m);
    free(m2);
}

/* Every ISA must produce exactly the same bits (the mask is integer math, the scaling one
 * multiply). */
static void test_isas_agree(attn_isa best, test_rng *rng) {
    const int64_t n = 40000 + 13;
    float *x = xmalloc((size_t)n * sizeof(float)), *y0 = xmalloc((size_t)n * sizeof(float));
    float *y1 = xmalloc((size_t)n * sizeof(float));
    uint8_t *m0 = xmalloc((size_t)n), *m1 = xmalloc((size_t)n);
    fill_normal(rng, x, (size_t)n, 2.0);
    attn_force_isa(ATTN_ISA_REF);
    CHECK_OK(attn_dropout_forward(x, y0, m0, n, 0.25f, 7, 11));
    FOR_EACH_ISA(isa) if (isa != ATTN_ISA_REF) {
        attn_force_isa((attn_isa)isa);
        CHECK_OK(attn_dropout_forward(x, y1, m1, n, 0.25f, 7, 11));
        CHECK(!memcmp(y0, y1, (size_t)n * sizeof(float)) && !memcmp(m0, m1, (size_t)n), "dropout: %s differs from ref",
              attn_isa_name((attn_isa)isa));
    }
    attn_force_isa(best);
    free(x);
    free(y0);
    free(y1);
    free(m0);
    free(m1);
}

/* The kernels take the stream index of their first element (the driver passes chunk starts,
 * multiples of 4); any start, block-aligned or not, must follow the definition. */
static void test_kernel_starts(attn_isa isa) {
    float x[64], y[64];
    uint8_t m[64];
    const float p = 0.4f;
    const uint32_t thr = (uint32_t)ceilf(p * 0x1p24f);
    const float scale = 1.0f / (1.0f - p);
    const uint64_t firsts[] = {0, 1, 2, 3, 5, 17, 4000000001ull};
    const attn_ops_kernels *k = attn_ops_active();
    CHECK(k == attn_kernel_ctx_for(isa)->ops && !strcmp(k->name, attn_isa_name(isa)),
          "attn_ops_active() is %s, want %s", k->name, attn_isa_name(isa));
    for (int i = 0; i < 64; i++) x[i] = (float)i + 0.5f;
    int bad = 0;
    for (int f = 0; f < 7; f++)
        for (int64_t n = 1; n <= 40; n++) {
            k->dropout(x, y, m, n, firsts[f], p, thr, scale, 5, 6);
            for (int64_t j = 0; j < n; j++) {
                int keep = attn_philox_uniform(5, 6, firsts[f] + (uint64_t)j) >= p;
                bad += m[j] != keep || y[j] != (keep ? x[j] * scale : 0.0f);
            }
        }
    CHECK(bad == 0, "%s: dropout kernel with unaligned starts: %d mismatches", attn_isa_name(isa), bad);
}

static void test_edges(void) {
    float x[37], y[37], dx[37];
    uint8_t m[37];
    for (int i = 0; i < 37; i++) x[i] = (float)i - 10.5f;
    CHECK_OK(attn_dropout_forward(x, y, m, 37, 0.0f, 1, 2));
    int ok = !memcmp(x, y, sizeof x);
    for (int i = 0; i < 37; i++) ok &= m[i] == 1;
    CHECK(ok, "p = 0 is not the identity");
    CHECK_OK(attn_dropout_backward(x, dx, 37, 0.0f, 1, 2));
    CHECK(!memcmp(x, dx, sizeof x), "p = 0 backward is not the identity");
    memcpy(y, x, sizeof x);
    CHECK_OK(attn_dropout_forward(y, y, NULL, 37, 0.0f, 1, 2));
    CHECK(!memcmp(x, y, sizeof x), "p = 0 in place is not the identity");
    CHECK_OK(attn_dropout_forward(x, y, m, 37, 1.0f, 1, 2));
    ok = 1;
    for (int i = 0; i < 37; i++) ok &= y[i] == 0.0f && m[i] == 0;
    CHECK(ok, "p = 1 does not drop everything");
    CHECK_OK(attn_dropout_backward(x, dx, 37, 1.0f, 1, 2));
    ok = 1;
    for (int i = 0; i < 37; i++) ok &= dx[i] == 0.0f;
    CHECK(ok, "p = 1 backward is not zero");
    /* n = 0 with NULL pointers is fine */
    CHECK_OK(attn_dropout_forward(NULL, NULL, NULL, 0, 0.5f, 1, 2));
    CHECK_OK(attn_dropout_backward(NULL, NULL, 0, 0.5f, 1, 2));

    /* argument errors */
    CHECK_STATUS(attn_dropout_forward(x, y, m, 37, -0.1f, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_dropout_forward") && strstr(attn_last_error(), "p"), "message: %s",
          attn_last_error());
    CHECK_STATUS(attn_dropout_forward(x, y, m, 37, 1.5f, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dropout_forward(x, y, m, 37, NAN, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dropout_forward(x, y, m, 37, INFINITY, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dropout_backward(x, dx, 37, NAN, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_dropout_backward") != NULL, "message: %s", attn_last_error());
    CHECK_STATUS(attn_dropout_forward(NULL, y, m, 37, 0.5f, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "x is NULL") && strstr(attn_last_error(), "37"), "message: %s", attn_last_error());
    CHECK_STATUS(attn_dropout_forward(x, NULL, m, 37, 0.5f, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dropout_forward(x, y, m, -1, 0.5f, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dropout_backward(NULL, dx, 37, 0.5f, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dropout_backward(x, NULL, 37, 0.5f, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dropout_backward(x, dx, -5, 0.5f, 1, 2), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void) {
    test_rng rng = rng_seeded(20240601);
    printf("test_philox: seed %llu, detected ISA %s\n", (unsigned long long)rng.s, attn_isa_name(attn_detected_isa()));
    test_kat();
    test_stream_layout();
    test_uniformity();
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        test_dropout_isa((attn_isa)isa, &rng);
        test_kernel_starts((attn_isa)isa);
        test_edges();
    }
    const attn_isa best = attn_detected_isa();
    attn_force_isa(best);
    test_isas_agree(best, &rng);
    return test_summary("test_philox");
}
