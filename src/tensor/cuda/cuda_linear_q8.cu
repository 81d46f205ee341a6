/* 8-bit MLX weights (affine groups of 32, 64 or 128, scales and biases in
 * bf16, f16 or f32) times a few rows of x: the decode step's products over
 * an 8-bit language model, with the RMS norm before them fused as
 * norm_gemv fuses it for bf16 weights. Off by default (choir_cuda_q8_gemv):
 * gemv_quant in cuda_linear.cu is the path otherwise.
 *
 * gemv_quant gives a lane 32 codes per chunk through scalar loads and reads
 * x from global memory for every weight row; it streamed 327-790 GB/s in
 * the Whisper sizes on an H100. Here, as in the bf16 GEMV that reached the
 * weight-streaming bound within 1.5x:
 *  - a lane loads 16 codes at a time (16 bytes, ld.global.nc with the
 *    L1::no_allocate.L2::256B hint), so a warp reads 512 contiguous bytes
 *    of a row per step, and keeps two batches of U steps in flight for each
 *    of its NR rows (the scale and bias of each chunk's group loaded with
 *    them);
 *  - x (normalised, when fused with the norm) is staged once per block in
 *    shared memory, permuted so that the four float4 a lane reads for its
 *    16 codes are, for each of the four, consecutive across the warp's
 *    lanes (no bank conflicts): column c = 512 s + 16 l + 4 k + e lives at
 *    512 s + 128 k + 4 l + e;
 *  - a code becomes a float with one byte permute and one subtraction
 *    (0x4B0000nn is 2^23 + nn), and the products add in f32 as
 *    sum_i (s q_i + b) x_i = s (sum_i q_i x_i) + b (sum_i x_i) per 16 codes.
 * Rows x past what shared memory takes (M K floats above Q8_SMEM_MAX) are
 * read from global memory instead (same floats). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "choir/cuda_q8.h"
#include "tensor/cuda/cuda_internal.h"

#define Q8_THREADS 256
#define Q8_WARPS (Q8_THREADS / 32)
#define Q8_MAX_ROWS 8
#define Q8_SMEM_MAX (128 * 1024)

/* --- device code (tests/cuda/emu/q8_emu.cpp cuts it out from here) ------------------- */

/* The arguments by value: up to CHOIR_CUDA_NORM_LINEAR_MAX layers of the
 * same width K stacked (row r of the stack is row r - start[i] of layer i). */
struct q8_args {
    const uint32_t *W[CHOIR_CUDA_NORM_LINEAR_MAX]; /* [rows_i, K / 4] words, 4 codes each */
    const void *scales[CHOIR_CUDA_NORM_LINEAR_MAX], *biases[CHOIR_CUDA_NORM_LINEAR_MAX]; /* [rows_i, K / G] */
    const float *bias[CHOIR_CUDA_NORM_LINEAR_MAX];
    float *y[CHOIR_CUDA_NORM_LINEAR_MAX];
    int64_t start[CHOIR_CUDA_NORM_LINEAR_MAX + 1];
    choir_cuda_rows_out store[CHOIR_CUDA_NORM_LINEAR_MAX];
    int n;
    int sb_dtype;     /* choir_dtype of the scales and biases */
    int group_shift;  /* log2(G / 16): a 16-code chunk's group is chunk >> group_shift */
    int epilogue;     /* 0: y = the product (+ bias); 1: y += it; 2: y = GELU_erf(it) */
};

/* Where column c of a staged row lives (see the top of the file). */
__device__ __forceinline__ int64_t q8_xpos(int64_t c) {
    const int i = (int)(c & 511);
    return (c & ~(int64_t)511) + ((i & 15) >> 2) * 128 + (i >> 4) * 4 + (i & 3);
}

/* 1 / RMS of row xr (K values) over the block, as choir_cuda_rms_norm
 * computes it (double sums); red: the block's 32 doubles of scratch.
 * Thread t sums elements t, t + 256, ... in that order whatever BATCH,
 * the loads it has in flight at a time (shape 8: 8), so every BATCH gives
 * the same float. */
template <int BATCH = 1>
__device__ __forceinline__ float q8_rms_inv(const float *xr, int64_t K, float eps, double *red) {
    double ss = 0;
    for (int64_t i0 = threadIdx.x; i0 < K; i0 += BATCH * Q8_THREADS) {
        float v[BATCH];
#pragma unroll
        for (int n = 0; n < BATCH; n++) {
            const int64_t i = i0 + (int64_t)n * Q8_THREADS;
            v[n] = i < K ? xr[i] : 0.0f;
        }
#pragma unroll
        for (int n = 0; n < BATCH; n++)
            if (i0 + (int64_t)n * Q8_THREADS < K) ss += (double)v[n] * v[n];
    }
    return (float)(1.0 / sqrt(cuda_block_sum_d(ss, red) / (double)K + (double)eps));
}

__device__ __forceinline__ float q8_sb(const void *p, int dt, int64_t i) {
    if (dt == CHOIR_DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == CHOIR_DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* The 16-byte load of a weight chunk: the stream bypasses L1 (x's staging
 * and the scales live there) and asks L2 for 256-byte sectors. */
__device__ __forceinline__ uint4 q8_ld(const uint4 *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

/* Four values of x from global memory (rows too long to stage; any alignment). */
__device__ __forceinline__ float4 q8_ldx(const float *p) {
    return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
}

/* Code e (0..3) of word w as a float: 2^23 + code, read as a float, minus 2^23. */
__device__ __forceinline__ float q8_code(uint32_t w, int e) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | (unsigned)e)) - 8388608.0f;
}

