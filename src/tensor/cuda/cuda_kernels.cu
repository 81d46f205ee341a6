/* Elementwise, normalisation, conv1d and attention kernels. Each mirrors the
 * CPU reference in src/tensor/cpu with the same semantics; the check program
 * in tests/cuda holds them to it. */
#include <math.h>

#include <cuda_bf16.h>

#include "tensor/cuda/cuda_internal.h"

#define EW_THREADS 256
#define ROW_THREADS 256
#define ATTN_THREADS 256

/* --- elementwise --------------------------------------------------------- */

#define GRID_STRIDE(i, n)                                                                  \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_add(const float *a, const float *b, float *y, int64_t n) {
    GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void k_add_bias_rows(float *x, const float *bias, int64_t n, int64_t cols) {
    GRID_STRIDE(i, n) x[i] += bias[i % cols];
}

__global__ void k_gelu_erf(float *x, int64_t n) {
    GRID_STRIDE(i, n) {
        x[i] = cuda_gelu_erf(x[i]);
    }
}

__global__ void k_gelu_tanh(float *x, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

static int ew_launch_check(choir_err *err, const char *what) {
    return choir_cuda_check_launch(err, what);
}

int choir_cuda_add(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                   choir_err *err) {
    if (n <= 0) return 0;
    k_add<<<choir_cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cu->stream>>>(a, b, y, n);
    return ew_launch_check(err, "add");
}

int choir_cuda_add_bias_rows(choir_cuda *cu, float *x, const float *bias, int64_t rows,
                             int64_t cols, choir_err *err) {
    int64_t n = rows * cols;
    if (n <= 0) return 0;
    k_add_bias_rows<<<choir_cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cu->stream>>>(x, bias, n,
                                                                                    cols);
    return ew_launch_check(err, "add bias");
}

int choir_cuda_gelu_erf(choir_cuda *cu, float *x, int64_t n, choir_err *err) {
    if (n <= 0) return 0;
    k_gelu_erf<<<choir_cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cu->stream>>>(x, n);
    return ew_launch_check(err, "gelu");
}

int choir_cuda_gelu_tanh(choir_cuda *cu, float *x, int64_t n, choir_err *err) {
    if (n <= 0) return 0;
    k_gelu_tanh<<<choir_cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cu->stream>>>(x, n);
    return ew_launch_check(err, "gelu tanh");
}

/* 32x32 tiles through shared memory so that both the reads and the writes
 * are coalesced; the extra column avoids bank conflicts on the transposed read. */
__global__ void k_transpose_add(const float *__restrict__ src, int64_t R, int64_t C,
                                const float *__restrict__ add, float *__restrict__ dst) {
    __shared__ float tile[32][33];
    int64_t r0 = (int64_t)blockIdx.y * 32, c0 = (int64_t)blockIdx.x * 32;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        int64_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < R && c < C) tile[i][threadIdx.x] = src[r * C + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        int64_t c = c0 + i, r = r0 + threadIdx.x;
        if (r < R && c < C) {
            float v = tile[threadIdx.x][i];
            if (add) v += add[c * R + r];
            dst[c * R + r] = v;
        }
    }
}

int choir_cuda_transpose_add(choir_cuda *cu, const float *src, int64_t R, int64_t C,
                             const float *add, float *dst, choir_err *err) {
    if (R <= 0 || C <= 0) return 0;
    if ((R + 31) / 32 > 65535 || (C + 31) / 32 > INT32_MAX)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: transpose of %lld rows", (long long)R);
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)((R + 31) / 32)), block(32, 8);
    k_transpose_add<<<grid, block, 0, cu->stream>>>(src, R, C, add, dst);
    return choir_cuda_check_launch(err, "transpose");
}

/* --- block reductions ---------------------------------------------------- */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum (or max) over the block; every thread gets the result. `red` holds 32
 * floats of shared memory, reused by consecutive calls. */
__device__ float block_reduce(float v, float *red, bool is_max) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads(); /* red may still be read from a previous reduction */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? red[lane] : (is_max ? -INFINITY : 0.0f);
    return is_max ? warp_max(r) : warp_sum(r);
}

/* --- normalisation ------------------------------------------------------- */

/* Two passes for the variance (mean first) to match the reference's
 * accuracy on rows with a large mean. One block of ROW_THREADS per row
 * (choir_cuda_norm_linear's blocks compute the same statistics with as many
 * threads). */
__global__ void k_layer_norm(const float *x, float *y, int64_t dim, const float *gamma,
                             const float *beta, float eps) {
    __shared__ float red[32];
    cuda_ln_row(x + (int64_t)blockIdx.x * dim, dim, eps, red, gamma, beta,
                y + (int64_t)blockIdx.x * dim);
}

int choir_cuda_layer_norm(choir_cuda *cu, const float *x, float *y, int64_t rows, int64_t dim,
                          const float *gamma, const float *beta, float eps, choir_err *err) {
    if (rows <= 0 || dim <= 0) return 0;
    if (rows > INT32_MAX) return choir_err_set(err, CHOIR_ETOOBIG, "cuda: layer norm rows");
    k_layer_norm<<<(unsigned)rows, ROW_THREADS, 0, cu->stream>>>(x, y, dim, gamma, beta, eps);
    return choir_cuda_check_launch(err, "layer norm");
}

