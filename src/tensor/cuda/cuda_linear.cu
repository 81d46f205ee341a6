/* Linear layers on the device: GEMV kernels that read each weight once in its
 * own storage (f32, f16, bf16, MLX-quantized) for the decoder's few rows, and
 * cuBLAS on the tensor cores for everything larger. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "tensor/cuda/cuda_gemv_mma.h"
#include "tensor/cuda/cuda_internal.h"

/* Up to this many activation rows the GEMV kernels win: they stream the
 * weight once and keep one accumulator per row in registers. */
#define GEMV_MAX_ROWS 8
#define GEMV_WARPS 4
/* Its epilogues: GEMV_WRITE, GEMV_ACCUMULATE, GEMV_GELU (cuda_internal.h). */

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* A warp's dot products of NR weight rows wr[j] [cols] (the first nrow of
 * them; nrow is the same across the warp) with the M rows of x (global or
 * shared memory): lane l takes the 16-byte chunks l, l + 32, ..., so a warp
 * reads 512 contiguous bytes of each row per chunk step, and keeps the loads
 * of two batches of U steps of every row in flight (one step at a time left
 * a warp with one load in flight); a chunk of x is read once for the NR rows.
 * Each lane adds its chunks of a row in column order whatever NR, U and the
 * load hint, so every caller gets the same floats. With `have_first`,
 * `first` holds row 0's first U steps already (gemv_load at the lane's first
 * column: loads issued before other work); with `next`, the last batch
 * also loads that row's first U steps into *next_first (a warp that takes
 * several rows keeps its loads in flight from one row to the next).
 *
 * HINT 1 loads the weights with ld.global.nc.L1::no_allocate.L2::256B (the
 * stream bypasses L1, where x lives, and asks L2 for 256-byte sectors);
 * HINT 0 with __ldg. */
#define GEMV_UNROLL 4
template <int HINT>
__device__ __forceinline__ uint4 gemv_ld(const void *p) {
    if constexpr (HINT == 0) {
        return __ldg((const uint4 *)p);
    } else {
        uint4 v;
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
            : "l"(p));
        return v;
    }
}

template <typename T, int U = GEMV_UNROLL, int HINT = 0>
__device__ __forceinline__ void gemv_load(const T *__restrict__ wr, int64_t cols, int64_t c0,
                                          uint4 (&raw)[U]) {
    constexpr int64_t STEP = 32 * (16 / sizeof(T));
#pragma unroll
    for (int u = 0; u < U; u++)
        raw[u] = c0 + u * STEP < cols ? gemv_ld<HINT>(wr + c0 + u * STEP) : make_uint4(0, 0, 0, 0);
}

/* One 16-byte chunk of NR weight rows (VEC values from column c) against
 * every row of x: acc[j][m] += the chunk of row j times x's row m. */
template <typename T, int R, int NR>
__device__ __forceinline__ void gemv_chunk(const float *x, int M, int64_t cols, int64_t c,
                                           const uint4 (&raw)[NR], int nrow, float (&acc)[NR][R]) {
    constexpr int VEC = 16 / sizeof(T);
    float wf[NR][VEC];
#pragma unroll
    for (int j = 0; j < NR; j++) {
        const T *wv = (const T *)&raw[j];
#pragma unroll
        for (int e = 0; e < VEC; e++) wf[j][e] = to_f32(wv[e]);
    }
#pragma unroll
    for (int m = 0; m < R; m++) {
        if (m >= M) break;
        const float4 *xv = (const float4 *)(x + (int64_t)m * cols + c);
#pragma unroll
        for (int q = 0; q < VEC / 4; q++) {
            float4 xx = xv[q];
#pragma unroll
            for (int j = 0; j < NR; j++) {
                if (j >= nrow) break;
                acc[j][m] += wf[j][4 * q] * xx.x + wf[j][4 * q + 1] * xx.y +
                             wf[j][4 * q + 2] * xx.z + wf[j][4 * q + 3] * xx.w;
            }
        }
    }
}

template <typename T, int R, int NR = 1, int U = GEMV_UNROLL, int HINT = 0>
__device__ __forceinline__ void gemv_dot(const float *x, int M, const T *const (&wr)[NR], int nrow,
                                         int64_t cols, int lane, float (&acc)[NR][R],
                                         const uint4 (&first)[U], bool have_first,
                                         const T *next = nullptr, uint4 (*next_first)[U] = nullptr) {
    constexpr int VEC = 16 / sizeof(T);
    constexpr int64_t STEP = 32 * VEC, BATCH = U * STEP;
#pragma unroll
    for (int j = 0; j < NR; j++)
#pragma unroll
        for (int m = 0; m < R; m++) acc[j][m] = 0.0f;
    if (cols % VEC == 0) {
        /* Two batches in flight: the next one's loads go out before this
         * one's products. */
        const int64_t c_first = (int64_t)lane * VEC;
        uint4 cur[NR][U];
#pragma unroll
        for (int j = 0; j < NR; j++) {
            if (j == 0 && have_first) {
#pragma unroll
                for (int u = 0; u < U; u++) cur[0][u] = first[u];
            } else if (j < nrow) {
                gemv_load<T, U, HINT>(wr[j], cols, c_first, cur[j]);
            }
        }
        for (int64_t c0 = c_first; c0 < cols; c0 += BATCH) {
            uint4 nxt[NR][U];
#pragma unroll
            for (int j = 0; j < NR; j++) {
#pragma unroll
                for (int u = 0; u < U; u++) nxt[j][u] = make_uint4(0, 0, 0, 0);
                if (j < nrow && c0 + BATCH < cols) gemv_load<T, U, HINT>(wr[j], cols, c0 + BATCH, nxt[j]);
            }
            /* The last batch: the warp's next row's first steps go out
             * before this batch's products (rows back to back in flight). */
            if (next && c0 + BATCH >= cols) gemv_load<T, U, HINT>(next, cols, c_first, *next_first);
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (c0 + u * STEP < cols) {
                    uint4 ch[NR];
#pragma unroll
                    for (int j = 0; j < NR; j++) ch[j] = cur[j][u];
                    gemv_chunk<T, R, NR>(x, M, cols, c0 + u * STEP, ch, nrow, acc);
                }
            }
#pragma unroll
            for (int j = 0; j < NR; j++)
#pragma unroll
                for (int u = 0; u < U; u++) cur[j][u] = nxt[j][u];
        }
    } else {
        for (int64_t c = lane; c < cols; c += 32) {
#pragma unroll
            for (int j = 0; j < NR; j++) {
                if (j >= nrow) break;
                float wf = to_f32(wr[j][c]);
#pragma unroll
                for (int m = 0; m < R; m++)
                    if (m < M) acc[j][m] += wf * x[(int64_t)m * cols + c];
            }
        }
    }
}

/* The start of a one-row GEMV launched with choir_cuda_pdl on (PDL 1 or
 * 2): lets the next kernel be scheduled (cuda_pdl_trigger), loads row r0's
 * first U steps into `first` (weights, which no kernel writes), with PDL 2
 * asks L2 for the first GEMV_PDL_L2 bytes of the warp's NR rows r0 ..
 * (lane j < NR its row r0 + j's share; row_ptr(r): row r's weights), then waits
 * for the kernel before (cuda_pdl_wait) before anything reads x or writes
 * y. Returns whether `first` holds row r0's loads (gemv_dot's have_first). */
#define GEMV_PDL_L2 8192
template <typename T, int NR, int U, int HINT, int PDL, typename RowPtr>
__device__ __forceinline__ bool gemv_pdl_start(RowPtr row_ptr, int64_t r0, int64_t rows, int64_t cols, int lane,
                                               uint4 (&first)[U]) {
    constexpr int VEC = 16 / sizeof(T);
    cuda_pdl_trigger();
    const bool ok = r0 < rows && cols % VEC == 0;
    if (ok) gemv_load<T, U, HINT>(row_ptr(r0), cols, (int64_t)lane * VEC, first);
    if constexpr (PDL > 1) {
        if (ok && lane < NR && r0 + lane < rows) {
            const int64_t bytes = cols * (int64_t)sizeof(T), share = GEMV_PDL_L2 / NR;
            cuda_l2_prefetch(row_ptr(r0 + lane), (uint32_t)(bytes < share ? bytes : share));
        }
    }
    cuda_pdl_wait();
    return ok;
}

/* NR output rows a warp (consecutive), GEMV_WARPS warps a block, the warps
 * striding over the rows by the grid (a grid that covers them: one group
 * a warp; a smaller, persistent one: each warp's next row loaded while it
 * finishes the last); up to R rows of x (1: a decoder step, fewer
 * registers, more warps on the device). */
