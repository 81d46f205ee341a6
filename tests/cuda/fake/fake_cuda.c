/* A host emulation of choir/cuda.h, for running model code written for the
 * CUDA backend on a machine without a GPU: "device" memory is host memory,
 * every kernel is its CPU reference from choir/kernels.h, and a CUDA graph
 * records the calls made between begin and end and replays them. It checks
 * the model code's data flow (buffers, strides, slots, what a graph captures
 * and what must change between replays), not the CUDA kernels themselves
 * (tests/cuda/cuda_check.c does that on a GPU). Built by
 * tests/cuda/fake/run_fake.sh only; never part of choir. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/cuda_q8.h"
#include "choir/kernels.h"
#include "choir/kernels_ext.h"

struct choir_cuda {
    choir_cuda_props props;
    int64_t mem_current, mem_peak, budget;
    int64_t host_current, host_peak; /* "pinned" host bytes */
    size_t scratch;
    int live_graphs;
};

/* --- recording ------------------------------------------------------------ */

typedef int (*op_fn)(const void *args);
typedef struct op_rec {
    op_fn fn;
    void *args;
} op_rec;

struct choir_cuda_graph {
    choir_cuda *cu;
    op_rec *ops;
    int n, cap;
    int counted; /* in cu->live_graphs */
};

static choir_cuda_graph *g_capture; /* the graph being recorded, or NULL */
static int g_capture_failed;

/* Runs op now, or records a copy of its arguments while capturing. */
static int run_or_record(op_fn fn, const void *args, size_t size) {
    if (!g_capture) return fn(args);
    choir_cuda_graph *g = g_capture;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->ops = realloc(g->ops, (size_t)g->cap * sizeof(*g->ops));
    }
    void *copy = malloc(size);
    memcpy(copy, args, size);
    g->ops[g->n++] = (op_rec){fn, copy};
    return 0;
}

/* The same for operations emulated outside this file (fake_vibevoice.c,
 * fake_whisper.c). */
int fake_cuda_run_or_record(int (*fn)(const void *args), const void *args, size_t size);
int fake_cuda_run_or_record(int (*fn)(const void *args), const void *args, size_t size) {
    return run_or_record(fn, args, size);
}

/* Calls that a capture cannot hold (allocation, copies to or from the host). */
static int no_capture(const char *what, choir_err *err) {
    if (!g_capture) return 0;
    g_capture_failed = 1;
    return choir_err_set(err, CHOIR_EINTERNAL, "fake cuda: %s during capture", what);
}

/* --- context and memory ----------------------------------------------------- */

int choir_cuda_device_count(void) { return 1; }

int choir_cuda_device_props(int device, choir_cuda_props *out, choir_err *err) {
    if (device != 0) return choir_err_set(err, CHOIR_ENOTFOUND, "cuda: device %d not found (1 visible)", device);
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "fake (host emulation)");
    out->smem_per_block_optin = 227 * 1024;
    out->total_bytes = (int64_t)16 << 30;
    return 0;
}

choir_cuda *choir_cuda_init(int device, choir_err *err) {
    choir_cuda_props props;
    if (choir_cuda_device_props(device, &props, err) < 0) return NULL;
    choir_cuda *cu = calloc(1, sizeof(*cu));
    cu->props = props;
    return cu;
}
void choir_cuda_free(choir_cuda *cu) { free(cu); }
const choir_cuda_props *choir_cuda_get_props(const choir_cuda *cu) { return &cu->props; }
int choir_cuda_set_tf32(choir_cuda *cu, bool on, choir_err *err) {
    (void)cu, (void)on; /* the host kernels are f32 either way */
    return no_capture("set_tf32", err);
}
int choir_cuda_make_current(choir_cuda *cu, choir_err *err) {
    (void)cu;
    return no_capture("make_current", err);
}
void choir_cuda_profiler(bool on) { (void)on; }

int choir_cuda_sync(choir_cuda *cu, choir_err *err) {
    (void)cu;
    return no_capture("sync", err);
}
void *choir_cuda_stream(choir_cuda *cu) { return cu; }
int64_t choir_cuda_mem_current(const choir_cuda *cu) { return cu->mem_current; }
int64_t choir_cuda_mem_peak(const choir_cuda *cu) { return cu->mem_peak; }
void choir_cuda_mem_reset_peak(choir_cuda *cu) { cu->mem_peak = cu->mem_current; }
void choir_cuda_set_budget(choir_cuda *cu, int64_t bytes) { cu->budget = bytes; }

int choir_cuda_scratch_reserve(choir_cuda *cu, size_t bytes, choir_err *err) {
    if (bytes <= cu->scratch) return 0;
    if (cu->live_graphs)
        return choir_err_set(err, CHOIR_EBUSY, "fake cuda: scratch grows under a live graph");
    cu->mem_current += (int64_t)(bytes - cu->scratch);
    cu->scratch = bytes;
    if (cu->mem_current > cu->mem_peak) cu->mem_peak = cu->mem_current;
    return 0;
}

int choir_cuda_buf_alloc(choir_cuda *cu, size_t bytes, choir_cuda_buf *out, choir_err *err) {
    out->ptr = NULL;
    out->bytes = 0;
    if (no_capture("buf_alloc", err)) return CHOIR_EINTERNAL;
    if (bytes == 0) return 0;
    /* Poisoned with NaN so that reading what was never written shows. */
    out->ptr = malloc(bytes);
    if (!out->ptr) return choir_err_set(err, CHOIR_ENOMEM, "fake cuda: out of memory");
    memset(out->ptr, 0xff, bytes);
    out->bytes = bytes;
    cu->mem_current += (int64_t)bytes;
    if (cu->mem_current > cu->mem_peak) cu->mem_peak = cu->mem_current;
    return 0;
}
void choir_cuda_buf_free(choir_cuda *cu, choir_cuda_buf *buf) {
    if (!buf || !buf->ptr) return;
    free(buf->ptr);
    cu->mem_current -= (int64_t)buf->bytes;
    buf->ptr = NULL;
    buf->bytes = 0;
}
static int range(const choir_cuda_buf *b, size_t off, size_t n, choir_err *err) {
    if (off > b->bytes || n > b->bytes - off)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: copy of %zu bytes at %zu passes %zu", n, off,
                             b->bytes);
    return 0;
}
int choir_cuda_upload(choir_cuda *cu, choir_cuda_buf *dst, size_t offset, const void *src,
                      size_t bytes, choir_err *err) {
    (void)cu;
    if (no_capture("upload", err) || range(dst, offset, bytes, err)) return CHOIR_EINVAL;
    memcpy((char *)dst->ptr + offset, src, bytes);
    return 0;
}
int choir_cuda_download(choir_cuda *cu, void *dst, const choir_cuda_buf *src, size_t offset,
                        size_t bytes, choir_err *err) {
    (void)cu;
    if (no_capture("download", err) || range(src, offset, bytes, err)) return CHOIR_EINVAL;
    memcpy(dst, (const char *)src->ptr + offset, bytes);
    return 0;
}
/* Copies run at once here, so "asynchronous" ones are plain copies; what
 * the emulation checks is that they stay out of captures and in range. */
int choir_cuda_upload_async(choir_cuda *cu, choir_cuda_buf *dst, size_t offset, const void *src,
                            size_t bytes, choir_err *err) {
    return choir_cuda_upload(cu, dst, offset, src, bytes, err);
}
int choir_cuda_download_async(choir_cuda *cu, void *dst, const choir_cuda_buf *src, size_t offset,
                              size_t bytes, choir_err *err) {
    return choir_cuda_download(cu, dst, src, offset, bytes, err);
}

/* Pinned memory is ordinary memory with a size header (for the counters),
 * poisoned like device memory. */
void *choir_cuda_host_alloc(choir_cuda *cu, size_t bytes, choir_err *err) {
    if (bytes == 0) return NULL;
    if (no_capture("host_alloc", err)) return NULL;
    char *block = malloc(bytes + 64);
    if (!block) {
        choir_err_set(err, CHOIR_ENOMEM, "fake cuda: out of host memory");
        return NULL;
    }
    memset(block + 64, 0xff, bytes);
    *(size_t *)block = bytes;
    cu->host_current += (int64_t)bytes;
    if (cu->host_current > cu->host_peak) cu->host_peak = cu->host_current;
    return block + 64;
}
void choir_cuda_host_free(choir_cuda *cu, void *p) {
    if (!p) return;
    char *block = (char *)p - 64;
    cu->host_current -= (int64_t) * (size_t *)block;
    free(block);
}
int64_t choir_cuda_host_mem_current(const choir_cuda *cu) { return cu->host_current; }
int64_t choir_cuda_host_mem_peak(const choir_cuda *cu) { return cu->host_peak; }

