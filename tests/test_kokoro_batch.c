/* Kokoro serving shape on the randw-v1 fixture weights: batches equal
 * unbatched synthesis, seeded noise is reproducible, text streams piece by
 * piece with a short first piece, bad input and allocation failures are
 * reported cleanly. */
// ctest: labels=slow timeout=900 cost=47
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/kokoro.h"
#include "choir/model.h"
#include "choir/phonemizer.h"
#include "choir/randw.h"
#include "testutil.h"

static choir_kokoro *g_model;
static choir_kokoro_voice *g_voice;

static int setup(void **state) {
    (void)state;
    choir_err err = {0};
    const char *dir = tu_tmpfile("model");
    if (choir_randw_write_checkpoint(tu_fixture("kokoro/kokoro-v1/manifest.json"),
                                     tu_fixture("kokoro/kokoro-v1/config.json"), dir, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    g_model = choir_kokoro_load(dir, &err);
    g_voice = choir_kokoro_voice_load("af_heart", tu_fixture("kokoro/voices"), &err);
    if (!g_model || !g_voice) fprintf(stderr, "%s\n", err.msg);
    return g_model && g_voice ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    choir_kokoro_free(g_model);
    choir_kokoro_voice_free(g_voice);
    return 0;
}

static const int32_t ids_a[] = {0, 50, 83, 54, 156, 57, 0};
static const int32_t ids_b[] = {0, 81, 83, 16, 53, 65, 156, 102, 53, 4, 0};
static const int32_t ids_c[] = {0, 44, 0};

static void test_batch_equals_single(void **state) {
    (void)state;
    choir_err err = {0};
    const int32_t *ids[3] = {ids_a, ids_b, ids_c};
    const int n_ids[3] = {7, 11, 3};
    for (int mode = 0; mode < 2; mode++) {
        choir_kokoro_params p = choir_kokoro_default_params();
        p.noise = mode ? CHOIR_KOKORO_NOISE_SEEDED : CHOIR_KOKORO_NOISE_ZERO;
        p.seed = 1234;
        choir_kokoro_item items[3];
        memset(items, 0, sizeof items);
        for (int i = 0; i < 3; i++) {
            items[i].ids = ids[i];
            items[i].n_ids = n_ids[i];
            items[i].style = choir_kokoro_voice_style(g_voice, n_ids[i] - 2);
        }
        items[2].speed = 0.5f; /* per-item speed: longer */
        assert_int_equal(choir_kokoro_synthesize_batch(g_model, items, 3, &p, &err), 0);
        for (int i = 0; i < 3; i++) {
            choir_kokoro_params q = p;
            q.seed = p.seed + (uint64_t)i;
            if (i == 2) q.speed = 0.5f;
            float *audio = NULL;
            int64_t n = 0;
            assert_int_equal(choir_kokoro_synthesize_ids(g_model, ids[i], n_ids[i], items[i].style, &q,
                                                         &audio, &n, &err), 0);
            assert_true(n > 0);
            assert_int_equal(n % CHOIR_KOKORO_SAMPLES_PER_FRAME, 0);
            assert_int_equal(items[i].n_samples, n);
            assert_memory_equal(items[i].audio, audio, (size_t)n * sizeof(float));
            choir_free(audio);
        }
        for (int i = 0; i < 3; i++) choir_free(items[i].audio);
    }
}

static void test_seeded_noise(void **state) {
    (void)state;
    choir_err err = {0};
    const float *style = choir_kokoro_voice_style(g_voice, 5);
    choir_kokoro_params p = choir_kokoro_default_params();
    float *a = NULL, *b = NULL, *c = NULL, *z = NULL;
    int64_t na, nb, nc, nz;
    p.seed = 7;
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, ids_a, 7, style, &p, &a, &na, &err), 0);
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, ids_a, 7, style, &p, &b, &nb, &err), 0);
    p.seed = 8;
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, ids_a, 7, style, &p, &c, &nc, &err), 0);
    p.noise = CHOIR_KOKORO_NOISE_ZERO;
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, ids_a, 7, style, &p, &z, &nz, &err), 0);
    assert_int_equal(na, nb);
    assert_int_equal(na, nc);
    assert_int_equal(na, nz);
    assert_memory_equal(a, b, (size_t)na * sizeof(float));        /* same seed, same audio */
    assert_true(memcmp(a, c, (size_t)na * sizeof(float)) != 0);    /* another seed differs */
    assert_true(memcmp(a, z, (size_t)na * sizeof(float)) != 0);    /* noise is really added */
    for (int64_t i = 0; i < na; i++) assert_true(isfinite(a[i]));
    choir_free(a), choir_free(b), choir_free(c), choir_free(z);

    /* speed divides the durations: twice as fast is about half as long */
    float *slow = NULL, *fast = NULL;
    int64_t ns, nf;
    p.speed = 1.0f;
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, ids_b, 11, style, &p, &slow, &ns, &err), 0);
    p.speed = 2.0f;
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, ids_b, 11, style, &p, &fast, &nf, &err), 0);
    assert_true(nf < ns * 0.7 && nf > ns * 0.3);
    choir_free(slow), choir_free(fast);
}

