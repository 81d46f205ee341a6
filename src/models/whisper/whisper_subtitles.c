/* Subtitle cues from word timestamps (choir/whisper_words.h), laid out as
 * openai/whisper's SubtitlesWriter.iterate_result lays them out, so that
 * `choir stt --word-timestamps --max-line-width N` cuts lines where
 * `whisper --word_timestamps True --max_line_width N` does. Lengths count
 * code points, as Python's len() does. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/whisper_words.h"

void choir_whisper_cues_free(choir_whisper_cue *c, int n) {
    if (!c) return;
    for (int i = 0; i < n; i++) choir_free(c[i].text);
    choir_free(c);
}

static int utf8_len(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* ASCII whitespace is what Whisper's words carry at their edges (a leading
 * space); Python's strip() would also remove Unicode spaces, which tokens
 * starting a word do not hold. */
static bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || c == '\x1c' || c == '\x1d' ||
                                      c == '\x1e' || c == '\x1f'; }

/* One word of a cue, as openai keeps it: the text after stripping or a
 * line break, and its times. */
typedef struct cue_word {
    const char *text; /* into the segment's word, after `skip` leading spaces */
    size_t len;
    bool newline;     /* starts a new line ("\n" + word) */
    double start, end;
} cue_word;

typedef struct builder {
    choir_whisper_cue *cues;
    int n, cap;
    int rc;
} builder;

static void add_cue(builder *b, double start, double end, const cue_word *w, int nw, int underline) {
    if (b->rc) return;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        choir_whisper_cue *g = choir_realloc(b->cues, (size_t)cap * sizeof *g);
        if (!g) {
            b->rc = CHOIR_ENOMEM;
            return;
        }
        b->cues = g;
        b->cap = cap;
    }
    size_t len = 1;
    for (int i = 0; i < nw; i++) len += w[i].len + 1 + 7;
    char *t = choir_alloc(CHOIR_MEM_OTHER, len);
    if (!t) {
        b->rc = CHOIR_ENOMEM;
        return;
    }
    size_t k = 0;
    for (int i = 0; i < nw; i++) {
        if (w[i].newline) t[k++] = '\n';
        const char *p = w[i].text;
        size_t n = w[i].len;
        if (i == underline) {
            /* re.sub(r"^(\s*)(.*)$", r"\1<u>\2</u>"): spaces stay outside */
            size_t sp = 0;
            while (sp < n && is_space(p[sp])) sp++;
            memcpy(t + k, p, sp);
            k += sp;
            memcpy(t + k, "<u>", 3);
            k += 3;
            memcpy(t + k, p + sp, n - sp);
            k += n - sp;
            memcpy(t + k, "</u>", 4);
            k += 4;
        } else {
            memcpy(t + k, p, n);
            k += n;
        }
    }
    t[k] = 0;
    b->cues[b->n++] = (choir_whisper_cue){start, end, t};
}

/* Python's round(seconds * 1000): what openai compares formatted times by. */
static double ms(double s) { return nearbyint(s * 1000.0); }

static void emit_subtitle(builder *b, const cue_word *w, int nw, bool highlight) {
    if (nw == 0) return;
    if (!highlight) {
        add_cue(b, w[0].start, w[nw - 1].end, w, nw, -1);
        return;
    }
    double last = w[0].start;
    for (int i = 0; i < nw; i++) {
        if (ms(last) != ms(w[i].start)) add_cue(b, last, w[i].start, w, nw, -1);
        add_cue(b, w[i].start, w[i].end, w, nw, i);
        last = w[i].end;
    }
}

