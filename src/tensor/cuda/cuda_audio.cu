/* Batched audio-decoder kernels (choir/cuda_audio.h): convolutions over
 * padded [B, C, T] pieces, AdaIN, Snake, up-sampling, reflection padding and
 * the iSTFT tail. Every kernel writes zeros past a piece's valid length so
 * that the next convolution sees zero padding there. */
#include <math.h>
#include <stdint.h>

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include "choir/cuda_audio.h"
#include "choir/log.h"
#include "tensor/cuda/cuda_internal.h"

namespace cg = cooperative_groups;

#define AU_THREADS 256
#define NORM_THREADS 256
/* Taps of a batched im2col are taken a group of pieces at a time so that the
 * scratch stays below this (one piece always fits, whatever its size). */
#define AU_SCRATCH_CAP ((size_t)512 << 20)

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

static unsigned au_blocks(int64_t n) { return choir_cuda_blocks(n, AU_THREADS); }

static __device__ __forceinline__ int64_t piece_len(const int32_t *lens, int64_t b, int64_t T) {
    return lens ? (int64_t)lens[b] : T;
}

/* --- bias and tails ------------------------------------------------------ */

/* y[b, c, t] += bias[c] inside the piece, 0 in its tail. */
__global__ void k_bias_mask(float *y, const float *bias, int64_t B, int64_t C, int64_t T,
                            const int32_t *lens) {
    GRID_STRIDE(i, B * C * T) {
        int64_t t = i % T, c = (i / T) % C, b = i / (C * T);
        if (t >= piece_len(lens, b, T))
            y[i] = 0.0f;
        else if (bias)
            y[i] += bias[c];
    }
}

static int bias_mask(choir_cuda *cu, float *y, const float *bias, int64_t B, int64_t C, int64_t T,
                     const int32_t *lens, choir_err *err) {
    if (!bias && !lens) return 0;
    k_bias_mask<<<au_blocks(B * C * T), AU_THREADS, 0, cu->stream>>>(y, bias, B, C, T, lens);
    return choir_cuda_check_launch(err, "bias and mask");
}

/* --- products ------------------------------------------------------------- */

/* Row-major C[M, N] = op(A)[M, K] op(B)[K, N] for `batch` matrices at the
 * given strides (in elements), through cuBLAS's column-major view: C^T =
 * op(B)^T op(A)^T. A and B are f32 or bf16, C f32, accumulation f32 (no TF32). */
static int gemm_rm(choir_cuda *cu, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                   int64_t lda, int64_t sa, const void *Bm, int64_t ldb, int64_t sb, float *C,
                   int64_t ldc, int64_t sc, int64_t batch, bool bf16, choir_err *err) {
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        cu->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
        (int)K, &one, Bm, t, (int)ldb, (long long)sb, A, t, (int)lda, (long long)sa, &zero, C,
        CUDA_R_32F, (int)ldc, (long long)sc, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return choir_cuda_blas_fail(err, st, "batched conv product");
    return 0;
}

/* cols[b, ci*K + k, t] = x[b, ci, t*stride - padding + k*dilation] (0 outside),
 * as f32 or bf16. */
template <typename Tc>
__global__ void k_im2col_b(const float *__restrict__ x, int64_t nb, int64_t Cin, int64_t T,
                           int64_t K, int stride, int padding, int dilation, int64_t Tout,
                           Tc *__restrict__ cols) {
    int64_t rows = Cin * K;
    GRID_STRIDE(i, nb * rows * Tout) {
        int64_t t = i % Tout, r = (i / Tout) % rows, b = i / (rows * Tout);
        int64_t ci = r / K, k = r % K;
        int64_t ts = t * stride - padding + k * dilation;
        float v = ts >= 0 && ts < T ? x[(b * Cin + ci) * T + ts] : 0.0f;
        cols[i] = (Tc)v;
    }
}

template <typename Tc>
__global__ void k_convert(const float *__restrict__ x, int64_t n, Tc *__restrict__ y) {
    GRID_STRIDE(i, n) y[i] = (Tc)x[i];
}

static int64_t group_of(size_t per_piece, int64_t B) {
    int64_t g = per_piece > 0 ? (int64_t)(AU_SCRATCH_CAP / per_piece) : B;
    if (g < 1) g = 1;
    return g < B ? g : B;
}