int choir_cuda_memset0(choir_cuda *cu, choir_cuda_buf *buf, size_t offset, size_t bytes,
                       choir_err *err) {
    (void)cu;
    if (range(buf, offset, bytes, err)) return CHOIR_EINVAL;
    memset((char *)buf->ptr + offset, 0, bytes);
    return 0;
}
int choir_cuda_copy(choir_cuda *cu, void *dst, const void *src, size_t bytes, choir_err *err) {
    (void)cu;
    if (no_capture("copy", err)) return CHOIR_EINTERNAL;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

/* --- weights ---------------------------------------------------------------- */

static int up(choir_cuda *cu, const void *src, size_t bytes, choir_cuda_buf *b, choir_err *err) {
    int rc = choir_cuda_buf_alloc(cu, bytes, b, err);
    if (!rc && bytes) memcpy(b->ptr, src, bytes);
    return rc;
}
int choir_cuda_weight_upload(choir_cuda *cu, const choir_weight *w, choir_cuda_weight *out,
                             choir_err *err) {
    memset(out, 0, sizeof(*out));
    out->kind = w->kind, out->rows = w->rows, out->cols = w->cols;
    out->sb_dtype = w->sb_dtype, out->bits = w->bits, out->group_size = w->group_size;
    if (w->kind == CHOIR_WEIGHT_QUANT) {
        size_t sb = (size_t)(w->rows * (w->cols / w->group_size)) * choir_dtype_size(w->sb_dtype);
        if (up(cu, w->data, (size_t)(w->rows * (w->cols / 32) * w->bits) * 4, &out->data, err) ||
            up(cu, w->scales, sb, &out->scales, err) || up(cu, w->biases, sb, &out->biases, err))
            return CHOIR_ENOMEM;
        return 0;
    }
    return up(cu, w->data, choir_weight_bytes(w), &out->data, err);
}
int choir_cuda_weight_upload_as(choir_cuda *cu, const choir_weight *w, choir_weight_kind to,
                                choir_cuda_weight *out, choir_err *err) {
    memset(out, 0, sizeof(*out));
    if (w->kind != CHOIR_WEIGHT_F32 || (to != CHOIR_WEIGHT_BF16 && to != CHOIR_WEIGHT_F16))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "conversion only f32 to bf16/f16");
    int64_t n = w->rows * w->cols;
    uint16_t *h = malloc((size_t)n * 2);
    if (to == CHOIR_WEIGHT_BF16) choir_f32_to_bf16_n(w->data, h, n);
    else choir_f32_to_f16_n(w->data, h, n);
    out->kind = to, out->rows = w->rows, out->cols = w->cols;
    int rc = up(cu, h, (size_t)n * 2, &out->data, err);
    free(h);
    return rc;
}
void choir_cuda_weight_free(choir_cuda *cu, choir_cuda_weight *w) {
    if (!w) return;
    choir_cuda_buf_free(cu, &w->data);
    choir_cuda_buf_free(cu, &w->scales);
    choir_cuda_buf_free(cu, &w->biases);
    memset(w, 0, sizeof(*w));
}
size_t choir_cuda_weight_bytes(const choir_cuda_weight *w) {
    return w->data.bytes + w->scales.bytes + w->biases.bytes;
}
static choir_weight host_view(const choir_cuda_weight *W) {
    choir_weight w = {.kind = W->kind, .rows = W->rows, .cols = W->cols, .data = W->data.ptr,
                      .scales = W->scales.ptr, .biases = W->biases.ptr, .sb_dtype = W->sb_dtype,
                      .bits = W->bits, .group_size = W->group_size};
    return w;
}

/* --- kernels (recorded while capturing) ------------------------------------------ */

typedef struct linear_args {
    const float *x;
    int64_t M;
    choir_cuda_weight W;
    const float *bias;
    float *y;
} linear_args;
static int linear_op(const void *p) {
    const linear_args *a = p;
    choir_weight w = host_view(&a->W);
    choir_linear(a->x, a->M, &w, a->bias, a->y);
    return 0;
}
int choir_cuda_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                      const float *bias, float *y, choir_err *err) {
    (void)cu, (void)err;
    if (M <= 0) return 0;
    linear_args a = {x, M, *W, bias, y};
    return run_or_record(linear_op, &a, sizeof(a));
}

/* The product with its step fused: the CPU product into a temporary, then
 * the add or GELU, as the device's epilogue does (the same order). */
typedef struct linear_ex_args {
    linear_args l;
    bool accumulate, gelu;
} linear_ex_args;
static int linear_ex_op(const void *p) {
    const linear_ex_args *a = p;
    choir_weight w = host_view(&a->l.W);
    int64_t n = a->l.M * w.rows;
    float *t = malloc((size_t)n * sizeof(float));
    if (!t) return CHOIR_ENOMEM;
    choir_linear(a->l.x, a->l.M, &w, a->l.bias, t);
    if (a->gelu) choir_gelu_erf(t, n);
    for (int64_t i = 0; i < n; i++) a->l.y[i] = a->accumulate ? a->l.y[i] + t[i] : t[i];
    free(t);
    return 0;
}
/* The 8-bit GEMV's switch (CHOIR_Q8_GEMV, as cuda_linear_q8.cu reads it):
 * on, linear_ex and norm_linear fuse 8-bit layers as the device does. */
static int g_fake_q8 = -1;
void choir_cuda_q8_gemv(int shape) { g_fake_q8 = shape >= 0 && shape < 9 ? shape : 0; }
int choir_cuda_q8_gemv_shape(void) {
    if (g_fake_q8 < 0) {
        const char *e = getenv("CHOIR_Q8_GEMV");
        choir_cuda_q8_gemv(e ? atoi(e) : 1);
    }
    return g_fake_q8;
}
/* The 8-bit dequantize's switch (CHOIR_Q8_DEQUANT): read and set only; the
 * products here are the CPU's either way. */
static int g_fake_q8_deq = -1;
void choir_cuda_q8_dequant(int on) { g_fake_q8_deq = on != 0; }
bool choir_cuda_q8_dequant_on(void) {
    if (g_fake_q8_deq < 0) {
        const char *e = getenv("CHOIR_Q8_DEQUANT");
        choir_cuda_q8_dequant(e && atoi(e));
    }
    return g_fake_q8_deq == 1;
}
static bool fake_q8_takes(int64_t M, const choir_cuda_weight *W) {
    return choir_cuda_q8_gemv_shape() > 0 && W->kind == CHOIR_WEIGHT_QUANT && W->bits == 8 &&
           (W->group_size == 32 || W->group_size == 64 || W->group_size == 128) && W->cols % 16 == 0 && M <= 8;
}
bool choir_cuda_linear_fuses(int64_t M, const choir_cuda_weight *W) {
    return M > 0 && M <= 8 &&
           (W->kind == CHOIR_WEIGHT_F32 || W->kind == CHOIR_WEIGHT_F16 ||
            W->kind == CHOIR_WEIGHT_BF16 || fake_q8_takes(M, W)) &&
           choir_cuda_linear_path_for(M, W) == CHOIR_CUDA_LINEAR_GEMV;
}
int choir_cuda_linear_ex(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                         const float *bias, float *y, bool accumulate, bool gelu, choir_err *err) {
    (void)cu;
    if ((accumulate && gelu) || !choir_cuda_linear_fuses(M, W))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: linear_ex off the GEMV path");
    linear_ex_args a = {{x, M, *W, bias, y}, accumulate, gelu};
    return run_or_record(linear_ex_op, &a, sizeof(a));
}

/* As the real switch: on unless CHOIR_CUDA_SKINNY_ACC=0 (-1: not yet read). */
static int g_fake_skinny_acc = -1;
void choir_cuda_skinny_acc_set(int on) {
    if (on < 0) {
        const char *e = getenv("CHOIR_CUDA_SKINNY_ACC");
        on = !(e && *e && atoi(e) == 0);
    }
    g_fake_skinny_acc = on != 0;
}
void choir_cuda_rms_cache_set(int on) { (void)on; }
bool choir_cuda_rms_cache_on(void) { return false; }
bool choir_cuda_linear_skinny_acc_ok(int64_t M, const float *x, const choir_cuda_weight *W) {
    if (g_fake_skinny_acc < 0) choir_cuda_skinny_acc_set(-1);
    return g_fake_skinny_acc && M > 0 && ((uintptr_t)x & 15) == 0 && choir_cuda_linear_path_for(M, W) == CHOIR_CUDA_LINEAR_SKINNY;
}
int choir_cuda_linear_skinny_acc(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                                 const float *bias, float *y, choir_err *err) {
    (void)cu;
    if (!choir_cuda_linear_skinny_acc_ok(M, x, W))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: accumulating linear off the skinny path");
    linear_ex_args a = {{x, M, *W, bias, y}, true, false};
    return run_or_record(linear_ex_op, &a, sizeof(a));
}

/* A layer norm feeding GEMVs: the CPU layer norm into a temporary, each
 * product (GELU'd), then the rows stored, as the device's one kernel. */
typedef struct norm_linear_args {
    const float *x;
    int64_t M;
    choir_cuda_norm_linear_params p;
} norm_linear_args;
static int norm_linear_op(const void *q) {
    const norm_linear_args *a = q;
    const choir_cuda_norm_linear_params *p = &a->p;
    int64_t M = a->M, K = p->W[0].cols;
    float *h = malloc((size_t)(M * K) * sizeof(float));
    if (!h) return CHOIR_ENOMEM;
    if (p->rms) {
        /* As choir_cuda_rms_norm: the sum of squares in double. */
        for (int64_t r = 0; r < M; r++) {
            const float *xr = a->x + r * K;
            double ss = 0;
            for (int64_t i = 0; i < K; i++) ss += (double)xr[i] * xr[i];
            float inv = (float)(1.0 / sqrt(ss / (double)K + (double)p->eps));
            for (int64_t i = 0; i < K; i++) h[r * K + i] = xr[i] * inv * (p->gamma ? p->gamma[i] : 1.0f);
        }
    } else {
        choir_layer_norm(a->x, h, M, K, p->gamma, p->beta, p->eps);
    }
    for (int i = 0; i < p->n; i++) {
        choir_weight w = host_view(&p->W[i]);
        int64_t N = w.rows;
        choir_linear(h, M, &w, p->bias[i], p->y[i]);
        if (p->gelu) choir_gelu_erf(p->y[i], M * N);
        const choir_cuda_rows_out *o = &p->store[i];
        for (int64_t m = 0; o->dst && m < M; m++) {
            int64_t at = (int64_t)(o->slot ? o->slot[m] : m) * o->slot_stride + (int64_t)o->pos[m] * o->ld;
            if (o->bf16)
                choir_f32_to_bf16_n(p->y[i] + m * N, (uint16_t *)o->dst + at, N);
            else
                memcpy((float *)o->dst + at, p->y[i] + m * N, (size_t)N * sizeof(float));
        }
    }
    free(h);
    return 0;
}
static bool g_fake_norm_linear = true;
void choir_cuda_norm_linear_set(bool on) { g_fake_norm_linear = on; }
bool choir_cuda_norm_linear_fuses(int64_t M, const choir_cuda_norm_linear_params *p) {
    if (!g_fake_norm_linear || p->n < 1 || p->n > CHOIR_CUDA_NORM_LINEAR_MAX || M < 1) return false;
    int64_t K = p->W[0].cols;
    /* 8-bit layers (cuda_linear_q8.cu): an RMS norm, x within 128 KiB in
     * rows rounded up to 512 values. */
    bool q8 = p->W[0].kind == CHOIR_WEIGHT_QUANT;
    if (q8 && (!p->rms || p->beta || p->gelu || (size_t)(M * ((K + 511) / 512 * 512)) * 4 > 128 * 1024))
        return false;
    if (K < 1 || (!q8 && (size_t)(M * K) * sizeof(float) > 46 * 1024)) return false;
    for (int i = 0; i < p->n; i++)
        if (p->W[i].kind != p->W[0].kind || p->W[i].cols != K ||
            !choir_cuda_linear_fuses(M, &p->W[i]) || (p->store[i].dst && !p->store[i].pos))
            return false;
    return true;
}
int choir_cuda_norm_linear(choir_cuda *cu, const float *x, int64_t M,
                           const choir_cuda_norm_linear_params *p, choir_err *err) {
    (void)cu;
    if (!choir_cuda_norm_linear_fuses(M, p))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: norm_linear off the GEMV path");
    norm_linear_args a = {x, M, *p};
    return run_or_record(norm_linear_op, &a, sizeof(a));
}

