/* Word timestamps against openai/whisper on the whisper-ml80 fixture weights:
 * tests/data/whisper-ml80-words/ (in this repository), made by
 * `tools/whisper_words_reference.py fixture` (openai's find_alignment and
 * add_word_timestamps on randw-v1 weights, torch fp32). For each case, from
 * the reference's own cross-attention logits of the alignment heads: choir's
 * alignment matrix equals the cost matrix openai gave its DTW, choir's DTW
 * finds the same path on it, and the words and refined segment times equal
 * openai's. The heads are the ones choir picks for that model.
 *
 * The fixture was made on a torch machine with
 *   tools/whisper_words_reference.py fixture --whisper-src WHISPER_CHECKOUT \
 *       --fixtures ../shared/fixtures --out tests/data/whisper-ml80-words
 * (openai/whisper at its main branch, torch 2.11 CPU). Without it every test
 * fails: it is part of the repository. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/safetensors.h"
#include "choir/tokenizer.h"
#include "choir/whisper_words.h"
#include "testutil.h"

#define WORDS_DIR CHOIR_SOURCE_DIR "/tests/data/whisper-ml80-words"

static cJSON *g_meta;
static choir_st *g_st;
static choir_tokenizer *g_tok;
static choir_whisper_specials g_sp;

static int setup(void **state) {
    (void)state;
    choir_err err;
    g_meta = choir_json_load(WORDS_DIR "/meta.json", &err);
    if (!g_meta) {
        fprintf(stderr, "%s/meta.json: %s\n", WORDS_DIR, err.msg);
        return -1;
    }
    g_st = choir_st_open(WORDS_DIR "/words.safetensors", &err);
    g_tok = choir_tokenizer_load(tu_fixture("real/tokenizer/multilingual.tiktoken"), &err);
    choir_whisper_specials_from_vocab(51865, &g_sp);
    return g_st && g_tok ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(g_meta);
    choir_st_close(g_st);
    choir_tokenizer_free(g_tok);
    return 0;
}

static const choir_st_tensor *tensor(const char *name, const char *what) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", name, what);
    const choir_st_tensor *t = choir_st_find(g_st, key);
    if (!t) fail_msg("fixture lacks %s", key);
    return t;
}

static void test_heads_are_openai_default(void **state) {
    (void)state;
    choir_whisper_dims d = {.n_mels = 80, .n_audio_ctx = 1500, .n_audio_layer = 2, .n_text_ctx = 448,
                            .n_text_layer = 2, .d_model = 64, .n_head = 4, .ffn_dim = 256, .n_vocab = 51865};
    choir_whisper_head h[CHOIR_WHISPER_MAX_HEADS];
    int n = choir_whisper_alignment_heads(&d, false, h);
    const cJSON *ref = cJSON_GetObjectItem(g_meta, "alignment_heads");
    assert_int_equal(n, cJSON_GetArraySize(ref));
    for (int i = 0; i < n; i++) {
        assert_int_equal(h[i].layer, cJSON_GetArrayItem(cJSON_GetArrayItem(ref, i), 0)->valueint);
        assert_int_equal(h[i].head, cJSON_GetArrayItem(cJSON_GetArrayItem(ref, i), 1)->valueint);
    }
}

static void test_cases(void **state) {
    (void)state;
    int sot_len = cJSON_GetArraySize(cJSON_GetObjectItem(g_meta, "sot_sequence"));
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_meta, "cases")) {
        const char *name = choir_json_str(c, "name", "?");
        const choir_st_tensor *qk = tensor(name, "qk"), *cost = tensor(name, "cost"), *probs = tensor(name, "probs"),
                              *path = tensor(name, "path");
        int H = (int)qk->shape[0], T = (int)qk->shape[1], A = (int)qk->shape[2];
        int frames = (int)choir_json_int(c, "num_frames", 0) / 2;
        int n_text = cJSON_GetArraySize(cJSON_GetObjectItem(c, "text_tokens"));
        assert_int_equal(T, sot_len + 1 + n_text + 1);
        assert_int_equal(cost->shape[0], n_text + 1);
        assert_int_equal(cost->shape[1], frames);
        /* the matrix: all positions, then the rows from <|notimestamps|> to
         * the last text token, as find_alignment crops them */
        float *m = choir_alloc(CHOIR_MEM_OTHER, (size_t)T * frames * sizeof *m);
        assert_int_equal(choir_whisper_alignment_matrix(qk->data, H, T, A, frames, 1.0f, CHOIR_WHISPER_MEDFILT_WIDTH, m,
                                                        NULL),
                         0);
        const float *rows = m + (size_t)sot_len * frames, *ref = cost->data;
        double worst = 0;
        for (size_t i = 0; i < (size_t)(n_text + 1) * frames; i++) {
            double e = fabs((double)rows[i] + ref[i]);
            if (e > worst) worst = e;
        }
        print_message("%s: %d heads, %d positions, %d frames; matrix max |diff| %.2e\n", name, H, T, frames, worst);
        assert_true(worst < 1e-4);
        /* the path: on openai's own costs exactly, and on choir's matrix */
        int len = (int)path->shape[1];
        const int32_t *pr = path->data, *pc = pr + len;
        int32_t *r = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n_text + 1 + frames) * sizeof *r);
        int32_t *cc = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n_text + 1 + frames) * sizeof *cc);
        assert_int_equal(choir_whisper_dtw(ref, n_text + 1, frames, r, cc, NULL), len);
        assert_memory_equal(r, pr, (size_t)len * sizeof *r);
        assert_memory_equal(cc, pc, (size_t)len * sizeof *cc);
        /* words and segments */
        const cJSON *segs_in = cJSON_GetObjectItem(c, "segments_in"), *segs_out = cJSON_GetObjectItem(c, "segments_out");
        int n_segs = cJSON_GetArraySize(segs_in);
        choir_whisper_word_segment sg[8];
        int32_t toks[8][128];
        assert_true(n_segs <= 8);
        for (int s = 0; s < n_segs; s++) {
            const cJSON *g = cJSON_GetArrayItem(segs_in, s), *tk = cJSON_GetObjectItem(g, "tokens"), *v;
            int nt = 0;
            cJSON_ArrayForEach(v, tk) toks[s][nt++] = v->valueint;
            sg[s] = (choir_whisper_word_segment){.start = choir_json_num(g, "start", 0), .end = choir_json_num(g, "end", 0),
                                                 .tokens = toks[s], .n_tokens = nt};
        }
        double last = 0;
        double offset = (double)choir_json_int(c, "seek", 0) * 160 / 16000;
        assert_int_equal(choir_whisper_add_word_timestamps(g_tok, &g_sp, rows, frames, probs->data, offset, &last, sg,
                                                           n_segs, NULL, NULL),
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
                assert_true(fabs(sg[s].words[i].probability - choir_json_num(w, "probability", -1)) < 1e-5);
            }
            choir_whisper_words_free(sg[s].words, sg[s].n_words);
        }
        choir_free(m);
        choir_free(r);
        choir_free(cc);
        k++;
    }
    assert_true(k >= 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heads_are_openai_default),
        cmocka_unit_test(test_cases),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
