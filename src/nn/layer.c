/* Transformer encoder and decoder layers (torch.nn.TransformerEncoderLayer /
 * TransformerDecoderLayer, batch_first=True), forward and backward.
 *
 * A layer is a chain of sublayers over the residual stream x [R = B * N rows, d]:
 *   attention sublayer (self: kv = its own query input; cross: kv = memory), with a = dropout(MHA):
 *     post-norm  y = LN(x + a(x))            pre-norm  y = x + a(LN(x))
 *   feed-forward sublayer, f(z) = dropout(W2 dropout(act(W1 z + b1)) + b2):
 *     post-norm  y = LN(x + f(x))            pre-norm  y = x + f(LN(x))
 * encoder: self-attention (norm1), feed-forward (norm2); decoder: self-attention (norm1),
 * cross-attention (norm2), feed-forward (norm3).
 * Backward, per sublayer, from dy:
 *   post-norm  dr = LN'(r)^T dy ; dx = dr + (d a / d x)^T dr         (r = x + a(x), saved)
 *   pre-norm   dx = dy + LN'(x)^T [(d a / d n)^T dy]                 (n = LN(x), saved)
 * the feed-forward part: dg = W2^T-product of df, dh = act'(h) dropout'(dg), dz = dh W1,
 * dW2 += df^T g, dW1 += dh^T z, with h = W1 z + b1 saved and g = dropout(act(h)) recomputed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_layer.h"

attn_layer_config attn_layer_config_default(int64_t d_model, int64_t nhead) {
    attn_layer_config c;
    memset(&c, 0, sizeof c);
    c.d_model = d_model;
    c.nhead = nhead;
    c.dim_feedforward = 2048;
    c.dropout = 0.1f;
    c.activation = ATTN_ACTIVATION_RELU;
    c.layer_norm_eps = 1e-5f;
    c.norm_first = 0;
    return c;
}

attn_layer_args attn_layer_args_default(void) {
    attn_layer_args a;
    memset(&a, 0, sizeof a);
    return a;
}

attn_status attn_nn_layer_check_config(const char *fn, const attn_layer_config *c) {
    ATTN_CHECK_NOT_NULL(fn, c);
    if (c->d_model < 1 || c->nhead < 1 || c->d_model % c->nhead != 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: d_model (%lld) must be a positive multiple of nhead (%lld)",
                          fn, (long long)c->d_model, (long long)c->nhead);
    if (c->dim_feedforward < 1 || c->dim_feedforward > (1 << 24) || c->d_model > (1 << 24))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: dim_feedforward (%lld) must be in [1, 2^24]", fn,
                          (long long)c->dim_feedforward);
    if (!(c->dropout >= 0 && c->dropout <= 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: dropout must be in [0, 1] (got %g)", fn, (double)c->dropout);
    if (c->activation != ATTN_ACTIVATION_RELU && c->activation != ATTN_ACTIVATION_GELU)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: activation %d is neither relu nor gelu", fn, (int)c->activation);
    if (!(c->layer_norm_eps > 0) || !isfinite(c->layer_norm_eps))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: layer_norm_eps must be finite and > 0 (got %g)", fn,
                          (double)c->layer_norm_eps);
    return ATTN_OK;
}

/* ---- create / free ---- */

