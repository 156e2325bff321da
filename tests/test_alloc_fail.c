/* Allocation-failure sweep: every library allocation goes through src/core/alloc.c, whose test hook
 * makes the k-th one fail. For each phase of a small GPT run (create + AdamW, forward, backward,
 * optimizer step, checkpoint save, checkpoint load), of an encoder-decoder (attn_seq2seq) and of
 * the model API on nn.Transformer and nn.MultiheadAttention (create, bind, forward with a capture,
 * backward; GPT with exact, local_global and performer attention), of a ViT (create, forward with
 * a capture, backward, rollout, parameter file save and load) and of the image and safetensors
 * paths (decode, resize, overlay, save, load; a joined parameter list written to memory and read
 * back), the phase is run with
 * k = 1, 2, ... until a run sees no injected failure. The call whose allocation failed must return
 * ATTN_ERR_OUT_OF_MEMORY with a message and leave what the API promises untouched (a failed create
 * gives NULL, a failed load modifies nothing, a failed save leaves no file behind); the call is
 * then retried without the failure and the run goes on: every run must end with bitwise the
 * results of a run without the hook (a failure leaves no half-updated state), and everything is
 * freed through the usual free calls (LeakSanitizer checks that under `make asan`). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <unistd.h>

#include "test_util.h"
#include "attn/model.h"
#include "attn/train.h"
#include "attn/image.h"
#include "attn/viz.h"
#include "core/alloc.h"
#include "core/internal.h"

static char dir[] = "/tmp/attn_test_allocfail.XXXXXX";

static int files_in_dir(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

static void clear_dir(void) {
    DIR *d = opendir(dir);
    char p[512];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
}

/* ---- arming: only the phase under test runs with the hook ---- */

static int cur_phase; /* the phase being swept in this run */
static long cur_k;
static int injected; /* the armed failure happened in that phase */
static long counted; /* allocations the phase made */

static void arm(int phase) {
    if (phase == cur_phase) attn__alloc_fail_after(cur_k);
}
static void disarm(int phase) {
    if (phase != cur_phase) return;
    injected = attn__alloc_injected();
    counted = attn__alloc_count();
    attn__alloc_fail_after(0);
}

/* Whether this call of phase p is the one whose allocation failed: then it must have returned
 * ATTN_ERR_OUT_OF_MEMORY with a message. Otherwise it must have succeeded. */
static int phase_failed(const char *scenario, int phase, const char *name, attn_status st) {
    if (phase == cur_phase && injected) {
        CHECK(st == ATTN_ERR_OUT_OF_MEMORY && attn_last_error()[0],
              "%s: %s with allocation %ld failing -> %s (want out of memory), msg '%s'", scenario, name, cur_k,
              attn_status_str(st), attn_last_error());
        return 1;
    }
    CHECK(st == ATTN_OK, "%s: %s -> %s: %s", scenario, name, attn_status_str(st), attn_last_error());
    return 0;
}

/* Run expr, armed when p is the phase swept. When its allocation failed: run `after` (the checks
 * of what a failure must leave), then expr again without the hook, which must succeed. */
#define PHASE_THEN(p, name, expr, after)                                                                               \
    do {                                                                                                               \
        attn_clear_error();                                                                                            \
        arm(p);                                                                                                        \
        attn_status st_ = (expr);                                                                                      \
        disarm(p);                                                                                                     \
        if (phase_failed(SCENARIO, p, name, st_)) {                                                                    \
            after;                                                                                                     \
            st_ = (expr);                                                                                              \
            CHECK(st_ == ATTN_OK, "%s: %s retried after allocation %ld failed -> %s: %s", SCENARIO, name, cur_k,       \
                  attn_status_str(st_), attn_last_error());                                                            \
        }                                                                                                              \
        if (st_ != ATTN_OK) goto done;                                                                                 \
    } while (0)
#define PHASE(p, name, expr) PHASE_THEN(p, name, expr, (void)0)
/* a create whose allocation failed must leave *out NULL */
#define PHASE_CREATE(p, name, out, expr)                                                                               \
    PHASE_THEN(p, name, expr,                                                                                          \
               CHECK((out) == NULL, "%s: %s failed (allocation %ld) but gave an object", SCENARIO, name, cur_k))

/* ---- GPT: create + AdamW, forward, backward, step, save, load ---- */

enum { G_CREATE = 1, G_FORWARD, G_BACKWARD, G_STEP, G_SAVE, G_LOAD, G_PHASES };
static const char *const gpt_phase_names[] = {"", "create", "forward", "backward", "step", "save", "load"};

#define VOCAB 11
#define GB 2
#define GN 6

static int64_t gtok[GB * GN], gtgt[GB * GN];

typedef struct gpt_result {
    float logits[GB * GN * VOCAB];
    float *weights; /* after the step (saved, then loaded into a second model) */
    size_t numel;
} gpt_result;

