/* The scheduler core: queues, batch formation, memory reservations and
 * degradation, as a pure state machine over a clock the caller passes in.
 *
 * Nothing here sleeps, locks or runs models. The engine drives it from its
 * scheduler thread with the real monotonic clock; the simulation test drives it
 * single-threaded with a virtual clock and fake models. The caller asks
 * sched_decide() for the next action until it returns 0, carries the actions
 * out, and reports back (batch done, model loaded). Not thread-safe: the
 * engine calls it under its lock. Times are seconds on the caller's clock. */
#ifndef CHOIR_ENGINE_SCHED_H
#define CHOIR_ENGINE_SCHED_H

#include <stdint.h>

#include "choir/engine.h"

#define SCHED_MAX_BATCH 64
/* Devices: 0 is the host (CPU, host memory), d >= 1 is GPU d - 1, the same
 * numbering as choir_model_options.device. A model has at most one replica
 * per device, so a replica is named by (model, device). */
#define SCHED_MAX_GPUS 16
#define SCHED_MAX_DEVICES (SCHED_MAX_GPUS + 1)

typedef struct sched_config {
    int64_t budget;        /* bytes for weights + reservations */
    double high_water;     /* degrade when (weights + reserved) / budget exceeds it */
    double low_water;      /* recover when below it ... */
    double degrade_hold_s; /* ... and at least this long after degrading */
    double p99_target_s;   /* degrade when recent total-latency p99 exceeds it (0 = off) */
    int max_batch;         /* 1..SCHED_MAX_BATCH (more is refused by sched_create) */
    double wait_short_s, wait_long_s;
    double max_pad_waste;  /* length buckets are [b^k, b^(k+1)) with b = 1 / (1 - waste) */
    int queue_capacity;    /* per model */
    int workers;           /* batches in flight at once */
    double unload_idle_s;  /* unload models idle this long (0 = only for room or when degraded) */
    double aging_s;        /* a waiting request gains one priority level per this many seconds
                              (0 = 10 x wait_long_s), so low priority is late but never starved */
    /* GPUs: device d (1..n_gpus) has gpu_budget[d - 1] bytes of device memory
     * for weights + batch reservations. The host budget above still counts
     * every replica's host-side bytes and every batch's host estimate. */
    int n_gpus;
    int64_t gpu_budget[SCHED_MAX_GPUS];
    int replica_queue;      /* a GPU model whose queue holds at least this many requests ... */
    double replica_after_s; /* ... for this long gets a replica on another GPU (> 0; the
                               engine's defaults are 2 x max_batch requests, 1 s) */
    double replica_idle_s;  /* a replica beyond a model's first is unloaded after this long
                               unused (> 0; the engine's default 30 s) */
} sched_config;

/* Fills a config from engine params (already resolved to concrete values). */
void sched_config_from_params(sched_config *c, const choir_engine_params *p);

enum { SCHED_QUEUED = 1, SCHED_RUNNING = 2, SCHED_FINISHED = 3 };

/* A request as the scheduler sees it; owned by the caller (the engine embeds
 * it in a ticket) and borrowed by the scheduler while queued or running. */
typedef struct sched_req {
    uint64_t id;
    int model;
    int task;          /* requests of different tasks never share a batch */
    int priority;      /* choir_priority */
    int is_long;       /* uses the long wait limit */
    int64_t length;    /* batching length (model units, >= 1) */
    int64_t est_bytes; /* uncalibrated activation estimate (host memory) */
    int64_t dev_est_bytes; /* device-memory estimate when run on a GPU (0: none) */
    int64_t pool_est_bytes; /* the part of dev_est_bytes a GPU replica with a pool
                               (sched_replica_pool) takes from that pool, not from
                               the budget's free memory (0..dev_est_bytes) */
    double arrival;
    double deadline;   /* INFINITY = none */
    void *user;
    int state;
    int eff_priority; /* priority raised by age (set by the scheduler) */
    int load_failed;  /* its model's load failed while it was queued (sched_load_failed) */
} sched_req;