int choir_cuda_conv1d_batched(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                              choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                              int64_t kernel, int stride, int padding, int dilation,
                              const int32_t *out_lens, float *y, choir_err *err) {
    if (B < 1 || Cin < 1 || Cout < 1 || kernel < 1 || stride < 1 || dilation < 1 || padding < 0 ||
        !weight.w)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: batched conv1d with B %lld, Cin %lld, Cout %lld, kernel %lld, "
                             "stride %d, padding %d, dilation %d",
                             (long long)B, (long long)Cin, (long long)Cout, (long long)kernel,
                             stride, padding, dilation);
    int64_t span = T + 2 * (int64_t)padding - (int64_t)dilation * (kernel - 1) - 1;
    if (span < 0) return 0;
    int64_t Tout = span / stride + 1, rows = Cin * kernel;
    if (choir_cuda_conv1d_implicit_ok(cu, Cin, Cout, kernel, stride, padding, dilation))
        return choir_cuda_conv1d_implicit(cu, x, B, Cin, T, weight, bias, Cout, kernel, padding,
                                          dilation, out_lens, y, err);
    if (kernel == 1 && stride == 1 && padding == 0 && !weight.bf16) {
        /* a pointwise f32 convolution is already a product: no taps to copy */
        int rc = gemm_rm(cu, false, false, Cout, T, Cin, weight.w, Cin, 0, x, T, Cin * T, y, T,
                         Cout * T, B, false, err);
        return rc ? rc : bias_mask(cu, y, bias, B, Cout, T, out_lens, err);
    }
    size_t esz = weight.bf16 ? 2 : 4;
    int64_t g = group_of((size_t)rows * Tout * esz, B);
    void *cols = choir_cuda_scratch(cu, (size_t)g * rows * Tout * esz, err);
    if (!cols) return err ? err->code : CHOIR_ENOMEM;
    for (int64_t b0 = 0; b0 < B; b0 += g) {
        int64_t nb = B - b0 < g ? B - b0 : g;
        const float *xb = x + b0 * Cin * T;
        if (weight.bf16)
            k_im2col_b<__nv_bfloat16><<<au_blocks(nb * rows * Tout), AU_THREADS, 0, cu->stream>>>(
                xb, nb, Cin, T, kernel, stride, padding, dilation, Tout, (__nv_bfloat16 *)cols);
        else
            k_im2col_b<float><<<au_blocks(nb * rows * Tout), AU_THREADS, 0, cu->stream>>>(
                xb, nb, Cin, T, kernel, stride, padding, dilation, Tout, (float *)cols);
        int rc = choir_cuda_check_launch(err, "batched im2col");
        /* y[b] [Cout, Tout] = W [Cout, rows] cols[b] [rows, Tout] */
        if (!rc)
            rc =
                gemm_rm(cu, false, false, Cout, Tout, rows, weight.w, rows, 0, cols, Tout,
                        rows * Tout, y + b0 * Cout * Tout, Tout, Cout * Tout, nb, weight.bf16, err);
        if (rc) return rc;
    }
    return bias_mask(cu, y, bias, B, Cout, Tout, out_lens, err);
}

/* y[b, co, o] = bias + sum over taps k with (o + padding - k) = i stride,
 * 0 <= i < T, of cols[b, co*K + k, i]. */
__global__ void k_col2im_t(const float *__restrict__ cols, int64_t B, int64_t Cout, int64_t T,
                           int64_t K, int stride, int padding, int64_t Tout,
                           const float *__restrict__ bias, const int32_t *out_lens,
                           float *__restrict__ y) {
    GRID_STRIDE(i, B * Cout * Tout) {
        int64_t o = i % Tout, co = (i / Tout) % Cout, b = i / (Cout * Tout);
        if (o >= piece_len(out_lens, b, Tout)) {
            y[i] = 0.0f;
            continue;
        }
        const float *cb = cols + (b * Cout + co) * K * T;
        float acc = bias ? bias[co] : 0.0f;
        int64_t j = o + padding;
        for (int64_t k = j % stride; k < K; k += stride) {
            int64_t s = j - k;
            if (s < 0) break;
            int64_t ii = s / stride;
            if (ii < T) acc += cb[k * T + ii];
        }
        y[i] = acc;
    }
}

