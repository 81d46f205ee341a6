/* The CPU backend (choir/backend.h) against its oracle, the kernels of
 * choir/kernels.h, or naive double-precision formulas for the operations
 * kernels.h lacks (RMS and group norm, rotary embeddings, AdaIN, the inverse
 * STFT): each operation on random inputs with odd sizes and strides. Plus
 * the stream's contracts: sticky errors, unsupported operations, working
 * memory from an arena, kernel scratch that stops the kernels from
 * allocating, and graph capture refused on the CPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/backend.h"
#include "choir/backend_vocoder.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "testutil.h"

static float *rnd(size_t n, uint64_t seed) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(x);
    tu_fill_uniform(x, n, seed, -1.0f, 1.0f);
    return x;
}

static float *dup(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(y);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static void assert_same(const float *a, const float *b, size_t n, const char *what) {
    if (memcmp(a, b, n * sizeof(float)) != 0) fail_msg("%s: not bit-identical", what);
}

static void assert_near(const float *got, const double *want, size_t n, double tol,
                        const char *what) {
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

static fx fx_open(size_t work, size_t scratch) {
    fx f;
    choir_err err = {0};
    f.be = choir_backend_cpu(&err);
    assert_non_null(f.be);
    f.s = choir_stream_create(f.be, &err);
    assert_non_null(f.s);
    assert_int_equal(choir_stream_reserve(f.s, work, scratch, &err), 0);
    return f;
}

static void fx_close(fx *f) {
    choir_err err = {0};
    assert_int_equal(choir_stream_status(f->s, &err), 0);
    choir_stream_free(f->s);
    choir_backend_free(f->be);
}

/* --- products ---------------------------------------------------------------- */

static void test_linear_every_storage(void **state) {
    (void)state;
    fx f = fx_open(0, 16 << 20);
    int64_t M = 37, K = 96, N = 53;
    float *x = rnd((size_t)(M * K), 1), *w = rnd((size_t)(N * K), 2), *b = rnd((size_t)N, 3);
    uint16_t *wh = malloc((size_t)(N * K) * 2), *wb = malloc((size_t)(N * K) * 2);
    choir_f32_to_f16_n(w, wh, N * K);
    choir_f32_to_bf16_n(w, wb, N * K);
    choir_weight ws[3] = {choir_weight_f32(w, N, K),
                          {.kind = CHOIR_WEIGHT_F16, .rows = N, .cols = K, .data = wh},
                          {.kind = CHOIR_WEIGHT_BF16, .rows = N, .cols = K, .data = wb}};
    float *got = malloc((size_t)(M * N) * 4), *want = malloc((size_t)(M * N) * 4);
    for (int i = 0; i < 3; i++)
        for (int64_t m = 1; m <= M; m += 12) {
            choir_linear(x, m, &ws[i], b, want);
            assert_int_equal(choir_op_linear(f.s, x, m, &ws[i], b, got), 0);
            assert_same(got, want, (size_t)(m * N), "linear");
        }
    /* The backend's weight store on the CPU points at the host weight. */
    choir_err err = {0};
    choir_backend_weights *st = choir_backend_weights_create(f.be, &err);
    choir_weight dw;
    assert_int_equal(choir_backend_weight(st, &ws[1], &dw), 0);
    assert_ptr_equal(dw.data, wh);
    assert_ptr_equal(choir_backend_vec(st, b, N), b);
    assert_null(choir_backend_vec(st, NULL, N));
    assert_int_equal(choir_backend_weights_bytes(st), 0);
    assert_int_equal(choir_backend_weights_status(st, &err), 0);
    choir_backend_weights_free(st);
    /* gemm with transposes and strides. */
    float *C1 = rnd((size_t)(M * N), 4), *C2 = dup(C1, (size_t)(M * N));
    choir_gemm_f32(false, true, M, N, K, 0.5f, x, K, w, K, 1.0f, C1, N);
    assert_int_equal(choir_op_gemm(f.s, false, true, M, N, K, 0.5f, x, K, w, K, 1.0f, C2, N), 0);
    assert_same(C2, C1, (size_t)(M * N), "gemm");
    free(x), free(w), free(b), free(wh), free(wb), free(got), free(want), free(C1), free(C2);
    fx_close(&f);
}

/* --- attention ------------------------------------------------------------------ */

static void test_attention_and_gqa(void **state) {
    (void)state;
    fx f = fx_open(0, 8 << 20);
    int H = 6, Hkv = 2, rep = H / Hkv;
    int64_t Dh = 16, Tq = 21, Tk = 40, d = H * Dh, dkv = Hkv * Dh;
    float *q = rnd((size_t)(Tq * d), 10), *k = rnd((size_t)(Tk * dkv), 11);
    float *v = rnd((size_t)(Tk * dkv), 12), *mask = rnd((size_t)(Tq * Tk), 13);
    float *got = malloc((size_t)(Tq * d) * 4), *want = malloc((size_t)(Tq * d) * 4);
    float scale = 1.0f / sqrtf((float)Dh);
    /* The plain case is one kernel call. */
    float *kf = rnd((size_t)(Tk * d), 14), *vf = rnd((size_t)(Tk * d), 15);
    for (int causal = 0; causal < 2; causal++) {
        choir_attn a = {H, 0, Dh, scale, causal != 0, CHOIR_DTYPE_F32};
        choir_attention(q, d, kf, d, vf, d, want, d, Tq, Tk, H, Dh, scale, mask, causal != 0);
        assert_int_equal(choir_op_attention(f.s, q, d, kf, d, vf, d, got, d, Tq, Tk, &a, mask), 0);
        assert_same(got, want, (size_t)(Tq * d), "attention");
    }
    /* Grouped-query: against the keys repeated for each query head. */
    for (int64_t t = 0; t < Tk; t++)
        for (int h = 0; h < H; h++) {
            memcpy(kf + t * d + h * Dh, k + t * dkv + (h / rep) * Dh, (size_t)Dh * 4);
            memcpy(vf + t * d + h * Dh, v + t * dkv + (h / rep) * Dh, (size_t)Dh * 4);
        }
    choir_attn g = {H, Hkv, Dh, scale, true, CHOIR_DTYPE_F32};
    choir_attention(q, d, kf, d, vf, d, want, d, Tq, Tk, H, Dh, scale, NULL, true);
    assert_int_equal(choir_op_attention(f.s, q, d, k, dkv, v, dkv, got, d, Tq, Tk, &g, NULL), 0);
    double *wd = malloc((size_t)(Tq * d) * sizeof(double));
    for (int64_t i = 0; i < Tq * d; i++) wd[i] = want[i];
    assert_near(got, wd, (size_t)(Tq * d), 1e-6, "grouped-query attention");
    /* A bad head split is the stream's error, named. */
    choir_attn bad = {H, 4, Dh, scale, false, CHOIR_DTYPE_F32};
    assert_int_equal(choir_op_attention(f.s, q, d, k, dkv, v, dkv, got, d, Tq, Tk, &bad, NULL),
                     CHOIR_EINVAL);
    choir_err err = {0};
    assert_int_equal(choir_stream_status(f.s, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "attention"));
    choir_stream_clear(f.s);
    free(q), free(k), free(v), free(mask), free(got), free(want), free(kf), free(vf), free(wd);
    fx_close(&f);
}

/* Batched steps over a pool of caches: slots named in any order, each with
 * its own length, equal to one call per sequence; rows_scatter appends. */
