/* AVX-512 twin of the 4- and 8-bit quantized product (compiled with
 * -mavx512f -mavx512bw -mavx512vl beside AVX2's flags; called only when
 * choir_kernels_isa() is CHOIR_ISA_AVX512).
 *
 * The same scheme as quant_avx2.c's word-lane kernel, on sixteen words at a
 * time: x is permuted so that code k of the sixteen words of a block lies in
 * sixteen consecutive floats (choir_quant_permute_x with 16 words), so one
 * 512-bit load of weights and, per code position, a shift, a mask, a convert
 * and an FMA decode and multiply sixteen codes. That halves the instructions
 * per weight byte of the AVX2 kernel, which kept a batch-1 decoder step from
 * streaming its quantized weights as fast as it streams f16 ones.
 *
 * A block is 64 (8-bit) or 128 (4-bit) codes, so it can span two or four
 * groups (groups of 32 or 64): lane i (word i) belongs to group
 * (block start + i * codes per word) / group size, and the scale vector is
 * built per block accordingly. The bias term is b * sum(x over the group),
 * from the caller's per-group sums (xsum), sixteen groups per FMA. Two input rows can share the
 * decoding (rows2); each row's arithmetic is the same either way, so a row's
 * result does not depend on the batch it came in. */
#include <immintrin.h>
#include <string.h>

#include "choir/quant.h"
#include "tensor/quant_internal.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

