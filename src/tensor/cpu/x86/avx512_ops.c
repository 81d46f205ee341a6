/* AVX-512 (F + BW + VL, with F16C and FMA) twins of the weight-streaming
 * inner loops: the dot products of the linear layers in f32, f16 and bf16
 * storage, the f16/bf16 conversions and a decoder step's attention over f16
 * keys and values. Every other entry of the table is
 * the AVX2 one (choir_cpu_ops_avx2): those loops are not bound by how many
 * weight bytes one instruction can take in.
 *
 * Tails use masked loads, which never touch memory past the mask, so there
 * is no scalar remainder loop. The summation order is one for all forms:
 * two 16-lane accumulators over 32-element steps, the even one also taking a
 * last 16-block, the odd one the masked tail, then one horizontal reduction.
 * The one-row, four-input and four-row forms therefore give the same bits
 * for a row, as the AVX2 twins do among themselves.
 *
 * Compiled with -mavx512f -mavx512bw -mavx512vl (and the AVX2 flags); only
 * reached when choir_kernels_isa() == CHOIR_ISA_AVX512. */
#include <immintrin.h>
#include <string.h>
#include <pthread.h>

#include "tensor/cpu/cpu_kernels.h"

static inline __mmask16 tail_mask(int64_t rem) { return (__mmask16)((1u << rem) - 1u); }

static inline __m512 ld_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 ldm_f32(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

static inline __m512 ld_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline __m512 ldm_f16(const uint16_t *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static inline __m512 ld_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline __m512 ldm_bf16(const uint16_t *p, __mmask16 m) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

#define DOT1_512(LD, LDM)                                                                          \
    __m512 e = _mm512_setzero_ps(), o = _mm512_setzero_ps();                                       \
    int64_t i = 0;                                                                                 \
    for (; i + 32 <= n; i += 32) {                                                                 \
        e = _mm512_fmadd_ps(LD(w + i), _mm512_loadu_ps(x + i), e);                                 \
        o = _mm512_fmadd_ps(LD(w + i + 16), _mm512_loadu_ps(x + i + 16), o);                       \
    }                                                                                              \
    if (i + 16 <= n) {                                                                             \
        e = _mm512_fmadd_ps(LD(w + i), _mm512_loadu_ps(x + i), e);                                 \
        i += 16;                                                                                   \
    }                                                                                              \
    if (i < n) {                                                                                   \
        __mmask16 m = tail_mask(n - i);                                                            \
        o = _mm512_fmadd_ps(LDM(w + i, m), _mm512_maskz_loadu_ps(m, x + i), o);                    \
    }                                                                                              \
    return _mm512_reduce_add_ps(_mm512_add_ps(e, o));

/* One weight row against four inputs x, x + ldx, ... */
#define DOT4_512(LD, LDM)                                                                          \
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;                      \
    __m512 e0 = _mm512_setzero_ps(), e1 = e0, e2 = e0, e3 = e0;                                    \
    __m512 o0 = e0, o1 = e0, o2 = e0, o3 = e0;                                                     \
    int64_t i = 0;                                                                                 \
    for (; i + 32 <= n; i += 32) {                                                                 \
        __m512 we = LD(w + i), wo = LD(w + i + 16);                                                \
        e0 = _mm512_fmadd_ps(we, _mm512_loadu_ps(x0 + i), e0);                                     \
        o0 = _mm512_fmadd_ps(wo, _mm512_loadu_ps(x0 + i + 16), o0);                                \
        e1 = _mm512_fmadd_ps(we, _mm512_loadu_ps(x1 + i), e1);                                     \
        o1 = _mm512_fmadd_ps(wo, _mm512_loadu_ps(x1 + i + 16), o1);                                \
        e2 = _mm512_fmadd_ps(we, _mm512_loadu_ps(x2 + i), e2);                                     \
        o2 = _mm512_fmadd_ps(wo, _mm512_loadu_ps(x2 + i + 16), o2);                                \
        e3 = _mm512_fmadd_ps(we, _mm512_loadu_ps(x3 + i), e3);                                     \
        o3 = _mm512_fmadd_ps(wo, _mm512_loadu_ps(x3 + i + 16), o3);                                \
    }                                                                                              \
    if (i + 16 <= n) {                                                                             \
        __m512 we = LD(w + i);                                                                     \
        e0 = _mm512_fmadd_ps(we, _mm512_loadu_ps(x0 + i), e0);                                     \
        e1 = _mm512_fmadd_ps(we, _mm512_loadu_ps(x1 + i), e1);                                     \
        e2 = _mm512_fmadd_ps(we, _mm512_loadu_ps(x2 + i), e2);                                     \
        e3 = _mm512_fmadd_ps(we, _mm512_loadu_ps(x3 + i), e3);                                     \
        i += 16;                                                                                   \
    }                                                                                              \
    if (i < n) {                                                                                   \
        __mmask16 m = tail_mask(n - i);                                                            \
        __m512 wt = LDM(w + i, m);                                                                 \
        o0 = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(m, x0 + i), o0);                            \
        o1 = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(m, x1 + i), o1);                            \
        o2 = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(m, x2 + i), o2);                            \
        o3 = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(m, x3 + i), o3);                            \
    }                                                                                              \
    out[0] = _mm512_reduce_add_ps(_mm512_add_ps(e0, o0));                                          \
    out[1] = _mm512_reduce_add_ps(_mm512_add_ps(e1, o1));                                          \
    out[2] = _mm512_reduce_add_ps(_mm512_add_ps(e2, o2));                                          \
    out[3] = _mm512_reduce_add_ps(_mm512_add_ps(e3, o3));

