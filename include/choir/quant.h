/* choir/quant.h: MLX affine group quantization (bit-compatible with MLX).
 *
 * A quantized matrix W [rows, cols] is stored as `weight` uint32
 * [rows, cols * bits / 32] (values packed little-end first, exactly as MLX packs
 * them, including 3-, 5- and 6-bit values that straddle words), plus `scales`
 * and `biases` [rows, cols / group_size] in the model's float dtype; element
 * w = scale * q + bias. See ../shared/specs/mlx_quant.md. */
#ifndef CHOIR_QUANT_H
#define CHOIR_QUANT_H

#include <stdint.h>

#include "choir/error.h"
#include "choir/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True for the supported (bits, group_size) pairs: bits 2,3,4,5,6,8 and group
 * sizes 32, 64, 128. */
int choir_quant_supported(int bits, int group_size);

/* y[M, W.rows] = x[M, W.cols] * dequant(W)^T (+ bias), dequantizing on the fly.
 * W.kind must be CHOIR_WEIGHT_QUANT. Used by choir_linear. */
void choir_qlinear(const float *x, int64_t M, const choir_weight *W, const float *bias, float *y);

/* Dequantizes row r of W into out[W.cols]. */
void choir_quant_dequant_row(const choir_weight *W, int64_t r, float *out);

#ifdef __cplusplus
}
#endif
#endif
