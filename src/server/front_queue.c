/* Queue policy at the door, as Triton's is: every request has a deadline
 * that covers its queue wait and its compute, the engine refuses at submit a
 * request whose predicted wait already passes it (503 backlog, at once) and
 * fails one whose deadline passes while queued or running (503 deadline), and
 * the answer goes out by the deadline whatever a model does.
 *
 * The deadline starts when the request header is complete: --request-timeout
 * from then, or sooner when the client says so with X-Request-Timeout
 * (seconds), since a client that gives up after N seconds gains nothing from
 * an answer later and holds a seat meanwhile. Uploading and decoding count
 * against it; what is left goes to the engine.
 *
 * The engine stops a running request at its deadline through the request's
 * cancel flag, which models poll between steps. A model step that ignores it
 * would hold the answer; so the connection thread answers 503 itself shortly
 * after the deadline and leaves the job to the watchdog, which frees it once
 * the engine is done with it (the engine writes into the job until then).
 *
 * Replies to submitted requests carry x-ratelimit-style headers, as OpenAI's
 * API sends them: the model's queue capacity, the places left in it and the
 * predicted wait, so a client can slow down before it is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/parse.h"
#include "server/server_internal.h"

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

unsigned srv_deadline_begin(choir_server *s, struct MHD_Connection *c, char *msg, size_t cap)
{
    double timeout = s->p.request_timeout_s;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Timeout");
    unsigned status = 0;
    if (h) {
        /* White space after the value is not part of it (libmicrohttpd strips
         * only the white space before); a value too long to be a number of
         * seconds is refused with the rest. */
        char value[64];
        size_t n = strlen(h);
        while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t'))
            n--;
        double v = 0;
        int bad = n >= sizeof value;
        if (!bad) {
            memcpy(value, h, n);
            value[n] = 0;
            bad = choir_parse_number(value, CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S, 0, &v) < 0;
        }
        if (bad) {
            snprintf(msg, cap, "X-Request-Timeout must be a number of seconds from %g to %g, not \"%.40s\"",
                     CHOIR_SERVER_MIN_TIMEOUT_S, CHOIR_SERVER_MAX_TIMEOUT_S, h);
            status = 400;
        } else if (v < timeout) {
            timeout = v;
        }
    }
    srv_peer *p = srv_peer_of(c);
    if (p) {
        pthread_mutex_lock(&s->peers_mu);
        p->deadline = srv_now() + timeout;
        p->queue_headers = 0;
        p->queue_model[0] = 0;
        pthread_mutex_unlock(&s->peers_mu);
    }
    return status;
}

unsigned srv_priority_begin(choir_server *s, struct MHD_Connection *c, char *msg, size_t cap)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Choir-Priority");
    int low = 0;
    if (h) {
        size_t n = strlen(h);
        while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t'))
            n--;
        if (n == 3 && strncasecmp(h, "low", 3) == 0)
            low = 1;
        else if (!(n == 6 && strncasecmp(h, "normal", 6) == 0)) {
            snprintf(msg, cap, "X-Choir-Priority must be low or normal, not \"%.40s\"", h);
            return 400;
        }
    }
    srv_peer *p = srv_peer_of(c);
    if (p) {
        pthread_mutex_lock(&s->peers_mu);
        p->low_priority = low;
        pthread_mutex_unlock(&s->peers_mu);
    }
    return 0;
}

choir_priority srv_priority_of(choir_server *s, struct MHD_Connection *c)
{
    srv_peer *p = c ? srv_peer_of(c) : NULL;
    int low = 0;
    if (p) {
        pthread_mutex_lock(&s->peers_mu);
        low = p->low_priority;
        pthread_mutex_unlock(&s->peers_mu);
    }
    return low ? CHOIR_PRIORITY_LOW : CHOIR_PRIORITY_NORMAL;
}

double srv_deadline_of(choir_server *s, struct MHD_Connection *c)
{
    srv_peer *p = c ? srv_peer_of(c) : NULL;
    double d = 0;
    if (p) {
        pthread_mutex_lock(&s->peers_mu);
        d = p->deadline;
        pthread_mutex_unlock(&s->peers_mu);
    }
    return d > 0 ? d : srv_now() + s->p.request_timeout_s;
}

void srv_queue_headers_for(struct MHD_Connection *c, const char *id)
{
    /* Only this connection's thread touches these fields. */
    srv_peer *p = c ? srv_peer_of(c) : NULL;
    if (!p)
        return;
    p->queue_headers = 1;
    snprintf(p->queue_model, sizeof p->queue_model, "%s", id ? id : "");
}

void srv_add_queue_headers(choir_server *s, struct MHD_Connection *c, struct MHD_Response *r)
{
    srv_peer *p = c ? srv_peer_of(c) : NULL;
    if (!p || !p->queue_headers)
        return;
    choir_engine_queue_info qi;
    if (choir_engine_get_queue_info(s->engine, p->queue_model[0] ? p->queue_model : NULL, &qi) < 0)
        return;
    char v[32];
    snprintf(v, sizeof v, "%d", qi.capacity);
    MHD_add_response_header(r, "x-ratelimit-limit-requests", v);
    int left = qi.capacity - qi.queued;
    snprintf(v, sizeof v, "%d", left > 0 ? left : 0);
    MHD_add_response_header(r, "x-ratelimit-remaining-requests", v);
    snprintf(v, sizeof v, "%.3gs", qi.predicted_s);
    MHD_add_response_header(r, "x-ratelimit-reset-requests", v);
}

void srv_job_orphan(choir_server *s, srv_job *j)
{
    pthread_mutex_lock(&s->peers_mu);
    j->next_orphan = s->orphans;
    s->orphans = j;
    pthread_mutex_unlock(&s->peers_mu);
}

void srv_reap_orphans(choir_server *s, int all)
{
    pthread_mutex_lock(&s->peers_mu);
    srv_job *list = s->orphans;
    s->orphans = NULL;
    pthread_mutex_unlock(&s->peers_mu);
    srv_job *keep = NULL;
    while (list) {
        srv_job *j = list;
        list = j->next_orphan;
        j->next_orphan = NULL;
        if (all || choir_ticket_done(j->ticket)) {
            srv_job_destroy(j);
        } else {
            j->next_orphan = keep;
            keep = j;
        }
    }
    if (!keep)
        return;
    pthread_mutex_lock(&s->peers_mu);
    srv_job *last = keep;
    while (last->next_orphan)
        last = last->next_orphan;
    last->next_orphan = s->orphans;
    s->orphans = keep;
    pthread_mutex_unlock(&s->peers_mu);
}
