/* Multi-head attention with torch.nn.MultiheadAttention's semantics (batch_first=True).
 *
 * Forward, with E = embed_dim, H heads of hd = E / H, Nk' = Nk + add_bias_kv + add_zero_attn:
 *   Q = query Wq^T + bq  [B, Nq, E]     K = key Wk^T + bk,  V = value Wv^T + bv  [B, Nk', E]
 *   K[:, Nk] = bias_k, V[:, Nk] = bias_v          (add_bias_kv)
 *   K[:, Nk'-1] = V[:, Nk'-1] = 0                 (add_zero_attn)
 *   O_h = dropout(softmax(Q_h K_h^T / sqrt(hd) + M)) V_h   per head h (the flash kernel; another
 *         kind of attention.h's table when cfg.attention selects one)
 *   out = O Wo^T + bo,  O = [O_1 .. O_H] along the features
 * The [B, N, E] buffers are [B, N, H, hd] storage: the flash kernel gets [B, H, N, hd] views by
 * permuting strides, so heads are never transposed. M gathers the masks: PyTorch's boolean masks
 * (true = not allowed) are inverted into attn_sdpa_params' (true = may attend), the appended keys
 * get a visible column (PyTorch pads its masks with False / 0 there), float masks are added.
 * Backward, with dO = dout Wo (linear backward) and the flash backward giving dQ, dK, dV:
 *   dbias_k = sum_b dK[b, Nk], dbias_v = sum_b dV[b, Nk]
 *   dquery = dQ Wq, dWq += dQ^T query, dbq += sum dQ (likewise for key and value over the
 *   first Nk rows of each batch) ; dWo += dout^T O, dbo += sum dout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "attention/attention_kind.h"
#include "nn_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

struct attn_mha {
    attn_mha_config cfg;
    int64_t E, H, hd, kdim, vdim;
    int packed;
    const attn_kind_ops *kind; /* cfg.attention's row of the attention-kind table */
    nn_store store;
    /* data and gradients; NULL when the configuration has no such parameter */
    float *wq, *wk, *wv, *bq, *bk, *bv, *bias_k, *bias_v, *wo, *bo;
    float *gwq, *gwk, *gwv, *gbq, *gbk, *gbv, *gbias_k, *gbias_v, *gwo, *gbo;
};

attn_mha_config attn_mha_config_default(int64_t embed_dim, int64_t num_heads) {
    attn_mha_config c;
    memset(&c, 0, sizeof c);
    c.embed_dim = embed_dim;
    c.num_heads = num_heads;
    c.bias = 1;
    c.rope = attn_rope_config_default(num_heads > 0 ? embed_dim / num_heads : 0);
    return c;
}

attn_status attn_mha_redraw_features(attn_mha *m, uint64_t seed) {
    static const char fn[] = "attn_mha_redraw_features";
    ATTN_CHECK_NOT_NULL(fn, m);
    if (!m->kind->random_features)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: attention '%s' has no random features", fn, m->kind->name);
    if (m->cfg.attention.projection)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: the projection is the caller's (attention.projection), not drawn",
                          fn);
    m->cfg.attention.seed = seed;
    return ATTN_OK;
}

attn_mha_args attn_mha_args_default(void) {
    attn_mha_args a;
    memset(&a, 0, sizeof a);
    a.average_attn_weights = 1;
    return a;
}

attn_status attn_mha_create(const attn_mha_config *cfg, attn_mha **out) {
    static const char fn[] = "attn_mha_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, cfg);
    const int64_t E = cfg->embed_dim, H = cfg->num_heads;
    const int64_t kdim = cfg->kdim ? cfg->kdim : E, vdim = cfg->vdim ? cfg->vdim : E;
    if (E < 1 || E > (1 << 24))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: embed_dim (%lld) must be in [1, 2^24]", fn, (long long)E);
    if (H < 1 || H > E || E % H != 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: num_heads (%lld) must be in [1, embed_dim (%lld)] and divide embed_dim", fn,
                          (long long)H, (long long)E);
    if (kdim < 1 || vdim < 1 || kdim > (1 << 24) || vdim > (1 << 24))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: kdim (%lld) and vdim (%lld) must be in [1, 2^24] (0: embed_dim)", fn,
                          (long long)cfg->kdim, (long long)cfg->vdim);
    if (!(cfg->dropout >= 0 && cfg->dropout <= 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: dropout must be in [0, 1] (got %g)", fn,
                          (double)cfg->dropout);
    attn_status cs = attn_attention_config_check(&cfg->attention);
    if (cs) return attn_nn_wrap_error(cs, fn);
    const attn_kind_ops *kind = attn_kind_ops_get(cfg->attention.kind); /* checked above */
    if (kind->random_features && cfg->attention.projection && cfg->attention.projection_heads != 1 &&
        cfg->attention.projection_heads != H)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: attention.projection_heads = %lld; want 1 (shared) or num_heads (%lld)", fn,
                          (long long)cfg->attention.projection_heads, (long long)H);
    if (!kind->takes_bias_kv && (cfg->add_bias_kv || cfg->add_zero_attn))
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: attention '%s' does not combine with add_bias_kv / add_zero_attn",
                          fn, kind->name);
    attn_rope_config rope = cfg->rope;
    if (cfg->use_rope) {
        if (cfg->add_bias_kv || cfg->add_zero_attn)
            return attn_error(ATTN_ERR_UNSUPPORTED, "%s: use_rope does not combine with add_bias_kv / add_zero_attn",
                              fn);
        if (!rope.head_dim) rope.head_dim = E / H;
        if (rope.head_dim != E / H)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: rope.head_dim = %lld, but embed_dim / num_heads = %lld",
                              fn, (long long)rope.head_dim, (long long)(E / H));
        attn_tensor empty = attn_tensor_4d(NULL, 0, 1, 1, rope.head_dim); /* validates the rope settings */
        attn_status rs = attn_rope_forward(&rope, &empty, 0, NULL);
        if (rs) return attn_nn_wrap_error(rs, fn);
    }
    attn_mha *m = attn__calloc(1, sizeof *m);
    if (!m) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    m->cfg = *cfg;
    m->cfg.rope = rope;
    m->cfg.kdim = kdim;
    m->cfg.vdim = vdim;
    m->E = E;
    m->H = H;
    m->hd = E / H;
    m->kdim = kdim;
    m->vdim = vdim;
    m->packed = kdim == E && vdim == E;
    m->kind = kind;

    /* PyTorch's registration order: projections, in_proj_bias, bias_k, bias_v, out_proj; with
     * separate_projections four nn.Linear layers q_proj, k_proj, v_proj, (bias_k, bias_v), out_proj,
     * each weight then bias, initialised as nn.Linear (weight and bias U(+-1/sqrt(fan_in))) */
    nn_pdesc d[10];
    float **slot[10], **gslot[10];
    int n = 0;
    float *in_w = NULL, *in_gw = NULL, *in_b = NULL, *in_gb = NULL;
#define PARAM(nm, r, s0, s1, s2, ini, aa, p, g)                                                                        \
    do {                                                                                                               \
        d[n] = (nn_pdesc){nm, r, {s0, s1, s2, 0}, ini, aa, 0};                                                         \
        slot[n] = p;                                                                                                   \
        gslot[n] = g;                                                                                                  \
        n++;                                                                                                           \
    } while (0)
    const double lin_e = 1.0 / sqrt((double)E), lin_k = 1.0 / sqrt((double)kdim), lin_v = 1.0 / sqrt((double)vdim);
    if (cfg->separate_projections) {
        m->packed = 0;
        PARAM("q_proj.weight", 2, E, E, 0, NN_INIT_UNIFORM, lin_e, &m->wq, &m->gwq);
        if (cfg->bias) PARAM("q_proj.bias", 1, E, 0, 0, NN_INIT_UNIFORM, lin_e, &m->bq, &m->gbq);
        PARAM("k_proj.weight", 2, E, kdim, 0, NN_INIT_UNIFORM, lin_k, &m->wk, &m->gwk);
        if (cfg->bias) PARAM("k_proj.bias", 1, E, 0, 0, NN_INIT_UNIFORM, lin_k, &m->bk, &m->gbk);
        PARAM("v_proj.weight", 2, E, vdim, 0, NN_INIT_UNIFORM, lin_v, &m->wv, &m->gwv);
        if (cfg->bias) PARAM("v_proj.bias", 1, E, 0, 0, NN_INIT_UNIFORM, lin_v, &m->bv, &m->gbv);
    } else if (m->packed) {
        PARAM("in_proj_weight", 2, 3 * E, E, 0, NN_INIT_XAVIER_UNIFORM, 0, &in_w, &in_gw);
    } else {
        PARAM("q_proj_weight", 2, E, E, 0, NN_INIT_XAVIER_UNIFORM, 0, &m->wq, &m->gwq);
        PARAM("k_proj_weight", 2, E, kdim, 0, NN_INIT_XAVIER_UNIFORM, 0, &m->wk, &m->gwk);
        PARAM("v_proj_weight", 2, E, vdim, 0, NN_INIT_XAVIER_UNIFORM, 0, &m->wv, &m->gwv);
    }
    if (cfg->bias && !cfg->separate_projections) PARAM("in_proj_bias", 1, 3 * E, 0, 0, NN_INIT_ZEROS, 0, &in_b, &in_gb);
    if (cfg->add_bias_kv) {
        PARAM("bias_k", 3, 1, 1, E, NN_INIT_XAVIER_NORMAL, 0, &m->bias_k, &m->gbias_k);
        PARAM("bias_v", 3, 1, 1, E, NN_INIT_XAVIER_NORMAL, 0, &m->bias_v, &m->gbias_v);
    }
    PARAM("out_proj.weight", 2, E, E, 0, NN_INIT_UNIFORM, lin_e, &m->wo, &m->gwo);
    if (cfg->bias)
        PARAM("out_proj.bias", 1, E, 0, 0, cfg->separate_projections ? NN_INIT_UNIFORM : NN_INIT_ZEROS, lin_e, &m->bo,
              &m->gbo);
