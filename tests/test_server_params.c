/* choir_server_create's params: 0 is "the default", a negative number or a
 * value outside the field's range in choir/server.h (NaN included: request
 * and connection timeouts, the body rate floor, connection counts) is refused
 * naming it, never read as the default or cast into a library option. */
#include <math.h>
#include <string.h>

#include "testutil.h"

#include "choir/engine.h"
#include "choir/log.h"
#include "choir/server.h"

static void test_params(void **state)
{
    (void)state;
    choir_err err = {0};
    choir_engine_params ep = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    ep.memory_budget = (int64_t)64 << 20;
    choir_engine *e = choir_engine_create(&ep, &err);
    assert_non_null(e);
    choir_server_params zero = {0};
    choir_server *s = choir_server_create(e, &zero, &err);
    assert_non_null(s);
    choir_server_free(s);
    choir_server_params bad[24];
    const char *why[24];
    int n = 0;
    for (int i = 0; i < 24; i++) {
        bad[i] = choir_server_default_params();
    }
    bad[n].max_upload_bytes = -1, why[n++] = "max_upload_bytes";
    bad[n].max_input_chars = -1, why[n++] = "max_input_chars";
    bad[n].max_connections = -1, why[n++] = "max_connections";
    bad[n].request_timeout_s = -1, why[n++] = "request_timeout_s -1 is outside 0.001..1e+09";
    bad[n].request_timeout_s = 1e10, why[n++] = "request_timeout_s 1e+10 is outside";
    bad[n].request_timeout_s = 1e-4, why[n++] = "request_timeout_s 0.0001 is outside";
    bad[n].request_timeout_s = NAN, why[n++] = "request_timeout_s nan is outside";
    bad[n].header_timeout_s = -1, why[n++] = "header_timeout_s -1 is outside";
    bad[n].header_timeout_s = 2e9, why[n++] = "header_timeout_s 2000000000 is outside 0.001..1000000000";
    bad[n].keepalive_timeout_s = NAN, why[n++] = "keepalive_timeout_s nan is outside";
    bad[n].body_timeout_s = 1e-6, why[n++] = "body_timeout_s 1e-06 is outside";
    bad[n].idle_timeout_s = 0.5, why[n++] = "idle_timeout_s 0.5 is outside 1..";
    bad[n].idle_timeout_s = INFINITY, why[n++] = "idle_timeout_s inf is outside";
    bad[n].body_min_rate = -2, why[n++] = "body_min_rate -2 is outside";
    bad[n].body_min_rate = 1e13, why[n++] = "body_min_rate 1e+13 is outside";
    bad[n].max_connections = CHOIR_SERVER_MAX_CONNECTIONS + 1, why[n++] = "max_connections 1048577 is outside";
    bad[n].max_client_connections = -2, why[n++] = "max_client_connections -2 is outside";
    assert_true(n <= 24);
    for (int i = 0; i < n; i++) {
        err = (choir_err){0};
        assert_null(choir_server_create(e, &bad[i], &err));
        assert_int_equal(err.code, CHOIR_EINVAL);
        if (!strstr(err.msg, why[i]))
            fail_msg("case %d: '%s'", i, err.msg);
    }
    choir_server_params edge = choir_server_default_params();
    edge.request_timeout_s = CHOIR_SERVER_MIN_TIMEOUT_S;
    edge.header_timeout_s = CHOIR_SERVER_MAX_TIMEOUT_S;
    edge.idle_timeout_s = CHOIR_SERVER_MIN_IDLE_TIMEOUT_S;
    edge.body_min_rate = -1;
    edge.max_client_connections = -1;
    edge.max_connections = CHOIR_SERVER_MAX_CONNECTIONS;
    s = choir_server_create(e, &edge, &err);
    assert_non_null(s);
    choir_server_free(s);
    choir_engine_free(e);
}

int main(void)
{
    choir_log_set_level(CHOIR_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
