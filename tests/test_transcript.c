/* The transcript formats (choir/transcript.h) the server, `choir stt` and the
 * job worker share: speakers in srt / vtt / verbose_json, OpenAI's language
 * names, Whisper's decoding figures in verbose_json, and times kept in order
 * and inside the audio whatever the model gave. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/transcript.h"
#include "testutil.h"

static char *write(const choir_transcript *t, choir_transcript_format f) {
    choir_err err = {0};
    char *s = choir_transcript_write(t, f, NULL, NULL, &err);
    if (!s) fail_msg("%s", err.msg);
    return s;
}

static void test_speakers(void **state) {
    (void)state;
    choir_segment segs[2] = {
        {.start_s = 0.0, .end_s = 1.5, .text = "Hello there.", .has_speaker = 1, .speaker = 0},
        {.start_s = 1.5, .end_s = 3.25, .text = "Hi.", .has_speaker = 0},
    };
    choir_transcript t = {.text = "Hello there. Hi.", .duration_s = 3.25, .segments = segs, .n_segments = 2};
    char *srt = write(&t, CHOIR_TRANSCRIPT_SRT);
    assert_string_equal(srt, "1\n00:00:00,000 --> 00:00:01,500\n[Speaker 0] Hello there.\n\n"
                             "2\n00:00:01,500 --> 00:00:03,250\nHi.\n\n");
    char *vtt = write(&t, CHOIR_TRANSCRIPT_VTT);
    assert_non_null(strstr(vtt, "00:00:00.000 --> 00:00:01.500\n<v Speaker 0>Hello there.\n"));
    assert_non_null(strstr(vtt, "00:00:01.500 --> 00:00:03.250\nHi.\n"));
    char *js = write(&t, CHOIR_TRANSCRIPT_VERBOSE_JSON);
    assert_non_null(strstr(js, "\"text\":\"Hello there.\",\"speaker\":0,"));
    assert_int_equal(strstr(strstr(js, "\"Hi.\""), "speaker") == NULL, 1);
    char *txt = write(&t, CHOIR_TRANSCRIPT_TEXT);
    assert_string_equal(txt, "Hello there. Hi.\n");
    choir_free(srt);
    choir_free(vtt);
    choir_free(js);
    choir_free(txt);
}

/* verbose_json as OpenAI's: language by name, the model's own seek, tokens,
 * temperature, avg_logprob, compression_ratio and no_speech_prob. */
static void test_verbose_json(void **state) {
    (void)state;
    int32_t toks[3] = {50364, 2221, 50414};
    choir_segment seg = {.start_s = 0.0, .end_s = 1.0, .text = " Ask not.", .has_decoding = 1, .seek = 3000,
                         .tokens = toks, .n_tokens = 3, .temperature = 0.4f, .avg_logprob = -0.25f,
                         .compression_ratio = 1.5f, .no_speech_prob = 0.125f};
    choir_transcript t = {.text = " Ask not.", .language = "en", .duration_s = 31.0, .segments = &seg,
                          .n_segments = 1};
    char *js = write(&t, CHOIR_TRANSCRIPT_VERBOSE_JSON);
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    assert_string_equal(cJSON_GetObjectItem(root, "language")->valuestring, "english");
    assert_string_equal(cJSON_GetObjectItem(root, "task")->valuestring, "transcribe");
    assert_string_equal(cJSON_GetObjectItem(root, "text")->valuestring, "Ask not.");
    cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "segments"), 0);
    assert_int_equal((int)cJSON_GetObjectItem(s0, "seek")->valuedouble, 3000);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(s0, "tokens")), 3);
    assert_int_equal((int)cJSON_GetArrayItem(cJSON_GetObjectItem(s0, "tokens"), 1)->valuedouble, 2221);
    assert_true(cJSON_GetObjectItem(s0, "temperature")->valuedouble > 0.39);
    assert_true(cJSON_GetObjectItem(s0, "avg_logprob")->valuedouble == -0.25);
    assert_true(cJSON_GetObjectItem(s0, "compression_ratio")->valuedouble == 1.5);
    assert_true(cJSON_GetObjectItem(s0, "no_speech_prob")->valuedouble == 0.125);
    cJSON_Delete(root);
    choir_free(js);
    assert_string_equal(choir_language_name("yue"), "cantonese");
    assert_string_equal(choir_language_name("ht"), "haitian creole");
    assert_null(choir_language_name("xx"));
    t.language = "xx"; /* a code without a name stays as it is */
    js = write(&t, CHOIR_TRANSCRIPT_VERBOSE_JSON);
    assert_non_null(strstr(js, "\"language\":\"xx\""));
    choir_free(js);
}

