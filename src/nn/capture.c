/* Attention capture: requests (pattern, heads, rows) and the records attention modules write
 * during a forward. Modules learn their names from the path the enclosing layers, stacks and models
 * push while they run ("encoder." + "layers.0." + "self_attn"). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nn_internal.h"

#define PATH_MAX_LEN 256

typedef struct cap_request {
    char *pattern;
    int64_t head0, heads, row0, rows;
} cap_request;

typedef struct cap_record {
    char *module;
    attn_capture_record r;
    float *w;
    size_t cap; /* floats allocated at w */
} cap_record;

struct attn_capture {
    cap_request *req;
    size_t nreq, req_cap;
    cap_record *rec;
    size_t nrec, rec_cap;
    char path[PATH_MAX_LEN];
    size_t len;
};

attn_status attn_capture_create(attn_capture **out) {
    ATTN_CHECK_NOT_NULL("attn_capture_create", out);
    *out = attn__calloc(1, sizeof **out);
    return *out ? ATTN_OK : attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_capture_create: out of memory");
}

void attn_capture_clear(attn_capture *c) {
    if (!c) return;
    for (size_t i = 0; i < c->nrec; i++) {
        attn__free(c->rec[i].module);
        attn__free(c->rec[i].w);
    }
    c->nrec = 0;
}

void attn_capture_free(attn_capture *c) {
    if (!c) return;
    attn_capture_clear(c);
    for (size_t i = 0; i < c->nreq; i++) attn__free(c->req[i].pattern);
    attn__free(c->req);
    attn__free(c->rec);
    attn__free(c);
}

static char *dup_str(const char *s) {
    const size_t n = strlen(s) + 1;
    char *d = attn__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

attn_status attn_capture_add(attn_capture *c, const char *pattern, int64_t head0, int64_t heads, int64_t row0,
                             int64_t rows) {
    static const char fn[] = "attn_capture_add";
    ATTN_CHECK_NOT_NULL(fn, c);
    ATTN_CHECK_NOT_NULL(fn, pattern);
    if (head0 < 0 || heads < 0 || row0 < 0 || rows < 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: head0 (%lld), heads (%lld), row0 (%lld) and rows (%lld) must be >= 0", fn,
                          (long long)head0, (long long)heads, (long long)row0, (long long)rows);
    if (strlen(pattern) >= PATH_MAX_LEN)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: pattern longer than %d characters", fn, PATH_MAX_LEN - 1);
    if (c->nreq == c->req_cap) {
        const size_t cap = c->req_cap ? 2 * c->req_cap : 4;
        cap_request *r = attn__realloc(c->req, cap * sizeof *r);
        if (!r) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        c->req = r;
        c->req_cap = cap;
    }
    char *p = dup_str(pattern);
    if (!p) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    c->req[c->nreq++] = (cap_request){p, head0, heads, row0, rows};
    return ATTN_OK;
}

size_t attn_capture_count(const attn_capture *c) { return c ? c->nrec : 0; }

attn_status attn_capture_get(const attn_capture *c, size_t i, attn_capture_record *rec) {
    static const char fn[] = "attn_capture_get";
    ATTN_CHECK_NOT_NULL(fn, c);
    ATTN_CHECK_NOT_NULL(fn, rec);
    if (i >= c->nrec) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: record %zu of %zu", fn, i, c->nrec);
    *rec = c->rec[i].r;
    return ATTN_OK;
}

attn_status attn_capture_find(const attn_capture *c, const char *module, attn_capture_record *rec) {
    static const char fn[] = "attn_capture_find";
    ATTN_CHECK_NOT_NULL(fn, c);
    ATTN_CHECK_NOT_NULL(fn, module);
    ATTN_CHECK_NOT_NULL(fn, rec);
    char list[512] = "";
    size_t used = 0;
    for (size_t i = 0; i < c->nrec; i++) {
        if (!strcmp(c->rec[i].module, module)) {
            *rec = c->rec[i].r;
            return ATTN_OK;
        }
        int n = snprintf(list + used, sizeof list - used, "%s'%s'", used ? ", " : "", c->rec[i].module);
        if (n > 0 && (size_t)n < sizeof list - used) used += (size_t)n;
    }
    return attn_error(ATTN_ERR_NOT_FOUND, "%s: no record of module '%s' (recorded: %s)", fn, module,
                      c->nrec ? list : "none");
}

/* '*' matches any run of characters, everything else itself. */
static int glob_match(const char *p, const char *s) {
    const char *star = NULL, *resume = NULL;
    while (*s) {
        if (*p == '*') {
            star = p++;
            resume = s;
        } else if (*p == *s) {
            p++, s++;
        } else if (star) {
            p = star + 1;
            s = ++resume;
        } else {
            return 0;
        }
    }
    while (*p == '*') p++;
    return *p == 0;
}

/* The calling thread's ambient capture: used by modules whose args carry none (see nn_internal.h). */
static _Thread_local attn_capture *ambient;

attn_capture *attn_nn_capture_set_ambient(attn_capture *c) {
    attn_capture *prev = ambient;
    ambient = c;
    return prev;
}

attn_capture *attn_nn_capture_of(attn_capture *c) { return c ? c : ambient; }

size_t attn_nn_capture_push(attn_capture *c, const char *fmt, ...) {
    c = attn_nn_capture_of(c);
    if (!c) return 0;
    const size_t mark = c->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->path + c->len, sizeof c->path - c->len, fmt, ap);
    va_end(ap);
    if (n > 0) c->len = c->len + (size_t)n < sizeof c->path ? c->len + (size_t)n : sizeof c->path - 1;
    return mark;
}

