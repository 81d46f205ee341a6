/* Kernels behind VibeVoice-ASR's backend operations (choir/backend_vibevoice.h),
 * with the semantics of their CPU versions in src/tensor/backend/op_vibevoice.c:
 * the stem and depthwise causal convolutions over time-major rows, the
 * layer-scaled residual, and a flash-style causal GQA attention over a KV
 * cache. Plain, correct kernels first (tests/cuda/vibevoice_gpu_check.c holds
 * them to the CPU); the attention keeps one query row per block and walks the
 * keys in tiles with an online softmax, so it needs no scratch at any
 * context length. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/cuda/cuda_internal.h"
#include "tensor/cuda/cuda_mma.h"
#include "tensor/cuda/cuda_vibevoice.h"

#define VV_THREADS 256
#define VV_ATT_THREADS 128
#define VV_ATT_MAX_D 256
/* Up to this many query rows take the split-keys path (decode steps). */
#define VV_SPLIT_ROWS 16

/* K/V values of the cached attention: f32, or bf16 (a paged pool of half
 * the bytes), widened to f32 as they are read. kv4 reads four consecutive
 * values (16 bytes of f32, 8 of bf16; aligned to that). */
__device__ __forceinline__ float kv1(const float *p) { return *p; }
__device__ __forceinline__ float kv1(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float4 kv4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 kv4(const __nv_bfloat16 *p) {
    uint2 u = *(const uint2 *)p;
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}

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

/* k_vv_dwconv's sum and k_vv_add_scaled's update of one value in one thread
 * (the same expressions: the same floats), the sums never stored. */
__global__ void k_vv_dwconv_residual(const float *__restrict__ in, int64_t T, int64_t C, int kernel,
                                     const float *__restrict__ w, const float *__restrict__ b,
                                     const float *__restrict__ g, float *__restrict__ x) {
    GRID_STRIDE(i, T * C) {
        int64_t t = i / C, c = i % C;
        float a = b ? b[c] : 0.0f;
        for (int j = 0; j < kernel; j++) a += w[(int64_t)j * C + c] * in[(t + j) * C + c];
        x[i] += (g ? g[c] : 1.0f) * a;
    }
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


/* --- decode attention: the keys split over blocks ----------------------------------
 *
 * A few query rows (decode steps) against a long cache: one block per
 * (split of VV_SPLIT keys, key head, query row), so a step over thousands of
 * cached rows fills the device, and every block serves the G = n_heads /
 * n_kv query heads that share its key head (each key and value row is read
 * once for all of them). Keys: a warp per key, lanes over the head's values
 * in float4s (512 contiguous bytes a row). Values: a thread per value index,
 * the block over the split's rows. Each block leaves its unnormalised sums,
 * its running max and its sum of exponentials in `part`; k_vv_att_combine
 * rescales and adds the splits of a row. */
#define VV_SPLIT 128
#define VV_SPLIT_THREADS 128
#define VV_SPLIT_MAX_G 8

template <typename KV>
__global__ void k_vv_att_split(const float *__restrict__ q, const KV *__restrict__ kc,
                               const KV *__restrict__ vc, int64_t pos0,
                               const int32_t *__restrict__ pos, const int32_t *__restrict__ table,
                               int64_t table_stride, int64_t max_keys, int nh, int nkv, int D,
                               float scale, int nsplit, float *__restrict__ part) {
    __shared__ __align__(16) float qs[VV_SPLIT_MAX_G * VV_ATT_MAX_D];
    __shared__ float sc[VV_SPLIT_MAX_G][VV_SPLIT];
    __shared__ float stat[2][VV_SPLIT_MAX_G];
    int sp = blockIdx.x, kh = blockIdx.y, G = nh / nkv, tid = threadIdx.x;
    int64_t i = blockIdx.z;
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D;
    /* Row i sees keys 0 .. its position (pos: backend memory, read at run
     * time, clamped to the splits launched). */
    int64_t n_keys = pos ? (int64_t)pos[i] + 1 : pos0 + i + 1, k0 = (int64_t)sp * VV_SPLIT;
    if (n_keys > max_keys) n_keys = max_keys; /* the rows the cache holds (splits round up) */
    int64_t nk = n_keys - k0 < VV_SPLIT ? n_keys - k0 : VV_SPLIT;
    /* part layout: [row][head][split] of (D sums, max, sum) */
    float *pp = part + ((i * nh + (int64_t)kh * G) * nsplit + sp) * (int64_t)(D + 2);
    int64_t pstride = (int64_t)nsplit * (D + 2);
    if (nk <= 0) {
        if (tid < G) {
            pp[tid * pstride + D] = -INFINITY;
            pp[tid * pstride + D + 1] = 0.0f;
        }
        return;
    }
    for (int e = tid; e < G * D; e += blockDim.x)
        qs[e] = q[i * ldq + ((int64_t)kh * G + e / D) * D + e % D];
    __syncthreads();
    /* The split's first cache row: a split is one page of a paged cache. */
    int64_t r0 = table ? (int64_t)table[i * table_stride + sp] * VV_SPLIT : k0;
    int lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    for (int j = warp; j < nk; j += nwarps) {
        const KV *kr = kc + (r0 + j) * ldk + (int64_t)kh * D;
        float a[VV_SPLIT_MAX_G];
#pragma unroll
        for (int g = 0; g < VV_SPLIT_MAX_G; g++) a[g] = 0.0f;
        for (int d = lane * 4; d < D; d += 128) {
            float4 kv = kv4(kr + d);
#pragma unroll
            for (int g = 0; g < VV_SPLIT_MAX_G; g++) {
                if (g >= G) break;
                const float *qg = qs + g * D + d;
                a[g] += qg[0] * kv.x + qg[1] * kv.y + qg[2] * kv.z + qg[3] * kv.w;
            }
        }
#pragma unroll
        for (int g = 0; g < VV_SPLIT_MAX_G; g++) {
            if (g >= G) break;
            float v = vv_warp_sum(a[g]);
            if (lane == 0) sc[g][j] = v * scale;
        }
    }
    __syncthreads();
    for (int g = warp; g < G; g += nwarps) {
        float mx = -INFINITY;
        for (int j = lane; j < nk; j += 32) mx = fmaxf(mx, sc[g][j]);
        mx = vv_warp_max(mx);
        float sum = 0.0f;
        for (int j = lane; j < nk; j += 32) {
            float e = expf(sc[g][j] - mx);
            sc[g][j] = e;
            sum += e;
        }
        sum = vv_warp_sum(sum);
        if (lane == 0) stat[0][g] = mx, stat[1][g] = sum;
    }
    __syncthreads();
    for (int d = tid; d < D; d += blockDim.x) {
        float acc[VV_SPLIT_MAX_G];
#pragma unroll
        for (int g = 0; g < VV_SPLIT_MAX_G; g++) acc[g] = 0.0f;
        const KV *vr = vc + r0 * ldk + (int64_t)kh * D + d;
#pragma unroll 4
        for (int j = 0; j < nk; j++) {
            float v = kv1(vr + (int64_t)j * ldk);
#pragma unroll
            for (int g = 0; g < VV_SPLIT_MAX_G; g++)
                if (g < G) acc[g] += sc[g][j] * v;
        }
#pragma unroll
        for (int g = 0; g < VV_SPLIT_MAX_G; g++)
            if (g < G) pp[g * pstride + d] = acc[g];
    }
    if (tid < G) {
        pp[tid * pstride + D] = stat[0][tid];
        pp[tid * pstride + D + 1] = stat[1][tid];
    }
}

/* The same split for heads of 128 values, reorganised for the decode step's
 * many blocks (a batch of rows deep in the cache): each lane keeps its four
 * values of the G query vectors in registers (no shared-memory reads per
 * key); a warp loads four keys at once and sums the 4 x 8 dot products of
 * its lanes with one reduce-scatter (31 shuffles for 32 sums, where a
 * reduction per sum takes 5 each); values are read a row per warp in
 * float4s (512 contiguous bytes), each warp over every fourth row, and the
 * four warps' sums added in shared memory. Same part layout as
 * k_vv_att_split, so k_vv_att_combine follows unchanged.
 *
 * W = 8 warps (choir_cuda_vv_set_att_warps): each warp takes every eighth
 * key and value row, and a warp's 16 value rows are loaded into registers
 * before the keys are read, so the split's keys and values are all in
 * flight at once (one block per split and key head leaves a single
 * sequence's step with ~1 block an SM: latency, not bandwidth, held the
 * 4-warp kernel at ~0.6 TB/s on an H100). The values' sums then go over
 * eight warps instead of four (other float roundings, same bound). */

/* On entry a[k] is lane's partial of sum k; on return the full sum of
 * k = lane (lane bit b picks the upper half at each halving). */
__device__ __forceinline__ float vv_reduce_scatter32(float a[32], int lane) {
#define VV_HALVE(W)                                                                                \
    {                                                                                              \
        bool up = lane & (W);                                                                      \
        _Pragma("unroll") for (int k = 0; k < (W); k++) {                                          \
            float send = up ? a[k] : a[k + (W)], keep = up ? a[k + (W)] : a[k];                    \
            a[k] = keep + __shfl_xor_sync(0xffffffffu, send, (W));                                 \
        }                                                                                          \
    }
    VV_HALVE(16)
    VV_HALVE(8)
    VV_HALVE(4)
    VV_HALVE(2)
    VV_HALVE(1)
#undef VV_HALVE
    return a[0];
}

template <typename KV, int W>
__global__ void __launch_bounds__(32 * W)
    k_vv_att_split128(const float *__restrict__ q, const KV *__restrict__ kc,
                      const KV *__restrict__ vc, int64_t pos0, const int32_t *__restrict__ pos,
                      const int32_t *__restrict__ table, int64_t table_stride, int64_t max_keys,
                      int nh, int nkv, float scale, int nsplit, float *__restrict__ part) {
    constexpr int D = 128;
    __shared__ __align__(16) float sc[VV_SPLIT_MAX_G][VV_SPLIT];
    __shared__ __align__(16) float red[W][VV_SPLIT_MAX_G][D];
    __shared__ float stat[2][VV_SPLIT_MAX_G];
    int sp = blockIdx.x, kh = blockIdx.y, G = nh / nkv, tid = threadIdx.x;
    int lane = tid & 31, warp = tid >> 5;
    int64_t i = blockIdx.z;
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D;
    int64_t n_keys = pos ? (int64_t)pos[i] + 1 : pos0 + i + 1, k0 = (int64_t)sp * VV_SPLIT;
    if (n_keys > max_keys) n_keys = max_keys;
    int nk = (int)(n_keys - k0 < VV_SPLIT ? n_keys - k0 : VV_SPLIT);
    float *pp = part + ((i * nh + (int64_t)kh * G) * nsplit + sp) * (int64_t)(D + 2);
    int64_t pstride = (int64_t)nsplit * (D + 2);
    if (nk <= 0) {
        if (tid < G) {
            pp[tid * pstride + D] = -INFINITY;
            pp[tid * pstride + D + 1] = 0.0f;
        }
        return;
    }
    float4 qr[VV_SPLIT_MAX_G];
#pragma unroll
    for (int g = 0; g < VV_SPLIT_MAX_G; g++) {
        float4 t = g < G ? ((const float4 *)(q + i * ldq + ((int64_t)kh * G + g) * D))[lane]
                         : make_float4(0.f, 0.f, 0.f, 0.f);
        qr[g] = make_float4(t.x * scale, t.y * scale, t.z * scale, t.w * scale);
    }
    int64_t r0 = table ? (int64_t)table[i * table_stride + sp] * VV_SPLIT : k0;
    const KV *kb = kc + r0 * ldk + (int64_t)kh * D + 4 * lane;
    const KV *vb = vc + r0 * ldk + (int64_t)kh * D + 4 * lane;
    constexpr int NV = W == 8 ? VV_SPLIT / W : 1; /* value rows a warp loads ahead (W = 8) */
    float4 vpre[NV];
    if (W == 8) {
#pragma unroll
        for (int t = 0; t < NV; t++) {
            int j = warp + W * t;
            vpre[t] = j < nk ? kv4(vb + (int64_t)j * ldk) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
#pragma unroll(W == 8 ? 4 : 1)
    for (int j0 = 4 * warp; j0 < nk; j0 += 4 * W) {
        float4 kv[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            kv[u] = j0 + u < nk ? kv4(kb + (int64_t)(j0 + u) * ldk) : make_float4(0.f, 0.f, 0.f, 0.f);
        float a[32];
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int g = 0; g < VV_SPLIT_MAX_G; g++)
                a[u * VV_SPLIT_MAX_G + g] = qr[g].x * kv[u].x + qr[g].y * kv[u].y +
                                            qr[g].z * kv[u].z + qr[g].w * kv[u].w;
        float v = vv_reduce_scatter32(a, lane);
        int u = lane / VV_SPLIT_MAX_G, g = lane % VV_SPLIT_MAX_G;
        if (g < G && j0 + u < nk) sc[g][j0 + u] = v;
    }
    __syncthreads();
    for (int g = warp; g < G; g += W) {
        float mx = -INFINITY;
        for (int j = lane; j < nk; j += 32) mx = fmaxf(mx, sc[g][j]);
        mx = vv_warp_max(mx);
        float sum = 0.0f;
        for (int j = lane; j < nk; j += 32) {
            float e = expf(sc[g][j] - mx);
            sc[g][j] = e;
            sum += e;
        }
        sum = vv_warp_sum(sum);
        if (lane == 0) stat[0][g] = mx, stat[1][g] = sum;
    }
    __syncthreads();
    float4 acc[VV_SPLIT_MAX_G];
#pragma unroll
    for (int g = 0; g < VV_SPLIT_MAX_G; g++) acc[g] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (W == 8) {
#pragma unroll
        for (int t = 0; t < NV; t++) {
            int j = warp + W * t;
            if (j >= nk) break;
#pragma unroll
            for (int g = 0; g < VV_SPLIT_MAX_G; g++) {
                if (g >= G) break;
                float p = sc[g][j];
                acc[g].x += p * vpre[t].x, acc[g].y += p * vpre[t].y, acc[g].z += p * vpre[t].z,
                    acc[g].w += p * vpre[t].w;
            }
        }
    } else {
#pragma unroll 4
        for (int j = warp; j < nk; j += W) {
            float4 v = kv4(vb + (int64_t)j * ldk);
#pragma unroll
            for (int g = 0; g < VV_SPLIT_MAX_G; g++) {
                if (g >= G) break;
                float p = sc[g][j];
                acc[g].x += p * v.x, acc[g].y += p * v.y, acc[g].z += p * v.z, acc[g].w += p * v.w;
            }
        }
    }
#pragma unroll
    for (int g = 0; g < VV_SPLIT_MAX_G; g++) *(float4 *)&red[warp][g][4 * lane] = acc[g];
    __syncthreads();
    for (int e = tid; e < G * D; e += 32 * W) {
        int g = e / D, d = e % D;
        float a = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++) a += red[w][g][d];
        pp[g * pstride + d] = a;
    }
    if (tid < G) {
        pp[tid * pstride + D] = stat[0][tid];
        pp[tid * pstride + D + 1] = stat[1][tid];
    }
}

static bool g_split128 = true;
void choir_cuda_vv_set_split128(bool on) { g_split128 = on; }
/* 0: not yet read from CHOIR_VV_ATT_WARPS (4 unless it says 8). */
static int g_att_warps = 0;
void choir_cuda_vv_set_att_warps(int warps) { g_att_warps = warps == 8 ? 8 : 4; }
static int att_warps(void) {
    if (!g_att_warps) {
        const char *e = getenv("CHOIR_VV_ATT_WARPS");
        g_att_warps = e && strcmp(e, "8") == 0 ? 8 : 4;
    }
    return g_att_warps;
}

/* One block per (query row, head): the splits' partial sums rescaled to the
 * common max and normalised. */
__global__ void k_vv_att_combine(const float *__restrict__ part, int nh, int D, int nsplit,
                                 float *__restrict__ out) {
    int64_t i = blockIdx.x;
    int h = blockIdx.y;
    const float *pp = part + (i * nh + h) * (int64_t)nsplit * (D + 2);
    float mx = -INFINITY;
    for (int sp = 0; sp < nsplit; sp++) mx = fmaxf(mx, pp[(int64_t)sp * (D + 2) + D]);
    float l = 0.0f;
    for (int sp = 0; sp < nsplit; sp++) {
        float m = pp[(int64_t)sp * (D + 2) + D];
        if (m != -INFINITY) l += expf(m - mx) * pp[(int64_t)sp * (D + 2) + D + 1];
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float a = 0.0f;
        for (int sp = 0; sp < nsplit; sp++) {
            float m = pp[(int64_t)sp * (D + 2) + D];
            if (m != -INFINITY) a += expf(m - mx) * pp[(int64_t)sp * (D + 2) + d];
        }
        out[i * (int64_t)nh * D + (int64_t)h * D + d] = a * inv;
    }
}


/* --- decode attention v2 (CHOIR_VV_ATT_V2=1): K and V streamed together ---------------
 *
 * The split kernels above read a split's keys, wait, then its values, with
 * a few rows in flight a warp and one block per 128 keys (about one block
 * an SM at 10 minutes): each DRAM round trip is paid several times over, so
 * they stream ~0.6 TB/s. Here a block of VV_DEC_WARPS warps takes a split
 * of S keys (S sized at launch so the grid fills the device at any
 * context, vv_dec_split), and each warp walks tiles of 4 keys with an
 * online softmax of its own: the tile's key and value rows are loaded
 * together, the next tile's loads are issued before this tile's arithmetic,
 * and no block barrier comes before the warps' final merge. Every load is
 * 16 bytes (4 f32 or 8 bf16 values); LPK lanes cover a row of D values, so
 * a load instruction of a warp reads KPI = 32 / LPK rows. Each lane keeps
 * its values of the G query vectors of the key head (GQA: a key row is read
 * once for all G) and its sums for them in registers.
 *
 * Scores: lane partials a[t][g] (load t of the tile, head g) summed over
 * the LPK lanes of a row by a reduce-scatter, after which lane L holds the
 * score of head g = L & 7 for the key of load t = (L % LPK) / 8, row group
 * h = L / LPK (key 4 j + t KPI + h of tile j); lanes of equal L & 7 share a
 * head's running max. The probabilities go to the value lanes by shuffles.
 *
 * Each block leaves per head its unnormalised sums (D floats) and its max
 * and sum of exponentials in `part` ([row][head][split][D], then
 * [row][head][split][2]); when counters are given (cu->attn_done, zero
 * between calls) the last block of a (row, key head) combines the splits
 * and sets its counter back to 0 (what k_vv_att_dec_combine does as a
 * launch of its own).
 *
 * NB and U: a warp's ring of NB tiles, walked U at a time (v2: 2 and 1).
 * With two blocks of 4 warps an SM (the sized splits), v2 has at most 2
 * tiles a warp in flight: 8 x 2 x 2 KB = 32 KB an SM over bf16 K/V, 64 KB
 * over f32, while ~3 TB/s x 1.5-2 us of loaded latency / 132 SMs asks for
 * 35-45 KB. CHOIR_VV_ATT_V2_DEEP (the default; =0 for v2's ring) takes bf16 to 4 tiles
 * (64 KB an SM; 64 registers of ring) with the scores of 2 tiles a step
 * together, and f32 to 3 tiles (96 KB; 96 registers): the same tiles a
 * warp in the same order, so the same sums as v2 bit for bit. */
#define VV_DEC_WARPS 4
#define VV_DEC_THREADS (32 * VV_DEC_WARPS)
/* Splits of a (row, key head) at most (the combine's weights live in shared
 * memory) and keys a split at most (its pages, too). */
#define VV_DEC_MAX_SPLITS 128
#define VV_DEC_MAX_S 4096
#define VV_DEC_MAX_PAGES (VV_DEC_MAX_S / VV_SPLIT + 2)

/* 16 bytes of K or V: 4 f32 or 8 bf16 values, widened to f32. */
template <typename KV> struct vv_dec_vec;
template <> struct vv_dec_vec<float> {
    static constexpr int E = 4;
    static __device__ __forceinline__ void widen(uint4 u, float *o) {
        o[0] = __uint_as_float(u.x), o[1] = __uint_as_float(u.y);
        o[2] = __uint_as_float(u.z), o[3] = __uint_as_float(u.w);
    }
};
template <> struct vv_dec_vec<__nv_bfloat16> {
    static constexpr int E = 8;
    static __device__ __forceinline__ void widen(uint4 u, float *o) {
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) o[2 * j] = __uint_as_float(w[j] << 16), o[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
};

/* Halvings of a reduce-scatter: N partials a lane, lanes OFF apart
 * exchanging halves (the lane keeps the half its bit OFF picks), down to
 * one partial at OFF = 1. */
template <int OFF, int N> struct vv_dec_halve {
    static __device__ __forceinline__ void run(float *a, int lane) {
        bool up = lane & OFF;
#pragma unroll
        for (int k = 0; k < N / 2; k++) {
            float send = up ? a[k] : a[k + N / 2], keep = up ? a[k + N / 2] : a[k];
            a[k] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
        }
        vv_dec_halve<OFF / 2, N / 2>::run(a, lane);
    }
};
template <int N> struct vv_dec_halve<0, N> {
    static __device__ __forceinline__ void run(float *, int) {}
};

/* The combine of row i's key head kh: its G heads' split partials (the
 * first ns splits: those that hold keys) rescaled to their common max,
 * summed and normalised into out. Weights of each split in shared memory
 * (warps over heads, lanes over splits), then each thread sums float4s of
 * the values over a group of splits, the groups added through `red`. Every
 * thread of the block calls it. Partials read through L2 (__ldcg): other
 * blocks of the same launch may have written them. */
template <int D, int GM>
__device__ __forceinline__ void vv_dec_combine(const float *__restrict__ part, const float *__restrict__ stat,
                                               int64_t i, int kh, int G, int nh, int nsplit, int ns,
                                               float *red, float (*wt)[VV_DEC_MAX_SPLITS], float *__restrict__ out) {
    constexpr int LPR = D / 4, GROUPS = VV_DEC_THREADS / LPR;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int64_t h0 = i * nh + (int64_t)kh * G; /* the group's first head, over all rows */
    for (int g = warp; g < G; g += VV_DEC_WARPS) {
        const float *st = stat + (h0 + g) * nsplit * 2;
        float mx = -INFINITY;
        for (int sp = lane; sp < ns; sp += 32) mx = fmaxf(mx, __ldcg(st + 2 * sp));
        mx = vv_warp_max(mx);
        float l = 0.0f;
        for (int sp = lane; sp < ns; sp += 32) {
            float m = __ldcg(st + 2 * sp);
            float w = m == -INFINITY ? 0.0f : expf(m - mx);
            wt[g][sp] = w;
            l += w * __ldcg(st + 2 * sp + 1);
        }
        l = vv_warp_sum(l);
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        __syncwarp();
        for (int sp = lane; sp < ns; sp += 32) wt[g][sp] *= inv;
    }
    __syncthreads();
    int grp = tid / LPR, c = tid % LPR;
    float4 acc[GM];
#pragma unroll
    for (int g = 0; g < GM; g++) acc[g] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 2
    for (int sp = grp; sp < ns; sp += GROUPS) {
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g >= G) break;
            float w = wt[g][sp];
            float4 x = __ldcg((const float4 *)(part + ((h0 + g) * nsplit + sp) * D) + c);
            if (w != 0.0f) acc[g].x += w * x.x, acc[g].y += w * x.y, acc[g].z += w * x.z, acc[g].w += w * x.w;
        }
    }
#pragma unroll
    for (int g = 0; g < GM; g++)
        if (g < G) *(float4 *)&red[(grp * 8 + g) * D + 4 * c] = acc[g];
    __syncthreads();
    for (int o = tid; o < G * LPR; o += VV_DEC_THREADS) {
        int g = o / LPR, cc = o % LPR;
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int gr = 0; gr < GROUPS; gr++) {
            float4 x = *(const float4 *)&red[(gr * 8 + g) * D + 4 * cc];
            a.x += x.x, a.y += x.y, a.z += x.z, a.w += x.w;
        }
        ((float4 *)(out + (h0 + g) * D))[cc] = a;
    }
}

/* A warp's tiles 0 .. nt - 1 with two in flight: load(it, b) requests tile
 * it into buffer b (0 or 1), tile(it, b) works on it; the next tile's loads
 * go out before this one's arithmetic. */
template <typename Load, typename Tile>
__device__ __forceinline__ void vv_dec_two_in_flight(int nt, Load &&load, Tile &&tile) {
    load(0, 0);
    for (int it = 0; it < nt; it += 2) {
        load(it + 1, 1);
        tile(it, 0);
        if (it + 1 >= nt) break;
        load(it + 2, 0);
        tile(it + 1, 1);
    }
}

/* A decode kernel's split: its pages of row i's table read into `pages`
 * (as far as the cache goes; from page p0 = k0 / VV_SPLIT), row i's keys
 * into *n_keys (pos[i] + 1, or pos0 + i + 1, at most max_keys), and the
 * split's share of them (keys k0 .. k0 + S - 1) returned, after a block
 * barrier. Every thread calls it. */
__device__ __forceinline__ int vv_dec_setup(const int32_t *__restrict__ table, int64_t table_stride,
                                            const int32_t *__restrict__ pos, int64_t pos0, int64_t max_keys,
                                            int64_t i, int64_t k0, int S, int64_t p0, int *pages, int64_t *n_keys) {
    int tid = threadIdx.x;
    if (table) {
        int64_t kend = k0 + S < max_keys ? k0 + S : max_keys;
        int np = kend > k0 ? (int)((kend - 1) / VV_SPLIT - p0 + 1) : 0;
        if (tid < np) pages[tid] = table[i * table_stride + p0 + tid];
    }
    int64_t nkeys = pos ? (int64_t)pos[i] + 1 : pos0 + i + 1;
    if (nkeys > max_keys) nkeys = max_keys;
    *n_keys = nkeys;
    int nk = (int)(nkeys - k0 < 0 ? 0 : (nkeys - k0 < S ? nkeys - k0 : S));
    __syncthreads();
    return nk;
}

/* The block's partial of split sp for row i's key head kh: its warps' sums
 * (wm and wl: a warp's max, natural log, and sum of exponentials a head;
 * red: its unnormalised value sums, [warp][head][D]; all written, then a
 * block barrier) rescaled to their common max, into part and stat. */
template <int D>
__device__ __forceinline__ void vv_dec_partial(const float *red, const float (*wm)[8], const float (*wl)[8], int64_t i,
                                               int kh, int G, int nh, int nsplit, int sp, float *__restrict__ part,
                                               float *__restrict__ stat) {
    int tid = threadIdx.x;
    for (int o = tid; o < G * (D / 4); o += VV_DEC_THREADS) {
        int g = o / (D / 4), c = o % (D / 4);
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < VV_DEC_WARPS; w++) mx = fmaxf(mx, wm[w][g]);
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < VV_DEC_WARPS; w++) {
            float f = wm[w][g] == -INFINITY ? 0.0f : expf(wm[w][g] - mx);
            float4 x = *(const float4 *)&red[(w * 8 + g) * D + 4 * c];
            a.x += f * x.x, a.y += f * x.y, a.z += f * x.z, a.w += f * x.w;
        }
        ((float4 *)(part + ((i * nh + (int64_t)kh * G + g) * nsplit + sp) * D))[c] = a;
    }
    if (tid < G) {
        float mx = -INFINITY, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < VV_DEC_WARPS; w++) mx = fmaxf(mx, wm[w][tid]);
