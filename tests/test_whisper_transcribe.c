/* Long-audio transcription on the whisper-ml80 fixture weights (random, so the
 * text is noise; what is tested is the pipeline): batched results equal the
 * same windows decoded one at a time, spans map back to file time, the
 * sequential seek loop covers the file in order, and the transcript is the
 * concatenation of its segments. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/randw.h"
#include "choir/tokenizer.h"
#include "choir/whisper.h"
#include "testutil.h"

#define FX "whisper/whisper-ml80"
#define SR 16000

static choir_whisper *g_model;
static choir_tokenizer *g_tok;
static float *g_pcm;
static int64_t g_n;

static int setup(void **state) {
    (void)state;
    choir_err err;
    const char *dir = tu_tmpfile("model");
    if (choir_randw_write_checkpoint(tu_fixture(FX "/manifest.json"), tu_fixture(FX "/config.json"),
                                     dir, &err))
        return -1;
    g_model = choir_whisper_load(dir, &err);
    g_tok = choir_tokenizer_load(tu_fixture("real/tokenizer/multilingual.tiktoken"), &err);
    choir_audio a = {0};
    choir_decode_opts o = {.target_rate = SR, .mono = 1};
    if (!g_model || !g_tok || choir_audio_decode_file(tu_fixture("real/speech/jfk.wav"), &o, &a, &err))
        return -1;
    /* jfk, 4 s of silence, jfk, jfk: about 37 s, so more than one window. */
    g_n = 3 * a.frames + 4 * SR;
    g_pcm = choir_calloc(CHOIR_MEM_IO, (size_t)g_n, sizeof(float));
    if (!g_pcm) return -1;
    memcpy(g_pcm, a.samples, (size_t)a.frames * sizeof(float));
    memcpy(g_pcm + a.frames + 4 * SR, a.samples, (size_t)a.frames * sizeof(float));
    memcpy(g_pcm + 2 * a.frames + 4 * SR, a.samples, (size_t)a.frames * sizeof(float));
    choir_audio_clear(&a);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    choir_free(g_pcm);
    choir_tokenizer_free(g_tok);
    choir_whisper_free(g_model);
    return 0;
}

static void fast_opts(choir_whisper_transcribe_opts *o) {
    choir_whisper_default_transcribe_opts(o);
    o->params.language = 0;
    o->params.sample_len = 12;
    o->params.n_temperatures = 1; /* no fallback: keeps the test fast */
    o->params.no_speech_threshold = 2.0f;
}

static void check_concat(const choir_whisper_transcript *t) {
    size_t len = 0;
    for (int i = 0; i < t->n_segments; i++) len += strlen(t->segments[i].text);
    assert_int_equal(strlen(t->text), len);
    size_t off = 0;
    for (int i = 0; i < t->n_segments; i++) {
        size_t l = strlen(t->segments[i].text);
        assert_memory_equal(t->text + off, t->segments[i].text, l);
        off += l;
    }
}

static void check_equal(const choir_whisper_transcript *a, const choir_whisper_transcript *b) {
    assert_int_equal(a->n_segments, b->n_segments);
    for (int i = 0; i < a->n_segments; i++) {
        assert_true(a->segments[i].start == b->segments[i].start);
        assert_true(a->segments[i].end == b->segments[i].end);
        assert_string_equal(a->segments[i].text, b->segments[i].text);
        assert_int_equal(a->segments[i].n_tokens, b->segments[i].n_tokens);
        assert_memory_equal(a->segments[i].tokens, b->segments[i].tokens,
                            (size_t)a->segments[i].n_tokens * sizeof(int32_t));
    }
    assert_string_equal(a->text, b->text);
}

