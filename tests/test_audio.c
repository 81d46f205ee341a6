/* Decoding and resampling: exact samples for PCM formats, every container
 * libsndfile writes, mix-down, the length cap, streaming vs one-shot
 * resampling, and clear errors for empty, truncated, corrupt and missing input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sndfile.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "testutil.h"

/* Writes interleaved `x` with libsndfile in `format`; returns the path. */
static const char *write_with_sndfile(const char *name, int format, int rate, int channels, const float *x,
                                      int64_t frames) {
    const char *path = tu_tmpfile(name);
    SF_INFO info = {.samplerate = rate, .channels = channels, .format = format};
    SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
    assert_non_null(sf);
    assert_int_equal(sf_writef_float(sf, x, frames), frames);
    sf_close(sf);
    return path;
}

static float *test_signal(int64_t frames, int channels, int rate) {
    float *x = malloc((size_t)frames * channels * sizeof(float));
    for (int64_t i = 0; i < frames; i++)
        for (int c = 0; c < channels; c++)
            x[i * channels + c] = 0.5f * sinf(2.0f * (float)M_PI * (440.0f + 110.0f * c) * (float)i / rate);
    return x;
}

/* The 16-bit WAV fixture decodes to exactly its samples / 32768, as
 * Whisper's own loader produces them. */
static void test_wav16_exact(void **state) {
    (void)state;
    const char *path = tu_fixture("audio/hello16k.wav");
    choir_audio a;
    choir_err err;
    assert_int_equal(choir_audio_decode_file(path, NULL, &a, &err), 0);
    assert_int_equal(a.rate, 16000);
    assert_int_equal(a.channels, 1);
    assert_int_equal(a.frames, 53310);
    size_t len = 0;
    unsigned char *raw = tu_read_file(path, &len);
    assert_non_null(raw);
    size_t at = 12;
    while (at + 8 <= len && memcmp(raw + at, "data", 4) != 0)
        at += 8 + (raw[at + 4] | (size_t)raw[at + 5] << 8 | (size_t)raw[at + 6] << 16 | (size_t)raw[at + 7] << 24);
    assert_true(at + 8 + 2 * 53310 <= len);
    for (int64_t i = 0; i < a.frames; i++) {
        int16_t s = (int16_t)(raw[at + 8 + 2 * i] | raw[at + 9 + 2 * i] << 8);
        assert_true(a.samples[i] == (float)s / 32768.0f);
    }
    /* The same bytes from memory give the same samples. */
    choir_audio b;
    assert_int_equal(choir_audio_decode_memory(raw, len, NULL, &b, &err), 0);
    assert_int_equal(b.frames, a.frames);
    assert_memory_equal(b.samples, a.samples, (size_t)a.frames * sizeof(float));
    free(raw);
    choir_audio_clear(&a);
    choir_audio_clear(&b);
    choir_audio_clear(&b);
    choir_audio_clear(NULL);
}

