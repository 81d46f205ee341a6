/* VibeVoice-ASR behind the engine's model interface (choir/model.h).
 *
 * The weights object is the network plus its tokenizer (tokenizer.json in
 * the model folder: Qwen2.5's). A request is one whole recording (up to
 * max_audio_s, an hour by default), transcribed in one pass. A batch
 * encodes and prefills its requests in turn, since one prefill already
 * fills the machine, then decodes them in shared steps; queued requests
 * join a running batch between steps (run_batch_join: continuous
 * batching). The request's `prompt` is the context / hotwords of the
 * prompt.
 *
 * On the CPU (batches of 4) every state (encoder activations, latents,
 * prefill buffers, the KV cache for the prompt plus max_new_tokens) comes
 * from the batch arena, or a joined request's own arena, so the engine's
 * calibration sees what each really used.
 *
 * On a GPU (CUDA builds, options.device >= 1; batches of up to 32) the
 * replica keeps, from its load on: the weights, one paged KV pool holding
 * every request's keys and values (choir_vibevoice_kv_pool, sized from the
 * room the engine's device budget leaves it: choir_model_options
 * .device_free_bytes), the kernel scratch of the largest request and step,
 * and the batched step's buffers (its graphs recorded once per row count).
 * The engine admits a request there by its pages (estimate_pool: its
 * context of prompt + max_new_tokens in pages of the pool) and its own
 * state (estimate_device less the pages), so a long request waits until
 * its pages fit; each step is choir_vibevoice_step_batch_greedy over the
 * pool, a graph replay that brings back only the picked ids. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/backend.h"
#include "choir/log.h"
#include "choir/model.h"
#include "choir/pool.h"
#include "choir/tokenizer.h"
#include "choir/vibevoice.h"
#include "models/vibevoice/vv_model.h"
#include "models/vibevoice/vv_state.h"

/* Requests decoding at once in one batch on the CPU (members and joined
 * ones; a dispatched batch may be larger in CUDA builds, whose max_batch
 * is the GPU's). */
#define VV_MAX_BATCH 4
/* Rows of a GPU replica's batched step (the engine's max_batch caps a
 * batch below it): the step streams the weights once for all of them. */
#define VV_GPU_MAX_BATCH 32
#ifdef CHOIR_HAVE_CUDA
#define VV_OPS_MAX_BATCH VV_GPU_MAX_BATCH
#else
#define VV_OPS_MAX_BATCH VV_MAX_BATCH
#endif
/* A GPU replica leaves this many requests' own states room beside its
 * pool (their state blocks at the longest audio), so that the pool does
 * not take the memory their working sets need. */
#define VV_GPU_STATE_ROOM VV_GPU_MAX_BATCH
/* Seconds of encoding and prefill of a waiting request between two steps
 * of a batch's decoding members (each then waits at most this plus one
 * encoder pass or prefill chunk). Not yet measured on a GPU; from the H100
 * figures of the whole-request path (a 10-minute request's 2.7 s of
 * encoding and prefill, steps of 8-16 ms) it should leave the prefill
 * about 75-85% of its speed alone while the others take a step every
 * 60-70 ms. */
#define VV_PREP_SLICE_S 0.05

typedef struct vv_weights {
    choir_vibevoice *m;
    choir_tokenizer *tok;
    pthread_mutex_t gpu_lock; /* GPU: one batch on the device at a time */
    pthread_mutex_t lock;     /* the stats */
    vv_model_stats stats;
    double prep_slice_s;      /* VV_PREP_SLICE_S unless a benchmark sets it */
    /* A GPU replica: its CUDA backend (owned), the pool of every request's
     * KV pages, the batched step on a stream of its own, all kept from the
     * load on. */
    int gpu;
    choir_backend *be;
    choir_vibevoice_kv_pool *pool;
    choir_stream *bstream;
    choir_vibevoice_batch *batch;
    int64_t page_bytes;    /* of the pool */
    int64_t scratch;       /* kernel scratch reserved for the largest request and step */
    int64_t dev_bytes;     /* device bytes held once loaded */
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
    choir_vibevoice_batch_free(w->batch);
    choir_stream_free(w->bstream);
    choir_vibevoice_kv_pool_free(w->pool);
    choir_tokenizer_free(w->tok);
    choir_vibevoice_free(w->m);
    choir_backend_free(w->be);
    pthread_mutex_destroy(&w->gpu_lock);
    pthread_mutex_destroy(&w->lock);
    choir_free(w);
}

