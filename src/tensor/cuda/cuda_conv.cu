/* Implicit-GEMM conv1d on the tensor cores (choir/cuda_audio.h), for the
 * stride-1 convolutions of vocoders: out[co, t] = bias[co] + sum over
 * (ci, k) of W[co, ci, k] x[ci, t + k dil - pad]. M = Cout, N = frames,
 * reduction Cin x K; no im2col matrix: a block stages a window of x
 * (channels chunk x (128 + halo) frames) once and reads it at each tap's
 * shift.
 *
 * Block tile 128 (Cout) x 128 (frames), 8 warps of 64 x 32 (16 of 32 x 32
 * in the tf32x3 mode), mma.sync with f32 accumulation. A reduction step is one chunk of CK input channels with
 * all K taps: the weight tile [128][K][CK] arrives by cp.async (from a copy
 * of W re-laid [Cout][chunk][K][CK] in scratch, zero-padded), the x window is
 * loaded into registers while the previous chunk computes, optionally
 * transformed (AdaIN affine + Snake, the fused pre-activation), converted
 * and stored transposed ([frame][channel]) so that ldmatrix gives the B
 * fragments at any tap shift. Two buffers of each.
 *
 * Three precisions (the mode), all with f32 accumulation:
 *   bf16   (bf16 weights): m16n8k16 on bf16 operands, x rounded to bf16;
 *   tf32   (f32 weights, the context in TF32 mode): m16n8k8 on TF32
 *          operands (x and W rounded to nearest, 10-bit mantissa), as
 *          cuDNN's default f32 convolutions;
 *   tf32x3 (f32 weights, default): each operand split into a TF32 high
 *          part and a TF32 residual, three products (lo*hi + hi*lo +
 *          hi*hi) per pair: about f32 accuracy (2^-22 relative per
 *          operand) at a third of the TF32 rate.
 * Epilogue: bias, zero tails (t >= out_lens[b]), an optional residual
 * added (y may alias it). */
#include <stdint.h>

#ifndef CHOIR_IG_EMU
#include <cuda_bf16.h>

#include "choir/cuda_audio.h"
#include "tensor/cuda/cuda_internal.h"
#endif
#include "tensor/cuda/cuda_conv_ig.h"

#define IG_BN 128
/* threads of a block: 8 warps of 64 x 32, or 16 warps of 32 x 32 in the
 * tf32x3 mode (which keeps a second set of accumulators, below) */
#define IG_THREADS(mode) ((mode) == IG_TF32X3 ? 512 : 256)
#define IG_RMAX (IG_BN + IG_HALO_MAX)
/* the most dynamic shared memory a block takes (K 16, halo 64): 150 KB */
#define IG_SMEM_MAX (2 * IG_BM * (IG_K_MAX * 32 + 16) + 2 * IG_RMAX * IG_XROW)
#ifndef IG_DYN_SMEM
#define IG_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* W [Cout, Cin, K] (f32 or bf16) -> wp [Mpad][nchunk][K][CK], zeros past
 * Cout and Cin; TF32 mode rounds here once. */
template <int MODE>
__global__ void k_ig_pack(const void *__restrict__ w, int64_t Cout, int64_t Cin, int K, int nchunk,
                          int64_t n, void *__restrict__ wp) {
    constexpr int CK = MODE == IG_BF16 ? 16 : 8;
    GRID_STRIDE(i, n) {
        int j = (int)(i % CK);
        int64_t r = i / CK;
        int k = (int)(r % K);
        r /= K;
        int c = (int)(r % nchunk);
        int64_t co = r / nchunk, ci = (int64_t)c * CK + j;
        bool in = co < Cout && ci < Cin;
        int64_t src = (co * Cin + ci) * K + k;
        if constexpr (MODE == IG_BF16) {
            ((uint16_t *)wp)[i] = in ? ((const uint16_t *)w)[src] : (uint16_t)0;
        } else {
            float v = in ? ((const float *)w)[src] : 0.0f;
            ((uint32_t *)wp)[i] = MODE == IG_TF32 ? to_tf32(v) : __float_as_uint(v);
        }
    }
}

