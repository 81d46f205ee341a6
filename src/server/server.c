/* The server object, the connection life cycle and the routing.
 *
 * libmicrohttpd calls on_access several times per request: once with the
 * headers (the connection state is made and the declared size checked), once
 * per piece of body (appended up to the upload limit; beyond it the rest is
 * read and dropped so the 413 reply reaches a client that is still sending),
 * and once more with no data, when the request is routed. */
#include <arpa/inet.h>
#include <errno.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/log.h"
#include "server/server_internal.h"
#include "server/ui_assets.h"

choir_server_params choir_server_default_params(void)
{
    choir_server_params p = {
        .host = "127.0.0.1",
        .port = 8000,
        .api_key = NULL,
        .max_upload_bytes = 25 << 20,
        .max_input_chars = 4096,
        .max_connections = 1024,
        .max_client_connections = 64,
        .header_timeout_s = 20,
        .keepalive_timeout_s = 60,
        .body_timeout_s = 20,
        .body_min_rate = 500,
        .idle_timeout_s = 120,
        .request_timeout_s = 300,
        .ui = 1,
    };
    return p;
}

choir_server *choir_server_create(choir_engine *engine, const choir_server_params *params, choir_err *err)
{
    choir_server_params p = params ? *params : choir_server_default_params();
    choir_server_params d = choir_server_default_params();
    if (!engine) {
        choir_err_set(err, CHOIR_EINVAL, "server: no engine");
        return NULL;
    }
    if (!p.host || !*p.host)
        p.host = d.host;
    if (p.port < 0 || p.port > 65535) {
        choir_err_set(err, CHOIR_EINVAL, "server: port %d out of range", p.port);
        return NULL;
    }
    /* 0 is "the default"; a negative number is refused, not read as one. */
    if (p.max_upload_bytes < 0 || p.max_input_chars < 0 || p.max_connections < 0) {
        choir_err_set(err, CHOIR_EINVAL, "server: max_upload_bytes, max_input_chars and max_connections must not be "
                      "negative (0: the default)");
        return NULL;
    }
    if (!(p.request_timeout_s == 0 ||
          (p.request_timeout_s >= CHOIR_SERVER_MIN_TIMEOUT_S && p.request_timeout_s <= CHOIR_SERVER_MAX_TIMEOUT_S))) {
        choir_err_set(err, CHOIR_EINVAL, "server: request_timeout_s %g is outside %g..%g (0: the default)",
                      p.request_timeout_s, CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S);
        return NULL;
    }
#define DEF(f) if (p.f == 0) p.f = d.f
    DEF(max_upload_bytes);
    DEF(max_input_chars);
    DEF(max_connections);
    DEF(request_timeout_s);
    DEF(max_client_connections);
    DEF(header_timeout_s);
    DEF(keepalive_timeout_s);
    DEF(body_timeout_s);
    DEF(body_min_rate);
    DEF(idle_timeout_s);
#undef DEF
    /* Each field in its range (NaN fails every comparison, so it is refused
     * too); the same ranges as `choir serve`'s flags. */
    const struct {
        const char *name;
        double v, lo, hi;
    } range[] = {
        {"header_timeout_s", p.header_timeout_s, CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S},
        {"keepalive_timeout_s", p.keepalive_timeout_s, CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S},
        {"body_timeout_s", p.body_timeout_s, CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S},
        {"idle_timeout_s", p.idle_timeout_s, CHOIR_SERVER_MIN_IDLE_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S},
        {"body_min_rate", p.body_min_rate == -1 ? 1 : p.body_min_rate, 1e-9, CHOIR_SERVER_MAX_BODY_RATE},
        {"max_connections", p.max_connections, 1, CHOIR_SERVER_MAX_CONNECTIONS},
        {"max_client_connections", p.max_client_connections == -1 ? 1 : p.max_client_connections, 1,
         CHOIR_SERVER_MAX_CONNECTIONS},
    };
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++) {
        if (!(range[i].v >= range[i].lo && range[i].v <= range[i].hi)) {
            choir_err_set(err, CHOIR_EINVAL, "server: %s %.10g is outside %.10g..%.10g%s", range[i].name, range[i].v, range[i].lo,
                          range[i].hi,
                          strcmp(range[i].name, "body_min_rate") == 0 || strcmp(range[i].name, "max_client_connections") == 0
                              ? " (-1: none)"
                              : "");
            return NULL;
        }
    }
    if (strlen(p.host) >= 64 || (p.api_key && strlen(p.api_key) >= 256) ||
        (p.admin_key && strlen(p.admin_key) >= 256) || (p.cors && strlen(p.cors) >= 1024)) {
        choir_err_set(err, CHOIR_EINVAL, "server: host, API key or CORS origins too long");
        return NULL;
    }
    /* An empty key would mean "no authentication" without anyone saying so. */
    if ((p.api_key && !*p.api_key) || (p.admin_key && !*p.admin_key)) {
        choir_err_set(err, CHOIR_EINVAL, "server: an empty %s key; give one, or none for %s",
                      p.api_key && !*p.api_key ? "API" : "admin",
                      p.api_key && !*p.api_key ? "an open API" : "no model administration");
        return NULL;
    }
    if (p.api_key && p.admin_key && strcmp(p.api_key, p.admin_key) == 0) {
        choir_err_set(err, CHOIR_EINVAL, "server: the admin key must differ from the API key");
        return NULL;
    }
    choir_server *s = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *s);
    if (!s) {
        choir_err_set(err, CHOIR_ENOMEM, "server: out of memory");
        return NULL;
    }
    s->engine = engine;
    s->p = p;
    strcpy(s->host, p.host);
    if (p.api_key)
        strcpy(s->api_key, p.api_key);
    if (p.admin_key)
        strcpy(s->admin_key, p.admin_key);
    s->p.host = s->host;
    s->p.api_key = s->api_key[0] ? s->api_key : NULL;
    s->p.admin_key = s->admin_key[0] ? s->admin_key : NULL;
    if (p.cors)
        strcpy(s->cors, p.cors);
    s->p.cors = s->cors[0] ? s->cors : NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->peers_mu, NULL);
    pthread_cond_init(&s->watch_cv, NULL);
    return s;
}

