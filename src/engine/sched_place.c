/* Devices, replicas and placement for the scheduler core (policy in the
 * comment at the top of sched.c): the accounts of each device, where a
 * model's first replica goes, when a further one is loaded, which replica a
 * batch goes to, and what is unloaded when. */
#include <string.h>

#include "engine/sched_internal.h"

int sched_rep_count(const sched_model *m, int n_dev)
{
    int n = 0;
    for (int d = 0; d < n_dev; d++)
        n += m->rep[d].state != REP_NONE;
    return n;
}

void sched_note_peaks(sched *s)
{
    for (int d = 0; d < s->n_dev; d++) {
        device_acct *a = &s->dev[d];
        int64_t use = a->weights + a->reserved + (d == 0 ? s->external : 0);
        if (use > a->peak)
            a->peak = use;
    }
}

/* Counts a new replica's expected bytes on the host and its device. */
void sched_rep_add(sched *s, int mi, int d, int state, double now)
{
    sched_model *m = &s->models[mi];
    sched_replica *r = &m->rep[d];
    /* `running` is left alone: a batch whose load failed still finishes on it. */
    r->state = state;
    r->last_used = now;
    r->host_bytes = d == 0 ? m->weights_bytes : m->gpu_host_bytes;
    r->dev_bytes = d == 0 ? 0 : m->dev_bytes;
    s->dev[0].weights += r->host_bytes;
    if (d > 0)
        s->dev[d].weights += r->dev_bytes;
    sched_note_peaks(s);
}

void sched_rep_remove(sched *s, int mi, int d)
{
    sched_replica *r = &s->models[mi].rep[d];
    if (r->state == REP_NONE)
        return;
    s->dev[0].weights -= r->host_bytes;
    if (d > 0)
        s->dev[d].weights -= r->dev_bytes;
    if (r->state == REP_LOADING)
        s->loading--;
    r->state = REP_NONE;
    r->host_bytes = r->dev_bytes = 0;
    r->pool_bytes = r->pool_reserved = 0;
}

/* Whether a batch reserving host_res (and dev_res on device d) fits now,
 * with the replica's weights added when `new_rep`. */
int sched_fits(const sched *s, const sched_model *m, int d, int new_rep, int64_t host_res, int64_t dev_res)
{
    const device_acct *h = &s->dev[0];
    int64_t host_w = new_rep ? (d == 0 ? m->weights_bytes : m->gpu_host_bytes) : 0;
    if (h->weights + h->reserved + s->external + host_w + host_res > h->budget)
        return 0;
    if (d == 0)
        return 1;
    const device_acct *g = &s->dev[d];
    return g->weights + g->reserved + (new_rep ? m->dev_bytes : 0) + dev_res <= g->budget;
}

int64_t sched_dev_free(const sched *s, int d)
{
    const device_acct *a = &s->dev[d];
    return a->budget - a->weights - a->reserved - (d == 0 ? s->external : 0);
}

/* GPUs the model could ever use for a batch needing dev_res: bit d. */
uint32_t sched_gpu_mask(const sched *s, const sched_model *m, int64_t dev_res)
{
    uint32_t mask = 0;
    for (int d = 1; m->gpu && d < s->n_dev; d++)
        if (m->dev_bytes + dev_res <= s->dev[d].budget)
            mask |= 1u << d;
    return mask;
}

/* The GPU in `mask` without a replica of m where a new one fits now with the
 * given reservations and leaves the most room, or -1. */
int sched_best_gpu(const sched *s, const sched_model *m, uint32_t mask, int64_t host_res, int64_t dev_res)
{
    int best = -1;
    int64_t best_left = 0;
    for (int d = 1; d < s->n_dev; d++) {
        if (!(mask & (1u << d)) || m->rep[d].state != REP_NONE || !sched_fits(s, m, d, 1, host_res, dev_res))
            continue;
        int64_t left = sched_dev_free(s, d) - m->dev_bytes - dev_res;
        if (best < 0 || left > best_left) {
            best = d;
            best_left = left;
        }
    }
    return best;
}

/* The ready replica a new batch of m goes to: fewest running batches, then
 * most free memory on its device; a GPU replica takes one batch at a time.
 * -1 when none can take one now. */
int sched_rep_pick(const sched *s, const sched_model *m)
{
    int best = -1;
    for (int d = 0; d < s->n_dev; d++) {
        const sched_replica *r = &m->rep[d];
        if (r->state != REP_READY || (d > 0 && r->running >= 1))
            continue;
        if (best < 0 || r->running < m->rep[best].running ||
            (r->running == m->rep[best].running && sched_dev_free(s, d) > sched_dev_free(s, best)))
            best = d;
    }
    return best;
}

