/* choir_whisper_cross_qk (choir/whisper_words.h) against openai/whisper's own
 * cross-attention logits: tests/data/whisper-ml80-words holds, for each case,
 * the teacher-forced token sequence, the alignment heads' pre-softmax logits
 * openai's find_alignment computed (torch fp32, whisper-ml80 randw weights)
 * and the text tokens' probabilities. From the same mel (the fixture's
 * reference.safetensors) choir's encoder, cross K/V and decoder pass give
 * those logits; the alignment matrix made from them gives openai's DTW path;
 * the positions' logits give openai's probabilities. Also: bad arguments are
 * named errors and every allocation of a pass may fail without a leak. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/randw.h"
#include "choir/safetensors.h"
#include "choir/tokenizer.h"
#include "choir/whisper_words.h"
#include "testutil.h"

#define FX "whisper/whisper-ml80"
#define WORDS_DIR CHOIR_SOURCE_DIR "/tests/data/whisper-ml80-words"

static choir_whisper *g_model;
static choir_st *g_ref, *g_words;
static cJSON *g_meta;
static choir_whisper_head g_heads[CHOIR_WHISPER_MAX_HEADS];
static int g_n_heads;
static char g_dir[1024];

static int setup(void **state) {
    (void)state;
    choir_err err;
    char *dir = g_dir;
    snprintf(g_dir, sizeof g_dir, "%s", tu_tmpfile("hf"));
    if (choir_randw_write_checkpoint(tu_fixture(FX "/manifest.json"), tu_fixture(FX "/config.json"),
                                     dir, &err))
        return -1;
    g_model = choir_whisper_load(dir, &err);
    g_ref = choir_st_open(tu_fixture(FX "/reference.safetensors"), &err);
    g_words = choir_st_open(WORDS_DIR "/words.safetensors", &err);
    g_meta = choir_json_load(WORDS_DIR "/meta.json", &err);
    if (!g_model || !g_ref || !g_words || !g_meta) return -1;
    g_n_heads = choir_whisper_alignment_heads(choir_whisper_get_dims(g_model), false, g_heads);
    return g_n_heads > 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    choir_whisper_free(g_model);
    choir_st_close(g_ref);
    choir_st_close(g_words);
    cJSON_Delete(g_meta);
    return 0;
}

static const choir_st_tensor *tensor(choir_st *st, const char *name, const char *what) {
    char key[128];
    snprintf(key, sizeof key, "%s%s%s", name, what[0] ? "." : "", what);
    const choir_st_tensor *t = choir_st_find(st, key);
    if (!t) fail_msg("fixture lacks %s", key);
    return t;
}

/* The case's window: its cross K/V from the mel it was made from. */
static choir_whisper_cross *window(const cJSON *c) {
    choir_err err;
    const choir_st_tensor *mel = tensor(g_ref, choir_json_str(c, "mel", "?"), "");
    float *enc = choir_alloc(CHOIR_MEM_OTHER, 1500 * 64 * sizeof(float));
    assert_int_equal(choir_whisper_encode(g_model, mel->data, 1, enc, &err), 0);
    choir_whisper_cross *cr = choir_whisper_cross_create(g_model, enc, &err);
    assert_non_null(cr);
    choir_free(enc);
    return cr;
}

static int case_tokens(const cJSON *c, int32_t *tok) {
    const cJSON *v;
    int n = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(c, "tokens")) tok[n++] = v->valueint;
    return n;
}

