/* One-token decode (attn_flash_forward with one query row per head, src/attention/decode.c)
 * against a float64 direct evaluation of softmax(q k^T / sqrt(d) + mask) v on the same inputs:
 * contexts 1 .. 32768 (odd sizes, chunk and block edges), float and bf16 caches (bf16 output
 * too), GQA / MQA head ratios (groups larger than one kernel call), head dims with vector tails,
 * a cache-layout view (rows strided by the embedding, length below capacity), key masks, the
 * window and top-left causality, the lse; every ISA this CPU has; threads 1, 2, 3 bitwise equal. */
#include <string.h>

#include "attention/decode_internal.h"
#include "kernels/registry.h"
#include "kernels/bf16_internal.h"
#include "test_util.h"

typedef struct {
    int64_t b, hq, hk, n, d, dv;
    int bf16, out_bf16, masked, window, topleft, cache_layout;
} dcase;

static double worst_f32, worst_bf16;

/* Round x to bf16 in place when bf16 (the reference then sees the values the kernel sees). */
static void quantise(float *x, size_t n, uint16_t *h) {
    for (size_t i = 0; i < n; i++) {
        h[i] = attn_bf16_rne_daz(x[i]);
        x[i] = attn_bf16_f(h[i]);
    }
}

/* Reference of row (b, h): out [dv] and its natural-log lse, -inf / zeros for no allowed key. */
static double ref_row(const dcase *c, const float *q, const float *k, const float *v, int64_t ldr, int64_t bs,
                      int64_t hs, const uint8_t *km, int64_t b, int64_t h, double *out) {
    const int64_t g = h / (c->hq / c->hk), n = c->n;
    const int64_t lo = c->window >= 0 && !c->topleft ? n - 1 - c->window : 0, hi = c->topleft ? 1 : n;
    double *s = malloc(sizeof(double) * (size_t)n), mx = -INFINITY, l = 0;
    for (int64_t j = 0; j < n; j++) {
        s[j] = -INFINITY;
        if (j < lo || j >= hi || (km && !km[b * n + j])) continue;
        double a = 0;
        for (int64_t x = 0; x < c->d; x++)
            a += (double)q[(b * c->hq + h) * c->d + x] * k[b * bs + g * hs + j * ldr + x];
        s[j] = a / sqrt((double)c->d);
        if (s[j] > mx) mx = s[j];
    }
    for (int64_t x = 0; x < c->dv; x++) out[x] = 0;
    if (mx == -INFINITY) {
        free(s);
        return -INFINITY;
    }
    for (int64_t j = 0; j < n; j++) {
        if (s[j] == -INFINITY) continue;
        const double p = exp(s[j] - mx);
        l += p;
        for (int64_t x = 0; x < c->dv; x++) out[x] += p * v[b * bs + g * hs + j * ldr + x];
    }
    for (int64_t x = 0; x < c->dv; x++) out[x] /= l;
    free(s);
    return mx + log(l);
}

