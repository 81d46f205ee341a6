/* The engine: the scheduler core (sched.c) driven by one scheduler thread on
 * the monotonic clock, and worker threads that load models and run batches.
 *
 * Locking: one engine mutex guards the core, the model table, the ready-batch
 * list and the live-ticket list. A ticket's own mutex guards its completion.
 * Order: engine lock before ticket lock, never the reverse. User callbacks and
 * model code run with no engine lock held, so a callback may call back into
 * the engine (submit, cancel). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/kernels.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "engine/engine_internal.h"

static double engine_now(const choir_engine *e)
{
    return (double)(choir_now_ns() - e->start_ns) * 1e-9;
}

static void abs_deadline(struct timespec *ts, double seconds)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    if (seconds > 3600)
        seconds = 3600;
    double whole = floor(seconds);
    ts->tv_sec += (time_t)whole;
    ts->tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void cond_init_monotonic(pthread_cond_t *c)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

/* ---- tickets ---------------------------------------------------------- */

static void ticket_unref(choir_ticket *t)
{
    pthread_mutex_lock(&t->lock);
    int last = --t->refs == 0;
    pthread_mutex_unlock(&t->lock);
    if (last) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cond);
        choir_free(t);
    }
}

static int ticket_on_output(void *user, const choir_output *out)
{
    choir_ticket *t = user;
    if (out->samples && out->n_samples > 0 && out->sample_rate > 0 &&
        (t->req.task == CHOIR_TASK_TTS || t->req.task == CHOIR_TASK_STS))
        t->req.audio_seconds += (double)out->n_samples / out->sample_rate;
    return t->user_fn ? t->user_fn(t->user, out) : 0;
}

/* Ends a ticket: delivers a final output if the model did not, records
 * metrics, wakes waiters and drops the engine's reference. Call without the
 * engine lock. */
static void ticket_finish(choir_engine *e, choir_ticket *t, int status, choir_reject_reason reason,
                          const char *msg)
{
    if (!t->req.done) {
        choir_output out = {.final = 1, .status = status, .error = status ? msg : NULL};
        choir_request_emit(&t->req, &out);
    }
    uint64_t done_ns = choir_now_ns();
    pthread_mutex_lock(&e->lock);
    if (t->prev)
        t->prev->next = t->next;
    else if (e->live == t)
        e->live = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
    if (status == 0)
        sched_observe_latency(e->core, (double)(done_ns - t->submit_ns) * 1e-9, engine_now(e));
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->lock);

    pthread_mutex_lock(&t->lock);
    t->status = status;
    t->reason = status ? reason : CHOIR_REJECT_NONE;
    snprintf(t->msg, sizeof t->msg, "%s", status && msg ? msg : "");
    engine_metrics_request_done(e, t, done_ns);
    t->finished = 1;
    t->engine = NULL;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    ticket_unref(t);
}

int choir_ticket_wait(choir_ticket *t, double timeout_s, choir_err *err)
{
    int running;
    return choir_ticket_poll(t, timeout_s, &running, err);
}

int choir_ticket_poll(choir_ticket *t, double timeout_s, int *running, choir_err *err)
{
    *running = 0;
    if (!t)
        return choir_err_set(err, CHOIR_EINVAL, "no ticket");
    struct timespec ts;
    if (timeout_s >= 0)
        abs_deadline(&ts, timeout_s);
    pthread_mutex_lock(&t->lock);
    while (!t->finished) {
        if (timeout_s < 0) {
            pthread_cond_wait(&t->cond, &t->lock);
        } else if (pthread_cond_timedwait(&t->cond, &t->lock, &ts) == ETIMEDOUT) {
            break;
        }
    }
    *running = !t->finished;
    int rc = t->finished ? t->status : CHOIR_ETIMEDOUT;
    if (rc && t->finished)
        choir_err_set(err, rc, "%s", t->msg);
    else if (rc)
        choir_err_set(err, rc, "the request is still running");
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int choir_ticket_done(const choir_ticket *t)
{
    if (!t)
        return 1;
    choir_ticket *mt = (choir_ticket *)t;
    pthread_mutex_lock(&mt->lock);
    int d = mt->finished;
    pthread_mutex_unlock(&mt->lock);
    return d;
}

choir_reject_reason choir_ticket_reason(const choir_ticket *t)
{
    if (!t)
        return CHOIR_REJECT_NONE;
    choir_ticket *mt = (choir_ticket *)t;
    pthread_mutex_lock(&mt->lock);
    choir_reject_reason r = mt->reason;
    pthread_mutex_unlock(&mt->lock);
    return r;
}

void choir_ticket_cancel(choir_ticket *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    choir_engine *e = t->finished ? NULL : t->engine;
    pthread_mutex_unlock(&t->lock);
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    int was_queued = sched_cancel(e->core, &t->sr);
    /* A running request stops at the model's next output. */
    if (!was_queued)
        __atomic_store_n(&t->req.cancelled, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&e->wake_sched);
    pthread_mutex_unlock(&e->lock);
    if (was_queued)
        ticket_finish(e, t, CHOIR_ECANCELED, CHOIR_REJECT_CANCELLED, "cancelled by the caller");
}

void choir_ticket_free(choir_ticket *t)
{
    if (!t)
        return;
    choir_ticket_cancel(t);
    choir_ticket_wait(t, -1, NULL);
    ticket_unref(t);
}

/* ---- models ----------------------------------------------------------- */

int choir_engine_add_model(choir_engine *e, const char *id, const char *dir, const choir_model_ops *ops,
                           choir_err *err)
{
    if (!e || !id || !*id || !dir)
        return choir_err_set(err, CHOIR_EINVAL, "add_model: id and dir are required");
    if (!ops)
        ops = choir_model_detect(dir, NULL, 0, err);
    if (!ops)
        return err ? err->code : CHOIR_ENOTFOUND;
    if (!ops->load || !ops->run_batch || !ops->free || ops->max_batch < 1)
        return choir_err_set(err, CHOIR_EINVAL, "model adapter '%s' is incomplete", ops->kind ? ops->kind : "?");
    int64_t bytes = choir_model_dir_bytes(dir);
    if (bytes < 0)
        bytes = 0;
    int rc = 0;
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_models; i++) {
        engine_model *old = &e->models[i];
        if (strcmp(old->id, id) != 0)
            continue;
        /* A withdrawn model keeps its id (its index is the scheduler's and
         * its series the metrics'): the same directory comes back under it,
         * another cannot have it. */
        if (old->withdrawn && strcmp(old->dir, dir) == 0 && old->ops == ops) {
            old->withdrawn = 0;
            old->created = (int64_t)time(NULL);
            CHOIR_LOGI("engine: model '%s' is back (%s)", id, dir);
        } else {
            rc = choir_err_set(err, CHOIR_EINVAL, "model id '%s' is already registered", id);
        }
        goto out;
    }
    engine_model *grown = choir_realloc(e->models, (size_t)(e->n_models + 1) * sizeof *grown);
    if (!grown) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "add_model: out of memory");
        goto out;
    }
    e->models = grown;
    engine_model *m = &e->models[e->n_models];
    memset(m, 0, sizeof *m);
    m->id = choir_strdup(id);
    m->dir = choir_strdup(dir);
    m->ops = ops;
    m->created = (int64_t)time(NULL);
    if (!m->id || !m->dir) {
        choir_free(m->id);
        choir_free(m->dir);
        rc = choir_err_set(err, CHOIR_ENOMEM, "add_model: out of memory");
        goto out;
    }
    rc = sched_add_model(e->core, bytes, ops->max_batch, err);
    if (rc < 0) {
        choir_free(m->id);
        choir_free(m->dir);
        goto out;
    }
    /* Before a load the device bytes are unknown; the files' size stands in. */
    if (ops->gpu && e->n_devices > 1) {
        sched_model_set_gpu(e->core, rc, bytes);
        if (ops->pool_bytes)
            sched_model_set_pool(e->core, rc);
    }
    engine_metrics_add_model(e, m);
    e->n_models++;
    rc = 0;
    CHOIR_LOGI("engine: model '%s' (%s) from %s, %lld bytes of weights", id, ops->kind ? ops->kind : "?", dir,
               (long long)bytes);