static void test_batched_equals_one_by_one(void **state) {
    (void)state;
    choir_err err;
    choir_whisper_transcribe_opts o;
    fast_opts(&o);
    o.batched = true;
    /* Spans as VAD would give them: speech, with the silence left out. */
    int64_t jfk = (g_n - 4 * SR) / 3;
    choir_whisper_span spans[3] = {{0, jfk}, {jfk + 4 * SR, 2 * jfk + 4 * SR}, {2 * jfk + 4 * SR, g_n}};
    o.spans = spans;
    o.n_spans = 3;
    choir_whisper_transcript one, many;
    o.batch_size = 1;
    assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, g_n, &o, &one, &err), 0);
    o.batch_size = 3;
    assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, g_n, &o, &many, &err), 0);
    check_equal(&one, &many);
    check_concat(&many);
    assert_true(many.n_segments >= 1);
    /* Every segment starts inside its span (file time, not window time). */
    for (int i = 0; i < many.n_segments; i++) {
        double s = many.segments[i].start * SR;
        bool inside = false;
        for (int k = 0; k < 3; k++) inside |= s >= spans[k].start && s <= spans[k].end + 30 * SR;
        assert_true(inside);
        assert_true(many.segments[i].end >= many.segments[i].start);
    }
    choir_whisper_transcript_clear(&one);
    choir_whisper_transcript_clear(&many);

    /* Fixed 30-s windows: batch of 2 equals 1 + 1. */
    o.spans = NULL;
    o.n_spans = 0;
    o.batch_size = 1;
    assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, g_n, &o, &one, &err), 0);
    o.batch_size = 2;
    assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, g_n, &o, &many, &err), 0);
    check_equal(&one, &many);
    choir_whisper_transcript_clear(&one);
    choir_whisper_transcript_clear(&many);
}

static void test_many_inputs(void **state) {
    (void)state;
    choir_err err;
    choir_whisper_transcribe_opts o;
    fast_opts(&o);
    o.batched = true;
    o.batch_size = 4;
    /* Three recordings, one with its own language and prompt: decoded
     * together, each transcript equals the recording decoded alone. */
    choir_whisper_input in[3] = {
        {.pcm = g_pcm, .n_samples = 11 * SR, .language = -1},
        {.pcm = g_pcm + 2 * SR, .n_samples = g_n - 2 * SR, .language = 2, .initial_prompt = "Guten Tag"},
        {.pcm = g_pcm + 5 * SR, .n_samples = 3 * SR, .language = -1}};
    choir_whisper_transcript together[3], alone;
    assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, in, 3, &o, together, &err), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, &in[i], 1, &o, &alone, &err), 0);
        check_equal(&together[i], &alone);
        assert_int_equal(together[i].language, alone.language);
        check_concat(&together[i]);
        choir_whisper_transcript_clear(&alone);
    }
    assert_int_equal(together[1].language, 2);
    for (int i = 0; i < 3; i++) choir_whisper_transcript_clear(&together[i]);
    /* openai's seek loop in lockstep (the engine's path): each recording gets
     * what choir_whisper_transcribe (the CLI's path) gives it alone. */
    o.batched = false;
    assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, in, 3, &o, together, &err), 0);
    for (int i = 0; i < 3; i++) {
        choir_whisper_transcribe_opts one = o;
        one.params.language = in[i].language >= 0 ? in[i].language : o.params.language;
        one.initial_prompt = in[i].initial_prompt;
        assert_int_equal(choir_whisper_transcribe(g_model, g_tok, in[i].pcm, in[i].n_samples, &one, &alone, &err),
                         0);
        check_equal(&together[i], &alone);
        assert_int_equal(together[i].language, alone.language);
        choir_whisper_transcript_clear(&alone);
        choir_whisper_transcript_clear(&together[i]);
    }
}

/* Stops input 1 once it has been polled twice (before the second batch). */
static int stop_second(void *user, int input) {
    int *polls = user;
    return input == 1 && ++*polls > 1;
}

/* The next batch's mels computed ahead on a second thread (what a GPU model
 * does by default) give the transcripts computed in turn, also when an input
 * stops between batches so that the batch taken is not the one computed
 * ahead. */
