/* The Kokoro engine adapter (choir_model_kokoro) in the engine's batch arena
 * (issue #21 part 2), on the randw-v1 fixture weights: a batch run in an
 * arena of its estimate gives the audio it gives without one, bit for bit;
 * its measured peak is within the admitted estimate, nothing of the forward
 * is counted outside the arena (only the emitted audio and the text's
 * pieces), and the arena comes back empty; through the engine a wrong
 * estimate is corrected from the measured peaks (tests/support/calib.h). */
// ctest: labels=slow timeout=900 cost=60
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/kokoro.h"
#include "choir/model.h"
#include "choir/randw.h"
#include "calib.h"
#include "testutil.h"

#define MAX_SAMPLES (24000 * 60)

typedef struct captured {
    int partial, final;
    int64_t n;
    float *pcm; /* [MAX_SAMPLES] every piece's audio, in order */
} captured;

static int on_output(void *user, const choir_output *out) {
    captured *c = user;
    if (out->final) {
        c->final++;
        return 0;
    }
    c->partial++;
    assert_true(c->n + out->n_samples <= MAX_SAMPLES);
    memcpy(c->pcm + c->n, out->samples, (size_t)out->n_samples * sizeof(float));
    c->n += out->n_samples;
    return 0;
}

static void make_model_dir(char *dir, size_t cap) {
    choir_err err = {0};
    snprintf(dir, cap, "%s", tu_tmpfile("model"));
    assert_int_equal(choir_randw_write_checkpoint(tu_fixture("kokoro/kokoro-v1/manifest.json"),
                                                  tu_fixture("kokoro/kokoro-v1/config.json"), dir,
                                                  &err),
                     0);
    assert_int_equal(tu_kokoro_voice_dir(dir), 0);
}

static choir_request tts_request(const char *text, captured *c) {
    choir_request r;
    memset(&r, 0, sizeof r);
    r.task = CHOIR_TASK_TTS;
    r.in.tts.text = text;
    r.in.tts.voice = "af_heart";
    r.stream = 1;
    r.on_output = on_output;
    r.on_output_user = c;
    return r;
}

static void test_arena(void **state) {
    (void)state;
    choir_err err = {0};
    char dir[600];
    make_model_dir(dir, sizeof dir);
    const choir_model_ops *ops = &choir_model_kokoro;
    void *w = ops->load(dir, NULL, &err);
    if (!w) fail_msg("%s", err.msg);

    /* two requests, the first of two pieces (a short first clause) */
    const char *texts[2] = {"Hi, there.", "The quick brown fox."};
    captured ref[2], got[2];
    choir_request req[2], *reqs[2];
    for (int i = 0; i < 2; i++) {
        memset(&ref[i], 0, sizeof ref[i]);
        ref[i].pcm = malloc(MAX_SAMPLES * sizeof(float));
        req[i] = tts_request(texts[i], &ref[i]);
        reqs[i] = &req[i];
    }
    assert_int_equal(ops->run_batch(w, reqs, 2, NULL, &err), 0);

    /* Again in an arena of the batch's estimates (the engine's reservation). */
    int64_t est = 0;
    for (int i = 0; i < 2; i++) est += ops->estimate(w, &req[i]);
    choir_arena *arena = choir_arena_create((size_t)est, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(arena);
    for (int i = 0; i < 2; i++) {
        memset(&got[i], 0, sizeof got[i]);
        got[i].pcm = malloc(MAX_SAMPLES * sizeof(float));
        req[i] = tts_request(texts[i], &got[i]);
    }
    int64_t act0 = choir_mem_current(CHOIR_MEM_ACTIVATIONS), io0 = choir_mem_current(CHOIR_MEM_IO);
    choir_mem_reset_peaks();
    assert_int_equal(ops->run_batch(w, reqs, 2, arena, &err), 0);
    int64_t act_out = choir_mem_peak(CHOIR_MEM_ACTIVATIONS) - act0,
            io_out = choir_mem_peak(CHOIR_MEM_IO) - io0;
    size_t hw = choir_arena_high_water(arena);
    printf("arena: peak %.2f MB of %.2f MB estimated; outside: %lld activations, %lld io "
           "(the audio of a piece, the text's ids)\n",
           hw / 1e6, est / 1e6, (long long)act_out, (long long)io_out);
    assert_true(hw > 0 && hw <= (size_t)est);
    assert_int_equal(choir_arena_used(arena), 0);
    /* the forward allocates nothing outside the arena (the worker scratch of
     * direct kernel calls is the engine's, bound around the batch) */
    assert_true(act_out < 64 << 10);
    assert_true(io_out < (int64_t)hw / 10);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(got[i].final, 1);
        assert_int_equal(got[i].partial, ref[i].partial);
        assert_int_equal(got[i].n, ref[i].n);
        assert_true(got[i].n > 0);
        assert_memory_equal(got[i].pcm, ref[i].pcm, (size_t)got[i].n * sizeof(float));
    }
    assert_int_equal(ref[0].partial, 2);

    /* An arena too small fails the batch with CHOIR_ENOMEM before any audio
     * (for the engine to retry), and comes back empty. */
    choir_arena *small = choir_arena_create(hw / 3, CHOIR_MEM_ACTIVATIONS, &err);
    captured none = {0};
    none.pcm = got[0].pcm;
    choir_request rs = tts_request(texts[0], &none), *rsp = &rs;
    assert_int_equal(ops->run_batch(w, &rsp, 1, small, &err), CHOIR_ENOMEM);
    assert_int_equal(none.partial, 0);
    assert_int_equal(rs.done, 0);
    assert_int_equal(choir_arena_used(small), 0);
    choir_arena_free(small);
    choir_arena_free(arena);
    for (int i = 0; i < 2; i++) free(ref[i].pcm), free(got[i].pcm);
    ops->free(w);

    /* Through the engine: each batch's peak inside the arena it was admitted
     * with, a wrong estimate corrected from those peaks. */
    choir_job j = {0};
    captured sink = {0};
    sink.pcm = malloc(MAX_SAMPLES * sizeof(float));
    j.req = tts_request("Hi, there.", NULL);
    j.req.on_output = NULL;
    j.priority = CHOIR_PRIORITY_NORMAL;
    tu_cal_check("kokoro", ops, dir, &j);
    free(sink.pcm);
}

