/* Cache sizes and microarchitecture (tuning.h), detected once per process. */
#define _POSIX_C_SOURCE 200809L
#include "tuning.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* The caches the kernels' constants were tuned on (a Zen 4 / Zen 5 class part): the default
 * when nothing is detected. */
#define DEFAULT_L1D ((int64_t)32 << 10)
#define DEFAULT_L2 ((int64_t)1 << 20)
#define DEFAULT_L3 ((int64_t)32 << 20)

static attn_uarch uarch;
static attn_cache_sizes caches;
static const char *env_value, *env_problem;
static atomic_int ready; /* 0: not detected, 1: being detected, 2: ready */

/* ---- microarchitecture ---- */

typedef struct {
    const char *name;
    int64_t l1d, l2, l3; /* typical per-core L1d / L2 and per-CCX or per-socket L3 */
} known_uarch;

static const known_uarch ZEN2 = {"Zen 2", 32 << 10, 512 << 10, 16 << 20};
static const known_uarch ZEN3 = {"Zen 3", 32 << 10, 512 << 10, 32 << 20};
static const known_uarch ZEN4 = {"Zen 4", 32 << 10, 1 << 20, 32 << 20};
static const known_uarch ZEN5 = {"Zen 5", 48 << 10, 1 << 20, 32 << 20};
static const known_uarch SKX = {"Skylake-SP / Cascade Lake", 32 << 10, 1 << 20, 32 << 20};
static const known_uarch ICX = {"Ice Lake-SP", 48 << 10, 1280 << 10, 48 << 20};
static const known_uarch SPR = {"Sapphire Rapids", 48 << 10, 2 << 20, 60 << 20};
static const known_uarch EMR = {"Emerald Rapids", 48 << 10, 2 << 20, 160 << 20};
static const known_uarch GNR = {"Granite Rapids", 48 << 10, 2 << 20, 256 << 20};
static const known_uarch ADL = {"Alder Lake / Raptor Lake (P-core)", 48 << 10, 1280 << 10, 30 << 20};

static const known_uarch *recognise(const char *vendor, int family, int model) {
    if (!strcmp(vendor, "AuthenticAMD") || !strcmp(vendor, "HygonGenuine")) {
        if (family == 0x17) return model >= 0x30 ? &ZEN2 : NULL;
        if (family == 0x19) {
            if ((model >= 0x10 && model <= 0x1f) || (model >= 0x60 && model <= 0x7f) ||
                (model >= 0xa0 && model <= 0xaf))
                return &ZEN4;
            return &ZEN3;
        }
        if (family == 0x1a) return &ZEN5;
    } else if (!strcmp(vendor, "GenuineIntel") && family == 6) {
        switch (model) {
        case 0x55: return &SKX;
        case 0x6a:
        case 0x6c: return &ICX;
        case 0x8f: return &SPR;
        case 0xcf: return &EMR;
        case 0xad:
        case 0xae: return &GNR;
        case 0x97:
        case 0x9a:
        case 0xb7:
        case 0xba:
        case 0xbf: return &ADL;
        default: break;
        }
    }
    return NULL;
}

static void detect_uarch(attn_uarch *u) {
    memset(u, 0, sizeof *u);
    u->name = "unrecognised";
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    memcpy(u->vendor, &b, 4);
    memcpy(u->vendor + 4, &d, 4);
    memcpy(u->vendor + 8, &c, 4);
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const int base_family = (int)(a >> 8 & 0xf), base_model = (int)(a >> 4 & 0xf);
    u->family = base_family == 0xf ? base_family + (int)(a >> 20 & 0xff) : base_family;
    u->model = base_family == 0xf || base_family == 6 ? base_model | (int)(a >> 16 & 0xf) << 4 : base_model;
    const known_uarch *k = recognise(u->vendor, u->family, u->model);
    if (k) u->name = k->name;
#endif
}

/* ---- cache sizes ---- */

/* Deterministic cache parameters: cpuid leaf 4 (Intel) or 0x8000001D (AMD); 0 when absent. */
static int cpuid_caches(const attn_uarch *u, attn_cache_sizes *cs) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d, leaf;
    if (!strcmp(u->vendor, "GenuineIntel")) {
        if (!__get_cpuid(0, &a, &b, &c, &d) || a < 4) return 0;
        leaf = 4;
    } else if (!strcmp(u->vendor, "AuthenticAMD") || !strcmp(u->vendor, "HygonGenuine")) {
        /* the leaf exists when the topology extensions are (cpuid 0x80000001 ecx bit 22) */
        if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x8000001d) return 0;
        if (!__get_cpuid(0x80000001, &a, &b, &c, &d) || !(c >> 22 & 1)) return 0;
        leaf = 0x8000001d;
    } else {
        return 0;
    }
    int found = 0;
    for (unsigned sub = 0; sub < 16; sub++) {
        __cpuid_count(leaf, sub, a, b, c, d);
        const unsigned type = a & 0x1f, level = a >> 5 & 7;
        if (type == 0) break;
        if (type != 1 && type != 3) continue; /* data or unified */
        const int64_t size = (int64_t)((b >> 22) + 1) * (int64_t)((b >> 12 & 0x3ff) + 1) * (int64_t)((b & 0xfff) + 1) *
                             (int64_t)((int64_t)c + 1);
        const char *src = leaf == 4 ? "cpuid leaf 4" : "cpuid leaf 0x8000001D";
        if (level == 1) cs->l1d = size, cs->l1d_src = src, found = 1;
        if (level == 2) cs->l2 = size, cs->l2_src = src, found = 1;
        if (level == 3) cs->l3 = size, cs->l3_src = src, found = 1;
    }
    return found;
