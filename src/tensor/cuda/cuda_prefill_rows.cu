/* Prefill products in one (choir_cuda_prefill_fused, issue #23): a layer's
 * q, k and v as one cuBLAS product over their weights stored one after
 * another, with the bias and the rotary embedding in the one pass that
 * splits its rows (k_qkv_split_rope); a gated MLP's gate and up likewise
 * as one product written in bf16, the SwiGLU reading both halves of each
 * row (k_swiglu_cat). Estimates at VibeVoice 7B's shapes (hidden 3584,
 * q 3584, k and v 512 each, MLP 18944) for a chunk of 1,024 rows: the k
 * and v products alone are 2 x 32 tiles of 128 x 128 on 132 SMs (a quarter
 * of a wave each), the q product 224 tiles (1.7 waves); as one product 288
 * tiles (2.2 waves), two launches and two tails fewer. The split pass reads
 * and writes the 4,608 f32 columns once (37.7 MB), where the separate path
 * rewrote q and k in the rope (29.4 MB) and the biases in their own passes
 * (18.9 MB). gate and up in bf16 halve the 155 MB of f32 rows the products
 * wrote and the SwiGLU read (2 x 77.6 MB saved a chunk, ~50 us at 3 TB/s). */
#include <stdlib.h>
#include <string.h>

#include "tensor/cuda/cuda_internal.h"

#define ROWS_THREADS 256
#define ROWS_MAX_HALF 512

#define GRID_STRIDE(i, n)                                                                  \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

