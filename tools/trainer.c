/* The training loop shared by `attn train gpt`, `attn train vit` and `attn demo` (trainer.h). */
#define _POSIX_C_SOURCE 200809L
#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"

trainer_config trainer_config_default(const char *cmd) {
    trainer_config c;
    memset(&c, 0, sizeof c);
    c.cmd = cmd;
    c.clip = 1.0;
    c.accum = 1;
    c.log_every = 10;
    c.rate_unit = "tok/s";
    c.rate_width = 9;
    c.eval_name = "evaluation";
    c.catch_signals = 1;
    return c;
}

/* The loop's running figures. */
typedef struct run {
    const trainer_config *c;
    const trainer_hooks *h;
    attn_train_state state;
    int64_t step0, stop, skipped;
    int rank, failed, dist_stop;
    attn_status failed_status;
    float last_loss;
    double t_start, t_last, units, units_since;
    char save_err[512];
} run;

static int caught(const run *r) { return r->c->catch_signals && train_signals_caught(); }

int trainer_stop_requested(void) { return train_signals_caught(); }

static attn_status save(const run *r) {
    train_meta meta;
    r->h->metadata(r->h->ctx, &meta);
    return attn_checkpoint_save(r->c->checkpoint, r->c->ps, r->c->opt, &r->state, meta.keys, meta.values, meta.n);
}

/* The message of a failure: the fail hook's, or the default. Returns 1. */
static int fail(const run *r, trainer_failure where, attn_status s, const char *detail) {
    if (r->h->fail) {
        r->h->fail(r->h->ctx, where, s);
        return 1;
    }
    const char *cmd = r->c->cmd;
    if (where == TRAINER_FAIL_STEP) return cli_fail("%s: step %lld: %s", cmd, (long long)r->state.step + 1, detail);
    if (where == TRAINER_FAIL_SAVE) return cli_fail("%s: cannot write checkpoint: %s", cmd, detail);
    return cli_fail("%s: %s: %s", cmd, r->c->eval_name, detail);
}

/* --resume: the checkpoint's state into r->state, with the checks; 0 or 1 (message printed). */
static int resume(run *r) {
    const trainer_config *c = r->c;
    if (attn_checkpoint_load(c->checkpoint, c->ps, c->opt, &r->state, NULL) != ATTN_OK)
        return cli_fail("%s: --resume: %s", c->cmd, attn_last_error());
    if (c->given_seed && c->seed != r->state.rng_seed)
        return cli_fail("%s: --resume: --seed %lld differs from the checkpoint's %llu", c->cmd, (long long)c->seed,
                        (unsigned long long)r->state.rng_seed);
    if (c->check_steps && c->steps < r->state.step)
        return cli_fail("%s: --resume: --steps %lld is below the checkpoint's step %lld", c->cmd, (long long)c->steps,
                        (long long)r->state.step);
    printf("resuming from %s at step %lld\n", c->checkpoint, (long long)r->state.step);
    return 0;
}

/* The progress after step r->state.step: the hook, or the line every log_every steps. */
static attn_status progress(run *r, int64_t step, float loss, double lr, double gn) {
    const trainer_config *c = r->c;
    if (r->h->progress) {
        const trainer_progress p = {r->state.step, c->steps, loss, lr, gn, r->t_start, r->units};
        return r->h->progress(r->h->ctx, &p);
    }
    if (r->state.step % c->log_every == 0 || r->state.step == r->stop || step == r->step0) {
        const double now = bench_now(), dt = now - r->t_last;
        printf("step %6lld/%lld  loss %.4f  lr %.2e  |g| %7.3f  %*.0f %s\n", (long long)r->state.step,
               (long long)c->steps, (double)loss, lr, gn, c->rate_width, dt > 0 ? r->units_since / dt : 0.0,
               c->rate_unit);
        fflush(stdout);
        r->t_last = now;
        r->units_since = 0;
    }
    return ATTN_OK;
}

/* The gradient, the learning rate and the optimizer of step r->state.step; 0, or 1 on failure
 * (r->failed_status set). */
static int one_step(run *r) {
    const trainer_config *c = r->c;
    const int64_t step = r->state.step;
    double lr = 0, gn = 0, units = 0;
    float loss = 0;
    attn_status s = r->h->step(r->h->ctx, step, &loss, &units);
    if ((s == TRAINER_STOPPED || s == ATTN_ERR_CANCELLED) && caught(r)) {
        /* stopped inside the step (between micro-batches, or inside a forward / backward by
         * attn_cancel_request): the optimizer has not run, the state is the last step's */
        if (s == ATTN_ERR_CANCELLED) printf("step %lld stopped: %s\n", (long long)step + 1, attn_last_error());
        attn_clear_error();
        return 0;
    }
    if (s == ATTN_OK) s = attn_lr_warmup_cosine(&c->sched, step, &lr);
    if (s == ATTN_OK) {
        s = c->skip_nonfinite_loss && !isfinite(loss) ? ATTN_ERR_NUMERIC
                                                      : attn_train_step(c->opt, lr, c->clip, c->accum, &gn);
        if (s == ATTN_ERR_NUMERIC) { /* a non-finite gradient (only here): the step is skipped */
            r->skipped++;
            if (!c->quiet_skips) printf("step %lld: non-finite gradient norm, step skipped\n", (long long)step + 1);
            attn_clear_error();
            s = ATTN_OK;
        }
    }
    if (s != ATTN_OK) {
        r->failed_status = s;
        return 1;
    }
    r->state.step = step + 1;
    r->state.data_position = r->state.step * c->batch;
    r->state.rng_offset = (uint64_t)r->state.step;
    r->last_loss = loss;
    r->units += units;
    r->units_since += units;
    if ((s = progress(r, step, loss, lr, gn)) != ATTN_OK) {
        r->failed_status = s;
        return 1;
    }
    return 0;
}

