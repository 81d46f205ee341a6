/* The CUDA context: device selection, stream, cuBLAS handle, counted device
 * memory and weight upload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda_audio.h"
#include "choir/quant.h"
#include <cublasLt.h>
#include <cuda_profiler_api.h>

#include "tensor/cuda/cuda_internal.h"

int choir_cuda_fail(choir_err *err, cudaError_t st, const char *what) {
    /* A failed runtime call also leaves its error as the thread's last one:
     * take it, or the next launch check would report it again as its own. */
    (void)cudaGetLastError();
    int code = st == cudaErrorMemoryAllocation ? CHOIR_ENOMEM : CHOIR_EINTERNAL;
    return choir_err_set(err, code, "cuda: %s: %s (%s)", what, cudaGetErrorString(st),
                         cudaGetErrorName(st));
}

int choir_cuda_blas_fail(choir_err *err, cublasStatus_t st, const char *what) {
    return choir_err_set(err, CHOIR_EINTERNAL, "cublas: %s: %s", what, cublasGetStatusString(st));
}

int choir_cuda_check_launch(choir_err *err, const char *what) {
    cudaError_t st = cudaGetLastError();
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, what);
}

int choir_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" status */
        return 0;
    }
    return n;
}

int choir_cuda_device_props(int device, choir_cuda_props *out, choir_err *err) {
    int n = choir_cuda_device_count();
    if (device < 0 || device >= n)
        return choir_err_set(err, CHOIR_ENOTFOUND, "cuda: device %d not found (%d visible)", device, n);
    cudaDeviceProp p;
    cudaError_t st = cudaGetDeviceProperties(&p, device);
    if (st != cudaSuccess) return choir_cuda_fail(err, st, "cudaGetDeviceProperties");
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", p.name);
    out->device = device;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->total_bytes = (int64_t)p.totalGlobalMem;
    out->l2_bytes = p.l2CacheSize;
    out->smem_per_block_optin = (int64_t)p.sharedMemPerBlockOptin;
    /* clockRate fields moved to attributes in CUDA 13. */
    cudaDeviceGetAttribute(&out->mem_clock_khz, cudaDevAttrMemoryClockRate, device);
    cudaDeviceGetAttribute(&out->mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, device);
    return 0;
}

