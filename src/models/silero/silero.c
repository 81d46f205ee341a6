/* Silero VAD v6.2 forward pass, one 512-sample step for a batch of streams.
 *
 * The order follows ../shared/specs/silero_vad.md: context + chunk -> right
 * reflect pad -> STFT as a strided convolution -> magnitude -> four
 * convolutions with ReLU -> one LSTM cell step -> ReLU -> 1x1 conv -> sigmoid.
 *
 * Activations are kept time-major ([stream][time][channel]) so that every
 * convolution is one matrix product over the whole batch: each output frame's
 * receptive field is gathered into a row ordered (channel, tap), which is the
 * order of PyTorch's [Cout][Cin][K] weight rows, so the weights are used as
 * stored. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "models/silero/silero_internal.h"

#define N_STFT (2 * SILERO_FFT_BINS) /* 258 basis rows */
#define GATES (4 * CHOIR_SILERO_HIDDEN)

/* Floats of scratch per stream, by buffer. */
enum {
    S_PADDED = SILERO_PADDED,                     /* x: context + chunk + reflection */
    S_FRAMES = SILERO_FRAMES * SILERO_WINDOW,     /* (4, 256) */
    S_SPEC = SILERO_FRAMES * N_STFT,              /* (4, 258) */
    S_MAG = SILERO_FRAMES * SILERO_FFT_BINS,      /* (4, 129) */
    S_COLS = SILERO_FRAMES * SILERO_FFT_BINS * 3, /* largest gathered input, conv1's (4, 387) */
    S_ACT1 = SILERO_FRAMES * 128,                 /* (4, 128) */
    S_ACT2 = 2 * 64,                              /* (2, 64) */
    S_ACT3 = 64,                                  /* (1, 64) */
    S_ACT4 = 128,                                 /* (1, 128): the LSTM input v */
    S_GATES = 2 * GATES,                          /* W_ih v and W_hh h, (2, 512) */
    S_TOTAL = S_PADDED + S_FRAMES + S_SPEC + S_MAG + S_COLS + S_ACT1 + S_ACT2 + S_ACT3 + S_ACT4 + S_GATES
};

choir_silero_state *choir_silero_state_create(choir_err *err) {
    choir_silero_state *s = choir_calloc(CHOIR_MEM_ACTIVATIONS, 1, sizeof *s);
    if (!s) choir_err_set(err, CHOIR_ENOMEM, "silero: out of memory for a stream state");
    return s;
}

void choir_silero_state_reset(choir_silero_state *s) {
    if (s) memset(s, 0, sizeof *s);
}

void choir_silero_state_free(choir_silero_state *s) { choir_free(s); }

size_t choir_silero_scratch_bytes(int n_streams) {
    return n_streams > 0 ? (size_t)n_streams * S_TOTAL * sizeof(float) : 0;
}

/* y[M, N] = x[M, K] W[N, K]^T + bias[N]: a linear layer over M rows.
 *
 * Rows go to choir_linear a few at a time, which takes its matrix-vector path
 * (each output one dot product of a weight row, read in place) rather than a
 * BLAS product: at these sizes (M <= 4 per stream, K <= 387) BLAS spends most
 * of its time re-packing the weights on every call. It also makes each row's
 * result independent of how many streams share the batch. */
#define LINEAR_ROWS 4
static void linear(const float *x, int64_t M, int64_t K, const float *W, int64_t N, const float *bias,
                   float *y) {
    choir_weight w = choir_weight_f32(W, N, K);
    for (int64_t r = 0; r < M; r += LINEAR_ROWS) {
        int64_t rows = M - r < LINEAR_ROWS ? M - r : LINEAR_ROWS;
        choir_linear(x + r * K, rows, &w, bias, y + r * N);
    }
}

/* A kernel-3, padding-1 convolution over time-major input in[B][T][Cin],
 * followed by ReLU: out[B][Tout][Cout]. `cols` holds B * Tout * Cin * 3 floats. */
