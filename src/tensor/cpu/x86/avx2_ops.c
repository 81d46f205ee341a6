/* AVX2/FMA/F16C twins of the hot inner loops (see cpu_kernels.h). Loop tails
 * go through an 8-float stack block so every lane runs the same vector code
 * and no load reads past the caller's array. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "tensor/cpu/cpu_kernels.h"
#include "tensor/cpu/x86/avx2_math.h"

/* Applies `vec_expr` (a function of __m256 v) to x[n] in place. */
#define UNARY_INPLACE(x, n, vec_expr)                                                              \
    do {                                                                                           \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 8 <= (n); i_ += 8) {                                                           \
            __m256 v = _mm256_loadu_ps((x) + i_);                                                  \
            _mm256_storeu_ps((x) + i_, (vec_expr));                                                \
        }                                                                                          \
        if (i_ < (n)) {                                                                            \
            float tail_[8] = {0};                                                                  \
            size_t rem_ = (size_t)((n)-i_);                                                        \
            memcpy(tail_, (x) + i_, rem_ * sizeof(float));                                         \
            __m256 v = _mm256_loadu_ps(tail_);                                                     \
            _mm256_storeu_ps(tail_, (vec_expr));                                                   \
            memcpy((x) + i_, tail_, rem_ * sizeof(float));                                         \
        }                                                                                          \
    } while (0)

static inline __m256 load_f32(const float *p) { return _mm256_loadu_ps(p); }

static inline __m256 load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline float f32_id(float v) { return v; }

/* The dot products share one summation order: two 8-lane accumulators over
 * 16-element steps (the even one also takes a last 8-block), their sum
 * reduced horizontally, then the scalar tail in order. The one-row and
 * four-row forms therefore give bit-identical rows, so a linear layer's row
 * does not depend on how many rows were batched with it. */
#define DOT1_BODY(load_w, scalar_w)                                                                \
    __m256 e = _mm256_setzero_ps(), o = _mm256_setzero_ps();                                       \
    int64_t i = 0;                                                                                 \
    for (; i + 16 <= n; i += 16) {                                                                 \
        e = _mm256_fmadd_ps(load_w(w + i), _mm256_loadu_ps(x + i), e);                             \
        o = _mm256_fmadd_ps(load_w(w + i + 8), _mm256_loadu_ps(x + i + 8), o);                     \
    }                                                                                              \
    if (i + 8 <= n) {                                                                              \
        e = _mm256_fmadd_ps(load_w(w + i), _mm256_loadu_ps(x + i), e);                             \
        i += 8;                                                                                    \
    }                                                                                              \
    float s = choir_hsum256(_mm256_add_ps(e, o));                                                  \
    for (; i < n; i++)                                                                             \
        s += scalar_w(w[i]) * x[i];                                                                \
    return s;