#undef PARAM
    float *ptr[10], *gptr[10];
    attn_status st = attn_nn_store_create(&m->store, fn, d, n, ptr, gptr);
    if (st) {
        attn__free(m);
        return st;
    }
    for (int i = 0; i < n; i++) {
        *slot[i] = ptr[i];
        *gslot[i] = gptr[i];
    }
    if (m->packed) {
        m->wq = in_w;
        m->wk = in_w + E * E;
        m->wv = in_w + 2 * E * E;
        m->gwq = in_gw;
        m->gwk = in_gw + E * E;
        m->gwv = in_gw + 2 * E * E;
    }
    if (in_b) {
        m->bq = in_b;
        m->bk = in_b + E;
        m->bv = in_b + 2 * E;
        m->gbq = in_gb;
        m->gbk = in_gb + E;
        m->gbv = in_gb + 2 * E;
    }
    *out = m;
    return ATTN_OK;
}

void attn_mha_free(attn_mha *m) {
    if (!m) return;
    attn_nn_store_free(&m->store);
    attn__free(m);
}

const attn_params *attn_mha_params(const attn_mha *m) { return m ? m->store.list : NULL; }
const attn_mha_config *attn_mha_get_config(const attn_mha *m) { return m ? &m->cfg : NULL; }

/* ---- shapes and masks ---- */

typedef struct mha_dims {
    int64_t B, Nq, Nk, nx, Nk2, E, H, hd;
} mha_dims;

/* A packed call is one batch of total rows as far as the projections and buffers go (B = 1,
 * Nq / Nk = the totals, no appended keys: refused there); only the attention call differs. */
static int is_packed(const attn_mha_args *a) { return a->cu_seqlens_q != NULL || a->cu_seqlens_k != NULL; }

static mha_dims dims_of(const attn_mha *m, const attn_mha_args *a) {
    mha_dims d;
    const int pk = is_packed(a);
    d.B = pk ? 1 : a->batch;
    d.Nq = a->nq;
    d.Nk = a->nk;
    d.nx = pk ? 0 : (m->cfg.add_bias_kv ? 1 : 0) + (m->cfg.add_zero_attn ? 1 : 0);
    d.Nk2 = d.Nk + d.nx;
    d.E = m->E;
    d.H = m->H;
    d.hd = m->hd;
    return d;
}

/* Which converted masks a call needs, and their sizes. */
typedef struct mha_masks {
    int causal_flag; /* ATTN_CAUSAL_TOP_LEFT through attn_sdpa_params */
    int bool_mask;   /* 0 none, 2 [Nq, Nk'], 4 [B, H, Nq, Nk'] (inverted copy) */
    int key_mask;    /* [B, Nk'] inverted copy of the boolean key_padding_mask */
    int add_kind;    /* 0 none; 1 attn_mask_float as is; 2 key_padding_mask_float as is;
                           * 3 attn_mask_float padded; 4 key_padding_mask_float padded;
                           * 5 their sum [B, 1 or H, Nq, Nk'] */
    size_t bool_bytes, key_bytes, add_floats;
} mha_masks;

static mha_masks mask_plan(const mha_dims *d, const attn_mha_args *a) {
    mha_masks k;
    memset(&k, 0, sizeof k);
    k.causal_flag = a->is_causal && d->nx == 0;
    if (a->attn_mask)
        k.bool_mask = a->attn_mask_3d ? 4 : 2;
    else if (a->is_causal && d->nx > 0)
        k.bool_mask = 2;
    if (k.bool_mask)
        k.bool_bytes =
            nn_mul(nn_mul((size_t)d->Nq, (size_t)d->Nk2), k.bool_mask == 4 ? nn_mul((size_t)d->B, (size_t)d->H) : 1);
    k.key_mask = a->key_padding_mask != NULL;
    if (k.key_mask) k.key_bytes = nn_mul((size_t)d->B, (size_t)d->Nk2);
    const int am = a->attn_mask_float != NULL, kf = a->key_padding_mask_float != NULL;
    if (am && kf) {
        k.add_kind = 5;
        k.add_floats =
            nn_mul(nn_mul((size_t)d->B, a->attn_mask_3d ? (size_t)d->H : 1), nn_mul((size_t)d->Nq, (size_t)d->Nk2));
    } else if (am) {
        k.add_kind = d->nx ? 3 : 1;
        if (d->nx)
            k.add_floats =
                nn_mul(nn_mul((size_t)d->Nq, (size_t)d->Nk2), a->attn_mask_3d ? nn_mul((size_t)d->B, (size_t)d->H) : 1);
    } else if (kf) {
        k.add_kind = d->nx ? 4 : 2;
        if (d->nx) k.add_floats = nn_mul((size_t)d->B, (size_t)d->Nk2);
    }
    return k;
}

static size_t masks_bytes(const mha_masks *k) {
    return nn_add(nn_add(nn_block(k->bool_bytes), nn_block(k->key_bytes)), nn_fblock(k->add_floats));
}

/* Views the attention kernel reads the masks through. */
typedef struct mha_mask_views {
    attn_btensor bm, km;
    attn_tensor am;
} mha_mask_views;

/* Convert the caller's PyTorch-convention masks into attn_sdpa_params (buffers from ws). */
static void build_masks(const mha_dims *d, const attn_mha_args *a, const mha_masks *k, nn_arena *ws, mha_mask_views *mv,
                        attn_sdpa_params *p) {
    const int64_t Nq = d->Nq, Nk = d->Nk, Nk2 = d->Nk2;
    if (k->causal_flag) p->causal = ATTN_CAUSAL_TOP_LEFT;
    if (k->bool_mask) {
        uint8_t *bm = attn_nn_take(ws, k->bool_bytes);
        const int64_t planes = k->bool_mask == 4 ? d->B * d->H : 1;
        for (int64_t s = 0; s < planes; s++)
            for (int64_t i = 0; i < Nq; i++) {
                uint8_t *row = bm + (s * Nq + i) * Nk2;
                const uint8_t *src = a->attn_mask ? a->attn_mask + (s * Nq + i) * Nk : NULL;
                for (int64_t j = 0; j < Nk; j++) {
                    uint8_t ok = src ? (uint8_t)!src[j] : 1;
                    if (a->is_causal && j > i) ok = 0;
                    row[j] = ok;
                }
                for (int64_t j = Nk; j < Nk2; j++) row[j] = 1; /* appended keys stay visible */
            }
        mv->bm = k->bool_mask == 4 ? attn_btensor_4d(bm, d->B, d->H, Nq, Nk2) : attn_btensor_2d(bm, Nq, Nk2);
        p->bool_mask = &mv->bm;
    }
    if (k->key_mask) {
        uint8_t *km = attn_nn_take(ws, k->key_bytes);
        for (int64_t b = 0; b < d->B; b++) {
            for (int64_t j = 0; j < Nk; j++) km[b * Nk2 + j] = (uint8_t)!a->key_padding_mask[b * Nk + j];
            for (int64_t j = Nk; j < Nk2; j++) km[b * Nk2 + j] = 1;
        }
        mv->km = attn_btensor_2d(km, d->B, Nk2);
        p->key_mask = &mv->km;
    }
    const int H3 = a->attn_mask_3d;
    switch (k->add_kind) {
    case 1:
        mv->am = H3 ? attn_tensor_4d((float *)a->attn_mask_float, d->B, d->H, Nq, Nk)
                    : attn_tensor_2d((float *)a->attn_mask_float, Nq, Nk);
        break;
    case 2:
    case 4: {
        const float *src = a->key_padding_mask_float;
        float *buf = (float *)src;
        if (k->add_kind == 4) {
            buf = nn_takef(ws, k->add_floats);
            for (int64_t b = 0; b < d->B; b++) {
                memcpy(buf + b * Nk2, src + b * Nk, sizeof(float) * (size_t)Nk);
                for (int64_t j = Nk; j < Nk2; j++) buf[b * Nk2 + j] = 0.0f;
            }
        }
        /* [B, 1, 1, Nk'] broadcast over heads and queries */
        mv->am = attn_tensor_4d(buf, d->B, 1, 1, Nk2);
        break;
    }
    case 3:
    case 5: {
        float *buf = nn_takef(ws, k->add_floats);
        const int64_t planes = H3 ? d->B * d->H : (k->add_kind == 5 ? d->B : 1);
        for (int64_t s = 0; s < planes; s++) {
            const int64_t b = H3 ? s / d->H : s, src_plane = H3 ? s : 0;
            for (int64_t i = 0; i < Nq; i++) {
                float *row = buf + (s * Nq + i) * Nk2;
                const float *src = a->attn_mask_float + (src_plane * Nq + i) * Nk;
                for (int64_t j = 0; j < Nk; j++)
                    row[j] = k->add_kind == 5 ? src[j] + a->key_padding_mask_float[b * Nk + j] : src[j];
                for (int64_t j = Nk; j < Nk2; j++) row[j] = 0.0f;
            }
        }
        if (H3)
            mv->am = attn_tensor_4d(buf, d->B, d->H, Nq, Nk2);
        else if (k->add_kind == 5)
            mv->am = attn_tensor_4d(buf, d->B, 1, Nq, Nk2);
        else
            mv->am = attn_tensor_2d(buf, Nq, Nk2);
        break;
    }
    default: break;
    }
    if (k->add_kind) p->add_mask = &mv->am;
}

