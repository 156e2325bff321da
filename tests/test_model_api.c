/* The public model API (attn/model.h) against the modules it wraps, called directly with the same
 * parameters: multihead_attention forward (output and need_weights), backward (input and parameter
 * gradients), a boolean mask staged by name, binding from a safetensors buffer, the attention
 * capture of an encoder layer, and the documented errors. */
#include "test_util.h"
#include "nn/nn_run.h"

#define B 2
#define N 5
#define E 8
#define H 2

static attn_model *create(const char *json) {
    attn_model *m = NULL;
    CHECK_OK(attn_model_create_json(json, strlen(json), &m));
    return m;
}

/* Copy every parameter of src into dst (same names and shapes). */
static void test_mha(test_rng *r) {
    attn_model *m = create("{\"module\": \"multihead_attention\", \"embed_dim\": 8, \"num_heads\": 2, "
                           "\"batch_first\": true, \"need_weights\": true, \"average_attn_weights\": false}");
    if (!m) return;
    CHECK(!strcmp(attn_model_name(m), "multihead_attention"), "name %s", attn_model_name(m));
    CHECK(attn_model_output(m, NULL, NULL) == NULL, "output before a forward");
    attn_mha *ref = NULL;
    attn_mha_config c = attn_mha_config_default(E, H);
    CHECK_OK(attn_mha_create(&c, &ref));
    CHECK_OK(attn_params_reset(attn_model_params(m), 7));
    copy_params(attn_mha_params(ref), attn_model_params(m));

    float q[B * N * E], k[B * N * E], v[B * N * E], dout[B * N * E];
    uint8_t mask[N * N]; /* PyTorch's convention: true = not allowed */
    fill_normal(r, q, B * N * E, 1.0);
    fill_normal(r, k, B * N * E, 1.0);
    fill_normal(r, v, B * N * E, 1.0);
    fill_normal(r, dout, B * N * E, 1.0);
    for (int i = 0; i < N * N; i++) mask[i] = (i % 3) == 1;
    const int64_t xs[3] = {B, N, E}, ms[2] = {N, N};
    CHECK_OK(attn_model_input(m, "query", ATTN_DTYPE_F32, 3, xs, q));
    CHECK_OK(attn_model_input(m, "key", ATTN_DTYPE_F32, 3, xs, k));
    CHECK_OK(attn_model_input(m, "value", ATTN_DTYPE_F32, 3, xs, v));
    CHECK_OK(attn_model_input(m, "attn_mask", ATTN_DTYPE_BOOL, 2, ms, mask));
    CHECK_STATUS(attn_model_input(m, "value", ATTN_DTYPE_F32, 3, xs, v), ATTN_ERR_ST_DUPLICATE_NAME);
    CHECK_OK(attn_model_bind(m));

    attn_capture *cap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_add(cap, "*", 0, 0, 0, 0));
    CHECK_OK(attn_model_forward(m, 1, 0, 0, 0, cap));
    int rank = 0;
    int64_t shape[4];
    const float *out = attn_model_output(m, &rank, shape);
    CHECK(out && rank == 3 && shape[0] == B && shape[1] == N && shape[2] == E, "output shape");
    const float *w = attn_model_weights(m, &rank, shape);
    CHECK(w && rank == 4 && shape[1] == H, "weights shape");

    /* the module directly */
    attn_mha_args a = attn_mha_args_default();
    a.batch = B, a.nq = N, a.nk = N, a.query = q, a.key = k, a.value = v, a.attn_mask = mask;
    a.need_weights = 1, a.average_attn_weights = 0;
    const size_t sb = attn_mha_saved_size(ref, &a), wb = attn_mha_workspace_size(ref, &a);
    void *saved = xmalloc(sb), *ws = xmalloc(wb);
    float ro[B * N * E], rw[B * H * N * N], dq[B * N * E], dk[B * N * E], dv[B * N * E];
    CHECK_OK(attn_mha_forward(ref, &a, ro, rw, saved, sb, ws, wb));
    if (out && w) {
        CHECK(rel_err_ff(out, ro, B * N * E) == 0, "output differs from attn_mha_forward");
        CHECK(rel_err_ff(w, rw, B * H * N * N) == 0, "weights differ from attn_mha_forward");
    }
    attn_capture_record rec;
    CHECK_OK(attn_capture_find(cap, "", &rec));
    CHECK(attn_capture_count(cap) == 1 && rec.heads == H && rec.rows == N && rec.nk == N, "capture record");
    CHECK(rel_err_ff(rec.weights, rw, B * H * N * N) == 0, "captured weights differ");

    CHECK_OK(attn_model_backward(m, dout));
    CHECK_OK(attn_mha_backward(ref, &a, dout, dq, dk, dv, saved, sb, ws, wb));
    size_t n = 0;
    const float *gq = attn_model_input_grad(m, "query", &n);
    CHECK(gq && n == B * N * E, "query gradient");
    const float *gk = attn_model_input_grad(m, "key", NULL), *gv = attn_model_input_grad(m, "value", NULL);
    if (gq && gk && gv) {
        CHECK(rel_err_ff(gq, dq, n) == 0, "dquery differs");
        CHECK(rel_err_ff(gk, dk, n) == 0, "dkey differs");
        CHECK(rel_err_ff(gv, dv, n) == 0, "dvalue differs");
    }
    CHECK(attn_model_input_grad(m, "src", NULL) == NULL, "no gradient named src");
    const attn_param *pm = attn_params_find(attn_model_params(m), "in_proj_weight"),
                     *pr = attn_params_find(attn_mha_params(ref), "in_proj_weight");
    CHECK(pm && pr && rel_err_ff(pm->grad, pr->grad, pm->numel) == 0, "parameter gradients differ");

    /* the same inputs through a safetensors buffer (self-attention: key and value default) */
    attn_safetensors_writer *wr = NULL;
    void *buf = NULL;
    size_t len = 0;
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_writer_create(&wr));
    CHECK_OK(attn_safetensors_writer_add(wr, "x.query", ATTN_DTYPE_F32, 3, xs, q));
    CHECK_OK(attn_safetensors_writer_write_memory(wr, &buf, &len));
    CHECK_OK(attn_safetensors_open_memory(buf, len, &st));
    CHECK_OK(attn_model_bind_safetensors(m, st, "x.", 1));
    CHECK_OK(attn_model_set_option(m, "need_weights", 0));
    CHECK_OK(attn_model_forward(m, 0, 0, 0, 0, NULL));
    CHECK(attn_model_weights(m, NULL, NULL) == NULL, "no weights without need_weights");
    a.key = q, a.value = q, a.attn_mask = NULL, a.need_weights = 0;
    CHECK_OK(attn_mha_forward(ref, &a, ro, NULL, NULL, 0, ws, wb));
    out = attn_model_output(m, NULL, NULL);
    CHECK(out && rel_err_ff(out, ro, B * N * E) == 0, "self-attention output differs");
    CHECK_STATUS(attn_model_backward(m, dout), ATTN_ERR_INVALID_ARGUMENT); /* not kept */

    /* errors */
    CHECK_STATUS(attn_model_set_option(m, "tgt_is_causal", 1), ATTN_ERR_NOT_FOUND);
    CHECK_STATUS(attn_model_bind(m), ATTN_ERR_INVALID_ARGUMENT); /* nothing staged */
    CHECK_OK(attn_model_input(m, "query", ATTN_DTYPE_F32, 3, xs, q));
    CHECK_OK(attn_model_input(m, "querry", ATTN_DTYPE_F32, 3, xs, q));
    CHECK_STATUS(attn_model_bind(m), ATTN_ERR_NOT_FOUND);
    CHECK(strstr(attn_last_error(), "querry") != NULL, "message names the input: %s", attn_last_error());
    const int64_t bad[3] = {B, N, E + 1};
    float wide[B * N * (E + 1)]; /* the staged data must hold the shape it claims */
    memset(wide, 0, sizeof wide);
    CHECK_OK(attn_model_input(m, "query", ATTN_DTYPE_F32, 3, bad, wide));
    CHECK_STATUS(attn_model_bind(m), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_model_input(m, "query", ATTN_DTYPE_I32, 3, xs, q), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_model_forward(NULL, 0, 0, 0, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);

    attn_safetensors_close(st);
    free(buf);
    attn_safetensors_writer_free(wr);
    attn_capture_free(cap);
    free(saved);
    free(ws);
    attn_mha_free(ref);
    attn_model_free(m);
}

