/* Whisper behind the engine's model interface (choir/model.h).
 *
 * The weights object is the network plus its tokenizer. Every request runs
 * openai's seek loop (previous-text prompts, temperature fallback), the one
 * `choir stt` runs, so a request gets the transcript the CLI gives for the
 * same samples; requests that share task, timestamps and temperature run
 * their loops in lockstep, their current windows (every hypothesis of every
 * window) in one decoder batch per step. Working memory comes from the
 * batch arena (choir_whisper_transcribe_opts.arena): on the CPU one stream
 * over it serves every pass of the batch, its caches and kernel scratch
 * included, so the arena's high-water mark is what the batch used and the
 * engine calibrates the estimate from it; an arena too small fails the
 * batch with CHOIR_ENOMEM before any output, which the engine retries with
 * more room. On a GPU only the host buffers come from it.
 *
 * In CUDA builds the adapter also takes a GPU (opt->device >= 1): the network
 * is attached to that device (choir_whisper_gpu_attach; f32 matrices stored
 * as bf16 when opt->compute_bf16) and batches run there. An attached model
 * serves one thread at a time, so run_batch holds the weights' mutex. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/model.h"
#include "choir/tokenizer.h"
#include "choir/whisper.h"
#include "choir/whisper_words.h"

typedef struct whisper_weights {
    choir_whisper *m;
    choir_tokenizer *tok;
    bool gpu;              /* attached to a GPU: run_batch takes `lock` */
    pthread_mutex_t lock;
} whisper_weights;

static int whisper_probe(const char *dir, const struct cJSON *config) {
    (void)dir;
    if (!config) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(config, "model_type");
    if (cJSON_IsString(type) && type->valuestring && strcmp(type->valuestring, "whisper") == 0) return 100;
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(config, "dims");
    if (cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(dims) ? dims : config, "n_audio_state")) return 90;
    return 0;
}

static void whisper_model_free(void *weights) {
    whisper_weights *w = weights;
    if (!w) return;
    choir_tokenizer_free(w->tok);
    choir_whisper_free(w->m); /* detaches from the GPU first */
    if (w->gpu) pthread_mutex_destroy(&w->lock);
    choir_free(w);
}

static void *whisper_model_load(const char *dir, const choir_model_options *opt, choir_err *err) {
    /* Quantized checkpoints come from `choir convert`; the model runs as stored. */
    whisper_weights *w = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *w);
    if (!w) {
        choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
        return NULL;
    }
    if (!(w->m = choir_whisper_load(dir, err))) goto fail;
    w->tok = choir_tokenizer_load_for_vocab(dir, choir_whisper_get_dims(w->m)->n_vocab, err);
    if (!w->tok) goto fail;
    if (opt && opt->device >= 1) {
        choir_whisper_gpu_opts go;
        choir_whisper_default_gpu_opts(&go);
        go.device = CHOIR_DEVICE_GPU_INDEX(opt->device);
        go.bf16 = opt->compute_bf16 > 0;
        go.tf32 = go.bf16;
        if (choir_whisper_gpu_attach(w->m, &go, err)) goto fail;
        if (pthread_mutex_init(&w->lock, NULL)) {
            choir_err_set(err, CHOIR_EINTERNAL, "whisper: cannot create the GPU lock");
            goto fail;
        }
        w->gpu = true;
    }
    return w;
fail:
    whisper_model_free(w);
    return NULL;
}

static int64_t whisper_resident_bytes(const void *weights) {
    const whisper_weights *w = weights;
    return (int64_t)choir_whisper_weight_bytes(w->m);
}

#ifdef CHOIR_HAVE_CUDA
/* Device bytes of an attached model: weights, encoder activations, the cache
 * pools and step buffers as they stand, and the context's scratch. */
static int64_t whisper_device_bytes(const void *weights) {
    const whisper_weights *w = weights;
    choir_whisper_gpu_stats st;
    if (!w || !w->gpu || choir_whisper_gpu_get_stats(w->m, &st, NULL)) return 0;
    return st.device_bytes;
}

