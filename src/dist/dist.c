/* attn dist: data-parallel training over MPI (see include/attn/dist.h). Compiled in every build;
 * without MPI (ATTN_HAVE_MPI 0) the functions that need it answer ATTN_ERR_UNSUPPORTED. */
#define _POSIX_C_SOURCE 200809L
#include "core/alloc.h"
#include "attn/dist.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"

attn_status attn_dist_shard(int64_t batch, int64_t micro_batch, int rank, int size, int64_t *first, int64_t *count) {
    ATTN_CHECK_NOT_NULL("attn_dist_shard", first);
    ATTN_CHECK_NOT_NULL("attn_dist_shard", count);
    if (batch < 1 || micro_batch < 1 || size < 1 || rank < 0 || rank >= size)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_dist_shard: batch %lld, micro-batch %lld, rank %d of %d: each must be positive "
                          "and the rank below the size",
                          (long long)batch, (long long)micro_batch, rank, size);
    if (batch % size != 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_dist_shard: a batch of %lld does not split over %d ranks",
                          (long long)batch, size);
    const int64_t per = batch / size;
    if (per % micro_batch != 0)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_dist_shard: micro-batch %lld does not divide the %lld examples of each of %d ranks "
                          "(batch %lld)",
                          (long long)micro_batch, (long long)per, size, (long long)batch);
    *first = per * rank;
    *count = per;
    return ATTN_OK;
}

#if ATTN_HAVE_MPI

#include <mpi.h>

struct attn_dist {
    MPI_Comm comm;
    int rank, size;
    int owns_mpi;   /* attn_dist_init initialised MPI: attn_dist_free finalises it */
    float *buf;     /* receive buffer of the reduce-scatter */
    size_t buf_cap; /* floats */
    float *flat;    /* the flattened gradient (kept: fresh pages every step cost page faults) */
    size_t flat_cap;
    double reduce_seconds;
    double timeout; /* seconds a collective may wait (0: no limit), attn_dist_set_timeout */
    int agree[2];   /* attn_dist_agree's operands: a timed-out collective may still write them */
};

static attn_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return attn_error(ATTN_ERR_IO, "%s: MPI error: %s", what, msg);
}

int attn_dist_available(void) { return 1; }

