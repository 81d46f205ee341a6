/* choir/cuda_audio.h: CUDA kernels for vocoders and audio decoders (Kokoro's
 * decoder and iSTFTNet generator first).
 *
 * Same conventions as choir/cuda.h: every call is enqueued on the context's
 * stream and returns once queued; pointers are device memory; activations are
 * row-major float32. Unlike cuda.h these kernels are batched: a tensor
 * [B, C, T] holds B pieces of different lengths, each padded to T, and piece
 * b's valid length is lens[b] (a device int32 array [B]; NULL means all T).
 * Every kernel here keeps the padding ("the tail", t >= lens[b]) at zero on
 * output, so that a convolution over the padded tensor reads zeros past a
 * piece's end exactly as zero padding would: piece b's valid outputs then
 * equal the unbatched result on its own [C, lens[b]] (up to the summation
 * order cuBLAS picks). Inputs must have zero tails too.
 *
 * CPU references (the oracle of tests/cuda/kokoro_gpu_check.c): choir_conv1d,
 * choir_conv_transpose1d, choir_instance_norm, choir_snake, choir_leaky_relu
 * in choir/kernels.h, and Kokoro's own inverse STFT (kokoro_generator.c).
 *
 * Errors: 0 or a negative CHOIR_E* code, err filled (may be NULL). */
#ifndef CHOIR_CUDA_AUDIO_H
#define CHOIR_CUDA_AUDIO_H

#include <stdbool.h>
#include <stdint.h>

#include "choir/cuda.h"
#include "choir/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A convolution weight on the device: f32, or bf16 (uint16 storage) for
 * tensor-core products with f32 accumulation (activations are rounded to
 * bf16 on the way into the product; outputs stay f32). */
typedef struct choir_cuda_conv_weight {
    const void *w; /* conv1d [Cout, Cin, K]; conv_transpose1d [Cin, Cout, K] */
    bool bf16;
} choir_cuda_conv_weight;

/* y[B, Cout, Tout] = conv1d(x[B, Cin, T]) per piece (groups 1, zero padding),
 * Tout = (T + 2 padding - dilation (K - 1) - 1) / stride + 1; bias [Cout] or
 * NULL; out_lens: the pieces' output lengths (tails zeroed), NULL = all Tout.
 * y must not alias x. Two paths (choir_cuda_conv_set_path):
 * - implicit GEMM on the tensor cores (stride 1, K <= 16, (K - 1) dilation
 *   <= 64): no tap matrix; the weight re-laid in context scratch
 *   (Cout Cin K values, padded to 128 rows). Precision by the weight and
 *   the context: bf16 weights give bf16 operands; f32 weights give TF32
 *   operands in TF32 mode (choir_cuda_set_tf32), else three TF32 products
 *   per pair (each operand split into two TF32 parts: about f32 accuracy);
 *   f32 accumulation throughout.
 * - im2col + batched cuBLAS product (every other convolution): the taps use
 *   context scratch, at most ~512 MB at a time (pieces are taken in groups
 *   that fit). */
int choir_cuda_conv1d_batched(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                              choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                              int64_t kernel, int stride, int padding, int dilation,
                              const int32_t *out_lens, float *y, choir_err *err);

/* Which path choir_cuda_conv1d_batched takes: AUTO (the default) and
 * IMPLICIT take the implicit GEMM wherever it applies, IM2COL always the
 * cuBLAS product over taps (for comparisons). */
typedef enum choir_cuda_conv_path {
    CHOIR_CUDA_CONV_AUTO = 0,
    CHOIR_CUDA_CONV_IM2COL = 1,
    CHOIR_CUDA_CONV_IMPLICIT = 2
} choir_cuda_conv_path;
void choir_cuda_conv_set_path(choir_cuda *cu, choir_cuda_conv_path path);