out:
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* Asks for model `id`'s weights to go (and, when `withdraw`, for the model to
 * be withdrawn). A withdrawn model is not found. */
static int unload(choir_engine *e, const char *id, int withdraw, choir_err *err)
{
    if (!e || !id)
        return choir_err_set(err, CHOIR_EINVAL, "unload_model: no id");
    pthread_mutex_lock(&e->lock);
    int found = -1;
    for (int i = 0; i < e->n_models; i++)
        if (!e->models[i].withdrawn && strcmp(e->models[i].id, id) == 0)
            found = i;
    if (found >= 0) {
        e->models[found].withdrawn |= withdraw;
        sched_request_unload(e->core, found);
        pthread_cond_signal(&e->wake_sched);
    }
    pthread_mutex_unlock(&e->lock);
    if (found < 0)
        return choir_err_set(err, CHOIR_ENOTFOUND, "no model '%s'", id);
    return CHOIR_OK;
}

int choir_engine_unload_model(choir_engine *e, const char *id, choir_err *err)
{
    return unload(e, id, 0, err);
}

int choir_engine_withdraw_model(choir_engine *e, const char *id, choir_err *err)
{
    return unload(e, id, 1, err);
}

/* ---- submission ------------------------------------------------------- */

static double input_seconds(const choir_request *r)
{
    switch (r->task) {
    case CHOIR_TASK_STT:
        return (double)r->in.stt.n_samples / (r->in.stt.sample_rate > 0 ? r->in.stt.sample_rate : 16000.0);
    case CHOIR_TASK_VAD: return (double)r->in.vad.n_samples / 16000.0;
    case CHOIR_TASK_STS:
        return r->in.sts.sample_rate > 0 ? (double)r->in.sts.n_samples / r->in.sts.sample_rate : 0;
    default: return 0;
    }
}

static int check_input(const choir_request *r, choir_err *err)
{
    switch (r->task) {
    case CHOIR_TASK_TTS:
        if (!r->in.tts.text || !*r->in.tts.text)
            return choir_err_set(err, CHOIR_EINVAL, "tts: empty text");
        return 0;
    case CHOIR_TASK_STT:
        if (!r->in.stt.samples || r->in.stt.n_samples <= 0)
            return choir_err_set(err, CHOIR_EINVAL, "stt: no audio");
        return 0;
    case CHOIR_TASK_VAD:
        if (!r->in.vad.samples || r->in.vad.n_samples <= 0)
            return choir_err_set(err, CHOIR_EINVAL, "vad: no audio");
        return 0;
    case CHOIR_TASK_STS:
        if (!r->in.sts.samples || r->in.sts.n_samples <= 0 || r->in.sts.sample_rate <= 0)
            return choir_err_set(err, CHOIR_EINVAL, "sts: no audio or no sample rate");
        return 0;
    default: return choir_err_set(err, CHOIR_EINVAL, "unknown task %d", (int)r->task);
    }
}

/* Weights of any loaded replica (for estimates), or NULL. Engine lock held. */
static const void *any_weights(const engine_model *m)
{
    for (int d = 0; d < SCHED_MAX_DEVICES; d++)
        if (m->load_state[d] == LOAD_READY)
            return m->weights[d];
    return NULL;
}

/* Seconds a batch of n requests takes, from the batches measured so far: a
 * least-squares line t = a + c n over them, recent ones weighted most. While
 * every measured batch had the same size the split between a fixed and a
 * per-request cost is unknown, and all of it is taken as per request (the
 * cautious choice: it predicts the longest waits). 0 before any batch.
 * Engine lock held. */
static double batch_cost(const choir_engine *e, double n)
{
    const double w = e->fit_w, sn = e->fit_n, snn = e->fit_nn, st = e->fit_t, snt = e->fit_nt;
    if (!(w > 0))
        return 0;
    double var = w * snn - sn * sn;
    double a = 0, c = st / sn;
    if (var > 1e-6 * w * w) {
        c = (w * snt - sn * st) / var;
        a = (st - c * sn) / w;
        if (c < 0) {
            c = 0;
            a = st / w;
        } else if (a < 0) {
            a = 0;
            c = snt / snn;
        }
    }
    return a + c * n;
}

/* Seconds from a submit now to the start of its batch, and (in *finish)
 * to its end: half of what is running, then the full batches queued ahead,
 * over the workers; then its own batch (the queue's remainder plus it).
 * 0 until a batch has been measured. `max_batch`: the model's largest batch.
 * Batches grow with the queue: a model whose batch costs little more than
 * one request is predicted to drain a long queue quickly. Engine lock held. */
static double predicted_wait_locked(const choir_engine *e, int max_batch, double *finish)
{
    if (finish)
        *finish = 0;
    if (!(e->fit_w > 0))
        return 0;
    sched_state st;
    sched_get_state(e->core, &st);
    int b = st.eff_max_batch < max_batch ? st.eff_max_batch : max_batch;
    if (b < 1)
        b = 1;
    double running = st.running_batches > 0
                         ? 0.5 * st.running_batches * batch_cost(e, (double)st.running_reqs / st.running_batches)
                         : 0;
    double ahead = floor((double)st.queued / b) * batch_cost(e, b);
    double wait = (running + ahead) / e->p.workers;
    if (finish)
        *finish = wait + batch_cost(e, (double)(st.queued % b + 1));
    return wait;
}

/* The model a job goes to, or -1. Engine lock held. */
static int find_model(const choir_engine *e, const choir_job *job)
{
    for (int i = 0; i < e->n_models; i++) {
        const engine_model *m = &e->models[i];
        if (m->withdrawn)
            continue;
        if (job->model_id ? strcmp(m->id, job->model_id) == 0
                          : (m->ops->tasks & CHOIR_TASK_BIT(job->req.task)) != 0)
            return i;
    }
    return -1;
}

