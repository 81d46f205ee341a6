/* Host versions of SAM-Audio's CUDA kernels (choir/cuda_sam.h) for the fake
 * CUDA build (fake_cuda.c): the CPU references of src/tensor/backend/op_sam.c
 * called on "device" memory (host memory there), so that
 * tests/cuda/sam_audio_gpu_check.c runs the model's CUDA data path (weights
 * on the backend, stream buffers, uploads, downloads) without a GPU. */
#include <string.h>

#include "choir/cuda_sam.h"
#include "choir/kernels.h"
#include "choir/kernels_ext.h"

int choir_cuda_sam_snake(choir_cuda *cu, float *x, int64_t rows, int64_t T, int64_t C,
                         const float *alpha, choir_err *err) {
    (void)cu, (void)err;
    for (int64_t r = 0; r < rows; r += C) choir_snake_eps(x + r * T, C, T, alpha);
    return 0;
}

int choir_cuda_sam_elu(choir_cuda *cu, float *x, int64_t n, choir_err *err) {
    (void)cu, (void)err;
    choir_elu(x, n);
    return 0;
}

int choir_cuda_sam_pad(choir_cuda *cu, const float *x, int64_t C, int64_t T, int64_t left,
                       int64_t right, bool reflect, float *y, choir_err *err) {
    (void)cu, (void)err;
    if (reflect) {
        choir_pad_reflect(x, C, T, left, right, y);
        return 0;
    }
    int64_t To = left + T + right;
    for (int64_t c = 0; c < C; c++) {
        memset(y + c * To, 0, (size_t)To * sizeof *y);
        memcpy(y + c * To + left, x + c * T, (size_t)T * sizeof *y);
    }
    return 0;
}

int choir_cuda_sam_lstm(choir_cuda *cu, const float *x, int64_t T, int64_t In, int64_t H,
                        const float *w_ih, const float *w_hh, const float *b_ih,
                        const float *b_hh, float *gates, float *y, choir_err *err) {
    (void)cu, (void)err;
    choir_lstm(x, T, In, H, w_ih, w_hh, b_ih, b_hh, NULL, NULL, false, y, H, gates);
    return 0;
}

int choir_cuda_sam_modulate(choir_cuda *cu, float *h, int64_t rows, int64_t D, const float *shift,
                            const float *scale, choir_err *err) {
    (void)cu, (void)err;
    for (int64_t i = 0; i < rows * D; i++) h[i] = h[i] * (1.0f + scale[i % D]) + shift[i % D];
    return 0;
}

int choir_cuda_sam_gated_add(choir_cuda *cu, float *x, const float *o, int64_t rows, int64_t D,
                             const float *gate, choir_err *err) {
    (void)cu, (void)err;
    for (int64_t i = 0; i < rows * D; i++) x[i] += o[i] * gate[i % D];
    return 0;
}

int choir_cuda_sam_axpy(choir_cuda *cu, float *y, const float *a, float alpha, const float *b,
                        int64_t n, choir_err *err) {
    (void)cu, (void)err;
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + alpha * b[i];
    return 0;
}
