/* MossFormer2_SE_48K behind the engine's model interface (choir/model.h).
 *
 * Each request of a batch gets its own crossfaded chunk stream
 * (choir_mf2_stream). The batch advances round-robin, one chunk stride of
 * every unfinished request per round, so requests of one batch share the
 * compute evenly and each streaming request receives its regions as soon as
 * they are final (final = 0 pieces, then an empty final = 1 output). A
 * non-streaming request gets its whole result in one final output.
 *
 * Input at another rate is resampled to 48 kHz block by block on the way in
 * and back on the way out, so memory is bounded by the chunk for streaming
 * requests. Every request's stream, its resampling buffers, its held result
 * and each pass over a chunk are carved from the batch arena, so the arena's
 * high-water mark is what the batch used and the engine calibrates the
 * estimate from it. What still comes from elsewhere: the resamplers' own
 * state (soxr), the STFT's per-frame buffers (counted), and kernel scratch
 * beyond the block the engine worker binds to its thread. */
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/audio.h"
#include "choir/model.h"
#include "choir/mossformer2.h"

#define MF2_MAX_BATCH 8

static int mf2_probe(const char *dir, const struct cJSON *config) {
    (void)dir;
    if (!config) return 0;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(config, "model");
    if (cJSON_IsString(model) && strncmp(model->valuestring, "MossFormer2_SE", 14) == 0) return 100;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(config, "model_type");
    if (cJSON_IsString(type) && strstr(type->valuestring, "mossformer2")) return 80;
    return 0;
}

static void *mf2_model_load(const char *dir, const choir_model_options *opt, choir_err *err) {
    (void)opt; /* quantize with `choir convert`; nothing is quantized on load */
    return choir_mf2_load(dir, err);
}

static void mf2_model_free(void *weights) { choir_mf2_free(weights); }

static int64_t mf2_resident_bytes(const void *weights) { return (int64_t)choir_mf2_weight_bytes(weights); }

static int64_t mf2_length(const void *weights, const choir_request *r) {
    (void)weights;
    return r->in.sts.n_samples;
}

static void params_of(const choir_sts_input *in, choir_mf2_params *p) {
    choir_mf2_default_params(p);
    choir_sts_chunking(in, p->chunk_seconds, p->overlap_seconds, &p->chunk_seconds, &p->overlap_seconds);
    /* Out-of-range values stay as asked: mf2_check refuses them at submit
     * with the model's one rule for them (choir_mf2_check_params). */
}

static int mf2_check(const void *weights, const choir_request *r, choir_err *err) {
    (void)weights;
    choir_mf2_params p;
    params_of(&r->in.sts, &p);
    return choir_mf2_check_params(&p, err);
}

/* Bytes one block of input needs on its way in and one region on its way out. */
static int64_t block_frames(const choir_mf2_params *p) {
    int64_t f = (int64_t)((p->chunk_seconds - p->overlap_seconds) * CHOIR_MF2_RATE);
    return f > 0 ? f : 1;
}

static int64_t mf2_estimate(const void *weights, const choir_request *r) {
    (void)weights;
    choir_mf2_params p;
    params_of(&r->in.sts, &p);
    /* A recording shorter than a chunk is one pass over itself: its 48-kHz
     * length, with room for the resampler's rounding and delay. */
    int rate = r->in.sts.sample_rate > 0 ? r->in.sts.sample_rate : CHOIR_MF2_RATE;
    int64_t n = r->in.sts.n_samples > 0 ? r->in.sts.n_samples : 0;
    int64_t frames = (int64_t)((double)n * CHOIR_MF2_RATE / rate) + CHOIR_MF2_RATE / 10;
    int64_t bytes = choir_mf2_stream_bytes_upto(1, &p, frames);
    /* resampling buffers (a block in, a chunk out, with the resamplers'
     * margins) and alignment; soxr's own state is not arena memory */
    int64_t chunk = (int64_t)(p.chunk_seconds * CHOIR_MF2_RATE) + 1;
    bytes += 2 * (block_frames(&p) + chunk + CHOIR_MF2_RATE) * (int64_t)sizeof(float) + 16 * CHOIR_ALIGN;
    if (!r->stream) bytes += (r->in.sts.n_samples + 1024) * (int64_t)sizeof(float);
    return bytes;
}

typedef struct sts_job {
    choir_request *req;
    choir_arena *arena;              /* the batch's: every buffer below is a piece of it */
    choir_mf2_stream *stream;
    choir_resampler *in_rs, *out_rs; /* NULL at 48 kHz */
    float *in_buf, *out_buf;         /* resampling buffers */
    int64_t in_cap, out_cap;
    int64_t pos;                     /* input samples consumed */
    float *whole;                    /* non-streaming result */
    int64_t whole_n, whole_cap;
    int done;
} sts_job;

/* Makes *buf hold at least `need` floats, as a piece of the batch arena.
 * The buffers are planned at job_start, so this carves only then; a piece
 * outgrown later stays in the arena until the batch ends. */
