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
 * recovers below the low-water mark after a hold time (hysteresis). Degradation
 * watches host memory and latency only: a GPU filled by weights is its normal
 * state, and a GPU short of room shows up as waiting, hence as latency.
 *
 * Devices: device 0 is the host; devices 1..n are GPUs, each with its own
 * budget for device-side weights and batch reservations. Every replica counts
 * its host-side bytes against the host budget and, on a GPU, its device bytes
 * against that GPU's; every batch reserves its host estimate on the host and,
 * on a GPU, its device estimate on that GPU. No account ever passes its budget.
 * Placement (a model with no replica): a GPU-capable model goes to the GPU
 * with the most room left after its weights and the batch that triggered the
 * load; when none has that room now but one could (its budget holds the
 * weights and the batch), idle replicas there are unloaded LRU or the batch
 * waits. Only a model that fits on no GPU at all (or cannot use one) goes to
 * the CPU. Replicas: when a GPU model's queue has held at least replica_queue
 * requests for replica_after_s and another GPU has room for its weights plus
 * the queue's largest request, a replica is loaded there (SCHED_LOAD, done by
 * a worker, never by the scheduler). Each batch goes to the least-loaded ready
 * replica (fewest running batches, then most free memory on its device); a
 * GPU replica runs one batch at a time (GPU weights serialise their use
 * anyway), a CPU replica as many as there are workers. Replicas beyond a
 * model's first are unloaded after replica_idle_s unused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "engine/sched_internal.h"

#define FACTOR_MIN 0.25
#define FACTOR_MARGIN 1.1
#define RETRY_MARGIN 1.25
#define EXTERNAL_POLL_S 0.05

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
    c->replica_queue = p->replica_queue;
    c->replica_after_s = p->replica_after_s;
    c->replica_idle_s = p->replica_idle_s;
    /* GPUs are filled in by the engine once it has found its devices. */
}

sched *sched_create(const sched_config *c, choir_err *err)
{
    int bad_gpu = !c || c->n_gpus < 0 || c->n_gpus > SCHED_MAX_GPUS;
    for (int i = 0; !bad_gpu && i < c->n_gpus; i++)
        bad_gpu = c->gpu_budget[i] <= 0;
    if (bad_gpu || c->budget <= 0 || c->max_batch < 1 || c->max_batch > SCHED_MAX_BATCH || c->queue_capacity < 1 ||
        c->workers < 1 || !(c->max_pad_waste > 0 && c->max_pad_waste < 1) || !(c->low_water <= c->high_water) ||
        c->replica_queue < 1 || !(c->replica_after_s > 0) || !(c->replica_idle_s > 0)) {
        choir_err_set(err, CHOIR_EINVAL, "scheduler: invalid configuration");
        return NULL;
    }
    sched *s = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *s);
    if (!s)
        goto fail;
    s->c = *c;
    s->n_dev = 1 + c->n_gpus;
    s->dev[0].budget = c->budget;
    for (int i = 0; i < c->n_gpus; i++)
        s->dev[1 + i].budget = c->gpu_budget[i];
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
    m->gpu_host_bytes = m->weights_bytes;
    m->dev_bytes = m->weights_bytes;
    m->max_batch = max_batch < 1 ? 1 : max_batch;
    m->factor = 1.0;
    m->long_since = -1;
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


