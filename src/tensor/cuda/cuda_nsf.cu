/* The harmonic-plus-noise source of an NSF / iSTFTNet generator and its STFT
 * on the device (choir_cuda_nsf_source_stft in choir/cuda_audio.h). The CPU
 * twin, src/tensor/cpu/nsf_source.c, is the oracle: every float32 operation
 * here is written with an explicit rounding intrinsic in the CPU's order, so
 * that nvcc does not contract a multiply and an add into a fused
 * multiply-add the CPU does not make (the phase reaches ~1e5 rad, where one
 * float32 ulp is ~0.01 rad). The transcendental functions (sin, tanh,
 * atan2, and hypot as a square root) are computed in double and rounded
 * once, as the CPU twin does, and the draws' log, sin and cos in double as
 * the CPU does: the results equal the CPU's but where libm's double
 * function and CUDA's differ by enough to round to another float (rare). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "choir/cuda_audio.h"
#include "tensor/cuda/cuda_internal.h"

#define NSF_THREADS 256
#define NSF_GROUP 32 /* items per launch (their seeds travel in the arguments) */
#define NSF_GOLDEN 0x9E3779B97F4A7C15ULL

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* The kernels' parameters, by value: the source's, the STFT's tables (made
 * on the host, as the CPU's), and the group's seeds. */
struct nsf_args {
    float lin_w[CHOIR_NSF_MAX_HARMONICS];
    float lin_b, sample_rate, sine_amp, voiced_noise, unvoiced_noise, voiced_threshold, scale;
    int H, up, n_fft, hop;
    double cs[CHOIR_NSF_MAX_NFFT], sn[CHOIR_NSF_MAX_NFFT];
    float win[CHOIR_NSF_MAX_NFFT];
    unsigned long long seeds[NSF_GROUP];
    unsigned noisy; /* bit b: item b of the group has draws */
};

static __device__ __forceinline__ int64_t item_len(const int32_t *lens, int64_t b, int64_t T) {
    int64_t n = lens ? (int64_t)lens[b] : T;
    return n < 0 ? 0 : (n > T ? T : n);
}

/* Phase sums: one warp per item, harmonic h on lane h; lane l loads F0
 * value j0 + l of each run of 32 and the warp walks the run in order. */
__global__ void k_nsf_phases(const float *__restrict__ f0, int64_t T, const int32_t *lens,
                             nsf_args a, float *__restrict__ pf) {
    const int64_t b = blockIdx.x;
    const int lane = threadIdx.x, H = a.H;
    const int64_t Tb = item_len(lens, b, T);
    const float pi_f = (float)M_PI, up = (float)a.up, hf = (float)(lane + 1);
    double cum = 0.0;
    for (int64_t j0 = 0; j0 < Tb; j0 += 32) {
        float fv = j0 + lane < Tb ? f0[b * T + j0 + lane] : 0.0f;
        const int run = Tb - j0 < 32 ? (int)(Tb - j0) : 32;
        for (int jj = 0; jj < run; jj++) {
            float fj = __shfl_sync(0xffffffffu, fv, jj);
            if (lane < H) {
                float r = __fdiv_rn(__fmul_rn(fj, hf), a.sample_rate);
                float rad = __fsub_rn(r, floorf(r));
                cum = __dadd_rn(cum, (double)rad);
                float ph = __fmul_rn(__fmul_rn(__double2float_rn(cum), 2.0f), pi_f);
                pf[(b * T + j0 + jj) * H + lane] = __fmul_rn(ph, up);
            }
        }
    }
}

static __device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Pair `pair` of the seeded stream (choir_gaussian_stream): r cos a, r sin a. */
static __device__ void gauss_pair(uint64_t seed, int64_t pair, double *c, double *s) {
    uint64_t st = seed + (uint64_t)(2 * pair) * NSF_GOLDEN;
    double u1 = __ddiv_rn(__dadd_rn((double)(mix64(st + NSF_GOLDEN) >> 11), 1.0),
                          9007199254740993.0);
    double u2 = __ddiv_rn((double)(mix64(st + 2 * NSF_GOLDEN) >> 11), 9007199254740992.0);
    double r = __dsqrt_rn(__dmul_rn(-2.0, log(u1))), ang = __dmul_rn(2.0 * M_PI, u2);
    double sv, cv;
    sincos(ang, &sv, &cv);
    *c = __dmul_rn(r, cv);
    *s = __dmul_rn(r, sv);
}

