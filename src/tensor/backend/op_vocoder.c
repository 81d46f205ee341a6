/* Vocoder operations over padded batches (choir/backend_vocoder.h). The CPU
 * versions run each item with the kernels.h calls a single item uses, so a
 * batch of one is bit for bit the plain kernels; the CUDA versions are
 * choir/cuda_audio.h's batched kernels. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/backend_vocoder.h"
#include "choir/kernels.h"
#include "tensor/backend/backend_internal.h"
#include "tensor/cpu/cpu_kernels.h"

#ifdef CHOIR_HAVE_CUDA
#include "choir/cuda_audio.h"
#include "choir/cuda_vocoder.h"
#endif

/* Zeroes y[b, :, out_lens[b]:] of y [B, C, T]. */
static void zero_tails(float *y, int64_t B, int64_t C, int64_t T, const int32_t *out_lens) {
    if (!out_lens) return;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = out_lens[b] < 0 ? 0 : (out_lens[b] > T ? T : out_lens[b]);
        if (n == T) continue;
        for (int64_t c = 0; c < C; c++)
            memset(y + (b * C + c) * T + n, 0, (size_t)(T - n) * sizeof(float));
    }
}

static bool conv_weight_ok(const choir_weight *w, int64_t rows, int64_t cols) {
    return w && w->data && w->rows == rows && w->cols == cols &&
           (w->kind == CHOIR_WEIGHT_F32 || w->kind == CHOIR_WEIGHT_BF16);
}

int choir_op_conv1d_lens(choir_stream *s, const float *x, int64_t B, int64_t Cin, int64_t T,
                         const choir_weight *w, const float *bias, int64_t Cout, int64_t kernel,
                         int stride, int padding, int dilation, const int32_t *out_lens,
                         float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || Cin <= 0 || Cout <= 0 || kernel <= 0 || stride < 1 || dilation < 1 ||
        padding < 0 || !conv_weight_ok(w, Cout, Cin * kernel))
        return be_invalid(s, "conv1d_lens: Cin %lld, Cout %lld, kernel %lld, stride %d, "
                             "dilation %d, padding %d, or a weight not [Cout, Cin K] f32/bf16",
                          (long long)Cin, (long long)Cout, (long long)kernel, stride, dilation,
                          padding);
    int64_t Tout = choir_conv1d_out_len(T, kernel, stride, padding, dilation);
    if (Tout <= 0 || B == 0) return 0;
    if (be_host(s)) {
        if (w->kind != CHOIR_WEIGHT_F32) return be_unsupported(s, "conv1d_lens (bf16 weight)");
        choir_kernel_scratch *prev = be_kernel_begin(s);
        for (int64_t b = 0; b < B; b++)
            choir_conv1d(x + b * Cin * T, Cin, T, (const float *)w->data, bias, Cout, kernel,
                         stride, padding, dilation, 1, y + b * Cout * Tout);
        be_kernel_end(prev);
        zero_tails(y, B, Cout, Tout, out_lens);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_conv_weight cw = {w->data, w->kind == CHOIR_WEIGHT_BF16};
    BE_CUDA(s, "conv1d_lens",
            choir_cuda_conv1d_batched(s->be->cu, x, B, Cin, T, cw, bias, Cout, kernel, stride,
                                      padding, dilation, out_lens, y, BE_ERR));
#endif
    return be_unsupported(s, "conv1d_lens");
}

/* choir_op_conv1d_adain_snake as the operations it is made of: the CPU's
 * computation (the oracle) and the CUDA fallback. */
