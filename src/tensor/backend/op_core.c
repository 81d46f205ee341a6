/* Core operations: transfers and copies, matrix products, attention and the
 * KV-cache row moves, embeddings. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "tensor/backend/backend_internal.h"

/* --- transfers ------------------------------------------------------------------ */

int choir_op_upload(choir_stream *s, void *dst, const void *src, size_t bytes) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (be_host(s)) {
        if (bytes) memcpy(dst, src, bytes);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_buf b = be_buf(dst, bytes);
    BE_CUDA(s, "upload", choir_cuda_upload(s->be->cu, &b, 0, src, bytes, BE_ERR));
#endif
    return be_unsupported(s, "upload");
}

int choir_op_download(choir_stream *s, void *dst, const void *src, size_t bytes) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (be_host(s)) {
        if (bytes) memcpy(dst, src, bytes);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_buf b = be_buf(src, bytes);
    BE_CUDA(s, "download", choir_cuda_download(s->be->cu, dst, &b, 0, bytes, BE_ERR));
#endif
    return be_unsupported(s, "download");
}

int choir_op_upload_async(choir_stream *s, void *dst, const void *src, size_t bytes) {
    if (be_host(s)) return choir_op_upload(s, dst, src, bytes);
    if (!choir_stream_ok(s)) return s->err.code;
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_buf b = be_buf(dst, bytes);
    BE_CUDA(s, "upload", choir_cuda_upload_async(s->be->cu, &b, 0, src, bytes, BE_ERR));
#endif
    return be_unsupported(s, "upload");
}

int choir_op_download_async(choir_stream *s, void *dst, const void *src, size_t bytes) {
    if (be_host(s)) return choir_op_download(s, dst, src, bytes);
    if (!choir_stream_ok(s)) return s->err.code;
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_buf b = be_buf(src, bytes);
    BE_CUDA(s, "download", choir_cuda_download_async(s->be->cu, dst, &b, 0, bytes, BE_ERR));
#endif
    return be_unsupported(s, "download");
}

int choir_op_copy(choir_stream *s, void *dst, const void *src, size_t bytes) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (be_host(s)) {
        if (bytes) memmove(dst, src, bytes);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "copy", choir_cuda_copy(s->be->cu, dst, src, bytes, BE_ERR));
#endif
    return be_unsupported(s, "copy");
}

int choir_op_copy_rows(choir_stream *s, float *dst, int64_t ldd, const float *src, int64_t lds,
                       int64_t rows, int64_t cols) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (rows < 0 || cols < 0 || ldd < cols || lds < cols)
        return be_invalid(s, "copy_rows: %lld x %lld with strides %lld, %lld", (long long)rows,
                          (long long)cols, (long long)ldd, (long long)lds);
    if (be_host(s)) {
        for (int64_t r = 0; r < rows; r++)
            memmove(dst + r * ldd, src + r * lds, (size_t)cols * sizeof(float));
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    if (ldd == cols && lds == cols)
        BE_CUDA(s, "copy_rows",
                choir_cuda_copy(s->be->cu, dst, src, (size_t)(rows * cols) * sizeof(float), BE_ERR));
    BE_CUDA(s, "copy_rows",
            choir_cuda_copy_rows(s->be->cu, dst, ldd, src, lds, rows, cols, BE_ERR));
#endif
    return be_unsupported(s, "copy_rows");
}

int choir_op_zero(choir_stream *s, void *dst, size_t bytes) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (be_host(s)) {
        if (bytes) memset(dst, 0, bytes);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_buf b = be_buf(dst, bytes);
    BE_CUDA(s, "zero", choir_cuda_memset0(s->be->cu, &b, 0, bytes, BE_ERR));
#endif
    return be_unsupported(s, "zero");
}

int choir_op_convert(choir_stream *s, const float *src, void *dst, choir_dtype dst_dtype,
                     int64_t n) {
    if (!choir_stream_ok(s)) return s->err.code;
    bool f16 = dst_dtype == CHOIR_DTYPE_F16 && be_host(s);
    if (n < 0 || (dst_dtype != CHOIR_DTYPE_F32 && dst_dtype != CHOIR_DTYPE_BF16 && !f16))
        return be_invalid(s, "convert: %lld values to dtype %d", (long long)n, (int)dst_dtype);
    if (n == 0) return 0;
    if (dst_dtype == CHOIR_DTYPE_F32) {
        /* A copy on every backend. */
        s->ops--;
        return choir_op_copy(s, dst, src, (size_t)n * sizeof(float));
    }
    if (be_host(s)) {
        if (f16)
            choir_f32_to_f16_n(src, dst, n);
        else
            choir_f32_to_bf16_n(src, dst, n);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "convert", choir_cuda_f32_to_bf16(s->be->cu, src, dst, n, BE_ERR));
#endif
    return be_unsupported(s, "convert");
}

