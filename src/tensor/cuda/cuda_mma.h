/* Private to src/tensor/cuda: the warp-level tensor-core pieces the flash
 * attention kernels share (cuda_flash.cu for Whisper's bf16 rows,
 * cuda_vv_flash.cu for VibeVoice's prefill): bf16 packing, mma.sync
 * m16n8k16 bf16 -> f32, ldmatrix (plain and transposed), cp.async and a
 * one-instruction exp2. tests/cuda/emu/warp_emu.h has host twins of each
 * (same names), for the host emulation of the kernels. */
#ifndef CHOIR_CUDA_MMA_H
#define CHOIR_CUDA_MMA_H

#include <cuda_bf16.h>
#include <stdint.h>

/* Two floats rounded to bf16, lo in the low half (an mma fragment register). */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* c += a b over a 16 x 16 bf16 A fragment and a 16 x 8 B fragment (b0: k 0-7
 * of the lane's column, b1: k 8-15), f32 accumulation. */
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8 x 8 b16 matrices from shared memory: lane l gives the address of
 * row (l & 7) of matrix (l >> 3). */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *smem) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *smem) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* 16 bytes global -> shared; src_bytes 0 fills zeros (rows past the end). */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* 2^x in one MUFU instruction, subnormal results flushed to zero. */
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

#endif
