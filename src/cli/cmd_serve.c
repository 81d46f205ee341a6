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

#define MAX_MODEL_DIRS 16
#define MAX_ALIASES 32

static void serve_usage(FILE *f)
{
    fprintf(f,
            "usage: choir serve [--models DIR ...] [options]\n"
            "\n"
            "Serves the models found in each DIR (a model directory, or a folder of them;\n"
            "a model's id is its directory's name) over an OpenAI-compatible HTTP API.\n"
            "Without --models: $CHOIR_MODELS, else ~/.cache/choir/models (as choir info).\n"
            "\n"
            "  --host ADDR            IPv4 address to bind (default 127.0.0.1)\n"
            "  --port N               TCP port (default 8000; 0 picks a free one)\n"
            "  --port-file PATH       write the bound port to PATH once listening\n"
            "  --api-key KEY          require \"Authorization: Bearer KEY\" (also $CHOIR_API_KEY)\n"
            "  --admin-key KEY        enable model administration (POST/DELETE /v1/models, for\n"
            "                         directories inside the --models folders) with its own key\n"
            "                         (also $CHOIR_ADMIN_KEY; off without one)\n"
            "  --max-upload MB        largest request body (default 25)\n"
            "  --no-ui                do not serve the web page at /\n"
            "  --cors ORIGIN          let pages from ORIGIN call the API from a browser (repeatable,\n"
            "                         or comma-separated; * for any)\n"
            "  --alias NAME=MODEL     requests for model NAME go to MODEL (repeatable; by default\n"
            "                         tts-1, tts-1-hd, gpt-4o-mini-tts go to the first TTS model,\n"
            "                         whisper-1, gpt-4o-transcribe to the first STT model)\n"
            "  --voice-alias NAME=VOICE  voice NAME stands for VOICE (repeatable; by default\n"
            "                         OpenAI's voices, alloy, echo, nova..., map to similar Kokoro voices)\n"
            "  --json                 print {\"url\",\"port\",\"models\",\"profile\"} on stdout once listening\n"
            "  --preload              load every model at start (/health is 503 until done); a model\n"
            "                         that fails is logged and named by /health, the others are served\n"
            "  --preload-strict       --preload, and exit 1 when any model fails to load\n"
            "  --request-timeout S    deadline per request, queue and compute (default 300;\n"
            "                         a client may ask for less: X-Request-Timeout: S)\n"
            "  --max-audio-s ID=S     --max-audio-s for one model (repeatable)\n"
            "  --max-connections N    client connections in all (default 1024)\n"
            "  --max-client-connections N  from one IP address (default 64; -1: no limit,\n"
            "                         for a proxy that sends all traffic)\n"
            "  --header-timeout S     a request header must be complete within S (default 20)\n"
            "  --keepalive-timeout S  more time for the next request on a kept-alive connection (default 60)\n"
            "  --body-timeout S       grace before the body rate floor applies (default 20)\n"
            "  --body-min-rate B      bytes/s a request body must then keep up (default 500; -1: none)\n"
            "  --idle-timeout S       close a connection without any traffic for S (default 120)\n"
            "  --shutdown-deadline S  seconds in-flight work gets on SIGTERM (default 10)\n"
            "\nengine options (the profile's values unless given; --profile applies first):\n%s",
            choir_engine_options_help());
}

