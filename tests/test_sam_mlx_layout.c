// ctest: labels=slow timeout=600
/* SAM-Audio from mlx-community's layout. From the fixture's randw weights in
 * Meta's checkpoint layout, tools/sam_mlx_layout.py (python3) writes the
 * directory mlx-audio's converter produces: renamed tensors, convolutions
 * [out, k, in], transposed-conv weight_g [1, 1, in], Snake alpha [1, 1, C],
 * one summed bias per LSTM layer, align_masked_video.* dropped; and the same
 * quantized to 8 bits (group 64) as mlx-audio's predicate picks (every Linear
 * and Embedding whose width divides by 64, the watermark's message table
 * included).
 *  - Separation from the mlx copy equals, bit for bit, separation from the
 *    checkpoint with align_masked_video.gate set to 0 (mlx drops the
 *    zero-video term; a zero gate removes it from the checkpoint side);
 *    with the checkpoint's own gate it differs.
 *  - The quantized copy loads with quantized DiT matrices, a dequantized
 *    message table within a quantization step of the float one, and
 *    separates close to the float copy.
 *  - fp16 and bf16 copies of the mlx copy (as mlx-community's float16 /
 *    bfloat16 repositories hold them: every float tensor in that dtype,
 *    rounded to nearest even; written here by write_cast) load, the DiT's matrices kept in
 *    their stored dtype, and give one network evaluation (a ragged batch of
 *    two items) within a stated bound of the f32 copy's: the weights' own
 *    rounding (2^-11 relative for fp16, 2^-8 for bf16) carried through the
 *    network, not a layout mistake, which would be of order 1.
 *  - A missing tensor, a convolution left in PyTorch's shape, a wrong element
 *    count and a quantized matrix without its biases are refused with an
 *    error naming the tensor. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/quant.h"
#include "choir/safetensors.h"
#include "choir/sam_audio.h"
#include "models/sam_audio/sam_internal.h"
#include "testutil.h"

static char g_ck[4096], g_zero[4096], g_mlx[4096], g_q8[4096], g_f16[4096], g_bf16[4096], g_t5[4200];

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* dst_dir: src_dir's config.json, and its model.safetensors with `name`
 * left out (new_shape NULL), or given new_shape (its element count at most
 * the stored one's), or (zero) filled with zeros. */
