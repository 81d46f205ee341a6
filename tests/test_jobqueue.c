/* Tests of the Redis job queue (include/choir/jobqueue.h) against a real
 * redis-server started on a free port of 127.0.0.1 for this program: exactly
 * once acknowledgement, reclaiming a stalled consumer's job, retries and the
 * dead-letter stream, validation, durable writes and execute's error paths. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "choir/engine.h"
#include "choir/jobqueue.h"
#include "testutil.h"

extern char **environ;

static pid_t redis_pid;
static int redis_port;
static char redis_url[64];

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &n)) return -1;
    close(fd);
    return ntohs(a.sin_port);
}

static int start_redis(void **state) {
    (void)state;
    int port = free_port();
    if (port <= 0) return -1;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    char *argv[] = {"redis-server", "--port", port_s, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--dir", (char *)tu_tmpdir(), "--logfile", "", NULL};
    if (posix_spawnp(&redis_pid, "redis-server", NULL, NULL, argv, environ) != 0) {
        fprintf(stderr, "test_jobqueue: cannot start redis-server (scripts/setup.sh installs it)\n");
        return -1;
    }
    redis_port = port;
    snprintf(redis_url, sizeof redis_url, "redis://127.0.0.1:%d", port);
    choir_jobqueue_params p = choir_jobqueue_default_params();
    p.url = redis_url;
    p.stream = "probe";
    for (int i = 0; i < 100; i++) {
        choir_err err = {0};
        choir_jobqueue *q = choir_jobqueue_connect(&p, &err);
        if (q) {
            choir_jobqueue_free(q);
            return 0;
        }
        sleep_s(0.05);
    }
    return -1;
}

static int stop_redis(void **state) {
    (void)state;
    if (redis_pid > 0) {
        kill(redis_pid, SIGKILL);
        waitpid(redis_pid, NULL, 0);
    }
    return 0;
}

static choir_jobqueue *open_queue(const char *stream, const char *consumer, double claim_s, int attempts) {
    choir_jobqueue_params p = choir_jobqueue_default_params();
    p.url = redis_url;
    p.stream = stream;
    p.consumer = consumer;
    p.claim_idle_s = claim_s;
    p.max_attempts = attempts;
    choir_err err = {0};
    choir_jobqueue *q = choir_jobqueue_connect(&p, &err);
    if (!q) fail_msg("connect: %s", err.msg);
    return q;
}

static choir_jobspec make_spec(const char *task, const char *input, const char *output) {
    choir_jobspec s;
    memset(&s, 0, sizeof s);
    snprintf(s.task, sizeof s.task, "%s", task);
    snprintf(s.input, sizeof s.input, "%s", input);
    snprintf(s.output, sizeof s.output, "%s", output);
    return s;
}

static choir_jobqueue_progress progress_of(choir_jobqueue *q) {
    choir_jobqueue_progress p;
    choir_err err = {0};
    assert_int_equal(choir_jobqueue_get_progress(q, &p, &err), 0);
    return p;
}

static void test_connect_errors(void **state) {
    (void)state;
    choir_jobqueue_params p = choir_jobqueue_default_params();
    choir_err err = {0};
    p.url = redis_url;
    assert_null(choir_jobqueue_connect(&p, &err)); /* no stream */
    assert_int_equal(err.code, CHOIR_EINVAL);
    p.stream = "s";
    const char *bad[] = {"redis://:pw@", "redis://host:99999", "redis://host:12x", "redis://host:1/db"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        p.url = bad[i];
        assert_null(choir_jobqueue_connect(&p, &err));
        assert_int_equal(err.code, CHOIR_EINVAL);
    }
    p.url = "redis://127.0.0.1:1";
    assert_null(choir_jobqueue_connect(&p, &err));
    assert_int_equal(err.code, CHOIR_EIO);
    assert_non_null(strstr(err.msg, "127.0.0.1:1"));
    choir_jobqueue_free(NULL);
}