static void test_attention_slots_and_scatter(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    int H = 4;
    int64_t Dh = 8, d = H * Dh, C = 24, slots = 5, B = 4, stride = C * d;
    float *pool_k = rnd((size_t)(slots * stride), 20), *pool_v = rnd((size_t)(slots * stride), 21);
    float *q = rnd((size_t)(B * d), 22), *newk = rnd((size_t)(B * d), 23);
    float *got = malloc((size_t)(B * d) * 4), *want = malloc((size_t)(B * d) * 4);
    int32_t *meta = choir_stream_alloc(f.s, 3 * (size_t)B * sizeof(int32_t), "meta");
    assert_non_null(meta);
    int32_t slot[4] = {3, 0, 3, 1}, len[4] = {7, 24, 1, 13};
    memcpy(meta, slot, sizeof slot);
    memcpy(meta + B, len, sizeof len);
    for (int i = 0; i < 4; i++) meta[2 * B + i] = len[i] - 1;
    choir_attn a = {H, 0, Dh, 1.0f / sqrtf((float)Dh), false, CHOIR_DTYPE_F32};
    /* Sequences 0 and 2 share slot 3: scatter the later one's row last. */
    assert_int_equal(choir_op_rows_scatter(f.s, newk, B, d, pool_k, CHOIR_DTYPE_F32, stride, d,
                                           meta, meta + 2 * B),
                     0);
    for (int b = 0; b < 4; b++) {
        /* The row landed (the shared slot's two rows sit at different positions). */
        assert_same(pool_k + slot[b] * stride + (len[b] - 1) * d, newk + b * d, (size_t)d,
                    "scatter");
        choir_attention(q + b * d, d, pool_k + slot[b] * stride, d, pool_v + slot[b] * stride, d,
                        want + b * d, d, 1, len[b], H, Dh, a.scale, NULL, false);
    }
    assert_int_equal(choir_op_attention_slots(f.s, B, q, d, d, pool_k, d, pool_v, d, stride, meta,
                                              meta + B, got, d, d, 1, C, &a),
                     0);
    assert_same(got, want, (size_t)(B * d), "attention_slots");
    free(pool_k), free(pool_v), free(q), free(newk), free(got), free(want);
    fx_close(&f);
}

/* Ragged attention over pieces stacked without padding: each piece's rows
 * as choir_attention over that piece alone (bit for bit), the columns past
 * the heads untouched; transpose_lens: B transposes, zeros past each
 * length. */
static void test_attention_ragged_and_transpose_lens(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    int H = 3;
    int64_t Dh = 8, ld = H * Dh + 5, n = 4, R = 0, Tm = 0;
    int32_t len[4] = {1, 17, 6, 11}, off[4];
    for (int b = 0; b < n; b++) off[b] = (int32_t)R, R += len[b], Tm = len[b] > Tm ? len[b] : Tm;
    float *q = rnd((size_t)(R * ld), 30), *k = rnd((size_t)(R * ld), 31), *v = rnd((size_t)(R * ld), 32);
    float *got = rnd((size_t)(R * ld), 33), *want = dup(got, (size_t)(R * ld));
    int32_t *meta = choir_stream_alloc(f.s, 2 * (size_t)n * sizeof(int32_t), "meta");
    assert_non_null(meta);
    memcpy(meta, off, sizeof off), memcpy(meta + n, len, sizeof len);
    choir_attn a = {H, 0, Dh, 1.0f / sqrtf((float)Dh), false, CHOIR_DTYPE_F32};
    for (int b = 0; b < n; b++) {
        int64_t o = off[b] * ld;
        choir_attention(q + o, ld, k + o, ld, v + o, ld, want + o, ld, len[b], len[b], H, Dh,
                        a.scale, NULL, false);
    }
    assert_int_equal(choir_op_attention_ragged(f.s, n, q, k, v, ld, meta, meta + n, Tm, got, &a), 0);
    assert_same(got, want, (size_t)(R * ld), "attention_ragged");
    a.causal = true;
    assert_int_equal(choir_op_attention_ragged(f.s, n, q, k, v, ld, meta, meta + n, Tm, got, &a),
                     CHOIR_EINVAL);
    choir_stream_clear(f.s);
    /* transpose_lens: item b [Tm, C] -> [C, Tm], rows past len[b] zero */
    int64_t C = 7;
    float *src = rnd((size_t)(n * Tm * C), 34), *dst = rnd((size_t)(n * Tm * C), 35);
    assert_int_equal(choir_op_transpose_lens(f.s, src, n, Tm, C, meta + n, dst), 0);
    for (int64_t b = 0; b < n; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < Tm; r++) {
                float w = r < len[b] ? src[(b * Tm + r) * C + c] : 0.0f;
                if (dst[(b * C + c) * Tm + r] != w) fail_msg("transpose_lens: item %lld", (long long)b);
            }
    free(q), free(k), free(v), free(got), free(want), free(src), free(dst);
    fx_close(&f);
}

/* bf16 rows through linear_bf16 and layer_norm_bf16: the f32 operations on
 * the widened rows, then bias, GELU and rounding, bit for bit; the residual
 * add; a bad flag combination refused. */
static void test_linear_bf16_rows(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    int64_t M = 9, K = 24, N = 16;
    float *xf = rnd((size_t)(M * K), 50), *wf = rnd((size_t)(N * K), 51), *b = rnd((size_t)N, 52);
    uint16_t *x16 = malloc((size_t)(M * K) * 2), *w16 = malloc((size_t)(N * K) * 2);
    choir_f32_to_bf16_n(xf, x16, M * K);
    choir_f32_to_bf16_n(wf, w16, N * K);
    choir_bf16_to_f32_n(x16, xf, M * K);
    choir_weight W = {.kind = CHOIR_WEIGHT_BF16, .rows = N, .cols = K, .data = w16};
    float *want = malloc((size_t)(M * N) * 4), *res = rnd((size_t)(M * N), 53);
    float *res0 = dup(res, (size_t)(M * N));
    uint16_t *got = malloc((size_t)(M * N) * 2), *want16 = malloc((size_t)(M * N) * 2);
    choir_linear(xf, M, &W, b, want);
    choir_gelu_erf(want, M * N);
    choir_f32_to_bf16_n(want, want16, M * N);
    assert_int_equal(choir_op_linear_bf16(f.s, x16, M, &W, b, got, CHOIR_DTYPE_BF16,
                                          CHOIR_LINEAR_GELU),
                     0);
    assert_memory_equal(got, want16, (size_t)(M * N) * 2);
    choir_linear(xf, M, &W, b, want);
    assert_int_equal(choir_op_linear_bf16(f.s, x16, M, &W, b, res, CHOIR_DTYPE_F32,
                                          CHOIR_LINEAR_ACCUMULATE),
                     0);
    for (int64_t i = 0; i < M * N; i++) assert_true(res[i] == res0[i] + want[i]);
    assert_int_equal(choir_op_linear_bf16(f.s, x16, M, &W, b, res, CHOIR_DTYPE_BF16,
                                          CHOIR_LINEAR_ACCUMULATE),
                     CHOIR_EINVAL);
    choir_stream_clear(f.s);
    float *ln = malloc((size_t)(M * K) * 4);
    choir_layer_norm(xf, ln, M, K, wf, NULL, 1e-5f);
    uint16_t *ln16 = malloc((size_t)(M * K) * 2), *lnw = malloc((size_t)(M * K) * 2);
    choir_f32_to_bf16_n(ln, lnw, M * K);
    assert_int_equal(choir_op_layer_norm_bf16(f.s, xf, ln16, M, K, wf, NULL, 1e-5f), 0);
    assert_memory_equal(ln16, lnw, (size_t)(M * K) * 2);
    free(xf), free(wf), free(b), free(x16), free(w16), free(want), free(res), free(res0);
    free(got), free(want16), free(ln), free(ln16), free(lnw);
    fx_close(&f);
}

