/* Non-finite values propagate as IEEE arithmetic (and PyTorch) says.
 *
 * Parity (tests/parity/gen_nonfinite.py): a NaN, +-Inf or a float64 1e300 (+Inf in float32) in a
 * weight, an input or a float attn_mask of multihead_attention, transformer_encoder_layer and
 * transformer_decoder_layer, run through run.c's API under every ISA the CPU has: the NaN / +Inf /
 * -Inf positions of the output must be PyTorch's exactly, the finite entries within 1e-4 (relative,
 * over the finite entries).
 *
 * Kernels against a float64 evaluation of the textbook formulas (PyTorch's math): softmax,
 * layernorm, GELU, ReLU, the flash (float and bf16) and the reference SDPA with a non-finite value
 * in Q, K, V or the float mask, and their backward passes with one in Q, K, V, dO or the mask;
 * Longformer forward and backward (against SDPA on its pattern of seen keys), linear attention's
 * and Performer's forward and backward (against their formulas pair by pair), the bf16 GEMM.
 *
 * Also a helper of tests/cli_test.cmake (which splits cases with test_seed_modules --split):
 *   test_nonfinite --compare OUT FIXTURE CASE   'output' of OUT against caseCASE.out: the same
 *                                               NaN / +-Inf positions, finite entries within 1e-4
 *   test_nonfinite --set IN OUT NAME E VALUE    IN with element E of the F32 tensor NAME set to
 *                                               VALUE, written to OUT (an attn checkpoint with its
 *                                               checksum recomputed: tests/viz_text_test.cmake) */
#include "attn/linear_attention.h"
#include "attn/longformer.h"
#include "io/json.h"
#include "nn/nn_run.h"
#include "test_util.h"
#include "train/train_internal.h"

#define TOL 1e-4

/* 0 finite, 1 NaN, 2 +Inf, 3 -Inf */
static int kind_of(double v) { return isnan(v) ? 1 : isinf(v) ? (v > 0 ? 2 : 3) : 0; }

static size_t lenient_nan;

/* Same non-finite positions and kinds, finite entries within TOL; returns the finite rel err (INFINITY
 * on a position mismatch). *nonfinite receives the reference's count of non-finite entries.
 * lenient 1: a NaN may stand for a finite or an infinite reference value (counted in lenient_nan:
 * a kernel that multiplies a masked key's value row by P = 0 inside a tile it computes, or whose
 * float32 P underflows to 0 where float64's does not, adds 0 * Inf = NaN to whatever that row
 * had); 2: also any non-finite kind for a non-finite one. */
static double compare_nf_tol(const char *ctx, const float *got, const double *ref, size_t n, size_t *nonfinite,
                             int lenient, double tol) {
    double num = 0, den = 0;
    size_t bad = 0, nf = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        int kg = kind_of(got[i]), kr = kind_of(ref[i]);
        if (lenient == 2 && kg && kr) kg = kr; /* non-finite of any kind for non-finite */
        nf += kr != 0;
        if (lenient && kg == 1 && kr != 1) {
            lenient_nan++;
            continue;
        }
        if (kg != kr) {
            if (!bad++) first = i;
            continue;
        }
        if (kr) continue;
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    if (nonfinite) *nonfinite = nf;
    CHECK(!bad, "%s: %zu of %zu entries differ in kind, first [%zu]: got %g, want %g", ctx, bad, n, first,
          (double)got[first], ref[first]);
    const double e = bad ? INFINITY : den > 0 ? sqrt(num / den) : sqrt(num);
    CHECK(e <= tol, "%s: finite entries' rel err %.3g > %.0e", ctx, e, tol);
    return e;
}

static double compare_nf_l(const char *ctx, const float *got, const double *ref, size_t n, size_t *nonfinite,
                           int lenient) {
    return compare_nf_tol(ctx, got, ref, n, nonfinite, lenient, TOL);
}

static double compare_nf(const char *ctx, const float *got, const double *ref, size_t n, size_t *nonfinite) {
    return compare_nf_l(ctx, got, ref, n, nonfinite, 0);
}

static double worst;

static void track(double e) {
    if (e > worst) worst = e;
}

/* ---- parity against PyTorch through run.c ---- */

static int members(const char *obj, const char **body) {
    const char *b = strchr(obj, '{') + 1, *e = strrchr(obj, '}');
    while (*b == ' ') b++;
    *body = b;
    return (int)(e - b);
}

static nn_model *model_of(const attn_safetensors *st, int ci) {
    char key[64], text[1024];
    const char *v[3], *what[3] = {"module", "config", "call"};
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "case%d.%s", ci, what[i]);
        v[i] = attn_safetensors_metadata_find(st, key);
    }
    const char *cb = "", *kb = "";
    const int cl = v[1] ? members(v[1], &cb) : 0, kl = v[2] ? members(v[2], &kb) : 0;
    snprintf(text, sizeof text, "{\"module\": \"%s\"%s%.*s%s%.*s}", v[0] ? v[0] : "?", cl > 0 ? ", " : "", cl, cb,
             kl > 0 ? ", " : "", kl, kb);
    attn_json_doc *doc = NULL;
    nn_model *m = NULL;
    CHECK(attn_json_parse(text, strlen(text), NULL, &doc, NULL) == ATTN_JSON_OK, "case %d: config %s", ci, text);
    if (doc) CHECK_OK(attn_nn_model_create(attn_json_root(doc), &m));
    attn_json_free(doc);
    return m;
}

static void parity_case(const attn_safetensors *st, int ci, attn_isa isa, int *nonfinite_cases) {
    char pre[32], key[64], ctx[300];
    snprintf(pre, sizeof pre, "case%d.", ci);
    snprintf(key, sizeof key, "case%d.what", ci);
    const char *what = attn_safetensors_metadata_find(st, key);
    snprintf(ctx, sizeof ctx, "case %d [%s] (%s)", ci, attn_isa_name(isa), what ? what : "?");
    nn_model *m = model_of(st, ci);
    if (!m) return;
    snprintf(key, sizeof key, "%sp.", pre);
    CHECK_OK(attn_params_load(attn_nn_model_params(m), st, key, 1));
    CHECK_OK(attn_nn_model_bind(m, st, pre, 0));
    CHECK_OK(attn_nn_model_forward(m, 0, 0, 0, 0));
    int rank = 0;
    int64_t shape[4];
    size_t n = 0;
    snprintf(key, sizeof key, "%sout", pre);
    float *ref = fx_floats(st, key, &n);
    const float *out = attn_nn_model_output(m, &rank, shape);
    const int ok = out && ref && rank == 3 && (size_t)(shape[0] * shape[1] * shape[2]) == n;
    CHECK(ok, "%s: output shape", ctx);
    if (ok) {
        double *r = xmalloc(sizeof(double) * n);
        for (size_t i = 0; i < n; i++) r[i] = ref[i];
        size_t nf = 0;
        track(compare_nf(ctx, out, r, n, &nf));
        *nonfinite_cases += nf > 0;
        if (isa == attn_detected_isa()) printf("%s: %zu of %zu outputs non-finite\n", ctx, nf, n);
        free(r);
    }
    free(ref);
    attn_nn_model_free(m);
}

static void test_parity(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/nonfinite.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (!st) return;
    const char *nc = attn_safetensors_metadata_find(st, "cases");
    const int n = nc ? atoi(nc) : 0;
    CHECK(n >= 30, "fixture has %d cases", n);
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        int nonfinite = 0;
        for (int ci = 0; ci < n; ci++) parity_case(st, ci, (attn_isa)isa, &nonfinite);
        /* the fixture must exercise propagation, not only finite outputs */
        CHECK(nonfinite >= n - 4, "[%s] only %d of %d cases have a non-finite output", attn_isa_name((attn_isa)isa),
              nonfinite, n);
    }
    attn_force_isa(attn_detected_isa());
    attn_safetensors_close(st);
}

/* ---- kernels against float64 evaluations of PyTorch's formulas ---- */

static const float SPECIAL[] = {NAN, INFINITY, -INFINITY, 3e38f};

/* n random values with one of the first kinds SPECIAL values at count random positions (3e38 only
 * where float32 PyTorch would not overflow differently from float64: not in sums of squares). */
static void fill_special(test_rng *g, float *x, size_t n, int count, int kinds) {
    fill_normal(g, x, n, 1);
    for (int c = 0; c < count; c++) x[rng_next(g) % n] = SPECIAL[rng_next(g) % (uint64_t)kinds];
}

