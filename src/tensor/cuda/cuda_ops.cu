/* Kernels behind the backend operations (choir/backend.h) that the Whisper
 * and Kokoro kernels did not already provide: products and activations of
 * elements, RMS and group norm, rotary embeddings, embedding rows and
 * strided row copies. Each has the semantics of the backend's CPU version
 * (src/tensor/backend/), which tests/cuda/cuda_check.c holds it to. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/cuda/cuda_internal.h"

#define OPS_THREADS 256

#define GRID_STRIDE(i, n)                                                                  \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

/* --- elementwise --------------------------------------------------------- */

__global__ void k_mul(const float *a, const float *b, float *y, int64_t n) {
    GRID_STRIDE(i, n) y[i] = a[i] * b[i];
}

__global__ void k_scale(float *x, float s, int64_t n) {
    GRID_STRIDE(i, n) x[i] *= s;
}

/* act: 2 silu, 3 relu, 4 sigmoid, 5 tanh (choir_act). */
__global__ void k_act(float *x, int64_t n, int act) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        switch (act) {
        case 2: v = v / (1.0f + expf(-v)); break;
        case 3: v = v > 0.0f ? v : 0.0f; break;
        case 4: v = 1.0f / (1.0f + expf(-v)); break;
        default: v = tanhf(v); break;
        }
        x[i] = v;
    }
}

int choir_cuda_mul(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                   choir_err *err) {
    if (n <= 0) return 0;
    k_mul<<<choir_cuda_blocks(n, OPS_THREADS), OPS_THREADS, 0, cu->stream>>>(a, b, y, n);
    return choir_cuda_check_launch(err, "mul");
}

/* k_act's SiLU, then k_mul's product: the same two roundings. */
__global__ void k_swiglu(float *g, const float *u, int64_t n) {
    /* choir_cuda_pdl: the product after may start its loads; launched so
     * itself, the kernel before has finished (both no-ops otherwise). */
    cuda_pdl_begin();
    GRID_STRIDE(i, n) {
        float v = g[i];
        v = v / (1.0f + expf(-v));
        g[i] = v * u[i];
    }
}

int choir_cuda_swiglu(choir_cuda *cu, float *gate, const float *up, int64_t n, choir_err *err) {
    if (n <= 0) return 0;
    choir_cuda_launch_pdl(choir_cuda_pdl_mode(cu) > 0, k_swiglu,
                          dim3((unsigned)choir_cuda_blocks(n, OPS_THREADS)), dim3(OPS_THREADS), 0, cu->stream, gate,
                          up, n);
    return choir_cuda_check_launch(err, "swiglu");
}

/* k_swiglu's floats, each rounded to bf16 into y (not in place: y is the
 * bf16 input of the product after it), four values a thread. */
__global__ void k_swiglu_bf16(const float4 *__restrict__ g, const float4 *__restrict__ u,
                              __nv_bfloat162 *__restrict__ y, int64_t n4) {
    GRID_STRIDE(i, n4) {
        float4 a = g[i], b = u[i];
        a.x = a.x / (1.0f + expf(-a.x));
        a.y = a.y / (1.0f + expf(-a.y));
        a.z = a.z / (1.0f + expf(-a.z));
        a.w = a.w / (1.0f + expf(-a.w));
        y[2 * i] = __floats2bfloat162_rn(a.x * b.x, a.y * b.y);
        y[2 * i + 1] = __floats2bfloat162_rn(a.z * b.z, a.w * b.w);
    }
}

__global__ void k_swiglu_bf16_tail(const float *__restrict__ g, const float *__restrict__ u,
                                   __nv_bfloat16 *__restrict__ y, int64_t from, int64_t n) {
    GRID_STRIDE(j, n - from) {
        int64_t i = from + j;
        float v = g[i];
        v = v / (1.0f + expf(-v));
        y[i] = __float2bfloat16_rn(v * u[i]);
    }
}

/* g[i] = bf16(SiLU(g[i]) u[i]) over bf16 g and u (each widened; the f32
 * arithmetic of k_swiglu), in place, eight values a thread where aligned. */
__global__ void k_swiglu_bf16_rows(uint4 *__restrict__ g, const uint4 *__restrict__ u, int64_t n8) {
    GRID_STRIDE(i, n8) {
        g[i] = cuda_swiglu8(g[i], u[i]);
    }
}

