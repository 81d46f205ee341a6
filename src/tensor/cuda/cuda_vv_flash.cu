/* VibeVoice-ASR's prefill attention on the tensor cores (flash-style), the
 * path att_prefill (cuda_vibevoice.cu) takes for heads of 64 or 128 values
 * when choir_cuda_vv_prefill_flash is on (CHOIR_VV_PREFILL_FLASH=1; off by
 * default until it has run on a GPU).
 *
 * Queries: T f32 rows [T][n_heads D] at positions pos0 .. pos0 + T - 1 (row
 * i sees keys 0 .. pos0 + i). Keys and values: bf16 rows [keys][n_kv D],
 * contiguous or through a page table (pages of CHOIR_VV_PAGE rows). An f32
 * cache (contiguous or paged) is first rounded to bf16 into the context's
 * scratch, the visible rows only (k_vv_kv_bf16: one pass over them, a few
 * percent of the attention's time at any context, since every block of the
 * attention then reads half the bytes and can use cp.async); a bf16 pool is
 * read in place.
 *
 * One block per (query head, tile of 16 WARPS query rows), 16 rows a warp
 * (heads of 128 values: the output accumulators alone are 64 registers a
 * thread, so two 16-row slices a warp would spill). Per key tile of 64 rows
 * (inside one page: 64 divides CHOIR_VV_PAGE), as k_flash2_bf16 in
 * cuda_flash.cu: S = Q K^T by mma.m16n8k16 (bf16 in, f32 sums; K's B
 * fragments by ldmatrix.x4), the online softmax in f32 with the scale and
 * log2 e folded into q as it is rounded to bf16 (scores come out in log2
 * units: one ex2.approx each), the output rescaled only when a row's
 * maximum runs more than 2^8 past its reference (a warp-uniform test), P
 * rounded to bf16 and O += P V (V's fragments by ldmatrix.x4.trans). K and V
 * tiles arrive by cp.async two deep, rows padded by 16 bytes so the
 * fragment reads hit distinct banks: 4 x 64 x (D + 8) bf16, 69,632 bytes at
 * D = 128, so the shared memory is dynamic. Keys past the block's last
 * visible one are zero-filled (a page's unwritten rows may hold anything,
 * and 0 x NaN is NaN in the product); keys past a row's position are masked
 * to -inf, only on the tiles that cross the warp's first row.
 *
 * GQA: query head h reads key head h / (n_heads / n_kv). The G query heads
 * of a key head are separate blocks that read the same K/V tiles; they are
 * adjacent in launch order (blockIdx.x is the head), so the tiles come from
 * L2, not DRAM. Packing the G heads into a block's rows (FlashAttention's
 * GQA packing) would not lower that traffic for a prefill: a block of BM
 * query vectors reads every visible tile once either way, so the tile reads
 * per key head are T G / BM in both layouts; it only narrows the causal
 * diagonal (BM / G rows a block instead of BM: a few percent of the keys at
 * thousands of keys) at the cost of a division per row and ragged tails.
 * The query tiles that see the most keys are launched first (causal load
 * balance). */
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdlib.h>

#include "choir/backend_vibevoice.h"
#include "tensor/cuda/cuda_internal.h"
#include "tensor/cuda/cuda_mma.h"
#include "tensor/cuda/cuda_vibevoice.h"

#define VV_FA_KT 64      /* keys per tile (divides CHOIR_VV_PAGE) */
#define VV_FA_GROW 8.0f  /* log2 of how far a row's maximum may run ahead of its reference */
#ifndef VV_FA_SMEM
#define VV_FA_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

