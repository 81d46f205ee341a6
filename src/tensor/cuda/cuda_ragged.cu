/* Operations over pieces of different lengths in one launch (Kokoro's
 * batched front, CHOIR_KOKORO_FRONT_BATCH).
 *
 * choir_cuda_attention_ragged: self-attention over pieces stacked without
 * padding (ALBERT over a batch of pieces). Instead of three launches per
 * piece (two products and a softmax), a group of pieces at a time is
 * gathered head-major and padded to the longest piece ([G, n_head, Tm, Dh],
 * padded rows zero), its scores are one strided-batched product over all
 * G n_head (piece, head) pairs, the softmax sees each piece's own keys only
 * (padded queries get zero rows), the values one more product, and the
 * output is scattered back into the stacked rows: five launches a group,
 * groups as large as the scratch budget allows.
 *
 * choir_cuda_transpose_lens: a batch of transposes in one launch, the
 * columns past each item's length written as zeros (the text encoder's
 * time-major rows to a convolution's channels-first input). */
#include <math.h>

#include "tensor/cuda/cuda_internal.h"

#define AR_THREADS 256
/* Scratch of one group (gathered q, k, v, output and the scores), at most
 * this many bytes unless one piece needs more. */
#define AR_SCRATCH ((size_t)256 << 20)

/* Block max / sum; every thread gets it (red: 32 floats of shared memory). */
__device__ __forceinline__ float ar_reduce(float v, float *red, bool is_max) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? red[lane] : (is_max ? -INFINITY : 0.0f);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, r, o);
        r = is_max ? fmaxf(r, w) : r + w;
    }
    return r;
}

/* Row i of piece g0 + blockIdx.y, all heads: q, k, v stacked [R, nh Dh]
 * (row stride ld) -> qh, kh, vh [G, nh, Tm, Dh]; rows past the piece's
 * length zero. */
__global__ void k_ar_gather(const float *__restrict__ q, const float *__restrict__ k,
                            const float *__restrict__ v, int64_t ld, const int32_t *__restrict__ off,
                            const int32_t *__restrict__ len, int64_t g0, int64_t Tm, int nh,
                            int64_t Dh, float *__restrict__ qh, float *__restrict__ kh,
                            float *__restrict__ vh) {
    int64_t i = blockIdx.x, gb = blockIdx.y, b = g0 + gb;
    bool in = i < (int64_t)len[b];
    int64_t src = ((int64_t)off[b] + i) * ld, cols = (int64_t)nh * Dh;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        int64_t h = c / Dh, d = c - h * Dh;
        int64_t dst = ((gb * nh + h) * Tm + i) * Dh + d;
        qh[dst] = in ? q[src + c] : 0.0f;
        kh[dst] = in ? k[src + c] : 0.0f;
        vh[dst] = in ? v[src + c] : 0.0f;
    }
}

/* Softmax of score row blockIdx.x of S [G, nh, Tm, Tm] over its piece's
 * keys (the rest 0); a padded query's row becomes zeros. */
__global__ void k_ar_softmax(float *S, const int32_t *__restrict__ len, int64_t g0, int64_t Tm,
                             int nh) {
    __shared__ float red[32];
    int64_t row = blockIdx.x, i = row % Tm, gb = row / Tm / nh;
    int64_t L = len[g0 + gb];
    float *sr = S + row * Tm;
    if (i >= L) {
        for (int64_t j = threadIdx.x; j < Tm; j += blockDim.x) sr[j] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) mx = fmaxf(mx, sr[j]);
    mx = ar_reduce(mx, red, true);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < Tm; j += blockDim.x) {
        float e = j < L ? expf(sr[j] - mx) : 0.0f;
        sr[j] = e;
        sum += e;
    }
    float inv = 1.0f / ar_reduce(sum, red, false);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) sr[j] *= inv;
}

/* oh [G, nh, Tm, Dh] row i of piece g0 + blockIdx.y -> out's stacked row
 * (only rows within the piece's length). */
__global__ void k_ar_scatter(const float *__restrict__ oh, const int32_t *__restrict__ off,
                             const int32_t *__restrict__ len, int64_t g0, int64_t Tm, int nh,
                             int64_t Dh, float *__restrict__ out, int64_t ld) {
    int64_t i = blockIdx.x, gb = blockIdx.y, b = g0 + gb;
    if (i >= (int64_t)len[b]) return;
    int64_t dst = ((int64_t)off[b] + i) * ld, cols = (int64_t)nh * Dh;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        int64_t h = c / Dh, d = c - h * Dh;
        out[dst + c] = oh[((gb * nh + h) * Tm + i) * Dh + d];
    }
}