/* ---- validation and sizes ---- */

/* cu [batch + 1]: 0 first, nondecreasing, total last (msg NULL: only the answer). */
static int check_cu(const char *fn, const char *name, const int64_t *cu, int64_t batch, int64_t total,
                    const char *total_name, attn_status *err) {
    int64_t bad = -1;
    if (cu[0] != 0) bad = 0;
    for (int64_t s = 0; bad < 0 && s < batch; s++)
        if (cu[s + 1] < cu[s] || cu[s + 1] > total) bad = s + 1;
    if (bad < 0 && cu[batch] != total) bad = batch;
    if (bad < 0) return 1;
    if (err)
        *err = attn_error(ATTN_ERR_SHAPE,
                          "%s: %s[%lld] = %lld (previous %lld): want %s[0] = 0, nondecreasing, and %s[batch = %lld] = "
                          "%s = %lld",
                          fn, name, (long long)bad, (long long)cu[bad], (long long)(bad ? cu[bad - 1] : 0), name, name,
                          (long long)batch, total_name, (long long)total);
    return 0;
}

/* What a packed call refuses: the padded layout's masks and the options the varlen kernel lacks. */
static attn_status check_packed(const char *fn, const attn_mha *m, const attn_mha_args *a) {
    const char *field = NULL;
    if (!a->cu_seqlens_q)
        field = "cu_seqlens_k without cu_seqlens_q";
    else if (a->attn_mask || a->attn_mask_float)
        field = "attn_mask";
    else if (a->key_padding_mask || a->key_padding_mask_float)
        field = "key_padding_mask";
    else if (a->global_attention_mask)
        field = "global_attention_mask";
    else if (a->need_weights)
        field = "need_weights";
    else if (attn_nn_capture_of(a->capture))
        field = "capture";
    else if (m->cfg.add_bias_kv || m->cfg.add_zero_attn)
        field = "add_bias_kv / add_zero_attn";
    else if (m->cfg.attention.kind != ATTN_ATTENTION_FLASH && m->cfg.attention.kind != ATTN_ATTENTION_WINDOW)
        field = "attention.kind";
    if (field)
        return attn_error(ATTN_ERR_UNSUPPORTED,
                          "%s: a packed batch (cu_seqlens_q / cu_seqlens_k set) does not take %s (attention '%s'): "
                          "the packing is the mask; only the flash and window kinds run packed",
                          fn, field, m->kind->name);
    attn_status st = ATTN_OK;
    if (!check_cu(fn, "cu_seqlens_q", a->cu_seqlens_q, a->batch, a->nq, "nq", &st)) return st;
    if (a->cu_seqlens_k && !check_cu(fn, "cu_seqlens_k", a->cu_seqlens_k, a->batch, a->nk, "nk", &st)) return st;
    if (!a->cu_seqlens_k && a->nk != a->nq)
        return attn_error(ATTN_ERR_SHAPE, "%s: cu_seqlens_k is NULL (= cu_seqlens_q) but nk (%lld) != nq (%lld)", fn,
                          (long long)a->nk, (long long)a->nq);
    return ATTN_OK;
}

/* The size queries' silent form of the packed checks (0 bytes for a call that would be refused). */
static int packed_ok(const attn_mha *m, const attn_mha_args *a) {
    if (!is_packed(a)) return 1;
    return a->cu_seqlens_q && check_cu(NULL, NULL, a->cu_seqlens_q, a->batch, a->nq, NULL, NULL) &&
           (a->cu_seqlens_k ? check_cu(NULL, NULL, a->cu_seqlens_k, a->batch, a->nk, NULL, NULL) : a->nk == a->nq) &&
           !(m->cfg.add_bias_kv || m->cfg.add_zero_attn);
}

static attn_status check_args(const char *fn, const attn_mha *m, const attn_mha_args *a) {
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, a);
    if (a->batch < 1 || a->nq < 1 || a->nk < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch (%lld), nq (%lld) and nk (%lld) must be >= 1", fn,
                          (long long)a->batch, (long long)a->nq, (long long)a->nk);
    const size_t big = (size_t)1 << 40;
    const int64_t widest = m->E > m->kdim ? (m->E > m->vdim ? m->E : m->vdim) : (m->kdim > m->vdim ? m->kdim : m->vdim);
    const int pk = is_packed(a); /* nq, nk are then the totals, and no Nq x Nk weights exist */
    const size_t eb = pk ? 1 : (size_t)a->batch;
    if (nn_mul(nn_mul(eb, (size_t)(a->nq > a->nk + 2 ? a->nq : a->nk + 2)), (size_t)widest) > big ||
        (!pk && nn_mul(nn_mul(eb, (size_t)m->H), nn_mul((size_t)a->nq, (size_t)a->nk + 2)) > ((size_t)1 << 50)))
        return attn_error(ATTN_ERR_OVERFLOW, "%s: shapes too large (batch %lld, nq %lld, nk %lld, embed_dim %lld)", fn,
                          (long long)a->batch, (long long)a->nq, (long long)a->nk, (long long)m->E);
    if (!a->query || !a->key || !a->value)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: query, key and value are required (query %p, key %p, value %p)", fn,
                          (const void *)a->query, (const void *)a->key, (const void *)a->value);
    if (a->key_padding_mask && a->key_padding_mask_float)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: give key_padding_mask either as bool or as float, not both",
                          fn);
    if (a->global_attention_mask && !m->kind->takes_global_mask)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: attention '%s' takes no global_attention_mask", fn, m->kind->name);
    if (a->global_attention_mask && a->nq != a->nk)
        return attn_error(ATTN_ERR_SHAPE, "%s: global_attention_mask is for self-attention (nq %lld != nk %lld)", fn,
                          (long long)a->nq, (long long)a->nk);
    if (a->attn_mask && a->attn_mask_float)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: give attn_mask either as bool or as float, not both", fn);
    return is_packed(a) ? check_packed(fn, m, a) : ATTN_OK;
}

/* Floats of the four activation buffers Q, K, V, O. */
static size_t acts_bytes(const mha_dims *d) {
    const size_t q = nn_fblock(nn_mul(nn_mul((size_t)d->B, (size_t)d->Nq), (size_t)d->E));
    const size_t kv = nn_fblock(nn_mul(nn_mul((size_t)d->B, (size_t)d->Nk2), (size_t)d->E));
    return nn_add(nn_add(q, q), nn_add(kv, kv));
}

static attn_tensor head_view(float *buf, int64_t B, int64_t H, int64_t N, int64_t hd) {
    attn_tensor t = attn_tensor_4d(buf, B, H, N, hd);
    /* [B, N, H, hd] storage seen as [B, H, N, hd] */
    t.stride[0] = N * H * hd;
    t.stride[1] = hd;
    t.stride[2] = H * hd;
    t.stride[3] = 1;
    return t;
}

/* A packed buffer [total, E] as the varlen kernel's [total, H, hd]: float, or bf16 with bf16. */
static attn_tensor packed_view(void *buf, int bf16, int64_t total, int64_t H, int64_t hd) {
    attn_tensor t = attn_tensor_3d(bf16 ? NULL : buf, total, H, hd);
    if (bf16) {
        t.data16 = buf;
        t.dtype = ATTN_TYPE_BF16;
    }
    return t;
}