static void test_submit_validation(void **state) {
    (void)state;
    choir_jobqueue *q = open_queue("validation", "c", 60, 3);
    choir_err err = {0};
    choir_jobspec s = make_spec("nope", "/in.wav", "/out.json");
    assert_int_equal(choir_jobqueue_submit(q, &s, NULL, 0, &err), CHOIR_EINVAL);
    s = make_spec("vad", "/in.wav", "");
    assert_int_equal(choir_jobqueue_submit(q, &s, NULL, 0, &err), CHOIR_EINVAL);
    s = make_spec("vad", "/in.wav", "/out.json");
    snprintf(s.options, sizeof s.options, "[1, 2]");
    assert_int_equal(choir_jobqueue_submit(q, &s, NULL, 0, &err), CHOIR_EINVAL);
    snprintf(s.options, sizeof s.options, "{\"threshold\": 0.4}");
    char id[64] = "";
    assert_int_equal(choir_jobqueue_submit(q, &s, id, sizeof id, &err), 0);
    assert_non_null(strchr(id, '-'));
    choir_jobqueue_progress p = progress_of(q);
    assert_int_equal(p.submitted, 1);
    assert_int_equal(p.queued, 1);
    /* What was submitted is what a consumer gets. */
    choir_jobqueue_job job;
    assert_int_equal(choir_jobqueue_take(q, 0.1, &job, &err), 1);
    assert_string_equal(job.id, id);
    assert_string_equal(job.spec.task, "vad");
    assert_string_equal(job.spec.output, "/out.json");
    assert_string_equal(job.spec.options, "{\"threshold\": 0.4}");
    assert_int_equal(job.attempt, 1);
    assert_int_equal(job.reclaimed, 0);
    choir_jobqueue_free(q);
}

static void test_complete_counts_once(void **state) {
    (void)state;
    choir_jobqueue *q = open_queue("once", "a", 60, 3);
    choir_err err = {0};
    for (int i = 0; i < 3; i++) {
        choir_jobspec s = make_spec("vad", "/in.wav", "/out.json");
        assert_int_equal(choir_jobqueue_submit(q, &s, NULL, 0, &err), 0);
    }
    choir_jobqueue_job job;
    assert_int_equal(choir_jobqueue_take(q, 0.1, &job, &err), 1);
    assert_int_equal(progress_of(q).pending, 1);
    assert_int_equal(choir_jobqueue_complete(q, &job, &err), 1);
    assert_int_equal(choir_jobqueue_complete(q, &job, &err), 0);
    choir_jobqueue_progress p = progress_of(q);
    assert_int_equal(p.done, 1);
    assert_int_equal(p.pending, 0);
    assert_int_equal(p.queued, 2);
    /* Nothing else is pending, and new jobs come in order. */
    choir_jobqueue_job next;
    assert_int_equal(choir_jobqueue_take(q, 0.1, &next, &err), 1);
    assert_true(strcmp(next.id, job.id) > 0 || strlen(next.id) > strlen(job.id));
    choir_jobqueue_free(q);
}

static void test_reclaim_stalled(void **state) {
    (void)state;
    /* Claim time 1 s: wide enough that a loaded machine (sanitizers, parallel
     * tests) does not make the "not yet" checks below race it. */
    choir_jobqueue *a = open_queue("reclaim", "a", 1.0, 3);
    choir_jobqueue *b = open_queue("reclaim", "b", 1.0, 3);
    choir_err err = {0};
    choir_jobspec s = make_spec("vad", "/in.wav", "/out.json");
    assert_int_equal(choir_jobqueue_submit(a, &s, NULL, 0, &err), 0);
    choir_jobqueue_job ja, jb;
    assert_int_equal(choir_jobqueue_take(a, 0.1, &ja, &err), 1);
    /* Not idle long enough yet: b gets nothing. */
    assert_int_equal(choir_jobqueue_take(b, 0.05, &jb, &err), 0);
    /* A keeps it alive past the claim time by touching it. */
    for (int i = 0; i < 4; i++) {
        sleep_s(0.3);
        assert_int_equal(choir_jobqueue_touch(a, &ja, &err), 1);
    }
    assert_int_equal(choir_jobqueue_take(b, 0.05, &jb, &err), 0);
    sleep_s(1.1);
    assert_int_equal(choir_jobqueue_take(b, 0.1, &jb, &err), 1);
    assert_string_equal(jb.id, ja.id);
    assert_int_equal(jb.reclaimed, 1);
    assert_int_equal(jb.attempt, 2);
    /* Both finish: the job counts once, whoever acknowledges first. */
    assert_int_equal(choir_jobqueue_complete(b, &jb, &err), 1);
    assert_int_equal(choir_jobqueue_complete(a, &ja, &err), 0);
    assert_int_equal(choir_jobqueue_touch(a, &ja, &err), 0); /* no longer pending */
    choir_jobqueue_progress p = progress_of(a);
    assert_int_equal(p.done, 1);
    assert_int_equal(p.pending, 0);
    assert_int_equal(p.consumers, 2);
    choir_jobqueue_free(a);
    choir_jobqueue_free(b);
}

