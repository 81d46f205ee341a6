/* Byte-level BPE encoding: added tokens, normalisation, pre-tokenisation
 * (bpe_pretok.c) and the merges inside each piece. */
#include <string.h>

#include "choir/alloc.h"
#include "text/bpe_internal.h"
#include "text/unicode_internal.h"

int choir_tokenizer_n_base(const choir_tokenizer *t) { return t->n_base; }

int32_t choir_tokenizer_n_vocab(const choir_tokenizer *t) {
    return t->max_added_id >= t->n_base ? t->max_added_id + 1 : t->n_base;
}

const uint8_t *choir_tokenizer_token_bytes(const choir_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_base || t->len[id] == BPE_NO_TOKEN) return NULL;
    *len = t->len[id];
    return t->bytes + t->off[id];
}

static const bpe_added *added_of(const choir_tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id == id) return &t->added[i];
    return NULL;
}

int choir_tokenizer_is_special(const choir_tokenizer *t, int32_t id) {
    const bpe_added *a = added_of(t, id);
    return a && a->special;
}

int32_t choir_tokenizer_lookup(const choir_tokenizer *t, const char *name) {
    for (int i = 0; i < t->n_added; i++)
        if (strcmp(t->added[i].name, name) == 0) return t->added[i].id;
    size_t n = strlen(name);
    return n ? bpe_rank(t, (const uint8_t *)name, n) : -1;
}

const uint8_t *bpe_id_bytes(const choir_tokenizer *t, int32_t id, int flags, size_t *len) {
    const bpe_added *a = added_of(t, id);
    if (a) {
        unsigned want = a->special ? CHOIR_TOKENIZER_DECODE_SPECIAL : CHOIR_TOKENIZER_DECODE_ADDED;
        if (!((unsigned)flags & want)) return NULL;
        *len = a->len;
        return (const uint8_t *)a->name;
    }
    return choir_tokenizer_token_bytes(t, id, len);
}

/* --- merges ------------------------------------------------------------ */

/* tiktoken's rule: parts start as single bytes and the adjacent pair whose
 * concatenation has the lowest rank merges until none is in the vocabulary.
 * Quadratic in the piece, which is fine for the short pieces of the GPT-2
 * split it serves. */
static int bpe_rank_piece(const choir_tokenizer *t, const uint8_t *p, size_t n, size_t *bounds,
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

/* Scratch of one piece's merges, grown to the longest piece seen. */
typedef struct bpe_work {
    size_t cap;        /* symbols */
    int32_t *id;       /* [cap] current token of each symbol (symbols start as bytes) */
    int32_t *next, *prev;
    uint64_t *heap;    /* [3 cap] (rank << 32 | position) min-heap */
    size_t *bounds;    /* [cap + 1], tiktoken rule */
} bpe_work;

static void work_clear(bpe_work *w) {
    choir_free(w->id);
    choir_free(w->next);
    choir_free(w->prev);
    choir_free(w->heap);
    choir_free(w->bounds);
    memset(w, 0, sizeof *w);
}

static int work_reserve(bpe_work *w, size_t n) {
    if (n <= w->cap) return 0;
    size_t cap = n < 64 ? 64 : n;
    work_clear(w);
    w->id = choir_alloc(CHOIR_MEM_OTHER, cap * sizeof *w->id);
    w->next = choir_alloc(CHOIR_MEM_OTHER, cap * sizeof *w->next);
    w->prev = choir_alloc(CHOIR_MEM_OTHER, cap * sizeof *w->prev);
    w->heap = choir_alloc(CHOIR_MEM_OTHER, 3 * cap * sizeof *w->heap);
    w->bounds = choir_alloc(CHOIR_MEM_OTHER, (cap + 1) * sizeof *w->bounds);
    if (!w->id || !w->next || !w->prev || !w->heap || !w->bounds) {
        work_clear(w);
        return CHOIR_ENOMEM;
    }
    w->cap = cap;
    return 0;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* HF's rule: the pair with the lowest merge rank merges first (the leftmost
 * on ties) until no adjacent pair is in the merges list; a heap of candidate
 * pairs with lazy invalidation keeps it O(n log n) on long pieces. */
static int bpe_merge_piece(const choir_tokenizer *t, const uint8_t *p, size_t n, bpe_work *w,
                           int32_t *out, int *n_out) {
    if (t->ignore_merges) {
        int32_t whole = bpe_rank(t, p, n);
        if (whole >= 0) {
            out[(*n_out)++] = whole;
            return 0;
        }
    }
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        w->id[i] = t->byte_id[p[i]];
        if (w->id[i] < 0) return CHOIR_EFORMAT;
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const bpe_merge *m = bpe_merge_find(t, w->id[i], w->id[i + 1]);
        if (m) heap_push(w->heap, &nh, (uint64_t)m->rank << 32 | i);
    }
    while (nh) {
        uint64_t top = heap_pop(w->heap, &nh);
        int32_t at = (int32_t)(top & 0xFFFFFFFFu), rank = (int32_t)(top >> 32);
        int32_t q = w->next[at];
        if (w->id[at] < 0 || q < 0) continue; /* merged away meanwhile */
        const bpe_merge *m = bpe_merge_find(t, w->id[at], w->id[q]);
        if (!m || m->rank != rank) continue;  /* the pair changed since it was queued */
        w->id[at] = m->merged;
        w->id[q] = -1;
        w->next[at] = w->next[q];
        if (w->next[q] >= 0) w->prev[w->next[q]] = at;
        int32_t a = w->prev[at], b = w->next[at];
        if (a >= 0 && (m = bpe_merge_find(t, w->id[a], w->id[at])))
            heap_push(w->heap, &nh, (uint64_t)m->rank << 32 | (uint32_t)a);
        if (b >= 0 && (m = bpe_merge_find(t, w->id[at], w->id[b])))
            heap_push(w->heap, &nh, (uint64_t)m->rank << 32 | (uint32_t)at);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i]) out[(*n_out)++] = w->id[i];
    return 0;
}

