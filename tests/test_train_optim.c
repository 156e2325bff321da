/* Optimizers, gradient clipping, accumulation and the learning-rate schedule: 10 steps of AdamW
 * (with and without amsgrad, maximize, clipping, accumulation) and SGD (momentum, dampening,
 * nesterov, plain) against PyTorch float64 (tests/parity/fixtures/train_optim.safetensors from
 * tests/parity/gen_train_optim.py), a float64 reference on a parameter large enough to be
 * threaded, bitwise identical results for 1..4 threads, a non-finite gradient norm leaving
 * everything bitwise unchanged, the schedule against its closed form and PyTorch's schedulers,
 * and argument errors; the AdamW kernel of every ISA bitwise equal to the portable one.
 *
 * Tolerance against PyTorch float64: parameters and moments are float32 here, rounded once per
 * stored value and step (relative 6e-8), so after 10 steps the parameters may drift by ~10 x 6e-8
 * relative to the float64 run (and the moments by a few units of 6e-8): 1e-6 relative (norm-wise)
 * is a bound with margin; the measured errors are printed. */
#include <float.h>

#include "kernels/registry.h"
#include "kernels/ops_internal.h"
#include "test_util.h"
#include "attn/train.h"

static double worst_param, worst_state, worst_norm, worst_ref;

static void note(double *w, double e) {
    if (!(e <= *w)) *w = e;
}

/* ---- fixture helpers ---- */

static const char *fx_meta(const attn_safetensors *st, const char *key) {
    const char *v = attn_safetensors_metadata_find(st, key);
    CHECK(v != NULL, "fixture: metadata %s missing", key);
    return v ? v : "0";
}

/* A float64 or float32 tensor of exactly count elements, copied out (NULL after a failed check). */
static double *fx_f64(const attn_safetensors *st, const char *name, size_t count) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    CHECK(t && t->dtype == ATTN_DTYPE_F64 && t->nbytes == count * 8, "fixture: %s missing or not F64 [%zu]", name,
          count);
    if (!t || t->dtype != ATTN_DTYPE_F64 || t->nbytes != count * 8) return NULL;
    double *p = xmalloc(t->nbytes);
    memcpy(p, t->data, t->nbytes);
    return p;
}
static float *fx_f32(const attn_safetensors *st, const char *name, size_t count) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    CHECK(t && t->dtype == ATTN_DTYPE_F32 && t->nbytes == count * 4, "fixture: %s missing or not F32 [%zu]", name,
          count);
    if (!t || t->dtype != ATTN_DTYPE_F32 || t->nbytes != count * 4) return NULL;
    float *p = xmalloc(t->nbytes);
    memcpy(p, t->data, t->nbytes);
    return p;
}

/* The parameters in the fixture's order ("param_names"), as pointers into ps. */
typedef struct flat_list {
    const attn_param *p[16];
    int n;
    size_t total;
} flat_list;

static int flat_init(flat_list *fl, const attn_params *ps, const char *names) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", names);
    fl->n = 0;
    fl->total = 0;
    for (char *tok = strtok(buf, ","); tok && fl->n < 16; tok = strtok(NULL, ",")) {
        const attn_param *p = attn_params_find(ps, tok);
        CHECK(p != NULL, "fixture parameter %s is not a parameter of attn_mha", tok);
        if (!p) return 0;
        fl->p[fl->n++] = p;
        fl->total += p->numel;
    }
    CHECK((size_t)fl->n == attn_params_count(ps), "fixture lists %d parameters, attn_mha has %zu", fl->n,
          attn_params_count(ps));
    return (size_t)fl->n == attn_params_count(ps);
}

