/* Hugging Face tokenizer.json pipelines: the real Qwen2.5 tokenizer
 * (../shared/fixtures/real/tokenizer/qwen2.5) must give the ids and decodings
 * of every case in fixtures/vibevoice-asr/tokenizer_cases.json (made with
 * the reference `tokenizers` library); NFC, streaming decoding, the regex
 * engine against the hand-written GPT-2 split, and refusal of unsupported
 * pipelines are checked on their own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/tokenizer.h"
#include "testutil.h"
#include "text/bpe_internal.h"
#include "text/regex_internal.h"
#include "text/unicode_internal.h"

static choir_tokenizer *g_qwen;

static int setup(void **state) {
    (void)state;
    choir_err err;
    g_qwen = choir_tokenizer_load(tu_fixture("real/tokenizer/qwen2.5/tokenizer.json"), &err);
    if (!g_qwen) fprintf(stderr, "load: %s\n", err.msg);
    return g_qwen ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    choir_tokenizer_free(g_qwen);
    return 0;
}

static void test_qwen_cases(void **state) {
    (void)state;
    choir_err err;
    cJSON *root = choir_json_load(tu_fixture("vibevoice-asr/tokenizer_cases.json"), &err);
    assert_non_null(root);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *text = choir_json_str(c, "text", NULL);
        const char *decoded = choir_json_str(c, "decoded", NULL);
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "ids");
        assert_non_null(text);
        int32_t *ids = NULL;
        int n = 0;
        assert_int_equal(choir_tokenizer_encode_special(g_qwen, text, strlen(text), &ids, &n, &err), 0);
        if (n != cJSON_GetArraySize(want)) fprintf(stderr, "case \"%s\": %d ids\n", text, n);
        assert_int_equal(n, cJSON_GetArraySize(want));
        for (int i = 0; i < n; i++) {
            if (ids[i] != cJSON_GetArrayItem(want, i)->valueint)
                fprintf(stderr, "case \"%s\": id %d is %d, want %d\n", text, i, ids[i],
                        cJSON_GetArrayItem(want, i)->valueint);
            assert_int_equal(ids[i], cJSON_GetArrayItem(want, i)->valueint);
        }
        char *out = NULL;
        size_t len = 0;
        assert_int_equal(choir_tokenizer_decode_ex(g_qwen, ids, n, CHOIR_TOKENIZER_DECODE_ADDED |
                                                   CHOIR_TOKENIZER_DECODE_SPECIAL, &out, &len, &err), 0);
        assert_string_equal(out, decoded);
        choir_free(out);
        choir_free(ids);
        n_cases++;
    }
    assert_true(n_cases >= 15);
    cJSON_Delete(root);
    assert_int_equal(choir_tokenizer_n_base(g_qwen), 151643);
    assert_int_equal(choir_tokenizer_lookup(g_qwen, "<|box_start|>"), 151648);
    assert_true(choir_tokenizer_is_special(g_qwen, 151645));
    assert_false(choir_tokenizer_is_special(g_qwen, 151657)); /* <tool_call> */
    assert_int_equal(choir_tokenizer_n_vocab(g_qwen), 151669);
}

static void test_special_not_matched_by_plain_encode(void **state) {
    (void)state;
    choir_err err;
    const char *s = "<|im_end|>";
    int32_t *ids;
    int n;
    assert_int_equal(choir_tokenizer_encode(g_qwen, s, strlen(s), &ids, &n, &err), 0);
    assert_true(n > 1);
    for (int i = 0; i < n; i++) assert_true(ids[i] < 151643);
    char *out;
    assert_int_equal(choir_tokenizer_decode(g_qwen, ids, n, &out, NULL, &err), 0);
    assert_string_equal(out, s);
    choir_free(out);
    choir_free(ids);
}

