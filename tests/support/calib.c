/* The engine-calibration check shared by the model tests (calib.h). */
#include "calib.h"

#include <stdio.h>

#include "choir/arena.h"
#include "choir/log.h"
#include "testutil.h"

static const choir_model_ops *g_ops;
static void *g_loaded; /* the adapter's own load of the model, for estimates before the engine's */
static double g_scale;
static tu_cal_run *g_run;

/* Before the engine has loaded the model an adapter estimates from its
 * largest checkpoint; the test's estimates are those of the loaded model
 * from the start, so that every batch's arena follows from them. */
static int64_t scaled_estimate(const void *w, const choir_request *r) {
    return (int64_t)((double)g_ops->estimate(w ? w : g_loaded, r) * g_scale);
}

static int recording_run(void *w, choir_request *const *reqs, int n, choir_arena *arena,
                         choir_err *err) {
    int rc = g_ops->run_batch(w, reqs, n, arena, err);
    int k = g_run->batches++;
    if (k < TU_CAL_MAX) {
        g_run->cap[k] = choir_arena_capacity(arena);
        g_run->peak[k] = choir_arena_high_water(arena);
        g_run->rc[k] = rc;
    }
    return rc;
}

static void run_scaled(const choir_model_ops *ops, const char *dir, const choir_job *job,
                       double scale, int rounds, tu_cal_run *out, int any) {
    choir_model_ops wrapped = *ops;
    wrapped.estimate = scaled_estimate;
    wrapped.run_batch = recording_run;
    /* Every batch through the recorder: one request at a time never joins
     * a running batch anyway. */
    wrapped.run_batch_join = NULL;
    g_ops = ops;
    g_scale = scale;
    g_run = out;
    out->batches = 0;
    choir_err err = {0};
    g_loaded = ops->load(dir, NULL, &err);
    assert_non_null(g_loaded);
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = (int64_t)4 << 30;
    p.wait_short_ms = 1;
    choir_engine *e = choir_engine_create(&p, &err);
    assert_non_null(e);
    int rc = choir_engine_add_model(e, "calib", dir, &wrapped, &err);
    if (rc) printf("add_model: %s\n", err.msg);
    assert_int_equal(rc, 0);
    int first = 0, have_first = 0;
    for (int k = 0; k < rounds; k++) {
        choir_job j = *job;
        choir_ticket *t = choir_engine_submit(e, &j, NULL, &err);
        if (!t) printf("submit: %s\n", err.msg);
        assert_non_null(t);
        /* Finished, whatever the model made of it (untrained weights may
         * fail a request as malformed), but never for want of memory: an
         * overflowed batch is retried until it fits. */
        int st = choir_ticket_wait(t, 300, &err);
        if (k < TU_CAL_MAX) out->status[k] = st;
        choir_ticket_free(t);
        assert_true(st != CHOIR_ETIMEDOUT);
        if (any && st == CHOIR_ENOMEM) continue;
        assert_true(st != CHOIR_ENOMEM);
        if (!have_first) first = st, have_first = 1;
        assert_int_equal(st, first);
    }
    choir_engine_free(e);
    ops->free(g_loaded);
    g_loaded = NULL;
    g_ops = NULL;
    g_run = NULL;
}

void tu_cal_run_scaled(const choir_model_ops *ops, const char *dir, const choir_job *job,
                       double scale, int rounds, tu_cal_run *out) {
    run_scaled(ops, dir, job, scale, rounds, out, 0);
}

void tu_cal_run_scaled_any(const choir_model_ops *ops, const char *dir, const choir_job *job,
                           double scale, int rounds, tu_cal_run *out) {
    run_scaled(ops, dir, job, scale, rounds, out, 1);
}

size_t tu_cal_check(const char *name, const choir_model_ops *ops, const char *dir,
                    const choir_job *job) {
    static tu_cal_run r;
    choir_log_set_level(CHOIR_LOG_ERROR);

    /* Four times too large: shrinks batch by batch, every peak inside. */
    tu_cal_run_scaled(ops, dir, job, 4.0, 6, &r);
    assert_int_equal(r.batches, 6);
    for (int k = 0; k < 6; k++) {
        printf("%s x4 batch %d: arena %zu, peak %zu\n", name, k, r.cap[k], r.peak[k]);
        assert_int_equal(r.rc[k], 0);
        assert_true(r.peak[k] > 0 && r.peak[k] <= r.cap[k]);
        if (k) assert_true(r.cap[k] < r.cap[k - 1]);
    }
    assert_true(r.cap[5] < r.cap[0] / 4 * 3);
    size_t peak = r.peak[0];

    /* A third of what a batch really takes (the scale that makes the first
     * reservation peak / 3: the first run's arena was 4 estimates): overflows,
     * is retried with the room it showed it lacked, and then holds. */
    double under = (double)peak / (double)r.cap[0] * 4.0 / 3.0;
    tu_cal_run_scaled(ops, dir, job, under, 4, &r);
    int over = 0;
    for (int k = 0; k < r.batches && k < TU_CAL_MAX; k++) {
        printf("%s x%.3f batch %d: arena %zu, peak %zu, rc %d\n", name, under, k, r.cap[k],
               r.peak[k], r.rc[k]);
        if (r.rc[k] == CHOIR_ENOMEM) over++;
        else assert_true(r.rc[k] == 0 && r.peak[k] > 0 && r.peak[k] <= r.cap[k]);
    }
    assert_true(over >= 1 && over <= 3);
    assert_int_equal(r.batches, 4 + over);
    /* once calibrated, no further overflow */
    for (int k = r.batches - 3; k < r.batches; k++) assert_int_equal(r.rc[k], 0);
    choir_log_set_level(CHOIR_LOG_WARN);
    return peak;
}