static void flat_set_data(const flat_list *fl, const float *src) {
    for (int i = 0; i < fl->n; i++, src += fl->p[i - 1]->numel) memcpy(fl->p[i]->data, src, fl->p[i]->numel * 4);
}
static void flat_set_grad(const flat_list *fl, const float *src) {
    for (int i = 0; i < fl->n; i++, src += fl->p[i - 1]->numel) memcpy(fl->p[i]->grad, src, fl->p[i]->numel * 4);
}
static void flat_get_data(const flat_list *fl, float *dst) {
    for (int i = 0; i < fl->n; i++, dst += fl->p[i - 1]->numel) memcpy(dst, fl->p[i]->data, fl->p[i]->numel * 4);
}
static void flat_get_state(const flat_list *fl, const attn_params *ps, const attn_optimizer *o, const char *key,
                           float *dst) {
    for (int i = 0; i < fl->n; i++) {
        size_t idx = 0;
        while (attn_params_get(ps, idx) != fl->p[i]) idx++;
        float *s = NULL;
        CHECK_OK(attn_optimizer_state(o, idx, key, &s));
        if (s) memcpy(dst, s, fl->p[i]->numel * 4);
        dst += fl->p[i]->numel;
    }
}

static void test_fixture(void) {
    char path[1024], key[128];
    snprintf(path, sizeof path, "%s/train_optim.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_open_file(path, &st);
    CHECK(s == ATTN_OK, "fixture %s: %s", path, attn_last_error());
    if (s) return;
    attn_mha_config mc = attn_mha_config_default(atoll(fx_meta(st, "embed_dim")), atoll(fx_meta(st, "num_heads")));
    mc.add_bias_kv = 1;
    attn_mha *mha = NULL;
    CHECK_OK(attn_mha_create(&mc, &mha));
    if (!mha) {
        attn_safetensors_close(st);
        return;
    }
    const attn_params *ps = attn_mha_params(mha);
    flat_list fl;
    char cases[512];
    snprintf(cases, sizeof cases, "%s", fx_meta(st, "cases"));
    int ncases = 0;
    if (flat_init(&fl, ps, fx_meta(st, "param_names"))) {
        const size_t P = fl.total;
        float *got = xmalloc(P * 4);
        /* flat_init's strtok is done: this loop is the only one using it now */
        for (char *c = strtok(cases, ","); c; c = strtok(NULL, ",")) {
            ncases++;
#define M(field) (snprintf(key, sizeof key, "%s.%s", c, field), fx_meta(st, key))
#define K(field) (snprintf(key, sizeof key, "%s.%s", c, field), key)
            const int adamw = !strcmp(M("kind"), "adamw");
            const int steps = atoi(M("steps"));
            const int64_t accum = atoll(M("accum"));
            const double max_norm = strtod(M("max_norm"), NULL);
            attn_optimizer *o = NULL;
            if (adamw) {
                attn_adamw_config ac = attn_adamw_config_default();
                ac.beta1 = strtod(M("beta1"), NULL);
                ac.beta2 = strtod(M("beta2"), NULL);
                ac.eps = strtod(M("eps"), NULL);
                ac.weight_decay = strtod(M("weight_decay"), NULL);
                ac.amsgrad = atoi(M("amsgrad"));
                ac.maximize = atoi(M("maximize"));
                CHECK_OK(attn_adamw_create(ps, &ac, &o));
            } else {
                attn_sgd_config sc = attn_sgd_config_default();
                sc.momentum = strtod(M("momentum"), NULL);
                sc.dampening = strtod(M("dampening"), NULL);
                sc.weight_decay = strtod(M("weight_decay"), NULL);
                sc.nesterov = atoi(M("nesterov"));
                sc.maximize = atoi(M("maximize"));
                CHECK_OK(attn_sgd_create(ps, &sc, &o));
            }
            float *init = fx_f32(st, K("init"), P), *grads = fx_f32(st, K("grads"), (size_t)steps * P);
            double *lr = fx_f64(st, K("lr"), (size_t)steps), *final = fx_f64(st, K("final"), P);
            double *norms = max_norm > 0 ? fx_f64(st, K("norms"), (size_t)steps) : NULL;
            if (o && init && grads && lr && final && (max_norm <= 0 || norms)) {
                flat_set_data(&fl, init);
                for (int k = 0; k < steps; k++) {
                    flat_set_grad(&fl, grads + (size_t)k * P);
                    if (max_norm > 0 || accum > 1) {
                        double n = 0;
                        CHECK_OK(attn_train_step(o, lr[k], max_norm, accum, &n));
                        if (norms) {
                            const double e = fabs(n - norms[k]) / norms[k];
                            note(&worst_norm, e);
                            CHECK(e <= 1e-6, "%s step %d: gradient norm %.9g, PyTorch %.9g", c, k, n, norms[k]);
                        }
                    } else {
                        CHECK_OK(attn_optimizer_step(o, lr[k]));
                    }
                }
                CHECK(attn_optimizer_steps(o) == steps, "%s: %lld steps counted", c,
                      (long long)attn_optimizer_steps(o));
                flat_get_data(&fl, got);
                double e = rel_err_fd(got, final, P);
                note(&worst_param, e);
                CHECK(e <= 1e-6, "%s: parameters after %d steps: rel err %.3g vs PyTorch float64", c, steps, e);
                static const char *const keys[4] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};
                for (int q = 0; q < 4; q++) {
                    snprintf(key, sizeof key, "%s.state.%s", c, keys[q]);
                    if (!attn_safetensors_find(st, key)) continue;
                    double *want = fx_f64(st, key, P);
                    flat_get_state(&fl, ps, o, keys[q], got);
                    e = want ? rel_err_fd(got, want, P) : INFINITY;
                    note(&worst_state, e);
                    CHECK(e <= 1e-6, "%s: %s rel err %.3g vs PyTorch float64", c, keys[q], e);
                    free(want);
                }
            }
#undef M
#undef K
            free(init);
            free(grads);
            free(lr);
            free(final);
            free(norms);
            attn_optimizer_free(o);
        }
        CHECK(ncases > 0, "fixture has no optimizer cases");
        /* clip_grad_norm_ alone */
        for (int k = 0; k < 2; k++) {
            snprintf(key, sizeof key, "clip%d.max_norm", k);
            const double max_norm = strtod(fx_meta(st, key), NULL);
            snprintf(key, sizeof key, "clip%d.grad", k);
            float *g = fx_f32(st, key, P);
            snprintf(key, sizeof key, "clip%d.norm", k);
            double *wn = fx_f64(st, key, 1);
            snprintf(key, sizeof key, "clip%d.clipped", k);
            double *wc = fx_f64(st, key, P);
            if (g && wn && wc) {
                flat_set_grad(&fl, g);
                double n = 0;
                CHECK_OK(attn_grad_clip_norm(ps, max_norm, &n));
                const double e = fabs(n - wn[0]) / wn[0];
                note(&worst_norm, e);
                CHECK(e <= 1e-12, "clip%d: norm %.17g, PyTorch %.17g", k, n, wn[0]);
                float *cur = got;
                for (int i = 0; i < fl.n; i++) {
                    memcpy(cur, fl.p[i]->grad, fl.p[i]->numel * 4);
                    cur += fl.p[i]->numel;
                }
                const double ec = rel_err_fd(got, wc, P);
                note(&worst_param, ec);
                CHECK(ec <= 1e-6, "clip%d: clipped gradients rel err %.3g", k, ec);
                if (k == 1) CHECK(!memcmp(got, g, P * 4), "clip%d: gradients below max_norm changed", k);
            }
            free(g);
            free(wn);
            free(wc);
        }
        free(got);
    }
    /* the schedule: closed form and PyTorch's SequentialLR(LinearLR, CosineAnnealingLR) */
    attn_lr_schedule sc = {strtod(fx_meta(st, "sched.max_lr"), NULL), strtod(fx_meta(st, "sched.min_lr"), NULL),
                           atoll(fx_meta(st, "sched.warmup")), atoll(fx_meta(st, "sched.total"))};
    double *want = fx_f64(st, "sched.lr", (size_t)sc.total_steps + 4);
    double *tlr = fx_f64(st, "sched.torch_lr", (size_t)sc.total_steps);
    double worst = 0;
    for (int64_t k = 0; want && tlr && k < sc.total_steps + 4; k++) {
        double lr = -1;
        CHECK_OK(attn_lr_warmup_cosine(&sc, k, &lr));
        worst = fmax(worst, fabs(lr - want[k]) / want[k]);
        if (k < sc.total_steps) worst = fmax(worst, fabs(lr - tlr[k]) / tlr[k]);
    }
    note(&worst_ref, worst);
    CHECK(worst <= 1e-12, "schedule vs Python / PyTorch: rel err %.3g", worst);
    free(want);
    free(tlr);
    printf("  fixture (%d optimizer cases, 10 steps): worst parameter %.2e, state %.2e, gradient norm %.2e; "
           "schedule %.2e\n",
           ncases, worst_param, worst_state, worst_norm, worst);
    attn_mha_free(mha);
    attn_safetensors_close(st);
}

