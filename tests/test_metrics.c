/* The metrics registry: series identity, quantile accuracy against exact
 * order statistics, and the exact Prometheus text. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "choir/alloc.h"
#include "choir/metrics.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void test_series_identity_and_errors(void **state)
{
    (void)state;
    choir_metrics *m = choir_metrics_create(NULL);
    assert_non_null(m);
    int a = choir_metrics_add(m, CHOIR_METRIC_COUNTER, "x_total", "k=\"1\"", "help");
    int b = choir_metrics_add(m, CHOIR_METRIC_COUNTER, "x_total", "k=\"2\"", "help");
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(choir_metrics_add(m, CHOIR_METRIC_COUNTER, "x_total", "k=\"1\"", "help"), a);
    assert_int_equal(choir_metrics_add(m, CHOIR_METRIC_GAUGE, "x_total", "k=\"3\"", "help"), CHOIR_EINVAL);
    assert_int_equal(choir_metrics_add(m, CHOIR_METRIC_GAUGE, "9bad", NULL, NULL), CHOIR_EINVAL);
    assert_int_equal(choir_metrics_add(m, CHOIR_METRIC_GAUGE, "bad-name", NULL, NULL), CHOIR_EINVAL);
    const double desc[] = {2, 1};
    assert_int_equal(choir_metrics_add_histogram(m, "h", NULL, NULL, desc, 2), CHOIR_EINVAL);
    choir_metrics_inc(m, a, 2);
    choir_metrics_inc(m, a, 0.5);
    choir_metrics_inc(m, 999, 1); /* ignored */
    assert_true(choir_metrics_value(m, a) == 2.5);
    assert_true(choir_metrics_value(m, b) == 0);
    assert_true(choir_metrics_quantile(m, a, 0.5) == 0);
    choir_metrics_free(m);
    choir_metrics_free(NULL);
}

/* Quantiles of log-normal latencies are within 5% of the exact ones. */
static void test_quantiles(void **state)
{
    (void)state;
    choir_metrics *m = choir_metrics_create(NULL);
    int h = choir_metrics_add_histogram(m, "lat_seconds", NULL, "latency", NULL, 0);
    assert_true(h >= 0);
    int n = 20000;
    double *v = malloc((size_t)n * sizeof *v);
    float *u = malloc((size_t)n * 2 * sizeof *u);
    tu_fill_uniform(u, (size_t)n * 2, 11, 1e-7f, 1.0f);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        double z = sqrt(-2 * log(u[2 * i])) * cos(2 * M_PI * u[2 * i + 1]);
        v[i] = 0.05 * exp(0.8 * z);
        sum += v[i];
        choir_metrics_observe(m, h, v[i]);
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    const double qs[] = {0.01, 0.5, 0.9, 0.95, 0.99, 0.999};
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
        double exact = v[(size_t)llround(qs[k] * (n - 1))];
        double est = choir_metrics_quantile(m, h, qs[k]);
        if (fabs(est - exact) > 0.05 * exact)
            fail_msg("q%.3f: %g vs exact %g", qs[k], est, exact);
    }
    assert_int_equal(choir_metrics_count(m, h), (uint64_t)n);
    assert_true(fabs(choir_metrics_value(m, h) - sum) < 1e-9 * sum);
    free(v);
    free(u);
    choir_metrics_free(m);
}

