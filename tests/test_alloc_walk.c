// ctest: labels=server timeout=300
/* Allocation failures on the request path, one failure point at a time: an
 * in-process server (the fake model) answers speech (whole and streamed),
 * a transcription upload, an enhancement upload, the model list and
 * /metrics while the n-th counted allocation from the request's start fails,
 * for every n the request makes. Each time the client gets an answer (or, when the
 * failure leaves nothing to answer with, a closed connection), the counted
 * memory returns to what it was before the request (nothing leaked: the
 * allocator's counters, and LeakSanitizer in the sanitizer build), and the
 * server goes on serving: the same request without a failure is answered
 * 200. Loaders have their own walks (test_whisper, test_silero,
 * test_kokoro_mlx, test_mossformer2, test_vibevoice, test_safetensors, ...);
 * the engine's model-adapter path is walked here through the fake model's
 * load. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/encode.h"
#include "choir/engine.h"
#include "choir/log.h"
#include "choir/server.h"
#include "models/fake/fake_model.h"
#include "httpc.h"
#include "testutil.h"

static choir_engine *g_engine;
static choir_server *g_server;
static int g_port;

typedef struct walk_req {
    const char *name;
    const char *path;
    const char *content_type; /* NULL: GET */
    char *body;
    size_t len;
} walk_req;

static int send_req(const walk_req *w, hc_response *r)
{
    if (!w->content_type)
        return hc_get(g_port, w->path, r, 10);
    return hc_post(g_port, w->path, w->content_type, w->body, w->len, NULL, r, 10);
}

/* Waits until the counted memory is back to `base` (up to 20 s: a loaded
 * machine may take long to close a connection); returns the difference
 * left, after printing it by category. */
static int64_t settle(int64_t base)
{
    int64_t d = 0;
    for (int i = 0; i < 2000; i++) {
        d = choir_mem_current(CHOIR_MEM_COUNT) - base;
        if (d == 0)
            return 0;
        usleep(10 * 1000);
    }
    for (int c = 0; c < CHOIR_MEM_COUNT; c++)
        fprintf(stderr, "counted %s: %lld bytes\n", choir_mem_category_name((choir_mem_category)c),
                (long long)choir_mem_current((choir_mem_category)c));
    return d;
}

static void walk(const walk_req *w)
{
    hc_response r;
    /* twice without failures: the first may create what lives on (a loaded
     * model, metric series), the second gives the baseline and the count */
    assert_int_equal(send_req(w, &r), 200);
    hc_response_free(&r);
    /* the baseline once the connection's cleanup is done: the counted
     * memory stays put for 200 ms */
    int64_t base = choir_mem_current(CHOIR_MEM_COUNT);
    for (int i = 0, still = 0; i < 200 && still < 2; i++) {
        usleep(100 * 1000);
        int64_t now = choir_mem_current(CHOIR_MEM_COUNT);
        still = now == base ? still + 1 : 0;
        base = now;
    }
    choir_alloc_fail_after(0);
    assert_int_equal(send_req(w, &r), 200);
    hc_response_free(&r);
    assert_int_equal(settle(base), 0);
    int64_t count = choir_alloc_fail_after(0);
    int answered = 0, closed = 0, statuses[6] = {0};
    for (int64_t n = 1; n <= count + 2; n++) {
        choir_alloc_fail_after(n);
        int st = send_req(w, &r);
        choir_alloc_fail_after(0);
        hc_response_free(&r);
        if (st == 0) {
            closed++;
        } else {
            answered++;
            statuses[st / 100 < 6 ? st / 100 : 0]++;
            /* a failure is the server's, never the client's fault */
            if (st != 200 && st != 500 && st != 503)
                fail_msg("%s, allocation %lld failing: status %d", w->name, (long long)n, st);
        }
        int64_t left = settle(base);
        if (left != 0)
            fail_msg("%s, allocation %lld failing: %lld counted bytes left behind", w->name, (long long)n,
                     (long long)left);
        /* the same request, no failure: still served */
        assert_int_equal(send_req(w, &r), 200);
        hc_response_free(&r);
        assert_int_equal(settle(base), 0);
    }
    print_message("%-22s %3lld allocations: each failing gave %d answers (%d 2xx, %d 5xx) and %d closed "
                  "connections, nothing left behind\n",
                  w->name, (long long)count, answered, statuses[2], statuses[5], closed);
}

