/* Linear layers on the device: GEMV kernels that read each weight once in its
 * own storage (f32, f16, bf16, MLX-quantized) for the decoder's few rows, and
 * cuBLAS on the tensor cores for everything larger. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "tensor/cuda/cuda_internal.h"

/* Up to this many activation rows the GEMV kernels win: they stream the
 * weight once and keep one accumulator per row in registers. */
#define GEMV_MAX_ROWS 8
#define GEMV_WARPS 4

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One warp per output row; each lane takes 16-byte chunks of the row, so a
 * warp reads 512 contiguous bytes per step. */
template <typename T>
__global__ void gemv_dense(const float *__restrict__ x, int M, const T *__restrict__ W, int64_t rows,
                           int64_t cols, const float *__restrict__ bias, float *__restrict__ y) {
    constexpr int VEC = 16 / sizeof(T);
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    const T *wr = W + r * cols;
    float acc[GEMV_MAX_ROWS];
#pragma unroll
    for (int m = 0; m < GEMV_MAX_ROWS; m++) acc[m] = 0.0f;
    if (cols % VEC == 0) {
        for (int64_t c = (int64_t)lane * VEC; c < cols; c += 32 * VEC) {
            uint4 raw = *(const uint4 *)(wr + c);
            const T *wv = (const T *)&raw;
            float wf[VEC];
#pragma unroll
            for (int j = 0; j < VEC; j++) wf[j] = to_f32(wv[j]);
#pragma unroll
            for (int m = 0; m < GEMV_MAX_ROWS; m++) {
                if (m >= M) break;
                const float4 *xv = (const float4 *)(x + (int64_t)m * cols + c);
#pragma unroll
                for (int j = 0; j < VEC / 4; j++) {
                    float4 xx = xv[j];
                    acc[m] += wf[4 * j] * xx.x + wf[4 * j + 1] * xx.y + wf[4 * j + 2] * xx.z +
                              wf[4 * j + 3] * xx.w;
                }
            }
        }
    } else {
        for (int64_t c = lane; c < cols; c += 32) {
            float wf = to_f32(wr[c]);
#pragma unroll
            for (int m = 0; m < GEMV_MAX_ROWS; m++)
                if (m < M) acc[m] += wf * x[(int64_t)m * cols + c];
        }
    }
#pragma unroll
    for (int m = 0; m < GEMV_MAX_ROWS; m++) {
        if (m >= M) break;
        float s = warp_sum(acc[m]);
        if (lane == 0) y[(int64_t)m * rows + r] = s + (bias ? bias[r] : 0.0f);
    }
}

__device__ __forceinline__ float load_sb(const void *p, choir_dtype dt, int64_t i) {
    if (dt == CHOIR_DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == CHOIR_DTYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* The 32 codes of one chunk: chunk c of a row covers codes [32c, 32c+32),
 * which are exactly BITS packed words (LSB first, straddling words for 3, 5
 * and 6 bits, as MLX packs them). */
template <int BITS>
__device__ __forceinline__ void load_codes(const uint32_t *__restrict__ words, float q[32]) {
    uint32_t w[BITS];
    if constexpr (BITS == 4) {
        uint4 v = *(const uint4 *)words;
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else if constexpr (BITS == 8) {
        uint4 a = *(const uint4 *)words, b = *(const uint4 *)(words + 4);
        w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
        w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < BITS; i++) w[i] = words[i];
    }
    constexpr uint32_t mask = (1u << BITS) - 1u;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const int off = j * BITS, wi = off >> 5, sh = off & 31;
        uint32_t v = w[wi] >> sh;
        if (sh + BITS > 32) v |= w[(wi + 1) % BITS] << (32 - sh);
        /* 2^23 + code, read as a float, minus 2^23: exact, and two cheap
         * operations instead of the quarter-rate integer conversion. */
        q[j] = __uint_as_float(0x4B000000u | (v & mask)) - 8388608.0f;
    }
}

template <int BITS>
__global__ void gemv_quant(const float *__restrict__ x, int M, const uint32_t *__restrict__ Wq,
                           const void *__restrict__ scales, const void *__restrict__ biases,
                           choir_dtype sb_dtype, int group_shift, int64_t rows, int64_t cols,
                           const float *__restrict__ bias, float *__restrict__ y) {
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    int64_t chunks = cols / 32, groups = chunks >> group_shift;
    const uint32_t *wr = Wq + r * chunks * BITS;
    float acc[GEMV_MAX_ROWS];
#pragma unroll
    for (int m = 0; m < GEMV_MAX_ROWS; m++) acc[m] = 0.0f;
    for (int64_t c = lane; c < chunks; c += 32) {
        float q[32];
        load_codes<BITS>(wr + c * BITS, q);
        int64_t g = r * groups + (c >> group_shift);
        float s = load_sb(scales, sb_dtype, g), b = load_sb(biases, sb_dtype, g);
#pragma unroll
        for (int m = 0; m < GEMV_MAX_ROWS; m++) {
            if (m >= M) break;
            const float4 *xv = (const float4 *)(x + (int64_t)m * cols + c * 32);
            /* Four independent chains keep the FMA pipes busy. */
            float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f, xsum = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float4 xx = xv[j];
                d0 += q[4 * j] * xx.x;
                d1 += q[4 * j + 1] * xx.y;
                d2 += q[4 * j + 2] * xx.z;
                d3 += q[4 * j + 3] * xx.w;
                xsum += (xx.x + xx.y) + (xx.z + xx.w);
            }
            float dot = (d0 + d1) + (d2 + d3);
            /* sum_j (s q_j + b) x_j, without forming each weight. */
            acc[m] += s * dot + b * xsum;
        }
    }
#pragma unroll
    for (int m = 0; m < GEMV_MAX_ROWS; m++) {
        if (m >= M) break;
        float s = warp_sum(acc[m]);
        if (lane == 0) y[(int64_t)m * rows + r] = s + (bias ? bias[r] : 0.0f);
    }
}

