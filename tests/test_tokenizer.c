/* Tests of the byte-level BPE tokenizer on Whisper's real vocabulary files
 * (../shared/fixtures/real/tokenizer). Expected ids were produced by a
 * reference implementation of the same algorithm (the GPT-2 regex via Python's
 * `regex` module and rank-ordered merges, as tiktoken does); "Hello world" ->
 * 15496 995 is GPT-2's well-known encoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/tokenizer.h"
#include "testutil.h"

typedef struct case_ids {
    const char *text;
    int32_t multi[32];
    int32_t gpt2[32];
} case_ids;

static const case_ids CASES[] = {
    {" And so my fellow Americans, ask not what your country can do for you",
     {400, 370, 452, 7177, 6280, 11, 1029, 406, 437, 428, 1941, 393, 360, 337, 291, -1},
     {843, 523, 616, 5891, 3399, 11, 1265, 407, 644, 534, 1499, 460, 466, 329, 345, -1}},
    {"Hello world", {15947, 1002, -1}, {15496, 995, -1}},
    {"I've   got 12345 apples!\n\nNew line",
     {40, 600, 220, 220, 658, 34466, 8465, 16814, 0, 198, 198, 18278, 1622, -1},
     {40, 1053, 220, 220, 1392, 17031, 2231, 22514, 0, 198, 198, 3791, 1627, -1}},
    {"Gr\xC3\xBC\xC3\x9F" "e, \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C \xE2\x80\x94 \xC3\xA7"
     "a va? \xE2\x99\xAA\xE2\x99\xAA",
     {20038, 774, 11451, 11, 10930, 2131, 24486, 3466, 2788, 2773, 30, 9061, -1},
     {8642, 9116, 39683, 68, 11, 220, 19526, 254, 25001, 121, 10310, 244, 45911, 234, 851, 6184,
      100, 64, 46935, 30, 20724, 103, 17992, 103, -1}},
    {"na\xC3\xAFve caf\xC3\xA9  \t end  ",
     {629, 15487, 303, 25118, 220, 220, 197, 917, 220, 220, -1},
     {2616, 38776, 40304, 220, 220, 197, 886, 220, 220, -1}},
};

static int count_ids(const int32_t *ids) {
    int n = 0;
    while (ids[n] >= 0) n++;
    return n;
}

static void check_encode(choir_tokenizer *t, int multi) {
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        const int32_t *want = multi ? CASES[c].multi : CASES[c].gpt2;
        int32_t *ids = NULL;
        int n = 0;
        choir_err err;
        assert_int_equal(choir_tokenizer_encode(t, CASES[c].text, strlen(CASES[c].text), &ids, &n, &err), 0);
        assert_int_equal(n, count_ids(want));
        for (int i = 0; i < n; i++) assert_int_equal(ids[i], want[i]);
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(choir_tokenizer_decode(t, ids, n, &text, &len, &err), 0);
        assert_string_equal(text, CASES[c].text);
        assert_int_equal(len, strlen(CASES[c].text));
        choir_free(text);
        choir_free(ids);
    }
}

static void test_multilingual_tiktoken(void **state) {
    (void)state;
    choir_err err;
    choir_tokenizer *t = choir_tokenizer_load(tu_fixture("real/tokenizer/multilingual.tiktoken"), &err);
    assert_non_null(t);
    assert_int_equal(choir_tokenizer_n_base(t), 50257);
    size_t len = 99;
    /* Rank 50256 is the empty byte string in the multilingual file. */
    assert_non_null(choir_tokenizer_token_bytes(t, 50256, &len));
    assert_int_equal(len, 0);
    assert_null(choir_tokenizer_token_bytes(t, 50257, &len));
    check_encode(t, 1);
    choir_tokenizer_free(t);
}

