/* choir/stft.h: short-time Fourier transform and its inverse, with the
 * semantics of torch.stft / torch.istft (return_complex, onesided, not
 * normalized).
 *
 * A plan fixes n_fft, hop, window and centering; it is immutable after
 * creation and may be executed from many threads at once (FFTW new-array
 * execution on per-call scratch). Plan creation and destruction take a
 * process-wide lock, because FFTW's planner is not thread-safe.
 *
 * Spectra are complex, stored as interleaved (re, im) float pairs laid out
 * [n_bins][n_frames][2], n_bins = n_fft / 2 + 1, like torch's
 * [n_bins, n_frames] complex tensor. */
#ifndef CHOIR_STFT_H
#define CHOIR_STFT_H

#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum choir_window {
    CHOIR_WINDOW_HANN = 0,              /* periodic: 0.5 - 0.5 cos(2 pi n / W), torch.hann_window default */
    CHOIR_WINDOW_HAMMING = 1,           /* periodic: 0.54 - 0.46 cos(2 pi n / W) */
    CHOIR_WINDOW_HANN_SYMMETRIC = 2,    /* periodic=False: divides by W - 1 */
    CHOIR_WINDOW_HAMMING_SYMMETRIC = 3, /* periodic=False (MossFormer2) */
    CHOIR_WINDOW_RECT = 4,              /* all ones (torch's window=None) */
    CHOIR_WINDOW_CUSTOM = 5             /* win_length values given by the caller */
} choir_window;

typedef struct choir_stft_plan choir_stft_plan;

/* Makes a plan. n_fft >= 2, 1 <= hop, 1 <= win_length <= n_fft (a shorter
 * window is zero-padded on both sides to n_fft, as torch does). `custom`
 * (win_length floats, copied) is read only for CHOIR_WINDOW_CUSTOM. center
 * non-zero: reflect-pad n_fft/2 samples on both sides (torch center=True,
 * pad_mode='reflect'), else frames start at sample 0. NULL (and err) on bad
 * arguments or out of memory. */
choir_stft_plan *choir_stft_plan_create(int n_fft, int hop, int win_length, choir_window window,
                                        const float *custom, int center, choir_err *err);
/* NULL is a no-op. */
void choir_stft_plan_free(choir_stft_plan *p);

int choir_stft_n_fft(const choir_stft_plan *p);
int choir_stft_n_bins(const choir_stft_plan *p);
int choir_stft_hop(const choir_stft_plan *p);
/* The n_fft-long window the plan applies (after zero-padding); owned by the plan. */
const float *choir_stft_window(const choir_stft_plan *p);

/* Frames the forward transform gives for n_samples input samples:
 * centered 1 + n/hop; otherwise 1 + (n - n_fft)/hop, or 0 when n < n_fft. */
int64_t choir_stft_frames(const choir_stft_plan *p, int64_t n_samples);

/* Forward STFT of x[n_samples] into spec [n_bins][n_frames][2], n_frames =
 * choir_stft_frames(p, n_samples). Centered plans need n_samples > n_fft/2
 * (reflect padding, as torch requires). Returns 0 or a negative status. */
int choir_stft(const choir_stft_plan *p, const float *x, int64_t n_samples, float *spec, choir_err *err);

/* The same, writing |X| and atan2(Im, Re) (each [n_bins][n_frames]) instead of
 * the complex spectrum: the form Kokoro's vocoder wants. Either may be NULL. */
int choir_stft_mag_phase(const choir_stft_plan *p, const float *x, int64_t n_samples, float *mag,
                         float *phase, choir_err *err);

/* Inverse STFT of spec [n_bins][n_frames][2] (imaginary parts of the DC and
 * Nyquist bins are ignored) with torch.istft semantics: windowed overlap-add
 * divided by the overlap-added squared window; centered plans drop n_fft/2
 * samples at the start. `length` >= 0 gives exactly that many samples
 * (zero-filled past the last frame); length < 0 gives the default,
 * hop*(n_frames-1) centered or n_fft + hop*(n_frames-1) not. out must hold
 * choir_istft_length(p, n_frames, length) floats. Fails with CHOIR_EINVAL
 * where the window envelope is < 1e-11 inside the output (torch's NOLA check). */
int choir_istft(const choir_stft_plan *p, const float *spec, int64_t n_frames, int64_t length, float *out,
                choir_err *err);
int64_t choir_istft_length(const choir_stft_plan *p, int64_t n_frames, int64_t length);

/* As choir_istft from magnitude and phase [n_bins][n_frames]: the spectrum is
 * mag * exp(i * phase). */
int choir_istft_mag_phase(const choir_stft_plan *p, const float *mag, const float *phase, int64_t n_frames,
                          int64_t length, float *out, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