/* The source: a thread per sample of every item of the group. */
__global__ void k_nsf_source(const float *__restrict__ f0, int64_t T, const int32_t *lens,
                             nsf_args a, const float *__restrict__ pf, int64_t n_items,
                             float *__restrict__ har) {
    const int H = a.H;
    const int64_t N = (int64_t)a.up * T;
    GRID_STRIDE(i, n_items * N) {
        const int64_t b = i / N, t = i % N, Tb = item_len(lens, b, T);
        if (t >= (int64_t)a.up * Tb) {
            har[i] = 0.0f;
            continue;
        }
        float src = __fsub_rn(__fmul_rn(a.scale, __fadd_rn((float)t, 0.5f)), 0.5f);
        if (src < 0) src = 0;
        int64_t i0 = (int64_t)floorf(src);
        if (i0 > Tb - 1) i0 = Tb - 1;
        float l1 = __fsub_rn(src, (float)i0);
        if (l1 < 0) l1 = 0;
        if (l1 > 1) l1 = 1;
        const float l0 = __fsub_rn(1.0f, l1);
        const int64_t i1 = i0 + (i0 < Tb - 1 ? 1 : 0);
        const float f0u = f0[b * T + t / a.up];
        const float uv = f0u > a.voiced_threshold ? 1.0f : 0.0f;
        const float noise_amp = __fadd_rn(__fmul_rn(uv, a.voiced_noise),
                                          __fmul_rn(__fsub_rn(1.0f, uv), a.unvoiced_noise));
        const bool drawn = (a.noisy >> b) & 1u;
        const float *p0 = pf + (b * T + i0) * H, *p1 = pf + (b * T + i1) * H;
        int64_t have = -1;
        double gc = 0, gs = 0;
        float acc = 0.0f;
        for (int h = 0; h < H; h++) {
            float ph = __fmaf_rn(l0, p0[h], __fmul_rn(l1, p1[h]));
            float sine = __fmul_rn(__double2float_rn(sin((double)ph)), a.sine_amp);
            float e = __fmul_rn(sine, uv);
            if (drawn) {
                const int64_t k = t * H + h;
                if ((k >> 1) != have) {
                    have = k >> 1;
                    gauss_pair(a.seeds[b], have, &gc, &gs);
                }
                float z = __double2float_rn((k & 1) ? gs : gc);
                e = __fadd_rn(e, __fmul_rn(noise_amp, z));
            }
            acc = __fadd_rn(acc, __fmul_rn(a.lin_w[h], e));
        }
        har[i] = __double2float_rn(tanh((double)__fadd_rn(acc, a.lin_b)));
    }
}

/* The STFT: a thread per frame of every item of the group; S [n, nb2, F]. */
__global__ void k_nsf_stft(const float *__restrict__ har, int64_t T, const int32_t *lens,
                           nsf_args a, int64_t n_items, int64_t F, float *__restrict__ S) {
    const int n_fft = a.n_fft, nb = n_fft / 2 + 1, pad = n_fft / 2;
    const int64_t N = (int64_t)a.up * T;
    GRID_STRIDE(i, n_items * F) {
        const int64_t b = i / F, f = i % F, Tb = item_len(lens, b, T);
        const int64_t Nb = (int64_t)a.up * Tb, Fb = Tb ? Nb / a.hop + 1 : 0;
        float *Sb = S + b * 2 * nb * F + f;
        if (f >= Fb) {
            for (int k = 0; k < 2 * nb; k++) Sb[k * F] = 0.0f;
            continue;
        }
        const float *x = har + b * N;
        double seg[CHOIR_NSF_MAX_NFFT];
        for (int n = 0; n < n_fft; n++) {
            int64_t j = f * a.hop + n - pad; /* reflect without repeating the edge */
            if (j < 0) j = -j;
            if (j >= Nb) j = 2 * (Nb - 1) - j;
            seg[n] = (double)__fmul_rn(x[j], a.win[n]);
        }
        for (int k = 0; k < nb; k++) {
            double re = 0, im = 0;
            for (int n = 0; n < n_fft; n++) {
                int idx = (k * n) % n_fft;
                re = __dadd_rn(re, __dmul_rn(seg[n], a.cs[idx]));
                im = __dsub_rn(im, __dmul_rn(seg[n], a.sn[idx]));
            }
            if (k == 0 || k == nb - 1) im = 0;
            const float fr = __double2float_rn(re), fi = __double2float_rn(im);
            const double dr = fr, di = fi;
            Sb[k * F] = __double2float_rn(__dsqrt_rn(__dadd_rn(__dmul_rn(dr, dr), __dmul_rn(di, di))));
            Sb[(nb + k) * F] = __double2float_rn(atan2(di, dr));
        }
    }
}

