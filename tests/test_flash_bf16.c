/* bf16 flash attention: on PyTorch's fixture (tests/parity/gen_flash_bf16.py) the error against
 * the float64 attention of the same bf16 inputs is within 2x of PyTorch's own bf16 attention
 * error, for every mask kind, every ISA, float and bf16 output; the AVX-512 kernels (vdpbf16ps,
 * or its FMA emulation without AVX512-BF16) close to the portable emulation; strided views;
 * bitwise identical for 1..3 threads; on AVX512-BF16 CPUs the AVX-512F emulation of its
 * instructions gives the same bits end to end. Without AVX-512 only the portable kernels run (a
 * notice). */
#include <fenv.h>
#include <string.h>

#include "kernels/bf16_internal.h"
#include "attention/flash_internal.h"
#include "test_util.h"

typedef struct {
    int64_t qs[4], ks[4], vs[4];
    uint16_t *q, *k, *v;
    attn_sdpa_params p;
} bcase;

static uint16_t *fx_bf16(const attn_safetensors *st, const char *name, size_t *n) {
    float *f = fx_floats(st, name, n);
    if (!f) return NULL;
    uint16_t *h = xmalloc(2 * *n);
    for (size_t i = 0; i < *n; i++) h[i] = (uint16_t)(int16_t)f[i]; /* I16 holding the bit patterns */
    free(f);
    return h;
}

/* Output (float) of the bf16 forward; out_bf16 asks for a bf16 output (widened here). [B,N,H,d]
 * storage when bnhd. */
static float *run_bf16(const bcase *c, int out_bf16, int bnhd) {
    const int64_t *qs = c->qs, *ks = c->ks, *vs = c->vs;
    const size_t no = (size_t)(qs[0] * qs[1] * qs[2] * vs[3]);
    attn_tensor tq = attn_tensor_4d_typed(c->q, ATTN_TYPE_BF16, qs[0], qs[1], qs[2], qs[3]);
    attn_tensor tk = attn_tensor_4d_typed(c->k, ATTN_TYPE_BF16, ks[0], ks[1], ks[2], ks[3]);
    attn_tensor tv = attn_tensor_4d_typed(c->v, ATTN_TYPE_BF16, vs[0], vs[1], vs[2], vs[3]);
    uint16_t *pq = NULL, *pk = NULL, *pv = NULL;
    if (bnhd) { /* the same values stored [B, N, H, d]: permuted strides */
        const attn_tensor *src[3] = {&tq, &tk, &tv};
        uint16_t **dst[3] = {&pq, &pk, &pv};
        attn_tensor *views[3] = {&tq, &tk, &tv};
        for (int t = 0; t < 3; t++) {
            const int64_t *s = src[t]->shape;
            uint16_t *x = xmalloc(2 * (size_t)(s[0] * s[1] * s[2] * s[3]));
            attn_tensor w = *src[t];
            w.stride[3] = 1;
            w.stride[1] = s[3];
            w.stride[2] = s[1] * s[3];
            w.stride[0] = s[1] * s[2] * s[3];
            for (int64_t b = 0; b < s[0]; b++)
                for (int64_t h = 0; h < s[1]; h++)
                    for (int64_t i = 0; i < s[2]; i++)
                        for (int64_t e = 0; e < s[3]; e++)
                            x[b * w.stride[0] + h * w.stride[1] + i * w.stride[2] + e] =
                                src[t]
                                    ->data16[b * src[t]->stride[0] + h * src[t]->stride[1] + i * src[t]->stride[2] + e];
            w.data16 = x;
            *dst[t] = x;
            *views[t] = w;
        }
    }
    float *o = xmalloc(sizeof(float) * no);
    uint16_t *oh = xmalloc(2 * no);
    attn_tensor to = out_bf16 ? attn_tensor_4d_typed(oh, ATTN_TYPE_BF16, qs[0], qs[1], qs[2], vs[3])
                              : attn_tensor_4d(o, qs[0], qs[1], qs[2], vs[3]);
    const size_t wsb = attn_flash_workspace_size(&tq, &tk, &tv);
    void *ws = xmalloc(wsb);
    CHECK_OK(attn_flash_forward(&tq, &tk, &tv, &c->p, &to, NULL, ws, wsb));
    if (out_bf16)
        for (size_t i = 0; i < no; i++) o[i] = attn_bf16_to_f32(oh[i]);
    free(ws);
    free(oh);
    free(pq);
    free(pk);
    free(pv);
    return o;
}

/* Output, lse and gradients (dout from a fixed stream) of one bf16 forward + backward, concatenated.
 * dq_mode 1: no dQ asked for (its part left 0); 2: dQ into a view with column stride 2 (copied
 * back to rows). */