#pragma unroll
        for (int w = 0; w < VV_DEC_WARPS; w++)
            sum += wm[w][tid] == -INFINITY ? 0.0f : expf(wm[w][tid] - mx) * wl[w][tid];
        float *st = stat + ((i * nh + (int64_t)kh * G + tid) * nsplit + sp) * 2;
        st[0] = mx, st[1] = sum;
    }
}

/* With counters (done): the last block of (row i, key head kh) to finish
 * combines the splits that hold keys into out and sets its counter back to
 * 0. Every thread of every block of the launch calls it; `last` is a
 * shared int. */
template <int D, int GM>
__device__ __forceinline__ void vv_dec_fold(const float *part, const float *stat, int *__restrict__ done, int64_t i,
                                            int kh, int G, int nh, int nkv, int nsplit, int64_t n_keys, int S,
                                            float *red, float (*wt)[VV_DEC_MAX_SPLITS], int *last,
                                            float *__restrict__ out) {
    int tid = threadIdx.x;
    if (!done) return;
    __threadfence();
    __syncthreads();
    if (tid == 0) *last = atomicAdd(&done[i * nkv + kh], 1) == nsplit - 1;
    __syncthreads();
    if (!*last) return;
    __threadfence();
    int ns = n_keys > 0 ? (int)((n_keys + S - 1) / S) : 0;
    vv_dec_combine<D, GM>(part, stat, i, kh, G, nh, nsplit, ns, red, wt, out);
    if (tid == 0) done[i * nkv + kh] = 0;
}

