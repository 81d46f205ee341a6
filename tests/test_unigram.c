/* Tests of the SentencePiece-Unigram tokenizer: the SAM-Audio fixture's tiny
 * T5 tokenizer must give the ids the reference tokenized (reference.safetensors
 * text_ids, read here as the literal lists), and small hand-made
 * tokenizer.json files pin each stage: Viterbi beats greedy, unknowns fuse,
 * byte fallback, NFKC, Replace with a quantified regex, Strip, the Metaspace
 * schemes, added tokens, and a Precompiled map built here as a darts-clone
 * double array. Bad files are refused with the component named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/unigram.h"
#include "testutil.h"

static void expect_ids(const choir_unigram *t, const char *text, const int32_t *want, int n_want) {
    int32_t *ids = NULL;
    int n = 0;
    choir_err err = {0};
    int rc = choir_unigram_encode(t, text, strlen(text), &ids, &n, &err);
    if (rc) fprintf(stderr, "encode(%s): %s\n", text, err.msg);
    assert_int_equal(rc, 0);
    if (n != n_want || memcmp(ids, want, (size_t)n * sizeof *ids) != 0) {
        fprintf(stderr, "encode(\"%s\"):", text);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(n, n_want);
    assert_memory_equal(ids, want, (size_t)n * sizeof *ids);
    choir_free(ids);
}

static void test_fixture_ids(void **state) {
    (void)state;
    choir_err err = {0};
    choir_unigram *t = choir_unigram_load(tu_fixture("sam-audio/sam-tiny/t5"), &err);
    if (!t) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(t);
    /* reference.safetensors text_ids rows (without the padding). */
    const int32_t man[] = {3, 4, 1};
    const int32_t dog[] = {5, 6, 7, 8, 9, 10, 1};
    expect_ids(t, "man speaking", man, 3);
    expect_ids(t, "a dog barking loudly", dog, 7);
    /* NFKC folds fullwidth letters; the Replace collapses a double space. */
    expect_ids(t, "\xef\xbd\x8d\xef\xbd\x81\xef\xbd\x8e  speaking", man, 3);
    assert_int_equal(choir_unigram_eos_id(t), 1);
    assert_int_equal(choir_unigram_lookup(t, "\xe2\x96\x81" "dog"), 6);
    assert_string_equal(choir_unigram_piece(t, 4), "\xe2\x96\x81" "speaking");
    /* An unknown character (a snowman) becomes one <unk>, a run of them too. */
    const int32_t snow[] = {3, 25, 2, 1};
    expect_ids(t, "man \xe2\x98\x83\xe2\x98\x83", snow, 4);
    /* Added tokens are cut out of the raw text. */
    const int32_t eos[] = {3, 1, 4, 1};
    expect_ids(t, "man</s>speaking", eos, 4);
    choir_unigram_free(t);
}

static choir_unigram *parse(const char *json) {
    choir_err err = {0};
    choir_unigram *t = choir_unigram_parse(json, strlen(json), "test", &err);
    if (!t) fprintf(stderr, "%s\n", err.msg);
    return t;
}

#define MS "\xe2\x96\x81"

static void test_viterbi_and_fallback(void **state) {
    (void)state;
    /* "ab" alone scores -10; "a" + "b" scores -2: Viterbi must split. */
    const char *json =
        "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"byte_fallback\":true,\"vocab\":["
        "[\"<unk>\",0],[\"" MS "ab\",-10],[\"" MS "a\",-1],[\"b\",-1],[\"" MS "\",-2],"
        "[\"<0xE2>\",-5],[\"<0x98>\",-5],[\"<0x83>\",-5],[\"c\",-1]]},"
        "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"" MS "\",\"add_prefix_space\":true}}";
    choir_unigram *t = parse(json);
    assert_non_null(t);
    const int32_t ab[] = {2, 3};
    expect_ids(t, "ab", ab, 2);
    /* Byte fallback: the snowman's three bytes. */
    const int32_t snow[] = {4, 5, 6, 7, 8};
    expect_ids(t, "\xe2\x98\x83" "c", snow, 5);
    /* Two words, each with its own ▁. */
    const int32_t two[] = {2, 3, 2};
    expect_ids(t, "ab a", two, 3);
    /* Nothing in, nothing out (no template). */
    expect_ids(t, "", two, 0);
    choir_unigram_free(t);
}

