/* The threaded engine with fake models: results reach the right callers
 * unchanged by batching, streaming delivers pieces in order, and refusals,
 * cancellation, deadlines, lazy loading with LRU unloading, arena
 * recalibration and shutdown behave as engine.h promises. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "choir/alloc.h"
#include "choir/pool.h"
#include "choir/engine.h"
#include "choir/log.h"
#include "engine/engine_internal.h"
#include "models/fake/fake_model.h"

#define MAX_AUDIO (24000 * 8)

typedef struct collected {
    pthread_mutex_t lock;
    float *audio;
    int64_t n_audio;
    char text[256];
    int outputs, finals, final_status;
} collected;

static int collect(void *user, const choir_output *out)
{
    collected *c = user;
    pthread_mutex_lock(&c->lock);
    if (out->samples && out->n_samples > 0) {
        if (!c->audio)
            c->audio = calloc(MAX_AUDIO, sizeof *c->audio);
        int64_t n = out->n_samples;
        if (c->n_audio + n > MAX_AUDIO)
            n = MAX_AUDIO - c->n_audio;
        memcpy(c->audio + c->n_audio, out->samples, (size_t)n * sizeof *out->samples);
        c->n_audio += n;
    }
    if (out->text)
        snprintf(c->text, sizeof c->text, "%s", out->text);
    c->outputs++;
    if (out->final) {
        c->finals++;
        c->final_status = out->status;
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

static void collected_init(collected *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
}

static void collected_free(collected *c)
{
    free(c->audio);
    pthread_mutex_destroy(&c->lock);
}

static const char *model_dir(const char *name, const choir_fake_params *p)
{
    const char *dir = tu_tmpfile(name);
    choir_err err;
    assert_int_equal(choir_fake_model_write(dir, p, &err), 0);
    return dir;
}

static choir_engine *engine_with(const choir_engine_params *p, const char *id, const char *dir)
{
    choir_err err = {0};
    choir_engine *e = choir_engine_create(p, &err);
    assert_non_null(e);
    if (id)
        assert_int_equal(choir_engine_add_model(e, id, dir, &choir_model_fake, &err), 0);
    return e;
}

static choir_job tts_job(const char *text, collected *c)
{
    choir_job j = {0};
    j.req.task = CHOIR_TASK_TTS;
    j.req.in.tts.text = text;
    j.priority = CHOIR_PRIORITY_NORMAL;
    j.on_output = c ? collect : NULL;
    j.user = c;
    return j;
}

static void check_tts_audio(const collected *c, const char *text)
{
    int64_t want = (int64_t)strlen(text) * CHOIR_FAKE_TTS_SAMPLES_PER_CHAR;
    assert_int_equal(c->n_audio, want);
    for (int64_t i = 0; i < want; i++)
        if (c->audio[i] != choir_fake_tts_sample(text, i))
            fail_msg("sample %lld of '%s' differs", (long long)i, text);
}

static const char *texts[] = {
    "Hello there.", "A short one.", "The quick brown fox jumps over the lazy dog.", "Choir sings.",
    "Speech from text, batched by length.", "Twelve chars", "Another sentence of moderate size here.",
    "Tiny.", "Results must not depend on their batch companions.", "One more line of text to read aloud.",
};
#define N_TEXTS (int)(sizeof texts / sizeof texts[0])

/* Runs 4 x N_TEXTS TTS requests at once; returns the largest batch seen. */
static int run_tts_set(const choir_engine_params *p, collected *out, int n, int stream)
{
    choir_fake_params fp = {.fixed_ms = 5, .per_unit_us = 20, .bytes_per_unit = 64};
    choir_engine *e = engine_with(p, "fake", model_dir("tts", &fp));
    choir_ticket **t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < n; i++) {
        collected_init(&out[i]);
        choir_job j = tts_job(texts[i % N_TEXTS], &out[i]);
        j.req.stream = stream;
        choir_err err;
        t[i] = choir_engine_submit(e, &j, NULL, &err);
        assert_non_null(t[i]);
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(choir_ticket_wait(t[i], 30, NULL), 0);
        choir_ticket_free(t[i]);
    }
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.completed, (uint64_t)n);
    int largest = 0;
    for (int b = 0; b <= CHOIR_BATCH_HIST_MAX; b++)
        if (st.batch_size[b])
            largest = b;
    free(t);
    choir_engine_free(e);
    return largest;
}

static void test_batched_equals_sequential(void **state)
{
    (void)state;
    int n = 4 * N_TEXTS;
    collected *batched = calloc((size_t)n, sizeof *batched), *seq = calloc((size_t)n, sizeof *seq);
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 256 << 20;
    p.workers = 2;
    p.wait_short_ms = 30;
    int big = run_tts_set(&p, batched, n, 0);
    assert_true(big > 1);
    p.max_batch = 1;
    p.workers = 1;
    assert_int_equal(run_tts_set(&p, seq, n, 0), 1);
    for (int i = 0; i < n; i++) {
        assert_int_equal(batched[i].finals, 1);
        assert_int_equal(batched[i].outputs, 1);
        check_tts_audio(&batched[i], texts[i % N_TEXTS]);
        assert_int_equal(batched[i].n_audio, seq[i].n_audio);
        assert_memory_equal(batched[i].audio, seq[i].audio, (size_t)seq[i].n_audio * sizeof(float));
        collected_free(&batched[i]);
        collected_free(&seq[i]);
    }
    free(batched);
    free(seq);
}