int choir_cuda_conv_transpose1d_batched(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                        int64_t T, choir_cuda_conv_weight weight, const float *bias,
                                        int64_t Cout, int64_t kernel, int stride, int padding,
                                        int output_padding, const int32_t *out_lens, float *y,
                                        choir_err *err) {
    if (B < 1 || Cin < 1 || Cout < 1 || kernel < 1 || stride < 1 || padding < 0 ||
        output_padding < 0 || output_padding >= stride || !weight.w)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: batched conv_transpose1d with B %lld, Cin %lld, Cout %lld, "
                             "kernel %lld, stride %d, padding %d, output_padding %d",
                             (long long)B, (long long)Cin, (long long)Cout, (long long)kernel,
                             stride, padding, output_padding);
    int64_t Tout = (T - 1) * stride - 2 * (int64_t)padding + kernel + output_padding;
    if (T < 1 || Tout <= 0) return 0;
    int64_t rows = Cout * kernel;
    /* per piece: the product [rows, T] in f32, plus x in bf16 when asked */
    size_t per_piece = (size_t)rows * T * 4 + (weight.bf16 ? (size_t)Cin * T * 2 : 0);
    int64_t g = group_of(per_piece, B);
    char *scratch = (char *)choir_cuda_scratch(cu, (size_t)g * per_piece + 256, err);
    if (!scratch) return err ? err->code : CHOIR_ENOMEM;
    float *cols = (float *)scratch;
    void *xin = scratch + (((size_t)g * rows * T * 4 + 255) / 256) * 256;
    for (int64_t b0 = 0; b0 < B; b0 += g) {
        int64_t nb = B - b0 < g ? B - b0 : g;
        const float *xb = x + b0 * Cin * T;
        const void *xop = xb;
        int rc = 0;
        if (weight.bf16) {
            k_convert<__nv_bfloat16><<<au_blocks(nb * Cin * T), AU_THREADS, 0, cu->stream>>>(
                xb, nb * Cin * T, (__nv_bfloat16 *)xin);
            rc = choir_cuda_check_launch(err, "to bf16");
            xop = xin;
        }
        /* cols[b] [Cout*K, T] = W^T [Cout*K, Cin] x[b] [Cin, T]; W is [Cin, Cout*K] */
        if (!rc)
            rc = gemm_rm(cu, true, false, rows, T, Cin, weight.w, rows, 0, xop, T, Cin * T, cols, T,
                         rows * T, nb, weight.bf16, err);
        if (rc) return rc;
        k_col2im_t<<<au_blocks(nb * Cout * Tout), AU_THREADS, 0, cu->stream>>>(
            cols, nb, Cout, T, kernel, stride, padding, Tout, bias, out_lens ? out_lens + b0 : NULL,
            y + b0 * Cout * Tout);
        if ((rc = choir_cuda_check_launch(err, "transposed conv gather"))) return rc;
    }
    return 0;
}

__global__ void k_convt_dw(const float *__restrict__ x, int64_t B, int64_t C, int64_t T,
                           const float *__restrict__ w, const float *__restrict__ bias, int64_t K,
                           int stride, int padding, int64_t Tout, const int32_t *out_lens,
                           float *__restrict__ y) {
    GRID_STRIDE(i, B * C * Tout) {
        int64_t o = i % Tout, c = (i / Tout) % C, b = i / (C * Tout);
        if (o >= piece_len(out_lens, b, Tout)) {
            y[i] = 0.0f;
            continue;
        }
        const float *xr = x + (b * C + c) * T;
        float acc = bias ? bias[c] : 0.0f;
        int64_t j = o + padding;
        for (int64_t k = j % stride; k < K; k += stride) {
            int64_t s = j - k;
            if (s < 0) break;
            int64_t ii = s / stride;
            if (ii < T) acc += w[c * K + k] * xr[ii];
        }
        y[i] = acc;
    }
}

int choir_cuda_conv_transpose1d_depthwise(choir_cuda *cu, const float *x, int64_t B, int64_t C,
                                          int64_t T, const float *weight, const float *bias,
                                          int64_t kernel, int stride, int padding,
                                          int output_padding, const int32_t *out_lens, float *y,
                                          choir_err *err) {
    if (B < 1 || C < 1 || kernel < 1 || stride < 1 || padding < 0 || output_padding < 0 ||
        output_padding >= stride || !weight)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: depthwise conv_transpose1d with C %lld, kernel %lld, stride "
                             "%d, padding %d, output_padding %d",
                             (long long)C, (long long)kernel, stride, padding, output_padding);
    int64_t Tout = (T - 1) * stride - 2 * (int64_t)padding + kernel + output_padding;
    if (T < 1 || Tout <= 0) return 0;
    k_convt_dw<<<au_blocks(B * C * Tout), AU_THREADS, 0, cu->stream>>>(
        x, B, C, T, weight, bias, kernel, stride, padding, Tout, out_lens, y);
    return choir_cuda_check_launch(err, "depthwise transposed conv");
}

/* --- AdaIN ---------------------------------------------------------------- */

__device__ double block_sum(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double s = 0;
    if (threadIdx.x == 0) {
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) s += sh[w];
        sh[32] = s;
    }
    __syncthreads();
    s = sh[32];
    __syncthreads();
    return s;
}

/* One block per (piece, channel) row: mean and biased variance over the
 * piece's valid samples (summed in double), then the affines. */
__global__ void k_adain(const float *__restrict__ x, float *y, int64_t C, int64_t T,
                        const int32_t *lens, const float *norm_w, const float *norm_b,
                        const float *gb, int64_t gb_stride, float eps) {
    __shared__ double sh[33];
    int64_t row = blockIdx.x, b = row / C, c = row % C;
    int64_t n = piece_len(lens, b, T);
    const float *xr = x + row * T;
    float *yr = y + row * T;
    double s = 0;
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x) s += xr[t];
    float mean = n > 0 ? (float)(block_sum(s, sh) / (double)n) : 0.0f;
    double q = 0;
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
        float d = xr[t] - mean;
        q += (double)d * d;
    }
    float var = n > 0 ? (float)(block_sum(q, sh) / (double)n) : 0.0f;
    float a = 1.0f / sqrtf(var + eps), bb = 0.0f;
    if (norm_w) a *= norm_w[c];
    if (norm_b) bb = norm_b[c];
    const float *g = gb + b * gb_stride;
    float gamma = 1.0f + g[c], beta = g[C + c];
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x)
        yr[t] = t < n ? gamma * ((xr[t] - mean) * a + bb) + beta : 0.0f;
}

