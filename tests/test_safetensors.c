/* safetensors reader and writer: round trips for every dtype and rank 0..8, zero-size tensors,
 * metadata and escaping; unaligned data; exact F16/BF16/F64/F8 conversion; one crafted file per
 * error code; a file written by Python (tests/parity/gen_safetensors.py); and a deterministic
 * mutation fuzz loop (ATTN_ST_FUZZ_ITERS iterations, default 100000; ATTN_TEST_SEED reseeds); a file
 * truncated between sizing and reading (a hook) and while another process truncates and restores
 * it in a loop: a clean error or the file's structure, never a signal (the reader once mapped
 * files, and a truncation then killed the program with SIGBUS). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/st_internal.h"
#include "test_util.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static void put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t fbits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A file: declared header length, header bytes, then dlen data bytes (value 0x5A). */
static unsigned char *mkfile_n(uint64_t declared, const char *hdr, size_t hlen, size_t dlen, size_t *len) {
    unsigned char *b = xmalloc(8 + hlen + dlen);
    put_le(b, declared, 8);
    memcpy(b + 8, hdr, hlen);
    memset(b + 8 + hlen, 0x5A, dlen);
    *len = 8 + hlen + dlen;
    return b;
}

static unsigned char *mkfile(const char *hdr, size_t dlen, size_t *len) {
    return mkfile_n(strlen(hdr), hdr, strlen(hdr), dlen, len);
}

/* Open buf and expect status want (and, when given, needle in the message). */
static void expect_buf(const char *what, const unsigned char *buf, size_t len, attn_status want, const char *needle) {
    attn_safetensors *st = (attn_safetensors *)&st; /* must be reset to NULL on failure */
    attn_clear_error();
    attn_status s = attn_safetensors_open_memory(buf, len, &st);
    const char *msg = attn_last_error();
    if (want == ATTN_OK) {
        CHECK(s == ATTN_OK && st, "%s: want ok, got %s: %s", what, attn_status_str(s), msg);
    } else {
        CHECK(s == want && st == NULL && msg[0] && !strncmp(msg, "safetensors: ", 13) &&
                  (!needle || strstr(msg, needle)),
              "%s: want %s%s%s, got %s: '%s'", what, attn_status_str(want), needle ? " with " : "",
              needle ? needle : "", attn_status_str(s), msg);
    }
    if (s == ATTN_OK) attn_safetensors_close(st);
}

static void expect_hdr(const char *hdr, size_t dlen, attn_status want, const char *needle) {
    size_t len;
    unsigned char *b = mkfile(hdr, dlen, &len);
    expect_buf(hdr, b, len, want, needle);
    free(b);
}

static size_t numel_of(const attn_safetensors_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= (size_t)t->shape[d];
    return n;
}

/* ---- round trips -------------------------------------------------------------------------- */

typedef struct spec {
    char name[64];
    attn_dtype dt;
    int rank;
    int64_t shape[8];
    unsigned char *data;
    size_t nbytes;
} spec;

