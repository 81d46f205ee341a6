/* Long audio: openai's sequential seek loop, and batched independent windows
 * (faster-whisper's / WhisperX's pipeline) over VAD spans or fixed windows.
 * ../shared/specs/whisper.md §7. */
#include <ctype.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/mel.h"
#include "choir/tokenizer.h"
#include "models/whisper/whisper_internal.h"

#define WT_FRAMES_PER_S 100.0
#define WT_TIME_PRECISION 0.02
#define WT_INPUT_STRIDE 2 /* mel frames per output position */

typedef struct wt_state {
    const choir_whisper *m;
    const choir_tokenizer *tok;
    choir_whisper_transcript *out;
    int cap_segments;
    int32_t *all_tokens; /* every segment's tokens, the prompt source */
    int n_all, cap_all;
} wt_state;

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

/* Adds the segment tokens[0..n) from `start` to `end`. Instantaneous or
 * textless segments are dropped (openai keeps them with their text cleared,
 * which contributes nothing to the transcript or the prompt). */
static int wt_segment(wt_state *s, const choir_whisper_result *r, const int32_t *tokens, int n,
                      double start, double end, choir_err *err) {
    char *text = NULL;
    int rc = choir_tokenizer_decode(s->tok, tokens, n, &text, NULL, err);
    if (rc) return rc;
    if (start == end || wt_blank(text)) {
        choir_free(text);
        return 0;
    }
    choir_whisper_transcript *t = s->out;
    if (t->n_segments == s->cap_segments) {
        int cap = s->cap_segments ? 2 * s->cap_segments : 32;
        choir_whisper_segment *p = choir_realloc(t->segments, (size_t)cap * sizeof *p);
        if (!p) {
            choir_free(text);
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
        return wt_oom(err);
    }
    memcpy(g->tokens, tokens, (size_t)n * sizeof(int32_t));
    g->n_tokens = n;
    g->text = text;
    g->start = start;
    g->end = end;
    g->avg_logprob = r->avg_logprob;
    g->no_speech_prob = r->no_speech_prob;
    g->temperature = r->temperature;
    g->compression_ratio = r->compression_ratio;
    t->n_segments++;
    return wt_push_tokens(s, tokens, n, err);
}

/* Splits a window's tokens into segments at consecutive timestamp pairs
 * (openai's rule) and returns in *advance how many mel frames the seek moves.
 * In batched mode a trailing unfinished segment is kept up to the window's end
 * (nothing decodes that audio again). */
static int wt_split(wt_state *s, const choir_whisper_result *r, double offset, int seg_frames,
                    bool batched, int *advance, choir_err *err) {
    int tb = s->m->sp.timestamp_begin, n = r->n_tokens;
    const int32_t *t = r->tokens;
    double seg_dur = seg_frames / WT_FRAMES_PER_S;
    bool single_ending = n >= 2 && t[n - 2] < tb && t[n - 1] >= tb;
    int last = 0, n_cons = 0, rc;
    for (int i = 0; i + 1 < n; i++) {
        if (!(t[i] >= tb && t[i + 1] >= tb)) continue;
        int cut = i + 1;
        rc = wt_segment(s, r, t + last, cut - last, offset + (t[last] - tb) * WT_TIME_PRECISION,
                        offset + (t[cut - 1] - tb) * WT_TIME_PRECISION, err);
        if (rc) return rc;
        last = cut;
        n_cons++;
    }
    if (n_cons > 0) {
        if (single_ending || (batched && last < n)) {
            double end = single_ending ? offset + (t[n - 1] - tb) * WT_TIME_PRECISION : offset + seg_dur;
            rc = wt_segment(s, r, t + last, n - last,
                            offset + (t[last] >= tb ? (t[last] - tb) * WT_TIME_PRECISION : 0), end, err);
            if (rc) return rc;
            *advance = seg_frames;
        } else {
            *advance = (t[last - 1] - tb) * WT_INPUT_STRIDE;
        }
        return 0;
    }
    double dur = seg_dur;
    for (int i = n - 1; i >= 0; i--)
        if (t[i] >= tb) {
            if (t[i] != tb) dur = (t[i] - tb) * WT_TIME_PRECISION;
            break;
        }
    *advance = seg_frames;
    return wt_segment(s, r, t, n, offset, offset + dur, err);
}

static bool wt_skip_silence(const choir_whisper_params *p, const choir_whisper_result *r) {
    return r->no_speech_prob > p->no_speech_threshold && !(r->avg_logprob > p->logprob_threshold);
}

/* Encodes n windows, builds their cross caches and decodes them together. */
static int wt_decode_batch(const choir_whisper *m, const choir_tokenizer *tok, const float *mels,
                           int n, float *enc, choir_whisper_cross **cross,
                           choir_whisper_window *w, const choir_whisper_params *p,
                           choir_whisper_result *res, choir_err *err) {
    size_t enc_one = (size_t)m->dims.n_audio_ctx * (size_t)m->dims.d_model;
    int rc = choir_whisper_encode(m, mels, n, enc, err);
    for (int i = 0; i < n && !rc; i++) {
        if (!(cross[i] = choir_whisper_cross_create(m, enc + (size_t)i * enc_one, err))) rc = err ? err->code : CHOIR_ENOMEM;
        else w[i].cross = cross[i];
    }
    if (!rc) rc = choir_whisper_decode_fallback(m, tok, w, n, p, res, err);
    for (int i = 0; i < n; i++) {
        choir_whisper_cross_free(cross[i]);
        cross[i] = NULL;
    }
    return rc;
}

static int wt_sequential(wt_state *s, const float *pcm, int64_t n_samples,
                         const choir_whisper_transcribe_opts *o, choir_whisper_params *p,
                         int n_initial, choir_err *err) {
    const choir_whisper *m = s->m;
    int n_mels = m->dims.n_mels, F = CHOIR_WHISPER_N_FRAMES;
    float *mel = NULL, *win = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n_mels * F * sizeof(float));
    float *enc = choir_alloc(CHOIR_MEM_ACTIVATIONS,
                             (size_t)m->dims.n_audio_ctx * (size_t)m->dims.d_model * sizeof(float));
    choir_whisper_cross *cross = NULL;
    int64_t total = 0;
    int rc = (!win || !enc) ? wt_oom(err)
                            : choir_whisper_log_mel_full(pcm, n_samples, CHOIR_WHISPER_N_SAMPLES,
                                                         n_mels, &mel, &total, err);
    if (rc) goto done;
    int64_t content = total - F, seek = 0;
    int prompt_reset_since = 0;
    if (p->language < 0 && m->sp.multilingual) {
        /* openai detects on the first 30 s of the padded mel. */
        choir_whisper_mel_window(mel, n_mels, total, 0, F, win);
        if ((rc = choir_whisper_encode(m, win, 1, enc, err))) goto done;
        if (!(cross = choir_whisper_cross_create(m, enc, err))) goto fail_code;
        rc = choir_whisper_detect_language(m, cross, &p->language, NULL, err);
        choir_whisper_cross_free(cross);
        cross = NULL;
        if (rc) goto done;
    }
    s->out->language = p->language < 0 ? 0 : p->language;
    while (seek < content) {
        int seg = (int)(content - seek < F ? content - seek : F);
        /* The window holds seg frames of the file; the rest is 0.0, as openai's
         * pad_or_trim of mel[:, seek:seek+seg]. */
        for (int b = 0; b < n_mels; b++) {
            memcpy(win + (size_t)b * F, mel + (size_t)b * (size_t)total + seek, (size_t)seg * sizeof(float));
            memset(win + (size_t)b * F + seg, 0, (size_t)(F - seg) * sizeof(float));
        }
        choir_whisper_window w = {.prompt = s->all_tokens + prompt_reset_since,
                                  .n_prompt = s->n_all - prompt_reset_since,
                                  .language = p->language, .seed = (uint64_t)seek};
        choir_whisper_result r = {0};
        if ((rc = wt_decode_batch(m, s->tok, win, 1, enc, &cross, &w, p, &r, err))) goto done;
        int advance = seg;
        if (!wt_skip_silence(p, &r)) {
            rc = wt_split(s, &r, (double)seek / WT_FRAMES_PER_S, seg, false, &advance, err);
            if (!o->condition_on_previous_text || r.temperature > 0.5f) prompt_reset_since = s->n_all;
        }
        choir_whisper_result_clear(&r);
        if (rc) goto done;
        /* A window whose only timestamp pair is <|0.00|><|0.00|> must still move on. */
        seek += advance > 0 ? advance : seg;
        if (o->progress)
            o->progress(o->progress_user, (double)(seek < content ? seek : content) / WT_FRAMES_PER_S,
                        (double)content / WT_FRAMES_PER_S);
    }
    (void)n_initial;
    goto done;
fail_code:
    rc = err && err->code ? err->code : CHOIR_ENOMEM;
done:
    choir_free(mel);
    choir_free(win);
    choir_free(enc);
    return rc;
}

