/* Cache-derived blocking (core/tuning.c, attn_gemm_arch_blocked): the SGEMM blocking every
 * kernel table gets for the caches of Zen 4 (L1d 32K, L2 1M), Zen 5 (48K, 1M), Sapphire Rapids
 * (48K, 2M) and a small-cache part, against the values worked out by hand from the rules in
 * gemm_internal.h (the tuned values exactly on the reference caches); the fits those rules
 * promise; the flash backward's key runs (attn_flash_key_run_blocks); ATTN_CACHE parsing. In-process: the dispatch context holds the blocking derived from
 * attn_cpu_caches() (ATTN_CACHE applied: ctest runs this test again under the three parts'
 * caches), and under it SGEMM (shapes across the KC / NC / MC edges) and flash attention match
 * float64 references, SGEMM bitwise for threads 1..3. */
#include <string.h>

#include "kernels/registry.h"
#include "attention/flash_internal.h"
#include "core/tuning.h"
#include "kernels/gemm_internal.h"
#include "test_util.h"

typedef struct {
    const char *name;
    int64_t l1d, l2, l3;
    int kc[3], mc[3], nc[3]; /* per ISA: ref, avx2, avx512 */
} part;

#define K_ 1024
#define M_ (1024 * 1024)

static const part parts[] = {
    {"zen4", 32 * K_, 1 * M_, 32 * (int64_t)M_, {256, 256, 384}, {256, 768, 2688}, {512, 256, 512}},
    {"zen5", 48 * K_, 1 * M_, 32 * (int64_t)M_, {256, 256, 384}, {256, 768, 2688}, {512, 256, 512}},
    {"sapphire-rapids", 48 * K_, 2 * M_, 105 * (int64_t)M_, {256, 256, 384}, {256, 768, 2688}, {1024, 512, 1024}},
    {"small (16K, 256K, 8M)", 16 * K_, 256 * K_, 8 * (int64_t)M_, {256, 256, 192}, {64, 192, 1344}, {128, 64, 256}},
};

/* Each ISA's GEMM table as tuned (the getters return static tables: callable on any CPU, unlike
 * the ISA's init, which may probe the CPU and is compiled for the ISA). */
static const attn_gemm_arch *gemm_table(attn_isa isa) {
    if (isa == ATTN_ISA_REF) return attn_gemm_arch_ref();
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    if (isa == ATTN_ISA_AVX2) return attn_gemm_arch_avx2();
    if (isa == ATTN_ISA_AVX512) return attn_gemm_arch_avx512();
#endif
    return NULL;
}

static void check_blocking(void) {
    for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
        attn_cache_sizes cs = {parts[p].l1d, parts[p].l2, parts[p].l3, "test", "test", "test"};
        for (int isa = ATTN_ISA_REF; isa <= ATTN_ISA_AVX512; isa++) {
            const attn_gemm_arch *base = gemm_table((attn_isa)isa);
            if (!base) continue; /* a build without the x86 kernels */
            const attn_gemm_arch a = attn_gemm_arch_blocked(base, &cs);
            CHECK(a.kc == parts[p].kc[isa] && a.mc == parts[p].mc[isa] && a.nc == parts[p].nc[isa],
                  "%s %s: KC %d MC %d NC %d, want %d %d %d", parts[p].name, attn_isa_name((attn_isa)isa), a.kc, a.mc,
                  a.nc, parts[p].kc[isa], parts[p].mc[isa], parts[p].nc[isa]);
            /* the promises: A micro-panel within 2/3 of L1d, blocks multiples of the tile, B~ no
             * larger a share of L2 than the tuned block of 1 MiB, A~ of L3 likewise */
            CHECK((int64_t)a.mr * a.kc * 4 <= cs.l1d * 2 / 3 && a.mc % a.mr == 0 && a.nc % a.nr == 0 && a.kc % 16 == 0,
                  "%s %s: blocking does not fit", parts[p].name, attn_isa_name((attn_isa)isa));
            CHECK((double)a.kc * a.nc / (double)cs.l2 <= (double)base->kc * base->nc / (double)ATTN_GEMM_REF_L2 + 1e-12,
                  "%s %s: B~ outgrows its share of L2", parts[p].name, attn_isa_name((attn_isa)isa));
            CHECK(a.mr == base->mr && a.nr == base->nr && a.ukr == base->ukr, "%s: the kernel itself changed",
                  parts[p].name);
        }
    }
}