static int grow(sts_job *j, float **buf, int64_t *cap, int64_t keep, int64_t need) {
    if (need <= *cap) return 0;
    float *g = choir_arena_alloc(j->arena, (size_t)need * sizeof(float));
    if (!g) return CHOIR_ENOMEM;
    if (keep > 0) memcpy(g, *buf, (size_t)keep * sizeof(float));
    *buf = g;
    *cap = need;
    return 0;
}

/* Hands samples at the request's rate to the caller (or keeps them). */
static int deliver(sts_job *j, const float *x, int64_t n, choir_err *err) {
    if (n <= 0) return 0;
    if (!j->req->stream) {
        if (grow(j, &j->whole, &j->whole_cap, j->whole_n, j->whole_n + n) != 0)
            return choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory for the result");
        memcpy(j->whole + j->whole_n, x, (size_t)n * sizeof(float));
        j->whole_n += n;
        return 0;
    }
    choir_output out;
    memset(&out, 0, sizeof out);
    out.samples = x;
    out.n_samples = n;
    out.sample_rate = j->req->in.sts.sample_rate;
    j->req->audio_seconds += (double)n / out.sample_rate;
    if (choir_request_emit(j->req, &out) == CHOIR_ECANCELED)
        return choir_err_set(err, CHOIR_ECANCELED, "sts: cancelled");
    return 0;
}

static int on_region(void *user, const float *x, int64_t frames, int64_t offset, choir_err *err) {
    (void)offset;
    sts_job *j = user;
    if (!j->out_rs) return deliver(j, x, frames, err);
    if (grow(j, &j->out_buf, &j->out_cap, 0, choir_resampler_max_out(j->out_rs, frames)) != 0)
        return choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory");
    int64_t got = 0;
    int rc = choir_resampler_process(j->out_rs, x, frames, j->out_buf, j->out_cap, &got, err);
    return rc ? rc : deliver(j, j->out_buf, got, err);
}

static int job_start(sts_job *j, const choir_mf2 *m, choir_request *req, choir_arena *arena, int64_t step,
                     choir_err *err) {
    memset(j, 0, sizeof *j);
    j->req = req;
    j->arena = arena;
    const choir_sts_input *in = &req->in.sts;
    if (in->n_samples < 0 || (in->n_samples > 0 && !in->samples) || in->sample_rate < 1000 ||
        in->sample_rate > 384000)
        return choir_err_set(err, CHOIR_EINVAL, "sts: bad input (%lld samples at %d Hz)",
                             (long long)in->n_samples, in->sample_rate);
    choir_mf2_params p;
    params_of(in, &p);
    j->stream = choir_mf2_stream_create_in(m, 1, &p, arena, on_region, j, err);
    if (!j->stream) return err->code;
    /* The plan: a block in, a chunk's regions out, the whole result held. */
    int64_t in_need = 0, out_need = 0;
    if (in->sample_rate != CHOIR_MF2_RATE) {
        j->in_rs = choir_resampler_create(in->sample_rate, CHOIR_MF2_RATE, 1, err);
        j->out_rs = j->in_rs ? choir_resampler_create(CHOIR_MF2_RATE, in->sample_rate, 1, err) : NULL;
        if (!j->out_rs) return err->code;
        in_need = choir_resampler_max_out(j->in_rs, step);
        if (choir_resampler_max_out(j->in_rs, 0) > in_need) in_need = choir_resampler_max_out(j->in_rs, 0);
        int64_t chunk = (int64_t)(p.chunk_seconds * CHOIR_MF2_RATE) + 1;
        out_need = choir_resampler_max_out(j->out_rs, chunk);
    }
    if (grow(j, &j->in_buf, &j->in_cap, 0, in_need) || grow(j, &j->out_buf, &j->out_cap, 0, out_need) ||
        (!req->stream && grow(j, &j->whole, &j->whole_cap, 0, in->n_samples + 1024)))
        return choir_err_set(err, CHOIR_ENOMEM, "sts: the batch arena has no room for a request's buffers");
    return 0;
}

/* The job's buffers are pieces of the batch arena; only the resamplers
 * are the job's own. */
static void job_free(sts_job *j) {
    choir_mf2_stream_free(j->stream);
    choir_resampler_free(j->in_rs);
    choir_resampler_free(j->out_rs);
    memset(j, 0, sizeof *j);
}

static int push48(sts_job *j, const float *x, int64_t n, choir_err *err) {
    if (!j->in_rs) return choir_mf2_stream_push(j->stream, x, n, err);
    int64_t need = choir_resampler_max_out(j->in_rs, n), flush = choir_resampler_max_out(j->in_rs, 0);
    if (grow(j, &j->in_buf, &j->in_cap, 0, need > flush ? need : flush) != 0)
        return choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory");
    int64_t got = 0;
    int rc = choir_resampler_process(j->in_rs, x, n, j->in_buf, j->in_cap, &got, err);
    return rc ? rc : choir_mf2_stream_push(j->stream, j->in_buf, got, err);
}

