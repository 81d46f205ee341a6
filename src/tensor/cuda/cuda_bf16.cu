/* bf16 activations between operations (the Whisper encoder on the device):
 * linear layers that read bf16 rows and write bf16 rows (bias and GELU
 * applied in one pass over the bf16 product) or add into an f32 residual
 * stream, and a layer norm from the f32 stream into bf16 rows. Products on
 * the tensor cores with f32 accumulation: through cublasLt with the bias
 * added in its epilogue when there is a bias (the residual add through its
 * C operand), cublasGemmEx otherwise or when cublasLt declines. */
#include <cublasLt.h>
#include <cuda_bf16.h>

#include "tensor/cuda/cuda_internal.h"

#define BF_THREADS 256

/* y[r, c] = act(y[r, c] + bias[c]) in bf16, eight values per thread. */
__global__ void k_bias_act_bf16(__nv_bfloat16 *__restrict__ y, const float *__restrict__ bias,
                                int64_t n8, int64_t cols, bool gelu) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint4 raw = ((const uint4 *)y)[i];
        __nv_bfloat162 *p = (__nv_bfloat162 *)&raw;
        int64_t c0 = (i * 8) % cols;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __bfloat1622float2(p[j]);
            if (bias) f.x += bias[c0 + 2 * j], f.y += bias[c0 + 2 * j + 1];
            if (gelu) f.x = cuda_gelu_erf(f.x), f.y = cuda_gelu_erf(f.y);
            p[j] = __floats2bfloat162_rn(f.x, f.y);
        }
        ((uint4 *)y)[i] = raw;
    }
}

static bool g_use_lt = true;
void choir_cuda_linear_bf16_set_lt(bool on) { g_use_lt = on; }
static bool g_gelu_epi = true;
void choir_cuda_linear_bf16_set_gelu_epilogue(bool on) { g_gelu_epi = on; }

__global__ void k_f32_to_bf16(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y,
                              int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

/* The largest power of two up to 256 dividing p's address: what the
 * heuristic is told of each operand, so that it offers only algorithms that
 * work on it (it assumes 256 bytes unless told; rows carved from a state's
 * block or tiles of it may be aligned to 16 or 64). */
static uint32_t lt_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al) al >>= 1;
    return al;
}

/* y = x W^T (+ beta y) + bias through cublasLt, the bias (of y's type) in
 * the epilogue. Any status but success sends the caller to the plain path
 * (nothing was enqueued then, except on a failing launch, reported). */
cublasStatus_t choir_cuda_lt_linear(choir_cuda *cu, const uint16_t *x, int64_t M, const choir_cuda_weight *W,
                                    const void *bias, void *y, cudaDataType_t yt, float beta, bool gelu) {
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (!cu->lt) {
        cublasLtHandle_t h;
        if ((st = cublasLtCreate(&h)) != CUBLAS_STATUS_SUCCESS) return st;
        cu->lt = h;
    }
    cublasLtHandle_t lt = (cublasLtHandle_t)cu->lt;
    int64_t N = W->rows, K = W->cols;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    int32_t bias_t = (int32_t)yt;
    size_t ws = cu->blas_workspace.bytes;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const float one = 1.0f;
#define LT(call)                                                                                 \
    if (st == CUBLAS_STATUS_SUCCESS) st = (call)
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t,
                                      sizeof(bias_t)));
    /* Column-major: W is [K, N] read transposed, x^T [K, M], y^T [N, M]. */
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, (uint64_t)K, (uint64_t)N, K));
    LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, (uint64_t)K, (uint64_t)M, K));
    LT(cublasLtMatrixLayoutCreate(&lc, yt, (uint64_t)N, (uint64_t)M, N));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof(ws)));
    uint32_t al_a = lt_align(W->data.ptr), al_b = lt_align(x), al_c = lt_align(y);
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                            sizeof(al_a)));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                            sizeof(al_b)));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                            sizeof(al_c)));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                            sizeof(al_c)));
    LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &found));
    if (st == CUBLAS_STATUS_SUCCESS && found < 1) st = CUBLAS_STATUS_NOT_SUPPORTED;
    LT(cublasLtMatmul(lt, op, &one, W->data.ptr, la, x, lb, &beta, y, lc, y, lc, &res.algo,
                      cu->blas_workspace.ptr, ws, cu->stream));
