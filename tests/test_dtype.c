/* Element types of tensor views: the conversions (round to nearest even, NaN, infinities, f16
 * subnormals; exhaustive round trips), and every entry point that takes views answering
 * ATTN_ERR_UNSUPPORTED with a message for a type it has no kernel for. */
#include <string.h>

#include "test_util.h"

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t u_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void check_conversions(void) {
    /* every bf16 and f16 value widens exactly and narrows back to itself (NaNs stay NaN) */
    int bad_bf = 0, bad_h = 0;
    for (uint32_t x = 0; x < 65536; x++) {
        const float f = attn_bf16_to_f32((attn_bf16)x);
        if (u_of(f) != x << 16) bad_bf++;
        if (f == f ? attn_f32_to_bf16(f) != x : !isnan(attn_bf16_to_f32(attn_f32_to_bf16(f)))) bad_bf++;
        const float h = attn_f16_to_f32((attn_f16)x);
        if (h == h ? attn_f32_to_f16(h) != x : !isnan(attn_f16_to_f32(attn_f32_to_f16(h)))) bad_h++;
    }
    CHECK(!bad_bf, "%d bf16 round trips fail", bad_bf);
    CHECK(!bad_h, "%d f16 round trips fail", bad_h);
    /* ties to even, and the nearest otherwise: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
    CHECK(attn_f32_to_bf16(f_of(0x3f808000u)) == 0x3f80, "bf16 tie rounds to even (down)");
    CHECK(attn_f32_to_bf16(f_of(0x3f818000u)) == 0x3f82, "bf16 tie rounds to even (up)");
    CHECK(attn_f32_to_bf16(f_of(0x3f808001u)) == 0x3f81, "bf16 above the tie rounds up");
    CHECK(attn_f32_to_bf16(f_of(0x7f7fffffu)) == 0x7f80, "bf16 overflow goes to inf");
    CHECK(attn_f32_to_bf16(-INFINITY) == 0xff80, "bf16 -inf");
    CHECK(isnan(attn_bf16_to_f32(attn_f32_to_bf16(f_of(0x7f800001u)))), "bf16 keeps a NaN whose payload is low");
    /* f16: 1 + 2^-11 is halfway between 1 and 1 + 2^-10; 65520 rounds to inf; subnormals */
    CHECK(attn_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "f16 tie rounds to even");
    CHECK(attn_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01, "f16 above the tie rounds up");
    CHECK(attn_f32_to_f16(65520.0f) == 0x7c00 && attn_f32_to_f16(65519.0f) == 0x7bff, "f16 overflow edge");
    CHECK(attn_f32_to_f16(0x1p-24f) == 0x0001 && attn_f32_to_f16(0x1p-25f) == 0x0000 &&
              attn_f32_to_f16(0x1.8p-25f) == 0x0001 && attn_f32_to_f16(0x1.8p-24f) == 0x0002,
          "f16 subnormal rounding");
    /* against the hardware-free formula on random floats: the nearest bf16, ties to even */
    test_rng r = rng_seeded(5);
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        const float f = (float)rng_normal(&r) * 1e3f;
        const attn_bf16 b = attn_f32_to_bf16(f);
        const double e = fabs((double)attn_bf16_to_f32(b) - f);
        const double eu = fabs((double)attn_bf16_to_f32((attn_bf16)(b + 1)) - f),
                     ed = fabs((double)attn_bf16_to_f32((attn_bf16)(b - 1)) - f);
        if (e > eu || e > ed || ((e == eu || e == ed) && (b & 1))) bad++; /* nearest, ties to even */
    }
    CHECK(!bad, "%d random floats not rounded to the nearest bf16", bad);
    float src[5] = {1, -2.5f, 3.0e-3f, 1e30f, -0.0f}, back[5];
    attn_bf16 mid[5];
    CHECK_OK(attn_convert(src, ATTN_TYPE_F32, mid, ATTN_TYPE_BF16, 5));
    CHECK_OK(attn_convert(mid, ATTN_TYPE_BF16, back, ATTN_TYPE_F32, 5));
    CHECK(back[0] == 1 && back[1] == -2.5f && fabsf(back[2] - 3e-3f) < 3e-3f / 128, "attn_convert bf16");
    CHECK_STATUS(attn_convert(src, (attn_type)7, mid, ATTN_TYPE_BF16, 5), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(!strcmp(attn_type_name(ATTN_TYPE_BF16), "bf16") && attn_type_size(ATTN_TYPE_F16) == 2 &&
              attn_type_size(ATTN_TYPE_F32) == 4 && !attn_type_name((attn_type)9),
          "type names and sizes");
}

