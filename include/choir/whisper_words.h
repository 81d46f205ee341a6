/* choir/whisper_words.h: word-level timestamps for Whisper, computed as
 * openai/whisper's timing.py computes them.
 *
 * The method: the decoder is run once more over the window's text tokens
 * (teacher forcing, after the start sequence and <|notimestamps|>), and the
 * cross-attention logits of a few "alignment heads" (per model size, found by
 * openai to follow the speech) give, for every text token, a distribution over
 * the window's encoder frames (20 ms each). Those distributions are normalised
 * and median-filtered into one cost matrix, dynamic time warping finds the
 * monotonic path through it, and a token starts where the path first enters its
 * row. Tokens are grouped into words as openai's tokenizer groups them,
 * punctuation is merged onto its neighbours, and the times are refined against
 * the segment times with openai's heuristics.
 *
 * This header holds the model-independent parts; the network supplies the
 * cross-attention logits and the token probabilities. Times are seconds; frames
 * here are encoder frames (CHOIR_WHISPER_WORD_FPS per second), i.e. half the
 * mel frames. */
#ifndef CHOIR_WHISPER_WORDS_H
#define CHOIR_WHISPER_WORDS_H

#include <stdbool.h>
#include <stdint.h>

#include "choir/error.h"
#include "choir/json.h"
#include "choir/tokenizer.h"
#include "choir/whisper.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Encoder frames (attention columns) per second: 1500 per 30-s window. */
#define CHOIR_WHISPER_WORD_FPS 50
/* openai's defaults (transcribe.py). */
#define CHOIR_WHISPER_PREPEND_PUNCT "\"'\xe2\x80\x9c\xc2\xbf([{-"
#define CHOIR_WHISPER_APPEND_PUNCT                                                                       \
    "\"'.\xe3\x80\x82,\xef\xbc\x8c!\xef\xbc\x81?\xef\xbc\x9f:\xef\xbc\x9a\xe2\x80\x9d)]}\xe3\x80\x81"
#define CHOIR_WHISPER_MEDFILT_WIDTH 7

/* --- alignment heads -------------------------------------------------------- */

typedef struct choir_whisper_head {
    int layer; /* decoder layer, 0-based */
    int head;  /* head of that layer's cross-attention */
} choir_whisper_head;

/* The most heads any table or default can give (large-v3's 32 x 20). */
#define CHOIR_WHISPER_MAX_HEADS 640

/* Writes the alignment heads for a model of dimensions `d` into out[0..) and
 * returns how many (at most CHOIR_WHISPER_MAX_HEADS; `out` must hold that
 * many). A model whose dimensions are those of a published checkpoint (tiny,
 * base, small, medium, each with its .en twin, large-v1/v2, large-v3,
 * large-v3-turbo) gets openai's table for that size; large-v1 and large-v2 have
 * the same dimensions, so `large_v1` picks v1's table (the default is v2's, the
 * one mostly used). Any other model gets openai's default: every head of the
 * second half of the decoder layers. Returns 0 when d is NULL or has no
 * decoder layer or head. */
int choir_whisper_alignment_heads(const choir_whisper_dims *d, bool large_v1, choir_whisper_head *out);

/* The heads word timestamps use for model m: those of the model
 * directory's generation_config.json `alignment_heads` when choir_whisper_load
 * found them, else choir_whisper_alignment_heads for its dimensions. */
int choir_whisper_model_alignment_heads(const choir_whisper *m, choir_whisper_head *out);

/* Reads heads given as a JSON list of [layer, head] pairs (the
 * `alignment_heads` of a Hugging Face generation_config.json). Every pair
 * must lie inside the model's layers and heads, and there must be at least
 * one and at most CHOIR_WHISPER_MAX_HEADS. Returns the count, or
 * CHOIR_EFORMAT with a message. */
int choir_whisper_parse_alignment_heads(const cJSON *list, const choir_whisper_dims *d,
                                        choir_whisper_head *out, choir_err *err);

/* The network's part: a teacher-forced decoder pass over `tokens` (the
 * window's whole sequence from <|startoftranscript|>, n_tokens of them, 1 ..
 * n_text_ctx) attending to the window `cross` (choir_whisper_cross_create),
 * from an empty cache. Writes, for each of the n_heads heads (1 ..
 * CHOIR_WHISPER_MAX_HEADS, inside the model's layers and heads), the
 * pre-softmax cross-attention logits q.k / sqrt(head dim) of every position
 * into qk [n_heads][n_tokens][n_audio_ctx] (the `qk` of
 * choir_whisper_alignment_matrix, qk_stride n_audio_ctx, qk_scale 1), and,
 * when logits is not NULL, every position's logits [n_tokens][n_vocab]. Both
 * are the caller's host memory. On a GPU-attached model (the window made
 * there) the pass runs on the device and both are downloaded. Returns 0,
 * CHOIR_EINVAL (bad argument, a token outside the vocabulary, a window of
 * the other side), CHOIR_ENOMEM, or a device error. */