static float *fwd_bwd_bf16_dq(const bcase *c, size_t *count, int dq_mode) {
    const int64_t *qs = c->qs, *ks = c->ks, *vs = c->vs;
    const size_t nq = (size_t)(qs[0] * qs[1] * qs[2] * qs[3]), nk = (size_t)(ks[0] * ks[1] * ks[2] * ks[3]),
                 nv = (size_t)(vs[0] * vs[1] * vs[2] * vs[3]), no = (size_t)(qs[0] * qs[1] * qs[2] * vs[3]),
                 nl = (size_t)(qs[0] * qs[1] * qs[2]);
    *count = no + nl + nq + nk + nv;
    float *r = xmalloc(sizeof(float) * *count), *o = r, *l = o + no, *g = l + nl;
    uint16_t *go = xmalloc(2 * no);
    test_rng rng = rng_seeded(99);
    for (size_t i = 0; i < no; i++) go[i] = attn_f32_to_bf16((float)rng_normal(&rng));
    attn_tensor hq = attn_tensor_4d_typed(c->q, ATTN_TYPE_BF16, qs[0], qs[1], qs[2], qs[3]);
    attn_tensor hk = attn_tensor_4d_typed(c->k, ATTN_TYPE_BF16, ks[0], ks[1], ks[2], ks[3]);
    attn_tensor hv = attn_tensor_4d_typed(c->v, ATTN_TYPE_BF16, vs[0], vs[1], vs[2], vs[3]);
    attn_tensor hgo = attn_tensor_4d_typed(go, ATTN_TYPE_BF16, qs[0], qs[1], qs[2], vs[3]);
    attn_tensor to = attn_tensor_4d(o, qs[0], qs[1], qs[2], vs[3]), tl = attn_tensor_3d(l, qs[0], qs[1], qs[2]);
    attn_tensor gq = attn_tensor_4d(g, qs[0], qs[1], qs[2], qs[3]),
                gk = attn_tensor_4d(g + nq, ks[0], ks[1], ks[2], ks[3]),
                gv = attn_tensor_4d(g + nq + nk, vs[0], vs[1], vs[2], vs[3]);
    const size_t wsb = attn_flash_workspace_size(&hq, &hk, &hv);
    void *ws = xmalloc(wsb);
    float *wide = dq_mode == 2 ? xmalloc(2 * sizeof(float) * nq) : NULL;
    attn_tensor gqw = gq;
    if (wide) {
        gqw.data = wide;
        for (int a = 0; a < 4; a++) gqw.stride[a] = 2 * gq.stride[a];
    }
    memset(g, 0, sizeof(float) * nq);
    CHECK_OK(attn_flash_forward(&hq, &hk, &hv, &c->p, &to, &tl, ws, wsb));
    CHECK_OK(attn_flash_backward(&hq, &hk, &hv, &c->p, &to, &hgo, &tl,
                                 dq_mode == 1 ? NULL
                                 : wide       ? &gqw
                                              : &gq,
                                 &gk, &gv, ws, wsb));
    if (wide)
        for (size_t i = 0; i < nq; i++) g[i] = wide[2 * i];
    free(wide);
    free(ws);
    free(go);
    return r;
}

static float *fwd_bwd_bf16(const bcase *c, size_t *count) { return fwd_bwd_bf16_dq(c, count, 0); }

/* The backward without dQ, and with dQ through a strided view (the bf16 path then runs its query
 * blocks one at a time, else several at once): dK and dV, and dQ, bitwise as the plain call. */
static void check_backward_dq_views(const bcase *c, const char *cname) {
    size_t n0, n1, n2;
    const size_t nq = (size_t)(c->qs[0] * c->qs[1] * c->qs[2] * c->qs[3]),
                 lead = (size_t)(c->qs[0] * c->qs[1] * c->qs[2] * (c->vs[3] + 1));
    float *r0 = fwd_bwd_bf16_dq(c, &n0, 0), *r1 = fwd_bwd_bf16_dq(c, &n1, 1), *r2 = fwd_bwd_bf16_dq(c, &n2, 2);
    CHECK(n0 == n1 && !memcmp(r0, r1, sizeof(float) * lead) &&
              !memcmp(r0 + lead + nq, r1 + lead + nq, sizeof(float) * (n0 - lead - nq)),
          "%s: bf16 dK / dV without dQ differ from the call with dQ", cname);
    CHECK(n0 == n2 && !memcmp(r0, r2, sizeof(float) * n0), "%s: bf16 backward with a strided dQ differs", cname);
    free(r0);
    free(r1);
    free(r2);
}

/* The bf16 backward (dout bf16, out from the bf16 forward) against the reference attention's
 * gradients (attn_sdpa_backward, double math) on the same bf16 values widened to float: relative
 * RMS errors of dq, dk, dv below tol; bitwise identical for 1..3 threads. */