static void test_streaming_pieces(void **state)
{
    (void)state;
    int n = 8;
    collected c[8];
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 256 << 20;
    run_tts_set(&p, c, n, 1);
    for (int i = 0; i < n; i++) {
        assert_int_equal(c[i].outputs, 4);
        assert_int_equal(c[i].finals, 1);
        check_tts_audio(&c[i], texts[i % N_TEXTS]);
        collected_free(&c[i]);
    }
}

static void test_stt_text_and_partials(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 2, .bytes_per_unit = 8};
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_REALTIME_STT);
    p.memory_budget = 128 << 20;
    choir_engine *e = engine_with(&p, "stt", model_dir("stt", &fp));
    float *x = calloc(16000, sizeof *x);
    tu_fill_uniform(x, 16000, 3, -1, 1);
    collected c;
    collected_init(&c);
    choir_job j = {.req.task = CHOIR_TASK_STT, .on_output = collect, .user = &c};
    j.req.in.stt.samples = x;
    j.req.in.stt.n_samples = 16000;
    j.req.stream = 1;
    choir_ticket *t = choir_engine_submit(e, &j, NULL, NULL);
    assert_non_null(t);
    assert_int_equal(choir_ticket_wait(t, 10, NULL), 0);
    choir_ticket_free(t);
    assert_int_equal(c.outputs, 4);
    assert_non_null(strstr(c.text, "16000 samples, checksum"));
    /* the realtime-stt profile refuses more than 5 minutes of audio */
    choir_reject_reason why;
    choir_err err;
    j.req.in.stt.n_samples = 16000 * 301;
    float *long_x = calloc((size_t)j.req.in.stt.n_samples, sizeof *long_x);
    j.req.in.stt.samples = long_x;
    assert_null(choir_engine_submit(e, &j, &why, &err));
    assert_int_equal(err.code, CHOIR_ETOOBIG);
    assert_int_equal(why, CHOIR_REJECT_TOO_LARGE);
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_true(fabs(st.audio_seconds - 1.0) < 1e-9);
    free(long_x);
    free(x);
    collected_free(&c);
    choir_engine_free(e);
}

static void test_refusals_and_cancel(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 300, .bytes_per_unit = 64};
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 64 << 20;
    p.queue_capacity = 2;
    p.max_batch = 1;
    p.workers = 1;
    choir_engine *e = engine_with(&p, "slow", model_dir("slow", &fp));
    choir_err err;
    choir_reject_reason why;
    choir_job j = tts_job("running first", NULL);
    choir_ticket *running = choir_engine_submit(e, &j, &why, &err);
    assert_non_null(running);
    /* wait until it left the queue */
    for (int i = 0; i < 200; i++) {
        choir_engine_stats st;
        choir_engine_get_stats(e, &st);
        if (st.running == 1)
            break;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    /* still running: a short wait says so, and the status is the timeout */
    int still;
    assert_int_equal(choir_ticket_poll(running, 0, &still, &err), CHOIR_ETIMEDOUT);
    assert_int_equal(still, 1);
    choir_ticket *q1 = choir_engine_submit(e, &j, &why, &err);
    j.timeout_s = 0.05;
    choir_ticket *q2 = choir_engine_submit(e, &j, &why, &err);
    assert_non_null(q1);
    assert_non_null(q2);
    j.timeout_s = 0;
    assert_null(choir_engine_submit(e, &j, &why, &err));
    assert_int_equal(err.code, CHOIR_EBUSY);
    assert_int_equal(why, CHOIR_REJECT_QUEUE_FULL);
    assert_true(choir_engine_retry_after(e) >= 1);
    /* q2's deadline passes while it waits behind the running request */
    assert_int_equal(choir_ticket_wait(q2, 5, &err), CHOIR_ETIMEDOUT);
    assert_int_equal(choir_ticket_reason(q2), CHOIR_REJECT_DEADLINE);
    /* a request that failed at its deadline is finished, not running */
    assert_int_equal(choir_ticket_poll(q2, 0, &still, &err), CHOIR_ETIMEDOUT);
    assert_int_equal(still, 0);
    /* a cancelled queued request ends at once, with its reason */
    choir_ticket_cancel(q1);
    assert_int_equal(choir_ticket_wait(q1, 0.1, &err), CHOIR_ECANCELED);
    assert_int_equal(choir_ticket_reason(q1), CHOIR_REJECT_CANCELLED);
    assert_int_equal(choir_ticket_wait(running, 5, &err), 0);
    /* unknown model, too large for the budget, bad input */
    j.model_id = "nope";
    assert_null(choir_engine_submit(e, &j, &why, &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    j.model_id = NULL;
    static char huge[1 << 21];
    memset(huge, 'a', sizeof huge - 1);
    j.req.in.tts.text = huge; /* 2 MiB of text * 64 bytes > 64 MiB */
    assert_null(choir_engine_submit(e, &j, &why, &err));
    assert_int_equal(err.code, CHOIR_ETOOBIG);
    assert_int_equal(why, CHOIR_REJECT_TOO_LARGE);
    j.req.in.tts.text = "";
    assert_null(choir_engine_submit(e, &j, &why, &err));
    assert_int_equal(err.code, CHOIR_EINVAL);
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.rejected[CHOIR_REJECT_QUEUE_FULL], 1);
    assert_int_equal(st.rejected[CHOIR_REJECT_DEADLINE], 1);
    assert_int_equal(st.rejected[CHOIR_REJECT_CANCELLED], 1);
    assert_int_equal(st.rejected[CHOIR_REJECT_TOO_LARGE], 1);
    assert_int_equal(st.completed, 1);
    choir_ticket_free(running);
    choir_ticket_free(q1);
    choir_ticket_free(q2);
    choir_engine_free(e);
}

/* A deadline covers the compute as well as the queue: a request still
 * running when it passes is stopped and fails with reason deadline (before,
 * the deadline only bounded the wait to start, and this one ran its 2 s). */
static void test_deadline_covers_compute(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 2000, .pieces = 20, .bytes_per_unit = 64};
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 64 << 20;
    p.workers = 1;
    choir_engine *e = engine_with(&p, "slow", model_dir("slow_compute", &fp));
    choir_err err;
    choir_reject_reason why;
    choir_job j = tts_job("a long computation", NULL);
    j.timeout_s = 0.5;
    double t0 = (choir_now_ns() * 1e-9);
    choir_ticket *t = choir_engine_submit(e, &j, &why, &err);
    assert_non_null(t);
    assert_int_equal(choir_ticket_wait(t, 5, &err), CHOIR_ETIMEDOUT);
    double took = (choir_now_ns() * 1e-9) - t0;
    print_message("a 2-s computation with a 0.5-s deadline ended after %.3f s\n", took);
    assert_int_equal(choir_ticket_reason(t), CHOIR_REJECT_DEADLINE);
    assert_true(took >= 0.5 && took < 0.9);
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.rejected[CHOIR_REJECT_DEADLINE], 1);
    assert_int_equal(st.completed, 0);
    choir_ticket_free(t);
    choir_engine_free(e);
}

