/* Internal to the quantization code: bit extraction shared by the reference
 * and SIMD kernels, and the SIMD entry points chosen at run time. */
#ifndef CHOIR_QUANT_INTERNAL_H
#define CHOIR_QUANT_INTERNAL_H

#include <stdint.h>

#include "choir/tensor.h"

/* Code c of a packed row (LSB-first bitstream over little-endian uint32 words,
 * MLX layout). Codes of 3, 5 and 6 bits may straddle two words. */
static inline uint32_t choir_quant_code(const uint32_t *row, int64_t c, int bits) {
    int64_t off = c * bits;
    int64_t word = off >> 5;
    int sh = (int)(off & 31);
    uint32_t v = row[word] >> sh;
    if (sh + bits > 32) v |= row[word + 1] << (32 - sh);
    return v & ((1u << bits) - 1u);
}

/* Stores code q at position c of a packed row that starts zeroed. */
static inline void choir_quant_put_code(uint32_t *row, int64_t c, int bits, uint32_t q) {
    int64_t off = c * bits;
    int64_t word = off >> 5;
    int sh = (int)(off & 31);
    row[word] |= q << sh;
    if (sh + bits > 32) row[word + 1] |= q >> (32 - sh);
}

/* Packed uint32 words per row. */
static inline int64_t choir_quant_row_words(const choir_weight *W) {
    return W->cols * W->bits / 32;
}

/* Scale and bias of group g of row r, as f32. */
void choir_quant_group_params(const choir_weight *W, int64_t r, int64_t g, float *scale,
                              float *bias);

/* For 4- and 8-bit weights: x[K] reordered so that each block of
 * words*32/bits elements is laid out code-major over the block's `words`
 * words (8 for AVX2, 16 for AVX-512), xp[b*B + k*words + i] =
 * x[b*B + i*(32/bits) + k]. K must divide by B. */
void choir_quant_permute_x(const float *x, int64_t K, int bits, int words, float *xp);

/* Reference products over output rows [n0, n1): y[m, n] for all m < M. */
void choir_qlinear_ref_rows(const float *x, int64_t M, const choir_weight *W, const float *bias,
                            float *y, int64_t n0, int64_t n1);

#if defined(CHOIR_X86)
/* AVX2/FMA twins (src/tensor/cpu/x86/quant_avx2.c); same contract as the
 * reference row functions. */
void choir_qlinear_avx2_rows(const float *x, int64_t M, const choir_weight *W, const float *bias,
                             float *y, int64_t n0, int64_t n1, const float *xsum,
                             const float *xperm);
void choir_quant_dequant_row_avx2(const choir_weight *W, int64_t r, float *out);
/* AVX-512 (x86/avx512_quant.c): 4- and 8-bit weights only, with x permuted
 * over 16 words (K divisible by 512/bits); same contract otherwise. */
void choir_qlinear_avx512_rows(int64_t M, const choir_weight *W, const float *bias, float *y,
                               int64_t n0, int64_t n1, const float *xsum, const float *xperm);
#endif

#endif
