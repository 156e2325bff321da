/* Shared by `attn train`, `attn sample` and `attn bench train`: the byte-level GPT model's
 * shape and its round trip through checkpoint metadata. */
#ifndef ATTN_TRAIN_COMMON_H
#define ATTN_TRAIN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"

/* The vocabulary of the character-level models: bytes (every UTF-8 text is a byte sequence). */
#define TRAIN_BYTE_VOCAB 256

typedef struct train_gpt_shape {
    int64_t vocab, layers, heads, d_model, ff, context;
    attn_attention_config attention; /* the self-attention's kind and options (default flash) */
} train_gpt_shape;

/* The config of a byte-level GPT of that shape: learned positions (context of them), pre-norm
 * layers with GELU, dropout 0, untied lm_head. */
attn_gpt_config train_gpt_config(const train_gpt_shape *s);

/* Options of the attention kinds, as flags and metadata (train_kind_opts, in the order of the
 * attn_attention_config fields). */
#define TRAIN_KIND_OPTS 3
typedef struct train_kind_opt {
    const char *name, *flag, *meta;
    int64_t min, max;
} train_kind_opt;
extern const train_kind_opt train_kind_opts[TRAIN_KIND_OPTS];
int64_t *train_kind_opt_value(attn_attention_config *c, int i);
/* Whether kind reads option i (and in *required, nullable, whether it must be set). */
int train_kind_uses(attn_attention_kind kind, int i, int *required);

/* With bf16 on a CPU without AVX512-BF16, a note that its products are emulated (slower than
 * fp32 there); nothing otherwise. */
void train_precision_note(attn_precision p);

/* Checkpoint metadata: "model" = "gpt", "gpt.vocab_size", "gpt.layers", "gpt.heads",
 * "gpt.d_model", "gpt.ff", "gpt.context", "gpt.tokenizer" = "bytes", then "gpt.attention" (a kind's
 * name; absent in older checkpoints, meaning flash) and the kind's options ("gpt.window"). */
#define TRAIN_META_COUNT 8
#define TRAIN_META_MAX 20
typedef struct train_meta {
    const char *keys[TRAIN_META_MAX];
    const char *values[TRAIN_META_MAX];
    char buf[TRAIN_META_MAX][40];
    size_t n;
} train_meta;
/* The pairs above (n >= TRAIN_META_COUNT). */
void train_meta_fill(train_meta *m, const train_gpt_shape *s);
/* Append one more pair (key kept by pointer, value formatted; ignored when full). */
void train_meta_add(train_meta *m, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Reads the shape back; 0 on success, else -1 with a message in err. */
int train_shape_from_meta(const attn_safetensors *st, train_gpt_shape *s, char *err, size_t errsz);

/* On --resume, the precision of checkpoint st (at path): its "train.precision" (absent in older
 * checkpoints: fp32) into *p, unless given again (given != 0), then a note when the two differ.
 * 0, or 1 with "attn: CMD: --resume: PATH: train.precision 'X' is neither fp32 nor bf16". */
int train_resume_precision(const char *cmd, const attn_safetensors *st, const char *path, int given, attn_precision *p);

/* ---- data-parallel runs (include/attn/dist.h) ----------------------------------------------
 * `attn train gpt` and `attn bench train` run data-parallel when an MPI launcher started them
 * (mpirun / srun / mpiexec: OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in the environment).
 * train_dist_start makes the context then (*d NULL otherwise) and sends the stdout of every rank
 * but 0 to /dev/null (rank 0 alone reports; errors still reach every rank's stderr). Launched as
 * several processes by a build without MPI: an error
 * (each would train alone and overwrite the others' checkpoints). 0 or 1 (message printed). */
int train_dist_start(const char *cmd, attn_dist **d);
/* Ends the context: MPI_Finalize when exit_code is 0 or 130, else MPI_Abort(exit_code) on a job of
 * several ranks (a rank that stops alone must not leave the others waiting in a collective). */
int train_dist_end(attn_dist *d, int exit_code);

/* FNV-1a 64 of n bytes, continuing from h (start from TRAIN_HASH_SEED): for configuration checks. */
#define TRAIN_HASH_SEED 0xcbf29ce484222325ull
uint64_t train_hash(uint64_t h, const void *data, size_t n);

/* The data a checkpoint was trained on: its "train.data_hash" (hex FNV-1a 64 of the data, written
 * by every `attn train`). train_data_differs: 1 when st holds a hash other than `hash` (absent, in
 * older checkpoints: 0). train_data_refuse prints "attn: CMD: --resume: --data 'DATA' is not the
 * data CKPT was trained on (its contents differ); ..." and returns 1. */
#define TRAIN_DATA_HASH_KEY "train.data_hash"
int train_data_differs(const attn_safetensors *st, const char *hash);
int train_data_refuse(const char *cmd, const char *data, const char *checkpoint);

/* What a training run holds at once against the machine's memory (sysconf): the weights, their
 * gradients and AdamW's two moments (16 bytes a parameter) and `act` bytes of activations,
 * workspace and batches (0 before the model is built: the weights alone are checked then, before
 * they are allocated). 0, or 1 with the figures printed: "CMD: the run needs X GB (... for
 * BATCH_OPT N), over this machine's Y GB of memory: ADVICE". */
int train_memory_check(const char *cmd, double params, double act, const char *batch_opt, int64_t batch,
                       const char *advice);

/* Ctrl-C / SIGTERM while training: the handler only sets a flag that the loop reads between steps
 * and long steps read between their parts (it then writes a checkpoint); the first signal
 * restores the default action, so a second one stops at once (checkpoint writes are atomic). catch installs the handler and clears the flag,
 * release puts the previous handlers back. One training loop per process.
 * cancel_library: the handler also calls attn_cancel_request, so that a forward or backward in
 * progress stops before its next layer (ATTN_ERR_CANCELLED); catch and release clear it. */
void train_signals_catch(int cancel_library);
int train_signals_caught(void);
void train_signals_release(void);

#endif
