/* Admission of request inputs before they exist: upload bodies and decoded
 * audio are allocated here, against the same host budget that the
 * scheduler admits batches against, so that what a request's input costs is
 * refused up front instead of found out when the machine runs out.
 *
 * The check and the allocation happen under the engine lock, the lock the
 * scheduler decides under, so two admissions (or an admission and a batch
 * dispatch) never both count the same free bytes. Once allocated, the block
 * is CHOIR_MEM_IO memory like any other and the scheduler sees it as
 * "external" at its next decision. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "engine/engine_internal.h"

void *choir_engine_alloc_input(choir_engine *e, size_t bytes, choir_err *err)
{
    if (!e) {
        choir_err_set(err, CHOIR_EINVAL, "alloc_input: no engine");
        return NULL;
    }
    int64_t budget = e->p.memory_budget;
    if (bytes > (size_t)budget) {
        choir_err_set(err, CHOIR_ETOOBIG, "%zu bytes are more than the whole %lld-byte memory budget", bytes,
                      (long long)budget);
        return NULL;
    }
    pthread_mutex_lock(&e->lock);
    sched_state st;
    sched_get_state(e->core, &st);
    /* what the scheduler counts at its next decision: weights, running
     * batches' reservations, and everything else the process holds */
    int64_t held = st.weights + st.reserved + choir_mem_current(CHOIR_MEM_IO) + choir_mem_current(CHOIR_MEM_OTHER) +
                   e->resting_work;
    void *p = NULL;
    if (held + (int64_t)bytes <= budget) {
        p = choir_alloc(CHOIR_MEM_IO, bytes);
        if (!p)
            choir_err_set(err, CHOIR_ENOMEM, "out of memory for %zu bytes", bytes);
        else
            pthread_cond_signal(&e->wake_sched); /* its view of external memory changed */
    } else {
        choir_err_set(err, CHOIR_EBUSY, "%zu bytes do not fit the memory budget now (%lld of %lld bytes in use)",
                      bytes, (long long)held, (long long)budget);
    }
    pthread_mutex_unlock(&e->lock);
    if (!p && err && err->code == CHOIR_EBUSY)
        choir_metrics_inc(e->m.reg, e->m.input_refused, 1);
    return p;
}

double engine_max_audio(const choir_engine *e, int mi)
{
    double m = mi >= 0 && mi < e->n_models ? e->models[mi].max_audio_s : 0;
    return m > 0 ? m : e->p.max_audio_seconds > 0 ? e->p.max_audio_seconds : INFINITY;
}

static int find(const choir_engine *e, const char *id)
{
    for (int i = 0; id && i < e->n_models; i++)
        if (strcmp(e->models[i].id, id) == 0)
            return i;
    return -1;
}

int choir_engine_set_model_max_audio(choir_engine *e, const char *id, double seconds, choir_err *err)
{
    if (!e || !(seconds > 0))
        return choir_err_set(err, CHOIR_EINVAL, "max audio: seconds must be positive");
    pthread_mutex_lock(&e->lock);
    int mi = find(e, id);
    if (mi >= 0)
        e->models[mi].max_audio_s = seconds;
    pthread_mutex_unlock(&e->lock);
    return mi >= 0 ? 0 : choir_err_set(err, CHOIR_ENOTFOUND, "no model '%s'", id ? id : "");
}

double choir_engine_model_max_audio(choir_engine *e, const char *id)
{
    if (!e)
        return INFINITY;
    pthread_mutex_lock(&e->lock);
    double s = engine_max_audio(e, find(e, id));
    pthread_mutex_unlock(&e->lock);
    return s;
}