__global__ void k_softmax(float *x, int64_t dim) {
    __shared__ float red[32];
    float *xr = x + (int64_t)blockIdx.x * dim;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) mx = fmaxf(mx, xr[i]);
    mx = block_reduce(mx, red, true);
    if (mx == -INFINITY) { /* every entry masked, as the reference: zeros */
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) xr[i] = 0.0f;
        return;
    }
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float e = expf(xr[i] - mx);
        xr[i] = e;
        s += e;
    }
    float inv = 1.0f / block_reduce(s, red, false);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) xr[i] *= inv;
}

int choir_cuda_softmax(choir_cuda *cu, float *x, int64_t rows, int64_t dim, choir_err *err) {
    if (rows <= 0 || dim <= 0) return 0;
    if (rows > INT32_MAX) return choir_err_set(err, CHOIR_ETOOBIG, "cuda: softmax rows");
    k_softmax<<<(unsigned)rows, ROW_THREADS, 0, cu->stream>>>(x, dim);
    return choir_cuda_check_launch(err, "softmax");
}

/* --- conv1d -------------------------------------------------------------- */

/* One thread per output sample, time fastest: a warp shares its output
 * channel, so weight reads are broadcasts and input reads are contiguous
 * (for stride 1). */
__global__ void k_conv1d(const float *__restrict__ x, int64_t T, const float *__restrict__ w,
                         const float *__restrict__ bias, int64_t Cout, int64_t Tout, int64_t kernel,
                         int stride, int padding, int dilation, int64_t cin_g, int64_t cout_g,
                         float *__restrict__ y) {
    GRID_STRIDE(i, Cout * Tout) {
        int64_t co = i / Tout, t = i % Tout;
        int64_t ci0 = (co / cout_g) * cin_g;
        const float *wr = w + co * cin_g * kernel;
        int64_t t0 = t * stride - padding;
        float acc = bias ? bias[co] : 0.0f;
        for (int64_t ci = 0; ci < cin_g; ci++) {
            const float *xr = x + (ci0 + ci) * T;
            for (int64_t k = 0; k < kernel; k++) {
                int64_t ts = t0 + k * dilation;
                if (ts >= 0 && ts < T) acc += wr[ci * kernel + k] * xr[ts];
            }
        }
        y[i] = acc;
    }
}

/* cols[ci*K + k, t] = x[ci, t*stride - padding + k*dilation] (zero outside). */
__global__ void k_im2col(const float *__restrict__ x, int64_t T, int64_t kernel, int stride,
                         int padding, int dilation, int64_t rows, int64_t Tout,
                         float *__restrict__ cols) {
    GRID_STRIDE(i, rows * Tout) {
        int64_t r = i / Tout, t = i % Tout;
        int64_t ci = r / kernel, k = r % kernel;
        int64_t ts = t * stride - padding + k * dilation;
        cols[i] = ts >= 0 && ts < T ? x[ci * T + ts] : 0.0f;
    }
}

__global__ void k_channel_bias(float *y, const float *bias, int64_t n, int64_t Tout) {
    GRID_STRIDE(i, n) y[i] += bias[i / Tout];
}

int choir_cuda_conv1d(choir_cuda *cu, const float *x, int64_t Cin, int64_t T, const float *weight,
                      const float *bias, int64_t Cout, int64_t kernel, int stride, int padding,
                      int dilation, int groups, float *y, choir_err *err) {
    if (groups < 1 || Cin % groups || Cout % groups || stride < 1 || dilation < 1 || padding < 0 ||
        kernel < 1)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: conv1d with Cin %lld, Cout %lld, groups %d, stride %d, "
                             "dilation %d, padding %d, kernel %lld",
                             (long long)Cin, (long long)Cout, groups, stride, dilation, padding,
                             (long long)kernel);
    int64_t Tout = (T + 2 * (int64_t)padding - (int64_t)dilation * (kernel - 1) - 1) / stride + 1;
    if (T + 2 * (int64_t)padding - (int64_t)dilation * (kernel - 1) - 1 < 0 || Tout <= 0) return 0;
    int64_t rows = Cin * kernel;
    if (groups == 1 && rows >= 32) {
        /* im2col then one f32 GEMM: the tensor of taps [Cin*K, Tout] costs
         * kernel/stride times the input, and the product runs at cuBLAS speed. */
        float *cols = (float *)choir_cuda_scratch(cu, (size_t)(rows * Tout) * sizeof(float), err);
        if (!cols) return err ? err->code : CHOIR_ENOMEM;
        k_im2col<<<choir_cuda_blocks(rows * Tout, EW_THREADS), EW_THREADS, 0, cu->stream>>>(
            x, T, kernel, stride, padding, dilation, rows, Tout, cols);
        int rc = choir_cuda_check_launch(err, "im2col");
        if (!rc)
            rc = choir_cuda_gemm_f32(cu, false, false, Cout, Tout, rows, 1.0f, weight, rows, cols,
                                     Tout, 0.0f, y, Tout, err);
        if (rc || !bias) return rc;
        k_channel_bias<<<choir_cuda_blocks(Cout * Tout, EW_THREADS), EW_THREADS, 0, cu->stream>>>(
            y, bias, Cout * Tout, Tout);
        return choir_cuda_check_launch(err, "conv1d bias");
    }
    k_conv1d<<<choir_cuda_blocks(Cout * Tout, EW_THREADS), EW_THREADS, 0, cu->stream>>>(
        x, T, weight, bias, Cout, Tout, kernel, stride, padding, dilation, Cin / groups,
        Cout / groups, y);
    return choir_cuda_check_launch(err, "conv1d");
}

