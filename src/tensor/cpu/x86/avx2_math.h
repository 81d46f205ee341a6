/* Internal: AVX2/FMA vector versions of exp, tanh and erf for the x86 twins.
 * Accuracy: exp within 2 ulp over [-87, 88]; tanh and erf within 2e-7
 * absolute. Only included from files compiled with -mavx2 -mfma. */
#ifndef CHOIR_AVX2_MATH_H
#define CHOIR_AVX2_MATH_H

#include <immintrin.h>

/* Cephes-style exp: 2^n * p(r) with n = round(x / ln2). Inputs below -87.3
 * give exactly 0 (so -inf masks vanish, as with expf), above 88.37 give +inf. */
static inline __m256 choir_exp256(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.3762626647949f);
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 y = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i n = _mm256_cvtps_epi32(fx);
    __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(pow2));
    y = _mm256_andnot_ps(under, y);
    return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), over);
}

/* tanh: an odd polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel), the
 * exp form elsewhere. */
static inline __m256 choir_tanh256(__m256 x) {
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign_mask, x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    __m256 e =
        choir_exp256(_mm256_mul_ps(_mm256_min_ps(ax, _mm256_set1_ps(10.0f)), _mm256_set1_ps(2.0f)));
    __m256 big =
        _mm256_sub_ps(_mm256_set1_ps(1.0f),
                      _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    big = _mm256_or_ps(big, _mm256_and_ps(sign_mask, x));
    __m256 use_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm256_blendv_ps(big, small, use_small);
}

/* erf: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), odd extension. */
static inline __m256 choir_erf256(__m256 x) {
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign_mask, x);
    __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f),
                             _mm256_fmadd_ps(ax, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    __m256 e = choir_exp256(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(ax, ax)));
    __m256 y = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f));
    return _mm256_or_ps(y, _mm256_and_ps(sign_mask, x));
}

/* sin(x)^2, which is even, so only |x| matters: Cephes-style reduction by
 * pi/4 octants (three-part pi/4, accurate for |x| < 8192) and the sine or
 * cosine polynomial by octant. */
static inline __m256 choir_sin2_256(__m256 x) {
    __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    __m256i j = _mm256_cvttps_epi32(_mm256_mul_ps(ax, _mm256_set1_ps(1.27323954473516f)));
    j = _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(1)), _mm256_set1_epi32(~1));
    __m256 y = _mm256_cvtepi32_ps(j);
    __m256 use_cos = _mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_and_si256(j, _mm256_set1_epi32(2)), _mm256_set1_epi32(2)));
    __m256 r = _mm256_fnmadd_ps(y, _mm256_set1_ps(0.78515625f), ax);
    r = _mm256_fnmadd_ps(y, _mm256_set1_ps(2.4187564849853515625e-4f), r);
    r = _mm256_fnmadd_ps(y, _mm256_set1_ps(3.77489497744594108e-8f), r);
    __m256 z = _mm256_mul_ps(r, r);
    __m256 c = _mm256_set1_ps(2.443315711809948e-5f);
    c = _mm256_fmadd_ps(c, z, _mm256_set1_ps(-1.388731625493765e-3f));
    c = _mm256_fmadd_ps(c, z, _mm256_set1_ps(4.166664568298827e-2f));
    c = _mm256_mul_ps(_mm256_mul_ps(c, z), z);
    c = _mm256_add_ps(_mm256_fnmadd_ps(_mm256_set1_ps(0.5f), z, c), _mm256_set1_ps(1.0f));
    __m256 s = _mm256_set1_ps(-1.9515295891e-4f);
    s = _mm256_fmadd_ps(s, z, _mm256_set1_ps(8.3321608736e-3f));
    s = _mm256_fmadd_ps(s, z, _mm256_set1_ps(-1.6666654611e-1f));
    s = _mm256_fmadd_ps(_mm256_mul_ps(s, z), r, r);
    __m256 v = _mm256_blendv_ps(s, c, use_cos);
    return _mm256_mul_ps(v, v);
}

static inline float choir_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float choir_hmax256(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
