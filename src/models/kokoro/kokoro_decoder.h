/* Kokoro's decoder + generator over backend operations (kokoro_decoder.c):
 * one implementation for the CPU and CUDA backends, B pieces per call. */
#ifndef CHOIR_KOKORO_DECODER_H
#define CHOIR_KOKORO_DECODER_H

#include "choir/backend.h"
#include "models/kokoro/kokoro_internal.h"

/* The decoder's weights on one backend (on the CPU: pointers into the model,
 * nothing copied; on CUDA: uploaded, convolutions as bf16 when the backend
 * was opened with bf16, the style projections and the F0 / N convolutions
 * always f32). The model and the backend must outlive it. NULL (and err) on
 * failure. */
typedef struct kk_dec kk_dec;
kk_dec *kk_dec_create(const choir_kokoro *m, choir_backend *be, choir_err *err);
/* NULL is a no-op. */
void kk_dec_free(kk_dec *d);
/* Backend bytes of its weights (0 on the CPU). */
int64_t kk_dec_weight_bytes(const kk_dec *d);

/* Working memory (backend bytes) of one call for n pieces whose longest has
 * `frames` frames: what choir_stream_reserve must give the stream. */
int64_t kk_dec_work_bytes(int n, int64_t frames);
/* Host bytes the call takes besides (device backends only: the harmonic
 * sources; the inputs' staging is n_in floats more). */
int64_t kk_dec_host_bytes(int n, int64_t frames);

/* Decodes n >= 1 pieces (host inputs) in one batch on the stream's backend:
 * audio[i] (host, 600 in[i].frames floats, the caller's) receives piece i's
 * 24 kHz audio. Working memory comes from the stream (kk_dec_work_bytes);
 * everything taken is released on return. trace may be NULL; stats, when
 * not NULL, has this call's work added to it. Returns 0 or
 * the error (the stream's sticky error is copied to err and cleared). On the
 * CPU, a batch of one is the single-piece computation bit for bit; in a
 * larger batch a piece is within float summation order of that (1e-5). */
typedef struct kk_dec_stats {
    double flops; /* the convolutions' multiply-adds x 2, padding included */
    double bytes; /* their bytes read and written (taps counted as copied) */
} kk_dec_stats;
int kk_dec_run(const kk_dec *d, choir_stream *s, const choir_kokoro_decode_input *in, int n,
               float *const *audio, kk_dec_trace_fn trace, void *trace_user, kk_dec_stats *stats,
               choir_err *err);

/* The prosody predictor's F0 / N residual blocks and projections (kk_f0_n
 * after its LSTM) for n pieces in one batch: x[b] [512, L[b]] (host, the
 * shared LSTM's output channels first), s_pro[b] [128] -> f0[b], n_out[b]
 * [2 L[b]] (host). Working memory from the stream (kk_dec_f0n_work_bytes for
 * the longest piece). Returns 0 or the error (CHOIR_EINVAL when the model
 * has no such blocks: kk_dec_has_f0n). */
bool kk_dec_has_f0n(const kk_dec *d);
int64_t kk_dec_f0n_work_bytes(int n, int64_t frames);
int kk_dec_f0n_run(const kk_dec *d, choir_stream *s, int n, const float *const *x,
                   const int64_t *L, const float *const *s_pro, float *const *f0,
                   float *const *n_out, choir_err *err);
/* The same over x [n, 512, Lm] in backend memory (the stream's; zeros past
 * each piece's length, Lm >= every L[b]), e.g. the shared LSTM's output
 * transposed on the device: nothing of x staged on the host. */
int kk_dec_f0n_run_dev(const kk_dec *d, choir_stream *s, int n, const float *x, int64_t Lm,
                       const int64_t *L, const float *const *s_pro, float *const *f0,
                       float *const *n_out, choir_err *err);

#endif