static void run_case(const dcase *c, test_rng *rng) {
    const int64_t B = c->b, HQ = c->hq, HK = c->hk, N = c->n, d = c->d, dv = c->dv;
    /* K and V share one row length so the cache layout can interleave heads like attn_kv_cache */
    const int64_t e = d > dv ? d : dv;
    const int64_t cap = c->cache_layout ? N + 3 : N, ldr = c->cache_layout ? HK * e : e;
    const int64_t hs = c->cache_layout ? e : cap * e, bs = cap * HK * e;
    const size_t nq = (size_t)(B * HQ * d), nkv = (size_t)(B * bs), no = (size_t)(B * HQ * dv);
    float *q = xmalloc(sizeof(float) * nq), *k = xmalloc(sizeof(float) * nkv), *v = xmalloc(sizeof(float) * nkv);
    uint16_t *qh = xmalloc(2 * nq), *kh = xmalloc(2 * nkv), *vh = xmalloc(2 * nkv), *oh = xmalloc(2 * no);
    fill_normal(rng, q, nq, 1.0);
    fill_normal(rng, k, nkv, 1.0);
    fill_normal(rng, v, nkv, 1.0);
    if (c->bf16) {
        quantise(q, nq, qh);
        quantise(k, nkv, kh);
        quantise(v, nkv, vh);
    }
    uint8_t *km = NULL;
    if (c->masked) {
        km = xmalloc((size_t)(B * N));
        for (int64_t i = 0; i < B * N; i++) km[i] = rng_uniform(rng) < 0.7;
        if (B > 1)
            for (int64_t j = 0; j < N; j++) km[N + j] = 0; /* batch 1: every key masked */
    }
    const attn_type ty = c->bf16 ? ATTN_TYPE_BF16 : ATTN_TYPE_F32;
    attn_tensor tq = attn_tensor_4d_typed(c->bf16 ? (void *)qh : (void *)q, ty, B, HQ, 1, d);
    attn_tensor tk = attn_tensor_4d_typed(c->bf16 ? (void *)kh : (void *)k, ty, B, HK, N, d);
    attn_tensor tv = attn_tensor_4d_typed(c->bf16 ? (void *)vh : (void *)v, ty, B, HK, N, dv);
    attn_tensor *kv[2] = {&tk, &tv};
    for (int t = 0; t < 2; t++) {
        kv[t]->stride[0] = bs;
        kv[t]->stride[1] = hs;
        kv[t]->stride[2] = ldr;
    }
    attn_sdpa_params p = attn_sdpa_params_default();
    p.causal = c->topleft ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_BOTTOM_RIGHT;
    if (c->window >= 0) p.window_left = c->window;
    attn_btensor kmv;
    if (km) {
        kmv = attn_btensor_2d(km, B, N);
        p.key_mask = &kmv;
    }
    double *ref = xmalloc(sizeof(double) * no), *lref = xmalloc(sizeof(double) * (size_t)(B * HQ));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HQ; h++)
            lref[b * HQ + h] = ref_row(c, q, k, v, ldr, bs, hs, km, b, h, ref + (b * HQ + h) * dv);
    const size_t wsb = attn_flash_workspace_size(&tq, &tk, &tv);
    void *ws = xmalloc(wsb);
    float *o[3], *lse[3];
    char name[200];
    snprintf(name, sizeof name, "%s b%lld hq%lld hk%lld n%lld d%lld dv%lld%s%s%s%s%s [%s]", c->bf16 ? "bf16" : "f32",
             (long long)B, (long long)HQ, (long long)HK, (long long)N, (long long)d, (long long)dv,
             c->out_bf16 ? " out-bf16" : "", c->masked ? " key-mask" : "", c->window >= 0 ? " window" : "",
             c->topleft ? " top-left" : "", c->cache_layout ? " cache-layout" : "", attn_isa_name(attn_active_isa()));
    for (int t = 0; t < 3; t++) {
        attn_set_num_threads(t + 1);
        o[t] = xmalloc(sizeof(float) * no);
        lse[t] = xmalloc(sizeof(float) * (size_t)(B * HQ));
        attn_tensor to =
            c->out_bf16 ? attn_tensor_4d_typed(oh, ATTN_TYPE_BF16, B, HQ, 1, dv) : attn_tensor_4d(o[t], B, HQ, 1, dv);
        attn_tensor tl = attn_tensor_3d(lse[t], B, HQ, 1);
        CHECK_OK(attn_flash_forward(&tq, &tk, &tv, &p, &to, &tl, ws, wsb));
        if (c->out_bf16)
            for (size_t i = 0; i < no; i++) o[t][i] = attn_bf16_f(oh[i]);
    }
    attn_set_num_threads(0);
    const double err = rel_err_fd(o[0], ref, no);
    const double tol = c->out_bf16 ? 5e-3 : 2e-5;
    CHECK(err <= tol, "%s: rel err %.3g > %.1g", name, err, tol);
    double *w = c->bf16 ? &worst_bf16 : &worst_f32;
    if (!c->out_bf16 && err > *w) *w = err;
    for (int64_t r = 0; r < B * HQ; r++) {
        const double lr = lref[r], lg = lse[0][r];
        CHECK(lr == -INFINITY ? lg == -INFINITY : fabs(lg - lr) <= 1e-5 * (1 + fabs(lr)),
              "%s: lse row %lld %.9g vs %.9g", name, (long long)r, lg, lr);
    }
    for (int t = 1; t < 3; t++)
        CHECK(!memcmp(o[t], o[0], sizeof(float) * no) && !memcmp(lse[t], lse[0], sizeof(float) * (size_t)(B * HQ)),
              "%s: %d threads differ from 1", name, t + 1);
    for (int t = 0; t < 3; t++) {
        free(o[t]);
        free(lse[t]);
    }
    free(ws);
    free(ref);
    free(lref);
    free(km);
    free(q);
    free(k);
    free(v);
    free(qh);
    free(kh);
    free(vh);
    free(oh);
}

