/* Opening the models of run, viz and sample: see model_open.h. */
#include "model_open.h"

#include <string.h>

#include "cli.h"

const char *model_msg_for(const char *path) {
    const char *msg = attn_last_error();
    const size_t pl = strlen(path);
    if (!strncmp(msg, "safetensors: ", 13) && !strncmp(msg + 13, path, pl) && !strncmp(msg + 13 + pl, ": ", 2))
        msg += 13 + pl + 2;
    return msg;
}

int model_open(model_in *mi, const char *cmd, const char *config, const char *weights, const char *prefix) {
    /* the messages name the file: "cannot read 'CONFIG': ...", "CONFIG: line 1 column 2: ..." */
    if (attn_model_create_file(config, &mi->m)) return cli_fail("%s: %s", cmd, attn_last_error());
    /* the state_dict under the PyTorch module's names (the seed modules' W_q ... through their map),
     * buffers (performer_attention's R) included */
    if (attn_safetensors_open_file(weights, &mi->weights) || attn_model_load(mi->m, mi->weights, prefix, 1))
        return cli_fail("%s: %s: %s", cmd, weights, model_msg_for(weights));
    return 0;
}

int model_bind(model_in *mi, const char *cmd, const char *config, const char *inputs, const char *image,
               const char *mean_s, const char *std_s, const char *image_is_for) {
    if (!image) {
        if (attn_safetensors_open_file(inputs, &mi->inputs) || attn_model_bind_safetensors(mi->m, mi->inputs, NULL, 1))
            return cli_fail("%s: %s: %s", cmd, inputs, model_msg_for(inputs));
        return 0;
    }
    const attn_vit *vit = attn_model_vit(mi->m);
    if (!vit)
        return cli_fail("%s: --image is for %s; %s is a %s (give --inputs)", cmd, image_is_for, config,
                        attn_model_name(mi->m));
    const attn_vit_config *vc = attn_vit_get_config(vit);
    float mean[3], std[3];
    int rc;
    if ((mean_s && (rc = image_in_parse(cmd, "--mean", mean_s, (int)vc->in_channels, mean))) ||
        (std_s && (rc = image_in_parse(cmd, "--std", std_s, (int)vc->in_channels, std))) ||
        (rc = image_in_load(cmd, image, vc, mean_s ? mean : NULL, std_s ? std : NULL, &mi->img)))
        return rc;
    if (attn_model_bind_safetensors(mi->m, mi->img.st, NULL, 1))
        return cli_fail("%s: %s: %s", cmd, image, attn_last_error());
    return 0;
}

const attn_safetensors *model_bound(const model_in *mi) { return mi->inputs ? mi->inputs : mi->img.st; }

void model_close(model_in *mi) {
    attn_safetensors_close(mi->weights);
    attn_safetensors_close(mi->inputs);
    image_in_free(&mi->img);
    attn_model_free(mi->m);
    memset(mi, 0, sizeof *mi);
}

int gpt_open_shape(const char *cmd, const char *path, train_gpt_shape *shape) {
    attn_safetensors *st = NULL;
    if (attn_safetensors_open_file(path, &st) != ATTN_OK) return cli_fail("%s: %s", cmd, attn_last_error());
    char err[256];
    const int bad = train_shape_from_meta(st, shape, err, sizeof err);
    attn_safetensors_close(st);
    if (bad) return cli_fail("%s: %s: %s", cmd, path, err);
    return 0;
}

int gpt_open_model(const char *cmd, const char *path, const train_gpt_shape *shape, attn_gpt **g) {
    attn_gpt_config cfg = train_gpt_config(shape);
    if (attn_gpt_create(&cfg, g) != ATTN_OK ||
        attn_checkpoint_load(path, attn_gpt_params(*g), NULL, NULL, NULL) != ATTN_OK)
        return cli_fail("%s: %s", cmd, attn_last_error());
    return 0;
}
