/* Internal to src/audio: frame-by-frame access to a plan's forward transform,
 * for callers (the Whisper mel) that reduce each frame at once instead of
 * storing the whole spectrum. */
#ifndef CHOIR_AUDIO_STFT_INTERNAL_H
#define CHOIR_AUDIO_STFT_INTERNAL_H

#include <stdint.h>

#include "choir/error.h"
#include "choir/stft.h"

/* Computes frames [f0, f0 + count) of the STFT of a signal of n samples whose
 * first n_avail come from x and the rest are zeros (n >= n_avail), into
 * frames_out, frame-major [count][n_bins][2]. Thread-safe. */
int choir_stft_frames_block(const choir_stft_plan *p, const float *x, int64_t n_avail, int64_t n, int64_t f0,
                            int64_t count, float *frames_out, choir_err *err);

#endif
