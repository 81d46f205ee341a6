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
 * same values. On by default since it ran on an H100 on 7 Dec 2026 (the
 * 8-bit 7B prefill 7,875 -> 23,049 tokens/s); until choir_cuda_q8_dequant is
 * called, CHOIR_Q8_DEQUANT=0 turns it off.
 * Process-wide. */
void choir_cuda_q8_dequant(int on);
bool choir_cuda_q8_dequant_on(void);

#ifdef __cplusplus
}
#endif

#endif