/* Decomposed input must encode as its NFC form. */
static void test_nfc(void **state) {
    (void)state;
    choir_err err;
    const char *nfc = "\xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 caf\xC3\xA9 \xEA\xB0\x80";
    const char *nfd = "U\xCC\x88n" "i\xCC\x88" "co\xCC\x88" "de\xCC\x81 cafe\xCC\x81 \xE1\x84\x80\xE1\x85\xA1";
    int32_t *a, *b;
    int na, nb;
    assert_int_equal(choir_tokenizer_encode(g_qwen, nfc, strlen(nfc), &a, &na, &err), 0);
    assert_int_equal(choir_tokenizer_encode(g_qwen, nfd, strlen(nfd), &b, &nb, &err), 0);
    assert_int_equal(na, nb);
    for (int i = 0; i < na; i++) assert_int_equal(a[i], b[i]);
    choir_free(a);
    choir_free(b);
    /* Canonical reordering: two marks in the wrong order compose the same. */
    uint32_t in[3] = {'a', 0x0301, 0x0323}, out[12];
    uint32_t in2[3] = {'a', 0x0323, 0x0301}, out2[12];
    int64_t n1 = uni_nfc(in, 3, out, 12), n2 = uni_nfc(in2, 3, out2, 12);
    assert_int_equal(n1, n2);
    for (int64_t i = 0; i < n1; i++) assert_int_equal(out[i], out2[i]);
    assert_int_equal(out[0], 0x1EA1); /* a with dot below, then the acute */
    assert_int_equal(n1, 2);
    /* Composition exclusions stay decomposed (U+0958 -> U+0915 U+093C). */
    uint32_t ex[1] = {0x0958}, exo[8];
    assert_int_equal(uni_nfc(ex, 1, exo, 8), 2);
    assert_int_equal(exo[0], 0x0915);
    assert_int_equal(uni_category(0x4E2D), UNI_LO);
    assert_int_equal(uni_category('7'), UNI_ND);
    assert_int_equal(uni_category(UNI_RAW_BYTE(0xFF)), UNI_CN);
}

/* Streamed decoding equals decoding all at once, for sequences that cut
 * characters across tokens (emoji and CJK split into byte tokens). */
static void test_stream(void **state) {
    (void)state;
    choir_err err;
    const char *texts[] = {"emoji \xF0\x9F\x8E\x99\xEF\xB8\x8F\xF0\x9F\x94\x8A and \xE4\xB8\xAD\xE6\x96\x87",
                           "<|im_start|>assistant\n[{\"Start\":0.0}]<|im_end|>", "plain"};
    for (size_t c = 0; c < 3; c++) {
        int32_t *ids;
        int n;
        assert_int_equal(choir_tokenizer_encode_special(g_qwen, texts[c], strlen(texts[c]), &ids, &n, &err), 0);
        for (unsigned flags = 0; flags < 4; flags++) {
            char *whole;
            size_t wl;
            assert_int_equal(choir_tokenizer_decode_ex(g_qwen, ids, n, flags, &whole, &wl, &err), 0);
            choir_tokenizer_stream *s = choir_tokenizer_stream_create(g_qwen, flags, &err);
            assert_non_null(s);
            char acc[512] = {0};
            size_t al = 0;
            for (int i = 0; i <= n; i++) {
                const char *piece;
                size_t pl;
                if (i < n) assert_int_equal(choir_tokenizer_stream_push(s, ids[i], &piece, &pl, &err), 0);
                else assert_int_equal(choir_tokenizer_stream_flush(s, &piece, &pl, &err), 0);
                /* Every piece handed out is whole UTF-8. */
                assert_int_equal(choir_utf8_complete_prefix(piece, pl), pl);
                memcpy(acc + al, piece, pl);
                al += pl;
            }
            assert_int_equal(al, wl);
            assert_memory_equal(acc, whole, wl);
            choir_tokenizer_stream_free(s);
            choir_free(whole);
        }
        choir_free(ids);
    }
    /* Random byte tokens, broken UTF-8 included: the same property. */
    uint64_t x = 12345;
    for (int trial = 0; trial < 200; trial++) {
        int32_t ids[24];
        for (int i = 0; i < 24; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            uint8_t b = (uint8_t)(x >> 56);
            ids[i] = g_qwen->byte_id[b];
        }
        char *whole;
        size_t wl;
        assert_int_equal(choir_tokenizer_decode_ex(g_qwen, ids, 24, 0, &whole, &wl, &err), 0);
        choir_tokenizer_stream *s = choir_tokenizer_stream_create(g_qwen, 0, &err);
        char acc[256];
        size_t al = 0;
        for (int i = 0; i <= 24; i++) {
            const char *piece;
            size_t pl;
            if (i < 24) choir_tokenizer_stream_push(s, ids[i], &piece, &pl, &err);
            else choir_tokenizer_stream_flush(s, &piece, &pl, &err);
            memcpy(acc + al, piece, pl);
            al += pl;
        }
        assert_int_equal(al, wl);
        assert_memory_equal(acc, whole, wl);
        choir_tokenizer_stream_free(s);
        choir_free(whole);
    }
}

