/* bf16 kernels: products of bfloat16 pairs accumulated in float, the semantics of AVX512-BF16's
 * vdpbf16ps, one implementation per ISA: bf16_ref.c (portable, bit-exact emulation: the oracle),
 * bf16_avx512bf16.c (vdpbf16ps, compiled with -mavx512bf16 only there), bf16_avx512.c (the
 * same bodies on AVX-512F alone, each vdpbf16ps two FMAs under DAZ/FTZ) and bf16_avx2.c (that
 * emulation in AVX2 registers).
 *
 * Operands are "pair words": a uint32 holding two bf16, element 2p in the low half and 2p + 1 in
 * the high half (the VNNI layout). One step of a dot product, per output element:
 *   c = ftz(c + x[2p+1] y[2p+1]) ; c = ftz(c + x[2p] y[2p])
 * the high product first, each product exact (8-bit significands, also below the normal range)
 * and each sum rounded once to nearest even (a fused multiply-add), subnormal bf16 inputs and
 * accumulators read as 0 and subnormal sums flushed (DAZ, FTZ; the products themselves are not
 * flushed): what vdpbf16ps does on AMD Zen 4 and Zen 5 (measured; on Zen 5 every near-subnormal
 * case of 200 test seeds agreed bit for bit) and, for the order, what the SDM's pseudocode says
 * for Intel. Overflow past the float range is not emulated bit for bit. */
#ifndef ATTN_BF16_INTERNAL_H
#define ATTN_BF16_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "attn/core.h"
#include "attn/kernels.h"  /* attn_transpose */
#include "flash_kernels.h" /* attn_softmax_tile */

/* What runs a table's pair products, and so the ceiling its speed is measured against: FMAs
 * (the emulations: the FMA peak), vdpbf16ps (its own peak) or AMX tiles (TDPBF16PS's). */
typedef enum attn_bf16_unit { ATTN_BF16_UNIT_FMA, ATTN_BF16_UNIT_DPBF16PS, ATTN_BF16_UNIT_AMX } attn_bf16_unit;