choir_ticket *choir_engine_submit(choir_engine *e, const choir_job *job, choir_reject_reason *reason,
                                  choir_err *err)
{
    if (reason)
        *reason = CHOIR_REJECT_NONE;
    if (!e || !job) {
        choir_err_set(err, CHOIR_EINVAL, "submit: no engine or job");
        return NULL;
    }
    if (check_input(&job->req, err) < 0)
        return NULL;
    double secs = input_seconds(&job->req);
    choir_ticket *t = choir_calloc(CHOIR_MEM_IO, 1, sizeof *t);
    if (!t) {
        choir_err_set(err, CHOIR_ENOMEM, "submit: out of memory");
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    cond_init_monotonic(&t->cond);
    t->refs = 2;
    t->engine = e;
    t->req = job->req;
    t->req.on_output = ticket_on_output;
    t->req.on_output_user = t;
    t->req.status = 0;
    t->req.done = 0;
    t->req.cancelled = 0;
    t->req.first_output_ns = 0;
    t->req.audio_seconds = secs;
    t->req.error[0] = 0;
    t->user_fn = job->on_output;
    t->user = job->user;
    t->submit_ns = choir_now_ns();

    choir_reject_reason why = CHOIR_REJECT_NONE;
    pthread_mutex_lock(&e->lock);
    int mi = find_model(e, job);
    int rc = 0;
    if (mi < 0) {
        rc = choir_err_set(err, CHOIR_ENOTFOUND, "no model %s%s serves %s", job->model_id ? "named " : "",
                           job->model_id ? job->model_id : "", choir_task_name(job->req.task));
        why = CHOIR_REJECT_FAILED;
    } else if (!(e->models[mi].ops->tasks & CHOIR_TASK_BIT(job->req.task))) {
        rc = choir_err_set(err, CHOIR_EINVAL, "model '%s' does not do %s", e->models[mi].id,
                           choir_task_name(job->req.task));
        why = CHOIR_REJECT_FAILED;
    } else if (secs > engine_max_audio(e, mi)) {
        rc = choir_err_set(err, CHOIR_ETOOBIG, "audio is %.1f s long; the model '%s' takes at most %.0f s", secs,
                           e->models[mi].id, engine_max_audio(e, mi));
        why = CHOIR_REJECT_TOO_LARGE;
    } else if (e->models[mi].ops->check &&
               (rc = e->models[mi].ops->check(any_weights(&e->models[mi]), &t->req, err)) < 0) {
        why = CHOIR_REJECT_FAILED; /* the request's options: the caller's to fix (HTTP 400) */
    } else {
        const engine_model *m = &e->models[mi];
        const void *w = any_weights(m);
        int64_t len = m->ops->length ? m->ops->length(w, &t->req)
                      : job->req.task == CHOIR_TASK_TTS ? (int64_t)strlen(job->req.in.tts.text)
                                                        : (int64_t)(secs * 16000.0);
        /* Without a model estimate, assume 64 bytes per length unit: enough
         * for a few float buffers per sample or per character. */
        int64_t est = m->ops->estimate ? m->ops->estimate(w, &t->req) : len * 64;
        int64_t dev_est = m->ops->gpu && m->ops->estimate_device ? m->ops->estimate_device(w, &t->req) : 0;
        int64_t pool_est = m->ops->gpu && m->ops->estimate_pool ? m->ops->estimate_pool(w, &t->req) : 0;
        /* Text is read at roughly 15 characters per second of speech. */
        double seconds = job->req.task == CHOIR_TASK_TTS ? (double)strlen(job->req.in.tts.text) / 15.0 : secs;
        double now = engine_now(e);
        t->model = mi;
        t->sr.id = ++e->next_id;
        t->sr.model = mi;
        t->sr.task = job->req.task;
        t->sr.priority = job->priority;
        t->sr.is_long = seconds > e->p.long_seconds;
        t->sr.length = len;
        t->sr.est_bytes = est;
        t->sr.dev_est_bytes = dev_est;
        t->sr.pool_est_bytes = pool_est;
        t->sr.deadline = job->timeout_s > 0 ? now + job->timeout_s : INFINITY;
        t->sr.user = t;
        /* Triton's queue policy: a request that would wait in the queue
         * past its deadline is refused now, while the client can still go
         * elsewhere, not failed when the deadline comes. */
        double finish;
        sched_state ss;
        sched_get_state(e->core, &ss);
        predicted_wait_locked(e, m->ops->max_batch, &finish);
        /* an idle engine never refuses by prediction: the figures are of
         * other requests, whose lengths may be nothing like this one's */
        if (job->timeout_s > 0 && ss.queued + ss.running_reqs > 0 && finish > job->timeout_s) {
            why = CHOIR_REJECT_BACKLOG;
            rc = choir_err_set(err, CHOIR_EBUSY,
                               "overloaded: the predicted wait and compute (%.1f s) pass the request's %.1f-s deadline",
                               finish, job->timeout_s);
        } else {
            rc = sched_submit(e->core, &t->sr, now, &why, err);
        }
        choir_metrics_inc(e->m.reg, e->m.submitted, 1);
        choir_metrics_inc(e->m.reg, m->m_requests, 1);
    }
    if (rc == 0) {
        t->next = e->live;
        if (e->live)
            e->live->prev = t;
        e->live = t;
        pthread_cond_signal(&e->wake_sched);
    } else if (why > CHOIR_REJECT_NONE && why < CHOIR_REJECT_COUNT) {
        choir_metrics_inc(e->m.reg, e->m.rejected[why], 1);
    }
    pthread_mutex_unlock(&e->lock);
    if (reason)
        *reason = why;
    if (rc) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cond);
        choir_free(t);
        return NULL;
    }
    return t;
}

int choir_engine_get_queue_info(choir_engine *e, const char *id, choir_engine_queue_info *out)
{
    if (!e || !out)
        return CHOIR_EINVAL;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->lock);
    int found = 0;
    for (int i = 0; i < e->n_models; i++) {
        if (id && strcmp(e->models[i].id, id) != 0)
            continue;
        found = 1;
        out->capacity += e->p.queue_capacity;
        out->queued += sched_model_queued(e->core, i);
    }
    sched_state st;
    sched_get_state(e->core, &st);
    out->running = st.running_reqs;
    out->predicted_s = predicted_wait_locked(e, e->p.max_batch, NULL);
    pthread_mutex_unlock(&e->lock);
    return found || !id ? 0 : CHOIR_ENOTFOUND;
}

double choir_engine_retry_after(const choir_engine *e)
{
    if (!e)
        return 1;
    choir_engine *me = (choir_engine *)e;
    pthread_mutex_lock(&me->lock);
    sched_state st;
    sched_get_state(me->core, &st);
    double per = me->compute_per_req_ewma > 0 ? me->compute_per_req_ewma : 0.1;
    pthread_mutex_unlock(&me->lock);
    double s = per * (double)(st.queued + st.running_reqs) / me->p.workers;
    return s < 1 ? 1 : s > 60 ? 60 : ceil(s);
}