static void check_backward(const bcase *c, const char *cname, double tol) {
    const int64_t *qs = c->qs, *ks = c->ks, *vs = c->vs;
    const size_t nq = (size_t)(qs[0] * qs[1] * qs[2] * qs[3]), nk = (size_t)(ks[0] * ks[1] * ks[2] * ks[3]),
                 nv = (size_t)(vs[0] * vs[1] * vs[2] * vs[3]), no = (size_t)(qs[0] * qs[1] * qs[2] * vs[3]),
                 nl = (size_t)(qs[0] * qs[1] * qs[2]);
    float *qf = xmalloc(4 * nq), *kf = xmalloc(4 * nk), *vf = xmalloc(4 * nv), *gof = xmalloc(4 * no);
    uint16_t *go = xmalloc(2 * no);
    test_rng r = rng_seeded(99);
    for (size_t i = 0; i < no; i++) go[i] = attn_f32_to_bf16((float)rng_normal(&r));
    attn_convert(c->q, ATTN_TYPE_BF16, qf, ATTN_TYPE_F32, nq);
    attn_convert(c->k, ATTN_TYPE_BF16, kf, ATTN_TYPE_F32, nk);
    attn_convert(c->v, ATTN_TYPE_BF16, vf, ATTN_TYPE_F32, nv);
    attn_convert(go, ATTN_TYPE_BF16, gof, ATTN_TYPE_F32, no);
    /* reference gradients */
    float *rdq = xmalloc(4 * nq), *rdk = xmalloc(4 * nk), *rdv = xmalloc(4 * nv);
    attn_tensor tq = attn_tensor_4d(qf, qs[0], qs[1], qs[2], qs[3]),
                tk = attn_tensor_4d(kf, ks[0], ks[1], ks[2], ks[3]),
                tv = attn_tensor_4d(vf, vs[0], vs[1], vs[2], vs[3]),
                tgo = attn_tensor_4d(gof, qs[0], qs[1], qs[2], vs[3]),
                tdq = attn_tensor_4d(rdq, qs[0], qs[1], qs[2], qs[3]),
                tdk = attn_tensor_4d(rdk, ks[0], ks[1], ks[2], ks[3]),
                tdv = attn_tensor_4d(rdv, vs[0], vs[1], vs[2], vs[3]);
    size_t wsb = attn_sdpa_workspace_size(&tq, &tk, &tv);
    void *ws = xmalloc(wsb);
    CHECK_OK(attn_sdpa_backward(&tq, &tk, &tv, &c->p, &tgo, &tdq, &tdk, &tdv, ws, wsb));
    free(ws);
    double *rq = xmalloc(8 * nq), *rk = xmalloc(8 * nk), *rv = xmalloc(8 * nv);
    for (size_t i = 0; i < nq; i++) rq[i] = rdq[i];
    for (size_t i = 0; i < nk; i++) rk[i] = rdk[i];
    for (size_t i = 0; i < nv; i++) rv[i] = rdv[i];
    /* bf16 forward then backward (the same dout stream) */
    float *first = NULL;
    printf("    backward %-28s", cname);
    for (int t = 1; t <= 4; t++) { /* 4: 2 threads with the key pass in runs of one key block */
        attn_set_num_threads(t == 4 ? 2 : t);
        attn__flash_key_run_force(t == 4 ? 1 : 0);
        size_t cnt;
        float *all = fwd_bwd_bf16(c, &cnt), *g = all + no + nl;
        if (t == 1) {
            const double eq = rel_err_fd(g, rq, nq), ek = rel_err_fd(g + nq, rk, nk),
                         ev = rel_err_fd(g + nq + nk, rv, nv);
            printf(" dq %.2e dk %.2e dv %.2e\n", eq, ek, ev);
            CHECK(eq < tol && ek < tol && ev < tol, "%s: bf16 backward errors dq %.3g dk %.3g dv %.3g (limit %.3g)",
                  cname, eq, ek, ev, tol);
            first = all;
            continue;
        }
        CHECK(!memcmp(g, first + no + nl, 4 * (nq + nk + nv)), "%s: bf16 backward differs between 1 and %d threads%s",
              cname, t == 4 ? 2 : t, t == 4 ? " (key runs of one block)" : "");
        free(all);
    }
    attn__flash_key_run_force(0);
    attn_set_num_threads(0);
    free(first);
    free(qf);
    free(kf);
    free(vf);
    free(gof);
    free(go);
    free(rdq);
    free(rdk);
    free(rdv);
    free(rq);
    free(rk);
    free(rv);
}

/* With AVX512-BF16 present, the AVX-512F and AVX2 emulations of its instructions (the kernels a
 * CPU without it runs, fused steps included) must give the same bits end to end, forward and
 * backward, as vdpbf16ps itself (forced: AMX tiles, when active, round their sums their own way). */