/* The window kind's band on a packed call (what the kind's row adds for a padded one). */
static attn_sdpa_params packed_params(const attn_mha *m, attn_sdpa_params p) {
    if (m->cfg.attention.kind == ATTN_ATTENTION_WINDOW) {
        const int64_t w = m->cfg.attention.window;
        if (p.window_left < 0 || p.window_left > w) p.window_left = w;
        if (p.window_right < 0 || p.window_right > w) p.window_right = w;
    }
    return p;
}

/* The kind's per-call extras (gm: storage for the global mask's view). */
static attn_kind_extra kind_extra(const mha_dims *d, const attn_mha_args *a, attn_btensor *gm) {
    attn_kind_extra x = {NULL};
    if (a->global_attention_mask) {
        *gm = attn_btensor_2d(a->global_attention_mask, d->B, d->Nq);
        x.global_mask = gm;
    }
    return x;
}

/* bf16 precision (attn_nn_precision): the kinds whose row says supports_bf16 (those on the flash
 * kernel's bf16 path) get bf16-rounded copies of Q, K, V (and dO in the backward), the buffers'
 * [B, N, H, hd] layout kept; other kinds stay float. */
static int bf16_attention(const attn_mha *m) {
    return attn_nn_precision() == ATTN_PRECISION_BF16 && m->kind->supports_bf16;
}

static attn_tensor head_view16(attn_bf16 *buf, int64_t B, int64_t H, int64_t N, int64_t hd) {
    attn_tensor t = head_view(NULL, B, H, N, hd);
    t.data16 = buf;
    t.dtype = ATTN_TYPE_BF16;
    return t;
}

/* Bytes of the bf16 copies of Q, O (or dO), K and V. */
static size_t bf16_copies_bytes(const mha_dims *d) {
    const size_t q = nn_block(nn_mul(nn_mul((size_t)d->B, (size_t)d->Nq), (size_t)d->E * sizeof(attn_bf16)));
    const size_t kv = nn_block(nn_mul(nn_mul((size_t)d->B, (size_t)d->Nk2), (size_t)d->E * sizeof(attn_bf16)));
    return nn_add(NN_SLACK, nn_add(nn_add(q, q), nn_add(kv, kv)));
}

static size_t scratch_bytes(const attn_mha *m, const mha_dims *d, const attn_mha_args *a) {
    attn_btensor gm;
    const attn_kind_extra x = kind_extra(d, a, &gm);
    const int64_t krows = d->nx ? d->Nk : d->B * d->Nk;
    size_t s = attn_nn_linear_ws(d->B * d->Nq, d->E, d->E);
    s = nn_max(s, attn_nn_linear_ws(krows, m->kdim, d->E));
    s = nn_max(s, attn_nn_linear_ws(krows, m->vdim, d->E));
    attn_tensor q = head_view(NULL, d->B, d->H, d->Nq, d->hd), k = head_view(NULL, d->B, d->H, d->Nk2, d->hd);
    const attn_sdpa_params p = attn_sdpa_params_default();
    if (is_packed(a)) {
        const int b16 = bf16_attention(m);
        q = packed_view(NULL, b16, d->Nq, d->H, d->hd);
        k = packed_view(NULL, b16, d->Nk, d->H, d->hd);
        const int64_t *cu_k = a->cu_seqlens_k ? a->cu_seqlens_k : a->cu_seqlens_q;
        const size_t v = attn_flash_varlen_workspace_size(&q, &k, &k, a->cu_seqlens_q, cu_k, a->batch);
        s = nn_max(s, b16 ? nn_add(bf16_copies_bytes(d), v) : v);
    } else if (bf16_attention(m)) {
        q = head_view16(NULL, d->B, d->H, d->Nq, d->hd);
        k = head_view16(NULL, d->B, d->H, d->Nk2, d->hd);
        s = nn_max(s, nn_add(bf16_copies_bytes(d), m->kind->workspace_size(&m->cfg.attention, &q, &k, &k, &p, &x)));
    } else {
        s = nn_max(s, m->kind->workspace_size(&m->cfg.attention, &q, &k, &k, &p, &x));
    }
    if (a->need_weights && a->average_attn_weights)
        s = nn_max(s, nn_add(NN_SLACK, nn_fblock(nn_mul((size_t)attn_get_num_threads(), (size_t)d->Nk2))));
    return s;
}

size_t attn_mha_saved_size(const attn_mha *m, const attn_mha_args *a) {
    if (!m || !a || a->batch < 1 || a->nq < 1 || a->nk < 1 || !packed_ok(m, a)) return 0;
    const mha_dims d = dims_of(m, a);
    const size_t stats = nn_mul(nn_mul((size_t)d.B, (size_t)d.H), nn_mul((size_t)d.Nq, (size_t)m->kind->stats_per_row));
    return nn_add(nn_add(NN_SLACK, acts_bytes(&d)), nn_fblock(stats));
}

/* A packed call with RoPE: each row's position within its sequence, for the queries and (with
 * their own cu_seqlens_k) the keys; self-attention's keys share the queries'. */
static size_t rope_positions_bytes(const attn_mha *m, const attn_mha_args *a) {
    if (!is_packed(a) || !m->cfg.use_rope) return 0;
    const size_t q = nn_block(nn_mul((size_t)a->nq, sizeof(int64_t)));
    return a->cu_seqlens_k ? nn_add(q, nn_block(nn_mul((size_t)a->nk, sizeof(int64_t)))) : q;
}

/* pos[r] = r - cu[s] for the rows r of sequence s: RoPE's positions restart at each sequence, as
 * in its batch-1 call. */
static int64_t *positions_of(const int64_t *cu, int64_t batch, int64_t total, nn_arena *ws) {
    int64_t *pos = attn_nn_take(ws, (size_t)total * sizeof(int64_t));
    for (int64_t s = 0; s < batch; s++)
        for (int64_t r = cu[s]; r < cu[s + 1]; r++) pos[r] = r - cu[s];
    return pos;
}

/* The queries' and keys' positions of a packed call with RoPE (both NULL otherwise). */
static void rope_positions(const attn_mha *m, const attn_mha_args *a, const mha_dims *d, nn_arena *ws,
                           const int64_t **pq, const int64_t **pk) {
    *pq = *pk = NULL;
    if (!is_packed(a) || !m->cfg.use_rope) return;
    *pq = positions_of(a->cu_seqlens_q, a->batch, d->Nq, ws);
    *pk = a->cu_seqlens_k ? positions_of(a->cu_seqlens_k, a->batch, d->Nk, ws) : *pq;
}

size_t attn_mha_workspace_size(const attn_mha *m, const attn_mha_args *a) {
    if (!m || !a || a->batch < 1 || a->nq < 1 || a->nk < 1 || !packed_ok(m, a)) return 0;
    const mha_dims d = dims_of(m, a);
    const mha_masks k = mask_plan(&d, a);
    return nn_add(nn_add(nn_add(NN_SLACK, acts_bytes(&d)), rope_positions_bytes(m, a)),
                  nn_add(masks_bytes(&k), scratch_bytes(m, &d, a)));
}

/* ---- forward ---- */

typedef struct mha_acts {
    float *Q, *K, *V, *O, *lse;
} mha_acts;

static void take_acts(nn_arena *ar, const attn_mha *m, const mha_dims *d, mha_acts *t, int with_lse) {
    const size_t nq = (size_t)(d->B * d->Nq * d->E), nk = (size_t)(d->B * d->Nk2 * d->E);
    t->Q = nn_takef(ar, nq);
    t->K = nn_takef(ar, nk);
    t->V = nn_takef(ar, nk);
    t->O = nn_takef(ar, nq);
    t->lse = with_lse ? nn_takef(ar, (size_t)(d->B * d->H * d->Nq * m->kind->stats_per_row)) : NULL;
}

static attn_sdpa_params sdpa_params(const attn_mha *m, const attn_mha_args *a) {
    attn_sdpa_params p = attn_sdpa_params_default(); /* scale 1 / sqrt(head_dim), as PyTorch */
    if (a->training && m->cfg.dropout > 0) {
        p.dropout_p = m->cfg.dropout;
        p.dropout_seed = a->seed;
        p.dropout_offset = a->offset;
    }
    return p;
}

/* Project key or value into buf [B, Nk', E] and fill the appended rows. */
static attn_status project_kv(const char *fn, const attn_mha *m, const mha_dims *d, const float *x, int64_t in,
                              const float *w, const float *b, const float *extra, float *buf, void *ws, size_t wsb) {
    attn_status st;
    const int64_t E = d->E;
    if (d->nx == 0) return attn_nn_linear_fwd(fn, x, w, b, buf, d->B * d->Nk, in, E, ws, wsb);
    for (int64_t bb = 0; bb < d->B; bb++) {
        float *dst = buf + bb * d->Nk2 * E;
        if ((st = attn_nn_linear_fwd(fn, x + bb * d->Nk * in, w, b, dst, d->Nk, in, E, ws, wsb))) return st;
        int64_t r = d->Nk;
        if (m->cfg.add_bias_kv) memcpy(dst + (r++) * E, extra, sizeof(float) * (size_t)E);
        if (m->cfg.add_zero_attn) memset(dst + r * E, 0, sizeof(float) * (size_t)E);
    }
    return ATTN_OK;
}