typedef struct attn_bf16_kernels {
    const char *name;
    attn_bf16_unit unit;
    /* The flash softmax whose bits softmax_pairs / probs_ds_pairs reproduce (flash_kernels.h's
     * attn_softmax_tile): the flash driver fuses them only with a flash table of the same one. */
    int fused_softmax_tile;
    /* C[m x n] = ((accumulate ? f_i C : 0) + sum_p A(i, p) . B(p, j)) * outscale, the sum over
     * pair words p = 0 .. kp - 1 in increasing order, one chain per element; A(i, p) =
     * a[i * ars + p * acs] (any strides: A is only broadcast), B(p, j) = b[p * ldb + j],
     * C(i, j) = c[i * ldc + j], f_i = rowscale[i] (1 when NULL). */
    void (*gemm_pairs)(int m, int n, int kp, const uint32_t *a, int64_t ars, int64_t acs, const uint32_t *b,
                       int64_t ldb, float *c, int64_t ldc, int accumulate, const float *rowscale, float outscale);
    /* C[m x n] = C diag(f) + sum_p A(i, p) . B(p, j), A(i, p) = a[i * ars + p]: gemm_pairs with
     * accumulate and each column j of C scaled by f[j] first (the flash forward's O^T, whose
     * columns are query rows: flash.c's v_across). NULL where a table has none (all but AMX's). */
    void (*gemm_pairs_colscale)(int m, int n, int kp, const uint32_t *a, int64_t ars, const uint32_t *b, int64_t ldb,
                                float *c, int64_t ldc, const float *f);
    /* C[m x n] = (accumulate ? C : 0) + sum_p A(i, p) . B(p, j), A(i, p) = a[i * ars + p], B in
     * panels of 16 columns: B(p, j) = b[(j / 16) kp 16 + p 16 + j % 16] (gemm_bf16.c packs so
     * where a table has this); each element the same chain as gemm_pairs's. NULL where a table
     * has none (all but AMX's, whose B tiles are then 1 KB contiguous). */
    void (*gemm_panels)(int m, int n, int kp, const uint32_t *a, int64_t ars, const uint32_t *b, float *c, int64_t ldc,
                        int accumulate);
    /* dst[p * ldd + j] = pair(bf16(src[2p * lds + j]), bf16(src[(2p + 1) * lds + j])) for
     * p < ceil(rows / 2), j < cols; the missing row of an odd count reads 0. bf16() rounds to
     * nearest even with subnormal inputs flushed (vcvtneps2bf16). */
    void (*pair_rows_f32)(int rows, int cols, const float *src, int64_t lds, uint32_t *dst, int64_t ldd);
    /* The bf16 backward's roundings of a tile [rows x cols] of P and dS (leading dimension ld) in
     * one pass: their rows as A-operand words, pw[r * ldw + q] = pair(bf16(p[r][2q]),
     * bf16(p[r][2q + 1])) for q < ceil(cols / 2) (an odd count's missing column reads 0), dsw
     * the same of ds; and (dsv not NULL) ds's rows paired as pair_rows_f32 does,
     * dsv[k * ldv + x] = pair(bf16(ds[2k][x]), bf16(ds[2k + 1][x])). */
    void (*pair_tile_grads)(int rows, int cols, const float *p, const float *ds, int64_t ld, uint32_t *pw,
                            uint32_t *dsw, int64_t ldw, uint32_t *dsv, int64_t ldv);
    /* The same from bf16 rows (no rounding: the VNNI interleave). */
    void (*pair_rows_bf16)(int rows, int cols, const uint16_t *src, int64_t lds, uint32_t *dst, int64_t ldd);
    /* dst[i] = bf16(src[i] * (f ? *f : 1)), i < n. */
    void (*round_row)(int n, const float *src, const float *f, uint16_t *dst);
    /* Fused flash steps, bit for bit the AVX-512 flash tile kernels' (flash_kernels.h)
     * bf16 entries followed by the rounding above, without the float tile stored and read back;
     * NULL where a table has none (the portable one: its driver runs the two steps), and valid
     * only with flash tile kernels whose softmax_tile is fused_softmax_tile (the AVX-512 ones: their
     * exp2 is softmax_tile_avx512.h's).
     * softmax_pairs: softmax_update_bf16(rows, cols, s, lds, mrun, l, alpha, NULL), then P's rows
     * paired into pw as pair_rows_f32(rows, cols, P, lds, pw, ldw) would; s is left as it was.
     * probs_ds_pairs: probs_and_ds_bf16 on s and dp (no dS or P stored), then pair_tile_grads
     * of the P and dS tiles into pw, dsw (ldw) and dsv (ldv; nullable). */
    void (*softmax_pairs)(int rows, int cols, float *s, int64_t lds, float *mrun, float *l, float *alpha, uint32_t *pw,
                          int64_t ldw);
    void (*probs_ds_pairs)(int rows, int cols, const float *s, const float *dp, int64_t ld, const float *m,
                           const float *ll, const float *dsum, float scale, uint32_t *pw, uint32_t *dsw, int64_t ldw,
                           uint32_t *dsv, int64_t ldv);
} attn_bf16_kernels;

const attn_bf16_kernels *attn_bf16_kernels_ref(void);
#if defined(ATTN_HAVE_X86) && ATTN_HAVE_X86
const attn_bf16_kernels *attn_bf16_kernels_avx512bf16(void);
/* The same kernels on AVX-512F alone, each instruction emulated bit for bit (bf16_avx512.c). */
const attn_bf16_kernels *attn_bf16_kernels_avx512(void);
/* The same emulation in AVX2 + FMA registers (bf16_avx2.c). */
const attn_bf16_kernels *attn_bf16_kernels_avx2(void);
float attn_dpbf16_loop_avx512bf16(int64_t iters, int *chains, int *lanes);
/* AMX tiles (bf16_amx.c): NULL when the CPU has no AMX-BF16 or Linux refuses the tile state.
 * Tested on the hardware where present and everywhere through an emulation of the instructions
 * (amx_emulate.h, test_amx_emulated). */
