/* choir/mossformer2.h: MossFormer2_SE_48K speech enhancement (48 kHz).
 *
 * The network and its front end follow ../shared/specs/mossformer2_se.md:
 * Kaldi log-mel fbank (60 bins) + deltas -> MossFormer2 mask network (24
 * FLASH + gated-FSMN layers at width 512) -> 961-bin mask on a 1920-point
 * STFT (hop 384, symmetric Hamming) -> iSTFT.
 *
 * Units: audio in and out is float in [-1, 1] (the caller's decoded samples)
 * at 48000 Hz; internally the model works on int16-scale values (x 32768) as
 * the reference does. Frames: T = 1 + (L - 1920) / 384 for a segment of L >=
 * 1920 samples.
 *
 * A loaded model (choir_mf2) is immutable and may be used from many threads
 * at once. Each call plans its working memory: one arena of the size it
 * needs (CHOIR_MEM_ACTIVATIONS), freed before it returns; a stream made with
 * choir_mf2_stream_create_in carves itself and every pass from the caller's
 * arena instead, so an engine batch runs inside its own arena. Kernel scratch
 * comes from the block bound to the calling thread (choir/kernels.h) when
 * one is; the STFT's per-frame buffers still come from the counted
 * allocator.
 *
 * Long recordings go one of two ways:
 *  - the reference's plan (choir_mf2_enhance_reference): one pass up to 20 s,
 *    else 4-s windows with a 3-s stride and hard cuts, needed for parity;
 *  - choir's default (choir_mf2_stream / choir_mf2_enhance_chunked): chunks of
 *    chunk_seconds overlapping by overlap_seconds, joined by a raised-cosine
 *    crossfade (choir/chunker.h), with memory bounded by the chunk. */
#ifndef CHOIR_MOSSFORMER2_H
#define CHOIR_MOSSFORMER2_H

#include <stddef.h>
#include <stdint.h>

#include "choir/chunker.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_MF2_RATE 48000
#define CHOIR_MF2_WIN 1920     /* samples per frame (40 ms) */
#define CHOIR_MF2_HOP 384      /* samples between frames (8 ms) */
#define CHOIR_MF2_MELS 60
#define CHOIR_MF2_FEATS 180    /* fbank + delta + delta-delta */
#define CHOIR_MF2_BINS 961     /* STFT bins of the mask */
#define CHOIR_MF2_DIM 512

typedef struct choir_mf2 choir_mf2;

/* Loads the model from `path`: a directory holding model.safetensors (or an
 * index), or the published layout (`last_best_checkpoint` naming a .pt file,
 * or last_best_checkpoint.pt), or one .safetensors / .pt / .pth file. PyTorch
 * files may wrap the state dict in a top-level "model" key and prefix keys
 * with "module."; safetensors may carry the prefix too. All 904 learnable
 * tensors must be present with their exact shapes; the constants (rotary and
 * sinusoid frequencies) are computed. Weights stay memory-mapped; linear
 * layers may be f32, f16, bf16 or MLX-quantized (config.json "quantization").
 * NULL (and err naming the file and the tensor) on failure. */
choir_mf2 *choir_mf2_load(const char *path, choir_err *err);
/* NULL is a no-op. */
void choir_mf2_free(choir_mf2 *m);
/* Bytes of weight data the model maps or holds. */
size_t choir_mf2_weight_bytes(const choir_mf2 *m);

/* Frames for a segment of `samples` samples (0 when shorter than one frame). */
int64_t choir_mf2_frames(int64_t samples);
/* Worst-case activation bytes of one pass over a segment of `samples`
 * samples (what choir_mf2_enhance allocates at most). */
int64_t choir_mf2_segment_bytes(int64_t samples);

typedef struct choir_mf2_params {
    float dither;     /* fbank dither (Gaussian, int16 scale); 0 = deterministic (default) */
    uint64_t seed;    /* seed of the dither generator */
    double chunk_seconds;   /* default mode: chunk length (default 12) */
    double overlap_seconds; /* default mode: crossfade length (default 1) */
} choir_mf2_params;

/* MossFormer2's chunking: chunks of 0.1..60 s, overlaps shorter than a chunk. */
extern const choir_chunk_limits choir_mf2_chunk_limits;

void choir_mf2_default_params(choir_mf2_params *p);
/* Checks params (chunking with choir_chunk_check against
 * choir_mf2_chunk_limits); 0 or CHOIR_EINVAL with a message. */
int choir_mf2_check_params(const choir_mf2_params *p, choir_err *err);

/* --- the stages (for parity and tests) ------------------------------------ */

/* Network input of segment x[n] (float, [-1, 1]): fbank [T, 60] (may be NULL)
 * and features [T, 180] = [fbank | delta | delta-delta], T = choir_mf2_frames(n)
 * >= 1. `dither`/`seed` as in the params. Returns 0 or a negative status. */
int choir_mf2_features(const choir_mf2 *m, const float *x, int64_t n, float dither, uint64_t seed,
                       float *fbank, float *features, choir_err *err);

/* Intermediate activations of the mask network, each [T, 512] time-major;
 * any pointer may be NULL. */
