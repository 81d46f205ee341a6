/* Kernels of SAM-Audio's backend operations (choir/cuda_sam.h): the DAC
 * codec's Snake and ELU, padding, a one-way LSTM layer, and the DiT's adaLN
 * pieces. Each follows its CPU version in src/tensor/backend/op_sam.c. */
#include <math.h>

#include "choir/cuda_sam.h"
#include "tensor/cuda/cuda_internal.h"

#define SAM_THREADS 256

#define SAM_STRIDE(i, n)                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_sam_snake(float *x, int64_t rows, int64_t T, int64_t C,
                            const float *__restrict__ alpha) {
    SAM_STRIDE(i, rows * T) {
        float a = alpha[(i / T) % C];
        float inv = 1.0f / (a + 1e-9f);
        float s = sinf(a * x[i]);
        x[i] += inv * (s * s);
    }
}

__global__ void k_sam_elu(float *x, int64_t n) {
    SAM_STRIDE(i, n) {
        float v = x[i];
        if (v < 0.0f) x[i] = expm1f(v);
    }
}

__global__ void k_sam_pad(const float *__restrict__ x, int64_t C, int64_t T, int64_t left,
                          int64_t To, bool reflect, float *__restrict__ y) {
    SAM_STRIDE(i, C * To) {
        int64_t c = i / To, u = i % To - left;
        float v = 0.0f;
        if (reflect) {
            if (u < 0) u = -u;
            if (u >= T) u = 2 * (T - 1) - u;
            v = x[c * T + u];
        } else if (u >= 0 && u < T) {
            v = x[c * T + u];
        }
        y[i] = v;
    }
}

__global__ void k_sam_modulate(float *h, int64_t rows, int64_t D, const float *__restrict__ shift,
                               const float *__restrict__ scale) {
    SAM_STRIDE(i, rows * D) {
        int64_t c = i % D;
        h[i] = h[i] * (1.0f + scale[c]) + shift[c];
    }
}

__global__ void k_sam_gated_add(float *x, const float *__restrict__ o, int64_t rows, int64_t D,
                                const float *__restrict__ gate) {
    SAM_STRIDE(i, rows * D) { x[i] += o[i] * gate[i % D]; }
}

__global__ void k_sam_axpy(float *y, const float *a, float alpha, const float *b, int64_t n) {
    SAM_STRIDE(i, n) { y[i] = a[i] + alpha * b[i]; }
}

/* gates[t, :] = b_ih + b_hh (either may be NULL). */
__global__ void k_sam_lstm_bias(float *gates, const float *b_ih, const float *b_hh, int64_t T,
                                int64_t G) {
    SAM_STRIDE(i, T * G) {
        int64_t r = i % G;
        gates[i] = (b_ih ? b_ih[r] : 0.0f) + (b_hh ? b_hh[r] : 0.0f);
    }
}

static __device__ __forceinline__ float sam_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

#define SAM_LSTM_WARPS 8

/* Step t of the recurrence: warp j owns hidden unit j; its lanes hold the
 * unit's four W_hh rows (i, f, g, o) strided over k, sum W_hh h_{t-1} over
 * the lanes (h_{t-1} is y's previous row), add the step's input projection
 * and update the cell (cell [H]). H is a multiple of 32. */
__global__ void k_sam_lstm_step(const float *__restrict__ gates, const float *__restrict__ w_hh,
                                float *__restrict__ cell, float *__restrict__ y, int H,
                                int64_t t) {
    const int lane = threadIdx.x & 31;
    const int64_t j = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (j >= H) return;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (t > 0) {
        const float *hp = y + (t - 1) * H;
        for (int k = lane; k < H; k += 32) {
            float hv = hp[k];
#pragma unroll
            for (int g = 0; g < 4; g++) acc[g] = fmaf(w_hh[((int64_t)g * H + j) * H + k], hv, acc[g]);
        }
#pragma unroll
        for (int g = 0; g < 4; g++)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], off);
    }
    if (lane == 0) {
        const float *gr = gates + t * 4 * (int64_t)H;
        float gi = sam_sigmoid(gr[j] + acc[0]);
        float gf = sam_sigmoid(gr[H + j] + acc[1]);
        float gg = tanhf(gr[2 * H + j] + acc[2]);
        float go = sam_sigmoid(gr[3 * H + j] + acc[3]);
        float c = (t > 0 ? gf * cell[j] : 0.0f) + gi * gg;
        cell[j] = c;
        y[t * H + j] = go * tanhf(c);
    }
}

