/* `choir worker`: runs jobs from a Redis Stream on a local engine until told
 * to stop (SIGTERM / SIGINT: the job in hand is finished first). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/engine.h"
#include "choir/jobqueue.h"
#include "choir/log.h"
#include "cli/cli.h"
#include "cli/opt.h"

#define MAX_MODELS 16

/* Set from the signal handler, read by every slot's thread. */
static atomic_int stop_requested;

static void on_signal(int sig) {
    (void)sig;
    atomic_store(&stop_requested, 1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char worker_synopsis[] =
    "usage: choir worker --redis URL --stream NAME --model [ID=]DIR [--model ...]\n"
    "                    [--group G] [--consumer NAME] [--claim-after S] [--max-attempts N]\n"
    "                    [--concurrency N] [--exit-when-idle S] [engine options]\n"
    "\n"
    "Consumes jobs (task, input, output, model, options) from the Redis Stream NAME\n"
    "through consumer group G and runs them on the models given. A result is written\n"
    "durably (temporary file, fsync, rename) before the job is acknowledged. Jobs a\n"
    "dead worker left pending longer than --claim-after are taken over; a job\n"
    "delivered --max-attempts times goes to NAME:dead with its error. While a job\n"
    "runs, the worker refreshes it every third of --claim-after so that a slow job\n"
    "is not taken over.\n"
    "\n";

typedef struct worker_counts {
    long done, duplicate, failed, dead, reclaimed;
} worker_counts;

typedef struct heartbeat_ctx {
    choir_jobqueue *q;
    const choir_jobqueue_job *job;
} heartbeat_ctx;

/* While a long job runs, keep it ours so no other worker starts it again. */
static void keep_job(void *user) {
    heartbeat_ctx *h = user;
    choir_err err = {0};
    if (choir_jobqueue_touch(h->q, h->job, &err) < 0)
        CHOIR_LOGW("worker: cannot refresh job %s: %s", h->job->id, err.msg);
}

static void run_job(choir_engine *engine, choir_jobqueue *q, const choir_jobqueue_job *job, double claim_idle_s,
                    worker_counts *c) {
    choir_err err = {0};
    heartbeat_ctx hc = {q, job};
    choir_jobqueue_heartbeat hb = {keep_job, &hc, claim_idle_s / 3};
    double t0 = now_s();
    if (job->reclaimed) {
        c->reclaimed++;
        CHOIR_LOGI("worker: reclaimed job %s (attempt %d)%s%s", job->id, job->attempt,
                   job->last_error[0] ? ", last error: " : "", job->last_error);
    }
    int rc = choir_jobqueue_execute(engine, &job->spec, &hb, &err);
    if (rc == 0) {
        int acked = choir_jobqueue_complete(q, job, &err);
        if (acked < 0) {
            /* The result is on disk; the job stays pending and whoever claims
             * it rewrites the same file. */
            CHOIR_LOGW("worker: job %s written but not acknowledged: %s", job->id, err.msg);
        } else if (acked == 0) {
            c->duplicate++;
            CHOIR_LOGI("worker: job %s was already completed by another worker", job->id);
        } else {
            c->done++;
            CHOIR_LOGI("worker: job %s done (%s %s -> %s, attempt %d, %.0f ms)", job->id, job->spec.task,
                       job->spec.input, job->spec.output, job->attempt, (now_s() - t0) * 1e3);
        }
        return;
    }
    c->failed++;
    char why[CHOIR_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", err.msg[0] ? err.msg : choir_strerror(rc));
    CHOIR_LOGW("worker: job %s attempt %d failed: %s", job->id, job->attempt, why);
    int dead = choir_jobqueue_fail(q, job, why, &err);
    if (dead < 0) CHOIR_LOGW("worker: cannot record the failure of job %s: %s", job->id, err.msg);
    if (dead == 1) c->dead++;
}


/* One consumer: its own Redis connection and job loop, on its own thread
 * when --concurrency is above 1; all slots share the engine. */
typedef struct worker_slot {
    choir_engine *engine;
    choir_jobqueue_params qp;
    char consumer[192];
    double idle_exit_s;
    long crash_after;
    atomic_long *taken;
    worker_counts counts;
    int status;
    choir_err err;
    pthread_t thread;
} worker_slot;

static void *slot_main(void *arg) {
    worker_slot *w = arg;
    w->qp.consumer = w->consumer;
    choir_jobqueue *q = choir_jobqueue_connect(&w->qp, &w->err);
    if (!q) {
        w->status = 1;
        return NULL;
    }
    double claim_s = w->qp.claim_idle_s > 0 ? w->qp.claim_idle_s : 60;
    double idle_since = now_s(), retry_s = 0.1;
    while (!atomic_load(&stop_requested)) {
        choir_jobqueue_job job;
        choir_err err = {0};
        int got = choir_jobqueue_take(q, 1.0, &job, &err);
        if (got < 0) {
            /* Redis went away: keep trying, with a growing pause, so a
             * restarted Redis finds its workers back. */
            CHOIR_LOGW("worker %s: %s (retrying in %.1f s)", w->consumer, err.msg, retry_s);
            struct timespec ts = {(time_t)retry_s, (long)((retry_s - (double)(time_t)retry_s) * 1e9)};
            nanosleep(&ts, NULL);
            retry_s = retry_s * 2 < 5 ? retry_s * 2 : 5;
            continue;
        }
        retry_s = 0.1;
        if (got == 0) {
            if (w->idle_exit_s > 0 && now_s() - idle_since >= w->idle_exit_s) break;
            continue;
        }
        if (w->crash_after > 0 && atomic_fetch_add(w->taken, 1) + 1 == w->crash_after) {
            CHOIR_LOGW("worker: --crash-after %ld: dying with job %s in hand", w->crash_after, job.id);
            raise(SIGKILL);
        }
        run_job(w->engine, q, &job, claim_s, &w->counts);
        idle_since = now_s();
    }
    choir_jobqueue_free(q);
    return NULL;
}

int choir_cmd_worker(int argc, char **argv) {
    choir_jobqueue_params qp = choir_jobqueue_default_params();
    choir_engine_params ep = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    /* 0: not given (--wait-ms, --wait-long-ms and --profile set them above 0);
     * the engine reads a 0 as the profile's value. */
    ep.wait_short_ms = ep.wait_long_ms = 0;
    int concurrency = 1;
    const char *model_args[MAX_MODELS];
    int n_models = 0;
    double idle_exit_s = 0;
    long crash_after = 0;
    choir_err err = {0};
    int crash_at = 0;
    cli_list models = {model_args, MAX_MODELS, 0};
    const cli_opt flags[] = {
        {"--redis", CLI_STRING, &qp.url, 0, 0, "URL", "redis://[:password@]host[:port][/db] (redis://127.0.0.1:6379)"},
        {"--stream", CLI_STRING, &qp.stream, 0, 0, "NAME", "the jobs stream (required)"},
        {"--group", CLI_STRING, &qp.group, 0, 0, "G", "consumer group (choir)"},
        {"--consumer", CLI_STRING, &qp.consumer, 0, 0, "NAME", "this worker's name, unique per worker (host-pid)"},
        {"--model", CLI_LIST, &models, 0, 0, "[ID=]DIR", "a model directory; ID defaults to the directory's name\n(repeatable)"},
        {"--claim-after", CLI_DOUBLE, &qp.claim_idle_s, 0, 1e9, "S", "take over jobs pending this long (60)"},
        {"--max-attempts", CLI_INT, &qp.max_attempts, 1, 1e9, "N", "deliveries before dead-lettering (3)"},
        {"--concurrency", CLI_INT, &concurrency, 1, 256, "N",
         "jobs run at once, each slot its own consumer NAME.k sharing\none engine, which batches them (1)"},
        {"--exit-when-idle", CLI_DOUBLE, &idle_exit_s, 0, 1e9, "S", "exit after S seconds with no job (default: run until stopped)"},
        {"--crash-after", CLI_INT, &crash_at, 0, 1e9, "N",
         "fault injection for tests: die by SIGKILL after taking the\nN-th job, before its result is written"},
    };
    const cli_spec spec = {
        .cmd = "worker",
        .synopsis = worker_synopsis,
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
        .engine = &ep,
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    n_models = models.n;
    crash_after = crash_at;
    int wait_given = ep.wait_short_ms > 0 || ep.wait_long_ms > 0;
    /* With one job in flight there is nothing to batch with, so waiting to
     * fill a batch would only add latency. */
    if (concurrency == 1 && !wait_given) ep.wait_short_ms = ep.wait_long_ms = 1;
    if (!qp.stream || n_models == 0) {
        fprintf(stderr, "choir worker: --stream and at least one --model are required\n");
        cli_usage(&spec, stderr);
        return 2;
    }

    int status = 1;
    choir_engine *engine = NULL;
    worker_slot *slots = NULL;
    atomic_long taken = 0;
    int started = 0;
    engine = choir_engine_create(&ep, &err);
    if (!engine) goto fail;
    for (int m = 0; m < n_models; m++) {
        char id[256];
        const char *eq = strchr(model_args[m], '=');
        const char *dir = eq ? eq + 1 : model_args[m];
        if (eq) {
            snprintf(id, sizeof id, "%.*s", (int)(eq - model_args[m]), model_args[m]);
        } else {
            size_t n = strlen(dir);
            while (n > 1 && dir[n - 1] == '/') n--;
            const char *base = dir;
            for (size_t k = 0; k < n; k++)
                if (dir[k] == '/') base = dir + k + 1;
            snprintf(id, sizeof id, "%.*s", (int)(n - (size_t)(base - dir)), base);
        }
        if (choir_engine_add_model(engine, id, dir, NULL, &err)) goto fail;
    }
    slots = choir_calloc(CHOIR_MEM_OTHER, (size_t)concurrency, sizeof *slots);
    if (!slots) {
        choir_err_set(&err, CHOIR_ENOMEM, "out of memory");
        goto fail;
    }
    char base[128];
    if (qp.consumer) {
        snprintf(base, sizeof base, "%s", qp.consumer);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(base, sizeof base, "%s-%ld", host, (long)getpid());
    }
    for (int k = 0; k < concurrency; k++) {
        worker_slot *w = &slots[k];
        w->engine = engine;
        w->qp = qp;
        w->idle_exit_s = idle_exit_s;
        w->crash_after = crash_after;
        w->taken = &taken;
        if (concurrency == 1) snprintf(w->consumer, sizeof w->consumer, "%s", base);
        else snprintf(w->consumer, sizeof w->consumer, "%s.%d", base, k);
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    CHOIR_LOGI("worker: consuming %s (group %s, %d at once)", qp.stream, qp.group ? qp.group : "choir", concurrency);
    if (concurrency == 1) {
        slot_main(&slots[0]);
        started = 1;
    } else {
        for (; started < concurrency; started++)
            if (pthread_create(&slots[started].thread, NULL, slot_main, &slots[started]) != 0) {
                choir_err_set(&err, CHOIR_ENOMEM, "cannot start thread %d", started);
                atomic_store(&stop_requested, 1);
                break;
            }
        for (int k = 0; k < started; k++) pthread_join(slots[k].thread, NULL);
        if (started < concurrency) goto fail;
    }
    status = 0;
    for (int k = 0; k < started; k++) {
        if (slots[k].status) {
            err = slots[k].err;
            goto fail;
        }
    }
    goto done;
fail:
    status = 1;
    fprintf(stderr, "choir worker: %s\n", err.msg[0] ? err.msg : choir_strerror(err.code));
done:;
    worker_counts total = {0};
    for (int k = 0; slots && k < started; k++) {
        total.done += slots[k].counts.done;
        total.duplicate += slots[k].counts.duplicate;
        total.failed += slots[k].counts.failed;
        total.dead += slots[k].counts.dead;
        total.reclaimed += slots[k].counts.reclaimed;
    }
    if (started > 0)
        CHOIR_LOGI("worker: %ld done, %ld already done elsewhere, %ld failed attempts, %ld dead-lettered, %ld reclaimed",
                   total.done, total.duplicate, total.failed, total.dead, total.reclaimed);
    choir_free(slots);
    choir_engine_free(engine);
    return status;
}
