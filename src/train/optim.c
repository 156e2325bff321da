/* Optimizers (AdamW, SGD), the warmup + cosine learning-rate schedule, gradient norms, clipping and
 * scaling, and the training-loop step that ties them together.
 *
 * AdamW, step t, per element (torch.optim.AdamW; g negated with maximize):
 *   p <- p (1 - lr wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  vmax <- max(vmax, v)
 *   p <- p - lr / (1 - b1^t) * m / (sqrt(v or vmax) / sqrt(1 - b2^t) + eps)
 * SGD, step t (torch.optim.SGD):
 *   d <- g + wd p;  buf <- d (t = 1) or mu buf + (1 - dampening) d;  d <- d + mu buf | buf;  p <- p - lr d
 * Each element's update is evaluated in double from the stored float32 values and every stored
 * value (p, m, v, buf) is rounded once; the update of p uses the rounded m, v, buf it stores, as
 * PyTorch's in-place float32 code does. Elements are independent, so any split over threads gives
 * the same bits. AdamW runs through the ISA's kernel (src/kernels/optim_*.c), each bitwise equal to
 * the portable one: the vector ones take ~4x less time (12.2M parameters on Zen 4, one thread:
 * 67 -> 16 ms, the memory's rate).
 *
 * Global gradient norm: sqrt(sum over parameters in order of sum of g^2), each parameter's sum over
 * TR_BLOCKS blocks fixed by its size, each block with four interleaved double accumulators
 * combined as (a0 + a1) + (a2 + a3). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/ops_internal.h"
#include "train_internal.h"

/* Elements per parallel chunk of an elementwise update. */
#define TR_CHUNK 16384

attn_adamw_config attn_adamw_config_default(void) {
    attn_adamw_config c;
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-8;
    c.weight_decay = 0.01;
    c.amsgrad = 0;
    c.maximize = 0;
    return c;
}

attn_sgd_config attn_sgd_config_default(void) {
    attn_sgd_config c;
    memset(&c, 0, sizeof c);
    return c;
}

const char *attn_tr_optimizer_kind_name(attn_optimizer_kind k) {
    return k == ATTN_OPTIMIZER_ADAMW ? "adamw" : k == ATTN_OPTIMIZER_SGD ? "sgd" : "unknown";
}

void attn_tr_optimizer_config_str(const attn_optimizer *o, char *buf, size_t len) {
    if (o->kind == ATTN_OPTIMIZER_ADAMW)
        snprintf(buf, len, "beta1=%.17g beta2=%.17g eps=%.17g weight_decay=%.17g amsgrad=%d maximize=%d",
                 o->adamw.beta1, o->adamw.beta2, o->adamw.eps, o->adamw.weight_decay, o->adamw.amsgrad,
                 o->adamw.maximize);
    else
        snprintf(buf, len, "momentum=%.17g dampening=%.17g weight_decay=%.17g nesterov=%d maximize=%d", o->sgd.momentum,
                 o->sgd.dampening, o->sgd.weight_decay, o->sgd.nesterov, o->sgd.maximize);
}

/* ---- creation ---- */

static attn_status opt_create(const char *fn, const attn_params *ps, attn_optimizer_kind kind, int nslots,
                              const char *const *names, double wd, attn_optimizer **out) {
    const size_t n = attn_params_count(ps);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const attn_param *p = attn_params_get(ps, i);
        if (!p->data || !p->grad)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: parameter %zu '%s' has no %s buffer", fn, i, p->name,
                              p->data ? "gradient" : "data");
        if (attn_add_overflow(total, p->numel, &total))
            return attn_error(ATTN_ERR_OVERFLOW, "%s: total parameter count overflows", fn);
    }
    size_t floats, bytes;
    if (attn_mul_overflow(total, (size_t)nslots, &floats) || attn_mul_overflow(floats, sizeof(float), &bytes))
        return attn_error(ATTN_ERR_OVERFLOW, "%s: state of %d x %zu floats overflows", fn, nslots, total);
    attn_optimizer *o = attn__calloc(1, sizeof *o);
    if (!o) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    o->kind = kind;
    o->ps = ps;
    o->n = n;
    o->nslots = nslots;
    for (int s = 0; s < nslots; s++) o->slot_name[s] = names[s];
    o->numel = attn__calloc(n ? n : 1, sizeof *o->numel);
    o->wd = attn__calloc(n ? n : 1, sizeof *o->wd);
    o->slot = attn__calloc(n && nslots ? n * (size_t)nslots : 1, sizeof *o->slot);
    o->state = attn__calloc(floats ? floats : 1, sizeof(float));
    if (!o->numel || !o->wd || !o->slot || !o->state) {
        attn_optimizer_free(o);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu floats of optimizer state", fn, floats);
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        o->numel[i] = attn_params_get(ps, i)->numel;
        o->wd[i] = wd;
    }
    for (int s = 0; s < nslots; s++)
        for (size_t i = 0; i < n; i++) {
            o->slot[(size_t)s * n + i] = o->state + off;
            off += o->numel[i];
        }
    *out = o;
    return ATTN_OK;
}

