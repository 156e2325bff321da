/* attn info: version, CPU, chosen kernels, threads, and the tuning: the microarchitecture, the
 * cache sizes (and where they came from) and the blocking derived from them. */
#include <stdio.h>

#include "attention/decode_internal.h"
#include "attention/flash_internal.h"
#include "cli.h"
#include "cli_opts.h"
#include "core/dispatch.h"
#include "core/tuning.h"
#include "kernels/bf16_internal.h"
#include "kernels/gemm_internal.h"

/* "48 KiB", "1 MiB", "1280 KiB" */
static const char *size_str(int64_t b, char *buf, size_t n) {
    if (b % (1 << 20) == 0) snprintf(buf, n, "%lld MiB", (long long)(b >> 20));
    else if (b % 1024 == 0) snprintf(buf, n, "%lld KiB", (long long)(b >> 10));
    else snprintf(buf, n, "%lld B", (long long)b);
    return buf;
}

static void print_tuning(void) {
    const attn_uarch *u = attn_cpu_uarch();
    const attn_cache_sizes *cs = attn_cpu_caches();
    char a[32], b[32], c[32];
    if (u->vendor[0])
        printf("microarch:    %s family 0x%x model 0x%x: %s\n", u->vendor, u->family, u->model, u->name);
    else
        printf("microarch:    not x86: %s\n", u->name);
    printf("caches:       L1d %s (%s), L2 %s (%s), L3 %s (%s)\n", size_str(cs->l1d, a, sizeof a), cs->l1d_src,
           size_str(cs->l2, b, sizeof b), cs->l2_src, size_str(cs->l3, c, sizeof c), cs->l3_src);
    const char *problem, *env = attn_cache_env(&problem);
    if (env) printf("ATTN_CACHE:   \"%s\"%s%s\n", env, problem ? ": ignored, " : " applied", problem ? problem : "");
    const attn_gemm_arch *g = attn_kernel_ctx_active()->gemm;
    const attn_gemm_arch *base = attn_gemm_arch_table(g->isa);
    printf("sgemm (%s):  MR %d x NR %d; KC %d (A micro-panel %s, <= 2/3 of L1d, tuned cap %d); NC %d (B~ %s of\n"
           "              L2, as the tuned %d is of 1 MiB); MC %d (A~ %s of L3 up to 32 MiB, tuned %d)\n",
           attn_isa_name(g->isa), g->mr, g->nr, g->kc, size_str((int64_t)g->mr * g->kc * 4, a, sizeof a), base->kc, g->nc,
           size_str((int64_t)g->kc * g->nc * 4, b, sizeof b), base->nc, g->mc,
           size_str((int64_t)g->mc * g->kc * 4, c, sizeof c), base->mc);
    printf("flash tiles:  %d query rows x %d keys (fixed: not derived from the caches)\n", ATTN_FLASH_BR, ATTN_FLASH_BC);
    if (attn_active_isa() == ATTN_ISA_AVX512) {
        const char *why = "";
        const int rows = attn_flash_avx512_rows(&why);
        printf("flash avx512: register tiles of %d rows x 64 columns (%s)\n", rows, why);
    }
    printf("flash bwd:    key runs of up to %lld blocks at d=64, %lld at d=128 (fp32; bf16 %lld, %lld): a run's K and V\n"
           "              within the L2 (%s), instead of the whole head's streaming from the L3 for each query block\n",
           (long long)attn_flash_key_run_blocks(64, 64, 4, cs->l2), (long long)attn_flash_key_run_blocks(128, 128, 4, cs->l2),
           (long long)attn_flash_key_run_blocks(64, 64, 2, cs->l2), (long long)attn_flash_key_run_blocks(128, 128, 2, cs->l2),
           size_str(cs->l2, a, sizeof a));
    printf("decode:       split-K chunks of %d keys, blocks of %d, up to %d query heads per call (fixed)\n",
           ATTN_DECODE_CHUNK, ATTN_DECODE_BK, ATTN_DECODE_MAXG);
}

int cmd_info(int argc, char **argv) {
    cli_opt opts[] = {CLI_END};
    int parsed = cli_parse("info", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        printf("usage: attn info\n\nPrints the version, the CPU features found, the kernels "
               "chosen for this CPU\n(ATTN_ISA=ref|avx2|avx512 forces one), the bf16 kernels (ATTN_AMX=0 declines AMX "
               "tiles,\nATTN_VDPBF16PS=1|0 runs or emulates vdpbf16ps) and the thread "
               "count (ATTN_NUM_THREADS or OMP_NUM_THREADS),\nthe microarchitecture recognised, the cache sizes "
               "and where they came from\n(cpuid, sysfs, a table of known parts, a default; ATTN_CACHE=\"l1=48K,l2=2M,l3=32M\" "
               "overrides\nany of them) and the blocking derived from them.\n");
        return 0;
    }
    if (parsed) return parsed;
    printf("attn %s\n", ATTN_VERSION_STRING);
    printf("cpu features: %s\n", attn_cpu_features()[0] ? attn_cpu_features() : "(none)");
    printf("best isa:     %s\n", attn_isa_name(attn_detected_isa()));
    printf("kernels:      %s\n", attn_isa_name(attn_active_isa()));
    printf("bf16 kernels: %s (AMX tiles where granted; ATTN_AMX=0 declines them)\n", attn_kernel_ctx_active()->bf16->name);
    if (attn_active_isa() == ATTN_ISA_AVX512 && attn_kernel_ctx_active()->bf16->unit != ATTN_BF16_UNIT_AMX) {
        const char *why;
        attn_bf16_kernels_avx512_pairs(&why);
        printf("bf16 pairs:   %s\n", why);
    }
    printf("threads:      %d\n", attn_get_num_threads());
    print_tuning();
    return 0;
}
