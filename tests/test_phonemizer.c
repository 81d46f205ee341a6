/* The espeak-ng phonemizer (Kokoro inventory, punctuation, thread safety) and
 * the splitter into <= 510-phoneme pieces. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/phonemizer.h"
#include "testutil.h"

static void expect_map(const char *ipa, choir_phonemizer_lang lang, const char *want) {
    char *got = choir_phonemizer_map_ipa(ipa, lang);
    assert_non_null(got);
    if (strcmp(got, want) != 0) fail_msg("map(%s) = %s, want %s", ipa, got, want);
    choir_free(got);
}

static void test_map_ipa(void **state) {
    (void)state;
    const choir_phonemizer_lang US = CHOIR_PHONEMIZER_EN_US, GB = CHOIR_PHONEMIZER_EN_GB;
    expect_map("həlˈo^ʊ wˈɜːld", US, "həlˈO wˈɜɹld");
    expect_map("d^ʒˈʌmps ˌo^ʊvɚ", US, "ʤˈʌmps ˌOvəɹ");
    expect_map("bˈʌɾɚ", US, "bˈʌTəɹ");                  /* flap -> T */
    expect_map("lˈe^ɪzi", US, "lˈAzi");
    expect_map("ɹˈa^ɪt^ʃ bˈɔ^ɪ", US, "ɹˈIʧ bˈY");
    expect_map("lˈɪtl\xCC\xA9", US, "lˈɪtᵊl");           /* syllabic l */
    expect_map("bˈʌʔn\xCC\xA9", US, "bˈʌtn");
    expect_map("ɡˈə^ʊ", GB, "ɡˈQ");
    expect_map("fˈɑːst", GB, "fˈɑːst");                 /* length kept in British */
    expect_map("fˈɑːst", US, "fˈɑst");
    expect_map("", US, "");
}

static void test_phonemize_sentence(void **state) {
    (void)state;
    choir_err err = {0};
    choir_phonemizer *p = choir_phonemizer_create(CHOIR_PHONEMIZER_EN_US, &err);
    if (!p) fail_msg("%s", err.msg);
    char *ps = choir_phonemize(p, "Hello world.", &err);
    assert_non_null(ps);
    assert_string_equal(ps, "həlˈO wˈɜɹld.");
    choir_free(ps);

    choir_clause_list l;
    assert_int_equal(choir_phonemize_clauses(p, "Hello, world. How are you?! Fine", &l, &err), 0);
    assert_int_equal(l.n, 4);
    assert_string_equal(l.items[0].phonemes, "həlˈO,");
    assert_false(l.items[0].sentence_end);
    assert_true(l.items[1].sentence_end);
    assert_non_null(strstr(l.items[2].phonemes, "?!"));
    assert_true(l.items[3].sentence_end); /* the end of the text ends a sentence */
    for (int i = 0; i < l.n; i++)
        assert_int_equal(l.items[i].n_phonemes, choir_utf8_count(l.items[i].phonemes));
    choir_clause_list_free(&l);

    /* decimal points and thousands separators are not clause ends */
    assert_int_equal(choir_phonemize_clauses(p, "It costs 3.5 dollars, or 1,000 cents.", &l, &err), 0);
    assert_int_equal(l.n, 2);
    choir_clause_list_free(&l);

    /* nothing to say gives no clauses, not an error */
    assert_int_equal(choir_phonemize_clauses(p, "  \n ", &l, &err), 0);
    assert_int_equal(l.n, 0);
    choir_clause_list_free(&l);
    choir_phonemizer_free(p);
}

static void test_british(void **state) {
    (void)state;
    choir_err err = {0};
    choir_phonemizer_lang lang;
    assert_int_equal(choir_phonemizer_lang_parse("b", &lang), 0);
    assert_int_equal(lang, CHOIR_PHONEMIZER_EN_GB);
    assert_int_equal(choir_phonemizer_lang_parse("klingon", &lang), CHOIR_EINVAL);
    choir_phonemizer *gb = choir_phonemizer_create(CHOIR_PHONEMIZER_EN_GB, &err);
    choir_phonemizer *us = choir_phonemizer_create(CHOIR_PHONEMIZER_EN_US, &err);
    assert_non_null(gb);
    assert_non_null(us);
    char *a = choir_phonemize(gb, "Go home.", &err), *b = choir_phonemize(us, "Go home.", &err);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(strstr(a, "Q"));   /* British GOAT diphthong */
    assert_non_null(strstr(b, "O"));   /* American */
    choir_free(a);
    choir_free(b);
    choir_phonemizer_free(gb);
    choir_phonemizer_free(us);
}

