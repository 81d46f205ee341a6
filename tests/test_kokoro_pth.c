/* Kokoro from an official-layout kokoro-v1_0.pth: the test writes one itself
 * (a torch.save zip archive whose pickle is {group: {"module." + key: tensor}},
 * every tensor randw-v1 as in the parity fixture), loads it through the real
 * loader and checks it gives bit for bit the audio of the same weights loaded
 * from safetensors, with the fixture's durations. */
// ctest: labels=slow;nosan timeout=600
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/kokoro.h"
#include "choir/randw.h"
#include "testutil.h"
#include "torch_save.h"

/* Writes dir/kokoro-v1_0.pth from the fixture manifest, grouped as the
 * official checkpoint: top-level group -> {"module." + rest: tensor}. */
static void write_official_pth(const char *path) {
    size_t len = 0;
    char *text = tu_read_file(tu_fixture("kokoro/kokoro-v1/manifest.json"), &len);
    assert_non_null(text);
    cJSON *man = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(man);
    const cJSON *tensors = cJSON_GetObjectItem(man, "tensors");
    static const char *const groups[] = {"bert", "bert_encoder", "predictor", "text_encoder", "decoder"};
    zipw z = {.f = fopen(path, "wb")};
    assert_non_null(z.f);
    tsw_buf pk = {0};
    put_u8(&pk, 0x80), put_u8(&pk, 2), put_u8(&pk, '}'), put_u8(&pk, '(');
    int key = 0;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        size_t gl = strlen(groups[g]);
        pk_str(&pk, groups[g]);
        put_u8(&pk, '}'), put_u8(&pk, '(');
        const cJSON *t;
        cJSON_ArrayForEach(t, tensors) {
            const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
            if (strncmp(name, groups[g], gl) != 0 || name[gl] != '.') continue;
            char keyname[600];
            snprintf(keyname, sizeof keyname, "module.%s", name + gl + 1);
            tsw_add_manifest_tensor(&z, &pk, t, "kokoro-v1_0", keyname, key++);
        }
        put_u8(&pk, 'u');
    }
    put_u8(&pk, 'u'), put_u8(&pk, '.');
    zip_add(&z, "kokoro-v1_0/data.pkl", pk.p, pk.n);
    zip_add(&z, "kokoro-v1_0/byteorder", "little", 6);
    zip_add(&z, "kokoro-v1_0/version", "3\n", 2);
    zip_finish(&z);
    free(pk.p);
    cJSON_Delete(man);
}

static const int32_t hello_ids[16] = {0, 50, 83, 54, 156, 57, 135, 16, 65, 156, 87, 158, 54, 46, 4, 0};

typedef struct durs {
    float pred[16];
    int seen;
} durs;

static void keep_durations(void *user, const char *stage, const float *data, int ndim,
                           const int64_t *shape) {
    durs *d = user;
    if (strcmp(stage, "pred_dur") == 0 && ndim == 1 && shape[0] == 16) {
        memcpy(d->pred, data, sizeof d->pred);
        d->seen = 1;
    }
}

static void test_pth_equals_safetensors(void **state) {
    (void)state;
    choir_err err = {0};
    char dir_st[600], dir_pth[600], path[700];
    snprintf(dir_st, sizeof dir_st, "%s", tu_tmpfile("st"));
    snprintf(dir_pth, sizeof dir_pth, "%s", tu_tmpfile("pth"));
    assert_int_equal(choir_randw_write_checkpoint(tu_fixture("kokoro/kokoro-v1/manifest.json"),
                                                  tu_fixture("kokoro/kokoro-v1/config.json"), dir_st, &err), 0);
    /* the .pth directory: config.json and kokoro-v1_0.pth, nothing else */
    assert_int_equal(choir_randw_write_checkpoint(tu_fixture("kokoro/kokoro-v1/manifest.json"),
                                                  tu_fixture("kokoro/kokoro-v1/config.json"), dir_pth, &err), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir_pth);
    assert_int_equal(remove(path), 0);
    snprintf(path, sizeof path, "%s/kokoro-v1_0.pth", dir_pth);
    write_official_pth(path);

    choir_kokoro *m_st = choir_kokoro_load(dir_st, &err);
    if (!m_st) fail_msg("%s", err.msg);
    choir_kokoro *m_pth = choir_kokoro_load(dir_pth, &err);
    if (!m_pth) fail_msg("%s", err.msg);
    choir_kokoro_voice *v = choir_kokoro_voice_load("af_heart", tu_fixture("kokoro/voices"), &err);
    assert_non_null(v);

    /* phonemes -> ids with the config's vocabulary, as in the fixture's meta.json */
    int32_t ids[64];
    int dropped = -1;
    assert_int_equal(choir_kokoro_phonemes_to_ids(m_pth, "həlˈoʊ wˈɜːld.", ids, 64, &dropped, &err), 16);
    assert_int_equal(dropped, 0);
    assert_memory_equal(ids, hello_ids, sizeof hello_ids);
    assert_int_equal(choir_kokoro_phonemes_to_ids(m_pth, "hə<l", ids, 64, &dropped, &err), 5);
    assert_int_equal(dropped, 1);

    choir_kokoro_params p = choir_kokoro_default_params();
    p.noise = CHOIR_KOKORO_NOISE_ZERO;
    durs d = {0};
    p.trace = keep_durations;
    p.trace_user = &d;
    const float *style = choir_kokoro_voice_style(v, 14);
    float *a_st = NULL, *a_pth = NULL;
    int64_t n_st = 0, n_pth = 0;
    assert_int_equal(choir_kokoro_synthesize_ids(m_st, hello_ids, 16, style, &p, &a_st, &n_st, &err), 0);
    assert_int_equal(choir_kokoro_synthesize_ids(m_pth, hello_ids, 16, style, &p, &a_pth, &n_pth, &err), 0);
    assert_int_equal(n_st, 38400);
    assert_int_equal(n_pth, n_st);
    assert_memory_equal(a_st, a_pth, (size_t)n_st * sizeof(float));
    assert_true(d.seen);
    for (int i = 0; i < 16; i++) assert_true(d.pred[i] == 4.0f); /* the fixture's pred_dur */
    choir_free(a_st);
    choir_free(a_pth);
    choir_kokoro_voice_free(v);
    choir_kokoro_free(m_st);
    choir_kokoro_free(m_pth);
}

static void test_subset_pth_names_missing_tensor(void **state) {
    (void)state;
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s", tu_tmpfile("subset"));
    choir_err err = {0};
    assert_int_equal(choir_randw_write_checkpoint(tu_fixture("kokoro/kokoro-v1/manifest.json"),
                                                  tu_fixture("kokoro/kokoro-v1/config.json"), dir, &err), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(remove(path), 0);
    size_t len = 0;
    void *sub = tu_read_file(tu_fixture("kokoro/pth/kokoro_subset.pth"), &len);
    assert_non_null(sub);
    snprintf(path, sizeof path, "%s/kokoro-v1_0.pth", dir);
    assert_int_equal(tu_write_file(path, sub, len), 0);
    free(sub);
    assert_null(choir_kokoro_load(dir, &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "is missing"));
    assert_non_null(strstr(err.msg, "kokoro-v1_0.pth"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pth_equals_safetensors),
        cmocka_unit_test(test_subset_pth_names_missing_tensor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