/* Options of this context's implicit convolutions (choir_cuda_conv1d_batched's
 * implicit path and choir_cuda_conv1d_adain_snake), bits of
 * choir_cuda_conv_option; 0 is the default (128 x 128 tiles, x staged through
 * registers, the fused pre-activation applied as it is staged). A context
 * starts with PREPASS (on since it ran on an H100 on 7 Dec 2026, unless the
 * environment has CHOIR_CONV_PREPASS=0 at choir_cuda_init) and with WIDE or
 * FAST_SIN only when CHOIR_CONV_WIDE=1 or CHOIR_CONV_FAST_SIN=1.
 * - PREPASS: choir_cuda_conv1d_adain_snake writes snake(adain(x)) once into
 *   context scratch in the product's operand precision (bf16, or f32
 *   TF32-rounded / f32) and the convolution brings it by cp.async (no
 *   transform in its main loop); the same floats as without it. Items in
 *   groups of at most choir_cuda_conv_set_prepass_bytes of scratch.
 * - WIDE: 128 x 256 tiles of 8 warps of 64 x 64, three weight stages (bf16
 *   and TF32; tf32x3 keeps its shape); the same floats.
 * - FAST_SIN: Snake's sin by the SFU after a range reduction, in the fused
 *   bf16 and TF32 convolutions (~4e-7 absolute on sin, under those modes'
 *   operand rounding; tf32x3 keeps sinf): no longer the same floats.
 * - WIDE_BF16: WIDE for bf16 weights only (a context's default with
 *   PREPASS: Kokoro's 32 pieces in bf16 0.78 -> 0.74 s on an H100, 7 Dec
 *   2026; TF32 not yet compared).
 * NULL: no-op (get: 0). */
typedef enum choir_cuda_conv_option {
    CHOIR_CUDA_CONV_PREPASS = 1,
    CHOIR_CUDA_CONV_WIDE = 2,
    CHOIR_CUDA_CONV_FAST_SIN = 4,
    CHOIR_CUDA_CONV_WIDE_BF16 = 8
} choir_cuda_conv_option;
void choir_cuda_conv_set_options(choir_cuda *cu, unsigned options);
unsigned choir_cuda_conv_get_options(const choir_cuda *cu);
/* The most context scratch the prepass's buffer takes at once (its items in
 * groups; at least one item a group whatever the bytes): bytes > 0, else the
 * default (512 MB, or CHOIR_CONV_PREPASS_MB at choir_cuda_init). */
void choir_cuda_conv_set_prepass_bytes(choir_cuda *cu, int64_t bytes);

/* The pre-activation of choir_cuda_conv1d_adain_snake: AdaIN as
 * choir_cuda_adain (lens, norm_w, norm_b, gb, gb_stride, eps), then Snake as
 * choir_cuda_snake with alpha [C]. */
typedef struct choir_cuda_adain_snake {
    const int32_t *lens;          /* the input's valid lengths [B], NULL: all T */
    const float *norm_w, *norm_b; /* [C] or NULL */
    const float *gb;              /* gamma [C] then beta [C] at gb + b gb_stride */
    int64_t gb_stride;
    float eps;
    const float *alpha; /* [C] */
    /* x's statistics already taken (NULL: one pass over x here): partials
     * [B, C, choir_cuda_adain_stat_tiles(T), 2] as choir_cuda_adain_stats or
     * the producing choir_cuda_conv1d_adain_snake_stats write them, over the
     * same lens */
    const double *part;
} choir_cuda_adain_snake;

/* AdaIN's statistics of x [B, C, T] as partials, for a consumer that sums
 * them (choir_cuda_adain_snake.part): part [B, C, tiles, 2] doubles, tiles =
 * choir_cuda_adain_stat_tiles(T) = ceil(T / 128), slot (b, c, i) the sum and
 * the sum of squares (in double, a fixed order) of x[b, c, t] over frames t
 * of [128 i, 128 i + 128) below lens[b] (clamped to [0, T]; lens NULL: all
 * T), as k_ig_stats counts them. choir_cuda_adain_moments: mean and
 * variance [B C, 2] (doubles, the arithmetic that gives the fused
 * operation's coefficients) from partials (part) or, part NULL, from x by
 * choir_cuda_conv1d_adain_snake's own statistics pass (context scratch: 16
 * bytes per (item, channel) and segment); for checks. */
int64_t choir_cuda_adain_stat_tiles(int64_t T);
int choir_cuda_adain_stats(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                           const int32_t *lens, double *part, choir_err *err);
int choir_cuda_adain_moments(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                             const int32_t *lens, const double *part, double *mean_var,
                             choir_err *err);

/* y = residual + conv1d(snake(adain(x))) with stride 1 (Tout = T + 2 padding
 * - dilation (K - 1)): AdaIN's statistics in one pass over x (double sums),
 * then the implicit-GEMM convolution applying AdaIN's affine and Snake to x
 * as it stages it (the activation is never stored; with
 * CHOIR_CUDA_CONV_PREPASS written once first, then convolved). bias [Cout] or NULL;
 * out_lens as choir_cuda_conv1d_batched (y is residual there, or 0);
 * residual [B, Cout, Tout] or NULL, and y may alias it (not x). Precision
 * as the implicit path of choir_cuda_conv1d_batched. CHOIR_EUNSUPPORTED
 * where that path does not apply (the caller runs the unfused kernels).
 * Context scratch: the packed weight and 24 bytes per (item, channel) and
 * statistics segment (with CHOIR_CUDA_CONV_PREPASS also the prepass's
 * buffer: 2 or 4 bytes a value of the items of one group). */