/* ---- float64 reference on a parameter large enough to be threaded ---- */

static void test_reference_large(void) {
    test_rng r = rng_seeded(21);
    attn_embedding *emb = NULL;
    CHECK_OK(attn_embedding_create(300, 211, -1, &emb));
    if (!emb) return;
    const attn_params *ps = attn_embedding_params(emb);
    const attn_param *p = attn_params_get(ps, 0);
    const size_t n = p->numel;
    double *pd = xmalloc(n * 8), *m = xmalloc(n * 8), *v = xmalloc(n * 8), *vm = xmalloc(n * 8), *buf = xmalloc(n * 8);
    for (int kind = 0; kind < 3; kind++) {
        attn_optimizer *o = NULL;
        attn_adamw_config ac = attn_adamw_config_default();
        ac.amsgrad = kind == 1;
        attn_sgd_config sc = attn_sgd_config_default();
        sc.momentum = 0.9;
        sc.nesterov = 1;
        sc.weight_decay = 1e-3;
        if (kind < 2)
            CHECK_OK(attn_adamw_create(ps, &ac, &o));
        else
            CHECK_OK(attn_sgd_create(ps, &sc, &o));
        if (!o) continue;
        fill_normal(&r, p->data, n, 1.0);
        for (size_t e = 0; e < n; e++) {
            pd[e] = p->data[e];
            m[e] = v[e] = vm[e] = buf[e] = 0;
        }
        for (int t = 1; t <= 4; t++) {
            const double lr = 1e-2 / t;
            fill_normal(&r, p->grad, n, 1.0);
            CHECK_OK(attn_optimizer_step(o, lr));
            for (size_t e = 0; e < n; e++) {
                const double g = p->grad[e];
                if (kind < 2) {
                    pd[e] *= 1 - lr * ac.weight_decay;
                    m[e] = ac.beta1 * m[e] + (1 - ac.beta1) * g;
                    v[e] = ac.beta2 * v[e] + (1 - ac.beta2) * g * g;
                    vm[e] = fmax(vm[e], v[e]);
                    const double vv = kind == 1 ? vm[e] : v[e];
                    pd[e] -= lr / (1 - pow(ac.beta1, t)) * m[e] / (sqrt(vv) / sqrt(1 - pow(ac.beta2, t)) + ac.eps);
                } else {
                    const double d = g + sc.weight_decay * pd[e];
                    buf[e] = t == 1 ? d : sc.momentum * buf[e] + d;
                    pd[e] -= lr * (d + sc.momentum * buf[e]);
                }
            }
        }
        const double e = rel_err_fd(p->data, pd, n);
        note(&worst_ref, e);
        CHECK(e <= 1e-6, "%s on [300, 211]: rel err %.3g vs float64 reference", kind < 2 ? "adamw" : "sgd", e);
        attn_optimizer_free(o);
    }
    free(pd);
    free(m);
    free(v);
    free(vm);
    free(buf);
    attn_embedding_free(emb);
}

