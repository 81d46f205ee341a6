/* Every SIMD kernel against its C twin on the same random inputs. The twins
 * sum in different orders and use different exp/tanh/erf approximations, so
 * each comparison states its tolerance; exact operations must match bit for
 * bit. Skips (passes) on CPUs without a SIMD build. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/kernels.h"
#include "choir/pool.h"
#include "choir/tensor.h"
#include "tensor/cpu/cpu_kernels.h"
#include "testutil.h"

static float *rnd(size_t n, uint64_t seed, float amp) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(x);
    tu_fill_uniform(x, n, seed, -amp, amp);
    return x;
}

static float *dup(const float *x, size_t n) {
    float *y = malloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static bool have_simd(void) { return choir_kernels_best_isa() != CHOIR_ISA_REF; }
static void use_ref(void) { choir_kernels_set_isa(CHOIR_ISA_REF); }
static void use_simd(void) { choir_kernels_set_isa(choir_kernels_best_isa()); }

/* |simd - ref| <= atol + rtol * |ref| element by element. */
static void assert_twin(const float *simd, const float *ref, size_t n, double atol, double rtol,
                        const char *what) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)simd[i] - ref[i]);
        if (!(d <= atol + rtol * fabs(ref[i])))
            fail_msg("%s[%zu]: simd %.9g vs ref %.9g", what, i, simd[i], ref[i]);
    }
}

typedef void (*unary_fn)(float *x, int64_t n);

static void test_unary_twins(void **state) {
    (void)state;
    if (!have_simd()) skip();
    const struct {
        unary_fn fn;
        const char *name;
        double atol, rtol;
    } ops[] = {
        {choir_gelu_erf, "gelu_erf", 5e-7, 2e-6}, {choir_gelu_tanh, "gelu_tanh", 5e-7, 2e-6},
        {choir_sigmoid, "sigmoid", 1e-7, 1e-6},   {choir_tanh, "tanh", 1e-7, 1e-6},
        {choir_silu, "silu", 5e-7, 2e-6},         {choir_relu, "relu", 0, 0},
    };
    const size_t n = 100003;
    float *x = rnd(n, 1, 10.0f);
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        float *a = dup(x, n), *b = dup(x, n);
        use_ref();
        ops[k].fn(a, (int64_t)n);
        use_simd();
        ops[k].fn(b, (int64_t)n);
        assert_twin(b, a, n, ops[k].atol, ops[k].rtol, ops[k].name);
        free(a), free(b);
    }
    /* snake over 4 channels of n/4 frames, with a large alpha*x range */
    const float alpha[4] = {0.1f, 1.0f, 7.0f, 60.0f};
    float *a = dup(x, n), *b = dup(x, n);
    use_ref();
    choir_snake(a, 4, (int64_t)n / 4, alpha);
    use_simd();
    choir_snake(b, 4, (int64_t)n / 4, alpha);
    assert_twin(b, a, n, 1e-6, 1e-6, "snake");
    free(a), free(b);
    a = dup(x, n), b = dup(x, n);
    use_ref();
    choir_leaky_relu(a, (int64_t)n, 0.01f);
    use_simd();
    choir_leaky_relu(b, (int64_t)n, 0.01f);
    assert_memory_equal(a, b, n * sizeof(float));
    free(a), free(b), free(x);
}

static void test_binary_twins(void **state) {
    (void)state;
    if (!have_simd()) skip();
    const size_t n = 4099;
    float *x = rnd(n, 2, 3.0f), *y = rnd(n, 3, 3.0f);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    use_ref();
    choir_add(x, y, a, (int64_t)n);
    use_simd();
    choir_add(x, y, b, (int64_t)n);
    assert_memory_equal(a, b, n * sizeof(float));
    use_ref();
    choir_mul(x, y, a, (int64_t)n);
    use_simd();
    choir_mul(x, y, b, (int64_t)n);
    assert_memory_equal(a, b, n * sizeof(float));
    memcpy(a, x, n * sizeof(float));
    memcpy(b, x, n * sizeof(float));
    use_ref();
    choir_scale(a, -1.7f, (int64_t)n);
    use_simd();
    choir_scale(b, -1.7f, (int64_t)n);
    assert_memory_equal(a, b, n * sizeof(float));
    free(x), free(y), free(a), free(b);
}