/* The flash backward's key runs: K and V of a run (fp32 or bf16) within the L2. */
static void check_key_runs(void) {
    static const struct {
        int64_t l2, d, dv;
        int bytes;
        int64_t want;
    } rc[] = {{1 * M_, 64, 64, 4, 32},    {1 * M_, 128, 128, 4, 16}, {1 * M_, 128, 128, 2, 32},
              {2 * M_, 64, 64, 4, 64},    {2 * M_, 128, 128, 4, 32}, {256 * K_, 64, 64, 4, 8},
              {256 * K_, 128, 128, 4, 4}, {256 * K_, 100, 28, 4, 8}, {256 * K_, 4096, 4096, 4, 1},
              {4096, 64, 64, 4, 1}};
    for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++) {
        const int64_t got = attn_flash_key_run_blocks(rc[i].d, rc[i].dv, rc[i].bytes, rc[i].l2);
        CHECK(got == rc[i].want, "key run for L2 %lld, d %lld, dv %lld, %d-byte K/V: %lld blocks, want %lld",
              (long long)rc[i].l2, (long long)rc[i].d, (long long)rc[i].dv, rc[i].bytes, (long long)got,
              (long long)rc[i].want);
        CHECK(got == 1 || got * ATTN_FLASH_BC * (rc[i].d + rc[i].dv) * rc[i].bytes <= rc[i].l2,
              "key run outgrows the L2");
    }
}

static void check_parse(void) {
    attn_cache_sizes c = {1, 2, 3, "x", "x", "x"};
    const char *why;
    CHECK(attn_cache_parse("l1=48K,l2=2M,l3=32M", &c, &why) && c.l1d == 48 * K_ && c.l2 == 2 * M_ &&
              c.l3 == 32 * (int64_t)M_ && !strcmp(c.l2_src, "ATTN_CACHE"),
          "full ATTN_CACHE parsed to %lld %lld %lld", (long long)c.l1d, (long long)c.l2, (long long)c.l3);
    attn_cache_sizes d = {1, 2, 3, "x", "x", "x"};
    CHECK(attn_cache_parse("l2=1310720", &d, &why) && d.l1d == 1 && d.l2 == 1310720 && d.l3 == 3 &&
              !strcmp(d.l1d_src, "x"),
          "a partial ATTN_CACHE changes only what it names");
    static const char *bad[] = {"", "l1=", "l4=1M", "l1=48Q", "l1=1K", "l2=1M,", "l2=1M;l3=2M", "l1=-32K", "l3=99G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_cache_sizes e = {1, 2, 3, "x", "x", "x"};
        why = NULL;
        CHECK(!attn_cache_parse(bad[i], &e, &why) && why && e.l1d == 1 && e.l2 == 2 && e.l3 == 3,
              "ATTN_CACHE \"%s\" accepted or half applied", bad[i]);
    }
}

/* The process's caches and the dispatch context's blocking. */
static void check_context(void) {
    const attn_cache_sizes *cs = attn_cpu_caches();
    const char *problem, *env = attn_cache_env(&problem);
    printf("caches: L1d %lld (%s), L2 %lld (%s), L3 %lld (%s); ATTN_CACHE %s\n", (long long)cs->l1d, cs->l1d_src,
           (long long)cs->l2, cs->l2_src, (long long)cs->l3, cs->l3_src, env ? env : "(unset)");
    CHECK(cs->l1d >= 4096 && cs->l2 >= 4096 && cs->l3 >= 4096, "cache sizes not positive");
    if (env) {
        attn_cache_sizes want = *cs;
        CHECK(!problem && attn_cache_parse(env, &want, &problem) && want.l1d == cs->l1d && want.l2 == cs->l2 &&
                  want.l3 == cs->l3,
              "ATTN_CACHE=%s not applied", env);
    }
    FOR_EACH_ISA(isa) {
        const attn_gemm_arch *g = attn_kernel_ctx_for((attn_isa)isa)->gemm;
        const attn_gemm_arch want = attn_gemm_arch_blocked(attn_kernel_ctx_for((attn_isa)isa)->gemm_base, cs);
        CHECK(g->kc == want.kc && g->mc == want.mc && g->nc == want.nc, "%s context: KC %d MC %d NC %d, want %d %d %d",
              attn_isa_name((attn_isa)isa), g->kc, g->mc, g->nc, want.kc, want.mc, want.nc);
        printf("  %s: KC %d MC %d NC %d\n", attn_isa_name((attn_isa)isa), g->kc, g->mc, g->nc);
    }
}

