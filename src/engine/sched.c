/* Scheduler core. See sched.h for the contract; this comment is about policy.
 *
 * Memory: weights of loaded models plus the reservations of running batches
 * plus what the process holds elsewhere (I/O buffers, caches: "external")
 * never exceed the budget when a batch is admitted. A batch reserves n * (largest estimate) * factor,
 * because a padded batch costs every row at its longest member's size; factor
 * is calibrated per model from measured arena peaks (up at once, down slowly).
 *
 * Batching: requests of one model and task are grouped in geometric length buckets
 * [b^k, b^(k+1)), b = 1 / (1 - max_pad_waste), so padding waste inside a batch
 * stays below max_pad_waste. A bucket dispatches when it holds a full batch,
 * when one of its requests has waited its class's limit (which grows with the
 * share of busy workers: under load, waiting longer fills batches better), when
 * a deadline is about to pass, or at once while draining. Among ready buckets
 * the one with the highest priority, then the oldest request, goes first (a
 * waiting request gains a priority level every aging_s, so low priority is
 * served late but never starved); when
 * its batch does not fit in memory it is shrunk, then idle models are unloaded
 * least-recently-used, and otherwise everything waits (head-of-line, so large
 * urgent work is not starved by small work slipping past).
 *
 * Degradation: above the high-water mark or the p99 target the engine halves
 * the batch size, refuses new low-priority work and unloads idle models; it
 * recovers below the low-water mark after a hold time (hysteresis). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "engine/sched.h"

#define LAT_WINDOW 64
#define FACTOR_MIN 0.25
#define FACTOR_MARGIN 1.1
#define EXTERNAL_POLL_S 0.05

typedef struct sched_model {
    int64_t weights_bytes;
    int max_batch;
    int loaded;
    int unload_requested; /* free the weights as soon as nothing of it runs or waits */
    int running; /* batches in flight */
    double last_used;
    double factor;
    double compute_ewma; /* seconds per batch, 0 until measured */
    sched_req **queue;
    int n_queued;
} sched_model;

struct sched {
    sched_config c;
    sched_model *models;
    int n_models;
    int64_t reserved, weights;
    int64_t external; /* memory held outside weights and batch arenas (I/O, caches) */
    int blocked_on_external;
    int running_batches, running_reqs;
    int degraded;
    double degraded_since;
    int draining;
    double lat[LAT_WINDOW];
    int n_lat, lat_pos;
    sched_req **scratch; /* queue_capacity entries, for sorting */
};

void sched_config_from_params(sched_config *c, const choir_engine_params *p)
{
    memset(c, 0, sizeof *c);
    c->budget = p->memory_budget;
    c->high_water = p->high_water;
    c->low_water = p->low_water;
    c->degrade_hold_s = 1.0;
    c->p99_target_s = p->p99_target_ms / 1000.0;
    c->max_batch = p->max_batch;
    c->wait_short_s = p->wait_short_ms / 1000.0;
    c->wait_long_s = p->wait_long_ms / 1000.0;
    c->max_pad_waste = p->max_pad_waste;
    c->queue_capacity = p->queue_capacity;
    c->workers = p->workers;
    c->unload_idle_s = p->unload_idle_s;
}

sched *sched_create(const sched_config *c, choir_err *err)
{
    if (!c || c->budget <= 0 || c->max_batch < 1 || c->queue_capacity < 1 || c->workers < 1 ||
        !(c->max_pad_waste > 0 && c->max_pad_waste < 1) || !(c->low_water <= c->high_water)) {
        choir_err_set(err, CHOIR_EINVAL, "scheduler: invalid configuration");
        return NULL;
    }
    sched *s = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *s);
    if (!s)
        goto fail;
    s->c = *c;
    if (s->c.max_batch > SCHED_MAX_BATCH)
        s->c.max_batch = SCHED_MAX_BATCH;
    s->scratch = choir_calloc(CHOIR_MEM_OTHER, (size_t)c->queue_capacity, sizeof *s->scratch);
    if (!s->scratch)
        goto fail;
    return s;