static void test_request_path(void **state)
{
    (void)state;
    float tone[1600];
    for (int i = 0; i < 1600; i++)
        tone[i] = 0.25f * (float)((i % 40) - 20) / 20.0f;
    void *wav = NULL;
    size_t wav_len = 0;
    choir_err err = {0};
    assert_int_equal(choir_audio_encode_memory(CHOIR_FORMAT_WAV16, tone, 1600, 16000, 1, &wav, &wav_len, &err), 0);
    static const char *const stt_fields[] = {"model", "fake", "response_format", "verbose_json", NULL};
    static const char *const sts_fields[] = {"model", "fake", "response_format", "wav", NULL};
    size_t stt_len, sts_len;
    char *stt = hc_multipart(stt_fields, wav, wav_len, &stt_len);
    char *sts = hc_multipart(sts_fields, wav, wav_len, &sts_len);
    choir_free(wav);
    static char speech[] = "{\"model\":\"fake\",\"input\":\"walk\",\"response_format\":\"wav\",\"stream\":false}";
    static char streamed[] = "{\"model\":\"fake\",\"input\":\"walk on\",\"stream_format\":\"sse\",\"response_format\":\"pcm\"}";
    walk_req reqs[] = {
        {"speech", "/v1/audio/speech", "application/json", speech, sizeof speech - 1},
        {"speech streamed (sse)", "/v1/audio/speech", "application/json", streamed, sizeof streamed - 1},
        {"transcription", "/v1/audio/transcriptions", HC_MULTIPART_TYPE, stt, stt_len},
        {"enhancement", "/v1/audio/enhancements", HC_MULTIPART_TYPE, sts, sts_len},
        {"model list", "/v1/models", NULL, NULL, 0},
        {"metrics", "/metrics", NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof reqs / sizeof *reqs; i++)
        walk(&reqs[i]);
    free(stt);
    free(sts);
}

/* The engine's adapter path: every allocation of a fake model's load (the
 * config parse, the weights) may fail; each failure is a clean error with
 * nothing left, and the next load succeeds. */
static void test_adapter_load(void **state)
{
    (void)state;
    const char *dir = tu_tmpfile("walk_fake_load");
    choir_fake_params fp = {.fixed_ms = 1, .bytes_per_unit = 16};
    choir_err err = {0};
    assert_int_equal(choir_fake_model_write(dir, &fp, &err), 0);
    choir_model_options opt = {0};
    int64_t base = choir_mem_current(CHOIR_MEM_COUNT);
    choir_alloc_fail_after(0);
    void *w = choir_model_fake.load(dir, &opt, &err);
    int64_t count = choir_alloc_fail_after(0);
    assert_non_null(w);
    choir_model_fake.free(w);
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), base);
    for (int64_t n = 1; n <= count; n++) {
        choir_alloc_fail_after(n);
        err = (choir_err){0};
        w = choir_model_fake.load(dir, &opt, &err);
        choir_alloc_fail_after(0);
        if (w) {
            choir_model_fake.free(w);
        } else {
            assert_true(err.code < 0);
            assert_true(err.msg[0] != 0);
        }
        assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), base);
    }
    print_message("fake model load: %lld allocations, each failing cleanly\n", (long long)count);
}

static int setup(void **state)
{
    (void)state;
    choir_log_set_level(CHOIR_LOG_ERROR);
    const char *dir = tu_tmpfile("walk_fake");
    choir_fake_params fp = {.fixed_ms = 1, .bytes_per_unit = 16};
    choir_err err = {0};
    if (choir_fake_model_write(dir, &fp, &err) < 0)
        return -1;
    choir_engine_params ep = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    ep.memory_budget = 256 << 20;
    ep.wait_short_ms = 0.01; /* no batching wait: hundreds of requests stay quick */
    ep.wait_long_ms = 0.01;
    g_engine = choir_engine_create(&ep, &err);
    choir_server_params sp = choir_server_default_params();
    sp.port = 0;
    g_server = g_engine ? choir_server_create(g_engine, &sp, &err) : NULL;
    if (!g_server || choir_server_add_model(g_server, "fake", dir, &err) < 0 || choir_server_start(g_server, &err) < 0) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    choir_server_set_ready(g_server, 1);
    g_port = choir_server_port(g_server);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    choir_server_free(g_server);
    choir_engine_free(g_engine);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_path),
        cmocka_unit_test(test_adapter_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
