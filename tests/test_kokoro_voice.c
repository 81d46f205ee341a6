/* Kokoro voice packs: .bin, .pt and .safetensors forms agree, weighted mixes,
 * style-row selection, and clear errors for bad voices. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/kokoro.h"
#include "choir/safetensors.h"
#include "testutil.h"

#define ROWS CHOIR_KOKORO_VOICE_ROWS
#define DIM CHOIR_KOKORO_STYLE_DIM

static const char *voices_dir(void) { return tu_fixture("kokoro/voices"); }

static void assert_same_pack(const choir_kokoro_voice *a, const choir_kokoro_voice *b) {
    for (int r = 1; r <= ROWS; r++)
        assert_memory_equal(choir_kokoro_voice_style(a, r), choir_kokoro_voice_style(b, r),
                            DIM * sizeof(float));
}

static void test_bin_matches_pt(void **state) {
    (void)state;
    choir_err err = {0};
    choir_kokoro_voice *bin = choir_kokoro_voice_load("af_heart", voices_dir(), &err);
    assert_non_null(bin);
    choir_kokoro_voice *pt = choir_kokoro_voice_load(tu_fixture("kokoro/pth/af_heart.pt"), NULL, &err);
    if (!pt) fail_msg("%s", err.msg);
    assert_same_pack(bin, pt);
    /* the .bin is raw little-endian float32 [510][256]: row 13 starts at float 13 * 256 */
    size_t len = 0;
    float *raw = tu_read_file(tu_fixture("kokoro/voices/af_heart.bin"), &len);
    assert_int_equal(len, ROWS * DIM * sizeof(float));
    assert_memory_equal(choir_kokoro_voice_style(bin, 14), raw + 13 * DIM, DIM * sizeof(float));
    free(raw);
    choir_kokoro_voice_free(bin);
    choir_kokoro_voice_free(pt);
}

static void test_safetensors_voice(void **state) {
    (void)state;
    choir_err err = {0};
    size_t len = 0;
    float *raw = tu_read_file(tu_fixture("kokoro/voices/am_adam.bin"), &len);
    assert_non_null(raw);
    choir_st_writer *w = choir_st_writer_create(&err);
    int64_t shape[3] = {ROWS, 1, DIM};
    assert_int_equal(choir_st_writer_add(w, "voice", CHOIR_DTYPE_F32, 3, shape, raw, &err), 0);
    const char *path = tu_tmpfile("am_adam.safetensors");
    assert_int_equal(choir_st_writer_save(w, path, &err), 0);
    choir_st_writer_free(w);

    choir_kokoro_voice *st = choir_kokoro_voice_load(path, NULL, &err);
    if (!st) fail_msg("%s", err.msg);
    choir_kokoro_voice *bin = choir_kokoro_voice_load("am_adam", voices_dir(), &err);
    assert_non_null(bin);
    assert_same_pack(st, bin);
    choir_kokoro_voice_free(st);
    choir_kokoro_voice_free(bin);
    free(raw);
}

static void test_weighted_mix(void **state) {
    (void)state;
    choir_err err = {0};
    choir_kokoro_voice *a = choir_kokoro_voice_load("af_heart", voices_dir(), &err);
    choir_kokoro_voice *b = choir_kokoro_voice_load("am_adam", voices_dir(), &err);
    choir_kokoro_voice *mix = choir_kokoro_voice_load("af_heart(2)+am_adam(1)", voices_dir(), &err);
    choir_kokoro_voice *mean = choir_kokoro_voice_load("af_heart,am_adam", voices_dir(), &err);
    assert_non_null(a);
    assert_non_null(b);
    if (!mix || !mean) fail_msg("%s", err.msg);
    double max_mix = 0, max_mean = 0;
    for (int r = 1; r <= ROWS; r++) {
        const float *pa = choir_kokoro_voice_style(a, r), *pb = choir_kokoro_voice_style(b, r);
        const float *pm = choir_kokoro_voice_style(mix, r), *pn = choir_kokoro_voice_style(mean, r);
        for (int i = 0; i < DIM; i++) {
            max_mix = fmax(max_mix, fabs(pm[i] - (2.0 * pa[i] + pb[i]) / 3.0));
            max_mean = fmax(max_mean, fabs(pn[i] - (pa[i] + (double)pb[i]) / 2.0));
        }
    }
    assert_true(max_mix < 1e-6);
    assert_true(max_mean < 1e-6);
    /* the mix really differs from both inputs */
    assert_true(memcmp(choir_kokoro_voice_style(mix, 20), choir_kokoro_voice_style(a, 20),
                       DIM * sizeof(float)) != 0);
    choir_kokoro_voice_free(a);
    choir_kokoro_voice_free(b);
    choir_kokoro_voice_free(mix);
    choir_kokoro_voice_free(mean);
}

static void test_style_rows(void **state) {
    (void)state;
    choir_err err = {0};
    choir_kokoro_voice *v = choir_kokoro_voice_load("af_heart", voices_dir(), &err);
    assert_non_null(v);
    /* the reference uses row len(phonemes) - 1, clamped to the pack */
    assert_ptr_equal(choir_kokoro_voice_style(v, 1), choir_kokoro_voice_style(v, 0));
    assert_ptr_equal(choir_kokoro_voice_style(v, 510), choir_kokoro_voice_style(v, 5000));
    assert_ptr_equal(choir_kokoro_voice_style(v, 14) - 13 * DIM, choir_kokoro_voice_style(v, 1));
    choir_kokoro_voice_free(v);
    choir_kokoro_voice_free(NULL);
}

