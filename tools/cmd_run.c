/* attn run: run a PyTorch module's equivalent on inputs from a safetensors file.
 *   config (JSON) -> module (attn/model.h), weights by state_dict name (strict), inputs by forward
 *   argument name (strict), one inference forward, outputs to a safetensors file; the opening is
 *   model_open.h's, shared with `attn viz`. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"
#include "model_open.h"
#include "safe_io.h"

/* The module names of the library's table (attn_model_known), wrapped at 88 columns under the
 * option's text. */
static void print_modules(FILE *f) {
    int col = fprintf(f, "MODEL.json   {\"module\": NAME, ...} with NAME one of");
    for (size_t i = 0; attn_model_known(i); i++) {
        const char *name = attn_model_known(i);
        if (col + 2 + (int)strlen(name) > 88) /* ' ', the name, ',' */
            col = fprintf(f, "\n             ") - 1;
        else
            col += fprintf(f, " ");
        col += fprintf(f, "%s%c", name, attn_model_known(i + 1) ? ',' : ';');
    }
    fputc('\n', f);
}

static void usage(FILE *f) {
    fprintf(f, "usage: attn run --config MODEL.json --weights W.safetensors --inputs IN.safetensors\n"
               "                --out OUT.safetensors [--threads N] [--force] [--check-finite]\n"
               "       attn run --config VIT.json --weights W.safetensors --image FILE [--mean M[,M,M]]\n"
               "                [--std S[,S,S]] --out OUT.safetensors [--threads N] [--weights-prefix P] [--force]\n"
               "                [--check-finite]\n\n"
               "Runs one module in inference (eval) mode and writes its outputs, to check attn against a\n"
               "PyTorch model without writing C.\n\n");
    print_modules(f);
    fprintf(f, "             the other keys are the keyword arguments of the PyTorch constructor (same\n"
               "             names and defaults; batch_first is always true). multihead_attention also\n"
               "             takes separate_projections (true: q_proj/k_proj/v_proj/out_proj.weight/.bias\n"
               "             instead of in_proj_weight/in_proj_bias). sparse_attention (d_model, num_heads,\n"
               "             window_size, dropout) and local_global_attention (d_model, num_heads,\n"
               "             local_window, dropout) are the reference sketch's SparseAttention (causal\n"
               "             window: query i sees keys i - window_size .. i) and LocalGlobalAttention\n"
               "             (projection(global_attn(x) + local_attn(x)), local: |i - j| <= local_window).\n"
               "             linear_attention (d_model, num_heads, causal) and performer_attention (d_model,\n"
               "             num_heads, num_features, dropout, causal) are its LinearAttention (phi = elu + 1)\n"
               "             and PerformerAttention (FAVOR+ on its buffer R) with the published math;\n"
               "             \"causal\": true makes them causal (prefix sums).\n"
               "             Stacks: num_layers, norm (true/false) and the layer's arguments in\n"
               "             \"encoder_layer\" / \"decoder_layer\". Forward options may sit here too:\n"
               "             need_weights, average_attn_weights, is_causal, src_is_causal, tgt_is_causal,\n"
               "             memory_is_causal (as the module's forward() names them). vision_transformer:\n"
               "             torchvision's VisionTransformer arguments (image_size, patch_size, num_layers,\n"
               "             num_heads, hidden_dim, mlp_dim, num_classes, dropout) and in_channels (3),\n"
               "             layer_norm_eps (1e-6), distilled (false).\n");
    fprintf(f,
            "W.safetensors  the module's state_dict() under its own names (F32/F16/BF16/F64): for\n"
            "             sparse_attention attn.W_q.weight .. attn.W_o.bias, for local_global_attention\n"
            "             local_attn.W_*, global_attn.W_*, projection.weight/bias, for linear_attention\n"
            "             query_projection.* .. output_projection.*, for performer_attention W_q.* ..\n"
            "             W_o.* and the buffer R [num_heads, d_model / num_heads, num_features]; vision_transformer\n"
            "             torchvision's VisionTransformer names (conv_proj.weight, encoder.layers...).\n"
            "IN.safetensors tensors named as the forward() arguments: query, key, value,\n"
            "             key_padding_mask, attn_mask; src, mask / src_mask, src_key_padding_mask; tgt,\n"
            "             memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask;\n"
            "             x [batch, length, d_model] for the reference sketch's modules (sparse_attention,\n"
            "             local_global_attention, linear_attention, performer_attention);\n"
            "             x [B, C, H, W] for vision_transformer.\n"
            "             Batch-first. Boolean masks (BOOL/U8): true = not allowed; float masks are added.\n"
            "             For multihead_attention, key and value default to query.\n"
            "--weights-prefix P  the weights are W.safetensors' tensors named P + state_dict name\n"
            "             (e.g. one of several models in a file; the others' names must not start with P).\n"
            "--image FILE  instead of --inputs, for vision_transformer: a PNG (when built with libpng),\n"
            "             PPM or PGM image, resized (bilinear) to the configuration's image_size, gray\n"
            "             replicated to RGB or RGB made gray as in_channels says, scaled to [0, 1] and\n"
            "             normalised per channel as (v - mean) / std (--mean, --std: one number or one per\n"
            "             channel; default 0 and 1; torchvision's ImageNet weights want\n"
            "             --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225): x [1, C, H, W].\n"
            "OUT.safetensors  'output' (F32; the logits [B, num_classes] for vision_transformer), and\n"
            "             'attn_output_weights' when need_weights is true.\n"
            "--threads N  threads to use (default: ATTN_NUM_THREADS or OpenMP's).\n"
            "--force      replace an existing OUT that is not a safetensors file. OUT is never one of the\n"
            "             inputs, nor a device, FIFO or symbolic link; it is replaced atomically.\n"
            "--check-finite  a NaN or infinite value in the weights (after conversion to float32: an F64\n"
            "             1e300 is +inf), in the inputs (a float mask may hold -inf: masked) or in the\n"
            "             outputs is an error naming the tensor, the first such index and its value, and\n"
            "             OUT is not written. Without it non-finite values propagate as in PyTorch.\n\n"
            "Errors (unknown module or key, missing or mis-shaped weights and inputs) are reported on one\n"
            "line and exit 1; usage errors exit 2. Unlike PyTorch < 2.5, a query whose keys are all masked\n"
            "gets attention output 0 instead of NaN.\n");
}

