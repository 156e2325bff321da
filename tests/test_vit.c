/* Vision Transformer (attn_vit_*) against tests/parity/gen_vit.py: torchvision's VisionTransformer
 * loaded through attn_vit_torchvision_names (logits, input and parameter gradients, layer 0 / 1
 * attention capture), a distilled non-square two-channel ViT under timm's names (averaged and
 * separate heads), position-embedding resampling against F.interpolate(bicubic), name-map round
 * trips, dropout and thread determinism, training a tiny ViT, and bad arguments. */
#include "io/json.h"
#include "test_util.h"
#include "test_vit_fixture.h"

#include <unistd.h>

#define OUT_TOL 1e-5
#define GRAD_TOL 1e-4

static double max_out_err, max_grad_err;

static void cmp(const char *ctx, const char *what, const float *got, const float *ref, size_t n, double tol,
                double *worst) {
    double e = rel_err_ff(got, ref, n);
    if (e > *worst) *worst = e;
    CHECK(e <= tol, "%s: %s rel err %.3g > %.1g", ctx, what, e, tol);
}

static void parity_case(const attn_safetensors *st, int ci, const attn_name_map *map) {
    char key[300], ctx[32];
    snprintf(ctx, sizeof ctx, "vit case %d", ci);
    attn_vit_config c;
    int64_t B = 0;
    if (!config_of(st, ci, &c, &B)) return;
    attn_vit *v = NULL;
    CHECK_OK(attn_vit_create(&c, &v));
    if (!v) return;
    const attn_params *ps = attn_vit_params(v);
    snprintf(key, sizeof key, "case%d.p.", ci);
    CHECK_OK(attn_params_load_mapped(ps, st, map, key, 1));
    const int64_t K = c.num_classes, nimg = B * c.in_channels * c.image_h * c.image_w;
    float *x = vit_case_tensor(st, ci, "x", NULL), *ref = vit_case_tensor(st, ci, "logits", NULL);
    float *dy = vit_case_tensor(st, ci, "dlogits", NULL), *dxref = vit_case_tensor(st, ci, "dx", NULL);
    CHECK(x && ref && dy && dxref, "%s: fixture tensors", ctx);
    if (!x || !ref || !dy || !dxref) goto out;
    attn_vit_args a = {0};
    a.batch = B;
    a.images = x;
    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_add(cap, "layers.*.self_attn", 0, 0, 0, 0));
    a.capture = cap;
    const size_t sb = attn_vit_saved_size(v, &a), wb = attn_vit_workspace_size(v, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    float *logits = xmalloc(sizeof(float) * (size_t)(2 * B * K)), *dx = xmalloc(sizeof(float) * (size_t)nimg);
    CHECK_OK(attn_vit_forward(v, &a, logits, saved, sb, ws, wb));
    cmp(ctx, "logits", logits, ref, (size_t)(B * K), OUT_TOL, &max_out_err);
    /* capture: torchvision's self_attention weights via a wrapped forward */
    for (int64_t l = 0; l < c.num_layers; l++) {
        snprintf(key, sizeof key, "case%d.attn.%lld", ci, (long long)l);
        float *w = fx_floats(st, key, NULL);
        if (!w) continue;
        char name[64];
        snprintf(name, sizeof name, "layers.%lld.self_attn", (long long)l);
        attn_capture_record r;
        CHECK_OK(attn_capture_find(cap, name, &r));
        const int64_t N = attn_vit_tokens(v);
        CHECK(r.batch == B && r.heads == c.num_heads && r.rows == N && r.nk == N, "%s: %s record shape", ctx, name);
        if (r.weights && r.batch == B && r.rows == N) {
            double e = rel_err_ff(r.weights, w, (size_t)(B * c.num_heads * N * N));
            CHECK(e <= OUT_TOL, "%s: captured %s rel err %.3g", ctx, name, e);
            printf("%s: captured %s vs torchvision self_attention weights: rel err %.3g\n", ctx, name, e);
        }
        free(w);
    }
    a.capture = NULL;
    CHECK_OK(attn_params_zero_grad(ps));
    CHECK_OK(attn_vit_backward(v, &a, dy, dx, saved, sb, ws, wb));
    cmp(ctx, "dx", dx, dxref, (size_t)nimg, GRAD_TOL, &max_grad_err);
    size_t checked = 0;
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        size_t n = 0;
        float *g = vit_case_grad(st, map, ci, p->name, &n);
        CHECK(g && n == p->numel, "%s: gradient of %s missing", ctx, p->name);
        if (!g) continue;
        cmp(ctx, p->name, p->grad, g, n, GRAD_TOL, &max_grad_err);
        checked++;
        free(g);
    }
    CHECK(checked == attn_params_count(ps), "%s: %zu of %zu gradients checked", ctx, checked, attn_params_count(ps));
    printf("%s: %zu parameters, logits and %zu gradients + dx checked\n", ctx, attn_params_count(ps), checked);
    if (c.distilled) {
        float *sep = vit_case_tensor(st, ci, "logits_sep", NULL);
        a.separate_heads = 1;
        CHECK_OK(attn_vit_forward(v, &a, logits, NULL, 0, ws, wb));
        if (sep) cmp(ctx, "separate heads", logits, sep, (size_t)(2 * B * K), OUT_TOL, &max_out_err);
        /* the backward of separate heads with dlogits [dy, dy] / 2 equals the averaged one's */
        float *dy2 = xmalloc(sizeof(float) * (size_t)(2 * B * K)), *dx2 = xmalloc(sizeof(float) * (size_t)nimg);
        for (int64_t i = 0; i < B * K; i++) dy2[i] = dy2[B * K + i] = 0.5f * dy[i];
        CHECK_OK(attn_vit_forward(v, &a, logits, saved, sb, ws, wb));
        CHECK_OK(attn_vit_backward(v, &a, dy2, dx2, saved, sb, ws, wb));
        cmp(ctx, "dx (separate heads)", dx2, dxref, (size_t)nimg, GRAD_TOL, &max_grad_err);
        free(dy2), free(dx2), free(sep);
    }
    attn_capture_free(cap);
    free(saved), free(ws), free(logits), free(dx);