int srv_model_find(choir_server *s, const char *id, srv_model *out)
{
    return choir_engine_model_find(s->engine, id, out);
}

srv_model *srv_models_list(choir_server *s, int *n)
{
    *n = 0;
    int total = choir_engine_models(s->engine, NULL, 0);
    srv_model *list = total > 0 ? choir_calloc(CHOIR_MEM_IO, (size_t)total, sizeof *list) : NULL;
    if (total > 0 && !list) {
        *n = -1;
        return NULL;
    }
    /* models may have been added meanwhile: take what fits */
    total = list ? choir_engine_models(s->engine, list, total) : 0;
    int kept = 0;
    for (int i = 0; i < total; i++)
        if (!list[i].withdrawn)
            list[kept++] = list[i];
    *n = kept;
    if (kept == 0) {
        choir_free(list);
        return NULL;
    }
    return list;
}

int srv_model_first(choir_server *s, choir_task task, srv_model *out)
{
    int n = 0, rc = CHOIR_ENOTFOUND;
    srv_model *models = srv_models_list(s, &n);
    for (int i = 0; i < n && rc < 0; i++)
        if (models[i].tasks & CHOIR_TASK_BIT(task)) {
            *out = models[i];
            rc = 0;
        }
    choir_free(models);
    return rc;
}

static int valid_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n >= SRV_MODEL_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)id[i];
        if (ch <= ' ' || ch == '/' || ch == '"' || ch == '\\' || ch >= 0x7F)
            return 0;
    }
    return 1;
}