template <int D, typename KV, int GM, int NB, int U>
__global__ void __launch_bounds__(VV_DEC_THREADS, sizeof(KV) == 4 && NB == 2 ? 3 : 2)
    k_vv_att_dec(const float *__restrict__ q, const KV *__restrict__ kc, const KV *__restrict__ vc, int64_t pos0,
                 const int32_t *__restrict__ pos, const int32_t *__restrict__ table, int64_t table_stride,
                 int64_t max_keys, int nh, int nkv, float scale, int S, int nsplit, float *__restrict__ part,
                 int *__restrict__ done, float *__restrict__ out) {
    /* choir_cuda_pdl: the product after may start its loads; launched so
     * itself, the kernel before has finished (both no-ops otherwise). */
    cuda_pdl_begin();
    constexpr int E = vv_dec_vec<KV>::E, LPK = D / E, KPI = 32 / LPK, NL = LPK / 8;
    static_assert(LPK >= 8 && LPK <= 32 && NL * KPI == 4, "a tile is 4 keys");
    static_assert(U >= 1 && NB > U && NB % U == 0, "a ring of whole steps");
    __shared__ __align__(16) float red[VV_DEC_WARPS * 8 * 128];
    __shared__ float wt[8][VV_DEC_MAX_SPLITS];
    __shared__ float wm[VV_DEC_WARPS][8], wl[VV_DEC_WARPS][8];
    __shared__ int pages[VV_DEC_MAX_PAGES];
    __shared__ int last;
    const int G = GM == 8 ? nh / nkv : GM; /* GM < 8: launched for exactly G = GM */
    int sp = blockIdx.x, kh = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int64_t i = blockIdx.z;
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D, k0 = (int64_t)sp * S;
    float *stat = part + (int64_t)gridDim.z * nh * nsplit * D;
    /* The split's pages (as far as the cache goes), read alongside the position. */
    int64_t p0 = k0 / VV_SPLIT, n_keys;
    int nk = vv_dec_setup(table, table_stride, pos, pos0, max_keys, i, k0, S, p0, pages, &n_keys);
    int h = lane / LPK, d0 = (lane % LPK) * E;
    if (nk > 0) {
        float qr[GM][E], acc[GM][E];
#pragma unroll
        for (int g = 0; g < GM; g++) {
            const float *qg = q + i * ldq + ((int64_t)kh * G + g) * D + d0;
#pragma unroll
            for (int e = 0; e < E; e++) {
                qr[g][e] = g < G ? qg[e] * scale : 0.0f;
                acc[g][e] = 0.0f;
            }
        }
        float m = -INFINITY, l = 0.0f;
        int ntile = (nk + 3) / 4, nt = ntile > warp ? (ntile - warp + VV_DEC_WARPS - 1) / VV_DEC_WARPS : 0;
        /* Tile `it` of this warp: keys 4 j .. 4 j + 3 of the split, j = warp + W it. */
        auto load = [&](int it, uint4 *kb, uint4 *vb) {
#pragma unroll
            for (int t = 0; t < NL; t++) {
                int key = 4 * (warp + VV_DEC_WARPS * it) + t * KPI + h;
                if (it < nt && key < nk) {
                    int64_t kk = k0 + key;
                    int64_t r = table ? (int64_t)pages[kk / VV_SPLIT - p0] * VV_SPLIT + kk % VV_SPLIT : kk;
                    int64_t at = r * ldk + (int64_t)kh * D + d0;
                    kb[t] = *(const uint4 *)(kc + at);
                    vb[t] = *(const uint4 *)(vc + at);
                } else {
                    kb[t] = make_uint4(0u, 0u, 0u, 0u);
                    vb[t] = make_uint4(0u, 0u, 0u, 0u);
                }
            }
        };
        if constexpr (NB == 2 && U == 1) {
            /* v2 (NB = 2, U = 1) as it ran on the H100, in its own text (the ring's
             * code at NB = 2 orders its instructions otherwise). Its two-tile walk
             * is vv_dec_two_in_flight since 7 Dec 2026, evening: the same instructions
             * (nvcc 13.0), a few register moves placed before the loop's first
             * test instead of after it, the same registers and no spills. */
            auto tile = [&](int it, const uint4 *kb, const uint4 *vb) {
                float a[NL * 8];
#pragma unroll
                for (int t = 0; t < NL; t++) {
                    float kf[E];
                    vv_dec_vec<KV>::widen(kb[t], kf);
#pragma unroll
                    for (int g = 0; g < 8; g++) {
                        float s = 0.0f;
                        if (g < GM) {
#pragma unroll
                            for (int e = 0; e < E; e++) s += qr[g < GM ? g : 0][e] * kf[e];
                        }
                        a[t * 8 + g] = s;
                    }
                }
                /* Reduce-scatter over the LPK lanes of a row: at each halving the
                 * lane keeps the half its bit picks and adds its partner's. */
                vv_dec_halve<LPK / 2, NL * 8>::run(a, lane);
                int k = lane % LPK, g = lane & 7, key = 4 * (warp + VV_DEC_WARPS * it) + (k >> 3) * KPI + h;
                bool valid = key < nk && g < G;
                float s = valid ? a[0] : -INFINITY;
                float mt = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, 8));
                mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 16));
                float mn = fmaxf(m, mt);
                float alpha = mn == -INFINITY ? 1.0f : expf(m - mn); /* 0 while m is -inf */
                float p = valid ? expf(s - mn) : 0.0f;
                l = l * alpha + p;
                m = mn;
                if (__any_sync(0xffffffffu, alpha != 1.0f)) {
#pragma unroll
                    for (int gg = 0; gg < GM; gg++) {
                        float ag = __shfl_sync(0xffffffffu, alpha, gg);
#pragma unroll
                        for (int e = 0; e < E; e++) acc[gg][e] *= ag;
                    }
                }
