/* Word timestamps without the network (choir/whisper_words.h).
 *
 * tests/data/whisper_words_cases.json holds inputs and what openai/whisper's
 * own code made of them (tools/whisper_words_reference.py cases, run on a
 * checkout of openai/whisper): word splitting of token lists (a character
 * across tokens, bytes that stay invalid, whitespace and "()" counting as
 * punctuation, Chinese split by characters), DTW paths (including the
 * tie rule that sends any tie to the horizontal move), punctuation merging,
 * and add_word_timestamps over a synthetic alignment with two segments and
 * with an offset window after a pause, and subtitle cues laid out from words
 * (line width, line count, words per line, highlighting). The alignment matrix and the head
 * tables are checked against values worked out by hand. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/tokenizer.h"
#include "choir/whisper_words.h"
#include "testutil.h"

static choir_tokenizer *g_tok;
static cJSON *g_cases;
static choir_whisper_specials g_sp;

static int setup(void **state) {
    (void)state;
    choir_err err;
    g_tok = choir_tokenizer_load(tu_fixture("real/tokenizer/multilingual.tiktoken"), &err);
    g_cases = choir_json_load(CHOIR_SOURCE_DIR "/tests/data/whisper_words_cases.json", &err);
    choir_whisper_specials_from_vocab(51865, &g_sp);
    return g_tok && g_cases ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    choir_tokenizer_free(g_tok);
    cJSON_Delete(g_cases);
    return 0;
}

static int ints(const cJSON *a, int32_t *out, int max) {
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        assert_true(n < max);
        out[n++] = (int32_t)v->valueint;
    }
    return n;
}

static void test_split(void **state) {
    (void)state;
    assert_int_equal(g_sp.eot, (int)choir_json_int(g_cases, "eot", 0));
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_cases, "split")) {
        int32_t tokens[64];
        int n = ints(cJSON_GetObjectItem(c, "tokens"), tokens, 64);
        bool by_unicode = choir_whisper_lang_splits_by_unicode(choir_json_str(c, "language", ""));
        choir_whisper_word *w;
        int nw;
        choir_err err;
        assert_int_equal(choir_whisper_split_words(g_tok, &g_sp, tokens, n, by_unicode, &w, &nw, &err), 0);
        const cJSON *words = cJSON_GetObjectItem(c, "words"), *wt = cJSON_GetObjectItem(c, "word_tokens");
        assert_int_equal(nw, cJSON_GetArraySize(words));
        for (int i = 0; i < nw; i++) {
            int32_t exp[64];
            int ne = ints(cJSON_GetArrayItem(wt, i), exp, 64);
            assert_int_equal(w[i].n_tokens, ne);
            assert_memory_equal(w[i].tokens, exp, (size_t)ne * sizeof *exp);
            if (exp[0] < g_sp.eot) { /* specials are decoded by name there */
                if (strcmp(w[i].text, cJSON_GetArrayItem(words, i)->valuestring) != 0)
                    fail_msg("split case %d word %d: '%s', expected '%s'", k, i, w[i].text,
                             cJSON_GetArrayItem(words, i)->valuestring);
            }
        }
        choir_whisper_words_free(w, nw);
        k++;
    }
    assert_true(k >= 8);
}

static void test_dtw(void **state) {
    (void)state;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_cases, "dtw")) {
        const cJSON *x = cJSON_GetObjectItem(c, "x");
        int n = cJSON_GetArraySize(x), m = cJSON_GetArraySize(cJSON_GetArrayItem(x, 0));
        float cost[64];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++)
                cost[i * m + j] = (float)cJSON_GetArrayItem(cJSON_GetArrayItem(x, i), j)->valuedouble;
        int32_t rows[64], cols[64], er[64], ec[64];
        int len = choir_whisper_dtw(cost, n, m, rows, cols, NULL);
        int ne = ints(cJSON_GetObjectItem(c, "rows"), er, 64);
        ints(cJSON_GetObjectItem(c, "cols"), ec, 64);
        assert_int_equal(len, ne);
        assert_memory_equal(rows, er, (size_t)ne * sizeof *er);
        assert_memory_equal(cols, ec, (size_t)ne * sizeof *ec);
    }
    /* a NaN sends every move to the horizontal one: along the edges, as
     * openai's backtrace goes (with -1 columns on the way up) */
    float nanx[4] = {NAN, 0, 0, 0};
    int32_t rows[4], cols[4];
    assert_int_equal(choir_whisper_dtw(nanx, 2, 2, rows, cols, NULL), 4);
    int32_t er[4] = {0, 1, 1, 1}, ec[4] = {-1, -1, 0, 1};
    assert_memory_equal(rows, er, sizeof er);
    assert_memory_equal(cols, ec, sizeof ec);
    assert_int_equal(choir_whisper_dtw(nanx, 0, 2, rows, cols, NULL), CHOIR_EINVAL);
}

