/* Engine metrics: the series the engine keeps, the stats snapshot and the
 * Prometheus page. Gauges that mirror scheduler state are refreshed when
 * read, so the hot path only touches counters and histograms. */
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/pool.h"
#include "engine/engine_internal.h"

static const double batch_bounds[] = {1, 2, 4, 8, 16, 32, 64};

int engine_metrics_init(choir_engine *e, choir_err *err)
{
    engine_metrics *m = &e->m;
    m->reg = choir_metrics_create(err);
    if (!m->reg)
        return CHOIR_ENOMEM;
    choir_metrics *r = m->reg;
    m->submitted = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_requests_submitted_total", NULL,
                                     "Requests submitted to the engine");
    m->completed = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_requests_completed_total", NULL,
                                     "Requests that completed successfully");
    m->failed = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_requests_failed_total", NULL,
                                  "Requests that ended with an error after being accepted");
    for (int i = 1; i < CHOIR_REJECT_COUNT; i++) {
        char lab[64];
        snprintf(lab, sizeof lab, "reason=\"%s\"", choir_reject_reason_name((choir_reject_reason)i));
        m->rejected[i] = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_requests_rejected_total", lab,
                                           "Requests refused or ended early, by reason");
    }
    m->input_refused = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_input_refused_total", NULL,
                                         "Upload bodies or decoded audio refused: they did not fit the memory "
                                         "budget then");
    m->batches = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_batches_total", NULL, "Batches run");
    m->joined = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_batch_joins_total", NULL,
                                  "Requests that joined a batch already running (continuous batching)");
    m->queue_wait = choir_metrics_add_histogram(r, "choir_queue_wait_seconds", NULL,
                                                "Time from submission to the start of compute", NULL, 0);
    m->compute = choir_metrics_add_histogram(r, "choir_compute_seconds", NULL, "Time one batch computes", NULL, 0);
    m->first_output = choir_metrics_add_histogram(r, "choir_time_to_first_output_seconds", NULL,
                                                  "Time from submission to the first audio or text", NULL, 0);
    m->total = choir_metrics_add_histogram(r, "choir_request_seconds", NULL,
                                           "Time from submission to the final output", NULL, 0);
    m->batch_size = choir_metrics_add_histogram(r, "choir_batch_size", NULL, "Requests per batch", batch_bounds,
                                                (int)(sizeof batch_bounds / sizeof batch_bounds[0]));
    m->audio_seconds = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_audio_seconds_total", NULL,
                                         "Seconds of audio produced (TTS, STS) or processed (STT, VAD)");
    m->audio_rate = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_audio_seconds_per_second", NULL,
                                      "Audio seconds per second of engine uptime");
    m->budget = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_memory_budget_bytes", NULL, "The memory budget");
    m->reserved = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_memory_reserved_bytes", NULL,
                                    "Activation memory reserved by running batches");
    m->weights = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_weights_resident_bytes", NULL,
                                   "Weights of loaded models counted against the budget");
    m->other = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_memory_other_bytes", NULL,
                                 "Counted memory outside weights and batch arenas (I/O, caches), within the budget");
    m->arena_peak = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_arena_peak_bytes", NULL,
                                      "Largest arena use of any batch");
    m->queued = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_queue_depth", NULL, "Requests waiting");
    m->running = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_running_requests", NULL, "Requests computing");
    m->degraded = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_degraded", NULL,
                                    "1 while the engine sheds load (memory or latency pressure)");
    for (int c = 0; c < CHOIR_MEM_COUNT; c++) {
        char lab[64];
        snprintf(lab, sizeof lab, "category=\"%s\"", choir_mem_category_name((choir_mem_category)c));
        m->mem_current[c] = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_memory_allocated_bytes", lab,
                                              "Bytes held by the counted allocator, by category");
        m->mem_peak[c] = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_memory_allocated_peak_bytes", lab,
                                           "Most bytes ever held at once, by category");
    }
    return 0;
}

void engine_metrics_free(choir_engine *e)
{
    choir_metrics_free(e->m.reg);
    e->m.reg = NULL;
}

