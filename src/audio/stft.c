/* STFT / iSTFT with torch semantics over FFTW (single precision).
 *
 * Plans are made once per (n_fft, window, hop) and executed with FFTW's
 * new-array functions on scratch buffers from choir_alloc. Those are always
 * CHOIR_ALIGN-aligned, the same alignment as the arrays the plan was made on,
 * which is what FFTW requires of new-array execution; so one plan serves any
 * number of threads at once. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include <fftw3.h>

#include "audio/stft_internal.h"
#include "choir/alloc.h"
#include "choir/stft.h"

/* FFTW's planner keeps global state; every plan creation and destruction in
 * the process goes through this lock. */
static pthread_mutex_t planner_lock = PTHREAD_MUTEX_INITIALIZER;

struct choir_stft_plan {
    int n_fft, n_bins, hop, win_length, center;
    float *window;         /* [n_fft], zero-padded */
    fftwf_plan forward;    /* r2c n_fft, out of place */
    fftwf_plan inverse;    /* c2r n_fft, out of place (c2r destroys its input: callers pass a copy) */
};

static void fill_window(float *w, int win_length, choir_window kind, const float *custom) {
    for (int i = 0; i < win_length; i++) {
        double n = i, v;
        double denom_periodic = win_length, denom_sym = win_length > 1 ? win_length - 1 : 1;
        switch (kind) {
        case CHOIR_WINDOW_HANN: v = 0.5 - 0.5 * cos(2.0 * M_PI * n / denom_periodic); break;
        case CHOIR_WINDOW_HAMMING: v = 0.54 - 0.46 * cos(2.0 * M_PI * n / denom_periodic); break;
        case CHOIR_WINDOW_HANN_SYMMETRIC: v = win_length > 1 ? 0.5 - 0.5 * cos(2.0 * M_PI * n / denom_sym) : 1.0; break;
        case CHOIR_WINDOW_HAMMING_SYMMETRIC:
            v = win_length > 1 ? 0.54 - 0.46 * cos(2.0 * M_PI * n / denom_sym) : 1.0;
            break;
        case CHOIR_WINDOW_CUSTOM: v = custom[i]; break;
        default: v = 1.0; break;
        }
        w[i] = (float)v;
    }
}

choir_stft_plan *choir_stft_plan_create(int n_fft, int hop, int win_length, choir_window window,
                                        const float *custom, int center, choir_err *err) {
    float *in = NULL, *spec = NULL;
    if (n_fft < 2 || n_fft > (1 << 24) || hop < 1 || win_length < 1 || win_length > n_fft) {
        choir_err_set(err, CHOIR_EINVAL, "stft: need n_fft >= 2, hop >= 1, 1 <= win_length <= n_fft (got %d, %d, %d)",
                      n_fft, hop, win_length);
        return NULL;
    }
    if ((int)window < 0 || window > CHOIR_WINDOW_CUSTOM || (window == CHOIR_WINDOW_CUSTOM && !custom)) {
        choir_err_set(err, CHOIR_EINVAL, "stft: unknown window %d (or custom window without values)", (int)window);
        return NULL;
    }
    choir_stft_plan *p = choir_calloc(CHOIR_MEM_CACHE, 1, sizeof *p);
    if (!p) goto nomem;
    p->n_fft = n_fft;
    p->n_bins = n_fft / 2 + 1;
    p->hop = hop;
    p->win_length = win_length;
    p->center = center != 0;
    p->window = choir_calloc(CHOIR_MEM_CACHE, (size_t)n_fft, sizeof(float));
    in = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n_fft * sizeof(float));
    spec = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)p->n_bins * 2 * sizeof(float));
    if (!p->window || !in || !spec) goto nomem;
    fill_window(p->window + (n_fft - win_length) / 2, win_length, window, custom);

    /* Plans are executed later on caller buffers (new-array execute) whose frames
     * need not share the planning buffers' alignment: with an odd bin count,
     * every other frame of a [frames][bins] complex array is only 8-byte
     * aligned. FFTW_UNALIGNED keeps the plan from assuming SIMD alignment. */
    pthread_mutex_lock(&planner_lock);
    p->forward = fftwf_plan_dft_r2c_1d(n_fft, in, (fftwf_complex *)spec, FFTW_ESTIMATE | FFTW_UNALIGNED);
    p->inverse = fftwf_plan_dft_c2r_1d(n_fft, (fftwf_complex *)spec, in,
                                       FFTW_ESTIMATE | FFTW_UNALIGNED | FFTW_DESTROY_INPUT);
    pthread_mutex_unlock(&planner_lock);
    choir_free(in);
    choir_free(spec);
    in = spec = NULL;
    if (!p->forward || !p->inverse) {
        choir_err_set(err, CHOIR_EINTERNAL, "stft: FFTW could not plan a %d-point transform", n_fft);
        goto fail;
    }
    return p;
nomem:
    choir_err_set(err, CHOIR_ENOMEM, "stft: out of memory for an n_fft %d plan", n_fft);