/* The prefill chunk of a GPU replica's requests: the default (0: 256
 * positions) unless CHOIR_VV_GPU_PREFILL=N (16 .. 4096) asks for another,
 * for timing the engine at the bench's chunk sizes (issue #23: the bench
 * prefills in chunks of 1024). Every plan of the replica takes it (its
 * scratch, its room for states, each request's estimate and state), so
 * the memory is accounted: each state's prefill buffers are about 0.25 MB
 * a position for the 7B model (64 MB at 256, 258 MB at 1024), times
 * VV_GPU_STATE_ROOM in the room left beside the pool. Not yet run on a
 * GPU. */
static int gpu_prefill_chunk(void) {
    const char *e = getenv("CHOIR_VV_GPU_PREFILL");
    int n = e ? atoi(e) : 0;
    return n >= 16 && n <= 4096 ? n : 0;
}

/* The plan of the longest request a GPU replica sizes its scratch and its
 * states' room for: max_audio_s of audio with the default options, its KV
 * context as long as the model allows (a request may ask for more new
 * tokens than the default), in the pool. */
static void gpu_worst_plan(const choir_vibevoice_dims *D, choir_vibevoice_plan *p) {
    choir_vibevoice_opts o;
    choir_vibevoice_default_opts(&o);
    o.prefill_chunk = gpu_prefill_chunk();
    choir_vibevoice_transcribe_plan(D, (int64_t)(o.max_audio_s * CHOIR_VIBEVOICE_SAMPLE_RATE),
                                    CHOIR_VIBEVOICE_SAMPLE_RATE, &o, p);
    p->max_context = D->lm.max_positions;
    p->kv_paged = 1;
}

/* Device bytes of a paged state's own block (its kernel scratch is the
 * replica's, its keys and values the pool's). */
static int64_t paged_state_bytes(const choir_vibevoice_dims *D, const choir_vibevoice_plan *p) {
    return choir_vibevoice_plan_bytes(D, p) - choir_vibevoice_plan_scratch_bytes(D, p) + 4096;
}

/* Sets a GPU replica up beside its weights: kernel scratch for the largest
 * request and the largest step, the batched step's buffers, room for
 * VV_GPU_STATE_ROOM requests' own states, and a KV pool of all the rest of
 * `room` (the engine's figure, or 90% of the card). */
/* The pool's keys and values in the language model's dtype: bf16 for a
 * model stored in 16 bits or quantized (the published checkpoints, bf16:
 * what transformers keeps its cache in) or when the engine asks for bf16
 * (compute_bf16 1); f32 for an f32 checkpoint or when the engine turns
 * bf16 off (compute_bf16 -1). bf16 pages hold
 * twice the tokens (15 hour-long requests in the default budget of an
 * H100 instead of 7). */
static choir_dtype gpu_kv_dtype(const choir_vibevoice *m, const choir_model_options *opt) {
    if (opt && opt->compute_bf16 != 0) return opt->compute_bf16 > 0 ? CHOIR_DTYPE_BF16 : CHOIR_DTYPE_F32;
    return m->layers[0].q.kind == CHOIR_WEIGHT_F32 ? CHOIR_DTYPE_F32 : CHOIR_DTYPE_BF16;
}

