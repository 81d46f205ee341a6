/* The threaded engine on simulated GPUs (params.fake_gpus) with the fake GPU
 * adapter: device discovery and the --gpus filter, placement where a model
 * fits best, CPU fallback, a replica on the second GPU under a long queue and
 * its unloading once idle, the per-device and per-model series on the
 * Prometheus page, and device memory past the high-water mark as an HTTP
 * client sees it (429 with Retry-After, /health) through an in-process
 * server. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#include "choir/alloc.h"
#include "choir/engine.h"
#include "choir/log.h"
#include "choir/server.h"
#include "httpc.h"
#include "models/fake/fake_model.h"

#define MIB ((int64_t)1 << 20)

static const char *model_dir(const char *name, const choir_fake_params *p)
{
    const char *dir = tu_tmpfile(name);
    choir_err err;
    assert_int_equal(choir_fake_model_write(dir, p, &err), 0);
    return dir;
}

static choir_engine_params two_fake_gpus(void)
{
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 512 * MIB;
    p.fake_gpus = 2;
    p.fake_gpu_bytes[0] = 1000 * MIB;
    p.fake_gpu_bytes[1] = 2000 * MIB;
    return p;
}

/* The value of the sample line `series` on the page, or NAN when absent. */
static double metric(const char *page, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = page; p && *p;) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return NAN;
}

static double metric_of(choir_engine *e, const char *series)
{
    char *page = choir_engine_metrics_text(e);
    assert_non_null(page);
    double v = metric(page, series);
    choir_free(page);
    return v;
}