int choir_cuda_conv1d_adain_snake(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                  int64_t T, const choir_cuda_adain_snake *pre,
                                  choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                                  int64_t kernel, int padding, int dilation,
                                  const int32_t *out_lens, const float *residual, float *y,
                                  choir_err *err);
/* The same, the convolution's epilogue also writing y's AdaIN statistics for
 * the operation that reads y next: stats_out (NULL: none) [B, Cout,
 * choir_cuda_adain_stat_tiles(Tout), 2] as choir_cuda_adain_stats(y, over
 * stats_lens) would write them, each slot summed in a fixed order within its
 * block (no atomics: the same bits every run, though not choir_cuda_adain_stats's
 * bits: another order of the same double sums). */
int choir_cuda_conv1d_adain_snake_stats(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                        int64_t T, const choir_cuda_adain_snake *pre,
                                        choir_cuda_conv_weight weight, const float *bias,
                                        int64_t Cout, int64_t kernel, int padding, int dilation,
                                        const int32_t *out_lens, const float *residual, float *y,
                                        double *stats_out, const int32_t *stats_lens,
                                        choir_err *err);

/* y[B, Cout, Tout] = conv_transpose1d(x[B, Cin, T]) per piece (groups 1),
 * Tout = (T - 1) stride - 2 padding + K + output_padding; weight [Cin, Cout, K]
 * (PyTorch layout); bias [Cout] or NULL; out_lens as above. One product
 * W^T x into scratch (Cout K T floats per piece) and a gather over taps. */
int choir_cuda_conv_transpose1d_batched(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                        int64_t T, choir_cuda_conv_weight weight, const float *bias,
                                        int64_t Cout, int64_t kernel, int stride, int padding,
                                        int output_padding, const int32_t *out_lens, float *y,
                                        choir_err *err);

/* Depthwise conv_transpose1d (groups = C): weight [C, 1, K] f32, bias [C] or
 * NULL, x [B, C, T] -> y [B, C, Tout], Tout as above. Direct kernel. */
int choir_cuda_conv_transpose1d_depthwise(choir_cuda *cu, const float *x, int64_t B, int64_t C,
                                          int64_t T, const float *weight, const float *bias,
                                          int64_t kernel, int stride, int padding,
                                          int output_padding, const int32_t *out_lens, float *y,
                                          choir_err *err);

/* AdaIN: per piece and channel, instance norm over the piece's valid
 * samples (biased variance, eps), the norm's own affine (norm_w, norm_b [C],
 * either may be NULL), then y = (1 + gamma) * v + beta, where gamma and beta
 * are piece b's style projection: gb + b * gb_stride holds gamma [C] then
 * beta [C]. x, y [B, C, T]; y may equal x. */
int choir_cuda_adain(choir_cuda *cu, const float *x, float *y, int64_t B, int64_t C, int64_t T,
                     const int32_t *lens, const float *norm_w, const float *norm_b, const float *gb,
                     int64_t gb_stride, float eps, choir_err *err);

/* x = x >= 0 ? x : slope x, in place over n values (zero stays zero). */
int choir_cuda_leaky_relu(choir_cuda *cu, float *x, int64_t n, float slope, choir_err *err);

/* Snake in place over x[B, C, T]: x += (1 / alpha[c]) sin^2(alpha[c] x). */
int choir_cuda_snake(choir_cuda *cu, float *x, int64_t B, int64_t C, int64_t T, const float *alpha,
                     choir_err *err);

/* y = (a + b) * scale over n values; y may alias a or b. */
int choir_cuda_add_scale(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                         float scale, choir_err *err);

/* Nearest up-sampling by 2 in time: y[b, c, 2t] = y[b, c, 2t + 1] = x[b, c, t];
 * x [B, C, T], y [B, C, 2T]. */
int choir_cuda_upsample2_nearest(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                                 float *y, choir_err *err);

/* Reflection padding per piece: x [B, C, T] with valid lengths lens ->
 * y [B, C, T + left + right], piece b occupying lens[b] + left + right
 * samples (PyTorch ReflectionPad1d: the edge sample is not repeated; left and
 * right must be < lens[b]). */
int choir_cuda_reflect_pad(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                           const int32_t *lens, int left, int right, float *y, choir_err *err);