/* bf16 rows: widened, the CPU product, then bias, GELU, rounding or the
 * residual add as the device does (the device also rounds the product). */
typedef struct linear_bf16_args {
    const uint16_t *x;
    int64_t M;
    choir_cuda_weight W;
    const float *bias;
    void *y;
    bool y_bf16, accumulate, gelu;
} linear_bf16_args;
static int linear_bf16_op(const void *p) {
    const linear_bf16_args *a = p;
    choir_weight w = host_view(&a->W);
    int64_t N = w.rows, K = w.cols;
    float *xf = malloc((size_t)(a->M * K) * sizeof(float));
    float *yf = malloc((size_t)(a->M * N) * sizeof(float));
    if (!xf || !yf) {
        free(xf), free(yf);
        return CHOIR_ENOMEM;
    }
    choir_bf16_to_f32_n(a->x, xf, a->M * K);
    choir_linear(xf, a->M, &w, a->bias, yf);
    if (a->gelu) choir_gelu_erf(yf, a->M * N);
    if (a->accumulate)
        for (int64_t i = 0; i < a->M * N; i++) ((float *)a->y)[i] += yf[i];
    else if (a->y_bf16)
        choir_f32_to_bf16_n(yf, a->y, a->M * N);
    else
        memcpy(a->y, yf, (size_t)(a->M * N) * sizeof(float));
    free(xf), free(yf);
    return 0;
}
int choir_cuda_linear_bf16(choir_cuda *cu, const uint16_t *x, int64_t M,
                           const choir_cuda_weight *W, const float *bias, void *y, bool y_bf16,
                           bool accumulate, bool gelu, choir_err *err) {
    (void)cu;
    if (M <= 0) return 0;
    if (W->kind != CHOIR_WEIGHT_BF16)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: linear over bf16 rows needs bf16 weights");
    linear_bf16_args a = {x, M, *W, bias, y, y_bf16, accumulate, gelu};
    return run_or_record(linear_bf16_op, &a, sizeof(a));
}

/* Fused rows (choir_cuda_fused_rows): the floats of the calls they stand
 * for, as this emulation gives those (the device's rounding of the
 * product's input to bf16 is not emulated on either path). */
static int g_fake_fused_rows = 1;
void choir_cuda_fused_rows(bool on) { g_fake_fused_rows = on ? 2 : 0; }
bool choir_cuda_fused_rows_on(void) {
    if (g_fake_fused_rows == 1) {
        const char *e = getenv("CHOIR_CUDA_FUSED_ROWS");
        g_fake_fused_rows = e && e[0] == '1' ? 2 : 0;
    }
    return g_fake_fused_rows == 2;
}
bool choir_cuda_rows_ok(int64_t M, const choir_cuda_weight *W) {
    return choir_cuda_fused_rows_on() && M > 0 && W->kind == CHOIR_WEIGHT_BF16 &&
           choir_cuda_linear_path_for(M, W) == CHOIR_CUDA_LINEAR_BLAS;
}
int choir_cuda_norm_linear_rows(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_norm_linear_params *p,
                                void *h, choir_err *err) {
    bool ok = p->rms && !p->beta && p->n >= 1 && p->n <= CHOIR_CUDA_NORM_LINEAR_MAX;
    for (int i = 0; ok && i < p->n; i++) ok = p->W[i].cols == p->W[0].cols && choir_cuda_rows_ok(M, &p->W[i]);
    if (!ok) return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: norm_linear_rows off cuBLAS");
    /* h holds M K floats (the backend's buffer), so the f32 norm fits. */
    int rc = choir_cuda_rms_norm(cu, x, h, M, p->W[0].cols, p->gamma, p->eps, err);
    for (int i = 0; !rc && i < p->n; i++) rc = choir_cuda_linear(cu, h, M, &p->W[i], p->bias[i], p->y[i], err);
    return rc;
}
int choir_cuda_linear_acc_rows(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W, float *y,
                               choir_err *err) {
    (void)cu;
    if (!choir_cuda_rows_ok(M, W)) return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: acc rows off cuBLAS");
    linear_ex_args a = {{x, M, *W, NULL, y}, true, false};
    return run_or_record(linear_ex_op, &a, sizeof(a));
}
typedef struct swiglu_linear_args {
    linear_args l;
    const float *gate, *up;
    bool accumulate;
} swiglu_linear_args;
static int swiglu_linear_op(const void *p) {
    const swiglu_linear_args *a = p;
    choir_weight w = host_view(&a->l.W);
    int64_t nh = a->l.M * w.cols, ny = a->l.M * w.rows;
    float *h = malloc((size_t)nh * sizeof(float)), *t = malloc((size_t)ny * sizeof(float));
    if (!h || !t) {
        free(h), free(t);
        return CHOIR_ENOMEM;
    }
    memcpy(h, a->gate, (size_t)nh * sizeof(float));
    choir_silu(h, nh);
    choir_mul(h, a->up, h, nh);
    choir_linear(h, a->l.M, &w, a->l.bias, t);
    for (int64_t i = 0; i < ny; i++) a->l.y[i] = a->accumulate ? a->l.y[i] + t[i] : t[i];
    free(h), free(t);
    return 0;
}
int choir_cuda_swiglu_linear_rows(choir_cuda *cu, const float *gate, const float *up, int64_t M,
                                  const choir_cuda_weight *W, const float *bias, float *y, bool accumulate,
                                  choir_err *err) {
    (void)cu;
    if (!choir_cuda_rows_ok(M, W) || (accumulate && bias))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: swiglu rows off cuBLAS");
    swiglu_linear_args a = {{NULL, M, *W, bias, y}, gate, up, accumulate};
    return run_or_record(swiglu_linear_op, &a, sizeof(a));
}

/* The gated MLP over bf16 rows (choir_cuda_mlp_bf16): as the calls it
 * stands for in this emulation (gate and up not rounded). */
static int g_fake_mlp_bf16 = 1;
void choir_cuda_mlp_bf16(bool on) { g_fake_mlp_bf16 = on ? 2 : 0; }
bool choir_cuda_mlp_bf16_on(void) {
    if (g_fake_mlp_bf16 == 1) {
        const char *e = getenv("CHOIR_CUDA_MLP_BF16");
        g_fake_mlp_bf16 = e && e[0] == '0' ? 0 : 2;
    }
    return g_fake_mlp_bf16 == 2;
}
bool choir_cuda_gated_mlp_ok(int64_t M, const choir_cuda_weight *Wg, const choir_cuda_weight *Wu,
                             const choir_cuda_weight *Wd) {
    return choir_cuda_mlp_bf16_on() && choir_cuda_rows_ok(M, Wg) && choir_cuda_rows_ok(M, Wu) &&
           choir_cuda_rows_ok(M, Wd) && Wg->rows == Wu->rows && Wg->cols == Wu->cols && Wd->cols == Wg->rows &&
           Wd->rows == Wg->cols;
}
int choir_cuda_gated_mlp_rows(choir_cuda *cu, float *x, int64_t M, const float *gamma, float eps,
                              const choir_cuda_weight *Wg, const choir_cuda_weight *Wu, const choir_cuda_weight *Wd,
                              void *gate, void *up, void *h, choir_err *err) {
    if (!choir_cuda_gated_mlp_ok(M, Wg, Wu, Wd))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: gated MLP rows off cuBLAS");
    int rc = choir_cuda_rms_norm(cu, x, h, M, Wg->cols, gamma, eps, err);
    if (!rc) rc = choir_cuda_linear(cu, h, M, Wg, NULL, gate, err);
    if (!rc) rc = choir_cuda_linear(cu, h, M, Wu, NULL, up, err);
    return rc ? rc : choir_cuda_swiglu_linear_rows(cu, gate, up, M, Wd, NULL, x, true, err);
}

/* Prefill products in one (choir_cuda_prefill_fused): the floats of the
 * calls they stand for in this emulation (the norm in f32, gate and up not
 * rounded), through one product over the grouped weight. */
