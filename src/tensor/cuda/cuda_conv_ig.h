/* Private to src/tensor/cuda: what the two implicit-GEMM convolution kernels
 * share (cuda_conv.cu: the first, 128 x 128 tiles; cuda_conv2.cu: the
 * second, 128 x 256 tiles and a three-stage weight pipeline): the precision
 * modes, the kernel arguments, the staged-x layout, the pre-activation and
 * the PTX pieces. Built with CHOIR_IG_EMU (tests/cuda/emu/conv_emu.cpp) the
 * PTX pieces are left out: the host emulation gives twins of the same names,
 * so the kernels' index math and fragment layouts run on the host. */
#ifndef CHOIR_CUDA_CONV_IG_H
#define CHOIR_CUDA_CONV_IG_H

#include <stdint.h>

#define IG_BM 128
#define IG_HALO_MAX 64
#define IG_K_MAX 16
#define IG_XROW 48 /* bytes per staged frame: 32 of channels + 16 of padding (no bank conflicts) */
#define IG_COEF 8  /* floats per (item, channel) of the pre-activation */

enum { IG_BF16 = 0, IG_TF32 = 1, IG_TF32X3 = 2 };

struct ig_args {
    const float *x;        /* [B, Cin, T] */
    const void *wp;        /* packed weight [Mpad][nchunk][K][CK] */
    const float *bias;     /* [Cout] or NULL */
    const int32_t *out_lens, *in_lens;
    const float *coef;     /* [B, Cin, IG_COEF] with PRO */
    const float *residual; /* [B, Cout, Tout] or NULL */
    float *y;
    int64_t Cin, T, Cout, Tout;
    int K, dil, pad, nchunk, mtiles;
};

/* AdaIN's affine as choir_cuda_adain computes it, then Snake as
 * choir_cuda_snake: cf = {mean, a, bb, gamma, beta, alpha, 1 / alpha}. */
static __device__ __forceinline__ float adain_snake(float x, const float *cf) {
    float v = cf[3] * ((x - cf[0]) * cf[1] + cf[2]) + cf[4];
    float s = sinf(cf[5] * v);
    return v + cf[6] * (s * s);
}

/* The same with sin taken by the SFU after a reduction to [-pi, pi]
 * (__sinf's absolute error there is ~4e-7, against the value's own f32
 * rounding of ~6e-8 and the operand rounding that follows in the bf16 and
 * TF32 modes, 2^-9 and 2^-11 relative): some 20 instructions a value fewer
 * than sinf. Not for tf32x3 (about f32 accuracy). 2 pi = TWO_PI_HI +
 * TWO_PI_LO, TWO_PI_HI the float nearest it. */
static __device__ __forceinline__ float adain_snake_fast(float x, const float *cf) {
    float v = cf[3] * ((x - cf[0]) * cf[1] + cf[2]) + cf[4];
    float u = cf[5] * v;
    float k = rintf(u * 0.159154943091895336f);
    float r = fmaf(-k, 6.28318548202514648f, u);
    r = fmaf(-k, -1.74845553146951720e-07f, r);
    float s = __sinf(r);
    return v + cf[6] * (s * s);
}

/* Thread tid's staged word s: frame row r, word w (of 8 per row). A warp
 * covers 8 rows x 4 words: global reads of 32 contiguous bytes per channel,
 * shared stores without bank conflicts (row stride 12 words). With an even
 * number of warps a thread's w is the same for every s. */
template <int THREADS>
static __device__ __forceinline__ void ig_slot(int s, int tid, int &r, int &w) {
    int g = s * (THREADS / 32) + (tid >> 5), lane = tid & 31;
    w = (g & 1) * 4 + (lane >> 3);
    r = (g >> 1) * 8 + (lane & 7);
}

#ifndef CHOIR_IG_EMU
#include <cuda_bf16.h>

#include "tensor/cuda/cuda_internal.h"

static __device__ __forceinline__ uint32_t to_tf32(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}

static __device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1,
                                               uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

static __device__ __forceinline__ void ig_cp_async16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
}
static __device__ __forceinline__ void ig_cp_commit() {
    asm volatile("cp.async.commit_group;" ::);
}
/* wait until at most N of this thread's committed groups are in flight */
template <int N> static __device__ __forceinline__ void ig_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
/* the line holding p brought into L2 (the epilogue's residual) */
static __device__ __forceinline__ void ig_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

template <int MODE>
static __device__ __forceinline__ void mma(float *c, const uint32_t *a, const uint32_t *b) {
    if constexpr (MODE == IG_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* cuda_conv2.cu: whether the second kernel takes this convolution (the
 * context's switch on, its shared memory within the device's, 32-bit offsets
 * inside a piece), and its launch over the weight packed as the first
 * kernel's. */
bool ig2_applies(const choir_cuda *cu, int mode, int64_t Cin, int64_t T, int64_t Cout,
                 int64_t Tout, int K, int dil);
int ig2_launch(choir_cuda *cu, int mode, const ig_args &a, int64_t B, choir_err *err);
#endif /* CHOIR_IG_EMU */

#endif
