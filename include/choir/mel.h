/* choir/mel.h: Whisper's log-mel spectrogram, computed exactly as Whisper and
 * Hugging Face's WhisperFeatureExtractor compute it.
 *
 * Audio is mono float at 16 kHz in [-1, 1]. The steps: STFT with n_fft 400,
 * hop 160, periodic Hann window, centred frames with reflect padding; drop the
 * last frame; power spectrum; Slaney-normalised mel filters (librosa's
 * filters.mel, 80 or 128 bins, 0 to 8 kHz); log10 with floor 1e-10; clamp to
 * (max over the whole matrix) - 8; (x + 4) / 4.
 *
 * Two forms, matching the two reference pipelines (see specs/whisper.md 7.5):
 * - choir_whisper_log_mel: one window. The waveform is zero-padded (or cut)
 *   to n_frames * 160 samples and the max is taken over that window. With
 *   n_frames = 3000 this is the HF short-form feature and openai's
 *   log_mel_spectrogram(pad_or_trim(audio)).
 * - choir_whisper_log_mel_full + choir_whisper_mel_window: openai's
 *   transcribe() seek loop. The mel of the whole file plus 30 s of zeros is
 *   computed once with one global max, then 3000-frame windows are sliced from
 *   it, and frames past its end are filled with the value 0.0. */
#ifndef CHOIR_MEL_H
#define CHOIR_MEL_H

#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_WHISPER_SAMPLE_RATE 16000
#define CHOIR_WHISPER_N_FFT 400
#define CHOIR_WHISPER_HOP 160
#define CHOIR_WHISPER_N_SAMPLES 480000 /* 30 s */
#define CHOIR_WHISPER_N_FRAMES 3000    /* mel frames in 30 s */

/* Fills filters [n_mels][201] with the Slaney mel filter bank for 16 kHz and
 * n_fft 400 (librosa filters.mel(sr=16000, n_fft=400, n_mels, htk=False,
 * norm='slaney')), computed in double and rounded once. n_mels is 80 or 128
 * (any value 1..512 works). Returns 0 or CHOIR_EINVAL. */
int choir_whisper_mel_filters(int n_mels, float *filters, choir_err *err);

/* One window: mel [n_mels][n_frames] row-major from pcm16k[n_samples] padded
 * with zeros (or cut) to n_frames * 160 samples. n_frames >= 2; use
 * CHOIR_WHISPER_N_FRAMES for a 30-s window. Thread-safe; allocates only
 * scratch. Returns 0 or a negative status. */
int choir_whisper_log_mel(const float *pcm16k, int64_t n_samples, int n_mels, float *mel, int64_t n_frames,
                          choir_err *err);

/* Whole file: the mel of pcm16k followed by pad_samples zeros (openai uses
 * CHOIR_WHISPER_N_SAMPLES), normalised with one global max. On success *mel is
 * a new choir_alloc'd (CHOIR_MEM_IO) [n_mels][*n_frames] buffer the caller
 * frees with choir_free; *n_frames = (n_samples + pad_samples) / 160. Memory is
 * n_mels * 4 bytes per 10 ms (184 MB for an hour at 128 mels). */
int choir_whisper_log_mel_full(const float *pcm16k, int64_t n_samples, int64_t pad_samples, int n_mels,
                               float **mel, int64_t *n_frames, choir_err *err);

/* Copies frames [start, start + window_frames) of a full mel [n_mels][total_frames]
 * into window [n_mels][window_frames]; frames past total_frames become 0.0 (as
 * openai's pad_or_trim does on the mel). */
void choir_whisper_mel_window(const float *mel, int n_mels, int64_t total_frames, int64_t start,
                              int64_t window_frames, float *window);

#ifdef __cplusplus
}
#endif
#endif
