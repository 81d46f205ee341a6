/* The Whisper engine adapter (choir_model_whisper) on the whisper-ml80 fixture
 * weights: probe, load with the tokenizer from the model folder, and a batch of
 * short requests decoded together giving what each gives through the library
 * alone. The same batch in an arena of its estimates gives the same
 * transcripts, takes its caches and passes from the arena (no cache memory
 * counted outside it), and gives the arena back; through the engine each
 * batch's peak is within its admitted arena and a wrong estimate is
 * corrected (tests/support/calib.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/audio.h"
#include "choir/engine.h"
#include "choir/json.h"
#include "choir/model.h"
#include "choir/randw.h"
#include "choir/tokenizer.h"
#include "choir/whisper.h"
#include "calib.h"
#include "testutil.h"

#define FX "whisper/whisper-ml80"
#define SR 16000

typedef struct captured {
    char text[4096];
    char lang[8];
    int n_segments, finals, status, partials;
    char partial_text[4096];
} captured;

static int on_output(void *user, const choir_output *out) {
    captured *c = user;
    if (!out->final) {
        /* A partial carries one new segment; they add up to the final text. */
        c->partials++;
        assert_int_equal(out->n_segments, 1);
        size_t l = strlen(c->partial_text);
        snprintf(c->partial_text + l, sizeof c->partial_text - l, "%s", out->text);
        return 0;
    }
    c->finals++;
    c->status = out->status;
    if (out->text) snprintf(c->text, sizeof c->text, "%s", out->text);
    if (out->language) snprintf(c->lang, sizeof c->lang, "%s", out->language);
    c->n_segments = out->n_segments;
    /* each segment carries its decoding (verbose_json's seek, tokens,
     * temperature, compression_ratio, no_speech_prob) */
    for (int i = 0; i < out->n_segments; i++) {
        const choir_segment *g = &out->segments[i];
        assert_int_equal(g->has_decoding, 1);
        assert_true(g->n_tokens >= 1 && g->tokens);
        assert_true(g->temperature > 0.29f && g->temperature < 0.31f); /* the request's */
        assert_true(g->compression_ratio > 0);
        assert_true(g->no_speech_prob >= 0 && g->no_speech_prob <= 1);
        assert_true(g->seek >= 0);
    }
    return 0;
}

/* The final text and status only (requests without the temperature above). */
static int on_text(void *user, const choir_output *out) {
    captured *c = user;
    if (!out->final) return 0;
    c->finals++;
    c->status = out->status;
    if (out->text) snprintf(c->text, sizeof c->text, "%s", out->text);
    return 0;
}

/* The final text only (any decoding). */
static int on_final(void *user, const choir_output *out) {
    captured *c = user;
    if (out->final) {
        c->finals++;
        if (out->text) snprintf(c->text, sizeof c->text, "%s", out->text);
    }
    return 0;
}

