// ctest: labels=server timeout=120
/* A model that cannot load, as an operator and a client see it: its requests
 * get 500 naming it; /v1/models marks it "failed" with the reason (no server
 * path); /health names it (200 "partial" while other models serve, 503
 * "failed" when none can); a later successful load clears all of that; and
 * `choir serve --preload` says which model failed, serving the others, or
 * exits 1 with --preload-strict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "httpc.h"
#include "testutil.h"

static int speech(const hc_server *srv, const char *model, hc_response *r)
{
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"input\":\"hi\",\"response_format\":\"pcm\"}", model);
    return hc_post(srv->port, "/v1/audio/speech", "application/json", body, strlen(body), NULL, r, 20);
}

/* GET path: the status, the body in *body (free it). */
static int get(const hc_server *srv, const char *path, char **body)
{
    hc_response r;
    int st = hc_get(srv->port, path, &r, 10);
    *body = r.body ? strdup(r.body) : strdup("");
    hc_response_free(&r);
    return st;
}

static void write_config(const char *models, const char *name, const char *extra)
{
    char path[1200], json[256];
    snprintf(path, sizeof path, "%s/%s/config.json", models, name);
    int n = snprintf(json, sizeof json, "{\"model_type\": \"choir-fake\"%s}\n", extra);
    assert_int_equal(tu_write_file(path, json, (size_t)n), 0);
}

/* The object of model `id` within a /v1/models list (up to its closing brace). */
static char *model_object(const char *list, const char *id)
{
    char key[160];
    snprintf(key, sizeof key, "{\"id\":\"%s\"", id);
    const char *at = strstr(list, key);
    if (!at)
        return NULL;
    int depth = 0;
    const char *end = at;
    for (; *end; end++) {
        depth += *end == '{' || *end == '[';
        depth -= *end == '}' || *end == ']';
        if (depth == 0)
            break;
    }
    return strndup(at, (size_t)(end - at + 1));
}

static void test_lazy_failure_marked_then_cleared(void **state)
{
    (void)state;
    char models[1024], args[1200];
    snprintf(models, sizeof models, "%s", tu_tmpfile("lazy"));
    hc_fake_model(models, "good", "");
    hc_fake_model(models, "bad", ", \"fail_load\": 1");
    snprintf(args, sizeof args, "--models '%s'", models);
    hc_server srv;
    assert_int_equal(hc_server_start(&srv, "lazy", args), 0);
    char *body;

    /* nothing has been tried yet */
    assert_int_equal(get(&srv, "/health", &body), 200);
    assert_string_equal(body, "{\"status\":\"ok\"}");
    free(body);
    assert_int_equal(get(&srv, "/v1/models", &body), 200);
    char *bad = model_object(body, "bad");
    assert_non_null(bad);
    assert_non_null(strstr(bad, "\"status\":\"not_loaded\""));
    assert_null(strstr(bad, "\"error\""));
    free(bad);
    free(body);

    hc_response r;
    assert_int_equal(speech(&srv, "good", &r), 200);
    hc_response_free(&r);
    assert_int_equal(speech(&srv, "bad", &r), 500);
    assert_non_null(strstr(r.body, "'bad' could not be loaded"));
    hc_response_free(&r);

    /* /v1/models: the failure and why, without the server's directories */
    assert_int_equal(get(&srv, "/v1/models", &body), 200);
    bad = model_object(body, "bad");
    char *good = model_object(body, "good");
    assert_non_null(bad);
    assert_non_null(good);
    if (!strstr(bad, "\"status\":\"failed\"") || !strstr(bad, "\"error\":\"bad/config.json: \\\"fail_load\\\" is set\""))
        fail_msg("the failed model's entry: %s", bad);
    assert_null(strstr(body, models));
    assert_non_null(strstr(good, "\"status\":\"loaded\""));
    assert_null(strstr(good, "\"error\""));
    free(bad);
    free(good);
    free(body);
    assert_int_equal(get(&srv, "/v1/models/bad", &body), 200);
    assert_non_null(strstr(body, "\"status\":\"failed\""));
    free(body);

    /* /health and /health/ready name it; the other model is still served */
    const char *routes[] = {"/health", "/health/ready"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(get(&srv, routes[i], &body), 200);
        if (!strstr(body, "\"status\":\"partial\"") || !strstr(body, "\"models_failed\":[{\"id\":\"bad\",\"error\":"))
            fail_msg("%s with a failed model: %s", routes[i], body);
        assert_null(strstr(body, models));
        assert_null(strstr(body, "good"));
        free(body);
    }
    assert_int_equal(get(&srv, "/health/live", &body), 200);
    free(body);

    /* the operator fixes the model: the next request loads it, the marks go */
    write_config(models, "bad", "");
    assert_int_equal(speech(&srv, "bad", &r), 200);
    hc_response_free(&r);
    assert_int_equal(get(&srv, "/v1/models/bad", &body), 200);
    assert_non_null(strstr(body, "\"status\":\"loaded\""));
    assert_null(strstr(body, "\"error\""));
    free(body);
    assert_int_equal(get(&srv, "/health", &body), 200);
    assert_string_equal(body, "{\"status\":\"ok\"}");
    free(body);
    assert_int_equal(hc_server_stop(&srv, 15, 10), 0);
}

