/* choir/whisper.h: the Whisper speech-to-text model (tiny ... large-v3-turbo).
 *
 * Three layers, each usable alone:
 *  1. The network: an immutable, shareable `choir_whisper` (weights, mapped from
 *     the checkpoint where possible), the encoder over 30-s log-mel windows, and a
 *     decoder driven one step at a time over a batch of sequences, each with its
 *     own `choir_whisper_seq` state (self-attention KV cache, a reference to its
 *     window's cross-attention K/V).
 *  2. Decoding of one window as openai/whisper does it (whisper_decode.c): start
 *     sequence, logit filters, greedy / beam / best-of sampling, temperature
 *     fallback, language detection.
 *  3. Long audio (whisper_transcribe.c): the sequential 30-s seek loop, and the
 *     batched pipeline over segments of at most 30 s.
 *
 * Checkpoints: the Hugging Face transformers layout (model.encoder..., tied
 * proj_out) and the MLX-community / openai layout (encoder.blocks..., MLX conv
 * layout [out, k, in], optionally MLX-quantized linears and embedding). The
 * layout is detected from the tensor names.
 *
 * Units: audio is 16 kHz mono float in [-1, 1]; mel windows are [n_mels][3000]
 * (100 frames per second); times are seconds. */
#ifndef CHOIR_WHISPER_H
#define CHOIR_WHISPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"
#include "choir/model.h"
#include "choir/mel.h" /* CHOIR_WHISPER_SAMPLE_RATE, _N_SAMPLES, _N_FRAMES */
#include "choir/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_WHISPER_MAX_LANGS 100

typedef struct choir_whisper_dims {
    int n_mels;        /* 80 or 128 */
    int n_audio_ctx;   /* 1500 encoder positions */
    int n_audio_layer;
    int n_text_ctx;    /* 448 decoder positions */
    int n_text_layer;
    int d_model;       /* shared by encoder and decoder */
    int n_head;        /* shared; head dim = d_model / n_head */
    int ffn_dim;       /* 4 * d_model in every published model */
    int n_vocab;       /* 51864 (.en), 51865, 51866 (large-v3, turbo) */
} choir_whisper_dims;

/* Special token ids, all derived from n_vocab as openai/whisper does. */
typedef struct choir_whisper_specials {
    int multilingual;     /* n_vocab >= 51865 */
    int num_languages;    /* 99 or 100 */
    int32_t eot, sot, lang0, translate, transcribe, sot_lm, sot_prev, no_speech,
        no_timestamps, timestamp_begin;
} choir_whisper_specials;

/* Fills `sp` from the vocabulary size. */
void choir_whisper_specials_from_vocab(int n_vocab, choir_whisper_specials *sp);

/* The language code ("en", "zh", ..., "yue") of language index i, or NULL when
 * i is out of range. */
const char *choir_whisper_lang_code(int i);
/* The index of a language code, or -1. */
int choir_whisper_lang_index(const char *code);

/* --- the network ------------------------------------------------------- */

typedef struct choir_whisper choir_whisper;

/* Loads a model directory (config.json + model.safetensors or shards, or
 * weights.safetensors). Tensors are mapped; F32 matrices are used in place,
 * small float vectors of other dtypes are converted once. Returns NULL and
 * fills err (naming the missing or mis-shaped tensor) on failure. */
choir_whisper *choir_whisper_load(const char *dir, choir_err *err);

/* Builds a model over an open checkpoint (either layout) with the given
 * dimensions. Takes ownership of `st` (closed by choir_whisper_free, also on
 * failure). A linear layer (or the token embedding) is MLX-quantized when
 * `<name>.scales` exists; bits and group size are read from its shapes. */
choir_whisper *choir_whisper_from_st(choir_st *st, const choir_whisper_dims *dims,
                                     choir_err *err);

/* Builds a model over tensors the caller holds (e.g. generated in memory by a
 * benchmark): `find` returns the tensor of a name (either layout) or NULL. The
 * tensors' data must outlive the model. */
typedef const choir_st_tensor *(*choir_whisper_tensor_fn)(void *ctx, const char *name);
choir_whisper *choir_whisper_from_tensors(choir_whisper_tensor_fn find, void *ctx,
                                          const choir_whisper_dims *dims, choir_err *err);

/* Reads the dimensions from a config.json of either layout (HF names, or the
 * openai/MLX `n_audio_state`... names, also nested under "dims"). */
int choir_whisper_read_config(const char *config_path, choir_whisper_dims *dims, choir_err *err);