typedef struct dead_seen {
    int n;
    char error[CHOIR_ERR_MSG_MAX];
    char input[64];
    int attempts;
} dead_seen;

static void on_dead(void *user, const char *id, const choir_jobspec *spec, const char *error, int attempts) {
    dead_seen *d = user;
    (void)id;
    d->n++;
    snprintf(d->error, sizeof d->error, "%s", error);
    snprintf(d->input, sizeof d->input, "%s", spec->input);
    d->attempts = attempts;
}

static void test_retry_then_dead_letter(void **state) {
    (void)state;
    choir_jobqueue *q = open_queue("retry", "a", 0.1, 2);
    choir_err err = {0};
    choir_jobspec s = make_spec("stt", "/bad.wav", "/bad.json");
    assert_int_equal(choir_jobqueue_submit(q, &s, NULL, 0, &err), 0);
    choir_jobqueue_job job;
    assert_int_equal(choir_jobqueue_take(q, 0.1, &job, &err), 1);
    assert_int_equal(choir_jobqueue_fail(q, &job, "first failure", &err), 0);
    assert_int_equal(progress_of(q).pending, 1);
    sleep_s(0.2);
    assert_int_equal(choir_jobqueue_take(q, 0.1, &job, &err), 1);
    assert_int_equal(job.attempt, 2);
    assert_string_equal(job.last_error, "first failure");
    assert_int_equal(choir_jobqueue_fail(q, &job, "second failure", &err), 1);
    choir_jobqueue_progress p = progress_of(q);
    assert_int_equal(p.dead, 1);
    assert_int_equal(p.pending, 0);
    assert_int_equal(p.done, 0);
    dead_seen d = {0};
    assert_int_equal(choir_jobqueue_list_dead(q, 10, on_dead, &d, &err), 1);
    assert_string_equal(d.error, "second failure");
    assert_string_equal(d.input, "/bad.wav");
    assert_int_equal(d.attempts, 2);
    sleep_s(0.2);
    assert_int_equal(choir_jobqueue_take(q, 0.05, &job, &err), 0);
    choir_jobqueue_free(q);
}

/* A job whose workers keep dying (never failing it) is dead-lettered when it
 * would be delivered once more than max_attempts. */
static void test_poison_job(void **state) {
    (void)state;
    choir_jobqueue *q = open_queue("poison", "a", 0.1, 2);
    choir_err err = {0};
    choir_jobspec s = make_spec("vad", "/crash.wav", "/crash.json");
    assert_int_equal(choir_jobqueue_submit(q, &s, NULL, 0, &err), 0);
    choir_jobqueue_job job;
    for (int attempt = 1; attempt <= 2; attempt++) {
        assert_int_equal(choir_jobqueue_take(q, 0.1, &job, &err), 1);
        assert_int_equal(job.attempt, attempt);
        sleep_s(0.2);
    }
    assert_int_equal(choir_jobqueue_take(q, 0.05, &job, &err), 0);
    dead_seen d = {0};
    assert_int_equal(choir_jobqueue_list_dead(q, 10, on_dead, &d, &err), 1);
    assert_non_null(strstr(d.error, "workers stopped"));
    assert_int_equal(progress_of(q).dead, 1);
    choir_jobqueue_free(q);
}

