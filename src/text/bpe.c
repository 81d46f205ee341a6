/* Byte-level BPE: GPT-2 pre-tokenisation, rank-ordered merges, decoding. */
#include <string.h>

#include "choir/alloc.h"
#include "text/bpe_internal.h"

int choir_tokenizer_n_base(const choir_tokenizer *t) { return t->n_base; }

const uint8_t *choir_tokenizer_token_bytes(const choir_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_base) return NULL;
    *len = t->len[id];
    return t->bytes + t->off[id];
}

int32_t choir_tokenizer_lookup(const choir_tokenizer *t, const char *name) {
    for (int i = 0; i < t->n_added; i++)
        if (strcmp(t->added[i].name, name) == 0) return t->added[i].id;
    size_t n = strlen(name);
    return n ? bpe_rank(t, (const uint8_t *)name, n) : -1;
}

/* --- character classes -------------------------------------------------- */

static int in_ranges(uint32_t cp, const uint32_t (*r)[2], int n) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int is_letter(uint32_t cp) { return in_ranges(cp, bpe_letter_ranges, bpe_letter_ranges_count); }
static int is_number(uint32_t cp) { return in_ranges(cp, bpe_number_ranges, bpe_number_ranges_count); }

/* Unicode White_Space, which is what \s matches in the pattern. */
static int is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

static int is_other(uint32_t cp) { return !is_space(cp) && !is_letter(cp) && !is_number(cp); }

/* The code point at s[i] (and its byte length in *k). An invalid byte stands
 * for itself as a one-byte "other" character, so broken input still encodes. */
