/* A raw HTTP/1.1 client and a `choir serve` launcher for tests that play the
 * attacker or the crowd: bytes go on the wire exactly as given (conflicting
 * framing, slow headers), responses are parsed strictly enough to count what
 * a client saw. Loopback only; every read has a deadline. */
#ifndef CHOIR_TEST_HTTPC_H
#define CHOIR_TEST_HTTPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct hc_response {
    int status;         /* 0: no (complete) response */
    char head[8192];    /* status line and headers as received, NUL-terminated */
    char *body;         /* malloc'd, NUL-terminated (may be NULL when empty) */
    size_t body_len;
    int closed;         /* the server closed the connection after it */
    double seconds;     /* from the start of the exchange to the end of the response */
} hc_response;

/* Monotonic seconds. */
double hc_now(void);

/* A blocking TCP connection to 127.0.0.1:port, from `local_ip` (any
 * 127.x.y.z, so that one test can be many clients; NULL: the kernel's
 * choice). Returns the fd or -1. */
int hc_connect(const char *local_ip, int port);

/* Sends all `len` bytes; 0 or -1. */
int hc_send(int fd, const void *data, size_t len);

/* Reads one response from fd within `timeout_s`: the status line, the
 * headers, then a body framed by Content-Length, chunked coding or the end of
 * the connection. Returns the status (also in r->status), or 0 when none
 * arrived in time or the connection closed first. r->closed says whether the
 * peer closed after it (checked for a short moment when the response was
 * framed). */
int hc_read_response(int fd, hc_response *r, double timeout_s);

/* One exchange on a fresh connection: sends `raw` and reads the response. */
int hc_exchange(int port, const char *local_ip, const void *raw, size_t len, hc_response *r, double timeout_s);

/* GET path (Connection: close). */
int hc_get(int port, const char *path, hc_response *r, double timeout_s);

/* POST with a body and content type, plus extra header lines (each ending in
 * "\r\n", or NULL). */
int hc_post(int port, const char *path, const char *content_type, const void *body, size_t len,
            const char *extra_headers, hc_response *r, double timeout_s);

/* The value of header `name` (case-insensitive) copied into out, or NULL. */
const char *hc_header(const hc_response *r, const char *name, char *out, size_t cap);

void hc_response_free(hc_response *r);

/* A multipart/form-data body with text fields (name, value pairs, NULL
 * terminated) and one file part "file". malloc'd; *len set; boundary is
 * "choirtestboundary". */
char *hc_multipart(const char *const *fields, const void *file, size_t file_len, size_t *len);
#define HC_MULTIPART_TYPE "multipart/form-data; boundary=choirtestboundary"

/* A running `choir serve`. */
typedef struct hc_server {
    pid_t pid;
    int port;
    char log[1024];     /* path of its stderr/stdout log */
} hc_server;

/* Starts $CHOIR_BIN serve --port 0 --port-file ... `args` (a shell-quoted
 * argument string) and waits for the port. 0 or -1. */
int hc_server_start(hc_server *s, const char *name, const char *args);
/* Sends `sig`, waits up to `timeout_s` for the exit; returns the exit status
 * (or 128 + signal), or -1 when it did not exit (it is then killed). */
int hc_server_stop(hc_server *s, int sig, double timeout_s);
/* The process's peak resident set (VmHWM) and current one (VmRSS), kB. */
long hc_server_peak_rss_kb(const hc_server *s);
long hc_server_rss_kb(const hc_server *s);
/* The whole log so far (malloc'd). */
char *hc_server_log(const hc_server *s);
/* A fake model directory (models/fake/fake_model.h) NAME under dir, with extra
 * JSON members (", \"fixed_ms\": 100" or ""). Returns the path (static slot). */
const char *hc_fake_model(const char *dir, const char *name, const char *extra_json);
/* The value of a Prometheus series line ("name{labels}") in a /metrics page, or -1. */
double hc_metric(const char *page, const char *series);

#endif