typedef struct collected {
    float *audio;
    int64_t n;
    int pieces, n_pieces, stop_after;
    int64_t first_len;
} collected;

static int collect(void *user, const float *pcm, int64_t n, int piece, int n_pieces) {
    collected *c = user;
    assert_int_equal(piece, c->pieces); /* in order */
    if (piece == 0) c->first_len = n;
    c->audio = realloc(c->audio, (size_t)(c->n + n) * sizeof(float));
    memcpy(c->audio + c->n, pcm, (size_t)n * sizeof(float));
    c->n += n;
    c->pieces++;
    c->n_pieces = n_pieces;
    return c->stop_after && c->pieces >= c->stop_after;
}

static void test_speak_streams_in_order(void **state) {
    (void)state;
    choir_err err = {0};
    choir_phonemizer *ph = choir_phonemizer_create(CHOIR_PHONEMIZER_EN_US, &err);
    assert_non_null(ph);
    const char *text = "Hi, this is choir speaking.";
    choir_kokoro_speak_params sp = choir_kokoro_default_speak_params();
    sp.synth.noise = CHOIR_KOKORO_NOISE_ZERO;
    collected one = {0}, many = {0};
    sp.batch = 1;
    assert_int_equal(choir_kokoro_speak(g_model, ph, g_voice, text, &sp, collect, &one, &err), 0);
    sp.batch = 4;
    assert_int_equal(choir_kokoro_speak(g_model, ph, g_voice, text, &sp, collect, &many, &err), 0);
    /* the first clause ("Hi,") alone, then the rest of the text in one piece */
    assert_int_equal(one.pieces, 2);
    assert_int_equal(one.n_pieces, 2);
    assert_true(one.first_len * 2 < one.n);
    /* batching the pieces changes nothing */
    assert_int_equal(many.n, one.n);
    assert_memory_equal(many.audio, one.audio, (size_t)one.n * sizeof(float));

    /* the caller can stop the stream */
    collected stop = {.stop_after = 1};
    assert_int_equal(choir_kokoro_speak(g_model, ph, g_voice, text, &sp, collect, &stop, &err),
                     CHOIR_ECANCELED);
    assert_int_equal(stop.pieces, 1);
    free(one.audio), free(many.audio), free(stop.audio);
    choir_phonemizer_free(ph);
}

static void test_bad_input(void **state) {
    (void)state;
    choir_err err = {0};
    const float *style = choir_kokoro_voice_style(g_voice, 5);
    float *audio = (float *)1;
    int64_t n = 5;
    const int32_t bad_id[] = {0, 200, 0};
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, bad_id, 3, style, NULL, &audio, &n, &err),
                     CHOIR_EINVAL);
    assert_null(audio);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err.msg, "200"));
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, ids_a, 2, style, NULL, &audio, &n, &err),
                     CHOIR_EINVAL);
    int32_t *many = calloc(600, sizeof *many);
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, many, 600, style, NULL, &audio, &n, &err),
                     CHOIR_EINVAL);
    free(many);
    choir_kokoro_params p = choir_kokoro_default_params();
    p.speed = 0;
    assert_int_equal(choir_kokoro_synthesize_ids(g_model, ids_a, 7, style, &p, &audio, &n, &err),
                     CHOIR_EINVAL);
    /* more than 510 phonemes cannot be one piece */
    char *ps = malloc(1200);
    memset(ps, 'a', 600);
    ps[600] = 0;
    int32_t ids[600];
    assert_int_equal(choir_kokoro_phonemes_to_ids(g_model, ps, ids, 600, NULL, &err), CHOIR_ETOOBIG);
    assert_int_equal(choir_kokoro_phonemes_to_ids(g_model, "\xff", ids, 600, NULL, &err), CHOIR_EINVAL);
    free(ps);
    choir_kokoro_free(NULL);
}