/* NULL is a no-op. */
void choir_whisper_free(choir_whisper *m);

const choir_whisper_dims *choir_whisper_get_dims(const choir_whisper *m);
const choir_whisper_specials *choir_whisper_get_specials(const choir_whisper *m);
/* Bytes of weights (mapped and converted). */
size_t choir_whisper_weight_bytes(const choir_whisper *m);

/* Runs the encoder on `n` windows: mel [n][n_mels][3000] -> out
 * [n][n_audio_ctx][d_model]. Windows are independent (batch-invariant).
 * Returns 0 or a negative code (CHOIR_ENOMEM). */
int choir_whisper_encode(const choir_whisper *m, const float *mel, int n, float *out,
                         choir_err *err);

/* Cross-attention keys and values of one window, computed once from its
 * encoder output and shared by every sequence decoding that window. */
typedef struct choir_whisper_cross choir_whisper_cross;
/* enc_out [n_audio_ctx][d_model]; not kept after the call. */
choir_whisper_cross *choir_whisper_cross_create(const choir_whisper *m, const float *enc_out,
                                                choir_err *err);
/* NULL is a no-op. */
void choir_whisper_cross_free(choir_whisper_cross *c);

/* Encodes n windows and builds each one's cross-attention cache in
 * cross[0..n) (free each with choir_whisper_cross_free): the pipeline's way,
 * which on a GPU keeps the encoder output on the device. `enc` is host
 * scratch [n][n_audio_ctx][d_model] for the CPU path, or NULL (then it is
 * allocated for the call; unused on a GPU). On failure the caches built so
 * far stay in cross[] for the caller to free, the others are NULL. */
int choir_whisper_encode_cross(const choir_whisper *m, const float *mel, int n, float *enc,
                               choir_whisper_cross **cross, choir_err *err);

/* One decoder sequence: its self-attention KV cache [n_text_layer][capacity][d]
 * and the window it attends to. `capacity` is the most positions it will hold
 * (1 .. n_text_ctx; 0 means n_text_ctx): a window decoded without a prompt
 * needs at most 4 + sample_len + 1, which halves the cache. */
typedef struct choir_whisper_seq choir_whisper_seq;
choir_whisper_seq *choir_whisper_seq_create(const choir_whisper *m, int capacity, choir_err *err);
/* NULL is a no-op. */
void choir_whisper_seq_free(choir_whisper_seq *s);
/* Empties the cache and points the sequence at `cross` (not owned; must outlive
 * the sequence's use). */
void choir_whisper_seq_reset(choir_whisper_seq *s, const choir_whisper_cross *cross);
/* Copies the first `n_keep` cached positions and the window of src into dst
 * (beam search reordering). n_keep <= choir_whisper_seq_len(src) and <= dst's
 * capacity. */
void choir_whisper_seq_copy(choir_whisper_seq *dst, const choir_whisper_seq *src, int n_keep);
/* Number of positions cached so far. */
int choir_whisper_seq_len(const choir_whisper_seq *s);
/* Drops cached positions beyond n (n <= current length). */
void choir_whisper_seq_truncate(choir_whisper_seq *s, int n);

/* Feeds tokens to a batch of sequences and returns logits. Sequence i gets
 * n_tokens[i] new tokens (taken in order from `tokens`, concatenated), appended
 * after its cached positions. `logits` receives, for each sequence, either the
 * logits of its last new token only ([n_seq][n_vocab], all_positions false) or of
 * every new token ([sum n_tokens][n_vocab]). Fails with CHOIR_ETOOBIG when a
 * sequence would pass its capacity, CHOIR_EINVAL on a token outside the
 * vocabulary. The result for a sequence does not depend on the others in the
 * batch. */
int choir_whisper_decode(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                         const int32_t *tokens, const int *n_tokens, bool all_positions,
                         float *logits, choir_err *err);
/* Host memory for `rows` rows of logits [rows][n_vocab] to pass to
 * choir_whisper_decode: page-locked when a GPU is attached (each step's
 * download then goes straight into it, queued behind the step; a few such
 * blocks at a time, then ordinary memory), else ordinary counted memory.
 * NULL when out of memory. Free with choir_whisper_logits_free while the
 * model's attachment is the one it was allocated under; NULL is a no-op. */
float *choir_whisper_logits_alloc(const choir_whisper *m, int64_t rows);
void choir_whisper_logits_free(const choir_whisper *m, float *logits);