static choir_whisper_word *make_words(const cJSON *texts, int *n) {
    *n = cJSON_GetArraySize(texts);
    choir_whisper_word *w = choir_calloc(CHOIR_MEM_OTHER, (size_t)*n, sizeof *w);
    for (int i = 0; i < *n; i++) {
        w[i].text = choir_strdup(cJSON_GetArrayItem(texts, i)->valuestring);
        w[i].tokens = choir_alloc(CHOIR_MEM_OTHER, sizeof(int32_t));
        w[i].tokens[0] = i;
        w[i].n_tokens = 1;
    }
    return w;
}

static void test_merge(void **state) {
    (void)state;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_cases, "merge")) {
        int n;
        choir_whisper_word *w = make_words(cJSON_GetObjectItem(c, "in"), &n);
        assert_int_equal(choir_whisper_merge_punctuation(w, n, NULL, NULL, NULL), 0);
        const cJSON *out = cJSON_GetObjectItem(c, "out"), *tk = cJSON_GetObjectItem(c, "tokens");
        for (int i = 0; i < n; i++) {
            assert_string_equal(w[i].text, cJSON_GetArrayItem(out, i)->valuestring);
            int32_t exp[16];
            int ne = ints(cJSON_GetArrayItem(tk, i), exp, 16);
            assert_int_equal(w[i].n_tokens, ne);
            assert_memory_equal(w[i].tokens, exp, (size_t)ne * sizeof *exp);
        }
        choir_whisper_words_free(w, n);
    }
}

static void check_close(double got, double want, double tol, const char *what, int a, int b) {
    if (fabs(got - want) > tol) fail_msg("%s [%d][%d]: %.17g, expected %.17g", what, a, b, got, want);
}

/* One add_word_timestamps case; with fail_at > 0 the fail_at-th allocation
 * fails and the call must fail cleanly. */
static int run_add(const cJSON *c, int fail_at) {
    const cJSON *segs_in = cJSON_GetObjectItem(c, "segments_in"), *bounds = cJSON_GetObjectItem(c, "bounds");
    int n_segs = cJSON_GetArraySize(segs_in), f = (int)choir_json_int(c, "frames", 0);
    int n_rows = cJSON_GetArraySize(bounds);
    float ramp = (float)choir_json_num(c, "ramp", 0);
    float *m = choir_calloc(CHOIR_MEM_OTHER, (size_t)n_rows * f, sizeof *m);
    for (int k = 0; k < n_rows; k++) {
        int b0 = cJSON_GetArrayItem(bounds, k)->valueint;
        int b1 = k + 1 < n_rows ? cJSON_GetArrayItem(bounds, k + 1)->valueint : f;
        for (int j = 0; j < f; j++) {
            float v = (j >= b0 && j < b1) ? 1.0f : 0.0f;
            float r = ramp * (float)j;
            m[k * f + j] = v - r / (float)f;
        }
    }
    float probs[64];
    int np = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(c, "probs")) probs[np++] = (float)p->valuedouble;
    choir_whisper_word_segment segs[8];
    int32_t toks[8][64];
    for (int s = 0; s < n_segs; s++) {
        const cJSON *g = cJSON_GetArrayItem(segs_in, s);
        segs[s] = (choir_whisper_word_segment){.start = choir_json_num(g, "start", 0),
                                               .end = choir_json_num(g, "end", 0),
                                               .tokens = toks[s],
                                               .n_tokens = ints(cJSON_GetObjectItem(g, "tokens"), toks[s], 64)};
    }
    double last = choir_json_num(c, "last_speech", 0);
    choir_err err;
    if (fail_at) choir_alloc_fail_after(fail_at);
    int rc = choir_whisper_add_word_timestamps(g_tok, &g_sp, m, f, probs, choir_json_num(c, "time_offset", 0),
                                               &last, segs, n_segs, NULL, &err);
    choir_alloc_fail_after(0);
    choir_free(m);
    if (rc) {
        assert_int_equal(rc, CHOIR_ENOMEM);
        for (int s = 0; s < n_segs; s++) assert_null(segs[s].words);
        return rc;
    }
    const cJSON *segs_out = cJSON_GetObjectItem(c, "segments_out");
    for (int s = 0; s < n_segs; s++) {
        const cJSON *g = cJSON_GetArrayItem(segs_out, s), *words = cJSON_GetObjectItem(g, "words");
        check_close(segs[s].start, choir_json_num(g, "start", -1), 1e-12, "segment start", s, 0);
        check_close(segs[s].end, choir_json_num(g, "end", -1), 1e-12, "segment end", s, 0);
        assert_int_equal(segs[s].n_words, cJSON_GetArraySize(words));
        for (int i = 0; i < segs[s].n_words; i++) {
            const cJSON *w = cJSON_GetArrayItem(words, i);
            assert_string_equal(segs[s].words[i].text, choir_json_str(w, "word", ""));
            check_close(segs[s].words[i].start, choir_json_num(w, "start", -1), 1e-12, "word start", s, i);
            check_close(segs[s].words[i].end, choir_json_num(w, "end", -1), 1e-12, "word end", s, i);
            check_close(segs[s].words[i].probability, choir_json_num(w, "probability", -1), 1e-6, "probability", s,
                        i);
        }
        choir_whisper_words_free(segs[s].words, segs[s].n_words);
    }
    check_close(last, choir_json_num(cJSON_GetArrayItem(segs_out, n_segs - 1), "end", -1), 1e-12, "last speech", 0,
                0);
    return 0;
}

