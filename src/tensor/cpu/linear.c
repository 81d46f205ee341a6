/* Matrix products: choir_gemm_f32 over OpenBLAS, and the linear layer for
 * every weight storage.
 *
 * Threading: OpenBLAS is set to one thread and choir's pool splits the work
 * (rows or columns of the product, rows of the weight). One pool then governs
 * all kernel threads (CHOIR_THREADS), BLAS calls made from pool workers never
 * start a second thread pool, and nothing oversubscribes the cores. */
#include <cblas.h>
#include <pthread.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "choir/quant.h"
#include "tensor/cpu/cpu_kernels.h"

/* Products smaller than this many multiply-adds run on the calling thread. */
#define GEMM_PAR_MIN_MACS (1 << 20)
/* Weight rows converted from f16/bf16 per block before one sgemm. */
#define LINEAR_ROW_BLOCK 256
/* Input rows per sgemm in the f16/bf16 block path: tiles of (input rows x
 * weight rows) give the pool enough tasks even when the weight is narrow. */
#define LINEAR_INPUT_BLOCK 256
/* Up to this many input rows (a decoder step of a few sequences) the linear is
 * bound by reading the weights: one pass of dot products over each weight row
 * beats sgemm, which would first pack (or for f16/bf16, convert) the weights. */
#define LINEAR_DOT_MAX_M 24

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_single_thread(void) { openblas_set_num_threads(1); }

void choir_blas_init(void) { pthread_once(&g_blas_once, blas_single_thread); }

static void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta,
                C, (blasint)ldc);
}

typedef struct gemm_job {
    bool ta, tb, split_rows;
    int64_t M, N, K, part;
    float alpha, beta;
    const float *A, *B;
    int64_t lda, ldb, ldc;
    float *C;
} gemm_job;

static void gemm_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const gemm_job *j = ctx;
    for (int64_t p = begin; p < end; p++) {
        int64_t lo = p * j->part;
        if (j->split_rows) {
            int64_t m = j->M - lo < j->part ? j->M - lo : j->part;
            if (m <= 0) continue;
            const float *A = j->ta ? j->A + lo : j->A + lo * j->lda;
            sgemm(j->ta, j->tb, m, j->N, j->K, j->alpha, A, j->lda, j->B, j->ldb, j->beta,
                  j->C + lo * j->ldc, j->ldc);
        } else {
            int64_t n = j->N - lo < j->part ? j->N - lo : j->part;
            if (n <= 0) continue;
            const float *B = j->tb ? j->B + lo * j->ldb : j->B + lo;
            sgemm(j->ta, j->tb, j->M, n, j->K, j->alpha, j->A, j->lda, B, j->ldb, j->beta,
                  j->C + lo, j->ldc);
        }
    }
}

void choir_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                    int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    choir_blas_init();
    if (K <= 0) { /* BLAS rejects a zero leading dimension; the product is empty anyway */
        for (int64_t i = 0; i < M; i++)
            for (int64_t jn = 0; jn < N; jn++)
                C[i * ldc + jn] = beta == 0.0f ? 0.0f : beta * C[i * ldc + jn];
        return;
    }
    choir_pool *pool = choir_pool_default();
    int threads = choir_pool_threads(pool);
    if (threads <= 1 || (double)M * (double)N * (double)K < (double)GEMM_PAR_MIN_MACS) {
        sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    gemm_job j = {trans_a, trans_b, M >= N, M, N, K, 0, alpha, beta, A, B, lda, ldb, ldc, C};
    /* One slice per thread, rounded to 16 so BLAS micro-kernels run full tiles. */
    int64_t len = j.split_rows ? M : N;
    int64_t part = (len + threads - 1) / threads;
    part = (part + 15) / 16 * 16;
    j.part = part;
    int64_t parts = (len + part - 1) / part;
    choir_pool_parallel_for(pool, parts, 1, gemm_range, &j);
}

/* --- linear ---------------------------------------------------------------- */

typedef struct linear_job {
    const choir_cpu_ops *ops;
    const float *x;
    int64_t M;
    const choir_weight *W;
    const float *bias;
    float *y;
    float *scratch;     /* LINEAR_ROW_BLOCK * cols floats per worker, or NULL */
    int64_t block_rows; /* weight rows per worker's scratch */
    int64_t *converted; /* per worker: the weight block its scratch holds, or -1 */
} linear_job;

/* y[m, r] = W[r] . x[m] for rows [begin, end) of W, weight row by weight row,
 * four input rows per pass over the weight row. */