static void check_emulated_table(const bcase *c, const char *cname) {
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    if (attn_detected_isa() < ATTN_ISA_AVX512 || !attn_cpu_has_avx512bf16()) return;
    size_t n1, n2;
    attn__bf16_force(attn_bf16_kernels_avx512bf16());
    float *native = fwd_bwd_bf16(c, &n1);
    attn__bf16_force(attn_bf16_kernels_avx512());
    float *emul = fwd_bwd_bf16(c, &n2);
    attn__bf16_force(NULL);
    CHECK(n1 == n2 && !memcmp(native, emul, sizeof(float) * n1),
          "%s: the emulated AVX-512 bf16 kernels differ from vdpbf16ps end to end", cname);
    free(emul);
    /* and the AVX2 emulation (no fused steps: the driver's two-step path, the same bits) */
    attn__bf16_force(attn_bf16_kernels_avx2());
    emul = fwd_bwd_bf16(c, &n2);
    attn__bf16_force(NULL);
    CHECK(n1 == n2 && !memcmp(native, emul, sizeof(float) * n1),
          "%s: the emulated AVX2 bf16 kernels differ from vdpbf16ps end to end", cname);
    free(native);
    free(emul);
#else
    (void)c;
    (void)cname;
#endif
}

/* The forward's O^T path (flash.c's v_across: O^T += V^T P^T where a table has
 * gemm_pairs_colscale, AMX's) against its O += P V path on the same table, bit for bit: each
 * element sums the same pair products in the same order. Where the table has no colscale (every
 * CPU without AMX), one made of its gemm_pairs stands in, so that the driver's O^T path (V across
 * in key blocks, O^T back to rows, edge tiles) runs on every machine. */
static const attn_bf16_kernels *colscale_base;
static void colscale_by_gemm(int m, int n, int kp, const uint32_t *a, int64_t ars, const uint32_t *b, int64_t ldb,
                             float *c, int64_t ldc, const float *f) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[(int64_t)i * ldc + j] *= f[j];
    colscale_base->gemm_pairs(m, n, kp, a, ars, 1, b, ldb, c, ldc, 1, NULL, 1.0f);
}

static void check_v_across(const bcase *c, const char *cname) {
    const attn_bf16_kernels *act = attn_bf16_kernels_active();
    attn_bf16_kernels rows = *act, across = *act;
    rows.gemm_pairs_colscale = NULL;
    colscale_base = act;
    if (!across.gemm_pairs_colscale) across.gemm_pairs_colscale = colscale_by_gemm;
    size_t n1, n2;
    attn__bf16_force(&rows);
    float *o = fwd_bwd_bf16(c, &n1);
    attn__bf16_force(&across);
    float *ot = fwd_bwd_bf16(c, &n2);
    attn__bf16_force(NULL);
    CHECK(n1 == n2 && !memcmp(o, ot, sizeof(float) * n1),
          "%s: the bf16 forward's O^T path differs from its O path (%s)", cname, act->name);
    free(o);
    free(ot);
}