static float z_dot(const float *w, const float *x, int64_t n) { DOT1_512(ld_f32, ldm_f32) }
static float z_dot_f16(const uint16_t *w, const float *x, int64_t n) { DOT1_512(ld_f16, ldm_f16) }
static float z_dot_bf16(const uint16_t *w, const float *x, int64_t n) {
    DOT1_512(ld_bf16, ldm_bf16)
}
static void z_dot4(const float *w, const float *x, int64_t ldx, int64_t n, float *out) {
    DOT4_512(ld_f32, ldm_f32)
}
static void z_dot4_f16(const uint16_t *w, const float *x, int64_t ldx, int64_t n, float *out) {
    DOT4_512(ld_f16, ldm_f16)
}
static void z_dot4_bf16(const uint16_t *w, const float *x, int64_t ldx, int64_t n, float *out) {
    DOT4_512(ld_bf16, ldm_bf16)
}
/* Four weight rows w, w + ldw, ... against one input (a batch-1 step), read
 * one row after another. Interleaving the four rows in one loop, to load the
 * input once, streams four weight rows at once and measured 34-35 GB/s on two
 * Zen 5 cores against 57-61 GB/s row by row (f16, [200000, 768]): the input is
 * in L1 either way and the weights are what a step waits for. out[r] is the
 * one-row dot of row r, bit for bit. */
static void z_rows4(const float *w, int64_t ldw, const float *x, int64_t n, float *out) {
    for (int r = 0; r < 4; r++)
        out[r] = z_dot(w + r * ldw, x, n);
}
static void z_rows4_f16(const uint16_t *w, int64_t ldw, const float *x, int64_t n, float *out) {
    for (int r = 0; r < 4; r++)
        out[r] = z_dot_f16(w + r * ldw, x, n);
}
static void z_rows4_bf16(const uint16_t *w, int64_t ldw, const float *x, int64_t n, float *out) {
    for (int r = 0; r < 4; r++)
        out[r] = z_dot_bf16(w + r * ldw, x, n);
}

static void z_f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, ld_f16(src + i));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, ldm_f16(src + i, m));
    }
}

static void z_bf16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, ld_bf16(src + i));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, ldm_bf16(src + i, m));
    }
}

/* Attention of one query row over 16-bit keys and values (a decoder step's
 * caches; LD / LDM widen f16 or bf16): four keys per pass over q, 16 lanes, the tail of
 * a row masked; the weighted sum keeps 64 output columns in registers, two
 * keys in flight (even and odd keys into separate accumulators, added at
 * the end). */
