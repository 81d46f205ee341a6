/* Deterministic simulation of the scheduler core: a virtual clock, fake models
 * with declared memory costs and latencies, thousands of requests, and fake
 * GPUs with their own memory budgets. Every dispatch, rejection, load and
 * unload is checked against the scheduler's promises. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "choir/alloc.h"
#include "engine/sched.h"

#define MAX_REQ 20000
#define MAX_RUN 64
#define MAX_MODELS 4
#define MAX_DEV SCHED_MAX_DEVICES

typedef struct fake_model {
    int64_t weights;
    int max_batch;
    int64_t bytes_per_unit; /* declared estimate per length unit */
    double true_ratio;      /* real peak / declared estimate */
    int hides_need;         /* an overflow does not say what the batch needs (as a model
                               whose refusal was not the arena's) */
    double fixed_s;         /* per-batch latency */
    double per_unit_s;      /* per padded length unit */
    double load_s;
    /* GPUs: gpu = 1 lets the model run there, with dev_weights device bytes of
     * weights and dev_bytes_per_unit of device estimate; a batch on the CPU
     * takes cpu_slowdown times as long (0 = 1) */
    int gpu;
    int64_t dev_weights, dev_bytes_per_unit;
    double cpu_slowdown;
} fake_model;

typedef struct pending_load {
    int model, device;
    double done_t;
} pending_load;

typedef struct sim_req {
    sched_req r;
    int submitted, accepted, dispatched, completed, rejected, cancelled;
    choir_reject_reason reason;
    double dispatch_t, done_t;
    int batch_n, device;
} sim_req;

typedef struct running {
    sched_action a;
    double start_t, done_t;
    int64_t peak;
    int64_t need; /* on overflow: the capacity the arena saw it needs (0: not known) */
    int overflow;
} running;

typedef struct sim {
    sched *s;
    sched_config c;
    fake_model models[MAX_MODELS];
    int n_models;
    sim_req *reqs;
    int n_reqs;
    running run[MAX_RUN];
    int n_run;
    pending_load loads_pending[MAX_RUN];
    int n_loads;
    int replica[MAX_MODELS][MAX_DEV]; /* the simulation's own view: 1 while a replica is counted */
    int dev_batches[MAX_MODELS][MAX_DEV];
    int replica_loads, replica_unloads_gpu;
    double last_done;
    double now;
    /* observations */
    int64_t max_used;  /* weights + reserved */
    int64_t max_true;  /* weights + real peaks of running batches */
    int batches, batch_items, max_batch_seen, overflows, unloads, loads;
    int degraded_seen, recovered_after_degraded;
    double worst_waste;
    int size_hist[SCHED_MAX_BATCH + 1];
} sim;

static void sim_init(sim *m, const sched_config *c, const fake_model *models, int n_models, int n_reqs)
{
    memset(m, 0, sizeof *m);
    m->c = *c;
    m->s = sched_create(c, NULL);
    assert_non_null(m->s);
    m->n_models = n_models;
    for (int i = 0; i < n_models; i++) {
        m->models[i] = models[i];
        assert_int_equal(sched_add_model(m->s, models[i].weights, models[i].max_batch, NULL), i);
        if (models[i].gpu)
            sched_model_set_gpu(m->s, i, models[i].dev_weights);
    }
    m->reqs = calloc((size_t)n_reqs, sizeof *m->reqs);
    assert_non_null(m->reqs);
    m->n_reqs = n_reqs;
}

static void sim_free(sim *m)
{
    sched_free(m->s);
    free(m->reqs);
}

static sched_config base_config(void)
{
    sched_config c = {
        .budget = 1000 << 20,
        .high_water = 0.85,
        .low_water = 0.70,
        .degrade_hold_s = 1.0,
        .max_batch = 8,
        .wait_short_s = 0.050,
        .wait_long_s = 0.250,
        .max_pad_waste = 0.25,
        .queue_capacity = 256,
        .workers = 2,
        /* the engine's defaults (engine_params_resolve) */
        .replica_queue = 16,
        .replica_after_s = 1.0,
        .replica_idle_s = 30.0,
    };
    return c;
}

static void check_state(sim *m)
{
    sched_state st;
    sched_get_state(m->s, &st);
    int64_t used = st.weights + st.reserved;
    if (used > m->max_used)
        m->max_used = used;
    int64_t truth = st.weights;
    for (int i = 0; i < m->n_run; i++)
        truth += m->run[i].peak;
    if (truth > m->max_true)
        m->max_true = truth;
    assert_true(used <= st.budget);
    assert_true(truth <= st.budget);
    /* Every GPU: the scheduler's accounts match the replicas and batches the
     * simulation saw, and stay within that GPU's budget. */
    for (int d = 1; d < sched_device_count(m->s); d++) {
        sched_device_state ds;
        sched_get_device(m->s, d, &ds);
        int64_t w = 0, r = 0;
        for (int k = 0; k < m->n_models; k++)
            if (m->replica[k][d])
                w += m->models[k].dev_weights;
        for (int i = 0; i < m->n_run; i++)
            if (m->run[i].a.device == d)
                r += m->run[i].a.dev_reserved;
        assert_int_equal(ds.weights, w);
        assert_int_equal(ds.reserved, r);
        assert_true(w + r <= ds.budget);
        assert_true(ds.peak <= ds.budget);
    }
    if (st.degraded)
        m->degraded_seen = 1;
    else if (m->degraded_seen)
        m->recovered_after_degraded = 1;
}

static void on_dispatch(sim *m, const sched_action *a)
{
    const fake_model *fm = &m->models[a->model];
    assert_true(a->n >= 1 && a->n <= m->c.max_batch && a->n <= fm->max_batch);
    assert_true(m->n_run < MAX_RUN);
    assert_true(m->n_run + m->n_loads < m->c.workers);
    assert_true(a->device >= 0 && a->device < sched_device_count(m->s));
    if (a->device > 0) {
        /* only a GPU model goes to a GPU, and its replica there runs one batch at a time */
        assert_true(fm->gpu);
        for (int i = 0; i < m->n_run; i++)
            assert_false(m->run[i].a.model == a->model && m->run[i].a.device == a->device);
        int64_t maxdev = 0;
        for (int i = 0; i < a->n; i++)
            if (a->reqs[i]->dev_est_bytes > maxdev)
                maxdev = a->reqs[i]->dev_est_bytes;
        assert_int_equal(a->dev_reserved, maxdev * a->n);
    } else {
        assert_int_equal(a->dev_reserved, 0);
    }
    if (a->need_load) {
        assert_int_equal(m->replica[a->model][a->device], 0);
        m->replica[a->model][a->device] = 1;
    } else {
        assert_int_equal(m->replica[a->model][a->device], 1);
    }
    m->dev_batches[a->model][a->device]++;
    int64_t maxlen = 0, sumlen = 0;
    for (int i = 0; i < a->n; i++) {
        sim_req *q = (sim_req *)a->reqs[i]->user;
        assert_int_equal(q->r.model, a->model);
        assert_int_equal(q->r.task, a->reqs[0]->task);
        assert_true(q->accepted && !q->dispatched && !q->rejected && !q->cancelled);
        /* a deadline that has passed is never dispatched */
        assert_true(q->r.deadline > m->now);
        if (i > 0)
            assert_true(a->reqs[i - 1]->length <= a->reqs[i]->length);
        q->dispatched = 1;
        q->dispatch_t = m->now;
        q->batch_n = a->n;
        q->device = a->device;
        if (a->reqs[i]->length > maxlen)
            maxlen = a->reqs[i]->length;
        sumlen += a->reqs[i]->length;
    }
    double waste = 1.0 - (double)sumlen / ((double)maxlen * a->n);
    assert_true(waste < m->c.max_pad_waste + 1e-9);
    if (waste > m->worst_waste)
        m->worst_waste = waste;
    running *r = &m->run[m->n_run++];
    r->a = *a;
    int64_t truth = (int64_t)((double)(maxlen * fm->bytes_per_unit * a->n) * fm->true_ratio);
    /* The arena is exactly the reservation: a model that needs more fails with
     * ENOMEM having used (at most) all of it. */
    r->overflow = truth > a->reserved;
    r->peak = r->overflow ? a->reserved : truth;
    /* a fake model asks for its whole need at once, so the refused
     * allocation shows all of it */
    r->need = r->overflow && !fm->hides_need ? truth : 0;
    r->start_t = m->now;
    double slow = a->device == 0 && fm->cpu_slowdown > 0 ? fm->cpu_slowdown : 1;
    r->done_t = m->now + slow * (fm->fixed_s + fm->per_unit_s * (double)(maxlen * a->n)) +
                (a->need_load ? fm->load_s : 0);
    if (a->need_load)
        m->loads++;
    m->batches++;
    m->batch_items += a->n;
    m->size_hist[a->n]++;
    if (a->n > m->max_batch_seen)
        m->max_batch_seen = a->n;
}