/* Times out of order or past the audio (a model's own) come out in order and
 * inside it, in every format that carries them. */
static void test_times_clamped(void **state) {
    (void)state;
    choir_segment segs[3] = {
        {.start_s = 0.5, .end_s = 4.0, .text = "a"},
        {.start_s = 29.72, .end_s = 11.0, .text = "b"}, /* what the server once sent */
        {.start_s = 2.0, .end_s = 1.0, .text = "c"},
    };
    choir_transcript t = {.text = "a b c", .duration_s = 11.0, .segments = segs, .n_segments = 3};
    char *srt = write(&t, CHOIR_TRANSCRIPT_SRT);
    assert_string_equal(srt, "1\n00:00:00,500 --> 00:00:04,000\na\n\n"
                             "2\n00:00:11,000 --> 00:00:11,000\nb\n\n"
                             "3\n00:00:11,000 --> 00:00:11,000\nc\n\n");
    char *js = write(&t, CHOIR_TRANSCRIPT_VERBOSE_JSON);
    cJSON *root = cJSON_Parse(js);
    double prev = 0;
    cJSON *seg;
    cJSON_ArrayForEach(seg, cJSON_GetObjectItem(root, "segments")) {
        double a = cJSON_GetObjectItem(seg, "start")->valuedouble, b = cJSON_GetObjectItem(seg, "end")->valuedouble;
        assert_true(a >= prev && b >= a && b <= 11.0);
        prev = b;
    }
    cJSON_Delete(root);
    choir_free(js);
    choir_free(srt);
    /* without segments, one cue over the whole text */
    t.n_segments = 0;
    srt = write(&t, CHOIR_TRANSCRIPT_SRT);
    assert_string_equal(srt, "1\n00:00:00,000 --> 00:00:11,000\na b c\n\n");
    choir_free(srt);
}

static void test_formats(void **state) {
    (void)state;
    choir_transcript_format f;
    assert_int_equal(choir_transcript_format_parse("txt", &f), 0);
    assert_int_equal(f, CHOIR_TRANSCRIPT_TEXT);
    assert_int_equal(choir_transcript_format_parse("verbose_json", &f), 0);
    assert_int_equal(f, CHOIR_TRANSCRIPT_VERBOSE_JSON);
    assert_int_equal(choir_transcript_format_parse("xml", &f), CHOIR_EINVAL);
    assert_string_equal(choir_transcript_format_mime(CHOIR_TRANSCRIPT_VTT), "text/vtt; charset=utf-8");
    choir_transcript t = {.text = "  hi \n"};
    char *js = write(&t, CHOIR_TRANSCRIPT_JSON);
    assert_string_equal(js, "{\"text\":\"hi\"}");
    choir_free(js);
    /* every allocation failure is a clean NULL */
    choir_segment seg = {.start_s = 0, .end_s = 1, .text = "x"};
    t.segments = &seg;
    t.n_segments = 1;
    for (int f2 = 0; f2 <= CHOIR_TRANSCRIPT_VERBOSE_JSON; f2++)
        for (int64_t n = 1; n < 8; n++) {
            choir_err err = {0};
            choir_alloc_fail_after(n);
            char *s = choir_transcript_write(&t, (choir_transcript_format)f2, NULL, NULL, &err);
            choir_alloc_fail_after(0);
            if (s) choir_free(s);
            else assert_int_equal(err.code, CHOIR_ENOMEM);
        }
}

/* Word timestamps: verbose_json's top-level "words" (OpenAI's shape, the
 * words' spaces trimmed, times rounded to the millisecond, in order and
 * inside the audio), "segments" left out for word granularity alone, and
 * srt / vtt from cues the caller laid out. */