out:
    free(x), free(ref), free(dy), free(dxref);
    attn_vit_free(v);
}

static void test_interp(const attn_safetensors *st) {
    static const char *names[] = {"up", "down"};
    for (int k = 0; k < 2; k++) {
        char key[64];
        snprintf(key, sizeof key, "interp.%s", names[k]);
        const char *js = attn_safetensors_metadata_find(st, key);
        int sh = 0, sw = 0, dh = 0, dw = 0, dim = 0;
        CHECK(js && sscanf(js, "[%d, %d, %d, %d, %d]", &sh, &sw, &dh, &dw, &dim) == 5, "interp metadata %s", key);
        snprintf(key, sizeof key, "interp.%s.src", names[k]);
        float *src = fx_floats(st, key, NULL);
        if (!src || !dim) continue;
        float *dst = xmalloc(sizeof(float) * (size_t)((1 + dh * dw) * dim));
        for (int ac = 0; ac < 2; ac++) {
            snprintf(key, sizeof key, "interp.%s.ac%d", names[k], ac);
            float *ref = fx_floats(st, key, NULL);
            CHECK_OK(attn_vit_resample_pos_embed(src, 1, sh, sw, dst, dh, dw, dim, ac));
            if (ref) {
                double e = rel_err_ff(dst, ref, (size_t)((1 + dh * dw) * dim));
                CHECK(e <= 1e-5, "resample %s align_corners=%d: rel err %.3g", names[k], ac, e);
                CHECK(!memcmp(dst, src, sizeof(float) * (size_t)dim), "class-token row kept");
                printf("pos-embedding resample %dx%d -> %dx%d align_corners=%d vs F.interpolate: rel err %.3g\n", sh,
                       sw, dh, dw, ac, e);
            }
            free(ref);
        }
        /* same grid: a copy */
        float *same = xmalloc(sizeof(float) * (size_t)((1 + sh * sw) * dim));
        CHECK_OK(attn_vit_resample_pos_embed(src, 1, sh, sw, same, sh, sw, dim, 0));
        CHECK(!memcmp(same, src, sizeof(float) * (size_t)((1 + sh * sw) * dim)), "same-size resample is a copy");
        CHECK_STATUS(attn_vit_resample_pos_embed(src, 1, 0, sw, same, sh, sw, dim, 0), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_vit_resample_pos_embed(src, -1, sh, sw, same, sh, sw, dim, 0), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_vit_resample_pos_embed(NULL, 1, sh, sw, same, sh, sw, dim, 0), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(attn_vit_resample_pos_embed(src, 1, sh, sw, src, sh, sw, dim, 0), ATTN_ERR_INVALID_ARGUMENT);
        free(same), free(dst), free(src);
    }
}

static void test_names(void) {
    attn_vit_config c = attn_vit_config_default(8, 4, 2, 2, 8, 16, 3);
    c.distilled = 1;
    attn_vit *v = NULL;
    CHECK_OK(attn_vit_create(&c, &v));
    if (!v) return;
    const attn_name_map *maps[2] = {attn_vit_torchvision_names(), attn_vit_timm_names()};
    static const char *want[2][4] = {{"encoder.layers.encoder_layer_1.mlp.3.weight", "encoder.pos_embedding",
                                      "heads.head.bias", "encoder.ln.weight"},
                                     {"blocks.1.mlp.fc2.weight", "pos_embed", "head.bias", "norm.weight"}};
    static const char *ours[4] = {"layers.1.linear2.weight", "pos_embedding", "head.bias", "norm.weight"};
    for (int m = 0; m < 2; m++) {
        char buf[128], back[128];
        for (int i = 0; i < 4; i++) {
            CHECK_OK(attn_name_map_apply(maps[m], ours[i], buf, sizeof buf));
            CHECK(!strcmp(buf, want[m][i]), "map %d: %s -> %s, want %s", m, ours[i], buf, want[m][i]);
        }
        /* every parameter round-trips through the map */
        const attn_params *ps = attn_vit_params(v);
        for (size_t i = 0; i < attn_params_count(ps); i++) {
            const char *n = attn_params_get(ps, i)->name;
            CHECK_OK(attn_name_map_apply(maps[m], n, buf, sizeof buf));
            CHECK_OK(attn_name_map_unapply(maps[m], buf, back, sizeof back));
            CHECK(!strcmp(back, n), "map %d: %s -> %s -> %s", m, n, buf, back);
        }
    }
    /* save under torchvision's names, load back */
    char path[256];
    snprintf(path, sizeof path, "test_vit_%d.safetensors", (int)getpid());
    const attn_params *ps = attn_vit_params(v);
    CHECK_OK(attn_params_reset(ps, 5));
    CHECK_OK(attn_params_save_file_mapped(ps, path, maps[0]));
    attn_vit *w = NULL;
    CHECK_OK(attn_vit_create(&c, &w));
    if (w) {
        CHECK_OK(attn_params_load_file_mapped(attn_vit_params(w), path, maps[0]));
        const attn_param *a = attn_params_find(ps, "pos_embedding");
        const attn_param *b = attn_params_find(attn_vit_params(w), "pos_embedding");
        CHECK(a && b && !memcmp(a->data, b->data, a->numel * sizeof(float)), "saved / loaded pos_embedding");
        attn_vit_free(w);
    }
    remove(path);
    attn_vit_free(v);
}

/* Training mode: dropout bitwise reproducible and thread-count independent; a few AdamW-free SGD
 * steps on a fixed batch lower the loss; errors. */
static void test_train_and_errors(void) {
    attn_vit_config c = attn_vit_config_default(8, 4, 2, 2, 16, 32, 4);
    c.in_channels = 1;
    c.dropout = 0.1f;
    attn_vit *v = NULL;
    CHECK_OK(attn_vit_create(&c, &v));
    if (!v) return;
    const attn_params *ps = attn_vit_params(v);
    CHECK_OK(attn_params_reset(ps, 3));
    const int64_t B = 4, K = 4;
    test_rng r = rng_seeded(17);
    const attn_param *hw = attn_params_find(ps, "head.weight"); /* torchvision initialises it to 0 */
    CHECK(hw != NULL, "head.weight");
    if (hw) fill_normal(&r, hw->data, hw->numel, 0.3);
    float img[4 * 64];
    fill_normal(&r, img, sizeof img / sizeof img[0], 1.0);
    attn_vit_args a = {0};
    a.batch = B;
    a.images = img;
    a.training = 1;
    a.seed = 9;
    const size_t sb = attn_vit_saved_size(v, &a), wb = attn_vit_workspace_size(v, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    float y1[16], y2[16], dy[16], dx1[4 * 64], dx2[4 * 64];
    const int th = attn_get_num_threads();
    attn_set_num_threads(1);
    CHECK_OK(attn_vit_forward(v, &a, y1, saved, sb, ws, wb));
    fill_normal(&r, dy, 16, 1.0);
    CHECK_OK(attn_vit_backward(v, &a, dy, dx1, saved, sb, ws, wb));
    attn_set_num_threads(2);
    CHECK_OK(attn_vit_forward(v, &a, y2, saved, sb, ws, wb));
    CHECK_OK(attn_vit_backward(v, &a, dy, dx2, saved, sb, ws, wb));
    attn_set_num_threads(th);
    CHECK(!memcmp(y1, y2, sizeof y1) && !memcmp(dx1, dx2, sizeof dx1),
          "dropout forward/backward bitwise across threads");
    a.training = 0;
    CHECK_OK(attn_vit_forward(v, &a, y2, NULL, 0, ws, wb));
    CHECK(memcmp(y1, y2, sizeof y1) != 0, "dropout changes the training forward");
    /* SGD on cross-entropy of fixed labels: the loss falls */
    const int64_t labels[4] = {0, 1, 2, 3};
    double first = 0, last = 0;
    for (int step = 0; step < 30; step++) {
        CHECK_OK(attn_params_zero_grad(ps));
        CHECK_OK(attn_vit_forward(v, &a, y1, saved, sb, ws, wb));
        double loss = 0;
        for (int64_t b = 0; b < B; b++) {
            double mx = y1[b * K], s = 0;
            for (int64_t k = 1; k < K; k++) mx = y1[b * K + k] > mx ? y1[b * K + k] : mx;
            for (int64_t k = 0; k < K; k++) s += exp(y1[b * K + k] - mx);
            loss += -(y1[b * K + labels[b]] - mx - log(s)) / (double)B;
            for (int64_t k = 0; k < K; k++)
                dy[b * K + k] = (float)((exp(y1[b * K + k] - mx) / s - (k == labels[b])) / (double)B);
        }
        if (step == 0) first = loss;
        last = loss;
        CHECK_OK(attn_vit_backward(v, &a, dy, NULL, saved, sb, ws, wb));
        for (size_t i = 0; i < attn_params_count(ps); i++) {
            const attn_param *p = attn_params_get(ps, i);
            for (size_t j = 0; j < p->numel; j++) p->data[j] -= 0.1f * p->grad[j];
        }
    }
    CHECK(last < 0.5 * first, "SGD on a fixed batch: loss %.4f -> %.4f", first, last);
    printf("tiny ViT, 30 SGD steps on one batch: loss %.4f -> %.4f\n", first, last);
    /* errors */
    CHECK_STATUS(attn_vit_forward(v, &a, y1, saved, sb, ws, wb - 1), ATTN_ERR_WORKSPACE);
    CHECK_STATUS(attn_vit_forward(v, &a, y1, saved, sb - 1, ws, wb), ATTN_ERR_WORKSPACE);
    a.images = NULL;
    CHECK_STATUS(attn_vit_forward(v, &a, y1, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "images") != NULL, "message names images: %s", attn_last_error());
    a.images = img;
    a.batch = 0;
    CHECK_STATUS(attn_vit_forward(v, &a, y1, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_vit_saved_size(v, &a) == 0 && attn_vit_workspace_size(v, &a) == 0, "sizes 0 for bad args");
    a.batch = B;
    a.separate_heads = 1;
    CHECK_STATUS(attn_vit_forward(v, &a, y1, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    a.separate_heads = 0;
    CHECK_STATUS(attn_vit_forward(v, &a, NULL, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_vit_backward(v, &a, dy, NULL, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_vit_forward(NULL, &a, y1, NULL, 0, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    free(saved), free(ws);
    attn_vit_free(v);
    attn_vit *bad = NULL;
    attn_vit_config e = attn_vit_config_default(10, 4, 1, 2, 8, 16, 3);
    CHECK_STATUS(attn_vit_create(&e, &bad), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "patch_size") != NULL, "message names patch_size: %s", attn_last_error());
    e = attn_vit_config_default(8, 4, 1, 3, 8, 16, 3);
    CHECK_STATUS(attn_vit_create(&e, &bad), ATTN_ERR_INVALID_ARGUMENT);
    e = attn_vit_config_default(8, 4, 0, 2, 8, 16, 3);
    CHECK_STATUS(attn_vit_create(&e, &bad), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "num_layers") != NULL, "message names num_layers: %s", attn_last_error());
    e = attn_vit_config_default(8, 4, 1, 2, 8, 16, 0);
    CHECK_STATUS(attn_vit_create(&e, &bad), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_vit_create(NULL, &bad), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(bad == NULL, "no model on failure");
    CHECK(attn_vit_params(NULL) == NULL && attn_vit_tokens(NULL) == 0 && attn_vit_get_config(NULL) == NULL, "NULL");
    attn_vit_free(NULL);
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vit.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (st) {
        parity_case(st, 0, attn_vit_torchvision_names());
        parity_case(st, 1, attn_vit_timm_names());
        test_interp(st);
        attn_safetensors_close(st);
    }
    printf("vit parity: max logits rel err %.3g, max gradient rel err %.3g\n", max_out_err, max_grad_err);
    test_names();
    test_train_and_errors();
    return test_summary("test_vit");
}