static void conv3_relu(const float *in, int B, int T, int Cin, int stride, const float *W, const float *bias,
                       int Cout, float *cols, float *out) {
    int Tout = (T + 2 - 3) / stride + 1;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < Tout; t++) {
            float *row = cols + ((size_t)b * Tout + t) * Cin * 3;
            for (int k = 0; k < 3; k++) {
                int src = t * stride + k - 1;
                const float *x = in + ((size_t)b * T + src) * Cin;
                int inside = src >= 0 && src < T;
                for (int c = 0; c < Cin; c++) row[c * 3 + k] = inside ? x[c] : 0.0f;
            }
        }
    }
    linear(cols, (int64_t)B * Tout, (int64_t)Cin * 3, W, Cout, bias, out);
    choir_relu(out, (int64_t)B * Tout * Cout);
}

static float sigmoid1(float x) { return 1.0f / (1.0f + expf(-x)); }

int choir_silero_process(const choir_silero *m, choir_silero_state *const *states,
                         const float *const *chunks, int n_streams, float *probs, void *scratch,
                         choir_err *err) {
    if (!m || !states || !chunks || !probs || n_streams < 0)
        return choir_err_set(err, CHOIR_EINVAL, "silero: process needs a model, states, chunks and probs");
    if (n_streams == 0) return 0;
    for (int b = 0; b < n_streams; b++)
        if (!states[b] || !chunks[b]) return choir_err_set(err, CHOIR_EINVAL, "silero: stream %d has no state or chunk", b);
    float *own = NULL;
    if (!scratch) {
        own = choir_alloc(CHOIR_MEM_ACTIVATIONS, choir_silero_scratch_bytes(n_streams));
        if (!own) return choir_err_set(err, CHOIR_ENOMEM, "silero: out of memory for %d streams", n_streams);
        scratch = own;
    }
    const int B = n_streams;
    float *x = scratch;
    float *frames = x + (size_t)B * S_PADDED;
    float *spec = frames + (size_t)B * S_FRAMES;
    float *mag = spec + (size_t)B * S_SPEC;
    float *cols = mag + (size_t)B * S_MAG;
    float *a1 = cols + (size_t)B * S_COLS;
    float *a2 = a1 + (size_t)B * S_ACT1;
    float *a3 = a2 + (size_t)B * S_ACT2;
    float *v = a3 + (size_t)B * S_ACT3;
    float *gates = v + (size_t)B * S_ACT4;

    /* 1-2. Context + new samples, then the right reflection: sample 576 + j
     * mirrors sample 574 - j (the edge sample is not repeated). */
    for (int b = 0; b < B; b++) {
        float *xb = x + (size_t)b * S_PADDED;
        memcpy(xb, states[b]->context, CHOIR_SILERO_CONTEXT * sizeof(float));
        memcpy(xb + CHOIR_SILERO_CONTEXT, chunks[b], CHOIR_SILERO_CHUNK * sizeof(float));
        for (int j = 0; j < SILERO_PADDED - SILERO_INPUT; j++) xb[SILERO_INPUT + j] = xb[SILERO_INPUT - 2 - j];
        for (int t = 0; t < SILERO_FRAMES; t++)
            memcpy(frames + ((size_t)b * SILERO_FRAMES + t) * SILERO_WINDOW, xb + t * SILERO_HOP,
                   SILERO_WINDOW * sizeof(float));
    }

    /* 3. STFT: each frame against the fixed basis, then |re + i im| per bin. */
    linear(frames, (int64_t)B * SILERO_FRAMES, SILERO_WINDOW, m->stft_basis, N_STFT, NULL, spec);
    for (int r = 0; r < B * SILERO_FRAMES; r++) {
        const float *re = spec + (size_t)r * N_STFT, *im = re + SILERO_FFT_BINS;
        float *out = mag + (size_t)r * SILERO_FFT_BINS;
        for (int k = 0; k < SILERO_FFT_BINS; k++) out[k] = sqrtf(re[k] * re[k] + im[k] * im[k]);
    }

    /* 4. Encoder: time 4 -> 4 -> 2 -> 1 -> 1. */
    conv3_relu(mag, B, 4, SILERO_FFT_BINS, 1, m->conv1_w, m->conv1_b, 128, cols, a1);
    conv3_relu(a1, B, 4, 128, 2, m->conv2_w, m->conv2_b, 64, cols, a2);
    conv3_relu(a2, B, 2, 64, 2, m->conv3_w, m->conv3_b, 64, cols, a3);
    conv3_relu(a3, B, 1, 64, 1, m->conv4_w, m->conv4_b, 128, cols, v);

    /* 5. LSTM cell. The previous h of all streams is gathered into rows after
     * the input-side products, which reuse the frame buffer's room. */
    float *h_prev = frames;
    for (int b = 0; b < B; b++) memcpy(h_prev + (size_t)b * CHOIR_SILERO_HIDDEN, states[b]->h, sizeof states[b]->h);
    float *z_in = gates, *z_rec = gates + (size_t)B * GATES;
    linear(v, B, CHOIR_SILERO_HIDDEN, m->w_ih, GATES, m->b_ih, z_in);
    linear(h_prev, B, CHOIR_SILERO_HIDDEN, m->w_hh, GATES, m->b_hh, z_rec);
    const int H = CHOIR_SILERO_HIDDEN;
    for (int b = 0; b < B; b++) {
        float *z = z_in + (size_t)b * GATES;
        const float *zr = z_rec + (size_t)b * GATES;
        choir_silero_state *s = states[b];
        float logit = m->final_b[0];
        for (int j = 0; j < H; j++) {
            float i = sigmoid1(z[j] + zr[j]);
            float f = sigmoid1(z[H + j] + zr[H + j]);
            float g = tanhf(z[2 * H + j] + zr[2 * H + j]);
            float o = sigmoid1(z[3 * H + j] + zr[3 * H + j]);
            s->c[j] = f * s->c[j] + i * g;
            s->h[j] = o * tanhf(s->c[j]);
            /* 6. The decoder: ReLU, then the 1x1 convolution's dot product. */
            logit += m->final_w[j] * (s->h[j] > 0.0f ? s->h[j] : 0.0f);
        }
        probs[b] = sigmoid1(logit);
        memcpy(s->context, chunks[b] + CHOIR_SILERO_CHUNK - CHOIR_SILERO_CONTEXT, sizeof s->context);
    }
    choir_free(own);
    return 0;
}

