/* The tensor-core GEMV for a few rows of x ("mma GEMV", CHOIR_GEMV_MMA; by
 * default only for 8-bit weights at 5-8 rows, where it won on an H100):
 * y [M, N] = x [M, K] W [N, K]^T over bf16 or 8-bit weights for M =
 * 1..32, the products of a decode step, batched or not. The SIMT GEMVs of
 * cuda_linear.cu spend per weight element one FMA for every row of x, so 8
 * rows cost far more than 1 (VibeVoice 7B's graph step: 6.17 ms for one
 * row, 8.37 for eight through the skinny kernel and unfused norms); here
 * the weights are the A operand of mma.sync.m16n8k16 straight from their
 * 16-byte loads and the rows of x the N side (n8 tiles), so 8 rows cost the
 * tensor core what one does.
 *
 * Layout. A block owns MT x 16 consecutive rows of the stacked layers (the
 * q, k, v or gate, up of choir_cuda_norm_linear in one launch) and its NW
 * warps split K: warp w takes the 32-column steps w, w + NW, ... (the warps
 * of a block read neighbouring bytes of a row). In a step, lane (g = lane /
 * 4, t = lane % 4) loads columns 8t .. 8t + 7 of weight rows g and g + 8 of
 * each 16-row tile (16 bytes each, ld.global.nc with the L1::no_allocate and
 * L2::256B hints, U steps of loads issued before their products) and the
 * same 8 columns of row 8 nt + g of x (two float4, L1-cached: every block
 * reads the same x). The step's two mmas see the 32 columns in a permuted
 * order (mma j takes columns 8t + 4j + 0..3 as its logical k 2t, 2t+1,
 * 2t+8, 2t+9), the same permutation for both operands, so each product is
 * a dot product over the step's columns.
 *
 * Precision. x is f32: it is split into hi = bf16(x) and lo = bf16(x - hi)
 * (x - hi is exact in f32), and each A fragment meets both (two mmas into
 * one f32 accumulator), so a product carries x to about 2^-16 relative,
 * the weights exactly, the sums in f32.
 *
 * Order. Each warp adds its steps in increasing order; the block adds its
 * warps' sums in warp order through shared memory; NW, MT and the steps do
 * not depend on M, and an output of the mma depends only on its row of A
 * and its column of B: row m of y is the same bit for bit whatever M (1 to
 * 32), the batch invariance the engine promises. The RMS norm before
 * choir_cuda_norm_linear's layers runs inside the launch (mg_rms_inv) or,
 * past its registers, through gemv_mma_rms_prep with the same floats; a
 * layer norm through gemv_mma_norm into the context's scratch first. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "tensor/cuda/cuda_gemv_mma.h"
#include "tensor/cuda/cuda_mma.h"

/* --- device code (tests/cuda/emu/run_gemv_mma_emu.sh cuts it out from here) ----------- */

/* The 16-byte weight load: the stream bypasses L1 (x lives there) and asks
 * L2 for 256-byte sectors, as gemv_ld<1> and q8_ld. */