__global__ void k_swiglu_bf16_rows_tail(__nv_bfloat16 *__restrict__ g, const __nv_bfloat16 *__restrict__ u,
                                        int64_t from, int64_t n) {
    GRID_STRIDE(j, n - from) {
        int64_t i = from + j;
        float v = __bfloat162float(g[i]);
        v = v / (1.0f + expf(-v));
        g[i] = __float2bfloat16_rn(v * __bfloat162float(u[i]));
    }
}

int choir_cuda_swiglu_bf16_rows(choir_cuda *cu, uint16_t *gate, const uint16_t *up, int64_t n, choir_err *err) {
    if (n <= 0) return 0;
    int64_t n8 = ((uintptr_t)gate | (uintptr_t)up) & 15 ? 0 : n / 8;
    if (n8)
        k_swiglu_bf16_rows<<<choir_cuda_blocks(n8, OPS_THREADS), OPS_THREADS, 0, cu->stream>>>(
            (uint4 *)gate, (const uint4 *)up, n8);
    if (8 * n8 < n)
        k_swiglu_bf16_rows_tail<<<choir_cuda_blocks(n - 8 * n8, OPS_THREADS), OPS_THREADS, 0, cu->stream>>>(
            (__nv_bfloat16 *)gate, (const __nv_bfloat16 *)up, 8 * n8, n);
    return choir_cuda_check_launch(err, "swiglu over bf16 rows");
}

int choir_cuda_swiglu_bf16(choir_cuda *cu, const float *gate, const float *up, uint16_t *y, int64_t n,
                           choir_err *err) {
    if (n <= 0) return 0;
    bool vec = !(((uintptr_t)gate | (uintptr_t)up) & 15) && !((uintptr_t)y & 7);
    int64_t n4 = vec ? n / 4 : 0;
    if (n4)
        k_swiglu_bf16<<<choir_cuda_blocks(n4, OPS_THREADS), OPS_THREADS, 0, cu->stream>>>(
            (const float4 *)gate, (const float4 *)up, (__nv_bfloat162 *)y, n4);
    if (4 * n4 < n)
        k_swiglu_bf16_tail<<<choir_cuda_blocks(n - 4 * n4, OPS_THREADS), OPS_THREADS, 0, cu->stream>>>(
            gate, up, (__nv_bfloat16 *)y, 4 * n4, n);
    return choir_cuda_check_launch(err, "swiglu into bf16 rows");
}

int choir_cuda_scale(choir_cuda *cu, float *x, float s, int64_t n, choir_err *err) {
    if (n <= 0) return 0;
    k_scale<<<choir_cuda_blocks(n, OPS_THREADS), OPS_THREADS, 0, cu->stream>>>(x, s, n);
    return choir_cuda_check_launch(err, "scale");
}

int choir_cuda_act(choir_cuda *cu, int act, float *x, int64_t n, choir_err *err) {
    if (act < 2 || act > 5)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: activation %d", act);
    if (n <= 0) return 0;
    k_act<<<choir_cuda_blocks(n, OPS_THREADS), OPS_THREADS, 0, cu->stream>>>(x, n, act);
    return choir_cuda_check_launch(err, "activation");
}

/* --- reductions ------------------------------------------------------------ */

/* One block per row (cuda_rms_row's floats). A row of at most RMS_CACHE
 * values a thread is loaded at once into registers and read from there
 * twice: cuda_rms_row's loop waits for each of a thread's loads in turn
 * before its add, which made a batched decode step's norms (8 rows of
 * 3584, 8 blocks) ~13 us each on an H100, 0.77 of its ~9 ms. The sums
 * take the same values in the same order, so the floats do not change. */
