/* SAM-Audio behind the engine's model interface (choir/model.h), task STS.
 *
 * Separation is audio in, audio out, so it is an STS model: the request's
 * audio output carries the target, and the residual goes to the callback in
 * the request's choir_sam_request extra (same counts and offsets, delivered
 * just before each target piece). The description, anchors, steps, method
 * and seed travel in that extra too.
 *
 * A batch of requests becomes one separate_long job each; the batch advances
 * in rounds of one chunk per unfinished job, and the DiT evaluations of all
 * jobs that share (method, steps) run as one batch (choir_sam_run_round), so
 * chunks of different requests share network evaluations. A streaming
 * request receives each chunk's final samples as they exist (final = 0, then
 * an empty final = 1); a non-streaming one gets the whole result at once.
 * Input at another rate is resampled to 48 kHz up front (counted as I/O,
 * outside the arena, like the input itself); output is 48 kHz.
 *
 * Memory: the batch runs in the engine's batch arena (choir_sam_params.arena):
 * each request's job state and, for a non-streaming one, its whole result,
 * then each round's buffers above them; on the CPU every stage's buffers and
 * kernel scratch too, so the arena's high-water mark is what the batch used
 * and the engine calibrates the estimate (choir_sam_job_bytes, that plan's
 * peak) from it. An arena too small fails the batch with CHOIR_ENOMEM before
 * any audio (a round emits only once all its chunks are decoded, and the
 * first round is the largest), which the engine retries with more room. In
 * a CUDA build the engine may load the model on a GPU (ops.gpu): the device
 * memory is then the device's own (estimate_device), the arena the host
 * side. */
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/audio.h"
#include "choir/model.h"
#include "choir/sam_audio.h"

#define SAM_MAX_BATCH 8

static int sam_probe(const char *dir, const struct cJSON *config) {
    (void)dir;
    if (!config) return 0;
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(config, "audio_codec");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(config, "transformer");
    if (ac && tr && cJSON_GetObjectItemCaseSensitive(config, "num_anchors")) return 100;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(config, "model_type");
    if (cJSON_IsString(type) && strstr(type->valuestring, "sam_audio")) return 80;
    return 0;
}

static void *sam_model_load(const char *dir, const choir_model_options *opt, choir_err *err) {
    choir_sam_load_opts o = {.device = opt ? opt->device : 0};
    return choir_sam_load_ex(dir, &o, err);
}

#ifdef CHOIR_HAVE_CUDA
static int64_t sam_device_bytes(const void *w) { return choir_sam_device_bytes(w, NULL); }
#endif

static void sam_model_free(void *w) { choir_sam_free(w); }
static int64_t sam_resident(const void *w) { return (int64_t)choir_sam_weight_bytes(w); }

static int64_t samples48(const choir_request *r) {
    const choir_sts_input *in = &r->in.sts;
    if (in->sample_rate <= 0) return in->n_samples;
    return (int64_t)((double)in->n_samples * CHOIR_SAM_RATE / in->sample_rate) + 1;
}

static int64_t sam_length(const void *w, const choir_request *r) {
    (void)w;
    return samples48(r);
}

static void params_of(const choir_request *r, choir_sam_params *p) {
    choir_sam_default_params(p);
    const choir_sam_request *x = r->extra;
    choir_sts_chunking(&r->in.sts, p->chunk_seconds, p->overlap_seconds, &p->chunk_seconds, &p->overlap_seconds);
    /* out-of-range values stay as asked: choir_sam_check_params refuses them (sam_check, at submit) */
    if (!x) return;
    if (x->steps > 0) p->steps = x->steps;
    if (x->method == 1) p->method = CHOIR_SAM_EULER;
    if (x->has_seed) p->seed = x->seed;
}

static int sam_check(const void *w, const choir_request *r, choir_err *err) {
    (void)w;
    choir_sam_params p;
    params_of(r, &p);
    return choir_sam_check_params(&p, err);
}

static const char *description_of(const choir_request *r) {
    const choir_sam_request *x = r->extra;
    return x && x->description ? x->description : "speech";
}

/* A non-streaming request's whole result, in the arena. */
static int64_t whole_bytes(int64_t n) { return (2 * n * (int64_t)sizeof(float) + 255) / 256 * 256; }

static int64_t sam_estimate(const void *w, const choir_request *r) {
    choir_sam_params p;
    params_of(r, &p);
    int64_t n = samples48(r);
    int64_t bytes = choir_sam_job_bytes(w, n, choir_sam_count_tokens(w, description_of(r)), &p);
    if (!r->stream) bytes += whole_bytes(n);
    return bytes;
}

#ifdef CHOIR_HAVE_CUDA
static int64_t sam_estimate_device(const void *w, const choir_request *r) {
    choir_sam_params p;
    params_of(r, &p);
    return choir_sam_job_device_bytes(w, samples48(r), choir_sam_count_tokens(w, description_of(r)), &p);
}
#endif

typedef struct req_job {
    choir_request *req;
    choir_sam_job *job;
    float *x48;       /* resampled input (NULL at 48 kHz) */
    float *whole_t, *whole_r;
    int whole_in_arena;
    int64_t n;
} req_job;

static int on_chunk(void *user, const float *t, const float *r, int64_t n, int64_t offset, choir_err *err) {
    req_job *j = user;
    const choir_sam_request *sx = j->req->extra;
    if (sx && sx->output_residual) {
        const float *sw = t;
        t = r;
        r = sw;
    }
    if (!j->req->stream) {
        memcpy(j->whole_t + offset, t, (size_t)n * sizeof *t);
        memcpy(j->whole_r + offset, r, (size_t)n * sizeof *r);
        return 0;
    }
    const choir_sam_request *x = j->req->extra;
    if (x && x->on_residual) x->on_residual(x->residual_user, r, n, offset);
    choir_output out;
    memset(&out, 0, sizeof out);
    out.samples = t;
    out.n_samples = n;
    out.sample_rate = CHOIR_SAM_RATE;
    j->req->audio_seconds += (double)n / CHOIR_SAM_RATE;
    if (choir_request_emit(j->req, &out) == CHOIR_ECANCELED) return choir_err_set(err, CHOIR_ECANCELED, "sam-audio: cancelled");
    return 0;
}