choir_cuda *choir_cuda_init(int device, choir_err *err) {
    choir_cuda *cu = NULL;
    cudaError_t st;
    cublasStatus_t bs;
    choir_cuda_props props;
    if (choir_cuda_device_props(device, &props, err) < 0) return NULL;
    cu = (choir_cuda *)choir_calloc(CHOIR_MEM_OTHER, 1, sizeof(*cu));
    if (!cu) {
        choir_err_set(err, CHOIR_ENOMEM, "cuda: out of host memory for the context");
        return NULL;
    }
    cu->props = props;
    choir_cuda_conv_set_prepass_bytes(cu, 0);
    {
        /* The prepass on unless "0": ran on an H100 on 7 Dec 2026 (the GPU checks
         * passing, its floats the fused path's bit for bit; batch-32 Snake units
         * 1.04-1.18x in f32, 1.02-1.33x in TF32, 1.34-2.06x in bf16). */
        const char *e = getenv("CHOIR_CONV_PREPASS");
        if (!e || strcmp(e, "0") != 0) cu->conv_opts |= CHOIR_CUDA_CONV_PREPASS;
        /* WIDE for bf16 weights unless "0" ("1": for TF32 too): Kokoro's 32
         * pieces, bf16 decoder, 0.78 -> 0.74 s on an H100 on 7 Dec 2026 (the
         * same floats; backend and kokoro checks passing with it on 7 Dec). */
        e = getenv("CHOIR_CONV_WIDE");
        if (e && !strcmp(e, "1")) cu->conv_opts |= CHOIR_CUDA_CONV_WIDE;
        else if (!e || strcmp(e, "0") != 0) cu->conv_opts |= CHOIR_CUDA_CONV_WIDE_BF16;
        if ((e = getenv("CHOIR_CONV_FAST_SIN")) && !strcmp(e, "1"))
            cu->conv_opts |= CHOIR_CUDA_CONV_FAST_SIN;
        /* The persistent LSTM on unless "0": ran on an H100 on 7 Dec 2026 (the
         * kokoro check passing, within 4.2e-7 of the CPU at 36 pieces). */
        const char *lp = getenv("CHOIR_KOKORO_LSTM_PERSIST");
        cu->lstm_persist = !(lp && lp[0] == '0' && !lp[1]);
    }
    if ((st = cudaSetDevice(device)) != cudaSuccess) {
        choir_cuda_fail(err, st, "cudaSetDevice");
        goto fail;
    }
    if ((st = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        choir_cuda_fail(err, st, "cudaStreamCreate");
        goto fail;
    }
    if ((bs = cublasCreate(&cu->blas)) != CUBLAS_STATUS_SUCCESS) {
        cu->blas = NULL;
        choir_cuda_blas_fail(err, bs, "cublasCreate");
        goto fail;
    }
    cublasSetStream(cu->blas, cu->stream);
    /* A workspace of our own (cuBLAS's recommended size on Hopper), so that
     * a product captured into a CUDA graph never asks the runtime for memory,
     * and captured and direct products pick the same algorithms. */
    if (choir_cuda_buf_alloc(cu, (size_t)32 << 20, &cu->blas_workspace, err)) goto fail;
    if ((bs = cublasSetWorkspace(cu->blas, cu->blas_workspace.ptr, cu->blas_workspace.bytes)) !=
        CUBLAS_STATUS_SUCCESS) {
        choir_cuda_blas_fail(err, bs, "cublasSetWorkspace");
        goto fail;
    }
    /* Chunk counters of the split-keys attention (its last chunk per row and
     * head combines the chunks), zero between calls: 4096 (row, head) pairs,
     * a batch of 32 decoder steps of a 20-head model 6 times over. */
    if (choir_cuda_buf_alloc(cu, 4096 * sizeof(int), &cu->attn_done, err)) goto fail;
    if ((st = cudaMemsetAsync(cu->attn_done.ptr, 0, cu->attn_done.bytes, cu->stream)) != cudaSuccess) {
        choir_cuda_fail(err, st, "clearing the attention counters");
        goto fail;
    }
    /* f32 products stay true f32 so that they match the CPU reference;
     * bf16/f16 products use the tensor cores through their own calls. */
    cublasSetMathMode(cu->blas, CUBLAS_DEFAULT_MATH);
    return cu;
fail:
    choir_cuda_free(cu);
    return NULL;
}

void choir_cuda_free(choir_cuda *cu) {
    if (!cu) return;
    if (cu->stream) cudaStreamSynchronize(cu->stream);
    choir_cuda_buf_free(cu, &cu->scratch);
    if (cu->blas) cublasDestroy(cu->blas);
    if (cu->lt) cublasLtDestroy((cublasLtHandle_t)cu->lt);
    choir_cuda_buf_free(cu, &cu->blas_workspace);
    choir_cuda_buf_free(cu, &cu->attn_done);
    if (cu->stream) cudaStreamDestroy(cu->stream);
    choir_free(cu);
}

const choir_cuda_props *choir_cuda_get_props(const choir_cuda *cu) { return &cu->props; }

int choir_cuda_set_tf32(choir_cuda *cu, bool on, choir_err *err) {
    cublasStatus_t st =
        cublasSetMathMode(cu->blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    if (st == CUBLAS_STATUS_SUCCESS) cu->tf32 = on;
    return st == CUBLAS_STATUS_SUCCESS ? 0 : choir_cuda_blas_fail(err, st, "set math mode");
}

int choir_cuda_make_current(choir_cuda *cu, choir_err *err) {
    cudaError_t st = cudaSetDevice(cu->props.device);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "cudaSetDevice");
}

void *choir_cuda_stream(choir_cuda *cu) { return (void *)cu->stream; }

void choir_cuda_profiler(bool on) {
    if (on) cudaProfilerStart();
    else cudaProfilerStop();
}

int choir_cuda_sync(choir_cuda *cu, choir_err *err) {
    cudaError_t st = cudaStreamSynchronize(cu->stream);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "stream synchronize");
}

/* --- memory accounting --------------------------------------------------- */

int64_t choir_cuda_mem_current(const choir_cuda *cu) {
    return __atomic_load_n(&cu->mem_current, __ATOMIC_RELAXED);
}

int64_t choir_cuda_mem_peak(const choir_cuda *cu) {
    return __atomic_load_n(&cu->mem_peak, __ATOMIC_RELAXED);
}

void choir_cuda_mem_reset_peak(choir_cuda *cu) {
    __atomic_store_n(&cu->mem_peak, choir_cuda_mem_current(cu), __ATOMIC_RELAXED);
}

void choir_cuda_set_budget(choir_cuda *cu, int64_t bytes) {
    __atomic_store_n(&cu->budget, bytes < 0 ? 0 : bytes, __ATOMIC_RELAXED);
}

