/* choir/kokoro.h: Kokoro-82M text to speech (24 kHz mono float audio).
 *
 * A choir_kokoro holds the immutable weights, shared by any number of threads;
 * every synthesis call keeps its own state, so concurrent calls on one model
 * are safe. The model reads the official kokoro-v1_0.pth, a safetensors file
 * in its naming (group + key without `module.`, as `choir dev weights` and
 * mlx-community/Kokoro-82M-bf16 write it), and the same in any float dtype or
 * with MLX-quantized linear layers (`choir convert`). See ../../docs/kokoro.md
 * and ../shared/specs/kokoro.md for the forward pass. */
#ifndef CHOIR_KOKORO_H
#define CHOIR_KOKORO_H

#include <stdbool.h>
#include <stdint.h>

#include "choir/arena.h"
#include "choir/error.h"
#include "choir/phonemizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_KOKORO_SAMPLE_RATE 24000
#define CHOIR_KOKORO_MAX_PHONEMES 510   /* per piece; 512 ids with the two boundaries */
#define CHOIR_KOKORO_STYLE_DIM 256      /* one voice-pack row: decoder 128 + prosody 128 */
#define CHOIR_KOKORO_VOICE_ROWS 510
#define CHOIR_KOKORO_SAMPLES_PER_FRAME 600 /* one predicted duration frame = 25 ms */

typedef struct choir_kokoro choir_kokoro;

/* Loads a model from `path`: a directory holding config.json and one of
 * model.safetensors (or shards + index), kokoro-v1_0.safetensors,
 * kokoro-v1_0.pth, or any single *.safetensors / *.pth; or such a file itself
 * (config.json is then looked for beside it). Weight norm is folded and float
 * weights of convolutions and LSTMs are converted to f32 at load; linear
 * layers point into the mapped file in their stored dtype. Returns NULL (and
 * err naming the file and tensor) on failure. */
choir_kokoro *choir_kokoro_load(const char *path, choir_err *err);
/* Frees the model. NULL is a no-op. */
void choir_kokoro_free(choir_kokoro *m);
/* Bytes of weights the model holds (allocated copies plus mapped tensors). */
int64_t choir_kokoro_weight_bytes(const choir_kokoro *m);

/* Phonemes to model input ids: ids = [0, vocab[c] for each code point c of
 * `phonemes` found in config.json's vocab, 0]. Writes at most `max_ids` ids
 * and returns how many were written (>= 2), or a negative CHOIR_E* code
 * (CHOIR_ETOOBIG when more than CHOIR_KOKORO_MAX_PHONEMES remain, CHOIR_EINVAL
 * for invalid UTF-8). *n_dropped (may be NULL) receives the number of code
 * points not in the vocabulary, which are skipped. */
int choir_kokoro_phonemes_to_ids(const choir_kokoro *m, const char *phonemes, int32_t *ids,
                                 int max_ids, int *n_dropped, choir_err *err);

/* --- voices ------------------------------------------------------------- */

/* A voice pack: CHOIR_KOKORO_VOICE_ROWS rows of CHOIR_KOKORO_STYLE_DIM floats. */
typedef struct choir_kokoro_voice choir_kokoro_voice;

/* Loads a voice from `spec`: a file path (.bin raw float32 [510][256], .pt
 * tensor [510,1,256], .safetensors with tensor "voice"), or a name looked up
 * as voices_dir/NAME.{bin,pt,safetensors}, or a weighted mix
 * "af_heart(2)+am_adam(1)" (weights default to 1 and are normalised to sum 1;
 * "a,b" is the plain mean). voices_dir may be NULL for paths. NULL (and err)
 * on failure. */
choir_kokoro_voice *choir_kokoro_voice_load(const char *spec, const char *voices_dir,
                                            choir_err *err);
