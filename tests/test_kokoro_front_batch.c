// ctest: labels=slow
/* Kokoro's batched front (kk_front_batch), the stage-by-stage front that a
 * GPU batch runs, on the randw-v1 fixture weights without a GPU: every
 * stage then runs on the CPU, so each piece must equal kk_front on it alone
 * bit for bit (frames, asr, F0, N, seeded noise), whatever the pieces'
 * lengths, speeds and noise modes. A bad piece fails the whole batch naming
 * its index and leaves nothing allocated. (tests/cuda/kokoro_gpu_check.c
 * checks the same on a GPU, within 1e-5.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/kokoro.h"
#include "choir/randw.h"
#include "models/kokoro/kokoro_internal.h"
#include "testutil.h"

static choir_kokoro *g_model;

static int setup(void **state) {
    (void)state;
    choir_err err = {0};
    const char *dir = tu_tmpfile("model");
    if (choir_randw_write_checkpoint(tu_fixture("kokoro/kokoro-v1/manifest.json"),
                                     tu_fixture("kokoro/kokoro-v1/config.json"), dir, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    g_model = choir_kokoro_load(dir, &err);
    if (!g_model) fprintf(stderr, "%s\n", err.msg);
    return g_model ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    choir_kokoro_free(g_model);
    return 0;
}

enum { K = 4 };
static const int n_ids[K] = {19, 57, 34, 3};

static void make_pieces(int32_t ids[K][64], float style[K][256], choir_kokoro_params ps[K]) {
    uint32_t r = 12345;
    for (int b = 0; b < K; b++) {
        ids[b][0] = 0, ids[b][n_ids[b] - 1] = 0;
        for (int t = 1; t < n_ids[b] - 1; t++) ids[b][t] = (int32_t)((t * 37 + 11 * b + 5) % 177 + 1);
        for (int i = 0; i < 256; i++) {
            r = r * 1664525u + 1013904223u;
            style[b][i] = (float)(r >> 8) / (float)(1u << 24) - 0.5f;
        }
        ps[b] = choir_kokoro_default_params();
        ps[b].seed = 11 + (uint64_t)b;
    }
    ps[2].speed = 1.3f;
    ps[3].noise = CHOIR_KOKORO_NOISE_ZERO;
}

static void test_batched_front_equals_alone(void **state) {
    (void)state;
    int32_t ids[K][64];
    float style[K][256];
    choir_kokoro_params ps[K];
    make_pieces(ids, style, ps);
    kk_piece alone[K], batch[K];
    choir_err err = {0};
    for (int b = 0; b < K; b++)
        assert_int_equal(kk_front(g_model, ids[b], n_ids[b], style[b], &ps[b], &alone[b], &err), 0);
    const int32_t *ip[K] = {ids[0], ids[1], ids[2], ids[3]};
    const float *sp[K] = {style[0], style[1], style[2], style[3]};
    assert_int_equal(kk_front_batch(g_model, K, ip, n_ids, sp, ps, batch, &err), 0);
    for (int b = 0; b < K; b++) {
        const int64_t L = alone[b].L;
        assert_true(L >= n_ids[b]);
        assert_int_equal(batch[b].L, L);
        assert_memory_equal(batch[b].asr, alone[b].asr, (size_t)(512 * L) * sizeof(float));
        assert_memory_equal(batch[b].f0, alone[b].f0, (size_t)(2 * L) * sizeof(float));
        assert_memory_equal(batch[b].n, alone[b].n, (size_t)(2 * L) * sizeof(float));
        /* the noise travels as its seed (drawn where the decoder makes the source) */
        assert_int_equal(alone[b].seeded, b != 3);
        assert_int_equal(batch[b].seeded, b != 3);
        if (b != 3) assert_true(batch[b].seed == alone[b].seed);
    }
    /* the speed reached piece 2 only: its frames differ from piece 2 at speed 1 */
    kk_piece slow;
    choir_kokoro_params p1 = ps[2];
    p1.speed = 1.0f;
    assert_int_equal(kk_front(g_model, ids[2], n_ids[2], style[2], &p1, &slow, &err), 0);
    assert_true(slow.L > batch[2].L);
    kk_piece_free(&slow);
    for (int b = 0; b < K; b++) kk_piece_free(&alone[b]), kk_piece_free(&batch[b]);
}

static void test_bad_piece_fails_the_batch(void **state) {
    (void)state;
    int32_t ids[K][64];
    float style[K][256];
    choir_kokoro_params ps[K];
    make_pieces(ids, style, ps);
    const int32_t bad_ids[5] = {0, 5, 400, 7, 0};
    const int32_t *ip[2] = {ids[0], bad_ids};
    const float *sp[2] = {style[0], style[1]};
    const int nn[2] = {n_ids[0], 5};
    kk_piece out[2];
    choir_err err = {0};
    assert_int_equal(kk_front_batch(g_model, 2, ip, nn, sp, ps, out, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "batch item 1"));
    assert_non_null(strstr(err.msg, "id 400"));
    assert_null(out[0].asr);
    assert_null(out[1].asr);

    const int short_n[2] = {n_ids[0], 2}; /* fewer than 3 ids */
    choir_err e2 = {0};
    assert_int_equal(kk_front_batch(g_model, 2, ip, short_n, sp, ps, out, &e2), CHOIR_EINVAL);
    assert_non_null(strstr(e2.msg, "batch item 1"));

    choir_kokoro_params fast[2] = {ps[0], ps[1]};
    fast[0].speed = 0.0f;
    choir_err e3 = {0};
    const int32_t *good[2] = {ids[0], ids[1]};
    assert_int_equal(kk_front_batch(g_model, 2, good, n_ids, sp, fast, out, &e3), CHOIR_EINVAL);
    assert_non_null(strstr(e3.msg, "batch item 0"));

    choir_err e4 = {0};
    assert_int_equal(kk_front_batch(g_model, 0, good, n_ids, sp, ps, out, &e4), CHOIR_EINVAL);
    assert_int_equal(kk_front_batch(NULL, 2, good, n_ids, sp, ps, out, &e4), CHOIR_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_front_equals_alone),
        cmocka_unit_test(test_bad_piece_fails_the_batch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
