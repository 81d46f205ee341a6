/* Silero VAD: probabilities against the official model (onnxruntime) on real
 * speech, batched streams against single ones, stream reset, segments on real
 * speech, silence and noise, and bad model files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/safetensors.h"
#include "choir/silero.h"
#include "testutil.h"

#define MODEL_ST "real/vad/silero_vad_16k.safetensors"
#define PROB_TOL 1e-3

static choir_silero *g_model;
static cJSON *g_reference; /* reference_probs.json's "probs": {file: [p...]} */

static int setup(void **state) {
    (void)state;
    choir_err err = {0};
    g_model = choir_silero_load(tu_fixture(MODEL_ST), &err);
    if (!g_model) {
        fprintf(stderr, "load: %s\n", err.msg);
        return -1;
    }
    size_t len = 0;
    char *text = tu_read_file(tu_fixture("real/vad/reference_probs.json"), &len);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root) return -1;
    g_reference = cJSON_DetachItemFromObject(root, "probs");
    cJSON_Delete(root);
    return g_reference ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    choir_silero_free(g_model);
    cJSON_Delete(g_reference);
    return 0;
}

/* The fixture path of a recording named in reference_probs.json. */
static const char *audio_path(const char *name) {
    static char rel[512];
    snprintf(rel, sizeof rel, "real/speech/%s%s", strncmp(name, "jfk", 3) == 0 ? "" : "librivox/", name);
    return tu_fixture(rel);
}

static void decode(const char *name, choir_audio *a) {
    choir_decode_opts opts = {.target_rate = CHOIR_SILERO_RATE, .mono = 1, .max_frames = 0};
    choir_err err = {0};
    int rc = choir_audio_decode_file(audio_path(name), &opts, a, &err);
    if (rc) fprintf(stderr, "%s: %s\n", name, err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(a->rate, CHOIR_SILERO_RATE);
    assert_int_equal(a->channels, 1);
}

static void test_probs_match_onnxruntime(void **state) {
    (void)state;
    int files = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, g_reference) {
        choir_audio a = {0};
        decode(item->string, &a);
        float *probs = NULL;
        int64_t n = 0;
        choir_err err = {0};
        assert_int_equal(choir_silero_file_probs(g_model, a.samples, a.frames, false, &probs, &n, &err), 0);
        assert_int_equal(n, cJSON_GetArraySize(item));
        double worst = 0;
        int64_t i = 0;
        const cJSON *ref;
        cJSON_ArrayForEach(ref, item) {
            double d = fabs(probs[i] - ref->valuedouble);
            if (d > worst) worst = d;
            i++;
        }
        printf("%-48s %4lld chunks, max |diff| %.2e\n", item->string, (long long)n, worst);
        assert_true(worst <= PROB_TOL);
        choir_free(probs);
        choir_audio_clear(&a);
        files++;
    }
    assert_int_equal(files, 6);
}

/* All recordings as concurrent streams of one batch, each leaving the batch
 * when it runs out, must give what each gives alone. */
static void test_batch_equals_single(void **state) {
    (void)state;
    enum { N = 6 };
    choir_audio audio[N];
    float *single[N];
    int64_t chunks[N], most = 0;
    choir_silero_state *st[N];
    int k = 0;
    const cJSON *item;
    choir_err err = {0};
    cJSON_ArrayForEach(item, g_reference) {
        assert_true(k < N);
        memset(&audio[k], 0, sizeof audio[k]);
        decode(item->string, &audio[k]);
        assert_int_equal(choir_silero_file_probs(g_model, audio[k].samples, audio[k].frames, false, &single[k],
                                                 &chunks[k], &err), 0);
        if (chunks[k] > most) most = chunks[k];
        st[k] = choir_silero_state_create(&err);
        assert_non_null(st[k]);
        k++;
    }
    assert_int_equal(k, N);
    void *scratch = choir_alloc(CHOIR_MEM_ACTIVATIONS, choir_silero_scratch_bytes(N));
    assert_non_null(scratch);
    double worst = 0;
    for (int64_t c = 0; c < most; c++) {
        choir_silero_state *bs[N];
        const float *bc[N];
        int idx[N], n = 0;
        /* Streams join in reverse order, so their positions in the batch change. */
        for (int s = N - 1; s >= 0; s--) {
            if (c >= chunks[s]) continue;
            bs[n] = st[s];
            bc[n] = audio[s].samples + c * CHOIR_SILERO_CHUNK;
            idx[n++] = s;
        }
        float p[N];
        assert_int_equal(choir_silero_process(g_model, bs, bc, n, p, (c & 1) ? scratch : NULL, &err), 0);
        for (int j = 0; j < n; j++) {
            double d = fabs(p[j] - single[idx[j]][c]);
            if (d > worst) worst = d;
        }
    }
    printf("batch of %d vs single: max |diff| %.2e\n", N, worst);
    assert_true(worst <= 1e-5);
    choir_free(scratch);
    for (int s = 0; s < N; s++) {
        choir_silero_state_free(st[s]);
        choir_free(single[s]);
        choir_audio_clear(&audio[s]);
    }
}