/* need_weights: rows recomputed by the kind's weights function (flash: exact, double normaliser),
 * averaged over heads in head order or written per head. Tasks are (batch, query row): each owns
 * its output. */
static attn_status mha_weights(const char *fn, const attn_mha *m, const mha_dims *d, const attn_tensor *qv,
                               const attn_tensor *kv, const attn_sdpa_params *p, const attn_kind_extra *x, int average,
                               int dropout, float *weights, nn_arena *ws) {
    const attn_attention_config *ac = &m->cfg.attention;
    attn_status st = m->kind->weights(ac, qv, kv, p, x, 0, 0, 0, 0, dropout, weights); /* validates once */
    if (st) return attn_nn_wrap_error(st, fn);
    const int64_t tasks = d->B * d->Nq, Nk2 = d->Nk2;
    const int nt = attn_threads_for(tasks);
    float *rows = NULL;
    if (average) {
        size_t have;
        void *rest = nn_rest(ws, &have);
        nn_arena sub;
        if ((st = attn_nn_arena_init(&sub, fn, "workspace", rest, have,
                                     nn_add(NN_SLACK, nn_fblock(nn_mul((size_t)nt, (size_t)Nk2))))))
            return st;
        rows = nn_takef(&sub, (size_t)nt * (size_t)Nk2);
    }
    const float inv_h = 1.0f / (float)d->H;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t b = t / d->Nq, i = t % d->Nq;
        if (average) {
#ifdef _OPENMP
            float *row = rows + (size_t)omp_get_thread_num() * (size_t)Nk2;
#else
            float *row = rows;
#endif
            float *dst = weights + (b * d->Nq + i) * Nk2;
            for (int64_t j = 0; j < Nk2; j++) dst[j] = 0.0f;
            for (int64_t h = 0; h < d->H; h++) {
                m->kind->weights(ac, qv, kv, p, x, b, h, i, 1, dropout, row);
                for (int64_t j = 0; j < Nk2; j++) dst[j] += row[j];
            }
            for (int64_t j = 0; j < Nk2; j++) dst[j] *= inv_h;
        } else {
            for (int64_t h = 0; h < d->H; h++)
                m->kind->weights(ac, qv, kv, p, x, b, h, i, 1, dropout, weights + ((b * d->H + h) * d->Nq + i) * Nk2);
        }
    }
    return ATTN_OK;
}

/* Attention capture: the weights of the heads and rows the capture asks of this module, per head
 * (as need_weights with average_attn_weights = 0). Tasks are (batch, head, row). */
static attn_status mha_capture(const char *fn, const attn_mha *m, const mha_dims *d, attn_capture *c,
                               const attn_tensor *qv, const attn_tensor *kv, const attn_sdpa_params *p,
                               const attn_kind_extra *x, int dropout) {
    nn_capture_slot cs;
    attn_status st = attn_nn_capture_begin(c, fn, d->B, d->H, d->Nq, d->Nk2, &cs);
    if (st || !cs.w) return st;
    if (!m->kind->weights)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: attention '%s' has no attention weights to capture", fn,
                          m->kind->name);
    const attn_attention_config *ac = &m->cfg.attention;
    if ((st = m->kind->weights(ac, qv, kv, p, x, 0, 0, 0, 0, dropout, cs.w))) return attn_nn_wrap_error(st, fn);
    const int64_t tasks = cs.batch * cs.heads * cs.rows;
    const int nt = attn_threads_for(tasks);
    (void)nt; /* only the OpenMP pragma reads it */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t i = t % cs.rows, h = (t / cs.rows) % cs.heads, b = t / (cs.rows * cs.heads);
        m->kind->weights(ac, qv, kv, p, x, b, cs.head0 + h, cs.row0 + i, 1, dropout, cs.w + t * cs.nk);
    }
    return ATTN_OK;
}

/* The bf16 copies of Q, K, V, O / dO, carved from the scratch (sized by bf16_copies_bytes). */
typedef struct mha_bf16 {
    attn_bf16 *Q, *K, *V, *O;
    void *rest;
    size_t rest_bytes;
} mha_bf16;

static attn_status round_acts(const char *fn, const mha_dims *d, void *scr, size_t wsb, const mha_acts *t,
                              const float *o, mha_bf16 *h) {
    nn_arena ar;
    attn_status st = attn_nn_arena_init(&ar, fn, "workspace", scr, wsb, bf16_copies_bytes(d));
    if (st) return st;
    const size_t nq = (size_t)(d->B * d->Nq * d->E), nk = (size_t)(d->B * d->Nk2 * d->E);
    h->Q = attn_nn_take(&ar, nq * sizeof(attn_bf16));
    h->O = attn_nn_take(&ar, nq * sizeof(attn_bf16));
    h->K = attn_nn_take(&ar, nk * sizeof(attn_bf16));
    h->V = attn_nn_take(&ar, nk * sizeof(attn_bf16));
    h->rest = nn_rest(&ar, &h->rest_bytes);
    attn_nn_round_bf16(t->Q, h->Q, nq);
    attn_nn_round_bf16(t->K, h->K, nk);
    attn_nn_round_bf16(t->V, h->V, nk);
    if (o) attn_nn_round_bf16(o, h->O, nq);
    return ATTN_OK;
}

/* The kind's forward, on bf16 copies of Q, K, V in bf16 precision (float O and statistics). */
static attn_status attention_fwd(const char *fn, const attn_mha *m, const mha_dims *d, const mha_acts *t,
                                 const attn_tensor *qv, const attn_tensor *kv, const attn_tensor *vv,
                                 const attn_sdpa_params *p, const attn_kind_extra *x, attn_tensor *ov, void *scr,
                                 size_t wsb) {
    if (!bf16_attention(m)) return m->kind->forward(&m->cfg.attention, qv, kv, vv, p, x, ov, t->lse, scr, wsb);
    mha_bf16 h;
    attn_status st = round_acts(fn, d, scr, wsb, t, NULL, &h);
    if (st) return st;
    const attn_tensor q = head_view16(h.Q, d->B, d->H, d->Nq, d->hd), k = head_view16(h.K, d->B, d->H, d->Nk2, d->hd),
                      v = head_view16(h.V, d->B, d->H, d->Nk2, d->hd);
    return m->kind->forward(&m->cfg.attention, &q, &k, &v, p, x, ov, t->lse, h.rest, h.rest_bytes);
}

/* The kind's backward; in bf16 precision on bf16 copies of Q, K, V and dO (float gradients). */
static attn_status attention_bwd(const char *fn, const attn_mha *m, const mha_dims *d, const mha_acts *t,
                                 const mha_acts *g, const attn_tensor *qv, const attn_tensor *kv, const attn_tensor *vv,
                                 const attn_sdpa_params *p, const attn_kind_extra *x, const attn_tensor *ov,
                                 const attn_tensor *dov, attn_tensor *dqv, attn_tensor *dkv, attn_tensor *dvv,
                                 void *scr, size_t wsb) {
    if (!bf16_attention(m))
        return m->kind->backward(&m->cfg.attention, qv, kv, vv, p, x, ov, dov, t->lse, dqv, dkv, dvv, scr, wsb);
    mha_bf16 h;
    attn_status st = round_acts(fn, d, scr, wsb, t, g->O, &h);
    if (st) return st;
    const attn_tensor q = head_view16(h.Q, d->B, d->H, d->Nq, d->hd), k = head_view16(h.K, d->B, d->H, d->Nk2, d->hd),
                      v = head_view16(h.V, d->B, d->H, d->Nk2, d->hd),
                      dout = head_view16(h.O, d->B, d->H, d->Nq, d->hd);
    return m->kind->backward(&m->cfg.attention, &q, &k, &v, p, x, ov, &dout, t->lse, dqv, dkv, dvv, h.rest,
                             h.rest_bytes);
}

/* A packed call's attention: attn_flash_varlen_* on [total, H, hd] views of the projection
 * buffers (their bf16 copies in bf16 precision); lse [H, total_q]. dout NULL: the forward. */