/* --- products ---------------------------------------------------------------------- */

int choir_op_linear(choir_stream *s, const float *x, int64_t M, const choir_weight *W,
                    const float *bias, float *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (M < 0 || W->rows < 0 || W->cols < 0) return be_invalid(s, "linear: negative size");
    if (M == 0) return 0;
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        choir_linear(x, M, W, bias, y);
        be_kernel_end(prev);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_weight cw = be_cuda_weight(W);
    BE_CUDA(s, "linear", choir_cuda_linear(s->be->cu, x, M, &cw, bias, y, BE_ERR));
#endif
    return be_unsupported(s, "linear");
}

int choir_op_linear_ex(choir_stream *s, const float *x, int64_t M, const choir_weight *W,
                       const float *bias, float *y, unsigned flags, float *tmp) {
    if (!choir_stream_ok(s)) return s->err.code;
    bool gelu = flags & CHOIR_LINEAR_GELU, acc = flags & CHOIR_LINEAR_ACCUMULATE;
    if ((flags & ~3u) || (gelu && acc) || (acc && !tmp))
        return be_invalid(s, "linear_ex: flags %u%s", flags, acc && !tmp ? " without tmp" : "");
    if (M < 0 || W->rows < 0 || W->cols < 0) return be_invalid(s, "linear_ex: negative size");
    if (M == 0) return 0;
#ifdef CHOIR_HAVE_CUDA
    if (!be_host(s) && flags) {
        choir_cuda_weight cw = be_cuda_weight(W);
        if (choir_cuda_linear_fuses(M, &cw))
            BE_CUDA(s, "linear_ex", choir_cuda_linear_ex(s->be->cu, x, M, &cw, bias, y, acc, gelu, BE_ERR));
        /* The skinny kernel's rows (a batched decode step): the add in its epilogue. */
        if (acc && choir_cuda_linear_skinny_acc_ok(M, x, &cw))
            BE_CUDA(s, "linear_ex", choir_cuda_linear_skinny_acc(s->be->cu, x, M, &cw, bias, y, BE_ERR));
        /* cuBLAS's rows: the add through its C operand (choir_cuda_fused_rows). */
        if (acc && !bias && choir_cuda_rows_ok(M, &cw))
            BE_CUDA(s, "linear_ex", choir_cuda_linear_acc_rows(s->be->cu, x, M, &cw, y, BE_ERR));
    }
#endif
    if (acc) {
        choir_op_linear(s, x, M, W, bias, tmp);
        return choir_op_add(s, y, tmp, y, M * W->rows);
    }
    choir_op_linear(s, x, M, W, bias, y);
    return gelu ? choir_op_act(s, CHOIR_ACT_GELU_ERF, y, M * W->rows, 0.0f) : choir_stream_status(s, NULL);
}

int choir_op_swiglu_linear(choir_stream *s, float *gate, const float *up, int64_t M, const choir_weight *W,
                           const float *bias, float *y, unsigned flags, float *tmp) {
    if (!choir_stream_ok(s)) return s->err.code;
    bool acc = flags & CHOIR_LINEAR_ACCUMULATE;
    if ((flags & ~CHOIR_LINEAR_ACCUMULATE) || (acc && !tmp))
        return be_invalid(s, "swiglu_linear: flags %u%s", flags, acc && !tmp ? " without tmp" : "");
    if (M < 0 || W->rows < 0 || W->cols < 0) return be_invalid(s, "swiglu_linear: negative size");
    if (M == 0) return 0;
#ifdef CHOIR_HAVE_CUDA
    if (!be_host(s)) {
        choir_cuda_weight cw = be_cuda_weight(W);
        if (choir_cuda_rows_ok(M, &cw) && !(acc && bias))
            BE_CUDA(s, "swiglu_linear",
                    choir_cuda_swiglu_linear_rows(s->be->cu, gate, up, M, &cw, bias, y, acc, BE_ERR));
    }
#endif
    /* The two operations in turn, counted as this one. */
    int64_t ops = s->ops;
    choir_op_swiglu(s, gate, up, M * W->cols);
    choir_op_linear_ex(s, gate, M, W, bias, y, flags, tmp);
    s->ops = ops;
    return choir_stream_status(s, NULL);
}