fail:
    choir_free(in);
    choir_free(spec);
    choir_stft_plan_free(p);
    return NULL;
}

void choir_stft_plan_free(choir_stft_plan *p) {
    if (!p) return;
    pthread_mutex_lock(&planner_lock);
    if (p->forward) fftwf_destroy_plan(p->forward);
    if (p->inverse) fftwf_destroy_plan(p->inverse);
    pthread_mutex_unlock(&planner_lock);
    choir_free(p->window);
    choir_free(p);
}

int choir_stft_n_fft(const choir_stft_plan *p) { return p->n_fft; }
int choir_stft_n_bins(const choir_stft_plan *p) { return p->n_bins; }
int choir_stft_hop(const choir_stft_plan *p) { return p->hop; }
const float *choir_stft_window(const choir_stft_plan *p) { return p->window; }

int64_t choir_stft_frames(const choir_stft_plan *p, int64_t n_samples) {
    if (n_samples < 0) return 0;
    if (p->center) return 1 + n_samples / p->hop;
    return n_samples < p->n_fft ? 0 : 1 + (n_samples - p->n_fft) / p->hop;
}

/* Sample i of the signal as the frames see it: x beyond [0, n) is the
 * reflection about the end samples (no edge repeat), or zero past n_avail,
 * the caller's zero padding at the end. */
static inline float padded_sample(const float *x, int64_t n_avail, int64_t n, int64_t i) {
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
    return i < n_avail ? x[i] : 0.0f;
}

int choir_stft_frames_block(const choir_stft_plan *p, const float *x, int64_t n_avail, int64_t n, int64_t f0,
                            int64_t count, float *frames_out, choir_err *err) {
    int64_t pad = p->center ? p->n_fft / 2 : 0;
    if (p->center && n <= pad)
        return choir_err_set(err, CHOIR_EINVAL, "stft: %lld samples is too short to reflect-pad by %lld",
                             (long long)n, (long long)pad);
    float *in = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)p->n_fft * sizeof(float));
    if (!in) return choir_err_set(err, CHOIR_ENOMEM, "stft: out of memory");
    for (int64_t f = f0; f < f0 + count; f++) {
        int64_t start = f * p->hop - pad;
        /* Interior frames read straight from x; only the edges need the
         * reflection and zero-padding logic. */
        if (start >= 0 && start + p->n_fft <= n_avail) {
            for (int j = 0; j < p->n_fft; j++) in[j] = p->window[j] * x[start + j];
        } else {
            for (int j = 0; j < p->n_fft; j++) in[j] = p->window[j] * padded_sample(x, n_avail, n, start + j);
        }
        fftwf_execute_dft_r2c(p->forward, in, (fftwf_complex *)(frames_out + (f - f0) * p->n_bins * 2));
    }
    choir_free(in);
    return CHOIR_OK;
}

/* Runs the forward transform in blocks of frames and hands each frame-major
 * block to `emit`, which stores it however its caller wants. */
typedef void (*emit_fn)(const float *block, int64_t f0, int64_t count, int64_t n_frames, int n_bins, void *user);

static int stft_blocks(const choir_stft_plan *p, const float *x, int64_t n, emit_fn emit, void *user, choir_err *err) {
    if (!p || (n > 0 && !x)) return choir_err_set(err, CHOIR_EINVAL, "stft: bad arguments");
    int64_t n_frames = choir_stft_frames(p, n);
    if (n_frames <= 0)
        return choir_err_set(err, CHOIR_EINVAL, "stft: %lld samples give no frame of %d", (long long)n, p->n_fft);
    const int64_t block_frames = 256;
    float *block = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)block_frames * (size_t)p->n_bins * 2 * sizeof(float));
    if (!block) return choir_err_set(err, CHOIR_ENOMEM, "stft: out of memory");
    int rc = CHOIR_OK;
    for (int64_t f0 = 0; f0 < n_frames; f0 += block_frames) {
        int64_t count = n_frames - f0 < block_frames ? n_frames - f0 : block_frames;
        rc = choir_stft_frames_block(p, x, n, n, f0, count, block, err);
        if (rc) break;
        emit(block, f0, count, n_frames, p->n_bins, user);
    }
    choir_free(block);
    return rc;
}

static void emit_complex(const float *block, int64_t f0, int64_t count, int64_t n_frames, int n_bins, void *user) {
    float *spec = user;
    for (int64_t f = 0; f < count; f++)
        for (int k = 0; k < n_bins; k++) {
            float *dst = spec + ((int64_t)k * n_frames + f0 + f) * 2;
            dst[0] = block[(f * n_bins + k) * 2];
            dst[1] = block[(f * n_bins + k) * 2 + 1];
        }
}

typedef struct mag_phase_out {
    float *mag, *phase;
} mag_phase_out;