static int g_fake_prefill_fused = 1;
void choir_cuda_prefill_fused(bool on) { g_fake_prefill_fused = on ? 2 : 0; }
bool choir_cuda_prefill_fused_on(void) {
    if (g_fake_prefill_fused == 1) {
        const char *e = getenv("CHOIR_VV_PREFILL_FUSED");
        g_fake_prefill_fused = e && e[0] == '1' ? 2 : 0;
    }
    return g_fake_prefill_fused == 2;
}
static void fake_rms_rows(const float *x, int64_t M, int64_t K, const float *g, float eps, float *h) {
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * K;
        double ss = 0;
        for (int64_t i = 0; i < K; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / (double)K + (double)eps));
        for (int64_t i = 0; i < K; i++) h[r * K + i] = xr[i] * inv * (g ? g[i] : 1.0f);
    }
}
typedef struct qkv_rope_args {
    const float *x, *gamma, *bias[3];
    const int32_t *pos;
    float *q, *k, *v, *h;
    int64_t M, Dh;
    int n_heads, n_kv;
    float eps, theta;
    choir_cuda_weight W;
} qkv_rope_args;
static int qkv_rope_op(const void *p) {
    const qkv_rope_args *a = p;
    choir_weight w = host_view(&a->W);
    int64_t N = w.rows, K = w.cols, D = a->Dh, half = D / 2, qd = a->n_heads * D, kvd = a->n_kv * D;
    float *y = malloc((size_t)(a->M * N) * sizeof(float));
    if (!y) return CHOIR_ENOMEM;
    fake_rms_rows(a->x, a->M, K, a->gamma, a->eps, a->h);
    choir_linear(a->h, a->M, &w, NULL, y);
    for (int64_t r = 0; r < a->M; r++) {
        float *yr = y + r * N;
        for (int64_t c = 0; c < N; c++) {
            const float *b = c < qd ? a->bias[0] : c < qd + kvd ? a->bias[1] : a->bias[2];
            int64_t o = c < qd ? c : c < qd + kvd ? c - qd : c - qd - kvd;
            if (b) yr[c] += b[o];
        }
        for (int64_t i = 0; i < half; i++) {
            float inv_freq = (float)(1.0 / pow((double)a->theta, (double)(2 * i) / (double)D));
            float ang = (float)a->pos[r] * inv_freq, cs = cosf(ang), sn = sinf(ang);
            for (int h = 0; h < a->n_heads + a->n_kv; h++) {
                float *xh = yr + (int64_t)h * D;
                float x0 = xh[i], x1 = xh[i + half];
                xh[i] = x0 * cs - x1 * sn;
                xh[i + half] = x1 * cs + x0 * sn;
            }
        }
        memcpy(a->q + r * qd, yr, (size_t)qd * sizeof(float));
        memcpy(a->k + r * kvd, yr + qd, (size_t)kvd * sizeof(float));
        memcpy(a->v + r * kvd, yr + qd + kvd, (size_t)kvd * sizeof(float));
    }
    free(y);
    return 0;
}
int choir_cuda_qkv_rope_rows(choir_cuda *cu, const float *x, int64_t M, const float *gamma, float eps,
                             const choir_cuda_weight *Wqkv, const float *const bias[3], int n_heads, int n_kv,
                             int64_t Dh, const int32_t *pos, float theta, float *q, float *k, float *v, void *h,
                             choir_err *err) {
    (void)cu;
    if (!choir_cuda_prefill_fused_on() || !choir_cuda_rows_ok(M, Wqkv) || Dh % 2 ||
        Wqkv->rows != (int64_t)(n_heads + 2 * n_kv) * Dh)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: q, k, v as one product");
    qkv_rope_args a = {.x = x, .gamma = gamma, .bias = {bias[0], bias[1], bias[2]}, .pos = pos, .q = q, .k = k,
                       .v = v, .h = h, .M = M, .Dh = Dh, .n_heads = n_heads, .n_kv = n_kv, .eps = eps,
                       .theta = theta, .W = *Wqkv};
    return run_or_record(qkv_rope_op, &a, sizeof a);
}
typedef struct mlp_cat_args {
    float *x, *h;
    const float *gamma;
    int64_t M;
    float eps;
    choir_cuda_weight Wgu, Wd;
} mlp_cat_args;
static int mlp_cat_op(const void *p) {
    const mlp_cat_args *a = p;
    choir_weight wgu = host_view(&a->Wgu), wd = host_view(&a->Wd);
    int64_t H = wgu.cols, I = wgu.rows / 2, M = a->M;
    float *gu = malloc((size_t)(M * 2 * I) * sizeof(float)), *hb = malloc((size_t)(M * I) * sizeof(float));
    float *t = malloc((size_t)(M * H) * sizeof(float));
    if (!gu || !hb || !t) {
        free(gu), free(hb), free(t);
        return CHOIR_ENOMEM;
    }
    fake_rms_rows(a->x, M, H, a->gamma, a->eps, a->h);
    choir_linear(a->h, M, &wgu, NULL, gu);
    for (int64_t r = 0; r < M; r++) {
        memcpy(hb + r * I, gu + r * 2 * I, (size_t)I * sizeof(float));
        choir_silu(hb + r * I, I);
        choir_mul(hb + r * I, gu + r * 2 * I + I, hb + r * I, I);
    }
    choir_linear(hb, M, &wd, NULL, t);
    for (int64_t i = 0; i < M * H; i++) a->x[i] += t[i];
    free(gu), free(hb), free(t);
    return 0;
}
int choir_cuda_gated_mlp_cat_rows(choir_cuda *cu, float *x, int64_t M, const float *gamma, float eps,
                                  const choir_cuda_weight *Wgu, const choir_cuda_weight *Wd, void *gu, void *hb,
                                  void *h, choir_err *err) {
    (void)cu, (void)gu, (void)hb;
    if (!choir_cuda_prefill_fused_on() || !choir_cuda_rows_ok(M, Wgu) || !choir_cuda_rows_ok(M, Wd) ||
        Wgu->rows % 2 || Wd->cols != Wgu->rows / 2 || Wd->rows != Wgu->cols)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: gate and up as one product");
    mlp_cat_args a = {x, h, gamma, M, eps, *Wgu, *Wd};
    return run_or_record(mlp_cat_op, &a, sizeof a);
}

void choir_cuda_linear_bf16_set_lt(bool on) { (void)on; }
void choir_cuda_linear_set_bias_epilogue(bool on) { (void)on; }
int choir_cuda_gemv_variants(void) { return 1; }
void choir_cuda_gemv_set_variant(int v) { (void)v; }
/* Programmatic launch changes no float (the emulation runs each call to its end). */
static int g_fake_pdl;
void choir_cuda_pdl_set(int mode) { g_fake_pdl = mode >= 0 && mode <= 2 ? mode : 0; }
int choir_cuda_pdl(void) { return g_fake_pdl; }
/* No mma GEMV here: the switch stays off (the check skips its cases). */
void choir_cuda_gemv_mma_set(int mode) { (void)mode; }
int choir_cuda_gemv_mma_mode(void) { return 0; }
bool choir_cuda_gemv_mma_on(void) { return false; }
void choir_cuda_linear_bf16_set_gelu_epilogue(bool on) { (void)on; }
void choir_cuda_layer_norm_bf16_set_warp(bool on) { (void)on; }

/* Every path is the CPU reference here; the choice is reported as the
 * device makes it, so that checks pick the same bounds. */
static choir_cuda_linear_path g_fake_force = CHOIR_CUDA_LINEAR_AUTO;
void choir_cuda_linear_force(choir_cuda_linear_path p) { g_fake_force = p; }
choir_cuda_linear_path choir_cuda_linear_path_for(int64_t M, const choir_cuda_weight *W) {
    bool skinny = (W->kind == CHOIR_WEIGHT_BF16 || W->kind == CHOIR_WEIGHT_F16) && M >= 1 &&
                  M <= CHOIR_CUDA_SKINNY_MAX_ROWS && W->cols % 8 == 0 && W->cols > 0 && W->rows > 0;
    choir_cuda_linear_path plain = M <= 8 ? CHOIR_CUDA_LINEAR_GEMV : CHOIR_CUDA_LINEAR_BLAS;
    if (g_fake_force == CHOIR_CUDA_LINEAR_GEMV) return plain;
    if (g_fake_force == CHOIR_CUDA_LINEAR_SKINNY) return skinny ? CHOIR_CUDA_LINEAR_SKINNY : plain;
    if (g_fake_force == CHOIR_CUDA_LINEAR_BLAS) return CHOIR_CUDA_LINEAR_BLAS;
    if (skinny && M >= CHOIR_CUDA_SKINNY_FROM && M <= CHOIR_CUDA_SKINNY_TO)
        return CHOIR_CUDA_LINEAR_SKINNY;
    if (W->kind == CHOIR_WEIGHT_BF16 || W->kind == CHOIR_WEIGHT_F16)
        return M <= CHOIR_CUDA_GEMV_HALF_ROWS ? CHOIR_CUDA_LINEAR_GEMV : CHOIR_CUDA_LINEAR_BLAS;
    return plain;
}

typedef struct conv_bf16_args {
    const float *x, *w, *bias;
    float *y;
    int64_t B, Cin, T, Cout, K;
    int stride, padding, dilation;
} conv_bf16_args;
static int conv_bf16_op(const void *p) {
    const conv_bf16_args *a = p;
    int64_t nw = a->Cout * a->Cin * a->K, nx = a->Cin * a->T;
    int64_t Tout = choir_conv1d_out_len(a->T, a->K, a->stride, a->padding, a->dilation);
    float *wr = malloc((size_t)nw * 4), *xr = malloc((size_t)nx * 4);
    uint16_t *tmp = malloc((size_t)(nw > nx ? nw : nx) * 2);
    if (!wr || !xr || !tmp) {
        free(wr), free(xr), free(tmp);
        return CHOIR_ENOMEM;
    }
    choir_f32_to_bf16_n(a->w, tmp, nw);
    choir_bf16_to_f32_n(tmp, wr, nw);
    for (int64_t b = 0; b < a->B; b++) {
        choir_f32_to_bf16_n(a->x + b * nx, tmp, nx);
        choir_bf16_to_f32_n(tmp, xr, nx);
        choir_conv1d(xr, a->Cin, a->T, wr, a->bias, a->Cout, a->K, a->stride, a->padding,
                     a->dilation, 1, a->y + b * a->Cout * Tout);
    }
    free(wr), free(xr), free(tmp);
    return 0;
}
int choir_cuda_conv1d_bf16(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                           const float *weight, const float *bias, int64_t Cout, int64_t kernel,
                           int stride, int padding, int dilation, float *y, choir_err *err) {
    (void)cu, (void)err;
    conv_bf16_args a = {x, weight, bias, y, B, Cin, T, Cout, kernel, stride, padding, dilation};
    return run_or_record(conv_bf16_op, &a, sizeof(a));
}

typedef struct ln_bf16_args {
    const float *x, *g, *b;
    uint16_t *y;
    int64_t rows, dim;
    float eps;
} ln_bf16_args;
static int ln_bf16_op(const void *p) {
    const ln_bf16_args *a = p;
    float *row = malloc((size_t)a->dim * sizeof(float));
    if (!row) return CHOIR_ENOMEM;
    for (int64_t r = 0; r < a->rows; r++) {
        choir_layer_norm(a->x + r * a->dim, row, 1, a->dim, a->g, a->b, a->eps);
        choir_f32_to_bf16_n(row, a->y + r * a->dim, a->dim);
    }
    free(row);
    return 0;
}
int choir_cuda_layer_norm_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t rows,
                               int64_t dim, const float *gamma, const float *beta, float eps,
                               choir_err *err) {
    (void)cu, (void)err;
    ln_bf16_args a = {x, gamma, beta, y, rows, dim, eps};
    return run_or_record(ln_bf16_op, &a, sizeof(a));
}