/* One chunk in flight: 16 codes of a row, the scale and bias of their group. */
struct q8_chunk {
    uint4 q;
    float s, b;
};

template <int NR, int U>
__device__ __forceinline__ void q8_load(const uint4 *const (&wr)[NR], const int64_t (&g0)[NR], const int (&li)[NR],
                                        const q8_args &a, int nrow, int64_t chunks, int64_t c0,
                                        q8_chunk (&out)[NR][U]) {
#pragma unroll
    for (int j = 0; j < NR; j++)
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + 32 * u;
            if (j < nrow && c < chunks) {
                const int64_t g = g0[j] + (c >> a.group_shift);
                out[j][u].q = q8_ld(wr[j] + c);
                out[j][u].s = q8_sb(a.scales[li[j]], a.sb_dtype, g);
                out[j][u].b = q8_sb(a.biases[li[j]], a.sb_dtype, g);
            } else {
                out[j][u].q = make_uint4(0, 0, 0, 0);
                out[j][u].s = out[j][u].b = 0.0f;
            }
        }
}

/* R: rows of x the kernel is built for (M <= R); NR: weight rows a warp;
 * U: steps a batch; XS: x staged in shared memory (else read from global);
 * NORM: x RMS-normalised into the staging first (needs XS). */
template <int R, int NR, int U, bool XS, bool NORM>
__global__ void __launch_bounds__(Q8_THREADS)
    q8_gemv(const float *__restrict__ x, int M, int64_t K, const float *__restrict__ gamma, float eps, q8_args a) {
    extern __shared__ float4 q8_xs4[];
    float *xs = (float *)q8_xs4; /* [M][Kp], permuted */
    __shared__ double red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t Kp = (K + 511) & ~(int64_t)511, chunks = K >> 4;
    const int64_t total = a.start[a.n], r = ((int64_t)blockIdx.x * Q8_WARPS + warp) * NR;
    const int nrow = r >= total ? 0 : total - r < NR ? (int)(total - r) : NR;
    int li[NR];
    int64_t rr[NR], g0[NR];
    const uint4 *wr[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) {
        const int64_t rj = r + (j < nrow ? j : 0);
        int i = 0;
        while (i + 1 < a.n && rj >= a.start[i + 1]) i++;
        li[j] = i;
        rr[j] = rj - a.start[i];
        wr[j] = (const uint4 *)(a.W[i] + rr[j] * (K >> 2));
        g0[j] = rr[j] * ((K >> 4) >> a.group_shift);
    }
    /* The first batch does not depend on x: out before the staging. */
    q8_chunk cur[NR][U];
    q8_load<NR, U>(wr, g0, li, a, nrow, chunks, (int64_t)lane, cur);
    if constexpr (XS) {
        for (int m = 0; m < M; m++) {
            const float *xr = x + (int64_t)m * K;
            float inv = 1.0f;
            if constexpr (NORM) inv = q8_rms_inv(xr, K, eps, red);
            for (int64_t i = threadIdx.x; i < K; i += Q8_THREADS)
                xs[m * Kp + q8_xpos(i)] =
                    NORM ? __fmul_rn(__fmul_rn(xr[i], inv), gamma ? gamma[i] : 1.0f) : xr[i];
        }
        __syncthreads();
    }
    if (nrow == 0) return;
    float acc[NR][R];
#pragma unroll
    for (int j = 0; j < NR; j++)
#pragma unroll
        for (int m = 0; m < R; m++) acc[j][m] = 0.0f;
    constexpr int64_t BATCH = 32 * U;
    /* Every lane runs the same batches (lanes past the row's end add zeros). */
    for (int64_t b0 = 0; b0 < chunks; b0 += BATCH) {
        const int64_t c0 = b0 + lane;
        q8_chunk nxt[NR][U];
        q8_load<NR, U>(wr, g0, li, a, nrow, chunks, c0 + BATCH, nxt);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + 32 * u;
            if (c >= chunks) break;
#pragma unroll
            for (int m = 0; m < R; m++) {
                if (m >= M) break;
                float4 xv[4];
#pragma unroll
                for (int k = 0; k < 4; k++)
                    xv[k] = XS ? ((const float4 *)(xs + m * Kp + (c >> 5) * 512 + k * 128))[lane]
                               : q8_ldx(x + (int64_t)m * K + c * 16 + 4 * k);
                float xsum = 0.0f;
#pragma unroll
                for (int k = 0; k < 4; k++) xsum += (xv[k].x + xv[k].y) + (xv[k].z + xv[k].w);
#pragma unroll
                for (int j = 0; j < NR; j++) {
                    if (j >= nrow) break;
                    const uint32_t w[4] = {cur[j][u].q.x, cur[j][u].q.y, cur[j][u].q.z, cur[j][u].q.w};
                    /* Four chains, one per float4 of x. */
                    float d[4];
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        d[k] = q8_code(w[k], 0) * xv[k].x + q8_code(w[k], 1) * xv[k].y +
                               q8_code(w[k], 2) * xv[k].z + q8_code(w[k], 3) * xv[k].w;
                    acc[j][m] += cur[j][u].s * ((d[0] + d[1]) + (d[2] + d[3])) + cur[j][u].b * xsum;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NR; j++)
#pragma unroll
            for (int u = 0; u < U; u++) cur[j][u] = nxt[j][u];
    }
#pragma unroll
    for (int j = 0; j < NR; j++) {
        if (j >= nrow) break;
        const int i = li[j];
        const int64_t rows = a.start[i + 1] - a.start[i];
#pragma unroll
        for (int m = 0; m < R; m++) {
            if (m >= M) break;
            float s = acc[j][m];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) {
                gemv_out_store(s, a.bias[i], rr[j], a.y[i] + (int64_t)m * rows + rr[j], a.epilogue,
                               &a.store[i], m);
            }
        }
    }
}

