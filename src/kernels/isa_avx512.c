/* The AVX-512 (F, BW, DQ, VL) context, compiled with the AVX-512 flags and run only where the CPU
 * has them. Two choices are made here from the CPU: the flash tile kernel's register rows and
 * what runs the bf16 pair products (AMX tiles, vdpbf16ps, or its emulation by FMAs). */
#include <stdlib.h>
#include <string.h>

#include "core/tuning.h"
#include "registry.h"

int attn_flash_avx512_rows(const char **why) {
    const char *e = getenv("ATTN_FLASH_ROWS");
    if (e && (!strcmp(e, "4") || !strcmp(e, "6"))) {
        if (why) *why = "ATTN_FLASH_ROWS";
        return e[0] - '0';
    }
    /* 6 rows measured 4-12% faster than 4 in the forward, 1-10% in the backward on Intel Ice
     * Lake-SP (docs/performance-log.md §7); on AMD Zen 5 the two are within 2% of each other
     * either way (paired, §8), so AMD keeps the 4 the kernels were tuned with */
    const int intel = !strcmp(attn_cpu_uarch()->vendor, "GenuineIntel");
    if (why)
        *why = e       ? "ATTN_FLASH_ROWS is not 4 or 6, ignored; by the CPU's vendor"
               : intel ? "Intel: measured faster on Ice Lake-SP"
                       : "AMD: as tuned; 6 rows no faster on Zen 5";
    return intel ? 6 : 4;
}

void attn_isa_init_avx512(attn_kernel_ctx *c) {
    c->gemm_base = attn_gemm_arch_avx512();
    c->ops = &attn_ops_avx512;
    const int rows = attn_flash_avx512_rows(&c->flash_note);
    c->flash = attn_flash_kernels_avx512_rows(rows);
    c->decode = attn_decode_kernels_avx512();
    c->linear_vec = &attn_linear_vec_avx512;
    c->peak_fma = attn_fma_loop_avx512;
    /* AMX tiles unless declined (ATTN_AMX=0): several times vdpbf16ps on Sapphire Rapids
     * (docs/performance-log.md section 12) */
    const char *e = getenv("ATTN_AMX");
    const attn_bf16_kernels *amx = e && !strcmp(e, "0")        ? NULL
                                   : attn_cpu_has_avx512bf16() ? attn_bf16_kernels_amx()
                                                               : NULL;
    c->bf16 = amx ? amx : attn_bf16_kernels_avx512_pairs(&c->bf16_note);
    if (attn_cpu_has_avx512bf16()) c->peak_dpbf16 = attn_dpbf16_loop_avx512bf16;
    if (amx) c->peak_amx = attn_amx_loop_tiles;
}
