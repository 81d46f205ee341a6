/* Private to src/tensor/cuda: the tensor-core GEMV for a few rows of x
 * (cuda_gemv_mma.cu, CHOIR_GEMV_MMA), as cuda_linear.cu's dispatch calls
 * it, and the stacked layers' arguments that it shares with norm_gemv. */
#ifndef CHOIR_CUDA_GEMV_MMA_H
#define CHOIR_CUDA_GEMV_MMA_H

#include "tensor/cuda/cuda_internal.h"

/* choir_cuda_norm_linear's layers as the kernels take them (by value):
 * layer i is rows [start[i], start[i+1]) of the stack. */
struct norm_linear_args {
    const void *W[CHOIR_CUDA_NORM_LINEAR_MAX];
    const float *bias[CHOIR_CUDA_NORM_LINEAR_MAX];
    float *y[CHOIR_CUDA_NORM_LINEAR_MAX];
    int64_t start[CHOIR_CUDA_NORM_LINEAR_MAX + 1];
    choir_cuda_rows_out store[CHOIR_CUDA_NORM_LINEAR_MAX];
    int n;
    bool rms; /* cuda_rms_row instead of cuda_ln_row */
};

/* Rows of x the mma GEMV takes (its n8 tiles: 4). */
#define GEMV_MMA_MAX_ROWS 32
/* The rows of x for which the default (auto) mode takes 8-bit weights
 * (cuda_gemv_mma.cu's switch): where the CUDA-core GEMV and, above 8 rows,
 * the dequantizing cuBLAS path were slower on an H100. */
#define GEMV_MMA_Q8_MIN_ROWS 5
#define GEMV_MMA_Q8_MAX_ROWS 8

/* Whether the switch is on and the mma GEMV takes M rows of W (bf16, K a
 * multiple of 8, W 16-byte aligned, M <= GEMV_MMA_MAX_ROWS). */
bool choir_cuda_gemv_mma_takes(int64_t M, const choir_cuda_weight *W);
/* y = x W^T + bias with epilogue GEMV_WRITE, GEMV_ACCUMULATE or GEMV_GELU. */
int choir_cuda_gemv_mma_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                               const float *bias, float *y, int epilogue, choir_err *err);
/* Whether it runs choir_cuda_norm_linear's p for M rows (every layer taken,
 * one kind and width, stores with positions), and that call: the layers
 * stacked in one launch with the GELU and stores in its epilogue, an RMS
 * norm inside it (up to 24 rows; above, its sums first into the context's
 * scratch), a layer norm into the scratch first. */
bool choir_cuda_gemv_mma_norm_fuses(int64_t M, const choir_cuda_norm_linear_params *p);
int choir_cuda_gemv_mma_norm_linear(choir_cuda *cu, const float *x, int64_t M,
                                    const choir_cuda_norm_linear_params *p, choir_err *err);

#endif
