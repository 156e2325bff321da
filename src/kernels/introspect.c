/* The introspection API (attn/introspect.h): read-only views of the registry and the active
 * kernel context. */
#include "attn/introspect.h"

#include <string.h>

#include "core/internal.h"
#include "core/tuning.h"
#include "registry.h"

attn_status attn_isa_describe(attn_isa isa, attn_isa_desc *out) {
    ATTN_CHECK_NOT_NULL("attn_isa_describe", out);
    if ((int)isa < 0 || (int)isa >= ATTN_ISA_COUNT)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_isa_describe: isa %d outside 0 .. %d", (int)isa,
                          ATTN_ISA_COUNT - 1);
    const attn_isa_row *r = attn_isa_registry_row(isa);
    memset(out, 0, sizeof *out);
    out->name = attn_isa_name(isa);
    if (r) {
        out->required = r->required;
        out->built = 1;
        out->runnable = (attn_cpu_feature_bits() & r->required) == r->required;
    }
    return ATTN_OK;
}

attn_status attn_kernel_info_get(attn_kernel_info *out) {
    ATTN_CHECK_NOT_NULL("attn_kernel_info_get", out);
    const attn_kernel_ctx *c = attn_kernel_ctx_active();
    memset(out, 0, sizeof *out);
    out->isa = c->isa;
    out->isa_name = c->name;
    out->gemm_name = c->gemm->name;
    out->gemm_mr = c->gemm->mr;
    out->gemm_nr = c->gemm->nr;
    out->gemm_kc = c->gemm->kc;
    out->gemm_nc = c->gemm->nc;
    out->gemm_mc = c->gemm->mc;
    out->gemm_tuned_kc = c->gemm_base->kc;
    out->gemm_tuned_nc = c->gemm_base->nc;
    out->gemm_tuned_mc = c->gemm_base->mc;
    out->flash_name = c->flash->name;
    out->flash_br = ATTN_FLASH_BR;
    out->flash_bc = ATTN_FLASH_BC;
    out->flash_register_rows = c->flash->register_rows;
    out->flash_note = c->flash_note;
    const attn_bf16_kernels *b = attn_bf16_kernels_active();
    out->bf16_name = b->name;
    out->bf16_unit = b->unit == ATTN_BF16_UNIT_AMX        ? ATTN_UNIT_AMX
                     : b->unit == ATTN_BF16_UNIT_DPBF16PS ? ATTN_UNIT_DPBF16PS
                                                          : ATTN_UNIT_FMA;
    out->bf16_note = b == c->bf16 ? c->bf16_note : NULL;
    out->decode_name = c->decode->name;
    out->decode_chunk = ATTN_DECODE_CHUNK;
    out->decode_block = ATTN_DECODE_BK;
    out->decode_max_group = ATTN_DECODE_MAXG;
    const attn_cache_sizes *cs = attn_cpu_caches();
    out->l1d = cs->l1d;
    out->l2 = cs->l2;
    out->l3 = cs->l3;
    out->l1d_source = cs->l1d_src;
    out->l2_source = cs->l2_src;
    out->l3_source = cs->l3_src;
    const attn_uarch *u = attn_cpu_uarch();
    out->vendor = u->vendor;
    out->family = u->family;
    out->model = u->model;
    out->uarch = u->name;
    out->cache_env = attn_cache_env(&out->cache_env_problem);
    return ATTN_OK;
}

float attn_peak_loop(attn_compute_unit unit, int64_t iters, int *chains, int *lanes) {
    const attn_kernel_ctx *c = attn_kernel_ctx_active();
    int ch = 0, ln = 0;
    float r = 0.0f;
    attn_peak_loop_fn f = unit == ATTN_UNIT_FMA        ? c->peak_fma
                          : unit == ATTN_UNIT_DPBF16PS ? c->peak_dpbf16
                          : unit == ATTN_UNIT_AMX      ? c->peak_amx
                                                       : NULL;
    if (f && iters >= 0) r = f(iters, &ch, &ln);
    if (chains) *chains = ch;
    if (lanes) *lanes = ln;
    return r;
}