/* norm_linear on the CPU is the layer norm, the products, GELU and the rows
 * scatter in turn, bit for bit: three layers of one width (keys into an f32
 * cache and values into a bf16 one at slots and positions, h left with the
 * normalised rows), then one with GELU; no layers, more than the maximum,
 * layers of different widths and an unknown flag refused. */
static void test_norm_linear(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    enum { M = 3, K = 40, SLOTS = 2, POS = 5 };
    const int64_t N[3] = {24, 24, 16};
    float *x = rnd(M * K, 80), *g = rnd(K, 81), *be = rnd(K, 82);
    float *w[3], *b[3], *want[3], *got[3];
    choir_weight W[3];
    for (int i = 0; i < 3; i++) {
        w[i] = rnd((size_t)(N[i] * K), 83 + (uint64_t)i);
        b[i] = rnd((size_t)N[i], 86 + (uint64_t)i);
        W[i] = choir_weight_f32(w[i], N[i], K);
        want[i] = malloc((size_t)(M * N[i]) * 4);
        got[i] = malloc((size_t)(M * N[i]) * 4);
    }
    float *h = malloc(M * K * 4), *hw = malloc(M * K * 4);
    float kc[SLOTS * POS * 24] = {0}, kw[SLOTS * POS * 24] = {0};
    uint16_t vc[SLOTS * POS * 16] = {0}, vw[SLOTS * POS * 16] = {0};
    int32_t slot[M] = {1, 0, 1}, pos[M] = {0, 2, 4};
    choir_layer_norm(x, hw, M, K, g, be, 1e-5f);
    for (int i = 0; i < 3; i++) choir_linear(hw, M, &W[i], i == 1 ? NULL : b[i], want[i]);
    for (int m = 0; m < M; m++) {
        memcpy(kw + slot[m] * POS * 24 + pos[m] * 24, want[1] + m * 24, 24 * 4);
        choir_f32_to_bf16_n(want[2] + m * 16, vw + slot[m] * POS * 16 + pos[m] * 16, 16);
    }
    choir_norm_linear p = {.ln_g = g, .ln_b = be, .eps = 1e-5f, .n = 3,
                           .W = {&W[0], &W[1], &W[2]}, .bias = {b[0], NULL, b[2]},
                           .y = {got[0], got[1], got[2]}};
    p.store[1] = (choir_rows_out){.dst = kc, .dtype = CHOIR_DTYPE_F32, .slot_stride = POS * 24,
                                  .ld = 24, .slot = slot, .pos = pos};
    p.store[2] = (choir_rows_out){.dst = vc, .dtype = CHOIR_DTYPE_BF16, .slot_stride = POS * 16,
                                  .ld = 16, .slot = slot, .pos = pos};
    assert_int_equal(choir_op_norm_linear(f.s, x, M, &p, h), 0);
    assert_same(h, hw, M * K, "norm_linear: normalised rows");
    for (int i = 0; i < 3; i++) assert_same(got[i], want[i], (size_t)(M * N[i]), "norm_linear");
    assert_same(kc, kw, SLOTS * POS * 24, "norm_linear: keys stored");
    assert_memory_equal(vc, vw, sizeof vc);
    /* GELU, no affine. */
    choir_layer_norm(x, hw, M, K, NULL, NULL, 1e-5f);
    choir_linear(hw, M, &W[0], b[0], want[0]);
    choir_gelu_erf(want[0], M * N[0]);
    choir_norm_linear pg = {.eps = 1e-5f, .n = 1, .W = {&W[0]}, .bias = {b[0]}, .y = {got[0]},
                            .flags = CHOIR_LINEAR_GELU};
    assert_int_equal(choir_op_norm_linear(f.s, x, M, &pg, h), 0);
    assert_same(got[0], want[0], (size_t)(M * N[0]), "norm_linear + GELU");
    /* Refusals. */
    choir_weight wide = choir_weight_f32(w[0], 12, 2 * K);
    choir_norm_linear bad[4] = {pg, pg, pg, pg};
    bad[0].n = 0;
    bad[1].n = CHOIR_NORM_LINEAR_MAX + 1;
    bad[2].n = 2, bad[2].W[1] = &wide, bad[2].y[1] = got[1];
    bad[3].flags = CHOIR_LINEAR_ACCUMULATE;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(choir_op_norm_linear(f.s, x, M, &bad[i], h), CHOIR_EINVAL);
        choir_stream_clear(f.s);
    }
    for (int i = 0; i < 3; i++) free(w[i]), free(b[i]), free(want[i]), free(got[i]);
    free(x), free(g), free(be), free(h), free(hw);
    fx_close(&f);
}

/* linear_ex: the product then GELU, or the product added into y through
 * tmp, bit for bit the two operations' results; both steps at once, an
 * unknown flag and ACCUMULATE without tmp refused (sticky, then cleared). */
static void test_linear_ex(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    int64_t M = 3, K = 40, N = 24;
    float *x = rnd((size_t)(M * K), 70), *w = rnd((size_t)(N * K), 71), *b = rnd((size_t)N, 72);
    choir_weight W = choir_weight_f32(w, N, K);
    float *want = malloc((size_t)(M * N) * 4), *got = malloc((size_t)(M * N) * 4);
    float *res = rnd((size_t)(M * N), 73), *res0 = dup(res, (size_t)(M * N));
    float *tmp = malloc((size_t)(M * N) * 4);
    choir_linear(x, M, &W, b, want);
    choir_gelu_erf(want, M * N);
    assert_int_equal(choir_op_linear_ex(f.s, x, M, &W, b, got, CHOIR_LINEAR_GELU, NULL), 0);
    assert_memory_equal(got, want, (size_t)(M * N) * 4);
    choir_linear(x, M, &W, b, want);
    assert_int_equal(choir_op_linear_ex(f.s, x, M, &W, b, res, CHOIR_LINEAR_ACCUMULATE, tmp), 0);
    for (int64_t i = 0; i < M * N; i++) assert_true(res[i] == res0[i] + want[i]);
    assert_int_equal(choir_op_linear_ex(f.s, x, M, &W, b, got, 0, NULL), 0);
    assert_memory_equal(got, want, (size_t)(M * N) * 4);
    assert_int_equal(choir_op_linear_ex(f.s, x, M, &W, b, res, CHOIR_LINEAR_ACCUMULATE, NULL),
                     CHOIR_EINVAL);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_linear_ex(f.s, x, M, &W, b, res,
                                        CHOIR_LINEAR_ACCUMULATE | CHOIR_LINEAR_GELU, tmp),
                     CHOIR_EINVAL);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_linear_ex(f.s, x, M, &W, b, res, 4u, tmp), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    free(x), free(w), free(b), free(want), free(got), free(res), free(res0), free(tmp);
    fx_close(&f);
}

/* swiglu_linear: SiLU(gate) up, then the product written (with its bias)
 * or added into y, bit for bit choir_silu, choir_mul and the linear_ex
 * results in turn; GELU, an unknown flag and ACCUMULATE without tmp
 * refused (sticky, then cleared). */
