/* choir/kernels.h: the compute kernels the models are built from.
 *
 * Conventions: row-major float32 arrays; sizes in elements; output buffers are
 * provided by the caller (from an arena) and never alias an input unless the
 * comment says in-place. Every kernel has a plain C reference; SIMD versions
 * (AVX2/FMA on x86-64) are chosen at run time, and large loops are split over
 * the default thread pool. Sequence data for convolutions is channels-first
 * [C, T] for one item; batches loop over items.
 *
 * choir_kernels_set_isa() lets tests force the reference path and compare.
 *
 * Threads: the first kernel call sets OpenBLAS to one thread; all kernel
 * threading is choir's default pool (CHOIR_THREADS). Code that calls cblas
 * itself therefore gets single-threaded BLAS. Kernels may be called from any
 * thread; a call made while the pool is busy runs on the calling thread. */
#ifndef CHOIR_KERNELS_H
#define CHOIR_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "choir/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum choir_isa {
    CHOIR_ISA_REF = 0,  /* portable C */
    CHOIR_ISA_AVX2 = 1, /* x86-64 AVX2 + FMA + F16C */
    CHOIR_ISA_NEON = 2,
    CHOIR_ISA_AVX512 = 3 /* x86-64 AVX-512 F/BW/VL beside AVX2 (the weight-streaming dots) */
} choir_isa;

/* The best instruction set this CPU supports / the one in use now. */
choir_isa choir_kernels_best_isa(void);
choir_isa choir_kernels_isa(void);
/* Forces an ISA (one the CPU supports: the best, AVX2 on an AVX-512 CPU, or
 * the reference; anything else falls back to the reference); returns the one
 * in use. Process-wide: call only when no kernel is running. The environment
 * variable CHOIR_ISA (ref, avx2, avx512) sets the first choice the same way,
 * for benchmarks that compare the twins. */
choir_isa choir_kernels_set_isa(choir_isa isa);
const char *choir_isa_name(choir_isa isa);
/* Names of the kernels and the ISA each one runs with, for `choir info`:
 * writes up to `max` pointers to static strings, returns the count. */
int choir_kernels_describe(const char **names, const char **isas, int max);

/* --- matrix products --------------------------------------------------- */

/* C[M,N] = alpha * op(A) * op(B) + beta * C, row-major with leading dimensions,
 * op(X) = X or X^T. Large products go through OpenBLAS. */
void choir_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                    float *C, int64_t ldc);

/* The linear layer: y[M, W.rows] = x[M, W.cols] * W^T (+ bias[W.rows] if not
 * NULL), for W in any storage (f32, f16, bf16 with f32 accumulation; quantized
 * weights dequantized on the fly). M = 1 is the matrix-vector case. */
void choir_linear(const float *x, int64_t M, const choir_weight *W, const float *bias, float *y);
/* n linear layers over the same input rows (a decoder layer's q, k and v
 * projections): y[i] = x W[i]^T (+ bias[i], which may be NULL) for i < n,
 * each output bit-identical to choir_linear(x, M, W[i], bias[i], y[i]).
 * When every W[i] is f32, f16 or bf16 with the same cols and M is a decoder
 * step's few rows (the dot-product path), all of them are one pool job, so
 * the threads meet once instead of n times; otherwise it is n calls. n <= 8;
 * no y[i] may alias x. */
void choir_linear_n(const float *x, int64_t M, int n, const choir_weight *const *W,
                    const float *const *bias, float *const *y);

