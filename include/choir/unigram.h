/* choir/unigram.h: SentencePiece-Unigram tokenizers read from a Hugging Face
 * tokenizer.json (T5, mT5, XLM-R, ALBERT-style vocabularies).
 *
 * Encoding follows the tokenizers library's pipeline, stage by stage:
 *  1. added tokens ("</s>", "<pad>", ...) are cut out of the raw text first and
 *     map to their ids unchanged;
 *  2. the normalizer: NFC / NFD / NFKC / NFKD (ICU), Lowercase, Strip,
 *     Replace (a literal, or a one-character regex with a quantifier such as
 *     " {2,}"), Prepend, and Precompiled (SentencePiece's compiled character
 *     map, nmt_nfkc for T5), alone or in a Sequence;
 *  3. the pre-tokenizer: Metaspace (replacement, prepend_scheme always /
 *     first / never or the older add_prefix_space, split), WhitespaceSplit,
 *     or a Sequence of them;
 *  4. the model: for each piece, the segmentation with the highest total
 *     score (Viterbi over the vocabulary's log-probabilities; ties go to the
 *     shorter first token, as the library's search order gives); a character
 *     no piece covers becomes unk (score min - 10), consecutive unks are fused,
 *     and with byte_fallback an unk becomes its <0xXX> byte pieces;
 *  5. the post-processor: TemplateProcessing's single-sequence template
 *     (T5: $A </s>), or none.
 * A tokenizer.json using any other component is refused with an error naming
 * it (never silently tokenized differently).
 *
 * A loaded tokenizer is immutable; encode may be called from many threads. */
#ifndef CHOIR_UNIGRAM_H
#define CHOIR_UNIGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_unigram choir_unigram;

/* Loads `path`: a tokenizer.json, or a directory holding one. NULL (and err
 * naming the file and the problem) on failure. */
choir_unigram *choir_unigram_load(const char *path, choir_err *err);
/* Parses tokenizer.json text held in memory; `label` names it in errors. */
choir_unigram *choir_unigram_parse(const char *json, size_t len, const char *label, choir_err *err);
/* NULL is a no-op. */
void choir_unigram_free(choir_unigram *t);

/* Vocabulary size (the model's pieces; added tokens outside it extend it). */
int choir_unigram_n_vocab(const choir_unigram *t);
/* The id of piece or added token `piece`, or -1. */
int32_t choir_unigram_lookup(const choir_unigram *t, const char *piece);
/* The NUL-terminated text of piece `id`, or NULL when out of range. Valid
 * until choir_unigram_free. */
const char *choir_unigram_piece(const choir_unigram *t, int32_t id);
/* The id the post-processor appends last (T5: </s> = 1), or -1. */
int32_t choir_unigram_eos_id(const choir_unigram *t);

/* Encodes `len` bytes of UTF-8 `text` through all five stages. On success
 * *ids is a new choir_alloc'd array (caller frees with choir_free) of *n_ids
 * ids. Invalid UTF-8 bytes are normalised to U+FFFD. Returns 0, CHOIR_ENOMEM,
 * or CHOIR_EINVAL when a normaliser fails on the text. */
int choir_unigram_encode(const choir_unigram *t, const char *text, size_t len, int32_t **ids,
                         int *n_ids, choir_err *err);

/* Stage 2 alone, for tests: *out is a new NUL-terminated choir_alloc'd string. */
int choir_unigram_normalize(const choir_unigram *t, const char *text, size_t len, char **out,
                            size_t *out_len, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