/* The tensor cores add into their f32 accumulator with truncation, so an
 * error grows with the reduction's length (measured: 1.7e-5 relative over
 * 3270 products in tf32x3 mode). There a chunk's products (CK channels x K
 * taps) are summed in a fresh accumulator and added to the running sum with
 * an ordinary f32 add. */
template <int MODE, bool PRO>
__global__ void __launch_bounds__(IG_THREADS(MODE), MODE == IG_TF32X3 ? 1 : 2)
    k_ig_conv(ig_args a) {
    constexpr int CK = MODE == IG_BF16 ? 16 : 8;
    constexpr int VPW = MODE == IG_BF16 ? 2 : 1; /* channels per staged word */
    constexpr int THREADS = IG_THREADS(MODE);
    constexpr int MI = MODE == IG_TF32X3 ? 2 : 4;   /* m16 tiles per warp */
    constexpr int WARPS_M = IG_BM / (16 * MI);       /* warps along Cout */
    constexpr int XSLOTS = (IG_RMAX * 8 + THREADS - 1) / THREADS; /* staged words per thread */
    IG_DYN_SMEM(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    const int mt = (int)(blockIdx.x % a.mtiles);
    const int64_t tt = blockIdx.x / a.mtiles, b = blockIdx.z;
    const int64_t m0 = (int64_t)mt * IG_BM, t0 = tt * IG_BN;
    const int K = a.K, dil = a.dil, R = IG_BN + (K - 1) * dil;
    const int wrow = K * 32 + 16; /* bytes per weight row (odd number of 16-byte chunks) */
    unsigned char *ws = smem;                                 /* [2][128][wrow] */
    unsigned char *xs = smem + 2 * IG_BM * wrow;              /* [2][R][IG_XROW] */
    const int xbuf = R * IG_XROW;
    const int64_t t_base = t0 - a.pad;
    const int64_t tlim = PRO ? (a.in_lens ? (int64_t)a.in_lens[b] : a.T) : a.T;
    const float *xb = a.x + b * a.Cin * a.T;
    const float *cfb = PRO ? a.coef + b * a.Cin * IG_COEF : nullptr;
    const int64_t wchunk = (int64_t)K * CK * (MODE == IG_BF16 ? 2 : 4); /* bytes per (row, chunk) */

    float xr[XSLOTS][VPW];
    float acc[MI][4][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;

    auto load_w = [&](int c, int buf) {
        const int per_row = 2 * K; /* 16-byte pieces */
        const unsigned char *src = (const unsigned char *)a.wp;
        uint32_t dst = smem_addr(ws + buf * IG_BM * wrow);
        for (int i = tid; i < IG_BM * per_row; i += THREADS) {
            int m = i / per_row, q = i - m * per_row;
            ig_cp_async16(dst + m * wrow + q * 16,
                       src + ((m0 + m) * a.nchunk + c) * wchunk + (int64_t)q * 16);
        }
        ig_cp_commit();
    };
    auto load_x = [&](int c) {
#pragma unroll
        for (int s = 0; s < XSLOTS; s++) {
            int r, w;
            ig_slot<THREADS>(s, tid, r, w);
            int64_t t = t_base + r;
#pragma unroll
            for (int v = 0; v < VPW; v++) {
                int64_t ci = (int64_t)c * CK + w * VPW + v;
                xr[s][v] = r < R && t >= 0 && t < tlim && ci < a.Cin ? __ldg(xb + ci * a.T + t)
                                                                    : 0.0f;
            }
        }
    };
    auto store_x = [&](int c, int buf) {
        unsigned char *dst = xs + buf * xbuf;
#pragma unroll
        for (int s = 0; s < XSLOTS; s++) {
            int r, w;
            ig_slot<THREADS>(s, tid, r, w);
            if (r >= R) continue;
            float v[VPW];
#pragma unroll
            for (int u = 0; u < VPW; u++) {
                v[u] = xr[s][u];
                if constexpr (PRO) {
                    int64_t t = t_base + r, ci = (int64_t)c * CK + w * VPW + u;
                    v[u] = t >= 0 && t < tlim && ci < a.Cin ? adain_snake(v[u], cfb + ci * IG_COEF)
                                                            : 0.0f;
                }
            }
            uint32_t word;
            if constexpr (MODE == IG_BF16) {
                __nv_bfloat162 h = __floats2bfloat162_rn(v[0], v[VPW - 1]);
                word = *(uint32_t *)&h;
            } else if constexpr (MODE == IG_TF32) {
                word = to_tf32(v[0]);
            } else {
                word = __float_as_uint(v[0]);
            }
            *(uint32_t *)(dst + r * IG_XROW + w * 4) = word;
        }
    };

    load_w(0, 0);
    load_x(0);
    store_x(0, 0);
    ig_cp_wait<0>();
    __syncthreads();

    for (int c = 0; c < a.nchunk; c++) {
        const int buf = c & 1;
        const bool more = c + 1 < a.nchunk;
        if (more) {
            load_w(c + 1, buf ^ 1);
            load_x(c + 1);
        }
        const uint32_t wsb = smem_addr(ws + buf * IG_BM * wrow);
        const uint32_t xsb = smem_addr(xs + buf * xbuf);
        /* lane's ldmatrix rows: A rows (lane & 15), 16-byte half (lane >> 4);
         * B: n8 tile (lane >> 4) of a pair, row (lane & 7), half (lane >> 3) & 1 */
        const uint32_t a_lane = wsb + (wm * 16 * MI + (lane & 15)) * wrow + (lane >> 4) * 16;
        /* tf32x3: this chunk's sums, added to acc after its last tap */
        float cacc[MODE == IG_TF32X3 ? MI : 1][4][4];
        if constexpr (MODE == IG_TF32X3) {
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int q = 0; q < 4; q++) cacc[i][j][q] = 0.0f;
        }
        const uint32_t b_lane =
            xsb + (wn * 32 + (lane >> 4) * 8 + (lane & 7)) * IG_XROW + ((lane >> 3) & 1) * 16;
        for (int k = 0; k < K; k++) {
            uint32_t bf[4][2];
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
                ldsm_x4(b_lane + (jj * 16 + k * dil) * IG_XROW, bf[2 * jj][0], bf[2 * jj][1],
                        bf[2 * jj + 1][0], bf[2 * jj + 1][1]);
            uint32_t bs[4][2] = {};
            if constexpr (MODE == IG_TF32X3) {
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int q = 0; q < 2; q++) {
                        float f = __uint_as_float(bf[j][q]);
                        uint32_t hi = to_tf32(f);
                        bs[j][q] = to_tf32(f - __uint_as_float(hi));
                        bf[j][q] = hi;
                    }
            }
#pragma unroll
            for (int i = 0; i < MI; i++) {
                uint32_t af[4];
                ldsm_x4(a_lane + i * 16 * wrow + k * 32, af[0], af[1], af[2], af[3]);
                if constexpr (MODE == IG_TF32X3) {
                    uint32_t as[4];
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        float f = __uint_as_float(af[q]);
                        uint32_t hi = to_tf32(f);
                        as[q] = to_tf32(f - __uint_as_float(hi));
                        af[q] = hi;
                    }
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        mma<MODE>(cacc[i][j], as, bf[j]);
                        mma<MODE>(cacc[i][j], af, bs[j]);
                        mma<MODE>(cacc[i][j], af, bf[j]);
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < 4; j++) mma<MODE>(acc[i][j], af, bf[j]);
                }
            }
        }
        if constexpr (MODE == IG_TF32X3) {
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int q = 0; q < 4; q++) acc[i][j][q] += cacc[i][j][q];
        }
        if (more) store_x(c + 1, buf ^ 1);
        ig_cp_wait<0>();
        __syncthreads();
    }

    /* epilogue: c fragment (row g / g + 8, columns 2t, 2t + 1) */
    const int64_t olen = a.out_lens ? (int64_t)a.out_lens[b] : a.Tout;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t co = m0 + wm * 16 * MI + i * 16 + (lane >> 2) + h * 8;
            if (co >= a.Cout) continue;
            const float bv = a.bias ? a.bias[co] : 0.0f;
            const int64_t row = (b * a.Cout + co) * a.Tout;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int64_t t = t0 + wn * 32 + j * 8 + (lane & 3) * 2 + e;
                    if (t >= a.Tout) continue;
                    float v = t < olen ? acc[i][j][h * 2 + e] + bv : 0.0f;
                    if (a.residual) v = a.residual[row + t] + v;
                    a.y[row + t] = v;
                }
        }
}