/* Refusal at submit: once a batch has been measured, a request whose
 * predicted queue wait already passes its deadline is refused at once
 * (reason backlog), one with room in its deadline is queued; the queue's
 * figures for x-ratelimit headers follow the queue. */
static void test_backlog_refused_at_submit(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 100, .bytes_per_unit = 64};
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 64 << 20;
    p.max_batch = 1;
    p.workers = 1;
    choir_engine *e = engine_with(&p, "m", model_dir("backlog", &fp));
    choir_err err;
    choir_reject_reason why;
    choir_job j = tts_job("measure me", NULL);
    choir_engine_queue_info qi;
    assert_int_equal(choir_engine_get_queue_info(e, "m", &qi), 0);
    assert_int_equal(qi.capacity, p.queue_capacity);
    assert_int_equal(qi.queued, 0);
    assert_true(qi.predicted_s == 0);
    assert_int_equal(choir_engine_get_queue_info(e, "nope", &qi), CHOIR_ENOTFOUND);
    /* nothing measured yet: a short deadline is no reason to refuse */
    j.timeout_s = 0.01;
    choir_ticket *first = choir_engine_submit(e, &j, &why, &err);
    assert_non_null(first);
    choir_ticket_wait(first, 5, &err);
    choir_ticket_free(first);
    j.timeout_s = 0;
    assert_int_equal(choir_ticket_wait(first = choir_engine_submit(e, &j, &why, &err), 5, &err), 0);
    choir_ticket_free(first);
    enum { AHEAD = 10 };
    choir_ticket *ahead[AHEAD];
    for (int i = 0; i < AHEAD; i++)
        assert_non_null(ahead[i] = choir_engine_submit(e, &j, &why, &err));
    assert_int_equal(choir_engine_get_queue_info(e, "m", &qi), 0);
    print_message("queue: %d of %d waiting, %d running, predicted wait %.2f s\n", qi.queued, qi.capacity,
                  qi.running, qi.predicted_s);
    assert_true(qi.queued >= AHEAD - 2);
    assert_true(qi.predicted_s > 0.5);
    j.timeout_s = 0.3;
    double t0 = (choir_now_ns() * 1e-9);
    assert_null(choir_engine_submit(e, &j, &why, &err));
    assert_true((choir_now_ns() * 1e-9) - t0 < 0.05);
    assert_int_equal(err.code, CHOIR_EBUSY);
    assert_int_equal(why, CHOIR_REJECT_BACKLOG);
    assert_non_null(strstr(err.msg, "deadline"));
    j.timeout_s = 10;
    choir_ticket *fits = choir_engine_submit(e, &j, &why, &err);
    assert_non_null(fits);
    assert_int_equal(choir_ticket_wait(fits, 10, &err), 0);
    for (int i = 0; i < AHEAD; i++) {
        assert_int_equal(choir_ticket_wait(ahead[i], 10, &err), 0);
        choir_ticket_free(ahead[i]);
    }
    choir_ticket_free(fits);
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.rejected[CHOIR_REJECT_BACKLOG], 1);
    char *text = choir_engine_metrics_text(e);
    assert_non_null(strstr(text, "choir_requests_rejected_total{reason=\"backlog\"} 1"));
    choir_free(text);
    choir_engine_free(e);
}

/* Two models whose weights do not fit together take turns; each request
 * completes, the idle one is unloaded to make room. */
static void test_lazy_load_and_lru(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 2, .bytes_per_unit = 64, .weights_bytes = 60 << 20, .load_ms = 5};
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 100 << 20;
    p.high_water = 0.99;
    p.low_water = 0.95;
    choir_engine *e = engine_with(&p, "a", model_dir("a", &fp));
    choir_err err;
    assert_int_equal(choir_engine_add_model(e, "b", model_dir("b", &fp), &choir_model_fake, &err), 0);
    assert_int_equal(choir_engine_add_model(e, "a", model_dir("b", &fp), &choir_model_fake, &err), CHOIR_EINVAL);
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.weights_resident, 0); /* nothing loads before it is needed */
    for (int i = 0; i < 6; i++) {
        choir_job j = tts_job("switching models", NULL);
        j.model_id = i % 2 ? "b" : "a";
        choir_ticket *t = choir_engine_submit(e, &j, NULL, &err);
        assert_non_null(t);
        assert_int_equal(choir_ticket_wait(t, 10, &err), 0);
        choir_ticket_free(t);
        choir_engine_get_stats(e, &st);
        assert_true(st.weights_resident <= p.memory_budget);
    }
    choir_engine_model_info info[4];
    assert_int_equal(choir_engine_models(e, info, 4), 2);
    assert_string_equal(info[0].id, "a");
    assert_string_equal(info[1].kind, "choir-fake");
    assert_int_equal(info[0].loaded, 0);
    assert_int_equal(info[1].loaded, 1); /* the last one used stays */
    assert_int_equal(info[1].resident_bytes, 60 << 20);
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.model_loads, 6);
    assert_int_equal(st.model_unloads, 5);
    assert_int_equal(st.weights_resident, 60 << 20);
    choir_engine_free(e);
}

