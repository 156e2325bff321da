/* The attention-kind table and its public listing. One row per kind; the kinds live in their own
 * files (kind_softmax.c: flash, window; kind_linear.c; kind_performer.c). */
#include <string.h>

#include "attention/attention_kind.h"
#include "core/internal.h"

/* The rows, each defined in its kind's own file (a new kind: its file, its enum value in
 * attn/attention.h, and one line here and one in the table). */
extern const attn_kind_ops attn_kind_flash, attn_kind_window, attn_kind_local_global, attn_kind_linear,
    attn_kind_performer;

/* Indexed by the enum: a row's place is its kind's value, whatever the order written here. */
static const attn_kind_ops *const kinds[] = {
    [ATTN_ATTENTION_FLASH] = &attn_kind_flash,
    [ATTN_ATTENTION_WINDOW] = &attn_kind_window,
    [ATTN_ATTENTION_LOCAL_GLOBAL] = &attn_kind_local_global,
    [ATTN_ATTENTION_LINEAR] = &attn_kind_linear,
    [ATTN_ATTENTION_PERFORMER] = &attn_kind_performer,
};
enum { KIND_COUNT = (int)(sizeof kinds / sizeof kinds[0]) };
/* A kind added to the enum without its row (or a row past the enum) fails the build; a row left
 * out before the last is caught by attn_kind_table_check. */
_Static_assert(sizeof kinds / sizeof kinds[0] == ATTN_ATTENTION_KIND_COUNT,
               "kinds[] needs exactly one row per attn_attention_kind");

const attn_kind_ops *attn_kind_ops_get(attn_attention_kind kind) {
    return (int)kind >= 0 && (int)kind < KIND_COUNT ? kinds[kind] : NULL;
}

attn_status attn_kind_table_check(void) {
    static const char fn[] = "attn_kind_table_check";
    for (int i = 0; i < KIND_COUNT; i++) {
        const attn_kind_ops *k = kinds[i];
        const char *missing = !k                        ? "row"
                              : !k->name || !*k->name   ? "name"
                              : !k->help || !*k->help   ? "help"
                              : !k->options             ? "options"
                              : k->stats_per_row < 0    ? "stats_per_row"
                              : !k->workspace_size      ? "workspace_size"
                              : !k->forward             ? "forward"
                              : !k->backward            ? "backward"
                              : !k->step_workspace_size ? "step_workspace_size"
                              : !k->step                ? "step"
                                                        : NULL;
        if (missing) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: attention kind %d has no %s", fn, i, missing);
    }
    return ATTN_OK;
}

attn_attention_config attn_attention_config_default(void) {
    attn_attention_config c;
    memset(&c, 0, sizeof c);
    c.kind = ATTN_ATTENTION_FLASH;
    return c;
}

attn_status attn_attention_config_check(const attn_attention_config *cfg) {
    static const char fn[] = "attn_attention_config_check";
    ATTN_CHECK_NOT_NULL(fn, cfg);
    const attn_kind_ops *k = attn_kind_ops_get(cfg->kind);
    if (!k)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: unknown attention kind %d (0 .. %d)", fn, (int)cfg->kind,
                          KIND_COUNT - 1);
    return k->check ? k->check(fn, cfg) : ATTN_OK;
}

int attn_attention_kind_count(void) { return KIND_COUNT; }

const char *attn_attention_kind_name(attn_attention_kind kind) {
    const attn_kind_ops *k = attn_kind_ops_get(kind);
    return k ? k->name : NULL;
}

const char *attn_attention_kind_help(attn_attention_kind kind) {
    const attn_kind_ops *k = attn_kind_ops_get(kind);
    return k ? k->help : NULL;
}

const char *attn_attention_kind_options(attn_attention_kind kind) {
    const attn_kind_ops *k = attn_kind_ops_get(kind);
    return k ? k->options : NULL;
}

int attn_attention_kind_has_weights(attn_attention_kind kind) {
    const attn_kind_ops *k = attn_kind_ops_get(kind);
    return k && k->weights;
}

attn_status attn_attention_kind_from_name(const char *name, attn_attention_kind *kind) {
    static const char fn[] = "attn_attention_kind_from_name";
    ATTN_CHECK_NOT_NULL(fn, name);
    ATTN_CHECK_NOT_NULL(fn, kind);
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < KIND_COUNT; i++) {
        if (!strcmp(name, kinds[i]->name)) {
            *kind = (attn_attention_kind)i;
            return ATTN_OK;
        }
        const size_t n = strlen(kinds[i]->name);
        if (used + n + 3 < sizeof list) {
            if (used) memcpy(list + used, ", ", 2), used += 2;
            memcpy(list + used, kinds[i]->name, n + 1);
            used += n;
        }
    }
    return attn_error(ATTN_ERR_NOT_FOUND, "%s: unknown attention kind '%s' (available: %s)", fn, name, list);
}