static int job_finish(sts_job *j, choir_err *err) {
    int rc = 0;
    if (j->in_rs && grow(j, &j->in_buf, &j->in_cap, 0, choir_resampler_max_out(j->in_rs, 0)) != 0)
        return choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory");
    for (int64_t got = 1; j->in_rs && got > 0 && rc == 0;) {
        rc = choir_resampler_flush(j->in_rs, j->in_buf, j->in_cap, &got, err);
        if (rc == 0 && got > 0) rc = choir_mf2_stream_push(j->stream, j->in_buf, got, err);
    }
    if (rc == 0) rc = choir_mf2_stream_finish(j->stream, err);
    if (rc == 0 && j->out_rs) {
        if (grow(j, &j->out_buf, &j->out_cap, 0, choir_resampler_max_out(j->out_rs, 0)) != 0)
            return choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory");
        for (int64_t got = 1; got > 0 && rc == 0;) {
            rc = choir_resampler_flush(j->out_rs, j->out_buf, j->out_cap, &got, err);
            if (rc == 0) rc = deliver(j, j->out_buf, got, err);
        }
    }
    if (rc) return rc;
    choir_output out;
    memset(&out, 0, sizeof out);
    out.final = 1;
    out.sample_rate = j->req->in.sts.sample_rate;
    if (!j->req->stream) {
        out.samples = j->whole;
        out.n_samples = j->whole_n;
        j->req->audio_seconds += (double)j->whole_n / out.sample_rate;
    }
    choir_request_emit(j->req, &out);
    return 0;
}

/* The batch: every request's state carved from `arena` (NULL, for callers
 * outside the engine: an arena of the batch's estimates), given back to the
 * arena's mark when the batch ends. */
static int mf2_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena, choir_err *err) {
    const choir_mf2 *m = weights;
    if (n < 1 || n > MF2_MAX_BATCH)
        return choir_err_set(err, CHOIR_EINVAL, "mossformer2: batch of %d (1..%d)", n, MF2_MAX_BATCH);
    choir_arena *own = NULL;
    if (!arena) {
        int64_t sum = 0;
        for (int i = 0; i < n; i++) sum += mf2_estimate(weights, reqs[i]);
        if (!(arena = own = choir_arena_create((size_t)sum, CHOIR_MEM_ACTIVATIONS, err))) return CHOIR_ENOMEM;
    }
    const size_t mark = choir_arena_mark(arena);
    sts_job jobs[MF2_MAX_BATCH];
    int64_t step[MF2_MAX_BATCH];
    int left = 0, rc_batch = 0;
    for (int i = 0; i < n; i++) {
        choir_err e = {0};
        choir_mf2_params p;
        params_of(&reqs[i]->in.sts, &p);
        /* One chunk stride of input at the request's own rate per round. */
        step[i] = reqs[i]->in.sts.sample_rate > 0
                      ? block_frames(&p) * reqs[i]->in.sts.sample_rate / CHOIR_MF2_RATE : 1;
        if (step[i] < 1) step[i] = 1;
        if (job_start(&jobs[i], m, reqs[i], arena, step[i], &e) != 0) {
            if (e.code == CHOIR_ENOMEM) {
                for (int k = 0; k <= i; k++) job_free(&jobs[k]);
                rc_batch = choir_err_set(err, CHOIR_ENOMEM, "%s", e.msg);
                goto out;
            }
            choir_request_fail(reqs[i], e.code, "%s", e.msg);
            job_free(&jobs[i]);
            jobs[i].done = 1;
            continue;
        }
        left++;
    }
    while (left > 0) {
        for (int i = 0; i < n; i++) {
            sts_job *j = &jobs[i];
            if (j->done) continue;
            const choir_sts_input *in = &j->req->in.sts;
            choir_err e = {0};
            int rc = 0;
            if (choir_request_cancelled(j->req)) {
                rc = choir_err_set(&e, CHOIR_ECANCELED, "sts: cancelled");
            } else if (j->pos < in->n_samples) {
                int64_t take = in->n_samples - j->pos < step[i] ? in->n_samples - j->pos : step[i];
                rc = push48(j, in->samples + j->pos, take, &e);
                j->pos += take;
            } else {
                rc = job_finish(j, &e);
                j->done = 1;
            }
            if (rc) {
                if (rc == CHOIR_ENOMEM) {
                    for (int k = 0; k < n; k++) job_free(&jobs[k]);
                    rc_batch = choir_err_set(err, CHOIR_ENOMEM, "%s", e.msg);
                    goto out;
                }
                choir_request_fail(j->req, rc, "%s", e.msg);
                j->done = 1;
            }
            if (j->done) {
                job_free(j);
                j->done = 1;
                left--;
            }
        }
    }
out:
    choir_arena_release(arena, mark);
    choir_arena_free(own);
    return rc_batch;
}

const choir_model_ops choir_model_mossformer2 = {
    .kind = "mossformer2",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_STS),
    .max_batch = MF2_MAX_BATCH,
    .probe = mf2_probe,
    .load = mf2_model_load,
    .free = mf2_model_free,
    .resident_bytes = mf2_resident_bytes,
    .length = mf2_length,
    .estimate = mf2_estimate,
    .run_batch = mf2_run_batch,
    .check = mf2_check,
};
