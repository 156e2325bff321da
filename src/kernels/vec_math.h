/* Vectorised float math for the AVX2 / AVX-512 kernels (internal header, static inline).
 *
 * Include it from a translation unit compiled with the ISA's flags (files named *_avx2.c or
 * *_avx512.c get them from CMake). Each family exists only when its ISA macros are defined:
 *   __AVX512F__:          attn_exp512, attn_normcdf512, attn_gelu_tanh_sig512
 *   __AVX2__ && __FMA__:  attn_exp256, attn_normcdf256, attn_gelu_tanh_sig256
 * (plus the *_finish helpers: e^r 2^n for an already reduced argument).
 * Baseline translation units see none of them (only the ATTN_VM_* constants).
 *
 * attn_exp512 / attn_exp256 (x) -> e^x, lane by lane:
 *   Cephes expf: n = round(x / ln 2), r = x - n ln2 (ln 2 split in two, the first part exact
 *   in n * C1), e^r = 1 + r + r^2 P(r) (degree-5 minimax), then 2^n applied so that results in
 *   the subnormal range round once and large n never builds an invalid exponent: AVX2 as two
 *   exact power-of-two factors 2^(n/2) * 2^(n - n/2), AVX-512 by vscalefps (one instruction for
 *   eight; the same single rounding, so the same bits: compared on every third float, NaNs,
 *   infinities and subnormals included, and tested through the GELUs in test_ops; the GELU
 *   1.04-1.11x, a ViT-S/16 bf16 forward 1.06x).
 *   Accuracy: max 1.01 ulp against the exact e^x over a sweep of every 7th float in
 *   [-110, 90] (subnormal results included, counted in subnormal steps); the AVX2 and AVX-512
 *   versions give identical bits. Special cases: exp(-inf) = 0 and x <= -104 -> +0,
 *   x > 88.72 -> +inf, exp(NaN) = NaN. No FP exception is relied upon, no -ffast-math needed.
 *   For softmax-style inputs (x - max <= 0) the result is in [0, 1] and never inf.
 *
 * attn_normcdf512 / 256 (x, &pdf) -> Phi(x) = P(N(0,1) <= x), and pdf = phi(x) = e^(-x^2/2)/sqrt(2pi)
 *   (GELU erf form: gelu = x Phi(x), gelu' = Phi(x) + x phi(x)). Phi is computed through
 *   erfc(|x|/sqrt 2) = e^(-x^2/2) * erfcx(|x|/sqrt 2): erfcx from a degree-10 polynomial in
 *   q = (a - 2) / (a + 2) fitted to (1 + 2a) erfcx(a) - 1 over a in [0, 15/sqrt 2], and
 *   e^(-x^2/2) with the rounding error of x*x compensated (fma), so Phi keeps its relative
 *   accuracy in the left tail (no 1 + erf cancellation). Max relative error 4.5 ulp (sweep of
 *   every 97th float with |x| < 16), pdf 2.7 ulp; |x| >= 15 is treated as 15 (Phi is then
 *   0 or 1 and phi 0 in float).
 *
 * attn_gelu_tanh_sig512 / 256 (x, &dsig) -> s = (1 + tanh(u)) / 2 = sigmoid(2u) with
 *   u = sqrt(2/pi) (x + 0.044715 x^3) (GELU tanh form: gelu = x s), and dsig = s (1 - s).
 *   Computed from v = e^(-2|u|) as s = 1/(1+v) or v/(1+v), s(1-s) = v/(1+v)^2: no cancellation,
 *   no overflow (|x| is clamped to 100, where s is exactly 0 or 1 in float anyway). -2|u| and
 *   its range reduction are computed in double (float rounding of u would cost 2|u| ulp in the
 *   left tail), the polynomial in float: s within ~2 ulp, s(1-s) within ~3 ulp. */
#ifndef ATTN_VEC_MATH_H
#define ATTN_VEC_MATH_H

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#include <math.h>
#endif

/* Cephes expf */
#define ATTN_VM_LOG2E 1.44269504088896341f
#define ATTN_VM_EXP_C1 0.693359375f
#define ATTN_VM_EXP_C2 -2.12194440e-4f
#define ATTN_VM_EXP_P0 1.9875691500e-4f
#define ATTN_VM_EXP_P1 1.3981999507e-3f
#define ATTN_VM_EXP_P2 8.3334519073e-3f
#define ATTN_VM_EXP_P3 4.1665795894e-2f
#define ATTN_VM_EXP_P4 1.6666665459e-1f
#define ATTN_VM_EXP_P5 5.0000001201e-1f
#define ATTN_VM_EXP_LO -105.0f /* e^-105 rounds to +0 */
#define ATTN_VM_EXP_HI 89.0f   /* e^89 overflows to +inf */

