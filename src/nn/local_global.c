/* Local + global attention: the seed's LocalGlobalAttention with its mask corrected.
 *
 *   G = global_attn(x, x, x)          full softmax self-attention (flash kind)
 *   L = local_attn(x, x, x)           the window kind: key j seen from query i when |i - j| <= w
 *   C = G + L,  out = C Wp^T + bp     projection (nn.Linear)
 * Backward from dout: dC = dout Wp, dWp += dout^T C, dbp += sum dout; dx = (dG/dx)^T dC +
 * (dL/dx)^T dC (the two attentions' backwards, the second accumulating into dx).
 * Both attentions are attn_mha with separate projections (q_proj, k_proj, v_proj, out_proj), so
 * the seed's W_q / W_k / W_v / W_o are one name map away. Dropout sites: global_attn's weights
 * offset + 0, local_attn's offset + 1. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nn_internal.h"

struct attn_local_global {
    attn_local_global_config cfg;
    attn_mha *global, *local;
    nn_store store; /* projection.weight, projection.bias */
    float *wp, *bp, *gwp, *gbp;
    attn_params *list;
};

attn_local_global_config attn_local_global_config_default(int64_t d_model, int64_t num_heads, int64_t local_window) {
    attn_local_global_config c;
    memset(&c, 0, sizeof c);
    c.d_model = d_model;
    c.num_heads = num_heads;
    c.local_window = local_window;
    c.dropout = 0.1f;
    return c;
}

attn_local_global_args attn_local_global_args_default(void) {
    attn_local_global_args a;
    memset(&a, 0, sizeof a);
    return a;
}

void attn_local_global_free(attn_local_global *m) {
    if (!m) return;
    attn_nn_params_free(m->list);
    attn_nn_store_free(&m->store);
    attn_mha_free(m->global);
    attn_mha_free(m->local);
    attn__free(m);
}

attn_status attn_local_global_create(const attn_local_global_config *cfg, attn_local_global **out) {
    static const char fn[] = "attn_local_global_create";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, cfg);
    const int64_t E = cfg->d_model;
    if (E < 1 || cfg->num_heads < 1 || E % cfg->num_heads != 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: d_model (%lld) must be a positive multiple of num_heads (%lld)", fn, (long long)E,
                          (long long)cfg->num_heads);
    if (cfg->local_window < 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: local_window must be >= 0 (got %lld)", fn,
                          (long long)cfg->local_window);
    attn_local_global *m = attn__calloc(1, sizeof *m);
    if (!m) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    m->cfg = *cfg;
    attn_mha_config gc = attn_mha_config_default(E, cfg->num_heads), lc;
    gc.dropout = cfg->dropout;
    gc.separate_projections = 1;
    lc = gc;
    lc.attention.kind = ATTN_ATTENTION_WINDOW;
    lc.attention.window = cfg->local_window;
    attn_status st;
    if ((st = attn_mha_create(&lc, &m->local)) || (st = attn_mha_create(&gc, &m->global))) {
        attn_local_global_free(m);
        return attn_nn_wrap_error(st, fn);
    }
    const double bound = 1.0 / sqrt((double)E);
    const nn_pdesc desc[2] = {
        {"projection.weight", 2, {E, E, 0, 0}, NN_INIT_UNIFORM, bound, 0},
        {"projection.bias", 1, {E, 0, 0, 0}, NN_INIT_UNIFORM, bound, 0},
    };
    float *p[2], *g[2];
    if ((st = attn_nn_store_create(&m->store, fn, desc, 2, p, g))) {
        attn_local_global_free(m);
        return st;
    }
    m->wp = p[0], m->bp = p[1], m->gwp = g[0], m->gbp = g[1];
    /* PyTorch's registration order in the seed: local_attn, global_attn, projection */
    if (!(m->list = attn_nn_params_new())) {
        attn_local_global_free(m);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    if ((st = attn_nn_params_append(m->list, fn, attn_mha_params(m->local), "local_attn.")) ||
        (st = attn_nn_params_append(m->list, fn, attn_mha_params(m->global), "global_attn.")) ||
        (st = attn_nn_params_append(m->list, fn, m->store.list, NULL))) {
        attn_local_global_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

const attn_params *attn_local_global_params(const attn_local_global *m) { return m ? m->list : NULL; }
const attn_local_global_config *attn_local_global_get_config(const attn_local_global *m) { return m ? &m->cfg : NULL; }

/* ---- calls ---- */

/* The self-attention arguments of one branch (k = 0 global, 1 local). */
static attn_mha_args branch_args(const attn_local_global_args *a, int k) {
    attn_mha_args m = attn_mha_args_default();
    m.batch = a->batch;
    m.nq = m.nk = a->n;
    m.query = m.key = m.value = a->x;
    m.training = a->training;
    m.seed = a->seed;
    m.offset = a->offset + (uint64_t)k;
    m.capture = a->capture;
    return m;
}

static attn_status check_args(const char *fn, const attn_local_global *m, const attn_local_global_args *a) {
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, a);
    if (a->batch < 1 || a->n < 1)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: batch (%lld) and n (%lld) must be >= 1", fn,
                          (long long)a->batch, (long long)a->n);
    if (!a->x) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: x is required", fn);
    return ATTN_OK;
}

