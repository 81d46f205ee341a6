/* Timing on the context's stream (CUDA events) and the card's measured
 * ceilings: the roofline against which benches state their figures. */
#include <cuda_bf16.h>

#include "choir/alloc.h"
#include "tensor/cuda/cuda_internal.h"

struct choir_cuda_timer {
    choir_cuda *cu;
    cudaEvent_t begin, end;
};

choir_cuda_timer *choir_cuda_timer_begin(choir_cuda *cu, choir_err *err) {
    choir_cuda_timer *t = (choir_cuda_timer *)choir_calloc(CHOIR_MEM_OTHER, 1, sizeof(*t));
    if (!t) {
        choir_err_set(err, CHOIR_ENOMEM, "cuda: out of host memory for a timer");
        return NULL;
    }
    t->cu = cu;
    cudaError_t st = cudaEventCreate(&t->begin);
    if (st == cudaSuccess) {
        st = cudaEventCreate(&t->end);
        if (st != cudaSuccess) {
            cudaEventDestroy(t->begin);
        }
    }
    if (st != cudaSuccess) {
        choir_cuda_fail(err, st, "event create");
        choir_free(t);
        return NULL;
    }
    if ((st = cudaEventRecord(t->begin, cu->stream)) != cudaSuccess) {
        choir_cuda_fail(err, st, "event record");
        choir_cuda_timer_free(t);
        return NULL;
    }
    return t;
}

double choir_cuda_timer_end_ms(choir_cuda_timer *t, choir_err *err) {
    float ms = 0.0f;
    cudaError_t st = cudaEventRecord(t->end, t->cu->stream);
    if (st == cudaSuccess) st = cudaEventSynchronize(t->end);
    if (st == cudaSuccess) st = cudaEventElapsedTime(&ms, t->begin, t->end);
    choir_cuda_timer_free(t);
    if (st != cudaSuccess) {
        choir_cuda_fail(err, st, "event timing");
        return -1.0;
    }
    return (double)ms;
}

void choir_cuda_timer_free(choir_cuda_timer *t) {
    if (!t) return;
    cudaEventDestroy(t->begin);
    cudaEventDestroy(t->end);
    choir_free(t);
}

/* Deterministic values in [-0.5, 0.5): the tensor cores' throughput does not
 * depend on the values much, but all-zero inputs are known to run faster
 * (less switching), so the ceiling is measured on noise. */
__global__ void fill_bf16_noise(__nv_bfloat16 *x, int64_t n, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = __float2bfloat16((float)(h & 0xFFFFFF) / 16777216.0f - 0.5f);
    }
}

/* Mean ms of `reps` calls of fn after `warm` untimed ones. */
template <typename F>
static double mean_ms(choir_cuda *cu, int warm, int reps, F fn, choir_err *err) {
    for (int i = 0; i < warm; i++)
        if (fn()) return -1.0;
    choir_cuda_timer *t = choir_cuda_timer_begin(cu, err);
    if (!t) return -1.0;
    for (int i = 0; i < reps; i++)
        if (fn()) {
            choir_cuda_timer_free(t);
            return -1.0;
        }
    double ms = choir_cuda_timer_end_ms(t, err);
    return ms < 0 ? ms : ms / reps;
}

/* Free device memory now, less a margin for the runtime. */
static size_t free_bytes(void) {
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return fr > ((size_t)256 << 20) ? fr - ((size_t)256 << 20) : 0;
}

static int measure_matmul(choir_cuda *cu, double *tflops, choir_err *err) {
    /* A and B bf16 n*n, C f32 n*n: 8 n^2 bytes; 8192 takes 512 MiB. */
    int64_t n = 8192;
    while (n > 1024 && (size_t)(8 * n * n) > free_bytes()) n /= 2;
    choir_cuda_buf a = {}, b = {}, c = {};
    int rc;
    if ((rc = choir_cuda_buf_alloc(cu, (size_t)(n * n * 2), &a, err)) ||
        (rc = choir_cuda_buf_alloc(cu, (size_t)(n * n * 2), &b, err)) ||
        (rc = choir_cuda_buf_alloc(cu, (size_t)(n * n * 4), &c, err)))
        goto done;
    fill_bf16_noise<<<choir_cuda_blocks(n * n, 256), 256, 0, cu->stream>>>((__nv_bfloat16 *)a.ptr,
                                                                           n * n, 17u);
    fill_bf16_noise<<<choir_cuda_blocks(n * n, 256), 256, 0, cu->stream>>>((__nv_bfloat16 *)b.ptr,
                                                                           n * n, 91u);
    if ((rc = choir_cuda_check_launch(err, "fill noise"))) goto done;
    {
        const uint16_t *A = (const uint16_t *)a.ptr, *B = (const uint16_t *)b.ptr;
        float *C = (float *)c.ptr;
        double ms = mean_ms(
            cu, 3, 10, [&] { return choir_cuda_gemm_bf16_nt(cu, n, n, n, A, B, C, err); }, err);
        if (ms <= 0) {
            rc = err && err->code ? err->code : CHOIR_EINTERNAL;
            goto done;
        }
        *tflops = 2.0 * (double)n * n * n / (ms * 1e-3) / 1e12;
    }
done:
    choir_cuda_buf_free(cu, &a);
    choir_cuda_buf_free(cu, &b);
    choir_cuda_buf_free(cu, &c);
    return rc;
}

static int measure_copy(choir_cuda *cu, double *gbs, choir_err *err) {
    size_t bytes = (size_t)2 << 30;
    while (bytes > ((size_t)64 << 20) && 2 * bytes > free_bytes()) bytes /= 2;
    choir_cuda_buf s = {}, d = {};
    int rc;
    if ((rc = choir_cuda_buf_alloc(cu, bytes, &s, err)) ||
        (rc = choir_cuda_buf_alloc(cu, bytes, &d, err)) ||
        (rc = choir_cuda_memset0(cu, &s, 0, bytes, err)))
        goto done;
    {
        double ms = mean_ms(
            cu, 2, 10,
            [&] {
                cudaError_t st =
                    cudaMemcpyAsync(d.ptr, s.ptr, bytes, cudaMemcpyDeviceToDevice, cu->stream);
                return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "device copy");
            },
            err);
        if (ms <= 0) {
            rc = err && err->code ? err->code : CHOIR_EINTERNAL;
            goto done;
        }
        /* Each byte is read once and written once. */
        *gbs = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
    }
done:
    choir_cuda_buf_free(cu, &s);
    choir_cuda_buf_free(cu, &d);
    return rc;
}

int choir_cuda_measure_ceilings(choir_cuda *cu, double *bf16_tflops, double *copy_gbs,
                                choir_err *err) {
    double tf = 0.0, gb = 0.0;
    int rc = measure_matmul(cu, &tf, err);
    if (!rc) rc = measure_copy(cu, &gb, err);
    if (rc) return rc;
    if (bf16_tflops) *bf16_tflops = tf;
    if (copy_gbs) *copy_gbs = gb;
    return 0;
}
