/* The normalizers of a Unigram tokenizer.json.
 *
 * Unicode normal forms, lowercasing and grapheme clusters come from ICU (the
 * tables are too large to carry ourselves). SentencePiece's Precompiled map
 * is read as the tokenizers library reads it: a little-endian uint32 size,
 * a darts-clone double array of that many bytes, then a pool of
 * NUL-terminated replacements; each grapheme cluster shorter than 6 bytes is
 * looked up whole (the first, shortest prefix match replaces the whole
 * cluster, a quirk kept for identical ids), else character by character. */
#include <stdlib.h>
#include <string.h>

#include <unicode/ubrk.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "text/unigram_internal.h"

int un_utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c >> 5) == 6) return 2;
    if ((c >> 4) == 14) return 3;
    return 4;
}

uint32_t un_utf8_decode(const char *s, int *len) {
    const unsigned char *u = (const unsigned char *)s;
    int n = un_utf8_len(u[0]);
    uint32_t cp = n == 1 ? u[0] : n == 2 ? (u[0] & 0x1fu) : n == 3 ? (u[0] & 0x0fu) : (u[0] & 0x07u);
    for (int i = 1; i < n; i++) cp = (cp << 6) | (u[i] & 0x3fu);
    if (len) *len = n;
    return cp;
}

/* Length of a well-formed UTF-8 sequence at s[0..n), or 0. */
static int utf8_valid_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    int len;
    uint32_t min;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, min = 0x10000;
    else return 0;
    if ((size_t)len > n) return 0;
    uint32_t cp = c & (0x7fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

void un_utf8_sanitize(const char *s, size_t n, choir_buf *out) {
    size_t i = 0;
    while (i < n) {
        int l = utf8_valid_len((const unsigned char *)s + i, n - i);
        if (l == 0) {
            choir_buf_append(out, "\xef\xbf\xbd", 3);
            i++;
        } else {
            choir_buf_append(out, s + i, (size_t)l);
            i += (size_t)l;
        }
    }
    if (!out->data) choir_buf_append(out, "", 0);
}

int un_is_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

/* --- parsing ------------------------------------------------------------ */

static int b64_val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes base64 text into a new buffer. */
static unsigned char *b64_decode(const char *s, size_t *out_len) {
    size_t n = strlen(s);
    unsigned char *out = choir_alloc(CHOIR_MEM_OTHER, n / 4 * 3 + 4);
    if (!out) return NULL;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) continue; /* padding and line breaks */
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    *out_len = o;
    return out;
}

static int parse_precompiled(const cJSON *obj, un_norm *out, choir_err *err) {
    const char *b64 = choir_json_str(obj, "precompiled_charsmap", NULL);
    if (!b64) return choir_err_set(err, CHOIR_EFORMAT, "Precompiled normalizer without precompiled_charsmap");
    size_t n = 0;
    unsigned char *blob = b64_decode(b64, &n);
    if (!blob) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    int rc = 0;
    if (n < 4) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "precompiled_charsmap: %zu bytes is too short", n);
        goto done;
    }
    uint32_t trie_bytes = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 |
                          (uint32_t)blob[3] << 24;
    if (trie_bytes % 4 || trie_bytes == 0 || (size_t)trie_bytes > n - 4) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "precompiled_charsmap: bad trie size %u of %zu bytes",
                           trie_bytes, n);
        goto done;
    }
    out->n_trie = trie_bytes / 4;
    out->trie = choir_alloc(CHOIR_MEM_OTHER, trie_bytes);
    out->n_pool = n - 4 - trie_bytes;
    out->pool = choir_alloc(CHOIR_MEM_OTHER, out->n_pool + 1);
    if (!out->trie || !out->pool) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    for (size_t i = 0; i < out->n_trie; i++) {
        const unsigned char *u = blob + 4 + 4 * i;
        out->trie[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
    }
    memcpy(out->pool, blob + 4 + trie_bytes, out->n_pool);
    out->pool[out->n_pool] = 0;
done:
    choir_free(blob);
    return rc;
}

