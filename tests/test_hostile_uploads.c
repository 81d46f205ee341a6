// ctest: labels=server timeout=300
/* Audio bombs against `choir serve`: small uploads that decode to a great
 * deal of audio are admitted against the memory budget before they are
 * decoded, so four at once keep the server's peak resident set within 1.15x
 * its --memory-budget (before: four 4-hour Ogg files took a 1-GiB server to
 * 3.9 GiB, a 20-kB WAV claiming 1 Hz to 1.3 GB).
 *
 * CI scale: a 256-MiB budget and 1-hour bombs (0.23 GB decoded each: one
 * fits, three do not fit beside it). CHOIR_HOSTILE_FULL=1 runs the issue's
 * scale: a 1-GiB budget and 4-hour bombs (0.92 GB each). The bombs are made
 * on the spot (tests/support/bombs.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bombs.h"
#include "httpc.h"
#include "testutil.h"

/* Under ASan the server's resident set holds its quarantine of freed
 * memory and the shadow: the budget is still checked (every status), the
 * resident set only printed. */
#ifdef CHOIR_SANITIZE
#define RSS_WITHIN(peak, budget_mib) 1
#else
#define RSS_WITHIN(peak, budget_mib) ((peak) <= (long)(1.15 * (budget_mib) * 1024))
#endif

static char g_models[1024];
static int g_full;

typedef struct shot {
    int port;
    const char *model;
    const unsigned char *file;
    size_t file_len;
    hc_response r;
} shot;

static void *fire(void *arg)
{
    shot *s = arg;
    const char *fields[] = {"model", s->model, "response_format", "json", NULL};
    size_t len;
    char *body = hc_multipart(fields, s->file, s->file_len, &len);
    hc_post(s->port, "/v1/audio/transcriptions", HC_MULTIPART_TYPE, body, len, NULL, &s->r, 120);
    free(body);
    return NULL;
}