/* The same for an untrusted `spec` (an API request): every term of the mix
 * must be a voice name (letters, digits, '_', '-', '.', not starting with
 * '.') found as voices_dir/NAME.{bin,pt,safetensors}; no other file is
 * opened, and error messages name the voice, never a path (CHOIR_EINVAL for
 * a term that is not a name, CHOIR_ENOTFOUND for one not in the folder). */
choir_kokoro_voice *choir_kokoro_voice_load_named(const char *spec, const char *voices_dir,
                                                  choir_err *err);
void choir_kokoro_voice_free(choir_kokoro_voice *v);
/* The style vector for a piece of `n_phonemes` phoneme code points (the
 * reference uses row n_phonemes - 1, clamped to the pack). Points into v. */
const float *choir_kokoro_voice_style(const choir_kokoro_voice *v, int n_phonemes);

/* --- synthesis from ids ------------------------------------------------- */

typedef enum choir_kokoro_noise {
    CHOIR_KOKORO_NOISE_SEEDED = 0, /* SineGen's Gaussian noise from a seeded generator */
    CHOIR_KOKORO_NOISE_ZERO = 1    /* all noise 0: reproduces the reference fixtures */
} choir_kokoro_noise;

/* Receives each named intermediate tensor of a forward pass (names as in the
 * parity fixtures: bert_out [T,768], d_en [512,T], duration_encoder_out
 * [T,640], duration [T], pred_dur [T] (as floats), F0_pred [2L], N_pred [2L],
 * text_encoder_out [512,T], asr [512,L], audio [600L]). `data` is valid only
 * during the call. */
typedef void (*choir_kokoro_trace_fn)(void *user, const char *stage, const float *data, int ndim,
                                      const int64_t *shape);

/* The speaking rates choir takes (`choir tts --speed`, a TTS request's
 * speed, which the engine refuses outside them at submit; 0 there is 1). */
#define CHOIR_KOKORO_MIN_SPEED 0.01
#define CHOIR_KOKORO_MAX_SPEED 100.0

typedef struct choir_kokoro_params {
    float speed;                   /* > 0; durations are divided by it (default 1) */
    choir_kokoro_noise noise;      /* default CHOIR_KOKORO_NOISE_SEEDED */
    uint64_t seed;                 /* for CHOIR_KOKORO_NOISE_SEEDED (default 0) */
    choir_kokoro_trace_fn trace;   /* NULL: no tracing */
    void *trace_user;
    /* Frames per id to use instead of the predicted ones (n_ids values, each
     * 1..1000), or NULL. The "pred_dur" trace still shows the predicted ones.
     * For parity runs of reduced-precision weights, where a rounding can flip. */
    const int32_t *durations;
    /* Working memory of the call (the engine's batch arena), or NULL. Given,
     * on a model without a GPU every buffer of the forward (the front's
     * workspaces, each piece's decoder inputs, every network stage's working
     * memory and kernel scratch) is carved from it, pieces of a batch one
     * after another, so the forward allocates nothing; the call returns
     * with the arena as it found it. Too small, the call fails with
     * CHOIR_ENOMEM. The audio (the caller's) uses the counted allocator
     * either way. With a GPU attached the arena is not used. NULL: the
     * counted allocator, stage by stage. */
    choir_arena *arena;
} choir_kokoro_params;

choir_kokoro_params choir_kokoro_default_params(void);

/* One piece of a batch: input ids (with the two boundary 0s, 3..512 of them)
 * and its 256-float style row. On return `audio` holds n_samples floats at 24
 * kHz (choir_alloc'd, CHOIR_MEM_IO; the caller frees it with choir_free). */
typedef struct choir_kokoro_item {
    const int32_t *ids;
    int n_ids;
    const float *style;
    float speed;                   /* 0: use params->speed */
    float *audio;
    int64_t n_samples;
} choir_kokoro_item;

/* Synthesises one piece. *audio (choir_alloc'd, caller frees with choir_free)
 * receives 600 * sum(pred_dur) samples. Returns 0 or a negative CHOIR_E*. */