static int start(req_job *j, const choir_sam *m, choir_request *req, choir_arena *arena, choir_err *err) {
    memset(j, 0, sizeof *j);
    j->req = req;
    const choir_sts_input *in = &req->in.sts;
    if (in->n_samples < 1 || !in->samples || in->sample_rate < 1000 || in->sample_rate > 384000)
        return choir_err_set(err, CHOIR_EINVAL, "sam-audio: bad input (%lld samples at %d Hz)", (long long)in->n_samples,
                             in->sample_rate);
    const float *x = in->samples;
    j->n = in->n_samples;
    if (in->sample_rate != CHOIR_SAM_RATE) {
        int rc = choir_resample(in->samples, in->n_samples, 1, in->sample_rate, CHOIR_SAM_RATE, &j->x48, &j->n, err);
        if (rc) return rc;
        x = j->x48;
    }
    if (!req->stream) {
        size_t bytes = (size_t)(2 * j->n) * sizeof(float);
        j->whole_in_arena = arena != NULL;
        j->whole_t = arena ? choir_arena_alloc(arena, bytes) : choir_alloc(CHOIR_MEM_IO, bytes);
        if (!j->whole_t) return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: no room for the result (%zu bytes)", bytes);
        j->whole_r = j->whole_t + j->n;
    }
    choir_sam_params p;
    params_of(req, &p);
    p.arena = arena;
    const choir_sam_request *e = req->extra;
    j->job = choir_sam_job_create(m, x, j->n, e && e->description ? e->description : "speech", e ? e->anchors : NULL,
                                  e ? e->n_anchors : 0, &p, on_chunk, j, err);
    return j->job ? 0 : (err->code ? err->code : CHOIR_EINVAL);
}

static void job_free(req_job *j) {
    choir_sam_job_free(j->job);
    choir_free(j->x48);
    if (!j->whole_in_arena) choir_free(j->whole_t);
    memset(j, 0, sizeof *j);
}

static void finish(req_job *j) {
    choir_output out;
    memset(&out, 0, sizeof out);
    out.final = 1;
    out.sample_rate = CHOIR_SAM_RATE;
    if (!j->req->stream) {
        const choir_sam_request *x = j->req->extra;
        if (x && x->on_residual) x->on_residual(x->residual_user, j->whole_r, j->n, 0);
        out.samples = j->whole_t;
        out.n_samples = j->n;
        j->req->audio_seconds += (double)j->n / CHOIR_SAM_RATE;
    }
    choir_request_emit(j->req, &out);
}

static int sam_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena, choir_err *err) {
    const choir_sam *m = weights;
    if (n < 1 || n > SAM_MAX_BATCH) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: batch of %d (1..%d)", n, SAM_MAX_BATCH);
    size_t mark = arena ? choir_arena_mark(arena) : 0;
    req_job jobs[SAM_MAX_BATCH];
    choir_sam_job *live[SAM_MAX_BATCH];
    int nl = 0;
    for (int i = 0; i < n; i++) {
        choir_err e = {0};
        if (start(&jobs[i], m, reqs[i], arena, &e) != 0) {
            if (e.code == CHOIR_ENOMEM) {
                for (int k = 0; k <= i; k++) job_free(&jobs[k]);
                if (arena) choir_arena_release(arena, mark);
                return choir_err_set(err, CHOIR_ENOMEM, "%s", e.msg);
            }
            choir_request_fail(reqs[i], e.code, "%s", e.msg);
            job_free(&jobs[i]);
        }
    }
    int rc = 0;
    for (;;) {
        nl = 0;
        for (int i = 0; i < n; i++)
            if (jobs[i].job && !choir_sam_job_done(jobs[i].job) && !choir_request_cancelled(reqs[i])) live[nl++] = jobs[i].job;
        if (nl == 0) break;
        choir_err e = {0};
        if ((rc = choir_sam_run_round(m, live, nl, &e)) != 0) {
            if (rc == CHOIR_ENOMEM) choir_err_set(err, rc, "%s", e.msg);
            else
                for (int i = 0; i < n; i++)
                    if (jobs[i].job && !reqs[i]->done) choir_request_fail(reqs[i], rc, "%s", e.msg);
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        if (!rc && jobs[i].job && !reqs[i]->status) finish(&jobs[i]);
        job_free(&jobs[i]);
    }
    if (arena) choir_arena_release(arena, mark);
    return rc == CHOIR_ENOMEM ? rc : 0;
}

const choir_model_ops choir_model_sam_audio = {
    .kind = "sam-audio",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_STS),
    .max_batch = SAM_MAX_BATCH,
    .probe = sam_probe,
    .load = sam_model_load,
    .free = sam_model_free,
    .resident_bytes = sam_resident,
    .length = sam_length,
    .estimate = sam_estimate,
    .run_batch = sam_run_batch,
    .check = sam_check,
#ifdef CHOIR_HAVE_CUDA
    /* Every call locks the device (choir_backend_lock), so engine workers
     * may share one GPU model. The device's working memory is a chunk's, as
     * on the host. */
    .gpu = 1,
    .device_bytes = sam_device_bytes,
    .estimate_device = sam_estimate_device,
#endif
};
