/* Words from tokens and their times from the alignment path
 * (choir/whisper_words.h), as openai/whisper's tokenizer.py
 * (split_to_word_tokens) and timing.py (find_alignment, merge_punctuations,
 * add_word_timestamps) do it.
 *
 * openai works on Python strings, so "is in" is a substring test, strip()
 * removes Unicode whitespace and indices count code points. The helpers below
 * reproduce exactly those semantics on UTF-8, because the heuristics depend
 * on them: "" is "in" every string, so a whitespace-only word counts as
 * punctuation, and "()" is in string.punctuation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "choir/whisper_words.h"

#define REPLACEMENT 0xFFFDu

/* One step of UTF-8 decoding with Python's errors="replace" (the "maximal
 * subpart" rule: a truncated or malformed sequence becomes one U+FFFD
 * covering its valid prefix, and decoding resumes at the byte that broke it). */
static uint32_t utf8_step(const uint8_t *s, size_t n, size_t *adv) {
    uint8_t b = s[0];
    *adv = 1;
    if (b < 0x80) return b;
    int need;
    uint32_t cp;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
        cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        cp = b & 0x0F;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        cp = b & 0x07;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return REPLACEMENT;
    }
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return REPLACEMENT;
        uint8_t c = s[k];
        uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (c < l || c > h) return REPLACEMENT;
        cp = (cp << 6) | (c & 0x3F);
        *adv = (size_t)k + 1;
    }
    return cp;
}

static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Python's str.isspace() */
static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* The UTF-8 string s without leading and trailing Python whitespace, as a
 * (start, length) view; s is valid UTF-8 (it came out of utf8 decoding). */
static void py_strip(const char *s, const char **start, size_t *len) {
    size_t n = strlen(s), a = 0, b = n, adv;
    while (a < n) {
        uint32_t c = utf8_step((const uint8_t *)s + a, n - a, &adv);
        if (!py_space(c)) break;
        a += adv;
    }
    /* from the end: step back to each character's first byte */
    while (b > a) {
        size_t p = b - 1;
        while (p > a && ((uint8_t)s[p] & 0xC0) == 0x80) p--;
        uint32_t c = utf8_step((const uint8_t *)s + p, b - p, &adv);
        if (!py_space(c)) break;
        b = p;
    }
    *start = s + a;
    *len = b - a;
}

/* Python's `needle in hay` for a needle given as (pointer, length). */
static bool py_in(const char *needle, size_t len, const char *hay) {
    if (len == 0) return true;
    size_t hn = strlen(hay);
    for (size_t i = 0; i + len <= hn; i++)
        if (memcmp(hay + i, needle, len) == 0) return true;
    return false;
}

static bool py_startswith_space(const char *s) { return s[0] == ' '; }
static bool py_endswith_space(const char *s) {
    size_t n = strlen(s);
    return n && s[n - 1] == ' ';
}

static const char PY_PUNCTUATION[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

bool choir_whisper_lang_splits_by_unicode(const char *code) {
    static const char *const L[] = {"zh", "ja", "th", "lo", "my", "yue"};
    if (!code) return false;
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++)
        if (strcmp(code, L[i]) == 0) return true;
    return false;
}

void choir_whisper_words_free(choir_whisper_word *w, int n) {
    if (!w) return;
    for (int i = 0; i < n; i++) {
        choir_free(w[i].text);
        choir_free(w[i].tokens);
    }
    choir_free(w);
}

/* The decoded text of a token run, in code points. */
typedef struct cps {
    uint32_t *v;
    size_t n, cap;
} cps;

static int cps_push(cps *c, uint32_t cp) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        uint32_t *v = choir_realloc(c->v, cap * sizeof *v);
        if (!v) return CHOIR_ENOMEM;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = cp;
    return 0;
}