static void test_add_word_timestamps(void **state) {
    (void)state;
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_cases, "add")) {
        assert_int_equal(run_add(c, 0), 0);
        k++;
    }
    assert_int_equal(k, 2);
}

static void test_add_allocation_failures(void **state) {
    (void)state;
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(g_cases, "add"), 0);
    int failed = 0;
    /* allocations in run_add before the call: the matrix (1) */
    for (int i = 1; i < 400; i++) {
        int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
        int rc = run_add(c, i);
        assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
        if (rc == 0) break;
        failed++;
    }
    assert_true(failed > 10);
}

/* openai's format_timestamp for srt: hours always, ',' before the
 * milliseconds, milliseconds rounded half to even as Python's round(). */
static void srt_time(double s, char *out, size_t n) {
    long long ms = (long long)nearbyint(s * 1000.0);
    snprintf(out, n, "%02lld:%02lld:%02lld,%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, ms % 1000);
}

static void test_subtitles(void **state) {
    (void)state;
    const cJSON *segs = cJSON_GetObjectItem(g_cases, "subtitle_segments"), *c;
    int n_segs = cJSON_GetArraySize(segs);
    choir_whisper_word_segment sg[4];
    assert_true(n_segs <= 4);
    for (int s = 0; s < n_segs; s++) {
        const cJSON *g = cJSON_GetArrayItem(segs, s), *words = cJSON_GetObjectItem(g, "words");
        sg[s] = (choir_whisper_word_segment){.start = choir_json_num(g, "start", 0), .end = choir_json_num(g, "end", 0)};
        sg[s].n_words = cJSON_GetArraySize(words);
        sg[s].words = choir_calloc(CHOIR_MEM_OTHER, (size_t)sg[s].n_words, sizeof *sg[s].words);
        for (int i = 0; i < sg[s].n_words; i++) {
            const cJSON *w = cJSON_GetArrayItem(words, i);
            sg[s].words[i].text = choir_strdup(choir_json_str(w, "word", ""));
            sg[s].words[i].start = choir_json_num(w, "start", 0);
            sg[s].words[i].end = choir_json_num(w, "end", 0);
        }
    }
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_cases, "subtitles")) {
        const cJSON *o = cJSON_GetObjectItem(c, "options"), *cues = cJSON_GetObjectItem(c, "cues");
        choir_whisper_subtitle_opts opts = {
            .max_line_width = (int)choir_json_int(o, "max_line_width", 0),
            .max_line_count = (int)choir_json_int(o, "max_line_count", 0),
            .max_words_per_line = (int)choir_json_int(o, "max_words_per_line", 0),
            .highlight_words = choir_json_bool(o, "highlight_words", 0)};
        choir_whisper_cue *cue;
        int n;
        assert_int_equal(choir_whisper_subtitles(sg, n_segs, &opts, &cue, &n, NULL), 0);
        if (n != cJSON_GetArraySize(cues)) fail_msg("subtitle case %d: %d cues, expected %d", k, n, cJSON_GetArraySize(cues));
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(cues, i);
            char a[32], b[32];
            srt_time(cue[i].start, a, sizeof a);
            srt_time(cue[i].end, b, sizeof b);
            assert_string_equal(a, cJSON_GetArrayItem(e, 0)->valuestring);
            assert_string_equal(b, cJSON_GetArrayItem(e, 1)->valuestring);
            if (strcmp(cue[i].text, cJSON_GetArrayItem(e, 2)->valuestring) != 0)
                fail_msg("subtitle case %d cue %d: '%s', expected '%s'", k, i, cue[i].text,
                         cJSON_GetArrayItem(e, 2)->valuestring);
        }
        choir_whisper_cues_free(cue, n);
        /* every allocation failure is reported and leaks nothing */
        for (int f = 1; f < 100; f++) {
            int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
            choir_alloc_fail_after(f);
            int rc = choir_whisper_subtitles(sg, n_segs, &opts, &cue, &n, NULL);
            choir_alloc_fail_after(0);
            if (rc == 0) {
                choir_whisper_cues_free(cue, n);
                break;
            }
            assert_int_equal(rc, CHOIR_ENOMEM);
            assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
        }
        k++;
    }
    assert_int_equal(k, 7);
    for (int s = 0; s < n_segs; s++) {
        for (int i = 0; i < sg[s].n_words; i++) choir_free(sg[s].words[i].text);
        choir_free(sg[s].words);
    }
}