static int adain_snake_conv_ops(choir_stream *s, const float *x, int64_t B, int64_t Cin, int64_t T,
                                const choir_adain_snake *pre, const choir_weight *w,
                                const float *bias, int64_t Cout, int64_t kernel, int padding,
                                int dilation, const int32_t *out_lens, const float *residual,
                                float *y) {
    const int64_t Tout = choir_conv1d_out_len(T, kernel, 1, padding, dilation);
    size_t mark = choir_stream_mark(s);
    float *act = choir_stream_floats(s, B * Cin * T, "conv1d_adain_snake activation");
    float *prod = residual ? choir_stream_floats(s, B * Cout * Tout, "conv1d_adain_snake product")
                           : y;
    if (act && prod) {
        choir_op_adain(s, x, act, B, Cin, T, pre->lens, pre->norm_w, pre->norm_b, pre->gb,
                       pre->gb_stride, pre->eps);
        choir_op_snake(s, act, B, Cin, T, pre->alpha);
        choir_op_conv1d_lens(s, act, B, Cin, T, w, bias, Cout, kernel, 1, padding, dilation,
                             out_lens, prod);
        if (residual) choir_op_add_scale(s, residual, prod, y, B * Cout * Tout, 1.0f);
    }
    choir_stream_release(s, mark);
    return choir_stream_status(s, NULL);
}

/* y's statistics partials on the host (choir_cuda_adain_stats's layout and
 * sums; the CPU never reads them, but the operation's contract holds on
 * either backend) */
static void host_adain_stats(const float *x, int64_t B, int64_t C, int64_t T,
                             const int32_t *lens, double *part) {
    const int64_t tiles = (T + 127) / 128;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = lens ? lens[b] : T;
        n = n < 0 ? 0 : (n > T ? T : n);
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < tiles; i++) {
                double sum = 0, sq = 0;
                for (int64_t t = 128 * i; t < 128 * i + 128 && t < n; t++) {
                    const double v = x[(b * C + c) * T + t];
                    sum += v, sq += v * v;
                }
                part[((b * C + c) * tiles + i) * 2] = sum;
                part[((b * C + c) * tiles + i) * 2 + 1] = sq;
            }
    }
}

int choir_op_adain_stats(choir_stream *s, const float *x, int64_t B, int64_t C, int64_t T,
                         const int32_t *lens, double *part) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || C <= 0 || T < 0 || !part) return be_invalid(s, "adain_stats: C %lld", (long long)C);
    if (B == 0 || T == 0) return 0;
    if (be_host(s)) {
        host_adain_stats(x, B, C, T, lens, part);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "adain_stats", choir_cuda_adain_stats(s->be->cu, x, B, C, T, lens, part, BE_ERR));
#endif
    return be_unsupported(s, "adain_stats");
}

int choir_op_conv1d_adain_snake_stats(choir_stream *s, const float *x, int64_t B, int64_t Cin,
                                      int64_t T, const choir_adain_snake *pre,
                                      const choir_weight *w, const float *bias, int64_t Cout,
                                      int64_t kernel, int padding, int dilation,
                                      const int32_t *out_lens, const float *residual, float *y,
                                      double *stats_out, const int32_t *stats_lens) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || Cin <= 0 || Cout <= 0 || kernel <= 0 || dilation < 1 || padding < 0 || !pre ||
        !pre->gb || !pre->alpha || !conv_weight_ok(w, Cout, Cin * kernel) || x == y)
        return be_invalid(s, "conv1d_adain_snake: Cin %lld, Cout %lld, kernel %lld, dilation %d, "
                             "padding %d, no style or alpha, y aliasing x, or a weight not "
                             "[Cout, Cin K] f32/bf16",
                          (long long)Cin, (long long)Cout, (long long)kernel, dilation, padding);
    const int64_t Tout = choir_conv1d_out_len(T, kernel, 1, padding, dilation);
    if (Tout <= 0 || B == 0 || T <= 0) return 0;