template <typename T, int R, int NR = 1, int U = GEMV_UNROLL, int HINT = 0, bool PERSIST = false, int PDL = 0>
__global__ void gemv_dense(const float *__restrict__ x, int M, const T *__restrict__ W, int64_t rows,
                           int64_t cols, const float *__restrict__ bias, float *__restrict__ y,
                           int epilogue) {
    const int lane = threadIdx.x & 31;
    const int64_t stride = (int64_t)gridDim.x * GEMV_WARPS * NR;
    const int64_t r0 = ((int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * NR;
    uint4 first[U] = {};
    bool have_first = false;
    if constexpr (PDL > 0) {
        /* Launched to overlap the kernel before it (choir_cuda_pdl): the
         * first row's first loads, weights only, go out before the wait. */
        have_first = gemv_pdl_start<T, NR, U, HINT, PDL>([&](int64_t r) { return W + r * cols; }, r0, rows, cols,
                                                          lane, first);
    }
    for (int64_t r = r0; r < rows; r += stride) {
        int nrow = rows - r < NR ? (int)(rows - r) : NR;
        const T *wr[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) wr[j] = W + (r + (j < nrow ? j : 0)) * cols;
        const T *next = PERSIST && r + stride < rows ? W + (r + stride) * cols : nullptr;
        uint4 nf[U] = {};
        float acc[NR][R];
        gemv_dot<T, R, NR, U, HINT>(x, M, wr, nrow, cols, lane, acc, first, have_first, next, &nf);
        have_first = next != nullptr && cols % (16 / sizeof(T)) == 0;
#pragma unroll
        for (int u = 0; u < U; u++) first[u] = nf[u];
#pragma unroll
        for (int j = 0; j < NR; j++) {
            if (j >= nrow) break;
#pragma unroll
            for (int m = 0; m < R; m++) {
                if (m >= M) break;
                float s = warp_sum(acc[j][m]);
                if (lane == 0) {
                    float *yo = y + (int64_t)m * rows + r + j;
                    *yo = gemv_out(s, bias, r + j, yo, epilogue);
                }
            }
        }
        if (!PERSIST) break; /* a covering grid: one group a warp */
    }
}

/* --- a layer norm feeding GEMVs ---------------------------------------------------- */

/* choir_cuda_norm_linear's layers as the kernel takes them: norm_linear_args
 * (cuda_gemv_mma.h, shared with the mma GEMV). */

/* Each block first normalises x's M rows into shared memory (the layer-norm
 * kernel's statistics: NORM_LINEAR_THREADS threads, as ROW_THREADS there; or
 * the RMS norm kernel's, as OPS_THREADS there),
 * then its warps take output rows of the layers stacked one after another
 * (row r of the stack is row r - start[i] of layer i), one a warp (the loop
 * strides by the grid for grids that do not cover them):
 * the products of gemv_dense over the normalised rows, the same floats as a
 * layer norm followed by choir_cuda_linear (and GELU, and the rows scatter)
 * without the normalised rows' round trip or the extra launches. */
#define NORM_LINEAR_THREADS 256
template <typename T, int R, int NR = 1, int U = GEMV_UNROLL, int HINT = 0, bool PERSIST = false, int PDL = 0>
__global__ void __launch_bounds__(NORM_LINEAR_THREADS)
    norm_gemv(const float *__restrict__ x, int M, int64_t K, const float *__restrict__ gamma,
              const float *__restrict__ beta, float eps, norm_linear_args a, int epilogue) {
    extern __shared__ float4 xs4[];
    float *xs = (float *)xs4; /* [M][K] */
    __shared__ float red[32];
    __shared__ double redd[32];
    const int lane = threadIdx.x & 31, warps = NORM_LINEAR_THREADS / 32;
    const int64_t total = a.start[a.n], r0 = ((int64_t)blockIdx.x * warps + (threadIdx.x >> 5)) * NR;
    /* The warp's first weight row does not depend on x: its first loads go
     * out before the norm, which hides behind them. */
    auto layer_of = [&](int64_t r) {
        int i = 0;
        while (i + 1 < a.n && r >= a.start[i + 1]) i++;
        return i;
    };
    constexpr int VEC = 16 / sizeof(T);
    uint4 first[U] = {};
    bool have_first = r0 < total && K % VEC == 0; /* row r0's, then each next row's */
    if constexpr (PDL > 0) {
        /* Launched to overlap the kernel before it (choir_cuda_pdl): the
         * same loads, then the wait before the norm reads x. */
        auto row_ptr = [&](int64_t r) {
            const int i = layer_of(r);
            return (const T *)a.W[i] + (r - a.start[i]) * K;
        };
        have_first = gemv_pdl_start<T, NR, U, HINT, PDL>(row_ptr, r0, total, K, lane, first);
    } else if (have_first) {
        int i = layer_of(r0);
        gemv_load<T, U, HINT>((const T *)a.W[i] + (r0 - a.start[i]) * K, K, (int64_t)lane * VEC, first);
    }
    if (a.rms && K <= CUDA_RMS_WARP_MAX) {
        /* as choir_cuda_rms_norm's warp kernel: a warp per row */
        for (int m = threadIdx.x >> 5; m < M; m += warps)
            cuda_rms_row_warp(x + (int64_t)m * K, K, eps, gamma, xs + (int64_t)m * K);
    } else {
        for (int m = 0; m < M; m++) {
            if (a.rms)
                cuda_rms_row(x + (int64_t)m * K, K, eps, redd, gamma, xs + (int64_t)m * K);
            else
                cuda_ln_row(x + (int64_t)m * K, K, eps, red, gamma, beta, xs + (int64_t)m * K);
        }
    }
    __syncthreads();
    for (int64_t r = r0; r < total; r += (int64_t)gridDim.x * warps * NR) {
        const int nrow = total - r < NR ? (int)(total - r) : NR;
        int li[NR];
        int64_t rr[NR], rows[NR];
        const T *wr[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) {
            int64_t rj = r + (j < nrow ? j : 0);
            li[j] = layer_of(rj);
            rr[j] = rj - a.start[li[j]];
            rows[j] = a.start[li[j] + 1] - a.start[li[j]];
            wr[j] = (const T *)a.W[li[j]] + rr[j] * K;
        }
        const int64_t rn = r + (int64_t)gridDim.x * warps * NR;
        const T *next = nullptr;
        if (PERSIST && rn < total) {
            int in = layer_of(rn);
            next = (const T *)a.W[in] + (rn - a.start[in]) * K;
        }
        uint4 nf[U] = {};
        float acc[NR][R];
        gemv_dot<T, R, NR, U, HINT>(xs, M, wr, nrow, K, lane, acc, first, have_first, next, &nf);
        have_first = next != nullptr && K % VEC == 0;
#pragma unroll
        for (int u = 0; u < U; u++) first[u] = nf[u];
#pragma unroll
        for (int j = 0; j < NR; j++) {
            if (j >= nrow) break;
            const int i = li[j];
#pragma unroll
            for (int m = 0; m < R; m++) {
                if (m >= M) break;
                float s = warp_sum(acc[j][m]);
                if (lane == 0) {
                    gemv_out_store(s, a.bias[i], rr[j], a.y[i] + (int64_t)m * rows[j] + rr[j], epilogue,
                                   &a.store[i], m);
                }
            }
        }
    }
}

__device__ __forceinline__ float load_sb(const void *p, choir_dtype dt, int64_t i) {
    if (dt == CHOIR_DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == CHOIR_DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* The 32 codes of one chunk: chunk c of a row covers codes [32c, 32c+32),
 * which are exactly BITS packed words (LSB first, straddling words for 3, 5
 * and 6 bits, as MLX packs them). */
template <int BITS>
__device__ __forceinline__ void load_codes(const uint32_t *__restrict__ words, float q[32]) {
    uint32_t w[BITS];
    if constexpr (BITS == 4) {
        uint4 v = *(const uint4 *)words;
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else if constexpr (BITS == 8) {
        uint4 a = *(const uint4 *)words, b = *(const uint4 *)(words + 4);
        w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
        w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < BITS; i++) w[i] = words[i];
    }
    constexpr uint32_t mask = (1u << BITS) - 1u;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const int off = j * BITS, wi = off >> 5, sh = off & 31;
        uint32_t v = w[wi] >> sh;
        if (sh + BITS > 32) v |= w[(wi + 1) % BITS] << (32 - sh);
        /* 2^23 + code, read as a float, minus 2^23: exact, and two cheap
         * operations instead of the quarter-rate integer conversion. */
        q[j] = __uint_as_float(0x4B000000u | (v & mask)) - 8388608.0f;
    }
}

template <int BITS>
__global__ void gemv_quant(const float *__restrict__ x, int M, const uint32_t *__restrict__ Wq,
                           const void *__restrict__ scales, const void *__restrict__ biases,
                           choir_dtype sb_dtype, int group_shift, int64_t rows, int64_t cols,
                           const float *__restrict__ bias, float *__restrict__ y) {
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    int64_t chunks = cols / 32, groups = chunks >> group_shift;
    const uint32_t *wr = Wq + r * chunks * BITS;
    float acc[GEMV_MAX_ROWS];
#pragma unroll
    for (int m = 0; m < GEMV_MAX_ROWS; m++) acc[m] = 0.0f;
    for (int64_t c = lane; c < chunks; c += 32) {
        float q[32];
        load_codes<BITS>(wr + c * BITS, q);
        int64_t g = r * groups + (c >> group_shift);
        float s = load_sb(scales, sb_dtype, g), b = load_sb(biases, sb_dtype, g);
#pragma unroll
        for (int m = 0; m < GEMV_MAX_ROWS; m++) {
            if (m >= M) break;
            const float4 *xv = (const float4 *)(x + (int64_t)m * cols + c * 32);
            /* Four independent chains keep the FMA pipes busy. */
            float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f, xsum = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float4 xx = xv[j];
                d0 += q[4 * j] * xx.x;
                d1 += q[4 * j + 1] * xx.y;
                d2 += q[4 * j + 2] * xx.z;
                d3 += q[4 * j + 3] * xx.w;
                xsum += (xx.x + xx.y) + (xx.z + xx.w);
            }
            float dot = (d0 + d1) + (d2 + d3);
            /* sum_j (s q_j + b) x_j, without forming each weight. */
            acc[m] += s * dot + b * xsum;
        }
    }
#pragma unroll
    for (int m = 0; m < GEMV_MAX_ROWS; m++) {
        if (m >= M) break;
        float s = warp_sum(acc[m]);
        if (lane == 0) y[(int64_t)m * rows + r] = s + (bias ? bias[r] : 0.0f);
    }
}

/* One thread per 32-code chunk, writing bf16 for the cuBLAS path. */
template <int BITS>
__global__ void dequant_bf16(const uint32_t *__restrict__ Wq, const void *__restrict__ scales,
                             const void *__restrict__ biases, choir_dtype sb_dtype,
                             int group_size, int64_t rows, int64_t cols,
                             __nv_bfloat16 *__restrict__ out) {
    int64_t chunks = cols / 32, total = rows * chunks;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / chunks, c = i % chunks;
        float q[32];
        load_codes<BITS>(Wq + i * BITS, q);
        int64_t g = r * (cols / group_size) + (c * 32) / group_size;
        float s = load_sb(scales, sb_dtype, g), b = load_sb(biases, sb_dtype, g);
        __nv_bfloat16 *o = out + r * cols + c * 32;
#pragma unroll
        for (int j = 0; j < 32; j++) o[j] = __float2bfloat16_rn(s * q[j] + b);
    }
}

/* Embedding rows of a quantized table: one thread per 32-code chunk of an
 * output row; ids outside the table give zeros (as k_gather). */
template <int BITS>
__global__ void gather_quant(const uint32_t *__restrict__ Wq, const void *__restrict__ scales,
                             const void *__restrict__ biases, choir_dtype sb_dtype,
                             int group_size, int64_t rows, int64_t cols,
                             const int32_t *__restrict__ ids, int64_t n, float *__restrict__ out) {
    int64_t chunks = cols / 32, total = n * chunks;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / chunks, c = i % chunks, id = ids[r];
        float *o = out + r * cols + c * 32;
        if (id < 0 || id >= rows) {
#pragma unroll
            for (int j = 0; j < 32; j++) o[j] = 0.0f;
            continue;
        }
        float q[32];
        load_codes<BITS>(Wq + (id * chunks + c) * BITS, q);
        int64_t g = id * (cols / group_size) + (c * 32) / group_size;
        float s = load_sb(scales, sb_dtype, g), b = load_sb(biases, sb_dtype, g);
#pragma unroll
        for (int j = 0; j < 32; j++) o[j] = __fmul_rn(s, q[j]) + b;
    }
}

