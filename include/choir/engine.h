/* choir/engine.h: the engine that lets many requests share one machine.
 *
 * An engine owns a set of models (registered by id and directory, loaded lazily
 * on first use, unloaded least-recently-used when another model needs room), a
 * memory budget that every model's weights and every batch's activations are
 * reserved against, per-model queues, a scheduler thread that forms batches
 * (by length bucket, dispatched when full or when the oldest request has waited
 * its class's limit) and worker threads that run them. Results reach each
 * caller through its own output callback, piece by piece when streaming.
 *
 * All functions are thread-safe unless noted. */
#ifndef CHOIR_ENGINE_H
#define CHOIR_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"
#include "choir/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_engine choir_engine;
typedef struct choir_ticket choir_ticket;

/* Serving profiles: each sets defaults for batch size, wait limits, audio
 * length and (interactive-tts) bf16 activations; explicit params override
 * them. Weights run as stored on disk (quantize them with `choir convert`). */
typedef enum choir_profile {
    CHOIR_PROFILE_DEFAULT = 0,
    CHOIR_PROFILE_INTERACTIVE_TTS, /* batch 1, bf16, first audio <= 200 ms */
    CHOIR_PROFILE_AUDIOBOOK,       /* batch 8, long waits (200/300 ms) */
    CHOIR_PROFILE_REALTIME_STT,    /* batch 4, short waits, <= 5-min audio */
    CHOIR_PROFILE_OFFLINE_STT,     /* batch 16, long waits (250/300 ms) */
    CHOIR_PROFILE_COUNT
} choir_profile;

/* "interactive-tts", ...; "default" for CHOIR_PROFILE_DEFAULT. */
const char *choir_profile_name(choir_profile p);
/* Parses a profile name; returns CHOIR_EINVAL for an unknown one. */
int choir_profile_parse(const char *name, choir_profile *out);

/* Why a request was refused or did not complete (metrics label and message). */
typedef enum choir_reject_reason {
    CHOIR_REJECT_NONE = 0,
    CHOIR_REJECT_QUEUE_FULL, /* the model's queue is at capacity (HTTP 429) */
    CHOIR_REJECT_OVERLOAD,   /* degraded: low-priority work refused (HTTP 503) */
    CHOIR_REJECT_DEADLINE,   /* could not be admitted before its deadline (HTTP 503) */
    CHOIR_REJECT_TOO_LARGE,  /* needs more memory than the budget can ever give (HTTP 413) */
    CHOIR_REJECT_SHUTDOWN,   /* the engine is shutting down (HTTP 503) */
    CHOIR_REJECT_CANCELLED,  /* the caller cancelled */
    CHOIR_REJECT_FAILED,     /* the model failed on it (HTTP 500) */
    CHOIR_REJECT_BACKLOG,    /* refused at submit: the predicted wait plus compute already
                                passes its deadline (HTTP 503) */
    CHOIR_REJECT_MEMORY,     /* refused at submit: its GPUs' memory is past the high-water mark
                                and the requests already waiting for it need all the model's
                                replicas hold, so it could not start soon (HTTP 429) */
    CHOIR_REJECT_COUNT
} choir_reject_reason;

/* "queue_full", "overload", ... (used as the Prometheus label). */
const char *choir_reject_reason_name(choir_reject_reason r);

typedef enum choir_priority {
    CHOIR_PRIORITY_LOW = 0,    /* refused first under pressure (batch jobs) */
    CHOIR_PRIORITY_NORMAL = 1,
    CHOIR_PRIORITY_HIGH = 2    /* scheduled first (interactive) */
} choir_priority;

/* The most GPUs an engine uses. */
#define CHOIR_ENGINE_MAX_GPUS 16
/* The largest batch an engine forms (params.max_batch above it is refused). */
#define CHOIR_ENGINE_MAX_BATCH 64

/* Every number below: exactly 0 means the default the comment gives (a
 * profile's, for a profile field); a negative number or one outside the
 * field's bounds is refused by choir_engine_create, never clamped. The bounds
 * are those of the field's flag in choir_engine_options_help(), or for a
 * field without a flag the ones given here. */
