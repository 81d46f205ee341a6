/* Elementwise operations, activations, normalisation, softmax, transposes
 * and rotary embeddings. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/backend_vocoder.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "tensor/backend/backend_internal.h"

#ifdef CHOIR_HAVE_CUDA
#include "choir/cuda_audio.h"
#endif

int choir_op_add(choir_stream *s, const float *a, const float *b, float *y, int64_t n) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n <= 0) return n < 0 ? be_invalid(s, "add: negative size") : 0;
    if (be_host(s)) {
        choir_add(a, b, y, n);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "add", choir_cuda_add(s->be->cu, a, b, y, n, BE_ERR));
#endif
    return be_unsupported(s, "add");
}

int choir_op_mul(choir_stream *s, const float *a, const float *b, float *y, int64_t n) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n <= 0) return n < 0 ? be_invalid(s, "mul: negative size") : 0;
    if (be_host(s)) {
        choir_mul(a, b, y, n);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "mul", choir_cuda_mul(s->be->cu, a, b, y, n, BE_ERR));
#endif
    return be_unsupported(s, "mul");
}

int choir_op_swiglu(choir_stream *s, float *gate, const float *up, int64_t n) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n <= 0) return n < 0 ? be_invalid(s, "swiglu: negative size") : 0;
    if (be_host(s)) {
        choir_silu(gate, n);
        choir_mul(gate, up, gate, n);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "swiglu", choir_cuda_swiglu(s->be->cu, gate, up, n, BE_ERR));
#endif
    return be_unsupported(s, "swiglu");
}

int choir_op_scale(choir_stream *s, float *x, float alpha, int64_t n) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n <= 0) return n < 0 ? be_invalid(s, "scale: negative size") : 0;
    if (be_host(s)) {
        choir_scale(x, alpha, n);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "scale", choir_cuda_scale(s->be->cu, x, alpha, n, BE_ERR));
#endif
    return be_unsupported(s, "scale");
}

int choir_op_add_bias_rows(choir_stream *s, float *x, const float *bias, int64_t rows,
                           int64_t cols) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || cols < 0) return be_invalid(s, "add_bias_rows: negative size");
    if (be_host(s)) {
        choir_add_bias_rows(x, bias, rows, cols);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "add_bias_rows", choir_cuda_add_bias_rows(s->be->cu, x, bias, rows, cols, BE_ERR));
#endif
    return be_unsupported(s, "add_bias_rows");
}

int choir_op_act(choir_stream *s, choir_act act, float *x, int64_t n, float param) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n <= 0) return n < 0 ? be_invalid(s, "act: negative size") : 0;
    if (act < CHOIR_ACT_GELU_ERF || act > CHOIR_ACT_LEAKY_RELU)
        return be_invalid(s, "act: unknown activation %d", (int)act);
    if (be_host(s)) {
        switch (act) {
        case CHOIR_ACT_GELU_ERF: choir_gelu_erf(x, n); break;
        case CHOIR_ACT_GELU_TANH: choir_gelu_tanh(x, n); break;
        case CHOIR_ACT_SILU: choir_silu(x, n); break;
        case CHOIR_ACT_RELU: choir_relu(x, n); break;
        case CHOIR_ACT_SIGMOID: choir_sigmoid(x, n); break;
        case CHOIR_ACT_TANH: choir_tanh(x, n); break;
        case CHOIR_ACT_LEAKY_RELU: choir_leaky_relu(x, n, param); break;
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    if (act == CHOIR_ACT_GELU_ERF) BE_CUDA(s, "gelu", choir_cuda_gelu_erf(s->be->cu, x, n, BE_ERR));
    if (act == CHOIR_ACT_GELU_TANH)
        BE_CUDA(s, "gelu_tanh", choir_cuda_gelu_tanh(s->be->cu, x, n, BE_ERR));
    if (act == CHOIR_ACT_LEAKY_RELU)
        BE_CUDA(s, "leaky_relu", choir_cuda_leaky_relu(s->be->cu, x, n, param, BE_ERR));
    BE_CUDA(s, "act", choir_cuda_act(s->be->cu, (int)act, x, n, BE_ERR));
#endif
    return be_unsupported(s, "act");
}

int choir_op_snake(choir_stream *s, float *x, int64_t B, int64_t C, int64_t T,
                   const float *alpha) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || C < 0 || T < 0) return be_invalid(s, "snake: negative size");
    if (be_host(s)) {
        for (int64_t b = 0; b < B; b++) choir_snake(x + b * C * T, C, T, alpha);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "snake", choir_cuda_snake(s->be->cu, x, B, C, T, alpha, BE_ERR));
#endif
    return be_unsupported(s, "snake");
}

/* --- normalisation ------------------------------------------------------------------------ */

int choir_op_layer_norm(choir_stream *s, const float *x, float *y, int64_t rows, int64_t dim,
                        const float *gamma, const float *beta, float eps) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || dim <= 0) return be_invalid(s, "layer_norm: %lld rows of %lld", (long long)rows,
                                                (long long)dim);
    if (be_host(s)) {
        choir_layer_norm(x, y, rows, dim, gamma, beta, eps);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "layer_norm",
            choir_cuda_layer_norm(s->be->cu, x, y, rows, dim, gamma, beta, eps, BE_ERR));
