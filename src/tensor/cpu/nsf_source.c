/* The harmonic-plus-noise source of an NSF / iSTFTNet generator and its
 * STFT (choir/kernels.h, choir_nsf_source_stft): the CPU twin of the CUDA
 * kernels in cuda_nsf.cu and the oracle they are checked against.
 *
 * The source's phase is a long running sum that reaches ~1e5 rad, where one
 * float32 ulp is ~0.01 rad; the reference's float32 operations are therefore
 * reproduced one by one (same order, same rounding, the same fused
 * multiply-add) rather than computed more accurately, which would not match
 * (Kokoro's PyTorch reference, docs/kokoro.md "Parity"). Its transcendental
 * functions (sin, tanh, atan2) are taken in double and rounded once, which
 * gives the correctly rounded float but in rare cases, on any libm and on
 * the GPU alike (libm's float sinf / tanhf / atan2f are off by an ulp in a
 * fair share of values, and the GPU kernels must give the same floats as
 * this twin: an H100 run of 6 Dec 2026 with sinf / tanhf matched 78% of
 * the spectrum bit for bit and moved the audio 2.4e-2). The STFT is small
 * (n_fft 20, hop 5 for Kokoro) and is written out as direct DFTs. */
#include <math.h>
#include <string.h>

#include "choir/kernels.h"
#include "choir/pool.h"

#define NSF_GOLDEN 0x9E3779B97F4A7C15ULL