static int finite_nonneg(double x) { return isfinite(x) && x >= 0.0; }

attn_status attn_adamw_create(const attn_params *ps, const attn_adamw_config *cfg, attn_optimizer **out) {
    static const char fn[] = "attn_adamw_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, ps);
    const attn_adamw_config c = cfg ? *cfg : attn_adamw_config_default();
    if (!(c.beta1 >= 0.0 && c.beta1 < 1.0) || !(c.beta2 >= 0.0 && c.beta2 < 1.0))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: betas (%g, %g) must lie in [0, 1)", fn, c.beta1, c.beta2);
    if (!finite_nonneg(c.eps) || !finite_nonneg(c.weight_decay))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: eps %g and weight_decay %g must be finite and >= 0", fn,
                          c.eps, c.weight_decay);
    static const char *const names[3] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    attn_status st = opt_create(fn, ps, ATTN_OPTIMIZER_ADAMW, c.amsgrad ? 3 : 2, names, c.weight_decay, out);
    if (st) return st;
    (*out)->adamw = c;
    return ATTN_OK;
}

attn_status attn_sgd_create(const attn_params *ps, const attn_sgd_config *cfg, attn_optimizer **out) {
    static const char fn[] = "attn_sgd_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, ps);
    const attn_sgd_config c = cfg ? *cfg : attn_sgd_config_default();
    if (!finite_nonneg(c.momentum) || !finite_nonneg(c.weight_decay) || !isfinite(c.dampening))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: momentum %g and weight_decay %g must be finite and >= 0, dampening %g finite", fn,
                          c.momentum, c.weight_decay, c.dampening);
    if (c.nesterov && (c.momentum <= 0.0 || c.dampening != 0.0))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening %g)", fn, c.momentum,
                          c.dampening);
    static const char *const names[1] = {"momentum_buffer"};
    attn_status st = opt_create(fn, ps, ATTN_OPTIMIZER_SGD, c.momentum != 0.0 ? 1 : 0, names, c.weight_decay, out);
    if (st) return st;
    (*out)->sgd = c;
    return ATTN_OK;
}

void attn_optimizer_free(attn_optimizer *o) {
    if (!o) return;
    attn__free(o->numel);
    attn__free(o->wd);
    attn__free(o->slot);
    attn__free(o->state);
    attn__free(o);
}

attn_optimizer_kind attn_optimizer_get_kind(const attn_optimizer *o) { return o ? o->kind : ATTN_OPTIMIZER_ADAMW; }
const attn_params *attn_optimizer_params(const attn_optimizer *o) { return o ? o->ps : NULL; }
int64_t attn_optimizer_steps(const attn_optimizer *o) { return o ? o->steps : 0; }

attn_status attn_optimizer_set_weight_decay(attn_optimizer *o, size_t param_index, double weight_decay) {
    static const char fn[] = "attn_optimizer_set_weight_decay";
    ATTN_CHECK_NOT_NULL(fn, o);
    if (param_index >= o->n)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: param_index %zu >= %zu parameters", fn, param_index, o->n);
    if (!finite_nonneg(weight_decay))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: weight_decay %g must be finite and >= 0", fn, weight_decay);
    o->wd[param_index] = weight_decay;
    return ATTN_OK;
}

