/* `choir serve`: the OpenAI-compatible HTTP server over an engine with the
 * models found in the --models directories. Runs until SIGTERM or SIGINT,
 * then stops gracefully: no new connections, in-flight work gets
 * --shutdown-deadline seconds, the rest is cancelled. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "choir/engine.h"
#include "choir/log.h"
#include "choir/server.h"
#include "cli/cli.h"
#include "cli/opt.h"

#define MAX_MODEL_DIRS 16
#define MAX_ALIASES 32

static void report_stop(int cut)
{
    if (cut > 0)
        fprintf(stderr, "choir serve: %d request%s cut short at the deadline\n", cut, cut == 1 ? "" : "s");
    else
        fprintf(stderr, "choir serve: stopped cleanly\n");
}

/* The shutdown deadline is a promise to whoever sent the signal (a process
 * manager that sends SIGKILL next): if stopping has not finished by then (a
 * model step that does not look at its cancel flag for a while), the process
 * leaves without waiting for it. */
typedef struct stop_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    double deadline_s;
    choir_server *server;
} stop_guard;

static void *stop_guard_main(void *arg)
{
    stop_guard *g = arg;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double whole = floor(g->deadline_s);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((g->deadline_s - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g->mu);
    int late = 0;
    while (!g->done && !late)
        late = pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT;
    pthread_mutex_unlock(&g->mu);
    if (late && !g->done) {
        int cut = choir_server_requests_cut(g->server);
        report_stop(cut > 0 ? cut : 1);
        fprintf(stderr, "choir serve: running work did not stop by the deadline; exiting without it\n");
        fflush(stderr);
        _exit(0);
    }
    return NULL;
}

/* Waits for SIGTERM or SIGINT and returns it. With --preload, says once
 * the preload is done how it went; with --preload-strict, returns 0 instead
 * when a model failed. */
static int wait_for_stop(choir_server *server, const sigset_t *stop_signals, int preload, int strict)
{
    int pending = preload;
    while (pending) {
        struct timespec tick = {0, 100 * 1000 * 1000};
        int sig = sigtimedwait(stop_signals, NULL, &tick);
        if (sig > 0)
            return sig;
        int failed = 0, tried = 0;
        if (choir_server_preload_done(server, &failed, &tried) != 1)
            continue;
        pending = 0;
        if (failed == 0) {
            fprintf(stderr, "choir serve: preloaded %d model%s\n", tried, tried == 1 ? "" : "s");
            continue;
        }
        fprintf(stderr, "choir serve: preload: %d of %d model%s failed (logged above)%s\n", failed, tried,
                tried == 1 ? "" : "s",
                strict ? "; exiting (--preload-strict)" : "; the others are served, /health names the failed");
        if (strict)
            return 0;
    }
    int sig = 0;
    sigwait(stop_signals, &sig);
    return sig;
}

/* The values of --cors, joined with commas into `out` (the server's form).
 * 0, or -1 for an empty one or too many bytes in all. */
static int join_origins(const cli_list *cors, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < cors->n; i++) {
        int w = snprintf(out + used, cap - used, "%s%s", used ? "," : "", cors->items[i]);
        if (!*cors->items[i] || w < 0 || (size_t)w >= cap - used)
            return -1;
        used += (size_t)w;
    }
    return 0;
}

/* NAME=VALUE with both parts given. */
static int is_pair(const char *v)
{
    const char *eq = strchr(v, '=');
    return eq && eq != v && eq[1];
}

