/* The decode path of attn_flash_forward (decode_internal.h): one query row per head against a
 * long key/value cache, split over the keys in fixed chunks and merged in a fixed order.
 *
 * Tasks are (batch, key chunk, key/value head, group slice): the query heads h = g G .. g G + G - 1
 * that read key/value head g are one kernel call, so K and V go through the cores once per group
 * (GQA / MQA included). Each task writes its chunk's acc, m, l; then each row merges its chunks
 * in increasing order:
 *   m = max_c m_c ;  l = sum_c l_c 2^(m_c - m) ;  out = sum_c acc_c 2^(m_c - m) / l
 * Nothing depends on which thread ran a task, so the output is bitwise the same for any thread
 * count (not across ISAs: each ISA's kernel sums in its own order). */
#include <math.h>
#include <string.h>

#include "attention_common.h"
#include "kernels/registry.h"
#include "core/internal.h"
#include "decode_internal.h"
#include "kernels/bf16_internal.h"

#define CHUNK ATTN_DECODE_CHUNK
#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Floats of the packed queries [B Hq][d] and of the chunk results [B][chunks][Hq][dv + 2]. */
static int decode_floats(int64_t b, int64_t hq, int64_t nk, int64_t d, int64_t dv, size_t *qf, size_t *pf) {
    const size_t chunks = (size_t)(nk + CHUNK - 1) / CHUNK;
    size_t rows;
    if (attn_mul_overflow((size_t)b, (size_t)hq, &rows) || attn_mul_overflow(rows, (size_t)d, qf) ||
        attn_mul_overflow(rows, chunks, pf) || attn_mul_overflow(*pf, (size_t)dv + 2, pf))
        return 0;
    *qf = round16(*qf);
    return 1;
}

size_t attn_flash_decode_workspace(int64_t b, int64_t hq, int64_t nk, int64_t d, int64_t dv) {
    size_t qf, pf, total;
    if (b < 0 || hq < 0 || nk < 0 || d < 1 || dv < 1) return 0;
    if (!decode_floats(b, hq, nk, d, dv, &qf, &pf) || attn_add_overflow(qf, pf, &total) ||
        attn_mul_overflow(total, sizeof(float), &total) || attn_add_overflow(total, 64, &total))
        return SIZE_MAX;
    return total;
}

int attn_flash_decode_applies(const attn_ctx *c, const attn_tensor *k, const attn_tensor *v, int general) {
    /* masks and transforms beyond causality, the window and the key mask, and dropout, stay on
     * the general path; K and V rows are read in place */
    return c->nq == 1 && !general && c->p <= 0 && k->stride[3] == 1 && v->stride[3] == 1;
}

attn_status attn_flash_decode(const char *fn, const attn_ctx *c, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, attn_tensor *out, attn_tensor *lse, int64_t jlo, int64_t jhi,
                              void *workspace, size_t workspace_bytes) {
    void *aligned;
    attn_status st = attn_ctx_workspace(fn, workspace, workspace_bytes,
                                        attn_flash_decode_workspace(c->b, c->hq, c->nk, c->d, c->dv), &aligned);
    if (st) return st;
    const int bf16 = q->dtype == ATTN_TYPE_BF16;
    const attn_decode_kernels *kr = attn_kernel_ctx_active()->decode;
    void (*kernel)(const attn_decode_job *) = bf16 ? kr->chunk_bf16 : kr->chunk_f32;
    const int64_t B = c->b, HQ = c->hq, HK = c->hk, G = c->group, d = c->d, dv = c->dv, ldp = dv + 2;
    const int64_t nkeys = jhi > jlo ? jhi - jlo : 0, nch = (nkeys + CHUNK - 1) / CHUNK;
    const int64_t slices = (G + ATTN_DECODE_MAXG - 1) / ATTN_DECODE_MAXG, tasks = B * nch * HK * slices;
    const size_t esz = bf16 ? 2 : 4;
    float *qp = aligned, *parts = qp + round16((size_t)(B * HQ * d));
    const float qscale = (float)(c->scale * LOG2E);
    /* the queries, float and scaled into log2 units, as the flash path's packing scales them */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HQ; h++) {
            float *dst = qp + (b * HQ + h) * d;
            const int64_t base = b * q->stride[0] + h * q->stride[1];
            for (int64_t x = 0; x < d; x++) {
                const int64_t i = base + x * q->stride[3];
                dst[x] = (bf16 ? attn_bf16_f(q->data16[i]) : q->data[i]) * qscale;
            }
        }
    /* Task order: consecutive tasks read consecutive cache memory, so that a thread's share
     * (static schedule: a contiguous run of tasks) is a few long sequential streams the hardware
     * prefetcher follows. Heads outermost within a batch when a head's rows are contiguous
     * ([B, H, N, d]: one K and one V stream per head), chunks outermost when the rows of all heads
     * are interleaved ([B, N, H, d]). The order decides only which thread runs a task, never a
     * result. */
    const int head_major = k->stride[1] >= k->stride[2] && v->stride[1] >= v->stride[2];