/* --- attention ----------------------------------------------------------- */

/* One block per (query row, head, sequence). Scores for all visible keys sit
 * in shared memory (one warp per key, lanes over Dh so key rows are read
 * contiguously); then softmax; then P*V with threads over Dh and key groups,
 * summed through shared memory. Shared floats: Tk + Dh + max(256, Dh) + 32. */
__device__ __forceinline__ float kv_f32(float x) { return x; }
__device__ __forceinline__ float kv_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename KV>
__global__ void k_attention(const float *__restrict__ q, int64_t ldq, int64_t q_batch,
                            const KV *__restrict__ k, int64_t ldk, const KV *__restrict__ v,
                            int64_t ldv, int64_t kv_batch, const int32_t *__restrict__ kv_slot,
                            const int32_t *__restrict__ kv_len, float *__restrict__ out, int64_t ldo, int64_t out_batch, int64_t Tq,
                            int64_t Tk, int64_t Dh, float scale, const float *__restrict__ mask,
                            bool causal) {
    extern __shared__ float smem[];
    int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int64_t nkv = kv_len ? (int64_t)kv_len[b] : Tk;
    if (nkv > Tk) nkv = Tk;
    float *scores = smem, *qs = smem + Tk, *part = qs + Dh;
    float *red = part + (Dh > 256 ? Dh : 256);
    const float *qr = q + b * q_batch + i * ldq + h * Dh;
    int64_t cache = kv_slot ? (int64_t)kv_slot[b] : b;
    const KV *kb = k + cache * kv_batch + h * Dh, *vb = v + cache * kv_batch + h * Dh;
    float *orow = out + b * out_batch + i * ldo + h * Dh;
    int64_t nk = nkv;
    if (causal) {
        nk = i + (nkv - Tq) + 1;
        nk = nk < 0 ? 0 : (nk > nkv ? nkv : nk);
    }
    for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) qs[d] = qr[d];
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    float mx = -INFINITY;
    for (int64_t key = warp; key < nk; key += nwarps) {
        const KV *kr = kb + key * ldk;
        float s = 0.0f;
        for (int64_t d = lane; d < Dh; d += 32) s += qs[d] * kv_f32(kr[d]);
        s = warp_sum(s) * scale;
        if (mask) s += mask[i * Tk + key];
        if (lane == 0) scores[key] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_reduce(mx, red, true); /* also orders the score writes */
    if (mx == -INFINITY) {
        for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) orow[d] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int64_t key = threadIdx.x; key < nk; key += blockDim.x) {
        float e = expf(scores[key] - mx);
        scores[key] = e;
        sum += e;
    }
    float inv = 1.0f / block_reduce(sum, red, false);
    int64_t groups = Dh <= blockDim.x ? blockDim.x / Dh : 1;
    int64_t g = threadIdx.x / (Dh <= blockDim.x ? Dh : blockDim.x);
    if (g < groups) {
        for (int64_t d = Dh <= blockDim.x ? threadIdx.x % Dh : threadIdx.x; d < Dh;
             d += (Dh <= blockDim.x ? Dh : blockDim.x)) {
            float acc = 0.0f;
            for (int64_t key = g; key < nk; key += groups)
                acc += scores[key] * kv_f32(vb[key * ldv + d]);
            part[g * Dh + d] = acc;
        }
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t gg = 0; gg < groups; gg++) acc += part[gg * Dh + d];
        orow[d] = acc * inv;
    }
}

static size_t attn_smem_bytes(int64_t Tk, int64_t Dh) {
    return (size_t)(Tk + Dh + (Dh > 256 ? Dh : 256) + 32) * sizeof(float);
}

int64_t choir_cuda_attention_max_keys(const choir_cuda *cu) {
    /* Stated for heads up to 256 wide. */
    return cu->props.smem_per_block_optin / (int64_t)sizeof(float) - 256 - 256 - 32;
}

/* Few query rows over many keys (a decoder step's cross-attention to a
 * 1500-position window, its self-attention over a long cache): one block per
 * row and head leaves the device nearly idle (20 blocks for one row of a
 * 20-head model) and walks the keys one warp at a time. Here the keys are
 * split into chunks of AS_SPLIT, one block per (chunk, head, row): each
 * thread scores one key (its whole row read with vector loads), the block
 * takes the chunk's maximum and exponential sum, then threads over Dh (in
 * AS_THREADS / Dh groups of keys) sum the chunk's weighted values. The chunk
 * writes its unnormalised output, maximum and sum; k_attention_combine
 * rescales the chunks to the common maximum and divides. Chunks past a row's
 * visible keys (kv_len, causal limit) write an empty partial, so the grid
 * depends only on Tk (what a captured graph needs). */