#undef LT
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return st;
}

int choir_cuda_linear_bf16(choir_cuda *cu, const uint16_t *x, int64_t M,
                           const choir_cuda_weight *W, const float *bias, void *y, bool y_bf16,
                           bool accumulate, bool gelu, choir_err *err) {
    int64_t N = W->rows, K = W->cols;
    if (M <= 0) return 0;
    if (W->kind != CHOIR_WEIGHT_BF16)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "cuda: linear over bf16 rows needs bf16 weights (kind %d)",
                             (int)W->kind);
    if (N > INT32_MAX || K > INT32_MAX || M > INT32_MAX)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: linear [%lld x %lld] too large",
                             (long long)M, (long long)K);
    if ((accumulate && (y_bf16 || gelu)) || (y_bf16 && N % 8))
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: linear over bf16 rows: accumulate into f32 only, bf16 rows of "
                             "a multiple of 8 (%lld)",
                             (long long)N);
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (g_use_lt && bias) {
        /* The epilogue's bias has y's type: a bf16 copy in the scratch. */
        const void *b = bias;
        if (y_bf16) {
            void *b16 = choir_cuda_scratch(cu, (size_t)N * 2, err);
            if (!b16) return err ? err->code : CHOIR_ENOMEM;
            k_f32_to_bf16<<<choir_cuda_blocks(N, BF_THREADS), BF_THREADS, 0, cu->stream>>>(
                bias, (__nv_bfloat16 *)b16, N);
            int rc = choir_cuda_check_launch(err, "bias to bf16");
            if (rc) return rc;
            b = b16;
        }
        /* GELU in the epilogue: cublasLt's is the tanh form, on the f32 sum
         * before the one rounding (see choir/cuda.h). */
        bool epi_gelu = gelu && g_gelu_epi;
        cublasStatus_t lst =
            choir_cuda_lt_linear(cu, x, M, W, b, y, y_bf16 ? CUDA_R_16BF : CUDA_R_32F, beta, epi_gelu);
        if (lst == CUBLAS_STATUS_SUCCESS) {
            if (!gelu || epi_gelu) return 0;
            int64_t n8 = M * N / 8;
            k_bias_act_bf16<<<choir_cuda_blocks(n8, BF_THREADS), BF_THREADS, 0, cu->stream>>>(
                (__nv_bfloat16 *)y, NULL, n8, N, true);
            return choir_cuda_check_launch(err, "GELU over bf16 rows");
        }
        cudaGetLastError(); /* declined: the plain path below */
    }
    /* Row-major y[M,N] = x[M,K] W[N,K]^T is column-major y^T = W x^T. */
    cublasStatus_t st = cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                     &one, W->data.ptr, CUDA_R_16BF, (int)K, x, CUDA_R_16BF,
                                     (int)K, &beta, y, y_bf16 ? CUDA_R_16BF : CUDA_R_32F, (int)N,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return choir_cuda_blas_fail(err, st, "GemmEx bf16 rows");
    if (!y_bf16) return bias ? choir_cuda_add_bias_rows(cu, (float *)y, bias, M, N, err) : 0;
    if (!bias && !gelu) return 0;
    int64_t n8 = M * N / 8;
    k_bias_act_bf16<<<choir_cuda_blocks(n8, BF_THREADS), BF_THREADS, 0, cu->stream>>>(
        (__nv_bfloat16 *)y, bias, n8, N, gelu);
    return choir_cuda_check_launch(err, "bias and GELU over bf16 rows");
}

/* As k_layer_norm (two passes for the variance), the row held in registers
 * between them, the output rounded to bf16. One block per row. */