static attn_attention_kind gpt_kind;

static attn_gpt_config gpt_config(void) {
    attn_gpt_config c = attn_gpt_config_default(VOCAB, 16, 8, 2, 2);
    c.layer.dim_feedforward = 16;
    c.layer.dropout = gpt_kind == ATTN_ATTENTION_PERFORMER ? 0.0f : 0.1f; /* performer: no weight dropout */
    c.layer.attention.kind = gpt_kind;
    if (gpt_kind == ATTN_ATTENTION_LOCAL_GLOBAL) c.layer.attention.window = 2;
    if (gpt_kind == ATTN_ATTENTION_PERFORMER) c.layer.attention.num_features = 8, c.layer.attention.seed = 3;
    return c;
}

/* The model and its optimizer; on failure neither (the caller's pointers stay NULL). */
static attn_status gpt_new(attn_gpt **g, attn_optimizer **o, uint64_t seed) {
    attn_gpt_config c = gpt_config();
    attn_gpt *m = NULL;
    attn_status st = attn_gpt_create(&c, &m);
    CHECK(st == ATTN_OK || m == NULL, "attn_gpt_create failed but gave a model");
    if (st == ATTN_OK) st = attn_params_reset(attn_gpt_params(m), seed);
    attn_adamw_config ac = attn_adamw_config_default();
    if (st == ATTN_OK) st = attn_adamw_create(attn_gpt_params(m), &ac, o);
    CHECK(st == ATTN_OK || *o == NULL, "attn_adamw_create failed but gave an optimizer");
    if (st != ATTN_OK) {
        attn_gpt_free(m);
        return st;
    }
    *g = m;
    return ATTN_OK;
}

static int params_equal(const attn_params *a, const float *flat) {
    size_t off = 0;
    for (size_t i = 0; i < attn_params_count(a); i++) {
        const attn_param *p = attn_params_get(a, i);
        if (memcmp(p->data, flat + off, sizeof(float) * p->numel)) return 0;
        off += p->numel;
    }
    return 1;
}

static void params_flatten(const attn_params *a, float *flat) {
    size_t off = 0;
    for (size_t i = 0; i < attn_params_count(a); i++) {
        const attn_param *p = attn_params_get(a, i);
        memcpy(flat + off, p->data, sizeof(float) * p->numel);
        off += p->numel;
    }
}

/* One run; with phase 0 nothing is armed (the reference). Returns 1 when it got to the end. */
static int gpt_run(int phase, long k, gpt_result *res) {
#define SCENARIO attn_attention_kind_name(gpt_kind)
    cur_phase = phase, cur_k = k, injected = 0, counted = 0;
    attn_gpt *g = NULL, *g2 = NULL;
    attn_optimizer *o = NULL, *o2 = NULL;
    void *saved = NULL, *ws = NULL;
    float *dlogits = NULL, *before = NULL;
    int complete = 0;
    char path[600];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    clear_dir();

    PHASE_CREATE(G_CREATE, "create", g, gpt_new(&g, &o, 5));
    attn_gpt_args a = {.batch = GB, .n = GN, .tokens = gtok, .training = 1, .seed = 9, .offset = 0};
    size_t sb = attn_gpt_saved_size(g, &a), wb = attn_gpt_workspace_size(g, &a);
    saved = xmalloc(sb);
    ws = xmalloc(wb);
    dlogits = xmalloc(sizeof(float) * GB * GN * VOCAB);
    PHASE(G_FORWARD, "forward", attn_gpt_forward(g, &a, res->logits, saved, sb, ws, wb));
    attn_cross_entropy_config cc = attn_cross_entropy_config_default();
    float loss = 0;
    CHECK_OK(attn_cross_entropy_forward(res->logits, gtgt, GB * GN, VOCAB, &cc, &loss, dlogits));
    CHECK_OK(attn_params_zero_grad(attn_gpt_params(g)));
    PHASE(G_BACKWARD, "backward", attn_gpt_backward(g, &a, dlogits, saved, sb, ws, wb));
    PHASE(G_STEP, "step", attn_train_step(o, 1e-2, 1.0, 1, NULL));
    params_flatten(attn_gpt_params(g), res->weights);
    if (phase && phase < G_SAVE) { /* the files only for the phases that write and read them (fsyncs are slow) */
        complete = 1;
        goto done;
    }
    attn_train_state ts = {.step = 1, .rng_seed = 9, .rng_offset = 1};
    const char *mk[] = {"note"}, *mv[] = {"alloc sweep"};
    PHASE_THEN(G_SAVE, "save", attn_checkpoint_save(path, attn_gpt_params(g), o, &ts, mk, mv, 1),
               CHECK(files_in_dir() == 0, "gpt: failed save (allocation %ld) left %d files behind", k, files_in_dir()));
    PHASE(0, "second model", gpt_new(&g2, &o2, 6));
    before = xmalloc(sizeof(float) * res->numel);
    params_flatten(attn_gpt_params(g2), before);
    attn_train_state ts2 = {0};
    attn_safetensors *file = NULL;
    PHASE_THEN(G_LOAD, "load", attn_checkpoint_load(path, attn_gpt_params(g2), o2, &ts2, &file),
               CHECK(params_equal(attn_gpt_params(g2), before) && attn_optimizer_steps(o2) == 0 && ts2.step == 0 &&
                         file == NULL,
                     "gpt: failed load (allocation %ld) modified the model, optimizer or state", k));
    attn_safetensors_close(file);
    CHECK(ts2.step == 1 && ts2.rng_offset == 1, "gpt: train state restored");
    CHECK(attn_optimizer_steps(o2) == 1, "gpt: optimizer steps restored");
    CHECK(params_equal(attn_gpt_params(g2), res->weights), "gpt: loaded weights equal the saved ones");
    complete = 1;
done:
    attn_optimizer_free(o);
    attn_optimizer_free(o2);
    attn_gpt_free(g);
    attn_gpt_free(g2);
    free(saved);
    free(ws);
    free(dlogits);
    free(before);
    return complete;
#undef SCENARIO
}