#ifdef CHOIR_HAVE_CUDA
    if (!be_host(s)) {
        choir_cuda_conv_weight cw = {w->data, w->kind == CHOIR_WEIGHT_BF16};
        choir_cuda_adain_snake cp = {pre->lens, pre->norm_w,    pre->norm_b, pre->gb,
                                     pre->gb_stride, pre->eps, pre->alpha, pre->part};
        choir_err e = {0};
        int rc = choir_cuda_conv1d_adain_snake_stats(s->be->cu, x, B, Cin, T, &cp, cw, bias, Cout,
                                                     kernel, padding, dilation, out_lens,
                                                     residual, y, stats_out, stats_lens, &e);
        if (rc != CHOIR_EUNSUPPORTED) return be_done(s, rc, &e, "conv1d_adain_snake");
    }
#endif
    /* the unfused operations (their AdaIN takes its own statistics), then
     * y's partials by their own pass */
    int rc = adain_snake_conv_ops(s, x, B, Cin, T, pre, w, bias, Cout, kernel, padding, dilation,
                                  out_lens, residual, y);
    if (!rc && stats_out) rc = choir_op_adain_stats(s, y, B, Cout, Tout, stats_lens, stats_out);
    return rc;
}

int choir_op_conv1d_adain_snake(choir_stream *s, const float *x, int64_t B, int64_t Cin,
                                int64_t T, const choir_adain_snake *pre, const choir_weight *w,
                                const float *bias, int64_t Cout, int64_t kernel, int padding,
                                int dilation, const int32_t *out_lens, const float *residual,
                                float *y) {
    return choir_op_conv1d_adain_snake_stats(s, x, B, Cin, T, pre, w, bias, Cout, kernel, padding,
                                             dilation, out_lens, residual, y, NULL, NULL);
}

int choir_op_conv_transpose1d_lens(choir_stream *s, const float *x, int64_t B, int64_t Cin,
                                   int64_t T, const choir_weight *w, const float *bias,
                                   int64_t Cout, int64_t kernel, int stride, int padding,
                                   int output_padding, const int32_t *out_lens, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || Cin <= 0 || Cout <= 0 || kernel <= 0 || stride < 1 || padding < 0 ||
        output_padding < 0 || output_padding >= stride ||
        !conv_weight_ok(w, Cin, Cout * kernel))
        return be_invalid(s, "conv_transpose1d_lens: Cin %lld, Cout %lld, kernel %lld, stride %d, "
                             "padding %d, output padding %d, or a weight not [Cin, Cout K]",
                          (long long)Cin, (long long)Cout, (long long)kernel, stride, padding,
                          output_padding);
    int64_t Tout = choir_conv_transpose1d_out_len(T, kernel, stride, padding, output_padding, 1);
    if (Tout <= 0 || B == 0) return 0;
    if (be_host(s)) {
        if (w->kind != CHOIR_WEIGHT_F32)
            return be_unsupported(s, "conv_transpose1d_lens (bf16 weight)");
        choir_kernel_scratch *prev = be_kernel_begin(s);
        for (int64_t b = 0; b < B; b++)
            choir_conv_transpose1d(x + b * Cin * T, Cin, T, (const float *)w->data, bias, Cout,
                                   kernel, stride, padding, output_padding, 1, 1,
                                   y + b * Cout * Tout);
        be_kernel_end(prev);
        zero_tails(y, B, Cout, Tout, out_lens);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_conv_weight cw = {w->data, w->kind == CHOIR_WEIGHT_BF16};
    BE_CUDA(s, "conv_transpose1d_lens",
            choir_cuda_conv_transpose1d_batched(s->be->cu, x, B, Cin, T, cw, bias, Cout, kernel,
                                                stride, padding, output_padding, out_lens, y,
                                                BE_ERR));
#endif
    return be_unsupported(s, "conv_transpose1d_lens");
}

