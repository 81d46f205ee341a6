/* Kernels against naive double-precision references on random inputs, on
 * every ISA this CPU has (the C reference and the SIMD build), with odd sizes,
 * strides, groups, dilation, padding, masks and both LSTM directions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/kernels.h"
#include "choir/pool.h"
#include "choir/tensor.h"
#include "testutil.h"

#define TOL_SUM 2e-5 /* rel L2 for float32 sums of up to a few thousand terms */
#define TOL_ACT 2e-6 /* rel L2 for activations */

static float *rnd(size_t n, uint64_t seed) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(x);
    tu_fill_uniform(x, n, seed, -1.0f, 1.0f);
    return x;
}

static int isa_count(choir_isa *isas) {
    isas[0] = CHOIR_ISA_REF;
    choir_isa best = choir_kernels_best_isa();
    if (best == CHOIR_ISA_REF) return 1;
    isas[1] = best;
    if (best != CHOIR_ISA_AVX512) return 2;
    isas[2] = CHOIR_ISA_AVX2; /* an AVX-512 CPU also runs (and tests) the AVX2 twins */
    return 3;
}

/* Kernels that need scratch memory fall back to their plain reference loop
 * when it cannot be allocated; each case runs both ways. */
static bool g_starve;
static void maybe_starve(void) {
    if (g_starve) choir_alloc_fail_after(1);
}
static void end_starve(void) { choir_alloc_fail_after(0); }

#define FOR_EACH_ISA(var)                                                                          \
    choir_isa isa_list_[3];                                                                        \
    int isa_n_ = isa_count(isa_list_);                                                             \
    for (int isa_i_ = 0; isa_i_ < isa_n_; isa_i_++)                                                \
        for (choir_isa var = choir_kernels_set_isa(isa_list_[isa_i_]), *once_ = &var; once_;       \
             once_ = NULL)

static void assert_close(const float *got, const double *want, size_t n, double tol,
                         const char *what) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
    }
    double rel = sqrt(num) / (sqrt(den) > 1e-30 ? sqrt(den) : 1e-30);
    if (!(rel <= tol))
        fail_msg("%s: rel L2 %.3g > %.3g (isa %s)", what, rel, tol,
                 choir_isa_name(choir_kernels_isa()));
}

/* --- matrix products ---------------------------------------------------------- */

static void naive_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, double beta,
                       const float *C0, double *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
            }
            C[i * N + j] = alpha * s + beta * C0[i * ldc + j];
        }
}

static void test_gemm(void **state) {
    (void)state;
    const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {130, 70, 129}, {64, 300, 200}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
                int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                float *A = rnd((size_t)((ta ? K : M) * lda), 1 + s);
                float *B = rnd((size_t)((tb ? N : K) * ldb), 2 + s);
                float *C = rnd((size_t)(M * ldc), 3 + s);
                float *C0 = malloc((size_t)(M * ldc) * sizeof(float));
                memcpy(C0, C, (size_t)(M * ldc) * sizeof(float));
                double *want = malloc((size_t)(M * N) * sizeof(double));
                naive_gemm(ta, tb, M, N, K, 0.75, A, lda, B, ldb, 0.5, C0, want, ldc);
                choir_gemm_f32(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.5f, C, ldc);
                float *packed = malloc((size_t)(M * N) * sizeof(float));
                for (int64_t i = 0; i < M; i++)
                    memcpy(packed + i * N, C + i * ldc, (size_t)N * sizeof(float));
                assert_close(packed, want, (size_t)(M * N), TOL_SUM, "gemm");
                /* The padding between rows is never written. */
                for (int64_t i = 0; i < M; i++)
                    assert_true(C[i * ldc + N] == C0[i * ldc + N] &&
                                C[i * ldc + N + 1] == C0[i * ldc + N + 1]);
                free(A), free(B), free(C), free(C0), free(want), free(packed);
            }
}

