/* Checkpoints: parameters, optimizer state, training-loop state and user metadata in one
 * safetensors file, written atomically and verified by a checksum on load.
 *
 * Layout and checksum are documented in train.h. The checksum is XXH64 (seed 0, the published
 * algorithm) over a canonical stream: per tensor in file order name NUL, dtype code, rank, dims
 * (8 bytes little-endian each), data bytes; then the metadata pairs other than attn.checksum,
 * sorted by key, as key NUL value NUL. The writer stores tensors in insertion order, so the saver
 * hashes them in that order and the loader in data-offset order, which is the same. Safetensors
 * validation alone would accept a flipped bit in a weight, a digit changed in a metadata value or
 * a renamed tensor of the same size; the checksum rejects all of these.
 *
 * Atomicity comes from attn_safetensors_writer_write_file (io/safe_file.h): a fresh temporary file
 * of an unpredictable name next to PATH is written and fsynced, renamed
 * over PATH, and the folder fsynced; a failure before the rename removes it and leaves PATH
 * as it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "train_internal.h"

#define CKPT_FORMAT "attn-checkpoint-1"

/* ---- XXH64, streaming ---- */

#define XP1 0x9E3779B185EBCA87ull
#define XP2 0xC2B2AE3D27D4EB4Full
#define XP3 0x165667B19E3779F9ull
#define XP4 0x85EBCA77C2B2AE63ull
#define XP5 0x27D4EB2F165667C5ull

typedef struct xxh64 {
    uint64_t v[4], total;
    unsigned char buf[32];
    size_t nbuf;
} xxh64;

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t rd64(const unsigned char *p) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = (x << 8) | p[i];
    return x;
}
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t xround(uint64_t acc, uint64_t in) { return rotl64(acc + in * XP2, 31) * XP1; }
static uint64_t xmerge(uint64_t acc, uint64_t val) { return (acc ^ xround(0, val)) * XP1 + XP4; }

static void xxh_init(xxh64 *h) {
    memset(h, 0, sizeof *h);
    h->v[0] = XP1 + XP2;
    h->v[1] = XP2;
    h->v[2] = 0;
    h->v[3] = 0 - XP1;
}

static void xxh_stripe(xxh64 *h, const unsigned char *p) {
    for (int i = 0; i < 4; i++) h->v[i] = xround(h->v[i], rd64(p + 8 * i));
}

static void xxh_update(xxh64 *h, const void *data, size_t len) {
    const unsigned char *p = data;
    h->total += len;
    if (h->nbuf) {
        const size_t take = 32 - h->nbuf < len ? 32 - h->nbuf : len;
        memcpy(h->buf + h->nbuf, p, take);
        h->nbuf += take;
        p += take;
        len -= take;
        if (h->nbuf < 32) return;
        xxh_stripe(h, h->buf);
        h->nbuf = 0;
    }
    for (; len >= 32; p += 32, len -= 32) xxh_stripe(h, p);
    memcpy(h->buf, p, len);
    h->nbuf = len;
}

static uint64_t xxh_digest(const xxh64 *h) {
    uint64_t r;
    if (h->total >= 32) {
        r = rotl64(h->v[0], 1) + rotl64(h->v[1], 7) + rotl64(h->v[2], 12) + rotl64(h->v[3], 18);
        for (int i = 0; i < 4; i++) r = xmerge(r, h->v[i]);
    } else {
        r = h->v[2] + XP5;
    }
    r += h->total;
    const unsigned char *p = h->buf;
    size_t len = h->nbuf;
    for (; len >= 8; p += 8, len -= 8) r = rotl64(r ^ xround(0, rd64(p)), 27) * XP1 + XP4;
    if (len >= 4) {
        r = rotl64(r ^ (uint64_t)rd32(p) * XP1, 23) * XP2 + XP3;
        p += 4;
        len -= 4;
    }
    for (; len > 0; p++, len--) r = rotl64(r ^ (uint64_t)*p * XP5, 11) * XP1;
    r ^= r >> 33;
    r *= XP2;
    r ^= r >> 29;
    r *= XP3;
    r ^= r >> 32;
    return r;
}

