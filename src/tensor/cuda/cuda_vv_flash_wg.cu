/* VibeVoice's prefill attention, third kernel: Hopper's warpgroup MMA
 * (wgmma.mma_async, sm_90a only), FlashAttention-3's shape without its
 * producer warpgroup. Mode 2 (the pipelined mode below) by default since its
 * H100 run of 7 Dec 2026; CHOIR_VV_FLASH_WG=0 or 1, or
 * choir_cuda_vv_prefill_flash_wg(0 or 1) (cuda_vv_flash.cu), turns it off or
 * to the plain mode. Heads of 128 values, on devices of compute
 * capability 9.0 (H100, H200); elsewhere, or if its launch is refused, the
 * second kernel (k_vv_flash2_prefill) runs instead.
 *
 * Same interface and semantics as k_vv_flash2_prefill (cuda_vv_flash.cu):
 * f32 q rows [T][n_heads 128] at positions pos0 .., bf16 K and V rows
 * [keys][n_kv 128], contiguous or through a page table, causal (row i sees
 * keys 0 .. pos0 + i), query head h reads key head h / (n_heads / n_kv),
 * keys past the block's last visible one zero-filled, scores in log2 units
 * (scale x log2 e folded into q as it is rounded to bf16), one ex2.approx a
 * score, the lazy rescale (a warp's rows rescaled only when a maximum runs
 * 2^8 past its reference), longest query tiles first, f32 rows out.
 *
 * Why: k_vv_flash2_prefill reaches ~300 TFLOP/s; mma.sync issues one
 * m16n8k16 per warp-instruction and feeds each from registers loaded by
 * ldmatrix, while wgmma m64n128k16 reads its B operand (and here A of the
 * first product) straight from shared memory for a whole warpgroup: 16x
 * the work an instruction, no ldmatrix, and the tensor core runs
 * asynchronously from the softmax's arithmetic of the other warpgroup.
 *
 * Shape. One block per (query head, 128 query rows): two warpgroups of
 * 128 threads, 64 rows each (wgmma's m64). Key tiles of 128 rows (one
 * page: CHOIR_VV_PAGE is 128) by cp.async two deep, stored in the
 * 128-byte-swizzled halves of cuda_wgmma.h (the swizzle applied by the
 * loader's address arithmetic), which serve K as the K-major B operand of
 * S = Q K^T and V as the MN-major (trans-b) B operand of O += P V. Per tile
 * and warpgroup: 8 wgmma m64n128k16 for S (Q and K from shared memory,
 * k-steps over the head), wait; mask (only on tiles that cross the
 * warpgroup's first row), row maxima (quad shuffles: a row's 128 scores lie
 * on the 4 threads of a quad), lazy rescale of O, P = 2^(S - ref) rounded
 * to bf16 straight into the A register fragments (no data moves between
 * threads: cuda_wgmma.h); 8 wgmma m64n128k16 for O += P V (P from
 * registers, V from shared memory), wait. Registers: O 64 f32, S 64 f32,
 * P 32: one block of 256 threads an SM (up to 255 registers a thread;
 * ptxas, sm_90a: 181 in mode 1, 189 in mode 2, no spills). Shared memory:
 * q 32 KB (bf16, swizzled like K) + K and V two deep 128 KB (mode 2: three
 * deep, 192 KB) + 1 KB to align the base to the swizzle's 1,024-byte
 * period. Mode 2 overlaps a tile's softmax with the previous tile's P V
 * (FlashAttention-3's intra-warpgroup pipelining; see the kernel).
 *
 * Ordering. cp.async and st.shared write through the generic proxy and
 * wgmma reads through the async proxy: every thread runs
 * fence.proxy.async.shared::cta after its cp.async.wait_group and before
 * the barrier that precedes the tile's wgmma. wgmma.fence precedes each
 * batch of wgmma (its accumulators and A registers were written by
 * ordinary instructions: the rescale, the exponentials); each batch is one
 * commit group waited for in full (wait_group 0) before its registers are
 * read, and register "fences" (empty asm rewriting each accumulator) keep
 * the compiler from moving their reads or writes across the issue or the
 * wait. A tile's buffer is refilled only after the barrier that ends the
 * tile, when both warpgroups' wgmma on it have completed.
 *
 * Not done (a draft): the producer warpgroup with TMA and mbarriers
 * (here every thread loads by cp.async, one tile ahead), the
 * inter-warpgroup ping-pong schedule of FlashAttention-3 (named barriers
 * ordering the two warpgroups' softmax and products), a persistent
 * scheduler; heads of 64 (the 1.5B model takes the second kernel); bf16
 * output. */