int choir_op_conv_transpose1d_depthwise_lens(choir_stream *s, const float *x, int64_t B,
                                             int64_t C, int64_t T, const float *weight,
                                             const float *bias, int64_t kernel, int stride,
                                             int padding, int output_padding,
                                             const int32_t *out_lens, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || C <= 0 || kernel <= 0 || stride < 1 || padding < 0 || output_padding < 0 ||
        output_padding >= stride || !weight)
        return be_invalid(s, "conv_transpose1d_depthwise_lens: C %lld, kernel %lld, stride %d, "
                             "padding %d, output padding %d",
                          (long long)C, (long long)kernel, stride, padding, output_padding);
    int64_t Tout = choir_conv_transpose1d_out_len(T, kernel, stride, padding, output_padding, 1);
    if (Tout <= 0 || B == 0) return 0;
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        for (int64_t b = 0; b < B; b++)
            choir_conv_transpose1d(x + b * C * T, C, T, weight, bias, C, kernel, stride, padding,
                                   output_padding, 1, (int)C, y + b * C * Tout);
        be_kernel_end(prev);
        zero_tails(y, B, C, Tout, out_lens);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "conv_transpose1d_depthwise_lens",
            choir_cuda_conv_transpose1d_depthwise(s->be->cu, x, B, C, T, weight, bias, kernel,
                                                  stride, padding, output_padding, out_lens, y,
                                                  BE_ERR));
#endif
    return be_unsupported(s, "conv_transpose1d_depthwise_lens");
}

int choir_op_add_scale(choir_stream *s, const float *a, const float *b, float *y, int64_t n,
                       float scale) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n < 0) return be_invalid(s, "add_scale: %lld values", (long long)n);
    if (be_host(s)) {
        for (int64_t i = 0; i < n; i++) y[i] = (a[i] + b[i]) * scale;
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "add_scale", choir_cuda_add_scale(s->be->cu, a, b, y, n, scale, BE_ERR));
#endif
    return be_unsupported(s, "add_scale");
}

int choir_op_add_div(choir_stream *s, const float *a, const float *b, float *y, int64_t n,
                     float divisor) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n < 0) return be_invalid(s, "add_div: %lld values", (long long)n);
    if (be_host(s)) {
        for (int64_t i = 0; i < n; i++) y[i] = (a[i] + b[i]) / divisor;
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "add_div", choir_cuda_add_div(s->be->cu, a, b, y, n, divisor, BE_ERR));
#endif
    return be_unsupported(s, "add_div");
}

int choir_op_upsample2_nearest(choir_stream *s, const float *x, int64_t B, int64_t C, int64_t T,
                               float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || C < 0 || T < 0) return be_invalid(s, "upsample2_nearest: bad shape");
    if (be_host(s)) {
        for (int64_t r = 0; r < B * C; r++)
            for (int64_t t = 0; t < T; t++) y[r * 2 * T + 2 * t] = y[r * 2 * T + 2 * t + 1] = x[r * T + t];
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "upsample2_nearest",
            choir_cuda_upsample2_nearest(s->be->cu, x, B, C, T, y, BE_ERR));
#endif
    return be_unsupported(s, "upsample2_nearest");
}

int choir_op_reflect_pad(choir_stream *s, const float *x, int64_t B, int64_t C, int64_t T,
                         const int32_t *lens, int left, int right, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || C < 0 || T < 0 || left < 0 || right < 0 || (!lens && (left >= T || right >= T)))
        return be_invalid(s, "reflect_pad: (%d, %d) of %lld samples", left, right, (long long)T);
    if (be_host(s)) {
        const int64_t To = T + left + right;
        for (int64_t b = 0; b < B; b++) {
            int64_t len = lens ? lens[b] : T;
            len = len < 0 ? 0 : (len > T ? T : len);
            for (int64_t c = 0; c < C; c++) {
                const float *xr = x + (b * C + c) * T;
                float *yr = y + (b * C + c) * To;
                for (int64_t t = 0; t < To; t++) {
                    if (t >= len + left + right || len == 0) {
                        yr[t] = 0.0f;
                        continue;
                    }
                    int64_t i = t - left;
                    if (i < 0) i = -i;
                    if (i >= len) i = 2 * (len - 1) - i;
                    i = i < 0 ? 0 : (i >= len ? len - 1 : i); /* a pad wider than the item */
                    yr[t] = xr[i];
                }
            }
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "reflect_pad",
            choir_cuda_reflect_pad(s->be->cu, x, B, C, T, lens, left, right, y, BE_ERR));
#endif
    return be_unsupported(s, "reflect_pad");
}

