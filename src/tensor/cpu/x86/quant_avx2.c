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

/* Every output element is summed in the same order whatever M is and
 * wherever its input row sits in the batch (pairs of rows only share the
 * decoded codes), so batched results equal unbatched ones bit for bit. */

/* Generic widths: for each input row two chains, even and odd chunks, added
 * per group; up to four input rows share each decoded chunk. Plain locals
 * (no arrays) keep everything in registers. */
#define GEN_ROW(r, xr, e, o)                                                    \
    if (R > (r)) {                                                              \
        e = _mm256_fmadd_ps(q0, _mm256_loadu_ps((xr) + 8 * j), e);              \
        o = _mm256_fmadd_ps(q1, _mm256_loadu_ps((xr) + 8 * j + 8), o);          \
    }
#define GEN_GROUP(r, e, o, acc, off)                                            \
    if (R > (r)) {                                                              \
        acc = _mm256_fmadd_ps(sv, _mm256_add_ps(e, o), acc);                    \
        off += bg * xsum[(r) * groups + g];                                     \
    }

static ALWAYS_INLINE void row_dot_gen(const uint8_t *row, int64_t row_bytes, const float *x,
                                      const float *xsum, const choir_weight *W, int64_t n,
                                      const int R, float *out, const int bits) {
    const int64_t K = W->cols, G = W->group_size, groups = K / G;
    const float *x0 = x, *x1 = x + K, *x2 = x + 2 * K, *x3 = x + 3 * K;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    float off0 = 0.0f, off1 = 0.0f, off2 = 0.0f, off3 = 0.0f;
    for (int64_t g = 0; g < groups; g++) {
        __m256 e0 = _mm256_setzero_ps(), o0 = e0, e1 = e0, o1 = e0, e2 = e0, o2 = e0, e3 = e0,
               o3 = e0;
        for (int64_t j = g * G / 8; j < (g + 1) * G / 8; j += 2) {
            const __m256 q0 = _mm256_cvtepi32_ps(decode8(row, j, bits, row_bytes));
            const __m256 q1 = _mm256_cvtepi32_ps(decode8(row, j + 1, bits, row_bytes));
            GEN_ROW(0, x0, e0, o0)
            GEN_ROW(1, x1, e1, o1)
            GEN_ROW(2, x2, e2, o2)
            GEN_ROW(3, x3, e3, o3)
        }
        const __m256 sv = _mm256_set1_ps(sb_at(W->scales, W->sb_dtype, n * groups + g));
        const float bg = sb_at(W->biases, W->sb_dtype, n * groups + g);
        GEN_GROUP(0, e0, o0, acc0, off0)
        GEN_GROUP(1, e1, o1, acc1, off1)
        GEN_GROUP(2, e2, o2, acc2, off2)
        GEN_GROUP(3, e3, o3, acc3, off3)
    }
    out[0] = hsum(acc0) + off0;
    if (R > 1) out[1] = hsum(acc1) + off1;
    if (R > 2) out[2] = hsum(acc2) + off2;
    if (R > 3) out[3] = hsum(acc3) + off3;
}
#undef GEN_ROW
#undef GEN_GROUP

/* 4- and 8-bit rows against x in word-lane order (choir_quant_permute_x):
 * one 256-bit load holds eight words, and shifting all lanes by bits*k
 * yields code k of every word at once, so a chunk costs a shift, a mask, a
 * convert and an FMA, with no shuffles. A block is 64 (4-bit) or 32 (8-bit)
 * codes; a 4-bit block spans two groups when the group size is 32. Two
 * chains per row alternate over k; block results alternate over two
 * accumulators. */
#define LANE_STEP(k)                                                                         \
    do {                                                                                     \
        const __m256 q_ = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, bits * (k)), mask)); \
        if ((k) & 1) {                                                                       \
            a1 = _mm256_fmadd_ps(q_, _mm256_loadu_ps(xb + 8 * (k)), a1);                     \
            if (rows2) c1 = _mm256_fmadd_ps(q_, _mm256_loadu_ps(xb + K + 8 * (k)), c1);      \
        } else {                                                                             \
            a0 = _mm256_fmadd_ps(q_, _mm256_loadu_ps(xb + 8 * (k)), a0);                     \
            if (rows2) c0 = _mm256_fmadd_ps(q_, _mm256_loadu_ps(xb + K + 8 * (k)), c0);      \
        }                                                                                    \
    } while (0)

