/* The Silero VAD engine adapter (choir/model.h): probe, load, a batch of
 * requests of different lengths (a silent one and an empty one included) gives
 * each request the segments choir_silero_detect gives it alone, inside the
 * arena the estimates promise, and a too-small arena is reported as such.
 * Through the engine, every batch's peak is within the arena it was admitted
 * with and a wrong estimate is corrected (tests/support/calib.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/audio.h"
#include "choir/model.h"
#include "choir/silero.h"
#include "calib.h"
#include "testutil.h"

#define MODEL_ST "real/vad/silero_vad_16k.safetensors"

typedef struct captured {
    int outputs, finals;
    choir_segment segs[64];
    int n_segs;
} captured;

static int on_output(void *user, const choir_output *out) {
    captured *c = user;
    c->outputs++;
    if (out->final) c->finals++;
    for (int k = 0; k < out->n_segments && c->n_segs < 64; k++) c->segs[c->n_segs++] = out->segments[k];
    return 0;
}

static void decode(const char *rel, choir_audio *a) {
    choir_decode_opts opts = {.target_rate = 16000, .mono = 1, .max_frames = 0};
    choir_err err = {0};
    assert_int_equal(choir_audio_decode_file(tu_fixture(rel), &opts, a, &err), 0);
}

static void test_probe(void **state) {
    (void)state;
    const choir_model_ops *ops = &choir_model_silero_vad;
    assert_string_equal(ops->kind, "silero-vad");
    assert_true(ops->tasks & CHOIR_TASK_BIT(CHOIR_TASK_VAD));
    cJSON *cfg = cJSON_Parse("{\"model_type\": \"silero_vad\", \"sample_rate\": 16000}");
    assert_true(ops->probe("x", cfg) > 0);
    cJSON_Delete(cfg);
    cfg = cJSON_Parse("{\"model_type\": \"whisper\"}");
    assert_int_equal(ops->probe("x", cfg), 0);
    cJSON_Delete(cfg);
    assert_int_equal(ops->probe("x", NULL), 0);
}

static void test_batch(void **state) {
    (void)state;
    const choir_model_ops *ops = &choir_model_silero_vad;
    choir_err err = {0};
    void *w = ops->load(tu_fixture(MODEL_ST), NULL, &err);
    assert_non_null(w);
    assert_true(ops->resident_bytes(w) > 1000000);

    enum { N = 4 };
    choir_audio jfk = {0}, clip = {0};
    decode("real/speech/jfk.wav", &jfk);
    decode("real/speech/librivox/sense_and_sensibility_01_austen_64kb-0880.wav", &clip);
    static float silence[16000 * 2 + 77];
    const float *samples[N] = {NULL, silence, clip.samples, jfk.samples};
    const int64_t lengths[N] = {0, (int64_t)(sizeof silence / sizeof silence[0]), clip.frames, jfk.frames};

    choir_request reqs[N];
    choir_request *ptrs[N];
    captured got[N];
    int64_t estimate = 0;
    memset(reqs, 0, sizeof reqs);
    memset(got, 0, sizeof got);
    for (int i = 0; i < N; i++) {
        reqs[i].task = CHOIR_TASK_VAD;
        reqs[i].in.vad.samples = samples[i];
        reqs[i].in.vad.n_samples = lengths[i];
        reqs[i].on_output = on_output;
        reqs[i].on_output_user = &got[i];
        ptrs[i] = &reqs[i];
        assert_int_equal(ops->length(w, &reqs[i]), lengths[i]);
        estimate += ops->estimate(NULL, &reqs[i]);
    }
    choir_arena *arena = choir_arena_create((size_t)estimate, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(arena);
    assert_int_equal(ops->run_batch(w, ptrs, N, arena, &err), 0);
    printf("arena: %zu bytes used of %lld estimated\n", choir_arena_high_water(arena), (long long)estimate);

    for (int i = 0; i < N; i++) {
        assert_int_equal(reqs[i].status, 0);
        assert_int_equal(got[i].finals, 1);
        choir_vad_segment *alone = NULL;
        int64_t n = 0;
        assert_int_equal(choir_silero_detect(w, samples[i], lengths[i], NULL, &alone, &n, &err), 0);
        assert_int_equal(got[i].n_segs, n);
        for (int64_t k = 0; k < n; k++) {
            assert_true(fabs(got[i].segs[k].start_s - alone[k].start / 16000.0) < 1e-9);
            assert_true(fabs(got[i].segs[k].end_s - alone[k].end / 16000.0) < 1e-9);
            assert_true(got[i].segs[k].probability > 0.5f && got[i].segs[k].probability <= 1.0f);
        }
        choir_free(alone);
    }
    assert_int_equal(got[0].n_segs, 0);
    assert_int_equal(got[1].n_segs, 0);
    assert_true(got[3].n_segs >= 1);

    /* A request's own thresholds apply to it. */
    memset(&got[3], 0, sizeof got[3]);
    reqs[3].done = 0;
    reqs[3].in.vad.min_silence_ms = 2000;
    choir_arena_reset(arena);
    assert_int_equal(ops->run_batch(w, &ptrs[3], 1, arena, &err), 0);
    assert_int_equal(got[3].n_segs, 1);

    /* An arena too small for the batch is reported, not overrun. */
    choir_arena *tiny = choir_arena_create(4096, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(tiny);
    reqs[3].done = 0;
    assert_int_equal(ops->run_batch(w, &ptrs[3], 1, tiny, &err), CHOIR_ENOMEM);
    choir_arena_free(tiny);

    choir_arena_free(arena);
    choir_audio_clear(&jfk);
    choir_audio_clear(&clip);
    ops->free(w);
    ops->free(NULL);
}

static void test_engine_calibrates(void **state) {
    (void)state;
    choir_audio jfk = {0};
    decode("real/speech/jfk.wav", &jfk);
    choir_job j = {0};
    j.req.task = CHOIR_TASK_VAD;
    j.req.in.vad.samples = jfk.samples;
    j.req.in.vad.n_samples = jfk.frames;
    j.priority = CHOIR_PRIORITY_NORMAL;
    tu_cal_check("silero", &choir_model_silero_vad, tu_fixture(MODEL_ST), &j);
    choir_audio_clear(&jfk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_engine_calibrates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
