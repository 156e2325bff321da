/* Checkpoints: a training run (multi-head self-attention with dropout, MSE, AdamW with amsgrad,
 * warmup + cosine schedule, clipping) interrupted after 5 of 10 steps, saved, loaded into fresh
 * objects and continued gives bitwise the losses, parameters and moments of the uninterrupted run
 * (SGD with momentum too); truncated and corrupted files, missing and mis-shaped tensors, a wrong
 * optimizer, a stray PATH.tmp (left alone) and a failing write are all rejected with a
 * clear message while the objects and the previous checkpoint stay bitwise intact; the in-memory
 * entry of the fuzz harness applies the same checks, its checksum comparison optional. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "attn/train.h"
#include "train/train_internal.h"

static char dir[] = "/tmp/attn_test_ckpt.XXXXXX";

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

/* Files in dir whose name starts with prefix. */
static int temps_left(const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return n;
}

/* ---- a small training run ---- */

#define E 8
#define HEADS 2
#define B 2
#define N 5

typedef struct run {
    attn_mha *mha;
    attn_optimizer *opt;
    attn_train_state state;
    void *saved, *ws;
    size_t saved_bytes, ws_bytes;
} run;

static const attn_lr_schedule SCHED = {3e-2, 3e-3, 3, 10};

static void run_create(run *r, int sgd, uint64_t init_seed) {
    memset(r, 0, sizeof *r);
    attn_mha_config mc = attn_mha_config_default(E, HEADS);
    mc.dropout = 0.2f;
    CHECK_OK(attn_mha_create(&mc, &r->mha));
    if (!r->mha) exit(1);
    const attn_params *ps = attn_mha_params(r->mha);
    CHECK_OK(attn_params_reset(ps, init_seed));
    if (sgd) {
        attn_sgd_config sc = attn_sgd_config_default();
        sc.momentum = 0.9;
        sc.nesterov = 1;
        sc.weight_decay = 1e-2;
        CHECK_OK(attn_sgd_create(ps, &sc, &r->opt));
    } else {
        attn_adamw_config ac = attn_adamw_config_default();
        ac.amsgrad = 1;
        ac.weight_decay = 0.1;
        CHECK_OK(attn_adamw_create(ps, &ac, &r->opt));
        CHECK_OK(attn_optimizer_set_weight_decay(r->opt, 1, 0.0)); /* no decay on in_proj_bias */
    }
    if (!r->opt) exit(1);
    r->state.rng_seed = 0x5eed;
    r->state.rng_offset = 1000;
}

static void run_free(run *r) {
    attn_optimizer_free(r->opt);
    attn_mha_free(r->mha);
    free(r->saved);
    free(r->ws);
    memset(r, 0, sizeof *r);
}

/* One step: a batch drawn from the data position, forward with dropout from (rng_seed,
 * rng_offset), MSE against a target, backward, attn_train_step. Returns the loss. */