/* Shapes 4-6 (q8_stream): the same products in a grid of warps that stay
 * resident and stream their rows back to back. In shapes 1-3 a warp takes
 * NR rows and ends: at the 7B's widths (K = 3584: 7 steps of a warp a row)
 * each warp spends as long on its first loads and its block's staging of x
 * as on the stream, and the staging (with the norm's sum of squares) is
 * repeated by every one of thousands of blocks. Here:
 *  - the grid is as many blocks as are resident at once (or fewer, so that
 *    every warp takes the same number of rows), warp w taking the groups
 *    of NR stacked rows w, w + W, w + 2 W, ... (W warps in all);
 *  - a warp keeps U steps of 16-byte chunks (NR of them, with their scales
 *    and biases) in flight as one ring over all its rows: the load of the
 *    step U ahead is issued when a step is used, so the next group's first
 *    loads are out while this group's last chunks are summed;
 *  - x's sum over each 16 columns is staged with x, once per block (the
 *    b (sum_i x_i) term of a chunk: one shared load instead of 15 adds per
 *    row of x), and a chunk's 16 codes become floats once for all M rows
 *    of x (shapes 1-3 convert them again for every row); with NR = 2 the
 *    x a lane reads from shared memory serves two weight rows (at 8 rows
 *    of x those reads, 5 a chunk a row of x, bound the kernel first);
 *  - rows of x too long for shared memory (M K floats above Q8_SMEM_MAX)
 *    go in column pieces, one launch each, every piece after the first
 *    adding into y (shapes 1-3 read such x from global memory for every
 *    weight row instead).
 * For one piece the floats are those of shape 1 (same chunks a lane, same
 * sums in the same order). */

/* The layer of stacked row `row` (without a loop, so that the loops over a
 * ring that call this unroll). */
__device__ __forceinline__ int q8_layer_of(const q8_args &a, int64_t row) {
    int li = 0;
#pragma unroll
    for (int i = 1; i < CHOIR_CUDA_NORM_LINEAR_MAX; i++) li += i < a.n && row >= a.start[i];
    return li;
}

/* Where a warp's loads are: row group `grp` (stacked rows NR grp ..
 * NR grp + NR - 1; past the last group: done), warp step `step` of the
 * piece; row j's piece starts at chunk w[j][0] and group g0[j] of layer
 * li[j] (w[j] null past the last row). */
template <int NR>
struct q8_cursor {
    int64_t grp, step, g0[NR];
    int li[NR];
    const uint4 *w[NR];
};

template <int NR>
__device__ __forceinline__ void q8_seek(q8_cursor<NR> &cu, const q8_args &a, int64_t total, int64_t K, int64_t k0) {
#pragma unroll
    for (int j = 0; j < NR; j++) {
        const int64_t row = cu.grp * NR + j;
        cu.w[j] = NULL;
        cu.li[j] = 0;
        cu.g0[j] = 0;
        if (row < total) {
            const int li = q8_layer_of(a, row);
            const int64_t rr = row - a.start[li];
            cu.li[j] = li;
            cu.w[j] = (const uint4 *)(a.W[li] + rr * (K >> 2)) + (k0 >> 4);
            cu.g0[j] = rr * ((K >> 4) >> a.group_shift) + ((k0 >> 4) >> a.group_shift);
        }
    }
}

/* The group's chunks at the cursor (zeros past the piece's end or the last
 * row), then the cursor one warp step on. */
template <int NR>
struct q8_chunks {
    q8_chunk c[NR];
};
template <int NR>
__device__ __forceinline__ q8_chunks<NR> q8_next(q8_cursor<NR> &cu, const q8_args &a, int64_t total, int64_t groups,
                                                 int64_t nw, int64_t chunks, int64_t spr, int64_t K, int64_t k0,
                                                 int lane) {
    q8_chunks<NR> o;
#pragma unroll
    for (int j = 0; j < NR; j++) {
        o.c[j].q = make_uint4(0, 0, 0, 0);
        o.c[j].s = o.c[j].b = 0.0f;
    }
    if (cu.grp < groups) {
        const int64_t c = cu.step * 32 + lane;
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (c < chunks && cu.w[j]) {
                const int64_t g = cu.g0[j] + (c >> a.group_shift);
                o.c[j].q = q8_ld(cu.w[j] + c);
                o.c[j].s = q8_sb(a.scales[cu.li[j]], a.sb_dtype, g);
                o.c[j].b = q8_sb(a.biases[cu.li[j]], a.sb_dtype, g);
            }
        if (++cu.step == spr) {
            cu.step = 0;
            cu.grp += nw;
            if (cu.grp < groups) q8_seek(cu, a, total, K, k0);
        }
    }
    return o;
}

/* Row m of a piece staged in one pass (shape 8): thread t takes the
 * 16-column chunks t, t + 256, ..., brings each with four 16-byte loads
 * (xr 16-byte aligned: the host's test), stores the four float4 where
 * q8_xpos puts their columns and the chunk's sum where the sum pass of
 * q8_stream puts it, added in the same order: the same floats as that
 * kernel's two passes, without their scalar loads (a load's latency per
 * 256 columns) and the barrier between them. */