/* softmax as torch.softmax (max-subtracted; a NaN anywhere makes the row NaN), except rows that are
 * all -inf: attn's documented 0 (PyTorch 1.13: NaN). */
static void softmax_ref(const float *x, double *y, int n) {
    double m = -INFINITY;
    int nan = 0;
    for (int i = 0; i < n; i++) {
        nan |= isnan(x[i]);
        if (x[i] > m) m = x[i];
    }
    if (!nan && m == -INFINITY) {
        for (int i = 0; i < n; i++) y[i] = 0;
        return;
    }
    if (nan) m = NAN;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += y[i] = exp(x[i] - m);
    for (int i = 0; i < n; i++) y[i] /= sum;
}

static double gelu_ref(double x, int tanh_form) {
    if (tanh_form) return 0.5 * x * (1 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x * 0.70710678118654752440));
}

static void test_ops(void) {
    test_rng g = rng_seeded(71);
    enum { R = 12, N = 37 };
    float x[R * N], y[R * N], gam[N], bet[N];
    double ref[R * N];
    char ctx[96];
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        const char *in = attn_isa_name((attn_isa)isa);
        for (int rep = 0; rep < 4; rep++) {
            fill_special(&g, x, R * N, 6, 4);
            /* rows: one NaN among -inf, all -inf, one +inf, all finite */
            for (int i = 0; i < N; i++) x[i] = x[N + i] = -INFINITY;
            x[(size_t)rng_next(&g) % N] = NAN;
            x[2 * N + rng_next(&g) % N] = INFINITY;
            CHECK_OK(attn_softmax_forward(x, y, R, N));
            for (int r = 0; r < R; r++) softmax_ref(x + r * N, ref + r * N, N);
            snprintf(ctx, sizeof ctx, "softmax [%s] rep %d", in, rep);
            track(compare_nf(ctx, y, ref, R * N, NULL));

            fill_special(&g, x, R * N, 5, 3);
            fill_special(&g, gam, N, rep, 3);
            fill_special(&g, bet, N, rep, 3);
            CHECK_OK(attn_layernorm_forward(x, gam, bet, y, NULL, NULL, R, N, 1e-5f));
            for (int r = 0; r < R; r++) {
                double mean = 0, var = 0;
                for (int i = 0; i < N; i++) mean += x[r * N + i];
                mean /= N;
                for (int i = 0; i < N; i++) var += (x[r * N + i] - mean) * (x[r * N + i] - mean);
                const double rstd = 1 / sqrt(var / N + 1e-5);
                for (int i = 0; i < N; i++) ref[r * N + i] = (x[r * N + i] - mean) * rstd * gam[i] + bet[i];
            }
            snprintf(ctx, sizeof ctx, "layernorm [%s] rep %d", in, rep);
            track(compare_nf(ctx, y, ref, R * N, NULL));

            fill_special(&g, x, R * N, 20, 4);
            for (int t = 0; t < 2; t++) {
                CHECK_OK(attn_gelu_forward(x, y, R * N, t ? ATTN_GELU_TANH : ATTN_GELU_ERF));
                for (int i = 0; i < R * N; i++) ref[i] = gelu_ref(x[i], t);
                snprintf(ctx, sizeof ctx, "gelu %s [%s] rep %d", t ? "tanh" : "erf", in, rep);
                track(compare_nf(ctx, y, ref, R * N, NULL));
            }
            CHECK_OK(attn_relu_forward(x, y, R * N));
            for (int i = 0; i < R * N; i++) ref[i] = isnan(x[i]) ? NAN : x[i] > 0 ? x[i] : 0;
            snprintf(ctx, sizeof ctx, "relu [%s] rep %d", in, rep);
            track(compare_nf(ctx, y, ref, R * N, NULL));
        }
    }
    attn_force_isa(attn_detected_isa());
}

/* ---- SDPA (reference and flash) ---- */

/* xb = bf16(x) and x = the rounded values (NaN and +-Inf stay what they are). */
static void to_bf16(float *x, attn_bf16 *xb, size_t n) {
    for (size_t e = 0; e < n; e++) x[e] = attn_bf16_to_f32(xb[e] = attn_f32_to_bf16(x[e]));
}

enum { SB = 1, SH = 2, SNQ = 7, SNK = 19, SD = 8 };

typedef struct sdpa_at {
    int h, i, j, t; /* head, query row, key row, column */
} sdpa_at;

/* Fresh inputs for one case: normal Q, K, V, float mask and (dout not NULL) dO, the boolean mask
 * all true but in mode 2 (each pair kept with probability 0.7), and a random place for the
 * special value. */
static sdpa_at sdpa_inputs(test_rng *g, float *q, float *k, float *v, float *am, float *dout, uint8_t *allow,
                           int mode) {
    fill_normal(g, q, SH * SNQ * SD, 1);
    fill_normal(g, k, SH * SNK * SD, 1);
    fill_normal(g, v, SH * SNK * SD, 1);
    fill_normal(g, am, SNQ * SNK, 1);
    if (dout) fill_normal(g, dout, SH * SNQ * SD, 1);
    for (int e = 0; e < SNQ * SNK; e++) allow[e] = mode < 2 || rng_uniform(g) < 0.7;
    sdpa_at at;
    at.h = (int)(rng_next(g) % SH);
    at.i = (int)(rng_next(g) % SNQ);
    at.j = (int)(rng_next(g) % SNK);
    at.t = (int)(rng_next(g) % SD);
    return at;
}

/* Does query i see key j (the boolean and the causal mask)? */
static int sees(const uint8_t *allow, int causal, int i, int j) { return allow[i * SNK + j] && !(causal && j > i); }

/* Row i of head h: s[j] = q_i . k_j / sqrt(d) + am_ij for the keys it sees (NaN, never read, for
 * the others) and *m their maximum (NaN when one is NaN). Returns 0 for a row that sees no key or
 * only -inf logits (a masked row: output 0, no gradient). */
static int row_logits(const float *q, const float *k, const float *am, const uint8_t *allow, int causal, int nq, int h,
                      int i, double *s, double *m) {
    const double scale = 1 / sqrt((double)SD);
    int nan = 0, any = 0;
    *m = -INFINITY;
    for (int j = 0; j < SNK; j++) {
        s[j] = NAN;
        if (!sees(allow, causal, i, j)) continue;
        double x = 0;
        for (int t = 0; t < SD; t++) x += (double)q[(h * nq + i) * SD + t] * k[(h * SNK + j) * SD + t];
        s[j] = x * scale + (am ? am[i * SNK + j] : 0);
        nan |= isnan(s[j]);
        any = 1;
        if (s[j] > *m) *m = s[j];
    }
    if (nan) *m = NAN;
    return any && *m != -INFINITY;
}

/* PyTorch's math on the logits (q.k scale + additive mask, softmax with NaN propagation) over the
 * keys the boolean / causal mask lets a query see; masked keys are not read (attn's convention, as
 * PyTorch's fused kernels); a query that sees no key gets 0. */
static void sdpa_ref(const float *q, const float *k, const float *v, const float *am, const uint8_t *allow, int causal,
                     int nq, double *o) {
    double s[SNK], m;
    for (int h = 0; h < SH; h++)
        for (int i = 0; i < nq; i++) {
            const int live = row_logits(q, k, am, allow, causal, nq, h, i, s, &m);
            double sum = 0;
            for (int j = 0; j < SNK; j++)
                if (sees(allow, causal, i, j)) sum += exp(s[j] - m);
            for (int t = 0; t < SD; t++) {
                double acc = 0;
                for (int j = 0; j < SNK; j++)
                    if (sees(allow, causal, i, j)) acc += exp(s[j] - m) / sum * v[(h * SNK + j) * SD + t];
                o[(h * nq + i) * SD + t] = live ? acc : 0;
            }
        }
}