static int gpu_setup(vv_weights *w, const choir_model_options *opt, choir_err *err) {
    const choir_vibevoice_dims *D = choir_vibevoice_get_dims(w->m);
    const choir_vibevoice_lm_dims *L = &D->lm;
    choir_dtype kv = gpu_kv_dtype(w->m, opt);
    int64_t room = opt ? opt->device_free_bytes : 0;
    if (room <= 0) {
        choir_backend_device dev;
        int index = opt && opt->device >= 1 ? CHOIR_DEVICE_GPU_INDEX(opt->device) : 0;
        int rc = choir_backend_device_query(index, &dev, err);
        if (rc) return rc;
        room = (int64_t)(0.9 * (double)dev.total_bytes);
    }
    choir_vibevoice_plan worst;
    gpu_worst_plan(D, &worst);
    /* A step's split-keys attention: partial sums of every row's pages. */
    int64_t att = (int64_t)VV_GPU_MAX_BATCH * L->n_heads * choir_vibevoice_kv_pages_for(L->max_positions) *
                  (L->head_dim + 2) * (int64_t)sizeof(float);
    w->scratch = choir_vibevoice_plan_scratch_bytes(D, &worst) + att +
                 (int64_t)VV_GPU_MAX_BATCH * (L->vocab > L->intermediate ? L->vocab : L->intermediate) * 4;
    int64_t step = choir_vibevoice_batch_bytes_paged(D, VV_GPU_MAX_BATCH, NULL);
    choir_vibevoice_plan hour;
    choir_vibevoice_opts o;
    choir_vibevoice_default_opts(&o);
    o.prefill_chunk = gpu_prefill_chunk();
    choir_vibevoice_transcribe_plan(D, (int64_t)(o.max_audio_s * CHOIR_VIBEVOICE_SAMPLE_RATE),
                                    CHOIR_VIBEVOICE_SAMPLE_RATE, &o, &hour);
    hour.kv_paged = 1;
    int64_t states = (int64_t)VV_GPU_STATE_ROOM * (paged_state_bytes(D, &hour) + (1 << 20));
    int64_t held = choir_backend_mem_current(w->be);
    w->page_bytes = choir_vibevoice_kv_page_bytes_as(D, kv);
    int64_t pool = room - held - w->scratch - step - states - ((int64_t)16 << 20);
    if (pool < w->page_bytes)
        return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: %.2f GB of device memory leave no room for a KV pool "
                             "(weights %.2f GB, scratch %.2f GB, %d requests' states %.2f GB)", room / 1e9,
                             held / 1e9, w->scratch / 1e9, VV_GPU_STATE_ROOM, states / 1e9);
    if (!(w->pool = choir_vibevoice_kv_pool_create_as(w->m, pool, kv, err)) ||
        !(w->bstream = choir_stream_create(w->be, err)) ||
        choir_stream_reserve(w->bstream, (size_t)step, (size_t)w->scratch, err) ||
        !(w->batch = choir_vibevoice_batch_create_paged(w->m, VV_GPU_MAX_BATCH, w->pool, w->bstream, err)))
        return err && err->code ? err->code : CHOIR_ENOMEM;
    choir_vibevoice_batch_set_graph(w->batch, true);
    w->dev_bytes = choir_backend_mem_current(w->be);
    choir_vibevoice_kv_usage u;
    choir_vibevoice_kv_pool_usage(w->pool, &u);
    CHOIR_LOGI("vibevoice on %s: %.2f GB of weights, a KV pool of %d pages (%.2f GB, %s; %d tokens), "
               "%.2f GB of scratch and step buffers", choir_backend_name(w->be), held / 1e9, u.pages,
               u.pages * (double)u.page_bytes / 1e9, choir_dtype_name(kv), u.pages * CHOIR_VV_PAGE,
               (w->scratch + step) / 1e9);
    return 0;
}

void *vv_model_over(choir_vibevoice *m, choir_backend *be, choir_tokenizer *tok, const choir_model_options *opt,
                    choir_err *err) {
    vv_weights *w = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *w);
    if (w && pthread_mutex_init(&w->lock, NULL)) {
        choir_free(w);
        w = NULL;
    }
    if (w && pthread_mutex_init(&w->gpu_lock, NULL)) {
        pthread_mutex_destroy(&w->lock);
        choir_free(w);
        w = NULL;
    }
    if (!w) {
        choir_tokenizer_free(tok);
        choir_vibevoice_free(m);
        choir_backend_free(be);
        choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        return NULL;
    }
    w->m = m;
    w->tok = tok;
    w->be = be;
    w->prep_slice_s = VV_PREP_SLICE_S;
    w->gpu = be && !choir_backend_is_host(be);
    if (w->gpu && gpu_setup(w, opt, err)) {
        vv_model_free(w);
        return NULL;
    }
    return w;
}

