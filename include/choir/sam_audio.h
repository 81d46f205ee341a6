/* choir/sam_audio.h: SAM-Audio, text- and span-prompted source separation at
 * 48 kHz (../shared/specs/sam_audio.md).
 *
 * A recording is encoded by the DAC-VAE codec to C-channel latents at 25 Hz
 * (hop 1920); a flow-matching DiT, conditioned on the T5 encoding of a text
 * description, on the mixture's latents and on optional span anchors, turns
 * Gaussian noise [T, 2C] into a target and a residual latent by integrating
 * an ODE from t = 0 to 1 (midpoint, 16 steps by default); the codec decodes
 * both, with its watermark (a 16-bit message, a parameter here, so output is
 * deterministic). The residual is generated, not mixture minus target.
 *
 * Long recordings go through separate_long: chunks of chunk_seconds that
 * overlap by overlap_seconds, each with its own noise (seed + chunk index),
 * joined by a raised-cosine crossfade, the text encoded once, memory bounded
 * by one chunk. Output is delivered chunk by chunk as it becomes final.
 *
 * Units: audio is mono float in [-1, 1] at 48000 Hz; latents are time-major
 * [T, C]; times in seconds. A loaded model is immutable and may be shared by
 * many threads. Memory is planned: every call runs in one host arena, the
 * caller's (choir_sam_params.arena: the engine's batch arena) or one of the
 * call's planned size reserved when it starts and freed before it returns,
 * and allocates nothing while it computes. On the CPU every buffer of the
 * codec, the DiT, the ODE and T5, and the kernels' scratch, comes from that
 * arena; on a GPU the device memory comes from the device (a stream of the
 * model's backend per stage, choir/backend.h) and the arena holds the host
 * side. */
#ifndef CHOIR_SAM_AUDIO_H
#define CHOIR_SAM_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "choir/arena.h"
#include "choir/chunker.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_SAM_RATE 48000
#define CHOIR_SAM_WM_BITS 16
#define CHOIR_SAM_MAX_ANCHORS 64

typedef struct choir_sam choir_sam;

/* Loads a model directory: config.json (SAMAudioConfig's fields) plus Meta's
 * checkpoint.pt (read by the restricted .pth reader, never unpickled), or
 * model.safetensors (or shards) in the same names, or mlx-community's
 * layout, or choir's native layout written by `choir convert` (quantized DiT
 * linears allowed). Weight-norm pairs are folded, the DiT's strided head
 * split is folded into wq/wk/wv, vision / ranker / span-predictor tensors
 * are skipped. The T5 encoder and its tokenizer.json come from `t5_dir`, or
 * when NULL the first of DIR/t5, DIR/t5-base, DIR/text_encoder that exists;
 * without one the model loads but text prompts fail (choir_sam_has_text).
 * NULL (and err naming the file and tensor) on failure. */
choir_sam *choir_sam_load(const char *dir, const char *t5_dir, choir_err *err);
/* Where the codec and the DiT run, and how (T5 always runs on the host). */
typedef struct choir_sam_load_opts {
    const char *t5_dir; /* as choir_sam_load's; NULL: looked for in DIR */
    int device;         /* 0: the CPU; k >= 1: CUDA device k - 1 (CHOIR_EUNSUPPORTED in a
                         * build without CUDA, CHOIR_ENOTFOUND without that device) */
    int bf16;           /* CUDA: the DiT's f32 matrices stored as bf16 */
} choir_sam_load_opts;
/* choir_sam_load with options (NULL: the CPU, T5 looked for in DIR). On a
 * GPU the weights are copied to the device at load; every call below then
 * uploads its inputs, runs there and downloads its outputs, one call at a
 * time per model (the device is locked around each). */
choir_sam *choir_sam_load_ex(const char *dir, const choir_sam_load_opts *opts, choir_err *err);
/* "cpu" or "cuda:N". */
const char *choir_sam_backend_name(const choir_sam *m);
/* Device bytes the model holds now (its weights, between calls), and in
 * *peak (may be NULL) the most held so far, working memory included; 0 on
 * the CPU, whose memory choir/alloc.h counts. */
int64_t choir_sam_device_bytes(const choir_sam *m, int64_t *peak);
/* NULL is a no-op. */
void choir_sam_free(choir_sam *m);
/* Bytes of weights mapped or held (codec, DiT, T5). */
size_t choir_sam_weight_bytes(const choir_sam *m);

int choir_sam_hop(const choir_sam *m);               /* samples per latent frame */
int choir_sam_channels(const choir_sam *m);          /* C (codebook_dim) */
int choir_sam_has_text(const choir_sam *m);          /* 1 when a T5 encoder is loaded */
int64_t choir_sam_text_dim(const choir_sam *m);
/* Latent frames of `samples` input samples: ceil(samples / hop). */
int64_t choir_sam_frames(const choir_sam *m, int64_t samples);
/* The largest number of frames one pass may hold (the RoPE table). */
int64_t choir_sam_max_frames(const choir_sam *m);

/* --- text ---------------------------------------------------------------- */

