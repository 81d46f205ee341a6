/* Long audio: openai's sequential seek loop, and batched independent windows
 * (faster-whisper's / WhisperX's pipeline) over VAD spans or fixed windows.
 * ../shared/specs/whisper.md §7. */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/mel.h"
#include "choir/tokenizer.h"
#include "choir/whisper_words.h"
#include "models/whisper/whisper_internal.h"

#define WT_FRAMES_PER_S 100.0
#define WT_TIME_PRECISION 0.02
#define WT_INPUT_STRIDE 2 /* mel frames per output position */

typedef struct wt_state {
    const choir_whisper *m;
    const choir_tokenizer *tok;
    choir_whisper_transcript *out;
    int cap_segments;
    int32_t *all_tokens; /* initial prompt, then every segment's tokens */
    int n_all, cap_all;
    int n_initial;       /* tokens of the initial prompt */
    int input;           /* index of this recording in the call */
    int64_t seek;        /* mel frame where the window being split began */
    double last_speech;  /* word timestamps: where the last speech before this window ended (s) */
    const choir_whisper_transcribe_opts *opts;
    /* The call's batch memory (opts->arena) and, on the CPU, the batch
     * stream over it (whisper_internal.h); NULL: the counted allocator. */
    choir_arena *arena;
    choir_stream *bs;
} wt_state;

/* A buffer that lives as long as the call: from the arena when the call
 * has one (zeroed when asked), else counted. */
static void *wt_take(const wt_state *s, choir_mem_category cat, size_t bytes, bool zero) {
    void *p = s->arena ? choir_arena_alloc(s->arena, bytes ? bytes : 1) : choir_alloc(cat, bytes ? bytes : 1);
    if (p && zero) memset(p, 0, bytes);
    return p;
}

static void wt_give(const wt_state *s, void *p) {
    if (!s->arena) choir_free(p);
}

/* Scopes of the arena: a window round's caches and passes are given back
 * at its end. */
static size_t wt_mark(const wt_state *s) { return s->arena ? choir_arena_mark(s->arena) : 0; }
static void wt_release(const wt_state *s, size_t mark) {
    if (s->arena) choir_arena_release(s->arena, mark);
}

void choir_whisper_default_transcribe_opts(choir_whisper_transcribe_opts *o) {
    memset(o, 0, sizeof *o);
    choir_whisper_default_params(&o->params);
    o->condition_on_previous_text = true;
    o->batch_size = 1;
}

void choir_whisper_transcript_clear(choir_whisper_transcript *t) {
    if (!t) return;
    for (int i = 0; i < t->n_segments; i++) {
        choir_free(t->segments[i].text);
        choir_free(t->segments[i].tokens);
        for (int k = 0; k < t->segments[i].n_words; k++) choir_free((char *)t->segments[i].words[k].text);
        choir_free(t->segments[i].words);
    }
    choir_free(t->segments);
    choir_free(t->text);
    memset(t, 0, sizeof *t);
}

static int wt_oom(choir_err *err) {
    return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory in transcription");
}

static int wt_push_tokens(wt_state *s, const int32_t *t, int n, choir_err *err) {
    if (s->n_all + n > s->cap_all) {
        int cap = s->cap_all ? s->cap_all : 1024;
        while (cap < s->n_all + n) cap *= 2;
        int32_t *p = choir_realloc(s->all_tokens, (size_t)cap * sizeof *p);
        if (!p) return wt_oom(err);
        s->all_tokens = p;
        s->cap_all = cap;
    }
    memcpy(s->all_tokens + s->n_all, t, (size_t)n * sizeof *t);
    s->n_all += n;
    return 0;
}

static bool wt_blank(const char *s) {
    for (; *s; s++)
        if (!isspace((unsigned char)*s)) return false;
    return true;
}

/* Moves the words of `ws` into an array of choir_word (their texts
 * moved, their tokens freed); *out NULL when there are none. */
static int wt_take_words(choir_whisper_word_segment *ws, choir_word **out, choir_err *err) {
    *out = NULL;
    if (ws->n_words == 0) return 0;
    choir_word *w = choir_alloc(CHOIR_MEM_IO, (size_t)ws->n_words * sizeof *w);
    if (!w) return wt_oom(err);
    for (int k = 0; k < ws->n_words; k++) {
        choir_whisper_word *x = &ws->words[k];
        w[k] = (choir_word){.start_s = x->start, .end_s = x->end, .text = x->text, .probability = x->probability};
        x->text = NULL;
    }
    *out = w;
    return 0;
}

static void wt_free_words(choir_word *w, int n) {
    for (int k = 0; w && k < n; k++) choir_free((char *)w[k].text);
    choir_free(w);
}

/* Adds the segment tokens[0..n) from `start` to `end`, with its words (taken
 * from ws when not NULL). Instantaneous or textless segments are dropped
 * (openai keeps them with their text, tokens and words cleared, which
 * contributes nothing to the transcript or the prompt). */
