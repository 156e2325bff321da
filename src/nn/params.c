/* Parameter lists: enumeration by PyTorch state_dict name, PyTorch-style initialisation, strict
 * safetensors load / save, and the workspace arena every module carves its buffers from.
 *
 * Initialisation (attn_params_reset), per parameter i with Philox stream (seed, i), element e:
 *   u_e = attn_philox_uniform(seed, i, e) in [0, 1)
 *   uniform(a):      x_e = (2 u_e - 1) a
 *   xavier_uniform:  a = sqrt(6 / (fan_in + fan_out))       (torch.nn.init.xavier_uniform_)
 *   xavier_normal:   x_e = s sqrt(-2 ln(1 - u_2e)) cos(2 pi u_2e+1), s = sqrt(2 / (fan_in + fan_out))
 *   normal(a):       the same with s = a
 * with fan_in = shape[1] * prod(shape[2:]), fan_out = shape[0] * prod(shape[2:]) as in PyTorch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nn_internal.h"

typedef struct nn_pinfo {
    nn_init init;
    double a;
    int64_t zero_row_plus1;
} nn_pinfo;

struct attn_params {
    attn_param *items;
    nn_pinfo *info;
    size_t n, cap;
};

attn_params *attn_nn_params_new(void) { return attn__calloc(1, sizeof(attn_params)); }

void attn_nn_params_free(attn_params *ps) {
    if (!ps) return;
    for (size_t i = 0; i < ps->n; i++) attn__free((char *)ps->items[i].name);
    attn__free(ps->items);
    attn__free(ps->info);
    attn__free(ps);
}

static attn_status params_push(attn_params *ps, const char *fn, const char *prefix, const char *name, int rank,
                               const int64_t *shape, float *data, float *grad, nn_pinfo info) {
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 16;
        attn_param *it = attn__realloc(ps->items, cap * sizeof *it);
        if (!it) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        ps->items = it;
        nn_pinfo *in = attn__realloc(ps->info, cap * sizeof *in);
        if (!in) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        ps->info = in;
        ps->cap = cap;
    }
    const size_t lp = prefix ? strlen(prefix) : 0, ln = strlen(name);
    char *nm = attn__malloc(lp + ln + 1);
    if (!nm) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (lp) memcpy(nm, prefix, lp);
    memcpy(nm + lp, name, ln + 1);
    attn_param *p = &ps->items[ps->n];
    memset(p, 0, sizeof *p);
    p->name = nm;
    p->rank = rank;
    p->numel = 1;
    for (int d = 0; d < rank; d++) {
        p->shape[d] = shape[d];
        p->numel *= (size_t)shape[d];
    }
    p->data = data;
    p->grad = grad;
    ps->info[ps->n] = info;
    ps->n++;
    return ATTN_OK;
}

attn_status attn_nn_params_append(attn_params *dst, const char *fn, const attn_params *src, const char *prefix) {
    for (size_t i = 0; i < src->n; i++) {
        const attn_param *p = &src->items[i];
        attn_status st = params_push(dst, fn, prefix, p->name, p->rank, p->shape, p->data, p->grad, src->info[i]);
        if (st) return st;
    }
    return ATTN_OK;
}

void attn_nn_params_xavier_matrices(attn_params *ps) {
    for (size_t i = 0; i < ps->n; i++)
        if (ps->items[i].rank >= 2) ps->info[i].init = NN_INIT_XAVIER_UNIFORM;
}

/* Elements of a described parameter (SIZE_MAX on overflow). */
static size_t pdesc_numel(const nn_pdesc *d) {
    size_t numel = 1;
    for (int r = 0; r < d->rank; r++) numel = nn_mul(numel, (size_t)d->shape[r]);
    return numel;
}

attn_status attn_nn_store_create(nn_store *s, const char *fn, const nn_pdesc *d, int n, float **ptrs, float **gptrs) {
    memset(s, 0, sizeof *s);
    /* the weights' block page-aligned, its matrices on pages (attn__weights_at); the gradients
     * at the same offsets */
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const size_t numel = pdesc_numel(&d[i]);
        total = nn_add(attn__weights_at(total, numel), numel);
    }
    if (total == SIZE_MAX || total > SIZE_MAX / sizeof(float) / 2)
        return attn_error(ATTN_ERR_OVERFLOW, "%s: parameter sizes overflow", fn);
    s->data = attn__weights_alloc(total);
    s->grad = attn__calloc(total ? total : 1, sizeof(float));
    s->list = attn_nn_params_new();
    if (!s->data || !s->grad || !s->list) {
        attn_nn_store_free(s);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu parameters", fn, total);
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        nn_pinfo info = {d[i].init, d[i].a, d[i].zero_row_plus1};
        off = attn__weights_at(off, pdesc_numel(&d[i]));
        attn_status st =
            params_push(s->list, fn, NULL, d[i].name, d[i].rank, d[i].shape, s->data + off, s->grad + off, info);
        if (st) {
            attn_nn_store_free(s);
            return st;
        }
        ptrs[i] = s->data + off;
        if (gptrs) gptrs[i] = s->grad + off;
        off += s->list->items[i].numel;
    }
    return attn_params_reset(s->list, 0);
}

