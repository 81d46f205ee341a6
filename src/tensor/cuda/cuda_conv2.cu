/* The second implicit-GEMM conv1d kernel (cuda_conv.cu has the first and the
 * host side; choir_cuda_conv_set_v2 / CHOIR_CONV_V2=1 picks this one, off by
 * default until it has run on a GPU). Same operation, same packed weight,
 * same staged-x layout and the same products in the same order for every
 * output, so its results are the first kernel's bit for bit wherever the
 * compiler contracts the pre-activation alike. What differs is how a block
 * spends its time (Kokoro's generator, measured on an H100: the first kernel
 * at 60-170 TFLOP/s, 15-22% of the bf16 ceiling):
 *
 * - Tile 128 (Cout) x 256 (frames), 8 warps of 64 x 64 (bf16, tf32). The
 *   whole packed weight streams through every block (Cout is 128 or 256, so
 *   one or two blocks cover it): at 128 frames that is 128 multiply-adds
 *   per weight value brought from L2 (bf16: 64 FLOP per byte, ~6 TB/s of
 *   L2 at the ceiling); 256 frames halve it. A 64 x 64 warp tile reads 32
 *   FLOP per byte of shared memory (ldmatrix), where 64 x 32 read 21, under
 *   the 32 that 128 bytes a clock need to keep the tensor cores busy.
 *   tf32x3 keeps the first kernel's 16 warps of 32 x 32 over 128 frames
 *   (its second set of accumulators leaves no room for more).
 * - Weights in three stages of cp.async (two chunks in flight while one
 *   computes; the first kernel waited at every chunk's end for the next
 *   one's, issued one chunk earlier), x in two: the next chunk's x is
 *   transformed (AdaIN + Snake: a sinf per value) and stored right after
 *   the first tap's products are issued, so that SIMT work overlaps the
 *   tensor cores instead of following them, and the chunk after that is
 *   loaded into the freed registers at once (a whole chunk of latency).
 * - The pre-activation's 7 coefficients read once per chunk per thread (a
 *   thread stages the same channels in every slot), not once per value.
 * - The epilogue's residual tile asked into L2 when the main loop starts.
 * - 32-bit offsets inside a piece (Cin T and Cout Tout below 2^31).
 * One block per SM (up to ~167 KB of shared memory at K 11, dilation 5).
 * A second shape (choir_cuda_conv_set_v2(cu, 2), CHOIR_CONV_V2=2): 4 warps
 * of 64 x 64 over 128 frames, two blocks per SM where they fit (K <= 7 at
 * dilation 5), for a comparison on the device. Variants 3 and 4: shapes 1
 * and 2 with Snake's sin by the SFU after a range reduction (bf16 and tf32
 * fused convolutions; ~20 of ~40 instructions a staged value; no longer the
 * first kernel's floats bit for bit, within its precision's bound). */
#include <stdint.h>

#ifndef CHOIR_IG_EMU
#include <cuda_bf16.h>

#include "choir/cuda_audio.h"
#include "tensor/cuda/cuda_internal.h"
#endif
#include "tensor/cuda/cuda_conv_ig.h"

#define IG2_STAGES 3 /* weight stages; x has two */
#ifndef IG_DYN_SMEM
#define IG_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

/* MI x NJ: m16 tiles x n8 tiles per warp; WM x WN warps; FAST: Snake's sin
 * by the SFU (adain_snake_fast; bf16 and tf32 only). */
