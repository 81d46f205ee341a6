/* One LSTM direction, PyTorch gate order (i, f, g, o):
 *   gates = W_ih x_t + b_ih + W_hh h + b_hh
 *   c = sigmoid(f) * c + sigmoid(i) * tanh(g);  h = sigmoid(o) * tanh(c)
 * The input projection of every frame is one sgemm up front; the recurrence is
 * then one gemv per frame, computed in place in that frame's gate row. */
#include <cblas.h>
#include <string.h>

#include "choir/kernels.h"
#include "tensor/cpu/cpu_kernels.h"

void choir_lstm(const float *x, int64_t T, int64_t In, int64_t H, const float *w_ih,
                const float *w_hh, const float *b_ih, const float *b_hh, float *h, float *c,
                bool reverse, float *out, int64_t out_stride, float *scratch) {
    if (H <= 0) return;
    const choir_cpu_ops *ops = choir_cpu_ops_now();
    int64_t G = 4 * H;
    float *gates = scratch;         /* [T, 4H] */
    float *state = scratch + T * G; /* the last 4H floats: h and c when the caller passes NULL */
    if (!h) {
        h = state;
        memset(h, 0, (size_t)H * sizeof(float));
    }
    if (!c) {
        c = state + H;
        memset(c, 0, (size_t)H * sizeof(float));
    }
    if (T <= 0) return;
    choir_blas_init();
    for (int64_t t = 0; t < T; t++) {
        float *row = gates + t * G;
        if (b_ih)
            memcpy(row, b_ih, (size_t)G * sizeof(float));
        else
            memset(row, 0, (size_t)G * sizeof(float));
        if (b_hh) ops->add(row, b_hh, row, G);
    }
    if (In > 0) choir_gemm_f32(false, true, T, G, In, 1.0f, x, In, w_ih, In, 1.0f, gates, G);

    for (int64_t step = 0; step < T; step++) {
        int64_t t = reverse ? T - 1 - step : step;
        float *g = gates + t * G;
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)G, (blasint)H, 1.0f, w_hh, (blasint)H, h,
                    1, 1.0f, g, 1);
        float *gi = g, *gf = g + H, *gg = g + 2 * H, *go = g + 3 * H;
        ops->sigmoid(gi, H);
        ops->sigmoid(gf, H);
        ops->tanh(gg, H);
        ops->sigmoid(go, H);
        ops->mul(gf, c, c, H);
        ops->mul(gi, gg, gi, H);
        ops->add(c, gi, c, H);
        memcpy(gg, c, (size_t)H * sizeof(float));
        ops->tanh(gg, H);
        ops->mul(go, gg, h, H);
        memcpy(out + t * out_stride, h, (size_t)H * sizeof(float));
    }
}