/* The regex engine running the GPT-2 pattern splits exactly as the
 * hand-written splitter on random text of letters, digits, spaces, newlines,
 * apostrophes, punctuation and non-ASCII characters. */
static void test_regex_matches_gpt2(void **state) {
    (void)state;
    char msg[160];
    rx *re = rx_compile("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
                        msg, sizeof msg);
    assert_non_null(re);
    bpe_pre by_rx = {.kind = BPE_PRE_SPLIT, .re = re, .behavior = BPE_SPLIT_ISOLATED};
    bpe_pre gpt2 = {.kind = BPE_PRE_GPT2};
    const uint32_t alphabet[] = {'a', 'b', 'Z', '1', '9', ' ', ' ', ' ', '\n', '\t', '\'', 's', 't',
                                 '!', '.', 0xE9, 0x4E2D, 0x0661, 0x00A0, 0x3000, 0x1F600, 0x2014};
    uint64_t x = 99;
    uint32_t cp[64];
    bpe_span in = {0, 64}, a[200], b[200];
    for (int trial = 0; trial < 2000; trial++) {
        for (int i = 0; i < 64; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            cp[i] = alphabet[(x >> 33) % (sizeof alphabet / sizeof alphabet[0])];
        }
        int64_t na = bpe_pre_apply(&gpt2, cp, 64, &in, 1, a);
        int64_t nb = bpe_pre_apply(&by_rx, cp, 64, &in, 1, b);
        assert_int_equal(na, nb);
        for (int64_t i = 0; i < na; i++) {
            assert_int_equal(a[i].start, b[i].start);
            assert_int_equal(a[i].end, b[i].end);
        }
    }
    rx_free(re);
    /* Refused, with a message, rather than matched wrongly. */
    const char *bad[] = {"(?<=a)b", "\\p{Han}+", "a++", "(a", "a)", "[a", "\\1", "*a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg[0] = '\0';
        assert_null(rx_compile(bad[i], msg, sizeof msg));
        assert_true(strlen(msg) > 0);
    }
    /* Behaviours a few patterns use: lazy and counted repeats, groups. */
    re = rx_compile("\\p{N}{1,3}|(?:ab)+?c|x*?y", msg, sizeof msg);
    assert_non_null(re);
    uint32_t t[12] = {'1', '2', '3', '4', 'a', 'b', 'a', 'b', 'c', 'x', 'x', 'y'};
    size_t s, e;
    assert_int_equal(rx_search(re, t, 12, 0, &s, &e), 1);
    assert_int_equal(s, 0);
    assert_int_equal(e, 3);
    assert_int_equal(rx_search(re, t, 12, 3, &s, &e), 1);
    assert_int_equal(e, 4);
    assert_int_equal(rx_search(re, t, 12, 4, &s, &e), 1);
    assert_int_equal(e, 9);
    assert_int_equal(rx_search(re, t, 12, 9, &s, &e), 1);
    assert_int_equal(e, 12);
    rx_free(re);
}

static void write_json(const char *name, const char *json) {
    const char *p = tu_tmpfile(name);
    assert_int_equal(tu_write_file(p, json, strlen(json)), 0);
}

/* A minimal byte-level tokenizer.json: the 256 byte tokens plus "ab", with
 * the given normaliser / pre-tokenizer JSON. */
static char *mini_json(const char *extra) {
    size_t cap = 16384;
    char *j = malloc(cap);
    size_t n = (size_t)snprintf(j, cap, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    int id = 0, other = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : 256u + (uint32_t)other++;
        uint8_t u[4];
        int k = uni_encode_utf8(cp, u);
        char esc[16];
        if (cp == '"' || cp == '\\') snprintf(esc, sizeof esc, "\\%c", (char)cp);
        else snprintf(esc, sizeof esc, "%.*s", k, (const char *)u);
        n += (size_t)snprintf(j + n, cap - n, "%s\"%s\": %d", b ? ", " : "", esc, id++);
    }
    n += (size_t)snprintf(j + n, cap - n, ", \"ab\": %d}, \"merges\": [\"a b\"]}%s}", id, extra);
    return j;
}

