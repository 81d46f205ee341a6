/* Switches of the 8-bit MLX weights' CUDA kernels that are newer than
 * choir/cuda.h's (src/tensor/cuda/cuda_linear_q8.cu). */
#ifndef CHOIR_CUDA_Q8_H
#define CHOIR_CUDA_Q8_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The cuBLAS path's expansion of 8-bit MLX weights into bf16 (more than 8
 * rows of x: a prefill chunk's products) by q8_dequant_bf16, 16-byte loads
 * and stores, instead of dequant_bf16's 32 two-byte stores a thread; the
 * same values. Off by default (NOT RUN ON A GPU); until
 * choir_cuda_q8_dequant is called, CHOIR_Q8_DEQUANT=1 turns it on.
 * Process-wide. */
void choir_cuda_q8_dequant(int on);
bool choir_cuda_q8_dequant_on(void);

#ifdef __cplusplus
}
#endif

#endif
