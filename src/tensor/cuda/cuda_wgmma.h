/* Private to src/tensor/cuda: the index math and the instructions of
 * Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) that the flash prefill's
 * third kernel uses (cuda_vv_flash_wg.cu). The index math is plain inline
 * code, host and device (VV_WG_HD), so tests/cuda/emu/wgmma_layout_test.cpp
 * checks it on the host against the PTX ISA's documented layouts (section
 * "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": register
 * fragments, shared memory matrix layout, matrix descriptor format); the
 * instructions are device only.
 *
 * Shared memory tiles. A tile of R rows of 128 bf16 (a K, V or Q tile:
 * row = key or query, column = head dimension) is stored as two "halves",
 * columns 0-63 and 64-127, each R rows of 128 bytes, half 1 right after
 * half 0 (R x 128 bytes further). Inside a half, row r's 16-byte chunk c
 * (columns 8c .. 8c + 7 of the half) lies at byte r 128 + 16 (c ^ (r & 7)):
 * the 128-byte swizzle (CuTe's Swizzle<3,4,3> on byte addresses: address
 * bits 4-6 XOR bits 7-9), which the tensor core undoes on the absolute
 * shared address, so each half starts on a 1,024-byte boundary (the
 * pattern's period: 8 rows x 128 bytes). The same bytes serve as
 *  - a K-major operand (Q as A and K as B of S = Q K^T: the reduction
 *    index, the head dimension, runs along the row): canonical layout
 *    ((8,m),(8,2)):((64,SBO),(1,8)) in bf16 elements with SBO = 1,024 bytes
 *    (8 rows to the next 8), LBO unused (1); one k16 step spans 32 bytes of
 *    the 128-byte row, so k-step s starts at the half of s / 4 plus
 *    32 (s % 4) bytes (the tensor core applies the swizzle after adding);
 *  - an MN-major operand (V as B of O = P V, with trans-b = 1: the
 *    reduction index, the key, runs down the rows, N = head dimension
 *    along them): canonical layout ((8,8,m),(8,k)):((1,8,LBO),(64,SBO)) with
 *    LBO = R x 128 bytes (the next 64 columns: the other half) and SBO =
 *    1,024 bytes (the next 8 keys); k-step s (keys 16 s .. 16 s + 15)
 *    starts 16 s rows in, 2,048 s bytes, still on the 1,024-byte period.
 * Descriptor (64 bits): start address >> 4 in bits 0-13, LBO >> 4 in 16-29,
 * SBO >> 4 in 32-45, base offset 0 in 49-51 (every start above is 1,024-byte
 * periodic apart from the in-row k offset, which the ISA's users add to the
 * start address with base offset 0), swizzle mode 1 (128 bytes) in 62-63.
 *
 * Register fragments (m64nNk16, per warpgroup of 128 threads; warp w = tid /
 * 32 owns rows 16 w .. 16 w + 15, lane l: g = l / 4, t = l % 4):
 *  - accumulator D (f32, N / 2 registers): d[4 j + i] is row 16 w + g + 8
 *    (i / 2), column 8 j + 2 t + (i % 2), j = 0 .. N / 8 - 1: mma.sync's
 *    m16n8 C fragment, one per 8 columns;
 *  - A in registers (bf16, 4 registers of 2): register i holds row 16 w + g
 *    + 8 (i % 2), columns 2 t + 8 (i / 2) and + 1: mma.sync's m16n8k16 A.
 * So S's accumulator becomes P's A fragments without moving data between
 * threads: for keys 16 s .. 16 s + 15, register i = pack(d[8 s + 2 i],
 * d[8 s + 2 i + 1]) (vv_wg_p_reg). */
#ifndef CHOIR_CUDA_WGMMA_H
#define CHOIR_CUDA_WGMMA_H

#include <stdint.h>

#ifdef __CUDACC__
#define VV_WG_HD __host__ __device__ __forceinline__
#else
#define VV_WG_HD static inline
#endif