/* After step r->state.step: the periodic evaluation and checkpoint. 0, or 1 to stop (r->failed or
 * r->save_err set). */
static int after_step(run *r) {
    const trainer_config *c = r->c;
    const int64_t done = r->state.step;
    if (r->rank == 0 && r->h->evaluate && c->eval_every > 0 && done % c->eval_every == 0 &&
        (c->eval_at_stop || done < r->stop)) {
        attn_status s = r->h->evaluate(r->h->ctx, done, 0);
        if (s == ATTN_ERR_CANCELLED && caught(r)) { /* a signal inside the evaluation: step `done` is whole */
            attn_clear_error();
            return 1;
        }
        if (s != ATTN_OK) {
            r->failed = 1;
            r->failed_status = s;
            return 1;
        }
    }
    if (r->rank == 0 && c->checkpoint && c->every > 0 && done % c->every == 0 && done < r->stop && save(r) != ATTN_OK) {
        snprintf(r->save_err, sizeof r->save_err, "%s", attn_last_error());
        return 1;
    }
    return 0;
}

/* The steps, until the stop step or a signal (the ranks agreeing on it under attn dist). */
static void steps(run *r) {
    attn_dist *dist = r->c->dist;
    while (r->state.step < r->stop && !(dist ? r->dist_stop : caught(r))) {
        if (dist) { /* the ranks agree on stopping (Ctrl-C reaches them one by one) */
            attn_status s = attn_dist_agree(dist, caught(r), &r->dist_stop);
            if (s != ATTN_OK) {
                r->failed = 1;
                r->failed_status = s;
                break;
            }
            if (r->dist_stop) break;
        }
        if (one_step(r)) {
            r->failed = 1;
            break;
        }
        if (!dist && caught(r)) break; /* a step stopped halfway (TRAINER_STOPPED) */
        if (after_step(r)) break;
    }
}

/* The closing part of a run that was not interrupted: final loss, evaluation, checkpoint. */
static int finish(run *r) {
    const trainer_config *c = r->c;
    if (r->state.step > r->step0) printf("final loss: %.9g\n", (double)r->last_loss);
    if (r->rank == 0 && r->h->evaluate) {
        attn_status s = r->h->evaluate(r->h->ctx, r->state.step, 1);
        if (s != ATTN_OK) return fail(r, TRAINER_FAIL_EVALUATE, s, attn_last_error());
    }
    printf("checkpoint: %s (step %lld)\n", c->checkpoint, (long long)r->state.step);
    return 0;
}

static int trainer_run_locked(run *rp, trainer_result *result);

int trainer_run(const trainer_config *c, const trainer_hooks *h, trainer_result *result) {
    run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.h = h;
    r.state.rng_seed = c->seed;
    r.rank = attn_dist_rank(c->dist);
    /* one run per checkpoint: a second run would write over the first's steps (README, "Files
     * and signals"); held until the process ends */
    attn_io_lock lock = {-1, NULL};
    if (r.rank == 0 && c->checkpoint && attn_io_lock_acquire(&lock, c->checkpoint) != ATTN_OK)
        return cli_fail("%s: %s", c->cmd, attn_last_error());
    const int rc = trainer_run_locked(&r, result);
    attn_io_lock_release(&lock);
    return rc;
}

static int trainer_run_locked(run *rp, trainer_result *result) {
    run r = *rp;
    const trainer_config *c = r.c;
    const trainer_hooks *h = r.h;
    if (c->resume && resume(&r)) return 1;
    int rc = h->start ? h->start(h->ctx, &r.state) : 0;
    if (rc) return rc;
    /* under attn dist the ranks agree on stopping between steps: a rank's forward is never cut */
    if (c->catch_signals) train_signals_catch(c->dist == NULL);
    r.step0 = r.state.step;
    r.stop = c->stop_at > 0 && c->stop_at < c->steps ? c->stop_at : c->steps;
    r.last_loss = NAN;
    r.t_start = r.t_last = bench_now();
    steps(&r);
    const int interrupted = c->dist ? r.dist_stop : caught(&r);
    if (c->catch_signals) train_signals_release();
    if (result) {
        const trainer_result res = {r.state, r.step0,    r.skipped, r.last_loss, r.t_start, bench_now() - r.t_start,
                                    r.units, interrupted};
        *result = res;
    }
    if (r.failed) return fail(&r, TRAINER_FAIL_STEP, r.failed_status, attn_last_error());
    if (r.save_err[0]) return fail(&r, TRAINER_FAIL_SAVE, ATTN_ERR_IO, r.save_err);
    if (!c->checkpoint) return 0;
    attn_status s;
    if (r.rank == 0 && (s = save(&r)) != ATTN_OK) return fail(&r, TRAINER_FAIL_SAVE, s, attn_last_error());
    if (interrupted) {
        printf("interrupted after step %lld of %lld: checkpoint written to %s (continue with --resume)\n",
               (long long)r.state.step, (long long)c->steps, c->checkpoint);
        return 130;
    }
    return finish(&r);
}
