/* libFuzzer harness: training checkpoints (attn_checkpoint_load's validation and restore, through
 * its in-memory twin attn_tr_checkpoint_load_memory). The objects are a multi-head attention of
 * embed_dim 4, 2 heads (the model of corpus_gen.c's valid checkpoints), an AdamW with amsgrad and
 * an SGD with momentum over it. Each input is loaded four ways: without the checksum comparison
 * (so that mutated files reach the metadata, shape and dtype checks behind it) into the model,
 * AdamW and train state; with it; model only; and into the SGD. A rejected load must leave every
 * object bitwise as it was and set a message; an accepted one must have passed the checksum. */
#include <string.h>

#include "attn/nn.h"
#include "attn/train.h"
#include "fuzz_util.h"
#include "train/train_internal.h"

static attn_mha *mha;
static attn_optimizer *adamw, *sgd;

static void setup(void) {
    if (mha) return;
    attn_mha_config mc = attn_mha_config_default(4, 2);
    REQUIRE(attn_mha_create(&mc, &mha) == ATTN_OK);
    REQUIRE(attn_params_reset(attn_mha_params(mha), 1) == ATTN_OK);
    attn_adamw_config ac = attn_adamw_config_default();
    ac.amsgrad = 1;
    REQUIRE(attn_adamw_create(attn_mha_params(mha), &ac, &adamw) == ATTN_OK);
    attn_sgd_config sc = attn_sgd_config_default();
    sc.momentum = 0.9;
    REQUIRE(attn_sgd_create(attn_mha_params(mha), &sc, &sgd) == ATTN_OK);
}

/* Everything a load may change, as bytes. */
typedef struct snap {
    unsigned char *p;
    size_t len;
} snap;

static void snap_add(snap *s, const void *src, size_t n) {
    s->p = realloc(s->p, s->len + n + 1);
    REQUIRE(s->p != NULL);
    memcpy(s->p + s->len, src, n);
    s->len += n;
}

static snap take(const attn_optimizer *opt, const attn_train_state *st) {
    static const char *const slots[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};
    snap s = {NULL, 0};
    const attn_params *ps = attn_mha_params(mha);
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *p = attn_params_get(ps, i);
        snap_add(&s, p->data, p->numel * sizeof(float));
        for (size_t k = 0; opt && k < sizeof slots / sizeof slots[0]; k++) {
            float *d = NULL;
            if (attn_optimizer_state(opt, i, slots[k], &d) == ATTN_OK) snap_add(&s, d, p->numel * sizeof(float));
        }
    }
    if (opt) {
        int64_t steps = attn_optimizer_steps(opt);
        snap_add(&s, &steps, sizeof steps);
    }
    if (st) snap_add(&s, st, sizeof *st);
    return s;
}

static void load(const uint8_t *data, size_t size, attn_optimizer *opt, int with_state, int verify) {
    attn_train_state state;
    memset(&state, 0x3c, sizeof state);
    attn_train_state *stp = with_state ? &state : NULL;
    snap before = take(opt, stp);
    attn_clear_error();
    attn_status s = attn_tr_checkpoint_load_memory(data, size, "fuzz input", attn_mha_params(mha), opt, stp, verify);
    if (s != ATTN_OK) {
        REQUIRE(attn_last_error()[0] != '\0');
        snap after = take(opt, stp);
        REQUIRE(after.len == before.len && !memcmp(after.p, before.p, before.len));
        free(after.p);
    } else if (opt) {
        REQUIRE(attn_optimizer_steps(opt) >= 0);
    }
    free(before.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    load(data, size, adamw, 1, 0);
    load(data, size, adamw, 1, 1);
    load(data, size, NULL, 0, 0);
    load(data, size, sgd, 0, 1);
    return 0;
}