static void test_sdpa(void) {
    test_rng g = rng_seeded(72);
    float q[SH * SNQ * SD], k[SH * SNK * SD], v[SH * SNK * SD], am[SNQ * SNK], out[SH * SNQ * SD];
    uint8_t allow[SNQ * SNK];
    double ref[SH * SNQ * SD];
    char ctx[128];
    attn_tensor tq = attn_tensor_4d(q, SB, SH, SNQ, SD), tk = attn_tensor_4d(k, SB, SH, SNK, SD),
                tv = attn_tensor_4d(v, SB, SH, SNK, SD), to = attn_tensor_4d(out, SB, SH, SNQ, SD),
                tam = attn_tensor_4d(am, 1, 1, SNQ, SNK);
    attn_btensor tbm = {allow, 4, {1, 1, SNQ, SNK}, {SNQ * SNK, SNQ * SNK, SNK, 1}};
    attn_bf16 qb[SH * SNQ * SD], kb[SH * SNK * SD], vb[SH * SNK * SD];
    attn_tensor tqb = attn_tensor_4d_typed(qb, ATTN_TYPE_BF16, SB, SH, SNQ, SD),
                tkb = attn_tensor_4d_typed(kb, ATTN_TYPE_BF16, SB, SH, SNK, SD),
                tvb = attn_tensor_4d_typed(vb, ATTN_TYPE_BF16, SB, SH, SNK, SD);
    const size_t ws = attn_sdpa_workspace_size(&tq, &tk, &tv) + attn_flash_workspace_size(&tq, &tk, &tv) +
                      attn_flash_workspace_size(&tqb, &tkb, &tvb);
    void *w = xmalloc(ws);
    /* where: 0 q, 1 k, 2 v, 3 additive mask, 4 a key hidden by the boolean mask (k and v) */
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        for (int where = 0; where < 5; where++)
            for (int sp = 0; sp < (where == 3 ? 4 : 3); sp++) /* 3e38 only as a mask: q.k overflows float */
                for (int mode = 0; mode < 3; mode++) {        /* none, causal, bool + float masks */
                    const sdpa_at at = sdpa_inputs(&g, q, k, v, am, NULL, allow, mode);
                    const int h = at.h, i = at.i, j = at.j, t = at.t;
                    const float val = SPECIAL[sp];
                    if (where == 0) q[(h * SNQ + i) * SD + t] = val;
                    if (where == 1) k[(h * SNK + j) * SD + t] = val;
                    if (where == 2) v[(h * SNK + j) * SD + t] = val;
                    if (where == 3) am[i * SNK + j] = val;
                    if (where == 4) {
                        k[(h * SNK + j) * SD + t] = v[(h * SNK + j) * SD + t] = val;
                        for (int r = 0; r < SNQ; r++) allow[r * SNK + j] = 0;
                    }
                    attn_sdpa_params p = attn_sdpa_params_default();
                    p.causal = mode == 1 ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
                    if (where == 3 || mode == 2) p.add_mask = &tam;
                    if (mode == 2 || where == 4) p.bool_mask = &tbm;
                    sdpa_ref(q, k, v, p.add_mask ? am : NULL, allow, mode == 1, SNQ, ref);
                    for (int flash = 0; flash < 2; flash++) {
                        if (flash)
                            CHECK_OK(attn_flash_forward(&tq, &tk, &tv, &p, &to, NULL, w, ws));
                        else
                            CHECK_OK(attn_sdpa_forward(&tq, &tk, &tv, &p, &to, NULL, NULL, w, ws));
                        snprintf(ctx, sizeof ctx, "%s [%s] %g in %s, mode %d", flash ? "flash" : "sdpa",
                                 attn_isa_name((attn_isa)isa), (double)val,
                                 (const char *[]){"q", "k", "v", "float mask", "a masked key"}[where], mode);
                        /* The flash kernel multiplies a masked key's value row by P = 0 within a tile it
                         * computes: 0 * Inf or NaN there is NaN (as PyTorch 1.13's math path gives),
                         * while the reference path never reads a masked key (as the fused kernels) */
                        const int lenient = flash && (where == 4 || (where == 2 && mode > 0));
                        track(compare_nf_l(ctx, out, ref, sizeof out / 4, NULL, lenient));
                    }
                    /* bf16 flash: Q, K, V rounded to bf16 (NaN and +-Inf stay what they are), the
                     * reference on the rounded values; the same positions, finite entries within
                     * bf16's error (P is rounded to bf16 for P V) */
                    to_bf16(q, qb, sizeof q / 4);
                    to_bf16(k, kb, sizeof k / 4);
                    to_bf16(v, vb, sizeof v / 4);
                    sdpa_ref(q, k, v, p.add_mask ? am : NULL, allow, mode == 1, SNQ, ref);
                    CHECK_OK(attn_flash_forward(&tqb, &tkb, &tvb, &p, &to, NULL, w, ws));
                    snprintf(ctx, sizeof ctx, "flash bf16 [%s] %g in %s, mode %d", attn_isa_name((attn_isa)isa),
                             (double)val, (const char *[]){"q", "k", "v", "float mask", "a masked key"}[where], mode);
                    compare_nf_tol(ctx, out, ref, sizeof out / 4, NULL, where == 4 || (where == 2 && mode > 0), 1e-2);
                }
    }
    attn_force_isa(attn_detected_isa());
    free(w);
}

/* The gradients of sdpa_ref by PyTorch's autograd formulas, in float64: P = softmax(S),
 * dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)), dQ = scale dS K, dK = scale dS^T Q, over
 * the keys each query sees (a masked key is not read; a query that sees none adds nothing). */
static void sdpa_bwd_ref(const float *q, const float *k, const float *v, const float *am, const uint8_t *allow,
                         int causal, int nq, const float *dout, double *dq, double *dk, double *dv) {
    const double scale = 1 / sqrt((double)SD);
    double s[SNK], pr[SNK], dp[SNK], m;
    memset(dq, 0, sizeof(double) * SH * nq * SD);
    memset(dk, 0, sizeof(double) * SH * SNK * SD);
    memset(dv, 0, sizeof(double) * SH * SNK * SD);
    for (int h = 0; h < SH; h++)
        for (int i = 0; i < nq; i++) {
            if (!row_logits(q, k, am, allow, causal, nq, h, i, s, &m)) continue;
            double sum = 0, dsum = 0;
            for (int j = 0; j < SNK; j++)
                if (sees(allow, causal, i, j)) sum += exp(s[j] - m);
            for (int j = 0; j < SNK; j++) {
                if (!sees(allow, causal, i, j)) continue;
                pr[j] = exp(s[j] - m) / sum;
                dp[j] = 0;
                for (int t = 0; t < SD; t++) dp[j] += (double)dout[(h * nq + i) * SD + t] * v[(h * SNK + j) * SD + t];
                dsum += pr[j] * dp[j];
            }
            for (int j = 0; j < SNK; j++) {
                if (!sees(allow, causal, i, j)) continue;
                const double ds = pr[j] * (dp[j] - dsum);
                for (int t = 0; t < SD; t++) {
                    dq[(h * nq + i) * SD + t] += scale * ds * k[(h * SNK + j) * SD + t];
                    dk[(h * SNK + j) * SD + t] += scale * ds * q[(h * nq + i) * SD + t];
                    dv[(h * SNK + j) * SD + t] += pr[j] * dout[(h * nq + i) * SD + t];
                }
            }
        }
}

/* The backward passes with a NaN or an infinity in Q, K, V, dO or the float mask: the reference,
 * the flash kernel in float and in bf16 against sdpa_bwd_ref, same non-finite positions (a row
 * whose logits hold a NaN or an infinity has NaN probabilities, and its gradients are NaN, not a
 * masked row's zeros; 0 * Inf is NaN in dS K). Where a mask is in play the flash kernel may give
 * NaN where the reference is finite: it multiplies by P = 0 inside the tiles it computes (dV +=
 * P^T dO with a NaN in dO, a masked key's K or V row), which the reference never reads (the
 * forward's convention, above). */