/* Device bytes of one request beyond the attached model: each of its windows
 * (one for a short request: it joins a batch; one at a time for the seek
 * loop) with its cross K/V and the caches and logits of best_of (5)
 * hypotheses. Without loaded weights, large-v3's sizes. */
static int64_t whisper_estimate_device(const void *weights, const choir_request *r) {
    const whisper_weights *w = weights;
    (void)r;
    choir_whisper_dims D = {128, 1500, 32, 448, 32, 1280, 20, 5120, 51866};
    if (w) D = *choir_whisper_get_dims(w->m);
    return choir_whisper_gpu_window_bytes(&D, 5) + (1 << 20);
}
#endif

static int64_t whisper_length(const void *weights, const choir_request *r) {
    (void)weights;
    return r->in.stt.n_samples;
}

/* Peak working memory of one transcription: the whole file's mel, one
 * window's encoder activations and cross K/V, and the KV caches and logits of
 * best_of (5) hypotheses. Without loaded weights, large-v3's sizes. */
static int64_t whisper_estimate(const void *weights, const choir_request *r) {
    const whisper_weights *w = weights;
    choir_whisper_dims D = {128, 1500, 32, 448, 32, 1280, 20, 5120, 51866};
    if (w) D = *choir_whisper_get_dims(w->m);
    int64_t frames = (r->in.stt.n_samples > 0 ? r->in.stt.n_samples : 0) / 160 + CHOIR_WHISPER_N_FRAMES;
    int64_t f = 4; /* bytes per float */
    int64_t mel = (int64_t)D.n_mels * frames * f + (int64_t)D.n_mels * CHOIR_WHISPER_N_FRAMES * f;
    int64_t enc = ((int64_t)D.d_model * CHOIR_WHISPER_N_FRAMES + 6 * 1500LL * D.d_model + 1500LL * D.ffn_dim) * f;
    int64_t cross = 2LL * D.n_text_layer * D.n_audio_ctx * D.d_model * f;
    int64_t hyps = 5 * (2LL * D.n_text_layer * D.n_text_ctx * D.d_model * f + 2LL * D.n_vocab * f);
    /* Word timestamps: a teacher-forced pass over at most n_text_ctx / 2 + 8
     * positions keeps their logits and the alignment heads' attention logits. */
    int64_t words = 0;
    if (r->in.stt.word_timestamps) {
        choir_whisper_head heads[CHOIR_WHISPER_MAX_HEADS];
        int64_t T = D.n_text_ctx / 2 + 8, H = choir_whisper_alignment_heads(&D, false, heads);
        words = T * ((int64_t)D.n_vocab + (H + 1) * D.n_audio_ctx) * f + 2LL * D.n_text_layer * T * D.d_model * f;
    }
    return mel + enc + cross + hyps + words + (1 << 20);
}

/* A request's options this model can never run, refused: an unknown
 * language, a temperature outside [0, CHOIR_WHISPER_MAX_TEMPERATURE], a
 * max_tokens outside 0 (the default) .. half the model's text context, as
 * openai's default sample_len is (the prompt takes the other half). The one
 * check of these bounds, run by the check op at submit (for every front end:
 * the job worker passes a job's numbers unread) and by whisper_opts when the
 * batch runs. Without weights (`m` NULL, not loaded yet) the context is not
 * known and only max_tokens < 0 is refused; the run checks the rest. Never
 * clamped. Returns 0 or CHOIR_EINVAL with err. */
static int whisper_request_check(const choir_whisper *m, const choir_stt_input *in, choir_err *err) {
    if (in->language && in->language[0] && choir_whisper_lang_index(in->language) < 0)
        return choir_err_set(err, CHOIR_EINVAL, "whisper: unknown language '%s'", in->language);
    if (!(in->temperature >= 0 && in->temperature <= (float)CHOIR_WHISPER_MAX_TEMPERATURE))
        return choir_err_set(err, CHOIR_EINVAL, "whisper: temperature must be in [0, %g], got %g",
                             CHOIR_WHISPER_MAX_TEMPERATURE, (double)in->temperature);
    int most = m ? choir_whisper_get_dims(m)->n_text_ctx / 2 : INT_MAX;
    if (in->max_tokens < 0 || in->max_tokens > most)
        return choir_err_set(err, CHOIR_EINVAL,
                             "whisper: max_tokens must be in [0, %d] (0: the default; this model decodes 1 to %d "
                             "per window), got %d", most, most, in->max_tokens);
    return 0;
}

