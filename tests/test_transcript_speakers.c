/* Speakers in transcription responses: a segment that carries a speaker id
 * (VibeVoice-ASR) gets "speaker" in verbose_json and a label in srt ("[Speaker
 * N] ") and vtt (a <v Speaker N> voice span); segments without one are
 * written as before. */
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "server/server_internal.h"
#include "testutil.h"

static void test_speakers(void **state) {
    (void)state;
    srv_segment segs[2] = {
        {.start_s = 0.0, .end_s = 1.5, .text = (char *)"Hello there.", .has_speaker = 1, .speaker = 0},
        {.start_s = 1.5, .end_s = 3.25, .text = (char *)"Hi.", .has_speaker = 0},
    };
    srv_job j;
    memset(&j, 0, sizeof j);
    j.text = (char *)"Hello there. Hi.";
    j.segments = segs;
    j.n_segments = 2;
    char *srt = srv_format_transcript(&j, "srt", 0, 3.25);
    assert_non_null(srt);
    assert_string_equal(srt, "1\n00:00:00,000 --> 00:00:01,500\n[Speaker 0] Hello there.\n\n"
                             "2\n00:00:01,500 --> 00:00:03,250\nHi.\n\n");
    char *vtt = srv_format_transcript(&j, "vtt", 0, 3.25);
    assert_non_null(vtt);
    assert_non_null(strstr(vtt, "00:00:00.000 --> 00:00:01.500\n<v Speaker 0>Hello there.\n"));
    assert_non_null(strstr(vtt, "00:00:01.500 --> 00:00:03.250\nHi.\n"));
    char *js = srv_format_transcript(&j, "verbose_json", 0, 3.25);
    assert_non_null(js);
    assert_non_null(strstr(js, "\"text\":\"Hello there.\",\"speaker\":0,"));
    assert_int_equal(strstr(strstr(js, "\"Hi.\""), "speaker") == NULL, 1);
    char *txt = srv_format_transcript(&j, "text", 0, 3.25);
    assert_string_equal(txt, "Hello there. Hi.\n");
    choir_free(srt);
    choir_free(vtt);
    choir_free(js);
    choir_free(txt);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_speakers)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
