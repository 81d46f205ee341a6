/* Audio front-end speed: Whisper mel, resampling, STFT/iSTFT and encoders,
 * single-threaded, reported as milliseconds per call and as a multiple of
 * real time. Usage: bench_audio [repeats] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/encode.h"
#include "choir/mel.h"
#include "choir/stft.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *speechish(int64_t n, int rate, int channels) {
    float *x = malloc((size_t)(n * channels) * sizeof(float));
    uint64_t s = 1;
    for (int64_t i = 0; i < n * channels; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        double noise = ((double)(s >> 40) / 16777216.0 - 0.5) * 0.05;
        double t = (double)(i / channels) / rate;
        x[i] = (float)(0.3 * sin(2 * M_PI * 180 * t) * (0.5 + 0.5 * sin(2 * M_PI * 4 * t)) + noise);
    }
    return x;
}

static void report(const char *what, double seconds, int reps, double audio_seconds) {
    double per = seconds / reps;
    printf("%-44s %9.3f ms/call  %8.1fx real time\n", what, per * 1e3, audio_seconds / per);
}

static int discard(const void *data, size_t len, void *user) {
    (void)data;
    *(size_t *)user += len;
    return 0;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    if (reps < 1) reps = 1;
    choir_err err;

    float *pcm16 = speechish(CHOIR_WHISPER_N_SAMPLES, 16000, 1);
    float *mel = malloc(128 * CHOIR_WHISPER_N_FRAMES * sizeof(float));
    int mels[2] = {80, 128};
    for (int m = 0; m < 2; m++) {
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            if (choir_whisper_log_mel(pcm16, CHOIR_WHISPER_N_SAMPLES, mels[m], mel, CHOIR_WHISPER_N_FRAMES, &err))
                return fprintf(stderr, "%s\n", err.msg), 1;
        char name[64];
        snprintf(name, sizeof name, "whisper log-mel, 30 s window, %d mels", mels[m]);
        report(name, now_s() - t0, reps, 30.0);
    }

    const int64_t n44 = 44100 * 30;
    float *st44 = speechish(n44, 44100, 2);
    double t0 = now_s();
    for (int r = 0; r < reps; r++) {
        float *out = NULL;
        int64_t got = 0;
        if (choir_resample(st44, n44, 2, 44100, 16000, &out, &got, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        choir_free(out);
    }
    report("resample 30 s stereo 44.1 kHz -> 16 kHz (soxr HQ)", now_s() - t0, reps, 30.0);

    const int64_t n24 = 24000 * 10;
    float *tts = speechish(n24, 24000, 1);
    choir_stft_plan *kokoro = choir_stft_plan_create(20, 5, 20, CHOIR_WINDOW_HANN, NULL, 1, &err);
    int64_t frames = choir_stft_frames(kokoro, n24);
    float *mag = malloc((size_t)(11 * frames) * sizeof(float)), *phase = malloc((size_t)(11 * frames) * sizeof(float));
    float *back = malloc((size_t)n24 * sizeof(float));
    t0 = now_s();
    for (int r = 0; r < reps; r++) choir_stft_mag_phase(kokoro, tts, n24, mag, phase, &err);
    report("stft n_fft 20 hop 5 (Kokoro), 10 s at 24 kHz", now_s() - t0, reps, 10.0);
    t0 = now_s();
    for (int r = 0; r < reps; r++) choir_istft_mag_phase(kokoro, mag, phase, frames, n24, back, &err);
    report("istft n_fft 20 hop 5 (Kokoro), 10 s at 24 kHz", now_s() - t0, reps, 10.0);

    static const choir_audio_format formats[] = {CHOIR_FORMAT_WAV16, CHOIR_FORMAT_FLAC, CHOIR_FORMAT_MP3,
                                                 CHOIR_FORMAT_OPUS};
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        size_t bytes = 0;
        t0 = now_s();
        for (int r = 0; r < reps; r++) {
            choir_encoder *e = choir_encoder_create(formats[f], 24000, 1, discard, &bytes, &err);
            if (!e || choir_encoder_write(e, tts, n24, &err) || choir_encoder_finish(e, &err))
                return fprintf(stderr, "%s\n", err.msg), 1;
            choir_encoder_free(e);
        }
        char name[64];
        snprintf(name, sizeof name, "encode %s, 10 s mono 24 kHz (%zu bytes)", choir_audio_format_name(formats[f]),
                 bytes / (size_t)reps);
        report(name, now_s() - t0, reps, 10.0);
    }
    choir_stft_plan_free(kokoro);
    free(pcm16);
    free(mel);
    free(st44);
    free(tts);
    free(mag);
    free(phase);
    free(back);
    return 0;
}
