/* The engine's adapter for Kokoro-82M (include/choir/model.h).
 *
 * Each request is phonemized, split and streamed piece by piece: every piece's
 * audio is emitted as soon as it exists (the first piece is one clause, for a
 * short time to first audio), then one final, empty output. The forward pass
 * takes its workspace from the counted allocator (no_arena), sized per piece
 * by choir_kokoro_estimate_bytes. Voices are read from DIR/voices per request
 * (522 KB each), so any voice or mix the directory offers can be asked for. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/kokoro.h"
#include "choir/model.h"
#include "choir/phonemizer.h"

#define KOKORO_MAX_BATCH 8
#define KOKORO_DEFAULT_VOICE "af_heart"

typedef struct kokoro_weights {
    choir_kokoro *m;
    char voices_dir[1024];
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

static void *kokoro_model_load(const char *dir, const choir_model_options *opt, choir_err *err) {
    (void)opt;
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
    return w;
}

static void kokoro_model_free(void *weights) {
    kokoro_weights *w = weights;
    if (!w) return;
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

static void run_one(const kokoro_weights *w, choir_request *req) {
    const choir_tts_input *in = &req->in.tts;
    choir_err err = {0};
    choir_phonemizer_lang lang = CHOIR_PHONEMIZER_EN_US;
    if (in->language && choir_phonemizer_lang_parse(in->language, &lang) != 0) {
        choir_request_fail(req, CHOIR_EUNSUPPORTED, "kokoro: language %s is not supported (en-us, en-gb)",
                           in->language);
        return;
    }
    if (!in->text) {
        choir_request_fail(req, CHOIR_EINVAL, "kokoro: no text");
        return;
    }
    choir_kokoro_voice *voice = choir_kokoro_voice_load(in->voice ? in->voice : KOKORO_DEFAULT_VOICE,
                                                        w->voices_dir, &err);
    choir_phonemizer *ph = voice ? choir_phonemizer_create(lang, &err) : NULL;
    if (voice && ph) {
        choir_kokoro_speak_params sp = choir_kokoro_default_speak_params();
        if (in->speed > 0) sp.synth.speed = in->speed;
        sp.short_first = req->stream != 0;
        int rc = choir_kokoro_speak(w->m, ph, voice, in->text, &sp, emit_audio, req, &err);
        if (rc == CHOIR_ECANCELED) choir_err_clear(&err);
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
}

static int kokoro_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                            choir_err *err) {
    (void)arena;
    const kokoro_weights *w = weights;
    if (n < 1 || n > KOKORO_MAX_BATCH)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: batch of %d (1..%d)", n, KOKORO_MAX_BATCH);
    for (int i = 0; i < n; i++) {
        if (reqs[i]->task != CHOIR_TASK_TTS) {
            choir_request_fail(reqs[i], CHOIR_EUNSUPPORTED, "kokoro: only text to speech");
            continue;
        }
        if (choir_request_cancelled(reqs[i])) continue;
        run_one(w, reqs[i]);
    }
    return 0;
}

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
    .no_arena = 1,
};