int choir_op_copy_channels(choir_stream *s, const float *src, int64_t B, int64_t Cs, int64_t T,
                           float *dst, int64_t Cd, int64_t c0) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || Cs < 0 || T < 0 || c0 < 0 || c0 + Cs > Cd)
        return be_invalid(s, "copy_channels: %lld channels at %lld of %lld", (long long)Cs,
                          (long long)c0, (long long)Cd);
    if (be_host(s)) {
        for (int64_t b = 0; b < B; b++)
            memcpy(dst + (b * Cd + c0) * T, src + b * Cs * T, (size_t)(Cs * T) * sizeof(float));
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "copy_channels",
            choir_cuda_copy_channels(s->be->cu, src, B, Cs, T, dst, Cd, c0, BE_ERR));
#endif
    return be_unsupported(s, "copy_channels");
}

static bool nsf_ok(const choir_nsf_source *p) {
    return p && p->harmonics >= 1 && p->harmonics <= CHOIR_NSF_MAX_HARMONICS && p->hop >= 1 &&
           p->upsample >= p->hop && p->upsample % p->hop == 0 && p->n_fft >= 2 &&
           p->n_fft <= CHOIR_NSF_MAX_NFFT && !(p->n_fft & 1) && p->sample_rate > 0;
}

int choir_op_nsf_source_stft(choir_stream *s, const float *f0, int64_t B, int64_t T,
                             const int32_t *lens, const choir_nsf_source *p,
                             const uint64_t *seeds, const bool *noisy, float *S) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || T < 1 || T > INT32_MAX / 1024 || !nsf_ok(p))
        return be_invalid(s, "nsf_source_stft: %lld items of %lld F0 values, or bad source "
                             "parameters (harmonics 1..%d, n_fft even <= %d, upsample a multiple "
                             "of hop)",
                          (long long)B, (long long)T, CHOIR_NSF_MAX_HARMONICS, CHOIR_NSF_MAX_NFFT);
    if (B == 0) return 0;
    const int64_t rows = p->n_fft + 2, F = p->upsample * T / p->hop + 1;
    size_t mark = choir_stream_mark(s);
    /* one item's source at a time on the CPU, all of them on a device */
    const int64_t items = be_host(s) ? 1 : B;
    float *work = choir_stream_floats(s, items * (p->upsample + p->harmonics) * T, "nsf source");
    if (!work) return s->err.code;
    if (be_host(s)) {
        for (int64_t b = 0; b < B; b++) {
            int64_t Tb = lens ? lens[b] : T;
            Tb = Tb < 0 ? 0 : (Tb > T ? T : Tb);
            const int64_t Fb = Tb ? p->upsample * Tb / p->hop + 1 : 0;
            float *Sb = S + b * rows * F;
            const uint64_t *seed = seeds && (!noisy || noisy[b]) ? &seeds[b] : NULL;
            if (Tb) choir_nsf_source_stft(p, f0 + b * T, Tb, NULL, seed, Sb, F, work);
            for (int64_t k = 0; k < rows && Fb < F; k++)
                memset(Sb + k * F + Fb, 0, (size_t)(F - Fb) * sizeof(float));
        }
        choir_stream_release(s, mark);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_err e = {0};
    int rc = choir_cuda_nsf_source_stft(s->be->cu, f0, B, T, lens, p, seeds, noisy, work, S, &e);
    choir_stream_release(s, mark);
    return be_done(s, rc, &e, "nsf_source_stft");
#endif
    choir_stream_release(s, mark);
    return be_unsupported(s, "nsf_source_stft");
}