/* Sends `n` uploads of `file` at once; fills statuses. */
static void volley(int port, const char *model, const unsigned char *file, size_t len, int n, shot *shots)
{
    pthread_t th[8];
    for (int i = 0; i < n; i++) {
        shots[i] = (shot){.port = port, .model = model, .file = file, .file_len = len};
        pthread_create(&th[i], NULL, fire, &shots[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

static const char *code_of(const hc_response *r)
{
    static char code[64];
    const char *p = r->body ? strstr(r->body, "\"code\":\"") : NULL;
    if (!p)
        return "";
    p += 8;
    size_t n = strcspn(p, "\"");
    snprintf(code, sizeof code, "%.*s", (int)(n < 63 ? n : 63), p);
    return code;
}

static int admitted(const hc_response *r)
{
    return r->status == 200 ? strstr(r->body, "samples") != NULL
                            : r->status == 413 && strcmp(code_of(r), "too_large") == 0;
}

static void test_bombs_stay_within_the_budget(void **state)
{
    (void)state;
    const long budget_mib = g_full ? 1024 : 256;
    const double bomb_hours = g_full ? 4 : 1;
    char args[2048];
    snprintf(args, sizeof args, "--models '%s' --memory-budget %ldM --preload", g_models, budget_mib);
    hc_server srv;
    assert_int_equal(hc_server_start(&srv, "bombs", args), 0);
    hc_response r;
    for (int i = 0; i < 100 && hc_get(srv.port, "/health", &r, 2) != 200; i++) {
        hc_response_free(&r);
        usleep(50 * 1000);
    }
    hc_response_free(&r);

    size_t n;
    unsigned char *bomb = bomb_vorbis_silence(bomb_hours * 3600, 16000, &n);
    assert_non_null(bomb);
    shot shots[4];
    double t0 = hc_now();
    volley(srv.port, "stt", bomb, n, 4, shots);
    int ok = 0, busy = 0;
    double slowest_refusal = 0;
    for (int i = 0; i < 4; i++) {
        int st = shots[i].r.status;
        char v[32];
        /* Admitted: transcribed, or (once the decoded audio has pushed the
         * engine past its high-water mark and the idle fake model was
         * unloaded, so that its pessimistic unloaded estimate applies)
         * refused by the engine as too large. Either way it was decoded. */
        if (admitted(&shots[i].r))
            ok++;
        if (st == 503) {
            busy++;
            assert_string_equal(code_of(&shots[i].r), "memory_busy");
            assert_non_null(hc_header(&shots[i].r, "Retry-After", v, sizeof v));
            if (shots[i].r.seconds > slowest_refusal)
                slowest_refusal = shots[i].r.seconds;
        }
        if (st != 200 && st != 503 && st != 413)
            fprintf(stderr, "bomb %d: %d %s\n", i, st, shots[i].r.body ? shots[i].r.body : "");
    }
    long peak = hc_server_peak_rss_kb(&srv);
    print_message("four %.0f-hour Vorbis bombs (%zu bytes each) at once, budget %ld MiB: %d admitted, %d "
                  "refused 503 (the slowest refusal after %.3f s), all done in %.1f s; peak RSS %.0f MiB = "
                  "%.2fx the budget\n",
                  bomb_hours, n, budget_mib, ok, busy, slowest_refusal, hc_now() - t0, peak / 1024.0,
                  peak / 1024.0 / budget_mib);
    assert_int_equal(ok + busy, 4);
    assert_true(ok >= 1);
    assert_true(RSS_WITHIN(peak, budget_mib));
    for (int i = 0; i < 4; i++)
        hc_response_free(&shots[i].r);

    /* refused ones succeed once the memory is free again */
    volley(srv.port, "stt", bomb, n, 1, shots);
    assert_true(admitted(&shots[0].r));
    hc_response_free(&shots[0].r);
    free(bomb);

    /* bombs larger than the whole budget: 413 at once, from the header */
    bomb = bomb_vorbis_silence(g_full ? 5 * 3600 : 4 * 3600 * 0.75, 16000, &n);
    t0 = hc_now();
    volley(srv.port, "stt", bomb, n, 4, shots);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(shots[i].r.status, 413);
        assert_string_equal(code_of(&shots[i].r), g_full ? "audio_too_long" : "audio_too_large");
        hc_response_free(&shots[i].r);
    }
    print_message("four bombs over the budget: 413 in %.3f s\n", hc_now() - t0);
    free(bomb);

    /* 20 kB claiming 1 Hz */
    unsigned char *wav = bomb_wav(1, 10000, &n);
    volley(srv.port, "stt", wav, n, 4, shots);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(shots[i].r.status, 415);
        assert_non_null(strstr(shots[i].r.body, "1 Hz"));
        hc_response_free(&shots[i].r);
    }
    free(wav);
    peak = hc_server_peak_rss_kb(&srv);
    print_message("after every bomb: peak RSS %.0f MiB = %.2fx the budget\n", peak / 1024.0,
                  peak / 1024.0 / budget_mib);
    assert_true(RSS_WITHIN(peak, budget_mib));

    char *metrics;
    assert_int_equal(hc_get(srv.port, "/metrics", &r, 5), 200);
    metrics = r.body;
    assert_true(hc_metric(metrics, "choir_input_refused_total") >= busy);
    hc_response_free(&r);
    assert_int_equal(hc_server_stop(&srv, 15, 20), 0);
}

static void test_duration_limits(void **state)
{
    (void)state;
    char args[2048];
    snprintf(args, sizeof args, "--models '%s' --max-audio-s 600 --max-audio-s short=60", g_models);
    hc_server srv;
    assert_int_equal(hc_server_start(&srv, "limits", args), 0);
    size_t n;
    shot s[1];
    /* 20 minutes: over 600 s for both models, refused from the header */
    unsigned char *long_one = bomb_vorbis_silence(1200, 16000, &n);
    volley(srv.port, "stt", long_one, n, 1, s);
    assert_int_equal(s[0].r.status, 413);
    assert_string_equal(code_of(&s[0].r), "audio_too_long");
    assert_non_null(strstr(s[0].r.body, "at most 600 s"));
    hc_response_free(&s[0].r);
    free(long_one);
    /* 90 s: fine for one, over the other's 60 */
    unsigned char *mid = bomb_vorbis_silence(90, 16000, &n);
    volley(srv.port, "stt", mid, n, 1, s);
    assert_int_equal(s[0].r.status, 200);
    hc_response_free(&s[0].r);
    volley(srv.port, "short", mid, n, 1, s);
    assert_int_equal(s[0].r.status, 413);
    assert_non_null(strstr(s[0].r.body, "at most 60 s"));
    hc_response_free(&s[0].r);
    /* a WAV without a stated length (streaming placeholder) is cut while decoding */
    unsigned char *wav = bomb_wav(8000, 8000 * 70, &n);
    uint32_t unknown = 0xFFFFFFFFu;
    memcpy(wav + 40, &unknown, 4);
    volley(srv.port, "short", wav, n, 1, s);
    assert_int_equal(s[0].r.status, 413);
    assert_string_equal(code_of(&s[0].r), "audio_too_long");
    hc_response_free(&s[0].r);
    free(wav);
    free(mid);
    assert_int_equal(hc_server_stop(&srv, 15, 20), 0);
    /* an unknown model id in the flag is a usage error */
    snprintf(args, sizeof args, "--models '%s' --max-audio-s nosuch=60", g_models);
    assert_int_not_equal(hc_server_start(&srv, "badlimit", args), 0);
}

static void test_bodies_are_admitted(void **state)
{
    (void)state;
    char args[2048];
    snprintf(args, sizeof args, "--models '%s' --memory-budget 8M --max-upload 25", g_models);
    hc_server srv;
    assert_int_equal(hc_server_start(&srv, "bodies", args), 0);
    /* 12 MB of body into an 8-MiB budget: refused while it arrives, with
     * the rest read and dropped so that the client gets its answer */
    size_t len = 12u << 20;
    char *junk = malloc(len);
    memset(junk, 'a', len);
    hc_response r;
    assert_int_equal(hc_post(srv.port, "/v1/audio/transcriptions", HC_MULTIPART_TYPE, junk, len, NULL, &r, 30), 503);
    assert_string_equal(code_of(&r), "memory_busy");
    hc_response_free(&r);
    /* and chunked */
    int fd = hc_connect(NULL, srv.port);
    const char *head = "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: " HC_MULTIPART_TYPE
                       "\r\nTransfer-Encoding: chunked\r\n\r\n";
    hc_send(fd, head, strlen(head));
    for (int i = 0; i < 12; i++) {
        char size[32];
        int k = snprintf(size, sizeof size, "%x\r\n", 1 << 20);
        hc_send(fd, size, (size_t)k);
        hc_send(fd, junk, 1 << 20);
        hc_send(fd, "\r\n", 2);
    }
    hc_send(fd, "0\r\n\r\n", 5);
    assert_int_equal(hc_read_response(fd, &r, 30), 503);
    hc_response_free(&r);
    close(fd);
    free(junk);
    assert_int_equal(hc_get(srv.port, "/health", &r, 5), 200);
    hc_response_free(&r);
    assert_int_equal(hc_server_stop(&srv, 15, 20), 0);
}

static int setup(void **state)
{
    (void)state;
    g_full = getenv("CHOIR_HOSTILE_FULL") && atoi(getenv("CHOIR_HOSTILE_FULL"));
    snprintf(g_models, sizeof g_models, "%s", tu_tmpfile("models"));
    /* a transcriber whose batches need no activation memory, so that what
     * the budget holds is the decoded audio */
    hc_fake_model(g_models, "stt", ", \"fixed_ms\": 5, \"bytes_per_unit\": 0");
    hc_fake_model(g_models, "short", ", \"fixed_ms\": 5, \"bytes_per_unit\": 0");
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bombs_stay_within_the_budget),
        cmocka_unit_test(test_duration_limits),
        cmocka_unit_test(test_bodies_are_admitted),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
