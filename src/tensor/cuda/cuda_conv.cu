/* Implicit-GEMM conv1d on the tensor cores (choir/cuda_audio.h), for the
 * stride-1 convolutions of vocoders: out[co, t] = bias[co] + sum over
 * (ci, k) of W[co, ci, k] x[ci, t + k dil - pad]. M = Cout, N = frames,
 * reduction Cin x K; no im2col matrix: a block stages a window of x
 * (channels chunk x (BN + halo) frames) once and reads it at each tap's
 * shift.
 *
 * The default block: tile 128 (Cout) x 128 (frames), 8 warps of 64 x 32 (16
 * of 32 x 32 in the tf32x3 mode), mma.sync with f32 accumulation. A
 * reduction step is one chunk of CK input channels with all K taps: the
 * weight tile [128][K][CK] arrives by cp.async (from a copy of W re-laid
 * [Cout][chunk][K][CK] in scratch, zero-padded), the x window is loaded
 * into registers while the previous chunk computes, optionally transformed
 * (AdaIN affine + Snake, the fused pre-activation), converted and stored
 * transposed ([frame][channel]) so that ldmatrix gives the B fragments at
 * any tap shift. Two buffers of each.
 *
 * The options (choir_cuda_conv_set_options), all the same kernel:
 * - PREPASS (the fused pre-activation, cuda_conv_adain.cu): a pass before
 *   the convolution writes snake(adain(x)) once, rounded and laid out as
 *   the staged rows (cuda_conv_ig.h, IG_XP_FRAME); the convolution then
 *   brings x tiles by cp.async with the weights, in two or three stages,
 *   and its main loop has no SIMT work but the tap loop. Measured on the
 *   H100 before it: per convolution a fixed ~0.21 ms (TF32) / 0.24 ms
 *   (bf16) that does not depend on K, the staging (a sinf and seven
 *   coefficient loads a value) run while the tensor cores idle.
 * - WIDE: 128 x 256 tiles of 8 warps of 64 x 64 (the weight reused over
 *   256 frames; 32 FLOP per byte of ldmatrix instead of 21), three weight
 *   stages; through registers, the next chunk's x is staged right behind
 *   the first tap's products and the one after loaded at once (x two
 *   chunks ahead), the pre-activation's coefficients read once a chunk, the
 *   residual tile asked into L2 at the start. Not for tf32x3.
 * - FAST_SIN: Snake's sin by the SFU (adain_snake_fast), bf16 and TF32.
 * Every shape and source sums the same products in the same order for an
 * output, so without FAST_SIN they give the default's floats bit for bit
 * (tests/cuda/emu/run_conv_emu.sh).
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
#include <stdlib.h>
#include <string.h>

#ifndef CHOIR_IG_EMU
#include <cuda_bf16.h>

#include "choir/cuda_audio.h"
#include "tensor/cuda/cuda_internal.h"
#endif
#include "tensor/cuda/cuda_conv_ig.h"

/* The block shapes: DEFAULT 128 x 128 (8 warps of 64 x 32; tf32x3 16 of
 * 32 x 32, which keeps a second set of accumulators, below); WIDE 128 x 256
 * (8 warps of 64 x 64; bf16 and TF32 only). */
enum { IG_SHAPE_DEFAULT = 0, IG_SHAPE_WIDE = 1 };
#define IG_THREADS(mode, shape) ((mode) == IG_TF32X3 && (shape) == IG_SHAPE_DEFAULT ? 512 : 256)
#define IG_BN(shape) ((shape) == IG_SHAPE_WIDE ? 256 : 128)
/* blocks per SM the registers are held to: two for the default shape's
 * 8 warps, one otherwise */
#define IG_MIN_BLOCKS(mode, shape) ((mode) != IG_TF32X3 && (shape) == IG_SHAPE_DEFAULT ? 2 : 1)
#ifndef IG_DYN_SMEM
#define IG_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

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

/* The convolution: MODE, XSRC (IG_X_*: where x comes from), SHAPE, STAGES
 * (buffers of the weight tile, and of x with IG_X_PRE; through registers x
 * has two), FAST (Snake's sin by the SFU; IG_X_PRO only).
 *
 * The tensor cores add into their f32 accumulator with truncation, so an
 * error grows with the reduction's length (measured: 1.7e-5 relative over
 * 3270 products in tf32x3 mode). There a chunk's products (CK channels x K
 * taps) are summed in a fresh accumulator and added to the running sum with
 * an ordinary f32 add. */
