/* bf16 pair products on AMX tiles (TDPBF16PS), for CPUs with AMX-BF16 (Sapphire Rapids and
 * later). The only file compiled with -mamx-tile -mamx-bf16. The tile state must be requested
 * from Linux once per process (arch_prctl ARCH_REQ_XCOMP_PERM); when the CPU lacks AMX or the
 * request is refused, attn_bf16_kernels_amx() returns NULL and the vdpbf16ps kernels serve.
 * The default where granted (ATTN_AMX=0 declines it, see bf16_internal.h): on a Sapphire Rapids
 * it runs the bf16 GEMM 1024^3 at 6-8.5x vdpbf16ps and the bf16 flash at 4-4.7x
 * (docs/performance-log.md section 12). Also tested on the instruction-level emulation
 * amx_emulate.h (-DATTN_AMX_EMULATE, test_amx_emulated, any CPU), which checks its tile shapes
 * and results, not its speed.
 *
 * Blocks of C of 32 x 32 in four 16 x 16 float tiles (0-3), k in chunks of 16 pair words with
 * two A tiles (4-5, 16 rows x 16 pairs) and two B tiles (6-7, 16 pairs x 16 columns): palette
 * 1's 8 tiles all used, each loaded A and B tile feeding two TDPBF16PS (4 multiplies per 4 tile
 * loads, against 1 per 2 with a single accumulator); 32 columns also fit the flash tiles'
 * n <= 64. Blocks wholly inside C with A's rows contiguous (block_full) load A, B and C straight
 * from memory; A given down its columns (ars 1, the flash kernels' P and dS) is transposed once
 * per call first; other edge blocks (partial rows, columns or k chunk, any other strides) go
 * through zero-padded staging buffers (block_edge). The k chunks run in increasing order into
 * the same accumulators, so each C element is one chain in increasing k. TDPBF16PS sums the same
 * pair products in float; its rounding of the pair sum is the hardware's, so results may differ
 * in the last bits from vdpbf16ps (never between thread counts: every thread runs the same
 * kernel). The other kernels of the table are vdpbf16ps's. */
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

/* 8 tiles of 16 rows x 64 bytes. A constant in static storage: GCC 12's _tile_loadconfig declares
 * its asm operand as a pointer-sized object, so of a configuration built on the stack the compiler
 * may drop the memset and other stores as dead (seen in a test program) and LDTILECFG then faults
 * (#GP) on the stack's garbage in the reserved bytes and unused tiles' fields. */
static const tile_config tile_cfg = {
    .palette_id = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64}, .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

/* The calling thread's tiles as tile_cfg, at every kernel call: the tile state is the thread's,
 * and another library in the process (oneDNN inside PyTorch) may have released it (TILERELEASE:
 * the next tile instruction is then #UD, SIGILL) or configured other shapes (silently wrong
 * products) since this thread's last call, so a flag remembering that this thread configured
 * them once is not enough. STTILECFG and the compare cost 6 ns; LDTILECFG (which zeroes the tiles)
 * 47 ns, so it runs only where the configuration differs. */
static void configure(void) {
    tile_config cur __attribute__((aligned(64)));
#ifdef ATTN_AMX_EMULATE
    _tile_storeconfig(&cur);
#else
    __asm__ volatile("sttilecfg %0" : "=m"(cur)); /* the whole 64 bytes as the operand (see tile_cfg) */
#endif
    if (memcmp(&cur, &tile_cfg, sizeof cur) != 0) _tile_loadconfig(&tile_cfg);
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
    if (h)
        _tile_loadd(5, p, stride);
    else
        _tile_loadd(4, p, stride);
}
static inline void load_b(int h, const uint32_t *p, int64_t stride) {
    if (h)
        _tile_loadd(7, p, stride);
    else
        _tile_loadd(6, p, stride);
}
static inline void dp(int t) {
    switch (t) {
    case 0: _tile_dpbf16ps(0, 4, 6); break;
    case 1: _tile_dpbf16ps(1, 4, 7); break;
    case 2: _tile_dpbf16ps(2, 5, 6); break;
    default: _tile_dpbf16ps(3, 5, 7); break;
    }
}

/* The 2 x 2 block's four C tiles (0 1 / 2 3): from or to a 32 x 32 block of C (row stride ldc
 * floats), or zeroed. */
static inline void load_block(const float *c, int64_t ldc) {
    _tile_loadd(0, c, ldc * 4);
    _tile_loadd(1, c + 16, ldc * 4);
    _tile_loadd(2, c + 16 * ldc, ldc * 4);
    _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
}

