/* STFT / iSTFT against a direct double-precision DFT written from torch's
 * definitions, for the three configurations choir uses (Whisper, Kokoro's
 * vocoder, MossFormer2) and a padded custom window. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/stft.h"
#include "testutil.h"

typedef struct config {
    int n_fft, hop, win;
    choir_window window;
    int center;
} config;

static const config configs[] = {
    {400, 160, 400, CHOIR_WINDOW_HANN, 1},                 /* Whisper */
    {20, 5, 20, CHOIR_WINDOW_HANN, 1},                     /* Kokoro iSTFTNet */
    {1920, 384, 1920, CHOIR_WINDOW_HAMMING_SYMMETRIC, 0},  /* MossFormer2 */
    {16, 4, 10, CHOIR_WINDOW_CUSTOM, 1},                   /* window shorter than n_fft */
    {64, 16, 64, CHOIR_WINDOW_HAMMING, 1},
};

static const float custom10[10] = {0.1f, 0.3f, 0.5f, 0.8f, 1.0f, 1.0f, 0.8f, 0.5f, 0.3f, 0.1f};

static double ref_window(const config *c, int j) {
    int left = (c->n_fft - c->win) / 2;
    int i = j - left;
    if (i < 0 || i >= c->win) return 0.0;
    double W = c->win;
    switch (c->window) {
    case CHOIR_WINDOW_HANN: return 0.5 - 0.5 * cos(2 * M_PI * i / W);
    case CHOIR_WINDOW_HAMMING: return 0.54 - 0.46 * cos(2 * M_PI * i / W);
    case CHOIR_WINDOW_HAMMING_SYMMETRIC: return 0.54 - 0.46 * cos(2 * M_PI * i / (W - 1));
    case CHOIR_WINDOW_CUSTOM: return custom10[i];
    default: return 1.0;
    }
}

static choir_stft_plan *make_plan(const config *c) {
    choir_err err;
    choir_stft_plan *p = choir_stft_plan_create(c->n_fft, c->hop, c->win, c->window,
                                                c->window == CHOIR_WINDOW_CUSTOM ? custom10 : NULL, c->center, &err);
    assert_non_null(p);
    return p;
}

/* cos/sin(2 pi m / n) for m < n, so the direct DFTs below cost a table look-up
 * per term (index j*k mod n keeps them exact). */
static double *twiddles(int n) {
    double *t = malloc((size_t)n * 2 * sizeof(double));
    for (int m = 0; m < n; m++) {
        t[2 * m] = cos(2 * M_PI * m / n);
        t[2 * m + 1] = sin(2 * M_PI * m / n);
    }
    return t;
}

/* torch.stft written out: reflect padding, window, e^{-2 pi i jk/N}. */
static void ref_stft(const config *c, const float *x, int64_t n, double *spec, int64_t frames) {
    int n_bins = c->n_fft / 2 + 1, pad = c->center ? c->n_fft / 2 : 0;
    double *tw = twiddles(c->n_fft);
    for (int64_t f = 0; f < frames; f++)
        for (int k = 0; k < n_bins; k++) {
            double re = 0, im = 0;
            for (int j = 0; j < c->n_fft; j++) {
                int64_t i = f * c->hop + j - pad;
                if (i < 0) i = -i;
                if (i >= n) i = 2 * (n - 1) - i;
                double v = x[i] * ref_window(c, j);
                int m = (int)((int64_t)j * k % c->n_fft);
                re += v * tw[2 * m];
                im -= v * tw[2 * m + 1];
            }
            spec[(k * frames + f) * 2] = re;
            spec[(k * frames + f) * 2 + 1] = im;
        }
    free(tw);
}

static void test_forward_matches_dft(void **state) {
    (void)state;
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        const config *c = &configs[ci];
        choir_stft_plan *p = make_plan(c);
        int64_t n = 3 * c->n_fft + 7;
        float *x = malloc((size_t)n * sizeof(float));
        tu_fill_uniform(x, (size_t)n, 11 + ci, -1.0f, 1.0f);
        int64_t frames = choir_stft_frames(p, n);
        assert_int_equal(frames, c->center ? 1 + n / c->hop : 1 + (n - c->n_fft) / c->hop);
        int n_bins = choir_stft_n_bins(p);
        size_t count = (size_t)n_bins * (size_t)frames * 2;
        float *spec = malloc(count * sizeof(float));
        double *ref = malloc(count * sizeof(double));
        choir_err err;
        assert_int_equal(choir_stft(p, x, n, spec, &err), 0);
        ref_stft(c, x, n, ref, frames);
        double max_err = 0, max_ref = 0;
        for (size_t i = 0; i < count; i++) {
            max_err = fmax(max_err, fabs(spec[i] - ref[i]));
            max_ref = fmax(max_ref, fabs(ref[i]));
        }
        print_message("stft n_fft %d: max err %.3g of %.3g\n", c->n_fft, max_err, max_ref);
        assert_true(max_err <= 2e-6 * max_ref * sqrt(c->n_fft));

        /* Magnitude and phase are those of the same spectrum. */
        float *mag = malloc(count / 2 * sizeof(float)), *phase = malloc(count / 2 * sizeof(float));
        assert_int_equal(choir_stft_mag_phase(p, x, n, mag, phase, &err), 0);
        for (size_t i = 0; i < count / 2; i++) {
            double m = hypot(ref[2 * i], ref[2 * i + 1]);
            assert_true(fabs(mag[i] - m) <= 1e-5 * max_ref);
            if (m > 1e-3 * max_ref) {
                double d = fabs(phase[i] - atan2(ref[2 * i + 1], ref[2 * i]));
                assert_true(fmin(d, 2 * M_PI - d) < 1e-3);
            }
        }
        free(mag);
        free(phase);
        free(x);
        free(spec);
        free(ref);
        choir_stft_plan_free(p);
    }
}