#define DOT4_BODY(load_w, scalar_w)                                                                \
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;                      \
    __m256 e0 = _mm256_setzero_ps(), e1 = _mm256_setzero_ps();                                     \
    __m256 e2 = _mm256_setzero_ps(), e3 = _mm256_setzero_ps();                                     \
    __m256 o0 = _mm256_setzero_ps(), o1 = _mm256_setzero_ps();                                     \
    __m256 o2 = _mm256_setzero_ps(), o3 = _mm256_setzero_ps();                                     \
    int64_t i = 0;                                                                                 \
    for (; i + 16 <= n; i += 16) {                                                                 \
        __m256 we = load_w(w + i), wo = load_w(w + i + 8);                                         \
        e0 = _mm256_fmadd_ps(we, _mm256_loadu_ps(x0 + i), e0);                                     \
        o0 = _mm256_fmadd_ps(wo, _mm256_loadu_ps(x0 + i + 8), o0);                                 \
        e1 = _mm256_fmadd_ps(we, _mm256_loadu_ps(x1 + i), e1);                                     \
        o1 = _mm256_fmadd_ps(wo, _mm256_loadu_ps(x1 + i + 8), o1);                                 \
        e2 = _mm256_fmadd_ps(we, _mm256_loadu_ps(x2 + i), e2);                                     \
        o2 = _mm256_fmadd_ps(wo, _mm256_loadu_ps(x2 + i + 8), o2);                                 \
        e3 = _mm256_fmadd_ps(we, _mm256_loadu_ps(x3 + i), e3);                                     \
        o3 = _mm256_fmadd_ps(wo, _mm256_loadu_ps(x3 + i + 8), o3);                                 \
    }                                                                                              \
    if (i + 8 <= n) {                                                                              \
        __m256 we = load_w(w + i);                                                                 \
        e0 = _mm256_fmadd_ps(we, _mm256_loadu_ps(x0 + i), e0);                                     \
        e1 = _mm256_fmadd_ps(we, _mm256_loadu_ps(x1 + i), e1);                                     \
        e2 = _mm256_fmadd_ps(we, _mm256_loadu_ps(x2 + i), e2);                                     \
        e3 = _mm256_fmadd_ps(we, _mm256_loadu_ps(x3 + i), e3);                                     \
        i += 8;                                                                                    \
    }                                                                                              \
    out[0] = choir_hsum256(_mm256_add_ps(e0, o0));                                                 \
    out[1] = choir_hsum256(_mm256_add_ps(e1, o1));                                                 \
    out[2] = choir_hsum256(_mm256_add_ps(e2, o2));                                                 \
    out[3] = choir_hsum256(_mm256_add_ps(e3, o3));                                                 \
    for (; i < n; i++) {                                                                           \
        float wi = scalar_w(w[i]);                                                                 \
        out[0] += wi * x0[i];                                                                      \
        out[1] += wi * x1[i];                                                                      \
        out[2] += wi * x2[i];                                                                      \
        out[3] += wi * x3[i];                                                                      \
    }

static float avx2_dot(const float *w, const float *x, int64_t n) { DOT1_BODY(load_f32, f32_id) }
static float avx2_dot_f16(const uint16_t *w, const float *x, int64_t n) {
    DOT1_BODY(load_f16, choir_f16_to_f32)
}
static float avx2_dot_bf16(const uint16_t *w, const float *x, int64_t n) {
    DOT1_BODY(load_bf16, choir_bf16_to_f32)
}
static void avx2_dot4(const float *w, const float *x, int64_t ldx, int64_t n, float *out) {
    DOT4_BODY(load_f32, f32_id)
}
static void avx2_dot4_f16(const uint16_t *w, const float *x, int64_t ldx, int64_t n, float *out) {
    DOT4_BODY(load_f16, choir_f16_to_f32)
}
static void avx2_dot4_bf16(const uint16_t *w, const float *x, int64_t ldx, int64_t n, float *out) {
    DOT4_BODY(load_bf16, choir_bf16_to_f32)
}

/* Four weight rows against one input (a batch-1 step), one row after
 * another: streaming four rows at once in one loop reads the weights more
 * slowly than reading them in turn (avx512_ops.c gives the figures), and the
 * input stays in L1 either way. out[r] is the one-row dot, bit for bit. */
static void avx2_dot_rows4(const float *w, int64_t ldw, const float *x, int64_t n, float *out) {
    for (int r = 0; r < 4; r++)
        out[r] = avx2_dot(w + r * ldw, x, n);
}
static void avx2_dot_rows4_f16(const uint16_t *w, int64_t ldw, const float *x, int64_t n,
                               float *out) {
    for (int r = 0; r < 4; r++)
        out[r] = avx2_dot_f16(w + r * ldw, x, n);
}
static void avx2_dot_rows4_bf16(const uint16_t *w, int64_t ldw, const float *x, int64_t n,
                                float *out) {
    for (int r = 0; r < 4; r++)
        out[r] = avx2_dot_bf16(w + r * ldw, x, n);
}

/* Scores of one query against n keys (keys of type KT, widened by load_k /
 * scalar_k), four keys per pass over the query; a remaining key is one dot
 * product (dot_k). */
