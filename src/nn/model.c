/* The public model API (attn/model.h): a thin wrapper over the engine of `attn run` (nn_run.h).
 * Staged inputs go through an in-memory safetensors file, so binding them is exactly binding a
 * file of inputs; capture reaches the modules through the ambient capture of nn_internal.h (the
 * engine builds the modules' args itself and has no capture parameter). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "io/safe_file.h"
#include "attn/model.h"
#include "nn_internal.h"
#include "nn_run.h"

struct attn_model {
    nn_model *m;
    attn_safetensors_writer *stage; /* staged inputs; NULL when none */
};

const char *attn_model_known(size_t i) { return attn_nn_model_known(i); }

attn_status attn_model_create_json(const char *json, size_t len, attn_model **out) {
    static const char fn[] = "attn_model_create_json";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, json);
    attn_json_doc *doc = NULL;
    attn_json_error jerr;
    const attn_json_options jopt = {0, 1}; /* a repeated key is an error */
    if (attn_json_parse(json, len, &jopt, &doc, &jerr) != ATTN_JSON_OK)
        return attn_error(jerr.status == ATTN_JSON_ERR_NOMEM ? ATTN_ERR_OUT_OF_MEMORY : ATTN_ERR_INVALID_ARGUMENT,
                          "%s: configuration: %s", fn, jerr.message);
    attn_model *m = attn__calloc(1, sizeof *m);
    attn_status st = m ? attn_nn_model_create(attn_json_root(doc), &m->m)
                       : attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_json_free(doc);
    if (st) {
        attn__free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

attn_status attn_model_create_file(const char *path, attn_model **out) {
    static const char fn[] = "attn_model_create_file";
    ATTN_CHECK_NOT_NULL(fn, out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(fn, path);
    char *text = NULL;
    size_t len = 0;
    attn_status st = attn_io_read_input(path, "config", ATTN_IO_CAP_CONFIG, &text, &len);
    if (st) return st;
    attn_json_doc *doc = NULL;
    attn_json_error jerr;
    const attn_json_options jopt = {0, 1}; /* a repeated key is an error */
    if (attn_json_parse(text, len, &jopt, &doc, &jerr) != ATTN_JSON_OK) {
        attn__free(text);
        return attn_error(jerr.status == ATTN_JSON_ERR_NOMEM ? ATTN_ERR_OUT_OF_MEMORY : ATTN_ERR_INVALID_ARGUMENT,
                          "%s: %s", path, jerr.message);
    }
    attn__free(text);
    attn_model *m = attn__calloc(1, sizeof *m);
    st = m ? attn_nn_model_create(attn_json_root(doc), &m->m)
           : attn_error(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_json_free(doc);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", attn_last_error());
        attn_error(st, "%s: %s", path, why);
        attn__free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

static void drop_stage(attn_model *m) {
    attn_safetensors_writer_free(m->stage);
    m->stage = NULL;
}

void attn_model_free(attn_model *m) {
    if (!m) return;
    drop_stage(m);
    attn_nn_model_free(m->m);
    attn__free(m);
}

const char *attn_model_name(const attn_model *m) { return m ? attn_nn_model_name(m->m) : NULL; }

const attn_params *attn_model_params(attn_model *m) { return m ? attn_nn_model_params(m->m) : NULL; }

attn_status attn_model_load(attn_model *m, const attn_safetensors *st, const char *prefix, int strict) {
    static const char fn[] = "attn_model_load";
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, st);
    return attn_nn_model_load(m->m, st, prefix, strict);
}

const attn_vit *attn_model_vit(const attn_model *m) { return m ? attn_nn_model_vit(m->m) : NULL; }

attn_status attn_model_set_option(attn_model *m, const char *name, int value) {
    ATTN_CHECK_NOT_NULL("attn_model_set_option", m);
    return attn_nn_model_set_option(m->m, name, value);
}

attn_status attn_model_bind_safetensors(attn_model *m, const attn_safetensors *st, const char *prefix, int strict) {
    ATTN_CHECK_NOT_NULL("attn_model_bind_safetensors", m);
    return attn_nn_model_bind(m->m, st, prefix, strict);
}

attn_status attn_model_input(attn_model *m, const char *name, attn_dtype dtype, int rank, const int64_t *shape,
                             const void *data) {
    static const char fn[] = "attn_model_input";
    ATTN_CHECK_NOT_NULL(fn, m);
    ATTN_CHECK_NOT_NULL(fn, name);
    ATTN_CHECK_NOT_NULL(fn, data);
    if (rank < 0 || rank > ATTN_SAFETENSORS_MAX_RANK || (rank > 0 && !shape))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: input '%s': rank %d (0 to %d, with a shape)", fn, name, rank,
                          ATTN_SAFETENSORS_MAX_RANK);
    switch (dtype) {
    case ATTN_DTYPE_F32:
    case ATTN_DTYPE_F64:
    case ATTN_DTYPE_F16:
    case ATTN_DTYPE_BF16:
    case ATTN_DTYPE_BOOL:
    case ATTN_DTYPE_U8: break;
    default:
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: input '%s': dtype %s (F32, F64, F16, BF16, BOOL or U8)", fn,
                          name, attn_dtype_name(dtype));
    }
    attn_status st;
    if (!m->stage && (st = attn_safetensors_writer_create(&m->stage))) return st;
    return attn_safetensors_writer_add(m->stage, name, dtype, rank, shape, data);
}

attn_status attn_model_bind(attn_model *m) {
    static const char fn[] = "attn_model_bind";
    ATTN_CHECK_NOT_NULL(fn, m);
    if (!m->stage) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "%s: no inputs staged (attn_model_input)", fn);
    void *buf = NULL;
    size_t len = 0;
    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_writer_write_memory(m->stage, &buf, &len);
    drop_stage(m);
    if (!s) s = attn_safetensors_open_memory(buf, len, &st);
    if (!s) s = attn_nn_model_bind(m->m, st, NULL, 1);
    attn_safetensors_close(st);
    attn__free(buf);
    return s;
}

attn_status attn_model_forward(attn_model *m, int keep_for_backward, int training, uint64_t seed, uint64_t offset,
                               attn_capture *capture) {
    ATTN_CHECK_NOT_NULL("attn_model_forward", m);
    if (capture) attn_capture_clear(capture);
    attn_capture *prev = attn_nn_capture_set_ambient(capture);
    attn_status st = attn_nn_model_forward(m->m, keep_for_backward, training, seed, offset);
    attn_nn_capture_set_ambient(prev);
    return st;
}

const float *attn_model_output(const attn_model *m, int *rank, int64_t shape[4]) {
    return m ? attn_nn_model_output(m->m, rank, shape) : NULL;
}

const float *attn_model_weights(const attn_model *m, int *rank, int64_t shape[4]) {
    return m ? attn_nn_model_weights(m->m, rank, shape) : NULL;
}

attn_status attn_model_backward(attn_model *m, const float *dout) {
    ATTN_CHECK_NOT_NULL("attn_model_backward", m);
    return attn_nn_model_backward(m->m, dout);
}

const float *attn_model_input_grad(const attn_model *m, const char *name, size_t *numel) {
    return m ? attn_nn_model_input_grad(m->m, name, numel) : NULL;
}
