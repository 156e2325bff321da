/* Test-only: an instruction-level C emulation of the AMX intrinsics bf16_amx.c uses
 * (_tile_loadconfig, _tile_storeconfig, _tile_loadd, _tile_stream_loadd, _tile_stored, _tile_zero,
 * _tile_dpbf16ps, _tile_release), so that the AMX kernel runs and is checked on machines without
 * AMX. Included by bf16_amx.c only when it is compiled with -DATTN_AMX_EMULATE
 * (tests/amx_emulated.c); never in the library.
 *
 * Palette 1 as in the Intel SDM: 8 tiles of at most 16 rows x 64 bytes, one per-thread state.
 * TILECFG (64 bytes): byte 0 palette, byte 1 start_row, bytes 2-15 reserved (zero), bytes 16-47
 * colsb[16] (uint16), bytes 48-63 rows[16]; tiles 8-15 must be unconfigured. Where the hardware
 * would fault (#GP/#UD: a bad configuration, an unconfigured or mis-shaped tile, TDPBF16PS on
 * incompatible shapes or aliased tiles) the emulation aborts with a message, so a kernel's tile
 * shapes are really checked. Loads read exactly rows x colsb bytes of memory at base + r * stride
 * (so ASan catches a tile load past an operand) and zero the rest of the tile, as TILELOADD does.
 *
 * TDPBF16PS, per the SDM's pseudocode: for each row m, pair k, column n,
 *   acc[m][n] += fp32(a[m].bf16[2k]) * fp32(b[k].bf16[2n]);
 *   acc[m][n] += fp32(a[m].bf16[2k+1]) * fp32(b[k].bf16[2n+1]);
 * bf16 inputs' denormals read as zero, each accumulation rounded to nearest even in float (the
 * products of two bf16 are exact in float), denormal sums flushed to zero. This is our reading
 * of the SDM ("round to nearest even ... when doing each accumulation"); the hardware's internal
 * order or fusion of the pair sum is not documented bit for bit and may differ in the last bit. */
#ifndef ATTN_AMX_EMULATE_H
#define ATTN_AMX_EMULATE_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local struct {
    int configured;
    uint16_t colsb[8];
    uint8_t rows[8];
    uint8_t data[8][16][64];
} attn_amx_emu;

static inline void attn_amx_emu_fault(const char *what, int t) {
    fprintf(stderr, "AMX emulation: fault: %s (tile %d)\n", what, t);
    abort();
}

static inline void attn_amx_emu_loadconfig(const void *cfg) {
    const uint8_t *p = (const uint8_t *)cfg;
    if (p[0] != 1) attn_amx_emu_fault("palette is not 1", -1);
    if (p[1] != 0) attn_amx_emu_fault("start_row is not 0", -1);
    for (int i = 2; i < 16; i++)
        if (p[i]) attn_amx_emu_fault("reserved byte of TILECFG not zero", -1);
    for (int t = 0; t < 16; t++) {
        const uint16_t colsb = (uint16_t)(p[16 + 2 * t] | p[17 + 2 * t] << 8);
        const uint8_t rows = p[48 + t];
        if (t >= 8 ? colsb || rows : colsb > 64 || rows > 16 || (!colsb) != (!rows))
            attn_amx_emu_fault("tile shape outside palette 1", t);
        if (t < 8) {
            attn_amx_emu.colsb[t] = colsb;
            attn_amx_emu.rows[t] = rows;
        }
    }
    memset(attn_amx_emu.data, 0, sizeof attn_amx_emu.data); /* LDTILECFG zeroes the tiles */
    attn_amx_emu.configured = 1;
}

static inline void attn_amx_emu_check(int t) {
    if (!attn_amx_emu.configured) attn_amx_emu_fault("tiles not configured", t);
    if (t < 0 || t >= 8) attn_amx_emu_fault("no such tile", t);
    if (!attn_amx_emu.rows[t]) attn_amx_emu_fault("tile not configured", t);
}

static inline void attn_amx_emu_loadd(int t, const void *base, long stride) {
    attn_amx_emu_check(t);
    memset(attn_amx_emu.data[t], 0, sizeof attn_amx_emu.data[t]);
    for (int r = 0; r < attn_amx_emu.rows[t]; r++)
        memcpy(attn_amx_emu.data[t][r], (const uint8_t *)base + (long)r * stride, attn_amx_emu.colsb[t]);
}

