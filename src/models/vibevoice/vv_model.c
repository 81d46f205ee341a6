/* VibeVoice-ASR behind the engine's model interface (choir/model.h).
 *
 * The weights object is the network plus its tokenizer (tokenizer.json in
 * the model folder: Qwen2.5's). A request is one whole recording (up to
 * max_audio_s, an hour by default), transcribed in one pass. A batch (up to
 * 4 requests) encodes and prefills its requests in turn, since one prefill
 * already fills the machine, then decodes them in shared steps. Every state
 * (encoder activations, latents, prefill buffers, the KV cache for the
 * prompt plus max_new_tokens) comes from the batch arena, so the engine's
 * calibration sees what the batch really used. The request's `prompt`
 * is the context / hotwords of the prompt. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/backend.h"
#include "choir/log.h"
#include "choir/model.h"
#include "choir/tokenizer.h"
#include "choir/vibevoice.h"
#include "models/vibevoice/vv_state.h"

typedef struct vv_weights {
    choir_vibevoice *m;
    choir_tokenizer *tok;
} vv_weights;

static int vv_probe(const char *dir, const struct cJSON *config) {
    (void)dir;
    if (!config) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(config, "model_type");
    const char *t = cJSON_IsString(type) && type->valuestring ? type->valuestring : "";
    if (strcmp(t, "vibevoice_asr") == 0 || cJSON_GetObjectItemCaseSensitive(config, "acoustic_tokenizer_encoder_config"))
        return 100;
    /* The original layout shares model_type "vibevoice" with the TTS models;
     * the ASR one has no diffusion head. */
    if (cJSON_GetObjectItemCaseSensitive(config, "acoustic_tokenizer_config") &&
        cJSON_GetObjectItemCaseSensitive(config, "decoder_config") &&
        !cJSON_GetObjectItemCaseSensitive(config, "diffusion_head_config"))
        return 95;
    return 0;
}

static void vv_model_free(void *weights) {
    vv_weights *w = weights;
    if (!w) return;
    choir_tokenizer_free(w->tok);
    choir_vibevoice_free(w->m);
    choir_free(w);
}

static void *vv_model_load(const char *dir, const choir_model_options *opt, choir_err *err) {
    (void)opt; /* quantized language models come as stored (mlx-community, choir convert) */
    vv_weights *w = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *w);
    if (!w) {
        choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!(w->m = choir_vibevoice_load(dir, err))) goto fail;
    if (!(w->tok = choir_tokenizer_load(path, err))) {
        choir_err_prefix(err, "vibevoice needs Qwen2.5's tokenizer.json in the model folder: ");
        goto fail;
    }
    return w;
fail:
    vv_model_free(w);
    return NULL;
}

static int64_t vv_resident_bytes(const void *weights) {
    const vv_weights *w = weights;
    return (int64_t)choir_vibevoice_weight_bytes(w->m);
}

static int rate_of(const choir_request *r) {
    return r->in.stt.sample_rate > 0 ? r->in.stt.sample_rate : 16000;
}

/* Batching length: samples at 24 kHz. */
static int64_t vv_length(const void *weights, const choir_request *r) {
    (void)weights;
    return (int64_t)((double)r->in.stt.n_samples * CHOIR_VIBEVOICE_SAMPLE_RATE / rate_of(r));
}

static void request_opts(const choir_request *r, choir_vibevoice_opts *o) {
    choir_vibevoice_default_opts(o);
    /* req->extra, when set, is a choir_vibevoice_opts (max_new_tokens, guard). */
    if (r->extra) *o = *(const choir_vibevoice_opts *)r->extra;
    if (r->in.stt.prompt && r->in.stt.prompt[0]) o->context = r->in.stt.prompt;
    if (r->in.stt.max_tokens > 0) o->max_new_tokens = r->in.stt.max_tokens;
}

/* The request's whole state (encoder activations, latents, the prefill
 * buffers and the KV cache for prompt + max_new_tokens), plus its audio
 * buffers. Without loaded weights, the 7B model's sizes. */
static int64_t vv_estimate(const void *weights, const choir_request *r) {
    const vv_weights *w = weights;
    choir_vibevoice_dims d;
    if (w) d = *choir_vibevoice_get_dims(w->m);
    else choir_vibevoice_dims_named("7b", &d, NULL);
    choir_vibevoice_opts o;
    request_opts(r, &o);
    return choir_vibevoice_transcribe_bytes(&d, r->in.stt.n_samples, rate_of(r), &o) + (1 << 20);
}

