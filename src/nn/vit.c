/* Vision Transformer (torchvision.models.VisionTransformer; DeiT's distillation token as timm's
 * VisionTransformerDistilled):
 *
 *   cols = im2col(images)                 [B Np, C p p], column c p p + ky p + kx (the conv weight's
 *                                         flattening), patch i = gy gw + gx: non-overlapping patches
 *   P = cols Wc^T + bc                    [B Np, D], conv_proj as one GEMM (attn_nn_linear_fwd)
 *   x_0[b] = [cls, (dist,) P[b]] + pos    [B, T + Np, D]   (dropout in training)
 *   h = norm(layers(x_0))                 the encoder stack (pre-norm, GELU), final LayerNorm
 *   y = h[:, 0] Wh^T + bh                 (distilled: y_d = h[:, 1] Wd^T + bd; (y + y_d) / 2)
 * Backward:
 *   dh[:, 0] = dy Wh (dh 0 elsewhere), dWh += dy^T h[:, 0], ...;  dx_0 = layers'^T norm'^T dh
 *   dpos += sum_b dx_0[b],  dcls += sum_b dx_0[b, 0],  dP = dx_0[:, T:]
 *   dWc += dP^T cols,  dbc += colsum dP,  dimages = col2im(dP Wc)
 * cols are recomputed from the images in the backward (the backward takes the forward's args). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nn_layer.h"

struct attn_vit {
    attn_vit_config cfg;
    int64_t gh, gw, np, T, kc; /* grid, patches, prefix tokens, C p p */
    nn_stack S;
    nn_store emb, head;
    float *wc, *bc, *cls, *dist, *pos, *gwc, *gbc, *gcls, *gdist, *gpos;
    float *wh, *bh, *wd, *bd, *gwh, *gbh, *gwd, *gbd;
    attn_params *list;
};

attn_vit_config attn_vit_config_default(int64_t image_size, int64_t patch_size, int64_t num_layers, int64_t num_heads,
                                        int64_t hidden_dim, int64_t mlp_dim, int64_t num_classes) {
    attn_vit_config c;
    memset(&c, 0, sizeof c);
    c.image_h = c.image_w = image_size;
    c.patch_size = patch_size;
    c.in_channels = 3;
    c.num_layers = num_layers;
    c.num_heads = num_heads;
    c.hidden_dim = hidden_dim;
    c.mlp_dim = mlp_dim;
    c.num_classes = num_classes;
    c.dropout = 0.0f;
    c.layer_norm_eps = 1e-6f;
    return c;
}

void attn_vit_free(attn_vit *v) {
    if (!v) return;
    attn_nn_stack_destroy(&v->S);
    attn_nn_store_free(&v->emb);
    attn_nn_store_free(&v->head);
    attn_nn_params_free(v->list);
    attn__free(v);
}

#define VIT_MAX_DIM ((int64_t)1 << 24)

static attn_status check_config(const char *fn, const attn_vit_config *c) {
    const int64_t *f[] = {&c->image_h,   &c->image_w,    &c->patch_size, &c->in_channels, &c->num_layers,
                          &c->num_heads, &c->hidden_dim, &c->mlp_dim,    &c->num_classes};
    static const char *names[] = {"image_h",   "image_w",    "patch_size", "in_channels", "num_layers",
                                  "num_heads", "hidden_dim", "mlp_dim",    "num_classes"};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (*f[i] < 1 || *f[i] > VIT_MAX_DIM)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %s = %lld must be in [1, %lld]", fn, names[i],
                              (long long)*f[i], (long long)VIT_MAX_DIM);
    if (c->image_h % c->patch_size || c->image_w % c->patch_size)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: the image (%lld x %lld) must be divisible by patch_size = %lld", fn,
                          (long long)c->image_h, (long long)c->image_w, (long long)c->patch_size);
    if (c->hidden_dim % c->num_heads)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: hidden_dim = %lld is not divisible by num_heads = %lld", fn,
                          (long long)c->hidden_dim, (long long)c->num_heads);
    const int64_t np = (c->image_h / c->patch_size) * (c->image_w / c->patch_size);
    if (np > VIT_MAX_DIM || c->in_channels * c->patch_size * c->patch_size > VIT_MAX_DIM)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %lld patches of %lld values are too many", fn, (long long)np,
                          (long long)(c->in_channels * c->patch_size * c->patch_size));
    if (!(c->dropout >= 0.0f && c->dropout <= 1.0f))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: dropout = %g must be in [0, 1]", fn, (double)c->dropout);
    if (!attn_precision_name(c->precision))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: precision = %d is neither fp32 nor bf16", fn,
                          (int)c->precision);
    if (!(c->layer_norm_eps > 0.0f))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: layer_norm_eps = %g must be > 0", fn,
                          (double)c->layer_norm_eps);
    return ATTN_OK;
}

