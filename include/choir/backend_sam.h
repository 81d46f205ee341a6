/* choir/backend_sam.h: the backend operations SAM-Audio needs beyond the
 * shared set (choir/backend.h): the DAC codec's Snake (with its epsilon),
 * ELU, asymmetric zero or reflect padding, a one-way LSTM layer, and the
 * DiT's adaLN modulation, gated residual and the ODE's axpy. Same
 * conventions as choir/backend.h: backend memory, row-major f32, sticky
 * stream errors, CHOIR_EINVAL for bad shapes, CHOIR_EUNSUPPORTED where a
 * backend lacks the operation. CPU versions in
 * src/tensor/backend/op_sam.c, CUDA in src/tensor/cuda/cuda_sam.cu. */
#ifndef CHOIR_BACKEND_SAM_H
#define CHOIR_BACKEND_SAM_H

#include <stdbool.h>
#include <stdint.h>

#include "choir/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Snake as the DAC codecs write it, over x [B, C, T] in place:
 * x += sin^2(alpha[c] x) / (alpha[c] + 1e-9), in f32. */
int choir_op_sam_snake(choir_stream *s, float *x, int64_t B, int64_t C, int64_t T,
                       const float *alpha);

/* ELU with alpha 1 over n values in place: x < 0 -> exp(x) - 1. */
int choir_op_sam_elu(choir_stream *s, float *x, int64_t n);

/* y [C, left + T + right] = x [C, T] padded on each side with zeros, or
 * (reflect) PyTorch's "reflect" (the edge sample not repeated; then left,
 * right < T). No aliasing. */
int choir_op_sam_pad(choir_stream *s, const float *x, int64_t C, int64_t T, int64_t left,
                     int64_t right, bool reflect, float *y);

/* One LSTM layer, one direction, over x [T, In] from a zero state (PyTorch
 * gates i, f, g, o): y [T, H]. w_ih [4H, In], w_hh [4H, H]; b_ih, b_hh [4H]
 * (either NULL: zero). Working memory: 4H (T + 1) floats of kernel scratch
 * (CPU) or of the stream's working memory (CUDA), taken for the call. */
int choir_op_sam_lstm(choir_stream *s, const float *x, int64_t T, int64_t In, int64_t H,
                      const float *w_ih, const float *w_hh, const float *b_ih,
                      const float *b_hh, float *y);

/* adaLN over h [rows, D] in place: h = h * (1 + scale) + shift, with
 * shift, scale [D]. */
int choir_op_sam_modulate(choir_stream *s, float *h, int64_t rows, int64_t D, const float *shift,
                          const float *scale);

/* Gated residual: x [rows, D] += o [rows, D] * gate [D]. */
int choir_op_sam_gated_add(choir_stream *s, float *x, const float *o, int64_t rows, int64_t D,
                           const float *gate);

/* y = a + alpha b over n values (y may be a or b). */
int choir_op_sam_axpy(choir_stream *s, float *y, const float *a, float alpha, const float *b,
                      int64_t n);

#ifdef __cplusplus
}
#endif
#endif