static int whisper_check(const void *weights, const choir_request *req, choir_err *err) {
    const whisper_weights *w = weights;
    return whisper_request_check(w ? w->m : NULL, &req->in.stt, err);
}

/* Parameters of a request; its language index in *lang (-1: detect). */
static int whisper_opts(const choir_whisper *m, choir_request *req, choir_whisper_transcribe_opts *o, int *lang) {
    const choir_stt_input *in = &req->in.stt;
    choir_err bad = {0};
    int rc = whisper_request_check(m, in, &bad);
    if (rc < 0) return choir_request_fail(req, rc, "%s", bad.msg);
    choir_whisper_default_transcribe_opts(o);
    /* req->extra, when set, is a choir_whisper_params giving the decoding
     * parameters the request fields do not carry (beam, best_of, max tokens,
     * thresholds). */
    if (req->extra) o->params = *(const choir_whisper_params *)req->extra;
    *lang = in->language && in->language[0] ? choir_whisper_lang_index(in->language) : -1;
    o->params.task = in->translate ? CHOIR_WHISPER_TRANSLATE : CHOIR_WHISPER_TRANSCRIBE;
    o->params.timestamps = in->timestamps != 0;
    o->word_timestamps = in->word_timestamps != 0 && o->params.timestamps;
    if (in->temperature > 0 || in->fixed_temperature) {
        o->params.temperatures[0] = in->temperature;
        o->params.n_temperatures = 1;
    }
    if (in->max_tokens > 0) o->params.sample_len = in->max_tokens;
    return 0;
}

static int whisper_emit(choir_request *req, choir_whisper_transcript *t) {
    choir_segment *segs = choir_calloc(CHOIR_MEM_IO, (size_t)(t->n_segments + 1), sizeof *segs);
    if (!segs) return CHOIR_ENOMEM;
    choir_whisper_segment_views(t, segs);
    /* The transcript without its leading space, as the OpenAI API returns it. */
    const char *text = t->text ? t->text : "";
    while (*text == ' ') text++;
    choir_output out = {.final = 1, .text = text, .language = choir_whisper_lang_code(t->language),
                        .segments = segs, .n_segments = t->n_segments};
    req->audio_seconds = t->duration;
    choir_request_emit(req, &out);
    choir_free(segs);
    return 0;
}

typedef struct whisper_group {
    choir_request **reqs;
    int n;
} whisper_group;

/* A streaming request gets each segment as a partial output once it is final.
 * A cancelled request stops the transcription only when it is alone in it. */
static int whisper_on_segment(void *user, int input, const choir_whisper_segment *seg) {
    whisper_group *g = user;
    choir_request *req = g->reqs[input];
    if (!req->stream) return 0;
    choir_whisper_transcript one = {.segments = (choir_whisper_segment *)seg, .n_segments = 1};
    choir_segment cs;
    choir_whisper_segment_views(&one, &cs);
    choir_output out = {.final = 0, .text = seg->text, .segments = &cs, .n_segments = 1};
    int rc = choir_request_emit(req, &out);
    return rc != 0 && g->n == 1;
}

/* A request whose caller went away (a client that hung up) stops being
 * decoded at its next window, whatever it is batched with. */
static int whisper_cancelled(void *user, int input) {
    whisper_group *g = user;
    return choir_request_cancelled(g->reqs[input]);
}

static bool whisper_same_group(const choir_request *a, const choir_request *b) {
    return a->extra == b->extra && a->in.stt.translate == b->in.stt.translate &&
           (a->in.stt.timestamps != 0) == (b->in.stt.timestamps != 0) &&
           (a->in.stt.word_timestamps != 0) == (b->in.stt.word_timestamps != 0) &&
           a->in.stt.temperature == b->in.stt.temperature &&
           (a->in.stt.fixed_temperature != 0) == (b->in.stt.fixed_temperature != 0) &&
           a->in.stt.max_tokens == b->in.stt.max_tokens;
}