static inline float sb_at(const void *p, choir_dtype dt, int64_t i) {
    if (dt == CHOIR_DTYPE_BF16) {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    if (dt == CHOIR_DTYPE_F16) return _cvtsh_ss(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* The scales of the groups block b of row n covers, one per lane. */
static ALWAYS_INLINE __m512 block_scales(const choir_weight *W, int64_t base, int64_t b,
                                         int64_t block, int gshift, int per_block) {
    const int64_t g = base + ((b * block) >> gshift);
    const void *s = W->scales;
    if (per_block == 1) return _mm512_set1_ps(sb_at(s, W->sb_dtype, g));
    if (per_block == 2)
        return _mm512_mask_blend_ps((__mmask16)0xFF00, _mm512_set1_ps(sb_at(s, W->sb_dtype, g)),
                                    _mm512_set1_ps(sb_at(s, W->sb_dtype, g + 1)));
    const __m128 s4 = _mm_setr_ps(sb_at(s, W->sb_dtype, g), sb_at(s, W->sb_dtype, g + 1),
                                  sb_at(s, W->sb_dtype, g + 2), sb_at(s, W->sb_dtype, g + 3));
    const __m512i lane_group = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(lane_group, _mm512_castps128_ps512(s4));
}

/* Code k of the block's sixteen words against x (and a second input row). */
#define LANE_STEP(k)                                                                               \
    do {                                                                                           \
        __m512i t_ = (k) ? _mm512_srli_epi32(v, bits * (k)) : v;                                   \
        if ((k) != cpw - 1) t_ = _mm512_and_si512(t_, mask);                                       \
        const __m512 q_ = _mm512_cvtepi32_ps(t_);                                                  \
        if ((k) & 1) {                                                                             \
            a1 = _mm512_fmadd_ps(q_, _mm512_loadu_ps(xb + 16 * (k)), a1);                          \
            if (rows2) c1 = _mm512_fmadd_ps(q_, _mm512_loadu_ps(xb + K + 16 * (k)), c1);           \
        } else {                                                                                   \
            a0 = _mm512_fmadd_ps(q_, _mm512_loadu_ps(xb + 16 * (k)), a0);                          \
            if (rows2) c0 = _mm512_fmadd_ps(q_, _mm512_loadu_ps(xb + K + 16 * (k)), c0);           \
        }                                                                                          \
    } while (0)

/* Up to sixteen scales or biases from i on (m: the lanes wanted), as f32. */
static ALWAYS_INLINE __m512 sb16(const void *p, choir_dtype dt, int64_t i, __mmask16 m) {
    if (dt == CHOIR_DTYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
    if (dt == CHOIR_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One block: its codes against x (and a second row), scaled into r (and s). */
#define BLOCK(b, r, s)                                                                             \
    do {                                                                                           \
        const __m512i v = _mm512_loadu_si512((const void *)(row + 16 * (b)));                     \
        const float *xb = xp + (b) * block;                                                        \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, c0 = a0, c1 = a0;                                \
        LANE_STEP(0);                                                                              \
        LANE_STEP(1);                                                                              \
        LANE_STEP(2);                                                                              \
        LANE_STEP(3);                                                                              \
        if (bits == 4) {                                                                           \
            LANE_STEP(4);                                                                          \
            LANE_STEP(5);                                                                          \
            LANE_STEP(6);                                                                          \
            LANE_STEP(7);                                                                          \
        }                                                                                          \
        const __m512 sv = block_scales(W, n * groups, (b), block, gshift, per_block);              \
        r = _mm512_fmadd_ps(sv, _mm512_add_ps(a0, a1), r);                                         \
        if (rows2) s = _mm512_fmadd_ps(sv, _mm512_add_ps(c0, c1), s);                              \
    } while (0)

static ALWAYS_INLINE void row_dot16(const uint32_t *row, const float *xp, const float *xsum,
                                    const choir_weight *W, int64_t n, const int rows2, float *out,
                                    const int bits) {
    const int cpw = 32 / bits;
    const int64_t block = 16 * cpw;
    const int64_t K = W->cols, G = W->group_size, groups = K / G, blocks = K / block;
    const int gshift = __builtin_ctzll((unsigned long long)G); /* G is a power of two */
    const int per_block = block > G ? (int)(block / G) : 1;
    const __m512i mask = _mm512_set1_epi32((1 << bits) - 1);
    __m512 r0a = _mm512_setzero_ps(), r0b = r0a, r1a = r0a, r1b = r0a;
    int64_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        BLOCK(b, r0a, r1a);
        BLOCK(b + 1, r0b, r1b);
    }
    if (b < blocks) BLOCK(b, r0a, r1a);
    /* The biases: sum over groups of b_g * sum(x over g), sixteen at a time. */
    for (int64_t g = 0; g < groups; g += 16) {
        const __mmask16 m = groups - g >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (groups - g)) - 1);
        const __m512 bv = sb16(W->biases, W->sb_dtype, n * groups + g, m);
        r0b = _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(m, xsum + g), r0b);
        if (rows2) r1b = _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(m, xsum + groups + g), r1b);
    }
    out[0] = _mm512_reduce_add_ps(_mm512_add_ps(r0a, r0b));
    if (rows2) out[1] = _mm512_reduce_add_ps(_mm512_add_ps(r1a, r1b));
}
#undef BLOCK
#undef LANE_STEP

static ALWAYS_INLINE void rows16(int64_t M, const choir_weight *W, const float *bias, float *y,
                                 int64_t n0, int64_t n1, const float *xsum, const float *xperm,
                                 const int bits) {
    const int64_t K = W->cols, N = W->rows, groups = K / W->group_size;
    const int64_t row_words = K * bits / 32;
    for (int64_t n = n0; n < n1; n++) {
        const uint32_t *row = (const uint32_t *)W->data + n * row_words;
        const float b0 = bias ? bias[n] : 0.0f;
        for (int64_t m = 0; m < M; m += 2) {
            float out[2];
            if (m + 1 < M) {
                row_dot16(row, xperm + m * K, xsum + m * groups, W, n, 1, out, bits);
                y[m * N + n] = out[0] + b0;
                y[(m + 1) * N + n] = out[1] + b0;
            } else {
                row_dot16(row, xperm + m * K, xsum + m * groups, W, n, 0, out, bits);
                y[m * N + n] = out[0] + b0;
            }
        }
    }
}

void choir_qlinear_avx512_rows(int64_t M, const choir_weight *W, const float *bias, float *y,
                               int64_t n0, int64_t n1, const float *xsum, const float *xperm) {
    if (W->bits == 4) rows16(M, W, bias, y, n0, n1, xsum, xperm, 4);
    else rows16(M, W, bias, y, n0, n1, xsum, xperm, 8);
}