attn_status attn_vit_create(const attn_vit_config *cfg, attn_vit **out) {
    static const char fn[] = "attn_vit_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, cfg);
    attn_status st = check_config(fn, cfg);
    if (st) return st;
    attn_vit *v = attn__calloc(1, sizeof *v);
    if (!v) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    v->cfg = *cfg;
    v->cfg.distilled = cfg->distilled ? 1 : 0;
    const int64_t D = cfg->hidden_dim, p = cfg->patch_size, C = cfg->in_channels, K = cfg->num_classes;
    v->gh = cfg->image_h / p;
    v->gw = cfg->image_w / p;
    v->np = v->gh * v->gw;
    v->T = 1 + v->cfg.distilled;
    v->kc = C * p * p;
    attn_stack_config sc = attn_stack_config_default(D, cfg->num_heads, cfg->num_layers);
    sc.layer.dim_feedforward = cfg->mlp_dim;
    sc.layer.dropout = cfg->dropout;
    sc.layer.activation = ATTN_ACTIVATION_GELU;
    sc.layer.layer_norm_eps = cfg->layer_norm_eps;
    sc.layer.norm_first = 1;
    sc.norm = 1;
    sc.norm_eps = cfg->layer_norm_eps;
    if ((st = attn_nn_stack_init(&v->S, fn, &sc, 0, NULL))) {
        attn_vit_free(v);
        return st;
    }
    nn_pdesc e[5];
    float *p_[5], *g_[5];
    int ne = 0;
    e[ne++] = (nn_pdesc){"class_token", 3, {1, 1, D, 0}, NN_INIT_ZEROS, 0, 0};
    if (v->cfg.distilled) e[ne++] = (nn_pdesc){"dist_token", 3, {1, 1, D, 0}, NN_INIT_ZEROS, 0, 0};
    e[ne++] = (nn_pdesc){"conv_proj.weight", 4, {D, C, p, p}, NN_INIT_NORMAL, sqrt(1.0 / (double)v->kc), 0};
    e[ne++] = (nn_pdesc){"conv_proj.bias", 1, {D, 0, 0, 0}, NN_INIT_ZEROS, 0, 0};
    e[ne++] = (nn_pdesc){"pos_embedding", 3, {1, v->T + v->np, D, 0}, NN_INIT_NORMAL, 0.02, 0};
    nn_pdesc h[4] = {{"head.weight", 2, {K, D, 0, 0}, NN_INIT_ZEROS, 0, 0},
                     {"head.bias", 1, {K, 0, 0, 0}, NN_INIT_ZEROS, 0, 0},
                     {"head_dist.weight", 2, {K, D, 0, 0}, NN_INIT_ZEROS, 0, 0},
                     {"head_dist.bias", 1, {K, 0, 0, 0}, NN_INIT_ZEROS, 0, 0}};
    float *hp[4] = {0}, *hg[4] = {0};
    v->list = attn_nn_params_new();
    if (!v->list) st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (!st) st = attn_nn_store_create(&v->emb, fn, e, ne, p_, g_);
    if (!st) st = attn_nn_store_create(&v->head, fn, h, 2 * (int)v->T, hp, hg);
    if (!st) st = attn_nn_params_append(v->list, fn, v->emb.list, NULL);
    if (!st) st = attn_nn_params_append(v->list, fn, v->S.list, NULL);
    if (!st) st = attn_nn_params_append(v->list, fn, v->head.list, NULL);
    if (st) {
        attn_vit_free(v);
        return st;
    }
    int i = 0;
    v->cls = p_[i], v->gcls = g_[i++];
    if (v->cfg.distilled) v->dist = p_[i], v->gdist = g_[i++];
    v->wc = p_[i], v->gwc = g_[i++];
    v->bc = p_[i], v->gbc = g_[i++];
    v->pos = p_[i], v->gpos = g_[i++];
    v->wh = hp[0], v->bh = hp[1], v->wd = hp[2], v->bd = hp[3];
    v->gwh = hg[0], v->gbh = hg[1], v->gwd = hg[2], v->gbd = hg[3];
    *out = v;
    return ATTN_OK;
}