static void test_matches_openai(void **state) {
    (void)state;
    int sot_len = cJSON_GetArraySize(cJSON_GetObjectItem(g_meta, "sot_sequence"));
    int32_t eot = (int32_t)choir_json_int(g_meta, "eot", 0);
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_meta, "cases")) {
        const char *name = choir_json_str(c, "name", "?");
        const choir_st_tensor *ref = tensor(g_words, name, "qk"), *cost = tensor(g_words, name, "cost");
        const choir_st_tensor *probs = tensor(g_words, name, "probs"), *path = tensor(g_words, name, "path");
        int32_t tok[448];
        int T = case_tokens(c, tok), A = 1500, V = 51865;
        int frames = (int)choir_json_int(c, "num_frames", 0) / 2;
        int n_text = cJSON_GetArraySize(cJSON_GetObjectItem(c, "text_tokens"));
        assert_int_equal(ref->shape[0], g_n_heads);
        assert_int_equal(ref->shape[1], T);
        assert_int_equal(ref->shape[2], A);
        choir_whisper_cross *cr = window(c);
        float *qk = choir_alloc(CHOIR_MEM_OTHER, (size_t)g_n_heads * T * A * sizeof(float));
        float *logits = choir_alloc(CHOIR_MEM_OTHER, (size_t)T * V * sizeof(float));
        choir_err err;
        assert_int_equal(choir_whisper_cross_qk(g_model, cr, tok, T, g_heads, g_n_heads, qk, logits, &err), 0);
        /* The logits over the window's frames, where the alignment looks. */
        double num = 0, den = 0;
        for (int h = 0; h < g_n_heads; h++)
            for (int t = 0; t < T; t++)
                for (int f = 0; f < frames; f++) {
                    size_t i = ((size_t)h * T + t) * A + f;
                    double e = (double)qk[i] - ((const float *)ref->data)[i];
                    num += e * e;
                    den += (double)((const float *)ref->data)[i] * ((const float *)ref->data)[i];
                }
        double rel = sqrt(num / den);
        /* The alignment matrix from them, and its path. */
        float *m = choir_alloc(CHOIR_MEM_OTHER, (size_t)T * frames * sizeof *m);
        assert_int_equal(choir_whisper_alignment_matrix(qk, g_n_heads, T, A, frames, 1.0f,
                                                        CHOIR_WHISPER_MEDFILT_WIDTH, m, NULL),
                         0);
        const float *rows = m + (size_t)sot_len * frames;
        double worst = 0;
        for (size_t i = 0; i < (size_t)(n_text + 1) * frames; i++) {
            double e = fabs((double)rows[i] + ((const float *)cost->data)[i]);
            if (e > worst) worst = e;
        }
        int len = (int)path->shape[1];
        int32_t *pr = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n_text + 1 + frames) * sizeof *pr);
        int32_t *pc = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n_text + 1 + frames) * sizeof *pc);
        /* openai's DTW runs on -matrix. */
        float *neg = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n_text + 1) * frames * sizeof *neg);
        for (size_t i = 0; i < (size_t)(n_text + 1) * frames; i++) neg[i] = -rows[i];
        assert_int_equal(choir_whisper_dtw(neg, n_text + 1, frames, pr, pc, NULL), len);
        /* Token probabilities: position sot_len + j predicts text token j. */
        double pworst = 0;
        const cJSON *v;
        int j = 0;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(c, "text_tokens")) {
            float p = choir_whisper_text_token_prob(logits + (size_t)(sot_len + j) * V, eot, v->valueint);
            double e = fabs((double)p - ((const float *)probs->data)[j]);
            if (e > pworst) pworst = e;
            j++;
        }
        print_message("%s: %d heads x %d positions x %d frames: qk rel_l2 %.2e, matrix max |diff| %.2e, "
                      "prob max |diff| %.2e\n",
                      name, g_n_heads, T, frames, rel, worst, pworst);
        assert_true(rel < 2e-5);
        assert_true(worst < 1e-4);
        assert_true(pworst < 1e-6);
        assert_memory_equal(pr, path->data, (size_t)len * sizeof *pr);
        assert_memory_equal(pc, (const int32_t *)path->data + len, (size_t)len * sizeof *pc);
        /* Without logits: the same qk. */
        float *qk2 = choir_alloc(CHOIR_MEM_OTHER, (size_t)g_n_heads * T * A * sizeof(float));
        assert_int_equal(choir_whisper_cross_qk(g_model, cr, tok, T, g_heads, g_n_heads, qk2, NULL, &err), 0);
        assert_memory_equal(qk2, qk, (size_t)g_n_heads * T * A * sizeof(float));
        choir_free(qk), choir_free(qk2), choir_free(logits), choir_free(m), choir_free(pr), choir_free(pc);
        choir_free(neg);
        choir_whisper_cross_free(cr);
        k++;
    }
    assert_true(k >= 2);
}