static const char *meta_kv[][2] = {
    {"format", "pt"},
    {"escapes", "a\"b\\c\nd\x01\x1f/"},
    {"unicode", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"},
    {"empty", ""},
};
#define N_META (sizeof meta_kv / sizeof meta_kv[0])

static size_t make_specs(spec *sp, test_rng *r) {
    size_t n = 0;
    for (int d = 0; d < ATTN_DTYPE_COUNT; d++) {
        for (int rank = 0; rank <= 8; rank++) {
            spec *s = &sp[n++];
            snprintf(s->name, sizeof s->name, "t.%s.r%d", attn_dtype_name((attn_dtype)d), rank);
            s->dt = (attn_dtype)d;
            s->rank = rank;
            size_t numel = 1;
            for (int k = 0; k < rank; k++) {
                s->shape[k] = 1 + (d + k) % 3;
                if (rank == 8 && k > 3) s->shape[k] = 1;
                numel *= (size_t)s->shape[k];
            }
            s->nbytes = numel * attn_dtype_size(s->dt);
            s->data = xmalloc(s->nbytes);
            for (size_t i = 0; i < s->nbytes; i++) s->data[i] = (unsigned char)rng_next(r);
        }
    }
    /* zero-size tensors (also two in a row, which share an offset) and awkward names */
    const struct {
        const char *name;
        attn_dtype dt;
        int rank;
        int64_t shape[8];
    } extra[] = {
        {"zero.a", ATTN_DTYPE_F32, 1, {0}},
        {"zero.b", ATTN_DTYPE_F16, 3, {3, 0, 2}},
        {"zero.c", ATTN_DTYPE_I64, 8, {0, 0, 0, 0, 0, 0, 0, 0}},
        {"quote\"back\\slash", ATTN_DTYPE_F32, 1, {2}},
        {"ctrl\x01\n\t\x7f", ATTN_DTYPE_U8, 1, {3}},
        {"unicode \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", ATTN_DTYPE_BF16, 2, {1, 2}},
        {"", ATTN_DTYPE_F64, 0, {0}},
        {"zero.d", ATTN_DTYPE_BOOL, 2, {5, 0}},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        spec *s = &sp[n++];
        snprintf(s->name, sizeof s->name, "%s", extra[i].name);
        s->dt = extra[i].dt;
        s->rank = extra[i].rank;
        size_t numel = 1;
        for (int k = 0; k < s->rank; k++) {
            s->shape[k] = extra[i].shape[k];
            numel *= (size_t)s->shape[k];
        }
        s->nbytes = numel * attn_dtype_size(s->dt);
        s->data = s->nbytes ? xmalloc(s->nbytes) : NULL; /* NULL data is fine for 0 bytes */
        for (size_t k = 0; k < s->nbytes; k++) s->data[k] = (unsigned char)rng_next(r);
    }
    return n;
}

static attn_safetensors_writer *make_writer(const spec *sp, size_t n, int with_meta) {
    attn_safetensors_writer *w = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    for (size_t i = 0; i < n; i++)
        CHECK_OK(attn_safetensors_writer_add(w, sp[i].name, sp[i].dt, sp[i].rank, sp[i].shape, sp[i].data));
    if (with_meta)
        for (size_t i = 0; i < N_META; i++)
            CHECK_OK(attn_safetensors_writer_add_metadata(w, meta_kv[i][0], meta_kv[i][1]));
    return w;
}

/* Everything the writer was given is read back; tensors lie in [base, base + len). */
static void check_contents(const char *what, const attn_safetensors *st, const spec *sp, size_t n, int with_meta,
                           const unsigned char *base, size_t len) {
    CHECK(attn_safetensors_count(st) == n, "%s: %zu tensors, want %zu", what, attn_safetensors_count(st), n);
    int bad = 0;
    const unsigned char *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        const attn_safetensors_tensor *t = attn_safetensors_find(st, sp[i].name);
        if (!t) {
            bad++;
            fprintf(stderr, "%s: '%s' not found\n", what, sp[i].name);
            continue;
        }
        int ok = !strcmp(t->name, sp[i].name) && t->dtype == sp[i].dt && t->rank == sp[i].rank &&
                 t->nbytes == sp[i].nbytes && (const unsigned char *)t->data >= base &&
                 (const unsigned char *)t->data + t->nbytes <= base + len &&
                 (t->nbytes == 0 || memcmp(t->data, sp[i].data, t->nbytes) == 0);
        for (int k = 0; k < t->rank; k++) ok = ok && t->shape[k] == sp[i].shape[k];
        if (!ok) {
            bad++;
            fprintf(stderr, "%s: tensor '%s' differs\n", what, sp[i].name);
        }
        const attn_safetensors_tensor *g = attn_safetensors_get(st, i);
        if (!g || (prev && (const unsigned char *)g->data < prev)) bad++;
        if (g) prev = g->data;
    }
    CHECK(bad == 0, "%s: %d tensors differ", what, bad);
    CHECK(attn_safetensors_get(st, n) == NULL && attn_safetensors_find(st, "absent") == NULL,
          "%s: out of range / absent", what);
    size_t nm = with_meta ? N_META : 0;
    CHECK(attn_safetensors_metadata_count(st) == nm, "%s: metadata count", what);
    for (size_t i = 0; i < nm; i++) {
        const char *k = NULL, *v = NULL;
        CHECK_OK(attn_safetensors_metadata_get(st, i, &k, &v));
        CHECK(k && v && !strcmp(k, meta_kv[i][0]) && !strcmp(v, meta_kv[i][1]), "%s: metadata %zu", what, i);
        const char *f = attn_safetensors_metadata_find(st, meta_kv[i][0]);
        CHECK(f && !strcmp(f, meta_kv[i][1]), "%s: metadata_find %s", what, meta_kv[i][0]);
    }
    CHECK(attn_safetensors_metadata_find(st, "nope") == NULL, "%s: absent metadata", what);
    CHECK_STATUS(attn_safetensors_metadata_get(st, nm, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_roundtrip(const char *dir) {
    test_rng r = rng_seeded(0x57A11);
    spec sp[ATTN_DTYPE_COUNT * 9 + 16];
    size_t n = make_specs(sp, &r);
    for (int with_meta = 0; with_meta <= 1; with_meta++) {
        attn_safetensors_writer *w = make_writer(sp, n, with_meta);
        void *buf = NULL;
        size_t len = 0;
        CHECK_OK(attn_safetensors_writer_write_memory(w, &buf, &len));
        unsigned char *b = buf;
        /* layout: header length a multiple of 8, padded with spaces, starts with '{' */
        uint64_t hl = get_le64(b);
        CHECK(hl % 8 == 0 && hl + 8 <= len && b[8] == '{', "header layout");
        size_t end = (size_t)(8 + hl);
        while (end > 8 && b[end - 1] == ' ') end--;
        CHECK(end > 8 && b[end - 1] == '}' && 8 + hl - end < 8, "padding: %zu spaces", (size_t)(8 + hl - end));
        attn_safetensors *st = NULL;
        CHECK_OK(attn_safetensors_open_memory(buf, len, &st));
        if (st) check_contents(with_meta ? "memory+meta" : "memory", st, sp, n, with_meta, b, len);
        /* non-zero-size tensors come back in insertion order */
        size_t j = 0, bad = 0;
        for (size_t i = 0; st && i < n; i++) {
            if (!sp[i].nbytes) continue;
            while (j < attn_safetensors_count(st) && attn_safetensors_get(st, j)->nbytes == 0) j++;
            if (j >= attn_safetensors_count(st) || strcmp(attn_safetensors_get(st, j)->name, sp[i].name)) bad++;
            j++;
        }
        CHECK(bad == 0, "insertion order kept (%zu out of place)", bad);
        attn_safetensors_close(st);

        /* the same through a file, written twice (the second replaces the first) */
        char path[512], tmp[520];
        snprintf(path, sizeof path, "%s/rt%d.safetensors", dir, with_meta);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        attn_safetensors_writer *w0 = NULL;
        CHECK_OK(attn_safetensors_writer_create(&w0));
        CHECK_OK(attn_safetensors_writer_write_file(w0, path)); /* an empty file: "{}" */
        attn_safetensors_writer_free(w0);
        CHECK_OK(attn_safetensors_open_file(path, &st));
        CHECK(st && attn_safetensors_count(st) == 0 && attn_safetensors_metadata_count(st) == 0, "empty file");
        attn_safetensors_close(st);
        CHECK_OK(attn_safetensors_writer_write_file(w, path));
        CHECK(access(tmp, F_OK) != 0, "no %s left behind", tmp);
        CHECK_OK(attn_safetensors_open_file(path, &st));
        FILE *f = fopen(path, "rb");
        unsigned char *fb = xmalloc(len);
        size_t got = f ? fread(fb, 1, len, f) : 0;
        CHECK(got == len && memcmp(fb, buf, len) == 0, "file bytes == memory bytes");
        if (f) fclose(f);
        free(fb);
        if (st) {
            /* mmap base is unknown here: bounds were checked against the memory copy above */
            CHECK(attn_safetensors_count(st) == n, "file: count");
            int bad2 = 0;
            for (size_t i = 0; i < n; i++) {
                const attn_safetensors_tensor *t = attn_safetensors_find(st, sp[i].name);
                if (!t || t->nbytes != sp[i].nbytes || (t->nbytes && memcmp(t->data, sp[i].data, t->nbytes))) bad2++;
            }
            CHECK(bad2 == 0, "file: %d tensors differ", bad2);
            CHECK(attn_safetensors_metadata_count(st) == (with_meta ? N_META : 0), "file: metadata");
        }
        attn_safetensors_close(st);
        unlink(path);
        free(buf);
        attn_safetensors_writer_free(w);
    }
    for (size_t i = 0; i < n; i++) free(sp[i].data);
}

/* ---- unaligned data and conversions ----------------------------------------------------- */

typedef struct conv {
    uint64_t raw;
    uint32_t want; /* float bits */
} conv;

static void check_conv(attn_dtype dt, const conv *c, size_t n, int odd) {
    size_t sz = attn_dtype_size(dt);
    unsigned char *raw = xmalloc(n * sz);
    for (size_t i = 0; i < n; i++) put_le(raw + i * sz, c[i].raw, (int)sz);
    attn_safetensors_writer *w = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    /* the buffer goes at an odd address: without a 1-byte tensor first the data is at an odd
     * address, with it at an even one */
    unsigned char pad = 7;
    int64_t one = 1, shape = (int64_t)n;
    if (!odd) CHECK_OK(attn_safetensors_writer_add(w, "pad", ATTN_DTYPE_U8, 1, &one, &pad));
    CHECK_OK(attn_safetensors_writer_add(w, "x", dt, 1, &shape, raw));
    void *buf = NULL;
    size_t len = 0;
    CHECK_OK(attn_safetensors_writer_write_memory(w, &buf, &len));
    /* and the whole buffer at an odd address */
    unsigned char *mem = xmalloc(len + 1);
    memcpy(mem + 1, buf, len);
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_memory(mem + 1, len, &st));
    float *out = xmalloc(n * sizeof(float));
    if (st) {
        const attn_safetensors_tensor *t = attn_safetensors_find(st, "x");
        CHECK(t && (uintptr_t)t->data % 2 == (uintptr_t)odd, "%s data at an %s address", attn_dtype_name(dt),
              odd ? "odd" : "even");
        CHECK_OK(attn_safetensors_read_f32(st, "x", out, n));
        for (size_t i = 0; i < n; i++)
            CHECK(fbits(out[i]) == c[i].want, "%s 0x%llx -> %a (0x%08x), want 0x%08x", attn_dtype_name(dt),
                  (unsigned long long)c[i].raw, (double)out[i], fbits(out[i]), c[i].want);
        CHECK_STATUS(attn_safetensors_read_f32(st, "x", out, n + 1), ATTN_ERR_SHAPE);
        CHECK_STATUS(attn_safetensors_read_f32_shape(st, "x", out, 2, (int64_t[]){(int64_t)n, 1}), ATTN_ERR_SHAPE);
        CHECK_OK(attn_safetensors_read_f32_shape(st, "x", out, 1, &shape));
    }
    attn_safetensors_close(st);
    free(out);
    free(mem);
    free(buf);
    free(raw);
    attn_safetensors_writer_free(w);
}

#define F(x) fbits(x)

static void test_conversions(void) {
    for (int odd = 0; odd <= 1; odd++) {
        const conv f16[] = {
            {0x0000, 0x00000000},     {0x8000, 0x80000000},  {0x3C00, F(1.0f)},        {0xC000, F(-2.0f)},
            {0x7BFF, F(65504.0f)},    {0x0001, F(0x1p-24f)}, {0x8001, F(-0x1p-24f)},   {0x03FF, F(0x1.ff8p-15f)},
            {0x0200, F(0x1p-15f)},    {0x0400, F(0x1p-14f)}, {0x3555, F(0x1.554p-2f)}, {0x7C00, 0x7F800000},
            {0xFC00, 0xFF800000},     {0x7E00, 0x7FC00000},  {0xFE00, 0xFFC00000},     {0x7C01, 0x7F802000},
            {0x3BFF, F(0x1.ffcp-1f)},
        };
        check_conv(ATTN_DTYPE_F16, f16, sizeof f16 / sizeof f16[0], odd);
        const conv bf16[] = {
            {0x3F80, F(1.0f)},    {0xC040, F(-3.0f)},       {0x0001, F(0x1p-133f)},
            {0x8000, 0x80000000}, {0x7F7F, F(0x1.fep127f)}, {0x7F80, 0x7F800000},
            {0xFF80, 0xFF800000}, {0xFFC1, 0xFFC10000},     {0x3EAB, F(0x1.56p-2f)},
        };
        check_conv(ATTN_DTYPE_BF16, bf16, sizeof bf16 / sizeof bf16[0], odd);
        const double dv[] = {1.0,
                             -2.5,
                             0.1,
                             1e300,
                             -1e300,
                             1e-300,
                             -1e-300,
                             FLT_MAX,
                             0x1.fffffefffffffp+127,
                             0x1.ffffffp+127,
                             -0x1.ffffffp+127,
                             0x1p-149,
                             0x1.8p-150,
                             0x1p-150,
                             0x1.0000010000001p+0,
                             0x1.000001p+0,
                             1e-40};
        const uint32_t dw[] = {F(1.0f),    F(-2.5f),   F(0.1f),           0x7F800000, 0xFF800000, 0,
                               0x80000000, F(FLT_MAX), F(FLT_MAX),        0x7F800000, 0xFF800000, 1,
                               1,          0,          F(0x1.000002p+0f), F(1.0f),    0x000116C2};
        conv f64[sizeof dv / sizeof dv[0] + 2];
        size_t nf = sizeof dv / sizeof dv[0];
        for (size_t i = 0; i < nf; i++) {
            memcpy(&f64[i].raw, &dv[i], 8);
            f64[i].want = dw[i];
        }
        f64[nf].raw = 0x7FF0000000000000ull; /* inf */
        f64[nf].want = 0x7F800000;
        f64[nf + 1].raw = 0xFFF8000000000000ull; /* -nan */
        f64[nf + 1].want = 0xFFC00000;
        check_conv(ATTN_DTYPE_F64, f64, nf + 2, odd);
        const conv f32[] = {{0x3F800000, 0x3F800000}, {0x7FC00001, 0x7FC00001}, {0x00000001, 1}};
        check_conv(ATTN_DTYPE_F32, f32, 3, odd);
        const conv e4m3[] = {{0x38, F(1.0f)},    {0xB8, F(-1.0f)},   {0x7E, F(448.0f)},    {0x7F, 0x7FC00000},
                             {0xFF, 0xFFC00000}, {0x01, F(0x1p-9f)}, {0x07, F(0x1.cp-7f)}, {0x08, F(0x1p-6f)},
                             {0x00, 0},          {0x80, 0x80000000}, {0x3C, F(1.5f)},      {0x78, F(256.0f)}};
        check_conv(ATTN_DTYPE_F8_E4M3, e4m3, sizeof e4m3 / sizeof e4m3[0], odd);
        const conv e5m2[] = {{0x3C, F(1.0f)},     {0x7B, F(57344.0f)}, {0x7C, 0x7F800000}, {0xFC, 0xFF800000},
                             {0x01, F(0x1p-16f)}, {0x7E, 0x7FC00000},  {0x80, 0x80000000}, {0x3E, F(1.5f)}};
        check_conv(ATTN_DTYPE_F8_E5M2, e5m2, sizeof e5m2 / sizeof e5m2[0], odd);
        const conv b[] = {{0, 0}, {1, F(1.0f)}, {2, F(1.0f)}, {255, F(1.0f)}};
        check_conv(ATTN_DTYPE_BOOL, b, 4, odd);
        const conv u8[] = {{0, 0}, {255, F(255.0f)}, {128, F(128.0f)}};
        check_conv(ATTN_DTYPE_U8, u8, 3, odd);
        const conv i8[] = {{0x80, F(-128.0f)}, {0x7F, F(127.0f)}, {0xFF, F(-1.0f)}};
        check_conv(ATTN_DTYPE_I8, i8, 3, odd);
        const conv i16[] = {{0x8000, F(-32768.0f)}, {0x7FFF, F(32767.0f)}, {0xFFFE, F(-2.0f)}};
        check_conv(ATTN_DTYPE_I16, i16, 3, odd);
        const conv u16[] = {{0xFFFF, F(65535.0f)}, {1, F(1.0f)}};
        check_conv(ATTN_DTYPE_U16, u16, 2, odd);
        const conv i32[] = {
            {0x80000000, F(-2147483648.0f)}, {0x7FFFFFFF, F(2147483648.0f)}, {16777217, F(16777216.0f)}};
        check_conv(ATTN_DTYPE_I32, i32, 3, odd);
        const conv u32[] = {{0xFFFFFFFF, F(4294967296.0f)}, {3, F(3.0f)}};
        check_conv(ATTN_DTYPE_U32, u32, 2, odd);
        const conv i64[] = {{0x8000000000000000ull, F(-0x1p63f)}, {(uint64_t)-5, F(-5.0f)}, {16777219, F(16777220.0f)}};
        check_conv(ATTN_DTYPE_I64, i64, 3, odd);
        const conv u64[] = {{UINT64_MAX, F(0x1p64f)}, {0, 0}, {1ull << 40, F(0x1p40f)}};
        check_conv(ATTN_DTYPE_U64, u64, 3, odd);
    }
}

/* ---- errors -------------------------------------------------------------------------------- */

#define T(name, dt, shape, b, e)                                                                                       \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_errors(const char *dir) {
    size_t len;
    unsigned char *b;
    /* valid edge cases first */
    expect_hdr("{}", 0, ATTN_OK, NULL);
    expect_hdr("{}      ", 0, ATTN_OK, NULL);
    expect_hdr("{ \"__metadata__\" : null }", 0, ATTN_OK, NULL);
    expect_hdr("{" T("s", "F64", "[]", 0, 8) "}", 8, ATTN_OK, NULL);
    expect_hdr("{" T("z", "F32", "[0]", 0, 0) "," T("y", "F32", "[0,5]", 0, 0) "," T("a", "U8", "[2]", 0, 2) "}", 2,
               ATTN_OK, NULL);
    expect_hdr("{" T("z", "F32", "[0, 18446744073709551615]", 0, 0) "}", 0, ATTN_ERR_ST_SIZE_OVERFLOW, "int64");
    expect_hdr("{" T("z", "F32", "[0, 9223372036854775807, 9223372036854775807]", 0, 0) "}", 0, ATTN_OK, NULL);
    expect_hdr("{\"a\":{\"shape\":[1],\"extra\":[1,{}],\"data_offsets\":[0,1],\"dtype\":\"I8\"}}", 1, ATTN_OK, NULL);
    expect_hdr("{" T("a", "U8", "[-0]", 0, 0) "}", 0, ATTN_OK, NULL);

    /* long names are cut in messages */
    expect_hdr("{\""
               "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
               "\":{\"dtype\":\"F32\",\"shape\":[3, 4],\"data_offsets\":[0,40]}}",
               40, ATTN_ERR_ST_TENSOR_INVALID_INFO, "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefgh...'");
    /* header length and start */
    for (size_t n = 0; n < 8; n++) {
        unsigned char z[8] = {0};
        expect_buf("short file", z, n, ATTN_ERR_ST_HEADER_TOO_SMALL, "shorter than");
    }
    expect_buf("NULL, 0", NULL, 0, ATTN_ERR_ST_HEADER_TOO_SMALL, NULL);
    b = mkfile_n(ATTN_SAFETENSORS_MAX_HEADER + 1ull, "{}", 2, 0, &len);
    expect_buf("header too large", b, len, ATTN_ERR_ST_HEADER_TOO_LARGE, "100000001");
    put_le(b, UINT64_MAX, 8);
    expect_buf("header length 2^64-1", b, len, ATTN_ERR_ST_HEADER_TOO_LARGE, NULL);
    put_le(b, ATTN_SAFETENSORS_MAX_HEADER, 8);
    expect_buf("header at the limit, truncated", b, len, ATTN_ERR_ST_HEADER_TRUNCATED, "100000000");
    put_le(b, 3, 8);
    expect_buf("header one past the end", b, len, ATTN_ERR_ST_HEADER_TRUNCATED, "only 2 bytes");
    free(b);
    expect_hdr(" {}     ", 0, ATTN_ERR_ST_INVALID_HEADER_START, NULL);
    expect_hdr("[]      ", 0, ATTN_ERR_ST_INVALID_HEADER_START, NULL);
    expect_hdr("", 0, ATTN_ERR_ST_INVALID_HEADER_START, "empty");
    expect_hdr("\xef\xbb\xbf{}", 0, ATTN_ERR_ST_INVALID_HEADER_START, NULL);
    /* UTF-8 and JSON */
    expect_hdr("{\"a\xff\":{}}", 0, ATTN_ERR_ST_INVALID_UTF8, "byte 3");
    expect_hdr("{\"\xed\xa0\x80\":1}", 0, ATTN_ERR_ST_INVALID_UTF8, NULL);
    expect_hdr("{\xc3", 0, ATTN_ERR_ST_INVALID_UTF8, NULL);
    expect_hdr("{", 0, ATTN_ERR_ST_INVALID_JSON, NULL);
    expect_hdr("{}x", 0, ATTN_ERR_ST_INVALID_JSON, "trailing");
    expect_hdr("{}\n\n", 0, ATTN_OK, NULL);
    b = mkfile_n(5, "{} \0 ", 5, 0, &len);
    expect_buf("NUL padding", b, len, ATTN_ERR_ST_INVALID_JSON, "trailing");
    free(b);
    expect_hdr("{" T("a", "F32", "[1]", 0, 4) ",}", 4, ATTN_ERR_ST_INVALID_JSON, "trailing comma");
    expect_hdr("{\"a\":[]}", 0, ATTN_ERR_ST_INVALID_JSON, "not an object");
    expect_hdr("{\"a\":1}", 0, ATTN_ERR_ST_INVALID_JSON, "not an object");
    expect_hdr("{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ATTN_ERR_ST_INVALID_JSON, "dtype");
    expect_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4, ATTN_ERR_ST_INVALID_JSON,
               "shape");
    expect_hdr("{" T("a", "F32", "[-1]", 0, 4) "}", 4, ATTN_ERR_ST_INVALID_JSON, "shape[0] is -1");
    expect_hdr("{" T("a", "F32", "[1.0]", 0, 4) "}", 4, ATTN_ERR_ST_INVALID_JSON, "shape[0] is 1.0");
    expect_hdr("{" T("a", "F32", "[1e0]", 0, 4) "}", 4, ATTN_ERR_ST_INVALID_JSON, NULL);
    expect_hdr("{" T("a", "F32", "[null]", 0, 4) "}", 4, ATTN_ERR_ST_INVALID_JSON, "a null");
    expect_hdr("{" T("a", "F32", "[18446744073709551616]", 0, 4) "}", 4, ATTN_ERR_ST_INVALID_JSON, NULL);
    expect_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, ATTN_ERR_ST_INVALID_JSON, "two");
    expect_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, ATTN_ERR_ST_INVALID_JSON,
               "two");
    expect_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"0\":4}}}", 4, ATTN_ERR_ST_INVALID_JSON,
               NULL);
    expect_hdr("{" T("a", "F32", "[1]", 0, -4) "}", 4, ATTN_ERR_ST_INVALID_JSON, "data_offsets[1] is -4");
    expect_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4, ATTN_ERR_ST_INVALID_JSON,
               "a string");
    expect_hdr("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ATTN_ERR_ST_INVALID_JSON,
               "NUL");
    expect_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}, \"x\":\"\\ud800\"}", 4,
               ATTN_ERR_ST_INVALID_JSON, "surrogate");
    /* dtype */
    expect_hdr("{" T("a", "F128", "[1]", 0, 16) "}", 16, ATTN_ERR_ST_UNKNOWN_DTYPE, "'F128'");
    expect_hdr("{" T("a", "f32", "[1]", 0, 4) "}", 4, ATTN_ERR_ST_UNKNOWN_DTYPE, "'f32'");
    expect_hdr("{" T("a", "", "[1]", 0, 4) "}", 4, ATTN_ERR_ST_UNKNOWN_DTYPE, NULL);
    /* duplicates */
    expect_hdr("{" T("a", "F32", "[1]", 0, 4) "," T("a", "F32", "[1]", 4, 8) "}", 8, ATTN_ERR_ST_DUPLICATE_NAME,
               "'a' appears twice");
    expect_hdr("{\"__metadata__\":{},\"__metadata__\":{}}", 0, ATTN_ERR_ST_DUPLICATE_NAME, "__metadata__");
    expect_hdr("{\"__metadata__\":null,\"__metadata__\":{}}", 0, ATTN_ERR_ST_DUPLICATE_NAME, "__metadata__");
    /* missing fields */
    expect_hdr("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ATTN_ERR_ST_MISSING_FIELD, "\"dtype\"");
    expect_hdr("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, ATTN_ERR_ST_MISSING_FIELD, "\"shape\"");
    expect_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, ATTN_ERR_ST_MISSING_FIELD, "\"data_offsets\"");
    expect_hdr("{\"a\":{}}", 0, ATTN_ERR_ST_MISSING_FIELD, NULL);
    /* rank above 8 */
    expect_hdr("{" T("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, ATTN_ERR_UNSUPPORTED, "rank 9");
    expect_hdr("{" T("a", "F32", "[1,1,1,1,1,1,1,1]", 0, 4) "}", 4, ATTN_OK, NULL);
    /* metadata */
    expect_hdr("{\"__metadata__\":[]}", 0, ATTN_ERR_ST_INVALID_METADATA, "not an object");
    expect_hdr("{\"__metadata__\":\"x\"}", 0, ATTN_ERR_ST_INVALID_METADATA, NULL);
    expect_hdr("{\"__metadata__\":{\"k\":1}}", 0, ATTN_ERR_ST_INVALID_METADATA, "'k' is 1");
    expect_hdr("{\"__metadata__\":{\"k\":{}}}", 0, ATTN_ERR_ST_INVALID_METADATA, NULL);
    expect_hdr("{\"__metadata__\":{\"k\":null}}", 0, ATTN_ERR_ST_INVALID_METADATA, NULL);
    expect_hdr("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, ATTN_ERR_ST_INVALID_METADATA, "NUL");
    expect_hdr("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, ATTN_ERR_ST_INVALID_METADATA, "twice");
    /* offsets */
    expect_hdr("{" T("a", "F32", "[1]", 4, 8) "}", 8, ATTN_ERR_ST_INVALID_OFFSET, "must begin at 0");
    expect_hdr("{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8, 12) "}", 12, ATTN_ERR_ST_INVALID_OFFSET,
               "previous tensor ends at 4");
    expect_hdr("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[1]", 4, 8) "}", 8, ATTN_ERR_ST_INVALID_OFFSET,
               NULL); /* overlap */
    expect_hdr("{" T("a", "F32", "[1]", 8, 4) "}", 8, ATTN_ERR_ST_INVALID_OFFSET, "end before");
    expect_hdr("{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 0, 4) "}", 8, ATTN_ERR_ST_INVALID_OFFSET, NULL);
    /* sizes */
    expect_hdr("{" T("w", "F32", "[3, 4]", 0, 40) "}", 40, ATTN_ERR_ST_TENSOR_INVALID_INFO,
               "tensor 'w': shape [3, 4] x F32 = 48 bytes but data_offsets give 40");
    expect_hdr("{" T("w", "F64", "[]", 0, 4) "}", 4, ATTN_ERR_ST_TENSOR_INVALID_INFO, "= 8 bytes");
    expect_hdr("{" T("w", "F32", "[0]", 0, 4) "}", 4, ATTN_ERR_ST_TENSOR_INVALID_INFO, NULL);
    expect_hdr("{" T("w", "F32", "[4294967296, 4294967296]", 0, 0) "}", 0, ATTN_ERR_ST_SIZE_OVERFLOW, "overflows");
    expect_hdr("{" T("w", "F32", "[4611686018427387904]", 0, 0) "}", 0, ATTN_ERR_ST_SIZE_OVERFLOW, NULL); /* 2^62 x 4 */
    expect_hdr("{" T("w", "F32", "[4294967296, 4294967296, 0]", 0, 0) "}", 0, ATTN_ERR_ST_SIZE_OVERFLOW, NULL);
    expect_hdr("{" T("w", "F32", "[9223372036854775808]", 0, 0) "}", 0, ATTN_ERR_ST_SIZE_OVERFLOW, "int64");
    /* bounds */
    expect_hdr("{" T("a", "F32", "[2]", 0, 8) "}", 4, ATTN_ERR_ST_OFFSET_OUT_OF_BOUNDS, "data buffer of 4 bytes");
    expect_hdr("{" T("a", "U8", "[9223372036854775807]", 0, 9223372036854775807) "}", 4,
               ATTN_ERR_ST_OFFSET_OUT_OF_BOUNDS, NULL);
    expect_hdr("{" T("a", "F32", "[1]", 0, 4) "}", 8, ATTN_ERR_ST_INCOMPLETE_BUFFER, "cover 4 bytes");
    expect_hdr("{}", 1, ATTN_ERR_ST_INCOMPLETE_BUFFER, "has 1 bytes");
    /* arguments */
    attn_safetensors *st = NULL;
    CHECK_STATUS(attn_safetensors_open_memory(NULL, 8, &st), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_open_memory("12345678", 8, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_open_file(NULL, &st), ATTN_ERR_INVALID_ARGUMENT);

    /* files: absent, a directory, empty, too small, a bad file (the path is in the message) */
    char path[512];
    snprintf(path, sizeof path, "%s/absent.safetensors", dir);
    CHECK_STATUS(attn_safetensors_open_file(path, &st), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), path) && strstr(attn_last_error(), strerror(ENOENT)), "message: %s",
          attn_last_error());
    CHECK_STATUS(attn_safetensors_open_file(dir, &st), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "not a regular file"), "directory: %s", attn_last_error());
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
    CHECK_STATUS(attn_safetensors_open_file(path, &st), ATTN_ERR_ST_HEADER_TOO_SMALL);
    CHECK(strstr(attn_last_error(), path) != NULL, "empty file: %s", attn_last_error());
    f = fopen(path, "wb");
    b = mkfile("{" T("w", "F32", "[3, 4]", 0, 40) "}", 40, &len);
    if (f) {
        fwrite(b, 1, len, f);
        fclose(f);
    }
    free(b);
    CHECK_STATUS(attn_safetensors_open_file(path, &st), ATTN_ERR_ST_TENSOR_INVALID_INFO);
    char want[600];
    snprintf(want, sizeof want, "safetensors: %s: tensor 'w': shape [3, 4] x F32 = 48 bytes but data_offsets give 40",
             path);
    CHECK(!strcmp(attn_last_error(), want), "file message: '%s'", attn_last_error());
    unlink(path);
    if (getuid() != 0) { /* root reads anything */
        f = fopen(path, "wb");
        if (f) fclose(f);
        chmod(path, 0);
        CHECK_STATUS(attn_safetensors_open_file(path, &st), ATTN_ERR_IO);
        unlink(path);
    }

    /* query arguments */
    float x;
    b = mkfile("{" T("a", "F32", "[1]", 0, 4) "}", 4, &len);
    CHECK_OK(attn_safetensors_open_memory(b, len, &st));
    CHECK_STATUS(attn_safetensors_read_f32(st, "missing", &x, 1), ATTN_ERR_NOT_FOUND);
    CHECK_STATUS(attn_safetensors_read_f32(NULL, "a", &x, 1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_read_f32(st, NULL, &x, 1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_read_f32(st, "a", NULL, 1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_read_f32(st, "a", &x, 0), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_safetensors_read_f32_shape(st, "a", &x, 1, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_read_f32_shape(st, "a", &x, 0, NULL), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_safetensors_read_f32_shape(st, "a", &x, 1, (int64_t[]){2}), ATTN_ERR_SHAPE);
    CHECK_STATUS(attn_safetensors_metadata_get(NULL, 0, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_safetensors_count(NULL) == 0 && attn_safetensors_get(NULL, 0) == NULL &&
              attn_safetensors_find(NULL, "a") == NULL && attn_safetensors_find(st, NULL) == NULL &&
              attn_safetensors_metadata_count(NULL) == 0 && attn_safetensors_metadata_find(NULL, "a") == NULL,
          "NULL-safe queries");
    attn_safetensors_close(st);
    attn_safetensors_close(NULL);
    free(b);
    CHECK(!strcmp(attn_dtype_name(ATTN_DTYPE_F8_E4M3), "F8_E4M3") && attn_dtype_size(ATTN_DTYPE_BF16) == 2 &&
              attn_dtype_size(ATTN_DTYPE_COUNT) == 0 && !strcmp(attn_dtype_name(ATTN_DTYPE_COUNT), "unknown"),
          "dtype names and sizes");
}

static void test_writer_errors(const char *dir) {
    attn_safetensors_writer *w = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    float d[4] = {1, 2, 3, 4};
    int64_t s1[1] = {4}, neg[2] = {2, -1}, big[2] = {INT64_MAX, INT64_MAX}, big2[2] = {INT64_MAX / 2, 2};
    CHECK_OK(attn_safetensors_writer_add(w, "a", ATTN_DTYPE_F32, 1, s1, d));
    CHECK_STATUS(attn_safetensors_writer_add(w, "a", ATTN_DTYPE_F32, 1, s1, d), ATTN_ERR_ST_DUPLICATE_NAME);
    CHECK_STATUS(attn_safetensors_writer_add(w, "b", ATTN_DTYPE_COUNT, 1, s1, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(w, "b", (attn_dtype)-1, 1, s1, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(w, "b", ATTN_DTYPE_F32, 9, (int64_t[9]){1, 1, 1, 1, 1, 1, 1, 1, 4}, d),
                 ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(w, "b", ATTN_DTYPE_F32, -1, s1, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(w, "b", ATTN_DTYPE_F32, 2, neg, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(w, "b", ATTN_DTYPE_F32, 2, big, d), ATTN_ERR_ST_SIZE_OVERFLOW);
    CHECK_STATUS(attn_safetensors_writer_add(w, "b", ATTN_DTYPE_F32, 2, big2, d), ATTN_ERR_ST_SIZE_OVERFLOW);
    CHECK_STATUS(attn_safetensors_writer_add(w, "b", ATTN_DTYPE_F32, 1, NULL, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(w, "b", ATTN_DTYPE_F32, 1, s1, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(w, NULL, ATTN_DTYPE_F32, 1, s1, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(NULL, "b", ATTN_DTYPE_F32, 1, s1, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(w, "__metadata__", ATTN_DTYPE_F32, 1, s1, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add(w, "bad\xff", ATTN_DTYPE_F32, 1, s1, d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_safetensors_writer_add(w, "zero", ATTN_DTYPE_F32, 2, (int64_t[]){0, INT64_MAX}, NULL));
    CHECK_OK(attn_safetensors_writer_add_metadata(w, "k", "v"));
    CHECK_STATUS(attn_safetensors_writer_add_metadata(w, "k", "w"), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add_metadata(w, "k2", "\xc3"), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add_metadata(w, NULL, "v"), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_add_metadata(w, "k3", NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_create(NULL), ATTN_ERR_INVALID_ARGUMENT);
    void *buf = NULL;
    size_t len = 0;
    CHECK_STATUS(attn_safetensors_writer_write_memory(w, NULL, &len), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_write_file(w, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_safetensors_writer_write_file(w, ""), ATTN_ERR_INVALID_ARGUMENT);
    char path[512];
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", dir);
    CHECK_STATUS(attn_safetensors_writer_write_file(w, path), ATTN_ERR_IO);
    /* the failed adds left the writer usable: exactly a, zero and one metadata entry */
    CHECK_OK(attn_safetensors_writer_write_memory(w, &buf, &len));
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_memory(buf, len, &st));
    CHECK(st && attn_safetensors_count(st) == 2 && attn_safetensors_metadata_count(st) == 1, "writer after errors");
    float out[4] = {0};
    CHECK_OK(attn_safetensors_read_f32(st, "a", out, 4));
    CHECK(out[0] == 1 && out[3] == 4, "values");
    const attn_safetensors_tensor *z = attn_safetensors_find(st, "zero");
    CHECK(z && z->nbytes == 0 && z->shape[1] == INT64_MAX, "zero-size tensor with a huge dimension");
    CHECK_OK(attn_safetensors_read_f32(st, "zero", NULL, 0));
    attn_safetensors_close(st);
    free(buf);
    /* the total data size overflowing, for the writer and for write_memory (never written) */
    attn_safetensors_writer *w3 = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w3));
    int64_t huge = INT64_MAX;
    CHECK_OK(attn_safetensors_writer_add(w3, "h1", ATTN_DTYPE_U8, 1, &huge, d));
    CHECK_OK(attn_safetensors_writer_add(w3, "h2", ATTN_DTYPE_U8, 1, &huge, d));
    CHECK_STATUS(attn_safetensors_writer_add(w3, "h3", ATTN_DTYPE_U8, 1, (int64_t[]){2}, d), ATTN_ERR_OVERFLOW);
    CHECK_STATUS(attn_safetensors_writer_write_memory(w3, &buf, &len), ATTN_ERR_OVERFLOW);
    CHECK(buf == NULL && len == 0, "nothing returned on failure");
    attn_safetensors_writer_free(w3);
    /* exact bytes for a small file, as the reference writes it (no __metadata__ when empty) */
    attn_safetensors_writer *w2 = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w2));
    uint16_t h[2] = {0x3C00, 0xC000};
    CHECK_OK(attn_safetensors_writer_add(w2, "x", ATTN_DTYPE_F16, 1, (int64_t[]){2}, h));
    CHECK_OK(attn_safetensors_writer_write_memory(w2, &buf, &len));
    const char want[] = "{\"x\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
    size_t wl = sizeof want - 1, padded = (wl + 7) / 8 * 8;
    unsigned char *ub = buf;
    CHECK(len == 8 + padded + 4 && get_le64(ub) == padded && memcmp(ub + 8, want, wl) == 0 && ub[8 + padded] == 0x00 &&
              ub[8 + padded + 1] == 0x3C,
          "exact bytes");
    free(buf);
    attn_safetensors_writer_free(w2);
    attn_safetensors_writer_free(w);
    attn_safetensors_writer_free(NULL);
}

/* Many tensors: the writer's duplicate check and the reader's lookups stay fast. */
static void test_many(void) {
    const size_t n = 50000;
    double t0 = now_s();
    attn_safetensors_writer *w = NULL;
    CHECK_OK(attn_safetensors_writer_create(&w));
    unsigned char byte = 1;
    int64_t one = 1;
    int fails = 0;
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer.%zu.w", i);
        if (attn_safetensors_writer_add(w, name, ATTN_DTYPE_U8, 1, &one, &byte) != ATTN_OK) fails++;
    }
    CHECK(fails == 0, "%d adds failed", fails);
    CHECK_STATUS(attn_safetensors_writer_add(w, "layer.777.w", ATTN_DTYPE_U8, 1, &one, &byte),
                 ATTN_ERR_ST_DUPLICATE_NAME);
    void *buf = NULL;
    size_t len = 0;
    CHECK_OK(attn_safetensors_writer_write_memory(w, &buf, &len));
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_memory(buf, len, &st));
    int bad = 0;
    for (size_t i = 0; st && i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer.%zu.w", i);
        const attn_safetensors_tensor *t = attn_safetensors_find(st, name);
        if (!t || strcmp(t->name, name) || attn_safetensors_get(st, i) != t) bad++;
    }
    CHECK(bad == 0 && attn_safetensors_count(st) == n, "%d of %zu tensors wrong", bad, n);
    attn_safetensors_close(st);
    free(buf);
    attn_safetensors_writer_free(w);
    double dt = now_s() - t0;
    CHECK(dt < 5.0, "%zu tensors took %.2f s", n, dt);
    printf("many: %zu tensors written, read and found in %.3f s\n", n, dt);
}

/* ---- a file written by Python (tests/parity/gen_safetensors.py) ---------------------------- */

static float bf16_round(float f) { /* round to nearest even, as torch does (finite inputs) */
    uint32_t b = fbits(f);
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000u;
    float r;
    memcpy(&r, &b, sizeof r);
    return r;
}

static void test_python_fixture(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/st_mixed.safetensors", fixture_dir());
    attn_safetensors *st = NULL;
    CHECK_OK(attn_safetensors_open_file(path, &st));
    if (!st) return;
    const char *seed_s = attn_safetensors_metadata_find(st, "seed");
    CHECK(seed_s != NULL, "seed in metadata");
    long long seed = seed_s ? atoll(seed_s) : 0;
    CHECK(!strcmp(attn_safetensors_metadata_find(st, "format"), "pt"), "format");
    const char *note = attn_safetensors_metadata_find(st, "note");
    CHECK(note && !strcmp(note, "unicode \xc3\xa9\xe2\x9c\x93 and \"quotes\""), "note (\\u escapes decoded)");
    CHECK(attn_safetensors_count(st) == 13, "13 tensors, got %zu", attn_safetensors_count(st));
    static const struct {
        const char *name;
        attn_dtype dt;
        int rank;
        int64_t shape[3];
    } want[] = {
        {"f32.matrix", ATTN_DTYPE_F32, 2, {3, 5}},     {"f64.vector", ATTN_DTYPE_F64, 1, {7}},
        {"f16.tensor3", ATTN_DTYPE_F16, 3, {2, 3, 4}}, {"f16.special", ATTN_DTYPE_F16, 1, {8}},
        {"bf16.weight", ATTN_DTYPE_BF16, 2, {4, 4}},   {"i64.ids", ATTN_DTYPE_I64, 1, {6}},
        {"i32.counts", ATTN_DTYPE_I32, 2, {2, 2}},     {"i16.mid", ATTN_DTYPE_I16, 1, {3}},
        {"i8.small", ATTN_DTYPE_I8, 1, {4}},           {"u8.bytes", ATTN_DTYPE_U8, 1, {10}},
        {"bool.mask", ATTN_DTYPE_BOOL, 1, {5}},        {"one", ATTN_DTYPE_F32, 1, {1}},
        {"empty", ATTN_DTYPE_F32, 2, {0, 3}},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(st, k); /* Python wrote them in order */
        int ok = t && !strcmp(t->name, want[k].name) && t->dtype == want[k].dt && t->rank == want[k].rank;
        for (int d = 0; ok && d < t->rank; d++) ok = t->shape[d] == want[k].shape[d];
        CHECK(ok, "python tensor %zu is %s", k, want[k].name);
        if (!ok) continue;
        size_t n = numel_of(t);
        float *v = xmalloc((n ? n : 1) * sizeof(float));
        CHECK_OK(attn_safetensors_read_f32_shape(st, want[k].name, v, want[k].rank, want[k].shape));
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            long long ii = (long long)i;
            float e = 0;
            switch (k) {
            case 0: e = (float)(((7 * ii + seed) % 23 - 11) / 4.0); break;
            case 1: e = (float)(((double)ii - 3) / 10.0 + (double)(seed % 7)); break;
            case 2: e = (float)(((5 * ii + seed) % 19 - 9) / 8.0); break;
            case 3: {
                const float sp[8] = {INFINITY, -INFINITY, NAN, -0.0f, 65504.0f, 0x1p-24f, 0x1p-14f, 1023 * 0x1p-24f};
                e = sp[i];
                break;
            }
            case 4: e = bf16_round((float)((double)ii / 3 - 2)); break;
            case 5: e = (float)((ii - 2) * 1000000007LL + seed); break;
            case 6: e = (float)(-3 * ii + seed % 11); break;
            case 7: e = (float)(-20000 * ii + 10000); break;
            case 8: e = (float)(50 * ii - 100); break;
            case 9: e = (float)((37 * ii + seed) % 256); break;
            case 10: e = (ii + seed) % 3 == 0 ? 1.0f : 0.0f; break;
            case 11: e = (float)((double)seed + 0.5); break;
            default: break;
            }
            if (isnan(e) ? !isnan(v[i]) : fbits(e) != fbits(v[i])) {
                if (bad++ < 3) fprintf(stderr, "%s[%zu] = %.9g, want %.9g\n", want[k].name, i, (double)v[i], (double)e);
            }
        }
        CHECK(bad == 0, "python %s: %d values differ", want[k].name, bad);
        if (k == 5) { /* int64 exactly, not only through float */
            const unsigned char *p = t->data;
            int badi = 0;
            for (size_t i = 0; i < n; i++)
                if ((int64_t)get_le64(p + 8 * i) != ((long long)i - 2) * 1000000007LL + seed) badi++;
            CHECK(badi == 0, "i64 raw values");
        }
        free(v);
    }
    attn_safetensors_close(st);
}

/* ---- mutation fuzzing -------------------------------------------------------------------- */

static const char *const fuzz_tokens[] = {
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    " ",
    "\"F32\"",
    "\"BF16\"",
    "\"F8_E4M3\"",
    "\"BOOL\"",
    "\"X\"",
    "0",
    "1",
    "-1",
    "-0",
    "1.5",
    "1e999",
    "2e0",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "4294967296",
    "4611686018427387904",
    "null",
    "true",
    "\"__metadata__\"",
    "\"dtype\"",
    "\"shape\"",
    "\"data_offsets\"",
    "[]",
    "{}",
    "[0,0]",
    "\\u0000",
    "\\ud800",
    "\\udc00",
    "\\ud83d\\ude00",
    "\xff",
    "\xc3\xa9",
    "\xed\xa0\x80",
    "\"a\"",
    "[1,1,1,1,1,1,1,1,1]",
    ",\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}",
};
static const unsigned char fuzz_bytes[] = {0,   0xFF, 0x7F, 0x80, '{',  '}', '[', ']', '"',  ',',
                                           ':', '0',  '9',  '-',  '\\', ' ', 'e', '.', 0xC3, 0xED};

typedef struct fuzz_stats {
    long iters, accepted, bad;
    long by_status[64];
} fuzz_stats;

/* Every invariant an accepted file must satisfy. Returns the number of violations. */
static int check_accepted(const attn_safetensors *st, const unsigned char *base, size_t len) {
    int bad = 0;
    uint64_t hl = get_le64(base);
    const unsigned char *expect = base + 8 + hl;
    size_t n = attn_safetensors_count(st);
    for (size_t i = 0; i < n; i++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(st, i);
        const unsigned char *d = t->data;
        size_t numel = numel_of(t);
        if (d != expect || d < base + 8 || t->nbytes > (size_t)(base + len - d)) bad++;
        if (t->nbytes != numel * attn_dtype_size(t->dtype) || t->rank < 0 || t->rank > 8 ||
            (unsigned)t->dtype >= ATTN_DTYPE_COUNT)
            bad++;
        if (attn_safetensors_find(st, t->name) != t || strlen(t->name) > hl) bad++;
        float *v = xmalloc((numel ? numel : 1) * sizeof(float));
        if (attn_safetensors_read_f32(st, t->name, v, numel) != ATTN_OK) bad++;
        free(v);
        expect = d + t->nbytes;
    }
    if (expect != base + len) bad++;
    for (size_t i = 0; i < attn_safetensors_metadata_count(st); i++) {
        const char *k = NULL, *v = NULL;
        if (attn_safetensors_metadata_get(st, i, &k, &v) != ATTN_OK || attn_safetensors_metadata_find(st, k) != v)
            bad++;
    }
    return bad;
}

static void mutate(test_rng *r, unsigned char *b, size_t *len, size_t cap) {
    size_t n = *len;
    uint64_t hl = n >= 8 ? get_le64(b) : 0;
    size_t hend = n >= 8 && hl <= n - 8 ? 8 + (size_t)hl : n; /* end of the header region */
    /* weights: mostly header-content edits that get past the length checks */
    static const unsigned char pick[20] = {0, 0, 0, 1, 1, 1, 1, 2, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 7, 8};
    switch (pick[rng_next(r) % 20]) {
    case 0: /* bit flip, mostly after the length prefix */
        if (n > 8 && rng_next(r) % 8)
            b[8 + rng_next(r) % (n - 8)] ^= (unsigned char)(1u << (rng_next(r) % 8));
        else if (n)
            b[rng_next(r) % n] ^= (unsigned char)(1u << (rng_next(r) % 8));
        break;
    case 1: /* interesting byte, mostly in the header */
        if (n) {
            size_t at = hend > 8 && rng_next(r) % 4 ? 8 + rng_next(r) % (hend - 8) : rng_next(r) % n;
            b[at] = fuzz_bytes[rng_next(r) % sizeof fuzz_bytes];
        }
        break;
    case 2: /* truncation */ *len = (size_t)(rng_next(r) % (n + 1)); break;
    case 3: { /* header length edit */
        if (n < 8) break;
        const uint64_t choices[] = {hl - 1,
                                    hl + 1,
                                    hl - 8,
                                    hl + 8,
                                    0,
                                    n - 8,
                                    n,
                                    UINT64_MAX,
                                    ATTN_SAFETENSORS_MAX_HEADER,
                                    ATTN_SAFETENSORS_MAX_HEADER + 1ull,
                                    rng_next(r),
                                    rng_next(r) % (n + 1),
                                    1ull << 63};
        put_le(b, choices[rng_next(r) % (sizeof choices / sizeof choices[0])], 8);
        break;
    }
    case 4:   /* token overwrite in the header */
    case 5: { /* token insertion in the header, header length kept consistent */
        if (hend <= 9) break;
        const char *tok = fuzz_tokens[rng_next(r) % (sizeof fuzz_tokens / sizeof fuzz_tokens[0])];
        size_t tl = strlen(tok), at = 9 + rng_next(r) % (hend - 9);
        if (rng_next(r) % 2 == 0) {
            if (at + tl > n) tl = n - at;
            memcpy(b + at, tok, tl);
        } else if (n + tl <= cap) {
            memmove(b + at + tl, b + at, n - at);
            memcpy(b + at, tok, tl);
            *len = n + tl;
            if (n >= 8 && hl <= n - 8) put_le(b, hl + tl, 8);
        }
        break;
    }
    case 6: { /* change a digit in the header */
        if (hend <= 8) break;
        size_t start = 8 + rng_next(r) % (hend - 8);
        for (size_t k = 0; k < hend - 8; k++) {
            size_t at = 8 + (start - 8 + k) % (hend - 8);
            if (b[at] >= '0' && b[at] <= '9') {
                unsigned v = (unsigned)rng_next(r) % 3;
                b[at] = v == 0   ? (unsigned char)('0' + rng_next(r) % 10)
                        : v == 1 ? (b[at] == '9' ? '0' : b[at] + 1)
                                 : (b[at] == '0' ? '9' : b[at] - 1);
                break;
            }
        }
        break;
    }
    case 7: { /* delete a span of the header, header length kept consistent */
        if (hend <= 9) break;
        size_t at = 9 + rng_next(r) % (hend - 9), k = 1 + rng_next(r) % 8;
        if (at + k > hend) k = hend - at;
        memmove(b + at, b + at + k, n - at - k);
        *len = n - k;
        put_le(b, hl - k, 8);
        break;
    }
    case 8: { /* grow or shrink the data buffer by a few bytes */
        size_t k = 1 + rng_next(r) % 16;
        if (rng_next(r) % 2) {
            if (n + k <= cap) {
                for (size_t i = 0; i < k; i++) b[n + i] = (unsigned char)rng_next(r);
                *len = n + k;
            }
        } else {
            *len = n > k ? n - k : 0;
        }
        break;
    }
    }
}

static void test_fuzz(void) {
    /* seeds: a mixed file with metadata, zero-size/scalar/rank-8 tensors, an empty file, the
     * Python fixture */
    unsigned char *seeds[4];
    size_t seed_len[4], ns = 0, maxlen = 0;
    {
        attn_safetensors_writer *w = NULL;
        attn_safetensors_writer_create(&w);
        static float f[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
        static uint16_t h[4] = {0x3C00, 0x7C00, 0x0001, 0xFE00};
        static int64_t ids[2] = {-1, 1LL << 40};
        static unsigned char m[3] = {1, 0, 2};
        attn_safetensors_writer_add(w, "w", ATTN_DTYPE_F32, 2, (int64_t[]){2, 3}, f);
        attn_safetensors_writer_add(w, "h", ATTN_DTYPE_F16, 1, (int64_t[]){4}, h);
        attn_safetensors_writer_add(w, "b", ATTN_DTYPE_BF16, 2, (int64_t[]){2, 2}, h);
        attn_safetensors_writer_add(w, "ids", ATTN_DTYPE_I64, 1, (int64_t[]){2}, ids);
        attn_safetensors_writer_add(w, "m", ATTN_DTYPE_BOOL, 1, (int64_t[]){3}, m);
        attn_safetensors_writer_add_metadata(w, "format", "pt");
        attn_safetensors_writer_add_metadata(w, "k\"", "v\\\n");
        void *buf;
        attn_safetensors_writer_write_memory(w, &buf, &seed_len[ns]);
        seeds[ns++] = buf;
        attn_safetensors_writer_free(w);
        attn_safetensors_writer_create(&w);
        attn_safetensors_writer_add(w, "s", ATTN_DTYPE_F64, 0, NULL, ids);
        attn_safetensors_writer_add(w, "z", ATTN_DTYPE_F32, 2, (int64_t[]){0, 3}, NULL);
        attn_safetensors_writer_add(w, "r8", ATTN_DTYPE_U8, 8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 3}, m);
        attn_safetensors_writer_add(w, "e4", ATTN_DTYPE_F8_E4M3, 1, (int64_t[]){3}, m);
        attn_safetensors_writer_write_memory(w, &buf, &seed_len[ns]);
        seeds[ns++] = buf;
        attn_safetensors_writer_free(w);
        attn_safetensors_writer_create(&w);
        attn_safetensors_writer_write_memory(w, &buf, &seed_len[ns]);
        seeds[ns++] = buf;
        attn_safetensors_writer_free(w);
        char path[1024];
        snprintf(path, sizeof path, "%s/st_mixed.safetensors", fixture_dir());
        FILE *fp = fopen(path, "rb");
        if (fp) {
            unsigned char *fb = xmalloc(1 << 16);
            seed_len[ns] = fread(fb, 1, 1 << 16, fp);
            seeds[ns++] = fb;
            fclose(fp);
        }
    }
    for (size_t i = 0; i < ns; i++) {
        if (seed_len[i] > maxlen) maxlen = seed_len[i];
        expect_buf("fuzz seed", seeds[i], seed_len[i], ATTN_OK, NULL);
    }
    long iters = 100000;
    const char *e = getenv("ATTN_ST_FUZZ_ITERS");
    if (e && *e) iters = atol(e);
    size_t cap = maxlen + 512;
    unsigned char *work = xmalloc(cap + 1);
    fuzz_stats fs;
    memset(&fs, 0, sizeof fs);
    test_rng r = rng_seeded(0xF0221);
    double t0 = now_s();
    for (long it = 0; it < iters; it++) {
        size_t si = (size_t)(rng_next(&r) % ns), len = seed_len[si];
        int odd = (int)(rng_next(&r) % 2);
        unsigned char *b = work + odd; /* half the time at an odd address */
        memcpy(b, seeds[si], len);
        int k = 1 + (int)(rng_next(&r) % 4);
        for (int m = 0; m < k; m++) mutate(&r, b, &len, cap);
        attn_safetensors *st = NULL;
        attn_clear_error();
        attn_status s = attn_safetensors_open_memory(b, len, &st);
        fs.iters++;
        fs.by_status[(unsigned)s < 64 ? (unsigned)s : 63]++;
        if (s == ATTN_OK) {
            fs.accepted++;
            int v = check_accepted(st, b, len);
            if (v) {
                fs.bad++;
                fprintf(stderr, "fuzz iteration %ld: accepted file violates %d invariants\n", it, v);
            }
            attn_safetensors_close(st);
        } else if (st != NULL || !attn_last_error()[0] || !strcmp(attn_status_str(s), "unknown status") ||
                   strncmp(attn_last_error(), "safetensors: ", 13)) {
            fs.bad++;
            fprintf(stderr, "fuzz iteration %ld: status %d with message '%s'\n", it, (int)s, attn_last_error());
        }
    }
    double dt = now_s() - t0;
    CHECK(fs.bad == 0, "fuzz: %ld bad outcomes", fs.bad);
    printf("fuzz: %ld iterations in %.2f s, %ld accepted; rejections:", fs.iters, dt, fs.accepted);
    for (int s = 1; s < 64; s++)
        if (fs.by_status[s]) printf(" %d:%ld", s, fs.by_status[s]);
    printf("\n");
    free(work);
    for (size_t i = 0; i < ns; i++) free(seeds[i]);
}

/* ---- truncation while reading ---------------------------------------------------------- */

static off_t cut_to;
static const char *cut_path;
static void cut_hook(int fd) { /* the reader's descriptor is read-only: truncate by name */
    (void)fd;
    if (truncate(cut_path, cut_to) != 0) perror("truncate");
}

/* The file has the structure written: one tensor "w" of n floats and the metadata. */
static int same_structure(const attn_safetensors *st, size_t n) {
    const attn_safetensors_tensor *t = attn_safetensors_find(st, "w");
    return t && attn_safetensors_count(st) == 1 && t->rank == 1 && t->shape[0] == (int64_t)n &&
           t->nbytes == n * sizeof(float) && attn_safetensors_metadata_find(st, "k") &&
           !strcmp(attn_safetensors_metadata_find(st, "k"), "v");
}

static void write_all(int fd, const unsigned char *b, size_t len) {
    for (size_t o = 0; o < len;) {
        ssize_t r = pwrite(fd, b + o, len - o, (off_t)o);
        if (r <= 0 && errno != EINTR) _exit(3);
        if (r > 0) o += (size_t)r;
    }
}

static void test_truncation(const char *dir) {
    test_rng r = rng_seeded(0x7a11);
    const size_t n = (size_t)1 << 20; /* 4 MB: a read of it takes several page-cache copies */
    float *w = xmalloc(n * sizeof(float));
    fill_normal(&r, w, n, 1.0);
    const int64_t shape[1] = {(int64_t)n};
    attn_safetensors_writer *wr = NULL;
    void *img = NULL;
    size_t len = 0;
    CHECK_OK(attn_safetensors_writer_create(&wr));
    CHECK_OK(attn_safetensors_writer_add(wr, "w", ATTN_DTYPE_F32, 1, shape, w));
    CHECK_OK(attn_safetensors_writer_add_metadata(wr, "k", "v"));
    CHECK_OK(attn_safetensors_writer_write_memory(wr, &img, &len));
    attn_safetensors_writer_free(wr);
    if (!img) exit(1);
    char path[512];
    snprintf(path, sizeof path, "%s/truncated.safetensors", dir);

    /* deterministic: cut after sizing, before reading (to half, into the header, to nothing) */
    const off_t cuts[3] = {(off_t)(len / 2), 20, 0};
    for (int c = 0; c < 3; c++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0, "create %s", path);
        if (fd < 0) break;
        write_all(fd, img, len);
        close(fd);
        cut_to = cuts[c];
        cut_path = path;
        attn_st_read_hook = cut_hook;
        attn_safetensors *st = NULL;
        attn_status s = attn_safetensors_open_file(path, &st);
        attn_st_read_hook = NULL;
        CHECK(s == ATTN_ERR_IO && st == NULL, "cut to %lld: status %d", (long long)cuts[c], (int)s);
        CHECK(strstr(attn_last_error(), "truncated while being read") && strstr(attn_last_error(), path),
              "cut to %lld: message: %s", (long long)cuts[c], attn_last_error());
        attn_safetensors_close(st);
    }

    /* concurrent: a child truncates the file to random lengths and restores it, over and over,
     * while this process opens it; every open is the original file or a clean error */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "create %s", path);
    if (fd < 0) return;
    write_all(fd, img, len);
    const uint64_t child_seed = rng_next(&r);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        test_rng cr = {child_seed};
        const struct timespec whole = {0, 300000}; /* the file stays whole a moment: some opens succeed */
        for (;;) {                                 /* until killed */
            if (ftruncate(fd, (off_t)(rng_next(&cr) % len)) != 0) _exit(2);
            write_all(fd, img, len);
            nanosleep(&whole, NULL);
        }
    }
    close(fd);
    int ok = 0, errors = 0, wrong = 0, torn = 0;
    const double t0 = now_s();
    while (pid > 0 && (now_s() - t0 < 2.0 || ok == 0 || errors == 0) && now_s() - t0 < 20.0) {
        attn_safetensors *st = NULL;
        attn_status s = attn_safetensors_open_file(path, &st);
        if (s == ATTN_OK) {
            ok++;
            wrong += !same_structure(st, n);
            /* read() is not atomic against a truncation: a page being cut can be copied out with
             * its tail already zeroed and the file restored before the next read, so a file
             * rewritten while it is read can come back with changed values (headers stay valid:
             * a zero byte is no valid JSON). Counted, not an error: only a signal or a bad
             * structure would be one. */
            torn += same_structure(st, n) && memcmp(attn_safetensors_find(st, "w")->data, w, n * sizeof(float));
        } else {
            errors++;
            wrong += st != NULL || attn_last_error()[0] == '\0';
        }
        attn_safetensors_close(st);
    }
    if (pid > 0) {
        int ws = 0;
        kill(pid, SIGKILL);
        waitpid(pid, &ws, 0);
        CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "truncating child ended early (status %d)", ws);
    }
    printf("truncation while reading: %d opens gave the file (%d with values torn by the rewrite), %d a clean "
           "error, %d neither\n",
           ok, torn, errors, wrong);
    CHECK(wrong == 0, "%d opens gave neither the file's structure nor a clean error", wrong);
    CHECK(ok > 0 && errors > 0, "the race was not exercised (%d ok, %d errors)", ok, errors);
    unlink(path);
    free(img);
    free(w);
}

/* The dtype table: a name and a size for every attn_dtype (its length is the enum's at compile
 * time; this finds a row left empty), "unknown" past it. */
static void test_dtype_table(void) {
    for (int d = 0; d < ATTN_DTYPE_COUNT; d++) {
        const char *name = attn_dtype_name((attn_dtype)d);
        CHECK(name && *name && strcmp(name, "unknown") && attn_dtype_size((attn_dtype)d) > 0, "dtype %d has no row", d);
    }
    CHECK(!strcmp(attn_dtype_name(ATTN_DTYPE_COUNT), "unknown"), "a name past the table");
}

/* The safetensors status codes (safetensors.h): their values, inside core.h's reserved range, and
 * a description each from attn_status_str. */
static void test_status_codes(void) {
    static const attn_status codes[] = {
        ATTN_ERR_ST_HEADER_TOO_SMALL,     ATTN_ERR_ST_HEADER_TOO_LARGE,  ATTN_ERR_ST_HEADER_TRUNCATED,
        ATTN_ERR_ST_INVALID_HEADER_START, ATTN_ERR_ST_INVALID_JSON,      ATTN_ERR_ST_INVALID_UTF8,
        ATTN_ERR_ST_UNKNOWN_DTYPE,        ATTN_ERR_ST_DUPLICATE_NAME,    ATTN_ERR_ST_INVALID_OFFSET,
        ATTN_ERR_ST_OFFSET_OUT_OF_BOUNDS, ATTN_ERR_ST_INCOMPLETE_BUFFER, ATTN_ERR_ST_TENSOR_INVALID_INFO,
        ATTN_ERR_ST_SIZE_OVERFLOW,        ATTN_ERR_ST_MISSING_FIELD,     ATTN_ERR_ST_INVALID_METADATA};
    for (int i = 0; i < (int)(sizeof codes / sizeof codes[0]); i++) {
        CHECK((int)codes[i] == 20 + i && codes[i] >= ATTN_STATUS_SAFETENSORS_FIRST &&
                  codes[i] <= ATTN_STATUS_SAFETENSORS_LAST,
              "safetensors code %d is %d", i, (int)codes[i]);
        CHECK(!strncmp(attn_status_str(codes[i]), "safetensors: ", 13), "code %d: '%s'", (int)codes[i],
              attn_status_str(codes[i]));
    }
    CHECK(!strcmp(attn_status_str(ATTN_STATUS_SAFETENSORS_LAST), "unknown status"), "39 is unassigned");
    CHECK(!strcmp(attn_status_str(ATTN_ERR_NUMERIC), "non-finite value"), "a core code");
}

int main(void) {
    test_dtype_table();
    test_status_codes();
    char dir[] = "/tmp/attn_test_st.XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    double t0 = now_s();
    test_roundtrip(dir);
    test_conversions();
    test_errors(dir);
    test_writer_errors(dir);
    test_many();
    test_python_fixture();
    test_fuzz();
    test_truncation(dir);
    rmdir(dir);
    printf("test_safetensors: %.2f s\n", now_s() - t0);
    return test_summary("test_safetensors");
}
