/* choir/phonemizer.h: English text to Kokoro phonemes (libespeak-ng), and the
 * splitter that cuts a text's phonemes into model-sized pieces.
 *
 * The phonemizer runs espeak-ng (voice en-us or en-gb) clause by clause and maps
 * its IPA to Kokoro's phoneme inventory as Kokoro's own espeak front ends do
 * (diphthongs to A I O W Y / Q, ɾ to T, ...; ../shared/specs/kokoro.md §8.2).
 * Clause punctuation (, ; : . ! ? — …) is kept. espeak-ng has one global state,
 * so all calls into it are serialized by a process-wide mutex: any number of
 * phonemizers may be used from any threads, but they take turns. */
#ifndef CHOIR_PHONEMIZER_H
#define CHOIR_PHONEMIZER_H

#include <stdbool.h>
#include <stddef.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum choir_phonemizer_lang {
    CHOIR_PHONEMIZER_EN_US = 0, /* American English (Kokoro lang 'a') */
    CHOIR_PHONEMIZER_EN_GB = 1  /* British English (Kokoro lang 'b') */
} choir_phonemizer_lang;

/* Parses "en-us", "en", "a", "american" / "en-gb", "b", "british"; returns 0
 * and sets *out, or CHOIR_EINVAL. */
int choir_phonemizer_lang_parse(const char *name, choir_phonemizer_lang *out);

typedef struct choir_phonemizer choir_phonemizer;

/* Initialises espeak-ng (once per process) and checks the voice exists. NULL
 * (and err) when espeak-ng or its data is missing. */
choir_phonemizer *choir_phonemizer_create(choir_phonemizer_lang lang, choir_err *err);
/* NULL is a no-op. */
void choir_phonemizer_free(choir_phonemizer *p);

/* One clause of phonemes: the clause's words, then its punctuation if any. */
typedef struct choir_clause {
    char *phonemes;      /* UTF-8, owned by the list */
    int n_phonemes;      /* code points */
    bool sentence_end;   /* ended by . ! ? … or a line break */
} choir_clause;

typedef struct choir_clause_list {
    choir_clause *items;
    int n;
} choir_clause_list;

/* Phonemizes `text` (UTF-8) into clauses, in order. Clauses that give no
 * phonemes are skipped. Returns 0 or a negative CHOIR_E*; on success the
 * caller frees *out with choir_clause_list_free. */
int choir_phonemize_clauses(choir_phonemizer *p, const char *text, choir_clause_list *out,
                            choir_err *err);
void choir_clause_list_free(choir_clause_list *l);

/* The whole text as one phoneme string, clauses joined by spaces
 * (choir_alloc'd; free with choir_free). NULL (and err) on failure. */
char *choir_phonemize(choir_phonemizer *p, const char *text, choir_err *err);

/* Maps espeak-ng IPA (multi-letter phonemes tied with '^') to Kokoro
 * phonemes; the pure text step of the phonemizer, exposed for tests. Returns
 * a choir_alloc'd string or NULL when out of memory. */
char *choir_phonemizer_map_ipa(const char *ipa, choir_phonemizer_lang lang);

/* --- splitting into pieces ---------------------------------------------- */

typedef struct choir_piece {
    char *phonemes;      /* owned by the list */
    int n_phonemes;      /* code points, <= the split's limit */
} choir_piece;

typedef struct choir_piece_list {
    choir_piece *items;
    int n;
} choir_piece_list;

/* Packs clauses into pieces of at most `max_phonemes` code points (clauses
 * joined by one space). A piece is cut at its last sentence end when it has
 * one, else at its last clause end; a clause longer than the limit is cut
 * at word boundaries (and a word longer than the limit, anywhere).
 * first_clause_alone: the first piece is only the first clause, so that
 * streaming can start after a short piece. Returns 0 or CHOIR_ENOMEM /
 * CHOIR_EINVAL; free *out with choir_piece_list_free. */
int choir_split_pieces(const choir_clause_list *clauses, int max_phonemes,
                       bool first_clause_alone, choir_piece_list *out, choir_err *err);
void choir_piece_list_free(choir_piece_list *l);

/* Number of UTF-8 code points in s. */
int choir_utf8_count(const char *s);

#ifdef __cplusplus
}
#endif
#endif
