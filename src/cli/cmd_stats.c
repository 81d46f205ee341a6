/* `choir stats`: a running server's metrics, read from its /metrics page
 * (Prometheus text) and shown as a short summary, or raw with --raw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "cli/cli.h"
#include "cli/opt.h"

#define METRICS_PAGE_MAX ((size_t)16 << 20)

typedef struct body {
    choir_buf page;
    int too_big;
} body;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user)
{
    body *b = user;
    size_t n = size * nmemb;
    if (b->page.len + n > METRICS_PAGE_MAX) {
        b->too_big = 1;
        return 0;
    }
    return choir_buf_append(&b->page, ptr, n) == CHOIR_OK ? n : 0;
}

/* The value of the first sample line that starts with `series` followed by a
 * space; NAN-free: returns 0 and *found 0 when absent. */
static double sample(const char *text, const char *series, int *found)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ') {
            *found = 1;
            return strtod(p + n + 1, NULL);
        }
    }
    *found = 0;
    return 0;
}

static void line(const char *text, const char *label, const char *series, double scale, const char *unit)
{
    int found;
    double v = sample(text, series, &found);
    if (found)
        printf("  %-28s %.6g%s\n", label, v * scale, unit);
}

/* Copies the value of label `key` in the sample line at `p` (up to the
 * line's end) into out; returns 1 when found. */
static int label(const char *p, const char *key, char *out, size_t cap)
{
    const char *eol = strchr(p, '\n');
    char pat[64];
    snprintf(pat, sizeof pat, "%s=\"", key);
    const char *k = strstr(p, pat);
    if (!k || (eol && k > eol))
        return 0;
    k += strlen(pat);
    const char *q = strchr(k, '"');
    if (!q || (eol && q > eol) || (size_t)(q - k) >= cap)
        return 0;
    memcpy(out, k, (size_t)(q - k));
    out[q - k] = 0;
    return 1;
}

/* Per device: memory and batches; per model: replicas and where they are. */
static void devices_and_placement(const char *text)
{
    const char *fam = "choir_device_memory_bytes{device=\"";
    int header = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        char dev[64], kind[16], series[192];
        if (strncmp(p, fam, strlen(fam)) != 0 || !label(p, "kind", kind, sizeof kind) || strcmp(kind, "budget") != 0 ||
            !label(p, "device", dev, sizeof dev))
            continue;
        if (!header++)
            printf("devices (MiB: weights / reserved / peak of budget; batches)\n");
        double v[4];
        static const char *kinds[4] = {"weights", "reserved", "peak", "budget"};
        for (int k = 0; k < 4; k++) {
            int found;
            snprintf(series, sizeof series, "choir_device_memory_bytes{device=\"%s\",kind=\"%s\"}", dev, kinds[k]);
            v[k] = sample(text, series, &found) / (1 << 20);
        }
        int found;
        snprintf(series, sizeof series, "choir_device_batches_total{device=\"%s\"}", dev);
        double batches = sample(text, series, &found);
        printf("  %-28s %.0f / %.0f / %.0f of %.0f; %.0f\n", dev, v[0], v[1], v[2], v[3], batches);
    }
    const char *rep = "choir_model_replicas{model=\"";
    header = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        char model[128];
        if (strncmp(p, rep, strlen(rep)) != 0 || !label(p, "model", model, sizeof model))
            continue;
        const char *val = strchr(p, '}');
        int replicas = val ? atoi(val + 1) : 0;
        if (!header++)
            printf("models (replicas: devices)\n");
        char where[512] = "";
        size_t len = 0;
        char pre[192];
        snprintf(pre, sizeof pre, "choir_model_placement{model=\"%s\",device=\"", model);
        for (const char *q = text; q && *q; q = strchr(q, '\n') ? strchr(q, '\n') + 1 : NULL) {
            char dev[64];
            const char *end = strchr(q, '}');
            if (strncmp(q, pre, strlen(pre)) != 0 || !end || strtod(end + 1, NULL) != 1 ||
                !label(q, "device", dev, sizeof dev))
                continue;
            len += (size_t)snprintf(where + len, len < sizeof where ? sizeof where - len : 0, "%s%s",
                                    len ? " " : "", dev);
            if (len >= sizeof where)
                break;
        }
        printf("  %-28s %d: %s\n", model, replicas, replicas ? where : "not loaded");
    }
}