/* ---- workers ---------------------------------------------------------- */

/* Loads model `mi` on device `d` (a worker's job, never the scheduler's);
 * returns its weights or NULL (and err). *misplaced is set when the weights
 * turned out too large for that GPU (they are freed; the caller returns its
 * batch to the queue). Engine lock held on entry and exit, released during
 * the load. */
static void *load_replica(choir_engine *e, int mi, int d, choir_err *err, int *misplaced)
{
    engine_model *m = &e->models[mi];
    m->load_state[d] = LOAD_BUSY;
    /* add_model may grow the table while the lock is released: keep what
     * the load needs (the strings and ops never move) and look m up again. */
    const choir_model_ops *ops = m->ops;
    const char *dir = m->dir;
    choir_model_options opt = e->p.model_options;
    opt.device = d;
    /* A replica that sizes a pool from its room (ops->pool_bytes) learns it
     * now: the budget beside every other replica and all reservations. */
    opt.device_free_bytes = d > 0 ? sched_load_room(e->core, mi, d) : 0;
    pthread_mutex_unlock(&e->lock);
    uint64_t t0 = choir_now_ns();
    void *w = ops->load(dir, &opt, err);
    int64_t bytes = w && ops->resident_bytes ? ops->resident_bytes(w) : choir_model_dir_bytes(dir);
    int64_t dev_bytes = w && d > 0 && ops->device_bytes ? ops->device_bytes(w) : 0;
    int64_t pool_bytes = w && d > 0 && ops->pool_bytes ? ops->pool_bytes(w) : 0;
    double secs = (double)(choir_now_ns() - t0) * 1e-9;
    pthread_mutex_lock(&e->lock);
    m = &e->models[mi];
    m->weights[d] = w;
    m->load_state[d] = w ? LOAD_READY : LOAD_FAILED;
    m->resident[d] = w ? (bytes > 0 ? bytes : 0) : 0;
    m->dev_resident[d] = w ? (dev_bytes > 0 ? dev_bytes : 0) : 0;
    *misplaced = sched_model_loaded(e->core, mi, d, w ? m->resident[d] : -1, m->dev_resident[d]);
    if (*misplaced) {
        CHOIR_LOGW("engine: '%s' takes %lld bytes on %s, more than its budget has room for; placing it again",
                   m->id, (long long)m->dev_resident[d], e->devices[d].name);
        m->weights[d] = NULL;
        m->load_state[d] = LOAD_NONE;
        m->resident[d] = m->dev_resident[d] = 0;
        pthread_mutex_unlock(&e->lock);
        ops->free(w);
        pthread_mutex_lock(&e->lock);
        pthread_cond_broadcast(&e->changed);
        pthread_cond_signal(&e->wake_sched);
        return NULL;
    }
    if (w && pool_bytes > 0)
        sched_replica_pool(e->core, mi, d, pool_bytes);
    /* A failed load fails what waits for the model too (the scheduler rejects
     * those requests with this reason before it forms another batch): one
     * attempt per burst, not one per batch, each perhaps uploading gigabytes
     * before it fails. Requests submitted after this may try again. Not for
     * running out of memory: that is this device's room now, and the queued
     * requests may still load elsewhere or once memory comes back. */
    int failing = w || (err && err->code == CHOIR_ENOMEM) ? 0 : sched_load_failed(e->core, mi);
    if (w)
        m->load_error[0] = 0;
    else
        snprintf(m->load_error, sizeof m->load_error, "%s",
                 err && err->msg[0] ? err->msg : "the adapter's load failed without a message");
    if (w) {
        /* Requests queued before the load were estimated without the
         * weights (worst-case sizes); now their true size is known. */
        for (choir_ticket *t = e->live; t; t = t->next) {
            if (t->model != mi || t->sr.state != SCHED_QUEUED)
                continue;
            if (ops->estimate)
                t->sr.est_bytes = ops->estimate(w, &t->req);
            if (ops->gpu && ops->estimate_device)
                t->sr.dev_est_bytes = ops->estimate_device(w, &t->req);
            if (ops->gpu && ops->estimate_pool)
                t->sr.pool_est_bytes = ops->estimate_pool(w, &t->req);
            if (ops->length)
                t->sr.length = ops->length(w, &t->req);
        }
        choir_metrics_inc(e->m.reg, m->m_loads, 1);
        choir_metrics_set(e->m.reg, m->m_loaded, 1);
        CHOIR_LOGI("engine: loaded '%s' on %s in %.2f s (%lld bytes resident, %lld on the device)", m->id,
                   e->devices[d].name, secs, (long long)m->resident[d], (long long)m->dev_resident[d]);
    } else {
        char also[64] = "";
        if (failing)
            snprintf(also, sizeof also, " (%d queued request%s fail%s with it)", failing, failing == 1 ? "" : "s",
                     failing == 1 ? "s" : "");
        CHOIR_LOGE("engine: loading '%s' on %s failed: %s%s", m->id, e->devices[d].name, m->load_error, also);
    }
    pthread_cond_broadcast(&e->changed);
    pthread_cond_signal(&e->wake_sched);
    return w;
}

/* Makes sure the batch's replica is loaded; returns its weights or NULL (and
 * a message) when loading failed. Engine lock held on entry and exit. */
static void *ensure_loaded(choir_engine *e, const sched_action *a, choir_err *err, int *misplaced)
{
    int d = a->device;
    *misplaced = 0;
    if (a->need_load)
        return load_replica(e, a->model, d, err, misplaced);
    engine_model *m = &e->models[a->model];
    while (m->load_state[d] == LOAD_BUSY) {
        pthread_cond_wait(&e->changed, &e->lock);
        m = &e->models[a->model];
    }
    if (m->load_state[d] != LOAD_READY) {
        /* another batch's load of this replica failed: its reason (the
         * caller names the model) */
        choir_err_set(err, CHOIR_EIO, "%s",
                      m->load_error[0] ? m->load_error : "the load of this replica was given up");
        return NULL;
    }
    return m->weights[d];
}

/* Retries of one batch whose arena said how much it lacked: each at least
 * doubles the room or reaches the budget's (sched_requeue), so this only
 * bounds the pathological (a model whose need keeps moving). */
#define RETRY_MAX_MEASURED 16

/* Ends a request whose compute is over (its batch returned `rc`, with
 * message rc_msg; or it left a batch it had joined): the status it ends
 * with says who stopped it. Call without the engine lock. */