static void test_reset_restarts_stream(void **state) {
    (void)state;
    choir_audio a = {0};
    decode("jfk.wav", &a);
    choir_err err = {0};
    choir_silero_state *s = choir_silero_state_create(&err);
    assert_non_null(s);
    enum { STEPS = 40 };
    float first[STEPS], again[STEPS];
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < STEPS; c++) {
            const float *chunk = a.samples + (int64_t)c * CHOIR_SILERO_CHUNK;
            assert_int_equal(choir_silero_process(g_model, &s, &chunk, 1, pass ? &again[c] : &first[c], NULL, &err), 0);
        }
        choir_silero_state_reset(s);
    }
    assert_memory_equal(first, again, sizeof first);
    /* Without the reset the carried state changes the result. */
    float carried;
    const float *chunk = a.samples + 10 * CHOIR_SILERO_CHUNK;
    for (int c = 0; c < 10; c++) {
        const float *x = a.samples + (int64_t)(30 + c) * CHOIR_SILERO_CHUNK;
        assert_int_equal(choir_silero_process(g_model, &s, &x, 1, &carried, NULL, &err), 0);
    }
    assert_int_equal(choir_silero_process(g_model, &s, &chunk, 1, &carried, NULL, &err), 0);
    assert_true(fabsf(carried - first[10]) > 1e-4f);
    choir_silero_state_free(s);
    choir_silero_state_free(NULL);
    choir_audio_clear(&a);
}

/* jfk.wav: speech from about 0.35 s to about 10.55 s with pauses between
 * phrases (and a short blip at the very end). The segments must start exactly
 * one padding before the first chunk the reference calls speech, end at most
 * a few chunks after the last chunk of sustained speech (the end of the last
 * run of four or more chunks at 0.5 or more), and equal the segments of the reference probabilities. */
static void test_segments_cover_speech(void **state) {
    (void)state;
    choir_audio a = {0};
    decode("jfk.wav", &a);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(g_reference, "jfk.wav");
    int n_ref = cJSON_GetArraySize(ref);
    float *ref_probs = calloc((size_t)n_ref, sizeof *ref_probs);
    assert_non_null(ref_probs);
    int first = -1, last = -1, run = 0, i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, ref) {
        ref_probs[i] = (float)p->valuedouble;
        run = ref_probs[i] >= 0.5f ? run + 1 : 0;
        if (run == 1 && first < 0) first = i;
        if (run >= 4) last = i;
        i++;
    }
    assert_true(first > 0 && last > first);
    choir_vad_params params = choir_vad_default_params();
    choir_vad_segment *segs = NULL, *ref_segs = NULL;
    int64_t n = 0, n_ref_segs = 0;
    choir_err err = {0};
    assert_int_equal(choir_silero_detect(g_model, a.samples, a.frames, &params, &segs, &n, &err), 0);
    assert_true(n >= 1);
    const int64_t pad = 480, chunk = CHOIR_SILERO_CHUNK;
    printf("jfk.wav: %lld segments:", (long long)n);
    for (int64_t k = 0; k < n; k++) printf(" [%.3f, %.3f]", segs[k].start / 16000.0, segs[k].end / 16000.0);
    printf("\n");
    assert_int_equal(segs[0].start, first * chunk - pad);
    assert_true(segs[n - 1].end >= (int64_t)(last + 1) * chunk);
    assert_true(segs[n - 1].end <= (int64_t)(last + 1) * chunk + 4 * chunk + pad);
    int64_t covered = 0;
    for (int64_t k = 0; k < n; k++) {
        assert_true(segs[k].start < segs[k].end);
        if (k) assert_true(segs[k].start >= segs[k - 1].end);
        covered += segs[k].end - segs[k].start;
    }
    /* Most of the span from first to last speech chunk is speech. */
    assert_true(covered >= (int64_t)(0.7 * (last + 1 - first) * chunk));

    /* The reference scores only whole chunks; the tail chunk is silence here. */
    assert_int_equal(choir_vad_segments(ref_probs, n_ref, a.frames, &params, &ref_segs, &n_ref_segs, &err), 0);
    assert_int_equal(n_ref_segs, n);
    assert_memory_equal(ref_segs, segs, (size_t)n * sizeof *segs);
    choir_free(ref_segs);
    choir_free(segs);
    free(ref_probs);
    choir_audio_clear(&a);
}

