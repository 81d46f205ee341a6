/* Kernels behind choir/backend_vocoder.h that cuda_audio.cu does not
 * already provide. Semantics of the CPU versions in
 * src/tensor/backend/op_vocoder.c. */
#include <stdint.h>

#include "choir/cuda_vocoder.h"
#include "tensor/cuda/cuda_internal.h"

#define VOC_THREADS 256

/* A division, not a multiplication by the inverse: the CPU rounds so. */
__global__ void k_add_div(const float *a, const float *b, float *y, int64_t n, float d) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = (a[i] + b[i]) / d;
}

int choir_cuda_add_div(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                       float divisor, choir_err *err) {
    if (n <= 0) return 0;
    k_add_div<<<choir_cuda_blocks(n, VOC_THREADS), VOC_THREADS, 0, cu->stream>>>(a, b, y, n,
                                                                                 divisor);
    return choir_cuda_check_launch(err, "add and divide");
}
