// ctest: labels=slow timeout=900 cost=52
/* The SAM-Audio engine adapter (choir_model_sam_audio) in the engine's batch
 * arena (issue #21 part 2), on the fixture's tiny model (randw weights, hop
 * 320; Euler, 2 steps to keep it short): a batch of two requests (one
 * streaming and chunked, one whole) run in an arena of their estimates gives
 * the target and residual it gives without one, bit for bit, and one request
 * gives what the library's choir_sam_separate gives; the measured peak is
 * within the estimate, nothing is counted as activations outside the arena
 * (only the emitted audio and the text's ids, as I/O and other memory), and
 * the arena comes back empty; an arena much too small fails the batch with
 * CHOIR_ENOMEM before any audio, and through the engine that batch is
 * retried and succeeds; a wrong estimate (x4, a third of the peak) is
 * corrected from the measured peaks (tests/support/calib.h), and x0.1 too:
 * its first request's retries reserve what the overflow showed it lacked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/model.h"
#include "choir/sam_audio.h"
#include "calib.h"
#include "testutil.h"

#define N_LONG 20113 /* three chunks of 0.2 s over 0.05 s */
#define N_SHORT 4000
#define N_CALIB 3200 /* one pass of 10 frames per batch of the engine runs */

static char g_dir[4096];
static float *g_x;

static int setup(void **state) {
    (void)state;
    choir_err err = {0};
    snprintf(g_dir, sizeof g_dir, "%s/sam", tu_tmpdir());
    if (tu_sam_tiny_dir(g_dir, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    g_x = malloc(N_LONG * sizeof *g_x);
    tu_fill_uniform(g_x, N_LONG, 7, -0.5f, 0.5f);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    free(g_x);
    return 0;
}

/* What a request delivered: the target from its outputs, the residual from
 * its callback. */
typedef struct captured {
    float t[N_LONG], r[N_LONG];
    int64_t nt, nr;
    int partial, finals;
} captured;

static int on_output(void *user, const choir_output *o) {
    captured *c = user;
    if (o->n_samples) {
        assert_true(c->nt + o->n_samples <= N_LONG);
        memcpy(c->t + c->nt, o->samples, (size_t)o->n_samples * sizeof(float));
        c->nt += o->n_samples;
        c->partial++;
    }
    c->finals += o->final;
    return 0;
}

static void on_residual(void *user, const float *r, int64_t n, int64_t offset) {
    captured *c = user;
    assert_int_equal(offset, c->nr);
    assert_true(offset + n <= N_LONG);
    memcpy(c->r + offset, r, (size_t)n * sizeof(float));
    c->nr += n;
}

/* Request 0: streaming, 3 chunks; request 1: whole, one pass, another text. */
typedef struct req_set {
    choir_sam_request x[2];
    choir_request req[2];
    choir_request *reqs[2];
} req_set;

static void make_reqs(req_set *s, captured *c) {
    static const char *desc[2] = {"man speaking", "a dog barking loudly"};
    static const int64_t n[2] = {N_LONG, N_SHORT};
    for (int i = 0; i < 2; i++) {
        memset(&c[i], 0, sizeof c[i]);
        s->x[i] = (choir_sam_request){.description = desc[i], .steps = 2, .method = 1,
                                      .on_residual = on_residual, .residual_user = &c[i]};
        choir_request *r = &s->req[i];
        memset(r, 0, sizeof *r);
        r->task = CHOIR_TASK_STS;
        r->in.sts = (choir_sts_input){.samples = g_x, .n_samples = n[i], .sample_rate = CHOIR_SAM_RATE};
        if (i == 0) {
            r->in.sts.chunk_seconds = 0.2, r->in.sts.has_chunk = 1;
            r->in.sts.overlap_seconds = 0.05, r->in.sts.has_overlap = 1;
        }
        r->extra = &s->x[i];
        r->stream = i == 0;
        r->on_output = on_output;
        r->on_output_user = &c[i];
        s->reqs[i] = r;
    }
}

static void test_batch_in_arena(void **state) {
    (void)state;
    choir_err err = {0};
    const choir_model_ops *ops = &choir_model_sam_audio;
    void *w = ops->load(g_dir, NULL, &err);
    if (!w) fail_msg("%s", err.msg);
    static captured ref[2], got[2];
    req_set rs;

    /* Without an arena: each call reserves its own plan. */
    make_reqs(&rs, ref);
    assert_int_equal(ops->run_batch(w, rs.reqs, 2, NULL, &err), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rs.req[i].status, 0);
        assert_int_equal(ref[i].finals, 1);
        assert_int_equal(ref[i].nt, rs.req[i].in.sts.n_samples);
        assert_int_equal(ref[i].nr, ref[i].nt);
    }
    assert_int_equal(ref[0].partial, 3); /* chunk by chunk */
    assert_int_equal(ref[1].partial, 1);

    /* In an arena of the batch's estimates (the engine's reservation). */
    make_reqs(&rs, got);
    int64_t est = ops->estimate(w, &rs.req[0]) + ops->estimate(w, &rs.req[1]);
    choir_arena *arena = choir_arena_create((size_t)est, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(arena);
    int64_t act0 = choir_mem_current(CHOIR_MEM_ACTIVATIONS), io0 = choir_mem_current(CHOIR_MEM_IO),
            other0 = choir_mem_current(CHOIR_MEM_OTHER);
    choir_mem_reset_peaks();
    assert_int_equal(ops->run_batch(w, rs.reqs, 2, arena, &err), 0);
    int64_t act_out = choir_mem_peak(CHOIR_MEM_ACTIVATIONS) - act0, io_out = choir_mem_peak(CHOIR_MEM_IO) - io0,
            other_out = choir_mem_peak(CHOIR_MEM_OTHER) - other0;
    size_t hw = choir_arena_high_water(arena);
    printf("batch of 2: arena peak %.3f MB of %.3f MB estimated (%.1f%%); outside: %lld activations, %lld io, "
           "%lld other (streams, the text's ids)\n",
           hw / 1e6, est / 1e6, 100.0 * (double)hw / (double)est, (long long)act_out, (long long)io_out,
           (long long)other_out);
    assert_true(hw > 0 && hw <= (size_t)est);
    assert_int_equal(choir_arena_used(arena), 0);
    assert_int_equal(act_out, 0);
    assert_true(io_out == 0);
    assert_true(other_out < 64 << 10);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rs.req[i].status, 0);
        assert_int_equal(got[i].finals, 1);
        assert_int_equal(got[i].partial, ref[i].partial);
        assert_int_equal(got[i].nt, ref[i].nt);
        assert_int_equal(got[i].nr, ref[i].nr);
        assert_memory_equal(got[i].t, ref[i].t, (size_t)ref[i].nt * sizeof(float));
        assert_memory_equal(got[i].r, ref[i].r, (size_t)ref[i].nr * sizeof(float));
    }

    /* One request in an arena of its estimate equals the library's
     * separation without one. */
    make_reqs(&rs, got);
    choir_arena *one = choir_arena_create((size_t)ops->estimate(w, &rs.req[0]), CHOIR_MEM_ACTIVATIONS, &err);
    assert_int_equal(ops->run_batch(w, rs.reqs, 1, one, &err), 0);
    printf("one request: arena peak %.3f MB of %.3f MB estimated\n", choir_arena_high_water(one) / 1e6,
           choir_arena_capacity(one) / 1e6);
    choir_sam_params p;
    choir_sam_default_params(&p);
    p.method = CHOIR_SAM_EULER, p.steps = 2, p.chunk_seconds = 0.2, p.overlap_seconds = 0.05;
    static float lt[N_LONG], lr[N_LONG];
    assert_int_equal(choir_sam_separate(w, g_x, N_LONG, "man speaking", NULL, 0, &p, lt, lr, &err), 0);
    assert_int_equal(got[0].nt, N_LONG);
    assert_memory_equal(got[0].t, lt, sizeof lt);
    assert_memory_equal(got[0].r, lr, sizeof lr);
    choir_arena_free(one);

    /* Much too small: CHOIR_ENOMEM before any audio (for the engine to
     * retry), the requests untouched, the arena back as it was. */
    make_reqs(&rs, got);
    choir_arena *small = choir_arena_create(hw / 3, CHOIR_MEM_ACTIVATIONS, &err);
    assert_int_equal(ops->run_batch(w, rs.reqs, 2, small, &err), CHOIR_ENOMEM);
    printf("a third of the peak: %s\n", err.msg);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(got[i].partial + got[i].finals + (int)got[i].nr, 0);
        assert_int_equal(rs.req[i].done, 0);
        assert_int_equal(rs.req[i].status, 0);
    }
    assert_int_equal(choir_arena_used(small), 0);
    choir_arena_free(small);
    choir_arena_free(arena);
    ops->free(w);
}