template <bool NORM>
__device__ __forceinline__ void q8_stage_fast(const float *__restrict__ xr, int64_t k0, int64_t kc, int64_t kcp,
                                              float inv, const float *__restrict__ gamma, float *xs, float *xsum) {
    const int64_t nch = kcp >> 4, live = kc >> 4;
    for (int64_t j = threadIdx.x; j < nch; j += Q8_THREADS) {
        float4 v[4];
        if (j < live) {
            const float4 *src = (const float4 *)(xr + k0 + 16 * j);
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = __ldg(src + k);
            if constexpr (NORM) {
                const float *gm = gamma ? gamma + k0 + 16 * j : NULL;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    v[k].x = __fmul_rn(__fmul_rn(v[k].x, inv), gm ? __ldg(gm + 4 * k) : 1.0f);
                    v[k].y = __fmul_rn(__fmul_rn(v[k].y, inv), gm ? __ldg(gm + 4 * k + 1) : 1.0f);
                    v[k].z = __fmul_rn(__fmul_rn(v[k].z, inv), gm ? __ldg(gm + 4 * k + 2) : 1.0f);
                    v[k].w = __fmul_rn(__fmul_rn(v[k].w, inv), gm ? __ldg(gm + 4 * k + 3) : 1.0f);
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        float4 *dst = (float4 *)(xs + (j >> 5) * 512) + (j & 31);
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            dst[32 * k] = v[k];
            t += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        }
        xsum[j] = t;
    }
}

/* The staged rows' 16-column sums (shapes 4-7, after x is staged): chunk
 * c = 32 s + l of row m from its four float4 where lane l reads them. */
__device__ __forceinline__ void q8_stage_sums(int M, int64_t kcp, const float *xs, float *xsum) {
    for (int64_t j = threadIdx.x; j < M * (kcp >> 4); j += Q8_THREADS) {
        const int64_t m = j / (kcp >> 4), c = j - m * (kcp >> 4);
        const float4 *xc = (const float4 *)(xs + m * kcp + (c >> 5) * 512) + (c & 31);
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float4 v = xc[32 * k];
            t += (v.x + v.y) + (v.z + v.w);
        }
        xsum[j] = t;
    }
}

/* R: rows of x the kernel is built for (M <= R); NR: weight rows a warp
 * sums at once (each chunk of x read from shared memory once for them);
 * U: steps in flight a lane; NORM: x RMS-normalised (over all K columns)
 * into the staging; MINB: blocks an SM the registers must allow (shape 7:
 * 4, at most 64 registers a thread); FX: x staged by q8_stage_fast (shape
 * 8; x 16-byte aligned). The piece is columns [k0, k0 + kc) of K;
 * `later`: not the first piece (no bias, no store, y += the piece's sums). */
template <int R, int NR, int U, bool NORM, int MINB = 1, bool FX = false, bool PDL = false>
__global__ void __launch_bounds__(Q8_THREADS, MINB)
    q8_stream(const float *__restrict__ x, int M, int64_t K, int64_t k0, int64_t kc, const float *__restrict__ gamma,
              float eps, q8_args a, int later) {
    extern __shared__ float4 q8_xs4[];
    const int64_t kcp = (kc + 511) & ~(int64_t)511, chunks = kc >> 4, spr = (chunks + 31) >> 5;
    float *xs = (float *)q8_xs4;   /* [M][kcp], permuted as in q8_gemv */
    float *xsum = xs + M * kcp;    /* [M][kcp / 16]: sum of x over each 16 columns */
    __shared__ double red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t total = a.start[a.n], groups = (total + NR - 1) / NR, nw = (int64_t)gridDim.x * Q8_WARPS;
    const int64_t first = (int64_t)blockIdx.x * Q8_WARPS + warp;
    /* Launched to overlap the kernel before it (PDL, choir_cuda_pdl): the
     * kernel after may be placed once every block has started. */
    if constexpr (PDL) cuda_pdl_trigger();
    /* The first U steps do not depend on x: out before the staging. */
    q8_cursor<NR> ld;
    ld.grp = first;
    ld.step = 0;
    if (first < groups) q8_seek(ld, a, total, K, k0);
    q8_chunks<NR> ring[U];
#pragma unroll
    for (int u = 0; u < U; u++) ring[u] = q8_next(ld, a, total, groups, nw, chunks, spr, K, k0, lane);
    /* PDL: the kernel before has finished and its writes are visible before
     * x is read or y written (the loads above are the weights'). */
    if constexpr (PDL) cuda_pdl_wait();
    if constexpr (FX) {
        for (int m = 0; m < M; m++) {
            const float *xr = x + (int64_t)m * K;
            float inv = 1.0f;
            if constexpr (NORM) inv = q8_rms_inv<8>(xr, K, eps, red);
            q8_stage_fast<NORM>(xr, k0, kc, kcp, inv, gamma, xs + m * kcp, xsum + m * (kcp >> 4));
        }
        __syncthreads();
    } else {
        for (int m = 0; m < M; m++) {
            const float *xr = x + (int64_t)m * K;
            float inv = 1.0f;
            if constexpr (NORM) inv = q8_rms_inv(xr, K, eps, red);
            for (int64_t i = threadIdx.x; i < kcp; i += Q8_THREADS) {
                float v = 0.0f;
                if (i < kc)
                    v = NORM ? __fmul_rn(__fmul_rn(xr[k0 + i], inv), gamma ? gamma[k0 + i] : 1.0f) : xr[k0 + i];
                xs[m * kcp + q8_xpos(i)] = v;
            }
        }
        __syncthreads();
        q8_stage_sums(M, kcp, xs, xsum);
        __syncthreads();
    }
    if (first >= groups) return;
    /* The group being summed. */
    int64_t grp = first, step = 0;
    float acc[NR][R];
#pragma unroll
    for (int j = 0; j < NR; j++)
#pragma unroll
        for (int m = 0; m < R; m++) acc[j][m] = 0.0f;
    /* No exit inside the unrolled steps (so that they unroll and the ring
     * stays in registers): after the last group the steps left in the
     * batch sum zeros and store nothing. */
    bool live = true;
    while (live) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const q8_chunks<NR> cur = ring[u];
            ring[u] = q8_next(ld, a, total, groups, nw, chunks, spr, K, k0, lane);
            float q[NR][16];
#pragma unroll
            for (int j = 0; j < NR; j++) {
                const uint32_t w[4] = {cur.c[j].q.x, cur.c[j].q.y, cur.c[j].q.z, cur.c[j].q.w};
#pragma unroll
                for (int k = 0; k < 4; k++)
#pragma unroll
                    for (int e = 0; e < 4; e++) q[j][4 * k + e] = q8_code(w[k], e);
            }
#pragma unroll
            for (int m = 0; m < R; m++) {
                if (m >= M) break;
                const float4 *xm = (const float4 *)(xs + m * kcp + step * 512) + lane;
                float4 xv[4];
#pragma unroll
                for (int k = 0; k < 4; k++) xv[k] = xm[32 * k];
                const float xt = xsum[m * (kcp >> 4) + step * 32 + lane];
#pragma unroll
                for (int j = 0; j < NR; j++) {
                    float d[4];
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        d[k] = q[j][4 * k] * xv[k].x + q[j][4 * k + 1] * xv[k].y + q[j][4 * k + 2] * xv[k].z +
                               q[j][4 * k + 3] * xv[k].w;
                    acc[j][m] += cur.c[j].s * ((d[0] + d[1]) + (d[2] + d[3])) + cur.c[j].b * xt;
                }
            }
            if (++step == spr) {
#pragma unroll
                for (int j = 0; j < NR; j++) {
                    const int64_t row = grp * NR + j;
                    if (!live || row >= total) break;
                    const int li = q8_layer_of(a, row);
                    const int64_t rr = row - a.start[li], rows = a.start[li + 1] - a.start[li];
#pragma unroll
                    for (int m = 0; m < R; m++) {
                        if (m >= M) break;
                        float s = acc[j][m];
#pragma unroll
                        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                        if (lane == 0) {
                            float *yo = a.y[li] + (int64_t)m * rows + rr;
                            if (later) *yo += s;
                            else gemv_out_store(s, a.bias[li], rr, yo, a.epilogue, &a.store[li], m);
                        }
                    }
                }
#pragma unroll
                for (int j = 0; j < NR; j++)
#pragma unroll
                    for (int m = 0; m < R; m++) acc[j][m] = 0.0f;
                step = 0;
                grp += nw;
                live = grp < groups;
            }
        }
    }
}