/* An error of status want whose message names the function and the type. */
static void check_rejects(attn_status got, attn_status want, const char *fn, const char *type) {
    CHECK(got == want, "%s: status %d, expected %d (%s)", fn, (int)got, (int)want, attn_last_error());
    const char *msg = attn_last_error();
    CHECK(strstr(msg, fn) && (!type || strstr(msg, type)), "%s: message '%s' should name the function and %s", fn, msg,
          type ? type : "");
}

static void check_entry_points(void) {
    static float buf[16384];
    static char ws[1 << 22];
    attn_sdpa_params p = attn_sdpa_params_default();
    attn_tensor q = attn_tensor_4d(buf, 1, 2, 8, 8), k = attn_tensor_4d(buf + 1024, 1, 2, 8, 8),
                v = attn_tensor_4d(buf + 2048, 1, 2, 8, 8), o = attn_tensor_4d(buf + 3072, 1, 2, 8, 8),
                l = attn_tensor_3d(buf + 4096, 1, 2, 8), dq = attn_tensor_4d(buf + 5120, 1, 2, 8, 8),
                dk = attn_tensor_4d(buf + 6144, 1, 2, 8, 8), dv = attn_tensor_4d(buf + 7168, 1, 2, 8, 8);
    attn_tensor h = q, h16 = q, bad = q;
    h.dtype = ATTN_TYPE_BF16;
    h16.dtype = ATTN_TYPE_F16;
    bad.dtype = (attn_type)5;
    const size_t wsb = attn_sdpa_workspace_size(&q, &k, &v) > attn_flash_workspace_size(&q, &k, &v)
                           ? attn_sdpa_workspace_size(&q, &k, &v)
                           : attn_flash_workspace_size(&q, &k, &v);
    CHECK(wsb <= sizeof ws, "workspace %zu", wsb);
    CHECK_OK(attn_sdpa_forward(&q, &k, &v, &p, &o, NULL, &l, ws, wsb));
    check_rejects(attn_sdpa_forward(&h, &k, &v, &p, &o, NULL, &l, ws, wsb), ATTN_ERR_UNSUPPORTED, "attn_sdpa_forward",
                  "bf16");
    check_rejects(attn_sdpa_forward(&q, &k, &v, &p, &h16, NULL, &l, ws, wsb), ATTN_ERR_UNSUPPORTED, "attn_sdpa_forward",
                  "f16");
    check_rejects(attn_sdpa_forward(&bad, &k, &v, &p, &o, NULL, &l, ws, wsb), ATTN_ERR_INVALID_ARGUMENT,
                  "attn_sdpa_forward", NULL);
    check_rejects(attn_sdpa_backward(&q, &k, &v, &p, &h, &dq, &dk, &dv, ws, wsb), ATTN_ERR_UNSUPPORTED,
                  "attn_sdpa_backward", "bf16");
    check_rejects(attn_sdpa_backward(&q, &k, &v, &p, &o, &h16, &dk, &dv, ws, wsb), ATTN_ERR_UNSUPPORTED,
                  "attn_sdpa_backward", "f16");
    check_rejects(attn_flash_forward(&h16, &k, &v, &p, &o, &l, ws, wsb), ATTN_ERR_UNSUPPORTED, "attn_flash_forward",
                  "f16");
    attn_tensor l16 = l;
    l16.dtype = ATTN_TYPE_BF16;
    check_rejects(attn_flash_forward(&q, &k, &v, &p, &o, &l16, ws, wsb), ATTN_ERR_UNSUPPORTED, "attn_flash_forward",
                  "bf16");
    check_rejects(attn_flash_backward(&q, &k, &v, &p, &o, &o, &l, &dq, &h16, &dv, ws, wsb), ATTN_ERR_UNSUPPORTED,
                  "attn_flash_backward", "f16");
    check_rejects(attn_flash_weights(&h16, &k, &p, 0, 0, 0, 1, 0, buf + 9000), ATTN_ERR_UNSUPPORTED,
                  "attn_flash_weights", "f16");
    check_rejects(attn_flash_weights(&h, &h, &p, 0, 0, 0, 1, 0, buf + 9000), ATTN_ERR_UNSUPPORTED, "attn_flash_weights",
                  "bf16");
    /* the bf16 backward wants a bf16 dout and float gradients */
    attn_tensor hk = k, hv = v, hdq = dq;
    hk.dtype = hv.dtype = hdq.dtype = ATTN_TYPE_BF16;
    check_rejects(attn_flash_backward(&h, &hk, &hv, &p, &o, &o, &l, &dq, &dk, &dv, ws, wsb), ATTN_ERR_UNSUPPORTED,
                  "attn_flash_backward", "f32");
    check_rejects(attn_flash_backward(&h, &hk, &hv, &p, &o, &h, &l, &hdq, &dk, &dv, ws, wsb), ATTN_ERR_UNSUPPORTED,
                  "attn_flash_backward", "bf16");
    /* a mixed q/k/v is refused too */
    attn_tensor kb = k;
    kb.dtype = ATTN_TYPE_BF16;
    check_rejects(attn_flash_forward(&q, &kb, &v, &p, &o, &l, ws, wsb), ATTN_ERR_UNSUPPORTED, "attn_flash_forward",
                  "bf16");
    /* the additive mask */
    attn_tensor am = attn_tensor_2d(buf + 10000, 8, 8);
    am.dtype = ATTN_TYPE_F16;
    attn_sdpa_params pm = p;
    pm.add_mask = &am;
    check_rejects(attn_sdpa_forward(&q, &k, &v, &pm, &o, NULL, &l, ws, wsb), ATTN_ERR_UNSUPPORTED, "add_mask", "f16");
    /* tile counting only reads shapes: any type */
    CHECK(attn_flash_tile_count(&h, &h, &p, NULL) == 2, "tile count of a bf16 view");
    /* RoPE */
    attn_rope_config rc = attn_rope_config_default(8);
    attn_tensor x = attn_tensor_4d(buf, 1, 2, 8, 8);
    x.dtype = ATTN_TYPE_BF16;
    check_rejects(attn_rope_forward(&rc, &x, 0, NULL), ATTN_ERR_UNSUPPORTED, "attn_rope_forward", "bf16");
    check_rejects(attn_rope_backward(&rc, &x, 0, NULL), ATTN_ERR_UNSUPPORTED, "attn_rope_backward", "bf16");
    /* typed constructors */
    attn_bf16 hb[16];
    attn_tensor t = attn_tensor_4d_typed(hb, ATTN_TYPE_BF16, 1, 1, 4, 4);
    CHECK(t.dtype == ATTN_TYPE_BF16 && t.data16 == hb && t.stride[2] == 4, "attn_tensor_4d_typed");
    attn_tensor z = {0};
    CHECK(z.dtype == ATTN_TYPE_F32 && attn_tensor_4d(buf, 1, 1, 1, 1).dtype == ATTN_TYPE_F32, "f32 is the zero value");
}

int main(void) {
    check_conversions();
    check_entry_points();
    return test_summary("test_dtype");
}
