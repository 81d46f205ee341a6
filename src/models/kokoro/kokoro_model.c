/* The engine's adapter for Kokoro-82M (include/choir/model.h).
 *
 * Each request is phonemized, split and streamed piece by piece: every piece's
 * audio is emitted as soon as it exists (the first piece is one clause, for a
 * short time to first audio), then one final, empty output. On the CPU the
 * forward pass takes all its working memory from the batch arena
 * (choir_kokoro_params.arena; requests one after another, one piece at a
 * time), so the arena's high-water mark is what the batch used and the
 * engine calibrates the estimate (choir_kokoro_estimate_bytes of the
 * largest piece the text can make) from it; an arena too small before a
 * request's first audio fails the batch with CHOIR_ENOMEM, which the engine
 * retries with more room. On a GPU the arena is not used yet. Voices are read from DIR/voices per request
 * (522 KB each), so any voice or mix the directory offers can be asked for.
 *
 * GPU (CUDA builds, options.device >= 1): the weights object opens its own
 * CUDA context on that device and attaches a choir_kokoro_gpu to the model.
 * A batch then phonemizes and splits every request first and synthesises in
 * rounds: the first piece of every request together (time to first audio),
 * then the remaining pieces of all requests, up to KOKORO_GPU_PIECES per
 * round, each round one batched front (one device call per front stage for
 * all its pieces) and one GPU decoder batch. The device is serialised by the
 * GPU object's mutex (choir_kokoro_gpu_decode and the front's calls). */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/kokoro.h"
#include "choir/model.h"
#include "choir/phonemizer.h"

#define KOKORO_MAX_BATCH 8
#define KOKORO_DEFAULT_VOICE "af_heart"
#define KOKORO_GPU_PIECES 32

typedef struct kokoro_weights {
    choir_kokoro *m;
    char voices_dir[1024];
#ifdef CHOIR_HAVE_CUDA
    choir_cuda *cu;         /* NULL on the CPU */
    choir_kokoro_gpu *gpu;
#endif
} kokoro_weights;

static int kokoro_probe(const char *dir, const cJSON *config) {
    (void)dir;
    if (!config) return 0;
    int score = 0;
    if (cJSON_GetObjectItemCaseSensitive(config, "istftnet")) score += 50;
    if (cJSON_GetObjectItemCaseSensitive(config, "plbert")) score += 25;
    if (cJSON_GetObjectItemCaseSensitive(config, "vocab")) score += 25;
    return score;
}

static void kokoro_model_free(void *weights);

static void *kokoro_model_load(const char *dir, const choir_model_options *opt, choir_err *err) {
    int device = opt ? opt->device : CHOIR_DEVICE_CPU;
#ifndef CHOIR_HAVE_CUDA
    if (device != CHOIR_DEVICE_CPU) {
        choir_err_set(err, CHOIR_EUNSUPPORTED, "kokoro: device %d asked for, but this build has no "
                                               "CUDA backend (configure with -DCHOIR_CUDA=ON)", device);
        return NULL;
    }
#endif
    kokoro_weights *w = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *w);
    if (!w) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory");
        return NULL;
    }
    w->m = choir_kokoro_load(dir, err);
    if (!w->m) {
        choir_free(w);
        return NULL;
    }
    snprintf(w->voices_dir, sizeof w->voices_dir, "%s/voices", dir);
#ifdef CHOIR_HAVE_CUDA
    if (device != CHOIR_DEVICE_CPU) {
        int idx = CHOIR_DEVICE_GPU_INDEX(device);
        if (idx < 0 || idx >= choir_cuda_device_count()) {
            choir_err_set(err, CHOIR_EINVAL, "kokoro: GPU %d asked for, %d visible", idx,
                          choir_cuda_device_count());
            kokoro_model_free(w);
            return NULL;
        }
        if (!(w->cu = choir_cuda_init(idx, err)) ||
            !(w->gpu = choir_kokoro_gpu_create(w->m, w->cu, opt->compute_bf16 > 0, err))) {
            kokoro_model_free(w);
            return NULL;
        }
        choir_kokoro_set_gpu(w->m, w->gpu);
    }
#endif
    return w;
}

static void kokoro_model_free(void *weights) {
    kokoro_weights *w = weights;
    if (!w) return;
#ifdef CHOIR_HAVE_CUDA
    choir_kokoro_gpu_free(w->gpu);
    choir_cuda_free(w->cu);
#endif
    choir_kokoro_free(w->m);
    choir_free(w);
}

static int64_t kokoro_resident_bytes(const void *weights) {
    const kokoro_weights *w = weights;
    return choir_kokoro_weight_bytes(w->m);
}

