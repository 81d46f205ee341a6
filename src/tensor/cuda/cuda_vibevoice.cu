/* Kernels behind VibeVoice-ASR's backend operations (choir/backend_vibevoice.h),
 * with the semantics of their CPU versions in src/tensor/backend/op_vibevoice.c:
 * the stem and depthwise causal convolutions over time-major rows, the
 * layer-scaled residual, and a flash-style causal GQA attention over a KV
 * cache. Plain, correct kernels first (tests/cuda/vibevoice_gpu_check.c holds
 * them to the CPU); the attention keeps one query row per block and walks the
 * keys in tiles with an online softmax, so it needs no scratch at any
 * context length. */
#include <math.h>

#include "tensor/cuda/cuda_internal.h"
#include "tensor/cuda/cuda_vibevoice.h"

#define VV_THREADS 256
#define VV_ATT_THREADS 128
#define VV_ATT_MAX_D 256

#define GRID_STRIDE(i, n)                                                                  \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_vv_conv_stem(const float *in, int64_t T, const float *taps, const float *bias,
                               int64_t cout, int kernel, float *out) {
    GRID_STRIDE(i, T * cout) {
        int64_t t = i / cout, c = i % cout;
        float a = bias ? bias[c] : 0.0f;
        for (int k = 0; k < kernel; k++) a += taps[(int64_t)k * cout + c] * in[t + k];
        out[i] = a;
    }
}

__global__ void k_vv_dwconv(const float *in, int64_t T, int64_t C, int kernel, const float *w,
                            const float *b, float *out) {
    GRID_STRIDE(i, T * C) {
        int64_t t = i / C, c = i % C;
        float a = b ? b[c] : 0.0f;
        for (int j = 0; j < kernel; j++) a += w[(int64_t)j * C + c] * in[(t + j) * C + c];
        out[i] = a;
    }
}

__global__ void k_vv_add_scaled(float *x, const float *y, const float *g, int64_t rows, int64_t C) {
    GRID_STRIDE(i, rows * C) x[i] += (g ? g[i % C] : 1.0f) * y[i];
}

__device__ __forceinline__ float vv_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float vv_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Max / sum over the block; every thread gets the result. red: 32 floats. */
__device__ float vv_block_max(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = vv_warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? red[lane] : -INFINITY;
    return vv_warp_max(r);
}

__device__ float vv_block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = vv_warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? red[lane] : 0.0f;
    return vv_warp_sum(r);
}

/* One block per (query row i, head h): keys 0 .. pos0 + i in tiles of
 * blockDim.x; thread j scores key k0 + j, the tile's max and sum come from
 * block reductions, and thread d accumulates output values d, d + blockDim.x. */
__global__ void k_vv_attention(const float *q, const float *kc, const float *vc, int64_t pos0, int nh,
                               int nkv, int D, float scale, float *out) {
    __shared__ float qs[VV_ATT_MAX_D];
    __shared__ float ps[VV_ATT_THREADS];
    __shared__ float red[32];
    int64_t i = blockIdx.x;
    int h = blockIdx.y, kh = h / (nh / nkv), tid = threadIdx.x, nt = blockDim.x;
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D;
    const float *qr = q + i * ldq + (int64_t)h * D;
    for (int d = tid; d < D; d += nt) qs[d] = qr[d];
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    int64_t n_keys = pos0 + i + 1;
    for (int64_t k0 = 0; k0 < n_keys; k0 += nt) {
        int64_t key = k0 + tid;
        float sc = -INFINITY;
        if (key < n_keys) {
            const float *kr = kc + key * ldk + (int64_t)kh * D;
            float a = 0.0f;
            for (int d = 0; d < D; d++) a += qs[d] * kr[d];
            sc = a * scale;
        }
        float mx = fmaxf(m, vv_block_max(sc, red));
        float p = key < n_keys ? expf(sc - mx) : 0.0f;
        float alpha = expf(m - mx); /* 0 on the first tile (m = -inf) */
        float sum = vv_block_sum(p, red);
        ps[tid] = p;
        __syncthreads();
        l = l * alpha + sum;
        m = mx;
        acc0 *= alpha;
        acc1 *= alpha;
        int nk = (int)(n_keys - k0 < nt ? n_keys - k0 : nt);
        for (int j = 0; j < nk; j++) {
            const float *vr = vc + (k0 + j) * ldk + (int64_t)kh * D;
            float pj = ps[j];
            if (tid < D) acc0 += pj * vr[tid];
            if (tid + nt < D) acc1 += pj * vr[tid + nt];
        }
        __syncthreads();
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float *o = out + i * ldq + (int64_t)h * D;
    if (tid < D) o[tid] = acc0 * inv;
    if (tid + nt < D) o[tid + nt] = acc1 * inv;
}

extern "C" {

int choir_cuda_vv_conv_stem(choir_cuda *cu, const float *in, int64_t T, const float *taps,
                            const float *bias, int64_t cout, int kernel, float *out, choir_err *err) {
    if (T <= 0 || cout <= 0) return 0;
    k_vv_conv_stem<<<choir_cuda_blocks(T * cout, VV_THREADS), VV_THREADS, 0, cu->stream>>>(
        in, T, taps, bias, cout, kernel, out);
    return choir_cuda_check_launch(err, "vibevoice stem");
}

int choir_cuda_vv_dwconv(choir_cuda *cu, const float *in, int64_t T, int64_t C, int kernel,
                         const float *w, const float *b, float *out, choir_err *err) {
    if (T <= 0 || C <= 0) return 0;
    k_vv_dwconv<<<choir_cuda_blocks(T * C, VV_THREADS), VV_THREADS, 0, cu->stream>>>(in, T, C, kernel,
                                                                                   w, b, out);
    return choir_cuda_check_launch(err, "vibevoice depthwise conv");
}

int choir_cuda_vv_add_scaled(choir_cuda *cu, float *x, const float *y, const float *g, int64_t rows,
                             int64_t C, choir_err *err) {
    if (rows <= 0 || C <= 0) return 0;
    k_vv_add_scaled<<<choir_cuda_blocks(rows * C, VV_THREADS), VV_THREADS, 0, cu->stream>>>(x, y, g,
                                                                                          rows, C);
    return choir_cuda_check_launch(err, "vibevoice scaled residual");
}

int choir_cuda_vv_attention(choir_cuda *cu, const float *q, int64_t T, const float *kc,
                            const float *vc, int64_t pos0, int n_heads, int n_kv, int D, float *out,
                            choir_err *err) {
    if (T <= 0) return 0;
    if (D > VV_ATT_MAX_D || D > 2 * VV_ATT_THREADS)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: attention heads of %d values", D);
    if (T > INT32_MAX || n_heads > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: attention of %lld rows", (long long)T);
    dim3 grid((unsigned)T, (unsigned)n_heads);
    k_vv_attention<<<grid, VV_ATT_THREADS, 0, cu->stream>>>(q, kc, vc, pos0, n_heads, n_kv, D,
                                                           1.0f / sqrtf((float)D), out);
    return choir_cuda_check_launch(err, "vibevoice attention");
}

} /* extern "C" */