static void emit_mag_phase(const float *block, int64_t f0, int64_t count, int64_t n_frames, int n_bins, void *user) {
    mag_phase_out *o = user;
    for (int64_t f = 0; f < count; f++)
        for (int k = 0; k < n_bins; k++) {
            float re = block[(f * n_bins + k) * 2], im = block[(f * n_bins + k) * 2 + 1];
            int64_t at = (int64_t)k * n_frames + f0 + f;
            if (o->mag) o->mag[at] = sqrtf(re * re + im * im);
            if (o->phase) o->phase[at] = atan2f(im, re);
        }
}

int choir_stft(const choir_stft_plan *p, const float *x, int64_t n_samples, float *spec, choir_err *err) {
    if (!spec) return choir_err_set(err, CHOIR_EINVAL, "stft: spec is NULL");
    return stft_blocks(p, x, n_samples, emit_complex, spec, err);
}

int choir_stft_mag_phase(const choir_stft_plan *p, const float *x, int64_t n_samples, float *mag, float *phase,
                         choir_err *err) {
    mag_phase_out o = {mag, phase};
    return stft_blocks(p, x, n_samples, emit_mag_phase, &o, err);
}

int64_t choir_istft_length(const choir_stft_plan *p, int64_t n_frames, int64_t length) {
    if (length >= 0) return length;
    if (n_frames <= 0) return 0;
    int64_t full = p->n_fft + p->hop * (n_frames - 1);
    return p->center ? full - 2 * (p->n_fft / 2) : full;
}

/* Spectrum source for the inverse: complex pairs or magnitude/phase. */
typedef struct spec_src {
    const float *spec, *mag, *phase;
} spec_src;

static int istft_impl(const choir_stft_plan *p, const spec_src *src, int64_t n_frames, int64_t length, float *out,
                      choir_err *err) {
    if (!p || !out || n_frames <= 0) return choir_err_set(err, CHOIR_EINVAL, "istft: bad arguments");
    int n_fft = p->n_fft, n_bins = p->n_bins;
    int64_t start = p->center ? n_fft / 2 : 0;
    int64_t full = n_fft + p->hop * (n_frames - 1);
    int64_t out_len = choir_istft_length(p, n_frames, length);
    /* Output sample i is overlap-added sample start + i; only the span up to
     * `covered` has frames under it, the rest (when length asks for more) is 0. */
    int64_t covered = full - start < out_len ? full - start : out_len;
    if (covered < 0) covered = 0;
    int rc = CHOIR_OK;
    float *envelope = choir_calloc(CHOIR_MEM_ACTIVATIONS, (size_t)(covered > 0 ? covered : 1), sizeof(float));
    float *bins = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n_bins * 2 * sizeof(float));
    float *frame = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n_fft * sizeof(float));
    if (!envelope || !bins || !frame) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "istft: out of memory for %lld samples", (long long)out_len);
        goto done;
    }
    memset(out, 0, (size_t)out_len * sizeof(float));
    float inv_n = 1.0f / (float)n_fft;
    for (int64_t f = 0; f < n_frames; f++) {
        int64_t at = f * p->hop - start; /* output index of the frame's first sample */
        if (at >= covered || at + n_fft <= 0) continue;
        for (int k = 0; k < n_bins; k++) {
            int64_t idx = (int64_t)k * n_frames + f;
            if (src->spec) {
                bins[2 * k] = src->spec[idx * 2];
                bins[2 * k + 1] = src->spec[idx * 2 + 1];
            } else {
                bins[2 * k] = src->mag[idx] * cosf(src->phase[idx]);
                bins[2 * k + 1] = src->mag[idx] * sinf(src->phase[idx]);
            }
        }
        fftwf_execute_dft_c2r(p->inverse, (fftwf_complex *)bins, frame);
        for (int j = 0; j < n_fft; j++) {
            int64_t t = at + j;
            if (t < 0 || t >= covered) continue;
            float w = p->window[j];
            out[t] += frame[j] * inv_n * w;
            envelope[t] += w * w;
        }
    }
    for (int64_t t = 0; t < covered; t++) {
        if (envelope[t] < 1e-11f) {
            rc = choir_err_set(err, CHOIR_EINVAL,
                               "istft: window overlap-add is zero at output sample %lld (the window and hop "
                               "fail the NOLA condition)", (long long)t);
            goto done;
        }
        out[t] /= envelope[t];
    }
done:
    choir_free(envelope);
    choir_free(bins);
    choir_free(frame);
    return rc;
}

int choir_istft(const choir_stft_plan *p, const float *spec, int64_t n_frames, int64_t length, float *out,
                choir_err *err) {
    if (!spec) return choir_err_set(err, CHOIR_EINVAL, "istft: spec is NULL");
    spec_src src = {spec, NULL, NULL};
    return istft_impl(p, &src, n_frames, length, out, err);
}

int choir_istft_mag_phase(const choir_stft_plan *p, const float *mag, const float *phase, int64_t n_frames,
                          int64_t length, float *out, choir_err *err) {
    if (!mag || !phase) return choir_err_set(err, CHOIR_EINVAL, "istft: mag or phase is NULL");
    spec_src src = {NULL, mag, phase};
    return istft_impl(p, &src, n_frames, length, out, err);
}
