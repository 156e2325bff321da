/* bf16 pair products on AMX tiles (TDPBF16PS), for CPUs with AMX-BF16 (Sapphire Rapids and
 * later). The only file compiled with -mamx-tile -mamx-bf16. The tile state must be requested
 * from Linux once per process (arch_prctl ARCH_REQ_XCOMP_PERM); when the CPU lacks AMX or the
 * request is refused, attn_bf16_kernels_amx() returns NULL and the vdpbf16ps kernels serve.
 *
 * Blocks of C of 32 x 32 in four 16 x 16 float tiles, k in chunks of 16 pair words, operands
 * staged through zero-padded buffers on the stack (edges need no special tiles). TDPBF16PS sums
 * the same pair products in float; its rounding of the pair sum is the hardware's, so results
 * may differ in the last bits from vdpbf16ps (never between thread counts: every thread runs
 * the same kernel). The other three kernels of the table are vdpbf16ps's. */
#define _DEFAULT_SOURCE /* syscall */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

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

static void gemm_pairs_amx(int m, int n, int kp, const uint32_t *a, int64_t ars, int64_t acs, const uint32_t *b,
                           int64_t ldb, float *c, int64_t ldc, int accumulate, const float *rowscale, float outscale) {
    configure();
    float cb[32 * 32] __attribute__((aligned(64)));
    uint32_t ab[2][16 * 16] __attribute__((aligned(64))), bb[2][16 * 16] __attribute__((aligned(64)));
    for (int i0 = 0; i0 < m; i0 += 32)
        for (int j0 = 0; j0 < n; j0 += 32) {
            const int mi = m - i0 < 32 ? m - i0 : 32, nj = n - j0 < 32 ? n - j0 : 32;
            for (int i = 0; i < 32; i++)
                for (int j = 0; j < 32; j++)
                    cb[i * 32 + j] = accumulate && i < mi && j < nj
                                         ? c[(int64_t)(i0 + i) * ldc + j0 + j] * (rowscale ? rowscale[i0 + i] : 1.0f)
                                         : 0.0f;
            _tile_loadd(0, cb, 128);
            _tile_loadd(1, cb + 16, 128);
            _tile_loadd(2, cb + 16 * 32, 128);
            _tile_loadd(3, cb + 16 * 32 + 16, 128);
            for (int p0 = 0; p0 < kp; p0 += 16) {
                const int pk = kp - p0 < 16 ? kp - p0 : 16;
                for (int h = 0; h < 2; h++) {
                    for (int i = 0; i < 16; i++)
                        for (int p = 0; p < 16; p++) {
                            const int r = i0 + 16 * h + i;
                            ab[h][i * 16 + p] = r < m && p < pk ? a[(int64_t)r * ars + (int64_t)(p0 + p) * acs] : 0;
                        }
                    for (int p = 0; p < 16; p++)
                        for (int j = 0; j < 16; j++) {
                            const int col = j0 + 16 * h + j;
                            bb[h][p * 16 + j] = p < pk && col < n ? b[(int64_t)(p0 + p) * ldb + col] : 0;
                        }
                }
                _tile_loadd(4, ab[0], 64);
                _tile_loadd(5, ab[1], 64);
                _tile_loadd(6, bb[0], 64);
                _tile_loadd(7, bb[1], 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, cb, 128);
            _tile_stored(1, cb + 16, 128);
            _tile_stored(2, cb + 16 * 32, 128);
            _tile_stored(3, cb + 16 * 32 + 16, 128);
            for (int i = 0; i < mi; i++)
                for (int j = 0; j < nj; j++) c[(int64_t)(i0 + i) * ldc + j0 + j] = cb[i * 32 + j] * outscale;
        }
}

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