/* One thread per 32-code chunk, writing bf16 for the cuBLAS path. */
template <int BITS>
__global__ void dequant_bf16(const uint32_t *__restrict__ Wq, const void *__restrict__ scales,
                             const void *__restrict__ biases, choir_dtype sb_dtype,
                             int group_size, int64_t rows, int64_t cols,
                             __nv_bfloat16 *__restrict__ out) {
    int64_t chunks = cols / 32, total = rows * chunks;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / chunks, c = i % chunks;
        float q[32];
        load_codes<BITS>(Wq + i * BITS, q);
        int64_t g = r * (cols / group_size) + (c * 32) / group_size;
        float s = load_sb(scales, sb_dtype, g), b = load_sb(biases, sb_dtype, g);
        __nv_bfloat16 *o = out + r * cols + c * 32;
#pragma unroll
        for (int j = 0; j < 32; j++) o[j] = __float2bfloat16_rn(s * q[j] + b);
    }
}

/* Embedding rows of a quantized table: one thread per 32-code chunk of an
 * output row; ids outside the table give zeros (as k_gather). */
template <int BITS>
__global__ void gather_quant(const uint32_t *__restrict__ Wq, const void *__restrict__ scales,
                             const void *__restrict__ biases, choir_dtype sb_dtype,
                             int group_size, int64_t rows, int64_t cols,
                             const int32_t *__restrict__ ids, int64_t n, float *__restrict__ out) {
    int64_t chunks = cols / 32, total = n * chunks;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / chunks, c = i % chunks, id = ids[r];
        float *o = out + r * cols + c * 32;
        if (id < 0 || id >= rows) {
#pragma unroll
            for (int j = 0; j < 32; j++) o[j] = 0.0f;
            continue;
        }
        float q[32];
        load_codes<BITS>(Wq + (id * chunks + c) * BITS, q);
        int64_t g = id * (cols / group_size) + (c * 32) / group_size;
        float s = load_sb(scales, sb_dtype, g), b = load_sb(biases, sb_dtype, g);
#pragma unroll
        for (int j = 0; j < 32; j++) o[j] = __fmul_rn(s, q[j]) + b;
    }
}

int choir_cuda_rows_gather_quant(choir_cuda *cu, const choir_cuda_weight *W, const int32_t *ids,
                                 int64_t n, float *out, choir_err *err) {
    if (n <= 0 || W->cols <= 0) return 0;
    if (W->cols % 32 || W->group_size <= 0)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: rows gather: %lld columns, groups of %d",
                             (long long)W->cols, W->group_size);
    unsigned blocks = choir_cuda_blocks(n * (W->cols / 32), 256);
    const uint32_t *q = (const uint32_t *)W->data.ptr;