/* torch.istft written out in double from a given spectrum. */
/* y gets the samples; env the overlap-added squared window under each (1
 * past the frames), which bounds how much float round-off the division by it
 * can amplify. */
static void ref_istft(const config *c, const float *spec, int64_t frames, int64_t length, double *y, double *env) {
    int n_bins = c->n_fft / 2 + 1;
    int64_t full = c->n_fft + c->hop * (frames - 1), start = c->center ? c->n_fft / 2 : 0;
    double *num = calloc((size_t)full, sizeof(double)), *den = calloc((size_t)full, sizeof(double));
    double *tw = twiddles(c->n_fft);
    for (int64_t f = 0; f < frames; f++)
        for (int j = 0; j < c->n_fft; j++) {
            double v = spec[(0 * frames + f) * 2];
            for (int k = 1; k < n_bins; k++) {
                double re = spec[(k * frames + f) * 2], im = spec[(k * frames + f) * 2 + 1];
                int m = (int)((int64_t)j * k % c->n_fft);
                int nyquist = c->n_fft % 2 == 0 && k == n_bins - 1;
                v += nyquist ? re * tw[2 * m] : 2 * (re * tw[2 * m] - im * tw[2 * m + 1]);
            }
            double w = ref_window(c, j);
            num[f * c->hop + j] += v / c->n_fft * w;
            den[f * c->hop + j] += w * w;
        }
    for (int64_t i = 0; i < length; i++) {
        y[i] = start + i < full ? num[start + i] / den[start + i] : 0.0;
        env[i] = start + i < full ? den[start + i] : 1.0;
    }
    free(num);
    free(den);
    free(tw);
}

static void test_inverse_matches_reference(void **state) {
    (void)state;
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        const config *c = &configs[ci];
        choir_stft_plan *p = make_plan(c);
        int64_t frames = 9;
        int n_bins = choir_stft_n_bins(p);
        size_t count = (size_t)n_bins * frames * 2;
        float *spec = malloc(count * sizeof(float));
        tu_fill_uniform(spec, count, 100 + ci, -1.0f, 1.0f);
        /* Default length, and a longer one that zero-fills past the last frame. */
        int64_t lengths[2] = {-1, c->n_fft + c->hop * frames + 3};
        /* (A zero-padded window leaves the last frame's edge uncovered, which
         * only the default length trims off.) */
        for (int li = 0; li < (c->win == c->n_fft ? 2 : 1); li++) {
            int64_t len = choir_istft_length(p, frames, lengths[li]);
            float *y = malloc((size_t)len * sizeof(float));
            double *ref = malloc((size_t)len * sizeof(double)), *env = malloc((size_t)len * sizeof(double));
            choir_err err;
            assert_int_equal(choir_istft(p, spec, frames, lengths[li], y, &err), 0);
            ref_istft(c, spec, frames, len, ref, env);
            double max_err = 0;
            for (int64_t i = 0; i < len; i++) max_err = fmax(max_err, fabs(y[i] - ref[i]) * fmin(env[i], 1.0));
            print_message("istft n_fft %d len %lld: max err %.3g\n", c->n_fft, (long long)len, max_err);
            assert_true(max_err < 1e-5);
            free(y);
            free(ref);
            free(env);
        }
        free(spec);
        choir_stft_plan_free(p);
    }
}

static void test_round_trip(void **state) {
    (void)state;
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        const config *c = &configs[ci];
        if (!c->center) continue; /* uncentred frames do not cover the tail */
        choir_stft_plan *p = make_plan(c);
        int64_t n = 10 * c->n_fft + 3;
        float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
        tu_fill_uniform(x, (size_t)n, 7, -1.0f, 1.0f);
        int64_t frames = choir_stft_frames(p, n);
        size_t half = (size_t)choir_stft_n_bins(p) * (size_t)frames;
        float *mag = malloc(half * sizeof(float)), *phase = malloc(half * sizeof(float));
        choir_err err;
        assert_int_equal(choir_stft_mag_phase(p, x, n, mag, phase, &err), 0);
        assert_int_equal(choir_istft_mag_phase(p, mag, phase, frames, n, y, &err), 0);
        assert_true(tu_max_abs_diff(y, x, (size_t)n) < 1e-5);
        free(x);
        free(y);
        free(mag);
        free(phase);
        choir_stft_plan_free(p);
    }
}