/* The attention kernels walk one head's slice of each cached key / value
 * row: Dh 16-bit values (128 bytes at Dh 64) every ldk elements, a stride of
 * a whole model row. The hardware prefetchers follow that pattern poorly, and
 * a decoder step's cross-attention is a pass over megabytes of such slices, so
 * the rows ATTN_PF ahead are asked for in software. Batch-1 steps, f16, two
 * Zen 5 cores, medians of three interleaved runs (ms, small / base): none
 * 11.07 / 3.33, 8 rows 9.96 / 2.74, 16 rows 9.63 / 2.71, 32 rows 9.53 / 3.00. */
#define ATTN_PF 16
static inline void attn_prefetch_row(const uint16_t *row, int64_t n) {
    for (int64_t c = 0; c < n; c += 32) _mm_prefetch((const char *)(row + c), _MM_HINT_T0);
}

#define ATTN_SCORES_512(LD, LDM)                                                                    \
    int64_t j = 0;                                                                                  \
    for (; j + 4 <= n; j += 4) {                                                                    \
        const uint16_t *k0 = k + j * ldk, *k1 = k0 + ldk, *k2 = k1 + ldk, *k3 = k2 + ldk;           \
        if (j + ATTN_PF + 4 <= n)                                                                   \
            for (int r = 0; r < 4; r++) attn_prefetch_row(k0 + (ATTN_PF + r) * ldk, Dh);            \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                 \
        int64_t c = 0;                                                                              \
        for (; c + 16 <= Dh; c += 16) {                                                             \
            __m512 qv = _mm512_loadu_ps(q + c);                                                     \
            a0 = _mm512_fmadd_ps(qv, LD(k0 + c), a0);                                               \
            a1 = _mm512_fmadd_ps(qv, LD(k1 + c), a1);                                               \
            a2 = _mm512_fmadd_ps(qv, LD(k2 + c), a2);                                               \
            a3 = _mm512_fmadd_ps(qv, LD(k3 + c), a3);                                               \
        }                                                                                           \
        if (c < Dh) {                                                                               \
            __mmask16 m = tail_mask(Dh - c);                                                        \
            __m512 qv = _mm512_maskz_loadu_ps(m, q + c);                                            \
            a0 = _mm512_fmadd_ps(qv, LDM(k0 + c, m), a0);                                           \
            a1 = _mm512_fmadd_ps(qv, LDM(k1 + c, m), a1);                                           \
            a2 = _mm512_fmadd_ps(qv, LDM(k2 + c, m), a2);                                           \
            a3 = _mm512_fmadd_ps(qv, LDM(k3 + c, m), a3);                                           \
        }                                                                                           \
        scores[j] = _mm512_reduce_add_ps(a0) * scale;                                               \
        scores[j + 1] = _mm512_reduce_add_ps(a1) * scale;                                           \
        scores[j + 2] = _mm512_reduce_add_ps(a2) * scale;                                           \
        scores[j + 3] = _mm512_reduce_add_ps(a3) * scale;                                           \
    }                                                                                               \
    for (; j < n; j++) {                                                                            \
        const uint16_t *kr = k + j * ldk;                                                           \
        __m512 a = _mm512_setzero_ps();                                                             \
        int64_t c = 0;                                                                              \
        for (; c + 16 <= Dh; c += 16)                                                               \
            a = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), LD(kr + c), a);                             \
        if (c < Dh) {                                                                               \
            __mmask16 m = tail_mask(Dh - c);                                                        \
            a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + c), LDM(kr + c, m), a);                \
        }                                                                                           \
        scores[j] = _mm512_reduce_add_ps(a) * scale;                                                \
    }

