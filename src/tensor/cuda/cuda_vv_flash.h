/* The pieces VibeVoice's flash prefill kernels share (k_vv_flash_prefill and
 * k_vv_flash2_prefill in cuda_vv_flash.cu, k_vv_flash_wg_prefill in
 * cuda_vv_flash_wg.cu): where a block sits and which keys it reads. Device
 * code; included by those .cu files only. */
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "choir/backend_vibevoice.h"

/* A block of the grid (x: the query head, y: the chunk's BM-row groups,
 * the last group first): its head h and key head kh, its first row q0,
 * the keys any of its rows sees (0 .. kend - 1) in ntiles tiles of KT, the
 * row strides of q (ldq) and of the caches (ldk), and the key head's
 * columns of the caches (kb, vb). */
struct vv_fa_block {
    int h, kh, q0, kend, ntiles;
    int64_t ldq, ldk;
    const __nv_bfloat16 *kb, *vb;
};

template <int BM, int KT, int D>
__device__ __forceinline__ vv_fa_block vv_fa_block_of(int T, int pos0, int nh, int nkv, const __nv_bfloat16 *kc,
                                                      const __nv_bfloat16 *vc) {
    vv_fa_block b;
    b.h = blockIdx.x;
    b.kh = b.h / (nh / nkv);
    b.q0 = (int)(gridDim.y - 1 - blockIdx.y) * BM;
    b.ldq = (int64_t)nh * D;
    b.ldk = (int64_t)nkv * D;
    b.kend = pos0 + (b.q0 + BM < T ? b.q0 + BM : T);
    b.ntiles = (b.kend + KT - 1) / KT;
    b.kb = kc + (int64_t)b.kh * D;
    b.vb = vc + (int64_t)b.kh * D;
    return b;
}