#define CHOIR_QGATHER(B)                                                                      \
    case B:                                                                                   \
        gather_quant<B><<<blocks, 256, 0, cu->stream>>>(q, W->scales.ptr, W->biases.ptr,       \
                                                        W->sb_dtype, W->group_size, W->rows,   \
                                                        W->cols, ids, n, out);                 \
        break;
    switch (W->bits) {
        CHOIR_QGATHER(2)
        CHOIR_QGATHER(3)
        CHOIR_QGATHER(4)
        CHOIR_QGATHER(5)
        CHOIR_QGATHER(6)
        CHOIR_QGATHER(8)
    default:
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: %d-bit weights", W->bits);
    }
#undef CHOIR_QGATHER
    return choir_cuda_check_launch(err, "quantized rows gather");
}

template <typename T>
__global__ void convert_from_f32(const float *__restrict__ x, T *__restrict__ y, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (sizeof(T) == 4)
            y[i] = x[i];
        else if constexpr (std::is_same<T, __half>::value)
            y[i] = __float2half_rn(x[i]);
        else
            y[i] = __float2bfloat16_rn(x[i]);
    }
}

static int launch_gemv_quant(choir_cuda *cu, const float *x, int M, const choir_cuda_weight *W,
                             const float *bias, float *y, choir_err *err) {
    dim3 grid((unsigned)((W->rows + GEMV_WARPS - 1) / GEMV_WARPS)), block(32 * GEMV_WARPS);
    const uint32_t *q = (const uint32_t *)W->data.ptr;
    /* Chunks of 32 codes per group, as a shift (group sizes are 32, 64, 128). */
    int group_shift = W->group_size == 128 ? 2 : W->group_size == 64 ? 1 : 0;
#define CHOIR_QGEMV(B)                                                                         \
    case B:                                                                                    \
        gemv_quant<B><<<grid, block, 0, cu->stream>>>(x, M, q, W->scales.ptr, W->biases.ptr,    \
                                                      W->sb_dtype, group_shift, W->rows,        \
                                                      W->cols, bias, y);                        \
        break;
    switch (W->bits) {
        CHOIR_QGEMV(2)
        CHOIR_QGEMV(3)
        CHOIR_QGEMV(4)
        CHOIR_QGEMV(5)
        CHOIR_QGEMV(6)
        CHOIR_QGEMV(8)
    default:
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: %d-bit weights", W->bits);
    }
#undef CHOIR_QGEMV
    return choir_cuda_check_launch(err, "quantized gemv");
}

static int launch_dequant(choir_cuda *cu, const choir_cuda_weight *W, __nv_bfloat16 *out,
                          choir_err *err) {
    int64_t total = W->rows * (W->cols / 32);
    unsigned blocks = choir_cuda_blocks(total, 256);
    const uint32_t *q = (const uint32_t *)W->data.ptr;
#define CHOIR_DEQ(B)                                                                          \
    case B:                                                                                   \
        dequant_bf16<B><<<blocks, 256, 0, cu->stream>>>(q, W->scales.ptr, W->biases.ptr,       \
                                                        W->sb_dtype, W->group_size, W->rows,   \
                                                        W->cols, out);                         \
        break;
    switch (W->bits) {
        CHOIR_DEQ(2)
        CHOIR_DEQ(3)
        CHOIR_DEQ(4)
        CHOIR_DEQ(5)
        CHOIR_DEQ(6)
        CHOIR_DEQ(8)
    default:
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: %d-bit weights", W->bits);
    }
#undef CHOIR_DEQ
    return choir_cuda_check_launch(err, "dequantize");
}

/* Row-major y[M,N] = x[M,K] * W[N,K]^T in cuBLAS's column-major terms:
 * y^T = W * x^T, with W read transposed. */
static int gemm_xwt(choir_cuda *cu, const void *x, const void *W, cudaDataType_t in_type,
                    int64_t M, int64_t N, int64_t K, float *y, choir_err *err) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                     &one, W, in_type, (int)K, x, in_type, (int)K, &zero, y,
                                     CUDA_R_32F, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : choir_cuda_blas_fail(err, st, "GemmEx");
}