static char *dup_n(const char *s, size_t n) {
    char *d = choir_alloc(CHOIR_MEM_OTHER, n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* A regex the Replace normalizer may carry: one character (possibly
 * backslash-escaped) followed by {m,}, {m,n}, {m}, + or *. */
static int parse_regex(const char *re, un_norm *out, choir_err *err) {
    const char *p = re;
    if (*p == '\\' && p[1]) p++;
    if (!*p) return choir_err_set(err, CHOIR_EUNSUPPORTED, "Replace regex \"%s\" is not supported", re);
    int cl = un_utf8_len((unsigned char)*p);
    if ((int)strlen(p) < cl) return choir_err_set(err, CHOIR_EFORMAT, "Replace regex \"%s\": bad UTF-8", re);
    if (strchr(".[]()|^$?", *p) && p == re)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "Replace regex \"%s\" is not supported", re);
    out->pattern = dup_n(p, (size_t)cl);
    if (!out->pattern) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    out->pattern_len = (size_t)cl;
    const char *q = p + cl;
    int lo = 1, hi = 1;
    if (*q == '+') lo = 1, hi = -1, q++;
    else if (*q == '*') lo = 0, hi = -1, q++;
    else if (*q == '{') {
        char *end;
        lo = (int)strtol(q + 1, &end, 10);
        if (end == q + 1) goto bad;
        if (*end == '}') hi = lo, q = end + 1;
        else if (*end == ',' && end[1] == '}') hi = -1, q = end + 2;
        else if (*end == ',') {
            char *e2;
            hi = (int)strtol(end + 1, &e2, 10);
            if (e2 == end + 1 || *e2 != '}') goto bad;
            q = e2 + 1;
        } else
            goto bad;
    }
    if (*q) goto bad;
    if (lo < 1) lo = 1; /* an empty match replaces nothing in the library either */
    out->rep_min = lo;
    out->rep_max = hi;
    return 0;
bad:
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "Replace regex \"%s\" is not supported", re);
}

int un_norm_parse(const cJSON *obj, un_norm *out, choir_err *err) {
    memset(out, 0, sizeof *out);
    out->rep_min = -1;
    const char *type = choir_json_str(obj, "type", "");
    if (!strcmp(type, "NFC")) out->kind = UN_NFC;
    else if (!strcmp(type, "NFD")) out->kind = UN_NFD;
    else if (!strcmp(type, "NFKC")) out->kind = UN_NFKC;
    else if (!strcmp(type, "NFKD")) out->kind = UN_NFKD;
    else if (!strcmp(type, "Lowercase")) out->kind = UN_LOWERCASE;
    else if (!strcmp(type, "Strip")) {
        out->kind = UN_STRIP;
        out->strip_left = choir_json_bool(obj, "strip_left", 1);
        out->strip_right = choir_json_bool(obj, "strip_right", 1);
    } else if (!strcmp(type, "Prepend")) {
        out->kind = UN_PREPEND;
        const char *s = choir_json_str(obj, "prepend", "");
        out->content = dup_n(s, strlen(s));
        out->content_len = strlen(s);
        if (!out->content) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    } else if (!strcmp(type, "Replace")) {
        out->kind = UN_REPLACE;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(obj, "pattern");
        const char *content = choir_json_str(obj, "content", NULL);
        if (!pat || !content) return choir_err_set(err, CHOIR_EFORMAT, "Replace normalizer without pattern/content");
        out->content = dup_n(content, strlen(content));
        out->content_len = strlen(content);
        if (!out->content) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        const char *lit = choir_json_str(pat, "String", NULL);
        const char *re = choir_json_str(pat, "Regex", NULL);
        if (lit) {
            if (!*lit) return choir_err_set(err, CHOIR_EFORMAT, "Replace normalizer with an empty pattern");
            out->pattern = dup_n(lit, strlen(lit));
            out->pattern_len = strlen(lit);
            if (!out->pattern) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        } else if (re) {
            return parse_regex(re, out, err);
        } else {
            return choir_err_set(err, CHOIR_EFORMAT, "Replace normalizer pattern is neither String nor Regex");
        }
    } else if (!strcmp(type, "Precompiled")) {
        out->kind = UN_PRECOMPILED;
        return parse_precompiled(obj, out, err);
    } else {
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "normalizer type \"%s\" is not supported", type);
    }
    return 0;
}

void un_norm_free(un_norm *n) {
    choir_free(n->pattern);
    choir_free(n->content);
    choir_free(n->trie);
    choir_free(n->pool);
    memset(n, 0, sizeof *n);
}

/* --- applying ----------------------------------------------------------- */