static void run_decisions(sim *m)
{
    sched_action a;
    while (sched_decide(m->s, m->now, &a)) {
        if (a.kind == SCHED_DISPATCH) {
            on_dispatch(m, &a);
        } else if (a.kind == SCHED_REJECT) {
            sim_req *q = (sim_req *)a.rejected->user;
            assert_true(q->accepted && !q->dispatched && !q->rejected);
            assert_int_not_equal(a.reason, CHOIR_REJECT_NONE);
            q->rejected = 1;
            q->reason = a.reason;
        } else if (a.kind == SCHED_LOAD) {
            /* a replica on a GPU of a GPU model that has none there yet */
            assert_true(a.device > 0 && m->models[a.model].gpu);
            assert_int_equal(m->replica[a.model][a.device], 0);
            assert_true(m->n_run + m->n_loads < m->c.workers);
            m->replica[a.model][a.device] = 1;
            m->loads_pending[m->n_loads++] = (pending_load){a.model, a.device, m->now + m->models[a.model].load_s};
            m->replica_loads++;
        } else {
            assert_int_equal(a.kind, SCHED_UNLOAD);
            for (int i = 0; i < m->n_run; i++)
                assert_false(m->run[i].a.model == a.model && m->run[i].a.device == a.device);
            assert_int_equal(m->replica[a.model][a.device], 1);
            m->replica[a.model][a.device] = 0;
            m->unloads++;
            if (a.device > 0 && sched_model_replicas(m->s, a.model, NULL) > 0)
                m->replica_unloads_gpu++;
        }
        check_state(m);
    }
}

static void complete_due(sim *m)
{
    for (int i = 0; i < m->n_loads;) {
        pending_load *l = &m->loads_pending[i];
        if (l->done_t > m->now) {
            i++;
            continue;
        }
        const fake_model *fm = &m->models[l->model];
        assert_int_equal(sched_model_loaded(m->s, l->model, l->device, fm->weights, fm->dev_weights), 0);
        assert_true(sched_replica_ready(m->s, l->model, l->device));
        m->loads++;
        *l = m->loads_pending[--m->n_loads];
        check_state(m);
    }
    for (int i = 0; i < m->n_run;) {
        running *r = &m->run[i];
        if (r->done_t > m->now) {
            i++;
            continue;
        }
        if (r->overflow) {
            for (int k = 0; k < r->a.n; k++) {
                sim_req *q = (sim_req *)r->a.reqs[k]->user;
                q->dispatched = 0;
            }
            sched_requeue(m->s, &r->a, m->now, r->peak, r->need);
            m->overflows++;
        } else {
            sched_batch_done(m->s, &r->a, m->now, r->peak, r->done_t - r->start_t, 0, 0);
            for (int k = 0; k < r->a.n; k++) {
                sim_req *q = (sim_req *)r->a.reqs[k]->user;
                assert_int_equal(q->completed, 0);
                q->completed = 1;
                q->done_t = m->now;
                m->last_done = m->now;
                sched_observe_latency(m->s, m->now - q->r.arrival, m->now);
            }
        }
        m->run[i] = m->run[--m->n_run];
        check_state(m);
    }
}

static void submit(sim *m, int idx)
{
    sim_req *q = &m->reqs[idx];
    q->submitted = 1;
    q->r.user = q;
    q->r.id = (uint64_t)idx;
    if (q->r.est_bytes == 0)
        q->r.est_bytes = q->r.length * m->models[q->r.model].bytes_per_unit;
    if (q->r.dev_est_bytes == 0 && m->models[q->r.model].gpu)
        q->r.dev_est_bytes = q->r.length * m->models[q->r.model].dev_bytes_per_unit;
    choir_reject_reason why = CHOIR_REJECT_NONE;
    int rc = sched_submit(m->s, &q->r, m->now, &why, NULL);
    if (rc == 0) {
        q->accepted = 1;
    } else {
        assert_int_not_equal(why, CHOIR_REJECT_NONE);
        q->rejected = 1;
        q->reason = why;
    }
}

static double next_completion(const sim *m)
{
    double t = INFINITY;
    for (int i = 0; i < m->n_run; i++)
        if (m->run[i].done_t < t)
            t = m->run[i].done_t;
    for (int i = 0; i < m->n_loads; i++)
        if (m->loads_pending[i].done_t < t)
            t = m->loads_pending[i].done_t;
    return t;
}

/* Runs until every request has arrived and finished. `arrival[i]` are sorted. */
static void sim_run(sim *m, const double *arrival)
{
    int next = 0;
    for (int guard = 0; guard < 10000000; guard++) {
        double t = next_completion(m);
        if (next < m->n_reqs && arrival[next] < t)
            t = arrival[next];
        double ev = sched_next_event(m->s, m->now);
        if (ev < t)
            t = ev;
        if (!isfinite(t))
            break;
        if (t > m->now)
            m->now = t;
        complete_due(m);
        while (next < m->n_reqs && arrival[next] <= m->now)
            submit(m, next++);
        run_decisions(m);
    }
    assert_int_equal(next, m->n_reqs);
    assert_int_equal(m->n_run, 0);
    assert_int_equal(m->n_loads, 0);
}

static void check_exactly_once(const sim *m)
{
    for (int i = 0; i < m->n_reqs; i++) {
        const sim_req *q = &m->reqs[i];
        int outcomes = q->completed + q->rejected + q->cancelled;
        assert_int_equal(outcomes, 1);
        if (q->rejected)
            assert_int_not_equal(q->reason, CHOIR_REJECT_NONE);
    }
}

static uint64_t rng_state;
static double rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Full batches go out at once; a lone request goes out at its wait limit. */
static void test_batch_by_size_and_wait(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.max_batch = 4;
    c.workers = 4;
    fake_model fm = {.weights = 10 << 20, .max_batch = 16, .bytes_per_unit = 1000, .true_ratio = 0.5,
                     .fixed_s = 0.010, .per_unit_s = 1e-5};
    sim m;
    sim_init(&m, &c, &fm, 1, 5);
    double arrival[5] = {0, 0, 0, 0, 1.0};
    for (int i = 0; i < 5; i++)
        m.reqs[i].r.length = 100 + i;
    for (int i = 0; i < 5; i++)
        m.reqs[i].r.deadline = INFINITY;
    sim_run(&m, arrival);
    check_exactly_once(&m);
    for (int i = 0; i < 4; i++) {
        assert_true(m.reqs[i].dispatch_t == 0.0);
        assert_int_equal(m.reqs[i].batch_n, 4);
    }
    assert_int_equal(m.reqs[4].batch_n, 1);
    assert_true(fabs(m.reqs[4].dispatch_t - 1.050) < 1e-9);
    sim_free(&m);
}

