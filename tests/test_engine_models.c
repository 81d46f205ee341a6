/* The engine with the real model adapters on fixture weights: concurrent
 * requests, batched by the engine, give the same results as one-by-one runs.
 * Each part runs only when its adapter is linked into this build (the
 * adapters are weak references in the engine), and says so when skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/engine.h"
#include "choir/kokoro.h"
#include "choir/log.h"
#include "choir/model.h"
#include "choir/silero.h"
#include "choir/whisper.h"

#define N_CLIPS 12
#define MAX_SEGS 64

typedef struct vad_result {
    int finals, status, n;
    choir_segment segs[MAX_SEGS];
} vad_result;

static int on_vad(void *user, const choir_output *out)
{
    vad_result *r = user;
    if (out->final) {
        r->finals++;
        r->status = out->status;
        r->n = out->n_segments < MAX_SEGS ? out->n_segments : MAX_SEGS;
        for (int i = 0; i < r->n; i++) {
            r->segs[i] = out->segments[i];
            r->segs[i].text = NULL;
        }
    }
    return 0;
}

static int has_builtin(const char *kind)
{
    const choir_model_ops *ops[8];
    int n = choir_model_builtin(ops, 8);
    for (int i = 0; i < n && i < 8; i++)
        if (strcmp(ops[i]->kind, kind) == 0)
            return 1;
    return 0;
}

/* A silero model directory as users have it: config.json + model.safetensors. */
static const char *silero_dir(void)
{
    const char *dir = tu_tmpfile("silero");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/model.safetensors'", dir,
             tu_fixture("real/vad/silero_vad_16k.safetensors"), dir);
    assert_int_equal(system(cmd), 0);
    char cfg[1200];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    const char *text = "{\"model_type\": \"silero_vad\", \"sample_rate\": 16000}";
    assert_int_equal(tu_write_file(cfg, text, strlen(text)), 0);
    return dir;
}

/* Runs every clip through a fresh engine at once; returns the largest batch. */
static int run_vad(const char *dir, int max_batch, const choir_audio *clips, const int64_t *starts,
                   const int64_t *lens, vad_result *res)
{
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 512 << 20;
    p.max_batch = max_batch;
    p.wait_short_ms = 100;
    p.wait_long_ms = 100;
    p.max_pad_waste = 0.6; /* let clips of different lengths share batches */
    choir_err err = {0};
    choir_engine *e = choir_engine_create(&p, &err);
    assert_non_null(e);
    /* NULL ops: the engine detects silero from config.json */
    if (choir_engine_add_model(e, "vad", dir, NULL, &err) != 0)
        fail_msg("add_model: %s", err.msg);
    choir_ticket *t[N_CLIPS];
    for (int i = 0; i < N_CLIPS; i++) {
        memset(&res[i], 0, sizeof res[i]);
        choir_job j = {.req.task = CHOIR_TASK_VAD, .on_output = on_vad, .user = &res[i],
                       .priority = CHOIR_PRIORITY_NORMAL};
        j.req.in.vad.samples = clips[i % 2].samples + starts[i];
        j.req.in.vad.n_samples = lens[i];
        t[i] = choir_engine_submit(e, &j, NULL, &err);
        if (!t[i])
            fail_msg("submit: %s", err.msg);
    }
    for (int i = 0; i < N_CLIPS; i++) {
        assert_int_equal(choir_ticket_wait(t[i], 60, &err), 0);
        choir_ticket_free(t[i]);
    }
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.completed, N_CLIPS);
    assert_int_equal(st.model_loads, 1);
    assert_true(st.weights_resident > 0);
    int largest = 0;
    for (int b = 0; b <= CHOIR_BATCH_HIST_MAX; b++)
        if (st.batch_size[b])
            largest = b;
    choir_engine_free(e);
    return largest;
}

static void test_vad_batched_equals_sequential(void **state)
{
    (void)state;
    if (!has_builtin("silero-vad")) {
        print_message("silero adapter not linked: skipped\n");
        skip();
    }
    choir_audio clips[2] = {0};
    choir_decode_opts o = {.target_rate = 16000, .mono = 1};
    choir_err err;
    assert_int_equal(choir_audio_decode_file(tu_fixture("real/speech/jfk.wav"), &o, &clips[0], &err), 0);
    assert_int_equal(
        choir_audio_decode_file(tu_fixture("real/speech/librivox/sense_and_sensibility_01_austen_64kb-0870.wav"),
                                &o, &clips[1], &err),
        0);
    /* Twelve excerpts of different lengths and offsets. */
    int64_t starts[N_CLIPS], lens[N_CLIPS];
    for (int i = 0; i < N_CLIPS; i++) {
        int64_t total = clips[i % 2].frames;
        lens[i] = total / 3 + (total * 2 / 3) * i / N_CLIPS;
        starts[i] = (total - lens[i]) * (i % 3) / 2;
    }
    vad_result *batched = calloc(N_CLIPS, sizeof *batched), *seq = calloc(N_CLIPS, sizeof *seq);
    const char *dir = silero_dir();
    int big = run_vad(dir, 8, clips, starts, lens, batched);
    assert_int_equal(run_vad(dir, 1, clips, starts, lens, seq), 1);
    assert_true(big > 1);
    int speech = 0;
    for (int i = 0; i < N_CLIPS; i++) {
        assert_int_equal(batched[i].finals, 1);
        assert_int_equal(batched[i].status, 0);
        assert_int_equal(batched[i].n, seq[i].n);
        for (int k = 0; k < seq[i].n; k++) {
            assert_true(batched[i].segs[k].start_s == seq[i].segs[k].start_s);
            assert_true(batched[i].segs[k].end_s == seq[i].segs[k].end_s);
            assert_true(fabsf(batched[i].segs[k].probability - seq[i].segs[k].probability) <= 1e-6f);
        }
        speech += seq[i].n;
    }
    assert_true(speech >= N_CLIPS); /* every excerpt holds speech */
    print_message("vad: %d clips, largest batch %d, %d segments\n", N_CLIPS, big, speech);
    free(batched);
    free(seq);
    choir_audio_clear(&clips[0]);
    choir_audio_clear(&clips[1]);
}

