/* SAM-Audio's operations (choir/backend_sam.h): the CPU versions over
 * choir/kernels.h and choir/kernels_ext.h, the CUDA ones in cuda_sam.cu. */
#include <string.h>

#include "choir/backend_sam.h"
#include "choir/kernels.h"
#include "choir/kernels_ext.h"
#include "tensor/backend/backend_internal.h"
#include "tensor/cpu/cpu_kernels.h"

#ifdef CHOIR_HAVE_CUDA
#include "choir/cuda_sam.h"
#endif

int choir_op_sam_snake(choir_stream *s, float *x, int64_t B, int64_t C, int64_t T,
                       const float *alpha) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || C < 0 || T < 0) return be_invalid(s, "sam_snake: negative size");
    if (B == 0 || C == 0 || T == 0) return 0;
    if (be_host(s)) {
        for (int64_t b = 0; b < B; b++) choir_snake_eps(x + b * C * T, C, T, alpha);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "sam_snake", choir_cuda_sam_snake(s->be->cu, x, B * C, T, C, alpha, BE_ERR));
#endif
    return be_unsupported(s, "sam_snake");
}

int choir_op_sam_elu(choir_stream *s, float *x, int64_t n) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n <= 0) return n < 0 ? be_invalid(s, "sam_elu: negative size") : 0;
    if (be_host(s)) {
        choir_elu(x, n);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "sam_elu", choir_cuda_sam_elu(s->be->cu, x, n, BE_ERR));
#endif
    return be_unsupported(s, "sam_elu");
}

int choir_op_sam_pad(choir_stream *s, const float *x, int64_t C, int64_t T, int64_t left,
                     int64_t right, bool reflect, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (C < 0 || T < 1 || left < 0 || right < 0 || (reflect && (left >= T || right >= T)))
        return be_invalid(s, "sam_pad: %lld channels of %lld, pads %lld/%lld%s", (long long)C,
                          (long long)T, (long long)left, (long long)right,
                          reflect ? " (reflect needs pads < length)" : "");
    if (C == 0) return 0;
    if (be_host(s)) {
        if (reflect) {
            choir_pad_reflect(x, C, T, left, right, y);
            return 0;
        }
        int64_t To = left + T + right;
        for (int64_t c = 0; c < C; c++) {
            float *row = y + c * To;
            memset(row, 0, (size_t)left * sizeof *row);
            memcpy(row + left, x + c * T, (size_t)T * sizeof *row);
            memset(row + left + T, 0, (size_t)right * sizeof *row);
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "sam_pad", choir_cuda_sam_pad(s->be->cu, x, C, T, left, right, reflect, y, BE_ERR));
#endif
    return be_unsupported(s, "sam_pad");
}

int choir_op_sam_lstm(choir_stream *s, const float *x, int64_t T, int64_t In, int64_t H,
                      const float *w_ih, const float *w_hh, const float *b_ih,
                      const float *b_hh, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (T < 0 || In < 0 || H <= 0)
        return be_invalid(s, "sam_lstm: T %lld, In %lld, H %lld", (long long)T, (long long)In,
                          (long long)H);
    if (T == 0) return 0;
    int64_t G = 4 * H;
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        float *scratch = choir_kscratch_get((size_t)(G * (T + 1)) * sizeof(float));
        if (!scratch) {
            be_kernel_end(prev);
            return choir_stream_fail(s, CHOIR_ENOMEM, "backend cpu: sam_lstm: out of memory");
        }
        choir_lstm(x, T, In, H, w_ih, w_hh, b_ih, b_hh, NULL, NULL, false, y, H, scratch);
        choir_kscratch_put(scratch);
        be_kernel_end(prev);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    /* The gates of every step are one product up front; the recurrence then
     * reads them row by row. */
    size_t mark = choir_stream_mark(s);
    float *gates = choir_stream_floats(s, G * (T + 1), "sam_lstm");
    if (!gates) return s->err.code;
    choir_err e = {0};
    int rc = choir_cuda_sam_lstm(s->be->cu, x, T, In, H, w_ih, w_hh, b_ih, b_hh, gates, y, &e);
    choir_stream_release(s, mark);
    return be_done(s, rc, &e, "sam_lstm");
#endif
    return be_unsupported(s, "sam_lstm");
}

int choir_op_sam_modulate(choir_stream *s, float *h, int64_t rows, int64_t D, const float *shift,
                          const float *scale) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || D <= 0) return be_invalid(s, "sam_modulate: %lld rows of %lld", (long long)rows,
                                              (long long)D);
    if (rows == 0) return 0;
    if (be_host(s)) {
        for (int64_t t = 0; t < rows; t++)
            for (int64_t c = 0; c < D; c++) h[t * D + c] = h[t * D + c] * (1.0f + scale[c]) + shift[c];
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "sam_modulate", choir_cuda_sam_modulate(s->be->cu, h, rows, D, shift, scale, BE_ERR));
#endif
    return be_unsupported(s, "sam_modulate");
}

int choir_op_sam_gated_add(choir_stream *s, float *x, const float *o, int64_t rows, int64_t D,
                           const float *gate) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || D <= 0) return be_invalid(s, "sam_gated_add: %lld rows of %lld", (long long)rows,
                                              (long long)D);
    if (rows == 0) return 0;
    if (be_host(s)) {
        for (int64_t t = 0; t < rows; t++)
            for (int64_t c = 0; c < D; c++) x[t * D + c] += o[t * D + c] * gate[c];
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "sam_gated_add", choir_cuda_sam_gated_add(s->be->cu, x, o, rows, D, gate, BE_ERR));
#endif
    return be_unsupported(s, "sam_gated_add");
}

int choir_op_sam_axpy(choir_stream *s, float *y, const float *a, float alpha, const float *b,
                      int64_t n) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n <= 0) return n < 0 ? be_invalid(s, "sam_axpy: negative size") : 0;
    if (be_host(s)) {
        for (int64_t i = 0; i < n; i++) y[i] = a[i] + alpha * b[i];
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "sam_axpy", choir_cuda_sam_axpy(s->be->cu, y, a, alpha, b, n, BE_ERR));
#endif
    return be_unsupported(s, "sam_axpy");
}