/* The library alone: a batch of ids in an arena equals the batch without
 * one, and the arena is given back. */
static void test_synthesize_in_arena(void **state) {
    (void)state;
    choir_err err = {0};
    char dir[600];
    make_model_dir(dir, sizeof dir);
    choir_kokoro *m = choir_kokoro_load(dir, &err);
    assert_non_null(m);
    choir_kokoro_voice *v = choir_kokoro_voice_load("af_heart", tu_fixture("kokoro/voices"), &err);
    assert_non_null(v);
    static const int32_t a[] = {0, 50, 83, 54, 156, 57, 0}, b[] = {0, 81, 83, 16, 53, 65, 156, 0};
    choir_kokoro_item it[2] = {{.ids = a, .n_ids = 7}, {.ids = b, .n_ids = 8, .speed = 0.7f}};
    choir_kokoro_item it2[2];
    for (int i = 0; i < 2; i++) it[i].style = choir_kokoro_voice_style(v, it[i].n_ids - 2);
    memcpy(it2, it, sizeof it);
    choir_kokoro_params p = choir_kokoro_default_params();
    p.seed = 7;
    assert_int_equal(choir_kokoro_synthesize_batch(m, it, 2, &p, &err), 0);
    int64_t est = choir_kokoro_estimate_bytes(8, it[1].n_samples / CHOIR_KOKORO_SAMPLES_PER_FRAME);
    p.arena = choir_arena_create((size_t)est, CHOIR_MEM_ACTIVATIONS, &err);
    assert_int_equal(choir_kokoro_synthesize_batch(m, it2, 2, &p, &err), 0);
    printf("batch of 2 in an arena: peak %.2f MB of %.2f MB estimated (8 ids, %lld frames)\n",
           choir_arena_high_water(p.arena) / 1e6, est / 1e6,
           (long long)(it[1].n_samples / CHOIR_KOKORO_SAMPLES_PER_FRAME));
    assert_true(choir_arena_high_water(p.arena) <= (size_t)est);
    assert_int_equal(choir_arena_used(p.arena), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(it2[i].n_samples, it[i].n_samples);
        assert_memory_equal(it2[i].audio, it[i].audio, (size_t)it[i].n_samples * sizeof(float));
        choir_free(it[i].audio);
        choir_free(it2[i].audio);
    }
    choir_arena_free(p.arena);
    choir_kokoro_voice_free(v);
    choir_kokoro_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthesize_in_arena),
        cmocka_unit_test(test_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