/* "[i, j, k]" of flat index e in a row-major tensor of this shape. */
static void format_index(size_t e, int rank, const int64_t *shape, char *buf, size_t cap) {
    size_t sub[8] = {0}, o = 0;
    for (int d = rank - 1; d >= 0 && d < 8; d--) {
        sub[d] = shape[d] > 0 ? e % (size_t)shape[d] : 0;
        e = shape[d] > 0 ? e / (size_t)shape[d] : 0;
    }
    o += (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < rank && d < 8 && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%zu", d ? ", " : "", sub[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* --check-finite: 0 when every floating tensor of st (those whose name starts with prefix) is
 * finite after conversion to float32 (a mask's -inf allowed: it means "masked"), else an error
 * naming what (weights / inputs), the file, the tensor, the first bad index and value. */
static int check_finite_file(const char *what, const char *path, const attn_safetensors *st, const char *prefix) {
    const size_t pl = prefix ? strlen(prefix) : 0;
    for (size_t i = 0; i < attn_safetensors_count(st); i++) {
        const attn_safetensors_tensor *t = attn_safetensors_get(st, i);
        if (t->dtype != ATTN_DTYPE_F16 && t->dtype != ATTN_DTYPE_BF16 && t->dtype != ATTN_DTYPE_F32 &&
            t->dtype != ATTN_DTYPE_F64 && t->dtype != ATTN_DTYPE_F8_E4M3 && t->dtype != ATTN_DTYPE_F8_E5M2)
            continue;
        if (pl && strncmp(t->name, prefix, pl)) continue;
        size_t n = 1;
        for (int d = 0; d < t->rank; d++) n *= (size_t)t->shape[d];
        float *x = malloc(sizeof(float) * (n ? n : 1));
        if (!x) return cli_fail("run: --check-finite: out of memory reading '%s'", t->name);
        if (attn_safetensors_read_f32(st, t->name, x, n)) {
            free(x);
            return cli_fail("run: %s: %s", path, model_msg_for(path));
        }
        const size_t nl = strlen(t->name);
        const int mask = nl >= 4 && !strcmp(t->name + nl - 4, "mask");
        size_t e = 0;
        while (e < n && (isfinite(x[e]) || (mask && x[e] == -INFINITY))) e++;
        if (e < n) {
            char idx[160], val[80];
            format_index(e, t->rank, t->shape, idx, sizeof idx);
            double d = x[e];
            if (t->dtype == ATTN_DTYPE_F64) /* the stored value: finite, maybe, but beyond float */
                memcpy(&d, (const char *)t->data + e * sizeof d, sizeof d);
            if (isfinite(d))
                snprintf(val, sizeof val, "%g (F64; %g in float32)", d, (double)x[e]);
            else
                snprintf(val, sizeof val, isnan(d) ? "nan" : "%g", d); /* not "-nan" */
            free(x);
            return cli_fail("run: --check-finite: %s %s: '%s'%s is %s", what, path, t->name, idx, val);
        }
        free(x);
    }
    return 0;
}

/* --check-finite on an output: 0 when finite, else the error (OUT is then not written). */
static int check_finite_out(const char *name, const float *y, int rank, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < rank; d++) n *= (size_t)shape[d];
    for (size_t e = 0; e < n; e++)
        if (!isfinite(y[e])) {
            char idx[160];
            format_index(e, rank, shape, idx, sizeof idx);
            return cli_fail("run: --check-finite: output '%s'%s is %s (weights and inputs are finite); not written",
                            name, idx,
                            isnan(y[e]) ? "nan"
                            : y[e] > 0  ? "inf"
                                        : "-inf");
        }
    return 0;
}

/* The forward's outputs to OUT: 'output' and, when the module gave them, 'attn_output_weights'
 * (with --check-finite, none is written unless all are finite). 0, or 1 (printed). */
static int write_outputs(const attn_model *m, const char *out, int check_finite) {
    int rank = 0, rc = 0;
    int64_t shape[4];
    attn_safetensors_writer *w = NULL;
    const float *y = attn_model_output(m, &rank, shape);
    if (check_finite && (rc = check_finite_out("output", y, rank, shape))) return rc;
    if (attn_safetensors_writer_create(&w) ||
        attn_safetensors_writer_add(w, "output", ATTN_DTYPE_F32, rank, shape, y)) {
        rc = cli_fail("run: %s: %s", out, model_msg_for(out));
        goto done;
    }
    const float *aw = attn_model_weights(m, &rank, shape);
    if (aw && check_finite && (rc = check_finite_out("attn_output_weights", aw, rank, shape))) goto done;
    if (aw && attn_safetensors_writer_add(w, "attn_output_weights", ATTN_DTYPE_F32, rank, shape, aw)) {
        rc = cli_fail("run: %s: %s", out, model_msg_for(out));
        goto done;
    }
    if (attn_safetensors_writer_write_file(w, out)) rc = cli_fail("run: %s: %s", out, model_msg_for(out));
done:
    attn_safetensors_writer_free(w);
    return rc;
}

int cmd_run(int argc, char **argv) {
    const char *config = NULL, *weights = NULL, *inputs = NULL, *out = NULL, *image = NULL, *mean_s = NULL,
               *std_s = NULL, *wprefix = NULL;
    int threads = 0, force = 0, check_finite = 0;
    cli_opt opts[] = {
        CLI_STRING("--config", &config),
        CLI_STRING("--weights", &weights),
        CLI_STRING("--inputs", &inputs),
        CLI_STRING("--out", &out),
        CLI_STRING_NONEMPTY("--weights-prefix", &wprefix),
        CLI_STRING_NONEMPTY("--image", &image),
        CLI_STRING_NONEMPTY("--mean", &mean_s),
        CLI_STRING_NONEMPTY("--std", &std_s),
        CLI_INT("--threads", &threads, 1, 4096),
        CLI_FLAG("--force", &force),
        CLI_FLAG("--check-finite", &check_finite),
        CLI_END,
    };
    int parsed = cli_parse("run", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (inputs && image) return cli_usage_error("run: --inputs and --image do not go together");
    if ((mean_s || std_s) && !image) return cli_usage_error("run: --mean / --std go with --image");
    if (!config || !weights || (!inputs && !image) || !out)
        return cli_usage_error("run: missing %s (try 'attn run --help')", !config    ? "--config"
                                                                          : !weights ? "--weights"
                                                                          : !out     ? "--out"
                                                                                     : "--inputs or --image");
    if (threads) attn_set_num_threads(threads);
    const char *const ins[4] = {config, weights, inputs, image};
    if (safe_out_check("run", "--out", out, ins, 4, SAFE_KIND_SAFETENSORS, force)) return 1;

    model_in mi;
    memset(&mi, 0, sizeof mi);
    int rc = model_open(&mi, "run", config, weights, wprefix);
    if (!rc && check_finite) rc = check_finite_file("weights", weights, mi.weights, wprefix);
    if (!rc) rc = model_bind(&mi, "run", config, inputs, image, mean_s, std_s, "vision_transformer models");
    if (!rc && check_finite) rc = check_finite_file("inputs", image ? image : inputs, model_bound(&mi), NULL);
    if (!rc && attn_model_forward(mi.m, 0, 0, 0, 0, NULL)) rc = cli_fail("run: %s", attn_last_error());
    if (!rc) rc = write_outputs(mi.m, out, check_finite);
    model_close(&mi);
    return rc;
}
