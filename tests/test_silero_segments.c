/* Segmentation rules on made-up probability sequences, with the expected
 * segments worked out by hand from the rules of Silero's get_speech_timestamps
 * (chunk i starts at sample 512 i; at the defaults min speech is 4000 samples,
 * min silence 1600, padding 480, a pause must exceed 1568 to be a split point). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/silero.h"
#include "testutil.h"

#define CH CHOIR_SILERO_CHUNK

/* probs[lo..hi] = v */
static void fill(float *p, int lo, int hi, float v) {
    for (int i = lo; i <= hi; i++) p[i] = v;
}

static void expect(const float *probs, int n_probs, int64_t n_samples, const choir_vad_params *params,
                   const int64_t *want, int n_want) {
    choir_vad_segment *segs = NULL;
    int64_t n = -1;
    choir_err err = {0};
    assert_int_equal(choir_vad_segments(probs, n_probs, n_samples, params, &segs, &n, &err), 0);
    if (n != n_want) {
        for (int64_t k = 0; k < n; k++) printf("  got [%lld, %lld]\n", (long long)segs[k].start, (long long)segs[k].end);
    }
    assert_int_equal(n, n_want);
    for (int k = 0; k < n_want; k++) {
        assert_int_equal(segs[k].start, want[2 * k]);
        assert_int_equal(segs[k].end, want[2 * k + 1]);
    }
    choir_free(segs);
}

static void test_single_segment_and_min_speech(void **state) {
    (void)state;
    float p[100] = {0};
    expect(p, 100, 100 * CH, NULL, NULL, 0);
    /* Speech in chunks 10..29: starts at 5120; the pause from 15360 has lasted
     * 1600 samples by chunk 34, so the segment is [5120, 15360], padded. */
    fill(p, 10, 29, 0.9f);
    const int64_t one[] = {4640, 15840};
    expect(p, 100, 100 * CH, NULL, one, 1);
    /* 7 chunks (3584 samples) are too short; 8 chunks (4096) are not. */
    memset(p, 0, sizeof p);
    fill(p, 10, 16, 0.9f);
    expect(p, 100, 100 * CH, NULL, NULL, 0);
    fill(p, 17, 17, 0.9f);
    const int64_t eight[] = {4640, 9216 + 480};
    expect(p, 100, 100 * CH, NULL, eight, 1);
}

static void test_pauses(void **state) {
    (void)state;
    float p[100] = {0};
    /* A 3-chunk pause (1536 samples) does not end speech. */
    fill(p, 10, 29, 0.9f);
    fill(p, 33, 59, 0.9f);
    const int64_t merged[] = {4640, 30720 + 480};
    expect(p, 100, 100 * CH, NULL, merged, 1);
    /* Probabilities between the two thresholds keep speech going. */
    memset(p, 0, sizeof p);
    fill(p, 10, 19, 0.9f);
    fill(p, 20, 49, 0.4f);
    const int64_t held[] = {4640, 25600 + 480};
    expect(p, 100, 100 * CH, NULL, held, 1);
    /* ... unless the end threshold is raised above them. */
    choir_vad_params params = choir_vad_default_params();
    params.neg_threshold = 0.45f;
    const int64_t cut[] = {4640, 10240 + 480};
    expect(p, 100, 100 * CH, &params, cut, 1);
    /* A 6-chunk pause splits; with 100 ms padding the 3072-sample gap is
     * shared half and half. */
    memset(p, 0, sizeof p);
    fill(p, 10, 29, 0.9f);
    fill(p, 36, 59, 0.9f);
    const int64_t two[] = {4640, 15840, 17952, 31200};
    expect(p, 100, 100 * CH, NULL, two, 2);
    params = choir_vad_default_params();
    params.speech_pad_ms = 100;
    const int64_t shared[] = {3520, 16896, 16896, 32320};
    expect(p, 100, 100 * CH, &params, shared, 2);
}

static void test_speech_to_end_of_file(void **state) {
    (void)state;
    float p[101] = {0};
    fill(p, 90, 100, 0.9f);
    /* The last chunk is partial (100 samples); the segment ends at the file's end. */
    const int64_t tail[] = {46080 - 480, 100 * CH + 100};
    expect(p, 101, 100 * CH + 100, NULL, tail, 1);
    /* Speech from the very first chunk cannot be padded before sample 0. */
    memset(p, 0, sizeof p);
    fill(p, 0, 20, 0.9f);
    const int64_t head[] = {0, 21 * CH + 480};
    expect(p, 101, 100 * CH + 100, NULL, head, 1);
}

/* With a 1 s limit (14528 samples once a chunk and two paddings are taken
 * off): speech from chunk 2 with a 4-chunk pause at 10..13 (a split point)
 * and a 3-chunk pause at 20..22 (too short to be one). At chunk 31 the segment
 * is split at the first pause and restarts where speech resumed (7168); at
 * chunk 43 there is no split point left, so it is cut there; speech restarts
 * at chunk 44 and ends normally at chunk 60. */
static void test_max_speech_split(void **state) {
    (void)state;
    float p[100] = {0};
    fill(p, 2, 59, 0.9f);
    fill(p, 10, 13, 0.0f);
    fill(p, 20, 22, 0.0f);
    choir_vad_params params = choir_vad_default_params();
    params.max_speech_s = 1.0f;
    const int64_t want[] = {544, 5600, 6688, 22272, 22272, 31200};
    expect(p, 100, 100 * CH, &params, want, 3);
    /* Without a limit it is one segment. */
    const int64_t whole[] = {544, 30720 + 480};
    expect(p, 100, 100 * CH, NULL, whole, 1);
}

static void test_bad_arguments(void **state) {
    (void)state;
    float p[4] = {0};
    choir_vad_segment *segs = NULL;
    int64_t n = 0;
    choir_err err = {0};
    choir_vad_params params = choir_vad_default_params();
    params.threshold = 0.0f;
    assert_int_equal(choir_vad_segments(p, 4, 4 * CH, &params, &segs, &n, &err), CHOIR_EINVAL);
    params = choir_vad_default_params();
    params.min_silence_ms = -5;
    assert_int_equal(choir_vad_segments(p, 4, 4 * CH, &params, &segs, &n, &err), CHOIR_EINVAL);
    params = choir_vad_default_params();
    params.neg_threshold = 0.9f;
    assert_int_equal(choir_vad_segments(p, 4, 4 * CH, &params, &segs, &n, &err), CHOIR_EINVAL);
    /* More probabilities than the samples can have. */
    assert_int_equal(choir_vad_segments(p, 4, CH, NULL, &segs, &n, &err), CHOIR_EINVAL);
    assert_int_equal(choir_vad_segments(NULL, 4, 4 * CH, NULL, &segs, &n, &err), CHOIR_EINVAL);
    assert_int_equal(choir_vad_segments(NULL, 0, 0, NULL, &segs, &n, &err), 0);
    assert_int_equal(n, 0);
    choir_vad_params d = choir_vad_default_params();
    assert_true(d.threshold == 0.5f && d.min_speech_ms == 250 && d.min_silence_ms == 100 && d.speech_pad_ms == 30);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_segment_and_min_speech),
        cmocka_unit_test(test_pauses),
        cmocka_unit_test(test_speech_to_end_of_file),
        cmocka_unit_test(test_max_speech_split),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
