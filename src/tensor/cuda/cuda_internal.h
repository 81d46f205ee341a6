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
    /* cublasLt handle (cublasLtHandle_t) for products with fused epilogues,
     * made on first use (cuda_bf16.cu); it shares blas_workspace. */
    void *lt;
};

/* GELU (erf form) as choir_gelu_erf computes it, for every kernel that
 * applies it (the activation kernel and the product epilogues). */
__device__ __forceinline__ float cuda_gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
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