/* The engine's registry is the one the server reads: find, withdraw (submit
 * refuses it, a job without a model id skips it, the id stays taken by it)
 * and bringing it back from the same directory. */
static void test_withdraw_and_return(void **state)
{
    (void)state;
    choir_fake_params fp = {.weights_bytes = 4096};
    const char *dir_a = model_dir("wa", &fp), *dir_b = model_dir("wb", &fp);
    choir_engine *e = engine_with(NULL, "a", dir_a);
    choir_err err;
    assert_int_equal(choir_engine_add_model(e, "b", dir_b, NULL, &err), 0);
    choir_engine_model_info m;
    assert_int_equal(choir_engine_model_find(e, "a", &m), 0);
    assert_string_equal(m.dir, dir_a);
    assert_true(m.created > 0);
    assert_int_equal(m.withdrawn, 0);
    assert_int_equal(choir_engine_model_find(e, "nope", NULL), CHOIR_ENOTFOUND);

    assert_int_equal(choir_engine_withdraw_model(e, "a", &err), 0);
    assert_int_equal(choir_engine_withdraw_model(e, "a", &err), CHOIR_ENOTFOUND);
    assert_int_equal(choir_engine_model_find(e, "a", NULL), CHOIR_ENOTFOUND);
    choir_engine_model_info info[2];
    assert_int_equal(choir_engine_models(e, info, 2), 2);
    assert_int_equal(info[0].withdrawn, 1);
    choir_job j = tts_job("withdrawn", NULL);
    j.model_id = "a";
    assert_null(choir_engine_submit(e, &j, NULL, &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    /* without a model id the job goes to the first model serving TTS left */
    j.model_id = NULL;
    choir_ticket *t = choir_engine_submit(e, &j, NULL, &err);
    assert_non_null(t);
    assert_int_equal(choir_ticket_wait(t, 10, &err), 0);
    choir_ticket_free(t);
    assert_int_equal(choir_engine_model_find(e, "b", &m), 0);
    assert_int_equal(m.replicas, 1);

    /* the id stays taken by it; the same directory brings it back */
    assert_int_equal(choir_engine_add_model(e, "a", dir_b, NULL, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "already registered"));
    assert_int_equal(choir_engine_add_model(e, "a", dir_a, NULL, &err), 0);
    assert_int_equal(choir_engine_model_find(e, "a", &m), 0);
    j.model_id = "a";
    t = choir_engine_submit(e, &j, NULL, &err);
    assert_non_null(t);
    assert_int_equal(choir_ticket_wait(t, 10, &err), 0);
    choir_ticket_free(t);
    assert_int_equal(choir_engine_models(e, NULL, 0), 2);
    choir_engine_free(e);
}

/* A model that needs 3x (or 10x) its declared estimate overflows its arena
 * once, is retried with the reservation its overflow showed it needs, and
 * every request completes. */
static void test_arena_overflow_retry(void **state)
{
    (void)state;
    const double ratios[2] = {3, 10};
    for (int k = 0; k < 2; k++) {
        choir_fake_params fp = {.fixed_ms = 1, .bytes_per_unit = 64, .true_ratio = ratios[k]};
        choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
        p.memory_budget = 64 << 20;
        p.wait_short_ms = 1;
        choir_log_set_level(CHOIR_LOG_ERROR);
        choir_engine *e = engine_with(&p, "hungry", model_dir("hungry", &fp));
        for (int round = 0; round < 3; round++) {
            choir_ticket *t[4];
            collected c[4];
            for (int i = 0; i < 4; i++) {
                collected_init(&c[i]);
                choir_job j = tts_job(texts[i], &c[i]);
                t[i] = choir_engine_submit(e, &j, NULL, NULL);
                assert_non_null(t[i]);
            }
            for (int i = 0; i < 4; i++) {
                assert_int_equal(choir_ticket_wait(t[i], 10, NULL), 0);
                check_tts_audio(&c[i], texts[i]);
                choir_ticket_free(t[i]);
                collected_free(&c[i]);
            }
        }
        choir_log_set_level(CHOIR_LOG_WARN);
        choir_engine_stats st;
        choir_engine_get_stats(e, &st);
        assert_int_equal(st.completed, 12);
        assert_int_equal(st.failed, 0);
        assert_true(st.arena_peak > 0);
        choir_engine_free(e);
    }
}

/* An estimate of 20 MiB under a 64 MiB budget: a true need of 60 MiB runs
 * (doubling alone would have gone 20, 40, 80 and refused it; the overflow
 * shows 60, and the retry takes all the budget leaves), a true need of 200
 * MiB is refused after one overflow with the figures. */
static void test_arena_overflow_to_budget(void **state)
{
    (void)state;
    const char *text = "twenty characters!!!";
    for (int k = 0; k < 2; k++) {
        choir_fake_params fp = {.fixed_ms = 1, .bytes_per_unit = 1 << 20, .true_ratio = k ? 10 : 3};
        choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
        p.memory_budget = 64 << 20;
        p.wait_short_ms = 1;
        choir_log_set_level(CHOIR_LOG_ERROR);
        choir_engine *e = engine_with(&p, "hungry", model_dir(k ? "huge" : "large", &fp));
        collected c;
        collected_init(&c);
        choir_job j = tts_job(text, &c);
        choir_ticket *t = choir_engine_submit(e, &j, NULL, NULL);
        assert_non_null(t);
        choir_err err = {0};
        int st = choir_ticket_wait(t, 10, &err);
        choir_log_set_level(CHOIR_LOG_WARN);
        if (!k) {
            assert_int_equal(st, 0);
            check_tts_audio(&c, text);
        } else {
            assert_int_equal(st, CHOIR_ETOOBIG);
            assert_non_null(strstr(err.msg, "the memory budget leaves beside the model's weights"));
        }
        choir_ticket_free(t);
        collected_free(&c);
        choir_engine_free(e);
    }
}

static void test_model_failure_is_per_request(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 1, .bytes_per_unit = 64, .fail_on_length = 5};
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 64 << 20;
    choir_engine *e = engine_with(&p, "picky", model_dir("picky", &fp));
    collected good, bad;
    collected_init(&good);
    collected_init(&bad);
    choir_job jg = tts_job("fine!", &good), jb = tts_job("Tiny.", &bad);
    jg.req.in.tts.text = "four";
    choir_ticket *tg = choir_engine_submit(e, &jg, NULL, NULL), *tb = choir_engine_submit(e, &jb, NULL, NULL);
    choir_err err;
    assert_int_equal(choir_ticket_wait(tb, 10, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "refuses length 5"));
    assert_int_equal(choir_ticket_reason(tb), CHOIR_REJECT_FAILED);
    assert_int_equal(bad.finals, 1);
    assert_int_equal(bad.final_status, CHOIR_EINVAL);
    assert_int_equal(choir_ticket_wait(tg, 10, &err), 0);
    check_tts_audio(&good, "four");
    choir_ticket_free(tg);
    choir_ticket_free(tb);
    collected_free(&good);
    collected_free(&bad);
    choir_engine_free(e);
}

static void test_shutdown_fails_the_rest(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 100, .bytes_per_unit = 64};
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 64 << 20;
    p.max_batch = 1;
    choir_engine *e = engine_with(&p, "slow", model_dir("slow2", &fp));
    choir_ticket *t[6];
    collected c[6];
    for (int i = 0; i < 6; i++) {
        collected_init(&c[i]);
        choir_job j = tts_job(texts[i], &c[i]);
        t[i] = choir_engine_submit(e, &j, NULL, NULL);
        assert_non_null(t[i]);
    }
    /* 100 ms per request, one at a time: by 0.25 s one or two have finished,
     * one is running (it is cancelled) and the rest never started. */
    assert_int_equal(choir_engine_shutdown(e, 0.25), CHOIR_ETIMEDOUT);
    int ok = 0, shut = 0, cancelled = 0;
    for (int i = 0; i < 6; i++) {
        assert_true(choir_ticket_done(t[i]));
        assert_int_equal(c[i].finals, 1);
        int rc = choir_ticket_wait(t[i], 0, NULL);
        ok += rc == 0;
        shut += choir_ticket_reason(t[i]) == CHOIR_REJECT_SHUTDOWN;
        cancelled += choir_ticket_reason(t[i]) == CHOIR_REJECT_CANCELLED;
        assert_true(rc == 0 || rc == CHOIR_ECANCELED);
        if (rc == 0)
            check_tts_audio(&c[i], texts[i]);
    }
    assert_true(ok >= 1 && ok <= 2);
    assert_true(cancelled <= 1);
    assert_int_equal(ok + shut + cancelled, 6);
    choir_reject_reason why;
    choir_job j = tts_job("late", NULL);
    assert_null(choir_engine_submit(e, &j, &why, NULL));
    assert_int_equal(why, CHOIR_REJECT_SHUTDOWN);
    assert_int_equal(choir_engine_shutdown(e, 0), 0);
    choir_engine_free(e);
    /* tickets outlive the engine */
    for (int i = 0; i < 6; i++) {
        choir_ticket_free(t[i]);
        collected_free(&c[i]);
    }
}