static void test_silence_and_noise_give_nothing(void **state) {
    (void)state;
    const int64_t n = 5 * CHOIR_SILERO_RATE + 100;
    float *x = calloc((size_t)n, sizeof *x);
    assert_non_null(x);
    choir_vad_segment *segs = NULL;
    int64_t count = -1;
    choir_err err = {0};
    assert_int_equal(choir_silero_detect(g_model, x, n, NULL, &segs, &count, &err), 0);
    assert_int_equal(count, 0);
    assert_null(segs);
    const float levels[] = {0.01f, 0.1f, 0.5f};
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        tu_fill_uniform(x, (size_t)n, 7 + l, -levels[l], levels[l]);
        float *probs = NULL;
        int64_t chunks = 0;
        assert_int_equal(choir_silero_file_probs(g_model, x, n, true, &probs, &chunks, &err), 0);
        float top = 0;
        for (int64_t c = 0; c < chunks; c++) top = fmaxf(top, probs[c]);
        printf("white noise +-%.2f: max prob %.4f\n", (double)levels[l], (double)top);
        assert_int_equal(choir_vad_segments(probs, chunks, n, NULL, &segs, &count, &err), 0);
        assert_int_equal(count, 0);
        choir_free(probs);
    }
    /* A steady 440 Hz tone is not speech either. */
    for (int64_t i = 0; i < n; i++) x[i] = 0.3f * sinf(2.0f * (float)M_PI * 440.0f * (float)i / 16000.0f);
    assert_int_equal(choir_silero_detect(g_model, x, n, NULL, &segs, &count, &err), 0);
    assert_int_equal(count, 0);
    free(x);
}

static void test_bad_models(void **state) {
    (void)state;
    choir_err err = {0};
    assert_null(choir_silero_load(tu_fixture("real/vad/does-not-exist"), &err));
    assert_int_not_equal(err.code, 0);
    assert_null(choir_silero_load(NULL, &err));
    assert_int_equal(err.code, CHOIR_EINVAL);

    /* A checkpoint whose conv2 has the wrong shape is refused by name. */
    choir_st *ref = choir_st_open(tu_fixture(MODEL_ST), &err);
    assert_non_null(ref);
    choir_st_writer *w = choir_st_writer_create(&err);
    for (int i = 0; i < choir_st_count(ref); i++) {
        const choir_st_tensor *t = choir_st_at(ref, i);
        int64_t shape[CHOIR_ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        int ndim = t->ndim;
        if (strcmp(t->name, "conv2.weight") == 0) shape[0] = 32;
        assert_int_equal(choir_st_writer_add_ref(w, t->name, t->dtype, ndim, shape, t->data, &err), 0);
    }
    assert_int_equal(choir_st_writer_save(w, tu_tmpfile("bad.safetensors"), &err), 0);
    choir_st_writer_free(w);
    choir_st_close(ref);
    assert_null(choir_silero_load(tu_tmpfile("bad.safetensors"), &err));
    assert_int_equal(err.code, CHOIR_ESHAPE);
    assert_non_null(strstr(err.msg, "conv2.weight"));

    /* A config.json for another model is refused. */
    const char *dir = tu_tmpfile("wrong-config");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/model.safetensors'", dir, tu_fixture(MODEL_ST), dir);
    assert_int_equal(system(cmd), 0);
    char cfg[1200];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    const char *text = "{\"model_type\": \"whisper\"}";
    assert_int_equal(tu_write_file(cfg, text, strlen(text)), 0);
    assert_null(choir_silero_load(dir, &err));
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
    text = "{\"model_type\": \"silero_vad\", \"sample_rate\": 16000}";
    assert_int_equal(tu_write_file(cfg, text, strlen(text)), 0);
    choir_silero *m = choir_silero_load(dir, &err);
    assert_non_null(m);
    choir_silero_free(m);
    choir_silero_free(NULL);

    /* Every allocation failure on the load path fails cleanly. */
    for (int64_t k = 1;; k++) {
        choir_alloc_fail_after(k);
        m = choir_silero_load(tu_fixture(MODEL_ST), &err);
        int64_t used = choir_alloc_fail_after(0);
        if (m) {
            choir_silero_free(m);
            assert_true(used < k);
            break;
        }
        assert_true(k < 1000);
    }
}

static void test_process_arguments(void **state) {
    (void)state;
    choir_err err = {0};
    float p;
    float zeros[CHOIR_SILERO_CHUNK] = {0};
    const float *chunk = zeros;
    choir_silero_state *none = NULL;
    assert_int_equal(choir_silero_process(g_model, &none, &chunk, 1, &p, NULL, &err), CHOIR_EINVAL);
    assert_int_equal(choir_silero_process(NULL, &none, &chunk, 1, &p, NULL, &err), CHOIR_EINVAL);
    assert_int_equal(choir_silero_process(g_model, &none, &chunk, 0, &p, NULL, &err), 0);
    assert_true(choir_silero_weight_bytes(g_model) >= 309633 * sizeof(float));
    assert_int_equal(choir_silero_scratch_bytes(0), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probs_match_onnxruntime),
        cmocka_unit_test(test_batch_equals_single),
        cmocka_unit_test(test_reset_restarts_stream),
        cmocka_unit_test(test_segments_cover_speech),
        cmocka_unit_test(test_silence_and_noise_give_nothing),
        cmocka_unit_test(test_bad_models),
        cmocka_unit_test(test_process_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