/* Byte offset of (row, 16-byte chunk 0-7) inside a 128-byte-swizzled half. */
VV_WG_HD uint32_t vv_wg_swz(uint32_t row, uint32_t chunk) { return row * 128u + ((chunk ^ (row & 7u)) << 4); }

/* Byte offset of element (row, col) of a tile of `rows` rows of 128 bf16
 * stored as two swizzled halves (the layout above). */
VV_WG_HD uint32_t vv_wg_elem(uint32_t rows, uint32_t row, uint32_t col) {
    return (col >> 6) * rows * 128u + vv_wg_swz(row, (col & 63u) >> 3) + (col & 7u) * 2u;
}

#define VV_WG_SWIZZLE_128B 1ull
/* Matrix descriptor: byte address in shared memory, leading and stride
 * byte offsets (multiples of 16), 128-byte swizzle, base offset 0. */
VV_WG_HD uint64_t vv_wg_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | (uint64_t)((lbo & 0x3FFFFu) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFFu) >> 4) << 32 | VV_WG_SWIZZLE_128B << 62;
}

/* The descriptors of k-step s: Q or K (K-major) of a tile of `rows` rows
 * starting at byte `base` (1,024-aligned), and V (MN-major). */
VV_WG_HD uint64_t vv_wg_desc_kmajor(uint32_t base, uint32_t rows, int s) {
    return vv_wg_desc(base + (uint32_t)(s >> 2) * rows * 128u + (uint32_t)(s & 3) * 32u, 16u, 1024u);
}
VV_WG_HD uint64_t vv_wg_desc_mnmajor(uint32_t base, uint32_t rows, int s) {
    return vv_wg_desc(base + (uint32_t)s * 2048u, rows * 128u, 1024u);
}

/* Accumulator element i of thread tid (0-127) of a warpgroup: row, column. */
VV_WG_HD void vv_wg_acc_rc(int tid, int i, int *row, int *col) {
    int w = tid >> 5, l = tid & 31;
    *row = 16 * w + (l >> 2) + 8 * ((i >> 1) & 1);
    *col = 8 * (i >> 2) + 2 * (l & 3) + (i & 1);
}
/* A register fragment: register i, element e (0 low, 1 high) of thread tid. */
VV_WG_HD void vv_wg_a_rc(int tid, int i, int e, int *row, int *col) {
    int w = tid >> 5, l = tid & 31;
    *row = 16 * w + (l >> 2) + 8 * (i & 1);
    *col = 2 * (l & 3) + 8 * (i >> 1) + e;
}
/* P's A register i for k-step s comes from accumulator elements
 * vv_wg_p_elem(s, i) (low half) and + 1 (high half). */
VV_WG_HD int vv_wg_p_elem(int s, int i) { return 8 * s + 2 * i; }

#ifdef __CUDACC__
/* wgmma.fence: orders this thread's earlier register and shared-memory
 * accesses before the warpgroup's next wgmma.mma_async (needed before the
 * first one and whenever the accumulators or A registers were touched). */
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Generic-proxy writes to shared memory (st.shared, cp.async) made visible
 * to the async proxy that wgmma reads through; then a barrier. */
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* Keeps the compiler from moving reads or writes of an accumulator across
 * a wgmma issue or wait (the register is "written" here). */
__device__ __forceinline__ void wg_reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void wg_reg_fence(uint32_t &r) { asm volatile("" : "+r"(r)::"memory"); }

#define VV_WG_D64 "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define VV_WG_OUT64(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

/* d (+)= A B, m64n128k16, bf16 in, f32 accumulators; A and B K-major in
 * shared memory (descriptors); scale_d 0 overwrites d. */
__device__ __forceinline__ void wgmma_m64n128_ss(float d[64], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " VV_WG_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : VV_WG_OUT64(d)
        : "l"(da), "l"(db), "r"(scale_d));
}
/* d += A B, m64n128k16: A (bf16) in registers, B in shared memory MN-major
 * (trans-b 1: V's rows are the reduction index). */
__device__ __forceinline__ void wgmma_m64n128_rs_tb(float d[64], const uint32_t a[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " VV_WG_D64
        ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : VV_WG_OUT64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
#endif

#endif
