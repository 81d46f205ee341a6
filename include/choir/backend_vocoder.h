/* choir/backend_vocoder.h: backend operations of vocoders over batches of
 * items of different lengths (Kokoro's decoder and iSTFTNet generator).
 *
 * Tensors are [B, C, T]: B items, each padded to the longest (T samples),
 * item b having lens[b] valid samples (int32 backend memory; NULL: all of
 * them). The operations that take output lengths write zeros past each
 * item's length, so that the next convolution reads zeros there exactly as
 * the item's own zero padding would: a batch gives every item what it gets
 * alone, up to the summation order a matrix product picks at another width.
 *
 * Convolution weights are choir_weight matrices from choir_backend_weight
 * (f32, or bf16 on a CUDA backend opened with bf16: tensor-core products
 * with f32 accumulation, the activations rounded to bf16 on the way in):
 * conv1d [Cout, Cin K], conv_transpose1d [Cin, Cout K] (PyTorch's layouts,
 * flattened). Everything else is as choir/backend.h says (sticky errors,
 * CHOIR_EINVAL for bad shapes, CHOIR_EUNSUPPORTED for what a backend lacks). */
#ifndef CHOIR_BACKEND_VOCODER_H
#define CHOIR_BACKEND_VOCODER_H

#include "choir/backend.h"
#include "choir/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[b] [C, R] = src[b] [R, C]^T for b < B (no aliasing), rows r >=
 * lens[b] of item b (int32 backend memory; NULL: none) written as zeros:
 * items' time-major rows made a convolution's channels-first input with
 * zeros past each length, one operation for the batch (CUDA: one launch). */
int choir_op_transpose_lens(choir_stream *s, const float *src, int64_t B, int64_t R, int64_t C,
                            const int32_t *lens, float *dst);

/* y [B, Cout, Tout] = conv1d(x [B, Cin, T]) per item (groups 1, zero
 * padding), Tout = choir_conv1d_out_len; bias [Cout] or NULL; y[b, :, t] = 0
 * for t >= out_lens[b] (NULL: nothing zeroed). y must not alias x. Kernel
 * scratch: the taps of one item (CPU) or of a group of items (CUDA, <= 512 MB). */
int choir_op_conv1d_lens(choir_stream *s, const float *x, int64_t B, int64_t Cin, int64_t T,
                         const choir_weight *w, const float *bias, int64_t Cout, int64_t kernel,
                         int stride, int padding, int dilation, const int32_t *out_lens, float *y);

/* The pre-activation of choir_op_conv1d_adain_snake: choir_op_adain's
 * arguments (lens: the input's valid lengths), then Snake with alpha [Cin]. */
typedef struct choir_adain_snake {
    const int32_t *lens;          /* [B] or NULL: all T */
    const float *norm_w, *norm_b; /* [Cin] or NULL */
    const float *gb;              /* item b's gamma [Cin], beta [Cin] at gb + b gb_stride */
    int64_t gb_stride;
    float eps;
    const float *alpha; /* [Cin] */
    /* x's statistics partials already taken (choir_op_adain_stats, or the
     * producing choir_op_conv1d_adain_snake_stats's stats_out), over lens;
     * NULL: taken from x. Only a device reads them (the CPU takes its own). */
    const double *part;
} choir_adain_snake;

/* A Snake residual unit's convolution (Kokoro's AdaINResBlock1):
 *   y = residual + conv1d(snake(adain(x)))
 * with stride 1 and groups 1, Tout = T + 2 padding - dilation (K - 1);
 * weight, bias and out_lens as choir_op_conv1d_lens (tails of the product
 * zeroed before the residual is added); residual [B, Cout, Tout] or NULL (y
 * may alias it, never x). The CPU runs choir_op_adain, choir_op_snake,
 * choir_op_conv1d_lens and choir_op_add_scale(residual, product, 1) in
 * turn (bit for bit those calls; working memory from the stream: the
 * activation, and the product when there is a residual). CUDA fuses them:
 * one pass for the statistics, then the implicit-GEMM convolution applies
 * the AdaIN affine and Snake to x as it reads it and adds the residual as it
 * writes y (choir_cuda_conv1d_adain_snake; where that does not apply, the
 * calls above). */
