/* AVX2/FMA twins of the quantized kernels (compiled with -mavx2 -mfma -mf16c,
 * called only when choir_kernels_isa() says the CPU has them).
 *
 * Eight codes are decoded at a time: 8 codes of b bits are exactly b bytes,
 * so chunk j of a row starts at byte j*b. The group's dot product is taken
 * against the raw codes and the affine map applied once per group:
 *   sum_i x_i (s q_i + b) = s * sum_i x_i q_i + b * sum_i x_i,
 * with the per-group sums of x computed once per call (xsum). */
#include <immintrin.h>
#include <string.h>

#include "choir/quant.h"
#include "tensor/quant_internal.h"

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* For 2, 3, 5 and 6 bits: code k of a chunk lies in the 16-bit window at
 * byte (bits*k)/8, shifted by (bits*k)%8. One byte shuffle gathers the eight
 * windows into 32-bit lanes, one variable shift aligns them. Rows: 2,3,5,6. */
static const int8_t k_window_bytes[4][32] = {
    {0, 1, -128, -128, 0, 1, -128, -128, 0, 1, -128, -128, 0, 1, -128, -128, 1, 2, -128, -128, 1, 2, -128, -128, 1, 2, -128, -128, 1, 2, -128, -128}, /* 2-bit */
    {0, 1, -128, -128, 0, 1, -128, -128, 0, 1, -128, -128, 1, 2, -128, -128, 1, 2, -128, -128, 1, 2, -128, -128, 2, 3, -128, -128, 2, 3, -128, -128}, /* 3-bit */
    {0, 1, -128, -128, 0, 1, -128, -128, 1, 2, -128, -128, 1, 2, -128, -128, 2, 3, -128, -128, 3, 4, -128, -128, 3, 4, -128, -128, 4, 5, -128, -128}, /* 5-bit */
    {0, 1, -128, -128, 0, 1, -128, -128, 1, 2, -128, -128, 2, 3, -128, -128, 3, 4, -128, -128, 3, 4, -128, -128, 4, 5, -128, -128, 5, 6, -128, -128}, /* 6-bit */
};
static const int32_t k_window_shift[4][8] = {
    {0, 2, 4, 6, 0, 2, 4, 6},
    {0, 3, 6, 1, 4, 7, 2, 5},
    {0, 5, 2, 7, 4, 1, 6, 3},
    {0, 6, 4, 2, 0, 6, 4, 2},
};

static inline int window_row(int bits) {
    return bits == 2 ? 0 : bits == 3 ? 1 : bits == 5 ? 2 : 3;
}

/* Codes 8j..8j+7 of a row of `row_bytes` bytes, as int32 lanes. */
static inline __attribute__((always_inline)) __m256i decode8(const uint8_t *row, int64_t j, int bits, int64_t row_bytes) {
    const uint8_t *p = row + j * bits;
    if (bits != 4 && bits != 8 && j * bits + 16 <= row_bytes) {
        const int t = window_row(bits);
        __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
        v = _mm256_shuffle_epi8(v, _mm256_loadu_si256((const __m256i *)(const void *)k_window_bytes[t]));
        v = _mm256_srlv_epi32(v, _mm256_loadu_si256((const __m256i *)(const void *)k_window_shift[t]));
        return _mm256_and_si256(v, _mm256_set1_epi32((1 << bits) - 1));
    }
    /* the last chunks of a row: exact-width loads, never past the row */
    switch (bits) {
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        __m256i w = _mm256_set1_epi32(v);
        w = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
        return _mm256_and_si256(w, _mm256_set1_epi32(3));
    }
    case 3: {
        /* 3 bytes; read 4 when the fourth is still inside the row. */
        uint32_t v;
        if (j * 3 + 4 <= row_bytes)
            v = load_u32(p);
        else
            v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
        __m256i w = _mm256_set1_epi32((int)v);
        w = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21));
        return _mm256_and_si256(w, _mm256_set1_epi32(7));
    }
    case 4: {
        __m256i w = _mm256_set1_epi32((int)load_u32(p));
        w = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
        return _mm256_and_si256(w, _mm256_set1_epi32(15));
    }
    case 5: {
        /* codes 0..5 from bytes 0..3, codes 6..7 (bits 30..39) from bytes 1..4 */
        int lo = (int)load_u32(p), hi = (int)load_u32(p + 1);
        __m256i w = _mm256_setr_epi32(lo, lo, lo, lo, lo, lo, hi, hi);
        w = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 5, 10, 15, 20, 25, 22, 27));
        return _mm256_and_si256(w, _mm256_set1_epi32(31));
    }
    case 6: {
        /* codes 0..3 from bytes 0..2, codes 4..7 (bits 24..47) from bytes 2..5 */
        int lo = (int)load_u32(p), hi = (int)load_u32(p + 2);
        __m256i w = _mm256_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi);
        w = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 6, 12, 18, 8, 14, 20, 26));
        return _mm256_and_si256(w, _mm256_set1_epi32(63));
    }
    default: /* 8 */
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    }
}

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

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Codes 32j4..32j4+31 (four chunks) as floats. 4- and 8-bit rows get byte
 * shuffles that cost about one shuffle per chunk; the other widths decode
 * chunk by chunk. */