static void *vv_model_load(const char *dir, const choir_model_options *opt, choir_err *err) {
    /* quantized language models come as stored (mlx-community, choir convert) */
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    choir_backend *be = NULL;
    choir_vibevoice *m = NULL;
    choir_tokenizer *tok = NULL;
    if (opt && opt->device >= 1) {
        /* f32 checkpoints as bf16 on the device when the engine asks for bf16 */
        choir_backend_cuda_opts co = {.device = CHOIR_DEVICE_GPU_INDEX(opt->device), .bf16 = opt->compute_bf16 > 0};
        if (!(be = choir_backend_cuda(&co, err))) return NULL;
    }
    if (!(m = choir_vibevoice_load_on(dir, be, err))) goto fail;
    if (!(tok = choir_tokenizer_load(path, err))) {
        choir_err_prefix(err, "vibevoice needs Qwen2.5's tokenizer.json in the model folder: ");
        goto fail;
    }
    return vv_model_over(m, be, tok, opt, err);
fail:
    choir_vibevoice_free(m);
    choir_backend_free(be);
    return NULL;
}

#ifdef CHOIR_HAVE_CUDA
static int64_t vv_device_bytes(const void *weights) {
    const vv_weights *w = weights;
    return w && w->gpu ? w->dev_bytes : 0;
}

static int64_t vv_pool_bytes(const void *weights) {
    const vv_weights *w = weights;
    if (!w || !w->pool) return 0;
    choir_vibevoice_kv_usage u;
    choir_vibevoice_kv_pool_usage(w->pool, &u);
    return (int64_t)u.pages * u.page_bytes;
}
#endif

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

#ifdef CHOIR_HAVE_CUDA
/* The request's plan as the engine sizes it: one hop of input more than it
 * has (resampling may round its length up), so the state the request
 * really makes never needs more than its estimates. */
static void estimate_plan(const choir_vibevoice_dims *D, const choir_request *r, choir_vibevoice_plan *p) {
    choir_vibevoice_opts o;
    request_opts(r, &o);
    if (!o.prefill_chunk) o.prefill_chunk = gpu_prefill_chunk();
    int64_t slack = (int64_t)ceil((double)D->hop * rate_of(r) / CHOIR_VIBEVOICE_SAMPLE_RATE);
    choir_vibevoice_transcribe_plan(D, r->in.stt.n_samples + slack, rate_of(r), &o, p);
    p->kv_paged = 1;
}
#endif

static void dims_of(const vv_weights *w, choir_vibevoice_dims *d) {
    if (w) *d = *choir_vibevoice_get_dims(w->m);
    else choir_vibevoice_dims_named("7b", d, NULL);
}

/* On the CPU: the request's whole state (encoder activations, latents, the
 * prefill buffers and the KV cache for prompt + max_new_tokens), plus its
 * audio buffers and the step buffers of a full batch (a batch of one may
 * grow to VV_MAX_BATCH by joins). Without loaded weights, the 7B model's
 * sizes on the CPU. A GPU replica uses no arena: a token amount (its host
 * copies of the audio and tokens are I/O memory, which the engine measures
 * apart). */
static int64_t vv_estimate(const void *weights, const choir_request *r) {
    const vv_weights *w = weights;
    choir_vibevoice_dims d;
    dims_of(w, &d);
    choir_vibevoice_opts o;
    request_opts(r, &o);
    if (w && w->gpu) return 1 << 20;
    return choir_vibevoice_transcribe_bytes(&d, r->in.stt.n_samples, rate_of(r), &o) +
           choir_vibevoice_batch_bytes(&d, VV_MAX_BATCH) + (1 << 20);
}

#ifdef CHOIR_HAVE_CUDA
/* The pages of a request's context (f32 keys and values without loaded
 * weights), from its plan. */
static int64_t pool_part(const vv_weights *w, const choir_vibevoice_dims *d, const choir_vibevoice_plan *p) {
    int64_t page = w && w->page_bytes ? w->page_bytes : choir_vibevoice_kv_page_bytes(d);
    return (int64_t)choir_vibevoice_kv_pages_for(p->max_context) * page;
}

/* The pool part of a request on a GPU. */
static int64_t vv_estimate_pool(const void *weights, const choir_request *r) {
    const vv_weights *w = weights;
    choir_vibevoice_dims d;
    dims_of(w, &d);
    choir_vibevoice_plan p;
    estimate_plan(&d, r, &p);
    return pool_part(w, &d, &p);
}

/* Its own state (one block: encoder buffers, latents, prefill buffers, its
 * page table) and its pages. The replica's scratch and step buffers are
 * counted in its device bytes. */