typedef enum sched_action_kind {
    SCHED_DISPATCH = 1, /* run reqs[0..n) (sorted by length) on `model` */
    SCHED_REJECT = 2,   /* finish `rejected` with `reason` (deadline, too_large, failed: its
                           model's load failed, sched_load_failed; it left the queue) */
    SCHED_UNLOAD = 3,   /* free `model`'s replica on `device` (nothing of it is running) */
    SCHED_LOAD = 4      /* load a further replica of `model` on `device` (no batch; report
                           with sched_model_loaded; it holds a worker slot until then) */
} sched_action_kind;

typedef struct sched_action {
    sched_action_kind kind;
    int model;
    int device;         /* DISPATCH, LOAD, UNLOAD: the replica's device (0 = CPU) */
    int need_load;      /* DISPATCH: load the model's weights on `device` first */
    int n;
    sched_req *reqs[SCHED_MAX_BATCH];
    int64_t reserved;   /* DISPATCH: activation bytes reserved (arena capacity) */
    int64_t est_sum;    /* DISPATCH: n * max uncalibrated estimate */
    int64_t dev_reserved; /* DISPATCH on a GPU: device bytes reserved for the batch */
    int64_t pool_reserved; /* DISPATCH on a GPU replica with a pool: bytes of the pool
                              reserved for the batch (the sum of its pool estimates) */
    int pool_n;         /* of reqs, those still holding a part of that pool */
    uint64_t members_done; /* bit i: reqs[i] finished before the batch (sched_member_done) */
    int joined;         /* a request that joined a running batch (sched_join): its own
                           reservation, no worker slot or batch count of its own */
    sched_req *rejected;
    choir_reject_reason reason;
    int64_t room;       /* REJECT too_large: the host bytes the budget leaves beside the weights
                           (`reserved`: what the request's calibrated estimate needs) */
    int64_t dev_room, pool_room; /* REJECT too_large by a GPU (`device` > 0): the device bytes
                           its budget leaves beside the weights and the replica's whole pool
                           (`dev_reserved`, `pool_reserved`: what the request needs of each) */
} sched_action;

typedef struct sched_state {
    int64_t budget, reserved, weights, external;
    int queued, running_batches, running_reqs;
    int degraded;
    int eff_max_batch;
    int loading;       /* replica loads in flight (SCHED_LOAD actions) */
} sched_state;

/* One device's accounts (device 0: the host, whose weights/reserved are the
 * sched_state figures). Bytes; peak is the most weights + reserved ever held
 * (host: + external). */
typedef struct sched_device_state {
    int64_t budget, weights, reserved, peak;
    int64_t pool, pool_reserved; /* pools of replicas on it (within weights), their reserved bytes */
    int pool_reqs, pool_peak_reqs; /* requests holding parts of those pools now, and at most */
    int hot;            /* GPU: its memory pressure is past the high-water mark (sched_dev_pressure) */
    double pressure;    /* GPU: what running requests hold of the room beside the fixed bytes */
    int running_batches;
    uint64_t batches;   /* batches finished on it */
    double busy_s;      /* summed compute seconds of those batches */
} sched_device_state;

typedef struct sched sched;

sched *sched_create(const sched_config *c, choir_err *err);
void sched_free(sched *s);

/* Adds a model with its expected resident weight bytes; returns its index.
 * It runs on the CPU only until sched_model_set_gpu. */
int sched_add_model(sched *s, int64_t weights_bytes, int max_batch, choir_err *err);

/* Marks a model able to run on a GPU, with the device bytes its weights are
 * expected to take there (replaced by the real figure after a load). */
void sched_model_set_gpu(sched *s, int model, int64_t device_weights_bytes);
/* Marks a GPU model whose replicas keep a pool of device memory, sized when
 * they load from the room the budget leaves them (sched_load_room), from
 * which each request takes its pool estimate (VibeVoice's KV pages). Such
 * a replica is loaded on its own (a SCHED_LOAD) before any batch runs on
 * it, so that it is sized beside what runs, never beside its own batch. */