static void test_prometheus_text(void **state)
{
    (void)state;
    choir_metrics *m = choir_metrics_create(NULL);
    int c1 = choir_metrics_add(m, CHOIR_METRIC_COUNTER, "req_total", "code=\"200\"", "Requests");
    int g = choir_metrics_add(m, CHOIR_METRIC_GAUGE, "depth", NULL, "Queue depth");
    int c2 = choir_metrics_add(m, CHOIR_METRIC_COUNTER, "req_total", "code=\"503\"", "Requests");
    const double bounds[] = {1, 2, 4};
    int h = choir_metrics_add_histogram(m, "batch", "model=\"m\"", "Batch size", bounds, 3);
    choir_metrics_inc(m, c1, 3);
    choir_metrics_inc(m, c2, 1);
    choir_metrics_set(m, g, 2.5);
    choir_metrics_observe(m, h, 1);
    choir_metrics_observe(m, h, 2);
    choir_metrics_observe(m, h, 2);
    choir_metrics_observe(m, h, 8);
    char *text = choir_metrics_render(m);
    assert_non_null(text);
    char q50[64], q95[64], q99[64];
    snprintf(q50, sizeof q50, "%.9g", choir_metrics_quantile(m, h, 0.5));
    snprintf(q95, sizeof q95, "%.9g", choir_metrics_quantile(m, h, 0.95));
    snprintf(q99, sizeof q99, "%.9g", choir_metrics_quantile(m, h, 0.99));
    char want[2048];
    snprintf(want, sizeof want,
             "# HELP req_total Requests\n"
             "# TYPE req_total counter\n"
             "req_total{code=\"200\"} 3\n"
             "req_total{code=\"503\"} 1\n"
             "# HELP depth Queue depth\n"
             "# TYPE depth gauge\n"
             "depth 2.5\n"
             "# HELP batch Batch size\n"
             "# TYPE batch histogram\n"
             "batch_bucket{model=\"m\",le=\"1\"} 1\n"
             "batch_bucket{model=\"m\",le=\"2\"} 3\n"
             "batch_bucket{model=\"m\",le=\"4\"} 3\n"
             "batch_bucket{model=\"m\",le=\"+Inf\"} 4\n"
             "batch_sum{model=\"m\"} 13\n"
             "batch_count{model=\"m\"} 4\n"
             "# HELP batch_quantile Batch size (quantiles)\n"
             "# TYPE batch_quantile gauge\n"
             "batch_quantile{model=\"m\",quantile=\"0.5\"} %s\n"
             "batch_quantile{model=\"m\",quantile=\"0.95\"} %s\n"
             "batch_quantile{model=\"m\",quantile=\"0.99\"} %s\n",
             q50, q95, q99);
    assert_string_equal(text, want);
    /* the median of {1, 2, 2, 8} lies in the bucket holding 2 */
    double med = choir_metrics_quantile(m, h, 0.5);
    assert_true(med > 2 / 1.1 && med < 2 * 1.1);
    choir_free(text);
    choir_metrics_free(m);
}

typedef struct hammer {
    choir_metrics *m;
    int c, h;
} hammer;

static void *hammer_main(void *arg)
{
    hammer *hm = arg;
    for (int i = 0; i < 20000; i++) {
        choir_metrics_inc(hm->m, hm->c, 1);
        choir_metrics_observe(hm->m, hm->h, 0.001 * (i % 100 + 1));
    }
    return NULL;
}

/* Updates from several threads are all counted. */
static void test_threads(void **state)
{
    (void)state;
    hammer hm = {.m = choir_metrics_create(NULL)};
    hm.c = choir_metrics_add(hm.m, CHOIR_METRIC_COUNTER, "n_total", NULL, NULL);
    hm.h = choir_metrics_add_histogram(hm.m, "t_seconds", NULL, NULL, NULL, 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &hm), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    assert_true(choir_metrics_value(hm.m, hm.c) == 80000);
    assert_int_equal(choir_metrics_count(hm.m, hm.h), 80000);
    choir_metrics_free(hm.m);
}

/* Every allocation failure during setup and rendering is survived. */
static void test_alloc_failures(void **state)
{
    (void)state;
    for (int64_t k = 1; k < 200; k++) {
        choir_alloc_fail_after(k);
        choir_metrics *m = choir_metrics_create(NULL);
        if (m) {
            for (int i = 0; i < 40; i++) {
                char name[32];
                snprintf(name, sizeof name, "s%d", i);
                if (i % 2)
                    choir_metrics_add(m, CHOIR_METRIC_GAUGE, name, NULL, "g");
                else
                    choir_metrics_add_histogram(m, name, NULL, "h", NULL, 0);
            }
            char *t = choir_metrics_render(m);
            choir_free(t);
        }
        choir_metrics_free(m);
        int64_t used = choir_alloc_fail_after(0);
        if (used < k)
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_series_identity_and_errors),
        cmocka_unit_test(test_quantiles),
        cmocka_unit_test(test_prometheus_text),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
