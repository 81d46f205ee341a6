/* SAM-Audio's backend operations (choir/backend_sam.h) on the CPU backend
 * against plain double-precision formulas on random inputs with odd sizes:
 * Snake with the DAC epsilon, ELU, zero and reflect padding, the one-way
 * LSTM layer, adaLN modulation, the gated residual and axpy; and bad shapes
 * refused with CHOIR_EINVAL as a sticky stream error. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/backend_sam.h"
#include "testutil.h"

static float *rnd(size_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(x);
    tu_fill_uniform(x, n, seed, lo, hi);
    return x;
}

static void near(const float *got, const double *want, size_t n, double tol, const char *what) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
    }
    double rel = sqrt(num) / (sqrt(den) > 1e-30 ? sqrt(den) : 1e-30);
    if (!(rel <= tol)) fail_msg("%s: rel L2 %.3g > %.3g", what, rel, tol);
}

typedef struct fx {
    choir_backend *be;
    choir_stream *s;
} fx;

static fx open_fx(void) {
    fx f;
    choir_err err = {0};
    f.be = choir_backend_cpu(&err);
    assert_non_null(f.be);
    f.s = choir_stream_create(f.be, &err);
    assert_non_null(f.s);
    return f;
}

static void close_fx(fx *f) {
    choir_err err = {0};
    assert_int_equal(choir_stream_status(f->s, &err), 0);
    choir_stream_free(f->s);
    choir_backend_free(f->be);
}

static void test_snake_elu(void **state) {
    (void)state;
    fx f = open_fx();
    int64_t B = 2, C = 5, T = 37, n = B * C * T;
    float *x = rnd((size_t)n, 1, -3, 3), *alpha = rnd((size_t)C, 2, 0.2f, 2.0f);
    alpha[0] = 0.0f; /* the epsilon keeps alpha 0 finite: x + 0 */
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) {
        double a = alpha[(i / T) % C], sn = sin(a * x[i]);
        want[i] = x[i] + sn * sn / (a + 1e-9);
    }
    assert_int_equal(choir_op_sam_snake(f.s, x, B, C, T, alpha), 0);
    near(x, want, (size_t)n, 1e-6, "snake");
    for (int64_t i = 0; i < n; i++) want[i] = x[i] < 0 ? expm1((double)x[i]) : x[i];
    assert_int_equal(choir_op_sam_elu(f.s, x, n), 0);
    near(x, want, (size_t)n, 1e-6, "elu");
    free(x), free(alpha), free(want);
    close_fx(&f);
}

static void test_pad(void **state) {
    (void)state;
    fx f = open_fx();
    int64_t C = 3, T = 11, l = 4, r = 7, To = l + T + r;
    float *x = rnd((size_t)(C * T), 3, -1, 1), *y = malloc((size_t)(C * To) * sizeof *y);
    double *want = malloc((size_t)(C * To) * sizeof *want);
    for (int reflect = 0; reflect < 2; reflect++) {
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < To; t++) {
                int64_t u = t - l;
                if (reflect) {
                    if (u < 0) u = -u;
                    if (u >= T) u = 2 * (T - 1) - u;
                    want[c * To + t] = x[c * T + u];
                } else {
                    want[c * To + t] = u >= 0 && u < T ? x[c * T + u] : 0.0;
                }
            }
        assert_int_equal(choir_op_sam_pad(f.s, x, C, T, l, r, reflect, y), 0);
        near(y, want, (size_t)(C * To), 0, reflect ? "reflect pad" : "zero pad");
    }
    free(x), free(y), free(want);
    close_fx(&f);
}

static double sg(double v) { return 1.0 / (1.0 + exp(-v)); }

static void test_lstm(void **state) {
    (void)state;
    fx f = open_fx();
    int64_t T = 23, In = 13, H = 32, G = 4 * H;
    float *x = rnd((size_t)(T * In), 4, -1, 1), *wi = rnd((size_t)(G * In), 5, -0.3f, 0.3f);
    float *wh = rnd((size_t)(G * H), 6, -0.3f, 0.3f), *bi = rnd((size_t)G, 7, -0.5f, 0.5f);
    float *bh = rnd((size_t)G, 8, -0.5f, 0.5f), *y = malloc((size_t)(T * H) * sizeof *y);
    double *want = malloc((size_t)(T * H) * sizeof *want), h[32] = {0}, c[32] = {0}, g[128];
    for (int64_t t = 0; t < T; t++) {
        for (int64_t r = 0; r < G; r++) {
            double a = (double)bi[r] + bh[r];
            for (int64_t j = 0; j < In; j++) a += (double)wi[r * In + j] * x[t * In + j];
            for (int64_t j = 0; j < H; j++) a += (double)wh[r * H + j] * h[j];
            g[r] = a;
        }
        for (int64_t j = 0; j < H; j++) {
            c[j] = sg(g[H + j]) * c[j] + sg(g[j]) * tanh(g[2 * H + j]);
            h[j] = sg(g[3 * H + j]) * tanh(c[j]);
            want[t * H + j] = h[j];
        }
    }
    assert_int_equal(choir_op_sam_lstm(f.s, x, T, In, H, wi, wh, bi, bh, y), 0);
    near(y, want, (size_t)(T * H), 1e-5, "lstm");
    free(x), free(wi), free(wh), free(bi), free(bh), free(y), free(want);
    close_fx(&f);
}

static void test_modulate_gate_axpy(void **state) {
    (void)state;
    fx f = open_fx();
    int64_t R = 9, D = 17, n = R * D;
    float *h = rnd((size_t)n, 9, -2, 2), *o = rnd((size_t)n, 10, -2, 2);
    float *sh = rnd((size_t)D, 11, -1, 1), *sc = rnd((size_t)D, 12, -1, 1);
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) want[i] = (double)h[i] * (1.0 + sc[i % D]) + sh[i % D];
    assert_int_equal(choir_op_sam_modulate(f.s, h, R, D, sh, sc), 0);
    near(h, want, (size_t)n, 1e-6, "modulate");
    for (int64_t i = 0; i < n; i++) want[i] = (double)h[i] + (double)o[i] * sc[i % D];
    assert_int_equal(choir_op_sam_gated_add(f.s, h, o, R, D, sc), 0);
    near(h, want, (size_t)n, 1e-6, "gated add");
    for (int64_t i = 0; i < n; i++) want[i] = (double)o[i] + 0.375 * h[i];
    assert_int_equal(choir_op_sam_axpy(f.s, o, o, 0.375f, h, n), 0);
    near(o, want, (size_t)n, 1e-6, "axpy");
    free(h), free(o), free(sh), free(sc), free(want);
    close_fx(&f);
}

static void test_bad_shapes(void **state) {
    (void)state;
    fx f = open_fx();
    float x[8] = {0}, y[32];
    choir_err err = {0};
    /* reflect needs pads shorter than the input */
    assert_int_equal(choir_op_sam_pad(f.s, x, 1, 4, 4, 0, true, y), CHOIR_EINVAL);
    assert_int_equal(choir_stream_status(f.s, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "sam_pad"));
    /* sticky: a good call does nothing and returns the error */
    assert_int_equal(choir_op_sam_elu(f.s, x, 8), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_sam_lstm(f.s, x, 2, 1, 0, x, x, NULL, NULL, y), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_sam_modulate(f.s, x, 2, 0, x, x), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    close_fx(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snake_elu), cmocka_unit_test(test_pad), cmocka_unit_test(test_lstm),
        cmocka_unit_test(test_modulate_gate_axpy), cmocka_unit_test(test_bad_shapes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