/* Token ids of `text` (tokenizer.json pipeline, </s> appended, truncated to
 * the model's max_length). *ids is choir_alloc'd (caller frees). */
int choir_sam_tokenize(const choir_sam *m, const char *text, int32_t **ids, int *n_ids, choir_err *err);
/* T5 encoder over ids[n] (all valid): out [n, text_dim]. */
int choir_sam_text_features(const choir_sam *m, const int32_t *ids, int n, float *out, choir_err *err);

/* --- codec --------------------------------------------------------------- */

/* Encoder mean latent of x[n] (reflect-padded to a multiple of the hop):
 * latent [frames(n), C] time-major. */
int choir_sam_encode(const choir_sam *m, const float *x, int64_t n, float *latent, choir_err *err);
/* Decoder of latent [T, C] to y[T * hop], with the watermark carrying
 * `message` (16 bits, each 0/1; NULL: choir's fixed default message). */
int choir_sam_decode(const choir_sam *m, const float *latent, int64_t T, const uint8_t *message, float *y,
                     choir_err *err);
/* choir's default watermark message. */
extern const uint8_t choir_sam_default_message[CHOIR_SAM_WM_BITS];

/* --- prompts ------------------------------------------------------------- */

/* A span anchor: frames ceil(start*rate/hop) .. ceil(end*rate/hop) (end
 * exclusive) are marked as target (+) or not target (-). */
typedef struct choir_sam_anchor {
    int positive;
    double start_s, end_s;
} choir_sam_anchor;

/* Parses anchors from text: "+:0.5:1.2,-:3:4" (also with spaces or ';'), or
 * a JSON list [["+", 0.5, 1.2], ["-", 3, 4]]. Empty / NULL gives none.
 * Returns 0 or CHOIR_EINVAL naming the bad entry. */
int choir_sam_parse_anchors(const char *text, choir_sam_anchor *out, int cap, int *n, choir_err *err);

/* The reference's anchor tables for an item of T frames of which `valid` are
 * real: ids[n + 2] = <null>, <pad>, then each anchor's token (+ = 1, - = 2),
 * and alignment[T] (0 for valid frames, 1 beyond, each anchor's frames its
 * slot). Anchors are applied in order (later ones win). */
void choir_sam_anchor_tables(const choir_sam *m, const choir_sam_anchor *a, int n, int64_t T, int64_t valid,
                             int32_t *ids, int32_t *alignment);

/* --- one network evaluation ---------------------------------------------- */

/* One item of a DiT batch. Items of a batch may differ in length: each is
 * computed at its own `frames`; `valid_frames` (<= frames) keys are attended
 * in self-attention (the rest are padding, as in a padded reference batch;
 * normally valid_frames = frames). */
typedef struct choir_sam_item {
    int64_t frames, valid_frames;
    const float *features;          /* [frames, C] codec mean latents */
    const float *text;              /* [text_len, text_dim] T5 output */
    int text_len;                   /* keys attended in cross-attention */
    const int32_t *anchor_ids;      /* [n_anchor_ids]; NULL: <null>/<pad> */
    int n_anchor_ids;
    const int32_t *anchor_alignment; /* [frames] into anchor_ids; NULL: 0 valid, 1 beyond */
} choir_sam_item;

/* The velocity v_i [frames_i, 2C] of each item at x_i [frames_i, 2C] and time
 * t[i]. Returns 0 or a negative status. */
int choir_sam_velocity(const choir_sam *m, const choir_sam_item *items, int n, const float *t,
                       const float *const *x, float *const *v, choir_err *err);

/* --- separation ---------------------------------------------------------- */

typedef enum choir_sam_method { CHOIR_SAM_MIDPOINT = 0, CHOIR_SAM_EULER = 1 } choir_sam_method;

typedef struct choir_sam_params {
    choir_sam_method method; /* default midpoint */
    int steps;               /* ODE steps over [0, 1] (default 16: 32 evaluations with midpoint) */
    double chunk_seconds;    /* separate_long chunk (default 10; choir_sam_chunk_limits: 0.2..400) */
    double overlap_seconds;  /* crossfade (default 3; at most chunk / 2) */
    uint64_t seed;           /* noise of chunk i from seed + i (default 42) */
    const uint8_t *message;  /* watermark bits; NULL: choir_sam_default_message */
    /* Working memory of a job and of its rounds (the engine's batch arena),
     * or NULL. Given, the job's state (text features, crossfade tails) is
     * carved from it at choir_sam_job_create (and given back only when the
     * caller releases the arena), T5's working memory above it, and every
     * round's buffers above those (given back when the round ends); the
     * jobs of one round must share it. Too small, the call fails with
     * CHOIR_ENOMEM before the round emits anything. NULL: the job and each
     * round reserve their planned memory from the counted allocator. The
     * input audio and what the emit callback keeps are the caller's. */
    choir_arena *arena;
} choir_sam_params;

/* SAM-Audio's chunking: chunks of 0.2..400 s (the DiT's position table ends
 * past 400 s of latents), overlaps of at most half a chunk. */
extern const choir_chunk_limits choir_sam_chunk_limits;