static inline void zero_block(void) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

static inline void store_block(float *c, int64_t ldc) {
    _tile_stored(0, c, ldc * 4);
    _tile_stored(1, c + 16, ldc * 4);
    _tile_stored(2, c + 16 * ldc, ldc * 4);
    _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

/* A block of C of 32 x 32 wholly inside C with A's pairs contiguous (acs 1), all kp pair words;
 * B's columns 0-15 of the block at b0, 16-31 at b1, pair row p of each at + p ldb (gemm_pairs: b1
 * = b0 + 16 in one row-major B; gemm_panels: two 16-column panels, ldb 16, so each B tile is 1 KB
 * contiguous). The accumulators start from zero (!accumulate) or C (the caller applied rowscale),
 * and go back to C times outscale. The loads are interleaved with the products (A0 B0 | B1 | A1
 * ...), so that each load overlaps a product that does not read its tile (no renaming of tiles),
 * and the next chunk's B lines are prefetched. Ranges of k with the partial sums stored between
 * them (A and B in L1 across the call's blocks) measured slower. */
static void block_full(int kp, const uint32_t *a, int64_t ars, const uint32_t *b0, const uint32_t *b1, int64_t ldb,
                       float *c, int64_t ldc, int accumulate, float outscale) {
    if (!accumulate) {
        zero_block();
    } else {
        load_block(c, ldc);
    }
    const uint32_t *a1 = a + 16 * ars;
    const int full_hi = kp & ~15;
    for (int p0 = 0; p0 < full_hi; p0 += 16) {
        const int64_t bo = (int64_t)p0 * ldb;
        _tile_loadd(4, a + p0, ars * 4);
        _tile_loadd(6, b0 + bo, ldb * 4);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, b1 + bo, ldb * 4);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a1 + p0, ars * 4);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        if (p0 + 16 < full_hi)
            for (int q = 0; q < 16; q++) {
                __builtin_prefetch(b0 + bo + (int64_t)(16 + q) * ldb, 0, 3);
                __builtin_prefetch(b1 + bo + (int64_t)(16 + q) * ldb, 0, 3);
            }
    }
    if (full_hi < kp) { /* the last pair words, zero-padded to a chunk */
        const int pk = kp - full_hi;
        uint32_t ab[2][16 * 16] __attribute__((aligned(64))), bb[2][16 * 16] __attribute__((aligned(64)));
        for (int h = 0; h < 2; h++) {
            for (int i = 0; i < 16; i++)
                for (int q = 0; q < 16; q++)
                    ab[h][i * 16 + q] = q < pk ? a[(int64_t)(16 * h + i) * ars + full_hi + q] : 0;
            for (int q = 0; q < 16; q++)
                for (int j = 0; j < 16; j++) bb[h][q * 16 + j] = q < pk ? (h ? b1 : b0)[(full_hi + q) * ldb + j] : 0;
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
    store_block(c, ldc);
    if (outscale != 1.0f)
        for (int i = 0; i < 32; i++)
            for (int j = 0; j < 32; j++) c[(int64_t)i * ldc + j] *= outscale;
}

/* Any other block (partial rows or columns, or strided A), all of k at once, through
 * zero-padded staging buffers where the operands do not fill a tile. */
static void block_edge(int m, int n, int kp, int i0, int j0, const uint32_t *a, int64_t ars, int64_t acs,
                       const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *rowscale,
                       float outscale) {
    float cb[4][16 * 16] __attribute__((aligned(64)));
    uint32_t ab[16 * 16] __attribute__((aligned(64))), bb[16 * 16] __attribute__((aligned(64)));
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
                        ab[i * 16 + p] =
                            r0 + i < m && p < pk ? a[(int64_t)(r0 + i) * ars + (int64_t)(p0 + p) * acs] : 0;
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

/* The whole 32 x 32 blocks (mf x nf) of gemm_panels when kp is a multiple of 16, row block by row
 * block, each on all of k. Up to k = 2048, B's tiles are loaded with TILELOADDT1 (the non-temporal
 * hint): they stream from the L2 once per row block, and without the hint they pushed the row
 * block's A (32 x kp words: 48 KiB at k 768) out of the L1; with it, A's lines stay, and the k
 * halves block_full needed at k 386-768 are not: 1.05-1.55x at k 384-1536. Past k = 2048 plain
 * loads with B's next chunk prefetched measured 1.02-1.12x the hinted ones (k 4096).
 * Without accumulate, C's tile stores overlap products (as oneDNN's AMX kernels do): tiles 0 and 1
 * go to C and are zeroed right after their last product, tiles 2 and 3 during the next block's
 * first k chunk, while tiles 0 and 1 take their first products. The loads come in the order of use
 * (A0, B0, B1, A1). Each element is the same chain over k as block_full's. */
static void panel_blocks(int mf, int nf, int kp, const uint32_t *a, int64_t ars, const uint32_t *b, float *c,
                         int64_t ldc, int accumulate) {
    float *pend = NULL; /* the previous block, its tiles 2 and 3 not yet stored */
    const int hint = kp <= 1024;
    if (!accumulate) {
        zero_block();
    }
    for (int i0 = 0; i0 < mf; i0 += 32) {
        const uint32_t *a0 = a + (int64_t)i0 * ars, *a1 = a0 + 16 * ars;
        for (int j0 = 0; j0 < nf; j0 += 32) {
            const uint32_t *b0 = b + (int64_t)j0 * kp, *b1 = b0 + (int64_t)16 * kp;
            float *cb = c + (int64_t)i0 * ldc + j0;
            if (accumulate) load_block(cb, ldc);
            for (int p0 = 0; p0 < kp; p0 += 16) {
                const int first = p0 == 0 && pend, last = !accumulate && p0 + 16 == kp;
                _tile_loadd(4, a0 + p0, ars * 4);
                if (hint) {
                    _tile_stream_loadd(6, b0 + (int64_t)p0 * 16, 64);
                    _tile_stream_loadd(7, b1 + (int64_t)p0 * 16, 64);
                } else {
                    _tile_loadd(6, b0 + (int64_t)p0 * 16, 64);
                    _tile_loadd(7, b1 + (int64_t)p0 * 16, 64);
                    if (p0 + 16 < kp)
                        for (int q = 0; q < 16; q++) {
                            __builtin_prefetch(b0 + (int64_t)(p0 + 16 + q) * 16, 0, 3);
                            __builtin_prefetch(b1 + (int64_t)(p0 + 16 + q) * 16, 0, 3);
                        }
                }
                _tile_dpbf16ps(0, 4, 6);
                _tile_loadd(5, a1 + p0, ars * 4);
                if (first) {
                    _tile_stored(2, pend + 16 * ldc, ldc * 4);
                    _tile_zero(2);
                }
                if (last) {
                    _tile_stored(0, cb, ldc * 4);
                    _tile_zero(0);
                }
                _tile_dpbf16ps(1, 4, 7);
                if (first) {
                    _tile_stored(3, pend + 16 * ldc + 16, ldc * 4);
                    _tile_zero(3);
                }
                if (last) {
                    _tile_stored(1, cb + 16, ldc * 4);
                    _tile_zero(1);
                }
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            if (accumulate) {
                store_block(cb, ldc);
            } else {
                pend = cb;
            }
        }
    }
    if (pend) {
        _tile_stored(2, pend + 16 * ldc, ldc * 4);
        _tile_stored(3, pend + 16 * ldc + 16, ldc * 4);
    }
}

/* The rows past the last whole 32-row block (mr of them, 1 to 31) against n16 columns of whole
 * 16-column panels. A's rows are staged once per slab of EDGE_SLAB pair words into a buffer
 * padded with zero rows and words (block_edge staged a tile of them for every panel and 16 pair
 * words: at m = 1, a generation step, that was most of the product's time); C's rows go through
 * a staged tile where fewer than 16 are real. The slabs meet through C as floats, loaded back
 * exactly, so each element is block_edge's chain over k. */
#define EDGE_SLAB 256
static void edge_rows(int mr, int n16, int kp, const uint32_t *a, int64_t ars, const uint32_t *b, float *c, int64_t ldc,
                      int accumulate) {
    uint32_t ab[32 * EDGE_SLAB] __attribute__((aligned(64)));
    uint32_t bb[16 * 16] __attribute__((aligned(64)));
    float cb[2][16 * 16] __attribute__((aligned(64)));
    const int hn = (mr + 15) / 16;
    memset(cb, 0, sizeof cb); /* the rows past mr are never copied in: keep them defined */
    for (int s0 = 0; s0 < kp; s0 += EDGE_SLAB) {
        const int sk = kp - s0 < EDGE_SLAB ? kp - s0 : EDGE_SLAB, sc = (sk + 15) & ~15;
        for (int i = 0; i < 16 * hn; i++) {
            uint32_t *dst = ab + i * EDGE_SLAB;
            const int real = i < mr ? sk : 0;
            if (real) memcpy(dst, a + (int64_t)i * ars + s0, (size_t)real * 4);
            memset(dst + real, 0, (size_t)(sc - real) * 4);
        }
        const int acc = accumulate || s0 > 0;
        for (int j0 = 0; j0 < n16; j0 += 16) {
            const uint32_t *bp = b + (int64_t)j0 * kp;
            float *cp = c + j0;
            for (int h = 0; h < hn; h++) {
                const int rows = mr - 16 * h < 16 ? mr - 16 * h : 16;
                if (!acc) {
                    zero_c(2 * h);
                } else if (rows == 16) {
                    load_c(2 * h, cp + (int64_t)16 * h * ldc, ldc * 4);
                } else {
                    for (int i = 0; i < rows; i++) memcpy(cb[h] + 16 * i, cp + (int64_t)(16 * h + i) * ldc, 64);
                    load_c(2 * h, cb[h], 64);
                }
            }
            for (int p = 0; p < sc; p += 16) {
                const int pk = kp - (s0 + p) < 16 ? kp - (s0 + p) : 16;
                if (pk == 16) {
                    load_b(0, bp + (int64_t)(s0 + p) * 16, 64);
                } else {
                    memcpy(bb, bp + (int64_t)(s0 + p) * 16, (size_t)pk * 64);
                    memset(bb + pk * 16, 0, (size_t)(16 - pk) * 64);
                    load_b(0, bb, 64);
                }
                for (int h = 0; h < hn; h++) {
                    load_a(h, ab + h * 16 * EDGE_SLAB + p, EDGE_SLAB * 4);
                    dp(2 * h);
                }
            }
            for (int h = 0; h < hn; h++) {
                const int rows = mr - 16 * h < 16 ? mr - 16 * h : 16;
                if (rows == 16) {
                    store_c(2 * h, cp + (int64_t)16 * h * ldc, ldc * 4);
                } else {
                    store_c(2 * h, cb[h], 64);
                    for (int i = 0; i < rows; i++) memcpy(cp + (int64_t)(16 * h + i) * ldc, cb[h] + 16 * i, 64);
                }
            }
        }
    }
}

#ifdef ATTN_AMX_EMULATE
void attn_bf16_gemm_panels_amx_emulated(int m, int n, int kp, const uint32_t *a, int64_t ars, const uint32_t *b,
                                        float *c, int64_t ldc, int accumulate);
#define gemm_panels_amx attn_bf16_gemm_panels_amx_emulated
#else
static
#endif
/* gemm_panels: whole 32 x 32 blocks on a pair of panels (ldb 16; panel_blocks, or block_full where
 * kp is not a multiple of 16), row block by row block (each 32-row A block stays in the L1 while
 * it meets every panel pair: 1.05-1.10x the panel-pair-outer order, which read A back from the L2
 * for every pair); then the rows past the last whole block against the whole panels (edge_rows),
 * and what is left (the columns past the last whole pair, the rows past the last whole block in
 * the last partial panel) 16 columns at a time by block_edge. Every C element is still one block's
 * chain over all of k, so the order moves no bit. */
void gemm_panels_amx(int m, int n, int kp, const uint32_t *a, int64_t ars, const uint32_t *b, float *c, int64_t ldc,
                     int accumulate) {
    configure();
    const int mf = m & ~31, nf = n & ~31;
    if (kp % 16 == 0) {
        panel_blocks(mf, nf, kp, a, ars, b, c, ldc, accumulate);
    } else {
        /* k from 193 to 384 pair words in two halves (a multiple of 16 pair words each), so that
         * the A block (32 rows x a half, <= 24 KiB) stays in the L1 beside the B tiles streaming
         * through: 1.03-1.09x at k = 768 (before panel_blocks); the partial sums go back to C as
         * floats and are reloaded exactly, so each element is the same chain. */
        const int kc = kp > 192 && kp <= 384 ? ((kp + 1) / 2 + 15) & ~15 : kp;
        for (int p0 = 0; p0 < kp; p0 += kc) {
            const int pk = kp - p0 < kc ? kp - p0 : kc;
            for (int i0 = 0; i0 < mf; i0 += 32)
                for (int j0 = 0; j0 < nf; j0 += 32) {
                    const uint32_t *b0 = b + (int64_t)j0 * kp + (int64_t)p0 * 16;
                    block_full(pk, a + (int64_t)i0 * ars + p0, ars, b0, b0 + (int64_t)16 * kp, 16,
                               c + (int64_t)i0 * ldc + j0, ldc, accumulate || p0 > 0, 1.0f);
                }
        }
    }
    const int n16 = n & ~15;
    if (m > mf && n16 > 0)
        edge_rows(m - mf, n16, kp, a + (int64_t)mf * ars, ars, b, c + (int64_t)mf * ldc, ldc, accumulate);
    for (int jt = 0; jt < n; jt += 16) {
        const int nt = n - jt < 16 ? n - jt : 16;
        for (int i0 = jt < nf ? mf : 0; i0 < (jt < n16 ? mf : m); i0 += 32)
            block_edge(m, nt, kp, i0, 0, a, ars, 1, b + (int64_t)jt * kp, 16, c + jt, ldc, accumulate, NULL, 1.0f);
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
void gemm_pairs_amx(int m, int n, int kp, const uint32_t *a, int64_t ars, int64_t acs, const uint32_t *b, int64_t ldb,
                    float *c, int64_t ldc, int accumulate, const float *rowscale, float outscale) {
    configure();
    /* A given down its columns (ars 1: the flash kernels' P and dS words, pw[p * BR + i]; the
     * backward's dQ reads 4 key tiles' dS, 64 x 128 words): tiles need its rows, so a small A is
     * transposed once per call (16 x 16 words in registers) rather than gathered into staging for
     * every block and chunk */
    uint32_t at[64 * 128] __attribute__((aligned(64)));
    if (acs != 1 && ars == 1 && (int64_t)m * kp <= 64 * 128 && m > 0 && kp > 0) {
        attn_bf16_words_across(kp, m, a, acs, at, kp);
        a = at;
        ars = kp;
        acs = 1;
    }
    const int mf = acs == 1 ? m & ~31 : 0, nf = n & ~31;
    if (accumulate && rowscale && nf) /* the full blocks' C scaled in place, rows of vectors */
        for (int i = 0; i < mf; i++) {
            const float f = rowscale[i];
            float *cr = c + (int64_t)i * ldc;
            for (int j = 0; j < nf; j++) cr[j] *= f;
        }
    for (int i0 = 0; i0 < mf; i0 += 32)
        for (int j0 = 0; j0 < nf; j0 += 32)
            block_full(kp, a + (int64_t)i0 * ars, ars, b + j0, b + j0 + 16, ldb, c + (int64_t)i0 * ldc + j0, ldc,
                       accumulate, outscale);
    for (int i0 = 0; i0 < m; i0 += 32)
        for (int j0 = 0; j0 < n; j0 += 32)
            if (i0 >= mf || j0 >= nf)
                block_edge(m, n, kp, i0, j0, a, ars, acs, b, ldb, c, ldc, accumulate, rowscale, outscale);
}

#ifndef ATTN_AMX_EMULATE
/* gemm_pairs_colscale: C's columns scaled in place (vectors: rows of C are contiguous), then
 * the accumulating product. */
static void gemm_pairs_colscale_amx(int m, int n, int kp, const uint32_t *a, int64_t ars, const uint32_t *b,
                                    int64_t ldb, float *restrict c, int64_t ldc, const float *restrict f) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[(int64_t)i * ldc + j] *= f[j];
    gemm_pairs_amx(m, n, kp, a, ars, 1, b, ldb, c, ldc, 1, NULL, 1.0f);
}

/* AMX peak: 4 accumulator tiles fed by the same two A and two B tiles, as the GEMM's 2 x 2 block
 * uses them; each TDPBF16PS is 16 x 16 results of 16 pairs (4096 pair lanes of 4 flops). Call
 * only once attn_bf16_kernels_amx() has been granted the tile state. */
float attn_amx_loop_tiles(int64_t iters, int *chains, int *lanes) {
    configure();
    uint32_t src[16 * 16] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * 16; i++) src[i] = 0x3f803f80u; /* pairs of 1.0 */
    float out[16 * 16] __attribute__((aligned(64)));
    _tile_loadd(4, src, 64);
    _tile_loadd(5, src, 64);
    _tile_loadd(6, src, 64);
    _tile_loadd(7, src, 64);
    zero_block();
    for (int64_t it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    float s = out[0];
    _tile_stored(3, out, 64);
    *chains = 4;
    *lanes = 16 * 16 * 16;
    return s + out[255];
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
        t.unit = ATTN_BF16_UNIT_AMX;
        t.gemm_pairs = gemm_pairs_amx;
        t.gemm_pairs_colscale = gemm_pairs_colscale_amx;
        t.gemm_panels = gemm_panels_amx;
        k = t;
        atomic_store(&built, 1);
    }
    return &k;
}
#endif