#define ATTN_SCORES_BODY(KT, load_k, scalar_k, dot_k)                                              \
    int64_t j = 0;                                                                                 \
    for (; j + 4 <= n; j += 4) {                                                                   \
        const KT *k0 = k + j * ldk, *k1 = k0 + ldk, *k2 = k1 + ldk, *k3 = k2 + ldk;                \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                \
        int64_t c = 0;                                                                             \
        for (; c + 8 <= Dh; c += 8) {                                                              \
            __m256 qv = _mm256_loadu_ps(q + c);                                                    \
            a0 = _mm256_fmadd_ps(qv, load_k(k0 + c), a0);                                          \
            a1 = _mm256_fmadd_ps(qv, load_k(k1 + c), a1);                                          \
            a2 = _mm256_fmadd_ps(qv, load_k(k2 + c), a2);                                          \
            a3 = _mm256_fmadd_ps(qv, load_k(k3 + c), a3);                                          \
        }                                                                                          \
        float s0 = choir_hsum256(a0), s1 = choir_hsum256(a1);                                      \
        float s2 = choir_hsum256(a2), s3 = choir_hsum256(a3);                                      \
        for (; c < Dh; c++) {                                                                      \
            s0 += q[c] * scalar_k(k0[c]);                                                          \
            s1 += q[c] * scalar_k(k1[c]);                                                          \
            s2 += q[c] * scalar_k(k2[c]);                                                          \
            s3 += q[c] * scalar_k(k3[c]);                                                          \
        }                                                                                          \
        scores[j] = s0 * scale;                                                                    \
        scores[j + 1] = s1 * scale;                                                                \
        scores[j + 2] = s2 * scale;                                                                \
        scores[j + 3] = s3 * scale;                                                                \
    }                                                                                              \
    for (; j < n; j++)                                                                             \
        scores[j] = dot_k(k + j * ldk, q, Dh) * scale;

/* out = sum_j p[j] v_j (values of type VT), the output held in registers 64
 * columns at a time. */
#define ATTN_WSUM_BODY(VT, load_v, scalar_v)                                                       \
    int64_t c0 = 0;                                                                                \
    for (; c0 + 64 <= Dh; c0 += 64) {                                                              \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,     \
               a7 = a0;                                                                            \
        for (int64_t j = 0; j < n; j++) {                                                          \
            const VT *vr = v + j * ldv + c0;                                                       \
            __m256 pj = _mm256_set1_ps(p[j]);                                                      \
            a0 = _mm256_fmadd_ps(pj, load_v(vr), a0);                                              \
            a1 = _mm256_fmadd_ps(pj, load_v(vr + 8), a1);                                          \
            a2 = _mm256_fmadd_ps(pj, load_v(vr + 16), a2);                                         \
            a3 = _mm256_fmadd_ps(pj, load_v(vr + 24), a3);                                         \
            a4 = _mm256_fmadd_ps(pj, load_v(vr + 32), a4);                                         \
            a5 = _mm256_fmadd_ps(pj, load_v(vr + 40), a5);                                         \
            a6 = _mm256_fmadd_ps(pj, load_v(vr + 48), a6);                                         \
            a7 = _mm256_fmadd_ps(pj, load_v(vr + 56), a7);                                         \
        }                                                                                          \
        _mm256_storeu_ps(out + c0, a0);                                                            \
        _mm256_storeu_ps(out + c0 + 8, a1);                                                        \
        _mm256_storeu_ps(out + c0 + 16, a2);                                                       \
        _mm256_storeu_ps(out + c0 + 24, a3);                                                       \
        _mm256_storeu_ps(out + c0 + 32, a4);                                                       \
        _mm256_storeu_ps(out + c0 + 40, a5);                                                       \
        _mm256_storeu_ps(out + c0 + 48, a6);                                                       \
        _mm256_storeu_ps(out + c0 + 56, a7);                                                       \
    }                                                                                              \
    for (; c0 + 8 <= Dh; c0 += 8) {                                                                \
        __m256 a = _mm256_setzero_ps();                                                            \
        for (int64_t j = 0; j < n; j++)                                                            \
            a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load_v(v + j * ldv + c0), a);               \
        _mm256_storeu_ps(out + c0, a);                                                             \
    }                                                                                              \
    for (; c0 < Dh; c0++) {                                                                        \
        float a = 0.0f;                                                                            \
        for (int64_t j = 0; j < n; j++)                                                            \
            a += p[j] * scalar_v(v[j * ldv + c0]);                                                 \
        out[c0] = a;                                                                               \
    }