int choir_cuda_adain(choir_cuda *cu, const float *x, float *y, int64_t B, int64_t C, int64_t T,
                     const int32_t *lens, const float *norm_w, const float *norm_b, const float *gb,
                     int64_t gb_stride, float eps, choir_err *err) {
    if (B < 1 || C < 1 || T < 1 || !gb)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: adain with B %lld, C %lld, T %lld",
                             (long long)B, (long long)C, (long long)T);
    if (B * C > INT32_MAX) return choir_err_set(err, CHOIR_EINVAL, "cuda: adain: too many rows");
    k_adain<<<(unsigned)(B * C), NORM_THREADS, 0, cu->stream>>>(x, y, C, T, lens, norm_w, norm_b,
                                                                gb, gb_stride, eps);
    return choir_cuda_check_launch(err, "adain");
}

/* --- elementwise ---------------------------------------------------------- */

__global__ void k_leaky(float *x, int64_t n, float slope) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        x[i] = v >= 0.0f ? v : v * slope;
    }
}

int choir_cuda_leaky_relu(choir_cuda *cu, float *x, int64_t n, float slope, choir_err *err) {
    if (n <= 0) return 0;
    k_leaky<<<au_blocks(n), AU_THREADS, 0, cu->stream>>>(x, n, slope);
    return choir_cuda_check_launch(err, "leaky relu");
}

__global__ void k_snake(float *x, int64_t C, int64_t T, int64_t n, const float *alpha) {
    GRID_STRIDE(i, n) {
        float a = alpha[(i / T) % C];
        float s = sinf(a * x[i]);
        x[i] += (1.0f / a) * (s * s);
    }
}

int choir_cuda_snake(choir_cuda *cu, float *x, int64_t B, int64_t C, int64_t T, const float *alpha,
                     choir_err *err) {
    int64_t n = B * C * T;
    if (n <= 0) return 0;
    k_snake<<<au_blocks(n), AU_THREADS, 0, cu->stream>>>(x, C, T, n, alpha);
    return choir_cuda_check_launch(err, "snake");
}

__global__ void k_add_scale(const float *a, const float *b, float *y, int64_t n, float scale) {
    GRID_STRIDE(i, n) y[i] = (a[i] + b[i]) * scale;
}

int choir_cuda_add_scale(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                         float scale, choir_err *err) {
    if (n <= 0) return 0;
    k_add_scale<<<au_blocks(n), AU_THREADS, 0, cu->stream>>>(a, b, y, n, scale);
    return choir_cuda_check_launch(err, "add and scale");
}

__global__ void k_up2(const float *x, int64_t T, int64_t n, float *y) {
    GRID_STRIDE(i, n) {
        int64_t t2 = i % (2 * T), row = i / (2 * T);
        y[i] = x[row * T + t2 / 2];
    }
}

int choir_cuda_upsample2_nearest(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                                 float *y, choir_err *err) {
    int64_t n = B * C * 2 * T;
    if (n <= 0) return 0;
    k_up2<<<au_blocks(n), AU_THREADS, 0, cu->stream>>>(x, T, n, y);
    return choir_cuda_check_launch(err, "nearest up-sampling");
}

__global__ void k_reflect(const float *x, int64_t C, int64_t T, const int32_t *lens, int left,
                          int right, int64_t To, int64_t n, float *y) {
    GRID_STRIDE(i, n) {
        int64_t t = i % To, row = i / To, b = row / C;
        int64_t len = piece_len(lens, b, T);
        if (t >= len + left + right) {
            y[i] = 0.0f;
            continue;
        }
        int64_t s = t - left;
        if (s < 0) s = -s;
        if (s >= len) s = 2 * (len - 1) - s;
        /* a pad wider than the piece (torch refuses it): stay inside */
        s = s < 0 ? 0 : (s >= len ? len - 1 : s);
        y[i] = len > 0 ? x[row * T + s] : 0.0f;
    }
}

int choir_cuda_reflect_pad(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                           const int32_t *lens, int left, int right, float *y, choir_err *err) {
    if (left < 0 || right < 0 || (!lens && (left >= T || right >= T)))
        return choir_err_set(err, CHOIR_EINVAL, "cuda: reflection pad (%d, %d) of %lld samples",
                             left, right, (long long)T);
    int64_t To = T + left + right, n = B * C * To;
    if (n <= 0) return 0;
    k_reflect<<<au_blocks(n), AU_THREADS, 0, cu->stream>>>(x, C, T, lens, left, right, To, n, y);
    return choir_cuda_check_launch(err, "reflection pad");
}