int choir_op_gated_mlp(choir_stream *s, float *x, int64_t M, const float *ln_g, float eps,
                       const choir_weight *Wg, const choir_weight *Wu, const choir_weight *Wd, float *gate,
                       float *up, float *h, float *tmp) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (M < 0 || Wg->rows != Wu->rows || Wg->cols != Wu->cols || Wd->cols != Wg->rows || Wd->rows != Wg->cols)
        return be_invalid(s, "gated_mlp: gate [%lld x %lld], up [%lld x %lld], down [%lld x %lld] over %lld rows",
                          (long long)Wg->rows, (long long)Wg->cols, (long long)Wu->rows, (long long)Wu->cols,
                          (long long)Wd->rows, (long long)Wd->cols, (long long)M);
    if (M == 0) return 0;
#ifdef CHOIR_HAVE_CUDA
    if (!be_host(s)) {
        choir_cuda_weight cg = be_cuda_weight(Wg), cu = be_cuda_weight(Wu), cd = be_cuda_weight(Wd);
        /* gate and up stored as one [2I, H] weight: one product. */
        if (choir_cuda_prefill_fused_on() && choir_cuda_rows_ok(M, &cg) && choir_cuda_rows_ok(M, &cu) &&
            choir_cuda_rows_ok(M, &cd) && (const char *)Wu->data == (const char *)Wg->data + cg.data.bytes) {
            choir_cuda_weight cgu = cg;
            cgu.rows = 2 * Wg->rows;
            cgu.data.bytes = 2 * cg.data.bytes;
            if (choir_cuda_rows_ok(M, &cgu))
                BE_CUDA(s, "gated_mlp",
                        choir_cuda_gated_mlp_cat_rows(s->be->cu, x, M, ln_g, eps, &cgu, &cd, gate, up, h, BE_ERR));
        }
        if (choir_cuda_gated_mlp_ok(M, &cg, &cu, &cd))
            BE_CUDA(s, "gated_mlp",
                    choir_cuda_gated_mlp_rows(s->be->cu, x, M, ln_g, eps, &cg, &cu, &cd, gate, up, h, BE_ERR));
    }
#endif
    /* The two operations in turn, counted as this one. */
    int64_t ops = s->ops;
    choir_norm_linear p = {.ln_g = ln_g, .eps = eps, .rms = true, .n = 2, .W = {Wg, Wu}, .y = {gate, up}};
    choir_op_norm_linear(s, x, M, &p, h);
    choir_op_swiglu_linear(s, gate, up, M, Wd, NULL, x, CHOIR_LINEAR_ACCUMULATE, tmp);
    s->ops = ops;
    return choir_stream_status(s, NULL);
}

int choir_op_linear_n(choir_stream *s, const float *x, int64_t M, int n,
                      const choir_weight *const *W, const float *const *bias, float *const *y) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n < 0 || n > 8) return be_invalid(s, "linear_n: %d layers (0..8)", n);
    for (int i = 0; i < n; i++)
        if (M < 0 || W[i]->rows < 0 || W[i]->cols < 0)
            return be_invalid(s, "linear_n: negative size");
    if (M == 0 || n == 0) return 0;
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        choir_linear_n(x, M, n, W, bias, y);
        be_kernel_end(prev);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        s->ops--; /* one operation, however many layers */
        if (choir_op_linear(s, x, M, W[i], bias[i], y[i])) return s->err.code;
    }
    return 0;
}

/* norm_linear's GELU and stores after its products, counted as it. */
static int norm_linear_after(choir_stream *s, int64_t M, const choir_norm_linear *p) {
    int64_t ops = s->ops;
    for (int i = 0; i < p->n; i++) {
        const choir_rows_out *o = &p->store[i];
        if (p->flags & CHOIR_LINEAR_GELU)
            choir_op_act(s, CHOIR_ACT_GELU_ERF, p->y[i], M * p->W[i]->rows, 0.0f);
        if (o->dst)
            choir_op_rows_scatter(s, p->y[i], M, p->W[i]->rows, o->dst, o->dtype, o->slot_stride,
                                  o->ld, o->slot, o->pos);
    }
    s->ops = ops;
    return choir_stream_status(s, NULL);
}

int choir_op_norm_linear(choir_stream *s, const float *x, int64_t M, const choir_norm_linear *p,
                         float *h) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (p->n < 1 || p->n > CHOIR_NORM_LINEAR_MAX || (p->flags & ~CHOIR_LINEAR_GELU))
        return be_invalid(s, "norm_linear: %d layers (1..%d), flags %u", p->n,
                          CHOIR_NORM_LINEAR_MAX, p->flags);
    if (p->rms && p->ln_b) return be_invalid(s, "norm_linear: an RMS norm has no shift");
    int64_t K = p->W[0]->cols;
    for (int i = 0; i < p->n; i++) {
        if (p->W[i]->cols != K || p->W[i]->rows < 0 || !p->y[i])
            return be_invalid(s, "norm_linear: layer %d of %lld x %lld over rows of %lld", i,
                              (long long)p->W[i]->rows, (long long)p->W[i]->cols, (long long)K);
        if (p->store[i].dst && !p->store[i].pos)
            return be_invalid(s, "norm_linear: layer %d's rows stored without positions", i);
    }
    if (M < 0 || K < 0) return be_invalid(s, "norm_linear: negative size");
    if (M == 0) return 0;