#pragma unroll
                for (int t = 0; t < NL; t++) {
                    float vf[E];
                    vv_dec_vec<KV>::widen(vb[t], vf);
#pragma unroll
                    for (int gg = 0; gg < GM; gg++) {
                        float pg = __shfl_sync(0xffffffffu, p, h * LPK + t * 8 + gg);
#pragma unroll
                        for (int e = 0; e < E; e++) acc[gg][e] += pg * vf[e];
                    }
                }
            };
            /* Two tiles in flight: the next one's rows are requested before
             * this one's arithmetic. */
            uint4 kb0[NL], vb0[NL], kb1[NL], vb1[NL];
            vv_dec_two_in_flight(
                nt, [&](int it, int b) { load(it, b ? kb1 : kb0, b ? vb1 : vb0); },
                [&](int it, int b) { tile(it, b ? kb1 : kb0, b ? vb1 : vb0); });
        } else {
            /* Tile `it`'s scores (independent of the running state, so a step's
             * tiles can overlap): s for the key and head of this lane, mt the
             * tile's max for the lane's head. */
            auto score = [&](int it, const uint4 *kb, float &s, float &mt) {
                float a[NL * 8];
#pragma unroll
                for (int t = 0; t < NL; t++) {
                    float kf[E];
                    vv_dec_vec<KV>::widen(kb[t], kf);
#pragma unroll
                    for (int g = 0; g < 8; g++) {
                        float sg = 0.0f;
                        if (g < GM) {
#pragma unroll
                            for (int e = 0; e < E; e++) sg += qr[g < GM ? g : 0][e] * kf[e];
                        }
                        a[t * 8 + g] = sg;
                    }
                }
                /* Reduce-scatter over the LPK lanes of a row: at each halving the
                 * lane keeps the half its bit picks and adds its partner's. */
                vv_dec_halve<LPK / 2, NL * 8>::run(a, lane);
                int k = lane % LPK, g = lane & 7, key = 4 * (warp + VV_DEC_WARPS * it) + (k >> 3) * KPI + h;
                s = key < nk && g < G ? a[0] : -INFINITY;
                mt = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, 8));
                mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 16));
            };
            /* The online softmax over tile `it`, in tile order. */
            auto update = [&](int it, float s, float mt, const uint4 *vb) {
                int k = lane % LPK, g = lane & 7, key = 4 * (warp + VV_DEC_WARPS * it) + (k >> 3) * KPI + h;
                bool valid = key < nk && g < G;
                float mn = fmaxf(m, mt);
                float alpha = mn == -INFINITY ? 1.0f : expf(m - mn); /* 0 while m is -inf */
                float p = valid ? expf(s - mn) : 0.0f;
                l = l * alpha + p;
                m = mn;
                if (__any_sync(0xffffffffu, alpha != 1.0f)) {
#pragma unroll
                    for (int gg = 0; gg < GM; gg++) {
                        float ag = __shfl_sync(0xffffffffu, alpha, gg);
#pragma unroll
                        for (int e = 0; e < E; e++) acc[gg][e] *= ag;
                    }
                }
#pragma unroll
                for (int t = 0; t < NL; t++) {
                    float vf[E];
                    vv_dec_vec<KV>::widen(vb[t], vf);
#pragma unroll
                    for (int gg = 0; gg < GM; gg++) {
                        float pg = __shfl_sync(0xffffffffu, p, h * LPK + t * 8 + gg);
#pragma unroll
                        for (int e = 0; e < E; e++) acc[gg][e] += pg * vf[e];
                    }
                }
            };
            /* A ring of NB tiles in registers, walked U tiles a step: a step
             * requests the U tiles NB - U ahead into the slots the last step
             * freed, then takes its tiles' scores together and their updates in
             * order. Any NB and U give v2's sums bit for bit (the same tiles a
             * warp, in the same order, the same arithmetic a tile). */
            uint4 kb[NB][NL], vb[NB][NL];
#pragma unroll
            for (int r = 0; r < NB - U; r++) load(r, kb[r], vb[r]);
            for (int it = 0; it < nt; it += NB) {
#pragma unroll
                for (int r = 0; r < NB; r += U) {
                    if (it + r >= nt) break;
#pragma unroll
                    for (int u = 0; u < U; u++)
                        load(it + r + NB - U + u, kb[(r + NB - U + u) % NB], vb[(r + NB - U + u) % NB]);
                    float s[U], mt[U];
#pragma unroll
                    for (int u = 0; u < U; u++) score(it + r + u, kb[r + u], s[u], mt[u]);
#pragma unroll
                    for (int u = 0; u < U; u++)
                        if (u == 0 || it + r + u < nt) update(it + r + u, s[u], mt[u], vb[r + u]);
                }
            }
        }
        /* The warp's sums: l over the lanes of a head, the values over the
         * row groups of a load; then to shared memory. */
        l += __shfl_xor_sync(0xffffffffu, l, 8);
        l += __shfl_xor_sync(0xffffffffu, l, 16);
#pragma unroll
        for (int off = LPK; off < 32; off <<= 1)
#pragma unroll
            for (int g = 0; g < GM; g++)
#pragma unroll
                for (int e = 0; e < E; e++) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], off);
        if (lane < 8) wm[warp][lane] = m, wl[warp][lane] = l;
        if (lane < LPK) {
#pragma unroll
            for (int g = 0; g < GM; g++)
#pragma unroll
                for (int e = 0; e < E; e += 4)
                    *(float4 *)&red[(warp * 8 + g) * D + d0 + e] =
                        make_float4(acc[g][e], acc[g][e + 1], acc[g][e + 2], acc[g][e + 3]);
        }
        __syncthreads();
        vv_dec_partial<D>(red, wm, wl, i, kh, G, nh, nsplit, sp, part, stat);
    }
    vv_dec_fold<D, GM>(part, stat, done, i, kh, G, nh, nkv, nsplit, n_keys, S, red, wt, &last, out);
}

/* The combine as a launch of its own (no counters): one block per (key
 * head, row). */
template <int D, int GM>
__global__ void __launch_bounds__(VV_DEC_THREADS)
    k_vv_att_dec_combine(const float *__restrict__ part, int64_t pos0, const int32_t *__restrict__ pos,
                         int64_t max_keys, int nh, int nkv, int S, int nsplit, float *__restrict__ out) {
    /* choir_cuda_pdl: the product after may start its loads; launched so
     * itself, the kernel before has finished (both no-ops otherwise). */
    cuda_pdl_begin();
    __shared__ __align__(16) float red[VV_DEC_WARPS * 8 * 128];
    __shared__ float wt[8][VV_DEC_MAX_SPLITS];
    int64_t i = blockIdx.y;
    int64_t n_keys = pos ? (int64_t)pos[i] + 1 : pos0 + i + 1;
    if (n_keys > max_keys) n_keys = max_keys;
    int ns = n_keys > 0 ? (int)((n_keys + S - 1) / S) : 0;
    const float *stat = part + (int64_t)gridDim.y * nh * nsplit * D;
    vv_dec_combine<D, GM>(part, stat, i, blockIdx.x, GM == 8 ? nh / nkv : GM, nh, nsplit, ns, red, wt, out);
}