static attn_status packed_attention(const char *fn, const attn_mha *m, const mha_dims *d, const attn_mha_args *a,
                                    const mha_acts *t, const mha_acts *g, const attn_sdpa_params *p0, void *scr,
                                    size_t wsb) {
    const attn_sdpa_params p = packed_params(m, *p0);
    const int64_t *cu_q = a->cu_seqlens_q, *cu_k = a->cu_seqlens_k ? a->cu_seqlens_k : a->cu_seqlens_q;
    const int64_t H = d->H, hd = d->hd, Nq = d->Nq, Nk = d->Nk;
    const int b16 = bf16_attention(m);
    mha_bf16 h = {NULL, NULL, NULL, NULL, scr, wsb};
    attn_status st;
    if (b16 && (st = round_acts(fn, d, scr, wsb, t, g ? g->O : NULL, &h))) return st;
    attn_tensor q = packed_view(b16 ? (void *)h.Q : t->Q, b16, Nq, H, hd),
                k = packed_view(b16 ? (void *)h.K : t->K, b16, Nk, H, hd),
                v = packed_view(b16 ? (void *)h.V : t->V, b16, Nk, H, hd), o = packed_view(t->O, 0, Nq, H, hd);
    attn_tensor lse = attn_tensor_2d(t->lse, H, Nq);
    if (!g)
        return attn_flash_varlen_forward(&q, &k, &v, cu_q, cu_k, a->batch, &p, &o, t->lse ? &lse : NULL, h.rest,
                                         h.rest_bytes);
    attn_tensor dout = packed_view(b16 ? (void *)h.O : g->O, b16, Nq, H, hd), dq = packed_view(g->Q, 0, Nq, H, hd),
                dk = packed_view(g->K, 0, Nk, H, hd), dv = packed_view(g->V, 0, Nk, H, hd);
    return attn_flash_varlen_backward(&q, &k, &v, cu_q, cu_k, a->batch, &p, &o, &dout, &lse, &dq, &dk, &dv, h.rest,
                                      h.rest_bytes);
}

static attn_status mha_forward_impl(const char *fn, attn_mha *m, const attn_mha_args *a, float *out, float *weights,
                                    nn_arena *saved, nn_arena *ws) {
    const mha_dims d = dims_of(m, a);
    const mha_masks mk = mask_plan(&d, a);
    mha_acts t;
    take_acts(saved ? saved : ws, m, &d, &t, saved != NULL);
    attn_sdpa_params p = sdpa_params(m, a);
    attn_btensor gm;
    const attn_kind_extra x = kind_extra(&d, a, &gm);
    mha_mask_views mv;
    build_masks(&d, a, &mk, ws, &mv, &p);
    const int64_t *pq, *pk;
    rope_positions(m, a, &d, ws, &pq, &pk);
    size_t wsb;
    void *scr = nn_rest(ws, &wsb);
    attn_status st;
    if ((st = attn_nn_linear_fwd(fn, a->query, m->wq, m->bq, t.Q, d.B * d.Nq, d.E, d.E, scr, wsb)) ||
        (st = project_kv(fn, m, &d, a->key, m->kdim, m->wk, m->bk, m->bias_k, t.K, scr, wsb)) ||
        (st = project_kv(fn, m, &d, a->value, m->vdim, m->wv, m->bv, m->bias_v, t.V, scr, wsb)))
        return st;
    attn_tensor qv = head_view(t.Q, d.B, d.H, d.Nq, d.hd), kv = head_view(t.K, d.B, d.H, d.Nk2, d.hd),
                vv = head_view(t.V, d.B, d.H, d.Nk2, d.hd), ov = head_view(t.O, d.B, d.H, d.Nq, d.hd);
    if (m->cfg.use_rope &&
        ((st = attn_rope_forward(&m->cfg.rope, &qv, 0, pq)) || (st = attn_rope_forward(&m->cfg.rope, &kv, 0, pk))))
        return attn_nn_wrap_error(st, fn);
    st = is_packed(a) ? packed_attention(fn, m, &d, a, &t, NULL, &p, scr, wsb)
                      : attention_fwd(fn, m, &d, &t, &qv, &kv, &vv, &p, &x, &ov, scr, wsb);
    if (st) return attn_nn_wrap_error(st, fn);
    if ((st = attn_nn_linear_fwd(fn, t.O, m->wo, m->bo, out, d.B * d.Nq, d.E, d.E, scr, wsb))) return st;
    attn_capture *cap = attn_nn_capture_of(a->capture);
    if (cap && (st = mha_capture(fn, m, &d, cap, &qv, &kv, &p, &x, p.dropout_p > 0))) return st;
    if (a->need_weights)
        return mha_weights(fn, m, &d, &qv, &kv, &p, &x, a->average_attn_weights, p.dropout_p > 0, weights, ws);
    return ATTN_OK;
}

attn_status attn_mha_forward(attn_mha *m, const attn_mha_args *a, float *out, float *weights, void *saved,
                             size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_mha_forward";
    attn_status st = check_args(fn, m, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, out);
    if (a->need_weights && !weights)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: need_weights is set but weights is NULL", fn);
    if (a->need_weights && !m->kind->weights)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: attention '%s' cannot return attention weights (need_weights)", fn,
                          m->kind->name);
    nn_arena sv, ws;
    if (saved && (st = attn_nn_arena_init(&sv, fn, "saved", saved, saved_bytes, attn_mha_saved_size(m, a)))) return st;
    if ((st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_mha_workspace_size(m, a))))
        return st;
    return mha_forward_impl(fn, m, a, out, weights, saved ? &sv : NULL, &ws);
}

/* ---- backward ---- */

/* Input gradient and parameter gradients of one in-projection; key/value rows of each batch are
 * the first Nk of Nk'. */
static attn_status project_bwd(const char *fn, const mha_dims *d, const float *x, int64_t in, const float *w,
                               const float *dy, int64_t rows_per_batch, int64_t dy_rows_per_batch, float *dx, int acc,
                               float *gw, float *gb, void *ws, size_t wsb) {
    if (rows_per_batch == dy_rows_per_batch)
        return attn_nn_linear_bwd(fn, x, w, dy, dx, acc, gw, gb, d->B * rows_per_batch, in, d->E, ws, wsb);
    for (int64_t b = 0; b < d->B; b++) {
        attn_status st = attn_nn_linear_bwd(fn, x + b * rows_per_batch * in, w, dy + b * dy_rows_per_batch * d->E,
                                            dx ? dx + b * rows_per_batch * in : NULL, acc, gw, gb, rows_per_batch, in,
                                            d->E, ws, wsb);
        if (st) return st;
    }
    return ATTN_OK;
}

static attn_status mha_backward_impl(const char *fn, attn_mha *m, const attn_mha_args *a, const float *dout, float *dq,
                                     float *dk, float *dv, int acc_q, int acc_kv, nn_arena *saved, nn_arena *ws) {
    const mha_dims d = dims_of(m, a);
    const mha_masks mk = mask_plan(&d, a);
    mha_acts t, g;
    take_acts(saved, m, &d, &t, 1);
    take_acts(ws, m, &d, &g, 0); /* g.O is dO, g.Q dQ, ... */
    attn_sdpa_params p = sdpa_params(m, a);
    attn_btensor gm;
    const attn_kind_extra x = kind_extra(&d, a, &gm);
    mha_mask_views mv;
    build_masks(&d, a, &mk, ws, &mv, &p);
    const int64_t *pq, *pk;
    rope_positions(m, a, &d, ws, &pq, &pk);
    size_t wsb;
    void *scr = nn_rest(ws, &wsb);
    attn_status st;
    if ((st = attn_nn_linear_bwd(fn, t.O, m->wo, dout, g.O, 0, m->gwo, m->gbo, d.B * d.Nq, d.E, d.E, scr, wsb)))
        return st;
    attn_tensor qv = head_view(t.Q, d.B, d.H, d.Nq, d.hd), kv = head_view(t.K, d.B, d.H, d.Nk2, d.hd),
                vv = head_view(t.V, d.B, d.H, d.Nk2, d.hd), ov = head_view(t.O, d.B, d.H, d.Nq, d.hd);
    attn_tensor dov = head_view(g.O, d.B, d.H, d.Nq, d.hd), dqv = head_view(g.Q, d.B, d.H, d.Nq, d.hd),
                dkv = head_view(g.K, d.B, d.H, d.Nk2, d.hd), dvv = head_view(g.V, d.B, d.H, d.Nk2, d.hd);
    st = is_packed(a) ? packed_attention(fn, m, &d, a, &t, &g, &p, scr, wsb)
                      : attention_bwd(fn, m, &d, &t, &g, &qv, &kv, &vv, &p, &x, &ov, &dov, &dqv, &dkv, &dvv, scr, wsb);
    if (st) return attn_nn_wrap_error(st, fn);
    /* Q and K were rotated after the projection: rotate their gradients back */
    if (m->cfg.use_rope &&
        ((st = attn_rope_backward(&m->cfg.rope, &dqv, 0, pq)) || (st = attn_rope_backward(&m->cfg.rope, &dkv, 0, pk))))
        return attn_nn_wrap_error(st, fn);
    if (m->cfg.add_bias_kv)
        for (int64_t b = 0; b < d.B; b++) /* batches in order: deterministic */
            for (int64_t e = 0; e < d.E; e++) {
                m->gbias_k[e] += g.K[(b * d.Nk2 + d.Nk) * d.E + e];
                m->gbias_v[e] += g.V[(b * d.Nk2 + d.Nk) * d.E + e];
            }
    const int acc_k = acc_kv || (dk && dk == dq);
    const int acc_v = acc_kv || (dv && (dv == dq || dv == dk));
    if ((st = project_bwd(fn, &d, a->query, d.E, m->wq, g.Q, d.Nq, d.Nq, dq, acc_q, m->gwq, m->gbq, scr, wsb)) ||
        (st = project_bwd(fn, &d, a->key, m->kdim, m->wk, g.K, d.Nk, d.Nk2, dk, acc_k, m->gwk, m->gbk, scr, wsb)) ||
        (st = project_bwd(fn, &d, a->value, m->vdim, m->wv, g.V, d.Nk, d.Nk2, dv, acc_v, m->gwv, m->gbv, scr, wsb)))
        return st;
    return ATTN_OK;
}

