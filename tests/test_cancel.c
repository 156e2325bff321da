/* attn_cancel_request: a deep encoder's forward and backward stop before their next layer with
 * ATTN_ERR_CANCELLED when a signal handler (SIGALRM, sent by a watcher thread once the call has
 * reached its middle layer) asks mid-call; the request is sticky until attn_cancel_clear; an
 * uncancelled run is bitwise the same before and after. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/attn.h"
#include "test_util.h"

enum { LAYERS = 48, DM = 64, NH = 4, B = 2, N = 384 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void on_alarm(int sig) {
    (void)sig;
    attn_cancel_request(); /* async-signal-safe, as core.h says */
}

/* A thread that watches n bytes at p and, once they change, sends SIGALRM to `target`. */
typedef struct watch {
    const volatile unsigned char *p;
    size_t n;
    unsigned char before[4096];
    pthread_t target;
    atomic_int stop, fired;
    double t_fired;
} watch;

static void *watcher(void *arg) {
    watch *w = arg;
    const struct timespec pause = {0, 20000};
    while (!atomic_load(&w->stop)) {
        for (size_t i = 0; i < w->n; i++)
            if (w->p[i] != w->before[i]) {
                w->t_fired = now();
                atomic_store(&w->fired, 1);
                pthread_kill(w->target, SIGALRM);
                return NULL;
            }
        nanosleep(&pause, NULL);
    }
    return NULL;
}

typedef struct bufs {
    attn_encoder *e;
    attn_layer_args a;
    float *x, *out, *dout, *dx;
    void *saved, *ws;
    size_t sb, wb;
} bufs;

static attn_status fwd(bufs *b) { return attn_encoder_forward(b->e, &b->a, b->out, b->saved, b->sb, b->ws, b->wb); }
static attn_status bwd(bufs *b) {
    return attn_encoder_backward(b->e, &b->a, b->dout, b->dx, b->saved, b->sb, b->ws, b->wb);
}