/* --- decode attention on the tensor cores (CHOIR_VV_ATT_TC) -------------------------
 *
 * k_vv_att_dec's blocks, splits, partials and combine, with a warp's
 * arithmetic on mma.sync m16n8k16 (bf16 in, f32 sums) instead of FMAs: over
 * a bf16 cache k_vv_att_dec spends ~7 FMAs, a widening and shuffles on each
 * 2-byte value for the 7 query heads of a key head, and streams 1.3 TB/s
 * where its f32 twin (half the work a byte) streams 2.0. Heads of 128 values,
 * groups of up to 8 query heads.
 *
 * A warp takes tiles of 16 keys (warp w: tiles w, w + 4, ..; a tile never
 * crosses a page, S and VV_SPLIT being multiples of 16), the next tile's K
 * and V loaded into registers while this one is worked on, 16 bytes a load
 * straight from the cache (no shared memory):
 *  - scores S = Q K^T, two m16n8k16 products a 16-value step (keys 0-7,
 *    8-15): A = the group's query vectors (rows = heads, 8-15 zero; bf16 of
 *    q scale log2(e)), B = K^T. The dot products' order of values is free
 *    as long as A and B agree, so lane (g, c) = (lane / 4, lane % 4) loads
 *    values 32 b + 8 c .. + 7 of key g (+ 8) as one uint4 and its words
 *    are the B registers of steps 2 b and 2 b + 1; q is packed to match.
 *    C: lane (g, c) holds head g's scores of keys 2 c, 2 c + 1 (+ 8).
 *  - the online softmax per head on those fragments (a head's row over the
 *    4 lanes of g), in powers of 2;
 *  - values O^T += V^T P^T, one m16n8k16 product per 16 values (M = values,
 *    N = 8 heads, K = 16 keys): B = P^T is the score fragment as it stands
 *    (lane (g, c): head g, keys 2 c, 2 c + 1, 2 c + 8, 2 c + 9), A = V^T,
 *    whose register pairs (two keys, one value) come from rows 2 c, 2 c + 1
 *    (+ 8) of V loaded 8 values at a time (values 8 g .. 8 g + 7 and
 *    64 + 8 g ..) and paired by byte permutes: row g of value tile t is
 *    value 8 g + t, row g + 8 value 64 + 8 g + t. C: lane (g, c) holds
 *    heads 2 c, 2 c + 1 of values 8 g + t and 64 + 8 g + t, t = 0..7.
 * Registers: 64 a tile (two in flight), 32 of sums, 16 of q.
 *
 * Bounds: q and the probabilities are rounded to bf16 (the cache already
 * is), the sums stay f32; the tensor-core prefill's rounding. The warps'
 * sums meet as k_vv_att_dec's do (vv_dec_partial, vv_dec_fold). */
#define VV_TC_D 128

/* Values 2k, 2k+1 of uint4 w as one register (k = 0..3). */
__device__ __forceinline__ uint32_t vv_tc_word(const uint4 &w, int k) {
    return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w;
}

template <int GM>
__global__ void __launch_bounds__(VV_DEC_THREADS, 2)
    k_vv_att_dec_tc(const float *__restrict__ q, const __nv_bfloat16 *__restrict__ kc,
                    const __nv_bfloat16 *__restrict__ vc, int64_t pos0, const int32_t *__restrict__ pos,
                    const int32_t *__restrict__ table, int64_t table_stride, int64_t max_keys, int nh, int nkv,
                    float scale, int S, int nsplit, float *__restrict__ part, int *__restrict__ done,
                    float *__restrict__ out) {
    /* choir_cuda_pdl: the product after may start its loads; launched so
     * itself, the kernel before has finished (both no-ops otherwise). */
    cuda_pdl_begin();
    constexpr int D = VV_TC_D, KC = D / 32;
    __shared__ __align__(16) float red[VV_DEC_WARPS * 8 * 128];
    __shared__ float wt[8][VV_DEC_MAX_SPLITS];
    __shared__ float wm[VV_DEC_WARPS][8], wl[VV_DEC_WARPS][8];
    __shared__ int pages[VV_DEC_MAX_PAGES];
    __shared__ int last;
    const int G = GM == 8 ? nh / nkv : GM;
    int sp = blockIdx.x, kh = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int64_t i = blockIdx.z;
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D, k0 = (int64_t)sp * S;
    float *stat = part + (int64_t)gridDim.z * nh * nsplit * D;
    int64_t p0 = k0 / VV_SPLIT, n_keys;
    int nk = vv_dec_setup(table, table_stride, pos, pos0, max_keys, i, k0, S, p0, pages, &n_keys);
    int g = lane >> 2, c = lane & 3;
    if (nk > 0) {
        /* Head g's query (0 past the group) in A's order: step 2 b + hh takes
         * values 32 b + 8 c + 4 hh + {0, 1} (a0) and + {2, 3} (a2). */
        uint32_t qa[D / 16][4];
        {
            const float *qg = q + i * ldq + ((int64_t)kh * G + (g < G ? g : 0)) * D;
            float qs = g < G ? scale * 1.4426950408889634f : 0.0f;
#pragma unroll
            for (int b = 0; b < KC; b++) {
                float x[8];
                *(float4 *)x = *(const float4 *)(qg + 32 * b + 8 * c);
                *(float4 *)(x + 4) = *(const float4 *)(qg + 32 * b + 8 * c + 4);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float a = x[2 * e] * qs, bb = x[2 * e + 1] * qs;
                    uint32_t hi = pack_bf16(a, bb);
                    float ah = __uint_as_float(hi << 16), bh = __uint_as_float(hi & 0xffff0000u);
                    /* rows g (q's bf16) and g + 8 (what it left) of step 2 b + e / 2 */
                    qa[2 * b + e / 2][2 * (e % 2)] = hi;
                    qa[2 * b + e / 2][2 * (e % 2) + 1] = pack_bf16(a - ah, bb - bh);
                }
            }
        }
        float acc[D / 16][4];
#pragma unroll
        for (int t = 0; t < D / 16; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
        float m = -INFINITY, l = 0.0f;
        int ntile = (nk + 15) / 16, nt = ntile > warp ? (ntile - warp + VV_DEC_WARPS - 1) / VV_DEC_WARPS : 0;
        /* Tile `it` of this warp (keys 16 j .. 16 j + 15 of the split, j = warp
         * + 4 it): K rows g and g + 8, V rows 2 c, 2 c + 1, 2 c + 8, 2 c + 9;
         * zeros past the split's keys. */
        auto load = [&](int it, uint4 (*kb)[KC], uint4 (*vb)[2]) {
            int j = warp + VV_DEC_WARPS * it;
            int64_t base = 0;
            bool any = it < nt;
            if (any) {
                int64_t kk = k0 + 16 * j;
                int64_t r = table ? (int64_t)pages[kk / VV_SPLIT - p0] * VV_SPLIT + kk % VV_SPLIT : kk;
                base = r * ldk + (int64_t)kh * D;
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int key = 16 * j + 8 * h + g;
                bool ok = any && key < nk;
#pragma unroll
                for (int b = 0; b < KC; b++)
                    kb[h][b] = ok ? *(const uint4 *)(kc + base + (8 * h + g) * ldk + 32 * b + 8 * c)
                                  : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = 2 * c + (e & 1) + 8 * (e >> 1), key = 16 * j + row;
                bool ok = any && key < nk;
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
                    vb[e][hf] = ok ? *(const uint4 *)(vc + base + row * ldk + 64 * hf + 8 * g)
                                   : make_uint4(0u, 0u, 0u, 0u);
            }
        };
        auto tile = [&](int it, uint4 (*kb)[KC], uint4 (*vb)[2]) {
            int j = warp + VV_DEC_WARPS * it;
            float s[2][4];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                s[h][0] = s[h][1] = s[h][2] = s[h][3] = 0.0f;
#pragma unroll
                for (int st = 0; st < D / 16; st++) {
                    mma_bf16(s[h], qa[st], vv_tc_word(kb[h][st / 2], 2 * (st % 2)),
                             vv_tc_word(kb[h][st / 2], 2 * (st % 2) + 1));
                }
                s[h][0] += s[h][2], s[h][1] += s[h][3];
            }
            /* Head g's keys 16 j + 8 h + 2 c + e, e = 0, 1. */
            float mt = -INFINITY;
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    if (16 * j + 8 * h + 2 * c + e >= nk) s[h][e] = -INFINITY;
                    mt = fmaxf(mt, s[h][e]);
                }
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
            float mn = fmaxf(m, mt);
            float alpha = mn == -INFINITY ? 1.0f : ex2_ftz(m - mn); /* 0 while m is -inf */
            float p[2][2];
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < 2; e++) p[h][e] = s[h][e] == -INFINITY ? 0.0f : ex2_ftz(s[h][e] - mn);
            l = l * alpha + ((p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
            m = mn;
            if (__any_sync(0xffffffffu, alpha != 1.0f)) {
                /* The sums of heads 2 c and 2 c + 1 (columns of C). */
                float a0 = __shfl_sync(0xffffffffu, alpha, 8 * c), a1 = __shfl_sync(0xffffffffu, alpha, 8 * c + 4);
#pragma unroll
                for (int t = 0; t < D / 16; t++) acc[t][0] *= a0, acc[t][1] *= a1, acc[t][2] *= a0, acc[t][3] *= a1;
            }
            /* P^T in two parts, bf16 and what it left (a second product each). */
            uint32_t pb0 = pack_bf16(p[0][0], p[0][1]), pb1 = pack_bf16(p[1][0], p[1][1]);
            uint32_t pl0 = pack_bf16(p[0][0] - __uint_as_float(pb0 << 16), p[0][1] - __uint_as_float(pb0 & 0xffff0000u));
            uint32_t pl1 = pack_bf16(p[1][0] - __uint_as_float(pb1 << 16), p[1][1] - __uint_as_float(pb1 & 0xffff0000u));
#pragma unroll
            for (int t = 0; t < D / 16; t++) {
                unsigned sel = t & 1 ? 0x7632u : 0x5410u;
                uint32_t a[4] = {
                    __byte_perm(vv_tc_word(vb[0][0], t / 2), vv_tc_word(vb[1][0], t / 2), sel),
                    __byte_perm(vv_tc_word(vb[0][1], t / 2), vv_tc_word(vb[1][1], t / 2), sel),
                    __byte_perm(vv_tc_word(vb[2][0], t / 2), vv_tc_word(vb[3][0], t / 2), sel),
                    __byte_perm(vv_tc_word(vb[2][1], t / 2), vv_tc_word(vb[3][1], t / 2), sel)};
                mma_bf16(acc[t], a, pb0, pb1);
                mma_bf16(acc[t], a, pl0, pl1);
            }
        };
        uint4 kb0[2][KC], vb0[4][2], kb1[2][KC], vb1[4][2];
        vv_dec_two_in_flight(
            nt, [&](int it, int b) { load(it, b ? kb1 : kb0, b ? vb1 : vb0); },
            [&](int it, int b) { tile(it, b ? kb1 : kb0, b ? vb1 : vb0); });
        /* The warp's sums to shared memory: head g's max (natural log) and
         * sum; heads 2 c, 2 c + 1 of values 8 g + t and 64 + 8 g + t. */
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (c == 0) wm[warp][g] = m == -INFINITY ? m : m * 0.6931471805599453f, wl[warp][g] = l;
        float *rw = red + warp * 8 * D;
#pragma unroll
        for (int t = 0; t < D / 16; t++) {
            rw[(2 * c) * D + 8 * g + t] = acc[t][0], rw[(2 * c + 1) * D + 8 * g + t] = acc[t][1];
            rw[(2 * c) * D + 64 + 8 * g + t] = acc[t][2], rw[(2 * c + 1) * D + 64 + 8 * g + t] = acc[t][3];
        }
        __syncthreads();
        vv_dec_partial<D>(red, wm, wl, i, kh, G, nh, nsplit, sp, part, stat);
    }
    vv_dec_fold<D, GM>(part, stat, done, i, kh, G, nh, nkv, nsplit, n_keys, S, red, wt, &last, out);
}