static void test_pipeline_options(void **state) {
    (void)state;
    choir_err err;
    char *j = mini_json(", \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                        "{\"type\": \"Digits\", \"individual_digits\": true},"
                        "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Removed\"}]}");
    write_json("digits.json", j);
    free(j);
    choir_tokenizer *t = choir_tokenizer_load(tu_tmpfile("digits.json"), &err);
    assert_non_null(t);
    int32_t *ids;
    int n;
    assert_int_equal(choir_tokenizer_encode(t, "ab12-ab", 7, &ids, &n, &err), 0);
    /* "ab" merges; each digit alone; the dash removed. */
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 256);
    assert_int_equal(ids[1], '1'); /* ids are the bytes here */
    assert_int_equal(ids[3], 256);
    choir_free(ids);
    choir_tokenizer_free(t);
    /* Unsupported pieces are refused by name. */
    const char *bad[] = {", \"normalizer\": {\"type\": \"NFKC\"}",
                         ", \"pre_tokenizer\": {\"type\": \"Metaspace\"}",
                         ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\p{Han}\"}}"};
    for (size_t i = 0; i < 3; i++) {
        j = mini_json(bad[i]);
        write_json("bad.json", j);
        free(j);
        assert_null(choir_tokenizer_load(tu_tmpfile("bad.json"), &err));
        assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
    }
    /* A merge naming an unknown token is a format error. */
    j = mini_json("");
    char *m = strstr(j, "\"a b\"");
    memcpy(m, "\"a Q\"", 5); /* both are tokens, but "aQ" is not */
    write_json("merge.json", j);
    free(j);
    assert_null(choir_tokenizer_load(tu_tmpfile("merge.json"), &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
}

/* Long inputs stay linear: a 200k-character word and a long prompt-like
 * run of added tokens encode (the heap-based merge, no quadratic scans). */
static void test_long_inputs(void **state) {
    (void)state;
    choir_err err;
    size_t n = 200000;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) s[i] = (char)('a' + (i * 7 % 26));
    s[n] = '\0';
    int32_t *ids;
    int k;
    assert_int_equal(choir_tokenizer_encode(g_qwen, s, n, &ids, &k, &err), 0);
    char *out;
    size_t len;
    assert_int_equal(choir_tokenizer_decode(g_qwen, ids, k, &out, &len, &err), 0);
    assert_int_equal(len, n);
    assert_memory_equal(out, s, n);
    choir_free(out);
    choir_free(ids);
    free(s);
    size_t reps = 20000, bl = strlen("<|box_start|>");
    s = malloc(reps * bl + 1);
    for (size_t i = 0; i < reps; i++) memcpy(s + i * bl, "<|box_start|>", bl);
    s[reps * bl] = '\0';
    assert_int_equal(choir_tokenizer_encode_special(g_qwen, s, reps * bl, &ids, &k, &err), 0);
    assert_int_equal(k, (int)reps);
    for (int i = 0; i < k; i++) assert_int_equal(ids[i], 151648);
    choir_free(ids);
    free(s);
}

static void test_alloc_failures(void **state) {
    (void)state;
    int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
    const char *text = "<|im_start|>user\nh\xC3\xA9llo 123<|im_end|>";
    for (int64_t k = 1; k < 40; k++) {
        choir_err err;
        int32_t *ids = NULL;
        int n = 0;
        choir_alloc_fail_after(k);
        if (choir_tokenizer_encode_special(g_qwen, text, strlen(text), &ids, &n, &err) == 0) {
            choir_tokenizer_stream *s = choir_tokenizer_stream_create(g_qwen, 3, &err);
            for (int i = 0; s && i < n; i++) {
                const char *p;
                size_t pl;
                if (choir_tokenizer_stream_push(s, ids[i], &p, &pl, &err)) break;
            }
            choir_tokenizer_stream_free(s);
            choir_free(ids);
        }
        choir_alloc_fail_after(0);
    }
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen_cases),       cmocka_unit_test(test_special_not_matched_by_plain_encode),
        cmocka_unit_test(test_nfc),              cmocka_unit_test(test_stream),
        cmocka_unit_test(test_regex_matches_gpt2), cmocka_unit_test(test_pipeline_options),
        cmocka_unit_test(test_long_inputs),      cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
