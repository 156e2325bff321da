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

#include "core/alloc.h"
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
    if (c->d_model < 1 || c->d_model > (1 << 24))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: d_model (%lld) must be in [1, 2^24]", fn,
                          (long long)c->d_model);
    if (c->nhead < 1 || c->nhead > c->d_model || c->d_model % c->nhead != 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: nhead (%lld) must be in [1, d_model (%lld)] and divide d_model", fn, (long long)c->nhead,
                          (long long)c->d_model);
    if (c->dim_feedforward < 1 || c->dim_feedforward > (1 << 24))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: dim_feedforward (%lld) must be in [1, 2^24]", fn,
                          (long long)c->dim_feedforward);
    if (!(c->dropout >= 0 && c->dropout <= 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: dropout must be in [0, 1] (got %g)", fn, (double)c->dropout);
    if (c->activation != ATTN_ACTIVATION_RELU && c->activation != ATTN_ACTIVATION_GELU &&
        c->activation != ATTN_ACTIVATION_GELU_TANH)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: activation %d is neither relu, gelu nor gelu_tanh", fn,
                          (int)c->activation);
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

/* ---- sublayers, their dropout sites and the saved layout ----
 * Sublayer j of a layer uses norm j: 0 self-attention, then (decoder) 1 cross-attention, then the
 * feed-forward. Its dropout sites: an inner one (the attention weights / the feed-forward's
 * hidden dropout) and its output dropout. */

static int ffn_sub(const nn_layer *L) { return L->decoder ? 2 : 1; } /* = the attention count */

typedef struct sub_sites {
    unsigned inner, out;
} sub_sites;

static const sub_sites layer_sites[2][3] = {
    {{NN_SITE_SELF_ATTN_WEIGHTS, NN_SITE_DROPOUT1}, {NN_SITE_ENC_FF_DROPOUT, NN_SITE_ENC_DROPOUT2}, {0, 0}},
    {{NN_SITE_SELF_ATTN_WEIGHTS, NN_SITE_DROPOUT1},
     {NN_SITE_CROSS_ATTN_WEIGHTS, NN_SITE_DEC_DROPOUT2},
     {NN_SITE_DEC_FF_DROPOUT, NN_SITE_DEC_DROPOUT3}},
};

static sub_sites sites_of(const nn_layer *L, int j) { return layer_sites[L->decoder ? 1 : 0][j]; }

/* Attention k's (0 self, 1 cross) arguments: its masks and its weights' dropout site (packed:
 * site k's block of batch streams, the varlen kernel adding the sequence). */
static attn_mha_args mha_args(const nn_layer *L, const attn_layer_args *a, int k, const float *q, const float *kv) {
    attn_mha_args m = attn_mha_args_default();
    m.batch = a->batch;
    m.nq = a->n;
    m.nk = k ? a->n_memory : a->n;
    m.query = q;
    m.key = m.value = kv;
    nn_mha_set_masks(&m, k ? &a->memory_masks : &a->self_masks);
    nn_mode md = NN_MODE_OF(a);
    md.offset += (uint64_t)sites_of(L, k).inner * attn_nn_layer_stream_unit(a);
    NN_MODE_SET(&m, md);
    if (a->cu_seqlens) {
        m.cu_seqlens_q = a->cu_seqlens;
        m.cu_seqlens_k = k ? a->cu_seqlens_memory : a->cu_seqlens;
    }
    return m;
}

/* What sublayer j keeps for the backward: z = its norm's input x + f(x) (post-norm) or output
 * LN(x) (pre-norm), and the norm's mean and rstd. */
typedef struct sub_saved {
    float *z, *mean, *rstd;
} sub_saved;

typedef struct layer_saved {
    sub_saved sub[3];
    void *mha[2]; /* the attentions' own saved blocks */
    size_t mha_bytes[2];
    float *out[2]; /* the attention sublayers' outputs */
    float *h;      /* the feed-forward's W1 z + b1 */
} layer_saved;

static size_t rows_of(const attn_layer_args *a) { return attn_nn_layer_rows(a, 0); }

size_t attn_nn_layer_rows(const attn_layer_args *a, int memory) {
    const int64_t n = memory ? a->n_memory : a->n;
    return a->cu_seqlens ? (size_t)n : nn_mul((size_t)a->batch, (size_t)n);
}

uint64_t attn_nn_layer_stream_unit(const attn_layer_args *a) { return a->cu_seqlens ? (uint64_t)a->batch : 1; }

/* Walk the saved layout: with ar == NULL only count bytes. Per attention: z, mean, rstd, its
 * block, its output; then the feed-forward's z, mean, rstd, h. */
static size_t saved_layout(const nn_layer *L, const attn_layer_args *a, nn_arena *ar, layer_saved *s) {
    const size_t R = rows_of(a), d = (size_t)L->cfg.d_model, F = (size_t)L->cfg.dim_feedforward;
    const size_t rd = nn_fblock(nn_mul(R, d)), r1 = nn_fblock(R);
    size_t total = NN_SLACK;
    for (int j = 0; j <= ffn_sub(L); j++) {
        const int att = j < ffn_sub(L);
        size_t mb = 0;
        if (att) {
            attn_mha_args m = mha_args(L, a, j, NULL, NULL);
            mb = attn_mha_saved_size(j ? L->ca : L->sa, &m);
        }
        total =
            nn_add(total, nn_add(nn_add(rd, nn_add(r1, r1)), att ? nn_add(rd, nn_block(mb)) : nn_fblock(nn_mul(R, F))));
        if (!ar) continue;
        sub_saved *t = &s->sub[j];
        t->z = nn_takef(ar, R * d);
        t->mean = nn_takef(ar, R);
        t->rstd = nn_takef(ar, R);
        if (att) {
            s->mha[j] = attn_nn_take(ar, mb);
            s->mha_bytes[j] = mb;
            s->out[j] = nn_takef(ar, R * d);
        } else {
            s->h = nn_takef(ar, R * F);
        }
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
    const int64_t R = (int64_t)rows_of(a), d = L->cfg.d_model, F = L->cfg.dim_feedforward;
    size_t s = nn_max(attn_nn_linear_ws(R, d, F), attn_nn_linear_ws(R, F, d));
    for (int k = 0; k < ffn_sub(L); k++) {
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

/* A packed call's cu [batch + 1]: 0 first, nondecreasing, total last. */
static attn_status check_cu(const char *fn, const char *name, const int64_t *cu, int64_t batch, int64_t total,
                            const char *total_name) {
    for (int64_t s = 0; s <= batch; s++) {
        const int64_t prev = s ? cu[s - 1] : 0;
        if ((s == 0 && cu[0] != 0) || cu[s] < prev || cu[s] > total || (s == batch && cu[s] != total))
            return attn_error(
                ATTN_ERR_SHAPE,
                "%s: %s[%lld] = %lld (previous %lld): want %s[0] = 0, nondecreasing, and %s[batch = %lld] "
                "= %s = %lld",
                fn, name, (long long)s, (long long)cu[s], (long long)prev, name, name, (long long)batch, total_name,
                (long long)total);
    }
    return ATTN_OK;
}

static attn_status check_packed(const char *fn, const nn_layer *L, const attn_layer_args *a) {
    if (!a->cu_seqlens)
        return a->cu_seqlens_memory ? attn_error(ATTN_ERR_INVALID_ARGUMENT,
                                                 "%s: cu_seqlens_memory is set but cu_seqlens is NULL (packed memory "
                                                 "needs a packed x)",
                                                 fn)
                                    : ATTN_OK;
    attn_status st = check_cu(fn, "cu_seqlens", a->cu_seqlens, a->batch, a->n, "n");
    if (st || !L->decoder) return st;
    if (!a->cu_seqlens_memory)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: a packed decoder call (cu_seqlens set) needs cu_seqlens_memory [batch + 1] for memory",
                          fn);
    return check_cu(fn, "cu_seqlens_memory", a->cu_seqlens_memory, a->batch, a->n_memory, "n_memory");
}

attn_status attn_nn_layer_check_args(const char *fn, const nn_layer *L, const attn_layer_args *a) {
    ATTN_CHECK_NOT_NULL(fn, L);
    ATTN_CHECK_NOT_NULL(fn, a);
    if (a->batch < 1 || a->n < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch (%lld) and n (%lld) must be >= 1", fn,
                          (long long)a->batch, (long long)a->n);
    if (!a->x) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: x (the [B, n, d_model] input) is NULL", fn);
    if (L->decoder && (!a->memory || a->n_memory < 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: a decoder needs memory [B, n_memory >= 1, d_model] (memory %p, n_memory %lld)", fn,
                          (const void *)a->memory, (long long)a->n_memory);
    const size_t big = (size_t)1 << 40;
    if (nn_mul(rows_of(a),
               (size_t)(L->cfg.dim_feedforward > L->cfg.d_model ? L->cfg.dim_feedforward : L->cfg.d_model)) > big ||
        (L->decoder && nn_mul(attn_nn_layer_rows(a, 1), (size_t)L->cfg.d_model) > big))
        return attn_error(ATTN_ERR_OVERFLOW, "%s: shapes too large (batch %lld, n %lld, n_memory %lld)", fn,
                          (long long)a->batch, (long long)a->n, (long long)a->n_memory);
    return check_packed(fn, L, a);
}

/* ---- one call of a layer, as its sublayers see it ---- */

typedef struct layer_call {
    const char *fn;
    nn_layer *L;
    const attn_layer_args *a; /* NULL in an incremental step */
    nn_mode md;               /* the layer's dropout streams (off in a step) */
    const int64_t *cu;        /* packed: the sequences' rows (dropout per sequence), else NULL */
    int64_t nseq;
    int64_t R, d, F; /* rows B * n, d_model, dim_feedforward */
    void *ws;        /* the sub-calls' workspace: the arena's rest */
    size_t wsb;
} layer_call;

static layer_call call_of(const char *fn, nn_layer *L, const attn_layer_args *a, int64_t R, const nn_arena *ws) {
    layer_call c;
    c.fn = fn;
    c.L = L;
    c.a = a;
    c.md = a ? NN_MODE_OF(a) : (nn_mode){0, 0, 0};
    c.cu = a ? a->cu_seqlens : NULL;
    c.nseq = a ? a->batch : 0;
    c.R = R;
    c.d = L->cfg.d_model;
    c.F = L->cfg.dim_feedforward;
    c.ws = nn_rest(ws, &c.wsb);
    return c;
}

/* Dropout at `site` on rows of `width` floats: one stream over all rows, or (packed) sequence s's
 * rows from stream offset + batch site + s, as its batch-1 call would draw them there. */
static attn_status site_dropout(const layer_call *c, float *x, int64_t width, unsigned site, int bwd) {
    const float p = c->L->cfg.dropout;
    attn_status st = ATTN_OK;
    if (!c->cu) {
        st = bwd ? nn_site_dropout_bwd(x, c->R * width, p, c->md, site)
                 : nn_site_dropout_fwd(x, c->R * width, p, c->md, site);
    } else {
        const uint64_t base = c->md.offset + (uint64_t)site * (uint64_t)c->nseq;
        for (int64_t s = 0; s < c->nseq && !st; s++) {
            float *xs = x + c->cu[s] * width;
            const int64_t n = (c->cu[s + 1] - c->cu[s]) * width;
            if (n < 1) continue;
            st = bwd ? nn_dropout_bwd(xs, n, p, c->md.training, c->md.seed, base + (uint64_t)s)
                     : nn_dropout_fwd(xs, n, p, c->md.training, c->md.seed, base + (uint64_t)s);
        }
    }
    return st ? attn_nn_wrap_error(st, c->fn) : ATTN_OK;
}

static attn_status add(const char *fn, const float *a, const float *b, float *y, int64_t n) {
    attn_status st = attn_residual_add(a, b, y, n);
    return st ? attn_nn_wrap_error(st, fn) : ATTN_OK;
}

/* norm j: x -> y (mean / rstd nullable) and its backward dy -> dx, accumulating its gradients. */
static attn_status norm_fwd(const layer_call *c, int j, const float *x, float *y, const sub_saved *s) {
    const nn_layer *L = c->L;
    attn_status st =
        attn_layernorm_forward(x, L->ng[j], L->nb[j], y, s->mean, s->rstd, c->R, c->d, L->cfg.layer_norm_eps);
    return st ? attn_nn_wrap_error(st, c->fn) : ATTN_OK;
}

static attn_status norm_bwd(const layer_call *c, int j, const float *x, const sub_saved *s, const float *dy,
                            float *dx) {
    nn_layer *L = c->L;
    attn_status st = attn_layernorm_backward(x, L->ng[j], s->mean, s->rstd, dy, dx, L->gng[j], L->gnb[j], c->R, c->d);
    return st ? attn_nn_wrap_error(st, c->fn) : ATTN_OK;
}

/* ---- the residual wiring of sublayer j around its branch f ----
 *   pre-norm   y = x + dropout(f(LN_j(x)))          post-norm   y = LN_j(x + dropout(f(x)))
 * Forward: sub_enter gives f's input, f writes its output, sub_leave applies the output dropout,
 * the residual and (post-norm) the norm. Backward: sub_back_enter writes dx = the gradient through
 * the residual and t2 = df, the gradient at f's output, and says where f's backward puts its
 * input's gradient (*din, accumulated when *acc); sub_back_leave takes that (pre-norm: t1) back
 * through the norm into dx. t1, t2: [R, d] scratch. */

static const float *sub_input(const layer_call *c, const float *x, const sub_saved *s) {
    return c->L->cfg.norm_first ? s->z : x;
}

static attn_status sub_enter(const layer_call *c, int j, const float *x, const sub_saved *s, const float **in) {
    *in = sub_input(c, x, s);
    return c->L->cfg.norm_first ? norm_fwd(c, j, x, s->z, s) : ATTN_OK;
}

static attn_status sub_leave(const layer_call *c, int j, const float *x, float *f, float *y, const sub_saved *s) {
    const int64_t n = c->R * c->d;
    attn_status st = site_dropout(c, f, c->d, sites_of(c->L, j).out, 0);
    if (st) return st;
    if (c->L->cfg.norm_first) return add(c->fn, x, f, y, n);
    if ((st = add(c->fn, x, f, s->z, n))) return st;
    return norm_fwd(c, j, s->z, y, s);
}

static attn_status sub_back_enter(const layer_call *c, int j, const float *dy, float *dx, const sub_saved *s, float *t1,
                                  float *t2, float **din, int *acc) {
    const int pre = c->L->cfg.norm_first;
    const size_t bytes = sizeof(float) * (size_t)(c->R * c->d);
    attn_status st;
    const float *top = dy;
    if (!pre) {
        if ((st = norm_bwd(c, j, s->z, s, dy, t1))) return st;
        top = t1;
    }
    memcpy(dx, top, bytes);
    memcpy(t2, top, bytes);
    if ((st = site_dropout(c, t2, c->d, sites_of(c->L, j).out, 1))) return st;
    *din = pre ? t1 : dx;
    *acc = !pre;
    return ATTN_OK;
}

static attn_status sub_back_leave(const layer_call *c, int j, const float *x, float *dx, const sub_saved *s,
                                  const float *t1, float *t2) {
    attn_status st;
    if (!c->L->cfg.norm_first) return ATTN_OK;
    if ((st = norm_bwd(c, j, x, s, t1, t2))) return st;
    return add(c->fn, dx, t2, dx, c->R * c->d);
}

/* ---- attention sublayers: k = 0 self, 1 cross ---- */

/* x -> y, the branch's output in f ([R, d] scratch). */
static attn_status att_fwd(const layer_call *c, int k, const float *x, float *y, const layer_saved *s, float *f) {
    const attn_layer_args *a = c->a;
    const float *q;
    attn_status st = sub_enter(c, k, x, &s->sub[k], &q);
    if (st) return st;
    attn_mha_args m = mha_args(c->L, a, k, q, k ? a->memory : q);
    m.capture = a->capture; /* the forward alone records weights */
    const size_t mark = attn_nn_capture_push(a->capture, "%s", k ? "multihead_attn" : "self_attn");
    st = attn_mha_forward(k ? c->L->ca : c->L->sa, &m, f, NULL, s->mha[k], s->mha_bytes[k], c->ws, c->wsb);
    attn_nn_capture_pop(a->capture, mark);
    if (st) return attn_nn_wrap_error(st, c->fn);
    return sub_leave(c, k, x, f, y, &s->sub[k]);
}

/* dy -> dx (written); dmem written or accumulated (acc_mem) by the cross-attention. */
static attn_status att_bwd(const layer_call *c, int k, const float *x, const float *dy, float *dx, float *dmem,
                           int acc_mem, const layer_saved *s, float *t1, float *t2) {
    const sub_saved *ss = &s->sub[k];
    float *din;
    int acc;
    attn_status st = sub_back_enter(c, k, dy, dx, ss, t1, t2, &din, &acc);
    if (st) return st;
    const float *q = sub_input(c, x, ss);
    attn_mha_args m = mha_args(c->L, c->a, k, q, k ? c->a->memory : q);
    /* dq (and, for self-attention, dk / dv) into din; the cross-attention's dk / dv into dmem */
    st = k ? attn_nn_mha_backward(c->L->ca, &m, t2, din, dmem, dmem, acc, acc_mem, s->mha[k], s->mha_bytes[k], c->ws,
                                  c->wsb)
           : attn_nn_mha_backward(c->L->sa, &m, t2, din, din, din, acc, acc, s->mha[k], s->mha_bytes[k], c->ws, c->wsb);
    if (st) return attn_nn_wrap_error(st, c->fn);
    return sub_back_leave(c, k, x, dx, ss, t1, t2);
}

/* ---- the feed-forward sublayer: f(z) = W2 dropout(act(W1 z + b1)) + b2 ---- */

/* The activation (relu, gelu in its exact erf form, or gelu's tanh approximation): g = act(h),
 * and dg <- act'(h) dg. */
static attn_status act_fwd(const layer_call *c, const float *h, float *g, int64_t n) {
    attn_activation a = c->L->cfg.activation;
    attn_status st = a == ATTN_ACTIVATION_RELU
                         ? attn_relu_forward(h, g, n)
                         : attn_gelu_forward(h, g, n, a == ATTN_ACTIVATION_GELU_TANH ? ATTN_GELU_TANH : ATTN_GELU_ERF);
    return st ? attn_nn_wrap_error(st, c->fn) : ATTN_OK;
}

static attn_status act_bwd(const layer_call *c, const float *h, float *dg, int64_t n) {
    attn_activation a = c->L->cfg.activation;
    attn_status st =
        a == ATTN_ACTIVATION_RELU
            ? attn_relu_backward(h, dg, dg, n)
            : attn_gelu_backward(h, dg, dg, n, a == ATTN_ACTIVATION_GELU_TANH ? ATTN_GELU_TANH : ATTN_GELU_ERF);
    return st ? attn_nn_wrap_error(st, c->fn) : ATTN_OK;
}

/* g = dropout(act(h)) at the feed-forward's inner site. */
static attn_status ffn_act(const layer_call *c, const float *h, float *g) {
    const int64_t n = c->R * c->F;
    attn_status st = act_fwd(c, h, g, n);
    if (!st) st = site_dropout(c, g, c->F, sites_of(c->L, ffn_sub(c->L)).inner, 0);
    return st;
}

/* The branch: in -> h = W1 in + b1, g = dropout(act(h)) (g may be h), f = W2 g + b2. */
static attn_status ffn_branch(const layer_call *c, const float *in, float *h, float *g, float *f) {
    const nn_layer *L = c->L;
    attn_status st;
    if ((st = attn_nn_linear_fwd(c->fn, in, L->w1, L->b1, h, c->R, c->d, c->F, c->ws, c->wsb)) ||
        (st = ffn_act(c, h, g)))
        return st;
    return attn_nn_linear_fwd(c->fn, g, L->w2, L->b2, f, c->R, c->F, c->d, c->ws, c->wsb);
}

static attn_status ffn_fwd(const layer_call *c, const float *x, float *y, const layer_saved *s, float *g, float *f) {
    const int j = ffn_sub(c->L);
    const float *in;
    attn_status st;
    if ((st = sub_enter(c, j, x, &s->sub[j], &in)) || (st = ffn_branch(c, in, s->h, g, f))) return st;
    return sub_leave(c, j, x, f, y, &s->sub[j]);
}

/* dg = the W2-product of df, dh = act'(h) dropout'(dg), dz = dh W1; dW2 += df^T g, dW1 += dh^T z,
 * with g = dropout(act(h)) recomputed. */
static attn_status ffn_bwd(const layer_call *c, const float *x, const float *dy, float *dx, const layer_saved *s,
                           float *t1, float *t2, float *g, float *dg) {
    nn_layer *L = c->L;
    const int j = ffn_sub(L);
    const int64_t R = c->R, d = c->d, F = c->F;
    const sub_saved *ss = &s->sub[j];
    float *din;
    int acc;
    attn_status st;
    if ((st = sub_back_enter(c, j, dy, dx, ss, t1, t2, &din, &acc)) || (st = ffn_act(c, s->h, g)) ||
        (st = attn_nn_linear_bwd(c->fn, g, L->w2, t2, dg, 0, L->gw2, L->gb2, R, F, d, c->ws, c->wsb)))
        return st;
    if ((st = site_dropout(c, dg, F, sites_of(L, j).inner, 1))) return st;
    if ((st = act_bwd(c, s->h, dg, R * F)) || (st = attn_nn_linear_bwd(c->fn, sub_input(c, x, ss), L->w1, dg, din, acc,
                                                                       L->gw1, L->gb1, R, d, F, c->ws, c->wsb)))
        return st;
    return sub_back_leave(c, j, x, dx, ss, t1, t2);
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
    const layer_call c = call_of(fn, L, a, (int64_t)rows_of(a), &ws);
    const float *x = a->x;
    for (int k = 0; k < ffn_sub(L); k++) {
        if ((st = att_fwd(&c, k, x, s.out[k], &s, t.t[0]))) return st;
        x = s.out[k];
    }
    return ffn_fwd(&c, x, out, &s, t.g, t.t[0]);
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
    const layer_call c = call_of(fn, L, a, (int64_t)rows_of(a), &ws);
    /* gradients flow back through the sublayers; t[0] / t[1] carry them, t[2] / t[3] are scratch */
    const int na = ffn_sub(L);
    const float *xin[3] = {a->x, s.out[0], L->decoder ? s.out[1] : NULL};
    float *g = t.t[0];
    if ((st = ffn_bwd(&c, xin[na], dout, g, &s, t.t[2], t.t[3], t.g, t.dg))) return st;
    for (int k = na - 1; k >= 0; k--) {
        float *next = k == 0 && dx ? dx : (g == t.t[0] ? t.t[1] : t.t[0]);
        if ((st = att_bwd(&c, k, xin[k], g, next, dmem, acc_mem, &s, t.t[2], t.t[3]))) return st;
        g = next;
    }
    return ATTN_OK;
}

/* ---- public encoder / decoder layers: thin shims over nn_layer (decoder 0 / 1) ---- */

struct attn_encoder_layer {
    nn_layer L;
};
struct attn_decoder_layer {
    nn_layer L;
};

/* A zeroed public layer of `size` bytes whose first member is its nn_layer, initialised. */
static void *layer_new(const char *fn, const attn_layer_config *cfg, int decoder, size_t size, attn_status *st) {
    nn_layer *L = attn__calloc(1, size);
    if (!L) {
        *st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        return NULL;
    }
    if ((*st = attn_nn_layer_init(L, fn, cfg, decoder, NULL))) {
        attn__free(L);
        return NULL;
    }
    return L;
}

static void layer_free(nn_layer *L) {
    attn_nn_layer_destroy(L);
    attn__free(L);
}

static attn_status layer_forward(const char *fn, nn_layer *L, const attn_layer_args *a, float *out, void *saved,
                                 size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    attn_status st = attn_nn_layer_check_args(fn, L, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, out);
    return attn_nn_layer_fwd(fn, L, a, out, saved, saved_bytes, workspace, workspace_bytes);
}

static attn_status layer_backward(const char *fn, nn_layer *L, const attn_layer_args *a, const float *dout, float *dx,
                                  float *dmemory, const void *saved, size_t saved_bytes, void *workspace,
                                  size_t workspace_bytes) {
    attn_status st = attn_nn_layer_check_args(fn, L, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, saved);
    return attn_nn_layer_bwd(fn, L, a, dout, dx, dmemory, 0, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_encoder_layer_create(const attn_layer_config *cfg, attn_encoder_layer **out) {
    static const char fn[] = "attn_encoder_layer_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    attn_status st;
    *out = layer_new(fn, cfg, 0, sizeof **out, &st);
    return st;
}

void attn_encoder_layer_free(attn_encoder_layer *l) {
    if (l) layer_free(&l->L);
}

const attn_params *attn_encoder_layer_params(const attn_encoder_layer *l) { return l ? l->L.list : NULL; }

size_t attn_encoder_layer_saved_size(const attn_encoder_layer *l, const attn_layer_args *a) {
    return l ? attn_nn_layer_saved_bytes(&l->L, a) : 0;
}
size_t attn_encoder_layer_workspace_size(const attn_encoder_layer *l, const attn_layer_args *a) {
    return l ? attn_nn_layer_ws_bytes(&l->L, a) : 0;
}

attn_status attn_encoder_layer_forward(attn_encoder_layer *l, const attn_layer_args *a, float *out, void *saved,
                                       size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_encoder_layer_forward";
    ATTN_CHECK_NOT_NULL(fn, l);
    return layer_forward(fn, &l->L, a, out, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_encoder_layer_backward(attn_encoder_layer *l, const attn_layer_args *a, const float *dout, float *dx,
                                        const void *saved, size_t saved_bytes, void *workspace,
                                        size_t workspace_bytes) {
    static const char fn[] = "attn_encoder_layer_backward";
    ATTN_CHECK_NOT_NULL(fn, l);
    return layer_backward(fn, &l->L, a, dout, dx, NULL, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_decoder_layer_create(const attn_layer_config *cfg, attn_decoder_layer **out) {
    static const char fn[] = "attn_decoder_layer_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    attn_status st;
    *out = layer_new(fn, cfg, 1, sizeof **out, &st);
    return st;
}

void attn_decoder_layer_free(attn_decoder_layer *l) {
    if (l) layer_free(&l->L);
}

const attn_params *attn_decoder_layer_params(const attn_decoder_layer *l) { return l ? l->L.list : NULL; }

size_t attn_decoder_layer_saved_size(const attn_decoder_layer *l, const attn_layer_args *a) {
    return l ? attn_nn_layer_saved_bytes(&l->L, a) : 0;
}
size_t attn_decoder_layer_workspace_size(const attn_decoder_layer *l, const attn_layer_args *a) {
    return l ? attn_nn_layer_ws_bytes(&l->L, a) : 0;
}

attn_status attn_decoder_layer_forward(attn_decoder_layer *l, const attn_layer_args *a, float *out, void *saved,
                                       size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_decoder_layer_forward";
    ATTN_CHECK_NOT_NULL(fn, l);
    return layer_forward(fn, &l->L, a, out, saved, saved_bytes, workspace, workspace_bytes);
}

attn_status attn_decoder_layer_backward(attn_decoder_layer *l, const attn_layer_args *a, const float *dout, float *dx,
                                        float *dmemory, const void *saved, size_t saved_bytes, void *workspace,
                                        size_t workspace_bytes) {
    static const char fn[] = "attn_decoder_layer_backward";
    ATTN_CHECK_NOT_NULL(fn, l);
    return layer_backward(fn, &l->L, a, dout, dx, dmemory, saved, saved_bytes, workspace, workspace_bytes);
}

/* ---- incremental decoding step (eval) ----
 * The sublayers of the forward above with the attention replaced by attn_mha_forward_step over
 * the caches (self: append + causal; cross: the memory's cache) and no dropout. Everything but
 * attention is row-wise, so the n new rows come out as in a full causal forward. */

size_t attn_nn_layer_step_ws(const nn_layer *L, int64_t B, int64_t n, int64_t length, int64_t n_memory) {
    const int64_t R = B * n, d = L->cfg.d_model, F = L->cfg.dim_feedforward;
    size_t s = nn_add(
        NN_SLACK, nn_add(nn_mul(4, nn_fblock(nn_mul((size_t)R, (size_t)d))), nn_fblock(nn_mul((size_t)R, (size_t)F))));
    size_t sub = nn_max(attn_nn_linear_ws(R, d, F), attn_nn_linear_ws(R, F, d));
    sub = nn_max(sub, attn_mha_step_workspace_size(L->sa, B, n, length));
    if (L->decoder) sub = nn_max(sub, attn_mha_step_workspace_size(L->ca, B, n, n_memory));
    return nn_add(s, sub);
}

attn_status attn_nn_layer_step(const char *fn, nn_layer *L, attn_kv_cache *self, attn_kv_cache *cross,
                               const uint8_t *memory_kpm, const float *x, int64_t B, int64_t n, float *out,
                               void *workspace, size_t workspace_bytes) {
    const int64_t R = B * n, d = L->cfg.d_model, F = L->cfg.dim_feedforward;
    nn_arena ws;
    attn_status st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                        attn_nn_layer_step_ws(L, B, n, self->length + n, cross ? cross->length : 1));
    if (st) return st;
    /* z: every sublayer's norm input / output (no mean / rstd kept) */
    const sub_saved z = {nn_takef(&ws, (size_t)(R * d)), NULL, NULL};
    float *a = nn_takef(&ws, (size_t)(R * d));
    float *xs[2] = {nn_takef(&ws, (size_t)(R * d)), nn_takef(&ws, (size_t)(R * d))};
    float *h = nn_takef(&ws, (size_t)(R * F));
    const layer_call c = call_of(fn, L, NULL, B * n, &ws); /* mode off: no dropout */
    const float *in = x, *q;
    for (int k = 0; k < ffn_sub(L); k++) {
        if ((st = sub_enter(&c, k, in, &z, &q))) return st;
        attn_mha_step_args sa = {B, n, q, k == 0, k == 0, k ? memory_kpm : NULL};
        if ((st = attn_mha_forward_step(k ? L->ca : L->sa, k ? cross : self, &sa, a, c.ws, c.wsb)))
            return attn_nn_wrap_error(st, fn);
        if ((st = sub_leave(&c, k, in, a, xs[k], &z))) return st;
        in = xs[k];
    }
    const int j = ffn_sub(L);
    if ((st = sub_enter(&c, j, in, &z, &q)) || (st = ffn_branch(&c, q, h, h, a))) return st;
    return sub_leave(&c, j, in, a, out, &z);
}