/* ---- determinism, non-finite norms, weight decay per parameter, accumulation ---- */

static void copy_all(const attn_params *ps, float *data, float *grad) {
    for (size_t i = 0, off = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        if (data) memcpy(data + off, p->data, p->numel * 4);
        if (grad) memcpy(grad + off, p->grad, p->numel * 4);
        off += p->numel;
    }
}

static void test_threads_and_nonfinite(void) {
    test_rng r = rng_seeded(22);
    attn_embedding *emb = NULL;
    CHECK_OK(attn_embedding_create(400, 190, -1, &emb));
    if (!emb) return;
    const attn_params *ps = attn_embedding_params(emb);
    const attn_param *p = attn_params_get(ps, 0);
    const size_t n = p->numel;
    float *init = xmalloc(n * 4), *g0 = xmalloc(n * 4), *ref = xmalloc(n * 4), *refm = xmalloc(n * 4);
    fill_normal(&r, init, n, 1.0);
    fill_normal(&r, g0, n, 3.0);
    double norm1 = 0;
    for (int th = 1; th <= 4; th++) {
        attn_set_num_threads(th);
        attn_optimizer *o = NULL;
        CHECK_OK(attn_adamw_create(ps, NULL, &o));
        if (!o) continue;
        memcpy(p->data, init, n * 4);
        double norm = 0;
        for (int k = 0; k < 3; k++) {
            memcpy(p->grad, g0, n * 4);
            CHECK_OK(attn_train_step(o, 1e-3, 50.0, 2, &norm));
        }
        float *mom = NULL;
        CHECK_OK(attn_optimizer_state(o, 0, "exp_avg_sq", &mom));
        if (th == 1) {
            memcpy(ref, p->data, n * 4);
            memcpy(refm, mom, n * 4);
            norm1 = norm;
        } else {
            CHECK(!memcmp(ref, p->data, n * 4) && !memcmp(refm, mom, n * 4) && norm == norm1,
                  "%d threads: AdamW step differs from 1 thread", th);
        }
        attn_optimizer_free(o);
    }
    attn_set_num_threads(0);
    /* a non-finite gradient: clip and train_step change nothing at all */
    attn_optimizer *o = NULL;
    CHECK_OK(attn_adamw_create(ps, NULL, &o));
    if (o) {
        memcpy(p->grad, g0, n * 4);
        CHECK_OK(attn_train_step(o, 1e-3, 1.0, 1, NULL));
        float *before = xmalloc(n * 4), *gbefore = xmalloc(n * 4), *mb = xmalloc(n * 4), *m = NULL;
        const float bad[3] = {NAN, INFINITY, -INFINITY};
        for (int k = 0; k < 3; k++) {
            memcpy(p->grad, g0, n * 4);
            p->grad[n / 2 + (size_t)k] = bad[k];
            copy_all(ps, before, gbefore);
            CHECK_OK(attn_optimizer_state(o, 0, "exp_avg", &m));
            memcpy(mb, m, n * 4);
            double norm = 0;
            CHECK_STATUS(attn_grad_clip_norm(ps, 1.0, &norm), ATTN_ERR_NUMERIC);
            CHECK(!isfinite(norm), "clip: norm %g reported for a non-finite gradient", norm);
            CHECK(!memcmp(gbefore, p->grad, n * 4), "clip changed gradients despite a non-finite norm");
            CHECK_STATUS(attn_train_step(o, 1e-3, 1.0, 4, &norm), ATTN_ERR_NUMERIC);
            CHECK(strstr(attn_last_error(), "skipped") != NULL, "message: %s", attn_last_error());
            CHECK(!memcmp(gbefore, p->grad, n * 4) && !memcmp(before, p->data, n * 4) && !memcmp(mb, m, n * 4) &&
                      attn_optimizer_steps(o) == 1,
                  "train_step changed something despite a non-finite gradient (%s)", k == 0 ? "nan" : "inf");
            CHECK_STATUS(attn_train_step(o, 1e-3, 0.0, 1, &norm), ATTN_ERR_NUMERIC); /* no clipping: still checked */
            CHECK(!memcmp(before, p->data, n * 4), "train_step without clipping applied a non-finite gradient");
        }
        free(before);
        free(gbefore);
        free(mb);
        attn_optimizer_free(o);
    }
    /* accumulation: train_step(accum k) on summed gradients == scale by 1/k then step, bitwise */
    attn_optimizer *o1 = NULL, *o2 = NULL;
    CHECK_OK(attn_sgd_create(ps, NULL, &o1));
    CHECK_OK(attn_sgd_create(ps, NULL, &o2));
    if (o1 && o2) {
        memcpy(p->data, init, n * 4);
        memcpy(p->grad, g0, n * 4);
        CHECK_OK(attn_train_step(o1, 0.1, 0.0, 4, NULL));
        memcpy(ref, p->data, n * 4);
        memcpy(p->data, init, n * 4);
        memcpy(p->grad, g0, n * 4);
        CHECK_OK(attn_grad_scale(ps, 0.25));
        for (size_t e = 0; e < n; e++)
            if (p->grad[e] != g0[e] * 0.25f) {
                CHECK(0, "attn_grad_scale: element %zu", e);
                break;
            }
        CHECK_OK(attn_optimizer_step(o2, 0.1));
        CHECK(!memcmp(ref, p->data, n * 4), "train_step(accum 4) differs from grad_scale(1/4) + step");
    }
    attn_optimizer_free(o1);
    attn_optimizer_free(o2);
    free(init);
    free(g0);
    free(ref);
    free(refm);
    attn_embedding_free(emb);
}

