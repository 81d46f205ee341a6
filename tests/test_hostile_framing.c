// ctest: labels=server timeout=120
/* Request smuggling at `choir serve`'s door: a request whose length is
 * ambiguous (two Content-Length headers, Content-Length beside
 * Transfer-Encoding, Transfer-Encoding on HTTP/1.0) is refused with 400 and
 * the connection is closed, so nothing hidden behind it is ever read as a
 * request; an unknown transfer coding gets 501 at once instead of a hang.
 * Well-framed requests (chunked ones included) still work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "httpc.h"
#include "testutil.h"

static hc_server g_srv;

static const char *speech_body = "{\"model\":\"fake\",\"input\":\"hi\",\"response_format\":\"pcm\"}";

/* Sends raw bytes on one connection; expects one response with `status`,
 * then the connection closed with nothing more answered. */
static void expect_refused(const char *raw, int status, const char *what)
{
    hc_response r;
    int fd = hc_connect(NULL, g_srv.port);
    assert_true(fd >= 0);
    assert_int_equal(hc_send(fd, raw, strlen(raw)), 0);
    int got = hc_read_response(fd, &r, 5);
    if (got != status)
        fprintf(stderr, "%s: status %d, expected %d\n%s\n", what, got, status, r.head);
    assert_int_equal(got, status);
    assert_non_null(strstr(r.body ? r.body : "", "\"error\""));
    if (!r.closed)
        fprintf(stderr, "%s: connection left open\n", what);
    assert_true(r.closed);
    hc_response more;
    assert_int_equal(hc_read_response(fd, &more, 0.3), 0);
    hc_response_free(&more);
    hc_response_free(&r);
    close(fd);
}

static void test_two_content_lengths(void **state)
{
    (void)state;
    char raw[1024];
    /* The first length covers the JSON; the second would swallow the GET.
     * Whichever a front end believes, the two disagree, so: refused. */
    snprintf(raw, sizeof raw,
             "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nContent-Length: 90\r\n\r\n%sGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
             strlen(speech_body), speech_body);
    expect_refused(raw, 400, "two Content-Length");
    /* identical duplicates too: nothing legitimate sends them */
    snprintf(raw, sizeof raw,
             "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(speech_body), strlen(speech_body), speech_body);
    expect_refused(raw, 400, "duplicate Content-Length");
}

static void test_length_and_chunked(void **state)
{
    (void)state;
    char raw[1024];
    snprintf(raw, sizeof raw,
             "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n"
             "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
             strlen(speech_body), speech_body);
    expect_refused(raw, 400, "Content-Length + Transfer-Encoding");
    /* the header names in another case are the same headers */
    snprintf(raw, sizeof raw,
             "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n"
             "0\r\n\r\n");
    expect_refused(raw, 400, "lower-case Content-Length + Transfer-Encoding");
    /* Transfer-Encoding means nothing to HTTP/1.0 (RFC 9112 6.1) */
    snprintf(raw, sizeof raw,
             "POST /v1/audio/speech HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    expect_refused(raw, 400, "Transfer-Encoding on HTTP/1.0");
}

static void test_unknown_coding(void **state)
{
    (void)state;
    const char *codings[] = {"gzip", "chunked, gzip", "gzip, chunked", "identity", "chunked, chunked"};
    for (size_t i = 0; i < sizeof codings / sizeof *codings; i++) {
        char raw[512];
        snprintf(raw, sizeof raw,
                 "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Transfer-Encoding: %s\r\n\r\nabc",
                 codings[i]);
        double t0 = hc_now();
        expect_refused(raw, 501, codings[i]);
        /* answered at once, not when some timeout fires */
        assert_true(hc_now() - t0 < 4);
    }
    /* two Transfer-Encoding headers are as ambiguous as two lengths */
    expect_refused("POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                   400, "two Transfer-Encoding");
}

static void test_good_framing_still_works(void **state)
{
    (void)state;
    hc_response r;
    /* chunked, in two chunks, then a second request on the same connection */
    size_t half = strlen(speech_body) / 2;
    char raw[1024];
    snprintf(raw, sizeof raw,
             "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Transfer-Encoding: Chunked\r\n\r\n%zx\r\n%.*s\r\n%zx\r\n%s\r\n0\r\n\r\n",
             half, (int)half, speech_body, strlen(speech_body) - half, speech_body + half);
    int fd = hc_connect(NULL, g_srv.port);
    assert_int_equal(hc_send(fd, raw, strlen(raw)), 0);
    assert_int_equal(hc_read_response(fd, &r, 10), 200);
    assert_true(r.body_len > 0);
    assert_false(r.closed);
    hc_response_free(&r);
    const char *get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(hc_send(fd, get, strlen(get)), 0);
    assert_int_equal(hc_read_response(fd, &r, 5), 200);
    hc_response_free(&r);
    close(fd);
    assert_int_equal(hc_post(g_srv.port, "/v1/audio/speech", "application/json", speech_body, strlen(speech_body),
                             NULL, &r, 10),
                     200);
    hc_response_free(&r);
}

static int setup(void **state)
{
    (void)state;
    char models[1024], args[1200];
    snprintf(models, sizeof models, "%s", tu_tmpfile("models"));
    hc_fake_model(models, "fake", ", \"fixed_ms\": 2");
    snprintf(args, sizeof args, "--models '%s'", models);
    return hc_server_start(&g_srv, "framing", args);
}

static int teardown(void **state)
{
    (void)state;
    hc_response r;
    int healthy = hc_get(g_srv.port, "/health", &r, 5) == 200;
    hc_response_free(&r);
    int st = hc_server_stop(&g_srv, 15, 10);
    if (!healthy || st != 0) {
        char *log = hc_server_log(&g_srv);
        fprintf(stderr, "server unhealthy (%d) or bad exit %d; log:\n%s\n", healthy, st, log ? log : "");
        free(log);
        return -1;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_content_lengths),
        cmocka_unit_test(test_length_and_chunked),
        cmocka_unit_test(test_unknown_coding),
        cmocka_unit_test(test_good_framing_still_works),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