#endif
    return be_unsupported(s, "layer_norm");
}

int choir_op_layer_norm_bf16(choir_stream *s, const float *x, uint16_t *y, int64_t rows,
                             int64_t dim, const float *gamma, const float *beta, float eps) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || dim <= 0)
        return be_invalid(s, "layer_norm_bf16: %lld rows of %lld", (long long)rows, (long long)dim);
    if (be_host(s)) {
        float *row = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)dim * sizeof(float));
        if (!row) return choir_stream_fail(s, CHOIR_ENOMEM, "backend cpu: layer_norm_bf16: out of memory");
        for (int64_t r = 0; r < rows; r++) {
            choir_layer_norm(x + r * dim, row, 1, dim, gamma, beta, eps);
            choir_f32_to_bf16_n(row, y + r * dim, dim);
        }
        choir_free(row);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "layer_norm_bf16",
            choir_cuda_layer_norm_bf16(s->be->cu, x, y, rows, dim, gamma, beta, eps, BE_ERR));
#endif
    return be_unsupported(s, "layer_norm_bf16");
}

int choir_op_rms_norm(choir_stream *s, const float *x, float *y, int64_t rows, int64_t dim,
                      const float *gamma, float eps) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || dim <= 0) return be_invalid(s, "rms_norm: %lld rows of %lld", (long long)rows,
                                                (long long)dim);
    if (be_host(s)) {
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * dim;
            float *yr = y + r * dim;
            double ss = 0;
            for (int64_t i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
            float inv = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
            for (int64_t i = 0; i < dim; i++) yr[i] = xr[i] * inv * (gamma ? gamma[i] : 1.0f);
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "rms_norm", choir_cuda_rms_norm(s->be->cu, x, y, rows, dim, gamma, eps, BE_ERR));
#endif
    return be_unsupported(s, "rms_norm");
}

int choir_op_rms_norm_bf16(choir_stream *s, const float *x, uint16_t *y, int64_t rows, int64_t dim,
                           const float *gamma, float eps) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || dim <= 0)
        return be_invalid(s, "rms_norm_bf16: %lld rows of %lld", (long long)rows, (long long)dim);
    if (be_host(s)) {
        /* The floats of choir_op_rms_norm, then rounded. */
        float *row = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)dim * sizeof(float));
        if (!row) return choir_stream_fail(s, CHOIR_ENOMEM, "backend cpu: rms_norm_bf16: out of memory");
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * dim;
            double ss = 0;
            for (int64_t i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
            float inv = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
            for (int64_t i = 0; i < dim; i++) row[i] = xr[i] * inv * (gamma ? gamma[i] : 1.0f);
            choir_f32_to_bf16_n(row, y + r * dim, dim);
        }
        choir_free(row);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "rms_norm_bf16", choir_cuda_rms_norm_bf16(s->be->cu, x, y, rows, dim, gamma, eps, BE_ERR));
#endif
    return be_unsupported(s, "rms_norm_bf16");
}

int choir_op_group_norm(choir_stream *s, const float *x, float *y, int64_t B, int64_t C,
                        int64_t T, int64_t groups, const float *gamma, const float *beta,
                        float eps) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || C <= 0 || T < 0 || groups <= 0 || C % groups != 0)
        return be_invalid(s, "group_norm: %lld channels in %lld groups", (long long)C,
                          (long long)groups);
    if (be_host(s)) {
        int64_t cg = C / groups;
        for (int64_t b = 0; b < B; b++) {
            const float *xb = x + b * C * T;
            float *yb = y + b * C * T;
            if (groups == C) {
                choir_instance_norm(xb, yb, C, T, gamma, beta, eps);
                continue;
            }
            for (int64_t g = 0; g < groups; g++) {
                const float *xg = xb + g * cg * T;
                float *yg = yb + g * cg * T;
                int64_t n = cg * T;
                double sum = 0, sq = 0;
                for (int64_t i = 0; i < n; i++) sum += xg[i];
                double mean = n > 0 ? sum / (double)n : 0;
                for (int64_t i = 0; i < n; i++) sq += ((double)xg[i] - mean) * ((double)xg[i] - mean);
                float inv = (float)(1.0 / sqrt((n > 0 ? sq / (double)n : 0) + (double)eps));
                for (int64_t c = 0; c < cg; c++) {
                    float ga = gamma ? gamma[g * cg + c] : 1.0f, be = beta ? beta[g * cg + c] : 0.0f;
                    for (int64_t t = 0; t < T; t++)
                        yg[c * T + t] = ((xg[c * T + t] - (float)mean) * inv) * ga + be;
                }
            }
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "group_norm",
            choir_cuda_group_norm(s->be->cu, x, y, B, C, T, groups, gamma, beta, eps, BE_ERR));
#endif
    return be_unsupported(s, "group_norm");
}