/* An idle ready replica to unload (least recently used): on a device in
 * `mask`, of a model other than `except`, unused for `need_idle_s`, and (unless
 * allow_queued) of a model with nothing queued. Returns 1 and *mi, *dev. */
int sched_lru_idle(const sched *s, double now, double need_idle_s, int except, int allow_queued, uint32_t mask,
                    int *mi, int *dev)
{
    int found = 0;
    double oldest = 0;
    for (int i = 0; i < s->n_models; i++) {
        const sched_model *m = &s->models[i];
        if (i == except || (!allow_queued && m->n_queued))
            continue;
        for (int d = 0; d < s->n_dev; d++) {
            const sched_replica *r = &m->rep[d];
            if (!(mask & (1u << d)) || r->state != REP_READY || r->running || now - r->last_used < need_idle_s)
                continue;
            if (!found || r->last_used < oldest) {
                found = 1;
                oldest = r->last_used;
                *mi = i;
                *dev = d;
            }
        }
    }
    return found;
}

void sched_unload(sched *s, int mi, int d, sched_action *out)
{
    sched_rep_remove(s, mi, d);
    memset(out, 0, sizeof *out);
    out->kind = SCHED_UNLOAD;
    out->model = mi;
    out->device = d;
}

/* Keeps each model's "queue long since" time current. */
void sched_track_queues(sched *s, double now)
{
    for (int mi = 0; mi < s->n_models; mi++) {
        sched_model *m = &s->models[mi];
        if (m->n_queued < s->c.replica_queue)
            m->long_since = -1;
        else if (m->long_since < 0)
            m->long_since = now;
    }
}

/* 1 when model m may get another replica (apart from the waiting time). */
int sched_wants_replica(const sched *s, const sched_model *m)
{
    if (!m->gpu || s->n_dev < 3 || s->draining || s->degraded || m->unload_requested || m->long_since < 0)
        return 0;
    int on_gpu = 0;
    for (int d = 0; d < s->n_dev; d++) {
        if (m->rep[d].state == REP_LOADING)
            return 0;
        if (d > 0 && m->rep[d].state == REP_READY)
            on_gpu = 1;
    }
    return on_gpu;
}

/* A replica load for a model whose queue stayed long, into *out. */
int sched_spawn_replica(sched *s, double now, sched_action *out)
{
    for (int mi = 0; mi < s->n_models; mi++) {
        sched_model *m = &s->models[mi];
        if (!sched_wants_replica(s, m) || now - m->long_since < s->c.replica_after_s)
            continue;
        int64_t max_est = 0, max_dev = 0;
        for (int i = 0; i < m->n_queued; i++) {
            if (m->queue[i]->est_bytes > max_est)
                max_est = m->queue[i]->est_bytes;
            if (m->queue[i]->dev_est_bytes > max_dev)
                max_dev = m->queue[i]->dev_est_bytes;
        }
        int d = sched_best_gpu(s, m, ~0u, sched_reservation(m, max_est, 1), max_dev);
        /* Either way, look again only after another waiting period. */
        m->long_since = now;
        if (d < 0)
            continue;
        sched_rep_add(s, mi, d, REP_LOADING, now);
        s->loading++;
        memset(out, 0, sizeof *out);
        out->kind = SCHED_LOAD;
        out->model = mi;
        out->device = d;
        return 1;
    }
    return 0;
}

/* Unloads what is due: replicas of a model whose unload was asked, extra
 * replicas idle past replica_idle_s, idle models (timeout or degraded). */
int sched_unload_due(sched *s, double now, sched_action *out)
{
    for (int mi = 0; mi < s->n_models; mi++) {
        sched_model *m = &s->models[mi];
        if (!m->unload_requested || m->running || m->n_queued)
            continue;
        int loading = 0;
        for (int d = 0; d < s->n_dev; d++) {
            if (m->rep[d].state == REP_READY) {
                sched_unload(s, mi, d, out);
                return 1;
            }
            loading |= m->rep[d].state == REP_LOADING;
        }
        if (!loading)
            m->unload_requested = 0;
    }
    for (int mi = 0; mi < s->n_models; mi++) {
        sched_model *m = &s->models[mi];
        if (sched_rep_count(m, s->n_dev) < 2)
            continue;
        int victim = -1;
        for (int d = 0; d < s->n_dev; d++) {
            const sched_replica *r = &m->rep[d];
            if (r->state == REP_READY && !r->running && now - r->last_used >= s->c.replica_idle_s &&
                (victim < 0 || r->last_used < m->rep[victim].last_used))
                victim = d;
        }
        if (victim >= 0) {
            sched_unload(s, mi, victim, out);
            return 1;
        }
    }
    if (s->degraded || s->c.unload_idle_s > 0) {
        int mi, d;
        if (sched_lru_idle(s, now, s->degraded ? s->c.degrade_hold_s : s->c.unload_idle_s, -1, 0, ~0u, &mi, &d)) {
            sched_unload(s, mi, d, out);
            return 1;
        }
    }
    /* A hot GPU sheds the replicas idle on it, as the degraded host does. */
    uint32_t hot = 0;
    for (int d = 1; d < s->n_dev; d++)
        hot |= s->dev[d].hot ? 1u << d : 0;
    int mi, d;
    if (hot && sched_lru_idle(s, now, s->c.degrade_hold_s, -1, 0, hot, &mi, &d)) {
        sched_unload(s, mi, d, out);
        return 1;
    }
    return 0;
}