typedef struct ew_args {
    const float *a, *b, *g, *beta;
    float *y;
    int64_t n, rows, dim;
    float eps;
    int kind; /* 0 add, 1 gelu_erf, 2 layer_norm, 3 gelu_tanh */
} ew_args;
static int ew_op(const void *p) {
    const ew_args *a = p;
    if (a->kind == 0) choir_add(a->a, a->b, a->y, a->n);
    else if (a->kind == 1) choir_gelu_erf(a->y, a->n);
    else if (a->kind == 3) choir_gelu_tanh(a->y, a->n);
    else choir_layer_norm(a->a, a->y, a->rows, a->dim, a->g, a->beta, a->eps);
    return 0;
}
int choir_cuda_add(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                   choir_err *err) {
    (void)cu, (void)err;
    ew_args e = {.a = a, .b = b, .y = y, .n = n, .kind = 0};
    return run_or_record(ew_op, &e, sizeof(e));
}
int choir_cuda_gelu_erf(choir_cuda *cu, float *x, int64_t n, choir_err *err) {
    (void)cu, (void)err;
    ew_args e = {.y = x, .n = n, .kind = 1};
    return run_or_record(ew_op, &e, sizeof(e));
}
int choir_cuda_gelu_tanh(choir_cuda *cu, float *x, int64_t n, choir_err *err) {
    (void)cu, (void)err;
    ew_args e = {.y = x, .n = n, .kind = 3};
    return run_or_record(ew_op, &e, sizeof(e));
}
int choir_cuda_layer_norm(choir_cuda *cu, const float *x, float *y, int64_t rows, int64_t dim,
                          const float *gamma, const float *beta, float eps, choir_err *err) {
    (void)cu, (void)err;
    ew_args e = {.a = x, .g = gamma, .beta = beta, .y = y, .rows = rows, .dim = dim, .eps = eps,
                 .kind = 2};
    return run_or_record(ew_op, &e, sizeof(e));
}
int choir_cuda_add_bias_rows(choir_cuda *cu, float *x, const float *bias, int64_t rows,
                             int64_t cols, choir_err *err) {
    (void)cu;
    if (no_capture("add_bias_rows", err)) return CHOIR_EINTERNAL;
    choir_add_bias_rows(x, bias, rows, cols);
    return 0;
}
int choir_cuda_softmax(choir_cuda *cu, float *x, int64_t rows, int64_t dim, choir_err *err) {
    (void)cu;
    if (no_capture("softmax", err)) return CHOIR_EINTERNAL;
    choir_softmax(x, rows, dim);
    return 0;
}
int choir_cuda_transpose_add(choir_cuda *cu, const float *src, int64_t R, int64_t C,
                             const float *add, float *dst, choir_err *err) {
    (void)cu;
    if (no_capture("transpose_add", err)) return CHOIR_EINTERNAL;
    for (int64_t c = 0; c < C; c++)
        for (int64_t r = 0; r < R; r++) dst[c * R + r] = src[r * C + c] + (add ? add[c * R + r] : 0);
    return 0;
}
typedef struct {
    const float *src;
    int64_t B, R, C;
    const int32_t *lens;
    float *dst;
} transpose_lens_args;
static int transpose_lens_op(const void *p) {
    const transpose_lens_args *a = p;
    for (int64_t b = 0; b < a->B; b++) {
        const int64_t valid = a->lens ? a->lens[b] : a->R;
        const float *sb = a->src + b * a->R * a->C;
        float *db = a->dst + b * a->R * a->C;
        for (int64_t c = 0; c < a->C; c++)
            for (int64_t r = 0; r < a->R; r++) db[c * a->R + r] = r < valid ? sb[r * a->C + c] : 0.0f;
    }
    return 0;
}
int choir_cuda_transpose_lens(choir_cuda *cu, const float *src, int64_t B, int64_t R, int64_t C,
                              const int32_t *lens, float *dst, choir_err *err) {
    (void)cu, (void)err;
    transpose_lens_args a = {src, B, R, C, lens, dst};
    return run_or_record(transpose_lens_op, &a, sizeof(a));
}
typedef struct to_bf16_args {
    const float *x;
    uint16_t *y;
    int64_t n;
} to_bf16_args;
static int to_bf16_op(const void *p) {
    const to_bf16_args *a = p;
    choir_f32_to_bf16_n(a->x, a->y, a->n);
    return 0;
}
int choir_cuda_f32_to_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t n,
                           choir_err *err) {
    (void)cu, (void)err;
    to_bf16_args a = {x, y, n};
    return run_or_record(to_bf16_op, &a, sizeof a);
}
int choir_cuda_conv1d(choir_cuda *cu, const float *x, int64_t Cin, int64_t T, const float *weight,
                      const float *bias, int64_t Cout, int64_t kernel, int stride, int padding,
                      int dilation, int groups, float *y, choir_err *err) {
    (void)cu;
    if (no_capture("conv1d", err)) return CHOIR_EINTERNAL;
    choir_conv1d(x, Cin, T, weight, bias, Cout, kernel, stride, padding, dilation, groups, y);
    return 0;
}
typedef struct gemm_args {
    bool ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int64_t lda, ldb, ldc;
} gemm_args;
static int gemm_op(const void *p) {
    const gemm_args *a = p;
    choir_gemm_f32(a->ta, a->tb, a->M, a->N, a->K, a->alpha, a->A, a->lda, a->B, a->ldb, a->beta,
                   a->C, a->ldc);
    return 0;
}
int choir_cuda_gemm_f32(choir_cuda *cu, bool trans_a, bool trans_b, int64_t M, int64_t N,
                        int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float beta, float *C, int64_t ldc, choir_err *err) {
    (void)cu, (void)err;
    gemm_args a = {trans_a, trans_b, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc};
    return run_or_record(gemm_op, &a, sizeof a);
}
int choir_cuda_gemm_bf16_nt(choir_cuda *cu, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                            const uint16_t *B, float *C, choir_err *err) {
    (void)cu, (void)M, (void)N, (void)K, (void)A, (void)B, (void)C;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: gemm_bf16_nt not emulated");
}

typedef struct attn_args {
    int64_t B;
    const float *q;
    int64_t ldq, q_batch;
    const float *k;
    int64_t ldk;
    const float *v;
    int64_t ldv, kv_batch;
    const int32_t *kv_slot, *kv_len;
    float *out;
    int64_t ldo, out_batch, Tq, Tk;
    int n_head;
    int64_t Dh;
    float scale;
    const float *mask;
    bool causal;
} attn_args;
static int attn_op(const void *p) {
    const attn_args *a = p;
    for (int64_t b = 0; b < a->B; b++) {
        int64_t slot = a->kv_slot ? a->kv_slot[b] : b;
        int64_t nkv = a->kv_len ? a->kv_len[b] : a->Tk;
        if (nkv > a->Tk) nkv = a->Tk;
        choir_attention(a->q + b * a->q_batch, a->ldq, a->k + slot * a->kv_batch, a->ldk,
                        a->v + slot * a->kv_batch, a->ldv, a->out + b * a->out_batch, a->ldo, a->Tq,
                        nkv, a->n_head, a->Dh, a->scale, a->mask, a->causal);
    }
    return 0;
}
int choir_cuda_attention(choir_cuda *cu, const float *q, int64_t ldq, const float *k, int64_t ldk,
                         const float *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                         int64_t Tk, int n_head, int64_t Dh, float scale, const float *mask,
                         bool causal, choir_err *err) {
    (void)cu, (void)err;
    attn_args a = {1, q, ldq, 0, k, ldk, v, ldv, 0, NULL, NULL, out, ldo, 0, Tq, Tk, n_head, Dh,
                   scale, mask, causal};
    return run_or_record(attn_op, &a, sizeof(a));
}
int choir_cuda_attention_batched(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                                 int64_t q_batch, const float *k, int64_t ldk, const float *v,
                                 int64_t ldv, int64_t kv_batch, const int32_t *kv_len, float *out,
                                 int64_t ldo, int64_t out_batch, int64_t Tq, int64_t Tk,
                                 int n_head, int64_t Dh, float scale, bool causal,
                                 choir_err *err) {
    return choir_cuda_attention_slots(cu, B, q, ldq, q_batch, k, ldk, v, ldv, kv_batch, NULL,
                                      kv_len, out, ldo, out_batch, Tq, Tk, n_head, Dh, scale,
                                      causal, err);
}
int choir_cuda_attention_slots(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                               int64_t q_batch, const float *k, int64_t ldk, const float *v,
                               int64_t ldv, int64_t slot_stride, const int32_t *kv_slot,
                               const int32_t *kv_len, float *out, int64_t ldo, int64_t out_batch,
                               int64_t Tq, int64_t Tk, int n_head, int64_t Dh, float scale,
                               bool causal, choir_err *err) {
    (void)cu, (void)err;
    attn_args a = {B,      q,   ldq, q_batch,   k,  ldk, v,      ldv,  slot_stride, kv_slot, kv_len,
                   out,    ldo, out_batch, Tq, Tk, n_head, Dh,   scale, NULL,       causal};
    return run_or_record(attn_op, &a, sizeof(a));
}
typedef struct {
    int64_t n;
    const float *q, *k, *v;
    int64_t ld;
    const int32_t *off, *len;
    int n_head;
    int64_t Dh;
    float scale;
    float *out;
} ragged_args;
static int ragged_op(const void *p) {
    const ragged_args *a = p;
    for (int64_t b = 0; b < a->n; b++) {
        int64_t o = (int64_t)a->off[b] * a->ld;
        choir_attention(a->q + o, a->ld, a->k + o, a->ld, a->v + o, a->ld, a->out + o, a->ld,
                        a->len[b], a->len[b], a->n_head, a->Dh, a->scale, NULL, false);
    }
    return 0;
}
int choir_cuda_attention_ragged(choir_cuda *cu, int64_t n, const float *q, const float *k,
                                const float *v, int64_t ld, const int32_t *off,
                                const int32_t *len, int64_t Tm, int n_head, int64_t Dh,
                                float scale, float *out, choir_err *err) {
    (void)cu, (void)err, (void)Tm;
    ragged_args a = {n, q, k, v, ld, off, len, n_head, Dh, scale, out};
    return run_or_record(ragged_op, &a, sizeof(a));
}
int64_t choir_cuda_attention_max_keys(const choir_cuda *cu) {
    return cu->props.smem_per_block_optin / 4 - 544;
}

/* bf16 keys and values: each sequence's rows widened to f32, then the CPU
 * kernel (as the device kernel, which widens as it reads). */
