/* The attention-kind table: what attn_mha (and through it every layer, stack and model) calls to
 * compute attention, one row per kind (kinds.c). A kind lives in its own file and supplies the
 * functions below; adding one is that file, its enum value in attention.h (before
 * ATTN_ATTENTION_KIND_COUNT) and its row in kinds.c, indexed by that value (the build fails when
 * the table and the enum differ in length).
 *
 * Every function takes per-head views: Q [B, H, Nq, d], K [B, Hk, Nk, d], V [B, Hk, Nk, dv],
 * O [B, H, Nq, dv] (any strides, as attn_flash_*), and the masks, causality and dropout the caller
 * gathered in attn_sdpa_params; a kind that cannot honour one of them says so
 * (ATTN_ERR_UNSUPPORTED with a message). */
#ifndef ATTN_ATTENTION_KIND_H
#define ATTN_ATTENTION_KIND_H

#include "attn/attention.h"

/* One incremental-decoding step (eval): n new query rows per batch attend to the positions seen
 * so far. Kinds that decode over stored keys and values (state_floats == NULL) get k / v as views
 * over the whole cache [B, Hk, L, d], the new rows already appended, and `causal` means new row i
 * sits at position L - n + i. Recurrent kinds get the new rows only in k / v (NULL when nothing
 * is appended) and their state, which they update; q NULL (a cross-attention cache fill) asks
 * them to absorb k / v only. key_mask: [B, L] true = real key, or NULL. */
typedef struct attn_kind_step {
    const attn_attention_config *cfg;
    const attn_tensor *q, *k, *v;
    attn_tensor *out;
    int causal;
    const attn_btensor *key_mask;
    float *state; /* recurrent kinds: state_floats(...) floats, zeroed when reset */
} attn_kind_step;

/* Per-call inputs some kinds take beyond attn_sdpa_params (NULL = absent). A kind that does not
 * take one is never handed it: attn_mha refuses the call first (takes_* flags below). */
typedef struct attn_kind_extra {
    /* [B, Nq] true = a global token (Longformer): it attends to every key and every query attends
     * to it; self-attention (Nq == Nk) */
    const attn_btensor *global_mask;
} attn_kind_extra;

typedef struct attn_kind_ops {
    const char *name, *help;
    /* The attn_attention_config fields the kind reads, comma-separated ("window",
     * "num_features,seed"; "" for none), each followed by '!' when the caller must set it. */
    const char *options;
    /* Options of cfg that apply to this kind, validated (fn names the caller in messages). */
    attn_status (*check)(const char *fn, const attn_attention_config *cfg);
    int takes_global_mask; /* attn_kind_extra.global_mask */
    /* Capabilities attn_mha asks of the row (never of the kind's identity):
     * supports_bf16: under attn_nn_precision() == ATTN_PRECISION_BF16 the kind is handed
     *   bf16-rounded copies of Q, K, V (and dO in the backward) and runs the flash kernel's bf16
     *   path; the other kinds stay float.
     * takes_bias_kv: combines with attn_mha's add_bias_kv / add_zero_attn (extra key / value
     *   columns appended before the kind sees K and V).
     * random_features: approximates softmax with attention.num_features random features, drawn
     *   from attention.seed (attn_mha_redraw_features draws them anew) or given as
     *   attention.projection [projection_heads, num_features, d] (projection_heads 1 or the
     *   module's heads); `attn run`'s configurations read num_features for it. */
    int supports_bf16, takes_bias_kv, random_features;
    /* Floats per (batch, head, query row) the forward keeps for the backward (softmax kinds:
     * the log-sum-exp). */
    int64_t stats_per_row;
    size_t (*workspace_size)(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                             const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x);
    /* stats [B * H * Nq * stats_per_row] (NULL when no backward follows). */
    attn_status (*forward)(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x, attn_tensor *out,
                           float *stats, void *ws, size_t ws_bytes);
    /* dq, dk, dv overwritten; dk and dv have unit innermost stride. */
    attn_status (*backward)(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                            const attn_tensor *v, const attn_sdpa_params *p, const attn_kind_extra *x,
                            const attn_tensor *out, const attn_tensor *dout, const float *stats, attn_tensor *dq,
                            attn_tensor *dk, attn_tensor *dv, void *ws, size_t ws_bytes);
    /* Exact weights of rows [row0, row0 + rows) of (b, h) into w [rows, Nk], as attn_flash_weights;
     * NULL for a kind that has none. */
    attn_status (*weights)(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                           const attn_sdpa_params *p, const attn_kind_extra *x, int64_t b, int64_t h, int64_t row0,
                           int64_t rows, int apply_dropout, float *w);
    /* Decoding: NULL for kinds that keep keys and values; else the recurrent state's floats. */
    size_t (*state_floats)(const attn_attention_config *cfg, int64_t batch, int64_t heads, int64_t d, int64_t dv);
    size_t (*step_workspace_size)(const attn_attention_config *cfg, const attn_tensor *q, const attn_tensor *k,
                                  const attn_tensor *v);
    attn_status (*step)(const attn_kind_step *s, void *ws, size_t ws_bytes);
} attn_kind_ops;

/* The row of a kind, or NULL for a value outside the table. */
const attn_kind_ops *attn_kind_ops_get(attn_attention_kind kind);

/* ATTN_OK when every kind 0 .. ATTN_ATTENTION_KIND_COUNT - 1 has a row, and each row its name,
 * help, options and its workspace, forward, backward and step functions (check, weights and
 * state_floats may be NULL); else ATTN_ERR_INVALID_ARGUMENT naming the kind and the field. The
 * table's length is checked against the enum at compile time; this checks that no row is empty
 * (test_attention_kinds runs it). */
attn_status attn_kind_table_check(void);

#endif