int choir_cuda_rows_gather_quant(choir_cuda *cu, const choir_cuda_weight *W, const int32_t *ids,
                                 int64_t n, float *out, choir_err *err) {
    if (n <= 0 || W->cols <= 0) return 0;
    if (W->cols % 32 || W->group_size <= 0)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: rows gather: %lld columns, groups of %d",
                             (long long)W->cols, W->group_size);
    unsigned blocks = choir_cuda_blocks(n * (W->cols / 32), 256);
    const uint32_t *q = (const uint32_t *)W->data.ptr;
#define CHOIR_QGATHER(B)                                                                      \
    case B:                                                                                   \
        gather_quant<B><<<blocks, 256, 0, cu->stream>>>(q, W->scales.ptr, W->biases.ptr,       \
                                                        W->sb_dtype, W->group_size, W->rows,   \
                                                        W->cols, ids, n, out);                 \
        break;
    switch (W->bits) {
        CHOIR_QGATHER(2)
        CHOIR_QGATHER(3)
        CHOIR_QGATHER(4)
        CHOIR_QGATHER(5)
        CHOIR_QGATHER(6)
        CHOIR_QGATHER(8)
    default:
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: %d-bit weights", W->bits);
    }
#undef CHOIR_QGATHER
    return choir_cuda_check_launch(err, "quantized rows gather");
}

template <typename T>
__global__ void convert_from_f32(const float *__restrict__ x, T *__restrict__ y, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (sizeof(T) == 4)
            y[i] = x[i];
        else if constexpr (std::is_same<T, __half>::value)
            y[i] = __float2half_rn(x[i]);
        else
            y[i] = __float2bfloat16_rn(x[i]);
    }
}

static int launch_gemv_quant(choir_cuda *cu, const float *x, int M, const choir_cuda_weight *W,
                             const float *bias, float *y, choir_err *err) {
    dim3 grid((unsigned)((W->rows + GEMV_WARPS - 1) / GEMV_WARPS)), block(32 * GEMV_WARPS);
    const uint32_t *q = (const uint32_t *)W->data.ptr;
    /* Chunks of 32 codes per group, as a shift (group sizes are 32, 64, 128). */
    int group_shift = W->group_size == 128 ? 2 : W->group_size == 64 ? 1 : 0;
#define CHOIR_QGEMV(B)                                                                         \
    case B:                                                                                    \
        gemv_quant<B><<<grid, block, 0, cu->stream>>>(x, M, q, W->scales.ptr, W->biases.ptr,    \
                                                      W->sb_dtype, group_shift, W->rows,        \
                                                      W->cols, bias, y);                        \
        break;
    switch (W->bits) {
        CHOIR_QGEMV(2)
        CHOIR_QGEMV(3)
        CHOIR_QGEMV(4)
        CHOIR_QGEMV(5)
        CHOIR_QGEMV(6)
        CHOIR_QGEMV(8)
    default:
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: %d-bit weights", W->bits);
    }
#undef CHOIR_QGEMV
    return choir_cuda_check_launch(err, "quantized gemv");
}

/* The 8-bit expansion of cuda_linear_q8.cu (choir_cuda_q8_dequant, off by
 * default): whether it takes W, and W into bf16 rows at `out` (16-byte
 * aligned), the values of dequant_bf16. Declared here, their one caller. */
bool choir_cuda_q8_dequant_takes(const choir_cuda_weight *W);
int choir_cuda_q8_dequant_bf16(choir_cuda *cu, const choir_cuda_weight *W, void *out, choir_err *err);

static int launch_dequant(choir_cuda *cu, const choir_cuda_weight *W, __nv_bfloat16 *out,
                          choir_err *err) {
    if (choir_cuda_q8_dequant_takes(W) && ((uintptr_t)out & 15) == 0)
        return choir_cuda_q8_dequant_bf16(cu, W, out, err);
    int64_t total = W->rows * (W->cols / 32);
    unsigned blocks = choir_cuda_blocks(total, 256);
    const uint32_t *q = (const uint32_t *)W->data.ptr;
#define CHOIR_DEQ(B)                                                                          \
    case B:                                                                                   \
        dequant_bf16<B><<<blocks, 256, 0, cu->stream>>>(q, W->scales.ptr, W->biases.ptr,       \
                                                        W->sb_dtype, W->group_size, W->rows,   \
                                                        W->cols, out);                         \
        break;
    switch (W->bits) {
        CHOIR_DEQ(2)
        CHOIR_DEQ(3)
        CHOIR_DEQ(4)
        CHOIR_DEQ(5)
        CHOIR_DEQ(6)
        CHOIR_DEQ(8)
    default:
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: %d-bit weights", W->bits);
    }
#undef CHOIR_DEQ
    return choir_cuda_check_launch(err, "dequantize");
}