#else
    (void)u, (void)cs;
    return 0;
#endif
}

static int64_t parse_size(const char *s, const char **end) {
    char *e;
    const long long v = strtoll(s, &e, 10);
    if (e == s || v <= 0) return -1;
    int64_t x = v;
    if (*e == 'K' || *e == 'k')
        x <<= 10, e++;
    else if (*e == 'M' || *e == 'm')
        x <<= 20, e++;
    else if (*e == 'G' || *e == 'g')
        x <<= 30, e++;
    if (*e == 'B' || *e == 'b') e++;
    *end = e;
    return x;
}

/* Linux's view of cpu0's caches (/sys/devices/system/cpu/cpu0/cache/index*); fills what cpuid
 * left empty. */
static void sysfs_caches(attn_cache_sizes *cs) {
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32], type[32];
        int level;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        const int ok = fscanf(f, "%d", &level) == 1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (!ok || !(f = fopen(path, "r"))) continue;
        const int tok = fscanf(f, "%31s", type) == 1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!tok || strcmp(type, "Instruction") == 0 || !(f = fopen(path, "r"))) continue;
        const int sok = fscanf(f, "%31s", buf) == 1;
        fclose(f);
        const char *end;
        const int64_t size = sok ? parse_size(buf, &end) : -1;
        if (size <= 0) continue;
        if (level == 1 && !cs->l1d) cs->l1d = size, cs->l1d_src = "sysfs";
        if (level == 2 && !cs->l2) cs->l2 = size, cs->l2_src = "sysfs";
        if (level == 3 && !cs->l3) cs->l3 = size, cs->l3_src = "sysfs";
    }
}

int attn_cache_parse(const char *s, attn_cache_sizes *c, const char **problem) {
    attn_cache_sizes t = *c;
    *problem = NULL;
    if (!s || !*s) {
        *problem = "empty";
        return 0;
    }
    while (*s) {
        int which;
        if (!strncmp(s, "l1d=", 4))
            which = 1, s += 4;
        else if (!strncmp(s, "l1=", 3))
            which = 1, s += 3;
        else if (!strncmp(s, "l2=", 3))
            which = 2, s += 3;
        else if (!strncmp(s, "l3=", 3))
            which = 3, s += 3;
        else {
            *problem = "expected l1=, l2= or l3=";
            return 0;
        }
        const char *end;
        const int64_t v = parse_size(s, &end);
        /* at least 4 KiB, at most 16 GiB: anything else is a typo, not a cache */
        if (v < 4096 || v > ((int64_t)16 << 30) || (*end && *end != ',')) {
            *problem = "a size must be 4K .. 16G (bytes, or with a K, M or G suffix)";
            return 0;
        }
        if (which == 1) t.l1d = v, t.l1d_src = "ATTN_CACHE";
        if (which == 2) t.l2 = v, t.l2_src = "ATTN_CACHE";
        if (which == 3) t.l3 = v, t.l3_src = "ATTN_CACHE";
        if (*end == ',' && !end[1]) {
            *problem = "a trailing comma";
            return 0;
        }
        s = *end ? end + 1 : end;
    }
    *c = t;
    return 1;
}

static void detect(void) {
    detect_uarch(&uarch);
    attn_cache_sizes cs;
    memset(&cs, 0, sizeof cs);
    cpuid_caches(&uarch, &cs);
    sysfs_caches(&cs);
    const known_uarch *k = recognise(uarch.vendor, uarch.family, uarch.model);
    if (!cs.l1d) cs.l1d = k ? k->l1d : DEFAULT_L1D, cs.l1d_src = k ? "microarchitecture table" : "default";
    if (!cs.l2) cs.l2 = k ? k->l2 : DEFAULT_L2, cs.l2_src = k ? "microarchitecture table" : "default";
    if (!cs.l3) cs.l3 = k ? k->l3 : DEFAULT_L3, cs.l3_src = k ? "microarchitecture table" : "default";
    env_value = getenv("ATTN_CACHE");
    if (env_value) attn_cache_parse(env_value, &cs, &env_problem);
    caches = cs;
}

static void ensure(void) {
    if (atomic_load_explicit(&ready, memory_order_acquire) == 2) return;
    int expect = 0;
    if (atomic_compare_exchange_strong(&ready, &expect, 1)) {
        detect();
        atomic_store_explicit(&ready, 2, memory_order_release);
    } else {
        while (atomic_load_explicit(&ready, memory_order_acquire) != 2) {}
    }
}

const attn_cache_sizes *attn_cpu_caches(void) {
    ensure();
    return &caches;
}

const attn_uarch *attn_cpu_uarch(void) {
    ensure();
    return &uarch;
}

const char *attn_cache_env(const char **problem) {
    ensure();
    if (problem) *problem = env_problem;
    return env_value;
}