static void check_linear(choir_weight_kind kind, int64_t M, int64_t N, int64_t K, bool with_bias) {
    float *Wf = rnd((size_t)(N * K), 11);
    uint16_t *Wh = malloc((size_t)(N * K) * sizeof(uint16_t));
    float *x = rnd((size_t)(M * K), 12);
    float *bias = with_bias ? rnd((size_t)N, 13) : NULL;
    choir_weight W = choir_weight_f32(Wf, N, K);
    /* The oracle uses exactly the weights the kernel sees: the rounded halves. */
    if (kind != CHOIR_WEIGHT_F32) {
        for (int64_t i = 0; i < N * K; i++) {
            Wh[i] = kind == CHOIR_WEIGHT_F16 ? choir_f32_to_f16(Wf[i]) : choir_f32_to_bf16(Wf[i]);
            Wf[i] = kind == CHOIR_WEIGHT_F16 ? choir_f16_to_f32(Wh[i]) : choir_bf16_to_f32(Wh[i]);
        }
        W.kind = kind;
        W.data = Wh;
    }
    assert_int_equal(choir_weight_bytes(&W), (size_t)(N * K) * (kind == CHOIR_WEIGHT_F32 ? 4 : 2));
    float *row = malloc((size_t)K * sizeof(float));
    choir_weight_row_f32(&W, N - 1, row);
    assert_memory_equal(row, Wf + (N - 1) * K, (size_t)K * sizeof(float));
    double *want = malloc((size_t)(M * N) * sizeof(double));
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0.0;
            for (int64_t k = 0; k < K; k++)
                s += (double)x[m * K + k] * Wf[n * K + k];
            want[m * N + n] = s;
        }
    float *y = malloc((size_t)(M * N) * sizeof(float));
    FOR_EACH_ISA(isa) {
        for (g_starve = false;; g_starve = true) {
            memset(y, 0xff, (size_t)(M * N) * sizeof(float));
            maybe_starve();
            choir_linear(x, M, &W, bias, y);
            end_starve();
            assert_close(y, want, (size_t)(M * N), TOL_SUM,
                         g_starve ? "linear (no scratch)" : "linear");
            if (g_starve) break;
        }
    }
    free(Wf), free(Wh), free(x), free(bias), free(row), free(want), free(y);
}

static void test_linear(void **state) {
    (void)state;
    const choir_weight_kind kinds[] = {CHOIR_WEIGHT_F32, CHOIR_WEIGHT_F16, CHOIR_WEIGHT_BF16};
    for (int k = 0; k < 3; k++) {
        check_linear(kinds[k], 1, 77, 131, true);
        check_linear(kinds[k], 1, 300, 384, false);
        check_linear(kinds[k], 3, 65, 200, true);
        check_linear(kinds[k], 37, 130, 99, true); /* f16/bf16: converted row blocks + sgemm */
        check_linear(kinds[k], 9, 64, 16, false);
        check_linear(kinds[k], 300, 270, 40, true); /* several tiles, ragged edges */
        check_linear(kinds[k], 30, 5, 0, true);     /* no inputs: bias only */
    }
}

/* Up to 24 rows (a decoder step over a batch of sequences), each output row is
 * bit-identical whatever the batch size: batched decoding equals unbatched. */
static void test_linear_batch_invariant(void **state) {
    (void)state;
    const int64_t N = 67, K = 203, MAXM = 24;
    float *wf = rnd((size_t)(N * K), 14), *x = rnd((size_t)(MAXM * K), 15), *b = rnd((size_t)N, 16);
    uint16_t *wh = malloc((size_t)(N * K) * sizeof(uint16_t));
    float *single = malloc((size_t)(MAXM * N) * sizeof(float));
    float *batched = malloc((size_t)(MAXM * N) * sizeof(float));
    const choir_weight_kind kinds[] = {CHOIR_WEIGHT_F32, CHOIR_WEIGHT_F16, CHOIR_WEIGHT_BF16};
    for (int k = 0; k < 3; k++) {
        choir_weight W = choir_weight_f32(wf, N, K);
        if (kinds[k] == CHOIR_WEIGHT_F16) choir_f32_to_f16_n(wf, wh, N * K);
        if (kinds[k] == CHOIR_WEIGHT_BF16) choir_f32_to_bf16_n(wf, wh, N * K);
        if (kinds[k] != CHOIR_WEIGHT_F32) W.kind = kinds[k], W.data = wh;
        FOR_EACH_ISA(isa) {
            for (int64_t m = 0; m < MAXM; m++)
                choir_linear(x + m * K, 1, &W, b, single + m * N);
            for (int64_t M = 2; M <= MAXM; M++) {
                choir_linear(x, M, &W, b, batched);
                assert_memory_equal(batched, single, (size_t)(M * N) * sizeof(float));
            }
        }
    }
    free(wf), free(x), free(b), free(wh), free(single), free(batched);
}

/* choir_linear_n gives each layer's choir_linear bits: three weights of one
 * kind and width (q/k/v-like, 67, 130 and 8 rows: tails of the four-row
 * pass, uneven slices), one without bias, at a step's rows (fused into one
 * job) and at 30 rows (n plain calls), and a mixed set (one f32 among
 * f16: fused too, each task reading its own weight's kind). */