static void test_norm_twins(void **state) {
    (void)state;
    if (!have_simd()) skip();
    const int64_t rows = 31, dim = 1283;
    size_t n = (size_t)(rows * dim);
    float *x = rnd(n, 4, 4.0f), *g = rnd((size_t)dim, 5, 2.0f), *bt = rnd((size_t)dim, 6, 1.0f);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    use_ref();
    choir_layer_norm(x, a, rows, dim, g, bt, 1e-5f);
    use_simd();
    choir_layer_norm(x, b, rows, dim, g, bt, 1e-5f);
    assert_twin(b, a, n, 1e-5, 1e-5, "layer_norm");
    use_ref();
    choir_instance_norm(x, a, rows, dim, g, bt, 1e-5f); /* gamma/beta per channel: rows <= dim */
    use_simd();
    choir_instance_norm(x, b, rows, dim, g, bt, 1e-5f);
    assert_twin(b, a, n, 1e-5, 1e-5, "instance_norm");
    memcpy(a, x, n * sizeof(float));
    for (size_t i = 0; i < n; i += 7)
        a[i] = -INFINITY;
    memcpy(b, a, n * sizeof(float));
    use_ref();
    choir_softmax(a, rows, dim);
    use_simd();
    choir_softmax(b, rows, dim);
    assert_twin(b, a, n, 1e-9, 2e-6, "softmax");
    free(x), free(g), free(bt), free(a), free(b);
}

static void test_linear_twins(void **state) {
    (void)state;
    if (!have_simd()) skip();
    const int64_t N = 257, K = 1031;
    float *wf = rnd((size_t)(N * K), 7, 0.1f), *x = rnd((size_t)(40 * K), 8, 1.0f);
    float *bias = rnd((size_t)N, 9, 1.0f);
    uint16_t *w16 = malloc((size_t)(N * K) * sizeof(uint16_t));
    float *a = malloc((size_t)(40 * N) * sizeof(float)),
          *b = malloc((size_t)(40 * N) * sizeof(float));
    const choir_weight_kind kinds[] = {CHOIR_WEIGHT_F32, CHOIR_WEIGHT_F16, CHOIR_WEIGHT_BF16};
    const int64_t Ms[] = {1, 3, 40};
    for (int k = 0; k < 3; k++) {
        choir_weight W = choir_weight_f32(wf, N, K);
        if (kinds[k] == CHOIR_WEIGHT_F16) choir_f32_to_f16_n(wf, w16, N * K);
        if (kinds[k] == CHOIR_WEIGHT_BF16) choir_f32_to_bf16_n(wf, w16, N * K);
        if (kinds[k] != CHOIR_WEIGHT_F32) W.kind = kinds[k], W.data = w16;
        for (int m = 0; m < 3; m++) {
            use_ref();
            choir_linear(x, Ms[m], &W, bias, a);
            use_simd();
            choir_linear(x, Ms[m], &W, bias, b);
            assert_twin(b, a, (size_t)(Ms[m] * N), 1e-5, 1e-5, "linear");
        }
    }
    free(wf), free(x), free(bias), free(w16), free(a), free(b);
}

/* The batch-1 GEMV twins: on each ISA's table, four-row dots give exactly
 * the one-row dot's bits (so a linear layer's row never depends on how rows
 * were grouped), and the SIMD table agrees with the C one within 1e-5 of the
 * row's magnitude (different summation order). */