#ifndef CHOIR_IG_EMU
/* --- AdaIN statistics for the fused pre-activation ---------------------------- */

/* Block (row, s) sums segment s of row's valid samples and their squares in
 * double: part[row S + s]. */
__global__ void k_ig_stats(const float *__restrict__ x, int64_t C, int64_t T,
                           const int32_t *lens, int S, int64_t seg, double2 *part) {
    __shared__ double sh[2][32];
    const int64_t row = blockIdx.x, b = row / C;
    int64_t n = lens ? (int64_t)lens[b] : T;
    n = n < 0 ? 0 : (n > T ? T : n);
    const int64_t lo = (int64_t)blockIdx.y * seg, hi = lo + seg < n ? lo + seg : n;
    const float *xr = x + row * T;
    double s = 0, q = 0;
    int64_t t = lo + threadIdx.x;
    for (; t + 3 * (int64_t)blockDim.x < hi; t += 4 * (int64_t)blockDim.x) {
        float v0 = xr[t], v1 = xr[t + blockDim.x], v2 = xr[t + 2 * blockDim.x],
              v3 = xr[t + 3 * blockDim.x];
        s += (double)v0 + (double)v1 + (double)v2 + (double)v3;
        q += (double)v0 * v0 + (double)v1 * v1 + (double)v2 * v2 + (double)v3 * v3;
    }
    for (; t < hi; t += blockDim.x) {
        double v = xr[t];
        s += v;
        q += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, o);
        q += __shfl_down_sync(0xffffffffu, q, o);
    }
    const int w = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) sh[0][w] = s, sh[1][w] = q;
    __syncthreads();
    if (threadIdx.x == 0) {
        s = 0, q = 0;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) s += sh[0][i], q += sh[1][i];
        part[row * S + blockIdx.y] = make_double2(s, q);
    }
}