template <int D, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, WARPS == 4 ? 2 : 1)
    k_vv_flash_prefill(const float *__restrict__ q, int T, const __nv_bfloat16 *__restrict__ kc,
                       const __nv_bfloat16 *__restrict__ vc, int pos0, const int32_t *__restrict__ table,
                       int nh, int nkv, float scale_log2, float *__restrict__ out) {
    static_assert(D % 32 == 0, "two k-steps per ldmatrix.x4");
    constexpr int THREADS = 32 * WARPS;
    constexpr int LD = D + 8;          /* padded shared row, elements */
    constexpr int KS = D / 16;         /* k-steps over the head for S */
    constexpr int NS = VV_FA_KT / 8;   /* n-tiles of keys in S */
    constexpr int ND = D / 8;          /* n-tiles of values in O */
    constexpr int CH = D / 8;          /* 16-byte chunks per row */
    constexpr int BM = 16 * WARPS;
    VV_FA_SMEM(vv_fa_smem);
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)vv_fa_smem, *Vs = Ks + 2 * VV_FA_KT * LD;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int lr = lane & 7, lm = lane >> 3; /* ldmatrix: lane l addresses row lr of matrix lm */
    const int h = blockIdx.x, kh = h / (nh / nkv);
    const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BM;
    const int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D;
    /* Keys any row of the block sees: 0 .. kend - 1. */
    const int kend = pos0 + (q0 + BM < T ? q0 + BM : T);
    const int ntiles = (kend + VV_FA_KT - 1) / VV_FA_KT;
    const __nv_bfloat16 *kb = kc + (int64_t)kh * D, *vb = vc + (int64_t)kh * D;

    auto load_tile = [&](int tile, int buf) {
        int key0 = tile * VV_FA_KT;
        int64_t r0 = table ? (int64_t)table[key0 / CHOIR_VV_PAGE] * CHOIR_VV_PAGE + key0 % CHOIR_VV_PAGE : key0;
        __nv_bfloat16 *ks = Ks + buf * VV_FA_KT * LD, *vs = Vs + buf * VV_FA_KT * LD;
#pragma unroll
        for (int c = threadIdx.x; c < VV_FA_KT * CH; c += THREADS) {
            int r = c / CH, col = (c % CH) * 8;
            bool in = key0 + r < kend;
            int64_t off = (r0 + (in ? r : 0)) * ldk + col;
            cp_async16(ks + r * LD + col, kb + off, in ? 16 : 0);
            cp_async16(vs + r * LD + col, vb + off, in ? 16 : 0);
        }
        cp_async_commit();
    };
    if (ntiles > 0) load_tile(0, 0);

    /* The warp's rows: row[0] = its g-th, row[1] = 8 further; a row sees
     * keys < lim (0 past the chunk). */
    const int wrow = q0 + warp * 16;
    int row[2], lim[2];
    row[0] = wrow + g;
    row[1] = row[0] + 8;
#pragma unroll
    for (int r = 0; r < 2; r++) lim[r] = row[r] < T ? pos0 + row[r] + 1 : 0;
    /* Tiles from key wlim on cross the causal edge of the warp's first row;
     * from wend on no row of the warp sees anything. */
    const int wlim = wrow < T ? pos0 + wrow + 1 : 0;
    const int wend = wrow < T ? pos0 + (wrow + 16 < T ? wrow + 16 : T) : 0;

    /* Q fragments straight from the f32 rows, scaled by scale log2 e and
     * rounded to bf16 (read once per block). */
    uint32_t qf[KS][4];
    const float *qb = q + (int64_t)h * D;
#pragma unroll
    for (int s = 0; s < KS; s++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = row[i & 1], col = s * 16 + 2 * t + (i >> 1) * 8;
            float2 x = r < T ? *(const float2 *)(qb + (int64_t)r * ldq + col) : make_float2(0.0f, 0.0f);
            qf[s][i] = pack_bf16(x.x * scale_log2, x.y * scale_log2);
        }
    }

    float o[ND][4];
    float ref[2], sum[2]; /* ref: the rows' reference maximum (log2 units) */