static int64_t kokoro_length(const void *weights, const choir_request *req) {
    (void)weights;
    return req->in.tts.text ? (int64_t)strlen(req->in.tts.text) : 0;
}

/* A request's speed is bounded here, at submit, for every front end (the
 * job worker passes what the job says): 0 is the default rate, anything
 * else one `choir tts --speed` takes. Never clamped. */
static int kokoro_check(const void *weights, const choir_request *req, choir_err *err) {
    (void)weights;
    float s = req->in.tts.speed;
    /* compared as floats: a speed read as 0.01 and stored in a float is taken */
    if (s == 0.0f || (s >= (float)CHOIR_KOKORO_MIN_SPEED && s <= (float)CHOIR_KOKORO_MAX_SPEED)) return 0;
    return choir_err_set(err, CHOIR_EINVAL, "kokoro: speed must be in [%g, %g] (0: the default 1), got %g",
                         CHOIR_KOKORO_MIN_SPEED, CHOIR_KOKORO_MAX_SPEED, (double)s);
}

/* One piece at a time is alive: the largest piece this text can make, at
 * ~1.2 phonemes per character and up to ~6 frames per phoneme (speed 1). */
static int64_t kokoro_estimate(const void *weights, const choir_request *req) {
    (void)weights;
    int64_t chars = req->in.tts.text ? (int64_t)strlen(req->in.tts.text) : 0;
    int64_t phonemes = chars * 6 / 5 + 8;
    if (phonemes > CHOIR_KOKORO_MAX_PHONEMES) phonemes = CHOIR_KOKORO_MAX_PHONEMES;
    float speed = req->in.tts.speed > 0 ? req->in.tts.speed : 1.0f;
    int64_t frames = (int64_t)((double)(phonemes + 2) * 6.0 / speed) + 16;
    return choir_kokoro_estimate_bytes((int)phonemes + 2, frames);
}

static int emit_audio(void *user, const float *pcm, int64_t n, int piece, int n_pieces) {
    choir_request *req = user;
    (void)piece, (void)n_pieces;
    choir_output out;
    memset(&out, 0, sizeof out);
    out.samples = pcm;
    out.n_samples = n;
    out.sample_rate = CHOIR_KOKORO_SAMPLE_RATE;
    req->audio_seconds += (double)n / CHOIR_KOKORO_SAMPLE_RATE;
    return choir_request_emit(req, &out) != 0;
}

/* 0, or CHOIR_ENOMEM when the arena was too small before the request's
 * first audio (the request left as it was, for the engine to retry). */
static int run_one(const kokoro_weights *w, choir_request *req, choir_arena *arena) {
    const choir_tts_input *in = &req->in.tts;
    choir_err err = {0};
    choir_phonemizer_lang lang = CHOIR_PHONEMIZER_EN_US;
    if (in->language && choir_phonemizer_lang_parse(in->language, &lang) != 0) {
        choir_request_fail(req, CHOIR_EUNSUPPORTED, "kokoro: language %s is not supported (en-us, en-gb)",
                           in->language);
        return 0;
    }
    if (!in->text) {
        choir_request_fail(req, CHOIR_EINVAL, "kokoro: no text");
        return 0;
    }
    int out_of_arena = 0;
    choir_kokoro_voice *voice = choir_kokoro_voice_load_named(in->voice ? in->voice : KOKORO_DEFAULT_VOICE,
                                                              w->voices_dir, &err);
    choir_phonemizer *ph = voice ? choir_phonemizer_create(lang, &err) : NULL;
    if (voice && ph) {
        choir_kokoro_speak_params sp = choir_kokoro_default_speak_params();
        if (in->speed > 0) sp.synth.speed = in->speed;
        sp.short_first = req->stream != 0;
        sp.synth.arena = arena;
        int rc = choir_kokoro_speak(w->m, ph, voice, in->text, &sp, emit_audio, req, &err);
        if (rc == CHOIR_ECANCELED) choir_err_clear(&err);
        if (rc == CHOIR_ENOMEM && arena && !req->first_output_ns) {
            out_of_arena = CHOIR_ENOMEM;
            choir_err_clear(&err);
        }
        if (rc == 0) {
            choir_output out;
            memset(&out, 0, sizeof out);
            out.final = 1;
            out.sample_rate = CHOIR_KOKORO_SAMPLE_RATE;
            choir_request_emit(req, &out);
        }
    }
    if (err.code) choir_request_fail(req, err.code, "%s", err.msg);
    choir_phonemizer_free(ph);
    choir_kokoro_voice_free(voice);
    return out_of_arena;
}

