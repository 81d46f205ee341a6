// Host emulation of the CUDA pieces the tensor-core attention kernels use
// (src/tensor/cuda/cuda_mma.h and the warp collectives), shared by flash_emu.cpp and
// vv_flash_emu.cpp: each CUDA thread is a host thread, one block at a time; shfl_xor, any,
// ldmatrix (plain and .trans) and mma.m16n8k16 bf16 -> f32 go through a per-warp barrier and the
// PTX fragment layouts; cp.async is a plain copy; ex2.approx is exp2f. It checks fragment
// layouts, masking and the online softmax, not timing, the hardware's rounding or memory
// ordering. Include it, then the kernel source cut out of its .cu (the asm helpers left out).
#ifndef CHOIR_WARP_EMU_H
#define CHOIR_WARP_EMU_H
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct __nv_bfloat16 { uint16_t x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0; u += 0x7fff + ((u >> 16) & 1); return (uint16_t)(u >> 16); }
static inline float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {{f2bf(lo)}, {f2bf(hi)}}; }
struct dim3v { int x, y, z; };
thread_local dim3v threadIdx, blockIdx;
static dim3v gridDim;
struct float2 { float x, y; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct uint2 { uint32_t x, y; };
static inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
static int g_threads;
static std::barrier<> *g_block_bar;
static std::barrier<> *g_warp_bar[16];
static uint64_t g_slot[16][32][8];
static inline int W() { return threadIdx.x >> 5; }
static inline int Ln() { return threadIdx.x & 31; }
static inline void wsync() { g_warp_bar[W()]->arrive_and_wait(); }
static inline void __syncthreads() { g_block_bar->arrive_and_wait(); }
template <class T> static T xch(T v, int src) {
    uint64_t u = 0; memcpy(&u, &v, sizeof(T)); g_slot[W()][Ln()][0] = u; wsync();
    uint64_t r = g_slot[W()][src][0]; wsync(); T o; memcpy(&o, &r, sizeof(T)); return o;
}
static inline float __shfl_xor_sync(unsigned, float v, int o) { return xch(v, Ln() ^ o); }
static inline bool __any_sync(unsigned, bool p) {
    g_slot[W()][Ln()][0] = p; wsync(); bool r = false; for (int l = 0; l < 32; l++) r |= g_slot[W()][l][0] != 0; wsync(); return r;
}
static inline float ex2_ftz(float x) { return exp2f(x); }
static inline void cp_async16(void *s, const void *g, int n) { if (n == 16) memcpy(s, g, 16); else memset(s, 0, 16); }
static inline void cp_async_commit() {}
template <int N> static inline void cp_async_wait() {}
static void ldm(uint32_t r[4], const void *smem, bool trans) {
    g_slot[W()][Ln()][1] = (uint64_t)(uintptr_t)smem; wsync();
    int l = Ln();
    for (int i = 0; i < 4; i++) {
        uint16_t e0, e1;
        if (!trans) {
            const uint16_t *row = (const uint16_t *)(uintptr_t)g_slot[W()][i * 8 + l / 4][1];
            e0 = row[2 * (l % 4)], e1 = row[2 * (l % 4) + 1];
        } else {
            const uint16_t *r0 = (const uint16_t *)(uintptr_t)g_slot[W()][i * 8 + 2 * (l % 4)][1];
            const uint16_t *r1 = (const uint16_t *)(uintptr_t)g_slot[W()][i * 8 + 2 * (l % 4) + 1][1];
            e0 = r0[l / 4], e1 = r1[l / 4];
        }
        r[i] = (uint32_t)e0 | ((uint32_t)e1 << 16);
    }
    wsync();
}
static inline void ldmatrix_x4(uint32_t r[4], const void *s) { ldm(r, s, false); }
static inline void ldmatrix_x4_trans(uint32_t r[4], const void *s) { ldm(r, s, true); }
static inline void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    uint64_t *me = g_slot[W()][Ln()];
    for (int i = 0; i < 4; i++) me[2 + i] = a[i];
    me[6] = b0, me[7] = b1;
    wsync();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        uint64_t *s = g_slot[W()][l];
        auto lo = [](uint64_t v) { return bf2f((uint16_t)(v & 0xffff)); };
        auto hi = [](uint64_t v) { return bf2f((uint16_t)((v >> 16) & 0xffff)); };
        A[g][2 * t] = lo(s[2]), A[g][2 * t + 1] = hi(s[2]);
        A[g + 8][2 * t] = lo(s[3]), A[g + 8][2 * t + 1] = hi(s[3]);
        A[g][2 * t + 8] = lo(s[4]), A[g][2 * t + 9] = hi(s[4]);
        A[g + 8][2 * t + 8] = lo(s[5]), A[g + 8][2 * t + 9] = hi(s[5]);
        B[2 * t][g] = lo(s[6]), B[2 * t + 1][g] = hi(s[6]);
        B[2 * t + 8][g] = lo(s[7]), B[2 * t + 9][g] = hi(s[7]);
    }
    wsync();
    int g = Ln() / 4, t = Ln() % 4;
    int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; i++) {
        float acc = c[i];
        for (int k = 0; k < 16; k++) acc += A[rr[i]][k] * B[k][cc[i]];
        c[i] = acc;
    }
}
static inline uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return (uint32_t)v.x.x | ((uint32_t)v.y.x << 16);
}

/* Programmatic dependent launch (cuda_internal.h's helpers): the emulation
 * runs one launch to its end before the next, so there is nothing to wait
 * for or to trigger. */
#define CHOIR_CUDA_PDL_HELPERS
static inline void cuda_pdl_wait() {}
static inline void cuda_pdl_trigger() {}
static inline void cuda_pdl_begin() {}
static inline void cuda_l2_prefetch(const void *, uint32_t) {}

template <class F> static void launch(dim3v grid, int threads, F f) {
    g_threads = threads;
    gridDim = grid;
    for (int z = 0; z < grid.z; z++)
        for (int y = 0; y < grid.y; y++)
            for (int x = 0; x < grid.x; x++) {
                std::barrier<> bb(threads);
                g_block_bar = &bb;
                for (int w = 0; w < threads / 32; w++) g_warp_bar[w] = new std::barrier<>(32);
                std::vector<std::thread> th;
                for (int i = 0; i < threads; i++)
                    th.emplace_back([=] { threadIdx = {i, 0, 0}; blockIdx = {x, y, z}; f(); });
                for (auto &t : th) t.join();
                for (int w = 0; w < threads / 32; w++) delete g_warp_bar[w];
            }
}

#endif