/* (1 + 2a) erfcx(a) - 1 ~= sum_k ATTN_VM_ERFC_Ck q^k, q = (a - 2)/(a + 2), highest first */
#define ATTN_VM_ERFC_C10 0x1.4c5da8p-15f
#define ATTN_VM_ERFC_C9 -0x1.6315bep-12f
#define ATTN_VM_ERFC_C8 -0x1.48267ep-10f
#define ATTN_VM_ERFC_C7 0x1.47ec7cp-10f
#define ATTN_VM_ERFC_C6 0x1.1acdc8p-7f
#define ATTN_VM_ERFC_C5 -0x1.0766d6p-7f
#define ATTN_VM_ERFC_C4 -0x1.bc06eap-5f
#define ATTN_VM_ERFC_C3 0x1.4ffacap-3f
#define ATTN_VM_ERFC_C2 -0x1.540860p-3f
#define ATTN_VM_ERFC_C1 -0x1.7bf5fap-4f
#define ATTN_VM_ERFC_C0 0x1.1ba03ap-2f
#define ATTN_VM_SQRT1_2 0.707106781186547524f
#define ATTN_VM_INV_SQRT_2PI 0.398942280401432678f
#define ATTN_VM_X_MAX 15.0f

#define ATTN_VM_GELU_2K_D 1.5957691216057307 /* 2 sqrt(2/pi) */
#define ATTN_VM_LOG2E_D 1.4426950408889634
#define ATTN_VM_LN2_HI_D 6.93147180369123816490e-01 /* fdlibm split of ln 2 */
#define ATTN_VM_LN2_LO_D 1.90821492927058770002e-10
#define ATTN_VM_GELU_X_MAX 100.0f

/* ------------------------------------------------------------------------------------------ */
#if defined(__AVX512F__)

/* e^r for |r| <= ln(2)/2 */
static inline __m512 attn_exp512_poly(__m512 r) {
    __m512 r2 = _mm512_mul_ps(r, r);
    __m512 p = _mm512_set1_ps(ATTN_VM_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_VM_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_VM_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_VM_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_VM_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_VM_EXP_P5));
    return _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
}

/* e^r * 2^ni for |r| <= ln(2)/2 and ni in [-151, 128]: vscalefps rounds y 2^n once, as the AVX2
 * version's two exact power-of-two factors do, so the bits are the same, in one instruction.
 * ni <= -151 gives 0 either way (y 2^-151 < 2^-150, half the least subnormal), but there
 * vscalefps underflows through a microcode assist (about 180 cycles a vector on Intel; only
 * results in the subnormal range need one): those lanes scale by 2^-inf instead (an exact 0, a
 * NaN y stays NaN). */
static inline __m512 attn_exp512_finish(__m512 r, __m512i ni) {
    const __m512 y = attn_exp512_poly(r);
    /* (vscalefps(NaN, -inf) gives 0 on some CPUs: a NaN lane keeps its n) */
    const __mmask16 dead =
        _mm512_mask_cmple_epi32_mask(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), ni, _mm512_set1_epi32(-151));
    return _mm512_scalef_ps(y, _mm512_mask_mov_ps(_mm512_cvtepi32_ps(ni), dead, _mm512_set1_ps(-INFINITY)));
}

static inline __m512 attn_exp512(__m512 x) {
    /* max/min return their second operand when either is NaN: NaN survives the clamp */
    x = _mm512_max_ps(_mm512_set1_ps(ATTN_VM_EXP_LO), x);
    x = _mm512_min_ps(_mm512_set1_ps(ATTN_VM_EXP_HI), x);
    /* n rounded to nearest even as cvtps2dq rounds it, kept as a float for vscalefps */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(ATTN_VM_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ATTN_VM_EXP_C1), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ATTN_VM_EXP_C2), r);
    /* n <= -151 (x <= -104, -inf clamped there): 0 without vscalefps's underflow assist, as above
     * (a NaN x has a NaN n: not dead) */
    const __mmask16 dead = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-150.5f), _CMP_LE_OQ);
    return _mm512_scalef_ps(attn_exp512_poly(r), _mm512_mask_mov_ps(n, dead, _mm512_set1_ps(-INFINITY)));
}