__global__ void k_copy_channels(const float *src, int64_t Cs, int64_t T, float *dst, int64_t Cd,
                                int64_t c0, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t t = i % T, c = (i / T) % Cs, b = i / (Cs * T);
        dst[(b * Cd + c0 + c) * T + t] = src[i];
    }
}

int choir_cuda_copy_channels(choir_cuda *cu, const float *src, int64_t B, int64_t Cs, int64_t T,
                             float *dst, int64_t Cd, int64_t c0, choir_err *err) {
    if (c0 < 0 || c0 + Cs > Cd)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: channels %lld..%lld of %lld", (long long)c0,
                             (long long)(c0 + Cs), (long long)Cd);
    int64_t n = B * Cs * T;
    if (n <= 0) return 0;
    k_copy_channels<<<au_blocks(n), AU_THREADS, 0, cu->stream>>>(src, Cs, T, dst, Cd, c0, n);
    return choir_cuda_check_launch(err, "copy channels");
}

/* --- inverse STFT ------------------------------------------------------------ */

/* cos/sin(2 pi m / n) with exact zeros and ones at the quarter points, as
 * Kokoro's CPU tables (kokoro_generator.c). */
__device__ void twiddle(int m, int n, double *c, double *s) {
    if (4 * m == n)
        *c = 0, *s = 1;
    else if (2 * m == n)
        *c = -1, *s = 0;
    else if (4 * m == 3 * n)
        *c = 0, *s = -1;
    else if (m == 0)
        *c = 1, *s = 0;
    else
        *c = cos(2.0 * M_PI * m / n), *s = sin(2.0 * M_PI * m / n);
}

/* Bin k of frame f: exp(log-magnitude) and e^{i sin(phase)}, rounded as the CPU. */
__device__ void bin(const float *Pb, int64_t F, int64_t f, int k, int nb, double *re, double *im) {
    float mag = expf(Pb[k * F + f]);
    float ph = sinf(Pb[(nb + k) * F + f]);
    *re = (double)(mag * cosf(ph));
    *im = (double)(mag * sinf(ph));
}

/* One thread per output sample: the (at most n_fft / hop) frames covering
 * it are inverse-transformed for that one sample and overlap-added in frame
 * order, divided by the summed squared window, as torch.istft. */
__global__ void k_istft(const float *__restrict__ P, int64_t F, const int32_t *frames, int n_fft,
                        int hop, int64_t n_out, int64_t total, float *__restrict__ out) {
    const int nb = n_fft / 2 + 1;
    GRID_STRIDE(i, total) {
        int64_t b = i / n_out, s = i % n_out;
        int64_t Fb = frames ? (int64_t)frames[b] : F;
        if (s >= hop * (Fb - 1)) {
            out[i] = 0.0f;
            continue;
        }
        const float *Pb = P + b * (int64_t)(2 * nb) * F;
        int64_t p = s + n_fft / 2;
        int64_t f_lo = p - n_fft + 1 <= 0 ? 0 : (p - n_fft + 1 + hop - 1) / hop;
        int64_t f_hi = p / hop < Fb - 1 ? p / hop : Fb - 1;
        float ola = 0.0f, env = 0.0f;
        for (int64_t f = f_lo; f <= f_hi; f++) {
            int n = (int)(p - f * hop);
            /* as the CPU: DC and Nyquist first, then the other bins in order */
            double re0, im0, reN, imN;
            bin(Pb, F, f, 0, nb, &re0, &im0);
            bin(Pb, F, f, nb - 1, nb, &reN, &imN);
            double y = re0 + reN * ((n & 1) ? -1.0 : 1.0);
            for (int k = 1; k < nb - 1; k++) {
                double re, im, c, sn;
                bin(Pb, F, f, k, nb, &re, &im);
                twiddle((k * n) % n_fft, n_fft, &c, &sn);
                y += 2.0 * (re * c - im * sn);
            }
            float w = (float)(0.5 - 0.5 * cos(2.0 * M_PI * n / n_fft));
            ola += w * (float)(y / n_fft);
            env += w * w;
        }
        out[i] = ola / env;
    }
}

int choir_cuda_istft_magphase(choir_cuda *cu, const float *P, int64_t B, int64_t F,
                              const int32_t *frames, int n_fft, int hop, float *out,
                              choir_err *err) {
    if (B < 1 || F < 2 || n_fft < 2 || n_fft > 64 || (n_fft & 1) || hop < 1 || hop > n_fft)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: istft with n_fft %d, hop %d, %lld frames",
                             n_fft, hop, (long long)F);
    int64_t n_out = (int64_t)hop * (F - 1), total = B * n_out;
    k_istft<<<au_blocks(total), AU_THREADS, 0, cu->stream>>>(P, F, frames, n_fft, hop, n_out, total,
                                                             out);
    return choir_cuda_check_launch(err, "istft");
}

