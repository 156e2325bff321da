/* End-to-end training parity with PyTorch (tests/parity/gen_train_e2e.py): the seed's
 * encoder-decoder Transformer (attn_seq2seq = embeddings * sqrt(d) + sinusoidal positions +
 * nn.Transformer + output projection), exported from PyTorch, trained for the fixture's number of
 * steps on one padded batch with cross-entropy (ignore_index = padding), AdamW with weight decay,
 * the warmup + cosine schedule and gradient clipping by global norm. PyTorch's reference ran in
 * float64 from the same float32 weights. Checked:
 *   - every step's learning rate (exactly the schedule's), loss (1e-4 relative: the issue's
 *     requirement) and gradient norm before clipping (1e-2 relative; a wrong clip or schedule is
 *     off by tens of percent). The fixture's model uses GELU: with ReLU's kink a pre-activation
 *     that float32 rounding moves across 0 changes the gradient discontinuously, and one fresh
 *     seed in CI (103304) parted the trajectories by 8e-4 in the loss with either library right;
 *     with GELU that seed gives 2.8e-7 and 17 others <= 3e-7;
 *   - the final parameters. Adam normalises each element's step by its own gradient history, so
 *     an element's step is |lr m / (sqrt(v) + eps)| <= about lr whatever its gradient's size, and
 *     float32 rounding of a near-zero gradient can change that step by up to ~lr. The meaningful
 *     measure is therefore the training's displacement D = p_final - p_init: per tensor we require
 *     ||D_attn - D_torch|| <= 1e-3 ||D_torch|| + 1e-2 lr_sum sqrt(numel), i.e. 0.1% of the
 *     movement plus a budget of 1% of the largest possible per-element movement (lr_sum = the sum
 *     of the step sizes) for elements whose gradient is rounding noise. One such family exists by
 *     construction: the key bias of every attention (in_proj_bias[E:2E]) has a gradient that is
 *     exactly 0 mathematically (softmax is invariant to a shift shared by all keys), so in float32
 *     it is pure rounding noise, which Adam amplifies into steps of up to lr while float64 PyTorch
 *     leaves it (nearly) still; those slices move the loss by nothing, and are only required to
 *     stay within the bound lr_sum (+ 1e-6) of PyTorch's value. Everything else must also agree
 *     element-wise within 2e-2 lr_sum. */
#include "test_util.h"

static int64_t meta_int(attn_safetensors *st, const char *key) {
    const char *v = attn_safetensors_metadata_find(st, key);
    CHECK(v != NULL, "fixture lacks metadata '%s'", key);
    return v ? atoll(v) : 1;
}

static double meta_dbl(attn_safetensors *st, const char *key) {
    const char *v = attn_safetensors_metadata_find(st, key);
    CHECK(v != NULL, "fixture lacks metadata '%s'", key);
    return v ? strtod(v, NULL) : 0.0;
}

static void *read_raw(attn_safetensors *st, const char *name, size_t expect_bytes) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
    CHECK(t != NULL, "fixture lacks %s", name);
    if (!t) return NULL;
    CHECK(t->nbytes == expect_bytes, "%s: %zu bytes, want %zu", name, (size_t)t->nbytes, expect_bytes);
    if (t->nbytes != expect_bytes) return NULL;
    void *p = xmalloc(expect_bytes);
    memcpy(p, t->data, expect_bytes);
    return p;
}

/* The key block of a packed in_proj_bias (in_proj_bias[E:2E]) has a mathematically zero gradient. */
static int is_key_bias(const attn_param *p, size_t e) {
    size_t len = strlen(p->name);
    const char *suffix = "in_proj_bias";
    size_t sl = strlen(suffix);
    if (len < sl || strcmp(p->name + len - sl, suffix) != 0) return 0;
    size_t E = p->numel / 3;
    return e >= E && e < 2 * E;
}