/* Reserves before allocating, so two threads cannot both pass the cap. */
static int mem_reserve(choir_cuda *cu, int64_t bytes, choir_err *err) {
    int64_t cap = __atomic_load_n(&cu->budget, __ATOMIC_RELAXED);
    int64_t now = __atomic_add_fetch(&cu->mem_current, bytes, __ATOMIC_RELAXED);
    if (cap > 0 && now > cap) {
        __atomic_sub_fetch(&cu->mem_current, bytes, __ATOMIC_RELAXED);
        return choir_err_set(err, CHOIR_EBUSY,
                             "cuda: %lld bytes would pass the device budget (%lld of %lld held)",
                             (long long)bytes, (long long)(now - bytes), (long long)cap);
    }
    int64_t peak = __atomic_load_n(&cu->mem_peak, __ATOMIC_RELAXED);
    while (now > peak &&
           !__atomic_compare_exchange_n(&cu->mem_peak, &peak, now, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
    return 0;
}

int choir_cuda_buf_alloc(choir_cuda *cu, size_t bytes, choir_cuda_buf *out, choir_err *err) {
    out->ptr = NULL;
    out->bytes = 0;
    if (bytes == 0) return 0;
    int rc = mem_reserve(cu, (int64_t)bytes, err);
    if (rc) return rc;
    cudaError_t st = cudaMalloc(&out->ptr, bytes);
    if (st != cudaSuccess) {
        __atomic_sub_fetch(&cu->mem_current, (int64_t)bytes, __ATOMIC_RELAXED);
        out->ptr = NULL;
        return choir_cuda_fail(err, st, "cudaMalloc");
    }
    out->bytes = bytes;
    return 0;
}

void choir_cuda_buf_free(choir_cuda *cu, choir_cuda_buf *buf) {
    if (!buf || !buf->ptr) return;
    cudaFree(buf->ptr);
    __atomic_sub_fetch(&cu->mem_current, (int64_t)buf->bytes, __ATOMIC_RELAXED);
    buf->ptr = NULL;
    buf->bytes = 0;
}

static int range_ok(const choir_cuda_buf *b, size_t offset, size_t bytes, choir_err *err) {
    if (offset > b->bytes || bytes > b->bytes - offset)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: copy of %zu bytes at %zu passes the buffer's %zu bytes", bytes,
                             offset, b->bytes);
    return 0;
}

int choir_cuda_upload(choir_cuda *cu, choir_cuda_buf *dst, size_t offset, const void *src,
                      size_t bytes, choir_err *err) {
    int rc = range_ok(dst, offset, bytes, err);
    if (rc || bytes == 0) return rc;
    /* Pageable source: the runtime stages it, and the host memory may be
     * reused once the copy is ordered, which a stream sync guarantees. */
    cudaError_t st = cudaMemcpyAsync((char *)dst->ptr + offset, src, bytes,
                                     cudaMemcpyHostToDevice, cu->stream);
    if (st == cudaSuccess) st = cudaStreamSynchronize(cu->stream);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "upload");
}

int choir_cuda_download(choir_cuda *cu, void *dst, const choir_cuda_buf *src, size_t offset,
                        size_t bytes, choir_err *err) {
    int rc = range_ok(src, offset, bytes, err);
    if (rc || bytes == 0) return rc;
    cudaError_t st = cudaMemcpyAsync(dst, (const char *)src->ptr + offset, bytes,
                                     cudaMemcpyDeviceToHost, cu->stream);
    if (st == cudaSuccess) st = cudaStreamSynchronize(cu->stream);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "download");
}

int choir_cuda_upload_async(choir_cuda *cu, choir_cuda_buf *dst, size_t offset, const void *src,
                            size_t bytes, choir_err *err) {
    int rc = range_ok(dst, offset, bytes, err);
    if (rc || bytes == 0) return rc;
    cudaError_t st = cudaMemcpyAsync((char *)dst->ptr + offset, src, bytes,
                                     cudaMemcpyHostToDevice, cu->stream);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "upload");
}

int choir_cuda_download_async(choir_cuda *cu, void *dst, const choir_cuda_buf *src, size_t offset,
                              size_t bytes, choir_err *err) {
    int rc = range_ok(src, offset, bytes, err);
    if (rc || bytes == 0) return rc;
    cudaError_t st = cudaMemcpyAsync(dst, (const char *)src->ptr + offset, bytes,
                                     cudaMemcpyDeviceToHost, cu->stream);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "download");
}

/* --- pinned host memory ---------------------------------------------------- */

/* Each block starts with a header holding its size (for the counters), and
 * the caller's pointer follows it, 64 bytes in. */
#define HOST_HEADER 64