static int wt_batched(wt_state *s, const float *pcm, int64_t n_samples,
                      const choir_whisper_transcribe_opts *o, choir_whisper_params *p,
                      choir_err *err) {
    const choir_whisper *m = s->m;
    int n_mels = m->dims.n_mels, F = CHOIR_WHISPER_N_FRAMES, N = CHOIR_WHISPER_N_SAMPLES;
    int B = o->batch_size > 0 ? o->batch_size : 1;
    /* Spans: the caller's, cut into pieces of at most 30 s, or fixed windows. */
    int64_t n_spans = 0;
    if (o->spans)
        for (int i = 0; i < o->n_spans; i++) {
            int64_t len = o->spans[i].end - o->spans[i].start;
            if (len > 0) n_spans += (len + N - 1) / N;
        }
    else n_spans = (n_samples + N - 1) / N;
    choir_whisper_span *spans = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n_spans + 1) * sizeof *spans);
    float *mels = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)B * (size_t)n_mels * F * sizeof(float));
    float *chunk = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)N * sizeof(float));
    float *enc = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)B * (size_t)m->dims.n_audio_ctx *
                                                        (size_t)m->dims.d_model * sizeof(float));
    choir_whisper_cross **cross = choir_calloc(CHOIR_MEM_OTHER, (size_t)B, sizeof *cross);
    choir_whisper_window *w = choir_calloc(CHOIR_MEM_OTHER, (size_t)B, sizeof *w);
    choir_whisper_result *res = choir_calloc(CHOIR_MEM_OTHER, (size_t)B, sizeof *res);
    int rc = 0;
    if (!spans || !mels || !chunk || !enc || !cross || !w || !res) {
        rc = wt_oom(err);
        goto done;
    }
    int64_t k = 0;
    if (o->spans) {
        /* Pieces of at most 30 s; then neighbours are merged, gap included,
         * while the result stays within 30 s (WhisperX's merge), so that short
         * utterances share a window and keep their context. */
        for (int i = 0; i < o->n_spans; i++)
            for (int64_t a = o->spans[i].start; a < o->spans[i].end; a += N) {
                int64_t lo = a < 0 ? 0 : a, hi = a + N < o->spans[i].end ? a + N : o->spans[i].end;
                if (hi > n_samples) hi = n_samples;
                if (hi <= lo) continue;
                if (k > 0 && lo >= spans[k - 1].end && hi - spans[k - 1].start <= N) spans[k - 1].end = hi;
                else spans[k++] = (choir_whisper_span){lo, hi};
            }
    } else {
        for (int64_t a = 0; a < n_samples; a += N)
            spans[k++] = (choir_whisper_span){a, a + N < n_samples ? a + N : n_samples};
    }
    n_spans = k;
    double total_s = (double)n_samples / CHOIR_WHISPER_SAMPLE_RATE;
    for (int64_t b0 = 0; b0 < n_spans; b0 += B) {
        int nb = (int)(n_spans - b0 < B ? n_spans - b0 : B);
        for (int i = 0; i < nb; i++) {
            /* Each window is its own 30-s example (HF short-form features). */
            const choir_whisper_span *sp = &spans[b0 + i];
            memset(chunk, 0, (size_t)N * sizeof(float));
            memcpy(chunk, pcm + sp->start, (size_t)(sp->end - sp->start) * sizeof(float));
            if ((rc = choir_whisper_log_mel(chunk, N, n_mels, mels + (size_t)i * n_mels * F, F, err)))
                goto done;
        }
        if (b0 == 0 && p->language < 0 && m->sp.multilingual) {
            if ((rc = choir_whisper_encode(m, mels, 1, enc, err))) goto done;
            if (!(cross[0] = choir_whisper_cross_create(m, enc, err))) {
                rc = err && err->code ? err->code : CHOIR_ENOMEM;
                goto done;
            }
            rc = choir_whisper_detect_language(m, cross[0], &p->language, NULL, err);
            choir_whisper_cross_free(cross[0]);
            cross[0] = NULL;
            if (rc) goto done;
        }
        s->out->language = p->language < 0 ? 0 : p->language;
        for (int i = 0; i < nb; i++)
            w[i] = (choir_whisper_window){.language = p->language, .seed = (uint64_t)spans[b0 + i].start};
        if ((rc = wt_decode_batch(m, s->tok, mels, nb, enc, cross, w, p, res, err))) goto done;
        for (int i = 0; i < nb; i++) {
            const choir_whisper_span *sp = &spans[b0 + i];
            int adv;
            if (!rc && !wt_skip_silence(p, &res[i]))
                rc = wt_split(s, &res[i], (double)sp->start / CHOIR_WHISPER_SAMPLE_RATE,
                              (int)((sp->end - sp->start + 159) / 160), true, &adv, err);
            choir_whisper_result_clear(&res[i]);
        }
        if (rc) goto done;
        if (o->progress)
            o->progress(o->progress_user,
                        (double)spans[b0 + nb - 1].end / CHOIR_WHISPER_SAMPLE_RATE, total_s);
    }
