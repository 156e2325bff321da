/* libFuzzer harness: the safetensors reader (src/io/safetensors.c, and through it the JSON parser).
 * Built by `make fuzz` (docs/fuzzing.md). Each input is opened from memory (the file path reads the
 * whole file into memory first, then takes the same parse); every tensor is checked to lie inside
 * the input, to follow the previous one, to agree with its shape and dtype, to be found by its
 * name, and is converted to float32; metadata is iterated and looked up. An accepted file is
 * written back with the writer and must reopen with the same tensors, bytes and metadata. The raw
 * input also goes through the JSON parser. Any violation aborts, so libFuzzer reports the input. */
#include <string.h>

#include "attn/safetensors.h"
#include "fuzz_util.h"
#include "io/json.h"

/* Written back by the writer (tensors in data order, metadata), st reopens identically. */
static void round_trip(const attn_safetensors *st) {
    attn_safetensors_writer *w = NULL;
    REQUIRE(attn_safetensors_writer_create(&w) == ATTN_OK);
    const size_t n = attn_safetensors_count(st), nm = attn_safetensors_metadata_count(st);
    for (size_t i = 0; i < n; i++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(st, i);
        REQUIRE(attn_safetensors_writer_add(w, t->name, t->dtype, t->rank, t->shape, t->data) == ATTN_OK);
    }
    for (size_t i = 0; i < nm; i++) {
        const char *k = NULL, *v = NULL;
        REQUIRE(attn_safetensors_metadata_get(st, i, &k, &v) == ATTN_OK);
        REQUIRE(attn_safetensors_writer_add_metadata(w, k, v) == ATTN_OK);
    }
    void *buf = NULL;
    size_t len = 0;
    REQUIRE(attn_safetensors_writer_write_memory(w, &buf, &len) == ATTN_OK);
    attn_safetensors_writer_free(w);
    attn_safetensors *again = NULL;
    REQUIRE(attn_safetensors_open_memory(buf, len, &again) == ATTN_OK);
    REQUIRE(attn_safetensors_count(again) == n && attn_safetensors_metadata_count(again) == nm);
    for (size_t i = 0; i < n; i++) {
        const attn_safetensors_tensor *a = attn_safetensors_get(st, i), *b = attn_safetensors_find(again, a->name);
        REQUIRE(b != NULL && b->dtype == a->dtype && b->rank == a->rank && b->nbytes == a->nbytes);
        REQUIRE(!memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->rank));
        REQUIRE(a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes));
    }
    for (size_t i = 0; i < nm; i++) {
        const char *k = NULL, *v = NULL;
        REQUIRE(attn_safetensors_metadata_get(st, i, &k, &v) == ATTN_OK);
        const char *v2 = attn_safetensors_metadata_find(again, k);
        REQUIRE(v2 != NULL && !strcmp(v, v2));
    }
    attn_safetensors_close(again);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the JSON parser on its own, on the raw bytes */
    attn_json_doc *doc = NULL;
    attn_json_error err;
    if (attn_json_parse((const char *)data, size, NULL, &doc, &err) == ATTN_JSON_OK) {
        REQUIRE(doc != NULL);
        attn_json_free(doc);
    } else {
        REQUIRE(doc == NULL && err.message[0] != '\0');
    }

    attn_safetensors *st = NULL;
    attn_clear_error();
    attn_status s = attn_safetensors_open_memory(data, size, &st);
    if (s != ATTN_OK) {
        REQUIRE(st == NULL);
        REQUIRE(attn_last_error()[0] != '\0');
        return 0;
    }
    REQUIRE(st != NULL && size >= 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | data[i];
    const uint8_t *expect = data + 8 + hl; /* tensors are contiguous, in data order */
    size_t n = attn_safetensors_count(st);
    for (size_t i = 0; i < n; i++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(st, i);
        REQUIRE(t != NULL && t->name != NULL);
        REQUIRE(t->rank >= 0 && t->rank <= ATTN_SAFETENSORS_MAX_RANK);
        REQUIRE((unsigned)t->dtype < ATTN_DTYPE_COUNT);
        const uint8_t *d = t->data;
        REQUIRE(d == expect);
        REQUIRE(t->nbytes <= (size_t)(data + size - d));
        size_t numel = 1;
        for (int k = 0; k < t->rank; k++) {
            REQUIRE(t->shape[k] >= 0);
            numel *= (size_t)t->shape[k]; /* cannot overflow: the reader checked */
        }
        REQUIRE(numel * attn_dtype_size(t->dtype) == t->nbytes);
        REQUIRE(attn_safetensors_find(st, t->name) == t);
        float *v = malloc((numel ? numel : 1) * sizeof(float));
        REQUIRE(v != NULL);
        REQUIRE(attn_safetensors_read_f32(st, t->name, v, numel) == ATTN_OK);
        REQUIRE(attn_safetensors_read_f32_shape(st, t->name, v, t->rank, t->shape) == ATTN_OK);
        free(v);
        expect = d + t->nbytes;
    }
    REQUIRE(expect == data + size);
    for (size_t i = 0; i < attn_safetensors_metadata_count(st); i++) {
        const char *k = NULL, *v = NULL;
        REQUIRE(attn_safetensors_metadata_get(st, i, &k, &v) == ATTN_OK && k && v);
        REQUIRE(attn_safetensors_metadata_find(st, k) == v);
    }
    round_trip(st);
    attn_safetensors_close(st);
    return 0;
}