static void test_swiglu_linear(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    int64_t M = 3, I = 40, N = 24;
    float *g0 = rnd((size_t)(M * I), 80), *u = rnd((size_t)(M * I), 81), *w = rnd((size_t)(N * I), 82);
    float *b = rnd((size_t)N, 83), *res = rnd((size_t)(M * N), 84), *res0 = dup(res, (size_t)(M * N));
    choir_weight W = choir_weight_f32(w, N, I);
    float *h = dup(g0, (size_t)(M * I)), *g = dup(g0, (size_t)(M * I));
    float *want = malloc((size_t)(M * N) * 4), *got = malloc((size_t)(M * N) * 4);
    float *tmp = malloc((size_t)(M * N) * 4);
    choir_silu(h, M * I);
    choir_mul(h, u, h, M * I);
    choir_linear(h, M, &W, b, want);
    assert_int_equal(choir_op_swiglu_linear(f.s, g, u, M, &W, b, got, 0, NULL), 0);
    assert_memory_equal(got, want, (size_t)(M * N) * 4);
    memcpy(g, g0, (size_t)(M * I) * 4);
    assert_int_equal(choir_op_swiglu_linear(f.s, g, u, M, &W, b, res, CHOIR_LINEAR_ACCUMULATE, tmp), 0);
    for (int64_t i = 0; i < M * N; i++) assert_true(res[i] == res0[i] + want[i]);
    assert_int_equal(choir_op_swiglu_linear(f.s, g, u, M, &W, b, res, CHOIR_LINEAR_ACCUMULATE, NULL),
                     CHOIR_EINVAL);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_swiglu_linear(f.s, g, u, M, &W, b, got, CHOIR_LINEAR_GELU, NULL), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_swiglu_linear(f.s, g, u, M, &W, b, res, 4u, tmp), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    free(g0), free(u), free(w), free(b), free(res), free(res0), free(h), free(g), free(want), free(got), free(tmp);
    fx_close(&f);
}

/* gated_mlp: norm_linear (RMS, gate and up) then swiglu_linear into x,
 * bit for bit; shapes that do not chain refused. */
static void test_gated_mlp(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    int64_t M = 3, H = 16, I = 40;
    float *x = rnd((size_t)(M * H), 90), *g = rnd((size_t)H, 91), *wg = rnd((size_t)(I * H), 92);
    float *wu = rnd((size_t)(I * H), 93), *wd = rnd((size_t)(H * I), 94), *x2 = dup(x, (size_t)(M * H));
    choir_weight Wg = choir_weight_f32(wg, I, H), Wu = choir_weight_f32(wu, I, H), Wd = choir_weight_f32(wd, H, I);
    float *gate = malloc((size_t)(M * I) * 4), *up = malloc((size_t)(M * I) * 4);
    float *h = malloc((size_t)(M * H) * 4), *tmp = malloc((size_t)(M * H) * 4);
    choir_norm_linear p = {.ln_g = g, .eps = 1e-6f, .rms = true, .n = 2, .W = {&Wg, &Wu}, .y = {gate, up}};
    assert_int_equal(choir_op_norm_linear(f.s, x2, M, &p, h), 0);
    assert_int_equal(choir_op_swiglu_linear(f.s, gate, up, M, &Wd, NULL, x2, CHOIR_LINEAR_ACCUMULATE, tmp), 0);
    assert_int_equal(choir_op_gated_mlp(f.s, x, M, g, 1e-6f, &Wg, &Wu, &Wd, gate, up, h, tmp), 0);
    assert_memory_equal(x, x2, (size_t)(M * H) * 4);
    assert_int_equal(choir_op_gated_mlp(f.s, x, M, g, 1e-6f, &Wg, &Wu, &Wg, gate, up, h, tmp), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    free(x), free(g), free(wg), free(wu), free(wd), free(x2), free(gate), free(up), free(h), free(tmp);
    fx_close(&f);
}

/* conv1d on bf16 operands: choir_conv1d over the rounded input and weight,
 * bit for bit, every item of a batch. */
static void test_conv1d_bf16(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    int64_t B = 2, Cin = 5, T = 37, Cout = 6, K = 3;
    int64_t Tout = choir_conv1d_out_len(T, K, 2, 1, 1);
    float *x = rnd((size_t)(B * Cin * T), 60), *w = rnd((size_t)(Cout * Cin * K), 61);
    float *b = rnd((size_t)Cout, 62);
    float *got = malloc((size_t)(B * Cout * Tout) * 4), *want = malloc((size_t)(B * Cout * Tout) * 4);
    assert_int_equal(choir_op_conv1d_bf16(f.s, x, B, Cin, T, w, b, Cout, K, 2, 1, 1, got), 0);
    uint16_t *t16 = malloc((size_t)(B * Cin * T + Cout * Cin * K) * 2);
    choir_f32_to_bf16_n(x, t16, B * Cin * T);
    choir_bf16_to_f32_n(t16, x, B * Cin * T);
    choir_f32_to_bf16_n(w, t16, Cout * Cin * K);
    choir_bf16_to_f32_n(t16, w, Cout * Cin * K);
    for (int64_t i = 0; i < B; i++)
        choir_conv1d(x + i * Cin * T, Cin, T, w, b, Cout, K, 2, 1, 1, 1, want + i * Cout * Tout);
    assert_same(got, want, (size_t)(B * Cout * Tout), "conv1d_bf16");
    free(x), free(w), free(b), free(got), free(want), free(t16);
    fx_close(&f);
}

/* Everything bf16 (the encoder's fused attention): B sequences with wider
 * row and batch strides, grouped and causal heads, against double-precision
 * attention over the widened values: the output's bf16 rounding only
 * (2^-9 relative per value); the padding between rows untouched. */
static void test_attention_all_bf16(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    int H = 4, Hkv = 2;
    int64_t Dh = 8, d = H * Dh, dkv = Hkv * Dh, B = 3, Tq = 7, Tk = 11, pad = 3;
    int64_t ldq = d + pad, ldk = dkv + pad, qb = Tq * ldq + 5, kb = Tk * ldk + 2;
    for (int causal = 0; causal < 2; causal++) {
        float *qf = rnd((size_t)(B * qb), 40 + causal), *kf = rnd((size_t)(B * kb), 42);
        float *vf = rnd((size_t)(B * kb), 43);
        uint16_t *q16 = malloc((size_t)(B * qb) * 2), *k16 = malloc((size_t)(B * kb) * 2);
        uint16_t *v16 = malloc((size_t)(B * kb) * 2), *o16 = malloc((size_t)(B * qb) * 2);
        choir_f32_to_bf16_n(qf, q16, B * qb);
        choir_f32_to_bf16_n(kf, k16, B * kb);
        choir_f32_to_bf16_n(vf, v16, B * kb);
        memset(o16, 0xA5, (size_t)(B * qb) * 2);
        choir_attn a = {.n_head = H, .n_kv_head = Hkv, .Dh = Dh, .scale = 0.4f,
                        .causal = causal != 0};
        assert_int_equal(choir_op_attention_bf16(f.s, B, q16, ldq, qb, k16, ldk, v16, ldk, kb, o16,
                                                 ldq, qb, Tq, Tk, &a),
                         0);
        float *got = malloc((size_t)(B * Tq * d) * 4);
        double *want = malloc((size_t)(B * Tq * d) * sizeof(double));
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Tq; i++) {
                const uint16_t *orow = o16 + b * qb + i * ldq;
                for (int64_t p = d; p < ldq; p++) assert_int_equal(orow[p], 0xA5A5);
                choir_bf16_to_f32_n(orow, got + (b * Tq + i) * d, d);
                for (int h = 0; h < H; h++) {
                    int64_t nk = causal ? i + (Tk - Tq) + 1 : Tk;
                    double sc[16], mx = -1e300, sum = 0;
                    const uint16_t *qr = q16 + b * qb + i * ldq + h * Dh;
                    for (int64_t j = 0; j < nk; j++) {
                        const uint16_t *kr = k16 + b * kb + j * ldk + (h / 2) * Dh;
                        double dot = 0;
                        for (int64_t e = 0; e < Dh; e++)
                            dot += (double)choir_bf16_to_f32(qr[e]) * choir_bf16_to_f32(kr[e]);
                        sc[j] = dot * a.scale;
                        if (sc[j] > mx) mx = sc[j];
                    }
                    for (int64_t j = 0; j < nk; j++) sum += sc[j] = exp(sc[j] - mx);
                    for (int64_t e = 0; e < Dh; e++) {
                        double acc = 0;
                        for (int64_t j = 0; j < nk; j++)
                            acc += sc[j] * choir_bf16_to_f32(v16[b * kb + j * ldk + (h / 2) * Dh + e]);
                        want[(b * Tq + i) * d + h * Dh + e] = acc / sum;
                    }
                }
            }
        assert_near(got, want, (size_t)(B * Tq * d), 4e-3, "attention_bf16");
        free(qf), free(kf), free(vf), free(q16), free(k16), free(v16), free(o16), free(got),
            free(want);
    }
    fx_close(&f);
}