/* One thread per (item, channel): the segments summed in order, then the
 * AdaIN and Snake coefficients. */
__global__ void k_ig_coef(const double2 *__restrict__ part, int S, int64_t rows, int64_t C,
                          int64_t T, const int32_t *lens, choir_cuda_adain_snake p,
                          float *__restrict__ coef) {
    int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const int64_t b = row / C, c = row % C;
    int64_t n = lens ? (int64_t)lens[b] : T;
    n = n < 0 ? 0 : (n > T ? T : n);
    double s = 0, q = 0;
    for (int i = 0; i < S; i++) s += part[row * S + i].x, q += part[row * S + i].y;
    double mean = n > 0 ? s / (double)n : 0.0, var = n > 0 ? q / (double)n - mean * mean : 0.0;
    if (var < 0) var = 0;
    float a = 1.0f / sqrtf((float)var + p.eps), bb = 0.0f;
    if (p.norm_w) a *= p.norm_w[c];
    if (p.norm_b) bb = p.norm_b[c];
    const float *g = p.gb + b * p.gb_stride;
    float *cf = coef + row * IG_COEF;
    cf[0] = (float)mean;
    cf[1] = a;
    cf[2] = bb;
    cf[3] = 1.0f + g[c];
    cf[4] = g[C + c];
    cf[5] = p.alpha[c];
    cf[6] = 1.0f / p.alpha[c];
    cf[7] = 0.0f;
}

/* --- host side ------------------------------------------------------------------- */

void choir_cuda_conv_set_path(choir_cuda *cu, choir_cuda_conv_path path) {
    if (cu) cu->conv_path = (int)path;
}

static int ig_mode(const choir_cuda *cu, choir_cuda_conv_weight w) {
    return w.bf16 ? IG_BF16 : cu->tf32 ? IG_TF32 : IG_TF32X3;
}

static size_t ig_smem(int K, int dil) {
    return (size_t)2 * IG_BM * (K * 32 + 16) + (size_t)2 * (IG_BN + (K - 1) * dil) * IG_XROW;
}