fail:
    sched_free(s);
    choir_err_set(err, CHOIR_ENOMEM, "scheduler: out of memory");
    return NULL;
}

void sched_free(sched *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_models; i++)
        choir_free(s->models[i].queue);
    choir_free(s->models);
    choir_free(s->scratch);
    choir_free(s);
}

int sched_add_model(sched *s, int64_t weights_bytes, int max_batch, choir_err *err)
{
    sched_model *m = choir_realloc(s->models, (size_t)(s->n_models + 1) * sizeof *m);
    if (!m)
        return choir_err_set(err, CHOIR_ENOMEM, "scheduler: out of memory");
    s->models = m;
    m = &s->models[s->n_models];
    memset(m, 0, sizeof *m);
    m->weights_bytes = weights_bytes > 0 ? weights_bytes : 0;
    m->max_batch = max_batch < 1 ? 1 : max_batch;
    m->factor = 1.0;
    m->queue = choir_calloc(CHOIR_MEM_OTHER, (size_t)s->c.queue_capacity, sizeof *m->queue);
    if (!m->queue)
        return choir_err_set(err, CHOIR_ENOMEM, "scheduler: out of memory");
    return s->n_models++;
}

static int eff_max_batch(const sched *s, const sched_model *m)
{
    int b = s->c.max_batch < m->max_batch ? s->c.max_batch : m->max_batch;
    if (s->degraded)
        b = b / 2 > 0 ? b / 2 : 1;
    return b;
}

static int64_t reservation(const sched_model *m, int64_t max_est, int n)
{
    return (int64_t)ceil((double)max_est * (double)n * m->factor);
}

int sched_submit(sched *s, sched_req *r, double now, choir_reject_reason *reason, choir_err *err)
{
    choir_reject_reason why = CHOIR_REJECT_NONE;
    int code = 0;
    if (r->model < 0 || r->model >= s->n_models) {
        if (reason)
            *reason = CHOIR_REJECT_FAILED;
        return choir_err_set(err, CHOIR_EINVAL, "scheduler: no model %d", r->model);
    }
    sched_model *m = &s->models[r->model];
    if (r->length < 1)
        r->length = 1;
    if (r->est_bytes < 0)
        r->est_bytes = 0;
    if (s->draining) {
        why = CHOIR_REJECT_SHUTDOWN;
        code = choir_err_set(err, CHOIR_ECANCELED, "the engine is shutting down");
    } else if (m->weights_bytes + reservation(m, r->est_bytes, 1) > s->c.budget) {
        why = CHOIR_REJECT_TOO_LARGE;
        code = choir_err_set(err, CHOIR_ETOOBIG,
                             "request needs %lld bytes of activations beside %lld of weights; "
                             "the memory budget is %lld",
                             (long long)reservation(m, r->est_bytes, 1), (long long)m->weights_bytes,
                             (long long)s->c.budget);
    } else if (s->degraded && r->priority <= CHOIR_PRIORITY_LOW) {
        why = CHOIR_REJECT_OVERLOAD;
        code = choir_err_set(err, CHOIR_EBUSY, "overloaded: low-priority requests are refused for now");
    } else if (m->n_queued >= s->c.queue_capacity) {
        why = CHOIR_REJECT_QUEUE_FULL;
        code = choir_err_set(err, CHOIR_EBUSY, "queue full (%d requests waiting)", m->n_queued);
    } else if (r->deadline <= now) {
        why = CHOIR_REJECT_DEADLINE;
        code = choir_err_set(err, CHOIR_ETIMEDOUT, "deadline already passed");
    }
    if (reason)
        *reason = why;
    if (code)
        return code;
    r->arrival = now;
    r->state = SCHED_QUEUED;
    m->queue[m->n_queued++] = r;
    return 0;
}