attn_status attn_optimizer_state(const attn_optimizer *o, size_t param_index, const char *name, float **data) {
    static const char fn[] = "attn_optimizer_state";
    ATTN_CHECK_NOT_NULL(fn, o);
    ATTN_CHECK_NOT_NULL(fn, name);
    ATTN_CHECK_NOT_NULL(fn, data);
    if (param_index >= o->n)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: param_index %zu >= %zu parameters", fn, param_index, o->n);
    for (int s = 0; s < o->nslots; s++)
        if (!strcmp(o->slot_name[s], name)) {
            *data = o->slot[(size_t)s * o->n + param_index];
            return ATTN_OK;
        }
    return attn_error(ATTN_ERR_NOT_FOUND, "%s: this %s optimizer keeps no '%s' state", fn,
                      attn_tr_optimizer_kind_name(o->kind), name);
}

/* ---- the updates ---- */

/* The parameter list must still be the one the state was sized for. */
attn_status attn_tr_opt_check_params(const char *fn, const attn_optimizer *o) {
    const size_t n = attn_params_count(o->ps);
    if (n != o->n)
        return attn_error(ATTN_ERR_SHAPE,
                          "%s: the parameter list has %zu parameters, the optimizer was created for %zu", fn, n, o->n);
    for (size_t i = 0; i < n; i++) {
        const attn_param *p = attn_params_get(o->ps, i);
        if (p->numel != o->numel[i] || !p->data || !p->grad)
            return attn_error(ATTN_ERR_SHAPE,
                              "%s: parameter %zu '%s' has %zu elements (buffers %s), the optimizer "
                              "was created for %zu",
                              fn, i, p->name, p->numel, p->data && p->grad ? "present" : "missing", o->numel[i]);
    }
    return ATTN_OK;
}

static void sgd_range(const attn_sgd_config *c, float *p, const float *gr, float *buf, size_t lo, size_t hi, double lr,
                      double wd, int first) {
    const double mu = c->momentum, damp = 1.0 - c->dampening;
    const double sign = c->maximize ? -1.0 : 1.0;
    for (size_t e = lo; e < hi; e++) {
        const double pd = (double)p[e];
        double d = sign * (double)gr[e] + wd * pd;
        if (buf) {
            const float bf = (float)(first ? d : mu * (double)buf[e] + damp * d);
            buf[e] = bf;
            d = c->nesterov ? d + mu * (double)bf : (double)bf;
        }
        p[e] = (float)(pd - lr * d);
    }
}

/* One step of every parameter, after the checks (steps already incremented). */
static void opt_update(attn_optimizer *o, double lr) {
    const double t = (double)o->steps;
    for (size_t i = 0; i < o->n; i++) {
        const attn_param *p = attn_params_get(o->ps, i);
        const size_t numel = p->numel, chunks = (numel + TR_CHUNK - 1) / TR_CHUNK;
        const int nt = numel < TR_MIN_PARALLEL ? 1 : attn_threads_for((int64_t)chunks);
        if (o->kind == ATTN_OPTIMIZER_ADAMW) {
            const attn_adamw_config *c = &o->adamw;
            float *m = o->slot[i], *v = o->slot[o->n + i], *vmax = c->amsgrad ? o->slot[2 * o->n + i] : NULL;
            const attn_adamw_coef coef = {c->maximize ? -1.0 : 1.0,
                                          1.0 - lr * o->wd[i],
                                          c->beta1,
                                          1.0 - c->beta1,
                                          c->beta2,
                                          1.0 - c->beta2,
                                          lr / (1.0 - pow(c->beta1, t)),
                                          sqrt(1.0 - pow(c->beta2, t)),
                                          c->eps};
            const attn_ops_kernels *kr = attn_ops_active();
            TR_PARALLEL_FOR(nt)
            for (size_t k = 0; k < chunks; k++) {
                const size_t lo = k * TR_CHUNK, hi = lo + TR_CHUNK < numel ? lo + TR_CHUNK : numel;
                kr->adamw(p->data + lo, p->grad + lo, m + lo, v + lo, vmax ? vmax + lo : NULL, (int64_t)(hi - lo),
                          &coef);
            }
        } else {
            float *buf = o->nslots ? o->slot[i] : NULL;
            const int first = o->steps == 1;
            TR_PARALLEL_FOR(nt)
            for (size_t k = 0; k < chunks; k++) {
                const size_t lo = k * TR_CHUNK, hi = lo + TR_CHUNK < numel ? lo + TR_CHUNK : numel;
                sgd_range(&o->sgd, p->data, p->grad, buf, lo, hi, lr, o->wd[i], first);
            }
        }
    }
}