#pragma omp parallel num_threads(attn_threads_for(tasks > B * HQ ? tasks : B * HQ))
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t b = t / (slices * HK * nch), r = t % (slices * HK * nch);
            const int64_t sl = head_major ? r / nch % slices : r % slices;
            const int64_t g = head_major ? r / (nch * slices) : r / slices % HK;
            const int64_t ch = head_major ? r % nch : r / (slices * HK);
            const int64_t h0 = g * G + sl * ATTN_DECODE_MAXG, j0 = jlo + ch * CHUNK;
            attn_decode_job jb;
            jb.g = (int)(G - sl * ATTN_DECODE_MAXG < ATTN_DECODE_MAXG ? G - sl * ATTN_DECODE_MAXG : ATTN_DECODE_MAXG);
            jb.d = d;
            jb.dv = dv;
            jb.n = jhi - j0 < CHUNK ? jhi - j0 : CHUNK;
            jb.q = qp + (b * HQ + h0) * d;
            jb.k = (const char *)k->ptr + (size_t)(b * k->stride[0] + g * k->stride[1] + j0 * k->stride[2]) * esz;
            jb.v = (const char *)v->ptr + (size_t)(b * v->stride[0] + g * v->stride[1] + j0 * v->stride[2]) * esz;
            jb.ldk = k->stride[2];
            jb.ldv = v->stride[2];
            jb.km = c->km ? c->km + b * c->kms[0] + j0 * c->kms[1] : NULL;
            jb.kms = c->kms[1];
            jb.out = parts + ((b * nch + ch) * HQ + h0) * ldp;
            jb.ldo = ldp;
            kernel(&jb);
        }
#pragma omp for schedule(static)
        for (int64_t row = 0; row < B * HQ; row++) {
            const int64_t b = row / HQ, h = row % HQ;
            float m = -INFINITY, l = 0.0f;
            for (int64_t ch = 0; ch < nch; ch++) {
                const float mc = parts[((b * nch + ch) * HQ + h) * ldp + dv];
                m = mc > m ? mc : m;
            }
            /* the chunk weights 2^(m_c - m), into each chunk's m slot (no longer needed) */
            for (int64_t ch = 0; ch < nch; ch++) {
                float *pc = parts + ((b * nch + ch) * HQ + h) * ldp;
                pc[dv] = m == -INFINITY || pc[dv] == -INFINITY ? 0.0f : exp2f(pc[dv] - m);
                l += pc[dv + 1] * pc[dv];
            }
            const float inv = l != 0 ? 1.0f / l : 0.0f; /* a NaN l (a NaN score) stays NaN */
            const int64_t ob = b * out->stride[0] + h * out->stride[1];
            for (int64_t x = 0; x < dv; x++) {
                float a = 0.0f;
                for (int64_t ch = 0; ch < nch; ch++) {
                    const float *pc = parts + ((b * nch + ch) * HQ + h) * ldp;
                    a = fmaf(pc[x], pc[dv], a);
                }
                const int64_t oi = ob + x * out->stride[3];
                if (out->dtype == ATTN_TYPE_BF16)
                    out->data16[oi] = attn_bf16_rne_daz(a * inv);
                else
                    out->data[oi] = a * inv;
            }
            if (lse)
                lse->data[b * lse->stride[0] + h * lse->stride[1]] =
                    l != 0 ? (float)(((double)m + log2((double)l)) * LN2) : -INFINITY;
        }
    }
    return ATTN_OK;
}
