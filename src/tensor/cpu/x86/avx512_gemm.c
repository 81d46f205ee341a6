/* AVX-512F f32 matrix product for the convolutions: C (+)= A B, C row-major
 * [M, N] with N the frames, A [M, K] read in place, B [K, N] packed.
 *
 * Why choir has its own: on AVX-512 CPUs where OpenBLAS's DYNAMIC_ARCH picks
 * its AVX2 (Haswell) kernels, Kokoro's decoder spent two thirds of its time in
 * them; this product runs 16-lane FMAs on the same data.
 *
 * The micro-kernel holds an 8 x 48 tile of C in 24 zmm registers: per step of
 * the inner dimension it loads three 16-frame vectors of B and broadcasts 8
 * elements of A (an embedded-broadcast FMA each), 24 FMAs for 11 loads. B is
 * packed by the caller in panels of 48 frames, each row of a panel 48
 * contiguous floats (one 192-byte line triple), zero past N, so the kernel's
 * loads are aligned and never masked. A is not packed: a convolution's weight
 * is already [Cout, Cin*K] (rows contiguous in k), and the transposed
 * convolution's is [Cin, Cout*K] (8 consecutive rows contiguous for each k);
 * both are broadcast from where they are.
 *
 * Blocking: the inner dimension goes in slices of G512_KC; for each slice,
 * each 8-row strip of A (8 x KC floats, in L1) runs against every panel of
 * B's slice (KC x 48 each; the block's panels together sit in L2). C is read
 * and written once per slice. Every output is its k terms added in k order
 * onto C's starting value (one FMA chain), so results differ from a
 * reference product only by the rounding of that order.
 *
 * Compiled with -mavx512f (and BW/VL); only reached when
 * choir_kernels_isa() == CHOIR_ISA_AVX512. */
#include <immintrin.h>
#include <string.h>

#include "tensor/cpu/cpu_kernels.h"

#define MR CHOIR_G512_MR
#define NR CHOIR_G512_NR
#define G512_KC CHOIR_G512_KC

void choir_g512_pack_b(const float *B, int64_t ldb, int64_t K, int64_t N, float *Bp) {
    int64_t panels = (N + NR - 1) / NR;
    for (int64_t p = 0; p < panels; p++) {
        int64_t n0 = p * NR, nn = N - n0 < NR ? N - n0 : NR;
        float *dst = Bp + p * K * NR;
        for (int64_t k = 0; k < K; k++) {
            memcpy(dst + k * NR, B + k * ldb + n0, (size_t)nn * sizeof(float));
            if (nn < NR) memset(dst + k * NR + nn, 0, (size_t)(NR - nn) * sizeof(float));
        }
    }
}

void choir_g512_pack_b_row(const float *row, int64_t N, int64_t k, int64_t K, float *Bp) {
    int64_t panels = (N + NR - 1) / NR;
    for (int64_t p = 0; p < panels; p++) {
        int64_t n0 = p * NR, nn = N - n0 < NR ? N - n0 : NR;
        float *dst = Bp + p * K * NR + k * NR;
        memcpy(dst, row + n0, (size_t)nn * sizeof(float));
        if (nn < NR) memset(dst + nn, 0, (size_t)(NR - nn) * sizeof(float));
    }
}

/* Masks of the 16 lanes at frames f0..f0+15 that fall in [lo, hi). */
static inline __mmask16 range_mask(int64_t f0, int64_t lo, int64_t hi) {
    int64_t a = lo - f0, b = hi - f0;
    if (a < 0) a = 0;
    if (b > 16) b = 16;
    if (b <= a) return 0;
    return (__mmask16)(((1u << (b - a)) - 1u) << a);
}

void choir_g512_pack_conv_row(const float *xr, int64_t base, int stride, int64_t lo, int64_t hi,
                              int64_t N, int64_t k, int64_t K, float *Bp) {
    int64_t panels = (N + NR - 1) / NR;
    if (stride == 1) {
        /* Masked loads never touch the lanes outside [lo, hi), so the
         * padding frames read nothing and come out zero. */
        for (int64_t p = 0; p < panels; p++) {
            float *dst = Bp + p * K * NR + k * NR;
            for (int v = 0; v < NR / 16; v++) {
                int64_t f0 = p * NR + 16 * v;
                __mmask16 m = range_mask(f0, lo, hi);
                _mm512_storeu_ps(dst + 16 * v, _mm512_maskz_loadu_ps(m, xr + base + f0));
            }
        }
        return;
    }
    for (int64_t p = 0; p < panels; p++) {
        float *dst = Bp + p * K * NR + k * NR;
        for (int64_t c = 0; c < NR; c++) {
            int64_t f = p * NR + c;
            dst[c] = f >= lo && f < hi ? xr[base + f * stride] : 0.0f;
        }
    }
}

static inline __mmask16 cols_mask(int nr, int v) {
    int n = nr - 16 * v;
    if (n >= 16) return 0xFFFF;
    return n <= 0 ? 0 : (__mmask16)((1u << n) - 1u);
}