extern "C" {

int choir_cuda_sam_snake(choir_cuda *cu, float *x, int64_t rows, int64_t T, int64_t C,
                         const float *alpha, choir_err *err) {
    if (rows * T <= 0) return 0;
    k_sam_snake<<<choir_cuda_blocks(rows * T, SAM_THREADS), SAM_THREADS, 0, cu->stream>>>(
        x, rows, T, C, alpha);
    return choir_cuda_check_launch(err, "sam snake");
}

int choir_cuda_sam_elu(choir_cuda *cu, float *x, int64_t n, choir_err *err) {
    if (n <= 0) return 0;
    k_sam_elu<<<choir_cuda_blocks(n, SAM_THREADS), SAM_THREADS, 0, cu->stream>>>(x, n);
    return choir_cuda_check_launch(err, "sam elu");
}

int choir_cuda_sam_pad(choir_cuda *cu, const float *x, int64_t C, int64_t T, int64_t left,
                       int64_t right, bool reflect, float *y, choir_err *err) {
    int64_t To = left + T + right;
    if (C * To <= 0) return 0;
    k_sam_pad<<<choir_cuda_blocks(C * To, SAM_THREADS), SAM_THREADS, 0, cu->stream>>>(
        x, C, T, left, To, reflect, y);
    return choir_cuda_check_launch(err, "sam pad");
}

int choir_cuda_sam_lstm(choir_cuda *cu, const float *x, int64_t T, int64_t In, int64_t H,
                        const float *w_ih, const float *w_hh, const float *b_ih,
                        const float *b_hh, float *gates, float *y, choir_err *err) {
    if (T < 1 || H < 32 || H % 32)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: sam lstm with T %lld, H %lld (H a multiple of 32)",
                             (long long)T, (long long)H);
    const int64_t G = 4 * H;
    float *cell = gates + T * G;
    k_sam_lstm_bias<<<choir_cuda_blocks(T * G, SAM_THREADS), SAM_THREADS, 0, cu->stream>>>(
        gates, b_ih, b_hh, T, G);
    int rc = choir_cuda_check_launch(err, "sam lstm bias");
    if (rc) return rc;
    if (In > 0) {
        rc = choir_cuda_gemm_f32(cu, false, true, T, G, In, 1.0f, x, In, w_ih, In, 1.0f, gates, G,
                                 err);
        if (rc) return rc;
    }
    const unsigned blocks = (unsigned)((H + SAM_LSTM_WARPS - 1) / SAM_LSTM_WARPS);
    for (int64_t t = 0; t < T; t++) {
        k_sam_lstm_step<<<blocks, 32 * SAM_LSTM_WARPS, 0, cu->stream>>>(gates, w_hh, cell, y,
                                                                        (int)H, t);
        if ((rc = choir_cuda_check_launch(err, "sam lstm step"))) return rc;
    }
    return 0;
}

int choir_cuda_sam_modulate(choir_cuda *cu, float *h, int64_t rows, int64_t D, const float *shift,
                            const float *scale, choir_err *err) {
    if (rows * D <= 0) return 0;
    k_sam_modulate<<<choir_cuda_blocks(rows * D, SAM_THREADS), SAM_THREADS, 0, cu->stream>>>(
        h, rows, D, shift, scale);
    return choir_cuda_check_launch(err, "sam modulate");
}

int choir_cuda_sam_gated_add(choir_cuda *cu, float *x, const float *o, int64_t rows, int64_t D,
                             const float *gate, choir_err *err) {
    if (rows * D <= 0) return 0;
    k_sam_gated_add<<<choir_cuda_blocks(rows * D, SAM_THREADS), SAM_THREADS, 0, cu->stream>>>(
        x, o, rows, D, gate);
    return choir_cuda_check_launch(err, "sam gated add");
}

int choir_cuda_sam_axpy(choir_cuda *cu, float *y, const float *a, float alpha, const float *b,
                        int64_t n, choir_err *err) {
    if (n <= 0) return 0;
    k_sam_axpy<<<choir_cuda_blocks(n, SAM_THREADS), SAM_THREADS, 0, cu->stream>>>(y, a, alpha, b,
                                                                                  n);
    return choir_cuda_check_launch(err, "sam axpy");
}

} /* extern "C" */