/* ---- encoder-decoder (attn_seq2seq): create, forward, backward ---- */

enum { S_CREATE = 1, S_FORWARD, S_BACKWARD, S_PHASES };
static const char *const s2s_phase_names[] = {"", "create", "forward", "backward"};

#define SB 2
#define SNS 5
#define SNT 4
#define SV 9

static int64_t ssrc[SB * SNS], stgt[SB * SNT];
static float sdlog[SB * SNT * SV];

static int s2s_run(int phase, long k, float *logits, float *grads, size_t numel) {
#define SCENARIO "seq2seq"
    cur_phase = phase, cur_k = k, injected = 0, counted = 0;
    attn_seq2seq *m = NULL;
    void *saved = NULL, *ws = NULL;
    int complete = 0;
    attn_seq2seq_config c = attn_seq2seq_config_default(SV, SV, 8, 2, 2);
    c.transformer.layer.dim_feedforward = 16;
    PHASE_CREATE(S_CREATE, "create", m, attn_seq2seq_create(&c, &m));
    CHECK_OK(attn_params_reset(attn_seq2seq_params(m), 3));
    attn_seq2seq_args a = attn_seq2seq_args_default();
    a.batch = SB, a.n_src = SNS, a.n_tgt = SNT, a.src = ssrc, a.tgt = stgt, a.training = 1, a.seed = 4;
    size_t sb = attn_seq2seq_saved_size(m, &a), wb = attn_seq2seq_workspace_size(m, &a);
    saved = xmalloc(sb);
    ws = xmalloc(wb);
    PHASE(S_FORWARD, "forward", attn_seq2seq_forward(m, &a, logits, saved, sb, ws, wb));
    CHECK_OK(attn_params_zero_grad(attn_seq2seq_params(m)));
    PHASE(S_BACKWARD, "backward", attn_seq2seq_backward(m, &a, sdlog, saved, sb, ws, wb));
    size_t off = 0;
    const attn_params *ps = attn_seq2seq_params(m);
    for (size_t i = 0; i < attn_params_count(ps) && off + attn_params_get(ps, i)->numel <= numel; i++) {
        memcpy(grads + off, attn_params_get(ps, i)->grad, sizeof(float) * attn_params_get(ps, i)->numel);
        off += attn_params_get(ps, i)->numel;
    }
    CHECK(off == numel, "seq2seq: %zu gradient floats, want %zu", off, numel);
    complete = 1;
done:
    attn_seq2seq_free(m);
    free(saved);
    free(ws);
    return complete;
#undef SCENARIO
}

/* ---- the model API: create, stage + bind, forward (with a capture), backward ---- */

enum { M_CREATE = 1, M_BIND, M_FORWARD, M_BACKWARD, M_PHASES };
static const char *const model_phase_names[] = {"", "create", "bind", "forward", "backward"};

#define MB 2
#define MN 4
#define ME 8

static float mx[MB * MN * ME], my[MB * MN * ME], mdout[MB * MN * ME];

typedef struct model_case {
    const char *name, *json;
    const char *in1, *in2; /* the float inputs staged (in2 nullable) */
} model_case;

static const model_case model_cases[] = {
    {"transformer",
     "{\"module\": \"transformer\", \"d_model\": 8, \"nhead\": 2, \"num_encoder_layers\": 1, "
     "\"num_decoder_layers\": 1, \"dim_feedforward\": 16, \"dropout\": 0.1, \"batch_first\": true}",
     "src", "tgt"},
    {"multihead_attention",
     "{\"module\": \"multihead_attention\", \"embed_dim\": 8, \"num_heads\": 2, \"dropout\": 0.1, "
     "\"batch_first\": true, \"need_weights\": true, \"average_attn_weights\": false}",
     "query", NULL},
};

