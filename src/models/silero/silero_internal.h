/* Silero VAD internals shared by the model's files. */
#ifndef CHOIR_SILERO_INTERNAL_H
#define CHOIR_SILERO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "choir/silero.h"

#define SILERO_N_TENSORS 15
#define SILERO_FFT_BINS 129 /* n_fft 256 -> 129 frequency bins */
#define SILERO_WINDOW 256   /* STFT kernel, samples */
#define SILERO_HOP 128      /* STFT stride, samples */
#define SILERO_FRAMES 4     /* STFT frames per step: (576 + 64 - 256) / 128 + 1 */
#define SILERO_INPUT (CHOIR_SILERO_CONTEXT + CHOIR_SILERO_CHUNK) /* 576 */
#define SILERO_PADDED (SILERO_INPUT + 64)                           /* 640 */

/* One tensor of the native layout and the ONNX initializer it comes from. */
typedef struct silero_tensor_spec {
    const char *name;      /* in model.safetensors */
    const char *onnx_name; /* in silero_vad_16k_op15.onnx */
    int ndim;
    int64_t shape[3];
} silero_tensor_spec;

extern const silero_tensor_spec silero_tensor_specs[SILERO_N_TENSORS];

struct choir_silero {
    /* All weights live in one aligned block, in the order of silero_tensor_specs;
     * the fields below point into it. */
    float *block;
    size_t block_floats;
    const float *tensor[SILERO_N_TENSORS];

    const float *stft_basis; /* (258, 256): rows 0..128 real, 129..257 imaginary parts */
    const float *conv1_w;    /* (128, 129 * 3) */
    const float *conv1_b;    /* (128) */
    const float *conv2_w;    /* (64, 128 * 3), stride 2 */
    const float *conv2_b;    /* (64) */
    const float *conv3_w;    /* (64, 64 * 3), stride 2 */
    const float *conv3_b;    /* (64) */
    const float *conv4_w;    /* (128, 64 * 3) */
    const float *conv4_b;    /* (128) */
    const float *w_ih;       /* (512, 128), gates i, f, g, o */
    const float *w_hh;       /* (512, 128) */
    const float *b_ih;       /* (512) */
    const float *b_hh;       /* (512) */
    const float *final_w;    /* (128) */
    const float *final_b;    /* (1) */
};

struct choir_silero_state {
    float h[CHOIR_SILERO_HIDDEN];
    float c[CHOIR_SILERO_HIDDEN];
    float context[CHOIR_SILERO_CONTEXT]; /* last samples of the previous chunk */
};

/* Allocates an empty model with its weight block (contents unset). */
choir_silero *silero_alloc(choir_err *err);

#endif
