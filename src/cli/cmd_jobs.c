/* `choir jobs`: progress of a job stream, its dead letters, and waiting for
 * it to drain. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "choir/jobqueue.h"
#include "cli/cli.h"
#include "cli/opt.h"

static void print_dead(void *user, const char *id, const choir_jobspec *spec, const char *error, int attempts) {
    (void)user;
    printf("dead %s %s %s: %s (%d attempts)\n", id, spec->task, spec->input, error, attempts);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int choir_cmd_jobs(int argc, char **argv) {
    choir_jobqueue_params qp = choir_jobqueue_default_params();
    int json = 0, wait = 0, dead_max = 0;
    double timeout_s = 0;
    const cli_opt flags[] = {
        {"--redis", CLI_STRING, &qp.url, 0, 0, "URL", "redis://[:password@]host[:port][/db] (default redis://127.0.0.1:6379)"},
        {"--stream", CLI_STRING, &qp.stream, 0, 0, "NAME", "the jobs stream (required)"},
        {"--group", CLI_STRING, &qp.group, 0, 0, "G", "consumer group (default choir)"},
        {"--json", CLI_FLAG, &json, 0, 0, NULL, "one JSON object instead of text"},
        {"--dead", CLI_INT, &dead_max, 0, 1000000, "N", "also list up to N dead-lettered jobs with their errors"},
        {"--wait", CLI_FLAG, &wait, 0, 0, NULL,
         "wait until every submitted job is done or dead (exit 0), or\nuntil --timeout S passes (exit 1)"},
        {"--timeout", CLI_DOUBLE, &timeout_s, 0, 1e9, "S", "how long --wait waits (default: no limit)"},
    };
    const cli_spec spec = {
        .cmd = "jobs",
        .synopsis = "usage: choir jobs --redis URL --stream NAME [--group G] [--json] [--dead N]\n"
                    "                  [--wait] [--timeout S]\n"
                    "\n"
                    "Shows how many jobs were submitted, are done, dead-lettered, pending (taken by\n"
                    "a worker, not yet acknowledged) and queued (not yet taken).\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!qp.stream) {
        fprintf(stderr, "choir jobs: --stream NAME is required\n");
        cli_usage(&spec, stderr);
        return 2;
    }
    choir_err err = {0};
    choir_jobqueue_progress p;
    int status = 1;
    double t0 = now_s();
    choir_jobqueue *q = choir_jobqueue_connect(&qp, &err);
    if (!q) goto fail;
    for (;;) {
        if (choir_jobqueue_get_progress(q, &p, &err)) goto fail;
        int drained = p.done + p.dead >= p.submitted;
        if (!wait || drained) {
            status = wait && !drained ? 1 : 0;
            break;
        }
        if (timeout_s > 0 && now_s() - t0 > timeout_s) {
            fprintf(stderr, "choir jobs: not drained after %.0f s\n", timeout_s);
            break;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (json)
        printf("{\"submitted\": %lld, \"done\": %lld, \"dead\": %lld, \"pending\": %lld, \"queued\": %lld, "
               "\"consumers\": %lld}\n",
               (long long)p.submitted, (long long)p.done, (long long)p.dead, (long long)p.pending,
               (long long)p.queued, (long long)p.consumers);
    else
        printf("submitted %lld  done %lld  dead %lld  pending %lld  queued %lld  (%lld consumers)\n",
               (long long)p.submitted, (long long)p.done, (long long)p.dead, (long long)p.pending,
               (long long)p.queued, (long long)p.consumers);
    if (dead_max > 0 && choir_jobqueue_list_dead(q, dead_max, print_dead, NULL, &err) < 0) goto fail;
    goto done;
fail:
    fprintf(stderr, "choir jobs: %s\n", err.msg[0] ? err.msg : choir_strerror(err.code));
    status = 1;
done:
    choir_jobqueue_free(q);
    return status;
}