static void test_gpt2_files_agree(void **state) {
    (void)state;
    choir_err err;
    choir_tokenizer *a = choir_tokenizer_load(tu_fixture("real/tokenizer/gpt2.tiktoken"), &err);
    assert_non_null(a);
    choir_tokenizer *b = choir_tokenizer_load(tu_fixture("real/tokenizer/encoder.json"), &err);
    assert_non_null(b);
    assert_int_equal(choir_tokenizer_n_base(a), 50256);
    /* encoder.json's <|endoftext|> is a named token, not a byte string. */
    assert_int_equal(choir_tokenizer_n_base(b), 50256);
    assert_int_equal(choir_tokenizer_lookup(b, "<|endoftext|>"), 50256);
    for (int32_t id = 0; id < 50256; id++) {
        size_t la, lb;
        const uint8_t *pa = choir_tokenizer_token_bytes(a, id, &la);
        const uint8_t *pb = choir_tokenizer_token_bytes(b, id, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(pa, pb, la);
    }
    check_encode(a, 0);
    check_encode(b, 0);
    choir_tokenizer_free(a);
    choir_tokenizer_free(b);
}

static void test_tokenizer_json(void **state) {
    (void)state;
    /* An HF fast-tokenizer file: the GPT-2 vocabulary under model.vocab and
     * added special tokens, which are kept by name and out of the byte table. */
    size_t len;
    char *vocab = tu_read_file(tu_fixture("real/tokenizer/encoder.json"), &len);
    assert_non_null(vocab);
    const char *head = "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 50256, \"content\": "
                       "\"<|endoftext|>\", \"special\": true}, {\"id\": 50257, \"content\": "
                       "\"<|startoftranscript|>\", \"special\": true}], \"model\": {\"type\": \"BPE\", "
                       "\"vocab\": ";
    const char *tail = ", \"merges\": []}}";
    size_t n = strlen(head) + len + strlen(tail);
    char *json = malloc(n + 1);
    assert_non_null(json);
    snprintf(json, n + 1, "%s%.*s%s", head, (int)len, vocab, tail);
    const char *dir = tu_tmpfile("hf");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_int_equal(tu_write_file(path, json, n), 0);
    free(json);
    free(vocab);
    choir_err err;
    choir_tokenizer *t = choir_tokenizer_load(dir, &err);
    assert_non_null(t);
    assert_int_equal(choir_tokenizer_n_base(t), 50256);
    assert_int_equal(choir_tokenizer_lookup(t, "<|startoftranscript|>"), 50257);
    assert_int_equal(choir_tokenizer_lookup(t, "<|endoftext|>"), 50256);
    assert_int_equal(choir_tokenizer_lookup(t, " world"), 995);
    assert_int_equal(choir_tokenizer_lookup(t, "<|nothing|>"), -1);
    check_encode(t, 0);
    choir_tokenizer_free(t);
}

static void test_directory_choice(void **state) {
    (void)state;
    choir_err err;
    const char *dir = tu_fixture("real/tokenizer");
    /* The fixture folder holds encoder.json, which wins for any vocabulary size. */
    choir_tokenizer *t = choir_tokenizer_load_for_vocab(dir, 51865, &err);
    assert_non_null(t);
    assert_int_equal(choir_tokenizer_n_base(t), 50256);
    choir_tokenizer_free(t);
    assert_null(choir_tokenizer_load(tu_tmpdir(), &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
}

static void test_split_characters(void **state) {
    (void)state;
    choir_err err;
    choir_tokenizer *t = choir_tokenizer_load(tu_fixture("real/tokenizer/gpt2.tiktoken"), &err);
    assert_non_null(t);
    /* In GPT-2, "你" is two tokens whose bytes split the character. */
    const char *ni = "\xE4\xBD\xA0";
    int32_t *ids;
    int n;
    assert_int_equal(choir_tokenizer_encode(t, ni, 3, &ids, &n, &err), 0);
    assert_int_equal(n, 2);
    char *text;
    size_t len;
    assert_int_equal(choir_tokenizer_decode(t, ids, 1, &text, &len, &err), 0);
    assert_string_equal(text, "\xEF\xBF\xBD"); /* an incomplete character is replaced */
    choir_free(text);
    assert_int_equal(choir_tokenizer_decode(t, ids, 2, &text, &len, &err), 0);
    assert_string_equal(text, ni);
    choir_free(text);
    /* Special ids are skipped. */
    int32_t mixed[3] = {ids[0], 50256, ids[1]};
    assert_int_equal(choir_tokenizer_decode(t, mixed, 3, &text, &len, &err), 0);
    assert_string_equal(text, ni);
    choir_free(text);
    choir_free(ids);
    assert_int_equal(choir_utf8_complete_prefix("a\xE4\xBD", 3), 1);
    assert_int_equal(choir_utf8_complete_prefix("a\xE4\xBD\xA0", 4), 4);
    assert_int_equal(choir_utf8_complete_prefix("ab", 2), 2);
    /* Invalid UTF-8 still encodes, byte by byte, and decodes to replacements. */
    assert_int_equal(choir_tokenizer_encode(t, "\xFF" "a", 2, &ids, &n, &err), 0);
    assert_true(n >= 1);
    assert_int_equal(choir_tokenizer_decode(t, ids, n, &text, &len, &err), 0);
    assert_string_equal(text, "\xEF\xBF\xBD" "a");
    choir_free(text);
    choir_free(ids);
    choir_tokenizer_free(t);
}

static void test_bad_files(void **state) {
    (void)state;
    choir_err err;
    const char *p = tu_tmpfile("bad.tiktoken");
    assert_int_equal(tu_write_file(p, "IQ== 0\n!!notbase64 1\n", 21), 0);
    assert_null(choir_tokenizer_load(p, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    p = tu_tmpfile("holes.tiktoken");
    assert_int_equal(tu_write_file(p, "IQ== 5\n", 7), 0);
    assert_null(choir_tokenizer_load(p, &err));
    p = tu_tmpfile("vocab.json");
    assert_int_equal(tu_write_file(p, "{\"a\": \"x\"}", 10), 0);
    assert_null(choir_tokenizer_load(p, &err));
    assert_null(choir_tokenizer_load(tu_tmpfile("missing.tiktoken"), &err));
}

static void test_alloc_failures(void **state) {
    (void)state;
    /* Every allocation of load + encode + decode may fail; none may crash or leak. */
    const char *path = tu_fixture("real/tokenizer/multilingual.tiktoken");
    int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
    for (int64_t k = 1; k < 64; k++) {
        choir_err err;
        choir_alloc_fail_after(k);
        choir_tokenizer *t = choir_tokenizer_load(path, &err);
        if (t) {
            int32_t *ids = NULL;
            int n = 0;
            char *text = NULL;
            if (choir_tokenizer_encode(t, "Hello world", 11, &ids, &n, &err) == 0) {
                if (choir_tokenizer_decode(t, ids, n, &text, NULL, &err) == 0) choir_free(text);
                choir_free(ids);
            }
            choir_tokenizer_free(t);
        }
        choir_alloc_fail_after(0);
    }
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multilingual_tiktoken), cmocka_unit_test(test_gpt2_files_agree),
        cmocka_unit_test(test_tokenizer_json),        cmocka_unit_test(test_directory_choice),
        cmocka_unit_test(test_split_characters),
        cmocka_unit_test(test_bad_files),             cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
