// ctest: labels=server timeout=120
/* `choir serve` against a client that probes the server itself: the TTS
 * voice field names no file (only the model's own voices, or mixes of them),
 * and no error a client sees carries a path of the server's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    assert_true(st >= 400);
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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