static attn_status opt_check_step(const char *fn, const attn_optimizer *o, double lr) {
    if (!finite_nonneg(lr))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: learning rate %g must be finite and >= 0", fn, lr);
    return attn_tr_opt_check_params(fn, o);
}

attn_status attn_optimizer_step(attn_optimizer *o, double lr) {
    static const char fn[] = "attn_optimizer_step";
    ATTN_CHECK_NOT_NULL(fn, o);
    attn_status st = opt_check_step(fn, o, lr);
    if (st) return st;
    o->steps++;
    opt_update(o, lr);
    return ATTN_OK;
}

/* ---- learning-rate schedule ---- */

attn_status attn_lr_warmup_cosine(const attn_lr_schedule *s, int64_t step, double *lr) {
    static const char fn[] = "attn_lr_warmup_cosine";
    ATTN_CHECK_NOT_NULL(fn, s);
    ATTN_CHECK_NOT_NULL(fn, lr);
    if (!finite_nonneg(s->min_lr) || !isfinite(s->max_lr) || s->min_lr > s->max_lr)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: need 0 <= min_lr <= max_lr, finite (min_lr %g, max_lr %g)",
                          fn, s->min_lr, s->max_lr);
    if (s->warmup_steps < 0 || s->total_steps < s->warmup_steps)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: need 0 <= warmup_steps <= total_steps (%lld, %lld)", fn,
                          (long long)s->warmup_steps, (long long)s->total_steps);
    if (step < 0) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: step %lld is negative", fn, (long long)step);
    const int64_t w = s->warmup_steps, T = s->total_steps;
    if (step < w) {
        *lr = s->max_lr * (double)(step + 1) / (double)w;
    } else if (step < T) {
        const double progress = (double)(step - w) / (double)(T - w);
        *lr = s->min_lr + (s->max_lr - s->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    } else {
        *lr = s->min_lr;
    }
    return ATTN_OK;
}

/* ---- gradients ---- */

static double sumsq_range(const float *g, int64_t lo, int64_t hi) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t e = lo;
    for (; e + 4 <= hi; e += 4) {
        const double x0 = g[e], x1 = g[e + 1], x2 = g[e + 2], x3 = g[e + 3];
        a0 += x0 * x0;
        a1 += x1 * x1;
        a2 += x2 * x2;
        a3 += x3 * x3;
    }
    for (; e < hi; e++) a0 += (double)g[e] * (double)g[e];
    return (a0 + a1) + (a2 + a3);
}

attn_status attn_tr_grad_sumsq(const char *fn, const attn_params *ps, double *sumsq) {
    const size_t n = attn_params_count(ps);
    for (size_t i = 0; i < n; i++) {
        const attn_param *p = attn_params_get(ps, i);
        if (!p->grad && p->numel)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: parameter %zu '%s' has no gradient buffer", fn, i,
                              p->name);
    }
    double total = 0.0;
    for (size_t i = 0; i < n; i++) {
        const attn_param *p = attn_params_get(ps, i);
        const int64_t numel = (int64_t)p->numel;
        double part[TR_BLOCKS];
        const int nt = tr_threads(numel);
        TR_PARALLEL_FOR(nt)
        for (int b = 0; b < TR_BLOCKS; b++)
            part[b] = sumsq_range(p->grad, tr_block_lo(numel, b), tr_block_lo(numel, b + 1));
        for (int b = 0; b < TR_BLOCKS; b++) total += part[b];
    }
    *sumsq = total;
    return ATTN_OK;
}