typedef struct choir_engine_params {
    choir_profile profile;     /* a choir_profile value (0 = default) */
    int64_t memory_budget;     /* bytes; 0 = 75% of min(physical memory, cgroup limit) */
    double high_water;         /* degrade above this fraction of the budget (0 = 0.85) */
    double low_water;          /* recover below it, 0.01..high_water (0 = 0.70, or
                                  0.8 x high_water when that is lower) */
    double p99_target_ms;      /* degrade when total-latency p99 exceeds it (0 = off) */
    int max_batch;             /* 0 = profile's; 1..CHOIR_ENGINE_MAX_BATCH (also capped by
                                  each model's max_batch) */
    double wait_short_ms;      /* batch wait limit for short requests (0 = profile's, 50) */
    double wait_long_ms;       /* for long requests (0 = profile's, 250) */
    double long_seconds;       /* requests longer than this (audio s, or ~ s of speech
                                  for text) are "long", 0.001..1e6 (0 = 10) */
    double max_pad_waste;      /* bound on padding waste in a batch, 0.01..0.99 (0 = 0.25) */
    int queue_capacity;        /* pending requests per model (0 = 256) */
    int workers;               /* batches run concurrently (0 = 1) */
    double unload_idle_s;      /* unload a model idle this long, 0..1e9 s (0 = only when
                                  room is needed or when degraded) */
    double max_audio_seconds;  /* refuse longer audio inputs, seconds (0 = the default:
                                  4 hours, 300 s for the realtime-stt profile); per model
                                  with choir_engine_set_model_max_audio */
    choir_model_options model_options; /* zero = profile's defaults; compute_bf16 0 (the
                                          profile's), 1 (on) or -1 (off, even where the
                                          profile has it on); `device` is ignored: the
                                          engine places each replica */

    /* GPUs (docs/engine.md, "Devices, placement and replicas"). Each GPU has
     * its own memory budget; host memory keeps memory_budget above. */
    const char *gpus;           /* "all" (NULL too), "none", or CUDA device indices "0,2"; read
                                   only by choir_engine_create. Indices need a CUDA build. */
    double gpu_memory_fraction; /* a GPU's budget as a fraction of its memory (0 = 0.90) */
    int64_t gpu_memory_bytes;   /* a GPU's budget in bytes, instead of the fraction (0 = unused) */
    int fake_gpus;              /* tests: simulate this many GPUs (0..CHOIR_ENGINE_MAX_GPUS, 0 = none)
                                   instead of the CUDA devices; `gpus` then selects among them */
    int64_t fake_gpu_bytes[CHOIR_ENGINE_MAX_GPUS]; /* their memory sizes, bytes */
    int replica_queue;          /* a GPU model with at least this many requests waiting
                                   (1..2^20; 0 = 2 x max_batch) ... */
    double replica_after_s;     /* ... for this long (0.001..1e6 s; 0 = 1 s) gets a replica
                                   on another GPU with room */
    double replica_idle_s;      /* replicas beyond a model's first are unloaded after this
                                   long unused (0.001..1e9 s; 0 = 30 s) */
} choir_engine_params;

/* Defaults for `profile` (every field filled with a concrete value). */
choir_engine_params choir_engine_default_params(choir_profile profile);

/* Applies one command-line option to `p`, so `choir serve` and other front
 * ends share the engine's flags: `name` without leading dashes
 * ("memory-budget", "profile", "max-batch", "workers", "queue", "wait-ms",
 * "wait-long-ms", "high-water", "p99-target-ms", "max-audio-s",
 * "gpus", "gpu-memory-fraction", "gpu-memory") and its value ("gpus" keeps
 * the pointer: the string must outlive choir_engine_create). Sizes are read by
 * choir_parse_size ("8G", "8Gi", "8GiB": binary units); numbers are bounded as
 * choir_engine_options_help() says; "profile" replaces every
 * field with that profile's defaults except memory_budget, so give it first.
 * Returns 1 when applied, 0 when `name` is not an engine option, or
 * CHOIR_EINVAL (and err) for a bad value. */