int choir_server_add_model(choir_server *s, const char *id, const char *dir, choir_err *err)
{
    if (!dir || strlen(dir) >= SRV_PATH_MAX)
        return choir_err_set(err, CHOIR_EINVAL, "model directory path missing or too long");
    char base[SRV_PATH_MAX];
    if (!id) {
        strcpy(base, dir);
        size_t n = strlen(base);
        while (n > 1 && base[n - 1] == '/')
            base[--n] = 0;
        const char *slash = strrchr(base, '/');
        id = slash ? slash + 1 : base;
    }
    if (!valid_id(id))
        return choir_err_set(err, CHOIR_EINVAL, "model id \"%s\" is empty, too long or holds '/', quotes or spaces",
                             id);
    /* The engine detects the adapter, refuses a taken id and brings a
     * DELETEd model back when the same directory comes under its id. */
    int rc = choir_engine_add_model(s->engine, id, dir, NULL, err);
    if (rc == 0) {
        srv_model m;
        if (srv_model_find(s, id, &m) == 0)
            choir_log(CHOIR_LOG_INFO, "model %s (%s) from %s", id, m.kind, dir);
    }
    return rc;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_config(const char *dir)
{
    char path[SRV_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Remembers a --models folder (resolved) for POST /v1/models. */
static int add_root(choir_server *s, const char *dir, int is_model, choir_err *err)
{
    char real[PATH_MAX];
    if (!realpath(dir, real) || strlen(real) >= SRV_PATH_MAX)
        return choir_err_set(err, CHOIR_ENOTFOUND, "%s: cannot resolve the models directory", dir);
    pthread_mutex_lock(&s->lock);
    struct srv_root *grown = choir_realloc(s->roots, (size_t)(s->n_roots + 1) * sizeof *grown);
    if (grown) {
        s->roots = grown;
        snprintf(grown[s->n_roots].path, sizeof grown->path, "%s", real);
        grown[s->n_roots++].is_model = is_model;
    }
    pthread_mutex_unlock(&s->lock);
    return grown ? 0 : choir_err_set(err, CHOIR_ENOMEM, "out of memory");
}

int srv_admin_path(choir_server *s, const char *given, char *out, size_t cap)
{
    int ok = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_roots && !ok; i++) {
        const struct srv_root *r = &s->roots[i];
        char joined[2 * SRV_PATH_MAX], real[PATH_MAX];
        /* an absolute path as it is, a relative one inside this folder */
        if (given[0] == '/')
            snprintf(joined, sizeof joined, "%s", given);
        else
            snprintf(joined, sizeof joined, "%s/%s", r->path, given);
        if (!realpath(joined, real))
            continue;
        size_t n = strlen(r->path);
        if (r->is_model)
            ok = strcmp(real, r->path) == 0;
        else
            ok = strncmp(real, r->path, n) == 0 && real[n] == '/' && real[n + 1] != 0;
        if (ok && strlen(real) < cap)
            snprintf(out, cap, "%s", real);
        else
            ok = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return ok ? 0 : -1;
}

int choir_server_add_models_dir(choir_server *s, const char *dir, choir_err *err)
{
    int model = has_config(dir);
    if (add_root(s, dir, model, err) < 0)
        return err ? err->code : CHOIR_ENOTFOUND;
    if (model) {
        int rc = choir_server_add_model(s, NULL, dir, err);
        return rc < 0 ? rc : 1;
    }
    DIR *d = opendir(dir);
    if (!d)
        return choir_err_set(err, CHOIR_ENOTFOUND, "%s: cannot open the models directory", dir);
    /* sorted, so that ids and the default model do not depend on readdir order */
    char **names = NULL;
    int n = 0, cap = 0, added = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            int ncap = cap ? 2 * cap : 16;
            char **grown = choir_realloc(names, (size_t)ncap * sizeof *grown);
            if (!grown)
                break;
            names = grown;
            cap = ncap;
        }
        size_t len = strlen(de->d_name);
        names[n] = choir_alloc(CHOIR_MEM_OTHER, len + 1);
        if (!names[n])
            break;
        memcpy(names[n++], de->d_name, len + 1);
    }
    closedir(d);
    if (n > 1)
        qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n; i++) {
        char path[SRV_PATH_MAX];
        int w = snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (w > 0 && (size_t)w < sizeof path && has_config(path)) {
            choir_err e = {0};
            if (choir_server_add_model(s, names[i], path, &e) == 0)
                added++;
            else
                choir_log(CHOIR_LOG_WARN, "skipping %s: %s", path, e.msg);
        }
        choir_free(names[i]);
    }
    choir_free(names);
    return added;
}

/* Compares without an early exit, so the time taken says nothing about how
 * much of a guessed key was right. */
static int key_matches(const char *given, const char *want)
{
    size_t a = strlen(given), b = strlen(want);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned char)(given[i < a ? i : 0] ^ want[i]);
    return diff == 0;
}

/* 1 when the request carries `Authorization: Bearer KEY` with `key` (the
 * scheme is case-insensitive, RFC 9110 11.1). */
static int carries_key(struct MHD_Connection *c, const char *key)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return 0;
    h += 6;
    while (*h == ' ' || *h == '\t')
        h++;
    return key_matches(h, key);
}

static int authorized(choir_server *s, struct MHD_Connection *c)
{
    return !s->p.api_key || carries_key(c, s->p.api_key);
}

/* A media type is `type`, whatever its case and parameters ("application/json; charset=utf-8"). */
static int content_type_is(struct MHD_Connection *c, const char *type)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    size_t n = strlen(type);
    if (!ct)
        return 0;
    while (*ct == ' ')
        ct++;
    return strncasecmp(ct, type, n) == 0 && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