/* --- skinny: a few rows on the tensor cores ------------------------------------------- */

/* Each weight element is read once and applied to every row of x with
 * mma.m16n8k16 (A = 16 weight rows, B = 8 rows of x, C = the 16x8 outputs).
 * A block of NW warps owns MT x 16 output columns (weight rows); its
 * warps take the 32-wide K steps in turn (warp w: steps w, w + NW, ...,
 * so neighbouring warps read neighbouring bytes of a row) and their partial
 * sums are added in shared memory in warp order (deterministic). Within a
 * step, lane (g = lane / 4, t = lane % 4) loads 8 consecutive values
 * k0 + 8t .. k0 + 8t + 7 of weight rows g and g + 8 (16-byte loads) and of
 * x's row g; the two mmas of the step see the products in a permuted K order
 * (mma j takes k0 + 8t + 4j + 0..3 as its logical 2t, 2t+1, 2t+8, 2t+9),
 * the same permutation for both operands, so the sum is unchanged. */
template <typename T>
__device__ __forceinline__ uint32_t sk_pack(float lo, float hi) {
    if constexpr (std::is_same<T, __half>::value) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *(uint32_t *)&v;
    } else {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *(uint32_t *)&v;
    }
}

template <typename T>
__device__ __forceinline__ void sk_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same<T, __half>::value)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* One K step's operands for a lane: 8 values of each of its weight rows
 * and of each of its rows of x, from k on (zeros when !in). */
template <typename T, int MT, int NT>
__device__ __forceinline__ void sk_load(const T *const (&wrow)[MT][2],
                                        const float *const (&xrow)[NT], int64_t k, bool in,
                                        uint4 (&wv)[MT][2], float4 (&xv)[NT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            wv[mt][h] =
                in ? __ldcs((const uint4 *)(wrow[mt][h] + k)) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const float4 *p = (const float4 *)(xrow[nt] + k);
        xv[nt][0] = in ? __ldg(p) : make_float4(0, 0, 0, 0);
        xv[nt][1] = in ? __ldg(p + 1) : make_float4(0, 0, 0, 0);
    }
}

/* The step's two mmas for every tile: x rounded to T and packed in pairs. */
template <typename T, int MT, int NT>
__device__ __forceinline__ void sk_step(float (&acc)[MT][NT][4], const uint4 (&wv)[MT][2],
                                        const float4 (&xv)[NT][2]) {
    uint32_t b[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        b[nt][0] = sk_pack<T>(xv[nt][0].x, xv[nt][0].y);
        b[nt][1] = sk_pack<T>(xv[nt][0].z, xv[nt][0].w);
        b[nt][2] = sk_pack<T>(xv[nt][1].x, xv[nt][1].y);
        b[nt][3] = sk_pack<T>(xv[nt][1].z, xv[nt][1].w);
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const uint4 lo = wv[mt][0], hi = wv[mt][1];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            sk_mma<T>(acc[mt][nt], lo.x, hi.x, lo.y, hi.y, b[nt][0], b[nt][1]);
            sk_mma<T>(acc[mt][nt], lo.z, hi.z, lo.w, hi.w, b[nt][2], b[nt][3]);
        }
    }
}

#define SKINNY_PDL_L2 4096
/* MT: 16-column tiles of the output per block; NT: 8-row tiles of x
 * (M <= 8 NT); U: K steps whose loads are issued together; NW: warps.
 * add: y += the product (with its bias): the same floats as the product
 * into a buffer and an add after it, one pass over y fewer. */
template <typename T, int MT, int NT, int U, int NW, int PDL = 0>
__global__ void __launch_bounds__(32 * NW)
    skinny_mma(const float *__restrict__ x, int M, const T *__restrict__ W, int N, int K,
               const float *__restrict__ bias, float *__restrict__ y, int add) {
    __shared__ float red[NW][MT * NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * (MT * 16);
    if constexpr (PDL > 0) {
        /* Launched to overlap the kernel before it (choir_cuda_pdl): the
         * kernel after may be placed; with 2, L2 is asked for the first
         * SKINNY_PDL_L2 bytes of the block's weight rows; then the wait
         * before x is read or y written. */
        cuda_pdl_trigger();
        if constexpr (PDL > 1) {
            const int r = threadIdx.x;
            if (r < MT * 16 && n0 + r < N) {
                const int64_t bytes = (int64_t)K * sizeof(T);
                cuda_l2_prefetch(W + (int64_t)(n0 + r) * K, (uint32_t)(bytes < SKINNY_PDL_L2 ? bytes : SKINNY_PDL_L2));
            }
        }
        cuda_pdl_wait();
    }
    /* Rows past the end read the last row (their outputs are not stored). */
    const T *wrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int r = min(n0 + mt * 16 + g + 8 * h, N - 1);
            wrow[mt][h] = W + (int64_t)r * K + 8 * t;
        }
    const float *xrow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) xrow[nt] = x + (int64_t)min(nt * 8 + g, M - 1) * K + 8 * t;
    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;
    /* Steps whose 32 values all lie inside K run U at a time with no
     * conditions (their loads issued back to back); the rest, one at a time,
     * with each lane's 8 values in or out (K is a multiple of 8). */
    const int full = K / 32, steps = (K + 31) / 32;
    int s0 = warp;
    for (; s0 + (U - 1) * NW < full; s0 += NW * U) {
        uint4 wv[U][MT][2];
        float4 xv[U][NT][2];
#pragma unroll
        for (int u = 0; u < U; u++)
            sk_load<T, MT, NT>(wrow, xrow, (int64_t)(s0 + u * NW) * 32, true, wv[u], xv[u]);
#pragma unroll
        for (int u = 0; u < U; u++) sk_step<T, MT, NT>(acc, wv[u], xv[u]);
    }
    for (int s = s0; s < steps; s += NW) {
        uint4 wv[MT][2];
        float4 xv[NT][2];
        sk_load<T, MT, NT>(wrow, xrow, (int64_t)s * 32, s * 32 + 8 * t < K, wv, xv);
        sk_step<T, MT, NT>(acc, wv, xv);
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[warp][(mt * NT + nt) * 4 + i][lane] = acc[mt][nt][i];
    __syncthreads();
    /* Entry (mt, nt, i) of lane (g, t): output column n0 + 16 mt + g + 8 (i / 2),
     * row of x 8 nt + 2t + (i % 2). */
    for (int e = threadIdx.x; e < MT * NT * 4 * 32; e += 32 * NW) {
        int l = e & 31, q = e >> 5, i = q & 3, nt = (q >> 2) % NT, mt = (q >> 2) / NT;
        int n = n0 + mt * 16 + (l >> 2) + 8 * (i >> 1), m = nt * 8 + 2 * (l & 3) + (i & 1);
        if (n >= N || m >= M) continue;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) v += red[w][q][l];
        const float r = v + (bias ? bias[n] : 0.0f);
        float *yo = y + (int64_t)m * N + n;
        *yo = add ? *yo + r : r;
    }
}

static bool skinny_ok(int64_t M, const choir_cuda_weight *W) {
    return (W->kind == CHOIR_WEIGHT_BF16 || W->kind == CHOIR_WEIGHT_F16) && M >= 1 &&
           M <= CHOIR_CUDA_SKINNY_MAX_ROWS && W->cols % 8 == 0 && W->cols > 0 && W->rows > 0 &&
           ((uintptr_t)W->data.ptr & 15) == 0;
}

template <typename T, int NT, int U, int PDL = 0>
static void launch_skinny_nt(choir_cuda *cu, const float *x, int M, const T *W, int N, int K,
                             const float *bias, float *y, int acc) {
    /* Wide layers: two column tiles per block (half the re-reads of x), 8
     * warps. Narrow ones (the attention projections, the MLP's down): one
     * tile and 16 warps, so that the few blocks still keep many loads in
     * flight. */
    if (N >= 4096) {
        unsigned blocks = (unsigned)((N + 31) / 32);
        choir_cuda_launch_pdl(PDL > 0, skinny_mma<T, 2, NT, U, 8, PDL>, dim3(blocks), dim3(32 * 8), 0, cu->stream, x,
                              M, W, N, K, bias, y, acc);
    } else {
        unsigned blocks = (unsigned)((N + 15) / 16);
        choir_cuda_launch_pdl(PDL > 0, skinny_mma<T, 1, NT, U, 16, PDL>, dim3(blocks), dim3(32 * 16), 0, cu->stream,
                              x, M, W, N, K, bias, y, acc);
    }
}

