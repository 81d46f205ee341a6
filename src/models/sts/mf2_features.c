/* MossFormer2 front end: Kaldi log-mel fbank + deltas (spec §4), and the
 * STFT -> mask -> iSTFT resynthesis (spec §5).
 *
 * The fbank frames are prepared by hand (dither, DC removal, pre-emphasis,
 * Hamming, zero-padding to 2048), then each goes through a 2048-point STFT
 * plan with a rectangular window as a one-frame signal. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "mf2_internal.h"

#define FBANK_BLOCK 32 /* frames transformed per STFT call */

static double mel_of(double hz) { return 1127.0 * log(1.0 + hz / 700.0); }

int mf2_frontend_init(choir_mf2 *m, choir_err *err) {
    m->mel = choir_calloc(CHOIR_MEM_CACHE, (size_t)CHOIR_MF2_MELS * MF2_FBANK_BINS, sizeof(float));
    m->fbank_window = choir_alloc(CHOIR_MEM_CACHE, CHOIR_MF2_WIN * sizeof(float));
    if (!m->mel || !m->fbank_window)
        return choir_err_set(err, CHOIR_ENOMEM, "mossformer2: out of memory for the front end");
    for (int j = 0; j < CHOIR_MF2_WIN; j++)
        m->fbank_window[j] = (float)(0.54 - 0.46 * cos(2.0 * M_PI * j / (CHOIR_MF2_WIN - 1)));
    /* Kaldi's triangles on the HTK mel scale between 20 Hz and Nyquist; the
     * Nyquist bin (1024) keeps weight 0 as in torchaudio. */
    const double lo = mel_of(20.0), hi = mel_of(CHOIR_MF2_RATE / 2.0);
    const double delta = (hi - lo) / (CHOIR_MF2_MELS + 1);
    for (int b = 0; b < CHOIR_MF2_MELS; b++) {
        double l = lo + b * delta, c = lo + (b + 1) * delta, r = lo + (b + 2) * delta;
        for (int k = 0; k < MF2_FBANK_FFT / 2; k++) {
            double mu = mel_of(k * ((double)CHOIR_MF2_RATE / MF2_FBANK_FFT));
            double up = (mu - l) / (c - l), down = (r - mu) / (r - c);
            double w = up < down ? up : down;
            m->mel[(size_t)b * MF2_FBANK_BINS + k] = w > 0 ? (float)w : 0.0f;
        }
    }
    m->fbank_plan = choir_stft_plan_create(MF2_FBANK_FFT, MF2_FBANK_FFT, MF2_FBANK_FFT, CHOIR_WINDOW_RECT,
                                           NULL, 0, err);
    if (!m->fbank_plan) return err ? err->code : CHOIR_ENOMEM;
    m->stft_plan = choir_stft_plan_create(CHOIR_MF2_WIN, CHOIR_MF2_HOP, CHOIR_MF2_WIN,
                                          CHOIR_WINDOW_HAMMING_SYMMETRIC, NULL, 0, err);
    if (!m->stft_plan) return err ? err->code : CHOIR_ENOMEM;
    return 0;
}

void mf2_frontend_free(choir_mf2 *m) {
    choir_free(m->mel);
    choir_free(m->fbank_window);
    choir_stft_plan_free(m->fbank_plan);
    choir_stft_plan_free(m->stft_plan);
    m->mel = m->fbank_window = NULL;
    m->fbank_plan = m->stft_plan = NULL;
}

int64_t choir_mf2_frames(int64_t samples) {
    return samples < CHOIR_MF2_WIN ? 0 : 1 + (samples - CHOIR_MF2_WIN) / CHOIR_MF2_HOP;
}

/* Standard normal deviates from a seeded splitmix64 (Box-Muller): the
 * engine's own dither, which cannot and need not match torch.randn. */
typedef struct gauss {
    uint64_t state;
    int have;
    double spare;
} gauss;