#ifdef CHOIR_HAVE_CUDA
/* One request of a GPU batch: its pieces as batch items, and how far it got. */
typedef struct gpu_req {
    choir_request *req;
    choir_kokoro_voice *voice;   /* the items' styles point into it */
    int32_t *ids;                /* [n_items, 512] */
    choir_kokoro_item *items;
    int n_items, next;
    bool done;
} gpu_req;

/* Phonemizes and splits one request into items; 0, or the request failed. */
static int gpu_req_plan(const kokoro_weights *w, gpu_req *g) {
    const choir_tts_input *in = &g->req->in.tts;
    choir_err err = {0};
    choir_phonemizer_lang lang = CHOIR_PHONEMIZER_EN_US;
    choir_clause_list clauses = {0};
    choir_piece_list pieces = {0};
    choir_phonemizer *ph = NULL;
    g->done = true;
    if (in->language && choir_phonemizer_lang_parse(in->language, &lang) != 0)
        return choir_request_fail(g->req, CHOIR_EUNSUPPORTED,
                                  "kokoro: language %s is not supported (en-us, en-gb)", in->language);
    if (!in->text) return choir_request_fail(g->req, CHOIR_EINVAL, "kokoro: no text");
    const int stride = CHOIR_KOKORO_MAX_PHONEMES + 2;
    if (!(g->voice = choir_kokoro_voice_load_named(in->voice ? in->voice : KOKORO_DEFAULT_VOICE,
                                                   w->voices_dir, &err)) ||
        !(ph = choir_phonemizer_create(lang, &err)) ||
        choir_phonemize_clauses(ph, in->text, &clauses, &err) != 0 ||
        choir_split_pieces(&clauses, CHOIR_KOKORO_MAX_PHONEMES, g->req->stream != 0, &pieces,
                           &err) != 0)
        goto done;
    g->ids = choir_alloc(CHOIR_MEM_IO, (size_t)(pieces.n ? pieces.n : 1) * stride * sizeof *g->ids);
    g->items = choir_calloc(CHOIR_MEM_IO, (size_t)(pieces.n ? pieces.n : 1), sizeof *g->items);
    if (!g->ids || !g->items) {
        choir_err_set(&err, CHOIR_ENOMEM, "kokoro: out of memory for %d pieces", pieces.n);
        goto done;
    }
    for (int i = 0; i < pieces.n; i++) {
        int32_t *ids = g->ids + (size_t)g->n_items * stride;
        int k = choir_kokoro_phonemes_to_ids(w->m, pieces.items[i].phonemes, ids, stride, NULL, &err);
        if (k < 0) goto done;
        if (k <= 2) continue;
        g->items[g->n_items++] = (choir_kokoro_item){
            .ids = ids, .n_ids = k, .speed = in->speed > 0 ? in->speed : 1.0f,
            .style = choir_kokoro_voice_style(g->voice, pieces.items[i].n_phonemes)};
    }
    g->done = false;
done:
    if (err.code) choir_request_fail(g->req, err.code, "%s", err.msg);
    choir_phonemizer_free(ph);
    choir_piece_list_free(&pieces);
    choir_clause_list_free(&clauses);
    return 0;
}

static void gpu_req_finish(gpu_req *g) {
    if (!g->done && g->next >= g->n_items) {
        choir_output out;
        memset(&out, 0, sizeof out);
        out.final = 1;
        out.sample_rate = CHOIR_KOKORO_SAMPLE_RATE;
        choir_request_emit(g->req, &out);
        g->done = true;
    }
}