static choir_engine_stats wait_stats(choir_engine *e, int running, int degraded)
{
    choir_engine_stats st;
    for (int i = 0; i < 400; i++) {
        choir_engine_get_stats(e, &st);
        if (st.running == running && st.degraded == degraded)
            break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return st;
}

/* A batch that reserves more than 85% of the budget degrades the engine:
 * low-priority work is refused until the pressure is gone for a while. */
static void test_degrade_and_recover(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 300, .bytes_per_unit = 64};
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 4500000; /* four 1-s requests reserve 4.1 MB: 91% */
    p.max_batch = 4;
    choir_engine *e = engine_with(&p, "stt", model_dir("stt-pressure", &fp));
    float *x = calloc(16000, sizeof *x);
    choir_job j = {.req.task = CHOIR_TASK_STT, .priority = CHOIR_PRIORITY_NORMAL};
    j.req.in.stt.samples = x;
    j.req.in.stt.n_samples = 16000;
    choir_ticket *t[6];
    for (int i = 0; i < 4; i++)
        assert_non_null(t[i] = choir_engine_submit(e, &j, NULL, NULL));
    choir_engine_stats st = wait_stats(e, 4, 1);
    assert_int_equal(st.running, 4);
    assert_int_equal(st.degraded, 1);
    assert_true(st.memory_reserved + st.weights_resident + st.memory_other <= st.memory_budget);
    choir_reject_reason why;
    choir_err err;
    j.priority = CHOIR_PRIORITY_LOW;
    assert_null(choir_engine_submit(e, &j, &why, &err));
    assert_int_equal(err.code, CHOIR_EBUSY);
    assert_int_equal(why, CHOIR_REJECT_OVERLOAD);
    j.priority = CHOIR_PRIORITY_HIGH;
    assert_non_null(t[4] = choir_engine_submit(e, &j, NULL, NULL));
    for (int i = 0; i < 5; i++)
        assert_int_equal(choir_ticket_wait(t[i], 10, NULL), 0);
    st = wait_stats(e, 0, 0);
    assert_int_equal(st.degraded, 0);
    j.priority = CHOIR_PRIORITY_LOW;
    assert_non_null(t[5] = choir_engine_submit(e, &j, &why, &err));
    assert_int_equal(choir_ticket_wait(t[5], 10, NULL), 0);
    for (int i = 0; i < 6; i++)
        choir_ticket_free(t[i]);
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.rejected[CHOIR_REJECT_OVERLOAD], 1);
    free(x);
    choir_engine_free(e);
}