int choir_backend_bilstm_weights(choir_backend_weights *ws, choir_backend *be,
                                 const float *const w_ih[2], const float *const w_hh[2],
                                 const float *const b_ih[2], const float *const b_hh[2], int64_t In,
                                 int64_t H, choir_bilstm_weights *out) {
    memset(out, 0, sizeof *out);
    out->In = In, out->H = H;
    if (choir_backend_is_host(be)) {
        for (int d = 0; d < 2; d++)
            out->w_ih[d] = w_ih[d], out->w_hh[d] = w_hh[d], out->b_ih[d] = b_ih[d],
            out->b_hh[d] = b_hh[d];
        return choir_backend_weights_status(ws, NULL);
    }
    const int64_t G = 4 * H, n = 2 * G * (In > H ? In : H);
    float *stage = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof(float));
    if (!stage) return CHOIR_ENOMEM;
    for (int d = 0; d < 2; d++) memcpy(stage + d * G * In, w_ih[d], (size_t)(G * In) * sizeof(float));
    out->w_ih2 = choir_backend_vec(ws, stage, 2 * G * In);
    for (int d = 0; d < 2; d++) memcpy(stage + d * G * H, w_hh[d], (size_t)(G * H) * sizeof(float));
    out->w_hh2 = choir_backend_vec(ws, stage, 2 * G * H);
    for (int d = 0; d < 2; d++)
        for (int64_t i = 0; i < G; i++)
            stage[d * G + i] = (b_ih[d] ? b_ih[d][i] : 0.0f) + (b_hh[d] ? b_hh[d][i] : 0.0f);
    out->bias2 = choir_backend_vec(ws, stage, 2 * G);
    choir_free(stage);
    return choir_backend_weights_status(ws, NULL);
}

int choir_op_bilstm_w(choir_stream *s, const float *x, int64_t B, int64_t T,
                      const choir_bilstm_weights *w, const int32_t *lens, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || T < 0 || !w || w->In < 0 || w->H <= 0)
        return be_invalid(s, "bilstm_w: B %lld, T %lld or no weights", (long long)B, (long long)T);
    if (B == 0 || T == 0) return 0;
    const int64_t In = w->In, H = w->H, G = 4 * H;
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        float *scratch = choir_kscratch_get((size_t)(G * (T + 1)) * sizeof(float));
        if (!scratch) {
            be_kernel_end(prev);
            return choir_stream_fail(s, CHOIR_ENOMEM, "backend cpu: bilstm: out of memory");
        }
        for (int64_t b = 0; b < B; b++) {
            int64_t L = lens ? lens[b] : T;
            L = L < 0 ? 0 : (L > T ? T : L);
            const float *xb = x + b * T * In;
            float *yb = y + b * T * 2 * H;
            for (int d = 0; d < 2; d++)
                choir_lstm(xb, L, In, H, w->w_ih[d], w->w_hh[d], w->b_ih[d], w->b_hh[d], NULL,
                           NULL, d == 1, yb + d * H, 2 * H, scratch);
            if (L < T) memset(yb + L * 2 * H, 0, (size_t)((T - L) * 2 * H) * sizeof(float));
        }
        choir_kscratch_put(scratch);
        be_kernel_end(prev);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    size_t mark = choir_stream_mark(s);
    float *scratch = choir_stream_floats(s, choir_cuda_bilstm_scratch_floats(B, T, H), "bilstm");
    if (!scratch) return s->err.code;
    choir_err e = {0};
    int rc = choir_cuda_bilstm(s->be->cu, x, B, T, In, H, w->w_ih2, w->w_hh2, w->bias2, lens,
                               scratch, y, &e);
    choir_stream_release(s, mark);
    return be_done(s, rc, &e, "bilstm_w");
#endif
    return be_unsupported(s, "bilstm_w");
}
