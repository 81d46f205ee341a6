/* Long-audio chunker: identity model gives the input back exactly, per-chunk
 * gains cross over smoothly and monotonically, memory stays flat over an
 * hour of audio, and failures stop the run; a model's chunking limits
 * (choir_chunk_check) at and just past each bound, with the message. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/chunker.h"
#include "testutil.h"

static int identity(void *user, const float *in, int64_t frames, float *out, choir_err *err) {
    (void)err;
    int channels = *(int *)user;
    memcpy(out, in, (size_t)(frames * channels) * sizeof(float));
    return 0;
}

static void test_identity_exact(void **state) {
    (void)state;
    const int rate = 1000, channels = 2;
    choir_chunker_params p = {rate, channels, channels, 1.0, 0.25}; /* 1000-frame chunks, 250 overlap */
    int64_t lengths[] = {1, 249, 999, 1000, 1001, 1750, 1751, 2500, 7777};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        int64_t n = lengths[li];
        float *x = malloc((size_t)(n * channels) * sizeof(float)), *y = malloc((size_t)(n * channels) * sizeof(float));
        tu_fill_uniform(x, (size_t)(n * channels), 42 + li, -1.0f, 1.0f);
        memset(y, 0, (size_t)(n * channels) * sizeof(float));
        int ch = channels;
        choir_err err;
        assert_int_equal(choir_chunker_run(&p, x, n, y, identity, &ch, &err), 0);
        assert_memory_equal(y, x, (size_t)(n * channels) * sizeof(float));
        free(x);
        free(y);
    }
}

/* Chunk k multiplies by k + 1: a constant 1 input shows the crossfade. */
typedef struct gain_ctx {
    int chunk;
} gain_ctx;

static int gain_model(void *user, const float *in, int64_t frames, float *out, choir_err *err) {
    (void)err;
    gain_ctx *g = user;
    g->chunk++;
    for (int64_t i = 0; i < frames; i++) out[i] = in[i] * (float)g->chunk;
    return 0;
}

typedef struct collect {
    float *out;
    int64_t next;
    int calls;
} collect;

static int collect_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    (void)err;
    collect *c = user;
    assert_int_equal(offset, c->next); /* regions arrive in order, without gaps */
    memcpy(c->out + offset, out, (size_t)frames * sizeof(float));
    c->next += frames;
    c->calls++;
    return 0;
}

typedef struct both {
    gain_ctx g;
    collect c;
} both;

static int both_process(void *user, const float *in, int64_t frames, float *out, choir_err *err) {
    return gain_model(&((both *)user)->g, in, frames, out, err);
}

static int both_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    return collect_emit(&((both *)user)->c, out, frames, offset, err);
}

static void test_gain_crossfade(void **state) {
    (void)state;
    choir_chunker_params p = {100, 1, 1, 4.0, 1.0}; /* 400-frame chunks, 100 overlap, step 300 */
    const int64_t n = 1250, overlap = 100, step = 300;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = 1.0f;
    both b = {{0}, {calloc((size_t)n, sizeof(float)), 0, 0}};
    choir_err err;
    choir_chunker *c = choir_chunker_create(&p, both_process, both_emit, &b, &err);
    assert_non_null(c);
    /* Pushed in odd pieces; each chunk's final region is emitted as soon as it is run. */
    for (int64_t at = 0; at < n; at += 37)
        assert_int_equal(choir_chunker_push(c, x + at, at + 37 <= n ? 37 : n - at, &err), 0);
    assert_int_equal(b.c.next, 3 * step); /* chunks 0..2 ran; their overlaps with the next are pending */
    assert_int_equal(choir_chunker_finish(c, &err), 0);
    choir_chunker_free(c);
    assert_int_equal(b.c.next, n);
    assert_int_equal(b.g.chunk, 4); /* starts 0, 300, 600, 900; the last holds 350 frames */
    const float *y = b.c.out;
    for (int k = 0; k < 4; k++) {
        int64_t start = k * step;
        /* Outside overlaps: exactly the chunk's gain. */
        for (int64_t i = start + (k ? overlap : 0); i < start + (k < 3 ? step : n - start); i++)
            assert_true(y[i] == (float)(k + 1));
        if (k == 0) continue;
        /* Inside: rises from gain k to k + 1, monotonically, the steepest
         * step that of a half cosine over `overlap` frames. */
        double max_step = M_PI / (2.0 * overlap) * 1.0001;
        assert_true(y[start] > (float)k && y[start] < (float)k + 0.001f);
        assert_true(y[start + overlap - 1] < (float)(k + 1) && y[start + overlap - 1] > (float)(k + 1) - 0.001f);
        for (int64_t i = start; i < start + overlap; i++) {
            double d = (double)y[i + 1] - y[i];
            assert_true(d > 0 && d <= max_step);
        }
        /* Symmetric about the overlap's middle: fade-out is fade-in's complement. */
        for (int64_t i = 0; i < overlap; i++)
            assert_true(fabs((y[start + i] - k) + (y[start + overlap - 1 - i] - k) - 1.0) < 1e-6);
    }
    free(b.c.out);
    free(x);
}