/* The bytes of tokens[0..n) joined (special tokens add nothing), decoded. */
static int decode_run(const choir_tokenizer *tok, const int32_t *tokens, int n, choir_buf *bytes, cps *out) {
    choir_buf_clear(bytes);
    for (int i = 0; i < n; i++) {
        size_t bl = 0;
        const uint8_t *b = choir_tokenizer_token_bytes(tok, tokens[i], &bl);
        if (b) choir_buf_append(bytes, b, bl);
    }
    if (bytes->oom) return CHOIR_ENOMEM;
    const uint8_t *joined = (const uint8_t *)bytes->data;
    size_t len = bytes->len;
    out->n = 0;
    for (size_t p = 0; p < len;) {
        size_t adv;
        uint32_t cp = utf8_step(joined + p, len - p, &adv);
        if (cps_push(out, cp)) return CHOIR_ENOMEM;
        p += adv;
    }
    return 0;
}

static char *cps_utf8(const cps *c) {
    char *s = choir_alloc(CHOIR_MEM_OTHER, c->n * 4 + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) k += utf8_put(c->v[i], s + k);
    s[k] = 0;
    return s;
}

static int words_push(choir_whisper_word **w, int *n, int *cap, char *text, const int32_t *tokens, int nt) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 16;
        choir_whisper_word *g = choir_realloc(*w, (size_t)c * sizeof *g);
        if (!g) return CHOIR_ENOMEM;
        *w = g;
        *cap = c;
    }
    int32_t *t = choir_alloc(CHOIR_MEM_OTHER, (size_t)(nt ? nt : 1) * sizeof *t);
    if (!t) return CHOIR_ENOMEM;
    memcpy(t, tokens, (size_t)nt * sizeof *t);
    (*w)[(*n)++] = (choir_whisper_word){.text = text, .tokens = t, .n_tokens = nt};
    return 0;
}

/* Appends src's text and tokens to dst (dst.text + src.text when !front,
 * src.text + dst.text when front), leaving src empty. */
static int word_absorb(choir_whisper_word *dst, choir_whisper_word *src, bool front) {
    size_t a = strlen(dst->text), b = strlen(src->text);
    char *t = choir_alloc(CHOIR_MEM_OTHER, a + b + 1);
    int32_t *k = choir_alloc(CHOIR_MEM_OTHER, (size_t)(dst->n_tokens + src->n_tokens + 1) * sizeof *k);
    char *empty = choir_strdup("");
    if (!t || !k || !empty) {
        choir_free(t);
        choir_free(k);
        choir_free(empty);
        return CHOIR_ENOMEM;
    }
    const choir_whisper_word *first = front ? src : dst, *second = front ? dst : src;
    size_t fa = front ? b : a;
    memcpy(t, first->text, fa);
    strcpy(t + fa, second->text);
    memcpy(k, first->tokens, (size_t)first->n_tokens * sizeof *k);
    memcpy(k + first->n_tokens, second->tokens, (size_t)second->n_tokens * sizeof *k);
    int nk = dst->n_tokens + src->n_tokens;
    choir_free(dst->text);
    choir_free(dst->tokens);
    dst->text = t;
    dst->tokens = k;
    dst->n_tokens = nk;
    choir_free(src->text);
    src->text = empty;
    src->n_tokens = 0;
    return 0;
}