static void check_fixture(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/flash_bf16.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_open_file(path, &st);
    CHECK(s == ATTN_OK, "open %s: %s", path, attn_last_error());
    if (s != ATTN_OK) return;
    const char *ncases = attn_safetensors_metadata_find(st, "cases");
    const int n = ncases ? atoi(ncases) : 0;
    CHECK(n >= 10, "fixture has %d cases", n);
    if (attn_detected_isa() == ATTN_ISA_AVX512 && !strstr(attn_cpu_features(), "avx512bf16"))
        printf("  notice: no AVX512-BF16 on this CPU: vdpbf16ps itself is not tested, its FMA emulation is\n");
    else if (attn_detected_isa() < ATTN_ISA_AVX512)
        printf("  notice: no AVX-512 on this CPU: only the portable bf16 kernels are tested\n");
    if (attn_bf16_kernels_active()->unit != ATTN_BF16_UNIT_AMX)
        printf("  notice: AMX tiles not in use (no AMX-BF16, tile state refused, or ATTN_AMX=0): the AMX path is not "
               "tested\n");
    printf("  bf16 kernels in use at the detected ISA: %s\n", attn_bf16_kernels_active()->name);
    printf("  rel RMS error vs float64 (torch bf16 | attn per ISA, f32 out / bf16 out):\n");
    for (int ci = 0; ci < n; ci++) {
        char key[64], name[128];
        snprintf(key, sizeof key, "case%d", ci);
        const char *desc = attn_safetensors_metadata_find(st, key);
        snprintf(key, sizeof key, "case%d.name", ci);
        const char *cname = attn_safetensors_metadata_find(st, key);
        bcase c;
        memset(&c, 0, sizeof c);
        int B, Hq, Hk, Nq, Nk, d, dv, causal, wl, wr, has_bm, has_am, has_km, alibi;
        float softcap;
        if (!desc || sscanf(desc,
                            "B=%d Hq=%d Hk=%d Nq=%d Nk=%d d=%d dv=%d causal=%d wl=%d wr=%d softcap=%f bool=%d add=%d "
                            "key=%d alibi=%d",
                            &B, &Hq, &Hk, &Nq, &Nk, &d, &dv, &causal, &wl, &wr, &softcap, &has_bm, &has_am, &has_km,
                            &alibi) != 15) {
            CHECK(0, "bad case description '%s'", desc ? desc : "(none)");
            continue;
        }
        const int64_t qs[4] = {B, Hq, Nq, d}, ks[4] = {B, Hk, Nk, d}, vs[4] = {B, Hk, Nk, dv};
        memcpy(c.qs, qs, sizeof qs);
        memcpy(c.ks, ks, sizeof ks);
        memcpy(c.vs, vs, sizeof vs);
        size_t cnt;
#define NAME(f) (snprintf(name, sizeof name, "case%d.%s", ci, f), name)
        c.q = fx_bf16(st, NAME("q"), &cnt);
        c.k = fx_bf16(st, NAME("k"), &cnt);
        c.v = fx_bf16(st, NAME("v"), &cnt);
        float *ref = fx_floats(st, NAME("out"), &cnt), *terr = fx_floats(st, NAME("torch_err"), NULL);
        float *am = has_am ? fx_floats(st, NAME("add_mask"), NULL) : NULL;
        float *slopes = alibi ? fx_floats(st, NAME("alibi"), NULL) : NULL;
        CHECK(c.q && c.k && c.v && ref && terr, "case %d: tensors missing", ci);
        if (!(c.q && c.k && c.v && ref && terr)) continue;
        c.p = attn_sdpa_params_default();
        c.p.causal = (attn_causal)causal;
        c.p.window_left = wl;
        c.p.window_right = wr;
        c.p.softcap = softcap;
        c.p.alibi_slopes = slopes;
        uint8_t *bm = NULL, *km = NULL;
        attn_btensor tbm, tkm;
        attn_tensor tam;
        const size_t full = (size_t)B * Hq * Nq * Nk;
        if (has_bm) {
            float *f = fx_floats(st, NAME("bool_mask"), NULL);
            bm = xmalloc(full);
            for (size_t i = 0; i < full; i++) bm[i] = f && f[i] != 0;
            free(f);
            tbm = attn_btensor_4d(bm, B, Hq, Nq, Nk);
            c.p.bool_mask = &tbm;
        }
        if (am) {
            tam = attn_tensor_4d(am, B, Hq, Nq, Nk);
            c.p.add_mask = &tam;
        }
        if (has_km) {
            float *f = fx_floats(st, NAME("key_mask"), NULL);
            km = xmalloc((size_t)B * Nk);
            for (int64_t i = 0; i < (int64_t)B * Nk; i++) km[i] = f && f[i] != 0;
            free(f);
            tkm = attn_btensor_2d(km, B, Nk);
            c.p.key_mask = &tkm;
        }
        double *refd = xmalloc(sizeof(double) * cnt);
        for (size_t i = 0; i < cnt; i++) refd[i] = ref[i];
        printf("  %-32s torch %.2e |", cname ? cname : "?", (double)terr[0]);
        float *first = NULL;
        FOR_EACH_ISA(isa) {
            attn_force_isa((attn_isa)isa);
            float *o32 = run_bf16(&c, 0, 0), *o16 = run_bf16(&c, 1, 0);
            const double e32 = rel_err_fd(o32, refd, cnt), e16 = rel_err_fd(o16, refd, cnt);
            printf(" %s %.2e/%.2e", attn_isa_name((attn_isa)isa), e32, e16);
            CHECK(e32 <= 2 * terr[0] && e16 <= 2 * terr[0],
                  "%s [%s]: bf16 flash error %.3g / %.3g above 2x torch's %.3g", cname, attn_isa_name((attn_isa)isa),
                  e32, e16, (double)terr[0]);
            if (!first) {
                first = o32;
                o32 = NULL;
            } else { /* ISAs differ only in exp2 and the kernels' rounding of P: close */
                CHECK(rel_err_ff(o32, first, cnt) < 2e-3, "%s [%s]: %.3g from the reference kernels", cname,
                      attn_isa_name((attn_isa)isa), rel_err_ff(o32, first, cnt));
            }
            /* [B, N, H, d] strides: the same bits */
            float *ob = run_bf16(&c, 0, 1);
            CHECK(!memcmp(ob, o32 ? o32 : first, sizeof(float) * cnt), "%s [%s]: strided views differ", cname,
                  attn_isa_name((attn_isa)isa));
            free(ob);
            free(o32);
            free(o16);
        }
        printf("\n");
        attn_force_isa(attn_detected_isa());
        check_backward(&c, cname ? cname : "?", 1e-2);
        check_emulated_table(&c, cname ? cname : "?");
        check_v_across(&c, cname ? cname : "?");
        check_backward_dq_views(&c, cname ? cname : "?");
        if (ci == 0) { /* dropout: the same Philox stream as the reference */
            bcase cd = c;
            cd.p.dropout_p = 0.2f;
            cd.p.dropout_seed = 7;
            check_backward(&cd, "plain + dropout 0.2", 1e-2);
        }
        /* bitwise across thread counts */
        float *base1 = NULL;
        for (int t = 1; t <= 3; t++) {
            attn_set_num_threads(t);
            float *ot = run_bf16(&c, 0, 0);
            if (t == 1) {
                base1 = ot;
                continue;
            }
            CHECK(!memcmp(ot, base1, sizeof(float) * cnt), "%s: bf16 flash differs between 1 and %d threads", cname, t);
            free(ot);
        }
        attn_set_num_threads(0);
        free(base1);
        free(first);
        free(refd);
        free(ref);
        free(terr);
        free(am);
        free(slopes);
        free(bm);
        free(km);
        free(c.q);
        free(c.k);
        free(c.v);
#undef NAME
    }
    attn_safetensors_close(st);
}