static int write_copy(const char *src_dir, const char *dst_dir, const char *name, int ndim,
                      const int64_t *new_shape, int zero) {
    char path[4400];
    choir_err err = {0};
    if (run("mkdir -p '%s' && cp '%s/config.json' '%s/'", dst_dir, src_dir, dst_dir) != 0) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", src_dir);
    choir_st *st = choir_st_open(path, &err);
    if (!st) return -1;
    choir_st_writer *w = choir_st_writer_create(&err);
    void *zeros = NULL;
    int rc = 0;
    for (int i = 0; i < choir_st_count(st) && rc == 0; i++) {
        const choir_st_tensor *t = choir_st_at(st, i);
        int nd = t->ndim;
        const int64_t *shape = t->shape;
        const void *data = t->data;
        if (strcmp(t->name, name) == 0) {
            if (zero) {
                zeros = calloc(1, t->nbytes);
                data = zeros;
            } else if (!new_shape) {
                continue;
            } else {
                nd = ndim;
                shape = new_shape;
            }
        }
        rc = choir_st_writer_add_ref(w, t->name, t->dtype, nd, shape, data, &err);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dst_dir);
    if (rc == 0) rc = choir_st_writer_save(w, path, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    choir_st_writer_free(w);
    choir_st_close(st);
    free(zeros);
    return rc;
}

/* dst_dir: src_dir's config.json, and its model.safetensors with every
 * f32 tensor stored as `dtype` (F16 or BF16, rounded to nearest even). */
static int write_cast(const char *src_dir, const char *dst_dir, choir_dtype dtype) {
    char path[4400];
    choir_err err = {0};
    if (run("mkdir -p '%s' && cp '%s/config.json' '%s/'", dst_dir, src_dir, dst_dir) != 0) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", src_dir);
    choir_st *st = choir_st_open(path, &err);
    if (!st) return -1;
    choir_st_writer *w = choir_st_writer_create(&err);
    int n = choir_st_count(st), rc = 0;
    uint16_t **half = calloc((size_t)n, sizeof *half);
    for (int i = 0; i < n && rc == 0; i++) {
        const choir_st_tensor *t = choir_st_at(st, i);
        if (t->dtype != CHOIR_DTYPE_F32) {
            rc = choir_st_writer_add_ref(w, t->name, t->dtype, t->ndim, t->shape, t->data, &err);
            continue;
        }
        half[i] = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(uint16_t));
        if (dtype == CHOIR_DTYPE_F16) choir_f32_to_f16_n(t->data, half[i], t->numel);
        else choir_f32_to_bf16_n(t->data, half[i], t->numel);
        rc = choir_st_writer_add_ref(w, t->name, dtype, t->ndim, t->shape, half[i], &err);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dst_dir);
    if (rc == 0) rc = choir_st_writer_save(w, path, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    choir_st_writer_free(w);
    choir_st_close(st);
    for (int i = 0; i < n; i++) free(half[i]);
    free(half);
    return rc;
}

static int setup(void **state) {
    (void)state;
    choir_err err = {0};
    const char *tmp = tu_tmpdir();
    snprintf(g_ck, sizeof g_ck, "%s/ck", tmp);
    snprintf(g_zero, sizeof g_zero, "%s/ck-gate0", tmp);
    snprintf(g_mlx, sizeof g_mlx, "%s/mlx", tmp);
    snprintf(g_q8, sizeof g_q8, "%s/mlx-q8", tmp);
    snprintf(g_f16, sizeof g_f16, "%s/mlx-fp16", tmp);
    snprintf(g_bf16, sizeof g_bf16, "%s/mlx-bf16", tmp);
    snprintf(g_t5, sizeof g_t5, "%s/t5", g_ck);
    if (tu_sam_tiny_dir(g_ck, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    if (write_copy(g_ck, g_zero, "align_masked_video.gate", 0, NULL, 1) != 0) return -1;
    const char *tool = CHOIR_SOURCE_DIR "/tools/sam_mlx_layout.py";
    if (run("python3 '%s' '%s' '%s' >/dev/null", tool, g_ck, g_mlx) != 0 ||
        run("python3 '%s' '%s' '%s' --q-bits 8 >/dev/null", tool, g_ck, g_q8) != 0) {
        fprintf(stderr, "tools/sam_mlx_layout.py failed\n");
        return -1;
    }
    if (write_cast(g_mlx, g_f16, CHOIR_DTYPE_F16) != 0 || write_cast(g_mlx, g_bf16, CHOIR_DTYPE_BF16) != 0) return -1;
    return 0;
}

static choir_sam *load(const char *dir) {
    choir_err err = {0};
    choir_sam *m = choir_sam_load(dir, g_t5, &err);
    if (!m) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(m);
    return m;
}

#define N_SAMPLES 9000

/* Target and residual [N_SAMPLES] each of one fast separation with a span
 * anchor (Euler, 2 steps). */
static void separate(choir_sam *m, float *t, float *r) {
    static float x[N_SAMPLES];
    tu_fill_uniform(x, N_SAMPLES, 7, -0.5f, 0.5f);
    choir_sam_params p;
    choir_sam_default_params(&p);
    p.method = CHOIR_SAM_EULER;
    p.steps = 2;
    choir_sam_anchor a = {.positive = 1, .start_s = 0.02, .end_s = 0.1};
    choir_err err = {0};
    int rc = choir_sam_separate(m, x, N_SAMPLES, "man speaking", &a, 1, &p, t, r, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
}

static float g_t[N_SAMPLES], g_r[N_SAMPLES]; /* the float mlx copy's separation */
static choir_sam *g_float;                     /* the float mlx copy, loaded once */

static choir_sam *float_model(void) {
    if (!g_float) {
        g_float = load(g_mlx);
        separate(g_float, g_t, g_r);
    }
    return g_float;
}

static int teardown(void **state) {
    (void)state;
    choir_sam_free(g_float);
    return 0;
}

static void test_same_separation(void **state) {
    (void)state;
    static float t[N_SAMPLES], r[N_SAMPLES], t0[N_SAMPLES], r0[N_SAMPLES];
    choir_sam *mlx = float_model();
    assert_true(mlx->mlx);
    assert_true(mlx->codec.has_wm);

    choir_sam *ck = load(g_zero);
    assert_false(ck->mlx);
    separate(ck, t, r);
    choir_sam_free(ck);
    assert_memory_equal(g_t, t, sizeof t);
    assert_memory_equal(g_r, r, sizeof r);

    /* The checkpoint's own gate adds the zero-video term: not the same. */
    ck = load(g_ck);
    separate(ck, t0, r0);
    choir_sam_free(ck);
    double d = tu_rel_l2(t0, t, N_SAMPLES);
    fprintf(stderr, "video term: target moves %.3g (rel L2)\n", d);
    assert_true(d > 1e-4);
}

static void test_quantized(void **state) {
    (void)state;
    static float t[N_SAMPLES], r[N_SAMPLES];
    choir_sam *f = float_model(), *q = load(g_q8);
    /* mlx-audio quantizes all Linears of width 64 (wq, t_block, output) and
     * the message Embedding [32, 128]; not w2 (176 wide) or proj (48). */
    assert_int_equal(q->dit.layers[0].wq.kind, CHOIR_WEIGHT_QUANT);
    assert_int_equal(q->dit.t_block.kind, CHOIR_WEIGHT_QUANT);
    assert_int_equal(q->dit.output.kind, CHOIR_WEIGHT_QUANT);
    assert_int_not_equal(q->dit.layers[0].w2.kind, CHOIR_WEIGHT_QUANT);
    assert_int_not_equal(q->dit.proj.kind, CHOIR_WEIGHT_QUANT);
    double worst = 0;
    for (int row = 0; row < 2 * CHOIR_SAM_WM_BITS; row++) {
        const float *a = f->codec.msg_emb + row * 128, *b = q->codec.msg_emb + row * 128;
        for (int g = 0; g < 2; g++) {
            float mn = a[g * 64], mx = a[g * 64];
            for (int i = 1; i < 64; i++) mn = fminf(mn, a[g * 64 + i]), mx = fmaxf(mx, a[g * 64 + i]);
            /* MLX's scale is snapped so that 0 is a code: up to one step
             * off at the far edge of a group, half a step elsewhere. */
            double step = (mx - mn) / 255.0;
            for (int i = 0; i < 64; i++) {
                double e = fabs((double)a[g * 64 + i] - b[g * 64 + i]);
                assert_true(e <= step * 1.01 + 1e-7);
                if (e / step > worst) worst = e / step;
            }
        }
    }
    /* The tool's quantizer is MLX's: the same codes, scales and biases as
     * choir_quantize_mlx for every quantized matrix of the file. */
    char path[4300];
    choir_err err = {0};
    snprintf(path, sizeof path, "%s/model.safetensors", g_mlx);
    choir_st *fs = choir_st_open(path, &err);
    snprintf(path, sizeof path, "%s/model.safetensors", g_q8);
    choir_st *qs = choir_st_open(path, &err);
    assert_non_null(fs);
    assert_non_null(qs);
    int n_quant = 0;
    for (int i = 0; i < choir_st_count(qs); i++) {
        const choir_st_tensor *sc = choir_st_at(qs, i);
        size_t len = strlen(sc->name);
        if (len < 7 || strcmp(sc->name + len - 7, ".scales") != 0) continue;
        char base[300], wn[320], bn[320];
        snprintf(base, sizeof base, "%.*s", (int)(len - 7), sc->name);
        snprintf(wn, sizeof wn, "%s.weight", base);
        snprintf(bn, sizeof bn, "%s.biases", base);
        const choir_st_tensor *w = choir_st_find(fs, wn), *pw = choir_st_find(qs, wn), *bi = choir_st_find(qs, bn);
        assert_non_null(w);
        assert_non_null(pw);
        assert_non_null(bi);
        int64_t rows = w->shape[0], cols = w->shape[1];
        uint32_t *packed = malloc(pw->nbytes);
        float *s2 = malloc(sc->nbytes), *b2 = malloc(bi->nbytes);
        assert_int_equal(choir_quantize_mlx(w->data, rows, cols, 8, 64, CHOIR_DTYPE_F32, packed, s2, b2, &err), 0);
        assert_memory_equal(packed, pw->data, pw->nbytes);
        assert_memory_equal(s2, sc->data, sc->nbytes);
        assert_memory_equal(b2, bi->data, bi->nbytes);
        free(packed), free(s2), free(b2);
        n_quant++;
    }
    /* per layer wq wk wv wo (x2), w1 w3; y/t embedders' 64-wide; t_block,
     * output, the message table */
    fprintf(stderr, "q8: %d quantized tensors equal choir_quantize_mlx's\n", n_quant);
    assert_int_equal(n_quant, 2 * 10 + 3 + 1 + 1 + 1 + 1);
    choir_st_close(fs);
    choir_st_close(qs);

    separate(q, t, r);
    choir_sam_free(q);
    double dt = tu_rel_l2(t, g_t, N_SAMPLES), dr = tu_rel_l2(r, g_r, N_SAMPLES);
    fprintf(stderr, "q8: message table within %.3f steps; target %.3g, residual %.3g (rel L2)\n", worst, dt,
            dr);
    assert_true(dt < 0.5 && dr < 0.5);
    assert_true(dt > 0); /* it did run quantized */
}

/* One evaluation of a ragged batch (29 and 47 frames, texts of 3 and 5
 * rows, one item anchored) on m: v [(29 + 47), 2C]. The inputs are the same
 * for every model (fixed seeds). */
static void evaluate(choir_sam *m, float *v) {
    enum { T1 = 29, T2 = 47, L1 = 3, L2 = 5 };
    int64_t C = choir_sam_channels(m), Dt = choir_sam_text_dim(m);
    float *f = malloc((size_t)((T1 + T2) * C) * 4), *x = malloc((size_t)((T1 + T2) * 2 * C) * 4);
    float *text = malloc((size_t)((L1 + L2) * Dt) * 4);
    tu_fill_uniform(f, (size_t)((T1 + T2) * C), 3, -2, 2);
    tu_fill_uniform(x, (size_t)((T1 + T2) * 2 * C), 4, -2, 2);
    tu_fill_uniform(text, (size_t)((L1 + L2) * Dt), 5, -1, 1);
    int32_t ids[3], align[T2];
    choir_sam_anchor a = {.positive = 1, .start_s = 0.05, .end_s = 0.2};
    choir_sam_anchor_tables(m, &a, 1, T2, T2, ids, align);
    choir_sam_item it[2] = {
        {.frames = T1, .valid_frames = T1, .features = f, .text = text, .text_len = L1},
        {.frames = T2, .valid_frames = T2, .features = f + T1 * C, .text = text + L1 * Dt, .text_len = L2,
         .anchor_ids = ids, .n_anchor_ids = 3, .anchor_alignment = align}};
    float t[2] = {0.25f, 0.75f};
    const float *xs[2] = {x, x + T1 * 2 * C};
    float *vs[2] = {v, v + T1 * 2 * C};
    choir_err err = {0};
    int rc = choir_sam_velocity(m, it, 2, t, xs, vs, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    free(f), free(x), free(text);
}

static void test_half_precision(void **state) {
    (void)state;
    choir_sam *f = float_model();
    int64_t n = (29 + 47) * 2 * (int64_t)choir_sam_channels(f);
    float *v = malloc((size_t)n * 4), *vh = malloc((size_t)n * 4);
    evaluate(f, v);
    static const struct {
        const char *name;
        const char **dir;
        choir_weight_kind kind;
        double unit, bound;
    } cases[] = {
        /* bounds: 8 units of the dtype's rounding; measured 4.95e-4 (fp16) and
         * 4.0e-3 (bf16) on this model, one unit each */
        {"fp16", NULL, CHOIR_WEIGHT_F16, 0x1p-11, 8 * 0x1p-11},
        {"bf16", NULL, CHOIR_WEIGHT_BF16, 0x1p-8, 8 * 0x1p-8},
    };
    const char *dirs[2] = {g_f16, g_bf16};
    double err[2];
    for (int c = 0; c < 2; c++) {
        choir_sam *h = load(dirs[c]);
        assert_true(h->mlx);
        /* the DiT's matrices stay in the stored dtype (read as such; the
         * codec's convolutions are widened to f32 at load, so on this tiny
         * model the held bytes drop only a little) */
        assert_int_equal(h->dit.layers[0].wq.kind, cases[c].kind);
        assert_int_equal(h->dit.layers[1].w2.kind, cases[c].kind);
        assert_int_equal(h->dit.proj.kind, cases[c].kind);
        assert_true(choir_sam_weight_bytes(h) < choir_sam_weight_bytes(f));
        evaluate(h, vh);
        err[c] = tu_rel_l2(vh, v, (size_t)n);
        fprintf(stderr, "%s: one evaluation within %.3g of f32 (rel L2; %.1f units of %s rounding, bound %.3g); "
                "weights %.2f MB, f32 %.2f MB\n",
                cases[c].name, err[c], err[c] / cases[c].unit, cases[c].name, cases[c].bound,
                choir_sam_weight_bytes(h) / 1e6, choir_sam_weight_bytes(f) / 1e6);
        assert_true(err[c] < cases[c].bound);
        assert_true(err[c] > 0); /* it did run in the stored dtype */
        choir_sam_free(h);
    }
    assert_true(err[0] < err[1]); /* fp16 keeps 3 more bits */
    free(v), free(vh);
}

static void expect_refused(const char *src, const char *name, int ndim, const int64_t *shape, int code,
                           const char *needle1, const char *needle2) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/broken", tu_tmpdir());
    assert_int_equal(write_copy(src, dir, name, ndim, shape, 0), 0);
    choir_err err = {0};
    choir_sam *m = choir_sam_load(dir, g_t5, &err);
    fprintf(stderr, "%s: %s\n", name, err.msg);
    assert_null(m);
    assert_int_equal(err.code, code);
    assert_non_null(strstr(err.msg, needle1));
    if (needle2) assert_non_null(strstr(err.msg, needle2));
}

static void test_broken(void **state) {
    (void)state;
    const char *up = "audio_codec.decoder.blocks.0.block_1.weight_v";
    /* missing: named in both namings */
    expect_refused(g_mlx, up, 0, NULL, CHOIR_ENOTFOUND, up, "audio_codec.decoder.model.1.block.1.weight_v");
    /* the transposed conv left in PyTorch's [in, out, k]: same size, refused */
    static const int64_t pt[3] = {1536, 768, 20};
    expect_refused(g_mlx, up, 3, pt, CHOIR_ESHAPE, "[1536, 768, 20]", "[768, 20, 1536]");
    /* a conv of the encoder likewise ([out, in, k] for [out, k, in]) */
    static const int64_t enc[3] = {16, 8, 4};
    expect_refused(g_mlx, "audio_codec.encoder.blocks.0.conv.weight_v", 3, enc, CHOIR_ESHAPE,
                   "audio_codec.encoder.blocks.0.conv.weight_v", "[16, 8, 4]");
    /* the summed LSTM bias missing */
    expect_refused(g_mlx, "audio_codec.decoder.wm_model.encoder_block.post_0.lstm.layers.1.bias", 0, NULL,
                   CHOIR_ENOTFOUND, "post_0.lstm.layers.1.bias", "bias_ih_l1");
    /* a wrong element count */
    static const int64_t half[1] = {8};
    expect_refused(g_mlx, "transformer.layers.1.attention.q_norm.weight", 1, half, CHOIR_ESHAPE,
                   "transformer.layers.1.attention.q_norm.weight", "8 elements");
    /* a quantized matrix without its biases */
    expect_refused(g_q8, "transformer.layers.0.attention.wq.biases", 0, NULL, CHOIR_ENOTFOUND,
                   "transformer.layers.0.attention.wq", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_separation),
        cmocka_unit_test(test_quantized),
        cmocka_unit_test(test_half_precision),
        cmocka_unit_test(test_broken),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