int choir_kokoro_synthesize_ids(const choir_kokoro *m, const int32_t *ids, int n_ids,
                                const float *style, const choir_kokoro_params *params,
                                float **audio, int64_t *n_samples, choir_err *err);

/* Synthesises n items together; each item's audio equals what
 * choir_kokoro_synthesize_ids gives for it alone (bit for bit in zero-noise
 * mode; in seeded mode item i uses seed + i). Items run concurrently on the
 * default pool. On failure every item's audio is NULL. */
int choir_kokoro_synthesize_batch(const choir_kokoro *m, choir_kokoro_item *items, int n,
                                  const choir_kokoro_params *params, choir_err *err);

/* --- text to speech, streamed piece by piece ----------------------------- */

/* Receives one piece's audio (n_samples at 24 kHz; valid only during the
 * call), in text order, as soon as it is ready. Return 0 to go on, non-zero
 * to stop (choir_kokoro_speak then returns CHOIR_ECANCELED). */
typedef int (*choir_kokoro_audio_fn)(void *user, const float *pcm, int64_t n_samples, int piece,
                                     int n_pieces);

typedef struct choir_kokoro_speak_params {
    choir_kokoro_params synth; /* speed, noise, seed (piece i uses seed + i); trace unused */
    int batch;                 /* pieces synthesised together after the first (default 1) */
    bool short_first;          /* first piece = the first clause only, so audio starts
                                * early (default true) */
} choir_kokoro_speak_params;

choir_kokoro_speak_params choir_kokoro_default_speak_params(void);

/* Text to speech: phonemizes `text` with `ph`, splits it into pieces of at
 * most CHOIR_KOKORO_MAX_PHONEMES at sentence / clause ends, and synthesises
 * them with voice `v` (each piece uses the style row of its own length),
 * delivering each piece's audio to on_audio in order. Phoneme symbols outside
 * the model's vocabulary are dropped with a warning. Returns 0, or a negative
 * CHOIR_E* (CHOIR_ECANCELED when on_audio asked to stop). */
int choir_kokoro_speak(const choir_kokoro *m, choir_phonemizer *ph, const choir_kokoro_voice *v,
                       const char *text, const choir_kokoro_speak_params *params,
                       choir_kokoro_audio_fn on_audio, void *user, choir_err *err);

/* Bytes one forward pass of T ids producing L frames takes at most from the
 * call's arena (choir_kokoro_params.arena): workspaces, the network's
 * working memory and kernel scratch at the default pool's thread count;
 * the audio output not included. */
int64_t choir_kokoro_estimate_bytes(int n_ids, int64_t frames);

/* One piece's decoder inputs (host memory, read during the call). */
typedef struct choir_kokoro_decode_input {
    const float *asr;    /* [512, frames]: text encoding aligned to frames */
    const float *f0;     /* [2 frames]: F0 in Hz */
    const float *n;      /* [2 frames]: energy curve */
    const float *noise;  /* [600 frames, 9] SineGen Gaussian draws, or NULL: */
    const float *style;  /* the piece's 256-float style row (the decoder uses the first 128) */
    int64_t frames;      /* >= 1 */
    /* with noise NULL: noise_seeded gives the draws of the seeded generator
     * for noise_seed (those of CHOIR_KOKORO_NOISE_SEEDED), made where the
     * harmonic source is made (on the GPU when the decoder runs there);
     * false: zero noise */
    bool noise_seeded;
    uint64_t noise_seed;
} choir_kokoro_decode_input;

/* Work counters of a GPU attachment (choir_kokoro_gpu_get_stats; the type
 * exists in every build) since create or the last reset: the executed convolution
 * FLOPs (2 per multiply-add, padding included), the device bytes the
 * kernels read and wrote (counted per kernel from its tensor sizes), the
 * seconds spent in device decoding (upload to download), and decode calls. */