/* Through the engine: each batch's peak inside the arena it was admitted
 * with; a wrong estimate corrected from those peaks, an overflowed batch
 * retried until it fits. */
static void test_engine_calibration(void **state) {
    (void)state;
    const choir_model_ops *ops = &choir_model_sam_audio;
    static choir_sam_request x = {.description = "man speaking", .steps = 2, .method = 1};
    choir_job j;
    memset(&j, 0, sizeof j);
    j.req.task = CHOIR_TASK_STS;
    j.req.in.sts = (choir_sts_input){.samples = g_x, .n_samples = N_CALIB, .sample_rate = CHOIR_SAM_RATE};
    j.req.extra = &x;
    j.priority = CHOIR_PRIORITY_NORMAL;
    /* x4, then a third of the peak (x0.33: the plan's peak is within 1% of
     * its estimate here) */
    tu_cal_check("sam-audio", ops, g_dir, &j);

    /* x0.1: ten times too small. The first request's batch overflows; each
     * retry reserves what the arena showed the run lacked (at least double
     * the room), so it succeeds in fewer retries than doubling alone would
     * take (four, 0.1 -> 1.6), and the factor then holds every batch after
     * it, shrinking toward the measured peak. */
    static tu_cal_run r;
    tu_cal_run_scaled(ops, g_dir, &j, 0.1, 4, &r);
    for (int k = 0; k < r.batches && k < TU_CAL_MAX; k++)
        printf("sam-audio x0.1 batch %d: arena %zu, peak %zu, rc %d\n", k, r.cap[k], r.peak[k], r.rc[k]);
    int over = 0;
    while (over < r.batches && r.rc[over] == CHOIR_ENOMEM) over++;
    assert_true(over >= 1 && over <= 3);
    assert_int_equal(r.batches, 4 + over);
    for (int k = 0; k < 4; k++) assert_int_equal(r.status[k], 0);
    for (int k = over; k < r.batches; k++) {
        assert_int_equal(r.rc[k], 0);
        assert_true(r.peak[k] > 0 && r.peak[k] <= r.cap[k]);
        if (k > over + 1) assert_true(r.cap[k] < r.cap[k - 1]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_in_arena),
        cmocka_unit_test(test_engine_calibration),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