template <int MODE, int XSRC, int SHAPE, int STAGES, bool FAST, bool STATS = false>
__global__ void __launch_bounds__(IG_THREADS(MODE, SHAPE), IG_MIN_BLOCKS(MODE, SHAPE))
    k_ig_conv(std::conditional_t<STATS, ig_args, ig_base> a) {
    constexpr int CK = MODE == IG_BF16 ? 16 : 8;
    constexpr int VPW = MODE == IG_BF16 ? 2 : 1; /* channels per staged word */
    constexpr int THREADS = IG_THREADS(MODE, SHAPE);
    constexpr bool WIDE = SHAPE == IG_SHAPE_WIDE;
    constexpr int MI = MODE == IG_TF32X3 ? 2 : 4; /* m16 tiles per warp */
    constexpr int NJ = WIDE ? 8 : 4;              /* n8 tiles per warp */
    constexpr int WM = IG_BM / (16 * MI);         /* warps along Cout */
    constexpr int BN = IG_BN(SHAPE);
    constexpr bool REG = XSRC != IG_X_PRE, PRO = XSRC == IG_X_PRO;
    /* through registers, WIDE stages the next chunk behind the first tap */
    constexpr bool EARLY = REG && WIDE;
    constexpr int XBUFS = REG ? 2 : STAGES;
    constexpr int XSLOTS = REG ? ((BN + IG_HALO_MAX) * 8 + THREADS - 1) / THREADS : 1;
    static_assert(8 * NJ * (THREADS / 32 / WM) == BN, "the warps cover the tile's frames");
    static_assert(THREADS / 32 % 2 == 0,
                  "ig_slot keeps a thread's channels with an even warp count");
    static_assert(!WIDE || MODE != IG_TF32X3, "tf32x3 keeps the default shape");
    static_assert(!FAST || (PRO && MODE != IG_TF32X3), "the SFU's sin: fused bf16 and tf32 only");
    static_assert(STAGES >= 2 && (!REG || STAGES == (EARLY ? 3 : 2)), "stages");
    IG_DYN_SMEM(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WM, wn = warp / WM;
    const int mt = (int)(blockIdx.x % a.mtiles);
    const int64_t tt = blockIdx.x / a.mtiles, b = blockIdx.z;
    const int64_t m0 = (int64_t)mt * IG_BM, t0 = tt * BN;
    const int K = a.K, dil = a.dil, R = BN + (K - 1) * dil;
    const int wrow = K * 32 + 16; /* bytes per weight row (odd number of 16-byte chunks) */
    unsigned char *ws = smem;                          /* [STAGES][128][wrow] */
    unsigned char *xs = smem + STAGES * IG_BM * wrow; /* [XBUFS][R][IG_XROW] */
    const int xbuf = R * IG_XROW;
    const int64_t t_base = t0 - a.pad;
    const int64_t tlim = PRO ? (a.in_lens ? (int64_t)a.in_lens[b] : a.T) : a.T;
    const float *xb = REG ? a.x + b * a.Cin * a.T : nullptr;
    const float *cfb = PRO ? a.coef + b * a.Cin * IG_COEF : nullptr;
    const int64_t wchunk = (int64_t)K * CK * (MODE == IG_BF16 ? 2 : 4); /* bytes per (row, chunk) */

    float xr[XSLOTS][VPW];
    float acc[MI][NJ][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;

    auto load_w = [&](int c, int st) {
        const int per_row = 2 * K; /* 16-byte pieces */
        const unsigned char *src = (const unsigned char *)a.wp;
        uint32_t dst = smem_addr(ws + st * IG_BM * wrow);
        for (int i = tid; i < IG_BM * per_row; i += THREADS) {
            int m = i / per_row, q = i - m * per_row;
            ig_cp_async16(dst + m * wrow + q * 16,
                          src + ((m0 + m) * a.nchunk + c) * wchunk + (int64_t)q * 16);
        }
    };
    /* IG_X_PRE: chunk c's window of the prepass's frames, two 16-byte pieces
     * a row, zeros outside [0, T) */
    auto load_xp = [&](int c, int st) {
        const unsigned char *src =
            (const unsigned char *)a.xp + (b * a.nchunk + c) * a.T * IG_XP_FRAME;
        uint32_t dst = smem_addr(xs + st * xbuf);
        for (int i = tid; i < 2 * R; i += THREADS) {
            const int r = i >> 1, h = i & 1;
            const int64_t t = t_base + r;
            const bool in = t >= 0 && t < a.T;
            ig_cp_async16_zfill(dst + r * IG_XROW + h * 16,
                                in ? src + t * IG_XP_FRAME + h * 16 : src, in);
        }
    };
    /* chunk c's weights (and with IG_X_PRE its x) into stage c % STAGES, one
     * commit group; past the last chunk an empty group, so that the wait
     * counts stay the same */
    auto issue = [&](int c) {
        if (c < a.nchunk) {
            load_w(c, c % STAGES);
            if constexpr (!REG) load_xp(c, c % STAGES);
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
        /* EARLY: the pre-activation's coefficients once a chunk (a thread
         * stages the same channels in every slot) */
        float cf[EARLY && PRO ? VPW : 1][7];
        (void)cf;
        if constexpr (EARLY && PRO) {
            int r0, w0;
            ig_slot<THREADS>(0, tid, r0, w0);
#pragma unroll
            for (int u = 0; u < VPW; u++) {
                const int64_t ci = (int64_t)c * CK + w0 * VPW + u;
#pragma unroll
                for (int q = 0; q < 7; q++)
                    cf[u][q] = ci < a.Cin ? __ldg(cfb + ci * IG_COEF + q) : 0.0f;
            }
        }
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
                    if (t >= 0 && t < tlim && ci < a.Cin) {
                        const float *cfv;
                        if constexpr (EARLY)
                            cfv = cf[u];
                        else
                            cfv = cfb + ci * IG_COEF;
                        if constexpr (FAST)
                            v[u] = adain_snake_fast(v[u], cfv);
                        else
                            v[u] = adain_snake(v[u], cfv);
                    } else {
                        v[u] = 0.0f;
                    }
                }
            }
            *(uint32_t *)(dst + r * IG_XROW + w * 4) = ig_word<MODE>(v);
        }
    };

    /* prologue: the first STAGES - 1 chunks in flight; through registers,
     * chunk 0 staged (and with EARLY chunk 1 loaded) */
    for (int s = 0; s < STAGES - 1; s++) issue(s);
    if constexpr (REG) {
        load_x(0);
        store_x(0, 0);
        if constexpr (EARLY)
            if (a.nchunk > 1) load_x(1);
    }
    if constexpr (WIDE) {
        if (a.residual) {
            /* the epilogue's residual rows into L2 (lines of 128 bytes; the
             * last piece of a row covers its end) */
            constexpr int P = BN / 32 + 1;
            const int rows = a.Cout - m0 < IG_BM ? (int)(a.Cout - m0) : IG_BM;
            const int64_t tend = a.Tout - t0 < BN ? a.Tout - t0 : BN;
            const float *rb = a.residual + (b * a.Cout + m0) * a.Tout + t0;
            for (int i = tid; i < rows * P; i += THREADS) {
                const int row = i / P, q = i - row * P;
                ig_prefetch_l2(rb + (int64_t)row * a.Tout +
                               (q == P - 1 ? tend - 1 : q * 32 < tend ? q * 32 : tend - 1));
            }
        }
    }

    /* lane's ldmatrix rows: A rows (lane & 15), 16-byte half (lane >> 4);
     * B: n8 tile (lane >> 4) of a pair, row (lane & 7), half (lane >> 3) & 1 */
    const int a_off = (wm * 16 * MI + (lane & 15)) * wrow + (lane >> 4) * 16;
    const int b_off =
        (wn * 8 * NJ + (lane >> 4) * 8 + (lane & 7)) * IG_XROW + ((lane >> 3) & 1) * 16;
    for (int c = 0; c < a.nchunk; c++) {
        ig_cp_wait<STAGES - 2>(); /* chunk c's group (later ones may still fly) */
        __syncthreads();
        issue(c + STAGES - 1);
        const bool more = c + 1 < a.nchunk;
        if constexpr (REG && !EARLY)
            if (more) load_x(c + 1);
        const uint32_t a_lane = smem_addr(ws + (c % STAGES) * IG_BM * wrow) + a_off;
        const uint32_t b_lane = smem_addr(xs + (c % XBUFS) * xbuf) + b_off;
        /* tf32x3: this chunk's sums, added to acc after its last tap */
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
            if constexpr (EARLY) {
                /* the next chunk's x staged behind this tap's products, and
                 * the one after loaded into the registers that frees */
                if (k == 0 && more) {
                    store_x(c + 1, (c + 1) & 1);
                    if (c + 2 < a.nchunk) load_x(c + 2);
                }
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
        if constexpr (REG && !EARLY)
            if (more) store_x(c + 1, (c + 1) & 1);
    }

    /* epilogue: c fragment (row g / g + 8, columns 2t, 2t + 1) */
    const int64_t olen = a.out_lens ? (int64_t)a.out_lens[b] : a.Tout;
    /* STATS (a.stats set): the same stores, and AdaIN's statistics of the
     * values stored, for the next operation: a thread sums its frames of a
     * row in double in a fixed order (j, then e), the row's 4 lanes add by
     * xor shuffles (each lane ends with the same sum), and the 4 warps along
     * frames meet in shared memory (the tile's buffers, free once every warp
     * is past the main loop), added in warp order per 128-frame slot: one
     * slot per (item, channel, frame tile), no atomics, the same bits every
     * run. Frames t >= the consumer's length are left out as k_ig_stats
     * leaves them. */
    constexpr int WPS = IG_STAT_FRAMES / (8 * NJ); /* warps along frames a slot */
    static_assert(!STATS || THREADS / 32 / WM == 4, "four warps along frames (ig_go's slots)");
    static_assert(!STATS || (IG_STAT_FRAMES % (8 * NJ) == 0 && BN % IG_STAT_FRAMES == 0), "stat slots");
    double *sts = (double *)smem; /* [4][IG_BM][2] */
    int64_t slen = 0;
    if constexpr (STATS) {
        ig_cp_wait<0>();
        __syncthreads();
        slen = a.stats_lens ? (int64_t)a.stats_lens[b] : a.Tout;
        slen = slen < 0 ? 0 : (slen > a.Tout ? a.Tout : slen);
    }
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t co = m0 + wm * 16 * MI + i * 16 + (lane >> 2) + h * 8;
            double ss = 0.0, sq = 0.0;
            if (co < a.Cout) {
                const float bv = a.bias ? a.bias[co] : 0.0f;
                const int64_t row = (b * a.Cout + co) * a.Tout;
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int64_t t = t0 + wn * 8 * NJ + j * 8 + (lane & 3) * 2 + e;
                        if (t >= a.Tout) continue;
                        float v = t < olen ? acc[i][j][h * 2 + e] + bv : 0.0f;
                        if (a.residual) v = a.residual[row + t] + v;
                        a.y[row + t] = v;
                        if constexpr (STATS)
                            if (t < slen) {
                                const double d = v;
                                ss += d;
                                sq += d * d;
                            }
                    }
            }
            if constexpr (STATS) {
                ss += __shfl_xor_sync(0xffffffffu, ss, 1);
                sq += __shfl_xor_sync(0xffffffffu, sq, 1);
                ss += __shfl_xor_sync(0xffffffffu, ss, 2);
                sq += __shfl_xor_sync(0xffffffffu, sq, 2);
                const int lrow = wm * 16 * MI + i * 16 + (lane >> 2) + h * 8;
                if ((lane & 3) == 0) {
                    sts[(wn * IG_BM + lrow) * 2] = ss;
                    sts[(wn * IG_BM + lrow) * 2 + 1] = sq;
                }
            }
        }
    if constexpr (STATS) {
        __syncthreads();
        const int64_t ntiles = IG_STAT_TILES(a.Tout), tile0 = t0 / IG_STAT_FRAMES;
        for (int i = tid; i < IG_BM * (BN / IG_STAT_FRAMES); i += THREADS) {
            const int r = i % IG_BM, slot = i / IG_BM;
            const int64_t co = m0 + r, tile = tile0 + slot;
            if (co >= a.Cout || tile >= ntiles) continue;
            double ss = 0.0, sq = 0.0;
            for (int w = slot * WPS; w < (slot + 1) * WPS; w++) {
                ss += sts[(w * IG_BM + r) * 2];
                sq += sts[(w * IG_BM + r) * 2 + 1];
            }
            double *dst = a.stats + ((b * a.Cout + co) * ntiles + tile) * 2;
            dst[0] = ss;
            dst[1] = sq;
        }
    }
}