#include <cuda_bf16.h>
#include <stdint.h>

#include "choir/backend_vibevoice.h"
#include "choir/log.h"
#include "tensor/cuda/cuda_internal.h"
#include "tensor/cuda/cuda_mma.h"
#include "tensor/cuda/cuda_vibevoice.h"
#include "tensor/cuda/cuda_wgmma.h"

#define VV_WG_D 128     /* values a head */
#define VV_WG_KT 128    /* keys a tile (one page) */
#define VV_WG_BM 128    /* query rows a block: 2 warpgroups x 64 */
#define VV_WG_GROW 8.0f /* log2 of how far a row's maximum may run ahead of its reference */
#define VV_WG_TILE (VV_WG_KT * VV_WG_D * 2) /* bytes of a K or V tile */
/* Bytes of dynamic shared memory: q, NBUF K and V tiles, 1 KB to align. */
#define VV_WG_SMEM(nbuf) (VV_WG_BM * VV_WG_D * 2 + 2 * (nbuf) * VV_WG_TILE + 1024)
static_assert(CHOIR_VV_PAGE % VV_WG_KT == 0, "a key tile lies in one page");

/* PIPE false: per tile S, wait, softmax, O += P V, wait (K and V two deep).
 * PIPE true (CHOIR_VV_FLASH_WG=2): FlashAttention-3's intra-warpgroup
 * overlap within the same registers: tile j issues S(j) and then O +=
 * P(j - 1) V(j - 1), waits for S(j) only (wait_group 1: groups complete in
 * order, S(j) was committed first), runs the softmax of tile j while the
 * tensor core works through P(j - 1) V(j - 1), waits for that, rescales O,
 * packs P(j); the last P V after the loop (or when the warpgroup's rows see
 * no further tile). V(j - 1) is read during tile j, so K and V are three
 * deep (225 KB of shared memory): tile j + 1 loads into the buffer of tile
 * j - 2, issued after the barrier that opens tile j (every warpgroup is
 * then past tile j - 1, where P(j - 2) V(j - 2) completed). */
