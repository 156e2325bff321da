/* bf16 pair products on AMX tiles (TDPBF16PS), for CPUs with AMX-BF16 (Sapphire Rapids and
 * later). The only file compiled with -mamx-tile -mamx-bf16. The tile state must be requested
 * from Linux once per process (arch_prctl ARCH_REQ_XCOMP_PERM); when the CPU lacks AMX or the
 * request is refused, attn_bf16_kernels_amx() returns NULL and the vdpbf16ps kernels serve.
 * Opt-in (ATTN_AMX=1, see bf16_internal.h): no machine has run this file on AMX hardware yet;
 * it is tested through the instruction-level emulation amx_emulate.h (-DATTN_AMX_EMULATE,
 * test_amx_emulated), which checks its tile shapes and results, not its speed.
 *
 * Blocks of C of 32 x 32 in four 16 x 16 float tiles (0-3), k in chunks of 16 pair words with
 * two A tiles (4-5, 16 rows x 16 pairs) and two B tiles (6-7, 16 pairs x 16 columns): palette
 * 1's 8 tiles all used, each loaded A and B tile feeding two TDPBF16PS (4 multiplies per 4 tile
 * loads, against 1 per 2 with a single accumulator); 32 columns also fit the flash tiles'
 * n <= 64. Full 16 x 16 blocks are loaded straight from the operands (A when acs == 1, with
 * stride ars; B with stride ldb; C when accumulating without rowscale, else zeroed) and C
 * stored straight back; only edge blocks (partial rows, columns or k chunk), strided A
 * (acs != 1) and rowscale go through zero-padded staging buffers. The k chunks run in
 * increasing order into the same accumulators, so each C element is one chain in increasing k.
 * TDPBF16PS sums the same pair products in float; its rounding of the pair sum is the
 * hardware's, so results may differ in the last bits from vdpbf16ps (never between thread
 * counts: every thread runs the same kernel). The other three kernels of the table are
 * vdpbf16ps's. */
#define _DEFAULT_SOURCE /* syscall */
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef ATTN_AMX_EMULATE
#include "amx_emulate.h"
#else
#include <immintrin.h>
#endif

#include "bf16_internal.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct tile_config {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Configure 8 tiles of 16 rows x 64 bytes on the calling thread (its tile state is per thread). */
static void configure(void) {
    static _Thread_local int done;
    if (done) return;
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    done = 1;
}

/* The tile number of the intrinsics is an instruction immediate: one literal per case. */
static inline void load_c(int t, const float *p, int64_t stride) {
    switch (t) {
    case 0: _tile_loadd(0, p, stride); break;
    case 1: _tile_loadd(1, p, stride); break;
    case 2: _tile_loadd(2, p, stride); break;
    default: _tile_loadd(3, p, stride); break;
    }
}
static inline void zero_c(int t) {
    switch (t) {
    case 0: _tile_zero(0); break;
    case 1: _tile_zero(1); break;
    case 2: _tile_zero(2); break;
    default: _tile_zero(3); break;
    }
}
static inline void store_c(int t, float *p, int64_t stride) {
    switch (t) {
    case 0: _tile_stored(0, p, stride); break;
    case 1: _tile_stored(1, p, stride); break;
    case 2: _tile_stored(2, p, stride); break;
    default: _tile_stored(3, p, stride); break;
    }
}
static inline void load_a(int h, const uint32_t *p, int64_t stride) {
    if (h) _tile_loadd(5, p, stride);
    else _tile_loadd(4, p, stride);
}
static inline void load_b(int h, const uint32_t *p, int64_t stride) {
    if (h) _tile_loadd(7, p, stride);
    else _tile_loadd(6, p, stride);
}
static inline void dp(int t) {
    switch (t) {
    case 0: _tile_dpbf16ps(0, 4, 6); break;
    case 1: _tile_dpbf16ps(1, 4, 7); break;
    case 2: _tile_dpbf16ps(2, 5, 6); break;
    default: _tile_dpbf16ps(3, 5, 7); break;
    }
}

#ifdef ATTN_AMX_EMULATE
/* The test's entry point to the emulated kernel (the library's copy stays static). */
void attn_bf16_gemm_pairs_amx_emulated(int m, int n, int kp, const uint32_t *a, int64_t ars, int64_t acs,
                                       const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                                       const float *rowscale, float outscale);