static int run_tts(choir_engine *e, const char *model, const char *text)
{
    choir_job job = {.model_id = model, .req.task = CHOIR_TASK_TTS, .req.in.tts.text = text};
    choir_err err = {0};
    choir_ticket *t = choir_engine_submit(e, &job, NULL, &err);
    assert_non_null(t);
    int rc = choir_ticket_wait(t, 30, &err);
    choir_ticket_free(t);
    return rc;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_devices_and_filter(void **state)
{
    (void)state;
    choir_err err = {0};
    choir_engine_params p = two_fake_gpus();
    choir_engine *e = choir_engine_create(&p, &err);
    assert_non_null(e);
    choir_engine_device dev[4];
    assert_int_equal(choir_engine_devices(e, dev, 4), 3);
    assert_int_equal(dev[0].kind, CHOIR_DEVICE_KIND_CPU);
    assert_string_equal(dev[0].name, "cpu");
    assert_int_equal(dev[0].budget, 512 * MIB);
    assert_string_equal(dev[1].name, "gpu0");
    assert_string_equal(dev[2].name, "gpu1");
    assert_int_equal(dev[2].kind, CHOIR_DEVICE_KIND_GPU);
    assert_int_equal(dev[2].total_bytes, 2000 * MIB);
    assert_int_equal(dev[1].budget, (int64_t)(1000.0 * MIB * 0.90)); /* default fraction */
    choir_engine_free(e);

    /* a list selects among the GPUs; explicit bytes replace the fraction */
    p.gpus = "1";
    p.gpu_memory_bytes = 700 * MIB;
    e = choir_engine_create(&p, &err);
    assert_non_null(e);
    assert_int_equal(choir_engine_devices(e, dev, 4), 2);
    assert_string_equal(dev[1].name, "gpu1");
    assert_int_equal(dev[1].index, 1);
    assert_int_equal(dev[1].budget, 700 * MIB);
    choir_engine_free(e);
    p.gpus = "none";
    e = choir_engine_create(&p, &err);
    assert_non_null(e);
    assert_int_equal(choir_engine_devices(e, NULL, 0), 1);
    choir_engine_free(e);

    /* bad lists are refused with a reason */
    const char *bad[] = {"2", "0,0", "x", "0,", "-1"};
    const char *why[] = {"no GPU 2", "twice", "expected", "expected", "expected"};
    for (int i = 0; i < 5; i++) {
        p.gpus = bad[i];
        memset(&err, 0, sizeof err);
        assert_null(choir_engine_create(&p, &err));
        assert_int_equal(err.code, CHOIR_EINVAL);
        assert_non_null(strstr(err.msg, why[i]));
    }
#ifndef CHOIR_HAVE_CUDA
    /* a real GPU index in a CPU build */
    choir_engine_params cpu = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    cpu.gpus = "0";
    assert_null(choir_engine_create(&cpu, &err));
    assert_non_null(strstr(err.msg, "built without CUDA"));
    cpu.gpus = "all"; /* no GPU: the CPU only */
    e = choir_engine_create(&cpu, &err);
    assert_non_null(e);
    assert_int_equal(choir_engine_devices(e, NULL, 0), 1);
    choir_engine_free(e);
#endif
    /* the front-end flags */
    choir_engine_params q = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    assert_int_equal(choir_engine_apply_option(&q, "gpus", "0,1", &err), 1);
    assert_string_equal(q.gpus, "0,1");
    assert_int_equal(choir_engine_apply_option(&q, "gpu-memory-fraction", "0.5", &err), 1);
    assert_true(q.gpu_memory_fraction == 0.5);
    assert_int_equal(choir_engine_apply_option(&q, "gpu-memory-fraction", "1.5", &err), CHOIR_EINVAL);
    assert_int_equal(choir_engine_apply_option(&q, "gpu-memory", "60G", &err), 1);
    assert_int_equal(q.gpu_memory_bytes, (int64_t)60 << 30);
    assert_non_null(strstr(choir_engine_options_help(), "--gpus"));
}

/* Placement and the Prometheus series. gpu0's budget is 900 MiB, gpu1's
 * 1350 MiB: big (800 MiB) fits gpu1 best (550 MiB left against 100), then
 * small (100 MiB) fits gpu0 best (800 MiB left against 450); huge (3000 MiB)
 * fits no GPU and runs on the CPU, as does the CPU-only model. (Before its
 * first load a model's device bytes are taken to be its files' size.) */
static void test_placement_and_metrics(void **state)
{
    (void)state;
    choir_err err = {0};
    choir_engine_params p = two_fake_gpus();
    p.fake_gpu_bytes[1] = 1500 * MIB;
    choir_engine *e = choir_engine_create(&p, &err);
    assert_non_null(e);
    choir_fake_params big = {.fixed_ms = 2, .weights_bytes = 8 * MIB, .device_weights_bytes = 800 * MIB,
                             .device_bytes_per_unit = 1024};
    choir_fake_params small = {.fixed_ms = 1, .weights_bytes = 1 * MIB, .device_weights_bytes = 100 * MIB};
    choir_fake_params huge = {.fixed_ms = 1, .weights_bytes = 2 * MIB, .device_weights_bytes = 3000 * MIB};
    choir_fake_params cpu = {.fixed_ms = 1, .weights_bytes = 1 * MIB};
    assert_int_equal(choir_engine_add_model(e, "big", model_dir("gpu_big", &big), &choir_model_fake_gpu, &err), 0);
    assert_int_equal(choir_engine_add_model(e, "small", model_dir("gpu_small", &small), &choir_model_fake_gpu, &err),
                     0);
    assert_int_equal(choir_engine_add_model(e, "huge", model_dir("gpu_huge", &huge), &choir_model_fake_gpu, &err), 0);
    assert_int_equal(choir_engine_add_model(e, "cpu", model_dir("gpu_cpu", &cpu), &choir_model_fake, &err), 0);
    /* huge's files are small: its first load goes to a GPU, shows 3000 MiB
     * there, is dropped and placed again, on the CPU, without failing */
    const char *ids[] = {"big", "small", "huge", "cpu"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(run_tts(e, ids[i], "Placed where it fits."), 0);
    choir_engine_model_info info[4];
    assert_int_equal(choir_engine_models(e, info, 4), 4);
    uint32_t want[4] = {1u << 2, 1u << 1, 1u << 0, 1u << 0};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(info[i].replicas, 1);
        assert_int_equal(info[i].devices, want[i]);
    }
    choir_engine_device dev[3];
    choir_engine_devices(e, dev, 3);
    assert_int_equal(dev[1].weights, 100 * MIB);
    assert_int_equal(dev[2].weights, 800 * MIB);
    assert_int_equal(dev[0].weights, 12 * MIB); /* every replica's host-side bytes */
    assert_int_equal(dev[2].batches, 1);
    assert_int_equal(dev[0].batches, 2);

    char *page = choir_engine_metrics_text(e);
    assert_non_null(page);
    assert_true(metric(page, "choir_model_replicas{model=\"big\"}") == 1);
    assert_true(metric(page, "choir_model_placement{model=\"big\",device=\"gpu1\"}") == 1);
    assert_true(metric(page, "choir_model_placement{model=\"big\",device=\"gpu0\"}") == 0);
    assert_true(metric(page, "choir_model_placement{model=\"big\",device=\"cpu\"}") == 0);
    assert_true(metric(page, "choir_model_placement{model=\"small\",device=\"gpu0\"}") == 1);
    assert_true(metric(page, "choir_model_placement{model=\"huge\",device=\"cpu\"}") == 1);
    assert_true(metric(page, "choir_device_memory_bytes{device=\"gpu1\",kind=\"budget\"}") == (double)(int64_t)(1500.0 * MIB * 0.90));
    assert_true(metric(page, "choir_device_memory_bytes{device=\"gpu1\",kind=\"weights\"}") == 800.0 * MIB);
    assert_true(metric(page, "choir_device_memory_bytes{device=\"gpu1\",kind=\"reserved\"}") == 0);
    /* the peak held the weights and the first batch's device estimate, made
     * before the load (21 characters x the adapter's 64-byte default) */
    assert_true(metric(page, "choir_device_memory_bytes{device=\"gpu1\",kind=\"peak\"}") == 800.0 * MIB + 21 * 64);
    assert_true(metric(page, "choir_device_memory_bytes{device=\"cpu\",kind=\"budget\"}") == 512.0 * MIB);
    assert_true(metric(page, "choir_device_batches_total{device=\"gpu0\"}") == 1);
    assert_true(metric(page, "choir_device_batches_total{device=\"cpu\"}") == 2);
    assert_true(metric(page, "choir_device_busy_seconds_total{device=\"gpu1\"}") > 0);
    assert_true(metric(page, "choir_device_running_batches{device=\"gpu0\"}") == 0);
    assert_non_null(strstr(page, "# TYPE choir_device_memory_bytes gauge"));
    assert_non_null(strstr(page, "# TYPE choir_device_batches_total counter"));
    choir_free(page);
    choir_engine_free(e);
}

typedef struct flood {
    choir_ticket *t[64];
    int n;
} flood;

/* A long queue on a GPU model: a replica is loaded on the other GPU, batches
 * run on both, every request completes once, and the replica goes away after
 * replica_idle_s. */
static void test_replica_under_load(void **state)
{
    (void)state;
    choir_err err = {0};
    choir_engine_params p = two_fake_gpus();
    p.max_batch = 2;
    p.wait_short_ms = 1;
    p.wait_long_ms = 1;
    p.replica_queue = 4;
    p.replica_after_s = 0.05;
    p.replica_idle_s = 0.3;
    choir_engine *e = choir_engine_create(&p, &err);
    assert_non_null(e);
    choir_fake_params big = {.fixed_ms = 20, .pieces = 1, .weights_bytes = 4 * MIB,
                             .device_weights_bytes = 600 * MIB, .load_ms = 20};
    assert_int_equal(choir_engine_add_model(e, "big", model_dir("gpu_flood", &big), &choir_model_fake_gpu, &err), 0);
    flood f = {.n = 64};
    char texts[64][32];
    for (int i = 0; i < f.n; i++) {
        snprintf(texts[i], sizeof texts[i], "request number %d.", i);
        choir_job job = {.model_id = "big", .req.task = CHOIR_TASK_TTS, .req.in.tts.text = texts[i]};
        f.t[i] = choir_engine_submit(e, &job, NULL, &err);
        assert_non_null(f.t[i]);
    }
    int max_replicas = 0;
    for (int i = 0; i < f.n; i++) {
        while (choir_ticket_wait(f.t[i], 0.01, &err) == CHOIR_ETIMEDOUT) {
            choir_engine_model_info info;
            choir_engine_models(e, &info, 1);
            if (info.replicas > max_replicas)
                max_replicas = info.replicas;
        }
        assert_int_equal(choir_ticket_wait(f.t[i], 0, &err), 0);
        choir_ticket_free(f.t[i]);
    }
    assert_int_equal(max_replicas, 2);
    double b0 = metric_of(e, "choir_device_batches_total{device=\"gpu0\"}");
    double b1 = metric_of(e, "choir_device_batches_total{device=\"gpu1\"}");
    print_message("batches: gpu0 %.0f, gpu1 %.0f\n", b0, b1);
    assert_true(b0 >= 2 && b1 >= 2);
    assert_true(b0 + b1 >= 32);
    assert_true(metric_of(e, "choir_model_loads_total{model=\"big\"}") == 2);
    assert_true(metric_of(e, "choir_requests_completed_total") == 64);
    /* idle: back to one replica */
    int replicas = 2;
    for (int k = 0; k < 300 && replicas > 1; k++) {
        sleep_ms(10);
        replicas = (int)metric_of(e, "choir_model_replicas{model=\"big\"}");
    }
    assert_int_equal(replicas, 1);
    assert_true(metric_of(e, "choir_model_unloads_total{model=\"big\"}") == 1);
    choir_engine_device dev[3];
    choir_engine_devices(e, dev, 3);
    assert_int_equal(dev[1].weights + dev[2].weights, 600 * MIB);
    for (int d = 1; d < 3; d++)
        assert_true(dev[d].peak <= dev[d].budget);
    choir_engine_free(e);
}

typedef struct http_call {
    int port;
    const char *body;
    int status;
    pthread_t th;
} http_call;

static void *http_call_run(void *arg)
{
    http_call *c = arg;
    hc_response r;
    c->status = hc_post(c->port, "/v1/audio/speech", "application/json", c->body, strlen(c->body), NULL, &r, 30);
    hc_response_free(&r);
    return NULL;
}

/* An engine over `gpus` fake GPUs of 1000 MiB (900 MiB of budget each), a
 * fake GPU model whose requests of 70 characters take 700 MiB of device
 * memory for fixed_ms, and a started server on it (ready). */
static choir_server *pressure_server(int gpus, int fixed_ms, const char *dir, choir_engine **out)
{
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = 512 * MIB;
    p.fake_gpus = gpus;
    for (int g = 0; g < gpus; g++) p.fake_gpu_bytes[g] = 1000 * MIB;
    p.gpu_memory_bytes = 900 * MIB;
    choir_err err = {0};
    choir_engine *e = choir_engine_create(&p, &err);
    assert_non_null(e);
    choir_fake_params fp = {.fixed_ms = fixed_ms, .bytes_per_unit = 64, .weights_bytes = 1 << 20,
                            .device_weights_bytes = 100 * MIB, .device_bytes_per_unit = 10 * MIB};
    assert_int_equal(choir_engine_add_model(e, "fake", model_dir(dir, &fp), &choir_model_fake_gpu, &err), 0);
    choir_server_params sp = choir_server_default_params();
    sp.port = 0;
    choir_server *srv = choir_server_create(e, &sp, &err);
    assert_non_null(srv);
    assert_int_equal(choir_server_start(srv, &err), 0);
    choir_server_set_ready(srv, 1);
    *out = e;
    return srv;
}

/* One GPU whose budget leaves 800 MiB beside the model's weights, requests
 * of 700 MiB of device memory, batches of 1 s. While A runs the GPU is past
 * its high-water mark (87.5%): B (normal priority) is queued, since what
 * waits still fits what the replica can hold; C, which could only start
 * after both, gets 429 with Retry-After (reason memory), a low-priority
 * request (X-Choir-Priority: low) is refused as overload (HTTP 503), an
 * unknown priority is a 400; /metrics shows the GPU
 * degraded and the refusal; A and B are served. */
static void test_device_pressure_http(void **state)
{
    (void)state;
    choir_engine *e;
    choir_server *srv = pressure_server(1, 1000, "gpu_pressure", &e);
    int port = choir_server_port(srv);
    /* loaded first, so that requests are estimated with its device figures */
    assert_int_equal(run_tts(e, "fake", "w"), 0);
    /* 70 characters: 700 MiB of device memory each */
    const char *body = "{\"model\":\"fake\",\"response_format\":\"pcm\",\"input\":"
                       "\"aaaaaaaaaabbbbbbbbbbccccccccccddddddddddeeeeeeeeeeffffffffffgggggggggg\"}";
    http_call a = {.port = port, .body = body}, b = {.port = port, .body = body};
    assert_int_equal(pthread_create(&a.th, NULL, http_call_run, &a), 0);
    choir_engine_device dev[2];
    for (int i = 0; i < 500 && (choir_engine_devices(e, dev, 2), dev[1].reserved == 0); i++)
        sleep_ms(5);
    assert_int_equal(dev[1].reserved, 700 * MIB);
    assert_true(dev[1].pressure > 0.87 && dev[1].pressure < 0.88);
    assert_int_equal(b.status, 0);
    assert_int_equal(pthread_create(&b.th, NULL, http_call_run, &b), 0);
    choir_engine_queue_info qi = {0};
    for (int i = 0; i < 500 && (choir_engine_get_queue_info(e, "fake", &qi), qi.queued == 0); i++)
        sleep_ms(5);
    assert_int_equal(qi.queued, 1);
    hc_response r;
    assert_int_equal(hc_post(port, "/v1/audio/speech", "application/json", body, strlen(body), NULL, &r, 10), 429);
    char v[32];
    assert_non_null(hc_header(&r, "Retry-After", v, sizeof v));
    assert_true(atoi(v) >= 1);
    assert_non_null(strstr(r.body, "could not start"));
    hc_response_free(&r);
    /* low priority (X-Choir-Priority: low): 503 overload with Retry-After;
     * a priority that is neither low nor normal: 400 before the body */
    const char *low = "{\"model\":\"fake\",\"response_format\":\"pcm\",\"input\":\"low\"}";
    assert_int_equal(hc_post(port, "/v1/audio/speech", "application/json", low, strlen(low),
                             "X-Choir-Priority: low\r\n", &r, 10),
                     503);
    assert_non_null(hc_header(&r, "Retry-After", v, sizeof v));
    assert_non_null(strstr(r.body, "low-priority"));
    hc_response_free(&r);
    assert_int_equal(hc_post(port, "/v1/audio/speech", "application/json", low, strlen(low),
                             "X-Choir-Priority: urgent\r\n", &r, 10),
                     400);
    assert_non_null(strstr(r.body, "invalid_priority"));
    hc_response_free(&r);
    choir_engine_devices(e, dev, 2);
    assert_int_equal(dev[1].degraded, 1);
    assert_true(metric_of(e, "choir_device_degraded{device=\"gpu0\"}") == 1);
    /* its only GPU degraded: /health says degraded (503, Retry-After) */
    assert_int_equal(hc_get(port, "/health", &r, 10), 503);
    assert_non_null(hc_header(&r, "Retry-After", v, sizeof v));
    assert_true(atoi(v) >= 1);
    assert_non_null(strstr(r.body, "\"degraded\""));
    assert_non_null(strstr(r.body, "every GPU"));
    assert_non_null(strstr(r.body, "gpu0"));
    hc_response_free(&r);
    assert_true(metric_of(e, "choir_requests_rejected_total{reason=\"memory\"}") == 1);
    assert_true(metric_of(e, "choir_requests_rejected_total{reason=\"overload\"}") == 1);
    pthread_join(a.th, NULL);
    pthread_join(b.th, NULL);
    assert_int_equal(a.status, 200);
    assert_int_equal(b.status, 200);
    choir_engine_devices(e, dev, 2);
    assert_true(dev[1].peak <= dev[1].budget);
    choir_server_free(srv);
    choir_engine_shutdown(e, 5);
    choir_engine_free(e);
}

/* Two GPUs, the model on one of them: while a request holds 87.5% of that
 * GPU's room, /health stays 200 "ok" (the other GPU serves) and names the
 * degraded one with its pressure; once the request is done and the hold
 * has passed, the plain "ok" comes back. */
static void test_device_pressure_health(void **state)
{
    (void)state;
    choir_engine *e;
    choir_server *srv = pressure_server(2, 600, "gpu_health", &e);
    int port = choir_server_port(srv);
    assert_int_equal(run_tts(e, "fake", "w"), 0);
    hc_response r;
    assert_int_equal(hc_get(port, "/health", &r, 10), 200);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    hc_response_free(&r);
    const char *body = "{\"model\":\"fake\",\"response_format\":\"pcm\",\"input\":"
                       "\"aaaaaaaaaabbbbbbbbbbccccccccccddddddddddeeeeeeeeeeffffffffffgggggggggg\"}";
    http_call a = {.port = port, .body = body};
    assert_int_equal(pthread_create(&a.th, NULL, http_call_run, &a), 0);
    choir_engine_device dev[3];
    int hot = 0;
    for (int i = 0; i < 500 && !hot; i++) {
        choir_engine_devices(e, dev, 3);
        hot = dev[1].degraded ? 1 : dev[2].degraded ? 2 : 0;
        if (!hot)
            sleep_ms(5);
    }
    assert_true(hot > 0);
    assert_int_equal(dev[3 - hot].degraded, 0);
    assert_int_equal(hc_get(port, "/health", &r, 10), 200);
    char want[96];
    snprintf(want, sizeof want, "{\"status\":\"ok\",\"devices_degraded\":[{\"device\":\"%s\",\"pressure\":0.875}]}",
             dev[hot].name);
    assert_string_equal(r.body, want);
    hc_response_free(&r);
    pthread_join(a.th, NULL);
    assert_int_equal(a.status, 200);
    int ok = 0;
    for (int i = 0; i < 600 && !ok; i++) {
        assert_int_equal(hc_get(port, "/health", &r, 10), 200);
        ok = strcmp(r.body, "{\"status\":\"ok\"}") == 0;
        hc_response_free(&r);
        if (!ok)
            sleep_ms(5);
    }
    assert_true(ok);
    choir_server_free(srv);
    choir_engine_shutdown(e, 5);
    choir_engine_free(e);
}

int main(void)
{
    choir_log_set_level(CHOIR_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices_and_filter),
        cmocka_unit_test(test_placement_and_metrics),
        cmocka_unit_test(test_replica_under_load),
        cmocka_unit_test(test_device_pressure_http),
        cmocka_unit_test(test_device_pressure_health),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
