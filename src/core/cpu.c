/* Runtime CPU detection: the feature bits, once per process. Which ISA runs, and its kernels,
 * is the registry's business (kernels/registry.c). */
#include <stdatomic.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "internal.h"

static const char *const feature_names[] = {"sse4.2",   "avx",      "avx2",       "fma",      "avx512f", "avx512bw",
                                            "avx512dq", "avx512vl", "avx512bf16", "amx-tile", "amx-bf16"};
#define NFEATURES ((int)(sizeof feature_names / sizeof feature_names[0]))

static uint32_t detect_features(void) {
    uint32_t f = 0;
#if defined(__x86_64__) || defined(__i386__)
    /* libgcc's checks include the OS's XSAVE support for the wider registers */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) f |= ATTN_CPU_SSE42;
    if (__builtin_cpu_supports("avx")) f |= ATTN_CPU_AVX;
    if (__builtin_cpu_supports("avx2")) f |= ATTN_CPU_AVX2;
    if (__builtin_cpu_supports("fma")) f |= ATTN_CPU_FMA;
    if (__builtin_cpu_supports("avx512f")) f |= ATTN_CPU_AVX512F;
    if (__builtin_cpu_supports("avx512bw")) f |= ATTN_CPU_AVX512BW;
    if (__builtin_cpu_supports("avx512dq")) f |= ATTN_CPU_AVX512DQ;
    if (__builtin_cpu_supports("avx512vl")) f |= ATTN_CPU_AVX512VL;
    if (__builtin_cpu_supports("avx512bf16")) f |= ATTN_CPU_AVX512BF16;
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) { /* the tile state itself is granted later */
        if (d >> 24 & 1) f |= ATTN_CPU_AMX_TILE;
        if (d >> 22 & 1) f |= ATTN_CPU_AMX_BF16;
    }
#endif
    return f;
}

uint32_t attn_cpu_feature_bits(void) {
    static atomic_uint cache; /* the bits | 1u << 31 once detected */
    unsigned v = atomic_load_explicit(&cache, memory_order_relaxed);
    if (!(v >> 31)) {
        v = detect_features() | 1u << 31;
        atomic_store_explicit(&cache, v, memory_order_relaxed);
    }
    return v & ~(1u << 31);
}

const char *attn_cpu_features(void) {
    static char buf[160];
    char tmp[160] = "";
    const uint32_t f = attn_cpu_feature_bits();
    for (int i = 0; i < NFEATURES; i++) {
        if (!(f >> i & 1)) continue;
        if (tmp[0]) strcat(tmp, ",");
        strcat(tmp, feature_names[i]);
    }
    memcpy(buf, tmp, sizeof buf);
    return buf;
}