void choir_sam_default_params(choir_sam_params *p);
/* Checks params (chunking with choir_chunk_check against
 * choir_sam_chunk_limits); 0 or CHOIR_EINVAL with a message. */
int choir_sam_check_params(const choir_sam_params *p, choir_err *err);

/* Integrates the ODE for a batch of items in lockstep: x[i] holds the noise
 * [frames_i, 2C] on entry and the generated latents on return (target in
 * channels 0..C-1, residual in C..2C-1). */
int choir_sam_ode(const choir_sam *m, const choir_sam_item *items, int n, float *const *x,
                  const choir_sam_params *p, choir_err *err);

/* Gaussian noise [frames, 2C] from `seed` (choir's generator). */
void choir_sam_noise(const choir_sam *m, uint64_t seed, int64_t frames, float *out);

/* Receives the next `n` final samples of target and residual (valid during
 * the call), starting at sample `offset`. Returns 0 or a negative status
 * that stops the run. */
typedef int (*choir_sam_emit_fn)(void *user, const float *target, const float *residual, int64_t n,
                                 int64_t offset, choir_err *err);

/* A separation of one recording, advanced chunk by chunk (see
 * choir_sam_run_round). `x` (n samples at 48 kHz), `text`, `anchors` are
 * borrowed until choir_sam_job_free; the text is encoded at creation. */
typedef struct choir_sam_job choir_sam_job;

choir_sam_job *choir_sam_job_create(const choir_sam *m, const float *x, int64_t n, const char *text,
                                    const choir_sam_anchor *anchors, int n_anchors,
                                    const choir_sam_params *p, choir_sam_emit_fn emit, void *user,
                                    choir_err *err);
void choir_sam_job_free(choir_sam_job *job);
int choir_sam_job_done(const choir_sam_job *job);
/* Chunks in the job's plan / finished so far. */
int choir_sam_job_chunks(const choir_sam_job *job);
int choir_sam_job_chunks_done(const choir_sam_job *job);

/* Advances every unfinished job of jobs[n] by one chunk; the DiT evaluations
 * of all jobs that share (method, steps) run as one batch. Each job emits its
 * final samples. Returns 0, or the first failure (jobs[i] are then unusable). */
int choir_sam_run_round(const choir_sam *m, choir_sam_job *const *jobs, int n, choir_err *err);

/* Whole-recording convenience: separate x[n] into target[n] and residual[n]
 * (caller-allocated) with separate_long's plan. */
int choir_sam_separate(const choir_sam *m, const float *x, int64_t n, const char *text,
                       const choir_sam_anchor *anchors, int n_anchors, const choir_sam_params *p,
                       float *target, float *residual, choir_err *err);

/* Token ids `text` makes (as choir_sam_tokenize; the model's max_length,
 * 512, when it cannot tell: no model, no T5). */
int choir_sam_count_tokens(const choir_sam *m, const char *text);
/* Arena bytes of one round of one chunk of `frames` latent frames with a
 * text of `text_tokens` tokens (its latents and decoded audio, the largest
 * of its encode, ODE and decode stages), and of a whole job over n samples
 * (its state plus the larger of T5 and its first, longest, round): the peak
 * of the plan choir_sam_params.arena is carved by, on m's backend (on a GPU
 * the host side only). text_tokens < 1: the model's max_length. Without a
 * model (m NULL) a bound at the published base sizes. The jobs of one
 * round take at most the sum of their job bytes. */
int64_t choir_sam_chunk_bytes(const choir_sam *m, int64_t frames, int text_tokens);
int64_t choir_sam_job_bytes(const choir_sam *m, int64_t n_samples, int text_tokens, const choir_sam_params *p);
/* Device bytes the job holds on a GPU beyond the weights: its largest
 * stage's working memory plus the largest kernel scratch of any stage (the
 * context's, which stays grown; f32 weights); 0 on the CPU; m NULL: as
 * choir_sam_job_bytes without a model. */
int64_t choir_sam_job_device_bytes(const choir_sam *m, int64_t n_samples, int text_tokens,
                                   const choir_sam_params *p);

/* --- behind the engine (choir_model_sam_audio, task STS) ----------------- */

/* Receives the residual samples that go with the target output about to be
 * delivered (same count and offset, 48 kHz), from the engine's worker. */
typedef void (*choir_sam_residual_fn)(void *user, const float *residual, int64_t n, int64_t offset);

/* The `extra` of an STS request to a SAM-Audio model (all optional; NULL
 * extra means the description "speech" and defaults). The target is the
 * request's audio output (at 48 kHz); the residual goes to on_residual. The
 * sts input's chunk_seconds / overlap_seconds apply. */
typedef struct choir_sam_request {
    const char *description;
    const choir_sam_anchor *anchors;
    int n_anchors;
    int steps;                  /* 0: default */
    int method;                 /* -1 or 0: midpoint, 1: euler */
    int has_seed;
    uint64_t seed;
    choir_sam_residual_fn on_residual;
    void *residual_user;
    int output_residual;        /* 1: the audio output is the residual, on_residual gets the target */
} choir_sam_request;

#ifdef __cplusplus
}
#endif
#endif