static void test_linear_n(void **state) {
    (void)state;
    const int64_t K = 203, Ns[3] = {67, 130, 8}, MAXM = 30;
    float *x = rnd((size_t)(MAXM * K), 21);
    float *wf[3], *b[3], *want[3], *got[3];
    uint16_t *wh[3];
    for (int i = 0; i < 3; i++) {
        wf[i] = rnd((size_t)(Ns[i] * K), 22 + i);
        b[i] = rnd((size_t)Ns[i], 25 + i);
        wh[i] = malloc((size_t)(Ns[i] * K) * sizeof(uint16_t));
        want[i] = malloc((size_t)(MAXM * Ns[i]) * sizeof(float));
        got[i] = malloc((size_t)(MAXM * Ns[i]) * sizeof(float));
    }
    const choir_weight_kind kinds[] = {CHOIR_WEIGHT_F32, CHOIR_WEIGHT_F16, CHOIR_WEIGHT_BF16};
    const int64_t Ms[] = {1, 3, 5, 24, 30};
    for (int k = 0; k < 4; k++) {
        choir_weight W[3];
        for (int i = 0; i < 3; i++) {
            /* k == 3: f16 weights with an f32 one in the middle. */
            choir_weight_kind kind = k < 3 ? kinds[k] : i == 1 ? CHOIR_WEIGHT_F32 : CHOIR_WEIGHT_F16;
            W[i] = choir_weight_f32(wf[i], Ns[i], K);
            if (kind == CHOIR_WEIGHT_F16) choir_f32_to_f16_n(wf[i], wh[i], Ns[i] * K);
            if (kind == CHOIR_WEIGHT_BF16) choir_f32_to_bf16_n(wf[i], wh[i], Ns[i] * K);
            if (kind != CHOIR_WEIGHT_F32) W[i].kind = kind, W[i].data = wh[i];
        }
        const choir_weight *Wp[3] = {&W[0], &W[1], &W[2]};
        const float *bp[3] = {b[0], NULL, b[2]};
        FOR_EACH_ISA(isa) {
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                int64_t M = Ms[mi];
                for (int i = 0; i < 3; i++) {
                    choir_linear(x, M, &W[i], bp[i], want[i]);
                    memset(got[i], 0xff, (size_t)(M * Ns[i]) * sizeof(float));
                }
                choir_linear_n(x, M, 3, Wp, bp, got);
                for (int i = 0; i < 3; i++)
                    assert_memory_equal(got[i], want[i], (size_t)(M * Ns[i]) * sizeof(float));
            }
        }
    }
    for (int i = 0; i < 3; i++) free(wf[i]), free(b[i]), free(wh[i]), free(want[i]), free(got[i]);
    free(x);
}

/* --- elementwise ------------------------------------------------------------- */

typedef void (*unary_fn)(float *x, int64_t n);
static double d_gelu_erf(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }
static double d_gelu_tanh(double v) {
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}
static double d_sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }
static double d_silu(double v) { return v / (1.0 + exp(-v)); }
static double d_relu(double v) { return v > 0 ? v : 0; }

static void check_unary(unary_fn fn, double (*ref)(double), const char *what) {
    const int64_t n = 1001 + 40000; /* odd, and long enough to run threaded */
    float *x0 = rnd((size_t)n, 21);
    for (int64_t i = 0; i < n; i++)
        x0[i] *= (i % 7 == 0) ? 12.0f : 4.0f; /* reach the tails */
    x0[0] = 0.0f;
    x0[1] = 1e-6f;
    x0[2] = -30.0f;
    x0[3] = 30.0f;
    double *want = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        want[i] = ref(x0[i]);
    float *x = malloc((size_t)n * sizeof(float));
    FOR_EACH_ISA(isa) {
        for (int64_t len = 0; len <= 19; len += 19) { /* short arrays exercise the tails alone */
            int64_t m = len ? len : n;
            memcpy(x, x0, (size_t)m * sizeof(float));
            fn(x, m);
            assert_close(x, want, (size_t)m, TOL_ACT, what);
            for (int64_t i = 0; i < 4; i++) /* relative error held even at the edges */
                if (fabs(x[i] - want[i]) > 1e-6 * fabs(want[i]) + 1e-30)
                    fail_msg("%s(%g) = %.9g, want %.9g", what, x0[i], x[i], want[i]);
        }
    }
    free(x0), free(want), free(x);
}

