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

#include <cjson/cJSON.h>

#include "choir/error.h"
#include "choir/safetensors.h"
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

/* Bytes of kernel scratch (choir_kernels_bind_scratch) one choir_qlinear
 * call of M rows takes at most. */
size_t choir_qlinear_scratch_bytes(int64_t M, const choir_weight *W);

/* Dequantizes row r of W into out[W.cols]. */
void choir_quant_dequant_row(const choir_weight *W, int64_t r, float *out);

/* --- layout ------------------------------------------------------------ */

/* Packed uint32 words per row of `cols` codes of `bits` bits (cols * bits / 32;
 * exact whenever cols is a multiple of 32). */
int64_t choir_quant_packed_cols(int64_t cols, int bits);

/* Packs n codes (each < 2^bits) into ceil(n * bits / 32) words, LSB first
 * across word boundaries, as MLX packs them. Unused high bits are zero. */
void choir_quant_pack(const uint8_t *codes, int64_t n, int bits, uint32_t *packed);
/* The inverse: extracts n codes from `packed`. */
void choir_quant_unpack(const uint32_t *packed, int64_t n, int bits, uint8_t *codes);

/* --- quantizing -------------------------------------------------------- */

/* Quantizes w[rows, cols] (f32) to MLX affine layout with MLX's rounding
 * rules (scale sign chosen so that 0.0 is representable, round half to even,
 * clamp): packed [rows, choir_quant_packed_cols(cols, bits)] uint32,
 * scales/biases [rows, cols / group_size] in sb_dtype (F32, F16 or BF16).
 * Buffers are the caller's. Returns 0, or CHOIR_EUNSUPPORTED for a
 * (bits, group_size) pair not supported, CHOIR_ESHAPE when cols is not a
 * multiple of group_size, CHOIR_EINVAL for another sb_dtype.
 * Every element then dequantizes to within half a step (|scale| / 2) of its
 * input, apart from the rounding of scale and bias to sb_dtype. Groups come
 * out bit-identical to MLX's quantizer except where MLX's snapping of the
 * scale would clamp the far edge by up to a step; there the unsnapped
 * min/max scale is kept (see choir_quantize_mlx for MLX's exact output). */
int choir_quantize(const float *w, int64_t rows, int64_t cols, int bits, int group_size,
                   choir_dtype sb_dtype, uint32_t *packed, void *scales, void *biases,
                   choir_err *err);

/* As choir_quantize, but exactly MLX's rounding in every group, including
 * the groups where MLX's zero-snapped scale clamps the far edge (up to one
 * step of error there): for reproducing mlx-community files bit for bit. */
int choir_quantize_mlx(const float *w, int64_t rows, int64_t cols, int bits, int group_size,
                       choir_dtype sb_dtype, uint32_t *packed, void *scales, void *biases,
                       choir_err *err);

/* Dequantizes all of W into out[W.rows * W.cols]. */
void choir_quant_dequant(const choir_weight *W, float *out);

/* --- config.json -------------------------------------------------------- */

/* The "quantization" block of a model's config.json (else its duplicate
 * "quantization_config"), with per-layer overrides keyed by module path. */
typedef struct choir_quant_config choir_quant_config;

/* Reads the block from a parsed config.json (root object). Returns a config
 * that says "not quantized" when there is no block, NULL (and err) when the
 * block is malformed, names a mode other than "affine", or an unsupported
 * (bits, group_size). A missing group_size means 64 (the MLX loader default).
 * Free with choir_quant_config_free; it does not keep `root`. */
choir_quant_config *choir_quant_config_from_json(const cJSON *root, choir_err *err);
void choir_quant_config_free(choir_quant_config *qc);
/* Global parameters; returns 1 when the model has a quantization block (then
 * *bits, *group_size are set; either pointer may be NULL), 0 otherwise. */
int choir_quant_config_global(const choir_quant_config *qc, int *bits, int *group_size);
/* Parameters for module `path` (no ".weight" suffix): the per-layer entry if
 * any, else the global ones. Returns 1 with *bits, *group_size set, or 0 when
 * the config has no block or the layer's entry is `false` (kept in float). */
int choir_quant_config_layer(const choir_quant_config *qc, const char *path, int *bits,
                             int *group_size);

/* --- loading ------------------------------------------------------------ */

/* Builds the weight of the linear (or embedding) layer at module path `prefix`
 * (e.g. "decoder.blocks.0.mlp1", without ".weight") from checkpoint `st`:
 *  - when "<prefix>.scales" exists: a CHOIR_WEIGHT_QUANT over
 *    "<prefix>.weight" (U32), ".scales" and ".biases" (F32/F16/BF16, same
 *    dtype), with bits and group size from `qc` (per-layer entry, else global;
 *    qc NULL means bits 4, group 64) and checked against the tensor shapes;
 *  - else a plain "<prefix>.weight" in F32, F16 or BF16 (2-D).
 * The weight points into the checkpoint (valid until choir_st_close). Returns
 * 0, CHOIR_ENOTFOUND (names the missing key), CHOIR_ESHAPE or
 * CHOIR_EUNSUPPORTED (names the tensor and the problem). */
int choir_weight_from_st(const choir_st *st, const char *prefix, const choir_quant_config *qc,
                         choir_weight *out, choir_err *err);
/* Checks that W is [rows, cols]; fills err naming `what` otherwise. Returns 0
 * or CHOIR_ESHAPE. */
int choir_weight_expect(const choir_weight *W, int64_t rows, int64_t cols, const char *what,
                        choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