int choir_engine_apply_option(choir_engine_params *p, const char *name, const char *value, choir_err *err);
/* Usage lines for those options (static text). */
const char *choir_engine_options_help(void);

/* Creates an engine and starts its threads. `params` NULL means defaults.
 * Returns NULL and err on failure (CHOIR_EINVAL naming the field for one that
 * is negative or outside its bounds once zeros are the defaults, see
 * choir_engine_params, or for a `gpus` list naming a GPU that does not exist,
 * or any GPU in a build without CUDA). With GPUs,
 * the workers are raised to at least one per GPU plus one. */
choir_engine *choir_engine_create(const choir_engine_params *params, choir_err *err);

/* Stops accepting work, lets queued and running requests finish until
 * `deadline_s` seconds from now, fails the rest with CHOIR_ECANCELED
 * (reason shutdown), joins the threads and unloads the models. Returns 0, or
 * CHOIR_ETIMEDOUT when some requests had to be failed. Safe to call twice. */
int choir_engine_shutdown(choir_engine *e, double deadline_s);
/* Shuts down (deadline 0 if not done) and frees the engine. Tickets stay valid
 * until freed. NULL is a no-op. */
void choir_engine_free(choir_engine *e);

/* Registers model `id` served from `dir` by `ops` (NULL: detect the adapter
 * from dir/config.json and the built-in adapters). Nothing is loaded until a
 * request needs it. Returns 0, CHOIR_EINVAL for a duplicate id ("model id
 * 'ID' is already registered"; a withdrawn model with the same directory and
 * adapter is brought back instead), CHOIR_ENOTFOUND when no adapter fits.
 * `id` and `dir` are copied. */
int choir_engine_add_model(choir_engine *e, const char *id, const char *dir, const choir_model_ops *ops,
                           choir_err *err);

/* Frees model `id`'s weights as soon as none of its batches runs and none of
 * its requests waits (at once when it is idle); the model stays registered and
 * a later request loads it again. Returns 0, or CHOIR_ENOTFOUND. */
int choir_engine_unload_model(choir_engine *e, const char *id, choir_err *err);

/* Withdraws model `id`: from now on submit refuses it (CHOIR_ENOTFOUND, and
 * a job without a model_id never goes to it), choir_engine_model_find does
 * not find it and choir_engine_models lists it with `withdrawn` set; its
 * weights go as with choir_engine_unload_model, once its queued and running
 * work is done. The id stays taken: choir_engine_add_model with the same id,
 * directory and adapter brings the model back; another directory is refused.
 * Returns 0, or CHOIR_ENOTFOUND (no such model, or already withdrawn). */
int choir_engine_withdraw_model(choir_engine *e, const char *id, choir_err *err);

/* Allocates `bytes` of CHOIR_MEM_IO memory for a request's input (an upload
 * body, decoded audio) when they fit the host memory budget now, beside the
 * loaded weights, the running batches' reservations and every other counted
 * byte; the check and the allocation are one step, so concurrent callers
 * never share the same free bytes. Returns the block (free it with
 * choir_free), or NULL and err: CHOIR_ETOOBIG when bytes exceed the whole
 * budget, CHOIR_EBUSY when they do not fit now (a retry after
 * choir_engine_retry_after may), CHOIR_ENOMEM. Counted on /metrics as
 * choir_input_refused_total. */
void *choir_engine_alloc_input(choir_engine *e, size_t bytes, choir_err *err);

/* Sets the longest audio input (seconds, > 0) model `id` takes, in place of
 * the engine's max_audio_seconds. Returns 0, CHOIR_EINVAL or CHOIR_ENOTFOUND. */
int choir_engine_set_model_max_audio(choir_engine *e, const char *id, double seconds, choir_err *err);
/* The longest audio input model `id` takes, seconds (the engine's limit for
 * an unknown id; INFINITY when there is none). */
double choir_engine_model_max_audio(choir_engine *e, const char *id);

/* What a caller submits. The request's input pointers are borrowed until the
 * ticket is finished. */
