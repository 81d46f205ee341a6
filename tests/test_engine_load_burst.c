/* A burst of requests to a model that cannot load costs one load attempt:
 * the requests queued while it ran fail with it (CHOIR_EIO naming the model
 * and the adapter's reason), counted as failed requests, instead of each
 * batch loading the model again (on a GPU each attempt may upload gigabytes
 * before it fails). A request submitted after the failure loads the model
 * again, so fixing its files and retrying works. On the CPU and on
 * simulated GPUs. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#include "choir/engine.h"
#include "models/fake/fake_model.h"

#define MIB ((int64_t)1 << 20)
#define BURST 8

/* The fake adapter with its load counted and held at a gate, so that the
 * whole burst is queued before the first attempt ends; while `failing`, the
 * load fails as a model with a missing file does. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    const choir_model_ops *base;
    int calls, open, failing;
} gate = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void *gated_load(const char *dir, const choir_model_options *opt, choir_err *err)
{
    pthread_mutex_lock(&gate.lock);
    gate.calls++;
    pthread_cond_broadcast(&gate.cond);
    while (!gate.open)
        pthread_cond_wait(&gate.cond, &gate.lock);
    int failing = gate.failing;
    pthread_mutex_unlock(&gate.lock);
    if (failing) {
        choir_err_set(err, CHOIR_EFORMAT, "%s/tokenizer.json: missing", dir);
        return NULL;
    }
    return gate.base->load(dir, opt, err);
}

static void gate_reset(const choir_model_ops *base, int failing)
{
    pthread_mutex_lock(&gate.lock);
    gate.base = base;
    gate.calls = 0;
    gate.open = 0;
    gate.failing = failing;
    pthread_mutex_unlock(&gate.lock);
}

static void gate_open(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.open = 1;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
}

/* Waits until the first load attempt is under way (held at the gate). */
static void gate_wait_first_call(void)
{
    pthread_mutex_lock(&gate.lock);
    while (gate.calls == 0)
        pthread_cond_wait(&gate.cond, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
}

static int gate_calls(void)
{
    pthread_mutex_lock(&gate.lock);
    int n = gate.calls;
    pthread_mutex_unlock(&gate.lock);
    return n;
}

static choir_job tts_job(const char *text)
{
    choir_job j = {0};
    j.model_id = "burst";
    j.req.task = CHOIR_TASK_TTS;
    j.req.in.tts.text = text;
    j.priority = CHOIR_PRIORITY_NORMAL;
    return j;
}

/* Submits BURST requests while the first load is held, lets it fail, and
 * checks every request failed with it after exactly one attempt; then the
 * model is "fixed" and a new request loads it and succeeds. */
static void burst_then_fix(const choir_engine_params *p, const choir_model_ops *base, const char *name)
{
    choir_model_ops ops = *base;
    ops.load = gated_load;
    gate_reset(base, 1);
    choir_fake_params fp = {.fixed_ms = 1, .bytes_per_unit = 64, .weights_bytes = 1 * MIB};
    const char *dir = tu_tmpfile(name);
    choir_err err = {0};
    assert_int_equal(choir_fake_model_write(dir, &fp, &err), 0);
    choir_engine *e = choir_engine_create(p, &err);
    assert_non_null(e);
    assert_int_equal(choir_engine_add_model(e, "burst", dir, &ops, &err), 0);

    static const char *texts[BURST] = {"one", "two", "three", "four", "five", "six", "seven", "eight"};
    choir_ticket *t[BURST];
    for (int i = 0; i < BURST; i++) {
        choir_job j = tts_job(texts[i]);
        t[i] = choir_engine_submit(e, &j, NULL, &err);
        assert_non_null(t[i]);
    }
    /* All of them are queued (or in the batch that carries the load, or, on
     * the CPU, in a second batch dispatched to the same replica, which waits
     * for the load) before it ends. */
    gate_wait_first_call();
    gate_open();
    for (int i = 0; i < BURST; i++) {
        choir_err got = {0};
        assert_int_equal(choir_ticket_wait(t[i], 30, &got), CHOIR_EIO);
        if (!strstr(got.msg, "model 'burst' could not be loaded: ") || !strstr(got.msg, "tokenizer.json: missing"))
            fail_msg("request %d failed with '%s'", i, got.msg);
        assert_int_equal(choir_ticket_reason(t[i]), CHOIR_REJECT_FAILED);
        choir_ticket_free(t[i]);
    }
    assert_int_equal(gate_calls(), 1);

    /* counted as failed requests (as those of the batch that carried the
     * load always were), not refused at admission */
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    assert_int_equal(st.failed, BURST);
    assert_int_equal(st.completed, 0);
    assert_int_equal(st.rejected[CHOIR_REJECT_FAILED], BURST);
    choir_engine_model_info info;
    assert_int_equal(choir_engine_model_find(e, "burst", &info), 0);
    assert_non_null(strstr(info.load_error, "tokenizer.json: missing"));
    choir_engine_queue_info q;
    assert_int_equal(choir_engine_get_queue_info(e, "burst", &q), 0);
    assert_int_equal(q.queued, 0);

    /* the operator fixes the model: a request submitted now loads it again */
    pthread_mutex_lock(&gate.lock);
    gate.failing = 0;
    pthread_mutex_unlock(&gate.lock);
    choir_job j = tts_job("fixed");
    choir_ticket *ok = choir_engine_submit(e, &j, NULL, &err);
    assert_non_null(ok);
    assert_int_equal(choir_ticket_wait(ok, 30, &err), 0);
    choir_ticket_free(ok);
    assert_int_equal(gate_calls(), 2);
    assert_int_equal(choir_engine_model_find(e, "burst", &info), 0);
    assert_string_equal(info.load_error, "");
    choir_engine_free(e);
}

/* On the CPU with batches of 2 and 2 workers: the batch carrying the load,
 * perhaps a second batch on the same replica (it waits for the load and
 * fails with it), and the rest queued. */
static void test_burst_cpu(void **state)
{
    (void)state;
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 256 * MIB;
    p.max_batch = 2;
    p.workers = 2;
    burst_then_fix(&p, &choir_model_fake, "burst_cpu");
}

/* On two simulated GPUs: a GPU replica takes one batch at a time, so before
 * the change every further batch placed a new replica and loaded it again,
 * on either GPU. */
static void test_burst_gpu(void **state)
{
    (void)state;
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 256 * MIB;
    p.max_batch = 2;
    p.fake_gpus = 2;
    p.fake_gpu_bytes[0] = 1000 * MIB;
    p.fake_gpu_bytes[1] = 1000 * MIB;
    burst_then_fix(&p, &choir_model_fake_gpu, "burst_gpu");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_cpu),
        cmocka_unit_test(test_burst_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
