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
    bool eight = __atomic_load_n(&g_pf_warps, __ATOMIC_RELAXED) == 8;
    if (D == 128)
        return eight ? flash_launch<128, 8>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err)
                     : flash_launch<128, 4>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err);
    return eight ? flash_launch<64, 8>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err)
                 : flash_launch<64, 4>(cu, q, T, kb, vb, pos0, table, n_heads, n_kv, out, err);
}