bool choir_cuda_conv1d_implicit_ok(const choir_cuda *cu, int64_t Cin, int64_t Cout,
                                   int64_t kernel, int stride, int padding, int dilation) {
    return cu && cu->conv_path != CHOIR_CUDA_CONV_IM2COL && stride == 1 && kernel >= 1 &&
           kernel <= IG_K_MAX && dilation >= 1 && padding >= 0 &&
           (kernel - 1) * (int64_t)dilation <= IG_HALO_MAX && Cin >= 1 && Cout >= 1 &&
           Cin <= INT32_MAX / 2 && Cout <= INT32_MAX / 2;
}

/* Bytes of packed weight for (Cout, Cin, K) in a mode. */
static size_t ig_pack_bytes(int mode, int64_t Cin, int64_t Cout, int64_t K) {
    const int CK = mode == IG_BF16 ? 16 : 8;
    const int64_t nchunk = (Cin + CK - 1) / CK, mpad = (Cout + IG_BM - 1) / IG_BM * IG_BM;
    return (size_t)(mpad * nchunk * K * CK) * (mode == IG_BF16 ? 2 : 4);
}

template <int MODE, bool PRO>
static int ig_launch(const ig_args &a, int64_t B, size_t smem, choir_cuda *cu, choir_err *err) {
    /* set on every call: cheap, and it holds for the current device */
    cudaError_t st = cudaFuncSetAttribute(k_ig_conv<MODE, PRO>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, IG_SMEM_MAX);
    if (st != cudaSuccess) return choir_cuda_fail(err, st, "implicit conv shared memory");
    const int64_t ttiles = (a.Tout + IG_BN - 1) / IG_BN;
    dim3 grid((unsigned)(ttiles * a.mtiles), 1, (unsigned)B);
    k_ig_conv<MODE, PRO><<<grid, IG_THREADS(MODE), smem, cu->stream>>>(a);
    return choir_cuda_check_launch(err, "implicit conv1d");
}

/* The conv itself, with the packed weight at `wp` (scratch the caller
 * holds) and the pre-activation coefficients (or NULL). */
static int ig_conv(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                   choir_cuda_conv_weight weight, const float *bias, int64_t Cout, int64_t K,
                   int padding, int dilation, const int32_t *out_lens, const int32_t *in_lens,
                   const float *coef, const float *residual, void *wp, float *y, choir_err *err) {
    const int mode = ig_mode(cu, weight), CK = mode == IG_BF16 ? 16 : 8;
    const int64_t Tout = T + 2 * (int64_t)padding - (int64_t)dilation * (K - 1);
    if (Tout <= 0 || B < 1) return 0;
    const int64_t nchunk = (Cin + CK - 1) / CK, mtiles = (Cout + IG_BM - 1) / IG_BM;
    const int64_t ttiles = (Tout + IG_BN - 1) / IG_BN;
    if (ttiles * mtiles > INT32_MAX || B > 65535)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: implicit conv1d: %lld frames, %lld items",
                             (long long)Tout, (long long)B);
    const int64_t n = mtiles * IG_BM * nchunk * K * CK;
    if (mode == IG_BF16)
        k_ig_pack<IG_BF16><<<choir_cuda_blocks(n, 256), 256, 0, cu->stream>>>(
            weight.w, Cout, Cin, (int)K, (int)nchunk, n, wp);
    else if (mode == IG_TF32)
        k_ig_pack<IG_TF32><<<choir_cuda_blocks(n, 256), 256, 0, cu->stream>>>(
            weight.w, Cout, Cin, (int)K, (int)nchunk, n, wp);
    else
        k_ig_pack<IG_TF32X3><<<choir_cuda_blocks(n, 256), 256, 0, cu->stream>>>(
            weight.w, Cout, Cin, (int)K, (int)nchunk, n, wp);
    int rc = choir_cuda_check_launch(err, "implicit conv weight layout");
    if (rc) return rc;
    ig_args a = {x, wp, bias, out_lens, in_lens, coef, residual, y, Cin, T, Cout, Tout,
                 (int)K, dilation, padding, (int)nchunk, (int)mtiles};
    if (ig2_applies(cu, mode, Cin, T, Cout, Tout, (int)K, dilation))
        return ig2_launch(cu, mode, a, B, err);
    const size_t smem = ig_smem((int)K, dilation);
    if (coef) {
        if (mode == IG_BF16) return ig_launch<IG_BF16, true>(a, B, smem, cu, err);
        if (mode == IG_TF32) return ig_launch<IG_TF32, true>(a, B, smem, cu, err);
        return ig_launch<IG_TF32X3, true>(a, B, smem, cu, err);
    }
    if (mode == IG_BF16) return ig_launch<IG_BF16, false>(a, B, smem, cu, err);
    if (mode == IG_TF32) return ig_launch<IG_TF32, false>(a, B, smem, cu, err);
    return ig_launch<IG_TF32X3, false>(a, B, smem, cu, err);
}

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