static void test_errors_and_allocation_failures(void **state) {
    (void)state;
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(g_meta, "cases"), 0);
    choir_whisper_cross *cr = window(c);
    int32_t tok[448];
    int T = case_tokens(c, tok);
    float *qk = choir_alloc(CHOIR_MEM_OTHER, (size_t)g_n_heads * T * 1500 * sizeof(float));
    choir_err err;
    choir_whisper_head bad = {2, 0};
    assert_int_equal(choir_whisper_cross_qk(g_model, cr, tok, T, &bad, 1, qk, NULL, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "head (2, 0)"));
    assert_int_equal(choir_whisper_cross_qk(g_model, cr, tok, 0, g_heads, g_n_heads, qk, NULL, &err),
                     CHOIR_EINVAL);
    assert_int_equal(choir_whisper_cross_qk(g_model, cr, tok, 449, g_heads, g_n_heads, qk, NULL, &err),
                     CHOIR_EINVAL);
    assert_int_equal(choir_whisper_cross_qk(g_model, NULL, tok, T, g_heads, g_n_heads, qk, NULL, &err),
                     CHOIR_EINVAL);
    int32_t save = tok[4];
    tok[4] = 60000;
    assert_int_equal(choir_whisper_cross_qk(g_model, cr, tok, T, g_heads, g_n_heads, qk, NULL, &err),
                     CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "vocabulary"));
    tok[4] = save;
    /* Every allocation of the pass may fail: an error, no leak. */
    int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
    int failed = 0;
    for (int64_t n = 1; n < 40; n++) {
        choir_alloc_fail_after(n);
        int rc = choir_whisper_cross_qk(g_model, cr, tok, T, g_heads, g_n_heads, qk, NULL, &err);
        choir_alloc_fail_after(0);
        if (rc) {
            assert_int_equal(rc, CHOIR_ENOMEM);
            failed++;
        }
    }
    assert_true(failed >= 3);
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
    choir_free(qk);
    choir_whisper_cross_free(cr);
}

/* The pipeline's step (choir_whisper_window_words: the start sequence built
 * from the language and task, the teacher-forced pass, heads, matrix, DTW,
 * probabilities, words, refinement) from the case's mel and segments gives
 * openai's add_word_timestamps output: word texts equal, word and segment
 * times equal (both sides round to 10 ms; |diff| < 1e-9 s), probabilities
 * within 1e-6. */
static void test_window_words_match_openai(void **state) {
    (void)state;
    choir_err err;
    choir_tokenizer *tok = choir_tokenizer_load(tu_fixture("real/tokenizer/multilingual.tiktoken"), &err);
    assert_non_null(tok);
    const cJSON *c;
    int k = 0, n_words = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_meta, "cases")) {
        const cJSON *segs_in = cJSON_GetObjectItem(c, "segments_in"), *segs_out = cJSON_GetObjectItem(c, "segments_out");
        int n_segs = cJSON_GetArraySize(segs_in);
        choir_whisper_word_segment sg[8];
        int32_t toks[8][128];
        assert_true(n_segs <= 8);
        for (int s = 0; s < n_segs; s++) {
            const cJSON *g = cJSON_GetArrayItem(segs_in, s), *v;
            int nt = 0;
            cJSON_ArrayForEach(v, cJSON_GetObjectItem(g, "tokens")) toks[s][nt++] = v->valueint;
            sg[s] = (choir_whisper_word_segment){.start = choir_json_num(g, "start", 0),
                                                 .end = choir_json_num(g, "end", 0), .tokens = toks[s], .n_tokens = nt};
        }
        /* the fixture's start sequence is [sot, <|en|>, <|transcribe|>] */
        int sot_len = cJSON_GetArraySize(cJSON_GetObjectItem(g_meta, "sot_sequence"));
        assert_int_equal(sot_len, 3);
        assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(g_meta, "sot_sequence"), 1)->valueint,
                         choir_whisper_get_specials(g_model)->lang0 + choir_whisper_lang_index("en"));
        choir_whisper_cross *cr = window(c);
        double last = 0, offset = (double)choir_json_int(c, "seek", 0) / 100.0;
        assert_int_equal(choir_whisper_window_words(g_model, tok, cr, choir_whisper_lang_index("en"),
                                                    CHOIR_WHISPER_TRANSCRIBE, (int)choir_json_int(c, "num_frames", 0),
                                                    offset, &last, sg, n_segs, NULL, &err),
                         0);
        for (int s = 0; s < n_segs; s++) {
            const cJSON *g = cJSON_GetArrayItem(segs_out, s), *words = cJSON_GetObjectItem(g, "words");
            assert_true(fabs(sg[s].start - choir_json_num(g, "start", -1)) < 1e-9);
            assert_true(fabs(sg[s].end - choir_json_num(g, "end", -1)) < 1e-9);
            assert_int_equal(sg[s].n_words, cJSON_GetArraySize(words));
            for (int i = 0; i < sg[s].n_words; i++) {
                const cJSON *w = cJSON_GetArrayItem(words, i);
                assert_string_equal(sg[s].words[i].text, choir_json_str(w, "word", ""));
                assert_true(fabs(sg[s].words[i].start - choir_json_num(w, "start", -1)) < 1e-9);
                assert_true(fabs(sg[s].words[i].end - choir_json_num(w, "end", -1)) < 1e-9);
                assert_true(fabs(sg[s].words[i].probability - choir_json_num(w, "probability", -1)) < 1e-6);
                n_words++;
            }
            choir_whisper_words_free(sg[s].words, sg[s].n_words);
        }
        assert_true(last == sg[n_segs - 1].end);
        /* Segments without text get no words, and no pass is run. */
        int32_t stamps[2] = {toks[0][0], toks[0][0]};
        choir_whisper_word_segment empty = {.start = 1, .end = 1, .tokens = stamps, .n_tokens = 2};
        assert_int_equal(choir_whisper_window_words(g_model, tok, cr, 0, CHOIR_WHISPER_TRANSCRIBE, 3000, 0, &last,
                                                    &empty, 1, NULL, &err),
                         0);
        assert_int_equal(empty.n_words, 0);
        /* Every allocation may fail: an error, no words, no leak. */
        int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
        int failed = 0;
        for (int64_t n = 1; n < 60; n++) {
            choir_alloc_fail_after(n);
            int rc = choir_whisper_window_words(g_model, tok, cr, 0, CHOIR_WHISPER_TRANSCRIBE,
                                                (int)choir_json_int(c, "num_frames", 0), offset, &last, sg, n_segs,
                                                NULL, &err);
            choir_alloc_fail_after(0);
            for (int s = 0; s < n_segs; s++) {
                if (rc) assert_int_equal(sg[s].n_words, 0);
                choir_whisper_words_free(sg[s].words, sg[s].n_words);
            }
            if (rc) {
                assert_int_equal(rc, CHOIR_ENOMEM);
                failed++;
            }
        }
        assert_true(failed >= 5);
        assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
        choir_whisper_cross_free(cr);
        k++;
    }
    print_message("window words: %d cases, %d words equal openai's\n", k, n_words);
    assert_true(k >= 2 && n_words >= 10);
    choir_tokenizer_free(tok);
}

