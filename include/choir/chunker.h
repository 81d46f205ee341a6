/* choir/chunker.h: running a model over a long recording in overlapping
 * chunks, joined with a raised-cosine crossfade.
 *
 * The recording is cut into chunks of chunk_frames that overlap by
 * overlap_frames (chunk k starts at k * (chunk_frames - overlap_frames)). A
 * caller's `process` function turns each chunk into an output chunk of the
 * same number of frames (it may change the channel count). Over each overlap
 * the outgoing chunk fades out and the incoming one fades in:
 *   out = prev + fade_in(t) * (next - prev),  fade_in(t) = 0.5 * (1 - cos(pi t)),
 * t = (i + 0.5) / overlap_frames, so fade-out is its complement and a model
 * that returns its input gives back the input bit for bit.
 *
 * The chunker streams: input is pushed in pieces of any size, and each output
 * region is handed to `emit`, in order, as soon as no later chunk can change
 * it. It holds one input chunk, one output chunk and one overlap tail, so
 * memory is bounded by the chunk length, never by the recording's length.
 * Not thread-safe; one chunker per recording.
 *
 * The last chunk is whatever input remains after the previous one's start:
 * more than overlap_frames, at most chunk_frames. */
#ifndef CHOIR_CHUNKER_H
#define CHOIR_CHUNKER_H

#include <stdint.h>

#include "choir/arena.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model: reads frames x in_channels interleaved from `in`, writes frames x
 * out_channels interleaved to `out` (a chunker buffer). Returns 0, or a
 * negative status (with err) that aborts the run. */
typedef int (*choir_chunk_process_fn)(void *user, const float *in, int64_t frames, float *out, choir_err *err);
/* Receives the next `frames` final output frames (valid during the call);
 * `offset` is the first frame's index in the whole output. Returns 0 or a
 * negative status that aborts the run. */
typedef int (*choir_chunk_emit_fn)(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err);

typedef struct choir_chunker_params {
    int rate;               /* Hz */
    int in_channels, out_channels;
    double chunk_seconds;   /* > 0 */
    double overlap_seconds; /* >= 0, less than chunk_seconds */
} choir_chunker_params;

typedef struct choir_chunker choir_chunker;

/* What a model accepts as chunk_seconds and overlap_seconds: each chunked
 * model documents its own (SAM-Audio 0.2..400 s with an overlap of at most
 * half a chunk, MossFormer2 0.1..60 s with an overlap shorter than a chunk)
 * and every entry point (library call, engine submit, CLI, HTTP) checks them
 * with choir_chunk_check, so one value gets one answer wherever it comes in. */
typedef struct choir_chunk_limits {
    const char *model;        /* names the model in messages ("mossformer2") */
    double min_chunk_s;       /* smallest chunk_seconds (inclusive; > 0 even when 0) */
    double max_chunk_s;       /* largest chunk_seconds (inclusive) */
    double max_overlap_ratio; /* overlap_seconds at most this times chunk_seconds;
                                 1: any overlap shorter than the chunk */
} choir_chunk_limits;

/* Checks a chunk length and overlap in seconds against a model's limits: the
 * chunk in [min_chunk_s, max_chunk_s] (and above 0), the overlap at least 0,
 * at most max_overlap_ratio x the chunk and always shorter than it. NaN and
 * infinities are out of every range. Returns 0, or CHOIR_EINVAL with a
 * message naming the model, the option, its range and the value given:
 * "mossformer2: chunk_seconds must be in [0.1, 60] s, got 61". Nothing is
 * clamped. */
int choir_chunk_check(const choir_chunk_limits *l, double chunk_seconds, double overlap_seconds, choir_err *err);

/* Frames per chunk and per overlap for the params (rounded to whole frames). */
int64_t choir_chunker_chunk_frames(const choir_chunker_params *p);
int64_t choir_chunker_overlap_frames(const choir_chunker_params *p);
/* Bytes a chunker with these params holds (its whole working memory). */
int64_t choir_chunker_memory_bytes(const choir_chunker_params *p);

/* NULL (and err) on bad params or out of memory. The callbacks and `user`
 * must outlive the chunker. */
choir_chunker *choir_chunker_create(const choir_chunker_params *p, choir_chunk_process_fn process,
                                    choir_chunk_emit_fn emit, void *user, choir_err *err);
/* As choir_chunker_create, with the chunker and its buffers carved from
 * `arena` (choir_chunker_memory_bytes of it; NULL: the counted allocator).
 * The arena must outlive the chunker; its pieces go back with the arena's
 * reset or release, not with choir_chunker_free. */
choir_chunker *choir_chunker_create_in(choir_arena *arena, const choir_chunker_params *p,
                                       choir_chunk_process_fn process, choir_chunk_emit_fn emit, void *user,
                                       choir_err *err);
/* NULL is a no-op (and so is a chunker in an arena). */
void choir_chunker_free(choir_chunker *c);

/* Feeds `frames` interleaved input frames; runs `process` for every chunk
 * that becomes complete and emits what is final. Returns 0 or the first
 * failure (after which the chunker only accepts _free). */
int choir_chunker_push(choir_chunker *c, const float *in, int64_t frames, choir_err *err);
/* Ends the input: processes the last (partial) chunk and emits the rest, so
 * the total emitted equals the total pushed. */
int choir_chunker_finish(choir_chunker *c, choir_err *err);

/* One-shot: runs the whole recording `in` [frames][in_channels] and writes
 * out [frames][out_channels] (caller-allocated). */
int choir_chunker_run(const choir_chunker_params *p, const float *in, int64_t frames, float *out,
                      choir_chunk_process_fn process, void *user, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