int choir_op_softmax(choir_stream *s, float *x, int64_t rows, int64_t dim) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || dim <= 0) return be_invalid(s, "softmax: %lld rows of %lld", (long long)rows,
                                                (long long)dim);
    if (be_host(s)) {
        choir_softmax(x, rows, dim);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "softmax", choir_cuda_softmax(s->be->cu, x, rows, dim, BE_ERR));
#endif
    return be_unsupported(s, "softmax");
}

typedef struct argmax_job {
    const float *x;
    int64_t cols;
    int32_t *out;
} argmax_job;

static void argmax_rows(void *ctx, int64_t a, int64_t b, int worker) {
    (void)worker;
    const argmax_job *j = ctx;
    for (int64_t r = a; r < b; r++) j->out[r] = (int32_t)choir_argmax_f32(j->x + r * j->cols, j->cols);
}

int choir_op_argmax_rows(choir_stream *s, const float *x, int64_t rows, int64_t cols, int32_t *out) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || cols <= 0 || cols > INT32_MAX)
        return be_invalid(s, "argmax_rows: %lld rows of %lld", (long long)rows, (long long)cols);
    if (rows == 0) return 0;
    if (be_host(s)) {
        argmax_job j = {x, cols, out};
        choir_pool_parallel_for(choir_pool_default(), rows, cols >= 16384 ? 1 : 16384 / cols, argmax_rows, &j);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "argmax_rows", choir_cuda_argmax_rows(s->be->cu, x, rows, cols, out, BE_ERR));
#endif
    return be_unsupported(s, "argmax_rows");
}

/* --- layout ------------------------------------------------------------------------------ */

int choir_op_transpose(choir_stream *s, const float *src, int64_t R, int64_t C, const float *add,
                       float *dst) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (R < 0 || C < 0) return be_invalid(s, "transpose: negative size");
    if (be_host(s)) {
        /* Tiles keep both sides in cache. */
        const int64_t tile = 32;
        for (int64_t c0 = 0; c0 < C; c0 += tile)
            for (int64_t r0 = 0; r0 < R; r0 += tile) {
                int64_t c1 = c0 + tile < C ? c0 + tile : C, r1 = r0 + tile < R ? r0 + tile : R;
                for (int64_t c = c0; c < c1; c++)
                    for (int64_t r = r0; r < r1; r++)
                        dst[c * R + r] = add ? src[r * C + c] + add[c * R + r] : src[r * C + c];
            }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "transpose", choir_cuda_transpose_add(s->be->cu, src, R, C, add, dst, BE_ERR));
#endif
    return be_unsupported(s, "transpose");
}

int choir_op_transpose_lens(choir_stream *s, const float *src, int64_t B, int64_t R, int64_t C,
                            const int32_t *lens, float *dst) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || R < 0 || C < 0) return be_invalid(s, "transpose_lens: negative size");
    if (be_host(s)) {
        for (int64_t b = 0; b < B; b++) {
            const int64_t valid = lens ? (lens[b] < 0 ? 0 : (lens[b] > R ? R : lens[b])) : R;
            const float *sb = src + b * R * C;
            float *db = dst + b * R * C;
            for (int64_t c = 0; c < C; c++)
                for (int64_t r = 0; r < R; r++) db[c * R + r] = r < valid ? sb[r * C + c] : 0.0f;
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "transpose_lens",
            choir_cuda_transpose_lens(s->be->cu, src, B, R, C, lens, dst, BE_ERR));
#endif
    return be_unsupported(s, "transpose_lens");
}

int choir_op_rope(choir_stream *s, float *x, int64_t rows, int64_t ld, int n_head, int64_t Dh,
                  int64_t rot_dims, const int32_t *pos, float theta, bool interleaved) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rot_dims == 0) rot_dims = Dh;
    if (rows < 0 || n_head <= 0 || Dh <= 0 || rot_dims > Dh || rot_dims % 2 || ld < n_head * Dh)
        return be_invalid(s, "rope: %d heads of %lld, %lld rotated, row stride %lld", n_head,
                          (long long)Dh, (long long)rot_dims, (long long)ld);
    if (be_host(s)) {
        int64_t half = rot_dims / 2;
        for (int64_t r = 0; r < rows; r++) {
            float *xr = x + r * ld;
            for (int64_t i = 0; i < half; i++) {
                /* As the references compute it: the inverse frequency in
                 * float, the angle as float position times it. */
                float inv_freq = (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)rot_dims));
                float ang = (float)pos[r] * inv_freq;
                float cs = cosf(ang), sn = sinf(ang);
                for (int h = 0; h < n_head; h++) {
                    float *xh = xr + (int64_t)h * Dh;
                    int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
                    float a = xh[i0], b = xh[i1];
                    xh[i0] = a * cs - b * sn;
                    xh[i1] = b * cs + a * sn;
                }
            }
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "rope",
            choir_cuda_rope(s->be->cu, x, rows, ld, n_head, Dh, rot_dims, pos, theta, interleaved,
                            BE_ERR));
#endif
    return be_unsupported(s, "rope");
}