static attn_status backward_entry(const char *fn, attn_mha *m, const attn_mha_args *a, const float *dout, float *dquery,
                                  float *dkey, float *dvalue, int acc_q, int acc_kv, const void *saved,
                                  size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    attn_status st = check_args(fn, m, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, saved);
    if ((dkey && dkey == dquery && (a->nk != a->nq || m->kdim != m->E)) ||
        (dvalue && dvalue == dquery && (a->nk != a->nq || m->vdim != m->E)) ||
        (dvalue && dvalue == dkey && m->vdim != m->kdim))
        return attn_error(ATTN_ERR_SHAPE,
                          "%s: dquery, dkey and dvalue may share a buffer only when their shapes agree "
                          "(query [%lld, %lld, %lld], key [%lld, %lld, %lld], value [%lld, %lld, %lld])",
                          fn, (long long)a->batch, (long long)a->nq, (long long)m->E, (long long)a->batch,
                          (long long)a->nk, (long long)m->kdim, (long long)a->batch, (long long)a->nk,
                          (long long)m->vdim);
    nn_arena sv, ws;
    if ((st = attn_nn_arena_init(&sv, fn, "saved", (void *)saved, saved_bytes, attn_mha_saved_size(m, a))) ||
        (st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes, attn_mha_workspace_size(m, a))))
        return st;
    return mha_backward_impl(fn, m, a, dout, dquery, dkey, dvalue, acc_q, acc_kv, &sv, &ws);
}

attn_status attn_mha_backward(attn_mha *m, const attn_mha_args *a, const float *dout, float *dquery, float *dkey,
                              float *dvalue, const void *saved, size_t saved_bytes, void *workspace,
                              size_t workspace_bytes) {
    return backward_entry("attn_mha_backward", m, a, dout, dquery, dkey, dvalue, 0, 0, saved, saved_bytes, workspace,
                          workspace_bytes);
}

attn_status attn_nn_mha_backward(attn_mha *m, const attn_mha_args *a, const float *dout, float *dq, float *dk,
                                 float *dv, int acc_q, int acc_kv, const void *saved, size_t saved_bytes, void *ws,
                                 size_t ws_bytes) {
    return backward_entry("attn_mha_backward", m, a, dout, dq, dk, dv, acc_q, acc_kv, saved, saved_bytes, ws, ws_bytes);
}

/* ---- incremental decoding ----
 * A step projects the n new query rows (and, appending, their keys and values), then hands them to
 * the attention kind's step. Kinds that keep keys and values get the projections written into the
 * cache rows length .. length + n - 1 and views over the whole cache:
 *   K, V views [B, H, L, hd] with batch stride capacity * E;  bottom-right causality
 *   (j <= i + L - n) is exactly "new row i sits at position L - n + i".
 * Recurrent kinds get the new rows (from the workspace) and update their state in the cache. */

size_t attn_kv_cache_size(int64_t batch, int64_t capacity, int64_t dim) {
    if (batch < 1 || capacity < 1 || dim < 1) return 0;
    return nn_add(NN_SLACK, nn_mul(2, nn_fblock(nn_mul(nn_mul((size_t)batch, (size_t)capacity), (size_t)dim))));
}

attn_status attn_kv_cache_init(attn_kv_cache *c, void *buffer, size_t bytes, int64_t batch, int64_t capacity,
                               int64_t dim) {
    static const char fn[] = "attn_kv_cache_init";
    ATTN_CHECK_NOT_NULL(fn, c);
    if (batch < 1 || capacity < 1 || dim < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch (%lld), capacity (%lld) and dim (%lld) must be >= 1",
                          fn, (long long)batch, (long long)capacity, (long long)dim);
    nn_arena ar;
    attn_status st =
        attn_nn_arena_init(&ar, fn, "cache buffer", buffer, bytes, attn_kv_cache_size(batch, capacity, dim));
    if (st) return st;
    const size_t n = (size_t)batch * (size_t)capacity * (size_t)dim;
    memset(c, 0, sizeof *c);
    c->k = nn_takef(&ar, n);
    c->v = nn_takef(&ar, n);
    c->batch = batch;
    c->capacity = capacity;
    c->dim = dim;
    c->length = 0;
    return ATTN_OK;
}

attn_status attn_kv_cache_reset(attn_kv_cache *c) {
    ATTN_CHECK_NOT_NULL("attn_kv_cache_reset", c);
    c->length = 0;
    if (c->state) memset(c->state, 0, c->state_floats * sizeof(float));
    return ATTN_OK;
}

static size_t state_floats_of(const attn_mha *m, int64_t batch) {
    return m->kind->state_floats ? m->kind->state_floats(&m->cfg.attention, batch, m->H, m->hd, m->hd) : 0;
}

size_t attn_mha_cache_size(const attn_mha *m, int64_t batch, int64_t capacity) {
    if (!m || batch < 1 || capacity < 1) return 0;
    if (!m->kind->state_floats) return attn_kv_cache_size(batch, capacity, m->E);
    return nn_add(NN_SLACK, nn_fblock(state_floats_of(m, batch)));
}

attn_status attn_mha_cache_init(const attn_mha *m, attn_kv_cache *c, void *buffer, size_t bytes, int64_t batch,
                                int64_t capacity) {
    static const char fn[] = "attn_mha_cache_init";
    ATTN_CHECK_NOT_NULL(fn, m);
    if (!m->kind->state_floats) return attn_kv_cache_init(c, buffer, bytes, batch, capacity, m->E);
    ATTN_CHECK_NOT_NULL(fn, c);
    if (batch < 1 || capacity < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch (%lld) and capacity (%lld) must be >= 1", fn,
                          (long long)batch, (long long)capacity);
    nn_arena ar;
    attn_status st =
        attn_nn_arena_init(&ar, fn, "cache buffer", buffer, bytes, attn_mha_cache_size(m, batch, capacity));
    if (st) return st;
    memset(c, 0, sizeof *c);
    c->state_floats = state_floats_of(m, batch);
    c->state = nn_takef(&ar, c->state_floats);
    memset(c->state, 0, c->state_floats * sizeof(float));
    c->batch = batch;
    c->capacity = capacity;
    c->dim = m->E;
    return ATTN_OK;
}

static attn_status check_cache(const char *fn, const attn_mha *m, const attn_kv_cache *c, int64_t batch) {
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, c);
    const int kv = !m->kind->state_floats;
    if ((kv ? (!c->k || !c->v) : (!c->state || c->state_floats != state_floats_of(m, batch))) || c->batch != batch ||
        c->dim != m->E || c->length < 0 || c->length > c->capacity)
        return attn_error(ATTN_ERR_SHAPE,
                          "%s: cache [batch %lld, capacity %lld, dim %lld, length %lld%s] does not fit batch %lld, "
                          "embed_dim %lld, attention '%s' (use attn_mha_cache_init)",
                          fn, (long long)c->batch, (long long)c->capacity, (long long)c->dim, (long long)c->length,
                          c->state ? ", recurrent state" : "", (long long)batch, (long long)m->E, m->kind->name);
    if (m->cfg.add_bias_kv || m->cfg.add_zero_attn)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: a key/value cache does not support add_bias_kv or add_zero_attn",
                          fn);
    return ATTN_OK;
}

/* Project x [B, n, in] into rows row0 .. row0 + n - 1 of a buffer [B, rows_per_batch, E]. */
static attn_status project_into(const char *fn, const attn_mha *m, int64_t rows_per_batch, const float *x,
                                int64_t batch, int64_t n, int64_t in, const float *w, const float *b, float *dst,
                                int64_t row0, void *ws, size_t wsb) {
    for (int64_t bb = 0; bb < batch; bb++) {
        attn_status st = attn_nn_linear_fwd(fn, x + bb * n * in, w, b, dst + (bb * rows_per_batch + row0) * m->E, n, in,
                                            m->E, ws, wsb);
        if (st) return st;
    }
    return ATTN_OK;
}

