/* Internal: the kernel twins behind include/choir/kernels.h.
 *
 * Each hot inner loop has a portable C version (choir_ref_*) and, on x86-64,
 * an AVX2/FMA/F16C version (choir_avx2_*, in cpu/x86/, compiled with those
 * instruction sets). The public kernels pick one per call from the ISA in use,
 * so tests can force the reference and compare. On AVX-512 CPUs the
 * weight-streaming dots and conversions have a third twin (cpu/x86/
 * avx512_ops.c) and everything else runs the AVX2 one. Only call
 * choir_avx2_* when choir_use_avx2(). */
#ifndef CHOIR_CPU_KERNELS_H
#define CHOIR_CPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "choir/kernels.h"

/* True when the AVX2 twins may run now. */
static inline bool choir_use_avx2(void) {
#if defined(CHOIR_X86)
    choir_isa isa = choir_kernels_isa();
    return isa == CHOIR_ISA_AVX2 || isa == CHOIR_ISA_AVX512;
#else
    return false;
#endif
}

/* Kernel scratch (choir_kernels_bind_scratch): from the calling thread's
 * bound block when it has room, else choir_alloc (counted as a miss).
 * Blocks are given back in any order with choir_kscratch_put. */
void *choir_kscratch_get(size_t bytes);
void choir_kscratch_put(void *p);

/* Sets OpenBLAS to one thread, once: choir's pool does all kernel threading,
 * so BLAS calls made from pool workers never nest thread pools. */
void choir_blas_init(void);

/* A table of the twin-able inner loops. */
typedef struct choir_cpu_ops {
    float (*dot)(const float *a, const float *b, int64_t n);
    float (*dot_f16)(const uint16_t *w, const float *x, int64_t n);
    float (*dot_bf16)(const uint16_t *w, const float *x, int64_t n);
    /* out[m] = w . x[m * ldx ..] for four input rows m = 0..3: one pass over
     * the weight row serves four inputs (small-batch linear layers). */
    void (*dot4)(const float *w, const float *x, int64_t ldx, int64_t n, float *out);
    void (*dot4_f16)(const uint16_t *w, const float *x, int64_t ldx, int64_t n, float *out);
    void (*dot4_bf16)(const uint16_t *w, const float *x, int64_t ldx, int64_t n, float *out);
    /* out[r] = w[r * ldw ..] . x for four weight rows r = 0..3 and one input
     * (a batch-1 linear layer): each out[r] has exactly the bits of dot(w_r,
     * x), so a row's result does not depend on how rows were grouped. */
    void (*dot_rows4)(const float *w, int64_t ldw, const float *x, int64_t n, float *out);
    void (*dot_rows4_f16)(const uint16_t *w, int64_t ldw, const float *x, int64_t n, float *out);
    void (*dot_rows4_bf16)(const uint16_t *w, int64_t ldw, const float *x, int64_t n, float *out);
    /* Attention of one query row over n keys (a decoder step):
     * scores[j] = scale * q . k[j * ldk ..] (Dh elements each), and
     * out[0..Dh) = sum_j p[j] * v[j * ldv ..]. */
    void (*attn_scores)(const float *q, const float *k, int64_t ldk, int64_t n, int64_t Dh,
                        float scale, float *scores);
    void (*attn_wsum)(const float *p, const float *v, int64_t ldv, int64_t n, int64_t Dh,
                      float *out);
    /* The same over f16 keys and values (a cache kept in half the bytes),
     * each value widened where it is read: the f32 result over the rounded
     * cache. */
    void (*attn_scores_f16)(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                            int64_t Dh, float scale, float *scores);
    void (*attn_wsum_f16)(const float *p, const uint16_t *v, int64_t ldv, int64_t n, int64_t Dh,
                          float *out);
    /* And over bf16 keys and values (a bf16 model's caches). */
    void (*attn_scores_bf16)(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                             int64_t Dh, float scale, float *scores);
    void (*attn_wsum_bf16)(const float *p, const uint16_t *v, int64_t ldv, int64_t n,
                           int64_t Dh, float *out);
    /* The same for G adjacent heads of one query row, each cached row walked
     * whole (G * Dh contiguous values) before the next, the order in which
     * the hardware prefetchers stream (one head's slice of every row, a model
     * row apart, reads at about a third of that: bench_kernels --step):
     * scores[h * lds + j] = scale * q[h * Dh ..] . k[j * ldk + h * Dh ..] and
     * out[h * Dh + c] = sum_j p[h * ldp + j] * v[j * ldv + h * Dh + c].
     * Dh a multiple of 16. */
    void (*attn_scores_heads_f16)(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                  int64_t Dh, int64_t G, float scale, float *scores, int64_t lds);
    void (*attn_wsum_heads_f16)(const float *p, int64_t ldp, const uint16_t *v, int64_t ldv,
                                int64_t n, int64_t Dh, int64_t G, float *out);
    void (*attn_scores_heads_bf16)(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                   int64_t Dh, int64_t G, float scale, float *scores, int64_t lds);
    void (*attn_wsum_heads_bf16)(const float *p, int64_t ldp, const uint16_t *v, int64_t ldv,
                                 int64_t n, int64_t Dh, int64_t G, float *out);
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
    void (*bf16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_bf16)(const float *src, uint16_t *dst, int64_t n);
    void (*add)(const float *a, const float *b, float *y, int64_t n);
    void (*mul)(const float *a, const float *b, float *y, int64_t n);
    void (*scale)(float *x, float s, int64_t n);
    void (*axpy)(float a, const float *x, float *y, int64_t n); /* y += a*x */
    void (*gelu_erf)(float *x, int64_t n);
    void (*gelu_tanh)(float *x, int64_t n);
    void (*leaky_relu)(float *x, int64_t n, float slope);
    void (*sigmoid)(float *x, int64_t n);
    void (*tanh)(float *x, int64_t n);
    void (*silu)(float *x, int64_t n);
    /* x += inv_alpha * sin(alpha * x)^2 */
    void (*snake)(float *x, int64_t n, float alpha, float inv_alpha);
    /* Mean and biased variance of x[n] (two passes). */
    void (*mean_var)(const float *x, int64_t n, float *mean, float *var);
    /* y = (x - mean) * inv * gamma + beta, gamma/beta may be NULL. */
    void (*normalize)(const float *x, float *y, int64_t n, float mean, float inv,
                      const float *gamma, const float *beta);
    /* y = (x - mean) * a + b with scalar a, b. */
    void (*affine)(const float *x, float *y, int64_t n, float mean, float a, float b);
    void (*softmax_row)(float *x, int64_t n);
    /* x[i] = exp(x[i] - max x) without the normalisation; returns the sum
     * and the max in *max (every entry -inf: zeros, sum 0): a piece of a
     * softmax that other pieces are merged with. */
    float (*exp_row)(float *x, int64_t n, float *max);
} choir_cpu_ops;

