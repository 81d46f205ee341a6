/* Long-audio chunker with raised-cosine crossfades (see include/choir/chunker.h).
 *
 * Life of a chunk: input accumulates in `input` until it holds chunk_frames;
 * the model turns it into `output`; the head of `output` is crossfaded with
 * the tail kept from the previous chunk; everything up to the start of the
 * next overlap is final and emitted; the last overlap_frames of output become
 * the new tail, and the last overlap_frames of input start the next chunk. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/chunker.h"

struct choir_chunker {
    int64_t chunk_frames, overlap_frames;
    int in_channels, out_channels;
    choir_chunk_process_fn process;
    choir_chunk_emit_fn emit;
    void *user;
    float *input;   /* [chunk_frames][in_channels] */
    float *output;  /* [chunk_frames][out_channels] */
    float *tail;    /* [overlap_frames][out_channels]: previous chunk's end, not yet final */
    float *fade_in; /* [overlap_frames] */
    int64_t input_fill, emitted, chunks_run;
    int failed, finished;
    int in_arena; /* the chunker and its buffers are pieces of a caller's arena */
};

int64_t choir_chunker_chunk_frames(const choir_chunker_params *p) {
    return p ? (int64_t)llround(p->chunk_seconds * p->rate) : 0;
}

int64_t choir_chunker_overlap_frames(const choir_chunker_params *p) {
    return p ? (int64_t)llround(p->overlap_seconds * p->rate) : 0;
}

int64_t choir_chunker_memory_bytes(const choir_chunker_params *p) {
    int64_t chunk = choir_chunker_chunk_frames(p), overlap = choir_chunker_overlap_frames(p);
    /* five pieces, each rounded up to CHOIR_ALIGN when carved from an arena */
    return (int64_t)sizeof(choir_chunker) + 5 * CHOIR_ALIGN +
           (int64_t)sizeof(float) * (chunk * (p->in_channels + p->out_channels) + overlap * (p->out_channels + 1));
}

int choir_chunk_check(const choir_chunk_limits *l, double chunk_seconds, double overlap_seconds, choir_err *err) {
    const char *who = l && l->model ? l->model : "chunking";
    if (!l) return choir_err_set(err, CHOIR_EINVAL, "%s: no chunk limits", who);
    if (!(chunk_seconds >= l->min_chunk_s && chunk_seconds <= l->max_chunk_s && chunk_seconds > 0))
        return choir_err_set(err, CHOIR_EINVAL, "%s: chunk_seconds must be in %s%g, %g] s, got %g", who,
                             l->min_chunk_s > 0 ? "[" : "(", l->min_chunk_s, l->max_chunk_s, chunk_seconds);
    double ratio = l->max_overlap_ratio;
    int below_chunk = !(ratio < 1); /* the bound is the chunk itself: the overlap must stay shorter */
    double most = below_chunk ? chunk_seconds : ratio * chunk_seconds;
    if (!(overlap_seconds >= 0 && (below_chunk ? overlap_seconds < most : overlap_seconds <= most))) {
        if (below_chunk)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "%s: overlap_seconds must be at least 0 and shorter than chunk_seconds (%g s), got %g",
                                 who, chunk_seconds, overlap_seconds);
        return choir_err_set(err, CHOIR_EINVAL,
                             "%s: overlap_seconds must be in [0, %g] s (%g x chunk_seconds %g), got %g", who, most,
                             ratio, chunk_seconds, overlap_seconds);
    }
    return CHOIR_OK;
}

/* Any chunking a day long at most; the model using the chunker has its own,
 * narrower limits. */
static const choir_chunk_limits chunker_limits = {"chunker", 0, 86400, 1};