void attn_nn_store_free(nn_store *s) {
    attn__free(s->data);
    attn__free(s->grad);
    attn_nn_params_free(s->list);
    memset(s, 0, sizeof *s);
}

/* ---- public enumeration ---- */

size_t attn_params_count(const attn_params *ps) { return ps ? ps->n : 0; }

const attn_param *attn_params_get(const attn_params *ps, size_t i) { return ps && i < ps->n ? &ps->items[i] : NULL; }

const attn_param *attn_params_find(const attn_params *ps, const char *name) {
    if (!ps || !name) return NULL;
    for (size_t i = 0; i < ps->n; i++)
        if (!strcmp(ps->items[i].name, name)) return &ps->items[i];
    return NULL;
}

size_t attn_params_numel(const attn_params *ps) {
    size_t t = 0;
    for (size_t i = 0; ps && i < ps->n; i++) t += ps->items[i].numel;
    return t;
}

attn_status attn_params_zero_grad(const attn_params *ps) {
    ATTN_CHECK_NOT_NULL("attn_params_zero_grad", ps);
    for (size_t i = 0; i < ps->n; i++)
        if (ps->items[i].grad) memset(ps->items[i].grad, 0, ps->items[i].numel * sizeof(float));
    return ATTN_OK;
}

static _Thread_local int random_init_off;

int attn_nn_random_init_off(int off) {
    const int prev = random_init_off;
    random_init_off = off;
    return prev;
}