static void test_activations(void **state) {
    (void)state;
    check_unary(choir_gelu_erf, d_gelu_erf, "gelu_erf");
    check_unary(choir_gelu_tanh, d_gelu_tanh, "gelu_tanh");
    check_unary(choir_sigmoid, d_sigmoid, "sigmoid");
    check_unary(choir_tanh, tanh, "tanh");
    check_unary(choir_silu, d_silu, "silu");
    check_unary(choir_relu, d_relu, "relu");
    float x[5] = {-2, -0.5f, 0, 0.5f, 3};
    choir_leaky_relu(x, 5, 0.2f);
    float want[5] = {-0.4f, -0.1f, 0, 0.5f, 3};
    for (int i = 0; i < 5; i++)
        assert_float_equal(x[i], want[i], 1e-7);
}

static void test_snake(void **state) {
    (void)state;
    const int64_t C = 5, T = 9001;
    float *x0 = rnd((size_t)(C * T), 25);
    for (int64_t i = 0; i < C * T; i++)
        x0[i] *= 6.0f;
    const float alpha[5] = {0.05f, 0.5f, 1.0f, 3.0f, 17.0f};
    double *want = malloc((size_t)(C * T) * sizeof(double));
    for (int64_t c = 0; c < C; c++)
        for (int64_t t = 0; t < T; t++) {
            double v = x0[c * T + t], s = sin((double)alpha[c] * v);
            want[c * T + t] = v + s * s / alpha[c];
        }
    float *x = malloc((size_t)(C * T) * sizeof(float));
    FOR_EACH_ISA(isa) {
        memcpy(x, x0, (size_t)(C * T) * sizeof(float));
        choir_snake(x, C, T, alpha);
        assert_close(x, want, (size_t)(C * T), TOL_ACT, "snake");
    }
    free(x0), free(want), free(x);
}

static void test_binary(void **state) {
    (void)state;
    const int64_t n = 1037;
    float *a = rnd((size_t)n, 31), *b = rnd((size_t)n, 32);
    float *y = malloc((size_t)n * sizeof(float));
    FOR_EACH_ISA(isa) {
        choir_add(a, b, y, n);
        for (int64_t i = 0; i < n; i++)
            assert_true(y[i] == a[i] + b[i]);
        choir_mul(a, b, y, n);
        for (int64_t i = 0; i < n; i++)
            assert_true(y[i] == a[i] * b[i]);
        memcpy(y, a, (size_t)n * sizeof(float));
        choir_scale(y, 0.37f, n);
        for (int64_t i = 0; i < n; i++)
            assert_true(y[i] == a[i] * 0.37f);
        memcpy(y, a, (size_t)n * sizeof(float));
        choir_add_bias_rows(y, b, 61, 17); /* 61 * 17 = 1037 */
        for (int64_t i = 0; i < n; i++)
            assert_true(y[i] == a[i] + b[i % 17]);
    }
    free(a), free(b), free(y);
}

/* --- normalisation ------------------------------------------------------------ */

static void test_layer_norm(void **state) {
    (void)state;
    const int64_t dims[] = {1, 7, 384, 1283};
    for (size_t d = 0; d < 4; d++) {
        int64_t rows = 45, dim = dims[d];
        float *x = rnd((size_t)(rows * dim), 41 + d);
        for (int64_t i = 0; i < rows * dim; i++)
            x[i] = x[i] * 3.0f + 5.0f; /* an offset mean */
        float *g = rnd((size_t)dim, 42), *b = rnd((size_t)dim, 43);
        double *want = malloc((size_t)(rows * dim) * sizeof(double));
        double *want_plain = malloc((size_t)(rows * dim) * sizeof(double));
        for (int64_t r = 0; r < rows; r++) {
            double mean = 0, var = 0;
            for (int64_t i = 0; i < dim; i++)
                mean += x[r * dim + i];
            mean /= dim;
            for (int64_t i = 0; i < dim; i++)
                var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
            var /= dim;
            for (int64_t i = 0; i < dim; i++) {
                double v = (x[r * dim + i] - mean) / sqrt(var + 1e-5);
                want_plain[r * dim + i] = v;
                want[r * dim + i] = v * g[i] + b[i];
            }
        }
        float *y = malloc((size_t)(rows * dim) * sizeof(float));
        FOR_EACH_ISA(isa) {
            choir_layer_norm(x, y, rows, dim, g, b, 1e-5f);
            assert_close(y, want, (size_t)(rows * dim), 1e-5, "layer_norm");
            memcpy(y, x, (size_t)(rows * dim) * sizeof(float));
            choir_layer_norm(y, y, rows, dim, NULL, NULL, 1e-5f); /* in place */
            if (dim > 1)
                assert_close(y, want_plain, (size_t)(rows * dim), 1e-5, "layer_norm in place");
        }
        free(x), free(g), free(b), free(want), free(want_plain), free(y);
    }
}

