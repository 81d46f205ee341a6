/* The iSTFTNet generator of Kokoro's decoder (spec §5.1): a harmonic source
 * from F0, its 20-point STFT, two transposed-conv up-sampling stages with
 * Snake residual blocks, conv_post and the 20-point inverse STFT.
 *
 * The source's phase is a long running sum that reaches ~1e5 rad, where one
 * float32 ulp is ~0.01 rad; the reference's float32 operations are therefore
 * reproduced one by one (same order, same rounding, the same fused
 * multiply-add) rather than computed more accurately, which would not match.
 * Even so the output is only reproducible to float32 noise: on the random
 * weights of the parity fixtures a 1-ulp change of F0 moves the audio by tens
 * of percent (docs/kokoro.md, "Parity"). The STFT pair is small (n_fft 20, hop 5)
 * and is written out here as direct DFTs. */
#include <math.h>
#include <string.h>

#include "choir/kernels.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_internal.h"

#define KK_SR 24000
#define KK_UPSAMPLE 300 /* samples per F0 frame: 10 * 6 * 5 */

/* splitmix64 + Box-Muller: a portable, seedable standard normal stream */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void kk_gaussian_fill(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = ((double)(splitmix64(&s) >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
        double u2 = (double)(splitmix64(&s) >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1)), a = 2.0 * M_PI * u2;
        x[i] = (float)(r * cos(a));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(a));
    }
}

/* SineGen + SourceModuleHnNSF, the frame-rate part: f0[F2] (Hz, one value
 * per 300 samples) -> phase_frames[F2, 9] (the running sum: sequential). */
static void source_phases(const float *f0, int64_t F2, float *phase_frames) {
    /* Frame-rate phase increments are frac(f0 h / sr) (the reference's
     * down-sampling interpolation reads two equal samples), cumulated in
     * double and rounded to float per step, as torch's CPU cumsum does. */
    double cum[KK_HARMONICS] = {0};
    const float pi_f = (float)M_PI;
    for (int64_t j = 0; j < F2; j++) {
        for (int h = 0; h < KK_HARMONICS; h++) {
            float r = f0[j] * (float)(h + 1) / (float)KK_SR;
            float rad = r - floorf(r);
            cum[h] += (double)rad;
            float p = (float)cum[h] * 2.0f * pi_f;
            phase_frames[j * KK_HARMONICS + h] = p * (float)KK_UPSAMPLE;
        }
    }
}

/* The sample-rate part, for the samples of chunks [c0, c1) of har[300 F2] (each sample on
 * its own, so any split gives the same values): noise [300 F2, 9] standard
 * normal draws, or NULL for zero. */
typedef struct source_job {
    const float *f0, *noise, *phase_frames;
    int64_t F2;
    float wl[KK_HARMONICS], bl;
    float *har;
    const float *x; /* the STFT's input and output (stft_range) */
    int64_t N, F;
    float *S;
} source_job;

#define KK_SOURCE_CHUNK 8192 /* samples, or STFT frames, per task */

static void harmonic_range(void *ctx, int64_t c0, int64_t c1, int worker) {
    (void)worker;
    const source_job *j = ctx;
    const float *f0 = j->f0, *noise = j->noise, *phase_frames = j->phase_frames, *wl = j->wl;
    const int64_t F2 = j->F2, N = F2 * KK_UPSAMPLE;
    const float scale = (float)(1.0 / KK_UPSAMPLE), bl = j->bl;
    float *har = j->har;
    int64_t t_end = c1 * KK_SOURCE_CHUNK < N ? c1 * KK_SOURCE_CHUNK : N;
    /* linear interpolation x300, align_corners=False (torch upsample_linear1d) */
    for (int64_t t = c0 * KK_SOURCE_CHUNK; t < t_end; t++) {
        float src = scale * ((float)t + 0.5f) - 0.5f;
        if (src < 0) src = 0;
        int64_t i0 = (int64_t)floorf(src);
        if (i0 > F2 - 1) i0 = F2 - 1;
        float l1 = src - (float)i0;
        if (l1 < 0) l1 = 0;
        if (l1 > 1) l1 = 1;
        float l0 = 1.0f - l1;
        int64_t i1 = i0 + (i0 < F2 - 1 ? 1 : 0);
        float f0u = f0[t / KK_UPSAMPLE];
        float uv = f0u > 10.0f ? 1.0f : 0.0f;
        float noise_amp = uv * 0.003f + (1.0f - uv) * (float)(0.1 / 3.0);
        float acc = 0;
        for (int h = 0; h < KK_HARMONICS; h++) {
            /* torch's CPU kernel computes t0 * w0 + t1 * w1 contracted to one
             * fused multiply-add; the rounding differs at these magnitudes */
            float ph = fmaf(l0, phase_frames[i0 * KK_HARMONICS + h],
                            l1 * phase_frames[i1 * KK_HARMONICS + h]);
            float sine = sinf(ph) * 0.1f;
            float e = sine * uv;
            if (noise) e += noise_amp * noise[t * KK_HARMONICS + h];
            acc += wl[h] * e;
        }
        har[t] = tanhf(acc + bl);
    }
}