void *choir_cuda_host_alloc(choir_cuda *cu, size_t bytes, choir_err *err) {
    if (bytes == 0) return NULL;
    void *block = NULL;
    cudaError_t st = cudaMallocHost(&block, bytes + HOST_HEADER);
    if (st != cudaSuccess) {
        cudaGetLastError();
        choir_err_set(err, CHOIR_ENOMEM, "cuda: cudaMallocHost of %zu bytes: %s", bytes,
                      cudaGetErrorString(st));
        return NULL;
    }
    *(size_t *)block = bytes;
    int64_t now = __atomic_add_fetch(&cu->host_current, (int64_t)bytes, __ATOMIC_RELAXED);
    int64_t peak = __atomic_load_n(&cu->host_peak, __ATOMIC_RELAXED);
    while (now > peak &&
           !__atomic_compare_exchange_n(&cu->host_peak, &peak, now, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
    return (char *)block + HOST_HEADER;
}

void choir_cuda_host_free(choir_cuda *cu, void *p) {
    if (!p) return;
    void *block = (char *)p - HOST_HEADER;
    __atomic_sub_fetch(&cu->host_current, (int64_t) * (size_t *)block, __ATOMIC_RELAXED);
    cudaFreeHost(block);
}

int64_t choir_cuda_host_mem_current(const choir_cuda *cu) {
    return __atomic_load_n(&cu->host_current, __ATOMIC_RELAXED);
}

int64_t choir_cuda_host_mem_peak(const choir_cuda *cu) {
    return __atomic_load_n(&cu->host_peak, __ATOMIC_RELAXED);
}

int choir_cuda_memset0(choir_cuda *cu, choir_cuda_buf *buf, size_t offset, size_t bytes,
                       choir_err *err) {
    int rc = range_ok(buf, offset, bytes, err);
    if (rc || bytes == 0) return rc;
    cudaError_t st = cudaMemsetAsync((char *)buf->ptr + offset, 0, bytes, cu->stream);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "memset");
}

void *choir_cuda_scratch(choir_cuda *cu, size_t bytes, choir_err *err) {
    if (cu->scratch.bytes >= bytes && cu->scratch.ptr) return cu->scratch.ptr;
    if (__atomic_load_n(&cu->live_graphs, __ATOMIC_RELAXED) > 0) {
        choir_err_set(err, CHOIR_EBUSY,
                      "cuda: scratch must grow to %zu bytes but %d CUDA graph(s) hold its address "
                      "(reserve it with choir_cuda_scratch_reserve before capturing)",
                      bytes, cu->live_graphs);
        return NULL;
    }
    /* Earlier kernels may still read the old scratch; cudaFree waits for
     * the device, so growing is safe (and rare: sizes settle quickly). */
    choir_cuda_buf_free(cu, &cu->scratch);
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    if (choir_cuda_buf_alloc(cu, want, &cu->scratch, err)) return NULL;
    return cu->scratch.ptr;
}

int choir_cuda_scratch_reserve(choir_cuda *cu, size_t bytes, choir_err *err) {
    return choir_cuda_scratch(cu, bytes, err) ? 0 : (err ? err->code : CHOIR_ENOMEM);
}

/* --- weights ------------------------------------------------------------- */

size_t choir_cuda_weight_bytes(const choir_cuda_weight *w) {
    return w->data.bytes + w->scales.bytes + w->biases.bytes;
}

void choir_cuda_weight_free(choir_cuda *cu, choir_cuda_weight *w) {
    if (!w) return;
    choir_cuda_buf_free(cu, &w->data);
    choir_cuda_buf_free(cu, &w->scales);
    choir_cuda_buf_free(cu, &w->biases);
    memset(w, 0, sizeof(*w));
}

static int upload_new(choir_cuda *cu, const void *src, size_t bytes, choir_cuda_buf *dst,
                      choir_err *err) {
    int rc = choir_cuda_buf_alloc(cu, bytes, dst, err);
    if (rc) return rc;
    return choir_cuda_upload(cu, dst, 0, src, bytes, err);
}

int choir_cuda_weight_upload(choir_cuda *cu, const choir_weight *w, choir_cuda_weight *out,
                             choir_err *err) {
    int rc;
    memset(out, 0, sizeof(*out));
    if (w->rows <= 0 || w->cols <= 0 || !w->data)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: empty weight [%lld, %lld]",
                             (long long)w->rows, (long long)w->cols);
    out->kind = w->kind;
    out->rows = w->rows;
    out->cols = w->cols;
    if (w->kind == CHOIR_WEIGHT_QUANT) {
        if (!choir_quant_supported(w->bits, w->group_size) || w->cols % 32 ||
            w->cols % w->group_size)
            return choir_err_set(err, CHOIR_EUNSUPPORTED,
                                 "cuda: quantized weight %d-bit group %d with %lld columns is not "
                                 "supported (columns must be a multiple of 32 and of the group)",
                                 w->bits, w->group_size, (long long)w->cols);
        if (w->sb_dtype != CHOIR_DTYPE_F32 && w->sb_dtype != CHOIR_DTYPE_F16 &&
            w->sb_dtype != CHOIR_DTYPE_BF16)
            return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: scales in %s not supported",
                                 choir_dtype_name(w->sb_dtype));
        out->sb_dtype = w->sb_dtype;
        out->bits = w->bits;
        out->group_size = w->group_size;
        size_t sb = (size_t)(w->rows * (w->cols / w->group_size)) * choir_dtype_size(w->sb_dtype);
        /* cols is a multiple of 32, so rows are whole words. */
        size_t packed = (size_t)(w->rows * (w->cols / 32) * w->bits) * 4;
        if ((rc = upload_new(cu, w->data, packed, &out->data, err)) ||
            (rc = upload_new(cu, w->scales, sb, &out->scales, err)) ||
            (rc = upload_new(cu, w->biases, sb, &out->biases, err)))
            goto fail;
        return 0;
    }
    rc = upload_new(cu, w->data, choir_weight_bytes(w), &out->data, err);
    if (rc) goto fail;
    return 0;