typedef struct sum_ctx {
    double sum;
    int64_t frames;
} sum_ctx;

static int sum_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    (void)err;
    (void)offset;
    sum_ctx *s = user;
    for (int64_t i = 0; i < frames; i++) s->sum += out[i];
    s->frames += frames;
    return 0;
}

static int one_channel = 1;

static int identity_mono(void *user, const float *in, int64_t frames, float *out, choir_err *err) {
    (void)user;
    return identity(&one_channel, in, frames, out, err);
}

/* An hour at 16 kHz (230 MB as floats) goes through with the chunker's own
 * few hundred kB, pushed a second at a time. */
static void test_memory_flat_for_an_hour(void **state) {
    (void)state;
    const int rate = 16000;
    choir_chunker_params p = {rate, 1, 1, 10.0, 1.0};
    sum_ctx s = {0, 0};
    choir_err err;
    float *second = choir_alloc(CHOIR_MEM_IO, (size_t)rate * sizeof(float));
    for (int i = 0; i < rate; i++) second[i] = (float)(i % 7) * 0.125f;
    int64_t base = choir_mem_current(CHOIR_MEM_COUNT);
    choir_mem_reset_peaks();
    choir_chunker *c = choir_chunker_create(&p, identity_mono, sum_emit, &s, &err);
    assert_non_null(c);
    for (int sec = 0; sec < 3600; sec++) assert_int_equal(choir_chunker_push(c, second, rate, &err), 0);
    assert_int_equal(choir_chunker_finish(c, &err), 0);
    int64_t peak = choir_mem_peak(CHOIR_MEM_COUNT) - base;
    choir_chunker_free(c);
    assert_int_equal(s.frames, (int64_t)3600 * rate);
    double per_second = 0;
    for (int i = 0; i < rate; i++) per_second += second[i];
    assert_true(fabs(s.sum - per_second * 3600) < 1e-6 * per_second * 3600);
    print_message("1 h at 16 kHz: chunker peak %lld bytes (estimate %lld)\n", (long long)peak,
                  (long long)choir_chunker_memory_bytes(&p));
    assert_true(peak <= choir_chunker_memory_bytes(&p) + 4096);
    assert_true(peak < 3 * 10 * rate * (int64_t)sizeof(float)); /* an hour would be 230 MB */
    choir_free(second);
}

static int failing_model(void *user, const float *in, int64_t frames, float *out, choir_err *err) {
    (void)in;
    (void)frames;
    (void)out;
    int *calls = user;
    return ++*calls == 2 ? choir_err_set(err, CHOIR_EBUSY, "model busy") : 0;
}

static int null_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    (void)user;
    (void)out;
    (void)frames;
    (void)offset;
    (void)err;
    return 0;
}