/* generation_config.json's alignment_heads replace the size's table; a
 * config without them keeps the table; a bad pair fails the load. */
static void write_gc(const char *text) {
    char p[1100];
    snprintf(p, sizeof p, "%s/generation_config.json", g_dir);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_generation_config_heads(void **state) {
    (void)state;
    choir_err err = {0};
    choir_whisper_head h[CHOIR_WHISPER_MAX_HEADS];
    assert_int_equal(choir_whisper_model_alignment_heads(g_model, h), g_n_heads);
    const choir_whisper_dims *D = choir_whisper_get_dims(g_model);
    int L = D->n_text_layer - 1, Hh = D->n_head - 1;
    char text[256];
    snprintf(text, sizeof text, "{\"max_length\": 448, \"alignment_heads\": [[%d, %d], [0, 0]]}", L, Hh);
    write_gc(text);
    choir_whisper *m = choir_whisper_load(g_dir, &err);
    assert_non_null(m);
    assert_int_equal(choir_whisper_model_alignment_heads(m, h), 2);
    assert_int_equal(h[0].layer, L);
    assert_int_equal(h[0].head, Hh);
    assert_int_equal(h[1].layer, 0);
    assert_int_equal(h[1].head, 0);
    choir_whisper_free(m);
    write_gc("{\"max_length\": 448}");
    m = choir_whisper_load(g_dir, &err);
    assert_non_null(m);
    assert_int_equal(choir_whisper_model_alignment_heads(m, h), g_n_heads);
    assert_memory_equal(h, g_heads, (size_t)g_n_heads * sizeof h[0]);
    choir_whisper_free(m);
    snprintf(text, sizeof text, "{\"alignment_heads\": [[%d, 0]]}", D->n_text_layer);
    write_gc(text);
    memset(&err, 0, sizeof err);
    assert_null(choir_whisper_load(g_dir, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    assert_non_null(strstr(err.msg, "alignment_heads"));
    char p[1100];
    snprintf(p, sizeof p, "%s/generation_config.json", g_dir);
    remove(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_openai),
        cmocka_unit_test(test_window_words_match_openai),
        cmocka_unit_test(test_errors_and_allocation_failures),
        cmocka_unit_test(test_generation_config_heads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