attn_status attn_nn_layer_init(nn_layer *L, const char *fn, const attn_layer_config *cfg, int decoder,
                          const attn_rope_config *rope) {
    attn_status st = attn_nn_layer_check_config(fn, cfg);
    if (st) return st;
    memset(L, 0, sizeof *L);
    L->cfg = *cfg;
    L->decoder = decoder;
    const int64_t d = cfg->d_model, F = cfg->dim_feedforward;
    attn_mha_config mc = attn_mha_config_default(d, cfg->nhead), cc;
    mc.dropout = cfg->dropout;
    cc = mc; /* no rotary embedding in cross-attention, which stays exact */
    mc.attention = cfg->attention;
    if (rope) {
        mc.use_rope = 1;
        mc.rope = *rope;
    }
    if ((st = attn_mha_create(&mc, &L->sa)) || (decoder && (st = attn_mha_create(&cc, &L->ca)))) {
        attn_nn_layer_destroy(L);
        return attn_nn_wrap_error(st, fn);
    }
    const int nn = decoder ? 3 : 2;
    /* linear1, linear2: nn.Linear's init (kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(in)), bias the same) */
    nn_pdesc desc[10] = {
        {"linear1.weight", 2, {F, d, 0, 0}, NN_INIT_UNIFORM, 1.0 / sqrt((double)d), 0},
        {"linear1.bias", 1, {F, 0, 0, 0}, NN_INIT_UNIFORM, 1.0 / sqrt((double)d), 0},
        {"linear2.weight", 2, {d, F, 0, 0}, NN_INIT_UNIFORM, 1.0 / sqrt((double)F), 0},
        {"linear2.bias", 1, {d, 0, 0, 0}, NN_INIT_UNIFORM, 1.0 / sqrt((double)F), 0},
        {"norm1.weight", 1, {d, 0, 0, 0}, NN_INIT_ONES, 0, 0},
        {"norm1.bias", 1, {d, 0, 0, 0}, NN_INIT_ZEROS, 0, 0},
        {"norm2.weight", 1, {d, 0, 0, 0}, NN_INIT_ONES, 0, 0},
        {"norm2.bias", 1, {d, 0, 0, 0}, NN_INIT_ZEROS, 0, 0},
        {"norm3.weight", 1, {d, 0, 0, 0}, NN_INIT_ONES, 0, 0},
        {"norm3.bias", 1, {d, 0, 0, 0}, NN_INIT_ZEROS, 0, 0},
    };
    float *p[10], *g[10];
    if ((st = attn_nn_store_create(&L->store, fn, desc, 4 + 2 * nn, p, g))) {
        attn_nn_layer_destroy(L);
        return st;
    }
    L->w1 = p[0], L->b1 = p[1], L->w2 = p[2], L->b2 = p[3];
    L->gw1 = g[0], L->gb1 = g[1], L->gw2 = g[2], L->gb2 = g[3];
    for (int k = 0; k < nn; k++) {
        L->ng[k] = p[4 + 2 * k];
        L->nb[k] = p[5 + 2 * k];
        L->gng[k] = g[4 + 2 * k];
        L->gnb[k] = g[5 + 2 * k];
    }
    /* PyTorch's order: self_attn, multihead_attn, linear1, linear2, norms */
    L->list = attn_nn_params_new();
    if (!L->list) {
        attn_nn_layer_destroy(L);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    if ((st = attn_nn_params_append(L->list, fn, attn_mha_params(L->sa), "self_attn.")) ||
        (decoder && (st = attn_nn_params_append(L->list, fn, attn_mha_params(L->ca), "multihead_attn."))) ||
        (st = attn_nn_params_append(L->list, fn, L->store.list, NULL))) {
        attn_nn_layer_destroy(L);
        return st;
    }
    return ATTN_OK;
}

void attn_nn_layer_destroy(nn_layer *L) {
    attn_mha_free(L->sa);
    attn_mha_free(L->ca);
    attn_nn_store_free(&L->store);
    attn_nn_params_free(L->list);
    memset(L, 0, sizeof *L);
}

/* ---- sizes and the saved layout ---- */

static attn_mha_args mha_args(const nn_layer *L, const attn_layer_args *a, int cross, const float *q,
                              const float *kv) {
    attn_mha_args m = attn_mha_args_default();
    const attn_masks *mk = cross ? &a->memory_masks : &a->self_masks;
    m.batch = a->batch;
    m.nq = a->n;
    m.nk = cross ? a->n_memory : a->n;
    m.query = q;
    m.key = m.value = kv;
    m.key_padding_mask = mk->key_padding_mask;
    m.key_padding_mask_float = mk->key_padding_mask_float;
    m.attn_mask = mk->attn_mask;
    m.attn_mask_float = mk->attn_mask_float;
    m.attn_mask_3d = mk->attn_mask_3d;
    m.is_causal = mk->is_causal;
    m.training = a->training;
    m.seed = a->seed;
    m.offset = a->offset + (cross ? 2 : 0);
    (void)L;
    return m;
}

typedef struct att_saved {
    float *z, *mean, *rstd, *out; /* z: LN input r (post-norm) or LN output n (pre-norm) */
    void *mha;
    size_t mha_bytes;
} att_saved;

typedef struct ffn_saved {
    float *z, *mean, *rstd, *h;
} ffn_saved;

typedef struct layer_saved {
    att_saved att[2];
    ffn_saved ffn;
} layer_saved;

static size_t rows_of(const attn_layer_args *a) { return (size_t)a->batch * (size_t)a->n; }

/* Walk the saved layout: with ar == NULL only count bytes. */
static size_t saved_layout(const nn_layer *L, const attn_layer_args *a, nn_arena *ar, layer_saved *s) {
    const size_t R = rows_of(a), d = (size_t)L->cfg.d_model, F = (size_t)L->cfg.dim_feedforward;
    const size_t rd = nn_fblock(nn_mul(R, d)), r1 = nn_fblock(R);
    size_t total = NN_SLACK;
    for (int k = 0; k < (L->decoder ? 2 : 1); k++) {
        attn_mha_args m = mha_args(L, a, k, NULL, NULL);
        const size_t mb = attn_mha_saved_size(k ? L->ca : L->sa, &m);
        total = nn_add(total, nn_add(nn_add(rd, rd), nn_add(nn_add(r1, r1), nn_block(mb))));
        if (ar) {
            att_saved *t = &s->att[k];
            t->z = nn_takef(ar, R * d);
            t->mean = nn_takef(ar, R);
            t->rstd = nn_takef(ar, R);
            t->mha = attn_nn_take(ar, mb);
            t->mha_bytes = mb;
            t->out = nn_takef(ar, R * d);
        }
    }
    total = nn_add(total, nn_add(nn_add(rd, nn_add(r1, r1)), nn_fblock(nn_mul(R, F))));
    if (ar) {
        s->ffn.z = nn_takef(ar, R * d);
        s->ffn.mean = nn_takef(ar, R);
        s->ffn.rstd = nn_takef(ar, R);
        s->ffn.h = nn_takef(ar, R * F);
    }
    return total;
}

size_t attn_nn_layer_saved_bytes(const nn_layer *L, const attn_layer_args *a) {
    if (!L || !a || a->batch < 1 || a->n < 1) return 0;
    return saved_layout(L, a, NULL, NULL);
}

/* Temporaries: four [R, d] and two [R, F] buffers, then the sub-calls' workspace. */
typedef struct layer_tmp {
    float *t[4], *g, *dg;
} layer_tmp;

static size_t tmp_bytes(const nn_layer *L, const attn_layer_args *a) {
    const size_t R = rows_of(a), d = (size_t)L->cfg.d_model, F = (size_t)L->cfg.dim_feedforward;
    return nn_add(nn_mul(4, nn_fblock(nn_mul(R, d))), nn_mul(2, nn_fblock(nn_mul(R, F))));
}

static void take_tmp(const nn_layer *L, const attn_layer_args *a, nn_arena *ar, layer_tmp *t) {
    const size_t R = rows_of(a), d = (size_t)L->cfg.d_model, F = (size_t)L->cfg.dim_feedforward;
    for (int i = 0; i < 4; i++) t->t[i] = nn_takef(ar, R * d);
    t->g = nn_takef(ar, R * F);
    t->dg = nn_takef(ar, R * F);
}

static size_t sub_ws_bytes(const nn_layer *L, const attn_layer_args *a) {
    const int64_t R = a->batch * a->n, d = L->cfg.d_model, F = L->cfg.dim_feedforward;
    size_t s = nn_max(attn_nn_linear_ws(R, d, F), attn_nn_linear_ws(R, F, d));
    for (int k = 0; k < (L->decoder ? 2 : 1); k++) {
        attn_mha_args m = mha_args(L, a, k, NULL, NULL);
        s = nn_max(s, attn_mha_workspace_size(k ? L->ca : L->sa, &m));
    }
    return s;
}

size_t attn_nn_layer_ws_bytes(const nn_layer *L, const attn_layer_args *a) {
    if (!L || !a || a->batch < 1 || a->n < 1) return 0;
    /* the saved layout too: an inference forward (saved NULL) keeps it here */
    return nn_add(nn_add(NN_SLACK, saved_layout(L, a, NULL, NULL)), nn_add(tmp_bytes(L, a), sub_ws_bytes(L, a)));
}

attn_status attn_nn_layer_check_args(const char *fn, const nn_layer *L, const attn_layer_args *a) {
    ATTN_CHECK_NOT_NULL(fn, L);
    ATTN_CHECK_NOT_NULL(fn, a);
    if (a->batch < 1 || a->n < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch (%lld) and n (%lld) must be >= 1", fn,
                          (long long)a->batch, (long long)a->n);
    if (!a->x) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: x (the [B, n, d_model] input) is NULL", fn);
    if (L->decoder && (!a->memory || a->n_memory < 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: a decoder needs memory [B, n_memory >= 1, d_model] (memory %p, n_memory %lld)",
                          fn, (const void *)a->memory, (long long)a->n_memory);
    const size_t big = (size_t)1 << 40;
    if (nn_mul(rows_of(a), (size_t)(L->cfg.dim_feedforward > L->cfg.d_model ? L->cfg.dim_feedforward : L->cfg.d_model)) > big ||
        (L->decoder && nn_mul(nn_mul((size_t)a->batch, (size_t)a->n_memory), (size_t)L->cfg.d_model) > big))
        return attn_error(ATTN_ERR_OVERFLOW, "%s: shapes too large (batch %lld, n %lld, n_memory %lld)", fn,
                          (long long)a->batch, (long long)a->n, (long long)a->n_memory);
    return ATTN_OK;
}

/* ---- sublayers ---- */

static attn_status ln_fwd(const char *fn, const float *x, const float *g, const float *b, float *y, float *mean,
                          float *rstd, int64_t R, int64_t d, float eps) {
    attn_status st = attn_layernorm_forward(x, g, b, y, mean, rstd, R, d, eps);
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

static attn_status ln_bwd(const char *fn, const float *x, const float *g, const float *mean, const float *rstd,
                          const float *dy, float *dx, float *dg, float *db, int64_t R, int64_t d) {
    attn_status st = attn_layernorm_backward(x, g, mean, rstd, dy, dx, dg, db, R, d);
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

static attn_status add(const char *fn, const float *a, const float *b, float *y, int64_t n) {
    attn_status st = attn_residual_add(a, b, y, n);
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

/* Attention sublayer k (0 self, 1 cross; norm index k): x -> y. */
static attn_status att_fwd(const char *fn, nn_layer *L, int k, const attn_layer_args *a, const float *x, float *y,
                           att_saved *s, float *tmp, void *ws, size_t wsb) {
    const int64_t R = a->batch * a->n, d = L->cfg.d_model;
    const int pre = L->cfg.norm_first;
    const float eps = L->cfg.layer_norm_eps;
    attn_status st;
    const float *q = x;
    if (pre) {
        if ((st = ln_fwd(fn, x, L->ng[k], L->nb[k], s->z, s->mean, s->rstd, R, d, eps))) return st;
        q = s->z;
    }
    attn_mha_args m = mha_args(L, a, k, q, k ? a->memory : q);
    m.capture = a->capture; /* the forward alone records weights */
    const size_t mark = attn_nn_capture_push(a->capture, "%s", k ? "multihead_attn" : "self_attn");
    st = attn_mha_forward(k ? L->ca : L->sa, &m, tmp, NULL, s->mha, s->mha_bytes, ws, wsb);
    attn_nn_capture_pop(a->capture, mark);
    if (st) return attn_nn_wrap_error(st, fn);
    if ((st = nn_dropout_fwd(tmp, R * d, L->cfg.dropout, a->training, a->seed, a->offset + 2 * (uint64_t)k + 1)))
        return attn_nn_wrap_error(st, fn);
    if (pre) return add(fn, x, tmp, y, R * d);
    if ((st = add(fn, x, tmp, s->z, R * d))) return st;
    return ln_fwd(fn, s->z, L->ng[k], L->nb[k], y, s->mean, s->rstd, R, d, eps);
}

/* dy -> dx (written); dmem written or accumulated (acc_mem) by the cross-attention. */
static attn_status att_bwd(const char *fn, nn_layer *L, int k, const attn_layer_args *a, const float *x,
                           const float *dy, float *dx, float *dmem, int acc_mem, const att_saved *s, float *t1,
                           float *t2, void *ws, size_t wsb) {
    const int64_t R = a->batch * a->n, d = L->cfg.d_model;
    const size_t bytes = sizeof(float) * (size_t)(R * d);
    const int pre = L->cfg.norm_first;
    attn_mha *mha = k ? L->ca : L->sa;
    attn_status st;
    const float *top = dy;
    if (!pre) {
        if ((st = ln_bwd(fn, s->z, L->ng[k], s->mean, s->rstd, dy, t1, L->gng[k], L->gnb[k], R, d))) return st;
        top = t1;
    }
    memcpy(dx, top, bytes);
    memcpy(t2, top, bytes);
    if ((st = nn_dropout_bwd(t2, R * d, L->cfg.dropout, a->training, a->seed, a->offset + 2 * (uint64_t)k + 1)))
        return attn_nn_wrap_error(st, fn);
    const float *q = pre ? s->z : x;
    attn_mha_args m = mha_args(L, a, k, q, k ? a->memory : q);
    if (pre) {
        /* dn (query, and key/value for self-attention) into t1, then through norm k */
        st = k ? attn_nn_mha_backward(mha, &m, t2, t1, dmem, dmem, 0, acc_mem, s->mha, s->mha_bytes, ws, wsb)
               : attn_nn_mha_backward(mha, &m, t2, t1, t1, t1, 0, 0, s->mha, s->mha_bytes, ws, wsb);
        if (st) return attn_nn_wrap_error(st, fn);
        if ((st = ln_bwd(fn, x, L->ng[k], s->mean, s->rstd, t1, t2, L->gng[k], L->gnb[k], R, d))) return st;
        return add(fn, dx, t2, dx, R * d);
    }
    st = k ? attn_nn_mha_backward(mha, &m, t2, dx, dmem, dmem, 1, acc_mem, s->mha, s->mha_bytes, ws, wsb)
           : attn_nn_mha_backward(mha, &m, t2, dx, dx, dx, 1, 1, s->mha, s->mha_bytes, ws, wsb);
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

/* g = dropout(act(h)) at the feed-forward's first dropout site. */
static attn_status ffn_act(const char *fn, const nn_layer *L, const attn_layer_args *a, const float *h, float *g,
                           int64_t n) {
    attn_status st = L->cfg.activation == ATTN_ACTIVATION_GELU ? attn_gelu_forward(h, g, n, ATTN_GELU_ERF)
                                                               : attn_relu_forward(h, g, n);
    if (!st) st = nn_dropout_fwd(g, n, L->cfg.dropout, a->training, a->seed, a->offset + (L->decoder ? 4 : 2));
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

static attn_status ffn_fwd(const char *fn, nn_layer *L, const attn_layer_args *a, const float *x, float *y,
                           const ffn_saved *s, float *g, float *f, void *ws, size_t wsb) {
    const int64_t R = a->batch * a->n, d = L->cfg.d_model, F = L->cfg.dim_feedforward;
    const int pre = L->cfg.norm_first, k = L->decoder ? 2 : 1;
    const uint64_t site = a->offset + (L->decoder ? 4 : 2);
    const float eps = L->cfg.layer_norm_eps;
    attn_status st;
    const float *in = x;
    if (pre) {
        if ((st = ln_fwd(fn, x, L->ng[k], L->nb[k], s->z, s->mean, s->rstd, R, d, eps))) return st;
        in = s->z;
    }
    if ((st = attn_nn_linear_fwd(fn, in, L->w1, L->b1, s->h, R, d, F, ws, wsb)) || (st = ffn_act(fn, L, a, s->h, g, R * F)) ||
        (st = attn_nn_linear_fwd(fn, g, L->w2, L->b2, f, R, F, d, ws, wsb)))
        return st;
    if ((st = nn_dropout_fwd(f, R * d, L->cfg.dropout, a->training, a->seed, site + 1))) return attn_nn_wrap_error(st, fn);
    if (pre) return add(fn, x, f, y, R * d);
    if ((st = add(fn, x, f, s->z, R * d))) return st;
    return ln_fwd(fn, s->z, L->ng[k], L->nb[k], y, s->mean, s->rstd, R, d, eps);
}

static attn_status ffn_bwd(const char *fn, nn_layer *L, const attn_layer_args *a, const float *x, const float *dy,
                           float *dx, const ffn_saved *s, float *t1, float *t2, float *g, float *dg, void *ws,
                           size_t wsb) {
    const int64_t R = a->batch * a->n, d = L->cfg.d_model, F = L->cfg.dim_feedforward;
    const size_t bytes = sizeof(float) * (size_t)(R * d);
    const int pre = L->cfg.norm_first, k = L->decoder ? 2 : 1;
    const uint64_t site = a->offset + (L->decoder ? 4 : 2);
    attn_status st;
    const float *top = dy;
    if (!pre) {
        if ((st = ln_bwd(fn, s->z, L->ng[k], s->mean, s->rstd, dy, t1, L->gng[k], L->gnb[k], R, d))) return st;
        top = t1;
    }
    memcpy(dx, top, bytes);
    memcpy(t2, top, bytes); /* df */
    if ((st = nn_dropout_bwd(t2, R * d, L->cfg.dropout, a->training, a->seed, site + 1))) return attn_nn_wrap_error(st, fn);
    if ((st = ffn_act(fn, L, a, s->h, g, R * F)) ||
        (st = attn_nn_linear_bwd(fn, g, L->w2, t2, dg, 0, L->gw2, L->gb2, R, F, d, ws, wsb)))
        return st;
    if ((st = nn_dropout_bwd(dg, R * F, L->cfg.dropout, a->training, a->seed, site))) return attn_nn_wrap_error(st, fn);
    st = L->cfg.activation == ATTN_ACTIVATION_GELU ? attn_gelu_backward(s->h, dg, dg, R * F, ATTN_GELU_ERF)
                                                   : attn_relu_backward(s->h, dg, dg, R * F);
    if (st) return attn_nn_wrap_error(st, fn);
    if (!pre) return attn_nn_linear_bwd(fn, x, L->w1, dg, dx, 1, L->gw1, L->gb1, R, d, F, ws, wsb);
    if ((st = attn_nn_linear_bwd(fn, s->z, L->w1, dg, t1, 0, L->gw1, L->gb1, R, d, F, ws, wsb)) ||
        (st = ln_bwd(fn, x, L->ng[k], s->mean, s->rstd, t1, t2, L->gng[k], L->gnb[k], R, d)))
        return st;
    return add(fn, dx, t2, dx, R * d);
}

/* ---- layer forward / backward ---- */

attn_status attn_nn_layer_fwd(const char *fn, nn_layer *L, const attn_layer_args *a, float *out, void *saved,
                         size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    nn_arena sv, ws;
    attn_status st;
    const size_t sneed = saved_layout(L, a, NULL, NULL);
    if ((saved && (st = attn_nn_arena_init(&sv, fn, "saved", saved, saved_bytes, sneed))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_nn_layer_ws_bytes(L, a))))
        return st;
    layer_saved s;
    saved_layout(L, a, saved ? &sv : &ws, &s); /* inference: the saved layout lives in the workspace */
    layer_tmp t;
    take_tmp(L, a, &ws, &t);
    size_t wsb;
    void *scr = nn_rest(&ws, &wsb);
    const float *x = a->x;
    for (int k = 0; k < (L->decoder ? 2 : 1); k++) {
        if ((st = att_fwd(fn, L, k, a, x, s.att[k].out, &s.att[k], t.t[0], scr, wsb))) return st;
        x = s.att[k].out;
    }
    return ffn_fwd(fn, L, a, x, out, &s.ffn, t.g, t.t[0], scr, wsb);
}

attn_status attn_nn_layer_bwd(const char *fn, nn_layer *L, const attn_layer_args *a, const float *dout, float *dx,
                         float *dmem, int acc_mem, const void *saved, size_t saved_bytes, void *workspace,
                         size_t workspace_bytes) {
    nn_arena sv, ws;
    attn_status st;
    if ((st = attn_nn_arena_init(&sv, fn, "saved", (void *)saved, saved_bytes, saved_layout(L, a, NULL, NULL))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_nn_layer_ws_bytes(L, a))))
        return st;
    layer_saved s;
    saved_layout(L, a, &sv, &s);
    layer_tmp t;
    take_tmp(L, a, &ws, &t);
    size_t wsb;
    void *scr = nn_rest(&ws, &wsb);
    /* gradients flow back through the sublayers; t[0] / t[1] carry them, t[2] / t[3] are scratch */
    const int na = L->decoder ? 2 : 1;
    const float *xin[3] = {a->x, s.att[0].out, L->decoder ? s.att[1].out : NULL};
    float *g = t.t[0];
    if ((st = ffn_bwd(fn, L, a, xin[na], dout, g, &s.ffn, t.t[2], t.t[3], t.g, t.dg, scr, wsb))) return st;
    for (int k = na - 1; k >= 0; k--) {
        float *next = k == 0 && dx ? dx : (g == t.t[0] ? t.t[1] : t.t[0]);
        if ((st = att_bwd(fn, L, k, a, xin[k], g, next, dmem, acc_mem, &s.att[k], t.t[2], t.t[3], scr, wsb)))
            return st;
        g = next;
    }
    return ATTN_OK;
}

/* ---- public encoder / decoder layers ---- */

struct attn_encoder_layer {
    nn_layer L;
};
struct attn_decoder_layer {
    nn_layer L;
};

attn_status attn_encoder_layer_create(const attn_layer_config *cfg, attn_encoder_layer **out) {
    static const char fn[] = "attn_encoder_layer_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    attn_encoder_layer *l = calloc(1, sizeof *l);
    if (!l) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status st = attn_nn_layer_init(&l->L, fn, cfg, 0, NULL);
    if (st) {
        free(l);
        return st;
    }
    *out = l;
    return ATTN_OK;
}

void attn_encoder_layer_free(attn_encoder_layer *l) {
    if (!l) return;
    attn_nn_layer_destroy(&l->L);
    free(l);
}

const attn_params *attn_encoder_layer_params(const attn_encoder_layer *l) { return l ? l->L.list : NULL; }

size_t attn_encoder_layer_saved_size(const attn_encoder_layer *l, const attn_layer_args *a) {
    return l ? attn_nn_layer_saved_bytes(&l->L, a) : 0;
}
size_t attn_encoder_layer_workspace_size(const attn_encoder_layer *l, const attn_layer_args *a) {
    return l ? attn_nn_layer_ws_bytes(&l->L, a) : 0;
}

attn_status attn_encoder_layer_forward(attn_encoder_layer *l, const attn_layer_args *a, float *out,
                                       void *saved, size_t saved_bytes, void *workspace,
                                       size_t workspace_bytes) {
    static const char fn[] = "attn_encoder_layer_forward";
    ATTN_CHECK_NOT_NULL(fn, l);
    attn_status st = attn_nn_layer_check_args(fn, &l->L, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, out);
    return attn_nn_layer_fwd(fn, &l->L, a, out, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_encoder_layer_backward(attn_encoder_layer *l, const attn_layer_args *a,
                                        const float *dout, float *dx, const void *saved,
                                        size_t saved_bytes, void *workspace,
                                        size_t workspace_bytes) {
    static const char fn[] = "attn_encoder_layer_backward";
    ATTN_CHECK_NOT_NULL(fn, l);
    attn_status st = attn_nn_layer_check_args(fn, &l->L, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, saved);
    return attn_nn_layer_bwd(fn, &l->L, a, dout, dx, NULL, 0, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_decoder_layer_create(const attn_layer_config *cfg, attn_decoder_layer **out) {
    static const char fn[] = "attn_decoder_layer_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    attn_decoder_layer *l = calloc(1, sizeof *l);
    if (!l) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status st = attn_nn_layer_init(&l->L, fn, cfg, 1, NULL);
    if (st) {
        free(l);
        return st;
    }
    *out = l;
    return ATTN_OK;
}

void attn_decoder_layer_free(attn_decoder_layer *l) {
    if (!l) return;
    attn_nn_layer_destroy(&l->L);
    free(l);
}

const attn_params *attn_decoder_layer_params(const attn_decoder_layer *l) { return l ? l->L.list : NULL; }

size_t attn_decoder_layer_saved_size(const attn_decoder_layer *l, const attn_layer_args *a) {
    return l ? attn_nn_layer_saved_bytes(&l->L, a) : 0;
}
size_t attn_decoder_layer_workspace_size(const attn_decoder_layer *l, const attn_layer_args *a) {
    return l ? attn_nn_layer_ws_bytes(&l->L, a) : 0;
}

attn_status attn_decoder_layer_forward(attn_decoder_layer *l, const attn_layer_args *a, float *out,
                                       void *saved, size_t saved_bytes, void *workspace,
                                       size_t workspace_bytes) {
    static const char fn[] = "attn_decoder_layer_forward";
    ATTN_CHECK_NOT_NULL(fn, l);
    attn_status st = attn_nn_layer_check_args(fn, &l->L, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, out);
    return attn_nn_layer_fwd(fn, &l->L, a, out, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_decoder_layer_backward(attn_decoder_layer *l, const attn_layer_args *a,
                                        const float *dout, float *dx, float *dmemory,
                                        const void *saved, size_t saved_bytes, void *workspace,
                                        size_t workspace_bytes) {
    static const char fn[] = "attn_decoder_layer_backward";
    ATTN_CHECK_NOT_NULL(fn, l);
    attn_status st = attn_nn_layer_check_args(fn, &l->L, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, saved);
    return attn_nn_layer_bwd(fn, &l->L, a, dout, dx, dmemory, 0, saved, saved_bytes, workspace, workspace_bytes);
}

/* ---- incremental decoding step (eval) ----
 * The sublayers of the forward above with the attention replaced by attn_mha_forward_step over
 * the caches (self: append + causal; cross: the memory's cache) and no dropout. Everything but
 * attention is row-wise, so the n new rows come out as in a full causal forward. */

size_t attn_nn_layer_step_ws(const nn_layer *L, int64_t B, int64_t n, int64_t length, int64_t n_memory) {
    const int64_t R = B * n, d = L->cfg.d_model, F = L->cfg.dim_feedforward;
    size_t s = nn_add(NN_SLACK, nn_add(nn_mul(4, nn_fblock(nn_mul((size_t)R, (size_t)d))),
                                       nn_fblock(nn_mul((size_t)R, (size_t)F))));
    size_t sub = nn_max(attn_nn_linear_ws(R, d, F), attn_nn_linear_ws(R, F, d));
    sub = nn_max(sub, attn_mha_step_workspace_size(L->sa, B, n, length));
    if (L->decoder) sub = nn_max(sub, attn_mha_step_workspace_size(L->ca, B, n, n_memory));
    return nn_add(s, sub);
}

attn_status attn_nn_layer_step(const char *fn, nn_layer *L, attn_kv_cache *self, attn_kv_cache *cross,
                          const uint8_t *memory_kpm, const float *x, int64_t B, int64_t n, float *out,
                          void *workspace, size_t workspace_bytes) {
    const int64_t R = B * n, d = L->cfg.d_model, F = L->cfg.dim_feedforward;
    const int pre = L->cfg.norm_first;
    const float eps = L->cfg.layer_norm_eps;
    nn_arena ws;
    attn_status st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                   attn_nn_layer_step_ws(L, B, n, self->length + n, cross ? cross->length : 1));
    if (st) return st;
    float *z = nn_takef(&ws, (size_t)(R * d)), *a = nn_takef(&ws, (size_t)(R * d));
    float *xs[2] = {nn_takef(&ws, (size_t)(R * d)), nn_takef(&ws, (size_t)(R * d))};
    float *h = nn_takef(&ws, (size_t)(R * F));
    size_t wsb;
    void *scr = nn_rest(&ws, &wsb);
    const float *in = x;
    for (int k = 0; k < (L->decoder ? 2 : 1); k++) {
        const float *q = in;
        if (pre) {
            if ((st = ln_fwd(fn, in, L->ng[k], L->nb[k], z, NULL, NULL, R, d, eps))) return st;
            q = z;
        }
        attn_mha_step_args sa = {B, n, q, k == 0, k == 0, k ? memory_kpm : NULL};
        if ((st = attn_mha_forward_step(k ? L->ca : L->sa, k ? cross : self, &sa, a, scr, wsb)))
            return attn_nn_wrap_error(st, fn);
        if (pre) {
            if ((st = add(fn, in, a, xs[k], R * d))) return st;
        } else if ((st = add(fn, in, a, z, R * d)) ||
                   (st = ln_fwd(fn, z, L->ng[k], L->nb[k], xs[k], NULL, NULL, R, d, eps))) {
            return st;
        }
        in = xs[k];
    }
    const int k = L->decoder ? 2 : 1;
    const float *src = in;
    if (pre) {
        if ((st = ln_fwd(fn, in, L->ng[k], L->nb[k], z, NULL, NULL, R, d, eps))) return st;
        src = z;
    }
    if ((st = attn_nn_linear_fwd(fn, src, L->w1, L->b1, h, R, d, F, scr, wsb))) return st;
    st = L->cfg.activation == ATTN_ACTIVATION_GELU ? attn_gelu_forward(h, h, R * F, ATTN_GELU_ERF)
                                                   : attn_relu_forward(h, h, R * F);
    if (st) return attn_nn_wrap_error(st, fn);
    if ((st = attn_nn_linear_fwd(fn, h, L->w2, L->b2, a, R, F, d, scr, wsb))) return st;
    if (pre) return add(fn, in, a, out, R * d);
    if ((st = add(fn, in, a, z, R * d))) return st;
    return ln_fwd(fn, z, L->ng[k], L->nb[k], out, NULL, NULL, R, d, eps);
}