int choir_silero_file_probs(const choir_silero *m, const float *samples, int64_t n_samples,
                            bool score_tail, float **probs, int64_t *n_chunks, choir_err *err) {
    if (!m || (!samples && n_samples) || n_samples < 0 || !probs || !n_chunks)
        return choir_err_set(err, CHOIR_EINVAL, "silero: bad arguments to file_probs");
    *probs = NULL;
    *n_chunks = 0;
    int64_t full = n_samples / CHOIR_SILERO_CHUNK;
    int64_t tail = n_samples % CHOIR_SILERO_CHUNK;
    int64_t count = full + (score_tail && tail ? 1 : 0);
    float *out = choir_alloc(CHOIR_MEM_IO, (size_t)(count ? count : 1) * sizeof(float));
    choir_silero_state *s = choir_silero_state_create(err);
    void *scratch = choir_alloc(CHOIR_MEM_ACTIVATIONS, choir_silero_scratch_bytes(1));
    int rc = 0;
    if (!out || !s || !scratch) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "silero: out of memory scoring %lld samples", (long long)n_samples);
        goto fail;
    }
    for (int64_t i = 0; i < count; i++) {
        float last[CHOIR_SILERO_CHUNK];
        const float *chunk = samples + i * CHOIR_SILERO_CHUNK;
        if (i == full) {
            memset(last, 0, sizeof last);
            memcpy(last, chunk, (size_t)tail * sizeof(float));
            chunk = last;
        }
        if ((rc = choir_silero_process(m, &s, &chunk, 1, &out[i], scratch, err))) goto fail;
    }
    choir_free(scratch);
    choir_silero_state_free(s);
    *probs = out;
    *n_chunks = count;
    return 0;
fail:
    choir_free(scratch);
    choir_silero_state_free(s);
    choir_free(out);
    return rc;
}