template <int MODE, bool PRO, int MI, int NJ, int WM, int WN, bool FAST>
__global__ void __launch_bounds__(32 * WM * WN, WM * WN == 4 ? 2 : 1) k_ig2_conv(ig_args a) {
    constexpr int CK = MODE == IG_BF16 ? 16 : 8;
    constexpr int VPW = MODE == IG_BF16 ? 2 : 1; /* channels per staged word */
    constexpr int THREADS = 32 * WM * WN;
    constexpr int BN = 8 * NJ * WN;
    constexpr int XSLOTS = ((BN + IG_HALO_MAX) * 8 + THREADS - 1) / THREADS;
    static_assert(16 * MI * WM == IG_BM, "a block covers 128 output channels");
    static_assert(WM * WN % 2 == 0, "ig_slot keeps a thread's channels with an even warp count");
    static_assert(!FAST || MODE != IG_TF32X3, "tf32x3 keeps sinf");
    IG_DYN_SMEM(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WM, wn = warp / WM;
    const int mt = (int)(blockIdx.x % a.mtiles);
    const int64_t tt = blockIdx.x / a.mtiles, b = blockIdx.z;
    const int64_t m0 = (int64_t)mt * IG_BM;
    const int t0 = (int)(tt * BN);
    const int K = a.K, dil = a.dil, R = BN + (K - 1) * dil;
    const int T = (int)a.T, Cin = (int)a.Cin, Tout = (int)a.Tout, Cout = (int)a.Cout;
    const int wrow = K * 32 + 16; /* bytes per weight row (odd number of 16-byte chunks) */
    unsigned char *ws = smem;                                   /* [STAGES][128][wrow] */
    unsigned char *xs = smem + IG2_STAGES * IG_BM * wrow;       /* [2][R][IG_XROW] */
    const int xbuf = R * IG_XROW;
    const int t_base = t0 - a.pad;
    const int tlim = PRO ? (a.in_lens ? a.in_lens[b] : T) : T;
    const float *xb = a.x + b * a.Cin * a.T;
    const float *cfb = PRO ? a.coef + b * a.Cin * IG_COEF : nullptr;
    const int64_t wchunk = (int64_t)K * CK * (MODE == IG_BF16 ? 2 : 4); /* bytes per (row, chunk) */
    /* this thread's channels within a chunk: w * VPW + u, the same in every slot */
    int r0, w;
    ig_slot<THREADS>(0, tid, r0, w);

    float xr[XSLOTS][VPW];
    float acc[MI][NJ][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;

    /* chunk c's weight tile into stage `st` (past the last chunk: an empty
     * group, so that the wait counts stay the same) */
    auto load_w = [&](int c, int st) {
        if (c < a.nchunk) {
            const int per_row = 2 * K; /* 16-byte pieces */
            const unsigned char *src = (const unsigned char *)a.wp;
            uint32_t dst = smem_addr(ws + st * IG_BM * wrow);
            for (int i = tid; i < IG_BM * per_row; i += THREADS) {
                int m = i / per_row, q = i - m * per_row;
                ig_cp_async16(dst + m * wrow + q * 16,
                              src + ((m0 + m) * a.nchunk + c) * wchunk + (int64_t)q * 16);
            }
        }
        ig_cp_commit();
    };
    auto load_x = [&](int c) {
#pragma unroll
        for (int s = 0; s < XSLOTS; s++) {
            int r, ws_;
            ig_slot<THREADS>(s, tid, r, ws_);
            const int t = t_base + r;
#pragma unroll
            for (int v = 0; v < VPW; v++) {
                const int ci = c * CK + ws_ * VPW + v;
                xr[s][v] = r < R && t >= 0 && t < tlim && ci < Cin ? __ldg(xb + ci * T + t) : 0.0f;
            }
        }
    };
    auto store_x = [&](int c, int buf) {
        unsigned char *dst = xs + buf * xbuf;
        float cf[VPW][7];
        if constexpr (PRO) {
#pragma unroll
            for (int u = 0; u < VPW; u++) {
                const int ci = c * CK + w * VPW + u;
#pragma unroll
                for (int q = 0; q < 7; q++) cf[u][q] = ci < Cin ? __ldg(cfb + ci * IG_COEF + q) : 0.0f;
            }
        }
#pragma unroll
        for (int s = 0; s < XSLOTS; s++) {
            int r, ws_;
            ig_slot<THREADS>(s, tid, r, ws_);
            if (r >= R) continue;
            float v[VPW];
#pragma unroll
            for (int u = 0; u < VPW; u++) {
                v[u] = xr[s][u];
                if constexpr (PRO) {
                    const int t = t_base + r, ci = c * CK + ws_ * VPW + u;
                    if (t >= 0 && t < tlim && ci < Cin) {
                        if constexpr (FAST)
                            v[u] = adain_snake_fast(v[u], cf[u]);
                        else
                            v[u] = adain_snake(v[u], cf[u]);
                    } else {
                        v[u] = 0.0f;
                    }
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
            *(uint32_t *)(dst + r * IG_XROW + ws_ * 4) = word;
        }
    };

    load_w(0, 0);
    load_w(1, 1);
    load_x(0);
    store_x(0, 0);
    if (a.nchunk > 1) load_x(1);
    ig_cp_wait<1>(); /* chunk 0's weights */
    __syncthreads();
    if (a.residual) {
        /* the epilogue's residual rows into L2 (lines of 128 bytes; the last
         * piece of a row covers its end when the row start is not aligned) */
        constexpr int P = BN / 32 + 1;
        const int rows = Cout - m0 < IG_BM ? (int)(Cout - m0) : IG_BM;
        const int tend = Tout - t0 < BN ? Tout - t0 : BN;
        const float *rb = a.residual + (b * a.Cout + m0) * a.Tout + t0;
        for (int i = tid; i < rows * P; i += THREADS) {
            const int row = i / P, q = i - row * P;
            ig_prefetch_l2(rb + (int64_t)row * Tout + (q == P - 1 ? tend - 1 : q * 32 < tend ? q * 32 : tend - 1));
        }
    }

    /* lane's ldmatrix rows: A rows (lane & 15), 16-byte half (lane >> 4);
     * B: n8 tile (lane >> 4) of a pair, row (lane & 7), half (lane >> 3) & 1 */
    const int a_off = (wm * 16 * MI + (lane & 15)) * wrow + (lane >> 4) * 16;
    const int b_off = (wn * 8 * NJ + (lane >> 4) * 8 + (lane & 7)) * IG_XROW + ((lane >> 3) & 1) * 16;
    for (int c = 0; c < a.nchunk; c++) {
        load_w(c + 2, (c + 2) % IG2_STAGES);
        const uint32_t a_lane = smem_addr(ws + (c % IG2_STAGES) * IG_BM * wrow) + a_off;
        const uint32_t b_lane = smem_addr(xs + (c & 1) * xbuf) + b_off;
        /* tf32x3: this chunk's sums, added to acc after its last tap (as the
         * first kernel: the tensor cores' accumulation truncates) */
        float cacc[MODE == IG_TF32X3 ? MI : 1][MODE == IG_TF32X3 ? NJ : 1][4];
        if constexpr (MODE == IG_TF32X3) {
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int q = 0; q < 4; q++) cacc[i][j][q] = 0.0f;
        }
        for (int k = 0; k < K; k++) {
            uint32_t bf[NJ][2];
#pragma unroll
            for (int jj = 0; jj < NJ / 2; jj++)
                ldsm_x4(b_lane + (jj * 16 + k * dil) * IG_XROW, bf[2 * jj][0], bf[2 * jj][1],
                        bf[2 * jj + 1][0], bf[2 * jj + 1][1]);
            uint32_t bs[NJ][2] = {};
            if constexpr (MODE == IG_TF32X3) {
#pragma unroll
                for (int j = 0; j < NJ; j++)
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
                    for (int j = 0; j < NJ; j++) {
                        mma<MODE>(cacc[i][j], as, bf[j]);
                        mma<MODE>(cacc[i][j], af, bs[j]);
                        mma<MODE>(cacc[i][j], af, bf[j]);
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < NJ; j++) mma<MODE>(acc[i][j], af, bf[j]);
                }
            }
            /* the next chunk's x staged behind this tap's products, and the
             * one after loaded into the registers that frees */
            if (k == 0 && c + 1 < a.nchunk) {
                store_x(c + 1, (c + 1) & 1);
                if (c + 2 < a.nchunk) load_x(c + 2);
            }
        }
        if constexpr (MODE == IG_TF32X3) {
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int q = 0; q < 4; q++) acc[i][j][q] += cacc[i][j][q];
        }
        ig_cp_wait<1>(); /* chunk c + 1's weights (c + 2's may still fly) */
        __syncthreads();
    }

    /* epilogue: c fragment (row g / g + 8, columns 2t, 2t + 1) */
    const int olen = a.out_lens ? a.out_lens[b] : Tout;
    const float *resb = a.residual ? a.residual + b * a.Cout * a.Tout : nullptr;
    float *yb = a.y + b * a.Cout * a.Tout;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int co = (int)m0 + wm * 16 * MI + i * 16 + (lane >> 2) + h * 8;
            if (co >= Cout) continue;
            const float bv = a.bias ? a.bias[co] : 0.0f;
            const int row = co * Tout;
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int t = t0 + wn * 8 * NJ + j * 8 + (lane & 3) * 2 + e;
                    if (t >= Tout) continue;
                    float v = t < olen ? acc[i][j][h * 2 + e] + bv : 0.0f;
                    if (resb) v = resb[row + t] + v;
                    yb[row + t] = v;
                }
        }
}