double sched_dev_pressure(const sched *s, int d)
{
    if (d < 1 || d >= s->n_dev)
        return 0;
    const device_acct *g = &s->dev[d];
    int64_t pool = 0, pool_reserved = 0;
    for (int mi = 0; mi < s->n_models; mi++) {
        pool += s->models[mi].rep[d].pool_bytes;
        pool_reserved += s->models[mi].rep[d].pool_reserved;
    }
    /* A pool is in the weights, but it is room for requests. */
    int64_t room = g->budget - g->weights + pool;
    return room > 0 ? (double)(g->reserved + pool_reserved) / (double)room : 0;
}

void sched_dev_update_pressure(sched *s, double now)
{
    for (int d = 1; d < s->n_dev; d++) {
        device_acct *g = &s->dev[d];
        double use = sched_dev_pressure(s, d);
        if (!g->hot && use > s->c.high_water) {
            g->hot = 1;
            g->hot_since = now;
        } else if (g->hot && use < s->c.low_water && now - g->hot_since >= s->c.degrade_hold_s) {
            g->hot = 0;
        }
    }
}

/* A request's device bytes as replica (m, d) holds them: its part of the
 * pool (a replica with one) and the rest. */
static void dev_parts(const sched_model *m, int d, const sched_req *r, int64_t *pool, int64_t *rest)
{
    int64_t p = m->rep[d].pool_bytes > 0 ? (r->pool_est_bytes < r->dev_est_bytes ? r->pool_est_bytes
                                                                                   : r->dev_est_bytes)
                                         : 0;
    *pool = p;
    *rest = r->dev_est_bytes - p;
}

int sched_dev_refusal(const sched *s, int mi, const sched_req *r, choir_reject_reason *why, choir_err *err)
{
    const sched_model *m = &s->models[mi];
    int reps = 0, hot = 0, d0 = -1;
    int64_t pool_cap = 0, room_cap = 0;
    for (int d = 1; d < s->n_dev; d++) {
        if (!m->gpu || m->rep[d].state == REP_NONE)
            continue;
        reps++;
        if (s->dev[d].hot) {
            hot++;
            if (d0 < 0)
                d0 = d;
        }
        pool_cap += m->rep[d].pool_bytes;
        /* beside every replica's fixed bytes: what requests may hold there */
        room_cap += s->dev[d].budget - s->dev[d].weights;
    }
    if (reps == 0 || hot < reps)
        return 0;
    double use = sched_dev_pressure(s, d0);
    if (r->priority <= CHOIR_PRIORITY_LOW) {
        *why = CHOIR_REJECT_OVERLOAD;
        return choir_err_set(err, CHOIR_EBUSY, "overloaded: gpu%d's memory is above its high-water mark (%.0f%% of "
                             "the room beside its weights in use); low-priority requests are refused for now", d0 - 1,
                             100 * use);
    }
    /* What the queue ahead of it waits for, on the replica the demand
     * lands on first (all of mi's replicas are hot: their parts add up). */
    int64_t want_pool, want_rest;
    dev_parts(m, d0, r, &want_pool, &want_rest);
    /* One that no replica could ever hold is the scheduler's to refuse as too large. */
    if (want_pool > pool_cap || want_rest > room_cap)
        return 0;
    for (int i = 0; i < m->n_queued; i++) {
        int64_t p, rest;
        dev_parts(m, d0, m->queue[i], &p, &rest);
        want_pool += p;
        want_rest += rest;
    }
    if ((want_pool > 0 && want_pool > pool_cap) || (want_rest > 0 && want_rest > room_cap)) {
        *why = CHOIR_REJECT_MEMORY;
        return choir_err_set(err, CHOIR_EBUSY, "device memory: gpu%d is above its high-water mark (%.0f%% of the room "
                             "beside its weights in use) and the %d request(s) waiting with this one need %.2f GB of "
                             "pool and %.2f GB beside it, more than the model's replicas hold (%.2f and %.2f GB): it "
                             "could not start before they all finish", d0 - 1, 100 * use, m->n_queued + 1,
                             want_pool / 1e9, want_rest / 1e9, pool_cap / 1e9, room_cap / 1e9);
    }
    return 0;
}

