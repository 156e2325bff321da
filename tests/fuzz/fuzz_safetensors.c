// libFuzzer harness for the safetensors reader (and, through it, the JSON parser). Not built by
// default. Build and run from the repository root (clang 14 with libclang-rt-14-dev):
//
//   clang -g -O1 -std=c11 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc tests/fuzz/fuzz_safetensors.c src/io/*.c src/core/*.c -lm -o /tmp/fuzz_safetensors
//   mkdir -p /tmp/st_corpus && cp tests/parity/fixtures/*.safetensors /tmp/st_corpus/
//   /tmp/fuzz_safetensors -max_total_time=60 -max_len=4096 /tmp/st_corpus
//
// (src/core/threads.c's OpenMP pragmas are ignored without -fopenmp.) Each input is opened from
// memory; every tensor is checked to lie inside the input, to follow the previous one, to agree
// with its shape and dtype, to be found by its name, and is converted to float32; metadata is
// iterated and looked up. The raw input also goes through the JSON parser. Any violation aborts,
// so libFuzzer reports it with the input.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/safetensors.h"
#include "io/json.h"

#define REQUIRE(c)                                                                             \
    do {                                                                                       \
        if (!(c)) {                                                                            \
            fprintf(stderr, "fuzz_safetensors: violated: %s (line %d)\n", #c, __LINE__);       \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    attn_safetensors_close(st);
    return 0;
}