const attn_bf16_kernels *attn_bf16_kernels_amx(void);
/* The AMX peak loop (bf16_amx.c): iters rounds of *chains TDPBF16PS of *lanes pair lanes. */
float attn_amx_loop_tiles(int64_t iters, int *chains, int *lanes);
int attn_cpu_has_amx_bf16(void);
#endif
/* The AVX-512 pair kernels where AMX tiles do not serve: vdpbf16ps, or its FMA emulation where
 * that is faster (Intel: vdpbf16ps at half the FMA rate) or the CPU lacks AVX512-BF16;
 * ATTN_VDPBF16PS=1 / 0 forces one on an AVX512-BF16 CPU. *why (nullable) says why, for
 * `attn info`. Both give the same bits (tests compare them). The portable kernels off x86. */
const attn_bf16_kernels *attn_bf16_kernels_avx512_pairs(const char **why);
/* The kernels of the active ISA's context (registry.h): with AVX-512, AMX tiles where the CPU has
 * AMX-BF16 and Linux grants the tile state (unless ATTN_AMX=0 in the environment declines them),
 * else attn_bf16_kernels_avx512_pairs (vdpbf16ps or its emulation on AVX-512F); with AVX2, the
 * emulation on AVX2 + FMA; the reference otherwise (isa_<name>.c make the choice). */
const attn_bf16_kernels *attn_bf16_kernels_active(void);
/* Test hook: while k is not NULL, attn_bf16_kernels_active() is k (one the CPU can run) whatever
 * the ISA, so that a test can swap the bf16 kernels alone and keep every fp32 kernel (exp,
 * layernorm, GELU) the same: the results must then agree bit for bit. */
void attn__bf16_force(const attn_bf16_kernels *k);
/* The AMX kernels when the CPU has AMX-BF16 and Linux grants the tile state, NULL otherwise,
 * whatever ATTN_AMX says (any architecture; tests call it). */
const attn_bf16_kernels *attn_bf16_kernels_try_amx(void);
/* Does the CPU have AVX512-BF16? */
int attn_cpu_has_avx512bf16(void);

/* dst[c * ldd + r] = src[r * lds + c], r < rows, c < cols: 32-bit words moved exactly, by the
 * active flash kernels' transposing copy (16 x 16 in registers; its scale 1 copies the bit
 * patterns). Defined in gemm_bf16.c; the AMX kernel transposes flash's P words with it. */
void attn_bf16_words_across(int rows, int cols, const uint32_t *src, int64_t lds, uint32_t *dst, int64_t ldd);

/* B of a bf16 GEMM rounded and packed once, for a B that does not change (a frozen model's
 * weight): the panels attn_gemm_bf16_from_f32 would pack, at the panel width (npc columns) of the
 * table active when packed. attn_gemm_bf16_from_f32_packed takes them while that width is the
 * active table's and the shape is theirs, and packs b itself otherwise: bit for bit
 * attn_gemm_bf16_from_f32 either way. */
typedef struct attn_bf16_packed_b {
    int64_t n, k;
    int npc;
    uint32_t *words; /* ceil(n / npc) npc ceil(k / 2), owned (attn_bf16_packed_b_free) */
} attn_bf16_packed_b;
attn_status attn_bf16_pack_b(attn_transpose transb, int64_t n, int64_t k, const float *b, int64_t ldb,
                             attn_bf16_packed_b *out);
void attn_bf16_packed_b_free(attn_bf16_packed_b *p);
attn_status attn_gemm_bf16_from_f32_packed(attn_transpose transa, attn_transpose transb, int64_t m, int64_t n,
                                           int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                                           const attn_bf16_packed_b *pb, int accumulate, float *c, int64_t ldc,
                                           void *workspace, size_t workspace_bytes);

/* Scalar helpers shared by the reference and the drivers. */
static inline float attn_bf16_f(uint16_t x) {
    const uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Round to nearest even, subnormal inputs to signed zero, NaN to a quiet NaN (vcvtneps2bf16). */
static inline uint16_t attn_bf16_rne_daz(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline uint32_t attn_pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

#endif