void sched_model_set_gpu(sched *s, int model, int64_t device_weights_bytes)
{
    if (model < 0 || model >= s->n_models)
        return;
    s->models[model].gpu = 1;
    s->models[model].dev_bytes = device_weights_bytes > 0 ? device_weights_bytes : 0;
}

void sched_model_set_pool(sched *s, int model)
{
    if (model >= 0 && model < s->n_models)
        s->models[model].pool = 1;
}

int64_t sched_load_room(const sched *s, int model, int device)
{
    if (model < 0 || model >= s->n_models || device < 1 || device >= s->n_dev)
        return 0;
    const device_acct *g = &s->dev[device];
    /* Its own expected bytes are in the weights already (sched_rep_add). */
    int64_t room = g->budget - g->weights - g->reserved + s->models[model].rep[device].dev_bytes;
    return room > 0 ? room : 0;
}

void sched_replica_pool(sched *s, int model, int device, int64_t pool_bytes)
{
    if (model < 0 || model >= s->n_models || device < 1 || device >= s->n_dev)
        return;
    sched_model *m = &s->models[model];
    sched_replica *r = &m->rep[device];
    if (r->state == REP_NONE || pool_bytes <= 0 || pool_bytes > r->dev_bytes)
        return;
    r->pool_bytes = pool_bytes;
    /* A later replica's weights before its pool: the pool takes what the
     * budget leaves it then. */
    m->dev_bytes = r->dev_bytes - pool_bytes;
}

int sched_model_loaded(sched *s, int model, int device, int64_t host_bytes, int64_t dev_bytes)
{
    if (model < 0 || model >= s->n_models || device < 0 || device >= s->n_dev)
        return 0;
    sched_model *m = &s->models[model];
    sched_replica *r = &m->rep[device];
    if (host_bytes < 0) {
        sched_rep_remove(s, model, device);
        return 0;
    }
    if (dev_bytes < 0 || device == 0)
        dev_bytes = 0;
    if (device == 0) {
        m->weights_bytes = host_bytes;
    } else {
        m->gpu_host_bytes = host_bytes;
        m->dev_bytes = dev_bytes;
    }
    if (r->state == REP_NONE)
        return 0;
    if (device > 0) {
        const device_acct *g = &s->dev[device];
        if (g->weights - r->dev_bytes + dev_bytes + g->reserved > g->budget) {
            sched_rep_remove(s, model, device);
            return 1;
        }
    }
    s->dev[0].weights += host_bytes - r->host_bytes;
    if (device > 0)
        s->dev[device].weights += dev_bytes - r->dev_bytes;
    r->host_bytes = host_bytes;
    r->dev_bytes = dev_bytes;
    if (r->state == REP_LOADING) {
        r->state = REP_READY;
        s->loading--;
    }
    sched_note_peaks(s);
    return 0;
}

int sched_load_failed(sched *s, int model)
{
    if (model < 0 || model >= s->n_models)
        return 0;
    sched_model *m = &s->models[model];
    if (sched_rep_count(m, s->n_dev) > 0)
        return 0;
    for (int i = 0; i < m->n_queued; i++)
        m->queue[i]->load_failed = 1;
    return m->n_queued;
}

int sched_device_count(const sched *s)
{
    return s->n_dev;
}

void sched_get_device(const sched *s, int device, sched_device_state *out)
{
    memset(out, 0, sizeof *out);
    if (device < 0 || device >= s->n_dev)
        return;
    const device_acct *a = &s->dev[device];
    out->budget = a->budget;
    out->weights = a->weights;
    out->reserved = a->reserved;
    out->peak = a->peak;
    for (int mi = 0; device > 0 && mi < s->n_models; mi++) {
        out->pool += s->models[mi].rep[device].pool_bytes;
        out->pool_reserved += s->models[mi].rep[device].pool_reserved;
    }
    out->pool_reqs = a->pool_reqs;
    out->pool_peak_reqs = a->pool_peak_reqs;
    out->hot = a->hot;
    out->pressure = sched_dev_pressure(s, device);
    out->running_batches = a->running;
    out->batches = a->batches;
    out->busy_s = a->busy_s;
}

int sched_model_replicas(const sched *s, int model, uint32_t *device_mask)
{
    uint32_t mask = 0;
    int n = 0;
    for (int d = 0; model >= 0 && model < s->n_models && d < s->n_dev; d++)
        if (s->models[model].rep[d].state != REP_NONE) {
            mask |= 1u << d;
            n++;
        }
    if (device_mask)
        *device_mask = mask;
    return n;
}

int sched_replica_ready(const sched *s, int model, int device)
{
    return model >= 0 && model < s->n_models && device >= 0 && device < s->n_dev &&
           s->models[model].rep[device].state == REP_READY;
}
