/* Internals of the Unigram tokenizer (unigram.c: model, pre-tokenizer,
 * post-processor; unigram_norm.c: the normalizers). */
#ifndef CHOIR_UNIGRAM_INTERNAL_H
#define CHOIR_UNIGRAM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "choir/unigram.h"

#include "choir/buf.h"

struct cJSON;


typedef enum un_norm_kind {
    UN_NFC,
    UN_NFD,
    UN_NFKC,
    UN_NFKD,
    UN_LOWERCASE,
    UN_STRIP,
    UN_REPLACE,
    UN_PREPEND,
    UN_PRECOMPILED
} un_norm_kind;

typedef struct un_norm {
    un_norm_kind kind;
    int strip_left, strip_right;   /* UN_STRIP */
    /* UN_REPLACE: a literal pattern (rep_min < 0), or one UTF-8 character
     * repeated rep_min..rep_max times (rep_max < 0: unbounded). */
    char *pattern;
    size_t pattern_len;
    int rep_min, rep_max;
    char *content;                 /* UN_REPLACE replacement, UN_PREPEND text */
    size_t content_len;
    /* UN_PRECOMPILED: darts-clone double array and the NUL-separated pool of
     * replacement strings it points into. */
    uint32_t *trie;
    size_t n_trie;
    char *pool;
    size_t n_pool;
} un_norm;

/* Parses one normalizer object (a Sequence is flattened by the caller).
 * Returns 0 or a negative status with err naming the type. */
int un_norm_parse(const struct cJSON *obj, un_norm *out, choir_err *err);
void un_norm_free(un_norm *n);
/* Applies `n` to the valid UTF-8 in[0..len), appending to out. */
int un_norm_apply(const un_norm *n, const char *in, size_t len, choir_buf *out, choir_err *err);

/* Copies text into out replacing every invalid UTF-8 sequence by U+FFFD. */
void un_utf8_sanitize(const char *s, size_t n, choir_buf *out);
/* Length of the UTF-8 character starting at s (1..4; input is valid). */
int un_utf8_len(unsigned char c);
/* The code point at s (valid UTF-8, at least one byte). */
uint32_t un_utf8_decode(const char *s, int *len);
/* Unicode White_Space (as Rust's char::is_whitespace). */
int un_is_space(uint32_t cp);

#endif
