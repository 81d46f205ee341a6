// ctest: labels=server timeout=120
/* `choir serve` against a client that probes the server itself: the TTS
 * voice field names no file (only the model's own voices, or mixes of them),
 * no error a client sees carries a path of the server's, and model
 * administration is off unless an admin key enables it, then takes only that
 * key, only JSON, and only directories inside the --models folders. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "httpc.h"
#include "testutil.h"

static hc_server g_srv;
static char g_models[1024];

static int speech(const char *model, const char *voice_json, hc_response *r)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"input\":\"hi\",\"response_format\":\"pcm\",\"voice\":%s}", model,
             voice_json);
    return hc_post(g_srv.port, "/v1/audio/speech", "application/json", body, strlen(body), NULL, r, 20);
}

static void test_voice_is_a_name(void **state)
{
    (void)state;
    /* paths, however spelled, and anything that is not a mix of names */
    const char *refused[] = {"\"/etc/shadow\"", "\"../../../../etc/passwd\"", "\"af_heart+/etc/passwd\"",
                             "\"voices/af_heart\"", "\"./af_heart\"", "\".hidden\"", "\"af_heart(2)+../x\"",
                             "\"C:\\\\x\"", "\"af heart\"", "\"af_heart+\"", "\"af_heart(x)\"", "\"\"", "7"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        hc_response r;
        int st = speech("fake", refused[i], &r);
        if (st != 400)
            fprintf(stderr, "voice %s: %d %s\n", refused[i], st, r.body ? r.body : "");
        assert_int_equal(st, 400);
        assert_non_null(strstr(r.body, "\"param\":\"voice\""));
        hc_response_free(&r);
    }
    const char *accepted[] = {"\"af_heart\"", "\"af_heart(2)+am_adam(1)\"", "\"af_heart,am_adam\"", "null",
                              "\"en-US.v2\""};
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) {
        hc_response r;
        int st = speech("fake", accepted[i], &r);
        if (st != 200)
            fprintf(stderr, "voice %s: %d %s\n", accepted[i], st, r.body ? r.body : "");
        assert_int_equal(st, 200);
        hc_response_free(&r);
    }
}

/* A model that fails to load says so without the server's directories. */
static void test_errors_carry_no_paths(void **state)
{
    (void)state;
    char cfg[1200];
    snprintf(cfg, sizeof cfg, "%s/broken/config.json", g_models);
    assert_int_equal(tu_write_file(cfg, "not json", 8), 0);
    hc_response r;
    int st = speech("broken", "null", &r);
    /* the server's failure, not the client's: 500, saying which model */
    if (st != 500)
        fail_msg("a model failing to load: %d %s", st, r.body ? r.body : "");
    assert_non_null(strstr(r.body, "'broken' could not be loaded"));
    assert_non_null(r.body);
    if (strstr(r.body, g_models) || strstr(r.body, "\"/"))
        fail_msg("a server path reached the client: %s", r.body);
    /* the model is still named, and the file within it */
    assert_non_null(strstr(r.body, "broken/config.json"));
    hc_response_free(&r);
    /* the operator's log has the whole message */
    char *log = hc_server_log(&g_srv);
    assert_non_null(log);
    assert_non_null(strstr(log, cfg));
    free(log);
}

static int get_status(const hc_server *srv, const char *path, const char *auth)
{
    char raw[1024];
    snprintf(raw, sizeof raw, "GET %s HTTP/1.1\r\nHost: x\r\n%s%s%sConnection: close\r\n\r\n", path,
             auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "");
    hc_response r;
    int st = hc_exchange(srv->port, NULL, raw, strlen(raw), &r, 10);
    if (st == 401) {
        char v[256];
        /* RFC 9110 11.6.1: a 401 says which scheme to use */
        assert_non_null(hc_header(&r, "WWW-Authenticate", v, sizeof v));
        assert_non_null(strstr(v, "Bearer"));
    }
    hc_response_free(&r);
    return st;
}

static int post_models(const hc_server *srv, const char *content_type, const char *body, const char *extra,
                       hc_response *r)
{
    return hc_post(srv->port, "/v1/models", content_type, body, strlen(body), extra, r, 10);
}

static int delete_model(const hc_server *srv, const char *id, const char *auth)
{
    char raw[1024];
    snprintf(raw, sizeof raw, "DELETE /v1/models/%s HTTP/1.1\r\nHost: x\r\n%s%s%sConnection: close\r\n\r\n", id,
             auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "");
    hc_response r;
    int st = hc_exchange(srv->port, NULL, raw, strlen(raw), &r, 10);
    hc_response_free(&r);
    return st;
}

/* Without an admin key nothing registers or withdraws a model, and a web
 * page's cross-site text/plain post (which needs no preflight) is refused
 * for its type before anything else. */
static void test_admin_off_by_default(void **state)
{
    (void)state;
    hc_fake_model(g_models, "newcomer", "");
    hc_response r;
    assert_int_equal(post_models(&g_srv, "text/plain", "{\"path\":\"newcomer\"}",
                                 "Origin: http://evil.example\r\n", &r),
                     415);
    hc_response_free(&r);
    assert_int_equal(post_models(&g_srv, "application/json", "{\"path\":\"newcomer\"}", NULL, &r), 403);
    assert_non_null(strstr(r.body, "admin_disabled"));
    hc_response_free(&r);
    assert_int_equal(get_status(&g_srv, "/v1/models/newcomer", NULL), 404);
    assert_int_equal(delete_model(&g_srv, "fake", NULL), 403);
    assert_int_equal(get_status(&g_srv, "/v1/models/fake", NULL), 200);
}