__device__ __forceinline__ uint4 mg_ld(const void *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

/* Eight values of x from p: two float4 when x's rows are 16-byte aligned,
 * else one at a time. */
__device__ __forceinline__ void mg_ldx(const float *p, bool vec, float4 &a, float4 &b) {
    if (vec) {
        a = __ldg((const float4 *)p);
        b = __ldg((const float4 *)p + 1);
    } else {
        a = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
        b = make_float4(__ldg(p + 4), __ldg(p + 5), __ldg(p + 6), __ldg(p + 7));
    }
}

/* The layer of stacked row r (unrolled: no loop-carried branch). */
__device__ __forceinline__ int mg_layer_of(const norm_linear_args &a, int64_t r) {
    int li = 0;
#pragma unroll
    for (int i = 1; i < CHOIR_CUDA_NORM_LINEAR_MAX; i++) li += i < a.n && r >= a.start[i];
    return li;
}

/* Stacked row r's layer (li) and row within it; rows past the stack read
 * its last row (their sums are not stored). */
__device__ __forceinline__ int64_t mg_row(const norm_linear_args &a, int64_t r, int &li) {
    const int64_t total = a.start[a.n];
    if (r >= total) r = total - 1;
    li = mg_layer_of(a, r);
    return r - a.start[li];
}

/* x's two bf16 halves of values v0, v1 packed as an mma register each: hi
 * = bf16(v), lo = bf16(v - hi). */
__device__ __forceinline__ void mg_split(float v0, float v1, uint32_t &hi, uint32_t &lo) {
    hi = pack_bf16(v0, v1);
    const float h0 = __uint_as_float(hi << 16), h1 = __uint_as_float(hi & 0xffff0000u);
    lo = pack_bf16(v0 - h0, v1 - h1);
}

/* One step's loads of a lane: the weight rows' 8 columns, x's 8 columns of
 * each n8 tile (zeros for columns past K or a row of x past M). wrow and
 * x already point at the lane's column 8t; col is the step's first. */
template <int MT, int NT>
struct mg_step {
    uint4 w[MT][2];
    float4 x[NT][2];
};

template <int MT, int NT>
__device__ __forceinline__ void mg_load(const __nv_bfloat16 *const (&wrow)[MT][2], const float *x, int M,
                                        int64_t K, bool xvec, int g, int t, int64_t col, mg_step<MT, NT> &s) {
    const bool in = col + 8 * t < K; /* the lane's 8 columns (K a multiple of 8: all in or all out) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) s.w[mt][h] = in ? mg_ld(wrow[mt][h] + col) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int m = nt * 8 + g;
        if (in && m < M) {
            mg_ldx(x + (int64_t)m * K + col, xvec, s.x[nt][0], s.x[nt][1]);
        } else {
            s.x[nt][0] = make_float4(0, 0, 0, 0);
            s.x[nt][1] = make_float4(0, 0, 0, 0);
        }
    }
}

/* The step's products: for each tile pair and each of the two mmas, x's hi
 * half, then its lo half, into acc; with gl (an RMS norm's gamma at the
 * lane's columns of the step, 16-byte aligned), x times gamma. */
template <int MT, int NT>
__device__ __forceinline__ void mg_mma(const mg_step<MT, NT> &s, float (&acc)[MT][NT][4], const float *gl) {
    uint32_t bh[NT][4], bl[NT][4];
    float4 g0 = make_float4(1, 1, 1, 1), g1 = g0;
    if (gl) mg_ldx(gl, true, g0, g1);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const float4 a = s.x[nt][0], b = s.x[nt][1];
        /* x gamma rounded once (no contraction into the split's
         * subtraction): the floats gemv_mma_rms_prep stores. */
        mg_split(__fmul_rn(a.x, g0.x), __fmul_rn(a.y, g0.y), bh[nt][0], bl[nt][0]);
        mg_split(__fmul_rn(a.z, g0.z), __fmul_rn(a.w, g0.w), bh[nt][1], bl[nt][1]);
        mg_split(__fmul_rn(b.x, g1.x), __fmul_rn(b.y, g1.y), bh[nt][2], bl[nt][2]);
        mg_split(__fmul_rn(b.z, g1.z), __fmul_rn(b.w, g1.w), bh[nt][3], bl[nt][3]);
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const uint4 r0 = s.w[mt][0], r1 = s.w[mt][1];
        const uint32_t a0[4] = {r0.x, r1.x, r0.y, r1.y}, a1[4] = {r0.z, r1.z, r0.w, r1.w};
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            mma_bf16(acc[mt][nt], a0, bh[nt][0], bh[nt][1]);
            mma_bf16(acc[mt][nt], a0, bl[nt][0], bl[nt][1]);
            mma_bf16(acc[mt][nt], a1, bh[nt][2], bh[nt][3]);
            mma_bf16(acc[mt][nt], a1, bl[nt][2], bl[nt][3]);
        }
    }
}

/* An RMS norm fused before the products: y = inv_m sum_c W[r][c] (x[m][c]
 * gamma_c) with inv_m = 1 / sqrt(mean(x[m]^2) + eps), gamma applied as x is
 * split (mg_mma) and inv_m to the block's sums (mg_store). The block's
 * threads sum each row's squares in double (thread i: columns i, i + 32 NW,
 * ...), then each warp's butterfly, then the warps in order: per row, the
 * same floats whatever M. inv [M] and red [NW 8] in shared memory. */
template <int NW>
__device__ __forceinline__ void mg_rms_inv(const float *__restrict__ x, int M, int64_t K, float eps, float *inv,
                                           double *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int m0 = 0; m0 < M; m0 += 8) {
        double ss[8];
#pragma unroll
        for (int j = 0; j < 8; j++) ss[j] = 0;
        for (int64_t i = threadIdx.x; i < K; i += 32 * NW)
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (m0 + j < M) {
                    const double v = x[(int64_t)(m0 + j) * K + i];
                    ss[j] += v * v;
                }
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], o);
            if (lane == 0) red[warp * 8 + j] = ss[j];
        }
        __syncthreads();
        if (threadIdx.x < 8 && m0 + (int)threadIdx.x < M) {
            double sum = red[threadIdx.x];
#pragma unroll
            for (int w = 1; w < NW; w++) sum += red[w * 8 + threadIdx.x];
            inv[m0 + threadIdx.x] = (float)(1.0 / sqrt(sum / (double)K + (double)eps));
        }
        __syncthreads();
    }
}

/* The block's sums out: entry i of tile (mt, nt) of lane (g, t) is stacked
 * row r0 + 16 mt + g + 8 (i / 2), row of x 8 nt + 2t + (i % 2). The warps'
 * sums are added in warp order through red ([NW][MT 4][32] floats), one n8
 * tile at a time, then written by gemv_out_store (bias, epilogue, the
 * layer's rows store); inv: the fused RMS norm's factors (NULL: none). */