static void test_prefetched_mels(void **state) {
    (void)state;
    choir_err err;
    choir_whisper_transcribe_opts o;
    fast_opts(&o);
    o.batched = true;
    o.batch_size = 2; /* 1 + 2 + 1 windows: two batches */
    choir_whisper_input in[3] = {{.pcm = g_pcm, .n_samples = 11 * SR, .language = -1},
                                 {.pcm = g_pcm + 2 * SR, .n_samples = g_n - 2 * SR, .language = 2},
                                 {.pcm = g_pcm + 5 * SR, .n_samples = 3 * SR, .language = -1}};
    for (int cancel = 0; cancel < 2; cancel++) {
        choir_whisper_transcript ahead[3], in_turn[3];
        int polls = 0;
        o.cancelled = cancel ? stop_second : NULL;
        o.cancel_user = &polls;
        o.prefetch_mels = 1;
        assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, in, 3, &o, ahead, &err), 0);
        polls = 0;
        o.prefetch_mels = -1;
        assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, in, 3, &o, in_turn, &err), 0);
        for (int i = 0; i < 3; i++) {
            check_equal(&ahead[i], &in_turn[i]);
            check_concat(&ahead[i]);
        }
        /* The stopped input lost its second window (its segments all lie in the first 30 s). */
        if (cancel)
            for (int k = 0; k < ahead[1].n_segments; k++) assert_true(ahead[1].segments[k].start < 30.0);
        assert_true(ahead[0].n_segments >= 1 && ahead[2].n_segments >= 1);
        for (int i = 0; i < 3; i++) {
            choir_whisper_transcript_clear(&ahead[i]);
            choir_whisper_transcript_clear(&in_turn[i]);
        }
    }
}

/* Whatever timestamps the model samples (random weights sample them past the
 * audio in a padded window), segments stay in order and inside the audio. */
static void check_times(const choir_whisper_transcript *t) {
    double prev = 0;
    for (int i = 0; i < t->n_segments; i++) {
        const choir_whisper_segment *g = &t->segments[i];
        if (!(g->start >= prev && g->end >= g->start && g->end <= t->duration))
            fail_msg("segment %d: %.3f --> %.3f after %.3f in %.3f s", i, g->start, g->end, prev, t->duration);
        prev = g->end;
    }
}

static void test_times_inside_the_audio(void **state) {
    (void)state;
    choir_err err;
    choir_whisper_transcribe_opts o;
    fast_opts(&o);
    o.params.sample_len = 40;
    int64_t lens[3] = {11 * SR, 3 * SR, g_n};
    int past_end = 0;
    for (int mode = 0; mode < 2; mode++)
        for (int k = 0; k < 3; k++) {
            o.batched = mode == 1;
            choir_whisper_transcript t;
            assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, lens[k], &o, &t, &err), 0);
            check_times(&t);
            past_end += t.n_segments > 0 && t.segments[t.n_segments - 1].end == t.duration;
            choir_whisper_transcript_clear(&t);
        }
    /* the clamp was needed: some segment was cut at the end of the audio */
    assert_true(past_end > 0);
}

static int g_calls;
static double g_last_done, g_total;

static void on_progress(void *user, double done, double total) {
    (void)user;
    assert_true(done >= g_last_done);
    g_last_done = done;
    g_total = total;
    g_calls++;
}

static int g_segments;

static int on_segment(void *user, int input, const choir_whisper_segment *seg) {
    (void)input;
    assert_non_null(seg->text);
    g_segments++;
    return user != NULL; /* a non-NULL user asks to stop at the first segment */
}