int choir_whisper_split_words(const choir_tokenizer *tok, const choir_whisper_specials *sp, const int32_t *tokens,
                              int n, bool by_unicode, choir_whisper_word **out, int *n_out, choir_err *err) {
    *out = NULL;
    *n_out = 0;
    cps full = {0}, cur = {0};
    choir_buf bytes = CHOIR_BUF_INIT(CHOIR_MEM_OTHER); /* a run's token bytes, joined */
    size_t offset = 0;
    choir_whisper_word *w = NULL;
    int nw = 0, cap = 0, start = 0, rc = decode_run(tok, tokens, n, &bytes, &full);
    /* split_tokens_on_unicode: the shortest runs that decode cleanly */
    for (int i = 0; !rc && i < n; i++) {
        rc = decode_run(tok, tokens + start, i + 1 - start, &bytes, &cur);
        if (rc) break;
        size_t bad = 0;
        while (bad < cur.n && cur.v[bad] != REPLACEMENT) bad++;
        bool whole = bad == cur.n || (offset + bad < full.n && full.v[offset + bad] == REPLACEMENT);
        if (!whole) continue;
        char *text = cps_utf8(&cur);
        if (!text) {
            rc = CHOIR_ENOMEM;
            break;
        }
        bool special = tokens[start] >= sp->eot;
        const char *st;
        size_t sl;
        py_strip(text, &st, &sl);
        bool joins = !by_unicode && nw > 0 && !special && !py_startswith_space(text) &&
                     !(sl <= sizeof PY_PUNCTUATION - 1 && py_in(st, sl, PY_PUNCTUATION));
        if (joins) {
            /* split_tokens_on_spaces: glued onto the previous word */
            choir_whisper_word piece = {.text = text, .tokens = (int32_t *)(tokens + start), .n_tokens = i + 1 - start};
            choir_whisper_word *prev = &w[nw - 1];
            size_t a = strlen(prev->text), b = strlen(text);
            int32_t *k = choir_realloc(prev->tokens, (size_t)(prev->n_tokens + piece.n_tokens) * sizeof *k);
            if (k) prev->tokens = k;
            char *t = k ? choir_alloc(CHOIR_MEM_OTHER, a + b + 1) : NULL;
            if (!t) {
                choir_free(text);
                rc = CHOIR_ENOMEM;
                break;
            }
            memcpy(t, prev->text, a);
            memcpy(t + a, text, b + 1);
            memcpy(k + prev->n_tokens, piece.tokens, (size_t)piece.n_tokens * sizeof *k);
            choir_free(prev->text);
            choir_free(text);
            prev->text = t;
            prev->n_tokens += piece.n_tokens;
        } else {
            rc = words_push(&w, &nw, &cap, text, tokens + start, i + 1 - start);
            if (rc) choir_free(text);
        }
        offset += cur.n;
        start = i + 1;
    }
    choir_free(full.v);
    choir_free(cur.v);
    choir_buf_free(&bytes);
    if (rc) {
        choir_whisper_words_free(w, nw);
        return choir_err_set(err, rc, "word timestamps: out of memory");
    }
    *out = w;
    *n_out = nw;
    return 0;
}

int choir_whisper_merge_punctuation(choir_whisper_word *w, int n, const char *prepend, const char *append,
                                    choir_err *err) {
    if (!prepend) prepend = CHOIR_WHISPER_PREPEND_PUNCT;
    if (!append) append = CHOIR_WHISPER_APPEND_PUNCT;
    for (int i = n - 2, j = n - 1; i >= 0; i--) {
        const char *st;
        size_t sl;
        py_strip(w[i].text, &st, &sl);
        if (py_startswith_space(w[i].text) && py_in(st, sl, prepend)) {
            if (word_absorb(&w[j], &w[i], true)) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        } else {
            j = i;
        }
    }
    for (int i = 0, j = 1; j < n; j++) {
        if (!py_endswith_space(w[i].text) && py_in(w[j].text, strlen(w[j].text), append)) {
            if (word_absorb(&w[i], &w[j], false)) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        } else {
            i = j;
        }
    }
    return 0;
}

float choir_whisper_text_token_prob(const float *logits, int32_t eot, int32_t token) {
    if (token < 0 || token >= eot) return 0;
    float mx = -INFINITY;
    for (int32_t v = 0; v < eot; v++)
        if (logits[v] > mx) mx = logits[v];
    double sum = 0;
    for (int32_t v = 0; v < eot; v++) sum += exp((double)logits[v] - mx);
    return (float)(exp((double)logits[token] - mx) / sum);
}

/* Python's round(x, 2): the double nearest the correctly rounded decimal,
 * ties to even on the exact binary value, which is what glibc's printf does. */
