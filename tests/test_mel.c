/* Whisper log-mel: filter bank against openai's mel_filters.npz, features
 * against Hugging Face's WhisperFeatureExtractor output stored in the whisper
 * fixtures, and the long-audio form against the one-window form. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zip.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/mel.h"
#include "choir/safetensors.h"
#include "testutil.h"

/* Reads one float32 C-order .npy member of a .npz into a malloc'd array;
 * checks the dtype and that the shape is rows x cols. */
static float *read_npz_f32(const char *npz, const char *member, int rows, int cols) {
    int zerr = 0;
    zip_t *z = zip_open(npz, ZIP_RDONLY, &zerr);
    assert_non_null(z);
    zip_stat_t st;
    assert_int_equal(zip_stat(z, member, 0, &st), 0);
    unsigned char *raw = malloc(st.size);
    assert_non_null(raw);
    zip_file_t *f = zip_fopen(z, member, 0);
    assert_non_null(f);
    assert_int_equal(zip_fread(f, raw, st.size), (zip_int64_t)st.size);
    zip_fclose(f);
    zip_close(z);
    assert_memory_equal(raw, "\x93NUMPY", 6);
    size_t hlen, hoff;
    if (raw[6] == 1) {
        hlen = raw[8] | (size_t)raw[9] << 8;
        hoff = 10;
    } else {
        hlen = raw[8] | (size_t)raw[9] << 8 | (size_t)raw[10] << 16 | (size_t)raw[11] << 24;
        hoff = 12;
    }
    char header[512] = {0};
    assert_true(hlen < sizeof header);
    memcpy(header, raw + hoff, hlen);
    assert_non_null(strstr(header, "'<f4'"));
    assert_non_null(strstr(header, "'fortran_order': False"));
    char shape[64];
    snprintf(shape, sizeof shape, "(%d, %d)", rows, cols);
    assert_non_null(strstr(header, shape));
    assert_int_equal(st.size - hoff - hlen, (size_t)rows * cols * 4);
    float *out = malloc((size_t)rows * cols * sizeof(float));
    memcpy(out, raw + hoff + hlen, (size_t)rows * cols * sizeof(float));
    free(raw);
    return out;
}

static void check_filters(int n_mels) {
    char member[32];
    snprintf(member, sizeof member, "mel_%d.npy", n_mels);
    float *ref = read_npz_f32(tu_fixture("real/whisper/mel_filters.npz"), member, n_mels, 201);
    float *mine = malloc((size_t)n_mels * 201 * sizeof(float));
    choir_err err;
    assert_int_equal(choir_whisper_mel_filters(n_mels, mine, &err), 0);
    double diff = tu_max_abs_diff(mine, ref, (size_t)n_mels * 201);
    /* The stored banks are float32 roundings of the same formula. */
    assert_true(diff < 1e-7);
    free(ref);
    free(mine);
}

static void test_filters_80(void **state) {
    (void)state;
    check_filters(80);
}

static void test_filters_128(void **state) {
    (void)state;
    check_filters(128);
}

static void check_fixture_mel(const char *model, const char *key, const char *wav, int n_mels) {
    char path[512];
    snprintf(path, sizeof path, "whisper/%s/reference.safetensors", model);
    choir_err err;
    choir_st *st = choir_st_open(tu_fixture(path), &err);
    assert_non_null(st);
    int64_t shape[2] = {n_mels, CHOIR_WHISPER_N_FRAMES};
    const choir_st_tensor *ref = choir_st_expect(st, key, CHOIR_DTYPE_F32, 2, shape, &err);
    assert_non_null(ref);

    snprintf(path, sizeof path, "audio/%s", wav);
    choir_audio a;
    choir_decode_opts opts = {.target_rate = CHOIR_WHISPER_SAMPLE_RATE, .mono = 1, .max_frames = 0};
    assert_int_equal(choir_audio_decode_file(tu_fixture(path), &opts, &a, &err), 0);
    float *mel = malloc((size_t)n_mels * CHOIR_WHISPER_N_FRAMES * sizeof(float));
    assert_int_equal(choir_whisper_log_mel(a.samples, a.frames, n_mels, mel, CHOIR_WHISPER_N_FRAMES, &err), 0);
    double diff = tu_max_abs_diff(mel, ref->data, (size_t)n_mels * CHOIR_WHISPER_N_FRAMES);
    print_message("%s %s: max abs diff %.3g\n", model, key, diff);
    assert_true(diff <= 1e-4);
    free(mel);
    choir_audio_clear(&a);
    choir_st_close(st);
}