__global__ void k_layer_norm_bf16(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y,
                                  int64_t dim, const float *__restrict__ gamma,
                                  const float *__restrict__ beta, float eps) {
    __shared__ float red[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    __nv_bfloat16 *yr = y + (int64_t)blockIdx.x * dim;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    auto reduce = [&](float v) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        __syncthreads();
        if (lane == 0) red[warp] = v;
        __syncthreads();
        float r = lane < nwarps ? red[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
        return r;
    };
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
    float mean = reduce(s) / (float)dim;
    float v = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float d = xr[i] - mean;
        v += d * d;
    }
    float inv = rsqrtf(reduce(v) / (float)dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float o = (xr[i] - mean) * inv;
        if (gamma) o *= gamma[i];
        if (beta) o += beta[i];
        yr[i] = __float2bfloat16_rn(o);
    }
}

/* The same with one warp per row for rows of 128 NV values (NV <= 16): the
 * row read once as float4s into registers, the two reductions by shuffles
 * alone, the output written eight bytes at a time; eight rows per block. */
template <int NV>
__global__ void __launch_bounds__(256)
    k_layer_norm_bf16_warp(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y,
                           int64_t rows, const float *__restrict__ gamma,
                           const float *__restrict__ beta, float eps) {
    constexpr int dim = 128 * NV;
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float4 *xr = (const float4 *)(x + row * dim);
    float4 v[NV];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        v[i] = xr[i * 32 + lane];
        s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    float mean = s / (float)dim, q = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        float a = v[i].x - mean, b = v[i].y - mean, c = v[i].z - mean, d = v[i].w - mean;
        q += (a * a + b * b) + (c * c + d * d);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    float inv = rsqrtf(q / (float)dim + eps);
    uint2 *yr = (uint2 *)(y + row * dim);
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = (i * 32 + lane) * 4;
        float o0 = (v[i].x - mean) * inv, o1 = (v[i].y - mean) * inv;
        float o2 = (v[i].z - mean) * inv, o3 = (v[i].w - mean) * inv;
        if (gamma) {
            float4 g = *(const float4 *)(gamma + c);
            o0 *= g.x, o1 *= g.y, o2 *= g.z, o3 *= g.w;
        }
        if (beta) {
            float4 b = *(const float4 *)(beta + c);
            o0 += b.x, o1 += b.y, o2 += b.z, o3 += b.w;
        }
        __nv_bfloat162 lo = __floats2bfloat162_rn(o0, o1), hi = __floats2bfloat162_rn(o2, o3);
        uint2 w;
        w.x = *(uint32_t *)&lo;
        w.y = *(uint32_t *)&hi;
        yr[i * 32 + lane] = w;
    }
}

static bool g_ln_warp = true;
void choir_cuda_layer_norm_bf16_set_warp(bool on) { g_ln_warp = on; }

int choir_cuda_layer_norm_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t rows,
                               int64_t dim, const float *gamma, const float *beta, float eps,
                               choir_err *err) {
    if (rows <= 0 || dim <= 0) return 0;
    if (rows > INT32_MAX) return choir_err_set(err, CHOIR_ETOOBIG, "cuda: layer norm rows");
    uintptr_t al = (uintptr_t)x | (uintptr_t)y | (uintptr_t)gamma | (uintptr_t)beta;
    if (g_ln_warp && dim % 128 == 0 && dim <= 2048 && (al & 15) == 0) {
        unsigned blocks = (unsigned)((rows + 7) / 8);
        switch (dim / 128) {
#define CHOIR_LN_WARP(NV)                                                                         \
    case NV:                                                                                      \
        k_layer_norm_bf16_warp<NV><<<blocks, 256, 0, cu->stream>>>(x, (__nv_bfloat16 *)y, rows,   \
                                                                     gamma, beta, eps);           \
        return choir_cuda_check_launch(err, "layer norm to bf16");
            CHOIR_LN_WARP(1)
            CHOIR_LN_WARP(2)
            CHOIR_LN_WARP(3)
            CHOIR_LN_WARP(4)
            CHOIR_LN_WARP(5)
            CHOIR_LN_WARP(6)
            CHOIR_LN_WARP(8)
            CHOIR_LN_WARP(10)
            CHOIR_LN_WARP(12)
            CHOIR_LN_WARP(16)
#undef CHOIR_LN_WARP
        default:
            break;
        }
    }
    k_layer_norm_bf16<<<(unsigned)rows, BF_THREADS, 0, cu->stream>>>(x, (__nv_bfloat16 *)y, dim,
                                                                       gamma, beta, eps);
    return choir_cuda_check_launch(err, "layer norm to bf16");
}