template <int MT, int NT, int NW>
__device__ __forceinline__ void mg_store(const float (&acc)[MT][NT][4], float *red, const norm_linear_args &a, int M,
                                         int64_t r0, int epilogue, const float *inv) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t total = a.start[a.n];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        if (nt * 8 >= M) break;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[(warp * MT * 4 + mt * 4 + i) * 32 + lane] = acc[mt][nt][i];
        __syncthreads();
        for (int e = threadIdx.x; e < MT * 4 * 32; e += 32 * NW) {
            const int l = e & 31, q = e >> 5, i = q & 3, mt = q >> 2;
            const int64_t r = r0 + mt * 16 + (l >> 2) + 8 * (i >> 1);
            const int m = nt * 8 + 2 * (l & 3) + (i & 1);
            if (r >= total || m >= M) continue;
            float v = red[q * 32 + l];
#pragma unroll
            for (int w = 1; w < NW; w++) v += red[(w * MT * 4 + q) * 32 + l];
            if (inv) v *= inv[m];
            const int li = mg_layer_of(a, r);
            const int64_t rr = r - a.start[li], rows = a.start[li + 1] - a.start[li];
            gemv_out_store(v, a.bias[li], rr, a.y[li] + (int64_t)m * rows + rr, epilogue, &a.store[li], m);
        }
        __syncthreads();
    }
}

/* MT: 16-row tiles a block; NT: n8 tiles of x (M <= 8 NT); U: steps whose
 * loads go out together; NW: warps a block, splitting K (at most 16). x [M, K] f32 (K a
 * multiple of 8), the layers' bf16 weights in a, epilogue GEMV_*. RMS: the
 * norm fused (gamma 16-byte aligned or NULL, eps); else inv_g, when set,
 * the factors of x's rows already multiplied by gamma (gemv_mma_rms_prep). */
/* The weights' side of a step, bf16: the lane's rows and column 8t, and
 * x's (mg_steps' producer). */
template <int MT, int NT>
struct mg_bf16_src {
    using step = mg_step<MT, NT>;
    const __nv_bfloat16 *wrow[MT][2];
    const float *xl;
    int64_t K, steps;
    int M, g, t;
    bool xvec;
    __device__ __forceinline__ void load(int64_t s, step &st) const {
        mg_load<MT, NT>(wrow, xl, M, K, xvec, g, t, s * 32, st);
    }
    __device__ __forceinline__ void mma(step &st, float (&acc)[MT][NT][4], int64_t s, const float *gamma) const {
        mg_mma<MT, NT>(st, acc, gamma && s * 32 + 8 * t < K ? gamma + s * 32 + 8 * t : nullptr);
    }
};

/* A warp's steps of both GEMVs into acc (zeroed here): batches of U of its
 * steps, their loads issued together; steps past the end (the last batch)
 * load nothing and are skipped, a lane's columns past K (the last step)
 * load zeros. With RMS the first batch is out before the norm's sums
 * (mg_rms_inv into inv, every warp at the block's barriers in its first
 * pass), and gamma scales x as it is split. P: mg_bf16_src or mg_q8_src. */
template <int MT, int NT, int U, int NW, bool RMS, class P>
__device__ __forceinline__ void mg_steps(const P &p, const float *__restrict__ x, int M, int64_t K,
                                         const float *__restrict__ gamma, float eps, float (&acc)[MT][NT][4],
                                         float *inv, double *redd) {
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;
    const int64_t steps = p.steps;
    if constexpr (RMS) {
        typename P::step st[U];
        for (int64_t s0 = warp;; s0 += (int64_t)NW * U) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t s = s0 + (int64_t)u * NW;
                if (s < steps) p.load(s, st[u]);
            }
            if (s0 == warp) mg_rms_inv<NW>(x, M, K, eps, inv, redd);
            if (s0 >= steps) break;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t s = s0 + (int64_t)u * NW;
                if (s < steps) p.mma(st[u], acc, s, gamma);
            }
        }
    } else {
        for (int64_t s0 = warp; s0 < steps; s0 += (int64_t)NW * U) {
            typename P::step st[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t s = s0 + (int64_t)u * NW;
                if (s < steps) p.load(s, st[u]);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t s = s0 + (int64_t)u * NW;
                if (s < steps) p.mma(st[u], acc, s, nullptr);
            }
        }
    }
}

/* A block's steps over producer p and its sums out: both kernels' body
 * after their producer's set-up. r0: the block's first stacked row. */
template <int MT, int NT, int U, int NW, bool RMS, class P>
__device__ __forceinline__ void mg_run(const P &p, const float *__restrict__ x, int M, int64_t K,
                                       const norm_linear_args &a, int64_t r0, int epilogue,
                                       const float *__restrict__ gamma, float eps, const float *__restrict__ inv_g) {
    /* One n8 tile's sums of every warp at a time: [NW][MT * 4][32]. */
    __shared__ float red[NW * MT * 4 * 32];
    __shared__ float inv[RMS ? GEMV_MMA_MAX_ROWS : 1];
    __shared__ double redd[RMS ? NW * 8 : 1];
    float acc[MT][NT][4];
    mg_steps<MT, NT, U, NW, RMS>(p, x, M, K, gamma, eps, acc, inv, redd);
    mg_store<MT, NT, NW>(acc, red, a, M, r0, epilogue, RMS ? inv : inv_g);
}

