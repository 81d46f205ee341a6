/* The VibeVoice operations of choir/backend_vibevoice.h on the CPU backend
 * against naive formulas written from their header comments: the stem
 * convolution, the depthwise causal mixer, the layer-scaled residual, and
 * the cached causal GQA attention (queries past the start of the cache,
 * spanning several query and key blocks, grouped heads) against a plain
 * softmax in double, and the same attention over a paged cache (shuffled
 * pages, two sequences' tables at once); bad shapes are sticky stream
 * errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "choir/backend.h"
#include "choir/backend_vibevoice.h"
#include "choir/tensor.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static float uni(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *rnd(int64_t n) {
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = uni();
    return x;
}

static double max_abs(const float *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

typedef struct fx {
    choir_backend *be;
    choir_stream *s;
} fx;

static fx fx_open(void) {
    fx f;
    choir_err err = {0};
    f.be = choir_backend_cpu(&err);
    assert_non_null(f.be);
    f.s = choir_stream_create(f.be, &err);
    assert_non_null(f.s);
    return f;
}

static void fx_close(fx *f) {
    choir_err err = {0};
    assert_int_equal(choir_stream_status(f->s, &err), 0);
    choir_stream_free(f->s);
    choir_backend_free(f->be);
}

static void test_stem(void **state) {
    (void)state;
    fx f = fx_open();
    int64_t T = 301, C = 32;
    int K = 7;
    float *in = rnd(T + K - 1), *taps = rnd(K * C), *bias = rnd(C), *out = rnd(T * C);
    double *want = calloc((size_t)(T * C), sizeof *want);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            double a = bias[c];
            for (int k = 0; k < K; k++) a += (double)taps[k * C + c] * in[t + k];
            want[t * C + c] = a;
        }
    assert_int_equal(choir_op_conv_stem_rows(f.s, in, T, taps, bias, C, K, out), 0);
    assert_true(max_abs(out, want, T * C) < 1e-5);
    free(in), free(taps), free(bias), free(out), free(want);
    fx_close(&f);
}

static void test_dwconv_and_residual(void **state) {
    (void)state;
    fx f = fx_open();
    int64_t T = 77, C = 40;
    int K = 7;
    float *in = rnd((K - 1 + T) * C), *w = rnd(K * C), *b = rnd(C), *out = rnd(T * C);
    double *want = calloc((size_t)(T * C), sizeof *want);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            double a = b[c];
            for (int j = 0; j < K; j++) a += (double)w[j * C + c] * in[(t + j) * C + c];
            want[t * C + c] = a;
        }
    assert_int_equal(choir_op_dwconv_rows(f.s, in, T, C, K, w, NULL, out), 0);
    /* Without a bias every output is b[c] less. */
    for (int64_t i = 0; i < T * C; i++) want[i] -= b[i % C];
    assert_true(max_abs(out, want, T * C) < 1e-5);
    for (int64_t i = 0; i < T * C; i++) want[i] += b[i % C];
    assert_int_equal(choir_op_dwconv_rows(f.s, in, T, C, K, w, b, out), 0);
    assert_true(max_abs(out, want, T * C) < 1e-5);
    /* x += g * y, and with g NULL, x += y. */
    float *x = rnd(T * C), *g = rnd(C);
    double *xw = malloc((size_t)(T * C) * sizeof *xw);
    for (int64_t i = 0; i < T * C; i++) xw[i] = (double)x[i] + (double)g[i % C] * out[i] + out[i];
    assert_int_equal(choir_op_add_scaled_rows(f.s, x, out, g, T, C), 0);
    assert_int_equal(choir_op_add_scaled_rows(f.s, x, out, NULL, T, C), 0);
    assert_true(max_abs(x, xw, T * C) < 1e-5);
    free(in), free(w), free(b), free(out), free(want), free(x), free(g), free(xw);
    fx_close(&f);
}

/* The mixer with its residual in one operation: bit for bit dwconv_rows
 * into a row buffer, then add_scaled_rows (with and without bias and
 * scale, rows wider than its pieces of channels). */