static void test_alloc_failures(void **state) {
    (void)state;
    const float *style = choir_kokoro_voice_style(g_voice, 1);
    choir_kokoro_params p = choir_kokoro_default_params();
    int failures = 0;
    for (int64_t k = 1; k <= 12; k++) {
        choir_err err = {0};
        float *audio = NULL;
        int64_t n = 0;
        choir_alloc_fail_after(k);
        int rc = choir_kokoro_synthesize_ids(g_model, ids_c, 3, style, &p, &audio, &n, &err);
        int64_t used = choir_alloc_fail_after(0);
        if (rc == 0) {
            assert_non_null(audio);
            choir_free(audio);
            if (used < k) break; /* past the last allocation point */
        } else {
            assert_int_equal(rc, CHOIR_ENOMEM);
            assert_null(audio);
            assert_true(strlen(err.msg) > 0);
            failures++;
        }
    }
    assert_true(failures >= 3);
}

typedef struct outputs {
    int partial, final;
    int64_t samples;
    int status;
} outputs;

static int on_output(void *user, const choir_output *out) {
    outputs *o = user;
    if (out->final) {
        o->final++;
        o->status = out->status;
    } else {
        o->partial++;
        assert_int_equal(out->sample_rate, CHOIR_KOKORO_SAMPLE_RATE);
        o->samples += out->n_samples;
    }
    return 0;
}

/* The engine adapter: probe, load, a batch with a good and a bad request. */
static void test_engine_adapter(void **state) {
    (void)state;
    choir_err err = {0};
    char dir[600];
    snprintf(dir, sizeof dir, "%s", tu_tmpfile("model"));
    assert_int_equal(tu_kokoro_voice_dir(dir), 0);

    cJSON *cfg = choir_json_load(tu_fixture("kokoro/kokoro-v1/config.json"), &err);
    assert_non_null(cfg);
    assert_true(choir_model_kokoro.probe(dir, cfg) > 0);
    cJSON_Delete(cfg);
    cJSON *other = cJSON_Parse("{\"d_model\": 64}");
    assert_int_equal(choir_model_kokoro.probe(dir, other), 0);
    cJSON_Delete(other);

    void *w = choir_model_kokoro.load(dir, NULL, &err);
    if (!w) fail_msg("%s", err.msg);
    assert_true(choir_model_kokoro.resident_bytes(w) > 300 * 1000 * 1000);
    choir_request good, bad;
    memset(&good, 0, sizeof good);
    memset(&bad, 0, sizeof bad);
    outputs og = {0}, ob = {0};
    good.task = bad.task = CHOIR_TASK_TTS;
    good.in.tts.text = bad.in.tts.text = "Hi, there.";
    good.in.tts.voice = "af_heart";
    bad.in.tts.voice = "no_such_voice";
    good.stream = bad.stream = 1;
    good.on_output = bad.on_output = on_output;
    good.on_output_user = &og;
    bad.on_output_user = &ob;
    assert_true(choir_model_kokoro.estimate(NULL, &good) > 0);
    choir_request *reqs[2] = {&bad, &good};
    assert_int_equal(choir_model_kokoro.run_batch(w, reqs, 2, NULL, &err), 0);
    assert_int_equal(og.partial, 2); /* "Hi," streamed first, then "there." */
    assert_int_equal(og.final, 1);
    assert_true(og.samples > 0);
    assert_true(good.done);
    assert_int_equal(good.status, 0);
    assert_int_equal(bad.status, CHOIR_ENOTFOUND);
    assert_int_equal(ob.partial, 0);
    choir_model_kokoro.free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_equals_single),
        cmocka_unit_test(test_seeded_noise),
        cmocka_unit_test(test_speak_streams_in_order),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_engine_adapter),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