extern const choir_cpu_ops choir_cpu_ops_ref;
#if defined(CHOIR_X86)
extern const choir_cpu_ops choir_cpu_ops_avx2;
/* The AVX-512 table: AVX2's with the dots and conversions replaced. */
const choir_cpu_ops *choir_cpu_ops_avx512(void);
#endif

#if defined(CHOIR_X86)
/* AVX-512F f32 product for the convolutions (x86/avx512_gemm.c); only call
 * it when choir_kernels_isa() == CHOIR_ISA_AVX512. B is packed in panels of
 * CHOIR_G512_NR columns: element (k, n) of B at
 * Bp[(n / NR) * K * NR + k * NR + n % NR], columns past N zero, Bp 64-byte
 * aligned; choir_g512_bpack_floats(K, N) floats. */
#define CHOIR_G512_MR 8
#define CHOIR_G512_NR 48
#define CHOIR_G512_KC 256 /* inner-dimension slice (the kernel's own blocking) */
static inline int64_t choir_g512_bpack_floats(int64_t K, int64_t N) {
    return (N + CHOIR_G512_NR - 1) / CHOIR_G512_NR * CHOIR_G512_NR * K;
}
/* Packs row-major B [K, N] (row stride ldb). */
void choir_g512_pack_b(const float *B, int64_t ldb, int64_t K, int64_t N, float *Bp);
/* Packs row k of B (N floats at row). */
void choir_g512_pack_b_row(const float *row, int64_t N, int64_t k, int64_t K, float *Bp);
/* Packs row k of a convolution's im2col B straight from its input row xr:
 * B(k, n) = xr[base + n * stride] for n in [lo, hi) (the frames inside the
 * input), zero elsewhere, N frames. */
void choir_g512_pack_conv_row(const float *xr, int64_t base, int stride, int64_t lo, int64_t hi,
                              int64_t N, int64_t k, int64_t K, float *Bp);
/* C[m, n] (+)= sum_k A(m, k) B(k, n) for m < M, n < N, where A(m, k) =
 * A[m * ars + k * acs] (a row-major A: ars = lda, acs = 1; a transposed one:
 * ars = 1, acs = lda). C row-major with row stride ldc; accumulate adds to C,
 * else C is overwritten. Single-threaded; callers split M or N over the pool. */
void choir_g512_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs,
                     const float *Bp, float *C, int64_t ldc, bool accumulate);
#endif

/* The table for the ISA in use now. */
static inline const choir_cpu_ops *choir_cpu_ops_now(void) {
#if defined(CHOIR_X86)
    choir_isa isa = choir_kernels_isa();
    if (isa == CHOIR_ISA_AVX2) return &choir_cpu_ops_avx2;
    if (isa == CHOIR_ISA_AVX512) return choir_cpu_ops_avx512();
#endif
    return &choir_cpu_ops_ref;
}

#endif