/* Keys and values kept as bf16 (a cache in a bf16 model's dtype): attention
 * equals f32 attention over the widened values, bit for bit, one sequence
 * (grouped heads too) and over slots; rows_scatter and convert round as
 * choir_f32_to_bf16_n; a dtype other than f32 or bf16 is refused. */
static void test_attention_bf16_kv(void **state) {
    (void)state;
    fx f = fx_open(1 << 20, 1 << 20);
    int H = 4;
    int64_t Dh = 8, d = H * Dh, C = 24, slots = 3, B = 3, stride = C * d, Tq = 5, Tk = 19;
    size_t pool_n = (size_t)(slots * stride);
    float *kf = rnd(pool_n, 30), *vf = rnd(pool_n, 31), *q = rnd((size_t)(Tq * d), 32);
    uint16_t *k16 = malloc(pool_n * 2), *v16 = malloc(pool_n * 2);
    choir_f32_to_bf16_n(kf, k16, (int64_t)pool_n);
    choir_f32_to_bf16_n(vf, v16, (int64_t)pool_n);
    choir_bf16_to_f32_n(k16, kf, (int64_t)pool_n); /* kf, vf: the widened values */
    choir_bf16_to_f32_n(v16, vf, (int64_t)pool_n);
    float *got = malloc((size_t)(Tq * d) * 4), *want = malloc((size_t)(Tq * d) * 4);
    choir_attn a = {.n_head = H, .Dh = Dh, .scale = 1.0f / sqrtf((float)Dh), .causal = true,
                    .kv = CHOIR_DTYPE_BF16};
    assert_int_equal(choir_op_attention(f.s, q, d, k16, d, v16, d, got, d, Tq, Tk, &a, NULL), 0);
    choir_attention(q, d, kf, d, vf, d, want, d, Tq, Tk, H, Dh, a.scale, NULL, true);
    assert_same(got, want, (size_t)(Tq * d), "attention, bf16 keys and values");
    /* Two key heads for four query heads: keys [Tk, 2 Dh]. */
    choir_attn g = a;
    g.n_kv_head = 2;
    assert_int_equal(choir_op_attention(f.s, q, d, k16, 2 * Dh, v16, 2 * Dh, got, d, Tq, Tk, &g,
                                        NULL),
                     0);
    for (int h = 0; h < H; h++)
        choir_attention(q + h * Dh, d, kf + (h / 2) * Dh, 2 * Dh, vf + (h / 2) * Dh, 2 * Dh,
                        want + h * Dh, d, Tq, Tk, 1, Dh, a.scale, NULL, true);
    assert_same(got, want, (size_t)(Tq * d), "attention, grouped bf16 keys");

    /* Slots: one new row per sequence scattered (rounded), then attention. */
    int32_t *meta = choir_stream_alloc(f.s, 3 * (size_t)B * sizeof(int32_t), "meta");
    assert_non_null(meta);
    int32_t slot[3] = {2, 0, 1}, len[3] = {5, 24, 11};
    for (int i = 0; i < 3; i++) meta[i] = slot[i], meta[B + i] = len[i], meta[2 * B + i] = len[i] - 1;
    float *newk = rnd((size_t)(B * d), 33);
    uint16_t *row16 = malloc((size_t)(B * d) * 2);
    choir_f32_to_bf16_n(newk, row16, B * d);
    assert_int_equal(choir_op_rows_scatter(f.s, newk, B, d, k16, CHOIR_DTYPE_BF16, stride, d, meta,
                                           meta + 2 * B),
                     0);
    for (int b = 0; b < 3; b++) {
        assert_memory_equal(k16 + slot[b] * stride + (len[b] - 1) * d, row16 + b * d,
                            (size_t)d * 2);
        choir_bf16_to_f32_n(row16 + b * d, kf + slot[b] * stride + (len[b] - 1) * d, d);
    }
    a.causal = false;
    assert_int_equal(choir_op_attention_slots(f.s, B, q, d, d, k16, d, v16, d, stride, meta,
                                              meta + B, got, d, d, 1, C, &a),
                     0);
    for (int b = 0; b < 3; b++)
        choir_attention(q + b * d, d, kf + slot[b] * stride, d, vf + slot[b] * stride, d,
                        want + b * d, d, 1, len[b], H, Dh, a.scale, NULL, false);
    assert_same(got, want, (size_t)(B * d), "attention_slots, bf16 caches");

    /* convert: bf16 rounding, and f32 as a copy. */
    uint16_t *c16 = malloc((size_t)(B * d) * 2);
    assert_int_equal(choir_op_convert(f.s, newk, c16, CHOIR_DTYPE_BF16, B * d), 0);
    assert_memory_equal(c16, row16, (size_t)(B * d) * 2);
    assert_int_equal(choir_op_convert(f.s, newk, got, CHOIR_DTYPE_F32, B * d), 0);
    assert_same(got, newk, (size_t)(B * d), "convert to f32");
    /* f16 caches are a CPU form now (15f2ab3); an integer dtype is no cache form */
    a.kv = CHOIR_DTYPE_I8;
    assert_int_equal(choir_op_attention(f.s, q, d, k16, d, v16, d, got, d, Tq, Tk, &a, NULL),
                     CHOIR_EINVAL);
    choir_stream_clear(f.s);
    free(kf), free(vf), free(q), free(k16), free(v16), free(got), free(want), free(newk);
    free(row16), free(c16);
    fx_close(&f);
}

static void test_rows_gather(void **state) {
    (void)state;
    fx f = fx_open(0, 0);
    int64_t V = 50, d = 24;
    float *w = rnd((size_t)(V * d), 30);
    uint16_t *wb = malloc((size_t)(V * d) * 2);
    choir_f32_to_bf16_n(w, wb, V * d);
    choir_weight W = {.kind = CHOIR_WEIGHT_BF16, .rows = V, .cols = d, .data = wb};
    int32_t ids[5] = {0, 49, 7, 7, 23};
    float *got = malloc(5 * (size_t)d * 4), *want = malloc((size_t)d * 4);
    assert_int_equal(choir_op_rows_gather(f.s, &W, ids, 5, got), 0);
    for (int r = 0; r < 5; r++) {
        choir_weight_row_f32(&W, ids[r], want);
        assert_same(got + r * d, want, (size_t)d, "gather");
    }
    ids[2] = 50;
    assert_int_equal(choir_op_rows_gather(f.s, &W, ids, 5, got), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    free(w), free(wb), free(got), free(want);
    fx_close(&f);
}

/* Greedy selection against its definition written out: the first index of
 * the largest non-NaN value (+0 and -0 equal), 0 for a row starting with
 * NaN. Values on a coarse grid, so that most rows have ties for the max. */
static int32_t argmax_naive(const float *x, int64_t n) {
    if (isnan(x[0])) return 0;
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i]) && x[i] > m) m = x[i];
    for (int64_t i = 0; i < n; i++)
        if (x[i] == m) return (int32_t)i;
    return 0;
}

