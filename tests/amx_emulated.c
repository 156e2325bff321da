/* bf16_amx.c's kernel on the C emulation of the AMX instructions (src/kernels/amx_emulate.h),
 * linked into test_amx_emulated only: runs on any machine, AMX or not. */
#define ATTN_AMX_EMULATE
#include "kernels/bf16_amx.c"