static int wt_segment(wt_state *s, const choir_whisper_result *r, const int32_t *tokens, int n,
                      double start, double end, choir_whisper_word_segment *ws, choir_err *err) {
    char *text = NULL;
    choir_word *words = NULL;
    int n_words = ws ? ws->n_words : 0;
    int rc = choir_tokenizer_decode(s->tok, tokens, n, &text, NULL, err);
    if (rc) return rc;
    if (start == end || wt_blank(text)) {
        choir_free(text);
        return 0;
    }
    if (ws && (rc = wt_take_words(ws, &words, err))) {
        choir_free(text);
        return rc;
    }
    choir_whisper_transcript *t = s->out;
    /* A model may sample a timestamp past the audio in a padded window, or
     * before the previous segment's end: times stay in order and inside the
     * recording (the text is kept even when its span shrinks to nothing). */
    double floor_s = t->n_segments > 0 ? t->segments[t->n_segments - 1].end : 0.0;
    if (start > t->duration) start = t->duration;
    if (start < floor_s) start = floor_s;
    if (end > t->duration) end = t->duration;
    if (end < start) end = start;
    /* Words likewise: in order, after the previous segment, inside the audio. */
    for (int k = 0; k < n_words; k++) {
        choir_word *w = &words[k];
        double lo = k > 0 ? words[k - 1].end_s : floor_s;
        if (!(w->start_s >= lo)) w->start_s = lo;
        if (w->start_s > t->duration) w->start_s = t->duration;
        if (w->end_s > t->duration) w->end_s = t->duration;
        if (!(w->end_s >= w->start_s)) w->end_s = w->start_s;
    }
    if (t->n_segments == s->cap_segments) {
        int cap = s->cap_segments ? 2 * s->cap_segments : 32;
        choir_whisper_segment *p = choir_realloc(t->segments, (size_t)cap * sizeof *p);
        if (!p) {
            choir_free(text);
            wt_free_words(words, n_words);
            return wt_oom(err);
        }
        t->segments = p;
        s->cap_segments = cap;
    }
    choir_whisper_segment *g = &t->segments[t->n_segments];
    memset(g, 0, sizeof *g);
    g->tokens = choir_alloc(CHOIR_MEM_IO, (size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!g->tokens) {
        choir_free(text);
        wt_free_words(words, n_words);
        return wt_oom(err);
    }
    g->words = words;
    g->n_words = n_words;
    memcpy(g->tokens, tokens, (size_t)n * sizeof(int32_t));
    g->n_tokens = n;
    g->text = text;
    g->start = start;
    g->end = end;
    g->avg_logprob = r->avg_logprob;
    g->no_speech_prob = r->no_speech_prob;
    g->temperature = r->temperature;
    g->compression_ratio = r->compression_ratio;
    g->seek = s->seek;
    t->n_segments++;
    rc = wt_push_tokens(s, tokens, n, err);
    if (!rc && s->opts && s->opts->on_segment &&
        s->opts->on_segment(s->opts->segment_user, s->input, g) != 0)
        rc = choir_err_set(err, CHOIR_ECANCELED, "whisper: transcription cancelled");
    return rc;
}

/* openai's get_end: the end of the last word of the window's segments, or
 * of its last segment when none has words; false when there is no segment. */
static bool wt_window_end(const choir_whisper_word_segment *g, int n, double *end) {
    for (int i = n - 1; i >= 0; i--)
        if (g[i].n_words > 0) {
            *end = g[i].words[g[i].n_words - 1].end;
            return true;
        }
    if (n > 0) *end = g[n - 1].end;
    return n > 0;
}

/* Splits a window's tokens into segments at consecutive timestamp pairs
 * (openai's rule) and returns in *advance how many mel frames the seek moves.
 * In batched mode a trailing unfinished segment is kept up to the window's end
 * (nothing decodes that audio again). With word timestamps the window's
 * segments get their words from `cross` (the window's encoder K/V) before
 * they are added, and in sequential mode the seek moves to the last word's
 * end, as openai's transcribe does. */
static int wt_split(wt_state *s, const choir_whisper_result *r, const choir_whisper_cross *cross, double offset,
                    int seg_frames, bool batched, int *advance, choir_err *err) {
    int tb = s->m->sp.timestamp_begin, n = r->n_tokens;
    const int32_t *t = r->tokens;
    double seg_dur = seg_frames / WT_FRAMES_PER_S;
    bool single_ending = n >= 2 && t[n - 2] < tb && t[n - 1] >= tb;
    int last = 0, n_cons = 0, np = 0, rc = 0;
    /* The window's segments (openai's current_segments), as they come. */
    choir_whisper_word_segment *pg = choir_calloc(CHOIR_MEM_OTHER, (size_t)n + 1, sizeof *pg);
    if (!pg) return wt_oom(err);
    for (int i = 0; i + 1 < n; i++) {
        if (!(t[i] >= tb && t[i + 1] >= tb)) continue;
        int cut = i + 1;
        pg[np++] = (choir_whisper_word_segment){.start = offset + (t[last] - tb) * WT_TIME_PRECISION,
                                                .end = offset + (t[cut - 1] - tb) * WT_TIME_PRECISION,
                                                .tokens = t + last, .n_tokens = cut - last};
        last = cut;
        n_cons++;
    }
    if (n_cons > 0) {
        if (single_ending || (batched && last < n)) {
            double end = single_ending ? offset + (t[n - 1] - tb) * WT_TIME_PRECISION : offset + seg_dur;
            pg[np++] = (choir_whisper_word_segment){
                .start = offset + (t[last] >= tb ? (t[last] - tb) * WT_TIME_PRECISION : 0), .end = end,
                .tokens = t + last, .n_tokens = n - last};
            *advance = seg_frames;
        } else {
            *advance = (t[last - 1] - tb) * WT_INPUT_STRIDE;
        }
    } else {
        double dur = seg_dur;
        for (int i = n - 1; i >= 0; i--)
            if (t[i] >= tb) {
                if (t[i] != tb) dur = (t[i] - tb) * WT_TIME_PRECISION;
                break;
            }
        *advance = seg_frames;
        pg[np++] = (choir_whisper_word_segment){.start = offset, .end = offset + dur, .tokens = t, .n_tokens = n};
    }
    bool words = s->opts && s->opts->word_timestamps;
    if (words) {
        choir_whisper_word_opts wo = {
            .by_unicode = choir_whisper_lang_splits_by_unicode(choir_whisper_lang_code(r->language))};
        double speech = s->last_speech; /* openai passes it by value */
        rc = choir_whisper_window_words(s->m, s->tok, cross, r->language, s->opts->params.task, seg_frames, offset,
                                        &speech, pg, np, &wo, err);
        double end;
        if (!rc && !batched && !single_ending && wt_window_end(pg, np, &end) && end > offset)
            *advance = (int)(nearbyint(end * WT_FRAMES_PER_S) - (double)s->seek);
        if (!rc && wt_window_end(pg, np, &end)) s->last_speech = end;
    }
    for (int i = 0; i < np && !rc; i++)
        rc = wt_segment(s, r, pg[i].tokens, pg[i].n_tokens, pg[i].start, pg[i].end, words ? &pg[i] : NULL, err);
    for (int i = 0; i < np; i++) choir_whisper_words_free(pg[i].words, pg[i].n_words);
    choir_free(pg);
    return rc;
}

static bool wt_skip_silence(const choir_whisper_params *p, const choir_whisper_result *r) {
    return r->no_speech_prob > p->no_speech_threshold && !(r->avg_logprob > p->logprob_threshold);
}

static void wt_free_cross(choir_whisper_cross **cross, int n) {
    for (int i = 0; i < n; i++) {
        choir_whisper_cross_free(cross[i]);
        cross[i] = NULL;
    }
}

/* Encodes n windows, builds their cross caches and decodes them together.
 * The caches stay in cross[0..n) (word timestamps read them again); the
 * caller frees them with wt_free_cross, also on failure. */
static int wt_decode_batch(const wt_state *st, const float *mels, int n, float *enc,
                           choir_whisper_cross **cross, choir_whisper_window *w,
                           const choir_whisper_params *p, choir_whisper_result *res,
                           choir_err *err) {
    const choir_whisper *m = st->m;
    const choir_tokenizer *tok = st->tok;
    int rc = wh_encode_cross(m, st->bs, mels, n, enc, cross, err);
    for (int i = 0; i < n && !rc; i++) w[i].cross = cross[i];
    if (!rc) rc = choir_whisper_decode_fallback(m, tok, w, n, p, res, err);
    return rc;
}

/* One input of the seek loop: its whole log-mel and where the seek is. */
typedef struct wt_seek {
    float *mel;
    int64_t total, content, seek;
    int prompt_reset_since;
    int language;
    bool stopped; /* its caller cancelled it */
} wt_seek;

/* Polls opts->cancelled for input i; true when it is to stop. */
static bool wt_cancelled(const choir_whisper_transcribe_opts *o, int i) {
    return o->cancelled && o->cancelled(o->cancel_user, i) != 0;
}

/* openai's seek loop over n inputs in lockstep: each input moves through its
 * own windows exactly as it would alone (its own mel, prompt, seek and
 * seed), and the windows of one round are decoded together. So a request's
 * transcript does not depend on what it was batched with, and equals
 * choir_whisper_transcribe on the same samples. */
static int wt_sequential(wt_state *st, const choir_whisper_input *in, int n_in,
                         const choir_whisper_transcribe_opts *o, const choir_whisper_params *p,
                         int *langs, choir_err *err) {
    const choir_whisper *m = st[0].m;
    int n_mels = m->dims.n_mels, F = CHOIR_WHISPER_N_FRAMES;
    bool gpu = choir_whisper_on_gpu(m);
    const wt_state *s0 = &st[0];
    wt_seek *sk = wt_take(s0, CHOIR_MEM_OTHER, (size_t)n_in * sizeof *sk, true);
    float *win = wt_take(s0, CHOIR_MEM_ACTIVATIONS, (size_t)n_in * n_mels * F * sizeof(float), false);
    float *enc = gpu ? NULL
                     : wt_take(s0, CHOIR_MEM_ACTIVATIONS, (size_t)n_in * (size_t)m->dims.n_audio_ctx *
                                                              (size_t)m->dims.d_model * sizeof(float), false);
    choir_whisper_cross **cross = wt_take(s0, CHOIR_MEM_OTHER, (size_t)n_in * sizeof *cross, true);
    choir_whisper_window *w = wt_take(s0, CHOIR_MEM_OTHER, (size_t)n_in * sizeof *w, true);
    choir_whisper_result *res = wt_take(s0, CHOIR_MEM_OTHER, (size_t)n_in * sizeof *res, true);
    int *active = wt_take(s0, CHOIR_MEM_OTHER, (size_t)n_in * sizeof *active, false);
    int rc = (!sk || !win || (!enc && !gpu) || !cross || !w || !res || !active) ? wt_oom(err) : 0;
    for (int i = 0; i < n_in && !rc; i++) {
        wt_seek *q = &sk[i];
        rc = choir_whisper_log_mel_full(in[i].pcm, in[i].n_samples, CHOIR_WHISPER_N_SAMPLES, n_mels, &q->mel,
                                        &q->total, err);
        if (rc) break;
        q->content = q->total - F;
        q->language = langs[i];
        if (q->language < 0 && m->sp.multilingual) {
            /* openai detects on the first 30 s of the padded mel. */
            choir_whisper_mel_window(q->mel, n_mels, q->total, 0, F, win);
            size_t mark = wt_mark(s0);
            if ((rc = wh_encode_cross(m, s0->bs, win, 1, enc, cross, err))) {
                choir_whisper_cross_free(cross[0]);
                cross[0] = NULL;
                wt_release(s0, mark);
                break;
            }
            rc = choir_whisper_detect_language(m, cross[0], &q->language, NULL, err);
            choir_whisper_cross_free(cross[0]);
            cross[0] = NULL;
            wt_release(s0, mark);
        }
        langs[i] = q->language;
    }
    for (;;) {
        int na = 0, n_stopped = 0;
        for (int i = 0; i < n_in && !rc; i++) {
            if (!sk[i].stopped && sk[i].seek < sk[i].content && wt_cancelled(o, i)) sk[i].stopped = true;
            n_stopped += sk[i].stopped;
            if (!sk[i].stopped && sk[i].seek < sk[i].content) active[na++] = i;
        }
        if (!rc && n_stopped == n_in) rc = choir_err_set(err, CHOIR_ECANCELED, "whisper: transcription cancelled");
        if (rc || na == 0) break;
        for (int j = 0; j < na; j++) {
            wt_seek *q = &sk[active[j]];
            wt_state *s = &st[active[j]];
            int seg = (int)(q->content - q->seek < F ? q->content - q->seek : F);
            /* The window holds seg frames of the file; the rest is 0.0, as
             * openai's pad_or_trim of mel[:, seek:seek+seg]. */
            float *wj = win + (size_t)j * n_mels * F;
            for (int b = 0; b < n_mels; b++) {
                memcpy(wj + (size_t)b * F, q->mel + (size_t)b * (size_t)q->total + q->seek,
                       (size_t)seg * sizeof(float));
                memset(wj + (size_t)b * F + seg, 0, (size_t)(F - seg) * sizeof(float));
            }
            w[j] = (choir_whisper_window){.prompt = s->all_tokens + q->prompt_reset_since,
                                         .n_prompt = s->n_all - q->prompt_reset_since,
                                         .language = q->language, .seed = (uint64_t)q->seek};
        }
        size_t mark = wt_mark(s0);
        if ((rc = wt_decode_batch(s0, win, na, enc, cross, w, p, res, err))) {
            wt_free_cross(cross, na);
            wt_release(s0, mark);
            break;
        }
        for (int j = 0; j < na; j++) {
            wt_seek *q = &sk[active[j]];
            wt_state *s = &st[active[j]];
            int seg = (int)(q->content - q->seek < F ? q->content - q->seek : F), advance = seg;
            if (!rc && !wt_skip_silence(p, &res[j])) {
                s->seek = q->seek;
                rc = wt_split(s, &res[j], cross[j], (double)q->seek / WT_FRAMES_PER_S, seg, false, &advance, err);
                if (!o->condition_on_previous_text || res[j].temperature > 0.5f) q->prompt_reset_since = s->n_all;
            }
            choir_whisper_result_clear(&res[j]);
            /* A window whose only timestamp pair is <|0.00|><|0.00|> must still move on. */
            q->seek += advance > 0 ? advance : seg;
        }
        wt_free_cross(cross, na);
        wt_release(s0, mark);
        if (!rc && o->progress && n_in == 1)
            o->progress(o->progress_user,
                        (double)(sk[0].seek < sk[0].content ? sk[0].seek : sk[0].content) / WT_FRAMES_PER_S,
                        (double)sk[0].content / WT_FRAMES_PER_S);
    }
    for (int i = 0; sk && i < n_in; i++) choir_free(sk[i].mel);
    wt_give(s0, sk);
    wt_give(s0, win);
    wt_give(s0, enc);
    wt_give(s0, cross);
    wt_give(s0, w);
    wt_give(s0, res);
    wt_give(s0, active);
    return rc;
}

/* One window of the batched pipeline: a span of one input. */
typedef struct wt_item {
    int input;
    choir_whisper_span span;
} wt_item;

/* Spans of one input: the caller's, cut into pieces of at most 30 s and
 * merged with their neighbours, gap included, while the result stays within
 * 30 s (WhisperX's merge: short utterances share a window and its context);
 * or consecutive 30-s windows. Appends to items; returns the new count. */
static int64_t wt_spans(int input, int64_t n_samples, const choir_whisper_span *spans, int n_spans,
                        wt_item *items, int64_t k) {
    const int64_t N = CHOIR_WHISPER_N_SAMPLES;
    int64_t first = k;
    if (!spans) {
        for (int64_t a = 0; a < n_samples; a += N)
            items[k++] = (wt_item){input, {a, a + N < n_samples ? a + N : n_samples}};
        return k;
    }
    for (int i = 0; i < n_spans; i++)
        for (int64_t a = spans[i].start; a < spans[i].end; a += N) {
            int64_t lo = a < 0 ? 0 : a, hi = a + N < spans[i].end ? a + N : spans[i].end;
            if (hi > n_samples) hi = n_samples;
            if (hi <= lo) continue;
            choir_whisper_span *last = k > first ? &items[k - 1].span : NULL;
            if (last && lo >= last->end && hi - last->start <= N) last->end = hi;
            else items[k++] = (wt_item){input, {lo, hi}};
        }
    return k;
}

static int64_t wt_count_spans(int64_t n_samples, const choir_whisper_span *spans, int n_spans) {
    const int64_t N = CHOIR_WHISPER_N_SAMPLES;
    int64_t c = 0;
    if (!spans) return (n_samples + N - 1) / N;
    for (int i = 0; i < n_spans; i++)
        if (spans[i].end > spans[i].start) c += (spans[i].end - spans[i].start + N - 1) / N;
    return c;
}

/* The log-mel of one item as its own 30-s example (HF short-form features). */
static int wt_item_mel(const choir_whisper_input *in, const wt_item *it, int n_mels, float *chunk,
                       float *mel, choir_err *err) {
    const int64_t N = CHOIR_WHISPER_N_SAMPLES;
    memset(chunk, 0, (size_t)N * sizeof(float));
    memcpy(chunk, in->pcm + it->span.start, (size_t)(it->span.end - it->span.start) * sizeof(float));
    return choir_whisper_log_mel(chunk, N, n_mels, mel, CHOIR_WHISPER_N_FRAMES, err);
}

/* The log-mels of the next batch's items, computed on a thread of their own
 * while the device encodes and decodes the current batch (on a GPU the host
 * would otherwise wait for them: a few ms a window). `items` is a copy, so
 * the batch taken next can be checked against what was computed. */
typedef struct {
    const choir_whisper_input *in;
    wt_item *items; /* B of them */
    int n, n_mels, rc;
    float *chunk, *mels;
    choir_err err;
} wt_prefetch;

static void wt_prefetch_main(void *arg) {
    wt_prefetch *pf = arg;
    pf->rc = 0;
    for (int j = 0; j < pf->n && !pf->rc; j++)
        pf->rc = wt_item_mel(&pf->in[pf->items[j].input], &pf->items[j], pf->n_mels, pf->chunk,
                             pf->mels + (size_t)j * pf->n_mels * CHOIR_WHISPER_N_FRAMES, &pf->err);
}

/* Whether the prefetched mels are those of items[0..n). */
static bool wt_prefetch_matches(const wt_prefetch *pf, const wt_item *items, int n) {
    if (pf->rc || pf->n != n) return false;
    for (int j = 0; j < n; j++)
        if (pf->items[j].input != items[j].input || pf->items[j].span.start != items[j].span.start ||
            pf->items[j].span.end != items[j].span.end)
            return false;
    return true;
}

/* The batched pipeline over the windows of several inputs: batch_size
 * windows (from any inputs) are encoded and decoded together; each window's
 * segments go to its own input's transcript. */
static int wt_batched(wt_state *st, const choir_whisper_input *in, int n_in,
                      const choir_whisper_transcribe_opts *o, const choir_whisper_params *p,
                      int *langs, choir_err *err) {
    const choir_whisper *m = st[0].m;
    int n_mels = m->dims.n_mels, F = CHOIR_WHISPER_N_FRAMES, B = o->batch_size > 0 ? o->batch_size : 1;
    int64_t n_items = 0, done_samples = 0, total_samples = 0;
    for (int i = 0; i < n_in; i++) {
        n_items += wt_count_spans(in[i].n_samples, n_in == 1 ? o->spans : NULL, o->n_spans);
        total_samples += in[i].n_samples;
    }
    const wt_state *s0 = &st[0];
    wt_item *items = wt_take(s0, CHOIR_MEM_OTHER, (size_t)(n_items + 1) * sizeof *items, false);
    float *mels = wt_take(s0, CHOIR_MEM_ACTIVATIONS, (size_t)B * (size_t)n_mels * F * sizeof(float), false);
    float *chunk = wt_take(s0, CHOIR_MEM_ACTIVATIONS, (size_t)CHOIR_WHISPER_N_SAMPLES * sizeof(float), false);
    /* On a GPU the encoder output stays on the device: no host copy. */
    bool gpu = choir_whisper_on_gpu(m);
    float *enc = gpu ? NULL
                     : wt_take(s0, CHOIR_MEM_ACTIVATIONS, (size_t)B * (size_t)m->dims.n_audio_ctx *
                                                              (size_t)m->dims.d_model * sizeof(float), false);
    choir_whisper_cross **cross = wt_take(s0, CHOIR_MEM_OTHER, (size_t)B * sizeof *cross, true);
    choir_whisper_window *w = wt_take(s0, CHOIR_MEM_OTHER, (size_t)B * sizeof *w, true);
    choir_whisper_result *res = wt_take(s0, CHOIR_MEM_OTHER, (size_t)B * sizeof *res, true);
    /* On a GPU (opts.prefetch_mels), a second set of mels for the batch
     * after the current one (none when it does not fit: the mels are then
     * computed in turn). */
    wt_prefetch *pf = NULL;
    bool prefetch = o->prefetch_mels > 0 || (o->prefetch_mels == 0 && gpu);
    if (prefetch && B > 1 && (pf = wt_take(s0, CHOIR_MEM_OTHER, sizeof *pf, true))) {
        pf->in = in;
        pf->n_mels = n_mels;
        pf->mels = wt_take(s0, CHOIR_MEM_ACTIVATIONS, (size_t)B * (size_t)n_mels * F * sizeof(float), false);
        pf->chunk = wt_take(s0, CHOIR_MEM_ACTIVATIONS, (size_t)CHOIR_WHISPER_N_SAMPLES * sizeof(float), false);
        pf->items = wt_take(s0, CHOIR_MEM_OTHER, (size_t)B * sizeof *pf->items, false);
        if (!pf->mels || !pf->chunk || !pf->items) {
            wt_give(s0, pf->mels);
            wt_give(s0, pf->chunk);
            wt_give(s0, pf->items);
            wt_give(s0, pf);
            pf = NULL;
        }
    }
    int rc = 0;
    if (!items || !mels || !chunk || (!enc && !gpu) || !cross || !w || !res) {
        rc = wt_oom(err);
        goto done;
    }
    int64_t k = 0;
    for (int i = 0; i < n_in; i++)
        k = wt_spans(i, in[i].n_samples, n_in == 1 ? o->spans : NULL, o->n_spans, items, k);
    n_items = k;
    /* Languages left open are detected once per input, on its first window. */
    for (int64_t a = 0; a < n_items && !rc; a++) {
        int i = items[a].input;
        if (langs[i] >= 0 || (a > 0 && items[a - 1].input == i)) continue;
        if (!m->sp.multilingual) {
            langs[i] = 0;
            continue;
        }
        if ((rc = wt_item_mel(&in[i], &items[a], n_mels, chunk, mels, err))) break;
        size_t mark = wt_mark(s0);
        if ((rc = wh_encode_cross(m, s0->bs, mels, 1, enc, cross, err))) {
            choir_whisper_cross_free(cross[0]);
            cross[0] = NULL;
            wt_release(s0, mark);
            break;
        }
        rc = choir_whisper_detect_language(m, cross[0], &langs[i], NULL, err);
        choir_whisper_cross_free(cross[0]);
        cross[0] = NULL;
        wt_release(s0, mark);
    }
    bool *stopped = wt_take(s0, CHOIR_MEM_OTHER, (size_t)n_in * sizeof *stopped, true);
    if (!stopped) rc = wt_oom(err);
    /* b0: the first item not yet decoded; items of inputs that stopped are
     * dropped from the list before each batch is taken. */
    int64_t b0 = 0;
    while (b0 < n_items && !rc) {
        int n_stopped = 0;
        for (int i = 0; i < n_in; i++) {
            if (!stopped[i] && wt_cancelled(o, i)) stopped[i] = true;
            n_stopped += stopped[i];
        }
        if (n_stopped == n_in) {
            rc = choir_err_set(err, CHOIR_ECANCELED, "whisper: transcription cancelled");
            break;
        }
        int64_t kept = b0;
        for (int64_t q = b0; q < n_items; q++)
            if (!stopped[items[q].input]) items[kept++] = items[q];
        n_items = kept;
        int nb = (int)(n_items - b0 < B ? n_items - b0 : B);
        if (nb == 0) break;
        bool ready = pf && wt_prefetch_matches(pf, &items[b0], nb);
        if (ready) {
            float *t = mels;
            mels = pf->mels;
            pf->mels = t;
        }
        for (int j = 0; j < nb && !rc; j++) {
            const wt_item *it = &items[b0 + j];
            if (!ready) rc = wt_item_mel(&in[it->input], it, n_mels, chunk, mels + (size_t)j * n_mels * F, err);
            wt_state *s = &st[it->input];
            w[j] = (choir_whisper_window){.language = langs[it->input], .seed = (uint64_t)it->span.start,
                                         .prompt = s->all_tokens, .n_prompt = s->n_initial};
        }
        /* The next batch's mels while the device works on this one; checked
         * against the items actually taken next (an input may stop). */
        choir_async *task = NULL;
        if (pf) {
            pf->n = 0;
            for (int64_t q = b0 + nb; q < n_items && pf->n < B; q++)
                if (!stopped[items[q].input]) pf->items[pf->n++] = items[q];
            pf->rc = -1;
            if (!rc && pf->n > 0) task = choir_async_start(wt_prefetch_main, pf);
        }
        size_t mark = wt_mark(s0);
        if (!rc) rc = wt_decode_batch(s0, mels, nb, enc, cross, w, p, res, err);
        choir_async_join(task);
        if (rc) {
            wt_free_cross(cross, nb);
            wt_release(s0, mark);
            break;
        }
        for (int j = 0; j < nb; j++) {
            const wt_item *it = &items[b0 + j];
            int adv;
            st[it->input].seek = it->span.start / 160;
            if (!rc && !wt_skip_silence(p, &res[j]))
                rc = wt_split(&st[it->input], &res[j], cross[j], (double)it->span.start / CHOIR_WHISPER_SAMPLE_RATE,
                              (int)((it->span.end - it->span.start + 159) / 160), true, &adv, err);
            choir_whisper_result_clear(&res[j]);
            done_samples += it->span.end - it->span.start;
        }
        wt_free_cross(cross, nb);
        wt_release(s0, mark);
        if (!rc && o->progress)
            o->progress(o->progress_user, (double)done_samples / CHOIR_WHISPER_SAMPLE_RATE,
                        (double)total_samples / CHOIR_WHISPER_SAMPLE_RATE);
        b0 += nb;
    }
    wt_give(s0, stopped);
done:
    if (pf) {
        wt_give(s0, pf->mels);
        wt_give(s0, pf->chunk);
        wt_give(s0, pf->items);
        wt_give(s0, pf);
    }
    wt_give(s0, items);
    wt_give(s0, mels);
    wt_give(s0, chunk);
    wt_give(s0, enc);
    wt_give(s0, cross);
    wt_give(s0, w);
    wt_give(s0, res);
    return rc;
}

/* encode(" " + prompt.strip()) into the state's tokens (they prompt the
 * first window and are left out of the final text). */
static int wt_initial_prompt(wt_state *s, const char *prompt, choir_err *err) {
    if (!prompt) return 0;
    while (isspace((unsigned char)*prompt)) prompt++;
    size_t len = strlen(prompt);
    while (len > 0 && isspace((unsigned char)prompt[len - 1])) len--;
    char *text = choir_alloc(CHOIR_MEM_OTHER, len + 2);
    int32_t *ids = NULL;
    int n = 0;
    if (!text) return wt_oom(err);
    text[0] = ' ';
    memcpy(text + 1, prompt, len);
    int rc = choir_tokenizer_encode(s->tok, text, len + 1, &ids, &n, err);
    choir_free(text);
    if (!rc) rc = wt_push_tokens(s, ids, n, err);
    choir_free(ids);
    s->n_initial = s->n_all;
    return rc;
}

int choir_whisper_transcribe_batch(const choir_whisper *m, const choir_tokenizer *tok,
                                   const choir_whisper_input *in, int n_in,
                                   const choir_whisper_transcribe_opts *o,
                                   choir_whisper_transcript *out, choir_err *err) {
    for (int i = 0; i < n_in; i++) memset(&out[i], 0, sizeof out[i]);
    if (!tok) return choir_err_set(err, CHOIR_EINVAL, "whisper: transcription needs a tokenizer");
    if (n_in <= 0) return 0;
    if (o->spans && n_in != 1)
        return choir_err_set(err, CHOIR_EINVAL, "whisper: spans apply to a single input");
    if (o->word_timestamps && !o->params.timestamps)
        return choir_err_set(err, CHOIR_EINVAL, "whisper: word timestamps need timestamps");
    for (int i = 0; i < n_in; i++)
        if (in[i].n_samples < 0 || (in[i].n_samples > 0 && !in[i].pcm))
            return choir_err_set(err, CHOIR_EINVAL, "whisper: input %d has no samples", i);
    wt_state *st = choir_calloc(CHOIR_MEM_OTHER, (size_t)n_in, sizeof *st);
    int *langs = choir_alloc(CHOIR_MEM_OTHER, (size_t)n_in * sizeof *langs);
    int rc = (!st || !langs) ? wt_oom(err) : 0;
    /* In the caller's arena: on the CPU one stream over it serves every
     * pass of the call, its kernel scratch carved once for the largest;
     * the arena is left as it was found. */
    choir_stream *bs = NULL;
    size_t arena_mark = o->arena ? choir_arena_mark(o->arena) : 0;
    if (!rc && o->arena && !choir_whisper_on_gpu(m)) {
        const choir_whisper_params *p = &o->params;
        int G = p->beam_size > p->best_of ? p->beam_size : p->best_of;
        int n_win = o->batched ? (o->batch_size > 0 ? o->batch_size : 1) : n_in;
        if (!(bs = choir_stream_create(m->net.be, err))) rc = wt_oom(err);
        else rc = choir_stream_use_arena(bs, o->arena, wh_batch_scratch_bytes(m, n_win, G), err);
    }
    for (int i = 0; i < n_in && !rc; i++) {
        st[i] = (wt_state){.m = m, .tok = tok, .out = &out[i], .input = i, .opts = o,
                           .arena = o->arena, .bs = bs};
        out[i].duration = (double)in[i].n_samples / CHOIR_WHISPER_SAMPLE_RATE;
        langs[i] = in[i].language >= 0 ? in[i].language : o->params.language;
        if (langs[i] >= m->sp.num_languages)
            rc = choir_err_set(err, CHOIR_EINVAL, "whisper: language index %d not in this model", langs[i]);
        else
            rc = wt_initial_prompt(&st[i], in[i].initial_prompt ? in[i].initial_prompt : o->initial_prompt, err);
    }
    if (!rc) {
        if (o->batched) {
            rc = wt_batched(st, in, n_in, o, &o->params, langs, err);
        } else {
            rc = wt_sequential(st, in, n_in, o, &o->params, langs, err);
        }
    }
    for (int i = 0; i < n_in && !rc; i++) {
        out[i].language = langs[i] < 0 ? 0 : langs[i];
        rc = choir_tokenizer_decode(tok, st[i].all_tokens + st[i].n_initial,
                                    st[i].n_all - st[i].n_initial, &out[i].text, NULL, err);
    }
    for (int i = 0; st && i < n_in; i++) {
        choir_free(st[i].all_tokens);
        if (rc) choir_whisper_transcript_clear(&out[i]);
    }
    choir_free(st);
    choir_free(langs);
    choir_stream_free(bs);
    if (o->arena) choir_arena_release(o->arena, arena_mark);
    return rc;
}

void choir_whisper_segment_views(const choir_whisper_transcript *t, choir_segment *out) {
    for (int i = 0; i < t->n_segments; i++) {
        const choir_whisper_segment *g = &t->segments[i];
        out[i] = (choir_segment){.start_s = g->start, .end_s = g->end, .text = g->text,
                                 .probability = expf(g->avg_logprob), .has_decoding = 1, .seek = g->seek,
                                 .tokens = g->tokens, .n_tokens = g->n_tokens, .temperature = g->temperature,
                                 .avg_logprob = g->avg_logprob, .compression_ratio = g->compression_ratio,
                                 .no_speech_prob = g->no_speech_prob, .words = g->words,
                                 .n_words = g->n_words};
    }
}

int choir_whisper_transcribe(const choir_whisper *m, const choir_tokenizer *tok, const float *pcm,
                             int64_t n, const choir_whisper_transcribe_opts *o,
                             choir_whisper_transcript *out, choir_err *err) {
    choir_whisper_input in = {.pcm = pcm, .n_samples = n, .language = -1};
    return choir_whisper_transcribe_batch(m, tok, &in, 1, o, out, err);
}