static void test_adapter(void **state) {
    (void)state;
    choir_err err;
    char dir[1024], cmd[3000];
    snprintf(dir, sizeof dir, "%s", tu_tmpfile("model"));
    assert_int_equal(choir_randw_write_checkpoint(tu_fixture(FX "/manifest.json"),
                                                  tu_fixture(FX "/config.json"), dir, &err), 0);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", tu_fixture("real/tokenizer/multilingual.tiktoken"), dir);
    assert_int_equal(tu_run(cmd, NULL), 0);

    const choir_model_ops *ops = &choir_model_whisper;
    char cfg[1200];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    cJSON *config = choir_json_load(cfg, &err);
    assert_non_null(config);
    assert_int_equal(ops->probe(dir, config), 100);
    cJSON_Delete(config);
    assert_int_equal(ops->probe(dir, NULL), 0);
    void *w = ops->load(dir, NULL, &err);
    assert_non_null(w);
    assert_true(ops->resident_bytes(w) > 0);

    choir_audio a = {0};
    choir_decode_opts o = {.target_rate = SR, .mono = 1};
    assert_int_equal(choir_audio_decode_file(tu_fixture("real/speech/jfk.wav"), &o, &a, &err), 0);
    const char *langs[3] = {"en", NULL, "de"};
    int64_t lens[3] = {SR, 2 * SR, 3 * SR};
    choir_whisper_params params;
    choir_whisper_default_params(&params);
    params.sample_len = 8; /* random weights rarely end a window: keep it short */
    params.best_of = 2;
    choir_request req[3];
    captured cap[3];
    choir_request *reqs[3];
    for (int i = 0; i < 3; i++) {
        memset(&req[i], 0, sizeof req[i]);
        memset(&cap[i], 0, sizeof cap[i]);
        req[i].task = CHOIR_TASK_STT;
        req[i].in.stt = (choir_stt_input){.samples = a.samples + i * SR, .n_samples = lens[i],
                                          .language = langs[i], .timestamps = 1, .temperature = 0.3f};
        req[i].extra = &params;
        req[i].stream = i == 1;
        req[i].on_output = on_output;
        req[i].on_output_user = &cap[i];
        reqs[i] = &req[i];
        assert_true(ops->estimate(w, &req[i]) > ops->estimate(w, &req[0]) - 1);
        assert_true(ops->estimate(NULL, &req[i]) > 0);
    }
    assert_int_equal(ops->run_batch(w, reqs, 3, NULL, &err), 0);

    /* Again in an arena of the batch's estimates (the engine's reservation):
     * the same transcripts, the caches and passes inside it, and only the
     * outputs and each recording's mel counted outside. */
    int64_t est = 0;
    for (int i = 0; i < 3; i++) est += ops->estimate(w, &req[i]);
    choir_arena *arena = choir_arena_create((size_t)est, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(arena);
    captured cap2[3];
    choir_request req2[3], *reqs2[3];
    for (int i = 0; i < 3; i++) {
        memset(&cap2[i], 0, sizeof cap2[i]);
        req2[i] = req[i];
        req2[i].status = 0, req2[i].done = 0, req2[i].first_output_ns = 0, req2[i].error[0] = 0;
        req2[i].on_output_user = &cap2[i];
        reqs2[i] = &req2[i];
    }
    int64_t cache0 = choir_mem_current(CHOIR_MEM_CACHE), act0 = choir_mem_current(CHOIR_MEM_ACTIVATIONS);
    choir_mem_reset_peaks();
    assert_int_equal(ops->run_batch(w, reqs2, 3, arena, &err), 0);
    int64_t cache_out = choir_mem_peak(CHOIR_MEM_CACHE) - cache0,
            act_out = choir_mem_peak(CHOIR_MEM_ACTIVATIONS) - act0;
    size_t hw = choir_arena_high_water(arena);
    printf("arena: %zu bytes used of %lld estimated; outside: %lld cache, %lld activations\n", hw,
           (long long)est, (long long)cache_out, (long long)act_out);
    assert_true(hw > 0 && hw <= (size_t)est);
    assert_int_equal(choir_arena_used(arena), 0);
    /* Outside: the mel of one recording at a time (3 s + 30 s of padding,
     * 80 bands; its STFT plan is "cache", 1.6 KB), never a KV cache. */
    assert_true(cache_out < 16 << 10);
    assert_true(act_out < (int64_t)hw / 4);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cap2[i].finals, 1);
        assert_string_equal(cap2[i].text, cap[i].text);
    }
    /* Beam search (its spare beams and finished candidates) in the arena
     * too: the transcript it gives without one. */
    choir_whisper_params beam = params;
    beam.beam_size = 3;
    captured cb[2];
    for (int k = 0; k < 2; k++) {
        memset(&cb[k], 0, sizeof cb[k]);
        choir_request rb = {.task = CHOIR_TASK_STT, .on_output = on_final, .on_output_user = &cb[k]};
        rb.in.stt = (choir_stt_input){.samples = a.samples, .n_samples = 2 * SR, .language = "en"};
        rb.extra = &beam;
        choir_request *rbp = &rb;
        assert_int_equal(ops->run_batch(w, &rbp, 1, k ? arena : NULL, &err), 0);
        assert_int_equal(cb[k].finals, 1);
    }
    assert_string_equal(cb[1].text, cb[0].text);
    assert_int_equal(choir_arena_used(arena), 0);
    choir_arena_free(arena);

    /* The same recordings one at a time through the library's seek loop,
     * the path `choir stt` takes: the engine's transcripts are the CLI's. */
    choir_whisper *m = choir_whisper_load(dir, &err);
    choir_tokenizer *tok = choir_tokenizer_load(dir, &err);
    assert_non_null(m);
    assert_non_null(tok);
    choir_whisper_transcribe_opts to;
    choir_whisper_default_transcribe_opts(&to);
    to.batched = false;
    to.params = params;
    to.params.temperatures[0] = 0.3f;
    to.params.n_temperatures = 1;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cap[i].finals, 1);
        assert_int_equal(cap[i].status, 0);
        choir_whisper_input in = {a.samples + i * SR, lens[i], choir_whisper_lang_index(langs[i] ? langs[i] : "xx"), NULL};
        choir_whisper_transcript t;
        assert_int_equal(choir_whisper_transcribe_batch(m, tok, &in, 1, &to, &t, &err), 0);
        const char *text = t.text;
        while (*text == ' ') text++;
        assert_string_equal(cap[i].text, text);
        assert_int_equal(cap[i].n_segments, t.n_segments);
        assert_string_equal(cap[i].lang, choir_whisper_lang_code(t.language));
        choir_whisper_transcript_clear(&t);
    }
    assert_string_equal(cap[2].lang, "de");
    /* The streaming request got its segments first, adding up to its text. */
    assert_true(cap[1].n_segments >= 1);
    assert_int_equal(cap[1].partials, cap[1].n_segments);
    const char *pt = cap[1].partial_text;
    while (*pt == ' ') pt++;
    assert_string_equal(pt, cap[1].text);
    assert_int_equal(cap[0].partials, 0);

    /* A bad language fails that request only. */
    captured bad = {0};
    choir_request r = {.task = CHOIR_TASK_STT, .on_output = on_output, .on_output_user = &bad};
    r.in.stt = (choir_stt_input){.samples = a.samples, .n_samples = SR, .language = "xx"};
    choir_request *rp = &r;
    assert_int_equal(ops->run_batch(w, &rp, 1, NULL, &err), 0);
    assert_int_equal(r.status, CHOIR_EINVAL);
    /* So does a temperature outside [0, 10] (the job worker passes it unread). */
    const float bad_t[] = {-0.5f, 10.5f, NAN};
    for (size_t i = 0; i < sizeof bad_t / sizeof bad_t[0]; i++) {
        captured bt = {0};
        choir_request tr = {.task = CHOIR_TASK_STT, .on_output = on_output, .on_output_user = &bt};
        tr.in.stt = (choir_stt_input){.samples = a.samples, .n_samples = SR, .language = "en",
                                      .temperature = bad_t[i], .fixed_temperature = 1};
        choir_request *trp = &tr;
        assert_int_equal(ops->run_batch(w, &trp, 1, NULL, &err), 0);
        assert_int_equal(tr.status, CHOIR_EINVAL);
    }

    /* The request fields alone (no extra): max_tokens bounds each window,
     * fixed_temperature decodes at 0 without fallback; the library with the
     * same parameters gives the same text. Batched together, requests that
     * differ in max_tokens decode apart, each to its own limit. A max_tokens
     * beyond half the text context fails that request. */
    choir_whisper_transcribe_opts fo;
    choir_whisper_default_transcribe_opts(&fo);
    fo.batched = false;
    fo.params.temperatures[0] = 0;
    fo.params.n_temperatures = 1;
    fo.params.timestamps = false;
    int limits[3] = {3, 8, 1000};
    choir_request fr[3];
    captured fc[3];
    choir_request *frs[3];
    for (int i = 0; i < 3; i++) {
        memset(&fr[i], 0, sizeof fr[i]);
        memset(&fc[i], 0, sizeof fc[i]);
        fr[i].task = CHOIR_TASK_STT;
        fr[i].in.stt = (choir_stt_input){.samples = a.samples, .n_samples = SR, .language = "en",
                                         .fixed_temperature = 1, .max_tokens = limits[i]};
        fr[i].on_output = on_text;
        fr[i].on_output_user = &fc[i];
        frs[i] = &fr[i];
    }
    assert_int_equal(ops->run_batch(w, frs, 3, NULL, &err), 0);
    assert_int_equal(fr[2].status, CHOIR_EINVAL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(fc[i].finals, 1);
        assert_int_equal(fc[i].status, 0);
        fo.params.sample_len = limits[i];
        choir_whisper_input in = {a.samples, SR, choir_whisper_lang_index("en"), NULL};
        choir_whisper_transcript t;
        assert_int_equal(choir_whisper_transcribe_batch(m, tok, &in, 1, &fo, &t, &err), 0);
        const char *text = t.text;
        while (*text == ' ') text++;
        assert_string_equal(fc[i].text, text);
        int n_tokens = 0;
        for (int k = 0; k < t.n_segments; k++) n_tokens += t.segments[k].n_tokens;
        assert_true(n_tokens >= 1 && n_tokens <= limits[i]); /* one window of 1 s */
        choir_whisper_transcript_clear(&t);
    }

    choir_tokenizer_free(tok);
    choir_whisper_free(m);
    ops->free(w);

    /* Through the engine: each batch's peak inside the arena it was admitted
     * with, a wrong estimate corrected from those peaks. */
    choir_job j = {0};
    j.req.task = CHOIR_TASK_STT;
    j.req.in.stt = (choir_stt_input){.samples = a.samples, .n_samples = 2 * SR, .language = "en",
                                     .timestamps = 1, .temperature = 0.3f};
    j.req.extra = &params;
    j.priority = CHOIR_PRIORITY_NORMAL;
    tu_cal_check("whisper", ops, dir, &j);

    /* Through the engine, a request's options are refused at submit (the
     * adapter's check op, the bounds the run applies): nothing is queued,
     * the model is not even loaded. Once it is, max_tokens beyond its
     * context is refused at submit too. */
    choir_engine_params ep = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    ep.memory_budget = (int64_t)2 << 30;
    choir_engine *e = choir_engine_create(&ep, &err);
    assert_non_null(e);
    assert_int_equal(choir_engine_add_model(e, "w", dir, ops, &err), 0);
    struct {
        float temperature;
        int max_tokens;
        const char *language, *msg;
    } refused[] = {
        {-0.5f, 0, "en", "temperature must be in [0, 10], got -0.5"},
        {10.5f, 0, "en", "temperature must be in [0, 10], got 10.5"},
        {NAN, 0, "en", "temperature must be in [0, 10], got nan"},
        {0, -1, "en", "max_tokens must be in [0, "},
        {0, 0, "xx", "unknown language 'xx'"},
    };
    choir_job sj = {.model_id = "w"};
    sj.req.task = CHOIR_TASK_STT;
    sj.req.in.stt = (choir_stt_input){.samples = a.samples, .n_samples = SR, .fixed_temperature = 1};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        sj.req.in.stt.temperature = refused[i].temperature;
        sj.req.in.stt.max_tokens = refused[i].max_tokens;
        sj.req.in.stt.language = refused[i].language;
        choir_reject_reason why = CHOIR_REJECT_NONE;
        err = (choir_err){0};
        assert_null(choir_engine_submit(e, &sj, &why, &err));
        assert_int_equal(err.code, CHOIR_EINVAL);
        assert_int_equal(why, CHOIR_REJECT_FAILED);
        if (!strstr(err.msg, refused[i].msg)) fail_msg("refusal %zu: '%s'", i, err.msg);
    }
    choir_engine_model_info info;
    assert_int_equal(choir_engine_model_find(e, "w", &info), 0);
    assert_int_equal(info.loaded, 0);
    /* a good request loads the model and runs */
    sj.req.in.stt.temperature = 0;
    sj.req.in.stt.max_tokens = 3;
    sj.req.in.stt.language = "en";
    choir_ticket *tk = choir_engine_submit(e, &sj, NULL, &err);
    assert_non_null(tk);
    assert_int_equal(choir_ticket_wait(tk, 120, &err), 0);
    choir_ticket_free(tk);
    /* loaded: the text context (n_text_ctx / 2) bounds max_tokens at submit */
    int most = -1;
    {
        choir_whisper *wm = choir_whisper_load(dir, &err);
        assert_non_null(wm);
        most = choir_whisper_get_dims(wm)->n_text_ctx / 2;
        choir_whisper_free(wm);
    }
    sj.req.in.stt.max_tokens = most;
    tk = choir_engine_submit(e, &sj, NULL, &err);
    assert_non_null(tk);
    choir_ticket_free(tk);
    sj.req.in.stt.max_tokens = most + 1;
    err = (choir_err){0};
    assert_null(choir_engine_submit(e, &sj, NULL, &err));
    assert_int_equal(err.code, CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "max_tokens must be in [0, "));
    choir_engine_free(e);
    choir_audio_clear(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_adapter)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
