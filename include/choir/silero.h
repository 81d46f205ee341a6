/* choir/silero.h: Silero VAD v6.2 (16 kHz) voice activity detection.
 *
 * The model scores each 512-sample chunk of 16 kHz mono audio with a speech
 * probability in [0, 1]. It is recurrent: each stream carries an LSTM state
 * and the last 64 samples of its previous chunk, so chunks of one stream must
 * be fed in order, and a stream's state is reset before a new recording.
 *
 * Objects: a `choir_silero` holds the weights (immutable after load, shared by
 * any number of threads); a `choir_silero_state` is one stream (not shared).
 * `choir_silero_process` steps many streams at once (a batch): results equal
 * stepping each stream alone.
 *
 * Segmentation turns per-chunk probabilities into speech segments the way
 * Silero's get_speech_timestamps does (hysteresis thresholds, minimum speech
 * and silence durations, padding, and a maximum segment length split at the
 * longest pause inside).
 *
 * Model location: a directory with model.safetensors (tensor names in
 * docs/vad.md) and config.json, as `choir convert` writes it from Silero's
 * official silero_vad_16k_op15.onnx; the .onnx file itself or a bare
 * .safetensors file are accepted too. */
#ifndef CHOIR_SILERO_H
#define CHOIR_SILERO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_SILERO_RATE 16000   /* Hz; the only rate this model handles */
#define CHOIR_SILERO_CHUNK 512    /* new samples per step (32 ms) */
#define CHOIR_SILERO_CONTEXT 64   /* samples of the previous chunk seen again */
#define CHOIR_SILERO_HIDDEN 128   /* LSTM state size */

typedef struct choir_silero choir_silero;
typedef struct choir_silero_state choir_silero_state;

/* --- model ------------------------------------------------------------- */

/* Loads the model from `path`: a directory holding model.safetensors (and
 * optionally config.json, which must then say "model_type": "silero_vad" and a
 * sample_rate of 16000), a .safetensors file, or Silero's official .onnx file.
 * Every tensor is checked for name, dtype (F32) and shape. Returns a model the
 * caller frees with choir_silero_free, or NULL (and err). */
choir_silero *choir_silero_load(const char *path, choir_err *err);
/* Frees the model. Its states stay valid but must not be used with another
 * model's weights in mind; NULL is a no-op. */
void choir_silero_free(choir_silero *m);
/* Bytes of weights the model holds (about 1.2 MB). */
size_t choir_silero_weight_bytes(const choir_silero *m);

/* Resolves the model location: `explicit_path` when not NULL, else
 * $CHOIR_MODELS/silero-vad, else ~/.cache/choir/models/silero-vad. Writes the
 * first candidate that exists into out[cap]. Returns 0, or CHOIR_ENOTFOUND
 * (err lists the places looked at). */
int choir_silero_find(const char *explicit_path, char *out, size_t cap, choir_err *err);

/* Writes DIR/model.safetensors and DIR/config.json (the layout
 * choir_silero_load reads) from Silero's official ONNX export
 * (silero_vad_16k_op15.onnx, v6.2). `out_dir` is created if missing. The
 * tensors are the ONNX initializers renamed (table in docs/vad.md), values
 * unchanged. Returns 0 or a negative status (and err). */
int choir_silero_convert_onnx(const char *onnx_path, const char *out_dir, choir_err *err);

/* --- streams ----------------------------------------------------------- */

/* A new stream state (zero LSTM state and context), freed with
 * choir_silero_state_free. NULL (and err) when out of memory. */
choir_silero_state *choir_silero_state_create(choir_err *err);
/* Returns the stream to its start: zero LSTM state, zero context. */
void choir_silero_state_reset(choir_silero_state *s);
/* NULL is a no-op. */
void choir_silero_state_free(choir_silero_state *s);

/* Scratch bytes choir_silero_process needs for a batch of `n_streams`. */
size_t choir_silero_scratch_bytes(int n_streams);

/* Steps `n_streams` streams by one chunk each: chunks[i] holds
 * CHOIR_SILERO_CHUNK samples (float, 16 kHz, nominally in [-1, 1]) for
 * states[i]; the speech probability of each goes to probs[i]. The states
 * advance; they must be distinct. `scratch` is at least
 * choir_silero_scratch_bytes(n_streams) bytes aligned to 16 (for example from
 * an arena), or NULL to let the call allocate its own. Returns 0, or
 * CHOIR_EINVAL / CHOIR_ENOMEM (and err); on failure no state has changed. */
int choir_silero_process(const choir_silero *m, choir_silero_state *const *states,
                         const float *const *chunks, int n_streams, float *probs, void *scratch,
                         choir_err *err);

/* Scores a whole recording as one fresh stream: the probability of every
 * complete chunk of 512 samples, in order, and also of a final partial chunk
 * (zero-padded, as Silero's own segmentation does) when `score_tail` is true.
 * *probs is a new array (choir_free) of *n_chunks values. Returns 0 or a
 * negative status (and err). */
int choir_silero_file_probs(const choir_silero *m, const float *samples, int64_t n_samples,
                            bool score_tail, float **probs, int64_t *n_chunks, choir_err *err);

/* --- segmentation ------------------------------------------------------ */

/* The longest segmentation duration choir takes, ms (`choir vad`'s flags; a
 * VAD request's min_speech_ms / min_silence_ms, which the engine refuses
 * outside [0, CHOIR_VAD_MAX_MS] at submit, as a threshold outside [0, 1]). */
#define CHOIR_VAD_MAX_MS 3600000

typedef struct choir_vad_params {
    float threshold;          /* speech starts at prob >= threshold (0.5) */
    /* speech may end only below this (threshold - 0.15, at least 0.01);
     * a negative value means that default */
    float neg_threshold;
    int min_speech_ms;        /* shorter segments are dropped (250) */
    int min_silence_ms;       /* a pause must last this long to end a segment (100) */
    int speech_pad_ms;        /* each segment grows by this on both sides (30) */
    /* A segment longer than this (seconds; padding included) is split at the
     * longest pause inside it, or cut hard when it has none. 0 or a negative
     * value means no limit (the default); Whisper wants 30. */
    float max_speech_s;
    /* Pauses shorter than this are not candidates for a split (98). */
    int min_silence_at_max_speech_ms;
} choir_vad_params;

/* Silero's defaults: 0.5, -1 (0.35), 250, 100, 30, no limit, 98. */
choir_vad_params choir_vad_default_params(void);

/* A speech segment in samples at 16 kHz: [start, end). */
typedef struct choir_vad_segment {
    int64_t start;
    int64_t end;
} choir_vad_segment;

/* Finds the speech segments of a recording of `n_samples` samples whose
 * per-chunk probabilities are probs[0..n_probs-1] (chunk i covers samples
 * 512 i .. 512 i + 511). *segs is a new array (choir_free; NULL when there are
 * none) of *n_segs segments, in order, not overlapping, inside [0, n_samples].
 * Returns 0 or CHOIR_EINVAL / CHOIR_ENOMEM (and err). */
int choir_vad_segments(const float *probs, int64_t n_probs, int64_t n_samples,
                       const choir_vad_params *params, choir_vad_segment **segs, int64_t *n_segs,
                       choir_err *err);

/* Scores a recording (tail chunk included) and segments it: the two calls
 * above in one. */
int choir_silero_detect(const choir_silero *m, const float *samples, int64_t n_samples,
                        const choir_vad_params *params, choir_vad_segment **segs, int64_t *n_segs,
                        choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
