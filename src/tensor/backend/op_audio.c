/* Convolutions, the bidirectional LSTM, AdaIN and the inverse STFT: the
 * operations of vocoders and audio encoders. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "tensor/backend/backend_internal.h"
#include "tensor/cpu/cpu_kernels.h"

#ifdef CHOIR_HAVE_CUDA
#include "choir/cuda_audio.h"
#endif

int choir_op_conv1d(choir_stream *s, const float *x, int64_t B, int64_t Cin, int64_t T,
                    const float *weight, const float *bias, int64_t Cout, int64_t kernel,
                    int stride, int padding, int dilation, int groups, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || Cin <= 0 || Cout <= 0 || kernel <= 0 || stride < 1 || dilation < 1 ||
        padding < 0 || groups < 1 || Cin % groups || Cout % groups)
        return be_invalid(s, "conv1d: Cin %lld, Cout %lld, kernel %lld, stride %d, dilation %d, "
                             "padding %d, groups %d",
                          (long long)Cin, (long long)Cout, (long long)kernel, stride, dilation,
                          padding, groups);
    int64_t Tout = choir_conv1d_out_len(T, kernel, stride, padding, dilation);
    if (Tout <= 0 || B == 0) return 0;
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        for (int64_t b = 0; b < B; b++)
            choir_conv1d(x + b * Cin * T, Cin, T, weight, bias, Cout, kernel, stride, padding,
                         dilation, groups, y + b * Cout * Tout);
        be_kernel_end(prev);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    for (int64_t b = 0; b < B; b++) {
        choir_err e = {0};
        int rc = choir_cuda_conv1d(s->be->cu, x + b * Cin * T, Cin, T, weight, bias, Cout, kernel,
                                   stride, padding, dilation, groups, y + b * Cout * Tout, &e);
        if (rc) return be_done(s, rc, &e, "conv1d");
    }
    return 0;
#endif
    return be_unsupported(s, "conv1d");
}

int choir_op_conv1d_bf16(choir_stream *s, const float *x, int64_t B, int64_t Cin, int64_t T,
                         const float *weight, const float *bias, int64_t Cout, int64_t kernel,
                         int stride, int padding, int dilation, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || Cin <= 0 || Cout <= 0 || kernel <= 0 || stride < 1 || dilation < 1 || padding < 0)
        return be_invalid(s, "conv1d_bf16: Cin %lld, Cout %lld, kernel %lld, stride %d, "
                             "dilation %d, padding %d",
                          (long long)Cin, (long long)Cout, (long long)kernel, stride, dilation,
                          padding);
    int64_t Tout = choir_conv1d_out_len(T, kernel, stride, padding, dilation);
    if (Tout <= 0 || B == 0) return 0;
    if (be_host(s)) {
        /* Both operands rounded to bf16 and widened back, then the f32 kernel. */
        int64_t nw = Cout * Cin * kernel, nx = Cin * T;
        float *wr = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)nw * sizeof(float));
        float *xr = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)nx * sizeof(float));
        uint16_t *tmp = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(nw > nx ? nw : nx) * 2);
        if (!wr || !xr || !tmp) {
            choir_free(wr), choir_free(xr), choir_free(tmp);
            return choir_stream_fail(s, CHOIR_ENOMEM, "backend cpu: conv1d_bf16: out of memory");
        }
        choir_f32_to_bf16_n(weight, tmp, nw);
        choir_bf16_to_f32_n(tmp, wr, nw);
        choir_kernel_scratch *prev = be_kernel_begin(s);
        for (int64_t b = 0; b < B; b++) {
            choir_f32_to_bf16_n(x + b * nx, tmp, nx);
            choir_bf16_to_f32_n(tmp, xr, nx);
            choir_conv1d(xr, Cin, T, wr, bias, Cout, kernel, stride, padding, dilation, 1,
                         y + b * Cout * Tout);
        }
        be_kernel_end(prev);
        choir_free(wr), choir_free(xr), choir_free(tmp);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "conv1d_bf16",
            choir_cuda_conv1d_bf16(s->be->cu, x, B, Cin, T, weight, bias, Cout, kernel, stride,
                                   padding, dilation, y, BE_ERR));
#endif
    return be_unsupported(s, "conv1d_bf16");
}