static enum MHD_Result handle_health(choir_server *s, struct MHD_Connection *c)
{
    if (atomic_load(&s->stopping))
        return srv_reply(s, c, 503, "application/json", "{\"status\":\"stopping\"}", 21);
    if (!atomic_load(&s->ready))
        return srv_reply(s, c, 503, "application/json", "{\"status\":\"loading\"}", 20);
    /* A degraded engine (memory past its high-water mark, or p99 past its target)
     * refuses new low-priority work: tell load balancers to send work elsewhere. */
    choir_engine_stats st;
    choir_engine_get_stats(s->engine, &st);
    if (st.degraded)
        return srv_reply_error(s, c, 503, NULL, "degraded",
                               "the engine is degraded (memory or latency pressure); retry later or elsewhere");
    /* A GPU past its high-water mark refuses new work for the models only
     * there (choir_engine_devices: degraded). With every GPU so, the server
     * is degraded as above; with some, it still serves, and the body names
     * them so that an operator sees the pressure before it spreads. */
    choir_engine_device dev[1 + CHOIR_ENGINE_MAX_GPUS];
    int n_dev = choir_engine_devices(s->engine, dev, 1 + CHOIR_ENGINE_MAX_GPUS);
    if (n_dev > 1 + CHOIR_ENGINE_MAX_GPUS)
        n_dev = 1 + CHOIR_ENGINE_MAX_GPUS;
    int n_gpus = 0, n_hot = 0;
    char hot_names[256] = "";
    for (int i = 0; i < n_dev; i++) {
        if (dev[i].kind != CHOIR_DEVICE_KIND_GPU)
            continue;
        n_gpus++;
        if (!dev[i].degraded)
            continue;
        size_t len = strlen(hot_names);
        snprintf(hot_names + len, sizeof hot_names - len, "%s%s %.0f%%", n_hot ? ", " : "", dev[i].name,
                 100 * dev[i].pressure);
        n_hot++;
    }
    if (n_gpus > 0 && n_hot == n_gpus)
        return srv_reply_error(s, c, 503, NULL, "degraded",
                               "every GPU is past its memory high-water mark (%s); retry later or elsewhere",
                               hot_names);
    /* A model whose last load failed is named here until a load succeeds.
     * The server still serves the others (200 "partial"); with every model
     * failed it can serve nothing, and says so (503 "failed"). */
    int n = 0, n_failed = 0;
    srv_model *info = srv_models_list(s, &n);
    cJSON *failed = cJSON_CreateArray();
    for (int i = 0; i < n && failed; i++) {
        if (!info[i].load_error[0])
            continue;
        n_failed++;
        srv_scrub_paths_quietly(s, info[i].load_error, sizeof info[i].load_error);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", info[i].id);
        cJSON_AddStringToObject(o, "error", info[i].load_error);
        cJSON_AddItemToArray(failed, o);
    }
    choir_free(info);
    if (n_failed == 0 && n_hot == 0) {
        cJSON_Delete(failed);
        return srv_reply(s, c, 200, "application/json", "{\"status\":\"ok\"}", 15);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", n_failed == 0 ? "ok" : n_failed == n ? "failed" : "partial");
    if (n_failed)
        cJSON_AddItemToObject(o, "models_failed", failed);
    else
        cJSON_Delete(failed);
    if (n_hot) {
        cJSON *hot = cJSON_AddArrayToObject(o, "devices_degraded");
        for (int i = 0; hot && i < n_dev; i++) {
            if (dev[i].kind != CHOIR_DEVICE_KIND_GPU || !dev[i].degraded)
                continue;
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "device", dev[i].name);
            cJSON_AddNumberToObject(d, "pressure", round(dev[i].pressure * 1000) / 1000);
            cJSON_AddItemToArray(hot, d);
        }
    }
    return srv_reply_json(s, c, n_failed && n_failed == n ? 503 : 200, o);
}