#define gemm_pairs_amx attn_bf16_gemm_pairs_amx_emulated
#else
static
#endif
void gemm_pairs_amx(int m, int n, int kp, const uint32_t *a, int64_t ars, int64_t acs, const uint32_t *b,
                    int64_t ldb, float *c, int64_t ldc, int accumulate, const float *rowscale, float outscale) {
    configure();
    float cb[4][16 * 16] __attribute__((aligned(64)));
    uint32_t ab[16 * 16] __attribute__((aligned(64))), bb[16 * 16] __attribute__((aligned(64)));
    for (int i0 = 0; i0 < m; i0 += 32)
        for (int j0 = 0; j0 < n; j0 += 32) {
            /* hi, hj: 16-row / 16-column halves of the block that hold any of C (1 or 2) */
            const int mi = m - i0 < 32 ? m - i0 : 32, nj = n - j0 < 32 ? n - j0 : 32;
            const int hi_n = (mi + 15) / 16, hj_n = (nj + 15) / 16;
            for (int hi = 0; hi < hi_n; hi++)
                for (int hj = 0; hj < hj_n; hj++) {
                    const int t = 2 * hi + hj, r0 = i0 + 16 * hi, c0 = j0 + 16 * hj;
                    const int full = r0 + 16 <= m && c0 + 16 <= n;
                    if (!accumulate) {
                        zero_c(t);
                    } else if (full && !rowscale) {
                        load_c(t, c + (int64_t)r0 * ldc + c0, ldc * 4);
                    } else {
                        for (int i = 0; i < 16; i++)
                            for (int j = 0; j < 16; j++)
                                cb[t][i * 16 + j] = r0 + i < m && c0 + j < n ? c[(int64_t)(r0 + i) * ldc + c0 + j] *
                                                                                   (rowscale ? rowscale[r0 + i] : 1.0f)
                                                                             : 0.0f;
                        load_c(t, cb[t], 64);
                    }
                }
            for (int p0 = 0; p0 < kp; p0 += 16) {
                const int pk = kp - p0 < 16 ? kp - p0 : 16;
                for (int h = 0; h < hi_n; h++) {
                    const int r0 = i0 + 16 * h;
                    if (acs == 1 && pk == 16 && r0 + 16 <= m) {
                        load_a(h, a + (int64_t)r0 * ars + p0, ars * 4);
                    } else {
                        for (int i = 0; i < 16; i++)
                            for (int p = 0; p < 16; p++)
                                ab[i * 16 + p] = r0 + i < m && p < pk ? a[(int64_t)(r0 + i) * ars + (int64_t)(p0 + p) * acs] : 0;
                        load_a(h, ab, 64);
                    }
                }
                for (int h = 0; h < hj_n; h++) {
                    const int c0 = j0 + 16 * h;
                    if (pk == 16 && c0 + 16 <= n) {
                        load_b(h, b + (int64_t)p0 * ldb + c0, ldb * 4);
                    } else {
                        for (int p = 0; p < 16; p++)
                            for (int j = 0; j < 16; j++)
                                bb[p * 16 + j] = p < pk && c0 + j < n ? b[(int64_t)(p0 + p) * ldb + c0 + j] : 0;
                        load_b(h, bb, 64);
                    }
                }
                for (int hi = 0; hi < hi_n; hi++)
                    for (int hj = 0; hj < hj_n; hj++) dp(2 * hi + hj);
            }
            for (int hi = 0; hi < hi_n; hi++)
                for (int hj = 0; hj < hj_n; hj++) {
                    const int t = 2 * hi + hj, r0 = i0 + 16 * hi, c0 = j0 + 16 * hj;
                    if (r0 + 16 <= m && c0 + 16 <= n) {
                        float *cp = c + (int64_t)r0 * ldc + c0;
                        store_c(t, cp, ldc * 4);
                        if (outscale != 1.0f)
                            for (int i = 0; i < 16; i++)
                                for (int j = 0; j < 16; j++) cp[(int64_t)i * ldc + j] *= outscale;
                    } else {
                        store_c(t, cb[t], 64);
                        for (int i = 0; i < 16 && r0 + i < m; i++)
                            for (int j = 0; j < 16 && c0 + j < n; j++)
                                c[(int64_t)(r0 + i) * ldc + c0 + j] = cb[t][i * 16 + j] * outscale;
                    }
                }
        }
}

#ifndef ATTN_AMX_EMULATE
int attn_cpu_has_amx_bf16(void) {
    const uint32_t want = ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16;
    return (attn_cpu_feature_bits() & want) == want;
}

const attn_bf16_kernels *attn_bf16_kernels_amx(void) {
    /* 0: not asked yet, 1: granted, -1: no AMX or refused */
    static atomic_int state;
    int s = atomic_load(&state);
    if (!s) {
        s = attn_cpu_has_amx_bf16() && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 1 : -1;
        atomic_store(&state, s);
    }
    if (s < 0) return NULL;
    static attn_bf16_kernels k;
    static atomic_int built;
    if (!atomic_load(&built)) {
        const attn_bf16_kernels *v = attn_bf16_kernels_avx512bf16();
        attn_bf16_kernels t = *v;
        t.name = "amx";
        t.gemm_pairs = gemm_pairs_amx;
        k = t;
        atomic_store(&built, 1);
    }
    return &k;
}
#endif
