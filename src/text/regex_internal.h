/* A small backtracking regular-expression engine for tokenizer
 * pre-tokenisation patterns (src/text/regex.c), over code point arrays.
 *
 * It covers what Hugging Face tokenizer.json files use (Oniguruma / Rust
 * regex syntax, Perl semantics: the first alternative that matches wins):
 * literals and escapes (\r \n \t \f \v \xHH \x{H..} \uHHHH, escaped
 * punctuation), `.`, classes `[...]` with ranges and negation, \s \S \d \D
 * \w \W, Unicode general categories \p{L} \p{Lu} \pN \P{..} (one- and
 * two-letter names and the long group names), groups `(...)` `(?:...)`,
 * inline case-insensitivity `(?i:...)` / `(?i)` (ASCII letters), lookahead
 * `(?=...)` `(?!...)`, anchors ^ $, and the quantifiers ? * + {n} {n,}
 * {n,m} with lazy `?` forms. Anything else (lookbehind, backreferences,
 * scripts such as \p{Han}, possessive quantifiers) is refused at compile
 * time with a message, never matched wrongly.
 *
 * Semantics follow Unicode: \s is White_Space, \d is Nd, \w is letters,
 * marks, Nd and Pc. Code points beyond U+10FFFF (raw bytes of invalid UTF-8,
 * see unicode_internal.h) are unassigned (Cn) characters. */
#ifndef CHOIR_REGEX_INTERNAL_H
#define CHOIR_REGEX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

typedef struct rx rx;

/* Compiles a UTF-8 pattern. NULL on failure, with a message in msg[cap]
 * ("out of memory" included). */
rx *rx_compile(const char *pattern, char *msg, size_t cap);
/* NULL is a no-op. */
void rx_free(rx *r);

/* Finds the leftmost non-empty match in cp[from .. n): returns 1 and sets
 * [*start, *end), 0 when there is none, -1 when the backtracking budget ran
 * out (a pathological input; the caller treats it as an error). */
int rx_search(const rx *r, const uint32_t *cp, size_t n, size_t from, size_t *start, size_t *end);

#endif