/* The 8-bit weights expanded to bf16 for cuBLAS (a prefill chunk's
 * products; choir_cuda_q8_dequant): a thread a 16-code chunk, one 16-byte
 * load and two 16-byte stores, consecutive threads on consecutive chunks.
 * cuda_linear.cu's dequant_bf16 gives a thread 32 codes and writes them as
 * 32 two-byte stores 64 bytes apart across the warp (a sector each). The
 * values are its values: s q + b in one rounding (the FMA it contracts to),
 * then rounded to bf16. Rows are contiguous and whole groups, so chunk i
 * of the flattened weight is in group (16 i) / G. */
__global__ void q8_dequant_bf16(const uint4 *__restrict__ Wq, const void *__restrict__ scales,
                                const void *__restrict__ biases, int sb_dtype, int group_shift, int64_t chunks,
                                uint4 *__restrict__ out) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += (int64_t)gridDim.x * blockDim.x) {
        const uint4 q = q8_ld(Wq + i);
        const int64_t g = i >> group_shift;
        const float s = q8_sb(scales, sb_dtype, g), b = q8_sb(biases, sb_dtype, g);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
        uint32_t o[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            __nv_bfloat162 lo = __floats2bfloat162_rn(__fmaf_rn(s, q8_code(w[k], 0), b),
                                                      __fmaf_rn(s, q8_code(w[k], 1), b));
            __nv_bfloat162 hi = __floats2bfloat162_rn(__fmaf_rn(s, q8_code(w[k], 2), b),
                                                      __fmaf_rn(s, q8_code(w[k], 3), b));
            o[2 * k] = *(const uint32_t *)&lo;
            o[2 * k + 1] = *(const uint32_t *)&hi;
        }
        out[2 * i] = make_uint4(o[0], o[1], o[2], o[3]);
        out[2 * i + 1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
}

/* --- host side (q8_emu.cpp cuts up to here) ------------------------------------------ */

/* 0: not yet read from CHOIR_Q8_GEMV; else 1 + the shape (0: off, the old
 * kernel). */
static int g_q8 = 0;
#define Q8_SHAPES 9
void choir_cuda_q8_gemv(int shape) {
    __atomic_store_n(&g_q8, 1 + (shape >= 0 && shape < Q8_SHAPES ? shape : 0), __ATOMIC_RELAXED);
}
int choir_cuda_q8_gemv_shape(void) {
    int v = __atomic_load_n(&g_q8, __ATOMIC_RELAXED);
    if (!v) {
        /* Shape 7 unless set. H100, 7 Dec 2026, the 8-bit 7B step as a
         * graph: the old kernel 12.27 ms, shape 1 7.19, 4 6.43, 5 7.29, 6
         * 6.75; 8 rows 41.3 (shape 1), 30.0 (4), 28.2 (6). Evening, another
         * H100, one process: shape 4 7.35 / 7.33 ms, shape 7 6.08 / 6.08. */
        const char *e = getenv("CHOIR_Q8_GEMV");
        int s = e ? atoi(e) : 7;
        v = 1 + (s >= 0 && s < Q8_SHAPES ? s : 0);
        __atomic_store_n(&g_q8, v, __ATOMIC_RELAXED);
    }
    return v - 1;
}

static int q8_group_shift(int G) { return G == 32 ? 1 : G == 64 ? 2 : G == 128 ? 3 : -1; }

bool choir_cuda_q8_takes(int64_t M, const choir_cuda_weight *W) {
    return choir_cuda_q8_gemv_shape() > 0 && M >= 1 && M <= Q8_MAX_ROWS && W->kind == CHOIR_WEIGHT_QUANT &&
           W->bits == 8 && q8_group_shift(W->group_size) > 0 && W->cols % 16 == 0 && W->cols > 0 &&
           W->rows > 0 && W->rows <= INT32_MAX && W->cols <= INT32_MAX &&
           (W->sb_dtype == CHOIR_DTYPE_BF16 || W->sb_dtype == CHOIR_DTYPE_F16 || W->sb_dtype == CHOIR_DTYPE_F32) &&
           ((uintptr_t)W->data.ptr & 15) == 0;
}

static size_t q8_smem(int64_t M, int64_t K) { return (size_t)(M * ((K + 511) & ~(int64_t)511)) * sizeof(float); }

bool choir_cuda_q8_norm_fuses(int64_t M, const choir_cuda_norm_linear_params *p) {
    if (!p->rms || p->beta || p->gelu || p->n < 1 || p->n > CHOIR_CUDA_NORM_LINEAR_MAX) return false;
    const choir_cuda_weight *W0 = &p->W[0];
    if (q8_smem(M, W0->cols) > Q8_SMEM_MAX) return false;
    int64_t total = 0;
    for (int i = 0; i < p->n; i++) {
        const choir_cuda_weight *W = &p->W[i];
        if (!choir_cuda_q8_takes(M, W) || W->cols != W0->cols || W->group_size != W0->group_size ||
            W->sb_dtype != W0->sb_dtype)
            return false;
        if (p->store[i].dst && !p->store[i].pos) return false;
        total += W->rows;
    }
    return total <= INT32_MAX;
}

/* Shapes 1..Q8_SHAPES-1 as (NR, U): candidates timed side by side. */
template <int N>
using q8c = std::integral_constant<int, N>;
template <typename L>
static void q8_shape_launch(int v, L &&l) {
    switch (v) {
    case 2: l(q8c<1>{}, q8c<4>{}); break;
    case 3: l(q8c<4>{}, q8c<2>{}); break;
    default: l(q8c<2>{}, q8c<2>{}); break;
    }
}

template <int R, bool XS, bool NORM>
static void q8_launch_r(choir_cuda *cu, const float *x, int M, int64_t K, const float *gamma, float eps,
                        const q8_args &a) {
    const int64_t total = a.start[a.n];
    const size_t smem = XS ? q8_smem(M, K) : 0;
    q8_shape_launch(choir_cuda_q8_gemv_shape(), [&](auto nr, auto u) {
        auto k = q8_gemv<R, nr.value, u.value, XS, NORM>;
        /* Once a kernel, for the largest staging: the first launch that needs
         * it is an op-by-op one before any step is recorded as a graph. */
        static bool opted = false;
        if (smem > 48 * 1024 && !opted)
            opted = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Q8_SMEM_MAX) == cudaSuccess;
        const int64_t groups = (total + nr.value - 1) / nr.value;
        const int64_t blocks = (groups + Q8_WARPS - 1) / Q8_WARPS;
        k<<<(unsigned)(blocks < INT32_MAX ? blocks : INT32_MAX), Q8_THREADS, smem, cu->stream>>>(x, M, K, gamma,
                                                                                               eps, a);
    });
}

