/* attn_set_num_threads: the bound ATTN_MAX_THREADS is refused with a message naming it (before, 10^6
 * was accepted and every later call failed allocating per-thread scratch), leaving the count as it
 * was; n <= 0 restores the default; values up to the bound are taken as given. */
#include <limits.h>

#include "test_util.h"

int main(void) {
    const int def = attn_get_num_threads();
    CHECK(def >= 1, "default thread count %d", def);
    CHECK_OK(attn_set_num_threads(3));
#ifdef _OPENMP
    CHECK(attn_get_num_threads() == 3, "set 3, got %d", attn_get_num_threads());
    CHECK_OK(attn_set_num_threads(ATTN_MAX_THREADS));
    CHECK(attn_get_num_threads() == ATTN_MAX_THREADS, "set the bound, got %d", attn_get_num_threads());
    CHECK_OK(attn_set_num_threads(3));
#endif
    const int too_many[] = {ATTN_MAX_THREADS + 1, 1000000, INT_MAX};
    for (size_t i = 0; i < sizeof too_many / sizeof *too_many; i++) {
        const int before = attn_get_num_threads();
        CHECK_STATUS(attn_set_num_threads(too_many[i]), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(strstr(attn_last_error(), "ATTN_MAX_THREADS (4096)") != NULL, "message names the bound: %s",
              attn_last_error());
        CHECK(attn_get_num_threads() == before, "n = %d changed the count from %d to %d", too_many[i], before,
              attn_get_num_threads());
    }
    CHECK_OK(attn_set_num_threads(0));
    CHECK(attn_get_num_threads() == def, "0 restores the default %d, got %d", def, attn_get_num_threads());
    CHECK_OK(attn_set_num_threads(-5));
    CHECK(attn_get_num_threads() == def, "-5 restores the default %d, got %d", def, attn_get_num_threads());
    return test_summary("test_threads");
}