static void check_rows4(const choir_cpu_ops *ops, const choir_cpu_ops *ref, int64_t n) {
    const int64_t ld = n + 3;
    float *wf = rnd((size_t)(4 * ld), 41 + (uint64_t)n, 1.0f), *x = rnd((size_t)n, 43, 1.0f);
    uint16_t *wh = malloc((size_t)(4 * ld) * sizeof(uint16_t));
    uint16_t *wb = malloc((size_t)(4 * ld) * sizeof(uint16_t));
    choir_f32_to_f16_n(wf, wh, 4 * ld);
    choir_f32_to_bf16_n(wf, wb, 4 * ld);
    float a[4], b[4], mag = 0;
    for (int64_t i = 0; i < n; i++) mag += fabsf(x[i]);
    ops->dot_rows4(wf, ld, x, n, a);
    ref->dot_rows4(wf, ld, x, n, b);
    for (int r = 0; r < 4; r++) {
        float one = ops->dot(wf + r * ld, x, n);
        assert_memory_equal(&a[r], &one, sizeof one);
    }
    assert_twin(a, b, 4, 1e-5 * mag, 0, "dot_rows4");
    ops->dot_rows4_f16(wh, ld, x, n, a);
    ref->dot_rows4_f16(wh, ld, x, n, b);
    for (int r = 0; r < 4; r++) {
        float one = ops->dot_f16(wh + r * ld, x, n);
        assert_memory_equal(&a[r], &one, sizeof one);
    }
    assert_twin(a, b, 4, 1e-5 * mag, 0, "dot_rows4_f16");
    ops->dot_rows4_bf16(wb, ld, x, n, a);
    ref->dot_rows4_bf16(wb, ld, x, n, b);
    for (int r = 0; r < 4; r++) {
        float one = ops->dot_bf16(wb + r * ld, x, n);
        assert_memory_equal(&a[r], &one, sizeof one);
    }
    assert_twin(a, b, 4, 1e-5 * mag, 0, "dot_rows4_bf16");
    free(wf), free(x), free(wh), free(wb);
}

/* Decoder-step attention pieces: scores and the weighted sum of V against the
 * C twins, 1e-5 relative to the sums' magnitudes, at head sizes with and
 * without 8- and 64-wide blocks and key counts with and without 4-key tails. */
static void check_attn_step(const choir_cpu_ops *ops, const choir_cpu_ops *ref, int64_t n,
                            int64_t Dh) {
    const int64_t ld = Dh + 5;
    float *q = rnd((size_t)Dh, 51, 1.0f), *k = rnd((size_t)(n * ld), 53, 1.0f);
    float *p = rnd((size_t)n, 55, 1.0f);
    float *a = malloc((size_t)(n + Dh) * sizeof(float)), *b = malloc((size_t)(n + Dh) * sizeof(float));
    ops->attn_scores(q, k, ld, n, Dh, 0.125f, a);
    ref->attn_scores(q, k, ld, n, Dh, 0.125f, b);
    assert_twin(a, b, (size_t)n, 1e-5 * 0.125 * (double)Dh, 0, "attn_scores");
    ops->attn_wsum(p, k, ld, n, Dh, a);
    ref->attn_wsum(p, k, ld, n, Dh, b);
    assert_twin(a, b, (size_t)Dh, 1e-5 * (double)n, 0, "attn_wsum");
    free(q), free(k), free(p), free(a), free(b);
}

static void test_step_twins(void **state) {
    (void)state;
    /* The reference table against itself checks the bit identity there too. */
    const int64_t ns[] = {1, 7, 8, 15, 16, 17, 31, 384, 1000, 1536};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        check_rows4(&choir_cpu_ops_ref, &choir_cpu_ops_ref, ns[i]);
    const int64_t keys[] = {1, 3, 4, 5, 9, 1500};
    const int64_t dhs[] = {7, 24, 64, 80, 128};
#if defined(CHOIR_X86)
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) skip();
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        check_rows4(&choir_cpu_ops_avx2, &choir_cpu_ops_ref, ns[i]);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        for (size_t d = 0; d < sizeof dhs / sizeof dhs[0]; d++)
            check_attn_step(&choir_cpu_ops_avx2, &choir_cpu_ops_ref, keys[i], dhs[d]);
#else
    (void)keys, (void)dhs;
#endif
}