static void test_failures(void **state) {
    (void)state;
    choir_err err;
    choir_chunker_params bad = {100, 1, 1, 1.0, 1.0};
    assert_null(choir_chunker_create(&bad, identity_mono, null_emit, NULL, &err));
    assert_int_equal(err.code, CHOIR_EINVAL);
    bad.overlap_seconds = -1;
    assert_null(choir_chunker_create(&bad, identity_mono, null_emit, NULL, &err));
    bad.overlap_seconds = 0.1;
    assert_null(choir_chunker_create(&bad, NULL, null_emit, NULL, &err));
    choir_chunker_free(NULL);

    int calls = 0;
    choir_chunker_params p = {100, 1, 1, 1.0, 0.1};
    choir_chunker *c = choir_chunker_create(&p, failing_model, null_emit, &calls, &err);
    float x[500] = {0};
    assert_int_equal(choir_chunker_push(c, x, 500, &err), CHOIR_EBUSY);
    assert_string_equal(err.msg, "model busy");
    assert_int_equal(choir_chunker_push(c, x, 1, &err), CHOIR_EINVAL);
    choir_chunker_free(c);

    /* Without overlap the chunks are simply concatenated. */
    choir_chunker_params hard = {100, 1, 1, 1.0, 0.0};
    float in[250], out[250];
    for (int i = 0; i < 250; i++) in[i] = (float)i;
    assert_int_equal(choir_chunker_run(&hard, in, 250, out, identity_mono, NULL, &err), 0);
    assert_memory_equal(out, in, sizeof in);

    choir_alloc_fail_after(2);
    assert_null(choir_chunker_create(&p, identity_mono, null_emit, NULL, &err));
    choir_alloc_fail_after(0);
    assert_int_equal(err.code, CHOIR_ENOMEM);
}

static void test_chunk_limits(void **state) {
    (void)state;
    const choir_chunk_limits half = {"half", 0.2, 400, 0.5}, below = {"below", 0, 60, 1};
    const struct {
        const choir_chunk_limits *l;
        double chunk, overlap;
        int ok;
        const char *says; /* part of the message when refused */
    } cases[] = {
        {&half, 0.2, 0.1, 1, NULL},
        {&half, 400, 200, 1, NULL},          /* both bounds inclusive, overlap at half */
        {&half, 0.1999, 0, 0, "half: chunk_seconds must be in [0.2, 400] s, got 0.1999"},
        {&half, 400.01, 0, 0, "got 400.01"},
        {&half, 10, 5.001, 0, "half: overlap_seconds must be in [0, 5] s (0.5 x chunk_seconds 10), got 5.001"},
        {&half, 10, -0.001, 0, "overlap_seconds"},
        {&half, NAN, 0, 0, "chunk_seconds"},
        {&half, INFINITY, 0, 0, "chunk_seconds"},
        {&half, 10, NAN, 0, "overlap_seconds"},
        {&below, 1e-9, 0, 1, NULL},          /* above 0 is all a 0 minimum asks */
        {&below, 0, 0, 0, "below: chunk_seconds must be in (0, 60] s, got 0"},
        {&below, 60, 59.99, 1, NULL},
        {&below, 2, 2, 0, "below: overlap_seconds must be at least 0 and shorter than chunk_seconds (2 s), got 2"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        choir_err err = {0};
        int rc = choir_chunk_check(cases[k].l, cases[k].chunk, cases[k].overlap, &err);
        if (rc != (cases[k].ok ? 0 : CHOIR_EINVAL))
            fail_msg("case %zu: rc %d (%s)", k, rc, err.msg);
        if (!cases[k].ok && !strstr(err.msg, cases[k].says))
            fail_msg("case %zu: '%s' does not say '%s'", k, err.msg, cases[k].says);
    }
    choir_err err = {0};
    assert_int_equal(choir_chunk_check(NULL, 1, 0, &err), CHOIR_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_exact),          cmocka_unit_test(test_gain_crossfade),
        cmocka_unit_test(test_memory_flat_for_an_hour), cmocka_unit_test(test_failures),
        cmocka_unit_test(test_chunk_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