template <bool XS, bool NORM>
static void q8_launch(choir_cuda *cu, const float *x, int M, int64_t K, const float *gamma, float eps,
                      const q8_args &a) {
    if (M == 1) q8_launch_r<1, XS, NORM>(cu, x, M, K, gamma, eps, a);
    else q8_launch_r<Q8_MAX_ROWS, XS, NORM>(cu, x, M, K, gamma, eps, a);
}

/* Shapes 4-6 (q8_stream): x and its sums in one piece up to what shapes
 * 1-3 stage (Q8_SMEM_MAX) and its 16-column sums; longer rows of x in
 * pieces of at most 100 KiB (two blocks an SM). */
#define Q8S_SMEM_ONE (Q8_SMEM_MAX / 16 * 17)
#define Q8S_SMEM_PIECE (100 * 1024)
/* Shape 7's pieces: four blocks an SM (228 KiB of shared memory). */
#define Q8S_SMEM_PIECE4 (48 * 1024)
static bool q8_streams(int shape) { return shape >= 4; }
static size_t q8s_smem(int64_t M, int64_t kc) {
    const int64_t kcp = (kc + 511) & ~(int64_t)511;
    return (size_t)(M * kcp + M * (kcp >> 4)) * sizeof(float);
}

/* Columns a piece: all of K where x and its sums fit as shapes 1-3's
 * staging does (so that the norm-fused calls, which need one piece, take
 * the same M and K); else the fewest pieces of a multiple of 128 columns
 * (whole groups and chunks) within Q8S_SMEM_PIECE. */
static int64_t q8s_piece(int64_t M, int64_t K, size_t one = Q8S_SMEM_ONE, size_t piece = Q8S_SMEM_PIECE) {
    if (q8s_smem(M, K) <= one) return K;
    for (int64_t p = 2;; p++) {
        int64_t w = ((K + p - 1) / p + 127) & ~(int64_t)127;
        if (q8s_smem(M, w) <= piece || w <= 128) return w;
    }
}
/* Shape 7 is for one row of x (the decode step); more rows take shape
 * 4's kernel (within 64 registers those spill 250-300 bytes, not timed). */