/* The stream (and with it the group) vanishes under a running consumer, as
 * after a Redis restart without persistence: the consumer reports the error
 * once, recreates them, and takes new jobs again. */
static void test_group_recreated(void **state) {
    (void)state;
    choir_jobqueue *q = open_queue("vanish", "a", 60, 3);
    choir_err err = {0};
    char cmd[128], *out = NULL;
    snprintf(cmd, sizeof cmd, "redis-cli -p %d DEL vanish", redis_port);
    assert_int_equal(tu_run(cmd, &out), 0);
    free(out);
    choir_jobqueue_job job;
    assert_int_equal(choir_jobqueue_take(q, 0.05, &job, &err), CHOIR_EIO);
    assert_non_null(strstr(err.msg, "NOGROUP"));
    assert_int_equal(choir_jobqueue_take(q, 0.05, &job, &err), 0);
    choir_jobspec s = make_spec("vad", "/in.wav", "/out.json");
    assert_int_equal(choir_jobqueue_submit(q, &s, NULL, 0, &err), 0);
    assert_int_equal(choir_jobqueue_take(q, 0.1, &job, &err), 1);
    choir_jobqueue_free(q);
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void test_write_file(void **state) {
    (void)state;
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/w", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/r.json", dir);
    choir_err err = {0};
    assert_int_equal(choir_jobqueue_write_file(path, "first", 5, &err), 0);
    assert_int_equal(choir_jobqueue_write_file(path, "second!", 7, &err), 0);
    size_t len = 0;
    char *got = tu_read_file(path, &len);
    assert_non_null(got);
    assert_int_equal(len, 7);
    assert_memory_equal(got, "second!", 7);
    free(got);
    assert_int_equal(count_entries(dir), 1); /* no temporary left behind */
    snprintf(path, sizeof path, "%s/missing/r.json", dir);
    assert_int_equal(choir_jobqueue_write_file(path, "x", 1, &err), CHOIR_EIO);
    assert_non_null(strstr(err.msg, "missing"));
}

static void test_execute_errors(void **state) {
    (void)state;
    choir_err err = {0};
    choir_engine *e = choir_engine_create(NULL, &err);
    assert_non_null(e);
    char out[1100];
    snprintf(out, sizeof out, "%s/exec.json", tu_tmpdir());
    choir_jobspec s = make_spec("vad", "/nonexistent/in.wav", out);
    assert_int_equal(choir_jobqueue_execute(e, &s, NULL, &err), CHOIR_ENOTFOUND);
    /* Decodable input, but no model serves the task. */
    s = make_spec("vad", tu_fixture("audio/hello16k.wav"), out);
    assert_int_equal(choir_jobqueue_execute(e, &s, NULL, &err), CHOIR_ENOTFOUND);
    s = make_spec("tts", tu_fixture("audio/hello16k.wav"), out);
    assert_int_equal(choir_jobqueue_execute(e, &s, NULL, &err), CHOIR_EINVAL); /* .json is no audio format */
    s = make_spec("vad", tu_fixture("audio/hello16k.wav"), out);
    snprintf(s.options, sizeof s.options, "{bad");
    assert_true(choir_jobqueue_execute(e, &s, NULL, &err) < 0);
    struct stat st;
    assert_int_equal(stat(out, &st), -1); /* a failed job writes nothing */
    choir_engine_free(e);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connect_errors),      cmocka_unit_test(test_submit_validation),
        cmocka_unit_test(test_complete_counts_once), cmocka_unit_test(test_reclaim_stalled),
        cmocka_unit_test(test_retry_then_dead_letter), cmocka_unit_test(test_poison_job),
        cmocka_unit_test(test_group_recreated),     cmocka_unit_test(test_write_file),
        cmocka_unit_test(test_execute_errors),
    };
    return cmocka_run_group_tests(tests, start_redis, stop_redis);
}
