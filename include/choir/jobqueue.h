/* choir/jobqueue.h: offline work over Redis Streams.
 *
 * A job is one entry of a Redis Stream: a task ("vad", "stt", "tts", "sts"),
 * an input file, an output file, an optional model id and options. Workers
 * read the stream through one consumer group, so each entry goes to one
 * worker; an entry stays in the group's pending list until the worker
 * acknowledges it, which it does only after the result is durably on disk.
 * When a worker dies, its pending entries are claimed by the others once they
 * have been idle for `claim_idle_s` (XAUTOCLAIM). Every delivery is counted;
 * a job delivered more than `max_attempts` times (it failed, or it killed its
 * workers) moves to the dead-letter stream "<stream>:dead" with its last error.
 *
 * Results are written to a temporary file, fsync'ed and renamed over the
 * output path, so a job run twice (a slow worker racing the one that claimed
 * its job) writes the same file twice and never a torn one: the output holds
 * each job exactly once. The counters (hash "<stream>:counts": submitted,
 * done, dead) are updated atomically with the acknowledgement (a Lua script), so a job
 * acknowledged twice counts once.
 *
 * A choir_jobqueue handle is one Redis connection: use it from one thread. */
#ifndef CHOIR_JOBQUEUE_H
#define CHOIR_JOBQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "choir/engine.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_jobqueue choir_jobqueue;

typedef struct choir_jobqueue_params {
    const char *url;      /* "redis://[:password@]host[:port][/db]"; NULL = redis://127.0.0.1:6379 */
    const char *stream;   /* the jobs stream's key (required) */
    const char *group;    /* consumer group; NULL = "choir" */
    const char *consumer; /* this consumer's name, unique per worker; NULL = "<host>-<pid>" */
    double claim_idle_s;  /* claim others' jobs pending longer than this (0 = 60) */
    int max_attempts;     /* deliveries before a job is dead-lettered (0 = 3) */
    double timeout_s;     /* connect and command timeout, excluding blocking reads (0 = 5) */
} choir_jobqueue_params;

choir_jobqueue_params choir_jobqueue_default_params(void);

/* What to do: the fields of one stream entry. Strings are NUL-terminated;
 * empty means "not given". */
#define CHOIR_JOB_PATH_MAX 4096
typedef struct choir_jobspec {
    char task[8];                      /* "vad", "stt", "tts" or "sts" */
    char input[CHOIR_JOB_PATH_MAX];    /* audio file (text file for tts) */
    char output[CHOIR_JOB_PATH_MAX];   /* result: .json for vad/stt, audio for tts/sts */
    char model[256];                   /* engine model id; "" = first serving the task */
    char options[1024];                /* JSON object ("" = {}): language, voice, speed,
                                          threshold, min_speech_ms, min_silence_ms,
                                          timestamps, format */
} choir_jobspec;

/* One delivery of a job to this consumer. */
typedef struct choir_jobqueue_job {
    char id[64];        /* the stream entry id ("1700000000000-0") */
    choir_jobspec spec;
    int attempt;        /* 1 on the first delivery, counted across workers */
    int reclaimed;      /* 1: claimed from the pending list (a dead or slow worker's job, or a retry) */
    char last_error[CHOIR_ERR_MSG_MAX]; /* the previous attempt's error, or "" */
} choir_jobqueue_job;

/* Progress of one stream and group. `queued` counts entries not yet
 * delivered; `pending` those delivered but not yet acknowledged. */
typedef struct choir_jobqueue_progress {
    int64_t submitted, done, dead, pending, queued;
    int64_t consumers; /* consumers the group has seen (dead ones included) */
} choir_jobqueue_progress;

/* Connects, and creates the stream and group when missing (MKSTREAM; an
 * existing group is kept). Returns a handle the caller frees with
 * choir_jobqueue_free, or NULL and err: CHOIR_EINVAL (bad url or params),
 * CHOIR_EIO (cannot connect or Redis refused). */
choir_jobqueue *choir_jobqueue_connect(const choir_jobqueue_params *params, choir_err *err);
/* Closes the connection. NULL is a no-op. */
void choir_jobqueue_free(choir_jobqueue *q);