int main(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/train_e2e.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (!st) return test_summary("test_train_e2e");
    const int64_t B = meta_int(st, "B"), S = meta_int(st, "S"), T = meta_int(st, "T"), d = meta_int(st, "d_model"),
                  V = meta_int(st, "tgt_vocab"), steps = meta_int(st, "steps");
    attn_seq2seq_config cfg =
        attn_seq2seq_config_default(meta_int(st, "src_vocab"), V, d, meta_int(st, "nhead"), meta_int(st, "layers"));
    cfg.max_len = meta_int(st, "max_len");
    cfg.transformer.layer.dim_feedforward = meta_int(st, "ff");
    const char *act = attn_safetensors_metadata_find(st, "activation"); /* absent: relu */
    cfg.transformer.layer.activation = act && !strcmp(act, "gelu") ? ATTN_ACTIVATION_GELU : ATTN_ACTIVATION_RELU;
    cfg.transformer.layer.dropout = 0.0f;
    attn_seq2seq *m = NULL;
    CHECK_OK(attn_seq2seq_create(&cfg, &m));
    if (!m || steps < 1 || steps > 1000) {
        attn_safetensors_close(st);
        return test_summary("test_train_e2e");
    }
    const attn_params *ps = attn_seq2seq_params(m);
    CHECK_OK(attn_params_load(ps, st, "w.", 1));

    const size_t nsrc = (size_t)(B * S), ntgt = (size_t)(B * T);
    int64_t *src = read_raw(st, "in.src", 8 * nsrc), *tgt_in = read_raw(st, "in.tgt_in", 8 * ntgt),
            *tgt_out = read_raw(st, "in.tgt_out", 8 * ntgt);
    uint8_t *skpm = read_raw(st, "in.src_kpm", nsrc), *tkpm = read_raw(st, "in.tgt_kpm", ntgt);
    double *ref_loss = read_raw(st, "ref.loss", 8 * (size_t)steps), *ref_lr = read_raw(st, "ref.lr", 8 * (size_t)steps),
           *ref_norm = read_raw(st, "ref.grad_norm", 8 * (size_t)steps);
    if (!src || !tgt_in || !tgt_out || !skpm || !tkpm || !ref_loss || !ref_lr || !ref_norm) {
        attn_safetensors_close(st);
        return test_summary("test_train_e2e");
    }

    attn_adamw_config ac = attn_adamw_config_default();
    ac.beta1 = meta_dbl(st, "beta1");
    ac.beta2 = meta_dbl(st, "beta2");
    ac.eps = meta_dbl(st, "eps");
    ac.weight_decay = meta_dbl(st, "weight_decay");
    attn_optimizer *opt = NULL;
    CHECK_OK(attn_adamw_create(ps, &ac, &opt));
    attn_lr_schedule sched = {meta_dbl(st, "max_lr"), meta_dbl(st, "min_lr"), meta_int(st, "warmup"), steps};
    const double max_norm = meta_dbl(st, "max_norm");
    attn_cross_entropy_config ce = attn_cross_entropy_config_default();
    ce.ignore_index = meta_int(st, "pad");

    /* the initial parameters, for the displacement */
    const size_t np = attn_params_count(ps);
    float **init = xmalloc(sizeof(float *) * np);
    for (size_t i = 0; i < np; i++) {
        const attn_param *p = attn_params_get(ps, i);
        init[i] = xmalloc(sizeof(float) * p->numel);
        memcpy(init[i], p->data, sizeof(float) * p->numel);
    }

    attn_seq2seq_args a = attn_seq2seq_args_default();
    a.batch = B;
    a.n_src = S;
    a.n_tgt = T;
    a.src = src;
    a.tgt = tgt_in;
    a.src_key_padding_mask = skpm;
    a.tgt_key_padding_mask = tkpm;
    a.training = 1; /* dropout 0: the training path, same function */
    size_t sb = attn_seq2seq_saved_size(m, &a), wb = attn_seq2seq_workspace_size(m, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    float *logits = xmalloc(sizeof(float) * ntgt * (size_t)V);

    double worst_loss = 0, worst_norm = 0, lr_sum = 0;
    for (int64_t s = 0; s < steps && opt; s++) {
        CHECK_OK(attn_params_zero_grad(ps));
        CHECK_OK(attn_seq2seq_forward(m, &a, logits, saved, sb, ws, wb));
        float loss = 0;
        CHECK_OK(attn_cross_entropy_forward(logits, tgt_out, (int64_t)ntgt, V, &ce, &loss, logits));
        CHECK_OK(attn_seq2seq_backward(m, &a, logits, saved, sb, ws, wb));
        double lr = 0, gn = 0;
        CHECK_OK(attn_lr_warmup_cosine(&sched, s, &lr));
        CHECK(fabs(lr - ref_lr[s]) <= 1e-12 * ref_lr[s], "step %lld: lr %.17g, PyTorch %.17g", (long long)s, lr,
              ref_lr[s]);
        lr_sum += lr;
        CHECK_OK(attn_train_step(opt, lr, max_norm, 1, &gn));
        const double el = fabs((double)loss - ref_loss[s]) / fabs(ref_loss[s]);
        const double en = fabs(gn - ref_norm[s]) / ref_norm[s];
        CHECK(el <= 1e-4, "step %lld: loss %.9g, PyTorch %.9g (rel err %.3g)", (long long)s, (double)loss, ref_loss[s],
              el);
        CHECK(en <= 1e-2, "step %lld: grad norm %.9g, PyTorch %.9g (rel err %.3g)", (long long)s, gn, ref_norm[s], en);
        if (el > worst_loss) worst_loss = el;
        if (en > worst_norm) worst_norm = en;
        printf("  step %2lld  lr %.5f  loss %.7f (PyTorch %.7f, rel err %.1e)  |g| %.5f (rel err %.1e)%s\n",
               (long long)s, lr, (double)loss, ref_loss[s], el, gn, en, gn > max_norm ? "  clipped" : "");
    }
    printf("  %lld steps: worst loss rel err %.2e, worst grad-norm rel err %.2e\n", (long long)steps, worst_loss,
           worst_norm);
    CHECK(ref_loss[steps - 1] < ref_loss[0], "the reference did not learn (%.4f -> %.4f)", ref_loss[0],
          ref_loss[steps - 1]);

    /* final parameters */
    double worst_disp = 0, worst_elem = 0, worst_kbias = 0;
    for (size_t i = 0; i < np; i++) {
        const attn_param *p = attn_params_get(ps, i);
        char name[512];
        snprintf(name, sizeof name, "final.%s", p->name);
        float *ref = xmalloc(sizeof(float) * p->numel);
        if (attn_safetensors_read_f32(st, name, ref, p->numel) != ATTN_OK) {
            CHECK(0, "fixture lacks %s", name);
            free(ref);
            continue;
        }
        double num = 0, den = 0, elem = 0, kb = 0;
        int finite = 1;
        for (size_t e = 0; e < p->numel; e++) {
            if (!isfinite(p->data[e])) finite = 0;
            const double diff = (double)p->data[e] - ref[e], dref = (double)ref[e] - init[i][e];
            if (is_key_bias(p, e)) {
                if (fabs(diff) > kb) kb = fabs(diff);
                continue;
            }
            num += diff * diff;
            den += dref * dref;
            if (fabs(diff) > elem) elem = fabs(diff);
        }
        CHECK(finite, "%s: non-finite parameter", p->name);
        const double tol = 1e-3 * sqrt(den) + 1e-2 * lr_sum * sqrt((double)p->numel);
        CHECK(sqrt(num) <= tol, "%s: ||D_attn - D_torch|| %.3g > %.3g (||D_torch|| %.3g)", p->name, sqrt(num), tol,
              sqrt(den));
        CHECK(elem <= 2e-2 * lr_sum, "%s: an element differs by %.3g (> 2e-2 lr_sum = %.3g)", p->name, elem,
              2e-2 * lr_sum);
        CHECK(kb <= lr_sum + 1e-6, "%s: key bias differs by %.3g (> lr_sum %.3g)", p->name, kb, lr_sum);
        const double rd = den > 0 ? sqrt(num / den) : sqrt(num);
        if (rd > worst_disp) worst_disp = rd;
        if (elem > worst_elem) worst_elem = elem;
        if (kb > worst_kbias) worst_kbias = kb;
        free(ref);
    }
    printf("  %zu parameters: worst displacement rel err %.2e, worst element diff %.2e (lr_sum %.3g), "
           "key-bias diff %.2e\n",
           np, worst_disp, worst_elem, lr_sum, worst_kbias);

    for (size_t i = 0; i < np; i++) free(init[i]);
    free(init);
    free(saved);
    free(ws);
    free(logits);
    free(src);
    free(tgt_in);
    free(tgt_out);
    free(skpm);
    free(tkpm);
    free(ref_loss);
    free(ref_lr);
    free(ref_norm);
    attn_optimizer_free(opt);
    attn_seq2seq_free(m);
    attn_safetensors_close(st);
    return test_summary("test_train_e2e");
}