static void test_argmax_rows(void **state) {
    (void)state;
    fx f = fx_open(0, 0);
    const int64_t widths[] = {1, 3, 1001, 4096, 152064};
    int ties = 0;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        int64_t C = widths[w], R = 9;
        float *x = rnd((size_t)(R * C), 40 + w);
        for (int64_t i = 0; i < R * C; i++) x[i] = roundf(x[i] * 4.0f) / 4.0f; /* 9 levels */
        float *r = x;
        r[C - 1] = 2.0f; /* row 0: the max at the end */
        r = x + 1 * C;
        r[0] = NAN; /* row 1: NaN first gives 0 */
        r = x + 2 * C;
        for (int64_t i = 0; i < C; i++) r[i] = -INFINITY; /* row 2: nothing above -inf */
        r = x + 3 * C;
        for (int64_t i = 0; i < C; i++) r[i] = NAN; /* row 3: all NaN */
        r = x + 4 * C;
        for (int64_t i = 0; i < C; i++) r[i] = i % 2 ? 0.0f : -0.0f; /* row 4: -0 and +0 tie */
        r = x + 5 * C;
        for (int64_t i = 1; i < C; i += 2) r[i] = NAN; /* row 5: NaNs among the values */
        if (C > 2) x[6 * C + 1] = NAN, x[6 * C + 2] = 3.0f; /* row 6: the max right after a NaN */
        int32_t got[9];
        memset(got, 0xff, sizeof got);
        assert_int_equal(choir_op_argmax_rows(f.s, x, R, C, got), 0);
        for (int64_t q = 0; q < R; q++) {
            const float *row = x + q * C;
            int32_t want = argmax_naive(row, C);
            if (got[q] != want) fail_msg("argmax %lld cols, row %lld: %d, want %d", (long long)C, (long long)q,
                                         got[q], want);
            /* The host loop of greedy decoding gives the same. */
            assert_int_equal(choir_argmax_f32(row, C), want);
            int n_max = 0;
            for (int64_t i = 0; i < C && !isnan(row[0]); i++) n_max += row[i] == row[want];
            ties += n_max > 1;
        }
        free(x);
    }
    assert_true(ties >= 15); /* the tie rule was exercised */
    int32_t one;
    float v = 1.0f;
    assert_int_equal(choir_op_argmax_rows(f.s, &v, 1, 0, &one), CHOIR_EINVAL);
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_argmax_rows(f.s, &v, 0, 1, &one), 0);
    fx_close(&f);
}

/* --- elementwise and norms ---------------------------------------------------------- */

static void test_elementwise(void **state) {
    (void)state;
    fx f = fx_open(0, 0);
    size_t n = 1001;
    float *a = rnd(n, 40), *b = rnd(n, 41), *got = malloc(n * 4), *want = malloc(n * 4);
    choir_add(a, b, want, (int64_t)n);
    choir_op_add(f.s, a, b, got, (int64_t)n);
    assert_same(got, want, n, "add");
    choir_mul(a, b, want, (int64_t)n);
    choir_op_mul(f.s, a, b, got, (int64_t)n);
    assert_same(got, want, n, "mul");
    memcpy(want, a, n * 4), memcpy(got, a, n * 4);
    choir_scale(want, 0.37f, (int64_t)n);
    choir_op_scale(f.s, got, 0.37f, (int64_t)n);
    assert_same(got, want, n, "scale");
    memcpy(want, a, n * 4), memcpy(got, a, n * 4);
    choir_add_bias_rows(want, b, 7, 143);
    choir_op_add_bias_rows(f.s, got, b, 7, 143);
    assert_same(got, want, n, "bias rows");
    void (*ref[6])(float *, int64_t) = {choir_gelu_erf, choir_gelu_tanh, choir_silu,
                                        choir_relu,     choir_sigmoid,   choir_tanh};
    for (int act = 0; act < 6; act++) {
        memcpy(want, a, n * 4), memcpy(got, a, n * 4);
        ref[act](want, (int64_t)n);
        assert_int_equal(choir_op_act(f.s, (choir_act)act, got, (int64_t)n, 0), 0);
        assert_same(got, want, n, "activation");
    }
    memcpy(want, a, n * 4), memcpy(got, a, n * 4);
    choir_leaky_relu(want, (int64_t)n, 0.2f);
    choir_op_act(f.s, CHOIR_ACT_LEAKY_RELU, got, (int64_t)n, 0.2f);
    assert_same(got, want, n, "leaky relu");
    /* Snake over 3 items of 7 channels. */
    float alpha[7] = {0.5f, 1, 2, 0.3f, 1.7f, 0.9f, 3};
    memcpy(want, a, n * 4), memcpy(got, a, n * 4);
    for (int i = 0; i < 3; i++) choir_snake(want + i * 7 * 40, 7, 40, alpha);
    choir_op_snake(f.s, got, 3, 7, 40, alpha);
    assert_same(got, want, 3 * 7 * 40, "snake");
    /* Softmax and layer norm. */
    memcpy(want, a, n * 4), memcpy(got, a, n * 4);
    choir_softmax(want, 11, 91);
    choir_op_softmax(f.s, got, 11, 91);
    assert_same(got, want, 11 * 91, "softmax");
    choir_layer_norm(a, want, 11, 91, b, b + 91, 1e-5f);
    choir_op_layer_norm(f.s, a, got, 11, 91, b, b + 91, 1e-5f);
    assert_same(got, want, 11 * 91, "layer norm");
    /* Transpose with and without an addend. */
    choir_op_transpose(f.s, a, 13, 77, NULL, got);
    for (int r = 0; r < 13; r++)
        for (int c = 0; c < 77; c++) assert_true(got[c * 13 + r] == a[r * 77 + c]);
    choir_op_transpose(f.s, a, 13, 77, b, got);
    for (int r = 0; r < 13; r++)
        for (int c = 0; c < 77; c++) assert_true(got[c * 13 + r] == a[r * 77 + c] + b[c * 13 + r]);
    free(a), free(b), free(got), free(want);
    fx_close(&f);
}

static void test_norms_naive(void **state) {
    (void)state;
    fx f = fx_open(0, 0);
    int64_t rows = 9, dim = 67, B = 2, C = 12, T = 33, G = 4;
    float *x = rnd((size_t)(B * C * T), 50), *g = rnd((size_t)C * 10, 51);
    float *y = malloc((size_t)(B * C * T) * 4);
    double *want = malloc((size_t)(B * C * T) * sizeof(double));
    /* RMS norm. */
    choir_op_rms_norm(f.s, x, y, rows, dim, g, 1e-6f);
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
        for (int64_t i = 0; i < dim; i++)
            want[r * dim + i] = x[r * dim + i] / sqrt(ss / dim + 1e-6) * g[i];
    }
    assert_near(y, want, (size_t)(rows * dim), 1e-6, "rms norm");
    /* Group norm (4 groups of 3 channels) and instance norm (12 groups). */
    for (int pass = 0; pass < 2; pass++) {
        int64_t groups = pass ? C : G, cg = C / groups;
        choir_op_group_norm(f.s, x, y, B, C, T, groups, g, g + C, 1e-5f);
        for (int64_t b = 0; b < B; b++)
            for (int64_t k = 0; k < groups; k++) {
                const float *xg = x + (b * C + k * cg) * T;
                double m = 0, v = 0;
                for (int64_t i = 0; i < cg * T; i++) m += xg[i];
                m /= (double)(cg * T);
                for (int64_t i = 0; i < cg * T; i++) v += (xg[i] - m) * (xg[i] - m);
                v /= (double)(cg * T);
                for (int64_t i = 0; i < cg * T; i++) {
                    int64_t c = k * cg + i / T;
                    want[(b * C + k * cg) * T + i] = (xg[i] - m) / sqrt(v + 1e-5) * g[c] + g[C + c];
                }
            }
        assert_near(y, want, (size_t)(B * C * T), 1e-5, pass ? "instance norm" : "group norm");
    }
    /* AdaIN with lengths: style gamma/beta per item, tails zeroed. */
    int32_t lens[2] = {33, 20};
    float *gb = rnd((size_t)(B * 2 * C), 52);
    choir_op_adain(f.s, x, y, B, C, T, lens, g, NULL, gb, 2 * C, 1e-5f);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            const float *xr = x + (b * C + c) * T;
            double m = 0, v = 0;
            for (int t = 0; t < lens[b]; t++) m += xr[t];
            m /= lens[b];
            for (int t = 0; t < lens[b]; t++) v += (xr[t] - m) * (xr[t] - m);
            v /= lens[b];
            for (int t = 0; t < T; t++)
                want[(b * C + c) * T + t] =
                    t < lens[b] ? (1.0 + gb[b * 2 * C + c]) * ((xr[t] - m) / sqrt(v + 1e-5) * g[c]) +
                                      gb[b * 2 * C + C + c]
                                : 0.0;
        }
    assert_near(y, want, (size_t)(B * C * T), 1e-5, "adain");
    free(x), free(g), free(y), free(want), free(gb);
    fx_close(&f);
}