static void test_normalizers(void **state) {
    (void)state;
    const char *json =
        "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0],[\"" MS "x\",-1],[\"" MS "\",-5],[\"y\",-1]]},"
        "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
        "{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true},"
        "{\"type\":\"Lowercase\"},"
        "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\" \"}]},"
        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},"
        "{\"type\":\"Metaspace\",\"replacement\":\"" MS "\",\"prepend_scheme\":\"always\",\"split\":true}]}}";
    choir_unigram *t = parse(json);
    assert_non_null(t);
    char *norm = NULL;
    size_t nl = 0;
    assert_int_equal(choir_unigram_normalize(t, "  X    Y  ", 10, &norm, &nl, NULL), 0);
    assert_string_equal(norm, "x y");
    choir_free(norm);
    const int32_t xy[] = {1, 2, 3};
    expect_ids(t, "  X    Y  ", xy, 3);
    choir_unigram_free(t);

    /* Metaspace "first": only the first word gets the ▁, no split. */
    json = "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0],[\"" MS "x\",-1],[\"y\",-1],[\"" MS "y\",-3]]},"
           "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"" MS "\",\"prepend_scheme\":\"never\",\"split\":false}}";
    t = parse(json);
    assert_non_null(t);
    const int32_t never[] = {0, 3};
    expect_ids(t, "x y", never, 2);
    choir_unigram_free(t);
}

/* A darts-clone double array for a few byte-string keys, built the simple
 * way: every node's children (label 0 = the leaf holding the value) go at
 * pos ^ offset ^ label for the first offset whose slots are all free. */
#define DA_N 8192
typedef struct da {
    uint32_t unit[DA_N];
    int used[DA_N];
} da;

static void da_build(da *d, int node, const char **keys, const uint32_t *vals, int nkeys, int depth,
                     const char *prefix) {
    int labels[257], nl = 0, leaf = -1;
    for (int k = 0; k < nkeys; k++) {
        if (strncmp(keys[k], prefix, (size_t)depth) != 0) continue;
        int c = (unsigned char)keys[k][depth];
        if (c == 0) {
            leaf = k;
            continue;
        }
        int seen = 0;
        for (int i = 0; i < nl; i++) seen |= labels[i] == c;
        if (!seen) labels[nl++] = c;
    }
    uint32_t off = 1;
    for (;; off++) {
        int ok = 1;
        if (leaf >= 0) ok &= !d->used[(uint32_t)node ^ off];
        for (int i = 0; i < nl && ok; i++) ok &= ((uint32_t)node ^ off ^ (uint32_t)labels[i]) < DA_N &&
                                               !d->used[(uint32_t)node ^ off ^ (uint32_t)labels[i]];
        if (ok && ((uint32_t)node ^ off) < DA_N) break;
    }
    d->unit[node] |= off << 10;
    if (leaf >= 0) {
        d->unit[node] |= 1u << 8;
        d->used[node ^ off] = 1;
        d->unit[node ^ off] = (1u << 31) | vals[leaf];
    }
    for (int i = 0; i < nl; i++) d->used[(uint32_t)node ^ off ^ (uint32_t)labels[i]] = 1;
    for (int i = 0; i < nl; i++) {
        int child = (int)((uint32_t)node ^ off ^ (uint32_t)labels[i]);
        d->unit[child] |= (uint32_t)labels[i];
        char p[16];
        memcpy(p, prefix, (size_t)depth);
        p[depth] = (char)labels[i];
        da_build(d, child, keys, vals, nkeys, depth + 1, p);
    }
}