static void test_instance_norm(void **state) {
    (void)state;
    const int64_t C = 33, T = 1501;
    float *x = rnd((size_t)(C * T), 51);
    for (int64_t i = 0; i < C * T; i++)
        x[i] = x[i] * 2.0f - 1.5f;
    float *g = rnd((size_t)C, 52), *b = rnd((size_t)C, 53);
    double *want = malloc((size_t)(C * T) * sizeof(double));
    for (int64_t c = 0; c < C; c++) {
        double mean = 0, var = 0;
        for (int64_t t = 0; t < T; t++)
            mean += x[c * T + t];
        mean /= T;
        for (int64_t t = 0; t < T; t++)
            var += (x[c * T + t] - mean) * (x[c * T + t] - mean);
        var /= T;
        for (int64_t t = 0; t < T; t++)
            want[c * T + t] = (x[c * T + t] - mean) / sqrt(var + 1e-5) * g[c] + b[c];
    }
    float *y = malloc((size_t)(C * T) * sizeof(float));
    FOR_EACH_ISA(isa) {
        memcpy(y, x, (size_t)(C * T) * sizeof(float));
        choir_instance_norm(y, y, C, T, g, b, 1e-5f);
        assert_close(y, want, (size_t)(C * T), 1e-5, "instance_norm");
    }
    free(x), free(g), free(b), free(want), free(y);
}

static void test_softmax(void **state) {
    (void)state;
    const int64_t rows = 40, dim = 1037;
    float *x0 = rnd((size_t)(rows * dim), 61);
    for (int64_t i = 0; i < rows * dim; i++)
        x0[i] *= 20.0f;
    for (int64_t i = 0; i < dim; i += 3)
        x0[5 * dim + i] = -INFINITY; /* a masked row */
    for (int64_t i = 0; i < dim; i++)
        x0[7 * dim + i] = -INFINITY; /* fully masked */
    double *want = malloc((size_t)(rows * dim) * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, s = 0;
        for (int64_t i = 0; i < dim; i++)
            mx = fmax(mx, x0[r * dim + i]);
        for (int64_t i = 0; i < dim; i++)
            s += mx == -INFINITY ? 0 : exp(x0[r * dim + i] - mx);
        for (int64_t i = 0; i < dim; i++)
            want[r * dim + i] = mx == -INFINITY ? 0 : exp(x0[r * dim + i] - mx) / s;
    }
    float *x = malloc((size_t)(rows * dim) * sizeof(float));
    FOR_EACH_ISA(isa) {
        memcpy(x, x0, (size_t)(rows * dim) * sizeof(float));
        choir_softmax(x, rows, dim);
        assert_close(x, want, (size_t)(rows * dim), 1e-5, "softmax");
        for (int64_t i = 0; i < dim; i += 3)
            assert_true(x[5 * dim + i] == 0.0f);
        for (int64_t i = 0; i < dim; i++)
            assert_true(x[7 * dim + i] == 0.0f);
        memcpy(x, x0, 13 * sizeof(float)); /* a short row: the tail path only */
        choir_softmax(x, 1, 13);
        assert_close(x, (double[13]){0}, 0, 1, "");
        double s = 0;
        for (int i = 0; i < 13; i++)
            s += x[i];
        assert_true(fabs(s - 1.0) < 1e-6);
    }
    free(x0), free(want), free(x);
}

/* --- convolutions ------------------------------------------------------------- */

typedef struct conv_case {
    int64_t Cin, Cout, T, K;
    int stride, padding, dilation, groups, output_padding;
} conv_case;

static const conv_case g_conv_cases[] = {
    {1, 1, 1, 1, 1, 0, 1, 1, 0},     {3, 5, 17, 3, 1, 1, 1, 1, 0},
    {4, 6, 40, 5, 2, 2, 1, 2, 1},    {8, 8, 33, 3, 1, 2, 2, 8, 0}, /* depthwise, dilated */
    {16, 24, 301, 3, 1, 1, 1, 1, 0}, {32, 16, 97, 7, 3, 3, 2, 1, 2},
    {24, 36, 520, 5, 2, 4, 3, 3, 1}, {64, 32, 260, 1, 1, 0, 1, 1, 0},
    {20, 10, 50, 4, 4, 0, 1, 2, 3},  {6, 4, 9, 11, 1, 5, 1, 1, 0},
    {48, 48, 300, 4, 2, 1, 1, 1, 0}, {33, 22, 37, 20, 10, 5, 1, 1, 0},
};

