/* `choir bench engine`: throughput and latency of the scheduler under open-loop
 * load, with and without batching, on a fake model whose cost is that of a
 * batched model (a fixed cost per batch plus a cost per padded character).
 * The fake model sleeps instead of computing, so the figures measure the
 * scheduler and not the machine, and the benchmark is light on a shared box. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/engine.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "choir/parse.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"
#include "models/fake/fake_model.h"

typedef struct bench_opts {
    double duration_s;
    double loads[16];
    int n_loads;
    int workers, max_batch;
    double fixed_ms, per_char_us, wait_ms;
} bench_opts;

static const char synopsis[] =
    "usage: choir bench engine [--duration S] [--loads R1,R2,...] [--workers N]\n"
    "                          [--max-batch N] [--fixed-ms MS] [--per-char-us US] [--wait-ms MS]\n"
    "Offers Poisson TTS load at each rate (requests/s) for S seconds to an engine\n"
    "with batching (max batch N) and without (batch 1), and prints throughput and\n"
    "latency percentiles.\n\n";

static void sleep_until(uint64_t t_ns)
{
    uint64_t now = choir_now_ns();
    if (t_ns <= now)
        return;
    uint64_t d = t_ns - now;
    struct timespec ts = {.tv_sec = (time_t)(d / 1000000000ULL), .tv_nsec = (long)(d % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Sentences of 20..140 characters, as TTS traffic looks after splitting. */
static const char *sentence(uint64_t *rng, char *buf, size_t cap)
{
    static const char *words[] = {"the", "choir", "sings", "quietly", "while", "evening", "light",
                                  "falls", "across", "old", "stone", "walls", "and", "voices", "rise"};
    *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
    size_t want = 20 + (size_t)((*rng >> 33) % 121);
    size_t len = 0;
    buf[0] = 0;
    while (len < want && len + 10 < cap) {
        *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? " " : "", words[(*rng >> 33) % 15]);
    }
    return buf;
}

typedef struct run_result {
    double offered, throughput, audio_rate, mean_batch;
    uint64_t completed, rejected;
    choir_latency_summary total, first, wait;
} run_result;

static int run_load(const bench_opts *o, const char *dir, double rate, int max_batch, run_result *res)
{
    choir_err err = {0};
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.memory_budget = (int64_t)1 << 30;
    p.workers = o->workers;
    p.max_batch = max_batch;
    p.wait_short_ms = o->wait_ms;
    p.wait_long_ms = o->wait_ms;
    p.queue_capacity = 4096;
    choir_engine *e = choir_engine_create(&p, &err);
    if (!e || choir_engine_add_model(e, "fake", dir, &choir_model_fake, &err) < 0) {
        fprintf(stderr, "choir bench engine: %s\n", err.msg);
        choir_engine_free(e);
        return 1;
    }
    size_t cap = (size_t)(rate * o->duration_s * 2) + 16;
    choir_ticket **tickets = calloc(cap, sizeof *tickets);
    char (*texts)[160] = calloc(cap, sizeof *texts);
    if (!tickets || !texts) {
        free(tickets);
        free(texts);
        choir_engine_free(e);
        return 1;
    }
    uint64_t rng = 42, start = choir_now_ns(), end = start + (uint64_t)(o->duration_s * 1e9);
    double t = 0;
    size_t n = 0;
    uint64_t rejected = 0;
    while (n < cap) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(rng >> 11) / 9007199254740992.0;
        t += -log(1.0 - u) / rate;
        uint64_t at = start + (uint64_t)(t * 1e9);
        if (at >= end)
            break;
        sleep_until(at);
        choir_job j = {.req.task = CHOIR_TASK_TTS, .priority = CHOIR_PRIORITY_NORMAL};
        j.req.in.tts.text = sentence(&rng, texts[n], sizeof texts[n]);
        j.req.stream = 1;
        choir_ticket *tk = choir_engine_submit(e, &j, NULL, NULL);
        if (tk)
            tickets[n++] = tk;
        else
            rejected++;
    }
    for (size_t i = 0; i < n; i++) {
        choir_ticket_wait(tickets[i], -1, NULL);
        choir_ticket_free(tickets[i]);
    }
    double wall = (double)(choir_now_ns() - start) * 1e-9;
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    res->offered = (double)(n + rejected) / o->duration_s;
    res->completed = st.completed;
    res->rejected = rejected;
    res->throughput = (double)st.completed / wall;
    res->audio_rate = st.audio_seconds / wall;
    res->mean_batch = st.batches ? (double)st.completed / (double)st.batches : 0;
    res->total = st.total;
    res->first = st.first_output;
    res->wait = st.queue_wait;
    free(tickets);
    free(texts);
    choir_engine_free(e);
    return 0;
}