static void test_alignment_matrix(void **state) {
    (void)state;
    /* Two positions: after standardisation each frame is +1 for the position
     * with the larger weight and -1 for the other. Row 0 has the larger
     * weight on frames 0 and 2: [+1 -1 +1 -1 -1 -1]; a width-3 median with
     * reflected edges gives [-1 +1 -1 -1 -1 -1]. Columns past n_frames (99)
     * must not count. */
    enum { F = 6, S = 8 };
    float qk[2][S] = {{2, 0, 2, 0, 0, 0, 99, 99}, {0, 2, 0, 2, 2, 2, -99, 99}};
    float out[2][F];
    assert_int_equal(choir_whisper_alignment_matrix(&qk[0][0], 1, 2, S, F, 1.0f, 3, &out[0][0], NULL), 0);
    float want0[F] = {-1, 1, -1, -1, -1, -1};
    for (int f = 0; f < F; f++) {
        assert_float_equal(out[0][f], want0[f], 1e-6);
        assert_float_equal(out[1][f], -want0[f], 1e-6);
    }
    /* width 1 is no filter; qk_scale 0 makes every weight equal, so the
     * standardised values are 0/0 and NaN, as torch gives */
    assert_int_equal(choir_whisper_alignment_matrix(&qk[0][0], 1, 2, S, F, 1.0f, 1, &out[0][0], NULL), 0);
    float want1[F] = {1, -1, 1, -1, -1, -1};
    for (int f = 0; f < F; f++) assert_float_equal(out[0][f], want1[f], 1e-6);
    assert_int_equal(choir_whisper_alignment_matrix(&qk[0][0], 1, 2, S, F, 0.0f, 1, &out[0][0], NULL), 0);
    assert_true(isnan(out[0][0]));
    /* two heads, the second the first's mirror: the mean is 0 */
    float qk2[2][2][S];
    memcpy(qk2[0], qk, sizeof qk);
    memcpy(qk2[1][0], qk[1], sizeof qk[1]);
    memcpy(qk2[1][1], qk[0], sizeof qk[0]);
    assert_int_equal(choir_whisper_alignment_matrix(&qk2[0][0][0], 2, 2, S, F, 1.0f, 3, &out[0][0], NULL), 0);
    for (int f = 0; f < F; f++) assert_float_equal(out[0][f], 0, 1e-6);
    /* fewer frames than half the width: openai skips the filter */
    assert_int_equal(choir_whisper_alignment_matrix(&qk[0][0], 1, 2, S, 3, 1.0f, 7, &out[0][0], NULL), 0);
    /* frames 0..2 only: row 0 is larger on 0 and 2 */
    assert_float_equal(out[0][0], 1, 1e-6);
    assert_float_equal(out[0][1], -1, 1e-6);
    assert_float_equal(out[0][2], 1, 1e-6);
    assert_int_equal(choir_whisper_alignment_matrix(&qk[0][0], 1, 2, S, F, 1.0f, 4, &out[0][0], NULL), CHOIR_EINVAL);
    assert_int_equal(choir_whisper_alignment_matrix(&qk[0][0], 1, 2, 4, F, 1.0f, 3, &out[0][0], NULL), CHOIR_EINVAL);
}

