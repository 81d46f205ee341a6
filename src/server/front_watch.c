/* The connection registry and its watchdog: deadlines as nginx and Apache's
 * mod_reqtimeout have them, which libmicrohttpd lacks.
 *
 * libmicrohttpd offers a total connection limit, a per-client (per IP)
 * limit and an idle timeout, which it resets on every byte received, so a
 * client sending one header byte every few seconds holds its connection (and
 * with thread-per-connection, a thread) forever. What it does offer is a
 * callback when a connection opens and closes (MHD_OPTION_NOTIFY_CONNECTION)
 * with a per-socket context, and calls into our handler when the request
 * header is complete and as the body arrives. That is enough to know, for
 * every connection, which phase it is in and since when:
 *
 *   waiting for a request header (since accept, or since the previous
 *   response ended): the header must be complete within header_timeout_s
 *   (plus keepalive_timeout_s between requests);
 *   receiving the body: it must arrive at body_min_rate bytes/s after a grace
 *   of body_timeout_s (deadline = start + grace + received / rate);
 *   being served: no deadline here (the engine's covers the work, the idle
 *   timeout a client that stops reading).
 *
 * A watchdog thread looks every 100 ms and ends a late connection with
 * shutdown(2): libmicrohttpd's thread for it sees the end of its input and
 * closes it. The fd stays valid while we hold the registry lock, because
 * libmicrohttpd calls the close notification (which takes the same lock to
 * unregister) before it closes the socket. */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/log.h"
#include "server/server_internal.h"

#define WATCH_PERIOD_MS 100

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code)
{
    choir_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_peer *p = choir_calloc(CHOIR_MEM_IO, 1, sizeof *p);
        *socket_context = p;
        if (!p)
            return; /* unwatched, still served */
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        p->fd = info ? info->connect_fd : -1;
        p->phase = SRV_PEER_HEADER;
        p->since = mono_now();
        pthread_mutex_lock(&s->peers_mu);
        p->next = s->peers;
        if (s->peers)
            s->peers->prev = p;
        s->peers = p;
        s->n_peers++;
        pthread_mutex_unlock(&s->peers_mu);
        atomic_fetch_add(&s->connections_total, 1);
        return;
    }
    srv_peer *p = *socket_context;
    if (!p)
        return;
    pthread_mutex_lock(&s->peers_mu);
    if (p->prev)
        p->prev->next = p->next;
    else
        s->peers = p->next;
    if (p->next)
        p->next->prev = p->prev;
    s->n_peers--;
    pthread_mutex_unlock(&s->peers_mu);
    choir_free(p);
    *socket_context = NULL;
}

srv_peer *srv_peer_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? (srv_peer *)info->socket_context : NULL;
}

void srv_peer_phase(choir_server *s, struct MHD_Connection *c, srv_peer_phase_t phase)
{
    srv_peer *p = srv_peer_of(c);
    if (!p)
        return;
    pthread_mutex_lock(&s->peers_mu);
    if (p->phase != phase) {
        p->phase = phase;
        p->since = mono_now();
        p->body_bytes = 0;
        if (phase == SRV_PEER_HEADER) {
            p->requests++;
            p->queue_headers = 0; /* the next request is not submitted yet */
        }
    }
    pthread_mutex_unlock(&s->peers_mu);
}

void srv_peer_received(choir_server *s, struct MHD_Connection *c, size_t n)
{
    srv_peer *p = srv_peer_of(c);
    if (!p)
        return;
    pthread_mutex_lock(&s->peers_mu);
    p->body_bytes += (int64_t)n;
    pthread_mutex_unlock(&s->peers_mu);
}

/* The reason a peer is late at `now`, or NULL. Registry lock held. */
static const char *late(const choir_server *s, const srv_peer *p, double now)
{
    const choir_server_params *q = &s->p;
    double age = now - p->since;
    switch (p->phase) {
    case SRV_PEER_HEADER: {
        double limit = q->header_timeout_s + (p->requests > 0 ? q->keepalive_timeout_s : 0);
        return age > limit ? "header_timeout" : NULL;
    }
    case SRV_PEER_BODY: {
        double allowed = q->body_timeout_s + (q->body_min_rate > 0 ? (double)p->body_bytes / q->body_min_rate : 1e18);
        return age > allowed ? "body_too_slow" : NULL;
    }
    default:
        return NULL;
    }
}

static void *watch_main(void *arg)
{
    choir_server *s = arg;
    pthread_mutex_lock(&s->peers_mu);
    while (!s->watch_stop) {
        double now = mono_now();
        for (srv_peer *p = s->peers; p; p = p->next) {
            const char *why = p->cut ? NULL : late(s, p, now);
            if (!why || p->fd < 0)
                continue;
            /* ends it: libmicrohttpd's thread reads the end of input and closes */
            shutdown(p->fd, SHUT_RDWR);
            p->cut = 1;
            atomic_fetch_add(why[0] == 'h' ? &s->cut_header : &s->cut_body, 1);
            CHOIR_LOGD("server: closed a connection: %s", why);
        }
        if (s->orphans) {
            pthread_mutex_unlock(&s->peers_mu);
            srv_reap_orphans(s, 0);
            pthread_mutex_lock(&s->peers_mu);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WATCH_PERIOD_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->watch_cv, &s->peers_mu, &ts);
    }
    pthread_mutex_unlock(&s->peers_mu);
    return NULL;
}

int srv_watch_start(choir_server *s)
{
    s->watch_stop = 0;
    if (pthread_create(&s->watch_thread, NULL, watch_main, s) != 0)
        return CHOIR_EIO;
    s->watching = 1;
    return 0;
}

void srv_watch_stop(choir_server *s)
{
    if (!s->watching)
        return;
    pthread_mutex_lock(&s->peers_mu);
    s->watch_stop = 1;
    pthread_cond_signal(&s->watch_cv);
    pthread_mutex_unlock(&s->peers_mu);
    pthread_join(s->watch_thread, NULL);
    s->watching = 0;
    /* the engine has stopped: every orphan's ticket is finished */
    srv_reap_orphans(s, 1);
}

int srv_peer_count(choir_server *s)
{
    pthread_mutex_lock(&s->peers_mu);
    int n = s->n_peers;
    pthread_mutex_unlock(&s->peers_mu);
    return n;
}
