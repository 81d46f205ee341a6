#include "httpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

double hc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int hc_connect(const char *local_ip, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (local_ip) {
        struct sockaddr_in me = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, local_ip, &me.sin_addr) != 1 || bind(fd, (struct sockaddr *)&me, sizeof me) != 0) {
            close(fd);
            return -1;
        }
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int hc_send(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

typedef struct rbuf {
    char *data;
    size_t len, cap, pos; /* pos: what the parser has consumed */
    int eof;
} rbuf;

/* Reads more bytes before `deadline`; 1 got some, 0 timeout, -1 EOF/error. */
static int fill(int fd, rbuf *b, double deadline)
{
    if (b->eof)
        return -1;
    double left = deadline - hc_now();
    if (left <= 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc = poll(&p, 1, (int)(left * 1000) + 1);
    if (rc <= 0)
        return 0;
    if (b->len + 65536 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 131072;
        char *g = realloc(b->data, cap);
        if (!g)
            return -1;
        b->data = g;
        b->cap = cap;
    }
    ssize_t n = recv(fd, b->data + b->len, b->cap - b->len - 1, 0);
    if (n <= 0) {
        b->eof = 1;
        return -1;
    }
    b->len += (size_t)n;
    b->data[b->len] = 0;
    return 1;
}

/* Makes at least `want` unconsumed bytes available; 0 or -1. */
static int need(int fd, rbuf *b, size_t want, double deadline)
{
    while (b->len - b->pos < want)
        if (fill(fd, b, deadline) <= 0)
            return -1;
    return 0;
}

/* The next CRLF-terminated line (without CRLF) as [*line, *line + *n). */
static int next_line(int fd, rbuf *b, double deadline, const char **line, size_t *n)
{
    for (;;) {
        char *nl = b->len > b->pos ? memmem(b->data + b->pos, b->len - b->pos, "\r\n", 2) : NULL;
        if (nl) {
            *line = b->data + b->pos;
            *n = (size_t)(nl - (b->data + b->pos));
            b->pos += *n + 2;
            return 0;
        }
        if (fill(fd, b, deadline) <= 0)
            return -1;
    }
}

const char *hc_header(const hc_response *r, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    const char *p = strstr(r->head, "\r\n");
    while (p && p[2]) {
        p += 2;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t n = e ? (size_t)(e - v) : strlen(v);
            if (n >= cap)
                n = cap - 1;
            memcpy(out, v, n);
            out[n] = 0;
            return out;
        }
        p = strstr(p, "\r\n");
    }
    return NULL;
}

static int append_body(hc_response *r, const char *data, size_t n)
{
    char *g = realloc(r->body, r->body_len + n + 1);
    if (!g)
        return -1;
    r->body = g;
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = 0;
    return 0;
}

int hc_read_response(int fd, hc_response *r, double timeout_s)
{
    memset(r, 0, sizeof *r);
    double t0 = hc_now(), deadline = t0 + timeout_s;
    rbuf b = {0};
    const char *line;
    size_t n;
    int status = 0;
    size_t head_len = 0;
    /* status line and headers */
    for (;;) {
        if (next_line(fd, &b, deadline, &line, &n) < 0)
            goto out;
        if (head_len + n + 3 < sizeof r->head) {
            memcpy(r->head + head_len, line, n);
            memcpy(r->head + head_len + n, "\r\n", 3);
            head_len += n + 2;
        }
        if (!status) {
            if (n < 12 || strncmp(line, "HTTP/1.", 7) != 0)
                goto out;
            status = atoi(line + 9);
            continue;
        }
        if (n == 0)
            break;
    }
    char v[64];
    int chunked = hc_header(r, "Transfer-Encoding", v, sizeof v) && strcasecmp(v, "chunked") == 0;
    const char *cl = hc_header(r, "Content-Length", v, sizeof v);
    if (chunked) {
        for (;;) {
            if (next_line(fd, &b, deadline, &line, &n) < 0)
                goto out;
            size_t size = strtoul(line, NULL, 16);
            if (size == 0) {
                while (next_line(fd, &b, deadline, &line, &n) == 0 && n > 0) {
                }
                break;
            }
            if (need(fd, &b, size + 2, deadline) < 0)
                goto out;
            append_body(r, b.data + b.pos, size);
            b.pos += size + 2;
        }
    } else if (cl) {
        size_t size = strtoul(cl, NULL, 10);
        if (size && need(fd, &b, size, deadline) < 0)
            goto out;
        append_body(r, b.data + b.pos, size);
        b.pos += size;
    } else {
        while (fill(fd, &b, deadline) > 0) {
        }
        if (!b.eof)
            goto out;
        append_body(r, b.data + b.pos, b.len - b.pos);
        b.pos = b.len;
    }
    r->status = status;
    r->seconds = hc_now() - t0;
    /* closed afterwards? (a short look: keep-alive connections stay open) */
    if (b.eof || fill(fd, &b, hc_now() + 0.05) < 0)
        r->closed = 1;
out:
    if (!r->status)
        r->seconds = hc_now() - t0;
    free(b.data);
    return r->status;
}

int hc_exchange(int port, const char *local_ip, const void *raw, size_t len, hc_response *r, double timeout_s)
{
    memset(r, 0, sizeof *r);
    int fd = hc_connect(local_ip, port);
    if (fd < 0)
        return 0;
    double t0 = hc_now();
    int st = hc_send(fd, raw, len) == 0 ? hc_read_response(fd, r, timeout_s) : 0;
    r->seconds = hc_now() - t0;
    close(fd);
    return st;
}

int hc_get(int port, const char *path, hc_response *r, double timeout_s)
{
    char req[1024];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    return hc_exchange(port, NULL, req, (size_t)n, r, timeout_s);
}

int hc_post(int port, const char *path, const char *content_type, const void *body, size_t len,
            const char *extra_headers, hc_response *r, double timeout_s)
{
    size_t cap = len + 4096;
    char *req = malloc(cap);
    if (!req)
        return 0;
    int n = snprintf(req, cap,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\n%s\r\n",
                     path, content_type, len, extra_headers ? extra_headers : "");
    memcpy(req + n, body, len);
    int st = hc_exchange(port, NULL, req, (size_t)n + len, r, timeout_s);
    free(req);
    return st;
}

void hc_response_free(hc_response *r)
{
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
}

char *hc_multipart(const char *const *fields, const void *file, size_t file_len, size_t *len)
{
    size_t cap = file_len + 4096;
    for (int i = 0; fields && fields[i]; i += 2)
        cap += strlen(fields[i]) + strlen(fields[i + 1]) + 128;
    char *b = malloc(cap);
    if (!b)
        return NULL;
    size_t n = 0;
    for (int i = 0; fields && fields[i]; i += 2)
        n += (size_t)snprintf(b + n, cap - n,
                              "--choirtestboundary\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n",
                              fields[i], fields[i + 1]);
    n += (size_t)snprintf(b + n, cap - n,
                          "--choirtestboundary\r\nContent-Disposition: form-data; name=\"file\"; "
                          "filename=\"upload\"\r\nContent-Type: application/octet-stream\r\n\r\n");
    memcpy(b + n, file, file_len);
    n += file_len;
    n += (size_t)snprintf(b + n, cap - n, "\r\n--choirtestboundary--\r\n");
    *len = n;
    return b;
}

int hc_server_start(hc_server *s, const char *name, const char *args)
{
    memset(s, 0, sizeof *s);
    const char *bin = getenv("CHOIR_BIN") ? getenv("CHOIR_BIN") : CHOIR_BIN;
    char port_file[1024], cmd[8192];
    snprintf(port_file, sizeof port_file, "%s", tu_tmpfile(name));
    strncat(port_file, ".port", sizeof port_file - strlen(port_file) - 1);
    snprintf(s->log, sizeof s->log, "%s.log", port_file);
    unlink(port_file);
    snprintf(cmd, sizeof cmd, "exec '%s' serve --port 0 --port-file '%s' %s >'%s' 2>&1", bin, port_file, args,
             s->log);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* The server dies with the test, however the test ends (a failed
         * assertion, a crash, a timeout's SIGKILL): no `choir serve` is left
         * holding ports and memory. The signal survives the exec. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
            _exit(127);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    for (int i = 0; i < 300; i++) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            int ok = fscanf(f, "%d", &s->port) == 1;
            fclose(f);
            if (ok && s->port > 0)
                return 0;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            return -1;
        }
        usleep(50 * 1000);
    }
    hc_server_stop(s, SIGKILL, 5);
    return -1;
}