int choir_whisper_subtitles(const choir_whisper_word_segment *segs, int n_segs,
                            const choir_whisper_subtitle_opts *opts, choir_whisper_cue **out, int *n_out,
                            choir_err *err) {
    static const choir_whisper_subtitle_opts none = {0};
    if (!opts) opts = &none;
    *out = NULL;
    *n_out = 0;
    int total = 0;
    for (int s = 0; s < n_segs; s++) total += segs[s].n_words;
    builder b = {0};
    cue_word *cur = choir_alloc(CHOIR_MEM_OTHER, (size_t)(total ? total : 1) * sizeof *cur);
    if (!cur) return choir_err_set(err, CHOIR_ENOMEM, "subtitles: out of memory");
    bool preserve = opts->max_line_count <= 0 || opts->max_line_width <= 0;
    int width = opts->max_line_width > 0 ? opts->max_line_width : 1000;
    int per_line = opts->max_words_per_line > 0 ? opts->max_words_per_line : 1000;
    int line_len = 0, line_count = 1, n = 0;
    /* get_start: the first word's start, else the first segment's */
    double last = n_segs ? segs[0].start : 0;
    for (int s = 0, found = 0; s < n_segs && !found; s++)
        if (segs[s].n_words) {
            last = segs[s].words[0].start;
            found = 1;
        }
    for (int s = 0; s < n_segs; s++) {
        const choir_whisper_word_segment *g = &segs[s];
        for (int chunk = 0; chunk < g->n_words; chunk += per_line) {
            int count = per_line < g->n_words - chunk ? per_line : g->n_words - chunk;
            for (int i = 0; i < count; i++) {
                const choir_whisper_word *w = &g->words[chunk + i];
                cue_word cw = {w->text, strlen(w->text), false, w->start, w->end};
                int wl = utf8_len(w->text);
                bool long_pause = !preserve && w->start - last > 3.0;
                bool has_room = line_len + wl <= width;
                bool seg_break = i == 0 && n > 0 && preserve;
                if (line_len > 0 && has_room && !long_pause && !seg_break) {
                    line_len += wl;
                } else {
                    while (cw.len && is_space(cw.text[0])) cw.text++, cw.len--;
                    while (cw.len && is_space(cw.text[cw.len - 1])) cw.len--;
                    if ((n > 0 && opts->max_line_count > 0 && (long_pause || line_count >= opts->max_line_count)) ||
                        seg_break) {
                        emit_subtitle(&b, cur, n, opts->highlight_words);
                        n = 0;
                        line_count = 1;
                    } else if (line_len > 0) {
                        line_count++;
                        cw.newline = true;
                    }
                    line_len = 0;
                    for (size_t k = 0; k < cw.len; k++) line_len += ((unsigned char)cw.text[k] & 0xC0) != 0x80;
                }
                cur[n++] = cw;
                last = w->start;
            }
        }
    }
    emit_subtitle(&b, cur, n, opts->highlight_words);
    choir_free(cur);
    if (b.rc) {
        choir_whisper_cues_free(b.cues, b.n);
        return choir_err_set(err, CHOIR_ENOMEM, "subtitles: out of memory");
    }
    *out = b.cues;
    *n_out = b.n;
    return 0;
}

int choir_whisper_transcript_cues(const choir_whisper_transcript *t, const choir_whisper_subtitle_opts *opts,
                                  choir_whisper_cue **out, int *n_out, choir_err *err) {
    *out = NULL;
    *n_out = 0;
    int n = t->n_segments, n_words = 0;
    for (int s = 0; s < n; s++) n_words += t->segments[s].n_words;
    /* word segments borrowing the transcript's words (texts read only) */
    choir_whisper_word_segment *segs = choir_calloc(CHOIR_MEM_OTHER, (size_t)n + 1, sizeof *segs);
    choir_whisper_word *words = choir_calloc(CHOIR_MEM_OTHER, (size_t)n_words + 1, sizeof *words);
    int rc = 0;
    if (!segs || !words) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "subtitles: out of memory");
    } else {
        for (int s = 0, k = 0; s < n; s++) {
            const choir_whisper_segment *g = &t->segments[s];
            segs[s] = (choir_whisper_word_segment){.start = g->start, .end = g->end, .tokens = g->tokens,
                                                   .n_tokens = g->n_tokens, .words = words + k,
                                                   .n_words = g->n_words};
            for (int i = 0; i < g->n_words; i++, k++)
                words[k] = (choir_whisper_word){.text = (char *)g->words[i].text, .start = g->words[i].start_s,
                                                .end = g->words[i].end_s, .probability = g->words[i].probability};
        }
        rc = choir_whisper_subtitles(segs, n, opts, out, n_out, err);
    }
    choir_free(segs);
    choir_free(words);
    return rc;
}