#define AS_SPLIT 128
#define AS_THREADS 128

template <typename KV> struct as_vec;
template <> struct as_vec<float> {
    /* 4 floats */
    static __device__ __forceinline__ void load(const float *p, float *o) {
        float4 t = *(const float4 *)p;
        o[0] = t.x, o[1] = t.y, o[2] = t.z, o[3] = t.w;
    }
    static constexpr int N = 4;
};
template <> struct as_vec<__nv_bfloat16> {
    /* 8 bf16 */
    static __device__ __forceinline__ void load(const __nv_bfloat16 *p, float *o) {
        uint4 t = *(const uint4 *)p;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&t;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __bfloat1622float2(h[j]);
            o[2 * j] = f.x, o[2 * j + 1] = f.y;
        }
    }
    static constexpr int N = 8;
};

/* Row r's head h of nh from its chunks' partials: rescaled to their common
 * maximum, summed and divided by the total weight; a row that sees no key
 * gets zeros (as k_attention). The block's threads stride the Dh values.
 * Partials are read through L2 (__ldcg): other blocks wrote them. */
__device__ __forceinline__ void attention_combine(const float *part, int nsplit, int64_t Dh,
                                                  int64_t Tq, int64_t r, int64_t h, int64_t nh,
                                                  float *__restrict__ out, int64_t ldo,
                                                  int64_t out_batch) {
    int64_t b = r / Tq, i = r % Tq;
    const float *pp = part + (r * nh + h) * nsplit * (Dh + 2);
    float mx = -INFINITY;
    for (int s = 0; s < nsplit; s++) mx = fmaxf(mx, __ldcg(pp + s * (Dh + 2) + Dh));
    float *orow = out + b * out_batch + i * ldo + h * Dh;
    if (mx == -INFINITY) {
        for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) orow[d] = 0.0f;
        return;
    }
    float l = 0.0f;
    for (int s = 0; s < nsplit; s++) {
        float m = __ldcg(pp + s * (Dh + 2) + Dh);
        if (m != -INFINITY) l += __ldcg(pp + s * (Dh + 2) + Dh + 1) * expf(m - mx);
    }
    float inv = 1.0f / l;
    for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) {
        float a = 0.0f;
        for (int s = 0; s < nsplit; s++) {
            float m = __ldcg(pp + s * (Dh + 2) + Dh);
            if (m != -INFINITY) a += __ldcg(pp + s * (Dh + 2) + d) * expf(m - mx);
        }
        orow[d] = a * inv;
    }
}

/* The end of a chunk's block when chunk counters are given: the block's
 * partial made visible, the (row, head)'s counter counted up, and the block
 * that counts last combines the chunks (what k_attention_combine does, one
 * launch fewer) and sets the counter back to 0 for the next call. Every
 * thread of the block calls it. */
__device__ __forceinline__ void attention_split_done(const float *part, int nsplit, int64_t Dh,
                                                     int64_t Tq, int64_t r, int64_t h, int64_t nh,
                                                     int *done, float *__restrict__ out,
                                                     int64_t ldo, int64_t out_batch) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&done[r * nh + h], 1) == nsplit - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    attention_combine(part, nsplit, Dh, Tq, r, h, nh, out, ldo, out_batch);
    if (threadIdx.x == 0) done[r * nh + h] = 0;
}

