/* VibeVoice-ASR behind the engine's model interface (choir/model.h).
 *
 * The weights object is the network plus its tokenizer (tokenizer.json in
 * the model folder: Qwen2.5's). A request is one whole recording (up to
 * max_audio_s, an hour by default), transcribed in one pass. A batch (up to
 * 4 requests) encodes and prefills its requests in turn, since one prefill
 * already fills the machine, then decodes them in shared steps; queued
 * requests join a running batch between steps (run_batch_join: continuous
 * batching). Every state (encoder activations, latents, prefill buffers,
 * the KV cache for the prompt plus max_new_tokens) comes from the batch
 * arena, or a joined request's own arena, so the engine's calibration sees
 * what each really used. The request's `prompt` is the context / hotwords
 * of the prompt. */
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

/* Requests decoding at once in one batch (members and joined ones). */
#define VV_MAX_BATCH 4

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
 * buffers and the step buffers of a full batch (a batch of one may grow to
 * VV_MAX_BATCH by joins). Without loaded weights, the 7B model's sizes. */
static int64_t vv_estimate(const void *weights, const choir_request *r) {
    const vv_weights *w = weights;
    choir_vibevoice_dims d;
    if (w) d = *choir_vibevoice_get_dims(w->m);
    else choir_vibevoice_dims_named("7b", &d, NULL);
    choir_vibevoice_opts o;
    request_opts(r, &o);
    return choir_vibevoice_transcribe_bytes(&d, r->in.stt.n_samples, rate_of(r), &o) +
           choir_vibevoice_batch_bytes(&d, VV_MAX_BATCH) + (1 << 20);
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

/* A place in the running batch: the request's job, and for a request that
 * joined the batch while it ran, its own stream over the arena the engine
 * gave it. */
typedef struct vv_slot {
    vv_job job;
    vv_emit_ctx ec;
    choir_request *req;
    choir_stream *own;
    int live, joined;
} vv_slot;

/* The state's working memory and kernel scratch of request r. */
static int64_t req_state_bytes(const choir_vibevoice_dims *D, const choir_request *r, int64_t *scratch) {
    choir_vibevoice_opts o;
    request_opts(r, &o);
    return choir_vibevoice_transcribe_state_bytes(D, r->in.stt.n_samples, rate_of(r), &o, scratch);
}

/* Starts request r in slot sl on `stream`: front end, encoders, prefill and
 * the first pick. 1: it decodes; 0: it is already over (failed, cancelled
 * or finished, its output delivered); CHOIR_ENOMEM: the stream's memory was
 * too small (err says so), nothing delivered. */
static int slot_start(vv_weights *w, vv_slot *sl, choir_request *r, choir_stream *stream, choir_err *err) {
    sl->req = r;
    if (r->task != CHOIR_TASK_STT) {
        choir_request_fail(r, CHOIR_EINVAL, "vibevoice serves speech-to-text only");
        return 0;
    }
    if (choir_request_cancelled(r)) return 0;
    choir_vibevoice_opts o;
    request_opts(r, &o);
    sl->ec.req = r;
    o.on_text = vv_on_text;
    o.user = &sl->ec;
    choir_err e = {0};
    int jr = vv_job_begin(&sl->job, w->m, w->tok, r->in.stt.samples, r->in.stt.n_samples, rate_of(r), &o, NULL,
                          stream, &e);
    if (jr == 0) jr = vv_job_next(&sl->job, &e);
    if (jr == CHOIR_ENOMEM) {
        vv_job_clear(&sl->job);
        return choir_err_set(err, jr, "%s", e.msg);
    }
    if (jr < 0) {
        choir_request_fail(r, jr, "%s", e.msg);
        vv_job_clear(&sl->job);
        return 0;
    }
    if (jr == 0) {
        choir_vibevoice_result res;
        if (vv_job_finish(&sl->job, &res, &e) || vv_finish(r, &res))
            choir_request_fail(r, CHOIR_ENOMEM, "vibevoice: out of memory for the transcript");
        return 0;
    }
    sl->live = 1;
    return 1;
}

/* Empties slot sl; a joined request leaves the batch (the engine ends it
 * and frees its arena). */
static void slot_end(vv_slot *sl, choir_batch_join *join, int overflow) {
    vv_job_clear(&sl->job);
    choir_stream_free(sl->own);
    if (sl->joined) choir_batch_join_leave(join, sl->req, overflow);
    memset(sl, 0, sizeof *sl);
}

/* Requests the engine admits to join the running batch (continuous
 * batching), each started on a stream over its own arena in a free slot;
 * one whose arena is too small goes back to the engine's queue. */
static void slots_join(vv_weights *w, vv_slot *slots, int *n_live, choir_batch_join *join) {
    const choir_vibevoice_dims *D = choir_vibevoice_get_dims(w->m);
    choir_backend *be = choir_vibevoice_backend(w->m);
    choir_request *nreq[VV_MAX_BATCH];
    choir_arena *nar[VV_MAX_BATCH];
    int k = *n_live < VV_MAX_BATCH ? choir_batch_join_take(join, *n_live, nreq, nar) : 0;
    for (int i = 0; i < k; i++) {
        vv_slot *sl = NULL;
        for (int q = 0; q < VV_MAX_BATCH && !sl; q++)
            if (!slots[q].req) sl = &slots[q];
        sl->joined = 1;
        sl->req = nreq[i];
        int64_t scratch = 0, bytes = req_state_bytes(D, nreq[i], &scratch);
        choir_err e = {0};
        int rc = 0;
        if (choir_backend_is_host(be) && choir_arena_capacity(nar[i]) - choir_arena_used(nar[i]) < (size_t)bytes)
            rc = CHOIR_ENOMEM;
        else if (!(sl->own = choir_stream_create(be, &e)))
            rc = CHOIR_ENOMEM;
        else if (choir_backend_is_host(be))
            rc = choir_stream_use_arena(sl->own, nar[i], (size_t)scratch, &e);
        else
            rc = choir_stream_reserve(sl->own, (size_t)bytes, (size_t)scratch, &e);
        if (rc == 0) rc = slot_start(w, sl, nreq[i], sl->own, &e);
        if (rc == 1) {
            (*n_live)++;
            continue;
        }
        /* Over at once, or its arena too small (the engine retries it with more). */
        slot_end(sl, join, rc == CHOIR_ENOMEM);
    }
}

/* A batch of requests: each one's front end, encoders and prefill in turn,
 * then their decoding steps together (choir_vibevoice_step_batch_greedy:
 * one pass over the language model's weights per step for all of them, the
 * greedy picks made on the backend); a request leaves the batch when it
 * stops, and with `join` (the engine's, continuous batching) queued
 * requests join it between steps while it has room, each in the arena the
 * engine admitted it with. The members' states, the step buffers and the
 * kernels' scratch are carved from the batch arena through one stream of
 * the model's backend, so the arena's high-water mark is what the batch
 * used; a joined request's state comes from its own arena. */
static int vv_run_batch_join(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                             choir_batch_join *join, choir_err *err) {
    vv_weights *w = weights;
    const choir_vibevoice_dims *D = choir_vibevoice_get_dims(w->m);
    choir_backend *be = choir_vibevoice_backend(w->m);
    if (!choir_backend_is_host(be)) arena = NULL; /* device memory: the stream's own block */
    vv_slot *slots = choir_calloc(CHOIR_MEM_IO, VV_MAX_BATCH, sizeof *slots);
    choir_vibevoice_state *states[VV_MAX_BATCH];
    int32_t toks[VV_MAX_BATCH], picks[VV_MAX_BATCH];
    int rc = 0;
    choir_err e = {0};
    choir_stream *st = NULL;
    choir_vibevoice_batch *batch = NULL;
    size_t mark = arena ? choir_arena_mark(arena) : 0;
    if (!slots) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        goto done;
    }
    if (n > VV_MAX_BATCH) {
        rc = choir_err_set(err, CHOIR_EINVAL, "vibevoice: a batch of %d requests (at most %d)", n, VV_MAX_BATCH);
        goto done;
    }
    /* What the batch takes: every member's state, the step buffers, the largest scratch. */
    int64_t bytes = choir_vibevoice_batch_bytes(D, VV_MAX_BATCH), scratch = 0;
    for (int i = 0; i < n; i++) {
        int64_t sc = 0;
        bytes += req_state_bytes(D, reqs[i], &sc);
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
        memset(&e, 0, sizeof e);
        int sr = slot_start(w, &slots[i], reqs[i], st, &e);
        if (sr == CHOIR_ENOMEM) {
            rc = choir_err_set(err, sr, "%s", e.msg);
            goto done;
        }
        if (sr == 1) n_live++;
        else memset(&slots[i], 0, sizeof slots[i]);
    }
    for (;;) {
        slots_join(w, slots, &n_live, join);
        if (n_live == 0) break;
        int k = 0;
        for (int q = 0; q < VV_MAX_BATCH; q++)
            if (slots[q].live) {
                states[k] = slots[q].job.s;
                toks[k++] = slots[q].job.pending;
            }
        if (k > 1 && !batch && !(batch = choir_vibevoice_batch_create(w->m, VV_MAX_BATCH, st, &e))) {
            rc = choir_err_set(err, e.code ? e.code : CHOIR_ENOMEM, "%s", e.msg);
            goto done;
        }
        memset(&e, 0, sizeof e);
        /* Several: the greedy picks made on the backend, only the ids come back. */
        int sr = k > 1 ? choir_vibevoice_step_batch_greedy(w->m, batch, states, toks, k, picks, &e)
                       : choir_vibevoice_step(w->m, states[0], toks[0], NULL, &e);
        for (int q = 0, row = 0; q < VV_MAX_BATCH; q++) {
            vv_slot *sl = &slots[q];
            if (!sl->live) continue;
            int jr = sr ? sr : k > 1 ? vv_job_take(&sl->job, picks[row], &e) : vv_job_next(&sl->job, &e);
            row++;
            if (jr == CHOIR_ENOMEM) {
                rc = choir_err_set(err, jr, "%s", e.msg);
                goto done;
            }
            if (jr == 1) continue;
            n_live--;
            if (jr < 0) {
                choir_request_fail(sl->req, jr, "%s", e.msg);
            } else {
                choir_vibevoice_result res;
                if (vv_job_finish(&sl->job, &res, &e) || vv_finish(sl->req, &res))
                    choir_request_fail(sl->req, CHOIR_ENOMEM, "vibevoice: out of memory for the transcript");
            }
            slot_end(sl, join, 0);
        }
    }
done:
    for (int q = 0; slots && q < VV_MAX_BATCH; q++) slot_end(&slots[q], join, 0);
    choir_vibevoice_batch_free(batch);
    choir_stream_free(st);
    if (arena) choir_arena_release(arena, mark);
    choir_free(slots);
    return rc;
}

static int vv_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena, choir_err *err) {
    return vv_run_batch_join(weights, reqs, n, arena, NULL, err);
}

const choir_model_ops choir_model_vibevoice = {
    .kind = "vibevoice",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_STT),
    .max_batch = VV_MAX_BATCH,
    .input_rate = CHOIR_VIBEVOICE_SAMPLE_RATE,
    .probe = vv_probe,
    .load = vv_model_load,
    .free = vv_model_free,
    .resident_bytes = vv_resident_bytes,
    .length = vv_length,
    .estimate = vv_estimate,
    .run_batch = vv_run_batch,
    .run_batch_join = vv_run_batch_join,
};