/* --- one segment (text between added tokens) --------------------------- */

typedef struct bpe_enc {
    const choir_tokenizer *t;
    int32_t *out;        /* ids so far */
    int n_out, cap_out;
    /* Per segment, grown to the longest: its code points and their
     * normalised copy [cap_cp], two piece lists [cap_cp + 1], one piece as
     * UTF-8 [4 cap_cp]. */
    size_t cap_cp;
    uint32_t *cp, *norm;
    bpe_span *a, *b;
    uint8_t *bytes;
    bpe_work w;
} bpe_enc;

static void enc_clear(bpe_enc *e) {
    choir_free(e->cp);
    choir_free(e->norm);
    choir_free(e->a);
    choir_free(e->b);
    choir_free(e->bytes);
    e->cp = e->norm = NULL;
    e->a = e->b = NULL;
    e->bytes = NULL;
    e->cap_cp = 0;
}

/* Room for a segment of `len` bytes: NFD can make it at most 4 code points
 * per byte, and the prefix space adds one. */
static int enc_reserve(bpe_enc *e, size_t len, choir_err *err) {
    size_t cap = 4 * len + 2;
    if (cap <= e->cap_cp) return 0;
    enc_clear(e);
    e->cp = choir_alloc(CHOIR_MEM_OTHER, cap * sizeof *e->cp);
    e->norm = choir_alloc(CHOIR_MEM_OTHER, cap * sizeof *e->norm);
    e->a = choir_alloc(CHOIR_MEM_OTHER, (cap + 1) * sizeof *e->a);
    e->b = choir_alloc(CHOIR_MEM_OTHER, (cap + 1) * sizeof *e->b);
    e->bytes = choir_alloc(CHOIR_MEM_OTHER, 4 * cap);
    if (!e->cp || !e->norm || !e->a || !e->b || !e->bytes) {
        enc_clear(e);
        return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    }
    e->cap_cp = cap;
    return 0;
}

/* Room for `more` ids (normalisation can make text longer than its bytes). */
static int reserve(bpe_enc *e, size_t more, choir_err *err) {
    if ((size_t)e->n_out + more <= (size_t)e->cap_out) return 0;
    size_t cap = (size_t)e->cap_out * 2 + more;
    if (cap > (size_t)INT32_MAX) return choir_err_set(err, CHOIR_ETOOBIG, "tokenizer: text too long");
    int32_t *g = choir_realloc(e->out, cap * sizeof *g);
    if (!g) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    e->out = g;
    e->cap_out = (int)cap;
    return 0;
}

static int encode_segment(bpe_enc *e, const uint8_t *s, size_t len, choir_err *err) {
    const choir_tokenizer *t = e->t;
    if (len == 0) return 0;
    int rc = enc_reserve(e, len, err);
    if (rc) return rc;
    size_t cap = e->cap_cp, n = uni_decode_utf8(s, len, e->cp, NULL);
    uint32_t *cp = e->cp, *spare = e->norm;
    for (int k = 0; k < t->n_norm; k++) {
        if (t->norm[k] == BPE_NORM_NFC && uni_nfc_quick(cp, n)) continue;
        int64_t r = t->norm[k] == BPE_NORM_NFC ? uni_nfc(cp, n, spare, cap) : uni_nfd(cp, n, spare, cap);
        if (r < 0) return choir_err_set(err, CHOIR_EINTERNAL, "tokenizer: normalisation overflow");
        uint32_t *x = cp;
        cp = spare;
        spare = x;
        n = (size_t)r;
    }
    /* ByteLevel's prefix space is one character at the front. */
    for (int k = 0; k < t->n_pre; k++)
        if (t->pre[k].kind == BPE_PRE_PREFIX && n > 0 && cp[0] != ' ') {
            memmove(spare + 1, cp, n * sizeof *cp);
            spare[0] = ' ';
            cp = spare;
            n++;
            break;
        }
    bpe_span *in = e->a, *outp = e->b;
    size_t n_in = 1;
    in[0] = (bpe_span){0, n};
    for (int k = 0; k < t->n_pre; k++) {
        if (t->pre[k].kind == BPE_PRE_PREFIX) continue;
        int64_t r = bpe_pre_apply(&t->pre[k], cp, n, in, n_in, outp);
        if (r == -2) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        if (r < 0)
            return choir_err_set(err, CHOIR_ETOOBIG, "tokenizer: the pre-tokeniser pattern gave up "
                                 "on this text (too much backtracking)");
        bpe_span *x = in;
        in = outp;
        outp = x;
        n_in = (size_t)r;
    }
    for (size_t i = 0; i < n_in; i++) {
        size_t nb = 0;
        for (size_t c = in[i].start; c < in[i].end; c++) nb += (size_t)uni_encode_utf8(cp[c], e->bytes + nb);
        if (nb == 0) continue;
        if (reserve(e, nb, err)) return err ? err->code : CHOIR_ENOMEM;
        if (work_reserve(&e->w, nb)) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        rc = t->n_merges ? bpe_merge_piece(t, e->bytes, nb, &e->w, e->out, &e->n_out)
                         : bpe_rank_piece(t, e->bytes, nb, e->w.bounds, e->out, &e->n_out);
        if (rc) return choir_err_set(err, CHOIR_EFORMAT, "tokenizer: vocabulary lacks a single byte");
    }
    return 0;
}