static void test_sdpa_backward(void) {
    test_rng g = rng_seeded(73);
    float q[SH * SNQ * SD], k[SH * SNK * SD], v[SH * SNK * SD], am[SNQ * SNK], dout[SH * SNQ * SD];
    float out[SH * SNQ * SD], lse[SH * SNQ], dq[SH * SNQ * SD], dk[SH * SNK * SD], dv[SH * SNK * SD];
    attn_bf16 qb[SH * SNQ * SD], kb[SH * SNK * SD], vb[SH * SNK * SD], db[SH * SNQ * SD];
    uint8_t allow[SNQ * SNK];
    double rq[SH * SNQ * SD], rk[SH * SNK * SD], rv[SH * SNK * SD];
    char ctx[160];
    attn_tensor tq = attn_tensor_4d(q, SB, SH, SNQ, SD), tk = attn_tensor_4d(k, SB, SH, SNK, SD),
                tv = attn_tensor_4d(v, SB, SH, SNK, SD), tdo = attn_tensor_4d(dout, SB, SH, SNQ, SD),
                to = attn_tensor_4d(out, SB, SH, SNQ, SD), tl = attn_tensor_3d(lse, SB, SH, SNQ),
                tdq = attn_tensor_4d(dq, SB, SH, SNQ, SD), tdk = attn_tensor_4d(dk, SB, SH, SNK, SD),
                tdv = attn_tensor_4d(dv, SB, SH, SNK, SD), tam = attn_tensor_4d(am, 1, 1, SNQ, SNK);
    attn_tensor tqb = attn_tensor_4d_typed(qb, ATTN_TYPE_BF16, SB, SH, SNQ, SD),
                tkb = attn_tensor_4d_typed(kb, ATTN_TYPE_BF16, SB, SH, SNK, SD),
                tvb = attn_tensor_4d_typed(vb, ATTN_TYPE_BF16, SB, SH, SNK, SD),
                tdob = attn_tensor_4d_typed(db, ATTN_TYPE_BF16, SB, SH, SNQ, SD);
    attn_btensor tbm = {allow, 4, {1, 1, SNQ, SNK}, {SNQ * SNK, SNQ * SNK, SNK, 1}};
    const size_t ws = attn_sdpa_workspace_size(&tq, &tk, &tv) + attn_flash_workspace_size(&tq, &tk, &tv) +
                      attn_flash_workspace_size(&tqb, &tkb, &tvb);
    void *w = xmalloc(ws);
    static const char *const names[] = {"q", "k", "v", "dout", "float mask"};
    /* where: 0 q, 1 k, 2 v, 3 dout, 4 additive mask */
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        for (int where = 0; where < 5; where++)
            for (int sp = 0; sp < 3; sp++)
                for (int mode = 0; mode < 3; mode++) { /* none, causal, bool + float masks */
                    const sdpa_at at = sdpa_inputs(&g, q, k, v, am, dout, allow, mode);
                    const int h = at.h, i = at.i, j = at.j, t = at.t;
                    const float val = SPECIAL[sp];
                    if (where == 0) q[(h * SNQ + i) * SD + t] = val;
                    if (where == 1) k[(h * SNK + j) * SD + t] = val;
                    if (where == 2) v[(h * SNK + j) * SD + t] = val;
                    if (where == 3) dout[(h * SNQ + i) * SD + t] = val;
                    if (where == 4) am[i * SNK + j] = val;
                    attn_sdpa_params p = attn_sdpa_params_default();
                    p.causal = mode == 1 ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
                    if (where == 4 || mode == 2) p.add_mask = &tam;
                    if (mode == 2) p.bool_mask = &tbm;
                    /* flash takes D_i = dO_i . O_i (FlashAttention's, PyTorch's fused kernels), the
                     * math path rowsum(P dP): equal for finite values, but with an infinity in dO
                     * the one is +-Inf where the other sums +Inf and -Inf to NaN, and the kinds of
                     * dS, dQ and dK follow; with masks, a forward output made NaN by a masked key's
                     * infinite value (above) makes D_i NaN where the reference's is +-Inf */
                    const int lenient = (where == 3 && sp > 0) || mode > 0 ? 2 : 0;
                    for (int run = 0; run < 3; run++) { /* reference, flash, flash bf16 */
                        if (run == 2) { /* the inputs rounded to bf16, the reference on the rounded values */
                            to_bf16(q, qb, sizeof q / 4);
                            to_bf16(k, kb, sizeof k / 4);
                            to_bf16(v, vb, sizeof v / 4);
                            to_bf16(dout, db, sizeof dout / 4);
                        }
                        if (run != 1)
                            sdpa_bwd_ref(q, k, v, p.add_mask ? am : NULL, allow, mode == 1, SNQ, dout, rq, rk, rv);
                        if (run == 0) {
                            CHECK_OK(attn_sdpa_backward(&tq, &tk, &tv, &p, &tdo, &tdq, &tdk, &tdv, w, ws));
                        } else if (run == 1) {
                            CHECK_OK(attn_flash_forward(&tq, &tk, &tv, &p, &to, &tl, w, ws));
                            CHECK_OK(attn_flash_backward(&tq, &tk, &tv, &p, &to, &tdo, &tl, &tdq, &tdk, &tdv, w, ws));
                        } else {
                            CHECK_OK(attn_flash_forward(&tqb, &tkb, &tvb, &p, &to, &tl, w, ws));
                            CHECK_OK(
                                attn_flash_backward(&tqb, &tkb, &tvb, &p, &to, &tdob, &tl, &tdq, &tdk, &tdv, w, ws));
                        }
                        const float *gr[3] = {dq, dk, dv};
                        const double *rr[3] = {rq, rk, rv};
                        const size_t nr[3] = {sizeof dq / 4, sizeof dk / 4, sizeof dv / 4};
                        for (int x = 0; x < 3; x++) {
                            snprintf(ctx, sizeof ctx, "%s backward [%s] %g in %s, mode %d: %s",
                                     (const char *[]){"sdpa", "flash", "flash bf16"}[run], attn_isa_name((attn_isa)isa),
                                     (double)val, names[where], mode, (const char *[]){"dq", "dk", "dv"}[x]);
                            const double e = compare_nf_tol(ctx, gr[x], rr[x], nr[x], NULL, run > 0 ? lenient : 0,
                                                            run == 2 ? 3e-2 : 1e-4);
                            if (run < 2) track(e);
                        }
                    }
                }
    }
    attn_force_isa(attn_detected_isa());
    free(w);
}

/* Longformer (local window + global tokens, exact softmax over the keys a query sees) with a NaN or
 * an infinity in Q, K, V or dO, forward and backward, against sdpa_ref / sdpa_bwd_ref on the
 * boolean pattern of the keys each query sees (PyTorch's math: HF Longformer's is softmax over
 * exactly those keys): the same non-finite positions. Longformer runs on the flash kernel, whose
 * tiles hold keys outside a query's window as masked (P = 0): a NaN / Inf value row there gives
 * NaN through 0 * NaN (lenient, as the flash kernel under a mask above), and its backward is the
 * flash backward's (D_i = dO_i . O_i: any non-finite kind for a non-finite one). */
static size_t lf_nonfinite;

static void test_longformer(void) {
    test_rng g = rng_seeded(75);
    enum { LFN = SNK, LFW = 2 };
    float q[SH * LFN * SD], k[SH * LFN * SD], v[SH * LFN * SD], dout[SH * LFN * SD], out[SH * LFN * SD], lse[SH * LFN],
        dq[SH * LFN * SD], dk[SH * LFN * SD], dv[SH * LFN * SD];
    uint8_t allow[LFN * LFN], gm[LFN] = {0}, km[LFN];
    double ref[SH * LFN * SD], rq[SH * LFN * SD], rk[SH * LFN * SD], rv[SH * LFN * SD];
    char ctx[160];
    gm[0] = gm[11] = 1;                           /* two global tokens */
    for (int j = 0; j < LFN; j++) km[j] = j != 6; /* one padded key */
    attn_btensor tg = {gm, 2, {1, LFN}, {LFN, 1}}, tkm = {km, 2, {1, LFN}, {LFN, 1}};
    attn_tensor tq = attn_tensor_4d(q, SB, SH, LFN, SD), tk = attn_tensor_4d(k, SB, SH, LFN, SD),
                tv = attn_tensor_4d(v, SB, SH, LFN, SD), to = attn_tensor_4d(out, SB, SH, LFN, SD),
                tdo = attn_tensor_4d(dout, SB, SH, LFN, SD), tl = attn_tensor_3d(lse, SB, SH, LFN),
                tdq = attn_tensor_4d(dq, SB, SH, LFN, SD), tdk = attn_tensor_4d(dk, SB, SH, LFN, SD),
                tdv = attn_tensor_4d(dv, SB, SH, LFN, SD);
    for (int i = 0; i < LFN; i++)
        for (int j = 0; j < LFN; j++) allow[i * LFN + j] = km[j] && (gm[i] || gm[j] || abs(i - j) <= LFW);
    static const char *const names[] = {"q", "k", "v", "dout"};
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        for (int causal = 0; causal < 2; causal++) {
            attn_longformer_params lp = {LFW, &tg, causal, &tkm, 0};
            const size_t ws = attn_longformer_workspace_size(&tq, &tk, &tv, &lp);
            void *w = xmalloc(ws);
            for (int where = 0; where < 4; where++)
                for (int sp = 0; sp < 3; sp++) {
                    fill_normal(&g, q, SH * LFN * SD, 1);
                    fill_normal(&g, k, SH * LFN * SD, 1);
                    fill_normal(&g, v, SH * LFN * SD, 1);
                    fill_normal(&g, dout, SH * LFN * SD, 1);
                    const int h = (int)(rng_next(&g) % SH), i = (int)(rng_next(&g) % LFN),
                              j = (int)(rng_next(&g) % LFN), t = (int)(rng_next(&g) % SD);
                    const float val = SPECIAL[sp];
                    if (where == 0) q[(h * LFN + i) * SD + t] = val;
                    if (where == 1) k[(h * LFN + j) * SD + t] = val;
                    if (where == 2) v[(h * LFN + j) * SD + t] = val;
                    if (where == 3) dout[(h * LFN + i) * SD + t] = val;
                    CHECK_OK(attn_longformer_forward(&tq, &tk, &tv, &lp, &to, &tl, w, ws));
                    sdpa_ref(q, k, v, NULL, allow, causal, LFN, ref);
                    snprintf(ctx, sizeof ctx, "longformer [%s] %g in %s, %s", attn_isa_name((attn_isa)isa), (double)val,
                             names[where], causal ? "causal" : "non-causal");
                    size_t nf = 0;
                    if (where < 3) track(compare_nf_l(ctx, out, ref, SH * LFN * SD, &nf, where == 2));
                    lf_nonfinite += nf;
                    CHECK_OK(attn_longformer_backward(&tq, &tk, &tv, &lp, &to, &tdo, &tl, &tdq, &tdk, &tdv, w, ws));
                    sdpa_bwd_ref(q, k, v, NULL, allow, causal, LFN, dout, rq, rk, rv);
                    const float *gr[3] = {dq, dk, dv};
                    const double *rr[3] = {rq, rk, rv};
                    for (int x = 0; x < 3; x++) {
                        snprintf(ctx, sizeof ctx, "longformer backward [%s] %g in %s, %s: %s",
                                 attn_isa_name((attn_isa)isa), (double)val, names[where],
                                 causal ? "causal" : "non-causal", (const char *[]){"dq", "dk", "dv"}[x]);
                        track(compare_nf_l(ctx, gr[x], rr[x], SH * LFN * SD, &nf, 2));
                        lf_nonfinite += nf;
                    }
                }
            free(w);
        }
    }
    attn_force_isa(attn_detected_isa());
}