/* cos/sin(2 pi m / 20) with exact zeros and ones where they belong, so that
 * the DC and Nyquist bins get exactly zero imaginary parts (as an FFT does;
 * atan2 of their sign would otherwise flip between +pi and -pi). */
static void dft_tables(double *cs, double *sn) {
    for (int i = 0; i < KK_NFFT; i++) {
        cs[i] = cos(2.0 * M_PI * i / KK_NFFT);
        sn[i] = sin(2.0 * M_PI * i / KK_NFFT);
    }
    cs[5] = cs[15] = 0;
    sn[0] = sn[10] = 0;
    cs[0] = sn[5] = 1;
    cs[10] = sn[15] = -1;
}

static void hann(float *w) {
    for (int n = 0; n < KK_NFFT; n++) w[n] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * n / KK_NFFT));
}

/* torch.stft(center, reflect, periodic Hann) -> S[22, F]: magnitudes 0..10,
 * phases 11..21, for the frames of chunks [c0, c1). x has N samples,
 * F = N / 5 + 1. */
static void stft_range(void *ctx, int64_t c0, int64_t c1, int worker) {
    (void)worker;
    const source_job *j = ctx;
    const float *x = j->x;
    const int64_t N = j->N, F = j->F;
    float *S = j->S;
    double cs[KK_NFFT], sn[KK_NFFT];
    float w[KK_NFFT];
    dft_tables(cs, sn);
    hann(w);
    const int pad = KK_NFFT / 2;
    int64_t f_end = c1 * KK_SOURCE_CHUNK < F ? c1 * KK_SOURCE_CHUNK : F;
    for (int64_t f = c0 * KK_SOURCE_CHUNK; f < f_end; f++) {
        double seg[KK_NFFT];
        for (int n = 0; n < KK_NFFT; n++) {
            int64_t i = f * KK_HOP + n - pad; /* reflect without repeating the edge */
            if (i < 0) i = -i;
            if (i >= N) i = 2 * (N - 1) - i;
            seg[n] = (double)(x[i] * w[n]);
        }
        for (int k = 0; k < KK_NBINS; k++) {
            double re = 0, im = 0;
            for (int n = 0; n < KK_NFFT; n++) {
                int idx = (k * n) % KK_NFFT;
                re += seg[n] * cs[idx];
                im -= seg[n] * sn[idx];
            }
            if (k == 0 || k == KK_NBINS - 1) im = 0;
            float fr = (float)re, fi = (float)im;
            S[k * F + f] = hypotf(fr, fi);
            S[(KK_NBINS + k) * F + f] = atan2f(fi, fr);
        }
    }
}

void kk_source_spectrum_buf(const choir_kokoro *m, const float *f0, int64_t L, const float *noise,
                            float *S, float *work) {
    const int64_t F2 = 2 * L, N = F2 * KK_UPSAMPLE, F = N / KK_HOP + 1;
    float *har = work, *phase_frames = work + N; /* [N], [2L, 9] */
    source_phases(f0, F2, phase_frames);
    source_job j = {.f0 = f0, .noise = noise, .phase_frames = phase_frames, .F2 = F2,
                    .bl = m->l_linear.b[0], .har = har, .x = har, .N = N, .F = F, .S = S};
    choir_weight_row_f32(&m->l_linear.w, 0, j.wl);
    /* in chunks on the default pool (inline when it is busy, as under a
     * batch, whose pieces already run in parallel) */
    choir_pool *pool = choir_pool_default();
    choir_pool_parallel_for(pool, (N + KK_SOURCE_CHUNK - 1) / KK_SOURCE_CHUNK, 1, harmonic_range, &j);
    choir_pool_parallel_for(pool, (F + KK_SOURCE_CHUNK - 1) / KK_SOURCE_CHUNK, 1, stft_range, &j);
}