int choir_op_conv_transpose1d(choir_stream *s, const float *x, int64_t B, int64_t Cin, int64_t T,
                              const float *weight, const float *bias, int64_t Cout,
                              int64_t kernel, int stride, int padding, int output_padding,
                              int dilation, int groups, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || Cin <= 0 || Cout <= 0 || kernel <= 0 || stride < 1 || dilation < 1 ||
        padding < 0 || groups < 1 || Cin % groups || Cout % groups || output_padding < 0 ||
        (output_padding >= stride && output_padding >= dilation))
        return be_invalid(s, "conv_transpose1d: Cin %lld, Cout %lld, kernel %lld, stride %d, "
                             "padding %d, output padding %d, groups %d",
                          (long long)Cin, (long long)Cout, (long long)kernel, stride, padding,
                          output_padding, groups);
    int64_t Tout =
        choir_conv_transpose1d_out_len(T, kernel, stride, padding, output_padding, dilation);
    if (Tout <= 0 || B == 0) return 0;
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        for (int64_t b = 0; b < B; b++)
            choir_conv_transpose1d(x + b * Cin * T, Cin, T, weight, bias, Cout, kernel, stride,
                                   padding, output_padding, dilation, groups, y + b * Cout * Tout);
        be_kernel_end(prev);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    if (dilation == 1 && groups == 1) {
        choir_cuda_conv_weight w = {weight, false};
        BE_CUDA(s, "conv_transpose1d",
                choir_cuda_conv_transpose1d_batched(s->be->cu, x, B, Cin, T, w, bias, Cout, kernel,
                                                    stride, padding, output_padding, NULL, y,
                                                    BE_ERR));
    }
    if (dilation == 1 && groups == Cin && Cin == Cout)
        BE_CUDA(s, "conv_transpose1d",
                choir_cuda_conv_transpose1d_depthwise(s->be->cu, x, B, Cin, T, weight, bias,
                                                      kernel, stride, padding, output_padding,
                                                      NULL, y, BE_ERR));
    return be_unsupported(s, "conv_transpose1d (dilated or grouped but not depthwise)");
#endif
    return be_unsupported(s, "conv_transpose1d");
}

int choir_op_bilstm(choir_stream *s, const float *x, int64_t B, int64_t T, int64_t In, int64_t H,
                    const float *w_ih, const float *w_hh, const float *bias, const int32_t *lens,
                    float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || T < 0 || In < 0 || H <= 0)
        return be_invalid(s, "bilstm: B %lld, T %lld, In %lld, H %lld", (long long)B,
                          (long long)T, (long long)In, (long long)H);
    if (B == 0 || T == 0) return 0;
    if (be_host(s)) {
        int64_t G = 4 * H;
        choir_kernel_scratch *prev = be_kernel_begin(s);
        float *scratch = choir_kscratch_get((size_t)(G * (T + 1)) * sizeof(float));
        if (!scratch) {
            be_kernel_end(prev);
            return choir_stream_fail(s, CHOIR_ENOMEM, "backend cpu: bilstm: out of memory");
        }
        for (int64_t b = 0; b < B; b++) {
            int64_t L = lens ? lens[b] : T;
            if (L < 0) L = 0;
            if (L > T) L = T;
            const float *xb = x + b * T * In;
            float *yb = y + b * T * 2 * H;
            for (int d = 0; d < 2; d++)
                choir_lstm(xb, L, In, H, w_ih + d * G * In, w_hh + d * G * H,
                           bias ? bias + d * G : NULL, NULL, NULL, NULL, d == 1, yb + d * H, 2 * H,
                           scratch);
            if (L < T) memset(yb + L * 2 * H, 0, (size_t)((T - L) * 2 * H) * sizeof(float));
        }
        choir_kscratch_put(scratch);
        be_kernel_end(prev);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    /* The kernel's state lives in working memory taken for the call. */
    size_t mark = choir_stream_mark(s);
    float *scratch = choir_stream_floats(s, choir_cuda_bilstm_scratch_floats(B, T, H), "bilstm");
    if (!scratch) return s->err.code;
    choir_err e = {0};
    int rc = choir_cuda_bilstm(s->be->cu, x, B, T, In, H, w_ih, w_hh, bias, lens, scratch, y, &e);
    choir_stream_release(s, mark);
    return be_done(s, rc, &e, "bilstm");
#endif
    return be_unsupported(s, "bilstm");
}