/* --- the network on a GPU (whisper_cuda.c, CUDA builds) -------------------- */
/* A loaded model can be attached to a CUDA device: its weights are uploaded
 * once, and from then on choir_whisper_encode, _cross_create, _seq_*, and
 * _decode (hence everything built on them: decoding, the seek loop, the
 * batched pipeline) run there. Encoder windows are batched; cross-attention
 * K/V are computed on the device from the device encoder output; each
 * sequence's self-attention cache is a slot of a device pool; a decoder step
 * of B one-token sequences is captured once per B into a CUDA graph and
 * replayed. Logits come back to the host every step, so the decoding rules
 * (filters, beam search, best-of, fallback) are the CPU ones, unchanged.
 *
 * An attached model is NOT thread-safe: one thread at a time (the engine
 * adapter holds a mutex). Caches and sequences made before attaching (CPU
 * ones) must not be used after it, nor GPU ones after detaching. In builds
 * without CUDA attaching fails with CHOIR_EUNSUPPORTED. */

struct choir_cuda; /* choir/cuda.h */

typedef struct choir_whisper_gpu_opts {
    int device;      /* CUDA device index, 0-based */
    bool bf16;       /* store f32 matrices as bf16 on the device (half the bytes, tensor
                        cores); matrices already bf16/f16/quantized stay as stored */
    int max_windows; /* encoder windows per batched pass (8) */
    bool graphs;     /* replay the per-token decoder step from CUDA graphs (true) */
    bool tf32;       /* f32 products (attention scores, convolutions) on TF32 tensor cores
                        (choir_cuda_set_tf32): for bf16 models; false keeps them f32 */
    bool kv_f32;     /* keep the KV caches (self and cross) f32 for a half-precision model;
                        false: they hold the model's dtype, bf16 (half the bytes) */
    int greedy_steps; /* greedy decoding (temperature 0, no beams): the rules, argmax and
                         bookkeeping on the device, up to this many decoder steps per host
                         wake-up (8; at most 16); 0: the rules on the host, one round trip
                         per token */
} choir_whisper_gpu_opts;

/* device 0, f32 as stored, 8 windows, graphs on, TF32 off, caches in the
 * model's dtype, greedy rules on the device 8 steps per wake-up. */
void choir_whisper_default_gpu_opts(choir_whisper_gpu_opts *o);

/* Opens a CUDA context on o->device (NULL: defaults), uploads the weights and
 * plans the encoder activations. Returns 0, CHOIR_EUNSUPPORTED (no CUDA in
 * this build, or a layout the device code lacks), CHOIR_ENOTFOUND (no such
 * device), CHOIR_ENOMEM/CHOIR_EBUSY (device memory), CHOIR_EINVAL (already
 * attached). On failure the model stays on the CPU. */
int choir_whisper_gpu_attach(choir_whisper *m, const choir_whisper_gpu_opts *o, choir_err *err);
/* Frees the device half (every GPU cache and sequence must be freed first);
 * the model is back on the CPU. No-op when not attached. choir_whisper_free
 * detaches. */
void choir_whisper_gpu_detach(choir_whisper *m);
/* true while attached. */
bool choir_whisper_on_gpu(const choir_whisper *m);
/* The attached CUDA context (for timing and ceilings), NULL when not attached;
 * owned by the model. */
struct choir_cuda *choir_whisper_gpu_context(const choir_whisper *m);

typedef struct choir_whisper_gpu_stats {
    int64_t device_bytes;    /* held now on the device through the model's context */
    int64_t weight_bytes;    /* of which weights */
    int64_t step_weight_bytes; /* weight bytes one decoder step reads (decoder + logits) */
    int64_t steps_graph;     /* decoder steps replayed from a CUDA graph */
    int64_t steps_direct;    /* decoder calls run kernel by kernel */
    int graphs;              /* graphs captured and alive */
    int graph_failures;      /* captures that failed (those steps ran directly) */
    int64_t pinned_bytes;    /* pinned host memory held now (step inputs, logits) */
    int kv_elem_bytes;       /* bytes per KV cache element: 4 (f32) or 2 (bf16) */
} choir_whisper_gpu_stats;

/* Fills `s`; CHOIR_EINVAL when not attached. */
int choir_whisper_gpu_get_stats(const choir_whisper *m, choir_whisper_gpu_stats *s,
                                choir_err *err);