#pragma unroll
    for (int j = 0; j < ND; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    ref[0] = ref[1] = -INFINITY;
    sum[0] = sum[1] = 0.0f;

    for (int tile = 0; tile < ntiles; tile++) {
        const int buf = tile & 1;
        if (tile + 1 < ntiles) {
            load_tile(tile + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int key0 = tile * VV_FA_KT;
        if (key0 < wend) {
            const __nv_bfloat16 *Kt = Ks + buf * VV_FA_KT * LD, *Vt = Vs + buf * VV_FA_KT * LD;
            float sc[NS][4];
#pragma unroll
            for (int j = 0; j < NS; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
            for (int j = 0; j < NS; j++) {
                const __nv_bfloat16 *kr = Kt + (j * 8 + lr) * LD + lm * 8;
#pragma unroll
                for (int s = 0; s < KS; s += 2) {
                    uint32_t bf[4];
                    ldmatrix_x4(bf, kr + s * 16);
                    mma_bf16(sc[j], qf[s], bf[0], bf[1]);
                    mma_bf16(sc[j], qf[s + 1], bf[2], bf[3]);
                }
            }

            const bool edge = key0 + VV_FA_KT > wlim;
            float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int j = 0; j < NS; j++) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float x = sc[j][i];
                    if (edge && key0 + j * 8 + 2 * t + (i & 1) >= lim[i >> 1]) sc[j][i] = x = -INFINITY;
                    tmax[i >> 1] = fmaxf(tmax[i >> 1], x);
                }
            }
            bool grow = false;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
                tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
                grow |= tmax[r] > ref[r] + VV_FA_GROW;
            }
            if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float mnew = fmaxf(ref[r], tmax[r]);
                    float alpha = mnew == -INFINITY ? 1.0f : ex2_ftz(ref[r] - mnew);
                    ref[r] = mnew;
                    sum[r] *= alpha;
#pragma unroll
                    for (int j = 0; j < ND; j++) {
                        o[j][2 * r] *= alpha;
                        o[j][2 * r + 1] *= alpha;
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                /* No key seen yet: the scores are all -inf, exponents 0. */
                float nb = ref[r] == -INFINITY ? 0.0f : -ref[r];
#pragma unroll
                for (int j = 0; j < NS; j++) {
                    float p0 = ex2_ftz(sc[j][2 * r] + nb), p1 = ex2_ftz(sc[j][2 * r + 1] + nb);
                    sc[j][2 * r] = p0;
                    sc[j][2 * r + 1] = p1;
                    sum[r] += p0 + p1;
                }
            }

            /* O += P V: P's accumulator layout is the A fragment of the
             * next product; V's B fragments come transposed out of shared
             * memory. */
#pragma unroll
            for (int s = 0; s < VV_FA_KT / 16; s++) {
                uint32_t pa[4];
                pa[0] = pack_bf16(sc[2 * s][0], sc[2 * s][1]);
                pa[1] = pack_bf16(sc[2 * s][2], sc[2 * s][3]);
                pa[2] = pack_bf16(sc[2 * s + 1][0], sc[2 * s + 1][1]);
                pa[3] = pack_bf16(sc[2 * s + 1][2], sc[2 * s + 1][3]);
                const __nv_bfloat16 *vr = Vt + (s * 16 + (lm & 1) * 8 + lr) * LD + (lm >> 1) * 8;
#pragma unroll
                for (int j = 0; j < ND; j += 2) {
                    uint32_t bf[4];
                    ldmatrix_x4_trans(bf, vr + j * 8);
                    mma_bf16(o[j], pa, bf[0], bf[1]);
                    mma_bf16(o[j + 1], pa, bf[2], bf[3]);
                }
            }
        }
        __syncthreads(); /* the buffer is refilled next iteration */
    }

    float *ob = out + (int64_t)h * D;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = sum[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        if (row[r] >= T) continue;
        float *orow = ob + (int64_t)row[r] * ldq;
#pragma unroll
        for (int j = 0; j < ND; j++)
            *(float2 *)(orow + j * 8 + 2 * t) = make_float2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    }
}