int choir_cuda_attention_ragged(choir_cuda *cu, int64_t n, const float *q, const float *k,
                                const float *v, int64_t ld, const int32_t *off,
                                const int32_t *len, int64_t Tm, int n_head, int64_t Dh,
                                float scale, float *out, choir_err *err) {
    if (n <= 0 || Tm <= 0) return 0;
    if (n_head <= 0 || Dh <= 0 || ld < (int64_t)n_head * Dh || Tm > INT32_MAX ||
        n > 65535 || Tm > 65535 || Dh > INT32_MAX)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: ragged attention of %lld pieces of up to %lld rows, %d heads of %lld",
                             (long long)n, (long long)Tm, n_head, (long long)Dh);
    /* floats of one piece: q, k, v, out gathered + its scores */
    const int64_t per = (int64_t)n_head * Tm * (4 * Dh + Tm);
    int64_t G = (int64_t)(AR_SCRATCH / sizeof(float)) / per;
    if (G < 1) G = 1;
    if (G > n) G = n;
    if (G * n_head > INT32_MAX) G = INT32_MAX / n_head;
    const int64_t hs = G * n_head * Tm * Dh; /* floats of one gathered tensor */
    float *qh = (float *)choir_cuda_scratch(cu, (size_t)(G * per) * sizeof(float), err);
    if (!qh) return err && err->code ? err->code : CHOIR_ENOMEM;
    float *kh = qh + hs, *vh = kh + hs, *oh = vh + hs, *S = oh + hs;
    const float zero = 0.0f, one = 1.0f;
    for (int64_t g0 = 0; g0 < n; g0 += G) {
        const int64_t g = n - g0 < G ? n - g0 : G;
        const int batch = (int)(g * n_head);
        dim3 grid((unsigned)Tm, (unsigned)g);
        k_ar_gather<<<grid, AR_THREADS, 0, cu->stream>>>(q, k, v, ld, off, len, g0, Tm, n_head, Dh,
                                                         qh, kh, vh);
        int rc = choir_cuda_check_launch(err, "ragged attention gather");
        if (rc) return rc;
        /* Row-major S_bh = Q_bh K_bh^T is column-major S^T = K Q^T. */
        cublasStatus_t st = cublasSgemmStridedBatched(
            cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)Tm, (int)Tm, (int)Dh, &scale, kh, (int)Dh,
            Tm * Dh, qh, (int)Dh, Tm * Dh, &zero, S, (int)Tm, Tm * Tm, batch);
        if (st != CUBLAS_STATUS_SUCCESS) return choir_cuda_blas_fail(err, st, "ragged attention scores");
        k_ar_softmax<<<(unsigned)(g * n_head * Tm), AR_THREADS, 0, cu->stream>>>(S, len, g0, Tm,
                                                                                  n_head);
        rc = choir_cuda_check_launch(err, "ragged attention softmax");
        if (rc) return rc;
        /* Row-major O_bh = P_bh V_bh is column-major O^T = V^T P^T. */
        st = cublasSgemmStridedBatched(cu->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)Dh, (int)Tm,
                                       (int)Tm, &one, vh, (int)Dh, Tm * Dh, S, (int)Tm, Tm * Tm,
                                       &zero, oh, (int)Dh, Tm * Dh, batch);
        if (st != CUBLAS_STATUS_SUCCESS) return choir_cuda_blas_fail(err, st, "ragged attention values");
        k_ar_scatter<<<grid, AR_THREADS, 0, cu->stream>>>(oh, off, len, g0, Tm, n_head, Dh, out, ld);
        rc = choir_cuda_check_launch(err, "ragged attention scatter");
        if (rc) return rc;
    }
    return 0;
}

/* dst[b] [C, R] = src[b] [R, C]^T (32x32 tiles as k_transpose_add), rows r
 * >= lens[b] of src written as zeros. */
__global__ void k_transpose_lens(const float *__restrict__ src, int64_t R, int64_t C,
                                 const int32_t *__restrict__ lens, float *__restrict__ dst) {
    __shared__ float tile[32][33];
    int64_t b = blockIdx.z, r0 = (int64_t)blockIdx.y * 32, c0 = (int64_t)blockIdx.x * 32;
    int64_t valid = lens ? (int64_t)lens[b] : R;
    const float *sb = src + b * R * C;
    float *db = dst + b * R * C;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        int64_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < R && c < C) tile[i][threadIdx.x] = r < valid ? sb[r * C + c] : 0.0f;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        int64_t c = c0 + i, r = r0 + threadIdx.x;
        if (r < R && c < C) db[c * R + r] = tile[threadIdx.x][i];
    }
}

int choir_cuda_transpose_lens(choir_cuda *cu, const float *src, int64_t B, int64_t R, int64_t C,
                              const int32_t *lens, float *dst, choir_err *err) {
    if (B <= 0 || R <= 0 || C <= 0) return 0;
    if ((R + 31) / 32 > 65535 || (C + 31) / 32 > INT32_MAX || B > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: %lld transposes of %lld rows",
                             (long long)B, (long long)R);
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)((R + 31) / 32), (unsigned)B), block(32, 8);
    k_transpose_lens<<<grid, block, 0, cu->stream>>>(src, R, C, lens, dst);
    return choir_cuda_check_launch(err, "transpose of items");
}