int engine_metrics_add_devices(choir_engine *e)
{
    choir_metrics *r = e->m.reg;
    for (int i = 0; i < e->n_devices; i++) {
        engine_device *d = &e->devices[i];
        char lab[96];
        const char *help = "Device memory in bytes by kind: budget, weights (replicas on it), reserved "
                           "(running batches), peak (most weights + reserved held)";
        snprintf(lab, sizeof lab, "device=\"%s\",kind=\"budget\"", d->name);
        d->m_budget = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_device_memory_bytes", lab, help);
        snprintf(lab, sizeof lab, "device=\"%s\",kind=\"weights\"", d->name);
        d->m_weights = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_device_memory_bytes", lab, help);
        snprintf(lab, sizeof lab, "device=\"%s\",kind=\"reserved\"", d->name);
        d->m_reserved = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_device_memory_bytes", lab, help);
        snprintf(lab, sizeof lab, "device=\"%s\",kind=\"peak\"", d->name);
        d->m_peak = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_device_memory_bytes", lab, help);
        snprintf(lab, sizeof lab, "device=\"%s\"", d->name);
        d->m_batches = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_device_batches_total", lab,
                                         "Batches finished, by device");
        d->m_busy = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_device_busy_seconds_total", lab,
                                      "Compute seconds of finished batches, by device (rate = busy fraction)");
        d->m_running = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_device_running_batches", lab,
                                         "Batches running now, by device");
        d->m_degraded = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_device_degraded", lab,
                                          "1 while the GPU's memory pressure is past the high-water mark");
        if (d->m_budget < 0 || d->m_weights < 0 || d->m_reserved < 0 || d->m_peak < 0 || d->m_batches < 0 ||
            d->m_busy < 0 || d->m_running < 0 || d->m_degraded < 0)
            return CHOIR_ENOMEM;
    }
    return 0;
}

int engine_metrics_add_model(choir_engine *e, engine_model *m)
{
    char lab[256];
    snprintf(lab, sizeof lab, "model=\"%s\"", m->id);
    /* Label values may not hold quotes or backslashes unescaped; model ids
     * with them are replaced character by character. */
    for (char *p = lab + 7; p[1]; p++)
        if (*p == '"' || *p == '\\' || *p == '\n')
            *p = '_';
    choir_metrics *r = e->m.reg;
    m->m_requests = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_model_requests_total", lab,
                                      "Requests submitted, by model");
    m->m_loads = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_model_loads_total", lab, "Model loads");
    m->m_unloads = choir_metrics_add(r, CHOIR_METRIC_COUNTER, "choir_model_unloads_total", lab, "Model unloads");
    m->m_loaded = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_model_loaded", lab, "1 while the model is loaded");
    m->m_replicas = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_model_replicas", lab,
                                      "Loaded (or loading) instances of the model, each on its own device");
    for (int d = 0; d < e->n_devices; d++) {
        char dl[300];
        snprintf(dl, sizeof dl, "%s,device=\"%s\"", lab, e->devices[d].name);
        m->m_placement[d] = choir_metrics_add(r, CHOIR_METRIC_GAUGE, "choir_model_placement", dl,
                                              "1 where the model has a replica");
    }
    return 0;
}

void engine_metrics_request_done(choir_engine *e, const choir_ticket *t, uint64_t done_ns)
{
    engine_metrics *m = &e->m;
    if (t->status == 0) {
        choir_metrics_inc(m->reg, m->completed, 1);
        choir_metrics_inc(m->reg, m->audio_seconds, t->req.audio_seconds);
    } else if (t->dispatch_ns) {
        choir_metrics_inc(m->reg, m->failed, 1);
        if (t->reason == CHOIR_REJECT_CANCELLED || t->reason == CHOIR_REJECT_FAILED)
            choir_metrics_inc(m->reg, m->rejected[t->reason], 1);
    } else if (t->reason == CHOIR_REJECT_CANCELLED) {
        choir_metrics_inc(m->reg, m->rejected[t->reason], 1);
    }
    if (t->dispatch_ns)
        choir_metrics_observe(m->reg, m->queue_wait, (double)(t->dispatch_ns - t->submit_ns) * 1e-9);
    if (t->req.first_output_ns && t->status == 0)
        choir_metrics_observe(m->reg, m->first_output, (double)(t->req.first_output_ns - t->submit_ns) * 1e-9);
    if (t->status == 0)
        choir_metrics_observe(m->reg, m->total, (double)(done_ns - t->submit_ns) * 1e-9);
}

