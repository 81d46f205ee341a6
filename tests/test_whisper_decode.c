/* Whisper decoding rules on synthetic logits: suppression, the timestamp rules,
 * special token ids, the compression ratio (against Python's zlib.compress). */
#include <math.h>
#include <string.h>

#include "choir/whisper.h"
#include "testutil.h"

#define V_MULTI 51865

static float g_logits[V_MULTI + 1];

static void fill_flat(float *l, int V) {
    for (int i = 0; i < V; i++) l[i] = 0.0f;
}

static choir_whisper_filter make_filter(const choir_whisper_specials *sp, int sample_begin,
                                        bool timestamps, int32_t *sup, int n_sup) {
    choir_whisper_filter f = {.sp = sp, .n_vocab = V_MULTI, .sample_begin = sample_begin,
                              .timestamps = timestamps, .suppress_blank = true, .suppress = sup,
                              .n_suppress = n_sup, .max_initial_timestamp_index = 50};
    return f;
}

static void test_specials(void **state) {
    (void)state;
    choir_whisper_specials sp;
    choir_whisper_specials_from_vocab(51865, &sp);
    assert_int_equal(sp.eot, 50257);
    assert_int_equal(sp.sot, 50258);
    assert_int_equal(sp.translate, 50358);
    assert_int_equal(sp.transcribe, 50359);
    assert_int_equal(sp.no_timestamps, 50363);
    assert_int_equal(sp.timestamp_begin, 50364);
    choir_whisper_specials_from_vocab(51866, &sp);
    assert_int_equal(sp.num_languages, 100);
    assert_int_equal(sp.transcribe, 50360);
    assert_int_equal(sp.timestamp_begin, 50365);
    assert_int_equal(sp.timestamp_begin + 1500, 51865); /* <|30.00|> is the last id */
    choir_whisper_specials_from_vocab(51864, &sp);
    assert_false(sp.multilingual);
    assert_int_equal(sp.eot, 50256);
    assert_int_equal(sp.sot_prev, 50360);
    assert_int_equal(sp.timestamp_begin, 50363);
    assert_int_equal(choir_whisper_lang_index("yue"), 99);
    assert_string_equal(choir_whisper_lang_code(2), "de");
    assert_int_equal(choir_whisper_lang_index("xx"), -1);
}

static void test_suppress(void **state) {
    (void)state;
    choir_whisper_specials sp;
    choir_whisper_specials_from_vocab(V_MULTI, &sp);
    int32_t sup[128];
    int n = choir_whisper_default_suppress(&sp, sup, 128);
    assert_int_equal(n, 88);
    choir_whisper_filter f = make_filter(&sp, 3, false, sup, n);
    int32_t toks[8] = {sp.sot, sp.lang0, sp.transcribe, 400};
    /* At the first sampled position: blank and eot are forbidden too. */
    fill_flat(g_logits, V_MULTI);
    choir_whisper_filter_logits(&f, toks, 3, g_logits);
    assert_true(isinf(g_logits[220]) && isinf(g_logits[sp.eot]));
    assert_true(isinf(g_logits[1]) && isinf(g_logits[50254]) && isinf(g_logits[sp.no_speech]));
    assert_true(isinf(g_logits[sp.transcribe]) && isinf(g_logits[sp.sot_prev]));
    assert_false(isinf(g_logits[400]));
    /* Without timestamps, the timestamp ids are left alone. */
    assert_false(isinf(g_logits[sp.timestamp_begin + 700]));
    /* Later positions may end or emit a space. */
    fill_flat(g_logits, V_MULTI);
    choir_whisper_filter_logits(&f, toks, 4, g_logits);
    assert_false(isinf(g_logits[220]) || isinf(g_logits[sp.eot]));
    assert_true(isinf(g_logits[1]));
}