static float run_step(run *r) {
    const attn_params *ps = attn_mha_params(r->mha);
    float x[B * N * E], y[B * N * E], out[B * N * E], dout[B * N * E], dx[B * N * E];
    for (int i = 0; i < B * N * E; i++)
        x[i] = 2.0f * attn_philox_uniform(77, (uint64_t)r->state.data_position, (uint64_t)i) - 1.0f;
    for (int i = 0; i < B * N * E; i++) y[i] = 0.5f * x[(i + E) % (B * N * E)]; /* the next position, scaled */
    attn_mha_args a = attn_mha_args_default();
    a.batch = B;
    a.nq = a.nk = N;
    a.query = a.key = a.value = x;
    a.training = 1;
    a.seed = r->state.rng_seed;
    a.offset = r->state.rng_offset;
    const size_t sb = attn_mha_saved_size(r->mha, &a), wb = attn_mha_workspace_size(r->mha, &a);
    if (sb > r->saved_bytes) {
        free(r->saved);
        r->saved = xmalloc(sb);
        r->saved_bytes = sb;
    }
    if (wb > r->ws_bytes) {
        free(r->ws);
        r->ws = xmalloc(wb);
        r->ws_bytes = wb;
    }
    float loss = NAN;
    CHECK_OK(attn_params_zero_grad(ps));
    CHECK_OK(attn_mha_forward(r->mha, &a, out, NULL, r->saved, r->saved_bytes, r->ws, r->ws_bytes));
    CHECK_OK(attn_mse_forward(out, y, B * N * E, ATTN_REDUCTION_MEAN, &loss));
    CHECK_OK(attn_mse_backward(out, y, B * N * E, ATTN_REDUCTION_MEAN, NULL, dout, NULL));
    CHECK_OK(attn_mha_backward(r->mha, &a, dout, dx, dx, dx, r->saved, r->saved_bytes, r->ws, r->ws_bytes));
    double lr = 0, norm = 0;
    CHECK_OK(attn_lr_warmup_cosine(&SCHED, r->state.step, &lr));
    CHECK_OK(attn_train_step(r->opt, lr, 0.5, 1, &norm));
    r->state.step++;
    r->state.rng_offset += 16;
    r->state.data_position += B;
    return loss;
}

/* Every parameter and optimizer state float, concatenated (for bitwise comparisons). */
static size_t snapshot(const run *r, float *dst) {
    const attn_params *ps = attn_mha_params(r->mha);
    size_t off = 0;
    static const char *const keys[4] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        if (dst) memcpy(dst + off, p->data, p->numel * 4);
        off += p->numel;
        for (int k = 0; k < 4; k++) {
            float *s = NULL;
            if (attn_optimizer_state(r->opt, i, keys[k], &s) != ATTN_OK) continue;
            if (dst) memcpy(dst + off, s, p->numel * 4);
            off += p->numel;
        }
    }
    attn_clear_error();
    return off;
}

static void test_resume(int sgd) {
    const char *what = sgd ? "sgd" : "adamw";
    char path[600];
    path_in(path, sizeof path, sgd ? "sgd.safetensors" : "adamw.safetensors");
    float losses[10], resumed[10];
    run a, b;
    run_create(&a, sgd, 1);
    for (int s = 0; s < 10; s++) losses[s] = run_step(&a);
    CHECK(losses[9] < losses[0], "%s: the loss did not decrease (%g -> %g)", what, (double)losses[0],
          (double)losses[9]);
    const size_t n = snapshot(&a, NULL);
    float *want = xmalloc(n * 4), *got = xmalloc(n * 4);
    snapshot(&a, want);
    /* 5 steps, save, throw everything away */
    run_create(&b, sgd, 1);
    for (int s = 0; s < 5; s++) resumed[s] = run_step(&b);
    const char *keys[2] = {"task", "note"}, *vals[2] = {"shift by one position", "caf\xc3\xa9 \"quoted\""};
    CHECK_OK(attn_checkpoint_save(path, attn_mha_params(b.mha), b.opt, &b.state, keys, vals, 2));
    run_free(&b);
    /* fresh objects, other initial weights: everything must come from the file */
    run_create(&b, sgd, 999);
    attn_safetensors *f = NULL;
    CHECK_OK(attn_checkpoint_load(path, attn_mha_params(b.mha), b.opt, &b.state, &f));
    CHECK(b.state.step == 5 && b.state.data_position == 5 * B && b.state.rng_seed == 0x5eed &&
              b.state.rng_offset == 1000 + 5 * 16 && attn_optimizer_steps(b.opt) == 5,
          "%s: restored state step %lld pos %lld seed %llx offset %llu, optimizer steps %lld", what,
          (long long)b.state.step, (long long)b.state.data_position, (unsigned long long)b.state.rng_seed,
          (unsigned long long)b.state.rng_offset, (long long)attn_optimizer_steps(b.opt));
    if (f) {
        const char *v1 = attn_safetensors_metadata_find(f, "task"), *v2 = attn_safetensors_metadata_find(f, "note");
        CHECK(v1 && !strcmp(v1, vals[0]) && v2 && !strcmp(v2, vals[1]), "%s: user metadata not read back", what);
        const char *ok = attn_safetensors_metadata_find(f, "attn.optimizer");
        CHECK(ok && !strcmp(ok, what), "%s: attn.optimizer = %s", what, ok ? ok : "(none)");
        attn_safetensors_close(f);
    }
    for (int s = 5; s < 10; s++) resumed[s] = run_step(&b);
    snapshot(&b, got);
    CHECK(!memcmp(losses, resumed, sizeof losses), "%s: losses after resuming differ from the uninterrupted run", what);
    CHECK(!memcmp(want, got, n * 4), "%s: parameters / moments after resuming differ from the uninterrupted run", what);
    printf("  %s: 10 steps, loss %.5f -> %.5f; resumed at step 5: losses, parameters and moments bitwise equal (%zu "
           "floats)\n",
           what, (double)losses[0], (double)losses[9], n);
    run_free(&a);
    run_free(&b);
    free(want);
    free(got);
}

