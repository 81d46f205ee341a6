/* Host versions of the vocoder kernels Kokoro's CUDA data path calls
 * (choir/cuda_audio.h, choir/cuda_vocoder.h) for the fake CUDA build
 * (fake_cuda.c, whose weak stand-ins these replace): each runs the CPU
 * backend's operation on "device" memory (host memory there) through one
 * CPU stream, so tests/cuda/kokoro_gpu_check.c runs the model's CUDA path
 * (weights put on the backend, stream buffers, uploads, downloads, lengths
 * as backend memory, the executor) without a GPU. bf16 weights are widened
 * to f32 first. Not thread-safe: the check calls the device from one thread. */
#include <stdlib.h>
#include <string.h>

#include "choir/backend.h"
#include "choir/backend_vocoder.h"
#include "choir/cuda_audio.h"
#include "choir/cuda_vocoder.h"
#include "choir/kernels.h"
#include "choir/tensor.h"

static choir_stream *cpu_stream(void) {
    static choir_backend *be;
    static choir_stream *s;
    if (!s) {
        be = choir_backend_cpu(NULL);
        s = be ? choir_stream_create(be, NULL) : NULL;
    }
    return s;
}

/* The CPU operation's outcome as a CUDA kernel's: 0, or the stream's error
 * copied to err and cleared. */
static int done(choir_err *err) {
    choir_stream *s = cpu_stream();
    int rc = choir_stream_status(s, err);
    choir_stream_clear(s);
    return rc;
}

/* An f32 view of a conv weight of n values (widened when bf16; *tmp to free). */
static choir_weight conv_w(choir_cuda_conv_weight w, int64_t rows, int64_t cols, float **tmp) {
    *tmp = NULL;
    const float *f = w.w;
    if (w.bf16) {
        *tmp = malloc((size_t)(rows * cols) * sizeof(float));
        if (*tmp) choir_bf16_to_f32_n(w.w, *tmp, rows * cols);
        f = *tmp;
    }
    return choir_weight_f32(f, rows, cols);
}

int choir_cuda_conv1d_batched(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                              choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                              int64_t kernel, int stride, int padding, int dilation,
                              const int32_t *out_lens, float *y, choir_err *err) {
    (void)cu;
    float *tmp;
    choir_weight w = conv_w(weight, Cout, Cin * kernel, &tmp);
    if (!w.data) return choir_err_set(err, CHOIR_ENOMEM, "fake cuda: conv weight");
    choir_op_conv1d_lens(cpu_stream(), x, B, Cin, T, &w, bias, Cout, kernel, stride, padding,
                         dilation, out_lens, y);
    free(tmp);
    return done(err);
}

int choir_cuda_conv_transpose1d_batched(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                        int64_t T, choir_cuda_conv_weight weight, const float *bias,
                                        int64_t Cout, int64_t kernel, int stride, int padding,
                                        int output_padding, const int32_t *out_lens, float *y,
                                        choir_err *err) {
    (void)cu;
    float *tmp;
    choir_weight w = conv_w(weight, Cin, Cout * kernel, &tmp);
    if (!w.data) return choir_err_set(err, CHOIR_ENOMEM, "fake cuda: conv weight");
    choir_op_conv_transpose1d_lens(cpu_stream(), x, B, Cin, T, &w, bias, Cout, kernel, stride,
                                   padding, output_padding, out_lens, y);
    free(tmp);
    return done(err);
}

int choir_cuda_conv_transpose1d_depthwise(choir_cuda *cu, const float *x, int64_t B, int64_t C,
                                          int64_t T, const float *weight, const float *bias,
                                          int64_t kernel, int stride, int padding,
                                          int output_padding, const int32_t *out_lens, float *y,
                                          choir_err *err) {
    (void)cu;
    choir_op_conv_transpose1d_depthwise_lens(cpu_stream(), x, B, C, T, weight, bias, kernel,
                                             stride, padding, output_padding, out_lens, y);
    return done(err);
}

int choir_cuda_conv1d_adain_snake(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                  int64_t T, const choir_cuda_adain_snake *pre,
                                  choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                                  int64_t kernel, int padding, int dilation,
                                  const int32_t *out_lens, const float *residual, float *y,
                                  choir_err *err) {
    return choir_cuda_conv1d_adain_snake_stats(cu, x, B, Cin, T, pre, weight, bias, Cout, kernel,
                                               padding, dilation, out_lens, residual, y, NULL,
                                               NULL, err);
}

/* The statistics partials by fake_cuda.c's host pass over y (pre->part is
 * not read: the CPU operation takes its own statistics). */