/* Appends a job to the stream and counts it. Writes the entry id to `id`
 * (`id_cap` bytes, may be NULL). Returns 0, CHOIR_EINVAL (no task, input or
 * output, or options not a JSON object), CHOIR_EIO. */
int choir_jobqueue_submit(choir_jobqueue *q, const choir_jobspec *spec, char *id, size_t id_cap,
                          choir_err *err);

/* Takes the next job for this consumer: first a job idle in the pending list
 * longer than claim_idle_s, else a new one, waiting up to `block_s` seconds.
 * Jobs over max_attempts are dead-lettered here and skipped. Returns 1 with
 * *job filled, 0 when nothing came within block_s, or CHOIR_EIO (the
 * connection is re-opened on the next call). */
int choir_jobqueue_take(choir_jobqueue *q, double block_s, choir_jobqueue_job *job, choir_err *err);

/* Acknowledges a job whose result is durably written. Returns 1 when this
 * call acknowledged it, 0 when it was already acknowledged (another worker
 * claimed and finished it first: harmless, the output is the same), or
 * CHOIR_EIO. */
int choir_jobqueue_complete(choir_jobqueue *q, const choir_jobqueue_job *job, choir_err *err);

/* Records that this attempt failed with `error`. When the job has had
 * max_attempts deliveries it moves to "<stream>:dead" (fields of the job,
 * "error", "attempts", "job_id") and is acknowledged: returns 1. Otherwise it
 * stays pending, to be retried after claim_idle_s: returns 0. CHOIR_EIO on a
 * Redis failure. */
int choir_jobqueue_fail(choir_jobqueue *q, const choir_jobqueue_job *job, const char *error, choir_err *err);

/* Fills *out. Returns 0 or CHOIR_EIO. */
int choir_jobqueue_get_progress(choir_jobqueue *q, choir_jobqueue_progress *out, choir_err *err);

/* Calls `fn` for up to `max` dead-lettered jobs, oldest first, with the
 * entry's fields (pointers valid during the call). Returns the number listed
 * or CHOIR_EIO. */
typedef void (*choir_jobqueue_dead_fn)(void *user, const char *entry_id, const choir_jobspec *spec,
                                       const char *error, int attempts);
int choir_jobqueue_list_dead(choir_jobqueue *q, int max, choir_jobqueue_dead_fn fn, void *user, choir_err *err);

/* Keeps a job that is still running from being claimed by others: resets
 * its idle time in the pending list (XCLAIM ... JUSTID, which does not count
 * a delivery). Call it more often than claim_idle_s while a job runs.
 * Returns 1 while the job is still pending for this group, 0 when it is not
 * (already acknowledged: finished elsewhere or dead-lettered), or CHOIR_EIO. */
int choir_jobqueue_touch(choir_jobqueue *q, const choir_jobqueue_job *job, choir_err *err);

/* Called every `interval_s` seconds while choir_jobqueue_execute waits for
 * the engine (from the calling thread). */
typedef struct choir_jobqueue_heartbeat {
    void (*fn)(void *user);
    void *user;
    double interval_s;
} choir_jobqueue_heartbeat;

/* Runs one job on `engine` (which has the model registered) and writes its
 * result durably to spec->output (temporary file, fsync, rename, fsync of the
 * directory), creating no directories. vad/stt write JSON
 * ({"task", "input", "segments": [{"start", "end"[, "text"]}], ["text", "language"]}),
 * tts/sts write audio in the format named by the output's extension (wav, flac,
 * mp3, opus, ...). Returns 0, or the job's error code with err: the input
 * cannot be read or decoded, the engine refused or failed it, or the output
 * cannot be written. `heartbeat` may be NULL. */
int choir_jobqueue_execute(choir_engine *engine, const choir_jobspec *spec, const choir_jobqueue_heartbeat *heartbeat,
                           choir_err *err);

/* Writes `len` bytes to `path` durably and atomically: a temporary file in
 * the same directory, fsync, rename over `path`, fsync of the directory.
 * Returns 0 or CHOIR_EIO. */
int choir_jobqueue_write_file(const char *path, const void *data, size_t len, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