/* Channel concatenation: dst[b, c0 + c, t] = src[b, c, t] for c < Cs, where
 * src is [B, Cs, T] and dst [B, Cd, T]. */
int choir_cuda_copy_channels(choir_cuda *cu, const float *src, int64_t B, int64_t Cs, int64_t T,
                             float *dst, int64_t Cd, int64_t c0, choir_err *err);

/* iSTFTNet's tail and inverse STFT (torch.istft, center, periodic Hann,
 * hop `hop`, window n_fft, n_fft even and <= 64): P [B, n_fft + 2, F] holds
 * log-magnitudes in rows 0..n_fft/2 and phases-before-sine in the rest; the
 * spectrum is exp(P_mag) e^{i sin(P_phase)}. frames[b] (device int32, NULL =
 * all F) is piece b's frame count; its output is hop (frames[b] - 1) samples
 * of out [B, hop (F - 1)] (tail zeroed). The DFT is summed in double. */
int choir_cuda_istft_magphase(choir_cuda *cu, const float *P, int64_t B, int64_t F,
                              const int32_t *frames, int n_fft, int hop, float *out,
                              choir_err *err);

/* The harmonic-plus-noise source and its STFT for B items
 * (choir_op_nsf_source_stft, whose CPU twin choir_nsf_source_stft is the
 * oracle): f0 [B, T], lens [B] (device int32, NULL = all T), seeds and
 * noisy host arrays [B] (seeds NULL: no draws; noisy NULL: all drawn) ->
 * S [B, n_fft + 2, upsample T / hop + 1], zero past each item's frames.
 * work: B (upsample + harmonics) T floats of device memory. Three kernels
 * per 32 items: the phase sums (one warp per item, harmonic h on lane h,
 * sequential over F0 values in double as the CPU), the source (a thread per
 * sample: its draws from the counter-based stream, sin and tanh in double
 * rounded once), the STFT (a thread per frame, DFTs in double in the CPU's
 * order, hypot and atan2 in double rounded once). Every float32 operation
 * is the CPU's, rounded alike (no contraction into fused multiply-adds but
 * where the CPU fuses). */
int choir_cuda_nsf_source_stft(choir_cuda *cu, const float *f0, int64_t B, int64_t T,
                               const int32_t *lens, const choir_nsf_source *p,
                               const uint64_t *seeds, const bool *noisy, float *work, float *S,
                               choir_err *err);

/* Bidirectional one-layer LSTM over B sequences at once (PyTorch: gate order
 * i, f, g, o; zero initial state), with packed-sequence semantics: piece b
 * has lens[b] valid steps (device int32 [B], NULL = all T) and its reverse
 * direction starts at its own last valid step, so each piece's output equals
 * the LSTM run over that piece alone (choir_lstm in choir/kernels.h, forward
 * then reverse). x [B, T, In] (rows past a piece's length are not read);
 * w_ih [2, 4H, In] and w_hh [2, 4H, H], forward direction first; bias
 * [2, 4H] (b_ih + b_hh per direction) or NULL. y [B, T, 2H] receives
 * [forward h_t ; reverse h_t] per step, zeros past a piece's length.
 * scratch: B T 8H + 2 B H floats of device memory (the input projections of
 * every step, then the cell states). H a multiple of 32, at most 512.
 * One cuBLAS product (f32, no TF32) for all input projections, then T
 * launches of one step kernel covering both directions and all B pieces
 * (each warp keeps one hidden unit's four W_hh rows in registers). */
int choir_cuda_bilstm(choir_cuda *cu, const float *x, int64_t B, int64_t T, int64_t In, int64_t H,
                      const float *w_ih, const float *w_hh, const float *bias,
                      const int32_t *lens, float *scratch, float *y, choir_err *err);
/* Floats of scratch choir_cuda_bilstm needs. */
int64_t choir_cuda_bilstm_scratch_floats(int64_t B, int64_t T, int64_t H);
/* on: choir_cuda_bilstm runs its T steps as one cooperative kernel (2H / 4
 * blocks of 256 threads, each holding 4 hidden units' W_hh rows in shared
 * memory, a grid-wide barrier a step) instead of T launches of the step
 * kernel; where that launch cannot run (no cooperative launch, the blocks not
 * all resident, H not a multiple of 4) the step kernel runs, with one warning
 * per context. Same results to float summation order. On by default since it
 * ran on an H100 on 7 Dec 2026 (CHOIR_KOKORO_LSTM_PERSIST=0 at
 * choir_cuda_init turns it off). */
void choir_cuda_lstm_set_persist(choir_cuda *cu, bool on);

#ifdef __cplusplus
}
#endif
#endif