static double py_round2(double x) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.2f", x);
    return strtod(buf, NULL);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* find_alignment after the network: the path through the matrix, each
 * token's start at the frame where the path enters its row, and each word
 * from its first token's start to the next word's. */
static int word_times(const float *matrix, int n_rows, int n_frames, const float *probs, choir_whisper_word *w,
                      int n_words, choir_err *err) {
    float *neg = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n_rows * n_frames * sizeof(float));
    int32_t *rows = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(n_rows + n_frames) * sizeof(int32_t));
    int32_t *cols = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(n_rows + n_frames) * sizeof(int32_t));
    double *jump = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(n_rows + n_frames) * sizeof(double));
    int rc = (!neg || !rows || !cols || !jump) ? choir_err_set(err, CHOIR_ENOMEM, "word timestamps: out of memory") : 0;
    if (!rc) {
        for (size_t i = 0; i < (size_t)n_rows * n_frames; i++) neg[i] = -matrix[i];
        int len = choir_whisper_dtw(neg, n_rows, n_frames, rows, cols, err);
        if (len < 0) rc = len;
        int nj = 0;
        for (int k = 0; k < len; k++)
            if (k == 0 || rows[k] != rows[k - 1]) jump[nj++] = cols[k] / (double)CHOIR_WHISPER_WORD_FPS;
        /* word_boundaries: the index of each word's first token */
        for (int i = 0, b = 0; !rc && i < n_words; i++) {
            int e = b + w[i].n_tokens;
            w[i].start = b < nj ? jump[b] : 0;
            w[i].end = e < nj ? jump[e] : w[i].start;
            double s = 0;
            for (int k = b; k < e; k++) s += probs[k];
            w[i].probability = (float)(s / (e - b));
            b = e;
        }
    }
    choir_free(neg);
    choir_free(rows);
    choir_free(cols);
    choir_free(jump);
    return rc;
}