/* --- prefill attention: query tiles against key tiles in shared memory -------------
 *
 * Many query rows (a prefill chunk): one block per (tile of rows, key head)
 * holds the rows x G query vectors of that key head's group; two threads
 * share a query vector (each half of its values, interleaved by float4 so
 * the pair reads different banks), keeping their half of q and of the output
 * in registers. The block walks the keys its last row sees in tiles of
 * VV_PF_BK rows of K and V staged in shared memory (read once for all the
 * block's vectors), with an online softmax: no score matrix, no scratch, the
 * same working set at any context length. Rows past a query's position are
 * masked (causal). */
#define VV_PF_THREADS 128
#define VV_PF_BK 32

template <int D, typename KV>
__global__ void __launch_bounds__(VV_PF_THREADS)
    k_vv_att_prefill(const float *__restrict__ q, int64_t T, const KV *__restrict__ kc,
                     const KV *__restrict__ vc, int64_t pos0, const int32_t *__restrict__ table,
                     int nh, int nkv, float scale, float *__restrict__ out) {
    constexpr int F = D / 4, NV = F / 2; /* float4s of a row, of a thread's half */
    __shared__ float4 ks[VV_PF_BK * F], vs[VV_PF_BK * F];
    int G = nh / nkv, rows = (VV_PF_THREADS / 2) / G, kh = blockIdx.y, tid = threadIdx.x;
    int vec = tid >> 1, half = tid & 1, rr = vec / G, g = vec % G;
    int64_t r0 = (int64_t)blockIdx.x * rows, row = r0 + rr;
    bool active = rr < rows && row < T;
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D;
    int64_t last = (r0 + rows < T ? r0 + rows : T) - 1;
    int64_t n_keys = pos0 + last + 1, my_keys = active ? pos0 + row + 1 : 0;
    float4 qv[NV], acc[NV];
    const float4 *qr = (const float4 *)(q + (active ? row : 0) * ldq + ((int64_t)kh * G + g) * D);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        float4 t = active ? qr[2 * k + half] : make_float4(0.f, 0.f, 0.f, 0.f);
        qv[k] = make_float4(t.x * scale, t.y * scale, t.z * scale, t.w * scale);
        acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t k0 = 0; k0 < n_keys; k0 += VV_PF_BK) {
        int nk = (int)(n_keys - k0 < VV_PF_BK ? n_keys - k0 : VV_PF_BK);
        __syncthreads();
        /* A tile lies inside one page (VV_PF_BK divides VV_SPLIT). */
        int64_t r0 = table ? (int64_t)table[k0 / VV_SPLIT] * VV_SPLIT + k0 % VV_SPLIT : k0;
        for (int e = tid; e < nk * F; e += VV_PF_THREADS) {
            int64_t j = e / F, c = e % F;
            ks[e] = kv4(kc + (r0 + j) * ldk + (int64_t)kh * D + 4 * c);
            vs[e] = kv4(vc + (r0 + j) * ldk + (int64_t)kh * D + 4 * c);
        }
        __syncthreads();
        float sc[VV_PF_BK];
        float mt = -INFINITY;
#pragma unroll
        for (int j = 0; j < VV_PF_BK; j++) {
            float a = 0.0f;
            if (j < nk) {
#pragma unroll
                for (int k = 0; k < NV; k++) {
                    float4 kk = ks[j * F + 2 * k + half];
                    a += qv[k].x * kk.x + qv[k].y * kk.y + qv[k].z * kk.z + qv[k].w * kk.w;
                }
            }
            a += __shfl_xor_sync(0xffffffffu, a, 1);
            sc[j] = j < nk && k0 + j < my_keys ? a : -INFINITY;
            mt = fmaxf(mt, sc[j]);
        }
        float mn = fmaxf(m, mt);
        if (mn == -INFINITY) continue; /* nothing visible yet (or an idle thread) */
        float alpha = expf(m - mn);    /* 0 while m is -inf */
        l *= alpha;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            acc[k].x *= alpha, acc[k].y *= alpha, acc[k].z *= alpha, acc[k].w *= alpha;
        }
#pragma unroll
        for (int j = 0; j < VV_PF_BK; j++) {
            if (j >= nk) break;
            float pj = expf(sc[j] - mn);
            l += pj;
#pragma unroll
            for (int k = 0; k < NV; k++) {
                float4 vv = vs[j * F + 2 * k + half];
                acc[k].x += pj * vv.x, acc[k].y += pj * vv.y, acc[k].z += pj * vv.z, acc[k].w += pj * vv.w;
            }
        }
        m = mn;
    }
    if (!active) return;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float4 *orow = (float4 *)(out + row * ldq + ((int64_t)kh * G + g) * D);
#pragma unroll
    for (int k = 0; k < NV; k++)
        orow[2 * k + half] = make_float4(acc[k].x * inv, acc[k].y * inv, acc[k].z * inv, acc[k].w * inv);
}


/* CHOIR_VV_ATT_V2 (k_vv_att_dec), its keys a split, whether the last
 * block combines and whether its warps keep the deeper ring
 * (CHOIR_VV_ATT_V2_DEEP): -1 until read from the environment (at the first
 * decode attention) or set. */
static int g_att_v2 = -1, g_att_v2_split = -1, g_att_v2_fold = -1, g_att_v2_deep = -1, g_att_tc = -1;
static int env_int(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}
static void att_v2_read_env(void) {
    if (g_att_v2 < 0) g_att_v2 = env_int("CHOIR_VV_ATT_V2", 1) != 0; /* on unless 0 (H100, 7 Dec 2026) */
    if (g_att_v2_split < 0) g_att_v2_split = env_int("CHOIR_VV_ATT_V2_SPLIT", 0);
    if (g_att_v2_fold < 0) g_att_v2_fold = env_int("CHOIR_VV_ATT_V2_FOLD", 1) != 0;
    if (g_att_v2_deep < 0) g_att_v2_deep = env_int("CHOIR_VV_ATT_V2_DEEP", 1) != 0; /* on unless 0 (H100, 7 Dec 2026) */
    if (g_att_tc < 0) g_att_tc = env_int("CHOIR_VV_ATT_TC", 0) != 0; /* NOT RUN ON A GPU: off unless 1 */
}

/* Keys a split of k_vv_att_dec: the set size (a multiple of 16) or, by
 * default, enough splits for about two blocks an SM over the rows and key
 * heads, in multiples of 32 keys (at least 64); at most VV_DEC_MAX_SPLITS splits (the
 * combine's) and VV_DEC_MAX_S keys a split. 0: the cache is too long. */
static int vv_dec_split(const choir_cuda *cu, int64_t T, int n_kv, int64_t max_keys) {
    int64_t S;
    if (g_att_v2_split > 0) {
        S = (g_att_v2_split + 15) / 16 * 16;
    } else {
        int64_t want = 2 * (int64_t)(cu->props.sm_count > 0 ? cu->props.sm_count : 132);
        int64_t per = T * n_kv, ns = (want + per - 1) / per;
        S = (max_keys + ns - 1) / ns;
        S = S < 64 ? 64 : (S + 31) / 32 * 32;
    }
    while ((max_keys + S - 1) / S > VV_DEC_MAX_SPLITS) S *= 2;
    return S > VV_DEC_MAX_S ? 0 : (int)S;
}

/* k_vv_att_dec_tc where it applies (bf16 K/V, 128 values, `on`): true when
 * launched. */
template <int DD, typename KT, int GG>
static bool att_dec_tc(bool on, bool pdl, dim3 grid, cudaStream_t stream, const float *q, const KT *kc,
                       const KT *vc, int64_t pos0, const int32_t *pos, const int32_t *table, int64_t table_stride,
                       int64_t max_keys, int n_heads, int n_kv, float scale, int S, int nsplit, float *part,
                       int *done, float *out) {
    if constexpr (sizeof(KT) == 2 && DD == VV_TC_D) {
        if (!on) return false;
        choir_cuda_launch_pdl(pdl, k_vv_att_dec_tc<GG>, grid, dim3(VV_DEC_THREADS), 0, stream, q,
                              (const __nv_bfloat16 *)kc, (const __nv_bfloat16 *)vc, pos0, pos, table, table_stride,
                              max_keys, n_heads, n_kv, scale, S, nsplit, part, done, out);
        return true;
    }
    return false;
}

