/* Replies: plain bodies, JSON, OpenAI-shaped errors and the mapping from the
 * engine's refusals to HTTP statuses. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/log.h"
#include "server/server_internal.h"

void srv_count_status(choir_server *s, unsigned status)
{
    unsigned cls = status / 100;
    if (cls < SRV_STATUS_CLASSES)
        atomic_fetch_add(&s->responses[cls], 1);
}

static void add_retry_after(choir_server *s, struct MHD_Response *r, unsigned status)
{
    if (status != 429 && status != 503)
        return;
    double secs = choir_engine_retry_after(s->engine);
    char v[32];
    snprintf(v, sizeof v, "%d", secs < 1 ? 1 : (int)ceil(secs));
    MHD_add_response_header(r, "Retry-After", v);
}

/* The allowed form of the request's Origin ("*" or the origin itself), or NULL. */
static const char *allowed_origin(choir_server *s, struct MHD_Connection *c)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!s->p.cors || !origin || !*origin)
        return NULL;
    size_t n = strlen(origin);
    for (const char *p = s->p.cors; *p;) {
        size_t len = strcspn(p, ",");
        const char *t = p;
        size_t tl = len;
        while (tl && *t == ' ')
            t++, tl--;
        while (tl && t[tl - 1] == ' ')
            tl--;
        if (tl == 1 && *t == '*')
            return "*";
        if (tl == n && strncasecmp(t, origin, n) == 0)
            return origin;
        p += len;
        if (*p)
            p++;
    }
    return NULL;
}

void srv_add_cors(choir_server *s, struct MHD_Connection *c, struct MHD_Response *r)
{
    const char *allow = allowed_origin(s, c);
    if (!allow)
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
    /* the answer depends on Origin: caches must keep one per origin */
    if (strcmp(allow, "*") != 0)
        MHD_add_response_header(r, "Vary", "Origin");
    MHD_add_response_header(r, "Access-Control-Expose-Headers",
                            "Retry-After, Content-Length, Content-Type, x-ratelimit-limit-requests, "
                            "x-ratelimit-remaining-requests, x-ratelimit-reset-requests");
}

enum MHD_Result srv_reply_preflight(choir_server *s, struct MHD_Connection *c)
{
    if (!allowed_origin(s, c))
        return srv_reply_error(s, c, 403, NULL, "cors_origin_not_allowed",
                               "cross-origin requests from this origin are not allowed (see choir serve --cors)");
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    srv_add_cors(s, c, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            want && strlen(want) < 512 ? want : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    srv_count_status(s, 204);
    return ret;
}

enum MHD_Result srv_reply(choir_server *s, struct MHD_Connection *c, unsigned status, const char *content_type,
                          const void *data, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (content_type)
        MHD_add_response_header(r, "Content-Type", content_type);
    add_retry_after(s, r, status);
    srv_add_queue_headers(s, c, r);
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"choir\"");
    srv_add_cors(s, c, r);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    srv_count_status(s, status);
    return ret;
}

enum MHD_Result srv_reply_json(choir_server *s, struct MHD_Connection *c, unsigned status, void *json)
{
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (!text)
        return srv_reply(s, c, 500, "application/json",
                         "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}", 59);
    enum MHD_Result ret = srv_reply(s, c, status, "application/json", text, strlen(text));
    cJSON_free(text);
    return ret;
}

static const char *error_type(unsigned status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 400:
    case 405:
    case 409:
    case 413:
    case 415:
    case 501: return "invalid_request_error";
    default: return "server_error";
    }
}

