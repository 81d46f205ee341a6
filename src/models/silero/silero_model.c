/* Silero VAD behind the engine's model interface (choir/model.h).
 *
 * A batch of VAD requests runs as that many streams stepped in lock-step: at
 * step c every request that still has a chunk c is processed in one
 * choir_silero_process call. Requests arrive sorted by length, so the streams
 * still running are always a suffix of the batch. Everything per request (its
 * stream state, probabilities, tail chunk, segments) lives in the batch arena. */
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/model.h"
#include "choir/silero.h"
#include "models/silero/silero_internal.h"

#define SILERO_MAX_BATCH 64

static int silero_probe(const char *dir, const struct cJSON *config) {
    (void)dir;
    const cJSON *type = config ? cJSON_GetObjectItemCaseSensitive(config, "model_type") : NULL;
    return cJSON_IsString(type) && type->valuestring && strcmp(type->valuestring, "silero_vad") == 0 ? 100 : 0;
}

static void *silero_model_load(const char *dir, const choir_model_options *opt, choir_err *err) {
    (void)opt; /* 1.2 MB of float32: quantizing it would save nothing worth its error */
    return choir_silero_load(dir, err);
}

static void silero_model_free(void *weights) { choir_silero_free(weights); }

static int64_t silero_resident_bytes(const void *weights) {
    return (int64_t)choir_silero_weight_bytes(weights);
}

static int64_t n_chunks_of(const choir_request *r) {
    int64_t n = r->in.vad.n_samples > 0 ? r->in.vad.n_samples : 0;
    return (n + CHOIR_SILERO_CHUNK - 1) / CHOIR_SILERO_CHUNK;
}

static int64_t silero_length(const void *weights, const choir_request *r) {
    (void)weights;
    return r->in.vad.n_samples;
}

/* Per request: its state, one zero-padded tail chunk, the probabilities, and
 * at most one segment per two chunks (a segment and the pause that ends it
 * each take at least one chunk); plus the shared scratch of one stream, which
 * the batch's scratch grows by per request. Each piece is rounded up to the
 * arena's alignment. */
static int64_t silero_estimate(const void *weights, const choir_request *r) {
    (void)weights;
    int64_t chunks = n_chunks_of(r);
    int64_t bytes = (int64_t)sizeof(choir_silero_state) + CHOIR_SILERO_CHUNK * (int64_t)sizeof(float) +
                    (chunks + 1) * (int64_t)sizeof(float) + (chunks / 2 + 2) * (int64_t)sizeof(choir_segment) +
                    (int64_t)choir_silero_scratch_bytes(1) + 8 * CHOIR_ALIGN;
    return bytes;
}

typedef struct vad_job {
    choir_request *req;
    choir_silero_state *state;
    float *tail;  /* the last partial chunk, zero-padded */
    float *probs; /* one per chunk */
    int64_t chunks;
    int failed;   /* the request was refused; it gets no more work */
} vad_job;

static void params_of(const choir_vad_input *in, choir_vad_params *p) {
    *p = choir_vad_default_params();
    if (in->threshold > 0.0f) p->threshold = in->threshold;
    if (in->min_speech_ms > 0) p->min_speech_ms = in->min_speech_ms;
    if (in->min_silence_ms > 0) p->min_silence_ms = in->min_silence_ms;
}

/* A request's segmentation values are bounded here, at submit, for every
 * front end (the job worker passes what the job says): 0 is the default; a
 * threshold is a probability, durations at most what `choir vad` takes. The
 * front ends may take less (`choir vad --threshold` 0.01..1). Never clamped. */
static int silero_check(const void *weights, const choir_request *req, choir_err *err) {
    (void)weights;
    const choir_vad_input *in = &req->in.vad;
    if (!(in->threshold >= 0.0f && in->threshold <= 1.0f))
        return choir_err_set(err, CHOIR_EINVAL, "silero: threshold must be in [0, 1] (0: the default), got %g",
                             (double)in->threshold);
    if (in->min_speech_ms < 0 || in->min_speech_ms > CHOIR_VAD_MAX_MS || in->min_silence_ms < 0 ||
        in->min_silence_ms > CHOIR_VAD_MAX_MS)
        return choir_err_set(err, CHOIR_EINVAL, "silero: min_speech_ms and min_silence_ms must be in [0, %d], got %d, %d",
                             CHOIR_VAD_MAX_MS, in->min_speech_ms, in->min_silence_ms);
    return 0;
}