static void test_conv1d(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof g_conv_cases / sizeof g_conv_cases[0]; c++) {
        conv_case k = g_conv_cases[c];
        int64_t cin_g = k.Cin / k.groups, cout_g = k.Cout / k.groups;
        int64_t Tout = choir_conv1d_out_len(k.T, k.K, k.stride, k.padding, k.dilation);
        assert_int_equal(Tout, (k.T + 2 * k.padding - k.dilation * (k.K - 1) - 1) / k.stride + 1);
        float *x = rnd((size_t)(k.Cin * k.T), 71 + c);
        float *w = rnd((size_t)(k.Cout * cin_g * k.K), 72 + c);
        float *b = rnd((size_t)k.Cout, 73 + c);
        double *want = malloc((size_t)(k.Cout * Tout) * sizeof(double));
        for (int64_t co = 0; co < k.Cout; co++)
            for (int64_t t = 0; t < Tout; t++) {
                double s = b[co];
                int64_t g = co / cout_g;
                for (int64_t ci = 0; ci < cin_g; ci++)
                    for (int64_t kk = 0; kk < k.K; kk++) {
                        int64_t ti = t * k.stride - k.padding + kk * k.dilation;
                        if (ti >= 0 && ti < k.T)
                            s += (double)w[(co * cin_g + ci) * k.K + kk] *
                                 x[(g * cin_g + ci) * k.T + ti];
                    }
                want[co * Tout + t] = s;
            }
        float *y = malloc((size_t)(k.Cout * Tout + 1) * sizeof(float));
        FOR_EACH_ISA(isa) {
            for (g_starve = false;; g_starve = true) {
                y[k.Cout * Tout] = 12345.0f;
                maybe_starve();
                choir_conv1d(x, k.Cin, k.T, w, b, k.Cout, k.K, k.stride, k.padding, k.dilation,
                             k.groups, y);
                end_starve();
                assert_close(y, want, (size_t)(k.Cout * Tout), TOL_SUM,
                             g_starve ? "conv1d direct" : "conv1d");
                assert_true(y[k.Cout * Tout] == 12345.0f);
                if (g_starve) break;
            }
        }
        free(x), free(w), free(b), free(want), free(y);
    }
}

static void test_conv_transpose1d(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof g_conv_cases / sizeof g_conv_cases[0]; c++) {
        conv_case k = g_conv_cases[c];
        if (k.output_padding >= k.stride && k.output_padding >= k.dilation) k.output_padding = 0;
        int64_t cin_g = k.Cin / k.groups, cout_g = k.Cout / k.groups;
        int64_t Tout = choir_conv_transpose1d_out_len(k.T, k.K, k.stride, k.padding,
                                                      k.output_padding, k.dilation);
        assert_int_equal(Tout, (k.T - 1) * k.stride - 2 * k.padding + k.dilation * (k.K - 1) +
                                   k.output_padding + 1);
        float *x = rnd((size_t)(k.Cin * k.T), 81 + c);
        float *w = rnd((size_t)(k.Cin * cout_g * k.K), 82 + c);
        float *b = c % 2 ? rnd((size_t)k.Cout, 83 + c) : NULL;
        double *want = calloc((size_t)(k.Cout * Tout), sizeof(double));
        for (int64_t co = 0; co < k.Cout; co++)
            for (int64_t t = 0; t < Tout; t++)
                want[co * Tout + t] = b ? b[co] : 0.0;
        for (int64_t ci = 0; ci < k.Cin; ci++) {
            int64_t g = ci / cin_g;
            for (int64_t cog = 0; cog < cout_g; cog++)
                for (int64_t kk = 0; kk < k.K; kk++)
                    for (int64_t t = 0; t < k.T; t++) {
                        int64_t to = t * k.stride - k.padding + kk * k.dilation;
                        if (to >= 0 && to < Tout)
                            want[(g * cout_g + cog) * Tout + to] +=
                                (double)w[(ci * cout_g + cog) * k.K + kk] * x[ci * k.T + t];
                    }
        }
        float *y = malloc((size_t)(k.Cout * Tout + 1) * sizeof(float));
        FOR_EACH_ISA(isa) {
            for (g_starve = false;; g_starve = true) {
                y[k.Cout * Tout] = 12345.0f;
                maybe_starve();
                choir_conv_transpose1d(x, k.Cin, k.T, w, b, k.Cout, k.K, k.stride, k.padding,
                                       k.output_padding, k.dilation, k.groups, y);
                end_starve();
                assert_close(y, want, (size_t)(k.Cout * Tout), TOL_SUM,
                             g_starve ? "conv_transpose1d direct" : "conv_transpose1d");
                assert_true(y[k.Cout * Tout] == 12345.0f);
                if (g_starve) break;
            }
        }
        free(x), free(w), free(b), free(want), free(y);
    }
}