/* The tile kernels' transpose with f == 1, which the bf16 path runs on pair words: every 32-bit
 * pattern comes through exactly (a multiply would quiet a signalling NaN: a bf16 infinity in a
 * word's high half over a nonzero low half), at every edge, words past the block left alone. */
static void check_word_transpose(void) {
    test_rng r = rng_seeded(0x77aa);
    const attn_flash_kernels *tables[4] = {attn_flash_kernels_ref(), NULL, NULL, NULL};
    const char *names[4] = {"ref", "avx2", "avx512 4 rows", "avx512 6 rows"};
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    if (attn_detected_isa() >= ATTN_ISA_AVX2) tables[1] = attn_flash_kernels_avx2();
    if (attn_detected_isa() >= ATTN_ISA_AVX512) {
        tables[2] = attn_flash_kernels_avx512_rows(4);
        tables[3] = attn_flash_kernels_avx512_rows(6);
    } else {
        printf("  notice: no AVX-512 on this CPU: its word transpose was not checked\n");
    }
#endif
    const int shapes[5][2] = {{64, 32}, {19, 21}, {1, 1}, {17, 64}, {64, 7}};
    enum { LDD = 64, RS = 70 };
    uint32_t src[64 * RS], dst[70 * LDD];
    for (int t = 0; t < 4; t++) {
        if (!tables[t]) continue;
        int same = 1;
        for (int sh = 0; sh < 5; sh++) {
            const int rows = shapes[sh][0], cols = shapes[sh][1];
            for (int i = 0; i < 64 * RS; i++) {
                const uint32_t u = (uint32_t)rng_next(&r);
                /* signalling NaNs, infinities over nonzero low halves, subnormals among random words */
                src[i] = i % 5 == 0 ? 0x7f800000u | (u & 0x3fffffu) | 1u : i % 5 == 1 ? u & 0x807fffffu : u;
            }
            memset(dst, 0xa5, sizeof dst);
            tables[t]->pack_transposed(rows, cols, (const float *)(const void *)src, RS, 1.0f, (float *)(void *)dst,
                                       LDD);
            for (int c = 0; c < 70; c++)
                for (int q = 0; q < LDD; q++)
                    same &= dst[c * LDD + q] == (c < cols && q < rows ? src[q * RS + c] : 0xa5a5a5a5u);
        }
        CHECK(same, "%s: pack_transposed with f = 1 changed a 32-bit pattern or wrote past the block", names[t]);
    }
}

/* Each table's exp2 of the online softmax and of the backward's probabilities against double
 * exp2, fp32 and bf16 entries: P within a few float roundings of exact (the bf16 entries' degree-5
 * polynomial must still round P to the bf16 an exact exp gives, but for boundary cases), masked
 * (-inf) logits exactly 0 without raising FE_INVALID, alpha and l to float accuracy. */