uint64_t attn_tr_xxh64(const void *data, size_t len) {
    xxh64 h;
    xxh_init(&h);
    xxh_update(&h, data, len);
    return xxh_digest(&h);
}

static void hash_tensor(xxh64 *h, const char *name, attn_dtype dt, int rank, const int64_t *shape, const void *data,
                        size_t nbytes) {
    xxh_update(h, name, strlen(name) + 1);
    const unsigned char b[2] = {(unsigned char)dt, (unsigned char)rank};
    xxh_update(h, b, 2);
    for (int d = 0; d < rank; d++) {
        unsigned char le[8];
        const uint64_t v = (uint64_t)shape[d];
        for (int k = 0; k < 8; k++) le[k] = (unsigned char)(v >> (8 * k));
        xxh_update(h, le, 8);
    }
    if (nbytes) xxh_update(h, data, nbytes);
}

typedef struct kv {
    const char *k, *v;
} kv;

static int kv_cmp(const void *a, const void *b) { return strcmp(((const kv *)a)->k, ((const kv *)b)->k); }

/* Sorted metadata (skipping attn.checksum) into the hash; kvs is sorted in place. */
static void hash_metadata(xxh64 *h, kv *kvs, size_t n) {
    qsort(kvs, n, sizeof *kvs, kv_cmp);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(kvs[i].k, "attn.checksum")) continue;
        xxh_update(h, kvs[i].k, strlen(kvs[i].k) + 1);
        xxh_update(h, kvs[i].v, strlen(kvs[i].v) + 1);
    }
}

/* ---- save ---- */

/* "optimizer.<slot>.<param name>" into buf, which holds strlen(name) + 64 bytes (slot names are
 * short). */
static const char *slot_key_into(char *buf, const char *slot, const char *name) {
    snprintf(buf, strlen(name) + 64, "optimizer.%s.%s", slot, name);
    return buf;
}

/* A buffer for the slot key of every parameter of o (NULL o: a small one). */
static char *slot_key_buffer(const attn_optimizer *o) {
    size_t longest = 0;
    for (size_t i = 0; o && i < o->n; i++) {
        const size_t l = strlen(attn_params_get(o->ps, i)->name);
        longest = l > longest ? l : longest;
    }
    return attn__malloc(longest + 64);
}

/* Add a tensor to the writer (which copies the name) and to the checksum. */
static attn_status add_hashed(attn_safetensors_writer *w, xxh64 *h, const char *name, attn_dtype dt, int rank,
                              const int64_t *shape, const void *data, size_t nbytes) {
    attn_status st = attn_safetensors_writer_add(w, name, dt, rank, shape, data);
    if (st == ATTN_OK) hash_tensor(h, name, dt, rank, shape, data, nbytes);
    return st;
}