/* The capture reaches an encoder layer's self-attention through the model. */
static void test_layer_capture(test_rng *r) {
    attn_model *m = create("{\"module\": \"transformer_encoder_layer\", \"d_model\": 8, \"nhead\": 2, "
                           "\"dim_feedforward\": 16, \"dropout\": 0.0, \"batch_first\": true, \"is_causal\": true}");
    if (!m) return;
    attn_encoder_layer *ref = NULL;
    attn_layer_config c = attn_layer_config_default(E, H);
    c.dim_feedforward = 16;
    c.dropout = 0;
    CHECK_OK(attn_encoder_layer_create(&c, &ref));
    CHECK_OK(attn_params_reset(attn_model_params(m), 3));
    copy_params(attn_encoder_layer_params(ref), attn_model_params(m));
    float x[B * N * E], ro[B * N * E];
    fill_normal(r, x, B * N * E, 1.0);
    const int64_t xs[3] = {B, N, E};
    CHECK_OK(attn_model_input(m, "src", ATTN_DTYPE_F32, 3, xs, x));
    CHECK_OK(attn_model_bind(m));
    attn_capture *cap = NULL, *rcap = NULL;
    CHECK_OK(attn_capture_create(&cap));
    CHECK_OK(attn_capture_create(&rcap));
    CHECK_OK(attn_capture_add(cap, "self_attn", 1, 1, 0, 0));
    CHECK_OK(attn_capture_add(rcap, "self_attn", 1, 1, 0, 0));
    CHECK_OK(attn_model_forward(m, 0, 0, 0, 0, cap));

    attn_layer_args a = attn_layer_args_default();
    a.batch = B, a.n = N, a.x = x, a.self_masks.is_causal = 1, a.capture = rcap;
    const size_t wb = attn_encoder_layer_workspace_size(ref, &a);
    void *ws = xmalloc(wb);
    CHECK_OK(attn_encoder_layer_forward(ref, &a, ro, NULL, 0, ws, wb));
    const float *out = attn_model_output(m, NULL, NULL);
    CHECK(out && rel_err_ff(out, ro, B * N * E) == 0, "layer output differs");
    attn_capture_record g, w;
    CHECK_OK(attn_capture_find(cap, "self_attn", &g));
    CHECK_OK(attn_capture_find(rcap, "self_attn", &w));
    CHECK(g.heads == 1 && g.head0 == 1 && g.rows == N && g.nk == N, "capture record shape");
    CHECK(rel_err_ff(g.weights, w.weights, B * N * N) == 0, "captured layer weights differ");
    CHECK(g.weights[1] == 0.0f, "causal: row 0 sees key 0 only");

    /* a forward without a capture leaves the last one's records alone, and records nothing */
    CHECK_OK(attn_model_forward(m, 0, 0, 0, 0, NULL));
    CHECK(attn_capture_count(cap) == 1, "records kept");
    /* a request past the module's heads fails the forward, naming the module */
    attn_capture_clear(cap);
    CHECK_OK(attn_capture_add(cap, "self_attn", 2, 1, 0, 0));
    CHECK_STATUS(attn_model_forward(m, 0, 0, 0, 0, cap), ATTN_ERR_SHAPE);
    /* the ambient capture was restored: a module call outside the model records nothing */
    CHECK_OK(attn_encoder_layer_forward(ref, &(attn_layer_args){.batch = B, .n = N, .x = x}, ro, NULL, 0, ws, wb));
    free(ws);
    attn_capture_free(cap);
    attn_capture_free(rcap);
    attn_encoder_layer_free(ref);
    attn_model_free(m);
}