static void linear_dot_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const linear_job *j = ctx;
    int64_t K = j->W->cols, N = j->W->rows;
    const float *wf = j->W->data;
    const uint16_t *wh = j->W->data;
    int64_t r = begin;
    /* Fewer than four inputs (a batch-1 step): four weight rows per pass, one
     * input load serving them; each result has the one-row dot's bits. */
    if (j->M < 4)
        for (; r + 4 <= end; r += 4)
            for (int64_t m = 0; m < j->M; m++) {
                float s[4];
                const float *xm = j->x + m * K;
                switch (j->W->kind) {
                case CHOIR_WEIGHT_F16: j->ops->dot_rows4_f16(wh + r * K, K, xm, K, s); break;
                case CHOIR_WEIGHT_BF16: j->ops->dot_rows4_bf16(wh + r * K, K, xm, K, s); break;
                default: j->ops->dot_rows4(wf + r * K, K, xm, K, s); break;
                }
                for (int q = 0; q < 4; q++)
                    j->y[m * N + r + q] = s[q] + (j->bias ? j->bias[r + q] : 0.0f);
            }
    for (; r < end; r++) {
        float b = j->bias ? j->bias[r] : 0.0f;
        int64_t m = 0;
        for (; m + 4 <= j->M; m += 4) {
            float s[4];
            const float *xm = j->x + m * K;
            switch (j->W->kind) {
            case CHOIR_WEIGHT_F16: j->ops->dot4_f16(wh + r * K, xm, K, K, s); break;
            case CHOIR_WEIGHT_BF16: j->ops->dot4_bf16(wh + r * K, xm, K, K, s); break;
            default: j->ops->dot4(wf + r * K, xm, K, K, s); break;
            }
            for (int q = 0; q < 4; q++)
                j->y[(m + q) * N + r] = s[q] + b;
        }
        for (; m < j->M; m++) {
            const float *xm = j->x + m * K;
            float s;
            switch (j->W->kind) {
            case CHOIR_WEIGHT_F16: s = j->ops->dot_f16(wh + r * K, xm, K); break;
            case CHOIR_WEIGHT_BF16: s = j->ops->dot_bf16(wh + r * K, xm, K); break;
            default: s = j->ops->dot(wf + r * K, xm, K); break;
            }
            j->y[m * N + r] = s + b;
        }
    }
}

/* Tiles of (LINEAR_INPUT_BLOCK input rows x LINEAR_ROW_BLOCK weight rows):
 * the weight block is converted to f32 in the worker's scratch (once, while
 * consecutive tiles share it), then one sgemm. */
static void linear_block_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const linear_job *j = ctx;
    int64_t K = j->W->cols, N = j->W->rows;
    int64_t m_blocks = (j->M + LINEAR_INPUT_BLOCK - 1) / LINEAR_INPUT_BLOCK;
    float *block = j->scratch + (int64_t)worker * j->block_rows * K;
    for (int64_t item = begin; item < end; item++) {
        int64_t b = item / m_blocks, m0 = (item % m_blocks) * LINEAR_INPUT_BLOCK;
        int64_t r0 = b * LINEAR_ROW_BLOCK;
        int64_t rows = N - r0 < LINEAR_ROW_BLOCK ? N - r0 : LINEAR_ROW_BLOCK;
        int64_t ms = j->M - m0 < LINEAR_INPUT_BLOCK ? j->M - m0 : LINEAR_INPUT_BLOCK;
        if (j->converted[worker] != b) {
            const uint16_t *src = (const uint16_t *)j->W->data + r0 * K;
            if (j->W->kind == CHOIR_WEIGHT_F16)
                j->ops->f16_to_f32(src, block, rows * K);
            else
                j->ops->bf16_to_f32(src, block, rows * K);
            j->converted[worker] = b;
        }
        sgemm(false, true, ms, rows, K, 1.0f, j->x + m0 * K, K, block, K, j->bias ? 1.0f : 0.0f,
              j->y + m0 * N + r0, N);
    }
}

/* Row tasks of a dot-path linear over N weight rows of K: at least ~32k
 * multiply-adds (64 KB of f16 weights) each, at most four per thread, of
 * equal size (a multiple of four rows): the pool's workers spin between
 * jobs, so even a decoder step's small projections split evenly instead of
 * leaving one thread a short remainder. */
static int64_t linear_dot_grain(int64_t M, int64_t N, int64_t K, int threads) {
    double macs = (double)K * (double)M * (double)N;
    int64_t tasks = (int64_t)(macs / 32768.0);
    if (tasks > 4 * (int64_t)threads) tasks = 4 * (int64_t)threads;
    if (tasks < 1) tasks = 1;
    int64_t grain = (N + tasks - 1) / tasks;
    return (grain + 3) / 4 * 4;
}