static void test_detect_and_metrics_text(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 1};
    const char *dir = model_dir("detect", &fp);
    const choir_model_ops *extra[] = {&choir_model_fake};
    choir_err err;
    assert_ptr_equal(choir_model_detect(dir, extra, 1, &err), &choir_model_fake);
    assert_null(choir_model_detect(tu_tmpdir(), NULL, 0, &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_INTERACTIVE_TTS);
    assert_int_equal(p.max_batch, 1);
    assert_int_equal(p.model_options.compute_bf16, 1);
    /* -1 turns the profile's bf16 off (and stays -1 for the models); 0 keeps it. */
    choir_engine_params off = {.profile = CHOIR_PROFILE_INTERACTIVE_TTS, .model_options.compute_bf16 = -1}, r;
    engine_params_resolve(&r, &off);
    assert_int_equal(r.model_options.compute_bf16, -1);
    off.model_options.compute_bf16 = 0;
    engine_params_resolve(&r, &off);
    assert_int_equal(r.model_options.compute_bf16, 1);
    choir_profile prof;
    assert_int_equal(choir_profile_parse("offline-stt", &prof), 0);
    assert_int_equal(prof, CHOIR_PROFILE_OFFLINE_STT);
    assert_int_equal(choir_profile_parse("fastest", &prof), CHOIR_EINVAL);
    p.memory_budget = 32 << 20;
    choir_engine *e = engine_with(&p, "tts-1", dir);
    choir_job j = tts_job("metrics please", NULL);
    choir_ticket *t = choir_engine_submit(e, &j, NULL, NULL);
    assert_int_equal(choir_ticket_wait(t, 10, NULL), 0);
    choir_ticket_free(t);
    char *text = choir_engine_metrics_text(e);
    assert_non_null(text);
    const char *want[] = {
        "# TYPE choir_request_seconds histogram\n",
        "choir_request_seconds_count 1\n",
        "choir_batch_size_bucket{le=\"1\"} 1\n",
        "choir_requests_completed_total 1\n",
        "choir_requests_rejected_total{reason=\"queue_full\"} 0\n",
        "choir_memory_budget_bytes 33554432\n",
        "choir_model_loads_total{model=\"tts-1\"} 1\n",
        "choir_model_loaded{model=\"tts-1\"} 1\n",
        "choir_time_to_first_output_seconds_quantile{quantile=\"0.99\"}",
        "choir_audio_seconds_total 0.14\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i]))
            fail_msg("metrics text lacks '%s'", want[i]);
    choir_free(text);
    choir_engine_free(e);
}

static void test_options(void **state)
{
    (void)state;
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    choir_err err;
    assert_int_equal(choir_engine_apply_option(&p, "--memory-budget", "1.5G", &err), 1);
    assert_int_equal(p.memory_budget, (int64_t)3 << 29);
    assert_int_equal(choir_engine_apply_option(&p, "profile", "audiobook", &err), 1);
    assert_int_equal(p.memory_budget, (int64_t)3 << 29); /* kept across the profile */
    assert_int_equal(p.max_batch, 8);
    assert_int_equal(choir_engine_apply_option(&p, "max-batch", "4", &err), 1);
    assert_int_equal(p.max_batch, 4);
    assert_int_equal(choir_engine_apply_option(&p, "wait-ms", "20", &err), 1);
    assert_true(p.wait_short_ms == 20);
    assert_int_equal(choir_engine_apply_option(&p, "memory-budget", "512MiB", &err), 1);
    assert_int_equal(p.memory_budget, (int64_t)512 << 20);
    assert_int_equal(choir_engine_apply_option(&p, "port", "8080", &err), 0);
    assert_int_equal(choir_engine_apply_option(&p, "max-batch", "0", &err), CHOIR_EINVAL);
    assert_int_equal(choir_engine_apply_option(&p, "max-batch", "2.5", &err), CHOIR_EINVAL);
    assert_int_equal(choir_engine_apply_option(&p, "memory-budget", "lots", &err), CHOIR_EINVAL);
    assert_int_equal(choir_engine_apply_option(&p, "profile", "fast", &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "unknown profile"));
    assert_int_equal(choir_engine_apply_option(&p, "wait-ms", NULL, &err), CHOIR_EINVAL);
    /* Weights are quantized by `choir convert`, not by a load-time flag that
     * no model read (it was accepted and did nothing). */
    assert_int_equal(choir_engine_apply_option(&p, "q-bits", "4", &err), 0);
    assert_null(strstr(choir_engine_options_help(), "q-bits"));
    assert_non_null(strstr(choir_engine_options_help(), "--memory-budget"));
    /* One size parser: "8Gi" is the same 8 GiB as "8G", "8GiB" and "8gb". */
    const char *eight[] = {"8G", "8Gi", "8GiB", "8gb", "8192M", "8388608k"};
    for (size_t i = 0; i < sizeof eight / sizeof eight[0]; i++) {
        p.memory_budget = 0;
        assert_int_equal(choir_engine_apply_option(&p, "memory-budget", eight[i], &err), 1);
        assert_int_equal(p.memory_budget, (int64_t)8 << 30);
        p.gpu_memory_bytes = 0;
        assert_int_equal(choir_engine_apply_option(&p, "gpu-memory", eight[i], &err), 1);
        assert_int_equal(p.gpu_memory_bytes, (int64_t)8 << 30);
    }
    const char *not_sizes[] = {"", "0", "-8G", " 8G", "8 G", "8X", "8iB", "8GG", "inf", "nan", "0x10", "1e30"};
    for (size_t i = 0; i < sizeof not_sizes / sizeof not_sizes[0]; i++) {
        p.memory_budget = 77;
        assert_int_equal(choir_engine_apply_option(&p, "memory-budget", not_sizes[i], &err), CHOIR_EINVAL);
        assert_non_null(strstr(err.msg, "not a size"));
        assert_int_equal(p.memory_budget, 77);
    }
    /* Limits: each option's bounds are taken whole, one past them refused,
     * and the field keeps its value. */
    struct {
        const char *name, *lo, *hi, *below, *above;
    } limits[] = {
        {"max-batch", "1", "64", "0", "65"},
        {"workers", "1", "256", "0", "257"},
        {"queue", "1", "1048576", "0", "1048577"},
        {"high-water", "0.01", "1", "0.001", "1.01"},
        {"gpu-memory-fraction", "0.01", "1", "0", "1.5"},
        {"max-audio-s", "1", "1000000", "0.5", "2e6"},
    };
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        assert_int_equal(choir_engine_apply_option(&p, limits[i].name, limits[i].lo, &err), 1);
        assert_int_equal(choir_engine_apply_option(&p, limits[i].name, limits[i].hi, &err), 1);
        choir_engine_params before = p;
        assert_int_equal(choir_engine_apply_option(&p, limits[i].name, limits[i].below, &err), CHOIR_EINVAL);
        assert_int_equal(choir_engine_apply_option(&p, limits[i].name, limits[i].above, &err), CHOIR_EINVAL);
        assert_non_null(strstr(err.msg, limits[i].name));
        assert_memory_equal(&before, &p, sizeof p);
    }
    assert_int_equal(p.max_batch, 64);
    /* The API refuses what the flags refuse, rather than clamping it. */
    choir_engine_params big = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    big.max_batch = CHOIR_ENGINE_MAX_BATCH + 1;
    assert_null(choir_engine_create(&big, &err));
    assert_int_equal(err.code, CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "max_batch"));
    /* ... every field a flag bounds, by the same row (0 stays "the default") */
    struct {
        const char *field;
        choir_engine_params p;
    } api[] = {
        {"workers", choir_engine_default_params(CHOIR_PROFILE_DEFAULT)},
        {"queue_capacity", choir_engine_default_params(CHOIR_PROFILE_DEFAULT)},
        {"high_water", choir_engine_default_params(CHOIR_PROFILE_DEFAULT)},
        {"wait_short_ms", choir_engine_default_params(CHOIR_PROFILE_DEFAULT)},
        {"max_audio_seconds", choir_engine_default_params(CHOIR_PROFILE_DEFAULT)},
        {"gpu_memory_fraction", choir_engine_default_params(CHOIR_PROFILE_DEFAULT)},
        {"gpu_memory_bytes", choir_engine_default_params(CHOIR_PROFILE_DEFAULT)},
    };
    api[0].p.workers = 257;
    api[1].p.queue_capacity = (1 << 20) + 1;
    api[2].p.high_water = 1.5;
    api[3].p.wait_short_ms = 60001;
    api[4].p.max_audio_seconds = 0.5;
    api[5].p.gpu_memory_fraction = 2;
    api[6].p.gpu_memory_bytes = -1;
    for (size_t i = 0; i < sizeof api / sizeof api[0]; i++) {
        err = (choir_err){0};
        assert_null(choir_engine_create(&api[i].p, &err));
        assert_int_equal(err.code, CHOIR_EINVAL);
        assert_non_null(strstr(err.msg, api[i].field));
    }
    /* Only 0 is "the default": a negative number is refused, for every field
     * (those without a flag too), naming it. */
    struct {
        const char *field;
        choir_engine_params p;
    } neg[21];
    for (size_t i = 0; i < sizeof neg / sizeof neg[0]; i++)
        neg[i].p = (choir_engine_params){0};
    size_t n_neg = 0;
