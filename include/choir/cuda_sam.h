/* choir/cuda_sam.h: CUDA kernels behind SAM-Audio's backend operations
 * (choir/backend_sam.h), same semantics as their CPU versions in
 * src/tensor/backend/op_sam.c (the oracle of tests/cuda/sam_audio_gpu_check.c).
 * Conventions of choir/cuda.h: enqueued on the context's stream, device
 * pointers, 0 or a negative CHOIR_E* code with err filled. */
#ifndef CHOIR_CUDA_SAM_H
#define CHOIR_CUDA_SAM_H

#include <stdbool.h>
#include <stdint.h>

#include "choir/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Snake with the DAC epsilon over `rows` rows of T values; row r uses
 * alpha[r % C]. */
int choir_cuda_sam_snake(choir_cuda *cu, float *x, int64_t rows, int64_t T, int64_t C,
                         const float *alpha, choir_err *err);
int choir_cuda_sam_elu(choir_cuda *cu, float *x, int64_t n, choir_err *err);
int choir_cuda_sam_pad(choir_cuda *cu, const float *x, int64_t C, int64_t T, int64_t left,
                       int64_t right, bool reflect, float *y, choir_err *err);
/* One LSTM layer, one direction; gates: 4H (T + 1) floats of device memory. */
int choir_cuda_sam_lstm(choir_cuda *cu, const float *x, int64_t T, int64_t In, int64_t H,
                        const float *w_ih, const float *w_hh, const float *b_ih,
                        const float *b_hh, float *gates, float *y, choir_err *err);
int choir_cuda_sam_modulate(choir_cuda *cu, float *h, int64_t rows, int64_t D, const float *shift,
                            const float *scale, choir_err *err);
int choir_cuda_sam_gated_add(choir_cuda *cu, float *x, const float *o, int64_t rows, int64_t D,
                             const float *gate, choir_err *err);
int choir_cuda_sam_axpy(choir_cuda *cu, float *y, const float *a, float alpha, const float *b,
                        int64_t n, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
