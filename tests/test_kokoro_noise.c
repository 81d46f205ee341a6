/* Kokoro's seeded SineGen noise: the front fills it in parallel chunks
 * (kk_noise_fill), which must give exactly the single stream of
 * kk_gaussian_fill for any length (odd, one chunk, many chunks with a ragged
 * end) and seed, and stay standard normal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/kokoro/kokoro_internal.h"
#include "testutil.h"

static void check_same(int64_t n, uint64_t seed) {
    float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    kk_gaussian_fill(a, n, seed);
    memset(b, 0xff, (size_t)n * sizeof(float));
    kk_noise_fill(b, n, seed);
    assert_memory_equal(a, b, (size_t)n * sizeof(float));
    free(a);
    free(b);
}

static void test_chunks_equal_one_stream(void **state) {
    (void)state;
    static const int64_t lens[] = {1, 2, 7, 5400, (1 << 18) - 1, 1 << 18, (1 << 18) + 1,
                                   3 * (1 << 18) + 5, 9 * 600 * 217};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        check_same(lens[i], 0);
        check_same(lens[i], 0x9E3779B97F4A7C15ULL * 3 + 17);
    }
}

static void test_noise_is_standard_normal(void **state) {
    (void)state;
    const int64_t n = 4 * (1 << 18) + 3;
    float *x = malloc((size_t)n * sizeof(float));
    assert_non_null(x);
    kk_noise_fill(x, n, 42);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += x[i], s2 += (double)x[i] * x[i];
    double mean = s / (double)n, var = s2 / (double)n - mean * mean;
    assert_true(fabs(mean) < 5e-3);
    assert_true(fabs(var - 1.0) < 1e-2);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_equal_one_stream),
        cmocka_unit_test(test_noise_is_standard_normal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