static void test_conv_attention_lstm_twins(void **state) {
    (void)state;
    if (!have_simd()) skip();
    /* Depthwise conv runs the direct loop, whose stride-1 rows use the axpy twin. */
    const int64_t C = 64, T = 777, K = 7;
    float *x = rnd((size_t)(C * T), 10, 1.0f), *w = rnd((size_t)(C * K), 11, 0.5f);
    float *a = malloc((size_t)(C * T) * sizeof(float)),
          *b = malloc((size_t)(C * T) * sizeof(float));
    use_ref();
    choir_conv1d(x, C, T, w, NULL, C, K, 1, 3, 1, (int)C, a);
    use_simd();
    choir_conv1d(x, C, T, w, NULL, C, K, 1, 3, 1, (int)C, b);
    assert_twin(b, a, (size_t)(C * T), 1e-6, 1e-5, "conv1d depthwise");
    use_ref();
    choir_conv_transpose1d(x, C, T / 2, w, NULL, C, K, 1, 3, 0, 1, (int)C, a);
    use_simd();
    choir_conv_transpose1d(x, C, T / 2, w, NULL, C, K, 1, 3, 0, 1, (int)C, b);
    assert_twin(b, a, (size_t)(C * (T / 2)), 1e-6, 1e-5, "conv_transpose1d depthwise");

    /* Attention: the reference's online softmax against the SIMD build's blocks. */
    const int64_t Tq = 75, Tk = 300, Dh = 64;
    const int H = 4;
    float *q = rnd((size_t)(Tq * H * Dh), 12, 2.0f), *k = rnd((size_t)(Tk * H * Dh), 13, 2.0f);
    float *v = rnd((size_t)(Tk * H * Dh), 14, 1.0f);
    float *oa = malloc((size_t)(Tq * H * Dh) * sizeof(float)),
          *ob = malloc((size_t)(Tq * H * Dh) * sizeof(float));
    use_ref();
    choir_attention(q, H * Dh, k, H * Dh, v, H * Dh, oa, H * Dh, Tq, Tk, H, Dh, 0.125f, NULL, true);
    use_simd();
    choir_attention(q, H * Dh, k, H * Dh, v, H * Dh, ob, H * Dh, Tq, Tk, H, Dh, 0.125f, NULL, true);
    assert_twin(ob, oa, (size_t)(Tq * H * Dh), 1e-5, 1e-4, "attention");

    const int64_t LT = 50, In = 40, LH = 32;
    float *lx = rnd((size_t)(LT * In), 15, 1.0f), *wih = rnd((size_t)(4 * LH * In), 16, 0.3f);
    float *whh = rnd((size_t)(4 * LH * LH), 17, 0.3f);
    float *scratch = malloc((size_t)(4 * LH * (LT + 1)) * sizeof(float));
    use_ref();
    choir_lstm(lx, LT, In, LH, wih, whh, NULL, NULL, NULL, NULL, true, a, LH, scratch);
    use_simd();
    choir_lstm(lx, LT, In, LH, wih, whh, NULL, NULL, NULL, NULL, true, b, LH, scratch);
    assert_twin(b, a, (size_t)(LT * LH), 1e-6, 1e-5, "lstm");
    free(x), free(w), free(a), free(b), free(q), free(k), free(v), free(oa), free(ob);
    free(lx), free(wih), free(whh), free(scratch);
}

#if defined(CHOIR_X86)
/* The AVX-512 convolution product (choir_g512_gemm) against a double
 * reference, element by element within 1e-5 of sum_k |A B| (one term wrong
 * is ~1/K of that), at M, N, K on and off the 8 x 48 tile and the 256-deep
 * slice, both A layouts, overwrite and accumulate; C's padding columns and
 * the rows past M are never written. */
