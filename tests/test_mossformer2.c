/* MossFormer2_SE_48K: the front end against the fixture, the loader's
 * handling of bad and renamed checkpoints, and the chunk stream's plumbing
 * (piece sizes, channels, first region equal to a single pass, memory held),
 * and the 8-bit conversion with its quantized 1x1 convolutions.
 * Runs the network only on short signals so it stays fast under ASan; the
 * full parity runs are tests/sh_mossformer2_parity.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/convert.h"
#include "choir/mossformer2.h"
#include "choir/randw.h"
#include "choir/safetensors.h"
#include "testutil.h"

#define FIX "mossformer2/mossformer2-se-48k"

static const char *model_dir;
static choir_mf2 *model;

static int setup(void **state) {
    (void)state;
    static char dir[1024];
    snprintf(dir, sizeof dir, "%s", tu_tmpfile("mf2"));
    choir_err err = {0};
    char manifest[1024], config[1024];
    snprintf(manifest, sizeof manifest, "%s", tu_fixture(FIX "/manifest.json"));
    snprintf(config, sizeof config, "%s", tu_fixture(FIX "/config.json"));
    if (choir_randw_write_checkpoint(manifest, config, dir, &err) != 0) {
        fprintf(stderr, "randw: %s\n", err.msg);
        return -1;
    }
    model_dir = dir;
    model = choir_mf2_load(dir, &err);
    if (!model) fprintf(stderr, "load: %s\n", err.msg);
    return model ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    choir_mf2_free(model);
    return 0;
}

/* audio_i16 of a fixture case as float in [-1, 1]. */
static float *case_input(choir_st *ref, int64_t *n) {
    const choir_st_tensor *t = choir_st_find(ref, "audio_i16");
    assert_non_null(t);
    *n = t->numel;
    float *x = malloc((size_t)*n * sizeof *x);
    assert_non_null(x);
    for (int64_t i = 0; i < *n; i++) x[i] = ((const int16_t *)t->data)[i] / 32768.0f;
    return x;
}

static void test_frames(void **state) {
    (void)state;
    assert_int_equal(choir_mf2_frames(1919), 0);
    assert_int_equal(choir_mf2_frames(1920), 1);
    assert_int_equal(choir_mf2_frames(144000), 371);
    assert_int_equal(choir_mf2_frames(100033), 256);
    assert_int_equal(choir_mf2_frames(192000), 496);
    assert_true(choir_mf2_segment_bytes(192000) > choir_mf2_segment_bytes(144000));
}

/* fbank and features of `short` and `short-odd` within the spec's float32
 * tolerance (5e-4 absolute; ~1e-4 expected). */
static void test_features_match_fixture(void **state) {
    (void)state;
    const char *cases[] = {FIX "/short/reference.safetensors", FIX "/short-odd/reference.safetensors"};
    for (int c = 0; c < 2; c++) {
        choir_err err = {0};
        choir_st *ref = choir_st_open(tu_fixture(cases[c]), &err);
        assert_non_null(ref);
        int64_t n;
        float *x = case_input(ref, &n);
        int64_t T = choir_mf2_frames(n);
        float *fb = malloc((size_t)(T * CHOIR_MF2_MELS) * sizeof(float));
        float *feat = malloc((size_t)(T * CHOIR_MF2_FEATS) * sizeof(float));
        assert_int_equal(choir_mf2_features(model, x, n, 0.0f, 0, fb, feat, &err), 0);
        const choir_st_tensor *rf = choir_st_find(ref, "fbank"), *rx = choir_st_find(ref, "features");
        assert_non_null(rf);
        assert_non_null(rx);
        assert_int_equal(rf->numel, T * CHOIR_MF2_MELS);
        assert_true(tu_max_abs_diff(fb, rf->data, (size_t)rf->numel) < 5e-4);
        assert_true(tu_max_abs_diff(feat, rx->data, (size_t)rx->numel) < 5e-4);
        /* A shifted input must not match: the comparison can fail. */
        assert_int_equal(choir_mf2_features(model, x + CHOIR_MF2_HOP, n - CHOIR_MF2_HOP, 0.0f, 0, fb, feat, &err), 0);
        assert_true(tu_max_abs_diff(feat, rx->data, (size_t)((T - 1) * CHOIR_MF2_FEATS)) > 1e-2);
        free(fb);
        free(feat);
        free(x);
        choir_st_close(ref);
    }
}