template <typename KV, int DH>
__global__ void __launch_bounds__(AS_THREADS)
    k_attention_split(const float *__restrict__ q, int64_t ldq, int64_t q_batch,
                      const KV *__restrict__ k, int64_t ldk, const KV *__restrict__ v, int64_t ldv,
                      int64_t kv_batch, const int32_t *__restrict__ kv_slot,
                      const int32_t *__restrict__ kv_len, int64_t Tq, int64_t Tk, float scale,
                      bool causal, int nsplit, float *__restrict__ part, int *__restrict__ done,
                      float *__restrict__ out, int64_t ldo, int64_t out_batch) {
    __shared__ __align__(16) float qs[DH];
    __shared__ float sc[AS_SPLIT];
    __shared__ float red[AS_THREADS / 32];
    __shared__ float acc_s[AS_THREADS / (DH / as_vec<KV>::N)][DH];
    int sp = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int64_t h = blockIdx.y, r = blockIdx.z, b = r / Tq, i = r % Tq;
    int64_t nkv = kv_len ? (int64_t)kv_len[b] : Tk;
    if (nkv > Tk) nkv = Tk;
    int64_t nk = nkv;
    if (causal) {
        nk = i + (nkv - Tq) + 1;
        nk = nk < 0 ? 0 : (nk > nkv ? nkv : nk);
    }
    int64_t k0 = (int64_t)sp * AS_SPLIT;
    int cnt = (int)(nk - k0 < AS_SPLIT ? nk - k0 : AS_SPLIT);
    int nh = gridDim.y;
    float *pp = part + ((r * nh + h) * nsplit + sp) * (int64_t)(DH + 2);
    if (cnt <= 0) {
        if (tid == 0) pp[DH] = -INFINITY, pp[DH + 1] = 0.0f;
        if (done) attention_split_done(part, nsplit, DH, Tq, r, h, nh, done, out, ldo, out_batch);
        return;
    }
    const float *qr = q + b * q_batch + i * ldq + h * DH;
    for (int d = tid; d < DH; d += AS_THREADS) qs[d] = qr[d];
    __syncthreads();
    int64_t cache = kv_slot ? (int64_t)kv_slot[b] : b;
    const KV *kb = k + cache * kv_batch + h * DH + k0 * ldk;
    const KV *vb = v + cache * kv_batch + h * DH + k0 * ldv;

    /* The chunk's value rows (head slice: DH values) go to L2 now, so that
     * the weighted sum after the softmax does not wait on DRAM again (few
     * rows only: attention_split_folds). */
    if (done && tid < cnt)
        for (int o = 0; o < DH * (int)sizeof(KV); o += 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)(vb + (int64_t)tid * ldv) + o));
    float s = -INFINITY;
    if (tid < cnt) {
        constexpr int N = as_vec<KV>::N;
        const KV *kr = kb + (int64_t)tid * ldk;
        float kv[DH];
#pragma unroll
        for (int d = 0; d < DH; d += N) as_vec<KV>::load(kr + d, kv + d);
        float a = 0.0f;
#pragma unroll
        for (int d = 0; d < DH; d++) a += qs[d] * kv[d];
        s = a * scale;
        sc[tid] = s;
    }
    float mx = warp_max(s);
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    mx = red[0];
#pragma unroll
    for (int w = 1; w < AS_THREADS / 32; w++) mx = fmaxf(mx, red[w]);
    float e = tid < cnt ? expf(s - mx) : 0.0f;
    if (tid < cnt) sc[tid] = e;
    float sum = warp_sum(e);
    __syncthreads(); /* red read above; sc written */
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    sum = 0.0f;
#pragma unroll
    for (int w = 0; w < AS_THREADS / 32; w++) sum += red[w];

    /* Weighted values: TPK threads per key, each over N consecutive values
     * (one vector load), KP keys at a time; the KP partial rows are summed
     * through shared memory. */
    constexpr int N = as_vec<KV>::N, TPK = DH / N, KP = AS_THREADS / TPK;
    int kg = tid / TPK, d0 = (tid % TPK) * N;
    float acc[N];
#pragma unroll
    for (int u = 0; u < N; u++) acc[u] = 0.0f;
#pragma unroll 4
    for (int j = kg; j < cnt; j += KP) {
        float vv[N];
        as_vec<KV>::load(vb + (int64_t)j * ldv + d0, vv);
        float p = sc[j];
#pragma unroll
        for (int u = 0; u < N; u++) acc[u] += p * vv[u];
    }
#pragma unroll
    for (int u = 0; u < N; u++) acc_s[kg][d0 + u] = acc[u];
    __syncthreads();
    for (int dd = tid; dd < DH; dd += AS_THREADS) {
        float a = 0.0f;
#pragma unroll
        for (int gg = 0; gg < KP; gg++) a += acc_s[gg][dd];
        pp[dd] = a;
    }
    if (tid == 0) pp[DH] = mx, pp[DH + 1] = sum;
    if (done) attention_split_done(part, nsplit, DH, Tq, r, h, nh, done, out, ldo, out_batch);
}

/* One block of Dh threads per (row, head): the chunks of attention_combine
 * (below) as a kernel of their own, when no chunk counters are at hand. */
__global__ void k_attention_combine(const float *__restrict__ part, int nsplit, int64_t Dh,
                                    int64_t Tq, float *__restrict__ out, int64_t ldo,
                                    int64_t out_batch) {
    attention_combine(part, nsplit, Dh, Tq, blockIdx.x, blockIdx.y, gridDim.y, out, ldo,
                      out_batch);
}

/* Whether the split path serves this call: few query rows, enough keys to
 * split, heads of 64 or 128 values, rows aligned for the vector loads, no
 * additive mask, and the partials' scratch already there or growable now
 * (never while a stream is being captured or graphs hold its address). */
static bool g_attention_split = true;
void choir_cuda_attention_set_split(bool on) { g_attention_split = on; }

/* Whether the last chunk of each (row, head) combines the chunks (and the
 * value rows go to L2 early): for a few query rows (a batch-1 decoder step,
 * a short prompt), where the second launch is a good part of the cost. For
 * more rows it did not pay: with the fold and the early value rows at every
 * row count, batch-8 and batch-32 large-v3-turbo steps measured 0.49 -> 0.51
 * and 0.87 -> 0.93 ms (H100, 6 Dec 2026; the two not told apart), so there
 * the combine stays a kernel of its own. */
#define AS_FOLD_ROWS 4
static bool attention_split_folds(const choir_cuda *cu, int64_t rows, int n_head) {
    return rows <= AS_FOLD_ROWS && rows * n_head <= (int64_t)(cu->attn_done.bytes / sizeof(int));
}