static void test_formats_round_trip(void **state) {
    (void)state;
    struct {
        const char *name;
        int format;
        double tol; /* max abs error against the source */
    } cases[] = {
        {"u8.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 1.0 / 128},
        {"s16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 1.0 / 32768},
        {"s24.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 1.0 / 8388608 * 2},
        {"s32.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_32, 1e-7},
        {"f32.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 0.0},
        {"s16.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 1.0 / 32768},
        /* Lossy codecs: a coarse bound that still catches a wrong channel
         * order, rate or scale. */
        {"v.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 0.05},
        {"o.opus", SF_FORMAT_OGG | SF_FORMAT_OPUS, -1},
    };
    const int rate = 48000, channels = 2;
    const int64_t frames = 24000;
    float *x = test_signal(frames, channels, rate);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = write_with_sndfile(cases[i].name, cases[i].format, rate, channels, x, frames);
        choir_audio a;
        choir_err err;
        int rc = choir_audio_decode_file(path, NULL, &a, &err);
        if (rc) print_message("%s: %s\n", cases[i].name, err.msg);
        assert_int_equal(rc, 0);
        assert_int_equal(a.channels, channels);
        assert_int_equal(a.rate, rate);
        if (cases[i].tol >= 0) {
            assert_int_equal(a.frames, frames);
            double d = tu_max_abs_diff(a.samples, x, (size_t)frames * channels);
            print_message("%s: max abs diff %.3g\n", cases[i].name, d);
            assert_true(d <= cases[i].tol);
        } else {
            /* Opus has a pre-skip and no exact length promise: check energy. */
            assert_true(llabs(a.frames - frames) < 2000);
            double e = 0;
            for (int64_t k = 0; k < a.frames * channels; k++) e += (double)a.samples[k] * a.samples[k];
            double rms = sqrt(e / (double)(a.frames * channels));
            assert_true(fabs(rms - 0.5 / sqrt(2.0)) < 0.05);
        }
        choir_audio_clear(&a);
    }
    free(x);
}

static void test_mono_and_resample(void **state) {
    (void)state;
    const int rate = 44100;
    const int64_t frames = 44100;
    float *x = test_signal(frames, 2, rate);
    const char *path = write_with_sndfile("st.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, rate, 2, x, frames);
    choir_audio a;
    choir_err err;
    choir_decode_opts mono = {.target_rate = 0, .mono = 1, .max_frames = 0};
    assert_int_equal(choir_audio_decode_file(path, &mono, &a, &err), 0);
    assert_int_equal(a.channels, 1);
    for (int64_t i = 0; i < frames; i++) assert_true(fabsf(a.samples[i] - 0.5f * (x[2 * i] + x[2 * i + 1])) < 1e-7f);
    choir_audio_clear(&a);

    choir_decode_opts to16k = {.target_rate = 16000, .mono = 1, .max_frames = 0};
    assert_int_equal(choir_audio_decode_file(path, &to16k, &a, &err), 0);
    assert_int_equal(a.rate, 16000);
    assert_int_equal(a.frames, 16000);
    /* Away from the edges the resampled signal is the same two tones at 16 kHz. */
    double num = 0, den = 0;
    for (int64_t i = 500; i < a.frames - 500; i++) {
        double t = (double)i / 16000;
        double want = 0.25 * (sin(2 * M_PI * 440 * t) + sin(2 * M_PI * 550 * t));
        num += want * want;
        den += (a.samples[i] - want) * (a.samples[i] - want);
    }
    double snr = 10 * log10(num / den);
    print_message("44.1k -> 16k resample SNR %.1f dB\n", snr);
    assert_true(snr > 60.0);
    choir_audio_clear(&a);
    free(x);

    /* Up-sampling: 16 kHz speech to 48 kHz (STS) keeps its duration exactly. */
    choir_decode_opts to48k = {.target_rate = 48000, .mono = 0, .max_frames = 0};
    assert_int_equal(choir_audio_decode_file(tu_fixture("audio/hello16k.wav"), &to48k, &a, &err), 0);
    assert_int_equal(a.rate, 48000);
    assert_int_equal(a.frames, 3 * 53310);
    choir_audio_clear(&a);
}

/* Feeding the resampler in uneven pieces gives the one-shot result. */
static void test_streaming_resampler(void **state) {
    (void)state;
    const int64_t n = 30011;
    float *x = malloc((size_t)n * sizeof(float));
    tu_fill_uniform(x, (size_t)n, 5, -0.5f, 0.5f);
    float *whole = NULL;
    int64_t whole_n = 0;
    choir_err err;
    assert_int_equal(choir_resample(x, n, 1, 44100, 16000, &whole, &whole_n, &err), 0);
    assert_int_equal(whole_n, (int64_t)llround(n * 16000.0 / 44100.0));

    choir_resampler *r = choir_resampler_create(44100, 16000, 1, &err);
    assert_non_null(r);
    float *got = malloc((size_t)(whole_n + 64) * sizeof(float));
    int64_t total = 0, at = 0, piece = 1;
    while (at < n) {
        int64_t len = piece < n - at ? piece : n - at;
        int64_t cap = choir_resampler_max_out(r, len), made = 0;
        assert_true(total + cap <= whole_n + 64);
        assert_int_equal(choir_resampler_process(r, x + at, len, got + total, cap, &made, &err), 0);
        total += made;
        at += len;
        piece = piece * 3 + 7;
    }
    int64_t made = 0;
    do {
        assert_int_equal(choir_resampler_flush(r, got + total, whole_n + 64 - total, &made, &err), 0);
        total += made;
    } while (made > 0);
    assert_int_equal(total, whole_n);
    assert_true(tu_max_abs_diff(got, whole, (size_t)whole_n) < 1e-6);
    assert_int_equal(choir_resampler_process(r, x, 1, got, 10, &made, &err), CHOIR_EINVAL);
    choir_resampler_free(r);
    choir_resampler_free(NULL);
    assert_null(choir_resampler_create(0, 16000, 1, &err));
    assert_null(choir_resampler_create(16000, 16000, 0, &err));
    choir_free(whole);
    free(got);
    free(x);
}

static void test_errors(void **state) {
    (void)state;
    choir_audio a;
    choir_err err;
    assert_int_equal(choir_audio_decode_file(tu_tmpfile("missing.wav"), NULL, &a, &err), CHOIR_ENOTFOUND);
    assert_null(a.samples);
    assert_int_equal(tu_write_file(tu_tmpfile("empty.wav"), "", 0), 0);
    assert_int_equal(choir_audio_decode_file(tu_tmpfile("empty.wav"), NULL, &a, &err), CHOIR_EFORMAT);
    assert_non_null(strstr(err.msg, "empty"));
    assert_int_equal(choir_audio_decode_memory("x", 0, NULL, &a, &err), CHOIR_EFORMAT);

    char garbage[4096];
    for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (char)(i * 7919 % 251);
    assert_int_equal(choir_audio_decode_memory(garbage, sizeof garbage, NULL, &a, &err), CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "not a supported audio format"));

    /* A WAV cut in the middle of its data: the header promises more frames. */
    size_t len = 0;
    unsigned char *raw = tu_read_file(tu_fixture("audio/hello16k.wav"), &len);
    assert_int_equal(choir_audio_decode_memory(raw, len / 2, NULL, &a, &err), CHOIR_EFORMAT);
    assert_non_null(strstr(err.msg, "truncated"));
    assert_null(a.samples);
    /* Cut inside the header. */
    assert_true(choir_audio_decode_memory(raw, 20, NULL, &a, &err) < 0);

    /* Ogg Vorbis cut or damaged inside its headers is refused before
     * libsndfile reads it (libsndfile 1.2 leaks on such streams; the
     * sanitizer run's leak check holds us to it). */
    {
        float *tone = test_signal(22050, 1, 22050);
        const char *ogg = write_with_sndfile("h.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 22050, 1, tone, 22050);
        size_t olen = 0;
        unsigned char *oraw = tu_read_file(ogg, &olen);
        assert_true(olen > 4000);
        assert_int_equal(choir_audio_decode_memory(oraw, 3000, NULL, &a, &err), CHOIR_EFORMAT);
        assert_non_null(strstr(err.msg, "Ogg Vorbis headers"));
        oraw[200] ^= 0x40;
        assert_int_equal(choir_audio_decode_memory(oraw, olen, NULL, &a, &err), CHOIR_EFORMAT);
        assert_int_equal(tu_write_file(tu_tmpfile("bad.ogg"), oraw, olen), 0);
        assert_int_equal(choir_audio_decode_file(tu_tmpfile("bad.ogg"), NULL, &a, &err), CHOIR_EFORMAT);
        oraw[200] ^= 0x40;
        assert_int_equal(choir_audio_decode_memory(oraw, olen, NULL, &a, &err), 0);
        choir_audio_clear(&a);
        free(oraw);
        free(tone);
    }

    /* The cap: 53310 frames at 16 kHz fit in 60000, not in 50000, and at
     * 8 kHz (26655 frames) they fit in 30000. */
    choir_decode_opts cap = {.target_rate = 0, .mono = 1, .max_frames = 60000};
    assert_int_equal(choir_audio_decode_memory(raw, len, &cap, &a, &err), 0);
    choir_audio_clear(&a);
    cap.max_frames = 50000;
    assert_int_equal(choir_audio_decode_memory(raw, len, &cap, &a, &err), CHOIR_ETOOBIG);
    assert_null(a.samples);
    cap.target_rate = 8000;
    cap.max_frames = 30000;
    assert_int_equal(choir_audio_decode_memory(raw, len, &cap, &a, &err), 0);
    assert_int_equal(a.frames, 26655);
    choir_audio_clear(&a);
    cap.max_frames = -1;
    assert_int_equal(choir_audio_decode_memory(raw, len, &cap, &a, &err), CHOIR_EINVAL);

    /* Every allocation failure is reported and leaks nothing. */
    int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
    choir_decode_opts to8k = {.target_rate = 8000, .mono = 1, .max_frames = 0};
    int failures = 0;
    for (int64_t i = 1; i < 200; i++) {
        choir_alloc_fail_after(i);
        int rc = choir_audio_decode_memory(raw, len, &to8k, &a, &err);
        choir_alloc_fail_after(0);
        if (rc == 0) {
            choir_audio_clear(&a);
            break;
        }
        assert_int_equal(rc, CHOIR_ENOMEM);
        failures++;
    }
    assert_true(failures > 0);
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
    free(raw);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wav16_exact),       cmocka_unit_test(test_formats_round_trip),
        cmocka_unit_test(test_mono_and_resample), cmocka_unit_test(test_streaming_resampler),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
