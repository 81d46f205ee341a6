/* Private to src/tensor/cuda: the context struct and error helpers. */
#ifndef CHOIR_CUDA_INTERNAL_H
#define CHOIR_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "choir/cuda.h"
#include "choir/cuda_audio.h"
#include "choir/error.h"

struct choir_cuda {
    choir_cuda_props props;
    cudaStream_t stream;
    cublasHandle_t blas;
    /* Device bytes held through this context; updated with atomics because
     * buffers may be freed from another thread than the one computing. */
    int64_t mem_current, mem_peak, budget;
    /* Pinned host bytes (choir_cuda_host_alloc), counted apart. */
    int64_t host_current, host_peak;
    /* Scratch grown on demand for converted activations and dequantized
     * weights; reused across calls on the stream, so it needs no sync. */
    choir_cuda_buf scratch;
    /* Live CUDA graphs: they hold the scratch's address, so it must not move. */
    int live_graphs;
    /* cuBLAS workspace, set before the first capture so that a captured
     * product never asks the runtime for memory. */
    choir_cuda_buf blas_workspace;
    /* int [4096]: the split-keys attention's chunk counters per (row, head),
     * zero between calls (cuda_kernels.cu). */
    choir_cuda_buf attn_done;
    /* cublasLt handle (cublasLtHandle_t) for products with fused epilogues,
     * made on first use (cuda_bf16.cu); it shares blas_workspace. */
    void *lt;
    /* f32 products on TF32 tensor cores (choir_cuda_set_tf32): cuBLAS's math
     * mode, and the implicit convolutions' precision (cuda_conv.cu). */
    bool tf32;
    /* choir_cuda_conv_path: which conv1d path choir_cuda_conv1d_batched takes */
    int conv_path;
    /* choir_cuda_conv_option bits of the implicit convolutions
     * (choir_cuda_conv_set_options; PREPASS unless CHOIR_CONV_PREPASS=0,
     * CHOIR_CONV_WIDE, CHOIR_CONV_FAST_SIN at init), and the most scratch bytes the prepass's
     * buffer takes at once (CHOIR_CONV_PREPASS_MB at init) */
    unsigned conv_opts;
    int64_t conv_prepass_bytes;
    /* the BiLSTM's recurrence as one cooperative kernel (cuda_audio.cu):
     * choir_cuda_lstm_set_persist, on unless CHOIR_KOKORO_LSTM_PERSIST=0 at init;
     * warned: the one log line when it cannot run here */
    bool lstm_persist, lstm_persist_warned;
};

/* GELU (erf form) as choir_gelu_erf computes it, for every kernel that
 * applies it (the activation kernel and the product epilogues). */
__device__ __forceinline__ float cuda_gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

/* One row's rotary angles at position p into shared memory (cos in cs,
 * sin in sn, `half` pairs; the block's threads striding), the floats
 * k_rope computes per pair: k_rope_rows (cuda_ops.cu) and the prefill's
 * k_qkv_split_rope (cuda_prefill_rows.cu). The caller syncs around it. */
__device__ __forceinline__ void cuda_rope_angles(float *cs, float *sn, int64_t half, int32_t p, float theta) {
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
        float inv_freq = (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)(2 * half)));
        float ang = (float)p * inv_freq;
        cs[i] = cosf(ang);
        sn[i] = sinf(ang);
    }
}

/* SwiGLU of eight bf16 values: bf16(SiLU(g) u), each widened and computed in
 * f32 (k_swiglu's arithmetic); the prefill's gated MLPs (cuda_ops.cu,
 * cuda_prefill_rows.cu). */
__device__ __forceinline__ uint4 cuda_swiglu8(uint4 a, uint4 b) {
    __nv_bfloat162 *pa = (__nv_bfloat162 *)&a;
    const __nv_bfloat162 *pb = (const __nv_bfloat162 *)&b;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 x = __bfloat1622float2(pa[j]), y = __bfloat1622float2(pb[j]);
        x.x = x.x / (1.0f + expf(-x.x));
        x.y = x.y / (1.0f + expf(-x.y));
        pa[j] = __floats2bfloat162_rn(x.x * y.x, x.y * y.y);
    }
    return a;
}

/* --- the GEMVs' epilogue (cuda_linear.cu's dense GEMVs and the 8-bit one of
 * cuda_linear_q8.cu; tests/cuda/emu/run_q8_emu.sh cuts this block out) --- */
/* What a GEMV does with each product (bias added): write it, add it into
 * y, or write its GELU. */