template <int MT, int NT, int U, int NW, bool RMS>
__global__ void __launch_bounds__(32 * NW, 2)
    gemv_mma_bf16(const float *__restrict__ x, int M, int64_t K, norm_linear_args a, int epilogue,
                  const float *__restrict__ gamma, float eps, const float *__restrict__ inv_g) {
    const int lane = threadIdx.x & 31;
    const int64_t r0 = (int64_t)blockIdx.x * (MT * 16);
    mg_bf16_src<MT, NT> p;
    p.g = lane >> 2, p.t = lane & 3, p.M = M, p.K = K, p.steps = (K + 31) / 32;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int li;
            const int64_t rr = mg_row(a, r0 + mt * 16 + p.g + 8 * h, li);
            p.wrow[mt][h] = (const __nv_bfloat16 *)a.W[li] + rr * K + 8 * p.t;
        }
    p.xvec = ((uintptr_t)x & 15) == 0 && (K & 3) == 0;
    p.xl = x + 8 * p.t;
    mg_run<MT, NT, U, NW, RMS>(p, x, M, K, a, r0, epilogue, gamma, eps, inv_g);
}

/* --- 8-bit MLX weights ------------------------------------------------------------ */

/* The scales and biases of the stacked 8-bit layers (the codes are
 * norm_linear_args' W: [rows_i, K] bytes). */
struct mg_quant {
    const void *scales[CHOIR_CUDA_NORM_LINEAR_MAX], *biases[CHOIR_CUDA_NORM_LINEAR_MAX]; /* [rows_i, K / G] */
    int sb_dtype;    /* choir_dtype */
    int group_shift; /* log2(G / 64): a 64-column step's group is step >> group_shift */
};

__device__ __forceinline__ float mg_sb(const void *p, int dt, int64_t i) {
    if (dt == CHOIR_DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == CHOIR_DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* Codes e and e + 1 of word w as an mma register: each 2^23 + code read as
 * a float, minus 2^23 (exact, as q8_code), then both to bf16 (exact: a
 * code has 8 significant bits). */
__device__ __forceinline__ uint32_t mq_pair(uint32_t w, int e) {
    const float f0 = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | (unsigned)e)) - 8388608.0f;
    const float f1 = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | (unsigned)(e + 1))) - 8388608.0f;
    return pack_bf16(f0, f1);
}

/* One 64-column step of a lane: 16 codes (columns 16t .. 16t + 15) of each
 * of its weight rows with their group's scale and bias, and the same 16
 * columns of x's row 8 nt + g for each n8 tile. */
template <int MT, int NT>
struct mq_step {
    uint4 q[MT][2];
    float s[MT][2], b[MT][2];
    float4 x[NT][4];
};

/* srow / brow: each weight row's first scale and bias (its group 0). */
template <int MT, int NT>
__device__ __forceinline__ void mq_load(const uint8_t *const (&wrow)[MT][2], const void *const (&srow)[MT][2],
                                        const void *const (&brow)[MT][2], int sb_dtype, int group_shift,
                                        const float *x, int M, int64_t K, bool xvec, int g, int64_t step,
                                        mq_step<MT, NT> &s) {
    const int64_t gi = step >> group_shift;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            s.q[mt][h] = mg_ld(wrow[mt][h] + step * 64);
            s.s[mt][h] = mg_sb(srow[mt][h], sb_dtype, gi);
            s.b[mt][h] = mg_sb(brow[mt][h], sb_dtype, gi);
        }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int m = nt * 8 + g;
        if (m < M) {
            const float *p = x + (int64_t)m * K + step * 64;
            mg_ldx(p, xvec, s.x[nt][0], s.x[nt][1]);
            mg_ldx(p + 8, xvec, s.x[nt][2], s.x[nt][3]);
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) s.x[nt][k] = make_float4(0, 0, 0, 0);
        }
    }
}

/* The step's products: for each tile pair, the four mmas of its 64 columns
 * (mma j: columns 16t + 4j + 0..3 of every lane t as logical k 2t, 2t+1,
 * 2t+8, 2t+9), x's hi then lo half, into a fresh accumulator c; then, as
 * cuda_linear_q8.cu's per 16 codes, acc += s c + b (the x row's sum over
 * the 64 columns), s and b those of the weight row's group. With gl (an
 * RMS norm's gamma at the lane's 16 columns), x times gamma first. */