static void finish_request(choir_engine *e, choir_ticket *t, int rc, const char *rc_msg)
{
    choir_request *r = &t->req;
    int st = r->status;
    const char *msg = r->error;
    int stop_why = __atomic_load_n(&t->stop_why, __ATOMIC_ACQUIRE);
    if ((!st || st == CHOIR_ECANCELED) && stop_why && !r->done) {
        /* the engine stopped it, not its caller: say why */
        st = stop_why == CHOIR_REJECT_DEADLINE ? CHOIR_ETIMEDOUT : CHOIR_ECANCELED;
        msg = stop_why == CHOIR_REJECT_DEADLINE ? "the deadline passed while the request was running"
                                                : "the server shut down before the request finished";
    }
    if (!st && choir_request_cancelled(r) && !r->done) {
        st = CHOIR_ECANCELED;
        msg = "cancelled";
    }
    if (!st && rc < 0 && !r->done) {
        st = rc;
        msg = rc_msg;
    }
    if (!st && !r->done) {
        st = CHOIR_EINTERNAL;
        msg = "the model finished without a final output";
    }
    choir_reject_reason why = stop_why && (st == CHOIR_ECANCELED || st == CHOIR_ETIMEDOUT) ? stop_why
                              : st == CHOIR_ECANCELED                                   ? CHOIR_REJECT_CANCELLED
                                                                                        : CHOIR_REJECT_FAILED;
    if (why == CHOIR_REJECT_DEADLINE || why == CHOIR_REJECT_SHUTDOWN)
        choir_metrics_inc(e->m.reg, e->m.rejected[why], 1);
    ticket_finish(e, t, st, why, msg);
}

/* ---- continuous batching (choir_batch_join) ------------------------------ */

/* A request that joined a running batch: its scheduler action (a batch of
 * one with its own reservation) and its arena. */
typedef struct join_item {
    sched_action a;
    choir_ticket *t;
    choir_arena *arena;
    int left;
} join_item;

typedef struct engine_join {
    choir_batch_join pub; /* first: what the adapter holds */
    choir_engine *e;
    sched_action *batch;  /* the running batch (its pool share shrinks as members finish) */
    int max;              /* the model's max batch */
    join_item **items;
    int n, cap;
} engine_join;

/* The counted memory the scheduler sees outside its accounts (as its thread
 * sets it before each decision). Engine lock held. */
static void update_external(choir_engine *e)
{
    sched_state st;
    sched_get_state(e->core, &st);
    int64_t work = choir_mem_current(CHOIR_MEM_ACTIVATIONS) + choir_mem_current(CHOIR_MEM_CACHE);
    if (st.running_batches == 0)
        e->resting_work = work;
    sched_set_external(e->core, choir_mem_current(CHOIR_MEM_IO) + choir_mem_current(CHOIR_MEM_OTHER) +
                                    e->resting_work);
}

static int join_take(choir_batch_join *pub, int live, choir_request **reqs, choir_arena **arenas)
{
    engine_join *j = (engine_join *)pub;
    choir_engine *e = j->e;
    int room = j->max - live;
    if (room <= 0)
        return 0;
    if (room > SCHED_MAX_BATCH)
        room = SCHED_MAX_BATCH;
    /* Asked before every step: the engine lock and a look at the queue (the
     * list of joined requests grows in doubling steps). */
    sched_action got[SCHED_MAX_BATCH];
    pthread_mutex_lock(&e->lock);
    if (j->n + room > j->cap) {
        int cap = j->cap ? 2 * j->cap : 16;
        while (cap < j->n + room)
            cap *= 2;
        join_item **items = choir_alloc(CHOIR_MEM_OTHER, (size_t)cap * sizeof *items);
        if (!items)
            room = 0;
        else {
            if (j->n)
                memcpy(items, j->items, (size_t)j->n * sizeof *items);
            choir_free(j->items);
            j->items = items;
            j->cap = cap;
        }
    }
    update_external(e);
    int k = room > 0 ? sched_join(e->core, j->batch, live, engine_now(e), got, room) : 0;
    pthread_mutex_unlock(&e->lock);
    int taken = 0;
    uint64_t now_ns = choir_now_ns();
    for (int i = 0; i < k; i++) {
        choir_err err = {0};
        choir_ticket *t = got[i].reqs[0]->user;
        join_item *it = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *it);
        size_t cap = got[i].reserved > 4096 ? (size_t)got[i].reserved : 4096;
        choir_arena *arena = it ? choir_arena_create(cap, CHOIR_MEM_ACTIVATIONS, &err) : NULL;
        if (!arena) {
            /* Admitted but not given its memory: it fails, as a batch
             * whose arena cannot be made does. */
            choir_free(it);
            pthread_mutex_lock(&e->lock);
            sched_join_done(e->core, &got[i], engine_now(e), 0);
            pthread_cond_signal(&e->wake_sched);
            pthread_mutex_unlock(&e->lock);
            finish_request(e, t, CHOIR_ENOMEM, "out of memory for the request's arena");
            continue;
        }
        if (!t->dispatch_ns)
            t->dispatch_ns = now_ns;
        it->a = got[i];
        it->t = t;
        it->arena = arena;
        j->items[j->n++] = it;
        reqs[taken] = &t->req;
        arenas[taken++] = arena;
    }
    if (taken)
        choir_metrics_inc(e->m.reg, e->m.joined, taken);
    return taken;
}

/* Frees a joined request's arena and reservation and ends it (or puts it
 * back in the queue after an overflow). rc / rc_msg: how its batch ended,
 * when the adapter did not say it left. */
static void join_end(engine_join *j, join_item *it, int overflow, int rc, const char *rc_msg)
{
    choir_engine *e = j->e;
    choir_ticket *t = it->t;
    it->left = 1;
    int64_t peak = (int64_t)choir_arena_high_water(it->arena), need = (int64_t)choir_arena_need(it->arena);
    choir_arena_free(it->arena);
    it->arena = NULL;
    int retry = overflow && !t->req.first_output_ns && t->retried < 3 && !choir_request_cancelled(&t->req);
    pthread_mutex_lock(&e->lock);
    if (retry) {
        t->retried++;
        sched_join_requeue(e->core, &it->a, engine_now(e), need);
    } else {
        sched_join_done(e->core, &it->a, engine_now(e), overflow ? 0 : peak);
    }
    pthread_cond_signal(&e->wake_sched);
    pthread_mutex_unlock(&e->lock);
    if (!retry)
        finish_request(e, t, overflow ? CHOIR_ENOMEM : rc,
                       overflow ? "the request's arena was too small, three times" : rc_msg);
}

static void join_leave(choir_batch_join *pub, choir_request *req, int overflow)
{
    engine_join *j = (engine_join *)pub;
    for (int i = 0; i < j->n; i++)
        if (!j->items[i]->left && &j->items[i]->t->req == req) {
            join_end(j, j->items[i], overflow, 0, NULL);
            return;
        }
}

/* A member of the batch finished before it, its state freed: its part of a
 * pool and its share of the batch's device reservation go back. */
