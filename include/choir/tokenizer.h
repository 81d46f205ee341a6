/* choir/tokenizer.h: byte-level BPE (GPT-2 / tiktoken style), as Whisper uses.
 *
 * A tokenizer is a table of byte strings, one per id (its rank). Encoding
 * splits text with the GPT-2 pre-tokenisation pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * and, inside each piece, repeatedly merges the adjacent pair whose
 * concatenation has the lowest rank (tiktoken's rule; for GPT-2-derived
 * vocabularies such as Whisper's it gives the same ids as merges.txt order).
 * Unicode letter / number / space classes come from the C library's UTF-8
 * tables (with explicit number ranges), which agree with the Unicode
 * categories for the scripts speech is written in.
 *
 * Special tokens (Whisper's <|endoftext|>, <|en|>, timestamps ...) are not part
 * of the byte table: their ids follow the base ranks (see choir/whisper.h).
 * Added tokens listed in a tokenizer.json are kept by name for lookup. */
#ifndef CHOIR_TOKENIZER_H
#define CHOIR_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_tokenizer choir_tokenizer;

/* Loads a vocabulary from `path`:
 *  - a file: *.tiktoken (base64 bytes + rank per line), tokenizer.json (HF fast
 *    tokenizer), vocab.json / encoder.json (GPT-2 byte-to-unicode strings -> id);
 *  - a directory: the first of tokenizer.json, vocab.json, encoder.json,
 *    multilingual.tiktoken, gpt2.tiktoken found in it.
 * Returns NULL and fills err on failure. */
choir_tokenizer *choir_tokenizer_load(const char *path, choir_err *err);

/* As choir_tokenizer_load on a directory, choosing between multilingual and
 * English-only tiktoken files (when both are present) by the model's
 * vocabulary size (n_vocab >= 51865 is multilingual). */
choir_tokenizer *choir_tokenizer_load_for_vocab(const char *dir, int n_vocab, choir_err *err);

/* NULL is a no-op. */
void choir_tokenizer_free(choir_tokenizer *t);

/* Number of byte-string tokens (ids 0 .. n-1). */
int choir_tokenizer_n_base(const choir_tokenizer *t);

/* The bytes of token `id` (not NUL-terminated; length in *len), or NULL when
 * id is not a byte-string token. Valid until choir_tokenizer_free. */
const uint8_t *choir_tokenizer_token_bytes(const choir_tokenizer *t, int32_t id, size_t *len);

/* The id of an added token named exactly `name` (from tokenizer.json), or the
 * id of a byte-string token equal to `name`; -1 when neither exists. */
int32_t choir_tokenizer_lookup(const choir_tokenizer *t, const char *name);

/* Encodes `len` bytes of UTF-8 text. On success *ids is a new choir_alloc'd
 * array (caller frees with choir_free) of *n_ids ids. Invalid UTF-8 is encoded
 * byte by byte (never fails for that reason). Returns 0 or CHOIR_ENOMEM. */
int choir_tokenizer_encode(const choir_tokenizer *t, const char *text, size_t len, int32_t **ids,
                           int *n_ids, choir_err *err);

/* Decodes ids to text. Ids that are not byte-string tokens (special tokens)
 * are skipped. The bytes of all tokens are joined first, so a character split
 * across tokens comes out whole; any sequence that is still not valid UTF-8
 * (a character cut at the end) becomes U+FFFD. *text is a new NUL-terminated
 * choir_alloc'd string (caller frees with choir_free), *len its length (may be
 * NULL). Returns 0 or CHOIR_ENOMEM. */
int choir_tokenizer_decode(const choir_tokenizer *t, const int32_t *ids, int n_ids, char **text,
                           size_t *len, choir_err *err);

/* Length of the longest prefix of s[0..len) that ends on a UTF-8 character
 * boundary (for streaming text out token by token without cutting a
 * character). */
size_t choir_utf8_complete_prefix(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