static int remove_queued(sched *s, sched_req *r)
{
    if (r->state != SCHED_QUEUED || r->model < 0 || r->model >= s->n_models)
        return 0;
    sched_model *m = &s->models[r->model];
    for (int i = 0; i < m->n_queued; i++) {
        if (m->queue[i] == r) {
            m->queue[i] = m->queue[--m->n_queued];
            r->state = SCHED_FINISHED;
            return 1;
        }
    }
    return 0;
}

int sched_cancel(sched *s, sched_req *r)
{
    return remove_queued(s, r);
}

static int bucket_of(const sched *s, int64_t length)
{
    return (int)floor(log((double)length) / -log1p(-s->c.max_pad_waste));
}

static double wait_limit(const sched *s, const sched_req *r)
{
    double base = r->is_long ? s->c.wait_long_s : s->c.wait_short_s;
    return base * (1.0 + (double)s->running_batches / s->c.workers);
}

static int aged_priority(const sched *s, const sched_req *r, double now)
{
    double aging = s->c.aging_s > 0 ? s->c.aging_s : 10 * s->c.wait_long_s;
    double levels = aging > 0 ? floor((now - r->arrival) / aging) : 0;
    int p = r->priority + (levels > CHOIR_PRIORITY_HIGH ? CHOIR_PRIORITY_HIGH : (int)levels);
    return p > CHOIR_PRIORITY_HIGH ? CHOIR_PRIORITY_HIGH : p;
}