/* Digital silence gives ln(float eps) in every band without dither, and
 * seeded dither is reproducible and lifts it. */
static void test_silence_and_dither(void **state) {
    (void)state;
    const int64_t n = 1920 + 3 * 384;
    float *x = calloc((size_t)n, sizeof *x);
    float fa[4 * CHOIR_MF2_FEATS], fb[4 * CHOIR_MF2_FEATS], fc[4 * CHOIR_MF2_FEATS];
    choir_err err = {0};
    assert_int_equal(choir_mf2_features(model, x, n, 0.0f, 0, NULL, fa, &err), 0);
    for (int t = 0; t < 4; t++) {
        for (int b = 0; b < CHOIR_MF2_MELS; b++) assert_float_equal(fa[t * CHOIR_MF2_FEATS + b], -15.942385f, 1e-5);
        for (int b = CHOIR_MF2_MELS; b < CHOIR_MF2_FEATS; b++) assert_float_equal(fa[t * CHOIR_MF2_FEATS + b], 0.0f, 1e-6);
    }
    assert_int_equal(choir_mf2_features(model, x, n, 1.0f, 7, NULL, fb, &err), 0);
    assert_int_equal(choir_mf2_features(model, x, n, 1.0f, 7, NULL, fc, &err), 0);
    assert_memory_equal(fb, fc, sizeof fb);
    assert_true(fb[0] > -5.0f); /* unit-variance noise has real energy in every band */
    assert_int_equal(choir_mf2_features(model, x, n, 1.0f, 8, NULL, fc, &err), 0);
    assert_memory_not_equal(fb, fc, sizeof fb);
    free(x);
}

