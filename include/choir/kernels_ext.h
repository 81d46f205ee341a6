/* choir/kernels_ext.h: CPU kernels added for SAM-Audio that the core set
 * (choir/kernels.h) lacks: whole-item GroupNorm, RMSNorm with a weight,
 * interleaved-pair RoPE, ELU, Snake with the DAC codec's epsilon, and reflect
 * padding. Same conventions as choir/kernels.h: row-major f32, caller-owned
 * outputs, sizes in elements; large loops are split over the default pool.
 * Each is written once here for the CPU; a GPU twin goes in the CUDA backend. */
#ifndef CHOIR_KERNELS_EXT_H
#define CHOIR_KERNELS_EXT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* GroupNorm of one item x[C, T] (channels-first) with `groups` groups (C a
 * multiple of groups): each group's C/groups x T values to zero mean and unit
 * biased variance (statistics in double), then gamma[c], beta[c] (NULL: 1/0).
 * groups = 1 normalises over the whole item. y may equal x. */
void choir_group_norm(const float *x, float *y, int64_t C, int64_t T, int groups, const float *gamma,
                      const float *beta, float eps);

/* y[r,:] = x[r,:] / sqrt(mean(x[r,:]^2) + eps) * w (w NULL: 1), rows of `dim`
 * values with row strides ldx / ldy. y may equal x. */
void choir_rms_norm(const float *x, int64_t ldx, float *y, int64_t ldy, int64_t rows, int64_t dim,
                    const float *w, float eps);

/* Rotary embedding on interleaved pairs, in place: for each row t of x (row
 * stride ld) and each of n_head heads of hd values, pair (2i, 2i+1) at
 * position pos0 + t is rotated by [[cos, -sin], [sin, cos]] with the angle in
 * tables cos_t / sin_t [positions][hd/2]. */
void choir_rope_interleaved(float *x, int64_t ld, int64_t T, int n_head, int64_t hd, const float *cos_t,
                            const float *sin_t, int64_t pos0);

/* ELU with alpha 1, in place: x < 0 -> exp(x) - 1. */
void choir_elu(float *x, int64_t n);

/* Snake in place over x[C, T] as the DAC codecs write it:
 * x += sin(alpha[c] x)^2 / (alpha[c] + 1e-9), in f32. */
void choir_snake_eps(float *x, int64_t C, int64_t T, const float *alpha);

/* Reflect padding of x[C, T] into y[C, left + T + right] (PyTorch "reflect":
 * the edge sample is not repeated); needs left, right < T. */
void choir_pad_reflect(const float *x, int64_t C, int64_t T, int64_t left, int64_t right, float *y);

#ifdef __cplusplus
}
#endif
#endif