/* With keys: the scheme in any case, each key for its own routes, and only
 * directories inside the --models folders. */
static void test_admin_with_its_own_key(void **state)
{
    (void)state;
    char models[1024], outside[1024], args[1400], link[1200];
    snprintf(models, sizeof models, "%s", tu_tmpfile("keyed"));
    snprintf(outside, sizeof outside, "%s", tu_tmpfile("outside"));
    hc_fake_model(models, "first", "");
    hc_fake_model(outside, "stray", "");
    snprintf(args, sizeof args, "--models '%s' --api-key inference --admin-key admin", models);
    hc_server srv;
    assert_int_equal(hc_server_start(&srv, "keyed", args), 0);
    assert_int_equal(get_status(&srv, "/v1/models", NULL), 401);
    assert_int_equal(get_status(&srv, "/v1/models", "Bearer inference"), 200);
    assert_int_equal(get_status(&srv, "/v1/models", "bearer inference"), 200);
    assert_int_equal(get_status(&srv, "/v1/models", "BEARER   inference"), 200);
    assert_int_equal(get_status(&srv, "/v1/models", "Basic inference"), 401);
    assert_int_equal(get_status(&srv, "/v1/models", "Bearer admin"), 401);

    hc_fake_model(models, "second", "");
    hc_response r;
    const char *as_admin = "Authorization: bearer admin\r\n";
    assert_int_equal(post_models(&srv, "application/json", "{\"path\":\"second\"}",
                                 "Authorization: Bearer inference\r\n", &r),
                     401);
    hc_response_free(&r);
    char body[1400];
    snprintf(body, sizeof body, "{\"path\":\"%s/stray\"}", outside);
    assert_int_equal(post_models(&srv, "application/json", body, as_admin, &r), 403);
    assert_null(strstr(r.body, models));
    hc_response_free(&r);
    assert_int_equal(post_models(&srv, "application/json", "{\"path\":\"../outside/stray\"}", as_admin, &r), 403);
    hc_response_free(&r);
    /* a link inside the folder that leads out of it */
    snprintf(link, sizeof link, "%s/linked", models);
    snprintf(body, sizeof body, "%s/stray", outside);
    assert_int_equal(symlink(body, link), 0);
    assert_int_equal(post_models(&srv, "application/json", "{\"path\":\"linked\"}", as_admin, &r), 403);
    hc_response_free(&r);
    assert_int_equal(post_models(&srv, "application/json", "{\"path\":\"/etc\"}", as_admin, &r), 403);
    hc_response_free(&r);
    assert_int_equal(post_models(&srv, "application/json; charset=utf-8", "{\"path\":\"second\"}", as_admin, &r),
                     201);
    assert_non_null(strstr(r.body, "\"id\":\"second\""));
    hc_response_free(&r);
    snprintf(body, sizeof body, "{\"path\":\"%s/first\",\"id\":\"again\"}", models);
    assert_int_equal(post_models(&srv, "application/json", body, as_admin, &r), 201);
    hc_response_free(&r);
    assert_int_equal(delete_model(&srv, "second", "Bearer inference"), 401);
    assert_int_equal(delete_model(&srv, "second", "Bearer admin"), 200);
    assert_int_equal(get_status(&srv, "/v1/models/second", "Bearer inference"), 404);
    assert_int_equal(hc_server_stop(&srv, 15, 10), 0);
}

/* An empty key would serve without authentication: refused at start. */
static void test_empty_keys_refused(void **state)
{
    (void)state;
    const char *bin = getenv("CHOIR_BIN") ? getenv("CHOIR_BIN") : CHOIR_BIN;
    const char *cases[] = {"--api-key ''", "--admin-key ''", "--api-key same --admin-key same"};
    char cmd[4096];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "'%s' serve --models '%s' --port 0 %s 2>&1", bin, g_models, cases[i]);
        char *out = NULL;
        int rc = tu_run(cmd, &out);
        if (rc != 2)
            fail_msg("%s: exit %d: %s", cases[i], rc, out);
        assert_non_null(strstr(out, "key"));
        free(out);
    }
    snprintf(cmd, sizeof cmd, "CHOIR_API_KEY= '%s' serve --models '%s' --port 0 2>&1", bin, g_models);
    char *out = NULL;
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "CHOIR_API_KEY"));
    free(out);
}

static int setup(void **state)
{
    (void)state;
    char args[1200];
    snprintf(g_models, sizeof g_models, "%s", tu_tmpfile("models"));
    hc_fake_model(g_models, "fake", ", \"fixed_ms\": 2");
    hc_fake_model(g_models, "broken", "");
    snprintf(args, sizeof args, "--models '%s'", g_models);
    return hc_server_start(&g_srv, "security", args);
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
        cmocka_unit_test(test_voice_is_a_name),
        cmocka_unit_test(test_errors_carry_no_paths),
        cmocka_unit_test(test_admin_off_by_default),
        cmocka_unit_test(test_admin_with_its_own_key),
        cmocka_unit_test(test_empty_keys_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