typedef struct attn16_args {
    attn_args a; /* k, v point at uint16 values; strides in elements */
} attn16_args;
static int attn16_op(const void *p) {
    const attn_args *a = &((const attn16_args *)p)->a;
    int64_t cols = (int64_t)a->n_head * a->Dh;
    for (int64_t b = 0; b < a->B; b++) {
        int64_t slot = a->kv_slot ? a->kv_slot[b] : b;
        int64_t nkv = a->kv_len ? a->kv_len[b] : a->Tk;
        if (nkv > a->Tk) nkv = a->Tk;
        if (nkv < 0) nkv = 0;
        const uint16_t *kb = (const uint16_t *)a->k + slot * a->kv_batch;
        const uint16_t *vb = (const uint16_t *)a->v + slot * a->kv_batch;
        float *kf = malloc((size_t)(nkv * cols + 1) * sizeof(float));
        float *vf = malloc((size_t)(nkv * cols + 1) * sizeof(float));
        if (!kf || !vf) {
            free(kf), free(vf);
            return CHOIR_ENOMEM;
        }
        for (int64_t r = 0; r < nkv; r++) {
            choir_bf16_to_f32_n(kb + r * a->ldk, kf + r * cols, cols);
            choir_bf16_to_f32_n(vb + r * a->ldv, vf + r * cols, cols);
        }
        choir_attention(a->q + b * a->q_batch, a->ldq, kf, cols, vf, cols, a->out + b * a->out_batch,
                        a->ldo, a->Tq, nkv, a->n_head, a->Dh, a->scale, a->mask, a->causal);
        free(kf), free(vf);
    }
    return 0;
}
int choir_cuda_attention_kv16(choir_cuda *cu, const float *q, int64_t ldq, const uint16_t *k,
                              int64_t ldk, const uint16_t *v, int64_t ldv, float *out, int64_t ldo,
                              int64_t Tq, int64_t Tk, int n_head, int64_t Dh, float scale,
                              const float *mask, bool causal, choir_err *err) {
    (void)cu, (void)err;
    attn16_args a = {{1, q, ldq, 0, (const float *)(const void *)k, ldk,
                      (const float *)(const void *)v, ldv, 0, NULL, NULL, out, ldo, 0, Tq, Tk,
                      n_head, Dh, scale, mask, causal}};
    return run_or_record(attn16_op, &a, sizeof(a));
}
int choir_cuda_attention_slots_kv16(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                                    int64_t q_batch, const uint16_t *k, int64_t ldk,
                                    const uint16_t *v, int64_t ldv, int64_t slot_stride,
                                    const int32_t *kv_slot, const int32_t *kv_len, float *out,
                                    int64_t ldo, int64_t out_batch, int64_t Tq, int64_t Tk,
                                    int n_head, int64_t Dh, float scale, bool causal,
                                    choir_err *err) {
    (void)cu, (void)err;
    attn16_args a = {{B, q, ldq, q_batch, (const float *)(const void *)k, ldk,
                      (const float *)(const void *)v, ldv, slot_stride, kv_slot, kv_len, out, ldo,
                      out_batch, Tq, Tk, n_head, Dh, scale, NULL, causal}};
    return run_or_record(attn16_op, &a, sizeof(a));
}

/* All-bf16 attention: each sequence widened to f32, the CPU kernel, the
 * output rounded (the device kernel also rounds the probabilities). */
typedef struct attn_bf16_args {
    int64_t B;
    const uint16_t *q, *k, *v;
    uint16_t *out;
    int64_t ldq, q_batch, ldk, ldv, kv_batch, ldo, out_batch, Tq, Tk, Dh;
    int n_head, n_kv;
    float scale;
    bool causal;
} attn_bf16_args;
static float *widen_rows(const uint16_t *x, int64_t rows, int64_t cols, int64_t ld) {
    float *y = malloc((size_t)(rows * cols + 1) * sizeof(float));
    for (int64_t r = 0; y && r < rows; r++) choir_bf16_to_f32_n(x + r * ld, y + r * cols, cols);
    return y;
}
static int attn_bf16_op(const void *p) {
    const attn_bf16_args *a = p;
    int rep = a->n_head / a->n_kv;
    int64_t qc = (int64_t)a->n_head * a->Dh, kc = (int64_t)a->n_kv * a->Dh;
    for (int64_t b = 0; b < a->B; b++) {
        float *qf = widen_rows(a->q + b * a->q_batch, a->Tq, qc, a->ldq);
        float *kf = widen_rows(a->k + b * a->kv_batch, a->Tk, kc, a->ldk);
        float *vf = widen_rows(a->v + b * a->kv_batch, a->Tk, kc, a->ldv);
        float *of = malloc((size_t)(a->Tq * qc + 1) * sizeof(float));
        if (!qf || !kf || !vf || !of) {
            free(qf), free(kf), free(vf), free(of);
            return CHOIR_ENOMEM;
        }
        for (int h = 0; h < a->n_head; h++)
            choir_attention(qf + h * a->Dh, qc, kf + (h / rep) * a->Dh, kc, vf + (h / rep) * a->Dh,
                            kc, of + h * a->Dh, qc, a->Tq, a->Tk, 1, a->Dh, a->scale, NULL,
                            a->causal);
        for (int64_t r = 0; r < a->Tq; r++)
            choir_f32_to_bf16_n(of + r * qc, a->out + b * a->out_batch + r * a->ldo, qc);
        free(qf), free(kf), free(vf), free(of);
    }
    return 0;
}
int choir_cuda_attention_bf16(choir_cuda *cu, int64_t B, const uint16_t *q, int64_t ldq,
                              int64_t q_batch, const uint16_t *k, int64_t ldk, const uint16_t *v,
                              int64_t ldv, int64_t kv_batch, uint16_t *out, int64_t ldo,
                              int64_t out_batch, int64_t Tq, int64_t Tk, int n_head,
                              int n_kv_head, int64_t Dh, float scale, bool causal,
                              choir_err *err) {
    (void)cu;
    int kvh = n_kv_head > 0 ? n_kv_head : n_head;
    if (Dh != 16 && Dh != 32 && Dh != 64)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: bf16 attention over heads of %lld",
                             (long long)Dh);
    if (B <= 0 || Tq <= 0) return 0;
    attn_bf16_args a = {B,  q,  k,  v,         out, ldq, q_batch, ldk, ldv,   kv_batch,
                        ldo, out_batch, Tq, Tk, Dh, n_head, kvh, scale, causal};
    return run_or_record(attn_bf16_op, &a, sizeof(a));
}
void choir_cuda_attention_bf16_set_rows(int rows_per_warp) { (void)rows_per_warp; }
void choir_cuda_attention_bf16_set_kernel(int kernel) { (void)kernel; }
int choir_cuda_attention_bf16_kernels(void) { return 1; }

typedef struct scatter_args {
    const float *src;
    int64_t B, cols;
    float *dst;
    int64_t slot_stride, ld;
    const int32_t *slot, *pos;
} scatter_args;
static int scatter_op(const void *p) {
    const scatter_args *a = p;
    for (int64_t b = 0; b < a->B; b++)
        memcpy(a->dst + (int64_t)a->slot[b] * a->slot_stride + (int64_t)a->pos[b] * a->ld,
               a->src + b * a->cols, (size_t)a->cols * sizeof(float));
    return 0;
}
int choir_cuda_rows_scatter(choir_cuda *cu, const float *src, int64_t B, int64_t cols, float *dst,
                            int64_t slot_stride, int64_t ld, const int32_t *slot,
                            const int32_t *pos, choir_err *err) {
    (void)cu, (void)err;
    scatter_args a = {src, B, cols, dst, slot_stride, ld, slot, pos};
    return run_or_record(scatter_op, &a, sizeof(a));
}

typedef struct scatter16_args {
    const float *src;
    int64_t B, cols;
    uint16_t *dst;
    int64_t slot_stride, ld;
    const int32_t *slot, *pos;
} scatter16_args;
static int scatter16_op(const void *p) {
    const scatter16_args *a = p;
    for (int64_t b = 0; b < a->B; b++)
        choir_f32_to_bf16_n(a->src + b * a->cols,
                            a->dst + (int64_t)a->slot[b] * a->slot_stride + (int64_t)a->pos[b] * a->ld,
                            a->cols);
    return 0;
}
int choir_cuda_rows_scatter_bf16(choir_cuda *cu, const float *src, int64_t B, int64_t cols,
                                 uint16_t *dst, int64_t slot_stride, int64_t ld,
                                 const int32_t *slot, const int32_t *pos, choir_err *err) {
    (void)cu, (void)err;
    scatter16_args a = {src, B, cols, dst, slot_stride, ld, slot, pos};
    return run_or_record(scatter16_op, &a, sizeof(a));
}

/* --- graphs ---------------------------------------------------------------------- */

int choir_cuda_graph_begin(choir_cuda *cu, choir_err *err) {
    if (g_capture) return choir_err_set(err, CHOIR_EINTERNAL, "fake cuda: nested capture");
    g_capture = calloc(1, sizeof(*g_capture));
    g_capture->cu = cu;
    g_capture_failed = 0;
    return 0;
}
choir_cuda_graph *choir_cuda_graph_end(choir_cuda *cu, choir_err *err) {
    choir_cuda_graph *g = g_capture;
    g_capture = NULL;
    if (!g || g_capture_failed) {
        choir_err_set(err, CHOIR_EINTERNAL, "fake cuda: capture failed");
        choir_cuda_graph_free(g);
        return NULL;
    }
    cu->live_graphs++;
    g->counted = 1;
    return g;
}
int choir_cuda_graph_launch(choir_cuda *cu, choir_cuda_graph *g, choir_err *err) {
    (void)cu;
    if (no_capture("graph launch", err)) return CHOIR_EINTERNAL;
    for (int i = 0; i < g->n; i++) g->ops[i].fn(g->ops[i].args);
    return 0;
}
void choir_cuda_graph_free(choir_cuda_graph *g) {
    if (!g) return;
    if (g->counted) g->cu->live_graphs--;
    for (int i = 0; i < g->n; i++) free(g->ops[i].args);
    free(g->ops);
    free(g);
}

/* --- timing ------------------------------------------------------------------------ */