/* UTF-8 -> UTF-16 into a new buffer (*n16 code units). */
static UChar *to_utf16(const char *s, size_t n, int32_t *n16) {
    UErrorCode st = U_ZERO_ERROR;
    int32_t need = 0;
    u_strFromUTF8WithSub(NULL, 0, &need, s, (int32_t)n, 0xfffd, NULL, &st);
    if (st != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(st)) return NULL;
    UChar *u = choir_alloc(CHOIR_MEM_OTHER, ((size_t)need + 1) * sizeof *u);
    if (!u) return NULL;
    st = U_ZERO_ERROR;
    u_strFromUTF8WithSub(u, need + 1, n16, s, (int32_t)n, 0xfffd, NULL, &st);
    if (U_FAILURE(st)) {
        choir_free(u);
        return NULL;
    }
    return u;
}

static int put_utf16(const UChar *u, int32_t n16, choir_buf *out) {
    UErrorCode st = U_ZERO_ERROR;
    int32_t need = 0;
    u_strToUTF8WithSub(NULL, 0, &need, u, n16, 0xfffd, NULL, &st);
    if (st != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(st)) return CHOIR_EINVAL;
    char *s = choir_alloc(CHOIR_MEM_OTHER, (size_t)need + 1);
    if (!s) return CHOIR_ENOMEM;
    st = U_ZERO_ERROR;
    u_strToUTF8WithSub(s, need + 1, NULL, u, n16, 0xfffd, NULL, &st);
    if (U_FAILURE(st)) {
        choir_free(s);
        return CHOIR_EINVAL;
    }
    choir_buf_append(out, s, (size_t)need);
    choir_free(s);
    return 0;
}

static int apply_icu(un_norm_kind kind, const char *in, size_t len, choir_buf *out, choir_err *err) {
    UErrorCode st = U_ZERO_ERROR;
    int32_t n16 = 0;
    UChar *u = to_utf16(in, len, &n16);
    if (!u) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    UChar *res = NULL;
    int32_t nres = 0;
    int rc = 0;
    /* Normal forms and case mappings grow text by a small factor at most. */
    int32_t cap = 4 * n16 + 16;
    res = choir_alloc(CHOIR_MEM_OTHER, (size_t)cap * sizeof *res);
    if (!res) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    if (kind == UN_LOWERCASE) {
        nres = u_strToLower(res, cap, u, n16, "", &st);
    } else {
        const UNormalizer2 *nz = kind == UN_NFC    ? unorm2_getNFCInstance(&st)
                                 : kind == UN_NFD  ? unorm2_getNFDInstance(&st)
                                 : kind == UN_NFKC ? unorm2_getNFKCInstance(&st)
                                                   : unorm2_getNFKDInstance(&st);
        if (U_SUCCESS(st)) nres = unorm2_normalize(nz, u, n16, res, cap, &st);
    }
    if (U_FAILURE(st)) {
        rc = choir_err_set(err, CHOIR_EINVAL, "tokenizer: ICU normalisation failed (%s)", u_errorName(st));
        goto done;
    }
    rc = put_utf16(res, nres, out);
    if (rc) choir_err_set(err, rc, "tokenizer: normalisation output failed");
done:
    choir_free(u);
    choir_free(res);
    return rc;
}

/* darts-clone common prefix search, first (shortest) match only: the pool
 * offset of its replacement, or -1. */
static int64_t darts_first(const un_norm *n, const unsigned char *key, size_t len) {
    const uint32_t *a = n->trie;
    size_t pos = 0;
    uint32_t unit = a[0];
    pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
    for (size_t i = 0; i < len; i++) {
        pos ^= key[i];
        if (pos >= n->n_trie) return -1;
        unit = a[pos];
        if ((unit & ((1u << 31) | 0xffu)) != key[i]) return -1;
        pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
        if (pos >= n->n_trie) return -1;
        if ((unit >> 8) & 1u) return (int64_t)(a[pos] & ((1u << 31) - 1));
    }
    return -1;
}

/* Appends the replacement of chunk s[0..len) when the map has one. */
static int precompiled_put(const un_norm *n, const char *s, size_t len, choir_buf *out) {
    int64_t off = darts_first(n, (const unsigned char *)s, len);
    if (off < 0 || (size_t)off >= n->n_pool) return 0;
    const char *r = n->pool + off;
    choir_buf_append(out, r, strnlen(r, n->n_pool - (size_t)off));
    return 1;
}