static void test_heads(void **state) {
    (void)state;
    choir_whisper_head h[CHOIR_WHISPER_MAX_HEADS];
    choir_whisper_dims tiny = {.n_mels = 80, .n_audio_ctx = 1500, .n_audio_layer = 4, .n_text_ctx = 448,
                               .n_text_layer = 4, .d_model = 384, .n_head = 6, .ffn_dim = 1536, .n_vocab = 51865};
    assert_int_equal(choir_whisper_alignment_heads(&tiny, false, h), 6);
    assert_int_equal(h[0].layer, 2);
    assert_int_equal(h[0].head, 2);
    assert_int_equal(h[5].layer, 3);
    assert_int_equal(h[5].head, 5);
    tiny.n_vocab = 51864; /* tiny.en */
    assert_int_equal(choir_whisper_alignment_heads(&tiny, false, h), 8);
    assert_int_equal(h[0].layer, 1);
    choir_whisper_dims large = {.n_mels = 80, .n_audio_layer = 32, .n_text_layer = 32, .d_model = 1280, .n_head = 20,
                                .n_vocab = 51865};
    assert_int_equal(choir_whisper_alignment_heads(&large, false, h), 23); /* v2 */
    assert_int_equal(choir_whisper_alignment_heads(&large, true, h), 9);   /* v1 */
    large.n_vocab = 51866;
    large.n_mels = 128;
    assert_int_equal(choir_whisper_alignment_heads(&large, false, h), 10); /* v3 */
    large.n_text_layer = 4;
    assert_int_equal(choir_whisper_alignment_heads(&large, false, h), 6); /* turbo */
    assert_int_equal(h[0].layer, 2);
    assert_int_equal(h[0].head, 4);
    /* anything else: the second half of the decoder layers, every head
     * (the fixtures' 2-layer, 4-head model: layer 1, heads 0..3) */
    choir_whisper_dims fx = {.n_mels = 80, .n_text_layer = 2, .d_model = 64, .n_head = 4, .n_vocab = 51865};
    assert_int_equal(choir_whisper_alignment_heads(&fx, false, h), 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(h[i].layer, 1);
        assert_int_equal(h[i].head, i);
    }
    fx.n_text_layer = 5;
    assert_int_equal(choir_whisper_alignment_heads(&fx, false, h), 12); /* layers 2, 3, 4 */
    assert_int_equal(h[0].layer, 2);
    assert_int_equal(choir_whisper_alignment_heads(NULL, false, h), 0);

    /* generation_config.json's list */
    choir_err err;
    cJSON *ok = cJSON_Parse("[[1, 3], [0, 0]]");
    assert_int_equal(choir_whisper_parse_alignment_heads(ok, &fx, h, &err), 2);
    assert_int_equal(h[0].layer, 1);
    assert_int_equal(h[0].head, 3);
    cJSON_Delete(ok);
    const char *bad[] = {"{}", "[]", "[[1]]", "[[1, 2, 3]]", "[[5, 0]]", "[[0, 4]]", "[[-1, 0]]", "[[0.5, 1]]",
                         "[[\"1\", 0]]", "[1, 2]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *b = cJSON_Parse(bad[i]);
        assert_int_equal(choir_whisper_parse_alignment_heads(b, &fx, h, &err), CHOIR_EFORMAT);
        assert_non_null(strstr(err.msg, "alignment_heads"));
        cJSON_Delete(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_dtw),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_add_word_timestamps),
        cmocka_unit_test(test_add_allocation_failures),
        cmocka_unit_test(test_subtitles),
        cmocka_unit_test(test_alignment_matrix),
        cmocka_unit_test(test_heads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