/* Most urgent first: priority (raised by age), then age. */
static int urgency_cmp(const void *a, const void *b)
{
    const sched_req *x = *(sched_req *const *)a, *y = *(sched_req *const *)b;
    if (x->eff_priority != y->eff_priority)
        return y->eff_priority - x->eff_priority;
    if (x->arrival != y->arrival)
        return x->arrival < y->arrival ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int length_cmp(const void *a, const void *b)
{
    const sched_req *x = *(sched_req *const *)a, *y = *(sched_req *const *)b;
    if (x->length != y->length)
        return x->length < y->length ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static double p99(const sched *s)
{
    if (s->n_lat < 8)
        return 0;
    double v[LAT_WINDOW];
    memcpy(v, s->lat, (size_t)s->n_lat * sizeof *v);
    for (int i = 1; i < s->n_lat; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    int k = (int)ceil(0.99 * s->n_lat) - 1;
    return v[k < 0 ? 0 : k];
}

static void update_pressure(sched *s, double now)
{
    double use = (double)(s->weights + s->reserved + s->external) / (double)s->c.budget;
    double lat = s->c.p99_target_s > 0 ? p99(s) : 0;
    int hot_mem = use > s->c.high_water;
    int hot_lat = s->c.p99_target_s > 0 && lat > s->c.p99_target_s;
    if (!s->degraded && (hot_mem || hot_lat)) {
        s->degraded = 1;
        s->degraded_since = now;
    } else if (s->degraded && use < s->c.low_water &&
               (s->c.p99_target_s <= 0 || lat <= 0.8 * s->c.p99_target_s) &&
               now - s->degraded_since >= s->c.degrade_hold_s) {
        s->degraded = 0;
    }
}

/* A candidate batch of one model: the most urgent bucket that is ready. */
typedef struct candidate {
    int model, n, priority;
    double oldest;
    sched_req *reqs[SCHED_MAX_BATCH];
} candidate;

static int better(const candidate *a, const candidate *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    return a->oldest < b->oldest;
}

/* Finds the most urgent ready bucket of model `mi` into *c; returns 1 if any. */
static int ready_bucket(sched *s, int mi, double now, candidate *c)
{
    sched_model *m = &s->models[mi];
    int n = m->n_queued, maxb = eff_max_batch(s, m), found = 0;
    memcpy(s->scratch, m->queue, (size_t)n * sizeof *s->scratch);
    for (int i = 0; i < n; i++)
        s->scratch[i]->eff_priority = aged_priority(s, s->scratch[i], now);
    qsort(s->scratch, (size_t)n, sizeof *s->scratch, urgency_cmp);
    /* Walk requests most urgent first; each unseen bucket is gathered once. */
    for (int i = 0; i < n; i++) {
        sched_req *head = s->scratch[i];
        if (!head)
            continue;
        int b = bucket_of(s, head->length), cnt = 0, ready = s->draining;
        candidate cur = {.model = mi, .priority = head->eff_priority, .oldest = head->arrival};
        for (int j = i; j < n; j++) {
            sched_req *r = s->scratch[j];
            if (!r || r->task != head->task || bucket_of(s, r->length) != b)
                continue;
            s->scratch[j] = NULL;
            if (r->arrival + wait_limit(s, r) <= now)
                ready = 1;
            double slack = m->compute_ewma > 0 ? m->compute_ewma : 0;
            if (r->deadline - now <= slack)
                ready = 1;
            if (cnt < maxb)
                cur.reqs[cnt++] = r;
            else
                ready = 1; /* a full batch and more behind it */
            if (cnt == maxb)
                ready = 1;
            if (r->arrival < cur.oldest)
                cur.oldest = r->arrival;
        }
        cur.n = cnt;
        if (ready && (!found || better(&cur, c))) {
            *c = cur;
            found = 1;
        }
    }
    return found;
}

/* An idle loaded model to unload (least recently used), or -1. `need_idle_s`
 * is how long it must have been unused; `except` is never chosen. */
static int lru_idle(const sched *s, double now, double need_idle_s, int except, int allow_queued)
{
    int best = -1;
    for (int i = 0; i < s->n_models; i++) {
        const sched_model *m = &s->models[i];
        if (i == except || !m->loaded || m->running || (!allow_queued && m->n_queued))
            continue;
        if (now - m->last_used < need_idle_s)
            continue;
        if (best < 0 || m->last_used < s->models[best].last_used)
            best = i;
    }
    return best;
}

static void unload(sched *s, int mi, sched_action *out)
{
    sched_model *m = &s->models[mi];
    m->loaded = 0;
    s->weights -= m->weights_bytes;
    memset(out, 0, sizeof *out);
    out->kind = SCHED_UNLOAD;
    out->model = mi;
}

int sched_decide(sched *s, double now, sched_action *out)
{
    s->blocked_on_external = 0;
    update_pressure(s, now);
    /* Deadlines first: a request that can no longer start in time leaves with a reason. */
    for (int mi = 0; mi < s->n_models; mi++) {
        sched_model *m = &s->models[mi];
        for (int i = 0; i < m->n_queued; i++) {
            if (m->queue[i]->deadline <= now) {
                sched_req *r = m->queue[i];
                remove_queued(s, r);
                memset(out, 0, sizeof *out);
                out->kind = SCHED_REJECT;
                out->model = mi;
                out->rejected = r;
                out->reason = CHOIR_REJECT_DEADLINE;
                return 1;
            }
        }
    }
    for (int mi = 0; mi < s->n_models; mi++) {
        sched_model *m = &s->models[mi];
        if (m->unload_requested && !m->running && !m->n_queued) {
            m->unload_requested = 0;
            if (m->loaded) {
                unload(s, mi, out);
                return 1;
            }
        }
    }
    if (s->degraded || s->c.unload_idle_s > 0) {
        int mi = lru_idle(s, now, s->degraded ? s->c.degrade_hold_s : s->c.unload_idle_s, -1, 0);
        if (mi >= 0) {
            unload(s, mi, out);
            return 1;
        }
    }
    if (s->running_batches >= s->c.workers)
        return 0;
    candidate best = {0}, c;
    int have = 0;
    for (int mi = 0; mi < s->n_models; mi++) {
        if (s->models[mi].n_queued && ready_bucket(s, mi, now, &c) && (!have || better(&c, &best))) {
            best = c;
            have = 1;
        }
    }
    if (!have)
        return 0;
    sched_model *m = &s->models[best.model];
    /* Keep the most urgent members that fit; the chosen set is sorted by length for the model. */
    int64_t need_w = m->loaded ? 0 : m->weights_bytes;
    int n = best.n;
    while (n > 0) {
        int64_t max_est = 0;
        for (int i = 0; i < n; i++)
            if (best.reqs[i]->est_bytes > max_est)
                max_est = best.reqs[i]->est_bytes;
        if (s->weights + s->reserved + s->external + need_w + reservation(m, max_est, n) <= s->c.budget)
            break;
        n--;
    }
    if (n == 0) {
        int victim = lru_idle(s, now, 0, best.model, 0);
        if (victim < 0)
            victim = lru_idle(s, now, 0, best.model, 1);
        if (victim >= 0) {
            unload(s, victim, out);
            return 1;
        }
        if (s->running_batches > 0)
            return 0; /* wait for running batches to release memory */
        sched_req *r = best.reqs[0];
        if (s->weights + need_w + reservation(m, r->est_bytes, 1) <= s->c.budget) {
            /* Only memory held outside the engine's accounts (I/O, caches)
             * is in the way; it is polled until it shrinks. */
            s->blocked_on_external = 1;
            return 0;
        }
        /* Nothing runs and nothing can be unloaded, yet one request does not
         * fit: the calibrated estimate grew past the budget after it was
         * admitted. Waiting would never end, so it leaves with a reason. */
        remove_queued(s, r);
        memset(out, 0, sizeof *out);
        out->kind = SCHED_REJECT;
        out->model = best.model;
        out->rejected = r;
        out->reason = CHOIR_REJECT_TOO_LARGE;
        return 1;
    }
    memset(out, 0, sizeof *out);
    out->kind = SCHED_DISPATCH;
    out->model = best.model;
    out->n = n;
    for (int i = 0; i < n && i < SCHED_MAX_BATCH; i++)
        out->reqs[i] = best.reqs[i];
    qsort(out->reqs, (size_t)n, sizeof *out->reqs, length_cmp);
    int64_t max_est = 0;
    for (int i = 0; i < n; i++) {
        sched_req *r = out->reqs[i];
        remove_queued(s, r);
        r->state = SCHED_RUNNING;
        if (r->est_bytes > max_est)
            max_est = r->est_bytes;
    }
    out->est_sum = max_est * n;
    out->reserved = reservation(m, max_est, n);
    if (!m->loaded) {
        out->need_load = 1;
        m->loaded = 1;
        s->weights += m->weights_bytes;
    }
    m->running++;
    m->last_used = now;
    s->reserved += out->reserved;
    s->running_batches++;
    s->running_reqs += n;
    return 1;
}

double sched_next_event(sched *s, double now)
{
    /* Only future times: anything already due was acted on by sched_decide,
     * or waits for a batch to finish (a worker or memory to free up), which
     * the caller reports anyway. */
    double t = INFINITY;
    for (int mi = 0; mi < s->n_models; mi++) {
        const sched_model *m = &s->models[mi];
        for (int i = 0; i < m->n_queued; i++) {
            const sched_req *r = m->queue[i];
            double due = r->arrival + wait_limit(s, r);
            if (due > now && due < t)
                t = due;
            if (r->deadline > now && r->deadline < t)
                t = r->deadline;
        }
        double idle_due = m->last_used + s->c.unload_idle_s;
        if (s->c.unload_idle_s > 0 && m->loaded && !m->running && !m->n_queued && idle_due > now && idle_due < t)
            t = idle_due;
    }
    double hold_due = s->degraded_since + s->c.degrade_hold_s;
    if (s->degraded && hold_due > now && hold_due < t)
        t = hold_due;
    if (s->blocked_on_external && now + EXTERNAL_POLL_S < t)
        t = now + EXTERNAL_POLL_S;
    return t;
}

static void release(sched *s, const sched_action *b, double now)
{
    sched_model *m = &s->models[b->model];
    s->reserved -= b->reserved;
    s->running_batches--;
    s->running_reqs -= b->n;
    m->running--;
    m->last_used = now;
}

static void calibrate(sched_model *m, const sched_action *b, int64_t peak, int overflow)
{
    if (overflow) {
        m->factor *= 2;
        return;
    }
    if (b->est_sum <= 0 || peak <= 0)
        return;
    double want = (double)peak / (double)b->est_sum * FACTOR_MARGIN;
    m->factor = want > m->factor ? want : 0.9 * m->factor + 0.1 * want;
    if (m->factor < FACTOR_MIN)
        m->factor = FACTOR_MIN;
}

void sched_batch_done(sched *s, const sched_action *b, double now, int64_t peak_bytes, double compute_s,
                      int overflow)
{
    sched_model *m = &s->models[b->model];
    release(s, b, now);
    calibrate(m, b, peak_bytes, overflow);
    if (compute_s > 0)
        m->compute_ewma = m->compute_ewma > 0 ? 0.8 * m->compute_ewma + 0.2 * compute_s : compute_s;
    for (int i = 0; i < b->n; i++)
        b->reqs[i]->state = SCHED_FINISHED;
    update_pressure(s, now);
}

void sched_requeue(sched *s, const sched_action *b, double now, int64_t peak_bytes)
{
    sched_model *m = &s->models[b->model];
    release(s, b, now);
    calibrate(m, b, peak_bytes, 1);
    for (int i = 0; i < b->n; i++) {
        /* The slots these requests held are free unless new arrivals took them;
         * a retry may then exceed the capacity briefly, which is safe. */
        if (m->n_queued < s->c.queue_capacity) {
            b->reqs[i]->state = SCHED_QUEUED;
            m->queue[m->n_queued++] = b->reqs[i];
        } else {
            b->reqs[i]->state = SCHED_FINISHED;
        }
    }
}

void sched_model_loaded(sched *s, int model, int64_t bytes)
{
    if (model < 0 || model >= s->n_models)
        return;
    sched_model *m = &s->models[model];
    if (bytes < 0) {
        if (m->loaded) {
            m->loaded = 0;
            s->weights -= m->weights_bytes;
        }
        return;
    }
    if (m->loaded)
        s->weights += bytes - m->weights_bytes;
    m->weights_bytes = bytes;
}

void sched_observe_latency(sched *s, double total_s, double now)
{
    s->lat[s->lat_pos] = total_s;
    s->lat_pos = (s->lat_pos + 1) % LAT_WINDOW;
    if (s->n_lat < LAT_WINDOW)
        s->n_lat++;
    update_pressure(s, now);
}

void sched_drain(sched *s)
{
    s->draining = 1;
}

void sched_set_external(sched *s, int64_t bytes)
{
    s->external = bytes > 0 ? bytes : 0;
}

sched_req *sched_pop_queued(sched *s)
{
    for (int mi = 0; mi < s->n_models; mi++) {
        sched_model *m = &s->models[mi];
        if (m->n_queued) {
            sched_req *r = m->queue[m->n_queued - 1];
            remove_queued(s, r);
            return r;
        }
    }
    return NULL;
}

void sched_get_state(const sched *s, sched_state *out)
{
    memset(out, 0, sizeof *out);
    out->budget = s->c.budget;
    out->reserved = s->reserved;
    out->weights = s->weights;
    out->external = s->external;
    for (int i = 0; i < s->n_models; i++)
        out->queued += s->models[i].n_queued;
    out->running_batches = s->running_batches;
    out->running_reqs = s->running_reqs;
    out->degraded = s->degraded;
    out->eff_max_batch = s->degraded ? (s->c.max_batch / 2 > 0 ? s->c.max_batch / 2 : 1) : s->c.max_batch;
}

double sched_model_factor(const sched *s, int model)
{
    return (model >= 0 && model < s->n_models) ? s->models[model].factor : 0;
}

int sched_model_loaded_flag(const sched *s, int model)
{
    return (model >= 0 && model < s->n_models) ? s->models[model].loaded : 0;
}

int64_t sched_model_weights(const sched *s, int model)
{
    return (model >= 0 && model < s->n_models) ? s->models[model].weights_bytes : 0;
}

void sched_request_unload(sched *s, int model)
{
    if (model >= 0 && model < s->n_models)
        s->models[model].unload_requested = 1;
}