static inline __m512 attn_normcdf512(__m512 x, __m512 *pdf) {
    __m512 ax = _mm512_min_ps(_mm512_set1_ps(ATTN_VM_X_MAX), _mm512_abs_ps(x));
    __m512 a = _mm512_mul_ps(ax, _mm512_set1_ps(ATTN_VM_SQRT1_2));
    const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
    __m512 q = _mm512_div_ps(_mm512_sub_ps(a, two), _mm512_add_ps(a, two));
    __m512 p = _mm512_set1_ps(ATTN_VM_ERFC_C10);
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C9));
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C8));
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C7));
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C6));
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C5));
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C4));
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C3));
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C2));
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C1));
    p = _mm512_fmadd_ps(p, q, _mm512_set1_ps(ATTN_VM_ERFC_C0));
    /* erfcx(a) = (1 + p) / (1 + 2a) */
    __m512 ecx = _mm512_div_ps(_mm512_add_ps(one, p), _mm512_fmadd_ps(two, a, one));
    /* e^(-x^2/2) with x^2 = hi + lo exactly */
    __m512 hi = _mm512_mul_ps(ax, ax);
    __m512 lo = _mm512_fmsub_ps(ax, ax, hi);
    __m512 e = attn_exp512(_mm512_mul_ps(hi, _mm512_set1_ps(-0.5f)));
    e = _mm512_fnmadd_ps(_mm512_mul_ps(e, _mm512_set1_ps(0.5f)), lo, e);
    __m512 half_erfc = _mm512_mul_ps(_mm512_mul_ps(ecx, e), _mm512_set1_ps(0.5f));
    *pdf = _mm512_mul_ps(e, _mm512_set1_ps(ATTN_VM_INV_SQRT_2PI));
    __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(neg, _mm512_sub_ps(one, half_erfc), half_erfc);
}

/* -2|u| = -2 sqrt(2/pi) |x| (1 + 0.044715 x^2), reduced in double: r (float), n */
static inline void attn_gelu_tanh_reduce512d(__m512d x, __m256 *r, __m256i *n) {
    __m512d inner = _mm512_fmadd_pd(_mm512_set1_pd(0.044715), _mm512_mul_pd(x, x), _mm512_set1_pd(1.0));
    __m512d a = _mm512_mul_pd(_mm512_mul_pd(_mm512_abs_pd(x), _mm512_set1_pd(-ATTN_VM_GELU_2K_D)), inner);
    a = _mm512_max_pd(_mm512_set1_pd(ATTN_VM_EXP_LO), a);
    __m512d nd = _mm512_roundscale_pd(_mm512_mul_pd(a, _mm512_set1_pd(ATTN_VM_LOG2E_D)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d rd = _mm512_fnmadd_pd(nd, _mm512_set1_pd(ATTN_VM_LN2_HI_D), a);
    rd = _mm512_fnmadd_pd(nd, _mm512_set1_pd(ATTN_VM_LN2_LO_D), rd);
    *r = _mm512_cvtpd_ps(rd);
    *n = _mm512_cvtpd_epi32(nd);
}

static inline __m512 attn_gelu_tanh_sig512(__m512 x, __m512 *dsig) {
    __m512 xc = _mm512_max_ps(_mm512_set1_ps(-ATTN_VM_GELU_X_MAX), x);
    xc = _mm512_min_ps(_mm512_set1_ps(ATTN_VM_GELU_X_MAX), xc);
    __m256 rlo, rhi;
    __m256i nlo, nhi;
    attn_gelu_tanh_reduce512d(_mm512_cvtps_pd(_mm512_castps512_ps256(xc)), &rlo, &nlo);
    attn_gelu_tanh_reduce512d(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xc), 1))), &rhi,
                              &nhi);
    __m512 r =
        _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(rlo)), _mm256_castps_pd(rhi), 1));
    __m512i n = _mm512_inserti64x4(_mm512_castsi256_si512(nlo), nhi, 1);
    __m512 v = attn_exp512_finish(r, n); /* e^(-2|u|) */
    __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), v));
    __m512 vinv = _mm512_mul_ps(v, inv);
    *dsig = _mm512_mul_ps(vinv, inv);
    __mmask16 neg = _mm512_cmp_ps_mask(xc, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(neg, inv, vinv);
}

#endif /* __AVX512F__ */

/* ------------------------------------------------------------------------------------------ */
#if defined(__AVX2__) && defined(__FMA__)

