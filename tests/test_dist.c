/* attn dist (include/attn/dist.h). As a plain process: the sharding rule, and in a build without
 * MPI the ATTN_ERR_UNSUPPORTED answers. Under mpirun (tests/dist_test.sh runs it on 2 and 3 ranks):
 * the collectives, and the gradient reduction bitwise equal to the one-process left fold. */
#include "test_util.h"

/* Micro-batch k's gradient element e: deterministic, with magnitudes spread over many binades so
 * that a reassociated sum would differ. */
static float micro_grad(int64_t k, size_t e) {
    const float u = attn_philox_uniform(99, (uint64_t)k, (uint64_t)e) - 0.5f;
    return ldexpf(u, (int)((k * 7 + (int64_t)e) % 23) - 11);
}

static void test_shard(void) {
    int64_t first = -1, count = -1;
    CHECK_OK(attn_dist_shard(12, 2, 1, 3, &first, &count));
    CHECK(first == 4 && count == 4, "shard 12/3 rank 1: %lld %lld", (long long)first, (long long)count);
    CHECK_OK(attn_dist_shard(6, 6, 0, 1, &first, &count));
    CHECK(first == 0 && count == 6, "shard 6/1");
    CHECK_STATUS(attn_dist_shard(7, 1, 0, 2, &first, &count), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dist_shard(8, 3, 0, 2, &first, &count), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dist_shard(8, 1, 2, 2, &first, &count), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_dist_shard(8, 1, 0, 2, NULL, &count), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_no_mpi(void) {
    attn_dist *d = (attn_dist *)1;
    CHECK_STATUS(attn_dist_init(&d), ATTN_ERR_UNSUPPORTED);
    CHECK(d == NULL, "init leaves NULL");
    CHECK(strstr(attn_last_error(), "no MPI") != NULL, "message: %s", attn_last_error());
    CHECK_STATUS(attn_dist_allreduce_grads(NULL, NULL, NULL, 1), ATTN_ERR_UNSUPPORTED);
    CHECK(attn_dist_size(NULL) == 1 && attn_dist_rank(NULL) == 0, "size 1, rank 0");
}

/* Under mpirun: every rank holds L micro-batches; the result must equal the left fold of all
 * N L micro-gradients in global order, computed here by every rank alone. */
static void test_collectives(attn_dist *d) {
    const int r = attn_dist_rank(d), n = attn_dist_size(d);
    attn_embedding *e = NULL;
    CHECK_OK(attn_embedding_create(37, 5, -1, &e)); /* 185 floats: slices of unequal length */
    if (!e) return;
    const attn_params *ps = attn_embedding_params(e);
    const size_t p = attn_params_numel(ps);
    const attn_param *q = attn_params_get(ps, 0);
    for (int64_t L = 1; L <= 3; L++) {
        float *local = malloc(sizeof(float) * p * (size_t)L), *want = malloc(sizeof(float) * p);
        for (int64_t k = 0; k < L; k++)
            for (size_t i = 0; i < p; i++) local[(size_t)k * p + i] = micro_grad(r * L + k, i);
        for (size_t i = 0; i < p; i++) {
            float acc = micro_grad(0, i);
            for (int64_t k = 1; k < n * L; k++) acc += micro_grad(k, i);
            want[i] = acc;
        }
        if (L == 1) { /* from the parameters' own gradients */
            memcpy(q->grad, local, sizeof(float) * p);
            CHECK_OK(attn_dist_allreduce_grads(d, ps, NULL, 1));
        } else {
            CHECK_OK(attn_dist_allreduce_grads(d, ps, local, L));
        }
        CHECK(memcmp(q->grad, want, sizeof(float) * p) == 0, "rank %d of %d, %lld micro-batches each: not the fold", r,
              n, (long long)L);
        free(local);
        free(want);
    }
    /* broadcast from rank 0 */
    for (size_t i = 0; i < p; i++) q->data[i] = (float)(r * 1000 + (int)i);
    CHECK_OK(attn_dist_broadcast_params(d, ps));
    int same = 1;
    for (size_t i = 0; i < p; i++) same &= q->data[i] == (float)i;
    CHECK(same, "broadcast: rank %d has rank 0's values", r);
    /* allgather, agree, check_same */
    float mine[2] = {(float)r, (float)(10 * r)}, *all = malloc(sizeof(float) * 2 * (size_t)n);
    CHECK_OK(attn_dist_allgather_f32(d, mine, 2, all));
    for (int j = 0; j < n; j++) CHECK(all[2 * j] == (float)j && all[2 * j + 1] == (float)(10 * j), "allgather %d", j);
    free(all);
    int flags = -1;
    CHECK_OK(attn_dist_agree(d, r == n - 1 ? 4 : 0, &flags));
    CHECK(flags == 4, "agree: %d", flags);
    CHECK_OK(attn_dist_check_same(d, 42, "the answer"));
    CHECK_STATUS(attn_dist_check_same(d, r == 1 ? 43 : 42, "the answer"), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "the answer") && strstr(attn_last_error(), "rank 1"), "message: %s",
          attn_last_error());
    CHECK(attn_dist_reduce_seconds(d) > 0, "reduce time counted");
    attn_embedding_free(e);
}

int main(void) {
    printf("test_dist: MPI %s\n", attn_dist_available() ? "available" : "absent");
    test_shard();
    if (!attn_dist_available()) {
        test_no_mpi();
    } else if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE")) {
        attn_dist *d = NULL;
        CHECK_OK(attn_dist_init(&d));
        if (d) {
            test_collectives(d);
            printf("rank %d of %d\n", attn_dist_rank(d), attn_dist_size(d));
            attn_dist_free(d);
        }
    }
    return test_summary("test_dist");
}
