/* bf16_amx.c's kernel on the C emulation of the AMX instructions (src/kernels/amx_emulate.h),
 * linked into test_amx_emulated only: runs on any machine, AMX or not. */
#define ATTN_AMX_EMULATE
#include "kernels/bf16_amx.c"

/* Another library's use of the calling thread's tiles between two of attn's calls (the test's
 * entry): how 0 releases them (TILERELEASE), 1 configures other shapes (8 rows x 32 bytes). */
void attn_amx_emulated_foreign_tiles(int how);
void attn_amx_emulated_foreign_tiles(int how) {
    if (how == 0) {
        _tile_release();
        return;
    }
    static const tile_config other = {.palette_id = 1, .colsb = {32, 32, 32, 32}, .rows = {8, 8, 8, 8}};
    _tile_loadconfig(&other);
}