static void nap(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* After a timeout: which ranks answer a ping within a grace period. Every rank that timed out in
 * the same collective pings the others, so a live rank answers; a stopped, hung or lost one does
 * not. Their list goes to buf; returns their count. */
#define PING_TAG 7331
static int silent_ranks(attn_dist *d, char *buf, size_t cap) {
    const int n = d->size;
    MPI_Request *rq = attn__malloc(sizeof(MPI_Request) * 2 * (size_t)n);
    char *got = attn__calloc((size_t)n, 1);
    static const int one = 1; /* read by sends that may outlive the call */
    int *in = attn__malloc(sizeof(int) * (size_t)n), listed = -1;
    snprintf(buf, cap, "? (out of memory)");
    if (!rq || !got || !in) goto out;
    listed = 0;
    for (int j = 0; j < n; j++) {
        rq[j] = rq[n + j] = MPI_REQUEST_NULL;
        if (j == d->rank) continue;
        MPI_Irecv(&in[j], 1, MPI_INT, j, PING_TAG, d->comm, &rq[j]);
        MPI_Isend(&one, 1, MPI_INT, j, PING_TAG, d->comm, &rq[n + j]);
    }
    const double grace = d->timeout < 2.0 ? d->timeout : 2.0, t0 = MPI_Wtime();
    for (int missing = n - 1; missing > 0 && MPI_Wtime() - t0 < grace; nap(1000000)) {
        missing = 0;
        for (int j = 0; j < n; j++) {
            int flag = 0;
            if (j != d->rank && !got[j] && rq[j] != MPI_REQUEST_NULL) MPI_Test(&rq[j], &flag, MPI_STATUS_IGNORE);
            got[j] |= (char)flag;
            missing += j != d->rank && !got[j];
        }
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int j = 0; j < n && used < cap; j++) {
        if (j == d->rank || got[j]) continue;
        if (rq[j] != MPI_REQUEST_NULL) {
            MPI_Cancel(&rq[j]);
            MPI_Request_free(&rq[j]);
        }
        used += (size_t)snprintf(buf + used, cap - used, "%s%d", listed++ ? ", " : "", j);
    }
    for (int j = 0; j < n; j++)
        if (rq[n + j] != MPI_REQUEST_NULL) MPI_Request_free(&rq[n + j]);
    if (listed) in = NULL; /* a cancelled receive might still land: its buffer stays until the abort */
out:
    attn__free(rq), attn__free(got), attn__free(in);
    return listed;
}

/* Waits for a collective begun without blocking: tests it, and between tests sleeps a little
 * longer each time (up to 5 ms) so that waiting for a slow rank does not burn a core; after
 * d->timeout seconds (when set), an error naming the ranks that did not answer. */
static attn_status wait_for(attn_dist *d, int rc, MPI_Request *req, const char *what) {
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
    const double t0 = MPI_Wtime();
    long sleep_ns = 0;
    for (int spins = 0;; spins++) {
        int flag = 0;
        rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
        if (flag) return ATTN_OK;
        const double waited = MPI_Wtime() - t0;
        if (d->timeout > 0 && waited > d->timeout) {
            char list[256];
            if (silent_ranks(d, list, sizeof list) == 0)
                return attn_error(ATTN_ERR_IO,
                                  "%s: rank %d of %d waited %.0f s (the timeout) for the others, yet every rank "
                                  "answered a ping: one is slower than the timeout allows",
                                  what, d->rank, d->size, waited);
            return attn_error(ATTN_ERR_IO,
                              "%s: rank %d of %d waited %.0f s (the timeout) for the others; no answer from "
                              "rank(s) %s: stopped, hung or lost",
                              what, d->rank, d->size, waited, list);
        }
        if (spins < 1000) continue; /* a collective that is about to end: no sleep */
        sleep_ns = sleep_ns < 5000000 ? sleep_ns + 20000 : 5000000;
        nap(sleep_ns);
    }
}

attn_status attn_dist_set_timeout(attn_dist *d, double seconds) {
    ATTN_CHECK_NOT_NULL("attn_dist_set_timeout", d);
    if (!(seconds >= 0) || seconds > 1e9)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_dist_set_timeout: %g seconds (want 0 .. 1e9; 0: none)",
                          seconds);
    d->timeout = seconds;
    return ATTN_OK;
}

attn_status attn_dist_init_comm(const void *comm, attn_dist **out) {
    ATTN_CHECK_NOT_NULL("attn_dist_init_comm", comm);
    ATTN_CHECK_NOT_NULL("attn_dist_init_comm", out);
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_dist_init_comm: MPI is not initialised");
    attn_dist *d = attn__calloc(1, sizeof *d);
    if (!d) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_dist_init_comm: out of memory");
    int rc = MPI_Comm_dup(*(const MPI_Comm *)comm, &d->comm);
    if (rc != MPI_SUCCESS) {
        attn__free(d);
        return mpi_fail(rc, "attn_dist_init_comm: MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    *out = d;
    return ATTN_OK;
}

attn_status attn_dist_init(attn_dist **out) {
    ATTN_CHECK_NOT_NULL("attn_dist_init", out);
    *out = NULL;
    int inited = 0, finalized = 0, owns = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_dist_init: MPI was already finalised");
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "attn_dist_init: MPI_Init_thread");
        owns = 1;
    }
    MPI_Comm world = MPI_COMM_WORLD;
    attn_status s = attn_dist_init_comm(&world, out);
    if (s != ATTN_OK) {
        if (owns) MPI_Finalize();
        return s;
    }
    (*out)->owns_mpi = owns;
    return ATTN_OK;
}

void attn_dist_free(attn_dist *d) {
    if (!d) return;
    MPI_Comm_free(&d->comm);
    attn__free(d->buf);
    attn__free(d->flat);
    if (d->owns_mpi) MPI_Finalize();
    attn__free(d);
}

int attn_dist_rank(const attn_dist *d) { return d ? d->rank : 0; }
int attn_dist_size(const attn_dist *d) { return d ? d->size : 1; }
double attn_dist_reduce_seconds(const attn_dist *d) { return d ? d->reduce_seconds : 0.0; }

void attn_dist_abort(attn_dist *d, int code) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(d ? d->comm : MPI_COMM_WORLD, code);
}

static int reserve(attn_dist *d, size_t n) {
    if (n <= d->buf_cap) return 0;
    float *b = attn__realloc(d->buf, n * sizeof(float));
    if (!b) return -1;
    d->buf = b;
    d->buf_cap = n;
    return 0;
}