template <int MT, int NT>
__device__ __forceinline__ void mq_mma(mq_step<MT, NT> &s, float (&acc)[MT][NT][4], int t, const float *gl) {
    if (gl) {
        float4 gv[4];
        mg_ldx(gl, true, gv[0], gv[1]);
        mg_ldx(gl + 8, true, gv[2], gv[3]);
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float4 &v = s.x[nt][k];
                v.x = __fmul_rn(v.x, gv[k].x), v.y = __fmul_rn(v.y, gv[k].y);
                v.z = __fmul_rn(v.z, gv[k].z), v.w = __fmul_rn(v.w, gv[k].w);
            }
    }
    float xc[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        float xs[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float4 v = s.x[nt][k];
            xs[k] = (v.x + v.y) + (v.z + v.w);
        }
        /* The row's sum over the step: the four lanes of a row the same
         * floats (each butterfly level adds the same two values). */
        float sum = (xs[0] + xs[1]) + (xs[2] + xs[3]);
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        xc[nt][0] = __shfl_sync(0xffffffffu, sum, 8 * t);     /* x row 8 nt + 2t */
        xc[nt][1] = __shfl_sync(0xffffffffu, sum, 8 * t + 4); /* x row 8 nt + 2t + 1 */
    }
    /* The codes as A fragments once for every n8 tile. */
    uint32_t a[MT][4][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const uint32_t w0[4] = {s.q[mt][0].x, s.q[mt][0].y, s.q[mt][0].z, s.q[mt][0].w};
        const uint32_t w1[4] = {s.q[mt][1].x, s.q[mt][1].y, s.q[mt][1].z, s.q[mt][1].w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            a[mt][j][0] = mq_pair(w0[j], 0);
            a[mt][j][1] = mq_pair(w1[j], 0);
            a[mt][j][2] = mq_pair(w0[j], 2);
            a[mt][j][3] = mq_pair(w1[j], 2);
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        uint32_t bh[8], bl[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float4 v = s.x[nt][k];
            mg_split(v.x, v.y, bh[2 * k], bl[2 * k]);
            mg_split(v.z, v.w, bh[2 * k + 1], bl[2 * k + 1]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                mma_bf16(c, a[mt][j], bh[2 * j], bh[2 * j + 1]);
                mma_bf16(c, a[mt][j], bl[2 * j], bl[2 * j + 1]);
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[mt][nt][i] += s.s[mt][i >> 1] * c[i] + s.b[mt][i >> 1] * xc[nt][i & 1];
        }
    }
}

/* gemv_mma_bf16's layout over 8-bit codes (K a multiple of 64 and of G,
 * G 64 or 128): a lane's 16-byte load is 16 codes of a row, a step 64
 * columns, each step's sums scaled by its group as they are added. */
/* The weights' side of a step, 8-bit: the lane's rows (column 16t), their
 * first scales and biases, and x (mg_steps' producer). The rows' scale and
 * bias pointers are taken from the kernel's parameter once, at the start:
 * a reference to it kept here would put the parameter in local memory and
 * a local load before every scale's. */
template <int MT, int NT>
struct mg_q8_src {
    using step = mq_step<MT, NT>;
    const uint8_t *wrow[MT][2];
    const void *srow[MT][2], *brow[MT][2];
    const float *xl;
    int64_t K, steps;
    int M, g, t, sb_dtype, group_shift;
    bool xvec;
    __device__ __forceinline__ void load(int64_t s, step &st) const {
        mq_load<MT, NT>(wrow, srow, brow, sb_dtype, group_shift, xl, M, K, xvec, g, s, st);
    }
    __device__ __forceinline__ void mma(step &st, float (&acc)[MT][NT][4], int64_t s, const float *gamma) const {
        mq_mma<MT, NT>(st, acc, t, gamma ? gamma + s * 64 + 16 * t : nullptr);
    }
};

template <int MT, int NT, int U, int NW, bool RMS>
__global__ void __launch_bounds__(32 * NW, 2)
    gemv_mma_q8(const float *__restrict__ x, int M, int64_t K, norm_linear_args a, mg_quant qa, int epilogue,
                const float *__restrict__ gamma, float eps, const float *__restrict__ inv_g) {
    const int lane = threadIdx.x & 31;
    const int64_t r0 = (int64_t)blockIdx.x * (MT * 16);
    mg_q8_src<MT, NT> p;
    p.g = lane >> 2, p.t = lane & 3, p.M = M, p.K = K, p.steps = K >> 6;
    p.sb_dtype = qa.sb_dtype, p.group_shift = qa.group_shift;
    const int64_t es = qa.sb_dtype == CHOIR_DTYPE_F32 ? 4 : 2;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int li;
            const int64_t rr = mg_row(a, r0 + mt * 16 + p.g + 8 * h, li);
            const int64_t grp = rr * ((K >> 6) >> qa.group_shift);
            p.wrow[mt][h] = (const uint8_t *)a.W[li] + rr * K + 16 * p.t;
            p.srow[mt][h] = (const char *)qa.scales[li] + grp * es;
            p.brow[mt][h] = (const char *)qa.biases[li] + grp * es;
        }
    p.xvec = ((uintptr_t)x & 15) == 0 && (K & 3) == 0;
    p.xl = x + 16 * p.t;
    mg_run<MT, NT, U, NW, RMS>(p, x, M, K, a, r0, epilogue, gamma, eps, inv_g);
}

/* The norm before choir_cuda_norm_linear's layers, row m a block (blocks
 * of NORM_THREADS threads, as norm_gemv's): the floats norm_gemv stages in
 * shared memory (cuda_rms_row_warp by warp 0 for RMS rows up to
 * CUDA_RMS_WARP_MAX, else cuda_rms_row or cuda_ln_row over the block), into
 * out [M, K]. */
#define GEMV_MMA_NORM_THREADS 256
__global__ void __launch_bounds__(GEMV_MMA_NORM_THREADS)
    gemv_mma_norm(const float *__restrict__ x, int64_t K, const float *__restrict__ gamma,
                  const float *__restrict__ beta, float eps, bool rms, float *__restrict__ out) {
    __shared__ float red[32];
    __shared__ double redd[32];
    const int64_t m = blockIdx.x;
    if (rms && K <= CUDA_RMS_WARP_MAX) {
        if (threadIdx.x < 32) cuda_rms_row_warp(x + m * K, K, eps, gamma, out + m * K);
    } else if (rms) {
        cuda_rms_row(x + m * K, K, eps, redd, gamma, out + m * K);
    } else {
        cuda_ln_row(x + m * K, K, eps, red, gamma, beta, out + m * K);
    }
}