template <bool PIPE>
__global__ void __launch_bounds__(256, 1)
    k_vv_flash_wg_prefill(const float *__restrict__ q, int T, const __nv_bfloat16 *__restrict__ kc,
                          const __nv_bfloat16 *__restrict__ vc, int pos0, const int32_t *__restrict__ table,
                          int nh, int nkv, float scale_log2, float *__restrict__ out) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int D = VV_WG_D, KT = VV_WG_KT, BM = VV_WG_BM, THREADS = 256;
    constexpr int NBUF = PIPE ? 3 : 2;
    constexpr int CH = D / 8;   /* 16-byte chunks a row */
    constexpr int KS = D / 16;  /* k-steps of S = Q K^T */
    constexpr int PS = KT / 16; /* k-steps of O += P V */
    extern __shared__ __align__(1024) unsigned char vv_wg_smem[];
    /* The swizzle is applied by the tensor core on the absolute shared
     * address: align the base to its 1,024-byte period by hand (the
     * declared alignment of dynamic shared memory is not a promise). */
    uint32_t sbase = (uint32_t)__cvta_generic_to_shared(vv_wg_smem);
    const uint32_t pad = (1024u - (sbase & 1023u)) & 1023u;
    sbase += pad;
    unsigned char *Qs = vv_wg_smem + pad, *Ks = Qs + BM * D * 2, *Vs = Ks + NBUF * VV_WG_TILE;
    const uint32_t sQ = sbase, sK = sQ + BM * D * 2, sV = sK + NBUF * VV_WG_TILE;

    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.x, kh = h / (nh / nkv);
    const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BM;
    const int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D;
    const int kend = pos0 + (q0 + BM < T ? q0 + BM : T);
    const int ntiles = (kend + KT - 1) / KT;
    const __nv_bfloat16 *kb = kc + (int64_t)kh * D, *vb = vc + (int64_t)kh * D;

    /* 16 threads a row (its 256 bytes); a quarter warp writes one half-row,
     * 8 chunks permuted inside 128 bytes: no bank conflict. */
    auto load_tile = [&](int tile, int buf) {
        int key0 = tile * KT;
        int64_t r0 = table ? (int64_t)table[key0 / CHOIR_VV_PAGE] * CHOIR_VV_PAGE + key0 % CHOIR_VV_PAGE : key0;
        unsigned char *ks = Ks + buf * VV_WG_TILE, *vs = Vs + buf * VV_WG_TILE;
#pragma unroll 2
        for (int c = tid; c < KT * CH; c += THREADS) {
            int r = c / CH, ch = c % CH;
            bool in = key0 + r < kend;
            int64_t off = (r0 + (in ? r : 0)) * ldk + ch * 8;
            uint32_t so = (uint32_t)(ch >> 3) * KT * 128u + vv_wg_swz((uint32_t)r, (uint32_t)(ch & 7));
            cp_async16(ks + so, kb + off, in ? 16 : 0);
            cp_async16(vs + so, vb + off, in ? 16 : 0);
        }
        cp_async_commit();
    };
    if (ntiles > 0) load_tile(0, 0);

    /* q times scale log2 e, rounded to bf16, into the swizzled Q tile while
     * the first tile is in flight (rows past the chunk 0). */
    {
        const float *qb = q + (int64_t)h * D;
        for (int c = tid; c < BM * (D / 4); c += THREADS) {
            int r = c / (D / 4), col = (c % (D / 4)) * 4;
            float4 x = q0 + r < T ? *(const float4 *)(qb + (int64_t)(q0 + r) * ldq + col)
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *(uint2 *)(Qs + vv_wg_elem(BM, (uint32_t)r, (uint32_t)col)) =
                make_uint2(pack_bf16(x.x * scale_log2, x.y * scale_log2), pack_bf16(x.z * scale_log2, x.w * scale_log2));
        }
    }

    /* The warpgroup's rows wrow .. wrow + 63; the thread's rows wrow + 16
     * warp + g + 8 r (r = 0, 1), row wrow + 16 warp + g + i sees keys < lim0
     * + i. Rows past the chunk are not masked apart (their q is 0, keys past
     * kend are zeros: finite scores) and not stored. Tiles from wend on are
     * seen by no row of the warpgroup (the tiles it works on are a prefix). */
    const int wrow = q0 + 64 * wg;
    const int lim0 = pos0 + wrow + 16 * warp + g + 1;
    const int wlim = wrow < T ? pos0 + wrow + 1 : 0;
    const int wend = wrow < T ? pos0 + (wrow + 64 < T ? wrow + 64 : T) : 0;
    const uint32_t sQw = sQ + (uint32_t)wg * 64u * 128u; /* the warpgroup's 64 rows inside each half */

    float o[64];
    float ref[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
    uint32_t pa[PS][4]; /* P of a tile as A fragments (PIPE: of the previous tile, in flight) */
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;

    /* S(tile) = Q K^T issued as one commit group (8 k-steps over the head). */
    auto issue_s = [&](float sc[64], uint32_t kt) {
#pragma unroll
        for (int s = 0; s < KS; s++)
            wgmma_m64n128_ss(sc, vv_wg_desc_kmajor(sQw, BM, s), vv_wg_desc_kmajor(kt, KT, s), s > 0);
        wg_commit();
    };
    /* O += P V(tile) issued as one commit group (8 k-steps over the keys). */
    auto issue_pv = [&](uint32_t vt) {
#pragma unroll
        for (int s = 0; s < PS; s++) wgmma_m64n128_rs_tb(o, pa[s], vv_wg_desc_mnmajor(vt, KT, s));
        wg_commit();
    };
    auto fence_o_pa = [&]() {
#pragma unroll
        for (int i = 0; i < 64; i++) wg_reg_fence(o[i]);
#pragma unroll
        for (int s = 0; s < PS; s++)
#pragma unroll
            for (int i = 0; i < 4; i++) wg_reg_fence(pa[s][i]);
    };
    /* The mask (tiles crossing the warpgroup's first row only) and the
     * rows' maxima; moves the references where a maximum ran past them
     * (warp-uniform) and scales the sums. alpha[r]: what O's rows must be
     * scaled by (1 where nothing moved); returns whether any did.
     * sc[4 j + i]: row 16 warp + g + 8 (i >> 1), key key0 + 8 j + 2 t + (i & 1). */
    auto stats = [&](float sc[64], int key0, float alpha[2]) -> bool {
        const bool edge = key0 + KT > wlim;
        float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < KT / 8; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float x = sc[4 * j + i];
                if (edge && key0 + 8 * j + 2 * t + (i & 1) >= lim0 + 8 * (i >> 1)) sc[4 * j + i] = x = -INFINITY;
                tmax[i >> 1] = fmaxf(tmax[i >> 1], x);
            }
        }
        bool grow = false;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
            grow |= tmax[r] > ref[r] + VV_WG_GROW;
        }
        /* Selects, not branches: in the pipelined mode a P V is in flight
         * here, and ptxas serializes wgmma around divergent paths. */
        const bool moved = __any_sync(0xffffffffu, grow);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mnew = moved ? fmaxf(ref[r], tmax[r]) : ref[r];
            float a = ex2_ftz(ref[r] - mnew);
            alpha[r] = mnew == -INFINITY ? 1.0f : a;
            ref[r] = mnew;
            sum[r] *= alpha[r];
        }
        return moved;
    };
    auto rescale_o = [&](const float alpha[2]) {
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                o[4 * j + 2 * r] *= alpha[r];
                o[4 * j + 2 * r + 1] *= alpha[r];
            }
    };

    if constexpr (!PIPE) {
        for (int tile = 0; tile < ntiles; tile++) {
            const int buf = tile & 1;
            if (tile + 1 < ntiles) {
                load_tile(tile + 1, buf ^ 1);
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            fence_proxy_async_smem();
            __syncthreads();
            const int key0 = tile * KT;
            if (key0 < wend) { /* warpgroup-uniform: wgmma is a warpgroup's instruction */
                const uint32_t kt = sK + (uint32_t)buf * VV_WG_TILE, vt = sV + (uint32_t)buf * VV_WG_TILE;
                float sc[64];
                wg_fence();
                issue_s(sc, kt);
                wg_wait<0>();
#pragma unroll
                for (int i = 0; i < 64; i++) wg_reg_fence(sc[i]);
                float alpha[2];
                if (stats(sc, key0, alpha)) rescale_o(alpha);
                /* P = 2^(S - ref) in bf16, straight into A fragments: register
                 * i of k-step s = elements 8 s + 2 i, + 1 (vv_wg_p_elem), i.e.
                 * j = 2 s + (i >> 1), r = i & 1. */
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float nb = ref[r] == -INFINITY ? 0.0f : -ref[r];
#pragma unroll
                    for (int j = 0; j < KT / 8; j++) {
                        float p0 = ex2_ftz(sc[4 * j + 2 * r] + nb), p1 = ex2_ftz(sc[4 * j + 2 * r + 1] + nb);
                        sum[r] += p0 + p1;
                        pa[j >> 1][(j & 1) * 2 + r] = pack_bf16(p0, p1);
                    }
                }
                fence_o_pa();
                wg_fence();
                issue_pv(vt);
                wg_wait<0>();
#pragma unroll
                for (int i = 0; i < 64; i++) wg_reg_fence(o[i]);
            }
            __syncthreads(); /* the buffer is refilled next iteration */
        }
    } else {
        /* pending: pa holds P of the tile whose V is at pv_vt, not yet
         * multiplied. The first tile multiplies a zero P by its own V (0 x
         * finite values), which keeps the issue of P V unconditional: ptxas
         * serializes wgmma issued on divergent paths while others are in
         * flight. */
        bool pending = false;
        uint32_t pv_vt = 0;
#pragma unroll
        for (int s2 = 0; s2 < PS; s2++) pa[s2][0] = pa[s2][1] = pa[s2][2] = pa[s2][3] = 0u;
        for (int tile = 0; tile < ntiles; tile++) {
            const int buf = tile % 3;
            cp_async_wait<0>();
            fence_proxy_async_smem();
            __syncthreads();
            if (tile + 1 < ntiles) load_tile(tile + 1, (tile + 1) % 3);
            const int key0 = tile * KT;
            if (key0 < wend) {
                const uint32_t kt = sK + (uint32_t)buf * VV_WG_TILE, vt = sV + (uint32_t)buf * VV_WG_TILE;
                if (!pending) pv_vt = vt;
                float sc[64];
                fence_o_pa();
                wg_fence();
                issue_s(sc, kt);
                issue_pv(pv_vt);
                wg_wait<1>(); /* S(tile) done; P V of the previous tile may run on */
#pragma unroll
                for (int i = 0; i < 64; i++) wg_reg_fence(sc[i]);
                float alpha[2];
                const bool moved = stats(sc, key0, alpha);
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float nb = ref[r] == -INFINITY ? 0.0f : -ref[r];
#pragma unroll
                    for (int j = 0; j < KT / 8; j++) {
                        sc[4 * j + 2 * r] = ex2_ftz(sc[4 * j + 2 * r] + nb);
                        sc[4 * j + 2 * r + 1] = ex2_ftz(sc[4 * j + 2 * r + 1] + nb);
                        sum[r] += sc[4 * j + 2 * r] + sc[4 * j + 2 * r + 1];
                    }
                }
                wg_wait<0>();
                fence_o_pa();
                if (moved) rescale_o(alpha);
#pragma unroll
                for (int j = 0; j < KT / 8; j++)
#pragma unroll
                    for (int r = 0; r < 2; r++)
                        pa[j >> 1][(j & 1) * 2 + r] = pack_bf16(sc[4 * j + 2 * r], sc[4 * j + 2 * r + 1]);
                pending = true;
                pv_vt = vt;
            } else if (pending) {
                /* The warpgroup's rows see no further tile: its last P V now,
                 * before the buffer is reloaded (two tiles on). */
                fence_o_pa();
                wg_fence();
                issue_pv(pv_vt);
                wg_wait<0>();
                pending = false;
#pragma unroll
                for (int i = 0; i < 64; i++) wg_reg_fence(o[i]);
            }
        }
        if (pending) {
            fence_o_pa();
            wg_fence();
            issue_pv(pv_vt);
            wg_wait<0>();
#pragma unroll
            for (int i = 0; i < 64; i++) wg_reg_fence(o[i]);
        }
    }

    float *ob = out + (int64_t)h * D;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = sum[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int row = wrow + 16 * warp + g + 8 * r;
        if (row >= T) continue;
        float *orow = ob + (int64_t)row * ldq;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            *(float2 *)(orow + 8 * j + 2 * t) = make_float2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
    }
