/* The portable C twins of the hot inner loops: the oracle for the SIMD ones. */
#include <math.h>

#include "choir/tensor.h"
#include "tensor/cpu/cpu_kernels.h"

static float ref_dot(const float *a, const float *b, int64_t n) {
    /* Four partial sums: keeps the reference's rounding close to the SIMD twin's
     * and lets the compiler pipeline the loop. */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

static float ref_dot_f16(const uint16_t *w, const float *x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += choir_f16_to_f32(w[i]) * x[i];
    return s;
}

static float ref_dot_bf16(const uint16_t *w, const float *x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += choir_bf16_to_f32(w[i]) * x[i];
    return s;
}

static void ref_dot4(const float *w, const float *x, int64_t ldx, int64_t n, float *out) {
    for (int m = 0; m < 4; m++)
        out[m] = ref_dot(w, x + m * ldx, n);
}
static void ref_dot4_f16(const uint16_t *w, const float *x, int64_t ldx, int64_t n, float *out) {
    for (int m = 0; m < 4; m++)
        out[m] = ref_dot_f16(w, x + m * ldx, n);
}
static void ref_dot4_bf16(const uint16_t *w, const float *x, int64_t ldx, int64_t n, float *out) {
    for (int m = 0; m < 4; m++)
        out[m] = ref_dot_bf16(w, x + m * ldx, n);
}

static void ref_dot_rows4(const float *w, int64_t ldw, const float *x, int64_t n, float *out) {
    for (int r = 0; r < 4; r++)
        out[r] = ref_dot(w + r * ldw, x, n);
}
static void ref_dot_rows4_f16(const uint16_t *w, int64_t ldw, const float *x, int64_t n,
                              float *out) {
    for (int r = 0; r < 4; r++)
        out[r] = ref_dot_f16(w + r * ldw, x, n);
}
static void ref_dot_rows4_bf16(const uint16_t *w, int64_t ldw, const float *x, int64_t n,
                               float *out) {
    for (int r = 0; r < 4; r++)
        out[r] = ref_dot_bf16(w + r * ldw, x, n);
}

static void ref_attn_scores(const float *q, const float *k, int64_t ldk, int64_t n, int64_t Dh,
                            float scale, float *scores) {
    for (int64_t j = 0; j < n; j++)
        scores[j] = ref_dot(q, k + j * ldk, Dh) * scale;
}

static void ref_attn_wsum(const float *p, const float *v, int64_t ldv, int64_t n, int64_t Dh,
                          float *out) {
    for (int64_t c = 0; c < Dh; c++)
        out[c] = 0.0f;
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < Dh; c++)
            out[c] += p[j] * v[j * ldv + c];
}

static void ref_attn_scores_f16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                int64_t Dh, float scale, float *scores) {
    for (int64_t j = 0; j < n; j++)
        scores[j] = ref_dot_f16(k + j * ldk, q, Dh) * scale;
}

static void ref_attn_wsum_f16(const float *p, const uint16_t *v, int64_t ldv, int64_t n,
                              int64_t Dh, float *out) {
    for (int64_t c = 0; c < Dh; c++)
        out[c] = 0.0f;
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < Dh; c++)
            out[c] += p[j] * choir_f16_to_f32(v[j * ldv + c]);
}

static void ref_attn_scores_bf16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                 int64_t Dh, float scale, float *scores) {
    for (int64_t j = 0; j < n; j++)
        scores[j] = ref_dot_bf16(k + j * ldk, q, Dh) * scale;
}

static void ref_attn_wsum_bf16(const float *p, const uint16_t *v, int64_t ldv, int64_t n,
                               int64_t Dh, float *out) {
    for (int64_t c = 0; c < Dh; c++)
        out[c] = 0.0f;
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < Dh; c++)
            out[c] += p[j] * choir_bf16_to_f32(v[j * ldv + c]);
}

/* The heads forms over either 16-bit type: dot and widen say which. */
static void ref_scores_heads(float (*dot)(const uint16_t *, const float *, int64_t),
                             const float *q, const uint16_t *k, int64_t ldk, int64_t n, int64_t Dh,
                             int64_t G, float scale, float *scores, int64_t lds) {
    for (int64_t j = 0; j < n; j++)
        for (int64_t h = 0; h < G; h++)
            scores[h * lds + j] = dot(k + j * ldk + h * Dh, q + h * Dh, Dh) * scale;
}

static void ref_wsum_heads(float (*widen)(uint16_t), const float *p, int64_t ldp,
                           const uint16_t *v, int64_t ldv, int64_t n, int64_t Dh, int64_t G,
                           float *out) {
    for (int64_t c = 0; c < G * Dh; c++)
        out[c] = 0.0f;
    for (int64_t j = 0; j < n; j++)
        for (int64_t h = 0; h < G; h++)
            for (int64_t c = 0; c < Dh; c++)
                out[h * Dh + c] += p[h * ldp + j] * widen(v[j * ldv + h * Dh + c]);
}

static void ref_attn_scores_heads_f16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                      int64_t Dh, int64_t G, float scale, float *scores,
                                      int64_t lds) {
    ref_scores_heads(ref_dot_f16, q, k, ldk, n, Dh, G, scale, scores, lds);
}

