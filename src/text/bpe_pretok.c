/* Pre-tokenisation: splitting a segment's code points into the pieces BPE
 * runs on. The GPT-2 pattern is hand-written (it is what tiktoken-style and
 * older vocabularies use, and the fast path); any other pattern runs through
 * the regex engine with Hugging Face's Split behaviours. */
#include <string.h>

#include "choir/alloc.h"
#include "text/bpe_internal.h"
#include "text/unicode_internal.h"

static int is_letter(uint32_t c) { return (UNI_GROUP_L & UNI_MASK(uni_category(c))) != 0; }
static int is_number(uint32_t c) { return (UNI_GROUP_N & UNI_MASK(uni_category(c))) != 0; }
static int is_other(uint32_t c) { return !uni_is_space(c) && !is_letter(c) && !is_number(c); }

static size_t run_len(const uint32_t *s, size_t n, size_t i, int (*cls)(uint32_t)) {
    size_t j = i;
    while (j < n && cls(s[j])) j++;
    return j - i;
}

/* Length of the next piece at s[i] under the GPT-2 pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (alternatives in order). */
static size_t gpt2_piece(const uint32_t *s, size_t n, size_t i) {
    size_t r;
    if (s[i] == '\'') {
        static const char *const contr[] = {"s", "t", "re", "ve", "m", "ll", "d"};
        for (int c = 0; c < 7; c++) {
            size_t cl = strlen(contr[c]), k = 0;
            while (k < cl && i + 1 + k < n && s[i + 1 + k] == (uint32_t)contr[c][k]) k++;
            if (k == cl) return 1 + cl;
        }
    }
    int (*cls[3])(uint32_t) = {is_letter, is_number, is_other};
    for (int c = 0; c < 3; c++) {
        if (s[i] == ' ' && i + 1 < n && (r = run_len(s, n, i + 1, cls[c])) > 0) return 1 + r;
        if ((r = run_len(s, n, i, cls[c])) > 0) return r;
    }
    /* `\s+(?!\S)` then `\s+`: a whitespace run leaves its last character to
     * the following word, unless the run ends the text or is one character. */
    r = run_len(s, n, i, uni_is_space);
    if (r == 0) return 1; /* unreachable: every character has a class */
    if (i + r >= n || r == 1) return r;
    return r - 1;
}

/* One span of a split, and whether it is a delimiter (a pattern match, or
 * with `invert` the text between matches). */
typedef struct span_kind {
    size_t start, end;
    int delim;
} span_kind;

/* Appends a piece, dropping empty ones. */
static void put(bpe_span *out, int64_t *n, size_t start, size_t end) {
    if (end > start) out[(*n)++] = (bpe_span){start, end};
}

/* HF's behaviours over a piece's alternating spans sp[0..m) (in place). */
static void behave(bpe_split_behavior b, span_kind *sp, size_t m, bpe_span *out, int64_t *n) {
    size_t k = 0;
    int prev = 0;
    switch (b) {
    case BPE_SPLIT_ISOLATED:
        for (size_t i = 0; i < m; i++) put(out, n, sp[i].start, sp[i].end);
        return;
    case BPE_SPLIT_REMOVED:
        for (size_t i = 0; i < m; i++)
            if (!sp[i].delim) put(out, n, sp[i].start, sp[i].end);
        return;
    case BPE_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < m; i++) {
            if (sp[i].delim && !prev && k > 0) sp[k - 1].end = sp[i].end;
            else sp[k++] = sp[i];
            prev = sp[i].delim;
        }
        break;
    case BPE_SPLIT_MERGED_NEXT:
        /* Walk backwards: a delimiter joins the piece after it. */
        for (size_t i = m; i-- > 0;) {
            span_kind s = sp[i];
            if (s.delim && !prev && k > 0) sp[m - k].start = s.start;
            else sp[m - 1 - k++] = s;
            prev = s.delim;
        }
        for (size_t i = 0; i < k; i++) put(out, n, sp[m - k + i].start, sp[m - k + i].end);
        return;
    case BPE_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < m; i++) {
            if (k > 0 && sp[i].delim == prev) sp[k - 1].end = sp[i].end;
            else sp[k++] = sp[i];
            prev = sp[i].delim;
        }
        break;
    }
    for (size_t i = 0; i < k; i++) put(out, n, sp[i].start, sp[i].end);
}

/* Finds the delimiters of cp[s, e) for a SPLIT or DIGITS step as alternating
 * spans in sp (room for 2 * (e - s) + 1). Returns the count, -1 on a
 * pattern that ran out of budget. */
static int64_t find_spans(const bpe_pre *p, const uint32_t *cp, size_t s, size_t e, span_kind *sp) {
    int64_t m = 0;
    size_t prev = s;
    if (p->kind == BPE_PRE_DIGITS) {
        /* Every numeric character is a delimiter of its own. */
        for (size_t i = s; i < e; i++) {
            if (!is_number(cp[i])) continue;
            if (prev < i) sp[m++] = (span_kind){prev, i, 0};
            sp[m++] = (span_kind){i, i + 1, 1};
            prev = i + 1;
        }
    } else {
        size_t from = 0, len = e - s;
        while (from < len) {
            size_t ms, me;
            if (p->re) {
                int r = rx_search(p->re, cp + s, len, from, &ms, &me);
                if (r < 0) return -1;
                if (r == 0) break;
            } else {
                ms = from;
                while (ms + p->n_lit <= len && memcmp(cp + s + ms, p->lit, p->n_lit * sizeof *cp) != 0) ms++;
                if (p->n_lit == 0 || ms + p->n_lit > len) break;
                me = ms + p->n_lit;
            }
            if (s + ms > prev) sp[m++] = (span_kind){prev, s + ms, 0};
            sp[m++] = (span_kind){s + ms, s + me, 1};
            prev = s + me;
            from = me;
        }
    }
    if (prev < e) sp[m++] = (span_kind){prev, e, 0};
    if (p->invert)
        for (int64_t i = 0; i < m; i++) sp[i].delim = !sp[i].delim;
    return m;
}

int64_t bpe_pre_apply(const bpe_pre *p, const uint32_t *cp, size_t cp_len, const bpe_span *in,
                      size_t n_in, bpe_span *out) {
    (void)cp_len;
    int64_t n = 0;
    for (size_t k = 0; k < n_in; k++) {
        size_t s = in[k].start, e = in[k].end;
        if (p->kind == BPE_PRE_GPT2) {
            for (size_t i = s; i < e;) {
                size_t l = gpt2_piece(cp + s, e - s, i - s);
                out[n++] = (bpe_span){i, i + l};
                i += l;
            }
            continue;
        }
        /* A piece has at most 2 * len + 1 spans: short ones on the stack. */
        span_kind sp_local[64];
        span_kind *sp = sp_local;
        size_t need = 2 * (e - s) + 1;
        span_kind *heap = NULL;
        if (need > sizeof sp_local / sizeof sp_local[0]) {
            heap = choir_alloc(CHOIR_MEM_OTHER, need * sizeof *heap);
            if (!heap) return -2;
            sp = heap;
        }
        int64_t m = find_spans(p, cp, s, e, sp);
        if (m >= 0) behave(p->behavior, sp, (size_t)m, out, &n);
        choir_free(heap);
        if (m < 0) return -1;
    }
    return n;
}