static void test_dwconv_residual(void **state) {
    (void)state;
    fx f = fx_open();
    static const int64_t widths[] = {40, 600};
    for (size_t k = 0; k < 2; k++)
        for (int v = 0; v < 2; v++) {
            int64_t T = 53, C = widths[k];
            int K = 7;
            float *in = rnd((K - 1 + T) * C), *w = rnd(K * C), *b = v ? NULL : rnd(C), *g = v ? NULL : rnd(C);
            float *x = rnd(T * C), *d = malloc((size_t)(T * C) * sizeof *d);
            float *want = malloc((size_t)(T * C) * sizeof *want);
            memcpy(want, x, (size_t)(T * C) * sizeof *x);
            assert_int_equal(choir_op_dwconv_rows(f.s, in, T, C, K, w, b, d), 0);
            assert_int_equal(choir_op_add_scaled_rows(f.s, want, d, g, T, C), 0);
            assert_int_equal(choir_op_dwconv_residual_rows(f.s, in, T, C, K, w, b, g, x), 0);
            assert_memory_equal(x, want, (size_t)(T * C) * sizeof *x);
            free(in), free(w), free(b), free(g), free(x), free(d), free(want);
        }
    fx_close(&f);
}

/* The RMS norm into bf16 rows: each value rms_norm's, rounded. */
static void test_rms_norm_bf16(void **state) {
    (void)state;
    fx f = fx_open();
    int64_t R = 37, D = 96;
    float *x = rnd(R * D), *g = rnd(D), *y = malloc((size_t)(R * D) * sizeof *y);
    uint16_t *want = malloc((size_t)(R * D) * 2), *got = malloc((size_t)(R * D) * 2);
    for (int gi = 0; gi < 2; gi++) {
        assert_int_equal(choir_op_rms_norm(f.s, x, y, R, D, gi ? g : NULL, 1e-5f), 0);
        choir_f32_to_bf16_n(y, want, R * D);
        assert_int_equal(choir_op_rms_norm_bf16(f.s, x, got, R, D, gi ? g : NULL, 1e-5f), 0);
        assert_memory_equal(got, want, (size_t)(R * D) * 2);
    }
    free(x), free(g), free(y), free(want), free(got);
    fx_close(&f);
}

/* Plain causal softmax attention in double: query i at position pos0 + i
 * sees cache rows 0 .. pos0 + i. */
static void naive_attention(const float *q, int64_t T, const float *kc, const float *vc, int64_t pos0, int nh,
                            int nkv, int D, double *out) {
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D, n = pos0 + T;
    double *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < T; i++)
        for (int h = 0; h < nh; h++) {
            int kh = h / (nh / nkv);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= pos0 + i; j++) {
                double d = 0;
                for (int e = 0; e < D; e++) d += (double)q[i * ldq + h * D + e] * kc[j * ldk + kh * D + e];
                p[j] = d / sqrt((double)D);
                mx = fmax(mx, p[j]);
            }
            for (int64_t j = 0; j <= pos0 + i; j++) sum += p[j] = exp(p[j] - mx);
            for (int e = 0; e < D; e++) {
                double a = 0;
                for (int64_t j = 0; j <= pos0 + i; j++) a += p[j] * vc[j * ldk + kh * D + e];
                out[i * ldq + h * D + e] = a / sum;
            }
        }
    free(p);
}

static void test_attention_cached(void **state) {
    (void)state;
    fx f = fx_open();
    /* (T, pos0, heads, kv heads, D): a prefill chunk over a partly filled
     * cache spanning key blocks, a decoder step, plain multi-head. */
    const int cases[][5] = {{37, 150, 6, 2, 16}, {1, 300, 4, 1, 32}, {20, 0, 2, 2, 8}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t T = cases[c][0], pos0 = cases[c][1];
        int nh = cases[c][2], nkv = cases[c][3], D = cases[c][4];
        int64_t rows = pos0 + T;
        float *q = rnd(T * nh * D), *kc = rnd(rows * nkv * D), *vc = rnd(rows * nkv * D), *out = rnd(T * nh * D);
        for (int64_t i = 0; i < T * nh * D; i++) q[i] *= 3.0f; /* peaked softmaxes too */
        double *want = malloc((size_t)(T * nh * D) * sizeof *want);
        naive_attention(q, T, kc, vc, pos0, nh, nkv, D, want);
        assert_int_equal(choir_op_attention_cached(f.s, q, T, kc, vc, pos0, nh, nkv, D, out), 0);
        double e = max_abs(out, want, T * nh * D);
        if (!(e < 2e-5)) fail_msg("case %zu: max abs %.3g", c, e);
        free(q), free(kc), free(vc), free(out), free(want);
    }
    fx_close(&f);
}