/* k_vv_att_dec over heads of 64 or 128 values (D), groups of up to 8 query
 * heads, K and V 16-byte aligned; 1 when it does not apply (the caller
 * takes the split kernels). */
template <typename KV>
static int att_dec(choir_cuda *cu, const float *q, int64_t T, const KV *kc, const KV *vc, int64_t pos0,
                   const int32_t *pos, const int32_t *table, int64_t table_stride, int64_t max_keys, int n_heads,
                   int n_kv, int D, float *out, choir_err *err) {
    int G = n_heads / n_kv;
    if ((D != 128 && D != 64) || G > 8 || G * n_kv != n_heads || ((uintptr_t)kc | (uintptr_t)vc) % 16 ||
        ((uintptr_t)q | (uintptr_t)out) % 16 || max_keys < 1 || T > 65535 || n_kv > 65535)
        return 1;
    int S = vv_dec_split(cu, T, n_kv, max_keys);
    if (!S) return 1;
    int nsplit = (int)((max_keys + S - 1) / S);
    size_t bytes = (size_t)T * n_heads * nsplit * (D + 2) * sizeof(float);
    float *part = (float *)choir_cuda_scratch(cu, bytes, err);
    if (!part) return err ? err->code : CHOIR_ENOMEM;
    int *done = g_att_v2_fold && T * n_kv <= (int64_t)(cu->attn_done.bytes / sizeof(int)) ? (int *)cu->attn_done.ptr
                                                                                           : NULL;
    dim3 g1((unsigned)nsplit, (unsigned)n_kv, (unsigned)T), g2((unsigned)n_kv, (unsigned)T);
    float scale = 1.0f / sqrtf((float)D);
    /* CHOIR_VV_ATT_V2_DEEP's ring (the default): bf16 4 tiles, 2 a step;
     * f32 3 tiles, 1 a step (docs/cuda.md). */
    constexpr int DEEP_NB = sizeof(KV) == 2 ? 4 : 3, DEEP_U = sizeof(KV) == 2 ? 2 : 1;
    /* CHOIR_VV_ATT_TC: bf16 caches of 128-value heads on the tensor cores. */
    /* choir_cuda_pdl: launched to overlap the kernel before (they wait for it first). */
    const bool pdl = choir_cuda_pdl_mode(cu) > 0;
#define VV_DEC(DD, KT, GG)                                                                                      \
    do {                                                                                                        \
        if (!att_dec_tc<DD, KT, GG>(g_att_tc, pdl, g1, cu->stream, q, kc, vc, pos0, pos, table, table_stride,     \
                                    max_keys, n_heads, n_kv, scale, S, nsplit, part, done, out)) {              \
            if (!g_att_v2_deep)                                                                                 \
                choir_cuda_launch_pdl(pdl, k_vv_att_dec<DD, KT, GG, 2, 1>, g1, dim3(VV_DEC_THREADS), 0,         \
                                      cu->stream, q, kc, vc, pos0, pos, table, table_stride, max_keys, n_heads, \
                                      n_kv, scale, S, nsplit, part, done, out);                                 \
            else                                                                                                \
                choir_cuda_launch_pdl(pdl, k_vv_att_dec<DD, KT, GG, DEEP_NB, DEEP_U>, g1, dim3(VV_DEC_THREADS), \
                                      0, cu->stream, q, kc, vc, pos0, pos, table, table_stride, max_keys,       \
                                      n_heads, n_kv, scale, S, nsplit, part, done, out);                        \
        }                                                                                                       \
        if (!done) {                                                                                            \
            int rc_ = choir_cuda_check_launch(err, "vibevoice decode attention");                               \
            if (rc_) return rc_;                                                                                \
            choir_cuda_launch_pdl(pdl, k_vv_att_dec_combine<DD, GG>, g2, dim3(VV_DEC_THREADS), 0, cu->stream,   \
                                  part, pos0, pos, max_keys, n_heads, n_kv, S, nsplit, out);                    \
        }                                                                                                       \
    } while (0)
    if (D == 128 && G == 7) VV_DEC(128, KV, 7);
    else if (D == 128) VV_DEC(128, KV, 8);
    else VV_DEC(64, KV, 8);
#undef VV_DEC
    return choir_cuda_check_launch(err, done ? "vibevoice decode attention" : "vibevoice decode attention combine");
}

/* The split-keys attention: row i over keys 0 .. pos[i] (pos NULL: pos0 + i),
 * at most max_keys of them. */
template <typename KV>
static int att_split(choir_cuda *cu, const float *q, int64_t T, const KV *kc, const KV *vc,
                     int64_t pos0, const int32_t *pos, const int32_t *table, int64_t table_stride,
                     int64_t max_keys, int n_heads, int n_kv, int D, float *out, choir_err *err) {
    int64_t nsplit = (max_keys + VV_SPLIT - 1) / VV_SPLIT;
    if (nsplit < 1) nsplit = 1;
    if (nsplit > 65535 || T > 65535 || n_heads > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: attention of %lld rows over %lld keys",
                             (long long)T, (long long)max_keys);
    att_v2_read_env();
    if (g_att_v2) {
        int rc = att_dec(cu, q, T, kc, vc, pos0, pos, table, table_stride, max_keys, n_heads, n_kv, D, out, err);
        if (rc != 1) return rc;
    }
    size_t bytes = (size_t)T * n_heads * nsplit * (D + 2) * sizeof(float);
    float *part = (float *)choir_cuda_scratch(cu, bytes, err);
    if (!part) return err ? err->code : CHOIR_ENOMEM;
    dim3 g1((unsigned)nsplit, (unsigned)n_kv, (unsigned)T), g2((unsigned)T, (unsigned)n_heads);
    if (D == 128 && g_split128 && att_warps() == 8)
        k_vv_att_split128<KV, 8><<<g1, 32 * 8, 0, cu->stream>>>(
            q, kc, vc, pos0, pos, table, table_stride, max_keys, n_heads, n_kv,
            1.0f / sqrtf((float)D), (int)nsplit, part);
    else if (D == 128 && g_split128)
        k_vv_att_split128<KV, 4><<<g1, VV_SPLIT_THREADS, 0, cu->stream>>>(
            q, kc, vc, pos0, pos, table, table_stride, max_keys, n_heads, n_kv,
            1.0f / sqrtf((float)D), (int)nsplit, part);
    else
        k_vv_att_split<KV><<<g1, VV_SPLIT_THREADS, 0, cu->stream>>>(
            q, kc, vc, pos0, pos, table, table_stride, max_keys, n_heads, n_kv, D,
            1.0f / sqrtf((float)D), (int)nsplit, part);
    int rc = choir_cuda_check_launch(err, "vibevoice attention splits");
    if (rc) return rc;
    k_vv_att_combine<<<g2, D < 128 ? 128 : (D < 256 ? D : 256), 0, cu->stream>>>(part, n_heads, D,
                                                                              (int)nsplit, out);
    return choir_cuda_check_launch(err, "vibevoice attention combine");
}

/* The tiled prefill kernel for heads of 64 or 128 values (the caller checks
 * D and that a group fits a block), over contiguous caches or, with table,
 * over pages; or, when choir_cuda_vv_prefill_flash is on, the tensor-core
 * one (cuda_vv_flash.cu). */
template <typename KV>
static int att_prefill(choir_cuda *cu, const float *q, int64_t T, const KV *k, const KV *v,
                       int64_t pos0, const int32_t *table, int n_heads, int n_kv, int D, float *out,
                       choir_err *err, const char *what) {
    int rows = (VV_PF_THREADS / 2) / (n_heads / n_kv);
    int64_t tiles = (T + rows - 1) / rows;
    if (tiles > INT32_MAX || n_kv > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: attention of %lld rows", (long long)T);
    /* The tensor-core kernel when it is on (K and V rows 16-byte aligned for
     * its cp.async: every cache and pool is). */
    if (choir_cuda_vv_prefill_flash_on() && !(((uintptr_t)k | (uintptr_t)v) & 15) && (n_kv * D) % 8 == 0)
        return choir_cuda_vv_flash_prefill(cu, q, T, k, v, sizeof(KV) == 2, table, pos0, n_heads, n_kv, D, out,
                                           err);
    dim3 grid((unsigned)tiles, (unsigned)n_kv);
    float scale = 1.0f / sqrtf((float)D);
    if (D == 128)
        k_vv_att_prefill<128, KV><<<grid, VV_PF_THREADS, 0, cu->stream>>>(q, T, k, v, pos0, table, n_heads,
                                                                      n_kv, scale, out);
    else
        k_vv_att_prefill<64, KV><<<grid, VV_PF_THREADS, 0, cu->stream>>>(q, T, k, v, pos0, table, n_heads,
                                                                     n_kv, scale, out);
    return choir_cuda_check_launch(err, what);
}

template <typename KV>
static int att_paged(choir_cuda *cu, const float *q, int64_t T, const KV *kpool, const KV *vpool,
                     const int32_t *table, int64_t table_stride, int64_t pos0, const int32_t *pos,
                     int64_t max_keys, int n_heads, int n_kv, int D, float *out, choir_err *err) {
    int G = n_heads / n_kv;
    if (D > VV_ATT_MAX_D || D % 4 || G > VV_SPLIT_MAX_G)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: paged attention of %d heads over %d, %d values",
                             n_heads, n_kv, D);
    if (pos) return att_split(cu, q, T, kpool, vpool, 0, pos, table, table_stride, max_keys, n_heads, n_kv, D,
                              out, err);
    if (T <= VV_SPLIT_ROWS)
        return att_split(cu, q, T, kpool, vpool, pos0, NULL, table, 0, pos0 + T, n_heads, n_kv, D, out, err);
    if ((D != 128 && D != 64) || G > VV_PF_THREADS / 2)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: paged prefill attention of %d values, groups of %d",
                             D, G);
    return att_prefill(cu, q, T, kpool, vpool, pos0, table, n_heads, n_kv, D, out, err,
                       "vibevoice paged prefill attention");
}


/* --- a decoding step's rotations and new cache rows (choir_op_rope_kv_rows) ---------- */

/* One launch instead of k_rope_rows on q, k_rope_rows on k and
 * k_rows_scatter(_bf16) of k and of v: a block per (row, part of the heads),
 * VV_RKV_HEADS heads a part (q's heads, then k's) and its share of v's
 * values. Each block computes the row's angles into shared memory as
 * k_rope_rows does (cuda_rope_angles), then every (head, pair) of its heads
 * with k_rope_rows' expressions, so each rotated value is its float; a k
 * pair is also written to the cache row, rounded as k_rows_scatter_bf16
 * rounds when the cache holds bf16. In the 7B model's step (28 + 4 heads of
 * 128): 4 blocks of 256 threads, two pairs and 128 / 256 of v's values a
 * thread. */