static void join_member_done(choir_batch_join *pub, choir_request *req)
{
    engine_join *j = (engine_join *)pub;
    choir_engine *e = j->e;
    for (int i = 0; i < j->batch->n; i++) {
        choir_ticket *t = j->batch->reqs[i]->user;
        if (&t->req != req)
            continue;
        pthread_mutex_lock(&e->lock);
        sched_member_done(e->core, j->batch, j->batch->reqs[i]);
        pthread_cond_signal(&e->wake_sched);
        pthread_mutex_unlock(&e->lock);
        return;
    }
}

static void run_one_batch(choir_engine *e, sched_action *a, choir_kernel_scratch *ks)
{
    choir_err err = {0};
    choir_request *reqs[SCHED_MAX_BATCH];
    choir_ticket *tickets[SCHED_MAX_BATCH];
    int n = a->n;
    pthread_mutex_lock(&e->lock);
    int misplaced;
    void *w = ensure_loaded(e, a, &err, &misplaced);
    const choir_model_ops *ops = e->models[a->model].ops;
    if (w && a->need_load && ops->estimate && !misplaced) {
        /* This batch was admitted by estimates made without the weights (the
         * adapter's bound, which may be far larger); its measured peak is
         * compared with what the loaded model estimates, as every later
         * batch's is, or one bound would pull the factor down for all. */
        int64_t most = 0;
        for (int i = 0; i < n; i++) {
            choir_ticket *t = a->reqs[i]->user;
            t->sr.est_bytes = ops->estimate(w, &t->req);
            if (t->sr.est_bytes > most)
                most = t->sr.est_bytes;
        }
        a->est_sum = most * n;
    }
    if (misplaced) {
        sched_return(e->core, a, engine_now(e));
        pthread_cond_signal(&e->wake_sched);
        pthread_mutex_unlock(&e->lock);
        return;
    }
    pthread_mutex_unlock(&e->lock);

    uint64_t t0 = choir_now_ns();
    for (int i = 0; i < n; i++) {
        tickets[i] = a->reqs[i]->user;
        reqs[i] = &tickets[i]->req;
        if (!tickets[i]->dispatch_ns)
            tickets[i]->dispatch_ns = t0;
    }
    /* A model that cannot load is the server's failure, not the request's:
     * whatever the loader's code (a bad file reads as EFORMAT), the requests
     * fail with CHOIR_EIO and say which model. */
    if (!w) {
        char why[CHOIR_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err.msg);
        choir_err_set(&err, CHOIR_EIO, "model '%s' could not be loaded: %s", e->models[a->model].id, why);
    }
    int rc = w ? 0 : CHOIR_EIO;
    int64_t peak = 0, need = 0;
    choir_arena *arena = NULL;
    if (w) {
        /* The arena is the reservation: a batch cannot grow past what the
         * governor granted it. */
        size_t cap = a->reserved > 4096 ? (size_t)a->reserved : 4096;
        arena = choir_arena_create(cap, CHOIR_MEM_ACTIVATIONS, &err);
        /* CPU kernels take their scratch from the worker's block (a model's
         * backend stream binds its own over it). */
        choir_kernel_scratch *prev = choir_kernels_bind_scratch(ks);
        if (arena && ops->run_batch_join) {
            engine_join j = {.pub = {.take = join_take, .leave = join_leave, .member_done = join_member_done},
                             .e = e, .batch = a,
                             .max = ops->max_batch};
            rc = ops->run_batch_join(w, reqs, n, arena, &j.pub, &err);
            /* Requests the adapter did not say it finished end with the batch. */
            for (int i = 0; i < j.n; i++) {
                if (!j.items[i]->left)
                    join_end(&j, j.items[i], 0, rc == CHOIR_ENOMEM ? CHOIR_EINTERNAL : rc, err.msg);
                choir_free(j.items[i]);
            }
            choir_free(j.items);
        } else {
            rc = arena ? ops->run_batch(w, reqs, n, arena, &err) : err.code;
        }
        choir_kernels_bind_scratch(prev);
        peak = arena ? (int64_t)choir_arena_high_water(arena) : 0;
        if (arena && choir_arena_overflowed(arena)) {
            size_t want = choir_arena_need(arena);
            need = want > (size_t)INT64_MAX ? INT64_MAX : (int64_t)want;
        }
        choir_arena_free(arena);
    }
    uint64_t t1 = choir_now_ns();
    double compute_s = (double)(t1 - t0) * 1e-9;

    /* An arena overflow before any output: retry instead of failing the
     * callers, with the room the failed run showed it needs (the arena kept
     * the fill level its refused allocation would have reached), at least
     * doubled, up to what the budget leaves (sched_requeue), so each retry
     * of a batch at least doubles its room until the budget's is reached and
     * a request the budget cannot hold is refused as too large. A batch
     * that ran out of memory without the arena refusing anything (a heap
     * allocation, or a model that checks the room itself) learns no need:
     * its room doubles, three times at most. */
    int retry = rc == CHOIR_ENOMEM && arena;
    int max_retries = need > 0 ? RETRY_MAX_MEASURED : 3;
    for (int i = 0; retry && i < n; i++)
        if (reqs[i]->first_output_ns || tickets[i]->retried >= max_retries || choir_request_cancelled(reqs[i]))
            retry = 0;
    pthread_mutex_lock(&e->lock);
    if (retry) {
        for (int i = 0; i < n; i++)
            tickets[i]->retried++;
        sched_requeue(e->core, a, engine_now(e), peak, need);
        CHOIR_LOGW("engine: batch of %d on '%s' overflowed its %lld-byte arena (it needs at least %lld); "
                   "retrying", n, e->models[a->model].id, (long long)a->reserved, (long long)need);
    } else {
        sched_batch_done(e->core, a, engine_now(e), peak, compute_s, need, rc == CHOIR_ENOMEM);
        if (peak > e->arena_peak)
            e->arena_peak = peak;
        e->batch_hist[n < CHOIR_BATCH_HIST_MAX ? n : CHOIR_BATCH_HIST_MAX]++;
        /* A batch cut short (cancelled, past a deadline) says nothing about
         * what a batch costs, and would make the predicted wait too short. */
        int whole = rc == 0;
        for (int i = 0; whole && i < n; i++)
            whole = !choir_request_cancelled(reqs[i]);
        double per = compute_s / n;
        e->compute_per_req_ewma = e->compute_per_req_ewma > 0 ? 0.9 * e->compute_per_req_ewma + 0.1 * per : per;
        if (whole) {
            /* the cost line's sums, each batch weighing 0.8 of the next */
            e->fit_w = 0.8 * e->fit_w + 1;
            e->fit_n = 0.8 * e->fit_n + n;
            e->fit_nn = 0.8 * e->fit_nn + (double)n * n;
            e->fit_t = 0.8 * e->fit_t + compute_s;
            e->fit_nt = 0.8 * e->fit_nt + n * compute_s;
        }
    }
    pthread_cond_signal(&e->wake_sched);
    pthread_mutex_unlock(&e->lock);
    if (retry)
        return;
    choir_metrics_inc(e->m.reg, e->m.batches, 1);
    choir_metrics_observe(e->m.reg, e->m.batch_size, n);
    choir_metrics_observe(e->m.reg, e->m.compute, compute_s);
    for (int i = 0; i < n; i++)
        finish_request(e, tickets[i], rc, err.msg);
}

