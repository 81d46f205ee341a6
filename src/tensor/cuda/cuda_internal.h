/* Private to src/tensor/cuda: the context struct and error helpers. */
#ifndef CHOIR_CUDA_INTERNAL_H
#define CHOIR_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "choir/cuda.h"
#include "choir/error.h"

struct choir_cuda {
    choir_cuda_props props;
    cudaStream_t stream;
    cublasHandle_t blas;
    /* Device bytes held through this context; updated with atomics because
     * buffers may be freed from another thread than the one computing. */
    int64_t mem_current, mem_peak, budget;
    /* Pinned host bytes (choir_cuda_host_alloc), counted apart. */
    int64_t host_current, host_peak;
    /* Scratch grown on demand for converted activations and dequantized
     * weights; reused across calls on the stream, so it needs no sync. */
    choir_cuda_buf scratch;
    /* Live CUDA graphs: they hold the scratch's address, so it must not move. */
    int live_graphs;
    /* cuBLAS workspace, set before the first capture so that a captured
     * product never asks the runtime for memory. */
    choir_cuda_buf blas_workspace;
    /* int [4096]: the split-keys attention's chunk counters per (row, head),
     * zero between calls (cuda_kernels.cu). */
    choir_cuda_buf attn_done;
    /* cublasLt handle (cublasLtHandle_t) for products with fused epilogues,
     * made on first use (cuda_bf16.cu); it shares blas_workspace. */
    void *lt;
};

/* GELU (erf form) as choir_gelu_erf computes it, for every kernel that
 * applies it (the activation kernel and the product epilogues). */
__device__ __forceinline__ float cuda_gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

/* The sum of v over the block; every thread gets it. `red` holds 32 floats
 * of shared memory, reused by consecutive calls. */
__device__ __forceinline__ float cuda_block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* red may still be read from a previous reduction */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? red[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    return r;
}

/* A layer norm's statistics of row xr [dim], two passes for the variance
 * (mean first, as the reference, for rows with a large mean), the block's
 * threads striding the row; and its output at i. Shared by the layer-norm
 * kernel and the product that normalises its input itself
 * (choir_cuda_norm_linear), so that both give the same floats for the same
 * block size; explicit roundings (no contraction) for the same reason. */
__device__ __forceinline__ void cuda_ln_stats(const float *xr, int64_t dim, float eps, float *red,
                                              float *mean, float *inv) {
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
    float mu = cuda_block_sum(s, red) / (float)dim;
    float v = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float d = __fsub_rn(xr[i], mu);
        v = __fmaf_rn(d, d, v);
    }
    *mean = mu;
    *inv = rsqrtf(cuda_block_sum(v, red) / (float)dim + eps);
}
__device__ __forceinline__ float cuda_ln_out(float x, float mean, float inv,
                                             const float *__restrict__ gamma,
                                             const float *__restrict__ beta, int64_t i) {
    float o = __fmul_rn(__fsub_rn(x, mean), inv);
    if (gamma) o = __fmul_rn(o, gamma[i]);
    if (beta) o = __fadd_rn(o, beta[i]);
    return o;
}

/* Fills err from a CUDA runtime status and returns the choir code. */
int choir_cuda_fail(choir_err *err, cudaError_t st, const char *what);
int choir_cuda_blas_fail(choir_err *err, cublasStatus_t st, const char *what);
/* Checks the last launch; 0 or CHOIR_EINTERNAL naming `what`. */
int choir_cuda_check_launch(choir_err *err, const char *what);
/* Ensures the scratch holds at least `bytes`; returns its pointer or NULL
 * (err filled). Growing frees the old block, so callers use it for one call. */
void *choir_cuda_scratch(choir_cuda *cu, size_t bytes, choir_err *err);

/* choir_cuda_rows_gather from an MLX-quantized table (cuda_linear.cu, where
 * the code unpacking lives). */
int choir_cuda_rows_gather_quant(choir_cuda *cu, const choir_cuda_weight *W, const int32_t *ids,
                                 int64_t n, float *out, choir_err *err);

/* Blocks of 256 threads over n elements, capped so a grid-stride loop covers
 * the rest. */
static inline unsigned choir_cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535 * 16) b = 65535 * 16;
    return (unsigned)b;
}

#endif
