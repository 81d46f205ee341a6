/* Continuous batching through the engine (choir_batch_join, the adapter's
 * run_batch_join): a VibeVoice request queued while another one decodes
 * joins the running batch between its steps, when its own reservation fits
 * beside it, and both give exactly what each gives alone; when it does not
 * fit, it waits in the queue and runs as a batch of its own afterwards.
 *
 * One worker, so a second batch cannot start while the first runs: the
 * requests are of lengths in different batching buckets (the full fixture
 * audio and a third of it), so the scheduler never puts them in one batch
 * at dispatch, and the second is still queued when the first's decode
 * begins (it is submitted right after the first, which encodes and prefills
 * for a while before its first step). Weights are the vv-fox-chunked
 * fixture's (randw-v1): untrained, so each request fails as "not a JSON
 * transcript" with its decoded text in the message, which is what is
 * compared. */
// ctest: timeout=300
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/engine.h"
#include "choir/model.h"
#include "choir/randw.h"
#include "choir/safetensors.h"
#include "choir/vibevoice.h"
#include "testutil.h"

#define CASE "vibevoice-asr/vv-fox-chunked"

static char g_dir[1024];
static choir_st *g_ref;

static int setup(void **state) {
    (void)state;
    choir_err err;
    snprintf(g_dir, sizeof g_dir, "%s", tu_tmpfile("vvjoin"));
    char man[1024], cfg[1024], tok[1200];
    snprintf(man, sizeof man, "%s", tu_fixture(CASE "/manifest.json"));
    snprintf(cfg, sizeof cfg, "%s", tu_fixture(CASE "/config.json"));
    if (choir_randw_write_checkpoint(man, cfg, g_dir, &err)) return -1;
    snprintf(tok, sizeof tok, "%s/tokenizer.json", g_dir);
    tu_copy_file(tu_fixture("real/tokenizer/qwen2.5/tokenizer.json"), tok);
    g_ref = choir_st_open(tu_fixture(CASE "/reference.safetensors"), &err);
    return g_ref ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    choir_st_close(g_ref);
    return 0;
}

/* The two requests: A decodes 48 tokens of the whole audio, B 6 of its
 * first third (loop guard off, end-of-text ignored, so the counts are
 * exact). */
enum { NREQ = 2 };
static const int MAX_NEW[NREQ] = {48, 6};

static void request_of(int i, choir_vibevoice_opts *o, choir_request *r) {
    const choir_st_tensor *iv = choir_st_find(g_ref, "input_values");
    assert_non_null(iv);
    choir_vibevoice_default_opts(o);
    o->max_new_tokens = MAX_NEW[i];
    o->ignore_eos = true;
    o->loop_max_period = 0;
    memset(r, 0, sizeof *r);
    r->task = CHOIR_TASK_STT;
    r->in.stt.samples = iv->data;
    r->in.stt.n_samples = i == 0 ? iv->numel : iv->numel / 3;
    r->in.stt.sample_rate = 24000;
    r->extra = o;
}

typedef struct outcome {
    int finals;
    int status;
    char error[CHOIR_ERR_MSG_MAX];
} outcome;

static int collect(void *user, const choir_output *out) {
    outcome *o = user;
    if (out->final) {
        o->finals++;
        o->status = out->status;
        snprintf(o->error, sizeof o->error, "%s", out->error ? out->error : "");
    }
    return 0;
}

/* Each request alone, straight through the adapter: its error text (the
 * decoded tokens), its estimate, and the estimate before the weights are
 * loaded (the 7B model's sizes: what the engine's first batch reserves). */