/* Shape 8 is shape 7 (one row of x) or 4 (more) with x staged in one pass
 * (q8_stage_fast), which needs x 16-byte aligned: without that, 7 or 4. */
static int q8s_shape_for(int shape, int64_t M, const float *x) {
    if (shape == 8 && ((uintptr_t)x & 15) != 0) shape = 7;
    return shape == 7 && M > 1 ? 4 : shape;
}
/* Shapes 7 and 8 at one row (four blocks an SM): products without the
 * fused norm in pieces of at most Q8S_SMEM_PIECE4; the norm-fused ones stay
 * one piece. */
static int64_t q8s_piece_for(int shape, bool norm, int64_t M, int64_t K) {
    if ((shape == 7 || (shape == 8 && M == 1)) && !norm) return q8s_piece(M, K, Q8S_SMEM_PIECE4, Q8S_SMEM_PIECE4);
    return q8s_piece(M, K);
}

/* Shapes 4-8 as (NR, U, MINB, FX): 1 row and 4 steps in flight, 1 and 8,
 * 2 and 4, shape 4 within 64 registers (four blocks an SM, so that the
 * 7B's narrow products, 3,584 rows, take one row a warp where shape 4's
 * three blocks give two; Nsight Compute, H100, 7 Dec 2026: shape 4's o and
 * down at 21% occupancy, stalled on their loads), and shape 7 (4 for more
 * rows of x) with x staged in one pass. */
template <int R, typename L>
static void q8s_shape_launch(int v, L &&l) {
    using no = std::false_type;
    switch (v) {
    case 8:
        if constexpr (R == 1) l(q8c<1>{}, q8c<4>{}, q8c<4>{}, std::true_type{});
        else l(q8c<1>{}, q8c<4>{}, q8c<1>{}, std::true_type{});
        break;
    case 7:
        /* one row only (q8s_shape_for): no kernels built for more */
        if constexpr (R == 1) {
            l(q8c<1>{}, q8c<4>{}, q8c<4>{}, no{});
            break;
        }
        [[fallthrough]];
    case 4: l(q8c<1>{}, q8c<4>{}, q8c<1>{}, no{}); break;
    case 6: l(q8c<2>{}, q8c<4>{}, q8c<1>{}, no{}); break;
    default: l(q8c<1>{}, q8c<8>{}, q8c<1>{}, no{}); break;
    }
}

/* Blocks for `total` rows: as many as are resident at once, or fewer so
 * that every warp takes the same number of rows (the last may take one
 * less). */
template <typename Kern>
static int64_t q8s_grid(choir_cuda *cu, Kern k, size_t smem, int64_t total) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, Q8_THREADS, smem) != cudaSuccess || per_sm < 1)
        per_sm = 1;
    const int64_t fit = (int64_t)per_sm * cu->props.sm_count * Q8_WARPS;
    const int64_t per_warp = (total + fit - 1) / fit, warps = (total + per_warp - 1) / per_warp;
    const int64_t blocks = (warps + Q8_WARPS - 1) / Q8_WARPS;
    return blocks < INT32_MAX ? blocks : INT32_MAX;
}

template <int R, bool NORM>
static void q8s_launch_r(choir_cuda *cu, const float *x, int M, int64_t K, const float *gamma, float eps,
                         const q8_args &a) {
    const int shape = q8s_shape_for(choir_cuda_q8_gemv_shape(), M, x);
    const int64_t piece = q8s_piece_for(shape, NORM, M, K);
    /* choir_cuda_pdl on: shape 7 (one row of x) launched to overlap the
     * kernel before it, each piece after the one before (kernels built for
     * that shape alone). */
    const bool pdl = R == 1 && shape == 7 && choir_cuda_pdl_mode(cu) > 0;
    auto go = [&](auto nr, auto u, auto minb, auto fx, auto pd) {
        auto k = q8_stream<R, nr.value, u.value, NORM, minb.value, fx.value, pd.value>;
        /* Once a kernel, as q8_launch_r (before any step is recorded). */
        static bool opted = false;
        if (!opted)
            opted = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Q8S_SMEM_ONE) == cudaSuccess;
        for (int64_t k0 = 0; k0 < K; k0 += piece) {
            const int64_t kc = K - k0 < piece ? K - k0 : piece;
            const size_t smem = q8s_smem(M, kc);
            const int64_t blocks = q8s_grid(cu, k, smem, (a.start[a.n] + nr.value - 1) / nr.value);
            choir_cuda_launch_pdl(pd.value, k, dim3((unsigned)blocks), dim3(Q8_THREADS), smem, cu->stream, x, M, K,
                                  k0, kc, gamma, eps, a, (int)(k0 > 0));
        }
    };
    q8s_shape_launch<R>(shape, [&](auto nr, auto u, auto minb, auto fx) {
        /* shape 7's parameters: one row, four blocks an SM, x staged in two passes */
        if constexpr (R == 1 && minb.value == 4 && !fx.value) {
            if (pdl) return go(nr, u, minb, fx, std::true_type{});
        }
        go(nr, u, minb, fx, std::false_type{});
    });
}

template <bool NORM>
static void q8s_launch(choir_cuda *cu, const float *x, int M, int64_t K, const float *gamma, float eps,
                       const q8_args &a) {
    if (M == 1) q8s_launch_r<1, NORM>(cu, x, M, K, gamma, eps, a);
    else if (M == 2) q8s_launch_r<2, NORM>(cu, x, M, K, gamma, eps, a);
    else if (M <= 4) q8s_launch_r<4, NORM>(cu, x, M, K, gamma, eps, a);
    else q8s_launch_r<Q8_MAX_ROWS, NORM>(cu, x, M, K, gamma, eps, a);
}