int choir_cuda_nsf_source_stft(choir_cuda *cu, const float *f0, int64_t B, int64_t T,
                               const int32_t *lens, const choir_nsf_source *p,
                               const uint64_t *seeds, const bool *noisy, float *work, float *S,
                               choir_err *err) {
    if (B < 0 || T < 1 || !p || p->harmonics < 1 || p->harmonics > CHOIR_NSF_MAX_HARMONICS ||
        p->n_fft < 2 || p->n_fft > CHOIR_NSF_MAX_NFFT || (p->n_fft & 1) || p->hop < 1 ||
        p->upsample < p->hop || p->upsample % p->hop)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: nsf source: bad parameters or %lld x %lld",
                             (long long)B, (long long)T);
    nsf_args a;
    memset(&a, 0, sizeof a);
    for (int h = 0; h < p->harmonics; h++) a.lin_w[h] = p->lin_w[h];
    a.lin_b = p->lin_b, a.sample_rate = p->sample_rate, a.sine_amp = p->sine_amp;
    a.voiced_noise = p->voiced_noise, a.unvoiced_noise = p->unvoiced_noise;
    a.voiced_threshold = p->voiced_threshold, a.scale = (float)(1.0 / (double)p->upsample);
    a.H = p->harmonics, a.up = p->upsample, a.n_fft = p->n_fft, a.hop = p->hop;
    /* the CPU's tables (nsf_source.c: dft_tables and the periodic Hann) */
    const int nf = p->n_fft;
    for (int m = 0; m < nf; m++) {
        if (m == 0)
            a.cs[m] = 1, a.sn[m] = 0;
        else if (4 * m == nf)
            a.cs[m] = 0, a.sn[m] = 1;
        else if (2 * m == nf)
            a.cs[m] = -1, a.sn[m] = 0;
        else if (4 * m == 3 * nf)
            a.cs[m] = 0, a.sn[m] = -1;
        else
            a.cs[m] = cos(2.0 * M_PI * m / nf), a.sn[m] = sin(2.0 * M_PI * m / nf);
        a.win[m] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * m / nf));
    }
    const int64_t N = (int64_t)p->upsample * T, F = N / p->hop + 1, rows = nf + 2;
    float *har = work, *pf = work + B * N; /* [B, N], [B, T, H] */
    for (int64_t g0 = 0; g0 < B; g0 += NSF_GROUP) {
        const int64_t n = B - g0 < NSF_GROUP ? B - g0 : NSF_GROUP;
        a.noisy = 0;
        for (int64_t b = 0; b < n; b++) {
            bool on = seeds && (!noisy || noisy[g0 + b]);
            a.seeds[b] = on ? (unsigned long long)seeds[g0 + b] : 0ULL;
            if (on) a.noisy |= 1u << b;
        }
        const float *fg = f0 + g0 * T;
        const int32_t *lg = lens ? lens + g0 : NULL;
        float *hg = har + g0 * N, *pg = pf + g0 * T * p->harmonics;
        k_nsf_phases<<<(unsigned)n, 32, 0, cu->stream>>>(fg, T, lg, a, pg);
        k_nsf_source<<<choir_cuda_blocks(n * N, NSF_THREADS), NSF_THREADS, 0, cu->stream>>>(
            fg, T, lg, a, pg, n, hg);
        k_nsf_stft<<<choir_cuda_blocks(n * F, NSF_THREADS), NSF_THREADS, 0, cu->stream>>>(
            hg, T, lg, a, n, F, S + g0 * rows * F);
    }
    return choir_cuda_check_launch(err, "nsf source");
}