/* With every model failed the server can serve nothing: not ready. */
static void test_all_failed_not_ready(void **state)
{
    (void)state;
    char models[1024], args[1200];
    snprintf(models, sizeof models, "%s", tu_tmpfile("allbad"));
    hc_fake_model(models, "only", ", \"fail_load\": 1");
    snprintf(args, sizeof args, "--models '%s'", models);
    hc_server srv;
    assert_int_equal(hc_server_start(&srv, "allbad", args), 0);
    hc_response r;
    assert_int_equal(speech(&srv, "only", &r), 500);
    hc_response_free(&r);
    char *body;
    assert_int_equal(get(&srv, "/health/ready", &body), 503);
    if (!strstr(body, "\"status\":\"failed\"") || !strstr(body, "\"id\":\"only\""))
        fail_msg("/health/ready with every model failed: %s", body);
    free(body);
    assert_int_equal(get(&srv, "/health/live", &body), 200);
    free(body);
    assert_int_equal(hc_server_stop(&srv, 15, 10), 0);
}

/* --preload: the failure is in the log by name, the server serves the
 * others and /health names it once the preload is over. */
static void test_preload_failure_visible(void **state)
{
    (void)state;
    char models[1024], args[1200];
    snprintf(models, sizeof models, "%s", tu_tmpfile("preload"));
    hc_fake_model(models, "good", "");
    hc_fake_model(models, "bad", ", \"fail_load\": 1");
    snprintf(args, sizeof args, "--models '%s' --preload", models);
    hc_server srv;
    assert_int_equal(hc_server_start(&srv, "preload", args), 0);
    char *body = NULL;
    int st = 0;
    for (int i = 0; i < 100; i++) {
        free(body);
        st = get(&srv, "/health", &body);
        if (st != 503 || !strstr(body, "loading"))
            break;
        usleep(50 * 1000);
    }
    assert_int_equal(st, 200);
    assert_non_null(strstr(body, "\"status\":\"partial\""));
    assert_non_null(strstr(body, "\"id\":\"bad\""));
    free(body);
    hc_response r;
    assert_int_equal(speech(&srv, "good", &r), 200);
    hc_response_free(&r);
    /* the summary line comes within the CLI's 100-ms poll of the end */
    char *log = NULL;
    for (int i = 0; i < 40; i++) {
        free(log);
        log = hc_server_log(&srv);
        if (log && strstr(log, "1 of 2 models failed"))
            break;
        usleep(50 * 1000);
    }
    assert_non_null(log);
    if (!strstr(log, "preload: model 'bad' failed") || !strstr(log, "1 of 2 models failed"))
        fail_msg("the preload's failure is not in the log:\n%s", log);
    free(log);
    assert_int_equal(hc_server_stop(&srv, 15, 10), 0);
}

/* --preload-strict: a model that fails makes the server exit 1. */
static void test_preload_strict_exits(void **state)
{
    (void)state;
    char models[1024], cmd[4096];
    snprintf(models, sizeof models, "%s", tu_tmpfile("strict"));
    hc_fake_model(models, "good", "");
    hc_fake_model(models, "bad", ", \"fail_load\": 1");
    const char *bin = getenv("CHOIR_BIN") ? getenv("CHOIR_BIN") : CHOIR_BIN;
    snprintf(cmd, sizeof cmd, "timeout 20 '%s' serve --models '%s' --port 0 --preload-strict 2>&1", bin, models);
    char *out = NULL;
    int rc = tu_run(cmd, &out);
    if (rc != 1 || !strstr(out, "model 'bad' failed") || !strstr(out, "--preload-strict"))
        fail_msg("--preload-strict with a failing model: exit %d:\n%s", rc, out);
    free(out);
    /* and with every model sound it serves */
    write_config(models, "bad", "");
    hc_server srv;
    char args[1200];
    snprintf(args, sizeof args, "--models '%s' --preload-strict", models);
    assert_int_equal(hc_server_start(&srv, "strict", args), 0);
    char *body = NULL;
    int st = 0;
    for (int i = 0; i < 100; i++) {
        free(body);
        st = get(&srv, "/health", &body);
        if (st == 200)
            break;
        usleep(50 * 1000);
    }
    assert_int_equal(st, 200);
    assert_string_equal(body, "{\"status\":\"ok\"}");
    free(body);
    assert_int_equal(hc_server_stop(&srv, 15, 10), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lazy_failure_marked_then_cleared),
        cmocka_unit_test(test_all_failed_not_ready),
        cmocka_unit_test(test_preload_failure_visible),
        cmocka_unit_test(test_preload_strict_exits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
