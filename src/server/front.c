/* The server's front door: request framing checks (this part) and, in
 * front_watch.c, the connection registry with its deadlines.
 *
 * Framing. libmicrohttpd takes the first Content-Length when there are
 * several, prefers Transfer-Encoding over Content-Length, and for a coding it
 * does not know reads the body until the connection ends. A proxy in front of
 * us may decide differently, and the bytes one side calls a body the other
 * calls the next request (request smuggling). So a request whose length is
 * ambiguous is refused before its body is read, and the refusal closes the
 * connection: libmicrohttpd closes it after any response queued at the first
 * call, so nothing that follows on it is ever parsed. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/server_internal.h"

typedef struct framing {
    int n_length, n_coding;
    const char *coding;
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    framing *f = cls;
    if (!key)
        return MHD_YES;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        f->n_length++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->n_coding++;
        f->coding = value ? value : "";
    }
    return MHD_YES;
}

/* "chunked", with optional whitespace around it, and nothing else. */
static int only_chunked(const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    if (strncasecmp(v, "chunked", 7) != 0)
        return 0;
    v += 7;
    while (*v == ' ' || *v == '\t')
        v++;
    return *v == 0;
}

unsigned srv_check_framing(struct MHD_Connection *c, const char *version, char *msg, size_t cap)
{
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
    if (f.n_length > 1) {
        snprintf(msg, cap, "the request has %d Content-Length headers; send one", f.n_length);
        return 400;
    }
    if (f.n_coding > 1) {
        snprintf(msg, cap, "the request has %d Transfer-Encoding headers; send one", f.n_coding);
        return 400;
    }
    if (f.n_coding && f.n_length) {
        snprintf(msg, cap, "the request has both Content-Length and Transfer-Encoding; send one of them");
        return 400;
    }
    if (f.n_coding && version && strcmp(version, MHD_HTTP_VERSION_1_1) != 0) {
        snprintf(msg, cap, "Transfer-Encoding is not defined for %s", version);
        return 400;
    }
    if (f.n_coding && !only_chunked(f.coding)) {
        snprintf(msg, cap, "Transfer-Encoding \"%.64s\" is not supported (only chunked)", f.coding);
        return 501;
    }
    return 0;
}
