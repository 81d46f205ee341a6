/* Kokoro's seeded SineGen noise: the source draws it a block at a time from
 * any offset (choir_gaussian_stream, as a GPU thread draws its own values),
 * which must give exactly the single stream of kk_gaussian_fill for any
 * length and split (odd offsets, ragged ends) and seed, and stay standard
 * normal; the harmonic source drawn from the seed equals the source given
 * the stream as an array. */
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
    /* pieces of odd and even lengths from odd and even offsets */
    for (int64_t o = 0, step = 1; o < n; o += step, step = step * 3 + 1) {
        int64_t len = n - o < step ? n - o : step;
        choir_gaussian_stream(b + o, o, len, seed);
    }
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
    choir_gaussian_stream(x, 0, n, 42);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += x[i], s2 += (double)x[i] * x[i];
    double mean = s / (double)n, var = s2 / (double)n - mean * mean;
    assert_true(fabs(mean) < 5e-3);
    assert_true(fabs(var - 1.0) < 1e-2);
    free(x);
}

/* The source and its STFT with the draws made from the seed equal the
 * same with kk_gaussian_fill's array, bit for bit. */
static void test_source_seed_equals_array(void **state) {
    (void)state;
    choir_nsf_source p = {.harmonics = 9, .upsample = 300, .sample_rate = 24000.0f,
                          .sine_amp = 0.1f, .voiced_noise = 0.003f,
                          .unvoiced_noise = (float)(0.1 / 3.0), .voiced_threshold = 10.0f,
                          .lin_b = 0.05f, .n_fft = 20, .hop = 5};
    for (int h = 0; h < 9; h++) p.lin_w[h] = 0.3f - 0.07f * (float)h;
    const int64_t n_f0 = 37, N = 300 * n_f0, F = N / 5 + 1;
    float f0[37];
    for (int j = 0; j < n_f0; j++) f0[j] = j % 9 == 4 ? 0.0f : 90.0f + 4.7f * (float)j;
    float *noise = malloc((size_t)(N * 9) * sizeof(float));
    float *a = malloc((size_t)(22 * F) * sizeof(float)), *b = malloc((size_t)(22 * F) * sizeof(float));
    float *work = malloc((size_t)choir_nsf_source_work_floats(&p, n_f0) * sizeof(float));
    assert_non_null(noise), assert_non_null(a), assert_non_null(b), assert_non_null(work);
    const uint64_t seed = 1234567;
    kk_gaussian_fill(noise, N * 9, seed);
    choir_nsf_source_stft(&p, f0, n_f0, noise, NULL, a, F, work);
    choir_nsf_source_stft(&p, f0, n_f0, NULL, &seed, b, F, work);
    assert_memory_equal(a, b, (size_t)(22 * F) * sizeof(float));
    free(noise), free(a), free(b), free(work);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_equal_one_stream),
        cmocka_unit_test(test_noise_is_standard_normal),
        cmocka_unit_test(test_source_seed_equals_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