#ifndef CHOIR_IG_EMU
/* --- host side ------------------------------------------------------------------- */

void choir_cuda_conv_set_path(choir_cuda *cu, choir_cuda_conv_path path) {
    if (cu) cu->conv_path = (int)path;
}

void choir_cuda_conv_set_options(choir_cuda *cu, unsigned options) {
    if (cu)
        cu->conv_opts =
            options & (CHOIR_CUDA_CONV_PREPASS | CHOIR_CUDA_CONV_WIDE | CHOIR_CUDA_CONV_FAST_SIN |
                       CHOIR_CUDA_CONV_WIDE_BF16);
}

unsigned choir_cuda_conv_get_options(const choir_cuda *cu) { return cu ? cu->conv_opts : 0u; }

void choir_cuda_conv_set_prepass_bytes(choir_cuda *cu, int64_t bytes) {
    if (!cu) return;
    const char *e = getenv("CHOIR_CONV_PREPASS_MB");
    const long mb = e ? atol(e) : 0;
    cu->conv_prepass_bytes = bytes > 0 ? bytes : (int64_t)(mb > 0 ? mb : 512) << 20;
}

int ig_mode(const choir_cuda *cu, choir_cuda_conv_weight w) {
    return w.bf16 ? IG_BF16 : cu->tf32 ? IG_TF32 : IG_TF32X3;
}

