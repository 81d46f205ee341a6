/* MossFormer2 from ClearerVoice's published layout: a folder holding
 * `last_best_checkpoint` (a text file naming the checkpoint) and
 * `last_best_checkpoint.pt`, a torch.save archive whose pickle is
 * {"model": {"module." + key: tensor}} (the DataParallel form the spec
 * expects). The test writes one from the fixture manifest with a minimal
 * torch.save writer (the one tests/test_kokoro_pth.c uses) and checks that the
 * model loads from it and enhances bit for bit as it does from safetensors. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/mossformer2.h"
#include "choir/randw.h"
#include "testutil.h"
#include "torch_save.h"

#define FIX "mossformer2/mossformer2-se-48k"

/* Writes `path` from the fixture manifest (learnable tensors only: the
 * constants are left out, as the loader computes them). */
static void write_published_pt(const char *path) {
    size_t len = 0;
    char *text = tu_read_file(tu_fixture(FIX "/manifest.json"), &len);
    assert_non_null(text);
    cJSON *man = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(man);
    const cJSON *tensors = cJSON_GetObjectItem(man, "tensors");
    zipw z = {.f = fopen(path, "wb")};
    assert_non_null(z.f);
    tsw_buf pk = {0};
    put_u8(&pk, 0x80), put_u8(&pk, 2), put_u8(&pk, '}'), put_u8(&pk, '(');
    pk_str(&pk, "model");
    put_u8(&pk, '}'), put_u8(&pk, '(');
    int key = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
        char keyname[600];
        snprintf(keyname, sizeof keyname, "module.%s", name);
        tsw_add_manifest_tensor(&z, &pk, t, "last_best_checkpoint", keyname, key++);
    }
    put_u8(&pk, 'u');
    put_u8(&pk, 'u'), put_u8(&pk, '.');
    zip_add(&z, "last_best_checkpoint/data.pkl", pk.p, pk.n);
    zip_add(&z, "last_best_checkpoint/byteorder", "little", 6);
    zip_add(&z, "last_best_checkpoint/version", "3\n", 2);
    zip_finish(&z);
    free(pk.p);
    cJSON_Delete(man);
}

static void test_published_layout(void **state) {
    (void)state;
    choir_err err = {0};
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s", tu_tmpfile("published"));
    snprintf(path, sizeof path, "mkdir -p %s", dir);
    assert_int_equal(system(path), 0);
    snprintf(path, sizeof path, "%s/last_best_checkpoint.pt", dir);
    write_published_pt(path);
    snprintf(path, sizeof path, "%s/last_best_checkpoint", dir);
    assert_int_equal(tu_write_file(path, "last_best_checkpoint.pt\n", 24), 0);
    choir_mf2 *pt = choir_mf2_load(dir, &err);
    if (!pt) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(pt);

    const char *st_dir = tu_tmpfile("st");
    char manifest[1024];
    snprintf(manifest, sizeof manifest, "%s", tu_fixture(FIX "/manifest.json"));
    assert_int_equal(choir_randw_write_checkpoint(manifest, NULL, st_dir, &err), 0);
    choir_mf2 *st = choir_mf2_load(st_dir, &err);
    assert_non_null(st);

    enum { N = 9600 };
    static float x[N], a[N], b[N];
    tu_fill_uniform(x, N, 9, -0.4f, 0.4f);
    assert_int_equal(choir_mf2_enhance(pt, x, N, a, NULL, &err), 0);
    assert_int_equal(choir_mf2_enhance(st, x, N, b, NULL, &err), 0);
    assert_memory_equal(a, b, sizeof a);
    double e = 0;
    for (int i = 0; i < N; i++) e += (double)a[i] * a[i];
    assert_true(e > 0);
    choir_mf2_free(pt);
    choir_mf2_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
