// The device-side names that the GEMV kernels cut out of src/tensor/cuda (cuda_linear_q8.cu's
// q8_gemv and q8_stream, cuda_gemv_mma.cu's mma GEMV) use, as host code over warp_emu.h's
// threads: the vector and half types, the conversions and rounded arithmetic, the loads and
// the lanes' exchanges, and the few choir declarations the kernels name. Shared by q8_emu.cpp
// and gemv_mma_emu.cpp.
#pragma once
#include "warp_emu.h"

struct uint4 { uint32_t x, y, z, w; };
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
struct __half { uint16_t x; };
static dim3v blockDim;
enum { CHOIR_DTYPE_F32 = 1, CHOIR_DTYPE_F16 = 2, CHOIR_DTYPE_BF16 = 3 };
#define CHOIR_CUDA_NORM_LINEAR_MAX 4
struct choir_cuda_rows_out {
    void *dst;
    bool bf16;
    int64_t slot_stride, ld;
    const int32_t *slot, *pos;
};
static inline float h2f(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return s ? -f : f;
    }
    if (e == 31) u = s | 0x7f800000u | (m << 13);
    else u = s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float __bfloat162float(__nv_bfloat16 v) { return bf2f(v.x); }
static inline float __half2float(__half v) { return h2f(v.x); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {f2bf(f)}; }
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    uint8_t b[8];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(x >> (8 * i)), b[4 + i] = (uint8_t)(y >> (8 * i));
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)b[(s >> (4 * i)) & 7] << (8 * i);
    return r;
}
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float rsqrtf(float v) { return 1.0f / sqrtf(v); }
static inline float __ldg(const float *p) { return *p; }
static inline float4 __ldg(const float4 *p) { return *p; }
static inline double __shfl_xor_sync(unsigned, double v, int o) { return xch(v, Ln() ^ o); }
static inline float __shfl_sync(unsigned, float v, int src) { return xch(v, src); }
static inline float cuda_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
