/* Real recordings: jfk.wav (16 kHz mono s16), jfk.flac (44.1 kHz stereo
 * 24-bit) and jfk.mp3 decode, mix down and resample to 16 kHz signals that
 * agree with each other once aligned. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/audio.h"
#include "testutil.h"

static choir_audio load16k(const char *rel) {
    choir_audio a;
    choir_err err;
    choir_decode_opts opts = {.target_rate = 16000, .mono = 1, .max_frames = 0};
    int rc = choir_audio_decode_file(tu_fixture(rel), &opts, &a, &err);
    if (rc) print_message("%s: %s\n", rel, err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(a.rate, 16000);
    assert_int_equal(a.channels, 1);
    return a;
}

/* The lag of x against ref (x[i + lag] ~ ref[i]) that maximises their
 * correlation over a 1-s stretch of speech, searched within +-max_lag. */
static int best_lag(const float *ref, int64_t n_ref, const float *x, int64_t n_x, int max_lag) {
    const int64_t from = 48000, len = 16000;
    assert_true(from + len + max_lag < n_ref && from + len + max_lag < n_x);
    int best = 0;
    double best_c = -1e300;
    for (int lag = -max_lag; lag <= max_lag; lag++) {
        double c = 0;
        for (int64_t i = from; i < from + len; i++) c += (double)ref[i] * x[i + lag];
        if (c > best_c) {
            best_c = c;
            best = lag;
        }
    }
    return best;
}

static double snr_db(const float *ref, int64_t n_ref, const float *x, int64_t n_x, int lag) {
    double sig = 0, noise = 0;
    for (int64_t i = 0; i < n_ref; i++) {
        int64_t j = i + lag;
        if (j < 0 || j >= n_x) continue;
        sig += (double)ref[i] * ref[i];
        noise += ((double)x[j] - ref[i]) * ((double)x[j] - ref[i]);
    }
    return 10 * log10(sig / noise);
}

static void test_jfk_paths_agree(void **state) {
    (void)state;
    choir_audio wav = load16k("real/speech/jfk.wav");
    choir_audio flac = load16k("real/speech/jfk.flac");
    choir_audio mp3 = load16k("real/speech/jfk.mp3");
    assert_int_equal(wav.frames, 176000);
    assert_true(llabs(flac.frames - wav.frames) < 16);
    assert_true(llabs(mp3.frames - wav.frames) < 3000);

    int lag_flac = best_lag(wav.samples, wav.frames, flac.samples, flac.frames, 400);
    double snr_flac = snr_db(wav.samples, wav.frames, flac.samples, flac.frames, lag_flac);
    int lag_mp3 = best_lag(wav.samples, wav.frames, mp3.samples, mp3.frames, 2000);
    double snr_mp3 = snr_db(wav.samples, wav.frames, mp3.samples, mp3.frames, lag_mp3);
    print_message("flac vs wav: lag %d, SNR %.1f dB; mp3 vs wav: lag %d, SNR %.1f dB\n", lag_flac, snr_flac,
                  lag_mp3, snr_mp3);
    /* Measured: flac 73.6 dB at lag 0; mp3, a lossy copy, 40.9 dB at lag 0
     * (libsndfile's mpg123 decoder removes the encoder delay). */
    assert_true(snr_flac > 30.0);
    assert_true(snr_mp3 > 35.0);
    choir_audio_clear(&wav);
    choir_audio_clear(&flac);
    choir_audio_clear(&mp3);
}

/* Damaged real files (bytes overwritten, or cut short) either decode or fail
 * with a documented status; they never crash or leak (the sanitizer run
 * checks that). */
static void test_damaged_files(void **state) {
    (void)state;
    const char *files[] = {"real/speech/jfk.flac", "real/speech/jfk.mp3", "real/speech/jfk.wav"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        size_t len = 0;
        unsigned char *raw = tu_read_file(tu_fixture(files[f]), &len);
        assert_non_null(raw);
        unsigned char *bad = malloc(len);
        uint64_t seed = 12345;
        for (int trial = 0; trial < 6; trial++) {
            memcpy(bad, raw, len);
            size_t use = len;
            if (trial % 2 == 0) {
                for (int k = 0; k < 64; k++) {
                    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                    bad[(seed >> 33) % len] = (unsigned char)(seed >> 20);
                }
            } else {
                use = len * (size_t)trial / 7;
            }
            choir_audio a;
            choir_err err;
            choir_decode_opts opts = {.target_rate = 16000, .mono = 1, .max_frames = 0};
            int rc = choir_audio_decode_memory(bad, use, &opts, &a, &err);
            if (rc) {
                assert_true(rc == CHOIR_EFORMAT || rc == CHOIR_EUNSUPPORTED);
                assert_true(err.msg[0] != '\0');
                assert_null(a.samples);
            } else {
                assert_true(a.frames > 0);
                choir_audio_clear(&a);
            }
        }
        free(bad);
        free(raw);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jfk_paths_agree),
        cmocka_unit_test(test_damaged_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
