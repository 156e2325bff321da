/* attn bench train: training throughput (tokens/s) of a GPT-2-small-shaped decoder stack (d_model
 * 768, 12 heads, feed-forward 3072, context 1024 by default), scaled down in layers / context /
 * batch to fit the time: one full step = forward, cross-entropy, backward, clipping and AdamW.
 * bench/torch_train.py measures the same step in PyTorch and prints the same JSON keys. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"
#include "cli_opts.h"
#include "train_common.h"

static void usage(FILE *f) {
    fprintf(f, "usage: attn bench train [options]\n\n"
               "Training tokens/s of a GPT-2-small-shaped decoder-only stack: d_model 768, 12 heads,\n"
               "feed-forward 3072, pre-norm layers with GELU, learned positions, a byte vocabulary of\n"
               "256 (so the stack, not a 50k-word output layer, dominates). One measured step is the\n"
               "whole training step: forward, cross-entropy, backward, gradient clipping and AdamW.\n"
               "After one warmup step, --steps steps are timed; the median is reported. GFLOP/s\n"
               "counts 6 x (matrix parameters) + 6 x layers x context x d_model flops per token (the\n"
               "usual estimate, causal attention halved). bench/torch_train.py measures the same step\n"
               "in PyTorch with the same options and JSON keys.\n\n"
               "options:\n"
               "  --layers L      layers (default 2; GPT-2 small has 12)\n"
               "  --context C     sequence length (default 1024)\n"
               "  --batch B       sequences per step (default 1)\n"
               "  --d-model D     width (default 768)\n"
               "  --heads H       heads (default 12)\n"
               "  --steps N       timed steps (default 3)\n"
               "  --precision P   fp32 (default) or bf16 (mixed precision, as attn train gpt --precision)\n"
               "  --threads T     thread counts, comma-separated (default: all)\n"
               "  --json          one JSON object per thread count: op, impl, shape, precision,\n"
               "                  threads, ms, tokens_per_s, gflops\n\n"
               "Under mpirun (a build with MPI), data-parallel as `attn train gpt`: each of N ranks\n"
               "runs B/N sequences, then the gradients are all-reduced (attn_dist_allreduce_grads);\n"
               "tokens/s counts the global batch; allreduce_ms / allreduce_share report the\n"
               "reduction's median time (the ranks meet first) and its share of the step, wait_ms the\n"
               "median wait for the slowest rank before it (bench/dist_train.sh).\n");
}

int bench_train_cmd(int argc, char **argv) {
    bench_opts o;
    bench_opts_init(&o);
    int64_t L = 2, C = 1024, B = 1, D = 768, H = 12, steps = 3;
    const char *pname = NULL;
    attn_precision prec = ATTN_PRECISION_FP32;
    cli_opt opts[] = {
        BENCH_COMMON_OPTS(&o),
        CLI_INT("--layers", &L, 1, 96),
        CLI_INT("--context", &C, 1, 1 << 20),
        CLI_INT("--batch", &B, 1, 4096),
        CLI_INT("--d-model", &D, 1, 16384),
        CLI_INT("--heads", &H, 1, 1024),
        CLI_INT("--steps", &steps, 1, 1000),
        CLI_STRING("--precision", &pname),
        CLI_END,
    };
    int parsed = cli_parse("bench train", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (pname && cli_parse_precision(pname, &prec))
        return cli_usage_error("bench train: --precision '%s' is neither fp32 nor bf16", pname);
    if (D % H != 0)
        return cli_usage_error("bench train: --d-model %lld is not a multiple of --heads %lld", (long long)D,
                               (long long)H);
    attn_dist *dist = NULL;
    if (train_dist_start("bench train", &dist)) return 1;
    const int nranks = attn_dist_size(dist);
    if (B % nranks != 0)
        return train_dist_end(dist,
                              cli_fail("bench train: --batch %lld does not split over %d ranks", (long long)B, nranks));
    const int64_t BL = B / nranks; /* this rank's sequences */

    const train_gpt_shape shape = {TRAIN_BYTE_VOCAB, L, H, D, 4 * D, C, attn_attention_config_default()};
    const int64_t V = shape.vocab;
    attn_gpt_config cfg = train_gpt_config(&shape);
    cfg.precision = prec;
    attn_gpt *g = NULL;
    attn_optimizer *opt = NULL;
    if (attn_gpt_create(&cfg, &g) != ATTN_OK)
        return train_dist_end(dist, cli_fail("bench train: %s", attn_last_error()));
    const attn_params *ps = attn_gpt_params(g);
    if (attn_params_reset(ps, 1) != ATTN_OK || attn_adamw_create(ps, NULL, &opt) != ATTN_OK) {
        attn_gpt_free(g);
        return train_dist_end(dist, cli_fail("bench train: %s", attn_last_error()));
    }
    int64_t *x = malloc(sizeof(int64_t) * (size_t)(B * C)), *y = malloc(sizeof(int64_t) * (size_t)(B * C));
    float *logits = malloc(sizeof(float) * (size_t)(B * C * V));
    int rc = 0;
    if (!x || !y || !logits) {
        rc = cli_fail("bench train: out of memory");
        goto done;
    }
    for (int64_t t = 0; t < B * C; t++) {
        x[t] = (int64_t)(attn_philox_uniform(7, 0, (uint64_t)t) * (float)V);
        y[t] = (int64_t)(attn_philox_uniform(7, 1, (uint64_t)t) * (float)V);
    }
    const double matrix_params = (double)L * 12.0 * (double)(D * D) + (double)(D * V);
    const double flops = (double)(B * C) * (6.0 * matrix_params + 6.0 * (double)(L * C * D));
    if (!o.json)
        printf("train step, GPT-2-small-shaped stack: %lld layers, d_model %lld, %lld heads, context %lld, batch %lld, "
               "vocab %lld (%zu parameters), %s\n%8s %12s %14s %10s\n",
               (long long)L, (long long)D, (long long)H, (long long)C, (long long)B, (long long)V,
               attn_params_numel(ps), attn_precision_name(prec), "threads", "ms/step", "tokens/s", "GFLOP/s");
    if (!o.json && dist)
        printf("data-parallel over %d ranks, %lld sequences each; all-reduce median ms and share of the step:\n",
               nranks, (long long)BL);
    for (int ti = 0; ti < o.nthreads && rc == 0; ti++) {
        bench_set_threads(o.threads[ti]);
        attn_gpt_args a = {BL, C, x, NULL, 1, 1, 0, NULL, NULL};
        const size_t sb = attn_gpt_saved_size(g, &a), wb = attn_gpt_workspace_size(g, &a);
        void *saved = malloc(sb ? sb : 1), *ws = malloc(wb ? wb : 1);
        double *ms = malloc(sizeof(double) * (size_t)(3 * (steps + 1))), *rms = ms + steps + 1, *wms = rms + steps + 1;
        if (!saved || !ws || !ms) {
            free(saved), free(ws), free(ms);
            rc = cli_fail("bench train: out of memory (%zu MB of activations)", (sb + wb) >> 20);
            break;
        }
        attn_cross_entropy_config ce = attn_cross_entropy_config_default();
        for (int64_t s = 0; s <= steps; s++) { /* step 0: warmup */
            const double t0 = bench_now();
            float loss;
            double gn;
            attn_status st;
            double tr = 0, tw = 0, tr1 = 0;
            int dummy;
            if ((st = attn_params_zero_grad(ps)) != ATTN_OK ||
                (st = attn_gpt_forward(g, &a, logits, saved, sb, ws, wb)) != ATTN_OK ||
                (st = attn_cross_entropy_forward(logits, y, BL * C, V, &ce, &loss, logits)) != ATTN_OK ||
                (st = attn_gpt_backward(g, &a, logits, saved, sb, ws, wb)) != ATTN_OK ||
                (dist && (tw = bench_now(), st = attn_dist_agree(dist, 0, &dummy)) != ATTN_OK) ||
                (dist && (tr = bench_now(), st = attn_dist_allreduce_grads(dist, ps, NULL, 1)) != ATTN_OK) ||
                (tr1 = bench_now(),
                 (st = attn_train_step(opt, 1e-4, 1.0, nranks, &gn)) != ATTN_OK && st != ATTN_ERR_NUMERIC)) {
                rc = cli_fail("bench train: %s", attn_last_error());
                break;
            }
            const double t1 = bench_now();
            ms[s] = (t1 - t0) * 1e3;
            rms[s] = dist ? (tr1 - tr) * 1e3 : 0.0; /* the all-reduce alone, the ranks having met first */
            wms[s] = dist ? (tr - tw) * 1e3 : 0.0;  /* waiting for the slowest rank */
        }
        if (rc == 0) {
            /* medians of the timed steps (the first, index 0, is a warmup) */
            const double med = bench_median(ms + 1, (int)steps);
            const double rmed = bench_median(rms + 1, (int)steps);
            const double wmed = bench_median(wms + 1, (int)steps);
            const double tps = (double)(B * C) / (med * 1e-3), gf = flops / (med * 1e6);
            if (o.json)
                printf("{\"op\": \"train\", \"impl\": \"attn\", \"shape\": {\"layers\": %lld, \"d_model\": %lld, "
                       "\"heads\": %lld, \"context\": %lld, \"batch\": %lld, \"vocab\": %lld}, \"precision\": \"%s\", "
                       "\"threads\": %d, \"ms\": %.3f, \"tokens_per_s\": %.1f, \"gflops\": %.2f",
                       (long long)L, (long long)D, (long long)H, (long long)C, (long long)B, (long long)V,
                       attn_precision_name(prec), o.threads[ti], med, tps, gf);
            else
                printf("%8d %12.1f %14.1f %10.2f", o.threads[ti], med, tps, gf);
            if (dist)
                printf(o.json ? ", \"ranks\": %d, \"allreduce_ms\": %.3f, \"allreduce_share\": %.4f, \"wait_ms\": %.3f"
                              : "   ranks %d  all-reduce %.1f ms (%.1f%%), waiting for the slowest rank %.1f ms",
                       nranks, rmed, o.json ? rmed / med : 100.0 * rmed / med, wmed);
            printf(o.json ? "}\n" : "\n");
            fflush(stdout);
        }
        free(saved);
        free(ws);
        free(ms);
    }
