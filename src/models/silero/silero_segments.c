/* Speech segments from per-chunk probabilities, with the rules of Silero's
 * get_speech_timestamps (v6) so that choir's segments match what users of the
 * Python package get:
 *
 * - Speech starts at the first chunk whose probability reaches `threshold`.
 * - It ends only after the probability has stayed below the lower
 *   `neg_threshold` for min_silence; the end is where that pause began.
 *   Pauses that do not last long enough are remembered as split points.
 * - A segment that grows past the maximum length is split at the longest
 *   remembered pause (the next segment starts where speech resumed after it),
 *   or cut where it stands when there is none.
 * - Segments not longer than min_speech are dropped; the rest are padded by
 *   speech_pad on both sides, and where two segments are closer than twice
 *   the padding, the gap is shared between them.
 *
 * All positions are sample indices at 16 kHz; chunk i starts at sample 512 i. */
#include <math.h>

#include "choir/alloc.h"
#include "choir/silero.h"

choir_vad_params choir_vad_default_params(void) {
    choir_vad_params p;
    p.threshold = 0.5f;
    p.neg_threshold = -1.0f;
    p.min_speech_ms = 250;
    p.min_silence_ms = 100;
    p.speech_pad_ms = 30;
    p.max_speech_s = 0.0f;
    p.min_silence_at_max_speech_ms = 98;
    return p;
}

typedef struct seg_list {
    choir_vad_segment *v;
    int64_t n, cap;
} seg_list;

static int push(seg_list *l, int64_t start, int64_t end) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 16;
        choir_vad_segment *v = choir_realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return CHOIR_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n].start = start;
    l->v[l->n].end = end;
    l->n++;
    return 0;
}

int choir_vad_segments(const float *probs, int64_t n_probs, int64_t n_samples,
                       const choir_vad_params *params, choir_vad_segment **segs, int64_t *n_segs,
                       choir_err *err) {
    if (!segs || !n_segs || (!probs && n_probs) || n_probs < 0 || n_samples < 0)
        return choir_err_set(err, CHOIR_EINVAL, "vad: bad arguments to segments");
    *segs = NULL;
    *n_segs = 0;
    choir_vad_params p = params ? *params : choir_vad_default_params();
    if (!(p.threshold > 0.0f && p.threshold <= 1.0f))
        return choir_err_set(err, CHOIR_EINVAL, "vad: threshold %g is outside (0, 1]", (double)p.threshold);
    if (p.neg_threshold < 0.0f) p.neg_threshold = fmaxf(p.threshold - 0.15f, 0.01f);
    if (p.neg_threshold > p.threshold)
        return choir_err_set(err, CHOIR_EINVAL, "vad: end threshold %g is above the start threshold %g",
                             (double)p.neg_threshold, (double)p.threshold);
    if (p.min_speech_ms < 0 || p.min_silence_ms < 0 || p.speech_pad_ms < 0 || p.min_silence_at_max_speech_ms < 0 ||
        p.min_speech_ms > 3600000 || p.min_silence_ms > 3600000 || p.speech_pad_ms > 3600000 ||
        p.min_silence_at_max_speech_ms > 3600000 || isnan(p.max_speech_s))
        return choir_err_set(err, CHOIR_EINVAL, "vad: durations must be between 0 and one hour");
    if (n_probs > n_samples / CHOIR_SILERO_CHUNK + 1)
        return choir_err_set(err, CHOIR_EINVAL, "vad: %lld probabilities for only %lld samples",
                             (long long)n_probs, (long long)n_samples);

    const int64_t per_ms = CHOIR_SILERO_RATE / 1000;
    const int64_t min_speech = per_ms * p.min_speech_ms;
    const int64_t min_silence = per_ms * p.min_silence_ms;
    const int64_t pad = per_ms * p.speech_pad_ms;
    const int64_t min_split_silence = per_ms * p.min_silence_at_max_speech_ms;
    /* The limit leaves room for one chunk of detection delay and the padding. */
    const double max_speech = p.max_speech_s > 0.0f
                                  ? (double)CHOIR_SILERO_RATE * p.max_speech_s - CHOIR_SILERO_CHUNK - 2.0 * (double)pad
                                  : INFINITY;

    seg_list out = {NULL, 0, 0};
    bool triggered = false;
    int64_t start = 0;
    int64_t pause_start = 0; /* 0: not in a pause (as in the reference, chunk 0 cannot start one that counts) */
    int64_t split_at = 0, split_len = 0; /* the longest finished pause inside the current segment */
    bool have_split = false;
    for (int64_t i = 0; i < n_probs; i++) {
        const float prob = probs[i];
        const int64_t here = i * CHOIR_SILERO_CHUNK;
        if (prob >= p.threshold && pause_start) {
            int64_t len = here - pause_start;
            if (len > min_split_silence && (!have_split || len > split_len)) {
                split_at = pause_start;
                split_len = len;
                have_split = true;
            }
            pause_start = 0;
        }
        if (prob >= p.threshold && !triggered) {
            triggered = true;
            start = here;
            continue;
        }
        if (triggered && (double)(here - start) > max_speech) {
            if (have_split) {
                if (push(&out, start, split_at)) goto nomem;
                start = split_at + split_len;
            } else {
                if (push(&out, start, here)) goto nomem;
                triggered = false;
                pause_start = 0;
                continue;
            }
            pause_start = 0;
            have_split = false;
        }
        if (triggered && prob < p.neg_threshold) {
            if (!pause_start) pause_start = here;
            if (here - pause_start < min_silence) continue;
            if (pause_start - start > min_speech && push(&out, start, pause_start)) goto nomem;
            triggered = false;
            pause_start = 0;
            have_split = false;
        }
    }
    if (triggered && n_samples - start > min_speech && push(&out, start, n_samples)) goto nomem;

    for (int64_t k = 0; k < out.n; k++) {
        choir_vad_segment *s = &out.v[k];
        if (k == 0) s->start = s->start > pad ? s->start - pad : 0;
        if (k + 1 < out.n) {
            choir_vad_segment *next = &out.v[k + 1];
            int64_t gap = next->start - s->end;
            int64_t grow = gap < 2 * pad ? gap / 2 : pad;
            s->end += grow;
            next->start = next->start > grow ? next->start - grow : 0;
        } else {
            s->end = s->end + pad < n_samples ? s->end + pad : n_samples;
        }
        if (s->end > n_samples) s->end = n_samples;
    }
    *segs = out.v;
    *n_segs = out.n;
    return 0;
nomem:
    choir_free(out.v);
    return choir_err_set(err, CHOIR_ENOMEM, "vad: out of memory for segments");
}

int choir_silero_detect(const choir_silero *m, const float *samples, int64_t n_samples,
                        const choir_vad_params *params, choir_vad_segment **segs, int64_t *n_segs,
                        choir_err *err) {
    float *probs = NULL;
    int64_t n_probs = 0;
    int rc = choir_silero_file_probs(m, samples, n_samples, true, &probs, &n_probs, err);
    if (rc) return rc;
    rc = choir_vad_segments(probs, n_probs, n_samples, params, segs, n_segs, err);
    choir_free(probs);
    return rc;
}