/* Non-finite values propagate as IEEE arithmetic (and PyTorch) say: a NaN in a query row or in
 * a key its row sees makes that row NaN, a NaN in a value row makes that column NaN for every
 * query row reading it, a +inf score makes its row NaN (inf - inf). B=1, 4 query heads on 2
 * key/value heads, 300 keys (two chunks), f32. */
static void nonfinite_case(int which, test_rng *rng) {
    const int64_t HQ = 4, HK = 2, N = 300, d = 64;
    const size_t nq = (size_t)(HQ * d), nkv = (size_t)(HK * N * d), no = (size_t)(HQ * d);
    float *q = xmalloc(sizeof(float) * nq), *k = xmalloc(sizeof(float) * nkv), *v = xmalloc(sizeof(float) * nkv);
    float *o = xmalloc(sizeof(float) * no), *lse = xmalloc(sizeof(float) * (size_t)HQ);
    fill_normal(rng, q, nq, 1.0);
    fill_normal(rng, k, nkv, 1.0);
    fill_normal(rng, v, nkv, 1.0);
    /* want[h][c]: 1 when out[h][c] must be NaN */
    int want[4][64] = {{0}};
    const char *what = "";
    switch (which) {
    case 0:
        what = "NaN in query head 0";
        q[3] = NAN;
        for (int c = 0; c < d; c++) want[0][c] = 1;
        break;
    case 1:
        what = "NaN in key 100 of kv head 1";
        k[(1 * N + 100) * d + 5] = NAN;
        for (int c = 0; c < d; c++) want[2][c] = want[3][c] = 1;
        break;
    case 2:
        what = "NaN in value 7 of kv head 0, column 2";
        v[(0 * N + 7) * d + 2] = NAN;
        want[0][2] = want[1][2] = 1;
        break;
    default:
        what = "+inf score (query head 0 all 1, key 50 of kv head 0 all 3e38)";
        for (int x = 0; x < d; x++) q[x] = 1.0f, k[(0 * N + 50) * d + x] = 3e38f;
        for (int c = 0; c < d; c++) want[0][c] = 1;
        break;
    }
    attn_tensor tq = attn_tensor_4d(q, 1, HQ, 1, d), tk = attn_tensor_4d(k, 1, HK, N, d),
                tv = attn_tensor_4d(v, 1, HK, N, d);
    attn_tensor to = attn_tensor_4d(o, 1, HQ, 1, d), tl = attn_tensor_3d(lse, 1, HQ, 1);
    attn_sdpa_params p = attn_sdpa_params_default();
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    const size_t wsb = attn_flash_workspace_size(&tq, &tk, &tv);
    void *ws = xmalloc(wsb);
    CHECK_OK(attn_flash_forward(&tq, &tk, &tv, &p, &to, &tl, ws, wsb));
    int bad = 0;
    for (int h = 0; h < HQ; h++) {
        if (which == 3 && h == 1) continue; /* head 1 sees +-3e38 * q: overflow or not, by chance */
        for (int c = 0; c < d; c++) {
            const float x = o[h * d + c];
            if (want[h][c] ? !isnan(x) : !isfinite(x)) bad++;
        }
    }
    CHECK(!bad, "decode %s [%s]: %d outputs not as IEEE arithmetic says", what, attn_isa_name(attn_active_isa()), bad);
    free(ws);
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
}

