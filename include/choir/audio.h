/* choir/audio.h: decoding audio files and buffers, and resampling.
 *
 * Decoding reads WAV (PCM 8/16/24/32-bit and float), FLAC, Ogg/Opus and MP3
 * through libsndfile and Ogg/Vorbis through libvorbisfile, from a file or from
 * memory (an upload). Input sample rates must be 1000 to 768000 Hz. Samples come out as float in [-1, 1], interleaved, optionally mixed
 * down to mono and resampled (libsoxr, high quality) to the caller's rate.
 *
 * Sample rates are in Hz, lengths in frames (one frame = one sample per
 * channel). All functions are thread-safe; the streaming resampler object is
 * not shared between threads. */
#ifndef CHOIR_AUDIO_H
#define CHOIR_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Common rates: STT and VAD run at 16 kHz, TTS at 24 kHz, STS at 48 kHz. */
#define CHOIR_RATE_STT 16000
#define CHOIR_RATE_TTS 24000
#define CHOIR_RATE_STS 48000

typedef struct choir_audio {
    float *samples;  /* interleaved [frames][channels], choir_alloc'd (CHOIR_MEM_IO) */
    int64_t frames;
    int channels;
    int rate;        /* Hz */
} choir_audio;

typedef struct choir_decode_opts {
    int target_rate;    /* Hz; 0 keeps the file's rate */
    int mono;           /* non-zero: mix all channels down to one (their mean) */
    int64_t max_frames; /* cap on the decoded length, counted at the output rate; 0 = none.
                           Longer input fails with CHOIR_ETOOBIG before it is all read
                           (before any of it is decoded when the header states the length). */
    /* Optional allocator of the output buffer, in place of choir_alloc(CHOIR_MEM_IO,
     * bytes), so that a caller can admit decoded audio against a memory budget
     * before it exists. It is called once with the exact size when the header
     * states the length, and for each growth otherwise (the previous block is
     * still held then; the decoder copies and frees it with choir_free). It
     * returns a choir_alloc'd block, or NULL with err set, which stops the decode
     * with err's code (CHOIR_EBUSY: not now; CHOIR_ETOOBIG: never). */
    void *(*alloc)(void *user, size_t bytes, choir_err *err);
    void *alloc_user;
    /* Optional: decoding stops with CHOIR_ECANCELED soon after *cancel becomes
     * non-zero (read atomically, once per block). */
    const int *cancel;
} choir_decode_opts;

/* Decodes the file at `path` into `out` (which the caller later releases with
 * choir_audio_clear). `opts` NULL means keep rate and channels, no cap.
 * Returns 0, or CHOIR_ENOTFOUND / CHOIR_EIO (cannot open or read),
 * CHOIR_EFORMAT (empty, truncated, corrupt or not audio), CHOIR_ETOOBIG (over
 * max_frames), CHOIR_EINVAL (bad options), CHOIR_ENOMEM. On failure `out` is
 * left empty (samples NULL, frames 0). */
int choir_audio_decode_file(const char *path, const choir_decode_opts *opts, choir_audio *out,
                            choir_err *err);

/* As choir_audio_decode_file, from `len` bytes at `data` (not retained). */
int choir_audio_decode_memory(const void *data, size_t len, const choir_decode_opts *opts,
                              choir_audio *out, choir_err *err);

/* Frees a->samples and zeroes the struct. NULL, or an already cleared struct, is a no-op. */
void choir_audio_clear(choir_audio *a);

/* Mixes interleaved `in` [frames][channels] down to mono `out` [frames] (the
 * mean of the channels). `out` may equal `in`. */
void choir_audio_mix_mono(const float *in, int64_t frames, int channels, float *out);

/* One-shot resampling of interleaved `in` [in_frames][channels] from in_rate to
 * out_rate. On success *out is a new choir_alloc'd (CHOIR_MEM_IO) buffer of
 * *out_frames = round(in_frames * out_rate / in_rate) frames, which the caller
 * frees with choir_free. Equal rates copy. Returns 0 or a negative status. */
int choir_resample(const float *in, int64_t in_frames, int channels, int in_rate, int out_rate,
                   float **out, int64_t *out_frames, choir_err *err);

/* Streaming resampler for chunked input. Feeding a signal in pieces of any size
 * and then calling _flush gives the same samples as choir_resample on the whole
 * signal (up to the delay compensation soxr does internally; the total count
 * is the same). */
typedef struct choir_resampler choir_resampler;

/* NULL (and err) on bad rates/channels or out of memory. */
choir_resampler *choir_resampler_create(int in_rate, int out_rate, int channels, choir_err *err);
/* NULL is a no-op. */
void choir_resampler_free(choir_resampler *r);
/* The most frames one _process call on `in_frames` input frames (or a _flush)
 * can write; size the output buffer with it. */
int64_t choir_resampler_max_out(const choir_resampler *r, int64_t in_frames);
/* Consumes all `in_frames` interleaved frames of `in` and writes up to
 * `out_cap` frames of output to `out`, count in *out_frames. out_cap must be
 * at least choir_resampler_max_out(r, in_frames). */
int choir_resampler_process(choir_resampler *r, const float *in, int64_t in_frames, float *out,
                            int64_t out_cap, int64_t *out_frames, choir_err *err);
/* Ends the input: writes the remaining output (up to out_cap frames, at least
 * choir_resampler_max_out(r, 0) should be offered; call again while *out_frames
 * is non-zero). After a flush the resampler must not be fed again. */
int choir_resampler_flush(choir_resampler *r, float *out, int64_t out_cap, int64_t *out_frames,
                          choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