void sched_model_set_pool(sched *s, int model);
/* The device bytes a replica of `model` loading on GPU `device` may take in
 * all (weights and pool): the budget less every other replica's weights and
 * all reservations. */
int64_t sched_load_room(const sched *s, int model, int device);
/* After sched_model_loaded of such a replica: `pool_bytes` of its device
 * bytes are its pool. Requests then run on it when their pool estimates fit
 * the pool's unreserved bytes and the rest of their device estimates fit
 * the budget's free memory; one whose pool estimate exceeds the whole pool
 * is refused as too large. Later replicas are expected to take the device
 * bytes less the pool before they load. */
void sched_replica_pool(sched *s, int model, int device, int64_t pool_bytes);

/* Queues r (its fields up to `user` filled). Returns 0, or a negative code
 * with *reason set: CHOIR_EBUSY (queue full / overload), CHOIR_ETOOBIG,
 * CHOIR_ECANCELED (draining). */
int sched_submit(sched *s, sched_req *r, double now, choir_reject_reason *reason, choir_err *err);

/* Removes a queued request; returns 1 when it was queued (the caller finishes
 * it as cancelled), 0 otherwise. */
int sched_cancel(sched *s, sched_req *r);

/* The next action at time `now` in *out: returns 1, or 0 when there is nothing
 * to do until sched_next_event or an outside change. */
int sched_decide(sched *s, double now, sched_action *out);

/* The earliest time a queued request's wait limit or deadline falls due
 * (INFINITY when none). */
double sched_next_event(sched *s, double now);

/* Reports a dispatched batch finished: releases its reservation, records the
 * measured arena peak (calibration), its compute time, and marks its requests
 * finished. `overflow`: the arena was too small, and `overflow_need` is the
 * capacity its run showed it needs (choir_arena_need; 0 when unknown): the
 * estimate factor grows as for sched_requeue. */
void sched_batch_done(sched *s, const sched_action *batch, double now, int64_t peak_bytes, double compute_s,
                      int64_t overflow_need, int overflow);
/* Continuous batching: between its decoding steps a running batch (`batch`,
 * dispatched by sched_decide, its replica's model and device) takes queued
 * requests of its model and task, the most urgent first, while the batch
 * has room (`live` members decode now; at most the effective max batch) and
 * each one's own reservation (its estimate x the calibration factor on the
 * host, its device estimate on the batch's GPU) fits beside everything
 * else: the first that does not fit stops the join (it stays queued for a
 * later batch). Each taken request becomes out[i], a SCHED_DISPATCH of one
 * with `joined` set, reserving its own bytes but no worker slot (it runs on
 * the batch's worker) and no running batch; report it with sched_join_done
 * or sched_join_requeue. Returns how many (0..room). */
int sched_join(sched *s, const sched_action *batch, int live, double now, sched_action *out, int room);
/* A member of a running batch on a GPU (not a joined request) is finished
 * before the batch, its own device memory freed: the batch's device
 * reservation shrinks to what its remaining members need (the largest rest
 * of their device estimates x their number, their pool parts), so that its
 * part of the pool and its share of the rest go back now and queued
 * requests may join in their place. The host reservation (the batch's
 * arena) stays until the batch ends. At most once per member (later calls,
 * and calls for a request not among batch->reqs, do nothing). */
void sched_member_done(sched *s, sched_action *batch, sched_req *r);
/* A joined request is finished: its reservation goes back and its arena peak
 * calibrates the model's factor (as for a batch of one). */
void sched_join_done(sched *s, const sched_action *joined, double now, int64_t peak_bytes);
/* A joined request's arena was too small before any output: it goes back to
 * the head of its queue and the factor grows as sched_requeue makes it for
 * a batch of one (`need`: what its arena showed it needs, 0 when unknown). */
void sched_join_requeue(sched *s, const sched_action *joined, double now, int64_t need);