#define VV_RKV_THREADS 256
#define VV_RKV_HEADS 8
#define VV_RKV_MAX_HALF (CHOIR_CUDA_VV_ROPE_KV_MAX_D / 2)

/* One pair rotated, x0 = a c - b s and x1 = b c + a s, as the PTX nvcc 13.0
 * emits for k_rope_rows' two expressions: two mul.f32 and a sub.f32, then
 * fma.rn.f32(a, s, b c). Written out because the same C expressions here
 * came out as fma(b, c, a s), another rounding of x1; with the same
 * instructions ptxas makes the same choices (its own contraction of the
 * mul.f32 and sub.f32 included), so each value is k_rope_rows' float
 * (vibevoice_gpu_check's rope_kv cases compare the two bit for bit). */
__device__ __forceinline__ void vv_rkv_rotate(float a, float b, float c, float s, float &x0, float &x1) {
    float ac, bs, bc;
    asm("mul.f32 %0, %1, %2;" : "=f"(ac) : "f"(a), "f"(c));
    asm("mul.f32 %0, %1, %2;" : "=f"(bs) : "f"(b), "f"(s));
    asm("sub.f32 %0, %1, %2;" : "=f"(x0) : "f"(ac), "f"(bs));
    asm("mul.f32 %0, %1, %2;" : "=f"(bc) : "f"(b), "f"(c));
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(x1) : "f"(a), "f"(s), "f"(bc));
}

/* Row r of a destination (k_rows_scatter's address: slot NULL is slot r). */
__device__ __forceinline__ int64_t vv_rkv_at(const choir_cuda_vv_rows_dst &d, int64_t r) {
    return (int64_t)(d.slot ? d.slot[r] : (int32_t)r) * d.slot_stride + (int64_t)d.pos[r] * d.ld;
}
/* Value x to element `at` of a destination: the float, or its bf16. */
__device__ __forceinline__ void vv_rkv_put(const choir_cuda_vv_rows_dst &d, int64_t at, float x) {
    if (d.bf16) ((__nv_bfloat16 *)d.dst)[at] = __float2bfloat16_rn(x);
    else ((float *)d.dst)[at] = x;
}

__global__ void __launch_bounds__(VV_RKV_THREADS)
    k_vv_rope_kv(float *q, float *k, const float *__restrict__ v, int64_t rows, int n_heads, int n_kv, int64_t Dh,
                 const int32_t *__restrict__ pos, float theta, choir_cuda_vv_rows_dst kd, choir_cuda_vv_rows_dst vd) {
    __shared__ float cs[VV_RKV_MAX_HALF], sn[VV_RKV_MAX_HALF];
    cuda_pdl_begin(); /* as the decode attention's kernels */
    int64_t half = Dh / 2, qd = (int64_t)n_heads * Dh, kvd = (int64_t)n_kv * Dh;
    int h0 = (int)blockIdx.y * VV_RKV_HEADS, h1 = h0 + VV_RKV_HEADS < n_heads + n_kv ? h0 + VV_RKV_HEADS
                                                                                    : n_heads + n_kv;
    int64_t vshare = (kvd + gridDim.y - 1) / gridDim.y, v0 = (int64_t)blockIdx.y * vshare;
    int64_t v1 = v0 + vshare < kvd ? v0 + vshare : kvd;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        __syncthreads(); /* the last row's angles are read */
        cuda_rope_angles(cs, sn, half, pos[r], theta);
        __syncthreads();
        int64_t kat = vv_rkv_at(kd, r), vat = vv_rkv_at(vd, r);
        for (int64_t t = threadIdx.x; t < (int64_t)(h1 - h0) * half; t += blockDim.x) {
            int64_t h = h0 + t / half, i = t % half;
            bool isq = h < n_heads;
            int64_t col = isq ? h * Dh : (h - n_heads) * Dh; /* within q's or k's row */
            float *xh = isq ? q + r * qd + col : k + r * kvd + col;
            float a = xh[i], b = xh[i + half], x0, x1;
            vv_rkv_rotate(a, b, cs[i], sn[i], x0, x1);
            xh[i] = x0;
            xh[i + half] = x1;
            if (!isq) {
                vv_rkv_put(kd, kat + col + i, x0);
                vv_rkv_put(kd, kat + col + i + half, x1);
            }
        }
        for (int64_t j = v0 + threadIdx.x; j < v1; j += blockDim.x) vv_rkv_put(vd, vat + j, v[r * kvd + j]);
    }
}


extern "C" {

void choir_cuda_vv_set_att_v2(bool on) { g_att_v2 = on; }
bool choir_cuda_vv_att_v2_on(void) {
    att_v2_read_env();
    return g_att_v2 == 1;
}
void choir_cuda_vv_set_att_v2_split(int keys) { g_att_v2_split = keys > 0 ? keys : 0; }
void choir_cuda_vv_set_att_v2_fold(bool on) { g_att_v2_fold = on; }
void choir_cuda_vv_set_att_v2_deep(bool on) { g_att_v2_deep = on; }
bool choir_cuda_vv_att_v2_deep_on(void) {
    att_v2_read_env();
    return g_att_v2_deep == 1;
}
void choir_cuda_vv_set_att_tc(bool on) { g_att_tc = on; }
bool choir_cuda_vv_att_tc_on(void) {
    att_v2_read_env();
    return g_att_tc == 1;
}

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

int choir_cuda_vv_dwconv_residual(choir_cuda *cu, const float *in, int64_t T, int64_t C, int kernel,
                                  const float *w, const float *b, const float *g, float *x, choir_err *err) {
    if (T <= 0 || C <= 0) return 0;
    k_vv_dwconv_residual<<<choir_cuda_blocks(T * C, VV_THREADS), VV_THREADS, 0, cu->stream>>>(in, T, C, kernel,
                                                                                            w, b, g, x);
    return choir_cuda_check_launch(err, "vibevoice depthwise conv and residual");
}

int choir_cuda_vv_attention(choir_cuda *cu, const float *q, int64_t T, const float *kc,
                            const float *vc, int64_t pos0, int n_heads, int n_kv, int D, float *out,
                            choir_err *err) {
    if (T <= 0) return 0;
    if (D > VV_ATT_MAX_D || D > 2 * VV_ATT_THREADS)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: attention heads of %d values", D);
    if (T > INT32_MAX || n_heads > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: attention of %lld rows", (long long)T);
    int G = n_heads / n_kv;
    if (T <= VV_SPLIT_ROWS && G <= VV_SPLIT_MAX_G && D % 4 == 0)
        return att_split(cu, q, T, kc, vc, pos0, NULL, NULL, 0, pos0 + T, n_heads, n_kv, D, out, err);
    if ((D == 128 || D == 64) && G <= VV_PF_THREADS / 2)
        return att_prefill(cu, q, T, kc, vc, pos0, NULL, n_heads, n_kv, D, out, err,
                           "vibevoice prefill attention");
    dim3 grid((unsigned)T, (unsigned)n_heads);
    k_vv_attention<<<grid, VV_ATT_THREADS, 0, cu->stream>>>(q, kc, vc, pos0, n_heads, n_kv, D,
                                                           1.0f / sqrtf((float)D), out);
    return choir_cuda_check_launch(err, "vibevoice attention");
}

int choir_cuda_vv_attention_at(choir_cuda *cu, const float *q, int64_t T, const float *kc,
                               const float *vc, const int32_t *pos, int64_t max_keys, int n_heads,
                               int n_kv, int D, float *out, choir_err *err) {
    if (T <= 0) return 0;
    if (D > VV_ATT_MAX_D || D % 4 || n_heads / n_kv > VV_SPLIT_MAX_G)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: attention of %d heads over %d, %d values",
                             n_heads, n_kv, D);
    return att_split(cu, q, T, kc, vc, 0, pos, NULL, 0, max_keys, n_heads, n_kv, D, out, err);
}

int choir_cuda_vv_attention_paged(choir_cuda *cu, const float *q, int64_t T, const void *kpool,
                                  const void *vpool, bool kv_bf16, const int32_t *table, int64_t table_stride,
                                  int64_t pos0, const int32_t *pos, int64_t max_keys, int n_heads,
                                  int n_kv, int D, float *out, choir_err *err) {
    if (T <= 0) return 0;
    if (kv_bf16)
        return att_paged(cu, q, T, (const __nv_bfloat16 *)kpool, (const __nv_bfloat16 *)vpool, table, table_stride,
                         pos0, pos, max_keys, n_heads, n_kv, D, out, err);
    return att_paged(cu, q, T, (const float *)kpool, (const float *)vpool, table, table_stride, pos0, pos,
                     max_keys, n_heads, n_kv, D, out, err);
}

int choir_cuda_vv_rope_kv(choir_cuda *cu, float *q, float *k, const float *v, int64_t T, int n_heads, int n_kv,
                          int64_t D, const int32_t *pos, float theta, const choir_cuda_vv_rows_dst *kd,
                          const choir_cuda_vv_rows_dst *vd, choir_err *err) {
    if (T <= 0) return 0;
    if (D <= 0 || D % 2 || D > CHOIR_CUDA_VV_ROPE_KV_MAX_D || n_heads <= 0 || n_kv <= 0 || !pos || !kd || !vd ||
        !kd->dst || !vd->dst || !kd->pos || !vd->pos)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: rope and cache rows of %d and %d heads of %lld values",
                             n_heads, n_kv, (long long)D);
    int parts = (n_heads + n_kv + VV_RKV_HEADS - 1) / VV_RKV_HEADS;
    if (parts > 65535) return choir_err_set(err, CHOIR_ETOOBIG, "cuda: rope over %d heads", n_heads + n_kv);
    dim3 grid((unsigned)(T < 65535 ? T : 65535), (unsigned)parts);
    choir_cuda_launch_pdl(choir_cuda_pdl_mode(cu) > 0, k_vv_rope_kv, grid, dim3(VV_RKV_THREADS),
                          0, cu->stream, q, k, v, T, n_heads, n_kv, D, pos, theta, *kd, *vd);
    return choir_cuda_check_launch(err, "vibevoice rope and cache rows");
}

} /* extern "C" */
