/* Non-finite values propagate as IEEE arithmetic (and PyTorch) says.
 *
 * Parity (tests/parity/gen_nonfinite.py): a NaN, +-Inf or a float64 1e300 (+Inf in float32) in a
 * weight, an input or a float attn_mask of multihead_attention, transformer_encoder_layer and
 * transformer_decoder_layer, run through run.c's API under every ISA the CPU has: the NaN / +Inf /
 * -Inf positions of the output must be PyTorch's exactly, the finite entries within 1e-4 (relative,
 * over the finite entries).
 *
 * Kernels against a float64 evaluation of the textbook formulas (PyTorch's math): softmax,
 * layernorm, GELU, ReLU, the flash and the reference SDPA with a non-finite value in Q, K, V or
 * the float mask. */
#include "io/json.h"
#include "nn/nn_run.h"
#include "test_util.h"

#define TOL 1e-4

/* 0 finite, 1 NaN, 2 +Inf, 3 -Inf */
static int kind_of(double v) { return isnan(v) ? 1 : isinf(v) ? (v > 0 ? 2 : 3) : 0; }

/* Same non-finite positions and kinds, finite entries within TOL; returns the finite rel err (INFINITY
 * on a position mismatch). *nonfinite receives the reference's count of non-finite entries. */
static double compare_nf(const char *ctx, const float *got, const double *ref, size_t n, size_t *nonfinite) {
    double num = 0, den = 0;
    size_t bad = 0, nf = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        const int kg = kind_of(got[i]), kr = kind_of(ref[i]);
        nf += kr != 0;
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
    CHECK(e <= TOL, "%s: finite entries' rel err %.3g > %.0e", ctx, e, TOL);
    return e;
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
    for (int isa = ATTN_ISA_REF; isa <= (int)attn_detected_isa(); isa++) {
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

int main(void) {
    test_parity();
    printf("max finite-entry rel err %.3g\n", worst);
    return test_summary("test_nonfinite");
}