/* Staging references the inputs until the bind, which drops them also on failure: a retry stages
 * again. */
static attn_status stage_bind(attn_model *m, const model_case *mc) {
    const int64_t shape[3] = {MB, MN, ME};
    attn_status st = attn_model_input(m, mc->in1, ATTN_DTYPE_F32, 3, shape, mx);
    if (st == ATTN_OK && mc->in2) st = attn_model_input(m, mc->in2, ATTN_DTYPE_F32, 3, shape, my);
    if (st == ATTN_OK) return attn_model_bind(m);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", attn_last_error());
    (void)attn_model_bind(m); /* fails (an input is missing) but empties the stage for a retry */
    return attn_error(st, "%s", msg);
}

static int model_run(const model_case *mc, int phase, long k, float *out, float *dx) {
#define SCENARIO mc->name
    cur_phase = phase, cur_k = k, injected = 0, counted = 0;
    attn_model *m = NULL;
    attn_capture *cap = NULL;
    int complete = 0;
    PHASE_CREATE(M_CREATE, "create", m, attn_model_create_json(mc->json, strlen(mc->json), &m));
    CHECK_OK(attn_params_reset(attn_model_params(m), 8));
    PHASE(M_BIND, "stage + bind", stage_bind(m, mc));
    PHASE(0, "capture", attn_capture_create(&cap));
    PHASE(0, "capture", attn_capture_add(cap, "*", 0, 0, 0, 0));
    PHASE(M_FORWARD, "forward", attn_model_forward(m, 1, 1, 21, 0, cap));
    const float *o = attn_model_output(m, NULL, NULL);
    CHECK(o != NULL, "%s: output after a forward", mc->name);
    if (o) memcpy(out, o, sizeof(float) * MB * MN * ME);
    PHASE(M_BACKWARD, "backward", attn_model_backward(m, mdout));
    size_t n = 0;
    const float *g = attn_model_input_grad(m, mc->in1, &n);
    CHECK(g && n == MB * MN * ME, "%s: input gradient", mc->name);
    if (g && n == MB * MN * ME) memcpy(dx, g, sizeof(float) * n);
    complete = 1;
done:
    attn_capture_free(cap);
    attn_model_free(m);
    return complete;
#undef SCENARIO
}

/* ---- ViT: create, forward with a capture, backward, rollout, parameters to a file and back ---- */

enum { V_CREATE = 1, V_FORWARD, V_BACKWARD, V_ROLLOUT, V_SAVE, V_LOAD, V_PHASES };
static const char *const vit_phase_names[] = {"", "create", "forward", "backward", "rollout", "save", "load"};

#define VB 2
#define VIMG 8
#define VCLS 3
#define VTOK 5 /* the class token and 2 x 2 patches */

static float vimg[VB * VIMG * VIMG], vdlog[VB * VCLS];

typedef struct vit_result {
    float logits[VB * VCLS], dimg[VB * VIMG * VIMG], rollout[VB * VTOK * VTOK];
    float *saved_w; /* the parameters saved (then loaded into a second model) */
    size_t numel;
} vit_result;

static attn_vit_config vit_config(void) {
    attn_vit_config c = attn_vit_config_default(VIMG, 4, 2, 2, 8, 16, VCLS);
    c.in_channels = 1;
    c.dropout = 0.1f;
    return c;
}

/* A failed parameter load modifies nothing (the second model's parameters stay zero). */
static int params_all_zero(const attn_params *ps) {
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        for (size_t e = 0; e < p->numel; e++)
            if (p->data[e] != 0.0f) return 0;
    }
    return 1;
}

static attn_status zero_params(const attn_params *ps) {
    for (size_t i = 0; i < attn_params_count(ps); i++)
        memset(attn_params_get(ps, i)->data, 0, sizeof(float) * attn_params_get(ps, i)->numel);
    return ATTN_OK;
}

static attn_status rollout(const attn_capture *cap, float *out) {
    attn_capture_record rec[2];
    if (attn_capture_count(cap) != 2) return attn_error(ATTN_ERR_SHAPE, "want 2 capture records");
    for (size_t i = 0; i < 2; i++) {
        attn_status st = attn_capture_get(cap, i, &rec[i]);
        if (st != ATTN_OK) return st;
    }
    return attn_viz_rollout_records(rec, 2, out);
}