/* splitmix64: the state advances by the golden constant, then is mixed */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += NSF_GOLDEN);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void choir_gaussian_stream(float *x, int64_t first, int64_t n, uint64_t seed) {
    const int64_t end = first + n;
    /* the state before the pair holding value `first` */
    uint64_t s = seed + (uint64_t)(first & ~(int64_t)1) * NSF_GOLDEN;
    for (int64_t i = first; i < end;) {
        double u1 = ((double)(splitmix64(&s) >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
        double u2 = (double)(splitmix64(&s) >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1)), a = 2.0 * M_PI * u2;
        if (!(i & 1)) x[i++ - first] = (float)(r * cos(a));
        if (i < end) x[i++ - first] = (float)(r * sin(a));
    }
}

int64_t choir_nsf_source_work_floats(const choir_nsf_source *p, int64_t n_f0) {
    return n_f0 * p->upsample + n_f0 * p->harmonics;
}

/* The F0-rate part: phase_frames[n_f0, H] (the running sum: sequential).
 * Increments are frac(f0 h / sr) (the reference's down-sampling
 * interpolation reads two equal samples), cumulated in double and rounded to
 * float per step, as torch's CPU cumsum does. */
static void source_phases(const choir_nsf_source *p, const float *f0, int64_t n_f0,
                          float *phase_frames) {
    const int H = p->harmonics;
    double cum[CHOIR_NSF_MAX_HARMONICS] = {0};
    const float pi_f = (float)M_PI, up = (float)p->upsample;
    for (int64_t j = 0; j < n_f0; j++) {
        for (int h = 0; h < H; h++) {
            float r = f0[j] * (float)(h + 1) / p->sample_rate;
            float rad = r - floorf(r);
            cum[h] += (double)rad;
            float ph = (float)cum[h] * 2.0f * pi_f;
            phase_frames[j * H + h] = ph * up;
        }
    }
}

typedef struct source_job {
    const choir_nsf_source *p;
    const float *f0, *noise, *phase_frames;
    const uint64_t *seed;
    int64_t n_f0, N, F, ld;
    float *har, *S;
} source_job;

#define NSF_CHUNK 8192 /* samples, or STFT frames, per task */
#define NSF_BLOCK 256  /* samples whose seeded draws are made at once */

/* The sample-rate part for the samples of chunks [c0, c1): each sample on
 * its own, so any split gives the same values. */
static void harmonic_range(void *ctx, int64_t c0, int64_t c1, int worker) {
    (void)worker;
    const source_job *j = ctx;
    const choir_nsf_source *p = j->p;
    const float *f0 = j->f0, *phase_frames = j->phase_frames, *wl = p->lin_w;
    const int H = p->harmonics;
    const int64_t n_f0 = j->n_f0, N = j->N, up = p->upsample;
    const float scale = (float)(1.0 / (double)up), bl = p->lin_b;
    float *har = j->har;
    float drawn[NSF_BLOCK * CHOIR_NSF_MAX_HARMONICS];
    int64_t t_end = c1 * NSF_CHUNK < N ? c1 * NSF_CHUNK : N;
    for (int64_t tb = c0 * NSF_CHUNK; tb < t_end; tb += NSF_BLOCK) {
        int64_t tb_end = tb + NSF_BLOCK < t_end ? tb + NSF_BLOCK : t_end;
        const float *noise = NULL;
        if (j->noise) {
            noise = j->noise + tb * H;
        } else if (j->seed) {
            choir_gaussian_stream(drawn, tb * H, (tb_end - tb) * H, *j->seed);
            noise = drawn;
        }
        /* linear interpolation x upsample, align_corners=False (torch upsample_linear1d) */
        for (int64_t t = tb; t < tb_end; t++) {
            float src = scale * ((float)t + 0.5f) - 0.5f;
            if (src < 0) src = 0;
            int64_t i0 = (int64_t)floorf(src);
            if (i0 > n_f0 - 1) i0 = n_f0 - 1;
            float l1 = src - (float)i0;
            if (l1 < 0) l1 = 0;
            if (l1 > 1) l1 = 1;
            float l0 = 1.0f - l1;
            int64_t i1 = i0 + (i0 < n_f0 - 1 ? 1 : 0);
            float f0u = f0[t / up];
            float uv = f0u > p->voiced_threshold ? 1.0f : 0.0f;
            float noise_amp = uv * p->voiced_noise + (1.0f - uv) * p->unvoiced_noise;
            float acc = 0;
            for (int h = 0; h < H; h++) {
                /* torch's CPU kernel computes t0 * w0 + t1 * w1 contracted to one
                 * fused multiply-add; the rounding differs at these magnitudes */
                float ph = fmaf(l0, phase_frames[i0 * H + h], l1 * phase_frames[i1 * H + h]);
                /* sin, tanh and atan2 in double, rounded once: what the CUDA
                 * kernels compute too (libm's float versions are not
                 * correctly rounded, so an ulp here and there would differ, and
                 * at these phases one ulp of the source moves the audio) */
                float sine = (float)sin((double)ph) * p->sine_amp;
                float e = sine * uv;
                if (noise) e += noise_amp * noise[(t - tb) * H + h];
                acc += wl[h] * e;
            }
            har[t] = (float)tanh((double)(acc + bl));
        }
    }
}

/* cos/sin(2 pi m / n_fft) with exact zeros and ones at the quarter points,
 * so that the DC and Nyquist bins get exactly zero imaginary parts (as an
 * FFT does; atan2 of their sign would otherwise flip between +pi and -pi). */
static void dft_tables(int n_fft, double *cs, double *sn) {
    for (int m = 0; m < n_fft; m++) {
        if (m == 0)
            cs[m] = 1, sn[m] = 0;
        else if (4 * m == n_fft)
            cs[m] = 0, sn[m] = 1;
        else if (2 * m == n_fft)
            cs[m] = -1, sn[m] = 0;
        else if (4 * m == 3 * n_fft)
            cs[m] = 0, sn[m] = -1;
        else
            cs[m] = cos(2.0 * M_PI * m / n_fft), sn[m] = sin(2.0 * M_PI * m / n_fft);
    }
}

/* torch.stft(center, reflect, periodic Hann) of har[N] -> S[n_fft + 2, ld]:
 * magnitudes, then phases, for the frames of chunks [c0, c1). */
static void stft_range(void *ctx, int64_t c0, int64_t c1, int worker) {
    (void)worker;
    const source_job *j = ctx;
    const int n_fft = j->p->n_fft, hop = j->p->hop, nb = n_fft / 2 + 1;
    const float *x = j->har;
    const int64_t N = j->N, F = j->F, ld = j->ld;
    float *S = j->S;
    double cs[CHOIR_NSF_MAX_NFFT], sn[CHOIR_NSF_MAX_NFFT];
    float w[CHOIR_NSF_MAX_NFFT];
    dft_tables(n_fft, cs, sn);
    for (int n = 0; n < n_fft; n++) w[n] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * n / n_fft));
    const int pad = n_fft / 2;
    int64_t f_end = c1 * NSF_CHUNK < F ? c1 * NSF_CHUNK : F;
    for (int64_t f = c0 * NSF_CHUNK; f < f_end; f++) {
        double seg[CHOIR_NSF_MAX_NFFT];
        for (int n = 0; n < n_fft; n++) {
            int64_t i = f * hop + n - pad; /* reflect without repeating the edge */
            if (i < 0) i = -i;
            if (i >= N) i = 2 * (N - 1) - i;
            seg[n] = (double)(x[i] * w[n]);
        }
        for (int k = 0; k < nb; k++) {
            double re = 0, im = 0;
            for (int n = 0; n < n_fft; n++) {
                int idx = (k * n) % n_fft;
                re += seg[n] * cs[idx];
                im -= seg[n] * sn[idx];
            }
            if (k == 0 || k == nb - 1) im = 0;
            float fr = (float)re, fi = (float)im;
            S[k * ld + f] = hypotf(fr, fi);
            S[(nb + k) * ld + f] = (float)atan2((double)fi, (double)fr);
        }
    }
}

void choir_nsf_source_stft(const choir_nsf_source *p, const float *f0, int64_t n_f0,
                           const float *noise, const uint64_t *seed, float *S, int64_t ld,
                           float *work) {
    const int64_t N = n_f0 * p->upsample, F = N / p->hop + 1;
    float *har = work, *phase_frames = work + N; /* [N], [n_f0, H] */
    source_phases(p, f0, n_f0, phase_frames);
    source_job j = {.p = p, .f0 = f0, .noise = noise, .phase_frames = phase_frames, .seed = seed,
                    .n_f0 = n_f0, .N = N, .F = F, .ld = ld, .har = har, .S = S};
    /* in chunks on the default pool (inline when it is busy, as under a
     * batch, whose pieces already run in parallel) */
    choir_pool *pool = choir_pool_default();
    choir_pool_parallel_for(pool, (N + NSF_CHUNK - 1) / NSF_CHUNK, 1, harmonic_range, &j);
    choir_pool_parallel_for(pool, (F + NSF_CHUNK - 1) / NSF_CHUNK, 1, stft_range, &j);
}