static int check_params(const choir_chunker_params *p, choir_err *err) {
    if (!p) return choir_err_set(err, CHOIR_EINVAL, "chunker: no params");
    if (p->rate <= 0 || p->in_channels <= 0 || p->out_channels <= 0 || p->in_channels > 256 || p->out_channels > 256)
        return choir_err_set(err, CHOIR_EINVAL, "chunker: bad rate %d Hz or channels %d -> %d", p->rate,
                             p->in_channels, p->out_channels);
    int rc = choir_chunk_check(&chunker_limits, p->chunk_seconds, p->overlap_seconds, err);
    if (rc < 0) return rc;
    int64_t chunk = choir_chunker_chunk_frames(p), overlap = choir_chunker_overlap_frames(p);
    if (chunk < 1 || overlap >= chunk)
        return choir_err_set(err, CHOIR_EINVAL,
                             "chunker: the overlap (%lld frames) must be shorter than the chunk (%lld frames)",
                             (long long)overlap, (long long)chunk);
    return CHOIR_OK;
}

/* One piece of the chunker's memory: from the arena when there is one. */
static void *take(choir_arena *arena, size_t bytes) {
    return arena ? choir_arena_alloc(arena, bytes) : choir_alloc(CHOIR_MEM_IO, bytes);
}

choir_chunker *choir_chunker_create_in(choir_arena *arena, const choir_chunker_params *p,
                                       choir_chunk_process_fn process, choir_chunk_emit_fn emit, void *user,
                                       choir_err *err) {
    if (check_params(p, err)) return NULL;
    if (!process || !emit) {
        choir_err_set(err, CHOIR_EINVAL, "chunker: process and emit callbacks are required");
        return NULL;
    }
    choir_chunker *c = take(arena, sizeof *c);
    if (!c) goto nomem;
    memset(c, 0, sizeof *c);
    c->in_arena = arena != NULL;
    c->chunk_frames = choir_chunker_chunk_frames(p);
    c->overlap_frames = choir_chunker_overlap_frames(p);
    c->in_channels = p->in_channels;
    c->out_channels = p->out_channels;
    c->process = process;
    c->emit = emit;
    c->user = user;
    c->input = take(arena, (size_t)(c->chunk_frames * c->in_channels) * sizeof(float));
    c->output = take(arena, (size_t)(c->chunk_frames * c->out_channels) * sizeof(float));
    c->tail = take(arena, (size_t)(c->overlap_frames * c->out_channels) * sizeof(float));
    c->fade_in = take(arena, (size_t)c->overlap_frames * sizeof(float));
    if (!c->input || !c->output || !c->tail || !c->fade_in) goto nomem;
    for (int64_t i = 0; i < c->overlap_frames; i++)
        c->fade_in[i] = (float)(0.5 * (1.0 - cos(M_PI * ((double)i + 0.5) / (double)c->overlap_frames)));
    return c;
nomem:
    choir_err_set(err, CHOIR_ENOMEM, arena ? "chunker: the arena has no room" : "chunker: out of memory");
    choir_chunker_free(c);
    return NULL;
}

choir_chunker *choir_chunker_create(const choir_chunker_params *p, choir_chunk_process_fn process,
                                    choir_chunk_emit_fn emit, void *user, choir_err *err) {
    return choir_chunker_create_in(NULL, p, process, emit, user, err);
}

void choir_chunker_free(choir_chunker *c) {
    if (!c || c->in_arena) return;
    choir_free(c->input);
    choir_free(c->output);
    choir_free(c->tail);
    choir_free(c->fade_in);
    choir_free(c);
}

static int emit_frames(choir_chunker *c, const float *out, int64_t frames, choir_err *err) {
    if (frames <= 0) return CHOIR_OK;
    int rc = c->emit(c->user, out, frames, c->emitted, err);
    if (rc) return rc < 0 ? rc : choir_err_set(err, CHOIR_ECANCELED, "chunker: the output consumer stopped");
    c->emitted += frames;
    return CHOIR_OK;
}

/* Runs the model on the first `frames` of input and emits what is final;
 * `last` says no more input follows. */