/* SGEMM under this process's blocking against float64, threads 1..3 bitwise. */
static void check_sgemm(test_rng *rng) {
    static const int64_t shapes[][3] = {{37, 1100, 900}, {3000, 70, 413}, {129, 2100, 385}, {1, 1500, 800}};
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            if (isa == ATTN_ISA_REF && m * n * k > 100000000) continue; /* the portable kernel is slow */
            float *a = xmalloc(sizeof(float) * (size_t)(m * k)), *b = xmalloc(sizeof(float) * (size_t)(k * n));
            float *c[3];
            double *ref = xmalloc(sizeof(double) * (size_t)(m * n));
            fill_normal(rng, a, (size_t)(m * k), 1.0);
            fill_normal(rng, b, (size_t)(k * n), 1.0);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) ref[i * n + j] = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t p = 0; p < k; p++) {
                    const double x = a[i * k + p];
                    for (int64_t j = 0; j < n; j++) ref[i * n + j] += x * b[p * n + j];
                }
            for (int t = 0; t < 3; t++) {
                attn_set_num_threads(t + 1);
                const size_t wsb = attn_sgemm_workspace_size(m, n, k);
                void *ws = xmalloc(wsb);
                c[t] = xmalloc(sizeof(float) * (size_t)(m * n));
                CHECK_OK(attn_sgemm(ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, k, 1.0f, a, k, b, n, 0.0f, c[t], n, ws, wsb));
                free(ws);
            }
            attn_set_num_threads(0);
            const double err = rel_err_fd(c[0], ref, (size_t)(m * n));
            CHECK(err < 1e-6, "sgemm %lldx%lldx%lld [%s]: rel err %.3g", (long long)m, (long long)n, (long long)k,
                  attn_isa_name((attn_isa)isa), err);
            for (int t = 1; t < 3; t++)
                CHECK(!memcmp(c[t], c[0], sizeof(float) * (size_t)(m * n)),
                      "sgemm %lldx%lldx%lld [%s]: %d threads differ", (long long)m, (long long)n, (long long)k,
                      attn_isa_name((attn_isa)isa), t + 1);
            for (int t = 0; t < 3; t++) free(c[t]);
            free(a);
            free(b);
            free(ref);
        }
    }
    attn_force_isa(attn_detected_isa());
}

/* Flash attention (causal, several tiles) against a float64 direct evaluation. */
static void check_flash(test_rng *rng) {
    const int64_t H = 2, N = 200, d = 64;
    const size_t n = (size_t)(H * N * d);
    float *q = xmalloc(sizeof(float) * n), *k = xmalloc(sizeof(float) * n), *v = xmalloc(sizeof(float) * n);
    float *o = xmalloc(sizeof(float) * n);
    double *ref = xmalloc(sizeof(double) * n), *s = xmalloc(sizeof(double) * (size_t)N);
    fill_normal(rng, q, n, 1.0);
    fill_normal(rng, k, n, 1.0);
    fill_normal(rng, v, n, 1.0);
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < N; i++) {
            double mx = -INFINITY, l = 0;
            for (int64_t j = 0; j <= i; j++) {
                double a = 0;
                for (int64_t x = 0; x < d; x++) a += (double)q[(h * N + i) * d + x] * k[(h * N + j) * d + x];
                s[j] = a / 8.0;
                mx = s[j] > mx ? s[j] : mx;
            }
            double *r = ref + (h * N + i) * d;
            for (int64_t x = 0; x < d; x++) r[x] = 0;
            for (int64_t j = 0; j <= i; j++) {
                const double p = exp(s[j] - mx);
                l += p;
                for (int64_t x = 0; x < d; x++) r[x] += p * v[(h * N + j) * d + x];
            }
            for (int64_t x = 0; x < d; x++) r[x] /= l;
        }
    attn_tensor tq = attn_tensor_4d(q, 1, H, N, d), tk = attn_tensor_4d(k, 1, H, N, d),
                tv = attn_tensor_4d(v, 1, H, N, d);
    attn_tensor to = attn_tensor_4d(o, 1, H, N, d);
    attn_sdpa_params p = attn_sdpa_params_default();
    p.causal = ATTN_CAUSAL_TOP_LEFT;
    const size_t wsb = attn_flash_workspace_size(&tq, &tk, &tv);
    void *ws = xmalloc(wsb);
    CHECK_OK(attn_flash_forward(&tq, &tk, &tv, &p, &to, NULL, ws, wsb));
    const double err = rel_err_fd(o, ref, n);
    CHECK(err < 1e-5, "flash forward: rel err %.3g", err);
    free(ws);
    free(q);
    free(k);
    free(v);
    free(o);
    free(ref);
    free(s);
}

int main(void) {
    test_rng rng = rng_seeded(0x7c4e);
    check_blocking();
    check_key_runs();
    check_parse();
    check_context();
    check_sgemm(&rng);
    check_flash(&rng);
    return test_summary("test_tuning");
}
