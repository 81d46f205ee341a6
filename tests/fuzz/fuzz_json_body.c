/* libFuzzer harness: arbitrary JSON bodies for the routes that take JSON
 * (POST /v1/audio/speech, and POST /v1/models with 1 input in 8), sent
 * well-framed to an in-process server with the fake model. The answer must
 * be a success or a 4xx (a bad body is the client's fault; 500 or no answer
 * would be the server's), and the server must stay up. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz.h"
#include "fuzz_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned long runs;
    /* the length picks the route, so every byte is the body's */
    const char *route = size % 8 == 7 ? "/v1/models" : "/v1/audio/speech";
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      route, size);
    char *req = malloc((size_t)hl + size);
    if (!req)
        return 0;
    memcpy(req, head, (size_t)hl);
    memcpy(req + hl, data, size);
    int closed;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int status = fuzz_exchange(req, (size_t)hl + size, 0, 10.0, &closed);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (took > 1.0 && getenv("CHOIR_FUZZ_SLOW"))
        fprintf(stderr, "fuzz_json_body: %.1f s for status %d: %.*s\n", took, status, (int)(size < 300 ? size : 300),
                (const char *)data);
    free(req);
    if (status == 0 || status >= 500) {
        fprintf(stderr, "fuzz_json_body: status %d for a %zu-byte body to %s\n", status, size, route);
        __builtin_trap();
    }
    if (++runs % 256 == 0 && !fuzz_server_healthy())
        __builtin_trap();
    return 0;
}

int fuzz_seeds(fuzz_seed *out, int cap)
{
    static const char *const seeds[] = {
        "{\"model\":\"fake\",\"input\":\"hello\",\"response_format\":\"pcm\"}",
        "{\"model\":\"fake\",\"input\":\"hi\",\"voice\":\"af\",\"speed\":1.5,\"response_format\":\"wav\"}",
        "{\"model\":\"fake\",\"input\":\"stream me\",\"stream_format\":\"sse\",\"response_format\":\"mp3\"}",
        "{\"model\":\"fake\",\"input\":\"\\u00e9\\ud83d\\ude00 x\",\"response_format\":\"flac\",\"speed\":0.25}",
        "{\"model\":\"nope\",\"input\":\"x\"}",
        "{\"model\":\"fake\",\"input\":\"x\",\"stream_format\":\"audio\",\"response_format\":\"opus\"}",
        "{\"path\":\"/missing/xy\",\"id\":\"x\"}", /* 31 bytes: 7 mod 8, to /v1/models */
        "[1,2,{\"a\":null,\"b\":true,\"c\":-1e308}]",
    };
    int n = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds && n < cap; i++) {
        size_t len = strlen(seeds[i]);
        uint8_t *d = malloc(len);
        if (d) {
            memcpy(d, seeds[i], len);
            out[n++] = (fuzz_seed){d, len};
        }
    }
    return n;
}