#ifdef CHOIR_HAVE_CUDA
    if (!be_host(s)) {
        bool dense = true;
        choir_cuda_norm_linear_params c = {.gamma = p->ln_g, .beta = p->ln_b, .eps = p->eps, .n = p->n,
                                           .gelu = p->flags & CHOIR_LINEAR_GELU, .rms = p->rms};
        for (int i = 0; i < p->n; i++) {
            const choir_rows_out *o = &p->store[i];
            c.W[i] = be_cuda_weight(p->W[i]);
            c.bias[i] = p->bias[i];
            c.y[i] = p->y[i];
            c.store[i] = (choir_cuda_rows_out){.dst = o->dst, .bf16 = o->dtype == CHOIR_DTYPE_BF16,
                                               .slot_stride = o->slot_stride, .ld = o->ld,
                                               .slot = o->slot, .pos = o->pos};
            dense = dense && (!o->dst || o->dtype == CHOIR_DTYPE_F32 || o->dtype == CHOIR_DTYPE_BF16);
        }
        if (dense && choir_cuda_norm_linear_fuses(M, &c))
            BE_CUDA(s, "norm_linear", choir_cuda_norm_linear(s->be->cu, x, M, &c, BE_ERR));
        /* cuBLAS's rows (choir_cuda_fused_rows): the norm into bf16 rows in
         * h, read by every product; then the GELU and stores below. */
        bool rows = p->rms;
        for (int i = 0; rows && i < p->n; i++) rows = choir_cuda_rows_ok(M, &c.W[i]);
        if (rows) {
            choir_err e = {0};
            int rc = choir_cuda_norm_linear_rows(s->be->cu, x, M, &c, h, &e);
            if (rc) return be_done(s, rc, &e, "norm_linear");
            return norm_linear_after(s, M, p);
        }
    }
#endif
    /* The operations in turn, counted as this one. */
    int64_t ops = s->ops;
    if (p->rms)
        choir_op_rms_norm(s, x, h, M, K, p->ln_g, p->eps);
    else
        choir_op_layer_norm(s, x, h, M, K, p->ln_g, p->ln_b, p->eps);
    choir_op_linear_n(s, h, M, p->n, p->W, p->bias, p->y);
    s->ops = ops;
    return norm_linear_after(s, M, p);
}

int choir_op_norm_qkv_rope(choir_stream *s, const float *x, int64_t M, const choir_norm_linear *p, float *h,
                           int n_heads, int n_kv, int64_t head_dim, const int32_t *pos, float theta) {
    if (!choir_stream_ok(s)) return s->err.code;
    int64_t D = head_dim;
    if (p->n != 3 || !p->rms || p->flags || p->store[0].dst || p->store[1].dst || p->store[2].dst ||
        n_heads <= 0 || n_kv <= 0 || D <= 0 || p->W[0]->rows != n_heads * D || p->W[1]->rows != n_kv * D ||
        p->W[2]->rows != n_kv * D)
        return be_invalid(s, "norm_qkv_rope: %d layers of %lld, %lld, %lld rows for %d and %d heads of %lld",
                          p->n, (long long)p->W[0]->rows, (long long)p->W[1]->rows,
                          (long long)(p->n > 2 ? p->W[2]->rows : 0), n_heads, n_kv, (long long)D);
    if (M <= 0) return M < 0 ? be_invalid(s, "norm_qkv_rope: negative size") : 0;
#ifdef CHOIR_HAVE_CUDA
    if (!be_host(s) && choir_cuda_prefill_fused_on()) {
        choir_cuda_weight cq = be_cuda_weight(p->W[0]), ck = be_cuda_weight(p->W[1]), cv = be_cuda_weight(p->W[2]);
        bool one = cq.kind == CHOIR_WEIGHT_BF16 && ck.kind == CHOIR_WEIGHT_BF16 && cv.kind == CHOIR_WEIGHT_BF16 &&
                   ck.cols == cq.cols && cv.cols == cq.cols &&
                   (const char *)ck.data.ptr == (const char *)cq.data.ptr + cq.data.bytes &&
                   (const char *)cv.data.ptr == (const char *)ck.data.ptr + ck.data.bytes &&
                   choir_cuda_rows_ok(M, &cq) && choir_cuda_rows_ok(M, &ck) && choir_cuda_rows_ok(M, &cv);
        choir_cuda_weight cqkv = cq;
        cqkv.rows = cq.rows + ck.rows + cv.rows;
        cqkv.data.bytes = cq.data.bytes + ck.data.bytes + cv.data.bytes;
        if (one && choir_cuda_rows_ok(M, &cqkv)) {
            s->ops += 2; /* norm_linear and the two ropes */
            BE_CUDA(s, "norm_qkv_rope",
                    choir_cuda_qkv_rope_rows(s->be->cu, x, M, p->ln_g, p->eps, &cqkv, p->bias, n_heads, n_kv, D,
                                             pos, theta, p->y[0], p->y[1], p->y[2], h, BE_ERR));
        }
    }
#endif
    s->ops--; /* counted as the operations below */
    choir_op_norm_linear(s, x, M, p, h);
    choir_op_rope(s, p->y[0], M, n_heads * D, n_heads, D, 0, pos, theta, false);
    return choir_op_rope(s, p->y[1], M, n_kv * D, n_kv, D, 0, pos, theta, false);
}