static void test_load_errors(void **state) {
    (void)state;
    choir_err err = {0};
    assert_null(choir_mf2_load(tu_tmpfile("no-such-model"), &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    assert_null(choir_mf2_load(NULL, &err));
    choir_mf2_free(NULL);

    /* A checkpoint missing one tensor names it; one with a wrong shape too. */
    char src[1024];
    snprintf(src, sizeof src, "%s/model.safetensors", model_dir);
    choir_st *st = choir_st_open(src, &err);
    assert_non_null(st);
    const char *victim = "mossformer.mdl.intra_mdl.mossformerM.fsmn.7.norm2.bias";
    for (int mode = 0; mode < 3; mode++) {
        choir_st_writer *w = choir_st_writer_create(&err);
        assert_non_null(w);
        for (int i = 0; i < choir_st_count(st); i++) {
            const choir_st_tensor *t = choir_st_at(st, i);
            char name[300];
            int is_victim = strcmp(t->name, victim) == 0;
            if (mode == 0 && is_victim) continue;
            int64_t shape[CHOIR_ST_MAX_DIMS];
            memcpy(shape, t->shape, sizeof shape);
            int ndim = t->ndim;
            if (mode == 1 && is_victim) shape[0] = 255;
            /* mode 2: every key with DataParallel's prefix must load. */
            snprintf(name, sizeof name, "%s%s", mode == 2 ? "module." : "", t->name);
            assert_int_equal(choir_st_writer_add_ref(w, name, t->dtype, ndim, shape, t->data, &err), 0);
        }
        const char *path = tu_tmpfile("edited.safetensors");
        assert_int_equal(choir_st_writer_save(w, path, &err), 0);
        choir_st_writer_free(w);
        err.code = 0;
        choir_mf2 *m = choir_mf2_load(path, &err);
        if (mode == 2) {
            assert_non_null(m);
            choir_mf2_free(m);
        } else {
            assert_null(m);
            assert_int_equal(err.code, mode == 0 ? CHOIR_ENOTFOUND : CHOIR_ESHAPE);
            assert_non_null(strstr(err.msg, victim));
        }
    }
    choir_st_close(st);
}

/* A segment shorter than one frame comes back with its own length. */
static void test_short_segment(void **state) {
    (void)state;
    float x[1000], y[1000];
    tu_fill_uniform(x, 1000, 3, -0.1f, 0.1f);
    choir_err err = {0};
    assert_int_equal(choir_mf2_enhance(model, x, 1000, y, NULL, &err), 0);
    double e = 0;
    for (int i = 0; i < 1000; i++) {
        assert_true(isfinite(y[i]));
        e += y[i] * y[i];
    }
    assert_true(e > 0);
    assert_int_equal(choir_mf2_enhance(model, x, 0, y, NULL, &err), 0);
}

typedef struct sink {
    float *y;
    int64_t next, frames;
    int channels, calls;
} sink;

static int sink_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    (void)err;
    sink *s = user;
    assert_int_equal(offset, s->next); /* in order, no gaps */
    assert_true(offset + frames <= s->frames);
    memcpy(s->y + offset * s->channels, out, (size_t)(frames * s->channels) * sizeof(float));
    s->next += frames;
    s->calls++;
    return 0;
}

/* Stereo 1.3 s in 0.5-s chunks with 0.1-s overlaps, pushed in odd pieces:
 * total out = total in; each channel equals the mono stream of that channel;
 * before the first overlap the output is exactly a single pass over chunk 0;
 * the one-shot form gives the same bytes; the memory held stays within the
 * stream's own estimate. */
static void test_stream(void **state) {
    (void)state;
    const int64_t n = 62400; /* 1.3 s */
    choir_mf2_params p;
    choir_mf2_default_params(&p);
    p.chunk_seconds = 0.5;
    p.overlap_seconds = 0.1;
    float *x = malloc((size_t)n * 2 * sizeof *x), *mono = malloc((size_t)n * sizeof *mono);
    float *y2 = calloc((size_t)n * 2, sizeof(float)), *y1 = calloc((size_t)n, sizeof(float));
    float *once = calloc((size_t)n * 2, sizeof(float));
    tu_fill_uniform(x, (size_t)n * 2, 11, -0.3f, 0.3f);
    choir_err err = {0};

    choir_mem_reset_peaks();
    int64_t base = choir_mem_current(CHOIR_MEM_COUNT);
    sink s2 = {.y = y2, .frames = n, .channels = 2};
    choir_mf2_stream *s = choir_mf2_stream_create(model, 2, &p, sink_emit, &s2, &err);
    assert_non_null(s);
    const int64_t pieces[] = {1, 4799, 17000, 3, 40597};
    int64_t at = 0;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(choir_mf2_stream_push(s, x + at * 2, pieces[i], &err), 0);
        at += pieces[i];
    }
    assert_int_equal(at, n);
    assert_int_equal(choir_mf2_stream_finish(s, &err), 0);
    assert_int_equal(choir_mf2_stream_chunks(s), 3);
    int64_t held = choir_mem_peak(CHOIR_MEM_COUNT) - base;
    choir_mf2_stream_free(s);
    assert_int_equal(s2.next, n);
    assert_true(s2.calls >= 3);
    assert_true(held <= choir_mf2_stream_bytes(2, &p));

    for (int64_t i = 0; i < n; i++) mono[i] = x[i * 2 + 1];
    sink s1 = {.y = y1, .frames = n, .channels = 1};
    s = choir_mf2_stream_create(model, 1, &p, sink_emit, &s1, &err);
    assert_non_null(s);
    assert_int_equal(choir_mf2_stream_push(s, mono, n, &err), 0);
    assert_int_equal(choir_mf2_stream_finish(s, &err), 0);
    choir_mf2_stream_free(s);
    for (int64_t i = 0; i < n; i++) assert_true(y1[i] == y2[i * 2 + 1]);

    /* Chunk 0 alone, then compare the part no crossfade touches. */
    const int64_t chunk = 24000, overlap = 4800;
    float *c0 = malloc((size_t)chunk * sizeof *c0);
    assert_int_equal(choir_mf2_enhance(model, mono, chunk, c0, &p, &err), 0);
    for (int64_t i = 0; i < chunk - overlap; i++) assert_true(c0[i] == y1[i]);
    /* Past the middle of the overlap chunk 1 weighs more, so the output
     * there is no longer chunk 0's. */
    int differs = 0;
    for (int64_t i = chunk - overlap + overlap / 2; i < chunk; i++) differs |= c0[i] != y1[i];
    assert_true(differs);

    assert_int_equal(choir_mf2_enhance_chunked(model, x, n, 2, once, &p, &err), 0);
    assert_memory_equal(once, y2, (size_t)n * 2 * sizeof(float));

    /* Bad params are refused with a message. */
    p.overlap_seconds = p.chunk_seconds;
    assert_null(choir_mf2_stream_create(model, 1, &p, sink_emit, &s1, &err));
    assert_int_equal(err.code, CHOIR_EINVAL);
    choir_mf2_stream_free(NULL);
    free(c0);
    free(x);
    free(mono);
    free(y1);
    free(y2);
    free(once);
}