/* The least host memory a replica of the model takes. */
static int64_t host_need(const sched *s, const sched_model *m)
{
    if (m->gpu && s->n_dev > 1 && m->gpu_host_bytes < m->weights_bytes)
        return m->gpu_host_bytes;
    return m->weights_bytes;
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
    if (r->dev_est_bytes < 0)
        r->dev_est_bytes = 0;
    if (r->pool_est_bytes < 0)
        r->pool_est_bytes = 0;
    if (r->pool_est_bytes > r->dev_est_bytes)
        r->pool_est_bytes = r->dev_est_bytes;
    sched_dev_update_pressure(s, now);
    if (s->draining) {
        why = CHOIR_REJECT_SHUTDOWN;
        code = choir_err_set(err, CHOIR_ECANCELED, "the engine is shutting down");
    } else if (host_need(s, m) + sched_reservation(m, r->est_bytes, 1) > s->c.budget) {
        why = CHOIR_REJECT_TOO_LARGE;
        code = choir_err_set(err, CHOIR_ETOOBIG,
                             "request needs %lld bytes of activations beside %lld of weights; "
                             "the memory budget is %lld",
                             (long long)sched_reservation(m, r->est_bytes, 1), (long long)host_need(s, m),
                             (long long)s->c.budget);
    } else if (s->degraded && r->priority <= CHOIR_PRIORITY_LOW) {
        why = CHOIR_REJECT_OVERLOAD;
        code = choir_err_set(err, CHOIR_EBUSY, "overloaded: low-priority requests are refused for now");
    } else if ((code = sched_dev_refusal(s, r->model, r, &why, err))) {
        /* its GPUs' memory is past the high-water mark (why and err set) */
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
    r->load_failed = 0;
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
    sched_dev_update_pressure(s, now);
    double use = (double)(s->dev[0].weights + s->dev[0].reserved + s->external) / (double)s->c.budget;
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

static int64_t max_of(sched_req *const *reqs, int n, int dev)
{
    int64_t v = 0;
    for (int i = 0; i < n; i++) {
        int64_t x = dev ? reqs[i]->dev_est_bytes : reqs[i]->est_bytes;
        if (x > v)
            v = x;
    }
    return v;
}

/* What n requests reserve on device d: *dev_res from the budget's free
 * memory (n x the largest, as the host arena is sized), *pool_res from the
 * replica's pool when it has one (the sum of their pool estimates: pages are
 * each request's own). Both 0 on the host. */
static void dev_need(const sched_model *m, int d, sched_req *const *reqs, int n, int64_t *dev_res,
                     int64_t *pool_res)
{
    *dev_res = *pool_res = 0;
    if (d <= 0)
        return;
    int pooled = m->rep[d].pool_bytes > 0;
    int64_t most = 0;
    for (int i = 0; i < n; i++) {
        int64_t p = pooled ? reqs[i]->pool_est_bytes : 0;
        if (p > reqs[i]->dev_est_bytes)
            p = reqs[i]->dev_est_bytes;
        int64_t rest = reqs[i]->dev_est_bytes - p;
        if (rest > most)
            most = rest;
        *pool_res += p;
    }
    *dev_res = most * n;
}

/* Counts a new action's requests into device d's pools (its pool_n), or
 * what is left of them out again. */
static void pool_in(sched *s, int d, sched_action *a)
{
    a->pool_n = a->pool_reserved > 0 ? a->n : 0;
    device_acct *g = &s->dev[d];
    g->pool_reqs += a->pool_n;
    if (g->pool_reqs > g->pool_peak_reqs)
        g->pool_peak_reqs = g->pool_reqs;
}

static void pool_out(sched *s, int d, const sched_action *a)
{
    s->dev[d].pool_reqs -= a->pool_n;
}

/* Whether pool_res more bytes fit the unreserved part of replica (m, d)'s pool. */
static int pool_fits(const sched_model *m, int d, int64_t pool_res)
{
    return pool_res <= 0 || (d > 0 && m->rep[d].pool_reserved + pool_res <= m->rep[d].pool_bytes);
}

int sched_decide(sched *s, double now, sched_action *out)
{
    s->blocked_on_external = 0;
    update_pressure(s, now);
    sched_track_queues(s, now);
    /* Deadlines first: a request that can no longer start in time leaves
     * with a reason, as does one whose model failed to load while it waited
     * (sched_load_failed), before any batch could load that model again. */
    for (int mi = 0; mi < s->n_models; mi++) {
        sched_model *m = &s->models[mi];
        for (int i = 0; i < m->n_queued; i++) {
            if (m->queue[i]->load_failed || m->queue[i]->deadline <= now) {
                sched_req *r = m->queue[i];
                remove_queued(s, r);
                memset(out, 0, sizeof *out);
                out->kind = SCHED_REJECT;
                out->model = mi;
                out->rejected = r;
                out->reason = r->load_failed ? CHOIR_REJECT_FAILED : CHOIR_REJECT_DEADLINE;
                return 1;
            }
        }
    }
    if (sched_unload_due(s, now, out))
        return 1;
    if (s->running_batches + s->loading >= s->c.workers)
        return 0;
    if (sched_spawn_replica(s, now, out))
        return 1;
    candidate best = {0}, c;
    int have = 0;
    for (int mi = 0; mi < s->n_models; mi++) {
        const sched_model *cm = &s->models[mi];
        /* A model whose replicas are all busy (or still loading) waits for one. */
        if (!cm->n_queued || (sched_rep_count(cm, s->n_dev) > 0 && sched_rep_pick(s, cm) < 0))
            continue;
        if (ready_bucket(s, mi, now, &c) && (!have || better(&c, &best))) {
            best = c;
            have = 1;
        }
    }
    if (!have)
        return 0;
    sched_model *m = &s->models[best.model];
    /* The device: the chosen replica's, or for a model with none, where it is
     * placed. Keep the most urgent members that fit; the chosen set is sorted
     * by length for the model. */
    int d = sched_rep_pick(s, m), new_rep = d < 0;
    uint32_t gpus = new_rep ? sched_gpu_mask(s, m, best.reqs[0]->dev_est_bytes) : 0;
    int n = best.n;
    int64_t dev_res = 0, pool_res = 0;
    if (new_rep && gpus && m->pool) {
        /* A replica with a pool loads alone, sized beside what runs; the
         * batch forms on it once it is ready. */
        int gd = sched_best_gpu(s, m, gpus, sched_reservation(m, best.reqs[0]->est_bytes, 1),
                                best.reqs[0]->dev_est_bytes);
        if (gd > 0) {
            sched_rep_add(s, best.model, gd, REP_LOADING, now);
            s->loading++;
            memset(out, 0, sizeof *out);
            out->kind = SCHED_LOAD;
            out->model = best.model;
            out->device = gd;
            return 1;
        }
        n = 0;
    }
    for (; n > 0; n--) {
        int64_t host_res = sched_reservation(m, max_of(best.reqs, n, 0), n);
        dev_res = max_of(best.reqs, n, 1) * n;
        pool_res = 0;
        if (!new_rep) {
            dev_need(m, d, best.reqs, n, &dev_res, &pool_res);
            if (sched_fits(s, m, d, 0, host_res, dev_res) && pool_fits(m, d, pool_res))
                break;
        } else if (gpus) {
            if ((d = sched_best_gpu(s, m, gpus, host_res, dev_res)) >= 0)
                break;
        } else if (sched_fits(s, m, 0, 1, host_res, 0)) {
            d = 0;
            break;
        }
    }
    if (n == 0) {
        /* Room first on the device the batch needs, then anywhere (host memory). */
        uint32_t want = new_rep ? (gpus ? gpus : 1u) : 1u << d;
        int vm, vd;
        if (sched_lru_idle(s, now, 0, best.model, 0, want, &vm, &vd) || sched_lru_idle(s, now, 0, best.model, 1, want, &vm, &vd) ||
            sched_lru_idle(s, now, 0, best.model, 0, ~0u, &vm, &vd) || sched_lru_idle(s, now, 0, best.model, 1, ~0u, &vm, &vd)) {
            sched_unload(s, vm, vd, out);
            return 1;
        }
        if (s->running_batches > 0 || s->loading > 0)
            return 0; /* wait for running batches (and loads) to settle memory */
        sched_req *r = best.reqs[0];
        int gd = new_rep ? (gpus ? -1 : 0) : d;
        int64_t host_w = s->dev[0].weights + (new_rep ? (gpus ? m->gpu_host_bytes : m->weights_bytes) : 0);
        int ever = host_w + sched_reservation(m, r->est_bytes, 1) <= s->c.budget, dev_never = 0;
        int64_t one_dev = 0, one_pool = 0;
        if (ever && gd > 0) {
            /* A replica with a pool: its rest beside the weights (the pool
             * among them), its pool part within the whole pool. */
            dev_need(m, gd, &r, 1, &one_dev, &one_pool);
            ever = s->dev[gd].weights + one_dev <= s->dev[gd].budget && one_pool <= m->rep[gd].pool_bytes;
            dev_never = !ever;
        }
        if (ever) {
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
        out->reserved = sched_reservation(m, r->est_bytes, 1);
        out->room = s->c.budget - host_w;
        if (dev_never) {
            /* The device said no: what it needed there, and the room. */
            out->device = gd;
            out->dev_reserved = one_dev;
            out->pool_reserved = one_pool;
            out->dev_room = s->dev[gd].budget - s->dev[gd].weights;
            out->pool_room = m->rep[gd].pool_bytes;
        }
        return 1;
    }
    memset(out, 0, sizeof *out);
    out->kind = SCHED_DISPATCH;
    out->model = best.model;
    out->device = d;
    out->n = n;
    for (int i = 0; i < n && i < SCHED_MAX_BATCH; i++)
        out->reqs[i] = best.reqs[i];
    qsort(out->reqs, (size_t)n, sizeof *out->reqs, length_cmp);
    for (int i = 0; i < n; i++) {
        remove_queued(s, out->reqs[i]);
        out->reqs[i]->state = SCHED_RUNNING;
    }
    int64_t max_est = max_of(out->reqs, n, 0);
    out->est_sum = max_est * n;
    out->reserved = sched_reservation(m, max_est, n);
    out->dev_reserved = d > 0 ? dev_res : 0;
    out->pool_reserved = d > 0 ? pool_res : 0;
    m->rep[d].pool_reserved += out->pool_reserved;
    pool_in(s, d, out);
    if (new_rep) {
        out->need_load = 1;
        sched_rep_add(s, best.model, d, REP_READY, now);
    }
    m->running++;
    m->rep[d].running++;
    m->rep[d].last_used = now;
    m->last_used = now;
    s->dev[0].reserved += out->reserved;
    s->dev[d].reserved += out->dev_reserved;
    s->dev[d].running++;
    s->running_batches++;
    s->running_reqs += n;
    sched_note_peaks(s);
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
        int reps = sched_rep_count(m, s->n_dev);
        for (int d = 0; d < s->n_dev; d++) {
            const sched_replica *r = &m->rep[d];
            if (r->state != REP_READY || r->running)
                continue;
            double idle_due = r->last_used + s->c.unload_idle_s;
            if (s->c.unload_idle_s > 0 && !m->n_queued && idle_due > now && idle_due < t)
                t = idle_due;
            double extra_due = r->last_used + s->c.replica_idle_s;
            if (reps >= 2 && extra_due > now && extra_due < t)
                t = extra_due;
        }
        double spawn_due = m->long_since + s->c.replica_after_s;
        if (sched_wants_replica(s, m) && spawn_due > now && spawn_due < t)
            t = spawn_due;
    }
    double hold_due = s->degraded_since + s->c.degrade_hold_s;
    if (s->degraded && hold_due > now && hold_due < t)
        t = hold_due;
    for (int d = 1; d < s->n_dev; d++) {
        double due = s->dev[d].hot_since + s->c.degrade_hold_s;
        if (s->dev[d].hot && due > now && due < t)
            t = due;
    }
    if (s->blocked_on_external && now + EXTERNAL_POLL_S < t)
        t = now + EXTERNAL_POLL_S;
    return t;
}

static void release(sched *s, const sched_action *b, double now)
{
    sched_model *m = &s->models[b->model];
    int d = b->device;
    s->dev[0].reserved -= b->reserved;
    s->dev[d].reserved -= b->dev_reserved;
    m->rep[d].pool_reserved -= b->pool_reserved;
    pool_out(s, d, b);
    if (b->joined) {
        s->running_reqs -= b->n;
        m->last_used = now;
        return;
    }
    s->dev[d].running--;
    s->running_batches--;
    s->running_reqs -= b->n;
    m->running--;
    m->last_used = now;
    m->rep[d].running--;
    m->rep[d].last_used = now;
}

/* After an overflow: the factor that gives the same batch the room its
 * failed run showed it needs (`need`, the fill level its refused allocation
 * would have reached; 0 when unknown) with a margin, at least twice what it
 * had (so retries are few however many allocations the run had left), and,
 * when the need fits but that would pass the budget, all the budget leaves
 * one batch now (beside the weights and the memory held outside the engine's
 * accounts; a reservation of the whole budget would wait for the latter
 * forever). A need beyond that room is not capped: the batch is then split,
 * or a single request waits for outside memory to shrink or is refused as too
 * large when it is formed again. The factor only grows here. */
static void overflow_factor(const sched *s, sched_model *m, const sched_action *b, int64_t need)
{
    if (b->est_sum <= 0) {
        m->factor *= 2;
        return;
    }
    double had = (double)b->reserved, room = (double)(s->c.budget - s->dev[0].weights - s->external);
    double want = 2 * had;
    if ((double)need * RETRY_MARGIN > want)
        want = (double)need * RETRY_MARGIN;
    if (want > room && (double)need <= room && had < room)
        want = room;
    double f = want / (double)b->est_sum;
    /* the reservation rounds up: never a byte past the room */
    while (want == room && f > 0 && ceil((double)b->est_sum * f) > room)
        f = nextafter(f, 0);
    if (f > m->factor)
        m->factor = f;
}

static void calibrate(const sched *s, sched_model *m, const sched_action *b, int64_t peak, int64_t need,
                      int overflow)
{
    if (overflow) {
        overflow_factor(s, m, b, need);
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
                      int64_t overflow_need, int overflow)
{
    sched_model *m = &s->models[b->model];
    release(s, b, now);
    s->dev[b->device].batches++;
    s->dev[b->device].busy_s += compute_s > 0 ? compute_s : 0;
    calibrate(s, m, b, peak_bytes, overflow_need, overflow);
    if (compute_s > 0)
        m->compute_ewma = m->compute_ewma > 0 ? 0.8 * m->compute_ewma + 0.2 * compute_s : compute_s;
    for (int i = 0; i < b->n; i++)
        b->reqs[i]->state = SCHED_FINISHED;
    update_pressure(s, now);
}

static void put_back(sched *s, const sched_action *b)
{
    sched_model *m = &s->models[b->model];
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

void sched_requeue(sched *s, const sched_action *b, double now, int64_t peak_bytes, int64_t need)
{
    release(s, b, now);
    calibrate(s, &s->models[b->model], b, peak_bytes, need, 1);
    put_back(s, b);
}

void sched_return(sched *s, const sched_action *b, double now)
{
    release(s, b, now);
    put_back(s, b);
}


int sched_join(sched *s, const sched_action *batch, int live, double now, sched_action *out, int room)
{
    sched_model *m = &s->models[batch->model];
    int d = batch->device, task = batch->n > 0 ? batch->reqs[0]->task : -1, taken = 0;
    int cap = eff_max_batch(s, m) - live;
    if (room > cap)
        room = cap;
    while (taken < room && !s->draining) {
        sched_req *best = NULL;
        for (int i = 0; i < m->n_queued; i++) {
            sched_req *r = m->queue[i];
            if (r->task != task || r->deadline <= now || r->load_failed)
                continue; /* another task never shares the batch; a late one (or one whose model
                             failed to load) is sched_decide's to reject */
            r->eff_priority = aged_priority(s, r, now);
            if (!best || urgency_cmp(&r, &best) < 0)
                best = r;
        }
        if (!best)
            break;
        int64_t host_res = sched_reservation(m, best->est_bytes, 1), dev_res, pool_res;
        dev_need(m, d, &best, 1, &dev_res, &pool_res);
        if (!sched_fits(s, m, d, 0, host_res, dev_res) || !pool_fits(m, d, pool_res))
            break;
        remove_queued(s, best);
        best->state = SCHED_RUNNING;
        sched_action *a = &out[taken++];
        memset(a, 0, sizeof *a);
        a->kind = SCHED_DISPATCH;
        a->model = batch->model;
        a->device = d;
        a->n = 1;
        a->reqs[0] = best;
        a->reserved = host_res;
        a->est_sum = best->est_bytes;
        a->dev_reserved = dev_res;
        a->pool_reserved = pool_res;
        a->joined = 1;
        s->dev[0].reserved += host_res;
        s->dev[d].reserved += dev_res;
        m->rep[d].pool_reserved += pool_res;
        pool_in(s, d, a);
        s->running_reqs++;
        m->last_used = now;
        sched_note_peaks(s);
    }
    return taken;
}

void sched_member_done(sched *s, sched_action *b, sched_req *r)
{
    int d = b->device, at = -1;
    if (d <= 0 || b->joined)
        return;
    for (int i = 0; i < b->n && i < SCHED_MAX_BATCH && at < 0; i++)
        if (b->reqs[i] == r)
            at = i;
    if (at < 0 || (b->members_done >> at & 1))
        return;
    b->members_done |= (uint64_t)1 << at;
    /* What the members left need, reckoned as at dispatch (dev_need): it
     * never grows, since they are a subset of the batch. */
    sched_req *left[SCHED_MAX_BATCH];
    int n_left = 0;
    for (int i = 0; i < b->n && i < SCHED_MAX_BATCH; i++)
        if (!(b->members_done >> i & 1))
            left[n_left++] = b->reqs[i];
    sched_model *m = &s->models[b->model];
    int64_t dev_res, pool_res;
    dev_need(m, d, left, n_left, &dev_res, &pool_res);
    if (dev_res > b->dev_reserved)
        dev_res = b->dev_reserved;
    if (pool_res > b->pool_reserved)
        pool_res = b->pool_reserved;
    s->dev[d].reserved -= b->dev_reserved - dev_res;
    b->dev_reserved = dev_res;
    m->rep[d].pool_reserved -= b->pool_reserved - pool_res;
    b->pool_reserved = pool_res;
    if (b->pool_n > 0) {
        b->pool_n--;
        s->dev[d].pool_reqs--;
    }
}

void sched_join_done(sched *s, const sched_action *j, double now, int64_t peak_bytes)
{
    release(s, j, now);
    calibrate(s, &s->models[j->model], j, peak_bytes, 0, 0);
    j->reqs[0]->state = SCHED_FINISHED;
    update_pressure(s, now);
}

void sched_join_requeue(sched *s, const sched_action *j, double now, int64_t need)
{
    release(s, j, now);
    calibrate(s, &s->models[j->model], j, 0, need, 1);
    put_back(s, j);
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
    out->reserved = s->dev[0].reserved;
    out->weights = s->dev[0].weights;
    out->external = s->external;
    for (int i = 0; i < s->n_models; i++)
        out->queued += s->models[i].n_queued;
    out->running_batches = s->running_batches;
    out->running_reqs = s->running_reqs;
    out->degraded = s->degraded;
    out->eff_max_batch = s->degraded ? (s->c.max_batch / 2 > 0 ? s->c.max_batch / 2 : 1) : s->c.max_batch;
    out->loading = s->loading;
}



double sched_model_factor(const sched *s, int model)
{
    return (model >= 0 && model < s->n_models) ? s->models[model].factor : 0;
}

int sched_model_loaded_flag(const sched *s, int model)
{
    return (model >= 0 && model < s->n_models) ? sched_rep_count(&s->models[model], s->n_dev) > 0 : 0;
}

int sched_model_queued(const sched *s, int model)
{
    return (model >= 0 && model < s->n_models) ? s->models[model].n_queued : 0;
}

int64_t sched_model_weights(const sched *s, int model)
{
    if (model < 0 || model >= s->n_models)
        return 0;
    const sched_model *m = &s->models[model];
    int64_t sum = 0;
    for (int d = 0; d < s->n_dev; d++)
        if (m->rep[d].state != REP_NONE)
            sum += m->rep[d].host_bytes;
    return sched_rep_count(m, s->n_dev) ? sum : m->weights_bytes;
}



void sched_request_unload(sched *s, int model)
{
    if (model >= 0 && model < s->n_models)
        s->models[model].unload_requested = 1;
}