int choir_cmd_stats(int argc, char **argv)
{
    const char *url = "http://127.0.0.1:8000";
    const char *key = getenv("CHOIR_API_KEY");
    int raw = 0;
    const cli_opt flags[] = {
        {"--url", CLI_STRING, &url, 0, 0, "URL", "the server (default http://127.0.0.1:8000)"},
        {"--api-key", CLI_STRING, &key, 0, 0, "KEY", "sent when the server requires one (default $CHOIR_API_KEY)"},
        {"--raw", CLI_FLAG, &raw, 0, 0, NULL, "print the whole page"},
    };
    const cli_spec spec = {
        .cmd = "stats",
        .synopsis = "usage: choir stats [--url URL] [--api-key KEY] [--raw]\n"
                    "Reads URL/metrics of a running `choir serve` and prints queue, memory, latency and\n"
                    "rejection figures, each device's memory and batches, and each model's replicas\n"
                    "and placement.\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    char full[2048];
    size_t ul = strlen(url);
    snprintf(full, sizeof full, "%s%s", url, ul && url[ul - 1] == '/' ? "metrics" : "/metrics");
    body b = {.page = CHOIR_BUF_INIT(CHOIR_MEM_IO)};
    CURL *c = curl_easy_init();
    if (!c) {
        fprintf(stderr, "choir stats: cannot start libcurl\n");
        return 1;
    }
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, full);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    struct curl_slist *headers = NULL;
    if (key && *key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        headers = curl_slist_append(NULL, auth);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    }
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    /* file:// URLs (a saved page) have no HTTP status */
    int ok_status = status == 200 || (status == 0 && strncmp(full, "file:", 5) == 0);
    if (rc != CURLE_OK || !ok_status || !b.page.data) {
        fprintf(stderr, "choir stats: %s: %s\n", full,
                rc != CURLE_OK ? (curl_err[0] ? curl_err : curl_easy_strerror(rc))
                : b.too_big    ? "response larger than 16 MiB"
                               : "no metrics (HTTP status not 200)");
        choir_buf_free(&b.page);
        return 1;
    }
    const char *text = b.page.data;
    if (raw) {
        fputs(text, stdout);
        choir_buf_free(&b.page);
        return 0;
    }
    printf("%s\n", full);
    printf("requests\n");
    line(text, "submitted", "choir_requests_submitted_total", 1, "");
    line(text, "completed", "choir_requests_completed_total", 1, "");
    line(text, "failed", "choir_requests_failed_total", 1, "");
    static const char *reasons[] = {"queue_full", "overload", "deadline", "too_large", "shutdown", "cancelled",
                                    "failed"};
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
        char series[128], label[64];
        snprintf(series, sizeof series, "choir_requests_rejected_total{reason=\"%s\"}", reasons[i]);
        snprintf(label, sizeof label, "rejected (%s)", reasons[i]);
        line(text, label, series, 1, "");
    }
    line(text, "queued", "choir_queue_depth", 1, "");
    line(text, "running", "choir_running_requests", 1, "");
    line(text, "degraded", "choir_degraded", 1, "");
    line(text, "audio s per s", "choir_audio_seconds_per_second", 1, "");
    printf("latency (p50 / p99)\n");
    static const char *hists[][2] = {{"queue wait", "choir_queue_wait_seconds"},
                                     {"first output", "choir_time_to_first_output_seconds"},
                                     {"total", "choir_request_seconds"},
                                     {"batch compute", "choir_compute_seconds"}};
    for (size_t i = 0; i < sizeof hists / sizeof hists[0]; i++) {
        char s50[160], s99[160];
        snprintf(s50, sizeof s50, "%s_quantile{quantile=\"0.5\"}", hists[i][1]);
        snprintf(s99, sizeof s99, "%s_quantile{quantile=\"0.99\"}", hists[i][1]);
        int f50, f99;
        double p50 = sample(text, s50, &f50), p99 = sample(text, s99, &f99);
        if (f50 && f99)
            printf("  %-28s %.1f ms / %.1f ms\n", hists[i][0], p50 * 1e3, p99 * 1e3);
    }
    printf("memory\n");
    line(text, "budget", "choir_memory_budget_bytes", 1.0 / (1 << 20), " MiB");
    line(text, "reserved (batches)", "choir_memory_reserved_bytes", 1.0 / (1 << 20), " MiB");
    line(text, "weights resident", "choir_weights_resident_bytes", 1.0 / (1 << 20), " MiB");
    line(text, "largest arena", "choir_arena_peak_bytes", 1.0 / (1 << 20), " MiB");
    devices_and_placement(text);
    choir_buf_free(&b.page);
    return 0;
}