/* dynamic shared memory of a block: the weight stages and the x buffers */
static size_t ig_smem(int shape, int stages, int xbufs, int K, int dil) {
    return (size_t)stages * IG_BM * (K * 32 + 16) +
           (size_t)xbufs * (IG_BN(shape) + (K - 1) * dil) * IG_XROW;
}

bool choir_cuda_conv1d_implicit_ok(const choir_cuda *cu, int64_t Cin, int64_t Cout,
                                   int64_t kernel, int stride, int padding, int dilation) {
    return cu && cu->conv_path != CHOIR_CUDA_CONV_IM2COL && stride == 1 && kernel >= 1 &&
           kernel <= IG_K_MAX && dilation >= 1 && padding >= 0 &&
           (kernel - 1) * (int64_t)dilation <= IG_HALO_MAX && Cin >= 1 && Cout >= 1 &&
           Cin <= INT32_MAX / 2 && Cout <= INT32_MAX / 2;
}

/* Bytes of packed weight for (Cout, Cin, K) in a mode. */
size_t ig_pack_bytes(int mode, int64_t Cin, int64_t Cout, int64_t K) {
    const int CK = mode == IG_BF16 ? 16 : 8;
    const int64_t nchunk = (Cin + CK - 1) / CK, mpad = (Cout + IG_BM - 1) / IG_BM * IG_BM;
    return (size_t)(mpad * nchunk * K * CK) * (mode == IG_BF16 ? 2 : 4);
}

