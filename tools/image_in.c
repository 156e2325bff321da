/* Image files as ViT inputs (image_in.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "image_in.h"

int image_in_parse(const char *cmd, const char *flag, const char *s, int channels, float *out) {
    float v[3];
    int n = 0;
    if (channels != 1 && channels != 3)
        return cli_fail("%s: %s: the model takes %d channels (images give 1 or 3)", cmd, flag, channels);
    const char *p = s;
    while (1) {
        char *end;
        const double d = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !isfinite(d) || n == 3)
            return cli_usage_error("%s: %s '%s': want one number or one per channel (m or m,m,m)", cmd, flag, s);
        v[n++] = (float)d;
        if (!*end) break;
        p = end + 1;
    }
    if (n != 1 && n != channels)
        return cli_usage_error("%s: %s '%s': %d numbers for a model with %d channels", cmd, flag, s, n, channels);
    for (int c = 0; c < channels; c++) out[c] = v[n == 1 ? 0 : c];
    return 0;
}

int image_in_load(const char *cmd, const char *path, const attn_vit_config *c, const float *mean, const float *std,
                  image_in *in) {
    memset(in, 0, sizeof *in);
    if (c->in_channels != 1 && c->in_channels != 3)
        return cli_fail("%s: --image: the model takes %lld channels (images give 1 or 3)", cmd,
                        (long long)c->in_channels);
    if (attn_image_load(path, &in->img)) {
        /* "attn_image_load: PATH: ..." -> "PATH: ..." */
        const char *msg = attn_last_error();
        if (!strncmp(msg, "attn_image_load: ", 17)) msg += 17;
        return cli_fail("%s: %s", cmd, msg);
    }
    in->c = c->in_channels, in->h = c->image_h, in->w = c->image_w;
    const size_t n = (size_t)(in->c * in->h * in->w);
    attn_safetensors_writer *w = NULL;
    size_t len = 0;
    const int64_t shape[4] = {1, in->c, in->h, in->w};
    if (!(in->x = malloc(sizeof(float) * n)) ||
        attn_image_to_tensor(&in->img, in->h, in->w, (int)in->c, mean, std, in->x) ||
        attn_safetensors_writer_create(&w) || attn_safetensors_writer_add(w, "x", ATTN_DTYPE_F32, 4, shape, in->x) ||
        attn_safetensors_writer_write_memory(w, &in->st_buf, &len) ||
        attn_safetensors_open_memory(in->st_buf, len, &in->st)) {
        const int rc = cli_fail("%s: %s: %s", cmd, path, in->x ? attn_last_error() : "out of memory");
        attn_safetensors_writer_free(w);
        image_in_free(in);
        return rc;
    }
    attn_safetensors_writer_free(w);
    return 0;
}

void image_in_free(image_in *in) {
    attn_safetensors_close(in->st);
    free(in->st_buf);
    free(in->x);
    attn_image_free(&in->img);
    memset(in, 0, sizeof *in);
}