/* --- LSTM --------------------------------------------------------------------- */

static void naive_lstm(const float *x, int64_t T, int64_t In, int64_t H, const float *w_ih,
                       const float *w_hh, const float *b_ih, const float *b_hh, double *h,
                       double *c, bool reverse, double *out) {
    double *g = malloc((size_t)(4 * H) * sizeof(double));
    double *hn = malloc((size_t)H * sizeof(double));
    for (int64_t s = 0; s < T; s++) {
        int64_t t = reverse ? T - 1 - s : s;
        for (int64_t r = 0; r < 4 * H; r++) {
            double v = (b_ih ? b_ih[r] : 0) + (b_hh ? b_hh[r] : 0);
            for (int64_t i = 0; i < In; i++)
                v += (double)w_ih[r * In + i] * x[t * In + i];
            for (int64_t i = 0; i < H; i++)
                v += (double)w_hh[r * H + i] * h[i];
            g[r] = v;
        }
        for (int64_t i = 0; i < H; i++) {
            double ig = 1 / (1 + exp(-g[i])), fg = 1 / (1 + exp(-g[H + i]));
            double gg = tanh(g[2 * H + i]), og = 1 / (1 + exp(-g[3 * H + i]));
            c[i] = fg * c[i] + ig * gg;
            hn[i] = og * tanh(c[i]);
        }
        memcpy(h, hn, (size_t)H * sizeof(double));
        memcpy(out + t * H, h, (size_t)H * sizeof(double));
    }
    free(g), free(hn);
}

static void test_lstm(void **state) {
    (void)state;
    const int64_t T = 23, In = 19, H = 13;
    float *x = rnd((size_t)(T * In), 91);
    float *w_ih = rnd((size_t)(4 * H * In), 92), *w_hh = rnd((size_t)(4 * H * H), 93);
    float *b_ih = rnd((size_t)(4 * H), 94), *b_hh = rnd((size_t)(4 * H), 95);
    float *h0 = rnd((size_t)H, 96), *c0 = rnd((size_t)H, 97);
    float *scratch = malloc((size_t)(4 * H * (T + 1)) * sizeof(float));
    const int64_t out_stride = 2 * H + 1; /* a bidirectional layout with padding */
    float *out = malloc((size_t)(T * out_stride) * sizeof(float));
    float *got = malloc((size_t)(T * H) * sizeof(float));
    double *want = malloc((size_t)(T * H) * sizeof(double));
    double hd[13], cd[13];
    float h[13], c[13];
    for (int with_state = 0; with_state < 2; with_state++)
        for (int reverse = 0; reverse < 2; reverse++) {
            for (int64_t i = 0; i < H; i++) {
                hd[i] = with_state ? h0[i] : 0;
                cd[i] = with_state ? c0[i] : 0;
                h[i] = h0[i];
                c[i] = c0[i];
            }
            naive_lstm(x, T, In, H, w_ih, w_hh, b_ih, with_state ? b_hh : NULL, hd, cd, reverse,
                       want);
            FOR_EACH_ISA(isa) {
                memcpy(h, h0, sizeof h);
                memcpy(c, c0, sizeof c);
                choir_lstm(x, T, In, H, w_ih, w_hh, b_ih, with_state ? b_hh : NULL,
                           with_state ? h : NULL, with_state ? c : NULL, reverse,
                           out + (reverse ? H : 0), out_stride, scratch);
                for (int64_t t = 0; t < T; t++)
                    memcpy(got + t * H, out + t * out_stride + (reverse ? H : 0),
                           (size_t)H * sizeof(float));
                assert_close(got, want, (size_t)(T * H), 1e-5, reverse ? "lstm reverse" : "lstm");
                if (with_state) {
                    assert_close(h, hd, (size_t)H, 1e-5, "lstm final h");
                    assert_close(c, cd, (size_t)H, 1e-5, "lstm final c");
                }
            }
        }
    free(x), free(w_ih), free(w_hh), free(b_ih), free(b_hh), free(h0), free(c0);
    free(scratch), free(out), free(got), free(want);
}

/* --- attention ---------------------------------------------------------------- */