static void b64(const unsigned char *in, size_t n, char *out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = 0;
}

static void test_precompiled(void **state) {
    (void)state;
    static da d;
    memset(&d, 0, sizeof d);
    d.used[0] = 1;
    /* Fullwidth A (EF BC A1) -> "a"; "Q" -> "kw"; U+00A0 -> " ". */
    const char *keys[] = {"\xef\xbc\xa1", "Q", "\xc2\xa0"};
    const char pool[] = "a\0kw\0 ";
    const uint32_t vals[] = {0, 2, 5};
    da_build(&d, 0, keys, vals, 3, 0, "");
    int top = DA_N;
    while (top > 1 && !d.used[top - 1]) top--;
    size_t trie_bytes = (size_t)top * 4, blob_n = 4 + trie_bytes + sizeof pool;
    unsigned char *blob = calloc(1, blob_n);
    blob[0] = (unsigned char)trie_bytes, blob[1] = (unsigned char)(trie_bytes >> 8);
    for (int i = 0; i < top; i++)
        for (int b = 0; b < 4; b++) blob[4 + 4 * i + b] = (unsigned char)(d.unit[i] >> (8 * b));
    memcpy(blob + 4 + trie_bytes, pool, sizeof pool);
    char *enc = malloc(blob_n * 2 + 8);
    b64(blob, blob_n, enc);
    char *json = malloc(strlen(enc) + 1024);
    sprintf(json,
            "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0],[\"" MS "akw\",-1],[\"" MS "\",-4],[\"b\",-1]]},"
            "\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"%s\"},"
            "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"" MS "\",\"add_prefix_space\":true}}",
            enc);
    choir_unigram *t = parse(json);
    assert_non_null(t);
    char *norm = NULL;
    const char *in = "\xef\xbc\xa1Q\xc2\xa0" "b";
    assert_int_equal(choir_unigram_normalize(t, in, strlen(in), &norm, NULL, NULL), 0);
    assert_string_equal(norm, "akw b");
    choir_free(norm);
    const int32_t want[] = {1, 2, 3};
    expect_ids(t, in, want, 3);
    choir_unigram_free(t);
    free(json), free(enc), free(blob);
}

static void test_refusals(void **state) {
    (void)state;
    const char *bad[] = {
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}",
        "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}",
        "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]},\"normalizer\":{\"type\":\"BertNormalizer\"}}",
        "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}",
        "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]},\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"[a-z]+\"},\"content\":\"\"}}",
        "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]},\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"AAA=\"}}",
        "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]], \"unk_id\": 5}}",
        "{\"model\":",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        choir_err err = {0};
        choir_unigram *t = choir_unigram_parse(bad[i], strlen(bad[i]), "bad", &err);
        assert_null(t);
        assert_true(err.code < 0);
        assert_non_null(strstr(err.msg, "bad"));
    }
    choir_err err = {0};
    assert_null(choir_unigram_load("/nonexistent/tokenizer.json", &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
}

static void test_alloc_failures(void **state) {
    (void)state;
    size_t n = 0;
    char *json = tu_read_file(tu_fixture("sam-audio/sam-tiny/t5/tokenizer.json"), &n);
    assert_non_null(json);
    for (int64_t k = 1; k < 400; k++) {
        choir_alloc_fail_after(k);
        choir_unigram *t = choir_unigram_parse(json, n, "fx", NULL);
        int32_t *ids = NULL;
        int cnt = 0;
        int rc = t ? choir_unigram_encode(t, "a dog barking loudly", 20, &ids, &cnt, NULL) : -1;
        choir_alloc_fail_after(0);
        if (rc == 0) choir_free(ids);
        choir_unigram_free(t);
    }
    free(json);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_ids),      cmocka_unit_test(test_viterbi_and_fallback),
        cmocka_unit_test(test_normalizers),      cmocka_unit_test(test_precompiled),
        cmocka_unit_test(test_refusals),         cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
