/* The mlx-audio ("sanitized") Kokoro layout, spec §9.2: the names and shapes
 * of MLX module parameters after mlx-audio's Kokoro `sanitize`, as its
 * converter saves them. Shared by the Kokoro loader (src/models/kokoro:
 * kokoro_load.c, implemented in kokoro_mlx.c) and the converter
 * (src/models/convert), which both read it into the native layout (the torch
 * names of spec §3, what `choir dev weights` writes); public so that the
 * converter needs no private header of the Kokoro folder.
 *
 * The differences from the native layout, one rule each:
 *  - LSTM parameters: weight_ih_l0 / weight_hh_l0 / bias_ih_l0 / bias_hh_l0
 *    are Wx_forward / Wh_forward / bias_ih_forward / bias_hh_forward, and the
 *    `_reverse` ones are the same with `_backward`; shapes unchanged;
 *  - the text encoder's channel LayerNorms (text_encoder.cnn.<i>.1) hold
 *    weight / bias instead of gamma / beta;
 *  - convolution weights (every weight_v of a weight-normalised layer, and the
 *    plain noise_convs / F0_proj / N_proj weights) are [d0, k, in] instead of
 *    [d0, in, k]; weight_g keeps its [d0, 1, 1] shape;
 *  - bert.embeddings.position_ids is absent;
 *  - linears and embeddings may be MLX-quantized under unchanged names.
 * Everything else (ALBERT, asr_res.0, alpha1.<j>, ...) is named as natively. */
#ifndef CHOIR_KOKORO_MLX_H
#define CHOIR_KOKORO_MLX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when `name` can only come from the mlx-audio layout (an LSTM parameter
 * named *.Wx_forward, *.Wh_backward, ...). One such name marks a checkpoint. */
bool choir_kokoro_mlx_marks_layout(const char *name);

/* The mlx-audio name of the native tensor `native`, written to out[cap]
 * (the name itself when the layouts agree). Returns out, or NULL when the
 * name does not fit. */
const char *choir_kokoro_mlx_name_of(const char *native, char *out, size_t cap);

/* The native name of the mlx-audio tensor `mlx`, written to out[cap].
 * Returns out, or NULL when the name does not fit. */
const char *choir_kokoro_native_name_of(const char *mlx, char *out, size_t cap);

/* Kernel size of the Kokoro-82M v1.0 convolution whose weight has the native
 * name `native` (a `<layer>.weight_v`, or the `.weight` of noise_convs.<i>,
 * F0_proj, N_proj); 0 when the name is not a convolution weight. */
int choir_kokoro_conv_kernel(const char *native);

/* dst[d0, b, a] = src[d0, a, b] for elements of `esize` bytes (1, 2, 4 or 8). */
void choir_kokoro_swap_last_axes(const void *src, int64_t d0, int64_t a, int64_t b, size_t esize, void *dst);

#endif