/* Rank j's slice of a p-vector: [slice_lo(j), slice_lo(j + 1)). */
static int64_t slice_lo(int64_t p, int n, int j) { return p / n * j + p % n * j / n; }

attn_status attn_dist_reduce_flat(attn_dist *d, const float *local, int64_t n_local, int64_t p, float *out) {
    ATTN_CHECK_NOT_NULL("attn_dist_reduce_flat", d);
    ATTN_CHECK_NOT_NULL("attn_dist_reduce_flat", out);
    if (n_local < 1 || p < 0 || (!local && n_local != 1))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_dist_reduce_flat: %lld local vectors of %lld floats%s",
                          (long long)n_local, (long long)p, local ? "" : " (NULL local needs exactly 1)");
    const int n = d->size, r = d->rank;
    const int64_t L = n_local;
    /* MPI's counts are int: every count and displacement below is at most L * p */
    if (p > 0 && L > (int64_t)INT32_MAX / p)
        return attn_error(ATTN_ERR_OVERFLOW, "attn_dist_reduce_flat: %lld x %lld floats exceed MPI's int counts",
                          (long long)L, (long long)p);
    /* every rank must agree on L (the micro-batches per rank): a mismatch would garble the slices */
    int64_t lmin = L, lmax = L;
    MPI_Request req;
    attn_status ws = wait_for(d, MPI_Iallreduce(MPI_IN_PLACE, &lmin, 1, MPI_INT64_T, MPI_MIN, d->comm, &req), &req,
                              "attn_dist_allreduce_grads: MPI_Allreduce");
    if (ws == ATTN_OK)
        ws = wait_for(d, MPI_Iallreduce(MPI_IN_PLACE, &lmax, 1, MPI_INT64_T, MPI_MAX, d->comm, &req), &req,
                      "attn_dist_allreduce_grads: MPI_Allreduce");
    if (ws != ATTN_OK) return ws;
    if (lmin != lmax)
        return attn_error(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_dist_allreduce_grads: ranks pass between %lld and %lld micro-batches; every rank "
                          "must pass the same number",
                          (long long)lmin, (long long)lmax);
    const int64_t mine_lo = slice_lo(p, n, r), mine = slice_lo(p, n, r + 1) - mine_lo;
    int *scount = attn__malloc(sizeof(int) * 4 * (size_t)n);
    float *send = NULL;
    if (!scount) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_dist_allreduce_grads: out of memory");
    int *sdispl = scount + n, *rcount = scount + 2 * n, *rdispl = scount + 3 * n;
    /* send layout: for each destination j, this rank's L slices j in micro-batch order */
    if (L == 1) {
        send = (float *)(local ? local : out);
    } else {
        send = attn__malloc(sizeof(float) * (size_t)(L * p));
        if (!send) {
            attn__free(scount);
            return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_dist_allreduce_grads: out of memory");
        }
    }
    for (int j = 0; j < n; j++) {
        const int64_t lo = slice_lo(p, n, j), cj = slice_lo(p, n, j + 1) - lo;
        scount[j] = (int)(L * cj);
        sdispl[j] = (int)(L * lo);
        rcount[j] = (int)(L * mine);
        rdispl[j] = (int)(L * mine * j);
        if (L > 1)
            for (int64_t k = 0; k < L; k++)
                memcpy(send + L * lo + k * cj, local + k * p + lo, sizeof(float) * (size_t)cj);
    }
    if (reserve(d, (size_t)(n * L * mine) + 1)) {
        if (L > 1) attn__free(send);
        attn__free(scount);
        return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_dist_allreduce_grads: out of memory");
    }
    float *recv = d->buf;
    ws = wait_for(d, MPI_Ialltoallv(send, scount, sdispl, MPI_FLOAT, recv, rcount, rdispl, MPI_FLOAT, d->comm, &req),
                  &req, "attn_dist_allreduce_grads: MPI_Alltoallv");
    if (ws != ATTN_OK) return ws; /* the buffers stay: MPI may still use them until the abort */
    if (L > 1) attn__free(send);
    /* the fold, in global micro-batch order: rank 0's L, then rank 1's, ... (threads split the
     * elements, never an element's sum) */
    float *acc = out + mine_lo;
    const int64_t nq = (int64_t)n * L;