#define GEMV_WRITE 0
#define GEMV_ACCUMULATE 1
#define GEMV_GELU 2

/* Programmatic dependent launch (choir_cuda_pdl; sm_90's griddepcontrol,
 * both no-ops before it). A kernel launched with the programmatic
 * serialization attribute (choir_cuda_launch_pdl) may start before the
 * kernel ahead of it in the stream has finished: it must call
 * cuda_pdl_wait() before it reads anything that kernel writes and before
 * it writes anything that kernel reads (waiting for that kernel's whole
 * grid to finish, its writes visible). cuda_pdl_trigger() lets such a
 * successor be scheduled once every block of the calling grid has called
 * it (or ended); without a successor so launched it does nothing. */
#ifndef CHOIR_CUDA_PDL_HELPERS /* (the host emulation's warp_emu.h has its own) */
#define CHOIR_CUDA_PDL_HELPERS
__device__ __forceinline__ void cuda_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void cuda_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/* Both, for a kernel with nothing to do before its wait. */
__device__ __forceinline__ void cuda_pdl_begin() {
    cuda_pdl_trigger();
    cuda_pdl_wait();
}
/* Asks L2 for `bytes` (a multiple of 16, from a 16-byte aligned address)
 * without waiting: sm_90's bulk prefetch, nothing before it. */
__device__ __forceinline__ void cuda_l2_prefetch(const void *p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}
#endif

/* The value a GEMV writes for product s of output (m, r): bias added, then
 * written, added into y or passed through GELU. */
__device__ __forceinline__ float gemv_out(float s, const float *__restrict__ bias, int64_t r,
                                          float *yo, int epilogue) {
    float v = s + (bias ? bias[r] : 0.0f);
    return epilogue == GEMV_ACCUMULATE ? *yo + v : epilogue == GEMV_GELU ? cuda_gelu_erf(v) : v;
}

/* Output (m, r) of a stacked GEMV: written to *yo by the epilogue and, when
 * st has a destination, also stored as row st->pos[m] of slot st->slot[m]
 * (bf16 or f32: a layer's keys or values going into their cache). */
__device__ __forceinline__ void gemv_out_store(float s, const float *__restrict__ bias, int64_t r,
                                               float *yo, int epilogue, const choir_cuda_rows_out *st,
                                               int m) {
    float v = gemv_out(s, bias, r, yo, epilogue);
    *yo = v;
    if (st->dst) {
        int64_t at = (int64_t)(st->slot ? st->slot[m] : m) * st->slot_stride + (int64_t)st->pos[m] * st->ld + r;
        if (st->bf16)
            ((__nv_bfloat16 *)st->dst)[at] = __float2bfloat16_rn(v);
        else
            ((float *)st->dst)[at] = v;
    }
}
/* --- end of the GEMVs' epilogue --- */

/* The sum of v over the block; every thread gets it. `red` holds 32 values
 * of shared memory, reused by consecutive calls. float and double (the RMS
 * norm's sums of squares) take the same steps. */
template <typename T> __device__ __forceinline__ T cuda_block_reduce(T v, T *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* red may still be read from a previous reduction */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    T r = lane < nwarps ? red[lane] : T(0);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    return r;
}
__device__ __forceinline__ float cuda_block_sum(float v, float *red) { return cuda_block_reduce(v, red); }
__device__ __forceinline__ double cuda_block_sum_d(double v, double *red) { return cuda_block_reduce(v, red); }

/* The RMS norm of row xr [dim] into out [dim] (global or shared memory):
 * xr / sqrt(mean(xr^2) + eps) * gamma (NULL: 1), the sum of squares in
 * double as the CPU's. The same floats in every kernel that normalises this
 * way for the same block size (choir_cuda_rms_norm's, and
 * choir_cuda_norm_linear's with rms, for rows longer than
 * CUDA_RMS_WARP_MAX). out may be xr. */
__device__ __forceinline__ void cuda_rms_row(const float *xr, int64_t dim, float eps, double *red,
                                             const float *__restrict__ gamma, float *out) {
    double ss = 0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xr[i] * xr[i];
    float inv = (float)(1.0 / sqrt(cuda_block_sum_d(ss, red) / (double)dim + (double)eps));
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        out[i] = __fmul_rn(__fmul_rn(xr[i], inv), gamma ? gamma[i] : 1.0f);
}

/* The same norm of a row of at most CUDA_RMS_WARP_MAX values by one warp
 * (its lanes stride the row; the sum of squares in double, then the warp's
 * butterfly): for rows too short to keep a block busy (VibeVoice's encoder
 * rows of 32 to 2048 channels, millions of them a minute of audio). The
 * same floats in every kernel that normalises such rows this way. */