#define RMS_CACHE 16
__global__ void k_rms_norm(const float *x, float *y, int64_t dim, const float *gamma, float eps, int cache) {
    cuda_pdl_trigger(); /* the product after may start (choir_cuda_pdl) */
    __shared__ double red[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *out = y + (int64_t)blockIdx.x * dim;
    const int64_t bd = blockDim.x;
    if (!cache || dim > RMS_CACHE * bd) {
        cuda_rms_row(xr, dim, eps, red, gamma, out);
        return;
    }
    float v[RMS_CACHE];
#pragma unroll
    for (int j = 0; j < RMS_CACHE; j++) {
        const int64_t i = threadIdx.x + j * bd;
        v[j] = i < dim ? xr[i] : 0.0f;
    }
    double ss = 0;
#pragma unroll
    for (int j = 0; j < RMS_CACHE; j++)
        if (threadIdx.x + j * bd < dim) ss += (double)v[j] * v[j];
    const float inv = (float)(1.0 / sqrt(cuda_block_sum_d(ss, red) / (double)dim + (double)eps));
#pragma unroll
    for (int j = 0; j < RMS_CACHE; j++) {
        const int64_t i = threadIdx.x + j * bd;
        if (i < dim) out[i] = __fmul_rn(__fmul_rn(v[j], inv), gamma ? gamma[i] : 1.0f);
    }
}

/* One warp per row (cuda_rms_row_warp), OPS_THREADS / 32 rows a block. */
__global__ void k_rms_norm_warp(const float *x, float *y, int64_t rows, int64_t dim, const float *gamma,
                                float eps) {
    cuda_pdl_trigger(); /* the product after may start (choir_cuda_pdl) */
    const int64_t r = (int64_t)blockIdx.x * (OPS_THREADS / 32) + (threadIdx.x >> 5);
    if (r < rows) cuda_rms_row_warp(x + r * dim, dim, eps, gamma, y + r * dim);
}

/* k_rms_norm's register-cached rows (on unless CHOIR_CUDA_RMS_CACHE=0,
 * read once; H100, 7 Dec 2026: with the skinny kernel's accumulating
 * products, VibeVoice 7B's 8-row greedy step 8.23 -> 8.13 ms): -1 until
 * read or set. */
static int g_rms_cache = -1;
void choir_cuda_rms_cache_set(int on) {
    if (on < 0) {
        const char *e = getenv("CHOIR_CUDA_RMS_CACHE");
        on = !(e && *e && atoi(e) == 0);
    }
    __atomic_store_n(&g_rms_cache, on != 0, __ATOMIC_RELAXED);
}
bool choir_cuda_rms_cache_on(void) {
    if (__atomic_load_n(&g_rms_cache, __ATOMIC_RELAXED) < 0) choir_cuda_rms_cache_set(-1);
    return __atomic_load_n(&g_rms_cache, __ATOMIC_RELAXED) == 1;
}

int choir_cuda_rms_norm(choir_cuda *cu, const float *x, float *y, int64_t rows, int64_t dim,
                        const float *gamma, float eps, choir_err *err) {
    if (rows <= 0 || dim <= 0) return 0;
    if (rows > INT32_MAX) return choir_err_set(err, CHOIR_ETOOBIG, "cuda: rms norm rows");
    if (dim <= CUDA_RMS_WARP_MAX) {
        const int64_t per = OPS_THREADS / 32;
        k_rms_norm_warp<<<(unsigned)((rows + per - 1) / per), OPS_THREADS, 0, cu->stream>>>(x, y, rows, dim,
                                                                                            gamma, eps);
    } else {
        k_rms_norm<<<(unsigned)rows, OPS_THREADS, 0, cu->stream>>>(x, y, dim, gamma, eps,
                                                                  choir_cuda_rms_cache_on());
    }
    return choir_cuda_check_launch(err, "rms norm");
}

/* The rows of k_rms_norm_warp / k_rms_norm (the same floats: the sum of
 * squares in double by the warp's lanes or the block's threads, the same
 * two roundings a value), each value rounded to bf16 as it is written: the
 * FFN input of VibeVoice's encoder blocks without an f32 row and a
 * conversion pass. */
__global__ void k_rms_norm_bf16_warp(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y, int64_t rows,
                                     int64_t dim, const float *__restrict__ gamma, float eps) {
    const int64_t r = (int64_t)blockIdx.x * (OPS_THREADS / 32) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int lane = threadIdx.x & 31;
    const float *xr = x + r * dim;
    double ss = 0;
    for (int64_t i = lane; i < dim; i += 32) ss += (double)xr[i] * xr[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int64_t i = lane; i < dim; i += 32)
        y[r * dim + i] = __float2bfloat16_rn(__fmul_rn(__fmul_rn(xr[i], inv), gamma ? gamma[i] : 1.0f));
}

__global__ void k_rms_norm_bf16(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y, int64_t dim,
                                const float *__restrict__ gamma, float eps) {
    __shared__ double red[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xr[i] * xr[i];
    float inv = (float)(1.0 / sqrt(cuda_block_sum_d(ss, red) / (double)dim + (double)eps));
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        y[(int64_t)blockIdx.x * dim + i] =
            __float2bfloat16_rn(__fmul_rn(__fmul_rn(xr[i], inv), gamma ? gamma[i] : 1.0f));
}

int choir_cuda_rms_norm_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t rows, int64_t dim,
                             const float *gamma, float eps, choir_err *err) {
    if (rows <= 0 || dim <= 0) return 0;
    if (rows > INT32_MAX) return choir_err_set(err, CHOIR_ETOOBIG, "cuda: rms norm rows");
    __nv_bfloat16 *yb = (__nv_bfloat16 *)y;
    if (dim <= CUDA_RMS_WARP_MAX) {
        const int64_t per = OPS_THREADS / 32;
        k_rms_norm_bf16_warp<<<(unsigned)((rows + per - 1) / per), OPS_THREADS, 0, cu->stream>>>(x, yb, rows, dim,
                                                                                                 gamma, eps);
    } else {
        k_rms_norm_bf16<<<(unsigned)rows, OPS_THREADS, 0, cu->stream>>>(x, yb, dim, gamma, eps);
    }
    return choir_cuda_check_launch(err, "rms norm into bf16 rows");
}

/* One block per (item, group): mean, then the centred sum of squares, in
 * double; then the channels' affines. */
__global__ void k_group_norm(const float *x, float *y, int64_t C, int64_t T, int64_t groups,
                             const float *gamma, const float *beta, float eps) {
    __shared__ double red[32];
    int64_t b = blockIdx.x / groups, g = blockIdx.x % groups, cg = C / groups, n = cg * T;
    const float *xg = x + (b * C + g * cg) * T;
    float *yg = y + (b * C + g * cg) * T;
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xg[i];
    double mean = n > 0 ? cuda_block_sum_d(s, red) / (double)n : 0.0;
    double q = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double d = (double)xg[i] - mean;
        q += d * d;
    }
    double var = n > 0 ? cuda_block_sum_d(q, red) / (double)n : 0.0;
    float inv = (float)(1.0 / sqrt(var + (double)eps)), fm = (float)mean;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        int64_t c = g * cg + i / T;
        float ga = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
        yg[i] = ((xg[i] - fm) * inv) * ga + be;
    }
}