/* --- elementwise (in-place where the name says so) ---------------------- */
void choir_add(const float *a, const float *b, float *y, int64_t n);   /* y = a + b */
void choir_mul(const float *a, const float *b, float *y, int64_t n);   /* y = a * b */
void choir_scale(float *x, float s, int64_t n);                          /* x *= s */
void choir_add_bias_rows(float *x, const float *bias, int64_t rows, int64_t cols); /* x[r,:] += bias */
void choir_gelu_erf(float *x, int64_t n);   /* in place, 0.5x(1+erf(x/sqrt2)) */
void choir_gelu_tanh(float *x, int64_t n);  /* in place, tanh approximation */
void choir_leaky_relu(float *x, int64_t n, float slope); /* in place */
void choir_relu(float *x, int64_t n);
void choir_sigmoid(float *x, int64_t n);
void choir_tanh(float *x, int64_t n);
void choir_silu(float *x, int64_t n);
/* Snake activation in place over x[C, T], per channel:
 * x += (1 / alpha[c]) * sin(alpha[c] * x)^2 (alpha nonzero). */
void choir_snake(float *x, int64_t C, int64_t T, const float *alpha);

/* --- normalisation ----------------------------------------------------- */
/* y[r,:] = (x[r,:] - mean) / sqrt(var + eps) * gamma + beta; gamma/beta may be
 * NULL (1 / 0). y may equal x. */
void choir_layer_norm(const float *x, float *y, int64_t rows, int64_t dim, const float *gamma,
                      const float *beta, float eps);
/* Instance norm over time for x[C, T]: each channel to zero mean, unit (biased)
 * variance; then gamma[c], beta[c] if not NULL. y may equal x. */
void choir_instance_norm(const float *x, float *y, int64_t C, int64_t T, const float *gamma,
                         const float *beta, float eps);
/* Numerically stable softmax of each row, in place. */
void choir_softmax(float *x, int64_t rows, int64_t dim);
/* Greedy selection: the index of x's largest value (n > 0), the first on a
 * tie, as the plain loop `best = 0; if (x[i] > x[best]) best = i` finds it:
 * a NaN is never picked, except that a row starting with NaN gives 0. */
int64_t choir_argmax_f32(const float *x, int64_t n);

/* --- convolutions (PyTorch semantics, zero padding) --------------------- */
/* Output length of conv1d. */
int64_t choir_conv1d_out_len(int64_t T, int64_t kernel, int stride, int padding, int dilation);
/* y[Cout, Tout] = conv1d(x[Cin, T]); weight [Cout, Cin/groups, kernel] f32, bias
 * [Cout] or NULL. Cin and Cout must be multiples of groups; stride, dilation >= 1,
 * padding >= 0 (as PyTorch requires). Nothing is written when Tout <= 0. */
void choir_conv1d(const float *x, int64_t Cin, int64_t T, const float *weight, const float *bias,
                  int64_t Cout, int64_t kernel, int stride, int padding, int dilation, int groups,
                  float *y);
/* Output length of conv_transpose1d. */
int64_t choir_conv_transpose1d_out_len(int64_t T, int64_t kernel, int stride, int padding,
                                       int output_padding, int dilation);
/* y[Cout, Tout] = conv_transpose1d(x[Cin, T]); weight [Cin, Cout/groups, kernel]
 * (PyTorch layout), bias [Cout] or NULL. Same preconditions as conv1d, and
 * output_padding < max(stride, dilation). */
void choir_conv_transpose1d(const float *x, int64_t Cin, int64_t T, const float *weight,
                            const float *bias, int64_t Cout, int64_t kernel, int stride,
                            int padding, int output_padding, int dilation, int groups, float *y);

/* --- recurrent --------------------------------------------------------- */
/* One LSTM direction over x[T, In] (PyTorch gate order i, f, g, o):
 * w_ih [4H, In], w_hh [4H, H], b_ih/b_hh [4H] or NULL. h and c [H] hold the
 * initial state on entry (NULL = zeros) and the final state on return. Writes
 * h_t to out[t * out_stride + 0 .. H-1]; reverse runs t = T-1 .. 0.
 * `scratch` holds at least 4*H*(T+1) floats. */
void choir_lstm(const float *x, int64_t T, int64_t In, int64_t H, const float *w_ih,
                const float *w_hh, const float *b_ih, const float *b_hh, float *h, float *c,
                bool reverse, float *out, int64_t out_stride, float *scratch);