static inline __m256 attn_abs256(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

static inline __m256 attn_exp256_finish(__m256 r, __m256i ni) {
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 p = _mm256_set1_ps(ATTN_VM_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_VM_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_VM_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_VM_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_VM_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_VM_EXP_P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    /* ni <= -151 gives 0 either way; there the first factor is 0 instead of 2^n1, so that no
     * product underflows through a microcode assist (see attn_exp512_finish); a NaN y stays NaN */
    const __m256i live = _mm256_cmpgt_epi32(ni, _mm256_set1_epi32(-151));
    __m256 s1 = _mm256_and_ps(_mm256_castsi256_ps(live),
                              _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

static inline __m256 attn_exp256(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(ATTN_VM_EXP_LO), x);
    x = _mm256_min_ps(_mm256_set1_ps(ATTN_VM_EXP_HI), x);
    __m256i ni = _mm256_cvtps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(ATTN_VM_LOG2E)));
    __m256 n = _mm256_cvtepi32_ps(ni);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ATTN_VM_EXP_C1), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ATTN_VM_EXP_C2), r);
    return attn_exp256_finish(r, ni);
}

static inline __m256 attn_normcdf256(__m256 x, __m256 *pdf) {
    __m256 ax = _mm256_min_ps(_mm256_set1_ps(ATTN_VM_X_MAX), attn_abs256(x));
    __m256 a = _mm256_mul_ps(ax, _mm256_set1_ps(ATTN_VM_SQRT1_2));
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    __m256 q = _mm256_div_ps(_mm256_sub_ps(a, two), _mm256_add_ps(a, two));
    __m256 p = _mm256_set1_ps(ATTN_VM_ERFC_C10);
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C9));
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C8));
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C7));
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C6));
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C5));
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C4));
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C3));
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C2));
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C1));
    p = _mm256_fmadd_ps(p, q, _mm256_set1_ps(ATTN_VM_ERFC_C0));
    __m256 ecx = _mm256_div_ps(_mm256_add_ps(one, p), _mm256_fmadd_ps(two, a, one));
    __m256 hi = _mm256_mul_ps(ax, ax);
    __m256 lo = _mm256_fmsub_ps(ax, ax, hi);
    __m256 e = attn_exp256(_mm256_mul_ps(hi, _mm256_set1_ps(-0.5f)));
    e = _mm256_fnmadd_ps(_mm256_mul_ps(e, _mm256_set1_ps(0.5f)), lo, e);
    __m256 half_erfc = _mm256_mul_ps(_mm256_mul_ps(ecx, e), _mm256_set1_ps(0.5f));
    *pdf = _mm256_mul_ps(e, _mm256_set1_ps(ATTN_VM_INV_SQRT_2PI));
    __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_sub_ps(one, half_erfc), half_erfc, neg);
}

static inline void attn_gelu_tanh_reduce256d(__m256d x, __m128 *r, __m128i *n) {
    __m256d inner = _mm256_fmadd_pd(_mm256_set1_pd(0.044715), _mm256_mul_pd(x, x), _mm256_set1_pd(1.0));
    __m256d ax = _mm256_andnot_pd(_mm256_set1_pd(-0.0), x);
    __m256d a = _mm256_mul_pd(_mm256_mul_pd(ax, _mm256_set1_pd(-ATTN_VM_GELU_2K_D)), inner);
    a = _mm256_max_pd(_mm256_set1_pd(ATTN_VM_EXP_LO), a);
    __m256d nd = _mm256_round_pd(_mm256_mul_pd(a, _mm256_set1_pd(ATTN_VM_LOG2E_D)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d rd = _mm256_fnmadd_pd(nd, _mm256_set1_pd(ATTN_VM_LN2_HI_D), a);
    rd = _mm256_fnmadd_pd(nd, _mm256_set1_pd(ATTN_VM_LN2_LO_D), rd);
    *r = _mm256_cvtpd_ps(rd);
    *n = _mm256_cvtpd_epi32(nd);
}

static inline __m256 attn_gelu_tanh_sig256(__m256 x, __m256 *dsig) {
    __m256 xc = _mm256_max_ps(_mm256_set1_ps(-ATTN_VM_GELU_X_MAX), x);
    xc = _mm256_min_ps(_mm256_set1_ps(ATTN_VM_GELU_X_MAX), xc);
    __m128 rlo, rhi;
    __m128i nlo, nhi;
    attn_gelu_tanh_reduce256d(_mm256_cvtps_pd(_mm256_castps256_ps128(xc)), &rlo, &nlo);
    attn_gelu_tanh_reduce256d(_mm256_cvtps_pd(_mm256_extractf128_ps(xc, 1)), &rhi, &nhi);
    __m256 v = attn_exp256_finish(_mm256_set_m128(rhi, rlo), _mm256_set_m128i(nhi, nlo));
    __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), v));
    __m256 vinv = _mm256_mul_ps(v, inv);
    *dsig = _mm256_mul_ps(vinv, inv);
    __m256 neg = _mm256_cmp_ps(xc, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_blendv_ps(inv, vinv, neg);
}

#endif /* __AVX2__ && __FMA__ */

#endif