static int apply_precompiled(const un_norm *n, const char *in, size_t len, choir_buf *out, choir_err *err) {
    int32_t n16 = 0;
    UChar *u = to_utf16(in, len, &n16);
    if (!u) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    UErrorCode st = U_ZERO_ERROR;
    UBreakIterator *bi = ubrk_open(UBRK_CHARACTER, "", u, n16, &st);
    if (U_FAILURE(st)) {
        choir_free(u);
        return choir_err_set(err, CHOIR_EINVAL, "tokenizer: ICU break iterator failed (%s)", u_errorName(st));
    }
    choir_buf g = {0};
    int rc = 0;
    for (int32_t a = ubrk_first(bi), b = ubrk_next(bi); b != UBRK_DONE; a = b, b = ubrk_next(bi)) {
        g.len = 0;
        if ((rc = put_utf16(u + a, b - a, &g)) != 0 || g.oom) {
            rc = choir_err_set(err, rc ? rc : CHOIR_ENOMEM, "tokenizer: grapheme conversion failed");
            break;
        }
        if (g.len < 6 && precompiled_put(n, g.data, g.len, out)) continue;
        for (size_t i = 0; i < g.len;) {
            size_t cl = (size_t)un_utf8_len((unsigned char)g.data[i]);
            if (!precompiled_put(n, g.data + i, cl, out)) choir_buf_append(out, g.data + i, cl);
            i += cl;
        }
    }
    ubrk_close(bi);
    choir_buf_free(&g);
    choir_free(u);
    return rc;
}

/* Length of a run of the pattern character at s (in repetitions), up to max. */
static int run_length(const un_norm *n, const char *s, size_t len) {
    int reps = 0;
    size_t i = 0;
    while (i + n->pattern_len <= len && memcmp(s + i, n->pattern, n->pattern_len) == 0 &&
           (n->rep_max < 0 || reps < n->rep_max)) {
        reps++;
        i += n->pattern_len;
    }
    return reps;
}

static void apply_replace(const un_norm *n, const char *in, size_t len, choir_buf *out) {
    size_t i = 0;
    while (i < len) {
        if (n->rep_min < 0) {
            if (i + n->pattern_len <= len && memcmp(in + i, n->pattern, n->pattern_len) == 0) {
                choir_buf_append(out, n->content, n->content_len);
                i += n->pattern_len;
                continue;
            }
        } else {
            int reps = run_length(n, in + i, len - i);
            if (reps >= n->rep_min) {
                choir_buf_append(out, n->content, n->content_len);
                i += (size_t)reps * n->pattern_len;
                continue;
            }
        }
        size_t cl = (size_t)un_utf8_len((unsigned char)in[i]);
        choir_buf_append(out, in + i, cl);
        i += cl;
    }
}

static void apply_strip(const un_norm *n, const char *in, size_t len, choir_buf *out) {
    size_t a = 0, b = len;
    if (n->strip_left)
        while (a < b) {
            int cl;
            uint32_t cp = un_utf8_decode(in + a, &cl);
            if (!un_is_space(cp)) break;
            a += (size_t)cl;
        }
    if (n->strip_right)
        while (b > a) {
            size_t s = b - 1;
            while (s > a && ((unsigned char)in[s] & 0xc0) == 0x80) s--;
            if (!un_is_space(un_utf8_decode(in + s, NULL))) break;
            b = s;
        }
    choir_buf_append(out, in + a, b - a);
}

int un_norm_apply(const un_norm *n, const char *in, size_t len, choir_buf *out, choir_err *err) {
    int rc = 0;
    switch (n->kind) {
    case UN_NFC:
    case UN_NFD:
    case UN_NFKC:
    case UN_NFKD:
    case UN_LOWERCASE:
        rc = len ? apply_icu(n->kind, in, len, out, err) : 0;
        break;
    case UN_STRIP: apply_strip(n, in, len, out); break;
    case UN_REPLACE: apply_replace(n, in, len, out); break;
    case UN_PREPEND:
        if (len) choir_buf_append(out, n->content, n->content_len);
        choir_buf_append(out, in, len);
        break;
    case UN_PRECOMPILED: rc = len ? apply_precompiled(n, in, len, out, err) : 0; break;
    }
    if (!out->data) choir_buf_append(out, "", 0);
    if (!rc && out->oom) rc = choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    return rc;
}