template <typename T>
static int launch_skinny(choir_cuda *cu, const float *x, int M, const choir_cuda_weight *W,
                         const float *bias, float *y, choir_err *err, int acc = 0) {
    const T *w = (const T *)W->data.ptr;
    int N = (int)W->rows, K = (int)W->cols;
    /* choir_cuda_pdl: a decode batch's products (up to 8 rows) launched to
     * overlap the kernel before them. */
    const int pdl = M <= 8 ? choir_cuda_pdl_mode(cu) : 0;
    if (M <= 8 && pdl == 1)
        launch_skinny_nt<T, 1, 4, 1>(cu, x, M, w, N, K, bias, y, acc);
    else if (M <= 8 && pdl == 2)
        launch_skinny_nt<T, 1, 4, 2>(cu, x, M, w, N, K, bias, y, acc);
    else if (M <= 8)
        launch_skinny_nt<T, 1, 4>(cu, x, M, w, N, K, bias, y, acc);
    else if (M <= 16)
        launch_skinny_nt<T, 2, 2>(cu, x, M, w, N, K, bias, y, acc);
    else if (M <= 24)
        launch_skinny_nt<T, 3, 1>(cu, x, M, w, N, K, bias, y, acc);
    else
        launch_skinny_nt<T, 4, 1>(cu, x, M, w, N, K, bias, y, acc);
    return choir_cuda_check_launch(err, "skinny linear");
}

static choir_cuda_linear_path g_force = CHOIR_CUDA_LINEAR_AUTO;
static bool g_bias_epi = true; /* on since the H100 run of 6 Dec (VibeVoice encoders 1.98 -> 1.65 s) */
void choir_cuda_linear_set_bias_epilogue(bool on) { g_bias_epi = on; }
void choir_cuda_linear_force(choir_cuda_linear_path p) { g_force = p; }

static choir_cuda_linear_path auto_path(int64_t M, const choir_cuda_weight *W) {
    if (M >= CHOIR_CUDA_SKINNY_FROM && M <= CHOIR_CUDA_SKINNY_TO && skinny_ok(M, W))
        return CHOIR_CUDA_LINEAR_SKINNY;
    if (W->kind == CHOIR_WEIGHT_BF16 || W->kind == CHOIR_WEIGHT_F16)
        return M <= CHOIR_CUDA_GEMV_HALF_ROWS ? CHOIR_CUDA_LINEAR_GEMV : CHOIR_CUDA_LINEAR_BLAS;
    return M <= GEMV_MAX_ROWS ? CHOIR_CUDA_LINEAR_GEMV : CHOIR_CUDA_LINEAR_BLAS;
}

choir_cuda_linear_path choir_cuda_linear_path_for(int64_t M, const choir_cuda_weight *W) {
    /* A forced path that does not apply gives the choice made before the
     * skinny kernel: GEMV up to 8 rows, cuBLAS above. */
    choir_cuda_linear_path plain =
        M <= GEMV_MAX_ROWS ? CHOIR_CUDA_LINEAR_GEMV : CHOIR_CUDA_LINEAR_BLAS;
    switch (g_force) {
    case CHOIR_CUDA_LINEAR_GEMV:
        return plain;
    case CHOIR_CUDA_LINEAR_SKINNY:
        return skinny_ok(M, W) ? CHOIR_CUDA_LINEAR_SKINNY : plain;
    case CHOIR_CUDA_LINEAR_BLAS:
        return CHOIR_CUDA_LINEAR_BLAS;
    case CHOIR_CUDA_LINEAR_AUTO:
        break;
    }
    return auto_path(M, W);
}

/* Row-major y[M,N] = x[M,K] * W[N,K]^T in cuBLAS's column-major terms:
 * y^T = W * x^T, with W read transposed. f32 operands in a TF32 context ask
 * for TF32 by the compute type itself (CUBLAS_COMPUTE_32F_FAST_TF32) rather
 * than trusting the handle's math mode to reach cublasGemmEx, so that the
 * context's TF32 mode certainly covers these products (Kokoro's ALBERT, the
 * f32 linears of every model in a tf32 / bf16-tf32 run); outside TF32 mode
 * they stay true f32 (CUBLAS_COMPUTE_32F, the default math mode). */
static int gemm_xwt(choir_cuda *cu, const void *x, const void *W, cudaDataType_t in_type,
                    int64_t M, int64_t N, int64_t K, void *y, choir_err *err, float beta = 0.0f,
                    cudaDataType_t y_type = CUDA_R_32F) {
    const float one = 1.0f;
    const cublasComputeType_t ct = in_type == CUDA_R_32F && cu->tf32
                                       ? CUBLAS_COMPUTE_32F_FAST_TF32
                                       : CUBLAS_COMPUTE_32F;
    cublasStatus_t st = cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                     &one, W, in_type, (int)K, x, in_type, (int)K, &beta, y,
                                     y_type, (int)N, ct, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : choir_cuda_blas_fail(err, st, "GemmEx");
}

/* The 16-bit one-row GEMVs' shape (gemv_dense and norm_gemv at M = 1 over
 * bf16 or f16 weights, a decode step's products): rows a warp NR, steps a batch U,
 * the weight load's hint, and the grid: one that covers the rows (a warp
 * per group of NR) or a persistent one (as many blocks as fit on the
 * device at once, each warp taking every so many rows, its next row's
 * loads out while it finishes one). Variant 0 is the shape of the other
 * GEMVs (one row a warp, batches of 4, __ldg); the others are candidates
 * timed by choir_cuda_gemv_set_variant (all give the same floats). The
 * default, 4 (two rows a warp, batches of 2, the L2::256B hint), gave
 * VibeVoice 7B's graph-replayed step 7.23 ms against shape 0's 7.98-8.16
 * on an H100 (one process, the shapes timed twice in a sweep), because
 * the hint alone took 0.7 ms off and two rows a warp halve the blocks of
 * the small products (the q/k/v one then fits the device in one wave). */
#define GEMV_VARIANTS 9
#define GEMV_DEFAULT_VARIANT 4
static int g_gemv_variant = GEMV_DEFAULT_VARIANT;
int choir_cuda_gemv_variants(void) { return GEMV_VARIANTS; }
void choir_cuda_gemv_set_variant(int v) {
    g_gemv_variant = v >= 0 && v < GEMV_VARIANTS ? v : GEMV_DEFAULT_VARIANT;
}

/* Calls l(NR, U, HINT, PERSIST) for variant v, each an
 * std::integral_constant (a generic lambda's compile-time parameters). */
template <int N>
using ic = std::integral_constant<int, N>;
template <typename L>
static void gemv_variant_launch(int v, L &&l) {
    switch (v) {
    case 1: l(ic<1>{}, ic<4>{}, ic<1>{}, ic<0>{}); break;
    case 2: l(ic<2>{}, ic<4>{}, ic<0>{}, ic<0>{}); break;
    case 3: l(ic<2>{}, ic<4>{}, ic<1>{}, ic<0>{}); break;
    case 4: l(ic<2>{}, ic<2>{}, ic<1>{}, ic<0>{}); break;
    case 5: l(ic<1>{}, ic<8>{}, ic<1>{}, ic<0>{}); break;
    case 6: l(ic<1>{}, ic<4>{}, ic<0>{}, ic<1>{}); break;
    case 7: l(ic<1>{}, ic<4>{}, ic<1>{}, ic<1>{}); break;
    case 8: l(ic<2>{}, ic<4>{}, ic<1>{}, ic<1>{}); break;
    default: l(ic<1>{}, ic<4>{}, ic<0>{}, ic<0>{}); break;
    }
}