attn_status attn_params_reset(const attn_params *ps, uint64_t seed) {
    ATTN_CHECK_NOT_NULL("attn_params_reset", ps);
    for (size_t i = 0; i < ps->n; i++) {
        const attn_param *p = &ps->items[i];
        nn_pinfo in = ps->info[i];
        if (random_init_off && in.init != NN_INIT_ONES) in.init = NN_INIT_ZEROS;
        double recept = 1, fan_in = 1, fan_out = 1;
        for (int d = 2; d < p->rank; d++) recept *= (double)p->shape[d];
        if (p->rank >= 2) {
            fan_in = (double)p->shape[1] * recept;
            fan_out = (double)p->shape[0] * recept;
        }
        switch (in.init) {
        case NN_INIT_ZEROS: memset(p->data, 0, p->numel * sizeof(float)); break;
        case NN_INIT_ONES:
            for (size_t e = 0; e < p->numel; e++) p->data[e] = 1.0f;
            break;
        case NN_INIT_UNIFORM:
        case NN_INIT_XAVIER_UNIFORM: {
            const double a = in.init == NN_INIT_UNIFORM ? in.a : sqrt(6.0 / (fan_in + fan_out));
            for (size_t e = 0; e < p->numel; e++)
                p->data[e] = (float)((2.0 * attn_philox_uniform(seed, i, e) - 1.0) * a);
            break;
        }
        case NN_INIT_XAVIER_NORMAL:
        case NN_INIT_NORMAL: {
            const double s = in.init == NN_INIT_NORMAL ? in.a : sqrt(2.0 / (fan_in + fan_out));
            for (size_t e = 0; e < p->numel; e++) {
                const double u1 = 1.0 - attn_philox_uniform(seed, i, 2 * e);
                const double u2 = attn_philox_uniform(seed, i, 2 * e + 1);
                p->data[e] = (float)(s * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
            }
            break;
        }
        }
        if (in.zero_row_plus1 > 0 && p->rank >= 1) {
            const size_t row = p->numel / (size_t)p->shape[0];
            memset(p->data + (size_t)(in.zero_row_plus1 - 1) * row, 0, row * sizeof(float));
        }
    }
    return ATTN_OK;
}

/* ---- safetensors ---- */

/* Problems listed by kind, each kind with its count and as many names as fit:
 * "missing (2): a, b; unexpected (1): c". */
enum { P_MISSING, P_SHAPE, P_DTYPE, P_UNEXPECTED, P_KINDS };
static const char *const kind_names[] = {[P_MISSING] = "missing",
                                         [P_SHAPE] = "wrong shape",
                                         [P_DTYPE] = "not floating point",
                                         [P_UNEXPECTED] = "unexpected"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == P_KINDS, "kind_names[] needs one name per problem kind");

typedef struct msgbuf {
    char s[P_KINDS][160];
    size_t n[P_KINDS];
    int count[P_KINDS], cut[P_KINDS];
} msgbuf;

static void msg_item(msgbuf *m, int kind, const char *item) {
    const size_t l = strlen(item), sep = m->count[kind] ? 2 : 0;
    m->count[kind]++;
    if (m->cut[kind] || m->n[kind] + sep + l >= sizeof m->s[kind]) {
        m->cut[kind] = 1;
        return;
    }
    if (sep) memcpy(m->s[kind] + m->n[kind], ", ", 2);
    memcpy(m->s[kind] + m->n[kind] + sep, item, l + 1);
    m->n[kind] += sep + l;
}

/* The kinds with problems, joined: at most out_len bytes. */
static void msg_join(const msgbuf *m, char *out, size_t out_len) {
    size_t o = 0;
    out[0] = '\0';
    for (int k = 0; k < P_KINDS; k++) {
        if (!m->count[k] || o >= out_len) continue;
        int w = snprintf(out + o, out_len - o, "%s%s (%d): %s%s", o ? "; " : "", kind_names[k], m->count[k], m->s[k],
                         m->cut[k] ? ", ..." : "");
        if (w > 0) o += (size_t)w;
    }
}

static int is_float_dtype(attn_dtype dt) {
    return dt == ATTN_DTYPE_F32 || dt == ATTN_DTYPE_F16 || dt == ATTN_DTYPE_BF16 || dt == ATTN_DTYPE_F64;
}

/* ---- name maps ---- */

typedef struct nm_cap {
    size_t at, len;
} nm_cap;

/* '*'s in a pattern, -1 for "**". */
static int nm_stars(const char *p) {
    int k = 0;
    for (; *p; p++)
        if (*p == '*') {
            if (p[1] == '*') return -1;
            k++;
        }
    return k;
}

static const char *nm_q(const char *s) { return s ? s : "(NULL)"; }

static attn_status nm_check(const char *fn, const attn_name_map *map) {
    if (!map) return ATTN_OK;
    if (map->count && !map->rules)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: name map of %zu rules with rules NULL", fn, map->count);
    for (size_t i = 0; i < map->count; i++) {
        const attn_name_rule *r = &map->rules[i];
        const char *why = NULL;
        int a = 0, b = 0;
        if (!r->ours || !r->theirs || !*r->ours || !*r->theirs)
            why = "empty pattern";
        else if ((a = nm_stars(r->ours)) < 0 || (b = nm_stars(r->theirs)) < 0)
            why = "\"**\"";
        else if (a > ATTN_NAME_MAP_MAX_STARS || b > ATTN_NAME_MAP_MAX_STARS)
            why = "more '*' than ATTN_NAME_MAP_MAX_STARS";
        if (why)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: name map rule %zu (\"%s\" -> \"%s\"): %s", fn, i,
                              nm_q(r->ours), nm_q(r->theirs), why);
        if (a != b)
            return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                              "%s: name map rule %zu (\"%s\" -> \"%s\"): %d '*' in ours, %d in theirs", fn, i, r->ours,
                              r->theirs, a, b);
    }
    return ATTN_OK;
}

/* Match pattern p against name from pos on, '*' taking the longest run first; on success the
 * end of the match and the captures. */
static int nm_match(const char *p, const char *name, size_t pos, nm_cap *caps, int k, size_t *end) {
    for (; *p && *p != '*'; p++, pos++)
        if (name[pos] != *p) return 0;
    if (!*p) {
        *end = pos;
        return 1;
    }
    size_t run = 0;
    while (name[pos + run] && name[pos + run] != '.') run++;
    for (; run > 0; run--) {
        caps[k].at = pos;
        caps[k].len = run;
        if (nm_match(p + 1, name, pos + run, caps, k + 1, end)) return 1;
    }
    return 0;
}

static void nm_put(char *buf, size_t cap, size_t *len, const char *s, size_t n) {
    if (*len < cap) memcpy(buf + *len, s, n < cap - *len ? n : cap - *len);
    *len += n;
}