int choir_cuda_conv1d_adain_snake_stats(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                        int64_t T, const choir_cuda_adain_snake *pre,
                                        choir_cuda_conv_weight weight, const float *bias,
                                        int64_t Cout, int64_t kernel, int padding, int dilation,
                                        const int32_t *out_lens, const float *residual, float *y,
                                        double *stats_out, const int32_t *stats_lens,
                                        choir_err *err) {
    float *tmp;
    choir_weight w = conv_w(weight, Cout, Cin * kernel, &tmp);
    if (!w.data) return choir_err_set(err, CHOIR_ENOMEM, "fake cuda: conv weight");
    /* the CPU operation's sequence, with its temporaries from malloc (the
     * stream here has no working memory) */
    const int64_t Tout = choir_conv1d_out_len(T, kernel, 1, padding, dilation);
    float *act = malloc((size_t)(B * Cin * T) * sizeof(float));
    float *prod = residual ? malloc((size_t)(B * Cout * Tout) * sizeof(float)) : y;
    choir_stream *s = cpu_stream();
    const bool ok = act && prod;
    if (ok) {
        choir_op_adain(s, x, act, B, Cin, T, pre->lens, pre->norm_w, pre->norm_b, pre->gb,
                       pre->gb_stride, pre->eps);
        choir_op_snake(s, act, B, Cin, T, pre->alpha);
        choir_op_conv1d_lens(s, act, B, Cin, T, &w, bias, Cout, kernel, 1, padding, dilation,
                             out_lens, prod);
        if (residual) choir_op_add_scale(s, residual, prod, y, B * Cout * Tout, 1.0f);
    }
    free(act);
    if (residual) free(prod);
    free(tmp);
    if (!ok) return choir_err_set(err, CHOIR_ENOMEM, "fake cuda: conv1d_adain_snake");
    if (stats_out) choir_cuda_adain_stats(cu, y, B, Cout, Tout, stats_lens, stats_out, err);
    return done(err);
}

int choir_cuda_adain(choir_cuda *cu, const float *x, float *y, int64_t B, int64_t C, int64_t T,
                     const int32_t *lens, const float *norm_w, const float *norm_b, const float *gb,
                     int64_t gb_stride, float eps, choir_err *err) {
    (void)cu;
    choir_op_adain(cpu_stream(), x, y, B, C, T, lens, norm_w, norm_b, gb, gb_stride, eps);
    return done(err);
}

int choir_cuda_istft_magphase(choir_cuda *cu, const float *P, int64_t B, int64_t F,
                              const int32_t *frames, int n_fft, int hop, float *out,
                              choir_err *err) {
    (void)cu;
    choir_op_istft_magphase(cpu_stream(), P, B, F, frames, n_fft, hop, out);
    return done(err);
}

int choir_cuda_nsf_source_stft(choir_cuda *cu, const float *f0, int64_t B, int64_t T,
                               const int32_t *lens, const choir_nsf_source *p,
                               const uint64_t *seeds, const bool *noisy, float *work, float *S,
                               choir_err *err) {
    (void)cu, (void)work;
    choir_stream *s = cpu_stream();
    size_t need = (size_t)((p->upsample + p->harmonics) * T) * sizeof(float) + 4096;
    if (choir_stream_reserve(s, need, 0, err)) return err && err->code ? err->code : CHOIR_ENOMEM;
    choir_op_nsf_source_stft(s, f0, B, T, lens, p, seeds, noisy, S);
    return done(err);
}

int choir_cuda_add_scale(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                         float scale, choir_err *err) {
    (void)cu;
    choir_op_add_scale(cpu_stream(), a, b, y, n, scale);
    return done(err);
}

int choir_cuda_add_div(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                       float divisor, choir_err *err) {
    (void)cu;
    choir_op_add_div(cpu_stream(), a, b, y, n, divisor);
    return done(err);
}

int choir_cuda_upsample2_nearest(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                                 float *y, choir_err *err) {
    (void)cu;
    choir_op_upsample2_nearest(cpu_stream(), x, B, C, T, y);
    return done(err);
}

int choir_cuda_reflect_pad(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                           const int32_t *lens, int left, int right, float *y, choir_err *err) {
    (void)cu;
    choir_op_reflect_pad(cpu_stream(), x, B, C, T, lens, left, right, y);
    return done(err);
}

int choir_cuda_copy_channels(choir_cuda *cu, const float *src, int64_t B, int64_t Cs, int64_t T,
                             float *dst, int64_t Cd, int64_t c0, choir_err *err) {
    (void)cu;
    choir_op_copy_channels(cpu_stream(), src, B, Cs, T, dst, Cd, c0);
    return done(err);
}

#define FAKE_LSTM_MAX_KPL 16

/* The device layout (directions stacked, biases summed) read as the CPU's
 * per-direction weights; the hidden sizes the CUDA kernel takes. */
int choir_cuda_bilstm(choir_cuda *cu, const float *x, int64_t B, int64_t T, int64_t In, int64_t H,
                      const float *w_ih, const float *w_hh, const float *bias,
                      const int32_t *lens, float *scratch, float *y, choir_err *err) {
    (void)cu, (void)scratch;
    if (H < 32 || H % 32 || H > 32 * FAKE_LSTM_MAX_KPL) /* as cuda_audio.cu's check */
        return choir_err_set(err, CHOIR_EINVAL, "fake cuda: bilstm H %lld", (long long)H);
    const int64_t G = 4 * H;
    choir_bilstm_weights w = {.In = In, .H = H};
    for (int d = 0; d < 2; d++) {
        w.w_ih[d] = w_ih + d * G * In;
        w.w_hh[d] = w_hh + d * G * H;
        w.b_ih[d] = bias + d * G;
        w.b_hh[d] = NULL;
    }
    choir_op_bilstm_w(cpu_stream(), x, B, T, &w, lens, y);
    return done(err);
}