static inline void attn_amx_emu_stored(int t, void *base, long stride) {
    attn_amx_emu_check(t);
    for (int r = 0; r < attn_amx_emu.rows[t]; r++)
        memcpy((uint8_t *)base + (long)r * stride, attn_amx_emu.data[t][r], attn_amx_emu.colsb[t]);
}

static inline void attn_amx_emu_zero(int t) {
    attn_amx_emu_check(t);
    memset(attn_amx_emu.data[t], 0, sizeof attn_amx_emu.data[t]);
}

static inline void attn_amx_emu_release(void) { memset(&attn_amx_emu, 0, sizeof attn_amx_emu); }

/* STTILECFG: the 64-byte configuration in force, all zeros when the tiles are not configured */
static inline void attn_amx_emu_storeconfig(void *cfg) {
    uint8_t *p = (uint8_t *)cfg;
    memset(p, 0, 64);
    if (!attn_amx_emu.configured) return;
    p[0] = 1;
    for (int t = 0; t < 8; t++) {
        p[16 + 2 * t] = (uint8_t)(attn_amx_emu.colsb[t] & 0xff);
        p[17 + 2 * t] = (uint8_t)(attn_amx_emu.colsb[t] >> 8);
        p[48 + t] = attn_amx_emu.rows[t];
    }
}

static inline float attn_amx_emu_bf16(const uint8_t *p) {
    const uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
    float f;
    memcpy(&f, &u, 4);
    return fabsf(f) < FLT_MIN ? copysignf(0.0f, f) : f; /* input denormals read as zero */
}

static inline float attn_amx_emu_ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

static inline void attn_amx_emu_dpbf16ps(int d, int a, int b) {
    attn_amx_emu_check(d);
    attn_amx_emu_check(a);
    attn_amx_emu_check(b);
    if (d == a || d == b || a == b) attn_amx_emu_fault("TDPBF16PS operands not distinct", d);
    const int rows = attn_amx_emu.rows[d], kk = attn_amx_emu.colsb[a] / 4, nn = attn_amx_emu.colsb[d] / 4;
    if (attn_amx_emu.rows[a] != rows || attn_amx_emu.colsb[a] % 4 || attn_amx_emu.rows[b] != kk ||
        attn_amx_emu.colsb[b] != attn_amx_emu.colsb[d] || attn_amx_emu.colsb[d] % 4)
        attn_amx_emu_fault("TDPBF16PS tile shapes incompatible", d);
    for (int m = 0; m < rows; m++) {
        float tmp[16];
        memcpy(tmp, attn_amx_emu.data[d][m], 4 * (size_t)nn);
        for (int k = 0; k < kk; k++)
            for (int n = 0; n < nn; n++) {
                const uint8_t *x = &attn_amx_emu.data[a][m][4 * k], *y = &attn_amx_emu.data[b][k][4 * n];
                tmp[n] = attn_amx_emu_ftz(tmp[n] + attn_amx_emu_bf16(x) * attn_amx_emu_bf16(y));
                tmp[n] = attn_amx_emu_ftz(tmp[n] + attn_amx_emu_bf16(x + 2) * attn_amx_emu_bf16(y + 2));
            }
        memset(attn_amx_emu.data[d][m], 0, 64);
        memcpy(attn_amx_emu.data[d][m], tmp, 4 * (size_t)nn);
    }
}

#define _tile_loadconfig(cfg) attn_amx_emu_loadconfig(cfg)
#define _tile_loadd(t, base, stride) attn_amx_emu_loadd(t, base, (long)(stride))
/* the non-temporal hint changes no value */
#define _tile_stream_loadd(t, base, stride) attn_amx_emu_loadd(t, base, (long)(stride))
#define _tile_stored(t, base, stride) attn_amx_emu_stored(t, base, (long)(stride))
#define _tile_zero(t) attn_amx_emu_zero(t)
#define _tile_release() attn_amx_emu_release()
#define _tile_storeconfig(cfg) attn_amx_emu_storeconfig(cfg)
#define _tile_dpbf16ps(d, a, b) attn_amx_emu_dpbf16ps(d, a, b)

#endif
