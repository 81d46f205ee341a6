/* Engine internals shared by engine.c (lifecycle, threads) and
 * engine_stats.c (metrics). Not a public header. */
#ifndef CHOIR_ENGINE_INTERNAL_H
#define CHOIR_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "choir/engine.h"
#include "choir/metrics.h"
#include "engine/sched.h"

enum { LOAD_NONE = 0, LOAD_BUSY = 1, LOAD_READY = 2, LOAD_FAILED = 3 };

typedef struct engine_model {
    char *id, *dir;
    const choir_model_ops *ops;
    void *weights;   /* while load_state == LOAD_READY */
    int load_state;
    int64_t resident; /* bytes reported for the budget while loaded */
    /* metric series */
    int m_requests, m_loads, m_unloads, m_loaded;
} engine_model;

struct choir_ticket {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;            /* the caller's and, until finished, the engine's */
    int finished;
    int status;
    choir_reject_reason reason;
    char msg[CHOIR_ERR_MSG_MAX];

    choir_engine *engine; /* valid while not finished */
    sched_req sr;
    choir_request req;
    choir_output_fn user_fn;
    void *user;
    int model;
    int retried;
    uint64_t submit_ns, dispatch_ns;
    struct choir_ticket *prev, *next; /* the engine's list of unfinished tickets */
};

typedef struct engine_metrics {
    choir_metrics *reg;
    int submitted, completed, failed, batches;
    int rejected[CHOIR_REJECT_COUNT];
    int queue_wait, compute, first_output, total, batch_size;
    int audio_seconds, audio_rate;
    int budget, reserved, weights, other, arena_peak, queued, running, degraded;
    int mem_current[8], mem_peak[8];
} engine_metrics;

struct choir_engine {
    choir_engine_params p;
    pthread_mutex_t lock;
    pthread_cond_t wake_sched;  /* queue or memory changed */
    pthread_cond_t wake_worker; /* a batch is ready */
    pthread_cond_t changed;     /* a model finished loading; a batch finished */
    sched *core;
    engine_model *models;
    int n_models;
    const choir_model_ops **extra_ops;
    /* dispatched batches waiting for a worker (at most p.workers) */
    sched_action *ready;
    int n_ready;
    pthread_t sched_thread;
    pthread_t *workers;
    int n_workers;
    int started_sched;
    int stop;         /* threads exit */
    int shut;         /* shutdown has run */
    uint64_t next_id;
    uint64_t start_ns;
    int64_t arena_peak;
    int64_t resting_work; /* activation + cache bytes held while no batch ran */
    uint64_t batch_hist[CHOIR_BATCH_HIST_MAX + 1];
    double compute_per_req_ewma;
    choir_ticket *live; /* unfinished tickets */
    engine_metrics m;
};

int engine_metrics_init(choir_engine *e, choir_err *err);
void engine_metrics_free(choir_engine *e);
/* Registers one model's series. */
int engine_metrics_add_model(choir_engine *e, engine_model *m);
/* Records a finished request (latencies from its timestamps). */
void engine_metrics_request_done(choir_engine *e, const choir_ticket *t, uint64_t done_ns);

#endif