static void q8_layer(q8_args *a, int i, const choir_cuda_weight *W, const float *bias, float *y) {
    a->W[i] = (const uint32_t *)W->data.ptr;
    a->scales[i] = W->scales.ptr;
    a->biases[i] = W->biases.ptr;
    a->bias[i] = bias;
    a->y[i] = y;
    a->start[i + 1] = a->start[i] + W->rows;
}

int choir_cuda_q8_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W, const float *bias,
                         float *y, int epilogue, choir_err *err) {
    if (!choir_cuda_q8_takes(M, W))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: 8-bit GEMV of %lld rows of this weight", (long long)M);
    q8_args a;
    memset(&a, 0, sizeof a);
    a.n = 1;
    a.sb_dtype = W->sb_dtype;
    a.group_shift = q8_group_shift(W->group_size);
    a.epilogue = epilogue;
    q8_layer(&a, 0, W, bias, y);
    const int shape = choir_cuda_q8_gemv_shape();
    /* A GELU needs the whole sum: shape 1's kernel where x takes pieces. */
    if (q8_streams(shape) &&
        (epilogue != GEMV_GELU || q8s_piece_for(q8s_shape_for(shape, M, x), false, M, W->cols) == W->cols))
        q8s_launch<false>(cu, x, (int)M, W->cols, NULL, 0.0f, a);
    else if (q8_smem(M, W->cols) <= Q8_SMEM_MAX)
        q8_launch<true, false>(cu, x, (int)M, W->cols, NULL, 0.0f, a);
    else
        q8_launch<false, false>(cu, x, (int)M, W->cols, NULL, 0.0f, a);
    return choir_cuda_check_launch(err, "8-bit gemv");
}

int choir_cuda_q8_norm_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_norm_linear_params *p,
                              choir_err *err) {
    if (!choir_cuda_q8_norm_fuses(M, p))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: RMS norm and 8-bit GEMV of %lld rows", (long long)M);
    q8_args a;
    memset(&a, 0, sizeof a);
    a.n = p->n;
    a.sb_dtype = p->W[0].sb_dtype;
    a.group_shift = q8_group_shift(p->W[0].group_size);
    for (int i = 0; i < p->n; i++) {
        q8_layer(&a, i, &p->W[i], p->bias[i], p->y[i]);
        a.store[i] = p->store[i];
    }
    /* One piece (q8_norm_fuses held x within Q8_SMEM_MAX): the stores and
     * the epilogue see whole sums. */
    if (q8_streams(choir_cuda_q8_gemv_shape()))
        q8s_launch<true>(cu, x, (int)M, p->W[0].cols, p->gamma, p->eps, a);
    else
        q8_launch<true, true>(cu, x, (int)M, p->W[0].cols, p->gamma, p->eps, a);
    return choir_cuda_check_launch(err, "RMS norm and 8-bit gemv");
}

/* 0: not yet read from CHOIR_Q8_DEQUANT; 1: off; 2: on. */
static int g_q8_deq = 0;
void choir_cuda_q8_dequant(int on) { __atomic_store_n(&g_q8_deq, on ? 2 : 1, __ATOMIC_RELAXED); }
bool choir_cuda_q8_dequant_on(void) {
    int v = __atomic_load_n(&g_q8_deq, __ATOMIC_RELAXED);
    if (!v) {
        const char *e = getenv("CHOIR_Q8_DEQUANT");
        v = e && !atoi(e) ? 1 : 2; /* on unless 0 (H100, 7 Dec 2026: 8-bit prefill 7,875 -> 23,049 tokens/s) */
        __atomic_store_n(&g_q8_deq, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

/* Declared in cuda_linear.cu, its one caller (launch_dequant). */
bool choir_cuda_q8_dequant_takes(const choir_cuda_weight *W);
int choir_cuda_q8_dequant_bf16(choir_cuda *cu, const choir_cuda_weight *W, void *out, choir_err *err);

bool choir_cuda_q8_dequant_takes(const choir_cuda_weight *W) {
    return choir_cuda_q8_dequant_on() && W->kind == CHOIR_WEIGHT_QUANT && W->bits == 8 &&
           q8_group_shift(W->group_size) > 0 && W->cols % 16 == 0 && W->cols > 0 && W->rows > 0 &&
           (W->sb_dtype == CHOIR_DTYPE_BF16 || W->sb_dtype == CHOIR_DTYPE_F16 || W->sb_dtype == CHOIR_DTYPE_F32) &&
           ((uintptr_t)W->data.ptr & 15) == 0;
}

int choir_cuda_q8_dequant_bf16(choir_cuda *cu, const choir_cuda_weight *W, void *out, choir_err *err) {
    if (!choir_cuda_q8_dequant_takes(W) || ((uintptr_t)out & 15) != 0)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: 8-bit dequantize of this weight");
    const int64_t chunks = W->rows * (W->cols >> 4);
    int64_t blocks = (chunks + 255) / 256;
    const int64_t most = (int64_t)cu->props.sm_count * 32; /* grid-stride past 32 blocks an SM */
    if (blocks > most) blocks = most;
    q8_dequant_bf16<<<(unsigned)blocks, 256, 0, cu->stream>>>((const uint4 *)W->data.ptr, W->scales.ptr,
                                                              W->biases.ptr, W->sb_dtype,
                                                              q8_group_shift(W->group_size), chunks, (uint4 *)out);
    return choir_cuda_check_launch(err, "8-bit dequantize");
}
