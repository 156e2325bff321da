/* attn info: version, CPU, chosen kernels, threads. */
#include <stdio.h>

#include "cli.h"
#include "cli_opts.h"
#include "core/dispatch.h"
#include "kernels/bf16_internal.h"

int cmd_info(int argc, char **argv) {
    cli_opt opts[] = {CLI_END};
    int parsed = cli_parse("info", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        printf("usage: attn info\n\nPrints the version, the CPU features found, the kernels "
               "chosen for this CPU\n(ATTN_ISA=ref|avx2|avx512 forces one), the bf16 kernels and the thread "
               "count (ATTN_NUM_THREADS or OMP_NUM_THREADS).\n");
        return 0;
    }
    if (parsed) return parsed;
    printf("attn %s\n", ATTN_VERSION_STRING);
    printf("cpu features: %s\n", attn_cpu_features()[0] ? attn_cpu_features() : "(none)");
    printf("best isa:     %s\n", attn_isa_name(attn_detected_isa()));
    printf("kernels:      %s\n", attn_isa_name(attn_active_isa()));
    printf("bf16 kernels: %s (ATTN_AMX=0 declines AMX tiles)\n", attn_kernel_ctx_active()->bf16->name);
    printf("threads:      %d\n", attn_get_num_threads());
    return 0;
}
