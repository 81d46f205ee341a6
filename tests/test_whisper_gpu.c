/* Whisper's GPU attachment as every build sees it (choir/whisper.h, the
 * engine adapter's GPU contract). A CPU build refuses to attach with
 * CHOIR_EUNSUPPORTED and a clear message, and the model keeps working on the
 * CPU; a CUDA build without a visible device refuses with CHOIR_ENOTFOUND;
 * with a device the encoder runs there and matches the fixture. The device
 * numerics are checked by tests/cuda/whisper_gpu_check.c on a GPU. */
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/model.h"
#include "choir/randw.h"
#include "choir/safetensors.h"
#include "choir/whisper.h"
#include "testutil.h"

#define FX "whisper/whisper-ml80"

static char g_dir[1024];

static int setup(void **state) {
    (void)state;
    choir_err err;
    char cmd[3000];
    snprintf(g_dir, sizeof g_dir, "%s", tu_tmpfile("wgpu"));
    if (choir_randw_write_checkpoint(tu_fixture(FX "/manifest.json"), tu_fixture(FX "/config.json"),
                                     g_dir, &err))
        return -1;
    /* The adapter loads the tokenizer too. */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", tu_fixture("real/tokenizer/multilingual.tiktoken"),
             g_dir);
    return tu_run(cmd, NULL) ? -1 : 0;
}

static void test_default_opts(void **state) {
    (void)state;
    choir_whisper_gpu_opts o;
    memset(&o, 0x5a, sizeof o);
    choir_whisper_default_gpu_opts(&o);
    assert_int_equal(o.device, 0);
    assert_false(o.bf16);
    assert_int_equal(o.max_windows, 8);
    assert_true(o.graphs);
}

/* Attaching fails cleanly, or (with a GPU) the encoder matches the fixture;
 * either way the model works afterwards. */
static void test_attach(void **state) {
    (void)state;
    choir_err err = {0};
    choir_whisper *m = choir_whisper_load(g_dir, &err);
    assert_non_null(m);
    choir_st *ref = choir_st_open(tu_fixture(FX "/reference.safetensors"), &err);
    assert_non_null(ref);
    const choir_st_tensor *mel = choir_st_find(ref, "a0.mel");
    const choir_st_tensor *want = choir_st_find(ref, "a0.encoder_out");
    assert_non_null(mel);
    assert_non_null(want);
    float *enc = choir_alloc(CHOIR_MEM_OTHER, 1500 * 64 * sizeof(float));
    choir_whisper_gpu_stats st;
    int rc = choir_whisper_gpu_attach(m, NULL, &err);
#ifndef CHOIR_HAVE_CUDA
    assert_int_equal(rc, CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "no CUDA backend"));
#else
    if (rc) assert_int_equal(rc, CHOIR_ENOTFOUND); /* no device visible */
#endif
    assert_int_equal(choir_whisper_on_gpu(m), rc == 0);
    assert_int_equal(choir_whisper_gpu_context(m) != NULL, rc == 0);
    assert_int_equal(choir_whisper_gpu_get_stats(m, &st, NULL) == 0, rc == 0);
    if (rc == 0) {
        assert_true(st.weight_bytes > 0 && st.device_bytes >= st.weight_bytes);
        /* Attaching twice is refused. */
        assert_int_equal(choir_whisper_gpu_attach(m, NULL, &err), CHOIR_EINVAL);
    }
    assert_int_equal(choir_whisper_encode(m, mel->data, 1, enc, &err), 0);
    assert_true(tu_rel_l2(enc, want->data, 1500 * 64) < 1e-4);
    choir_whisper_gpu_detach(m);
    choir_whisper_gpu_detach(m); /* no-op */
    assert_false(choir_whisper_on_gpu(m));
    choir_free(enc);
    choir_st_close(ref);
    choir_whisper_free(m);
}

/* The adapter advertises a GPU only in CUDA builds, and a load on a GPU it
 * cannot have fails with the reason. */
static void test_adapter(void **state) {
    (void)state;
#ifdef CHOIR_HAVE_CUDA
    assert_int_equal(choir_model_whisper.gpu, 1);
    assert_non_null(choir_model_whisper.device_bytes);
    assert_non_null(choir_model_whisper.estimate_device);
    assert_true(choir_model_whisper.estimate_device(NULL, NULL) > 0);
#else
    assert_int_equal(choir_model_whisper.gpu, 0);
    assert_null(choir_model_whisper.estimate_device);
#endif
    choir_model_options opt = {.device = CHOIR_DEVICE_GPU(63)};
    choir_err err = {0};
    void *w = choir_model_whisper.load(g_dir, &opt, &err);
    assert_null(w);
#ifdef CHOIR_HAVE_CUDA
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
#else
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
#endif
    /* On the CPU the same load works. */
    opt.device = CHOIR_DEVICE_CPU;
    w = choir_model_whisper.load(g_dir, &opt, &err);
    assert_non_null(w);
    choir_model_whisper.free(w);
}

/* Device bytes per window of a batch, large-v3-turbo: cross K/V of 4 layers
 * (2 x 4 x 1500 x 1280 floats), 5 hypotheses' caches (2 x 4 x 448 x 1280)
 * and logits (51866), and prompt rows (228 x (6 x 1280 + 5120)). */
static void test_window_bytes(void **state) {
    (void)state;
    choir_whisper_dims D = {128, 1500, 32, 448, 4, 1280, 20, 5120, 51866};
    int64_t cross = 2LL * 4 * 1500 * 1280 * 4, self = 2LL * 4 * 448 * 1280 * 4;
    int64_t want = cross + 5 * (self + 51866LL * 4) + 228LL * (6 * 1280 + 5120) * 4;
    assert_int_equal(choir_whisper_gpu_window_bytes(&D, 5), want);
    assert_int_equal(choir_whisper_gpu_window_bytes(NULL, 5), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_opts),
        cmocka_unit_test(test_attach),
        cmocka_unit_test(test_adapter),
        cmocka_unit_test(test_window_bytes),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