attn_status attn_checkpoint_save(const char *path, const attn_params *ps, const attn_optimizer *opt,
                                 const attn_train_state *state, const char *const *meta_keys,
                                 const char *const *meta_values, size_t n_meta) {
    static const char fn[] = "attn_checkpoint_save";
    ATTN_CHECK_NOT_NULL(fn, path);
    ATTN_CHECK_NOT_NULL(fn, ps);
    if (n_meta && (!meta_keys || !meta_values))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: %zu metadata pairs but meta_keys or meta_values is NULL", fn,
                          n_meta);
    for (size_t i = 0; i < n_meta; i++) {
        if (!meta_keys[i] || !meta_values[i])
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: metadata pair %zu has a NULL key or value", fn, i);
        if (!strncmp(meta_keys[i], "attn.", 5))
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: metadata key '%.80s' is reserved (prefix 'attn.')", fn,
                              meta_keys[i]);
    }
    if (opt) {
        attn_status cs = attn_tr_opt_check_params(fn, opt);
        if (cs) return cs;
    }
    const size_t np = attn_params_count(ps);
    for (size_t i = 0; i < np; i++)
        if (!attn_params_get(ps, i)->data)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: parameter '%s' has no data", fn,
                              attn_params_get(ps, i)->name);
    /* the writer references data until it writes: the scalars live here until then */
    const int64_t opt_step = opt ? opt->steps : 0;
    const attn_train_state s = state ? *state : (attn_train_state){0, 0, 0, 0, 0};
    kv *kvs = attn__calloc(n_meta + 3, sizeof *kvs);
    char *key = slot_key_buffer(opt);
    attn_safetensors_writer *w = NULL;
    attn_status st =
        kvs && key ? attn_safetensors_writer_create(&w) : attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    xxh64 h;
    xxh_init(&h);
    for (size_t i = 0; st == ATTN_OK && i < np; i++) {
        const attn_param *p = attn_params_get(ps, i);
        st = add_hashed(w, &h, p->name, ATTN_DTYPE_F32, p->rank, p->shape, p->data, p->numel * sizeof(float));
    }
    for (int q = 0; opt && q < opt->nslots; q++)
        for (size_t i = 0; st == ATTN_OK && i < opt->n; i++) {
            const attn_param *p = attn_params_get(opt->ps, i);
            st = add_hashed(w, &h, slot_key_into(key, opt->slot_name[q], p->name), ATTN_DTYPE_F32, p->rank, p->shape,
                            opt->slot[(size_t)q * opt->n + i], opt->numel[i] * sizeof(float));
        }
    if (st == ATTN_OK && opt) st = add_hashed(w, &h, "optimizer.step", ATTN_DTYPE_I64, 0, NULL, &opt_step, 8);
    if (st == ATTN_OK && state) st = add_hashed(w, &h, "train.step", ATTN_DTYPE_I64, 0, NULL, &s.step, 8);
    if (st == ATTN_OK && state) st = add_hashed(w, &h, "train.epoch", ATTN_DTYPE_I64, 0, NULL, &s.epoch, 8);
    if (st == ATTN_OK && state)
        st = add_hashed(w, &h, "train.data_position", ATTN_DTYPE_I64, 0, NULL, &s.data_position, 8);
    if (st == ATTN_OK && state) st = add_hashed(w, &h, "train.rng_seed", ATTN_DTYPE_U64, 0, NULL, &s.rng_seed, 8);
    if (st == ATTN_OK && state) st = add_hashed(w, &h, "train.rng_offset", ATTN_DTYPE_U64, 0, NULL, &s.rng_offset, 8);
    char cfgbuf[256];
    size_t nk = 0;
    if (st == ATTN_OK) {
        if (opt) attn_tr_optimizer_config_str(opt, cfgbuf, sizeof cfgbuf);
        kvs[nk++] = (kv){"attn.format", CKPT_FORMAT};
        kvs[nk++] = (kv){"attn.optimizer", opt ? attn_tr_optimizer_kind_name(opt->kind) : "none"};
        if (opt) kvs[nk++] = (kv){"attn.optimizer.config", cfgbuf};
        for (size_t i = 0; i < n_meta; i++) kvs[nk++] = (kv){meta_keys[i], meta_values[i]};
    }
    for (size_t i = 0; st == ATTN_OK && i < nk; i++) st = attn_safetensors_writer_add_metadata(w, kvs[i].k, kvs[i].v);
    if (st == ATTN_OK) {
        hash_metadata(&h, kvs, nk);
        char sum[17];
        snprintf(sum, sizeof sum, "%016llx", (unsigned long long)xxh_digest(&h));
        st = attn_safetensors_writer_add_metadata(w, "attn.checksum", sum);
    }
    if (st == ATTN_OK) st = attn_safetensors_writer_write_file(w, path);
    attn_safetensors_writer_free(w);
    attn__free(kvs);
    attn__free(key);
    return st;
}

/* ---- load ---- */