/* Enhances `n` samples of x with the model at `dir` into a new buffer. */
static float *enhance_with(const char *dir, const float *x, int64_t n, size_t *weight_bytes) {
    choir_err err = {0};
    choir_mf2 *m = choir_mf2_load(dir, &err);
    if (!m) fprintf(stderr, "load %s: %s\n", dir, err.msg);
    assert_non_null(m);
    float *y = malloc((size_t)n * sizeof *y);
    assert_non_null(y);
    assert_int_equal(choir_mf2_enhance(m, x, n, y, NULL, &err), 0);
    *weight_bytes = choir_mf2_weight_bytes(m);
    choir_mf2_free(m);
    return y;
}

/* `choir convert --q-bits 8` stores the kernel-1 Conv1d weights [out, in, 1]
 * quantized as [out, in] next to the linears (the 180-wide encoder stays
 * float: 180 does not divide by 64); the loader multiplies with them
 * quantized, also when the checkpoint keeps DataParallel's "module." prefix,
 * and the output stays near the float model's. */
static void test_quantized_convs(void **state) {
    (void)state;
    const int64_t pointwise[3] = {1024, 512, 1}, encoder[3] = {512, 180, 1};
    const int64_t depthwise[3] = {512, 1, 17}, memory[4] = {256, 1, 39, 1};
    const char *name = "mossformer.conv1d_out.weight", *why = NULL;
    assert_true(choir_convert_should_quantize(CHOIR_CONVERT_MODEL_MOSSFORMER2, name, 3, pointwise, 64, &why));
    assert_false(choir_convert_should_quantize(CHOIR_CONVERT_MODEL_MOSSFORMER2, "mossformer.conv1d_encoder.weight",
                                               3, encoder, 64, &why));
    assert_false(choir_convert_should_quantize(CHOIR_CONVERT_MODEL_MOSSFORMER2, "x.conv.weight", 3, depthwise, 64, &why));
    assert_false(choir_convert_should_quantize(CHOIR_CONVERT_MODEL_MOSSFORMER2, "x.conv1.weight", 4, memory, 64, &why));
    assert_false(choir_convert_should_quantize(CHOIR_CONVERT_MODEL_GENERIC, name, 3, pointwise, 64, &why));

    choir_err err = {0};
    choir_convert_params p;
    choir_convert_default_params(&p);
    p.q_bits = 8;
    choir_convert_stats stats;
    char q8[1024], path[1100];
    snprintf(q8, sizeof q8, "%s", tu_tmpfile("mf2-q8"));
    assert_int_equal(choir_convert(model_dir, q8, &p, &stats, &err), 0);
    /* 24 x (5 FFConvM linears, FSMN linear, project, conv1, conv2) + 3 head convs + decoder */
    assert_int_equal(stats.quantized, 220);
    snprintf(path, sizeof path, "%s/model.safetensors", q8);
    choir_st *st = choir_st_open(path, &err);
    assert_non_null(st);
    const char *convs[] = {"mossformer.conv1d_out", "mossformer.output.0", "mossformer.output_gate.0",
                           "mossformer.conv1_decoder", "mossformer.mdl.intra_mdl.mossformerM.fsmn.0.conv1.0",
                           "mossformer.mdl.intra_mdl.mossformerM.fsmn.23.conv2"};
    const int64_t rows[] = {1024, 512, 512, 961, 256, 512}, cols[] = {512, 512, 512, 512, 512, 256};
    for (int i = 0; i < 6; i++) {
        char key[300];
        snprintf(key, sizeof key, "%s.weight", convs[i]);
        const choir_st_tensor *t = choir_st_find(st, key);
        assert_non_null(t);
        assert_int_equal(t->dtype, CHOIR_DTYPE_U32);
        assert_int_equal(t->ndim, 2);
        assert_int_equal(t->shape[0], rows[i]);
        assert_int_equal(t->shape[1], cols[i] / 4);
        snprintf(key, sizeof key, "%s.scales", convs[i]);
        assert_non_null(choir_st_find(st, key));
    }
    const choir_st_tensor *enc = choir_st_find(st, "mossformer.conv1d_encoder.weight");
    assert_non_null(enc);
    assert_int_equal(enc->dtype, CHOIR_DTYPE_F32);
    assert_null(choir_st_find(st, "mossformer.conv1d_encoder.scales"));

    /* The same checkpoint with every key "module."-prefixed, converted. */
    char mod[1024], q8mod[1024];
    snprintf(mod, sizeof mod, "%s", tu_tmpfile("mf2-module"));
    snprintf(q8mod, sizeof q8mod, "%s", tu_tmpfile("mf2-module-q8"));
    char src[1100];
    snprintf(src, sizeof src, "%s/model.safetensors", model_dir);
    choir_st *fst = choir_st_open(src, &err);
    assert_non_null(fst);
    choir_st_writer *w = choir_st_writer_create(&err);
    assert_non_null(w);
    for (int i = 0; i < choir_st_count(fst); i++) {
        const choir_st_tensor *t = choir_st_at(fst, i);
        char key[300];
        snprintf(key, sizeof key, "module.%s", t->name);
        assert_int_equal(choir_st_writer_add_ref(w, key, t->dtype, t->ndim, t->shape, t->data, &err), 0);
    }
    assert_int_equal(mkdir(mod, 0755), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", mod);
    assert_int_equal(choir_st_writer_save(w, path, &err), 0);
    choir_st_writer_free(w);
    choir_st_close(fst);
    size_t cfg_len = 0;
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    void *cfg = tu_read_file(path, &cfg_len);
    assert_non_null(cfg);
    snprintf(path, sizeof path, "%s/config.json", mod);
    assert_int_equal(tu_write_file(path, cfg, cfg_len), 0);
    free(cfg);
    assert_int_equal(choir_convert(mod, q8mod, &p, &stats, &err), 0);
    assert_int_equal(stats.quantized, 220);
    choir_st_close(st);

    /* Half a second of noisy tone: q8 within 15 % (rel-L2) of float (0.084
     * measured; random weights over 24 layers amplify rounding); the
     * prefixed conversion gives the same samples bit for bit. */
    const int64_t n = 24000;
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    tu_fill_uniform(x, (size_t)n, 11, -0.05f, 0.05f);
    for (int64_t i = 0; i < n; i++) x[i] += 0.3f * sinf(2.0f * 3.14159265f * 220.0f * (float)i / 48000.0f);
    size_t fbytes, qbytes, mbytes;
    float *yf = enhance_with(model_dir, x, n, &fbytes);
    float *yq = enhance_with(q8, x, n, &qbytes);
    float *ym = enhance_with(q8mod, x, n, &mbytes);
    double rel = tu_rel_l2(yq, yf, (size_t)n);
    printf("q8 vs float: rel-L2 %.4f, max|diff| %.4g; weights %.1f -> %.1f MB\n", rel,
           tu_max_abs_diff(yq, yf, (size_t)n), fbytes / 1e6, qbytes / 1e6);
    assert_true(rel > 0 && rel < 0.15);
    assert_true(qbytes < fbytes * 0.33);
    assert_int_equal(mbytes, qbytes);
    assert_memory_equal(ym, yq, (size_t)n * sizeof *yq);
    free(x);
    free(yf);
    free(yq);
    free(ym);
}

/* Allocation failures inside a pass are reported, never crash. */
static void test_alloc_failures(void **state) {
    (void)state;
    const int64_t n = 1920 + 10 * 384;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    tu_fill_uniform(x, (size_t)n, 5, -0.2f, 0.2f);
    choir_err err = {0};
    int failures = 0;
    for (int64_t k = 1; k < 40; k++) {
        choir_alloc_fail_after(k);
        int rc = choir_mf2_enhance(model, x, n, y, NULL, &err);
        choir_alloc_fail_after(0);
        if (rc != 0) {
            assert_int_equal(rc, CHOIR_ENOMEM);
            failures++;
        }
    }
    assert_true(failures > 3);
    free(x);
    free(y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames),
        cmocka_unit_test(test_features_match_fixture),
        cmocka_unit_test(test_silence_and_dither),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_short_segment),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_quantized_convs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