int choir_op_conv1d_adain_snake(choir_stream *s, const float *x, int64_t B, int64_t Cin,
                                int64_t T, const choir_adain_snake *pre, const choir_weight *w,
                                const float *bias, int64_t Cout, int64_t kernel, int padding,
                                int dilation, const int32_t *out_lens, const float *residual,
                                float *y);

/* AdaIN's statistics of x [B, C, T] as partials for a later
 * choir_op_conv1d_adain_snake (choir_adain_snake.part): part [B, C,
 * ceil(T / 128), 2] doubles of backend memory, the sum and sum of squares
 * of each 128-frame tile's frames below lens[b] (choir_cuda_adain_stats). */
int choir_op_adain_stats(choir_stream *s, const float *x, int64_t B, int64_t C, int64_t T,
                         const int32_t *lens, double *part);

/* choir_op_conv1d_adain_snake also writing y's partials (as
 * choir_op_adain_stats(y, stats_lens) would; stats_out NULL: none) for the
 * operation that reads y next: on CUDA from the convolution's epilogue
 * (choir_cuda_conv1d_adain_snake_stats), elsewhere by a pass over y. */
int choir_op_conv1d_adain_snake_stats(choir_stream *s, const float *x, int64_t B, int64_t Cin,
                                      int64_t T, const choir_adain_snake *pre,
                                      const choir_weight *w, const float *bias, int64_t Cout,
                                      int64_t kernel, int padding, int dilation,
                                      const int32_t *out_lens, const float *residual, float *y,
                                      double *stats_out, const int32_t *stats_lens);

/* y [B, Cout, Tout] = conv_transpose1d(x [B, Cin, T]) per item (groups 1,
 * dilation 1), Tout = choir_conv_transpose1d_out_len; weight [Cin, Cout K];
 * out_lens as above. */
int choir_op_conv_transpose1d_lens(choir_stream *s, const float *x, int64_t B, int64_t Cin,
                                   int64_t T, const choir_weight *w, const float *bias,
                                   int64_t Cout, int64_t kernel, int stride, int padding,
                                   int output_padding, const int32_t *out_lens, float *y);

/* Depthwise conv_transpose1d (groups = C): weight [C, 1, K] f32 (a vector
 * from choir_backend_vec), bias [C] or NULL, x [B, C, T] -> y [B, C, Tout];
 * out_lens as above. */
int choir_op_conv_transpose1d_depthwise_lens(choir_stream *s, const float *x, int64_t B,
                                             int64_t C, int64_t T, const float *weight,
                                             const float *bias, int64_t kernel, int stride,
                                             int padding, int output_padding,
                                             const int32_t *out_lens, float *y);

/* y = (a + b) * scale over n values; y may alias a or b. */
int choir_op_add_scale(choir_stream *s, const float *a, const float *b, float *y, int64_t n,
                       float scale);
/* y = (a + b) / divisor over n values (a mean of several branches, rounded
 * as a division); y may alias a or b. */
int choir_op_add_div(choir_stream *s, const float *a, const float *b, float *y, int64_t n,
                     float divisor);

/* Nearest up-sampling by 2 in time: y [B, C, 2T], y[b, c, 2t] = y[b, c, 2t + 1]
 * = x[b, c, t]. */
int choir_op_upsample2_nearest(choir_stream *s, const float *x, int64_t B, int64_t C, int64_t T,
                               float *y);

/* Reflection padding per item (PyTorch ReflectionPad1d: the edge sample is
 * not repeated): x [B, C, T], item b with lens[b] valid samples (NULL: T),
 * -> y [B, C, T + left + right], item b occupying lens[b] + left + right
 * samples, zeros after. left and right must be < lens[b]. */