enum { PR_MISSING, PR_SHAPE, PR_DTYPE, PR_KINDS };
static const char *const pr_names[] = {
    [PR_MISSING] = "missing", [PR_SHAPE] = "wrong shape", [PR_DTYPE] = "wrong dtype"};
_Static_assert(sizeof pr_names / sizeof pr_names[0] == PR_KINDS, "pr_names[] needs one name per problem kind");

/* Problems by kind, each with a count and as many items as fit. */
typedef struct problems {
    char s[PR_KINDS][400];
    size_t len[PR_KINDS];
    int count[PR_KINDS], cut[PR_KINDS];
} problems;

static void pr_add(problems *pr, int kind, const char *item) {
    const size_t l = strlen(item), sep = pr->count[kind] ? 2 : 0;
    pr->count[kind]++;
    if (pr->cut[kind] || pr->len[kind] + sep + l >= sizeof pr->s[kind]) {
        pr->cut[kind] = 1;
        return;
    }
    if (sep) memcpy(pr->s[kind] + pr->len[kind], ", ", 2);
    memcpy(pr->s[kind] + pr->len[kind] + sep, item, l + 1);
    pr->len[kind] += sep + l;
}

static int is_float(attn_dtype dt) {
    return dt == ATTN_DTYPE_F32 || dt == ATTN_DTYPE_F16 || dt == ATTN_DTYPE_BF16 || dt == ATTN_DTYPE_F64;
}

/* A float tensor `name` of the given shape. */
static void expect_float(problems *pr, const attn_safetensors *f, const char *name, int rank, const int64_t *shape) {
    const attn_safetensors_tensor *t = attn_safetensors_find(f, name);
    char item[300], a[120], b[120];
    if (!t) {
        pr_add(pr, PR_MISSING, name);
        return;
    }
    int same = t->rank == rank;
    for (int d = 0; same && d < rank; d++) same = t->shape[d] == shape[d];
    if (!same) {
        snprintf(item, sizeof item, "%s %s (expected %s)", name, attn_shape_str(t->shape, t->rank, a, sizeof a),
                 attn_shape_str(shape, rank, b, sizeof b));
        pr_add(pr, PR_SHAPE, item);
    } else if (!is_float(t->dtype)) {
        snprintf(item, sizeof item, "%s %s (expected F32)", name, attn_dtype_name(t->dtype));
        pr_add(pr, PR_DTYPE, item);
    }
}

/* An integer scalar: I64 or U64 with one element (rank 0 or [1]). */
static void expect_scalar(problems *pr, const attn_safetensors *f, const char *name, attn_dtype dt) {
    const attn_safetensors_tensor *t = attn_safetensors_find(f, name);
    char item[200];
    if (!t) {
        pr_add(pr, PR_MISSING, name);
    } else if (t->nbytes != 8 || t->dtype != dt || t->rank > 1) {
        snprintf(item, sizeof item, "%s %s of %zu bytes (expected one %s)", name, attn_dtype_name(t->dtype), t->nbytes,
                 attn_dtype_name(dt));
        pr_add(pr, PR_DTYPE, item);
    }
}

static uint64_t read_u64(const attn_safetensors *f, const char *name) {
    const unsigned char *p = attn_safetensors_find(f, name)->data;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = (x << 8) | p[i];
    return x;
}

/* Checksum of an opened file, as the saver computed it. */
static attn_status file_checksum(const char *fn, const attn_safetensors *f, uint64_t *out) {
    xxh64 h;
    xxh_init(&h);
    const size_t n = attn_safetensors_count(f);
    for (size_t i = 0; i < n; i++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(f, i);
        hash_tensor(&h, t->name, t->dtype, t->rank, t->shape, t->data, t->nbytes);
    }
    const size_t nm = attn_safetensors_metadata_count(f);
    kv *kvs = attn__calloc(nm ? nm : 1, sizeof *kvs);
    if (!kvs) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (size_t i = 0; i < nm; i++) attn_safetensors_metadata_get(f, i, &kvs[i].k, &kvs[i].v);
    hash_metadata(&h, kvs, nm);
    attn__free(kvs);
    *out = xxh_digest(&h);
    return ATTN_OK;
}