typedef struct job {
    choir_phonemizer *p;
    const char *text;
    char *out;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    for (int i = 0; i < 5; i++) {
        choir_free(j->out);
        j->out = choir_phonemize(j->p, j->text, NULL);
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    static const char *const texts[4] = {"The quick brown fox jumps over the lazy dog.",
                                         "She sells sea shells by the sea shore.",
                                         "Peter Piper picked a peck of pickled peppers.",
                                         "How much wood would a woodchuck chuck?"};
    choir_phonemizer *us = choir_phonemizer_create(CHOIR_PHONEMIZER_EN_US, NULL);
    choir_phonemizer *gb = choir_phonemizer_create(CHOIR_PHONEMIZER_EN_GB, NULL);
    assert_non_null(us);
    assert_non_null(gb);
    char *serial[4];
    for (int i = 0; i < 4; i++) serial[i] = choir_phonemize(i % 2 ? gb : us, texts[i], NULL);
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){.p = i % 2 ? gb : us, .text = texts[i]};
        assert_int_equal(pthread_create(&th[i], NULL, run_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_non_null(jobs[i].out);
        assert_string_equal(jobs[i].out, serial[i]);
        choir_free(jobs[i].out);
        choir_free(serial[i]);
    }
    choir_phonemizer_free(us);
    choir_phonemizer_free(gb);
}

/* --- splitter --------------------------------------------------------- */

static choir_clause_list make_clauses(const char *const *text, const bool *ends, int n) {
    choir_clause_list l = {.items = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof(choir_clause)), .n = n};
    for (int i = 0; i < n; i++) {
        l.items[i].phonemes = choir_strdup(text[i]);
        l.items[i].n_phonemes = choir_utf8_count(text[i]);
        l.items[i].sentence_end = ends[i];
    }
    return l;
}

static void test_split_prefers_sentence_ends(void **state) {
    (void)state;
    static const char *const t[] = {"ə bˈɪt,", "mˈɔɹ.", "ænd sˈʌm,", "ˈɛls", "ɔlsO."};
    static const bool e[] = {false, true, false, false, true};
    choir_clause_list l = make_clauses(t, e, 5);
    choir_piece_list ps;
    /* 20 phonemes: "ə bˈɪt, mˈɔɹ. ænd sˈʌm," would be 23; the cut falls after "mˈɔɹ." */
    assert_int_equal(choir_split_pieces(&l, 20, false, &ps, NULL), 0);
    assert_int_equal(ps.n, 2);
    assert_string_equal(ps.items[0].phonemes, "ə bˈɪt, mˈɔɹ.");
    assert_string_equal(ps.items[1].phonemes, "ænd sˈʌm, ˈɛls ɔlsO.");
    for (int i = 0; i < ps.n; i++) assert_true(ps.items[i].n_phonemes <= 20);
    choir_piece_list_free(&ps);

    /* the streaming shape: the first clause alone */
    assert_int_equal(choir_split_pieces(&l, 510, true, &ps, NULL), 0);
    assert_int_equal(ps.n, 2);
    assert_string_equal(ps.items[0].phonemes, "ə bˈɪt,");
    assert_string_equal(ps.items[1].phonemes, "mˈɔɹ. ænd sˈʌm, ˈɛls ɔlsO.");
    choir_piece_list_free(&ps);

    /* everything fits: one piece */
    assert_int_equal(choir_split_pieces(&l, 510, false, &ps, NULL), 0);
    assert_int_equal(ps.n, 1);
    choir_piece_list_free(&ps);
    choir_clause_list_free(&l);
}

static void test_split_long_clause(void **state) {
    (void)state;
    static const char *const t[] = {"ab cd ef gh ij", "klmnopqrstuvwxyz"};
    static const bool e[] = {false, true};
    choir_clause_list l = make_clauses(t, e, 2);
    choir_piece_list ps;
    assert_int_equal(choir_split_pieces(&l, 6, false, &ps, NULL), 0);
    /* words packed up to 6 code points, then a 16-letter word cut hard */
    const char *want[] = {"ab cd", "ef gh", "ij", "klmnop", "qrstuv", "wxyz"};
    assert_int_equal(ps.n, 6);
    for (int i = 0; i < ps.n; i++) assert_string_equal(ps.items[i].phonemes, want[i]);
    choir_piece_list_free(&ps);
    choir_clause_list_free(&l);
    assert_int_equal(choir_split_pieces(&l, 0, false, &ps, NULL), CHOIR_EINVAL);
}

static void test_split_long_text(void **state) {
    (void)state;
    choir_err err = {0};
    choir_phonemizer *p = choir_phonemizer_create(CHOIR_PHONEMIZER_EN_US, &err);
    assert_non_null(p);
    char text[8192] = "";
    for (int i = 0; i < 30; i++)
        strcat(text, "Speech synthesis turns written words into sound, one clause at a time. ");
    choir_clause_list l;
    assert_int_equal(choir_phonemize_clauses(p, text, &l, &err), 0);
    assert_int_equal(l.n, 60);
    choir_piece_list ps;
    assert_int_equal(choir_split_pieces(&l, 510, false, &ps, &err), 0);
    assert_true(ps.n >= 3);
    int total = 0;
    for (int i = 0; i < ps.n; i++) {
        assert_true(ps.items[i].n_phonemes <= 510);
        assert_true(ps.items[i].n_phonemes > 0);
        /* every piece ends a sentence: there is always one within reach */
        size_t n = strlen(ps.items[i].phonemes);
        assert_int_equal(ps.items[i].phonemes[n - 1], '.');
        total += ps.items[i].n_phonemes;
    }
    int clauses_total = 0;
    for (int i = 0; i < l.n; i++) clauses_total += l.items[i].n_phonemes;
    /* nothing lost: the pieces hold every clause, joined by single spaces */
    assert_int_equal(total, clauses_total + (l.n - ps.n));
    choir_piece_list_free(&ps);
    choir_clause_list_free(&l);
    choir_phonemizer_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_ipa),
        cmocka_unit_test(test_phonemize_sentence),
        cmocka_unit_test(test_british),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_split_prefers_sentence_ends),
        cmocka_unit_test(test_split_long_clause),
        cmocka_unit_test(test_split_long_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