/* The second kernel (CHOIR_VV_FLASH_V2=1, choir_cuda_vv_prefill_flash_v2;
 * off by default until it has run on a GPU), FlashAttention-2's shape for
 * mma.sync. What limits k_vv_flash_prefill above (~200 TFLOP/s on an H100
 * in the ncu profile of 7 Dec, 15.5% of a 10-minute prefill layer):
 *  - shared-memory bandwidth: a warp owns 16 query rows, so every K and V
 *    fragment read by ldmatrix feeds 2 mma (32 KB of K and V per tile for
 *    128 mma: 256 bytes per m16n8k16, about 2 clocks of the SM's 128 bytes
 *    a clock, more than the mma itself takes at mma.sync's rate);
 *  - L2 bandwidth: a block of 64 rows reads 32 KB of K and V per 64 x 64
 *    x 128 x 4 flop, about 4.6 TB/s from L2 at 300 TFLOP/s, near what the
 *    H100's L2 gives;
 *  - q in registers (32 of them at D 128) is what kept a warp at 16 rows.
 * Here a warp owns 32 rows (two m16 slices, BM = 128 with 4 warps): q is
 * scaled, rounded to bf16 and parked in shared memory once (34,816 bytes
 * at D 128), read back by ldmatrix at each k-step, so each K fragment
 * feeds 4 mma and each transposed V fragment 4 (40 KB per 256 mma: 160
 * bytes each), and a block's K and V traffic per flop halves. The
 * probabilities are rounded to bf16 as they are exponentiated (packed
 * straight into the A fragments of O += P V: 32 registers, not 64 f32),
 * which keeps the 128 accumulators of O and 64 of S within 255 registers
 * at 2 blocks of 4 warps an SM (104,448 bytes of shared memory each at D
 * 128). The rest is k_vv_flash_prefill's: 64-key tiles by cp.async two
 * deep, scores in log2 units (scale and log2 e folded into q), the lazy
 * rescale, masking only on the tiles that cross the warp's first row,
 * longest query tiles launched first, f32 rows out (the interface's).
 * Not done: GQA packing (see above), bf16 output (the callers take f32),
 * a persistent scheduler (with 1,024-row chunks the 28 x 8 blocks of 128
 * rows fill 85% of the 2 x 132 slots of one wave). */
