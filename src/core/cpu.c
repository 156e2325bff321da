/* Runtime CPU detection and ISA selection (the dispatch tables of each kernel family index by
 * attn_active_isa()). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int isa_forced = -1;
static int isa_env = -2; /* -2: not read yet, -1: none */

attn_isa attn_detected_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* libgcc's checks include the OS's XSAVE support for the wider registers */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("fma"))
        return ATTN_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ATTN_ISA_AVX2;
#endif
    return ATTN_ISA_REF;
}

const char *attn_isa_name(attn_isa isa) {
    switch (isa) {
    case ATTN_ISA_REF: return "ref";
    case ATTN_ISA_AVX2: return "avx2";
    case ATTN_ISA_AVX512: return "avx512";
    }
    return "unknown";
}

static int env_isa(void) {
    if (isa_env == -2) {
        const char *e = getenv("ATTN_ISA");
        isa_env = -1;
        if (e && !strcmp(e, "ref")) isa_env = ATTN_ISA_REF;
        else if (e && !strcmp(e, "avx2")) isa_env = ATTN_ISA_AVX2;
        else if (e && !strcmp(e, "avx512")) isa_env = ATTN_ISA_AVX512;
    }
    return isa_env;
}

attn_isa attn_active_isa(void) {
    attn_isa best = attn_detected_isa();
    int want = isa_forced >= 0 ? isa_forced : env_isa();
    if (want >= 0 && want <= (int)best) return (attn_isa)want;
    return best;
}

attn_status attn_force_isa(attn_isa isa) {
    if ((int)isa < 0 || isa > ATTN_ISA_AVX512)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_force_isa: isa %d unknown", (int)isa);
    if (isa > attn_detected_isa())
        return attn_error(ATTN_ERR_UNSUPPORTED, "attn_force_isa: this CPU cannot run %s (best: %s)",
                          attn_isa_name(isa), attn_isa_name(attn_detected_isa()));
    isa_forced = (int)isa;
    return ATTN_OK;
}

const char *attn_cpu_features(void) {
    static char buf[128];
    buf[0] = '\0';
#if defined(__x86_64__) || defined(__i386__)
    static const char *names[] = {"sse4.2",   "avx",      "avx2",     "fma",     "avx512f",
                                  "avx512bw", "avx512dq", "avx512vl", "avx512bf16"};
    __builtin_cpu_init();
    int found[9] = {
        __builtin_cpu_supports("sse4.2"),   __builtin_cpu_supports("avx"),
        __builtin_cpu_supports("avx2"),     __builtin_cpu_supports("fma"),
        __builtin_cpu_supports("avx512f"),  __builtin_cpu_supports("avx512bw"),
        __builtin_cpu_supports("avx512dq"), __builtin_cpu_supports("avx512vl"),
        __builtin_cpu_supports("avx512bf16")};
    for (int i = 0; i < 9; i++) {
        if (!found[i]) continue;
        if (buf[0]) strcat(buf, ",");
        strcat(buf, names[i]);
    }
#endif
    return buf;
}