/* A kernel that found no room in the worker's scratch block ran with
 * memory of its own and left its want in `need`: the block grows to it
 * between batches, so the next batch's kernels allocate nothing. Up to
 * WORKER_SCRATCH_MAX; a larger want keeps allocating per call. */
#define WORKER_SCRATCH_MAX ((size_t)64 << 20)

static void grow_worker_scratch(choir_kernel_scratch *ks)
{
    if (ks->need <= ks->bytes || ks->need > WORKER_SCRATCH_MAX)
        return;
    void *block = choir_alloc(CHOIR_MEM_ACTIVATIONS, ks->need);
    if (!block)
        return;
    choir_free(ks->base);
    ks->base = block;
    ks->bytes = ks->need;
}

static void *worker_main(void *arg)
{
    choir_engine *e = arg;
    choir_kernel_scratch ks = {0};
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->stop && e->n_ready == 0)
            pthread_cond_wait(&e->wake_worker, &e->lock);
        if (e->n_ready == 0)
            break;
        sched_action a = e->ready[0];
        memmove(e->ready, e->ready + 1, (size_t)(--e->n_ready) * sizeof *e->ready);
        if (a.kind == SCHED_LOAD) {
            choir_err err = {0};
            int misplaced;
            load_replica(e, a.model, a.device, &err, &misplaced);
            continue;
        }
        pthread_mutex_unlock(&e->lock);
        run_one_batch(e, &a, &ks);
        grow_worker_scratch(&ks);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    choir_free(ks.base);
    return NULL;
}

/* ---- scheduler thread --------------------------------------------------- */

/* A deadline covers the compute too: a running request whose deadline has
 * passed is asked to stop (the model sees it cancelled at its next output or
 * check) and fails with CHOIR_ETIMEDOUT, reason deadline. Returns the
 * earliest deadline still ahead among running requests (INFINITY: none).
 * Engine lock held. */
static double expire_running(choir_engine *e, double now)
{
    double next = INFINITY;
    for (choir_ticket *t = e->live; t; t = t->next) {
        if (t->sr.state != SCHED_RUNNING || isinf(t->sr.deadline) || __atomic_load_n(&t->stop_why, __ATOMIC_ACQUIRE))
            continue;
        if (t->sr.deadline <= now) {
            __atomic_store_n(&t->stop_why, CHOIR_REJECT_DEADLINE, __ATOMIC_RELEASE);
            __atomic_store_n(&t->req.cancelled, 1, __ATOMIC_RELEASE);
        } else if (t->sr.deadline < next) {
            next = t->sr.deadline;
        }
    }
    return next;
}

static void *sched_main(void *arg)
{
    choir_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        sched_action a;
        double now = engine_now(e);
        /* Weights are covered by the models' reports and a running batch's
         * working memory by its reservation (arena or not). What else is
         * counted competes for the same budget: I/O buffers and other
         * allocations always, and the activation/cache bytes that persist
         * while no batch runs (caches, plans), measured at such moments. */
        update_external(e);
        if (sched_decide(e->core, now, &a)) {
            if (a.kind == SCHED_DISPATCH || a.kind == SCHED_LOAD) {
                /* A load runs on a worker, like a batch: the scheduler never waits for one.
                 * The replica is busy from now on, not from when a worker starts the load:
                 * another batch placed on it meanwhile (a CPU replica takes several) waits
                 * for the load in ensure_loaded, not fails because it has not begun. */
                if (a.kind == SCHED_LOAD || a.need_load)
                    e->models[a.model].load_state[a.device] = LOAD_BUSY;
                e->ready[e->n_ready++] = a;
                pthread_cond_signal(&e->wake_worker);
            } else if (a.kind == SCHED_REJECT && a.reason == CHOIR_REJECT_FAILED) {
                /* Queued while its model's load failed (sched_load_failed):
                 * it fails as the requests of the batch that carried the load
                 * did, and is counted as they are (a failed request, with its
                 * queue wait up to now). */
                choir_ticket *t = a.rejected->user;
                const engine_model *m = &e->models[a.model];
                char why[CHOIR_ERR_MSG_MAX];
                snprintf(why, sizeof why, "model '%s' could not be loaded: %s", m->id,
                         m->load_error[0] ? m->load_error : "its load failed");
                t->dispatch_ns = choir_now_ns();
                pthread_mutex_unlock(&e->lock);
                ticket_finish(e, t, CHOIR_EIO, CHOIR_REJECT_FAILED, why);
                pthread_mutex_lock(&e->lock);
            } else if (a.kind == SCHED_REJECT) {
                choir_ticket *t = a.rejected->user;
                pthread_mutex_unlock(&e->lock);
                choir_metrics_inc(e->m.reg, e->m.rejected[a.reason], 1);
                if (a.reason == CHOIR_REJECT_DEADLINE)
                    ticket_finish(e, t, CHOIR_ETIMEDOUT, a.reason, "the deadline passed before the request could start");
                else if (a.device > 0) {
                    char why[CHOIR_ERR_MSG_MAX];
                    snprintf(why, sizeof why,
                             "the request needs %lld bytes of device memory and %lld of the model's pool on %s; "
                             "its budget leaves %lld beside the weights and the pool holds %lld",
                             (long long)a.dev_reserved, (long long)a.pool_reserved, e->devices[a.device].name,
                             (long long)a.dev_room, (long long)a.pool_room);
                    ticket_finish(e, t, CHOIR_ETOOBIG, a.reason, why);
                } else if (a.reserved > a.room) {
                    char why[CHOIR_ERR_MSG_MAX];
                    snprintf(why, sizeof why,
                             "the request needs %lld bytes of working memory (its estimate as measured), "
                             "more than the %lld the memory budget leaves beside the model's weights",
                             (long long)a.reserved, (long long)a.room);
                    ticket_finish(e, t, CHOIR_ETOOBIG, a.reason, why);
                } else
                    ticket_finish(e, t, CHOIR_ETOOBIG, a.reason,
                                  "the request needs more memory than the budget holds (measured estimate)");
                pthread_mutex_lock(&e->lock);
            } else if (a.kind == SCHED_UNLOAD) {
                engine_model *m = &e->models[a.model];
                int d = a.device;
                void *w = m->weights[d];
                const choir_model_ops *ops = m->ops;
                const char *id = m->id;
                m->weights[d] = NULL;
                m->load_state[d] = LOAD_NONE;
                m->resident[d] = 0;
                m->dev_resident[d] = 0;
                choir_metrics_inc(e->m.reg, m->m_unloads, 1);
                choir_metrics_set(e->m.reg, m->m_loaded, sched_model_loaded_flag(e->core, a.model));
                pthread_mutex_unlock(&e->lock);
                CHOIR_LOGI("engine: unloading idle model '%s' from %s", id, e->devices[d].name);
                ops->free(w);
                pthread_mutex_lock(&e->lock);
            }
            continue;
        }
        double next = sched_next_event(e->core, now);
        double running_due = expire_running(e, now);
        if (running_due < next)
            next = running_due;
        if (isinf(next)) {
            pthread_cond_wait(&e->wake_sched, &e->lock);
        } else {
            struct timespec ts;
            abs_deadline(&ts, next - now);
            pthread_cond_timedwait(&e->wake_sched, &e->lock, &ts);
        }
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------- */

_Static_assert(SCHED_MAX_BATCH == CHOIR_ENGINE_MAX_BATCH, "the scheduler's batch limit is the engine's");

choir_engine *choir_engine_create(const choir_engine_params *params, choir_err *err)
{
    choir_engine *e = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *e);
    if (!e) {
        choir_err_set(err, CHOIR_ENOMEM, "engine: out of memory");
        return NULL;
    }
    engine_params_resolve(&e->p, params);
    if (engine_params_check(&e->p, err) < 0) {
        choir_free(e);
        return NULL;
    }
    pthread_mutex_init(&e->lock, NULL);
    cond_init_monotonic(&e->wake_sched);
    pthread_cond_init(&e->wake_worker, NULL);
    cond_init_monotonic(&e->changed);
    e->start_ns = choir_now_ns();
    if (engine_devices_resolve(e, err) < 0)
        goto fail;
    /* Each GPU replica runs one batch at a time: enough workers keep every
     * GPU busy and the CPU too. */
    int n_gpus = e->n_devices - 1;
    if (n_gpus > 0 && e->p.workers < n_gpus + 1)
        e->p.workers = n_gpus + 1;
    sched_config c;
    sched_config_from_params(&c, &e->p);
    c.n_gpus = n_gpus;
    for (int i = 0; i < n_gpus; i++)
        c.gpu_budget[i] = e->devices[1 + i].budget;
    e->core = sched_create(&c, err);
    if (!e->core)
        goto fail;
    e->ready = choir_calloc(CHOIR_MEM_OTHER, (size_t)e->p.workers, sizeof *e->ready);
    e->workers = choir_calloc(CHOIR_MEM_OTHER, (size_t)e->p.workers, sizeof *e->workers);
    if (!e->ready || !e->workers) {
        choir_err_set(err, CHOIR_ENOMEM, "engine: out of memory");
        goto fail;
    }
    if (engine_metrics_init(e, err) < 0)
        goto fail;
    if (engine_metrics_add_devices(e) < 0) {
        choir_err_set(err, CHOIR_ENOMEM, "engine: out of memory");
        goto fail;
    }
    if (pthread_create(&e->sched_thread, NULL, sched_main, e) != 0) {
        choir_err_set(err, CHOIR_ENOMEM, "engine: cannot start the scheduler thread");
        goto fail;
    }
    e->started_sched = 1;
    for (; e->n_workers < e->p.workers; e->n_workers++) {
        if (pthread_create(&e->workers[e->n_workers], NULL, worker_main, e) != 0) {
            choir_err_set(err, CHOIR_ENOMEM, "engine: cannot start worker %d", e->n_workers);
            goto fail;
        }
    }
    CHOIR_LOGD("engine: profile %s, budget %lld bytes, batch %d, %d workers", choir_profile_name(e->p.profile),
               (long long)e->p.memory_budget, e->p.max_batch, e->p.workers);
    for (int i = 1; i < e->n_devices; i++)
        CHOIR_LOGI("engine: %s (%s): budget %lld of %lld bytes", e->devices[i].name, e->devices[i].hw_name,
                   (long long)e->devices[i].budget, (long long)e->devices[i].total_bytes);
    return e;
fail:
    choir_engine_free(e);
    return NULL;
}

