/* choir/transcript.h: a transcript (text, language, segments) written in the
 * response formats of OpenAI's transcription API: json, text, srt, vtt and
 * verbose_json. The one formatter the server, `choir stt` and the job worker
 * use, so the same transcript reads the same everywhere.
 *
 * Whatever times a model gives, the formats carry them in order and inside
 * the audio: each segment's start is clamped to [previous end, duration] and
 * its end to [start, duration] (when the duration is known, > 0). */
#ifndef CHOIR_TRANSCRIPT_H
#define CHOIR_TRANSCRIPT_H

#include <stddef.h>

#include "choir/error.h"
#include "choir/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum choir_transcript_format {
    CHOIR_TRANSCRIPT_JSON = 0,     /* {"text": ...} */
    CHOIR_TRANSCRIPT_TEXT,         /* the text and a newline */
    CHOIR_TRANSCRIPT_SRT,
    CHOIR_TRANSCRIPT_VTT,
    CHOIR_TRANSCRIPT_VERBOSE_JSON  /* task, language, duration, text, segments */
} choir_transcript_format;

/* "json", "text" (also "txt"), "srt", "vtt", "verbose_json". 0 or CHOIR_EINVAL. */
int choir_transcript_format_parse(const char *name, choir_transcript_format *out);
/* The media type of a format ("application/json", "text/plain; charset=utf-8",
 * "text/vtt; charset=utf-8"). Static. */
const char *choir_transcript_format_mime(choir_transcript_format f);
/* OpenAI's name of a language code: "en" -> "english", "yue" -> "cantonese";
 * NULL for a code it does not know. Static. */
const char *choir_language_name(const char *code);

/* A subtitle laid out by the caller (e.g. by words): its lines joined by
 * '\n'. */
typedef struct choir_transcript_cue {
    double start_s, end_s;
    const char *text;
} choir_transcript_cue;

typedef struct choir_transcript {
    const char *text;                /* the whole transcript (leading spaces are dropped) */
    const char *language;            /* ISO code ("en") or NULL when unknown */
    double duration_s;               /* of the audio; 0 when unknown (no clamping) */
    int translate;                   /* verbose_json's task: translate / transcribe */
    const choir_segment *segments;   /* in time order; borrowed */
    int n_segments;
    /* verbose_json: a top-level "words" [{word, start, end}] (OpenAI's
     * timestamp_granularities[]=word) from the segments' words, the word's
     * spaces trimmed, times in order and inside the audio as segments' are. */
    int words;
    int no_segments;                 /* verbose_json without "segments" (word granularity alone) */
    /* srt / vtt: these cues (in time order, borrowed) instead of one per
     * segment, when n_cues > 0. */
    const choir_transcript_cue *cues;
    int n_cues;
} choir_transcript;

typedef struct choir_transcript_opts {
    int pretty;                      /* json / verbose_json indented (the CLI) */
} choir_transcript_opts;

/* Writes `t` in format `f` (o NULL: defaults) to a NUL-terminated string the
 * caller frees with choir_free; *len (when not NULL) gets its length. srt /
 * vtt without segments get one cue over the whole text; segments with a
 * speaker are labelled ("[Speaker N] " in srt, <v Speaker N> in vtt) and get
 * "speaker" in verbose_json. verbose_json's language is OpenAI's name
 * ("english"), its segments carry seek, tokens, temperature, avg_logprob,
 * compression_ratio and no_speech_prob from the model (zero when it has
 * none); with t->words "words" follows "segments". NULL and err (CHOIR_ENOMEM, CHOIR_EINVAL) on failure. */
char *choir_transcript_write(const choir_transcript *t, choir_transcript_format f, const choir_transcript_opts *o,
                             size_t *len, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
