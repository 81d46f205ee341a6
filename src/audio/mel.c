/* Whisper's log-mel spectrogram (see include/choir/mel.h for the steps and the
 * two forms). Frames are transformed in blocks and reduced to mel energies at
 * once, so the full complex spectrum is never stored: an hour of audio needs
 * only the mel matrix itself. */
#include <math.h>
#include <string.h>

#include "audio/stft_internal.h"
#include "choir/alloc.h"
#include "choir/mel.h"
#include "choir/pool.h"
#include "choir/stft.h"

#define N_BINS (CHOIR_WHISPER_N_FFT / 2 + 1)
#define MEL_BLOCK_FRAMES 128

/* Slaney's mel scale: linear below 1 kHz, logarithmic above. */
static double hz_to_mel(double hz) {
    const double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
    const double logstep = log(6.4) / 27.0;
    return hz < min_log_hz ? hz / f_sp : min_log_mel + log(hz / min_log_hz) / logstep;
}

static double mel_to_hz(double mel) {
    const double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
    const double logstep = log(6.4) / 27.0;
    return mel < min_log_mel ? f_sp * mel : min_log_hz * exp(logstep * (mel - min_log_mel));
}

int choir_whisper_mel_filters(int n_mels, float *filters, choir_err *err) {
    if (n_mels < 1 || n_mels > 512 || !filters)
        return choir_err_set(err, CHOIR_EINVAL, "mel: n_mels %d out of range 1..512", n_mels);
    double mel_lo = hz_to_mel(0.0), mel_hi = hz_to_mel(CHOIR_WHISPER_SAMPLE_RATE / 2.0);
    double pts[512 + 2];
    for (int i = 0; i < n_mels + 2; i++) pts[i] = mel_to_hz(mel_lo + (mel_hi - mel_lo) * i / (n_mels + 1));
    for (int m = 0; m < n_mels; m++) {
        double lo = pts[m], mid = pts[m + 1], hi = pts[m + 2];
        double enorm = 2.0 / (hi - lo);
        for (int k = 0; k < N_BINS; k++) {
            double f = (double)k * CHOIR_WHISPER_SAMPLE_RATE / CHOIR_WHISPER_N_FFT;
            double up = (f - lo) / (mid - lo), down = (hi - f) / (hi - mid);
            double w = up < down ? up : down;
            filters[m * N_BINS + k] = (float)(w > 0.0 ? w * enorm : 0.0);
        }
    }
    return CHOIR_OK;
}

/* Mel energies of the first n_out frames of the STFT of a signal of n samples
 * (n_avail from pcm, then zeros), log10'd into mel [n_mels][mel_stride] at
 * column 0. Returns the max log value through *max_log.
 *
 * Blocks of MEL_BLOCK_FRAMES frames are independent, so they are spread over
 * the default pool (a 30-s window is 24 blocks; a long recording many more):
 * each range of blocks has its own spectrum and power buffers, the plan and
 * filters are shared (FFTW's new-array execute is thread-safe), and every
 * value is computed as it would be serially, so the result does not depend on
 * the thread count. Called from a pool worker it runs inline. */
typedef struct {
    const choir_stft_plan *plan;
    const float *pcm, *filters;
    const int *first, *last;
    int64_t n_avail, n, n_out, mel_stride;
    int n_mels;
    float *mel;
    float *max_by_worker; /* one per worker */
    int *rc_by_worker;
} mel_job;