int choir_op_adain(choir_stream *s, const float *x, float *y, int64_t B, int64_t C, int64_t T,
                   const int32_t *lens, const float *norm_w, const float *norm_b,
                   const float *gb, int64_t gb_stride, float eps) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || C <= 0 || T < 0 || !gb) return be_invalid(s, "adain: bad shape or no style");
    if (be_host(s)) {
        /* choir_instance_norm, then the style affine: what Kokoro's CPU
         * blocks computed before they were written over these operations,
         * so a batch of one is bit for bit that. */
        for (int64_t b = 0; b < B; b++) {
            int64_t n = lens ? lens[b] : T;
            if (n > T) n = T;
            if (n < 0) n = 0;
            const float *g = gb + b * gb_stride;
            const float *xb = x + b * C * T;
            float *yb = y + b * C * T;
            if (n == T)
                choir_instance_norm(xb, yb, C, T, norm_w, norm_b, eps);
            else
                for (int64_t c = 0; c < C && n > 0; c++)
                    choir_instance_norm(xb + c * T, yb + c * T, 1, n, norm_w ? norm_w + c : NULL,
                                        norm_b ? norm_b + c : NULL, eps);
            for (int64_t c = 0; c < C; c++) {
                float gamma = 1.0f + g[c], beta = g[C + c];
                float *yr = yb + c * T;
                for (int64_t t = 0; t < n; t++) yr[t] = gamma * yr[t] + beta;
                if (n < T) memset(yr + n, 0, (size_t)(T - n) * sizeof(float));
            }
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "adain",
            choir_cuda_adain(s->be->cu, x, y, B, C, T, lens, norm_w, norm_b, gb, gb_stride, eps,
                             BE_ERR));
#endif
    return be_unsupported(s, "adain");
}

/* cos and sin of 2 pi m / n, exact at the quarter points (as the CUDA
 * kernel and Kokoro's tables). */
static void twiddle(int m, int n, double *c, double *sn) {
    if (4 * m == n) *c = 0, *sn = 1;
    else if (2 * m == n) *c = -1, *sn = 0;
    else if (4 * m == 3 * n) *c = 0, *sn = -1;
    else if (m == 0) *c = 1, *sn = 0;
    else *c = cos(2.0 * M_PI * m / n), *sn = sin(2.0 * M_PI * m / n);
}

int choir_op_istft_magphase(choir_stream *s, const float *P, int64_t B, int64_t F,
                            const int32_t *frames, int n_fft, int hop, float *out) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 1 || F < 2 || n_fft < 2 || n_fft > 64 || (n_fft & 1) || hop < 1 || hop > n_fft)
        return be_invalid(s, "istft: n_fft %d, hop %d, %lld frames", n_fft, hop, (long long)F);
    if (be_host(s)) {
        const int nb = n_fft / 2 + 1;
        int64_t n_out = (int64_t)hop * (F - 1);
        for (int64_t b = 0; b < B; b++) {
            int64_t Fb = frames ? frames[b] : F;
            const float *Pb = P + b * (int64_t)(2 * nb) * F;
            for (int64_t smp = 0; smp < n_out; smp++) {
                float *o = out + b * n_out + smp;
                if (smp >= hop * (Fb - 1)) {
                    *o = 0.0f;
                    continue;
                }
                /* The frames covering this sample, inverse-transformed at it
                 * and overlap-added in frame order. */
                int64_t p = smp + n_fft / 2;
                int64_t f_lo = p - n_fft + 1 <= 0 ? 0 : (p - n_fft + 1 + hop - 1) / hop;
                int64_t f_hi = p / hop < Fb - 1 ? p / hop : Fb - 1;
                float ola = 0.0f, env = 0.0f;
                for (int64_t f = f_lo; f <= f_hi; f++) {
                    int n = (int)(p - f * hop);
                    /* As the CUDA kernel: DC and Nyquist first, then the other bins. */
                    double re, im, c, sn;
                    float mag = expf(Pb[f]), ph = sinf(Pb[nb * F + f]);
                    double y = (double)(mag * cosf(ph));
                    mag = expf(Pb[(nb - 1) * F + f]), ph = sinf(Pb[(2 * nb - 1) * F + f]);
                    y += (double)(mag * cosf(ph)) * ((n & 1) ? -1.0 : 1.0);
                    for (int k = 1; k < nb - 1; k++) {
                        mag = expf(Pb[k * F + f]), ph = sinf(Pb[(nb + k) * F + f]);
                        re = (double)(mag * cosf(ph));
                        im = (double)(mag * sinf(ph));
                        twiddle((k * n) % n_fft, n_fft, &c, &sn);
                        y += 2.0 * (re * c - im * sn);
                    }
                    float w = (float)(0.5 - 0.5 * cos(2.0 * M_PI * n / n_fft));
                    ola += w * (float)(y / n_fft);
                    env += w * w;
                }
                *o = ola / env;
            }
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "istft",
            choir_cuda_istft_magphase(s->be->cu, P, B, F, frames, n_fft, hop, out, BE_ERR));
#endif
    return be_unsupported(s, "istft_magphase");
}