typedef struct choir_kokoro_gpu_stats {
    double flops, bytes, seconds;
    int64_t calls, pieces;
    int64_t weight_bytes;   /* device bytes of the uploaded weights (LSTMs included) */
    double lstm_seconds;    /* the front's LSTMs on the device (upload to download) */
    int64_t lstm_calls;
    double albert_seconds;  /* ALBERT on the device (upload to download) */
    int64_t albert_calls;
    double f0n_seconds;     /* the F0 / N residual blocks on the device */
    int64_t f0n_calls;
} choir_kokoro_gpu_stats;

/* --- the CUDA backend (CUDA builds only) --------------------------------- */
#ifdef CHOIR_HAVE_CUDA
#include "choir/cuda.h"

/* The decoder and iSTFTNet generator (~all of Kokoro's compute) held on one
 * GPU, and the front's costly parts: ALBERT, the six bidirectional LSTMs
 * (duration encoder, duration LSTM, the shared LSTM over frames, the text
 * encoder's), which are sequential on the CPU, and the F0 / N residual
 * blocks (in f32 whatever gpu_bf16 says), and the text encoder's
 * embedding and convolutions. The AdaLayerNorms stay on the CPU; so do the
 * generator's harmonic source and its 20-point STFT (spread over the CPU's
 * threads; its phase reaches ~1e5 rad, where float32
 * rounding matters: it is computed exactly as on the CPU and uploaded). The
 * rest runs batched: pieces are padded to the longest, every kernel keeps
 * the padding at zero, and each piece's audio equals its unbatched result to
 * float32 rounding (not bit for bit: cuBLAS sums in its own order). */
typedef struct choir_kokoro_gpu choir_kokoro_gpu;

/* Uploads the decoder's weights to `cu`'s device (convolutions as f32, or
 * bf16 when gpu_bf16 is non-zero: tensor-core products with f32 accumulation;
 * norms, biases and Snake alphas stay f32). Device memory is counted on `cu`.
 * The model and the context must outlive the result. NULL and err on failure
 * (nothing stays allocated). */
choir_kokoro_gpu *choir_kokoro_gpu_create(const choir_kokoro *m, choir_cuda *cu, int gpu_bf16,
                                          choir_err *err);
/* Frees the device weights and buffers. NULL is a no-op. */
void choir_kokoro_gpu_free(choir_kokoro_gpu *g);


/* Decodes n pieces in one batch on the GPU: audio[i] receives 600 *
 * in[i].frames samples at 24 kHz (choir_alloc'd, CHOIR_MEM_IO; the caller
 * frees each with choir_free). Thread-safe: calls are serialised on the
 * device (a mutex), and the calling thread's current CUDA device is set to
 * the context's. Device activations (~0.37 MB per frame of the longest piece,
 * times n) are kept between calls and grown on demand. On failure every
 * audio[i] is NULL. */
int choir_kokoro_gpu_decode(choir_kokoro_gpu *g, const choir_kokoro_decode_input *in, int n,
                            float **audio, choir_err *err);

/* Routes the decoder of every later synthesis on m (choir_kokoro_synthesize_ids,
 * _batch, choir_kokoro_speak) through g; NULL returns to the CPU. Call it
 * before the model is shared between threads; g must outlive that use. A
 * batch then runs its items' fronts as one batched front (ALBERT, each
 * BiLSTM and the F0 / N blocks one device call for all items; the CPU steps
 * between them per item on the pool) and decodes all of them in one GPU
 * batch. */
void choir_kokoro_set_gpu(choir_kokoro *m, choir_kokoro_gpu *g);

/* Device bytes for one batch of n pieces whose longest has `frames` frames
 * (activations, convolution scratch and the front's work buffer; weights not
 * included). */
int64_t choir_kokoro_gpu_estimate_bytes(int n, int64_t frames);

void choir_kokoro_gpu_get_stats(choir_kokoro_gpu *g, choir_kokoro_gpu_stats *out);
void choir_kokoro_gpu_reset_stats(choir_kokoro_gpu *g);
#endif /* CHOIR_HAVE_CUDA */

#ifdef __cplusplus
}
#endif
#endif