static void check_probability_exp(void) {
    test_rng r = rng_seeded(0x3e9);
    const attn_flash_kernels *tables[3] = {attn_flash_kernels_ref(), NULL, NULL};
    const char *names[3] = {"ref", "avx2", "avx512"};
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    if (attn_detected_isa() >= ATTN_ISA_AVX2) tables[1] = attn_flash_kernels_avx2();
    if (attn_detected_isa() >= ATTN_ISA_AVX512) tables[2] = attn_flash_kernels_avx512();
#endif
    enum { ROWS = 64, COLS = 64 };
    static float s0[ROWS * COLS], s[ROWS * COLS], dp[ROWS * COLS], ds[ROWS * COLS];
    float m[COLS], l[COLS], alpha[COLS], m0[COLS], ll[COLS], dsum[COLS];
    for (int i = 0; i < ROWS * COLS; i++) {
        s0[i] = (float)(rng_uniform(&r) * 40 - 30);
        if (i % 97 == 3) s0[i] = -INFINITY;
        dp[i] = (float)rng_normal(&r);
    }
    for (int c = 0; c < COLS; c++) {
        m0[c] = (float)(rng_uniform(&r) * 4 - 2); /* a running max from an earlier tile */
        ll[c] = (float)(rng_uniform(&r) * 3);
        dsum[c] = 0.25f;
    }
    for (int t = 0; t < 3; t++) {
        if (!tables[t]) continue;
        for (int bf = 0; bf < 2; bf++) {
            const attn_flash_kernels *k = tables[t];
            double wp = 0, wa = 0, wl = 0, wb = 0;
            int zeros = 1;
            memcpy(s, s0, sizeof s);
            for (int c = 0; c < COLS; c++) {
                m[c] = m0[c];
                l[c] = 1.5f;
            }
            feclearexcept(FE_ALL_EXCEPT);
            (bf ? k->softmax_update_bf16 : k->softmax_update)(ROWS, COLS, s, COLS, m, l, alpha, NULL);
            int invalid = fetestexcept(FE_INVALID) != 0;
            for (int c = 0; c < COLS; c++) {
                /* exact exp2 of the kernels' float differences (their rounding is not the exp's) */
                float mx = m0[c];
                double sum = 0;
                for (int q = 0; q < ROWS; q++) mx = s0[q * COLS + c] > mx ? s0[q * COLS + c] : mx;
                for (int q = 0; q < ROWS; q++) {
                    const double e = s0[q * COLS + c] == -INFINITY ? 0.0 : exp2((double)(s0[q * COLS + c] - mx));
                    sum += e;
                    if (e == 0)
                        zeros &= s[q * COLS + c] == 0.0f;
                    else if (e > 0x1p-120)
                        wp = fmax(wp, fabs(s[q * COLS + c] / e - 1));
                }
                const double a = exp2((double)(m0[c] - mx)), lv = 1.5 * a + sum;
                wa = fmax(wa, fabs(alpha[c] / a - 1));
                wl = fmax(wl, fabs(l[c] / lv - 1));
            }
            memcpy(s, s0, sizeof s);
            feclearexcept(FE_ALL_EXCEPT);
            (bf ? k->probs_and_ds_bf16 : k->probs_and_ds)(ROWS, COLS, s, dp, ds, COLS, m0, ll, dsum, 0.5f);
            invalid |= fetestexcept(FE_INVALID) != 0;
            for (int q = 0; q < ROWS; q++)
                for (int c = 0; c < COLS; c++) {
                    const double x = s0[q * COLS + c];
                    const double e = x == -INFINITY ? 0.0 : exp2((double)(((float)x - m0[c]) - ll[c]));
                    if (e == 0)
                        zeros &= s[q * COLS + c] == 0.0f && ds[q * COLS + c] == 0.0f;
                    else if (e > 0x1p-120)
                        wb = fmax(wb, fabs(s[q * COLS + c] / e - 1));
                }
            printf("  exp2 %s %s: P rel %.2g, alpha %.2g, l %.2g, backward P %.2g\n", names[t], bf ? "bf16" : "fp32",
                   wp, wa, wl, wb);
            /* fp32: the degree-7 polynomial (5e-9) plus float evaluation; bf16: degree 5 (7.7e-8) plus it */
            const double tol = bf ? 3e-7 : 1.5e-7;
            CHECK(wp <= tol && wb <= tol, "%s %s: probabilities off exact exp2 by %.3g / %.3g (> %.2g)", names[t],
                  bf ? "bf16" : "fp32", wp, wb, tol);
            CHECK(wa <= 3e-7 && wl <= 1e-6, "%s %s: alpha / l off by %.3g / %.3g", names[t], bf ? "bf16" : "fp32", wa,
                  wl);
            CHECK(zeros, "%s %s: a masked logit's probability is not exactly 0", names[t], bf ? "bf16" : "fp32");
            /* a program that traps FE_INVALID must not die on a masked (-inf) logit */
            CHECK(!invalid, "%s %s: -inf logits raised the invalid exception", names[t], bf ? "bf16" : "fp32");
        }
    }
}

static int same_bits(float a, float b) { return !memcmp(&a, &b, sizeof a); }

/* The bf16 kernels' fused flash steps against the two steps they fuse (the AVX-512 flash
 * kernels' softmax_update_bf16 / probs_and_ds_bf16, then the table's own rounding): bit for bit,
 * including the running statistics, at odd and even row counts, column counts off the vector
 * steps, masked (-inf), NaN and fully masked columns, words past each count left alone. */