/* Linear attention (elu + 1) with a NaN or an infinity in Q, K or V, against its formula in
 * float64, out_i = sum_j (phi(q_i) . phi(k_j)) v_j / (sum_j phi(q_i) . phi(k_j) + eps) over the keys
 * query i sees: the same non-finite positions. Causal runs cross a chunk of the prefix-sum form
 * (64 rows), so a future key's value must not reach the rows before it. */
enum { LN = 80, LD = 8, LDV = 5, LH = 2 };

static double elu1(double x) { return isnan(x) ? x : (x > 0 ? x : expm1(x)) + 1; }

static void linear_ref(const float *q, const float *k, const float *v, int causal, double *o) {
    for (int h = 0; h < LH; h++)
        for (int i = 0; i < LN; i++) {
            double z[LD] = {0}, num[LDV] = {0}, den = 0, s[LD][LDV];
            memset(s, 0, sizeof s);
            for (int j = 0; j < (causal ? i + 1 : LN); j++)
                for (int t = 0; t < LD; t++) {
                    const double f = elu1(k[(h * LN + j) * LD + t]);
                    z[t] += f;
                    for (int x = 0; x < LDV; x++) s[t][x] += f * v[(h * LN + j) * LDV + x];
                }
            for (int t = 0; t < LD; t++) {
                const double f = elu1(q[(h * LN + i) * LD + t]);
                den += f * z[t];
                for (int x = 0; x < LDV; x++) num[x] += f * s[t][x];
            }
            for (int x = 0; x < LDV; x++) o[(h * LN + i) * LDV + x] = num[x] / (den + ATTN_LINEAR_ATTENTION_EPS);
        }
}

static void test_linear(void) {
    test_rng g = rng_seeded(74);
    float *q = xmalloc(sizeof(float) * LH * LN * LD), *k = xmalloc(sizeof(float) * LH * LN * LD);
    float *v = xmalloc(sizeof(float) * LH * LN * LDV), *out = xmalloc(sizeof(float) * LH * LN * LDV);
    double *ref = xmalloc(sizeof(double) * LH * LN * LDV);
    attn_tensor tq = attn_tensor_4d(q, 1, LH, LN, LD), tk = attn_tensor_4d(k, 1, LH, LN, LD),
                tv = attn_tensor_4d(v, 1, LH, LN, LDV), to = attn_tensor_4d(out, 1, LH, LN, LDV);
    char ctx[128];
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        const size_t ws = attn_linear_attention_workspace_size(&tq, &tk, &tv);
        void *w = xmalloc(ws);
        for (int where = 0; where < 3; where++)
            for (int sp = 0; sp < 3; sp++)
                for (int causal = 0; causal < 2; causal++) {
                    fill_normal(&g, q, (size_t)LH * LN * LD, 1);
                    fill_normal(&g, k, (size_t)LH * LN * LD, 1);
                    fill_normal(&g, v, (size_t)LH * LN * LDV, 1);
                    const int h = (int)(rng_next(&g) % LH), i = 40 + (int)(rng_next(&g) % 40);
                    float *x = where == 0 ? q : where == 1 ? k : v;
                    const int width = where == 2 ? LDV : LD;
                    x[(h * LN + i) * width + (int)(rng_next(&g) % (uint64_t)width)] = SPECIAL[sp];
                    linear_ref(q, k, v, causal, ref);
                    CHECK_OK(attn_linear_attention_forward(
                        &tq, &tk, &tv, causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE, NULL, &to, w, ws));
                    snprintf(ctx, sizeof ctx, "linear attention [%s] %g in %s row %d, %s", attn_isa_name((attn_isa)isa),
                             (double)SPECIAL[sp], (const char *[]){"q", "k", "v"}[where], i,
                             causal ? "causal" : "non-causal");
                    track(compare_nf(ctx, out, ref, (size_t)LH * LN * LDV, NULL));
                }
        free(w);
    }
    attn_force_isa(attn_detected_isa());
    free(q), free(k), free(v), free(out), free(ref);
}

/* ---- kernelised attention's backward, and Performer ----
 * Linear attention's and Performer's forward and backward with a NaN or an infinity in Q, K, V or
 * dO, against their formulas in float64 evaluated pair by pair (not by the kernels' prefix sums):
 * with features f = phi(q_i), g = phi(k_j) and a_ij = f_i . g_j over the keys query i sees,
 *   o_i = sum_j a_ij v_j / (sum_j a_ij + eps),
 *   dnum_i = dO_i / den_i,  dden_i = -(dO_i . o_i) / den_i,  c_ij = v_j . dnum_i + dden_i,
 *   df_i = sum_j c_ij g_j,  dg_j = sum_i c_ij f_i,  dv_j = sum_i a_ij dnum_i,
 * then through phi: elu + 1 (phi' = 1 for x > 0, exp(x) else), or FAVOR+ with its stabilisers
 * (linear_attention.h: a query's own maximum, one maximum over all keys, which skips a NaN: a NaN
 * or Inf key makes its own features NaN, so a causal query before it stays finite) and
 * dx = d^(-1/4) (dH W - (sum_r dH_r) x'), dH = dphi * phi. PyTorch has no such kernel: the
 * expectation is IEEE arithmetic on these formulas. The kernels sum in another order (prefix
 * sums, chunks), so +Inf - Inf may meet where the pairwise sum has a single infinity: any
 * non-finite kind stands for a non-finite one (never a finite value for a non-finite one, nor the
 * reverse). */
enum { KP = 16 };