/* name mapped (ours -> theirs, or back with rev) into buf as far as it fits, NUL-terminated when
 * cap > 0; returns the mapped name's length. The map has been checked. */
static size_t nm_map(const attn_name_map *map, int rev, const char *name, char *buf, size_t cap) {
    nm_cap caps[ATTN_NAME_MAP_MAX_STARS];
    size_t end = 0, len = 0;
    const char *to = NULL;
    for (size_t i = 0; map && i < map->count && !to; i++) {
        const attn_name_rule *r = &map->rules[i];
        if (nm_match(rev ? r->theirs : r->ours, name, 0, caps, 0, &end)) to = rev ? r->ours : r->theirs;
    }
    if (!to) end = 0;
    for (int k = 0; to && *to; k++) {
        const size_t lit = strcspn(to, "*");
        nm_put(buf, cap, &len, to, lit);
        to += lit;
        if (*to == '*') {
            nm_put(buf, cap, &len, name + caps[k].at, caps[k].len);
            to++;
        }
    }
    nm_put(buf, cap, &len, name + end, strlen(name + end));
    if (cap) buf[len < cap ? len : cap - 1] = '\0';
    return len;
}

static attn_status nm_convert(const char *fn, const attn_name_map *map, int rev, const char *name, char *buf,
                              size_t cap) {
    ATTN_CHECK_NOT_NULL(fn, name);
    if (cap) ATTN_CHECK_NOT_NULL(fn, buf);
    attn_status s = nm_check(fn, map);
    if (s) return s;
    const size_t len = nm_map(map, rev, name, buf, cap);
    if (len >= cap)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: buf of %zu bytes is too small: '%s' maps to a name of %zu characters (need %zu bytes)",
                          fn, cap, name, len, len + 1);
    return ATTN_OK;
}

attn_status attn_name_map_apply(const attn_name_map *map, const char *ours, char *buf, size_t cap) {
    return nm_convert("attn_name_map_apply", map, 0, ours, buf, cap);
}

attn_status attn_name_map_unapply(const attn_name_map *map, const char *theirs, char *buf, size_t cap) {
    return nm_convert("attn_name_map_unapply", map, 1, theirs, buf, cap);
}

/* Every parameter's prefix + mapped name, and the same sorted for lookups. */
typedef struct nm_entry {
    const char *name;
    size_t param;
} nm_entry;

typedef struct nm_table {
    char **full;      /* per parameter, in order */
    nm_entry *sorted; /* by name */
    size_t n;
} nm_table;

static int nm_entry_cmp(const void *a, const void *b) {
    return strcmp(((const nm_entry *)a)->name, ((const nm_entry *)b)->name);
}

static void nm_table_free(nm_table *t) {
    for (size_t i = 0; t->full && i < t->n; i++) attn__free(t->full[i]);
    attn__free(t->full);
    attn__free(t->sorted);
    memset(t, 0, sizeof *t);
}

static attn_status nm_table_build(nm_table *t, const char *fn, const attn_params *ps, const attn_name_map *map,
                                  const char *prefix) {
    memset(t, 0, sizeof *t);
    attn_status s = nm_check(fn, map);
    if (s) return s;
    const size_t lp = strlen(prefix), n = ps->n;
    t->full = attn__calloc(n ? n : 1, sizeof *t->full);
    t->sorted = attn__malloc((n ? n : 1) * sizeof *t->sorted);
    if (!t->full || !t->sorted) {
        nm_table_free(t);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    t->n = n;
    for (size_t i = 0; i < n; i++) {
        const size_t len = nm_map(map, 0, ps->items[i].name, NULL, 0);
        char *f = attn__malloc(lp + len + 1);
        if (!f) {
            nm_table_free(t);
            return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        }
        memcpy(f, prefix, lp);
        nm_map(map, 0, ps->items[i].name, f + lp, len + 1);
        t->full[i] = f;
        t->sorted[i].name = f;
        t->sorted[i].param = i;
    }
    if (n) qsort(t->sorted, n, sizeof *t->sorted, nm_entry_cmp);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(t->sorted[i - 1].name, t->sorted[i].name)) {
            const size_t a = t->sorted[i - 1].param, b = t->sorted[i].param;
            s = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: parameters '%s' and '%s' both map to '%s'", fn,
                           ps->items[a < b ? a : b].name, ps->items[a < b ? b : a].name, t->sorted[i].name);
            nm_table_free(t);
            return s;
        }
    return ATTN_OK;
}