const attn_params *attn_vit_params(const attn_vit *v) { return v ? v->list : NULL; }
const attn_vit_config *attn_vit_get_config(const attn_vit *v) { return v ? &v->cfg : NULL; }
int64_t attn_vit_tokens(const attn_vit *v) { return v ? v->T + v->np : 0; }

/* ---- sizes ---- */

static int args_ok(const attn_vit *v, const attn_vit_args *a) {
    return v && a && a->batch >= 1 && a->batch <= ((int64_t)1 << 24);
}

static attn_layer_args layer_args(const attn_vit *v, const attn_vit_args *a, const float *x) {
    attn_layer_args la = attn_layer_args_default();
    la.batch = a->batch;
    la.n = v->T + v->np;
    la.x = x;
    NN_MODE_SET(&la, NN_MODE_OF(a));
    la.capture = a->capture;
    return la;
}

static size_t bnd(const attn_vit *v, const attn_vit_args *a) {
    return nn_fblock(nn_mul(nn_mul((size_t)a->batch, (size_t)(v->T + v->np)), (size_t)v->cfg.hidden_dim));
}

size_t attn_vit_saved_size(const attn_vit *v, const attn_vit_args *a) {
    if (!args_ok(v, a)) return 0;
    attn_layer_args la = layer_args(v, a, NULL);
    const size_t hc = nn_fblock(nn_mul(nn_mul((size_t)a->batch, (size_t)v->T), (size_t)v->cfg.hidden_dim));
    return nn_add(nn_add(NN_SLACK, nn_add(bnd(v, a), hc)), nn_block(attn_nn_stack_saved(&v->S, &la)));
}

/* The size in the model's precision: bf16 products need room for their rounded operands. */
static size_t workspace_size(const attn_vit *v, const attn_vit_args *a) {
    if (!args_ok(v, a)) return 0;
    attn_layer_args la = layer_args(v, a, NULL);
    const int64_t B = a->batch, D = v->cfg.hidden_dim, K = v->cfg.num_classes;
    const size_t cols = nn_fblock(nn_mul(nn_mul((size_t)B, (size_t)v->np), (size_t)v->kc));
    const size_t pt = nn_fblock(nn_mul(nn_mul((size_t)B, (size_t)v->np), (size_t)D));
    const size_t hc = nn_fblock(nn_mul(nn_mul((size_t)B, (size_t)v->T), (size_t)D));
    const size_t lg = nn_fblock(nn_mul(nn_mul((size_t)B, 2), (size_t)K));
    size_t sub = attn_nn_stack_ws(&v->S, &la);
    sub = nn_max(sub, attn_nn_linear_ws(B * v->np, v->kc, D));
    sub = nn_max(sub, attn_nn_linear_ws(B, D, K));
    size_t s = nn_add(NN_SLACK, nn_mul(2, cols));
    s = nn_add(s, pt);
    s = nn_add(s, nn_mul(3, bnd(v, a)));
    s = nn_add(s, nn_mul(2, hc));
    s = nn_add(s, lg);
    return nn_add(s, sub);
}

size_t attn_vit_workspace_size(const attn_vit *v, const attn_vit_args *a) {
    if (!args_ok(v, a)) return 0;
    const attn_precision prev = attn_nn_precision_set(v->cfg.precision);
    const size_t s = workspace_size(v, a);
    attn_nn_precision_set(prev);
    return s;
}

static attn_status check_args(const char *fn, const attn_vit *v, const attn_vit_args *a) {
    ATTN_CHECK_NOT_NULL(fn, v);
    ATTN_CHECK_NOT_NULL(fn, a);
    if (!args_ok(v, a))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch = %lld must be in [1, 2^24]", fn, (long long)a->batch);
    if (!a->images)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: images [%lld, %lld, %lld, %lld] is NULL", fn,
                          (long long)a->batch, (long long)v->cfg.in_channels, (long long)v->cfg.image_h,
                          (long long)v->cfg.image_w);
    if (a->separate_heads && !v->cfg.distilled)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: separate_heads needs a distilled model", fn);
    return ATTN_OK;
}