static void alone(char want[NREQ][CHOIR_ERR_MSG_MAX], int64_t est[NREQ], int64_t est_unloaded[NREQ],
                  int64_t *weights) {
    const choir_model_ops *ops = &choir_model_vibevoice;
    choir_err err = {0};
    void *w = ops->load(g_dir, NULL, &err);
    assert_non_null(w);
    *weights = ops->resident_bytes(w);
    for (int i = 0; i < NREQ; i++) {
        choir_vibevoice_opts o;
        choir_request r;
        request_of(i, &o, &r);
        est[i] = ops->estimate(w, &r);
        est_unloaded[i] = ops->estimate(NULL, &r);
        choir_arena *arena = choir_arena_create((size_t)est[i], CHOIR_MEM_ACTIVATIONS, &err);
        assert_non_null(arena);
        choir_request *rp = &r;
        assert_int_equal(ops->run_batch(w, &rp, 1, arena, &err), 0);
        assert_int_equal(r.status, CHOIR_EINTERNAL);
        char tokens[32];
        snprintf(tokens, sizeof tokens, "(%d tokens", MAX_NEW[i]);
        assert_non_null(strstr(r.error, tokens));
        snprintf(want[i], CHOIR_ERR_MSG_MAX, "%s", r.error);
        choir_arena_free(arena);
    }
    ops->free(w);
}

/* Runs A then B (submitted right after) through an engine of one worker
 * with `budget` bytes of host memory; returns the engine's stats. */
static void run_engine(int64_t budget, const char want[NREQ][CHOIR_ERR_MSG_MAX], choir_engine_stats *stats) {
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.workers = 1;
    p.memory_budget = budget;
    p.high_water = 0.99;
    choir_err err = {0};
    choir_engine *e = choir_engine_create(&p, &err);
    assert_non_null(e);
    assert_int_equal(choir_engine_add_model(e, "vv", g_dir, &choir_model_vibevoice, &err), 0);
    choir_vibevoice_opts o[NREQ];
    outcome got[NREQ];
    choir_ticket *t[NREQ];
    memset(got, 0, sizeof got);
    for (int i = 0; i < NREQ; i++) {
        choir_job j = {0};
        request_of(i, &o[i], &j.req);
        j.model_id = "vv";
        j.priority = CHOIR_PRIORITY_NORMAL;
        j.on_output = collect;
        j.user = &got[i];
        choir_reject_reason why;
        t[i] = choir_engine_submit(e, &j, &why, &err);
        if (!t[i]) fail_msg("submit %d refused: %s", i, err.msg);
    }
    for (int i = 0; i < NREQ; i++) {
        choir_ticket_wait(t[i], -1, &err);
        choir_ticket_free(t[i]);
        assert_int_equal(got[i].finals, 1);
        assert_int_equal(got[i].status, CHOIR_EINTERNAL);
        /* The same tokens as alone. */
        assert_string_equal(got[i].error, want[i]);
    }
    choir_engine_get_stats(e, stats);
    assert_true(stats->memory_reserved == 0);
    choir_engine_shutdown(e, 5.0);
    choir_engine_free(e);
}

static void test_join_and_queue(void **state) {
    (void)state;
    char want[NREQ][CHOIR_ERR_MSG_MAX];
    int64_t est[NREQ], est0[NREQ], weights;
    alone(want, est, est0, &weights);
    assert_true(est[1] < est[0] && est0[1] < est0[0]);
    int64_t held = choir_mem_current(CHOIR_MEM_IO) + choir_mem_current(CHOIR_MEM_OTHER);
    printf("estimates %lld / %lld bytes (%lld / %lld before the load), weights %lld, held %lld\n",
           (long long)est[0], (long long)est[1], (long long)est0[0], (long long)est0[1], (long long)weights,
           (long long)held);

    /* Room for both: B joins A's batch, which is the only batch run. */
    choir_engine_stats s;
    run_engine(weights + held + 2 * (est0[0] + est0[1]), want, &s);
    printf("room for both: %llu batches, %llu joined\n", (unsigned long long)s.batches,
           (unsigned long long)s.joined);
    assert_int_equal(s.joined, 1);
    assert_int_equal(s.batches, 1);
    assert_int_equal(s.batch_size[1], 1);
    assert_int_equal(s.completed + s.failed, 2);

    /* Room for A's batch (formed before the load, so reserving A's
     * unloaded estimate) and half of B (estimated again once the model is
     * loaded) beside it: B is not admitted into the running batch, waits,
     * and runs alone after A: two batches, no join. */
    run_engine(weights + held + est0[0] + est[1] / 2, want, &s);
    printf("room for one: %llu batches, %llu joined\n", (unsigned long long)s.batches,
           (unsigned long long)s.joined);
    assert_int_equal(s.joined, 0);
    assert_int_equal(s.batches, 2);
    assert_int_equal(s.batch_size[1], 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_and_queue),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