static void test_rope_naive(void **state) {
    (void)state;
    fx f = fx_open(0, 0);
    int H = 3;
    int64_t Dh = 12, rows = 5, ld = H * Dh + 4;
    int32_t pos[5] = {0, 1, 17, 300, 4095};
    for (int inter = 0; inter < 2; inter++)
        for (int64_t rot = 8; rot <= Dh; rot += 4) {
            float *x = rnd((size_t)(rows * ld), 60), *y = dup(x, (size_t)(rows * ld));
            double *want = malloc((size_t)(rows * ld) * sizeof(double));
            for (int64_t i = 0; i < rows * ld; i++) want[i] = x[i];
            for (int64_t r = 0; r < rows; r++)
                for (int h = 0; h < H; h++)
                    for (int64_t i = 0; i < rot / 2; i++) {
                        double ang = pos[r] * pow(10000.0, -2.0 * (double)i / (double)rot);
                        int64_t i0 = inter ? 2 * i : i, i1 = inter ? 2 * i + 1 : i + rot / 2;
                        double a = x[r * ld + h * Dh + i0], b = x[r * ld + h * Dh + i1];
                        want[r * ld + h * Dh + i0] = a * cos(ang) - b * sin(ang);
                        want[r * ld + h * Dh + i1] = b * cos(ang) + a * sin(ang);
                    }
            assert_int_equal(choir_op_rope(f.s, y, rows, ld, H, Dh, rot, pos, 10000.0f, inter), 0);
            /* float angles at position 4095 carry ~1e-4 of phase error */
            assert_near(y, want, (size_t)(rows * ld), 2e-4, "rope");
            free(x), free(y), free(want);
        }
    fx_close(&f);
}

/* --- convolutions, LSTM, iSTFT ------------------------------------------------------------ */

static void test_conv_and_lstm(void **state) {
    (void)state;
    fx f = fx_open(0, 8 << 20);
    int64_t B = 3, Cin = 12, T = 50, Cout = 16, K = 5;
    float *x = rnd((size_t)(B * Cin * T), 70), *w = rnd((size_t)(Cout * Cin * K), 71);
    float *bias = rnd((size_t)Cout, 72);
    float *got = malloc((size_t)(B * Cout * 200) * 4), *want = malloc((size_t)(Cout * 200) * 4);
    int64_t Tout = choir_conv1d_out_len(T, K, 2, 2, 1);
    choir_op_conv1d(f.s, x, B, Cin, T, w, bias, Cout, K, 2, 2, 1, 1, got);
    for (int64_t b = 0; b < B; b++) {
        choir_conv1d(x + b * Cin * T, Cin, T, w, bias, Cout, K, 2, 2, 1, 1, want);
        assert_same(got + b * Cout * Tout, want, (size_t)(Cout * Tout), "conv1d");
    }
    Tout = choir_conv_transpose1d_out_len(T, K, 3, 1, 1, 1);
    choir_op_conv_transpose1d(f.s, x, B, Cin, T, w, bias, Cout, K, 3, 1, 1, 1, 2, got);
    for (int64_t b = 0; b < B; b++) {
        choir_conv_transpose1d(x + b * Cin * T, Cin, T, w, bias, Cout, K, 3, 1, 1, 1, 2, want);
        assert_same(got + b * Cout * Tout, want, (size_t)(Cout * Tout), "conv_transpose1d");
    }
    /* Bidirectional LSTM with lengths against two choir_lstm runs per item. */
    int64_t In = 7, H = 8, G = 4 * H;
    float *wih = rnd((size_t)(2 * G * In), 73), *whh = rnd((size_t)(2 * G * H), 74);
    float *lb = rnd((size_t)(2 * G), 75), *scr = malloc((size_t)(G * (T + 1)) * 4);
    float *y = malloc((size_t)(B * T * 2 * H) * 4), *ref = calloc((size_t)(T * 2 * H), 4);
    int32_t lens[3] = {50, 3, 31};
    float *xl = rnd((size_t)(B * T * In), 76);
    assert_int_equal(choir_op_bilstm(f.s, xl, B, T, In, H, wih, whh, lb, lens, y), 0);
    for (int64_t b = 0; b < B; b++) {
        memset(ref, 0, (size_t)(T * 2 * H) * 4);
        for (int dir = 0; dir < 2; dir++)
            choir_lstm(xl + b * T * In, lens[b], In, H, wih + dir * G * In, whh + dir * G * H,
                       lb + dir * G, NULL, NULL, NULL, dir == 1, ref + dir * H, 2 * H, scr);
        assert_same(y + b * T * 2 * H, ref, (size_t)(T * 2 * H), "bilstm");
    }
    free(x), free(w), free(bias), free(got), free(want), free(wih), free(whh), free(lb), free(scr);
    free(y), free(ref), free(xl);
    fx_close(&f);
}

static void test_istft_naive(void **state) {
    (void)state;
    fx f = fx_open(0, 0);
    int n_fft = 16, hop = 4, nb = n_fft / 2 + 1;
    int64_t B = 2, F = 12, n_out = hop * (F - 1);
    float *P = rnd((size_t)(B * 2 * nb * F), 80);
    float *out = malloc((size_t)(B * n_out) * 4);
    int32_t frames[2] = {12, 7};
    assert_int_equal(choir_op_istft_magphase(f.s, P, B, F, frames, n_fft, hop, out), 0);
    /* torch.istft(center=True, hann periodic): overlap-add of windowed
     * inverse real DFTs, divided by the summed squared window, trimmed. */
    int64_t full = n_fft + hop * (F - 1);
    double *ola = malloc((size_t)full * sizeof(double)), *env = malloc((size_t)full * sizeof(double));
    double *want = malloc((size_t)(B * n_out) * sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        memset(ola, 0, (size_t)full * sizeof(double)), memset(env, 0, (size_t)full * sizeof(double));
        const float *Pb = P + b * 2 * nb * F;
        for (int64_t fr = 0; fr < frames[b]; fr++)
            for (int n = 0; n < n_fft; n++) {
                double yv = 0;
                for (int k = 0; k < nb; k++) {
                    double mag = exp(Pb[k * F + fr]), ph = sin(Pb[(nb + k) * F + fr]);
                    double re = mag * cos(ph), im = mag * sin(ph);
                    double wgt = (k == 0 || k == nb - 1) ? 1.0 : 2.0;
                    if (k == 0 || k == nb - 1) im = 0;
                    yv += wgt * (re * cos(2 * M_PI * k * n / n_fft) - im * sin(2 * M_PI * k * n / n_fft));
                }
                double w = 0.5 - 0.5 * cos(2 * M_PI * n / n_fft);
                ola[fr * hop + n] += w * yv / n_fft;
                env[fr * hop + n] += w * w;
            }
        for (int64_t i = 0; i < n_out; i++)
            want[b * n_out + i] = i < hop * (frames[b] - 1) ? ola[i + n_fft / 2] / env[i + n_fft / 2] : 0;
    }
    assert_near(out, want, (size_t)(B * n_out), 1e-5, "istft");
    free(P), free(out), free(ola), free(env), free(want);
    fx_close(&f);
}