/* The fused RMS norm's first half for launches that cannot fuse it (more
 * rows than its registers allow, or a gamma off 16 bytes): row m a block
 * of 32 NW threads, out[m] = x[m] gamma (rounded once) and inv[m] = the
 * factor mg_rms_inv computes, the same floats (the same partial sums in
 * the same order), so that the product is the same bit for bit whichever
 * way it runs (the batch invariance across M). */
template <int NW>
__global__ void __launch_bounds__(32 * NW)
    gemv_mma_rms_prep(const float *__restrict__ x, int64_t K, const float *__restrict__ gamma, float eps,
                      float *__restrict__ out, float *__restrict__ inv) {
    __shared__ double red[NW];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t m = blockIdx.x;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < K; i += 32 * NW) {
        const double v = x[m * K + i];
        ss += v * v;
        out[m * K + i] = gamma ? __fmul_rn(x[m * K + i], gamma[i]) : x[m * K + i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = red[0];
#pragma unroll
        for (int w = 1; w < NW; w++) sum += red[w];
        inv[m] = (float)(1.0 / sqrt(sum / (double)K + (double)eps));
    }
}

/* --- host side (run_gemv_mma_emu.sh cuts up to here) ---------------------------------- */

/* The switch (CHOIR_GEMV_MMA, read once, or choir_cuda_gemv_mma_set):
 * 0 not yet read, 1 off, 2 on for every weight it takes, 3 auto (the
 * default): 8-bit weights at GEMV_MMA_Q8_MIN_ROWS .. _MAX_ROWS rows, never
 * bf16. On an H100 (7 Dec 2026, VibeVoice 7B's graph step at 10 minutes,
 * off / on, launch shape 2): 8-bit 1 row 6.42 / 12.45 ms, 2 rows 9.10 /
 * 12.94, 4 rows 12.68 / 14.61 (shape 0), 8 rows 29.79 / 16.69, 16 rows
 * 24.53 / 27.53, 32 rows 31.72 / 35.45 (shape 0); bf16 1 row 6.38 / 7.12,
 * 8 rows 10.19 / 10.69: elsewhere the CUDA-core GEMV, the dequantizing
 * cuBLAS path and the skinny kernel stay faster. */
static int g_mma = 0;
void choir_cuda_gemv_mma_set(int mode) {
    __atomic_store_n(&g_mma, mode < 0 ? 0 : 1 + (mode < 2 ? mode : 2), __ATOMIC_RELAXED);
}
int choir_cuda_gemv_mma_mode(void) {
    int v = __atomic_load_n(&g_mma, __ATOMIC_RELAXED);
    if (!v) {
        const char *e = getenv("CHOIR_GEMV_MMA");
        v = e && *e ? (atoi(e) ? 2 : 1) : 3;
        __atomic_store_n(&g_mma, v, __ATOMIC_RELAXED);
    }
    return v - 1;
}
bool choir_cuda_gemv_mma_on(void) { return choir_cuda_gemv_mma_mode() == 1; }

/* The 8-bit launch's shape (choir_cuda_gemv_mma_q8_shape_set): -1 until
 * read from CHOIR_GEMV_MMA_Q8_SHAPE. */
static int g_q8_shape = -1;
void choir_cuda_gemv_mma_q8_shape_set(int shape) {
    if (shape < 0) {
        const char *e = getenv("CHOIR_GEMV_MMA_Q8_SHAPE");
        shape = e ? atoi(e) : 2;
    }
    __atomic_store_n(&g_q8_shape, shape >= 0 && shape < CHOIR_GEMV_MMA_Q8_SHAPES ? shape : 0, __ATOMIC_RELAXED);
}
int choir_cuda_gemv_mma_q8_shape(void) {
    if (__atomic_load_n(&g_q8_shape, __ATOMIC_RELAXED) < 0) choir_cuda_gemv_mma_q8_shape_set(-1);
    return __atomic_load_n(&g_q8_shape, __ATOMIC_RELAXED);
}

static bool mma_quant_ok(const choir_cuda_weight *W) {
    return W->bits == 8 && (W->group_size == 64 || W->group_size == 128) && W->cols % W->group_size == 0 &&
           (W->sb_dtype == CHOIR_DTYPE_BF16 || W->sb_dtype == CHOIR_DTYPE_F16 || W->sb_dtype == CHOIR_DTYPE_F32);
}

bool choir_cuda_gemv_mma_takes(int64_t M, const choir_cuda_weight *W) {
    const int mode = choir_cuda_gemv_mma_mode();
    if (!mode || (mode == 2 && (W->kind != CHOIR_WEIGHT_QUANT || M < GEMV_MMA_Q8_MIN_ROWS ||
                                M > GEMV_MMA_Q8_MAX_ROWS)))
        return false;
    return M >= 1 && M <= GEMV_MMA_MAX_ROWS &&
           (W->kind == CHOIR_WEIGHT_BF16 || (W->kind == CHOIR_WEIGHT_QUANT && mma_quant_ok(W))) && W->cols > 0 &&
           W->cols % 8 == 0 && W->rows > 0 && W->rows <= INT32_MAX && W->cols <= INT32_MAX &&
           ((uintptr_t)W->data.ptr & 15) == 0;
}