static size_t rows_floats(const attn_local_global *m, const attn_local_global_args *a) {
    return nn_mul(nn_mul((size_t)a->batch, (size_t)a->n), (size_t)m->cfg.d_model);
}

/* saved: global_attn's, local_attn's, then C = G + L [B, N, E]. */
size_t attn_local_global_saved_size(const attn_local_global *m, const attn_local_global_args *a) {
    if (!m || !a || a->batch < 1 || a->n < 1) return 0;
    const attn_mha_args g = branch_args(a, 0), l = branch_args(a, 1);
    size_t s = nn_add(nn_block(attn_mha_saved_size(m->global, &g)), nn_block(attn_mha_saved_size(m->local, &l)));
    return nn_add(nn_add(s, nn_fblock(rows_floats(m, a))), NN_SLACK);
}

/* workspace: two [B, N, E] buffers (L and, without saved, C; dC in the backward), then the
 * largest of the attentions' and the projection's scratch. */
size_t attn_local_global_workspace_size(const attn_local_global *m, const attn_local_global_args *a) {
    if (!m || !a || a->batch < 1 || a->n < 1) return 0;
    const attn_mha_args g = branch_args(a, 0), l = branch_args(a, 1);
    const int64_t R = a->batch * a->n, E = m->cfg.d_model;
    size_t inner = nn_max(attn_mha_workspace_size(m->global, &g), attn_mha_workspace_size(m->local, &l));
    inner = nn_max(inner, attn_nn_linear_ws(R, E, E));
    return nn_add(nn_add(nn_mul(nn_fblock(rows_floats(m, a)), 2), inner), NN_SLACK);
}

typedef struct lg_saved {
    void *g, *l;
    size_t gb, lb;
    float *c;
} lg_saved;

/* Carve saved (nullable: then only the sizes are filled and c is NULL). */
static attn_status carve_saved(const char *fn, const attn_local_global *m, const attn_local_global_args *a, void *saved,
                               size_t bytes, lg_saved *s) {
    const attn_mha_args g = branch_args(a, 0), l = branch_args(a, 1);
    memset(s, 0, sizeof *s);
    if (!saved) return ATTN_OK;
    nn_arena ar;
    attn_status st =
        attn_nn_arena_init(&ar, fn, "attn_local_global_saved", saved, bytes, attn_local_global_saved_size(m, a));
    if (st) return st;
    s->gb = attn_mha_saved_size(m->global, &g);
    s->lb = attn_mha_saved_size(m->local, &l);
    s->g = attn_nn_take(&ar, s->gb);
    s->l = attn_nn_take(&ar, s->lb);
    s->c = nn_takef(&ar, rows_floats(m, a));
    return ATTN_OK;
}

