/* Whisper behind the engine's model interface (choir/model.h).
 *
 * The weights object is the network plus its tokenizer. Each request is one
 * transcription with openai's semantics (seek loop, temperature fallback,
 * previous-text prompts). Requests of a batch currently run one after another;
 * the decoder batches the hypotheses of a window, and the batched long-form
 * pipeline (choir_whisper_transcribe with batched = true) is what `choir stt
 * --batch-size` uses. Working memory comes from the counted allocator (in the
 * activations and caches categories), not from the batch arena. */
#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/model.h"
#include "choir/tokenizer.h"
#include "choir/whisper.h"

typedef struct whisper_weights {
    choir_whisper *m;
    choir_tokenizer *tok;
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
    choir_whisper_free(w->m);
    choir_free(w);
}

static void *whisper_model_load(const char *dir, const choir_model_options *opt, choir_err *err) {
    /* Quantized checkpoints come from `choir convert`; load-time quantization
     * (opt->q_bits) is not offered, so the model runs as stored. */
    (void)opt;
    whisper_weights *w = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *w);
    if (!w) {
        choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
        return NULL;
    }
    if (!(w->m = choir_whisper_load(dir, err))) goto fail;
    w->tok = choir_tokenizer_load_for_vocab(dir, choir_whisper_get_dims(w->m)->n_vocab, err);
    if (!w->tok) goto fail;
    return w;
fail:
    whisper_model_free(w);
    return NULL;
}

static int64_t whisper_resident_bytes(const void *weights) {
    const whisper_weights *w = weights;
    return (int64_t)choir_whisper_weight_bytes(w->m);
}

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
    return mel + enc + cross + hyps + (1 << 20);
}

static int whisper_one(whisper_weights *w, choir_request *req) {
    const choir_stt_input *in = &req->in.stt;
    choir_whisper_transcribe_opts o;
    choir_whisper_default_transcribe_opts(&o);
    if (in->language && in->language[0]) {
        o.params.language = choir_whisper_lang_index(in->language);
        if (o.params.language < 0)
            return choir_request_fail(req, CHOIR_EINVAL, "unknown language '%s'", in->language);
    }
    o.params.task = in->translate ? CHOIR_WHISPER_TRANSLATE : CHOIR_WHISPER_TRANSCRIBE;
    o.params.timestamps = in->timestamps != 0;
    if (in->temperature > 0) {
        o.params.temperatures[0] = in->temperature;
        o.params.n_temperatures = 1;
    }
    o.initial_prompt = in->prompt;
    choir_whisper_transcript t;
    choir_err err = {0};
    int rc = choir_whisper_transcribe(w->m, w->tok, in->samples, in->n_samples, &o, &t, &err);
    if (rc == CHOIR_ENOMEM) return rc;
    if (rc) return choir_request_fail(req, rc, "%s", err.msg);
    choir_segment *segs = choir_calloc(CHOIR_MEM_IO, (size_t)(t.n_segments + 1), sizeof *segs);
    if (!segs) {
        choir_whisper_transcript_clear(&t);
        return CHOIR_ENOMEM;
    }
    for (int i = 0; i < t.n_segments; i++) {
        segs[i].start_s = t.segments[i].start;
        segs[i].end_s = t.segments[i].end;
        segs[i].text = t.segments[i].text;
        segs[i].probability = expf(t.segments[i].avg_logprob);
    }
    /* The transcript without its leading space, as the OpenAI API returns it. */
    const char *text = t.text ? t.text : "";
    while (*text == ' ') text++;
    choir_output out = {.final = 1, .text = text, .language = choir_whisper_lang_code(t.language),
                        .segments = segs, .n_segments = t.n_segments};
    req->audio_seconds = t.duration;
    choir_request_emit(req, &out);
    choir_free(segs);
    choir_whisper_transcript_clear(&t);
    return 0;
}

static int whisper_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                             choir_err *err) {
    (void)arena;
    for (int i = 0; i < n; i++) {
        if (reqs[i]->task != CHOIR_TASK_STT) {
            choir_request_fail(reqs[i], CHOIR_EINVAL, "whisper serves speech-to-text only");
            continue;
        }
        if (choir_request_cancelled(reqs[i])) continue;
        int rc = whisper_one(weights, reqs[i]);
        if (rc == CHOIR_ENOMEM) return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
    }
    return 0;
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
};