static inline __attribute__((always_inline)) void decode32(const uint8_t *row, int64_t j4,
                                                           int bits, int64_t row_bytes,
                                                           __m256 q[4]) {
    if (bits == 4) {
        /* byte i holds codes 2i (low nibble) and 2i+1 (high nibble) */
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(row + j4 * 16));
        const __m128i m = _mm_set1_epi8(15);
        __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
        __m128i a = _mm_unpacklo_epi8(lo, hi), b = _mm_unpackhi_epi8(lo, hi);
        q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(a));
        q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(a, 8)));
        q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
        q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
        return;
    }
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_cvtepi32_ps(decode8(row, 4 * j4 + k, bits, row_bytes));
}

void choir_quant_dequant_row_avx2(const choir_weight *W, int64_t r, float *out) {
    const int bits = W->bits;
    const int64_t G = W->group_size, groups = W->cols / G;
    const int64_t row_bytes = W->cols * bits / 8;
    const uint8_t *row = (const uint8_t *)W->data + r * row_bytes;
    for (int64_t g = 0; g < groups; g++) {
        __m256 s = _mm256_set1_ps(sb_at(W->scales, W->sb_dtype, r * groups + g));
        __m256 b = _mm256_set1_ps(sb_at(W->biases, W->sb_dtype, r * groups + g));
        for (int64_t j = g * G / 8; j < (g + 1) * G / 8; j++) {
            __m256 q = _mm256_cvtepi32_ps(decode8(row, j, bits, row_bytes));
            /* mul then add (not fma), bit-identical to the reference */
            _mm256_storeu_ps(out + 8 * j, _mm256_add_ps(_mm256_mul_ps(s, q), b));
        }
    }
}

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* One output row against one input row; `bits` is a constant after
 * inlining, so decode8 reduces to its one case. */
static ALWAYS_INLINE float row_dot1(const uint8_t *row, int64_t row_bytes, const float *x,
                                    const float *xsum, const choir_weight *W, int64_t n,
                                    const int bits) {
    const int64_t G = W->group_size, groups = W->cols / G;
    __m256 acc = _mm256_setzero_ps();
    float off = 0.0f;
    /* four independent chains per group hide the FMA latency */
    for (int64_t g = 0; g < groups; g++) {
        __m256 d0 = _mm256_setzero_ps(), d1 = d0, d2 = d0, d3 = d0;
        for (int64_t j4 = g * G / 32; j4 < (g + 1) * G / 32; j4++) {
            __m256 q[4];
            decode32(row, j4, bits, row_bytes, q);
            const float *xj = x + 32 * j4;
            d0 = _mm256_fmadd_ps(q[0], _mm256_loadu_ps(xj), d0);
            d1 = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xj + 8), d1);
            d2 = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xj + 16), d2);
            d3 = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xj + 24), d3);
        }
        const float sc = sb_at(W->scales, W->sb_dtype, n * groups + g);
        __m256 d = _mm256_add_ps(_mm256_add_ps(d0, d1), _mm256_add_ps(d2, d3));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(sc), d, acc);
        off += sb_at(W->biases, W->sb_dtype, n * groups + g) * xsum[g];
    }
    return hsum(acc) + off;
}