/* Validate and apply an opened checkpoint f (closed here unless handed to *file). path names it in
 * messages. */
static attn_status load_opened(const char *fn, const char *path, attn_safetensors *f, const attn_params *ps,
                               attn_optimizer *opt, attn_train_state *state, attn_safetensors **file,
                               int verify_checksum) {
    char *key = NULL;
    attn_status st = ATTN_OK;
    char msg[480];
    msg[0] = '\0';
    const char *fmt = attn_safetensors_metadata_find(f, "attn.format");
    const char *sum = attn_safetensors_metadata_find(f, "attn.checksum");
    const char *okind = attn_safetensors_metadata_find(f, "attn.optimizer");
    uint64_t got = 0;
    if (!fmt || !sum || !okind) {
        st = attn_error(ATTN_ERR_NOT_FOUND, "%s: '%.200s' is not an attn checkpoint (no %s metadata)", fn, path,
                        !fmt   ? "attn.format"
                        : !sum ? "attn.checksum"
                               : "attn.optimizer");
        goto fail;
    }
    if (strcmp(fmt, CKPT_FORMAT)) {
        st = attn_error(ATTN_ERR_UNSUPPORTED, "%s: '%.200s' has checkpoint format '%.40s', this build reads '%s'", fn,
                        path, fmt, CKPT_FORMAT);
        goto fail;
    }
    st = file_checksum(fn, f, &got);
    if (st) goto fail;
    char want[17];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)got);
    if (verify_checksum && strcmp(want, sum)) {
        st = attn_error(ATTN_ERR_IO, "%s: '%.200s' is corrupted: checksum %.20s stored, %s computed", fn, path, sum,
                        want);
        goto fail;
    }
    if (opt && strcmp(okind, attn_tr_optimizer_kind_name(opt->kind))) {
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT,
                        "%s: '%.200s' holds the state of optimizer '%.20s', not of the %s "
                        "optimizer given",
                        fn, path, okind, attn_tr_optimizer_kind_name(opt->kind));
        goto fail;
    }
    if (opt) {
        st = attn_tr_opt_check_params(fn, opt);
        if (st) goto fail;
    }
    /* one buffer for every "optimizer.<slot>.<name>", so that applying allocates nothing */
    const size_t np = attn_params_count(ps);
    key = slot_key_buffer(opt);
    if (!key) {
        st = attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto fail;
    }
    /* every check before any change */
    problems pr;
    memset(&pr, 0, sizeof pr);
    for (size_t i = 0; i < np; i++) {
        const attn_param *p = attn_params_get(ps, i);
        expect_float(&pr, f, p->name, p->rank, p->shape);
    }
    if (opt) {
        for (int s = 0; s < opt->nslots; s++)
            for (size_t i = 0; i < opt->n; i++) {
                const attn_param *p = attn_params_get(opt->ps, i);
                expect_float(&pr, f, slot_key_into(key, opt->slot_name[s], p->name), p->rank, p->shape);
            }
        expect_scalar(&pr, f, "optimizer.step", ATTN_DTYPE_I64);
    }
    if (state) {
        expect_scalar(&pr, f, "train.step", ATTN_DTYPE_I64);
        expect_scalar(&pr, f, "train.epoch", ATTN_DTYPE_I64);
        expect_scalar(&pr, f, "train.data_position", ATTN_DTYPE_I64);
        expect_scalar(&pr, f, "train.rng_seed", ATTN_DTYPE_U64);
        expect_scalar(&pr, f, "train.rng_offset", ATTN_DTYPE_U64);
    }
    const int total = pr.count[PR_MISSING] + pr.count[PR_SHAPE] + pr.count[PR_DTYPE];
    if (total) {
        size_t o = 0;
        for (int kd = 0; kd < PR_KINDS; kd++) {
            if (!pr.count[kd] || o >= sizeof msg) continue;
            int wr = snprintf(msg + o, sizeof msg - o, "%s%s (%d): %s%s", o ? "; " : "", pr_names[kd], pr.count[kd],
                              pr.s[kd], pr.cut[kd] ? ", ..." : "");
            if (wr > 0) o += (size_t)wr;
        }
        st = attn_error(pr.count[PR_SHAPE]     ? ATTN_ERR_SHAPE
                        : pr.count[PR_MISSING] ? ATTN_ERR_NOT_FOUND
                                               : ATTN_ERR_INVALID_ARGUMENT,
                        "%s: '%.120s': %d problem%s: %s", fn, path, total, total == 1 ? "" : "s", msg);
        goto fail;
    }
    if (opt && (int64_t)read_u64(f, "optimizer.step") < 0) {
        st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: '%.200s': optimizer.step is negative", fn, path);
        goto fail;
    }
    /* apply: nothing below can fail on a validated file */
    for (size_t i = 0; i < np; i++) {
        const attn_param *p = attn_params_get(ps, i);
        st = attn_safetensors_read_f32(f, p->name, p->data, p->numel);
        if (st) goto fail;
    }
    if (opt) {
        for (int s = 0; s < opt->nslots; s++)
            for (size_t i = 0; i < opt->n; i++) {
                const attn_param *p = attn_params_get(opt->ps, i);
                st = attn_safetensors_read_f32(f, slot_key_into(key, opt->slot_name[s], p->name),
                                               opt->slot[(size_t)s * opt->n + i], opt->numel[i]);
                if (st) goto fail;
            }
        opt->steps = (int64_t)read_u64(f, "optimizer.step");
    }
    if (state) {
        state->step = (int64_t)read_u64(f, "train.step");
        state->epoch = (int64_t)read_u64(f, "train.epoch");
        state->data_position = (int64_t)read_u64(f, "train.data_position");
        state->rng_seed = read_u64(f, "train.rng_seed");
        state->rng_offset = read_u64(f, "train.rng_offset");
    }
    attn__free(key);
    if (file)
        *file = f;
    else
        attn_safetensors_close(f);
    return ATTN_OK;