static int nm_table_has(const nm_table *t, const char *name) {
    const nm_entry key = {name, 0};
    return t->n && bsearch(&key, t->sorted, t->n, sizeof *t->sorted, nm_entry_cmp) != NULL;
}

static attn_status params_load(const char *fn, const attn_params *ps, const attn_safetensors *st,
                               const attn_name_map *map, const char *prefix, int strict) {
    ATTN_CHECK_NOT_NULL(fn, ps);
    ATTN_CHECK_NOT_NULL(fn, st);
    if (!prefix) prefix = "";
    const size_t lp = strlen(prefix);
    nm_table t;
    attn_status s = nm_table_build(&t, fn, ps, map, prefix);
    if (s) return s;
    msgbuf m;
    memset(&m, 0, sizeof m);
    char item[400];
    int missing = 0, shape = 0, unexpected = 0, dtype = 0;
    /* every check first, by kind, so that nothing is modified unless all pass */
    for (size_t i = 0; i < ps->n; i++) {
        if (!attn_safetensors_find(st, t.full[i])) {
            msg_item(&m, P_MISSING, t.full[i]);
            missing++;
        }
    }
    for (size_t i = 0; i < ps->n; i++) {
        const attn_param *p = &ps->items[i];
        const attn_safetensors_tensor *x = attn_safetensors_find(st, t.full[i]);
        if (!x) continue;
        int same = x->rank == p->rank;
        for (int d = 0; same && d < p->rank; d++) same = x->shape[d] == p->shape[d];
        if (!same) {
            char a[200], b[96];
            snprintf(item, sizeof item, "%s %s (expected %s)", t.full[i],
                     attn_shape_str(x->shape, x->rank, a, sizeof a), attn_shape_str(p->shape, p->rank, b, sizeof b));
            msg_item(&m, P_SHAPE, item);
            shape++;
        }
    }
    for (size_t i = 0; i < ps->n; i++) {
        const attn_safetensors_tensor *x = attn_safetensors_find(st, t.full[i]);
        if (x && !is_float_dtype(x->dtype)) {
            snprintf(item, sizeof item, "%s (%s)", t.full[i], attn_dtype_name(x->dtype));
            msg_item(&m, P_DTYPE, item);
            dtype++;
        }
    }
    if (strict) {
        const size_t n = attn_safetensors_count(st);
        for (size_t i = 0; i < n; i++) {
            const char *name = attn_safetensors_get(st, i)->name;
            if (strncmp(name, prefix, lp) != 0 || nm_table_has(&t, name)) continue;
            msg_item(&m, P_UNEXPECTED, name);
            unexpected++;
        }
    }
    if (missing || shape || unexpected || dtype) {
        nm_table_free(&t);
        const int total = missing + shape + unexpected + dtype;
        s = shape ? ATTN_ERR_SHAPE : missing || unexpected ? ATTN_ERR_NOT_FOUND : ATTN_ERR_INVALID_ARGUMENT;
        char list[440];
        msg_join(&m, list, sizeof list);
        return attn_error(s, "%s: %d problem%s with the weights%s%s: %s", fn, total, total == 1 ? "" : "s",
                          lp ? " under prefix " : "", prefix, list);
    }
    for (size_t i = 0; i < ps->n && !s; i++)
        s = attn_safetensors_read_f32(st, t.full[i], ps->items[i].data, ps->items[i].numel);
    nm_table_free(&t);
    return s;
}

attn_status attn_params_load_mapped(const attn_params *ps, const attn_safetensors *st, const attn_name_map *map,
                                    const char *prefix, int strict) {
    return params_load("attn_params_load_mapped", ps, st, map, prefix, strict);
}

attn_status attn_params_load(const attn_params *ps, const attn_safetensors *st, const char *prefix, int strict) {
    return params_load("attn_params_load", ps, st, NULL, prefix, strict);
}

static attn_status params_load_file(const char *fn, const attn_params *ps, const char *path, const attn_name_map *map) {
    ATTN_CHECK_NOT_NULL(fn, ps);
    ATTN_CHECK_NOT_NULL(fn, path);
    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_open_file(path, &st);
    if (s) return s;
    s = params_load(fn, ps, st, map, NULL, 1);
    attn_safetensors_close(st);
    return s;
}

attn_status attn_params_load_file_mapped(const attn_params *ps, const char *path, const attn_name_map *map) {
    return params_load_file("attn_params_load_file_mapped", ps, path, map);
}

attn_status attn_params_load_file(const attn_params *ps, const char *path) {
    return params_load_file("attn_params_load_file", ps, path, NULL);
}

