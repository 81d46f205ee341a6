/* choir/tokenizer.h: byte-level BPE tokenizers: tiktoken files (Whisper),
 * GPT-2 vocab.json / encoder.json, and any Hugging Face tokenizer.json whose
 * model is byte-level BPE (GPT-2, Whisper, Qwen2 / Qwen2.5, Llama 3, ...).
 *
 * A tokenizer is a table of byte strings, one per id (its rank), plus the
 * added tokens of a tokenizer.json (specials such as <|im_end|>), which are
 * text matched as a whole, not byte strings. Encoding a piece of text:
 *  1. choir_tokenizer_encode_special only: added tokens are found in the raw
 *     text first (leftmost, longest; lstrip / rstrip / single_word honoured)
 *     and the text between them is encoded on its own;
 *  2. the file's normaliser (NFC or NFD, Unicode 14.0; none for tiktoken);
 *  3. pre-tokenisation: the file's pre_tokenizer (a Split by its regex, e.g.
 *     Qwen2's `(?i:'s|'t|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?...`,
 *     Digits, ByteLevel and its prefix space, in sequence), or by default the
 *     GPT-2 pattern
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *  4. inside each piece, its UTF-8 bytes are merged pairwise: by the ranks
 *     of the file's merges list when it has one (HF's rule), else the
 *     adjacent pair whose concatenation has the lowest rank (tiktoken's rule,
 *     the same ids for GPT-2-derived vocabularies).
 * Character classes are Unicode 14.0's general categories and White_Space.
 * A tokenizer.json using a normaliser, pre-tokeniser or model option outside
 * this set fails to load with a message naming it, rather than encoding
 * differently from its reference.
 *
 * Whisper's special tokens are not part of its byte table: their ids follow
 * the base ranks (see choir/whisper.h). */
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

/* As choir_tokenizer_encode, but added tokens written in the text (e.g.
 * "<|im_start|>user") become their ids, as Hugging Face's encode does. Never
 * use it on untrusted text that must not inject control tokens. */
int choir_tokenizer_encode_special(const choir_tokenizer *t, const char *text, size_t len,
                                   int32_t **ids, int *n_ids, choir_err *err);

/* One more than the largest id of a byte string or added token. */
int32_t choir_tokenizer_n_vocab(const choir_tokenizer *t);
/* 1 when id is an added token marked special (<|endoftext|>, <|im_end|>). */
int choir_tokenizer_is_special(const choir_tokenizer *t, int32_t id);

/* Decoding flags: which added tokens come out as their text. Without
 * either, only byte-string tokens are decoded and added tokens skipped. */
#define CHOIR_TOKENIZER_DECODE_ADDED 1u   /* added tokens not marked special */
#define CHOIR_TOKENIZER_DECODE_SPECIAL 2u /* special tokens (HF skip_special_tokens=False) */

/* Decodes ids to text. Ids that are not byte-string tokens (special tokens)
 * are skipped. The bytes of all tokens are joined first, so a character split
 * across tokens comes out whole; any sequence that is still not valid UTF-8
 * (a character cut at the end) becomes U+FFFD. *text is a new NUL-terminated
 * choir_alloc'd string (caller frees with choir_free), *len its length (may be
 * NULL). Returns 0 or CHOIR_ENOMEM. */
int choir_tokenizer_decode(const choir_tokenizer *t, const int32_t *ids, int n_ids, char **text,
                           size_t *len, choir_err *err);

/* As choir_tokenizer_decode with `flags`; ids outside the vocabulary are
 * skipped. */
int choir_tokenizer_decode_ex(const choir_tokenizer *t, const int32_t *ids, int n_ids,
                              unsigned flags, char **text, size_t *len, choir_err *err);

/* Streaming decoder: ids go in one at a time and text comes out as soon as
 * it is whole; bytes of a character split across tokens are held back until
 * it completes. The pieces put together (pushes, then the flush) equal
 * choir_tokenizer_decode_ex of all the ids at once, U+FFFD replacements
 * included. */
typedef struct choir_tokenizer_stream choir_tokenizer_stream;

/* `t` must outlive the stream. NULL when out of memory. */
choir_tokenizer_stream *choir_tokenizer_stream_create(const choir_tokenizer *t, unsigned flags,
                                                      choir_err *err);
/* NULL is a no-op. */
void choir_tokenizer_stream_free(choir_tokenizer_stream *s);
/* Adds one id; *text / *len receive the new complete text (possibly empty),
 * valid until the next call on the stream. Returns 0 or CHOIR_ENOMEM. */
int choir_tokenizer_stream_push(choir_tokenizer_stream *s, int32_t id, const char **text,
                                size_t *len, choir_err *err);
/* Ends the stream: whatever is held back comes out (an incomplete
 * character as U+FFFD); the stream is then empty and may be reused. */
int choir_tokenizer_stream_flush(choir_tokenizer_stream *s, const char **text, size_t *len,
                                 choir_err *err);

/* Length of the longest prefix of s[0..len) that ends on a UTF-8 character
 * boundary (for streaming text out token by token without cutting a
 * character). */
size_t choir_utf8_complete_prefix(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