static int vit_run(int phase, long k, vit_result *res) {
#define SCENARIO "vit"
    cur_phase = phase, cur_k = k, injected = 0, counted = 0;
    attn_vit *v = NULL, *v2 = NULL;
    attn_capture *cap = NULL;
    void *saved = NULL, *ws = NULL;
    int complete = 0;
    char path[600];
    snprintf(path, sizeof path, "%s/vit.safetensors", dir);
    clear_dir();
    attn_vit_config c = vit_config();
    PHASE_CREATE(V_CREATE, "create", v, attn_vit_create(&c, &v));
    CHECK_OK(attn_params_reset(attn_vit_params(v), 12));
    PHASE(0, "capture", attn_capture_create(&cap));
    PHASE(0, "capture", attn_capture_add(cap, "layers.*.self_attn", 0, 0, 0, 0));
    attn_vit_args a = {.batch = VB, .images = vimg, .training = 1, .seed = 2, .capture = cap};
    size_t sb = attn_vit_saved_size(v, &a), wb = attn_vit_workspace_size(v, &a);
    saved = xmalloc(sb);
    ws = xmalloc(wb);
    PHASE(V_FORWARD, "forward", attn_vit_forward(v, &a, res->logits, saved, sb, ws, wb));
    CHECK_OK(attn_params_zero_grad(attn_vit_params(v)));
    PHASE(V_BACKWARD, "backward", attn_vit_backward(v, &a, vdlog, res->dimg, saved, sb, ws, wb));
    PHASE(V_ROLLOUT, "rollout", rollout(cap, res->rollout));
    params_flatten(attn_vit_params(v), res->saved_w);
    if (phase && phase < V_SAVE) {
        complete = 1;
        goto done;
    }
    PHASE_THEN(V_SAVE, "save", attn_params_save_file(attn_vit_params(v), path),
               CHECK(files_in_dir() == 0, "vit: failed save (allocation %ld) left %d files behind", k, files_in_dir()));
    PHASE(0, "second model", attn_vit_create(&c, &v2));
    CHECK_OK(zero_params(attn_vit_params(v2)));
    PHASE_THEN(V_LOAD, "load", attn_params_load_file(attn_vit_params(v2), path),
               CHECK(params_all_zero(attn_vit_params(v2)), "vit: failed load (allocation %ld) modified the model", k));
    CHECK(params_equal(attn_vit_params(v2), res->saved_w), "vit: loaded parameters equal the saved ones");
    complete = 1;
done:
    attn_capture_free(cap);
    attn_vit_free(v);
    attn_vit_free(v2);
    free(saved);
    free(ws);
    return complete;
#undef SCENARIO
}

/* ---- files and images: decode, resize, overlay, save, load; a joined parameter list written to
 * safetensors in memory and read back ---- */

enum { I_DECODE = 1, I_RESIZE, I_OVERLAY, I_SAVE, I_LOAD, I_JOIN, I_WRITE, I_READ, I_PHASES };
static const char *const io_phase_names[] = {"",     "decode", "resize", "overlay", "save",
                                             "load", "join",   "write",  "read"};

#define IW 7
#define IH 5
#define OW 160 /* the saved overlay is over 64 KiB: attn_image_load grows its buffer */
#define OH 140

static unsigned char ppm[64 + IW * IH * 3];
static size_t ppm_len;
static float imap[2 * 3];

typedef struct io_result {
    uint8_t overlay[OH * OW * 3], loaded[OH * OW * 3];
    float *back; /* the parameters read back */
    size_t numel;
} io_result;

static attn_status read_back(const void *buf, size_t len, const attn_params *ps, float *out) {
    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_open_memory(buf, len, &st);
    CHECK(s == ATTN_OK || st == NULL, "attn_safetensors_open_memory failed but gave a file");
    const char *m = s == ATTN_OK ? attn_safetensors_metadata_find(st, "note") : NULL;
    if (s == ATTN_OK && (!m || strcmp(m, "alloc"))) s = attn_error(ATTN_ERR_NOT_FOUND, "metadata 'note' lost");
    for (size_t i = 0, off = 0; s == ATTN_OK && i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        s = attn_safetensors_read_f32(st, p->name, out + off, p->numel);
        off += p->numel;
    }
    attn_safetensors_close(st);
    return s;
}

static attn_status write_mem(const attn_params *ps, void **buf, size_t *len) {
    attn_safetensors_writer *w = NULL;
    attn_status s = attn_safetensors_writer_create(&w);
    if (s == ATTN_OK) s = attn_params_write(ps, w, NULL);
    if (s == ATTN_OK) s = attn_safetensors_writer_add_metadata(w, "note", "alloc");
    if (s == ATTN_OK) s = attn_safetensors_writer_write_memory(w, buf, len);
    attn_safetensors_writer_free(w);
    return s;
}