static int run_chunk(choir_chunker *c, int64_t frames, int last, choir_err *err) {
    int rc = c->process(c->user, c->input, frames, c->output, err);
    if (rc) return rc < 0 ? rc : choir_err_set(err, CHOIR_EINTERNAL, "chunker: model failed (%d)", rc);
    int oc = c->out_channels;
    if (c->chunks_run > 0) {
        /* lerp form: where both chunks agree the result is exactly that value. */
        for (int64_t i = 0; i < c->overlap_frames; i++)
            for (int ch = 0; ch < oc; ch++) {
                float prev = c->tail[i * oc + ch], next = c->output[i * oc + ch];
                c->output[i * oc + ch] = prev + c->fade_in[i] * (next - prev);
            }
    }
    c->chunks_run++;
    int64_t final_frames = last ? frames : frames - c->overlap_frames;
    rc = emit_frames(c, c->output, final_frames, err);
    if (rc) return rc;
    if (!last) {
        memcpy(c->tail, c->output + final_frames * oc, (size_t)(c->overlap_frames * oc) * sizeof(float));
        memmove(c->input, c->input + (frames - c->overlap_frames) * c->in_channels,
                (size_t)(c->overlap_frames * c->in_channels) * sizeof(float));
        c->input_fill = c->overlap_frames;
    }
    return CHOIR_OK;
}

int choir_chunker_push(choir_chunker *c, const float *in, int64_t frames, choir_err *err) {
    if (!c || frames < 0 || (frames > 0 && !in)) return choir_err_set(err, CHOIR_EINVAL, "chunker: bad arguments");
    if (c->failed || c->finished) return choir_err_set(err, CHOIR_EINVAL, "chunker: push after failure or finish");
    while (frames > 0) {
        int64_t take = c->chunk_frames - c->input_fill;
        if (take > frames) take = frames;
        memcpy(c->input + c->input_fill * c->in_channels, in, (size_t)(take * c->in_channels) * sizeof(float));
        c->input_fill += take;
        in += take * c->in_channels;
        frames -= take;
        if (c->input_fill == c->chunk_frames) {
            int rc = run_chunk(c, c->chunk_frames, 0, err);
            if (rc) {
                c->failed = 1;
                return rc;
            }
        }
    }
    return CHOIR_OK;
}

int choir_chunker_finish(choir_chunker *c, choir_err *err) {
    if (!c) return choir_err_set(err, CHOIR_EINVAL, "chunker: NULL");
    if (c->failed) return choir_err_set(err, CHOIR_EINVAL, "chunker: finish after failure");
    if (c->finished) return CHOIR_OK;
    c->finished = 1;
    int rc = CHOIR_OK;
    if (c->chunks_run == 0) {
        if (c->input_fill > 0) rc = run_chunk(c, c->input_fill, 1, err);
    } else if (c->input_fill > c->overlap_frames) {
        rc = run_chunk(c, c->input_fill, 1, err);
    } else {
        /* The input ended exactly where the last full chunk did: its tail is final. */
        rc = emit_frames(c, c->tail, c->overlap_frames, err);
    }
    if (rc) c->failed = 1;
    return rc;
}

typedef struct run_ctx {
    choir_chunk_process_fn process;
    void *user;
    float *out;
    int out_channels;
} run_ctx;

static int run_process(void *user, const float *in, int64_t frames, float *out, choir_err *err) {
    run_ctx *r = user;
    return r->process(r->user, in, frames, out, err);
}

static int run_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    (void)err;
    run_ctx *r = user;
    memcpy(r->out + offset * r->out_channels, out, (size_t)(frames * r->out_channels) * sizeof(float));
    return 0;
}

int choir_chunker_run(const choir_chunker_params *p, const float *in, int64_t frames, float *out,
                      choir_chunk_process_fn process, void *user, choir_err *err) {
    choir_err local;
    if (!err) err = &local; /* the create failure's code is read back from it */
    if (!p || !out || !process) return choir_err_set(err, CHOIR_EINVAL, "chunker: bad arguments");
    run_ctx r = {process, user, out, p->out_channels};
    choir_chunker *c = choir_chunker_create(p, run_process, run_emit, &r, err);
    if (!c) return err->code;
    int rc = choir_chunker_push(c, in, frames, err);
    if (!rc) rc = choir_chunker_finish(c, err);
    choir_chunker_free(c);
    return rc;
}