/* Puts a dispatched batch's requests back at the head of their queue (for a
 * retry after an arena overflow); releases the reservation like batch_done.
 * The model's factor grows so that the same batch would now reserve
 * `need` (what its failed run showed it needs, 0 when unknown) times 1.25,
 * and at least twice its old reservation; where that passes the budget but
 * the need does not, exactly what the budget leaves one batch now (beside
 * all weights and the external bytes). A need beyond that is left uncapped,
 * so the batch is formed smaller, or a single request waits for external
 * memory or is refused (CHOIR_REJECT_TOO_LARGE) when formed again. Each retry of one batch therefore at least doubles its
 * room or reaches the budget's, and ends. */
void sched_requeue(sched *s, const sched_action *batch, double now, int64_t peak_bytes, int64_t need);

/* Reports what loading `model` on `device` really made resident: host bytes
 * and device bytes (replace the expected ones), or a failed load (host_bytes
 * < 0: that replica counts as unloaded again). Also ends a SCHED_LOAD.
 * Returns 1 when the real device bytes do not fit that GPU's budget (before a
 * first load they are only guessed from the files): the replica is then
 * dropped from the accounts, the caller frees it (and returns a batch that
 * carried the load with sched_return), and later placements use the real
 * figure. Returns 0 otherwise. */
int sched_model_loaded(sched *s, int model, int device, int64_t host_bytes, int64_t dev_bytes);

/* Reports that a load of `model` failed, after sched_model_loaded has
 * dropped that replica. When the model has no replica left (none loading or
 * ready), every request queued for it now is marked: the next decisions
 * return each as a SCHED_REJECT with reason CHOIR_REJECT_FAILED (before any
 * batch), so a burst of requests to a model that cannot load costs one load
 * attempt, not one per batch. Requests submitted later queue as usual and
 * may load it again (its files may have been fixed). While another replica
 * is left, the queue waits for it and nothing is marked. Returns how many
 * requests were marked. */
int sched_load_failed(sched *s, int model);

/* Puts a dispatched batch's requests back at the head of their queue without
 * recalibrating (its replica could not be kept); releases the reservation. */
void sched_return(sched *s, const sched_action *batch, double now);

/* Asks for a model's weights to be freed as soon as none of its batches runs
 * and none of its requests waits (the next decide then returns SCHED_UNLOAD);
 * a later request loads it again. */
void sched_request_unload(sched *s, int model);

/* Sets the bytes held outside weights and batch arenas (decoded audio,
 * response buffers, caches), which admission counts against the budget too. */
void sched_set_external(sched *s, int64_t bytes);

/* Feeds one finished request's total latency into the p99 window. */
void sched_observe_latency(sched *s, double total_s, double now);

/* Stops accepting submissions and dispatches queued work without waiting. */
void sched_drain(sched *s);

/* Takes any one queued request out of its queue (state finished), or NULL
 * when none is queued; for failing what is left at shutdown. */
sched_req *sched_pop_queued(sched *s);

void sched_get_state(const sched *s, sched_state *out);
/* The calibration factor applied to a model's estimates (>= 0.25). */
double sched_model_factor(const sched *s, int model);
int sched_model_loaded_flag(const sched *s, int model);
/* Requests waiting in a model's queue. */
int sched_model_queued(const sched *s, int model);
/* The host weight bytes counted for a model (summed over its replicas if
 * loaded, expected for the CPU if not). */
int64_t sched_model_weights(const sched *s, int model);
/* Replicas of a model (loading or loaded); *device_mask (when not NULL) gets
 * bit d set for a replica on device d. */
int sched_model_replicas(const sched *s, int model, uint32_t *device_mask);
/* 1 when the replica (model, device) is loaded and ready for batches. */
int sched_replica_ready(const sched *s, int model, int device);
/* Devices: 1 + n_gpus. */
int sched_device_count(const sched *s);
void sched_get_device(const sched *s, int device, sched_device_state *out);

#endif