static void kernel_ref(const double *f, const double *g, const float *v, int p, int causal, double eps,
                       const float *dout, double *o, double *df, double *dg, double *dv) {
    if (dout) {
        memset(df, 0, sizeof(double) * LH * LN * (size_t)p);
        memset(dg, 0, sizeof(double) * LH * LN * (size_t)p);
        memset(dv, 0, sizeof(double) * LH * LN * LDV);
    }
    for (int h = 0; h < LH; h++)
        for (int i = 0; i < LN; i++) {
            double a[LN], den = eps, num[LDV] = {0}, dnum[LDV], dden = 0;
            const double *fi = f + ((size_t)h * LN + (size_t)i) * (size_t)p;
            const int nj = causal ? i + 1 : LN;
            for (int j = 0; j < nj; j++) {
                a[j] = 0;
                for (int r = 0; r < p; r++) a[j] += fi[r] * g[((size_t)h * LN + (size_t)j) * (size_t)p + (size_t)r];
                den += a[j];
                for (int x = 0; x < LDV; x++) num[x] += a[j] * v[(h * LN + j) * LDV + x];
            }
            for (int x = 0; x < LDV; x++) o[(h * LN + i) * LDV + x] = num[x] / den;
            if (!dout) continue;
            for (int x = 0; x < LDV; x++) {
                dnum[x] = dout[(h * LN + i) * LDV + x] / den;
                dden -= dout[(h * LN + i) * LDV + x] * o[(h * LN + i) * LDV + x] / den;
            }
            for (int j = 0; j < nj; j++) {
                double c = dden;
                for (int x = 0; x < LDV; x++) c += v[(h * LN + j) * LDV + x] * dnum[x];
                const size_t gj = ((size_t)h * LN + (size_t)j) * (size_t)p;
                for (int r = 0; r < p; r++) {
                    df[((size_t)h * LN + (size_t)i) * (size_t)p + (size_t)r] += c * g[gj + (size_t)r];
                    dg[gj + (size_t)r] += c * fi[r];
                }
                for (int x = 0; x < LDV; x++) dv[(h * LN + j) * LDV + x] += a[j] * dnum[x];
            }
        }
}

/* FAVOR+ features of x [LH, LN, LD] in float64 (W [m, LD]) into phi [LH, LN, m]: query rows with
 * their own stabiliser (a NaN-propagating maximum), keys with one per head. */
static void favor_ref(const float *x, const float *w, int m, int is_query, double *phi) {
    const double s4 = pow((double)LD, -0.25);
    for (int h = 0; h < LH; h++) {
        double c = -INFINITY;
        for (int i = 0; i < LN; i++) {
            double xs[LD], hsq = 0, ci = -INFINITY;
            for (int t = 0; t < LD; t++) xs[t] = x[(h * LN + i) * LD + t] * s4, hsq += xs[t] * xs[t] / 2;
            for (int r = 0; r < m; r++) {
                double u = -hsq;
                for (int t = 0; t < LD; t++) u += (double)w[r * LD + t] * xs[t];
                phi[(h * LN + i) * m + r] = u;
                ci = isnan(u) || isnan(ci) ? NAN : u > ci ? u : ci;
            }
            if (is_query)
                for (int r = 0; r < m; r++) phi[(h * LN + i) * m + r] = exp(phi[(h * LN + i) * m + r] - ci) / sqrt(m);
            for (int r = 0; r < m; r++) /* the key maximum skips NaN: only the poisoned key's features */
                if (phi[(h * LN + i) * m + r] > c) c = phi[(h * LN + i) * m + r];
        }
        if (!is_query)
            for (int e = 0; e < LN * m; e++) phi[h * LN * m + e] = exp(phi[h * LN * m + e] - c) / sqrt(m);
    }
}

/* dx of FAVOR+ from dphi and phi (the stabilisers constant). */
static void favor_grad(const float *x, const float *w, int m, const double *phi, const double *dphi, double *dx) {
    const double s4 = pow((double)LD, -0.25);
    for (int e = 0; e < LH * LN; e++) {
        double dh[KP], sum = 0;
        for (int r = 0; r < m; r++) sum += dh[r] = dphi[e * m + r] * phi[e * m + r];
        for (int t = 0; t < LD; t++) {
            double acc = -sum * x[e * LD + t] * s4;
            for (int r = 0; r < m; r++) acc += dh[r] * w[r * LD + t];
            dx[e * LD + t] = s4 * acc;
        }
    }
}

static size_t kern_nonfinite;

/* One case of test_kernelised: the kernel's outputs against kernel_ref's. */
static void kernelised_case(int performer, int causal, const float *q, const float *k, const float *v,
                            const float *dout, const float *w, int m, const float *got[4], const char *ctx0) {
    const int p = performer ? m : LD;
    double *f = xmalloc(sizeof(double) * LH * LN * KP), *g = xmalloc(sizeof(double) * LH * LN * KP);
    double *df = xmalloc(sizeof(double) * LH * LN * KP), *dg = xmalloc(sizeof(double) * LH * LN * KP);
    double *o = xmalloc(sizeof(double) * LH * LN * LDV), *dv = xmalloc(sizeof(double) * LH * LN * LDV);
    double *dq = xmalloc(sizeof(double) * LH * LN * LD), *dk = xmalloc(sizeof(double) * LH * LN * LD);
    if (performer) {
        favor_ref(q, w, m, 1, f);
        favor_ref(k, w, m, 0, g);
    } else {
        for (int e = 0; e < LH * LN * LD; e++) f[e] = elu1(q[e]), g[e] = elu1(k[e]);
    }
    kernel_ref(f, g, v, p, causal, performer ? 0 : (double)ATTN_LINEAR_ATTENTION_EPS, dout, o, df, dg, dv);
    if (performer) {
        favor_grad(q, w, m, f, df, dq);
        favor_grad(k, w, m, g, dg, dk);
    } else {
        for (int e = 0; e < LH * LN * LD; e++) {
            dq[e] = df[e] * (q[e] > 0 ? 1 : exp((double)q[e]));
            dk[e] = dg[e] * (k[e] > 0 ? 1 : exp((double)k[e]));
        }
    }
    const double *ref[4] = {o, dq, dk, dv};
    const size_t n[4] = {LH * LN * LDV, LH * LN * LD, LH * LN * LD, LH * LN * LDV};
    char ctx[200];
    for (int x = 0; x < 4; x++) {
        snprintf(ctx, sizeof ctx, "%s: %s", ctx0, (const char *[]){"out", "dq", "dk", "dv"}[x]);
        size_t nf = 0;
        track(compare_nf_tol(ctx, got[x], ref[x], n[x], &nf, 2, performer ? 1e-3 : TOL));
        kern_nonfinite += nf;
    }
    free(f), free(g), free(df), free(dg), free(o), free(dv), free(dq), free(dk);
}

static void test_kernelised(void) {
    test_rng rg = rng_seeded(76);
    enum { M = 12 };
    float *q = xmalloc(sizeof(float) * LH * LN * LD), *k = xmalloc(sizeof(float) * LH * LN * LD);
    float *v = xmalloc(sizeof(float) * LH * LN * LDV), *out = xmalloc(sizeof(float) * LH * LN * LDV);
    float *dout = xmalloc(sizeof(float) * LH * LN * LDV), *dv = xmalloc(sizeof(float) * LH * LN * LDV);
    float *dq = xmalloc(sizeof(float) * LH * LN * LD), *dk = xmalloc(sizeof(float) * LH * LN * LD), w[M * LD];
    CHECK_OK(attn_orf_draw(w, M, LD, 11));
    attn_tensor tq = attn_tensor_4d(q, 1, LH, LN, LD), tk = attn_tensor_4d(k, 1, LH, LN, LD),
                tv = attn_tensor_4d(v, 1, LH, LN, LDV), to = attn_tensor_4d(out, 1, LH, LN, LDV),
                tdo = attn_tensor_4d(dout, 1, LH, LN, LDV), tdq = attn_tensor_4d(dq, 1, LH, LN, LD),
                tdk = attn_tensor_4d(dk, 1, LH, LN, LD), tdv = attn_tensor_4d(dv, 1, LH, LN, LDV),
                tw = attn_tensor_3d(w, 1, M, LD);
    const float *got[4] = {out, dq, dk, dv};
    static const char *const names[] = {"q", "k", "v", "dout"};
    char ctx[160];
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        for (int performer = 0; performer < 2; performer++) {
            const size_t ws = performer ? attn_performer_workspace_size(&tq, &tk, &tv, &tw)
                                        : attn_linear_attention_workspace_size(&tq, &tk, &tv);
            void *wsp = xmalloc(ws);
            for (int where = 0; where < 4; where++)
                for (int sp = 0; sp < 3; sp++)
                    for (int causal = 0; causal < 2; causal++) {
                        fill_normal(&rg, q, (size_t)LH * LN * LD, 1);
                        fill_normal(&rg, k, (size_t)LH * LN * LD, 1);
                        fill_normal(&rg, v, (size_t)LH * LN * LDV, 1);
                        fill_normal(&rg, dout, (size_t)LH * LN * LDV, 1);
                        float *x = (float *[]){q, k, v, dout}[where];
                        const int width = where >= 2 ? LDV : LD;
                        const int h = (int)(rng_next(&rg) % LH), i = 40 + (int)(rng_next(&rg) % 40);
                        x[(h * LN + i) * width + (int)(rng_next(&rg) % (uint64_t)width)] = SPECIAL[sp];
                        const attn_causal c = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
                        if (performer) {
                            CHECK_OK(attn_performer_forward(&tq, &tk, &tv, &tw, c, NULL, &to, wsp, ws));
                            CHECK_OK(
                                attn_performer_backward(&tq, &tk, &tv, &tw, c, NULL, &tdo, &tdq, &tdk, &tdv, wsp, ws));
                        } else {
                            CHECK_OK(attn_linear_attention_forward(&tq, &tk, &tv, c, NULL, &to, wsp, ws));
                            CHECK_OK(attn_linear_attention_backward(&tq, &tk, &tv, c, NULL, &tdo, &tdq, &tdk, &tdv, wsp,
                                                                    ws));
                        }
                        snprintf(ctx, sizeof ctx, "%s [%s] %g in %s row %d, %s", performer ? "performer" : "linear",
                                 attn_isa_name((attn_isa)isa), (double)SPECIAL[sp], names[where], i,
                                 causal ? "causal" : "non-causal");
                        kernelised_case(performer, causal, q, k, v, dout, w, M, got, ctx);
                    }
            free(wsp);
        }
    }
    attn_force_isa(attn_detected_isa());
    free(q), free(k), free(v), free(out), free(dout), free(dv), free(dq), free(dk);
}