int main(void) {
    CHECK(!strcmp(attn_status_str(ATTN_ERR_CANCELLED), "cancelled"), "status string '%s'",
          attn_status_str(ATTN_ERR_CANCELLED));
    CHECK((int)ATTN_ERR_CANCELLED == 10, "ATTN_ERR_CANCELLED is %d", (int)ATTN_ERR_CANCELLED);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);

    bufs b;
    memset(&b, 0, sizeof b);
    attn_stack_config cfg = attn_stack_config_default(DM, NH, LAYERS);
    cfg.layer.dropout = 0.0f;
    CHECK_OK(attn_encoder_create(&cfg, &b.e));
    CHECK_OK(attn_params_reset(attn_encoder_params(b.e), 5));
    const size_t n = (size_t)B * N * DM;
    b.x = xmalloc(sizeof(float) * n), b.out = xmalloc(sizeof(float) * n);
    b.dout = xmalloc(sizeof(float) * n), b.dx = xmalloc(sizeof(float) * n);
    test_rng g = rng_seeded(3);
    fill_normal(&g, b.x, n, 1);
    fill_normal(&g, b.dout, n, 1);
    b.a = attn_layer_args_default();
    b.a.batch = B, b.a.n = N, b.a.x = b.x, b.a.training = 1;
    b.sb = attn_encoder_saved_size(b.e, &b.a), b.wb = attn_encoder_workspace_size(b.e, &b.a);
    b.saved = xmalloc(b.sb), b.ws = xmalloc(b.wb);

    /* the uncancelled reference, timed */
    attn_cancel_clear();
    double t0 = now();
    CHECK_OK(fwd(&b));
    const double tf = now() - t0;
    float *ref = xmalloc(sizeof(float) * n), *refdx = xmalloc(sizeof(float) * n);
    memcpy(ref, b.out, sizeof(float) * n);
    t0 = now();
    CHECK_OK(bwd(&b));
    const double tb = now() - t0;
    memcpy(refdx, b.dx, sizeof(float) * n);
    printf("%d layers: forward %.3f s, backward %.3f s\n", LAYERS, tf, tb);

    /* requested before the call: it stops at once, naming the function and layer 0; sticky */
    attn_cancel_request();
    CHECK(attn_cancel_requested(), "attn_cancel_requested after a request");
    CHECK_STATUS(fwd(&b), ATTN_ERR_CANCELLED);
    CHECK(strstr(attn_last_error(), "attn_encoder_forward") && strstr(attn_last_error(), "layer 0 of 48"),
          "message '%s'", attn_last_error());
    CHECK_STATUS(fwd(&b), ATTN_ERR_CANCELLED);
    CHECK_STATUS(bwd(&b), ATTN_ERR_CANCELLED);
    CHECK(strstr(attn_last_error(), "attn_encoder_backward"), "message '%s'", attn_last_error());
    attn_cancel_clear();
    CHECK(!attn_cancel_requested(), "attn_cancel_requested after clear");

    /* mid-forward and mid-backward: a watcher thread sees the call reach its middle layer (the
     * forward's saved activations there, the backward's gradient of layer 24 change) and sends
     * SIGALRM to this thread, whose handler asks to cancel: the call stops before a later layer,
     * inside the call, without finishing it. Progress, not timing, triggers it (the machine's load
     * may change a call's time tenfold). */
    const attn_params *ps = attn_encoder_params(b.e);
    const attn_param *mid = NULL;
    for (size_t i = 0; i < attn_params_count(ps) && !mid; i++)
        if (!strncmp(attn_params_get(ps, i)->name, "layers.24.", 10)) mid = attn_params_get(ps, i);
    CHECK(mid != NULL, "no parameter of layers.24");
    for (int pass = 0; mid && pass < 2; pass++) {
        if (pass) CHECK_OK(fwd(&b));
        CHECK_OK(attn_params_zero_grad(ps));
        attn_cancel_clear();
        watch w;
        memset(&w, 0, sizeof w);
        w.target = pthread_self();
        if (pass) {
            w.p = (const unsigned char *)mid->grad, w.n = sizeof(float) * (mid->numel < 256 ? mid->numel : 256);
        } else {
            memset(b.saved, 0xff, b.sb);
            w.p = (const unsigned char *)b.saved + b.sb / 2, w.n = 4096;
        }
        memcpy(w.before, (const void *)w.p, w.n);
        pthread_t th;
        CHECK(pthread_create(&th, NULL, watcher, &w) == 0, "pthread_create");
        const attn_status st = pass ? bwd(&b) : fwd(&b);
        const double t_end = now();
        atomic_store(&w.stop, 1);
        pthread_join(th, NULL);
        const char *what = pass ? "backward" : "forward";
        CHECK(atomic_load(&w.fired), "%s: the watcher never saw the middle layer", what);
        CHECK(st == ATTN_ERR_CANCELLED, "%s: status %d (%s), want cancelled", what, (int)st, attn_status_str(st));
        /* stopped inside the call, past its middle: the message names the layer it did not start */
        const char *at = strstr(attn_last_error(), "layer ");
        int l = -1;
        if (at) sscanf(at, "layer %d", &l);
        CHECK(pass ? l >= 0 && l < 24 : l >= 16 && l < LAYERS, "%s: not stopped inside the call after its middle: '%s'",
              what, attn_last_error());
        printf("%s: cancelled at its middle layer, returned %.3f s later (%s)\n", what, t_end - w.t_fired,
               attn_last_error());
        attn_cancel_clear();
    }

    /* after clear: bitwise the reference (the cancelled calls left nothing behind that matters) */
    CHECK_OK(attn_params_zero_grad(attn_encoder_params(b.e)));
    CHECK_OK(fwd(&b));
    CHECK(!memcmp(b.out, ref, sizeof(float) * n), "forward after cancellations differs from the reference");
    CHECK_OK(bwd(&b));
    CHECK(!memcmp(b.dx, refdx, sizeof(float) * n), "backward after cancellations differs from the reference");

    free(ref), free(refdx), free(b.x), free(b.out), free(b.dout), free(b.dx), free(b.saved), free(b.ws);
    attn_encoder_free(b.e);
    return test_summary("test_cancel");
}
