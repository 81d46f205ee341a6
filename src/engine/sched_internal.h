/* Scheduler internals shared by sched.c (queues, batching, admission,
 * degradation) and sched_place.c (devices, replicas, placement). Not a
 * public header; see sched.h for the contract. */
#ifndef CHOIR_ENGINE_SCHED_INTERNAL_H
#define CHOIR_ENGINE_SCHED_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "engine/sched.h"

#define LAT_WINDOW 64

enum { REP_NONE = 0, REP_LOADING = 1, REP_READY = 2 };

typedef struct sched_replica {
    int state;
    int running; /* batches in flight on it */
    double last_used;
    int64_t host_bytes, dev_bytes; /* counted while state != REP_NONE */
    int64_t pool_bytes;            /* of dev_bytes, its pool (sched_replica_pool) */
    int64_t pool_reserved;         /* of the pool, reserved by running requests */
} sched_replica;

typedef struct sched_model {
    int64_t weights_bytes;  /* expected host bytes of a CPU replica */
    int64_t gpu_host_bytes; /* expected host bytes of a GPU replica */
    int64_t dev_bytes;      /* expected device bytes of a GPU replica */
    int gpu;                /* may run on a GPU */
    int pool;               /* its GPU replicas keep a pool (sched_model_set_pool) */
    int max_batch;
    int unload_requested; /* free the weights as soon as nothing of it runs or waits */
    int running; /* batches in flight, all replicas */
    double last_used;
    double factor;
    double compute_ewma; /* seconds per batch, 0 until measured */
    double long_since;   /* since when the queue is long enough for a replica (< 0: it is not) */
    sched_replica rep[SCHED_MAX_DEVICES]; /* by device */
    sched_req **queue;
    int n_queued;
} sched_model;

typedef struct device_acct {
    int64_t budget, weights, reserved, peak;
    int hot;          /* GPU: its memory pressure passed high_water (sched_dev_pressure) */
    double hot_since;
    int pool_reqs, pool_peak_reqs; /* requests holding parts of replicas' pools, now and at most */
    int running;
    uint64_t batches;
    double busy_s;
} device_acct;

struct sched {
    sched_config c;
    sched_model *models;
    int n_models;
    device_acct dev[SCHED_MAX_DEVICES]; /* [0]: the host */
    int n_dev;
    int loading;      /* SCHED_LOAD actions not yet reported */
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

/* A batch of n requests whose largest host estimate is max_est reserves
 * n * max_est * the model's calibration factor. */
static inline int64_t sched_reservation(const sched_model *m, int64_t max_est, int n)
{
    return (int64_t)ceil((double)max_est * (double)n * m->factor);
}

/* ---- sched_place.c: replicas and device accounts ---- */

/* Replicas of m loading or loaded. */
int sched_rep_count(const sched_model *m, int n_dev);
/* Raises each device's peak to its current use. */
void sched_note_peaks(sched *s);
/* Counts a new replica's expected bytes on the host and its device. */
void sched_rep_add(sched *s, int mi, int d, int state, double now);
/* Drops a replica from the accounts (its running count stays). */
void sched_rep_remove(sched *s, int mi, int d);
/* Whether a batch reserving host_res (and dev_res on GPU d) fits now, with
 * the replica's weights added when new_rep. */
int sched_fits(const sched *s, const sched_model *m, int d, int new_rep, int64_t host_res, int64_t dev_res);
/* Bytes free on device d now (host: after external memory too). */
int64_t sched_dev_free(const sched *s, int d);
/* GPUs whose budget could ever hold m and a batch needing dev_res: bit d. */
uint32_t sched_gpu_mask(const sched *s, const sched_model *m, int64_t dev_res);
/* The GPU in mask without a replica of m where a new one fits now and
 * leaves the most room, or -1. */
int sched_best_gpu(const sched *s, const sched_model *m, uint32_t mask, int64_t host_res, int64_t dev_res);
/* The ready replica a new batch of m goes to, or -1 when none can take one. */
int sched_rep_pick(const sched *s, const sched_model *m);
/* An idle ready replica to unload, least recently used (see sched_place.c). */
int sched_lru_idle(const sched *s, double now, double need_idle_s, int except, int allow_queued, uint32_t mask,
                   int *mi, int *dev);
/* Drops replica (mi, d) and fills a SCHED_UNLOAD action. */
void sched_unload(sched *s, int mi, int d, sched_action *out);
/* Keeps each model's "queue long since" time current. */
void sched_track_queues(sched *s, double now);
/* 1 when m may get another replica (apart from the waiting time). */
int sched_wants_replica(const sched *s, const sched_model *m);
/* A replica load for a model whose queue stayed long: 1 and *out. */
int sched_spawn_replica(sched *s, double now, sched_action *out);
/* Unloads what is due (asked, extra idle replicas, idle models): 1 and *out. */
int sched_unload_due(sched *s, double now, sched_action *out);
/* GPU d's memory pressure: what running requests hold (their reservations
 * and their parts of pools) over the room its budget leaves beside the
 * replicas' fixed bytes (weights less pools). 0 for the host. */
double sched_dev_pressure(const sched *s, int d);
/* Each GPU's hot flag: set above high_water, cleared below low_water once
 * degrade_hold_s has passed since it was set. */
void sched_dev_update_pressure(sched *s, double now);
/* A request of model mi refused at submit for device memory: when every
 * replica of mi is on a hot GPU, a low-priority one (CHOIR_REJECT_OVERLOAD)
 * and one that cannot be admitted soon: the device memory the requests
 * already waiting for mi need, with its own, passes all that mi's replicas
 * hold for requests (CHOIR_REJECT_MEMORY). 0, or CHOIR_EBUSY with *why and err. */
int sched_dev_refusal(const sched *s, int mi, const sched_req *r, choir_reject_reason *why, choir_err *err);

#endif
