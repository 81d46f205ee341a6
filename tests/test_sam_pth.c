/* SAM-Audio from Meta's published layout: a folder holding `config.json` and
 * `checkpoint.pt`, a torch.save archive whose pickle is the flat state dict
 * {name: tensor} (torch.load(weights_only=True) in the reference), with the
 * vision encoder's, the span predictor's and the rankers' tensors beside the
 * audio model's. The test writes one from the sam-tiny fixture's manifest,
 * adds such tensors, and checks that the restricted .pth reader loads it
 * with none of them read (the weights held are those of the safetensors
 * copy) and that it separates bit for bit as the safetensors copy does. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "choir/sam_audio.h"
#include "testutil.h"
#include "torch_save.h"

/* Tensors the audio model never reads, in the checkpoint's names. */
static const char *const UNUSED[] = {
    "{\"name\":\"vision_encoder.model.conv1.weight\",\"shape\":[16,3,4,4],\"offset\":0,\"scale\":1}",
    "{\"name\":\"span_predictor.head.weight\",\"shape\":[4,64],\"offset\":0,\"scale\":1}",
    "{\"name\":\"visual_ranker.proj.weight\",\"shape\":[8,8],\"offset\":0,\"scale\":1}",
    "{\"name\":\"text_ranker.proj.bias\",\"shape\":[8],\"offset\":0,\"scale\":1}",
};

static void write_checkpoint_pt(const char *path) {
    size_t len = 0;
    char *text = tu_read_file(tu_fixture("sam-audio/sam-tiny/manifest.json"), &len);
    assert_non_null(text);
    cJSON *man = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(man);
    zipw z = {.f = fopen(path, "wb")};
    assert_non_null(z.f);
    tsw_buf pk = {0};
    put_u8(&pk, 0x80), put_u8(&pk, 2), put_u8(&pk, '}'), put_u8(&pk, '(');
    int key = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(man, "tensors")) {
        tsw_add_manifest_tensor(&z, &pk, t, "checkpoint", cJSON_GetObjectItem(t, "name")->valuestring, key++);
    }
    for (size_t i = 0; i < sizeof UNUSED / sizeof UNUSED[0]; i++) {
        cJSON *u = cJSON_Parse(UNUSED[i]);
        assert_non_null(u);
        tsw_add_manifest_tensor(&z, &pk, u, "checkpoint", cJSON_GetObjectItem(u, "name")->valuestring, key++);
        cJSON_Delete(u);
    }
    put_u8(&pk, 'u'), put_u8(&pk, '.');
    zip_add(&z, "checkpoint/data.pkl", pk.p, pk.n);
    zip_add(&z, "checkpoint/byteorder", "little", 6);
    zip_add(&z, "checkpoint/version", "3\n", 2);
    zip_finish(&z);
    free(pk.p);
    cJSON_Delete(man);
}

static void test_published_checkpoint(void **state) {
    (void)state;
    choir_err err = {0};
    char st_dir[1024], pt_dir[1024], path[1200];
    snprintf(st_dir, sizeof st_dir, "%s", tu_tmpfile("sam-st"));
    snprintf(pt_dir, sizeof pt_dir, "%s", tu_tmpfile("sam-pt"));
    assert_int_equal(tu_sam_tiny_dir(st_dir, &err), 0);
    /* The same folder (config, t5/), with checkpoint.pt for the weights. */
    assert_int_equal(tu_sam_tiny_dir(pt_dir, &err), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", pt_dir);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof path, "%s/checkpoint.pt", pt_dir);
    write_checkpoint_pt(path);

    choir_sam *st = choir_sam_load(st_dir, NULL, &err);
    assert_non_null(st);
    choir_sam *pt = choir_sam_load(pt_dir, NULL, &err);
    if (!pt) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(pt);
    /* Nothing of the vision encoder, span predictor or rankers is held. */
    assert_int_equal(choir_sam_weight_bytes(pt), choir_sam_weight_bytes(st));

    enum { N = 9000 };
    static float x[N], ta[N], ra[N], tb[N], rb[N];
    tu_fill_uniform(x, N, 7, -0.5f, 0.5f);
    choir_sam_params p;
    choir_sam_default_params(&p);
    p.steps = 2;
    p.method = CHOIR_SAM_EULER;
    choir_sam_anchor a = {1, 0.05, 0.1};
    assert_int_equal(choir_sam_separate(pt, x, N, "man speaking", &a, 1, &p, ta, ra, &err), 0);
    assert_int_equal(choir_sam_separate(st, x, N, "man speaking", &a, 1, &p, tb, rb, &err), 0);
    assert_memory_equal(ta, tb, sizeof ta);
    assert_memory_equal(ra, rb, sizeof ra);
    assert_true(tu_rel_l2(ta, ra, N) > 1e-3);
    choir_sam_free(pt);
    choir_sam_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