done:
    choir_free(spans);
    choir_free(mels);
    choir_free(chunk);
    choir_free(enc);
    choir_free(cross);
    choir_free(w);
    choir_free(res);
    return rc;
}

int choir_whisper_transcribe(const choir_whisper *m, const choir_tokenizer *tok, const float *pcm,
                             int64_t n, const choir_whisper_transcribe_opts *o,
                             choir_whisper_transcript *out, choir_err *err) {
    memset(out, 0, sizeof *out);
    if (!tok) return choir_err_set(err, CHOIR_EINVAL, "whisper: transcription needs a tokenizer");
    if (n < 0) return choir_err_set(err, CHOIR_EINVAL, "whisper: negative sample count");
    wt_state s = {.m = m, .tok = tok, .out = out};
    choir_whisper_params p = o->params;
    out->duration = (double)n / CHOIR_WHISPER_SAMPLE_RATE;
    int rc = 0, n_initial = 0;
    if (o->initial_prompt && !o->batched) {
        /* encode(" " + initial_prompt.strip()) */
        const char *a = o->initial_prompt;
        while (isspace((unsigned char)*a)) a++;
        size_t len = strlen(a);
        while (len > 0 && isspace((unsigned char)a[len - 1])) len--;
        char *text = choir_alloc(CHOIR_MEM_OTHER, len + 2);
        int32_t *ids = NULL;
        if (!text) return wt_oom(err);
        text[0] = ' ';
        memcpy(text + 1, a, len);
        rc = choir_tokenizer_encode(tok, text, len + 1, &ids, &n_initial, err);
        choir_free(text);
        if (!rc) rc = wt_push_tokens(&s, ids, n_initial, err);
        choir_free(ids);
        if (rc) goto fail;
    }
    rc = o->batched ? wt_batched(&s, pcm, n, o, &p, err)
                    : wt_sequential(&s, pcm, n, o, &p, n_initial, err);
    if (rc) goto fail;
    rc = choir_tokenizer_decode(tok, s.all_tokens + n_initial, s.n_all - n_initial, &out->text,
                                NULL, err);
    if (rc) goto fail;
    choir_free(s.all_tokens);
    return 0;
fail:
    choir_free(s.all_tokens);
    choir_whisper_transcript_clear(out);
    return rc;
}
