/* randw-v1: the README's check values, slices, and checkpoints built from the
 * fixture manifests and read back through the real loader. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/randw.h"
#include "choir/safetensors.h"
#include "testutil.h"

static void test_check_values(void **state) {
    (void)state;
    assert_true(choir_randw_hash("a.weight") == 0xde73ae9d17c13f4eull);
    float v[4];
    choir_randw_fill("a.weight", 0.0, 1.0, 0, 4, v);
    const float want[4] = {0.34106361865997314f, -0.5416611433029175f, 0.806667685508728f, 0.9545592069625854f};
    assert_memory_equal(v, want, sizeof v);
}

static void test_slices_match_whole(void **state) {
    (void)state;
    float whole[1000], part[300];
    choir_randw_fill("x.bias", 0.5, 0.02, 0, 1000, whole);
    choir_randw_fill("x.bias", 0.5, 0.02, 400, 300, part);
    assert_memory_equal(whole + 400, part, sizeof part);
    for (int i = 0; i < 1000; i++) assert_true(whole[i] >= 0.48f && whole[i] <= 0.52f);
}

/* Builds the fixture's checkpoint, opens it with choir_st_open and checks every
 * manifest tensor's shape and (a spread of) values, and every constant. */
static void check_fixture(const char *fixture_dir) {
    char manifest[1024], config[1024];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", tu_fixture(fixture_dir));
    snprintf(config, sizeof config, "%s/config.json", tu_fixture(fixture_dir));
    const char *out = tu_tmpfile(strrchr(fixture_dir, '/') + 1);
    choir_err err = {0};
    if (choir_randw_write_checkpoint(manifest, config, out, &err) != 0) fail_msg("%s", err.msg);

    char written[1200];
    snprintf(written, sizeof written, "%s/config.json", out);
    size_t a_len, b_len;
    void *a = tu_read_file(written, &a_len), *b = tu_read_file(config, &b_len);
    assert_int_equal(a_len, b_len);
    assert_memory_equal(a, b, a_len);
    free(a);
    free(b);

    cJSON *man = choir_json_load(manifest, &err);
    assert_non_null(man);
    choir_st *st = choir_st_open(out, &err);
    if (!st) fail_msg("%s", err.msg);
    const cJSON *tensors = cJSON_GetObjectItem(man, "tensors"), *e;
    const cJSON *constants = cJSON_GetObjectItem(man, "constants");
    int expected = cJSON_GetArraySize(tensors) + (constants ? cJSON_GetArraySize(constants) : 0);
    assert_int_equal(choir_st_count(st), expected);
    float *ref = NULL;
    size_t ref_cap = 0;
    int k = 0;
    cJSON_ArrayForEach(e, tensors) {
        const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
        const cJSON *shape = cJSON_GetObjectItem(e, "shape");
        int64_t dims[CHOIR_ST_MAX_DIMS];
        int nd = cJSON_GetArraySize(shape);
        for (int d = 0; d < nd; d++) dims[d] = (int64_t)cJSON_GetArrayItem(shape, d)->valuedouble;
        const choir_st_tensor *t = choir_st_expect(st, name, CHOIR_DTYPE_F32, nd, dims, &err);
        if (!t) fail_msg("%s", err.msg);
        /* Every 5th tensor in full, the rest by first and last elements. */
        size_t n = (k++ % 5 == 0) ? (size_t)t->numel : 1;
        if (n > ref_cap) {
            free(ref);
            ref = malloc(n * sizeof *ref);
            ref_cap = n;
        }
        double off = cJSON_GetObjectItem(e, "offset")->valuedouble, sc = cJSON_GetObjectItem(e, "scale")->valuedouble;
        choir_randw_fill(name, off, sc, 0, (int64_t)n, ref);
        assert_memory_equal(t->data, ref, n * sizeof(float));
        choir_randw_fill(name, off, sc, t->numel - 1, 1, ref);
        assert_memory_equal((const float *)t->data + t->numel - 1, ref, sizeof(float));
    }
    if (constants) {
        cJSON_ArrayForEach(e, constants) {
            const choir_st_tensor *t = choir_st_find(st, cJSON_GetObjectItem(e, "name")->valuestring);
            assert_non_null(t);
            const cJSON *vals = cJSON_GetObjectItem(e, "values");
            assert_int_equal(cJSON_GetArraySize(vals), t->numel);
            for (int i = 0; i < t->numel; i++)
                assert_true(((const float *)t->data)[i] == (float)cJSON_GetArrayItem(vals, i)->valuedouble);
        }
    }
    assert_string_equal(choir_st_metadata(st, "generator"), "randw-v1");
    free(ref);
    choir_st_close(st);
    cJSON_Delete(man);
}

static void test_whisper_fixtures(void **state) {
    (void)state;
    check_fixture("whisper/whisper-ml80");
    check_fixture("whisper/whisper-v3m128");
}

static void test_mossformer2_fixture(void **state) {
    (void)state;
    check_fixture("mossformer2/mossformer2-se-48k");
}

static void test_bad_manifests(void **state) {
    (void)state;
    choir_err err = {0};
    const char *m = tu_tmpfile("bad_manifest.json");
    const char *out = tu_tmpfile("bad_out");
    const char *no_scale = "{\"tensors\":[{\"name\":\"a\",\"shape\":[2]}]}";
    assert_int_equal(tu_write_file(m, no_scale, strlen(no_scale)), 0);
    assert_int_equal(choir_randw_write_checkpoint(m, NULL, out, &err), CHOIR_EFORMAT);
    assert_non_null(strstr(err.msg, "'a'"));
    const char *short_const = "{\"tensors\":[],\"constants\":[{\"name\":\"c\",\"shape\":[3],\"dtype\":\"float32\","
                              "\"values\":[1,2]}]}";
    assert_int_equal(tu_write_file(m, short_const, strlen(short_const)), 0);
    assert_int_equal(choir_randw_write_checkpoint(m, NULL, out, &err), CHOIR_EFORMAT);
    assert_non_null(strstr(err.msg, "'c'"));
    const char *twice = "{\"tensors\":[{\"name\":\"a\",\"shape\":[2],\"offset\":0,\"scale\":1},"
                        "{\"name\":\"a\",\"shape\":[2],\"offset\":0,\"scale\":1}]}";
    assert_int_equal(tu_write_file(m, twice, strlen(twice)), 0);
    assert_int_equal(choir_randw_write_checkpoint(m, NULL, out, &err), CHOIR_EINVAL);
    assert_int_equal(choir_randw_write_checkpoint(tu_tmpfile("absent.json"), NULL, out, &err), CHOIR_ENOTFOUND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_values),     cmocka_unit_test(test_slices_match_whole),
        cmocka_unit_test(test_whisper_fixtures), cmocka_unit_test(test_mossformer2_fixture),
        cmocka_unit_test(test_bad_manifests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