#define CUDA_RMS_WARP_MAX 2048
__device__ __forceinline__ void cuda_rms_row_warp(const float *xr, int64_t dim, float eps,
                                                  const float *__restrict__ gamma, float *out) {
    const int lane = threadIdx.x & 31;
    double ss = 0;
    for (int64_t i = lane; i < dim; i += 32) ss += (double)xr[i] * xr[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int64_t i = lane; i < dim; i += 32)
        out[i] = __fmul_rn(__fmul_rn(xr[i], inv), gamma ? gamma[i] : 1.0f);
}

/* The layer norm of row xr [dim] into out [dim] (global or shared memory):
 * two passes for the variance (mean first, as the reference, for rows with a
 * large mean), the block's threads striding the row. A row of at most
 * CUDA_LN_CACHE values a thread is read once, with its gamma and beta, and
 * held in registers between the passes (one trip to memory instead of
 * three); a longer one is re-read. The same floats either way, and in every
 * kernel that normalises this way for the same block size (the layer-norm
 * kernel, and choir_cuda_norm_linear's products that normalise their input
 * themselves): explicit roundings, no contraction. out may be xr (in place:
 * each value is read before it is written). */
#define CUDA_LN_CACHE 5
__device__ __forceinline__ float cuda_ln_out(float x, float mean, float inv, float g, float b,
                                             bool has_g, bool has_b) {
    float o = __fmul_rn(__fsub_rn(x, mean), inv);
    if (has_g) o = __fmul_rn(o, g);
    if (has_b) o = __fadd_rn(o, b);
    return o;
}
__device__ __forceinline__ void cuda_ln_row(const float *xr, int64_t dim, float eps,
                                            float *red, const float *__restrict__ gamma,
                                            const float *__restrict__ beta, float *out) {
    const int64_t t = threadIdx.x, bd = blockDim.x;
    float s = 0.0f, v = 0.0f;
    if (dim <= CUDA_LN_CACHE * bd) {
        float xv[CUDA_LN_CACHE], gv[CUDA_LN_CACHE], bv[CUDA_LN_CACHE];
#pragma unroll
        for (int j = 0; j < CUDA_LN_CACHE; j++) {
            int64_t i = t + j * bd;
            bool in = i < dim;
            xv[j] = in ? xr[i] : 0.0f;
            gv[j] = in && gamma ? gamma[i] : 0.0f;
            bv[j] = in && beta ? beta[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < CUDA_LN_CACHE; j++)
            if (t + j * bd < dim) s += xv[j];
        float mean = cuda_block_sum(s, red) / (float)dim;
#pragma unroll
        for (int j = 0; j < CUDA_LN_CACHE; j++)
            if (t + j * bd < dim) {
                float d = __fsub_rn(xv[j], mean);
                v = __fmaf_rn(d, d, v);
            }
        float inv = rsqrtf(cuda_block_sum(v, red) / (float)dim + eps);
#pragma unroll
        for (int j = 0; j < CUDA_LN_CACHE; j++)
            if (t + j * bd < dim)
                out[t + j * bd] = cuda_ln_out(xv[j], mean, inv, gv[j], bv[j], gamma, beta);
        return;
    }
    for (int64_t i = t; i < dim; i += bd) s += xr[i];
    float mean = cuda_block_sum(s, red) / (float)dim;
    for (int64_t i = t; i < dim; i += bd) {
        float d = __fsub_rn(xr[i], mean);
        v = __fmaf_rn(d, d, v);
    }
    float inv = rsqrtf(cuda_block_sum(v, red) / (float)dim + eps);
    for (int64_t i = t; i < dim; i += bd)
        out[i] = cuda_ln_out(xr[i], mean, inv, gamma ? gamma[i] : 0.0f, beta ? beta[i] : 0.0f,
                             gamma, beta);
}

/* Fills err from a CUDA runtime status and returns the choir code. */
int choir_cuda_fail(choir_err *err, cudaError_t st, const char *what);
int choir_cuda_blas_fail(choir_err *err, cublasStatus_t st, const char *what);
/* y = x W^T (+ beta y) + bias through cublasLt over bf16 rows x and a bf16
 * weight, the bias (of y's type yt) in the epilogue (with GELU's tanh form
 * when gelu). Any status but success leaves the caller to its plain path
 * (cuda_bf16.cu). */
cublasStatus_t choir_cuda_lt_linear(choir_cuda *cu, const uint16_t *x, int64_t M, const choir_cuda_weight *W,
                                    const void *bias, void *y, cudaDataType_t yt, float beta, bool gelu);
/* y[i] = bf16(SiLU(gate[i]) up[i]) for i < n: choir_cuda_swiglu's floats,
 * rounded to nearest even as they are written (cuda_ops.cu); y must not
 * alias gate or up. */
int choir_cuda_swiglu_bf16(choir_cuda *cu, const float *gate, const float *up, uint16_t *y, int64_t n,
                           choir_err *err);
/* gate[i] = bf16(SiLU(gate[i]) up[i]) over bf16 rows, in place, the f32
 * arithmetic of choir_cuda_swiglu on the widened values (cuda_ops.cu). */
int choir_cuda_swiglu_bf16_rows(choir_cuda *cu, uint16_t *gate, const uint16_t *up, int64_t n, choir_err *err);
/* Row-major y [M, N] = x W^T (+ beta y) over bf16 rows x [M, K] and a bf16
 * weight W [N, K], f32 sums, y of type yt (CUDA_R_32F or CUDA_R_16BF):
 * cublasGemmEx as choir_cuda_linear's cuBLAS path calls it (cuda_linear.cu). */
int choir_cuda_gemm_xwt(choir_cuda *cu, const void *x, const void *W, int64_t M, int64_t N, int64_t K, void *y,
                        cudaDataType_t yt, float beta, choir_err *err);
/* choir_cuda_pdl's mode for launches on cu's device: 0 below compute
 * capability 9 (cuda_linear.cu). */
int choir_cuda_pdl_mode(const choir_cuda *cu);
/* Launches kernel k on cu's stream, with `pdl` as one that may start
 * before the kernel ahead of it ends (the kernel calls cuda_pdl_wait; see
 * there); the launch's error as cudaGetLastError reports it. */
template <typename... KArgs, typename... Args>
static inline void choir_cuda_launch_pdl(bool pdl, void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                         cudaStream_t stream, Args... args) {
    if (!pdl) {
        k<<<grid, block, smem, stream>>>(args...);
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
}
/* Checks the last launch; 0 or CHOIR_EINTERNAL naming `what`. */
int choir_cuda_check_launch(choir_err *err, const char *what);
/* Ensures the scratch holds at least `bytes`; returns its pointer or NULL
 * (err filled). Growing frees the old block, so callers use it for one call. */
void *choir_cuda_scratch(choir_cuda *cu, size_t bytes, choir_err *err);

/* choir_cuda_rows_gather from an MLX-quantized table (cuda_linear.cu, where
 * the code unpacking lives). */
int choir_cuda_rows_gather_quant(choir_cuda *cu, const choir_cuda_weight *W, const int32_t *ids,
                                 int64_t n, float *out, choir_err *err);

/* The implicit-GEMM conv1d of cuda_conv.cu: whether it takes a convolution
 * (stride 1, K <= 16, (K - 1) dilation <= 64, not forced off), and the
 * plain convolution through it (packed weight in context scratch). */
bool choir_cuda_conv1d_implicit_ok(const choir_cuda *cu, int64_t Cin, int64_t Cout,
                                   int64_t kernel, int stride, int padding, int dilation);
int choir_cuda_conv1d_implicit(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                               choir_cuda_conv_weight weight, const float *bias,
                               int64_t Cout, int64_t kernel, int padding, int dilation,
                               const int32_t *out_lens, float *y, choir_err *err);

/* Blocks of 256 threads over n elements, capped so a grid-stride loop covers
 * the rest. */
static inline unsigned choir_cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535 * 16) b = 65535 * 16;
    return (unsigned)b;
}

/* The 8-bit GEMV of cuda_linear_q8.cu (on with choir_cuda_q8_gemv): whether
 * it takes M rows of W (8-bit codes, groups of 32/64/128, M <= 8, the
 * switch on); the product (epilogue 0: y = x W^T + bias, 1: y += it, 2: y =
 * GELU_erf(it)); whether it fuses the RMS norm before p's layers for M rows
 * (x within its shared memory), and that fused call. */
bool choir_cuda_q8_takes(int64_t M, const choir_cuda_weight *W);
int choir_cuda_q8_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W, const float *bias,
                         float *y, int epilogue, choir_err *err);
bool choir_cuda_q8_norm_fuses(int64_t M, const choir_cuda_norm_linear_params *p);
int choir_cuda_q8_norm_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_norm_linear_params *p,
                              choir_err *err);

#endif