int choir_cuda_group_norm(choir_cuda *cu, const float *x, float *y, int64_t B, int64_t C,
                          int64_t T, int64_t groups, const float *gamma, const float *beta,
                          float eps, choir_err *err) {
    if (groups <= 0 || C % groups)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: group norm of %lld channels in %lld groups",
                             (long long)C, (long long)groups);
    if (B <= 0 || T <= 0) return 0;
    if (B * groups > INT32_MAX) return choir_err_set(err, CHOIR_ETOOBIG, "cuda: group norm");
    k_group_norm<<<(unsigned)(B * groups), OPS_THREADS, 0, cu->stream>>>(x, y, C, T, groups, gamma,
                                                                       beta, eps);
    return choir_cuda_check_launch(err, "group norm");
}

/* --- rotary embeddings --------------------------------------------------------- */

/* One thread per (row, pair); the pair's angle is computed once and applied
 * to every head. */
__global__ void k_rope(float *x, int64_t rows, int64_t ld, int n_head, int64_t Dh, int64_t half,
                       const int32_t *pos, float theta, int interleaved) {
    GRID_STRIDE(t, rows * half) {
        int64_t r = t / half, i = t % half;
        float inv_freq = (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)(2 * half)));
        float ang = (float)pos[r] * inv_freq;
        float cs = cosf(ang), sn = sinf(ang);
        int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
        for (int h = 0; h < n_head; h++) {
            float *xh = x + r * ld + (int64_t)h * Dh;
            float a = xh[i0], b = xh[i1];
            xh[i0] = a * cs - b * sn;
            xh[i1] = b * cs + a * sn;
        }
    }
}