/* --- added tokens ------------------------------------------------------ */

static int is_word_char(const uint8_t *s, size_t len, size_t at, int before) {
    /* The character just before / at `at`, as \w sees it. */
    uint32_t cp[1];
    if (before) {
        if (at == 0) return 0;
        size_t i = at - 1;
        while (i > 0 && (s[i] & 0xC0) == 0x80 && at - i < 4) i--;
        uni_decode_utf8(s + i, at - i, cp, NULL);
    } else {
        if (at >= len) return 0;
        size_t k = 1;
        while (at + k < len && (s[at + k] & 0xC0) == 0x80 && k < 4) k++;
        uni_decode_utf8(s + at, k, cp, NULL);
    }
    return ((UNI_GROUP_L | UNI_GROUP_M | UNI_GROUP_N | UNI_MASK(UNI_PC)) & UNI_MASK(uni_category(cp[0]))) != 0;
}

/* The leftmost-longest added token at or after `from`: its index, or -1. */
static int find_added(const choir_tokenizer *t, const uint8_t *s, size_t len, size_t from, size_t *at) {
    for (size_t i = from; i < len; i++) {
        int best = -1;
        for (int k = 0; k < t->n_added; k++) {
            const bpe_added *a = &t->added[k];
            if (a->len == 0 || i + a->len > len || s[i] != (uint8_t)a->name[0] ||
                memcmp(s + i, a->name, a->len) != 0)
                continue;
            if (a->single_word && (is_word_char(s, len, i, 1) || is_word_char(s, len, i + a->len, 0)))
                continue;
            if (best < 0 || a->len > t->added[best].len) best = k;
        }
        if (best >= 0) {
            *at = i;
            return best;
        }
    }
    return -1;
}

static int encode_all(const choir_tokenizer *t, const char *text, size_t len, int special,
                      int32_t **ids, int *n_ids, choir_err *err) {
    const uint8_t *s = (const uint8_t *)text;
    *ids = NULL;
    *n_ids = 0;
    bpe_enc e = {.t = t};
    int rc = reserve(&e, len < 64 ? 64 : len, err);
    size_t i = 0;
    while (i < len && !rc) {
        size_t at = len, end;
        int k = special ? find_added(t, s, len, i, &at) : -1;
        end = k >= 0 ? at : len;
        size_t next = k >= 0 ? at + t->added[k].len : len;
        if (k >= 0 && t->added[k].lstrip)
            while (end > i && (s[end - 1] == ' ' || (s[end - 1] >= '\t' && s[end - 1] <= '\r'))) end--;
        if (k >= 0 && t->added[k].rstrip)
            while (next < len && (s[next] == ' ' || (s[next] >= '\t' && s[next] <= '\r'))) next++;
        rc = encode_segment(&e, s + i, end - i, err);
        if (!rc && k >= 0 && !(rc = reserve(&e, 1, err))) e.out[e.n_out++] = t->added[k].id;
        i = next;
    }
    enc_clear(&e);
    work_clear(&e.w);
    if (rc) {
        choir_free(e.out);
        return rc;
    }
    *ids = e.out;
    *n_ids = e.n_out;
    return 0;
}

int choir_tokenizer_encode(const choir_tokenizer *t, const char *text, size_t len, int32_t **ids,
                           int *n_ids, choir_err *err) {
    return encode_all(t, text, len, 0, ids, n_ids, err);
}

int choir_tokenizer_encode_special(const choir_tokenizer *t, const char *text, size_t len,
                                   int32_t **ids, int *n_ids, choir_err *err) {
    return encode_all(t, text, len, 1, ids, n_ids, err);
}