#define NEG(f, v) neg[n_neg].field = #f, neg[n_neg++].p.f = (v)
    NEG(memory_budget, -1);
    NEG(high_water, -0.5);
    NEG(low_water, -0.5);
    NEG(p99_target_ms, -1);
    NEG(max_batch, -1);
    NEG(wait_short_ms, -1);
    NEG(wait_long_ms, -1);
    NEG(long_seconds, -1);
    NEG(max_pad_waste, -0.25);
    NEG(queue_capacity, -1);
    NEG(workers, -1);
    NEG(unload_idle_s, -1);
    NEG(max_audio_seconds, -1);
    NEG(model_options.compute_bf16, -2); /* -1 is "off" */
    NEG(gpu_memory_fraction, -0.5);
    NEG(gpu_memory_bytes, -1);
    NEG(fake_gpus, -1);
    NEG(replica_queue, -1);
    NEG(replica_after_s, -1);
    NEG(replica_idle_s, -1);
    NEG(profile, (choir_profile)-1);
#undef NEG
    assert_int_equal(n_neg, sizeof neg / sizeof neg[0]);
    for (size_t i = 0; i < n_neg; i++) {
        err = (choir_err){0};
        assert_null(choir_engine_create(&neg[i].p, &err));
        assert_int_equal(err.code, CHOIR_EINVAL);
        assert_non_null(strstr(err.msg, neg[i].field));
    }
    /* ... and so is a value above a field's bounds, or NaN (flagless rows) */
    struct {
        const char *field;
        choir_engine_params p;
    } out[10];
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++)
        out[i].p = (choir_engine_params){0};
    size_t n_out = 0;