static void check_fused_steps(void) {
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
    if (attn_detected_isa() < ATTN_ISA_AVX512) {
        printf("  notice: no AVX-512 on this CPU: the fused softmax / rounding kernels were not checked\n");
        return;
    }
    const attn_flash_kernels *fk = attn_flash_kernels_avx512();
    const attn_bf16_kernels *tables[2] = {attn_bf16_kernels_avx512(),
                                          attn_cpu_has_avx512bf16() ? attn_bf16_kernels_avx512bf16() : NULL};
    if (!tables[1]) printf("  notice: no AVX512-BF16 on this CPU: its fused kernels were not checked\n");
    test_rng r = rng_seeded(0x5f1d);
    enum { LD = 64, LW = 40 };
    static float s0[64 * LD], s[64 * LD], dp[64 * LD], ds[64 * LD];
    static uint32_t wa[64 * LD], wb[64 * LD], va[64 * LD], vb[64 * LD], xa[64 * LD], xb[64 * LD];
    float m0[LD], mA[LD], mB[LD], lA[LD], lB[LD], aA[LD], aB[LD], ll[LD], dsum[LD];
    /* the first six shapes cover the edges; twenty more whole tiles make roundings near a bf16
     * boundary likely, where P or dS a few ulp off would show */
    int shapes[26][2] = {{64, 64}, {63, 64}, {64, 33}, {7, 17}, {1, 1}, {2, 48}};
    for (int sh = 6; sh < 26; sh++) shapes[sh][0] = shapes[sh][1] = 64;
    for (int t = 0; t < 2; t++) {
        const attn_bf16_kernels *hk = tables[t];
        if (!hk) continue;
        CHECK(hk->softmax_pairs && hk->probs_ds_pairs, "%s: no fused flash steps", hk->name);
        if (!hk->softmax_pairs || !hk->probs_ds_pairs) continue;
        int fwd = 1, bwd = 1;
        for (int sh = 0; sh < 26; sh++) {
            const int rows = shapes[sh][0], cols = shapes[sh][1];
            for (int i = 0; i < 64 * LD; i++) {
                s0[i] = (float)(rng_normal(&r) * 4);
                if (i % 37 == 5) s0[i] = -INFINITY;
                dp[i] = (float)rng_normal(&r);
            }
            s0[3] = NAN;
            for (int q = 0; q < rows; q++) s0[q * LD + 9] = -INFINITY; /* a fully masked column */
            for (int c = 0; c < LD; c++) {
                m0[c] = c % 5 == 0 ? -INFINITY : (float)rng_normal(&r);
                ll[c] = (float)rng_uniform(&r);
                dsum[c] = (float)rng_normal(&r) * 0.1f;
                mA[c] = mB[c] = m0[c];
                lA[c] = lB[c] = m0[c] == -INFINITY ? 0.0f : 2.0f;
            }
            /* forward */
            memcpy(s, s0, sizeof s);
            memset(wa, 0xa5, sizeof wa);
            memset(wb, 0xa5, sizeof wb);
            fk->softmax_update_bf16(rows, cols, s, LD, mA, lA, aA, NULL);
            hk->pair_rows_f32(rows, cols, s, LD, wa, LW);
            memcpy(s, s0, sizeof s);
            hk->softmax_pairs(rows, cols, s, LD, mB, lB, aB, wb, LW);
            fwd &= !memcmp(wa, wb, sizeof wa) && !memcmp(s, s0, sizeof s);
            for (int c = 0; c < cols; c++)
                fwd &= same_bits(mA[c], mB[c]) && same_bits(lA[c], lB[c]) && same_bits(aA[c], aB[c]);
            /* backward, with and without dS's row pairs */
            for (int withv = 0; withv < 2; withv++) {
                memcpy(s, s0, sizeof s);
                uint32_t *sentinel[6] = {wa, wb, va, vb, xa, xb}; /* words past each count stay 0xa5a5a5a5 */
                for (int i = 0; i < 6; i++) memset(sentinel[i], 0xa5, sizeof wa);
                fk->probs_and_ds_bf16(rows, cols, s, dp, ds, LD, m0, ll, dsum, 0.125f);
                hk->pair_tile_grads(rows, cols, s, ds, LD, wa, va, LW, withv ? xa : NULL, LD);
                hk->probs_ds_pairs(rows, cols, s0, dp, LD, m0, ll, dsum, 0.125f, wb, vb, LW, withv ? xb : NULL, LD);
                bwd &= !memcmp(wa, wb, sizeof wa) && !memcmp(va, vb, sizeof va) && !memcmp(xa, xb, sizeof xa);
            }
        }
        CHECK(fwd, "%s: softmax_pairs differs from softmax_update_bf16 + pair_rows_f32", hk->name);
        CHECK(bwd, "%s: probs_ds_pairs differs from probs_and_ds_bf16 + pair_tile_grads", hk->name);
    }
#endif
}

int main(void) {
    check_fused_steps();
    check_probability_exp();
    check_word_transpose();
    check_fixture();
    return test_summary("test_flash_bf16");
}