#define ATTN_WSUM_512(LD, LDM)                                                                      \
    int64_t c0 = 0;                                                                                 \
    for (; c0 + 64 <= Dh; c0 += 64) {                                                               \
        __m512 e0 = _mm512_setzero_ps(), e1 = e0, e2 = e0, e3 = e0;                                 \
        __m512 o0 = e0, o1 = e0, o2 = e0, o3 = e0;                                                  \
        int64_t j = 0;                                                                              \
        for (; j + 2 <= n; j += 2) {                                                                \
            const uint16_t *va = v + j * ldv + c0, *vb = va + ldv;                                  \
            if (j + ATTN_PF + 2 <= n) {                                                             \
                attn_prefetch_row(va + ATTN_PF * ldv, Dh - c0 < 64 ? Dh - c0 : 64);                 \
                attn_prefetch_row(vb + ATTN_PF * ldv, Dh - c0 < 64 ? Dh - c0 : 64);                 \
            }                                                                                       \
            __m512 pa = _mm512_set1_ps(p[j]), pb = _mm512_set1_ps(p[j + 1]);                        \
            e0 = _mm512_fmadd_ps(pa, LD(va), e0);                                                   \
            e1 = _mm512_fmadd_ps(pa, LD(va + 16), e1);                                              \
            e2 = _mm512_fmadd_ps(pa, LD(va + 32), e2);                                              \
            e3 = _mm512_fmadd_ps(pa, LD(va + 48), e3);                                              \
            o0 = _mm512_fmadd_ps(pb, LD(vb), o0);                                                   \
            o1 = _mm512_fmadd_ps(pb, LD(vb + 16), o1);                                              \
            o2 = _mm512_fmadd_ps(pb, LD(vb + 32), o2);                                              \
            o3 = _mm512_fmadd_ps(pb, LD(vb + 48), o3);                                              \
        }                                                                                           \
        if (j < n) {                                                                                \
            const uint16_t *va = v + j * ldv + c0;                                                  \
            __m512 pa = _mm512_set1_ps(p[j]);                                                       \
            e0 = _mm512_fmadd_ps(pa, LD(va), e0);                                                   \
            e1 = _mm512_fmadd_ps(pa, LD(va + 16), e1);                                              \
            e2 = _mm512_fmadd_ps(pa, LD(va + 32), e2);                                              \
            e3 = _mm512_fmadd_ps(pa, LD(va + 48), e3);                                              \
        }                                                                                           \
        _mm512_storeu_ps(out + c0, _mm512_add_ps(e0, o0));                                          \
        _mm512_storeu_ps(out + c0 + 16, _mm512_add_ps(e1, o1));                                     \
        _mm512_storeu_ps(out + c0 + 32, _mm512_add_ps(e2, o2));                                     \
        _mm512_storeu_ps(out + c0 + 48, _mm512_add_ps(e3, o3));                                     \
    }                                                                                               \
    for (; c0 < Dh; c0 += 16) {                                                                     \
        __mmask16 m = Dh - c0 >= 16 ? (__mmask16)0xffff : tail_mask(Dh - c0);                       \
        __m512 a = _mm512_setzero_ps();                                                             \
        for (int64_t j = 0; j < n; j++)                                                             \
            a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), LDM(v + j * ldv + c0, m), a);                 \
        _mm512_mask_storeu_ps(out + c0, m, a);                                                      \
    }

static void z_attn_scores_f16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                              int64_t Dh, float scale, float *scores) {
    ATTN_SCORES_512(ld_f16, ldm_f16)
}
static void z_attn_wsum_f16(const float *p, const uint16_t *v, int64_t ldv, int64_t n,
                            int64_t Dh, float *out) {
    ATTN_WSUM_512(ld_f16, ldm_f16)
}
/* The same over bf16 keys and values (a bf16 model's caches). */
static void z_attn_scores_bf16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                               int64_t Dh, float scale, float *scores) {
    ATTN_SCORES_512(ld_bf16, ldm_bf16)
}
static void z_attn_wsum_bf16(const float *p, const uint16_t *v, int64_t ldv, int64_t n,
                             int64_t Dh, float *out) {
    ATTN_WSUM_512(ld_bf16, ldm_bf16)
}

