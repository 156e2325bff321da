/* A GEMM peer: oneDNN's matmul primitive called directly (not through PyTorch), so that attn's
 * bf16 GEMM, which returns float C, meets oneDNN writing float C too (torch.matmul of bf16
 * tensors returns bf16, half the bytes). Built and run by bench/compare_gemm.py --onednn PREFIX
 * against a oneDNN the user installed there (PREFIX/include, PREFIX/lib); not part of attn's build.
 *
 *   onednn_matmul M N K THREADS f32|bf16
 *
 * C (M x N, row-major) = A (M x K) B (K x N), plain row-major A and B as attn bench gemm takes
 * them (B's reorder to oneDNN's blocked layout is inside the primitive, as attn packs B per call);
 * f32: f32 x f32 -> f32; bf16: bf16 x bf16 -> f32. The same method as compare_gemm.py's PyTorch
 * peer: a warmup of 50 ms, then 7 samples of at least 20 ms, their median. THREADS is set through
 * OMP_NUM_THREADS by the caller; a sequential build runs one. Prints one JSON line. */
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void check(dnnl_status_t s, const char *what) {
    if (s == dnnl_success) return;
    fprintf(stderr, "onednn_matmul: %s failed (dnnl_status_t %d)\n", what, (int)s);
    exit(1);
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* uniform in [-0.5, 0.5), as the PyTorch peer's (torch.rand - 0.5); bf16 by truncation is enough
 * for timing */
static void fill(void *p, int64_t count, int bf16, uint32_t seed) {
    for (int64_t i = 0; i < count; i++) {
        seed = seed * 1664525u + 1013904223u;
        const float x = (float)(seed >> 8) * (1.0f / 16777216.0f) - 0.5f;
        if (bf16) {
            uint32_t w;
            memcpy(&w, &x, 4);
            ((uint16_t *)p)[i] = (uint16_t)(w >> 16);
        } else {
            ((float *)p)[i] = x;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 6 || (strcmp(argv[5], "f32") && strcmp(argv[5], "bf16"))) {
        fprintf(stderr, "usage: onednn_matmul M N K THREADS f32|bf16\n");
        return 2;
    }
    const int64_t m = atoll(argv[1]), n = atoll(argv[2]), k = atoll(argv[3]);
    const int bf16 = !strcmp(argv[5], "bf16");
    if (m < 1 || n < 1 || k < 1) {
        fprintf(stderr, "onednn_matmul: M, N and K must be positive\n");
        return 2;
    }
    const dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    check(dnnl_engine_create(&engine, dnnl_cpu, 0), "dnnl_engine_create");
    check(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "dnnl_stream_create");
    dnnl_memory_desc_t da, db, dc;
    dnnl_dims_t sa = {m, k}, sb = {k, n}, sc = {m, n};
    check(dnnl_memory_desc_create_with_tag(&da, 2, sa, in, dnnl_ab), "A's descriptor");
    check(dnnl_memory_desc_create_with_tag(&db, 2, sb, in, dnnl_ab), "B's descriptor");
    check(dnnl_memory_desc_create_with_tag(&dc, 2, sc, dnnl_f32, dnnl_ab), "C's descriptor");
    dnnl_primitive_desc_t pd;
    check(dnnl_matmul_primitive_desc_create(&pd, engine, da, db, NULL, dc, NULL), "the matmul descriptor");
    const char *impl = "";
    check(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "the implementation's name");
    dnnl_primitive_t mm;
    check(dnnl_primitive_create(&mm, pd), "the matmul primitive");
    dnnl_memory_t ma, mb, mc;
    check(dnnl_memory_create(&ma, da, engine, DNNL_MEMORY_ALLOCATE), "A");
    check(dnnl_memory_create(&mb, db, engine, DNNL_MEMORY_ALLOCATE), "B");
    check(dnnl_memory_create(&mc, dc, engine, DNNL_MEMORY_ALLOCATE), "C");
    void *pa, *pb;
    check(dnnl_memory_get_data_handle(ma, &pa), "A's buffer");
    check(dnnl_memory_get_data_handle(mb, &pb), "B's buffer");
    fill(pa, m * k, bf16, 1);
    fill(pb, k * n, bf16, 2);
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
#define RUN()                                                                                                          \
    do {                                                                                                               \
        check(dnnl_primitive_execute(mm, stream, 3, args), "dnnl_primitive_execute");                                  \
        check(dnnl_stream_wait(stream), "dnnl_stream_wait");                                                           \
    } while (0)
    double t0 = now();
    while (now() - t0 < 0.05) RUN();
    t0 = now();
    RUN();
    const double once = now() - t0;
    const int iters = once >= 0.02 ? 1 : (int)(0.02 / (once > 1e-9 ? once : 1e-9)) + 1;
    double samples[7];
    for (int s = 0; s < 7; s++) {
        t0 = now();
        for (int i = 0; i < iters; i++) RUN();
        samples[s] = (now() - t0) / iters;
    }
    qsort(samples, 7, sizeof samples[0], cmp_double);
    const double ms = samples[3] * 1e3;
    const dnnl_version_t *v = dnnl_version();
    printf("{\"ms\": %.6f, \"gflops\": %.3f, \"onednn\": \"%d.%d.%d\", \"sequential\": %s, \"impl\": \"%s\"}\n", ms,
           2.0 * (double)m * (double)n * (double)k / ms * 1e-6, v->major, v->minor, v->patch,
           v->cpu_runtime == DNNL_RUNTIME_SEQ ? "true" : "false", impl);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    dnnl_primitive_destroy(mm);
    dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
    return 0;
}