int choir_cuda_conv1d_implicit(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                               choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                               int64_t kernel, int padding, int dilation,
                               const int32_t *out_lens, float *y, choir_err *err) {
    void *wp = choir_cuda_scratch(cu, ig_pack_bytes(ig_mode(cu, weight), Cin, Cout, kernel), err);
    if (!wp) return err ? err->code : CHOIR_ENOMEM;
    return ig_conv(cu, x, B, Cin, T, weight, bias, Cout, kernel, padding, dilation, out_lens, NULL,
                   NULL, NULL, wp, y, err);
}

int choir_cuda_conv1d_adain_snake(choir_cuda *cu, const float *x, int64_t B, int64_t Cin,
                                  int64_t T, const choir_cuda_adain_snake *pre,
                                  choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                                  int64_t kernel, int padding, int dilation,
                                  const int32_t *out_lens, const float *residual, float *y,
                                  choir_err *err) {
    if (!cu || !x || !pre || !pre->gb || !pre->alpha || !weight.w || !y || B < 1 || Cin < 1 ||
        T < 1 || Cout < 1 || kernel < 1 || padding < 0 || dilation < 1 ||
        B * Cin > INT32_MAX)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: conv1d_adain_snake with B %lld, Cin %lld, T %lld, Cout %lld, "
                             "kernel %lld, padding %d, dilation %d or a missing pointer",
                             (long long)B, (long long)Cin, (long long)T, (long long)Cout,
                             (long long)kernel, padding, dilation);
    if (!choir_cuda_conv1d_implicit_ok(cu, Cin, Cout, kernel, 1, padding, dilation))
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "cuda: conv1d_adain_snake: kernel %lld, dilation %d, or the im2col "
                             "path asked for",
                             (long long)kernel, dilation);
    /* statistics: enough blocks to fill the device, each at least 2048 samples */
    const int64_t rows = B * Cin;
    const int64_t want = 4 * (int64_t)(cu->props.sm_count > 0 ? cu->props.sm_count : 132);
    int64_t S = (want + rows - 1) / rows;
    if (S > (T + 2047) / 2048) S = (T + 2047) / 2048;
    if (S < 1) S = 1;
    if (S > 1024) S = 1024;
    const int64_t seg = (T + S - 1) / S;
    const size_t pack = align256(ig_pack_bytes(ig_mode(cu, weight), Cin, Cout, kernel));
    const size_t parts = align256((size_t)(rows * S) * sizeof(double2));
    const size_t coefs = (size_t)rows * IG_COEF * sizeof(float);
    char *scr = (char *)choir_cuda_scratch(cu, pack + parts + coefs, err);
    if (!scr) return err ? err->code : CHOIR_ENOMEM;
    double2 *part = (double2 *)(scr + pack);
    float *coef = (float *)(scr + pack + parts);
    k_ig_stats<<<dim3((unsigned)rows, (unsigned)S), 256, 0, cu->stream>>>(x, Cin, T, pre->lens,
                                                                           (int)S, seg, part);
    int rc = choir_cuda_check_launch(err, "adain statistics");
    if (rc) return rc;
    k_ig_coef<<<choir_cuda_blocks(rows, 256), 256, 0, cu->stream>>>(part, (int)S, rows, Cin, T,
                                                                    pre->lens, *pre, coef);
    if ((rc = choir_cuda_check_launch(err, "adain coefficients"))) return rc;
    return ig_conv(cu, x, B, Cin, T, weight, bias, Cout, kernel, padding, dilation, out_lens,
                   pre->lens, coef, residual, scr, y, err);
}
#endif /* CHOIR_IG_EMU */