/* CHOIR_CUDA_PDL (choir_cuda_pdl_set): -1 until read or set. */
static int g_pdl = -1;
void choir_cuda_pdl_set(int mode) {
    if (mode < 0) {
        const char *e = getenv("CHOIR_CUDA_PDL");
        mode = e ? atoi(e) : 0;
    }
    __atomic_store_n(&g_pdl, mode >= 0 && mode <= 2 ? mode : 0, __ATOMIC_RELAXED);
}
int choir_cuda_pdl(void) {
    if (__atomic_load_n(&g_pdl, __ATOMIC_RELAXED) < 0) choir_cuda_pdl_set(-1);
    return __atomic_load_n(&g_pdl, __ATOMIC_RELAXED);
}
int choir_cuda_pdl_mode(const choir_cuda *cu) { return cu->props.cc_major >= 9 ? choir_cuda_pdl() : 0; }

/* Calls l(NR, U, HINT, PERSIST, PDL) for the one-row GEMVs: the chosen
 * variant without programmatic launch, or with choir_cuda_pdl on (a device
 * of compute capability 9 or more) the default variant launched so
 * (instantiated for that one alone). */
template <typename L>
static void gemv_pdl_launch(const choir_cuda *cu, L &&l) {
    const int pdl = g_gemv_variant == GEMV_DEFAULT_VARIANT ? choir_cuda_pdl_mode(cu) : 0;
    static_assert(GEMV_DEFAULT_VARIANT == 4, "the programmatic launch's shape is variant 4's");
    if (pdl == 1) l(ic<2>{}, ic<2>{}, ic<1>{}, ic<0>{}, ic<1>{});
    else if (pdl == 2) l(ic<2>{}, ic<2>{}, ic<1>{}, ic<0>{}, ic<2>{});
    else gemv_variant_launch(g_gemv_variant, [&](auto nr, auto u, auto hint, auto persist) {
        l(nr, u, hint, persist, ic<0>{});
    });
}

/* Blocks of kernel k a launch needs to cover `groups` warp groups, or with
 * `persist` at most as many as are resident on the device at once. */
template <typename K>
static int64_t gemv_grid(choir_cuda *cu, K k, int threads, size_t smem, int64_t groups, bool persist) {
    int64_t warps = threads / 32, need = (groups + warps - 1) / warps;
    if (persist) {
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, smem) == cudaSuccess &&
            per_sm > 0) {
            int64_t fit = (int64_t)per_sm * cu->props.sm_count;
            if (fit < need) need = fit;
        }
    }
    return need < INT32_MAX ? need : INT32_MAX;
}

/* One row of x over 16-bit weights in the chosen shape. */
template <typename T>
static void gemv_dense_one(choir_cuda *cu, const float *x, const T *w, int64_t N, int64_t K,
                           const float *bias, float *y, int epilogue) {
    gemv_pdl_launch(cu, [&](auto nr, auto u, auto hint, auto persist, auto pdl) {
        auto k = gemv_dense<T, 1, nr.value, u.value, hint.value, persist.value != 0, pdl.value>;
        int64_t nb = gemv_grid(cu, k, 32 * GEMV_WARPS, 0, (N + nr.value - 1) / nr.value, persist.value);
        choir_cuda_launch_pdl(pdl.value > 0, k, dim3((unsigned)nb), dim3(32 * GEMV_WARPS), 0, cu->stream, x, 1, w,
                              N, K, bias, y, epilogue);
    });
}

/* The dense GEMV over f32, f16 or bf16 weights (the caller has checked the
 * kind), with its epilogue. */
static int launch_gemv_dense(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                             const float *bias, float *y, int epilogue, choir_err *err) {
    int64_t N = W->rows, K = W->cols;
    dim3 grid((unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS)), block(32 * GEMV_WARPS);
#define CHOIR_GEMV(T, R)                                                                       \
    gemv_dense<T, R><<<grid, block, 0, cu->stream>>>(x, (int)M, (const T *)W->data.ptr, N, K,   \
                                                     bias, y, epilogue)
    switch (W->kind) {
    case CHOIR_WEIGHT_F32:
        if (M == 1) CHOIR_GEMV(float, 1);
        else CHOIR_GEMV(float, GEMV_MAX_ROWS);
        return choir_cuda_check_launch(err, "gemv f32");
    case CHOIR_WEIGHT_F16:
        if (M == 1) gemv_dense_one(cu, x, (const __half *)W->data.ptr, N, K, bias, y, epilogue);
        else CHOIR_GEMV(__half, GEMV_MAX_ROWS);
        return choir_cuda_check_launch(err, "gemv f16");
    case CHOIR_WEIGHT_BF16:
        if (M == 1) gemv_dense_one(cu, x, (const __nv_bfloat16 *)W->data.ptr, N, K, bias, y, epilogue);
        else CHOIR_GEMV(__nv_bfloat16, GEMV_MAX_ROWS);
        return choir_cuda_check_launch(err, "gemv bf16");
    default:
        return choir_err_set(err, CHOIR_EINVAL, "cuda: dense GEMV of weight kind %d", (int)W->kind);
    }
#undef CHOIR_GEMV
}

bool choir_cuda_linear_fuses(int64_t M, const choir_cuda_weight *W) {
    if (choir_cuda_gemv_mma_takes(M, W)) return true; /* CHOIR_GEMV_MMA: up to 32 rows, every epilogue */
    return M > 0 && M <= GEMV_MAX_ROWS && W->rows <= INT32_MAX && W->cols <= INT32_MAX &&
           (W->kind == CHOIR_WEIGHT_F32 || W->kind == CHOIR_WEIGHT_F16 ||
            W->kind == CHOIR_WEIGHT_BF16 || choir_cuda_q8_takes(M, W)) &&
           choir_cuda_linear_path_for(M, W) == CHOIR_CUDA_LINEAR_GEMV;
}

int choir_cuda_linear_ex(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                         const float *bias, float *y, bool accumulate, bool gelu, choir_err *err) {
    if (accumulate && gelu)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: linear with both accumulate and GELU");
    if (!choir_cuda_linear_fuses(M, W))
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "cuda: linear with a fused step of %lld rows off the GEMV path",
                             (long long)M);
    int epilogue = accumulate ? GEMV_ACCUMULATE : gelu ? GEMV_GELU : GEMV_WRITE;
    if (choir_cuda_gemv_mma_takes(M, W)) return choir_cuda_gemv_mma_linear(cu, x, M, W, bias, y, epilogue, err);
    if (W->kind == CHOIR_WEIGHT_QUANT) return choir_cuda_q8_linear(cu, x, M, W, bias, y, epilogue, err);
    return launch_gemv_dense(cu, x, M, W, bias, y, epilogue, err);
}

/* CHOIR_CUDA_SKINNY_ACC (read once; on unless 0, since its H100 run of 7
 * Dec 2026, with CHOIR_CUDA_RMS_CACHE): -1 until read or set. */
static int g_skinny_acc = -1;
void choir_cuda_skinny_acc_set(int on) {
    if (on < 0) {
        const char *e = getenv("CHOIR_CUDA_SKINNY_ACC");
        on = !(e && *e && atoi(e) == 0);
    }
    __atomic_store_n(&g_skinny_acc, on != 0, __ATOMIC_RELAXED);
}
static bool skinny_acc_on(void) {
    if (__atomic_load_n(&g_skinny_acc, __ATOMIC_RELAXED) < 0) choir_cuda_skinny_acc_set(-1);
    return __atomic_load_n(&g_skinny_acc, __ATOMIC_RELAXED) == 1;
}

bool choir_cuda_linear_skinny_acc_ok(int64_t M, const float *x, const choir_cuda_weight *W) {
    return skinny_acc_on() && M > 0 && M <= INT32_MAX && W->rows <= INT32_MAX && W->cols <= INT32_MAX &&
           ((uintptr_t)x & 15) == 0 && choir_cuda_linear_path_for(M, W) == CHOIR_CUDA_LINEAR_SKINNY;
}

int choir_cuda_linear_skinny_acc(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                                 const float *bias, float *y, choir_err *err) {
    if (!choir_cuda_linear_skinny_acc_ok(M, x, W))
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "cuda: accumulating linear of %lld rows off the skinny path", (long long)M);
    return W->kind == CHOIR_WEIGHT_F16 ? launch_skinny<__half>(cu, x, (int)M, W, bias, y, err, 1)
                                       : launch_skinny<__nv_bfloat16>(cu, x, (int)M, W, bias, y, err, 1);
}

/* Shared memory of the normalised rows: within the default 48 KiB a block
 * with the reduction's static 128 bytes. */
#define NORM_LINEAR_SMEM (46 * 1024)

static bool g_norm_linear = true;
void choir_cuda_norm_linear_set(bool on) { g_norm_linear = on; }