#endif
}

/* The two wgmma forms alone, for a GPU run to tell which one is wrong if the
 * attention fails: one warpgroup, A (64 x 128) and B (128 x 128) K-major,
 * S = A B^T by 8 m64n128k16 (as S = Q K^T); then P = bf16(S / 8) packed
 * from S's accumulators into A register fragments and O = P V by 8
 * register-A, MN-major-B m64n128k16 (as O += P V). S and O are written
 * through the accumulator map, row-major [64][128]. */
__global__ void __launch_bounds__(128)
    k_vv_wg_selftest(const __nv_bfloat16 *__restrict__ a, const __nv_bfloat16 *__restrict__ b,
                     const __nv_bfloat16 *__restrict__ v, float *__restrict__ s_out, float *__restrict__ o_out) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char vv_wg_smem[];
    uint32_t sbase = (uint32_t)__cvta_generic_to_shared(vv_wg_smem);
    const uint32_t pad = (1024u - (sbase & 1023u)) & 1023u;
    sbase += pad;
    unsigned char *As = vv_wg_smem + pad, *Bs = As + 64 * 256, *Vs = Bs + 128 * 256;
    const uint32_t sA = sbase, sB = sA + 64 * 256, sVt = sB + 128 * 256;
    const int tid = threadIdx.x;
    for (int e = tid; e < 64 * 128; e += 128)
        *(__nv_bfloat16 *)(As + vv_wg_elem(64, (uint32_t)(e / 128), (uint32_t)(e % 128))) = a[e];
    for (int e = tid; e < 128 * 128; e += 128) {
        uint32_t o = vv_wg_elem(128, (uint32_t)(e / 128), (uint32_t)(e % 128));
        *(__nv_bfloat16 *)(Bs + o) = b[e];
        *(__nv_bfloat16 *)(Vs + o) = v[e];
    }
    fence_proxy_async_smem();
    __syncthreads();
    float sc[64], o[64];
    wg_fence();
