/* The public functions the attn tool relies on instead of library internals: attn/io.h (reading
 * under a cap, the output checks, atomic stdio output), attn_model_create_file / _load / _vit
 * (attn/model.h), calling an attention kind directly (attn/attention.h) and attn_cache_env
 * (attn/core.h): results against the functions they wrap, and their argument checks. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

static char dir[64];

static const char *at(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_io(void) {
    char p[128], q[128];
    /* atomic stdio output, read back */
    attn_io_out o;
    FILE *f = attn_io_out_fopen(&o, at("a.csv", p, sizeof p));
    CHECK(f != NULL, "attn_io_out_fopen: %s", attn_last_error());
    if (f) {
        fputs("a,b\n1,2\n", f);
        CHECK_OK(attn_io_out_fclose(&o, f));
    }
    char *buf = NULL;
    size_t len = 0;
    CHECK_OK(attn_io_read_input(p, "config", ATTN_IO_CAP_CONFIG, &buf, &len));
    CHECK(buf && len == 8 && !strcmp(buf, "a,b\n1,2\n"), "read back %zu bytes", len);
    free(buf);
    CHECK_STATUS(attn_io_read_input(p, "config", 4, &buf, &len), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "over the cap of 4 bytes") != NULL, "cap message: %s", attn_last_error());
    CHECK_STATUS(attn_io_read_input(NULL, "config", 0, &buf, &len), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_io_read_input(p, "config", 0, NULL, &len), ATTN_ERR_INVALID_ARGUMENT);
    int fd = 0;
    uint64_t size = 0;
    CHECK_STATUS(attn_io_open_input(p, NULL, 0, &fd, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(fd == -1, "fd %d after a failed open", fd);
    CHECK_OK(attn_io_open_input(p, NULL, 0, &fd, &size));
    CHECK(fd >= 0 && size == 8, "open_input: fd %d, %llu bytes", fd, (unsigned long long)size);
    if (fd >= 0) close(fd);

    /* the output checks */
    const char *const ins[2] = {NULL, p};
    CHECK(attn_io_same_file(p, p) && !attn_io_same_file(p, NULL), "same_file");
    CHECK_STATUS(attn_io_check_output("--out", p, ins, 2, ATTN_IO_KIND_CSV, 1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "--out '") == attn_last_error() &&
              strstr(attn_last_error(), "refusing to overwrite an input") != NULL,
          "same file: %s", attn_last_error());
    CHECK_OK(attn_io_check_output("--out", p, NULL, 0, ATTN_IO_KIND_CSV, 0));
    CHECK_STATUS(attn_io_check_output(NULL, p, NULL, 0, ATTN_IO_KIND_SVG, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "output '") == attn_last_error() &&
              strstr(attn_last_error(), "exists and is not an SVG file") != NULL,
          "kind: %s", attn_last_error());
    CHECK_OK(attn_io_check_output(NULL, p, NULL, 0, ATTN_IO_KIND_SVG, 1));
    CHECK_STATUS(attn_io_check_output("--svg", dir, NULL, 0, ATTN_IO_KIND_SVG, 1), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "--svg: output '") == attn_last_error(), "target: %s", attn_last_error());
    CHECK_STATUS(attn_io_check_output(NULL, p, NULL, 0, (attn_io_kind)9, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_io_check_output(NULL, NULL, NULL, 0, ATTN_IO_KIND_CSV, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_io_check_output(NULL, p, NULL, 1, ATTN_IO_KIND_CSV, 0), ATTN_ERR_INVALID_ARGUMENT);
    write_text(at("b.svg", q, sizeof q), "\n <svg xmlns=\"http://www.w3.org/2000/svg\"/>\n");
    CHECK_OK(attn_io_check_output(NULL, q, NULL, 0, ATTN_IO_KIND_SVG, 0));

    /* a failed begin leaves nothing; NULL arguments */
    CHECK(attn_io_out_fopen(&o, dir) == NULL && o.fd == -1, "fopen on a folder");
    CHECK(attn_io_out_fopen(NULL, p) == NULL && attn_last_error()[0], "fopen(NULL)");
    CHECK_STATUS(attn_io_out_fclose(NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_io_out_begin(NULL, p), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_io_out_commit(NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_io_check_target(NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_io_out_abort(NULL);
    /* attn_io_out_write / _commit through the descriptor */
    CHECK_OK(attn_io_out_begin(&o, at("c.txt", q, sizeof q)));
    CHECK_OK(attn_io_out_write(&o, "xyz", 3));
    CHECK_OK(attn_io_out_commit(&o));
    struct stat sb;
    CHECK(stat(q, &sb) == 0 && sb.st_size == 3, "committed file");
    CHECK_STATUS(attn_io_out_write(&o, "x", 1), ATTN_ERR_INVALID_ARGUMENT); /* committed: closed */
}

static const char mha_json[] = "{\"module\": \"multihead_attention\", \"embed_dim\": 8, \"num_heads\": 2}";

static void test_model_file(void) {
    char p[128], w[128];
    attn_model *m = (attn_model *)1;
    CHECK_STATUS(attn_model_create_file(at("missing.json", p, sizeof p), &m), ATTN_ERR_IO);
    CHECK(m == NULL && strstr(attn_last_error(), "cannot read '") == attn_last_error(), "missing: %s",
          attn_last_error());
    write_text(at("bad.json", p, sizeof p), "{\"module\": }");
    CHECK_STATUS(attn_model_create_file(p, &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(!strncmp(attn_last_error(), p, strlen(p)) && strstr(attn_last_error(), ": line 1 column") != NULL,
          "JSON error: %s", attn_last_error());
    write_text(at("unknown.json", p, sizeof p), "{\"module\": \"nonesuch\"}");
    CHECK_STATUS(attn_model_create_file(p, &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(!strncmp(attn_last_error(), p, strlen(p)) && strstr(attn_last_error(), "nonesuch") != NULL,
          "unknown module: %s", attn_last_error());
    CHECK_STATUS(attn_model_create_file(NULL, &m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_model_create_file(p, NULL), ATTN_ERR_INVALID_ARGUMENT);

    /* the same module from the file and from the text; weights through attn_model_load */
    write_text(at("mha.json", p, sizeof p), mha_json);
    attn_model *a = NULL, *b = NULL;
    CHECK_OK(attn_model_create_file(p, &a));
    CHECK_OK(attn_model_create_json(mha_json, strlen(mha_json), &b));
    if (!a || !b) goto done;
    CHECK(!strcmp(attn_model_name(a), "multihead_attention") && attn_model_vit(a) == NULL &&
              attn_model_vit(NULL) == NULL,
          "name / vit");
    CHECK_OK(attn_params_reset(attn_model_params(b), 5));
    CHECK_OK(attn_params_save_file(attn_model_params(b), at("w.safetensors", w, sizeof w)));
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(w, &st));
    CHECK_STATUS(attn_model_load(a, NULL, NULL, 1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_model_load(NULL, st, NULL, 1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_model_load(a, st, "nothing.", 1) != ATTN_OK && strstr(attn_last_error(), "in_proj_weight") != NULL,
          "a missing weight is named: %s", attn_last_error());
    CHECK_OK(attn_model_load(a, st, NULL, 1));
    attn_safetensors_close(st);
    const attn_params *pa = attn_model_params(a), *pb = attn_model_params(b);
    int same = attn_params_count(pa) == attn_params_count(pb);
    for (size_t i = 0; same && i < attn_params_count(pa); i++)
        same = !memcmp(attn_params_get(pa, i)->data, attn_params_get(pb, i)->data,
                       sizeof(float) * attn_params_get(pa, i)->numel);
    CHECK(same, "attn_model_load gives the saved parameters");
done:
    attn_model_free(a);
    attn_model_free(b);
}

#define BB 2
#define HH 2
#define NN 24
#define DD 8

static void test_kind_call(test_rng *r) {
    const size_t n = (size_t)BB * HH * NN * DD;
    float *x = xmalloc(sizeof(float) * n * 7);
    float lse[BB * HH * NN], stats[BB * HH * NN];
    fill_normal(r, x, n * 7, 1.0);
    attn_tensor q = attn_tensor_4d(x, BB, HH, NN, DD), k = attn_tensor_4d(x + n, BB, HH, NN, DD),
                v = attn_tensor_4d(x + 2 * n, BB, HH, NN, DD), o1 = attn_tensor_4d(x + 3 * n, BB, HH, NN, DD),
                o2 = attn_tensor_4d(x + 4 * n, BB, HH, NN, DD);
    attn_tensor lt = attn_tensor_3d(lse, BB, HH, NN);
    attn_attention_config cfg = attn_attention_config_default();
    attn_sdpa_params sp = attn_sdpa_params_default();
    sp.causal = 1;
    CHECK(attn_attention_kind_stats_per_row(ATTN_ATTENTION_FLASH) == 1 &&
              attn_attention_kind_stats_per_row(ATTN_ATTENTION_LINEAR) == 0 &&
              attn_attention_kind_stats_per_row((attn_attention_kind)99) == 0,
          "stats_per_row");
    const size_t wb = attn_attention_workspace_size(&cfg, &q, &k, &v, &sp, NULL);
    const size_t fb = attn_flash_workspace_size(&q, &k, &v);
    void *ws = xmalloc((wb > fb ? wb : fb) + 1);
    CHECK_OK(attn_flash_forward(&q, &k, &v, &sp, &o1, &lt, ws, fb));
    CHECK_OK(attn_attention_forward(&cfg, &q, &k, &v, &sp, NULL, &o2, stats, ws, wb));
    CHECK(!memcmp(x + 3 * n, x + 4 * n, sizeof(float) * n) && !memcmp(lse, stats, sizeof lse),
          "the flash kind is attn_flash_forward");
    /* the backward runs (dv over o1's block, dq and dk in the spare ones) */
    float *dkb = xmalloc(sizeof(float) * n);
    attn_tensor go = attn_tensor_4d(x + 5 * n, BB, HH, NN, DD), dq = attn_tensor_4d(x + 6 * n, BB, HH, NN, DD),
                dk = attn_tensor_4d(dkb, BB, HH, NN, DD), dv = attn_tensor_4d(x + 3 * n, BB, HH, NN, DD);
    CHECK_OK(attn_attention_backward(&cfg, &q, &k, &v, &sp, NULL, &o2, &go, stats, &dq, &dk, &dv, ws, wb));
    CHECK_STATUS(attn_attention_backward(&cfg, &q, &k, &v, &sp, NULL, &o2, &go, NULL, &dq, &dk, &dv, ws, wb),
                 ATTN_ERR_INVALID_ARGUMENT);
    /* argument checks */
    uint8_t g[BB * NN] = {0};
    attn_btensor gm = attn_btensor_2d(g, BB, NN);
    CHECK_STATUS(attn_attention_forward(&cfg, &q, &k, &v, &sp, &gm, &o2, NULL, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_attention_forward(NULL, &q, &k, &v, &sp, NULL, &o2, NULL, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_attention_forward(&cfg, &q, &k, &v, &sp, NULL, NULL, NULL, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    attn_clear_error();
    CHECK(attn_attention_workspace_size(NULL, &q, &k, &v, NULL, NULL) == 0 && attn_last_error()[0], "size(NULL)");
    attn_attention_config bad = cfg;
    bad.kind = ATTN_ATTENTION_WINDOW;
    bad.window = -1;
    CHECK_STATUS(attn_attention_forward(&bad, &q, &k, &v, NULL, NULL, &o2, NULL, ws, wb), ATTN_ERR_INVALID_ARGUMENT);
    /* local_global takes the global mask */
    attn_attention_config lg = cfg;
    lg.kind = ATTN_ATTENTION_LOCAL_GLOBAL;
    lg.window = 4;
    g[3] = g[NN + 7] = 1;
    const size_t lb = attn_attention_workspace_size(&lg, &q, &k, &v, NULL, &gm);
    void *lws = xmalloc(lb + 1);
    CHECK_OK(attn_attention_forward(&lg, &q, &k, &v, NULL, &gm, &o2, NULL, lws, lb));
    free(lws);
    free(dkb);
    free(ws);
    free(x);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/attn_cli_api_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_rng r = rng_seeded(3);
    test_io();
    test_model_file();
    test_kind_call(&r);
    const char *problem = "unset", *env = attn_cache_env(&problem);
    CHECK(getenv("ATTN_CACHE") ? env != NULL : env == NULL && problem == NULL, "attn_cache_env: %s",
          env ? env : "(null)");
    CHECK(attn_cache_env(NULL) == env, "attn_cache_env(NULL)");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_public_cli_api");
}