template <int D>
__global__ void __launch_bounds__(128, 2)
    k_vv_flash2_prefill(const float *__restrict__ q, int T, const __nv_bfloat16 *__restrict__ kc,
                        const __nv_bfloat16 *__restrict__ vc, int pos0, const int32_t *__restrict__ table,
                        int nh, int nkv, float scale_log2, float *__restrict__ out) {
    static_assert(D % 32 == 0, "two k-steps per ldmatrix.x4");
    constexpr int WARPS = 4, MT = 2; /* MT: 16-row slices a warp */
    constexpr int THREADS = 32 * WARPS;
    constexpr int BM = 16 * MT * WARPS;
    constexpr int LD = D + 8;
    constexpr int KS = D / 16;
    constexpr int NS = VV_FA_KT / 8;
    constexpr int ND = D / 8;
    constexpr int CH = D / 8;
    VV_FA_SMEM(vv_fa_smem);
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)vv_fa_smem, *Ks = Qs + BM * LD, *Vs = Ks + 2 * VV_FA_KT * LD;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int lr = lane & 7, lm = lane >> 3;
    const int h = blockIdx.x, kh = h / (nh / nkv);
    const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BM;
    const int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D;
    const int kend = pos0 + (q0 + BM < T ? q0 + BM : T);
    const int ntiles = (kend + VV_FA_KT - 1) / VV_FA_KT;
    const __nv_bfloat16 *kb = kc + (int64_t)kh * D, *vb = vc + (int64_t)kh * D;

    auto load_tile = [&](int tile, int buf) {
        int key0 = tile * VV_FA_KT;
        int64_t r0 = table ? (int64_t)table[key0 / CHOIR_VV_PAGE] * CHOIR_VV_PAGE + key0 % CHOIR_VV_PAGE : key0;
        __nv_bfloat16 *ks = Ks + buf * VV_FA_KT * LD, *vs = Vs + buf * VV_FA_KT * LD;
        /* Not unrolled: unrolled, its addresses pushed the kernel at D 128
         * past 255 registers (32 bytes of spills). */
#pragma unroll 1
        for (int c = threadIdx.x; c < VV_FA_KT * CH; c += THREADS) {
            int r = c / CH, col = (c % CH) * 8;
            bool in = key0 + r < kend;
            int64_t off = (r0 + (in ? r : 0)) * ldk + col;
            cp_async16(ks + r * LD + col, kb + off, in ? 16 : 0);
            cp_async16(vs + r * LD + col, vb + off, in ? 16 : 0);
        }
        cp_async_commit();
    };
    if (ntiles > 0) load_tile(0, 0);

    /* The block's q rows, times scale log2 e, rounded to bf16 into shared
     * memory while the first tile is in flight (rows past the chunk 0); the
     * first iteration's barrier publishes them. */
    {
        const float *qb = q + (int64_t)h * D;
        for (int c = threadIdx.x; c < BM * (D / 4); c += THREADS) {
            int r = c / (D / 4), col = (c % (D / 4)) * 4;
            float4 x = q0 + r < T ? *(const float4 *)(qb + (int64_t)(q0 + r) * ldq + col)
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *(uint2 *)(Qs + r * LD + col) =
                make_uint2(pack_bf16(x.x * scale_log2, x.y * scale_log2), pack_bf16(x.z * scale_log2, x.w * scale_log2));
        }
    }

    /* The lane's rows: wrow + g + 16 m + 8 r for slice m, half r; row
     * wrow + g + i sees keys < lim0 + i. Rows past the chunk are not masked
     * apart (their q is 0 and the keys past kend are zeros: finite scores)
     * and not stored; fewer live registers than a table of rows. */
    const int wrow = q0 + warp * 16 * MT;
    const int lim0 = pos0 + wrow + g + 1;
    const int wlim = wrow < T ? pos0 + wrow + 1 : 0;
    const int wend = wrow < T ? pos0 + (wrow + 16 * MT < T ? wrow + 16 * MT : T) : 0;
    /* ldmatrix.x4 of an A fragment: lane l addresses row (lm & 1) 8 + lr, column (lm >> 1) 8.
     * Of K's B fragments, two n-tiles of one k-step: matrix lm is keys
     * (lm >> 1) 8 .., columns (lm & 1) 8 .. (b0, b1 of n-tile j, then of j + 1). */
    const __nv_bfloat16 *qr = Qs + (warp * 16 * MT + (lm & 1) * 8 + lr) * LD + (lm >> 1) * 8;
    const int kofs = ((lm >> 1) * 8 + lr) * LD + (lm & 1) * 8;

    float o[MT][ND][4];
    float ref[MT][2], sum[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int j = 0; j < ND; j++) o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.0f;
        ref[m][0] = ref[m][1] = -INFINITY;
        sum[m][0] = sum[m][1] = 0.0f;
    }

    for (int tile = 0; tile < ntiles; tile++) {
        const int buf = tile & 1;
        if (tile + 1 < ntiles) {
            load_tile(tile + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int key0 = tile * VV_FA_KT;
        if (key0 < wend) {
            const __nv_bfloat16 *Kt = Ks + buf * VV_FA_KT * LD, *Vt = Vs + buf * VV_FA_KT * LD;
            float sc[MT][NS][4];
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int j = 0; j < NS; j++) sc[m][j][0] = sc[m][j][1] = sc[m][j][2] = sc[m][j][3] = 0.0f;
            /* S = Q K^T a k-step at a time (q's fragments: 8 registers),
             * two n-tiles of keys an ldmatrix; each K fragment serves both
             * slices. */
#pragma unroll
            for (int s = 0; s < KS; s++) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int m = 0; m < MT; m++) ldmatrix_x4(qa[m], qr + m * 16 * LD + s * 16);
#pragma unroll
                for (int j = 0; j < NS; j += 2) {
                    uint32_t bf[4];
                    ldmatrix_x4(bf, Kt + kofs + j * 8 * LD + s * 16);
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        mma_bf16(sc[m][j], qa[m], bf[0], bf[1]);
                        mma_bf16(sc[m][j + 1], qa[m], bf[2], bf[3]);
                    }
                }
            }

            const bool edge = key0 + VV_FA_KT > wlim;
            float tmax[MT][2];
            bool grow = false;
#pragma unroll
            for (int m = 0; m < MT; m++) {
                tmax[m][0] = tmax[m][1] = -INFINITY;
#pragma unroll
                for (int j = 0; j < NS; j++) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float x = sc[m][j][i];
                        if (edge && key0 + j * 8 + 2 * t + (i & 1) >= lim0 + 16 * m + 8 * (i >> 1))
                            sc[m][j][i] = x = -INFINITY;
                        tmax[m][i >> 1] = fmaxf(tmax[m][i >> 1], x);
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    tmax[m][r] = fmaxf(tmax[m][r], __shfl_xor_sync(0xffffffffu, tmax[m][r], 1));
                    tmax[m][r] = fmaxf(tmax[m][r], __shfl_xor_sync(0xffffffffu, tmax[m][r], 2));
                    grow |= tmax[m][r] > ref[m][r] + VV_FA_GROW;
                }
            }
            if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        float mnew = fmaxf(ref[m][r], tmax[m][r]);
                        float alpha = mnew == -INFINITY ? 1.0f : ex2_ftz(ref[m][r] - mnew);
                        ref[m][r] = mnew;
                        sum[m][r] *= alpha;