static uint32_t cp_at(const uint8_t *s, size_t n, size_t i, size_t *k) {
    uint8_t c = s[i];
    int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + (size_t)len > n) goto bad;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int j = 1; j < len; j++) {
        if ((s[i + j] & 0xC0) != 0x80) goto bad;
        cp = (cp << 6) | (s[i + j] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto bad;
    *k = (size_t)len;
    return cp;
bad:
    *k = 1;
    return 0xFFFFFFFFu; /* not a letter, number or space */
}

/* Length of the run of characters of class `cls` starting at i. */
static size_t run_len(const uint8_t *s, size_t n, size_t i, int (*cls)(uint32_t)) {
    size_t j = i, k;
    while (j < n && cls(cp_at(s, n, j, &k))) j += k;
    return j - i;
}

/* Length of the next pre-token at s[i] (GPT-2 pattern, alternatives in order). */
static size_t next_piece(const uint8_t *s, size_t n, size_t i) {
    size_t k, r;
    if (s[i] == '\'') {
        static const char *const contr[] = {"s", "t", "re", "ve", "m", "ll", "d"};
        for (int c = 0; c < 7; c++) {
            size_t cl = strlen(contr[c]);
            if (i + 1 + cl <= n && memcmp(s + i + 1, contr[c], cl) == 0) return 1 + cl;
        }
    }
    /* ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: with the space when it helps. */
    int (*cls[3])(uint32_t) = {is_letter, is_number, is_other};
    for (int c = 0; c < 3; c++) {
        if (s[i] == ' ' && i + 1 < n && (r = run_len(s, n, i + 1, cls[c])) > 0) return 1 + r;
        if ((r = run_len(s, n, i, cls[c])) > 0) return r;
    }
    /* `\s+(?!\S)` then `\s+`: a whitespace run leaves its last character to the
     * following word, unless the run is the end of the text or is one char. */
    r = run_len(s, n, i, is_space);
    if (r == 0) return cp_at(s, n, i, &k), k; /* unreachable for valid classes */
    if (i + r >= n) return r;
    size_t last = i + r, j = i;
    size_t prev = i;
    while (j < last) {
        prev = j;
        cp_at(s, n, j, &k);
        j += k;
    }
    return prev > i ? prev - i : r;
}

/* BPE inside one piece: parts start as single bytes and the adjacent pair whose
 * concatenation has the lowest rank merges until none is in the vocabulary. */
static int bpe_piece(const choir_tokenizer *t, const uint8_t *p, size_t n, size_t *bounds,
                     int32_t *out, int *n_out) {
    int32_t whole = bpe_rank(t, p, n);
    if (whole >= 0) {
        out[(*n_out)++] = whole;
        return 0;
    }
    size_t m = n; /* parts: [bounds[j], bounds[j+1]) */
    for (size_t j = 0; j <= n; j++) bounds[j] = j;
    while (m > 1) {
        int32_t best = -1;
        size_t at = 0;
        for (size_t j = 0; j + 1 < m; j++) {
            int32_t r = bpe_rank(t, p + bounds[j], bounds[j + 2] - bounds[j]);
            if (r >= 0 && (best < 0 || r < best)) best = r, at = j;
        }
        if (best < 0) break;
        memmove(bounds + at + 1, bounds + at + 2, (m - at - 1) * sizeof *bounds);
        m--;
    }
    for (size_t j = 0; j < m; j++) {
        int32_t r = bpe_rank(t, p + bounds[j], bounds[j + 1] - bounds[j]);
        if (r < 0) return CHOIR_EFORMAT; /* a byte missing from the vocabulary */
        out[(*n_out)++] = r;
    }
    return 0;
}

int choir_tokenizer_encode(const choir_tokenizer *t, const char *text, size_t len, int32_t **ids,
                           int *n_ids, choir_err *err) {
    const uint8_t *s = (const uint8_t *)text;
    *ids = NULL;
    *n_ids = 0;
    /* At most one token per byte. */
    int32_t *out = choir_alloc(CHOIR_MEM_OTHER, (len ? len : 1) * sizeof(int32_t));
    size_t *bounds = choir_alloc(CHOIR_MEM_OTHER, (len + 1) * sizeof(size_t));
    if (!out || !bounds) {
        choir_free(out);
        choir_free(bounds);
        return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    }
    int n = 0;
    for (size_t i = 0; i < len;) {
        size_t pl = next_piece(s, len, i);
        if (bpe_piece(t, s + i, pl, bounds, out, &n)) {
            choir_free(out);
            choir_free(bounds);
            return choir_err_set(err, CHOIR_EFORMAT, "tokenizer: vocabulary lacks a single byte");
        }
        i += pl;
    }
    choir_free(bounds);
    *ids = out;
    *n_ids = n;
    return 0;
}

size_t choir_utf8_complete_prefix(const char *str, size_t len) {
    const uint8_t *s = (const uint8_t *)str;
    /* Look back at most 3 bytes for the start of a character cut by the end. */
    for (size_t back = 1; back <= 4 && back <= len; back++) {
        uint8_t c = s[len - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

int choir_tokenizer_decode(const choir_tokenizer *t, const int32_t *ids, int n_ids, char **text,
                           size_t *len, choir_err *err) {
    size_t raw = 0;
    for (int i = 0; i < n_ids; i++)
        if (ids[i] >= 0 && ids[i] < t->n_base) raw += t->len[ids[i]];
    /* Each invalid byte may grow to the 3-byte U+FFFD. */
    uint8_t *joined = choir_alloc(CHOIR_MEM_OTHER, raw + 1);
    char *out = choir_alloc(CHOIR_MEM_OTHER, 3 * raw + 1);
    if (!joined || !out) {
        choir_free(joined);
        choir_free(out);
        return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    }
    size_t n = 0;
    for (int i = 0; i < n_ids; i++)
        if (ids[i] >= 0 && ids[i] < t->n_base) {
            memcpy(joined + n, t->bytes + t->off[ids[i]], t->len[ids[i]]);
            n += t->len[ids[i]];
        }
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t cp = cp_at(joined, n, i, &k);
        if (cp == 0xFFFFFFFFu) {
            /* As Python's errors="replace": a truncated character (a lead byte and
             * the continuation bytes that follow it) is one U+FFFD. */
            uint8_t c = joined[i];
            size_t want = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
            while (k < want && i + k < n && (joined[i + k] & 0xC0) == 0x80) k++;
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        } else {
            memcpy(out + o, joined + i, k);
            o += k;
        }
        i += k;
    }
    out[o] = '\0';
    choir_free(joined);
    *text = out;
    if (len) *len = o;
    return 0;
}