/* cols [B Np, C p p] from images [B, C, H, W]; and the reverse (col2im, written: the patches tile
 * the image). */
static void im2col(const attn_vit *v, const float *img, int64_t B, float *cols) {
    const int64_t p = v->cfg.patch_size, C = v->cfg.in_channels, H = v->cfg.image_h, W = v->cfg.image_w;
    for (int64_t b = 0; b < B; b++)
        for (int64_t gy = 0; gy < v->gh; gy++)
            for (int64_t gx = 0; gx < v->gw; gx++) {
                float *r = cols + ((b * v->np) + gy * v->gw + gx) * v->kc;
                for (int64_t c = 0; c < C; c++)
                    for (int64_t ky = 0; ky < p; ky++)
                        memcpy(r + (c * p + ky) * p, img + ((b * C + c) * H + gy * p + ky) * W + gx * p,
                               sizeof(float) * (size_t)p);
            }
}

static void col2im(const attn_vit *v, const float *cols, int64_t B, float *img) {
    const int64_t p = v->cfg.patch_size, C = v->cfg.in_channels, H = v->cfg.image_h, W = v->cfg.image_w;
    for (int64_t b = 0; b < B; b++)
        for (int64_t gy = 0; gy < v->gh; gy++)
            for (int64_t gx = 0; gx < v->gw; gx++) {
                const float *r = cols + ((b * v->np) + gy * v->gw + gx) * v->kc;
                for (int64_t c = 0; c < C; c++)
                    for (int64_t ky = 0; ky < p; ky++)
                        memcpy(img + ((b * C + c) * H + gy * p + ky) * W + gx * p, r + (c * p + ky) * p,
                               sizeof(float) * (size_t)p);
            }
}

static uint64_t pos_offset(const attn_vit *v, const attn_vit_args *a) {
    return nn_site_offset(a->offset, v->cfg.num_layers, NN_SITE_POS_SRC);
}

static attn_status vit_forward(const char *fn, attn_vit *v, const attn_vit_args *a, float *logits, void *saved,
                               size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    attn_status st = check_args(fn, v, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, logits);
    nn_arena sv, ws;
    if ((saved && (st = attn_nn_arena_init(&sv, fn, "saved", saved, saved_bytes, attn_vit_saved_size(v, a)))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_vit_workspace_size(v, a))))
        return st;
    const int64_t B = a->batch, D = v->cfg.hidden_dim, K = v->cfg.num_classes, N = v->T + v->np, T = v->T;
    attn_layer_args la = layer_args(v, a, NULL);
    const size_t ssb = attn_nn_stack_saved(&v->S, &la);
    nn_arena *keep = saved ? &sv : &ws;
    float *x0 = nn_takef(keep, (size_t)(B * N * D)), *hc = nn_takef(keep, (size_t)(B * T * D));
    void *ss = saved ? attn_nn_take(&sv, ssb) : NULL;
    float *cols = nn_takef(&ws, (size_t)(B * v->np * v->kc)), *pt = nn_takef(&ws, (size_t)(B * v->np * D));
    float *h = nn_takef(&ws, (size_t)(B * N * D)), *lg = nn_takef(&ws, (size_t)(2 * B * K));
    size_t wb;
    void *rest = nn_rest(&ws, &wb);
    im2col(v, a->images, B, cols);
    if ((st = attn_nn_linear_fwd(fn, cols, v->wc, v->bc, pt, B * v->np, v->kc, D, rest, wb))) return st;
    for (int64_t b = 0; b < B; b++) {
        float *xb = x0 + b * N * D;
        memcpy(xb, v->cls, sizeof(float) * (size_t)D);
        if (v->dist) memcpy(xb + D, v->dist, sizeof(float) * (size_t)D);
        memcpy(xb + T * D, pt + b * v->np * D, sizeof(float) * (size_t)(v->np * D));
        for (int64_t i = 0; i < N * D; i++) xb[i] += v->pos[i];
    }
    if ((st = nn_dropout_fwd(x0, B * N * D, v->cfg.dropout, a->training, a->seed, pos_offset(v, a))))
        return attn_nn_wrap_error(st, fn);
    la.x = x0;
    if ((st = attn_nn_stack_fwd(fn, &v->S, &la, 0, h, ss, ssb, rest, wb))) return st;
    for (int64_t t = 0; t < T; t++)
        for (int64_t b = 0; b < B; b++) memcpy(hc + (t * B + b) * D, h + (b * N + t) * D, sizeof(float) * (size_t)D);
    if (!v->cfg.distilled) return attn_nn_linear_fwd(fn, hc, v->wh, v->bh, logits, B, D, K, rest, wb);
    float *y0 = a->separate_heads ? logits : lg, *y1 = a->separate_heads ? logits + B * K : lg + B * K;
    if ((st = attn_nn_linear_fwd(fn, hc, v->wh, v->bh, y0, B, D, K, rest, wb)) ||
        (st = attn_nn_linear_fwd(fn, hc + B * D, v->wd, v->bd, y1, B, D, K, rest, wb)))
        return st;
    if (!a->separate_heads)
        for (int64_t i = 0; i < B * K; i++) logits[i] = (y0[i] + y1[i]) * 0.5f;
    return ATTN_OK;
}