typedef struct choir_job {
    const char *model_id;    /* NULL: the first registered model serving `req.task` */
    choir_request req;       /* task + input (+ stream flag); engine fields ignored */
    choir_priority priority;
    double timeout_s;        /* deadline from now, seconds, covering the queue wait and the
                                compute: refused at submit when the predicted finish is
                                later (CHOIR_REJECT_BACKLOG), failed when it passes while
                                queued or running (CHOIR_REJECT_DEADLINE); 0 = none */
    choir_output_fn on_output; /* may be NULL: use choir_ticket_wait and no outputs */
    void *user;
} choir_job;

/* Queues a job. Returns a ticket the caller frees with choir_ticket_free, or
 * NULL and err when refused at once: err->code CHOIR_EBUSY (queue full,
 * overload), CHOIR_ETOOBIG (larger than the budget), CHOIR_ENOTFOUND (model),
 * CHOIR_EINVAL (bad job), CHOIR_ECANCELED (shutting down); *reason (when not
 * NULL) says which. Outputs may be delivered before this returns. */
choir_ticket *choir_engine_submit(choir_engine *e, const choir_job *job, choir_reject_reason *reason,
                                  choir_err *err);

/* Waits until the ticket is finished or `timeout_s` passes (< 0: forever).
 * Returns the request's final status (0, or the negative code it failed with,
 * message in err), or CHOIR_ETIMEDOUT if still running. */
int choir_ticket_wait(choir_ticket *t, double timeout_s, choir_err *err);

/* Like choir_ticket_wait, but also says why it returned: *running is 1 when
 * the timeout passed with the request still running, 0 when it finished (its
 * status is then the return value, CHOIR_ETIMEDOUT included for a request
 * that failed at its deadline). Both come from one look at the ticket, so a
 * request that finishes just as the wait times out is never taken for a
 * running one. */
int choir_ticket_poll(choir_ticket *t, double timeout_s, int *running, choir_err *err);
/* 1 once the final output was delivered (or the request failed). */
int choir_ticket_done(const choir_ticket *t);
/* Why it failed (CHOIR_REJECT_NONE on success or while running). */
choir_reject_reason choir_ticket_reason(const choir_ticket *t);
/* Seconds advised before retrying a refused request (for Retry-After). */
double choir_engine_retry_after(const choir_engine *e);

/* A model's queue as a client sees it (x-ratelimit-style headers). */
typedef struct choir_engine_queue_info {
    int capacity;            /* requests the model's queue holds */
    int queued;              /* requests waiting in it now */
    int running;             /* requests running now (every model) */
    double predicted_s;      /* predicted seconds from a submit now to its end: the
                                work ahead over the workers plus one batch (0 until
                                a batch has been measured) */
} choir_engine_queue_info;

/* Fills *out for model `id` (NULL: every model's queues summed). Returns 0 or
 * CHOIR_ENOTFOUND. */
int choir_engine_get_queue_info(choir_engine *e, const char *id, choir_engine_queue_info *out);
/* Requests cancellation: a queued request is removed and its reservation
 * freed; a running one stops at the model's next output. The final output
 * carries CHOIR_ECANCELED. No-op when finished. */
void choir_ticket_cancel(choir_ticket *t);
/* Cancels if still running, waits for it to finish, and frees. NULL no-op. */
void choir_ticket_free(choir_ticket *t);

/* A snapshot of the engine's figures. Latencies in seconds. */
typedef struct choir_latency_summary {
    double p50, p95, p99, mean;
    uint64_t count;
} choir_latency_summary;

#define CHOIR_BATCH_HIST_MAX 32

typedef struct choir_engine_stats {
    /* bytes: the budget; reserved by running batches; weights of loaded
     * models; held elsewhere (I/O buffers, caches), also counted against the
     * budget; the largest arena use of any batch */
    int64_t memory_budget, memory_reserved, weights_resident, memory_other, arena_peak;
    int64_t queued, running;
    int degraded;
    uint64_t submitted, completed, failed;
    uint64_t rejected[CHOIR_REJECT_COUNT];
    uint64_t model_loads, model_unloads, batches;
    uint64_t joined;             /* requests that joined a batch already running */
    uint64_t batch_size[CHOIR_BATCH_HIST_MAX + 1]; /* batches of size i (last: larger) */
    double audio_seconds;        /* total audio produced or consumed */
    double audio_per_second;     /* audio_seconds / engine uptime */
    double uptime_s;
    choir_latency_summary queue_wait, compute, first_output, total;
} choir_engine_stats;

