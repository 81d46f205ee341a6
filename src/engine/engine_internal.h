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

/* A model; its replicas are indexed by device (0 = CPU, d = GPU d - 1),
 * as in the scheduler. */
typedef struct engine_model {
    char *id, *dir;
    const choir_model_ops *ops;
    void *weights[SCHED_MAX_DEVICES];   /* while load_state[d] == LOAD_READY */
    int load_state[SCHED_MAX_DEVICES];
    int64_t resident[SCHED_MAX_DEVICES]; /* host bytes reported for the budget while loaded */
    int64_t dev_resident[SCHED_MAX_DEVICES]; /* device bytes (GPU replicas) */
    /* metric series */
    int m_requests, m_loads, m_unloads, m_loaded, m_replicas;
    int m_placement[SCHED_MAX_DEVICES];
    double max_audio_s;  /* longest audio input (0: the engine's max_audio_seconds) */
    char load_error[CHOIR_ERR_MSG_MAX]; /* why the last load failed; "" once one succeeds */
    int64_t created;     /* Unix seconds of its registration (or its return) */
    int withdrawn;       /* choir_engine_withdraw_model: unknown to submit and find */
} engine_model;

/* A device as the engine found it (the live figures are the scheduler's). */
typedef struct engine_device {
    choir_device_kind kind;
    int index, fake;
    char name[16];
    char hw_name[128];
    int64_t total_bytes, budget;
    /* metric series */
    int m_budget, m_weights, m_reserved, m_peak, m_batches, m_busy, m_running, m_degraded;
} engine_device;

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
    int stop_why;        /* the engine cancelled it while running: CHOIR_REJECT_DEADLINE or
                            _SHUTDOWN (atomic; 0 = not the engine) */
    uint64_t submit_ns, dispatch_ns;
    struct choir_ticket *prev, *next; /* the engine's list of unfinished tickets */
};

typedef struct engine_metrics {
    choir_metrics *reg;
    int submitted, completed, failed, batches, joined, input_refused;
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
    engine_device devices[SCHED_MAX_DEVICES]; /* [0]: the CPU */
    int n_devices;
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
    double compute_per_req_ewma; /* worker seconds per request (batch time / n) */
    /* decayed sums over whole batches (weight, n, n^2, seconds, n x seconds)
     * for the line batch seconds = a + c n that predicts queue waits */
    double fit_w, fit_n, fit_nn, fit_t, fit_nt;
    choir_ticket *live; /* unfinished tickets */
    engine_metrics m;
};

/* The longest audio input model `mi` takes, seconds. Engine lock held. */
double engine_max_audio(const choir_engine *e, int mi);

/* Copies `in` (NULL: the default profile) to `p` with every field that is
 * exactly 0 set to its profile's default (src/engine/profile.c); anything
 * else, a negative number too, is left for engine_params_check. */
void engine_params_resolve(choir_engine_params *p, const choir_engine_params *in);
/* Checks every bounded field of resolved params against its row of the engine
 * option table (src/engine/profile.c: a flag's row, or a row of its own for a
 * field no flag sets), the profile and low_water <= high_water, so API callers
 * are refused what the flags refuse. Returns 0 or CHOIR_EINVAL naming the field. */
int engine_params_check(const choir_engine_params *p, choir_err *err);

int engine_metrics_init(choir_engine *e, choir_err *err);
void engine_metrics_free(choir_engine *e);
/* Registers each device's series. */
int engine_metrics_add_devices(choir_engine *e);
/* Finds the devices params ask for into e->devices (CPU first). */
int engine_devices_resolve(choir_engine *e, choir_err *err);
/* Registers one model's series. */
int engine_metrics_add_model(choir_engine *e, engine_model *m);
/* Records a finished request (latencies from its timestamps). */
void engine_metrics_request_done(choir_engine *e, const choir_ticket *t, uint64_t done_ns);

#endif
