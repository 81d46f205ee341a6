/* libFuzzer harness: the multipart/form-data parser on arbitrary bodies
 * (boundary "b"), on an exact-size copy so that ASan sees any read past the
 * end. An accepted body's parts must lie inside it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "server/multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = malloc(size + 1);
    if (!body)
        return 0;
    memcpy(body, data, size);
    choir_multipart m;
    choir_err err = {0};
    if (choir_multipart_parse(body, size, "b", &m, &err) < 0) {
        if (!err.msg[0])
            __builtin_trap();
    } else {
        for (int i = 0; i < m.n_parts; i++) {
            const choir_multipart_part *p = &m.parts[i];
            if (p->data < body || p->data + p->len > body + size)
                __builtin_trap();
        }
    }
    free(body);
    return 0;
}

int fuzz_seeds(fuzz_seed *out, int cap)
{
    static const char seed[] = "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nfake\r\n--b\r\n"
                               "Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
                               "Content-Type: audio/wav\r\n\r\nRIFF\r\n--b\r\x00\r\n--b--\r\n";
    if (cap < 1)
        return 0;
    uint8_t *d = malloc(sizeof seed - 1);
    if (!d)
        return 0;
    memcpy(d, seed, sizeof seed - 1);
    out[0] = (fuzz_seed){d, sizeof seed - 1};
    return 1;
}