template <typename KV>
static float *attention_split_scratch(choir_cuda *cu, int64_t rows, int n_head, int64_t Dh,
                                      int64_t Tk, const float *mask, const KV *k, int64_t ldk,
                                      const KV *v, int64_t ldv, int64_t kv_batch, int *nsplit) {
    /* From two chunks; from half a chunk when the chunks combine themselves
     * (one kernel: a short cache's scores all at once, one key a thread,
     * instead of one warp walking the keys). */
    bool fold = attention_split_folds(cu, rows, n_head);
    if (!g_attention_split || mask || (Dh != 64 && Dh != 128) ||
        Tk < (fold ? AS_SPLIT / 2 : 2 * AS_SPLIT) || rows > 65535)
        return NULL;
    int64_t vec = 16 / (int64_t)sizeof(KV);
    if (((uintptr_t)k | (uintptr_t)v) % 16 || ldk % vec || ldv % vec || kv_batch % vec) return NULL;
    int64_t ns = (Tk + AS_SPLIT - 1) / AS_SPLIT;
    size_t bytes = (size_t)(rows * n_head * ns) * (size_t)(Dh + 2) * sizeof(float);
    if (cu->scratch.bytes < bytes) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(cu->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone ||
            __atomic_load_n(&cu->live_graphs, __ATOMIC_RELAXED) > 0)
            return NULL;
    }
    float *part = (float *)choir_cuda_scratch(cu, bytes, NULL);
    *nsplit = (int)ns;
    return part;
}

template <typename KV, int DH>
static int attention_split_launch(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                                  int64_t q_batch, const KV *k, int64_t ldk, const KV *v,
                                  int64_t ldv, int64_t kv_batch, const int32_t *kv_slot,
                                  const int32_t *kv_len, float *out, int64_t ldo, int64_t out_batch,
                                  int64_t Tq, int64_t Tk, int n_head, float scale, bool causal,
                                  int nsplit, float *part, choir_err *err) {
    dim3 g1((unsigned)nsplit, (unsigned)n_head, (unsigned)(B * Tq)), g2((unsigned)(B * Tq), (unsigned)n_head);
    int *done = attention_split_folds(cu, B * Tq, n_head) ? (int *)cu->attn_done.ptr : NULL;
    k_attention_split<KV, DH><<<g1, AS_THREADS, 0, cu->stream>>>(
        q, ldq, q_batch, k, ldk, v, ldv, kv_batch, kv_slot, kv_len, Tq, Tk, scale, causal, nsplit,
        part, done, out, ldo, out_batch);
    int rc = choir_cuda_check_launch(err, "attention splits");
    if (rc || done) return rc;
    k_attention_combine<<<g2, DH, 0, cu->stream>>>(part, nsplit, DH, Tq, out, ldo, out_batch);
    return choir_cuda_check_launch(err, "attention combine");
}

template <typename KV>
static int attention_launch(choir_cuda *cu, int64_t B, const float *q, int64_t ldq, int64_t q_batch,
                            const KV *k, int64_t ldk, const KV *v, int64_t ldv,
                            int64_t kv_batch, const int32_t *kv_slot, const int32_t *kv_len,
                            float *out, int64_t ldo, int64_t out_batch, int64_t Tq, int64_t Tk,
                            int n_head, int64_t Dh, float scale, const float *mask, bool causal,
                            choir_err *err) {
    if (Tq <= 0 || n_head <= 0 || Dh <= 0 || B <= 0) return 0;
    if (Tk < 0 || Tq > INT32_MAX || n_head > 65535 || B > 65535)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: attention shape Tq %lld, heads %d, batch %lld",
                             (long long)Tq, n_head, (long long)B);
    if (Tq <= 8 && n_head <= 65535) {
        int nsplit = 0;
        float *part = attention_split_scratch(cu, B * Tq, n_head, Dh, Tk, mask, k, ldk, v, ldv,
                                              kv_batch, &nsplit);
        if (part && Dh == 64)
            return attention_split_launch<KV, 64>(cu, B, q, ldq, q_batch, k, ldk, v, ldv, kv_batch,
                                                  kv_slot, kv_len, out, ldo, out_batch, Tq, Tk,
                                                  n_head, scale, causal, nsplit, part, err);
        if (part)
            return attention_split_launch<KV, 128>(cu, B, q, ldq, q_batch, k, ldk, v, ldv, kv_batch,
                                                   kv_slot, kv_len, out, ldo, out_batch, Tq, Tk,
                                                   n_head, scale, causal, nsplit, part, err);
    }
    size_t smem = attn_smem_bytes(Tk, Dh);
    if ((int64_t)smem > cu->props.smem_per_block_optin)
        return choir_err_set(err, CHOIR_ETOOBIG,
                             "cuda: attention over %lld keys (head %lld) needs %zu bytes of shared "
                             "memory, the device has %lld",
                             (long long)Tk, (long long)Dh, smem,
                             (long long)cu->props.smem_per_block_optin);
    if (smem > 48 * 1024) {
        cudaError_t st = cudaFuncSetAttribute(k_attention<KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem);
        if (st != cudaSuccess) return choir_cuda_fail(err, st, "attention shared memory");
    }
    dim3 grid((unsigned)Tq, (unsigned)n_head, (unsigned)B);
    k_attention<KV><<<grid, ATTN_THREADS, smem, cu->stream>>>(q, ldq, q_batch, k, ldk, v, ldv, kv_batch,
                                                         kv_slot, kv_len, out, ldo, out_batch, Tq, Tk, Dh,
                                                         scale, mask, causal);
    return choir_cuda_check_launch(err, "attention");
}