#pragma unroll
    for (int s = 0; s < 8; s++) wgmma_m64n128_ss(sc, vv_wg_desc_kmajor(sA, 64, s), vv_wg_desc_kmajor(sB, 128, s), s > 0);
    wg_commit();
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < 64; i++) {
        wg_reg_fence(sc[i]);
        int r, c;
        vv_wg_acc_rc(tid, i, &r, &c);
        s_out[r * 128 + c] = sc[i];
        o[i] = 0.0f;
    }
    uint32_t pa[8][4];
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int r = 0; r < 2; r++)
            pa[j >> 1][(j & 1) * 2 + r] = pack_bf16(sc[4 * j + 2 * r] * 0.125f, sc[4 * j + 2 * r + 1] * 0.125f);
#pragma unroll
    for (int i = 0; i < 64; i++) wg_reg_fence(o[i]);
    wg_fence();
#pragma unroll
    for (int s = 0; s < 8; s++) wgmma_m64n128_rs_tb(o, pa[s], vv_wg_desc_mnmajor(sVt, 128, s));
    wg_commit();
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < 64; i++) {
        wg_reg_fence(o[i]);
        int r, c;
        vv_wg_acc_rc(tid, i, &r, &c);
        o_out[r * 128 + c] = o[i];
    }
#endif
}

