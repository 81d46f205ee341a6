/* Stand-in for OpenBLAS's cblas.h in the standalone GPU-machine build
 * (tests/cuda/CMakeLists.txt), where OpenBLAS is not installed. Declares only
 * what choir's CPU reference kernels call; cblas_loops.c implements it with
 * plain loops. Never used by the normal build. */
#ifndef CHOIR_STUB_CBLAS_H
#define CHOIR_STUB_CBLAS_H

typedef int blasint;
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 blasint M, blasint N, blasint K, float alpha, const float *A, blasint lda,
                 const float *B, blasint ldb, float beta, float *C, blasint ldc);
void cblas_sgemv(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, blasint M, blasint N,
                 float alpha, const float *A, blasint lda, const float *x, blasint incx,
                 float beta, float *y, blasint incy);
void openblas_set_num_threads(int n);

#endif