/* --- attention --------------------------------------------------------- */
/* Multi-head scaled dot-product attention for one sequence.
 * q: [Tq, n_head*Dh] with row stride ldq; k, v: [Tk, n_head*Dh] with row strides
 * ldk, ldv (a KV cache laid out [T_max, d] passes its filled prefix);
 * mask: additive [Tq, Tk] or NULL; causal: query i sees keys <= i + (Tk - Tq);
 * scale: usually 1/sqrt(Dh). out: [Tq, n_head*Dh] with row stride ldo.
 * A query row whose keys are all masked (-inf) gets zeros. The kernel takes
 * min(Tq, 128) * Tk floats of scratch per pool thread from choir_alloc for the
 * duration of the call; if that fails it runs a slower path needing no memory. */
void choir_attention(const float *q, int64_t ldq, const float *k, int64_t ldk, const float *v,
                     int64_t ldv, float *out, int64_t ldo, int64_t Tq, int64_t Tk, int n_head,
                     int64_t Dh, float scale, const float *mask, bool causal);
/* choir_attention over f16 keys and values (uint16 storage, strides in
 * elements; a decoder's cross-attention cache in half the bytes): each value
 * is widened to f32 where it is read, so the result is that of f32
 * attention over the rounded cache. A decoder step (Tq < 8 rows, Tk <= 4096
 * keys) reads them where they lie and needs no memory; a larger call widens
 * them into 2 Tk n_head Dh floats of kernel scratch first, then runs
 * choir_attention (and its scratch). Returns 0, or CHOIR_ENOMEM (nothing
 * written) when that memory cannot be had. */
int choir_attention_f16(const float *q, int64_t ldq, const uint16_t *k, int64_t ldk,
                        const uint16_t *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                        int64_t Tk, int n_head, int64_t Dh, float scale, const float *mask,
                        bool causal);
/* The same over bf16 keys and values (a bf16 model's caches), with the same
 * contract: a step reads them where they lie, a larger call widens them into
 * kernel scratch first. */
int choir_attention_bf16(const float *q, int64_t ldq, const uint16_t *k, int64_t ldk,
                         const uint16_t *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                         int64_t Tk, int n_head, int64_t Dh, float scale, const float *mask,
                         bool causal);

/* --- kernel scratch ------------------------------------------------------ */
/* Kernels that need temporary memory (attention scores, f16/bf16 weight
 * blocks converted for sgemm, im2col tiles, quantized-input sums) take it
 * from a scratch block bound to the calling thread when one is bound and
 * has room, instead of from choir_alloc, so that a planned forward pass
 * allocates nothing. A call that finds no room still runs, with counted
 * memory of its own, and is counted in `misses` (and its want in `need`).
 * The binding is per thread: the pool's workers use the caller's block,
 * split by the kernel. Used by choir/backend.h streams; most code never
 * binds anything and the kernels allocate as they always did. */
typedef struct choir_kernel_scratch {
    void *base;     /* the block, aligned to CHOIR_ALIGN */
    size_t bytes;
    size_t used;    /* taken by running kernels */
    size_t need;    /* the most any call wanted at once */
    int64_t misses; /* calls that found no room */
} choir_kernel_scratch;

/* Binds `ks` to the calling thread (NULL unbinds); returns the previous
 * binding, so that bindings nest. */
choir_kernel_scratch *choir_kernels_bind_scratch(choir_kernel_scratch *ks);

/* Bytes of scratch one call takes with the default pool's thread count (0
 * when it takes none); a block of that size serves the call. */
size_t choir_linear_scratch_bytes(int64_t M, const choir_weight *W);
size_t choir_attention_scratch_bytes(int64_t Tq, int64_t Tk);
/* choir_attention_f16 / _bf16 over keys of `cols` = n_head Dh values: the
 * widened keys and values of a larger call, then its f32 attention's. */