static attn_status params_write(const char *fn, const attn_params *ps, attn_safetensors_writer *w,
                                const attn_name_map *map, const char *prefix) {
    ATTN_CHECK_NOT_NULL(fn, ps);
    ATTN_CHECK_NOT_NULL(fn, w);
    nm_table t;
    attn_status s = nm_table_build(&t, fn, ps, map, prefix ? prefix : "");
    for (size_t i = 0; i < ps->n && !s; i++) {
        const attn_param *p = &ps->items[i];
        s = attn_safetensors_writer_add(w, t.full[i], ATTN_DTYPE_F32, p->rank, p->shape, p->data);
    }
    nm_table_free(&t);
    return s;
}

attn_status attn_params_write_mapped(const attn_params *ps, attn_safetensors_writer *w, const attn_name_map *map,
                                     const char *prefix) {
    return params_write("attn_params_write_mapped", ps, w, map, prefix);
}

attn_status attn_params_write(const attn_params *ps, attn_safetensors_writer *w, const char *prefix) {
    return params_write("attn_params_write", ps, w, NULL, prefix);
}

static attn_status params_save_file(const char *fn, const attn_params *ps, const char *path, const attn_name_map *map) {
    ATTN_CHECK_NOT_NULL(fn, ps);
    ATTN_CHECK_NOT_NULL(fn, path);
    attn_safetensors_writer *w = NULL;
    attn_status s = attn_safetensors_writer_create(&w);
    if (!s) s = params_write(fn, ps, w, map, NULL);
    if (!s) s = attn_safetensors_writer_write_file(w, path);
    attn_safetensors_writer_free(w);
    return s;
}

attn_status attn_params_save_file_mapped(const attn_params *ps, const char *path, const attn_name_map *map) {
    return params_save_file("attn_params_save_file_mapped", ps, path, map);
}

attn_status attn_params_save_file(const attn_params *ps, const char *path) {
    return params_save_file("attn_params_save_file", ps, path, NULL);
}

/* ---- arena ---- */

attn_status attn_nn_arena_init(nn_arena *a, const char *fn, const char *what, void *buf, size_t bytes, size_t need) {
    memset(a, 0, sizeof *a);
    if (need == SIZE_MAX) return attn_error(ATTN_ERR_OVERFLOW, "%s: %s size overflows for these shapes", fn, what);
    if (bytes < need || (need > 0 && !buf))
        return attn_error(ATTN_ERR_WORKSPACE,
                          "%s: %s of %zu bytes at %p, need %zu (see the module's %s_size query; it "
                          "depends on the shapes, the options and the thread count)",
                          fn, what, bytes, buf, need, what);
    if (!buf) return ATTN_OK;
    const uintptr_t p = (uintptr_t)buf, al = (p + NN_ALIGN - 1) & ~(uintptr_t)(NN_ALIGN - 1);
    a->base = (char *)al;
    a->cap = bytes - (size_t)(al - p);
    return ATTN_OK;
}

void *attn_nn_take(nn_arena *a, size_t bytes) {
    if (bytes == 0 || !a->base) return NULL;
    void *p = a->base + a->off;
    a->off += nn_block(bytes);
    return p;
}

attn_status attn_nn_wrap_error(attn_status st, const char *fn) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", attn_last_error());
    return attn_error(st, "%s: %s", fn, msg);
}

attn_status attn_params_join(const attn_params *const *lists, const char *const *prefixes, size_t n,
                             attn_params **out) {
    static const char fn[] = "attn_params_join";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    if (n > 0) ATTN_CHECK_NOT_NULL(fn, lists);
    attn_params *j = attn_nn_params_new();
    if (!j) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (size_t i = 0; i < n; i++) {
        attn_status st;
        if (!lists[i])
            st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: lists[%zu] is NULL", fn, i);
        else
            st = attn_nn_params_append(j, fn, lists[i], prefixes && prefixes[i] ? prefixes[i] : "");
        if (st) {
            attn_nn_params_free(j);
            return st;
        }
    }
    for (size_t a = 0; a < j->n; a++) /* quadratic, once, at setup */
        for (size_t b = a + 1; b < j->n; b++)
            if (!strcmp(j->items[a].name, j->items[b].name)) {
                attn_status st = attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: parameter name '%s' appears twice", fn,
                                            j->items[a].name);
                attn_nn_params_free(j);
                return st;
            }
    *out = j;
    return ATTN_OK;
}

void attn_params_join_free(attn_params *joined) { attn_nn_params_free(joined); }