static attn_status vit_backward(const char *fn, attn_vit *v, const attn_vit_args *a, const float *dlogits,
                                float *dimages, const void *saved, size_t saved_bytes, void *workspace,
                                size_t workspace_bytes) {
    attn_status st = check_args(fn, v, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dlogits);
    ATTN_CHECK_NOT_NULL(fn, saved);
    nn_arena sv, ws;
    if ((st = attn_nn_arena_init(&sv, fn, "saved", (void *)saved, saved_bytes, attn_vit_saved_size(v, a))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_vit_workspace_size(v, a))))
        return st;
    const int64_t B = a->batch, D = v->cfg.hidden_dim, K = v->cfg.num_classes, N = v->T + v->np, T = v->T;
    attn_layer_args la = layer_args(v, a, NULL);
    la.capture = NULL;
    const size_t ssb = attn_nn_stack_saved(&v->S, &la);
    float *x0 = nn_takef(&sv, (size_t)(B * N * D)), *hc = nn_takef(&sv, (size_t)(B * T * D));
    const void *ss = attn_nn_take(&sv, ssb);
    float *cols = nn_takef(&ws, (size_t)(B * v->np * v->kc)), *dcols = nn_takef(&ws, (size_t)(B * v->np * v->kc));
    float *dpt = nn_takef(&ws, (size_t)(B * v->np * D));
    float *dh = nn_takef(&ws, (size_t)(B * N * D)), *dx0 = nn_takef(&ws, (size_t)(B * N * D));
    float *dhc = nn_takef(&ws, (size_t)(B * T * D)), *lg = nn_takef(&ws, (size_t)(2 * B * K));
    size_t wb;
    void *rest = nn_rest(&ws, &wb);
    /* heads */
    const float *dy0 = dlogits, *dy1 = dlogits + B * K;
    if (v->cfg.distilled && !a->separate_heads) {
        for (int64_t i = 0; i < B * K; i++) lg[i] = 0.5f * dlogits[i];
        dy0 = dy1 = lg;
    }
    memset(dh, 0, sizeof(float) * (size_t)(B * N * D));
    if ((st = attn_nn_linear_bwd(fn, hc, v->wh, dy0, dhc, 0, v->gwh, v->gbh, B, D, K, rest, wb))) return st;
    if (v->cfg.distilled &&
        (st = attn_nn_linear_bwd(fn, hc + B * D, v->wd, dy1, dhc + B * D, 0, v->gwd, v->gbd, B, D, K, rest, wb)))
        return st;
    for (int64_t t = 0; t < T; t++)
        for (int64_t b = 0; b < B; b++) memcpy(dh + (b * N + t) * D, dhc + (t * B + b) * D, sizeof(float) * (size_t)D);
    /* encoder */
    la.x = x0;
    if ((st = attn_nn_stack_bwd(fn, &v->S, &la, 0, dh, dx0, NULL, ss, ssb, rest, wb))) return st;
    if ((st = nn_dropout_bwd(dx0, B * N * D, v->cfg.dropout, a->training, a->seed, pos_offset(v, a))))
        return attn_nn_wrap_error(st, fn);
    /* tokens and positions */
    for (int64_t b = 0; b < B; b++) {
        const float *db = dx0 + b * N * D;
        for (int64_t i = 0; i < N * D; i++) v->gpos[i] += db[i];
        for (int64_t i = 0; i < D; i++) v->gcls[i] += db[i];
        if (v->dist)
            for (int64_t i = 0; i < D; i++) v->gdist[i] += db[D + i];
        memcpy(dpt + b * v->np * D, db + T * D, sizeof(float) * (size_t)(v->np * D));
    }
    /* patch embedding */
    im2col(v, a->images, B, cols);
    if ((st = attn_nn_linear_bwd(fn, cols, v->wc, dpt, dimages ? dcols : NULL, 0, v->gwc, v->gbc, B * v->np, v->kc, D,
                                 rest, wb)))
        return st;
    if (dimages) col2im(v, dcols, B, dimages);
    return ATTN_OK;
}