/* Refreshes the gauges that mirror engine state. */
static void refresh(choir_engine *e)
{
    engine_metrics *m = &e->m;
    sched_state st;
    pthread_mutex_lock(&e->lock);
    sched_get_state(e->core, &st);
    int64_t arena_peak = e->arena_peak;
    for (int i = 0; i < e->n_devices; i++) {
        const engine_device *d = &e->devices[i];
        sched_device_state ds;
        sched_get_device(e->core, i, &ds);
        choir_metrics_set(m->reg, d->m_budget, (double)ds.budget);
        choir_metrics_set(m->reg, d->m_weights, (double)ds.weights);
        choir_metrics_set(m->reg, d->m_reserved, (double)ds.reserved);
        choir_metrics_set(m->reg, d->m_peak, (double)ds.peak);
        choir_metrics_set(m->reg, d->m_batches, (double)ds.batches);
        choir_metrics_set(m->reg, d->m_busy, ds.busy_s);
        choir_metrics_set(m->reg, d->m_running, ds.running_batches);
        choir_metrics_set(m->reg, d->m_degraded, ds.hot);
    }
    for (int i = 0; i < e->n_models; i++) {
        const engine_model *em = &e->models[i];
        uint32_t mask;
        int n = sched_model_replicas(e->core, i, &mask);
        choir_metrics_set(m->reg, em->m_replicas, n);
        for (int d = 0; d < e->n_devices; d++)
            choir_metrics_set(m->reg, em->m_placement[d], (mask >> d) & 1u);
    }
    pthread_mutex_unlock(&e->lock);
    double up = (double)(choir_now_ns() - e->start_ns) * 1e-9;
    choir_metrics_set(m->reg, m->budget, (double)st.budget);
    choir_metrics_set(m->reg, m->reserved, (double)st.reserved);
    choir_metrics_set(m->reg, m->weights, (double)st.weights);
    choir_metrics_set(m->reg, m->other, (double)st.external);
    choir_metrics_set(m->reg, m->arena_peak, (double)arena_peak);
    choir_metrics_set(m->reg, m->queued, st.queued);
    choir_metrics_set(m->reg, m->running, st.running_reqs);
    choir_metrics_set(m->reg, m->degraded, st.degraded);
    choir_metrics_set(m->reg, m->audio_rate, up > 0 ? choir_metrics_value(m->reg, m->audio_seconds) / up : 0);
    for (int c = 0; c < CHOIR_MEM_COUNT; c++) {
        choir_metrics_set(m->reg, m->mem_current[c], (double)choir_mem_current((choir_mem_category)c));
        choir_metrics_set(m->reg, m->mem_peak[c], (double)choir_mem_peak((choir_mem_category)c));
    }
}

static void summary(choir_metrics *reg, int id, choir_latency_summary *out)
{
    out->count = choir_metrics_count(reg, id);
    out->mean = out->count ? choir_metrics_value(reg, id) / (double)out->count : 0;
    out->p50 = choir_metrics_quantile(reg, id, 0.50);
    out->p95 = choir_metrics_quantile(reg, id, 0.95);
    out->p99 = choir_metrics_quantile(reg, id, 0.99);
}

