/* Byte-level BPE decoding: ids to bytes to text, at once or streamed. */
#include <string.h>

#include "choir/alloc.h"
#include "text/bpe_internal.h"

/* Bytes the character led by c needs (1 for a byte that cannot lead). */
static size_t utf8_want(uint8_t c) {
    return c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
}

/* Length of the valid character at s[i] (0 when it is not one). */
static size_t utf8_valid_at(const uint8_t *s, size_t n, size_t i) {
    uint8_t c = s[i];
    if (c < 0x80) return 1;
    size_t k = utf8_want(c);
    if (k == 1 || i + k > n) return 0;
    uint32_t cp = k == 2 ? (c & 0x1Fu) : k == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (size_t j = 1; j < k; j++) {
        if ((s[i + j] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i + j] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

size_t bpe_utf8_sanitize(const uint8_t *s, size_t n, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_valid_at(s, n, i);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
            continue;
        }
        /* As Python's errors="replace": a truncated character (a lead byte and
         * the continuation bytes that follow it) is one U+FFFD. */
        size_t want = utf8_want(s[i]);
        k = 1;
        while (k < want && i + k < n && (s[i + k] & 0xC0) == 0x80) k++;
        memcpy(out + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += k;
    }
    return o;
}

size_t choir_utf8_complete_prefix(const char *str, size_t len) {
    const uint8_t *s = (const uint8_t *)str;
    /* Look back at most 3 bytes for the start of a character cut by the end. */
    for (size_t back = 1; back <= 4 && back <= len; back++) {
        uint8_t c = s[len - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = utf8_want(c);
        return need > back ? len - back : len;
    }
    return len;
}

int choir_tokenizer_decode_ex(const choir_tokenizer *t, const int32_t *ids, int n_ids,
                              unsigned flags, char **text, size_t *len, choir_err *err) {
    size_t raw = 0, k;
    for (int i = 0; i < n_ids; i++)
        if (bpe_id_bytes(t, ids[i], (int)flags, &k)) raw += k;
    /* Each invalid byte may grow to the 3-byte U+FFFD. */
    uint8_t *joined = choir_alloc(CHOIR_MEM_OTHER, raw + 1);
    char *out = choir_alloc(CHOIR_MEM_OTHER, 3 * raw + 1);
    if (!joined || !out) {
        choir_free(joined);
        choir_free(out);
        return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    }
    size_t n = 0;
    for (int i = 0; i < n_ids; i++) {
        const uint8_t *b = bpe_id_bytes(t, ids[i], (int)flags, &k);
        if (b) {
            memcpy(joined + n, b, k);
            n += k;
        }
    }
    size_t o = bpe_utf8_sanitize(joined, n, (uint8_t *)out);
    out[o] = '\0';
    choir_free(joined);
    *text = out;
    if (len) *len = o;
    return 0;
}

int choir_tokenizer_decode(const choir_tokenizer *t, const int32_t *ids, int n_ids, char **text,
                           size_t *len, choir_err *err) {
    return choir_tokenizer_decode_ex(t, ids, n_ids, 0, text, len, err);
}

/* --- streaming --------------------------------------------------------- */

struct choir_tokenizer_stream {
    const choir_tokenizer *t;
    unsigned flags;
    uint8_t *pending; /* bytes of the current push: the held tail, then the new token */
    size_t n_pending, cap_pending;
    char *out;        /* sanitised text handed out, [3 cap_pending + 1] */
};

choir_tokenizer_stream *choir_tokenizer_stream_create(const choir_tokenizer *t, unsigned flags,
                                                      choir_err *err) {
    choir_tokenizer_stream *s = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *s);
    if (!s) {
        choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        return NULL;
    }
    s->t = t;
    s->flags = flags;
    return s;
}

void choir_tokenizer_stream_free(choir_tokenizer_stream *s) {
    if (!s) return;
    choir_free(s->pending);
    choir_free(s->out);
    choir_free(s);
}

static int stream_room(choir_tokenizer_stream *s, size_t need, choir_err *err) {
    if (need <= s->cap_pending) return 0;
    size_t cap = need < 64 ? 64 : 2 * need;
    uint8_t *p = choir_realloc(s->pending, cap);
    if (p) s->pending = p;
    char *o = p ? choir_realloc(s->out, 3 * cap + 1) : NULL;
    if (!o) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    s->out = o;
    s->cap_pending = cap;
    return 0;
}

/* Emits pending[0..upto) sanitised and keeps the rest for later. The split
 * is only ever made before the lead byte of a character still being
 * completed, where the all-at-once decoder's choices are the same. */
static void stream_emit(choir_tokenizer_stream *s, size_t upto, const char **text, size_t *len) {
    size_t o = bpe_utf8_sanitize(s->pending, upto, (uint8_t *)s->out);
    s->out[o] = '\0';
    memmove(s->pending, s->pending + upto, s->n_pending - upto);
    s->n_pending -= upto;
    *text = s->out;
    *len = o;
}

int choir_tokenizer_stream_push(choir_tokenizer_stream *s, int32_t id, const char **text,
                                size_t *len, choir_err *err) {
    size_t k = 0;
    const uint8_t *b = bpe_id_bytes(s->t, id, (int)s->flags, &k);
    *text = "";
    *len = 0;
    if (!b || k == 0) return 0;
    if (stream_room(s, s->n_pending + k, err)) return CHOIR_ENOMEM;
    memcpy(s->pending + s->n_pending, b, k);
    s->n_pending += k;
    /* Hold back a tail that more bytes could still extend: a byte that leads
     * a multi-byte sequence (even an invalid one, which the replacement rule
     * also extends over continuation bytes) followed only by continuation
     * bytes, fewer than it wants. */
    size_t keep = 0;
    for (size_t back = 1; back <= 3 && back <= s->n_pending; back++) {
        uint8_t c = s->pending[s->n_pending - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t want = utf8_want(c);
        if (want > back) keep = back;
        break;
    }
    stream_emit(s, s->n_pending - keep, text, len);
    return 0;
}

int choir_tokenizer_stream_flush(choir_tokenizer_stream *s, const char **text, size_t *len,
                                 choir_err *err) {
    (void)err;
    *text = "";
    *len = 0;
    if (s->n_pending == 0) return 0;
    stream_emit(s, s->n_pending, text, len);
    return 0;
}