#pragma omp parallel for schedule(static) num_threads(attn_threads_for(mine / 65536 + 1))
    for (int64_t e0 = 0; e0 < mine; e0 += 4096) {
        const int64_t e1 = e0 + 4096 < mine ? e0 + 4096 : mine;
        for (int64_t e = e0; e < e1; e++) acc[e] = recv[e];
        for (int64_t q = 1; q < nq; q++) {
            const float *g = recv + q * mine;
            for (int64_t e = e0; e < e1; e++) acc[e] += g[e];
        }
    }
    for (int j = 0; j < n; j++) {
        const int64_t lo = slice_lo(p, n, j);
        rcount[j] = (int)(slice_lo(p, n, j + 1) - lo);
        rdispl[j] = (int)lo;
    }
    ws = wait_for(d, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, rcount, rdispl, MPI_FLOAT, d->comm, &req),
                  &req, "attn_dist_allreduce_grads: MPI_Allgatherv");
    if (ws == ATTN_OK) attn__free(scount); /* else it stays, as above */
    return ws;
}

attn_status attn_dist_allreduce_grads(attn_dist *d, const attn_params *ps, const float *local, int64_t n_local) {
    ATTN_CHECK_NOT_NULL("attn_dist_allreduce_grads", d);
    ATTN_CHECK_NOT_NULL("attn_dist_allreduce_grads", ps);
    const double t0 = MPI_Wtime();
    const size_t np = attn_params_count(ps), p = attn_params_numel(ps);
    if (p + 1 > d->flat_cap) {
        float *f = attn__realloc(d->flat, sizeof(float) * (p + 1));
        if (!f) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_dist_allreduce_grads: out of memory");
        d->flat = f;
        d->flat_cap = p + 1;
    }
    float *flat = d->flat;
    size_t off = 0;
    if (!local)
        for (size_t i = 0; i < np; i++) {
            const attn_param *q = attn_params_get(ps, i);
            memcpy(flat + off, q->grad, sizeof(float) * q->numel);
            off += q->numel;
        }
    attn_status s = attn_dist_reduce_flat(d, local, n_local, (int64_t)p, flat);
    if (s == ATTN_OK) {
        off = 0;
        for (size_t i = 0; i < np; i++) {
            const attn_param *q = attn_params_get(ps, i);
            memcpy(q->grad, flat + off, sizeof(float) * q->numel);
            off += q->numel;
        }
    }
    d->reduce_seconds += MPI_Wtime() - t0;
    return s;
}

attn_status attn_dist_broadcast_params(attn_dist *d, const attn_params *ps) {
    ATTN_CHECK_NOT_NULL("attn_dist_broadcast_params", d);
    ATTN_CHECK_NOT_NULL("attn_dist_broadcast_params", ps);
    for (size_t i = 0; i < attn_params_count(ps); i++) {
        const attn_param *q = attn_params_get(ps, i);
        for (size_t off = 0; off < q->numel;) {
            const size_t c = q->numel - off < (size_t)1 << 30 ? q->numel - off : (size_t)1 << 30;
            MPI_Request req;
            attn_status s = wait_for(d, MPI_Ibcast(q->data + off, (int)c, MPI_FLOAT, 0, d->comm, &req), &req,
                                     "attn_dist_broadcast_params: MPI_Bcast");
            if (s != ATTN_OK) return s;
            off += c;
        }
    }
    return ATTN_OK;
}

attn_status attn_dist_allgather_f32(attn_dist *d, const float *mine, int64_t n, float *all) {
    ATTN_CHECK_NOT_NULL("attn_dist_allgather_f32", d);
    ATTN_CHECK_NOT_NULL("attn_dist_allgather_f32", all);
    if (n < 0 || n > INT32_MAX || (n > 0 && !mine))
        return attn_error(ATTN_ERR_INVALID_ARGUMENT, "attn_dist_allgather_f32: %lld floats", (long long)n);
    MPI_Request req;
    return wait_for(d, MPI_Iallgather(mine, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, d->comm, &req), &req,
                    "attn_dist_allgather_f32: MPI_Allgather");
}

