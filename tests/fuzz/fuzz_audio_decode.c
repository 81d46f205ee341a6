/* libFuzzer harness: audio decoding of an upload (WAV, FLAC, MP3, Ogg
 * Opus/Vorbis, anything else) as the server does it, to 16 kHz mono under a
 * length cap. A refusal must say why and leave no samples; an accepted file
 * must be within the cap and readable to its end (ASan checks). Leaks are
 * LeakSanitizer's to report. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/encode.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP_FRAMES (16000 * 120)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the length's parity picks the options (the bytes are all the file's):
     * resampled mono, the server's way, or as stored, which keeps the
     * channels and the rate */
    int as_stored = size & 1;
    choir_decode_opts o = {.target_rate = as_stored ? 0 : 16000, .mono = !as_stored, .max_frames = CAP_FRAMES};
    choir_audio a;
    choir_err err = {0};
    int rc = choir_audio_decode_memory(data, size, &o, &a, &err);
    if (rc < 0) {
        if (err.code >= 0 || !err.msg[0] || a.samples)
            __builtin_trap();
        return 0;
    }
    if (a.frames < 0 || a.frames > CAP_FRAMES || a.channels < 1 || a.rate <= 0 || (a.frames && !a.samples))
        __builtin_trap();
    volatile float sink = 0;
    for (int64_t i = 0; i < a.frames * a.channels; i++)
        sink += a.samples[i];
    (void)sink;
    choir_audio_clear(&a);
    return 0;
}

/* A short tone in every format the encoder writes. */
int fuzz_seeds(fuzz_seed *out, int cap)
{
    static const choir_audio_format formats[] = {CHOIR_FORMAT_WAV16, CHOIR_FORMAT_WAVF32, CHOIR_FORMAT_FLAC,
                                                 CHOIR_FORMAT_MP3, CHOIR_FORMAT_OPUS};
    enum { RATE = 16000, FRAMES = 1600 };
    float *tone = malloc(FRAMES * 2 * sizeof *tone);
    if (!tone)
        return 0;
    for (int i = 0; i < FRAMES * 2; i++)
        tone[i] = 0.5f * sinf(0.05f * (float)i);
    int n = 0;
    for (size_t k = 0; k < sizeof formats / sizeof *formats && n < cap; k++) {
        for (int ch = 1; ch <= 2 && n < cap; ch++) {
            void *enc = NULL;
            size_t len = 0;
            choir_err err = {0};
            if (choir_audio_encode_memory(formats[k], tone, FRAMES / ch, RATE, ch, &enc, &len, &err) < 0)
                continue;
            uint8_t *copy = malloc(len);
            if (copy) {
                memcpy(copy, enc, len);
                out[n++] = (fuzz_seed){copy, len};
            }
            choir_free(enc);
        }
    }
    free(tone);
    return n;
}