static void check_g512(int64_t M, int64_t N, int64_t K, bool a_trans, bool accumulate) {
    const int64_t lda = a_trans ? M + 3 : K + 5, ldc = N + 7;
    float *A = rnd((size_t)((a_trans ? K : M) * lda), 61 + (uint64_t)(M * 7 + N), 1.0f);
    float *B = rnd((size_t)(K * N + 1), 63 + (uint64_t)K, 1.0f);
    float *C = rnd((size_t)((M + 1) * ldc), 65, 1.0f), *C0 = dup(C, (size_t)((M + 1) * ldc));
    float *Bp = aligned_alloc(64, (size_t)(choir_g512_bpack_floats(K, N) + 16) * sizeof(float));
    assert_non_null(Bp);
    choir_g512_pack_b(B, N, K, N, Bp);
    choir_g512_gemm(M, N, K, A, a_trans ? 1 : lda, a_trans ? lda : 1, Bp, C, ldc, accumulate);
    for (int64_t m = 0; m < M + 1; m++)
        for (int64_t n = 0; n < ldc; n++) {
            float got = C[m * ldc + n];
            if (m == M || n >= N) {
                if (got != C0[m * ldc + n]) fail_msg("g512 %lldx%lldx%lld wrote (%lld, %lld)",
                                                     (long long)M, (long long)N, (long long)K,
                                                     (long long)m, (long long)n);
                continue;
            }
            double want = accumulate ? C0[m * ldc + n] : 0.0, mag = fabs(want);
            for (int64_t k = 0; k < K; k++) {
                double a = a_trans ? A[k * lda + m] : A[m * lda + k];
                want += a * B[k * N + n];
                mag += fabs(a * B[k * N + n]);
            }
            if (!(fabs(got - want) <= 1e-5 * mag + 1e-30))
                fail_msg("g512 %lldx%lldx%lld%s%s (%lld, %lld): %.9g vs %.9g", (long long)M,
                         (long long)N, (long long)K, a_trans ? " A^T" : "",
                         accumulate ? " +=" : "", (long long)m, (long long)n, got, want);
        }
    free(A), free(B), free(C), free(C0), free(Bp);
}
#endif

static void test_conv_gemm512(void **state) {
    (void)state;
#if defined(CHOIR_X86)
    if (choir_kernels_best_isa() != CHOIR_ISA_AVX512) skip();
    const int64_t shapes[][3] = {
        {1, 1, 1},    {1, 47, 3},   {7, 48, 16},   {8, 49, 17},    {9, 96, 255},
        {13, 5, 256}, {16, 100, 257}, {22, 385, 7}, {37, 143, 300}, {130, 97, 513},
        {3, 1000, 64}, {64, 48, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int v = 0; v < 4; v++)
            check_g512(shapes[i][0], shapes[i][1], shapes[i][2], v & 1, v & 2);
    /* Through the convolutions at Kokoro-like shapes: several frame blocks
     * with a short tail, a block split over output-channel slices (one block
     * of frames), stride and dilation; the AVX-512 product against the C
     * reference's sgemm within 1e-5 relative + 1e-5 * sqrt(depth). */
    const struct {
        int64_t Cin, Cout, T, K;
        int stride, pad, dil;
    } convs[] = {{128, 128, 1000, 7, 1, 9, 3}, {96, 130, 200, 3, 1, 1, 1},
                 {64, 22, 801, 7, 1, 3, 1},    {40, 56, 390, 5, 2, 2, 1}};
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        int64_t Cin = convs[i].Cin, Cout = convs[i].Cout, T = convs[i].T, K = convs[i].K;
        int64_t Tout = choir_conv1d_out_len(T, K, convs[i].stride, convs[i].pad, convs[i].dil);
        float *x = rnd((size_t)(Cin * T), 90 + i, 1.0f), *w = rnd((size_t)(Cout * Cin * K), 91, 0.2f);
        float *bias = rnd((size_t)(Cout > Cin ? Cout : Cin), 92, 1.0f); /* both directions */
        float *a = malloc((size_t)(Cout * Tout) * sizeof(float)),
              *b = malloc((size_t)(Cout * Tout) * sizeof(float));
        use_ref();
        choir_conv1d(x, Cin, T, w, bias, Cout, K, convs[i].stride, convs[i].pad, convs[i].dil, 1, a);
        use_simd();
        choir_conv1d(x, Cin, T, w, bias, Cout, K, convs[i].stride, convs[i].pad, convs[i].dil, 1, b);
        assert_twin(b, a, (size_t)(Cout * Tout), 1e-5 * sqrt((double)(Cin * K)), 1e-5, "conv1d g512");
        /* The transposed one: x as [Cout, T] into Cin channels. */
        int64_t Tt = choir_conv_transpose1d_out_len(T / 2, K, convs[i].stride, convs[i].pad, 0,
                                                    convs[i].dil);
        float *ta = malloc((size_t)(Cin * Tt) * sizeof(float)),
              *tb = malloc((size_t)(Cin * Tt) * sizeof(float));
        use_ref();
        choir_conv_transpose1d(x, Cout > Cin ? Cin : Cout, T / 2, w, bias, Cin, K, convs[i].stride,
                               convs[i].pad, 0, convs[i].dil, 1, ta);
        use_simd();
        choir_conv_transpose1d(x, Cout > Cin ? Cin : Cout, T / 2, w, bias, Cin, K, convs[i].stride,
                               convs[i].pad, 0, convs[i].dil, 1, tb);
        assert_twin(tb, ta, (size_t)(Cin * Tt), 1e-5 * sqrt((double)Cin), 1e-5, "conv_transpose1d g512");
        free(x), free(w), free(bias), free(a), free(b), free(ta), free(tb);
    }
#else
    skip();
#endif
}