typedef struct vv_emit_ctx {
    choir_request *req;
} vv_emit_ctx;

static int vv_on_text(void *user, const char *text, size_t len) {
    vv_emit_ctx *c = user;
    if (c->req->stream && len) {
        choir_output out = {.final = 0, .text = text};
        if (choir_request_emit(c->req, &out)) return 1;
    }
    return choir_request_cancelled(c->req);
}

static int vv_deliver(choir_request *r, const choir_vibevoice_result *res) {
    choir_segment *segs = choir_calloc(CHOIR_MEM_IO, (size_t)res->n_segments + 1, sizeof *segs);
    if (!segs) return CHOIR_ENOMEM;
    for (int i = 0; i < res->n_segments; i++) {
        const choir_vibevoice_segment *s = &res->segments[i];
        segs[i] = (choir_segment){.start_s = s->start, .end_s = s->end, .text = s->text,
                                  .has_speaker = s->speaker >= 0, .speaker = s->speaker};
    }
    choir_output out = {.final = 1, .text = res->text, .segments = segs, .n_segments = res->n_segments};
    r->audio_seconds = res->duration;
    choir_request_emit(r, &out);
    choir_free(segs);
    return 0;
}

/* Hands a finished request's result to its caller: the transcript, or the
 * reason it is none. CHOIR_ENOMEM when the segments cannot be handed over. */
static int vv_finish(choir_request *r, choir_vibevoice_result *res) {
    int rc = 0;
    if (res->stop == CHOIR_VIBEVOICE_STOP_CANCELLED) {
    } else if (res->malformed) {
        choir_request_fail(r, CHOIR_EINTERNAL, "vibevoice: the model's output is not a JSON transcript "
                           "(%d tokens%s): %.200s", res->n_generated,
                           res->stop == CHOIR_VIBEVOICE_STOP_LOOP ? ", stopped in a repetition loop" : "",
                           res->text ? res->text : "");
    } else {
        if (res->stop == CHOIR_VIBEVOICE_STOP_LOOP)
            CHOIR_LOGW("vibevoice: a repetition loop (period %d tokens) stopped the decode after %d tokens; "
                       "the transcript ends there", res->loop_period, res->n_generated);
        rc = vv_deliver(r, res);
    }
    choir_vibevoice_result_clear(res);
    return rc;
}

/* A batch of requests: each one's front end, encoders and prefill in turn,
 * then their decoding steps together (choir_vibevoice_step_batch_greedy: one
 * pass over the language model's weights per step for all of them, the
 * greedy picks made on the backend); a request
 * leaves the batch when it stops. Everything (the states, the batch's step
 * buffers, the kernels' scratch) is carved from the batch arena through one
 * stream of the model's backend, so the arena's high-water mark is what the
 * batch used. */