static void avx2_attn_scores(const float *q, const float *k, int64_t ldk, int64_t n, int64_t Dh,
                             float scale, float *scores) {
    ATTN_SCORES_BODY(float, load_f32, f32_id, avx2_dot)
}
static void avx2_attn_wsum(const float *p, const float *v, int64_t ldv, int64_t n, int64_t Dh,
                           float *out) {
    ATTN_WSUM_BODY(float, load_f32, f32_id)
}
/* The same over f16 keys and values (a decoder step's cross-attention cache),
 * widened as they are loaded. */
static void avx2_attn_scores_f16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                 int64_t Dh, float scale, float *scores) {
    ATTN_SCORES_BODY(uint16_t, load_f16, choir_f16_to_f32, avx2_dot_f16)
}
static void avx2_attn_wsum_f16(const float *p, const uint16_t *v, int64_t ldv, int64_t n,
                               int64_t Dh, float *out) {
    ATTN_WSUM_BODY(uint16_t, load_f16, choir_f16_to_f32)
}
/* And over bf16 ones (a bf16 model's caches). */
static void avx2_attn_scores_bf16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                  int64_t Dh, float scale, float *scores) {
    ATTN_SCORES_BODY(uint16_t, load_bf16, choir_bf16_to_f32, avx2_dot_bf16)
}
static void avx2_attn_wsum_bf16(const float *p, const uint16_t *v, int64_t ldv, int64_t n,
                                int64_t Dh, float *out) {
    ATTN_WSUM_BODY(uint16_t, load_bf16, choir_bf16_to_f32)
}

/* G heads at once, each row walked whole (cpu_kernels.h); Dh a multiple of
 * 16, two 8-lane accumulators per head as in the dot products. */
#define ATTN_SCORES_HEADS_BODY(load_k)                                                             \
    for (int64_t j = 0; j < n; j++) {                                                              \
        const uint16_t *kr = k + j * ldk;                                                          \
        for (int64_t h = 0; h < G; h++) {                                                          \
            const float *qh = q + h * Dh;                                                          \
            const uint16_t *kh = kr + h * Dh;                                                      \
            __m256 e = _mm256_setzero_ps(), o = _mm256_setzero_ps();                               \
            for (int64_t c = 0; c < Dh; c += 16) {                                                 \
                e = _mm256_fmadd_ps(_mm256_loadu_ps(qh + c), load_k(kh + c), e);                   \
                o = _mm256_fmadd_ps(_mm256_loadu_ps(qh + c + 8), load_k(kh + c + 8), o);           \
            }                                                                                      \
            scores[h * lds + j] = choir_hsum256(_mm256_add_ps(e, o)) * scale;                      \
        }                                                                                          \
    }

#define ATTN_WSUM_HEADS_BODY(load_v)                                                               \
    memset(out, 0, (size_t)(G * Dh) * sizeof(float));                                             \
    for (int64_t j = 0; j < n; j++) {                                                              \
        const uint16_t *vr = v + j * ldv;                                                          \
        for (int64_t h = 0; h < G; h++) {                                                          \
            __m256 pj = _mm256_set1_ps(p[h * ldp + j]);                                            \
            float *oh = out + h * Dh;                                                              \
            const uint16_t *vh = vr + h * Dh;                                                      \
            for (int64_t c = 0; c < Dh; c += 8)                                                    \
                _mm256_storeu_ps(oh + c,                                                           \
                                 _mm256_fmadd_ps(pj, load_v(vh + c), _mm256_loadu_ps(oh + c)));    \
        }                                                                                          \
    }

static void avx2_attn_scores_heads_f16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                       int64_t Dh, int64_t G, float scale, float *scores,
                                       int64_t lds) {
    ATTN_SCORES_HEADS_BODY(load_f16)
}
static void avx2_attn_wsum_heads_f16(const float *p, int64_t ldp, const uint16_t *v, int64_t ldv,
                                     int64_t n, int64_t Dh, int64_t G, float *out) {
    ATTN_WSUM_HEADS_BODY(load_f16)
}
static void avx2_attn_scores_heads_bf16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                        int64_t Dh, int64_t G, float scale, float *scores,
                                        int64_t lds) {
    ATTN_SCORES_HEADS_BODY(load_bf16)
}
static void avx2_attn_wsum_heads_bf16(const float *p, int64_t ldp, const uint16_t *v,
                                      int64_t ldv, int64_t n, int64_t Dh, int64_t G, float *out) {
    ATTN_WSUM_HEADS_BODY(load_bf16)
}