void choir_linear(const float *x, int64_t M, const choir_weight *W, const float *bias, float *y) {
    if (M <= 0 || W->rows <= 0) return;
    if (W->kind == CHOIR_WEIGHT_QUANT) {
        choir_qlinear(x, M, W, bias, y);
        return;
    }
    int64_t N = W->rows, K = W->cols;
    choir_blas_init();
    if (W->kind == CHOIR_WEIGHT_F32 && M > LINEAR_DOT_MAX_M) {
        if (bias)
            for (int64_t m = 0; m < M; m++)
                memcpy(y + m * N, bias, (size_t)N * sizeof(float));
        choir_gemm_f32(false, true, M, N, K, 1.0f, x, K, W->data, K, bias ? 1.0f : 0.0f, y, N);
        return;
    }
    choir_pool *pool = choir_pool_default();
    linear_job j = {choir_cpu_ops_now(), x, M, W, bias, y, NULL, 0, NULL};
    if (W->kind != CHOIR_WEIGHT_F32 && M > LINEAR_DOT_MAX_M && K > 0) {
        int threads = choir_pool_threads(pool);
        j.block_rows = N < LINEAR_ROW_BLOCK ? N : LINEAR_ROW_BLOCK;
        /* Even, so the per-worker block ids after the floats are 8-byte aligned. */
        size_t floats = ((size_t)threads * (size_t)j.block_rows * (size_t)K + 1) & ~(size_t)1;
        j.scratch = choir_kscratch_get(floats * sizeof(float) + (size_t)threads * sizeof(int64_t));
        /* Without scratch memory the dot path below still gives the same result, slower. */
        if (j.scratch) {
            if (bias)
                for (int64_t m = 0; m < M; m++)
                    memcpy(y + m * N, bias, (size_t)N * sizeof(float));
            j.converted = (int64_t *)(j.scratch + floats);
            for (int t = 0; t < threads; t++)
                j.converted[t] = -1;
            int64_t blocks = (N + LINEAR_ROW_BLOCK - 1) / LINEAR_ROW_BLOCK;
            int64_t m_blocks = (M + LINEAR_INPUT_BLOCK - 1) / LINEAR_INPUT_BLOCK;
            choir_pool_parallel_for(pool, blocks * m_blocks, 1, linear_block_range, &j);
            choir_kscratch_put(j.scratch);
            return;
        }
    }
    int64_t grain = linear_dot_grain(M, N, K, choir_pool_threads(pool));
    choir_pool_parallel_for(pool, N, grain, linear_dot_range, &j);
}

#define LINEAR_N_MAX 8
/* Tasks of one fused job (on the caller's stack, 16 KiB): four per thread
 * per linear, up to 8 linears of 16 threads or fewer linears of more. */
#define LINEAR_N_TASKS 512

/* Several dot-path linears as one job: task t is rows [lo, hi) of weight
 * `which`, the slices each linear alone would have been split into. */
typedef struct linear_n_job {
    linear_job jobs[LINEAR_N_MAX];
    int32_t which[LINEAR_N_TASKS];
    int32_t lo[LINEAR_N_TASKS], hi[LINEAR_N_TASKS];
} linear_n_job;

static void linear_n_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const linear_n_job *j = ctx;
    for (int64_t t = begin; t < end; t++)
        linear_dot_range((void *)&j->jobs[j->which[t]], j->lo[t], j->hi[t], worker);
}

void choir_linear_n(const float *x, int64_t M, int n, const choir_weight *const *W,
                    const float *const *bias, float *const *y) {
    if (M <= 0 || n <= 0) return;
    bool fused = n <= LINEAR_N_MAX && M <= LINEAR_DOT_MAX_M;
    for (int i = 0; fused && i < n; i++)
        fused = W[i]->kind != CHOIR_WEIGHT_QUANT && W[i]->cols == W[0]->cols && W[i]->rows > 0 &&
                W[i]->rows <= INT32_MAX;
    choir_pool *pool = choir_pool_default();
    int threads = choir_pool_threads(pool);
    if (!fused || (int64_t)n * 4 * threads > LINEAR_N_TASKS) {
        for (int i = 0; i < n; i++) choir_linear(x, M, W[i], bias[i], y[i]);
        return;
    }
    choir_blas_init();
    linear_n_job j;
    const choir_cpu_ops *ops = choir_cpu_ops_now();
    int64_t tasks = 0;
    for (int i = 0; i < n; i++) {
        j.jobs[i] = (linear_job){ops, x, M, W[i], bias[i], y[i], NULL, 0, NULL};
        int64_t N = W[i]->rows, grain = linear_dot_grain(M, N, W[i]->cols, threads);
        for (int64_t r = 0; r < N; r += grain, tasks++) {
            j.which[tasks] = i;
            j.lo[tasks] = (int32_t)r;
            j.hi[tasks] = (int32_t)(r + grain < N ? r + grain : N);
        }
    }
    choir_pool_parallel_for(pool, tasks, 1, linear_n_range, &j);
}

size_t choir_linear_scratch_bytes(int64_t M, const choir_weight *W) {
    if (M <= 0 || W->rows <= 0) return 0;
    if (W->kind == CHOIR_WEIGHT_QUANT) return choir_qlinear_scratch_bytes(M, W);
    if (W->kind == CHOIR_WEIGHT_F32 || M <= LINEAR_DOT_MAX_M || W->cols <= 0) return 0;
    size_t threads = (size_t)choir_pool_threads(choir_pool_default());
    size_t rows = (size_t)(W->rows < LINEAR_ROW_BLOCK ? W->rows : LINEAR_ROW_BLOCK);
    size_t floats = (threads * rows * (size_t)W->cols + 1) & ~(size_t)1;
    return floats * sizeof(float) + threads * sizeof(int64_t);
}