static void test_sequential(void **state) {
    (void)state;
    choir_err err;
    choir_whisper_transcribe_opts o;
    fast_opts(&o);
    o.initial_prompt = "  ask not  ";
    o.progress = on_progress;
    o.on_segment = on_segment;
    choir_whisper_transcript t;
    assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, g_n, &o, &t, &err), 0);
    assert_int_equal(g_segments, t.n_segments); /* every segment was announced */
    assert_true(g_calls >= 2); /* 37 s cannot be one window */
    assert_true(g_last_done > 0 && g_last_done <= g_total + 1e-9);
    assert_true(g_total >= 36.0 && g_total <= 38.0);
    assert_true(t.duration > 36.0);
    check_concat(&t);
    for (int i = 0; i < t.n_segments; i++) assert_true(t.segments[i].end >= t.segments[i].start);
    choir_whisper_transcript_clear(&t);
    /* A segment callback can stop the transcription; nothing is kept. */
    assert_true(g_segments > 0);
    {
        int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
        o.segment_user = &t;
        g_segments = 0;
        assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, g_n, &o, &t, &err), CHOIR_ECANCELED);
        assert_int_equal(g_segments, 1);
        assert_null(t.segments);
        assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
        o.segment_user = NULL;
    }
    /* Without a tokenizer there is no text to produce. */
    assert_int_equal(choir_whisper_transcribe(g_model, NULL, g_pcm, g_n, &o, &t, &err), CHOIR_EINVAL);
}

/* Cancellation per input: input `victim` stops after `after` polls. */
typedef struct cancel_plan {
    int victim, after, polls[3];
} cancel_plan;

static int cancel_some(void *user, int input) {
    cancel_plan *c = user;
    c->polls[input]++;
    return c->victim < 0 || (input == c->victim && c->polls[input] > c->after);
}

static void test_cancel_one_input(void **state) {
    (void)state;
    choir_err err;
    choir_whisper_transcribe_opts o;
    fast_opts(&o);
    choir_whisper_input in[3] = {{.pcm = g_pcm, .n_samples = 11 * SR, .language = -1},
                                 {.pcm = g_pcm, .n_samples = g_n, .language = -1},
                                 {.pcm = g_pcm + 5 * SR, .n_samples = 3 * SR, .language = -1}};
    for (int mode = 0; mode < 2; mode++) {
        o.batched = mode == 1;
        o.batch_size = 2;
        cancel_plan plan = {.victim = 1, .after = 1};
        o.cancelled = cancel_some;
        o.cancel_user = &plan;
        choir_whisper_transcript t[3], alone;
        assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, in, 3, &o, t, &err), 0);
        /* the others are untouched by it; it decoded one window, then stopped */
        choir_whisper_transcribe_opts plain = o;
        plain.cancelled = NULL;
        for (int i = 0; i < 3; i += 2) {
            assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, &in[i], 1, &plain, &alone, &err), 0);
            check_equal(&t[i], &alone);
            choir_whisper_transcript_clear(&alone);
        }
        assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, &in[1], 1, &plain, &alone, &err), 0);
        assert_true(t[1].n_segments < alone.n_segments || alone.n_segments == 0);
        assert_int_equal(plan.polls[1], 2);
        choir_whisper_transcript_clear(&alone);
        for (int i = 0; i < 3; i++) choir_whisper_transcript_clear(&t[i]);
        /* every input cancelled: nothing decoded, nothing kept, nothing leaked */
        int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
        plan = (cancel_plan){.victim = -1};
        assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, in, 3, &o, t, &err), CHOIR_ECANCELED);
        assert_null(t[0].segments);
        assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
    }
}

static void check_words_equal(const choir_whisper_transcript *a, const choir_whisper_transcript *b) {
    check_equal(a, b);
    for (int i = 0; i < a->n_segments; i++) {
        const choir_whisper_segment *x = &a->segments[i], *y = &b->segments[i];
        assert_int_equal(x->n_words, y->n_words);
        for (int k = 0; k < x->n_words; k++) {
            assert_string_equal(x->words[k].text, y->words[k].text);
            assert_true(x->words[k].start_s == y->words[k].start_s);
            assert_true(x->words[k].end_s == y->words[k].end_s);
            assert_true(x->words[k].probability == y->words[k].probability);
        }
    }
}