static int run_batch_gpu(const kokoro_weights *w, choir_request *const *reqs, int n) {
    gpu_req gr[KOKORO_MAX_BATCH];
    choir_kokoro_item round[KOKORO_GPU_PIECES];
    int owner[KOKORO_GPU_PIECES];
    memset(gr, 0, sizeof gr);
    for (int i = 0; i < n; i++) {
        gr[i].req = reqs[i];
        gr[i].done = true;
        if (reqs[i]->task != CHOIR_TASK_TTS)
            choir_request_fail(reqs[i], CHOIR_EUNSUPPORTED, "kokoro: only text to speech");
        else if (!choir_request_cancelled(reqs[i])) gpu_req_plan(w, &gr[i]);
        gpu_req_finish(&gr[i]); /* a text with nothing to say ends at once */
    }
    /* rounds: every request's next piece first (its first piece, for time
     * to first audio), then fill the round with further pieces in order */
    for (;;) {
        int k = 0;
        for (int i = 0; i < n && k < KOKORO_GPU_PIECES; i++)
            if (!gr[i].done && choir_request_cancelled(gr[i].req)) gr[i].done = true;
            else if (!gr[i].done) round[k] = gr[i].items[gr[i].next], owner[k++] = i;
        for (int i = 0; i < n && k < KOKORO_GPU_PIECES; i++)
            for (int j = gr[i].next + 1; !gr[i].done && gr[i].next > 0 && j < gr[i].n_items &&
                                         k < KOKORO_GPU_PIECES; j++)
                round[k] = gr[i].items[j], owner[k++] = i;
        if (k == 0) break;
        choir_kokoro_params p = choir_kokoro_default_params();
        choir_err err = {0};
        if (choir_kokoro_synthesize_batch(w->m, round, k, &p, &err) != 0) {
            for (int j = 0; j < k; j++)
                if (!gr[owner[j]].done) {
                    choir_request_fail(gr[owner[j]].req, err.code, "%s", err.msg);
                    gr[owner[j]].done = true;
                }
            continue;
        }
        for (int j = 0; j < k; j++) {
            gpu_req *g = &gr[owner[j]];
            if (!g->done && emit_audio(g->req, round[j].audio, round[j].n_samples, g->next,
                                       g->n_items))
                g->done = true; /* the client went away */
            g->next++;
            choir_free(round[j].audio);
            gpu_req_finish(g);
        }
    }
    for (int i = 0; i < n; i++) {
        choir_kokoro_voice_free(gr[i].voice);
        choir_free(gr[i].ids);
        choir_free(gr[i].items);
    }
    return 0;
}
#endif

static int kokoro_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                            choir_err *err) {
    const kokoro_weights *w = weights;
    if (n < 1 || n > KOKORO_MAX_BATCH)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: batch of %d (1..%d)", n, KOKORO_MAX_BATCH);
#ifdef CHOIR_HAVE_CUDA
    if (w->gpu) return run_batch_gpu(w, reqs, n);
#endif
    for (int i = 0; i < n; i++) {
        if (reqs[i]->task != CHOIR_TASK_TTS) {
            choir_request_fail(reqs[i], CHOIR_EUNSUPPORTED, "kokoro: only text to speech");
            continue;
        }
        if (choir_request_cancelled(reqs[i])) continue;
        if (run_one(w, reqs[i], arena))
            return choir_err_set(err, CHOIR_ENOMEM,
                                 "kokoro: request %d outgrew the batch's %zu-byte arena", i,
                                 choir_arena_capacity(arena));
    }
    return 0;
}

#ifdef CHOIR_HAVE_CUDA
static int64_t kokoro_device_bytes(const void *weights) {
    const kokoro_weights *w = weights;
    return w && w->cu ? choir_cuda_mem_current(w->cu) : 0;
}

/* A round decodes up to KOKORO_GPU_PIECES pieces padded to the longest; a
 * request's share is its own pieces' worth at the largest piece length it can
 * make (as kokoro_estimate), plus the convolution scratch. */
static int64_t kokoro_estimate_device(const void *weights, const choir_request *req) {
    (void)weights;
    int64_t chars = req->in.tts.text ? (int64_t)strlen(req->in.tts.text) : 0;
    int64_t phonemes = chars * 6 / 5 + 8;
    int pieces = (int)(phonemes / CHOIR_KOKORO_MAX_PHONEMES) + 1;
    if (phonemes > CHOIR_KOKORO_MAX_PHONEMES) phonemes = CHOIR_KOKORO_MAX_PHONEMES;
    float speed = req->in.tts.speed > 0 ? req->in.tts.speed : 1.0f;
    int64_t frames = (int64_t)((double)(phonemes + 2) * 6.0 / speed) + 16;
    if (pieces > KOKORO_GPU_PIECES) pieces = KOKORO_GPU_PIECES;
    return choir_kokoro_gpu_estimate_bytes(pieces, frames);
}
#endif

const choir_model_ops choir_model_kokoro = {
    .kind = "kokoro",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_TTS),
    .max_batch = KOKORO_MAX_BATCH,
    .probe = kokoro_probe,
    .load = kokoro_model_load,
    .free = kokoro_model_free,
    .resident_bytes = kokoro_resident_bytes,
    .length = kokoro_length,
    .estimate = kokoro_estimate,
    .run_batch = kokoro_run_batch,
    .check = kokoro_check,
#ifdef CHOIR_HAVE_CUDA
    .gpu = 1,
    .device_bytes = kokoro_device_bytes,
    .estimate_device = kokoro_estimate_device,
#endif
};