bool choir_cuda_norm_linear_fuses(int64_t M, const choir_cuda_norm_linear_params *p) {
    if (!g_norm_linear || p->n < 1 || p->n > CHOIR_CUDA_NORM_LINEAR_MAX || M < 1) return false;
    if (choir_cuda_gemv_mma_norm_fuses(M, p)) return true;
    if (p->W[0].kind == CHOIR_WEIGHT_QUANT) return choir_cuda_q8_norm_fuses(M, p);
    int64_t K = p->W[0].cols, total = 0;
    if (K < 1 || (size_t)(M * K) * sizeof(float) > NORM_LINEAR_SMEM) return false;
    for (int i = 0; i < p->n; i++) {
        const choir_cuda_weight *W = &p->W[i];
        if (W->kind != p->W[0].kind || W->cols != K || !choir_cuda_linear_fuses(M, W)) return false;
        if (p->store[i].dst && !p->store[i].pos) return false;
        total += W->rows;
    }
    return total <= INT32_MAX;
}

/* One row of x over 16-bit weights in the chosen shape. */
template <typename T>
static void norm_gemv_one(choir_cuda *cu, const float *x, int64_t K, const choir_cuda_norm_linear_params *p,
                          const norm_linear_args &a, size_t smem, int epilogue) {
    const int64_t total = a.start[p->n];
    gemv_pdl_launch(cu, [&](auto nr, auto u, auto hint, auto persist, auto pdl) {
        auto k = norm_gemv<T, 1, nr.value, u.value, hint.value, persist.value != 0, pdl.value>;
        int64_t nb = gemv_grid(cu, k, NORM_LINEAR_THREADS, smem, (total + nr.value - 1) / nr.value,
                               persist.value);
        choir_cuda_launch_pdl(pdl.value > 0, k, dim3((unsigned)nb), dim3(NORM_LINEAR_THREADS), smem, cu->stream, x,
                              1, K, p->gamma, p->beta, p->eps, a, epilogue);
    });
}

int choir_cuda_norm_linear(choir_cuda *cu, const float *x, int64_t M,
                           const choir_cuda_norm_linear_params *p, choir_err *err) {
    if (!choir_cuda_norm_linear_fuses(M, p))
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "cuda: layer norm and linear of %lld rows off the GEMV path",
                             (long long)M);
    if (choir_cuda_gemv_mma_norm_fuses(M, p)) return choir_cuda_gemv_mma_norm_linear(cu, x, M, p, err);
    if (p->W[0].kind == CHOIR_WEIGHT_QUANT) return choir_cuda_q8_norm_linear(cu, x, M, p, err);
    norm_linear_args a;
    memset(&a, 0, sizeof a);
    a.n = p->n;
    a.rms = p->rms;
    for (int i = 0; i < p->n; i++) {
        a.W[i] = p->W[i].data.ptr;
        a.bias[i] = p->bias[i];
        a.y[i] = p->y[i];
        a.store[i] = p->store[i];
        a.start[i + 1] = a.start[i] + p->W[i].rows;
    }
    int64_t K = p->W[0].cols, warps = NORM_LINEAR_THREADS / 32;
    /* One output row a warp, as the GEMV: blocks that finish make room for
     * new ones, whose norm hides behind their first loads. (A grid of a few
     * blocks per SM, each warp taking ~12 of the logits' 51866 rows, read
     * them at two thirds of the GEMV's rate.) */
    int64_t blocks = (a.start[p->n] + warps - 1) / warps;
    if (blocks > INT32_MAX) blocks = INT32_MAX;
    size_t smem = (size_t)(M * K) * sizeof(float);
    int epilogue = p->gelu ? GEMV_GELU : GEMV_WRITE;
    /* One row of x (a decoder step) keeps one accumulator a lane. */
#define CHOIR_NORM_GEMV(T, R)                                                                  \
    norm_gemv<T, R><<<(unsigned)blocks, NORM_LINEAR_THREADS, smem, cu->stream>>>(             \
        x, (int)M, K, p->gamma, p->beta, p->eps, a, epilogue)
    switch (p->W[0].kind) {
    case CHOIR_WEIGHT_F32:
        if (M == 1) CHOIR_NORM_GEMV(float, 1);
        else CHOIR_NORM_GEMV(float, GEMV_MAX_ROWS);
        break;
    case CHOIR_WEIGHT_F16:
        if (M == 1) norm_gemv_one<__half>(cu, x, K, p, a, smem, epilogue);
        else CHOIR_NORM_GEMV(__half, GEMV_MAX_ROWS);
        break;
    default:
        if (M == 1) norm_gemv_one<__nv_bfloat16>(cu, x, K, p, a, smem, epilogue);
        else CHOIR_NORM_GEMV(__nv_bfloat16, GEMV_MAX_ROWS);
        break;
    }
#undef CHOIR_NORM_GEMV
    return choir_cuda_check_launch(err, "layer norm and gemv");
}

/* choir_cuda_linear's cuBLAS product over bf16 rows xb (already rounded)
 * and 16-bit weights: y = xb W^T + bias, or with beta 1 y += xb W^T (no
 * bias then: the callers below keep the bias out of an accumulation, whose
 * order of additions would differ from the product's then the add's). The
 * bias of bf16 weights in cublasLt's epilogue when g_bias_epi is on. */
static int blas_rows(choir_cuda *cu, const void *xb, int64_t M, const choir_cuda_weight *W, const float *bias,
                     float *y, float beta, choir_err *err) {
    int64_t N = W->rows, K = W->cols;
    cudaDataType_t in_type = W->kind == CHOIR_WEIGHT_F16 ? CUDA_R_16F : CUDA_R_16BF;
    /* bf16 weights with a bias: the bias in cublasLt's epilogue (one
     * pass over y fewer) when switched on; the plain path otherwise or
     * when cublasLt declines. */
    if (g_bias_epi && bias && W->kind == CHOIR_WEIGHT_BF16 &&
        choir_cuda_lt_linear(cu, (const uint16_t *)xb, M, W, bias, y, CUDA_R_32F, beta, false) ==
            CUBLAS_STATUS_SUCCESS)
        return choir_cuda_check_launch(err, "linear with the bias in the epilogue");
    int rc = gemm_xwt(cu, xb, W->data.ptr, in_type, M, N, K, y, err, beta);
    if (rc || !bias) return rc;
    return choir_cuda_add_bias_rows(cu, y, bias, M, N, err);
}

/* 1: read CHOIR_CUDA_FUSED_ROWS at first use; then 0 off, 2 on. */
static int g_fused_rows = 1;
void choir_cuda_fused_rows(bool on) { __atomic_store_n(&g_fused_rows, on ? 2 : 0, __ATOMIC_RELAXED); }
bool choir_cuda_fused_rows_on(void) {
    int v = __atomic_load_n(&g_fused_rows, __ATOMIC_RELAXED);
    if (v == 1) {
        const char *e = getenv("CHOIR_CUDA_FUSED_ROWS");
        /* On unless "0": ran on an H100 on 6 Dec 2026, late (the GPU checks passing
         * with it, VibeVoice 7B's prefill 25.3k -> 29.4-30.0k tokens/s at 10
         * minutes, 17.7k -> 19.6k at 60). */
        v = e && e[0] == '0' ? 0 : 2;
        __atomic_store_n(&g_fused_rows, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

bool choir_cuda_rows_ok(int64_t M, const choir_cuda_weight *W) {
    return choir_cuda_fused_rows_on() && M > 0 && M <= INT32_MAX && W->kind == CHOIR_WEIGHT_BF16 &&
           W->rows <= INT32_MAX && W->cols <= INT32_MAX && !choir_cuda_gemv_mma_takes(M, W) &&
           choir_cuda_linear_path_for(M, W) == CHOIR_CUDA_LINEAR_BLAS;
}

int choir_cuda_norm_linear_rows(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_norm_linear_params *p,
                                void *h, choir_err *err) {
    bool ok = p->rms && !p->beta && p->n >= 1 && p->n <= CHOIR_CUDA_NORM_LINEAR_MAX;
    for (int i = 0; ok && i < p->n; i++) ok = p->W[i].cols == p->W[0].cols && choir_cuda_rows_ok(M, &p->W[i]);
    if (!ok)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: RMS norm into bf16 rows for %lld rows off cuBLAS",
                             (long long)M);
    int rc = choir_cuda_rms_norm_bf16(cu, x, (uint16_t *)h, M, p->W[0].cols, p->gamma, p->eps, err);
    for (int i = 0; !rc && i < p->n; i++) rc = blas_rows(cu, h, M, &p->W[i], p->bias[i], p->y[i], 0.0f, err);
    return rc;
}

int choir_cuda_linear_acc_rows(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W, float *y,
                               choir_err *err) {
    if (!choir_cuda_rows_ok(M, W))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: accumulating product of %lld rows off cuBLAS",
                             (long long)M);
    int64_t K = W->cols;
    __nv_bfloat16 *xb = (__nv_bfloat16 *)choir_cuda_scratch(cu, (size_t)(M * K) * 2, err);
    if (!xb) return err ? err->code : CHOIR_ENOMEM;
    convert_from_f32<__nv_bfloat16><<<choir_cuda_blocks(M * K, 256), 256, 0, cu->stream>>>(x, xb, M * K);
    int rc = choir_cuda_check_launch(err, "convert activations");
    return rc ? rc : blas_rows(cu, xb, M, W, NULL, y, 1.0f, err);
}

int choir_cuda_swiglu_linear_rows(choir_cuda *cu, const float *gate, const float *up, int64_t M,
                                  const choir_cuda_weight *W, const float *bias, float *y, bool accumulate,
                                  choir_err *err) {
    if (!choir_cuda_rows_ok(M, W) || (accumulate && bias))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: swiglu into a product of %lld rows off cuBLAS",
                             (long long)M);
    int64_t K = W->cols;
    uint16_t *hb = (uint16_t *)choir_cuda_scratch(cu, (size_t)(M * K) * 2, err);
    if (!hb) return err ? err->code : CHOIR_ENOMEM;
    int rc = choir_cuda_swiglu_bf16(cu, gate, up, hb, M * K, err);
    return rc ? rc : blas_rows(cu, hb, M, W, bias, y, accumulate ? 1.0f : 0.0f, err);
}