static void mel_blocks(void *ctx, int64_t b0, int64_t b1, int worker) {
    mel_job *j = ctx;
    float *block = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)MEL_BLOCK_FRAMES * N_BINS * 2 * sizeof(float));
    float power[N_BINS];
    float max_seen = j->max_by_worker[worker];
    if (!block) {
        j->rc_by_worker[worker] = CHOIR_ENOMEM;
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        int64_t f0 = b * MEL_BLOCK_FRAMES;
        int64_t count = j->n_out - f0 < MEL_BLOCK_FRAMES ? j->n_out - f0 : MEL_BLOCK_FRAMES;
        int rc = choir_stft_frames_block(j->plan, j->pcm, j->n_avail, j->n, f0, count, block, NULL);
        if (rc) {
            j->rc_by_worker[worker] = rc;
            break;
        }
        for (int64_t f = 0; f < count; f++) {
            const float *bins = block + f * N_BINS * 2;
            for (int k = 0; k < N_BINS; k++) power[k] = bins[2 * k] * bins[2 * k] + bins[2 * k + 1] * bins[2 * k + 1];
            for (int m = 0; m < j->n_mels; m++) {
                double e = 0.0;
                const float *w = j->filters + m * N_BINS;
                for (int k = j->first[m]; k < j->last[m]; k++) e += (double)w[k] * power[k];
                float l = (float)log10(e > 1e-10 ? e : 1e-10);
                j->mel[m * j->mel_stride + f0 + f] = l;
                if (l > max_seen) max_seen = l;
            }
        }
    }
    j->max_by_worker[worker] = max_seen;
    choir_free(block);
}

static int log_mel_frames(const float *pcm, int64_t n_avail, int64_t n, int n_mels, int64_t n_out, float *mel,
                          int64_t mel_stride, float *max_log, choir_err *err) {
    choir_err local;
    if (!err) err = &local; /* the plan failure's code is read back from it */
    int rc = CHOIR_OK;
    choir_pool *pool = choir_pool_default();
    int workers = choir_pool_threads(pool);
    if (workers < 1) workers = 1;
    float *filters = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n_mels * N_BINS * sizeof(float));
    int *first = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n_mels * 2 * sizeof(int));
    float *max_by_worker = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)workers * sizeof(float));
    int *rc_by_worker = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)workers * sizeof(int));
    choir_stft_plan *plan = choir_stft_plan_create(CHOIR_WHISPER_N_FFT, CHOIR_WHISPER_HOP, CHOIR_WHISPER_N_FFT,
                                                   CHOIR_WINDOW_HANN, NULL, 1, err);
    if (!plan) {
        rc = err->code;
        goto done;
    }
    if (!filters || !first || !max_by_worker || !rc_by_worker) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "mel: out of memory");
        goto done;
    }
    rc = choir_whisper_mel_filters(n_mels, filters, err);
    if (rc) goto done;
    /* Each triangle covers a few bins; remember its non-zero span. */
    int *last = first + n_mels;
    for (int m = 0; m < n_mels; m++) {
        first[m] = N_BINS;
        last[m] = 0;
        for (int k = 0; k < N_BINS; k++)
            if (filters[m * N_BINS + k] != 0.0f) {
                if (k < first[m]) first[m] = k;
                last[m] = k + 1;
            }
    }
    for (int w = 0; w < workers; w++) max_by_worker[w] = -INFINITY, rc_by_worker[w] = CHOIR_OK;
    mel_job job = {.plan = plan, .pcm = pcm, .filters = filters, .first = first, .last = last,
                   .n_avail = n_avail, .n = n, .n_out = n_out, .mel_stride = mel_stride, .n_mels = n_mels,
                   .mel = mel, .max_by_worker = max_by_worker, .rc_by_worker = rc_by_worker};
    choir_pool_parallel_for(pool, (n_out + MEL_BLOCK_FRAMES - 1) / MEL_BLOCK_FRAMES, 1, mel_blocks, &job);
    float max_seen = -INFINITY;
    for (int w = 0; w < workers; w++) {
        if (rc_by_worker[w] && !rc) rc = rc_by_worker[w];
        if (max_by_worker[w] > max_seen) max_seen = max_by_worker[w];
    }
    if (rc) {
        choir_err_set(err, rc, rc == CHOIR_ENOMEM ? "mel: out of memory" : "mel: STFT of a frame block failed");
        goto done;
    }
    *max_log = max_seen;
