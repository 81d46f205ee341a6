/* Internals of the byte-level BPE tokenizer (src/text/bpe*.c). */
#ifndef CHOIR_BPE_INTERNAL_H
#define CHOIR_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "choir/tokenizer.h"

#define BPE_MAX_TOKENS (1 << 22)
#define BPE_NO_TOKEN UINT32_MAX /* len[] of an id not (yet) in the table */

typedef struct bpe_added {
    char *name;
    int32_t id;
} bpe_added;

struct choir_tokenizer {
    /* Byte strings of ids 0 .. n_base-1: bytes[off[id] .. off[id] + len[id]). */
    uint8_t *bytes;
    size_t n_bytes, cap_bytes;
    uint32_t *off, *len;
    int n_base, cap_tokens;
    /* Open-addressing index bytes -> id (-1 = empty slot); n_slots a power of 2. */
    int32_t *slots;
    int n_slots;
    bpe_added *added;
    int n_added, cap_added;
};

/* The id of the token whose bytes are s[0..n), or -1. */
int32_t bpe_rank(const choir_tokenizer *t, const uint8_t *s, size_t n);

/* Sorted, disjoint [first, last] code point ranges (bpe_unicode.c). */
extern const uint32_t bpe_letter_ranges[][2];
extern const int bpe_letter_ranges_count;
extern const uint32_t bpe_number_ranges[][2];
extern const int bpe_number_ranges_count;

#endif
