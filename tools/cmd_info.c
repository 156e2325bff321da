/* attn info: version, CPU, chosen kernels, threads, and the tuning: the microarchitecture, the
 * cache sizes (and where they came from) and the blocking derived from them. */
#include <stdio.h>

#include "cli.h"
#include "cli_opts.h"

/* "48 KiB", "1 MiB", "1280 KiB" */
static const char *size_str(int64_t b, char *buf, size_t n) {
    if (b % (1 << 20) == 0)
        snprintf(buf, n, "%lld MiB", (long long)(b >> 20));
    else if (b % 1024 == 0)
        snprintf(buf, n, "%lld KiB", (long long)(b >> 10));
    else
        snprintf(buf, n, "%lld B", (long long)b);
    return buf;
}

static void print_tuning(const attn_kernel_info *k) {
    char a[32], b[32], c[32];
    if (k->vendor[0])
        printf("microarch:    %s family 0x%x model 0x%x: %s\n", k->vendor, k->family, k->model, k->uarch);
    else
        printf("microarch:    not x86: %s\n", k->uarch);
    printf("caches:       L1d %s (%s), L2 %s (%s), L3 %s (%s)\n", size_str(k->l1d, a, sizeof a), k->l1d_source,
           size_str(k->l2, b, sizeof b), k->l2_source, size_str(k->l3, c, sizeof c), k->l3_source);
    if (k->cache_env)
        printf("ATTN_CACHE:   \"%s\"%s%s\n", k->cache_env, k->cache_env_problem ? ": ignored, " : " applied",
               k->cache_env_problem ? k->cache_env_problem : "");
    printf("sgemm (%s):  MR %d x NR %d; KC %d (A micro-panel %s, <= 2/3 of L1d, tuned cap %d); NC %d (B~ %s of\n"
           "              L2, as the tuned %d is of 1 MiB); MC %d (A~ %s of L3 up to 32 MiB, tuned %d)\n",
           k->gemm_name, k->gemm_mr, k->gemm_nr, k->gemm_kc,
           size_str((int64_t)k->gemm_mr * k->gemm_kc * 4, a, sizeof a), k->gemm_tuned_kc, k->gemm_nc,
           size_str((int64_t)k->gemm_kc * k->gemm_nc * 4, b, sizeof b), k->gemm_tuned_nc, k->gemm_mc,
           size_str((int64_t)k->gemm_mc * k->gemm_kc * 4, c, sizeof c), k->gemm_tuned_mc);
    printf("flash tiles:  %d query rows x %d keys (fixed: not derived from the caches)\n", k->flash_br, k->flash_bc);
    if (k->flash_register_rows)
        printf("flash %s: register tiles of %d rows x 64 columns (%s)\n", k->isa_name, k->flash_register_rows,
               k->flash_note ? k->flash_note : "fixed");
    printf(
        "flash bwd:    key runs of up to %lld blocks at d=64, %lld at d=128 (fp32; bf16 %lld, %lld): a run's K and V\n"
        "              within the L2 (%s), instead of the whole head's streaming from the L3 for each query block\n",
        (long long)attn_flash_backward_key_blocks(64, 64, ATTN_TYPE_F32),
        (long long)attn_flash_backward_key_blocks(128, 128, ATTN_TYPE_F32),
        (long long)attn_flash_backward_key_blocks(64, 64, ATTN_TYPE_BF16),
        (long long)attn_flash_backward_key_blocks(128, 128, ATTN_TYPE_BF16), size_str(k->l2, a, sizeof a));
    printf("decode:       split-K chunks of %d keys, blocks of %d, up to %d query heads per call (fixed)\n",
           k->decode_chunk, k->decode_block, k->decode_max_group);
}

/* The registry's rows: which ISAs this build has and which this CPU runs. */
static void print_isas(void) {
    printf("isas:        ");
    for (int i = 0; i < ATTN_ISA_COUNT; i++) {
        attn_isa_desc d;
        if (attn_isa_describe((attn_isa)i, &d) != ATTN_OK) continue;
        printf(" %s (%s)", d.name, !d.built ? "not built" : d.runnable ? "runs here" : "not on this CPU");
    }
    printf("\n");
}

int cmd_info(int argc, char **argv) {
    cli_opt opts[] = {CLI_END};
    int parsed = cli_parse("info", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        printf("usage: attn info\n\nPrints the version, the CPU features found, the kernels "
               "chosen for this CPU\n(ATTN_ISA=ref|avx2|avx512 forces one), the bf16 kernels (ATTN_AMX=0 declines AMX "
               "tiles,\nATTN_VDPBF16PS=1|0 runs or emulates vdpbf16ps) and the thread "
               "count (ATTN_NUM_THREADS or OMP_NUM_THREADS),\nthe microarchitecture recognised, the cache sizes "
               "and where they came from\n(cpuid, sysfs, a table of known parts, a default; "
               "ATTN_CACHE=\"l1=48K,l2=2M,l3=32M\" "
               "overrides\nany of them) and the blocking derived from them.\n");
        return 0;
    }
    if (parsed) return parsed;
    attn_kernel_info k;
    if (attn_kernel_info_get(&k) != ATTN_OK) return cli_fail("info: %s", attn_last_error());
    printf("attn %s\n", ATTN_VERSION_STRING);
    printf("cpu features: %s\n", attn_cpu_features()[0] ? attn_cpu_features() : "(none)");
    printf("best isa:     %s\n", attn_isa_name(attn_detected_isa()));
    print_isas();
    printf("kernels:      %s\n", k.isa_name);
    printf("bf16 kernels: %s (AMX tiles where granted; ATTN_AMX=0 declines them)\n", k.bf16_name);
    if (k.bf16_note) printf("bf16 pairs:   %s\n", k.bf16_note);
    printf("threads:      %d\n", attn_get_num_threads());
    print_tuning(&k);
    return 0;
}