static double gauss_uniform(gauss *g) {
    uint64_t z = (g->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
}

static double gauss_next(gauss *g) {
    if (g->have) {
        g->have = 0;
        return g->spare;
    }
    double u1 = gauss_uniform(g), u2 = gauss_uniform(g);
    double r = sqrt(-2.0 * log(u1));
    g->spare = r * sin(2.0 * M_PI * u2);
    g->have = 1;
    return r * cos(2.0 * M_PI * u2);
}

/* The spectrum [n_bins][1][2] of the one frame at x. choir_stft is called a
 * frame at a time because its multi-frame path hands FFTW an output that is
 * only 8-byte aligned for odd frames when n_bins is odd, which crashes FFTW's
 * SIMD codelets (reported to the audio owner); one frame lands at offset 0.
 * Each call still allocates the STFT's 256-frame staging block (counted,
 * outside the arena: mf2_outside_bytes). */
static int one_frame(const choir_stft_plan *p, const float *x, float *spec, choir_err *err) {
    return choir_stft(p, x, choir_stft_n_fft(p), spec, err);
}

/* Kaldi deltas along time, window 5, edges replicated: d[t] = (2 (c[t+2] -
 * c[t-2]) + (c[t+1] - c[t-1])) / 10. src and dst are columns of a [T, stride]
 * matrix. */
static void deltas(const float *src, float *dst, int64_t T, int64_t stride, int cols) {
    for (int64_t t = 0; t < T; t++) {
        int64_t m1 = t - 1 < 0 ? 0 : t - 1, m2 = t - 2 < 0 ? 0 : t - 2;
        int64_t p1 = t + 1 > T - 1 ? T - 1 : t + 1, p2 = t + 2 > T - 1 ? T - 1 : t + 2;
        for (int c = 0; c < cols; c++) {
            float a = src[p2 * stride + c] - src[m2 * stride + c];
            float b = src[p1 * stride + c] - src[m1 * stride + c];
            dst[t * stride + c] = (2.0f * a + b) / 10.0f;
        }
    }
}

int64_t mf2_features_bytes(void) {
    return (int64_t)sizeof(float) * ((int64_t)FBANK_BLOCK * MF2_FBANK_FFT + MF2_FBANK_BINS * 3) + 3 * CHOIR_ALIGN;
}

int choir_mf2_features(const choir_mf2 *m, const float *x, int64_t n, float dither, uint64_t seed,
                       float *fbank, float *features, choir_err *err) {
    choir_arena *work = choir_arena_create((size_t)mf2_features_bytes(), CHOIR_MEM_ACTIVATIONS, err);
    if (!work) return CHOIR_ENOMEM;
    int rc = mf2_features_in(m, x, n, dither, seed, fbank, features, work, err);
    choir_arena_free(work);
    return rc;
}

int mf2_features_in(const choir_mf2 *m, const float *x, int64_t n, float dither, uint64_t seed, float *fbank,
                    float *features, choir_arena *work, choir_err *err) {
    const int64_t T = choir_mf2_frames(n);
    if (T < 1)
        return choir_err_set(err, CHOIR_EINVAL, "mossformer2: %lld samples is shorter than one frame (%d)",
                             (long long)n, CHOIR_MF2_WIN);
    size_t mark = choir_arena_mark(work);
    float *frames = choir_arena_alloc(work, (size_t)FBANK_BLOCK * MF2_FBANK_FFT * sizeof(float));
    float *spec = choir_arena_alloc(work, (size_t)MF2_FBANK_BINS * 2 * sizeof(float));
    float *power = choir_arena_alloc(work, MF2_FBANK_BINS * sizeof(float));
    int rc = 0;
    if (!frames || !spec || !power) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "mossformer2: the working memory has no room for features");
        goto done;
    }
    gauss g = {.state = seed};
    const float eps = 1.1920928955078125e-07f;
    for (int64_t t0 = 0; t0 < T; t0 += FBANK_BLOCK) {
        int nb = (int)(T - t0 < FBANK_BLOCK ? T - t0 : FBANK_BLOCK);
        for (int b = 0; b < nb; b++) {
            const float *src = x + (t0 + b) * CHOIR_MF2_HOP;
            float *w = frames + (size_t)b * MF2_FBANK_FFT;
            double mean = 0;
            for (int j = 0; j < CHOIR_MF2_WIN; j++) {
                w[j] = src[j] * 32768.0f;
                if (dither != 0.0f) w[j] += dither * (float)gauss_next(&g);
                mean += w[j];
            }
            float mu = (float)(mean / CHOIR_MF2_WIN);
            for (int j = 0; j < CHOIR_MF2_WIN; j++) w[j] -= mu;
            /* Pre-emphasis backwards so each step reads the unmodified
             * previous sample; sample 0 sees itself (replicate padding). */
            for (int j = CHOIR_MF2_WIN - 1; j > 0; j--) w[j] -= 0.97f * w[j - 1];
            w[0] -= 0.97f * w[0];
            for (int j = 0; j < CHOIR_MF2_WIN; j++) w[j] *= m->fbank_window[j];
            memset(w + CHOIR_MF2_WIN, 0, (MF2_FBANK_FFT - CHOIR_MF2_WIN) * sizeof(float));
        }
        for (int b = 0; b < nb; b++) {
            rc = one_frame(m->fbank_plan, frames + (size_t)b * MF2_FBANK_FFT, spec, err);
            if (rc < 0) goto done;
            for (int k = 0; k < MF2_FBANK_BINS; k++) {
                float re = spec[(size_t)k * 2], im = spec[(size_t)k * 2 + 1];
                power[k] = re * re + im * im;
            }
            float *row = features + (t0 + b) * CHOIR_MF2_FEATS;
            for (int mb = 0; mb < CHOIR_MF2_MELS; mb++) {
                const float *wts = m->mel + (size_t)mb * MF2_FBANK_BINS;
                float e = 0.0f;
                for (int k = 0; k < MF2_FBANK_BINS; k++) e += wts[k] * power[k];
                row[mb] = logf(e > eps ? e : eps);
            }
        }
    }
    deltas(features, features + CHOIR_MF2_MELS, T, CHOIR_MF2_FEATS, CHOIR_MF2_MELS);
    deltas(features + CHOIR_MF2_MELS, features + 2 * CHOIR_MF2_MELS, T, CHOIR_MF2_FEATS, CHOIR_MF2_MELS);
    if (fbank)
        for (int64_t t = 0; t < T; t++)
            memcpy(fbank + t * CHOIR_MF2_MELS, features + t * CHOIR_MF2_FEATS, CHOIR_MF2_MELS * sizeof(float));