int choir_op_linear_bf16(choir_stream *s, const uint16_t *x, int64_t M, const choir_weight *W,
                         const float *bias, void *y, choir_dtype y_dtype, unsigned flags) {
    if (!choir_stream_ok(s)) return s->err.code;
    bool gelu = flags & CHOIR_LINEAR_GELU, acc = flags & CHOIR_LINEAR_ACCUMULATE;
    if (M < 0 || W->rows < 0 || W->cols < 0) return be_invalid(s, "linear_bf16: negative size");
    if ((y_dtype != CHOIR_DTYPE_F32 && y_dtype != CHOIR_DTYPE_BF16) || (flags & ~3u) ||
        (acc && (gelu || y_dtype != CHOIR_DTYPE_F32)))
        return be_invalid(s, "linear_bf16: output dtype %d with flags %u", (int)y_dtype, flags);
    if (M == 0) return 0;
    if (be_host(s)) {
        int64_t N = W->rows, K = W->cols;
        float *xf = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(M * K) * sizeof(float));
        float *yf = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(M * N) * sizeof(float));
        if (!xf || !yf) {
            choir_free(xf);
            choir_free(yf);
            return choir_stream_fail(s, CHOIR_ENOMEM, "backend cpu: linear_bf16: out of memory");
        }
        choir_bf16_to_f32_n(x, xf, M * K);
        choir_kernel_scratch *prev = be_kernel_begin(s);
        choir_linear(xf, M, W, bias, yf);
        be_kernel_end(prev);
        if (gelu) choir_gelu_erf(yf, M * N);
        if (acc)
            for (int64_t i = 0; i < M * N; i++) ((float *)y)[i] += yf[i];
        else if (y_dtype == CHOIR_DTYPE_BF16)
            choir_f32_to_bf16_n(yf, y, M * N);
        else
            memcpy(y, yf, (size_t)(M * N) * sizeof(float));
        choir_free(xf);
        choir_free(yf);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_weight cw = be_cuda_weight(W);
    BE_CUDA(s, "linear_bf16",
            choir_cuda_linear_bf16(s->be->cu, x, M, &cw, bias, y, y_dtype == CHOIR_DTYPE_BF16, acc,
                                   gelu, BE_ERR));
#endif
    return be_unsupported(s, "linear_bf16");
}

int choir_op_gemm(choir_stream *s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float beta, float *C, int64_t ldc) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (M < 0 || N < 0 || K < 0) return be_invalid(s, "gemm: negative size");
    if (be_host(s)) {
        choir_gemm_f32(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "gemm",
            choir_cuda_gemm_f32(s->be->cu, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta,
                                C, ldc, BE_ERR));
#endif
    return be_unsupported(s, "gemm");
}

/* --- attention ------------------------------------------------------------------------ */

/* Heads per key head, or 0 (and the stream's error) when the shape is bad. */
static int attn_group(choir_stream *s, const choir_attn *a, const char *op) {
    int kv = a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
    if (a->n_head <= 0 || a->Dh <= 0 || kv > a->n_head || a->n_head % kv != 0) {
        be_invalid(s, "%s: %d heads over %d key heads of %lld values", op, a->n_head, kv,
                   (long long)a->Dh);
        return 0;
    }
    return a->n_head / kv;
}

static bool kv_dtype_ok(choir_stream *s, const choir_attn *a, const char *op) {
    if (a->kv == CHOIR_DTYPE_F32 || a->kv == CHOIR_DTYPE_BF16) return true;
    if (a->kv == CHOIR_DTYPE_F16 && be_host(s)) return true;
    be_invalid(s, "%s: keys and values of dtype %d (f32 or bf16; f16 on the CPU)", op,
               (int)a->kv);
    return false;
}