static void test_weight_decay_per_param(void) {
    attn_mha_config mc = attn_mha_config_default(4, 2);
    attn_mha *mha = NULL;
    CHECK_OK(attn_mha_create(&mc, &mha));
    if (!mha) return;
    const attn_params *ps = attn_mha_params(mha);
    attn_optimizer *o = NULL;
    attn_adamw_config ac = attn_adamw_config_default();
    ac.weight_decay = 0.5;
    CHECK_OK(attn_adamw_create(ps, &ac, &o));
    if (o) {
        test_rng r = rng_seeded(23);
        for (size_t i = 0; i < attn_params_count(ps); i++) {
            const attn_param *p = attn_params_get(ps, i);
            fill_normal(&r, p->data, p->numel, 1.0);
        }
        CHECK_OK(attn_params_zero_grad(ps));
        CHECK_OK(attn_optimizer_set_weight_decay(o, 1, 0.0));
        const attn_param *p0 = attn_params_get(ps, 0), *p1 = attn_params_get(ps, 1);
        const float a = p0->data[3], b = p1->data[3];
        CHECK_OK(attn_optimizer_step(o, 0.1));
        /* zero gradients: AdamW's update is 0, only the decay acts */
        CHECK(p0->data[3] == (float)((double)a * (1 - 0.1 * 0.5)), "decayed parameter: %.9g from %.9g",
              (double)p0->data[3], (double)a);
        CHECK(p1->data[3] == b, "parameter with weight decay 0 changed: %.9g from %.9g", (double)p1->data[3],
              (double)b);
        CHECK_STATUS(attn_optimizer_set_weight_decay(o, 99, 0.0), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_optimizer_set_weight_decay(o, 0, -1.0), ATTN_ERR_INVALID_ARGUMENT);
        float *s = NULL;
        CHECK_STATUS(attn_optimizer_state(o, 0, "momentum_buffer", &s), ATTN_ERR_NOT_FOUND);
        CHECK_STATUS(attn_optimizer_state(o, 0, "max_exp_avg_sq", &s), ATTN_ERR_NOT_FOUND);
        CHECK_STATUS(attn_optimizer_state(o, 99, "exp_avg", &s), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(attn_optimizer_get_kind(o) == ATTN_OPTIMIZER_ADAMW && attn_optimizer_params(o) == ps, "kind / params");
    }
    attn_optimizer_free(o);
    attn_mha_free(mha);
}

static void test_schedule_edges(void) {
    double lr = 0;
    attn_lr_schedule s = {1.0, 0.1, 0, 10};
    CHECK_OK(attn_lr_warmup_cosine(&s, 0, &lr));
    CHECK(lr == 1.0, "no warmup: step 0 lr %g, want max_lr", lr);
    CHECK_OK(attn_lr_warmup_cosine(&s, 5, &lr));
    CHECK(fabs(lr - 0.55) < 1e-15, "half-way: %g, want 0.55", lr);
    CHECK_OK(attn_lr_warmup_cosine(&s, 10, &lr));
    CHECK(lr == 0.1, "step total: %g, want min_lr", lr);
    CHECK_OK(attn_lr_warmup_cosine(&s, 1000000, &lr));
    CHECK(lr == 0.1, "far past the end: %g, want min_lr", lr);
    s.warmup_steps = 10;
    CHECK_OK(attn_lr_warmup_cosine(&s, 9, &lr));
    CHECK(lr == 1.0, "warmup == total: last warmup step %g, want max_lr", lr);
    CHECK_OK(attn_lr_warmup_cosine(&s, 10, &lr));
    CHECK(lr == 0.1, "warmup == total: step total %g, want min_lr", lr);
    s.warmup_steps = 4;
    CHECK_OK(attn_lr_warmup_cosine(&s, 0, &lr));
    CHECK(lr == 0.25, "first warmup step %g, want max_lr / 4", lr);
    CHECK_STATUS(attn_lr_warmup_cosine(&s, -1, &lr), ATTN_ERR_INVALID_ARGUMENT);
    attn_lr_schedule bad = {1.0, 2.0, 0, 10};
    CHECK_STATUS(attn_lr_warmup_cosine(&bad, 0, &lr), ATTN_ERR_INVALID_ARGUMENT);
    bad = (attn_lr_schedule){1.0, 0.0, 11, 10};
    CHECK_STATUS(attn_lr_warmup_cosine(&bad, 0, &lr), ATTN_ERR_INVALID_ARGUMENT);
    bad = (attn_lr_schedule){NAN, 0.0, 1, 10};
    CHECK_STATUS(attn_lr_warmup_cosine(&bad, 0, &lr), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_lr_warmup_cosine(NULL, 0, &lr), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_errors(void) {
    attn_mha_config mc = attn_mha_config_default(4, 2);
    attn_mha *mha = NULL;
    CHECK_OK(attn_mha_create(&mc, &mha));
    if (!mha) return;
    const attn_params *ps = attn_mha_params(mha);
    attn_optimizer *o = NULL;
    attn_adamw_config ac = attn_adamw_config_default();
    ac.beta1 = 1.0;
    CHECK_STATUS(attn_adamw_create(ps, &ac, &o), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(o == NULL, "failed create left a pointer");
    ac = attn_adamw_config_default();
    ac.eps = -1;
    CHECK_STATUS(attn_adamw_create(ps, &ac, &o), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_adamw_create(NULL, NULL, &o), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_adamw_create(ps, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_sgd_config sc = attn_sgd_config_default();
    sc.nesterov = 1;
    CHECK_STATUS(attn_sgd_create(ps, &sc, &o), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "nesterov") != NULL, "message: %s", attn_last_error());
    sc.momentum = 0.9;
    sc.dampening = 0.1;
    CHECK_STATUS(attn_sgd_create(ps, &sc, &o), ATTN_ERR_INVALID_ARGUMENT);
    sc = attn_sgd_config_default();
    sc.momentum = -0.5;
    CHECK_STATUS(attn_sgd_create(ps, &sc, &o), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_sgd_create(ps, NULL, &o));
    if (o) {
        CHECK_STATUS(attn_optimizer_step(o, -1e-3), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_optimizer_step(o, NAN), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_train_step(o, 1e-3, 1.0, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_train_step(o, 1e-3, INFINITY, 1, NULL), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(attn_optimizer_steps(o) == 0, "a refused step was counted");
        float *s = NULL;
        CHECK_STATUS(attn_optimizer_state(o, 0, "momentum_buffer", &s), ATTN_ERR_NOT_FOUND); /* momentum 0 */
    }
    attn_optimizer_free(o);
    CHECK_STATUS(attn_optimizer_step(NULL, 1e-3), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_grad_clip_norm(ps, -1.0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_grad_clip_norm(NULL, 1.0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_grad_scale(ps, NAN), ATTN_ERR_INVALID_ARGUMENT);
    double nrm;
    CHECK_STATUS(attn_grad_norm(ps, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_params_zero_grad(ps));
    CHECK_OK(attn_grad_norm(ps, &nrm));
    CHECK(nrm == 0.0, "norm of zero gradients: %g", nrm);
    attn_optimizer_free(NULL);
    attn_mha_free(mha);
}

/* The AdamW kernel of every ISA the CPU runs gives the portable kernel's bits (ops_internal.h):
 * lengths around the vector widths, amsgrad, maximize, eps 0, and special values (NaN, +-inf, 0,
 * subnormal and huge gradients, v = 0). */
static int same_bits_or_nan(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)) && !(a[i] != a[i] && b[i] != b[i])) return 0;
    return 1;
}

static void test_adamw_isas(void) {
    static const int64_t sizes[] = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 100, 16385};
    test_rng rng = rng_seeded(0xada3);
    int compared = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t n = sizes[si];
        float *in = xmalloc(sizeof(float) * 5 * (size_t)n), *ref = xmalloc(sizeof(float) * 4 * (size_t)n),
              *got = xmalloc(sizeof(float) * 4 * (size_t)n);
        fill_normal(&rng, in, 5 * (size_t)n, 1.0); /* p, g, m, v, vmax */
        for (int64_t i = 0; i < n; i++) {
            in[3 * n + i] *= in[3 * n + i] * 1e-3f; /* v, vmax >= 0 */
            in[4 * n + i] *= in[4 * n + i] * 1e-3f;
        }
        static const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, 1e-40f, 3e38f, -2e-45f};
        for (int64_t i = 0; i < n && i < 7; i++) in[n + (i * 5) % n] = special[i];
        if (n > 2) in[3 * n + 2] = 0.0f;
        for (int variant = 0; variant < 8; variant++) {
            const int amsgrad = variant & 1, maximize = (variant >> 1) & 1, late = variant >> 2;
            const double lr = 1e-3, wd = 0.01, b1 = 0.9, b2 = 0.999, t = late ? 7 : 1, eps = late ? 0.0 : 1e-8;
            const attn_adamw_coef c = {maximize ? -1.0 : 1.0,   1.0 - lr * wd,          b1, 1.0 - b1, b2, 1.0 - b2,
                                       lr / (1.0 - pow(b1, t)), sqrt(1.0 - pow(b2, t)), eps};
            memcpy(ref, in, sizeof(float) * (size_t)n);
            memcpy(ref + n, in + 2 * n, sizeof(float) * 3 * (size_t)n);
            attn_adamw_ref(ref, in + n, ref + n, ref + 2 * n, amsgrad ? ref + 3 * n : NULL, n, &c);
            FOR_EACH_ISA(isa) if (isa != ATTN_ISA_REF) {
                memcpy(got, in, sizeof(float) * (size_t)n);
                memcpy(got + n, in + 2 * n, sizeof(float) * 3 * (size_t)n);
                attn_kernel_ctx_for((attn_isa)isa)
                    ->ops->adamw(got, in + n, got + n, got + 2 * n, amsgrad ? got + 3 * n : NULL, n, &c);
                CHECK(same_bits_or_nan(got, ref, 4 * n),
                      "adamw [%s] n=%lld amsgrad %d maximize %d t %g: not the reference's bits",
                      attn_isa_name((attn_isa)isa), (long long)n, amsgrad, maximize, t);
                compared++;
            }
        }
        free(in);
        free(ref);
        free(got);
    }
    if (!compared)
        printf("  adamw kernels: only the portable one runs on this CPU (nothing to compare)\n");
    else
        printf("  adamw kernels: %d ISA runs bitwise equal to the portable kernel\n", compared);
}

int main(void) {
    test_adamw_isas();
    test_fixture();
    test_reference_large();
    test_threads_and_nonfinite();
    test_weight_decay_per_param();
    test_schedule_edges();
    test_errors();
    printf("  float64 reference on a threaded parameter: worst %.2e\n", worst_ref);
    return test_summary("test_train_optim");
}