/* Pass 0, 1, 2: the reference, AVX2 (also on an AVX-512 CPU) and the best
 * ISA, selected; false for a pass this CPU cannot run. */
static bool use_isa_pass(int pass) {
    const choir_isa isas[] = {CHOIR_ISA_REF, CHOIR_ISA_AVX2, choir_kernels_best_isa()};
    if (pass == 1 && choir_kernels_best_isa() != CHOIR_ISA_AVX2 &&
        choir_kernels_best_isa() != CHOIR_ISA_AVX512)
        return false;
    choir_kernels_set_isa(isas[pass]);
    return true;
}

/* choir_attention_f16 and choir_attention_bf16 on every ISA against
 * choir_attention over the same values widened: the step form (Tq 1 and 3,
 * the 16-bit kernels) and a larger call (Tq 9, widened into scratch). Dh 40
 * reaches the masked and scalar tails; 37 keys the one-key tail of the
 * four-key loop. Both sides sum the same widened products, so only the
 * order of the additions differs (1e-5 on outputs of magnitude < 1). */
static void test_attention_f16(void **state) {
    (void)state;
    enum { H = 2, DH = 40, D = H * DH, TK = 37, TQ = 9 };
    static float q[TQ * D], kf[TK * D], vf[TK * D], kb[TK * D], vb[TK * D], want[TQ * D],
        got[TQ * D];
    static uint16_t k16[TK * D], v16[TK * D], kbf[TK * D], vbf[TK * D];
    uint32_t r = 12345u;
    for (int i = 0; i < TQ * D; i++) q[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < TK * D; i++) {
        float kx = (float)((r = r * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
        float vx = (float)((r = r * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
        k16[i] = choir_f32_to_f16(kx);
        v16[i] = choir_f32_to_f16(vx);
        kf[i] = choir_f16_to_f32(k16[i]);
        vf[i] = choir_f16_to_f32(v16[i]);
        kbf[i] = choir_f32_to_bf16(kx);
        vbf[i] = choir_f32_to_bf16(vx);
        kb[i] = choir_bf16_to_f32(kbf[i]);
        vb[i] = choir_bf16_to_f32(vbf[i]);
    }
    const int tqs[] = {1, 3, TQ};
    for (int pass = 0; pass < 3; pass++) {
        if (!use_isa_pass(pass)) continue;
        for (int t = 0; t < 3; t++) {
            int tq = tqs[t];
            choir_attention(q, D, kf, D, vf, D, want, D, tq, TK, H, DH, 0.158f, NULL, tq > 1);
            assert_int_equal(choir_attention_f16(q, D, k16, D, v16, D, got, D, tq, TK, H, DH,
                                                 0.158f, NULL, tq > 1),
                             0);
            for (int i = 0; i < tq * D; i++) assert_true(fabsf(got[i] - want[i]) < 1e-5f);
            choir_attention(q, D, kb, D, vb, D, want, D, tq, TK, H, DH, 0.158f, NULL, tq > 1);
            assert_int_equal(choir_attention_bf16(q, D, kbf, D, vbf, D, got, D, tq, TK, H, DH,
                                                  0.158f, NULL, tq > 1),
                             0);
            for (int i = 0; i < tq * D; i++) assert_true(fabsf(got[i] - want[i]) < 1e-5f);
        }
    }
    use_simd();
}

/* The step over a 16-bit cache with Dh a multiple of 16 splits the keys
 * into chunks, every head at once, and merges the chunks' softmax pieces:
 * against a double-precision softmax over the same rounded keys and values,
 * on every ISA and 1 or 2 threads, with a mask (one key masked in every
 * row) and the causal limit (Tq 3). 20 heads over 700 keys need more than
 * one chunk even on one thread (the scores of a chunk are capped); 5 heads
 * over 150 keys one per thread. */
static void check_step_chunks(int H, int TK, bool bf16) {
    enum { DH = 64, TQ = 3 };
    int64_t D = (int64_t)H * DH;
    float *q = rnd((size_t)(TQ * D), 7, 0.5f), *kx = rnd((size_t)(TK * D), 8, 1.0f);
    float *vx = rnd((size_t)(TK * D), 9, 1.0f), *mask = rnd((size_t)(TQ * TK), 10, 0.5f);
    float *got = malloc((size_t)(TQ * D) * sizeof(float));
    uint16_t *k16 = malloc((size_t)(TK * D) * sizeof(uint16_t));
    uint16_t *v16 = malloc((size_t)(TK * D) * sizeof(uint16_t));
    double *sc = malloc((size_t)TK * sizeof(double));
    assert_non_null(got), assert_non_null(k16), assert_non_null(v16), assert_non_null(sc);
    for (int64_t i = 0; i < TK * D; i++) {
        k16[i] = bf16 ? choir_f32_to_bf16(kx[i]) : choir_f32_to_f16(kx[i]);
        v16[i] = bf16 ? choir_f32_to_bf16(vx[i]) : choir_f32_to_f16(vx[i]);
        kx[i] = bf16 ? choir_bf16_to_f32(k16[i]) : choir_f16_to_f32(k16[i]);
        vx[i] = bf16 ? choir_bf16_to_f32(v16[i]) : choir_f16_to_f32(v16[i]);
    }
    for (int i = 0; i < TQ; i++) mask[i * TK + 5 + i] = -INFINITY;
    const float scale = 0.125f;
    for (int tq = 1; tq <= TQ; tq += 2) {
        for (int threads = 1; threads <= 2; threads++) {
            choir_pool_set_default_threads(threads);
            int rc = bf16 ? choir_attention_bf16(q, D, k16, D, v16, D, got, D, tq, TK, H, DH,
                                                 scale, mask, tq > 1)
                          : choir_attention_f16(q, D, k16, D, v16, D, got, D, tq, TK, H, DH,
                                                scale, mask, tq > 1);
            assert_int_equal(rc, 0);
            for (int i = 0; i < tq; i++) {
                int64_t nk = tq > 1 ? TK - tq + i + 1 : TK;
                for (int h = 0; h < H; h++) {
                    double m = -INFINITY, sum = 0.0;
                    for (int64_t j = 0; j < nk; j++) {
                        double d = 0.0;
                        for (int c = 0; c < DH; c++)
                            d += (double)q[i * D + h * DH + c] * kx[j * D + h * DH + c];
                        sc[j] = d * scale + mask[i * TK + j];
                        if (sc[j] > m) m = sc[j];
                    }
                    for (int64_t j = 0; j < nk; j++) sum += (sc[j] = exp(sc[j] - m));
                    for (int c = 0; c < DH; c++) {
                        double o = 0.0;
                        for (int64_t j = 0; j < nk; j++) o += sc[j] * vx[j * D + h * DH + c];
                        assert_true(fabs(got[i * D + h * DH + c] - o / sum) < 2e-5);
                    }
                }
            }
        }
    }
    choir_pool_set_default_threads(0);
    free(q), free(kx), free(vx), free(mask), free(got), free(k16), free(v16), free(sc);
}

static void test_attention_step_chunks(void **state) {
    (void)state;
    for (int pass = 0; pass < 3; pass++) {
        if (!use_isa_pass(pass)) continue;
        check_step_chunks(5, 150, false);
        check_step_chunks(5, 150, true);
        check_step_chunks(20, 700, false);
    }
    use_simd();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_f16),
        cmocka_unit_test(test_attention_step_chunks),
        cmocka_unit_test(test_unary_twins),
        cmocka_unit_test(test_binary_twins),
        cmocka_unit_test(test_norm_twins),
        cmocka_unit_test(test_linear_twins),
        cmocka_unit_test(test_conv_attention_lstm_twins),
        cmocka_unit_test(test_step_twins),
        cmocka_unit_test(test_conv_gemm512),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    use_simd();
    return rc;
}