typedef struct choir_mf2_trace {
    float *enc;          /* GroupNorm -> encoder -> + scaled sinusoid */
    float *layer0_flash; /* after FLASH layer 0 */
    float *layer0_fsmn;  /* after gated-FSMN block 0 */
    float *mdl_out;      /* computation block output */
    float *gate_out;     /* tanh(output) * sigmoid(output_gate), speaker 0 */
} choir_mf2_trace;

/* The mask network: features [T, 180] -> mask [T, 961] (>= 0). trace may be
 * NULL. Returns 0 or a negative status (CHOIR_ENOMEM). */
int choir_mf2_mask(const choir_mf2 *m, const float *features, int64_t T, float *mask,
                   choir_mf2_trace *trace, choir_err *err);

/* STFT of x[n], times mask [T, 961], iSTFT to y[n] (both [-1, 1] scale;
 * samples past the last frame are 0, as the reference gives). T must equal
 * choir_mf2_frames(n). y may equal x. */
int choir_mf2_apply_mask(const choir_mf2 *m, const float *x, int64_t n, const float *mask, int64_t T,
                         float *y, choir_err *err);

/* --- whole segments ----------------------------------------------------- */

/* One pass over a mono segment x[n] -> y[n] (y may equal x). Segments shorter
 * than one frame (40 ms) are zero-padded to 1920 samples and cut back.
 * p NULL: defaults. Memory: choir_mf2_segment_bytes(n). */
int choir_mf2_enhance(const choir_mf2 *m, const float *x, int64_t n, float *y,
                      const choir_mf2_params *p, choir_err *err);

/* Called for each window of the reference plan that reaches the output, with
 * its index k, features [T, 180], mask [T, 961] and iSTFT output [W]
 * (int16 scale, before stitching), all valid during the call. */
typedef void (*choir_mf2_window_fn)(void *user, int k, const float *features, const float *mask,
                                    int64_t T, const float *out, int64_t W);

/* ClearerVoice's own plan for a mono recording x[n] -> y[n]: one pass when
 * n <= 20 s, else 4-s windows, 3-s stride, 0.5 s dropped at inner edges,
 * with the reference's padding rule (and its zeroed last 0.5 s when n - 4 s
 * is a multiple of 3 s). Windows that cannot reach the output are skipped.
 * `on_window` may be NULL. Memory: one window. */
int choir_mf2_enhance_reference(const choir_mf2 *m, const float *x, int64_t n, float *y,
                                const choir_mf2_params *p, choir_mf2_window_fn on_window,
                                void *user, choir_err *err);

/* --- choir's default: crossfaded chunks, streamed ------------------------ */

/* Receives the next `frames` final output frames (interleaved, `channels`
 * per frame, [-1, 1]), valid during the call; `offset` is the index of the
 * first one. Returns 0, or a negative status that stops the stream. */
typedef int (*choir_mf2_emit_fn)(void *user, const float *out, int64_t frames, int64_t offset,
                                 choir_err *err);

typedef struct choir_mf2_stream choir_mf2_stream;

/* A stream over a recording of `channels` interleaved channels (each enhanced
 * on its own) at 48 kHz. Each output region is emitted as soon as no later
 * chunk can change it. Memory: the chunker's buffers plus one pass over one
 * chunk (choir_mf2_stream_bytes), independent of the recording's length.
 * `m`, `emit` and `user` must outlive the stream. NULL (and err) on bad
 * params or out of memory. */
choir_mf2_stream *choir_mf2_stream_create(const choir_mf2 *m, int channels, const choir_mf2_params *p,
                                          choir_mf2_emit_fn emit, void *user, choir_err *err);
/* As choir_mf2_stream_create, with the stream, its chunker and the working
 * memory of every pass carved from `arena` (choir_mf2_stream_bytes of it;
 * NULL: an arena of that size of the stream's own). The arena must outlive
 * the stream; what the stream took goes back with the arena's release. */
struct choir_arena;
choir_mf2_stream *choir_mf2_stream_create_in(const choir_mf2 *m, int channels, const choir_mf2_params *p,
                                             struct choir_arena *arena, choir_mf2_emit_fn emit, void *user,
                                             choir_err *err);
/* NULL is a no-op. */
void choir_mf2_stream_free(choir_mf2_stream *s);
/* Feeds `frames` interleaved frames; enhances every chunk that completes. */
int choir_mf2_stream_push(choir_mf2_stream *s, const float *x, int64_t frames, choir_err *err);
/* Ends the input and emits the rest; total emitted = total pushed. */
int choir_mf2_stream_finish(choir_mf2_stream *s, choir_err *err);
/* Chunks enhanced so far (per channel pass counted once). */
int64_t choir_mf2_stream_chunks(const choir_mf2_stream *s);
/* Worst-case bytes a stream with these params holds at once (the stream,
 * its chunker and one pass over one chunk). */
int64_t choir_mf2_stream_bytes(int channels, const choir_mf2_params *p);
/* The same for a stream that is pushed at most `frames` frames in all: its
 * one pass then covers at most that many (<= 0: no bound, as above). The
 * chunker's buffers are a chunk's either way. */
int64_t choir_mf2_stream_bytes_upto(int channels, const choir_mf2_params *p, int64_t frames);

/* One-shot form of the stream: x [frames][channels] -> y (caller-allocated,
 * same size; may not alias x). */
int choir_mf2_enhance_chunked(const choir_mf2 *m, const float *x, int64_t frames, int channels,
                              float *y, const choir_mf2_params *p, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