/* A launch's block shape, stages and sin from the context's options. The
 * wide shape falls back to the default where its shared memory exceeds the
 * device's; through the prepass, the default shape takes three stages where
 * its blocks per SM still fit (K 3 and 7 at dilation 3; not K 11 at 5). */
struct ig_plan {
    int shape, stages;
    bool fast;
    size_t smem;
};

static ig_plan ig_plan_for(const choir_cuda *cu, int mode, int xsrc, int K, int dil) {
    const int64_t optin =
        cu->props.smem_per_block_optin > 0 ? cu->props.smem_per_block_optin : 48 * 1024;
    const bool pre = xsrc == IG_X_PRE;
    auto smem = [&](int shape, int st) {
        return (int64_t)ig_smem(shape, st, pre ? st : 2, K, dil);
    };
    ig_plan p = {IG_SHAPE_DEFAULT, 2, false, 0};
    p.fast = (cu->conv_opts & CHOIR_CUDA_CONV_FAST_SIN) && mode != IG_TF32X3 && xsrc == IG_X_PRO;
    const bool wide = (cu->conv_opts & CHOIR_CUDA_CONV_WIDE) ||
                      ((cu->conv_opts & CHOIR_CUDA_CONV_WIDE_BF16) && mode == IG_BF16);
    if (wide && mode != IG_TF32X3) {
        if (smem(IG_SHAPE_WIDE, 3) <= optin)
            p.shape = IG_SHAPE_WIDE, p.stages = 3;
        else if (pre && smem(IG_SHAPE_WIDE, 2) <= optin)
            p.shape = IG_SHAPE_WIDE, p.stages = 2;
    }
    if (pre && p.shape == IG_SHAPE_DEFAULT) {
        /* each block also holds 1 KB the runtime reserves */
        const int64_t per_sm = IG_MIN_BLOCKS(mode, IG_SHAPE_DEFAULT);
        p.stages = per_sm * (smem(IG_SHAPE_DEFAULT, 3) + 1024) <= optin + 1024 ? 3 : 2;
    }
    p.smem = (size_t)smem(p.shape, p.stages);
    return p;
}

