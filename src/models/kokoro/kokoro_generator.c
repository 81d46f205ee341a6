/* Kokoro's harmonic source (SineGen + SourceModuleHnNSF) and its 20-point
 * STFT: the model's parameters of choir_nsf_source_stft (choir/kernels.h,
 * src/tensor/cpu/nsf_source.c, whose comment says why every float32
 * operation there is the reference's), and its seeded noise. Even so the
 * output is only reproducible to float32 noise: on the random weights of the
 * parity fixtures a 1-ulp change of F0 moves the audio by tens of percent
 * (docs/kokoro.md, "Parity"). On a device the same source is the backend
 * operation choir_op_nsf_source_stft. */
#include <string.h>

#include "choir/kernels.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_internal.h"

#define KK_SR 24000

void kk_gaussian_fill(float *x, int64_t n, uint64_t seed) { choir_gaussian_stream(x, 0, n, seed); }

void kk_nsf_params(const choir_kokoro *m, choir_nsf_source *p) {
    memset(p, 0, sizeof *p);
    p->harmonics = KK_HARMONICS;
    p->upsample = CHOIR_KOKORO_SAMPLES_PER_FRAME / 2; /* 300 samples per F0 value */
    p->sample_rate = (float)KK_SR;
    p->sine_amp = 0.1f;
    p->voiced_noise = 0.003f;
    p->unvoiced_noise = (float)(0.1 / 3.0); /* sine_amp / 3, rounded once from double */
    p->voiced_threshold = 10.0f;
    choir_weight_row_f32(&m->l_linear.w, 0, p->lin_w);
    p->lin_b = m->l_linear.b[0];
    p->n_fft = KK_NFFT;
    p->hop = KK_HOP;
}

void kk_source_spectrum_buf(const choir_kokoro *m, const float *f0, int64_t L, const float *noise,
                            const uint64_t *seed, float *S, int64_t ld, float *work) {
    choir_nsf_source p;
    kk_nsf_params(m, &p);
    choir_nsf_source_stft(&p, f0, 2 * L, noise, seed, S, ld, work);
}