static void avx2_f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load_f16(src + i));
    for (; i < n; i++)
        dst[i] = choir_f16_to_f32(src[i]);
}

static void avx2_f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    for (; i < n; i++)
        dst[i] = choir_f32_to_f16(src[i]);
}

static void avx2_bf16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load_bf16(src + i));
    for (; i < n; i++)
        dst[i] = choir_bf16_to_f32(src[i]);
}

static void avx2_f32_to_bf16(const float *src, uint16_t *dst, int64_t n) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_loadu_ps(src + i);
        __m256i b = _mm256_castps_si256(f);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(bias, lsb)), 16);
        __m256i nanv = _mm256_or_si256(_mm256_srli_epi32(b, 16), quiet);
        __m256 isnan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
        r = _mm256_castps_si256(
            _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(nanv), isnan));
        __m128i packed =
            _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(dst + i), packed);
    }
    for (; i < n; i++)
        dst[i] = choir_f32_to_bf16(src[i]);
}

static void avx2_add(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++)
        y[i] = a[i] + b[i];
}

static void avx2_mul(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++)
        y[i] = a[i] * b[i];
}

static void avx2_scale(float *x, float s, int64_t n) {
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++)
        x[i] *= s;
}

static void avx2_axpy(float a, const float *x, float *y, int64_t n) {
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

static void avx2_gelu_erf(float *x, int64_t n) {
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 rsqrt2 = _mm256_set1_ps(0.70710678118654752f);
    UNARY_INPLACE(x, n,
                  _mm256_mul_ps(_mm256_mul_ps(half, v),
                                _mm256_add_ps(one, choir_erf256(_mm256_mul_ps(v, rsqrt2)))));
}

static void avx2_gelu_tanh(float *x, int64_t n) {
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 c0 = _mm256_set1_ps(0.7978845608028654f), c1 = _mm256_set1_ps(0.044715f);
    UNARY_INPLACE(
        x, n,
        _mm256_mul_ps(_mm256_mul_ps(half, v),
                      _mm256_add_ps(one, choir_tanh256(_mm256_mul_ps(
                                             c0, _mm256_fmadd_ps(_mm256_mul_ps(c1, v),
                                                                 _mm256_mul_ps(v, v), v))))));
}

static void avx2_leaky_relu(float *x, int64_t n, float slope) {
    const __m256 vs = _mm256_set1_ps(slope), zero = _mm256_setzero_ps();
    UNARY_INPLACE(x, n,
                  _mm256_blendv_ps(_mm256_mul_ps(v, vs), v, _mm256_cmp_ps(v, zero, _CMP_GE_OQ)));
}

static void avx2_sigmoid(float *x, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    UNARY_INPLACE(x, n,
                  _mm256_div_ps(one, _mm256_add_ps(one, choir_exp256(_mm256_sub_ps(zero, v)))));
}

static void avx2_tanh(float *x, int64_t n) { UNARY_INPLACE(x, n, choir_tanh256(v)); }

static void avx2_silu(float *x, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    UNARY_INPLACE(x, n, _mm256_div_ps(v, _mm256_add_ps(one, choir_exp256(_mm256_sub_ps(zero, v)))));
}

static void avx2_snake(float *x, int64_t n, float alpha, float inv_alpha) {
    const __m256 va = _mm256_set1_ps(alpha), vi = _mm256_set1_ps(inv_alpha);
    UNARY_INPLACE(x, n, _mm256_fmadd_ps(vi, choir_sin2_256(_mm256_mul_ps(va, v)), v));
}

static void avx2_mean_var(const float *x, int64_t n, float *mean, float *var) {
    if (n <= 0) {
        *mean = 0;
        *var = 0;
        return;
    }
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
    }
    float s = choir_hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++)
        s += x[i];
    float m = s / (float)n;
    __m256 vm = _mm256_set1_ps(m);
    s0 = _mm256_setzero_ps();
    s1 = _mm256_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm);
        s0 = _mm256_fmadd_ps(d0, d0, s0);
        s1 = _mm256_fmadd_ps(d1, d1, s1);
    }
    float q = choir_hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++)
        q += (x[i] - m) * (x[i] - m);
    *mean = m;
    *var = q / (float)n;
}