struct choir_cuda_timer {
    int unused;
};
choir_cuda_timer *choir_cuda_timer_begin(choir_cuda *cu, choir_err *err) {
    (void)cu, (void)err;
    return calloc(1, sizeof(choir_cuda_timer));
}
double choir_cuda_timer_end_ms(choir_cuda_timer *t, choir_err *err) {
    (void)err;
    free(t);
    return 1.0;
}
void choir_cuda_timer_free(choir_cuda_timer *t) { free(t); }
int choir_cuda_measure_ceilings(choir_cuda *cu, double *bf16_tflops, double *copy_gbs,
                                choir_err *err) {
    (void)cu, (void)err;
    if (bf16_tflops) *bf16_tflops = 1.0;
    if (copy_gbs) *copy_gbs = 1.0;
    return 0;
}

/* --- backend operations (cuda_ops.cu) and the audio kernels the backend
 * reaches (cuda_audio.h): the CPU formulas, recorded like the rest. Audio
 * kernels that no emulated model uses yet say so. ------------------------- */

#include "choir/cuda_audio.h"
#include "choir/cuda_vocoder.h"

/* Stand-ins that an area fake (fake_kokoro.c) may replace. */
#define FAKE_WEAK __attribute__((weak))

typedef struct op2_args {
    const float *a, *b, *g, *beta;
    float *y;
    int64_t n, rows, dim, C, T, groups, ld, Dh, rot;
    float s, eps, theta;
    int kind, n_head, inter;
    const int32_t *pos;
} op2_args;

static int op2_run(const void *p) {
    const op2_args *o = p;
    switch (o->kind) {
    case 0: choir_mul(o->a, o->b, o->y, o->n); break;
    case 1: choir_scale(o->y, o->s, o->n); break;
    case 2: choir_silu(o->y, o->n); break;
    case 3: choir_relu(o->y, o->n); break;
    case 4: choir_sigmoid(o->y, o->n); break;
    case 5: choir_tanh(o->y, o->n); break;
    case 6:
        for (int64_t r = 0; r < o->rows; r++) {
            const float *xr = o->a + r * o->dim;
            double ss = 0;
            for (int64_t i = 0; i < o->dim; i++) ss += (double)xr[i] * xr[i];
            float inv = (float)(1.0 / sqrt(ss / (double)o->dim + (double)o->eps));
            for (int64_t i = 0; i < o->dim; i++)
                o->y[r * o->dim + i] = xr[i] * inv * (o->g ? o->g[i] : 1.0f);
        }
        break;
    case 7: {
        int64_t half = o->rot / 2;
        for (int64_t r = 0; r < o->rows; r++)
            for (int64_t i = 0; i < half; i++) {
                float inv_freq = (float)(1.0 / pow((double)o->theta, (double)(2 * i) / (double)o->rot));
                float ang = (float)o->pos[r] * inv_freq, cs = cosf(ang), sn = sinf(ang);
                for (int h = 0; h < o->n_head; h++) {
                    float *xh = o->y + r * o->ld + (int64_t)h * o->Dh;
                    int64_t i0 = o->inter ? 2 * i : i, i1 = o->inter ? 2 * i + 1 : i + half;
                    float a = xh[i0], b = xh[i1];
                    xh[i0] = a * cs - b * sn;
                    xh[i1] = b * cs + a * sn;
                }
            }
        break;
    }
    case 8:
        for (int64_t r = 0; r < o->rows; r++)
            memmove(o->y + r * o->ld, o->a + r * o->Dh, (size_t)o->dim * sizeof(float));
        break;
    case 9:
        choir_silu(o->y, o->n);
        choir_mul(o->y, o->a, o->y, o->n);
        break;
    }
    return 0;
}

int choir_cuda_swiglu(choir_cuda *cu, float *gate, const float *up, int64_t n, choir_err *err) {
    (void)cu, (void)err;
    op2_args o = {.y = gate, .a = up, .n = n, .kind = 9};
    return run_or_record(op2_run, &o, sizeof o);
}

int choir_cuda_mul(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                   choir_err *err) {
    (void)cu, (void)err;
    op2_args o = {.a = a, .b = b, .y = y, .n = n, .kind = 0};
    return run_or_record(op2_run, &o, sizeof o);
}
int choir_cuda_scale(choir_cuda *cu, float *x, float s, int64_t n, choir_err *err) {
    (void)cu, (void)err;
    op2_args o = {.y = x, .n = n, .s = s, .kind = 1};
    return run_or_record(op2_run, &o, sizeof o);
}
int choir_cuda_act(choir_cuda *cu, int act, float *x, int64_t n, choir_err *err) {
    (void)cu;
    if (act < 2 || act > 5) return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: activation %d", act);
    op2_args o = {.y = x, .n = n, .kind = act};
    return run_or_record(op2_run, &o, sizeof o);
}
int choir_cuda_rms_norm(choir_cuda *cu, const float *x, float *y, int64_t rows, int64_t dim,
                        const float *gamma, float eps, choir_err *err) {
    (void)cu, (void)err;
    op2_args o = {.a = x, .y = y, .rows = rows, .dim = dim, .g = gamma, .eps = eps, .kind = 6};
    return run_or_record(op2_run, &o, sizeof o);
}
/* As choir_cuda_rms_norm, each value rounded to bf16. */
typedef struct rms_bf16_args {
    const float *x, *g;
    uint16_t *y;
    int64_t rows, dim;
    float eps;
} rms_bf16_args;
static int rms_bf16_op(const void *p) {
    const rms_bf16_args *a = p;
    for (int64_t r = 0; r < a->rows; r++) {
        const float *xr = a->x + r * a->dim;
        double ss = 0;
        for (int64_t i = 0; i < a->dim; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / (double)a->dim + (double)a->eps));
        for (int64_t i = 0; i < a->dim; i++)
            a->y[r * a->dim + i] = choir_f32_to_bf16(xr[i] * inv * (a->g ? a->g[i] : 1.0f));
    }
    return 0;
}
int choir_cuda_rms_norm_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t rows, int64_t dim,
                             const float *gamma, float eps, choir_err *err) {
    (void)cu, (void)err;
    rms_bf16_args a = {x, gamma, y, rows, dim, eps};
    return run_or_record(rms_bf16_op, &a, sizeof a);
}
void choir_cuda_rope_rows(bool on) { (void)on; }

int choir_cuda_rope(choir_cuda *cu, float *x, int64_t rows, int64_t ld, int n_head, int64_t Dh,
                    int64_t rot_dims, const int32_t *pos, float theta, bool interleaved,
                    choir_err *err) {
    (void)cu, (void)err;
    op2_args o = {.y = x, .rows = rows, .ld = ld, .n_head = n_head, .Dh = Dh, .rot = rot_dims,
                  .pos = pos, .theta = theta, .inter = interleaved, .kind = 7};
    return run_or_record(op2_run, &o, sizeof o);
}
int choir_cuda_copy_rows(choir_cuda *cu, float *dst, int64_t ldd, const float *src, int64_t lds,
                         int64_t rows, int64_t cols, choir_err *err) {
    (void)cu, (void)err;
    op2_args o = {.y = dst, .ld = ldd, .a = src, .Dh = lds, .rows = rows, .dim = cols, .kind = 8};
    return run_or_record(op2_run, &o, sizeof o);
}
int choir_cuda_group_norm(choir_cuda *cu, const float *x, float *y, int64_t B, int64_t C,
                          int64_t T, int64_t groups, const float *gamma, const float *beta,
                          float eps, choir_err *err) {
    (void)cu;
    if (no_capture("group_norm", err)) return CHOIR_EINTERNAL;
    for (int64_t b = 0; b < B; b++)
        choir_group_norm(x + b * C * T, y + b * C * T, C, T, (int)groups, gamma, beta, eps);
    return 0;
}

typedef struct gather_args {
    choir_cuda_weight W;
    const int32_t *ids;
    int64_t n;
    float *out;
} gather_args;
static int gather_op(const void *p) {
    const gather_args *a = p;
    choir_weight w = host_view(&a->W);
    for (int64_t r = 0; r < a->n; r++) {
        if (a->ids[r] < 0 || a->ids[r] >= w.rows)
            memset(a->out + r * w.cols, 0, (size_t)w.cols * sizeof(float));
        else
            choir_weight_row_f32(&w, a->ids[r], a->out + r * w.cols);
    }
    return 0;
}
int choir_cuda_rows_gather(choir_cuda *cu, const choir_cuda_weight *W, const int32_t *ids,
                           int64_t n, float *out, choir_err *err) {
    (void)cu;
    (void)err;
    gather_args a = {*W, ids, n, out};
    return run_or_record(gather_op, &a, sizeof a);
}

/* Greedy selection the way cuda_ops.cu's kernel does it (1024 threads a
 * row, each scanning its float4 groups, then a merge of the threads'
 * (value, index) pairs), not through choir_argmax_f32, so that the checks'
 * device-against-host comparison means something here too. */
typedef struct argmax_args {
    const float *x;
    int64_t rows, cols;
    int32_t *out;
} argmax_args;
static void am_take(float *bv, int *bi, float v, int i) {
    if (i >= 0 && (*bi < 0 || v > *bv || (v == *bv && i < *bi))) *bv = v, *bi = i;
}
static int argmax_op(const void *p) {
    const argmax_args *a = p;
    enum { THREADS = 1024 };
    for (int64_t r = 0; r < a->rows; r++) {
        const float *row = a->x + r * a->cols;
        int vec = a->cols % 4 == 0 ? 4 : 1;
        float best_v = 0.0f;
        int best_i = -1;
        for (int t = 0; t < THREADS; t++) {
            float bv = 0.0f;
            int bi = -1;
            for (int64_t j = t; j * vec < a->cols; j += THREADS)
                for (int e = 0; e < vec; e++)
                    if (!isnan(row[j * vec + e])) am_take(&bv, &bi, row[j * vec + e], (int)(j * vec + e));
            am_take(&best_v, &best_i, bv, bi);
        }
        a->out[r] = isnan(row[0]) || best_i < 0 ? 0 : best_i;
    }
    return 0;
}
int choir_cuda_argmax_rows(choir_cuda *cu, const float *x, int64_t rows, int64_t cols, int32_t *out,
                           choir_err *err) {
    (void)cu;
    if (cols <= 0 || cols > INT32_MAX) return choir_err_set(err, CHOIR_EINVAL, "cuda: argmax over %lld", (long long)cols);
    argmax_args a = {x, rows, cols, out};
    return run_or_record(argmax_op, &a, sizeof a);
}

