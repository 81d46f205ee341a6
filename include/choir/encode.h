/* choir/encode.h: encoding TTS / STS output, streamed chunk by chunk.
 *
 * An encoder takes interleaved float samples in [-1, 1] (values outside are
 * clipped for the integer formats) in pieces of any size and hands the encoded
 * bytes to a write callback as they are ready, so the HTTP server can stream a
 * response while synthesis is still running. MP3, AAC and Opus keep their codec
 * state across pieces: a file made from many _write calls has no seams.
 *
 * Streamed WAV has an unknown length up front, so its RIFF and data sizes are
 * 0xFFFFFFFF (what streaming servers send and decoders accept); an encoder
 * writing to a file with choir_encoder_create_file fixes them at _finish.
 * Streamed FLAC likewise leaves STREAMINFO's total-samples and MD5 fields as
 * "unknown", which the format allows. */
#ifndef CHOIR_ENCODE_H
#define CHOIR_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum choir_audio_format {
    CHOIR_FORMAT_WAV16 = 0,  /* RIFF WAVE, PCM 16-bit little-endian */
    CHOIR_FORMAT_WAVF32 = 1, /* RIFF WAVE, IEEE float 32-bit */
    CHOIR_FORMAT_PCM16 = 2,  /* raw s16le, no header */
    CHOIR_FORMAT_FLAC = 3,   /* FLAC, 16-bit */
    CHOIR_FORMAT_MP3 = 4,    /* MPEG-1/2 layer III (LAME), 8..48 kHz, 1 or 2 channels */
    CHOIR_FORMAT_OPUS = 5,   /* Opus in Ogg (libopusenc), any input rate, 1..8 channels */
    CHOIR_FORMAT_AAC = 6,    /* AAC-LC in ADTS (libavcodec), ADTS rates 7350..96000 Hz, 1..6 channels */
    CHOIR_FORMAT_COUNT = 7
} choir_audio_format;

/* Receives `len` encoded bytes (valid only during the call). Returns 0 to go
 * on, non-zero to stop: the encoder call that triggered it then fails with
 * CHOIR_EIO (a client that hung up, a full disk). */
typedef int (*choir_write_fn)(const void *data, size_t len, void *user);

typedef struct choir_encoder choir_encoder;

/* Parses "wav" (16-bit), "wav_f32"/"wavf32", "pcm", "flac", "mp3", "opus",
 * "aac" (the names OpenAI's response_format uses, plus wav_f32). Returns 0 or
 * CHOIR_EINVAL. */
int choir_audio_format_parse(const char *name, choir_audio_format *format, choir_err *err);
/* Static strings: "wav", "wav_f32", "pcm", "flac", "mp3", "opus", "aac" / the
 * MIME type ("audio/wav", "audio/L16", "audio/flac", "audio/mpeg", "audio/ogg",
 * "audio/aac"). */
const char *choir_audio_format_name(choir_audio_format format);
const char *choir_audio_format_mime(choir_audio_format format);

/* Makes an encoder that sends bytes to write(data, len, user). rate in Hz,
 * channels >= 1 (limits per format above). NULL (and err) on bad arguments,
 * codec set-up failure or out of memory. The header (where the format has
 * one) is written by the first _write or by _finish. */
choir_encoder *choir_encoder_create(choir_audio_format format, int rate, int channels, choir_write_fn write,
                                    void *user, choir_err *err);
/* As choir_encoder_create, writing to the file at `path` (created or
 * truncated). WAV sizes are fixed at _finish. */
choir_encoder *choir_encoder_create_file(choir_audio_format format, int rate, int channels, const char *path,
                                         choir_err *err);
/* Encodes `frames` interleaved frames. Returns 0 or a negative status; after a
 * failure the encoder only accepts _free. */
int choir_encoder_write(choir_encoder *e, const float *interleaved, int64_t frames, choir_err *err);
/* Flushes the codec and writes any trailer. No _write after it. */
int choir_encoder_finish(choir_encoder *e, choir_err *err);
/* Frees (without finishing). NULL is a no-op. */
void choir_encoder_free(choir_encoder *e);

/* Convenience: encodes a whole signal to a file. */
int choir_audio_encode_file(const char *path, choir_audio_format format, const float *interleaved, int64_t frames,
                            int rate, int channels, choir_err *err);

/* Convenience: encodes a whole signal into memory. On success *out is a new
 * choir_alloc'd (CHOIR_MEM_IO) buffer of *out_len bytes, freed with choir_free. */
int choir_audio_encode_memory(choir_audio_format format, const float *interleaved, int64_t frames, int rate,
                              int channels, void **out, size_t *out_len, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