/* The same rotation a block per row (striding over rows): the row's half
 * angles computed once into shared memory (threads 0 .. half - 1), then the
 * block's threads over every (head, pair) of the row, so a decode step's
 * single row is spread over the block instead of one thread a pair walking
 * the heads (ncu on an H100: k_rope took 10 us a launch in VibeVoice's step,
 * 56 launches). Each value gets k_rope's floats. The default since it ran on
 * an H100 (6 Dec 2026, late: bit for bit k_rope's in the backend check, VibeVoice 7B's
 * graph step 7.07-7.11 -> 6.95-6.96 ms at 10 minutes, 9.00 -> 8.88-8.91 at 60);
 * choir_cuda_rope_rows(false) or CHOIR_ROPE_ROWS=0 goes back to k_rope. */
#define ROPE_THREADS 256
#define ROPE_MAX_HALF 512
__global__ void __launch_bounds__(ROPE_THREADS)
    k_rope_rows(float *x, int64_t rows, int64_t ld, int n_head, int64_t Dh, int64_t half, const int32_t *pos,
                float theta, int interleaved) {
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        __syncthreads(); /* the last row's angles are read */
        cuda_rope_angles(cs, sn, half, pos[r], theta);
        __syncthreads();
        for (int64_t t = threadIdx.x; t < (int64_t)n_head * half; t += blockDim.x) {
            int64_t h = t / half, i = t % half;
            int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
            float *xh = x + r * ld + h * Dh;
            float a = xh[i0], b = xh[i1];
            xh[i0] = a * cs[i] - b * sn[i];
            xh[i1] = b * cs[i] + a * sn[i];
        }
    }
}

/* 0: not yet read from CHOIR_ROPE_ROWS (on unless "0"); 1 off; 2 on. */
static int g_rope_rows = 0;
void choir_cuda_rope_rows(bool on) { __atomic_store_n(&g_rope_rows, on ? 2 : 1, __ATOMIC_RELAXED); }
static bool rope_rows_on(void) {
    int v = __atomic_load_n(&g_rope_rows, __ATOMIC_RELAXED);
    if (!v) {
        const char *e = getenv("CHOIR_ROPE_ROWS");
        v = e && strcmp(e, "0") == 0 ? 1 : 2;
        __atomic_store_n(&g_rope_rows, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

int choir_cuda_rope(choir_cuda *cu, float *x, int64_t rows, int64_t ld, int n_head, int64_t Dh,
                    int64_t rot_dims, const int32_t *pos, float theta, bool interleaved,
                    choir_err *err) {
    if (rot_dims <= 0 || rot_dims > Dh || rot_dims % 2)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: rope over %lld of %lld values",
                             (long long)rot_dims, (long long)Dh);
    int64_t half = rot_dims / 2;
    if (rows <= 0) return 0;
    if (rope_rows_on() && half <= ROPE_MAX_HALF) {
        unsigned blocks = (unsigned)(rows < 65535 ? rows : 65535);
        k_rope_rows<<<blocks, ROPE_THREADS, 0, cu->stream>>>(x, rows, ld, n_head, Dh, half, pos, theta,
                                                            interleaved ? 1 : 0);
    } else {
        k_rope<<<choir_cuda_blocks(rows * half, OPS_THREADS), OPS_THREADS, 0, cu->stream>>>(
            x, rows, ld, n_head, Dh, half, pos, theta, interleaved ? 1 : 0);
    }
    return choir_cuda_check_launch(err, "rope");
}

/* --- embedding rows and strided copies -------------------------------------------- */

/* kind: 0 f32, 1 f16, 2 bf16. Ids outside the table give zeros (the host
 * side cannot check values that live on the device). */
__global__ void k_gather(const void *W, int kind, int64_t rows, int64_t cols, const int32_t *ids,
                         int64_t n, float *out) {
    GRID_STRIDE(t, n * cols) {
        int64_t r = t / cols, c = t % cols;
        int64_t id = ids[r];
        float v = 0.0f;
        if (id >= 0 && id < rows) {
            int64_t at = id * cols + c;
            if (kind == 0) v = ((const float *)W)[at];
            else if (kind == 1) v = __half2float(((const __half *)W)[at]);
            else v = __bfloat162float(((const __nv_bfloat16 *)W)[at]);
        }
        out[t] = v;
    }
}

int choir_cuda_rows_gather(choir_cuda *cu, const choir_cuda_weight *W, const int32_t *ids,
                           int64_t n, float *out, choir_err *err) {
    int kind = W->kind == CHOIR_WEIGHT_F32 ? 0 : W->kind == CHOIR_WEIGHT_F16 ? 1
             : W->kind == CHOIR_WEIGHT_BF16 ? 2 : -1;
    if (kind < 0) return choir_cuda_rows_gather_quant(cu, W, ids, n, out, err);
    if (n <= 0 || W->cols <= 0) return 0;
    k_gather<<<choir_cuda_blocks(n * W->cols, OPS_THREADS), OPS_THREADS, 0, cu->stream>>>(
        W->data.ptr, kind, W->rows, W->cols, ids, n, out);
    return choir_cuda_check_launch(err, "rows gather");
}

int choir_cuda_copy_rows(choir_cuda *cu, float *dst, int64_t ldd, const float *src, int64_t lds,
                         int64_t rows, int64_t cols, choir_err *err) {
    if (rows <= 0 || cols <= 0) return 0;
    cudaError_t st = cudaMemcpy2DAsync(dst, (size_t)ldd * sizeof(float), src,
                                       (size_t)lds * sizeof(float), (size_t)cols * sizeof(float),
                                       (size_t)rows, cudaMemcpyDeviceToDevice, cu->stream);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "copy rows");
}

/* --- greedy selection ----------------------------------------------------- */

#define ARGMAX_THREADS 1024

/* (value, index) pairs: a NaN never enters (index -1 = none yet); the larger
 * value wins, on a tie the lower index (the host loop keeps the first). */
__device__ __forceinline__ void am_take(float &bv, int &bi, float v, int i) {
    if (i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi))) bv = v, bi = i;
}