static int io_run(int phase, long k, io_result *res) {
#define SCENARIO "io"
    cur_phase = phase, cur_k = k, injected = 0, counted = 0;
    attn_image img = {0}, small = {0}, over = {0}, back = {0};
    attn_mha *m1 = NULL, *m2 = NULL;
    attn_params *joined = NULL;
    void *buf = NULL;
    size_t len = 0;
    int complete = 0;
    char path[600];
    snprintf(path, sizeof path, "%s/over.ppm", dir);
    clear_dir();
    PHASE_THEN(I_DECODE, "decode", attn_image_decode(ppm, ppm_len, &img),
               CHECK(img.pixels == NULL, "io: failed decode gave pixels"));
    PHASE_THEN(I_RESIZE, "resize", attn_image_resize(&img, 3, 4, &small),
               CHECK(small.pixels == NULL, "io: failed resize gave pixels"));
    PHASE_THEN(I_OVERLAY, "overlay", attn_viz_overlay(&small, imap, 2, 3, OH, OW, 0.4, 0, &over),
               CHECK(over.pixels == NULL, "io: failed overlay gave pixels"));
    CHECK(over.width == OW && over.height == OH && over.channels == 3, "io: overlay shape");
    memcpy(res->overlay, over.pixels, sizeof res->overlay);
    PHASE_THEN(I_SAVE, "save", attn_image_save(path, &over),
               CHECK(files_in_dir() == 0, "io: failed image save (allocation %ld) left %d files", k, files_in_dir()));
    PHASE_THEN(I_LOAD, "load", attn_image_load(path, &back), CHECK(back.pixels == NULL, "io: failed load gave pixels"));
    CHECK(back.width == OW && back.height == OH && back.channels == 3, "io: loaded shape");
    memcpy(res->loaded, back.pixels, sizeof res->loaded);
    attn_mha_config mc = attn_mha_config_default(8, 2);
    PHASE(0, "mha", attn_mha_create(&mc, &m1));
    PHASE(0, "mha", attn_mha_create(&mc, &m2));
    CHECK_OK(attn_params_reset(attn_mha_params(m1), 1));
    CHECK_OK(attn_params_reset(attn_mha_params(m2), 2));
    const attn_params *lists[2] = {attn_mha_params(m1), attn_mha_params(m2)};
    const char *const prefixes[2] = {"a.", "b."};
    PHASE_CREATE(I_JOIN, "join", joined, attn_params_join(lists, prefixes, 2, &joined));
    PHASE_THEN(I_WRITE, "write", write_mem(joined, &buf, &len), CHECK(buf == NULL, "io: failed write gave a buffer"));
    PHASE(I_READ, "read", read_back(buf, len, joined, res->back));
    complete = 1;
done:
    attn_image_free(&img);
    attn_image_free(&small);
    attn_image_free(&over);
    attn_image_free(&back);
    free(buf);
    attn_params_join_free(joined);
    attn_mha_free(m1);
    attn_mha_free(m2);
    return complete;
#undef SCENARIO
}

/* ---- the sweeps ---- */

/* Runs each phase with k = 1, 2, ... until a run sees no injected failure (the allocations that
 * phase makes are the points swept); RUN returns whether the run got to its end, every run must
 * (the failed call is retried), with the reference's results (CHECK_RESULT). */
#define SWEEP(label, nphases, names, RUN, CHECK_RESULT)                                                                \
    for (int p_ = 1; p_ < (nphases); p_++) {                                                                           \
        long k_ = 1;                                                                                                   \
        for (;; k_++) {                                                                                                \
            int complete_ = RUN(p_, k_);                                                                               \
            CHECK(complete_, "%s %s: the run with allocation %ld failing did not complete", label, (names)[p_], k_);   \
            CHECK_RESULT;                                                                                              \
            if (!injected || k_ > 100000) break;                                                                       \
        }                                                                                                              \
        printf("%-20s %-9s %3ld allocation points swept\n", label, (names)[p_], k_ - 1);                               \
        total_points += k_ - 1;                                                                                        \
    }

/* Blocks of weights (attn__weights_alloc / attn__weights_at): page-aligned, arrays of at least
 * ATTN_WEIGHTS_PAGE_MIN floats on a page, smaller ones packed; a GPT's matrices (nn stores) so. */
static void check_weight_pages(void) {
    const size_t pf = ATTN_WEIGHTS_PAGE / sizeof(float), big = ATTN_WEIGHTS_PAGE_MIN;
    CHECK(attn__weights_at(0, big) == 0 && attn__weights_at(1, big) == pf && attn__weights_at(pf, big) == pf &&
              attn__weights_at(pf + 1, big) == 2 * pf && attn__weights_at(5, big - 1) == 5 &&
              attn__weights_at(SIZE_MAX - 3, big) == SIZE_MAX,
          "attn__weights_at: matrices to the next page, small arrays where they are, overflow saturated");
    float *w = attn__weights_alloc(3 * pf);
    CHECK(w && (uintptr_t)w % ATTN_WEIGHTS_PAGE == 0 && w[0] == 0 && w[3 * pf - 1] == 0,
          "attn__weights_alloc: page-aligned and zeroed");
    attn__free(w);
    attn_gpt_config c = attn_gpt_config_default(256, 128, 128, 4, 2); /* 128 x 128 and 512 x 128 matrices */
    c.layer.dim_feedforward = 512;
    attn_gpt *g = NULL;
    CHECK_OK(attn_gpt_create(&c, &g));
    const attn_params *ps = g ? attn_gpt_params(g) : NULL;
    size_t matrices = 0, on_pages = 0;
    for (size_t i = 0; ps && i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        if (p->numel < big) continue;
        matrices++;
        on_pages += (uintptr_t)p->data % ATTN_WEIGHTS_PAGE == 0 && (uintptr_t)p->grad % sizeof(float) == 0;
    }
    CHECK(matrices >= 4 && on_pages == matrices, "gpt: %zu of its %zu matrices start on a page", on_pages, matrices);
    attn_gpt_free(g);
}

