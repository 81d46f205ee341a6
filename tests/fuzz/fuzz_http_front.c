/* libFuzzer harness: arbitrary bytes at `choir serve`'s door (an in-process
 * server with the fake model, over loopback). Each input goes on a fresh
 * connection, which is then half-closed; whatever the bytes (several
 * requests, broken framing, chunked bodies, multipart uploads), the server
 * must not crash, must not answer 500 (that would be a server fault, not a
 * bad request), and must go on answering /health/live (checked every 64 inputs). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned long runs;
    int closed;
    int status = fuzz_exchange(data, size, 1, 10.0, &closed);
    if (status == 500)
        __builtin_trap();
    if (++runs % 64 == 0 && !fuzz_server_healthy())
        __builtin_trap();
    return 0;
}

/* A request: `head` (without the blank line), a Content-Length for `body`
 * when `length` is set, then the body. */
static int add_seed(fuzz_seed *out, int n, int cap, const char *head, const void *body, size_t body_len, int length)
{
    if (n >= cap)
        return n;
    size_t hl = strlen(head);
    uint8_t *d = malloc(hl + body_len + 64);
    if (!d)
        return n;
    size_t len = (size_t)snprintf((char *)d, hl + 64, length ? "%sContent-Length: %zu\r\n\r\n" : "%s\r\n", head,
                                  body_len);
    memcpy(d + len, body, body_len);
    out[n] = (fuzz_seed){d, len + body_len};
    return n + 1;
}

int fuzz_seeds(fuzz_seed *out, int cap)
{
    static const char speech[] = "{\"model\":\"fake\",\"input\":\"hi\",\"response_format\":\"pcm\"}";
    static const char sse[] = "{\"model\":\"fake\",\"input\":\"hi\",\"stream_format\":\"sse\",\"response_format\":\"wav\"}";
    static const char chunked[] = "10\r\n{\"model\":\"fake\",\r\n1b\r\n\"input\":\"hello\",\"stream\":1}\r\n0\r\n\r\n";
    static const char wav[] = "RIFF\x24\0\0\0WAVEfmt \x10\0\0\0\1\0\1\0\x80\x3e\0\0\0\x7d\0\0\2\0\x10\0data\0\0\0\0";
    char multipart[512];
    size_t ml = (size_t)snprintf(multipart, sizeof multipart,
                                 "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nfake\r\n--b\r\n"
                                 "Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
                                 "Content-Type: audio/wav\r\n\r\n");
    memcpy(multipart + ml, wav, sizeof wav - 1);
    ml += sizeof wav - 1;
    ml += (size_t)snprintf(multipart + ml, sizeof multipart - ml, "\r\n--b--\r\n");
    int n = 0;
    n = add_seed(out, n, cap, "GET /health HTTP/1.1\r\nHost: x\r\n", "", 0, 0);
    static const char pipelined[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    n = add_seed(out, n, cap, "GET /health/live HTTP/1.1\r\nHost: x\r\n", pipelined, sizeof pipelined - 1, 0);
    n = add_seed(out, n, cap, "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n", speech,
                 sizeof speech - 1, 1);
    n = add_seed(out, n, cap,
                 "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "X-Request-Timeout: 0.5\r\n",
                 sse, sizeof sse - 1, 1);
    n = add_seed(out, n, cap,
                 "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\n",
                 chunked, sizeof chunked - 1, 0);
    n = add_seed(out, n, cap,
                 "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n"
                 "Content-Type: multipart/form-data; boundary=b\r\n",
                 multipart, ml, 1);
    static const char delete[] = "DELETE /v1/models/none HTTP/1.1\r\n\r\n";
    n = add_seed(out, n, cap, "GET /v1/models HTTP/1.1\r\nHost: x\r\n", delete, sizeof delete - 1, 0);
    n = add_seed(out, n, cap, "POST /v1/audio/speech HTTP/1.0\r\nContent-Length: 3\r\n", "{}", 2, 1);
    return n;
}