static void test_bad_voices(void **state) {
    (void)state;
    choir_err err = {0};
    assert_null(choir_kokoro_voice_load("no_such_voice", voices_dir(), &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no_such_voice"));
    assert_null(choir_kokoro_voice_load("af_heart(x)", voices_dir(), &err));
    assert_int_equal(err.code, CHOIR_EINVAL);
    assert_null(choir_kokoro_voice_load("af_heart+", voices_dir(), &err));
    assert_int_equal(err.code, CHOIR_EINVAL);
    assert_null(choir_kokoro_voice_load("", voices_dir(), &err));
    float half[ROWS * DIM / 2] = {0};
    const char *path = tu_tmpfile("short.bin");
    assert_int_equal(tu_write_file(path, half, sizeof half), 0);
    assert_null(choir_kokoro_voice_load(path, NULL, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    /* the evil pickle is refused, not run */
    assert_null(choir_kokoro_voice_load(tu_fixture("kokoro/pth/evil.pth"), NULL, &err));
    assert_true(err.code < 0);
}

/* A voice that reaches the model over the API: names from voices/ only. */
static void test_named_voices(void **state) {
    (void)state;
    choir_err err = {0};
    const char *dir = voices_dir();
    choir_kokoro_voice *plain = choir_kokoro_voice_load("af_heart(2)+am_adam(1)", dir, &err);
    choir_kokoro_voice *named = choir_kokoro_voice_load_named("af_heart(2)+am_adam(1)", dir, &err);
    if (!named) fail_msg("%s", err.msg);
    assert_non_null(plain);
    assert_same_pack(plain, named);
    choir_kokoro_voice_free(plain);
    choir_kokoro_voice_free(named);

    /* A file of exactly a voice's size outside voices/ loads as a path through
     * the trusted loader, and is never opened by the named one. */
    float *pack = calloc(ROWS * DIM, sizeof *pack);
    assert_non_null(pack);
    const char *outside = tu_tmpfile("secret.bin");
    assert_int_equal(tu_write_file(outside, pack, ROWS * DIM * sizeof *pack), 0);
    choir_kokoro_voice *v = choir_kokoro_voice_load(outside, dir, &err);
    assert_non_null(v);
    choir_kokoro_voice_free(v);
    char rel[1024];
    snprintf(rel, sizeof rel, "../../../../../../../../..%s", outside);
    char abs_voice[1024];
    snprintf(abs_voice, sizeof abs_voice, "%s/af_heart.bin", dir);
    const char *refused[] = {outside, rel, abs_voice, "/etc/passwd", "../voices/af_heart", "./af_heart",
                             ".hidden", "af_heart+/etc/passwd", "af_heart(1)+../x(2)", "af heart",
                             "af_heart\\x"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        choir_err e = {0};
        assert_null(choir_kokoro_voice_load_named(refused[i], dir, &e));
        if (e.code != CHOIR_EINVAL) fail_msg("%s: code %d (%s)", refused[i], e.code, e.msg);
        /* the folder is never named to the caller */
        assert_null(strstr(e.msg, dir));
    }
    choir_err e = {0};
    assert_null(choir_kokoro_voice_load_named("no_such_voice", dir, &e));
    assert_int_equal(e.code, CHOIR_ENOTFOUND);
    assert_non_null(strstr(e.msg, "no_such_voice"));
    assert_null(strstr(e.msg, "/"));
    /* a damaged pack in voices/: the reason goes to the log, not the caller */
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", tu_tmpfile("voices"));
    assert_int_equal(mkdir(tmp, 0755), 0);
    char bad[1024];
    snprintf(bad, sizeof bad, "%s/broken.bin", tmp);
    assert_int_equal(tu_write_file(bad, pack, 100), 0);
    assert_null(choir_kokoro_voice_load_named("broken", tmp, &e));
    assert_int_equal(e.code, CHOIR_EFORMAT);
    assert_null(strstr(e.msg, "/"));
    assert_null(choir_kokoro_voice_load_named("af_heart", NULL, &e));
    free(pack);
}

static void test_alloc_failures(void **state) {
    (void)state;
    for (int64_t n = 1; n < 20; n++) {
        choir_err err = {0};
        choir_alloc_fail_after(n);
        choir_kokoro_voice *v = choir_kokoro_voice_load("af_heart(1)+am_adam(3)", voices_dir(), &err);
        int64_t used = choir_alloc_fail_after(0);
        if (v) {
            choir_kokoro_voice_free(v);
            if (used < n) break;
        } else {
            assert_true(err.code < 0);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bin_matches_pt),   cmocka_unit_test(test_safetensors_voice),
        cmocka_unit_test(test_weighted_mix),     cmocka_unit_test(test_style_rows),
        cmocka_unit_test(test_bad_voices),       cmocka_unit_test(test_named_voices),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