/* Positions from memory: rows at arbitrary positions (not consecutive) each
 * equal the one-row attention at that position; a position past the cache
 * is clamped to its last row. */
static void test_attention_cached_at(void **state) {
    (void)state;
    fx f = fx_open();
    int nh = 6, nkv = 2, D = 16;
    int64_t rows = 200, ld = (int64_t)nh * D;
    const int32_t pos[] = {0, 199, 57, 57, 130, 5000};
    int64_t T = (int64_t)(sizeof pos / sizeof pos[0]);
    float *q = rnd(T * ld), *kc = rnd(rows * nkv * D), *vc = rnd(rows * nkv * D), *out = rnd(T * ld);
    double *want = malloc((size_t)ld * sizeof *want);
    assert_int_equal(choir_op_attention_cached_at(f.s, q, T, kc, vc, pos, rows, nh, nkv, D, out), 0);
    for (int64_t i = 0; i < T; i++) {
        int64_t p = pos[i] < rows ? pos[i] : rows - 1;
        naive_attention(q + i * ld, 1, kc, vc, p, nh, nkv, D, want);
        double e = max_abs(out + i * ld, want, ld);
        if (!(e < 2e-5)) fail_msg("row %lld at %d: max abs %.3g", (long long)i, (int)pos[i], e);
    }
    choir_err err = {0};
    assert_int_equal(choir_op_attention_cached_at(f.s, q, 1, kc, vc, NULL, rows, nh, nkv, D, out), CHOIR_EINVAL);
    assert_int_equal(choir_stream_status(f.s, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "attention_cached_at"));
    choir_stream_clear(f.s);
    free(q), free(kc), free(vc), free(out), free(want);
    fx_close(&f);
}

/* A paged cache: two sequences' keys scattered over a pool of 7 pages in
 * shuffled order (each page of 128 rows, the last one partly filled). A
 * prefill chunk of sequence A through its table, then one row of each
 * sequence at once through their own tables (stride) at positions from
 * memory, each against the naive attention over the sequence's contiguous
 * rows. */
