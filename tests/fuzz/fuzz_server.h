/* An in-process `choir serve` for the HTTP harnesses (fuzz_http_front.c,
 * fuzz_json_body.c): an engine with the fake model "fake" (1 ms per batch)
 * and a server on a free loopback port, started on first use and left
 * running for the process's life. Header-only: each harness is one file. */
#ifndef CHOIR_FUZZ_SERVER_H
#define CHOIR_FUZZ_SERVER_H

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "choir/engine.h"
#include "choir/log.h"
#include "choir/server.h"
#include "models/fake/fake_model.h"

static choir_server *g_fuzz_server;
static choir_engine *g_fuzz_engine;

static void fuzz_server_stop(void)
{
    choir_server_free(g_fuzz_server);
    choir_engine_free(g_fuzz_engine);
}

/* The server's port; the process exits if it cannot start. */
static int fuzz_server_port(void)
{
    if (g_fuzz_server)
        return choir_server_port(g_fuzz_server);
    choir_log_set_level(CHOIR_LOG_ERROR);
    char dir[] = "/tmp/choir-fuzz-XXXXXX";
    if (!mkdtemp(dir))
        exit(2);
    char model[64];
    snprintf(model, sizeof model, "%s/fake", dir);
    choir_fake_params fp = {.fixed_ms = 1, .bytes_per_unit = 16};
    choir_err err = {0};
    choir_engine_params ep = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    ep.memory_budget = 256 << 20;
    ep.wait_short_ms = 0.01; /* no batching wait: one input after another */
    ep.wait_long_ms = 0.01;
    choir_engine *e = choir_fake_model_write(model, &fp, &err) == 0 ? choir_engine_create(&ep, &err) : NULL;
    choir_server_params sp = choir_server_default_params();
    sp.port = 0;
    sp.max_upload_bytes = 1 << 20;
    sp.max_client_connections = -1;
    choir_server *s = e ? choir_server_create(e, &sp, &err) : NULL;
    if (!s || choir_server_add_model(s, "fake", model, &err) < 0 || choir_server_start(s, &err) < 0) {
        fprintf(stderr, "fuzz: cannot start the server: %s\n", err.msg);
        exit(2);
    }
    choir_server_set_ready(s, 1);
    g_fuzz_server = s;
    g_fuzz_engine = e;
    atexit(fuzz_server_stop);
    return choir_server_port(s);
}

/* Sends `len` bytes on a fresh connection and reads what comes back until
 * the server closes or `timeout_s` passes; with `half_close`, the client's
 * side is shut after 30 ms without an answer. Returns the
 * status of the first response (0 when none), *closed whether the server
 * closed in time. The socket resets on close, so that millions of runs leave
 * no TIME_WAIT behind. */
static int fuzz_exchange(const void *data, size_t len, int half_close, double timeout_s, int *closed)
{
    *closed = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fuzz_server_port())};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return 0;
    }
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, (const char *)data + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server may close early (a 413, a refused framing) */
        off += (size_t)n;
    }
    char head[16];
    size_t got = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double left = timeout_s - ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        /* Half-closing at once would look to the server like a client that
         * left (it cancels such requests): the socket stays open while
         * answers keep coming, and is half-closed after 30 ms of silence,
         * which ends a request the bytes left incomplete. */
        int wait_ms = half_close == 1 ? 30 : (int)(left * 1000) + 1;
        int ready = left > 0 ? poll(&p, 1, wait_ms) : 0;
        if (ready == 0 && half_close == 1 && left > 0) {
            shutdown(fd, SHUT_WR);
            half_close = 2;
            continue;
        }
        if (ready <= 0)
            break;
        char buf[8192];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            *closed = 1;
            break;
        }
        for (ssize_t i = 0; i < n && got < sizeof head; i++)
            head[got++] = buf[i];
    }
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
    if (got < 12 || memcmp(head, "HTTP/1.", 7) != 0)
        return 0;
    return (head[9] - '0') * 100 + (head[10] - '0') * 10 + (head[11] - '0');
}

/* 1 when GET /health/live answers 200 (the server still answers; /health may
 * be 503 while the engine is degraded). */
static int fuzz_server_healthy(void)
{
    static const char req[] = "GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int closed;
    return fuzz_exchange(req, sizeof req - 1, 0, 5.0, &closed) == 200;
}

#endif