void attn_nn_capture_pop(attn_capture *c, size_t mark) {
    c = attn_nn_capture_of(c);
    if (!c || mark > c->len) return;
    c->len = mark;
    c->path[mark] = 0;
}

attn_status attn_nn_capture_begin(attn_capture *c, const char *fn, int64_t B, int64_t H, int64_t nq, int64_t nk,
                                  nn_capture_slot *slot) {
    memset(slot, 0, sizeof *slot);
    c = attn_nn_capture_of(c);
    if (!c) return ATTN_OK;
    c->path[c->len] = 0;
    const char *name = c->path;
    int64_t h0 = 0, h1 = 0, r0 = 0, r1 = 0;
    int any = 0;
    for (size_t i = 0; i < c->nreq; i++) {
        const cap_request *q = &c->req[i];
        if (!glob_match(q->pattern, name)) continue;
        const int64_t qh1 = q->heads ? q->head0 + q->heads : H, qr1 = q->rows ? q->row0 + q->rows : nq;
        if (q->head0 >= H || qh1 > H || q->row0 >= nq || qr1 > nq)
            return attn_error(ATTN_ERR_SHAPE,
                              "%s: capture request '%s' asks for heads [%lld, %lld) and rows [%lld, %lld) of module "
                              "'%s', which has %lld heads and %lld query rows",
                              fn, q->pattern, (long long)q->head0, (long long)qh1, (long long)q->row0, (long long)qr1,
                              name, (long long)H, (long long)nq);
        if (!any || q->head0 < h0) h0 = q->head0;
        if (!any || qh1 > h1) h1 = qh1;
        if (!any || q->row0 < r0) r0 = q->row0;
        if (!any || qr1 > r1) r1 = qr1;
        any = 1;
    }
    if (!any) return ATTN_OK;
    cap_record *rec = NULL;
    for (size_t i = 0; i < c->nrec && !rec; i++)
        if (!strcmp(c->rec[i].module, name)) rec = &c->rec[i];
    if (!rec) {
        if (c->nrec == c->rec_cap) {
            const size_t cap = c->rec_cap ? 2 * c->rec_cap : 8;
            cap_record *r = attn__realloc(c->rec, cap * sizeof *r);
            if (!r) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for the attention capture", fn);
            c->rec = r;
            c->rec_cap = cap;
        }
        rec = &c->rec[c->nrec];
        memset(rec, 0, sizeof *rec);
        if (!(rec->module = dup_str(name)))
            return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for the attention capture", fn);
        c->nrec++;
    }
    const size_t floats = nn_mul(nn_mul((size_t)B, (size_t)(h1 - h0)), nn_mul((size_t)(r1 - r0), (size_t)nk));
    if (floats == SIZE_MAX || floats > ((size_t)1 << 40))
        return attn_error(ATTN_ERR_OVERFLOW, "%s: the capture of module '%s' is too large", fn, name);
    if (floats > rec->cap) {
        float *w = attn__realloc(rec->w, floats * sizeof(float));
        if (!w)
            return attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory capturing %zu weights of module '%s'", fn,
                              floats, name);
        rec->w = w;
        rec->cap = floats;
    }
    rec->r = (attn_capture_record){rec->module, B, h1 - h0, r1 - r0, nk, h0, r0, H, nq, rec->w};
    *slot = (nn_capture_slot){rec->w, B, h0, h1 - h0, r0, r1 - r0, nk};
    return ATTN_OK;
}
