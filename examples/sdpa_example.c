/* Smallest use of attn: causal scaled dot-product attention on random data, with the weights.
 * Build against an installed attn:
 *   cc sdpa_example.c $(pkg-config --cflags --libs attn) -lm -fopenmp */
#include <attn/attn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    enum { B = 1, H = 2, N = 6, D = 8 };
    static float q[B * H * N * D], k[B * H * N * D], v[B * H * N * D], o[B * H * N * D];
    static float w[B * H * N * N];
    unsigned s = 42;
    for (int i = 0; i < B * H * N * D; i++) {
        s = s * 1664525u + 1013904223u;
        q[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        k[i] = q[i] * 0.5f + 0.1f;
        v[i] = (float)(i % 7) - 3.0f;
    }
    attn_tensor tq = attn_tensor_4d(q, B, H, N, D), tk = attn_tensor_4d(k, B, H, N, D),
                tv = attn_tensor_4d(v, B, H, N, D), to = attn_tensor_4d(o, B, H, N, D),
                tw = attn_tensor_4d(w, B, H, N, N);
    attn_sdpa_params p = attn_sdpa_params_default();
    p.causal = ATTN_CAUSAL_TOP_LEFT;

    size_t bytes = attn_sdpa_workspace_size(&tq, &tk, &tv); /* the caller owns the scratch */
    void *ws = malloc(bytes);
    attn_status st = attn_sdpa_forward(&tq, &tk, &tv, &p, &to, &tw, NULL, ws, bytes);
    free(ws);
    if (st != ATTN_OK) {
        fprintf(stderr, "attention failed: %s: %s\n", attn_status_str(st), attn_last_error());
        return 1;
    }
    printf("head 0 causal attention weights:\n");
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) printf(" %.3f", w[i * N + j]);
        printf("\n");
    }
    return 0;
}