/* Word timestamps through the seek loop, as openai's transcribe with
 * word_timestamps=True: every segment gets its words (in order, inside the
 * audio); the next
 * window starts where the previous window's last word ended (the rule that
 * moves the seek: unless the window ended on a single timestamp, seek =
 * round(last word end * 100)); the words of a recording decoded with others
 * in lockstep, or in the batched pipeline, equal its words alone. */
static void test_word_timestamps(void **state) {
    (void)state;
    choir_err err;
    choir_whisper_transcribe_opts o;
    fast_opts(&o);
    choir_whisper_transcript plain, t;
    assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, g_n, &o, &plain, &err), 0);
    for (int i = 0; i < plain.n_segments; i++) assert_int_equal(plain.segments[i].n_words, 0);
    o.word_timestamps = true;
    assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, g_n, &o, &t, &err), 0);
    check_times(&t);
    check_concat(&t);
    int n_words = 0, moved = 0;
    double prev_end = 0;
    for (int i = 0; i < t.n_segments; i++) {
        const choir_whisper_segment *g = &t.segments[i];
        assert_true(g->n_words > 0);
        for (int k = 0; k < g->n_words; k++) {
            const choir_word *w = &g->words[k];
            assert_true(w->start_s >= prev_end && w->end_s >= w->start_s && w->end_s <= t.duration);
            prev_end = w->end_s;
            n_words++;
        }
        /* a later window: it starts at the previous window's last word */
        if (i > 0 && g->seek != t.segments[i - 1].seek) {
            const choir_whisper_segment *p = &t.segments[i - 1];
            double lwe = p->words[p->n_words - 1].end_s;
            if (g->seek == (int64_t)nearbyint(lwe * 100)) moved++;
            else assert_true(g->seek == p->seek + 3000);
        }
    }
    print_message("word timestamps: %d segments, %d words, %d windows started at the last word\n", t.n_segments,
                  n_words, moved);
    assert_true(moved >= 1);
    /* the words moved the seek: the windows differ from those without them */
    bool differ = plain.n_segments != t.n_segments;
    for (int i = 0; !differ && i < t.n_segments; i++) differ = plain.segments[i].seek != t.segments[i].seek;
    assert_true(differ);
    choir_whisper_transcript_clear(&plain);
    choir_whisper_transcript_clear(&t);

    /* Lockstep (the engine's path) and the batched pipeline: each recording's
     * words equal its words alone. */
    choir_whisper_input in[3] = {
        {.pcm = g_pcm, .n_samples = 11 * SR, .language = -1},
        {.pcm = g_pcm + 2 * SR, .n_samples = 12 * SR, .language = 2, .initial_prompt = "Guten Tag"},
        {.pcm = g_pcm + 5 * SR, .n_samples = 3 * SR, .language = -1}};
    for (int mode = 0; mode < 2; mode++) {
        o.batched = mode == 1;
        o.batch_size = 3;
        choir_whisper_transcript together[3], alone;
        assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, in, 3, &o, together, &err), 0);
        int with_words = 0;
        for (int i = 0; i < 3; i++) {
            choir_whisper_transcribe_opts one = o;
            one.batch_size = 1;
            assert_int_equal(choir_whisper_transcribe_batch(g_model, g_tok, &in[i], 1, &one, &alone, &err), 0);
            check_words_equal(&together[i], &alone);
            for (int k = 0; k < alone.n_segments; k++) with_words += alone.segments[k].n_words > 0;
            choir_whisper_transcript_clear(&alone);
            choir_whisper_transcript_clear(&together[i]);
        }
        assert_true(with_words >= 3);
    }
    /* word timestamps need timestamps */
    o.params.timestamps = false;
    assert_int_equal(choir_whisper_transcribe(g_model, g_tok, g_pcm, g_n, &o, &t, &err), CHOIR_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_one_by_one),
        cmocka_unit_test(test_many_inputs),
        cmocka_unit_test(test_prefetched_mels),
        cmocka_unit_test(test_sequential),
        cmocka_unit_test(test_times_inside_the_audio),
        cmocka_unit_test(test_cancel_one_input),
        cmocka_unit_test(test_word_timestamps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