void choir_engine_get_stats(choir_engine *e, choir_engine_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!e)
        return;
    refresh(e);
    engine_metrics *m = &e->m;
    choir_metrics *r = m->reg;
    out->memory_budget = (int64_t)choir_metrics_value(r, m->budget);
    out->memory_reserved = (int64_t)choir_metrics_value(r, m->reserved);
    out->weights_resident = (int64_t)choir_metrics_value(r, m->weights);
    out->memory_other = (int64_t)choir_metrics_value(r, m->other);
    out->arena_peak = (int64_t)choir_metrics_value(r, m->arena_peak);
    out->queued = (int64_t)choir_metrics_value(r, m->queued);
    out->running = (int64_t)choir_metrics_value(r, m->running);
    out->degraded = (int)choir_metrics_value(r, m->degraded);
    out->submitted = (uint64_t)choir_metrics_value(r, m->submitted);
    out->completed = (uint64_t)choir_metrics_value(r, m->completed);
    out->failed = (uint64_t)choir_metrics_value(r, m->failed);
    for (int i = 1; i < CHOIR_REJECT_COUNT; i++)
        out->rejected[i] = (uint64_t)choir_metrics_value(r, m->rejected[i]);
    out->batches = (uint64_t)choir_metrics_value(r, m->batches);
    out->joined = (uint64_t)choir_metrics_value(r, m->joined);
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_models; i++) {
        out->model_loads += (uint64_t)choir_metrics_value(r, e->models[i].m_loads);
        out->model_unloads += (uint64_t)choir_metrics_value(r, e->models[i].m_unloads);
    }
    memcpy(out->batch_size, e->batch_hist, sizeof out->batch_size);
    pthread_mutex_unlock(&e->lock);
    out->uptime_s = (double)(choir_now_ns() - e->start_ns) * 1e-9;
    out->audio_seconds = choir_metrics_value(r, m->audio_seconds);
    out->audio_per_second = choir_metrics_value(r, m->audio_rate);
    summary(r, m->queue_wait, &out->queue_wait);
    summary(r, m->compute, &out->compute);
    summary(r, m->first_output, &out->first_output);
    summary(r, m->total, &out->total);
}

char *choir_engine_metrics_text(choir_engine *e)
{
    if (!e)
        return NULL;
    refresh(e);
    return choir_metrics_render(e->m.reg);
}

/* Engine lock held. */
static void model_info(const choir_engine *e, int i, choir_engine_model_info *out)
{
    const engine_model *m = &e->models[i];
    out->id = m->id;
    out->kind = m->ops->kind;
    out->dir = m->dir;
    out->tasks = m->ops->tasks;
    out->loaded = sched_model_loaded_flag(e->core, i);
    out->resident_bytes = sched_model_weights(e->core, i);
    out->replicas = sched_model_replicas(e->core, i, &out->devices);
    snprintf(out->load_error, sizeof out->load_error, "%s", m->load_error);
    out->created = m->created;
    out->withdrawn = m->withdrawn;
}

int choir_engine_models(choir_engine *e, choir_engine_model_info *out, int cap)
{
    if (!e)
        return 0;
    pthread_mutex_lock(&e->lock);
    int n = e->n_models;
    for (int i = 0; i < n && out && i < cap; i++)
        model_info(e, i, &out[i]);
    pthread_mutex_unlock(&e->lock);
    return n;
}

int choir_engine_model_find(choir_engine *e, const char *id, choir_engine_model_info *out)
{
    if (!e || !id)
        return CHOIR_ENOTFOUND;
    int rc = CHOIR_ENOTFOUND;
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_models && rc < 0; i++)
        if (!e->models[i].withdrawn && strcmp(e->models[i].id, id) == 0) {
            if (out)
                model_info(e, i, out);
            rc = 0;
        }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int choir_engine_devices(choir_engine *e, choir_engine_device *out, int cap)
{
    if (!e)
        return 0;
    pthread_mutex_lock(&e->lock);
    int n = e->n_devices;
    for (int i = 0; i < n && out && i < cap; i++) {
        const engine_device *d = &e->devices[i];
        choir_engine_device *o = &out[i];
        sched_device_state ds;
        sched_get_device(e->core, i, &ds);
        memset(o, 0, sizeof *o);
        o->kind = d->kind;
        o->index = d->index;
        o->fake = d->fake;
        snprintf(o->name, sizeof o->name, "%s", d->name);
        snprintf(o->hw_name, sizeof o->hw_name, "%s", d->hw_name);
        o->total_bytes = d->total_bytes;
        o->budget = ds.budget;
        o->weights = ds.weights;
        o->reserved = ds.reserved;
        o->peak = ds.peak;
        o->pool = ds.pool;
        o->pool_reserved = ds.pool_reserved;
        o->pool_reqs = ds.pool_reqs;
        o->pool_peak_reqs = ds.pool_peak_reqs;
        o->pressure = ds.pressure;
        o->degraded = ds.hot;
        o->running = ds.running_batches;
        o->batches = ds.batches;
        o->busy_s = ds.busy_s;
    }
    pthread_mutex_unlock(&e->lock);
    return n;
}