int main(void) {
    test_rng rng = rng_seeded(0xdec0de);
    printf("seed state %llu\n", (unsigned long long)rng.s);
    /* b, hq, hk, n, d, dv, bf16, out_bf16, masked, window, topleft, cache_layout */
    static const dcase cases[] = {
        {1, 1, 1, 1, 64, 64, 0, 0, 0, -1, 0, 0},
        {2, 4, 4, 2, 64, 64, 0, 0, 0, -1, 0, 0},
        {1, 8, 8, 31, 128, 128, 0, 0, 0, -1, 0, 0},
        {1, 8, 2, 33, 128, 128, 0, 0, 0, -1, 0, 0},
        {1, 4, 1, 255, 80, 48, 0, 0, 0, -1, 0, 0},
        {2, 6, 3, 257, 17, 23, 0, 0, 0, -1, 0, 0},
        {1, 12, 1, 1000, 64, 64, 0, 0, 0, -1, 0, 0}, /* MQA, a group of 12: two kernel calls */
        {1, 8, 2, 4097, 128, 128, 0, 0, 0, -1, 0, 0},
        {1, 2, 1, 32768, 128, 128, 0, 0, 0, -1, 0, 0},
        {1, 2, 2, 32767, 64, 64, 0, 0, 0, -1, 0, 0},
        {2, 4, 2, 777, 64, 64, 0, 0, 1, -1, 0, 0},   /* key mask; batch 1 fully masked */
        {1, 4, 4, 1500, 64, 64, 0, 0, 0, 300, 0, 0}, /* window: the last 301 keys */
        {1, 4, 4, 600, 64, 64, 0, 0, 0, -1, 1, 0},   /* top-left: key 0 only */
        {2, 4, 4, 700, 64, 64, 0, 0, 0, -1, 0, 1},   /* heads interleaved in rows, as attn_kv_cache */
        {1, 1, 1, 1, 64, 64, 1, 0, 0, -1, 0, 0},
        {1, 8, 8, 31, 128, 128, 1, 0, 0, -1, 0, 0},
        {2, 6, 3, 257, 17, 23, 1, 0, 0, -1, 0, 0},
        {1, 12, 1, 1000, 64, 64, 1, 0, 0, -1, 0, 0},
        {1, 8, 2, 4097, 128, 128, 1, 0, 0, -1, 0, 0},
        {1, 2, 1, 32768, 128, 128, 1, 0, 0, -1, 0, 0},
        {2, 4, 2, 777, 64, 64, 1, 0, 1, -1, 0, 0},
        {2, 4, 4, 700, 64, 64, 1, 0, 0, -1, 0, 1},
        {1, 8, 2, 1025, 128, 128, 1, 1, 0, -1, 0, 0}, /* bf16 output */
        /* kernel tiles: groups of 7 (4 + 3 rows) and 2 with value widths past one 128-column strip,
         * key counts leaving 1-3 keys after the four-key score passes */
        {1, 7, 1, 515, 96, 160, 0, 0, 0, -1, 0, 0},
        {1, 7, 1, 515, 96, 160, 1, 0, 0, -1, 0, 0},
        {2, 4, 2, 262, 40, 200, 0, 0, 0, -1, 0, 0},
        {1, 3, 3, 301, 144, 130, 1, 0, 0, -1, 0, 1},
    };
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        CHECK(!strcmp(attn_kernel_ctx_active()->decode->name, attn_isa_name((attn_isa)isa)),
              "decode kernels %s under %s", attn_kernel_ctx_active()->decode->name, attn_isa_name((attn_isa)isa));
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], &rng);
        for (int w = 0; w < 4; w++) nonfinite_case(w, &rng);
    }
    attn_force_isa(attn_detected_isa());
    printf("decode: worst rel err f32 %.3g, bf16 cache %.3g\n", worst_f32, worst_bf16);
    return test_summary("test_decode");
}