/* One output row against four input rows sharing each decoded chunk. */
static ALWAYS_INLINE void row_dot4(const uint8_t *row, int64_t row_bytes, const float *x,
                                   const float *xsum, const choir_weight *W, int64_t n,
                                   float out[4], const int bits) {
    const int64_t K = W->cols, G = W->group_size, groups = K / G;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float o0 = 0, o1 = 0, o2 = 0, o3 = 0;
    for (int64_t g = 0; g < groups; g++) {
        __m256 d0 = _mm256_setzero_ps(), d1 = d0, d2 = d0, d3 = d0;
        for (int64_t j4 = g * G / 32; j4 < (g + 1) * G / 32; j4++) {
            __m256 q[4];
            decode32(row, j4, bits, row_bytes, q);
            for (int k = 0; k < 4; k++) {
                const float *xj = x + 32 * j4 + 8 * k;
                d0 = _mm256_fmadd_ps(q[k], _mm256_loadu_ps(xj), d0);
                d1 = _mm256_fmadd_ps(q[k], _mm256_loadu_ps(xj + K), d1);
                d2 = _mm256_fmadd_ps(q[k], _mm256_loadu_ps(xj + 2 * K), d2);
                d3 = _mm256_fmadd_ps(q[k], _mm256_loadu_ps(xj + 3 * K), d3);
            }
        }
        const __m256 sv = _mm256_set1_ps(sb_at(W->scales, W->sb_dtype, n * groups + g));
        const float b = sb_at(W->biases, W->sb_dtype, n * groups + g);
        a0 = _mm256_fmadd_ps(sv, d0, a0);
        a1 = _mm256_fmadd_ps(sv, d1, a1);
        a2 = _mm256_fmadd_ps(sv, d2, a2);
        a3 = _mm256_fmadd_ps(sv, d3, a3);
        o0 += b * xsum[g];
        o1 += b * xsum[groups + g];
        o2 += b * xsum[2 * groups + g];
        o3 += b * xsum[3 * groups + g];
    }
    out[0] = hsum(a0) + o0;
    out[1] = hsum(a1) + o1;
    out[2] = hsum(a2) + o2;
    out[3] = hsum(a3) + o3;
}

static ALWAYS_INLINE void rows_bits(const float *x, int64_t M, const choir_weight *W,
                                    const float *bias, float *y, int64_t n0, int64_t n1,
                                    const float *xsum, const int bits) {
    const int64_t K = W->cols, N = W->rows, groups = K / W->group_size;
    const int64_t row_bytes = K * bits / 8;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = (const uint8_t *)W->data + n * row_bytes;
        const float b0 = bias ? bias[n] : 0.0f;
        int64_t m = 0;
        for (; m + 4 <= M; m += 4) {
            float out[4];
            row_dot4(row, row_bytes, x + m * K, xsum + m * groups, W, n, out, bits);
            for (int i = 0; i < 4; i++) y[(m + i) * N + n] = out[i] + b0;
        }
        for (; m < M; m++)
            y[m * N + n] = row_dot1(row, row_bytes, x + m * K, xsum + m * groups, W, n, bits) + b0;
    }
}

void choir_qlinear_avx2_rows(const float *x, int64_t M, const choir_weight *W, const float *bias,
                             float *y, int64_t n0, int64_t n1, const float *xsum) {
    switch (W->bits) {
    case 2: rows_bits(x, M, W, bias, y, n0, n1, xsum, 2); break;
    case 3: rows_bits(x, M, W, bias, y, n0, n1, xsum, 3); break;
    case 4: rows_bits(x, M, W, bias, y, n0, n1, xsum, 4); break;
    case 5: rows_bits(x, M, W, bias, y, n0, n1, xsum, 5); break;
    case 6: rows_bits(x, M, W, bias, y, n0, n1, xsum, 6); break;
    default: rows_bits(x, M, W, bias, y, n0, n1, xsum, 8); break;
    }
}
