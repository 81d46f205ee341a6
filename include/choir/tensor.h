/* choir/tensor.h: the tensor type, float conversions and linear-layer weights.
 *
 * Most model code works on plain float arrays with shapes in comments (as
 * llama2.c does); choir_tensor is for data that crosses module boundaries with
 * its shape (checkpoint tensors, test data). choir_weight is what every linear
 * layer holds: a [rows=out, cols=in] matrix in f32, f16, bf16 or MLX-quantized
 * storage, usually pointing into a mapped checkpoint. */
#ifndef CHOIR_TENSOR_H
#define CHOIR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "choir/alloc.h"
#include "choir/dtype.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_MAX_DIMS 5

typedef struct choir_tensor {
    choir_dtype dtype;
    int ndim;
    int64_t shape[CHOIR_MAX_DIMS];
    int64_t stride[CHOIR_MAX_DIMS]; /* in elements */
    void *data;
    bool owns_data;                  /* data came from choir_alloc and is freed with the tensor */
} choir_tensor;

/* A new contiguous, zero-filled tensor. NULL (and err) on failure. */
choir_tensor *choir_tensor_new(choir_dtype dtype, int ndim, const int64_t *shape,
                               choir_mem_category cat, choir_err *err);
/* A tensor header over memory the caller keeps alive (contiguous strides). */
choir_tensor *choir_tensor_view(choir_dtype dtype, int ndim, const int64_t *shape, void *data,
                                choir_err *err);
void choir_tensor_free(choir_tensor *t);
int64_t choir_tensor_numel(const choir_tensor *t);
bool choir_tensor_is_contiguous(const choir_tensor *t);

/* IEEE conversions; to-half conversions round to nearest even, keep NaN and
 * infinities, and flush nothing (subnormals are produced). */
uint16_t choir_f32_to_f16(float f);
float choir_f16_to_f32(uint16_t h);
uint16_t choir_f32_to_bf16(float f);
float choir_bf16_to_f32(uint16_t h);
void choir_f32_to_f16_n(const float *src, uint16_t *dst, int64_t n);
void choir_f16_to_f32_n(const uint16_t *src, float *dst, int64_t n);
void choir_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n);
void choir_bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n);
/* Converts n elements of any float dtype (F32, F16, BF16, F64) to f32.
 * Returns CHOIR_EUNSUPPORTED for other dtypes. */
int choir_to_f32_n(choir_dtype src_dtype, const void *src, float *dst, int64_t n);

/* Storage of a linear layer's weight matrix W [rows, cols] (rows = outputs). */
typedef enum choir_weight_kind {
    CHOIR_WEIGHT_F32 = 0,
    CHOIR_WEIGHT_F16,
    CHOIR_WEIGHT_BF16,
    CHOIR_WEIGHT_QUANT  /* MLX affine group quantization, see choir/quant.h */
} choir_weight_kind;

typedef struct choir_weight {
    choir_weight_kind kind;
    int64_t rows, cols;
    const void *data;      /* F32/F16/BF16: rows*cols values; QUANT: uint32 [rows, cols*bits/32] */
    /* QUANT only: per-group affine parameters, w = scale * q + bias. */
    const void *scales;    /* [rows, cols/group_size] in `sb_dtype` */
    const void *biases;    /* [rows, cols/group_size] in `sb_dtype` */
    choir_dtype sb_dtype;  /* F32, F16 or BF16 */
    int bits;              /* 2,3,4,5,6,8 */
    int group_size;        /* 32, 64, 128 */
} choir_weight;

/* A weight over f32 data [rows, cols]. */
choir_weight choir_weight_f32(const float *data, int64_t rows, int64_t cols);
/* Writes row r of W as f32 into out[cols] (dequantizing if needed). */
void choir_weight_row_f32(const choir_weight *w, int64_t r, float *out);
/* Bytes the weight occupies in its storage. */
size_t choir_weight_bytes(const choir_weight *w);

#ifdef __cplusplus
}
#endif
#endif