static void ref_attn_wsum_heads_f16(const float *p, int64_t ldp, const uint16_t *v, int64_t ldv,
                                    int64_t n, int64_t Dh, int64_t G, float *out) {
    ref_wsum_heads(choir_f16_to_f32, p, ldp, v, ldv, n, Dh, G, out);
}

static void ref_attn_scores_heads_bf16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                       int64_t Dh, int64_t G, float scale, float *scores,
                                       int64_t lds) {
    ref_scores_heads(ref_dot_bf16, q, k, ldk, n, Dh, G, scale, scores, lds);
}

static void ref_attn_wsum_heads_bf16(const float *p, int64_t ldp, const uint16_t *v, int64_t ldv,
                                     int64_t n, int64_t Dh, int64_t G, float *out) {
    ref_wsum_heads(choir_bf16_to_f32, p, ldp, v, ldv, n, Dh, G, out);
}

static void ref_f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = choir_f16_to_f32(src[i]);
}
static void ref_f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = choir_f32_to_f16(src[i]);
}
static void ref_bf16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = choir_bf16_to_f32(src[i]);
}
static void ref_f32_to_bf16(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = choir_f32_to_bf16(src[i]);
}

static void ref_add(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}
static void ref_mul(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}
static void ref_scale(float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}
static void ref_axpy(float a, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void ref_gelu_erf(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}
static void ref_gelu_tanh(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}
static void ref_leaky_relu(float *x, int64_t n, float slope) {
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] >= 0 ? x[i] : x[i] * slope;
}
static void ref_sigmoid(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = 1.0f / (1.0f + expf(-x[i]));
}
static void ref_tanh(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = tanhf(x[i]);
}
static void ref_silu(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] / (1.0f + expf(-x[i]));
}

static void ref_snake(float *x, int64_t n, float alpha, float inv_alpha) {
    for (int64_t i = 0; i < n; i++) {
        float s = sinf(alpha * x[i]);
        x[i] += inv_alpha * (s * s);
    }
}

static void ref_mean_var(const float *x, int64_t n, float *mean, float *var) {
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    float m = n > 0 ? s / (float)n : 0.0f;
    float q = 0;
    for (int64_t i = 0; i < n; i++)
        q += (x[i] - m) * (x[i] - m);
    *mean = m;
    *var = n > 0 ? q / (float)n : 0.0f;
}

static void ref_normalize(const float *x, float *y, int64_t n, float mean, float inv,
                          const float *gamma, const float *beta) {
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - mean) * inv;
        if (gamma) v *= gamma[i];
        if (beta) v += beta[i];
        y[i] = v;
    }
}

static void ref_affine(const float *x, float *y, int64_t n, float mean, float a, float b) {
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] - mean) * a + b;
}

static float ref_exp_row(float *x, int64_t n, float *max) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    *max = mx;
    if (mx == -INFINITY) { /* every entry masked: no key to attend to */
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.0f;
        return 0.0f;
    }
    float s = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        s += x[i];
    }
    return s;
}

static void ref_softmax_row(float *x, int64_t n) {
    float mx, s = ref_exp_row(x, n, &mx);
    if (s == 0.0f) return;
    float inv = 1.0f / s;
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

const choir_cpu_ops choir_cpu_ops_ref = {
    .dot = ref_dot,
    .dot_f16 = ref_dot_f16,
    .dot_bf16 = ref_dot_bf16,
    .dot4 = ref_dot4,
    .dot4_f16 = ref_dot4_f16,
    .dot4_bf16 = ref_dot4_bf16,
    .dot_rows4 = ref_dot_rows4,
    .dot_rows4_f16 = ref_dot_rows4_f16,
    .dot_rows4_bf16 = ref_dot_rows4_bf16,
    .attn_scores = ref_attn_scores,
    .attn_wsum = ref_attn_wsum,
    .attn_scores_f16 = ref_attn_scores_f16,
    .attn_wsum_f16 = ref_attn_wsum_f16,
    .attn_scores_bf16 = ref_attn_scores_bf16,
    .attn_wsum_bf16 = ref_attn_wsum_bf16,
    .attn_scores_heads_f16 = ref_attn_scores_heads_f16,
    .attn_wsum_heads_f16 = ref_attn_wsum_heads_f16,
    .attn_scores_heads_bf16 = ref_attn_scores_heads_bf16,
    .attn_wsum_heads_bf16 = ref_attn_wsum_heads_bf16,
    .f16_to_f32 = ref_f16_to_f32,
    .f32_to_f16 = ref_f32_to_f16,
    .bf16_to_f32 = ref_bf16_to_f32,
    .f32_to_bf16 = ref_f32_to_bf16,
    .add = ref_add,
    .mul = ref_mul,
    .scale = ref_scale,
    .axpy = ref_axpy,
    .gelu_erf = ref_gelu_erf,
    .gelu_tanh = ref_gelu_tanh,
    .leaky_relu = ref_leaky_relu,
    .sigmoid = ref_sigmoid,
    .tanh = ref_tanh,
    .silu = ref_silu,
    .snake = ref_snake,
    .mean_var = ref_mean_var,
    .normalize = ref_normalize,
    .affine = ref_affine,
    .softmax_row = ref_softmax_row,
    .exp_row = ref_exp_row,
};
