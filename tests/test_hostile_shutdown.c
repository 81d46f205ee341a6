// ctest: labels=server timeout=120
/* SIGTERM with --shutdown-deadline: the process is gone within the deadline
 * whatever its clients do (idle keep-alive connections, a request that would
 * run far longer, an upload trickling in), and the log says requests were cut
 * short exactly when some were, with their number. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "httpc.h"
#include "testutil.h"

static char g_models[1024];

static void start(hc_server *s, const char *name, double deadline)
{
    char args[2048];
    snprintf(args, sizeof args, "--models '%s' --shutdown-deadline %g", g_models, deadline);
    assert_int_equal(hc_server_start(s, name, args), 0);
}

/* Sends SIGTERM and returns the seconds until the process exited; checks exit 0. */
static double term(hc_server *s, double deadline)
{
    double t0 = hc_now();
    int st = hc_server_stop(s, SIGTERM, deadline + 10);
    double took = hc_now() - t0;
    assert_int_equal(st, 0);
    return took;
}

static int log_contains(const hc_server *s, const char *needle)
{
    char *log = hc_server_log(s);
    int yes = log && strstr(log, needle) != NULL;
    free(log);
    return yes;
}

static int log_has(const hc_server *s, const char *needle)
{
    int yes = log_contains(s, needle);
    if (!yes) {
        char *log = hc_server_log(s);
        fprintf(stderr, "log lacks \"%s\":\n%s\n", needle, log ? log : "");
        free(log);
    }
    return yes;
}

static void test_idle_connections_do_not_hold_it(void **state)
{
    (void)state;
    hc_server s;
    start(&s, "idle", 5);
    /* a keep-alive connection after one request, and one that never spoke */
    int ka = hc_connect(NULL, s.port), mute = hc_connect(NULL, s.port);
    const char *get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    hc_response r;
    assert_int_equal(hc_send(ka, get, strlen(get)), 0);
    assert_int_equal(hc_read_response(ka, &r, 5), 200);
    assert_false(r.closed);
    hc_response_free(&r);
    double took = term(&s, 5);
    print_message("idle connections: exited %.2f s after SIGTERM (deadline 5 s)\n", took);
    assert_true(took < 5);
    assert_true(log_has(&s, "stopped cleanly"));
    assert_false(log_contains(&s, "cut short"));
    close(ka);
    close(mute);
}

static void test_long_request_is_cut_at_the_deadline(void **state)
{
    (void)state;
    hc_server s;
    start(&s, "long", 2);
    /* 20 s of work; the deadline is 2 s. Unstreamed, so the client is still
     * waiting for its status when the cut comes (a stream has its 200). */
    const char *body =
        "{\"model\":\"slow\",\"input\":\"a long one\",\"response_format\":\"pcm\",\"stream\":false}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    int fd = hc_connect(NULL, s.port);
    assert_int_equal(hc_send(fd, req, (size_t)n), 0);
    usleep(300 * 1000);
    double t0 = hc_now();
    kill(s.pid, SIGTERM);
    hc_response r;
    int st = hc_read_response(fd, &r, 5);
    term(&s, 2);
    double took = hc_now() - t0;
    print_message("a 20-s request: exited %.2f s after SIGTERM (deadline 2 s), client saw %d\n", took, st);
    assert_true(took <= 2.5);
    assert_int_equal(st, 503);
    assert_non_null(strstr(r.body, "shut"));
    hc_response_free(&r);
    close(fd);
    assert_true(log_has(&s, "1 request cut short"));
}

static void test_model_deaf_to_cancel(void **state)
{
    (void)state;
    hc_server s;
    start(&s, "deaf", 2);
    /* one 20-s step that never looks at its cancel flag */
    const char *body = "{\"model\":\"deaf\",\"input\":\"a long one\",\"response_format\":\"pcm\"}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    int fd = hc_connect(NULL, s.port);
    assert_int_equal(hc_send(fd, req, (size_t)n), 0);
    usleep(300 * 1000);
    double took = term(&s, 2);
    print_message("a model step deaf to cancellation: exited %.2f s after SIGTERM (deadline 2 s)\n", took);
    assert_true(took <= 2.5);
    assert_true(log_has(&s, "1 request cut short"));
    assert_true(log_has(&s, "exiting without it"));
    close(fd);
}

static void test_trickling_upload_is_cut(void **state)
{
    (void)state;
    hc_server s;
    start(&s, "trickle", 2);
    int fd = hc_connect(NULL, s.port);
    const char *head = "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: 1000\r\n\r\n{\"model\":";
    assert_int_equal(hc_send(fd, head, strlen(head)), 0);
    usleep(300 * 1000);
    double took = term(&s, 2);
    print_message("an upload trickling in: exited %.2f s after SIGTERM (deadline 2 s)\n", took);
    assert_true(took <= 2.5);
    assert_true(log_has(&s, "1 request cut short"));
    close(fd);
}

static void test_finished_work_is_not_called_cut(void **state)
{
    (void)state;
    hc_server s;
    start(&s, "done", 5);
    /* 1.2 s of work that ends well inside the 5-s deadline */
    const char *body = "{\"model\":\"medium\",\"input\":\"bye\",\"response_format\":\"pcm\"}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    int fd = hc_connect(NULL, s.port);
    assert_int_equal(hc_send(fd, req, (size_t)n), 0);
    usleep(200 * 1000);
    kill(s.pid, SIGTERM);
    hc_response r;
    assert_int_equal(hc_read_response(fd, &r, 10), 200);
    assert_true(r.body_len > 0);
    hc_response_free(&r);
    close(fd);
    double took = term(&s, 5);
    print_message("finished in-flight work: exited %.2f s after its response\n", took);
    assert_true(took < 3);
    assert_true(log_has(&s, "stopped cleanly"));
    assert_false(log_contains(&s, "cut short"));
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_models, sizeof g_models, "%s", tu_tmpfile("models"));
    hc_fake_model(g_models, "slow", ", \"fixed_ms\": 20000, \"pieces\": 100");
    hc_fake_model(g_models, "deaf", ", \"fixed_ms\": 20000, \"pieces\": 1");
    hc_fake_model(g_models, "medium", ", \"fixed_ms\": 1200, \"pieces\": 4");
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_connections_do_not_hold_it),
        cmocka_unit_test(test_long_request_is_cut_at_the_deadline),
        cmocka_unit_test(test_model_deaf_to_cancel),
        cmocka_unit_test(test_trickling_upload_is_cut),
        cmocka_unit_test(test_finished_work_is_not_called_cut),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
