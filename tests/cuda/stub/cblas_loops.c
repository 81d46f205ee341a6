/* Plain-loop BLAS for the standalone GPU-machine build (see cblas.h here).
 * Row-major only, which is all choir calls. Slow but exact enough to be the
 * oracle for the CUDA kernel checks. */
#include "cblas.h"

void openblas_set_num_threads(int n) { (void)n; }

static float at(const float *X, blasint ld, int trans, blasint r, blasint c) {
    return trans ? X[(long)c * ld + r] : X[(long)r * ld + c];
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 blasint M, blasint N, blasint K, float alpha, const float *A, blasint lda,
                 const float *B, blasint ldb, float beta, float *C, blasint ldc) {
    (void)order;
    int tA = ta == CblasTrans, tB = tb == CblasTrans;
    for (blasint i = 0; i < M; i++) {
        float *c = C + (long)i * ldc;
        for (blasint j = 0; j < N; j++) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
        for (blasint k = 0; k < K; k++) {
            float a = alpha * at(A, lda, tA, i, k);
            if (!tB) {
                const float *b = B + (long)k * ldb;
                for (blasint j = 0; j < N; j++) c[j] += a * b[j];
            } else {
                for (blasint j = 0; j < N; j++) c[j] += a * B[(long)j * ldb + k];
            }
        }
    }
}

void cblas_sgemv(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, blasint M, blasint N,
                 float alpha, const float *A, blasint lda, const float *x, blasint incx,
                 float beta, float *y, blasint incy) {
    (void)order;
    int tA = ta == CblasTrans;
    blasint rows = tA ? N : M, cols = tA ? M : N;
    for (blasint i = 0; i < rows; i++) {
        float s = 0.0f;
        for (blasint j = 0; j < cols; j++) s += at(A, lda, tA, i, j) * x[(long)j * incx];
        y[(long)i * incy] = alpha * s + (beta == 0.0f ? 0.0f : beta * y[(long)i * incy]);
    }
}