int choir_whisper_cross_qk(const choir_whisper *m, const choir_whisper_cross *cross,
                           const int32_t *tokens, int n_tokens, const choir_whisper_head *heads,
                           int n_heads, float *qk, float *logits, choir_err *err);

/* --- the cost matrix and its path --------------------------------------------- */

/* Builds the alignment matrix from raw cross-attention logits.
 * qk: [n_heads][n_tok][qk_stride] floats, the pre-softmax logits of each
 * alignment head for every decoder position; only columns [0, n_frames)
 * count (the window's audio: openai uses num_frames // 2 of the mel frames).
 * Per head and position: softmax over those columns of qk * qk_scale; then per
 * head and column, the values are standardised over the positions (mean 0,
 * population standard deviation 1); then each row is median-filtered along the
 * columns with an odd `medfilt_width` (reflected at the edges; skipped when
 * n_frames <= medfilt_width / 2); then the heads are averaged.
 * out: [n_tok][n_frames]. Returns 0, CHOIR_EINVAL for bad sizes or an even
 * width, CHOIR_ENOMEM. */
int choir_whisper_alignment_matrix(const float *qk, int n_heads, int n_tok, int qk_stride, int n_frames,
                                   float qk_scale, int medfilt_width, float *out, choir_err *err);

/* Dynamic time warping over cost x [n][m] (row-major), as openai's dtw_cpu:
 * the cheapest path from (0, 0) to (n-1, m-1) moving down, right or
 * diagonally; any tie goes to the horizontal move (next column, same row).
 * The accumulated cost is kept in float, as there. Writes the path, from its
 * start, into rows[] and cols[] (each must hold n + m entries) and returns its
 * length (n + m - 1 at most for finite costs; with infinities or NaNs the path
 * runs along the edges as openai's does, and may hold -1 there), or
 * CHOIR_EINVAL (n or m < 1), CHOIR_ENOMEM. */
int choir_whisper_dtw(const float *x, int n, int m, int32_t *rows, int32_t *cols, choir_err *err);

/* --- words ------------------------------------------------------------------ */

typedef struct choir_whisper_word {
    char *text;        /* UTF-8, owned; "" once merged into a neighbour */
    int32_t *tokens;   /* the word's token ids, owned */
    int n_tokens;
    double start, end; /* seconds */
    float probability; /* mean probability of its tokens */
} choir_whisper_word;

/* Frees the words' strings and token arrays and the array. NULL is a no-op. */
void choir_whisper_words_free(choir_whisper_word *w, int n);

/* Splits tokens[0..n) into words as openai's Tokenizer.split_to_word_tokens:
 * first into the shortest runs that decode to whole UTF-8 characters (a run
 * whose bytes stay invalid in the decoding of all the tokens ends where the
 * replacement character appears); then, unless `by_unicode` (openai does that
 * for zh, ja, th, lo, my, yue), runs are joined onto the previous word unless
 * they start with a space, are punctuation or whitespace, or are a special
 * token (id >= sp->eot, decoded as its name from the tokenizer, or "" when it
 * has none). Times and probabilities are left 0. Returns 0 and the words in
 * *out / *n_out (free with choir_whisper_words_free), or CHOIR_ENOMEM. */
int choir_whisper_split_words(const choir_tokenizer *tok, const choir_whisper_specials *sp, const int32_t *tokens,
                              int n, bool by_unicode, choir_whisper_word **out, int *n_out, choir_err *err);

/* True for the languages whose words openai splits by characters. */
bool choir_whisper_lang_splits_by_unicode(const char *code);

/* Merges punctuation as openai's merge_punctuations: a word that is (after
 * stripping) one of `prepend` moves onto the following word, then a word that
 * is one of `append` moves onto the preceding word when that one does not end
 * with a space. The word moved is left with text "" and no tokens. The
 * strings are matched as Python's `in` matches them: as substrings. */
int choir_whisper_merge_punctuation(choir_whisper_word *w, int n, const char *prepend, const char *append,
                                    choir_err *err);

/* The probability of `token` under logits[0..eot) (softmax over the text
 * vocabulary only, as openai takes it for word probabilities). */
float choir_whisper_text_token_prob(const float *logits, int32_t eot, int32_t token);

/* A window's segments going in, and their words coming out. */
typedef struct choir_whisper_word_segment {
    double start, end;         /* in: the segment's times; out: refined as openai does */
    const int32_t *tokens;     /* the segment's tokens; those >= eot (timestamps) are skipped */
    int n_tokens;
    choir_whisper_word *words; /* out: owned (choir_whisper_words_free), "" words left out */
    int n_words;
} choir_whisper_word_segment;