static int whisper_run_batch_locked(whisper_weights *w, choir_request *const *reqs, int n,
                                    choir_arena *arena, choir_err *err) {
    choir_whisper_input in[16];
    choir_whisper_transcript t[16];
    choir_request *grp[16];
    bool taken[16] = {false};
    if (n > 16) return choir_err_set(err, CHOIR_EINVAL, "whisper: batch of %d (max 16)", n);
    for (int i = 0; i < n; i++) {
        choir_request *r = reqs[i];
        if (taken[i]) continue;
        taken[i] = true;
        if (r->task != CHOIR_TASK_STT) {
            choir_request_fail(r, CHOIR_EINVAL, "whisper serves speech-to-text only");
            continue;
        }
        if (choir_request_cancelled(r)) continue;
        choir_whisper_transcribe_opts o;
        int lang;
        if (whisper_opts(w->m, r, &o, &lang)) continue;
        int ng = 0;
        grp[ng] = r;
        in[ng++] = (choir_whisper_input){r->in.stt.samples, r->in.stt.n_samples, lang, r->in.stt.prompt};
        /* Requests that decode alike run their seek loops side by side. */
        for (int k = i + 1; k < n; k++) {
            choir_request *q = reqs[k];
            int lk;
            choir_whisper_transcribe_opts ok;
            if (taken[k] || q->task != CHOIR_TASK_STT || !whisper_same_group(r, q) || choir_request_cancelled(q))
                continue;
            taken[k] = true;
            if (whisper_opts(w->m, q, &ok, &lk)) continue;
            grp[ng] = q;
            in[ng++] = (choir_whisper_input){q->in.stt.samples, q->in.stt.n_samples, lk, q->in.stt.prompt};
        }
        whisper_group wg = {grp, ng};
        o.on_segment = whisper_on_segment;
        o.segment_user = &wg;
        o.cancelled = whisper_cancelled;
        o.cancel_user = &wg;
        o.arena = arena;
        choir_err e = {0};
        int rc = choir_whisper_transcribe_batch(w->m, w->tok, in, ng, &o, t, &e);
        if (rc == CHOIR_ECANCELED) continue; /* the engine finishes cancelled requests */
        if (rc == CHOIR_ENOMEM) return choir_err_set(err, rc, "%s", e.msg);
        for (int k = 0; k < ng; k++) {
            /* a cancelled request's partial transcript is dropped: the
             * engine finishes it as cancelled */
            if (choir_request_cancelled(grp[k])) choir_whisper_transcript_clear(&t[k]);
            else if (rc) choir_request_fail(grp[k], rc, "%s", e.msg);
            else if (whisper_emit(grp[k], &t[k])) rc = CHOIR_ENOMEM;
            choir_whisper_transcript_clear(&t[k]);
        }
        if (rc == CHOIR_ENOMEM) return choir_err_set(err, rc, "whisper: out of memory");
    }
    return 0;
}

static int whisper_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                             choir_err *err) {
    whisper_weights *w = weights;
    if (!w->gpu) return whisper_run_batch_locked(w, reqs, n, arena, err);
    pthread_mutex_lock(&w->lock);
    int rc = whisper_run_batch_locked(w, reqs, n, arena, err);
    pthread_mutex_unlock(&w->lock);
    return rc;
}

const choir_model_ops choir_model_whisper = {
    .kind = "whisper",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_STT),
    .max_batch = 8,
    .probe = whisper_probe,
    .load = whisper_model_load,
    .free = whisper_model_free,
    .resident_bytes = whisper_resident_bytes,
    .length = whisper_length,
    .estimate = whisper_estimate,
    .run_batch = whisper_run_batch,
    .check = whisper_check,
#ifdef CHOIR_HAVE_CUDA
    .gpu = 1,
    .device_bytes = whisper_device_bytes,
    .estimate_device = whisper_estimate_device,
#endif
};