/* Softmax of the score rows S[h][i][:] after the additive mask and the causal
 * limit, in place; a row with no visible key becomes zeros. One block per row. */
__global__ void k_attn_softmax(float *S, int64_t Tq, int64_t Tk, const float *__restrict__ mask,
                               bool causal) {
    __shared__ float red[32];
    int64_t row = blockIdx.x, i = row % Tq;
    float *sr = S + row * Tk;
    int64_t vis = Tk;
    if (causal) {
        vis = i + (Tk - Tq) + 1;
        vis = vis < 0 ? 0 : (vis > Tk ? Tk : vis);
    }
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) {
        float v = j < vis ? sr[j] + (mask ? mask[i * Tk + j] : 0.0f) : -INFINITY;
        sr[j] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_reduce(mx, red, true);
    if (mx == -INFINITY) {
        for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) sr[j] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) {
        float e = expf(sr[j] - mx);
        sr[j] = e;
        sum += e;
    }
    float inv = 1.0f / block_reduce(sum, red, false);
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) sr[j] *= inv;
}

/* Long query blocks (an encoder window, a prompt): scores of every head with
 * one strided-batched f32 GEMM into scratch [n_head, Tq, Tk], the softmax
 * kernel, and a second batched GEMM with V. Heads sit Dh apart in each row. */
static int attention_gemm(choir_cuda *cu, const float *q, int64_t ldq, const float *k, int64_t ldk,
                          const float *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                          int64_t Tk, int n_head, int64_t Dh, float scale, const float *mask,
                          bool causal, choir_err *err) {
    float *S = (float *)choir_cuda_scratch(cu, (size_t)(n_head * Tq * Tk) * sizeof(float), err);
    if (!S) return err ? err->code : CHOIR_ENOMEM;
    const float zero = 0.0f, one = 1.0f;
    /* Row-major S_h = Q_h K_h^T is column-major S_h^T = K_h Q_h^T. */
    cublasStatus_t st = cublasSgemmStridedBatched(
        cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)Tk, (int)Tq, (int)Dh, &scale, k, (int)ldk, Dh, q,
        (int)ldq, Dh, &zero, S, (int)Tk, Tq * Tk, n_head);
    if (st != CUBLAS_STATUS_SUCCESS) return choir_cuda_blas_fail(err, st, "attention scores");
    k_attn_softmax<<<(unsigned)(n_head * Tq), ROW_THREADS, 0, cu->stream>>>(S, Tq, Tk, mask, causal);
    int rc = choir_cuda_check_launch(err, "attention softmax");
    if (rc) return rc;
    /* Row-major O_h = P_h V_h is column-major O_h^T = V_h^T P_h^T. */
    st = cublasSgemmStridedBatched(cu->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)Dh, (int)Tq, (int)Tk,
                                   &one, v, (int)ldv, Dh, S, (int)Tk, Tq * Tk, &zero, out,
                                   (int)ldo, Dh, n_head);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : choir_cuda_blas_fail(err, st, "attention values");
}

/* From this many query rows on, the GEMM path wins over one block per row. */
#define ATTN_GEMM_MIN_QUERIES 32

int choir_cuda_attention(choir_cuda *cu, const float *q, int64_t ldq, const float *k, int64_t ldk,
                         const float *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                         int64_t Tk, int n_head, int64_t Dh, float scale, const float *mask,
                         bool causal, choir_err *err) {
    if (Tq >= ATTN_GEMM_MIN_QUERIES && Tk > 0 && n_head > 0 && Dh > 0 && Tq <= INT32_MAX &&
        Tk <= INT32_MAX && n_head * Tq <= INT32_MAX)
        return attention_gemm(cu, q, ldq, k, ldk, v, ldv, out, ldo, Tq, Tk, n_head, Dh, scale,
                              mask, causal, err);
    return attention_launch(cu, 1, q, ldq, 0, k, ldk, v, ldv, 0, NULL, NULL, out, ldo, 0, Tq, Tk,
                            n_head, Dh, scale, mask, causal, err);
}

int choir_cuda_attention_batched(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                                 int64_t q_batch, const float *k, int64_t ldk, const float *v,
                                 int64_t ldv, int64_t kv_batch, const int32_t *kv_len, float *out,
                                 int64_t ldo, int64_t out_batch, int64_t Tq, int64_t Tk,
                                 int n_head, int64_t Dh, float scale, bool causal,
                                 choir_err *err) {
    return attention_launch(cu, B, q, ldq, q_batch, k, ldk, v, ldv, kv_batch, NULL, kv_len, out,
                            ldo, out_batch, Tq, Tk, n_head, Dh, scale, NULL, causal, err);
}