static void test_mel_hello_80(void **state) {
    (void)state;
    check_fixture_mel("whisper-ml80", "a0.mel", "hello16k.wav", 80);
}

static void test_mel_fox_80(void **state) {
    (void)state;
    check_fixture_mel("whisper-ml80", "a1.mel", "fox16k.wav", 80);
}

/* whisper-v3m128's only audio, a0, is fox16k.wav (its meta.json). */
static void test_mel_fox_128(void **state) {
    (void)state;
    check_fixture_mel("whisper-v3m128", "a0.mel", "fox16k.wav", 128);
}

/* For audio under 30 s, the first window of the whole-file form covers the
 * same samples (audio then zeros) and has the same max, so it must equal the
 * one-window form; the frames past the end of the full mel read as 0.0. */
static void test_full_matches_window(void **state) {
    (void)state;
    choir_err err;
    choir_audio a;
    choir_decode_opts opts = {.target_rate = CHOIR_WHISPER_SAMPLE_RATE, .mono = 1, .max_frames = 0};
    assert_int_equal(choir_audio_decode_file(tu_fixture("audio/fox16k.wav"), &opts, &a, &err), 0);
    const int n_mels = 80;
    float *one = malloc((size_t)n_mels * CHOIR_WHISPER_N_FRAMES * sizeof(float));
    float *win = malloc((size_t)n_mels * CHOIR_WHISPER_N_FRAMES * sizeof(float));
    assert_int_equal(choir_whisper_log_mel(a.samples, a.frames, n_mels, one, CHOIR_WHISPER_N_FRAMES, &err), 0);
    float *full = NULL;
    int64_t frames = 0;
    assert_int_equal(
        choir_whisper_log_mel_full(a.samples, a.frames, CHOIR_WHISPER_N_SAMPLES, n_mels, &full, &frames, &err), 0);
    assert_int_equal(frames, (a.frames + CHOIR_WHISPER_N_SAMPLES) / CHOIR_WHISPER_HOP);
    choir_whisper_mel_window(full, n_mels, frames, 0, CHOIR_WHISPER_N_FRAMES, win);
    assert_true(tu_max_abs_diff(win, one, (size_t)n_mels * CHOIR_WHISPER_N_FRAMES) < 1e-6);
    /* A window starting 100 frames before the end: 100 real frames, then 0.0. */
    choir_whisper_mel_window(full, n_mels, frames, frames - 100, CHOIR_WHISPER_N_FRAMES, win);
    assert_true(win[99] == full[frames - 1]);
    assert_true(win[100] == 0.0f && win[CHOIR_WHISPER_N_FRAMES - 1] == 0.0f);
    choir_free(full);
    free(one);
    free(win);
    choir_audio_clear(&a);
}

static void test_mel_errors(void **state) {
    (void)state;
    choir_err err;
    float pcm[400] = {0}, mel[80 * 10];
    assert_int_equal(choir_whisper_log_mel(pcm, 400, 0, mel, 10, &err), CHOIR_EINVAL);
    assert_int_equal(choir_whisper_log_mel(pcm, 400, 80, mel, 1, &err), CHOIR_EINVAL);
    assert_int_equal(choir_whisper_log_mel(NULL, 400, 80, mel, 10, &err), CHOIR_EINVAL);
    /* Silence gives the floor everywhere: log10(1e-10) = -10, (-10 + 4) / 4. */
    assert_int_equal(choir_whisper_log_mel(pcm, 400, 80, mel, 10, &err), 0);
    for (int i = 0; i < 80 * 10; i++) assert_true(fabsf(mel[i] - (-1.5f)) < 1e-6f);
    choir_alloc_fail_after(1);
    assert_int_equal(choir_whisper_log_mel(pcm, 400, 80, mel, 10, &err), CHOIR_ENOMEM);
    choir_alloc_fail_after(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filters_80),     cmocka_unit_test(test_filters_128),
        cmocka_unit_test(test_mel_hello_80),   cmocka_unit_test(test_mel_fox_80),
        cmocka_unit_test(test_mel_fox_128),  cmocka_unit_test(test_full_matches_window),
        cmocka_unit_test(test_mel_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