int choir_whisper_add_word_timestamps(const choir_tokenizer *tok, const choir_whisper_specials *sp,
                                      const float *matrix, int n_frames, const float *probs,
                                      double time_offset, double *last_speech_end, choir_whisper_word_segment *segs,
                                      int n_segs, const choir_whisper_word_opts *opts, choir_err *err) {
    static const choir_whisper_word_opts defaults = {0};
    if (!opts) opts = &defaults;
    for (int s = 0; s < n_segs; s++) {
        segs[s].words = NULL;
        segs[s].n_words = 0;
    }
    if (n_segs == 0) return 0;
    /* the text tokens of all segments, then <|endoftext|> */
    int n_text = 0;
    for (int s = 0; s < n_segs; s++)
        for (int k = 0; k < segs[s].n_tokens; k++) n_text += segs[s].tokens[k] < sp->eot;
    if (n_text == 0) return 0;
    int32_t *text = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n_text + 1) * sizeof *text);
    if (!text) return choir_err_set(err, CHOIR_ENOMEM, "word timestamps: out of memory");
    int *seg_text = choir_alloc(CHOIR_MEM_OTHER, (size_t)n_segs * sizeof *seg_text);
    if (!seg_text) {
        choir_free(text);
        return choir_err_set(err, CHOIR_ENOMEM, "word timestamps: out of memory");
    }
    int t = 0;
    for (int s = 0; s < n_segs; s++) {
        seg_text[s] = 0;
        for (int k = 0; k < segs[s].n_tokens; k++)
            if (segs[s].tokens[k] < sp->eot) {
                text[t++] = segs[s].tokens[k];
                seg_text[s]++;
            }
    }
    text[t] = sp->eot;
    choir_whisper_word *w = NULL;
    int nw = 0;
    int rc = choir_whisper_split_words(tok, sp, text, n_text + 1, opts->by_unicode, &w, &nw, err);
    /* the words without the closing <|endoftext|> */
    int n_words = nw - 1;
    if (!rc && n_words >= 1) rc = word_times(matrix, n_text + 1, n_frames, probs, w, n_words, err);
    double median = 0, max_dur = 0;
    if (!rc && n_words >= 1) {
        double *dur = choir_alloc(CHOIR_MEM_OTHER, (size_t)n_words * sizeof *dur);
        if (!dur) rc = choir_err_set(err, CHOIR_ENOMEM, "word timestamps: out of memory");
        int nd = 0;
        for (int i = 0; dur && i < n_words; i++)
            if (w[i].end - w[i].start != 0) dur[nd++] = w[i].end - w[i].start;
        if (nd > 0) {
            qsort(dur, (size_t)nd, sizeof *dur, cmp_double);
            median = nd % 2 ? dur[nd / 2] : (dur[nd / 2 - 1] + dur[nd / 2]) / 2;
        }
        choir_free(dur);
        if (median > 0.7) median = 0.7;
        max_dur = median * 2;
        /* openai's "hack": words at sentence boundaries are held to twice the
         * median word duration */
        static const char ends[] = ".\xe3\x80\x82!\xef\xbc\x81?\xef\xbc\x9f";
        for (int i = 1; nd > 0 && i < n_words; i++) {
            if (w[i].end - w[i].start <= max_dur) continue;
            if (py_in(w[i].text, strlen(w[i].text), ends))
                w[i].end = w[i].start + max_dur;
            else if (py_in(w[i - 1].text, strlen(w[i - 1].text), ends))
                w[i].start = w[i].end - max_dur;
        }
    }
    if (!rc && n_words >= 1) rc = choir_whisper_merge_punctuation(w, n_words, opts->prepend, opts->append, err);
    /* hand the words to their segments */
    for (int s = 0, wi = 0; !rc && n_words >= 1 && s < n_segs; s++) {
        choir_whisper_word_segment *g = &segs[s];
        g->words = choir_calloc(CHOIR_MEM_OTHER, (size_t)n_words, sizeof *g->words);
        if (!g->words) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "word timestamps: out of memory");
            break;
        }
        for (int saved = 0; wi < n_words && saved < seg_text[s]; wi++) {
            choir_whisper_word *x = &w[wi];
            saved += x->n_tokens;
            if (!x->text[0]) continue;
            choir_whisper_word *o = &g->words[g->n_words++];
            *o = *x;
            o->start = py_round2(time_offset + x->start);
            o->end = py_round2(time_offset + x->end);
            x->text = NULL; /* moved */
            x->tokens = NULL;
        }
        if (g->n_words == 0) continue;
        choir_whisper_word *w0 = &g->words[0], *wl = &g->words[g->n_words - 1];
        /* the first and second word after a pause are held to twice the
         * median word duration */
        if (w0->end - *last_speech_end > median * 4 &&
            (w0->end - w0->start > max_dur || (g->n_words > 1 && g->words[1].end - w0->start > max_dur * 2))) {
            if (g->n_words > 1 && g->words[1].end - g->words[1].start > max_dur) {
                double boundary = fmax(g->words[1].end / 2, g->words[1].end - max_dur);
                w0->end = g->words[1].start = boundary;
            }
            w0->start = fmax(0, w0->end - max_dur);
        }
        /* the segment's own start wins over a first word that is too long */
        if (g->start < w0->end && g->start - 0.5 > w0->start)
            w0->start = fmax(0, fmin(w0->end - median, g->start));
        else
            g->start = w0->start;
        /* likewise at the end */
        if (g->end > wl->start && g->end + 0.5 < wl->end)
            wl->end = fmax(wl->start + median, g->end);
        else
            g->end = wl->end;
        *last_speech_end = g->end;

    }
    choir_whisper_words_free(w, nw);
    choir_free(text);
    choir_free(seg_text);
    if (rc) {
        for (int s = 0; s < n_segs; s++) {
            choir_whisper_words_free(segs[s].words, segs[s].n_words);
            segs[s].words = NULL;
            segs[s].n_words = 0;
        }
    }
    return rc;
}