#pragma unroll
                        for (int j = 0; j < ND; j++) {
                            o[m][j][2 * r] *= alpha;
                            o[m][j][2 * r + 1] *= alpha;
                        }
                    }
            }
            /* P = 2^(S - ref), rounded to bf16 as it is made: pp[m][j][r]
             * is rows r 8 + g, keys j 8 + 2t and + 1, i.e. the A fragments
             * of O += P V ({pp[2s][0], pp[2s][1], pp[2s+1][0], pp[2s+1][1]}
             * for keys 16 s ..). */
            uint32_t pp[MT][NS][2];
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float nb = ref[m][r] == -INFINITY ? 0.0f : -ref[m][r];
#pragma unroll
                    for (int j = 0; j < NS; j++) {
                        float p0 = ex2_ftz(sc[m][j][2 * r] + nb), p1 = ex2_ftz(sc[m][j][2 * r + 1] + nb);
                        sum[m][r] += p0 + p1;
                        pp[m][j][r] = pack_bf16(p0, p1);
                    }
                }

            /* O += P V: each transposed V fragment serves both slices. */
#pragma unroll
            for (int s = 0; s < VV_FA_KT / 16; s++) {
                const __nv_bfloat16 *vr = Vt + (s * 16 + (lm & 1) * 8 + lr) * LD + (lm >> 1) * 8;
#pragma unroll
                for (int j = 0; j < ND; j += 2) {
                    uint32_t bf[4];
                    ldmatrix_x4_trans(bf, vr + j * 8);
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        const uint32_t pa[4] = {pp[m][2 * s][0], pp[m][2 * s][1], pp[m][2 * s + 1][0],
                                                pp[m][2 * s + 1][1]};
                        mma_bf16(o[m][j], pa, bf[0], bf[1]);
                        mma_bf16(o[m][j + 1], pa, bf[2], bf[3]);
                    }
                }
            }
        }
        __syncthreads();
    }

    float *ob = out + (int64_t)h * D;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = sum[m][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            float inv = l > 0.0f ? 1.0f / l : 0.0f;
            const int row = wrow + g + 16 * m + 8 * r;
            if (row >= T) continue;
            float *orow = ob + (int64_t)row * ldq;
#pragma unroll
            for (int j = 0; j < ND; j++)
                *(float2 *)(orow + j * 8 + 2 * t) = make_float2(o[m][j][2 * r] * inv, o[m][j][2 * r + 1] * inv);
        }
}

/* Rows 0 .. n_keys - 1 of an f32 cache (contiguous, or through a page
 * table) rounded to bf16 into contiguous rows [n_keys][ldk]. */
__global__ void k_vv_kv_bf16(const float *__restrict__ kc, const float *__restrict__ vc,
                             const int32_t *__restrict__ table, int64_t n_keys, int64_t ldk,
                             __nv_bfloat16 *__restrict__ ko, __nv_bfloat16 *__restrict__ vo) {
    int64_t per = ldk / 4, n = n_keys * per;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t key = i / per, c = i % per;
        int64_t src = table ? (int64_t)table[key / CHOIR_VV_PAGE] * CHOIR_VV_PAGE + key % CHOIR_VV_PAGE : key;
        float4 a = ((const float4 *)(kc + src * ldk))[c], b = ((const float4 *)(vc + src * ldk))[c];
        ((uint2 *)(ko + key * ldk))[c] = make_uint2(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w));
        ((uint2 *)(vo + key * ldk))[c] = make_uint2(pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
    }
}