#ifndef CHOIR_IG_EMU
/* The variants (the context's conv_v2): 1, bf16 and tf32 8 warps of 64 x 64
 * over 256 frames (one block per SM); 2, 4 warps of 64 x 64 over 128 frames
 * (two blocks per SM where shared memory allows: K up to 7 at dilation 5;
 * more loads in flight per SM, the weight reused half as much); 3 and 4,
 * shapes 1 and 2 with Snake's sin by the SFU (fused bf16 and tf32 only).
 * tf32x3 16 warps of 32 x 32 over 128 frames in all. */
static int ig2_shape(int variant) { return variant == 2 || variant == 4 ? 2 : 1; }
static int ig2_bn(int mode, int variant) {
    return mode == IG_TF32X3 || ig2_shape(variant) == 2 ? 128 : 256;
}

static size_t ig2_smem(int mode, int variant, int K, int dil) {
    return (size_t)IG2_STAGES * IG_BM * (K * 32 + 16) +
           (size_t)2 * (ig2_bn(mode, variant) + (K - 1) * dil) * IG_XROW;
}

bool ig2_applies(const choir_cuda *cu, int mode, int64_t Cin, int64_t T, int64_t Cout,
                 int64_t Tout, int K, int dil) {
    const int64_t optin = cu->props.smem_per_block_optin > 0 ? cu->props.smem_per_block_optin : 0;
    return cu->conv_v2 > 0 && (K - 1) * (int64_t)dil <= IG_HALO_MAX &&
           (int64_t)ig2_smem(mode, cu->conv_v2, K, dil) <= optin && Cin * T <= INT32_MAX &&
           Cout * Tout <= INT32_MAX && (Tout + 255) / 256 * 256 <= INT32_MAX;
}