template <int MODE, int XSRC, int SHAPE, int STAGES, bool FAST, bool STATS>
static int ig_go(const ig_args &a, int64_t B, size_t smem, choir_cuda *cu, choir_err *err) {
    /* the statistics' slots ([4][IG_BM] double pairs: 4 warps along frames
     * in every shape) reuse the tile's buffers, always larger */
    if (STATS && smem < (size_t)4 * IG_BM * 2 * sizeof(double))
        smem = (size_t)4 * IG_BM * 2 * sizeof(double);
    /* set on every call: cheap, and it holds for the current device */
    cudaError_t st = cudaFuncSetAttribute(k_ig_conv<MODE, XSRC, SHAPE, STAGES, FAST, STATS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (st != cudaSuccess) return choir_cuda_fail(err, st, "implicit conv shared memory");
    const int64_t ttiles = (a.Tout + IG_BN(SHAPE) - 1) / IG_BN(SHAPE);
    dim3 grid((unsigned)(ttiles * a.mtiles), 1, (unsigned)B);
    if constexpr (STATS)
        k_ig_conv<MODE, XSRC, SHAPE, STAGES, FAST, true>
            <<<grid, IG_THREADS(MODE, SHAPE), smem, cu->stream>>>(a);
    else
        k_ig_conv<MODE, XSRC, SHAPE, STAGES, FAST, false>
            <<<grid, IG_THREADS(MODE, SHAPE), smem, cu->stream>>>(static_cast<const ig_base &>(a));
    return choir_cuda_check_launch(err, "implicit conv1d");
}

/* the instantiations a plan can ask for: tf32x3 keeps the default shape and
 * sinf; the SFU's sin only where the staging applies Snake; STATS (the
 * epilogue's AdaIN statistics) only where the fused operation asks */
template <int MODE, int XSRC, bool STATS>
static int ig_pick(const ig_args &a, int64_t B, const ig_plan &p, choir_cuda *cu, choir_err *err) {
    constexpr int D = IG_SHAPE_DEFAULT, W = IG_SHAPE_WIDE;
    if constexpr (MODE == IG_TF32X3) {
        if constexpr (XSRC == IG_X_PRE)
            return p.stages == 3 ? ig_go<MODE, XSRC, D, 3, false, STATS>(a, B, p.smem, cu, err)
                                 : ig_go<MODE, XSRC, D, 2, false, STATS>(a, B, p.smem, cu, err);
        else
            return ig_go<MODE, XSRC, D, 2, false, STATS>(a, B, p.smem, cu, err);
    } else if constexpr (XSRC == IG_X_PRE) {
        if (p.shape == W)
            return p.stages == 3 ? ig_go<MODE, XSRC, W, 3, false, STATS>(a, B, p.smem, cu, err)
                                 : ig_go<MODE, XSRC, W, 2, false, STATS>(a, B, p.smem, cu, err);
        return p.stages == 3 ? ig_go<MODE, XSRC, D, 3, false, STATS>(a, B, p.smem, cu, err)
                             : ig_go<MODE, XSRC, D, 2, false, STATS>(a, B, p.smem, cu, err);
    } else if constexpr (XSRC == IG_X_PRO) {
        if (p.shape == W)
            return p.fast ? ig_go<MODE, XSRC, W, 3, true, STATS>(a, B, p.smem, cu, err)
                          : ig_go<MODE, XSRC, W, 3, false, STATS>(a, B, p.smem, cu, err);
        return p.fast ? ig_go<MODE, XSRC, D, 2, true, STATS>(a, B, p.smem, cu, err)
                      : ig_go<MODE, XSRC, D, 2, false, STATS>(a, B, p.smem, cu, err);
    } else {
        return p.shape == W ? ig_go<MODE, XSRC, W, 3, false, STATS>(a, B, p.smem, cu, err)
                            : ig_go<MODE, XSRC, D, 2, false, STATS>(a, B, p.smem, cu, err);
    }
}

template <int XSRC>
static int ig_launch_x(choir_cuda *cu, int mode, const ig_args &a, int64_t B, choir_err *err) {
    const ig_plan p = ig_plan_for(cu, mode, XSRC, a.K, a.dil);
    if constexpr (XSRC != IG_X_PLAIN) {
        if (a.stats) {
            if (mode == IG_BF16) return ig_pick<IG_BF16, XSRC, true>(a, B, p, cu, err);
            if (mode == IG_TF32) return ig_pick<IG_TF32, XSRC, true>(a, B, p, cu, err);
            return ig_pick<IG_TF32X3, XSRC, true>(a, B, p, cu, err);
        }
    } else if (a.stats) {
        return choir_err_set(err, CHOIR_EINVAL, "cuda: implicit conv1d: statistics asked of a "
                                                "plain convolution");
    }
    if (mode == IG_BF16) return ig_pick<IG_BF16, XSRC, false>(a, B, p, cu, err);
    if (mode == IG_TF32) return ig_pick<IG_TF32, XSRC, false>(a, B, p, cu, err);
    return ig_pick<IG_TF32X3, XSRC, false>(a, B, p, cu, err);
}

int ig_launch(choir_cuda *cu, int mode, int xsrc, const ig_args &a, int64_t B, choir_err *err) {
    if (xsrc == IG_X_PRE) return ig_launch_x<IG_X_PRE>(cu, mode, a, B, err);
    if (xsrc == IG_X_PRO) return ig_launch_x<IG_X_PRO>(cu, mode, a, B, err);
    return ig_launch_x<IG_X_PLAIN>(cu, mode, a, B, err);
}

/* (cuda_conv_ig.h) a's pointers are left to the caller; wp is scratch the
 * caller holds. */
int ig_setup(choir_cuda *cu, int mode, int64_t B, int64_t Cin, int64_t T,
             choir_cuda_conv_weight weight, int64_t Cout, int64_t K, int padding, int dilation,
             void *wp, ig_args *a, choir_err *err) {
    const int CK = mode == IG_BF16 ? 16 : 8;
    const int64_t Tout = T + 2 * (int64_t)padding - (int64_t)dilation * (K - 1);
    memset(a, 0, sizeof *a);
    if (Tout <= 0 || B < 1) return 0;
    const int64_t nchunk = (Cin + CK - 1) / CK, mtiles = (Cout + IG_BM - 1) / IG_BM;
    const int64_t ttiles = (Tout + 127) / 128;
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
    a->wp = wp;
    a->Cin = Cin, a->T = T, a->Cout = Cout, a->Tout = Tout;
    a->K = (int)K, a->dil = dilation, a->pad = padding, a->nchunk = (int)nchunk;
    a->mtiles = (int)mtiles;
    return 0;
}

int choir_cuda_conv1d_implicit(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                               choir_cuda_conv_weight weight, const float *bias, int64_t Cout,
                               int64_t kernel, int padding, int dilation,
                               const int32_t *out_lens, float *y, choir_err *err) {
    const int mode = ig_mode(cu, weight);
    void *wp = choir_cuda_scratch(cu, ig_pack_bytes(mode, Cin, Cout, kernel), err);
    if (!wp) return err ? err->code : CHOIR_ENOMEM;
    ig_args a;
    int rc = ig_setup(cu, mode, B, Cin, T, weight, Cout, kernel, padding, dilation, wp, &a, err);
    if (rc || a.Tout <= 0) return rc;
    a.x = x, a.bias = bias, a.out_lens = out_lens, a.y = y;
    return ig_launch(cu, mode, IG_X_PLAIN, a, B, err);
}

#endif /* CHOIR_IG_EMU */