/* One 8 x 48 tile over kc steps. Element (r, k) of A is a[r * ars + k * acs];
 * rows r >= mr read row 0 instead (their sums are not stored). b is the
 * panel's slice, kc rows of NR floats, 64-byte aligned. C rows r < mr and
 * columns < nr are written; load_c adds C's old values to the slice's sums,
 * else C is overwritten. */
static void tile_8x48(int64_t kc, const float *a, int64_t ars, int64_t acs, const float *b,
                      float *c, int64_t ldc, int mr, int nr, bool load_c) {
    const float *a0 = a, *a1 = a + (mr > 1 ? ars : 0), *a2 = a + (mr > 2 ? 2 * ars : 0),
                *a3 = a + (mr > 3 ? 3 * ars : 0), *a4 = a + (mr > 4 ? 4 * ars : 0),
                *a5 = a + (mr > 5 ? 5 * ars : 0), *a6 = a + (mr > 6 ? 6 * ars : 0),
                *a7 = a + (mr > 7 ? 7 * ars : 0);
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
    __m512 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
    __m512 c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
    __m512 c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
#define ROW(R, AP)                                                                                 \
    {                                                                                              \
        __m512 ar = _mm512_set1_ps(AP[off]);                                                       \
        c##R##0 = _mm512_fmadd_ps(ar, b0, c##R##0);                                                \
        c##R##1 = _mm512_fmadd_ps(ar, b1, c##R##1);                                                \
        c##R##2 = _mm512_fmadd_ps(ar, b2, c##R##2);                                                \
    }
    for (int64_t k = 0; k < kc; k++) {
        const float *bk = b + k * NR;
        __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16),
               b2 = _mm512_loadu_ps(bk + 32);
        int64_t off = k * acs;
        ROW(0, a0) ROW(1, a1) ROW(2, a2) ROW(3, a3) ROW(4, a4) ROW(5, a5) ROW(6, a6) ROW(7, a7)
    }
#undef ROW
    /* The slice's sums start from zero and are added to C's old values only
     * here: a deep product is a sum of slice sums (as blocked sgemm's), not
     * one FMA chain of K terms, whose rounding error grows with K (the
     * SAM-Audio codec's 10,752-deep convolutions doubled their error
     * against an exact product when C was the chain's start). */
    __mmask16 m0 = cols_mask(nr, 0), m1 = cols_mask(nr, 1), m2 = cols_mask(nr, 2);
    if (load_c) {
#define ADDC(R)                                                                                    \
    if (mr > R) {                                                                                  \
        c##R##0 = _mm512_add_ps(c##R##0, _mm512_maskz_loadu_ps(m0, c + R * ldc));                  \
        c##R##1 = _mm512_add_ps(c##R##1, _mm512_maskz_loadu_ps(m1, c + R * ldc + 16));             \
        c##R##2 = _mm512_add_ps(c##R##2, _mm512_maskz_loadu_ps(m2, c + R * ldc + 32));             \
    }
        ADDC(0) ADDC(1) ADDC(2) ADDC(3) ADDC(4) ADDC(5) ADDC(6) ADDC(7)
#undef ADDC
    }
    if (mr == MR && nr == NR) {
#define STORE(R)                                                                                   \
    _mm512_storeu_ps(c + R * ldc, c##R##0);                                                        \
    _mm512_storeu_ps(c + R * ldc + 16, c##R##1);                                                   \
    _mm512_storeu_ps(c + R * ldc + 32, c##R##2);
        STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5) STORE(6) STORE(7)
#undef STORE
        return;
    }
#define STOREM(R)                                                                                  \
    if (mr > R) {                                                                                  \
        _mm512_mask_storeu_ps(c + R * ldc, m0, c##R##0);                                           \
        _mm512_mask_storeu_ps(c + R * ldc + 16, m1, c##R##1);                                      \
        _mm512_mask_storeu_ps(c + R * ldc + 32, m2, c##R##2);                                      \
    }
    STOREM(0) STOREM(1) STOREM(2) STOREM(3) STOREM(4) STOREM(5) STOREM(6) STOREM(7)
#undef STOREM
}

void choir_g512_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs,
                     const float *Bp, float *C, int64_t ldc, bool accumulate) {
    if (M <= 0 || N <= 0) return;
    int64_t panels = (N + NR - 1) / NR;
    if (K <= 0) {
        if (!accumulate)
            for (int64_t m = 0; m < M; m++) memset(C + m * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    for (int64_t k0 = 0; k0 < K; k0 += G512_KC) {
        int64_t kc = K - k0 < G512_KC ? K - k0 : G512_KC;
        bool load_c = accumulate || k0 > 0;
        for (int64_t m0 = 0; m0 < M; m0 += MR) {
            int mr = (int)(M - m0 < MR ? M - m0 : MR);
            const float *a = A + m0 * ars + k0 * acs;
            for (int64_t p = 0; p < panels; p++) {
                int64_t n0 = p * NR;
                int nr = (int)(N - n0 < NR ? N - n0 : NR);
                tile_8x48(kc, a, ars, acs, Bp + p * K * NR + k0 * NR, C + m0 * ldc + n0, ldc, mr,
                          nr, load_c);
            }
        }
    }
}