int choir_cmd_serve(int argc, char **argv)
{
    choir_server_params sp = choir_server_default_params();
    choir_engine_params ep = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    const char *dir_args[MAX_MODEL_DIRS], *alias_args[MAX_ALIASES], *voice_alias_args[MAX_ALIASES];
    const char *cors_args[MAX_ALIASES], *audio_args[MAX_MODEL_DIRS];
    cli_list dirs = {dir_args, MAX_MODEL_DIRS, 0}, aliases = {alias_args, MAX_ALIASES, 0};
    cli_list voice_aliases = {voice_alias_args, MAX_ALIASES, 0}, cors = {cors_args, MAX_ALIASES, 0};
    cli_list max_audio = {audio_args, MAX_MODEL_DIRS, 0};
    const char *port_file = NULL, *api_key = NULL, *admin_key = NULL;
    int upload_mb = 25, preload = 0, strict = 0, json = 0, no_ui = 0;
    double deadline = 10;
    choir_err err = {0};
    /* Each flag is one row: where its value goes (already holding the
     * default), its bounds and its usage line. */
    const cli_opt flags[] = {
        {"--models", CLI_LIST, &dirs, 0, 0, "DIR", "a model directory, or a folder of them (repeatable, up to 16)"},
        {"--host", CLI_STRING, &sp.host, 0, 0, "ADDR", "IPv4 address to bind (default 127.0.0.1)"},
        {"--port", CLI_INT, &sp.port, 0, 65535, "N", "TCP port (default 8000; 0 picks a free one)"},
        {"--port-file", CLI_STRING, &port_file, 0, 0, "PATH", "write the bound port to PATH once listening"},
        {"--api-key", CLI_STRING, &api_key, 0, 0, "KEY", "require \"Authorization: Bearer KEY\" (also $CHOIR_API_KEY)"},
        {"--admin-key", CLI_STRING, &admin_key, 0, 0, "KEY",
         "enable model administration (POST/DELETE /v1/models, for\ndirectories inside the --models folders) with its own "
         "key\n(also $CHOIR_ADMIN_KEY; off without one)"},
        {"--max-upload", CLI_INT, &upload_mb, 1, 1 << 20, "MB", "largest request body (default 25)"},
        {"--no-ui", CLI_FLAG, &no_ui, 0, 0, NULL, "do not serve the web page at /"},
        {"--cors", CLI_LIST, &cors, 0, 0, "ORIGIN",
         "let pages from ORIGIN call the API from a browser (repeatable,\nor comma-separated; * for any)"},
        {"--alias", CLI_LIST, &aliases, 0, 0, "NAME=MODEL",
         "requests for model NAME go to MODEL (repeatable; by default\ntts-1, tts-1-hd, gpt-4o-mini-tts go to the first TTS "
         "model,\nwhisper-1, gpt-4o-transcribe to the first STT model)"},
        {"--voice-alias", CLI_LIST, &voice_aliases, 0, 0, "NAME=VOICE",
         "voice NAME stands for VOICE (repeatable; by default OpenAI's\nvoices, alloy, echo, nova..., map to similar Kokoro "
         "voices)"},
        {"--json", CLI_FLAG, &json, 0, 0, NULL, "print {\"url\",\"port\",\"models\",\"profile\"} on stdout once listening"},
        {"--preload", CLI_FLAG, &preload, 0, 0, NULL,
         "load every model at start (/health is 503 until done); a model\nthat fails is logged and named by /health, the "
         "others are served"},
        {"--preload-strict", CLI_FLAG, &strict, 0, 0, NULL, "--preload, and exit 1 when any model fails to load"},
        {"--request-timeout", CLI_DOUBLE, &sp.request_timeout_s, CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S, "S",
         "deadline per request, queue and compute (default 300;\na client may ask for less: X-Request-Timeout: S)"},
        {"--max-audio-s", CLI_LIST, &max_audio, 0, 0, "[ID=]S",
         "longest audio input, seconds: for every model (the engine's\n--max-audio-s), or with ID= for one (repeatable)"},
        {"--max-connections", CLI_INT, &sp.max_connections, 1, CHOIR_SERVER_MAX_CONNECTIONS, "N", "client connections in all (default 1024)"},
        {"--max-client-connections", CLI_INT, &sp.max_client_connections, -1, CHOIR_SERVER_MAX_CONNECTIONS, "N",
         "from one IP address (default 64; -1: no limit, for a proxy\nthat sends all traffic)"},
        {"--header-timeout", CLI_DOUBLE, &sp.header_timeout_s, CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S, "S",
         "a request header must be complete within S (default 20)"},
        {"--keepalive-timeout", CLI_DOUBLE, &sp.keepalive_timeout_s, CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S, "S",
         "more time for the next request on a kept-alive connection\n(default 60)"},
        {"--body-timeout", CLI_DOUBLE, &sp.body_timeout_s, CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S, "S",
         "grace before the body rate floor applies (default 20)"},
        {"--body-min-rate", CLI_DOUBLE, &sp.body_min_rate, -1, CHOIR_SERVER_MAX_BODY_RATE, "B",
         "bytes/s a request body must then keep up (default 500; -1: none)"},
        {"--idle-timeout", CLI_DOUBLE, &sp.idle_timeout_s, CHOIR_SERVER_MIN_IDLE_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S, "S",
         "close a connection without any traffic for S (default 120)"},
        {"--shutdown-deadline", CLI_DOUBLE, &deadline, 0, 1e9, "S", "seconds in-flight work gets on SIGTERM (default 10)"},
    };
    const cli_spec spec = {
        .cmd = "serve",
        .synopsis = "usage: choir serve [--models DIR ...] [options]\n"
                    "\n"
                    "Serves the models found in each DIR (a model directory, or a folder of them;\n"
                    "a model's id is its directory's name) over an OpenAI-compatible HTTP API.\n"
                    "Without --models: $CHOIR_MODELS, else ~/.cache/choir/models (as choir info).\n"
                    "\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
        .engine = &ep,
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0)
        return parsed;

    /* What one row cannot say: pairs, the one excluded value, and which
     * values go to the engine. */
    for (int i = 0; i < aliases.n + voice_aliases.n; i++) {
        int voice = i >= aliases.n;
        const char *v = voice ? voice_aliases.items[i - aliases.n] : aliases.items[i];
        if (!is_pair(v)) {
            fprintf(stderr, "choir serve: --%salias needs NAME=%s, got '%s'\n", voice ? "voice-" : "",
                    voice ? "VOICE" : "MODEL", v);
            return 2;
        }
    }
    char origins[1024];
    if (join_origins(&cors, origins, sizeof origins) < 0) {
        fprintf(stderr, "choir serve: --cors needs an origin, %zu bytes at most in all\n", sizeof origins - 1);
        return 2;
    }
    sp.cors = cors.n ? origins : NULL;
    if (sp.max_client_connections == 0) {
        fprintf(stderr, "choir serve: --max-client-connections needs -1 (no limit) or at least 1, got '0'\n");
        return 2;
    }
    /* only the rate floor can be turned off (-1) */
    if (sp.body_min_rate <= 0 && sp.body_min_rate != -1) {
        fprintf(stderr, "choir serve: --body-min-rate needs a positive number of bytes/s, or -1 for none\n");
        return 2;
    }
    char limit_ids[MAX_MODEL_DIRS][128];
    double limit_secs[MAX_MODEL_DIRS];
    int n_limits = 0;
    for (int i = 0; i < max_audio.n; i++) {
        const char *v = max_audio.items[i], *eq = strrchr(v, '=');
        if (!eq) {
            /* the engine's flag: every model (after the profile, as given) */
            if (choir_engine_apply_option(&ep, "max-audio-s", v, &err) < 0) {
                fprintf(stderr, "choir serve: %s\n", err.msg);
                return 2;
            }
            continue;
        }
        /* One model's limit is the same quantity: read and bounded by the
         * engine's row too, so both forms take the same values. */
        choir_engine_params one = ep;
        if (eq == v || (size_t)(eq - v) >= sizeof limit_ids[0]) {
            fprintf(stderr, "choir serve: --max-audio-s ID=S needs a model id and seconds, got '%s'\n", v);
            return 2;
        }
        if (choir_engine_apply_option(&one, "max-audio-s", eq + 1, &err) < 0) {
            fprintf(stderr, "choir serve: --max-audio-s ID=S needs a model id and seconds, got '%s' (%s)\n", v,
                    err.msg);
            return 2;
        }
        snprintf(limit_ids[n_limits], sizeof limit_ids[0], "%.*s", (int)(eq - v), v);
        limit_secs[n_limits++] = one.max_audio_seconds;
    }
    preload |= strict;
    sp.ui = !no_ui;
    sp.max_upload_bytes = (int64_t)upload_mb << 20;
    /* A key on the command line wins over the environment's. */
    const char *key_from[2] = {api_key ? "--api-key" : "$CHOIR_API_KEY", admin_key ? "--admin-key" : "$CHOIR_ADMIN_KEY"};
    sp.api_key = api_key ? api_key : getenv("CHOIR_API_KEY");
    sp.admin_key = admin_key ? admin_key : getenv("CHOIR_ADMIN_KEY");
    /* An empty key would serve without authentication and say nothing. */
    if ((sp.api_key && !*sp.api_key) || (sp.admin_key && !*sp.admin_key)) {
        int api = sp.api_key && !*sp.api_key;
        fprintf(stderr, "choir serve: %s is empty; give a key, or leave it out for %s\n", key_from[api ? 0 : 1],
                api ? "an API without a key" : "no model administration");
        return 2;
    }
    if (sp.api_key && sp.admin_key && strcmp(sp.api_key, sp.admin_key) == 0) {
        fprintf(stderr, "choir serve: the admin key must differ from the API key\n");
        return 2;
    }
    /* Without --models, the folder `choir info` and `choir vad` look in. */
    char default_dir[4096];
    if (dirs.n == 0) {
        const char *env = getenv("CHOIR_MODELS"), *home = getenv("HOME");
        if (env && *env)
            snprintf(default_dir, sizeof default_dir, "%s", env);
        else if (home && *home)
            snprintf(default_dir, sizeof default_dir, "%s/.cache/choir/models", home);
        else
            default_dir[0] = 0;
        struct stat st;
        if (!default_dir[0] || stat(default_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr,
                    "choir serve: no --models DIR given, and no models folder at %s "
                    "(set $CHOIR_MODELS, or put models in ~/.cache/choir/models)\n",
                    default_dir[0] ? default_dir : "$CHOIR_MODELS or ~/.cache/choir/models ($HOME unset)");
            cli_usage(&spec, stderr);
            return 2;
        }
        dir_args[dirs.n++] = default_dir;
    }
    choir_profile profile = ep.profile;

    /* One descriptor per connection, a thread each: the soft limit (often
     * 1024) would refuse connections long before --max-connections. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
        rlim_t want = (rlim_t)sp.max_connections + 256;
        if (nofile.rlim_cur < want) {
            nofile.rlim_cur = nofile.rlim_max < want ? nofile.rlim_max : want;
            setrlimit(RLIMIT_NOFILE, &nofile);
        }
        if (nofile.rlim_cur < want)
            choir_log(CHOIR_LOG_WARN, "only %llu file descriptors: fewer connections than --max-connections %d",
                      (unsigned long long)nofile.rlim_cur, sp.max_connections);
    }

    /* Signals are taken synchronously by this thread: blocked here, before
     * any thread starts, so every engine and HTTP thread inherits the mask. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* choir_engine_create checks whether the --gpus exist (or CUDA at all). */
    choir_engine *engine = choir_engine_create(&ep, &err);
    if (!engine && err.code == CHOIR_EINVAL) {
        fprintf(stderr, "choir serve: %s\n", err.msg);
        return 2;
    }
    choir_server *server = engine ? choir_server_create(engine, &sp, &err) : NULL;
    int rc = 1, n_models = 0;
    if (!server)
        goto fail;
    for (int i = 0; i < dirs.n; i++) {
        int n = choir_server_add_models_dir(server, dirs.items[i], &err);
        if (n < 0)
            goto fail;
        n_models += n;
    }
    if (n_models == 0)
        choir_log(CHOIR_LOG_WARN, "no models found in the --models directories");
    for (int i = 0; i < aliases.n + voice_aliases.n; i++) {
        int voice = i >= aliases.n;
        const char *pair = voice ? voice_aliases.items[i - aliases.n] : aliases.items[i];
        char name[256];
        const char *eq = strchr(pair, '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - pair), pair);
        if ((voice ? choir_server_add_voice_alias : choir_server_add_alias)(server, name, eq + 1, &err) < 0) {
            fprintf(stderr, "choir serve: --%salias %s: %s\n", voice ? "voice-" : "", pair, err.msg);
            rc = 2;
            goto done;
        }
    }
    for (int i = 0; i < n_limits; i++) {
        if (choir_engine_set_model_max_audio(engine, limit_ids[i], limit_secs[i], &err) < 0) {
            fprintf(stderr, "choir serve: --max-audio-s %s=%g: %s\n", limit_ids[i], limit_secs[i], err.msg);
            rc = 2;
            goto done;
        }
    }
    if (choir_server_start(server, &err) < 0)
        goto fail;
    int port = choir_server_port(server);
    /* before the port file: whoever waits for that file can read this line */
    if (json) {
        printf("{\"url\":\"http://%s:%d\",\"port\":%d,\"models\":%d,\"profile\":\"%s\"}\n", sp.host, port, port,
               n_models, choir_profile_name(profile));
        fflush(stdout);
    }
    if (port_file) {
        FILE *f = fopen(port_file, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0) {
            fprintf(stderr, "choir serve: cannot write %s\n", port_file);
            goto fail;
        }
    }
    if (preload) {
        if (choir_server_preload(server, &err) < 0)
            goto fail;
    } else {
        choir_server_set_ready(server, 1);
    }
    fprintf(stderr, "choir serve: listening on http://%s:%d (%d model%s, profile %s)\n", sp.host, port, n_models,
            n_models == 1 ? "" : "s", choir_profile_name(profile));
    choir_engine_device devs[1 + CHOIR_ENGINE_MAX_GPUS];
    int n_devs = choir_engine_devices(engine, devs, 1 + CHOIR_ENGINE_MAX_GPUS);
    for (int i = 1; i < n_devs && i <= CHOIR_ENGINE_MAX_GPUS; i++)
        fprintf(stderr, "choir serve: %s (%s): %.1f GiB budget of %.1f GiB\n", devs[i].name, devs[i].hw_name,
                (double)devs[i].budget / (1 << 30), (double)devs[i].total_bytes / (1 << 30));
    int sig = wait_for_stop(server, &stop_signals, preload, strict);
    if (sig == 0) {
        /* --preload-strict and a model failed: stop as on a signal, exit 1 */
        choir_server_shutdown(server, deadline);
        rc = 1;
        goto done;
    }
    /* Threads that libraries started before main (OpenBLAS's) do not block
     * these signals, so a second one would take the default action there:
     * SIGTERM is ignored from now on (the deadline bounds the stop anyway),
     * a second SIGINT stops at once, as a second Ctrl-C does. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, NULL);
    fprintf(stderr, "choir serve: %s: stopping (deadline %.1f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            deadline);
    pthread_t guard;
    stop_guard g = {.deadline_s = deadline, .server = server};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    int guarded = pthread_create(&guard, NULL, stop_guard_main, &g) == 0;
    choir_server_shutdown(server, deadline);
    if (guarded) {
        pthread_mutex_lock(&g.mu);
        g.done = 1;
        pthread_cond_signal(&g.cv);
        pthread_mutex_unlock(&g.mu);
        pthread_join(guard, NULL);
    }
    report_stop(choir_server_requests_cut(server));
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "choir serve: %s\n", err.msg[0] ? err.msg : "failed");
done:
    choir_server_free(server);
    choir_engine_free(engine);
    return rc;
}