attn_status attn_local_global_forward(attn_local_global *m, const attn_local_global_args *a, float *out, void *saved,
                                      size_t saved_bytes, void *workspace, size_t workspace_bytes) {
    static const char fn[] = "attn_local_global_forward";
    attn_status st = check_args(fn, m, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, out);
    lg_saved s;
    nn_arena ws;
    if ((st = carve_saved(fn, m, a, saved, saved_bytes, &s)) ||
        (st = attn_nn_arena_init(&ws, fn, "attn_local_global_workspace", workspace, workspace_bytes,
                                 attn_local_global_workspace_size(m, a))))
        return st;
    const size_t n = rows_floats(m, a);
    float *L = nn_takef(&ws, n), *C = nn_takef(&ws, n);
    if (s.c) C = s.c;
    size_t rb;
    void *rest = nn_rest(&ws, &rb);
    const attn_mha_args g = branch_args(a, 0), l = branch_args(a, 1);
    size_t mark = attn_nn_capture_push(a->capture, "global_attn");
    st = attn_mha_forward(m->global, &g, C, NULL, s.g, s.gb, rest, rb);
    attn_nn_capture_pop(a->capture, mark);
    if (st) return attn_nn_wrap_error(st, fn);
    mark = attn_nn_capture_push(a->capture, "local_attn");
    st = attn_mha_forward(m->local, &l, L, NULL, s.l, s.lb, rest, rb);
    attn_nn_capture_pop(a->capture, mark);
    if (st) return attn_nn_wrap_error(st, fn);
    for (size_t i = 0; i < n; i++) C[i] += L[i];
    const int64_t E = m->cfg.d_model;
    return attn_nn_linear_fwd(fn, C, m->wp, m->bp, out, a->batch * a->n, E, E, rest, rb);
}

attn_status attn_local_global_backward(attn_local_global *m, const attn_local_global_args *a, const float *dout,
                                       float *dx, const void *saved, size_t saved_bytes, void *workspace,
                                       size_t workspace_bytes) {
    static const char fn[] = "attn_local_global_backward";
    attn_status st = check_args(fn, m, a);
    if (st) return st;
    ATTN_CHECK_NOT_NULL(fn, dout);
    ATTN_CHECK_NOT_NULL(fn, saved);
    lg_saved s;
    nn_arena ws;
    if ((st = carve_saved(fn, m, a, (void *)saved, saved_bytes, &s)) ||
        (st = attn_nn_arena_init(&ws, fn, "attn_local_global_workspace", workspace, workspace_bytes,
                                 attn_local_global_workspace_size(m, a))))
        return st;
    const size_t n = rows_floats(m, a);
    float *dC = nn_takef(&ws, n);
    (void)nn_takef(&ws, n);
    size_t rb;
    void *rest = nn_rest(&ws, &rb);
    const int64_t E = m->cfg.d_model;
    if ((st = attn_nn_linear_bwd(fn, s.c, m->wp, dout, dC, 0, m->gwp, m->gbp, a->batch * a->n, E, E, rest, rb)))
        return st;
    attn_mha_args g = branch_args(a, 0), l = branch_args(a, 1);
    g.capture = l.capture = NULL; /* the forward alone records weights */
    /* dx: the global attention's gradient (query, key and value are all x), then the local's added */
    if (dx) {
        if ((st = attn_nn_mha_backward(m->global, &g, dC, dx, dx, dx, 0, 0, s.g, s.gb, rest, rb)) ||
            (st = attn_nn_mha_backward(m->local, &l, dC, dx, dx, dx, 1, 1, s.l, s.lb, rest, rb)))
            return attn_nn_wrap_error(st, fn);
    } else {
        if ((st = attn_nn_mha_backward(m->global, &g, dC, NULL, NULL, NULL, 0, 0, s.g, s.gb, rest, rb)) ||
            (st = attn_nn_mha_backward(m->local, &l, dC, NULL, NULL, NULL, 0, 0, s.l, s.lb, rest, rb)))
            return attn_nn_wrap_error(st, fn);
    }
    return ATTN_OK;
}