/* Device bytes the batched pipeline needs per window of a batch beyond the
 * attached weights: its cross K/V and `hyps` self-attention caches, the
 * logits of its hypotheses and its share of the step buffers. 0 when dims
 * is NULL. */
int64_t choir_whisper_gpu_window_bytes(const choir_whisper_dims *dims, int hyps);

/* --- decoding one window (whisper_decode.c, whisper_filters.c) ------------ */

typedef struct choir_tokenizer choir_tokenizer;

/* The per-step logit filters of openai/whisper. */
typedef struct choir_whisper_filter {
    const choir_whisper_specials *sp;
    int n_vocab;
    int sample_begin;              /* number of initial tokens (prompt + start sequence) */
    bool timestamps;               /* apply the timestamp rules */
    bool suppress_blank;           /* forbid " " and eot as the first sampled token */
    const int32_t *suppress;       /* ids always forbidden */
    int n_suppress;
    int max_initial_timestamp_index; /* first timestamp <= tb + this (50 = 1 s); -1: no limit */
} choir_whisper_filter;

/* Applies the filters, in order, to the next-token logits [n_vocab] of a
 * sequence whose tokens so far (initial + sampled) are tokens[0..n_tokens).
 * Forbidden ids become -INFINITY. */
void choir_whisper_filter_logits(const choir_whisper_filter *f, const int32_t *tokens,
                                 int n_tokens, float *logits);

/* openai's default suppress set ("-1"): the non-speech symbol tokens of the
 * vocabulary plus transcribe, translate, sot, startofprev, startoflm, nospeech.
 * Writes up to `cap` ids and returns the full count (88 or 90). */
int choir_whisper_default_suppress(const choir_whisper_specials *sp, int32_t *out, int cap);

typedef enum choir_whisper_task {
    CHOIR_WHISPER_TRANSCRIBE = 0,
    CHOIR_WHISPER_TRANSLATE = 1
} choir_whisper_task;

#define CHOIR_WHISPER_MAX_TEMPERATURES 16
#define CHOIR_WHISPER_MAX_BEAM 16 /* beam_size and best_of */
/* The highest sampling temperature choir takes (`choir stt --temperature`, an
 * STT request's temperature, which the adapter refuses above it or below 0). */
#define CHOIR_WHISPER_MAX_TEMPERATURE 10.0

typedef struct choir_whisper_params {
    choir_whisper_task task;
    int language;          /* language index (choir_whisper_lang_index); -1: detect */
    bool timestamps;       /* sample timestamp tokens (false: <|notimestamps|>) */
    int beam_size;         /* at temperature 0: > 1 for beam search, else greedy */
    float patience;        /* beam search: stop after round(beam_size * patience) finished */
    int best_of;           /* at temperature > 0: independent samples, best kept */
    float length_penalty;  /* <= 0: rank by sum log-prob / length; else GNMT penalty */
    int sample_len;        /* most tokens sampled per window (224) */
    bool suppress_blank;
    int max_initial_timestamp_index; /* 50 (1.0 s); -1: none */
    /* Temperature fallback: decode at temperatures[0], then the next one while
     * the result is too repetitive or too unlikely (and not silence). */
    float temperatures[CHOIR_WHISPER_MAX_TEMPERATURES];
    int n_temperatures;
    float compression_ratio_threshold; /* 2.4; <= 0 disables */
    float logprob_threshold;           /* -1.0; -INFINITY disables */
    float no_speech_threshold;         /* 0.6; > 1 disables */
    uint64_t seed;                     /* sampling at temperature > 0 */
} choir_whisper_params;

/* openai/whisper's transcribe() defaults: transcribe, detect language,
 * timestamps on, greedy (beam 1), best_of 5, patience 1, temperatures
 * 0, 0.2, ..., 1.0, thresholds 2.4 / -1.0 / 0.6, sample_len 224. */
void choir_whisper_default_params(choir_whisper_params *p);

/* One window to decode. */
typedef struct choir_whisper_window {
    const choir_whisper_cross *cross; /* its encoder K/V (not owned) */
    const int32_t *prompt;            /* previous text tokens (no specials), or NULL */
    int n_prompt;                     /* the last n_text_ctx/2 - 1 are used */
    int language;                     /* overrides params.language when >= 0 */
    uint64_t seed;                    /* mixed into params.seed for this window */
} choir_whisper_window;