static void test_create_errors(void) {
    attn_model *m = NULL;
    const char *bad_json = "{\"module\": ";
    CHECK_STATUS(attn_model_create_json(bad_json, strlen(bad_json), &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(m == NULL && strstr(attn_last_error(), "configuration"), "bad JSON: %s", attn_last_error());
    const char *unknown = "{\"module\": \"lstm\"}";
    CHECK_STATUS(attn_model_create_json(unknown, strlen(unknown), &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "lstm") != NULL, "unknown module: %s", attn_last_error());
    const char *key = "{\"module\": \"multihead_attention\", \"embed_dim\": 8, \"num_heads\": 2, \"colour\": 1}";
    CHECK_STATUS(attn_model_create_json(key, strlen(key), &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "colour") != NULL, "unknown key: %s", attn_last_error());
    CHECK_STATUS(attn_model_create_json(NULL, 0, &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_model_known(0) && !strcmp(attn_model_known(0), "multihead_attention"), "first known module");
    size_t n = 0;
    int has_tr = 0;
    for (; attn_model_known(n); n++) has_tr |= !strcmp(attn_model_known(n), "transformer");
    CHECK(n >= 6 && has_tr, "%zu known modules, transformer %s", n, has_tr ? "among them" : "missing");
    /* the module table: every row complete (its length is the enum's at compile time), the public
     * listing all of its rows */
    CHECK_OK(attn_nn_model_table_check());
    CHECK(n == attn_nn_model_count(), "attn_model_known lists %zu of %zu modules", n, attn_nn_model_count());
    CHECK(attn_model_known(attn_nn_model_count()) == NULL, "a name past the table");
    attn_model_free(NULL);
}

int main(void) {
    test_rng r = rng_seeded(11);
    test_mha(&r);
    test_layer_capture(&r);
    test_create_errors();
    return test_summary("test_model_api");
}