attn_status attn_dist_agree(attn_dist *d, int flags, int *all) {
    ATTN_CHECK_NOT_NULL("attn_dist_agree", d);
    ATTN_CHECK_NOT_NULL("attn_dist_agree", all);
    MPI_Request req;
    d->agree[0] = flags;
    attn_status s = wait_for(d, MPI_Iallreduce(&d->agree[0], &d->agree[1], 1, MPI_INT, MPI_BOR, d->comm, &req), &req,
                             "attn_dist_agree: MPI_Allreduce");
    if (s == ATTN_OK) *all = d->agree[1];
    return s;
}

attn_status attn_dist_check_same(attn_dist *d, uint64_t value, const char *what) {
    ATTN_CHECK_NOT_NULL("attn_dist_check_same", d);
    uint64_t *v = attn__malloc(sizeof(uint64_t) * (size_t)d->size);
    if (!v) return attn_error(ATTN_ERR_OUT_OF_MEMORY, "attn_dist_check_same: out of memory");
    MPI_Request req;
    attn_status s = wait_for(d, MPI_Iallgather(&value, 1, MPI_UINT64_T, v, 1, MPI_UINT64_T, d->comm, &req), &req,
                             "attn_dist_check_same: MPI_Allgather");
    if (s != ATTN_OK) return s; /* v stays: MPI may still write it until the abort */
    char list[256] = "";
    size_t used = 0;
    int differ = 0;
    for (int j = 1; j < d->size; j++)
        if (v[j] != v[0]) {
            if (differ++ < 8 && used < sizeof list)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%d (%016llx)", differ > 1 ? ", " : "", j,
                                         (unsigned long long)v[j]);
        }
    const uint64_t v0 = v[0];
    attn__free(v);
    if (!differ) return ATTN_OK;
    return attn_error(ATTN_ERR_INVALID_ARGUMENT, "ranks disagree on %s: rank 0 has %016llx, rank%s %s%s",
                      what ? what : "a value", (unsigned long long)v0, differ > 1 ? "s" : "", list,
                      differ > 8 ? ", ..." : "");
}

#else /* no MPI */

#define NO_MPI(fn) attn_error(ATTN_ERR_UNSUPPORTED, "%s: this build has no MPI (configure with MPI installed)", fn)

int attn_dist_available(void) { return 0; }
attn_status attn_dist_set_timeout(attn_dist *d, double seconds) {
    (void)d, (void)seconds;
    return NO_MPI("attn_dist_set_timeout");
}
attn_status attn_dist_init(attn_dist **out) {
    if (out) *out = NULL;
    return NO_MPI("attn_dist_init");
}
attn_status attn_dist_init_comm(const void *comm, attn_dist **out) {
    (void)comm;
    if (out) *out = NULL;
    return NO_MPI("attn_dist_init_comm");
}
void attn_dist_free(attn_dist *d) { (void)d; }
int attn_dist_rank(const attn_dist *d) {
    (void)d;
    return 0;
}
int attn_dist_size(const attn_dist *d) {
    (void)d;
    return 1;
}
double attn_dist_reduce_seconds(const attn_dist *d) {
    (void)d;
    return 0.0;
}
void attn_dist_abort(attn_dist *d, int code) {
    (void)d;
    fflush(stdout);
    fflush(stderr);
    exit(code);
}
attn_status attn_dist_reduce_flat(attn_dist *d, const float *local, int64_t n_local, int64_t p, float *out) {
    (void)d, (void)local, (void)n_local, (void)p, (void)out;
    return NO_MPI("attn_dist_reduce_flat");
}
attn_status attn_dist_allreduce_grads(attn_dist *d, const attn_params *ps, const float *local, int64_t n_local) {
    (void)d, (void)ps, (void)local, (void)n_local;
    return NO_MPI("attn_dist_allreduce_grads");
}
attn_status attn_dist_broadcast_params(attn_dist *d, const attn_params *ps) {
    (void)d, (void)ps;
    return NO_MPI("attn_dist_broadcast_params");
}
attn_status attn_dist_allgather_f32(attn_dist *d, const float *mine, int64_t n, float *all) {
    (void)d, (void)mine, (void)n, (void)all;
    return NO_MPI("attn_dist_allgather_f32");
}
attn_status attn_dist_agree(attn_dist *d, int flags, int *all) {
    (void)d, (void)flags, (void)all;
    return NO_MPI("attn_dist_agree");
}
attn_status attn_dist_check_same(attn_dist *d, uint64_t value, const char *what) {
    (void)d, (void)value, (void)what;
    return NO_MPI("attn_dist_check_same");
}

#endif
