/* Unicode lookups and canonical normalisation (UAX #15) over code point
 * arrays, for the tokenizers' normalisers and pre-tokenisation patterns. */
#include <string.h>

#include "text/unicode_internal.h"

/* Index of the last run whose first code point is <= cp. */
static int run_index(const uint32_t *runs, int n, int shift, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((runs[mid] >> shift) <= cp) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

uni_cat uni_category(uint32_t cp) {
    if (cp > 0x10FFFF) return UNI_CN;
    return (uni_cat)(uni_category_runs[run_index(uni_category_runs, uni_category_runs_count, 5, cp)] & 31u);
}

int uni_ccc(uint32_t cp) {
    if (cp < 0x300 || cp > 0x10FFFF) return 0;
    return (int)(uni_ccc_runs[run_index(uni_ccc_runs, uni_ccc_runs_count, 8, cp)] & 255u);
}

int uni_is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

size_t uni_decode_utf8(const uint8_t *s, size_t len, uint32_t *out, uint32_t *offs) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint8_t c = s[i];
        int k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        uint32_t cp = 0;
        int ok = k > 0 && i + (size_t)k <= len;
        if (ok) {
            cp = k == 1 ? c : k == 2 ? (c & 0x1Fu) : k == 3 ? (c & 0x0Fu) : (c & 0x07u);
            for (int j = 1; j < k && ok; j++) {
                if ((s[i + (size_t)j] & 0xC0) != 0x80) ok = 0;
                else cp = (cp << 6) | (s[i + (size_t)j] & 0x3Fu);
            }
            ok = ok && cp >= min_cp[k] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
        }
        if (offs) offs[n] = (uint32_t)i;
        if (!ok) {
            out[n++] = UNI_RAW_BYTE(c);
            i++;
        } else {
            out[n++] = cp;
            i += (size_t)k;
        }
    }
    return n;
}

int uni_encode_utf8(uint32_t cp, uint8_t out[4]) {
    if (UNI_IS_RAW(cp)) {
        out[0] = (uint8_t)(cp - 0x110000u);
        return 1;
    }
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Hangul syllables decompose and compose by formula (Unicode 3.12). */
enum { H_SBASE = 0xAC00, H_LBASE = 0x1100, H_VBASE = 0x1161, H_TBASE = 0x11A7, H_LCOUNT = 19,
       H_VCOUNT = 21, H_TCOUNT = 28, H_NCOUNT = H_VCOUNT * H_TCOUNT, H_SCOUNT = H_LCOUNT * H_NCOUNT };

static const uint32_t *decomp_of(uint32_t cp) {
    if (cp < 0xC0 || cp > 0x2FA1D) return NULL;
    int lo = 0, hi = uni_decomp_count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (uni_decomp[mid][0] < cp) lo = mid + 1;
        else if (uni_decomp[mid][0] > cp) hi = mid - 1;
        else return uni_decomp[mid];
    }
    return NULL;
}

/* Appends the full canonical decomposition of cp; returns the new length or
 * -1 when out of room. */
static int64_t decompose(uint32_t cp, uint32_t *out, size_t n, size_t cap) {
    if (cp >= H_SBASE && cp < H_SBASE + H_SCOUNT) {
        uint32_t s = cp - H_SBASE, t = s % H_TCOUNT;
        if (n + 3 > cap) return -1;
        out[n++] = H_LBASE + s / H_NCOUNT;
        out[n++] = H_VBASE + (s % H_NCOUNT) / H_TCOUNT;
        if (t) out[n++] = H_TBASE + t;
        return (int64_t)n;
    }
    const uint32_t *d = decomp_of(cp);
    if (!d) {
        if (n + 1 > cap) return -1;
        out[n++] = cp;
        return (int64_t)n;
    }
    int64_t r = decompose(d[1], out, n, cap);
    if (r >= 0 && d[2]) r = decompose(d[2], out, (size_t)r, cap);
    return r;
}

int64_t uni_nfd(const uint32_t *cp, size_t n, uint32_t *out, size_t cap) {
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t r = decompose(cp[i], out, len, cap);
        if (r < 0) return -1;
        len = (size_t)r;
    }
    /* Canonical ordering: a stable sort of each run of non-starters by class
     * (runs are short, so insertion sort). */
    for (size_t i = 1; i < len; i++) {
        int c = uni_ccc(out[i]);
        if (c == 0) continue;
        size_t j = i;
        uint32_t v = out[i];
        while (j > 0 && uni_ccc(out[j - 1]) > c) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = v;
    }
    return (int64_t)len;
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= H_LBASE && a < H_LBASE + H_LCOUNT && b >= H_VBASE && b < H_VBASE + H_VCOUNT)
        return H_SBASE + ((a - H_LBASE) * H_VCOUNT + (b - H_VBASE)) * H_TCOUNT;
    if (a >= H_SBASE && a < H_SBASE + H_SCOUNT && (a - H_SBASE) % H_TCOUNT == 0 && b > H_TBASE &&
        b < H_TBASE + H_TCOUNT)
        return a + (b - H_TBASE);
    int lo = 0, hi = uni_comp_count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const uint32_t *e = uni_comp[mid];
        if (e[0] < a || (e[0] == a && e[1] < b)) lo = mid + 1;
        else if (e[0] > a || e[1] > b) hi = mid - 1;
        else return e[2];
    }
    return 0;
}

int64_t uni_nfc(const uint32_t *cp, size_t n, uint32_t *out, size_t cap) {
    int64_t len = uni_nfd(cp, n, out, cap);
    if (len <= 0) return len;
    /* Canonical composition: each character composes with the last starter
     * unless a character in between blocks it (class 0, or >= its own). */
    size_t starter = 0, w = 1;
    int last = uni_ccc(out[0]) ? 256 : 0;
    for (size_t i = 1; i < (size_t)len; i++) {
        uint32_t c = out[i];
        int cc = uni_ccc(c);
        uint32_t comp = (last < cc || last == 0) ? compose(out[starter], c) : 0;
        if (comp) {
            out[starter] = comp;
            continue;
        }
        if (cc == 0) starter = w;
        last = cc;
        out[w++] = c;
    }
    return (int64_t)w;
}

int uni_nfc_quick(const uint32_t *cp, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (cp[i] >= 0x300 && !UNI_IS_RAW(cp[i])) return 0;
    return 1;
}