static int64_t vv_estimate_device(const void *weights, const choir_request *r) {
    const vv_weights *w = weights;
    choir_vibevoice_dims d;
    dims_of(w, &d);
    choir_vibevoice_plan p;
    estimate_plan(&d, r, &p);
    return paged_state_bytes(&d, &p) + (1 << 20) + pool_part(w, &d, &p);
}
#endif

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
 * joined the batch while it ran on the CPU, its own stream over the arena
 * the engine gave it. A place is taken (req), then opened (the front end
 * and its state), prepared (encoders and prefill, in slices between the
 * batch's steps) and live (it decodes in the steps). */
typedef struct vv_slot {
    vv_job job;
    vv_emit_ctx ec;
    choir_request *req;
    choir_stream *own;
    int64_t order; /* arrival in the batch: the first to arrive is prepared first */
    int opened, live, joined;
} vv_slot;

/* The state's working memory and kernel scratch of request r. */
static int64_t req_state_bytes(const choir_vibevoice_dims *D, const choir_request *r, int64_t *scratch) {
    choir_vibevoice_opts o;
    request_opts(r, &o);
    return choir_vibevoice_transcribe_state_bytes(D, r->in.stt.n_samples, rate_of(r), &o, scratch);
}

/* Opens slot sl's request: its front end and its state, carved from
 * `stream` (the CPU) or, on a GPU replica, a block of its own with its KV
 * cache in the pool. 1: opened; 0: already over (failed or cancelled);
 * CHOIR_ENOMEM: its memory was too small or its pages did not fit (err
 * says so), nothing delivered. */
static int slot_open(vv_weights *w, vv_slot *sl, choir_stream *stream, choir_err *err) {
    choir_request *r = sl->req;
    if (r->task != CHOIR_TASK_STT) {
        choir_request_fail(r, CHOIR_EINVAL, "vibevoice serves speech-to-text only");
        return 0;
    }
    if (choir_request_cancelled(r)) return 0;
    choir_vibevoice_opts o;
    request_opts(r, &o);
    if (w->gpu && !o.prefill_chunk) o.prefill_chunk = gpu_prefill_chunk();
    sl->ec.req = r;
    o.on_text = vv_on_text;
    o.user = &sl->ec;
    choir_err e = {0};
    int jr = vv_job_open(&sl->job, w->m, w->tok, r->in.stt.samples, r->in.stt.n_samples, rate_of(r), &o, NULL,
                         w->gpu ? NULL : stream, w->pool, &e);
    if (jr == CHOIR_ENOMEM || jr == CHOIR_EBUSY) return choir_err_set(err, CHOIR_ENOMEM, "%s", e.msg);
    if (jr < 0) {
        choir_request_fail(r, jr, "%s", e.msg);
        return 0;
    }
    sl->opened = 1;
    return 1;
}

/* Encodes and prefills slot sl's opened request for about `budget_s`
 * seconds (0: to the end), then takes its first pick. 2: work remains; 1:
 * it decodes (live); 0: it is over (failed, cancelled or finished, its
 * output delivered); CHOIR_ENOMEM as slot_open. */
static int slot_prep(vv_slot *sl, double budget_s, choir_err *err) {
    choir_request *r = sl->req;
    if (choir_request_cancelled(r)) return 0;
    choir_err e = {0};
    int jr = vv_job_prep(&sl->job, budget_s, &e);
    if (jr == 1) return 2;
    if (jr == 0) jr = vv_job_next(&sl->job, &e);
    if (jr == CHOIR_ENOMEM || jr == CHOIR_EBUSY) return choir_err_set(err, CHOIR_ENOMEM, "%s", e.msg);
    if (jr < 0) {
        choir_request_fail(r, jr, "%s", e.msg);
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
 * and frees its arena and reservations), a member's pages go back
 * (`member_done` 0: a member never opened, whose batch goes back to the
 * engine's queue whole). */
static void slot_end(vv_slot *sl, choir_batch_join *join, int overflow, int member_done) {
    vv_job_clear(&sl->job);
    choir_stream_free(sl->own);
    if (sl->joined) choir_batch_join_leave(join, sl->req, overflow);
    else if (sl->req && member_done) choir_batch_join_member_done(join, sl->req); /* its pages are free now */
    memset(sl, 0, sizeof *sl);
}

/* Requests the engine admits to join the running batch (continuous
 * batching), each placed in a free slot behind those already waiting (on
 * the CPU with a stream over its own arena; on a GPU its pages are
 * admitted). `cap`: the batch's rows; the engine is told every taken place
 * counts, waiting or decoding, so it never gives more than are free. */
static void slots_join(vv_weights *w, vv_slot *slots, int cap, choir_batch_join *join, int64_t *order) {
    const choir_vibevoice_dims *D = choir_vibevoice_get_dims(w->m);
    choir_backend *be = choir_vibevoice_backend(w->m);
    choir_request *nreq[VV_OPS_MAX_BATCH];
    choir_arena *nar[VV_OPS_MAX_BATCH];
    int used = 0;
    for (int q = 0; q < cap; q++) used += slots[q].req != NULL;
    /* The engine fills up to ops.max_batch: a CPU batch stops at its cap. */
    int k = used < cap ? choir_batch_join_take(join, used + VV_OPS_MAX_BATCH - cap, nreq, nar) : 0;
    for (int i = 0; i < k; i++) {
        vv_slot *sl = NULL;
        for (int q = 0; q < cap && !sl; q++)
            if (!slots[q].req) sl = &slots[q];
        sl->joined = 1;
        sl->req = nreq[i];
        sl->order = (*order)++;
        if (w->gpu) continue;
        choir_err e = {0};
        int64_t scratch = 0, bytes = req_state_bytes(D, nreq[i], &scratch);
        int rc = 0;
        if (choir_arena_capacity(nar[i]) - choir_arena_used(nar[i]) < (size_t)bytes) rc = CHOIR_ENOMEM;
        else if (!(sl->own = choir_stream_create(be, &e))) rc = CHOIR_ENOMEM;
        else rc = choir_stream_use_arena(sl->own, nar[i], (size_t)scratch, &e);
        /* Its memory too small: the engine retries it with more. */
        if (rc) slot_end(sl, join, 1, 1);
    }
}

/* Encodes and prefills the batch's waiting requests, first come first
 * served, for about `budget_s` seconds (0: while none decodes: every
 * waiting member of the batch to the end, or else the first joined one),
 * each new one opened when its turn comes (so one request's audio and
 * state wait at a time). The members came together, so none of them
 * decodes before the others could: all prepared first, the batch's steps
 * have every row from the start (H100, 7 Dec 2026: 8 requests of 10
 * minutes took 3,160 steps for 3,000 tokens each when each member after
 * the first was prepared in slices between steps). A request out of
 * memory: a joined one goes back to the engine's queue; a member fails
 * alone once the batch has stepped (`stepped`) or another decodes, else the
 * batch returns CHOIR_ENOMEM (the engine retries it). 0 or CHOIR_ENOMEM. */
static int slots_prep(vv_weights *w, vv_slot *slots, int cap, int *n_live, choir_stream *st, double budget_s,
                      int stepped, choir_batch_join *join, choir_err *err) {
    double t0 = choir_now_s();
    for (;;) {
        vv_slot *sl = NULL;
        for (int q = 0; q < cap; q++)
            if (slots[q].req && !slots[q].live && (!sl || slots[q].order < sl->order)) sl = &slots[q];
        if (!sl) return 0;
        /* A joined one waits for the slices once one decodes. */
        if (budget_s <= 0 && *n_live > 0 && sl->joined) return 0;
        choir_err e = {0};
        int r = sl->opened ? 1 : slot_open(w, sl, sl->own ? sl->own : st, &e);
        double left = budget_s - (choir_now_s() - t0);
        if (r == 1 && budget_s > 0 && left <= 0) return 0;
        if (r == 1) r = slot_prep(sl, budget_s > 0 ? left : 0, &e);
        if (r == 2) return 0;
        if (r == 1) {
            (*n_live)++;
            continue;
        }
        if (r == CHOIR_ENOMEM) {
            if (sl->joined) {
                slot_end(sl, join, 1, 1);
                continue;
            }
            if (!stepped && *n_live == 0) return choir_err_set(err, CHOIR_ENOMEM, "%s", e.msg);
            choir_request_fail(sl->req, CHOIR_ENOMEM, "%s", e.msg);
        }
        slot_end(sl, join, 0, 1);
    }
}

/* A batch of requests: decoding steps shared by every member that decodes
 * (choir_vibevoice_step_batch_greedy: one pass over the language model's
 * weights per step for all of them, the greedy picks made on the backend);
 * a request leaves the batch when it stops, and with `join` (the engine's,
 * continuous batching) queued requests join it between steps while it has
 * room. A request is encoded and prefilled before it decodes, one at a time
 * in order of arrival: the batch's members all to the end before its first
 * step; a request that joins while others decode in slices of about
 * w->prep_slice_s between two steps (so a decoding member waits at most
 * that plus one encoder pass or prefill chunk), to the end while none
 * does.
 *
 * CPU: the members' states, the step buffers and the kernels' scratch are
 * carved from the batch arena through one stream, so the arena's
 * high-water mark is what the batch used; a joined request's state comes
 * from its own arena. GPU (`arena` NULL): every state is a block of its own
 * with its keys and values in the replica's pool, and every step (from one
 * row) is the replica's paged batched step, a graph replay. */
static int run_batch(vv_weights *w, choir_request *const *reqs, int n, choir_arena *arena, choir_batch_join *join,
                     choir_err *err) {
    const choir_vibevoice_dims *D = choir_vibevoice_get_dims(w->m);
    choir_backend *be = choir_vibevoice_backend(w->m);
    int cap = w->gpu ? VV_GPU_MAX_BATCH : n > VV_MAX_BATCH ? n : VV_MAX_BATCH;
    vv_slot *slots = choir_calloc(CHOIR_MEM_IO, (size_t)cap, sizeof *slots);
    choir_vibevoice_state **states = choir_alloc(CHOIR_MEM_IO, (size_t)cap * sizeof *states);
    int32_t *toks = choir_alloc(CHOIR_MEM_IO, (size_t)cap * 2 * sizeof *toks), *picks = toks ? toks + cap : NULL;
    int rc = 0;
    choir_err e = {0};
    choir_stream *st = NULL;
    choir_vibevoice_batch *batch = w->gpu ? w->batch : NULL;
    size_t mark = arena ? choir_arena_mark(arena) : 0;
    double t_steps = 0, t_first = 0, t_last = 0, max_gap = 0;
    int64_t steps = 0, rows = 0, order = 0, prep_steps = 0;
    int most = 0;
    if (!slots || !states || !toks) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        goto done;
    }
    if (n > cap) {
        rc = choir_err_set(err, CHOIR_EINVAL, "vibevoice: a batch of %d requests (at most %d)", n, cap);
        goto done;
    }
    if (!w->gpu) {
        /* What the batch takes: every member's state, the step buffers, the largest scratch. */
        int64_t bytes = choir_vibevoice_batch_bytes(D, cap), scratch = 0;
        for (int i = 0; i < n; i++) {
            int64_t sc = 0;
            bytes += req_state_bytes(D, reqs[i], &sc);
            if (sc > scratch) scratch = sc;
        }
        if (choir_arena_capacity(arena) - choir_arena_used(arena) < (size_t)bytes) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: the batch arena lacks %.1f MB for this batch",
                               bytes / 1e6);
            goto done;
        }
        if (!(st = choir_stream_create(be, &e))) rc = CHOIR_ENOMEM;
        else rc = choir_stream_use_arena(st, arena, (size_t)scratch, &e);
        if (rc) {
            choir_err_set(err, rc, "%s", e.msg);
            goto done;
        }
    }
    for (int i = 0; i < n; i++) {
        slots[i].req = reqs[i];
        slots[i].order = order++;
    }
    int n_live = 0;
    for (;;) {
        slots_join(w, slots, cap, join, &order);
        if ((rc = slots_prep(w, slots, cap, &n_live, st, n_live ? w->prep_slice_s : 0, steps > 0, join, err)))
            goto done;
        if (n_live == 0) break;
        int k = 0, waiting = 0;
        for (int q = 0; q < cap; q++)
            if (slots[q].live) {
                states[k] = slots[q].job.s;
                toks[k++] = slots[q].job.pending;
            } else {
                waiting |= slots[q].req != NULL;
            }
        prep_steps += waiting;
        if (k > most) most = k;
        if (k > 1 && !batch && !(batch = choir_vibevoice_batch_create(w->m, cap, st, &e))) {
            rc = choir_err_set(err, e.code ? e.code : CHOIR_ENOMEM, "%s", e.msg);
            goto done;
        }
        memset(&e, 0, sizeof e);
        /* Several (or any on a GPU): the greedy picks made on the backend,
         * only the ids come back. */
        double t0 = choir_now_s();
        if (!t_first) t_first = t0;
        if (t_last && t0 - t_last > max_gap) max_gap = t0 - t_last;
        int sr = k > 1 || w->gpu ? choir_vibevoice_step_batch_greedy(w->m, batch, states, toks, k, picks, &e)
                                 : choir_vibevoice_step(w->m, states[0], toks[0], NULL, &e);
        t_last = choir_now_s();
        t_steps += t_last - t0;
        steps++;
        rows += k;
        for (int q = 0, row = 0; q < cap; q++) {
            vv_slot *sl = &slots[q];
            if (!sl->live) continue;
            int jr = sr ? sr : k > 1 || w->gpu ? vv_job_take(&sl->job, picks[row], &e) : vv_job_next(&sl->job, &e);
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
            slot_end(sl, join, 0, 1);
        }
        /* None decodes now: the next one waiting is prepared to the end, and
         * that wait is no running member's. */
        if (n_live == 0) t_last = 0;
    }
done:
    for (int q = 0; slots && q < cap; q++)
        slot_end(&slots[q], join, 0, rc != CHOIR_ENOMEM || slots[q].opened);
    if (!w->gpu) choir_vibevoice_batch_free(batch);
    choir_stream_free(st);
    if (arena) choir_arena_release(arena, mark);
    choir_free(slots);
    choir_free(states);
    choir_free(toks);
    pthread_mutex_lock(&w->lock);
    w->stats.batches++;
    w->stats.steps += steps;
    w->stats.prep_steps += prep_steps;
    w->stats.rows += rows;
    w->stats.step_s += t_steps;
    w->stats.decode_wall_s += t_first ? choir_now_s() - t_first : 0;
    if (most > w->stats.most_rows) w->stats.most_rows = most;
    if (max_gap > w->stats.max_gap_s) w->stats.max_gap_s = max_gap;
    pthread_mutex_unlock(&w->lock);
    return rc;
}