/* One block per row: each thread scans its share in increasing index order
 * (float4 loads when the rows allow), then a warp and a block reduction. */
__global__ void __launch_bounds__(ARGMAX_THREADS)
k_argmax_rows(const float *__restrict__ x, int64_t cols, int vec4, int32_t *__restrict__ out) {
    const float *row = x + (int64_t)blockIdx.x * cols;
    float bv = 0.0f;
    int bi = -1;
    if (vec4) {
        const float4 *r4 = (const float4 *)row;
        int64_t n4 = cols / 4;
        for (int64_t j = threadIdx.x; j < n4; j += ARGMAX_THREADS) {
            float4 v = __ldg(r4 + j);
            int i = (int)(4 * j);
            if (!isnan(v.x)) am_take(bv, bi, v.x, i);
            if (!isnan(v.y)) am_take(bv, bi, v.y, i + 1);
            if (!isnan(v.z)) am_take(bv, bi, v.z, i + 2);
            if (!isnan(v.w)) am_take(bv, bi, v.w, i + 3);
        }
    } else {
        for (int64_t j = threadIdx.x; j < cols; j += ARGMAX_THREADS) {
            float v = row[j];
            if (!isnan(v)) am_take(bv, bi, v, (int)j);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_down_sync(0xffffffffu, bv, o);
        int i2 = __shfl_down_sync(0xffffffffu, bi, o);
        am_take(bv, bi, v2, i2);
    }
    __shared__ float sv[ARGMAX_THREADS / 32];
    __shared__ int si[ARGMAX_THREADS / 32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sv[w] = bv, si[w] = bi;
    __syncthreads();
    if (w == 0) {
        bv = sv[lane];
        bi = si[lane];
        for (int o = 16; o > 0; o >>= 1) {
            float v2 = __shfl_down_sync(0xffffffffu, bv, o);
            int i2 = __shfl_down_sync(0xffffffffu, bi, o);
            am_take(bv, bi, v2, i2);
        }
        if (lane == 0) out[blockIdx.x] = isnan(row[0]) || bi < 0 ? 0 : bi;
    }
}

int choir_cuda_argmax_rows(choir_cuda *cu, const float *x, int64_t rows, int64_t cols, int32_t *out,
                           choir_err *err) {
    if (cols <= 0 || cols > INT32_MAX || rows > INT32_MAX)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: argmax over %lld rows of %lld", (long long)rows,
                             (long long)cols);
    if (rows <= 0) return 0;
    int vec4 = cols % 4 == 0 && ((uintptr_t)x & 15) == 0;
    k_argmax_rows<<<(unsigned)rows, ARGMAX_THREADS, 0, cu->stream>>>(x, cols, vec4, out);
    return choir_cuda_check_launch(err, "argmax_rows");
}