/* --- bidirectional LSTM ----------------------------------------------------- */

#define LSTM_MAX_KPL 16 /* hidden values per lane: H <= 32 * 16 */
#define LSTM_WARPS 8

/* gates[r, :] = bias (8H values, both directions), or zeros. */
__global__ void k_lstm_bias(float *gates, const float *bias, int64_t rows, int64_t G2) {
    GRID_STRIDE(i, rows * G2) { gates[i] = bias ? bias[i % G2] : 0.0f; }
}

static __device__ __forceinline__ float sigmoid_f(float v) { return 1.0f / (1.0f + expf(-v)); }

/* One time step s of both directions for all B pieces. Warp w handles hidden
 * unit j = w % H of direction d = w / H: its lanes hold the four W_hh rows of
 * that unit (i, f, g, o) strided over k, and for every piece still running at
 * step s it sums W_hh h_prev over the lanes, adds the step's input projection,
 * and updates the cell. The previous h is read from y itself (the previous
 * step's output row of that piece and direction); c lives in cstate [2, B, H]. */
__global__ void k_lstm_step(const float *__restrict__ gates, const float *__restrict__ w_hh,
                            float *__restrict__ cstate, float *__restrict__ y,
                            const int32_t *__restrict__ lens, int64_t B, int64_t T, int H,
                            int64_t s) {
    const int lane = threadIdx.x & 31;
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (w >= 2 * (int64_t)H) return;
    const int d = (int)(w / H), j = (int)(w % H), kpl = H >> 5;
    const int64_t G = 4 * (int64_t)H;
    float wr[4][LSTM_MAX_KPL];
    const float *wd = w_hh + (int64_t)d * G * H;
#pragma unroll
    for (int g = 0; g < 4; g++)
#pragma unroll
        for (int i = 0; i < LSTM_MAX_KPL; i++)
            wr[g][i] = i < kpl ? wd[((int64_t)g * H + j) * H + lane + 32 * i] : 0.0f;
    for (int64_t b = 0; b < B; b++) {
        const int64_t len = lens ? (int64_t)lens[b] : T;
        if (s >= len) continue;
        const int64_t t = d ? len - 1 - s : s;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (s > 0) {
            const int64_t tp = d ? t + 1 : t - 1;
            const float *hp = y + (b * T + tp) * 2 * H + (int64_t)d * H;
#pragma unroll
            for (int i = 0; i < LSTM_MAX_KPL; i++) {
                if (i < kpl) {
                    float hv = hp[lane + 32 * i];
#pragma unroll
                    for (int g = 0; g < 4; g++) acc[g] = fmaf(wr[g][i], hv, acc[g]);
                }
            }
#pragma unroll
            for (int g = 0; g < 4; g++)
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], off);
        }
        if (lane == 0) {
            const float *gr = gates + (b * T + t) * 2 * G + (int64_t)d * G;
            float gi = sigmoid_f(gr[j] + acc[0]);
            float gf = sigmoid_f(gr[H + j] + acc[1]);
            float gg = tanhf(gr[2 * H + j] + acc[2]);
            float go = sigmoid_f(gr[3 * H + j] + acc[3]);
            float *cp = cstate + ((int64_t)d * B + b) * H + j;
            float c = gf * *cp + gi * gg;
            *cp = c;
            y[(b * T + t) * 2 * H + (int64_t)d * H + j] = go * tanhf(c);
        }
    }
}

/* The whole recurrence in one cooperative launch (the default;
 * CHOIR_KOKORO_LSTM_PERSIST=0 or choir_cuda_lstm_set_persist turns it off): the step kernel above is latency-bound (64
 * blocks of 8 warps, each warp walking the B pieces one after another with a
 * shuffle reduction per piece and gate), ~80 us a step at B 32, H 256, and
 * Kokoro's front runs ~5 T + L of them. Here block i owns LP_UNITS hidden
 * units of one direction, keeps their four W_hh rows in shared memory for all
 * T steps, and a step is: stage the running pieces' previous h of that
 * direction (read from y, past L1: other blocks wrote it) into shared
 * memory, LP_CHUNK pieces at a time; every (piece, unit) pair's four dot
 * products by LP_KSPLIT lanes (k strided, two shuffles to combine); the cell
 * update; then a grid-wide barrier. 2H / LP_UNITS blocks, all resident (the
 * cooperative launch refuses otherwise and the step kernel runs instead). */
#define LP_UNITS 4
#define LP_CHUNK 32
#define LP_KSPLIT 4
#define LP_THREADS (LP_UNITS * LP_CHUNK * LP_KSPLIT) /* 512: 16 warps */