/* Recurrent kinds: the projected rows [B, n, E] staged in the workspace, then absorbed. */
static size_t staged_bytes(const attn_mha *m, int64_t batch, int64_t n) {
    if (!m->kind->state_floats) return 0;
    return nn_mul(2, nn_fblock(nn_mul(nn_mul((size_t)batch, (size_t)n), (size_t)m->E)));
}

size_t attn_mha_cache_fill_workspace_size(const attn_mha *m, int64_t batch, int64_t nk) {
    if (!m || batch < 1 || nk < 1) return 0;
    size_t s = nn_max(attn_nn_linear_ws(nk, m->kdim, m->E), attn_nn_linear_ws(nk, m->vdim, m->E));
    if (m->kind->state_floats) {
        attn_tensor k = head_view(NULL, batch, m->H, nk, m->hd);
        s = nn_add(nn_add(NN_SLACK, staged_bytes(m, batch, nk)),
                   nn_max(s, m->kind->step_workspace_size(&m->cfg.attention, NULL, &k, &k)));
    }
    return s;
}

attn_status attn_mha_cache_fill(attn_mha *m, attn_kv_cache *c, const float *key, const float *value, int64_t nk,
                                void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_mha_cache_fill";
    attn_status st = check_cache(fn, m, c, c ? c->batch : 0);
    if (st) return st;
    if (nk < 1 || nk > c->capacity)
        return attn_error(ATTN_ERR_SHAPE, "%s: nk = %lld must be in [1, capacity = %lld]", fn, (long long)nk,
                          (long long)c->capacity);
    if (!key || !value) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: key and value are required", fn);
    nn_arena ws;
    if ((st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                 attn_mha_cache_fill_workspace_size(m, c->batch, nk))))
        return st;
    const int64_t B = c->batch;
    if (!m->kind->state_floats) {
        if ((st = project_into(fn, m, c->capacity, key, B, nk, m->kdim, m->wk, m->bk, c->k, 0, workspace,
                               workspace_bytes)) ||
            (st = project_into(fn, m, c->capacity, value, B, nk, m->vdim, m->wv, m->bv, c->v, 0, workspace,
                               workspace_bytes)))
            return st;
    } else { /* the memory's rows absorbed into the state, no query */
        attn_kv_cache_reset(c);
        float *K = nn_takef(&ws, (size_t)(B * nk * m->E)), *V = nn_takef(&ws, (size_t)(B * nk * m->E));
        size_t wsb;
        void *scr = nn_rest(&ws, &wsb);
        if ((st = attn_nn_linear_fwd(fn, key, m->wk, m->bk, K, B * nk, m->kdim, m->E, scr, wsb)) ||
            (st = attn_nn_linear_fwd(fn, value, m->wv, m->bv, V, B * nk, m->vdim, m->E, scr, wsb)))
            return st;
        attn_tensor kv = head_view(K, B, m->H, nk, m->hd), vv = head_view(V, B, m->H, nk, m->hd);
        attn_kind_step s = {&m->cfg.attention, NULL, &kv, &vv, NULL, 0, NULL, c->state};
        if ((st = m->kind->step(&s, scr, wsb))) return attn_nn_wrap_error(st, fn);
    }
    c->length = nk;
    return ATTN_OK;
}

size_t attn_mha_step_workspace_size(const attn_mha *m, int64_t batch, int64_t n, int64_t length) {
    if (!m || batch < 1 || n < 1 || length < 1) return 0;
    const size_t rows = nn_mul((size_t)batch, (size_t)n);
    size_t s = nn_add(NN_SLACK, nn_mul(2, nn_fblock(nn_mul(rows, (size_t)m->E))));
    s = nn_add(s, nn_add(nn_block(nn_mul((size_t)batch, (size_t)length)), staged_bytes(m, batch, n)));
    const int kv = !m->kind->state_floats;
    attn_tensor q = head_view(NULL, batch, m->H, n, m->hd), k = head_view(NULL, batch, m->H, kv ? length : n, m->hd);
    size_t scr = nn_max(attn_nn_linear_ws(batch * n, m->E, m->E), attn_nn_linear_ws(n, m->E, m->E));
    scr = nn_max(scr, m->kind->step_workspace_size(&m->cfg.attention, &q, &k, &k));
    return nn_add(s, scr);
}

attn_status attn_mha_forward_step(attn_mha *m, attn_kv_cache *c, const attn_mha_step_args *a, float *out,
                                  void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_mha_forward_step";
    ATTN_CHECK_NOT_NULL(fn, a);
    attn_status st = check_cache(fn, m, c, a->batch);
    if (st) return st;
    if (a->n < 1 || !a->query || !out)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: need n >= 1 (got %lld), query and out", fn, (long long)a->n);
    if (m->cfg.use_rope && !a->append)
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: rotary embeddings are for self-attention steps (append)", fn);
    if (a->append && (m->kdim != m->E || m->vdim != m->E))
        return attn_error(ATTN_ERR_UNSUPPORTED, "%s: appending needs kdim == vdim == embed_dim (%lld, %lld, %lld)", fn,
                          (long long)m->kdim, (long long)m->vdim, (long long)m->E);
    const int64_t L = c->length + (a->append ? a->n : 0);
    if (L > c->capacity)
        return attn_error(ATTN_ERR_SHAPE, "%s: %lld cached + %lld new positions exceed the capacity %lld", fn,
                          (long long)c->length, (long long)a->n, (long long)c->capacity);
    if (L < 1) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: the cache is empty and nothing is appended", fn);
    if (a->causal && L < a->n)
        return attn_error(ATTN_ERR_SHAPE, "%s: causal step with %lld rows over %lld positions", fn, (long long)a->n,
                          (long long)L);
    nn_arena ws;
    if ((st = attn_nn_arena_init(&ws, fn, "workspace", workspace, workspace_bytes,
                                 attn_mha_step_workspace_size(m, a->batch, a->n, L))))
        return st;
    const int64_t B = a->batch, n = a->n, E = m->E;
    const int kv_kind = !m->kind->state_floats;
    float *Q = nn_takef(&ws, (size_t)(B * n * E)), *O = nn_takef(&ws, (size_t)(B * n * E));
    uint8_t *km = attn_nn_take(&ws, (size_t)(B * L));
    /* where the new keys and values go: the cache rows, or staged for a recurrent kind */
    float *Kd = kv_kind ? c->k : nn_takef(&ws, (size_t)(B * n * E)),
          *Vd = kv_kind ? c->v : nn_takef(&ws, (size_t)(B * n * E));
    const int64_t rows_per_batch = kv_kind ? c->capacity : n, row0 = kv_kind ? c->length : 0;
    size_t wsb;
    void *scr = nn_rest(&ws, &wsb);
    if ((st = attn_nn_linear_fwd(fn, a->query, m->wq, m->bq, Q, B * n, E, E, scr, wsb))) return st;
    if (a->append) {
        if ((st = project_into(fn, m, rows_per_batch, a->query, B, n, E, m->wk, m->bk, Kd, row0, scr, wsb)) ||
            (st = project_into(fn, m, rows_per_batch, a->query, B, n, E, m->wv, m->bv, Vd, row0, scr, wsb)))
            return st;
        if (m->cfg.use_rope) { /* the new queries and keys sit at positions length .. length + n - 1 */
            attn_tensor qr = head_view(Q, B, m->H, n, m->hd), kr = head_view(Kd + row0 * E, B, m->H, n, m->hd);
            kr.stride[0] = rows_per_batch * E;
            if ((st = attn_rope_forward(&m->cfg.rope, &qr, c->length, NULL)) ||
                (st = attn_rope_forward(&m->cfg.rope, &kr, c->length, NULL)))
                return attn_nn_wrap_error(st, fn);
        }
        c->length = L;
    }
    attn_btensor kmv;
    if (a->key_padding_mask) {
        for (int64_t i = 0; i < B * L; i++) km[i] = (uint8_t)!a->key_padding_mask[i];
        kmv = attn_btensor_2d(km, B, L);
    }
    attn_tensor qv = head_view(Q, B, m->H, n, m->hd), ov = head_view(O, B, m->H, n, m->hd);
    const int64_t kn = kv_kind ? L : n;
    attn_tensor kv = head_view(Kd, B, m->H, kn, m->hd), vv = head_view(Vd, B, m->H, kn, m->hd);
    kv.stride[0] = vv.stride[0] = rows_per_batch * E;
    const int staged = kv_kind || a->append;
    attn_kind_step s = {&m->cfg.attention,
                        &qv,
                        staged ? &kv : NULL,
                        staged ? &vv : NULL,
                        &ov,
                        a->causal,
                        a->key_padding_mask ? &kmv : NULL,
                        c->state};
    if ((st = m->kind->step(&s, scr, wsb))) return attn_nn_wrap_error(st, fn);
    return attn_nn_linear_fwd(fn, O, m->wo, m->bo, out, B * n, E, E, scr, wsb);
}