/* 1: read CHOIR_VV_PREFILL_FUSED at first use; then 0 off, 2 on. */
static int g_prefill_fused = 1;
void choir_cuda_prefill_fused(bool on) { __atomic_store_n(&g_prefill_fused, on ? 2 : 0, __ATOMIC_RELAXED); }
bool choir_cuda_prefill_fused_on(void) {
    int v = __atomic_load_n(&g_prefill_fused, __ATOMIC_RELAXED);
    if (v == 1) {
        const char *e = getenv("CHOIR_VV_PREFILL_FUSED");
        v = e && e[0] == '0' ? 0 : 2; /* on unless "0" (ran on an H100 on 7 Dec 2026) */
        __atomic_store_n(&g_prefill_fused, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

/* A block per row (striding over rows): the row's rotation angles once into
 * shared memory (k_rope_rows' floats), then every (head, pair) of q's and
 * k's heads: the product's two values plus their biases, rotated; then v's
 * values plus theirs. y [rows, qd + 2 kvd] f32. */
__global__ void __launch_bounds__(ROWS_THREADS)
    k_qkv_split_rope(const float *__restrict__ y, int64_t rows, int n_heads, int n_kv, int64_t Dh,
                     const float *__restrict__ bq, const float *__restrict__ bk, const float *__restrict__ bv,
                     const int32_t *__restrict__ pos, float theta, float *__restrict__ q, float *__restrict__ k,
                     float *__restrict__ v) {
    __shared__ float cs[ROWS_MAX_HALF], sn[ROWS_MAX_HALF];
    int64_t half = Dh / 2, qd = (int64_t)n_heads * Dh, kvd = (int64_t)n_kv * Dh, N = qd + 2 * kvd;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        __syncthreads(); /* the last row's angles are read */
        cuda_rope_angles(cs, sn, half, pos[r], theta);
        __syncthreads();
        const float *yr = y + r * N;
        for (int64_t t = threadIdx.x; t < (int64_t)(n_heads + n_kv) * half; t += blockDim.x) {
            int64_t h = t / half, i = t % half;
            bool isq = h < n_heads;
            int64_t col = isq ? h * Dh : (h - n_heads) * Dh; /* within q's or k's row */
            const float *src = yr + (isq ? 0 : qd) + col;
            const float *b = isq ? bq : bk;
            float *dst = isq ? q + r * qd + col : k + r * kvd + col;
            float a = src[i], c = src[i + half];
            if (b) {
                a = a + b[col + i];
                c = c + b[col + i + half];
            }
            dst[i] = a * cs[i] - c * sn[i];
            dst[i + half] = c * cs[i] + a * sn[i];
        }
        for (int64_t j = threadIdx.x; j < kvd; j += blockDim.x) {
            float a = yr[qd + kvd + j];
            v[r * kvd + j] = bv ? a + bv[j] : a;
        }
    }
}

int choir_cuda_qkv_rope_rows(choir_cuda *cu, const float *x, int64_t M, const float *gamma, float eps,
                             const choir_cuda_weight *Wqkv, const float *const bias[3], int n_heads, int n_kv,
                             int64_t Dh, const int32_t *pos, float theta, float *q, float *k, float *v, void *h,
                             choir_err *err) {
    int64_t N = Wqkv->rows, K = Wqkv->cols;
    if (!choir_cuda_prefill_fused_on() || !choir_cuda_rows_ok(M, Wqkv) || n_heads <= 0 || n_kv <= 0 || Dh <= 0 ||
        Dh % 2 || Dh / 2 > ROWS_MAX_HALF || N != (int64_t)(n_heads + 2 * n_kv) * Dh)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: q, k, v as one product for %lld rows of [%lld x %lld]",
                             (long long)M, (long long)N, (long long)K);
    float *y = (float *)choir_cuda_scratch(cu, (size_t)(M * N) * sizeof(float), err);
    if (!y) return err ? err->code : CHOIR_ENOMEM;
    int rc = choir_cuda_rms_norm_bf16(cu, x, (uint16_t *)h, M, K, gamma, eps, err);
    if (!rc) rc = choir_cuda_gemm_xwt(cu, h, Wqkv->data.ptr, M, N, K, y, CUDA_R_32F, 0.0f, err);
    if (rc) return rc;
    unsigned blocks = (unsigned)(M < 65535 ? M : 65535);
    k_qkv_split_rope<<<blocks, ROWS_THREADS, 0, cu->stream>>>(y, M, n_heads, n_kv, Dh, bias[0], bias[1], bias[2],
                                                             pos, theta, q, k, v);
    return choir_cuda_check_launch(err, "q, k, v split with the rotary embedding");
}

/* out[r, j] = bf16(SiLU(gu[r, j]) gu[r, I + j]) over bf16 rows gu [rows, 2I]:
 * k_swiglu_bf16_rows' arithmetic, eight values a thread (I a multiple of
 * 8, both buffers 16-byte aligned: the caller checks). */
__global__ void k_swiglu_cat8(const uint4 *__restrict__ gu, uint4 *__restrict__ out, int64_t rows, int64_t I8) {
    GRID_STRIDE(t, rows * I8) {
        int64_t r = t / I8, j = t % I8;
        out[t] = cuda_swiglu8(gu[r * 2 * I8 + j], gu[r * 2 * I8 + I8 + j]);
    }
}

__global__ void k_swiglu_cat(const __nv_bfloat16 *__restrict__ gu, __nv_bfloat16 *__restrict__ out, int64_t rows,
                             int64_t I) {
    GRID_STRIDE(t, rows * I) {
        int64_t r = t / I, j = t % I;
        float g = __bfloat162float(gu[r * 2 * I + j]);
        g = g / (1.0f + expf(-g));
        out[t] = __float2bfloat16_rn(g * __bfloat162float(gu[r * 2 * I + I + j]));
    }
}

int choir_cuda_gated_mlp_cat_rows(choir_cuda *cu, float *x, int64_t M, const float *gamma, float eps,
                                  const choir_cuda_weight *Wgu, const choir_cuda_weight *Wd, void *gu, void *hb,
                                  void *h, choir_err *err) {
    int64_t H = Wgu->cols, I = Wgu->rows / 2;
    if (!choir_cuda_prefill_fused_on() || !choir_cuda_rows_ok(M, Wgu) || !choir_cuda_rows_ok(M, Wd) ||
        Wgu->rows % 2 || Wd->cols != I || Wd->rows != H)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "cuda: gate and up as one product for %lld rows",
                             (long long)M);
    int rc = choir_cuda_rms_norm_bf16(cu, x, (uint16_t *)h, M, H, gamma, eps, err);
    if (!rc) rc = choir_cuda_gemm_xwt(cu, h, Wgu->data.ptr, M, 2 * I, H, gu, CUDA_R_16BF, 0.0f, err);
    if (rc) return rc;
    if (I % 8 == 0 && !(((uintptr_t)gu | (uintptr_t)hb) & 15))
        k_swiglu_cat8<<<choir_cuda_blocks(M * (I / 8), ROWS_THREADS), ROWS_THREADS, 0, cu->stream>>>(
            (const uint4 *)gu, (uint4 *)hb, M, I / 8);
    else
        k_swiglu_cat<<<choir_cuda_blocks(M * I, ROWS_THREADS), ROWS_THREADS, 0, cu->stream>>>(
            (const __nv_bfloat16 *)gu, (__nv_bfloat16 *)hb, M, I);
    if ((rc = choir_cuda_check_launch(err, "swiglu over gate and up rows"))) return rc;
    return choir_cuda_gemm_xwt(cu, hb, Wd->data.ptr, M, H, I, x, CUDA_R_32F, 1.0f, err);
}