fail:
    choir_cuda_weight_free(cu, out);
    return rc;
}

int choir_cuda_weight_upload_as(choir_cuda *cu, const choir_weight *w, choir_weight_kind to,
                                choir_cuda_weight *out, choir_err *err) {
    memset(out, 0, sizeof(*out));
    if (w->kind != CHOIR_WEIGHT_F32 || (to != CHOIR_WEIGHT_BF16 && to != CHOIR_WEIGHT_F16))
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "cuda: weight conversion only from f32 to bf16 or f16");
    int64_t n = w->rows * w->cols;
    uint16_t *half = (uint16_t *)choir_alloc(CHOIR_MEM_OTHER, (size_t)n * 2);
    if (!half) return choir_err_set(err, CHOIR_ENOMEM, "cuda: no host memory to convert weight");
    if (to == CHOIR_WEIGHT_BF16)
        choir_f32_to_bf16_n((const float *)w->data, half, n);
    else
        choir_f32_to_f16_n((const float *)w->data, half, n);
    out->kind = to;
    out->rows = w->rows;
    out->cols = w->cols;
    int rc = upload_new(cu, half, (size_t)n * 2, &out->data, err);
    choir_free(half);
    if (rc) choir_cuda_weight_free(cu, out);
    return rc;
}

/* --- CUDA graphs ----------------------------------------------------------- */

struct choir_cuda_graph {
    choir_cuda *cu;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

int choir_cuda_graph_begin(choir_cuda *cu, choir_err *err) {
    /* Thread-local mode: other threads may keep using the runtime (e.g.
     * freeing buffers of another context) while this stream records. */
    cudaError_t st = cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeThreadLocal);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "begin capture");
}

choir_cuda_graph *choir_cuda_graph_end(choir_cuda *cu, choir_err *err) {
    cudaGraph_t graph = NULL;
    cudaError_t st = cudaStreamEndCapture(cu->stream, &graph);
    if (st != cudaSuccess) {
        choir_cuda_fail(err, st, "end capture");
        cudaGetLastError();
        return NULL;
    }
    choir_cuda_graph *g = (choir_cuda_graph *)choir_calloc(CHOIR_MEM_OTHER, 1, sizeof(*g));
    if (!g) {
        cudaGraphDestroy(graph);
        choir_err_set(err, CHOIR_ENOMEM, "cuda: out of host memory for a graph");
        return NULL;
    }
    g->graph = graph;
    g->cu = cu;
    __atomic_add_fetch(&cu->live_graphs, 1, __ATOMIC_RELAXED);
    st = cudaGraphInstantiate(&g->exec, graph, 0);
    if (st != cudaSuccess) {
        choir_cuda_fail(err, st, "instantiate graph");
        g->exec = NULL;
        choir_cuda_graph_free(g);
        return NULL;
    }
    return g;
}

int choir_cuda_graph_launch(choir_cuda *cu, choir_cuda_graph *g, choir_err *err) {
    cudaError_t st = cudaGraphLaunch(g->exec, cu->stream);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "graph launch");
}

void choir_cuda_graph_free(choir_cuda_graph *g) {
    if (!g) return;
    __atomic_sub_fetch(&g->cu->live_graphs, 1, __ATOMIC_RELAXED);
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    choir_free(g);
}