/* 1: read CHOIR_CUDA_MLP_BF16 at first use; then 0 off, 2 on. */
static int g_mlp_bf16 = 1;
void choir_cuda_mlp_bf16(bool on) { __atomic_store_n(&g_mlp_bf16, on ? 2 : 0, __ATOMIC_RELAXED); }
bool choir_cuda_mlp_bf16_on(void) {
    int v = __atomic_load_n(&g_mlp_bf16, __ATOMIC_RELAXED);
    if (v == 1) {
        const char *e = getenv("CHOIR_CUDA_MLP_BF16");
        /* On unless "0": ran on an H100 on 7 Dec 2026 (the vibevoice check
         * passing with it; VibeVoice 7B's prefill at 10 minutes 34.3k -> 35.3k
         * tokens/s). */
        v = e && e[0] == '0' ? 0 : 2;
        __atomic_store_n(&g_mlp_bf16, v, __ATOMIC_RELAXED);
    }
    return v == 2;
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
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: gated MLP over bf16 rows for %lld rows",
                             (long long)M);
    int64_t H = Wg->cols, I = Wg->rows;
    int rc = choir_cuda_rms_norm_bf16(cu, x, (uint16_t *)h, M, H, gamma, eps, err);
    if (!rc) rc = gemm_xwt(cu, h, Wg->data.ptr, CUDA_R_16BF, M, I, H, gate, err, 0.0f, CUDA_R_16BF);
    if (!rc) rc = gemm_xwt(cu, h, Wu->data.ptr, CUDA_R_16BF, M, I, H, up, err, 0.0f, CUDA_R_16BF);
    if (!rc) rc = choir_cuda_swiglu_bf16_rows(cu, (uint16_t *)gate, (const uint16_t *)up, M * I, err);
    return rc ? rc : blas_rows(cu, gate, M, Wd, NULL, x, 1.0f, err);
}

int choir_cuda_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                      const float *bias, float *y, choir_err *err) {
    int64_t N = W->rows, K = W->cols;
    if (M <= 0) return 0;
    if (N > INT32_MAX || K > INT32_MAX || M > INT32_MAX)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: linear [%lld x %lld] too large",
                             (long long)M, (long long)K);
    /* CHOIR_GEMV_MMA: up to 32 rows of bf16 weights on the tensor cores. */
    if (choir_cuda_gemv_mma_takes(M, W)) return choir_cuda_gemv_mma_linear(cu, x, M, W, bias, y, GEMV_WRITE, err);
    choir_cuda_linear_path path = choir_cuda_linear_path_for(M, W);
    if (path == CHOIR_CUDA_LINEAR_SKINNY && ((uintptr_t)x & 15) != 0)
        path = M <= GEMV_MAX_ROWS ? CHOIR_CUDA_LINEAR_GEMV : CHOIR_CUDA_LINEAR_BLAS;
    if (path == CHOIR_CUDA_LINEAR_SKINNY)
        return W->kind == CHOIR_WEIGHT_F16
                   ? launch_skinny<__half>(cu, x, (int)M, W, bias, y, err)
                   : launch_skinny<__nv_bfloat16>(cu, x, (int)M, W, bias, y, err);
    if (path == CHOIR_CUDA_LINEAR_GEMV) {
        if (W->kind == CHOIR_WEIGHT_QUANT && choir_cuda_q8_takes(M, W))
            return choir_cuda_q8_linear(cu, x, M, W, bias, y, GEMV_WRITE, err);
        return W->kind == CHOIR_WEIGHT_QUANT ? launch_gemv_quant(cu, x, (int)M, W, bias, y, err)
                                             : launch_gemv_dense(cu, x, M, W, bias, y, GEMV_WRITE, err);
    }
    int rc;
    if (W->kind == CHOIR_WEIGHT_F32) {
        rc = gemm_xwt(cu, x, W->data.ptr, CUDA_R_32F, M, N, K, y, err);
    } else {
        /* Half-precision inputs for the tensor cores: x converted, and a
         * quantized W expanded to bf16, both in the context's scratch. */
        size_t x_bytes = ((size_t)(M * K) * 2 + 255) & ~(size_t)255;
        size_t w_bytes = W->kind == CHOIR_WEIGHT_QUANT ? (size_t)(N * K) * 2 : 0;
        char *scratch = (char *)choir_cuda_scratch(cu, x_bytes + w_bytes, err);
        if (!scratch) return err ? err->code : CHOIR_ENOMEM;
        unsigned blocks = choir_cuda_blocks(M * K, 256);
        cudaDataType_t in_type = W->kind == CHOIR_WEIGHT_F16 ? CUDA_R_16F : CUDA_R_16BF;
        if (W->kind == CHOIR_WEIGHT_F16)
            convert_from_f32<__half><<<blocks, 256, 0, cu->stream>>>(x, (__half *)scratch, M * K);
        else
            convert_from_f32<__nv_bfloat16>
                <<<blocks, 256, 0, cu->stream>>>(x, (__nv_bfloat16 *)scratch, M * K);
        if ((rc = choir_cuda_check_launch(err, "convert activations"))) return rc;
        const void *w = W->data.ptr;
        if (W->kind == CHOIR_WEIGHT_QUANT) {
            if ((rc = launch_dequant(cu, W, (__nv_bfloat16 *)(scratch + x_bytes), err))) return rc;
            w = scratch + x_bytes;
        }
        if (W->kind != CHOIR_WEIGHT_QUANT) return blas_rows(cu, scratch, M, W, bias, y, 0.0f, err);
        rc = gemm_xwt(cu, scratch, w, in_type, M, N, K, y, err);
    }
    if (rc || !bias) return rc;
    return choir_cuda_add_bias_rows(cu, y, bias, M, N, err);
}

int choir_cuda_gemm_f32(choir_cuda *cu, bool trans_a, bool trans_b, int64_t M, int64_t N,
                        int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float beta, float *C, int64_t ldc, choir_err *err) {
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. */
    cublasStatus_t st = cublasSgemm(cu->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                    &alpha, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : choir_cuda_blas_fail(err, st, "Sgemm");
}

int choir_cuda_gemm_xwt(choir_cuda *cu, const void *x, const void *W, int64_t M, int64_t N, int64_t K, void *y,
                        cudaDataType_t yt, float beta, choir_err *err) {
    return gemm_xwt(cu, x, W, CUDA_R_16BF, M, N, K, y, err, beta, yt);
}

int choir_cuda_gemm_bf16_nt(choir_cuda *cu, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                            const uint16_t *B, float *C, choir_err *err) {
    return gemm_xwt(cu, A, B, CUDA_R_16BF, M, N, K, C, err);
}

int choir_cuda_f32_to_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t n,
                           choir_err *err) {
    convert_from_f32<__nv_bfloat16>
        <<<choir_cuda_blocks(n, 256), 256, 0, cu->stream>>>(x, (__nv_bfloat16 *)y, n);
    return choir_cuda_check_launch(err, "f32 to bf16");
}