/* Bytes of one key or value element of a->kv. */
static size_t kv_size(const choir_attn *a) { return a->kv == CHOIR_DTYPE_F32 ? 4 : 2; }

/* One sequence on the host: f32, f16 and bf16 keys and values where they
 * lie (the 16-bit kernels widen them as they read, a larger call into
 * kernel scratch: the oracle of the device kernels, which widen as they
 * read too). */
static int host_attention(choir_stream *s, const float *q, int64_t ldq, const void *k,
                          int64_t ldk, const void *v, int64_t ldv, float *out, int64_t ldo,
                          int64_t Tq, int64_t Tk, const choir_attn *a, int rep, const float *mask) {
    int calls = rep == 1 ? 1 : a->n_head, heads = rep == 1 ? a->n_head : 1;
    for (int h = 0; h < calls; h++) {
        int64_t qo = (int64_t)h * a->Dh, ko = (int64_t)(h / rep) * a->Dh;
        if (a->kv == CHOIR_DTYPE_F32) {
            choir_attention(q + qo, ldq, (const float *)k + ko, ldk, (const float *)v + ko, ldv,
                            out + qo, ldo, Tq, Tk, heads, a->Dh, a->scale, mask, a->causal);
            continue;
        }
        const uint16_t *kh = (const uint16_t *)k + ko, *vh = (const uint16_t *)v + ko;
        int rc = a->kv == CHOIR_DTYPE_F16
                     ? choir_attention_f16(q + qo, ldq, kh, ldk, vh, ldv, out + qo, ldo, Tq, Tk,
                                           heads, a->Dh, a->scale, mask, a->causal)
                     : choir_attention_bf16(q + qo, ldq, kh, ldk, vh, ldv, out + qo, ldo, Tq, Tk,
                                            heads, a->Dh, a->scale, mask, a->causal);
        if (rc) return choir_stream_fail(s, CHOIR_ENOMEM, "backend cpu: attention: out of memory");
    }
    return 0;
}

int choir_op_attention(choir_stream *s, const float *q, int64_t ldq, const void *k, int64_t ldk,
                       const void *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                       int64_t Tk, const choir_attn *a, const float *mask) {
    if (!choir_stream_ok(s)) return s->err.code;
    int rep = attn_group(s, a, "attention");
    if (!rep || !kv_dtype_ok(s, a, "attention")) return s->err.code;
    if (Tq < 0 || Tk < 0) return be_invalid(s, "attention: Tq %lld, Tk %lld", (long long)Tq,
                                            (long long)Tk);
    if (Tq == 0) return 0;
    /* Grouped heads run one query head at a time against its key head; the
     * plain case is one call over all heads. */
    int calls = rep == 1 ? 1 : a->n_head, heads = rep == 1 ? a->n_head : 1;
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        int rc = host_attention(s, q, ldq, k, ldk, v, ldv, out, ldo, Tq, Tk, a, rep, mask);
        be_kernel_end(prev);
        return rc;
    }
#ifdef CHOIR_HAVE_CUDA
    size_t es = kv_size(a);
    for (int h = 0; h < calls; h++) {
        choir_err e = {0};
        int64_t qo = (int64_t)h * a->Dh, ko = (int64_t)(h / rep) * a->Dh;
        const void *kh = (const char *)k + ko * es, *vh = (const char *)v + ko * es;
        int rc = a->kv == CHOIR_DTYPE_BF16
                     ? choir_cuda_attention_kv16(s->be->cu, q + qo, ldq, kh, ldk, vh, ldv, out + qo,
                                                 ldo, Tq, Tk, heads, a->Dh, a->scale, mask,
                                                 a->causal, &e)
                     : choir_cuda_attention(s->be->cu, q + qo, ldq, kh, ldk, vh, ldv, out + qo, ldo,
                                            Tq, Tk, heads, a->Dh, a->scale, mask, a->causal, &e);
        if (rc) return be_done(s, rc, &e, "attention");
    }
    return 0;
#endif
    (void)calls, (void)heads;
    return be_unsupported(s, "attention");
}