typedef struct choir_whisper_word_opts {
    const char *prepend; /* NULL: CHOIR_WHISPER_PREPEND_PUNCT */
    const char *append;  /* NULL: CHOIR_WHISPER_APPEND_PUNCT */
    bool by_unicode;     /* choir_whisper_lang_splits_by_unicode(language) */
} choir_whisper_word_opts;

/* openai's find_alignment after the network and add_word_timestamps, for one
 * window. The text tokens are those of all segments below sp->eot, in order
 * (n_text of them). matrix: [n_text + 1][n_frames], the alignment matrix rows
 * of the positions from <|notimestamps|> to the last text token (each
 * position's row belongs to the token it predicts; the last predicts <|eot|>).
 * probs[k]: text token k's probability (choir_whisper_text_token_prob).
 * time_offset: the window's start in seconds (openai: seek * 0.01). Word times
 * are rounded to 10 ms as there. *last_speech_end: in, the end of the last
 * speech before this window; out, updated. Fills each segment's words and
 * refines its times. Returns 0 or CHOIR_ENOMEM (then no segment holds words). */
int choir_whisper_add_word_timestamps(const choir_tokenizer *tok, const choir_whisper_specials *sp,
                                      const float *matrix, int n_frames, const float *probs,
                                      double time_offset, double *last_speech_end, choir_whisper_word_segment *segs,
                                      int n_segs, const choir_whisper_word_opts *opts, choir_err *err);

/* --- one decoded window, end to end ------------------------------------------- */

/* What the seek loop does after decoding a window with word timestamps on
 * (openai's add_word_timestamps as transcribe calls it): the teacher-forced
 * pass (choir_whisper_cross_qk) over [sot, language, task] (sot alone for
 * English-only models), <|notimestamps|>, the text tokens of all segs and
 * <|endoftext|> on the window's `cross`, the heads
 * choir_whisper_model_alignment_heads gives, the alignment
 * matrix over the window's first mel_frames / 2 encoder frames (mel_frames:
 * the window's frames of audio, openai's num_frames), each text token's
 * probability from the same pass, then choir_whisper_add_word_timestamps
 * (time_offset: the window's start in seconds; *last_speech_end in and out).
 * `language` is the language index the window was decoded in. A window
 * without text tokens, or with fewer than 2 mel frames, gets no words.
 * Returns 0, CHOIR_EINVAL (too many tokens for the decoder), CHOIR_ENOMEM
 * or a device error; on failure no segment holds words. */
int choir_whisper_window_words(const choir_whisper *m, const choir_tokenizer *tok, const choir_whisper_cross *cross,
                               int language, choir_whisper_task task, int mel_frames, double time_offset,
                               double *last_speech_end, choir_whisper_word_segment *segs, int n_segs,
                               const choir_whisper_word_opts *opts, choir_err *err);

/* --- subtitles by words ----------------------------------------------------- */

/* One subtitle: a cue from `start` to `end` (seconds) with its lines
 * (UTF-8, lines joined by '\n'). */
typedef struct choir_whisper_cue {
    double start, end;
    char *text; /* owned */
} choir_whisper_cue;

typedef struct choir_whisper_subtitle_opts {
    int max_line_width;     /* characters (code points) per line; 0: no limit */
    int max_line_count;     /* lines per cue; 0: no limit */
    int max_words_per_line; /* words per line; 0: no limit (ignored with max_line_width, as openai) */
    bool highlight_words;   /* one cue per word, the word underlined (<u>...</u>) */
} choir_whisper_subtitle_opts;

/* Lays segments' words out as subtitle cues, as openai's SubtitlesWriter
 * (iterate_result) does for srt/vtt with word timestamps: words fill a line
 * up to max_line_width; without both max_line_width and max_line_count each
 * segment (and each run of max_words_per_line words) starts a new cue;
 * with both, a cue holds max_line_count lines and a pause of more than 3 s
 * starts a new one. Segments without words are skipped. Returns 0 and the
 * cues in *out / *n_out (free with choir_whisper_cues_free), or
 * CHOIR_ENOMEM. */
int choir_whisper_subtitles(const choir_whisper_word_segment *segs, int n_segs,
                            const choir_whisper_subtitle_opts *opts, choir_whisper_cue **out, int *n_out,
                            choir_err *err);

/* NULL is a no-op. */
void choir_whisper_cues_free(choir_whisper_cue *c, int n);

/* choir_whisper_subtitles over a transcript made with word timestamps
 * (its segments' words; segments without words are skipped). Same result
 * and ownership. */
int choir_whisper_transcript_cues(const choir_whisper_transcript *t, const choir_whisper_subtitle_opts *opts,
                                  choir_whisper_cue **out, int *n_out, choir_err *err);

#ifdef __cplusplus
}
#endif

#endif