static void test_timestamp_rules(void **state) {
    (void)state;
    choir_whisper_specials sp;
    choir_whisper_specials_from_vocab(V_MULTI, &sp);
    int tb = sp.timestamp_begin;
    choir_whisper_filter f = make_filter(&sp, 3, true, NULL, 0);
    int32_t t[16] = {sp.sot, sp.lang0, sp.transcribe};

    /* First sampled token: a timestamp in [0, 1.00 s]. */
    fill_flat(g_logits, V_MULTI);
    choir_whisper_filter_logits(&f, t, 3, g_logits);
    for (int i = 0; i < tb; i++) assert_true(isinf(g_logits[i]));
    assert_false(isinf(g_logits[tb]));
    assert_false(isinf(g_logits[tb + 50]));
    assert_true(isinf(g_logits[tb + 51]));
    assert_true(isinf(g_logits[sp.no_timestamps]));

    /* <|0.40|> text: text or a later timestamp (strictly after 0.40). */
    t[3] = tb + 20;
    t[4] = 1000;
    fill_flat(g_logits, V_MULTI);
    g_logits[500] = 30.0f; /* a clear text winner, so the mass rule stays out */
    choir_whisper_filter_logits(&f, t, 5, g_logits);
    assert_true(isinf(g_logits[tb + 20]));
    assert_false(isinf(g_logits[tb + 21]));
    assert_false(isinf(g_logits[500]));

    /* <|0.40|> text <|1.00|>: an end timestamp must be followed by a timestamp
     * (>= 1.00) or eot, never text. */
    t[5] = tb + 50;
    fill_flat(g_logits, V_MULTI);
    g_logits[sp.eot] = 30.0f;
    choir_whisper_filter_logits(&f, t, 6, g_logits);
    for (int i = 0; i < sp.eot; i++) assert_true(isinf(g_logits[i]));
    assert_false(isinf(g_logits[sp.eot]));
    assert_true(isinf(g_logits[tb + 49]));
    assert_false(isinf(g_logits[tb + 50]));

    /* ... <|1.00|> <|1.00|>: a closed pair; text next, no timestamp. */
    t[6] = tb + 50;
    fill_flat(g_logits, V_MULTI);
    g_logits[700] = 30.0f;
    choir_whisper_filter_logits(&f, t, 7, g_logits);
    for (int i = tb; i < V_MULTI; i++) assert_true(isinf(g_logits[i]));
    assert_false(isinf(g_logits[700]));

    /* Probability mass: many plausible timestamps beat the best text token. */
    fill_flat(g_logits, V_MULTI);
    for (int i = 0; i < tb; i++) g_logits[i] = -20.0f;
    g_logits[42] = 1.0f;
    for (int i = tb + 21; i < V_MULTI; i++) g_logits[i] = -2.0f;
    choir_whisper_filter_logits(&f, t, 5, g_logits);
    assert_true(isinf(g_logits[42]));
    assert_false(isinf(g_logits[tb + 30]));
    /* ... and not when the text token dominates. */
    fill_flat(g_logits, V_MULTI);
    for (int i = 0; i < tb; i++) g_logits[i] = -20.0f;
    g_logits[42] = 10.0f;
    for (int i = tb + 21; i < V_MULTI; i++) g_logits[i] = -2.0f;
    choir_whisper_filter_logits(&f, t, 5, g_logits);
    assert_false(isinf(g_logits[42]));
}

static void test_compression_ratio(void **state) {
    (void)state;
    /* Reference values: len(b) / len(zlib.compress(b)) in Python. */
    const char *rep = "hello hello hello hello hello hello hello hello hello hello";
    assert_float_equal(choir_whisper_compression_ratio(rep, strlen(rep)), 59.0 / 17.0, 1e-6);
    const char *jfk = "And so my fellow Americans, ask not what your country can do for you, ask "
                      "what you can do for your country.";
    assert_float_equal(choir_whisper_compression_ratio(jfk, strlen(jfk)), 107.0 / 79.0, 1e-6);
    assert_float_equal(choir_whisper_compression_ratio("", 0), 0.0, 0.0);
}

static void test_default_params(void **state) {
    (void)state;
    choir_whisper_params p;
    choir_whisper_default_params(&p);
    assert_int_equal(p.n_temperatures, 6);
    assert_float_equal(p.temperatures[5], 1.0, 1e-6);
    assert_float_equal(p.compression_ratio_threshold, 2.4, 1e-6);
    assert_float_equal(p.logprob_threshold, -1.0, 1e-6);
    assert_float_equal(p.no_speech_threshold, 0.6, 1e-6);
    assert_int_equal(p.sample_len, 224);
    assert_int_equal(p.max_initial_timestamp_index, 50);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specials),          cmocka_unit_test(test_suppress),
        cmocka_unit_test(test_timestamp_rules),   cmocka_unit_test(test_compression_ratio),
        cmocka_unit_test(test_default_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