static float wg_bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

int choir_cuda_vv_wg_selftest(choir_cuda *cu, double *err_s, double *err_o, choir_err *err) {
    *err_s = *err_o = INFINITY;
    if (cu->props.cc_major != 9 || cu->props.cc_minor != 0) return 1;
    const int na = 64 * 128, nb = 128 * 128;
    size_t bytes = (size_t)(na + 2 * nb) * 2 + (size_t)(2 * na) * 4;
    unsigned char *scr = (unsigned char *)choir_cuda_scratch(cu, bytes, err);
    if (!scr) return err ? err->code : CHOIR_ENOMEM;
    __nv_bfloat16 *da = (__nv_bfloat16 *)scr, *db = da + na, *dv = db + nb;
    float *ds = (float *)(dv + nb), *dout = ds + na;
    __nv_bfloat16 *h = (__nv_bfloat16 *)malloc((size_t)(na + 2 * nb) * 2);
    float *hs = (float *)malloc((size_t)(2 * na) * 4), *ho = hs + na;
    if (!h || !hs) {
        free(h), free(hs);
        return choir_err_set(err, CHOIR_ENOMEM, "wgmma selftest: host buffers");
    }
    uint64_t st = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < na + 2 * nb; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        h[i] = __float2bfloat16_rn((float)((st >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f);
    }
    int rc = 0;
    constexpr int smem = (64 + 2 * 128) * 256 + 1024;
    cudaError_t ce = cudaMemcpyAsync(da, h, (size_t)(na + 2 * nb) * 2, cudaMemcpyHostToDevice, cu->stream);
    if (ce == cudaSuccess) ce = cudaFuncSetAttribute(k_vv_wg_selftest, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (ce == cudaSuccess) {
        k_vv_wg_selftest<<<1, 128, smem, cu->stream>>>(da, db, dv, ds, dout);
        ce = cudaGetLastError();
    }
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(hs, ds, (size_t)(2 * na) * 4, cudaMemcpyDeviceToHost, cu->stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(cu->stream);
    if (ce != cudaSuccess) {
        rc = choir_cuda_fail(err, ce, "wgmma selftest");
    } else {
        /* S against a double product of the same bf16 values; O against
         * P V with P rounded from the device's own S (the same rounding). */
        const __nv_bfloat16 *ha = h, *hb = h + na, *hv = h + na + nb;
        double e2 = 0, n2 = 0, f2 = 0, m2 = 0;
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < 128; n++) {
                double want = 0, wo = 0;
                for (int k = 0; k < 128; k++)
                    want += (double)__bfloat162float(ha[m * 128 + k]) * __bfloat162float(hb[n * 128 + k]);
                for (int k = 0; k < 128; k++)
                    wo += (double)wg_bf16_round(hs[m * 128 + k] * 0.125f) * __bfloat162float(hv[k * 128 + n]);
                e2 += (hs[m * 128 + n] - want) * (hs[m * 128 + n] - want), n2 += want * want;
                f2 += (ho[m * 128 + n] - wo) * (ho[m * 128 + n] - wo), m2 += wo * wo;
            }
        *err_s = sqrt(e2 / (n2 > 0 ? n2 : 1e-30));
        *err_o = sqrt(f2 / (m2 > 0 ? m2 : 1e-30));
    }
    free(h), free(hs);
    return rc;
}

/* 0: not looked at yet; 1: usable; 2: not on this device or refused. */
static int g_wg_state = 0;

bool choir_cuda_vv_prefill_flash_wg_usable(void) { return __atomic_load_n(&g_wg_state, __ATOMIC_RELAXED) != 2; }

/* quiet: a device the kernel is not built for (the default asks for it on
 * every device), a debug line; else a warning. */
static int wg_decline(const char *why, cudaError_t st, bool quiet = false) {
    if (__atomic_exchange_n(&g_wg_state, 2, __ATOMIC_RELAXED) != 2)
        choir_log(quiet ? CHOIR_LOG_DEBUG : CHOIR_LOG_WARN,
                  "cuda: flash prefill wg (CHOIR_VV_FLASH_WG) not used: %s%s%s; the second kernel runs", why,
                  st != cudaSuccess ? ": " : "", st != cudaSuccess ? cudaGetErrorString(st) : "");
    return 1;
}

template <bool PIPE>
static int wg_launch(choir_cuda *cu, const float *q, int64_t T, const void *k, const void *v, const int32_t *table,
                     int64_t pos0, int n_heads, int n_kv, float *out) {
    constexpr int smem = VV_WG_SMEM(PIPE ? 3 : 2);
    if (cu->props.smem_per_block_optin < smem) return wg_decline("shared memory per block", cudaSuccess);
    cudaError_t st = cudaFuncSetAttribute(k_vv_flash_wg_prefill<PIPE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (st == cudaSuccess)
        st = cudaFuncSetAttribute(k_vv_flash_wg_prefill<PIPE>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  (int)cudaSharedmemCarveoutMaxShared);
    if (st != cudaSuccess) {
        (void)cudaGetLastError();
        return wg_decline("shared memory attribute", st);
    }
    dim3 grid((unsigned)n_heads, (unsigned)((T + VV_WG_BM - 1) / VV_WG_BM));
    k_vv_flash_wg_prefill<PIPE><<<grid, 256, smem, cu->stream>>>(
        q, (int)T, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, (int)pos0, table, n_heads, n_kv,
        1.4426950408889634f / sqrtf((float)VV_WG_D), out);
    /* A launch the runtime refuses (no image for the device, resources) is
     * not sticky: take it back and let the caller run the second kernel. */
    st = cudaGetLastError();
    if (st != cudaSuccess) return wg_decline("launch", st);
    __atomic_store_n(&g_wg_state, 1, __ATOMIC_RELAXED);
    return 0;
}

int choir_cuda_vv_flash_wg_launch(choir_cuda *cu, const float *q, int64_t T, const void *k, const void *v,
                                  const int32_t *table, int64_t pos0, int n_heads, int n_kv, int D, bool pipelined,
                                  float *out, choir_err *err) {
    if (D != VV_WG_D || ((uintptr_t)q & 15)) return 1;
    if (__atomic_load_n(&g_wg_state, __ATOMIC_RELAXED) == 2) return 1;
    /* The object is sm_90a code only (no PTX): compute capability 9.0. */
    if (cu->props.cc_major != 9 || cu->props.cc_minor != 0)
        return wg_decline("needs compute capability 9.0", cudaSuccess, true);
    if ((T + VV_WG_BM - 1) / VV_WG_BM > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: flash prefill of %lld rows", (long long)T);
    return pipelined ? wg_launch<true>(cu, q, T, k, v, table, pos0, n_heads, n_kv, out)
                     : wg_launch<false>(cu, q, T, k, v, table, pos0, n_heads, n_kv, out);
}