size_t choir_attention_half_scratch_bytes(int64_t Tq, int64_t Tk, int64_t cols);
size_t choir_conv1d_scratch_bytes(int64_t Cin, int64_t T, int64_t kernel, int stride,
                                  int padding, int dilation, int groups);
size_t choir_conv_transpose1d_scratch_bytes(int64_t Cin, int64_t T, int64_t Cout,
                                            int64_t kernel, int groups);

/* --- neural source-filter: the harmonic-plus-noise source ---------------- */

/* The excitation of an NSF / iSTFTNet generator (SineGen and
 * SourceModuleHnNSF, as Kokoro's generator uses them) and its STFT. From F0
 * (Hz, one value per `upsample` samples): harmonic h's phase is the running
 * sum of frac(F0 (h + 1) / sample_rate) over F0 values (summed in double,
 * rounded to float per value, times 2 pi upsample), linearly interpolated to
 * the sample rate (torch upsample_linear1d, align_corners false); voiced
 * samples (F0 > voiced_threshold) get sine_amp sin(phase) plus voiced_noise
 * times a standard normal draw, unvoiced ones unvoiced_noise times a draw;
 * the harmonics merge as tanh(lin_w . e + lin_b). The STFT is torch.stft
 * (center, reflect padding, periodic Hann of n_fft, hop): magnitudes of the
 * n_fft / 2 + 1 bins, then their phases (atan2), each DFT summed in double.
 * Every float32 operation is the reference's, in its order (see
 * kokoro_generator.c): the phase reaches ~1e5 rad. */
#define CHOIR_NSF_MAX_HARMONICS 16
#define CHOIR_NSF_MAX_NFFT 32
typedef struct choir_nsf_source {
    int harmonics;     /* 1..CHOIR_NSF_MAX_HARMONICS */
    int upsample;      /* samples per F0 value, a multiple of hop */
    float sample_rate; /* Hz */
    float sine_amp, voiced_noise, unvoiced_noise, voiced_threshold;
    float lin_w[CHOIR_NSF_MAX_HARMONICS], lin_b;
    int n_fft, hop; /* n_fft even, 2..CHOIR_NSF_MAX_NFFT */
} choir_nsf_source;

/* n values of the seeded standard normal stream, starting at value `first`:
 * splitmix64 (state seed + k 0x9E3779B97F4A7C15 at draw k) and Box-Muller in
 * double, each pair of values (2i, 2i + 1) from draws 2i + 1 and 2i + 2 as
 * r cos(a), r sin(a). Any split of the stream gives the same values as one
 * fill from 0, so a device can draw value i on its own. */
void choir_gaussian_stream(float *x, int64_t first, int64_t n, uint64_t seed);

/* Working floats of choir_nsf_source_stft for n_f0 F0 values. */
int64_t choir_nsf_source_work_floats(const choir_nsf_source *p, int64_t n_f0);

/* S[n_fft + 2, ld] (rows of ld floats; frames F = upsample n_f0 / hop + 1
 * written, ld >= F) = the STFT of the source of f0[n_f0]. The draws are
 * noise [upsample n_f0, harmonics] when non-NULL, else the stream of
 * *seed from value 0 when seed is non-NULL, else zero. work holds
 * choir_nsf_source_work_floats floats. Spread over the default pool (inline
 * when it is busy). */
void choir_nsf_source_stft(const choir_nsf_source *p, const float *f0, int64_t n_f0,
                           const float *noise, const uint64_t *seed, float *S, int64_t ld,
                           float *work);

/* --- machine ceilings ---------------------------------------------------- */
/* Streaming read bandwidth in GB/s (1e9 bytes per second): `bytes` (at
 * least 1 MiB; use more than the last-level cache) are read `passes` times
 * over the default pool, and the best pass is returned; 0 when the buffer
 * cannot be allocated. The ceiling of memory-bound kernels such as a
 * batch-1 decoder step, which reads every weight once. */
double choir_mem_read_gbs(size_t bytes, int passes);

#ifdef __cplusplus
}
#endif
#endif