static const choir_model_ops *builtin(const char *kind)
{
    const choir_model_ops *ops[8];
    int n = choir_model_builtin(ops, 8);
    for (int i = 0; i < n && i < 8; i++)
        if (strcmp(ops[i]->kind, kind) == 0)
            return ops[i];
    return NULL;
}

/* The adapters bound a request's numbers at submit (their check op), so a
 * front end that passes them on unread (the job worker) is refused as the
 * CLI is: 0 is the default, the bounds are taken whole, NaN never. */
static void test_request_checks(void **state)
{
    (void)state;
    const choir_model_ops *kokoro = builtin("kokoro"), *silero = builtin("silero-vad");
    choir_err err;
    if (kokoro) {
        assert_non_null(kokoro->check);
        const float ok[] = {0, (float)CHOIR_KOKORO_MIN_SPEED, 1, (float)CHOIR_KOKORO_MAX_SPEED};
        const float bad[] = {-1, 0.005f, 101, NAN, INFINITY};
        choir_request r = {.task = CHOIR_TASK_TTS};
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            r.in.tts.speed = ok[i];
            assert_int_equal(kokoro->check(NULL, &r, &err), 0);
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            r.in.tts.speed = bad[i];
            err = (choir_err){0};
            assert_int_equal(kokoro->check(NULL, &r, &err), CHOIR_EINVAL);
            assert_non_null(strstr(err.msg, "speed"));
        }
    }
    if (silero) {
        assert_non_null(silero->check);
        choir_request r = {.task = CHOIR_TASK_VAD};
        const float ok[] = {0, 0.005f, 0.5f, 1};
        const float bad[] = {-0.1f, 1.5f, NAN};
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            r.in.vad.threshold = ok[i];
            assert_int_equal(silero->check(NULL, &r, &err), 0);
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            r.in.vad.threshold = bad[i];
            assert_int_equal(silero->check(NULL, &r, &err), CHOIR_EINVAL);
            assert_non_null(strstr(err.msg, "threshold"));
        }
        r.in.vad.threshold = 0;
        r.in.vad.min_speech_ms = CHOIR_VAD_MAX_MS;
        assert_int_equal(silero->check(NULL, &r, &err), 0);
        r.in.vad.min_speech_ms = -1;
        assert_int_equal(silero->check(NULL, &r, &err), CHOIR_EINVAL);
        r.in.vad.min_speech_ms = 0;
        r.in.vad.min_silence_ms = CHOIR_VAD_MAX_MS + 1;
        assert_int_equal(silero->check(NULL, &r, &err), CHOIR_EINVAL);
    }
    const choir_model_ops *whisper = builtin("whisper");
    if (whisper) {
        /* Before a load only what needs no weights: the language, the
         * temperature, a negative max_tokens (the model's context bounds the
         * rest, at submit once loaded and when the batch runs). */
        assert_non_null(whisper->check);
        choir_request r = {.task = CHOIR_TASK_STT};
        const float ok[] = {0, 0.5f, (float)CHOIR_WHISPER_MAX_TEMPERATURE};
        const float bad[] = {-0.5f, 10.5f, NAN, INFINITY};
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            r.in.stt.temperature = ok[i];
            assert_int_equal(whisper->check(NULL, &r, &err), 0);
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            r.in.stt.temperature = bad[i];
            err = (choir_err){0};
            assert_int_equal(whisper->check(NULL, &r, &err), CHOIR_EINVAL);
            assert_non_null(strstr(err.msg, "temperature must be in [0, 10]"));
        }
        r.in.stt.temperature = 0;
        r.in.stt.max_tokens = -1;
        assert_int_equal(whisper->check(NULL, &r, &err), CHOIR_EINVAL);
        assert_non_null(strstr(err.msg, "max_tokens"));
        r.in.stt.max_tokens = 0;
        r.in.stt.language = "xx";
        assert_int_equal(whisper->check(NULL, &r, &err), CHOIR_EINVAL);
        assert_non_null(strstr(err.msg, "unknown language 'xx'"));
        r.in.stt.language = "de";
        assert_int_equal(whisper->check(NULL, &r, &err), 0);
    }
    if (!kokoro && !silero && !whisper) {
        print_message("kokoro, silero and whisper adapters not linked: skipped\n");
        skip();
    }
}

int main(void)
{
    choir_log_set_level(CHOIR_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vad_batched_equals_sequential),
        cmocka_unit_test(test_request_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