static void test_nola_and_errors(void **state) {
    (void)state;
    choir_err err;
    /* A periodic Hann window without centring is zero at sample 0: torch refuses it. */
    choir_stft_plan *p = choir_stft_plan_create(16, 4, 16, CHOIR_WINDOW_HANN, NULL, 0, &err);
    assert_non_null(p);
    float spec[9 * 3 * 2] = {0}, y[64];
    assert_int_equal(choir_istft(p, spec, 3, -1, y, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "NOLA"));
    choir_stft_plan_free(p);
    assert_null(choir_stft_plan_create(1, 4, 1, CHOIR_WINDOW_HANN, NULL, 1, &err));
    assert_null(choir_stft_plan_create(16, 0, 16, CHOIR_WINDOW_HANN, NULL, 1, &err));
    assert_null(choir_stft_plan_create(16, 4, 17, CHOIR_WINDOW_HANN, NULL, 1, &err));
    assert_null(choir_stft_plan_create(16, 4, 16, CHOIR_WINDOW_CUSTOM, NULL, 1, &err));
    choir_stft_plan_free(NULL);
    /* Centred frames need more samples than the reflect padding. */
    p = choir_stft_plan_create(16, 4, 16, CHOIR_WINDOW_HANN, NULL, 1, &err);
    float x[8] = {0}, out[9 * 3 * 2];
    assert_int_equal(choir_stft(p, x, 8, out, &err), CHOIR_EINVAL);
    choir_alloc_fail_after(1);
    float x32[32] = {0}, out32[9 * 9 * 2];
    assert_int_equal(choir_stft(p, x32, 32, out32, &err), CHOIR_ENOMEM);
    choir_alloc_fail_after(0);
    choir_stft_plan_free(p);
}

typedef struct job {
    const choir_stft_plan *plan;
    const float *x;
    int64_t n;
    float *spec;
    int rc;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    for (int rep = 0; rep < 20 && j->rc == 0; rep++) j->rc = choir_stft(j->plan, j->x, j->n, j->spec, NULL);
    return NULL;
}

/* One plan used by several threads at once gives each the same result. */
static void test_threads_share_plan(void **state) {
    (void)state;
    choir_stft_plan *p = make_plan(&configs[0]);
    int64_t n = 16000;
    float *x = malloc((size_t)n * sizeof(float));
    tu_fill_uniform(x, (size_t)n, 3, -1.0f, 1.0f);
    size_t count = (size_t)choir_stft_n_bins(p) * (size_t)choir_stft_frames(p, n) * 2;
    float *want = malloc(count * sizeof(float));
    assert_int_equal(choir_stft(p, x, n, want, NULL), 0);
    enum { N_THREADS = 4 };
    pthread_t tid[N_THREADS];
    job jobs[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t] = (job){p, x, n, malloc(count * sizeof(float)), 0};
        assert_int_equal(pthread_create(&tid[t], NULL, run_job, &jobs[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(tid[t], NULL);
        assert_int_equal(jobs[t].rc, 0);
        assert_memory_equal(jobs[t].spec, want, count * sizeof(float));
        free(jobs[t].spec);
    }
    free(want);
    free(x);
    choir_stft_plan_free(p);
}

/* An odd bin count (n_fft 2048 -> 1025 bins) puts every other frame of the
 * internal [frames][bins] spectrum off FFTW's SIMD alignment; the many-frame
 * path must still work and equal the transform of each frame alone. */
static void test_many_frames_odd_bins(void **state) {
    (void)state;
    const int n_fft = 2048, hop = 384;
    choir_stft_plan *p = choir_stft_plan_create(n_fft, hop, n_fft, CHOIR_WINDOW_HAMMING, NULL, 0, NULL);
    assert_non_null(p);
    const int64_t n = n_fft + 19 * hop;
    int64_t frames = choir_stft_frames(p, n);
    assert_int_equal(frames, 20);
    int bins = choir_stft_n_bins(p);
    float *x = malloc((size_t)n * sizeof *x);
    float *all = malloc((size_t)bins * (size_t)frames * 2 * sizeof *all);
    float *one = malloc((size_t)bins * 2 * sizeof *one);
    tu_fill_uniform(x, (size_t)n, 11, -1.0f, 1.0f);
    assert_int_equal(choir_stft(p, x, n, all, NULL), 0);
    for (int64_t f = 0; f < frames; f++) {
        assert_int_equal(choir_stft(p, x + f * hop, n_fft, one, NULL), 0);
        for (int b = 0; b < bins; b++) {
            assert_float_equal(all[((size_t)b * frames + f) * 2], one[b * 2], 1e-4);
            assert_float_equal(all[((size_t)b * frames + f) * 2 + 1], one[b * 2 + 1], 1e-4);
        }
    }
    free(x);
    free(all);
    free(one);
    choir_stft_plan_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_matches_dft), cmocka_unit_test(test_inverse_matches_reference),
        cmocka_unit_test(test_round_trip),          cmocka_unit_test(test_nola_and_errors),
        cmocka_unit_test(test_threads_share_plan), cmocka_unit_test(test_many_frames_odd_bins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
