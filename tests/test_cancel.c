/* attn_cancel_request: a deep encoder's forward and backward stop before their next layer with
 * ATTN_ERR_CANCELLED when a signal handler (SIGALRM from setitimer) asks mid-call, quickly (about
 * one layer's time, not the whole call's); the request is sticky until attn_cancel_clear; an
 * uncancelled run is bitwise the same before and after. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
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

/* SIGALRM once, after `seconds`. */
static void alarm_in(double seconds) {
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = (time_t)seconds;
    it.it_value.tv_usec = (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6);
    if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0) it.it_value.tv_usec = 1;
    setitimer(ITIMER_REAL, &it, NULL);
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

    /* the uncancelled reference, timed on a second run (the first touches fresh memory) */
    attn_cancel_clear();
    CHECK_OK(fwd(&b));
    CHECK_OK(bwd(&b));
    CHECK_OK(attn_params_zero_grad(attn_encoder_params(b.e)));
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

    /* mid-forward and mid-backward, from a signal at an eighth of the call: stops within a few
     * layers' time (a layer is 1/48 of the call; the bound allows a loaded machine) */
    for (int pass = 0; pass < 2; pass++) {
        const double full = pass ? tb : tf;
        if (pass) CHECK_OK(fwd(&b));
        attn_cancel_clear();
        t0 = now();
        alarm_in(full / 8);
        const attn_status st = pass ? bwd(&b) : fwd(&b);
        const double took = now() - t0;
        alarm_in(0); /* disarms a timer that has not fired */
        CHECK(st == ATTN_ERR_CANCELLED, "%s: status %d (%s), want cancelled", pass ? "backward" : "forward", (int)st,
              attn_status_str(st));
        /* stopped inside the call: before a layer other than the first (the message names it) */
        const char *at = strstr(attn_last_error(), "layer ");
        int l = -1;
        if (at) sscanf(at, "layer %d", &l);
        const int first = pass ? LAYERS - 1 : 0; /* the backward runs from the last layer */
        CHECK(l >= 0 && l < LAYERS && l != first, "%s: not stopped inside the call: '%s'",
              pass ? "backward" : "forward", attn_last_error());
        CHECK(took < 0.9 * full, "%s cancelled at %.3f s took %.3f s of a full %.3f s", pass ? "backward" : "forward",
              full / 8, took, full);
        printf("%s: cancelled at %.3f s, returned after %.3f s (%s)\n", pass ? "backward" : "forward", full / 8, took,
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
