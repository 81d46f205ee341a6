/* Internals of the byte-level BPE tokenizer (src/text/bpe*.c).
 *
 * The pipeline of one encode, as Hugging Face's tokenizers library runs it:
 *   1. (encode_special) added tokens are found in the raw text first; the
 *      text between them goes through the rest on its own;
 *   2. the normaliser (NFC / NFD) over the segment's code points;
 *   3. the pre-tokeniser steps, each splitting every piece further: the
 *      GPT-2 pattern (hand-written, also the default for tiktoken and
 *      vocab.json files), a Split by regex or string with its behaviour,
 *      Digits, and ByteLevel's prefix space;
 *   4. per piece, its UTF-8 bytes are merged: by the merges list's ranks
 *      when the file has one (HF's BPE model), else by the rank of the
 *      merged token (tiktoken's rule, which equals the merges order for
 *      GPT-2-derived vocabularies). */
#ifndef CHOIR_BPE_INTERNAL_H
#define CHOIR_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "choir/tokenizer.h"
#include "text/regex_internal.h"

#define BPE_MAX_TOKENS (1 << 22)
#define BPE_NO_TOKEN UINT32_MAX /* len[] of an id not (yet) in the table */

typedef struct bpe_added {
    char *name;
    size_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word;
} bpe_added;

typedef enum bpe_norm { BPE_NORM_NFC = 1, BPE_NORM_NFD = 2 } bpe_norm;

typedef enum bpe_pre_kind {
    BPE_PRE_GPT2 = 0,   /* the GPT-2 pattern (ByteLevel use_regex, and the default) */
    BPE_PRE_SPLIT,      /* Split: regex or literal string */
    BPE_PRE_DIGITS,     /* Digits: runs of \p{Nd}, or each digit alone */
    BPE_PRE_PREFIX      /* ByteLevel add_prefix_space: a space before a piece lacking one */
} bpe_pre_kind;

/* HF SplitDelimiterBehavior. */
typedef enum bpe_split_behavior {
    BPE_SPLIT_ISOLATED = 0, BPE_SPLIT_REMOVED, BPE_SPLIT_MERGED_PREV, BPE_SPLIT_MERGED_NEXT,
    BPE_SPLIT_CONTIGUOUS
} bpe_split_behavior;

typedef struct bpe_pre {
    bpe_pre_kind kind;
    rx *re;              /* SPLIT by regex */
    uint32_t *lit;       /* SPLIT by string: its code points */
    size_t n_lit;
    bpe_split_behavior behavior;
    int invert;          /* SPLIT: the pattern matches what is kept between splits */
    int individual;      /* DIGITS */
} bpe_pre;

#define BPE_MAX_NORM 4
#define BPE_MAX_PRE 8

/* One entry of the merges list: merging `left` and `right` (ids) gives
 * `merged`, with priority `rank` (its line number). */
typedef struct bpe_merge {
    int32_t left, right, merged, rank;
} bpe_merge;

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
    int32_t max_added_id; /* -1 when none */

    /* tokenizer.json pipeline (defaults: no normaliser, the GPT-2 split). */
    bpe_norm norm[BPE_MAX_NORM];
    int n_norm;
    bpe_pre pre[BPE_MAX_PRE];
    int n_pre;
    /* Merges, hashed by (left, right) into merge_slots (-1 empty), a power
     * of two; n_merges 0 means the tiktoken rule. */
    bpe_merge *merges;
    int n_merges;
    int32_t *merge_slots;
    int n_merge_slots;
    int ignore_merges;   /* a piece that is a whole token is taken as it is */
    int32_t byte_id[256]; /* the token of each single byte, -1 when absent */
};

/* The id of the token whose bytes are s[0..n), or -1. */
int32_t bpe_rank(const choir_tokenizer *t, const uint8_t *s, size_t n);
/* The merge of (left, right), or NULL. */
const bpe_merge *bpe_merge_find(const choir_tokenizer *t, int32_t left, int32_t right);

/* A piece of a segment: code points [start, end). */
typedef struct bpe_span {
    size_t start, end;
} bpe_span;

/* Applies pre-tokeniser step `p` to the pieces in[0..n_in) of cp[], writing
 * the finer pieces to out (room for cp_len + n_in pieces). Returns the count,
 * -1 when a pattern ran out of its backtracking budget, -2 when out of
 * memory.
 * BPE_PRE_PREFIX is handled by the caller (it inserts a character). */
int64_t bpe_pre_apply(const bpe_pre *p, const uint32_t *cp, size_t cp_len, const bpe_span *in,
                      size_t n_in, bpe_span *out);

/* Replaces invalid UTF-8 in s[0..n) with U+FFFD as Python's errors="replace"
 * does (a lead byte with the continuation bytes that follow it counts as
 * one); out has room for 3 * n bytes. Returns the output length. */
size_t bpe_utf8_sanitize(const uint8_t *s, size_t n, uint8_t *out);

/* The bytes decoding id gives under `flags` (CHOIR_TOKENIZER_DECODE_*), or
 * NULL (skipped). */
const uint8_t *bpe_id_bytes(const choir_tokenizer *t, int32_t id, int flags, size_t *len);

/* Converts a GPT-2 byte-to-unicode string (a vocab or merges entry) to its
 * bytes in out[cap]; returns the length, or -1 when it is not one. */
int64_t bpe_unicode_to_bytes(const char *s, uint8_t *out, size_t cap);

/* Reads the pipeline of a parsed tokenizer.json (normalizer, pre_tokenizer,
 * model.merges, model.ignore_merges) into t, whose vocabulary is loaded and
 * indexed. 0 or a negative code with err naming the unsupported piece. */
struct cJSON;
int bpe_json_pipeline(choir_tokenizer *t, const struct cJSON *root, const char *src, choir_err *err);
/* Frees what bpe_json_pipeline allocated. */
void bpe_pipeline_free(choir_tokenizer *t);

#endif