/* ---- damaged files ---- */

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = xmalloc((size_t)n);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static void write_all(const char *path, const unsigned char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(b, 1, len, f);
    fclose(f);
}

static char last_msg[512];

/* load must fail with `want` (or any error when want == ATTN_OK) and leave r bitwise unchanged; the
 * message is kept in last_msg. */
static void expect_rejected(run *r, const char *path, attn_status want, const char *needle, const char *what) {
    const size_t n = snapshot(r, NULL);
    float *before = xmalloc(n * 4), *after = xmalloc(n * 4);
    snapshot(r, before);
    attn_train_state st = r->state;
    const int64_t steps = attn_optimizer_steps(r->opt);
    attn_clear_error();
    attn_safetensors *f = (attn_safetensors *)1;
    const attn_status s = attn_checkpoint_load(path, attn_mha_params(r->mha), r->opt, &r->state, &f);
    CHECK(s != ATTN_OK && (want == ATTN_OK || s == want) && f == NULL, "%s: load -> %s (want %s)", what,
          attn_status_str(s), want == ATTN_OK ? "an error" : attn_status_str(want));
    snprintf(last_msg, sizeof last_msg, "%s", attn_last_error());
    CHECK(strstr(last_msg, "attn_checkpoint_load") && (!needle || strstr(last_msg, needle)),
          "%s: message '%s' lacks '%s'", what, last_msg, needle ? needle : "attn_checkpoint_load");
    snapshot(r, after);
    CHECK(!memcmp(before, after, n * 4) && !memcmp(&st, &r->state, sizeof st) && steps == attn_optimizer_steps(r->opt),
          "%s: a failed load modified the objects", what);
    free(before);
    free(after);
}