/* The launch for M rows: n8 tiles for M, fewer steps in flight as the
 * tiles take registers (ptxas: no spills within 128). The block's shape
 * (32 rows, 8 warps, at most 128 registers a thread so that two blocks
 * fit an SM: the grids of the 7B's narrow products, 112 and 144 blocks,
 * then run in one wave) depends on the stack and K only, never on M (the
 * batch invariance). qa: the 8-bit layers' scales (NULL: bf16). */
#define GEMV_MMA_WARPS 8
/* Rows of x up to which the RMS norm runs inside the launch (n8 tiles 1-3). */
#define GEMV_MMA_RMS_ROWS 24
/* An RMS norm fused into the launch (mg_rms_inv): gamma (NULL: 1) and eps. */
struct mma_rms {
    const float *gamma;
    float eps;
};
template <int MT, int NT, int U, bool Q>
static void mma_launch_nt(choir_cuda *cu, const float *x, int M, int64_t K, const norm_linear_args &a,
                          const mg_quant *qa, int epilogue, const mma_rms *rms, const float *inv_g) {
    const int64_t blocks = (a.start[a.n] + MT * 16 - 1) / (MT * 16);
    const unsigned nb = (unsigned)(blocks < INT32_MAX ? blocks : INT32_MAX);
    const unsigned th = 32 * GEMV_MMA_WARPS;
    if constexpr (Q) {
        /* Three steps in flight with the fused norm spill: two. */
        constexpr int UR = U > 2 ? 2 : U;
        if (rms && NT < 4)
            gemv_mma_q8<MT, NT, UR, GEMV_MMA_WARPS, NT < 4>
                <<<nb, th, 0, cu->stream>>>(x, M, K, a, *qa, epilogue, rms->gamma, rms->eps, NULL);
        else
            gemv_mma_q8<MT, NT, U, GEMV_MMA_WARPS, false>
                <<<nb, th, 0, cu->stream>>>(x, M, K, a, *qa, epilogue, NULL, 0, inv_g);
    } else {
        /* The fused norm's gamma and factors take registers: one step fewer
         * in flight where that keeps ptxas within 128 without spills. */
        constexpr int UR = U > 1 ? U - 1 : 1;
        if (rms && NT < 4)
            gemv_mma_bf16<MT, NT, UR, GEMV_MMA_WARPS, NT < 4>
                <<<nb, th, 0, cu->stream>>>(x, M, K, a, epilogue, rms->gamma, rms->eps, NULL);
        else
            gemv_mma_bf16<MT, NT, U, GEMV_MMA_WARPS, false>
                <<<nb, th, 0, cu->stream>>>(x, M, K, a, epilogue, NULL, 0, inv_g);
    }
}

/* (MT, NT, U) for M rows: rows a block, n8 tiles, steps in flight. MT and
 * U change which rows a block holds and when loads go out, not a row's
 * order of sums (its warps' steps and the warps' order are fixed by K). */
static void mma_launch(choir_cuda *cu, const float *x, int M, int64_t K, const norm_linear_args &a, const mg_quant *qa,
                       int epilogue, const mma_rms *rms, const float *inv_g = NULL) {
    if (qa) {
        const int sh = choir_cuda_gemv_mma_q8_shape();
        /* Up to 8 rows: shape 0 two tiles a block, one step in flight;
         * 1 one tile, two steps; 2 (the default) one tile, three steps
         * (two with the fused norm). More steps of two tiles spill
         * (ptxas, sm_90). H100, 7 Dec 2026, the 8-bit 8-row step: shape 0
         * 17.26 ms, 1 16.74, 2 16.69. */
        if (M <= 8) {
            if (sh == 1) mma_launch_nt<1, 1, 2, true>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
            else if (sh == 2) mma_launch_nt<1, 1, 3, true>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
            else mma_launch_nt<2, 1, 1, true>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
        } else if (M <= 16) mma_launch_nt<1, 2, 1, true>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
        else if (M <= 24) mma_launch_nt<1, 3, 1, true>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
        else mma_launch_nt<1, 4, 1, true>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
    } else {
        if (M <= 8) mma_launch_nt<2, 1, 3, false>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
        else if (M <= 16) mma_launch_nt<2, 2, 2, false>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
        else if (M <= 24) mma_launch_nt<2, 3, 1, false>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
        else mma_launch_nt<2, 4, 1, false>(cu, x, M, K, a, qa, epilogue, rms, inv_g);
    }
}

static void mma_quant(mg_quant *qa, int i, const choir_cuda_weight *W) {
    qa->scales[i] = W->scales.ptr;
    qa->biases[i] = W->biases.ptr;
    qa->sb_dtype = W->sb_dtype;
    qa->group_shift = W->group_size == 128 ? 1 : 0;
}