static enum MHD_Result handle_metrics(choir_server *s, struct MHD_Connection *c)
{
    char *engine_text = choir_engine_metrics_text(s->engine);
    if (!engine_text)
        return srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
    size_t n = strlen(engine_text);
    size_t cap = n + 2048;
    char *page = choir_alloc(CHOIR_MEM_IO, cap);
    if (!page) {
        choir_free(engine_text);
        return srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
    }
    memcpy(page, engine_text, n);
    choir_free(engine_text);
    size_t len = n;
    len += (size_t)snprintf(page + len, cap - len,
                            "# HELP choir_http_responses_total HTTP responses sent, by status class.\n"
                            "# TYPE choir_http_responses_total counter\n");
    for (int k = 1; k < SRV_STATUS_CLASSES; k++)
        len += (size_t)snprintf(page + len, cap - len, "choir_http_responses_total{code=\"%dxx\"} %llu\n", k,
                                (unsigned long long)atomic_load(&s->responses[k]));
    len += (size_t)snprintf(page + len, cap - len,
                            "# HELP choir_http_in_flight Requests being served.\n"
                            "# TYPE choir_http_in_flight gauge\n"
                            "choir_http_in_flight %d\n"
                            "# HELP choir_http_streams_total Streamed responses started.\n"
                            "# TYPE choir_http_streams_total counter\n"
                            "choir_http_streams_total %llu\n",
                            atomic_load(&s->in_flight), (unsigned long long)atomic_load(&s->streams));
    len += (size_t)snprintf(page + len, cap - len,
                            "# HELP choir_http_connections Open client connections.\n"
                            "# TYPE choir_http_connections gauge\n"
                            "choir_http_connections %d\n"
                            "# HELP choir_http_connections_total Client connections accepted.\n"
                            "# TYPE choir_http_connections_total counter\n"
                            "choir_http_connections_total %llu\n"
                            "# HELP choir_http_connections_cut_total Connections closed for missing a deadline.\n"
                            "# TYPE choir_http_connections_cut_total counter\n"
                            "choir_http_connections_cut_total{reason=\"header_timeout\"} %llu\n"
                            "choir_http_connections_cut_total{reason=\"body_too_slow\"} %llu\n"
                            "# HELP choir_http_deadline_guard_total Requests answered 503 by the server's own "
                            "deadline guard (a model step ignored the cancel).\n"
                            "# TYPE choir_http_deadline_guard_total counter\n"
                            "choir_http_deadline_guard_total %llu\n",
                            srv_peer_count(s), (unsigned long long)atomic_load(&s->connections_total),
                            (unsigned long long)atomic_load(&s->cut_header),
                            (unsigned long long)atomic_load(&s->cut_body),
                            (unsigned long long)atomic_load(&s->answered_late_guard));
    enum MHD_Result ret = srv_reply(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", page, len);
    choir_free(page);
    return ret;
}

static enum MHD_Result route(choir_server *s, struct MHD_Connection *c, const char *url, const char *method,
                             srv_conn *conn)
{
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int post = strcmp(method, "POST") == 0;
    /* a body the budget refused is incomplete, whatever the route */
    if (conn->refused == CHOIR_EBUSY)
        return srv_reply_error(s, c, 503, NULL, "memory_busy",
                               "the request body does not fit the server's memory budget now; retry later");
    if (conn->refused)
        return srv_reply_error(s, c, conn->refused == CHOIR_ETOOBIG ? 413 : 500, NULL, "request_too_large",
                               "the request body does not fit the server's memory budget");
    /* A browser asks before a cross-origin call with a key or JSON, and
     * sends no key with the question. */
    if (strcmp(method, "OPTIONS") == 0 && MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin") &&
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method"))
        return srv_reply_preflight(s, c);
    /* the web page is static and needs no key; the API calls it makes do */
    if (get && s->p.ui && (strcmp(url, "/") == 0 || strcmp(url, "/ui") == 0 || strncmp(url, "/ui/", 4) == 0)) {
        const unsigned char *data;
        size_t len;
        const char *mime;
        if (choir_ui_asset(url, &data, &len, &mime) == 0)
            return srv_reply(s, c, 200, mime, data, len);
        return srv_reply_error(s, c, 404, NULL, "unknown_url", "no page %s", url);
    }
    /* Liveness says the process answers (a load balancer should not kill
     * it for being busy); readiness, and /health, whether to send it work. */
    if (strcmp(url, "/health/live") == 0)
        return get ? srv_reply(s, c, 200, "application/json", "{\"status\":\"alive\"}", 18)
                   : srv_reply_error(s, c, 405, NULL, NULL, "use GET /health/live");
    if (strcmp(url, "/health") == 0 || strcmp(url, "/health/ready") == 0)
        return get ? handle_health(s, c) : srv_reply_error(s, c, 405, NULL, NULL, "use GET %s", url);
    /* Model administration changes what the server runs: its own key, and a
     * JSON body, which a web page cannot send to another origin without the
     * browser asking first (a text/plain form post can). */
    int models_url = strcmp(url, "/v1/models") == 0 || strncmp(url, "/v1/models/", 11) == 0;
    if (models_url && (post || strcmp(method, "DELETE") == 0)) {
        if (post && !content_type_is(c, "application/json"))
            return srv_reply_error(s, c, 415, NULL, "unsupported_media_type",
                                   "POST /v1/models takes Content-Type: application/json");
        if (!s->p.admin_key)
            return srv_reply_error(s, c, 403, NULL, "admin_disabled",
                                   "model administration is off (choir serve --admin-key KEY enables it)");
        if (!carries_key(c, s->p.admin_key))
            return srv_reply_error(s, c, 401, NULL, "invalid_admin_key",
                                   "model administration needs the admin key (\"Authorization: Bearer KEY\")");
        return srv_handle_models(s, c, method, url, conn);
    }
    if (!authorized(s, c))
        return srv_reply_error(s, c, 401, NULL, "invalid_api_key",
                               "missing or wrong API key (send \"Authorization: Bearer KEY\")");
    if (strcmp(url, "/metrics") == 0)
        return get ? handle_metrics(s, c) : srv_reply_error(s, c, 405, NULL, NULL, "use GET /metrics");
    if (models_url)
        return srv_handle_models(s, c, method, url, conn);
    if (strcmp(url, "/v1/audio/voices") == 0)
        return get ? srv_handle_voices(s, c) : srv_reply_error(s, c, 405, NULL, NULL, "use GET /v1/audio/voices");
    int speech = strcmp(url, "/v1/audio/speech") == 0;
    int transcribe = strcmp(url, "/v1/audio/transcriptions") == 0;
    int translate = strcmp(url, "/v1/audio/translations") == 0;
    int enhance = strcmp(url, "/v1/audio/enhancements") == 0;
    int separate = strcmp(url, "/v1/audio/separations") == 0;
    if (!speech && !transcribe && !translate && !enhance && !separate)
        return srv_reply_error(s, c, 404, NULL, "unknown_url", "no route for %s %s", method, url);
    if (!post)
        return srv_reply_error(s, c, 405, NULL, NULL, "use POST %s", url);
    if (conn->too_big)
        return srv_reply_error(s, c, 413, NULL, "request_too_large", "request body over the %lld-byte limit",
                               (long long)s->p.max_upload_bytes);
    if (atomic_load(&s->stopping))
        return srv_reply_error(s, c, 503, NULL, "shutdown", "the server is shutting down");
    if (speech)
        return srv_handle_speech(s, c, conn);
    if (enhance)
        return srv_handle_enhancement(s, c, conn);
    if (separate)
        return srv_handle_separation(s, c, conn);
    return srv_handle_transcription(s, c, conn, translate);
}

/* Grows the body buffer to hold `need` bytes. Each block is admitted
 * against the engine's memory budget, and grows only as fast as bytes arrive
 * (at most doubling), so a client holds budget only for what it has sent;
 * the last block is the declared length exactly. On refusal the connection
 * is marked and -1 returned. */
static int grow_body(choir_server *s, srv_conn *conn, size_t need)
{
    size_t limit = conn->declared >= 0 ? (size_t)conn->declared + 1 : (size_t)s->p.max_upload_bytes + 1;
    size_t cap = conn->cap ? 2 * conn->cap : 64 * 1024;
    if (cap < need)
        cap = need;
    if (cap > limit)
        cap = limit > need ? limit : need;
    choir_err err = {0};
    char *grown = choir_engine_alloc_input(s->engine, cap, &err);
    if (!grown) {
        conn->refused = err.code ? err.code : CHOIR_ENOMEM;
        return -1;
    }
    if (conn->len)
        memcpy(grown, conn->body, conn->len);
    choir_free(conn->body);
    conn->body = grown;
    conn->cap = cap;
    return 0;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **con_cls)
{
    choir_server *s = cls;
    srv_conn *conn = *con_cls;
    if (!conn) {
        conn = choir_calloc(CHOIR_MEM_IO, 1, sizeof *conn);
        if (!conn)
            return MHD_NO;
        *con_cls = conn;
        conn->counted = 1;
        atomic_fetch_add(&s->in_flight, 1);
        srv_peer_phase(s, c, SRV_PEER_BODY);
        char why[160];
        unsigned refuse = srv_check_framing(c, version, why, sizeof why);
        if (refuse) {
            /* answered before the body is read: the connection then closes */
            conn->responded = 1;
            srv_peer_phase(s, c, SRV_PEER_BUSY);
            return srv_reply_error(s, c, refuse, NULL, refuse == 501 ? "unsupported_transfer_coding" : "bad_framing",
                                   "%s", why);
        }
        refuse = srv_deadline_begin(s, c, why, sizeof why);
        if (refuse) {
            conn->responded = 1;
            srv_peer_phase(s, c, SRV_PEER_BUSY);
            return srv_reply_error(s, c, refuse, NULL, "invalid_request_timeout", "%s", why);
        }
        refuse = srv_priority_begin(s, c, why, sizeof why);
        if (refuse) {
            conn->responded = 1;
            srv_peer_phase(s, c, SRV_PEER_BUSY);
            return srv_reply_error(s, c, refuse, NULL, "invalid_priority", "%s", why);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        conn->declared = cl ? strtoll(cl, NULL, 10) : -1;
        if (conn->declared > s->p.max_upload_bytes) {
            /* refused before the body is read: a client sending
             * "Expect: 100-continue" learns it without uploading */
            conn->too_big = 1;
            conn->responded = 1;
            srv_peer_phase(s, c, SRV_PEER_BUSY);
            return srv_reply_error(s, c, 413, NULL, "request_too_large",
                                   "request body of %s bytes is over the %lld-byte limit", cl,
                                   (long long)s->p.max_upload_bytes);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        srv_peer_received(s, c, n);
        if (conn->too_big || conn->refused || conn->len + n > (size_t)s->p.max_upload_bytes) {
            conn->too_big |= !conn->refused;
            return MHD_YES;
        }
        if (conn->len + n + 1 > conn->cap && grow_body(s, conn, conn->len + n + 1) < 0)
            return MHD_YES; /* refused: the rest is read and dropped, then 503 */
        memcpy(conn->body + conn->len, upload_data, n);
        conn->len += n;
        conn->body[conn->len] = 0;
        return MHD_YES;
    }
    if (conn->responded)
        return MHD_YES;
    conn->responded = 1;
    srv_peer_phase(s, c, SRV_PEER_BUSY);
    return route(s, c, url, method, conn);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    choir_server *s = cls;
    /* a keep-alive connection now waits for its next request header */
    srv_peer_phase(s, c, SRV_PEER_HEADER);
    srv_conn *conn = *con_cls;
    if (!conn)
        return;
    if (conn->counted)
        atomic_fetch_sub(&s->in_flight, 1);
    choir_free(conn->body);
    choir_free(conn);
    *con_cls = NULL;
}

/* Why the daemon could not listen: libmicrohttpd does not say, so the bind
 * is tried again here for its errno (most often: the port is taken). */
static const char *bind_problem(const struct sockaddr_in *addr)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return strerror(errno);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = bind(fd, (const struct sockaddr *)addr, sizeof *addr);
    int e = errno;
    close(fd);
    if (rc == 0)
        return "the server library failed to start (threads or descriptors?)";
    if (e == EADDRINUSE)
        return "the address is already in use (another server on that port? pick another with --port, or 0 for "
               "any free one)";
    if (e == EACCES)
        return "permission denied (ports below 1024 need privileges)";
    if (e == EADDRNOTAVAIL)
        return "no such address on this machine (see --host)";
    return strerror(e);
}

int choir_server_start(choir_server *s, choir_err *err)
{
    if (s->daemon)
        return choir_err_set(err, CHOIR_EINVAL, "server already started");
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)s->p.port);
    const char *host = strcmp(s->host, "localhost") == 0 ? "127.0.0.1" : s->host;
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return choir_err_set(err, CHOIR_EINVAL, "host \"%s\" is not an IPv4 address", s->host);
    /* poll(), not select(): with a thousand connections, descriptors pass
     * FD_SETSIZE, and libmicrohttpd drops what select() cannot watch. */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_POLL;
    unsigned per_ip = s->p.max_client_connections > 0 ? (unsigned)s->p.max_client_connections : 0;
    if (srv_watch_start(s) < 0)
        return choir_err_set(err, CHOIR_EIO, "cannot start the connection watchdog");
    s->daemon = MHD_start_daemon(flags, (uint16_t)s->p.port, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR, &addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
                                 srv_on_connection, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.max_connections,
                                 MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)s->p.idle_timeout_s, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        srv_watch_stop(s);
        return choir_err_set(err, CHOIR_EIO, "cannot listen on %s:%d: %s", s->host, s->p.port,
                             bind_problem(&addr));
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : s->p.port;
    return 0;
}

/* A warm-up request per model: the smallest input of its first task, so that
 * the weights are loaded (and the first real request is not the one that
 * pays for it). */
static void *preload_main(void *arg)
{
    choir_server *s = arg;
    static const float silence[1600];
    int n = 0;
    srv_model *models = srv_models_list(s, &n);
    for (int i = 0; i < n; i++) {
        const srv_model m = models[i];
        if (atomic_load(&s->stopping))
            break;
        choir_job job = {.model_id = m.id, .priority = CHOIR_PRIORITY_HIGH, .timeout_s = s->p.request_timeout_s};
        if (m.tasks & CHOIR_TASK_BIT(CHOIR_TASK_TTS)) {
            job.req.task = CHOIR_TASK_TTS;
            job.req.in.tts.text = "Hi.";
        } else if (m.tasks & CHOIR_TASK_BIT(CHOIR_TASK_STT)) {
            job.req.task = CHOIR_TASK_STT;
            job.req.in.stt = (choir_stt_input){.samples = silence, .n_samples = 1600, .language = "en"};
        } else if (m.tasks & CHOIR_TASK_BIT(CHOIR_TASK_VAD)) {
            job.req.task = CHOIR_TASK_VAD;
            job.req.in.vad = (choir_vad_input){.samples = silence, .n_samples = 1600};
        } else {
            job.req.task = CHOIR_TASK_STS;
            job.req.in.sts = (choir_sts_input){.samples = silence, .n_samples = 1600, .sample_rate = 16000};
        }
        choir_err err = {0};
        choir_ticket *t = choir_engine_submit(s->engine, &job, NULL, &err);
        int rc = t ? choir_ticket_wait(t, -1, &err) : err.code;
        choir_ticket_free(t);
        atomic_fetch_add(&s->preload_tried, 1);
        if (rc < 0 && atomic_load(&s->stopping))
            break;
        if (rc < 0) {
            atomic_fetch_add(&s->preload_failed, 1);
            choir_log(CHOIR_LOG_ERROR, "preload: model '%s' failed: %s (the other models are served; /health and "
                      "/v1/models name it until a load succeeds)", m.id, err.msg);
        } else {
            choir_log(CHOIR_LOG_INFO, "preloaded %s", m.id);
        }
    }
    choir_free(models);
    atomic_store(&s->ready, 1);
    atomic_store(&s->preload_finished, 1);
    return NULL;
}

int choir_server_preload_done(choir_server *s, int *n_failed, int *n_models)
{
    if (!s || !s->preloading)
        return CHOIR_EINVAL;
    if (!atomic_load(&s->preload_finished))
        return 0;
    if (n_failed)
        *n_failed = atomic_load(&s->preload_failed);
    if (n_models)
        *n_models = atomic_load(&s->preload_tried);
    return 1;
}

int choir_server_preload(choir_server *s, choir_err *err)
{
    if (s->preloading)
        return choir_err_set(err, CHOIR_EINVAL, "already preloading");
    atomic_store(&s->ready, 0);
    if (pthread_create(&s->preload_thread, NULL, preload_main, s) != 0)
        return choir_err_set(err, CHOIR_EIO, "cannot start the preload thread");
    s->preloading = 1;
    return 0;
}

int choir_server_port(const choir_server *s)
{
    return s ? s->port : 0;
}

void choir_server_set_ready(choir_server *s, int ready)
{
    atomic_store(&s->ready, ready ? 1 : 0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int choir_server_shutdown(choir_server *s, double deadline_s)
{
    if (!s || atomic_exchange(&s->shut_down, 1))
        return 0;
    atomic_store(&s->stopping, 1);
    double start = now_s();
    if (deadline_s < 0)
        deadline_s = 0;
    /* Stop accepting first: the listening socket closes, connections already
     * open are still served (new requests on them get 503). */
    if (s->daemon) {
        MHD_socket fd = MHD_quiesce_daemon(s->daemon);
        if (fd != MHD_INVALID_SOCKET)
            close(fd);
    }
    /* In-flight requests may run until shortly before the deadline; what is
     * left then is cut, and cutting (cancelling the engine's work, closing
     * the connections) must itself end by the deadline. */
    double margin = deadline_s * 0.25 < 1.0 ? deadline_s * 0.25 : 1.0;
    double cut_at = start + deadline_s - margin;
    while (atomic_load(&s->in_flight) > 0 && now_s() < cut_at) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    /* Requests still in flight now are the ones cut short: those being
     * computed, streamed, decoded or still uploading. Idle keep-alive
     * connections hold no request and are simply closed. */
    int cut = atomic_load(&s->in_flight);
    atomic_store(&s->requests_cut, cut);
    if (cut > 0)
        __atomic_store_n(&s->abort, 1, __ATOMIC_RELEASE); /* decodes in progress stop */
    double left = cut > 0 ? 0 : deadline_s - (now_s() - start);
    /* The engine fails whatever is still queued or running, which ends those
     * responses; then stopping the daemon closes every connection and joins
     * its thread. */
    choir_engine_shutdown(s->engine, left > 0 ? left : 0);
    if (s->preloading) {
        /* the engine's shutdown has ended a warm-up still running */
        pthread_join(s->preload_thread, NULL);
        s->preloading = 0;
    }
    /* The failed requests' 503s are on their way out: what is left of the
     * margin lets them reach their clients before the connections close. */
    while (cut > 0 && atomic_load(&s->in_flight) > 0 && now_s() < start + deadline_s - margin / 8) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (s->daemon) {
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
    }
    srv_watch_stop(s);
    return cut > 0 ? CHOIR_ETIMEDOUT : 0;
}

int choir_server_requests_cut(const choir_server *s)
{
    return s ? atomic_load(&((choir_server *)s)->requests_cut) : 0;
}

void choir_server_free(choir_server *s)
{
    if (!s)
        return;
    choir_server_shutdown(s, 0);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->peers_mu);
    pthread_cond_destroy(&s->watch_cv);
    choir_free(s->roots);
    choir_free(s->model_aliases);
    choir_free(s->voice_aliases);
    choir_free(s);
}