static int vv_run_batch_join(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                             choir_batch_join *join, choir_err *err) {
    vv_weights *w = weights;
    if (!w->gpu) return run_batch(w, reqs, n, arena, join, err);
    /* The engine runs one batch at a time on a GPU replica; the lock keeps
     * it so for any other caller (the pool and the step are the replica's). */
    pthread_mutex_lock(&w->gpu_lock);
    /* A failed step of an earlier batch left its error on the step's stream. */
    choir_stream_clear(w->bstream);
    int rc = run_batch(w, reqs, n, NULL, join, err);
    pthread_mutex_unlock(&w->gpu_lock);
    return rc;
}

static int vv_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena, choir_err *err) {
    return vv_run_batch_join(weights, reqs, n, arena, NULL, err);
}

void vv_model_get_stats(const void *weights, vv_model_stats *out) {
    vv_weights *w = (vv_weights *)weights;
    pthread_mutex_lock(&w->lock);
    *out = w->stats;
    pthread_mutex_unlock(&w->lock);
}

void vv_model_set_prep_slice(void *weights, double seconds) {
    ((vv_weights *)weights)->prep_slice_s = seconds > 0 ? seconds : 0;
}

void vv_model_reset_gap(void *weights) {
    vv_weights *w = weights;
    pthread_mutex_lock(&w->lock);
    w->stats.max_gap_s = 0;
    pthread_mutex_unlock(&w->lock);
}

choir_backend *vv_model_backend(const void *weights) {
    const vv_weights *w = weights;
    return w->gpu ? w->be : NULL;
}

const choir_vibevoice_kv_pool *vv_model_pool(const void *weights) { return ((const vv_weights *)weights)->pool; }

const choir_model_ops choir_model_vibevoice = {
    .kind = "vibevoice",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_STT),
    .max_batch = VV_OPS_MAX_BATCH,
    .input_rate = CHOIR_VIBEVOICE_SAMPLE_RATE,
    .probe = vv_probe,
    .load = vv_model_load,
    .free = vv_model_free,
    .resident_bytes = vv_resident_bytes,
    .length = vv_length,
    .estimate = vv_estimate,
    .run_batch = vv_run_batch,
    .run_batch_join = vv_run_batch_join,
#ifdef CHOIR_HAVE_CUDA
    /* A GPU replica serialises its batches itself (gpu_lock). */
    .gpu = 1,
    .device_bytes = vv_device_bytes,
    .estimate_device = vv_estimate_device,
    .pool_bytes = vv_pool_bytes,
    .estimate_pool = vv_estimate_pool,
#endif
};