static int vv_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena, choir_err *err) {
    vv_weights *w = weights;
    const choir_vibevoice_dims *D = choir_vibevoice_get_dims(w->m);
    choir_backend *be = choir_vibevoice_backend(w->m);
    if (!choir_backend_is_host(be)) arena = NULL; /* device memory: the stream's own block */
    vv_job *jobs = choir_calloc(CHOIR_MEM_IO, (size_t)n, sizeof *jobs);
    vv_emit_ctx *ecs = choir_calloc(CHOIR_MEM_IO, (size_t)n, sizeof *ecs);
    int *live = choir_calloc(CHOIR_MEM_IO, (size_t)n, sizeof *live);
    choir_vibevoice_state **states = choir_calloc(CHOIR_MEM_IO, (size_t)n, sizeof *states);
    int32_t *toks = choir_calloc(CHOIR_MEM_IO, (size_t)n, sizeof *toks);
    int32_t *picks = choir_calloc(CHOIR_MEM_IO, (size_t)n, sizeof *picks);
    int rc = 0;
    choir_err e = {0};
    choir_stream *st = NULL;
    choir_vibevoice_batch *batch = NULL;
    size_t mark = arena ? choir_arena_mark(arena) : 0;
    if (!jobs || !ecs || !live || !states || !toks || !picks) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        goto done;
    }
    /* What the batch takes: every state, the step buffers, the largest scratch. */
    int64_t bytes = choir_vibevoice_batch_bytes(D, n), scratch = 0;
    for (int i = 0; i < n; i++) {
        choir_vibevoice_opts o;
        request_opts(reqs[i], &o);
        int64_t sc = 0;
        bytes += choir_vibevoice_transcribe_state_bytes(D, reqs[i]->in.stt.n_samples, rate_of(reqs[i]), &o, &sc);
        if (sc > scratch) scratch = sc;
    }
    if (arena && choir_arena_capacity(arena) - choir_arena_used(arena) < (size_t)bytes) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: the batch arena lacks %.1f MB for this batch", bytes / 1e6);
        goto done;
    }
    if (!(st = choir_stream_create(be, &e))) rc = CHOIR_ENOMEM;
    else if (arena) rc = choir_stream_use_arena(st, arena, (size_t)scratch, &e);
    else rc = choir_stream_reserve(st, (size_t)bytes, (size_t)scratch, &e);
    if (rc) {
        choir_err_set(err, rc, "%s", e.msg);
        goto done;
    }
    int n_live = 0;
    for (int i = 0; i < n; i++) {
        choir_request *r = reqs[i];
        if (r->task != CHOIR_TASK_STT) {
            choir_request_fail(r, CHOIR_EINVAL, "vibevoice serves speech-to-text only");
            continue;
        }
        if (choir_request_cancelled(r)) continue;
        choir_vibevoice_opts o;
        request_opts(r, &o);
        ecs[i].req = r;
        o.on_text = vv_on_text;
        o.user = &ecs[i];
        memset(&e, 0, sizeof e);
        int jr = vv_job_begin(&jobs[i], w->m, w->tok, r->in.stt.samples, r->in.stt.n_samples, rate_of(r), &o, NULL,
                              st, &e);
        if (jr == 0) jr = vv_job_next(&jobs[i], &e);
        if (jr == CHOIR_ENOMEM) {
            rc = choir_err_set(err, jr, "%s", e.msg);
            goto done;
        }
        if (jr < 0) {
            choir_request_fail(r, jr, "%s", e.msg);
            vv_job_clear(&jobs[i]);
        } else if (jr == 0) {
            choir_vibevoice_result res;
            if ((jr = vv_job_finish(&jobs[i], &res, &e)) || vv_finish(r, &res)) {
                rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
                goto done;
            }
        } else {
            live[i] = 1;
            n_live++;
        }
    }
    if (n_live > 1 && !(batch = choir_vibevoice_batch_create(w->m, n, st, &e))) {
        rc = choir_err_set(err, e.code ? e.code : CHOIR_ENOMEM, "%s", e.msg);
        goto done;
    }
    while (n_live > 0) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (live[i]) {
                states[k] = jobs[i].s;
                toks[k++] = jobs[i].pending;
            }
        memset(&e, 0, sizeof e);
        /* Several: the greedy picks made on the backend, only the ids come back. */
        int sr = k > 1 ? choir_vibevoice_step_batch_greedy(w->m, batch, states, toks, k, picks, &e)
                       : choir_vibevoice_step(w->m, states[0], toks[0], NULL, &e);
        for (int i = 0, row = 0; i < n; i++) {
            if (!live[i]) continue;
            int jr = sr ? sr : k > 1 ? vv_job_take(&jobs[i], picks[row], &e) : vv_job_next(&jobs[i], &e);
            row++;
            if (jr == CHOIR_ENOMEM) {
                rc = choir_err_set(err, jr, "%s", e.msg);
                goto done;
            }
            if (jr == 1) continue;
            live[i] = 0;
            n_live--;
            if (jr < 0) {
                choir_request_fail(reqs[i], jr, "%s", e.msg);
                vv_job_clear(&jobs[i]);
                continue;
            }
            choir_vibevoice_result res;
            if (vv_job_finish(&jobs[i], &res, &e) || vv_finish(reqs[i], &res)) {
                rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
                goto done;
            }
        }
    }
done:
    for (int i = 0; jobs && i < n; i++) vv_job_clear(&jobs[i]);
    choir_vibevoice_batch_free(batch);
    choir_stream_free(st);
    if (arena) choir_arena_release(arena, mark);
    choir_free(picks);
    choir_free(toks);
    choir_free(states);
    choir_free(live);
    choir_free(ecs);
    choir_free(jobs);
    return rc;
}

const choir_model_ops choir_model_vibevoice = {
    .kind = "vibevoice",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_STT),
    .max_batch = 4,
    .input_rate = CHOIR_VIBEVOICE_SAMPLE_RATE,
    .probe = vv_probe,
    .load = vv_model_load,
    .free = vv_model_free,
    .resident_bytes = vv_resident_bytes,
    .length = vv_length,
    .estimate = vv_estimate,
    .run_batch = vv_run_batch,
};