/* The emulation (tests/cuda/emu/lstm_emu.cpp) cuts from here to LP_END. */
__global__ void __launch_bounds__(LP_THREADS)
    k_lstm_persist(const float *__restrict__ gates, const float *__restrict__ w_hh,
                   float *__restrict__ cstate, float *y, const int32_t *__restrict__ lens, int B,
                   int T, int H) {
    extern __shared__ float lp_smem[];
    float *ws = lp_smem;                    /* [LP_UNITS][H][4]: unit, k, gate */
    float *hs = lp_smem + LP_UNITS * 4 * H; /* [LP_CHUNK][H + LP_KSPLIT]: pieces' previous h */
    /* a row of H + 4 floats: the 32 lanes' (piece, k mod 4) fall in distinct banks */
    const int HS = H + LP_KSPLIT, H4 = H / 4;
    const int per_dir = H / LP_UNITS;
    const int d = (int)blockIdx.x / per_dir, j0 = ((int)blockIdx.x % per_dir) * LP_UNITS;
    const int64_t G = 4 * (int64_t)H;
    const float *wd = w_hh + (int64_t)d * G * H;
    for (int i = threadIdx.x; i < LP_UNITS * 4 * H; i += blockDim.x) {
        const int g = i & 3, k = (i >> 2) % H, u = (i >> 2) / H;
        ws[i] = wd[((int64_t)g * H + j0 + u) * H + k];
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int u = warp % LP_UNITS, p = lane % LP_KSPLIT;
    /* the lane group's piece in a chunk */
    const int bl = (warp / LP_UNITS) * (32 / LP_KSPLIT) + lane / LP_KSPLIT;
    const int j = j0 + u;
    const float4 *wu = (const float4 *)(ws + (int64_t)u * 4 * H);
    cg::grid_group grid = cg::this_grid();
    __syncthreads();
    for (int s = 0; s < T; s++) {
        for (int c0 = 0; c0 < B; c0 += LP_CHUNK) {
            const int nc = B - c0 < LP_CHUNK ? B - c0 : LP_CHUNK;
            if (s > 0) {
#pragma unroll 4
                for (int i = threadIdx.x; i < nc * H4; i += blockDim.x) {
                    const int bb = i / H4, k4 = i - bb * H4, b = c0 + bb;
                    const int len = lens ? lens[b] : T;
                    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (s < len) {
                        const int tp = d ? len - s : s - 1; /* the previous step's row */
                        v = __ldcg((const float4 *)(y + ((int64_t)b * T + tp) * 2 * H +
                                                    (int64_t)d * H) +
                                   k4);
                    }
                    float2 *dst = (float2 *)(hs + bb * HS + 4 * k4);
                    dst[0] = make_float2(v.x, v.y);
                    dst[1] = make_float2(v.z, v.w);
                }
            }
            __syncthreads();
            const int b = c0 + bl;
            const int len = bl < nc ? (lens ? lens[b] : T) : 0;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            if (s > 0 && s < len) {
                const float *hr = hs + bl * HS;
#pragma unroll 4
                for (int k = p; k < H; k += LP_KSPLIT) {
                    const float hv = hr[k];
                    const float4 w4 = wu[k];
                    a0 = fmaf(w4.x, hv, a0);
                    a1 = fmaf(w4.y, hv, a1);
                    a2 = fmaf(w4.z, hv, a2);
                    a3 = fmaf(w4.w, hv, a3);
                }
            }
#pragma unroll
            for (int o = 1; o < LP_KSPLIT; o <<= 1) {
                a0 += __shfl_xor_sync(0xffffffffu, a0, o);
                a1 += __shfl_xor_sync(0xffffffffu, a1, o);
                a2 += __shfl_xor_sync(0xffffffffu, a2, o);
                a3 += __shfl_xor_sync(0xffffffffu, a3, o);
            }
            if (p == 0 && s < len) {
                const int t = d ? len - 1 - s : s;
                const float *gr = gates + ((int64_t)b * T + t) * 2 * G + (int64_t)d * G;
                const float gi = sigmoid_f(gr[j] + a0);
                const float gf = sigmoid_f(gr[H + j] + a1);
                const float gg = tanhf(gr[2 * H + j] + a2);
                const float go = sigmoid_f(gr[3 * H + j] + a3);
                float *cp = cstate + ((int64_t)d * B + b) * H + j;
                const float c = gf * *cp + gi * gg;
                *cp = c;
                y[((int64_t)b * T + t) * 2 * H + (int64_t)d * H + j] = go * tanhf(c);
            }
            __syncthreads(); /* hs is the next chunk's */
        }
        grid.sync();
    }
}

static size_t lstm_persist_smem_floats(int64_t H) {
    return (size_t)(LP_UNITS * 4 * H + LP_CHUNK * (H + LP_KSPLIT));
}
/* LP_END */

static size_t lstm_persist_smem(int64_t H) { return lstm_persist_smem_floats(H) * sizeof(float); }

/* The recurrence as k_lstm_persist: *ran false when it cannot run that way
 * here (the caller takes the step kernel). 0 or the launch's error. */
static int lstm_persist(choir_cuda *cu, const float *gates, const float *w_hh, float *cstate,
                        float *y, const int32_t *lens, int64_t B, int64_t T, int64_t H, bool *ran,
                        choir_err *err) {
    *ran = false;
    if (H % LP_UNITS || B > INT32_MAX || T > INT32_MAX) return 0;
    const int blocks = (int)(2 * H / LP_UNITS);
    const size_t smem = lstm_persist_smem(H);
    int dev = 0, coop = 0, per_sm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess || !coop ||
        cudaFuncSetAttribute(k_lstm_persist, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_lstm_persist, LP_THREADS, smem) !=
            cudaSuccess ||
        (int64_t)per_sm * cu->props.sm_count < blocks) {
        (void)cudaGetLastError();
        if (!cu->lstm_persist_warned) {
            cu->lstm_persist_warned = true;
            CHOIR_LOGW("cuda: the persistent LSTM cannot run here (H %lld: %d blocks, %d a "
                       "multiprocessor fit, cooperative launch %d); the step kernel runs",
                       (long long)H, blocks, per_sm, coop);
        }
        return 0;
    }
    int Bi = (int)B, Ti = (int)T, Hi = (int)H;
    void *args[] = {(void *)&gates, (void *)&w_hh, (void *)&cstate, (void *)&y,
                    (void *)&lens,  (void *)&Bi,   (void *)&Ti,     (void *)&Hi};
    cudaError_t ce = cudaLaunchCooperativeKernel((const void *)k_lstm_persist, dim3(blocks),
                                                 dim3(LP_THREADS), args, smem, cu->stream);
    if (ce == cudaErrorCooperativeLaunchTooLarge) {
        (void)cudaGetLastError();
        return 0;
    }
    if (ce != cudaSuccess)
        return choir_err_set(err, CHOIR_EINTERNAL, "cuda: persistent bilstm launch: %s",
                             cudaGetErrorString(ce));
    *ran = true;
    return 0;
}