done:
    choir_stft_plan_free(plan);
    choir_free(filters);
    choir_free(first);
    choir_free(max_by_worker);
    choir_free(rc_by_worker);
    return rc;
}

static void normalise(float *mel, int64_t count, float max_log) {
    float floor_log = max_log - 8.0f;
    for (int64_t i = 0; i < count; i++) {
        float l = mel[i] > floor_log ? mel[i] : floor_log;
        mel[i] = (l + 4.0f) / 4.0f;
    }
}

int choir_whisper_log_mel(const float *pcm16k, int64_t n_samples, int n_mels, float *mel, int64_t n_frames,
                          choir_err *err) {
    if (!mel || n_samples < 0 || (n_samples > 0 && !pcm16k))
        return choir_err_set(err, CHOIR_EINVAL, "mel: bad arguments");
    if (n_mels < 1 || n_mels > 512) return choir_err_set(err, CHOIR_EINVAL, "mel: n_mels %d out of range", n_mels);
    if (n_frames < 2 || n_frames > INT64_MAX / CHOIR_WHISPER_HOP / 2)
        return choir_err_set(err, CHOIR_EINVAL, "mel: n_frames %lld out of range", (long long)n_frames);
    int64_t n = n_frames * CHOIR_WHISPER_HOP;
    int64_t n_avail = n_samples < n ? n_samples : n;
    float max_log = 0.0f;
    int rc = log_mel_frames(pcm16k, n_avail, n, n_mels, n_frames, mel, n_frames, &max_log, err);
    if (rc) return rc;
    normalise(mel, (int64_t)n_mels * n_frames, max_log);
    return CHOIR_OK;
}

int choir_whisper_log_mel_full(const float *pcm16k, int64_t n_samples, int64_t pad_samples, int n_mels,
                               float **mel, int64_t *n_frames, choir_err *err) {
    if (!mel || !n_frames) return choir_err_set(err, CHOIR_EINVAL, "mel: bad arguments");
    *mel = NULL;
    *n_frames = 0;
    if (n_samples < 0 || pad_samples < 0 || (n_samples > 0 && !pcm16k))
        return choir_err_set(err, CHOIR_EINVAL, "mel: bad arguments");
    if (n_mels < 1 || n_mels > 512) return choir_err_set(err, CHOIR_EINVAL, "mel: n_mels %d out of range", n_mels);
    int64_t n = n_samples + pad_samples;
    int64_t frames = n / CHOIR_WHISPER_HOP;
    if (frames < 2 || n <= CHOIR_WHISPER_N_FFT / 2)
        return choir_err_set(err, CHOIR_EINVAL, "mel: %lld samples is too short for a mel spectrogram",
                             (long long)n);
    float *out = choir_alloc(CHOIR_MEM_IO, (size_t)n_mels * (size_t)frames * sizeof(float));
    if (!out)
        return choir_err_set(err, CHOIR_ENOMEM, "mel: out of memory for %lld frames x %d mels", (long long)frames,
                             n_mels);
    float max_log = 0.0f;
    int rc = log_mel_frames(pcm16k, n_samples, n, n_mels, frames, out, frames, &max_log, err);
    if (rc) {
        choir_free(out);
        return rc;
    }
    normalise(out, (int64_t)n_mels * frames, max_log);
    *mel = out;
    *n_frames = frames;
    return CHOIR_OK;
}

void choir_whisper_mel_window(const float *mel, int n_mels, int64_t total_frames, int64_t start,
                              int64_t window_frames, float *window) {
    for (int m = 0; m < n_mels; m++) {
        float *dst = window + (int64_t)m * window_frames;
        int64_t avail = total_frames - start;
        if (avail < 0) avail = 0;
        if (avail > window_frames) avail = window_frames;
        if (avail > 0) memcpy(dst, mel + (int64_t)m * total_frames + start, (size_t)avail * sizeof(float));
        for (int64_t f = avail; f < window_frames; f++) dst[f] = 0.0f;
    }
}