int choir_bench_engine(int argc, char **argv)
{
    bench_opts o = {.duration_s = 3, .loads = {10, 30, 60, 120}, .n_loads = 4, .workers = 1, .max_batch = 8,
                    .fixed_ms = 20, .per_char_us = 50, .wait_ms = 50};
    /* --workers and --max-batch are the engine's own flags (same bounds) */
    choir_engine_params ep = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    ep.workers = o.workers;
    ep.max_batch = o.max_batch;
    const char *loads = NULL;
    const cli_opt flags[] = {
        {"--duration", CLI_DOUBLE, &o.duration_s, 0.001, 3600, "S", "seconds of load per run (default 3)"},
        {"--loads", CLI_STRING, &loads, 0, 0, "R1,R2,...", "offered rates, requests/s (default 10,30,60,120)"},
        {"--workers", CLI_ENGINE, &ep, 0, 0, "N", "engine workers (default 1)"},
        {"--max-batch", CLI_ENGINE, &ep, 0, 0, "N", "largest batch when batching (default 8)"},
        {"--fixed-ms", CLI_DOUBLE, &o.fixed_ms, 0, 1e6, "MS", "fake model's cost per batch (default 20)"},
        {"--per-char-us", CLI_DOUBLE, &o.per_char_us, 0, 1e6, "US", "its cost per padded character (default 50)"},
        {"--wait-ms", CLI_DOUBLE, &o.wait_ms, 0.001, 60000, "MS", "batch wait limit (default 50)"},
    };
    const cli_spec spec = {.cmd = "bench engine", .synopsis = synopsis, .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0)
        return parsed;
    if (loads && (o.n_loads = cli_parse_numbers(loads, 1e-6, 1e9, 0, o.loads, 16)) < 0) {
        fprintf(stderr, "choir bench engine: --loads needs 1..16 rates > 0 separated by commas, got '%s'\n", loads);
        return 2;
    }
    o.workers = ep.workers;
    o.max_batch = ep.max_batch;
    choir_log_set_level(CHOIR_LOG_WARN);
    char dir[] = "/tmp/choir-bench-engine-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("choir bench engine: mkdtemp");
        return 1;
    }
    choir_fake_params fp = {.fixed_ms = o.fixed_ms, .per_unit_us = o.per_char_us, .bytes_per_unit = 64,
                            .pieces = 4};
    choir_err err;
    int rc = 0;
    if (choir_fake_model_write(dir, &fp, &err) < 0) {
        fprintf(stderr, "choir bench engine: %s\n", err.msg);
        rc = 1;
        goto out;
    }
    printf("fake TTS model: %.1f ms per batch + %.1f us per padded character; %d worker(s); %.1f s per run\n",
           o.fixed_ms, o.per_char_us, o.workers, o.duration_s);
    printf("%-9s %6s %8s %8s %8s %9s %9s %9s %9s %9s %6s\n", "batching", "offer", "done/s", "audio/s", "batch",
           "wait p50", "ttfa p50", "total p50", "total p99", "ttfa p99", "refus");
    for (int li = 0; li < o.n_loads && rc == 0; li++) {
        for (int mode = 0; mode < 2 && rc == 0; mode++) {
            int mb = mode == 0 ? 1 : o.max_batch;
            run_result r;
            rc = run_load(&o, dir, o.loads[li], mb, &r);
            if (rc)
                break;
            printf("%-9s %6.0f %8.1f %8.1f %8.2f %7.0fms %7.0fms %7.0fms %7.0fms %7.0fms %6llu\n",
                   mode == 0 ? "off (1)" : "on", r.offered, r.throughput, r.audio_rate, r.mean_batch,
                   r.wait.p50 * 1e3, r.first.p50 * 1e3, r.total.p50 * 1e3, r.total.p99 * 1e3, r.first.p99 * 1e3,
                   (unsigned long long)r.rejected);
            fflush(stdout);
        }
    }
out:;
    char cfg[4200], st[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    unlink(cfg);
    unlink(st);
    rmdir(dir);
    return rc;
}
