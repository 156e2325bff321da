/* The block loop of a decode chunk, shared by the ISAs' decode kernels (decode_avx2.c,
 * decode_avx512.c), which differ in register width, tiles and reductions but not in the order of
 * the steps. The including file defines, before including this:
 *   scores(nr, bf16, jb, q, j0, nb, s)        s[r][j] = q_r . k_(j0 + j), nr <= 4 a constant;
 *   softmax_row(s, nb, out, dv) -> alpha      the online softmax of one row over one block;
 *   pv_rows(nr, bf16, jb, j0, nb, s, alpha, o) acc rows += P V over the block, nr <= 4;
 *   prefetch_row(p, bytes)                    a value row on its way while the scores form.
 * The math is decode_kernels.h's. */
#ifndef ATTN_DECODE_CHUNK_BODY_H
#define ATTN_DECODE_CHUNK_BODY_H

static inline __attribute__((always_inline)) void chunk(const attn_decode_job *jb, const int bf16) {
    float s[ATTN_DECODE_MAXG][BK], alpha[ATTN_DECODE_MAXG];
    const int g = jb->g;
    const int64_t esz = bf16 ? 2 : 4;
    attn_decode_rows_init(jb);
    for (int64_t j0 = 0; j0 < jb->n; j0 += BK) {
        const int nb = (int)(jb->n - j0 < BK ? jb->n - j0 : BK);
        for (int j = 0; j < nb; j++) prefetch_row((const char *)jb->v + (j0 + j) * jb->ldv * esz, jb->dv * esz);
        for (int r0 = 0; r0 < g; r0 += 4) {
            const float *q = jb->q + r0 * jb->d;
            switch (g - r0 < 4 ? g - r0 : 4) {
            case 1: scores(1, bf16, jb, q, j0, nb, s + r0); break;
            case 2: scores(2, bf16, jb, q, j0, nb, s + r0); break;
            case 3: scores(3, bf16, jb, q, j0, nb, s + r0); break;
            default: scores(4, bf16, jb, q, j0, nb, s + r0); break;
            }
        }
        attn_decode_mask_block(jb, j0, nb, s);
        for (int r = 0; r < g; r++) alpha[r] = softmax_row(s[r], nb, jb->out + r * jb->ldo, jb->dv);
        for (int r0 = 0; r0 < g; r0 += 4) {
            float *o = jb->out + r0 * jb->ldo;
            switch (g - r0 < 4 ? g - r0 : 4) {
            case 1: pv_rows(1, bf16, jb, j0, nb, s + r0, alpha + r0, o); break;
            case 2: pv_rows(2, bf16, jb, j0, nb, s + r0, alpha + r0, o); break;
            case 3: pv_rows(3, bf16, jb, j0, nb, s + r0, alpha + r0, o); break;
            default: pv_rows(4, bf16, jb, j0, nb, s + r0, alpha + r0, o); break;
            }
        }
    }
}

#endif