int hc_server_stop(hc_server *s, int sig, double timeout_s)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, sig);
    double end = hc_now() + timeout_s;
    int st = 0;
    for (;;) {
        pid_t w = waitpid(s->pid, &st, WNOHANG);
        if (w == s->pid)
            break;
        if (hc_now() > end) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            s->pid = 0;
            return -1;
        }
        usleep(10 * 1000);
    }
    s->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static long status_kb(const hc_server *s, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)s->pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0)
            kb = strtol(line + kl, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

long hc_server_peak_rss_kb(const hc_server *s)
{
    return status_kb(s, "VmHWM:");
}

long hc_server_rss_kb(const hc_server *s)
{
    return status_kb(s, "VmRSS:");
}

char *hc_server_log(const hc_server *s)
{
    size_t n;
    char *t = tu_read_file(s->log, &n);
    return t;
}

const char *hc_fake_model(const char *dir, const char *name, const char *extra_json)
{
    static char bufs[8][1024];
    static int slot;
    char *path = bufs[slot++ % 8];
    mkdir(dir, 0755);
    snprintf(path, 1024, "%s/%s", dir, name);
    mkdir(path, 0755);
    char f[1100], json[2048];
    snprintf(f, sizeof f, "%s/config.json", path);
    int n = snprintf(json, sizeof json, "{\"model_type\": \"choir-fake\"%s}\n", extra_json ? extra_json : "");
    tu_write_file(f, json, (size_t)n);
    snprintf(f, sizeof f, "%s/model.safetensors", path);
    char zeros[4096] = {0};
    tu_write_file(f, zeros, sizeof zeros);
    return path;
}

double hc_metric(const char *page, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = page; p && *p;) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}