static void avx2_normalize(const float *x, float *y, int64_t n, float mean, float inv,
                           const float *gamma, const float *beta) {
    const __m256 vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(inv);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi);
        if (gamma) v = _mm256_mul_ps(v, _mm256_loadu_ps(gamma + i));
        if (beta) v = _mm256_add_ps(v, _mm256_loadu_ps(beta + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) {
        float v = (x[i] - mean) * inv;
        if (gamma) v *= gamma[i];
        if (beta) v += beta[i];
        y[i] = v;
    }
}

static void avx2_affine(const float *x, float *y, int64_t n, float mean, float a, float b) {
    const __m256 vm = _mm256_set1_ps(mean), va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), va, vb));
    for (; i < n; i++)
        y[i] = (x[i] - mean) * a + b;
}

static float avx2_exp_row(float *x, int64_t n, float *max) {
    *max = -INFINITY;
    if (n <= 0) return 0.0f;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float mx = choir_hmax256(vmax);
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    *max = mx;
    if (mx == -INFINITY) {
        memset(x, 0, (size_t)n * sizeof(float));
        return 0.0f;
    }
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = choir_exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    if (i < n) {
        /* Dead tail lanes hold -inf, whose exp is exactly 0 and adds nothing. */
        float tail[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                         -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        size_t rem = (size_t)(n - i);
        memcpy(tail, x + i, rem * sizeof(float));
        __m256 e = choir_exp256(_mm256_sub_ps(_mm256_loadu_ps(tail), vm));
        _mm256_storeu_ps(tail, e);
        vsum = _mm256_add_ps(vsum, e);
        memcpy(x + i, tail, rem * sizeof(float));
    }
    return choir_hsum256(vsum);
}

static void avx2_softmax_row(float *x, int64_t n) {
    float mx, s = avx2_exp_row(x, n, &mx);
    if (s > 0.0f) avx2_scale(x, 1.0f / s, n);
}

const choir_cpu_ops choir_cpu_ops_avx2 = {
    .dot = avx2_dot,
    .dot_f16 = avx2_dot_f16,
    .dot_bf16 = avx2_dot_bf16,
    .dot4 = avx2_dot4,
    .dot4_f16 = avx2_dot4_f16,
    .dot4_bf16 = avx2_dot4_bf16,
    .dot_rows4 = avx2_dot_rows4,
    .dot_rows4_f16 = avx2_dot_rows4_f16,
    .dot_rows4_bf16 = avx2_dot_rows4_bf16,
    .attn_scores = avx2_attn_scores,
    .attn_wsum = avx2_attn_wsum,
    .attn_scores_f16 = avx2_attn_scores_f16,
    .attn_wsum_f16 = avx2_attn_wsum_f16,
    .attn_scores_bf16 = avx2_attn_scores_bf16,
    .attn_wsum_bf16 = avx2_attn_wsum_bf16,
    .attn_scores_heads_f16 = avx2_attn_scores_heads_f16,
    .attn_wsum_heads_f16 = avx2_attn_wsum_heads_f16,
    .attn_scores_heads_bf16 = avx2_attn_scores_heads_bf16,
    .attn_wsum_heads_bf16 = avx2_attn_wsum_heads_bf16,
    .f16_to_f32 = avx2_f16_to_f32,
    .f32_to_f16 = avx2_f32_to_f16,
    .bf16_to_f32 = avx2_bf16_to_f32,
    .f32_to_bf16 = avx2_f32_to_bf16,
    .add = avx2_add,
    .mul = avx2_mul,
    .scale = avx2_scale,
    .axpy = avx2_axpy,
    .gelu_erf = avx2_gelu_erf,
    .gelu_tanh = avx2_gelu_tanh,
    .leaky_relu = avx2_leaky_relu,
    .sigmoid = avx2_sigmoid,
    .tanh = avx2_tanh,
    .silu = avx2_silu,
    .snake = avx2_snake,
    .mean_var = avx2_mean_var,
    .normalize = avx2_normalize,
    .affine = avx2_affine,
    .softmax_row = avx2_softmax_row,
    .exp_row = avx2_exp_row,
};