#define OUT(f, v) out[n_out].field = #f, out[n_out++].p.f = (v)
    OUT(long_seconds, 2e6);
    OUT(long_seconds, NAN);
    OUT(max_pad_waste, 1);
    OUT(unload_idle_s, 2e9);
    OUT(model_options.compute_bf16, 2);
    OUT(fake_gpus, CHOIR_ENGINE_MAX_GPUS + 1);
    OUT(replica_queue, (1 << 20) + 1);
    OUT(replica_after_s, 2e6);
    OUT(replica_idle_s, INFINITY);
    OUT(profile, CHOIR_PROFILE_COUNT);
#undef OUT
    assert_int_equal(n_out, sizeof out / sizeof out[0]);
    for (size_t i = 0; i < n_out; i++) {
        err = (choir_err){0};
        assert_null(choir_engine_create(&out[i].p, &err));
        assert_int_equal(err.code, CHOIR_EINVAL);
        assert_non_null(strstr(err.msg, out[i].field));
    }
    /* low_water given above high_water is refused; left 0, it goes under a
     * lowered high_water instead. */
    choir_engine_params lw = {.high_water = 0.5, .low_water = 0.6};
    assert_null(choir_engine_create(&lw, &err));
    assert_non_null(strstr(err.msg, "low_water 0.6 is above high_water 0.5"));
    lw.low_water = 0;
    choir_engine *lwe = choir_engine_create(&lw, &err);
    assert_non_null(lwe);
    choir_engine_free(lwe);
    /* Every field 0: every default, and every bound of the flagless rows
     * taken whole. */
    choir_engine_params zero = {0};
    choir_engine *ze = choir_engine_create(&zero, &err);
    assert_non_null(ze);
    choir_engine_free(ze);
    choir_engine_params edge = {.low_water = 0.01, .long_seconds = 1e6, .max_pad_waste = 0.99,
                                .unload_idle_s = 1e9, .fake_gpus = 0, .replica_queue = 1 << 20,
                                .replica_after_s = 0.001, .replica_idle_s = 1e9};
    edge.model_options.compute_bf16 = 1;
    choir_engine *ee = choir_engine_create(&edge, &err);
    assert_non_null(ee);
    choir_engine_free(ee);
    /* NULL params: the default profile with a budget from the machine's memory */
    choir_engine *e = choir_engine_create(NULL, &err);
    assert_non_null(e);
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_true(st.memory_budget > 0);
    assert_int_equal(choir_engine_models(e, NULL, 0), 0);
    choir_engine_free(e);
    choir_engine_free(NULL);
    choir_ticket_free(NULL);
}

/* Every allocation failure while creating an engine and registering a model
 * fails cleanly (ASan checks nothing leaks). */
static void test_alloc_failures(void **state)
{
    (void)state;
    choir_fake_params fp = {.fixed_ms = 1};
    const char *dir = model_dir("allocfail", &fp);
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 16 << 20;
    for (int64_t k = 1; k < 1000; k++) {
        choir_err err = {0};
        choir_alloc_fail_after(k);
        choir_engine *e = choir_engine_create(&p, &err);
        int rc = e ? choir_engine_add_model(e, "m", dir, &choir_model_fake, &err) : err.code;
        choir_engine_free(e);
        int64_t used = choir_alloc_fail_after(0);
        if (!e || rc)
            assert_int_equal(err.code, CHOIR_ENOMEM);
        if (used < k) {
            assert_non_null(e);
            assert_int_equal(rc, 0);
            break;
        }
    }
}

int main(void)
{
    choir_log_set_level(CHOIR_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_sequential),
        cmocka_unit_test(test_streaming_pieces),
        cmocka_unit_test(test_stt_text_and_partials),
        cmocka_unit_test(test_refusals_and_cancel),
        cmocka_unit_test(test_deadline_covers_compute),
        cmocka_unit_test(test_backlog_refused_at_submit),
        cmocka_unit_test(test_lazy_load_and_lru),
        cmocka_unit_test(test_withdraw_and_return),
        cmocka_unit_test(test_arena_overflow_retry),
        cmocka_unit_test(test_arena_overflow_to_budget),
        cmocka_unit_test(test_model_failure_is_per_request),
        cmocka_unit_test(test_shutdown_fails_the_rest),
        cmocka_unit_test(test_degrade_and_recover),
        cmocka_unit_test(test_detect_and_metrics_text),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