done:
    choir_arena_release(work, mark);
    return rc;
}

int64_t mf2_apply_bytes(int64_t samples, int64_t T) {
    return (int64_t)sizeof(float) * (samples + CHOIR_MF2_BINS * T * 2 + CHOIR_MF2_BINS * 2) + 3 * CHOIR_ALIGN;
}

int choir_mf2_apply_mask(const choir_mf2 *m, const float *x, int64_t n, const float *mask, int64_t T,
                         float *y, choir_err *err) {
    if (T != choir_mf2_frames(n) || T < 1)
        return choir_err_set(err, CHOIR_EINVAL, "mossformer2: mask has %lld frames, audio of %lld samples has %lld",
                             (long long)T, (long long)n, (long long)choir_mf2_frames(n));
    choir_arena *work = choir_arena_create((size_t)mf2_apply_bytes(n, T), CHOIR_MEM_ACTIVATIONS, err);
    if (!work) return CHOIR_ENOMEM;
    int rc = mf2_apply_mask_in(m, x, n, mask, T, y, work, err);
    choir_arena_free(work);
    return rc;
}

int mf2_apply_mask_in(const choir_mf2 *m, const float *x, int64_t n, const float *mask, int64_t T, float *y,
                      choir_arena *work, choir_err *err) {
    if (T != choir_mf2_frames(n) || T < 1)
        return choir_err_set(err, CHOIR_EINVAL, "mossformer2: mask has %lld frames, audio of %lld samples has %lld",
                             (long long)T, (long long)n, (long long)choir_mf2_frames(n));
    const int64_t K = CHOIR_MF2_BINS;
    size_t mark = choir_arena_mark(work);
    float *s = choir_arena_alloc(work, (size_t)n * sizeof(float));
    float *spec = choir_arena_alloc(work, (size_t)(K * T * 2) * sizeof(float));
    float *frame = choir_arena_alloc(work, (size_t)(K * 2) * sizeof(float));
    int rc = 0;
    if (!s || !spec || !frame) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "mossformer2: the working memory has no room for the STFT");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) s[i] = x[i] * 32768.0f;
    /* The mask is a real gain per bin: both parts scale, phase is kept. */
    for (int64_t t = 0; t < T; t++) {
        rc = one_frame(m->stft_plan, s + t * CHOIR_MF2_HOP, frame, err);
        if (rc < 0) goto done;
        for (int64_t k = 0; k < K; k++) {
            float g = mask[t * K + k];
            spec[(k * T + t) * 2] = frame[k * 2] * g;
            spec[(k * T + t) * 2 + 1] = frame[k * 2 + 1] * g;
        }
    }
    rc = choir_istft(m->stft_plan, spec, T, n, s, err);
    if (rc < 0) goto done;
    for (int64_t i = 0; i < n; i++) y[i] = s[i] / 32768.0f;
done:
    choir_arena_release(work, mark);
    return rc;
}
