/* Private to src/tensor/cuda: what the implicit-GEMM convolution
 * (cuda_conv.cu) shares with its host emulation: the precision modes, where
 * a block's x comes from, the kernel arguments, the staged-x layout and its
 * words, the pre-activation, the PTX pieces, and the host functions
 * cuda_conv_adain.cu takes from cuda_conv.cu. Built with CHOIR_IG_EMU
 * (tests/cuda/emu/conv_emu.cpp) the PTX pieces are left out: the host
 * emulation gives twins of the same names, so the kernels' index math and
 * fragment layouts run on the host. */
#ifndef CHOIR_CUDA_CONV_IG_H
#define CHOIR_CUDA_CONV_IG_H

#include <stdint.h>

#include <type_traits>

#define IG_BM 128
#define IG_HALO_MAX 64
#define IG_K_MAX 16
#define IG_XROW 48 /* bytes per staged frame: 32 of channels + 16 of padding (no bank conflicts) */
#define IG_COEF 8  /* floats per (item, channel) of the pre-activation */

enum { IG_BF16 = 0, IG_TF32 = 1, IG_TF32X3 = 2 };

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* Where a block's x tile comes from: x itself through registers (PLAIN),
 * x through registers with AdaIN's affine and Snake applied as it is staged
 * (PRO, the fused pre-activation), or the prepass's buffer by cp.async
 * (PRE: snake(adain(x)) already rounded to the product's operands, laid out
 * as the staged rows; see IG_XP_FRAME). */
enum { IG_X_PLAIN = 0, IG_X_PRO = 1, IG_X_PRE = 2 };

/* The prepass's buffer, per item [nchunk][T][IG_XP_FRAME bytes]: one frame
 * of a chunk's channels is the 32 bytes a staged row holds (16 bf16, or 8
 * f32 words, TF32-rounded in the tf32 mode), zeros past the item's valid
 * length and past Cin, so that a block brings a row with two 16-byte
 * cp.async and frames outside [0, T) as zero fill. */
#define IG_XP_FRAME 32

/* The kernel's argument without the epilogue's statistics (the kernels
 * that do not take them keep exactly this argument). */
struct ig_base {
    const float *x;        /* [B, Cin, T] (PLAIN, PRO) */
    const void *xp;        /* [B][nchunk][T][IG_XP_FRAME bytes] (PRE) */
    const void *wp;        /* packed weight [Mpad][nchunk][K][CK] */
    const float *bias;     /* [Cout] or NULL */
    const int32_t *out_lens, *in_lens;
    const float *coef;     /* [B, Cin, IG_COEF] with PRO */
    const float *residual; /* [B, Cout, Tout] or NULL */
    float *y;
    int64_t Cin, T, Cout, Tout;
    int K, dil, pad, nchunk, mtiles;
};

/* The host's arguments, and the argument of the kernels with statistics:
 * AdaIN statistics of y for the operation that reads it next (NULL: none,
 * the kernel without them runs): [B][Cout][IG_STAT_TILES(Tout)][2] doubles,
 * the sum and the sum of squares of the values y holds at frames t <
 * stats_lens[b] (clamped to [0, Tout]; NULL: all Tout) within each
 * IG_STAT_FRAMES-frame tile. */
struct ig_args : ig_base {
    double *stats;
    const int32_t *stats_lens;
};

/* The statistics' frame tile: one slot per (item, channel, 128 frames),
 * whatever the block's shape (the wide shape's 256 frames fill two). */
#define IG_STAT_FRAMES 128
#define IG_STAT_TILES(T) (((T) + IG_STAT_FRAMES - 1) / IG_STAT_FRAMES)

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

#include "choir/cuda_audio.h"
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
/* the same with zero fill: 16 bytes from src where `in`, else 16 zeros (src
 * is not read then but must be a valid address) */
static __device__ __forceinline__ void ig_cp_async16_zfill(uint32_t dst, const void *src, bool in) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(in ? 16 : 0));
}
/* one staged frame (8 words) stored to global memory in two 16-byte stores */
static __device__ __forceinline__ void ig_st_frame(void *dst, const uint32_t *w) {
    uint4 *q = (uint4 *)dst;
    q[0] = make_uint4(w[0], w[1], w[2], w[3]);
    q[1] = make_uint4(w[4], w[5], w[6], w[7]);
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

/* Host side shared by cuda_conv.cu (the convolution) and cuda_conv_adain.cu
 * (the fused AdaIN + Snake operation): the mode of a weight in this context,
 * the packed weight's bytes, the geometry of a convolution into *a with the
 * weight laid out at wp (Tout <= 0 or no items: a->Tout 0, nothing
 * launched), and the convolution's launch with x from XSRC (IG_X_*) as the
 * context's options pick its shape and stages. */
int ig_mode(const choir_cuda *cu, choir_cuda_conv_weight w);
size_t ig_pack_bytes(int mode, int64_t Cin, int64_t Cout, int64_t K);
int ig_setup(choir_cuda *cu, int mode, int64_t B, int64_t Cin, int64_t T,
             choir_cuda_conv_weight weight, int64_t Cout, int64_t K, int padding, int dilation,
             void *wp, ig_args *a, choir_err *err);
int ig_launch(choir_cuda *cu, int mode, int xsrc, const ig_args &a, int64_t B, choir_err *err);
#endif /* CHOIR_IG_EMU */

/* A staged word of v[0..VPW) in the mode's operand format: two bf16
 * (channel pair, the first in the low half), a TF32-rounded f32 or an f32. */
template <int MODE> static __device__ __forceinline__ uint32_t ig_word(const float *v) {
    if constexpr (MODE == IG_BF16) {
        __nv_bfloat162 h = __floats2bfloat162_rn(v[0], v[1]);
        return *(uint32_t *)&h;
    } else if constexpr (MODE == IG_TF32) {
        return to_tf32(v[0]);
    } else {
        return __float_as_uint(v[0]);
    }
}

#endif