typedef struct choir_whisper_result {
    int32_t *tokens;        /* sampled tokens up to (not including) eot; choir_alloc'd */
    int n_tokens;
    char *text;             /* decoded text of tokens < eot, trimmed; NULL without tokenizer */
    int language;           /* index used (detected or given) */
    float temperature;      /* the temperature whose result was kept */
    float sum_logprob;
    float avg_logprob;      /* sum_logprob / (n_tokens + 1) */
    float no_speech_prob;   /* P(<|nospeech|>) at the sot position, first pass */
    float compression_ratio;/* len(text) / len(zlib(text)); 0 without tokenizer */
} choir_whisper_result;

/* Frees what a result holds and zeroes it. NULL is a no-op. */
void choir_whisper_result_clear(choir_whisper_result *r);

/* Detects the language of a window: one decoder step on [sot], restricted to
 * the language tokens. *lang is the index; probs [num_languages] (may be NULL)
 * receives the probabilities. English-only models give 0 ("en"). */
int choir_whisper_detect_language(const choir_whisper *m, const choir_whisper_cross *cross,
                                  int *lang, float *probs, choir_err *err);

/* Decodes `n` windows together at one temperature (no fallback): every
 * sequence of every window (1, beam_size or best_of per window) goes through
 * the decoder in one batch per step. results[n] are filled (clear them with
 * choir_whisper_result_clear). `tok` may be NULL (no text, no compression
 * ratio). Each window's result is the same as when it is decoded alone. */
int choir_whisper_decode_windows(const choir_whisper *m, const choir_tokenizer *tok,
                                 const choir_whisper_window *windows, int n,
                                 const choir_whisper_params *p, float temperature,
                                 choir_whisper_result *results, choir_err *err);

/* As choir_whisper_decode_windows, with openai's temperature fallback: windows
 * whose result needs it are decoded again, together, at the next temperature. */
int choir_whisper_decode_fallback(const choir_whisper *m, const choir_tokenizer *tok,
                                  const choir_whisper_window *windows, int n,
                                  const choir_whisper_params *p, choir_whisper_result *results,
                                  choir_err *err);

/* len(text) / len(zlib.compress(text)) as Python computes it (zlib level 6,
 * header and checksum included); 0 when zlib cannot be loaded or len is 0. */
float choir_whisper_compression_ratio(const char *text, size_t len);

/* Engine requests (choir/model.h, choir_model_whisper): a request's `extra`
 * may point to a choir_whisper_params holding the decoding parameters; its
 * language, task, timestamps and temperature fields override those. */

/* --- long audio (whisper_transcribe.c) -------------------------------------- */

typedef struct choir_whisper_segment {
    double start, end;      /* seconds from the start of the audio */
    char *text;             /* as decoded (usually with a leading space) */
    int32_t *tokens;        /* text and timestamp tokens of the segment */
    int n_tokens;
    float avg_logprob, no_speech_prob, temperature, compression_ratio;
    int64_t seek;           /* mel frame (10 ms) where its window began (openai's seek) */
    /* With opts.word_timestamps: its words (texts owned, choir_alloc'd), in
     * order; the segment's start and end are then those openai refines from
     * them. NULL / 0 otherwise. */
    choir_word *words;
    int n_words;
} choir_whisper_segment;

typedef struct choir_whisper_transcript {
    choir_whisper_segment *segments; /* segments with text, in time order */
    int n_segments;
    int language;                    /* language index used */
    char *text;                      /* the whole transcript */
    double duration;                 /* seconds of audio */
} choir_whisper_transcript;

/* Frees what a transcript holds and zeroes it. NULL is a no-op. */
void choir_whisper_transcript_clear(choir_whisper_transcript *t);

/* A span of audio in samples at 16 kHz: [start, end). */
typedef struct choir_whisper_span {
    int64_t start, end;
} choir_whisper_span;

/* Called after each window with the seconds done and the total. */
typedef void (*choir_whisper_progress_fn)(void *user, double done_s, double total_s);
/* Called with each segment as soon as it is final (in time order for each
 * input; `input` is its index in the call). The segment is valid during the
 * callback only. Return nonzero to stop: the call then fails with
 * CHOIR_ECANCELED. */
typedef int (*choir_whisper_segment_fn)(void *user, int input, const choir_whisper_segment *seg);