int choir_cuda_attention_slots(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                               int64_t q_batch, const float *k, int64_t ldk, const float *v,
                               int64_t ldv, int64_t slot_stride, const int32_t *kv_slot,
                               const int32_t *kv_len, float *out, int64_t ldo, int64_t out_batch,
                               int64_t Tq, int64_t Tk, int n_head, int64_t Dh, float scale,
                               bool causal, choir_err *err) {
    return attention_launch(cu, B, q, ldq, q_batch, k, ldk, v, ldv, slot_stride, kv_slot, kv_len,
                            out, ldo, out_batch, Tq, Tk, n_head, Dh, scale, NULL, causal, err);
}

int choir_cuda_attention_kv16(choir_cuda *cu, const float *q, int64_t ldq, const uint16_t *k,
                              int64_t ldk, const uint16_t *v, int64_t ldv, float *out, int64_t ldo,
                              int64_t Tq, int64_t Tk, int n_head, int64_t Dh, float scale,
                              const float *mask, bool causal, choir_err *err) {
    return attention_launch(cu, 1, q, ldq, 0, (const __nv_bfloat16 *)k, ldk,
                            (const __nv_bfloat16 *)v, ldv, 0, NULL, NULL, out, ldo, 0, Tq, Tk,
                            n_head, Dh, scale, mask, causal, err);
}

int choir_cuda_attention_slots_kv16(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                                    int64_t q_batch, const uint16_t *k, int64_t ldk,
                                    const uint16_t *v, int64_t ldv, int64_t slot_stride,
                                    const int32_t *kv_slot, const int32_t *kv_len, float *out,
                                    int64_t ldo, int64_t out_batch, int64_t Tq, int64_t Tk,
                                    int n_head, int64_t Dh, float scale, bool causal,
                                    choir_err *err) {
    return attention_launch(cu, B, q, ldq, q_batch, (const __nv_bfloat16 *)k, ldk,
                            (const __nv_bfloat16 *)v, ldv, slot_stride, kv_slot, kv_len, out, ldo,
                            out_batch, Tq, Tk, n_head, Dh, scale, NULL, causal, err);
}

/* --- cache rows ------------------------------------------------------------ */

/* One block per row b: dst[slot[b]*slot_stride + pos[b]*ld ...] = src[b]. */
__global__ void k_rows_scatter(const float *__restrict__ src, int64_t cols, float *__restrict__ dst,
                               int64_t slot_stride, int64_t ld, const int32_t *__restrict__ slot,
                               const int32_t *__restrict__ pos) {
    int64_t b = blockIdx.x;
    const float *s = src + b * cols;
    float *d = dst + (int64_t)slot[b] * slot_stride + (int64_t)pos[b] * ld;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

int choir_cuda_rows_scatter(choir_cuda *cu, const float *src, int64_t B, int64_t cols, float *dst,
                            int64_t slot_stride, int64_t ld, const int32_t *slot,
                            const int32_t *pos, choir_err *err) {
    if (B <= 0 || cols <= 0) return 0;
    if (B > INT32_MAX) return choir_err_set(err, CHOIR_EINVAL, "cuda: scatter of %lld rows", (long long)B);
    k_rows_scatter<<<(unsigned)B, EW_THREADS, 0, cu->stream>>>(src, cols, dst, slot_stride, ld, slot,
                                                               pos);
    return choir_cuda_check_launch(err, "rows scatter");
}

__global__ void k_rows_scatter_bf16(const float *__restrict__ src, int64_t cols,
                                    __nv_bfloat16 *__restrict__ dst, int64_t slot_stride,
                                    int64_t ld, const int32_t *__restrict__ slot,
                                    const int32_t *__restrict__ pos) {
    int64_t b = blockIdx.x;
    const float *s = src + b * cols;
    __nv_bfloat16 *d = dst + (int64_t)slot[b] * slot_stride + (int64_t)pos[b] * ld;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = __float2bfloat16_rn(s[c]);
}

int choir_cuda_rows_scatter_bf16(choir_cuda *cu, const float *src, int64_t B, int64_t cols,
                                 uint16_t *dst, int64_t slot_stride, int64_t ld,
                                 const int32_t *slot, const int32_t *pos, choir_err *err) {
    if (B <= 0 || cols <= 0) return 0;
    if (B > INT32_MAX) return choir_err_set(err, CHOIR_EINVAL, "cuda: scatter of %lld rows", (long long)B);
    k_rows_scatter_bf16<<<(unsigned)B, EW_THREADS, 0, cu->stream>>>(
        src, cols, (__nv_bfloat16 *)dst, slot_stride, ld, slot, pos);
    return choir_cuda_check_launch(err, "rows scatter");
}

int choir_cuda_copy(choir_cuda *cu, void *dst, const void *src, size_t bytes, choir_err *err) {
    if (bytes == 0) return 0;
    cudaError_t st = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu->stream);
    return st == cudaSuccess ? 0 : choir_cuda_fail(err, st, "device copy");
}
