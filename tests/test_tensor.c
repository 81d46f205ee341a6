/* The tensor type and the f32 <-> f16/bf16 conversions: exact bits, round to
 * nearest even, NaN/inf/subnormal handling, and SIMD twins bit-identical to
 * the scalar ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/tensor.h"
#include "testutil.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_tensor_new_view(void **state) {
    (void)state;
    choir_err err;
    int64_t shape[3] = {2, 3, 4};
    choir_tensor *t = choir_tensor_new(CHOIR_DTYPE_F32, 3, shape, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(t);
    assert_int_equal(choir_tensor_numel(t), 24);
    assert_int_equal(t->stride[0], 12);
    assert_int_equal(t->stride[1], 4);
    assert_int_equal(t->stride[2], 1);
    assert_true(t->owns_data);
    assert_true(choir_tensor_is_contiguous(t));
    for (int i = 0; i < 24; i++)
        assert_true(((float *)t->data)[i] == 0.0f);
    t->stride[1] = 8; /* a view with a gap between rows */
    assert_false(choir_tensor_is_contiguous(t));
    t->stride[1] = 4;
    choir_tensor_free(t);
    choir_tensor_free(NULL);

    uint16_t buf[6];
    int64_t s2[2] = {2, 3};
    choir_tensor *v = choir_tensor_view(CHOIR_DTYPE_BF16, 2, s2, buf, &err);
    assert_non_null(v);
    assert_ptr_equal(v->data, buf);
    assert_false(v->owns_data);
    choir_tensor_free(v); /* must not free buf */

    int64_t bad[1] = {-1};
    assert_null(choir_tensor_new(CHOIR_DTYPE_F32, 1, bad, CHOIR_MEM_OTHER, &err));
    assert_int_equal(err.code, CHOIR_EINVAL);
    assert_null(choir_tensor_new(CHOIR_DTYPE_F32, 6, shape, CHOIR_MEM_OTHER, &err));
    assert_int_equal(err.code, CHOIR_EINVAL);
    assert_null(choir_tensor_new(CHOIR_DTYPE_COUNT, 1, shape, CHOIR_MEM_OTHER, &err));
    int64_t huge[2] = {INT64_MAX / 2, 4};
    assert_null(choir_tensor_new(CHOIR_DTYPE_F32, 2, huge, CHOIR_MEM_OTHER, &err));
    assert_null(choir_tensor_view(CHOIR_DTYPE_F32, 2, s2, NULL, &err));

    /* Scalars (0 dims) hold one element. */
    choir_tensor *sc = choir_tensor_new(CHOIR_DTYPE_I64, 0, NULL, CHOIR_MEM_OTHER, &err);
    assert_non_null(sc);
    assert_int_equal(choir_tensor_numel(sc), 1);
    choir_tensor_free(sc);

    /* Every allocation failure point leaves nothing behind. */
    int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
    for (int n = 1; n <= 2; n++) {
        choir_alloc_fail_after(n);
        assert_null(choir_tensor_new(CHOIR_DTYPE_F16, 3, shape, CHOIR_MEM_OTHER, &err));
        assert_int_equal(err.code, CHOIR_ENOMEM);
        choir_alloc_fail_after(0);
    }
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
}

/* The nearest-even property, checked without trusting the converter: no other
 * half is closer, and on a tie the chosen mantissa is even. */
static void check_nearest_half(float f, uint16_t h) {
    double want = f, got = choir_f16_to_f32(h);
    double d = fabs(got - want);
    uint16_t mag = h & 0x7fff;
    if (mag == 0x7c00) { /* inf only past the rounding edge */
        assert_true(fabs(want) >= 65520.0);
        return;
    }
    uint16_t neighbours[2] = {(uint16_t)(h + 1), (uint16_t)(mag == 0 ? (h ^ 0x8000) + 1 : h - 1)};
    for (int i = 0; i < 2; i++) {
        if ((neighbours[i] & 0x7fff) >= 0x7c00) continue;
        double dn = fabs((double)choir_f16_to_f32(neighbours[i]) - want);
        if (dn < d) fail_msg("f16(%a) = 0x%04x, but 0x%04x is closer", (double)f, h, neighbours[i]);
        if (dn == d && (h & 1)) fail_msg("f16(%a) = 0x%04x: tie not to even", (double)f, h);
    }
}