static void test_attention_paged(void **state) {
    (void)state;
    fx f = fx_open();
    int nh = 6, nkv = 2, D = 16, P = CHOIR_VV_PAGE;
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D, lenA = 300, lenB = 140;
    /* A takes pages 5, 0, 3; B takes 6, 2 (stride 4: the tables' room). */
    const int32_t tables[2][4] = {{5, 0, 3, 0}, {6, 2, 0, 0}};
    float *pk = rnd(7 * P * ldk), *pv = rnd(7 * P * ldk);
    float *kA = rnd(lenA * ldk), *vA = rnd(lenA * ldk), *kB = rnd(lenB * ldk), *vB = rnd(lenB * ldk);
    for (int64_t k = 0; k < lenA; k++) {
        int64_t row = (int64_t)tables[0][k / P] * P + k % P;
        memcpy(pk + row * ldk, kA + k * ldk, (size_t)ldk * sizeof(float));
        memcpy(pv + row * ldk, vA + k * ldk, (size_t)ldk * sizeof(float));
    }
    for (int64_t k = 0; k < lenB; k++) {
        int64_t row = (int64_t)tables[1][k / P] * P + k % P;
        memcpy(pk + row * ldk, kB + k * ldk, (size_t)ldk * sizeof(float));
        memcpy(pv + row * ldk, vB + k * ldk, (size_t)ldk * sizeof(float));
    }
    /* Rows 200 .. 299 of A: spans pages 1 and 2 of its table. */
    int64_t T = 100, pos0 = 200;
    float *q = rnd(T * ldq), *out = rnd(T * ldq);
    for (int64_t i = 0; i < T * ldq; i++) q[i] *= 3.0f;
    double *want = malloc((size_t)(T * ldq) * sizeof *want);
    naive_attention(q, T, kA, vA, pos0, nh, nkv, D, want);
    assert_int_equal(choir_op_attention_paged(f.s, q, T, pk, pv, tables[0], pos0, nh, nkv, D, out), 0);
    double e = max_abs(out, want, T * ldq);
    if (!(e < 2e-5)) fail_msg("paged prefill: max abs %.3g", e);
    /* One row of each: A at 299 (its last key), B at 130. */
    const int32_t pos[2] = {299, 130};
    assert_int_equal(choir_op_attention_paged_at(f.s, q, 2, pk, pv, &tables[0][0], 4, pos, 4 * P, nh, nkv, D, out),
                     0);
    naive_attention(q, 1, kA, vA, 299, nh, nkv, D, want);
    naive_attention(q + ldq, 1, kB, vB, 130, nh, nkv, D, want + ldq);
    e = max_abs(out, want, 2 * ldq);
    if (!(e < 2e-5)) fail_msg("paged rows of two sequences: max abs %.3g", e);
    /* A pool of bf16 values gives exactly what an f32 pool of the same
     * rounded values gives (they are widened as they are read), prefill
     * rows and rows from memory alike. */
    int64_t pool_n = 7 * P * ldk;
    uint16_t *hk = malloc((size_t)pool_n * 2), *hv = malloc((size_t)pool_n * 2);
    for (int64_t i = 0; i < pool_n; i++) {
        hk[i] = choir_f32_to_bf16(pk[i]), hv[i] = choir_f32_to_bf16(pv[i]);
        pk[i] = choir_bf16_to_f32(hk[i]), pv[i] = choir_bf16_to_f32(hv[i]);
    }
    float *out16 = rnd(T * ldq);
    assert_int_equal(choir_op_attention_paged(f.s, q, T, pk, pv, tables[0], pos0, nh, nkv, D, out), 0);
    assert_int_equal(choir_op_attention_paged_kv(f.s, q, T, hk, hv, CHOIR_DTYPE_BF16, tables[0], pos0, nh, nkv, D,
                                                 out16), 0);
    assert_memory_equal(out, out16, (size_t)(T * ldq) * sizeof(float));
    assert_int_equal(choir_op_attention_paged_at(f.s, q, 2, pk, pv, &tables[0][0], 4, pos, 4 * P, nh, nkv, D, out),
                     0);
    assert_int_equal(choir_op_attention_paged_at_kv(f.s, q, 2, hk, hv, CHOIR_DTYPE_BF16, &tables[0][0], 4, pos,
                                                    4 * P, nh, nkv, D, out16), 0);
    assert_memory_equal(out, out16, (size_t)(2 * ldq) * sizeof(float));
    choir_err err = {0};
    assert_int_equal(choir_op_attention_paged_kv(f.s, q, 1, hk, hv, CHOIR_DTYPE_F16, tables[0], 0, nh, nkv, D, out),
                     CHOIR_EINVAL);
    choir_stream_clear(f.s);
    free(hk), free(hv), free(out16);
    assert_int_equal(choir_op_attention_paged_at(f.s, q, 1, pk, pv, NULL, 0, pos, P, nh, nkv, D, out), CHOIR_EINVAL);
    assert_int_equal(choir_stream_status(f.s, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "attention_paged_at"));
    choir_stream_clear(f.s);
    free(pk), free(pv), free(kA), free(vA), free(kB), free(vB), free(q), free(out), free(want);
    fx_close(&f);
}

static void test_bad_shapes(void **state) {
    (void)state;
    fx f = fx_open();
    float x[16] = {0};
    choir_err err = {0};
    assert_int_equal(choir_op_attention_cached(f.s, x, 1, x, x, 0, 3, 2, 4, x), CHOIR_EINVAL);
    assert_int_equal(choir_stream_status(f.s, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "attention_cached"));
    /* Sticky: later operations do nothing and return the first error. */
    x[0] = 1.0f;
    assert_int_equal(choir_op_add_scaled_rows(f.s, x, x, NULL, 1, 1), CHOIR_EINVAL);
    assert_true(x[0] == 1.0f);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_dwconv_rows(f.s, x, 1, 0, 7, x, NULL, x), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_conv_stem_rows(f.s, x, 1, x, NULL, 4, 0, x), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_attention_cached(f.s, x, 1, x, x, 0, 1, 1, 512, x), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    fx_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stem),
        cmocka_unit_test(test_dwconv_and_residual),
        cmocka_unit_test(test_dwconv_residual),
        cmocka_unit_test(test_rms_norm_bf16),
        cmocka_unit_test(test_attention_cached),
        cmocka_unit_test(test_attention_cached_at),
        cmocka_unit_test(test_attention_paged),
        cmocka_unit_test(test_bad_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