int choir_op_attention_bf16(choir_stream *s, int64_t B, const uint16_t *q, int64_t ldq,
                            int64_t q_batch, const uint16_t *k, int64_t ldk, const uint16_t *v,
                            int64_t ldv, int64_t kv_batch, uint16_t *out, int64_t ldo,
                            int64_t out_batch, int64_t Tq, int64_t Tk, const choir_attn *a) {
    if (!choir_stream_ok(s)) return s->err.code;
    int rep = attn_group(s, a, "attention_bf16");
    if (!rep) return s->err.code;
    if (B < 0 || Tq < 0 || Tk < 0) return be_invalid(s, "attention_bf16: negative size");
    if (B == 0 || Tq == 0) return 0;
    if (be_host(s)) {
        /* Each sequence widened to f32, the f32 kernel, the output rounded. */
        int64_t qc = (int64_t)a->n_head * a->Dh;
        float *qf = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(Tq * qc) * sizeof(float));
        float *of = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(Tq * qc) * sizeof(float));
        if (!qf || !of) {
            choir_free(qf);
            choir_free(of);
            return choir_stream_fail(s, CHOIR_ENOMEM, "backend cpu: attention_bf16: out of memory");
        }
        choir_attn af = *a;
        af.kv = CHOIR_DTYPE_BF16;
        choir_kernel_scratch *prev = be_kernel_begin(s);
        int rc = 0;
        for (int64_t b = 0; b < B && !rc; b++) {
            for (int64_t r = 0; r < Tq; r++)
                choir_bf16_to_f32_n(q + b * q_batch + r * ldq, qf + r * qc, qc);
            rc = host_attention(s, qf, qc, k + b * kv_batch, ldk, v + b * kv_batch, ldv, of, qc,
                                Tq, Tk, &af, rep, NULL);
            for (int64_t r = 0; r < Tq && !rc; r++)
                choir_f32_to_bf16_n(of + r * qc, out + b * out_batch + r * ldo, qc);
        }
        be_kernel_end(prev);
        choir_free(qf);
        choir_free(of);
        return rc;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "attention_bf16",
            choir_cuda_attention_bf16(s->be->cu, B, q, ldq, q_batch, k, ldk, v, ldv, kv_batch, out,
                                      ldo, out_batch, Tq, Tk, a->n_head, a->n_kv_head, a->Dh,
                                      a->scale, a->causal, BE_ERR));
#endif
    return be_unsupported(s, "attention_bf16");
}

int choir_op_attention_slots(choir_stream *s, int64_t B, const float *q, int64_t ldq,
                             int64_t q_batch, const void *k, int64_t ldk, const void *v,
                             int64_t ldv, int64_t slot_stride, const int32_t *kv_slot,
                             const int32_t *kv_len, float *out, int64_t ldo, int64_t out_batch,
                             int64_t Tq, int64_t Tk, const choir_attn *a) {
    if (!choir_stream_ok(s)) return s->err.code;
    int rep = attn_group(s, a, "attention_slots");
    if (!rep || !kv_dtype_ok(s, a, "attention_slots")) return s->err.code;
    if (B < 0 || Tq < 0 || Tk < 0) return be_invalid(s, "attention_slots: negative size");
    if (B == 0 || Tq == 0) return 0;
    int calls = rep == 1 ? 1 : a->n_head, heads = rep == 1 ? a->n_head : 1;
    size_t es = kv_size(a);
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        int rc = 0;
        for (int64_t b = 0; b < B && !rc; b++) {
            int64_t slot = kv_slot ? kv_slot[b] : b;
            int64_t n = kv_len ? kv_len[b] : Tk;
            if (n > Tk) n = Tk;
            if (n < 0) n = 0;
            const char *kb = (const char *)k + (size_t)(slot * slot_stride) * es;
            const char *vb = (const char *)v + (size_t)(slot * slot_stride) * es;
            rc = host_attention(s, q + b * q_batch, ldq, kb, ldk, vb, ldv, out + b * out_batch,
                                ldo, Tq, n, a, rep, NULL);
        }
        be_kernel_end(prev);
        return rc;
    }
#ifdef CHOIR_HAVE_CUDA
    for (int h = 0; h < calls; h++) {
        choir_err e = {0};
        int64_t qo = (int64_t)h * a->Dh, ko = (int64_t)(h / rep) * a->Dh;
        const void *kh = (const char *)k + ko * es, *vh = (const char *)v + ko * es;
        int rc = a->kv == CHOIR_DTYPE_BF16
                     ? choir_cuda_attention_slots_kv16(s->be->cu, B, q + qo, ldq, q_batch, kh, ldk,
                                                       vh, ldv, slot_stride, kv_slot, kv_len,
                                                       out + qo, ldo, out_batch, Tq, Tk, heads,
                                                       a->Dh, a->scale, a->causal, &e)
                     : choir_cuda_attention_slots(s->be->cu, B, q + qo, ldq, q_batch, kh, ldk, vh,
                                                  ldv, slot_stride, kv_slot, kv_len, out + qo, ldo,
                                                  out_batch, Tq, Tk, heads, a->Dh, a->scale,
                                                  a->causal, &e);
        if (rc) return be_done(s, rc, &e, "attention_slots");
    }
    return 0;