int choir_op_reflect_pad(choir_stream *s, const float *x, int64_t B, int64_t C, int64_t T,
                         const int32_t *lens, int left, int right, float *y);

/* Channel concatenation: dst[b, c0 + c, t] = src[b, c, t] for c < Cs, where
 * src is [B, Cs, T] and dst [B, Cd, T]. */
int choir_op_copy_channels(choir_stream *s, const float *src, int64_t B, int64_t Cs, int64_t T,
                           float *dst, int64_t Cd, int64_t c0);

/* The harmonic-plus-noise source of an NSF / iSTFTNet generator and its
 * STFT (choir_nsf_source_stft in choir/kernels.h, its CPU twin and the
 * oracle), for B items at once: f0 [B, T] (Hz; item b's first lens[b]
 * values valid, backend int32 [B], NULL: all T) -> S [B, n_fft + 2, F] with
 * F = upsample T / hop + 1, item b's frames upsample lens[b] / hop + 1 and
 * zeros after. Item b's draws are the seeded stream of seeds[b] where
 * noisy[b] (host arrays [B]; seeds NULL: no draws; noisy NULL: every item
 * with seeds), else zero. The CPU runs choir_nsf_source_stft per item
 * (working memory from the stream); CUDA runs three kernels
 * (choir_cuda_nsf_source_stft: the phase sums, a warp per item, in the
 * CPU's order; the source, a thread per sample, with its own draws; the
 * STFT, a thread per frame), every float32 operation rounded as the CPU's
 * and sin, tanh, atan2 and the draws' log, sin, cos in double, rounded once:
 * equal to the CPU to those functions' last-ulp differences (docs/cuda.md).
 * Working memory: (upsample + harmonics) T floats per item (CPU: one item's). */
int choir_op_nsf_source_stft(choir_stream *s, const float *f0, int64_t B, int64_t T,
                             const int32_t *lens, const choir_nsf_source *p,
                             const uint64_t *seeds, const bool *noisy, float *S);

/* --- recurrent ------------------------------------------------------------- */

/* A bidirectional one-layer LSTM's weights on a backend, each direction's
 * arrays where the model keeps them (on the CPU: the host arrays, nothing
 * copied); a device backend also holds the stacked copies its kernel reads. */
typedef struct choir_bilstm_weights {
    const float *w_ih[2], *w_hh[2]; /* [4H, In], [4H, H]; [0] forward, [1] reverse */
    const float *b_ih[2], *b_hh[2]; /* [4H] or NULL */
    int64_t In, H;
    /* device backends: [2, 4H, In], [2, 4H, H], b_ih + b_hh [2, 4H] (summed in
     * float, as choir_lstm sums them); NULL on the CPU */
    const float *w_ih2, *w_hh2, *bias2;
} choir_bilstm_weights;

/* Puts the host LSTM on the weights' backend `be` (the store's). Returns 0 or
 * the error (also kept by the store). */
int choir_backend_bilstm_weights(choir_backend_weights *ws, choir_backend *be,
                                 const float *const w_ih[2], const float *const w_hh[2],
                                 const float *const b_ih[2], const float *const b_hh[2], int64_t In,
                                 int64_t H, choir_bilstm_weights *out);

/* choir_op_bilstm with weights from choir_backend_bilstm_weights: x [B, T, In],
 * lens int32 [B] (NULL: all T) -> y [B, T, 2H], zeros past each length. On
 * the CPU each sequence is choir_lstm forward then reverse with the biases as
 * stored (bit for bit a single-sequence LSTM). Kernel scratch: 4H (T + 1)
 * floats (CPU); working memory B T 8H + 2 B H floats (CUDA). */
int choir_op_bilstm_w(choir_stream *s, const float *x, int64_t B, int64_t T,
                      const choir_bilstm_weights *w, const int32_t *lens, float *y);

#ifdef __cplusplus
}
#endif
#endif