enum MHD_Result srv_reply_error(choir_server *s, struct MHD_Connection *c, unsigned status, const char *param,
                                const char *code, const char *fmt, ...)
{
    char msg[CHOIR_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    if (e) {
        cJSON_AddStringToObject(e, "message", msg);
        cJSON_AddStringToObject(e, "type", error_type(status));
        if (param)
            cJSON_AddStringToObject(e, "param", param);
        else
            cJSON_AddNullToObject(e, "param");
        if (code)
            cJSON_AddStringToObject(e, "code", code);
        else
            cJSON_AddNullToObject(e, "code");
    }
    return srv_reply_json(s, c, status, root);
}

unsigned srv_engine_status(int code, choir_reject_reason reason)
{
    switch (reason) {
    case CHOIR_REJECT_QUEUE_FULL:
    case CHOIR_REJECT_MEMORY: return 429;
    case CHOIR_REJECT_OVERLOAD:
    case CHOIR_REJECT_BACKLOG:
    case CHOIR_REJECT_DEADLINE:
    case CHOIR_REJECT_SHUTDOWN: return 503;
    case CHOIR_REJECT_TOO_LARGE: return 413;
    case CHOIR_REJECT_FAILED:
        /* the model refused this request's input (an unknown voice, an
         * unsupported language): the caller's to fix, unlike a crash */
        if (code == CHOIR_EINVAL || code == CHOIR_ENOTFOUND || code == CHOIR_EUNSUPPORTED || code == CHOIR_EFORMAT)
            return 400;
        if (code == CHOIR_ETOOBIG)
            return 413;
        return 500;
    default: break;
    }
    switch (code) {
    case CHOIR_EINVAL: return 400;
    case CHOIR_ENOTFOUND: return 404;
    case CHOIR_ETOOBIG: return 413;
    case CHOIR_EBUSY: return 429;
    case CHOIR_ETIMEDOUT:
    case CHOIR_ECANCELED: return 503;
    case CHOIR_EFORMAT:
    case CHOIR_EUNSUPPORTED: return 415;
    default: return 500;
    }
}

enum MHD_Result srv_reply_engine_error(choir_server *s, struct MHD_Connection *c, int code,
                                       choir_reject_reason reason, const char *msg)
{
    unsigned status = srv_engine_status(code, reason);
    const char *ecode = reason != CHOIR_REJECT_NONE ? choir_reject_reason_name(reason) : NULL;
    char text[CHOIR_ERR_MSG_MAX];
    snprintf(text, sizeof text, "%s", msg && *msg ? msg : choir_strerror(code));
    srv_scrub_paths(s, text, sizeof text);
    return srv_reply_error(s, c, status, NULL, ecode, "%s", text);
}

/* A character that may end the text before a path: a path starts a word. */
static int starts_word(const char *msg, size_t i)
{
    return i == 0 || strchr(" \t\n\"'(=[,<{", msg[i - 1]) != NULL;
}

/* The length of the path-like word at msg + i ("/x/y", "./x", "../x", "~/x"),
 * or 0. It ends at white space, a quote, a bracket, ',' or ';', or ':' before
 * white space (as in "/dir/config.json: not JSON"). */
static size_t path_word(const char *msg, size_t i)
{
    const char *p = msg + i;
    if (!starts_word(msg, i))
        return 0;
    if (!(p[0] == '/' || (p[0] == '~' && p[1] == '/') || (p[0] == '.' && p[1] == '/') ||
          (p[0] == '.' && p[1] == '.' && p[2] == '/')))
        return 0;
    size_t n = 0;
    while (p[n] && !strchr(" \t\n\"'()[]<>{},;", p[n]) && !(p[n] == ':' && (p[n + 1] == 0 || p[n + 1] == ' ')))
        n++;
    return n > 1 ? n : 0;
}

/* srv_scrub_paths; the original message is logged when `log`. */
static void scrub_paths(choir_server *s, char *msg, size_t cap, int log)
{
    if (!msg || cap == 0)
        return;
    int n_models = choir_engine_models(s->engine, NULL, 0);
    choir_engine_model_info *info =
        n_models > 0 ? choir_calloc(CHOIR_MEM_IO, (size_t)n_models, sizeof *info) : NULL;
    n_models = info ? choir_engine_models(s->engine, info, n_models) : 0;
    char out[CHOIR_ERR_MSG_MAX];
    size_t o = 0, len = strlen(msg);
    int changed = 0;
    for (size_t i = 0; i < len && o + 1 < sizeof out;) {
        /* a model's own directory reads as its id: "kokoro/voices/x.bin" */
        size_t best = 0;
        const char *id = NULL;
        for (int m = 0; m < n_models; m++) {
            size_t d = strlen(info[m].dir);
            while (d > 1 && info[m].dir[d - 1] == '/')
                d--;
            if (d > best && d <= len - i && strncmp(msg + i, info[m].dir, d) == 0 && starts_word(msg, i) &&
                (msg[i + d] == 0 || msg[i + d] == '/' || strchr(" :,;)\"'", msg[i + d]))) {
                best = d;
                id = info[m].id;
            }
        }
        const char *put = id;
        size_t skip = best;
        if (!put && (skip = path_word(msg, i)) > 0)
            put = "[path]";
        if (put) {
            int w = snprintf(out + o, sizeof out - o, "%s", put);
            o += w > 0 ? (size_t)w : 0;
            if (o >= sizeof out)
                o = sizeof out - 1;
            i += skip;
            changed = 1;
            continue;
        }
        out[o++] = msg[i++];
    }
    out[o] = 0;
    choir_free(info);
    if (!changed)
        return;
    /* the operator still sees where it happened */
    if (log)
        choir_log(CHOIR_LOG_WARN, "to the client without paths: %s", msg);
    snprintf(msg, cap, "%s", out);
}

void srv_scrub_paths(choir_server *s, char *msg, size_t cap)
{
    scrub_paths(s, msg, cap, 1);
}

void srv_scrub_paths_quietly(choir_server *s, char *msg, size_t cap)
{
    scrub_paths(s, msg, cap, 0);
}

int srv_utf8_chars(const char *s)
{
    int n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}
