// ctest: labels=slow;nosan timeout=600
/* Whisper through the engine on the whisper-ml80 fixture weights (random, so
 * the transcripts are noise, but deterministic): requests submitted at once
 * are batched by the engine (batch > 1 observed) and each gets the same
 * transcript (and, for those asking for them, the same word timestamps) as
 * when the engine runs them one at a time. Skipped when the
 * Whisper adapter is not built. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/engine.h"
#include "choir/log.h"
#include "choir/randw.h"

#define FX "whisper/whisper-ml80"
#define N_REQ 3
#define SR 16000

typedef struct transcript {
    char text[4096];
    char lang[8];
    int n_segments, finals, status, n_words;
    double seg_end;
    char words[4096]; /* every word with its times and probability */
} transcript;

static int on_output(void *user, const choir_output *out)
{
    transcript *t = user;
    if (!out->final)
        return 0;
    t->finals++;
    t->status = out->status;
    if (out->text)
        snprintf(t->text, sizeof t->text, "%s", out->text);
    if (out->language)
        snprintf(t->lang, sizeof t->lang, "%s", out->language);
    t->n_segments = out->n_segments;
    t->seg_end = out->n_segments ? out->segments[out->n_segments - 1].end_s : 0;
    size_t len = 0;
    for (int i = 0; i < out->n_segments; i++)
        for (int k = 0; k < out->segments[i].n_words && len < sizeof t->words; k++, t->n_words++) {
            const choir_word *w = &out->segments[i].words[k];
            len += (size_t)snprintf(t->words + len, sizeof t->words - len, "[%s %.17g %.17g %.9g]", w->text,
                                    w->start_s, w->end_s, w->probability);
        }
    return 0;
}

static int has_whisper(void)
{
    const choir_model_ops *ops[8];
    int n = choir_model_builtin(ops, 8);
    for (int i = 0; i < n && i < 8; i++)
        if (strcmp(ops[i]->kind, "whisper") == 0)
            return 1;
    return 0;
}

static int run(const char *dir, int max_batch, const float *pcm, transcript *out)
{
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_OFFLINE_STT);
    p.memory_budget = (int64_t)2 << 30;
    p.max_batch = max_batch;
    p.wait_short_ms = 500; /* all requests arrive within it */
    choir_err err = {0};
    choir_engine *e = choir_engine_create(&p, &err);
    assert_non_null(e);
    if (choir_engine_add_model(e, "whisper", dir, NULL, &err) != 0)
        fail_msg("add_model: %s", err.msg);
    choir_ticket *t[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        memset(&out[i], 0, sizeof out[i]);
        choir_job j = {.req.task = CHOIR_TASK_STT, .on_output = on_output, .user = &out[i]};
        /* one second each from different places of the recording */
        /* the first and last with word timestamps: they run in lockstep, the
         * middle one apart */
        j.req.in.stt = (choir_stt_input){.samples = pcm + i * 2 * SR, .n_samples = SR, .language = "en",
                                         .timestamps = 1, .word_timestamps = i != 1, .temperature = 0.3f};
        t[i] = choir_engine_submit(e, &j, NULL, &err);
        if (!t[i])
            fail_msg("submit: %s", err.msg);
    }
    for (int i = 0; i < N_REQ; i++) {
        assert_int_equal(choir_ticket_wait(t[i], 500, &err), 0);
        choir_ticket_free(t[i]);
    }
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.completed, N_REQ);
    int largest = 0;
    for (int b = 0; b <= CHOIR_BATCH_HIST_MAX; b++)
        if (st.batch_size[b])
            largest = b;
    choir_engine_free(e);
    return largest;
}

static void test_whisper_batched_equals_sequential(void **state)
{
    (void)state;
    if (!has_whisper()) {
        print_message("whisper adapter not linked: skipped\n");
        skip();
    }
    choir_err err;
    char dir[1024], cmd[3000];
    snprintf(dir, sizeof dir, "%s", tu_tmpfile("whisper"));
    assert_int_equal(
        choir_randw_write_checkpoint(tu_fixture(FX "/manifest.json"), tu_fixture(FX "/config.json"), dir, &err), 0);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", tu_fixture("real/tokenizer/multilingual.tiktoken"), dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    choir_audio a = {0};
    choir_decode_opts o = {.target_rate = SR, .mono = 1};
    assert_int_equal(choir_audio_decode_file(tu_fixture("real/speech/jfk.wav"), &o, &a, &err), 0);
    assert_true(a.frames >= (2 * N_REQ) * SR);
    transcript batched[N_REQ], seq[N_REQ];
    int big = run(dir, 8, a.samples, batched);
    assert_int_equal(run(dir, 1, a.samples, seq), 1);
    assert_true(big > 1);
    for (int i = 0; i < N_REQ; i++) {
        assert_int_equal(batched[i].finals, 1);
        assert_int_equal(batched[i].status, 0);
        assert_string_equal(batched[i].text, seq[i].text);
        assert_string_equal(batched[i].lang, seq[i].lang);
        assert_int_equal(batched[i].n_segments, seq[i].n_segments);
        assert_true(batched[i].seg_end == seq[i].seg_end);
        /* words: the same batched and alone, only where asked */
        assert_int_equal(batched[i].n_words, seq[i].n_words);
        assert_string_equal(batched[i].words, seq[i].words);
        if (i == 1)
            assert_int_equal(batched[i].n_words, 0);
        else
            assert_true(batched[i].n_words > 0);
    }
    print_message("whisper: %d requests, largest batch %d\n", N_REQ, big);
    choir_audio_clear(&a);
}

int main(void)
{
    choir_log_set_level(CHOIR_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whisper_batched_equals_sequential),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