/* Lengths far apart never share a batch; near ones do. */
static void test_padding_bounded(void **state)
{
    (void)state;
    sched_config c = base_config();
    fake_model fm = {.weights = 1 << 20, .max_batch = 8, .bytes_per_unit = 10, .true_ratio = 1.0,
                     .fixed_s = 0.01};
    sim m;
    sim_init(&m, &c, &fm, 1, 4);
    double arrival[4] = {0, 0, 0, 0};
    int64_t lens[4] = {100, 105, 1000, 1010};
    for (int i = 0; i < 4; i++) {
        m.reqs[i].r.length = lens[i];
        m.reqs[i].r.deadline = INFINITY;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    assert_int_equal(m.batches, 2);
    assert_int_equal(m.reqs[0].batch_n, 2);
    assert_int_equal(m.reqs[2].batch_n, 2);
    sim_free(&m);
}

/* A high-priority request that arrives behind a backlog runs before it. */
static void test_priority_first(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.workers = 1;
    c.max_batch = 1;
    fake_model fm = {.weights = 1 << 20, .max_batch = 1, .bytes_per_unit = 10, .true_ratio = 1.0, .fixed_s = 0.1};
    sim m;
    sim_init(&m, &c, &fm, 1, 20);
    double arrival[20];
    for (int i = 0; i < 20; i++) {
        arrival[i] = i < 19 ? 0.0 : 0.05;
        m.reqs[i].r.length = 50;
        m.reqs[i].r.deadline = INFINITY;
        m.reqs[i].r.priority = i < 19 ? CHOIR_PRIORITY_LOW : CHOIR_PRIORITY_HIGH;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    /* the first low request was running at 0.05; the high one goes next, at 0.1 */
    assert_true(fabs(m.reqs[19].dispatch_t - 0.1) < 1e-9);
    sim_free(&m);
}

/* A low-priority request behind an endless stream of high-priority ones
 * waits while they go first, then ages into their level and is served. */
static void test_low_priority_not_starved(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.workers = 1;
    c.max_batch = 1;
    fake_model fm = {.weights = 1 << 20, .max_batch = 1, .bytes_per_unit = 10, .true_ratio = 1.0, .fixed_s = 0.1};
    int n = 201;
    sim m;
    sim_init(&m, &c, &fm, 1, n);
    double arrival[201];
    for (int i = 0; i < n; i++) {
        /* request 1 is the low one; high ones arrive faster than they run */
        arrival[i] = i <= 1 ? 0.0 : 0.09 * (i - 1);
        m.reqs[i].r.length = 50;
        m.reqs[i].r.deadline = INFINITY;
        m.reqs[i].r.priority = i == 1 ? CHOIR_PRIORITY_LOW : CHOIR_PRIORITY_HIGH;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    /* It lets the high ones go first until it has aged two levels (LOW ->
     * HIGH), then, being the oldest at that level, goes next: long before the
     * stream (18 s) ends. */
    double aging = 10 * c.wait_long_s;
    assert_true(m.reqs[1].dispatch_t >= 2 * aging);
    assert_true(m.reqs[1].dispatch_t <= 2 * aging + 0.1 + 1e-9);
    sim_free(&m);
}

/* Requests whose deadline passes in the queue leave with reason "deadline";
 * none is dispatched after its deadline (checked in on_dispatch). */
static void test_deadlines(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.workers = 1;
    c.max_batch = 2;
    fake_model fm = {.weights = 1 << 20, .max_batch = 2, .bytes_per_unit = 10, .true_ratio = 1.0, .fixed_s = 0.2};
    sim m;
    sim_init(&m, &c, &fm, 1, 40);
    double arrival[40];
    for (int i = 0; i < 40; i++) {
        arrival[i] = 0.01 * i;
        m.reqs[i].r.length = 10;
        m.reqs[i].r.deadline = arrival[i] + 1.0;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    int late = 0, done = 0;
    for (int i = 0; i < 40; i++) {
        if (m.reqs[i].rejected) {
            assert_int_equal(m.reqs[i].reason, CHOIR_REJECT_DEADLINE);
            late++;
        }
        done += m.reqs[i].completed;
    }
    assert_true(late > 0);
    assert_true(done >= 8);
    sim_free(&m);
}

static void test_refusals(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.queue_capacity = 3;
    c.budget = 100 << 20;
    fake_model fm = {.weights = 50 << 20, .max_batch = 4, .bytes_per_unit = 1 << 10, .true_ratio = 1.0};
    sched *s = sched_create(&c, NULL);
    assert_non_null(s);
    assert_int_equal(sched_add_model(s, fm.weights, fm.max_batch, NULL), 0);
    sched_req r[5];
    memset(r, 0, sizeof r);
    choir_reject_reason why;
    choir_err err;
    for (int i = 0; i < 5; i++) {
        r[i].id = (uint64_t)i;
        r[i].length = 10;
        r[i].est_bytes = 1 << 20;
        r[i].deadline = INFINITY;
    }
    r[3].est_bytes = 60 << 20; /* 50 MiB weights + 60 MiB > 100 MiB */
    for (int i = 0; i < 3; i++)
        assert_int_equal(sched_submit(s, &r[i], 0, &why, &err), 0);
    assert_int_equal(sched_submit(s, &r[3], 0, &why, &err), CHOIR_ETOOBIG);
    assert_int_equal(why, CHOIR_REJECT_TOO_LARGE);
    assert_non_null(strstr(err.msg, "budget"));
    assert_int_equal(sched_submit(s, &r[4], 0, &why, &err), CHOIR_EBUSY);
    assert_int_equal(why, CHOIR_REJECT_QUEUE_FULL);
    /* cancelling a queued request frees its place */
    assert_int_equal(sched_cancel(s, &r[1]), 1);
    assert_int_equal(sched_cancel(s, &r[1]), 0);
    assert_int_equal(sched_submit(s, &r[4], 0, &why, &err), 0);
    sched_drain(s);
    r[1].state = 0;
    assert_int_equal(sched_submit(s, &r[1], 0, &why, &err), CHOIR_ECANCELED);
    assert_int_equal(why, CHOIR_REJECT_SHUTDOWN);
    /* draining dispatches at once, without waiting for the wait limit */
    sched_action a;
    assert_int_equal(sched_decide(s, 0, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.need_load, 1);
    assert_int_equal(a.n, 3);
    sched_batch_done(s, &a, 0.1, 3 << 20, 0.1, 0, 0);
    sched_free(s);
}

/* Three models whose weights do not all fit: least-recently-used idle ones are
 * unloaded to make room, and memory never passes the budget. */
static void test_lru_unload(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.budget = 300 << 20;
    c.high_water = 0.99;
    c.low_water = 0.9;
    fake_model fm[3];
    for (int i = 0; i < 3; i++)
        fm[i] = (fake_model){.weights = 120 << 20, .max_batch = 4, .bytes_per_unit = 1000, .true_ratio = 1.0,
                             .fixed_s = 0.02, .per_unit_s = 1e-6, .load_s = 0.05};
    sim m;
    sim_init(&m, &c, fm, 3, 300);
    double arrival[300];
    for (int i = 0; i < 300; i++) {
        arrival[i] = 0.02 * i;
        m.reqs[i].r.model = (i / 10) % 3;
        m.reqs[i].r.length = 100;
        m.reqs[i].r.est_bytes = 100 * 1000;
        m.reqs[i].r.deadline = INFINITY;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    for (int i = 0; i < 300; i++)
        assert_true(m.reqs[i].completed);
    assert_true(m.unloads >= 5);
    assert_true(m.loads >= 6);
    assert_true(m.max_used <= c.budget);
    sim_free(&m);
}

/* An estimate that is half the truth overflows once, then calibrates. */
static void test_calibration(void **state)
{
    (void)state;
    sched_config c = base_config();
    fake_model fm = {.weights = 1 << 20, .max_batch = 4, .bytes_per_unit = 1000, .true_ratio = 2.0,
                     .fixed_s = 0.01};
    sim m;
    sim_init(&m, &c, &fm, 1, 200);
    double arrival[200];
    for (int i = 0; i < 200; i++) {
        arrival[i] = 0.005 * i;
        m.reqs[i].r.length = 200 + (i % 7);
        m.reqs[i].r.est_bytes = m.reqs[i].r.length * 1000;
        m.reqs[i].r.deadline = INFINITY;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    assert_true(m.overflows >= 1 && m.overflows <= 2);
    double f = sched_model_factor(m.s, 0);
    assert_true(f >= 2.0 && f <= 2.0 * 1.1 * 1.05);
    sim_free(&m);
}

/* When calibration shows a queued request can never fit, it is refused
 * (too_large) instead of waiting forever: at once when the overflow showed
 * the need (120 MiB beyond the 90 the budget leaves), and, when it did not,
 * after the room has doubled to all the budget leaves (40, 80, 90 MiB). */
static void test_grown_estimate_refused(void **state)
{
    (void)state;
    for (int hides = 0; hides < 2; hides++) {
        sched_config c = base_config();
        c.budget = 100 << 20;
        c.high_water = 0.99;
        c.low_water = 0.98;
        fake_model fm = {.weights = 10 << 20, .max_batch = 4, .bytes_per_unit = 1 << 20, .true_ratio = 3.0,
                         .fixed_s = 0.01, .hides_need = hides};
        sim m;
        sim_init(&m, &c, &fm, 1, 1);
        double arrival[1] = {0};
        m.reqs[0].r.length = 40; /* declares 40 MiB, needs 120 MiB */
        m.reqs[0].r.deadline = INFINITY;
        sim_run(&m, arrival);
        check_exactly_once(&m);
        assert_int_equal(m.overflows, hides ? 3 : 1);
        assert_true(m.reqs[0].rejected);
        assert_int_equal(m.reqs[0].reason, CHOIR_REJECT_TOO_LARGE);
        sim_free(&m);
    }
}

/* A request whose need the budget holds runs, however wrong its estimate:
 * declared 40 MiB, needs 85 of the 90 the budget leaves beside the weights.
 * Doubling alone would go 40, 80, 160 (refused); the overflow shows the
 * need, and the retry takes all the budget leaves. A ten times too small
 * estimate (8 MiB, of a 80 MiB need) is corrected at the first retry. */
static void test_overflow_grows_to_budget(void **state)
{
    (void)state;
    const int64_t length[2] = {40, 8};
    const double ratio[2] = {85.0 / 40.0, 10.0};
    for (int k = 0; k < 2; k++) {
        sched_config c = base_config();
        c.budget = 100 << 20;
        c.high_water = 0.99;
        c.low_water = 0.98;
        fake_model fm = {.weights = 10 << 20, .max_batch = 4, .bytes_per_unit = 1 << 20, .true_ratio = ratio[k],
                         .fixed_s = 0.01};
        sim m;
        sim_init(&m, &c, &fm, 1, 1);
        double arrival[1] = {0};
        m.reqs[0].r.length = length[k];
        m.reqs[0].r.deadline = INFINITY;
        sim_run(&m, arrival);
        check_exactly_once(&m);
        assert_int_equal(m.overflows, 1);
        assert_true(m.reqs[0].completed);
        assert_true(m.max_used <= c.budget);
        sim_free(&m);
    }
}

/* Memory held outside the engine's accounts delays admission (polled) and
 * never makes a request too large. */
static void test_external_memory(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.budget = 100 << 20;
    c.high_water = 0.99;
    c.low_water = 0.98;
    sched *s = sched_create(&c, NULL);
    assert_int_equal(sched_add_model(s, 10 << 20, 4, NULL), 0);
    sched_req r = {.id = 1, .length = 10, .est_bytes = 50 << 20, .deadline = INFINITY};
    assert_int_equal(sched_submit(s, &r, 0, NULL, NULL), 0);
    sched_set_external(s, 60 << 20);
    sched_action a;
    assert_int_equal(sched_decide(s, 1.0, &a), 0);
    double ev = sched_next_event(s, 1.0);
    assert_true(ev > 1.0 && ev <= 1.1);
    sched_set_external(s, 30 << 20);
    assert_int_equal(sched_decide(s, ev, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    sched_state st;
    sched_get_state(s, &st);
    assert_true(st.weights + st.reserved + st.external <= st.budget);
    sched_batch_done(s, &a, ev + 0.1, 40 << 20, 0.1, 0, 0);
    sched_free(s);
}

/* Continuous batching (sched_join): a running batch takes queued requests of
 * its model and task, the most urgent first, each with its own reservation,
 * while it has room and each fits the budget; the first that does not fit
 * stays queued (and so do those behind it). A joined request holds no worker
 * slot, and its reservation goes back when it is done or requeued. */
static void test_join(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.budget = 100 << 20;
    c.high_water = 0.99;
    c.low_water = 0.98;
    c.workers = 1;
    sched *s = sched_create(&c, NULL);
    assert_int_equal(sched_add_model(s, 10 << 20, 4, NULL), 0);
    sched_req r[6];
    memset(r, 0, sizeof r);
    /* A first; then B (other task), C, D (20 MiB each), E (40 MiB), F. */
    int64_t est[6] = {30 << 20, 1 << 20, 20 << 20, 20 << 20, 40 << 20, 1 << 20};
    for (int i = 0; i < 6; i++) {
        r[i].id = (uint64_t)i;
        r[i].length = 100 * (i + 1);
        r[i].est_bytes = est[i];
        r[i].deadline = INFINITY;
        r[i].task = i == 1;
        r[i].arrival = 0.01 * i;
    }
    assert_int_equal(sched_submit(s, &r[0], 0, NULL, NULL), 0);
    sched_action a, j[4];
    assert_int_equal(sched_decide(s, 1.0, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.n, 1);
    for (int i = 1; i < 6; i++) assert_int_equal(sched_submit(s, &r[i], 0.01 * i, NULL, NULL), 0);
    /* Nothing else may start: the one worker is busy. */
    sched_action b;
    assert_int_equal(sched_decide(s, 5.0, &b), 0);
    /* Room for 2 more (4 less the 2 decoding): C then D, 20 MiB each beside
     * 10 weights + 30; B is of another task. */
    assert_int_equal(sched_join(s, &a, 2, 5.0, j, 4), 2);
    assert_true(j[0].reqs[0] == &r[2] && j[1].reqs[0] == &r[3]);
    assert_true(j[0].joined && j[0].n == 1 && j[0].reserved == est[2]);
    sched_state st;
    sched_get_state(s, &st);
    assert_int_equal(st.reserved, est[0] + est[2] + est[3]);
    assert_int_equal(st.running_batches, 1);
    assert_int_equal(st.running_reqs, 3);
    /* Full (4 decoding): nothing. Room again, but E (40 MiB) does not fit
     * beside 80 MiB: it stays queued, and so does F behind it. */
    assert_int_equal(sched_join(s, &a, 4, 5.0, j + 2, 4), 0);
    assert_int_equal(sched_join(s, &a, 3, 5.0, j + 2, 4), 0);
    assert_int_equal(sched_model_queued(s, 0), 3);
    /* C is done: its 20 MiB come back, E fits now (beside 10 + 30 + 20). */
    sched_join_done(s, &j[0], 6.0, 10 << 20);
    assert_int_equal(r[2].state, SCHED_FINISHED);
    assert_int_equal(sched_join(s, &a, 2, 6.0, j + 2, 4), 2);
    assert_true(j[2].reqs[0] == &r[4] && j[3].reqs[0] == &r[5]);
    sched_get_state(s, &st);
    assert_true(st.weights + st.reserved <= st.budget);
    /* F overflowed its arena: back in the queue, the factor grown. */
    double f0 = sched_model_factor(s, 0);
    sched_join_requeue(s, &j[3], 7.0, 0);
    assert_int_equal(r[5].state, SCHED_QUEUED);
    assert_true(sched_model_factor(s, 0) > f0);
    sched_join_done(s, &j[1], 7.0, 10 << 20);
    sched_join_done(s, &j[2], 7.0, 10 << 20);
    sched_batch_done(s, &a, 8.0, 20 << 20, 7.0, 0, 0);
    sched_get_state(s, &st);
    assert_int_equal(st.reserved, 0);
    assert_int_equal(st.running_reqs, 0);
    assert_int_equal(st.running_batches, 0);
    /* B and F are still queued and now dispatch as batches of their own. */
    assert_int_equal(sched_model_queued(s, 0), 2);
    sched_drain(s);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(sched_decide(s, 9.0, &b), 1);
        assert_int_equal(b.kind, SCHED_DISPATCH);
        sched_batch_done(s, &b, 9.5, 1 << 20, 0.5, 0, 0);
    }
    sched_free(s);
}

/* Heavy load on a small budget degrades (smaller batches, low priority
 * refused), and recovers once the load stops. */
static void test_degradation(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.budget = 100 << 20;
    c.workers = 4;
    c.max_batch = 8;
    fake_model fm = {.weights = 20 << 20, .max_batch = 8, .bytes_per_unit = 4096, .true_ratio = 1.0,
                     .fixed_s = 0.05, .per_unit_s = 2e-5};
    int n = 3000;
    sim m;
    sim_init(&m, &c, &fm, 1, n);
    double *arrival = calloc((size_t)n, sizeof *arrival);
    rng_state = 7;
    for (int i = 0; i < n; i++) {
        /* a burst for the first 2000 (5 s), then a trickle */
        arrival[i] = i < 2000 ? 0.0025 * i : 5.0 + 0.5 * (i - 2000);
        m.reqs[i].r.length = 500 + (int64_t)(rnd() * 500);
        m.reqs[i].r.est_bytes = m.reqs[i].r.length * 4096;
        m.reqs[i].r.priority = i % 3;
        m.reqs[i].r.deadline = INFINITY;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    assert_true(m.degraded_seen);
    assert_true(m.recovered_after_degraded);
    int overload = 0, late_ok = 0;
    for (int i = 0; i < n; i++) {
        if (m.reqs[i].rejected && m.reqs[i].reason == CHOIR_REJECT_OVERLOAD) {
            assert_int_equal(m.reqs[i].r.priority, CHOIR_PRIORITY_LOW);
            overload++;
        }
        if (i >= 2100 && m.reqs[i].completed)
            late_ok++;
    }
    assert_true(overload > 0);
    /* after recovery the trickle's low-priority requests are served again */
    assert_int_equal(late_ok, n - 2100);
    sched_state st;
    sched_get_state(m.s, &st);
    assert_int_equal(st.degraded, 0);
    free(arrival);
    sim_free(&m);
}

/* p99 latency above its target degrades too. */
static void test_latency_degradation(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.p99_target_s = 0.5;
    c.workers = 1;
    fake_model fm = {.weights = 1 << 20, .max_batch = 8, .bytes_per_unit = 1, .true_ratio = 1.0, .fixed_s = 0.3};
    sim m;
    sim_init(&m, &c, &fm, 1, 400);
    double arrival[400];
    for (int i = 0; i < 400; i++) {
        arrival[i] = i < 300 ? 0.02 * i : 20.0 + 1.0 * (i - 300);
        m.reqs[i].r.length = 10;
        m.reqs[i].r.priority = CHOIR_PRIORITY_NORMAL;
        m.reqs[i].r.deadline = INFINITY;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    assert_true(m.degraded_seen);
    assert_true(m.recovered_after_degraded);
    sim_free(&m);
}

/* Thousands of mixed requests over three models: the budget is never
 * exceeded, every request ends exactly once with a reason when refused,
 * batches form, and high priority waits less than low. */
static void test_mixed_load(void **state)
{
    (void)state;
    sched_config c = base_config();
    c.budget = 1000 << 20;
    c.workers = 3;
    c.queue_capacity = 128;
    fake_model fm[3] = {
        {.weights = 150 << 20, .max_batch = 8, .bytes_per_unit = 2000, .true_ratio = 0.8, .fixed_s = 0.02,
         .per_unit_s = 2e-6, .load_s = 0.2},
        {.weights = 250 << 20, .max_batch = 16, .bytes_per_unit = 50, .true_ratio = 1.3, .fixed_s = 0.05,
         .per_unit_s = 2e-8, .load_s = 0.4},
        {.weights = 200 << 20, .max_batch = 4, .bytes_per_unit = 20, .true_ratio = 0.5, .fixed_s = 0.01,
         .per_unit_s = 1e-7, .load_s = 0.1},
    };
    int n = 6000;
    sim m;
    sim_init(&m, &c, fm, 3, n);
    double *arrival = calloc((size_t)n, sizeof *arrival);
    rng_state = 12345;
    double t = 0;
    for (int i = 0; i < n; i++) {
        t += -log(1.0 - rnd()) * 0.008; /* ~125 requests/s */
        arrival[i] = t;
        sim_req *q = &m.reqs[i];
        q->r.model = (int)(rnd() * 3);
        q->r.length = q->r.model == 0 ? 10 + (int64_t)(exp(rnd() * 5.5)) : 1600 + (int64_t)(rnd() * 480000);
        q->r.is_long = q->r.length > 160000;
        q->r.task = q->r.model == 0 ? (int)(rnd() * 2) : 1; /* model 0 serves two tasks */
        q->r.est_bytes = q->r.length * fm[q->r.model].bytes_per_unit;
        q->r.priority = (int)(rnd() * 3);
        q->r.deadline = rnd() < 0.2 ? t + 0.5 + rnd() * 3 : INFINITY;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    assert_true(m.max_true <= c.budget);
    assert_true(m.max_batch_seen > 1);
    int completed = 0;
    double wait_hi = 0, wait_lo = 0;
    int n_hi = 0, n_lo = 0;
    for (int i = 0; i < n; i++) {
        sim_req *q = &m.reqs[i];
        if (!q->completed)
            continue;
        completed++;
        if (q->r.priority == CHOIR_PRIORITY_HIGH) {
            wait_hi += q->dispatch_t - q->r.arrival;
            n_hi++;
        } else if (q->r.priority == CHOIR_PRIORITY_LOW) {
            wait_lo += q->dispatch_t - q->r.arrival;
            n_lo++;
        }
    }
    int reasons[CHOIR_REJECT_COUNT] = {0};
    for (int i = 0; i < n; i++)
        if (m.reqs[i].rejected)
            reasons[m.reqs[i].reason]++;
    print_message("mixed: rejected queue_full %d, overload %d, deadline %d, too_large %d\n",
                  reasons[CHOIR_REJECT_QUEUE_FULL], reasons[CHOIR_REJECT_OVERLOAD], reasons[CHOIR_REJECT_DEADLINE],
                  reasons[CHOIR_REJECT_TOO_LARGE]);
    assert_true(completed > n / 2);
    assert_true(n_hi > 0 && n_lo > 0);
    assert_true(wait_hi / n_hi < wait_lo / n_lo);
    print_message("mixed: %d/%d completed, %d batches (mean %.2f), worst padding %.3f, peak %.0f%% of budget, "
                  "%d loads, %d unloads, %d overflow retries\n",
                  completed, n, m.batches, (double)m.batch_items / m.batches, m.worst_waste,
                  100.0 * (double)m.max_true / (double)c.budget, m.loads, m.unloads, m.overflows);
    free(arrival);
    sim_free(&m);
}


#define GIB ((int64_t)1 << 30)

static sched_config gpu_config(int n_gpus, const int64_t *budgets)
{
    sched_config c = base_config();
    c.budget = 64 * GIB;
    c.workers = 4;
    c.max_batch = 8;
    c.queue_capacity = 8192;
    c.n_gpus = n_gpus;
    for (int i = 0; i < n_gpus; i++)
        c.gpu_budget[i] = budgets[i];
    c.replica_idle_s = 5.0;
    return c;
}

/* One request of model `mi` at time 0, run to the end; returns the device it ran on. */
static int device_of_first_batch(sim *m, int mi)
{
    for (int i = 0; i < m->n_reqs; i++)
        if (m->reqs[i].r.model == mi && m->reqs[i].completed)
            return m->reqs[i].device;
    return -1;
}

/* Placement: a GPU model goes to the GPU where it leaves the most room; a
 * model too big for any GPU, and one that cannot use a GPU, run on the CPU. */
static void test_gpu_placement(void **state)
{
    (void)state;
    int64_t budgets[2] = {8 * GIB, 12 * GIB};
    sched_config c = gpu_config(2, budgets);
    fake_model fm[4] = {
        /* big: 6 GiB on a GPU; fits gpu1 (6 GiB left) better than gpu0 (2 GiB left) */
        {.weights = 1 * GIB, .max_batch = 8, .bytes_per_unit = 1000, .true_ratio = 1.0, .fixed_s = 0.05,
         .load_s = 0.5, .gpu = 1, .dev_weights = 6 * GIB, .dev_bytes_per_unit = 100000},
        /* small: 1 GiB; then gpu0 has 7 GiB free against gpu1's 5 */
        {.weights = 256 << 20, .max_batch = 8, .bytes_per_unit = 1000, .true_ratio = 1.0, .fixed_s = 0.02,
         .load_s = 0.1, .gpu = 1, .dev_weights = 1 * GIB, .dev_bytes_per_unit = 10000},
        /* huge: 20 GiB fits on no GPU: the CPU */
        {.weights = 20 * GIB, .max_batch = 8, .bytes_per_unit = 1000, .true_ratio = 1.0, .fixed_s = 0.05,
         .load_s = 1.0, .gpu = 1, .dev_weights = 20 * GIB, .dev_bytes_per_unit = 1000},
        /* CPU-only adapter */
        {.weights = 100 << 20, .max_batch = 8, .bytes_per_unit = 1000, .true_ratio = 1.0, .fixed_s = 0.01},
    };
    sim m;
    sim_init(&m, &c, fm, 4, 8);
    double arrival[8] = {0, 1, 2, 3, 4, 4, 4, 4};
    for (int i = 0; i < 8; i++) {
        m.reqs[i].r.model = i < 4 ? i : i - 4;
        m.reqs[i].r.length = 1000;
        m.reqs[i].r.deadline = INFINITY;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    for (int i = 0; i < 8; i++)
        assert_true(m.reqs[i].completed);
    assert_int_equal(device_of_first_batch(&m, 0), 2); /* gpu1 */
    assert_int_equal(device_of_first_batch(&m, 1), 1); /* gpu0 */
    assert_int_equal(device_of_first_batch(&m, 2), 0); /* CPU */
    assert_int_equal(device_of_first_batch(&m, 3), 0); /* CPU */
    uint32_t mask;
    assert_int_equal(sched_model_replicas(m.s, 0, &mask), 1);
    assert_int_equal(mask, 1u << 2);
    assert_int_equal(sched_model_replicas(m.s, 1, &mask), 1);
    assert_int_equal(mask, 1u << 1);
    assert_int_equal(sched_model_replicas(m.s, 2, &mask), 1);
    assert_int_equal(mask, 1u << 0);
    /* the later requests reused those replicas (no second load) */
    for (int i = 4; i < 8; i++)
        assert_int_equal(m.reqs[i].device, m.reqs[i - 4].device);
    sched_device_state d0, d1, h;
    sched_get_device(m.s, 1, &d0);
    sched_get_device(m.s, 2, &d1);
    sched_get_device(m.s, 0, &h);
    assert_int_equal(d0.weights, 1 * GIB);
    assert_int_equal(d1.weights, 6 * GIB);
    /* the host counts every replica's host-side bytes */
    assert_int_equal(h.weights, 1 * GIB + (256 << 20) + 20 * GIB + (100 << 20));
    sim_free(&m);
}

typedef struct gpu_run {
    double makespan, throughput;
    int completed, replicas_end, replica_loads, replica_unloads;
    int big_batches[MAX_DEV];
} gpu_run;

/* A mixed load on `n_gpus` GPUs: a big model flooded with requests and a
 * small one at a trickle. */
static void run_gpu_mixed(int n_gpus, gpu_run *out)
{
    int64_t budgets[2] = {16 * GIB, 12 * GIB};
    sched_config c = gpu_config(n_gpus, budgets);
    fake_model fm[2] = {
        {.weights = 512 << 20, .max_batch = 8, .bytes_per_unit = 2000, .true_ratio = 1.0, .fixed_s = 0.08,
         .per_unit_s = 2e-6, .load_s = 0.5, .gpu = 1, .dev_weights = 6 * GIB, .dev_bytes_per_unit = 50000,
         .cpu_slowdown = 20},
        {.weights = 128 << 20, .max_batch = 8, .bytes_per_unit = 500, .true_ratio = 1.0, .fixed_s = 0.02,
         .per_unit_s = 1e-6, .load_s = 0.1, .gpu = 1, .dev_weights = 2 * GIB, .dev_bytes_per_unit = 5000,
         .cpu_slowdown = 20},
    };
    int n = 3000;
    sim m;
    sim_init(&m, &c, fm, 2, n);
    double *arrival = calloc((size_t)n, sizeof *arrival);
    assert_non_null(arrival);
    rng_state = 99;
    double t = 0;
    for (int i = 0; i < n; i++) {
        t += -log(1.0 - rnd()) * 0.005; /* ~200 requests/s for ~15 s */
        arrival[i] = t;
        sim_req *q = &m.reqs[i];
        q->r.model = rnd() < 0.85 ? 0 : 1;
        q->r.length = 500 + (int64_t)(rnd() * 1500);
        q->r.task = 1;
        q->r.priority = CHOIR_PRIORITY_NORMAL;
        q->r.deadline = INFINITY;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n; i++)
        out->completed += m.reqs[i].completed;
    out->makespan = m.last_done;
    out->throughput = out->completed / m.last_done;
    out->replicas_end = sched_model_replicas(m.s, 0, NULL);
    out->replica_loads = m.replica_loads;
    out->replica_unloads = m.replica_unloads_gpu;
    for (int d = 0; d < MAX_DEV; d++)
        out->big_batches[d] = m.dev_batches[0][d];
    print_message("%d GPU(s): %d/%d completed in %.2f s virtual (%.1f/s); big-model batches cpu %d gpu0 %d gpu1 %d; "
                  "%d replica loads, %d replica unloads\n",
                  n_gpus, out->completed, n, out->makespan, out->throughput, out->big_batches[0],
                  out->big_batches[1], out->big_batches[2], out->replica_loads, out->replica_unloads);
    free(arrival);
    sim_free(&m);
}

/* A long queue spawns a replica on the other GPU; both GPUs then run the busy
 * model's batches; two GPUs finish the same load faster than one; the extra
 * replica is unloaded once idle; every GPU budget holds at every step
 * (check_state) and every request ends exactly once. */
static void test_gpu_replicas(void **state)
{
    (void)state;
    gpu_run one, two;
    run_gpu_mixed(1, &one);
    run_gpu_mixed(2, &two);
    assert_int_equal(one.completed, 3000);
    assert_int_equal(two.completed, 3000);
    /* one GPU: no other GPU for a replica; everything on gpu0 */
    assert_int_equal(one.replica_loads, 0);
    assert_int_equal(one.big_batches[0], 0);
    /* two GPUs: the flood made a replica on the second GPU, and both ran it */
    assert_true(two.replica_loads >= 1);
    assert_true(two.big_batches[1] > 20);
    assert_true(two.big_batches[2] > 20);
    assert_int_equal(two.big_batches[0], 0);
    assert_true(two.throughput > 1.3 * one.throughput);
    /* once the flood ended, the replica beyond the first was unloaded */
    assert_true(two.replica_unloads >= 1);
    assert_int_equal(two.replicas_end, 1);
}

/* Two GPU models that cannot share the one GPU take turns on it (LRU
 * unloading counts device memory) instead of falling back to the CPU. */
static void test_gpu_lru(void **state)
{
    (void)state;
    int64_t budgets[1] = {8 * GIB};
    sched_config c = gpu_config(1, budgets);
    fake_model fm[2];
    for (int i = 0; i < 2; i++)
        fm[i] = (fake_model){.weights = 256 << 20, .max_batch = 4, .bytes_per_unit = 1000, .true_ratio = 1.0,
                             .fixed_s = 0.02, .load_s = 0.2, .gpu = 1, .dev_weights = 5 * GIB,
                             .dev_bytes_per_unit = 1000, .cpu_slowdown = 10};
    sim m;
    sim_init(&m, &c, fm, 2, 60);
    double arrival[60];
    for (int i = 0; i < 60; i++) {
        arrival[i] = 0.1 * i;
        m.reqs[i].r.model = (i / 10) % 2;
        m.reqs[i].r.length = 100;
        m.reqs[i].r.deadline = INFINITY;
    }
    sim_run(&m, arrival);
    check_exactly_once(&m);
    for (int i = 0; i < 60; i++) {
        assert_true(m.reqs[i].completed);
        assert_int_equal(m.reqs[i].device, 1);
    }
    assert_true(m.unloads >= 5);
    sim_free(&m);
}

/* A model whose real device bytes (known only after loading) do not fit the
 * GPU it was placed on: the load reports it, the replica leaves the
 * accounts, the batch goes back to the queue unchanged, and the next
 * placement, knowing the real size, picks the CPU. */
static void test_gpu_misplaced(void **state)
{
    (void)state;
    int64_t budgets[1] = {8 * GIB};
    sched_config c = gpu_config(1, budgets);
    sched *s = sched_create(&c, NULL);
    assert_non_null(s);
    assert_int_equal(sched_add_model(s, 1 * GIB, 4, NULL), 0);
    sched_model_set_gpu(s, 0, 1 * GIB); /* the files' size: a guess */
    sched_req r = {.id = 1, .length = 10, .est_bytes = 1000, .dev_est_bytes = 1000, .deadline = INFINITY};
    assert_int_equal(sched_submit(s, &r, 0, NULL, NULL), 0);
    sched_action a;
    assert_int_equal(sched_decide(s, 1.0, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.device, 1);
    assert_int_equal(a.need_load, 1);
    assert_int_equal(sched_model_loaded(s, 0, 1, 1 * GIB, 10 * GIB), 1);
    sched_device_state g;
    sched_get_device(s, 1, &g);
    assert_int_equal(g.weights, 0);
    assert_true(g.peak <= g.budget);
    sched_return(s, &a, 1.1);
    assert_int_equal(r.state, SCHED_QUEUED);
    assert_int_equal(sched_model_replicas(s, 0, NULL), 0);
    assert_true(sched_model_factor(s, 0) == 1.0); /* not an arena overflow */
    assert_int_equal(sched_decide(s, 2.0, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.device, 0);
    assert_int_equal(a.need_load, 1);
    sched_batch_done(s, &a, 2.1, 500, 0.1, 0, 0);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.batches, 0);
    sched_get_device(s, 0, &g);
    assert_int_equal(g.batches, 1);
    sched_free(s);
}

/* One GPU of 10 GiB and one model of 1 GiB weights on it, with a pool;
 * *c is the scheduler's configuration. */
static sched *gpu_pool_sched(sched_config *c)
{
    int64_t budgets[1] = {10 * GIB};
    *c = gpu_config(1, budgets);
    sched *s = sched_create(c, NULL);
    assert_non_null(s);
    assert_int_equal(sched_add_model(s, 1 * GIB, 8, NULL), 0);
    sched_model_set_gpu(s, 0, 1 * GIB);
    sched_model_set_pool(s, 0);
    return s;
}

/* A GPU model whose replica keeps a pool (VibeVoice's KV pages): it loads
 * on its own, sized from the room the budget leaves it; requests are then
 * admitted by their pool parts against the pool's unreserved bytes (two of
 * three fit at dispatch; the third neither joins nor starts until a member
 * done before its batch gives its pages back, then joins in them) and the
 * rest of their device estimates against the budget; one larger than the
 * whole pool is refused as too large, naming the device. */
static void test_gpu_pool(void **state)
{
    (void)state;
    sched_config c;
    sched *s = gpu_pool_sched(&c);
    const int64_t ws = 100 << 20;
    sched_req r[4];
    for (int i = 0; i < 4; i++) {
        int64_t pool = i < 3 ? 3 * GIB : 20 * GIB;
        r[i] = (sched_req){.id = (uint64_t)i + 1, .task = 1, .length = i < 3 ? 1000 : 1000000, .est_bytes = 1000,
                           .dev_est_bytes = ws + pool, .pool_est_bytes = pool, .deadline = INFINITY};
        assert_int_equal(sched_submit(s, &r[i], 0.01 * i, NULL, NULL), 0);
    }
    sched_action a, j[4];
    assert_int_equal(sched_decide(s, 1.0, &a), 1);
    assert_int_equal(a.kind, SCHED_LOAD);
    assert_int_equal(a.device, 1);
    assert_int_equal(sched_load_room(s, 0, 1), 10 * GIB);
    /* weights 1 GiB, a pool of 7 */
    assert_int_equal(sched_model_loaded(s, 0, 1, 1 * GIB, 8 * GIB), 0);
    sched_replica_pool(s, 0, 1, 7 * GIB);
    assert_int_equal(sched_decide(s, 1.1, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.device, 1);
    assert_int_equal(a.need_load, 0);
    assert_int_equal(a.n, 2);
    assert_int_equal(a.pool_reserved, 6 * GIB);
    assert_int_equal(a.dev_reserved, 2 * ws);
    sched_device_state g;
    sched_get_device(s, 1, &g);
    assert_int_equal(g.pool, 7 * GIB);
    assert_int_equal(g.pool_reserved, 6 * GIB);
    assert_int_equal(g.reserved, 2 * ws);
    /* The third's pages do not fit beside them: no join, no batch. */
    assert_int_equal(sched_join(s, &a, 2, 1.2, j, 4), 0);
    sched_action none;
    assert_int_equal(sched_decide(s, 1.3, &none), 0);
    /* A member done before its batch gives its pages back (and its state's
     * share of the rest): the third joins in them. */
    sched_member_done(s, &a, a.reqs[0]);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.pool_reserved, 3 * GIB);
    assert_int_equal(g.pool_reqs, 1);
    assert_int_equal(g.reserved, ws);
    assert_int_equal(a.pool_reserved, 3 * GIB);
    assert_int_equal(a.dev_reserved, ws);
    assert_int_equal(sched_join(s, &a, 1, 1.35, j, 4), 1);
    assert_true(j[0].reqs[0] == &r[2]);
    assert_int_equal(j[0].pool_reserved, 3 * GIB);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.pool_reserved, 6 * GIB);
    assert_int_equal(g.pool_reqs, 2);
    assert_int_equal(g.reserved, 2 * ws);
    sched_join_done(s, &j[0], 1.38, 0);
    sched_batch_done(s, &a, 1.4, 0, 0.3, 0, 0);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.pool_reserved, 0);
    assert_int_equal(g.pool_reqs, 0);
    assert_int_equal(g.reserved, 0);
    /* More pages than the whole pool: refused, by the GPU. */
    assert_int_equal(sched_decide(s, 1.7, &a), 1);
    assert_int_equal(a.kind, SCHED_REJECT);
    assert_int_equal(a.reason, CHOIR_REJECT_TOO_LARGE);
    assert_true(a.rejected == &r[3]);
    assert_int_equal(a.device, 1);
    assert_int_equal(a.pool_reserved, 20 * GIB);
    assert_int_equal(a.pool_room, 7 * GIB);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.weights, 8 * GIB);
    assert_int_equal(g.pool_peak_reqs, 2);
    assert_true(g.peak <= g.budget);
    sched_free(s);
}

/* A batch member's own state (the rest of its device estimate beside its
 * pages) goes back when it finishes, not when its batch ends: on a replica
 * whose budget leaves 2 GiB beside its weights and pool, two requests whose
 * states take 900 MiB each run as a batch, and a third, whose pages fit the
 * pool but whose state does not fit beside theirs, neither joins nor starts.
 * Once a member is done its pages and its state's share go back and the
 * third joins in its place; a second report of that member, and one of a
 * request not in the batch, change nothing; the device's accounts never
 * pass its budget and are empty at the end. (Before, only the member's
 * pages went back, and the third waited for the batch's end.) */
static void test_gpu_member_state(void **state)
{
    (void)state;
    sched_config c;
    sched *s = gpu_pool_sched(&c);
    const int64_t ws = 900 << 20, part = 1 * GIB;
    sched_req r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (sched_req){.id = (uint64_t)i + 1, .task = 1, .length = 1000, .est_bytes = 1000,
                           .dev_est_bytes = ws + part, .pool_est_bytes = part, .deadline = INFINITY};
        if (i < 3)
            assert_int_equal(sched_submit(s, &r[i], 0.01 * i, NULL, NULL), 0);
    }
    sched_action a, j[4], none;
    assert_int_equal(sched_decide(s, 1.0, &a), 1);
    assert_int_equal(a.kind, SCHED_LOAD);
    /* weights 1 GiB, a pool of 7: 2 GiB left for the requests' states */
    assert_int_equal(sched_model_loaded(s, 0, 1, 1 * GIB, 8 * GIB), 0);
    sched_replica_pool(s, 0, 1, 7 * GIB);
    assert_int_equal(sched_decide(s, 1.1, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.n, 2);
    assert_int_equal(a.dev_reserved, 2 * ws);
    assert_int_equal(a.pool_reserved, 2 * part);
    sched_device_state g;
    assert_int_equal(sched_join(s, &a, 2, 1.2, j, 4), 0);
    assert_int_equal(sched_decide(s, 1.25, &none), 0);
    sched_req *first = a.reqs[0];
    sched_member_done(s, &a, first);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.reserved, ws);
    assert_int_equal(g.pool_reserved, part);
    assert_int_equal(g.pool_reqs, 1);
    /* at most once per member; a request not in the batch changes nothing */
    sched_member_done(s, &a, first);
    sched_member_done(s, &a, &r[3]);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.reserved, ws);
    assert_int_equal(g.pool_reserved, part);
    assert_int_equal(g.pool_reqs, 1);
    assert_int_equal(sched_join(s, &a, 1, 1.3, j, 4), 1);
    assert_true(j[0].reqs[0] == &r[2]);
    assert_int_equal(j[0].dev_reserved, ws);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.reserved, 2 * ws);
    assert_int_equal(g.pool_reserved, 2 * part);
    assert_true(g.weights + g.reserved <= g.budget);
    /* the other member done too: the batch holds nothing on the device */
    sched_member_done(s, &a, a.reqs[1]);
    assert_int_equal(a.dev_reserved, 0);
    assert_int_equal(a.pool_reserved, 0);
    assert_int_equal(a.pool_n, 0);
    sched_join_done(s, &j[0], 1.4, 0);
    sched_batch_done(s, &a, 1.5, 0, 0.4, 0, 0);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.reserved, 0);
    assert_int_equal(g.pool_reserved, 0);
    assert_int_equal(g.pool_reqs, 0);
    assert_true(g.peak <= g.budget);
    sched_state st;
    sched_get_state(s, &st);
    assert_int_equal(st.reserved, 0);
    assert_int_equal(st.running_reqs, 0);
    sched_free(s);
}

/* Device memory pressure (a replica with a pool, as VibeVoice's): with two
 * requests holding 8.2 of the 9 GiB its budget leaves for requests (the
 * pool counted as room), the GPU is past the high-water mark: a
 * low-priority request is refused (overload), normal ones queue while what
 * waits fits what the replica holds for requests (its pool), and the next
 * is refused as one that could not start soon (memory), none of it ever
 * above the budget; once the running requests are done and the hold has
 * passed, the GPU recovers and low priority is taken again. An idle replica
 * of another model on the hot GPU is unloaded. */
static void test_gpu_pressure(void **state)
{
    (void)state;
    sched_config c;
    sched *s = gpu_pool_sched(&c);
    const int64_t ws = 100 << 20, part = 4 * GIB;
    sched_req r[9];
    for (int i = 0; i < 9; i++)
        r[i] = (sched_req){.id = (uint64_t)i + 1, .task = 1, .length = 1000, .est_bytes = 1000,
                           .dev_est_bytes = ws + part, .pool_est_bytes = part, .deadline = INFINITY,
                           .priority = CHOIR_PRIORITY_NORMAL};
    for (int i = 0; i < 2; i++)
        assert_int_equal(sched_submit(s, &r[i], 0.01 * i, NULL, NULL), 0);
    sched_action a, b;
    assert_int_equal(sched_decide(s, 1.0, &a), 1);
    assert_int_equal(a.kind, SCHED_LOAD);
    /* weights 1 GiB and a pool of 8.5: 9 GiB of room for requests */
    assert_int_equal(sched_model_loaded(s, 0, 1, 1 * GIB, 1 * GIB + 17 * GIB / 2), 0);
    sched_replica_pool(s, 0, 1, 17 * GIB / 2);
    sched_device_state g;
    sched_get_device(s, 1, &g);
    assert_int_equal(g.hot, 0);
    assert_int_equal(sched_decide(s, 1.1, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.n, 2);
    /* 8.2 of 9 GiB held: past 0.85. */
    choir_reject_reason why = CHOIR_REJECT_NONE;
    choir_err err = {0};
    r[2].priority = CHOIR_PRIORITY_LOW;
    assert_int_equal(sched_submit(s, &r[2], 1.2, &why, &err), CHOIR_EBUSY);
    assert_int_equal(why, CHOIR_REJECT_OVERLOAD);
    assert_non_null(strstr(err.msg, "gpu0"));
    sched_get_device(s, 1, &g);
    assert_int_equal(g.hot, 1);
    assert_true(g.pressure > 0.9 && g.pressure < 0.92);
    /* Two normal ones wait (8 GiB of pages, the pool holds 8.5); a third would wait behind all that. */
    assert_int_equal(sched_submit(s, &r[3], 1.21, &why, NULL), 0);
    assert_int_equal(sched_submit(s, &r[4], 1.22, &why, NULL), 0);
    assert_int_equal(sched_submit(s, &r[5], 1.23, &why, &err), CHOIR_EBUSY);
    assert_int_equal(why, CHOIR_REJECT_MEMORY);
    assert_non_null(strstr(err.msg, "could not start"));
    r[6].priority = CHOIR_PRIORITY_HIGH;
    assert_int_equal(sched_submit(s, &r[6], 1.24, &why, NULL), CHOIR_EBUSY);
    assert_int_equal(why, CHOIR_REJECT_MEMORY);
    /* One larger than the whole pool is queued, and refused as too large
     * (naming the GPU) when the scheduler comes to it, as without pressure. */
    sched_req big = r[5];
    big.id = 50;
    big.pool_est_bytes = 20 * GIB;
    big.dev_est_bytes = ws + 20 * GIB;
    assert_int_equal(sched_submit(s, &big, 1.25, &why, NULL), 0);
    /* Nothing more runs while the pool is full; the queued two run once the batch is done. */
    assert_int_equal(sched_decide(s, 1.3, &b), 0);
    sched_batch_done(s, &a, 2.0, 0, 0.9, 0, 0);
    int dispatched = 0, refused = 0;
    sched_action x;
    while (sched_decide(s, 2.0, &x)) {
        assert_int_equal(x.kind, SCHED_DISPATCH);
        assert_int_equal(x.n, 2);
        assert_true(x.reqs[0] == &r[3] || x.reqs[0] == &r[4]);
        b = x;
        dispatched++;
    }
    assert_int_equal(dispatched, 1);
    sched_batch_done(s, &b, 2.1, 0, 0.1, 0, 0);
    while (refused == 0 && sched_decide(s, 2.1, &x)) {
        assert_int_equal(x.kind, SCHED_REJECT);
        assert_int_equal(x.reason, CHOIR_REJECT_TOO_LARGE);
        assert_true(x.rejected == &big);
        assert_int_equal(x.device, 1);
        refused++;
    }
    assert_int_equal(refused, 1);
    /* Empty, but within the hold since it turned hot (1.2 + 1 s): still
     * degraded, and the scheduler wakes when the hold ends; after it, recovered. */
    sched_get_device(s, 1, &g);
    assert_true(g.pressure == 0);
    assert_int_equal(g.hot, 1);
    assert_true(g.peak <= g.budget);
    assert_true(sched_next_event(s, 2.1) <= 1.2 + c.degrade_hold_s);
    r[7].priority = CHOIR_PRIORITY_LOW;
    assert_int_equal(sched_submit(s, &r[7], 2.15, &why, NULL), CHOIR_EBUSY);
    assert_int_equal(why, CHOIR_REJECT_OVERLOAD);
    r[8].priority = CHOIR_PRIORITY_LOW;
    assert_int_equal(sched_submit(s, &r[8], 2.3, &why, NULL), 0);
    sched_get_device(s, 1, &g);
    assert_int_equal(g.hot, 0);
    sched_free(s);

    /* A second model's replica idle on a hot GPU is unloaded there. */
    s = sched_create(&c, NULL);
    assert_non_null(s);
    assert_int_equal(sched_add_model(s, 1 * GIB, 8, NULL), 0);
    sched_model_set_gpu(s, 0, 1 * GIB);
    sched_model_set_pool(s, 0);
    assert_int_equal(sched_add_model(s, 1 * GIB, 8, NULL), 1);
    sched_model_set_gpu(s, 1, 1 * GIB / 2);
    sched_req q = {.id = 100, .model = 1, .task = 1, .length = 10, .est_bytes = 1000, .dev_est_bytes = 1 << 20,
                   .deadline = INFINITY, .priority = CHOIR_PRIORITY_NORMAL};
    assert_int_equal(sched_submit(s, &q, 0, NULL, NULL), 0);
    assert_int_equal(sched_decide(s, 0.5, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.model, 1);
    assert_int_equal(a.need_load, 1);
    assert_int_equal(sched_model_loaded(s, 1, 1, 1 * GIB, 1 * GIB / 2), 0);
    sched_batch_done(s, &a, 0.6, 0, 0.1, 0, 0);
    for (int i = 0; i < 2; i++) {
        r[i] = (sched_req){.id = (uint64_t)i + 1, .model = 0, .task = 1, .length = 1000, .est_bytes = 1000,
                           .dev_est_bytes = ws + part, .pool_est_bytes = part, .deadline = INFINITY,
                           .priority = CHOIR_PRIORITY_NORMAL};
        assert_int_equal(sched_submit(s, &r[i], 0.7, NULL, NULL), 0);
    }
    assert_int_equal(sched_decide(s, 1.0, &a), 1);
    assert_int_equal(a.kind, SCHED_LOAD);
    assert_int_equal(sched_model_loaded(s, 0, 1, 1 * GIB, 1 * GIB + 8 * GIB), 0);
    sched_replica_pool(s, 0, 1, 8 * GIB);
    assert_int_equal(sched_decide(s, 1.1, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.model, 0);
    /* hot now (8.2 of 8.5 GiB); model 1 idle since 0.6: unloaded once idle for the hold */
    assert_int_equal(sched_decide(s, 1.2, &b), 0);
    assert_int_equal(sched_decide(s, 1.7, &b), 1);
    assert_int_equal(b.kind, SCHED_UNLOAD);
    assert_int_equal(b.model, 1);
    assert_int_equal(b.device, 1);
    sched_batch_done(s, &a, 2.0, 0, 0.9, 0, 0);
    sched_free(s);
}

/* A failed load with nothing else of the model left: the requests queued
 * while it ran leave as failed (one SCHED_REJECT each, before any batch), so
 * the burst costs one attempt; a request submitted after the failure loads
 * the model again. A failed extra replica beside a ready one fails nothing:
 * the queue waits for the replica that works. */
static void test_load_failure_fails_queue(void **state)
{
    (void)state;
    int64_t budgets[2] = {8 * GIB, 8 * GIB};
    sched_config c = gpu_config(2, budgets);
    c.max_batch = 2;
    sched *s = sched_create(&c, NULL);
    assert_non_null(s);
    assert_int_equal(sched_add_model(s, 1 * GIB, 2, NULL), 0);
    sched_model_set_gpu(s, 0, 1 * GIB);
    sched_req r[8];
    for (int i = 0; i < 8; i++) {
        r[i] = (sched_req){.id = (uint64_t)i + 1, .length = 10, .est_bytes = 1000, .dev_est_bytes = 1000,
                           .deadline = INFINITY};
        assert_int_equal(sched_submit(s, &r[i], 0, NULL, NULL), 0);
    }
    sched_action a, b;
    assert_int_equal(sched_decide(s, 0.1, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.need_load, 1);
    assert_int_equal(a.n, 2);
    /* the replica is busy loading: nothing else of the model is placed */
    assert_int_equal(sched_decide(s, 0.2, &b), 0);
    assert_int_equal(sched_model_loaded(s, 0, a.device, -1, 0), 0);
    assert_int_equal(sched_load_failed(s, 0), 6);
    sched_req late = {.id = 9, .length = 10, .est_bytes = 1000, .dev_est_bytes = 1000, .deadline = INFINITY};
    assert_int_equal(sched_submit(s, &late, 0.3, NULL, NULL), 0);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(sched_decide(s, 0.3, &b), 1);
        assert_int_equal(b.kind, SCHED_REJECT);
        assert_int_equal(b.reason, CHOIR_REJECT_FAILED);
        assert_true(b.rejected != &late && b.rejected->state == SCHED_FINISHED);
    }
    sched_batch_done(s, &a, 0.3, 0, 0.1, 0, 0);
    /* the late one may try again (the files may have been fixed): a new load */
    assert_int_equal(sched_decide(s, 1.0, &b), 1);
    assert_int_equal(b.kind, SCHED_DISPATCH);
    assert_int_equal(b.need_load, 1);
    assert_int_equal(b.n, 1);
    assert_ptr_equal(b.reqs[0], &late);
    assert_int_equal(sched_model_loaded(s, 0, b.device, 1 * GIB, 1 * GIB), 0);
    /* another replica fails to load beside this ready one: the queue stays */
    for (int i = 0; i < 2; i++) {
        r[i] = (sched_req){.id = (uint64_t)i + 10, .length = 10, .est_bytes = 1000, .dev_est_bytes = 1000,
                           .deadline = INFINITY};
        assert_int_equal(sched_submit(s, &r[i], 1.0, NULL, NULL), 0);
    }
    assert_int_equal(sched_load_failed(s, 0), 0);
    sched_batch_done(s, &b, 1.1, 0, 0.1, 0, 0);
    assert_int_equal(sched_decide(s, 1.1, &a), 1);
    assert_int_equal(a.kind, SCHED_DISPATCH);
    assert_int_equal(a.need_load, 0);
    assert_int_equal(a.n, 2);
    sched_batch_done(s, &a, 1.2, 0, 0.1, 0, 0);
    sched_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_by_size_and_wait),
        cmocka_unit_test(test_padding_bounded),
        cmocka_unit_test(test_priority_first),
        cmocka_unit_test(test_low_priority_not_starved),
        cmocka_unit_test(test_deadlines),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_lru_unload),
        cmocka_unit_test(test_calibration),
        cmocka_unit_test(test_grown_estimate_refused),
        cmocka_unit_test(test_overflow_grows_to_budget),
        cmocka_unit_test(test_external_memory),
        cmocka_unit_test(test_join),
        cmocka_unit_test(test_degradation),
        cmocka_unit_test(test_latency_degradation),
        cmocka_unit_test(test_mixed_load),
        cmocka_unit_test(test_gpu_placement),
        cmocka_unit_test(test_gpu_replicas),
        cmocka_unit_test(test_gpu_lru),
        cmocka_unit_test(test_gpu_misplaced),
        cmocka_unit_test(test_gpu_pool),
        cmocka_unit_test(test_gpu_member_state),
        cmocka_unit_test(test_gpu_pressure),
        cmocka_unit_test(test_load_failure_fails_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