int choir_cuda_leaky_relu(choir_cuda *cu, float *x, int64_t n, float slope, choir_err *err) {
    (void)cu;
    if (no_capture("leaky_relu", err)) return CHOIR_EINTERNAL;
    choir_leaky_relu(x, n, slope);
    return 0;
}
int choir_cuda_snake(choir_cuda *cu, float *x, int64_t B, int64_t C, int64_t T, const float *alpha,
                     choir_err *err) {
    (void)cu;
    if (no_capture("snake", err)) return CHOIR_EINTERNAL;
    for (int64_t b = 0; b < B; b++) choir_snake(x + b * C * T, C, T, alpha);
    return 0;
}
FAKE_WEAK int choir_cuda_conv_transpose1d_batched(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                        int64_t T, choir_cuda_conv_weight weight, const float *bias,
                                        int64_t Cout, int64_t kernel, int stride, int padding,
                                        int output_padding, const int32_t *out_lens, float *y,
                                        choir_err *err) {
    (void)cu;
    if (out_lens || weight.bf16)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "fake cuda: conv_transpose1d with lengths or bf16 not emulated");
    if (no_capture("conv_transpose1d", err)) return CHOIR_EINTERNAL;
    int64_t Tout = choir_conv_transpose1d_out_len(T, kernel, stride, padding, output_padding, 1);
    for (int64_t b = 0; b < B; b++)
        choir_conv_transpose1d(x + b * Cin * T, Cin, T, (const float *)weight.w, bias, Cout, kernel,
                               stride, padding, output_padding, 1, 1, y + b * Cout * Tout);
    return 0;
}
FAKE_WEAK int choir_cuda_conv_transpose1d_depthwise(choir_cuda *cu, const float *x, int64_t B, int64_t C,
                                          int64_t T, const float *weight, const float *bias,
                                          int64_t kernel, int stride, int padding,
                                          int output_padding, const int32_t *out_lens, float *y,
                                          choir_err *err) {
    (void)cu, (void)x, (void)B, (void)C, (void)T, (void)weight, (void)bias, (void)kernel;
    (void)stride, (void)padding, (void)output_padding, (void)out_lens, (void)y;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: depthwise conv not emulated");
}
FAKE_WEAK int choir_cuda_adain(choir_cuda *cu, const float *x, float *y, int64_t B, int64_t C, int64_t T,
                     const int32_t *lens, const float *norm_w, const float *norm_b, const float *gb,
                     int64_t gb_stride, float eps, choir_err *err) {
    (void)cu, (void)x, (void)y, (void)B, (void)C, (void)T, (void)lens, (void)norm_w, (void)norm_b;
    (void)gb, (void)gb_stride, (void)eps;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: adain not emulated");
}
FAKE_WEAK int choir_cuda_istft_magphase(choir_cuda *cu, const float *P, int64_t B, int64_t F,
                              const int32_t *frames, int n_fft, int hop, float *out,
                              choir_err *err) {
    (void)cu, (void)P, (void)B, (void)F, (void)frames, (void)n_fft, (void)hop, (void)out;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: istft not emulated");
}
FAKE_WEAK int choir_cuda_nsf_source_stft(choir_cuda *cu, const float *f0, int64_t B, int64_t T,
                                         const int32_t *lens, const choir_nsf_source *p,
                                         const uint64_t *seeds, const bool *noisy, float *work,
                                         float *S, choir_err *err) {
    (void)cu, (void)f0, (void)B, (void)T, (void)lens, (void)p, (void)seeds, (void)noisy;
    (void)work, (void)S;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: nsf source not emulated");
}
/* The vocoder operations' kernels (choir/backend_vocoder.h): emulated by
 * fake_kokoro.c where a program links it (these are weak stand-ins). */
FAKE_WEAK int choir_cuda_conv1d_batched(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                              choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                              int64_t kernel, int stride, int padding, int dilation,
                              const int32_t *out_lens, float *y, choir_err *err) {
    (void)cu, (void)x, (void)B, (void)Cin, (void)T, (void)weight, (void)bias, (void)Cout;
    (void)kernel, (void)stride, (void)padding, (void)dilation, (void)out_lens, (void)y;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: batched conv1d not emulated");
}
/* The host has one convolution path: the choice is accepted and ignored. */
void choir_cuda_conv_set_path(choir_cuda *cu, choir_cuda_conv_path path) { (void)cu, (void)path; }
void choir_cuda_conv_set_options(choir_cuda *cu, unsigned options) { (void)cu, (void)options; }
unsigned choir_cuda_conv_get_options(const choir_cuda *cu) { (void)cu; return 0u; }
void choir_cuda_conv_set_prepass_bytes(choir_cuda *cu, int64_t bytes) { (void)cu, (void)bytes; }
/* One LSTM on the host: the persistent kernel is the step kernel here. */
void choir_cuda_lstm_set_persist(choir_cuda *cu, bool on) { (void)cu, (void)on; }
FAKE_WEAK int choir_cuda_conv1d_adain_snake(choir_cuda *cu, const float *x, int64_t B,
                                            int64_t Cin, int64_t T,
                                            const choir_cuda_adain_snake *pre,
                                            choir_cuda_conv_weight weight, const float *bias,
                                            int64_t Cout, int64_t kernel, int padding,
                                            int dilation, const int32_t *out_lens,
                                            const float *residual, float *y, choir_err *err) {
    (void)cu, (void)x, (void)B, (void)Cin, (void)T, (void)pre, (void)weight, (void)bias;
    (void)Cout, (void)kernel, (void)padding, (void)dilation, (void)out_lens, (void)residual, (void)y;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: conv1d_adain_snake not emulated");
}
FAKE_WEAK int choir_cuda_conv1d_adain_snake_stats(
    choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
    const choir_cuda_adain_snake *pre, choir_cuda_conv_weight weight, const float *bias,
    int64_t Cout, int64_t kernel, int padding, int dilation, const int32_t *out_lens,
    const float *residual, float *y, double *stats_out, const int32_t *stats_lens,
    choir_err *err) {
    (void)stats_out, (void)stats_lens;
    return choir_cuda_conv1d_adain_snake(cu, x, B, Cin, T, pre, weight, bias, Cout, kernel,
                                         padding, dilation, out_lens, residual, y, err);
}
/* AdaIN's statistics partials and moments on the host (device memory is
 * host memory here): the sums of choir/cuda_audio.h, in frame order. */
int64_t choir_cuda_adain_stat_tiles(int64_t T) { return T > 0 ? (T + 127) / 128 : 0; }
int choir_cuda_adain_stats(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                           const int32_t *lens, double *part, choir_err *err) {
    (void)cu, (void)err;
    const int64_t tiles = choir_cuda_adain_stat_tiles(T);
    for (int64_t b = 0; b < B; b++) {
        int64_t n = lens ? lens[b] : T;
        n = n < 0 ? 0 : (n > T ? T : n);
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < tiles; i++) {
                double s = 0, q = 0;
                for (int64_t t = 128 * i; t < 128 * i + 128 && t < n; t++) {
                    const double v = x[(b * C + c) * T + t];
                    s += v, q += v * v;
                }
                part[((b * C + c) * tiles + i) * 2] = s;
                part[((b * C + c) * tiles + i) * 2 + 1] = q;
            }
    }
    return 0;
}
int choir_cuda_adain_moments(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                             const int32_t *lens, const double *part, double *mean_var,
                             choir_err *err) {
    (void)cu, (void)err;
    const int64_t tiles = choir_cuda_adain_stat_tiles(T);
    for (int64_t b = 0; b < B; b++) {
        int64_t n = lens ? lens[b] : T;
        n = n < 0 ? 0 : (n > T ? T : n);
        for (int64_t c = 0; c < C; c++) {
            double s = 0, q = 0;
            if (part) {
                for (int64_t i = 0; i < tiles; i++)
                    s += part[((b * C + c) * tiles + i) * 2],
                        q += part[((b * C + c) * tiles + i) * 2 + 1];
            } else {
                for (int64_t t = 0; t < n; t++) {
                    const double v = x[(b * C + c) * T + t];
                    s += v, q += v * v;
                }
            }
            double mean = n > 0 ? s / (double)n : 0.0, var = n > 0 ? q / (double)n - mean * mean : 0.0;
            mean_var[(b * C + c) * 2] = mean;
            mean_var[(b * C + c) * 2 + 1] = var < 0 ? 0 : var;
        }
    }
    return 0;
}
FAKE_WEAK int choir_cuda_add_scale(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                         float scale, choir_err *err) {
    (void)cu, (void)a, (void)b, (void)y, (void)n, (void)scale;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: add_scale not emulated");
}
FAKE_WEAK int choir_cuda_add_div(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                       float divisor, choir_err *err) {
    (void)cu, (void)a, (void)b, (void)y, (void)n, (void)divisor;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: add_div not emulated");
}
FAKE_WEAK int choir_cuda_upsample2_nearest(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                                 float *y, choir_err *err) {
    (void)cu, (void)x, (void)B, (void)C, (void)T, (void)y;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: nearest up-sampling not emulated");
}
FAKE_WEAK int choir_cuda_reflect_pad(choir_cuda *cu, const float *x, int64_t B, int64_t C, int64_t T,
                           const int32_t *lens, int left, int right, float *y, choir_err *err) {
    (void)cu, (void)x, (void)B, (void)C, (void)T, (void)lens, (void)left, (void)right, (void)y;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: reflection pad not emulated");
}
FAKE_WEAK int choir_cuda_copy_channels(choir_cuda *cu, const float *src, int64_t B, int64_t Cs, int64_t T,
                             float *dst, int64_t Cd, int64_t c0, choir_err *err) {
    (void)cu, (void)src, (void)B, (void)Cs, (void)T, (void)dst, (void)Cd, (void)c0;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: channel copy not emulated");
}
int64_t choir_cuda_bilstm_scratch_floats(int64_t B, int64_t T, int64_t H) {
    return B * T * 8 * H + 2 * B * H;
}
FAKE_WEAK int choir_cuda_bilstm(choir_cuda *cu, const float *x, int64_t B, int64_t T, int64_t In, int64_t H,
                      const float *w_ih, const float *w_hh, const float *bias,
                      const int32_t *lens, float *scratch, float *y, choir_err *err) {
    (void)cu, (void)x, (void)B, (void)T, (void)In, (void)H, (void)w_ih, (void)w_hh, (void)bias;
    (void)lens, (void)scratch, (void)y;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "fake cuda: bilstm not emulated");
}