static void test_words(void **state) {
    (void)state;
    choir_word w0[2] = {{.start_s = 0.0, .end_s = 0.42, .text = " Hello,", .probability = 0.9f},
                        {.start_s = 0.42, .end_s = 0.98, .text = " world.", .probability = 0.8f}};
    choir_word w1[2] = {{.start_s = 0.9, .end_s = 1.3, .text = " Bye", .probability = 0.7f}, /* before the last end */
                        {.start_s = 1.3, .end_s = 2.7, .text = "!", .probability = 0.6f}}; /* past the audio */
    choir_segment segs[2] = {{.start_s = 0.0, .end_s = 0.98, .text = " Hello, world.", .words = w0, .n_words = 2},
                             {.start_s = 0.98, .end_s = 2.5, .text = " Bye!", .words = w1, .n_words = 2}};
    choir_transcript t = {.text = " Hello, world. Bye!", .language = "en", .duration_s = 2.5, .segments = segs,
                          .n_segments = 2, .words = 1};
    char *js = write(&t, CHOIR_TRANSCRIPT_VERBOSE_JSON);
    const char *words = strstr(js, ",\"words\":");
    assert_non_null(words);
    assert_string_equal(words, ",\"words\":[{\"word\":\"Hello,\",\"start\":0,\"end\":0.42},"
                               "{\"word\":\"world.\",\"start\":0.42,\"end\":0.98},"
                               "{\"word\":\"Bye\",\"start\":0.98,\"end\":1.3},"
                               "{\"word\":\"!\",\"start\":1.3,\"end\":2.5}]}");
    assert_non_null(strstr(js, "\"segments\":[{\"id\":0,"));
    choir_free(js);
    t.no_segments = 1;
    js = write(&t, CHOIR_TRANSCRIPT_VERBOSE_JSON);
    assert_null(strstr(js, "segments"));
    assert_true(strncmp(js, "{\"task\":\"transcribe\",\"language\":\"english\",\"duration\":2.5,"
                            "\"text\":\"Hello, world. Bye!\",\"words\":[{\"word\":\"Hello,\"", 104) == 0);
    choir_free(js);
    /* without words asked, none are written */
    t.words = 0;
    t.no_segments = 0;
    js = write(&t, CHOIR_TRANSCRIPT_VERBOSE_JSON);
    assert_null(strstr(js, "\"words\""));
    choir_free(js);
    /* cues laid out by the caller replace the segments in srt and vtt */
    choir_transcript_cue cues[2] = {{0.0, 0.98, "Hello,\nworld."}, {0.5, 3.0, "<u>Bye!</u>"}};
    t.cues = cues;
    t.n_cues = 2;
    char *srt = write(&t, CHOIR_TRANSCRIPT_SRT);
    assert_string_equal(srt, "1\n00:00:00,000 --> 00:00:00,980\nHello,\nworld.\n\n"
                             "2\n00:00:00,980 --> 00:00:02,500\n<u>Bye!</u>\n\n");
    char *vtt = write(&t, CHOIR_TRANSCRIPT_VTT);
    assert_string_equal(vtt, "WEBVTT\n\n00:00:00.000 --> 00:00:00.980\nHello,\nworld.\n\n"
                             "00:00:00.980 --> 00:00:02.500\n<u>Bye!</u>\n\n");
    choir_free(srt);
    choir_free(vtt);
    /* every allocation failure is a clean NULL */
    t.words = 1;
    t.no_segments = 1;
    int failed = 0;
    for (int64_t n = 1; n < 40; n++) {
        choir_err err = {0};
        choir_alloc_fail_after(n);
        char *s = choir_transcript_write(&t, CHOIR_TRANSCRIPT_VERBOSE_JSON, NULL, NULL, &err);
        choir_alloc_fail_after(0);
        if (s) choir_free(s);
        else {
            assert_int_equal(err.code, CHOIR_ENOMEM);
            failed++;
        }
    }
    assert_true(failed >= 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_speakers), cmocka_unit_test(test_verbose_json),
                                       cmocka_unit_test(test_times_clamped), cmocka_unit_test(test_formats),
                                       cmocka_unit_test(test_words)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
