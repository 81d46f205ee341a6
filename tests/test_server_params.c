/* choir_server_create's params: 0 is "the default", a negative number or a
 * request timeout outside CHOIR_SERVER_MIN/MAX_TIMEOUT_S (NaN included) is
 * refused naming it, never read as the default. */
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
    choir_server_params bad[8];
    const char *why[8];
    int n = 0;
    for (int i = 0; i < 8; i++) {
        bad[i] = choir_server_default_params();
    }
    bad[n].max_upload_bytes = -1, why[n++] = "max_upload_bytes";
    bad[n].max_input_chars = -1, why[n++] = "max_input_chars";
    bad[n].max_connections = -1, why[n++] = "max_connections";
    bad[n].request_timeout_s = -1, why[n++] = "request_timeout_s -1 is outside 0.001..1e+09";
    bad[n].request_timeout_s = 1e10, why[n++] = "request_timeout_s 1e+10 is outside";
    bad[n].request_timeout_s = 1e-4, why[n++] = "request_timeout_s 0.0001 is outside";
    bad[n].request_timeout_s = NAN, why[n++] = "request_timeout_s nan is outside";
    for (int i = 0; i < n; i++) {
        err = (choir_err){0};
        assert_null(choir_server_create(e, &bad[i], &err));
        assert_int_equal(err.code, CHOIR_EINVAL);
        if (!strstr(err.msg, why[i]))
            fail_msg("case %d: '%s'", i, err.msg);
    }
    choir_server_params edge = choir_server_default_params();
    edge.request_timeout_s = CHOIR_SERVER_MIN_TIMEOUT_S;
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
