/* Stand-in for the tokenizer in the standalone CUDA build: whisper_decode.c
 * calls choir_tokenizer_decode only when given a tokenizer, which the check
 * programs never do. */
#include <stdio.h>
#include <string.h>

#include "choir/tokenizer.h"

int choir_tokenizer_decode(const choir_tokenizer *t, const int32_t *ids, int n_ids, char **text,
                           size_t *len, choir_err *err) {
    (void)t;
    (void)ids;
    (void)n_ids;
    *text = NULL;
    if (len) *len = 0;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "no tokenizer in the standalone CUDA build");
}

/* Word timestamps (the check's words case) need each text token's bytes:
 * token id (below 50257, GPT-2's byte-level tokens) reads " w<id>", but
 * every third one continues the word before it ("<id>") and every seventh
 * is a full stop (punctuation openai merges into the word before). The
 * same for any tokenizer pointer. */
const uint8_t *choir_tokenizer_token_bytes(const choir_tokenizer *t, int32_t id, size_t *len) {
    static char bytes[50257][8];
    (void)t;
    if (id < 0 || id >= 50257) return NULL;
    char *b = bytes[id];
    if (!b[0]) {
        if (id % 7 == 0)
            snprintf(b, sizeof bytes[id], ".");
        else
            snprintf(b, sizeof bytes[id], id % 3 == 0 ? "%d" : " w%d", (int)id);
    }
    *len = strlen(b);
    return (const uint8_t *)b;
}