/* The forward and backward run in the model's precision (attn_nn_precision, restored after). */
attn_status attn_vit_forward(attn_vit *v, const attn_vit_args *a, float *logits, void *saved, size_t saved_bytes,
                             void *workspace, size_t workspace_bytes) {
    const attn_precision prev = attn_nn_precision_set(v ? v->cfg.precision : ATTN_PRECISION_FP32);
    const attn_status st =
        vit_forward("attn_vit_forward", v, a, logits, saved, saved_bytes, workspace, workspace_bytes);
    attn_nn_precision_set(prev);
    return st;
}

attn_status attn_vit_backward(attn_vit *v, const attn_vit_args *a, const float *dlogits, float *dimages,
                              const void *saved, size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    const attn_precision prev = attn_nn_precision_set(v ? v->cfg.precision : ATTN_PRECISION_FP32);
    const attn_status st =
        vit_backward("attn_vit_backward", v, a, dlogits, dimages, saved, saved_bytes, workspace, workspace_bytes);
    attn_nn_precision_set(prev);
    return st;
}

/* ---- name maps ---- */

static const attn_name_rule tv_rules[] = {
    {"pos_embedding", "encoder.pos_embedding"},
    {"layers.*.self_attn.", "encoder.layers.encoder_layer_*.self_attention."},
    {"layers.*.norm1.", "encoder.layers.encoder_layer_*.ln_1."},
    {"layers.*.norm2.", "encoder.layers.encoder_layer_*.ln_2."},
    {"layers.*.linear1.", "encoder.layers.encoder_layer_*.mlp.0."},
    {"layers.*.linear2.", "encoder.layers.encoder_layer_*.mlp.3."},
    {"norm.", "encoder.ln."},
    {"head.", "heads.head."},
};
const attn_name_map attn_nn_vit_torchvision_map = {tv_rules, sizeof tv_rules / sizeof tv_rules[0]};

static const attn_name_rule timm_rules[] = {
    {"class_token", "cls_token"},
    {"pos_embedding", "pos_embed"},
    {"conv_proj.", "patch_embed.proj."},
    {"layers.*.self_attn.in_proj_weight", "blocks.*.attn.qkv.weight"},
    {"layers.*.self_attn.in_proj_bias", "blocks.*.attn.qkv.bias"},
    {"layers.*.self_attn.out_proj.", "blocks.*.attn.proj."},
    {"layers.*.norm1.", "blocks.*.norm1."},
    {"layers.*.norm2.", "blocks.*.norm2."},
    {"layers.*.linear1.", "blocks.*.mlp.fc1."},
    {"layers.*.linear2.", "blocks.*.mlp.fc2."},
};
static const attn_name_map timm_map = {timm_rules, sizeof timm_rules / sizeof timm_rules[0]};

const attn_name_map *attn_vit_torchvision_names(void) { return &attn_nn_vit_torchvision_map; }
const attn_name_map *attn_vit_timm_names(void) { return &timm_map; }

/* ---- position-embedding resampling: F.interpolate(mode="bicubic") on the grid ---- */