void attn_tr_grad_scale(const attn_params *ps, double factor) {
    const size_t n = attn_params_count(ps);
    for (size_t i = 0; i < n; i++) {
        const attn_param *p = attn_params_get(ps, i);
        float *g = p->grad;
        const size_t numel = p->numel, chunks = (numel + TR_CHUNK - 1) / TR_CHUNK;
        const int nt = numel < TR_MIN_PARALLEL ? 1 : attn_threads_for((int64_t)chunks);
        TR_PARALLEL_FOR(nt)
        for (size_t k = 0; k < chunks; k++) {
            const size_t lo = k * TR_CHUNK, hi = lo + TR_CHUNK < numel ? lo + TR_CHUNK : numel;
            for (size_t e = lo; e < hi; e++) g[e] = (float)((double)g[e] * factor);
        }
    }
}

attn_status attn_grad_norm(const attn_params *ps, double *norm) {
    static const char fn[] = "attn_grad_norm";
    ATTN_CHECK_NOT_NULL(fn, ps);
    ATTN_CHECK_NOT_NULL(fn, norm);
    double ss;
    attn_status st = attn_tr_grad_sumsq(fn, ps, &ss);
    if (st) return st;
    *norm = sqrt(ss);
    return ATTN_OK;
}

attn_status attn_grad_clip_norm(const attn_params *ps, double max_norm, double *norm) {
    static const char fn[] = "attn_grad_clip_norm";
    ATTN_CHECK_NOT_NULL(fn, ps);
    if (!finite_nonneg(max_norm))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: max_norm %g must be finite and >= 0", fn, max_norm);
    double ss;
    attn_status st = attn_tr_grad_sumsq(fn, ps, &ss);
    if (st) return st;
    const double n = sqrt(ss);
    if (norm) *norm = n;
    if (!isfinite(n))
        return attn_error(ATTN_ERR_NUMERIC, "%s: the gradient norm is %g; gradients left unchanged", fn, n);
    const double c = max_norm / (n + 1e-6);
    if (c < 1.0) attn_tr_grad_scale(ps, c);
    return ATTN_OK;
}

attn_status attn_grad_scale(const attn_params *ps, double factor) {
    static const char fn[] = "attn_grad_scale";
    ATTN_CHECK_NOT_NULL(fn, ps);
    if (!isfinite(factor)) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: factor %g is not finite", fn, factor);
    const size_t n = attn_params_count(ps);
    for (size_t i = 0; i < n; i++) {
        const attn_param *p = attn_params_get(ps, i);
        if (!p->grad && p->numel)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: parameter %zu '%s' has no gradient buffer", fn, i,
                              p->name);
    }
    if (factor != 1.0) attn_tr_grad_scale(ps, factor);
    return ATTN_OK;
}

attn_status attn_train_step(attn_optimizer *o, double lr, double max_norm, int64_t accum_steps, double *grad_norm) {
    static const char fn[] = "attn_train_step";
    ATTN_CHECK_NOT_NULL(fn, o);
    if (accum_steps < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: accum_steps %lld must be >= 1", fn, (long long)accum_steps);
    if (!isfinite(max_norm))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: max_norm %g is not finite", fn, max_norm);
    attn_status st = opt_check_step(fn, o, lr);
    if (st) return st;
    double ss;
    st = attn_tr_grad_sumsq(fn, o->ps, &ss);
    if (st) return st;
    const double n = sqrt(ss) / (double)accum_steps;
    if (grad_norm) *grad_norm = n;
    if (!isfinite(n))
        return attn_error(ATTN_ERR_NUMERIC,
                          "%s: the gradient norm is %g at optimizer step %lld: step skipped, parameters, "
                          "gradients and optimizer state unchanged",
                          fn, n, (long long)o->steps + 1);
    double s = 1.0 / (double)accum_steps;
    if (max_norm > 0.0) {
        const double c = max_norm / (n + 1e-6);
        if (c < 1.0) s *= c;
    }
    if (s != 1.0) attn_tr_grad_scale(o->ps, s);
    o->steps++;
    opt_update(o, lr);
    return ATTN_OK;
}