/* --- convolutions on bf16 operands ------------------------------------------ */

/* cols[ci*K + k, t] = x[ci, t*stride - padding + k*dilation] rounded to bf16
 * (zero outside). */
__global__ void k_im2col_bf16(const float *__restrict__ x, int64_t T, int64_t kernel, int stride,
                              int padding, int dilation, int64_t rows, int64_t Tout,
                              __nv_bfloat16 *__restrict__ cols) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * Tout;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / Tout, t = i % Tout;
        int64_t ci = r / kernel, k = r % kernel;
        int64_t ts = t * stride - padding + k * dilation;
        cols[i] = __float2bfloat16_rn(ts >= 0 && ts < T ? x[ci * T + ts] : 0.0f);
    }
}

__global__ void k_channel_bias_f32(float *__restrict__ y, const float *__restrict__ bias,
                                   int64_t n, int64_t Tout) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += bias[i / Tout];
}

int choir_cuda_conv1d_bf16(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                           const float *weight, const float *bias, int64_t Cout, int64_t kernel,
                           int stride, int padding, int dilation, float *y, choir_err *err) {
    if (stride < 1 || dilation < 1 || padding < 0 || kernel < 1 || Cin < 1 || Cout < 1)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: bf16 conv1d shape");
    int64_t span = T + 2 * (int64_t)padding - (int64_t)dilation * (kernel - 1) - 1;
    if (span < 0 || B <= 0) return 0;
    int64_t Tout = span / stride + 1, rows = Cin * kernel;
    if (rows > INT32_MAX || Tout > INT32_MAX || Cout > INT32_MAX)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: bf16 conv1d too large");
    /* The scratch: the weight [Cout, Cin K] in bf16, then one item's taps. */
    size_t w_bytes = ((size_t)(Cout * rows) * 2 + 255) & ~(size_t)255;
    char *scratch = (char *)choir_cuda_scratch(cu, w_bytes + (size_t)(rows * Tout) * 2, err);
    if (!scratch) return err ? err->code : CHOIR_ENOMEM;
    __nv_bfloat16 *w16 = (__nv_bfloat16 *)scratch, *cols = (__nv_bfloat16 *)(scratch + w_bytes);
    k_f32_to_bf16<<<choir_cuda_blocks(Cout * rows, BF_THREADS), BF_THREADS, 0, cu->stream>>>(
        weight, w16, Cout * rows);
    int rc = choir_cuda_check_launch(err, "conv weight to bf16");
    const float one = 1.0f, zero = 0.0f;
    for (int64_t b = 0; b < B && !rc; b++) {
        const float *xb = x + b * Cin * T;
        float *yb = y + b * Cout * Tout;
        k_im2col_bf16<<<choir_cuda_blocks(rows * Tout, BF_THREADS), BF_THREADS, 0, cu->stream>>>(
            xb, T, kernel, stride, padding, dilation, rows, Tout, cols);
        if ((rc = choir_cuda_check_launch(err, "im2col bf16"))) break;
        /* Row-major y[Cout, Tout] = W[Cout, rows] cols[rows, Tout] is column-major
         * y^T = cols^T W^T. */
        cublasStatus_t st = cublasGemmEx(cu->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)Tout, (int)Cout,
                                         (int)rows, &one, cols, CUDA_R_16BF, (int)Tout, w16,
                                         CUDA_R_16BF, (int)rows, &zero, yb, CUDA_R_32F, (int)Tout,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
            rc = choir_cuda_blas_fail(err, st, "GemmEx bf16 conv1d");
            break;
        }
        if (bias) {
            k_channel_bias_f32<<<choir_cuda_blocks(Cout * Tout, BF_THREADS), BF_THREADS, 0,
                                 cu->stream>>>(yb, bias, Cout * Tout, Tout);
            rc = choir_cuda_check_launch(err, "bf16 conv1d bias");
        }
    }
    return rc;
}