done:
    free(x);
    free(y);
    free(logits);
    attn_optimizer_free(opt);
    attn_gpt_free(g);
    return train_dist_end(dist, rc);
}

static void usage_allreduce(FILE *f) {
    fprintf(f, "usage: mpirun -np N attn bench allreduce [options]\n\n"
               "Time of the gradient all-reduce of attn dist (the canonical fold: reduce-scatter with\n"
               "the slices added in rank order, then all-gather) for message sizes from --min-kib to\n"
               "--max-kib (powers of 4): median and minimum of --repeats; then the least-squares\n"
               "alpha-beta fit t = alpha + bytes / bandwidth of the minima (the uncontended cost; on a\n"
               "shared machine the median carries other loads). Needs an MPI launcher and MPI.\n\n"
               "options:\n"
               "  --min-kib K     smallest message in KiB (default 4)\n"
               "  --max-kib K     largest message in KiB (default 65536)\n"
               "  --repeats R     timed repetitions per size (default 9)\n"
               "  --json          one JSON object per size, then one for the fit\n");
}

int bench_allreduce_cmd(int argc, char **argv) {
    int64_t kmin = 4, kmax = 65536, reps = 9;
    int json = 0;
    cli_opt opts[] = {
        CLI_INT("--min-kib", &kmin, 1, 1 << 22),
        CLI_INT("--max-kib", &kmax, 1, 1 << 22),
        CLI_INT("--repeats", &reps, 1, 10000),
        CLI_FLAG("--json", &json),
        CLI_END,
    };
    int parsed = cli_parse("bench allreduce", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage_allreduce(stdout);
        return 0;
    }
    if (parsed) return parsed;
    attn_dist *dist = NULL;
    if (train_dist_start("bench allreduce", &dist)) return 1;
    if (!dist) return cli_fail("bench allreduce: run it under an MPI launcher (mpirun -np N attn bench allreduce)");
    const int64_t pmax = kmax * 256; /* floats */
    float *buf = malloc(sizeof(float) * (size_t)pmax);
    double *t = malloc(sizeof(double) * (size_t)reps);
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int npts = 0, rc = 0;
    if (!buf || !t) rc = cli_fail("bench allreduce: out of memory");
    if (!json && !rc)
        printf("all-reduce of attn dist on %d ranks\n%12s %12s %12s %12s\n", attn_dist_size(dist), "bytes", "median us",
               "min us", "GB/s (min)");
    for (int64_t k = kmin; k <= kmax && !rc; k *= 4) {
        const int64_t p = k * 256;
        for (int64_t i = 0; i < p; i++) buf[i] = (float)(i % 7);
        for (int64_t r = -1; r < reps && !rc; r++) { /* r = -1: warmup */
            int dummy;
            attn_dist_agree(dist, 0, &dummy); /* start together */
            const double t0 = bench_now();
            if (attn_dist_reduce_flat(dist, NULL, 1, p, buf) != ATTN_OK)
                rc = cli_fail("bench allreduce: %s", attn_last_error());
            if (r >= 0) t[r] = bench_now() - t0;
        }
        if (rc) break;
        for (int64_t i = 1; i < reps; i++)
            for (int64_t j = i; j > 0 && t[j] < t[j - 1]; j--) {
                double v = t[j];
                t[j] = t[j - 1];
                t[j - 1] = v;
            }
        const double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]), bytes = 4.0 * (double)p;
        const double best = t[0];
        sx += bytes, sy += best, sxx += bytes * bytes, sxy += bytes * best, npts++;
        if (json)
            printf("{\"op\": \"allreduce\", \"ranks\": %d, \"bytes\": %.0f, \"us\": %.2f, \"min_us\": %.2f, "
                   "\"gb_per_s\": %.3f}\n",
                   attn_dist_size(dist), bytes, med * 1e6, best * 1e6, bytes / best * 1e-9);
        else
            printf("%12.0f %12.1f %12.1f %12.3f\n", bytes, med * 1e6, best * 1e6, bytes / best * 1e-9);
    }
    if (!rc && npts >= 2) {
        const double beta = (npts * sxy - sx * sy) / (npts * sxx - sx * sx), alpha = (sy - beta * sx) / npts;
        if (json)
            printf("{\"op\": \"allreduce_fit\", \"ranks\": %d, \"alpha_us\": %.2f, \"bandwidth_gb_per_s\": %.3f}\n",
                   attn_dist_size(dist), alpha * 1e6, 1e-9 / beta);
        else
            printf("fit: t = alpha + bytes / bandwidth, alpha %.1f us, bandwidth %.3f GB/s\n", alpha * 1e6,
                   1e-9 / beta);
    }
    free(buf);
    free(t);
    return train_dist_end(dist, rc);
}