template <int D, int WARPS>
static int flash_launch(choir_cuda *cu, const float *q, int64_t T, const __nv_bfloat16 *k,
                        const __nv_bfloat16 *v, int64_t pos0, const int32_t *table, int nh, int nkv,
                        float *out, choir_err *err) {
    constexpr int BM = 16 * WARPS;
    constexpr int smem = 4 * VV_FA_KT * (D + 8) * (int)sizeof(__nv_bfloat16);
    if ((T + BM - 1) / BM > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: flash prefill of %lld rows", (long long)T);
    /* Per function and device; cheap enough to set at each launch. */
    cudaError_t st = cudaFuncSetAttribute(k_vv_flash_prefill<D, WARPS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (st != cudaSuccess) return choir_cuda_fail(err, st, "vibevoice flash prefill: shared memory");
    dim3 grid((unsigned)nh, (unsigned)((T + BM - 1) / BM));
    k_vv_flash_prefill<D, WARPS><<<grid, 32 * WARPS, smem, cu->stream>>>(
        q, (int)T, k, v, (int)pos0, table, nh, nkv, 1.4426950408889634f / sqrtf((float)D), out);
    return choir_cuda_check_launch(err, "vibevoice flash prefill attention");
}

template <int D>
static int flash2_launch(choir_cuda *cu, const float *q, int64_t T, const __nv_bfloat16 *k,
                         const __nv_bfloat16 *v, int64_t pos0, const int32_t *table, int nh, int nkv,
                         float *out, choir_err *err) {
    constexpr int BM = 128;
    constexpr int smem = (BM + 4 * VV_FA_KT) * (D + 8) * (int)sizeof(__nv_bfloat16);
    if ((T + BM - 1) / BM > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: flash prefill of %lld rows", (long long)T);
    cudaError_t st = cudaFuncSetAttribute(k_vv_flash2_prefill<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    /* Two blocks an SM need 209 KB of its 228: ask for the largest carveout
     * (a hint; the occupancy is what the registers and this allow). */
    if (st == cudaSuccess)
        st = cudaFuncSetAttribute(k_vv_flash2_prefill<D>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  (int)cudaSharedmemCarveoutMaxShared);
    if (st != cudaSuccess) return choir_cuda_fail(err, st, "vibevoice flash prefill v2: shared memory");
    dim3 grid((unsigned)nh, (unsigned)((T + BM - 1) / BM));
    k_vv_flash2_prefill<D><<<grid, 128, smem, cu->stream>>>(q, (int)T, k, v, (int)pos0, table, nh, nkv,
                                                            1.4426950408889634f / sqrtf((float)D), out);
    return choir_cuda_check_launch(err, "vibevoice flash prefill attention v2");
}

/* 1: read CHOIR_VV_PREFILL_FLASH on first use; then 0 off, 2 on. */
static int g_pf_flash = 1;
static int g_pf_warps = 4;

void choir_cuda_vv_prefill_flash(bool on) { __atomic_store_n(&g_pf_flash, on ? 2 : 0, __ATOMIC_RELAXED); }

bool choir_cuda_vv_prefill_flash_on(void) {
    int v = __atomic_load_n(&g_pf_flash, __ATOMIC_RELAXED);
    if (v == 1) {
        const char *e = getenv("CHOIR_VV_PREFILL_FLASH");
        v = e && e[0] == '0' ? 0 : 2; /* on unless "0" (H100: 10 min of prefill 0.41 -> 0.16 s) */
        __atomic_store_n(&g_pf_flash, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

/* 1: read CHOIR_VV_FLASH_V2 on first use; then 0 off, 2 on. */
static int g_pf_v2 = 1;

void choir_cuda_vv_prefill_flash_v2(bool on) { __atomic_store_n(&g_pf_v2, on ? 2 : 0, __ATOMIC_RELAXED); }

bool choir_cuda_vv_prefill_flash_v2_on(void) {
    int v = __atomic_load_n(&g_pf_v2, __ATOMIC_RELAXED);
    if (v == 1) {
        const char *e = getenv("CHOIR_VV_FLASH_V2");
        v = e && e[0] == '0' ? 0 : 2; /* on unless "0" (H100, 7 Dec 2026: 60 min of prefill 20,494 -> 23,212 tokens/s) */
        __atomic_store_n(&g_pf_v2, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

/* -1: read CHOIR_VV_FLASH_WG on first use; then the mode (0 off, 1, 2).
 * 2 (the pipelined kernel) by default since its H100 run of 7 Dec 2026:
 * 60 minutes of prefill 23,631 -> 25,383 tokens/s (wg 24,725), the
 * attention alone 18.84 -> 16.57 ms over bf16 pages. */
static int g_pf_wg = -1;

void choir_cuda_vv_prefill_flash_wg(int mode) {
    __atomic_store_n(&g_pf_wg, mode == 1 || mode == 2 ? mode : 0, __ATOMIC_RELAXED);
}

int choir_cuda_vv_prefill_flash_wg_mode(void) {
    int v = __atomic_load_n(&g_pf_wg, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("CHOIR_VV_FLASH_WG");
        v = e && (e[0] == '0' || e[0] == '1') && !e[1] ? e[0] - '0' : 2;
        __atomic_store_n(&g_pf_wg, v, __ATOMIC_RELAXED);
    }
    return v;
}

void choir_cuda_vv_prefill_flash_warps(int warps) {
    __atomic_store_n(&g_pf_warps, warps == 8 ? 8 : 4, __ATOMIC_RELAXED);
}

int choir_cuda_vv_flash_prefill(choir_cuda *cu, const float *q, int64_t T, const void *k, const void *v,
                                bool kv_bf16, const int32_t *table, int64_t pos0, int n_heads, int n_kv, int D,
                                float *out, choir_err *err) {
    if (T <= 0) return 0;
    if ((D != 64 && D != 128) || n_kv <= 0 || n_heads % n_kv || n_heads > 65535)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: flash prefill of %d heads over %d, %d values",
                             n_heads, n_kv, D);
    if (pos0 < 0 || pos0 + T > INT32_MAX - VV_FA_KT)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: flash prefill of %lld rows at %lld", (long long)T,
                             (long long)pos0);
    int64_t n_keys = pos0 + T, ldk = (int64_t)n_kv * D;
    const __nv_bfloat16 *kb = (const __nv_bfloat16 *)k, *vb = (const __nv_bfloat16 *)v;
    if (!kv_bf16) {
        /* The visible rows rounded to bf16, contiguous: the kernel then reads
         * them without the table. */
        size_t half = (size_t)(n_keys * ldk) * sizeof(__nv_bfloat16);
        half = (half + 255) & ~(size_t)255;
        __nv_bfloat16 *kv = (__nv_bfloat16 *)choir_cuda_scratch(cu, 2 * half, err);
        if (!kv) return err ? err->code : CHOIR_ENOMEM;
        __nv_bfloat16 *vv = (__nv_bfloat16 *)((char *)kv + half);
        k_vv_kv_bf16<<<choir_cuda_blocks(n_keys * ldk / 4, 256), 256, 0, cu->stream>>>(
            (const float *)k, (const float *)v, table, n_keys, ldk, kv, vv);
        int rc = choir_cuda_check_launch(err, "vibevoice keys and values to bf16");
        if (rc) return rc;
        kb = kv, vb = vv, table = NULL;
    }
    /* The third kernel (wgmma, sm_90a) when asked for and usable; it
     * declines (1) anything it does not take, and the second runs. */
    int wg = choir_cuda_vv_prefill_flash_wg_mode();
    if (wg) {
        int rc = choir_cuda_vv_flash_wg_launch(cu, q, T, kb, vb, table, pos0, n_heads, n_kv, D, wg == 2, out, err);
        if (rc <= 0) return rc;
    }
    /* The second kernel reads q by 16 bytes (every stream buffer is so
     * aligned; an odd view takes the first). */
    if (choir_cuda_vv_prefill_flash_v2_on() && !((uintptr_t)q & 15))
        return D == 128 ? flash2_launch<128>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err)
                        : flash2_launch<64>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err);
    bool eight = __atomic_load_n(&g_pf_warps, __ATOMIC_RELAXED) == 8;
    if (D == 128)
        return eight ? flash_launch<128, 8>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err)
                     : flash_launch<128, 4>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err);
    return eight ? flash_launch<64, 8>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err)
                 : flash_launch<64, 4>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err);
}
