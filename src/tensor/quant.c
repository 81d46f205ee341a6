/* MLX affine group quantization: dequantization and quantized products.
 *
 * The reference path dequantizes one group of a weight row at a time into a
 * small stack buffer and dots it with every input row, so it never allocates.
 * Work is split over output rows on the default pool; SIMD twins live in
 * cpu/x86/quant_avx2.c and are chosen by choir_kernels_isa(). */
#include <string.h>

#include "choir/alloc.h"

#include "choir/kernels.h"
#include "choir/pool.h"
#include "choir/quant.h"
#include "tensor/cpu/cpu_kernels.h"
#include "tensor/quant_internal.h"

int choir_quant_supported(int bits, int group_size) {
    int bits_ok = bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
    int group_ok = group_size == 32 || group_size == 64 || group_size == 128;
    return bits_ok && group_ok;
}

static float sb_value(const void *p, choir_dtype dt, int64_t i) {
    switch (dt) {
    case CHOIR_DTYPE_F16: return choir_f16_to_f32(((const uint16_t *)p)[i]);
    case CHOIR_DTYPE_BF16: return choir_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

void choir_quant_group_params(const choir_weight *W, int64_t r, int64_t g, float *scale,
                              float *bias) {
    int64_t idx = r * (W->cols / W->group_size) + g;
    *scale = sb_value(W->scales, W->sb_dtype, idx);
    *bias = sb_value(W->biases, W->sb_dtype, idx);
}

static void dequant_row_ref(const choir_weight *W, int64_t r, float *out) {
    const uint32_t *row = (const uint32_t *)W->data + r * choir_quant_row_words(W);
    int64_t groups = W->cols / W->group_size;
    for (int64_t g = 0; g < groups; g++) {
        float s, b;
        choir_quant_group_params(W, r, g, &s, &b);
        int64_t c0 = g * W->group_size;
        for (int64_t c = c0; c < c0 + W->group_size; c++)
            out[c] = s * (float)choir_quant_code(row, c, W->bits) + b;
    }
}

void choir_quant_dequant_row(const choir_weight *W, int64_t r, float *out) {
#if defined(CHOIR_X86)
    if (choir_use_avx2()) {
        choir_quant_dequant_row_avx2(W, r, out);
        return;
    }
#endif
    dequant_row_ref(W, r, out);
}

void choir_qlinear_ref_rows(const float *x, int64_t M, const choir_weight *W, const float *bias,
                            float *y, int64_t n0, int64_t n1) {
    const int64_t K = W->cols, N = W->rows, G = W->group_size;
    const int64_t words = choir_quant_row_words(W);
    float w[128]; /* one dequantized group; group_size <= 128 */
    for (int64_t n = n0; n < n1; n++) {
        const uint32_t *row = (const uint32_t *)W->data + n * words;
        float b0 = bias ? bias[n] : 0.0f;
        for (int64_t m = 0; m < M; m++) y[m * N + n] = b0;
        for (int64_t g = 0; g < K / G; g++) {
            float s, b;
            choir_quant_group_params(W, n, g, &s, &b);
            for (int64_t i = 0; i < G; i++)
                w[i] = s * (float)choir_quant_code(row, g * G + i, W->bits) + b;
            for (int64_t m = 0; m < M; m++) {
                const float *xg = x + m * K + g * G;
                float acc = 0.0f;
                for (int64_t i = 0; i < G; i++) acc += w[i] * xg[i];
                y[m * N + n] += acc;
            }
        }
    }
}

typedef struct qlinear_job {
    const float *x;
    int64_t M;
    const choir_weight *W;
    const float *bias;
    float *y;
    const float *xsum;  /* per (m, group) sums of x, for the SIMD path */
    const float *xperm; /* x in word-lane order (4/8-bit), or NULL */
    int simd;
} qlinear_job;

static void qlinear_range(void *ctx, int64_t n0, int64_t n1, int worker) {
    (void)worker;
    const qlinear_job *j = ctx;
#if defined(CHOIR_X86)
    if (j->simd == 2) {
        choir_qlinear_avx512_rows(j->M, j->W, j->bias, j->y, n0, n1, j->xsum, j->xperm);
        return;
    }
    if (j->simd) {
        choir_qlinear_avx2_rows(j->x, j->M, j->W, j->bias, j->y, n0, n1, j->xsum, j->xperm);
        return;
    }
#endif
    choir_qlinear_ref_rows(j->x, j->M, j->W, j->bias, j->y, n0, n1);
}

#define QLINEAR_M_BLOCK 32

void choir_qlinear(const float *x, int64_t M, const choir_weight *W, const float *bias, float *y) {
    if (M <= 0 || W->rows <= 0) return;
    qlinear_job job = {x, M, W, bias, y, NULL, NULL, 0};
    /* Decoding one token (M = 1) needs no heap: scratch lives here. */
    float xsum_local[1024], xperm_local[4096];
    float *xsum_heap = NULL, *xperm_heap = NULL;
#if defined(CHOIR_X86)
    if (choir_use_avx2()) {
        const int64_t G = W->group_size, groups = W->cols / G;
        float *xsum = xsum_local;
        if (M * groups > (int64_t)(sizeof xsum_local / sizeof *xsum_local))
            xsum = xsum_heap = choir_kscratch_get((size_t)(M * groups) * sizeof(float));
        if (xsum) {
            for (int64_t m = 0; m < M; m++)
                for (int64_t g = 0; g < groups; g++) {
                    const float *xg = x + m * W->cols + g * G;
                    float s = 0.0f;
                    for (int64_t i = 0; i < G; i++) s += xg[i];
                    xsum[m * groups + g] = s;
                }
            job.xsum = xsum;
            job.simd = 1;
        }
        /* The lane order makes 4- and 8-bit decoding shuffle-free. It is
         * used for every M (never only for some), so that a row's result
         * does not depend on the batch it came in. */
        /* On AVX-512 the blocks are sixteen words (x86/avx512_quant.c), chosen
         * by the weight's shape alone for the same reason. */
        const bool lanes = W->bits == 4 || W->bits == 8;
        const int words = lanes && choir_kernels_isa() == CHOIR_ISA_AVX512 &&
                                  W->cols % (512 / W->bits) == 0
                              ? 16
                              : 8;
        if (xsum && lanes && W->cols % (words * 32 / W->bits) == 0) {
            float *xperm = xperm_local;
            if (M * W->cols > (int64_t)(sizeof xperm_local / sizeof *xperm_local))
                xperm = xperm_heap = choir_kscratch_get((size_t)(M * W->cols) * sizeof(float));
            for (int64_t m = 0; xperm && m < M; m++)
                choir_quant_permute_x(x + m * W->cols, W->cols, W->bits, words,
                                      xperm + m * W->cols);
            job.xperm = xperm;
            if (xperm && words == 16) job.simd = 2;
        }
    }
#endif
    /* Enough rows per task that a task streams at least ~64 KiB of weights. */
    int64_t row_bytes = W->cols * W->bits / 8;
    int64_t grain = row_bytes > 0 ? (65536 + row_bytes - 1) / row_bytes : 1;
    if (grain < 1) grain = 1;
    /* Inputs go in blocks of rows that stay in L2 while the weight streams
     * past them once per block. */
    const int64_t groups = W->cols / W->group_size;
    for (int64_t m0 = 0; m0 < M; m0 += QLINEAR_M_BLOCK) {
        qlinear_job blk = job;
        blk.x = x + m0 * W->cols;
        blk.y = y + m0 * W->rows;
        blk.M = M - m0 < QLINEAR_M_BLOCK ? M - m0 : QLINEAR_M_BLOCK;
        if (job.xsum) blk.xsum = job.xsum + m0 * groups;
        if (job.xperm) blk.xperm = job.xperm + m0 * W->cols;
        choir_pool_parallel_for(choir_pool_default(), W->rows, grain, qlinear_range, &blk);
    }
    choir_kscratch_put(xsum_heap);
    choir_kscratch_put(xperm_heap);
}

size_t choir_qlinear_scratch_bytes(int64_t M, const choir_weight *W) {
    /* The AVX2 path's input sums and permuted inputs, past what fits in the
     * call's own stack arrays (an upper bound: the permutation is used only
     * for 4- and 8-bit codes). */
    if (M <= 0 || W->group_size <= 0) return 0;
    int64_t groups = W->cols / W->group_size, need = 0;
    if (M * groups > 1024) need += M * groups * (int64_t)sizeof(float) + CHOIR_ALIGN;
    if (M * W->cols > 4096) need += M * W->cols * (int64_t)sizeof(float) + CHOIR_ALIGN;
    return (size_t)need;
}

void choir_quant_permute_x(const float *x, int64_t K, int bits, int words, float *xp) {
    const int cpw = 32 / bits;
    const int64_t block = (int64_t)words * cpw;
    for (int64_t b = 0; b < K / block; b++)
        for (int k = 0; k < cpw; k++)
            for (int i = 0; i < words; i++)
                xp[b * block + k * words + i] = x[b * block + i * cpw + k];
}
