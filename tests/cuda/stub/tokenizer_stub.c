/* Stand-in for the tokenizer in the standalone CUDA build: whisper_decode.c
 * calls choir_tokenizer_decode only when given a tokenizer, which the check
 * programs never do. */
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