int choir_cuda_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                      const float *bias, float *y, choir_err *err) {
    int64_t N = W->rows, K = W->cols;
    if (M <= 0) return 0;
    if (N > INT32_MAX || K > INT32_MAX || M > INT32_MAX)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: linear [%lld x %lld] too large",
                             (long long)M, (long long)K);
    if (M <= GEMV_MAX_ROWS) {
        dim3 grid((unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS)), block(32 * GEMV_WARPS);
        switch (W->kind) {
        case CHOIR_WEIGHT_F32:
            gemv_dense<float><<<grid, block, 0, cu->stream>>>(x, (int)M, (const float *)W->data.ptr,
                                                              N, K, bias, y);
            return choir_cuda_check_launch(err, "gemv f32");
        case CHOIR_WEIGHT_F16:
            gemv_dense<__half><<<grid, block, 0, cu->stream>>>(
                x, (int)M, (const __half *)W->data.ptr, N, K, bias, y);
            return choir_cuda_check_launch(err, "gemv f16");
        case CHOIR_WEIGHT_BF16:
            gemv_dense<__nv_bfloat16><<<grid, block, 0, cu->stream>>>(
                x, (int)M, (const __nv_bfloat16 *)W->data.ptr, N, K, bias, y);
            return choir_cuda_check_launch(err, "gemv bf16");
        case CHOIR_WEIGHT_QUANT:
            return launch_gemv_quant(cu, x, (int)M, W, bias, y, err);
        }
        return choir_err_set(err, CHOIR_EINVAL, "cuda: unknown weight kind %d", (int)W->kind);
    }
    int rc;
    if (W->kind == CHOIR_WEIGHT_F32) {
        rc = gemm_xwt(cu, x, W->data.ptr, CUDA_R_32F, M, N, K, y, err);
    } else {
        /* Half-precision inputs for the tensor cores: x converted, and a
         * quantized W expanded to bf16, both in the context's scratch. */
        size_t x_bytes = ((size_t)(M * K) * 2 + 255) & ~(size_t)255;
        size_t w_bytes = W->kind == CHOIR_WEIGHT_QUANT ? (size_t)(N * K) * 2 : 0;
        char *scratch = (char *)choir_cuda_scratch(cu, x_bytes + w_bytes, err);
        if (!scratch) return err ? err->code : CHOIR_ENOMEM;
        unsigned blocks = choir_cuda_blocks(M * K, 256);
        cudaDataType_t in_type = W->kind == CHOIR_WEIGHT_F16 ? CUDA_R_16F : CUDA_R_16BF;
        if (W->kind == CHOIR_WEIGHT_F16)
            convert_from_f32<__half><<<blocks, 256, 0, cu->stream>>>(x, (__half *)scratch, M * K);
        else
            convert_from_f32<__nv_bfloat16>
                <<<blocks, 256, 0, cu->stream>>>(x, (__nv_bfloat16 *)scratch, M * K);
        if ((rc = choir_cuda_check_launch(err, "convert activations"))) return rc;
        const void *w = W->data.ptr;
        if (W->kind == CHOIR_WEIGHT_QUANT) {
            if ((rc = launch_dequant(cu, W, (__nv_bfloat16 *)(scratch + x_bytes), err))) return rc;
            w = scratch + x_bytes;
        }
        rc = gemm_xwt(cu, scratch, w, in_type, M, N, K, y, err);
    }
    if (rc || !bias) return rc;
    return choir_cuda_add_bias_rows(cu, y, bias, M, N, err);
}

int choir_cuda_gemm_f32(choir_cuda *cu, bool trans_a, bool trans_b, int64_t M, int64_t N,
                        int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float beta, float *C, int64_t ldc, choir_err *err) {
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. */
    cublasStatus_t st = cublasSgemm(cu->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                    &alpha, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : choir_cuda_blas_fail(err, st, "Sgemm");
}

int choir_cuda_gemm_bf16_nt(choir_cuda *cu, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                            const uint16_t *B, float *C, choir_err *err) {
    return gemm_xwt(cu, A, B, CUDA_R_16BF, M, N, K, C, err);
}

int choir_cuda_f32_to_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t n,
                           choir_err *err) {
    convert_from_f32<__nv_bfloat16>
        <<<choir_cuda_blocks(n, 256), 256, 0, cu->stream>>>(x, (__nv_bfloat16 *)y, n);
    return choir_cuda_check_launch(err, "f32 to bf16");
}
