/* 8 x 8 float transpose in AVX2 registers, shared by the SGEMM's packing and the flash tables:
 * unpack pairs, shuffle quads, swap 128-bit halves (24 shuffles, no memory round trip). */
#ifndef ATTN_TRANSPOSE_AVX2_H
#define ATTN_TRANSPOSE_AVX2_H

#include <immintrin.h>

/* r[i] holds row i on entry; afterwards r[j] holds column j. Bit patterns move unchanged. */
static inline __attribute__((always_inline)) void attn_transpose8x8(__m256 r[8]) {
    __m256 t[8];
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

#endif