/* The field a connection deadline flag sets, or NULL. */
static double *connection_time(choir_server_params *sp, const char *flag)
{
    if (strcmp(flag, "--header-timeout") == 0)
        return &sp->header_timeout_s;
    if (strcmp(flag, "--keepalive-timeout") == 0)
        return &sp->keepalive_timeout_s;
    if (strcmp(flag, "--body-timeout") == 0)
        return &sp->body_timeout_s;
    if (strcmp(flag, "--body-min-rate") == 0)
        return &sp->body_min_rate;
    if (strcmp(flag, "--idle-timeout") == 0)
        return &sp->idle_timeout_s;
    return NULL;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

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

int choir_cmd_serve(int argc, char **argv)
{
    const char *dirs[MAX_MODEL_DIRS];
    int n_dirs = 0;
    choir_server_params sp = choir_server_default_params();
    const char *profile_name = "default", *port_file = NULL;
    /* Engine options are checked as they come (choir_engine_apply_option)
     * and applied after the profile's defaults, whatever their order. */
    const char *engine_opts[64][2];
    int n_engine_opts = 0;
    int upload_mb = 25, preload = 0, strict = 0, json = 0;
    double deadline = 10;
    choir_err err = {0};
    char limit_ids[MAX_MODEL_DIRS][128];
    double limit_secs[MAX_MODEL_DIRS];
    int n_limits = 0;
    const char *aliases[MAX_ALIASES], *voice_aliases[MAX_ALIASES];
    int n_aliases = 0, n_voice_aliases = 0;
    char cors[1024] = "";
    sp.api_key = getenv("CHOIR_API_KEY");
    sp.admin_key = getenv("CHOIR_ADMIN_KEY");
    const char *key_from[2] = {sp.api_key ? "$CHOIR_API_KEY" : NULL, sp.admin_key ? "$CHOIR_ADMIN_KEY" : NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            serve_usage(stdout);
            return 0;
        }
        if (strcmp(a, "--preload") == 0 || strcmp(a, "--preload-strict") == 0) {
            preload = 1;
            strict |= a[9] == '-';
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (strcmp(a, "--no-ui") == 0) {
            sp.ui = 0;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "choir serve: unknown option or missing value: %s\n", a);
            serve_usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        double *secs_field;
        if (strcmp(a, "--models") == 0) {
            if (n_dirs == MAX_MODEL_DIRS)
                bad = 1;
            else
                dirs[n_dirs++] = v;
        } else if (strcmp(a, "--host") == 0) {
            sp.host = v;
        } else if (strcmp(a, "--port") == 0) {
            bad = parse_int(v, 0, 65535, &sp.port);
        } else if (strcmp(a, "--port-file") == 0) {
            port_file = v;
        } else if (strcmp(a, "--api-key") == 0) {
            sp.api_key = v;
            key_from[0] = "--api-key";
        } else if (strcmp(a, "--admin-key") == 0) {
            sp.admin_key = v;
            key_from[1] = "--admin-key";
        } else if (strcmp(a, "--max-upload") == 0) {
            bad = parse_int(v, 1, 1 << 20, &upload_mb);
        } else if (strcmp(a, "--request-timeout") == 0) {
            char *end;
            sp.request_timeout_s = strtod(v, &end);
            bad = end == v || *end || sp.request_timeout_s <= 0;
        } else if (strcmp(a, "--max-audio-s") == 0 && strchr(v, '=')) {
            const char *eq = strrchr(v, '=');
            char *end;
            double secs = strtod(eq + 1, &end);
            bad = end == eq + 1 || *end || !(secs > 0) || eq == v;
            if (!bad) {
                if (n_limits == MAX_MODEL_DIRS)
                    bad = 1;
                else {
                    snprintf(limit_ids[n_limits], sizeof limit_ids[0], "%.*s", (int)(eq - v), v);
                    limit_secs[n_limits++] = secs;
                }
            }
        } else if (strcmp(a, "--cors") == 0) {
            size_t used = strlen(cors);
            int w = snprintf(cors + used, sizeof cors - used, "%s%s", used ? "," : "", v);
            bad = !*v || w < 0 || (size_t)w >= sizeof cors - used;
            sp.cors = cors;
        } else if (strcmp(a, "--alias") == 0 || strcmp(a, "--voice-alias") == 0) {
            int voice = a[2] == 'v';
            const char *eq = strchr(v, '=');
            int *n = voice ? &n_voice_aliases : &n_aliases;
            bad = !eq || eq == v || !eq[1] || *n == MAX_ALIASES;
            if (!bad)
                (voice ? voice_aliases : aliases)[(*n)++] = v;
        } else if (strcmp(a, "--max-connections") == 0) {
            bad = parse_int(v, 1, 1 << 20, &sp.max_connections);
        } else if (strcmp(a, "--max-client-connections") == 0) {
            bad = parse_int(v, -1, 1 << 20, &sp.max_client_connections) || sp.max_client_connections == 0;
        } else if ((secs_field = connection_time(&sp, a)) != NULL) {
            char *end;
            double x = strtod(v, &end);
            /* only the rate floor can be turned off (-1) */
            bad = end == v || *end || !(x > 0 || (x == -1 && secs_field == &sp.body_min_rate));
            *secs_field = x;
        } else if (strcmp(a, "--shutdown-deadline") == 0) {
            char *end;
            deadline = strtod(v, &end);
            bad = end == v || *end || deadline < 0;
        } else {
            choir_engine_params scratch = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
            int applied = choir_engine_apply_option(&scratch, a, v, &err);
            if (applied < 0) {
                fprintf(stderr, "choir serve: %s\n", err.msg);
                return 2;
            }
            if (applied == 0 || strncmp(a, "--", 2) != 0) {
                fprintf(stderr, "choir serve: unknown option %s\n", a);
                serve_usage(stderr);
                return 2;
            }
            if (strcmp(a, "--profile") == 0) {
                profile_name = v;
            } else if (n_engine_opts == (int)(sizeof engine_opts / sizeof engine_opts[0])) {
                fprintf(stderr, "choir serve: too many engine options\n");
                return 2;
            } else {
                engine_opts[n_engine_opts][0] = a;
                engine_opts[n_engine_opts++][1] = v;
            }
        }
        if (bad) {
            fprintf(stderr, "choir serve: bad value for %s: %s\n", a, v);
            return 2;
        }
    }
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
    if (n_dirs == 0) {
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
            serve_usage(stderr);
            return 2;
        }
        dirs[n_dirs++] = default_dir;
    }
    choir_profile profile;
    if (choir_profile_parse(profile_name, &profile) < 0) {
        fprintf(stderr, "choir serve: unknown profile %s\n", profile_name);
        return 2;
    }
    sp.max_upload_bytes = (int64_t)upload_mb << 20;

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

    /* The values were checked while parsing; choir_engine_create checks
     * whether the --gpus exist (or CUDA at all). */
    choir_engine_params ep = choir_engine_default_params(profile);
    for (int i = 0; i < n_engine_opts; i++)
        choir_engine_apply_option(&ep, engine_opts[i][0], engine_opts[i][1], &err);
    choir_engine *engine = choir_engine_create(&ep, &err);
    if (!engine && err.code == CHOIR_EINVAL) {
        fprintf(stderr, "choir serve: %s\n", err.msg);
        return 2;
    }
    choir_server *server = engine ? choir_server_create(engine, &sp, &err) : NULL;
    int rc = 1, n_models = 0;
    if (!server)
        goto fail;
    for (int i = 0; i < n_dirs; i++) {
        int n = choir_server_add_models_dir(server, dirs[i], &err);
        if (n < 0)
            goto fail;
        n_models += n;
    }
    if (n_models == 0)
        choir_log(CHOIR_LOG_WARN, "no models found in the --models directories");
    for (int i = 0; i < n_aliases + n_voice_aliases; i++) {
        int voice = i >= n_aliases;
        const char *pair = voice ? voice_aliases[i - n_aliases] : aliases[i];
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