static double cubic1(double x, double A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static double cubic2(double x, double A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

/* For each output index: the 4 clamped source taps and their weights (PyTorch's
 * area_pixel_compute_source_index with cubic = true, get_cubic_upsample_coefficients). */
static void cubic_taps(int64_t in, int64_t out, int align_corners, int64_t *idx, double *w) {
    const double A = -0.75;
    double scale;
    if (align_corners)
        scale = out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0;
    else
        scale = (double)in / (double)out;
    for (int64_t o = 0; o < out; o++) {
        const double real = align_corners ? scale * (double)o : scale * ((double)o + 0.5) - 0.5;
        int64_t i0 = (int64_t)floor(real);
        if (i0 > in - 1) i0 = in - 1;
        double t = real - (double)i0;
        if (t < 0) t = 0;
        if (t > 1) t = 1;
        const double c[4] = {cubic2(t + 1, A), cubic1(t, A), cubic1(1 - t, A), cubic2(2 - t, A)};
        for (int k = 0; k < 4; k++) {
            int64_t j = i0 - 1 + k;
            j = j < 0 ? 0 : j > in - 1 ? in - 1 : j;
            idx[o * 4 + k] = j;
            w[o * 4 + k] = c[k];
        }
    }
}

attn_status attn_vit_resample_pos_embed(const float *src, int64_t prefix, int64_t src_h, int64_t src_w, float *dst,
                                        int64_t dst_h, int64_t dst_w, int64_t dim, int align_corners) {
    static const char fn[] = "attn_vit_resample_pos_embed";
    ATTN_CHECK_NOT_NULL(fn, src);
    ATTN_CHECK_NOT_NULL(fn, dst);
    if (prefix < 0 || src_h < 1 || src_w < 1 || dst_h < 1 || dst_w < 1 || dim < 1 || prefix > VIT_MAX_DIM ||
        src_h > VIT_MAX_DIM || src_w > VIT_MAX_DIM || dst_h > VIT_MAX_DIM || dst_w > VIT_MAX_DIM || dim > VIT_MAX_DIM)
        return attn_error(
            ATTN_ERR_INVALID_ARGUMENT,
            "%s: need prefix >= 0 and grids, dim >= 1 (prefix %lld, %lld x %lld -> %lld x %lld, dim %lld)", fn,
            (long long)prefix, (long long)src_h, (long long)src_w, (long long)dst_h, (long long)dst_w, (long long)dim);
    if (src == dst) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: src and dst must not be the same buffer", fn);
    int64_t *iy = attn__malloc(sizeof(int64_t) * (size_t)(4 * dst_h)),
            *ix = attn__malloc(sizeof(int64_t) * (size_t)(4 * dst_w));
    double *wy = attn__malloc(sizeof(double) * (size_t)(4 * dst_h)),
           *wx = attn__malloc(sizeof(double) * (size_t)(4 * dst_w));
    double *acc = attn__malloc(sizeof(double) * (size_t)dim);
    if (!iy || !ix || !wy || !wx || !acc) {
        attn__free(iy), attn__free(ix), attn__free(wy), attn__free(wx), attn__free(acc);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    cubic_taps(src_h, dst_h, align_corners, iy, wy);
    cubic_taps(src_w, dst_w, align_corners, ix, wx);
    memcpy(dst, src, sizeof(float) * (size_t)(prefix * dim));
    const float *sg = src + prefix * dim;
    float *dg = dst + prefix * dim;
    for (int64_t y = 0; y < dst_h; y++)
        for (int64_t x = 0; x < dst_w; x++) {
            for (int64_t c = 0; c < dim; c++) acc[c] = 0;
            for (int ky = 0; ky < 4; ky++)
                for (int kx = 0; kx < 4; kx++) {
                    const double w = wy[y * 4 + ky] * wx[x * 4 + kx];
                    const float *s = sg + (iy[y * 4 + ky] * src_w + ix[x * 4 + kx]) * dim;
                    for (int64_t c = 0; c < dim; c++) acc[c] += w * (double)s[c];
                }
            for (int64_t c = 0; c < dim; c++) dg[(y * dst_w + x) * dim + c] = (float)acc[c];
        }
    attn__free(iy), attn__free(ix), attn__free(wy), attn__free(wx), attn__free(acc);
    return ATTN_OK;
}