int main(void) {
    test_rng r = rng_seeded(0xa110cfa1);
    /* One thread: the library allocates outside its OpenMP regions (the points are the same), and
     * the thousands of short runs cost ten times more in thread start-ups and barriers. */
    attn_set_num_threads(1);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    for (int i = 0; i < GB * GN; i++) gtok[i] = (int64_t)(rng_next(&r) % VOCAB);
    for (int i = 0; i < GB * GN; i++) gtgt[i] = (int64_t)(rng_next(&r) % VOCAB);
    for (int i = 0; i < SB * SNS; i++) ssrc[i] = (int64_t)(rng_next(&r) % SV);
    for (int i = 0; i < SB * SNT; i++) stgt[i] = (int64_t)(rng_next(&r) % SV);
    fill_normal(&r, sdlog, SB * SNT * SV, 1.0);
    fill_normal(&r, mx, MB * MN * ME, 1.0);
    fill_normal(&r, my, MB * MN * ME, 1.0);
    fill_normal(&r, mdout, MB * MN * ME, 1.0);
    long total_points = 0;

    /* the hook itself: the k-th allocation (of any kind) fails, once, and is counted */
    attn__alloc_fail_after(2);
    void *p1 = attn__malloc(10), *p2 = attn__aligned_alloc(64, 100), *p3 = attn__aligned_alloc(64, 100);
    char *p4 = attn__strdup("abc");
    CHECK(p1 && !p2 && p3 && ((uintptr_t)p3 & 63) == 0 && p4 && !strcmp(p4, "abc") && attn__alloc_injected() &&
              attn__alloc_count() == 4,
          "alloc hook: allocation 2 of 4 fails, the others succeed (aligned to 64)");
    attn__free(p1);
    attn__free(p3);
    attn__free(p4);
    attn__alloc_fail_after(0);
    p1 = attn__calloc(3, 4);
    CHECK(p1 && !attn__alloc_injected(), "alloc hook: disarmed");
    attn__free(p1);

    check_weight_pages();

    /* GPT: the reference run, then the sweep. */
    const attn_attention_kind kinds[] = {ATTN_ATTENTION_FLASH, ATTN_ATTENTION_LOCAL_GLOBAL, ATTN_ATTENTION_PERFORMER};
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
        gpt_kind = kinds[ki];
        attn_gpt *g = NULL;
        attn_gpt_config c = gpt_config();
        CHECK_OK(attn_gpt_create(&c, &g));
        size_t numel = g ? attn_params_numel(attn_gpt_params(g)) : 0;
        attn_gpt_free(g);
        gpt_result ref = {.numel = numel}, got = {.numel = numel};
        ref.weights = xmalloc(sizeof(float) * numel);
        got.weights = xmalloc(sizeof(float) * numel);
        CHECK(gpt_run(0, 0, &ref), "gpt %s: reference run", attn_attention_kind_name(gpt_kind));
#define GPT_RUN(p, k) gpt_run(p, k, &got)
#define GPT_SAME                                                                                                       \
    CHECK(!memcmp(got.logits, ref.logits, sizeof ref.logits) &&                                                        \
              !memcmp(got.weights, ref.weights, sizeof(float) * numel),                                                \
          "%s %s: the run with allocation %ld failing differs from the reference", attn_attention_kind_name(gpt_kind), \
          gpt_phase_names[p_], k_)
        char label[64];
        snprintf(label, sizeof label, "gpt %s", attn_attention_kind_name(gpt_kind));
        SWEEP(label, G_PHASES, gpt_phase_names, GPT_RUN, GPT_SAME);
        free(ref.weights);
        free(got.weights);
    }

    /* seq2seq */
    {
        attn_seq2seq *m = NULL;
        attn_seq2seq_config c = attn_seq2seq_config_default(SV, SV, 8, 2, 2);
        c.transformer.layer.dim_feedforward = 16;
        CHECK_OK(attn_seq2seq_create(&c, &m));
        size_t numel = m ? attn_params_numel(attn_seq2seq_params(m)) : 0;
        attn_seq2seq_free(m);
        static float rlog[SB * SNT * SV], glog[SB * SNT * SV];
        float *rg = xmalloc(sizeof(float) * numel), *gg = xmalloc(sizeof(float) * numel);
        CHECK(s2s_run(0, 0, rlog, rg, numel), "seq2seq: reference run");
#define S2S_RUN(p, k) s2s_run(p, k, glog, gg, numel)
#define S2S_SAME                                                                                                       \
    CHECK(!memcmp(glog, rlog, sizeof rlog) && !memcmp(gg, rg, sizeof(float) * numel),                                  \
          "seq2seq %s: the run with allocation %ld failing differs from the reference", s2s_phase_names[p_], k_)
        SWEEP("seq2seq", S_PHASES, s2s_phase_names, S2S_RUN, S2S_SAME);
        free(rg);
        free(gg);
    }

    /* the model API */
    for (size_t c = 0; c < sizeof model_cases / sizeof model_cases[0]; c++) {
        const model_case *mc = &model_cases[c];
        static float rout[MB * MN * ME], rdx[MB * MN * ME], gout[MB * MN * ME], gdx[MB * MN * ME];
        CHECK(model_run(mc, 0, 0, rout, rdx), "%s: reference run", mc->name);
#define MODEL_RUN(p, k) model_run(mc, p, k, gout, gdx)
#define MODEL_SAME                                                                                                     \
    CHECK(!memcmp(gout, rout, sizeof rout) && !memcmp(gdx, rdx, sizeof rdx),                                           \
          "%s %s: the run with allocation %ld failing differs from the reference", mc->name, model_phase_names[p_],    \
          k_)
        SWEEP(mc->name, M_PHASES, model_phase_names, MODEL_RUN, MODEL_SAME);
    }

    /* ViT */
    {
        attn_vit *v = NULL;
        attn_vit_config c = vit_config();
        CHECK_OK(attn_vit_create(&c, &v));
        size_t numel = v ? attn_params_numel(attn_vit_params(v)) : 0;
        attn_vit_free(v);
        fill_normal(&r, vimg, VB * VIMG * VIMG, 1.0);
        fill_normal(&r, vdlog, VB * VCLS, 1.0);
        vit_result ref = {.numel = numel}, got = {.numel = numel};
        ref.saved_w = xmalloc(sizeof(float) * numel);
        got.saved_w = xmalloc(sizeof(float) * numel);
        CHECK(vit_run(0, 0, &ref), "vit: reference run");
#define VIT_RUN(p, k) vit_run(p, k, &got)
#define VIT_SAME                                                                                                       \
    CHECK(!memcmp(got.logits, ref.logits, sizeof ref.logits) && !memcmp(got.dimg, ref.dimg, sizeof ref.dimg) &&        \
              !memcmp(got.rollout, ref.rollout, sizeof ref.rollout) &&                                                 \
              !memcmp(got.saved_w, ref.saved_w, sizeof(float) * numel),                                                \
          "vit %s: the run with allocation %ld failing differs from the reference", vit_phase_names[p_], k_)
        SWEEP("vit", V_PHASES, vit_phase_names, VIT_RUN, VIT_SAME);
        free(ref.saved_w);
        free(got.saved_w);
    }

    /* files and images */
    {
        int n = snprintf((char *)ppm, 64, "P6\n%d %d\n255\n", IW, IH);
        for (int i = 0; i < IW * IH * 3; i++) ppm[n + i] = (unsigned char)(rng_next(&r) & 255);
        ppm_len = (size_t)n + IW * IH * 3;
        fill_normal(&r, imap, 6, 1.0);
        attn_mha *m = NULL;
        attn_mha_config mc = attn_mha_config_default(8, 2);
        CHECK_OK(attn_mha_create(&mc, &m));
        size_t numel = m ? 2 * attn_params_numel(attn_mha_params(m)) : 0;
        attn_mha_free(m);
        io_result ref = {.numel = numel}, got = {.numel = numel};
        ref.back = xmalloc(sizeof(float) * numel);
        got.back = xmalloc(sizeof(float) * numel);
        CHECK(io_run(0, 0, &ref), "io: reference run");
#define IO_RUN(p, k) io_run(p, k, &got)
#define IO_SAME                                                                                                        \
    CHECK(!memcmp(got.overlay, ref.overlay, sizeof ref.overlay) &&                                                     \
              !memcmp(got.loaded, ref.loaded, sizeof ref.loaded) &&                                                    \
              !memcmp(got.back, ref.back, sizeof(float) * numel),                                                      \
          "io %s: the run with allocation %ld failing differs from the reference", io_phase_names[p_], k_)
        SWEEP("io", I_PHASES, io_phase_names, IO_RUN, IO_SAME);
        free(ref.back);
        free(got.back);
    }

    printf("%ld allocation points swept in all\n", total_points);
    CHECK(total_points > 0, "no allocation point swept");
    clear_dir();
    rmdir(dir);
    return test_summary("test_alloc_fail");
}