/* G heads at once, each row walked whole (cpu_kernels.h); Dh a multiple of 16. */
#define ATTN_SCORES_HEADS_512(LD)                                                                   \
    for (int64_t j = 0; j < n; j++) {                                                               \
        const uint16_t *kr = k + j * ldk;                                                           \
        for (int64_t h = 0; h < G; h++) {                                                           \
            const float *qh = q + h * Dh;                                                           \
            const uint16_t *kh = kr + h * Dh;                                                       \
            __m512 a = _mm512_mul_ps(_mm512_loadu_ps(qh), LD(kh));                                  \
            for (int64_t c = 16; c < Dh; c += 16)                                                   \
                a = _mm512_fmadd_ps(_mm512_loadu_ps(qh + c), LD(kh + c), a);                        \
            scores[h * lds + j] = _mm512_reduce_add_ps(a) * scale;                                  \
        }                                                                                           \
    }

#define ATTN_WSUM_HEADS_512(LD)                                                                     \
    memset(out, 0, (size_t)(G * Dh) * sizeof(float));                                              \
    for (int64_t j = 0; j < n; j++) {                                                               \
        const uint16_t *vr = v + j * ldv;                                                           \
        for (int64_t h = 0; h < G; h++) {                                                           \
            __m512 pj = _mm512_set1_ps(p[h * ldp + j]);                                             \
            float *oh = out + h * Dh;                                                               \
            const uint16_t *vh = vr + h * Dh;                                                       \
            for (int64_t c = 0; c < Dh; c += 16)                                                    \
                _mm512_storeu_ps(oh + c, _mm512_fmadd_ps(pj, LD(vh + c), _mm512_loadu_ps(oh + c))); \
        }                                                                                           \
    }

static void z_attn_scores_heads_f16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                    int64_t Dh, int64_t G, float scale, float *scores,
                                    int64_t lds) {
    ATTN_SCORES_HEADS_512(ld_f16)
}
static void z_attn_wsum_heads_f16(const float *p, int64_t ldp, const uint16_t *v, int64_t ldv,
                                  int64_t n, int64_t Dh, int64_t G, float *out) {
    ATTN_WSUM_HEADS_512(ld_f16)
}
static void z_attn_scores_heads_bf16(const float *q, const uint16_t *k, int64_t ldk, int64_t n,
                                     int64_t Dh, int64_t G, float scale, float *scores,
                                     int64_t lds) {
    ATTN_SCORES_HEADS_512(ld_bf16)
}
static void z_attn_wsum_heads_bf16(const float *p, int64_t ldp, const uint16_t *v, int64_t ldv,
                                   int64_t n, int64_t Dh, int64_t G, float *out) {
    ATTN_WSUM_HEADS_512(ld_bf16)
}

static choir_cpu_ops g_ops;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
    g_ops = choir_cpu_ops_avx2;
    g_ops.dot = z_dot;
    g_ops.dot_f16 = z_dot_f16;
    g_ops.dot_bf16 = z_dot_bf16;
    g_ops.dot4 = z_dot4;
    g_ops.dot4_f16 = z_dot4_f16;
    g_ops.dot4_bf16 = z_dot4_bf16;
    g_ops.dot_rows4 = z_rows4;
    g_ops.dot_rows4_f16 = z_rows4_f16;
    g_ops.dot_rows4_bf16 = z_rows4_bf16;
    g_ops.f16_to_f32 = z_f16_to_f32;
    g_ops.attn_scores_f16 = z_attn_scores_f16;
    g_ops.attn_wsum_f16 = z_attn_wsum_f16;
    g_ops.attn_scores_bf16 = z_attn_scores_bf16;
    g_ops.attn_wsum_bf16 = z_attn_wsum_bf16;
    g_ops.attn_scores_heads_f16 = z_attn_scores_heads_f16;
    g_ops.attn_wsum_heads_f16 = z_attn_wsum_heads_f16;
    g_ops.attn_scores_heads_bf16 = z_attn_scores_heads_bf16;
    g_ops.attn_wsum_heads_bf16 = z_attn_wsum_heads_bf16;
    g_ops.bf16_to_f32 = z_bf16_to_f32;
}

const choir_cpu_ops *choir_cpu_ops_avx512(void) {
    pthread_once(&g_once, build_table);
    return &g_ops;
}