template <int MODE, bool PRO, int MI, int NJ, int WM, int WN, bool FAST>
static int ig2_go(const ig_args &a, int64_t B, int variant, choir_cuda *cu, choir_err *err) {
    const size_t smem = ig2_smem(MODE, variant, a.K, a.dil);
    cudaError_t st = cudaFuncSetAttribute(k_ig2_conv<MODE, PRO, MI, NJ, WM, WN, FAST>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (st != cudaSuccess) return choir_cuda_fail(err, st, "implicit conv (v2) shared memory");
    const int64_t bn = 8 * NJ * WN, ttiles = (a.Tout + bn - 1) / bn;
    if (ttiles * a.mtiles > INT32_MAX)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: implicit conv1d (v2): %lld frames",
                             (long long)a.Tout);
    dim3 grid((unsigned)(ttiles * a.mtiles), 1, (unsigned)B);
    k_ig2_conv<MODE, PRO, MI, NJ, WM, WN, FAST><<<grid, 32 * WM * WN, smem, cu->stream>>>(a);
    return choir_cuda_check_launch(err, "implicit conv1d (v2)");
}

template <int MODE, bool PRO>
static int ig2_pick(const ig_args &a, int64_t B, int variant, choir_cuda *cu, choir_err *err) {
    const bool two = ig2_shape(variant) == 2, fast = variant >= 3;
    if constexpr (MODE == IG_TF32X3)
        return ig2_go<MODE, PRO, 2, 4, 4, 4, false>(a, B, variant, cu, err);
    else if constexpr (!PRO)
        return two ? ig2_go<MODE, PRO, 4, 8, 2, 2, false>(a, B, variant, cu, err)
                   : ig2_go<MODE, PRO, 4, 8, 2, 4, false>(a, B, variant, cu, err);
    else if (fast)
        return two ? ig2_go<MODE, PRO, 4, 8, 2, 2, true>(a, B, variant, cu, err)
                   : ig2_go<MODE, PRO, 4, 8, 2, 4, true>(a, B, variant, cu, err);
    else
        return two ? ig2_go<MODE, PRO, 4, 8, 2, 2, false>(a, B, variant, cu, err)
                   : ig2_go<MODE, PRO, 4, 8, 2, 4, false>(a, B, variant, cu, err);
}

int ig2_launch(choir_cuda *cu, int mode, const ig_args &a, int64_t B, choir_err *err) {
    const bool pro = a.coef != nullptr;
    const int v = cu->conv_v2;
    if (mode == IG_BF16)
        return pro ? ig2_pick<IG_BF16, true>(a, B, v, cu, err) : ig2_pick<IG_BF16, false>(a, B, v, cu, err);
    if (mode == IG_TF32)
        return pro ? ig2_pick<IG_TF32, true>(a, B, v, cu, err) : ig2_pick<IG_TF32, false>(a, B, v, cu, err);
    return pro ? ig2_pick<IG_TF32X3, true>(a, B, v, cu, err)
               : ig2_pick<IG_TF32X3, false>(a, B, v, cu, err);
}

void choir_cuda_conv_set_v2(choir_cuda *cu, int variant) {
    if (cu) cu->conv_v2 = variant >= 1 && variant <= 4 ? variant : 0;
}
#endif /* CHOIR_IG_EMU */