int choir_cuda_gemv_mma_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                               const float *bias, float *y, int epilogue, choir_err *err) {
    if (!choir_cuda_gemv_mma_takes(M, W))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: mma GEMV of %lld rows of this weight", (long long)M);
    norm_linear_args a;
    mg_quant qa;
    memset(&a, 0, sizeof a);
    memset(&qa, 0, sizeof qa);
    a.n = 1;
    a.W[0] = W->data.ptr;
    a.bias[0] = bias;
    a.y[0] = y;
    a.start[1] = W->rows;
    if (W->kind == CHOIR_WEIGHT_QUANT) mma_quant(&qa, 0, W);
    mma_launch(cu, x, (int)M, W->cols, a, W->kind == CHOIR_WEIGHT_QUANT ? &qa : NULL, epilogue, NULL);
    return choir_cuda_check_launch(err, "mma gemv");
}

bool choir_cuda_gemv_mma_norm_fuses(int64_t M, const choir_cuda_norm_linear_params *p) {
    if (p->n < 1 || p->n > CHOIR_CUDA_NORM_LINEAR_MAX || (p->rms && p->beta)) return false;
    const choir_cuda_weight *W0 = &p->W[0];
    int64_t total = 0;
    for (int i = 0; i < p->n; i++) {
        const choir_cuda_weight *W = &p->W[i];
        if (!choir_cuda_gemv_mma_takes(M, W) || W->kind != W0->kind || W->cols != W0->cols) return false;
        if (W->kind == CHOIR_WEIGHT_QUANT && (W->group_size != W0->group_size || W->sb_dtype != W0->sb_dtype))
            return false;
        if (p->store[i].dst && !p->store[i].pos) return false;
        total += W->rows;
    }
    return total <= INT32_MAX;
}

int choir_cuda_gemv_mma_norm_linear(choir_cuda *cu, const float *x, int64_t M,
                                    const choir_cuda_norm_linear_params *p, choir_err *err) {
    if (!choir_cuda_gemv_mma_norm_fuses(M, p))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: norm and mma GEMV of %lld rows", (long long)M);
    const int64_t K = p->W[0].cols;
    norm_linear_args a;
    mg_quant qa;
    memset(&a, 0, sizeof a);
    memset(&qa, 0, sizeof qa);
    a.n = p->n;
    a.rms = p->rms;
    for (int i = 0; i < p->n; i++) {
        a.W[i] = p->W[i].data.ptr;
        a.bias[i] = p->bias[i];
        a.y[i] = p->y[i];
        a.store[i] = p->store[i];
        a.start[i + 1] = a.start[i] + p->W[i].rows;
        if (p->W[i].kind == CHOIR_WEIGHT_QUANT) mma_quant(&qa, i, &p->W[i]);
    }
    const mg_quant *q = p->W[0].kind == CHOIR_WEIGHT_QUANT ? &qa : NULL;
    const int epilogue = p->gelu ? GEMV_GELU : GEMV_WRITE;
    /* The RMS norm inside the launch (gamma read 16 bytes at a time) up to
     * GEMV_MMA_RMS_ROWS rows; above that (registers), or with a gamma off
     * 16 bytes, its first half by gemv_mma_rms_prep into the context's
     * scratch, the same floats; a layer norm through gemv_mma_norm (the
     * floats of norm_gemv's staging) into the scratch first. */
    if (p->rms && ((uintptr_t)p->gamma & 15) == 0 && M <= GEMV_MMA_RMS_ROWS) {
        const mma_rms rms = {p->gamma, p->eps};
        mma_launch(cu, x, (int)M, K, a, q, epilogue, &rms);
        return choir_cuda_check_launch(err, "RMS norm and mma gemv");
    }
    if (p->rms) {
        float *xg = (float *)choir_cuda_scratch(cu, (size_t)(M * K + GEMV_MMA_MAX_ROWS) * sizeof(float), err);
        if (!xg) return err ? err->code : CHOIR_ENOMEM;
        float *inv = xg + M * K;
        gemv_mma_rms_prep<GEMV_MMA_WARPS>
            <<<(unsigned)M, 32 * GEMV_MMA_WARPS, 0, cu->stream>>>(x, K, p->gamma, p->eps, xg, inv);
        int rc = choir_cuda_check_launch(err, "RMS norm's sums before the mma gemv");
        if (rc) return rc;
        mma_launch(cu, xg, (int)M, K, a, q, epilogue, NULL, inv);
        return choir_cuda_check_launch(err, "RMS norm and mma gemv");
    }
    float *xn = (float *)choir_cuda_scratch(cu, (size_t)(M * K) * sizeof(float), err);
    if (!xn) return err ? err->code : CHOIR_ENOMEM;
    gemv_mma_norm<<<(unsigned)M, GEMV_MMA_NORM_THREADS, 0, cu->stream>>>(x, K, p->gamma, p->beta, p->eps, p->rms,
                                                                         xn);
    int rc = choir_cuda_check_launch(err, "norm before the mma gemv");
    if (rc) return rc;
    mma_launch(cu, xn, (int)M, K, a, q, epilogue, NULL);
    return choir_cuda_check_launch(err, "norm and mma gemv");
}