static void test_f16(void **state) {
    (void)state;
    /* Every half survives a round trip through f32 (NaNs stay NaN). */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = choir_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(isnan(f));
            assert_true(choir_f32_to_f16(f) == (h | 0x200)); /* quieted, payload kept */
        } else {
            assert_int_equal(choir_f32_to_f16(f), h);
        }
    }
    assert_true(choir_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    assert_true(choir_f16_to_f32(0x7bff) == 65504.0f);
    assert_int_equal(choir_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);     /* tie, even down */
    assert_int_equal(choir_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02); /* tie, even up */
    assert_int_equal(choir_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(choir_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(choir_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(choir_f32_to_f16(ldexpf(1.0f, -25)), 0x0000); /* tie to zero */
    assert_int_equal(choir_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);
    assert_int_equal(choir_f32_to_f16(-0.0f), 0x8000);
    /* Random floats over the whole half range and beyond. */
    uint64_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t u = (uint32_t)s;
        /* exponents around the half range: 2^-28 .. 2^17 */
        u = (u & 0x807fffffu) | ((uint32_t)(99 + (s >> 40) % 46) << 23);
        check_nearest_half(from_bits(u), choir_f32_to_f16(from_bits(u)));
    }
}

static void test_bf16(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = choir_bf16_to_f32((uint16_t)h);
        assert_int_equal(bits(f), h << 16);
        if (!isnan(f)) assert_int_equal(choir_f32_to_bf16(f), h);
    }
    assert_int_equal(choir_f32_to_bf16(from_bits(0x3f808000u)), 0x3f80); /* tie, even down */
    assert_int_equal(choir_f32_to_bf16(from_bits(0x3f818000u)), 0x3f82); /* tie, even up */
    assert_int_equal(choir_f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
    assert_int_equal(choir_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
    assert_int_equal(choir_f32_to_bf16(from_bits(0x7f800001u)),
                     0x7fc0); /* signalling NaN quieted */
    assert_int_equal(choir_f32_to_bf16(from_bits(0x00008001u)), 0x0001); /* subnormals kept */
}

/* The array conversions on each ISA equal the scalar ones bit for bit. */
static void test_conversion_twins(void **state) {
    (void)state;
    const int64_t n = 70000 + 5;
    float *f = malloc((size_t)n * sizeof(float)), *back = malloc((size_t)n * sizeof(float));
    uint16_t *h = malloc((size_t)n * sizeof(uint16_t));
    uint64_t s = 99;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        f[i] = i < 65536 ? choir_f16_to_f32((uint16_t)i) : from_bits((uint32_t)s);
        if (i % 3 == 0) f[i] = from_bits((uint32_t)s); /* any bit pattern: NaNs, subnormals */
    }
    choir_isa isas[3] = {CHOIR_ISA_REF, choir_kernels_best_isa(), CHOIR_ISA_AVX2};
    for (int k = 0; k < 3; k++) {
        choir_kernels_set_isa(isas[k]);
        choir_f32_to_f16_n(f, h, n);
        for (int64_t i = 0; i < n; i++)
            if (h[i] != choir_f32_to_f16(f[i]))
                fail_msg("f16 twin: %08x -> %04x", bits(f[i]), h[i]);
        choir_f16_to_f32_n(h, back, n);
        for (int64_t i = 0; i < n; i++)
            assert_int_equal(bits(back[i]), bits(choir_f16_to_f32(h[i])));
        choir_f32_to_bf16_n(f, h, n);
        for (int64_t i = 0; i < n; i++)
            if (h[i] != choir_f32_to_bf16(f[i]))
                fail_msg("bf16 twin: %08x -> %04x", bits(f[i]), h[i]);
        choir_bf16_to_f32_n(h, back, n);
        for (int64_t i = 0; i < n; i++)
            assert_int_equal(bits(back[i]), (uint32_t)h[i] << 16);
    }
    choir_kernels_set_isa(choir_kernels_best_isa());
    free(f), free(back), free(h);
}

static void test_to_f32(void **state) {
    (void)state;
    double d[3] = {1.5, -2.25, 1e300};
    float out[3];
    assert_int_equal(choir_to_f32_n(CHOIR_DTYPE_F64, d, out, 3), 0);
    assert_true(out[0] == 1.5f && out[1] == -2.25f && isinf(out[2]));
    uint16_t h[3] = {0x3c00, 0xc000, 0x7c00};
    assert_int_equal(choir_to_f32_n(CHOIR_DTYPE_F16, h, out, 3), 0);
    assert_true(out[0] == 1.0f && out[1] == -2.0f && isinf(out[2]));
    assert_int_equal(choir_to_f32_n(CHOIR_DTYPE_BF16, h, out, 1), 0);
    assert_int_equal(bits(out[0]), 0x3c000000u);
    float f[2] = {3, 4};
    assert_int_equal(choir_to_f32_n(CHOIR_DTYPE_F32, f, out, 2), 0);
    assert_true(out[0] == 3 && out[1] == 4);
    int32_t i32[1] = {1};
    assert_int_equal(choir_to_f32_n(CHOIR_DTYPE_I32, i32, out, 1), CHOIR_EUNSUPPORTED);
}

static void test_isa_dispatch(void **state) {
    (void)state;
    choir_isa best = choir_kernels_best_isa();
    assert_int_equal(choir_kernels_set_isa(CHOIR_ISA_REF), CHOIR_ISA_REF);
    assert_int_equal(choir_kernels_isa(), CHOIR_ISA_REF);
    assert_int_equal(choir_kernels_set_isa(best), best);
    /* An ISA the CPU lacks is refused. */
    choir_isa other = best == CHOIR_ISA_NEON ? CHOIR_ISA_AVX2 : CHOIR_ISA_NEON;
    assert_int_equal(choir_kernels_set_isa(other), CHOIR_ISA_REF);
    /* Under AVX-512 the AVX2 twins stay selectable; without it AVX-512 is refused. */
    if (best == CHOIR_ISA_AVX512) assert_int_equal(choir_kernels_set_isa(CHOIR_ISA_AVX2), CHOIR_ISA_AVX2);
    if (best != CHOIR_ISA_AVX512)
        assert_int_equal(choir_kernels_set_isa(CHOIR_ISA_AVX512), CHOIR_ISA_REF);
    choir_kernels_set_isa(best);
    const char *names[64], *isas[64];
    int n = choir_kernels_describe(names, isas, 64);
    assert_true(n >= 10);
    for (int i = 0; i < n; i++)
        assert_non_null(names[i]), assert_non_null(isas[i]);
    assert_int_equal(choir_kernels_describe(names, isas, 3), 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_new_view),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_conversion_twins),
        cmocka_unit_test(test_to_f32),
        cmocka_unit_test(test_isa_dispatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