fail:
    attn__free(key);
    attn_safetensors_close(f);
    return st;
}

attn_status attn_checkpoint_load(const char *path, const attn_params *ps, attn_optimizer *opt, attn_train_state *state,
                                 attn_safetensors **file) {
    static const char fn[] = "attn_checkpoint_load";
    if (file) *file = NULL;
    ATTN_CHECK_NOT_NULL(fn, path);
    ATTN_CHECK_NOT_NULL(fn, ps);
    attn_safetensors *f = NULL;
    attn_status st = attn_safetensors_open_file(path, &f);
    if (st) {
        char why[400];
        snprintf(why, sizeof why, "%s", attn_last_error());
        return attn_error(st, "%s: '%.200s' is not a readable checkpoint: %s", fn, path, why);
    }
    return load_opened(fn, path, f, ps, opt, state, file, 1);
}

attn_status attn_tr_checkpoint_load_memory(const void *buf, size_t len, const char *label, const attn_params *ps,
                                           attn_optimizer *opt, attn_train_state *state, int verify_checksum) {
    static const char fn[] = "attn_checkpoint_load";
    ATTN_CHECK_NOT_NULL(fn, label);
    ATTN_CHECK_NOT_NULL(fn, ps);
    attn_safetensors *f = NULL;
    attn_status st = attn_safetensors_open_memory(buf, len, &f);
    if (st) {
        char why[400];
        snprintf(why, sizeof why, "%s", attn_last_error());
        return attn_error(st, "%s: '%.200s' is not a readable checkpoint: %s", fn, label, why);
    }
    return load_opened(fn, label, f, ps, opt, state, NULL, verify_checksum);
}