static ALWAYS_INLINE void row_dot_lanes(const uint32_t *row, const float *xp, const float *xsum,
                                        const choir_weight *W, int64_t n, const int rows2,
                                        float *out, const int bits) {
    const int64_t block = 256 / bits;
    const int64_t K = W->cols, G = W->group_size, groups = K / G;
    const __m256i mask = _mm256_set1_epi32((1 << bits) - 1);
    const int gshift = __builtin_ctzll((unsigned long long)G); /* G is a power of two */
    __m256 r0a = _mm256_setzero_ps(), r0b = r0a, r1a = r0a, r1b = r0a;
    for (int64_t b = 0; b < K / block; b++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(row + 8 * b));
        const float *xb = xp + b * block;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, c0 = a0, c1 = a0;
        LANE_STEP(0);
        LANE_STEP(1);
        LANE_STEP(2);
        LANE_STEP(3);
        if (bits == 4) {
            LANE_STEP(4);
            LANE_STEP(5);
            LANE_STEP(6);
            LANE_STEP(7);
        }
        const int64_t g = (b * block) >> gshift; /* no division in the loop */
        __m256 sv;
        if (block <= G) {
            sv = _mm256_set1_ps(sb_at(W->scales, W->sb_dtype, n * groups + g));
        } else {
            const float sa = sb_at(W->scales, W->sb_dtype, n * groups + g);
            const float sb = sb_at(W->scales, W->sb_dtype, n * groups + g + 1);
            sv = _mm256_setr_ps(sa, sa, sa, sa, sb, sb, sb, sb);
        }
        if (b & 1) {
            r0b = _mm256_fmadd_ps(sv, _mm256_add_ps(a0, a1), r0b);
            if (rows2) r1b = _mm256_fmadd_ps(sv, _mm256_add_ps(c0, c1), r1b);
        } else {
            r0a = _mm256_fmadd_ps(sv, _mm256_add_ps(a0, a1), r0a);
            if (rows2) r1a = _mm256_fmadd_ps(sv, _mm256_add_ps(c0, c1), r1a);
        }
    }
    float off0 = 0.0f, off1 = 0.0f;
    for (int64_t g = 0; g < groups; g++) {
        const float bg = sb_at(W->biases, W->sb_dtype, n * groups + g);
        off0 += bg * xsum[g];
        if (rows2) off1 += bg * xsum[groups + g];
    }
    out[0] = hsum(_mm256_add_ps(r0a, r0b)) + off0;
    if (rows2) out[1] = hsum(_mm256_add_ps(r1a, r1b)) + off1;
}
#undef LANE_STEP

static ALWAYS_INLINE void rows_bits(const float *x, int64_t M, const choir_weight *W,
                                    const float *bias, float *y, int64_t n0, int64_t n1,
                                    const float *xsum, const float *xperm, const int bits) {
    const int64_t K = W->cols, N = W->rows, groups = K / W->group_size;
    const int64_t row_bytes = K * bits / 8;
    const int lanes = (bits == 4 || bits == 8) && xperm;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = (const uint8_t *)W->data + n * row_bytes;
        const float b0 = bias ? bias[n] : 0.0f;
        if (lanes) {
            for (int64_t m = 0; m < M; m += 2) {
                const int two = m + 1 < M;
                float out[2];
                if (two)
                    row_dot_lanes((const uint32_t *)(const void *)row, xperm + m * K,
                                  xsum + m * groups, W, n, 1, out, bits);
                else
                    row_dot_lanes((const uint32_t *)(const void *)row, xperm + m * K,
                                  xsum + m * groups, W, n, 0, out, bits);
                y[m * N + n] = out[0] + b0;
                if (two) y[(m + 1) * N + n] = out[1] + b0;
            }
            continue;
        }
        int64_t m = 0;
        float out[4];
        for (; m + 4 <= M; m += 4) {
            row_dot_gen(row, row_bytes, x + m * K, xsum + m * groups, W, n, 4, out, bits);
            for (int i = 0; i < 4; i++) y[(m + i) * N + n] = out[i] + b0;
        }
        for (; m + 2 <= M; m += 2) {
            row_dot_gen(row, row_bytes, x + m * K, xsum + m * groups, W, n, 2, out, bits);
            for (int i = 0; i < 2; i++) y[(m + i) * N + n] = out[i] + b0;
        }
        if (m < M) {
            row_dot_gen(row, row_bytes, x + m * K, xsum + m * groups, W, n, 1, out, bits);
            y[m * N + n] = out[0] + b0;
        }
    }
}

void choir_qlinear_avx2_rows(const float *x, int64_t M, const choir_weight *W, const float *bias,
                             float *y, int64_t n0, int64_t n1, const float *xsum,
                             const float *xperm) {
    switch (W->bits) {
    case 2: rows_bits(x, M, W, bias, y, n0, n1, xsum, NULL, 2); break;
    case 3: rows_bits(x, M, W, bias, y, n0, n1, xsum, NULL, 3); break;
    case 4: rows_bits(x, M, W, bias, y, n0, n1, xsum, xperm, 4); break;
    case 5: rows_bits(x, M, W, bias, y, n0, n1, xsum, NULL, 5); break;
    case 6: rows_bits(x, M, W, bias, y, n0, n1, xsum, NULL, 6); break;
    default: rows_bits(x, M, W, bias, y, n0, n1, xsum, xperm, 8); break;
    }
}