#endif
    (void)calls, (void)heads;
    return be_unsupported(s, "attention_slots");
}

int choir_op_attention_ragged(choir_stream *s, int64_t n, const float *q, const float *k,
                              const float *v, int64_t ld, const int32_t *off, const int32_t *len,
                              int64_t Tm, float *out, const choir_attn *a) {
    if (!choir_stream_ok(s)) return s->err.code;
    int rep = attn_group(s, a, "attention_ragged");
    if (!rep) return s->err.code;
    if (rep != 1 || a->kv != CHOIR_DTYPE_F32 || a->causal)
        return be_invalid(s, "attention_ragged: grouped, 16-bit or causal attention");
    if (n < 0 || Tm < 0 || ld < (int64_t)a->n_head * a->Dh)
        return be_invalid(s, "attention_ragged: %lld pieces, row stride %lld", (long long)n,
                          (long long)ld);
    if (n == 0 || Tm == 0) return 0;
    if (be_host(s)) {
        choir_kernel_scratch *prev = be_kernel_begin(s);
        int rc = 0;
        for (int64_t b = 0; b < n && !rc; b++) {
            if (len[b] < 0 || len[b] > Tm) {
                rc = be_invalid(s, "attention_ragged: piece %lld of %d rows (at most %lld)",
                                (long long)b, (int)len[b], (long long)Tm);
                break;
            }
            int64_t o = (int64_t)off[b] * ld;
            rc = host_attention(s, q + o, ld, k + o, ld, v + o, ld, out + o, ld, len[b], len[b],
                                a, 1, NULL);
        }
        be_kernel_end(prev);
        return rc;
    }
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "attention_ragged",
            choir_cuda_attention_ragged(s->be->cu, n, q, k, v, ld, off, len, Tm, a->n_head, a->Dh,
                                        a->scale, out, BE_ERR));
#endif
    return be_unsupported(s, "attention_ragged");
}

int choir_op_rows_scatter(choir_stream *s, const float *src, int64_t B, int64_t cols, void *dst,
                          choir_dtype dst_dtype, int64_t slot_stride, int64_t ld,
                          const int32_t *slot, const int32_t *pos) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (B < 0 || cols < 0) return be_invalid(s, "rows_scatter: negative size");
    bool f16 = dst_dtype == CHOIR_DTYPE_F16 && be_host(s);
    if (dst_dtype != CHOIR_DTYPE_F32 && dst_dtype != CHOIR_DTYPE_BF16 && !f16)
        return be_invalid(s, "rows_scatter: rows of dtype %d (f32 or bf16; f16 on the CPU)",
                          (int)dst_dtype);
    bool half = dst_dtype == CHOIR_DTYPE_BF16;
    if (be_host(s)) {
        for (int64_t b = 0; b < B; b++) {
            int64_t at = (int64_t)(slot ? slot[b] : b) * slot_stride + (int64_t)pos[b] * ld;
            if (f16)
                choir_f32_to_f16_n(src + b * cols, (uint16_t *)dst + at, cols);
            else if (half)
                choir_f32_to_bf16_n(src + b * cols, (uint16_t *)dst + at, cols);
            else
                memcpy((float *)dst + at, src + b * cols, (size_t)cols * sizeof(float));
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    if (!slot) return be_invalid(s, "rows_scatter: the CUDA kernel needs a slot array");
    if (half)
        BE_CUDA(s, "rows_scatter",
                choir_cuda_rows_scatter_bf16(s->be->cu, src, B, cols, dst, slot_stride, ld, slot,
                                             pos, BE_ERR));
    BE_CUDA(s, "rows_scatter",
            choir_cuda_rows_scatter(s->be->cu, src, B, cols, dst, slot_stride, ld, slot, pos,
                                    BE_ERR));
#endif
    (void)half;
    return be_unsupported(s, "rows_scatter");
}

int choir_op_rows_gather(choir_stream *s, const choir_weight *W, const int32_t *ids, int64_t n,
                         float *out) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (n < 0) return be_invalid(s, "rows_gather: negative count");
    if (be_host(s)) {
        for (int64_t r = 0; r < n; r++) {
            if (ids[r] < 0 || ids[r] >= W->rows)
                return be_invalid(s, "rows_gather: id %d outside [0, %lld)", (int)ids[r],
                                  (long long)W->rows);
            choir_weight_row_f32(W, ids[r], out + r * W->cols);
        }
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_weight cw = be_cuda_weight(W);
    BE_CUDA(s, "rows_gather", choir_cuda_rows_gather(s->be->cu, &cw, ids, n, out, BE_ERR));
#endif
    return be_unsupported(s, "rows_gather");
}
