/* Wall and process CPU time per attn_flash_backward (or forward) call, for A/B runs of two builds on
 * a shared machine (docs/performance-log.md). Not part of the build:
 *   gcc -O2 -std=c11 -fopenmp -Iinclude bench/flash_cpu_time.c build/libattn.a -lm -o flash_cpu_time
 *   ./flash_cpu_time H N D THREADS REPS [CAUSAL=1] [FORWARD=0]   (TICKS=1: per-thread CPU ticks)
 * Prints one JSON line: best and median GFLOP/s of REPS calls, and GFLOP per CPU second. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <attn/attn.h>
#include <dirent.h>
#include <string.h>
/* utime+stime (ticks) of every thread of this process, into t[], returns the count */
static int thread_ticks(long *tid, double *t, int max) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.') continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        char *p = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        int field = 2;
        for (char *q = p + 2; *q && field < 15; q++)
            if (*q == ' ') {
                field++;
                if (field == 14) ut = strtoul(q + 1, NULL, 10);
                if (field == 15) st = strtoul(q + 1, NULL, 10);
            }
        tid[n] = atol(e->d_name);
        t[n++] = (double)(ut + st);
    }
    if (d) closedir(d);
    return n;
}
static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
    int64_t H = atoi(argv[1]), N = atoi(argv[2]), D = atoi(argv[3]);
    int T = atoi(argv[4]), reps = atoi(argv[5]);
    int causal = argc > 6 ? atoi(argv[6]) : 1, fwd = argc > 7 ? atoi(argv[7]) : 0;
    attn_set_num_threads(T);
    size_t n = (size_t)H * N * D;
    float *buf = malloc(sizeof(float) * (n * 8 + H * N));
    for (size_t i = 0; i < n * 8; i++) buf[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    attn_tensor t[8];
    for (int i = 0; i < 8; i++) t[i] = attn_tensor_4d(buf + n * i, 1, H, N, D);
    attn_tensor l = attn_tensor_3d(buf + 8 * n, 1, H, N);
    attn_sdpa_params p = attn_sdpa_params_default();
    p.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    size_t wsb = attn_flash_workspace_size(&t[0], &t[1], &t[2]);
    void *ws = malloc(wsb);
    if (attn_flash_forward(&t[0], &t[1], &t[2], &p, &t[3], &l, ws, wsb)) return 1;
    double best_cpu = 1e9, best_wall = 1e9, walls[1000];
    long tid0[64], tid1[64];
    double t0[64], t1[64];
    int n0 = thread_ticks(tid0, t0, 64);
    for (int r = 0; r < reps; r++) {
        double c0 = now(CLOCK_PROCESS_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
        if (fwd)
            attn_flash_forward(&t[0], &t[1], &t[2], &p, &t[3], &l, ws, wsb);
        else
            attn_flash_backward(&t[0], &t[1], &t[2], &p, &t[3], &t[4], &l, &t[5], &t[6], &t[7], ws, wsb);
        double c = now(CLOCK_PROCESS_CPUTIME_ID) - c0, w = now(CLOCK_MONOTONIC) - w0;
        if (c < best_cpu) best_cpu = c;
        if (w < best_wall) best_wall = w;
        walls[r < 1000 ? r : 999] = w;
    }
    int n1 = thread_ticks(tid1, t1, 64);
    if (getenv("TICKS")) fprintf(stderr, "per-thread CPU ticks during the timed calls:");
    for (int i = 0; i < n1 && getenv("TICKS"); i++) {
        double before = 0;
        for (int j = 0; j < n0; j++)
            if (tid0[j] == tid1[i]) before = t0[j];
        fprintf(stderr, " %.0f", t1[i] - before);
    }
    fprintf(stderr, "\n");
    for (int i = 0; i < reps; i++)
        for (int j = i + 1; j < reps; j++)
            if (walls[j] < walls[i]) {
                double x = walls[i];
                walls[i] = walls[j];
                walls[j] = x;
            }
    double med_wall = reps % 2 ? walls[reps / 2] : 0.5 * (walls[reps / 2 - 1] + walls[reps / 2]);
    double flops = 4.0 * H * (double)N * N * D * (causal ? 0.5 : 1.0) * (fwd ? 1.0 : 2.5);
    printf("{\"h\":%lld,\"n\":%lld,\"d\":%lld,\"threads\":%d,\"fwd\":%d,\"causal\":%d,\"cpu_s\":%.5f,\"wall_s\":%.5f,"
           "\"gflops_best\":%.2f,\"gflops_median\":%.2f,\"gflops_per_cpu_s\":%.2f}\n",
           (long long)H, (long long)N, (long long)D, T, fwd, causal, best_cpu, best_wall, flops / best_wall * 1e-9,
           flops / med_wall * 1e-9, flops / best_cpu * 1e-9);
    return 0;
}