typedef struct choir_whisper_transcribe_opts {
    choir_whisper_params params;
    /* Sequential mode (batched false): openai's seek loop over 30-s windows of
     * the whole file's mel, each window prompted with the previous text. */
    bool condition_on_previous_text; /* true */
    const char *initial_prompt;      /* NULL or text given as the first prompt */
    /* Batched mode (batched true): `spans` in time order (e.g. from VAD;
     * longer than 30 s are cut, neighbours merged, gaps included, while they
     * fit in 30 s) or, when NULL, consecutive 30-s windows; each window is
     * decoded on its own (no previous-text prompt), batch_size at a time, as
     * faster-whisper's batched pipeline and WhisperX do. */
    bool batched;
    int batch_size;                  /* windows per batch (>= 1) */
    /* Batched mode: the next batch's log-mels computed on a thread of their
     * own while the current batch is encoded and decoded. 0 (default): on a
     * GPU model only, where the host would otherwise leave the device idle;
     * 1: always; -1: never. The results are the same either way. */
    int prefetch_mels;
    const choir_whisper_span *spans;
    int n_spans;
    choir_whisper_progress_fn progress; /* may be NULL */
    void *progress_user;
    choir_whisper_segment_fn on_segment; /* may be NULL */
    void *segment_user;
    /* Polled before each window (each round of the lockstep seek loop, each
     * batch of the batched pipeline); nonzero stops input `input`: its
     * remaining windows are not decoded and its transcript is left partial.
     * When every input has stopped, the call returns CHOIR_ECANCELED. May be
     * NULL. */
    int (*cancelled)(void *user, int input);
    void *cancel_user;
    /* Word timestamps (choir/whisper_words.h), as openai's
     * transcribe(word_timestamps=True): after each window is decoded, its
     * text tokens are aligned to its audio through the cross-attention of
     * the model's alignment heads, each segment gets its words, its times
     * are refined from them, and in sequential mode the next window starts
     * where the last word ended (unless the window ended on a single
     * timestamp). Needs params.timestamps. CPU models only so far: on a GPU
     * the call fails with CHOIR_EUNSUPPORTED. */
    bool word_timestamps;
    /* Working memory of the call (the engine's batch arena), or NULL. Given,
     * the buffers of the call, the caches of its windows and hypotheses and
     * every encoder and decoder pass (the kernel scratch included) are carved
     * from it on a CPU model, and the host buffers on a GPU one; the call
     * allocates nothing per step, and returns with the arena as it found it.
     * Too small, the call fails with CHOIR_ENOMEM. Outputs (the transcript),
     * the whole recording's mel and the word-timestamp alignment use the
     * counted allocator either way. NULL: all of it from the counted
     * allocator, call by call. */
    choir_arena *arena;
} choir_whisper_transcribe_opts;

void choir_whisper_default_transcribe_opts(choir_whisper_transcribe_opts *o);

/* One recording for choir_whisper_transcribe_batch. */
typedef struct choir_whisper_input {
    const float *pcm;           /* 16 kHz mono */
    int64_t n_samples;
    int language;               /* >= 0 overrides params.language (-1: as params) */
    const char *initial_prompt; /* NULL: opts' */
} choir_whisper_input;

/* Transcribes several recordings. With the batched pipeline (opts.batched;
 * opts.spans only with one input): windows of all inputs are decoded
 * batch_size at a time, each window's segments going to its own transcript
 * out[i]; an input's open language is detected on its first window, and its
 * initial prompt prompts each of its windows. With batched false, every input
 * runs openai's seek loop as it would alone (the same transcript as
 * choir_whisper_transcribe gives it), the inputs' current windows decoded
 * together. Segment times are monotonic and inside the recording whatever the
 * model samples: 0 <= start <= end <= duration, and each start >= the
 * previous segment's end. Returns 0 or a negative code (then no transcript
 * is kept). */
int choir_whisper_transcribe_batch(const choir_whisper *m, const choir_tokenizer *tok,
                                   const choir_whisper_input *in, int n_in,
                                   const choir_whisper_transcribe_opts *o,
                                   choir_whisper_transcript *out, choir_err *err);

/* Transcribes pcm[n] (16 kHz mono). The language is params.language, or
 * detected once on the first window. Fills `out` (clear it with
 * choir_whisper_transcript_clear). Returns 0 or a negative code. */
/* Fills out[0 .. t->n_segments) with the engine's view of t's segments
 * (choir/model.h: times, text, tokens and decoding figures, pointers into t,
 * valid while t is). */
void choir_whisper_segment_views(const choir_whisper_transcript *t, choir_segment *out);

int choir_whisper_transcribe(const choir_whisper *m, const choir_tokenizer *tok, const float *pcm,
                             int64_t n, const choir_whisper_transcribe_opts *o,
                             choir_whisper_transcript *out, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