/* --- the stream's contracts ---------------------------------------------------------------- */

static void test_sticky_errors_and_unsupported(void **state) {
    (void)state;
    fx f = fx_open(4096, 0);
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {0};
    assert_int_equal(choir_op_layer_norm(f.s, a, y, 2, 0, NULL, NULL, 1e-5f), CHOIR_EINVAL);
    /* Later operations do nothing and return the first error. */
    assert_int_equal(choir_op_add(f.s, a, a, y, 8), CHOIR_EINVAL);
    assert_true(y[0] == 0.0f);
    choir_err err = {0};
    assert_int_equal(choir_stream_status(f.s, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "layer_norm"));
    choir_stream_clear(f.s);
    assert_int_equal(choir_op_add(f.s, a, a, y, 8), 0);
    assert_true(y[7] == 16.0f);
    /* Working memory runs out with a named error. */
    assert_non_null(choir_stream_alloc(f.s, 3000, "first"));
    assert_null(choir_stream_alloc(f.s, 3000, "encoder rows"));
    assert_int_equal(choir_stream_status(f.s, &err), CHOIR_ENOMEM);
    assert_non_null(strstr(err.msg, "encoder rows"));
    choir_stream_clear(f.s);
    /* No CUDA here: a clear refusal, and the CPU refuses to record. */
    choir_backend *cu = choir_backend_cuda(NULL, &err);
#ifndef CHOIR_HAVE_CUDA
    assert_null(cu);
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "CUDA"));
    /* ... and no devices to list (the engine's GPUs: none) */
    choir_backend_device dev;
    assert_int_equal(choir_backend_device_count(), CHOIR_EUNSUPPORTED);
    err = (choir_err){0};
    assert_int_equal(choir_backend_device_query(0, &dev, &err), CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "built without CUDA"));
#else
    choir_backend_free(cu);
#endif
    assert_false(choir_backend_has_graphs(f.be));
    assert_int_equal(choir_stream_graph_begin(f.s, &err), CHOIR_EUNSUPPORTED);
    assert_int_equal(choir_stream_status(f.s, NULL), 0); /* not the stream's error */
    assert_true(choir_backend_is_host(f.be));
    assert_string_equal(choir_backend_name(f.be), "cpu");
    fx_close(&f);
}

/* Working memory carved from a caller's arena (the engine's batch arena),
 * its high-water mark seen there; kernel scratch carved too. */
static void test_arena_working_memory(void **state) {
    (void)state;
    fx f = fx_open(0, 0);
    choir_err err = {0};
    choir_arena *ar = choir_arena_create(1 << 20, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(ar);
    assert_int_equal(choir_stream_use_arena(f.s, ar, 64 << 10, &err), 0);
    size_t base = choir_arena_used(ar);
    assert_true(base >= 64 << 10);
    size_t mark = choir_stream_mark(f.s);
    float *x = choir_stream_floats(f.s, 1000, "x");
    assert_non_null(x);
    assert_true(choir_arena_used(ar) >= base + 4000);
    choir_stream_release(f.s, mark);
    assert_int_equal(choir_arena_used(ar), base);
    assert_true(choir_arena_high_water(ar) >= base + 4000);
    /* Too much scratch for what is left: refused, with the figures. */
    assert_int_equal(choir_stream_use_arena(f.s, ar, 2 << 20, &err), CHOIR_ENOMEM);
    assert_non_null(strstr(err.msg, "kernel scratch"));
    assert_int_equal(choir_stream_use_arena(f.s, NULL, 0, &err), 0);
    choir_arena_free(ar);
    fx_close(&f);
}

/* With the scratch its query functions ask for, the kernels allocate
 * nothing; without, they still give the same result and count misses. */
static void test_kernel_scratch(void **state) {
    (void)state;
    int64_t M = 300, K = 128, N = 200, Tq = 150, Tk = 150, Cin = 32, T = 400;
    float *x = rnd((size_t)(M * K), 90), *w = rnd((size_t)(N * K), 91);
    uint16_t *wh = malloc((size_t)(N * K) * 2);
    choir_f32_to_f16_n(w, wh, N * K);
    choir_weight W = {.kind = CHOIR_WEIGHT_F16, .rows = N, .cols = K, .data = wh};
    float *y1 = malloc((size_t)(M * N) * 4), *y2 = malloc((size_t)(M * N) * 4);
    float *q = rnd((size_t)(Tq * 64), 92), *cw = rnd((size_t)(Cin * Cin * 3), 93);
    float *att = malloc((size_t)(Tq * 64) * 4), *cv = malloc((size_t)(Cin * T) * 4);
    size_t need = choir_linear_scratch_bytes(M, &W);
    size_t an = choir_attention_scratch_bytes(Tq, Tk), cn = choir_conv1d_scratch_bytes(Cin, T, 3, 1, 1, 1, 1);
    assert_true(need > 0 && an > 0 && cn > 0);
    if (an > need) need = an;
    if (cn > need) need = cn;
    choir_attn a = {4, 0, 16, 0.25f, true, CHOIR_DTYPE_F32};
    for (int planned = 0; planned < 2; planned++) {
        fx f = fx_open(0, planned ? need : 0);
        choir_alloc_fail_after(0); /* resets the allocation count */
        choir_op_linear(f.s, x, M, &W, NULL, planned ? y2 : y1);
        choir_op_attention(f.s, q, 64, q, 64, q, 64, att, 64, Tq, Tk, &a, NULL);
        choir_op_conv1d(f.s, x, 1, Cin, T, cw, NULL, Cin, 3, 1, 1, 1, 1, cv);
        int64_t allocs = choir_alloc_fail_after(0);
        choir_stream_stats st;
        choir_stream_get_stats(f.s, &st);
        if (planned) {
            assert_int_equal(allocs, 0);
            assert_int_equal(st.scratch_misses, 0);
            assert_true((size_t)st.scratch_need <= need);
            assert_same(y2, y1, (size_t)(M * N), "linear with planned scratch");
        } else {
            assert_true(allocs >= 3);
            assert_int_equal(st.scratch_misses, 3);
            assert_true((size_t)st.scratch_need >= need);
        }
        fx_close(&f);
    }
    free(x), free(w), free(wh), free(y1), free(y2), free(q), free(cw), free(att), free(cv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_every_storage),
        cmocka_unit_test(test_attention_and_gqa),
        cmocka_unit_test(test_attention_slots_and_scatter),
        cmocka_unit_test(test_attention_ragged_and_transpose_lens),
        cmocka_unit_test(test_attention_bf16_kv),
        cmocka_unit_test(test_attention_all_bf16),
        cmocka_unit_test(test_linear_bf16_rows),
        cmocka_unit_test(test_linear_ex),
        cmocka_unit_test(test_swiglu_linear),
        cmocka_unit_test(test_gated_mlp),
        cmocka_unit_test(test_norm_linear),
        cmocka_unit_test(test_conv1d_bf16),
        cmocka_unit_test(test_rows_gather),
        cmocka_unit_test(test_argmax_rows),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_norms_naive),
        cmocka_unit_test(test_rope_naive),
        cmocka_unit_test(test_conv_and_lstm),
        cmocka_unit_test(test_istft_naive),
        cmocka_unit_test(test_sticky_errors_and_unsupported),
        cmocka_unit_test(test_arena_working_memory),
        cmocka_unit_test(test_kernel_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