void choir_cuda_lstm_set_persist(choir_cuda *cu, bool on) {
    if (cu) cu->lstm_persist = on;
}

int64_t choir_cuda_bilstm_scratch_floats(int64_t B, int64_t T, int64_t H) {
    return B * T * 8 * H + 2 * B * H;
}

int choir_cuda_bilstm(choir_cuda *cu, const float *x, int64_t B, int64_t T, int64_t In, int64_t H,
                      const float *w_ih, const float *w_hh, const float *bias,
                      const int32_t *lens, float *scratch, float *y, choir_err *err) {
    if (B < 1 || T < 1 || In < 1 || H < 32 || H % 32 || H > 32 * LSTM_MAX_KPL || !x || !w_ih ||
        !w_hh || !scratch || !y)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: bilstm with B %lld, T %lld, In %lld, H %lld (H a multiple of "
                             "32 up to %d) or a missing pointer",
                             (long long)B, (long long)T, (long long)In, (long long)H,
                             32 * LSTM_MAX_KPL);
    const int64_t G2 = 8 * H, rows = B * T;
    float *gates = scratch, *cstate = scratch + rows * G2;
    cudaError_t ce = cudaMemsetAsync(cstate, 0, (size_t)(2 * B * H) * sizeof(float), cu->stream);
    if (ce == cudaSuccess)
        ce = cudaMemsetAsync(y, 0, (size_t)(rows * 2 * H) * sizeof(float), cu->stream);
    if (ce != cudaSuccess)
        return choir_err_set(err, CHOIR_EINTERNAL, "cuda: bilstm memset: %s",
                             cudaGetErrorString(ce));
    k_lstm_bias<<<au_blocks(rows * G2), AU_THREADS, 0, cu->stream>>>(gates, bias, rows, G2);
    int rc = choir_cuda_check_launch(err, "bilstm bias");
    if (rc) return rc;
    /* gates[B T, 8H] += x[B T, In] w_ih[8H, In]^T: both directions in one product */
    rc = choir_cuda_gemm_f32(cu, false, true, rows, G2, In, 1.0f, x, In, w_ih, In, 1.0f, gates, G2,
                             err);
    if (rc) return rc;
    if (cu->lstm_persist) {
        bool ran = false;
        if ((rc = lstm_persist(cu, gates, w_hh, cstate, y, lens, B, T, H, &ran, err)) || ran)
            return rc;
    }
    const unsigned blocks = (unsigned)((2 * H + LSTM_WARPS - 1) / LSTM_WARPS);
    for (int64_t s = 0; s < T; s++) {
        k_lstm_step<<<blocks, 32 * LSTM_WARPS, 0, cu->stream>>>(gates, w_hh, cstate, y, lens, B, T,
                                                                (int)H, s);
        if ((rc = choir_cuda_check_launch(err, "bilstm step"))) return rc;
    }
    return 0;
}