/* ---- Performer's causal forms with one non-finite key (README, "Non-finite values") ----
 * A NaN, +Inf or -Inf key j in causal Performer attention, in the parallel
 * form and the recurrent one (attn_performer_step, one token or a chunk of 4 per step):
 *  - no query before j changes beyond rounding: the key stabiliser (one maximum over the keys, or
 *    the state's running maximum) skips such a key, since its row's logits H - |x'|^2 / 2 are NaN
 *    or -Inf (|x'|^2 is +Inf), never above a finite one (the outputs are bitwise the clean run's
 *    unless key j held the maximum there: the stabiliser then moves, and cancels);
 *  - in every form the key's features are NaN (beside finite keys, or alone in a one-token step,
 *    where no finite stabiliser exists and it is taken as 0), so query j and every later one are
 *    non-finite (all their entries): one key per step does not drop it. */
enum { PN = 24, PD = 16, PDV = 8, PJ = 12 };

static void performer_run(float *q, float *k, float *v, const float *w, int m, int chunk, float *out) {
    const attn_tensor tw = attn_tensor_3d((float *)w, 1, m, PD);
    if (!chunk) {
        attn_tensor tq = attn_tensor_4d(q, 1, 1, PN, PD), tk = attn_tensor_4d(k, 1, 1, PN, PD),
                    tv = attn_tensor_4d(v, 1, 1, PN, PDV), to = attn_tensor_4d(out, 1, 1, PN, PDV);
        const size_t ws = attn_performer_workspace_size(&tq, &tk, &tv, &tw);
        void *p = xmalloc(ws);
        CHECK_OK(attn_performer_forward(&tq, &tk, &tv, &tw, ATTN_CAUSAL_TOP_LEFT, NULL, &to, p, ws));
        free(p);
        return;
    }
    float *state = xmalloc(sizeof(float) * attn_performer_state_floats(m, PDV));
    memset(state, 0, sizeof(float) * attn_performer_state_floats(m, PDV));
    for (int i = 0; i < PN; i += chunk) {
        attn_tensor tq = attn_tensor_4d(q + i * PD, 1, 1, chunk, PD), tk = attn_tensor_4d(k + i * PD, 1, 1, chunk, PD),
                    tv = attn_tensor_4d(v + i * PDV, 1, 1, chunk, PDV),
                    to = attn_tensor_4d(out + i * PDV, 1, 1, chunk, PDV);
        const size_t ws = attn_performer_step_workspace_size(&tq, &tk, &tv, &tw);
        void *p = xmalloc(ws);
        CHECK_OK(attn_performer_step(&tq, &tk, &tv, &tw, 1, NULL, state, &to, p, ws));
        free(p);
    }
    free(state);
}

static void test_performer_key(void) {
    test_rng g = rng_seeded(29);
    static float q[PN * PD], k[PN * PD], v[PN * PDV], clean[PN * PDV], out[PN * PDV];
    static const float special[] = {NAN, INFINITY, -INFINITY};
    static const int feats[] = {8, 20, 40}, chunks[] = {0, 1, 4};
    fill_normal(&g, q, PN * PD, 1);
    fill_normal(&g, k, PN * PD, 1);
    fill_normal(&g, v, PN * PDV, 1);
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        for (int fi = 0; fi < 3; fi++) {
            const int m = feats[fi];
            float *w = xmalloc(sizeof(float) * (size_t)m * PD);
            CHECK_OK(attn_orf_draw(w, m, PD, 3));
            for (int ci = 0; ci < 3; ci++)
                for (int sp = 0; sp < 3; sp++) {
                    const int chunk = chunks[ci];
                    performer_run(q, k, v, w, m, chunk, clean);
                    const float keep = k[PJ * PD + 5];
                    k[PJ * PD + 5] = special[sp];
                    performer_run(q, k, v, w, m, chunk, out);
                    k[PJ * PD + 5] = keep;
                    /* earlier outputs: finite and equal to the clean run's up to rounding (bitwise
                     * unless key j held the keys' maximum: the stabiliser then moves, and cancels) */
                    size_t before = 0, later_nonfinite = 0;
                    double num = 0, den = 0;
                    for (int i = 0; i < PN; i++)
                        for (int c = 0; c < PDV; c++) {
                            const float a = out[i * PDV + c];
                            if (i < PJ) {
                                before += !isfinite(a);
                                num += ((double)a - clean[i * PDV + c]) * ((double)a - clean[i * PDV + c]);
                                den += (double)clean[i * PDV + c] * clean[i * PDV + c];
                            } else {
                                later_nonfinite += !isfinite(a);
                            }
                        }
                    if (!(num <= 1e-10 * den)) before += (size_t)PJ * PDV; /* NaN-safe: rel err > 1e-5 */
                    const size_t later = (size_t)(PN - PJ) * PDV, want = later;
                    CHECK(before == 0 && later_nonfinite == want,
                          "performer [%s] m %d, %s, key %d holds %g: %zu earlier outputs non-finite or off (want 0), "
                          "%zu of "
                          "%zu later ones non-finite (want %zu)",
                          attn_isa_name((attn_isa)isa), m,
                          chunk ? (chunk == 1 ? "one token a step" : "4 a step") : "parallel", PJ, (double)special[sp],
                          before, later_nonfinite, later, want);
                }
            free(w);
        }
    }
    attn_force_isa(attn_detected_isa());
}

/* The bf16 GEMM (A and B bf16 or rounded from float, float accumulation) with a NaN or an infinity
 * in A or B, against the float64 product of the rounded operands: the same non-finite positions
 * (IEEE: a NaN reaches its whole row / column of C; an infinity gives +-Inf there, NaN where it
 * meets a zero, here a B column zeroed on purpose). k = 37 crosses the kernels' pairs and tail. */
static void test_gemm_bf16(void) {
    test_rng g = rng_seeded(77);
    enum { GM = 5, GN = 7, GK = 37 };
    float a[GM * GK], b[GK * GN], c[GM * GN];
    attn_bf16 ab[GM * GK], bb[GK * GN];
    double ref[GM * GN];
    char ctx[128];
    const size_t ws = attn_gemm_bf16_workspace_size(GM, GN, GK);
    void *w = xmalloc(ws);
    FOR_EACH_ISA(isa) {
        CHECK_OK(attn_force_isa((attn_isa)isa));
        for (int where = 0; where < 2; where++)
            for (int sp = 0; sp < 3; sp++)
                for (int from_f32 = 0; from_f32 < 2; from_f32++) {
                    fill_normal(&g, a, GM * GK, 1);
                    fill_normal(&g, b, GK * GN, 1);
                    const int i = (int)(rng_next(&g) % GM), j = (int)(rng_next(&g) % GN), t = (int)(rng_next(&g) % GK);
                    if (where == 0) {
                        a[i * GK + t] = SPECIAL[sp];
                        b[t * GN + (j + 1) % GN] = 0; /* meets the special value: 0 * Inf */
                    } else {
                        b[t * GN + j] = SPECIAL[sp];
                        a[((i + 1) % GM) * GK + t] = 0;
                    }
                    to_bf16(a, ab, GM * GK);
                    to_bf16(b, bb, GK * GN);
                    for (int r = 0; r < GM; r++)
                        for (int col = 0; col < GN; col++) {
                            double acc = 0;
                            for (int e = 0; e < GK; e++) acc += (double)a[r * GK + e] * b[e * GN + col];
                            ref[r * GN + col] = acc;
                        }
                    if (from_f32)
                        CHECK_OK(attn_gemm_bf16_from_f32(ATTN_NO_TRANS, ATTN_NO_TRANS, GM, GN, GK, a, GK, b, GN, 0, c,
                                                         GN, w, ws));
                    else
                        CHECK_OK(
                            attn_gemm_bf16(ATTN_NO_TRANS, ATTN_NO_TRANS, GM, GN, GK, ab, GK, bb, GN, 0, c, GN, w, ws));
                    snprintf(ctx, sizeof ctx, "gemm bf16%s [%s] %g in %s", from_f32 ? " from f32" : "",
                             attn_isa_name((attn_isa)isa), (double)SPECIAL[sp], where ? "b" : "a");
                    compare_nf_tol(ctx, c, ref, GM * GN, NULL, 0, 1e-5);
                }
    }
    attn_force_isa(attn_detected_isa());
    free(w);
}