static void check_attention(int64_t Tq, int64_t Tk, int n_head, int64_t Dh, bool use_mask,
                            bool causal) {
    int64_t d = n_head * Dh;
    int64_t ldq = d + 3, ldk = d + 5, ldv = 2 * d, ldo = d + 1; /* cache-like strides */
    float *q = rnd((size_t)(Tq * ldq), 101), *k = rnd((size_t)(Tk * ldk), 102);
    float *v = rnd((size_t)(Tk * ldv), 103);
    for (int64_t i = 0; i < Tq * ldq; i++)
        q[i] *= 3.0f;
    float *mask = NULL;
    if (use_mask) {
        mask = rnd((size_t)(Tq * Tk), 104);
        for (int64_t i = 0; i < Tq * Tk; i += 5)
            mask[i] = -INFINITY;
        for (int64_t i = 0; i < Tq; i++)
            mask[i * Tk] = 0.0f; /* every row keeps key 0 */
    }
    float scale = 1.0f / sqrtf((float)Dh);
    double *want = malloc((size_t)(Tq * d) * sizeof(double));
    double *p = malloc((size_t)Tk * sizeof(double));
    for (int h = 0; h < n_head; h++)
        for (int64_t i = 0; i < Tq; i++) {
            double mx = -INFINITY, s = 0;
            for (int64_t j = 0; j < Tk; j++) {
                double sc = 0;
                for (int64_t e = 0; e < Dh; e++)
                    sc += (double)q[i * ldq + h * Dh + e] * k[j * ldk + h * Dh + e];
                sc = sc * scale + (mask ? mask[i * Tk + j] : 0.0);
                if (causal && j > i + (Tk - Tq)) sc = -INFINITY;
                p[j] = sc;
                mx = fmax(mx, sc);
            }
            for (int64_t j = 0; j < Tk; j++)
                s += p[j] = exp(p[j] - mx);
            for (int64_t e = 0; e < Dh; e++) {
                double o = 0;
                for (int64_t j = 0; j < Tk; j++)
                    o += p[j] / s * v[j * ldv + h * Dh + e];
                want[i * d + h * Dh + e] = o;
            }
        }
    float *out = malloc((size_t)(Tq * ldo) * sizeof(float));
    float *got = malloc((size_t)(Tq * d) * sizeof(float));
    FOR_EACH_ISA(isa) {
        for (g_starve = false;; g_starve = true) {
            for (int64_t i = 0; i < Tq * ldo; i++)
                out[i] = 777.0f;
            maybe_starve();
            choir_attention(q, ldq, k, ldk, v, ldv, out, ldo, Tq, Tk, n_head, Dh, scale, mask,
                            causal);
            end_starve();
            for (int64_t i = 0; i < Tq; i++) {
                memcpy(got + i * d, out + i * ldo, (size_t)d * sizeof(float));
                assert_true(out[i * ldo + d] == 777.0f);
            }
            assert_close(got, want, (size_t)(Tq * d), TOL_SUM,
                         g_starve ? "attention rows" : "attention");
            if (g_starve) break;
        }
    }
    free(q), free(k), free(v), free(mask), free(want), free(p), free(out), free(got);
}

static void test_attention(void **state) {
    (void)state;
    check_attention(1, 1, 1, 8, false, false);
    check_attention(1, 37, 4, 16, false, true);  /* a decoder step over a KV cache */
    check_attention(13, 13, 3, 20, false, true); /* causal self-attention */
    check_attention(70, 90, 2, 64, false, true); /* causal with a cached prefix */
    check_attention(45, 61, 5, 24, true, false); /* additive mask with -inf entries */
    check_attention(33, 33, 2, 7, true, true);
    check_attention(100, 150, 6, 64, false, false);
    check_attention(300, 333, 2, 16, true, true); /* several query blocks, masked and causal */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_linear_batch_invariant),
        cmocka_unit_test(test_linear_n),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_snake),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_instance_norm),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_conv1d),
        cmocka_unit_test(test_conv_transpose1d),
        cmocka_unit_test(test_lstm),
        cmocka_unit_test(test_attention),
    };
    /* The machine's own thread count, then one thread (no splitting) and an odd
     * count (uneven slices, per-worker scratch indexing). */
    int rc = cmocka_run_group_tests_name("default threads", tests, NULL, NULL);
    choir_pool_set_default_threads(1);
    rc |= cmocka_run_group_tests_name("1 thread", tests, NULL, NULL);
    choir_pool_set_default_threads(3);
    rc |= cmocka_run_group_tests_name("3 threads", tests, NULL, NULL);
    return rc;
}