static void test_damaged(void) {
    char path[600], bad[600], tmp[620];
    path_in(path, sizeof path, "good.safetensors");
    path_in(bad, sizeof bad, "bad.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    run r;
    run_create(&r, 0, 5);
    for (int s = 0; s < 3; s++) run_step(&r);
    const char *k1[1] = {"run"}, *v1[1] = {"first"};
    CHECK_OK(attn_checkpoint_save(path, attn_mha_params(r.mha), r.opt, &r.state, k1, v1, 1));
    CHECK(access(tmp, F_OK) != 0, "PATH.tmp left behind after a save");
    size_t len = 0;
    unsigned char *good = read_all(path, &len);
    CHECK(good && len > 200, "cannot read back %s", path);
    if (!good) return;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | good[i];
    /* a second, different run to load into (its state must survive every failed load) */
    run o;
    run_create(&o, 0, 6);
    run_step(&o);
    /* truncated anywhere */
    const size_t cuts[6] = {0, 5, 8, (size_t)(8 + hl / 2), (size_t)(8 + hl + 3), len - 1};
    for (int k = 0; k < 6; k++) {
        write_all(bad, good, cuts[k]);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu of %zu bytes", cuts[k], len);
        expect_rejected(&o, bad, ATTN_OK, "not a readable checkpoint", what);
        if (k == 3) printf("  %s\n", last_msg);
    }
    /* one flipped bit in the data: a weight, a moment, the last scalar */
    const size_t spots[3] = {(size_t)(8 + hl + 4), (size_t)(8 + hl + (len - 8 - hl) / 2), len - 2};
    for (int k = 0; k < 3; k++) {
        unsigned char *c = xmalloc(len);
        memcpy(c, good, len);
        c[spots[k]] ^= 0x10;
        write_all(bad, c, len);
        char what[64];
        snprintf(what, sizeof what, "bit flipped at byte %zu", spots[k]);
        expect_rejected(&o, bad, ATTN_ERR_IO, "corrupted: checksum", what);
        if (k == 0) printf("  %s\n", last_msg);
        free(c);
    }
    /* a changed metadata value and a renamed tensor, both still valid safetensors */
    unsigned char *c = xmalloc(len);
    memcpy(c, good, len);
    char *hit = strstr((char *)c + 8, "\"first\"");
    if (hit) hit[1] = 'F';
    write_all(bad, c, len);
    CHECK(hit != NULL, "metadata value not found in the header");
    expect_rejected(&o, bad, ATTN_ERR_IO, "corrupted", "metadata value changed");
    { /* the fuzz harness's in-memory entry: the same checks, the checksum comparison optional */
        run p;
        run_create(&p, 0, 7);
        attn_train_state ms;
        memset(&ms, 0, sizeof ms);
        CHECK_STATUS(attn_tr_checkpoint_load_memory(c, len, "mem", attn_mha_params(p.mha), p.opt, &ms, 1), ATTN_ERR_IO);
        CHECK(strstr(attn_last_error(), "'mem' is corrupted"), "memory load: %s", attn_last_error());
        CHECK_OK(attn_tr_checkpoint_load_memory(c, len, "mem", attn_mha_params(p.mha), p.opt, &ms, 0));
        CHECK(ms.step == 3 && attn_optimizer_steps(p.opt) == 3, "memory load: step %lld", (long long)ms.step);
        const attn_param *a = attn_params_get(attn_mha_params(p.mha), 0),
                         *b = attn_params_get(attn_mha_params(r.mha), 0);
        CHECK(!memcmp(a->data, b->data, a->numel * sizeof(float)), "memory load: %s differs from the saved run",
              a->name);
        CHECK_STATUS(attn_tr_checkpoint_load_memory(c, len / 2, "mem", attn_mha_params(p.mha), p.opt, &ms, 0),
                     ATTN_ERR_ST_OFFSET_OUT_OF_BOUNDS);
        run_free(&p);
    }
    memcpy(c, good, len);
    hit = strstr((char *)c + 8, "\"out_proj.bias\"");
    if (hit) hit[1] = 'p';
    write_all(bad, c, len);
    expect_rejected(&o, bad, ATTN_OK, NULL, "tensor renamed");
    free(c);
    /* a stray PATH.tmp (an older build's temporary name, or anyone's file) is neither used nor removed:
     * each save writes a fresh temporary file of its own, and leaves none behind */
    write_all(tmp, good, len / 3);
    attn_train_state st;
    CHECK_OK(attn_checkpoint_load(path, attn_mha_params(o.mha), o.opt, &st, NULL));
    CHECK(st.step == 3, "previous checkpoint: step %lld, want 3", (long long)st.step);
    run_step(&r);
    CHECK_OK(attn_checkpoint_save(path, attn_mha_params(r.mha), r.opt, &r.state, NULL, NULL, 0));
    CHECK(temps_left("good.safetensors.tmp-") == 0, "a temporary file left behind after a save");
    size_t lent = 0;
    unsigned char *stray = read_all(tmp, &lent);
    CHECK(stray && lent == len / 3, "the stray PATH.tmp was changed");
    free(stray);
    unlink(tmp);
    CHECK_OK(attn_checkpoint_load(path, attn_mha_params(o.mha), o.opt, &st, NULL));
    CHECK(st.step == 4, "new checkpoint: step %lld, want 4", (long long)st.step);
    /* a write that fails (the file size limit is hit, as on a full disk) leaves the previous
     * checkpoint intact and no temporary file */
    size_t len4 = 0;
    unsigned char *four = read_all(path, &len4);
    run_step(&r);
    struct rlimit old_lim, lim;
    getrlimit(RLIMIT_FSIZE, &old_lim);
    lim = old_lim;
    lim.rlim_cur = (rlim_t)(len4 / 2);
    void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    CHECK_STATUS(attn_checkpoint_save(path, attn_mha_params(r.mha), r.opt, &r.state, NULL, NULL, 0), ATTN_ERR_IO);
    setrlimit(RLIMIT_FSIZE, &old_lim);
    signal(SIGXFSZ, old_sig);
    CHECK(temps_left("good.safetensors.tmp-") == 0, "a temporary file left behind after a failed save");
    size_t len5 = 0;
    unsigned char *after = read_all(path, &len5);
    CHECK(four && after && len4 == len5 && !memcmp(four, after, len4), "a failed save changed the previous checkpoint");
    CHECK_OK(attn_checkpoint_load(path, attn_mha_params(o.mha), o.opt, &st, NULL));
    CHECK(st.step == 4, "after a failed save: step %lld, want 4", (long long)st.step);
    free(four);
    free(after);
    free(good);
    run_free(&r);
    run_free(&o);
}

/* ---- expected tensors ---- */

static void test_expected(void) {
    char path[600];
    path_in(path, sizeof path, "shapes.safetensors");
    run r, o;
    run_create(&r, 0, 7);
    run_create(&o, 0, 8);
    run_step(&o);
    /* another model size: every parameter and moment has the wrong shape, listed by name */
    attn_mha_config mc = attn_mha_config_default(4, 2);
    attn_mha *small = NULL;
    CHECK_OK(attn_mha_create(&mc, &small));
    attn_optimizer *so = NULL;
    attn_adamw_config ac = attn_adamw_config_default();
    ac.amsgrad = 1;
    CHECK_OK(attn_adamw_create(attn_mha_params(small), &ac, &so));
    attn_train_state st = {1, 2, 3, 4, 5};
    CHECK_OK(attn_checkpoint_save(path, attn_mha_params(small), so, &st, NULL, NULL, 0));
    expect_rejected(&o, path, ATTN_ERR_SHAPE, "in_proj_weight [12, 4] (expected [24, 8])", "smaller model");
    CHECK(strstr(last_msg, "wrong shape (16)") != NULL, "message: %s", last_msg);
    printf("  %s\n", last_msg);
    /* no amsgrad in the file: the max_exp_avg_sq moments are missing */
    attn_optimizer *plain = NULL;
    CHECK_OK(attn_adamw_create(attn_mha_params(r.mha), NULL, &plain));
    CHECK_OK(attn_checkpoint_save(path, attn_mha_params(r.mha), plain, &st, NULL, NULL, 0));
    expect_rejected(&o, path, ATTN_ERR_NOT_FOUND, "missing (4): optimizer.max_exp_avg_sq.in_proj_weight", "no amsgrad");
    printf("  %s\n", last_msg);
    /* no state saved */
    CHECK_OK(attn_checkpoint_save(path, attn_mha_params(r.mha), r.opt, NULL, NULL, NULL, 0));
    expect_rejected(&o, path, ATTN_ERR_NOT_FOUND, "train.step", "no training state");
    /* ... which loads when no state is asked for; a model-only load ignores the optimizer */
    CHECK_OK(attn_checkpoint_load(path, attn_mha_params(o.mha), o.opt, NULL, NULL));
    CHECK_OK(attn_checkpoint_load(path, attn_mha_params(o.mha), NULL, NULL, NULL));
    /* no optimizer saved, or another kind */
    CHECK_OK(attn_checkpoint_save(path, attn_mha_params(r.mha), NULL, &st, NULL, NULL, 0));
    expect_rejected(&o, path, ATTN_ERR_INVALID_ARGUMENT, "optimizer 'none'", "no optimizer");
    attn_optimizer *sgd = NULL;
    CHECK_OK(attn_sgd_create(attn_mha_params(r.mha), NULL, &sgd));
    CHECK_OK(attn_checkpoint_save(path, attn_mha_params(r.mha), sgd, &st, NULL, NULL, 0));
    expect_rejected(&o, path, ATTN_ERR_INVALID_ARGUMENT, "optimizer 'sgd'", "sgd checkpoint into adamw");
    /* a plain weights file is not a checkpoint */
    CHECK_OK(attn_params_save_file(attn_mha_params(r.mha), path));
    expect_rejected(&o, path, ATTN_ERR_NOT_FOUND, "not an attn checkpoint", "plain weights file");
    path_in(path, sizeof path, "absent.safetensors");
    expect_rejected(&o, path, ATTN_ERR_IO, "absent.safetensors", "absent file");
    /* arguments */
    const char *k[1] = {"attn.mine"}, *v[1] = {"x"};
    CHECK_STATUS(attn_checkpoint_save(path, attn_mha_params(r.mha), r.opt, NULL, k, v, 1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_checkpoint_save(path, attn_mha_params(r.mha), r.opt, NULL, NULL, NULL, 1),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_checkpoint_save(NULL, attn_mha_params(r.mha), r.opt, NULL, NULL, NULL, 0),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_checkpoint_save(path, NULL, r.opt, NULL, NULL, NULL, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_checkpoint_load(NULL, attn_mha_params(r.mha), NULL, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    path_in(path, sizeof path, "nodir/x.safetensors");
    CHECK_STATUS(attn_checkpoint_save(path, attn_mha_params(r.mha), r.opt, NULL, NULL, NULL, 0), ATTN_ERR_IO);
    attn_optimizer_free(sgd);
    attn_optimizer_free(plain);
    attn_optimizer_free(so);
    attn_mha_free(small);
    run_free(&r);
    run_free(&o);
}

/* XXH64 known answers (the published algorithm, seed 0) over bytes b[i] = i * 37 + 11. */
static void test_xxh64(void) {
    unsigned char buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (unsigned char)(i * 37 + 11);
    static const struct {
        size_t n;
        uint64_t h;
    } kat[] = {{0, 0xef46db3751d8e999ull},  {1, 0xf592c0c7639c4cb6ull},   {3, 0x22c08528601d4f27ull},
               {4, 0xfb1e5cf2f1ae4d95ull},  {7, 0x5613ac510496c04eull},   {8, 0x57cb2b7521f3e21aull},
               {31, 0xe4a0e629e519a4aeull}, {32, 0xcc6b8aaada790b2dull},  {33, 0x35ec49850475a832ull},
               {64, 0x155ccce4bf32befcull}, {100, 0x4826e367566ea023ull}, {300, 0x8923b28a8498a506ull}};
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++)
        CHECK(attn_tr_xxh64(buf, kat[i].n) == kat[i].h, "XXH64 of %zu bytes: %016llx, want %016llx", kat[i].n,
              (unsigned long long)attn_tr_xxh64(buf, kat[i].n), (unsigned long long)kat[i].h);
    CHECK(attn_tr_xxh64("abc", 3) == 0x44bc2cf5ad770999ull, "XXH64(\"abc\")");
}

int main(void) {
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 2;
    }
    test_xxh64();
    test_resume(0);
    test_resume(1);
    test_damaged();
    test_expected();
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_train_checkpoint");
}