void choir_engine_get_stats(choir_engine *e, choir_engine_stats *out);

/* One device the engine places models on: index 0 is the CPU (host memory),
 * then the GPUs. Figures are a snapshot. */
typedef enum choir_device_kind {
    CHOIR_DEVICE_KIND_CPU = 0,
    CHOIR_DEVICE_KIND_GPU = 1
} choir_device_kind;

typedef struct choir_engine_device {
    choir_device_kind kind;
    int index;          /* CUDA device index (GPU); 0 for the CPU */
    int fake;           /* 1: a simulated GPU (params.fake_gpus) */
    char name[16];      /* "cpu", "gpu0", ...: the metrics label */
    char hw_name[128];  /* the card's name ("NVIDIA H200", "fake"), "host" for the CPU */
    int64_t total_bytes; /* memory on the device (host: the budget) */
    /* bytes: the budget; weights of replicas on it; reserved by running
     * batches; the most weights + reserved ever held */
    int64_t budget, weights, reserved, peak;
    /* GPU: bytes of the pools replicas keep on it (ops->pool_bytes; part of
     * `weights`), of them reserved by running requests now, the requests
     * holding parts of them now and the most that did at once */
    int64_t pool, pool_reserved;
    int pool_reqs, pool_peak_reqs;
    /* GPU: what running requests hold (reservations and pool parts) of the
     * room its budget leaves beside the replicas' fixed bytes, 0..1; and 1
     * while that passed the high-water mark (until it falls below the
     * low-water mark): low-priority requests for models only there are
     * refused (overload, HTTP 503), and so are those that could not start
     * soon (memory, HTTP 429) */
    double pressure;
    int degraded;
    int running;        /* batches running on it now */
    uint64_t batches;   /* batches finished on it */
    double busy_s;      /* their summed compute seconds */
} choir_engine_device;

/* Fills up to `cap` entries of `out`; returns the number of devices (1 + GPUs). */
int choir_engine_devices(choir_engine *e, choir_engine_device *out, int cap);

/* One registered model, as listed by choir_engine_models. */
typedef struct choir_engine_model_info {
    const char *id;    /* valid until the engine is freed */
    const char *kind;  /* the adapter's kind ("whisper", ...) */
    const char *dir;
    uint32_t tasks;    /* CHOIR_TASK_BIT()s */
    int loaded;
    int64_t resident_bytes; /* host bytes while loaded (all replicas); else the expected size */
    int replicas;      /* loaded (or loading) instances, each on its own device */
    uint32_t devices;  /* bit d: a replica on device d of choir_engine_devices */
    char load_error[CHOIR_ERR_MSG_MAX]; /* why its last load failed (the adapter's message);
                                           "" when none failed or a later load succeeded */
    int64_t created;   /* Unix seconds when it was registered (or brought back) */
    int withdrawn;     /* choir_engine_withdraw_model was called (and no add since) */
} choir_engine_model_info;

/* Fills up to `cap` entries of `out` in registration order, withdrawn models
 * included (flagged); returns the number of registered models (which may
 * exceed cap). */
int choir_engine_models(choir_engine *e, choir_engine_model_info *out, int cap);
/* Fills *out (when not NULL) for model `id`, not a withdrawn one. Returns 0
 * or CHOIR_ENOTFOUND. */
int choir_engine_model_find(choir_engine *e, const char *id, choir_engine_model_info *out);

/* Renders all metrics in the Prometheus text exposition format (version
 * 0.0.4). Returns a NUL-terminated string the caller frees with choir_free, or
 * NULL on allocation failure. */
char *choir_engine_metrics_text(choir_engine *e);

#ifdef __cplusplus
}
#endif
#endif