int choir_engine_shutdown(choir_engine *e, double deadline_s)
{
    if (!e)
        return 0;
    pthread_mutex_lock(&e->lock);
    if (e->shut) {
        pthread_mutex_unlock(&e->lock);
        return 0;
    }
    e->shut = 1;
    if (e->core)
        sched_drain(e->core);
    pthread_cond_signal(&e->wake_sched);
    struct timespec ts;
    abs_deadline(&ts, deadline_s > 0 ? deadline_s : 0);
    int timed_out = 0;
    /* Let the work drain until the deadline ... */
    while (e->live && !timed_out && e->started_sched) {
        if (pthread_cond_timedwait(&e->changed, &e->lock, &ts) == ETIMEDOUT)
            timed_out = 1;
    }
    /* ... then fail what is still queued and ask running requests to stop. */
    int rc = e->live ? CHOIR_ETIMEDOUT : 0;
    for (sched_req *r; e->core && (r = sched_pop_queued(e->core)) != NULL;) {
        pthread_mutex_unlock(&e->lock);
        choir_metrics_inc(e->m.reg, e->m.rejected[CHOIR_REJECT_SHUTDOWN], 1);
        ticket_finish(e, r->user, CHOIR_ECANCELED, CHOIR_REJECT_SHUTDOWN, "the engine shut down");
        pthread_mutex_lock(&e->lock);
    }
    for (choir_ticket *t = e->live; t; t = t->next) {
        __atomic_store_n(&t->stop_why, CHOIR_REJECT_SHUTDOWN, __ATOMIC_RELEASE);
        __atomic_store_n(&t->req.cancelled, 1, __ATOMIC_RELEASE);
    }
    while (e->live && e->started_sched)
        pthread_cond_wait(&e->changed, &e->lock);
    e->stop = 1;
    pthread_cond_broadcast(&e->wake_sched);
    pthread_cond_broadcast(&e->wake_worker);
    pthread_mutex_unlock(&e->lock);
    if (e->started_sched)
        pthread_join(e->sched_thread, NULL);
    for (int i = 0; i < e->n_workers; i++)
        pthread_join(e->workers[i], NULL);
    e->started_sched = 0;
    e->n_workers = 0;
    for (int i = 0; i < e->n_models; i++) {
        engine_model *m = &e->models[i];
        for (int d = 0; d < SCHED_MAX_DEVICES; d++) {
            if (m->weights[d])
                m->ops->free(m->weights[d]);
            m->weights[d] = NULL;
            m->load_state[d] = LOAD_NONE;
        }
    }
    return rc;
}

void choir_engine_free(choir_engine *e)
{
    if (!e)
        return;
    choir_engine_shutdown(e, 0);
    for (int i = 0; i < e->n_models; i++) {
        choir_free(e->models[i].id);
        choir_free(e->models[i].dir);
    }
    choir_free(e->models);
    sched_free(e->core);
    engine_metrics_free(e);
    choir_free(e->ready);
    choir_free(e->workers);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->wake_sched);
    pthread_cond_destroy(&e->wake_worker);
    pthread_cond_destroy(&e->changed);
    choir_free(e);
}