/* Segments of one finished request, emitted as its final output. */
static int finish(vad_job *job, choir_arena *arena) {
    choir_request *req = job->req;
    const choir_vad_input *in = &req->in.vad;
    choir_vad_params params;
    params_of(in, &params);
    choir_vad_segment *found = NULL;
    int64_t n = 0;
    choir_err err = {0};
    if (choir_vad_segments(job->probs, job->chunks, in->n_samples, &params, &found, &n, &err))
        return choir_request_fail(req, err.code, "%s", err.msg);
    choir_segment *segs = n ? choir_arena_alloc(arena, (size_t)n * sizeof *segs) : NULL;
    if (n && !segs) {
        choir_free(found);
        return CHOIR_ENOMEM;
    }
    for (int64_t k = 0; k < n; k++) {
        /* The mean speech probability of the chunks the segment overlaps. */
        int64_t c0 = found[k].start / CHOIR_SILERO_CHUNK;
        int64_t c1 = (found[k].end + CHOIR_SILERO_CHUNK - 1) / CHOIR_SILERO_CHUNK;
        if (c1 > job->chunks) c1 = job->chunks;
        double sum = 0;
        for (int64_t c = c0; c < c1; c++) sum += job->probs[c];
        segs[k].start_s = (double)found[k].start / CHOIR_SILERO_RATE;
        segs[k].end_s = (double)found[k].end / CHOIR_SILERO_RATE;
        segs[k].text = NULL;
        segs[k].probability = c1 > c0 ? (float)(sum / (double)(c1 - c0)) : 0.0f;
    }
    choir_free(found);
    choir_output out;
    memset(&out, 0, sizeof out);
    out.final = 1;
    out.segments = segs;
    out.n_segments = (int)n;
    choir_request_emit(req, &out);
    return 0;
}

static int silero_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                            choir_err *err) {
    const choir_silero *m = weights;
    if (n < 1 || n > SILERO_MAX_BATCH)
        return choir_err_set(err, CHOIR_EINVAL, "silero: batch of %d (1..%d)", n, SILERO_MAX_BATCH);
    vad_job jobs[SILERO_MAX_BATCH];
    choir_silero_state *states[SILERO_MAX_BATCH];
    const float *chunks[SILERO_MAX_BATCH];
    float probs[SILERO_MAX_BATCH];
    int64_t most = 0;
    void *scratch = choir_arena_alloc(arena, choir_silero_scratch_bytes(n));
    if (!scratch) goto nomem;
    for (int i = 0; i < n; i++) {
        const choir_vad_input *in = &reqs[i]->in.vad;
        vad_job *j = &jobs[i];
        j->req = reqs[i];
        j->chunks = n_chunks_of(reqs[i]);
        j->failed = 0;
        if (j->chunks && !in->samples) {
            choir_request_fail(reqs[i], CHOIR_EINVAL, "vad: no samples");
            j->chunks = 0;
            j->failed = 1;
        }
        j->state = choir_arena_alloc(arena, sizeof *j->state);
        j->tail = choir_arena_floats(arena, CHOIR_SILERO_CHUNK);
        j->probs = choir_arena_alloc(arena, (size_t)(j->chunks + 1) * sizeof(float));
        if (!j->state || !j->tail || !j->probs) goto nomem;
        choir_silero_state_reset(j->state);
        int64_t tail = in->n_samples % CHOIR_SILERO_CHUNK;
        if (j->chunks && tail) memcpy(j->tail, in->samples + (j->chunks - 1) * CHOIR_SILERO_CHUNK, (size_t)tail * sizeof(float));
        if (j->chunks > most) most = j->chunks;
    }
    for (int64_t c = 0; c < most; c++) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            vad_job *j = &jobs[i];
            if (c >= j->chunks || j->failed) continue;
            int is_tail = c == j->chunks - 1 && j->req->in.vad.n_samples % CHOIR_SILERO_CHUNK;
            states[k] = j->state;
            chunks[k] = is_tail ? j->tail : j->req->in.vad.samples + c * CHOIR_SILERO_CHUNK;
            k++;
        }
        if (k && choir_silero_process(m, states, chunks, k, probs, scratch, err)) return err ? err->code : CHOIR_EINTERNAL;
        k = 0;
        for (int i = 0; i < n; i++) {
            vad_job *j = &jobs[i];
            if (c >= j->chunks || j->failed) continue;
            j->probs[c] = probs[k++];
            if (c == j->chunks - 1 && finish(j, arena) == CHOIR_ENOMEM) goto nomem;
        }
    }
    /* Empty recordings have no chunk to finish on. */
    for (int i = 0; i < n; i++)
        if (!jobs[i].chunks && !jobs[i].failed && finish(&jobs[i], arena) == CHOIR_ENOMEM) goto nomem;
    return 0;
nomem:
    return choir_err_set(err, CHOIR_ENOMEM, "silero: the batch arena (%zu bytes) is too small",
                         choir_arena_capacity(arena));
}

const choir_model_ops choir_model_silero_vad = {
    .kind = "silero-vad",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_VAD),
    .max_batch = SILERO_MAX_BATCH,
    .probe = silero_probe,
    .load = silero_model_load,
    .free = silero_model_free,
    .resident_bytes = silero_resident_bytes,
    .length = silero_length,
    .estimate = silero_estimate,
    .run_batch = silero_run_batch,
    .check = silero_check,
};