static int compare_files(const char *out_path, const char *fixture, int ci) {
    attn_safetensors *out = NULL, *st = NULL;
    char key[64];
    snprintf(key, sizeof key, "case%d.out", ci);
    int rc = 1;
    if (attn_safetensors_open_file(out_path, &out) || attn_safetensors_open_file(fixture, &st)) {
        fprintf(stderr, "compare: %s\n", attn_last_error());
    } else {
        size_t n = 0, nr = 0;
        float *got = fx_floats(out, "output", &n), *ref = fx_floats(st, key, &nr);
        if (!got || !ref || n != nr) {
            fprintf(stderr, "compare: 'output' missing or not of %s's size\n", key);
        } else {
            double *r = xmalloc(sizeof(double) * n);
            for (size_t i = 0; i < n; i++) r[i] = ref[i];
            size_t nf = 0;
            const double e = compare_nf("output", got, r, n, &nf);
            printf("output vs %s: %zu of %zu non-finite at PyTorch's positions, finite rel err %.3g\n", key, nf, n, e);
            rc = test_failed ? 1 : 0;
            free(r);
        }
        free(got);
        free(ref);
    }
    attn_safetensors_close(out);
    attn_safetensors_close(st);
    return rc;
}

/* By data offset: the order a checkpoint's loader hashes its tensors in. */
static int by_offset(const void *a, const void *b) {
    const char *x = (*(const attn_safetensors_tensor *const *)a)->data,
               *y = (*(const attn_safetensors_tensor *const *)b)->data;
    return (x > y) - (x < y);
}

typedef struct meta_kv {
    const char *k, *v;
} meta_kv;

static int by_key(const void *a, const void *b) { return strcmp(((const meta_kv *)a)->k, ((const meta_kv *)b)->k); }

static void put_bytes(uint8_t **buf, size_t *len, const void *p, size_t n) {
    memcpy(*buf + *len, p, n);
    *len += n;
}

/* IN with element e of the F32 tensor name set to value, written to OUT with IN's metadata; when IN
 * is an attn checkpoint, its attn.checksum is recomputed over the edited tensor (the canonical
 * stream of train.h / checkpoint.c: per tensor by data offset name NUL, dtype, rank, dims as 8
 * bytes little-endian, data; then the metadata but the checksum, sorted, key NUL value NUL), so
 * that the checkpoint loads and its non-finite weight reaches the model. */
static int set_value(const char *in, const char *out, const char *name, size_t e, float value) {
    attn_safetensors *st = NULL;
    attn_safetensors_writer *w = NULL;
    int bad = attn_safetensors_open_file(in, &st) || attn_safetensors_writer_create(&w), found = 0;
    const size_t nt = bad ? 0 : attn_safetensors_count(st), nm = bad ? 0 : attn_safetensors_metadata_count(st);
    const attn_safetensors_tensor **ts = xmalloc(sizeof *ts * (nt + 1));
    meta_kv *kv = xmalloc(sizeof *kv * (nm + 1));
    size_t cap = 64, len = 0;
    for (size_t i = 0; i < nt; i++) {
        ts[i] = attn_safetensors_get(st, i);
        cap += ts[i]->nbytes + strlen(ts[i]->name) + 3 + 8 * (size_t)ts[i]->rank; /* name NUL, dtype, rank, dims */
    }
    qsort(ts, nt, sizeof *ts, by_offset);
    float *buf = NULL;
    for (size_t i = 0; !bad && i < nt; i++) {
        const attn_safetensors_tensor *t = ts[i];
        if (strcmp(t->name, name) || t->dtype != ATTN_DTYPE_F32 || e >= t->nbytes / 4) continue;
        buf = xmalloc(t->nbytes);
        memcpy(buf, t->data, t->nbytes);
        buf[e] = value;
        found = 1;
    }
    uint8_t *stream = xmalloc(cap);
    for (size_t i = 0; !bad && i < nt; i++) {
        const attn_safetensors_tensor *t = ts[i];
        const void *data = found && !strcmp(t->name, name) && t->dtype == ATTN_DTYPE_F32 ? buf : t->data;
        bad = attn_safetensors_writer_add(w, t->name, t->dtype, t->rank, t->shape, data);
        const uint8_t code[2] = {(uint8_t)t->dtype, (uint8_t)t->rank};
        put_bytes(&stream, &len, t->name, strlen(t->name) + 1);
        put_bytes(&stream, &len, code, 2);
        for (int d = 0; d < t->rank; d++) {
            uint8_t le[8];
            for (int b = 0; b < 8; b++) le[b] = (uint8_t)((uint64_t)t->shape[d] >> (8 * b));
            put_bytes(&stream, &len, le, 8);
        }
        put_bytes(&stream, &len, data, t->nbytes);
    }
    int checkpoint = 0;
    for (size_t i = 0; !bad && i < nm; i++) {
        bad = attn_safetensors_metadata_get(st, i, &kv[i].k, &kv[i].v);
        checkpoint |= !bad && !strcmp(kv[i].k, "attn.checksum");
        cap += strlen(kv[i].k) + strlen(kv[i].v) + 2;
    }
    stream = realloc(stream, cap);
    qsort(kv, bad ? 0 : nm, sizeof *kv, by_key);
    for (size_t i = 0; !bad && stream && i < nm; i++) {
        if (!strcmp(kv[i].k, "attn.checksum")) continue;
        bad = attn_safetensors_writer_add_metadata(w, kv[i].k, kv[i].v);
        put_bytes(&stream, &len, kv[i].k, strlen(kv[i].k) + 1);
        put_bytes(&stream, &len, kv[i].v, strlen(kv[i].v) + 1);
    }
    char sum[17];
    snprintf(sum, sizeof sum, "%016llx", stream ? (unsigned long long)attn_tr_xxh64(stream, len) : 0ull);
    if (!bad && checkpoint) bad = attn_safetensors_writer_add_metadata(w, "attn.checksum", sum);
    bad = bad || !stream || !found || attn_safetensors_writer_write_file(w, out);
    if (bad) fprintf(stderr, "set: %s\n", found ? attn_last_error() : "no such F32 tensor or index");
    attn_safetensors_writer_free(w);
    attn_safetensors_close(st);
    free(buf), free(ts), free(kv), free(stream);
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--compare")) return compare_files(argv[2], argv[3], atoi(argv[4]));
    if (argc == 7 && !strcmp(argv[1], "--set"))
        return set_value(argv[2], argv[3], argv[4], (size_t)strtoull(argv[5], NULL, 10), strtof(argv[6], NULL));
    if (argc != 1) {
        fprintf(stderr, "usage: test_nonfinite [--compare OUT FIXTURE CASE | --set IN OUT NAME E VALUE]\n");
        return 2;
    }
    test_parity();
    test_ops();
    test_sdpa();
    test_sdpa_backward();
    test_longformer();
    printf("longformer: %zu non-finite reference entries, at the same positions\n", lf_nonfinite);
    test_linear();
    test_kernelised();
    test_performer_key();
    test_gemm_bf16();
    printf("linear / performer forward and backward: %zu non-finite reference entries, at the same positions\n",
           kern_nonfinite);
    printf("max finite-entry rel err %.3g; %zu flash outputs or gradients NaN from a masked key's non-finite value\n",
           worst, lenient_nan);
    return test_summary("test_nonfinite");
}
